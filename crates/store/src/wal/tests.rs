//! Unit tests of the log as a whole: policies, group commit, back-pressure, snapshots, and
//! disk failures injected into the writer.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::wal::error::{DiskError, DiskErrorKind, WalError};
use crate::wal::format::{self, FileKind};
use crate::wal::shared::Shared;
use crate::wal::{inspect, FsyncPolicy, Lsn, Recovery, Replayed, Wal, WalOptions};

/// Faults the writer hits next, by operation (`write`, `fsync`, `create`).
#[derive(Default)]
pub(crate) struct Faults {
    /// (operation, errno), taken in order, each once.
    pub pending: Vec<(&'static str, i32)>,
    /// While set, the writer stalls before each write.
    pub pause: Option<Arc<AtomicBool>>,
}

impl Faults {
    /// Fails `op` on `path` if a fault for it is pending (after waiting out a pause).
    pub fn check(shared: &Shared, op: &'static str, path: &Path) -> Result<(), DiskError> {
        let pause = shared.faults.lock().unwrap().pause.clone();
        if let Some(pause) = pause {
            while pause.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut f = shared.faults.lock().unwrap();
        match f.pending.iter().position(|(o, _)| *o == op) {
            Some(i) => {
                let (_, errno) = f.pending.remove(i);
                Err(DiskError::new(
                    op,
                    path,
                    &io::Error::from_raw_os_error(errno),
                ))
            }
            None => Ok(()),
        }
    }
}

fn inject(wal: &Wal, op: &'static str, errno: i32) {
    wal.shared()
        .faults
        .lock()
        .unwrap()
        .pending
        .push((op, errno));
}

type Records = Vec<(Lsn, Vec<u8>)>;

/// Opens `dir`, collecting what recovery replays: (snapshot records, log records).
fn open(dir: &Path, options: WalOptions) -> (Wal, Recovery, Vec<Vec<u8>>, Records) {
    let mut snap = Vec::new();
    let mut log = Vec::new();
    let (wal, rec) = Wal::open(dir, options, |item| -> Result<(), io::Error> {
        match item {
            Replayed::Snapshot { record, .. } => snap.push(record.to_vec()),
            Replayed::Log { lsn, payload } => log.push((lsn, payload.to_vec())),
        }
        Ok(())
    })
    .unwrap();
    (wal, rec, snap, log)
}

fn read_back(dir: &Path) -> Records {
    let mut log = Vec::new();
    inspect(dir, |item| -> Result<(), io::Error> {
        if let Replayed::Log { lsn, payload } = item {
            log.push((lsn, payload.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    log
}

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("record-{i:06}-{}", "x".repeat((i % 50) as usize)))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn segments(dir: &Path) -> Vec<(Lsn, PathBuf)> {
    format::list_dir(dir).unwrap().segments
}

fn opts(fsync: FsyncPolicy) -> WalOptions {
    WalOptions {
        fsync,
        segment_bytes: 1 << 20,
        retry_interval_ms: 20,
        ..WalOptions::default()
    }
}

#[test]
fn round_trip_and_continue_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
        assert!(log.is_empty());
        assert_eq!(rec.last_lsn, 0);
        for i in 1..=100 {
            assert_eq!(wal.append(payload(i)).await.unwrap(), i);
        }
        wal.wait_durable(100).await.unwrap();
        let s = wal.stats();
        assert_eq!((s.appends, s.last_lsn, s.durable_lsn), (100, 100, 100));
        wal.close().await.unwrap();
    });
    rt().block_on(async {
        let (wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
        assert_eq!(rec.records_replayed, 100);
        assert_eq!(rec.last_lsn, 100);
        assert_eq!(rec.corruption, None);
        let expected: Records = (1..=100).map(|i| (i, payload(i).to_vec())).collect();
        assert_eq!(log, expected);
        assert_eq!(wal.append(payload(101)).await.unwrap(), 101);
        wal.close().await.unwrap();
    });
    assert_eq!(read_back(dir.path()).len(), 101);
}

#[test]
fn segments_rotate_by_size_and_are_named_by_base() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        segment_bytes: 4096,
        ..opts(FsyncPolicy::Never)
    };
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), options.clone());
        for i in 1..=300 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.close().await.unwrap();
    });
    let segs = segments(dir.path());
    assert!(segs.len() >= 4, "{segs:?}");
    assert_eq!(segs[0].0, 1);
    for (base, path) in &segs {
        let bytes = fs::read(path).unwrap();
        assert!(bytes.len() as u64 <= 4096, "{} bytes", bytes.len());
        assert_eq!(format::decode_header(FileKind::Segment, &bytes), Ok(*base));
    }
    let back = read_back(dir.path());
    assert_eq!(back.len(), 300);
    // Each segment's base is the LSN of its first record.
    for (base, _) in &segs {
        assert!(back.iter().any(|(lsn, _)| lsn == base));
    }
}

