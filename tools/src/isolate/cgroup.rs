//! cgroup v2 directories for `drmtool run`: where this process sits, a child cgroup that is
//! removed when dropped, and joining it.

use std::io::Read;
use std::path::{Path, PathBuf};

/// `CGROUP2_SUPER_MAGIC`.
const CGROUP2_MAGIC: i64 = 0x6367_7270;

/// Where cgroup v2 is mounted (the unified hierarchy).
pub const ROOT: &str = crate::dmem::CGROUP_ROOT;

/// Why cgroup v2 cannot be used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupError {
    /// `/sys/fs/cgroup` is not a cgroup2 mount (a cgroup v1 or hybrid machine, or nothing
    /// mounted).
    NotV2 {
        /// What is there instead.
        found: String,
    },
    /// `/proc/self/cgroup` has no `0::` line (no unified hierarchy for this process).
    NoUnifiedLine,
    /// A file operation failed: what and the errno.
    Io {
        /// The operation and path.
        what: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

impl std::fmt::Display for CgroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupError::NotV2 { found } => write!(
                f,
                "{ROOT} is not a cgroup v2 mount ({found}); mount it (mount -t cgroup2 none {ROOT}) \
                 or boot with systemd.unified_cgroup_hierarchy=1"
            ),
            CgroupError::NoUnifiedLine => {
                write!(f, "/proc/self/cgroup has no cgroup v2 (0::) line")
            }
            CgroupError::Io { what, errno } => {
                let hint = match *errno {
                    rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => {
                        " (needs root, or a cgroup delegated to this user)"
                    }
                    _ => "",
                };
                write!(f, "{what}: {errno}{hint}")
            }
        }
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> CgroupError {
    move |e| CgroupError::Io {
        what,
        errno: rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO),
    }
}

/// Checks that [`ROOT`] is cgroup v2.
pub fn check_v2() -> Result<(), CgroupError> {
    match rustix::fs::statfs(ROOT) {
        Ok(st) if st.f_type == CGROUP2_MAGIC => Ok(()),
        Ok(st) => Err(CgroupError::NotV2 {
            found: format!("file system magic {:#x}", st.f_type),
        }),
        Err(e) => Err(CgroupError::NotV2 {
            found: format!("statfs: {e}"),
        }),
    }
}

/// The cgroup path in a `/proc/<pid>/cgroup` text (the `0::` line), e.g. `/user.slice`.
pub fn unified_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// This process's cgroup directory.
pub fn own() -> Result<PathBuf, CgroupError> {
    check_v2()?;
    let mut text = String::new();
    std::fs::File::open("/proc/self/cgroup")
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(io("read /proc/self/cgroup".into()))?;
    let rel = unified_path(&text).ok_or(CgroupError::NoUnifiedLine)?;
    Ok(Path::new(ROOT).join(rel.trim_start_matches('/')))
}

/// A cgroup this process made; removed (rmdir) when dropped, once empty.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Makes `parent/name`.
    pub fn create(parent: &Path, name: &str) -> Result<Cgroup, CgroupError> {
        let path = parent.join(name);
        std::fs::create_dir(&path).map_err(io(format!("mkdir {}", path.display())))?;
        Ok(Cgroup { path })
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the calling process into it (`cgroup.procs` takes `0` for "me").
    pub fn join_self(&self) -> Result<(), CgroupError> {
        join(&self.path)
    }

    /// Removes it now; an error if it still has processes (EBUSY) or children.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        let p = std::mem::take(&mut self.path);
        std::fs::remove_dir(&p).map_err(io(format!("rmdir {}", p.display())))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// Moves the calling process into the cgroup at `dir`.
pub fn join(dir: &Path) -> Result<(), CgroupError> {
    let procs = dir.join("cgroup.procs");
    std::fs::write(&procs, "0").map_err(io(format!("write {}", procs.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_line_is_found() {
        assert_eq!(
            unified_path("0::/user.slice/x.scope\n"),
            Some("/user.slice/x.scope")
        );
        assert_eq!(
            unified_path("12:devices:/a\n0::/b\n1:name=systemd:/c\n"),
            Some("/b")
        );
        assert_eq!(unified_path("12:devices:/a\n"), None);
    }
}
