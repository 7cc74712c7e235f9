//! A [`Recording`] as a Chrome/Perfetto JSON trace (the "JSON Object Format" that
//! ui.perfetto.dev and chrome://tracing load).
//!
//! What goes in:
//! - every tracepoint hit, as an instant on the thread that hit it (`cat` = its system,
//!   `name` = `system:event`, `args` = its fields and CPU): nothing the kernel gave is left
//!   out;
//! - one async track per fence timeline (process "GPU fence timelines"), each fence a slice
//!   from its emit (or, without one, its init) to its signal, unbound timelines (vgem's,
//!   sw_sync's) kept under their context number; a fence that never signalled in the trace
//!   is a slice with no end; on a context whose fences are emitted, an init alone is not a
//!   fence (virtio-gpu inits every fence with seqno 0 and numbers it at emit);
//! - wait slices (`dma_fence_wait_start` to `_end`) on the waiting thread;
//! - vblanks per CRTC (process "Display"), scheduler events per ring (process "GPU
//!   scheduler"), `gpu_mem_total` and the sampled per-process GPU memory as counters;
//! - where the DRM scheduler's events say so, each job's way from the thread that queued it
//!   (`drm_sched_job`) to its ring (`drm_run_job`, same job `id`) as a flow (`s` to `f`)
//!   between two 1 ns slices, "submit job" and "run job" (flows bind to slices), and its
//!   execution as an async slice on the ring's "jobs" track from `drm_run_job` to the
//!   `drm_sched_process_job` of its finished fence (the events' `fence` pointer; the first
//!   such event at or after the run, as the kernel reuses fence memory).
//!
//! Timestamps are `CLOCK_MONOTONIC` microseconds (with ns precision), as perf recorded them.

use super::alloc;
use super::format::EventFormat;
use super::record::{Event, MemorySample, ProcInfo, Recording};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Version of the `otherData` block.
pub const SCHEMA_VERSION: u32 = 1;

/// Synthetic process ids of the GPU-side tracks: above any pid the kernel hands out
/// (`pid_max` is at most 2^22).
pub const FENCE_PID: u64 = 10_000_001;
/// See [`FENCE_PID`].
pub const DISPLAY_PID: u64 = 10_000_002;
/// See [`FENCE_PID`].
pub const SCHED_PID: u64 = 10_000_003;
/// See [`FENCE_PID`].
pub const GPUMEM_PID: u64 = 10_000_004;

/// Name of the wait slices and of a vblank instant, which `trace summary` reads back.
pub const WAIT: &str = "fence wait";
/// See [`WAIT`].
pub const VBLANK: &str = "vblank";
/// Category of an allocation failure's slice ([`super::alloc`]), which `trace summary`
/// reads back.
pub const ALLOC_CAT: &str = "alloc";

fn ts(ns: u64) -> Value {
    // µs with three decimals: exact for any uptime below 104 days.
    json!((ns as f64) / 1000.0)
}

fn args(e: &Event) -> Map<String, Value> {
    let mut m: Map<String, Value> = e
        .fields
        .iter()
        .map(|(k, v)| {
            let v = match v {
                super::format::Value::Int(i) => json!(i),
                super::format::Value::Str(s) => json!(s),
            };
            (k.clone(), v)
        })
        .collect();
    m.insert("cpu".into(), json!(e.cpu));
    m
}

mod out;
pub use out::{InMemory, JsonStream, Out, ProtoStream};

/// A fence's key: (context, seqno).
type FenceKey = (i64, i64);

/// A DRM scheduler job, by its `id`.
#[derive(Default)]
struct Job {
    /// `drm_sched_job`: time, pid, tid of the queuing thread.
    queued: Option<(u64, u32, u32)>,
    /// `drm_run_job`: time and the ring's tid.
    run: Option<(u64, u64)>,
    /// The ring's name.
    ring: String,
    /// The finished fence's address (`fence` of `drm_run_job`).
    fence: Option<i64>,
}

/// 1 ns in the trace's µs: the span of the slices a flow binds to.
const TICK_US: f64 = 0.001;

#[derive(Default)]
struct Fence {
    init: Option<u64>,
    emit: Option<u64>,
    driver: String,
    timeline: String,
}

