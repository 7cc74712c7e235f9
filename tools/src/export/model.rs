//! From a scan [`Report`] to metric families: grouping, sources, counters that never go
//! backwards.

use super::SelfStats;
use crate::gpu::Gpu;
use crate::scan::{ClientReport, ProcessReport, Report};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;

/// What one series stands for (`--per`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Per {
    /// One series per device: the machine's totals.
    Device,
    /// Per device and cgroup v2 path, with the unit, container, pod and Slurm job the path
    /// names (cardinality: the cgroups that hold GPU memory).
    Cgroup,
    /// Per device and open DRM file, with `pid` (the lowest holder) and `client` (the
    /// `drm-client-id`, else `<pid>/<fd>`) on top of the cgroup labels (cardinality: one
    /// series set per client: for debugging, not for a fleet).
    Client,
}

/// A series' labels, in order.
pub type Labels = Vec<(String, String)>;

/// The labels of a group (a cgroup, or a client within one); empty for [`Per::Device`].
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group(pub Labels);

/// Label value of text other users choose: control bytes and invalid UTF-8 escaped
/// (`\xNN`), so neither a terminal showing `curl` output nor a dashboard gets raw escapes
/// (the encoder escapes `\`, `"` and newline on top, as the format requires).
fn hostile(u: &crate::Untrusted) -> String {
    u.escaped()
}

/// The group labels of a process.
fn process_group(p: Option<&ProcessReport>, per: Per, names: bool) -> Labels {
    let mut l = Labels::new();
    if per == Per::Device {
        return l;
    }
    let Some(p) = p else {
        return l;
    };
    if let Some(c) = &p.cgroup {
        l.push(("cgroup".into(), hostile(c)));
    }
    if let Some(a) = &p.attribution {
        if let Some(u) = &a.unit {
            l.push(("unit".into(), u.clone()));
        }
        if let Some(c) = &a.container {
            l.push(("container_id".into(), c.id.clone()));
            l.push(("container_runtime".into(), c.runtime.into()));
        }
        if let Some(pod) = &a.pod_uid {
            l.push(("pod_uid".into(), pod.clone()));
        }
        if let Some(s) = &a.slurm {
            l.push(("slurm_job".into(), s.job.to_string()));
            if let Some(step) = &s.step {
                l.push(("slurm_step".into(), step.clone()));
            }
        }
    }
    if per == Per::Client {
        l.push(("pid".into(), p.pid.to_string()));
        if names && let Some(c) = &p.comm {
            l.push(("comm".into(), hostile(c)));
        }
    }
    l
}

/// The process a client is counted for: its lowest-pid holder (a file shared across a
/// fork is one client, counted once, in the parent's group).
fn owner(c: &ClientReport) -> Option<u32> {
    c.holders.iter().map(|h| h.pid).min()
}

/// A client's name: its `drm-client-id`, else `<pid>/<fd>` of its first holder (every
/// client the scan found has one; `#<index>` otherwise). The `client` label, and with the
/// device its identity across scans.
fn client_label(c: &ClientReport) -> String {
    match (c.client_id, c.holders.first()) {
        (Some(id), _) => id.to_string(),
        (None, Some(h)) => format!("{}/{}", h.pid, h.fd),
        (None, None) => format!("#{}", c.index),
    }
}

