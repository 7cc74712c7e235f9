//! One pass over `/proc/*/fd`: finds DRM and dma-buf fds, reads their fdinfo, the processes'
//! GPU mappings and the devices' debugfs files, de-duplicates shared open files and builds
//! the [`Report`]. No subprocess is spawned; vanished and unreadable processes are counted,
//! and every figure carries its [`Source`] ([`Source::Unknown`] when none exposes it).

pub mod attribution;
mod dedup;
mod devices;
mod nodes;
mod procfs;
pub(crate) mod report;

pub use procfs::{FDINFO_MAX, TRUNCATED, cgroup_v2_path};
pub use report::{
    Access, ClientReport, DeviceMapping, DeviceReport, DmaBufFd, DmaBufReport, DmemRegion,
    DmemReport, DrmFd, EngineReport, FdRef, Figure, KernelClient, Node, ProcessReport, Report,
    SCHEMA_VERSION, ScanStats, Sharing, Source, Unreadable,
};

use crate::untrusted::Untrusted;
use crate::{fdinfo, maps};
use devices::Layout;
use nodes::{Nodes, node_table};
use procfs::{MAPS_MAX, ProcResult, RawProcess, Scratch, list_pids, read_process};
pub(crate) use report::add;
#[cfg(test)]
pub(crate) use report::client_report;
use report::maps_figure;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// What to scan.
#[derive(Debug, Clone)]
pub struct Options {
    /// The proc filesystem (`/proc`).
    pub proc_root: PathBuf,
    /// The DRM debugfs directory (`/sys/kernel/debug/dri`).
    pub debugfs_root: PathBuf,
    /// sysfs (`/sys`), where a char device held through an fd but not under `/dev/dri` is
    /// looked up (`dev/char/<major>:<minor>`). The machine's own nodes (`/dev/dri`) are
    /// always enumerated from the real sysfs.
    pub sys_root: PathBuf,
    /// Only these processes (all when empty).
    pub pids: Vec<u32>,
    /// Sources to leave out (none by default).
    pub skip: Skip,
    /// The cgroup v2 root (`/sys/fs/cgroup`), where the dmem controller's files are read.
    pub cgroup_root: PathBuf,
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
            sys_root: "/sys".into(),
            pids: Vec::new(),
            skip: Skip::default(),
            cgroup_root: crate::dmem::CGROUP_ROOT.into(),
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

impl std::error::Error for ScanError {}

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
    crate::errno::errno_name(e)
}

/// Scans the machine once.
///
/// # Errors
/// Only when `/proc` itself cannot be listed; everything else is reported in the result.
pub fn scan(opts: &Options) -> Result<Report, ScanError> {
    let mut nodes = node_table();
    let (proc_fd, pids) = list_processes(opts)?;
    let mut stats = ScanStats {
        processes: pids.len(),
        ..Default::default()
    };
    let (mut procs, unreadable) =
        read_processes(opts, proc_fd.as_fd(), pids, &mut nodes, &mut stats);
    let mut warnings = maps_warnings(&procs);
    let layout = Layout::new(&nodes);
    let clients = dedup::dedupe_clients(
        &mut procs,
        &nodes,
        &layout,
        opts.skip,
        &mut stats,
        &mut warnings,
    );
    let dmabufs = collect_dmabufs(&procs, &mut warnings);
    let sharing = sharing(&dmabufs);
    let (processes, device_offsets) =
        process_reports(procs, &nodes, &layout, &clients, &dmabufs, opts.skip);
    stats.holders = processes.len();
    let devices = devices::device_reports(opts, &layout, &clients, &device_offsets);
    final_warnings(opts, &devices, &unreadable, &mut warnings);
    let dmem = dmem_report(&opts.cgroup_root, &mut warnings);

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
        dmem,
    })
}

/// The dmem controller's regions and charges; `None` (and no warning) where the kernel has
/// no controller, `None` with a warning where its files could not be read.
fn dmem_report(root: &Path, warnings: &mut Vec<String>) -> Option<DmemReport> {
    let read = || -> Result<Option<DmemReport>, crate::dmem::DmemError> {
        let Some(cap) = crate::dmem::Capacity::read(root)? else {
            return Ok(None);
        };
        let regions = cap
            .regions
            .iter()
            .map(|(r, b)| DmemRegion {
                region: r.clone(),
                device: crate::dmem::region_device(r).map(str::to_string),
                capacity: *b,
            })
            .collect();
        Ok(Some(DmemReport {
            regions,
            charges: crate::dmem::charges(root)?,
        }))
    };
    read().unwrap_or_else(|e| {
        warnings.push(format!("dmem cgroup controller: {e}"));
        None
    })
}

/// Opens `/proc` and lists the processes to scan (those of [`Options::pids`] when given).
fn list_processes(opts: &Options) -> Result<(OwnedFd, Vec<u32>), ScanError> {
    let (proc_fd, mut pids) = list_pids(&opts.proc_root)?;
    if !opts.pids.is_empty() {
        pids.retain(|p| opts.pids.contains(p));
    }
    Ok((proc_fd, pids))
}

