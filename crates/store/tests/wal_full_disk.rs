//! A real full disk and a real read-only file system.
//!
//! Full disk: the log lives on a 1 MiB tmpfs. Appenders get a clear `ENOSPC` error
//! (waiters on records that did not make it, then `Unavailable` for new appends), the
//! process keeps running, everything acknowledged stays readable, a reopen on the full disk
//! still recovers (the log opens in its failed state), and once space is freed the log
//! accepts appends again.
//!
//! Read-only: a log with a torn tail on a tmpfs remounted read-only still opens and
//! replays everything good (so the node can serve reads), refuses appends with `EROFS`, and
//! once the file system is writable again completes its repair and accepts appends.
//!
//! Mounting needs root (or CAP_SYS_ADMIN), as on the CI machine; where it is not permitted
//! the test fails and says why (a test that cannot run is not a pass).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use store::wal::{DiskErrorKind, FsyncPolicy, Lsn, WalError, WalOptions};

fn tmpfs() -> Tmpfs {
    Tmpfs::mount("1m")
}

/// Appends 4 KiB records, acknowledging each at the durable level, until the disk refuses
/// one. Returns the acknowledged LSNs and the error.
async fn fill(wal: &store::wal::Wal) -> (Vec<Lsn>, WalError) {
    let mut acked = Vec::new();
    for i in 0..10_000u64 {
        let result = match wal.append(bytes::Bytes::from(vec![i as u8; 4096])).await {
            Ok(lsn) => wal.wait_durable(lsn).await.map(|()| lsn),
            Err(e) => Err(e),
        };
        match result {
            Ok(lsn) => acked.push(lsn),
            Err(e) => return (acked, e),
        }
    }
    panic!("a 1 MiB disk took 40 MB");
}

fn check(dir: &Path, preallocate: bool) {
    let options = WalOptions {
        fsync: FsyncPolicy::Always,
        segment_bytes: 128 << 10,
        preallocate,
        retry_interval_ms: 50,
        ..WalOptions::default()
    };
    // Some space taken by something else, freed later.
    let filler = dir.join("filler");
    std::fs::write(&filler, vec![1u8; 192 << 10]).unwrap();
    let log_dir = dir.join("wal");
    let acked = rt().block_on(async {
        let (wal, ..) = open(&log_dir, options.clone());
        let (acked, err) = fill(&wal).await;
        assert!(err.is_no_space(), "preallocate={preallocate}: {err}");
        assert!(acked.len() > 50, "{}", acked.len());
        // New appends are refused with the cause, immediately.
        let refused = wal
            .append(bytes::Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, WalError::Unavailable(e) if e.kind == DiskErrorKind::NoSpace),
            "{refused}"
        );
        let s = wal.stats();
        assert!(s.failed && s.failures >= 1 && s.write_errors >= 1, "{s:?}");
        // Reads of the log keep working while it is failed.
        let (_, log) = read_back(&log_dir);
        let lsns: Vec<Lsn> = log.iter().map(|(l, _)| *l).collect();
        assert_eq!(lsns, acked, "everything acknowledged is readable");
        wal.close().await.unwrap();
        acked
    });
    // Reopening on the still-full disk recovers everything and opens in the failed state.
    let (wal, rec, log) = open(&log_dir, options.clone());
    assert_eq!(log.len(), acked.len(), "{rec:?}");
    rt().block_on(async {
        if preallocate {
            let err = wal
                .append(bytes::Bytes::from_static(b"x"))
                .await
                .unwrap_err();
            assert!(err.is_no_space(), "{err}");
        }
        // Free space: the next retry succeeds and appends are acknowledged again.
        std::fs::remove_file(&filler).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let lsn = loop {
            match wal.append(bytes::Bytes::from_static(b"after")).await {
                Ok(lsn) => match wal.wait_durable(lsn).await {
                    Ok(()) => break lsn,
                    Err(e) => assert!(e.is_no_space(), "{e}"),
                },
                Err(e) => assert!(e.is_no_space(), "{e}"),
            }
            assert!(
                Instant::now() < deadline,
                "never recovered after space was freed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(lsn > *acked.last().unwrap());
        wal.close().await.unwrap();
    });
    let (rec, log) = read_back(&log_dir);
    assert_eq!(rec.corruption, None);
    assert_eq!(log.len(), acked.len() + 1);
    assert_eq!(log.last().unwrap().1, b"after");
}

#[test]
fn full_disk_gives_writers_an_error_and_keeps_reads() {
    let fs = tmpfs();
    for preallocate in [false, true] {
        let dir = fs.path.join(format!("prealloc-{preallocate}"));
        std::fs::create_dir(&dir).unwrap();
        check(&dir, preallocate);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn read_only_file_system_still_recovers_and_serves_reads() {
    let fs = tmpfs();
    let dir = fs.path.join("wal");
    let options = WalOptions {
        fsync: FsyncPolicy::Always,
        segment_bytes: 64 << 10,
        retry_interval_ms: 50,
        ..WalOptions::default()
    };
    rt().block_on(async {
        let (wal, ..) = open(&dir, options.clone());
        for i in 1..=20 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.close().await.unwrap();
    });
    // A torn record at the end, which recovery must cut (a write the disk refuses).
    let seg = segments(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0x55; 10]);
    std::fs::write(&seg, bytes).unwrap();
    fs.remount("ro");

    let (wal, rec, log) = open(&dir, options.clone());
    assert_eq!(log.len(), 20, "{rec:?}");
    assert!(rec.corruption.is_some());
    let refused = wal.health().unwrap_err();
    assert!(
        matches!(&refused, WalError::Unavailable(e) if e.kind == DiskErrorKind::ReadOnly),
        "{refused}"
    );
    rt().block_on(async {
        let err = wal
            .append(bytes::Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(matches!(err, WalError::Unavailable(_)), "{err}");
        fs.remount("rw");
        let deadline = Instant::now() + Duration::from_secs(10);
        while wal.health().is_err() {
            assert!(
                Instant::now() < deadline,
                "never recovered after remount rw"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lsn = wal
            .append(bytes::Bytes::from_static(b"after"))
            .await
            .unwrap();
        assert_eq!(lsn, 21);
        wal.wait_durable(lsn).await.unwrap();
        wal.close().await.unwrap();
    });
    let (rec, log) = read_back(&dir);
    assert_eq!(rec.corruption, None, "the torn tail was cut once writable");
    assert_eq!(log.len(), 21);
}