/// Engine counters of one client: (metric, engine) -> value.
type EngineValues = BTreeMap<(&'static str, String), u64>;

/// Counter state across scans. A counter summed over a group would drop when one of its
/// clients exits; instead what a departed client had counted is kept in `departed` for its
/// series while that series still has live clients (a series with none disappears, and
/// starts afresh if it comes back, which Prometheus reads as a reset). Every series is
/// also clamped to the last value it showed.
#[derive(Debug, Default)]
pub struct Counters {
    /// Live clients at the last scan: their series key and values.
    clients: BTreeMap<(String, String), (SeriesBase, EngineValues)>,
    /// Per series: what departed clients had counted.
    departed: BTreeMap<(SeriesBase, &'static str, String), u64>,
    /// Per series: the value last shown.
    last: BTreeMap<(SeriesBase, &'static str, String), u64>,
}

/// Device label and group labels of a series.
type SeriesBase = (String, Group);

impl Counters {
    /// Folds one scan's live clients in and returns each counter series' value.
    fn update(
        &mut self,
        live: BTreeMap<(String, String), (SeriesBase, EngineValues)>,
    ) -> BTreeMap<(SeriesBase, &'static str, String), u64> {
        // Clients gone, or moved to another group: what they counted stays with the old
        // series.
        for (key, (base, vals)) in &self.clients {
            let moved = live.get(key).is_none_or(|(b, _)| b != base);
            if moved {
                for ((metric, engine), v) in vals {
                    *self
                        .departed
                        .entry((base.clone(), metric, engine.clone()))
                        .or_default() += v;
                }
            }
        }
        let mut live = live;
        // A client's own counter never goes back either (a driver that reset it).
        for (key, (base, vals)) in live.iter_mut() {
            if let Some((b, old)) = self.clients.get(key)
                && b == base
            {
                for (k, v) in vals.iter_mut() {
                    if let Some(o) = old.get(k) {
                        *v = (*v).max(*o);
                    }
                }
            }
        }
        let bases: BTreeSet<&SeriesBase> = live.values().map(|(b, _)| b).collect();
        self.departed.retain(|(b, _, _), _| bases.contains(b));
        let mut out: BTreeMap<(SeriesBase, &'static str, String), u64> = self.departed.clone();
        for (base, vals) in live.values() {
            for ((metric, engine), v) in vals {
                let e = out
                    .entry((base.clone(), metric, engine.clone()))
                    .or_default();
                *e = e.saturating_add(*v);
            }
        }
        for (k, v) in out.iter_mut() {
            if let Some(l) = self.last.get(k) {
                *v = (*v).max(*l);
            }
        }
        self.last = out.clone();
        self.clients = live;
        out
    }
}

fn labels(device: &str, group: &Group, extra: &[(&str, &str)]) -> Labels {
    let mut l: Labels = vec![("device".into(), device.into())];
    l.extend(group.0.iter().cloned());
    l.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    l
}

fn gauge_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Sums per series, in bytes.
type Sums = BTreeMap<Labels, u64>;

fn add(s: &mut Sums, l: Labels, v: u64) {
    let e = s.entry(l).or_default();
    *e = e.saturating_add(v);
}

fn gauge_family(reg: &mut Registry, name: &str, help: &str, unit: Option<Unit>, sums: &Sums) {
    if sums.is_empty() {
        return;
    }
    let fam = Family::<Labels, Gauge>::default();
    for (l, v) in sums {
        fam.get_or_create(l).set(gauge_i64(*v));
    }
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, fam),
        None => reg.register(name, help, fam),
    }
}

/// What the metric families of one scan are built from.
struct Ctx<'a> {
    report: &'a Report,
    /// Each report device's label and GPU index ([`Report::device_names`]).
    devs: Vec<(String, Option<usize>)>,
    procs: BTreeMap<u32, &'a ProcessReport>,
    per: Per,
    names: bool,
}

impl Ctx<'_> {
    fn dev_name(&self, i: usize) -> &str {
        self.devs.get(i).map_or("unknown", |(n, _)| n.as_str())
    }

    /// The group of a client: its owner's process group, and for [`Per::Client`] the
    /// client itself.
    fn client_group(&self, c: &ClientReport) -> Group {
        let p = owner(c).and_then(|pid| self.procs.get(&pid).copied());
        let mut l = process_group(p, self.per, self.names);
        if self.per == Per::Client {
            l.push(("client".into(), client_label(c)));
            if self.names
                && let Some(n) = &c.client_name
            {
                l.push(("client_name".into(), hostile(n)));
            }
        }
        Group(l)
    }
}

