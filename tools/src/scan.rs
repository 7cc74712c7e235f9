//! One pass over `/proc/*/fd`: finds DRM and dma-buf fds, reads their fdinfo, the
//! processes' GPU mappings and the devices' debugfs files, de-duplicates shared open files
//! and builds the [`Report`].
//!
//! No subprocess is spawned. A process that exits during the scan is counted as vanished;
//! a process whose files this user may not read is listed with the reason. Every figure
//! carries its [`Source`]; what no source exposes is [`Source::Unknown`], never guessed.

use crate::untrusted::Untrusted;
use crate::{debugfs, fdinfo, maps, sys_call};
use rustc_hash::FxHashMap as HashMap;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Version of the JSON shape (`tools/schema/buffers.schema.json`); bumped on any breaking
/// change.
pub const SCHEMA_VERSION: u32 = 1;

/// Where a figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `drm-*` keys of `/proc/<pid>/fdinfo/<fd>`.
    Fdinfo,
    /// Pre-5.19 amdgpu keys of fdinfo.
    FdinfoAmdgpuLegacy,
    /// DRM or dma-buf mappings in `/proc/<pid>/maps`.
    Maps,
    /// `size` of a dma-buf's fdinfo.
    DmabufFdinfo,
    /// debugfs `dri/<minor>/clients`.
    DebugfsClients,
    /// debugfs `dri/<minor>/framebuffer`.
    DebugfsFramebuffer,
    /// debugfs `dri/<minor>/gem_names`.
    DebugfsGemNames,
    /// No readable source exposes this figure.
    Unknown,
}

/// A number of bytes (or a count) and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Figure {
    /// The value; `None` when unknown.
    pub value: Option<u64>,
    /// Where it came from.
    pub source: Source,
    /// Why it is unknown, or what it covers (most are fixed texts: not allocated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<Cow<'static, str>>,
}

impl Figure {
    /// A known figure.
    pub fn known(value: u64, source: Source) -> Self {
        Self {
            value: Some(value),
            source,
            note: None,
        }
    }

    /// An unknown figure with the reason.
    pub fn unknown(why: impl Into<Cow<'static, str>>) -> Self {
        Self {
            value: None,
            source: Source::Unknown,
            note: Some(why.into()),
        }
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<Cow<'static, str>>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// One fd of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FdRef {
    /// Process id.
    pub pid: u32,
    /// File descriptor number.
    pub fd: u32,
}

/// One DRM device (the parent of one or more nodes), with totals over its clients.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Index in `devices`.
    pub index: usize,
    /// The sysfs path of the parent device.
    pub sysfs: String,
    /// Driver name (`DRM_IOCTL_VERSION` or debugfs), when known.
    pub driver: Option<String>,
    /// Its nodes (`/dev/dri/card0`, `/dev/dri/renderD128`).
    pub nodes: Vec<Node>,
    /// Distinct open files found (after de-duplication).
    pub clients: usize,
    /// Clients the kernel lists in debugfs `clients` (every process, readable or not).
    pub debugfs_clients: Figure,
    /// Sum of `drm-total-*` over distinct clients (a buffer shared by two clients is in
    /// both totals; see `shared`).
    pub memory_total: Figure,
    /// Sum of `drm-shared-*` over distinct clients.
    pub memory_shared: Figure,
    /// Bytes of distinct buffers mapped by any process (by mmap offset).
    pub mapped: Figure,
    /// Bytes of GEM objects behind framebuffers (debugfs `framebuffer`).
    pub framebuffer_bytes: Figure,
    /// Bytes of flink-named objects (debugfs `gem_names`; not an inventory).
    pub named_bytes: Figure,
    /// Framebuffers from debugfs, when readable.
    pub framebuffers: Vec<debugfs::Framebuffer>,
    /// debugfs rows of `clients`, when readable.
    pub debugfs_client_rows: Vec<KernelClient>,
    /// Whether debugfs was readable, and why not.
    pub debugfs: Access,
}

/// A row of debugfs `clients` with the process it belongs to.
#[derive(Debug, Clone, Serialize)]
pub struct KernelClient {
    /// The row as printed.
    #[serde(flatten)]
    pub row: debugfs::Client,
    /// The process: the id itself for a `tgid` column, else the `Tgid` of that thread in
    /// `/proc/<id>/status` (`None` when the thread is gone).
    pub process: Option<u32>,
}

fn process_of(proc_root: &Path, row: &debugfs::Client) -> Option<u32> {
    if row.id_column == "tgid" {
        return Some(row.id);
    }
    let status = std::fs::read_to_string(proc_root.join(row.id.to_string()).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One node of a device.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// `/dev/dri/...` path.
    pub path: String,
    /// `primary` or `render`.
    pub kind: String,
    /// Minor number.
    pub minor: u32,
}

/// Whether a source could be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    /// It was read.
    pub readable: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// An engine of a client, with its busy share when two samples exist (`--watch`).
#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    /// Raw counters.
    #[serde(flatten)]
    pub stats: fdinfo::EngineStats,
    /// Busy percentage since the previous sample, divided by capacity; `None` on the first.
    pub busy_percent: Option<f64>,
}

