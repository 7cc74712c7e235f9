//! Reading `/proc`: the process list, each process's `fd` directory, bounded reads of
//! `fdinfo`, `comm` and `maps`, and the classification of fds from their link text.

use super::nodes::{Nodes, node_from_sysfs};
use super::{FdRef, ScanError, Unreadable, describe};
use crate::untrusted::Untrusted;
use crate::{fdinfo, maps};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

pub(super) struct RawDrmFd {
    pub(super) at: FdRef,
    /// Index in [`Nodes::list`].
    pub(super) node: usize,
    pub(super) info: Option<fdinfo::DrmFdinfo>,
    /// Index of its client in the report, once de-duplicated.
    pub(super) client: usize,
}

pub(super) struct RawDmaBufFd {
    pub(super) at: FdRef,
    pub(super) inode: u64,
    pub(super) info: Option<fdinfo::DmaBufFdinfo>,
}

pub(super) struct RawProcess {
    pub(super) pid: u32,
    pub(super) comm: Option<Untrusted>,
    pub(super) uid: Option<u32>,
    /// The cgroup v2 path ([`cgroup_v2_path`]), `None` when unreadable or ambiguous.
    pub(super) cgroup: Option<String>,
    /// Its pid in each pid namespace from the scanned procfs's down to its own
    /// ([`ns_pids`]), `None` when unreadable.
    pub(super) ns_pids: Option<Vec<u32>>,
    pub(super) maps: maps::Maps,
    pub(super) drm: Vec<RawDrmFd>,
    pub(super) dmabuf: Vec<RawDmaBufFd>,
    /// `maps` was longer than [`MAPS_MAX`]: the rest was not read.
    pub(super) maps_truncated: bool,
}

pub(super) enum ProcResult {
    Read(RawProcess),
    Unreadable(Unreadable),
    Vanished,
}

/// Opens a directory under `dir` (`/proc/<pid>`) for `*at` calls.
pub(super) fn open_dir_at(dir: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The most bytes read of one fdinfo file (a real one is a few KiB; the rest of a longer
/// one is left unread and the parse says so).
pub const FDINFO_MAX: usize = 64 << 10;
/// The most bytes read of one `comm` (the kernel's is at most 16).
pub(super) const COMM_MAX: usize = 256;
/// Bytes of `/proc/<pid>/cgroup` read (a longer one is left unknown, not cut).
pub(super) const CGROUP_MAX: usize = Untrusted::MAX_LEN;

/// The cgroup v2 path of a `/proc/<pid>/cgroup` text: the `0::` line, when there is exactly
/// one and it is the last line. The kernel prints directory names raw, so a user who names
/// a delegated cgroup `x\n0::/y` can add lines; the unified hierarchy is printed last on
/// every kernel, so a second `0::` line or text after it means a name with a newline: the
/// path is then unknown rather than what the name says. Non-UTF-8 paths are unknown too.
pub fn cgroup_v2_path(text: &[u8]) -> Option<String> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let mut lines = text.split(|b| *b == b'\n');
    let last = lines.next_back()?;
    if lines.any(|l| l.starts_with(b"0::")) {
        return None;
    }
    let path = std::str::from_utf8(last.strip_prefix(b"0::")?).ok()?;
    path.starts_with('/').then(|| path.to_string())
}
/// The most bytes read of `/proc/<pid>/status` (a real one is about 1.5 KiB).
pub(super) const STATUS_MAX: usize = 8 << 10;

/// Most pid namespace levels: the kernel nests at most 32 below the initial one.
const NS_LEVELS_MAX: usize = 33;

/// The `NSpid:` line of `/proc/<pid>/status`: the process's pid in each pid namespace, from
/// the one the procfs belongs to down to its own (one entry when they are the same). The
/// kernel escapes newlines in the `Name:` line, the only text a process chooses there, so
/// a line starting `NSpid:` is the kernel's; a malformed one (not all decimal pids, none,
/// or more levels than the kernel allows) is `None`, as is a status without it (kernels
/// before 4.1).
pub fn ns_pids(status: &[u8]) -> Option<Vec<u32>> {
    let line = status
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"NSpid:"))?;
    let text = std::str::from_utf8(line).ok()?;
    let pids: Vec<u32> = text
        .split_ascii_whitespace()
        .map(|w| {
            w.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| w.parse::<u32>().ok())
                .flatten()
                .filter(|p| *p > 0)
        })
        .collect::<Option<_>>()?;
    (!pids.is_empty() && pids.len() <= NS_LEVELS_MAX).then_some(pids)
}