/// Registers every GPU metric of `report` on `reg`, grouped `per`.
pub fn build(
    reg: &mut Registry,
    report: &Report,
    gpus: &[Gpu],
    per: Per,
    names: bool,
    counters: &mut Counters,
) {
    let cx = Ctx {
        report,
        devs: report.device_names(gpus),
        procs: report.processes.iter().map(|p| (p.pid, p)).collect(),
        per,
        names,
    };
    device_info(reg, &cx);
    let live = client_metrics(reg, &cx);
    engine_counters(reg, counters.update(live));
    debugfs_metrics(reg, &cx);
    mapped_metrics(reg, &cx);
    dmabuf_metrics(reg, &cx);
    dmem_metrics(reg, &cx);
}

/// The group labels of a cgroup path the dmem controller reports (`cgroup`, and the
/// unit, container, pod and Slurm job it names), as [`process_group`] gives a process's.
fn cgroup_group(path: &str) -> Labels {
    let a = crate::scan::attribution::from_cgroup_path(path);
    let mut l: Labels = vec![(
        "cgroup".into(),
        hostile(&crate::Untrusted::new(path.as_bytes())),
    )];
    if let Some(u) = a.unit {
        l.push(("unit".into(), u));
    }
    if let Some(c) = a.container {
        l.push(("container_id".into(), c.id));
        l.push(("container_runtime".into(), c.runtime.into()));
    }
    if let Some(pod) = a.pod_uid {
        l.push(("pod_uid".into(), pod));
    }
    if let Some(s) = a.slurm {
        l.push(("slurm_job".into(), s.job.to_string()));
        if let Some(step) = s.step {
            l.push(("slurm_step".into(), step));
        }
    }
    l
}

/// `drm_dmem_capacity_bytes`, `drm_dmem_current_bytes` and `drm_dmem_max_bytes`: the
/// kernel's dmem cgroup controller's own counts (`source="dmem"`), per region. Per device:
/// the capacity and the charge of the cgroup root's children summed (the machine's
/// charged total); per cgroup or client: every cgroup charged or limited, as the kernel
/// counts it (a parent's charge includes its children's), and its limit. No series where
/// the kernel has no controller.
fn dmem_metrics(reg: &mut Registry, cx: &Ctx) {
    let Some(d) = &cx.report.dmem else { return };
    let (mut cap, mut cur, mut max) = (Sums::new(), Sums::new(), Sums::new());
    let source = ("source", "dmem");
    for r in &d.regions {
        let dev = r.device.as_deref().unwrap_or("unknown");
        let l = labels(dev, &Group::default(), &[("region", &r.region), source]);
        add(&mut cap, l, r.capacity);
    }
    for c in &d.charges {
        let dev = crate::dmem::region_device(&c.region).unwrap_or("unknown");
        let group = match cx.per {
            // The root's children partition the machine's charge.
            Per::Device if c.cgroup.matches('/').count() == 1 => Group::default(),
            Per::Device => continue,
            Per::Cgroup | Per::Client => Group(cgroup_group(&c.cgroup)),
        };
        let l = labels(dev, &group, &[("region", &c.region), source]);
        add(&mut cur, l.clone(), c.current);
        if let (Some(m), false) = (c.max, cx.per == Per::Device) {
            add(&mut max, l, m);
        }
    }
    gauge_family(
        reg,
        "drm_dmem_capacity",
        "Bytes of a device memory region the kernel's dmem cgroup controller manages",
        Some(Unit::Bytes),
        &cap,
    );
    gauge_family(
        reg,
        "drm_dmem_current",
        "Bytes of a region charged to the cgroup and its descendants (dmem.current); per \
         device, to every cgroup",
        Some(Unit::Bytes),
        &cur,
    );
    gauge_family(
        reg,
        "drm_dmem_max",
        "The cgroup's limit on a region in bytes (dmem.max); no series: no limit",
        Some(Unit::Bytes),
        &max,
    );
}

