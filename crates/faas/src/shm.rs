//! Shared memory between a compute host and one of its executors: large tasks and results
//! cross the executor link through it instead of the socket.
//!
//! The host creates one [`Region`] per executor process it starts (a sealed `memfd`: its
//! size can neither shrink nor grow, so neither side can make the other's mapping fault)
//! and hands the descriptor to that child only (inherited, named by
//! [`FD_ENV`]); every other process it starts gets it closed on exec. A message of at
//! least [`SHM_MIN`] bytes is encoded into the start of the region and the socket carries a
//! [`pb::ShmFrame`] with its length; otherwise it goes through the socket as before. The
//! link is strictly one message at a time (a task, then its outcome), so the region
//! belongs to the side that received the last frame until it sends the next one.
//!
//! Trust: an executor is a local child process of its host. The region holds only what the
//! two of them put into it; its descriptor gives the executor nothing else. The host never
//! decodes in place from memory the executor can write: it copies the message out first
//! ([`Region::copy`]), after checking the length against the region's size.
//!
//! [`pb::ShmFrame`]: crate::pb::ShmFrame

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

/// The environment variable that tells an executor which inherited descriptor is its
/// region.
pub const FD_ENV: &str = "LATTICEKV_EXECUTOR_SHM_FD";

/// Messages shorter than this go through the socket even when a region is there.
pub const SHM_MIN: usize = 64 * 1024;

/// A mapped shared region (read-write, shared).
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory owned by the region until it is dropped; the
// region hands out copies, or views whose exclusivity the caller of `view` guarantees.
unsafe impl Send for Region {}
// SAFETY: as above: `&Region` only writes through `put`, whose callers alternate with the
// other side by the link's protocol.
unsafe impl Sync for Region {}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

