//! The disk engine on a real, small file system that fills up: a tmpfs mounted for the
//! test (needs root, like the CI machine; the test fails, not skips, without it).

use std::path::Path;

mod common;

use common::Tmpfs;
use lattice::{Lww, Record, Timestamp, Value};
use store::{DiskDb, DiskOptions, StoreError};

fn record(i: u64, size: usize) -> Record {
    let ts = Timestamp::new((i + 1) << 16, 1);
    Record::new(
        ts,
        Some(Value::Lww(Lww::new(
            ts,
            vec![b'x'; size].into_boxed_slice(),
        ))),
    )
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

fn options() -> DiskOptions {
    DiskOptions {
        cache_bytes: 1 << 20,
        background_threads: 1,
        ..DiskOptions::default()
    }
}

/// Writes with the space check until it refuses; returns how many were written.
fn fill(db: &DiskDb, store: &mut store::DiskStore, reserve: u64, from: u64) -> (u64, StoreError) {
    let mut i = from;
    loop {
        if let Err(e) = db.check_space(reserve) {
            return (i, e);
        }
        store.merge(&key(i), record(i, 16 * 1024)).unwrap();
        db.persist(false).unwrap();
        i += 1;
        assert!(i < from + 100_000, "the file system never filled up");
    }
}

#[test]
fn a_full_disk_refuses_writes_keeps_reads_and_recovers_when_space_is_freed() {
    let fs = Tmpfs::mount("24m");
    let ballast = fs.path.join("ballast");
    std::fs::write(&ballast, vec![0u8; 8 << 20]).unwrap();
    let db = DiskDb::open(&fs.path.join("db"), &options()).unwrap();
    let mut store = db.shard(0).unwrap();
    let reserve = 2 << 20;
    let (written, err) = fill(&db, &mut store, reserve, 0);
    assert!(written > 10, "only {written} writes fit");
    assert!(
        matches!(err, StoreError::DiskFull(_)),
        "expected a disk-full error, got {err}"
    );
    assert!(err.to_string().contains("below the reserve"), "{err}");
    // Reads keep working.
    for i in [0, written / 2, written - 1] {
        assert!(store.get(&key(i)).unwrap().unwrap().is_live(), "key {i}");
    }
    // Space comes back: writes resume without a restart.
    std::fs::remove_file(&ballast).unwrap();
    db.check_space(reserve).expect("space was freed");
    let (more, _) = fill(&db, &mut store, reserve, written);
    assert!(
        more > written + 10,
        "writes did not resume ({written} → {more})"
    );
    assert_eq!(store.live_keys() as u64, more);
}

#[test]
fn enospc_inside_the_engine_is_an_error_not_a_crash_and_reads_survive_it() {
    let fs = Tmpfs::mount("16m");
    let dir: &Path = &fs.path;
    let db = DiskDb::open(&dir.join("db"), &options()).unwrap();
    let mut store = db.shard(0).unwrap();
    // No reserve: run into the wall.
    let mut first_error = None;
    let mut acked = 0u64;
    for i in 0..100_000u64 {
        let result = store
            .merge(&key(i), record(i, 16 * 1024))
            .and_then(|_| db.persist(false));
        match result {
            Ok(()) => acked = i + 1,
            Err(e) => {
                first_error = Some(e);
                break;
            }
        }
    }
    let err = first_error.expect("the file system never filled up");
    assert!(err.is_disk_failure(), "expected a disk failure, got {err}");
    // Later writes are refused with a clear error; reads of acknowledged keys still work.
    let again = store
        .merge(&key(1_000_000), record(1, 10))
        .and_then(|_| db.persist(false));
    assert!(again.is_err(), "a write after the failure was accepted");
    for i in [0, acked / 2, acked.saturating_sub(1)] {
        assert!(store.get(&key(i)).unwrap().unwrap().is_live(), "key {i}");
    }
}