#[test]
fn group_commit_batches_concurrent_appends_into_few_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        let wal = std::rc::Rc::new(wal);
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let mut tasks = Vec::new();
                for t in 0..64u64 {
                    let wal = wal.clone();
                    tasks.push(tokio::task::spawn_local(async move {
                        for i in 0..20u64 {
                            let lsn = wal.append(payload(t * 1000 + i)).await.unwrap();
                            wal.wait_durable(lsn).await.unwrap();
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            })
            .await;
        let s = wal.stats();
        assert_eq!(s.appends, 1280);
        assert!(s.max_batch_records > 1, "{s:?}");
        assert!(s.fsyncs < s.appends / 2, "{s:?}");
        assert_eq!(s.batch_records, 1280);
        assert_eq!(s.batch_histogram.iter().sum::<u64>(), s.batches);
        wal.close().await.unwrap();
    });
}

#[test]
fn always_acknowledges_only_after_fsync() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        let watch = wal.watch();
        for i in 1..=50 {
            let lsn = wal.append(payload(i)).await.unwrap();
            wal.wait_durable(lsn).await.unwrap();
            assert!(watch.synced_lsn() >= lsn);
            assert_eq!(watch.durable_status(lsn).map(|r| r.is_ok()), Some(true));
        }
        assert!(wal.stats().fsyncs >= 1);
        wal.close().await.unwrap();
    });
}

#[test]
fn periodic_acknowledges_after_write_and_fsyncs_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(300);
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Periodic { interval }));
        // Let the first periodic window pass so the next fsync is a full interval away.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let lsn = wal.append(payload(1)).await.unwrap();
        let t = Instant::now();
        wal.wait_durable(lsn).await.unwrap();
        let acked = t.elapsed();
        assert!(
            acked < interval,
            "durable after {acked:?}, not after the write"
        );
        wal.wait_synced(lsn).await.unwrap();
        let synced = t.elapsed();
        assert!(
            synced <= interval + Duration::from_millis(200),
            "{synced:?}"
        );
        // Nothing new written: no further fsyncs.
        let fsyncs = wal.stats().fsyncs;
        tokio::time::sleep(interval * 2).await;
        assert_eq!(wal.stats().fsyncs, fsyncs);
        wal.close().await.unwrap();
    });
}

#[test]
fn never_acknowledges_after_write_and_fsyncs_only_on_request() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Never));
        let watch = wal.watch();
        let lsn = wal.append(payload(1)).await.unwrap();
        wal.wait_durable(lsn).await.unwrap();
        assert!(watch.written_lsn() >= lsn);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(watch.synced_lsn(), 0);
        assert_eq!(wal.stats().fsyncs, 0);
        assert_eq!(wal.sync().await.unwrap(), lsn);
        assert!(watch.synced_lsn() >= lsn);
        wal.close().await.unwrap();
    });
}

#[test]
fn written_payloads_buffers_come_back_for_reuse() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        assert!(wal.reuse_buffer().is_none(), "nothing written yet");
        let mut payload = Vec::with_capacity(4096);
        payload.extend_from_slice(b"first");
        let lsn = wal.try_append_or_keep(Bytes::from(payload)).unwrap();
        wal.wait_durable(lsn).await.unwrap();
        let back = wal.reuse_buffer().expect("the written payload's buffer");
        assert!(
            back.is_empty() && back.capacity() >= 4096,
            "{}",
            back.capacity()
        );
        // Nor one above the size kept.
        let mut large = Vec::with_capacity(2 << 20);
        large.push(1u8);
        let lsn = wal.try_append(Bytes::from(large)).unwrap();
        wal.wait_durable(lsn).await.unwrap();
        assert!(wal.reuse_buffer().is_none(), "a 2 MiB buffer is not kept");
        // A payload someone still holds a reference to is not taken from them.
        let shared = Bytes::from(vec![7u8; 64]);
        let lsn = wal.try_append(shared.clone()).unwrap();
        wal.wait_durable(lsn).await.unwrap();
        assert!(wal.reuse_buffer().is_none());
        assert_eq!(&shared[..], &[7u8; 64][..]);
        // At most SPENT_BUFFERS are kept.
        let mut last = 0;
        for _ in 0..10 {
            last = wal.try_append(Bytes::from(vec![1u8; 32])).unwrap();
        }
        wal.wait_durable(last).await.unwrap();
        let mut kept = 0;
        while wal.reuse_buffer().is_some() {
            kept += 1;
        }
        assert!(
            (1..=crate::wal::shared::SPENT_BUFFERS).contains(&kept),
            "{kept}"
        );
    });
}

