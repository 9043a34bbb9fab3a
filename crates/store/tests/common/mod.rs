//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use store::wal::{Lsn, Recovery, Replayed, Wal, WalOptions};
#[allow(unused_imports)]
pub use testkit::Tmpfs;

/// Log records as (LSN, payload).
pub type Records = Vec<(Lsn, Vec<u8>)>;

/// A current-thread runtime, like a worker's.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens `dir`, collecting the replayed log records.
pub fn open(dir: &Path, options: WalOptions) -> (Wal, Recovery, Records) {
    let mut log = Vec::new();
    let (wal, rec) = Wal::open(dir, options, |item| -> Result<(), io::Error> {
        if let Replayed::Log { lsn, payload } = item {
            log.push((lsn, payload.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    (wal, rec, log)
}

/// Reads the log records of `dir` without changing it.
pub fn read_back(dir: &Path) -> (Recovery, Records) {
    let mut log = Vec::new();
    let rec = store::wal::inspect(dir, |item| -> Result<(), io::Error> {
        if let Replayed::Log { lsn, payload } = item {
            log.push((lsn, payload.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    (rec, log)
}

/// A payload that names its record, of varying length.
pub fn payload(i: u64) -> Bytes {
    Bytes::from(format!("record-{i:06}-{}", "x".repeat((i % 37) as usize)))
}

/// The segments of `dir` by ascending base.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("wal-") && name.ends_with(".log")
        })
        .collect();
    segs.sort();
    segs
}

/// Copies every file of `from` into `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// Offsets of each record (start, end) in a segment holding `lens` payload lengths.
pub fn record_spans(lens: &[usize]) -> Vec<(u64, u64)> {
    let mut off = store::wal::layout::SEGMENT_HEADER_LEN as u64;
    lens.iter()
        .map(|len| {
            let start = off;
            off += (store::wal::layout::RECORD_HEADER_LEN + len) as u64;
            (start, off)
        })
        .collect()
}