/// One open DRM file (a `drm_file`), possibly held by several fds and processes.
#[derive(Debug, Clone, Serialize)]
pub struct ClientReport {
    /// Index in `clients`.
    pub index: usize,
    /// Index of its device in `devices`.
    pub device: usize,
    /// The node it was opened on.
    pub node: String,
    /// `drm-client-id`, when printed.
    pub client_id: Option<u64>,
    /// `drm-client-name`, when printed.
    pub client_name: Option<Untrusted>,
    /// `drm-driver`, when printed.
    pub driver: Option<String>,
    /// `drm-pdev`, when printed.
    pub pdev: Option<String>,
    /// Every fd that refers to this open file.
    pub holders: Vec<FdRef>,
    /// How the holders were found to be one file: `drm-client-id`, `kcmp`, or `none`.
    pub dedupe: &'static str,
    /// Sum of `drm-total-*` (or the legacy keys).
    pub memory_total: Figure,
    /// Sum of `drm-shared-*`.
    pub memory_shared: Figure,
    /// Per-region figures (bytes).
    pub regions: BTreeMap<String, fdinfo::RegionStats>,
    /// Per-engine figures.
    pub engines: BTreeMap<String, EngineReport>,
    /// Pre-5.19 amdgpu keys.
    pub amdgpu_legacy: Option<fdinfo::AmdgpuLegacy>,
    /// fdinfo keys drmtool does not know.
    pub unknown_keys: Vec<(String, String)>,
    /// fdinfo lines that were not in the documented format.
    pub malformed: Vec<fdinfo::Malformed>,
}

/// A DRM fd of a process.
#[derive(Debug, Clone, Serialize)]
pub struct DrmFd {
    /// The fd.
    pub fd: u32,
    /// The node.
    pub node: String,
    /// Index of its client in `clients`.
    pub client: usize,
}

/// A dma-buf fd of a process.
#[derive(Debug, Clone, Serialize)]
pub struct DmaBufFd {
    /// The fd.
    pub fd: u32,
    /// The dma-buf's inode (index into `dmabufs` by inode).
    pub inode: u64,
}

/// Bytes a process maps from one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceMapping {
    /// Index of the device in `devices`.
    pub device: usize,
    /// The node path as printed in maps.
    pub node: String,
    /// Number of distinct buffers (mmap offsets).
    pub buffers: usize,
    /// Bytes mapped.
    pub bytes: Figure,
}

/// One process that holds GPU memory.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    /// Process id.
    pub pid: u32,
    /// `comm`.
    pub comm: Option<Untrusted>,
    /// Owner uid.
    pub uid: Option<u32>,
    /// DRM fds.
    pub drm_fds: Vec<DrmFd>,
    /// dma-buf fds.
    pub dmabuf_fds: Vec<DmaBufFd>,
    /// Mappings of DRM nodes, per device.
    pub drm_mappings: Vec<DeviceMapping>,
    /// Inodes of the dma-bufs it maps.
    pub dmabuf_mappings: Vec<u64>,
    /// Bytes of GEM shmem objects it maps directly (`/drm mm object`: on older kernels a
    /// dma-buf mmap of a shmem buffer shows so; which buffer it is, is unknown).
    pub mapped_gem_shmem: Figure,
    /// Bytes of DRM buffers it maps (sum over devices).
    pub mapped_drm: Figure,
    /// Bytes of distinct dma-bufs it holds by fd or mapping.
    pub dmabuf_bytes: Figure,
    /// Sum of fdinfo totals of the clients it holds (a client held by two processes counts
    /// in both).
    pub memory_total: Figure,
    /// maps lines that were not in the documented format.
    pub malformed_maps: Vec<fdinfo::Malformed>,
}

/// One dma-buf (one inode), whoever holds or maps it.
#[derive(Debug, Clone, Serialize)]
pub struct DmaBufReport {
    /// Inode number.
    pub inode: u64,
    /// Size in bytes.
    pub size: Figure,
    /// Exporter (`drm` for PRIME, `udmabuf`, ...).
    pub exp_name: Option<String>,
    /// Name, when set.
    pub name: Option<Untrusted>,
    /// `count` from fdinfo.
    pub count: Option<u64>,
    /// fds that refer to it.
    pub holders: Vec<FdRef>,
    /// Processes that map it.
    pub mapped_by: Vec<u32>,
    /// Every process that holds or maps it, sorted.
    pub processes: Vec<u32>,
}

/// An edge of the sharing graph: a dma-buf that two or more processes hold or map.
#[derive(Debug, Clone, Serialize)]
pub struct Sharing {
    /// The dma-buf's inode.
    pub inode: u64,
    /// Its size, when known.
    pub size: Option<u64>,
    /// The processes.
    pub processes: Vec<u32>,
}

/// A process this scan could not read.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    /// Process id.
    pub pid: u32,
    /// `comm` (readable by everyone), when it could be read.
    pub comm: Option<Untrusted>,
    /// What could not be read.
    pub path: String,
    /// Why, e.g. `permission denied (EACCES)`.
    pub reason: String,
    /// The errno name.
    pub errno: String,
}

/// Counts of the walk.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScanStats {
    /// Process directories found in /proc (after `--pid`).
    pub processes: usize,
    /// Processes whose fds were read.
    pub read: usize,
    /// Processes that could not be read (listed in `unreadable`).
    pub unreadable: usize,
    /// Processes that exited during the scan.
    pub vanished: usize,
    /// Processes holding at least one DRM or dma-buf fd or mapping.
    pub holders: usize,
    /// Whether `kcmp` worked, or why not.
    pub kcmp: Access,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            readable: true,
            why: None,
        }
    }
}

/// The whole result of one scan.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Devices with totals.
    pub devices: Vec<DeviceReport>,
    /// Distinct open DRM files.
    pub clients: Vec<ClientReport>,
    /// Processes that hold GPU memory.
    pub processes: Vec<ProcessReport>,
    /// dma-bufs.
    pub dmabufs: Vec<DmaBufReport>,
    /// dma-bufs shared between processes.
    pub sharing: Vec<Sharing>,
    /// Processes that could not be read.
    pub unreadable: Vec<Unreadable>,
    /// Counts.
    pub scan: ScanStats,
    /// Things the user should know (a source missing everywhere, a fallback taken).
    pub warnings: Vec<String>,
}