/// The most bytes read of one `maps` (65,530 mappings, the default `vm.max_map_count`, are
/// about 10 MiB).
pub(super) const MAPS_MAX: usize = 64 << 20;

/// Reads small files under a directory fd into one reused buffer, with plain `openat`,
/// `read` and `close` (std's `read_to_string` adds an `fstat` and an `lseek` per file,
/// which a scan of thousands of fdinfo files pays for). Every read is bounded.
#[derive(Default)]
pub(super) struct TextReader {
    buf: Vec<u8>,
}

impl TextReader {
    /// The bytes of `name` under `dir`, at most `max` of them, and whether there were more;
    /// `None` when it cannot be read.
    ///
    /// `one_record`: the file is a single-record seq file (`fdinfo/<fd>`, `comm`), whose
    /// whole text one `read` returns when the buffer is larger, so a short read is its end
    /// and saves the `read` that would return 0. Other files (`maps`: a short read may end
    /// one page of records) are read until `read` returns 0.
    pub(super) fn bytes(
        &mut self,
        dir: impl AsFd,
        name: impl rustix::path::Arg,
        one_record: bool,
        max: usize,
    ) -> Option<(&[u8], bool)> {
        let fd =
            rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
        // One byte past `max` tells a file of exactly `max` bytes from a longer one.
        let limit = max.saturating_add(1);
        let first = limit.min(8192);
        if self.buf.len() < first {
            self.buf.resize(first, 0);
        }
        let mut n = 0;
        while n < limit {
            if n == self.buf.len() {
                let grown = self.buf.len().saturating_mul(2).min(limit);
                self.buf.resize(grown, 0);
            }
            let end = self.buf.len().min(limit);
            let room = end - n;
            match rustix::io::read(&fd, &mut self.buf[n..end]) {
                Ok(0) => break,
                Ok(k) => {
                    n += k;
                    if one_record && k < room {
                        break;
                    }
                }
                Err(Errno::INTR) => {}
                Err(_) => return None,
            }
        }
        let truncated = n > max;
        Some((&self.buf[..n.min(max)], truncated))
    }
}

/// Why a truncated fdinfo is in `malformed`.
pub const TRUNCATED: &str =
    "fdinfo longer than drmtool reads (FDINFO_MAX bytes): the rest was not read";

/// Reads fdinfo `name` under `dir` (bounded) and parses it; a truncated file gets a
/// `malformed` entry saying so.
pub(super) fn read_fdinfo<T>(
    reader: &mut TextReader,
    dir: impl AsFd,
    name: impl rustix::path::Arg,
    parse: impl FnOnce(&[u8]) -> T,
    malformed: impl FnOnce(&mut T) -> &mut Vec<fdinfo::Malformed>,
) -> Option<T> {
    let (bytes, truncated) = reader.bytes(dir, name, true, FDINFO_MAX)?;
    let lines = bytes.split(|&b| b == b'\n').count();
    let mut t = parse(bytes);
    if truncated {
        malformed(&mut t).push(fdinfo::Malformed::new(lines, "", TRUNCATED));
    }
    Some(t)
}

/// What an fd refers to.
pub(super) enum FdKind {
    /// A DRM node: its index in [`Nodes::list`].
    Drm(usize),
    /// A dma-buf, with its inode.
    DmaBuf(u64),
    Other,
}

/// Classifies fds without touching the file systems their files are on.
///
/// Of what can be done with `/proc/<pid>/fd/<n>`, `readlink` prints the path the kernel
/// keeps (`d_path`; for pseudo files `socket:[...]`, `pipe:[...]`, `anon_inode:...`,
/// `/dmabuf:<name>`) and reading `fdinfo/<n>` prints procfs's and the file's own lines:
/// neither calls into the file's file system. A `stat` through the link calls the file
/// system's `getattr`, which for FUSE, NFS and the like may ask a server that never
/// answers. So: the link text first, which rules out sockets, pipes and anon inodes (but
/// `anon_inode:dmabuf`, before 5.3); a path (a DRM node is a char device anywhere: `/dev`,
/// a container's `/dev`, a chroot) gets one `statx` with `AT_STATX_DONT_SYNC`, which
/// filesystems that cache attributes (FUSE, NFS, CIFS) answer from the cache. A file system
/// that ignores the flag and always asks its server (9p without a cache) could still hold
/// the scan up; and reading `maps` takes the process's mmap lock, which a thread of it
/// stuck in a page fault on such a file system can hold: both are known limits.
#[derive(Default)]
pub(super) struct FdKinds {
    /// Char devices found not to be DRM nodes.
    not_drm: BTreeSet<(u32, u32)>,
    link_buf: Vec<u8>,
}

