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

use super::record::{Event, Recording};
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

fn meta(out: &mut Vec<Value>, what: &str, pid: u64, tid: Option<u64>, name: &str) {
    let mut v = json!({"ph": "M", "name": what, "pid": pid, "args": {"name": name}});
    if let Some(t) = tid {
        v["tid"] = json!(t);
    }
    out.push(v);
}

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
    signaled: Option<u64>,
    driver: String,
    timeline: String,
}

/// The trace being built from a recording's events, in one pass.
#[derive(Default)]
struct Builder {
    out: Vec<Value>,
    counts: BTreeMap<String, u64>,
    fences: BTreeMap<FenceKey, Fence>,
    waits: BTreeMap<(u32, FenceKey), u64>,
    crtcs: BTreeSet<i64>,
    rings: BTreeMap<String, u64>,
    jobs: BTreeMap<i64, Job>,
    finished: BTreeMap<i64, Vec<u64>>,
}

impl Builder {
    /// One event: its instant, and what it adds to the fence, vblank, scheduler and
    /// gpu_mem tracks.
    fn event(&mut self, e: &Event) {
        let full = format!("{}:{}", e.system, e.name);
        *self.counts.entry(full.clone()).or_default() += 1;
        self.out.push(json!({
            "ph": "i", "s": "t", "name": full, "cat": e.system,
            "ts": ts(e.time), "pid": e.pid, "tid": e.tid, "args": args(e),
        }));
        match (e.system.as_str(), e.name.as_str()) {
            ("dma_fence", name) => self.fence_event(e, name),
            ("drm", "drm_vblank_event") => self.vblank_event(e),
            ("gpu_scheduler", name) => self.sched_event(e, name),
            ("gpu_mem", "gpu_mem_total") => self.gpu_mem_event(e),
            _ => {}
        }
    }

    fn fence_event(&mut self, e: &Event, name: &str) {
        let (Some(c), Some(s)) = (e.int("context"), e.int("seqno")) else {
            return;
        };
        let key = (c, s);
        match name {
            "dma_fence_wait_start" => {
                self.waits.insert((e.tid, key), e.time);
            }
            "dma_fence_wait_end" => {
                if let Some(t0) = self.waits.remove(&(e.tid, key)) {
                    self.out.push(json!({
                        "ph": "X", "name": WAIT, "cat": "fence",
                        "ts": ts(t0), "dur": ts(e.time - t0),
                        "pid": e.pid, "tid": e.tid,
                        "args": {"context": c, "seqno": s,
                                 "timeline": e.str("timeline").unwrap_or("")},
                    }));
                }
            }
            _ => {}
        }
        let f = self.fences.entry(key).or_default();
        if f.driver.is_empty() {
            f.driver = e.str("driver").unwrap_or("").to_string();
            f.timeline = e.str("timeline").unwrap_or("").to_string();
        }
        match name {
            // A second init of the same (context, seqno) (a driver reusing a seqno)
            // moves the start to it; the first signal is kept.
            "dma_fence_init" => f.init = Some(e.time),
            "dma_fence_emit" => f.emit = Some(e.time),
            "dma_fence_signaled" => f.signaled = f.signaled.or(Some(e.time)),
            _ => {}
        }
    }

