//! Snapshots: the caller's state up to an LSN, written as a stream of opaque records, so
//! the log segments below it can be deleted and recovery replays only what follows.
//!
//! A snapshot is written to `snap-<lsn>.snap.tmp`, ended with a trailer, fsynced, renamed to
//! `snap-<lsn>.snap`, and the directory fsynced; only then are older snapshots and the
//! segments it covers deleted. A crash at any point leaves either the old state (the
//! temporary file is deleted at the next open) or the new one.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::wal::error::{DiskError, WalError};
use crate::wal::format::{
    self, BadRecord, FileKind, Next, RecordReader, SEGMENT_HEADER_LEN, SNAPSHOT_TRAILER_LSN,
    TMP_SUFFIX,
};
use crate::wal::fsio;
use crate::wal::shared::Shared;
use crate::wal::Lsn;

/// What a finished snapshot wrote and deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The LSN it covers.
    pub lsn: Lsn,
    /// Records in it.
    pub records: u64,
    /// Size of the file.
    pub bytes: u64,
    /// Log segments deleted because the snapshot covers all their records.
    pub segments_deleted: usize,
    /// Older snapshots deleted.
    pub snapshots_deleted: usize,
}

/// Writes one snapshot. Obtained from [`Wal::begin_snapshot`](crate::wal::Wal::begin_snapshot);
/// only one is open at a time per log.
///
/// The writer does blocking file I/O: [`append`](Self::append) writes through a 1 MiB
/// buffer and [`finish`](Self::finish) fsyncs, so on an event loop move it to a blocking
/// thread (it is `Send`). Dropping it without `finish` abandons the snapshot and deletes
/// its temporary file.
pub struct SnapshotWriter {
    shared: Arc<Shared>,
    lsn: Lsn,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    records: u64,
    payload_bytes: u64,
    bytes: u64,
    frame: Vec<u8>,
}

impl std::fmt::Debug for SnapshotWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotWriter")
            .field("lsn", &self.lsn)
            .field("records", &self.records)
            .finish()
    }
}

impl SnapshotWriter {
    pub(crate) fn create(shared: Arc<Shared>, lsn: Lsn) -> Result<Self, WalError> {
        let tmp = shared
            .dir
            .join(format!("{}{TMP_SUFFIX}", format::snapshot_name(lsn)));
        let file = File::create(&tmp).map_err(|e| WalError::io("create", &tmp, &e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&format::encode_header(FileKind::Snapshot, lsn))
            .map_err(|e| WalError::io("write", &tmp, &e))?;
        Ok(SnapshotWriter {
            shared,
            lsn,
            tmp,
            out: Some(out),
            records: 0,
            payload_bytes: 0,
            bytes: SEGMENT_HEADER_LEN as u64,
            frame: Vec::new(),
        })
    }

    /// The LSN this snapshot covers.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Appends one record (at most 1 GiB).
    pub fn append(&mut self, record: &[u8]) -> Result<(), WalError> {
        if record.len() > format::MAX_RECORD_LEN as usize {
            return Err(WalError::RecordTooLarge {
                len: record.len(),
                max: format::MAX_RECORD_LEN as usize,
            });
        }
        self.records += 1;
        self.payload_bytes += record.len() as u64;
        self.write_frame(self.records, record)
    }

    fn write_frame(&mut self, seq: u64, payload: &[u8]) -> Result<(), WalError> {
        let out = self.out.as_mut().ok_or(WalError::Closed)?;
        self.frame.clear();
        format::encode_record(&mut self.frame, seq, payload);
        self.bytes += self.frame.len() as u64;
        out.write_all(&self.frame)
            .map_err(|e| WalError::io("write", &self.tmp, &e))
    }

    /// Completes the snapshot: trailer, fsync, atomic rename, directory fsync; then deletes
    /// older snapshots and every log segment whose records all have LSNs up to the
    /// snapshot's. Blocks on fsync.
    pub fn finish(mut self) -> Result<SnapshotInfo, WalError> {
        let result = self.finish_inner();
        if result.is_err() {
            self.shared
                .counters
                .snapshot_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn finish_inner(&mut self) -> Result<SnapshotInfo, WalError> {
        if self.shared.progress.borrow().stopped {
            // The directory is no longer ours: another process may have opened it.
            return Err(WalError::Closed);
        }
        let mut trailer = [0u8; 16];
        trailer[..8].copy_from_slice(&self.records.to_le_bytes());
        trailer[8..].copy_from_slice(&self.payload_bytes.to_le_bytes());
        self.write_frame(SNAPSHOT_TRAILER_LSN, &trailer)?;
        let out = self.out.take().ok_or(WalError::Closed)?;
        let file = out
            .into_inner()
            .map_err(|e| WalError::io("write", &self.tmp, e.error()))?;
        file.sync_all()
            .map_err(|e| WalError::io("fsync", &self.tmp, &e))?;
        drop(file);
        let dir = self.shared.dir.clone();
        let path = dir.join(format::snapshot_name(self.lsn));
        fs::rename(&self.tmp, &path).map_err(|e| WalError::io("rename", &self.tmp, &e))?;
        fsio::sync_dir(&dir).map_err(WalError::Disk)?;
        self.shared
            .latest_snapshot
            .fetch_max(self.lsn, Ordering::AcqRel);
        let (snapshots_deleted, segments_deleted) = delete_covered(&dir, self.lsn)?;
        let c = &self.shared.counters;
        c.snapshots.fetch_add(1, Ordering::Relaxed);
        c.segments_deleted
            .fetch_add(segments_deleted as u64, Ordering::Relaxed);
        tracing::info!(
            lsn = self.lsn,
            records = self.records,
            bytes = self.bytes,
            segments_deleted,
            "write-ahead log snapshot installed"
        );
        Ok(SnapshotInfo {
            lsn: self.lsn,
            records: self.records,
            bytes: self.bytes,
            segments_deleted,
            snapshots_deleted,
        })
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            // Abandoned (or failed before the rename): remove the partial file.
            let _ = fs::remove_file(&self.tmp);
        }
        self.shared.snapshot_busy.store(false, Ordering::Release);
    }
}

/// Deletes snapshots older than `lsn` and the segments whose records all have LSNs up to
/// `lsn` (segment `k` when segment `k + 1` has base `<= lsn + 1`; the newest segment is
/// never deleted). Returns (snapshots, segments) deleted.
pub(crate) fn delete_covered(dir: &Path, lsn: Lsn) -> Result<(usize, usize), WalError> {
    let listing = format::list_dir(dir).map_err(|e| WalError::io("list", dir, &e))?;
    let mut snapshots = 0;
    for (s, path) in &listing.snapshots {
        if *s < lsn {
            fs::remove_file(path).map_err(|e| WalError::io("remove", path, &e))?;
            snapshots += 1;
        }
    }
    let mut segments = 0;
    for pair in listing.segments.windows(2) {
        let (_, path) = &pair[0];
        let (next_base, _) = pair[1];
        if next_base <= lsn.saturating_add(1) {
            fs::remove_file(path).map_err(|e| WalError::io("remove", path, &e))?;
            segments += 1;
        }
    }
    if snapshots + segments > 0 {
        fsio::sync_dir(dir).map_err(WalError::Disk)?;
    }
    Ok((snapshots, segments))
}

/// Why a snapshot file was refused.
#[derive(Debug)]
pub(crate) enum BadSnapshot {
    /// It could not be read.
    Io(DiskError),
    /// Its content is damaged or incomplete.
    Invalid(String),
}

impl std::fmt::Display for BadSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadSnapshot::Io(e) => e.fmt(f),
            BadSnapshot::Invalid(m) => f.write_str(m),
        }
    }
}

