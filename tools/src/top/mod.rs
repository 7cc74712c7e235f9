//! The model of `drmtool top`: one [`Frame`] per refresh, built from one scan
//! ([`crate::scan::scan`]) and the previous one.
//!
//! A frame holds, per GPU in the one ordering, its clients, leases, memory (the scan's
//! figure with its source, per region where fdinfo has regions, the dmem controller's
//! capacity and use where the kernel has it) and engine busy; per DRM client its owner
//! process (pids in the viewer's namespace and the process's own), user, cgroup, unit,
//! container, pod and Slurm job, memory, engine busy, dma-bufs and command line; and each
//! GPU's history of memory and busy over the last [`HISTORY`] refreshes.
//!
//! Engine busy is a rate: the growth of `drm-engine-<e>` nanoseconds over the time between
//! the two scans, divided by `drm-engine-capacity-<e>`, or of `drm-cycles-<e>` over
//! `drm-total-cycles-<e>`. A client is the same client in two scans when its node and
//! `drm-client-id` are (ids are never reused while the kernel runs), or, where the driver
//! prints no id, its node, first holder (pid, fd) and command name are. A counter that went
//! backwards belongs to another client than the one before: no rate for it this time
//! (never a negative or invented one). A figure no source gives is `None` and its
//! source is named once in [`Frame::missing`], never shown as zero.
//!
//! The model does no I/O: [`Sampler`] reads the machine, [`Model::update`] turns a
//! [`Sample`] into a frame, so the rates are tested on synthetic scans.
//!
//! ```
//! use drmtool::top::{Model, Sample};
//! use std::time::Duration;
//!
//! let mut model = Model::new();
//! let frame = model.update(Sample::of(drmtool::scan::Report::empty(), Duration::ZERO, 0));
//! assert!(frame.gpus.is_empty() && frame.interval_ms.is_none());
//! let next = model.update(Sample::of(drmtool::scan::Report::empty(), Duration::from_secs(1), 1000));
//! assert_eq!((next.seq, next.interval_ms), (1, Some(1000)));
//! ```

pub mod record;
mod sample;
pub mod view;

pub use sample::{Sampler, TREE_MAX, descendants};

use crate::scan::{self, ClientReport, Figure, Report, add};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// The version of [`Frame`]'s JSON (`schema/top.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

/// Refreshes of history kept per GPU.
pub const HISTORY: usize = 120;

/// The most bytes of a command line kept.
pub const CMDLINE_MAX: usize = 512;

/// One refresh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// 0 for the first frame of a session, then one more per refresh.
    pub seq: u64,
    /// Wall-clock time of the scan, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Milliseconds since the previous scan; `None` for the first (no rates yet).
    pub interval_ms: Option<u64>,
    /// The GPUs, in the one ordering.
    pub gpus: Vec<GpuRow>,
    /// The DRM clients (open DRM files), by GPU then client id or holder.
    pub clients: Vec<ClientRow>,
    /// What no source gave this time, each said once (`engine busy: the driver prints no
    /// drm-engine-* keys`).
    pub missing: Vec<String>,
    /// What the scan read.
    pub scan: ScanRow,
}

/// A figure in bytes and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Bytes {
    /// Bytes; `None`: unknown.
    pub value: Option<u64>,
    /// `fdinfo`, `maps`, `dmabuf`, `debugfs`, `dmem`, or empty when unknown.
    pub source: String,
}

/// One memory region of fdinfo (`drm-total-<region>`, `drm-resident-<region>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Region {
    /// Every buffer in the region.
    pub total: Option<u64>,
    /// Of those, backed by memory now.
    pub resident: Option<u64>,
}

/// One region of the dmem cgroup controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmemRow {
    /// Its name (`drm/0000:00:05.0/vram0`).
    pub region: String,
    /// Bytes it has.
    pub capacity: u64,
    /// Bytes charged to the cgroups below the root (the sum of their `dmem.current`).
    pub current: u64,
}