/// The `statx` of a classification: type, inode and device number, never a server round
/// trip (see [`FdKinds`]).
pub(super) fn statx_cached(
    dirfd: BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> Option<rustix::fs::Statx> {
    use rustix::fs::StatxFlags;
    rustix::fs::statx(
        dirfd,
        name,
        AtFlags::STATX_DONT_SYNC,
        StatxFlags::TYPE | StatxFlags::INO,
    )
    .ok()
}

impl FdKinds {
    fn classify(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &std::ffi::CStr,
        nodes: &mut Nodes,
        sys_root: &Path,
    ) -> FdKind {
        // A closed fd (or an exited process) just drops out.
        let Ok(l) = rustix::fs::readlinkat(dirfd, name, std::mem::take(&mut self.link_buf)) else {
            return FdKind::Other;
        };
        let kind = self.classify_link(dirfd, name, l.to_bytes(), nodes, sys_root);
        self.link_buf = l.into_bytes();
        kind
    }

    fn classify_link(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &std::ffi::CStr,
        link: &[u8],
        nodes: &mut Nodes,
        sys_root: &Path,
    ) -> FdKind {
        use rustix::fs::FileType;
        match link_class(link) {
            LinkClass::Other => FdKind::Other,
            // anon_inodefs and the dma-buf fs are the kernel's own: a stat asks no server.
            LinkClass::DmaBuf => match statx_cached(dirfd, name) {
                Some(st) => FdKind::DmaBuf(st.stx_ino),
                None => FdKind::Other,
            },
            LinkClass::Path => {
                let Some(st) = statx_cached(dirfd, name) else {
                    return FdKind::Other;
                };
                if FileType::from_raw_mode(st.stx_mode.into()) != FileType::CharacterDevice {
                    return FdKind::Other;
                }
                let dev = (st.stx_rdev_major, st.stx_rdev_minor);
                if let Some(&n) = nodes.by_dev.get(&dev) {
                    return FdKind::Drm(n);
                }
                if self.not_drm.contains(&dev) {
                    return FdKind::Other;
                }
                // A char device not under /dev/dri (a container, a chroot): sysfs says.
                let text = String::from_utf8_lossy(link);
                match node_from_sysfs(sys_root, dev.0, dev.1, &text) {
                    Some(n) => {
                        nodes.list.push(n);
                        FdKind::Drm(nodes.list.len() - 1)
                    }
                    None => {
                        self.not_drm.insert(dev);
                        FdKind::Other
                    }
                }
            }
        }
    }
}

/// What the text of an fd's link says it may be.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum LinkClass {
    /// `/dmabuf:<name>` (5.3 and later) or `anon_inode:dmabuf` (before).
    DmaBuf,
    /// A path: a char device (maybe a DRM node) or a file.
    Path,
    /// Sockets, pipes, other anon inodes, namespaces: never DRM or dma-buf.
    Other,
}

/// Classifies the text of a `/proc/<pid>/fd/<n>` link.
pub(super) fn link_class(link: &[u8]) -> LinkClass {
    if link.starts_with(b"/dmabuf:") || link == b"anon_inode:dmabuf" {
        LinkClass::DmaBuf
    } else if link.starts_with(b"/") {
        LinkClass::Path
    } else {
        LinkClass::Other
    }
}

/// What the reading of every process reuses.
#[derive(Default)]
pub(super) struct Scratch {
    reader: TextReader,
    kinds: FdKinds,
    /// `<pid>/<file>` relative to `/proc`.
    path: String,
    /// `getdents64` buffer for `RawDir` (no allocation per entry).
    dirbuf: Vec<std::mem::MaybeUninit<u8>>,
}

