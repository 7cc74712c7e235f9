//! Where `drmtool run` makes its job cgroups: under a parent that only root can write.
//!
//! A user who can write any ancestor's directory or `cgroup.procs` could move the job out
//! of its cgroup (a process may be moved between two cgroups by whoever can write the
//! `cgroup.procs` of their common ancestor), or swap the job's cgroup for one without a
//! device program. So every directory from the cgroup root down to the parent, and each
//! one's `cgroup.procs`, must be owned by root and writable by no group or other; the
//! walk opens each component relative to the last (`O_NOFOLLOW`), checks what it opened
//! (`fstat`), and the job cgroup is made and opened relative to the parent's fd, never by
//! a path another process can change in between.

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::path::{Component, Path, PathBuf};

/// The default parent, relative to the cgroup root (`/sys/fs/cgroup/drmtool.slice`; the
/// systemd unit of the same name delegates it on systemd hosts).
pub const DEFAULT_PARENT: &str = "drmtool.slice";

/// Why a parent was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnchorError {
    /// The parent is not a relative path of plain components under the cgroup root.
    #[error("the job cgroup parent {0:?} is not a path of plain names under {root}", root = super::cgroup::ROOT)]
    BadPath(String),
    /// A directory or `cgroup.procs` on the way can be written by a non-root user.
    #[error(
        "{path} is {what} (owner uid {uid}, mode {mode:o}): a user who can write there can \
         move a job out of its cgroup; job cgroups need a parent only root can write"
    )]
    Writable {
        /// The file.
        path: String,
        /// What is wrong with it.
        what: &'static str,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// An operation failed.
    #[error("{what}: {errno}")]
    Io {
        /// The operation and path.
        what: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

/// What is wrong with a file of owner `uid` and permission bits `mode` on the way to the
/// parent, if anything.
pub fn unsafe_owner(uid: u32, mode: u32) -> Option<&'static str> {
    if uid != 0 {
        Some("not owned by root")
    } else if mode & 0o022 != 0 {
        Some("writable by its group or others")
    } else {
        None
    }
}

/// The parent's components, checked: plain names only (no `..`, no root, no `.`).
pub fn components(rel: &Path) -> Result<Vec<&std::ffi::OsStr>, AnchorError> {
    let bad = || AnchorError::BadPath(rel.display().to_string());
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => return Err(bad()),
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// The job cgroups' parent, open and checked.
#[derive(Debug)]
pub struct Parent {
    /// Its directory fd.
    pub fd: OwnedFd,
    /// Its path (for messages and for `drmtool leases`).
    pub path: PathBuf,
}

fn io(what: String) -> impl FnOnce(rustix::io::Errno) -> AnchorError {
    move |errno| AnchorError::Io { what, errno }
}

/// Calls `f` with the cgroup root, then with each directory of `rel` below it, top down
/// (the root with `true`), each opened without following links; [`open_parent`] checks
/// they are root's alone.
///
/// # Errors
/// `f`'s error, or an [`AnchorError`] for a path that is not relative or a directory that
/// does not open.
pub fn walk_down<E: From<AnchorError>>(
    rel: &Path,
    mut f: impl FnMut(rustix::fd::BorrowedFd<'_>, &Path, bool) -> Result<(), E>,
) -> Result<(), E> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut path = PathBuf::from(super::cgroup::ROOT);
    let mut fd = rustix::fs::open(&path, flags, Mode::empty())
        .map_err(io(format!("open {}", path.display())))?;
    f(fd.as_fd(), &path, true)?;
    for c in components(rel)? {
        path.push(c);
        fd = rustix::fs::openat(&fd, c, flags, Mode::empty())
            .map_err(io(format!("open {}", path.display())))?;
        f(fd.as_fd(), &path, false)?;
    }
    Ok(())
}

fn check(dir: &OwnedFd, path: &Path) -> Result<(), AnchorError> {
    let st = rustix::fs::fstat(dir).map_err(io(format!("fstat {}", path.display())))?;
    if let Some(what) = unsafe_owner(st.st_uid, st.st_mode & 0o7777) {
        return Err(AnchorError::Writable {
            path: path.display().to_string(),
            what,
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
        });
    }
    let procs = path.join("cgroup.procs");
    let st = rustix::fs::statat(dir, "cgroup.procs", rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(io(format!("stat {}", procs.display())))?;
    if let Some(what) = unsafe_owner(st.st_uid, st.st_mode & 0o7777) {
        return Err(AnchorError::Writable {
            path: procs.display().to_string(),
            what,
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
        });
    }
    Ok(())
}

fn open_dir(at: impl AsFd, name: &std::ffi::OsStr, path: &Path) -> Result<OwnedFd, AnchorError> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io(format!("open {}", path.display())))
}

/// Opens (making the last component, 0755, when missing) the parent `rel` under the cgroup
/// root and checks every directory on the way and its `cgroup.procs`.
///
/// # Errors
/// [`AnchorError`]: a bad path, a component a non-root user can write, or the errno.
pub fn open_parent(rel: &Path) -> Result<Parent, AnchorError> {
    let comps = components(rel)?;
    let root = Path::new(super::cgroup::ROOT);
    let mut fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io(format!("open {}", root.display())))?;
    let mut path = root.to_path_buf();
    check(&fd, &path)?;
    let last = comps.len() - 1;
    for (i, c) in comps.into_iter().enumerate() {
        path.push(c);
        if i == last {
            match rustix::fs::mkdirat(&fd, c, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(format!("mkdir {}", path.display()))(e)),
            }
        }
        fd = open_dir(&fd, c, &path)?;
        check(&fd, &path)?;
    }
    Ok(Parent { fd, path })
}