/// A GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRow {
    /// Its index in the one ordering.
    pub index: usize,
    /// PCI bus id, or the device name of a platform device.
    pub name: String,
    /// Its driver.
    pub driver: Option<String>,
    /// Distinct clients found.
    pub clients: usize,
    /// drmtool leases held on it.
    pub leases: usize,
    /// Memory its clients hold (the scan's total, with its source).
    pub memory: Bytes,
    /// fdinfo's regions, summed over its clients.
    pub regions: BTreeMap<String, Region>,
    /// The dmem controller's regions of this GPU.
    pub dmem: Vec<DmemRow>,
    /// Busy percent per engine (its clients' rates summed, at most 100); an engine no
    /// client could be rated on is left out.
    pub engines: BTreeMap<String, f64>,
    /// Memory at each of the last refreshes, oldest first.
    pub memory_history: Vec<Option<u64>>,
    /// The busiest engine's percent at each of the last refreshes, oldest first.
    pub busy_history: Vec<Option<f64>>,
}

/// A DRM client: one open DRM file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRow {
    /// The GPU's index in the one ordering (`None`: a device outside it).
    pub gpu: Option<usize>,
    /// The GPU's name.
    pub gpu_name: String,
    /// `drm-client-id`, where the driver prints it.
    pub client_id: Option<u64>,
    /// The process that holds it first (in the viewer's pid namespace).
    pub pid: u32,
    /// That process's pid in each namespace from the viewer's down (`NSpid`); the last is
    /// its own.
    pub ns_pids: Vec<u32>,
    /// Every process holding it.
    pub holders: Vec<u32>,
    /// Command name, escaped (no control byte reaches a terminal).
    pub comm: String,
    /// Command line, arguments joined by spaces, escaped, at most [`CMDLINE_MAX`] bytes.
    pub cmdline: String,
    /// Owner's uid.
    pub uid: Option<u32>,
    /// Owner's login name.
    pub user: Option<String>,
    /// cgroup v2 path, escaped.
    pub cgroup: Option<String>,
    /// systemd unit.
    pub unit: Option<String>,
    /// Container (`runtime:id`).
    pub container: Option<String>,
    /// Kubernetes pod uid.
    pub pod: Option<String>,
    /// Slurm job (`job` or `job.step`).
    pub slurm_job: Option<String>,
    /// Memory it holds.
    pub memory: Bytes,
    /// fdinfo's regions.
    pub regions: BTreeMap<String, Region>,
    /// Busy percent per engine; an engine without two samples is left out.
    pub engines: BTreeMap<String, f64>,
    /// dma-buf fds the owner holds.
    pub dmabufs: usize,
    /// Of those, held by another process too.
    pub dmabufs_shared: usize,
    /// Their bytes.
    pub dmabuf_bytes: Option<u64>,
}

impl ClientRow {
    /// The busiest engine's percent (`None`: no engine rated).
    pub fn busy(&self) -> Option<f64> {
        self.engines.values().copied().reduce(f64::max)
    }
}

/// What the scan read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ScanRow {
    /// Processes looked at.
    pub processes: usize,
    /// Processes that could not be read (their clients are not counted).
    pub unreadable: usize,
}

/// One scan and what goes with it: the input of [`Model::update`].
#[derive(Debug, Clone)]
pub struct Sample {
    /// The scan.
    pub report: Report,
    /// A monotonic time of the scan (since any fixed point): rates come from its
    /// differences.
    pub at: Duration,
    /// Wall-clock time of the scan, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The GPU ordering ([`crate::gpu::gpus`]).
    pub gpus: Vec<crate::gpu::Gpu>,
    /// Leases per GPU index.
    pub leases: BTreeMap<usize, usize>,
    /// Command lines by pid (bounded, raw).
    pub cmdlines: BTreeMap<u32, Vec<u8>>,
    /// Login names by uid.
    pub users: BTreeMap<u32, String>,
}

impl Sample {
    /// A sample of `report` alone (no GPU ordering, leases, command lines or users).
    pub fn of(report: Report, at: Duration, unix_ms: u64) -> Sample {
        Sample {
            report,
            at,
            unix_ms,
            gpus: Vec::new(),
            leases: BTreeMap::new(),
            cmdlines: BTreeMap::new(),
            users: BTreeMap::new(),
        }
    }
}

/// Which client of the previous scan a client is (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ClientKey {
    Id(String, u64),
    Holder(String, u32, u32, Vec<u8>),
}

/// A client's engine counters at a scan.
type Counters = BTreeMap<String, crate::fdinfo::EngineStats>;

/// A GPU's memory and busiest engine at each of the last refreshes.
type History = (VecDeque<Option<u64>>, VecDeque<Option<f64>>);

/// The state between refreshes: the previous scan's counters and each GPU's history.
#[derive(Debug, Default)]
pub struct Model {
    seq: u64,
    prev_at: Option<Duration>,
    prev: BTreeMap<ClientKey, Counters>,
    history: BTreeMap<String, History>,
}