/// Reads one process. Its `fd` directory is opened by name (`<pid>/fd` relative to the
/// `/proc` directory fd), and every later lookup is relative to that directory (`../maps`,
/// `../fdinfo`, `../comm`...), so the kernel resolves two path components per call and no
/// `/proc/<pid>` directory is opened on its own. That also pins the process: a procfs
/// directory belongs to the process it was opened for, and its `..` is that process's
/// directory, so when the process exits mid-read and another takes its pid, the lookups fail
/// (the process is counted as vanished) instead of reading the newcomer's comm, maps, fdinfo,
/// owner or cgroup into the first one's entry. A process that holds nothing costs: its `fd`
/// directory listed, one `readlinkat` per fd (and a `statx` per path), its `maps` read.
pub(super) fn read_process(
    proc_fd: BorrowedFd<'_>,
    proc_root: &Path,
    sys_root: &Path,
    pid: u32,
    nodes: &mut Nodes,
    scratch: &mut Scratch,
    read_maps: bool,
) -> ProcResult {
    let Scratch {
        reader,
        kinds,
        path,
        dirbuf,
    } = scratch;
    if dirbuf.is_empty() {
        dirbuf.resize(16384, std::mem::MaybeUninit::uninit());
    }
    let sub = |path: &mut String, name: &str| {
        path.clear();
        let _ = write!(path, "{pid}/{name}");
    };
    // Before the `fd` directory is open: whether `/proc/<pid>` is gone by name.
    let gone = |path: &mut String| {
        path.clear();
        let _ = write!(path, "{pid}");
        rustix::fs::statat(proc_fd, path.as_str(), AtFlags::empty()).is_err()
    };
    // After: whether the process the `fd` directory was opened for is gone (its `fd` entry
    // no longer resolves, even if another process has taken the pid).
    let gone_at =
        |fd_dir: BorrowedFd<'_>| rustix::fs::statat(fd_dir, "../fd", AtFlags::empty()).is_err();
    let unreadable = |name: &str, e: Errno, comm: Option<Untrusted>| {
        let (reason, errno) = describe(&e.into());
        ProcResult::Unreadable(Unreadable {
            pid,
            comm,
            path: proc_root
                .join(pid.to_string())
                .join(name)
                .display()
                .to_string(),
            reason,
            errno,
        })
    };
    // Read only for a process that holds something, or cannot be read: relative to `dir`
    // (`/proc` by name, or the pinned `fd` directory).
    let comm_of = |reader: &mut TextReader, dir: BorrowedFd<'_>, name: &str| {
        reader
            .bytes(dir, name, true, COMM_MAX)
            .map(|(b, _)| Untrusted::new(b.strip_suffix(b"\n").unwrap_or(b)))
    };
    sub(path, "fd");
    let fd_dir = match open_dir_at(proc_fd, path.as_str()) {
        Ok(d) => d,
        Err(Errno::NOENT | Errno::SRCH) => return ProcResult::Vanished,
        Err(e) => {
            if gone(path) {
                return ProcResult::Vanished;
            }
            sub(path, "comm");
            let comm = comm_of(reader, proc_fd, path.as_str());
            return unreadable("fd", e, comm);
        }
    };
    let mut p = RawProcess {
        pid,
        comm: None,
        uid: None,
        ns_pids: None,
        cgroup: None,
        maps: maps::Maps::default(),
        drm: Vec::new(),
        dmabuf: Vec::new(),
        maps_truncated: false,
    };
    list_fds(
        fd_dir.as_fd(),
        nodes,
        sys_root,
        reader,
        kinds,
        dirbuf,
        &mut p,
    );
    #[cfg(test)]
    tests::AFTER_FD_LIST.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f(pid)
        }
    });
    let fd_dir = fd_dir.as_fd();
    // `maps` last: a process that exited meanwhile has none (its fds are closed too, so
    // what was listed may be partial).
    if read_maps {
        match reader.bytes(fd_dir, "../maps", false, MAPS_MAX) {
            Some((t, truncated)) => {
                p.maps = maps::parse_bytes(t);
                p.maps_truncated = truncated;
            }
            None if gone_at(fd_dir) => return ProcResult::Vanished,
            None => {}
        }
    }
    if !p.drm.is_empty() || !p.dmabuf.is_empty() || !p.maps.gpu.is_empty() {
        p.comm = comm_of(reader, fd_dir, "../comm");
        if p.comm.is_none() && gone_at(fd_dir) {
            return ProcResult::Vanished;
        }
        read_identity(reader, fd_dir, &mut p);
    }
    ProcResult::Read(p)
}