/// Opens the directory `name` under `at` (never through a link) and checks it and its
/// `cgroup.procs` are root's alone, as [`open_parent`] checks each directory on its way.
///
/// # Errors
/// [`AnchorError::Io`], [`AnchorError::Writable`].
pub fn open_checked(at: impl AsFd, name: &str, path: &Path) -> Result<OwnedFd, AnchorError> {
    let fd = open_dir(at, name.as_ref(), path)?;
    check(&fd, path)?;
    Ok(fd)
}

/// A job's cgroup: made under a [`Parent`], opened relative to it, removed on drop once
/// empty.
#[derive(Debug)]
pub struct JobCgroup {
    parent: OwnedFd,
    name: String,
    /// Its directory fd (what `CLONE_INTO_CGROUP` and the program attach take).
    pub fd: OwnedFd,
    /// Its path.
    pub path: PathBuf,
    removed: bool,
}

impl JobCgroup {
    /// Makes `name` under `parent` (a fresh directory: EEXIST is an error, never a reuse).
    ///
    /// # Errors
    /// The errno of mkdir or open.
    pub fn create(parent: &Parent, name: &str) -> Result<JobCgroup, AnchorError> {
        let path = parent.path.join(name);
        rustix::fs::mkdirat(&parent.fd, name, Mode::from_raw_mode(0o755))
            .map_err(io(format!("mkdir {}", path.display())))?;
        let parent_fd = rustix::io::fcntl_dupfd_cloexec(&parent.fd, 0)
            .map_err(io(format!("dup {}", parent.path.display())))?;
        let fd = open_dir(&parent.fd, name.as_ref(), &path)?;
        let cg = JobCgroup {
            parent: parent_fd,
            name: name.to_string(),
            fd,
            path,
            removed: false,
        };
        check(&cg.fd, &cg.path)?;
        Ok(cg)
    }

    /// Waits (up to `patience`) for the cgroup to have no process left, then removes it.
    ///
    /// # Errors
    /// The errno of the last rmdir (EBUSY: processes remain).
    pub fn remove(mut self, patience: std::time::Duration) -> Result<(), AnchorError> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            match rustix::fs::unlinkat(
                &self.parent,
                self.name.as_str(),
                rustix::fs::AtFlags::REMOVEDIR,
            ) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(rustix::io::Errno::BUSY) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io(format!("rmdir {}", self.path.display()))(e)),
            }
        }
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        if !self.removed {
            let _ = rustix::fs::unlinkat(
                &self.parent,
                self.name.as_str(),
                rustix::fs::AtFlags::REMOVEDIR,
            );
        }
    }
}

/// A job cgroup's name: `run-<pid>-<start>-<n>`, the supervisor's pid, its start time in
/// clock ticks since boot (`/proc/<pid>/stat` field 22) and a counter, so that a cgroup a
/// killed supervisor left behind never collides with a later run of the same pid.
pub fn job_name(pid: u32, start: u64, n: u64) -> String {
    format!("run-{pid}-{start}-{n}")
}

/// Reads [`job_name`] back.
pub fn parse_job_name(s: &str) -> Option<(u32, u64)> {
    let mut it = s.strip_prefix("run-")?.split('-');
    let pid = it.next()?.parse().ok()?;
    let start = it.next()?.parse().ok()?;
    it.next()?.parse::<u64>().ok()?;
    it.next().is_none().then_some((pid, start))
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`, read
/// after the last `)`, since the command name may hold anything).
pub fn start_ticks(pid: u32) -> Option<u64> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|f| f.take(4096).read_to_end(&mut text))
        .ok()?;
    start_ticks_of(&text)
}

/// [`start_ticks`] of a `/proc/<pid>/stat` text.
pub fn start_ticks_of(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After ")": field 3 (state) is the first; field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Removes the empty job cgroups under `parent` whose supervisor (pid and start time) is
/// gone: what a SIGKILLed `run` left behind. A cgroup with processes stays (EBUSY).
pub fn sweep(parent: &Parent) {
    let Ok(rd) = std::fs::read_dir(&parent.path) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some((pid, start)) = name.to_str().and_then(parse_job_name) else {
            continue;
        };
        if start_ticks(pid) == Some(start) {
            continue;
        }
        let _ = rustix::fs::unlinkat(&parent.fd, name.as_os_str(), rustix::fs::AtFlags::REMOVEDIR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_owned_unwritable_files_anchor() {
        assert_eq!(unsafe_owner(0, 0o755), None);
        assert_eq!(unsafe_owner(0, 0o644), None);
        assert_eq!(unsafe_owner(1000, 0o755), Some("not owned by root"));
        assert_eq!(
            unsafe_owner(0, 0o775),
            Some("writable by its group or others")
        );
        assert_eq!(
            unsafe_owner(0, 0o646),
            Some("writable by its group or others")
        );
    }

    #[test]
    fn parent_paths_are_plain_names() {
        assert_eq!(components(Path::new("drmtool.slice")).unwrap().len(), 1);
        assert_eq!(components(Path::new("a/b")).unwrap().len(), 2);
        for bad in ["", "/", "/abs", "../x", "a/../b", "./a"] {
            assert!(components(Path::new(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn job_names_round_trip() {
        assert_eq!(parse_job_name(&job_name(42, 12345, 0)), Some((42, 12345)));
        assert_eq!(parse_job_name("run-42-1"), None);
        assert_eq!(parse_job_name("run-42-1-2-3"), None);
        assert_eq!(parse_job_name("drmtool-run-42"), None);
    }

    #[test]
    fn start_time_after_a_hostile_name() {
        let stat = b"77 (a) b) c (d) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 9876 1000 1";
        assert_eq!(start_ticks_of(stat), Some(9876));
        assert_eq!(start_ticks_of(b"77 (x"), None);
    }
}
