//! Crash test: a child process (this test binary, running `child_writer`) appends from many
//! concurrent tasks and prints each record's LSN once it is acknowledged at the durable
//! level; the parent kills it with SIGKILL mid-stream, recovers the log, and checks that
//! every acknowledged record is there, with its payload, in LSN order.
//!
//! A process kill loses nothing the OS has: under `periodic` and `never` a record is
//! durable once written to the OS, so all three policies must keep every acknowledgement.
//! Their power-failure window (what an fsync protects) cannot be produced by killing a
//! process; the unit tests check instead that `periodic` fsyncs within its interval.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::*;
use store::wal::{FsyncPolicy, Lsn, WalOptions};

const DIR_ENV: &str = "LKV_WAL_CRASH_DIR";
const POLICY_ENV: &str = "LKV_WAL_CRASH_POLICY";

/// The payload of task `t`'s `i`-th record (checkable after recovery).
fn crash_payload(t: u64, i: u64) -> Vec<u8> {
    let mut p = format!("task {t} record {i} ").into_bytes();
    p.resize(64 + ((t * 7 + i) % 200) as usize, b'.');
    p
}

/// The child: runs only when spawned by `kill_9_keeps_every_durable_write`.
#[test]
fn child_writer() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let fsync: FsyncPolicy = std::env::var(POLICY_ENV).unwrap().parse().unwrap();
    let options = WalOptions {
        fsync,
        segment_bytes: 256 << 10,
        ..WalOptions::default()
    };
    let (wal, ..) = open(dir.as_ref(), options);
    let wal = Rc::new(wal);
    rt().block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let mut tasks = Vec::new();
                for t in 0..32u64 {
                    let wal = wal.clone();
                    tasks.push(tokio::task::spawn_local(async move {
                        for i in 0.. {
                            let p = crash_payload(t, i);
                            let lsn = wal.append(bytes::Bytes::from(p)).await.unwrap();
                            wal.wait_durable(lsn).await.unwrap();
                            let mut out = std::io::stdout().lock();
                            writeln!(out, "ack {lsn} {t} {i}").unwrap();
                            out.flush().unwrap();
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            })
            .await;
    });
}

fn crash_once(fsync: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(DIR_ENV, dir.path())
        .env(POLICY_ENV, fsync)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut acks = BTreeMap::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() == 4 && f[0] == "ack" {
                let lsn: Lsn = f[1].parse().unwrap();
                acks.insert(
                    lsn,
                    (f[2].parse::<u64>().unwrap(), f[3].parse::<u64>().unwrap()),
                );
            }
        }
        acks
    });
    // Let it write for a while (and rotate segments), then kill it mid-stream.
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let acks = reader.join().unwrap();
    assert!(
        acks.len() > 100,
        "{fsync}: only {} acks in {:?}",
        acks.len(),
        started.elapsed()
    );

    let (wal, rec, log) = open(dir.path(), WalOptions::default());
    let recovered: BTreeMap<Lsn, Vec<u8>> = log.into_iter().collect();
    for (lsn, (t, i)) in &acks {
        let got = recovered.get(lsn);
        assert_eq!(
            got.map(Vec::as_slice),
            Some(crash_payload(*t, *i).as_slice()),
            "{fsync}: acknowledged LSN {lsn} lost or wrong; {rec:?}"
        );
    }
    // Recovered LSNs are a gap-free prefix (no failures happened).
    let lsns: Vec<Lsn> = recovered.keys().copied().collect();
    assert_eq!(lsns, (1..=lsns.len() as u64).collect::<Vec<_>>(), "{fsync}");
    eprintln!(
        "{fsync}: {} acknowledged, {} recovered, {} segments, corruption: {:?}",
        acks.len(),
        lsns.len(),
        rec.segments_read,
        rec.corruption
    );
    drop(wal);
}

#[test]
fn kill_9_keeps_every_durable_write() {
    if std::env::var(DIR_ENV).is_ok() {
        return; // inside the child
    }
    for fsync in ["always", "periodic:50ms", "never"] {
        crash_once(fsync);
    }
}