/// `drm_device_info`.
fn device_info(reg: &mut Registry, cx: &Ctx) {
    // drm_device_info
    let info = Family::<Labels, Gauge>::default();
    for (d, (name, index)) in cx.report.devices.iter().zip(&cx.devs) {
        let nodes: Vec<&str> = d.nodes.iter().map(|n| n.path.as_str()).collect();
        let mut l: Labels = vec![("device".into(), name.clone())];
        if let Some(i) = index {
            l.push(("gpu".into(), i.to_string()));
        }
        if let Some(drv) = &d.driver {
            l.push(("driver".into(), drv.clone()));
        }
        l.push(("nodes".into(), nodes.join(",")));
        l.push(("sysfs".into(), d.sysfs.clone()));
        info.get_or_create(&l).set(1);
    }
    reg.register(
        "drm_device_info",
        "A DRM device: driver, GPU index (the ordering of drmtool devices), nodes, sysfs path",
        info,
    );
}

/// The clients' families (`drm_clients`, `drm_memory`, `drm_engine_capacity`,
/// `drm_engine_max_frequency`); returns each live client's engine values for the counters.
fn client_metrics(
    reg: &mut Registry,
    cx: &Ctx,
) -> BTreeMap<(String, String), (SeriesBase, EngineValues)> {
    let mut clients = Sums::new();
    let mut memory = Sums::new();
    let mut capacity = Sums::new();
    let mut maxfreq = Sums::new();
    let mut live = BTreeMap::new();
    for c in &cx.report.clients {
        let dev = cx.dev_name(c.device);
        let g = cx.client_group(c);
        add(&mut clients, labels(dev, &g, &[]), 1);
        for (region, r) in &c.regions {
            let resident = r.resident.or(r.memory);
            for (kind, v) in [
                ("total", r.total),
                ("shared", r.shared),
                ("resident", resident),
                ("purgeable", r.purgeable),
                ("active", r.active),
            ] {
                if let Some(v) = v {
                    let l = labels(
                        dev,
                        &g,
                        &[("region", region), ("kind", kind), ("source", "fdinfo")],
                    );
                    add(&mut memory, l, v);
                }
            }
        }
        if let Some(a) = &c.amdgpu_legacy {
            for (region, v) in [("vram", a.vram), ("gtt", a.gtt)] {
                if let Some(v) = v {
                    let l = labels(
                        dev,
                        &g,
                        &[
                            ("region", region),
                            ("kind", "total"),
                            ("source", "fdinfo-amdgpu-legacy"),
                        ],
                    );
                    add(&mut memory, l, v);
                }
            }
        }
        let mut vals = EngineValues::new();
        for (engine, e) in &c.engines {
            let s = &e.stats;
            for (metric, v) in [
                ("busy_ns", s.busy_ns),
                ("cycles", s.cycles),
                ("total_cycles", s.total_cycles),
            ] {
                if let Some(v) = v {
                    vals.insert((metric, engine.clone()), v);
                }
            }
            let l = labels(dev, &g, &[("engine", engine)]);
            if let Some(v) = s.capacity {
                let e = capacity.entry(l.clone()).or_default();
                *e = (*e).max(v);
            }
            if let Some(v) = s.maxfreq_hz {
                let e = maxfreq.entry(l).or_default();
                *e = (*e).max(v);
            }
        }
        live.insert(
            (dev.to_string(), client_label(c)),
            ((dev.to_string(), g), vals),
        );
    }
    gauge_family(
        reg,
        "drm_clients",
        "Distinct open DRM files (de-duplicated by drm-client-id or kcmp)",
        None,
        &clients,
    );
    gauge_family(
        reg,
        "drm_memory",
        "GPU memory of the group's clients by region and kind (fdinfo drm-<kind>-<region>; \
         a buffer shared by two clients is in both totals, and in shared)",
        Some(Unit::Bytes),
        &memory,
    );
    gauge_family(
        reg,
        "drm_engine_capacity",
        "Engines of this kind a client can use (fdinfo drm-engine-capacity-<e>)",
        None,
        &capacity,
    );
    gauge_family(
        reg,
        "drm_engine_max_frequency",
        "Highest engine frequency (fdinfo drm-maxfreq-<e>)",
        Some(Unit::Other("hertz".into())),
        &maxfreq,
    );
    live
}