/// At most this many fences, jobs and waits are followed at once (a driver that never
/// signals must not grow the recorder without bound): past it, the oldest open ones are
/// written as unfinished.
const OPEN_MAX: usize = 1 << 16;

/// Writes a recording's trace as its events come ([`super::stream::Sink`]): each hit as an
/// instant at once, a fence's slice when it signals, a wait's when it ends, a job's when
/// its fence finishes; what is still open, the track names and `otherData` at
/// [`TraceBuilder::finish`]. It holds only what is open, whatever the recording's length.
pub struct TraceBuilder<O: Out> {
    out: O,
    err: Option<std::io::Error>,
    counts: BTreeMap<String, u64>,
    fences: BTreeMap<FenceKey, Fence>,
    /// Contexts that emitted a fence (see the module doc).
    emitting: BTreeSet<i64>,
    waits: BTreeMap<(u32, FenceKey), u64>,
    crtcs: BTreeSet<i64>,
    rings: BTreeMap<String, u64>,
    jobs: BTreeMap<i64, Job>,
    /// Open jobs by their finished fence.
    by_fence: BTreeMap<i64, Vec<i64>>,
    gpu_mem: bool,
    pairer: alloc::Pairer,
    failures: u64,
    procs: BTreeMap<u32, ProcInfo>,
    /// Read the process of a failure from /proc (a live recording) or only from `procs`.
    read_procs: bool,
    named: BTreeMap<u32, String>,
    memory_samples: u64,
}