impl Model {
    /// A model before its first scan.
    pub fn new() -> Model {
        Model::default()
    }

    /// The frame of `s`, with rates against the previous sample.
    pub fn update(&mut self, s: Sample) -> Frame {
        let elapsed = self.prev_at.and_then(|p| s.at.checked_sub(p));
        let names = s.report.device_names(&s.gpus);
        let mut missing = BTreeSet::new();
        let mut now = BTreeMap::new();
        let procs: BTreeMap<u32, &scan::ProcessReport> =
            s.report.processes.iter().map(|p| (p.pid, p)).collect();
        let shared: BTreeSet<(u32, u64)> = s
            .report
            .sharing
            .iter()
            .flat_map(|sh| sh.processes.iter().map(move |p| (*p, sh.inode)))
            .collect();
        let mut clients: Vec<ClientRow> = s
            .report
            .clients
            .iter()
            .map(|c| {
                let key = client_key(c, &procs);
                let engines = elapsed
                    .and_then(|e| self.prev.get(&key).map(|p| rates(p, c, e)))
                    .unwrap_or_default();
                now.insert(key, counters(c));
                let (gpu_name, gpu) = names
                    .get(c.device)
                    .cloned()
                    .unwrap_or_else(|| ("unknown".into(), None));
                client_row(c, gpu, gpu_name, engines, &procs, &shared, &s)
            })
            .collect();
        clients.sort_by(|a, b| {
            (a.gpu, &a.gpu_name, a.client_id, a.pid).cmp(&(b.gpu, &b.gpu_name, b.client_id, b.pid))
        });
        note_missing(&s.report, &clients, elapsed.is_some(), &mut missing);
        let gpus = self.gpu_rows(&s, &names, &clients);
        self.prev = now;
        self.prev_at = Some(s.at);
        let f = Frame {
            schema_version: SCHEMA_VERSION,
            seq: self.seq,
            unix_ms: s.unix_ms,
            interval_ms: elapsed.map(|e| e.as_millis() as u64),
            gpus,
            clients,
            missing: missing.into_iter().collect(),
            scan: ScanRow {
                processes: s.report.scan.processes,
                unreadable: s.report.scan.unreadable,
            },
        };
        self.seq += 1;
        f
    }

    /// The GPU rows: every GPU of the ordering (or, without one, every scanned device),
    /// their clients' sums, and their history with this refresh added.
    fn gpu_rows(
        &mut self,
        s: &Sample,
        names: &[(String, Option<usize>)],
        clients: &[ClientRow],
    ) -> Vec<GpuRow> {
        let mut rows: Vec<GpuRow> = if s.gpus.is_empty() {
            names
                .iter()
                .enumerate()
                .map(|(i, (n, _))| empty_gpu(i, n.clone(), s.report.devices[i].driver.clone()))
                .collect()
        } else {
            s.gpus
                .iter()
                .map(|g| {
                    empty_gpu(
                        g.index,
                        g.bus_id.clone().unwrap_or_else(|| g.name.clone()),
                        g.driver.clone(),
                    )
                })
                .collect()
        };
        for row in &mut rows {
            let dev = names.iter().position(|(n, _)| *n == row.name);
            if let Some(d) = dev.and_then(|d| s.report.devices.get(d)) {
                row.clients = d.clients;
                // fdinfo's total; where no driver prints one, what is mapped of it.
                row.memory = if d.memory_total.value.is_some() {
                    bytes(&d.memory_total)
                } else {
                    bytes(&d.mapped)
                };
            }
            row.leases = s.leases.get(&row.index).copied().unwrap_or(0);
            for c in clients.iter().filter(|c| c.gpu_name == row.name) {
                for (r, v) in &c.regions {
                    let e = row.regions.entry(r.clone()).or_default();
                    e.total = add(e.total, v.total);
                    e.resident = add(e.resident, v.resident);
                }
                for (e, v) in &c.engines {
                    let t = row.engines.entry(e.clone()).or_insert(0.0);
                    *t = (*t + v).min(100.0);
                }
            }
            row.dmem = dmem_rows(&s.report, &row.name);
            let (mem, busy) = self.history.entry(row.name.clone()).or_default();
            push_bounded(mem, row.memory.value);
            push_bounded(busy, row.engines.values().copied().reduce(f64::max));
            row.memory_history = mem.iter().copied().collect();
            row.busy_history = busy.iter().copied().collect();
        }
        rows
    }
}

