//! Synthetic /proc and sysfs trees for the host tests: processes whose fd 3 is `/dev/null`,
//! which the synthetic sysfs (`Options::sys_root`) calls a DRM node, with fdinfo text (and a
//! cgroup file) of the caller's.

use std::path::{Path, PathBuf};

/// A synthetic tree's root directory, removed when dropped (a test that panics leaves
/// nothing under the temp dir either).
pub struct TreeDir(PathBuf);

impl std::ops::Deref for TreeDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TreeDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One synthetic process.
pub struct Proc<'a> {
    /// Its pid.
    pub pid: u32,
    /// `comm`.
    pub comm: &'a str,
    /// `/proc/<pid>/cgroup` text, if it has the file.
    pub cgroup: Option<&'a str>,
    /// fdinfo of its fd 3.
    pub fdinfo: &'a str,
}

/// Builds the tree under the temp dir (`drmtool-<name>-<pid>-<call>`, removed when the
/// returned [`TreeDir`] drops) and the scan options for it.
pub fn drm_tree(name: &str, procs: &[Proc<'_>]) -> (TreeDir, drmtool::Options) {
    // Unique per call: tests run in parallel, and two that asked for the same name (the
    // export tests' `http-0`) wiped each other's tree mid-scan.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("drmtool-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for p in procs {
        let d = root.join(format!("proc/{}", p.pid));
        std::fs::create_dir_all(d.join("fd")).unwrap();
        std::fs::create_dir_all(d.join("fdinfo")).unwrap();
        std::fs::write(d.join("comm"), format!("{}\n", p.comm)).unwrap();
        if let Some(c) = p.cgroup {
            std::fs::write(d.join("cgroup"), c).unwrap();
        }
        std::os::unix::fs::symlink("/dev/null", d.join("fd/3")).unwrap();
        std::fs::write(d.join("fdinfo/3"), p.fdinfo).unwrap();
    }
    let char_dev = root.join("sys/dev/char/1:3");
    std::fs::create_dir_all(&char_dev).unwrap();
    std::fs::create_dir_all(root.join("sys/class/drm")).unwrap();
    std::os::unix::fs::symlink("../../../class/drm", char_dev.join("subsystem")).unwrap();
    let opts = drmtool::Options {
        proc_root: root.join("proc"),
        debugfs_root: root.join("no-debugfs"),
        sys_root: root.join("sys"),
        ..Default::default()
    };
    (TreeDir(root), opts)
}