impl<O: Out> std::fmt::Debug for TraceBuilder<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceBuilder")
            .field("counts", &self.counts)
            .field("open_fences", &self.fences.len())
            .field("open_jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

impl<O: Out> TraceBuilder<O> {
    /// A builder over `out`, for the tracepoints of `formats` (each listed in the counts,
    /// 0 when it never fires).
    pub fn new(out: O, formats: &BTreeMap<u32, EventFormat>) -> Self {
        TraceBuilder {
            out,
            err: None,
            counts: formats
                .values()
                .map(|f| (format!("{}:{}", f.system, f.name), 0))
                .collect(),
            fences: BTreeMap::new(),
            emitting: BTreeSet::new(),
            waits: BTreeMap::new(),
            crtcs: BTreeSet::new(),
            rings: BTreeMap::new(),
            jobs: BTreeMap::new(),
            by_fence: BTreeMap::new(),
            gpu_mem: false,
            pairer: alloc::Pairer::default(),
            failures: 0,
            procs: BTreeMap::new(),
            read_procs: true,
            named: BTreeMap::new(),
            memory_samples: 0,
        }
    }

    fn push(&mut self, v: Value) {
        if self.err.is_none()
            && let Err(e) = self.out.push(v)
        {
            self.err = Some(e);
        }
    }

    fn meta(&mut self, what: &str, pid: u64, tid: Option<u64>, name: &str) {
        let mut v = json!({"ph": "M", "name": what, "pid": pid, "args": {"name": name}});
        if let Some(t) = tid {
            v["tid"] = json!(t);
        }
        self.push(v);
    }

    /// The hits counted so far, per `system:event`.
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<&std::io::Error> {
        self.err.as_ref()
    }
}

impl<O: Out> TraceBuilder<O> {
    /// Uses these processes' comm and cgroup for allocation failures instead of reading
    /// /proc (a recording read back, or a test).
    pub fn with_procs(mut self, procs: BTreeMap<u32, ProcInfo>) -> Self {
        self.procs = procs;
        self.read_procs = false;
        self
    }

    fn fence_event(&mut self, e: &Event, name: &str) {
        let (Some(c), Some(s)) = (e.int("context"), e.int("seqno")) else {
            return;
        };
        let key = (c, s);
        match name {
            "dma_fence_wait_start" => {
                if self.waits.len() >= OPEN_MAX {
                    self.waits.clear();
                }
                self.waits.insert((e.tid, key), e.time);
            }
            "dma_fence_wait_end" => {
                if let Some(t0) = self.waits.remove(&(e.tid, key)) {
                    self.push(json!({
                        "ph": "X", "name": WAIT, "cat": "fence",
                        "ts": ts(t0), "dur": ts(e.time - t0),
                        "pid": e.pid, "tid": e.tid,
                        "args": {"context": c, "seqno": s,
                                 "timeline": e.str("timeline").unwrap_or("")},
                    }));
                }
            }
            // A second init of the same (context, seqno) moves the start to it.
            "dma_fence_init" | "dma_fence_emit" => {
                if !self.fences.contains_key(&key) && self.fences.len() >= OPEN_MAX {
                    self.close_oldest_fence();
                }
                let f = self.fences.entry(key).or_default();
                if f.driver.is_empty() {
                    f.driver = e.str("driver").unwrap_or("").to_string();
                    f.timeline = e.str("timeline").unwrap_or("").to_string();
                }
                if name == "dma_fence_init" {
                    f.init = Some(e.time);
                } else {
                    f.emit = Some(e.time);
                    self.emitting.insert(c);
                }
            }
            "dma_fence_signaled" => {
                let f = self.fences.remove(&key).unwrap_or_else(|| Fence {
                    driver: e.str("driver").unwrap_or("").to_string(),
                    timeline: e.str("timeline").unwrap_or("").to_string(),
                    ..Default::default()
                });
                self.fence_slice(key, &f, Some(e.time));
            }
            _ => {}
        }
    }

    /// A fence's slice on its timeline: from its emit (or init) to its signal, open
    /// without one. A fence seen at its signal only has no start: nothing to draw.
    fn fence_slice(&mut self, (c, s): FenceKey, f: &Fence, end: Option<u64>) {
        let Some(begin) = f.emit.or(f.init) else {
            return;
        };
        let label = timeline_label(&f.driver, &f.timeline, c);
        let id = format!("0x{:x}:{:x}", c, s);
        self.push(json!({
            "ph": "b", "name": label, "cat": "fence", "id": id, "ts": ts(begin),
            "pid": FENCE_PID, "tid": 0,
            "args": {"context": c, "seqno": s, "driver": f.driver, "timeline": f.timeline,
                     "emitted": f.emit.is_some()},
        }));
        if let Some(end) = end.filter(|&t| t >= begin) {
            self.push(json!({
                "ph": "e", "name": label, "cat": "fence", "id": id, "ts": ts(end),
                "pid": FENCE_PID, "tid": 0,
            }));
        }
    }

    fn close_oldest_fence(&mut self) {
        let oldest = self
            .fences
            .iter()
            .min_by_key(|(_, f)| f.emit.or(f.init))
            .map(|(k, _)| *k);
        if let Some(k) = oldest
            && let Some(f) = self.fences.remove(&k)
        {
            self.open_fence(k, &f);
        }
    }

    /// An unsignalled fence at the end: on a context whose fences are emitted, one seen at
    /// init alone is no fence of the timeline (drivers that number a fence when they emit
    /// it, virtio-gpu, init every fence with seqno 0); its instants stay.
    fn open_fence(&mut self, key: FenceKey, f: &Fence) {
        if f.emit.is_none() && self.emitting.contains(&key.0) {
            return;
        }
        self.fence_slice(key, f, None);
    }

    fn vblank_event(&mut self, e: &Event) {
        let crtc = e.int("crtc").unwrap_or(-1);
        self.crtcs.insert(crtc);
        let mut a = args(e);
        a.insert("crtc".into(), json!(crtc));
        self.push(json!({
            "ph": "i", "s": "t", "name": VBLANK, "cat": "vblank",
            "ts": ts(e.time), "pid": DISPLAY_PID, "tid": crtc + 1, "args": a,
        }));
    }

    fn sched_event(&mut self, e: &Event, name: &str) {
        let ring = e
            .str("name")
            .or_else(|| e.str("ring"))
            .unwrap_or("scheduler")
            .to_string();
        let n = self.rings.len() as u64 + 1;
        let tid = *self.rings.entry(ring.clone()).or_insert(n);
        self.push(json!({
            "ph": "i", "s": "t", "name": name, "cat": "sched",
            "ts": ts(e.time), "pid": SCHED_PID, "tid": tid, "args": args(e),
        }));
        match (name, e.int("id")) {
            ("drm_sched_job", Some(id)) => {
                if !self.jobs.contains_key(&id) && self.jobs.len() >= OPEN_MAX {
                    self.drop_oldest_job();
                }
                let j = self.jobs.entry(id).or_default();
                j.queued = j.queued.or(Some((e.time, e.pid, e.tid)));
            }
            ("drm_run_job", Some(id)) => {
                if !self.jobs.contains_key(&id) && self.jobs.len() >= OPEN_MAX {
                    self.drop_oldest_job();
                }
                let j = self.jobs.entry(id).or_default();
                if j.run.is_none() {
                    j.run = Some((e.time, tid));
                    j.ring = ring;
                    j.fence = e.int("fence");
                    if let Some(f) = j.fence {
                        self.by_fence.entry(f).or_default().push(id);
                    }
                }
            }
            // The first finish of the job's fence at or after its run (events come in time
            // order): the kernel reuses fence memory.
            ("drm_sched_process_job", _) => {
                if let Some(ids) = e.int("fence").and_then(|f| self.by_fence.remove(&f)) {
                    for id in ids {
                        if let Some(j) = self.jobs.remove(&id) {
                            self.job(id, &j, Some(e.time));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn drop_oldest_job(&mut self) {
        if let Some((id, j)) = self.jobs.pop_first() {
            if let Some(f) = j.fence
                && let Some(v) = self.by_fence.get_mut(&f)
            {
                v.retain(|&x| x != id);
            }
            self.job(id, &j, None);
        }
    }

    /// A scheduler job's flow (queuing thread to ring) and execution slice (see the module
    /// doc). A job seen only in part gets what its events say and nothing more.
    fn job(&mut self, id: i64, j: &Job, done: Option<u64>) {
        let Some((run, ring_tid)) = j.run else {
            return;
        };
        let flow = format!("job:{id}");
        if let Some((queued, pid, tid)) = j.queued.filter(|q| q.0 <= run) {
            self.push(json!({
                "ph": "X", "name": "submit job", "cat": "sched", "ts": ts(queued),
                "dur": TICK_US, "pid": pid, "tid": tid, "args": {"job": id, "ring": j.ring},
            }));
            self.push(json!({
                "ph": "s", "name": "job", "cat": "sched.flow", "id": flow, "ts": ts(queued),
                "pid": pid, "tid": tid,
            }));
            self.push(json!({
                "ph": "X", "name": "run job", "cat": "sched", "ts": ts(run), "dur": TICK_US,
                "pid": SCHED_PID, "tid": ring_tid, "args": {"job": id},
            }));
            self.push(json!({
                "ph": "f", "bp": "e", "name": "job", "cat": "sched.flow", "id": flow,
                "ts": ts(run), "pid": SCHED_PID, "tid": ring_tid,
            }));
        }
        let track = format!("{} jobs", j.ring);
        self.push(json!({
            "ph": "b", "name": track, "cat": "sched.job", "id": flow, "ts": ts(run),
            "pid": SCHED_PID, "tid": 0, "args": {"job": id, "ring": j.ring},
        }));
        if let Some(end) = done.filter(|&t| t >= run) {
            self.push(json!({
                "ph": "e", "name": track, "cat": "sched.job", "id": flow, "ts": ts(end),
                "pid": SCHED_PID, "tid": 0,
            }));
        }
    }

    fn gpu_mem_event(&mut self, e: &Event) {
        self.gpu_mem = true;
        let gpu = e.int("gpu_id").unwrap_or(0);
        let pid = e.int("pid").unwrap_or(0);
        let name = if pid == 0 {
            format!("gpu_mem_total gpu {gpu}")
        } else {
            format!("gpu_mem_total gpu {gpu} pid {pid}")
        };
        self.push(json!({
            "ph": "C", "name": name, "ts": ts(e.time), "pid": GPUMEM_PID,
            "args": {"bytes": e.int("size").unwrap_or(0)},
        }));
    }

    /// A failed allocation: a slice from the ioctl's enter to its exit on the thread's own
    /// track, named after the request and the errno, with the process's comm and cgroup
    /// as args.
    fn alloc_failure(&mut self, f: &alloc::AllocFailure) {
        self.failures += 1;
        let p = match self.procs.get(&f.pid) {
            Some(p) => p.clone(),
            None if self.read_procs => {
                let p = ProcInfo::read(f.pid);
                if self.procs.len() < OPEN_MAX {
                    self.procs.insert(f.pid, p.clone());
                }
                p
            }
            None => ProcInfo::default(),
        };
        self.push(json!({
            "ph": "X", "name": format!("{} {}", f.ioctl, f.errno), "cat": ALLOC_CAT,
            "ts": ts(f.start), "dur": (f.time.saturating_sub(f.start) as f64) / 1000.0,
            "pid": f.pid, "tid": f.tid,
            "args": {
                "ioctl": f.ioctl, "errno": f.errno, "fd": f.fd,
                "request": format!("{:#010x}", f.cmd), "comm": p.comm, "cgroup": p.cgroup,
            },
        }));
    }

    /// What is still open, the track names, and `otherData`; returns the output.
    ///
    /// # Errors
    /// The first I/O error of the output.
    pub fn finish(
        mut self,
        rec: &Recording,
        kernel: &str,
        command: &[String],
    ) -> std::io::Result<O> {
        for f in rec.formats.values() {
            self.counts
                .entry(format!("{}:{}", f.system, f.name))
                .or_insert(0);
        }
        for (k, f) in std::mem::take(&mut self.fences) {
            self.open_fence(k, &f);
        }
        for (id, j) in std::mem::take(&mut self.jobs) {
            self.job(id, &j, None);
        }
        self.meta("process_name", FENCE_PID, None, "GPU fence timelines");
        if !self.crtcs.is_empty() {
            self.meta("process_name", DISPLAY_PID, None, "Display");
            for c in self.crtcs.clone() {
                self.meta(
                    "thread_name",
                    DISPLAY_PID,
                    Some((c + 1) as u64),
                    &format!("CRTC {c}"),
                );
            }
        }
        if !self.rings.is_empty() {
            self.meta("process_name", SCHED_PID, None, "GPU scheduler");
            for (r, t) in self.rings.clone() {
                self.meta("thread_name", SCHED_PID, Some(t), &r);
            }
        }
        if self.gpu_mem {
            self.meta("process_name", GPUMEM_PID, None, "gpu_mem_total");
        }
        for (pid, comm) in std::mem::take(&mut self.named) {
            if !comm.is_empty() {
                self.meta("process_name", u64::from(pid), None, &comm);
            }
        }
        let other = other_data(
            rec,
            &self.counts,
            self.failures,
            self.memory_samples,
            kernel,
            command,
        );
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        self.out.close(other)?;
        Ok(self.out)
    }
}

impl<O: Out> super::stream::Sink for TraceBuilder<O> {
    /// One event: its instant, and what it adds to the fence, vblank, scheduler, gpu_mem
    /// and allocation-failure tracks.
    fn event(&mut self, e: &Event) {
        let full = format!("{}:{}", e.system, e.name);
        self.push(json!({
            "ph": "i", "s": "t", "name": full, "cat": e.system,
            "ts": ts(e.time), "pid": e.pid, "tid": e.tid, "args": args(e),
        }));
        *self.counts.entry(full).or_default() += 1;
        match (e.system.as_str(), e.name.as_str()) {
            ("dma_fence", name) => self.fence_event(e, name),
            ("drm", "drm_vblank_event") => self.vblank_event(e),
            ("gpu_scheduler", name) => self.sched_event(e, name),
            ("gpu_mem", "gpu_mem_total") => self.gpu_mem_event(e),
            (alloc::SYSTEM, _) => {
                if let Some(f) = self.pairer.push(e) {
                    self.alloc_failure(&f);
                }
            }
            _ => {}
        }
    }

    /// A sample drmtool took itself, as a counter of its process.
    fn memory(&mut self, m: &MemorySample) {
        let mut a = Map::new();
        if let Some(v) = m.fdinfo {
            a.insert("fdinfo".into(), json!(v));
        }
        if let Some(v) = m.maps {
            a.insert("maps".into(), json!(v));
        }
        if a.is_empty() {
            return;
        }
        self.memory_samples += 1;
        if self.named.len() < OPEN_MAX {
            self.named.insert(m.pid, m.comm.clone());
        }
        self.push(
            json!({"ph": "C", "name": "GPU memory (bytes)", "ts": ts(m.time),
                         "pid": m.pid, "args": a}),
        );
    }
}

/// The `otherData` block.
fn other_data(
    rec: &Recording,
    counts: &BTreeMap<String, u64>,
    failures: u64,
    memory_samples: u64,
    kernel: &str,
    command: &[String],
) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "tool": "drmtool trace",
        "version": env!("CARGO_PKG_VERSION"),
        "kernel": kernel,
        "clock": "CLOCK_MONOTONIC",
        "backend": rec.backend.name(),
        "backend_note": rec.backend_note,
        "start_ns": rec.start,
        "end_ns": rec.end,
        "cpus": rec.cpus,
        "buffer_kib": rec.buffer_kib,
        "events": counts,
        "fired": rec.formats.iter().map(|(id, f)| {
            (format!("{}:{}", f.system, f.name), rec.fired.get(id).copied())
        }).collect::<BTreeMap<_, _>>(),
        "ring": rec.ring.map(|r| json!({
            "read": r.read, "entries": r.entries, "overrun": r.overrun, "dropped": r.dropped,
        })),
        "lost": rec.lost,
        "corrupt_bytes": rec.corrupt_bytes,
        "undecoded": rec.undecoded,
        "filtered": rec.filtered,
        "filter_refused": rec.filter_refused,
        "alloc_failures": failures,
        "absent": rec.absent.iter().map(|c| c.name()).collect::<Vec<_>>(),
        "memory_samples": memory_samples,
        "spill_bytes": rec.spill_bytes,
        "command": command,
        "exit_status": rec.exit.and_then(|s| s.code()),
    })
}

/// Builds the whole trace of a recording held in memory (its `events` and `memory`), as
/// `trace record` would have written it.
pub fn to_json(rec: &Recording, kernel: &str, command: &[String]) -> Value {
    let mut b = TraceBuilder::new(InMemory::default(), &rec.formats).with_procs(rec.procs.clone());
    for e in &rec.events {
        super::stream::Sink::event(&mut b, e);
    }
    for m in &rec.memory {
        super::stream::Sink::memory(&mut b, m);
    }
    // InMemory never fails.
    let out = b.finish(rec, kernel, command).unwrap_or_default();
    json!({
        "traceEvents": out.events,
        "displayTimeUnit": "ns",
        "otherData": out.other,
    })
}

/// A fence timeline's track name: `driver timeline (context N)`; the context keeps two
/// unbound timelines apart.
pub fn timeline_label(driver: &str, timeline: &str, context: i64) -> String {
    let d = if driver.is_empty() { "?" } else { driver };
    let t = if timeline.is_empty() { "?" } else { timeline };
    format!("{d} {t} (context {context})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::Value as V;

    fn ev(name: &str, time: u64, tid: u32, fields: &[(&str, V)]) -> Event {
        let system = if name.starts_with("dma_fence") {
            "dma_fence"
        } else {
            "drm"
        };
        Event::for_test(system, name, time, tid, fields)
    }

    /// A dma_fence event of `driver`'s `timeline` on `context`, on thread 101.
    fn fence_on(
        driver: &str,
        timeline: &str,
        context: i64,
        name: &str,
        time: u64,
        seqno: i64,
    ) -> Event {
        ev(
            name,
            time,
            101,
            &[
                ("driver", V::Str(driver.into())),
                ("timeline", V::Str(timeline.into())),
                ("context", V::Int(context)),
                ("seqno", V::Int(seqno)),
            ],
        )
    }

    fn fence(name: &str, time: u64, seqno: i64) -> Event {
        fence_on("sw_sync", "t\"1\n", 7, name, time, seqno)
    }

    #[test]
    fn fences_waits_and_vblanks_become_tracks() {
        let rec = Recording {
            events: vec![
                fence("dma_fence_init", 1000, 1),
                fence("dma_fence_init", 1500, 2),
                fence("dma_fence_wait_start", 2000, 1),
                fence("dma_fence_signaled", 5000, 1),
                fence("dma_fence_wait_end", 5200, 1),
                ev(
                    "drm_vblank_event",
                    6000,
                    0,
                    &[("crtc", V::Int(0)), ("seq", V::Int(9))],
                ),
                ev(
                    "drm_vblank_event",
                    22667,
                    0,
                    &[("crtc", V::Int(0)), ("seq", V::Int(10))],
                ),
            ],
            start: 900,
            end: 30000,
            ..Default::default()
        };
        let v = to_json(&rec, "6.12.0", &["x".into()]);
        let evs = v["traceEvents"].as_array().unwrap();
        let of = |ph: &str| evs.iter().filter(|e| e["ph"] == ph).collect::<Vec<_>>();
        assert_eq!(
            of("i").iter().filter(|e| e["cat"] != "vblank").count(),
            7,
            "every hit"
        );
        let b = of("b");
        assert_eq!(b.len(), 2, "two fences begun");
        assert_eq!(of("e").len(), 1, "one signalled");
        assert_eq!(b[0]["name"], "sw_sync t\"1\n (context 7)");
        assert_eq!(b[0]["ts"], 1.0);
        let x = of("X");
        assert_eq!(
            (x[0]["name"].as_str(), x[0]["dur"].as_f64()),
            (Some(WAIT), Some(3.2))
        );
        assert_eq!(x[0]["tid"], 101);
        let vb: Vec<_> = evs.iter().filter(|e| e["name"] == VBLANK).collect();
        assert_eq!(vb.len(), 2);
        assert_eq!(vb[1]["tid"], 1);
        assert_eq!(v["otherData"]["events"]["dma_fence:dma_fence_init"], 2);
        // Strict JSON: the timeline's quote and newline are escaped, and it reparses.
        let text = serde_json::to_string(&v).unwrap();
        assert!(text.contains(r#"t\"1\n"#));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    /// virtio-gpu's order: every fence inits with seqno 0, is numbered at emit, signals
    /// later. The timeline has the emitted fences only (slices from emit to signal); the
    /// seqno-0 inits stay as instants. A context that never emits keeps its init-only fence.
    #[test]
    fn fences_numbered_at_emit_are_tracked_from_emit() {
        let virtio = |name: &str, time: u64, seqno: i64| {
            fence_on("virtio_gpu", "controlq", 3, name, time, seqno)
        };
        let rec = Recording {
            events: vec![
                virtio("dma_fence_init", 1000, 0),
                virtio("dma_fence_emit", 1100, 41),
                virtio("dma_fence_init", 2000, 0),
                virtio("dma_fence_emit", 2100, 42),
                virtio("dma_fence_signaled", 3000, 41),
                virtio("dma_fence_signaled", 3500, 42),
                fence("dma_fence_init", 4000, 1),
            ],
            start: 900,
            end: 5000,
            ..Default::default()
        };
        let v = to_json(&rec, "6.12.0", &[]);
        let evs = v["traceEvents"].as_array().unwrap();
        let of = |ph: &str| evs.iter().filter(|e| e["ph"] == ph).collect::<Vec<_>>();
        assert_eq!(of("i").len(), 7, "every hit, the seqno-0 inits too");
        let b: Vec<_> = of("b")
            .iter()
            .map(|e| {
                (
                    e["args"]["context"].as_i64(),
                    e["args"]["seqno"].as_i64(),
                    e["ts"].as_f64(),
                )
            })
            .collect();
        assert_eq!(
            b,
            [
                (Some(3), Some(41), Some(1.1)),
                (Some(3), Some(42), Some(2.1)),
                (Some(7), Some(1), Some(4.0))
            ]
        );
        assert_eq!(of("e").len(), 2);
        let s = super::super::summary::summarize(&v).unwrap();
        let row = |c: i64| {
            s.timelines
                .iter()
                .find(|t| t.track.ends_with(&format!("(context {c})")))
                .unwrap()
                .clone()
        };
        assert_eq!((row(3).fences, row(3).unsignaled), (2, 0));
        assert_eq!((row(7).fences, row(7).unsignaled), (1, 1));
    }
}
