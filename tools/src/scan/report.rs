//! The report model: the serializable result of a scan ([`Report`] and what it holds),
//! every figure with its [`Source`], and the helpers that build figures and client entries.

use super::Skip;
use crate::untrusted::Untrusted;
use crate::{debugfs, fdinfo};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;

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
    /// Process id (in the pid namespace of the procfs scanned: the viewer's, where drmtool
    /// runs with its own namespace's /proc).
    pub pid: u32,
    /// Its pid in each pid namespace from the scanned procfs's (first, equal to `pid`) down
    /// to the process's own (last): `/proc/<pid>/status`'s `NSpid`. One entry when the
    /// process is in the viewer's namespace; `None` when unreadable.
    pub ns_pids: Option<Vec<u32>>,
    /// `comm`.
    pub comm: Option<Untrusted>,
    /// Owner uid.
    pub uid: Option<u32>,
    /// Its cgroup v2 path (`/proc/<pid>/cgroup`), `None` when unreadable, ambiguous (a
    /// cgroup name with a newline) or on a machine without the unified hierarchy. Names in
    /// it are chosen by whoever owns a delegated cgroup: hostile text.
    pub cgroup: Option<Untrusted>,
    /// Who the process works for, from `cgroup` (unit, container, pod, Slurm job).
    pub attribution: Option<super::attribution::Attribution>,
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

impl DmaBufReport {
    /// A dma-buf known by its inode only: no size read yet (`why` says so), no holder.
    pub(crate) fn unread(inode: u64, why: &'static str) -> DmaBufReport {
        DmaBufReport {
            inode,
            size: Figure::unknown(why),
            exp_name: None,
            name: None,
            count: None,
            holders: Vec::new(),
            mapped_by: Vec::new(),
            processes: Vec::new(),
        }
    }
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
    /// GPU memory as the kernel's dmem cgroup controller counts it (Linux 6.14+):
    /// `None` where the kernel has none (or it could not be read: a warning says so).
    pub dmem: Option<DmemReport>,
}

/// The dmem controller's view ([`crate::dmem`]): each region's capacity and every cgroup's
/// charge and limit.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DmemReport {
    /// Every region the kernel has.
    pub regions: Vec<DmemRegion>,
    /// Every cgroup with a charge or a limit on a region (hierarchical, as the kernel
    /// counts: a parent's charge includes its children's).
    pub charges: Vec<crate::dmem::Charge>,
}

/// One dmem region (`dmem.capacity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DmemRegion {
    /// Its name (`drm/0000:00:05.0/vram0`).
    pub region: String,
    /// The device part of the name (a DRM device's sysfs name).
    pub device: Option<String>,
    /// Bytes.
    pub capacity: u64,
}

impl Report {
    /// A report of nothing (no device, client or process, no dmem controller), at
    /// [`SCHEMA_VERSION`]: what a scan of a machine without GPUs gives, and a base for
    /// tests.
    pub fn empty() -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            devices: Vec::new(),
            clients: Vec::new(),
            processes: Vec::new(),
            dmabufs: Vec::new(),
            sharing: Vec::new(),
            unreadable: Vec::new(),
            scan: ScanStats::default(),
            warnings: Vec::new(),
            dmem: None,
        }
    }

    /// The name of each of its devices (in `devices`' order): the PCI bus id, else the
    /// device name (a platform device), from the GPU ordering `gpus` where one of its
    /// nodes is there, with the GPU's index; else its sysfs directory's name, without one.
    pub fn device_names(&self, gpus: &[crate::gpu::Gpu]) -> Vec<(String, Option<usize>)> {
        self.devices
            .iter()
            .map(|d| {
                let gpu = gpus.iter().find(|g| {
                    g.nodes.iter().any(|n| {
                        d.nodes
                            .iter()
                            .any(|m| n.path.as_os_str() == m.path.as_str())
                    })
                });
                match gpu {
                    Some(g) => (
                        g.bus_id.clone().unwrap_or_else(|| g.name.clone()),
                        Some(g.index),
                    ),
                    None => (
                        d.sysfs
                            .rsplit('/')
                            .next()
                            .unwrap_or(d.sysfs.as_str())
                            .to_string(),
                        None,
                    ),
                }
            })
            .collect()
    }

    /// Keeps only what concerns `gpus` (every node of each: their devices, the clients of
    /// those devices, the processes holding those clients or mappings of them); false, and
    /// the report unchanged, when none of the report's devices is theirs.
    pub fn keep_gpus(&mut self, gpus: &[&crate::gpu::Gpu]) -> bool {
        let paths: Vec<String> = gpus
            .iter()
            .flat_map(|g| g.nodes.iter().map(|n| n.path.display().to_string()))
            .collect();
        let wanted: Vec<usize> = self
            .devices
            .iter()
            .filter(|d| d.nodes.iter().any(|n| paths.contains(&n.path)))
            .map(|d| d.index)
            .collect();
        if wanted.is_empty() {
            return false;
        }
        self.devices.retain(|d| wanted.contains(&d.index));
        let keep: Vec<usize> = self
            .clients
            .iter()
            .filter(|c| wanted.contains(&c.device))
            .map(|c| c.index)
            .collect();
        self.clients.retain(|c| keep.contains(&c.index));
        for p in &mut self.processes {
            p.drm_fds.retain(|f| keep.contains(&f.client));
            p.drm_mappings.retain(|m| wanted.contains(&m.device));
        }
        self.processes
            .retain(|p| !p.drm_fds.is_empty() || !p.drm_mappings.is_empty());
        true
    }
}

/// A figure from `maps`, or unknown when the scan skipped them.
pub(super) fn maps_figure(skip: Skip, bytes: u64) -> Figure {
    if skip.maps {
        Figure::unknown("maps skipped (--skip maps)")
    } else {
        Figure::known(bytes, Source::Maps)
    }
}

pub(crate) fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

pub(crate) fn client_report(
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