/// What to scan.
#[derive(Debug, Clone)]
pub struct Options {
    /// The proc filesystem (`/proc`).
    pub proc_root: PathBuf,
    /// The DRM debugfs directory (`/sys/kernel/debug/dri`).
    pub debugfs_root: PathBuf,
    /// Only these processes (all when empty).
    pub pids: Vec<u32>,
    /// Sources to leave out (none by default).
    pub skip: Skip,
}

/// Sources a scan may leave out, to be cheaper (`drmtool buffers --skip`). What a skipped
/// source would have given is reported as unknown, with "skipped" as the reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skip {
    /// Every process's `maps` (mapped DRM buffers and dma-bufs, the shmem files of GEM
    /// objects): the mapped figures become unknown.
    pub maps: bool,
    /// The devices' debugfs `clients`, `framebuffer` and `gem_names`.
    pub debugfs: bool,
    /// `kcmp`: DRM fds without `drm-client-id` each count as their own client.
    pub kcmp: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            proc_root: "/proc".into(),
            debugfs_root: "/sys/kernel/debug/dri".into(),
            pids: Vec::new(),
            skip: Skip::default(),
        }
    }
}

/// Why a scan could not run at all.
#[derive(Debug)]
pub struct ScanError {
    /// What failed.
    pub what: String,
    /// What to do about it.
    pub hint: &'static str,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (hint: {})", self.what, self.hint)
    }
}

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_io_error(e).unwrap_or(Errno::IO)
}

/// `permission denied (EACCES)`.
pub fn describe(e: &std::io::Error) -> (String, String) {
    let errno = errno_of(e);
    let name = errno_name(errno);
    let text = match e.kind() {
        ErrorKind::PermissionDenied => "permission denied".to_string(),
        ErrorKind::NotFound => "not found".to_string(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_lowercase()
        }
    };
    (format!("{text} ({name})"), name.to_string())
}

fn errno_name(e: Errno) -> String {
    crate::select::errno_name(e)
}

/// A DRM node known to the machine.
#[derive(Debug, Clone)]
struct NodeId {
    path: String,
    kind: &'static str,
    minor: u32,
    driver: Option<String>,
    parent: String,
}

/// The DRM nodes of the scan: the machine's (from `/dev/dri` and sysfs), then any found only
/// through an fd. Fds refer to them by index.
#[derive(Default)]
struct Nodes {
    list: Vec<NodeId>,
    /// `(major, minor)` of the machine's nodes to their index.
    by_dev: HashMap<(u32, u32), usize>,
}

fn node_table() -> Nodes {
    let mut t = Nodes::default();
    if let Ok(nodes) = drm_gem::enumerate() {
        for n in nodes {
            let parent = std::fs::canonicalize(n.sysfs.join("device"))
                .unwrap_or_else(|_| n.sysfs.clone())
                .display()
                .to_string();
            t.by_dev.insert(n.dev, t.list.len());
            t.list.push(NodeId {
                path: n.path.display().to_string(),
                kind: n.kind.as_str(),
                minor: n.dev.1,
                driver: n.driver,
                parent,
            });
        }
    }
    t
}

/// A char device not under /dev/dri (a container, a chroot): identify it through sysfs.
fn node_from_sysfs(major: u32, minor: u32, link: &str) -> Option<NodeId> {
    let sys = PathBuf::from(format!("/sys/dev/char/{major}:{minor}"));
    let subsystem = std::fs::read_link(sys.join("subsystem")).ok()?;
    if subsystem.file_name()? != "drm" {
        return None;
    }
    let kind = drm_gem::NodeKind::from_minor(minor)?.as_str();
    let parent = std::fs::canonicalize(sys.join("device"))
        .unwrap_or(sys)
        .display()
        .to_string();
    Some(NodeId {
        path: link.to_string(),
        kind,
        minor,
        driver: None,
        parent,
    })
}

struct RawDrmFd {
    at: FdRef,
    /// Index in [`Nodes::list`].
    node: usize,
    info: Option<fdinfo::DrmFdinfo>,
    /// Index of its client in the report, once de-duplicated.
    client: usize,
}

struct RawDmaBufFd {
    at: FdRef,
    inode: u64,
    info: Option<fdinfo::DmaBufFdinfo>,
}

struct RawProcess {
    pid: u32,
    comm: Option<Untrusted>,
    uid: Option<u32>,
    maps: maps::Maps,
    drm: Vec<RawDrmFd>,
    dmabuf: Vec<RawDmaBufFd>,
    /// `maps` was longer than [`MAPS_MAX`]: the rest was not read.
    maps_truncated: bool,
}

enum ProcResult {
    Read(RawProcess),
    Unreadable(Unreadable),
    Vanished,
}