fn empty_gpu(index: usize, name: String, driver: Option<String>) -> GpuRow {
    GpuRow {
        index,
        name,
        driver,
        clients: 0,
        leases: 0,
        memory: Bytes::default(),
        regions: BTreeMap::new(),
        dmem: Vec::new(),
        engines: BTreeMap::new(),
        memory_history: Vec::new(),
        busy_history: Vec::new(),
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

fn bytes(f: &Figure) -> Bytes {
    Bytes {
        value: f.value,
        source: if f.value.is_some() {
            crate::render::source_tag(f.source).into()
        } else {
            String::new()
        },
    }
}

fn client_key(c: &ClientReport, procs: &BTreeMap<u32, &scan::ProcessReport>) -> ClientKey {
    match c.client_id {
        Some(id) => ClientKey::Id(c.node.clone(), id),
        None => {
            let h = c
                .holders
                .first()
                .copied()
                .unwrap_or(scan::FdRef { pid: 0, fd: 0 });
            let comm = procs
                .get(&h.pid)
                .and_then(|p| p.comm.as_ref())
                .map(|c| c.as_bytes().to_vec())
                .unwrap_or_default();
            ClientKey::Holder(c.node.clone(), h.pid, h.fd, comm)
        }
    }
}

fn counters(c: &ClientReport) -> Counters {
    c.engines
        .iter()
        .map(|(n, e)| (n.clone(), e.stats.clone()))
        .collect()
}

/// Busy percent per engine of `c` since `prev`, `elapsed` before. Time counters are divided
/// by the elapsed time and the capacity; cycle counters by the total cycles that passed. A
/// counter that went backwards gives no rate.
pub(crate) fn rates(prev: &Counters, c: &ClientReport, elapsed: Duration) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let ns = elapsed.as_nanos() as f64;
    for (name, e) in &c.engines {
        let Some(p) = prev.get(name) else { continue };
        let s = &e.stats;
        let rate = match (
            p.busy_ns,
            s.busy_ns,
            p.cycles,
            s.cycles,
            p.total_cycles,
            s.total_cycles,
        ) {
            (Some(b0), Some(b1), ..) if ns > 0.0 => (b1 >= b0).then(|| {
                let cap = s.capacity.unwrap_or(1).max(1) as f64;
                100.0 * (b1 - b0) as f64 / (ns * cap)
            }),
            (_, _, Some(c0), Some(c1), Some(t0), Some(t1)) => {
                (c1 >= c0 && t1 > t0).then(|| 100.0 * (c1 - c0) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        if let Some(r) = rate {
            out.insert(name.clone(), r.min(100.0));
        }
    }
    out
}

fn client_row(
    c: &ClientReport,
    gpu: Option<usize>,
    gpu_name: String,
    engines: BTreeMap<String, f64>,
    procs: &BTreeMap<u32, &scan::ProcessReport>,
    shared: &BTreeSet<(u32, u64)>,
    s: &Sample,
) -> ClientRow {
    let pid = c.holders.first().map_or(0, |h| h.pid);
    let p = procs.get(&pid);
    let mut holders: Vec<u32> = c.holders.iter().map(|h| h.pid).collect();
    holders.dedup();
    let a = p.and_then(|p| p.attribution.as_ref());
    let uid = p.and_then(|p| p.uid);
    ClientRow {
        gpu,
        gpu_name,
        client_id: c.client_id,
        pid,
        ns_pids: p
            .and_then(|p| p.ns_pids.clone())
            .unwrap_or_else(|| vec![pid]),
        holders,
        comm: p
            .and_then(|p| p.comm.as_ref())
            .map(|c| c.escaped())
            .unwrap_or_default(),
        cmdline: s.cmdlines.get(&pid).map(|b| cmdline(b)).unwrap_or_default(),
        uid,
        user: uid.and_then(|u| s.users.get(&u).cloned()),
        cgroup: p.and_then(|p| p.cgroup.as_ref()).map(|c| c.escaped()),
        unit: a.and_then(|a| a.unit.clone()),
        container: a
            .and_then(|a| a.container.as_ref())
            .map(|c| format!("{}:{}", c.runtime, c.id)),
        pod: a.and_then(|a| a.pod_uid.clone()),
        slurm_job: a.and_then(|a| a.slurm.as_ref()).map(|j| match &j.step {
            Some(st) => format!("{}.{st}", j.job),
            None => j.job.to_string(),
        }),
        memory: client_memory(c, p.copied()),
        regions: c
            .regions
            .iter()
            .map(|(n, r)| {
                (
                    n.clone(),
                    Region {
                        total: r.total,
                        resident: r.resident,
                    },
                )
            })
            .collect(),
        engines,
        dmabufs: p.map_or(0, |p| p.dmabuf_fds.len()),
        dmabufs_shared: p.map_or(0, |p| {
            p.dmabuf_fds
                .iter()
                .filter(|d| shared.contains(&(pid, d.inode)))
                .count()
        }),
        dmabuf_bytes: p.and_then(|p| p.dmabuf_bytes.value),
    }
}

/// A client's memory: fdinfo's total; where the driver prints none, what its owner maps of
/// the client's device (`maps`, as `buffers` counts it), else unknown.
fn client_memory(c: &ClientReport, owner: Option<&scan::ProcessReport>) -> Bytes {
    if c.memory_total.value.is_some() {
        return bytes(&c.memory_total);
    }
    owner
        .and_then(|p| p.drm_mappings.iter().find(|m| m.device == c.device))
        .map_or_else(|| bytes(&c.memory_total), |m| bytes(&m.bytes))
}

/// A raw `/proc/<pid>/cmdline` as one line: NULs between arguments become spaces, the rest
/// is escaped like any text from another process, at most [`CMDLINE_MAX`] bytes of it.
pub fn cmdline(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
    let cut = &raw[..raw.len().min(CMDLINE_MAX)];
    let spaced: Vec<u8> = cut
        .iter()
        .map(|b| if *b == 0 { b' ' } else { *b })
        .collect();
    crate::untrusted::Untrusted::new(&spaced).escaped()
}

fn dmem_rows(r: &Report, gpu: &str) -> Vec<DmemRow> {
    let Some(d) = &r.dmem else { return Vec::new() };
    d.regions
        .iter()
        .filter(|reg| reg.device.as_deref() == Some(gpu))
        .map(|reg| DmemRow {
            region: reg.region.clone(),
            capacity: reg.capacity,
            current: d
                .charges
                .iter()
                .filter(|c| c.region == reg.region && !c.cgroup.trim_matches('/').contains('/'))
                .map(|c| c.current)
                .sum(),
        })
        .collect()
}

/// Says once what no source gave: engine busy (no client has engine counters, or this is
/// the first scan), memory (no client's memory is known), unreadable processes.
fn note_missing(r: &Report, clients: &[ClientRow], rated: bool, out: &mut BTreeSet<String>) {
    if !clients.is_empty() && r.clients.iter().all(|c| c.engines.is_empty()) {
        out.insert("engine busy: no driver here prints drm-engine-* or drm-cycles-* keys".into());
    } else if !rated && !clients.is_empty() {
        out.insert("engine busy: needs a second scan".into());
    }
    if !clients.is_empty() && clients.iter().all(|c| c.memory.value.is_none()) {
        out.insert(
            "client memory: no driver here prints drm-total-* keys and no mapping was seen".into(),
        );
    }
    if r.scan.unreadable > 0 {
        out.insert(format!(
            "{} process(es) unreadable: their clients are not counted (run as root to see them)",
            r.scan.unreadable
        ));
    }
    if r.dmem.is_none() {
        out.insert("dmem: the kernel has no dmem cgroup controller".into());
    }
}

/// A signal `drmtool top` sends to the processes of a row (after asking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: asks the process to end.
    Term,
    /// SIGKILL: ends it.
    Kill,
}

impl Signal {
    /// `SIGTERM` or `SIGKILL`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
        }
    }
}

/// Sends `sig` to each of `pids` (pids of the viewer's namespace, as a frame lists them);
/// each pid's outcome (`EPERM` for another user's process when not root, `ESRCH` for one
/// that has gone).
pub fn send_signal(pids: &[u32], sig: Signal) -> Vec<(u32, Result<(), rustix::io::Errno>)> {
    let s = match sig {
        Signal::Term => rustix::process::Signal::TERM,
        Signal::Kill => rustix::process::Signal::KILL,
    };
    pids.iter()
        .map(|&p| {
            let r = i32::try_from(p)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
                .ok_or(rustix::io::Errno::SRCH)
                .and_then(|pid| rustix::process::kill_process(pid, s));
            (p, r)
        })
        .collect()
}

#[cfg(test)]
mod tests;