#[test]
fn full_queue_pushes_back_and_drains() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        max_record_bytes: 100,
        queue_bytes: 1000,
        ..opts(FsyncPolicy::Always)
    };
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), options);
        let pause = Arc::new(AtomicBool::new(true));
        wal.shared().faults.lock().unwrap().pause = Some(pause.clone());
        // The writer takes the first record and stalls on it; then the queue fills.
        let first = wal.try_append(Bytes::from(vec![1u8; 84])).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut queued = Vec::new();
        loop {
            match wal.try_append(Bytes::from(vec![2u8; 84])) {
                Ok(lsn) => queued.push(lsn),
                Err(WalError::QueueFull) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(queued.len(), 10, "1000 bytes of 100-byte records");
        match wal.try_append_or_keep(Bytes::from(vec![4u8; 84])) {
            Err((WalError::QueueFull, Some(back))) => assert_eq!(&back[..], &[4u8; 84][..]),
            other => panic!("expected the payload back with QueueFull: {other:?}"),
        }
        assert!(wal.stats().queue_full >= 1);
        assert!(matches!(
            wal.try_append(Bytes::from(vec![0u8; 101])),
            Err(WalError::RecordTooLarge { len: 101, max: 100 })
        ));
        let blocked = wal.append(Bytes::from(vec![3u8; 84]));
        tokio::pin!(blocked);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), blocked.as_mut())
                .await
                .is_err(),
            "append must wait while the queue is full"
        );
        pause.store(false, Ordering::Release);
        let last = blocked.await.unwrap();
        assert_eq!(last, first + 11);
        wal.wait_durable(last).await.unwrap();
        assert_eq!(wal.stats().rejected_appends, 1);
        wal.close().await.unwrap();
    });
    assert_eq!(read_back(dir.path()).len(), 12);
}

#[test]
fn failed_fsync_fails_its_records_poisons_the_segment_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        for i in 1..=10 {
            let lsn = wal.append(payload(i)).await.unwrap();
            wal.wait_durable(lsn).await.unwrap();
        }
        inject(&wal, "fsync", libc::EIO);
        let lsn = wal.append(payload(11)).await.unwrap();
        let err = wal.wait_durable(lsn).await.unwrap_err();
        assert_eq!(
            err.disk_error().map(|e| e.kind),
            Some(DiskErrorKind::Io),
            "{err}"
        );
        // The immediate retry starts a fresh segment: appends work again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while wal.health().is_err() {
            assert!(Instant::now() < deadline, "never recovered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for i in 12..=20 {
            let lsn = wal.append(payload(i)).await.unwrap();
            wal.wait_durable(lsn).await.unwrap();
        }
        let s = wal.stats();
        assert_eq!(
            (s.fsync_errors, s.failures, s.failed_records),
            (1, 1, 1),
            "{s:?}"
        );
        wal.close().await.unwrap();
    });
    assert_eq!(segments(dir.path()).len(), 2);
    let (wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
    let lsns: Vec<Lsn> = log.iter().map(|(l, _)| *l).collect();
    let expected: Vec<Lsn> = (1..=10).chain(12..=20).collect();
    assert_eq!(lsns, expected, "{rec:?}");
    assert_eq!(rec.corruption, None);
    assert_eq!(rec.last_lsn, 20);
    drop(wal);
}

