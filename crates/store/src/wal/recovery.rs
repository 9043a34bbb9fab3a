//! Recovery: load the newest valid snapshot, replay the log after it, find where the good
//! log ends, and repair the directory so appends continue from there.
//!
//! Scanning is separate from repairing: [`scan`] only reads and returns the repairs it
//! decided on, [`apply`] makes them. [`inspect`](crate::wal::inspect) scans without repairing.

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::wal::error::{DiskError, WalError};
use crate::wal::format::{self, FileKind, Next, RecordReader, SEGMENT_HEADER_LEN};
use crate::wal::fsio;
use crate::wal::snapshot::read_snapshot;
use crate::wal::Lsn;

/// One item handed to the replay function during recovery, in order: the snapshot's records
/// first, then the log's records after the snapshot's LSN, by ascending LSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed<'a> {
    /// A record of the snapshot, in the order it was written.
    Snapshot {
        /// The LSN the snapshot covers.
        lsn: Lsn,
        /// The record.
        record: &'a [u8],
    },
    /// A log record with an LSN above the snapshot's.
    Log {
        /// Its LSN.
        lsn: Lsn,
        /// Its payload.
        payload: &'a [u8],
    },
}

/// Where recovery stopped because of a damaged record (or a missing stretch of the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// The segment.
    pub segment: PathBuf,
    /// Offset of the first bad byte range in it (the segment is cut there).
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// LSN of the snapshot loaded, if any.
    pub snapshot_lsn: Option<Lsn>,
    /// Records of that snapshot replayed.
    pub snapshot_records: u64,
    /// Snapshots skipped because they are damaged or incomplete.
    pub invalid_snapshots: usize,
    /// Log records replayed (those after the snapshot).
    pub records_replayed: u64,
    /// Payload bytes of those records.
    pub bytes_replayed: u64,
    /// Segments read.
    pub segments_read: usize,
    /// The highest LSN recovered (snapshot or record); the next append gets the next one.
    pub last_lsn: Lsn,
    /// Where the log stopped early because of a bad record, if it did.
    pub corruption: Option<Corruption>,
    /// Bytes of written data cut off: the bad record and everything after it in its
    /// segment, plus the later segments deleted (preallocated zeros are not counted).
    pub bytes_discarded: u64,
    /// Segments after a bad record that were deleted.
    pub segments_discarded: usize,
    /// Bytes of records abandoned after a disk failure (reported as failed to their
    /// appenders when it happened) that were cut off.
    pub bytes_abandoned: u64,
    /// Segments deleted because the snapshot covers them or they hold no records.
    pub segments_deleted: usize,
    /// How long recovery took.
    pub duration: Duration,
}

/// A repair decided by [`scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Cut the file to this length.
    Truncate(PathBuf, u64),
    /// Delete the file.
    Delete(PathBuf),
}

/// The result of [`scan`].
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub recovery: Recovery,
    pub actions: Vec<Action>,
    /// Segments that remain after the actions (to be fsynced).
    pub keep: Vec<PathBuf>,
}

/// The replay function, with the caller's error already wrapped.
pub(crate) type ReplayFn<'a> = dyn FnMut(Replayed<'_>) -> Result<(), WalError> + 'a;