/// Lists the fds in `fd_dir` (the process's `fd` directory) and adds each DRM and dma-buf
/// fd, with its fdinfo, to `p`.
fn list_fds(
    fd_dir: BorrowedFd<'_>,
    nodes: &mut Nodes,
    sys_root: &Path,
    reader: &mut TextReader,
    kinds: &mut FdKinds,
    dirbuf: &mut [std::mem::MaybeUninit<u8>],
    p: &mut RawProcess,
) {
    let pid = p.pid;
    // Opened at the first DRM or dma-buf fd.
    let mut fdinfo_dir: Option<OwnedFd> = None;
    fn open_fdinfo<'a>(
        slot: &'a mut Option<OwnedFd>,
        fd_dir: BorrowedFd<'_>,
    ) -> Option<BorrowedFd<'a>> {
        if slot.is_none() {
            *slot = open_dir_at(fd_dir, "../fdinfo").ok();
        }
        slot.as_ref().map(|d| d.as_fd())
    }
    let mut list = rustix::fs::RawDir::new(fd_dir, dirbuf);
    while let Some(ent) = list.next() {
        // An error mid-listing (the process exited) ends the list.
        let Ok(ent) = ent else { break };
        let name = ent.file_name();
        let Some(fd) = name.to_str().ok().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dirfd = fd_dir;
        let at = FdRef { pid, fd };
        match kinds.classify(dirfd, name, nodes, sys_root) {
            FdKind::Drm(node) => {
                let info = open_fdinfo(&mut fdinfo_dir, dirfd).and_then(|d| {
                    read_fdinfo(
                        reader,
                        d,
                        name,
                        |b| fdinfo::parse_drm(&String::from_utf8_lossy(b)),
                        |f| &mut f.malformed,
                    )
                });
                p.drm.push(RawDrmFd {
                    at,
                    node,
                    info,
                    client: usize::MAX,
                });
            }
            FdKind::DmaBuf(inode) => {
                let info = open_fdinfo(&mut fdinfo_dir, dirfd).and_then(|d| {
                    read_fdinfo(reader, d, name, fdinfo::parse_dmabuf_bytes, |f| {
                        &mut f.malformed
                    })
                });
                p.dmabuf.push(RawDmaBufFd { at, inode, info });
            }
            FdKind::Other => {}
        }
    }
}

/// A holder's uid, pids in its pid namespaces and cgroup, read through its `fd`
/// directory.
fn read_identity(reader: &mut TextReader, fd_dir: BorrowedFd<'_>, p: &mut RawProcess) {
    // `/proc/<pid>/fd` is owned like `/proc/<pid>`: by the process's euid.
    p.uid = rustix::fs::fstat(fd_dir).ok().map(|s| s.st_uid);
    p.ns_pids = reader
        .bytes(fd_dir, "../status", false, STATUS_MAX)
        .and_then(|(b, truncated)| (!truncated).then(|| ns_pids(b)).flatten())
        // Its first entry is the pid in this procfs's namespace: the directory's name.
        .filter(|v| v.first() == Some(&p.pid));
    p.cgroup = reader
        .bytes(fd_dir, "../cgroup", true, CGROUP_MAX)
        .and_then(|(b, truncated)| (!truncated).then(|| cgroup_v2_path(b)).flatten());
}