/// Receives each record of a snapshot being read.
pub(crate) type Visit<'a> = dyn FnMut(&[u8]) -> Result<(), WalError> + 'a;

/// Reads and checks the snapshot at `path` (expected to cover `lsn`), passing each record
/// to `visit`; returns the number of records. Nothing is passed on if the header is bad, but
/// records before a later defect are: check with `visit = None` first.
pub(crate) fn read_snapshot(
    path: &Path,
    lsn: Lsn,
    mut visit: Option<&mut Visit<'_>>,
) -> Result<Result<u64, BadSnapshot>, WalError> {
    let io_err = |op, e: &std::io::Error| BadSnapshot::Io(DiskError::new(op, path, e));
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return Ok(Err(io_err("open", &e))),
    };
    let len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return Ok(Err(io_err("stat", &e))),
    };
    let mut input = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    if let Err(e) = input.read_exact(&mut header) {
        return Ok(Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
            BadSnapshot::Invalid("file shorter than its header".into())
        } else {
            io_err("read", &e)
        }));
    }
    match format::decode_header(FileKind::Snapshot, &header) {
        Ok(l) if l == lsn => {}
        Ok(l) => {
            return Ok(Err(BadSnapshot::Invalid(format!(
                "header says LSN {l}, file name says {lsn}"
            ))))
        }
        Err(bad) => return Ok(Err(BadSnapshot::Invalid(bad.to_string()))),
    }
    let mut reader = RecordReader::new(input, SEGMENT_HEADER_LEN as u64, len);
    let mut records = 0u64;
    let mut payload_bytes = 0u64;
    loop {
        let next = match reader.next() {
            Ok(n) => n,
            Err(e) => return Ok(Err(io_err("read", &e))),
        };
        match next {
            Next::Record(SNAPSHOT_TRAILER_LSN) => {
                let t = reader.payload();
                let ok = t.len() == 16
                    && t[..8] == records.to_le_bytes()
                    && t[8..] == payload_bytes.to_le_bytes()
                    && reader.offset() == len;
                return Ok(if ok {
                    Ok(records)
                } else {
                    Err(BadSnapshot::Invalid(format!(
                        "trailer does not match the {records} records read, or data follows it"
                    )))
                });
            }
            Next::Record(seq) if seq == records + 1 => {
                records += 1;
                payload_bytes += reader.payload().len() as u64;
                if let Some(visit) = visit.as_mut() {
                    visit(reader.payload())?;
                }
            }
            Next::Record(seq) => {
                return Ok(Err(BadSnapshot::Invalid(
                    BadRecord::OutOfOrder {
                        expected: records + 1,
                        found: seq,
                    }
                    .to_string(),
                )))
            }
            Next::End => {
                return Ok(Err(BadSnapshot::Invalid(format!(
                    "no trailer after {records} records (incomplete snapshot)"
                ))))
            }
            Next::Bad(bad) => {
                return Ok(Err(BadSnapshot::Invalid(format!(
                    "record {} at offset {}: {bad}",
                    records + 1,
                    reader.offset()
                ))))
            }
        }
    }
}