/// Reads the log in `dir`: the newest valid snapshot, then every segment in order until
/// the first bad record, passing what it reads to `replay`. Changes nothing on disk.
///
/// Rules (see the crate docs, "Recovery"):
/// - records in a segment are consecutive LSNs; the first one is at least the segment's
///   base and above the previous record;
/// - a segment's records end before the next segment's base: the next segment was started
///   after a disk failure, and anything in this one at or above that base was abandoned;
/// - a bad record (or a missing stretch of LSNs) ends the log, unless the next segment
///   starts right after the last good record (an abandoned tail): the segment is cut there
///   and every later segment deleted;
/// - a missing stretch before the first segment (no snapshot covers it) is an error.
pub(crate) fn scan(dir: &Path, replay: &mut ReplayFn<'_>) -> Result<Scan, WalError> {
    let started = Instant::now();
    let listing = format::list_dir(dir).map_err(|e| WalError::io("list", dir, &e))?;
    let mut out = Scan::default();
    for t in &listing.temporary {
        out.actions.push(Action::Delete(t.clone()));
    }

    // The newest snapshot that checks out.
    let mut snapshot = None;
    for (lsn, path) in listing.snapshots.iter().rev() {
        match read_snapshot(path, *lsn, None)? {
            Ok(_) => {
                snapshot = Some((*lsn, path.clone()));
                break;
            }
            Err(bad) => {
                tracing::warn!(path = %path.display(), "skipping damaged snapshot: {bad}");
                out.recovery.invalid_snapshots += 1;
            }
        }
    }
    if let Some((lsn, path)) = &snapshot {
        let mut visit = |record: &[u8]| replay(Replayed::Snapshot { lsn: *lsn, record });
        match read_snapshot(path, *lsn, Some(&mut visit))? {
            Ok(n) => out.recovery.snapshot_records = n,
            Err(bad) => {
                return Err(WalError::Corrupt(format!(
                    "snapshot {} failed while it was replayed: {bad}",
                    path.display()
                )))
            }
        }
        out.recovery.snapshot_lsn = Some(*lsn);
    }
    let snap_lsn = snapshot.as_ref().map_or(0, |(lsn, _)| *lsn);
    // Older snapshots (left by a crash before they were deleted) and damaged ones go.
    for (lsn, path) in &listing.snapshots {
        if snapshot.as_ref().is_none_or(|(l, _)| l != lsn) {
            out.actions.push(Action::Delete(path.clone()));
        }
    }

    // Highest LSN covered so far (by the snapshot or a good record).
    let mut last = snap_lsn;
    // LSN of the last good record read (covered by the snapshot or not).
    let mut prev: Lsn = 0;
    let mut first_read = true;
    let segments = &listing.segments;
    let mut stop_after = None;
    'segments: for (i, (base, path)) in segments.iter().enumerate() {
        let next_base = segments.get(i + 1).map(|(b, _)| *b);
        if next_base.is_some_and(|nb| nb <= snap_lsn.saturating_add(1)) {
            // Every record in it is covered by the snapshot.
            out.actions.push(Action::Delete(path.clone()));
            out.recovery.segments_deleted += 1;
            continue;
        }
        if *base > last.saturating_add(1) {
            let reason = format!(
                "records {} to {} are missing",
                last.saturating_add(1),
                base - 1
            );
            if first_read {
                return Err(WalError::Corrupt(format!(
                    "{reason}: the oldest segment {} starts at LSN {base}, but the snapshot \
                     covers only up to LSN {snap_lsn}",
                    path.display()
                )));
            }
            let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            stop_here(&mut out, path, 0, reason, len);
            stop_after = Some(i);
            break;
        }
        first_read = false;
        out.recovery.segments_read += 1;
        let file = File::open(path).map_err(|e| WalError::io("open", path, &e))?;
        let len = file
            .metadata()
            .map_err(|e| WalError::io("stat", path, &e))?
            .len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        let header_ok = if len < SEGMENT_HEADER_LEN as u64 {
            Err("file shorter than its header".to_string())
        } else {
            input
                .read_exact(&mut header)
                .map_err(|e| WalError::io("read", path, &e))?;
            match format::decode_header(FileKind::Segment, &header) {
                Ok(b) if b == *base => Ok(()),
                Ok(b) => Err(format!("header says base {b}, file name says {base}")),
                Err(bad) => Err(bad.to_string()),
            }
        };
        if let Err(reason) = header_ok {
            if next_base.is_some_and(|nb| nb <= last.saturating_add(1)) {
                out.recovery.bytes_abandoned += len;
                out.actions.push(Action::Delete(path.clone()));
                continue;
            }
            stop_here(&mut out, path, 0, reason, len);
            stop_after = Some(i);
            break;
        }

        let mut reader = RecordReader::new(input, SEGMENT_HEADER_LEN as u64, len);
        let mut records = 0u64;
        loop {
            let start = reader.offset();
            let next = reader.next().map_err(|e| WalError::io("read", path, &e))?;
            let bad = match next {
                Next::End => {
                    if start < len {
                        // Preallocated space never written.
                        out.actions.push(Action::Truncate(path.clone(), start));
                    }
                    break;
                }
                Next::Bad(bad) => bad.to_string(),
                Next::Record(lsn) => {
                    let expected = if records == 0 {
                        (*base).max(prev.saturating_add(1))
                    } else {
                        prev.saturating_add(1)
                    };
                    let in_order = if records == 0 {
                        lsn >= expected
                    } else {
                        lsn == expected
                    };
                    if !in_order {
                        format::BadRecord::OutOfOrder {
                            expected,
                            found: lsn,
                        }
                        .to_string()
                    } else if next_base.is_some_and(|nb| lsn >= nb) {
                        // Written before a disk failure, and abandoned then.
                        let cut = reader
                            .data_after(start)
                            .map_err(|e| WalError::io("read", path, &e))?;
                        out.recovery.bytes_abandoned += cut;
                        out.actions.push(Action::Truncate(path.clone(), start));
                        break;
                    } else {
                        records += 1;
                        prev = lsn;
                        last = last.max(lsn);
                        if lsn > snap_lsn {
                            let payload = reader.payload();
                            out.recovery.records_replayed += 1;
                            out.recovery.bytes_replayed += payload.len() as u64;
                            replay(Replayed::Log { lsn, payload })?;
                        }
                        continue;
                    }
                }
            };
            let cut = reader
                .data_after(start)
                .map_err(|e| WalError::io("read", path, &e))?;
            if next_base.is_some_and(|nb| nb <= last.saturating_add(1)) {
                // The next segment starts right after the last good record: this tail was
                // abandoned after a disk failure.
                out.recovery.bytes_abandoned += cut;
                out.actions.push(Action::Truncate(path.clone(), start));
                break;
            }
            stop_here(&mut out, path, start, bad, cut);
            stop_after = Some(i);
            if records == 0 {
                replace_with_delete(&mut out.actions, path);
            } else {
                out.keep.push(path.clone());
            }
            break 'segments;
        }
        if records == 0 {
            // Nothing in it that the next segment (or a new one) does not also say.
            replace_with_delete(&mut out.actions, path);
            out.recovery.segments_deleted += 1;
        } else {
            out.keep.push(path.clone());
        }
    }

    if let Some(i) = stop_after {
        let later = &segments[i + 1..];
        for (_, path) in later.iter().rev() {
            let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            out.recovery.bytes_discarded += len;
            out.recovery.segments_discarded += 1;
            out.actions.push(Action::Delete(path.clone()));
        }
        if let Some(c) = &out.recovery.corruption {
            tracing::warn!(
                segment = %c.segment.display(),
                offset = c.offset,
                reason = %c.reason,
                last_good_lsn = last,
                bytes_discarded = out.recovery.bytes_discarded,
                later_segments_deleted = out.recovery.segments_discarded,
                "write-ahead log damaged: recovered up to the last good record and cut the rest"
            );
        }
    }
    out.recovery.last_lsn = last;
    out.recovery.duration = started.elapsed();
    Ok(out)
}

