//! The WAL target: a worker's write-ahead log directory, written by the real log and then
//! damaged, recovered as a node recovers it at start.
//!
//! Input, read in order: the log's options (segment size, preallocation), up to 31 records
//! (each a raw payload or a journal payload of merges and drops the harness encodes, as a
//! worker writes), perhaps a snapshot of some of them, then damage until the input ends:
//! flipped bytes, cuts, overwritten or appended bytes, deleted files — in any segment or
//! snapshot.
//!
//! Checks:
//! - reading the log (`store::wal::inspect`) and opening it as the node does
//!   (`Wal::open`, every record replayed into a shard by the node's journal decoder) never
//!   panic, and agree: what was replayed, the last LSN, the snapshot loaded; a log whose
//!   records all decode opens exactly when it reads;
//! - opening repairs: read again after the open (and the log closed), the log has no
//!   damage left and yields exactly the records it yielded before the repair.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use lattice::{Record, Timestamp};
use node::codec::{decode_journal, encode_journal, JournalEntry};
use store::wal::{FsyncPolicy, Recovery, Replayed, Wal, WalError, WalOptions};

use crate::input::Input;

/// One item replayed: from the snapshot (true) or the log, its LSN, its bytes.
type Item = (bool, u64, Vec<u8>);

/// The WAL target (see the module docs).
pub fn wal(data: &[u8]) {
    let mut inp = Input::new(data);
    let dir = scratch_dir();
    let options = WalOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: 64 + 16 * u64::from(inp.u8()),
        preallocate: inp.u8() & 1 == 1,
        max_record_bytes: 4096,
        queue_bytes: 1 << 20,
        retry_interval_ms: 1_000,
    };
    write_log(dir.path(), &options, &mut inp);
    damage(dir.path(), &mut inp);

    let (before, read) = read_log(dir.path());
    let decodes = before
        .iter()
        .all(|(_, _, payload)| decode_journal(payload).is_ok());
    match node::fuzzing::open_wal(dir.path(), options) {
        Ok((log, recovery, _keys)) => {
            let read = read.expect("a log that opens also reads");
            assert!(decodes, "a log whose records do not decode was opened");
            assert_eq!(recovery.snapshot_lsn, read.snapshot_lsn);
            assert_eq!(recovery.snapshot_records, read.snapshot_records);
            assert_eq!(recovery.records_replayed, read.records_replayed);
            assert_eq!(recovery.last_lsn, read.last_lsn);
            block_on(log.close()).expect("closing the recovered log");
            let (after, again) = read_log(dir.path());
            let again = again.expect("the log reads after its repair");
            assert_eq!(again.corruption, None, "damage left after the repair");
            assert_eq!(after, before, "the repair changed the good records");
        }
        Err(WalError::Replay(_)) => assert!(!decodes || read.is_err()),
        Err(e) => assert!(
            read.is_err() || !decodes,
            "the log reads but does not open: {e}"
        ),
    }
}

/// A fresh directory, in memory when the machine has /dev/shm.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("lkv-fuzz-wal-").to_owned();
    if shm.is_dir() {
        if let Ok(d) = builder.tempdir_in(shm) {
            return d;
        }
    }
    builder.tempdir().expect("a temporary directory")
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
    }
    RT.with(|rt| rt.block_on(f))
}

/// A payload: raw bytes, or journal entries as a worker writes them.
fn payload(inp: &mut Input<'_>) -> Vec<u8> {
    if inp.u8() & 1 == 0 {
        return inp.chunk(200).to_vec();
    }
    let n = inp.u8() % 4;
    let entries: Vec<JournalEntry> = (0..n)
        .map(|_| {
            let key = Bytes::copy_from_slice(inp.chunk(16));
            if inp.u8() & 1 == 0 {
                JournalEntry::Drop(key)
            } else {
                let ts = Timestamp {
                    time: inp.u64(),
                    writer: inp.u64(),
                };
                JournalEntry::Merge(key, Record::tombstone(ts))
            }
        })
        .collect();
    encode_journal(&entries).to_vec()
}

/// Writes up to 31 records with the real log, perhaps snapshotting after some of them.
fn write_log(dir: &Path, options: &WalOptions, inp: &mut Input<'_>) {
    let (log, _) = Wal::open(dir, options.clone(), |_: Replayed<'_>| {
        Ok::<(), std::convert::Infallible>(())
    })
    .expect("a fresh log opens");
    let records = inp.u8() % 32;
    let snapshot_after = inp.u8() % 40;
    for i in 0..records {
        let _ = log.try_append(Bytes::from(payload(inp)));
        if i + 1 == snapshot_after {
            let lsn = log.last_lsn();
            block_on(log.wait_durable(lsn)).expect("records written");
            let mut snap = log.begin_snapshot(lsn).expect("a snapshot starts");
            for _ in 0..inp.u8() % 4 {
                snap.append(&payload(inp)).expect("a snapshot record");
            }
            snap.finish().expect("a snapshot finishes");
        }
    }
    block_on(log.close()).expect("the log closes");
}

/// The log's files, in name order.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().is_some_and(|n| n != "LOCK"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Damages the files until the input ends.
fn damage(dir: &Path, inp: &mut Input<'_>) {
    while !inp.is_empty() {
        let files = files(dir);
        if files.is_empty() {
            return;
        }
        let path = &files[usize::from(inp.u8()) % files.len()];
        let mut bytes = std::fs::read(path).unwrap_or_default();
        let at = |inp: &mut Input<'_>, len: usize| usize::from(inp.u16()) % (len + 1);
        match inp.u8() % 5 {
            0 => {
                let i = at(inp, bytes.len());
                let x = inp.u8() | 1;
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= x;
                }
            }
            1 => {
                let i = at(inp, bytes.len());
                bytes.truncate(i);
            }
            2 => {
                let i = at(inp, bytes.len());
                let new = inp.chunk(64);
                let end = (i + new.len()).min(bytes.len());
                bytes.splice(i..end, new.iter().copied());
            }
            3 => bytes.extend_from_slice(inp.chunk(256)),
            _ => {
                let _ = std::fs::remove_file(path);
                continue;
            }
        }
        std::fs::write(path, &bytes).expect("writing a damaged file");
    }
}

/// Reads the log without changing it: every item replayed, and the recovery report.
fn read_log(dir: &Path) -> (Vec<Item>, Result<Recovery, WalError>) {
    let mut items = Vec::new();
    let recovery = store::wal::inspect(dir, |item: Replayed<'_>| {
        items.push(match item {
            Replayed::Snapshot { lsn, record } => (true, lsn, record.to_vec()),
            Replayed::Log { lsn, payload } => (false, lsn, payload.to_vec()),
        });
        Ok::<(), std::convert::Infallible>(())
    });
    (items, recovery)
}