/// Opens a directory under `dir` (`/proc/<pid>`) for `*at` calls.
fn open_dir_at(dir: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
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
const COMM_MAX: usize = 256;
/// The most bytes read of one `maps` (65,530 mappings, the default `vm.max_map_count`, are
/// about 10 MiB).
const MAPS_MAX: usize = 64 << 20;

/// Reads small files under a directory fd into one reused buffer, with plain `openat`,
/// `read` and `close` (std's `read_to_string` adds an `fstat` and an `lseek` per file,
/// which a scan of thousands of fdinfo files pays for). Every read is bounded.
#[derive(Default)]
struct TextReader {
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
    fn bytes(
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
fn read_fdinfo<T>(
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
enum FdKind {
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
struct FdKinds {
    /// Char devices found not to be DRM nodes.
    not_drm: BTreeSet<(u32, u32)>,
    link_buf: Vec<u8>,
}

/// The `statx` of a classification: type, inode and device number, never a server round
/// trip (see [`FdKinds`]).
fn statx_cached(dirfd: BorrowedFd<'_>, name: &std::ffi::CStr) -> Option<rustix::fs::Statx> {
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
    ) -> FdKind {
        // A closed fd (or an exited process) just drops out.
        let Ok(l) = rustix::fs::readlinkat(dirfd, name, std::mem::take(&mut self.link_buf)) else {
            return FdKind::Other;
        };
        let kind = self.classify_link(dirfd, name, l.to_bytes(), nodes);
        self.link_buf = l.into_bytes();
        kind
    }

    fn classify_link(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &std::ffi::CStr,
        link: &[u8],
        nodes: &mut Nodes,
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
                match node_from_sysfs(dev.0, dev.1, &text) {
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
enum LinkClass {
    /// `/dmabuf:<name>` (5.3 and later) or `anon_inode:dmabuf` (before).
    DmaBuf,
    /// A path: a char device (maybe a DRM node) or a file.
    Path,
    /// Sockets, pipes, other anon inodes, namespaces: never DRM or dma-buf.
    Other,
}

/// Classifies the text of a `/proc/<pid>/fd/<n>` link.
fn link_class(link: &[u8]) -> LinkClass {
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
struct Scratch {
    reader: TextReader,
    kinds: FdKinds,
    /// `<pid>/<file>` relative to `/proc`.
    path: String,
    /// `getdents64` buffer for `RawDir` (no allocation per entry).
    dirbuf: Vec<std::mem::MaybeUninit<u8>>,
}

/// Reads one process. Every lookup is relative to the `/proc` directory fd
/// (`<pid>/fd`, `<pid>/maps`...) or to the process's `fd` and `fdinfo` directories, so the
/// kernel resolves one or two path components per call, and no `/proc/<pid>` directory is
/// opened on its own. A process that holds nothing costs: its `fd` directory listed, one
/// `readlinkat` per fd (and a `statx` per path), its `maps` read.
fn read_process(
    proc_fd: BorrowedFd<'_>,
    proc_root: &Path,
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
    let gone = |path: &mut String| {
        path.clear();
        let _ = write!(path, "{pid}");
        rustix::fs::statat(proc_fd, path.as_str(), AtFlags::empty()).is_err()
    };
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
    // Read only for a process that holds something, or cannot be read.
    let comm_of = |reader: &mut TextReader, path: &mut String| {
        sub(path, "comm");
        reader
            .bytes(proc_fd, path.as_str(), true, COMM_MAX)
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
            let comm = comm_of(reader, path);
            return unreadable("fd", e, comm);
        }
    };
    let mut p = RawProcess {
        pid,
        comm: None,
        uid: None,
        maps: maps::Maps::default(),
        drm: Vec::new(),
        dmabuf: Vec::new(),
        maps_truncated: false,
    };
    // Opened at the first DRM or dma-buf fd.
    let mut fdinfo_dir: Option<OwnedFd> = None;
    fn open_fdinfo<'a>(
        slot: &'a mut Option<OwnedFd>,
        proc_fd: BorrowedFd<'_>,
        pid: u32,
        path: &mut String,
    ) -> Option<BorrowedFd<'a>> {
        if slot.is_none() {
            path.clear();
            let _ = write!(path, "{pid}/fdinfo");
            *slot = open_dir_at(proc_fd, path.as_str()).ok();
        }
        slot.as_ref().map(|d| d.as_fd())
    }
    let mut list = rustix::fs::RawDir::new(&fd_dir, dirbuf);
    while let Some(ent) = list.next() {
        // An error mid-listing (the process exited) ends the list.
        let Ok(ent) = ent else { break };
        let name = ent.file_name();
        let Some(fd) = name.to_str().ok().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dirfd = fd_dir.as_fd();
        let at = FdRef { pid, fd };
        match kinds.classify(dirfd, name, nodes) {
            FdKind::Drm(node) => {
                let info = open_fdinfo(&mut fdinfo_dir, proc_fd, pid, path).and_then(|d| {
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
                let info = open_fdinfo(&mut fdinfo_dir, proc_fd, pid, path).and_then(|d| {
                    read_fdinfo(reader, d, name, fdinfo::parse_dmabuf_bytes, |f| {
                        &mut f.malformed
                    })
                });
                p.dmabuf.push(RawDmaBufFd { at, inode, info });
            }
            FdKind::Other => {}
        }
    }
    // `maps` last: a process that exited meanwhile has none (its fds are closed too, so
    // what was listed may be partial).
    if read_maps {
        sub(path, "maps");
        match reader.bytes(proc_fd, path.as_str(), false, MAPS_MAX) {
            Some((t, truncated)) => {
                p.maps = maps::parse_bytes(t);
                p.maps_truncated = truncated;
            }
            None if gone(path) => return ProcResult::Vanished,
            None => {}
        }
    }
    if !p.drm.is_empty() || !p.dmabuf.is_empty() || !p.maps.gpu.is_empty() {
        p.comm = comm_of(reader, path);
        if p.comm.is_none() && gone(path) {
            return ProcResult::Vanished;
        }
        // `/proc/<pid>/fd` is owned like `/proc/<pid>`: by the process's euid.
        p.uid = rustix::fs::fstat(&fd_dir).ok().map(|s| s.st_uid);
    }
    ProcResult::Read(p)
}

/// Opens `/proc` and lists its process directories, sorted.
fn list_pids(proc_root: &Path) -> Result<(OwnedFd, Vec<u32>), ScanError> {
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

fn read_debugfs(
    root: &Path,
    minor: u32,
) -> (Access, Option<String>, Option<String>, Option<String>) {
    let dir = root.join(minor.to_string());
    let read = |f: &str| std::fs::read_to_string(dir.join(f));
    match read("clients") {
        Ok(c) => (
            Access::default(),
            Some(c),
            read("framebuffer").ok(),
            read("gem_names").ok(),
        ),
        Err(e) => {
            let why = if e.kind() == ErrorKind::NotFound && !root.exists() {
                format!("{} does not exist (debugfs not mounted?)", root.display())
            } else {
                format!("{}: {}", dir.join("clients").display(), describe(&e).0)
            };
            (
                Access {
                    readable: false,
                    why: Some(why),
                },
                None,
                None,
                None,
            )
        }
    }
}

/// A figure from `maps`, or unknown when the scan skipped them.
fn maps_figure(skip: Skip, bytes: u64) -> Figure {
    if skip.maps {
        Figure::unknown("maps skipped (--skip maps)")
    } else {
        Figure::known(bytes, Source::Maps)
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Where an fd's open file is among the clients sorted by kcmp.
enum Place {
    /// The same open file as this client.
    Found(usize),
    /// A new open file; keep the list sorted by inserting its client here.
    Insert(usize),
    /// The fd was closed meanwhile: a client of its own, outside the sorted list.
    Closed,
}

/// Binary search of `sorted` (client indices, ascending in kcmp's order of their
/// representative fds `reps`) for the open file behind `at`. A representative whose fd was
/// closed meanwhile leaves the list (its client stays), and the search restarts.
///
/// # Errors
/// A kcmp errno other than `EBADF`/`ESRCH` (`ENOSYS`, `EPERM`).
fn locate_file(reps: &[FdRef], sorted: &mut Vec<usize>, at: FdRef) -> Result<Place, Errno> {
    'search: loop {
        let (mut lo, mut hi) = (0, sorted.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let r = reps[sorted[mid]];
            match sys_call::compare_files(r.pid, r.fd, at.pid, at.fd) {
                Ok(Ordering::Equal) => return Ok(Place::Found(sorted[mid])),
                Ok(Ordering::Less) => lo = mid + 1,
                Ok(Ordering::Greater) => hi = mid,
                // Closed or exited meanwhile: which of the two?
                Err(Errno::BADF | Errno::SRCH) => {
                    if sys_call::compare_files(at.pid, at.fd, at.pid, at.fd).is_err() {
                        return Ok(Place::Closed);
                    }
                    sorted.remove(mid);
                    continue 'search;
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(Place::Insert(lo));
    }
}

/// Scans the machine once.
///
/// # Errors
/// Only when `/proc` itself cannot be listed; everything else is reported in the result.
pub fn scan(opts: &Options) -> Result<Report, ScanError> {
    let mut nodes = node_table();
    let (proc_fd, mut pids) = list_pids(&opts.proc_root)?;
    if !opts.pids.is_empty() {
        pids.retain(|p| opts.pids.contains(p));
    }
    let mut stats = ScanStats {
        processes: pids.len(),
        ..Default::default()
    };
    let mut unreadable = Vec::new();
    let mut procs = Vec::new();
    let mut scratch = Scratch::default();
    for pid in pids {
        match read_process(
            proc_fd.as_fd(),
            &opts.proc_root,
            pid,
            &mut nodes,
            &mut scratch,
            !opts.skip.maps,
        ) {
            ProcResult::Read(p) => {
                stats.read += 1;
                procs.push(p);
            }
            ProcResult::Unreadable(u) => unreadable.push(u),
            ProcResult::Vanished => stats.vanished += 1,
        }
    }
    stats.unreadable = unreadable.len();
    let mut warnings = Vec::new();
    for p in procs.iter().filter(|p| p.maps_truncated) {
        warnings.push(format!(
            "maps of pid {} is longer than drmtool reads ({MAPS_MAX} bytes): the rest was not read",
            p.pid
        ));
    }

    // Devices: one per parent, from the node table plus any node only seen in an fd (one
    // per minor).
    let mut all_nodes: Vec<NodeId> = Vec::new();
    for n in &nodes.list {
        if !all_nodes.iter().any(|m| m.minor == n.minor) {
            all_nodes.push(n.clone());
        }
    }
    all_nodes.sort_by_key(|n| n.minor);
    let mut parents: Vec<String> = Vec::new();
    for n in &all_nodes {
        if !parents.contains(&n.parent) {
            parents.push(n.parent.clone());
        }
    }
    let mut device_by_minor: HashMap<u32, usize> = HashMap::default();
    for n in &all_nodes {
        let d = parents.iter().position(|p| p == &n.parent).unwrap_or(0);
        device_by_minor.entry(n.minor).or_insert(d);
    }
    let device_of = |minor: u32| -> usize { device_by_minor.get(&minor).copied().unwrap_or(0) };
    // The device of each entry of `nodes.list`.
    let node_device: Vec<usize> = nodes.list.iter().map(|n| device_of(n.minor)).collect();

    // De-duplicate DRM open files: drm-client-id when printed, else kcmp. Both are looked
    // up, not compared against every client: by id in a map, by kcmp in a list per device
    // kept sorted in the kernel's order of open files (a binary search), so the pass is
    // O(n log n) in the fds, not O(n^2).
    let drm_fds: usize = procs.iter().map(|p| p.drm.len()).sum();
    let mut clients: Vec<ClientReport> = Vec::with_capacity(drm_fds);
    let mut reps: Vec<FdRef> = Vec::with_capacity(drm_fds); // one holder per client, for kcmp
    let mut by_id: HashMap<(usize, u64), usize> = HashMap::default();
    let mut by_file: Vec<Vec<usize>> = vec![Vec::new(); parents.len().max(1)];
    let mut kcmp_failed: Option<String> = opts
        .skip
        .kcmp
        .then(|| "kcmp skipped (--skip kcmp)".to_string());
    for p in &mut procs {
        for d in &mut p.drm {
            let device = node_device[d.node];
            let client_id = d.info.as_ref().and_then(|i| i.client_id);
            let mut found = None;
            let mut slot = None;
            let mut how = "none";
            if let Some(id) = client_id {
                found = by_id.get(&(device, id)).copied();
                how = "drm-client-id";
            } else if kcmp_failed.is_none() {
                match locate_file(&reps, &mut by_file[device], d.at) {
                    Ok(Place::Found(i)) => found = Some(i),
                    Ok(Place::Insert(at)) => slot = Some(at),
                    Ok(Place::Closed) => {}
                    Err(e) => {
                        kcmp_failed =
                            Some(format!("kcmp(KCMP_FILE) failed: {} ({})", e, errno_name(e)));
                    }
                }
                how = if kcmp_failed.is_none() {
                    "kcmp"
                } else {
                    "none"
                };
            }
            let idx = match found {
                Some(i) => {
                    clients[i].holders.push(d.at);
                    if clients[i].dedupe == "none" {
                        clients[i].dedupe = how;
                    }
                    i
                }
                None => {
                    let index = clients.len();
                    let info = d.info.take();
                    let node = &nodes.list[d.node].path;
                    clients.push(client_report(index, device, node, d.at, info, how));
                    reps.push(d.at);
                    if let Some(id) = clients[index].client_id {
                        by_id.insert((device, id), index);
                    }
                    if let Some(at) = slot {
                        by_file[device].insert(at, index);
                    }
                    index
                }
            };
            d.client = idx;
        }
    }
    if let Some(why) = &kcmp_failed {
        stats.kcmp = Access {
            readable: false,
            why: Some(why.clone()),
        };
        warnings.push(format!(
            "{why}: DRM fds without drm-client-id are counted as separate clients, \
             so an open file shared between fds may be counted more than once"
        ));
    }

    // dma-bufs by inode.
    let mut dmabufs: BTreeMap<u64, DmaBufReport> = BTreeMap::new();
    for p in &procs {
        for b in &p.dmabuf {
            let e = dmabufs.entry(b.inode).or_insert_with(|| DmaBufReport {
                inode: b.inode,
                size: Figure::unknown("no readable fdinfo for this dma-buf"),
                exp_name: None,
                name: None,
                count: None,
                holders: Vec::new(),
                mapped_by: Vec::new(),
                processes: Vec::new(),
            });
            e.holders.push(b.at);
            if let Some(i) = &b.info {
                if !i.malformed.is_empty() {
                    // Our own texts only: the lines themselves are the process's.
                    let whys: Vec<&str> = i
                        .malformed
                        .iter()
                        .map(|m| match m.why.as_str() {
                            fdinfo::REPEATED => "a repeated key (the first value is kept)",
                            TRUNCATED => "longer than drmtool reads (truncated)",
                            _ => "a line not in the kernel's format",
                        })
                        .collect();
                    warnings.push(format!(
                        "dma-buf fdinfo of pid {} fd {}: {}",
                        b.at.pid,
                        b.at.fd,
                        whys.join(", ")
                    ));
                }
                if let Some(s) = i.size {
                    e.size = Figure::known(s, Source::DmabufFdinfo);
                }
                e.exp_name = e.exp_name.take().or(i.exp_name.clone());
                e.name = e.name.take().or(i.name.clone());
                e.count = e.count.or(i.count);
            }
        }
        for m in &p.maps.gpu {
            if let maps::Target::DmaBuf { name } = &m.target {
                let e = dmabufs.entry(m.inode).or_insert_with(|| DmaBufReport {
                    inode: m.inode,
                    size: Figure::unknown("mapped only; the mapping length is a lower bound"),
                    exp_name: None,
                    name: (!name.is_empty()).then(|| Untrusted::from(name.as_str())),
                    count: None,
                    holders: Vec::new(),
                    mapped_by: Vec::new(),
                    processes: Vec::new(),
                });
                if !e.mapped_by.contains(&p.pid) {
                    e.mapped_by.push(p.pid);
                }
            }
        }
    }
    for b in dmabufs.values_mut() {
        let mut set: BTreeSet<u32> = b.holders.iter().map(|h| h.pid).collect();
        set.extend(b.mapped_by.iter().copied());
        b.processes = set.into_iter().collect();
    }
    let sharing = dmabufs
        .values()
        .filter(|b| b.processes.len() > 1)
        .map(|b| Sharing {
            inode: b.inode,
            size: b.size.value,
            processes: b.processes.clone(),
        })
        .collect();

    // Processes and mapped bytes (distinct buffers by mmap offset, per device).
    let mut device_offsets: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); parents.len()];
    let mut processes = Vec::new();
    for p in procs {
        let mut per_dev: BTreeMap<usize, (String, BTreeMap<u64, u64>)> = BTreeMap::new();
        let mut dmabuf_maps = Vec::new();
        let mut shmem = 0u64;
        for m in &p.maps.gpu {
            match &m.target {
                maps::Target::Drm { path } => {
                    let Some(node) = all_nodes.iter().find(|n| &n.path == path) else {
                        continue;
                    };
                    let dev = device_of(node.minor);
                    let e = per_dev
                        .entry(dev)
                        .or_insert_with(|| (path.clone(), BTreeMap::new()));
                    // The same buffer mapped twice is still one buffer.
                    let slot = e.1.entry(m.offset).or_default();
                    *slot = (*slot).max(m.len());
                }
                maps::Target::DmaBuf { .. } => {
                    if !dmabuf_maps.contains(&m.inode) {
                        dmabuf_maps.push(m.inode);
                    }
                }
                maps::Target::GemShmem => shmem += m.len(),
            }
        }
        if p.drm.is_empty()
            && p.dmabuf.is_empty()
            && per_dev.is_empty()
            && dmabuf_maps.is_empty()
            && shmem == 0
        {
            continue;
        }
        let mut mapped_total = 0u64;
        let drm_mappings: Vec<DeviceMapping> = per_dev
            .into_iter()
            .map(|(dev, (node, offs))| {
                let bytes: u64 = offs.values().sum();
                mapped_total += bytes;
                for (o, l) in &offs {
                    let slot = device_offsets[dev].entry(*o).or_default();
                    *slot = (*slot).max(*l);
                }
                DeviceMapping {
                    device: dev,
                    node,
                    buffers: offs.len(),
                    bytes: Figure::known(bytes, Source::Maps),
                }
            })
            .collect();
        let mut inodes: BTreeSet<u64> = p.dmabuf.iter().map(|b| b.inode).collect();
        inodes.extend(dmabuf_maps.iter().copied());
        let mut db: Option<u64> = Some(0);
        for i in &inodes {
            db = match (db, dmabufs.get(i).and_then(|b| b.size.value)) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        let mut mem: Option<u64> = None;
        let mut seen = BTreeSet::new();
        for d in &p.drm {
            let c = d.client;
            if seen.insert(c) {
                mem = add(mem, clients[c].memory_total.value);
            }
        }
        let has_clients = !seen.is_empty();
        processes.push(ProcessReport {
            pid: p.pid,
            comm: p.comm,
            uid: p.uid,
            drm_fds: p
                .drm
                .iter()
                .map(|d| DrmFd {
                    fd: d.at.fd,
                    node: nodes.list[d.node].path.clone(),
                    client: d.client,
                })
                .collect(),
            dmabuf_fds: p
                .dmabuf
                .iter()
                .map(|b| DmaBufFd {
                    fd: b.at.fd,
                    inode: b.inode,
                })
                .collect(),
            drm_mappings,
            dmabuf_mappings: dmabuf_maps,
            mapped_gem_shmem: maps_figure(opts.skip, shmem),
            mapped_drm: maps_figure(opts.skip, mapped_total),
            dmabuf_bytes: match db {
                Some(v) => Figure::known(v, Source::DmabufFdinfo),
                None => Figure::unknown("a dma-buf's size is not readable"),
            },
            memory_total: match mem {
                Some(v) => Figure::known(v, Source::Fdinfo),
                None if has_clients => {
                    Figure::unknown("the driver prints no drm-* memory keys in fdinfo")
                }
                None => Figure::unknown("no DRM fds"),
            },
            malformed_maps: p.maps.malformed,
        });
    }
    stats.holders = processes.len();

    // Devices with totals.
    let mut devices = Vec::new();
    for (index, parent) in parents.iter().enumerate() {
        let dnodes: Vec<&NodeId> = all_nodes.iter().filter(|n| &n.parent == parent).collect();
        let driver = dnodes.iter().find_map(|n| n.driver.clone()).or_else(|| {
            clients
                .iter()
                .find(|c| c.device == index)
                .and_then(|c| c.driver.clone())
        });
        let dclients: Vec<&ClientReport> = clients.iter().filter(|c| c.device == index).collect();
        let mut total = None;
        let mut shared = None;
        for c in &dclients {
            total = add(total, c.memory_total.value);
            shared = add(shared, c.memory_shared.value);
        }
        let no_keys = || {
            if dclients.is_empty() {
                Figure::unknown("no client found")
            } else {
                Figure::unknown("the driver prints no drm-* memory keys in fdinfo")
            }
        };
        let primary = dnodes
            .iter()
            .find(|n| n.kind == "primary")
            .or(dnodes.first());
        let (access, c_text, fb_text, names_text) = match primary {
            Some(_) if opts.skip.debugfs => (
                Access {
                    readable: false,
                    why: Some("debugfs skipped (--skip debugfs)".into()),
                },
                None,
                None,
                None,
            ),
            Some(n) => read_debugfs(&opts.debugfs_root, n.minor),
            None => (Access::default(), None, None, None),
        };
        let rows: Vec<KernelClient> = c_text
            .map(|t| debugfs::parse_clients(&t).clients)
            .unwrap_or_default()
            .into_iter()
            .map(|row| KernelClient {
                process: process_of(&opts.proc_root, &row),
                row,
            })
            .collect();
        let fbs = fb_text
            .map(|t| debugfs::parse_framebuffers(&t).framebuffers)
            .unwrap_or_default();
        let named = names_text.map(|t| debugfs::parse_gem_names(&t).names);
        let unreadable_debugfs = || {
            Figure::unknown(
                access
                    .why
                    .clone()
                    .unwrap_or_else(|| "debugfs not readable".into()),
            )
        };
        let mapped: u64 = device_offsets[index].values().sum();
        devices.push(DeviceReport {
            index,
            sysfs: parent.clone(),
            driver,
            nodes: dnodes
                .iter()
                .map(|n| Node {
                    path: n.path.clone(),
                    kind: n.kind.to_string(),
                    minor: n.minor,
                })
                .collect(),
            clients: dclients.len(),
            debugfs_clients: if access.readable {
                Figure::known(rows.len() as u64, Source::DebugfsClients)
            } else {
                unreadable_debugfs()
            },
            memory_total: total.map_or_else(no_keys, |v| Figure::known(v, Source::Fdinfo)),
            memory_shared: shared.map_or_else(no_keys, |v| Figure::known(v, Source::Fdinfo)),
            mapped: if opts.skip.maps {
                maps_figure(opts.skip, mapped)
            } else {
                Figure::known(mapped, Source::Maps)
                    .with_note("distinct buffers mapped by readable processes")
            },
            framebuffer_bytes: if access.readable {
                let b: u64 = fbs
                    .iter()
                    .flat_map(|f| f.objects.iter())
                    .filter_map(|o| o.size)
                    .sum();
                Figure::known(b, Source::DebugfsFramebuffer)
            } else {
                unreadable_debugfs()
            },
            named_bytes: match &named {
                Some(n) => Figure::known(n.iter().map(|g| g.size).sum(), Source::DebugfsGemNames)
                    .with_note("flink-named objects only"),
                None => unreadable_debugfs(),
            },
            framebuffers: fbs,
            debugfs_client_rows: rows,
            debugfs: access,
        });
    }
    if !opts.skip.debugfs && !devices.is_empty() && devices.iter().all(|d| !d.debugfs.readable) {
        warnings.push(
            "debugfs is not readable: framebuffer and client lists are unknown \
             (mount debugfs on /sys/kernel/debug and run as root)"
                .into(),
        );
    }
    let skipped: Vec<&str> = [
        (opts.skip.maps, "maps"),
        (opts.skip.debugfs, "debugfs"),
        (opts.skip.kcmp, "kcmp"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if !skipped.is_empty() {
        warnings.push(format!(
            "sources skipped (--skip {}): what they give is shown as unknown",
            skipped.join(",")
        ));
    }
    if !unreadable.is_empty() {
        warnings.push(format!(
            "{} process(es) could not be read; their GPU memory is not counted \
             (run as root to see every process)",
            unreadable.len()
        ));
    }

    Ok(Report {
        schema_version: SCHEMA_VERSION,
        devices,
        clients,
        processes,
        dmabufs: dmabufs.into_values().collect(),
        sharing,
        unreadable,
        scan: stats,
        warnings,
    })
}

fn client_report(
    index: usize,
    device: usize,
    node: &str,
    at: FdRef,
    info: Option<fdinfo::DrmFdinfo>,
    how: &'static str,
) -> ClientReport {
    let readable = info.is_some();
    let info = info.unwrap_or_default();
    let legacy = info.amdgpu_legacy.clone();
    let legacy_total = legacy.as_ref().and_then(|l| add(add(l.vram, l.gtt), l.cpu));
    let memory_total = match (info.total_bytes(), legacy_total) {
        (Some(v), _) => Figure::known(v, Source::Fdinfo),
        (None, Some(v)) => Figure::known(v, Source::FdinfoAmdgpuLegacy),
        (None, None) if !readable => Figure::unknown("fdinfo not readable"),
        (None, None) => Figure::unknown("the driver prints no drm-* memory keys in fdinfo"),
    };
    let memory_shared = match info.shared_bytes() {
        Some(v) => Figure::known(v, Source::Fdinfo),
        None => Figure::unknown("no drm-shared-* keys"),
    };
    ClientReport {
        index,
        device,
        node: node.to_string(),
        client_id: info.client_id,
        client_name: info.client_name,
        driver: info.driver,
        pdev: info.pdev,
        holders: vec![at],
        dedupe: how,
        memory_total,
        memory_shared,
        regions: info.regions,
        engines: info
            .engines
            .into_iter()
            .map(|(k, stats)| {
                (
                    k,
                    EngineReport {
                        stats,
                        busy_percent: None,
                    },
                )
            })
            .collect(),
        amdgpu_legacy: legacy,
        unknown_keys: info.unknown,
        malformed: info.malformed,
    }
}

/// Fills `busy_percent` of every engine of `now` from the previous sample `before`, taken
/// `elapsed_ns` earlier. Clients are matched by device and `drm-client-id`, or by their
/// first holder when no id is printed.
pub fn rates(before: &Report, now: &mut Report, elapsed_ns: u64) {
    if elapsed_ns == 0 {
        return;
    }
    for c in &mut now.clients {
        let prev = before.clients.iter().find(|p| {
            p.node == c.node
                && match (p.client_id, c.client_id) {
                    (Some(a), Some(b)) => a == b,
                    (None, None) => p.holders.first() == c.holders.first(),
                    _ => false,
                }
        });
        let Some(prev) = prev else { continue };
        for (name, e) in &mut c.engines {
            let (Some(b0), Some(b1)) = (
                prev.engines.get(name).and_then(|p| p.stats.busy_ns),
                e.stats.busy_ns,
            ) else {
                continue;
            };
            let cap = e.stats.capacity.unwrap_or(1).max(1);
            let delta = b1.saturating_sub(b0) as f64;
            e.busy_percent = Some(100.0 * delta / (elapsed_ns as f64 * cap as f64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_with(busy_ns: u64, capacity: Option<u64>) -> ClientReport {
        let text = format!(
            "drm-driver:\tx\ndrm-client-id:\t3\ndrm-engine-gfx:\t{busy_ns} ns\n{}",
            capacity.map_or(String::new(), |c| format!(
                "drm-engine-capacity-gfx:\t{c}\n"
            ))
        );
        let info = fdinfo::parse_drm(&text);
        client_report(
            0,
            0,
            "/dev/dri/card0",
            FdRef { pid: 1, fd: 3 },
            Some(info),
            "drm-client-id",
        )
    }

    fn report(c: ClientReport) -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            devices: Vec::new(),
            clients: vec![c],
            processes: Vec::new(),
            dmabufs: Vec::new(),
            sharing: Vec::new(),
            unreadable: Vec::new(),
            scan: ScanStats::default(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn busy_percent_needs_two_samples_and_divides_by_capacity() {
        let first = report(client_with(1_000_000, None));
        assert_eq!(first.clients[0].engines["gfx"].busy_percent, None);
        let mut second = report(client_with(1_500_000, None));
        rates(&first, &mut second, 1_000_000);
        assert_eq!(second.clients[0].engines["gfx"].busy_percent, Some(50.0));
        let before = report(client_with(0, Some(4)));
        let mut after = report(client_with(2_000_000, Some(4)));
        rates(&before, &mut after, 1_000_000);
        assert_eq!(after.clients[0].engines["gfx"].busy_percent, Some(50.0));
        // A counter that went backwards (a new client reusing the id) is 0, not negative.
        let mut back = report(client_with(10, None));
        rates(&second, &mut back, 1_000_000);
        assert_eq!(back.clients[0].engines["gfx"].busy_percent, Some(0.0));
    }

    #[test]
    fn unknown_figures_say_why() {
        let c = client_with(1, None);
        assert_eq!(c.memory_total.value, None);
        assert_eq!(c.memory_total.source, Source::Unknown);
        assert!(c.memory_total.note.is_some());
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