/// Records the corruption that ends the log at `offset` of segment `path`.
fn stop_here(out: &mut Scan, path: &Path, offset: u64, reason: String, cut: u64) {
    out.recovery.bytes_discarded += cut;
    out.recovery.corruption = Some(Corruption {
        segment: path.to_path_buf(),
        offset,
        reason,
    });
    if offset <= SEGMENT_HEADER_LEN as u64 {
        out.actions.push(Action::Delete(path.to_path_buf()));
    } else {
        out.actions
            .push(Action::Truncate(path.to_path_buf(), offset));
    }
}

/// Replaces the truncations of `path` with its deletion.
fn replace_with_delete(actions: &mut Vec<Action>, path: &Path) {
    actions.retain(|a| !matches!(a, Action::Truncate(p, _) | Action::Delete(p) if p == path));
    actions.push(Action::Delete(path.to_path_buf()));
}

/// Carries out the repairs of `scan` — truncations first, then deletions, so that a crash
/// in between leaves a directory that scans to the same result — then fsyncs the remaining segments (recovered records
/// may have been in the page cache only, e.g. after `kill -9` under a periodic policy; a
/// new segment must never be durable before them) and the directory.
pub(crate) fn apply(dir: &Path, scan: &Scan) -> Result<(), DiskError> {
    let truncations = scan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Truncate(..)));
    let deletions = scan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Delete(_)));
    for action in truncations.chain(deletions) {
        match action {
            Action::Delete(path) => match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(DiskError::new("remove", path, &e)),
            },
            Action::Truncate(path, len) => {
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| DiskError::new("open", path, &e))?;
                f.set_len(*len)
                    .map_err(|e| DiskError::new("truncate", path, &e))?;
                f.sync_all()
                    .map_err(|e| DiskError::new("fsync", path, &e))?;
            }
        }
    }
    for path in &scan.keep {
        let f = File::open(path).map_err(|e| DiskError::new("open", path, &e))?;
        f.sync_data()
            .map_err(|e| DiskError::new("fsync", path, &e))?;
    }
    fsio::sync_dir(dir)
}