/// `drm_engine_busy`, `drm_engine_cycles`, `drm_engine_total_cycles` from the counters'
/// `totals`; a family without series is not registered.
fn engine_counters(reg: &mut Registry, totals: BTreeMap<(SeriesBase, &'static str, String), u64>) {
    let mut busy = Family::<Labels, Counter<f64, AtomicU64>>::default();
    let mut cycles = Family::<Labels, Counter<u64>>::default();
    let mut total_cycles = Family::<Labels, Counter<u64>>::default();
    let (mut n_busy, mut n_cyc, mut n_tot) = (0, 0, 0);
    for (((dev, g), metric, engine), v) in &totals {
        let l = labels(dev, g, &[("engine", engine)]);
        match *metric {
            "busy_ns" => {
                busy.get_or_create(&l).inc_by(*v as f64 / 1e9);
                n_busy += 1;
            }
            "cycles" => {
                cycles.get_or_create(&l).inc_by(*v);
                n_cyc += 1;
            }
            _ => {
                total_cycles.get_or_create(&l).inc_by(*v);
                n_tot += 1;
            }
        }
    }
    if n_busy > 0 {
        reg.register_with_unit(
            "drm_engine_busy",
            "Time the engine was busy with the group's work (fdinfo drm-engine-<e>)",
            Unit::Seconds,
            std::mem::take(&mut busy),
        );
    }
    if n_cyc > 0 {
        reg.register(
            "drm_engine_cycles",
            "Engine cycles spent on the group's work (fdinfo drm-cycles-<e>)",
            std::mem::take(&mut cycles),
        );
    }
    if n_tot > 0 {
        reg.register(
            "drm_engine_total_cycles",
            "Cycles that passed on the engine while the group's clients were open \
             (fdinfo drm-total-cycles-<e>)",
            std::mem::take(&mut total_cycles),
        );
    }
}

/// The device's debugfs figures (`drm_device_framebuffer`, `drm_device_flink_named`).
fn debugfs_metrics(reg: &mut Registry, cx: &Ctx) {
    // What the device's debugfs knows (root, debugfs mounted): per device only, no series
    // where it could not be read.
    let mut fb = Sums::new();
    let mut named = Sums::new();
    for (i, d) in cx.report.devices.iter().enumerate() {
        let dev = cx.dev_name(i);
        for (figure, sums, source) in [
            (&d.framebuffer_bytes, &mut fb, "debugfs-framebuffer"),
            (&d.named_bytes, &mut named, "debugfs-gem_names"),
        ] {
            if let Some(v) = figure.value {
                let l = vec![
                    ("device".into(), dev.into()),
                    ("source".into(), source.into()),
                ];
                add(sums, l, v);
            }
        }
    }
    gauge_family(
        reg,
        "drm_device_framebuffer",
        "Bytes of the GEM objects behind the device's framebuffers, each framebuffer's \
         objects counted (debugfs <minor>/framebuffer)",
        Some(Unit::Bytes),
        &fb,
    );
    gauge_family(
        reg,
        "drm_device_flink_named",
        "Bytes of the device's flink-named GEM objects (debugfs <minor>/gem_names)",
        Some(Unit::Bytes),
        &named,
    );
}

/// `drm_mapped`.
fn mapped_metrics(reg: &mut Registry, cx: &Ctx) {
    // Mapped DRM buffers, by the mapping process's group.
    let mut mapped = Sums::new();
    for p in &cx.report.processes {
        let g = Group(process_group(Some(p), cx.per, cx.names));
        for m in &p.drm_mappings {
            if let Some(v) = m.bytes.value {
                add(
                    &mut mapped,
                    labels(cx.dev_name(m.device), &g, &[("source", "maps")]),
                    v,
                );
            }
        }
    }
    gauge_family(
        reg,
        "drm_mapped",
        "Bytes of distinct DRM buffers the group's processes map (/proc/<pid>/maps)",
        Some(Unit::Bytes),
        &mapped,
    );
}

/// `drm_dmabuf` and `drm_dmabuf_distinct`.
fn dmabuf_metrics(reg: &mut Registry, cx: &Ctx) {
    // dma-bufs: each counted once per group that holds or maps it, and once overall.
    let mut holders_of: BTreeMap<u64, BTreeSet<Group>> = BTreeMap::new();
    for b in &cx.report.dmabufs {
        for pid in &b.processes {
            let g = Group(process_group(cx.procs.get(pid).copied(), cx.per, cx.names));
            holders_of.entry(b.inode).or_default().insert(g);
        }
    }
    let mut dmabuf = Sums::new();
    let mut distinct = Sums::new();
    for b in &cx.report.dmabufs {
        let Some(size) = b.size.value else { continue };
        let groups = holders_of.get(&b.inode).cloned().unwrap_or_default();
        let sharing = if groups.len() > 1 {
            "shared"
        } else {
            "exclusive"
        };
        for g in &groups {
            let mut l: Labels = g.0.clone();
            l.push(("sharing".into(), sharing.into()));
            l.push(("source".into(), "dmabuf-fdinfo".into()));
            add(&mut dmabuf, l, size);
        }
        let exporter = b.exp_name.clone().unwrap_or_default();
        add(
            &mut distinct,
            vec![
                ("exporter".into(), exporter),
                ("source".into(), "dmabuf-fdinfo".into()),
            ],
            size,
        );
    }
    gauge_family(
        reg,
        "drm_dmabuf",
        "Bytes of dma-bufs the group's processes hold or map, each once per group; shared: \
         another group holds it too",
        Some(Unit::Bytes),
        &dmabuf,
    );
    gauge_family(
        reg,
        "drm_dmabuf_distinct",
        "Bytes of every dma-buf any process holds or maps, each counted once, by exporter",
        Some(Unit::Bytes),
        &distinct,
    );
}

/// The exporter's own metrics.
pub(super) fn self_metrics(reg: &mut Registry, s: &SelfStats, report: Option<&Report>) {
    let up = Gauge::<i64>::default();
    up.set(i64::from(report.is_some()));
    reg.register(
        "drmtool_export_scan_ok",
        "Whether the last scan of /proc could run (0: see scan_errors)",
        up,
    );
    let dur = Gauge::<f64, AtomicU64>::default();
    dur.set(s.last_scan_seconds);
    reg.register_with_unit(
        "drmtool_export_scan_duration",
        "Wall time of the last scan",
        Unit::Seconds,
        dur,
    );
    for (name, help, v) in [
        ("drmtool_export_scans", "Scans run", s.scans),
        (
            "drmtool_export_scan_errors",
            "Scans that could not run",
            s.scan_errors,
        ),
        (
            "drmtool_export_cached_answers",
            "Scrapes answered from the last scan (closer together than --min-interval)",
            s.cached,
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    }
    if let Some(r) = report {
        for (name, help, v) in [
            (
                "drmtool_export_processes_unreadable",
                "Processes the last scan could not read (permissions)",
                r.scan.unreadable,
            ),
            (
                "drmtool_export_processes_vanished",
                "Processes that exited during the last scan",
                r.scan.vanished,
            ),
        ] {
            let g = Gauge::<i64>::default();
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
            reg.register(name, help, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(g: &str) -> SeriesBase {
        ("dev".into(), Group(vec![("cgroup".into(), g.into())]))
    }

    fn client(g: &str, busy: u64) -> (SeriesBase, EngineValues) {
        let mut v = EngineValues::new();
        v.insert(("busy_ns", "gfx".into()), busy);
        (base(g), v)
    }

    fn key(id: &str) -> (String, String) {
        ("dev".into(), id.into())
    }

    fn busy_of(out: &BTreeMap<(SeriesBase, &'static str, String), u64>, g: &str) -> Option<u64> {
        out.get(&(base(g), "busy_ns", "gfx".to_string())).copied()
    }

    #[test]
    fn group_counters_never_go_backwards_and_empty_groups_vanish() {
        let mut c = Counters::default();
        let out = c.update(BTreeMap::from([
            (key("1"), client("/a", 100)),
            (key("2"), client("/a", 50)),
            (key("3"), client("/b", 7)),
        ]));
        assert_eq!(busy_of(&out, "/a"), Some(150));
        assert_eq!(busy_of(&out, "/b"), Some(7));
        // Client 2 exits; client 1 goes on: /a keeps what 2 counted.
        let out = c.update(BTreeMap::from([
            (key("1"), client("/a", 120)),
            (key("3"), client("/b", 9)),
        ]));
        assert_eq!(busy_of(&out, "/a"), Some(170));
        // A driver's counter that went back is clamped (client 1 shows 110 < 120).
        let out = c.update(BTreeMap::from([
            (key("1"), client("/a", 110)),
            (key("3"), client("/b", 9)),
        ]));
        assert_eq!(busy_of(&out, "/a"), Some(170));
        // Client 3 moves to /a: /b has no live client left and disappears; /a gains it.
        let out = c.update(BTreeMap::from([
            (key("1"), client("/a", 130)),
            (key("3"), client("/a", 10)),
        ]));
        assert_eq!(busy_of(&out, "/b"), None, "no stale series");
        assert_eq!(busy_of(&out, "/a"), Some(50 + 130 + 10));
        // Everything exits: no series at all.
        assert!(c.update(BTreeMap::new()).is_empty());
        // /a comes back afresh (a reset, as Prometheus reads a new series).
        let out = c.update(BTreeMap::from([(key("9"), client("/a", 5))]));
        assert_eq!(busy_of(&out, "/a"), Some(5));
    }

    #[test]
    fn dmem_series_per_device_and_per_cgroup() {
        use crate::dmem::Charge;
        use crate::scan::{DmemRegion, DmemReport};
        let charge = |cg: &str, cur, max| Charge {
            cgroup: cg.into(),
            region: "drm/0000:00:05.0/vram0".into(),
            current: cur,
            max,
        };
        let report = Report {
            dmem: Some(DmemReport {
                regions: vec![DmemRegion {
                    region: "drm/0000:00:05.0/vram0".into(),
                    device: Some("0000:00:05.0".into()),
                    capacity: 64 << 20,
                }],
                charges: vec![
                    charge("/drmtool.slice", 12 << 20, None),
                    charge("/drmtool.slice/run-9-1-0", 8 << 20, Some(8 << 20)),
                    charge(
                        "/system.slice/slurmstepd.scope/job_42/step_0",
                        4 << 20,
                        None,
                    ),
                ],
            }),
            ..Report::empty()
        };
        let text = |per| {
            let mut reg = Registry::default();
            build(&mut reg, &report, &[], per, false, &mut Counters::default());
            super::super::encode(&reg, super::super::Format::Text)
        };
        let dev = text(Per::Device);
        let r = "device=\"0000:00:05.0\",region=\"drm/0000:00:05.0/vram0\",source=\"dmem\"";
        assert!(
            dev.contains(&format!("drm_dmem_capacity_bytes{{{r}}} 67108864")),
            "{dev}"
        );
        // The root's children only (/drmtool.slice): the job and the Slurm step are below.
        assert!(
            dev.contains(&format!("drm_dmem_current_bytes{{{r}}} 12582912")),
            "{dev}"
        );
        assert!(!dev.contains("drm_dmem_max_bytes"), "{dev}");
        let cg = text(Per::Cgroup);
        assert!(
            cg.contains(
                "drm_dmem_max_bytes{device=\"0000:00:05.0\",cgroup=\"/drmtool.slice/run-9-1-0\",\
                 region=\"drm/0000:00:05.0/vram0\",source=\"dmem\"} 8388608"
            ),
            "{cg}"
        );
        assert!(cg.contains("slurm_job=\"42\",slurm_step=\"0\""), "{cg}");
    }
}
