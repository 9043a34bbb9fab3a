//! [`Tmpfs`]: a small filesystem to fill up, for full-disk tests.

use std::path::PathBuf;
use std::process::Command;

/// A tmpfs of `size` mounted on a fresh directory for a full-disk test, unmounted when
/// dropped. Mounting needs root, as on the CI machine: the test fails (it does not skip)
/// without it.
pub struct Tmpfs {
    /// The mount point.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it: `16m`).
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs for the full-disk test (run the tests as root): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs {
            path: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// Remounts it with `mode` (`ro`, `rw`).
    pub fn remount(&self, mode: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.path)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root, like every full-disk test.
    #[test]
    fn mounts_fills_remounts_and_unmounts() {
        let fs = Tmpfs::mount("1m");
        let file = fs.path.join("big");
        let err = std::fs::write(&file, vec![0u8; 2 << 20]).expect_err("a 1 MiB tmpfs is full");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        std::fs::remove_file(&file).unwrap();
        fs.remount("ro");
        let err = std::fs::write(&file, b"x").expect_err("read-only");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
        fs.remount("rw");
        std::fs::write(&file, b"x").unwrap();
        let path = fs.path.to_str().unwrap().to_string();
        let mounted = || {
            std::fs::read_to_string("/proc/self/mounts")
                .unwrap()
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(path.as_str()))
        };
        assert!(mounted());
        drop(fs);
        assert!(!mounted(), "still mounted after drop");
        assert!(
            !std::path::Path::new(&path).exists(),
            "mount point left behind"
        );
    }
}