/// Opens `/proc` and lists its process directories, sorted.
pub(super) fn list_pids(proc_root: &Path) -> Result<(OwnedFd, Vec<u32>), ScanError> {
    let fail = |e: Errno| ScanError {
        what: format!(
            "cannot list {}: {}",
            proc_root.display(),
            describe(&e.into()).0
        ),
        hint: "mount procfs (mount -t proc proc /proc)",
    };
    let fd = rustix::fs::open(
        proc_root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    let mut dir = Dir::read_from(&fd).map_err(fail)?;
    let mut pids = Vec::new();
    while let Some(ent) = dir.read() {
        // An error mid-listing ends the list (as a process that exits does).
        let Ok(ent) = ent else { break };
        if let Some(pid) = ent.file_name().to_str().ok().and_then(|s| s.parse().ok()) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    Ok((fd, pids))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's hook, called with the pid.
    type Hook = Option<Box<dyn FnMut(u32)>>;

    std::thread_local! {
        /// Called with the pid after [`read_process`] listed its fds (a test's way into the
        /// middle of a read).
        pub(super) static AFTER_FD_LIST: std::cell::RefCell<Hook> =
            const { std::cell::RefCell::new(None) };
    }

    /// A synthetic process directory: comm, cgroup, fd 3 = `/dev/null` (a DRM node to the
    /// synthetic sysfs) with `fdinfo`.
    fn synthetic_process(dir: &Path, comm: &str, cgroup: &str, fdinfo: &str) {
        std::fs::create_dir_all(dir.join("fd")).unwrap();
        std::fs::create_dir_all(dir.join("fdinfo")).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        std::fs::write(dir.join("status"), "Name:\tx\nNSpid:\t4242\n").unwrap();
        std::os::unix::fs::symlink("/dev/null", dir.join("fd/3")).unwrap();
        std::fs::write(dir.join("fdinfo/3"), fdinfo).unwrap();
    }

    /// The process exits after its fds were listed and another takes its pid (here: the
    /// directory `/proc/<pid>` names is another one from then on). Nothing of the newcomer
    /// may land in the first one's entry: comm, cgroup, owner, maps, fdinfo are read through
    /// the `fd` directory listed (on procfs they then fail: the process is vanished).
    #[test]
    fn a_pid_reused_mid_read_lends_nothing_of_the_newcomer() {
        let root = std::env::temp_dir().join(format!("drmtool-pidreuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let proc = root.join("proc");
        synthetic_process(
            &proc.join("4242"),
            "holder",
            "0::/owner\n",
            "drm-driver:\tvkms\ndrm-client-id:\t1\ndrm-total-system:\t8 KiB\n",
        );
        let char_dev = root.join("sys/dev/char/1:3");
        std::fs::create_dir_all(&char_dev).unwrap();
        std::fs::create_dir_all(root.join("sys/class/drm")).unwrap();
        std::os::unix::fs::symlink("../../../class/drm", char_dev.join("subsystem")).unwrap();
        let swap = proc.clone();
        AFTER_FD_LIST.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |pid| {
                let now = swap.join(pid.to_string());
                std::fs::rename(&now, swap.join(format!("exited-{pid}"))).unwrap();
                synthetic_process(
                    &now,
                    "impostor",
                    "0::/impostor\n",
                    "drm-driver:\tvkms\ndrm-client-id:\t2\ndrm-total-system:\t1 TiB\n",
                );
                std::fs::write(
                    now.join("maps"),
                    "7f0000000000-7f0040000000 rw-s 00000000 00:05 3 /dev/null\n",
                )
                .unwrap();
            }))
        });
        let r = crate::scan(&crate::Options {
            proc_root: proc.clone(),
            debugfs_root: root.join("no-debugfs"),
            sys_root: root.join("sys"),
            ..Default::default()
        });
        AFTER_FD_LIST.with(|h| h.borrow_mut().take());
        let _ = std::fs::remove_dir_all(&root);
        let r = r.unwrap();
        assert_eq!(r.processes.len(), 1, "{r:#?}");
        let p = &r.processes[0];
        assert_eq!(
            p.comm.as_ref().map(|c| c.escaped()).as_deref(),
            Some("holder")
        );
        assert_eq!(
            p.cgroup.as_ref().map(|c| c.escaped()).as_deref(),
            Some("/owner")
        );
        assert!(p.drm_mappings.is_empty(), "{p:#?}");
        assert_eq!(r.clients.len(), 1, "{r:#?}");
        assert_eq!(r.clients[0].client_id, Some(1));
        assert_eq!(r.clients[0].memory_total.value, Some(8192));
    }

    #[test]
    fn ns_pids_reads_the_kernels_line_only() {
        let status = b"Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t812\n\
            Pid:\t812\nNStgid:\t812\t1\nNSpid:\t812\t1\nNSpgid:\t812\t1\n";
        assert_eq!(ns_pids(status), Some(vec![812, 1]));
        assert_eq!(ns_pids(b"Name:\tx\nNSpid:\t77\n"), Some(vec![77]));
        // A name cannot forge the line: the kernel prints a newline in it as \n.
        assert_eq!(ns_pids(b"Name:\tx\\nNSpid:\t1\nPid:\t9\n"), None);
        for bad in [
            &b"NSpid:\n"[..],
            b"NSpid:\t12\tx\n",
            b"NSpid:\t-1\n",
            b"NSpid:\t0\n",
            b"NSpid:\t+5\n",
            b"NSpid:\t99999999999\n",
            b"NSpid:\t\xff\n",
            b"Pid:\t5\n",
        ] {
            assert_eq!(ns_pids(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = format!("NSpid:{}\n", "\t3".repeat(34));
        assert_eq!(ns_pids(deep.as_bytes()), None);
        let ok = format!("NSpid:{}\n", "\t3".repeat(33));
        assert_eq!(ns_pids(ok.as_bytes()).map(|v| v.len()), Some(33));
    }

    #[test]
    fn cgroup_v2_path_is_the_one_last_unified_line() {
        assert_eq!(
            cgroup_v2_path(b"0::/user.slice/a.scope\n").as_deref(),
            Some("/user.slice/a.scope")
        );
        // Hybrid: v1 lines first, the unified one last.
        let hybrid = b"12:cpu,cpuacct:/x\n1:name=systemd:/y\n0::/system.slice/z.service\n";
        assert_eq!(
            cgroup_v2_path(hybrid).as_deref(),
            Some("/system.slice/z.service")
        );
        // v1 only: no unified path.
        assert_eq!(cgroup_v2_path(b"1:name=systemd:/y\n"), None);
        // A name with a newline that forges a second line, in either hierarchy.
        assert_eq!(cgroup_v2_path(b"0::/user.slice/x\n0::/forged\n"), None);
        assert_eq!(
            cgroup_v2_path(b"1:name=systemd:/a\n0::/f\n0::/real\n"),
            None
        );
        assert_eq!(cgroup_v2_path(b"0::/user.slice/x\nsomething\n"), None);
        assert_eq!(cgroup_v2_path(b""), None);
        assert_eq!(cgroup_v2_path(b"0::relative\n"), None);
        assert_eq!(cgroup_v2_path(b"0::/bad\xff\n"), None);
    }

    #[test]
    fn link_text_rules_out_pseudo_files_without_a_stat() {
        assert_eq!(link_class(b"socket:[1234]"), LinkClass::Other);
        assert_eq!(link_class(b"pipe:[99]"), LinkClass::Other);
        assert_eq!(link_class(b"anon_inode:[eventfd]"), LinkClass::Other);
        assert_eq!(link_class(b"anon_inode:dmabuf"), LinkClass::DmaBuf);
        assert_eq!(link_class(b"/dmabuf:x\nsize:\t1"), LinkClass::DmaBuf);
        assert_eq!(link_class(b"/dmabuf:"), LinkClass::DmaBuf);
        assert_eq!(link_class(b"/dev/dri/card0"), LinkClass::Path);
        assert_eq!(link_class(b"/mnt/fuse/file (deleted)"), LinkClass::Path);
    }

    #[test]
    fn fdinfo_reads_are_bounded_and_say_so() {
        let dir = std::env::temp_dir().join(format!("drmtool-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A 1 MiB "fdinfo" whose last line would override the size.
        let mut text = b"size:\t8192\ncount:\t1\nexp_name:\tudmabuf\n".to_vec();
        while text.len() < (1 << 20) {
            text.extend_from_slice(b"pad:\t0\n");
        }
        text.extend_from_slice(b"size:\t1099511627776\n");
        std::fs::write(dir.join("big"), &text).unwrap();
        std::fs::write(dir.join("exact"), vec![b'a'; FDINFO_MAX]).unwrap();
        let d = open_dir_at(rustix::fs::CWD, dir.to_str().unwrap()).unwrap();
        let mut r = TextReader::default();
        let (b, truncated) = r.bytes(&d, "big", true, FDINFO_MAX).unwrap();
        assert_eq!((b.len(), truncated), (FDINFO_MAX, true));
        assert!(r.buf.len() <= FDINFO_MAX + 1, "read {} bytes", r.buf.len());
        let (b, truncated) = r.bytes(&d, "exact", true, FDINFO_MAX).unwrap();
        assert_eq!((b.len(), truncated), (FDINFO_MAX, false));
        let f = read_fdinfo(&mut r, &d, "big", fdinfo::parse_dmabuf_bytes, |f| {
            &mut f.malformed
        })
        .unwrap();
        assert_eq!(f.size, Some(8192));
        assert_eq!(f.malformed.last().map(|m| m.why.as_str()), Some(TRUNCATED));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