    fn vblank_event(&mut self, e: &Event) {
        let crtc = e.int("crtc").unwrap_or(-1);
        self.crtcs.insert(crtc);
        let mut a = args(e);
        a.insert("crtc".into(), json!(crtc));
        self.out.push(json!({
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
        self.out.push(json!({
            "ph": "i", "s": "t", "name": name, "cat": "sched",
            "ts": ts(e.time), "pid": SCHED_PID, "tid": tid, "args": args(e),
        }));
        match (name, e.int("id")) {
            ("drm_sched_job", Some(id)) => {
                let j = self.jobs.entry(id).or_default();
                j.queued = j.queued.or(Some((e.time, e.pid, e.tid)));
            }
            ("drm_run_job", Some(id)) => {
                let j = self.jobs.entry(id).or_default();
                if j.run.is_none() {
                    j.run = Some((e.time, tid));
                    j.ring = ring;
                    j.fence = e.int("fence");
                }
            }
            ("drm_sched_process_job", _) => {
                if let Some(f) = e.int("fence") {
                    self.finished.entry(f).or_default().push(e.time);
                }
            }
            _ => {}
        }
    }

    fn gpu_mem_event(&mut self, e: &Event) {
        let gpu = e.int("gpu_id").unwrap_or(0);
        let pid = e.int("pid").unwrap_or(0);
        let name = if pid == 0 {
            format!("gpu_mem_total gpu {gpu}")
        } else {
            format!("gpu_mem_total gpu {gpu} pid {pid}")
        };
        self.out.push(json!({
            "ph": "C", "name": name, "ts": ts(e.time), "pid": GPUMEM_PID,
            "args": {"bytes": e.int("size").unwrap_or(0)},
        }));
    }

    /// Fence timelines, scheduler jobs, and the names of the tracks.
    fn tracks(&mut self) {
        // Fence timelines: one async track per context. On a context whose self.fences are emitted,
        // a (context, seqno) seen at init alone is no fence of the timeline: drivers that number
        // a fence when they emit it (virtio-gpu) init every fence with seqno 0. Its instants stay.
        let emitting: BTreeSet<i64> = self
            .fences
            .iter()
            .filter(|(_, f)| f.emit.is_some())
            .map(|(&(c, _), _)| c)
            .collect();
        let mut contexts: BTreeMap<i64, String> = BTreeMap::new();
        for (&(c, s), f) in &self.fences {
            if f.emit.is_none() && f.signaled.is_none() && emitting.contains(&c) {
                continue;
            }
            let label = contexts
                .entry(c)
                .or_insert_with(|| timeline_label(&f.driver, &f.timeline, c))
                .clone();
            let Some(begin) = f.emit.or(f.init) else {
                continue;
            };
            let id = format!("0x{:x}:{:x}", c, s);
            self.out.push(json!({
                "ph": "b", "name": label, "cat": "fence", "id": id, "ts": ts(begin),
                "pid": FENCE_PID, "tid": 0,
                "args": {"context": c, "seqno": s, "driver": f.driver, "timeline": f.timeline,
                         "emitted": f.emit.is_some()},
            }));
            if let Some(end) = f.signaled.filter(|&t| t >= begin) {
                self.out.push(json!({
                    "ph": "e", "name": label, "cat": "fence", "id": id, "ts": ts(end),
                    "pid": FENCE_PID, "tid": 0,
                }));
            }
        }
        sched_jobs(&mut self.out, &self.jobs, &self.finished);
        meta(
            &mut self.out,
            "process_name",
            FENCE_PID,
            None,
            "GPU fence timelines",
        );
        if !self.crtcs.is_empty() {
            meta(&mut self.out, "process_name", DISPLAY_PID, None, "Display");
            for &c in &self.crtcs {
                meta(
                    &mut self.out,
                    "thread_name",
                    DISPLAY_PID,
                    Some((c + 1) as u64),
                    &format!("CRTC {c}"),
                );
            }
        }
        if !self.rings.is_empty() {
            meta(
                &mut self.out,
                "process_name",
                SCHED_PID,
                None,
                "GPU scheduler",
            );
            for (r, &t) in &self.rings {
                meta(&mut self.out, "thread_name", SCHED_PID, Some(t), r);
            }
        }
        if self.out.iter().any(|v| v["pid"] == GPUMEM_PID) {
            meta(
                &mut self.out,
                "process_name",
                GPUMEM_PID,
                None,
                "gpu_mem_total",
            );
        }
    }

    /// The memory samples drmtool took itself, as counters per process.
    /// Each failed allocation: a slice from the ioctl's enter to its exit on the
    /// thread's own track, named after the request and the errno, with the process's
    /// comm and cgroup (read during the recording) as args.
    fn alloc_failures(&mut self, rec: &Recording) {
        for f in &rec.alloc_failures {
            let p = rec.procs.get(&f.pid).cloned().unwrap_or_default();
            self.out.push(json!({
                "ph": "X", "name": format!("{} {}", f.ioctl, f.errno), "cat": ALLOC_CAT,
                "ts": ts(f.start), "dur": (f.time.saturating_sub(f.start) as f64) / 1000.0,
                "pid": f.pid, "tid": f.tid,
                "args": {
                    "ioctl": f.ioctl, "errno": f.errno, "fd": f.fd,
                    "request": format!("{:#010x}", f.cmd), "comm": p.comm, "cgroup": p.cgroup,
                },
            }));
        }
    }

    fn memory(&mut self, rec: &Recording) {
        let mut named = BTreeMap::new();
        for m in &rec.memory {
            let mut a = Map::new();
            if let Some(v) = m.fdinfo {
                a.insert("fdinfo".into(), json!(v));
            }
            if let Some(v) = m.maps {
                a.insert("maps".into(), json!(v));
            }
            if a.is_empty() {
                continue;
            }
            named.insert(m.pid, m.comm.clone());
            self.out.push(
                json!({"ph": "C", "name": "GPU memory (bytes)", "ts": ts(m.time),
                            "pid": m.pid, "args": a}),
            );
        }
        for (pid, comm) in named {
            if !comm.is_empty() {
                meta(&mut self.out, "process_name", u64::from(pid), None, &comm);
            }
        }
    }
}

/// Builds the trace.
pub fn to_json(rec: &Recording, kernel: &str, command: &[String]) -> Value {
    let mut b = Builder {
        out: Vec::with_capacity(rec.events.len() * 2 + 16),
        counts: rec
            .formats
            .values()
            .map(|f| (format!("{}:{}", f.system, f.name), 0))
            .collect(),
        ..Default::default()
    };
    for e in &rec.events {
        b.event(e);
    }
    b.tracks();
    b.memory(rec);
    b.alloc_failures(rec);
    let Builder { out, counts, .. } = b;
    json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {
            "schema_version": SCHEMA_VERSION,
            "tool": "drmtool trace",
            "version": env!("CARGO_PKG_VERSION"),
            "kernel": kernel,
            "clock": "CLOCK_MONOTONIC",
            "start_ns": rec.start,
            "end_ns": rec.end,
            "cpus": rec.cpus,
            "events": counts,
            "fired": rec.formats.iter().map(|(id, f)| {
                (format!("{}:{}", f.system, f.name), rec.fired.get(id).copied())
            }).collect::<BTreeMap<_, _>>(),
            "lost": rec.lost,
            "corrupt_bytes": rec.corrupt_bytes,
            "undecoded": rec.undecoded,
            "filtered": rec.filtered,
            "filter_refused": rec.filter_refused,
            "alloc_failures": rec.alloc_failures.len(),
            "absent": rec.absent.iter().map(|c| c.name()).collect::<Vec<_>>(),
            "memory_samples": rec.memory.len(),
            "command": command,
            "exit_status": rec.exit.and_then(|s| s.code()),
        },
    })
}

/// The scheduler jobs' flows (queuing thread to ring) and execution slices (see the module
/// doc). A job seen only in part (the recording began or ended in between) gets what its
/// events say and nothing more.
fn sched_jobs(out: &mut Vec<Value>, jobs: &BTreeMap<i64, Job>, finished: &BTreeMap<i64, Vec<u64>>) {
    for (id, j) in jobs {
        let Some((run, ring_tid)) = j.run else {
            continue;
        };
        let flow = format!("job:{id}");
        if let Some((queued, pid, tid)) = j.queued.filter(|q| q.0 <= run) {
            out.push(json!({
                "ph": "X", "name": "submit job", "cat": "sched", "ts": ts(queued),
                "dur": TICK_US, "pid": pid, "tid": tid, "args": {"job": id, "ring": j.ring},
            }));
            out.push(json!({
                "ph": "s", "name": "job", "cat": "sched.flow", "id": flow, "ts": ts(queued),
                "pid": pid, "tid": tid,
            }));
            out.push(json!({
                "ph": "X", "name": "run job", "cat": "sched", "ts": ts(run), "dur": TICK_US,
                "pid": SCHED_PID, "tid": ring_tid, "args": {"job": id},
            }));
            out.push(json!({
                "ph": "f", "bp": "e", "name": "job", "cat": "sched.flow", "id": flow,
                "ts": ts(run), "pid": SCHED_PID, "tid": ring_tid,
            }));
        }
        let done = j
            .fence
            .and_then(|f| finished.get(&f))
            .and_then(|times| times.iter().copied().filter(|&t| t >= run).min());
        let track = format!("{} jobs", j.ring);
        out.push(json!({
            "ph": "b", "name": track, "cat": "sched.job", "id": flow, "ts": ts(run),
            "pid": SCHED_PID, "tid": 0, "args": {"job": id, "ring": j.ring},
        }));
        if let Some(end) = done {
            out.push(json!({
                "ph": "e", "name": track, "cat": "sched.job", "id": flow, "ts": ts(end),
                "pid": SCHED_PID, "tid": 0,
            }));
        }
    }
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