impl Region {
    /// A new sealed region of `len` bytes (the host's side), close-on-exec.
    ///
    /// # Errors
    /// The system has no `memfd_create` (not Linux), or creating, sizing, sealing or
    /// mapping it failed.
    pub fn create(len: usize) -> std::io::Result<Region> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::FromRawFd;
            let size = libc::off_t::try_from(len)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
            // SAFETY: a NUL-terminated name and valid flags.
            let raw = unsafe {
                libc::memfd_create(
                    c"latticekv-executor".as_ptr(),
                    libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
                )
            };
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `raw` is a descriptor we just opened and own.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: plain syscalls on our own descriptor.
            unsafe {
                if libc::ftruncate(fd.as_raw_fd(), size) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
                if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Region::mapped(fd, len)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = len;
            Err(std::io::ErrorKind::Unsupported.into())
        }
    }

    /// Maps the region `fd` names (the executor's side: the descriptor its host handed
    /// it) and makes it close-on-exec, so that processes a function starts do not inherit
    /// it. Refuses a descriptor that is not a region sealed against shrinking and growing.
    ///
    /// # Errors
    /// Not a sealed memfd, or mapping it failed.
    pub fn map(fd: OwnedFd) -> std::io::Result<Region> {
        #[cfg(target_os = "linux")]
        {
            let raw = fd.as_raw_fd();
            // SAFETY: plain syscalls on a descriptor we own; `st` is written by fstat.
            let len = unsafe {
                if libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let seals = libc::fcntl(raw, libc::F_GET_SEALS);
                let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
                if seals < 0 || seals & need != need {
                    return Err(invalid(format!(
                        "descriptor {raw} is not a sealed shared region"
                    )));
                }
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(raw, &raw mut st) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                usize::try_from(st.st_size).map_err(|_| invalid("a negative size".into()))?
            };
            Region::mapped(fd, len)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = fd;
            Err(std::io::ErrorKind::Unsupported.into())
        }
    }

    fn mapped(fd: OwnedFd, len: usize) -> std::io::Result<Region> {
        if len == 0 {
            return Err(invalid("an empty shared region".into()));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of our descriptor, at an address
        // the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| invalid("a null mapping".into()))?;
        Ok(Region { ptr, len, fd })
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (an empty region is refused); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region's descriptor (the host hands it to its executor).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Encodes `msg` into the start of the region: its length, or `None` if it does not
    /// fit. The other side must not be reading the region (it is this side's turn).
    pub fn put<M: Message>(&self, msg: &M) -> Option<usize> {
        let n = msg.encoded_len();
        if n > self.len {
            return None;
        }
        // SAFETY: the mapping is `len` bytes long and lives as long as `self`; this
        // process does not read these bytes while it writes them (the link's turns), and
        // what the other process does to them cannot make this write unsound.
        let mut buf = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), n) };
        msg.encode(&mut buf).ok()?;
        Some(n)
    }

    /// A copy of the region's first `len` bytes (the host's read of an executor's
    /// message: the executor can still write the region, the copy cannot change).
    ///
    /// # Errors
    /// `len` is larger than the region.
    pub fn copy(&self, len: usize) -> std::io::Result<Bytes> {
        self.check(len)?;
        let mut out = Vec::with_capacity(len);
        // SAFETY: `len` bytes of the mapping are readable; `out` has room for them and
        // does not overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Ok(Bytes::from(out))
    }

    /// The region's first `len` bytes as [`Bytes`] without a copy (the executor's read of
    /// its host's task: the values are views until they become Python objects).
    ///
    /// # Safety
    /// The other side must not write the region while the returned `Bytes` (or a view of
    /// it) lives: drop them before answering on the link.
    ///
    /// # Errors
    /// `len` is larger than the region.
    pub unsafe fn view(self: &Arc<Self>, len: usize) -> std::io::Result<Bytes> {
        self.check(len)?;
        Ok(Bytes::from_owner(View {
            region: self.clone(),
            len,
        }))
    }

    fn check(&self, len: usize) -> std::io::Result<()> {
        if len > self.len {
            return Err(invalid(format!(
                "a message of {len} bytes in a shared region of {}",
                self.len
            )));
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `mapped`, unmapped once; nothing borrows it any more
        // (views hold an `Arc` of the region).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The owner behind [`Region::view`].
struct View {
    region: Arc<Region>,
    len: usize,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` was checked against the mapping, which the `Arc` keeps alive; the
        // caller of `view` keeps the other side from writing it meanwhile.
        unsafe { std::slice::from_raw_parts(self.region.ptr.as_ptr(), self.len) }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::pb;

    fn task(n: usize) -> pb::ToExecutor {
        pb::ToExecutor {
            msg: Some(pb::to_executor::Msg::Task(pb::Task {
                id: 3,
                function: "f".into(),
                code: Bytes::from_static(b"code"),
                args: vec![pb::TaskArg {
                    kind: Some(pb::task_arg::Kind::Value(Bytes::from(vec![9u8; n]))),
                }],
            })),
        }
    }

    /// The executor's mapping of the host's region: the same memory through another
    /// descriptor (as the child inherits it).
    fn other_side(r: &Region) -> Arc<Region> {
        Arc::new(Region::map(r.fd().try_clone_to_owned().unwrap()).unwrap())
    }

    #[test]
    fn a_message_put_on_one_side_reads_back_on_the_other_as_a_view_or_a_copy() {
        let host = Region::create(1 << 20).unwrap();
        let exec = other_side(&host);
        assert_eq!(exec.len(), 1 << 20);
        let msg = task(300_000);
        let n = host.put(&msg).unwrap();
        assert_eq!(n, msg.encoded_len());
        // SAFETY: the host writes nothing until the view is gone.
        let view = unsafe { exec.view(n) }.unwrap();
        let got = pb::ToExecutor::decode(view.clone()).unwrap();
        assert_eq!(got, msg);
        // The decoded value is a view of the mapping, not a copy.
        let Some(pb::to_executor::Msg::Task(t)) = &got.msg else {
            panic!("not a task")
        };
        let Some(pb::task_arg::Kind::Value(v)) = &t.args[0].kind else {
            panic!("not a value")
        };
        let inside = view.as_ptr() as usize..view.as_ptr() as usize + view.len();
        assert!(inside.contains(&(v.as_ptr() as usize)));
        drop((got, view));
        // And back, copied out on the host's side.
        let answer = task(100);
        let n = exec.put(&answer).unwrap();
        assert_eq!(
            pb::ToExecutor::decode(host.copy(n).unwrap()).unwrap(),
            answer
        );
    }

    #[test]
    fn a_message_larger_than_the_region_does_not_fit_and_a_length_past_it_is_refused() {
        let host = Region::create(64 * 1024).unwrap();
        assert!(host.put(&task(64 * 1024)).is_none());
        assert!(host.put(&task(1000)).is_some());
        let exec = other_side(&host);
        assert_eq!(
            host.copy(64 * 1024 + 1).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
        // SAFETY: nothing is written.
        let past = unsafe { exec.view(64 * 1024 + 1) };
        assert_eq!(past.unwrap_err().kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn the_region_cannot_be_resized_by_either_side_and_only_a_sealed_region_maps() {
        let host = Region::create(64 * 1024).unwrap();
        let exec = other_side(&host);
        for size in [0, 4096, 1 << 20] {
            // SAFETY: plain syscall on a descriptor the region owns.
            let rc = unsafe { libc::ftruncate(exec.fd().as_raw_fd(), size) };
            assert_ne!(rc, 0, "the region was resized to {size} bytes");
        }
        // The executor's descriptor is closed on exec (a function's subprocesses do not
        // inherit it).
        // SAFETY: plain syscall.
        let flags = unsafe { libc::fcntl(exec.fd().as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        // Not a memfd: refused.
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let err = Region::map(file.into()).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }
}
