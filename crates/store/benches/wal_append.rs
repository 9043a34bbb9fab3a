//! Appends per second through a [`store::wal::Wal`], per fsync policy and per number of concurrent
//! appenders, on the machine's real disk (a temporary directory).
//!
//! - `wal/<policy>/durable-<C>`: `C` tasks on one current-thread runtime (like a worker's
//!   connections), each appending 100-byte records and awaiting each one's durability
//!   before the next. With `always` every batch is one fsync, so throughput grows with `C`
//!   (group commit) instead of being one fsync per write.
//! - `wal/<policy>/pipelined`: one task appends without waiting and awaits durability of the
//!   last record of each 1,000 (a worker acknowledging at the local level, or a pipeline).
//!
//! Run: `cargo bench -p latticekv-store --bench wal_append`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use store::wal::{FsyncPolicy, Wal, WalOptions};

const RECORD: usize = 100;

fn open(dir: &std::path::Path, fsync: FsyncPolicy) -> Wal {
    let options = WalOptions {
        fsync,
        ..WalOptions::default()
    };
    Wal::open(dir, options, |_| Ok::<(), std::io::Error>(()))
        .unwrap()
        .0
}

/// `n` appends by `tasks` tasks, each awaiting durability of every record.
async fn durable(wal: &Rc<Wal>, tasks: u64, n: u64) {
    let per_task = n.div_ceil(tasks);
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let wal = wal.clone();
                    tokio::task::spawn_local(async move {
                        let payload = Bytes::from(vec![7u8; RECORD]);
                        for _ in 0..per_task {
                            let lsn = wal.append(payload.clone()).await.unwrap();
                            wal.wait_durable(lsn).await.unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.await.unwrap();
            }
        })
        .await;
}

/// `n` appends without waiting, awaiting durability once per 1,000.
async fn pipelined(wal: &Wal, n: u64) {
    let payload = Bytes::from(vec![7u8; RECORD]);
    let mut last = 0;
    for i in 0..n {
        last = wal.append(payload.clone()).await.unwrap();
        if i % 1000 == 999 {
            wal.wait_durable(last).await.unwrap();
        }
    }
    wal.wait_durable(last).await.unwrap();
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policies = [
        ("always", FsyncPolicy::Always),
        (
            "periodic-100ms",
            FsyncPolicy::Periodic {
                interval: Duration::from_millis(100),
            },
        ),
        ("never", FsyncPolicy::Never),
    ];
    let mut group = c.benchmark_group("wal");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    for (name, policy) in policies {
        let dir = tempfile::tempdir().unwrap();
        let wal = Rc::new(open(dir.path(), policy));
        for tasks in [1u64, 16, 256] {
            group.bench_function(format!("{name}/durable-{tasks}"), |b| {
                b.iter_custom(|iters| {
                    let started = Instant::now();
                    rt.block_on(durable(&wal, tasks, iters));
                    started.elapsed()
                })
            });
        }
        group.bench_function(format!("{name}/pipelined"), |b| {
            b.iter_custom(|iters| {
                let started = Instant::now();
                rt.block_on(pipelined(&wal, iters));
                started.elapsed()
            })
        });
        let s = wal.stats();
        eprintln!(
            "{name}: {} appends, {} batches (mean {:.1} records, max {}), {} fsyncs (mean {} µs)",
            s.appends,
            s.batches,
            s.batch_records as f64 / s.batches.max(1) as f64,
            s.max_batch_records,
            s.fsyncs,
            s.fsync_micros / s.fsyncs.max(1)
        );
        rt.block_on(wal.close()).unwrap();
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