#[test]
fn failed_write_refuses_appends_until_a_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(
            dir.path(),
            WalOptions {
                retry_interval_ms: 100,
                ..opts(FsyncPolicy::Always)
            },
        );
        let ok = wal.append(payload(1)).await.unwrap();
        wal.wait_durable(ok).await.unwrap();
        // The write fails, and so does the immediate retry's segment creation.
        inject(&wal, "write", libc::ENOSPC);
        inject(&wal, "create", libc::ENOSPC);
        let lsn = wal.append(payload(2)).await.unwrap();
        let err = wal.wait_durable(lsn).await.unwrap_err();
        assert!(err.is_no_space(), "{err}");
        let refused = wal.append(payload(3)).await.unwrap_err();
        assert!(
            matches!(&refused, WalError::Unavailable(e) if e.kind == DiskErrorKind::NoSpace),
            "{refused}"
        );
        assert!(wal.health().is_err());
        let deadline = Instant::now() + Duration::from_secs(5);
        while wal.stats().retries == 0 {
            assert!(Instant::now() < deadline, "no retry");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let s = wal.stats();
        assert!(s.write_errors >= 2 && s.rejected_appends == 1, "{s:?}");
        // The next retry succeeds.
        let deadline = Instant::now() + Duration::from_secs(5);
        while wal.health().is_err() {
            assert!(Instant::now() < deadline, "never recovered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let lsn = wal.append(payload(4)).await.unwrap();
        assert_eq!(lsn, 3, "LSN 2 is abandoned, the refused append took none");
        wal.wait_durable(lsn).await.unwrap();
        // The earlier record is still durable, the failed one is still failed.
        wal.wait_durable(ok).await.unwrap();
        assert!(wal.wait_durable(2).await.is_err());
        assert!(!wal.stats().failed);
        wal.close().await.unwrap();
    });
    let lsns: Vec<Lsn> = read_back(dir.path()).iter().map(|(l, _)| *l).collect();
    assert_eq!(lsns, vec![1, 3]);
}

#[test]
fn periodic_fsync_failure_fails_unsynced_records() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let interval = Duration::from_millis(100);
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Periodic { interval }));
        let first = wal.append(payload(1)).await.unwrap();
        wal.wait_synced(first).await.unwrap();
        inject(&wal, "fsync", libc::EIO);
        let second = wal.append(payload(2)).await.unwrap();
        // Durable (written) at once, then lost with the failed fsync: the documented window.
        wal.wait_durable(second).await.unwrap();
        assert!(wal.wait_synced(second).await.is_err());
        assert!(wal.wait_durable(second).await.is_err());
        wal.wait_synced(first).await.unwrap();
        wal.close().await.unwrap();
    });
    let lsns: Vec<Lsn> = read_back(dir.path()).iter().map(|(l, _)| *l).collect();
    assert_eq!(lsns, vec![1]);
}

#[test]
fn snapshot_truncates_covered_segments_and_recovery_replays_only_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        segment_bytes: 2048,
        ..opts(FsyncPolicy::Always)
    };
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), options.clone());
        for i in 1..=400 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.wait_durable(400).await.unwrap();
        let before = segments(dir.path()).len();
        let mut snap = wal.begin_snapshot(300).unwrap();
        assert!(matches!(
            wal.begin_snapshot(300),
            Err(WalError::InvalidArgument(_))
        ));
        for k in 0..3u8 {
            snap.append(&[k; 10]).unwrap();
        }
        let info = tokio::task::spawn_blocking(move || snap.finish())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(info.lsn, 300);
        assert_eq!(info.records, 3);
        assert!(info.segments_deleted > 0);
        let after = segments(dir.path());
        assert_eq!(after.len(), before - info.segments_deleted);
        // The oldest remaining segment still holds LSN 301.
        let next = after.get(1).map_or(u64::MAX, |s| s.0);
        assert!(after[0].0 <= 301 && next > 301, "{after:?}");
        assert!(matches!(
            wal.begin_snapshot(401),
            Err(WalError::InvalidArgument(_))
        ));
        assert!(matches!(
            wal.begin_snapshot(299),
            Err(WalError::InvalidArgument(_))
        ));
        for i in 401..=450 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.close().await.unwrap();
        assert_eq!(wal.stats().snapshots, 1);
    });
    let (wal, rec, snap, log) = open(dir.path(), options);
    assert_eq!(rec.snapshot_lsn, Some(300));
    assert_eq!(snap, vec![vec![0u8; 10], vec![1u8; 10], vec![2u8; 10]]);
    let lsns: Vec<Lsn> = log.iter().map(|(l, _)| *l).collect();
    assert_eq!(lsns, (301..=450).collect::<Vec<_>>());
    assert_eq!(rec.last_lsn, 450);
    drop(wal);
}

