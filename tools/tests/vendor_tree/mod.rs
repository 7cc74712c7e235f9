//! A synthetic /proc, /sys and /dev tree for the vendor-node host tests
//! (`mod vendor_tree;` in tests/vendor.rs and tests/cdi.rs).
#![allow(dead_code)]

use drmtool::vendor::VendorRoots;
use std::path::{Path, PathBuf};

/// A synthetic tree under the temp dir, removed when dropped (as tests/synthetic's
/// `TreeDir`).
pub struct Tree(pub PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Tree {
    /// A tree unique to this call (tests run in parallel, two of them on `machine()`).
    pub fn new(name: &str) -> Tree {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("drmtool-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Tree(root)
    }

    pub fn write(&self, rel: &str, text: impl AsRef<[u8]>) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.0.join(rel)).unwrap();
    }

    pub fn link(&self, target: &str, rel: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    pub fn roots(&self) -> VendorRoots {
        VendorRoots {
            proc_root: self.0.join("proc"),
            sys_root: self.0.join("sys"),
            dev_root: self.0.join("dev"),
        }
    }

    pub fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.0).unwrap().display().to_string()
    }
}
