//! Errors of the write-ahead log.
//!
//! Every error is `Clone`: one disk failure is reported to every appender waiting on a record
//! it covers.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::wal::Lsn;

/// What kind of disk failure happened, from the operating system's error number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskErrorKind {
    /// The file system is full, or a quota is exhausted (`ENOSPC`, `EDQUOT`).
    NoSpace,
    /// The file system is read-only (`EROFS`), e.g. remounted read-only after an error.
    ReadOnly,
    /// The device reported an I/O error (`EIO`): a failed write-back, a bad sector.
    Io,
    /// Anything else (permissions, too many open files, …).
    Other,
}

impl DiskErrorKind {
    /// Classifies an I/O error by its OS error number.
    pub fn of(err: &io::Error) -> Self {
        match err.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => DiskErrorKind::NoSpace,
            Some(libc::EROFS) => DiskErrorKind::ReadOnly,
            Some(libc::EIO) => DiskErrorKind::Io,
            _ => DiskErrorKind::Other,
        }
    }
}

impl fmt::Display for DiskErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DiskErrorKind::NoSpace => "disk full",
            DiskErrorKind::ReadOnly => "read-only file system",
            DiskErrorKind::Io => "I/O error",
            DiskErrorKind::Other => "error",
        })
    }
}

/// A failed file-system operation: what was done, on which path, and what the OS said.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} while trying to {op} {}: {message}", path.display())]
pub struct DiskError {
    /// The class of failure.
    pub kind: DiskErrorKind,
    /// The operation: `write`, `fsync`, `create`, `rename`, …
    pub op: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error number, if there was one.
    pub errno: Option<i32>,
    /// The OS error text.
    pub message: String,
}

impl DiskError {
    /// Wraps `err`, raised while doing `op` on `path`.
    pub fn new(op: &'static str, path: &Path, err: &io::Error) -> Self {
        DiskError {
            kind: DiskErrorKind::of(err),
            op,
            path: path.to_path_buf(),
            errno: err.raw_os_error(),
            message: err.to_string(),
        }
    }
}

/// An error of the write-ahead log.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WalError {
    /// A write, fsync or file operation of this request failed. For an appended record it
    /// means the record is **not** durable and never will be: its LSN is abandoned.
    #[error("write-ahead log disk failure: {0}")]
    Disk(DiskError),
    /// The log is in its failed state after a disk failure: appends are refused until the
    /// writer's next retry succeeds (see [`WalOptions::retry_interval_ms`](crate::wal::WalOptions)).
    #[error("write-ahead log unavailable after a disk failure ({0}); appends are refused until a retry succeeds")]
    Unavailable(DiskError),
    /// The record is larger than [`WalOptions::max_record_bytes`](crate::wal::WalOptions).
    #[error("record of {len} bytes exceeds the {max}-byte write-ahead log record limit")]
    RecordTooLarge {
        /// Payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// [`Wal::try_append`](crate::wal::Wal::try_append) found the bounded queue full; the
    /// writer is behind. [`Wal::append`](crate::wal::Wal::append) waits instead.
    #[error("write-ahead log queue is full")]
    QueueFull,
    /// The log was closed.
    #[error("write-ahead log is closed")]
    Closed,
    /// The outcome of a record is no longer known: more disk failures happened since than
    /// the log remembers. Treated as not durable.
    #[error("outcome of LSN {0} is unknown: too many disk failures since it was appended")]
    OutcomeUnknown(Lsn),
    /// The log on disk cannot be recovered without losing acknowledged history: e.g. the
    /// oldest segment starts after the snapshot's LSN, or the only snapshot is corrupt.
    #[error("write-ahead log cannot be recovered: {0}")]
    Corrupt(String),
    /// Another process (or another `Wal` in this one) has the directory open.
    #[error("write-ahead log directory {} is in use by another process", .0.display())]
    Locked(PathBuf),
    /// The options are inconsistent.
    #[error("invalid write-ahead log options: {0}")]
    Config(String),
    /// An argument is out of range (e.g. a snapshot LSN beyond the last appended record).
    #[error("{0}")]
    InvalidArgument(String),
    /// The caller's replay function failed during recovery; nothing on disk was changed.
    #[error("replaying the write-ahead log failed: {0}")]
    Replay(Arc<dyn std::error::Error + Send + Sync>),
    /// The writer thread stopped unexpectedly (a bug); the log refuses appends.
    #[error("write-ahead log writer stopped: {0}")]
    Internal(String),
}

impl WalError {
    /// The disk failure behind this error, if it is one.
    pub fn disk_error(&self) -> Option<&DiskError> {
        match self {
            WalError::Disk(e) | WalError::Unavailable(e) => Some(e),
            _ => None,
        }
    }

    /// True if the error comes from a full disk (`ENOSPC`/`EDQUOT`).
    pub fn is_no_space(&self) -> bool {
        self.disk_error()
            .is_some_and(|e| e.kind == DiskErrorKind::NoSpace)
    }

    /// Wraps an I/O error raised while doing `op` on `path`.
    pub(crate) fn io(op: &'static str, path: &Path, err: &io::Error) -> Self {
        WalError::Disk(DiskError::new(op, path, err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errno() {
        let kind = |errno| DiskErrorKind::of(&io::Error::from_raw_os_error(errno));
        assert_eq!(kind(libc::ENOSPC), DiskErrorKind::NoSpace);
        assert_eq!(kind(libc::EDQUOT), DiskErrorKind::NoSpace);
        assert_eq!(kind(libc::EROFS), DiskErrorKind::ReadOnly);
        assert_eq!(kind(libc::EIO), DiskErrorKind::Io);
        assert_eq!(kind(libc::EACCES), DiskErrorKind::Other);
        let e = WalError::io(
            "write",
            Path::new("/x/wal-1.log"),
            &io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(e.is_no_space());
        let text = e.to_string();
        assert!(
            text.contains("disk full") && text.contains("/x/wal-1.log"),
            "{text}"
        );
    }
}