#[test]
fn snapshot_crash_points_leave_old_or_new_state() {
    let dir = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    let options = WalOptions {
        segment_bytes: 1024,
        ..opts(FsyncPolicy::Always)
    };
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), options.clone());
        for i in 1..=100 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.wait_durable(100).await.unwrap();
        let mut s = wal.begin_snapshot(50).unwrap();
        s.append(b"old").unwrap();
        s.finish().unwrap();
        for i in 101..=200 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.wait_durable(200).await.unwrap();
        // Keep the files a crash right after the next rename would leave behind.
        for e in fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            fs::copy(&p, backup.path().join(p.file_name().unwrap())).unwrap();
        }
        wal.close().await.unwrap();
    });
    // A crash while writing a snapshot leaves its partial temporary file.
    let partial = dir.path().join(format!(
        "{}{}",
        format::snapshot_name(150),
        format::TMP_SUFFIX
    ));
    fs::write(
        &partial,
        &format::encode_header(FileKind::Snapshot, 150)[..20],
    )
    .unwrap();
    // Crash during the write: the temporary is ignored, the old snapshot used.
    let (wal, rec, snap, log) = open(dir.path(), options.clone());
    assert_eq!(rec.snapshot_lsn, Some(50));
    assert_eq!(snap, vec![b"old".to_vec()]);
    assert_eq!(log.first().map(|r| r.0), Some(51));
    assert_eq!(log.last().map(|r| r.0), Some(200));
    assert!(format::list_dir(dir.path()).unwrap().temporary.is_empty());
    let mut s = wal.begin_snapshot(150).unwrap();
    s.append(b"new").unwrap();
    s.finish().unwrap();
    rt().block_on(wal.close()).unwrap();
    // Crash after the rename, before old snapshot and segments were deleted: put them back.
    for e in fs::read_dir(backup.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap();
        if format::parse_name(name.to_str().unwrap()).is_some() {
            let target = dir.path().join(name);
            if !target.exists() {
                fs::copy(&p, target).unwrap();
            }
        }
    }
    let (wal, rec, snap, log) = open(dir.path(), options);
    assert_eq!(rec.snapshot_lsn, Some(150));
    assert_eq!(snap, vec![b"new".to_vec()]);
    assert_eq!(log.first().map(|r| r.0), Some(151));
    assert_eq!(log.last().map(|r| r.0), Some(200));
    assert!(rec.segments_deleted > 0, "{rec:?}");
    let listing = format::list_dir(dir.path()).unwrap();
    assert_eq!(listing.snapshots.len(), 1, "the old snapshot is deleted");
    drop(wal);
}

#[test]
fn damaged_snapshot_falls_back_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        for i in 1..=20 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.wait_durable(20).await.unwrap();
        let mut s = wal.begin_snapshot(10).unwrap();
        s.append(b"state").unwrap();
        s.finish().unwrap();
        wal.close().await.unwrap();
    });
    let snap_path = dir.path().join(format::snapshot_name(10));
    let len = fs::metadata(&snap_path).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&snap_path).unwrap();
    f.set_len(len - 3).unwrap();
    let (_wal, rec, snap, log) = open(dir.path(), opts(FsyncPolicy::Always));
    assert_eq!(rec.invalid_snapshots, 1);
    assert_eq!(rec.snapshot_lsn, None);
    assert!(snap.is_empty());
    assert_eq!(log.len(), 20, "one segment: the whole log is still there");
}

#[test]
fn missing_history_is_an_error_not_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        segment_bytes: 1024,
        ..opts(FsyncPolicy::Always)
    };
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), options.clone());
        for i in 1..=100 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.close().await.unwrap();
    });
    let first = segments(dir.path())[0].1.clone();
    fs::remove_file(first).unwrap();
    let result = Wal::open(dir.path(), options, |_| Ok::<(), io::Error>(()));
    assert!(matches!(result, Err(WalError::Corrupt(_))), "{result:?}");
}

#[test]
fn replay_errors_abort_recovery_without_changes() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        wal.append(payload(1)).await.unwrap();
        wal.close().await.unwrap();
    });
    let before = segments(dir.path());
    let result = Wal::open(dir.path(), opts(FsyncPolicy::Always), |_| {
        Err(io::Error::other("cannot apply"))
    });
    assert!(matches!(result, Err(WalError::Replay(_))), "{result:?}");
    assert_eq!(segments(dir.path()), before);
}