/// Reads every process: those read (holding something or not), those that could not be
/// read; counts them and the vanished ones in `stats`.
fn read_processes(
    opts: &Options,
    proc_fd: BorrowedFd<'_>,
    pids: Vec<u32>,
    nodes: &mut Nodes,
    stats: &mut ScanStats,
) -> (Vec<RawProcess>, Vec<Unreadable>) {
    let mut unreadable = Vec::new();
    let mut procs = Vec::new();
    let mut scratch = Scratch::default();
    for pid in pids {
        match read_process(
            proc_fd,
            &opts.proc_root,
            &opts.sys_root,
            pid,
            nodes,
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
    (procs, unreadable)
}

/// A warning per process whose `maps` was longer than drmtool reads.
fn maps_warnings(procs: &[RawProcess]) -> Vec<String> {
    let mut warnings = Vec::new();
    for p in procs.iter().filter(|p| p.maps_truncated) {
        warnings.push(format!(
            "maps of pid {} is longer than drmtool reads ({MAPS_MAX} bytes): the rest was not read",
            p.pid
        ));
    }
    warnings
}

/// The dma-bufs by inode, from the fds that hold them and the mappings of them.
fn collect_dmabufs(
    procs: &[RawProcess],
    warnings: &mut Vec<String>,
) -> BTreeMap<u64, DmaBufReport> {
    // dma-bufs by inode.
    let mut dmabufs: BTreeMap<u64, DmaBufReport> = BTreeMap::new();
    for p in procs {
        for b in &p.dmabuf {
            let e = dmabufs.entry(b.inode).or_insert_with(|| {
                DmaBufReport::unread(b.inode, "no readable fdinfo for this dma-buf")
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
    dmabufs
}

/// The dma-bufs held or mapped by more than one process.
fn sharing(dmabufs: &BTreeMap<u64, DmaBufReport>) -> Vec<Sharing> {
    dmabufs
        .values()
        .filter(|b| b.processes.len() > 1)
        .map(|b| Sharing {
            inode: b.inode,
            size: b.size.value,
            processes: b.processes.clone(),
        })
        .collect()
}

/// The processes that hold or map something, with their totals, and the distinct buffers
/// (mmap offset to length) mapped on each device.
fn process_reports(
    procs: Vec<RawProcess>,
    nodes: &Nodes,
    layout: &Layout,
    clients: &[ClientReport],
    dmabufs: &BTreeMap<u64, DmaBufReport>,
    skip: Skip,
) -> (Vec<ProcessReport>, Vec<BTreeMap<u64, u64>>) {
    // Processes and mapped bytes (distinct buffers by mmap offset, per device).
    let mut device_offsets: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); layout.parents.len()];
    let mut processes = Vec::new();
    for p in procs {
        let (per_dev, dmabuf_maps, shmem) = gpu_mappings(&p.maps, layout);
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
                // Hostile sizes: every sum saturates.
                let bytes = offs.values().fold(0u64, |a, &b| a.saturating_add(b));
                mapped_total = mapped_total.saturating_add(bytes);
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
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
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
            ns_pids: p.ns_pids,
            comm: p.comm,
            uid: p.uid,
            attribution: p.cgroup.as_deref().map(attribution::from_cgroup_path),
            cgroup: p.cgroup.as_deref().map(Untrusted::from),
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
            mapped_gem_shmem: maps_figure(skip, shmem),
            mapped_drm: maps_figure(skip, mapped_total),
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
    (processes, device_offsets)
}

/// Per device index: the node a process mapped it through, and each mapped buffer's length
/// by mmap offset.
type DeviceBuffers = BTreeMap<usize, (String, BTreeMap<u64, u64>)>;

/// A process's GPU mappings from its `maps`: per device, each DRM buffer (by mmap offset,
/// mapped twice still one) with its length and the node it was mapped through; the
/// dma-buf inodes it maps; the bytes of shmem-backed GEM objects it maps.
fn gpu_mappings(m: &maps::Maps, layout: &Layout) -> (DeviceBuffers, Vec<u64>, u64) {
    let mut per_dev = DeviceBuffers::new();
    let mut dmabuf_maps = Vec::new();
    let mut shmem = 0u64;
    for m in &m.gpu {
        match &m.target {
            maps::Target::Drm { path } => {
                let Some(node) = layout.all_nodes.iter().find(|n| &n.path == path) else {
                    continue;
                };
                let dev = layout.device_of(node.minor);
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
            maps::Target::GemShmem => shmem = shmem.saturating_add(m.len()),
        }
    }
    (per_dev, dmabuf_maps, shmem)
}

/// The warnings about the whole scan: debugfs not readable, sources skipped, processes not
/// read.
fn final_warnings(
    opts: &Options,
    devices: &[DeviceReport],
    unreadable: &[Unreadable],
    warnings: &mut Vec<String>,
) {
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
    use super::report::client_report;
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
            clients: vec![c],
            ..Report::empty()
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
}
