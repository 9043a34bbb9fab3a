//! File-system operations the log is built from: creating segments atomically, syncing
//! directories, preallocating space, locking the directory.
//!
//! Every function reports failures as [`DiskError`]s naming the operation and the path.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::wal::error::{DiskError, WalError};
use crate::wal::format::{self, FileKind, LOCK_NAME, TMP_SUFFIX};
use crate::wal::Lsn;

/// Fsyncs a directory, making the creation, renaming and removal of its entries durable.
pub fn sync_dir(dir: &Path) -> Result<(), DiskError> {
    let d = File::open(dir).map_err(|e| DiskError::new("open directory", dir, &e))?;
    d.sync_all()
        .map_err(|e| DiskError::new("fsync directory", dir, &e))
}

/// Reserves `len` bytes for `file` without changing what reads return (Linux
/// `fallocate`). Returns `Ok(false)` if the file system cannot preallocate.
pub fn preallocate(file: &File, len: u64) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        let len = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: fallocate on a file descriptor we own; failure is reported through the
        // return value and errno.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
            _ => Err(err),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, len);
        Ok(false)
    }
}

/// An open segment being appended to.
#[derive(Debug)]
pub struct SegmentFile {
    /// The file.
    pub file: File,
    /// Its path.
    pub path: PathBuf,
    /// Where the next record goes.
    pub offset: u64,
    /// Records written to it.
    pub records: u64,
}

/// Creates the segment with base `base` in `dir`: written under a temporary name with its
/// header (and, if `prealloc_len` is given, its space reserved), fsynced, renamed, and the
/// directory fsynced. A segment under its final name therefore always has a valid header.
pub fn create_segment(
    dir: &Path,
    base: Lsn,
    prealloc_len: Option<u64>,
) -> Result<SegmentFile, DiskError> {
    let path = dir.join(format::segment_name(base));
    let tmp = dir.join(format!("{}{TMP_SUFFIX}", format::segment_name(base)));
    let result = (|| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| DiskError::new("create", &tmp, &e))?;
        if let Some(len) = prealloc_len {
            preallocate(&file, len).map_err(|e| DiskError::new("preallocate", &tmp, &e))?;
        }
        file.write_all_at(&format::encode_header(FileKind::Segment, base), 0)
            .map_err(|e| DiskError::new("write", &tmp, &e))?;
        file.sync_all()
            .map_err(|e| DiskError::new("fsync", &tmp, &e))?;
        fs::rename(&tmp, &path).map_err(|e| DiskError::new("rename", &tmp, &e))?;
        sync_dir(dir)?;
        Ok(file)
    })();
    match result {
        Ok(file) => Ok(SegmentFile {
            file,
            path,
            offset: format::SEGMENT_HEADER_LEN as u64,
            records: 0,
        }),
        Err(e) => {
            // Best effort: a leftover is deleted by the next open anyway.
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// An exclusive lock on a log directory, held while the value lives (`flock` on `LOCK`;
/// released by the kernel if the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `dir`, failing with [`WalError::Locked`] if another holder has it.
    pub fn acquire(dir: &Path) -> Result<Self, WalError> {
        let path = dir.join(LOCK_NAME);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .or_else(|e| match e.raw_os_error() {
                // A read-only file system: a lock file that exists can still be locked.
                Some(libc::EROFS) => File::open(&path),
                _ => Err(e),
            })
            .map_err(|e| WalError::io("create", &path, &e))?;
        // SAFETY: flock on a file descriptor we own; failure is reported through the
        // return value.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                WalError::Locked(dir.to_path_buf())
            } else {
                WalError::io("lock", &path, &err)
            });
        }
        Ok(DirLock { _file: file })
    }
}

impl Drop for DirLock {
    /// Unlocks explicitly rather than by closing the file: a `flock` belongs to the open
    /// file description, which a child forked by another thread shares until it execs, so
    /// closing our descriptor alone could leave the directory locked for a moment after
    /// the log was closed (a reopen right after then failed with `Locked`).
    fn drop(&mut self) {
        // SAFETY: flock on the descriptor we still own; errors leave the lock to the close.
        unsafe {
            libc::flock(self._file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_segment_has_header_and_no_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let seg = create_segment(dir.path(), 5, Some(1 << 16)).unwrap();
        assert_eq!(seg.offset, format::SEGMENT_HEADER_LEN as u64);
        let bytes = fs::read(&seg.path).unwrap();
        assert_eq!(format::decode_header(FileKind::Segment, &bytes), Ok(5));
        let listing = format::list_dir(dir.path()).unwrap();
        assert_eq!(listing.segments.len(), 1);
        assert!(listing.temporary.is_empty());
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(WalError::Locked(_))
        ));
        drop(lock);
        DirLock::acquire(dir.path()).unwrap();
    }
}