#[test]
fn second_open_of_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
    let again = Wal::open(dir.path(), opts(FsyncPolicy::Always), |_| {
        Ok::<(), io::Error>(())
    });
    assert!(matches!(again, Err(WalError::Locked(_))), "{again:?}");
}

/// Builds a segment file by hand.
fn write_segment(dir: &Path, base: Lsn, records: &[(Lsn, &[u8])], garbage: &[u8]) {
    let mut bytes = format::encode_header(FileKind::Segment, base).to_vec();
    for (lsn, p) in records {
        format::encode_record(&mut bytes, *lsn, p);
    }
    bytes.extend_from_slice(garbage);
    fs::write(dir.join(format::segment_name(base)), bytes).unwrap();
}

#[test]
fn tail_abandoned_after_a_failure_does_not_end_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // Segment 1 holds 1..=3, then record 4 (failed, never acknowledged) and a torn record;
    // the writer started segment 4 after the failure, whose first record is 6 (LSN 5 was
    // queued when the failure happened, and abandoned too).
    write_segment(
        dir.path(),
        1,
        &[(1, b"a"), (2, b"b"), (3, b"c"), (4, b"failed")],
        &[9, 9, 9, 9, 9],
    );
    write_segment(dir.path(), 4, &[(6, b"f"), (7, b"g")], &[]);
    let (wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
    let lsns: Vec<Lsn> = log.iter().map(|(l, _)| *l).collect();
    assert_eq!(lsns, vec![1, 2, 3, 6, 7]);
    assert_eq!(rec.corruption, None);
    assert!(rec.bytes_abandoned > 0);
    assert_eq!(wal.last_lsn(), 7);
    drop(wal);
    // The abandoned tail was cut.
    let len = fs::metadata(dir.path().join(format::segment_name(1)))
        .unwrap()
        .len();
    assert_eq!(len, (32 + 3 * 17) as u64);
}

#[test]
fn gap_between_segments_ends_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // Segment 1 ends at 3 with a torn record, but segment 10 says records up to 9 existed.
    write_segment(dir.path(), 1, &[(1, b"a"), (2, b"b"), (3, b"c")], &[7; 20]);
    write_segment(dir.path(), 10, &[(10, b"j")], &[]);
    let (wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
    assert_eq!(log.len(), 3);
    let c = rec.corruption.expect("corruption reported");
    assert!(c.segment.ends_with(format::segment_name(1)), "{c:?}");
    assert_eq!(rec.segments_discarded, 1);
    assert_eq!(wal.last_lsn(), 3);
    assert_eq!(
        segments(dir.path()).len(),
        2,
        "segment 10 deleted, segment 4 created"
    );
}

#[test]
fn out_of_order_lsn_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), 1, &[(1, b"a"), (2, b"b"), (5, b"e")], &[]);
    let (_wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
    assert_eq!(log.len(), 2);
    assert!(rec.corruption.unwrap().reason.contains("out of order"));
}

#[test]
fn damaged_segment_header_ends_the_log_before_it() {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), 1, &[(1, b"a"), (2, b"b")], &[]);
    write_segment(dir.path(), 3, &[(3, b"c")], &[]);
    write_segment(dir.path(), 4, &[(4, b"d")], &[]);
    let second = dir.path().join(format::segment_name(3));
    let mut bytes = fs::read(&second).unwrap();
    bytes[3] ^= 0xff;
    fs::write(&second, bytes).unwrap();
    let (_wal, rec, _, log) = open(dir.path(), opts(FsyncPolicy::Always));
    assert_eq!(log.len(), 2);
    let c = rec.corruption.expect("reported");
    assert_eq!((c.segment, c.offset), (second, 0));
    assert_eq!(rec.segments_discarded, 1);
}

#[test]
fn waits_end_when_the_log_closes() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (wal, ..) = open(dir.path(), opts(FsyncPolicy::Always));
        let mut watch = wal.watch();
        let lsn = wal.append(payload(1)).await.unwrap();
        wal.close().await.unwrap();
        watch.wait_durable(lsn).await.unwrap();
        assert!(matches!(
            wal.append(payload(2)).await,
            Err(WalError::Closed)
        ));
        // An LSN that will never come: the wait ends instead of hanging.
        assert!(matches!(
            watch.wait_durable(lsn + 1).await,
            Err(WalError::Closed)
        ));
        drop(wal);
        assert!(watch.wait_durable(lsn).await.is_ok());
    });
}
