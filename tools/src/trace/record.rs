//! `drmtool trace record`: finds the tracepoints in tracefs, opens them on every online CPU
//! through perf, runs the command or waits out the duration, and collects what the kernel
//! wrote, with per-client GPU memory sampled alongside.

use super::alloc;
use super::format::{self, EventFormat, Value};
use super::perf::{self, Record, Ring};
use super::{Category, TraceError};
use crate::sys_call;
use ioctl_sys::perf_event as pe;
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where tracefs is looked for, in order.
pub const TRACEFS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracepoints of a category: `(system, events)` pairs, `None` for "every event of
/// the system".
fn wanted(c: Category) -> &'static [(&'static str, Option<&'static [&'static str]>)] {
    match c {
        Category::Fence => &[("dma_fence", None)],
        Category::Sched => &[("gpu_scheduler", None)],
        Category::Vblank => &[(
            "drm",
            Some(&[
                "drm_vblank_event",
                "drm_vblank_event_queued",
                "drm_vblank_event_delivered",
            ]),
        )],
        Category::Drm => &[("drm", None)],
        Category::Gpumem => &[("gpu_mem", Some(&["gpu_mem_total"]))],
        Category::Alloc => &[(alloc::SYSTEM, Some(&[alloc::ENTER, alloc::EXIT]))],
        Category::Evict => &[
            ("amdgpu", Some(&["amdgpu_bo_move"])),
            ("xe", Some(&["xe_bo_move"])),
            (
                "i915",
                Some(&["i915_gem_evict", "i915_gem_evict_node", "i915_gem_evict_vm"]),
            ),
        ],
    }
}

/// The kernel filter a tracepoint is opened with, if any.
fn filter_of(f: &EventFormat) -> Option<&'static std::ffi::CStr> {
    match (f.system.as_str(), f.name.as_str()) {
        (alloc::SYSTEM, alloc::ENTER) => Some(alloc::ENTER_FILTER),
        (alloc::SYSTEM, alloc::EXIT) => Some(alloc::EXIT_FILTER),
        _ => None,
    }
}

/// The tracefs mount, if one is there (`events/` readable).
pub fn tracefs() -> Option<PathBuf> {
    TRACEFS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

pub use crate::sysfs::read_bounded_bytes;

/// Reads at most `max` bytes of `path` as text (invalid UTF-8 replaced).
fn read_bounded(path: &Path, max: usize) -> std::io::Result<String> {
    Ok(String::from_utf8_lossy(&read_bounded_bytes(path, max)?).into_owned())
}

/// The event names under `events/<system>/`, sorted; empty when there is no such system.
fn system_events(root: &Path, system: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("events").join(system))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("format").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

/// What the categories resolve to on this kernel.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Every tracepoint to open, by id.
    pub formats: BTreeMap<u32, EventFormat>,
    /// Categories with no tracepoint on this kernel.
    pub absent: Vec<Category>,
}

/// Reads the formats of the categories' tracepoints under tracefs `root`.
///
/// # Errors
/// [`TraceError::Permission`] when a format file cannot be read for lack of privilege;
/// [`TraceError::NoTracepoints`] when none of the categories has a tracepoint here.
pub fn resolve(root: &Path, categories: &[Category]) -> Result<Resolved, TraceError> {
    let mut r = Resolved::default();
    for &c in categories {
        let mut found = false;
        for &(system, names) in wanted(c) {
            let have = system_events(root, system);
            let pick: Vec<&String> = match names {
                None => have.iter().collect(),
                Some(n) => have.iter().filter(|h| n.contains(&h.as_str())).collect(),
            };
            for name in pick {
                let path = root.join("events").join(system).join(name).join("format");
                let text = match read_bounded(&path, format::MAX_FORMAT) {
                    Ok(t) => t,
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        return Err(TraceError::Permission {
                            what: path.display().to_string(),
                            errno: e.raw_os_error().unwrap_or(0),
                        });
                    }
                    Err(_) => continue,
                };
                if let Ok(f) = format::parse(system, &text) {
                    r.formats.insert(f.id, f);
                    found = true;
                }
            }
        }
        // The syscall pair is of use only whole.
        if c == Category::Alloc {
            let both = [alloc::ENTER, alloc::EXIT].iter().all(|n| {
                r.formats
                    .values()
                    .any(|f| f.system == alloc::SYSTEM && f.name == *n)
            });
            if !both {
                r.formats.retain(|_, f| f.system != alloc::SYSTEM);
                found = false;
            }
        }
        if !found {
            r.absent.push(c);
        }
    }
    if r.formats.is_empty() {
        return Err(TraceError::NoTracepoints {
            asked: categories.to_vec(),
            present: present_systems(root),
        });
    }
    Ok(r)
}

/// The GPU-related event systems this tracefs has (for the error that lists what is there).
fn present_systems(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("events"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            [
                "dma_fence",
                "drm",
                "gpu",
                "sched",
                "i915",
                "amdgpu",
                "virtio",
                "v3d",
                "msm",
            ]
            .iter()
            .any(|k| n.contains(k))
        })
        .collect();
    v.sort();
    v
}

/// The online CPUs (`/sys/devices/system/cpu/online`: `0-3,6`).
pub fn online_cpus() -> Vec<u32> {
    let text = read_bounded(Path::new("/sys/devices/system/cpu/online"), 4096).unwrap_or_default();
    parse_cpu_list(&text)
}

/// Parses a kernel CPU list (`0-3,6`), at most 4096 CPUs; bad parts are skipped.
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            for c in a..=b.min(a.saturating_add(4095)) {
                if v.len() < 4096 {
                    v.push(c);
                }
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// One decoded tracepoint hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `dma_fence`, `drm`, ...
    pub system: String,
    /// The tracepoint.
    pub name: String,
    /// `CLOCK_MONOTONIC` ns.
    pub time: u64,
    /// The process running when it fired.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// The CPU.
    pub cpu: u32,
    /// Every non-common field, decoded by the kernel's own format.
    pub fields: BTreeMap<String, Value>,
}

impl Event {
    /// An event of process 100 on CPU 0 (unit tests).
    #[cfg(test)]
    pub(crate) fn for_test(
        system: &str,
        name: &str,
        time: u64,
        tid: u32,
        fields: &[(&str, Value)],
    ) -> Event {
        Event {
            system: system.into(),
            name: name.into(),
            time,
            pid: 100,
            tid,
            cpu: 0,
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    /// Integer field `name`.
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.fields.get(name)? {
            Value::Int(v) => Some(*v),
            Value::Str(_) => None,
        }
    }

    /// String field `name`.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.fields.get(name)? {
            Value::Str(s) => Some(s),
            Value::Int(_) => None,
        }
    }
}

/// Decodes a sample by the format its `common_type` names; `None` for an id not opened.
pub fn decode(formats: &BTreeMap<u32, EventFormat>, s: &perf::Sample) -> Option<Event> {
    let ty = u16::from_ne_bytes(s.raw.get(0..2)?.try_into().ok()?);
    let f = formats.get(&u32::from(ty))?;
    let fields = f
        .fields
        .iter()
        .filter(|x| !x.name.starts_with("common_"))
        .filter_map(|x| Some((x.name.clone(), f.decode(&s.raw, x)?)))
        .collect();
    Some(Event {
        system: f.system.clone(),
        name: f.name.clone(),
        time: s.time,
        pid: s.pid,
        tid: s.tid,
        cpu: s.cpu,
        fields,
    })
}

/// One sample of a process's GPU memory (the buffers model, during the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySample {
    /// `CLOCK_MONOTONIC` ns.
    pub time: u64,
    /// The process.
    pub pid: u32,
    /// Its comm, escaped.
    pub comm: String,
    /// Sum of its clients' fdinfo totals (source: fdinfo), when the driver prints them.
    pub fdinfo: Option<u64>,
    /// Bytes of DRM buffers it maps (source: maps).
    pub maps: Option<u64>,
}

/// What a recording collected.
#[derive(Debug, Default)]
pub struct Recording {
    /// Decoded events, in time order.
    pub events: Vec<Event>,
    /// The formats of what was opened.
    pub formats: BTreeMap<u32, EventFormat>,
    /// Categories with no tracepoint on this kernel.
    pub absent: Vec<Category>,
    /// Samples the kernel dropped (ring full): the larger of what `PERF_RECORD_LOST` records
    /// said and the tracepoints' own hit counts less the samples kept.
    pub lost: u64,
    /// Hits per tracepoint id while enabled (the events' counters).
    pub fired: BTreeMap<u32, u64>,
    /// Ring bytes that did not parse as records (dropped, counted).
    pub corrupt_bytes: u64,
    /// Samples whose `common_type` named no opened tracepoint.
    pub undecoded: u64,
    /// Samples dropped by the recording's own filter ([`alloc::keep`]: where the kernel
    /// refused its filter, or passed what it does not test).
    pub filtered: u64,
    /// Tracepoints whose kernel filter this kernel refused.
    pub filter_refused: Vec<String>,
    /// The processes of allocation failures, read when their failing exit was drained.
    pub procs: BTreeMap<u32, ProcInfo>,
    /// DRM ioctls that failed with ENOMEM or ENOSPC ([`alloc::pair`]), in time order.
    pub alloc_failures: Vec<alloc::AllocFailure>,
    /// Per-process GPU memory over time.
    pub memory: Vec<MemorySample>,
    /// `CLOCK_MONOTONIC` ns at start and end.
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// The traced command's exit status (`None` without a command).
    pub exit: Option<std::process::ExitStatus>,
    /// CPUs traced.
    pub cpus: usize,
}

/// How to record. The recording ends when the command exits, the duration runs out or
/// `stop` is set, whichever comes first: with none of the three it never ends.
#[derive(Debug, Clone)]
pub struct Options {
    /// Event categories.
    pub categories: Vec<Category>,
    /// Whether the categories were asked for by name (then an absent one is an error).
    pub explicit: bool,
    /// Stop after this long (with a command: the command is killed then).
    pub duration: Option<Duration>,
    /// The command to trace (argv); the recording stops when it exits.
    pub command: Vec<std::ffi::OsString>,
    /// Data pages of each CPU's ring (a power of two).
    pub ring_pages: usize,
    /// How often GPU memory is sampled (`None`: never).
    pub memory_interval: Option<Duration>,
    /// Stops the recording when set (by another thread), as the duration running out
    /// would.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// `CLOCK_MONOTONIC` now, in ns.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

/// The perf side of a recording: every event fd and one ring per CPU.
struct Session {
    /// Event fds whose output goes to another fd's ring, with their tracepoint ids.
    fds: Vec<(OwnedFd, u32)>,
    /// Each CPU's first event fd, its ring, its tracepoint id.
    rings: Vec<(OwnedFd, Ring, u32)>,
    /// Tracepoints whose kernel filter this kernel refused (the recording filters them).
    refused: std::collections::BTreeSet<String>,
}

impl Session {
    fn open(
        formats: &BTreeMap<u32, EventFormat>,
        cpus: &[u32],
        pages: usize,
    ) -> Result<Self, TraceError> {
        let page = rustix::param::page_size();
        let wakeup = u32::try_from(page * pages / 4).unwrap_or(u32::MAX);
        let mut s = Session {
            fds: Vec::new(),
            rings: Vec::new(),
            refused: std::collections::BTreeSet::new(),
        };
        for &cpu in cpus {
            let mut leader: Option<usize> = None;
            for (&id, f) in formats {
                let fd = perf::open_tracepoint(id, cpu, wakeup).map_err(|e| TraceError::Open {
                    event: format!("{}:{}", f.system, f.name),
                    cpu,
                    errno: e,
                })?;
                if let Some(filter) = filter_of(f)
                    && sys_call::perf_set_filter(fd.as_fd(), filter).is_err()
                {
                    s.refused.insert(format!("{}:{}", f.system, f.name));
                }
                match leader {
                    None => {
                        let ring = Ring::new(&fd, pages).map_err(|e| TraceError::Ring {
                            cpu,
                            error: e.to_string(),
                        })?;
                        leader = Some(s.rings.len());
                        s.rings.push((fd, ring, id));
                    }
                    Some(l) => {
                        let target = s.rings[l].0.as_fd();
                        sys_call::perf_ioctl(
                            fd.as_fd(),
                            pe::PERF_EVENT_IOC_SET_OUTPUT,
                            target_raw(target),
                        )
                        .map_err(|e| TraceError::Ioctl {
                            ioctl: "PERF_EVENT_IOC_SET_OUTPUT",
                            errno: e,
                        })?;
                        s.fds.push((fd, id));
                    }
                }
            }
        }
        Ok(s)
    }

    fn all(&self) -> impl Iterator<Item = (&OwnedFd, u32)> {
        self.rings
            .iter()
            .map(|(f, _, id)| (f, *id))
            .chain(self.fds.iter().map(|(f, id)| (f, *id)))
    }

    /// How often each tracepoint fired while enabled, from the events' own counters (a
    /// sampling event still counts every hit): the truth the kept samples are checked
    /// against, since a ring that stays full to the end never gets the `PERF_RECORD_LOST`
    /// of its last drops. A counter that cannot be read is left out.
    fn fired(&self) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for (fd, id) in self.all() {
            let mut b = [0u8; 8];
            let mut r = rustix::io::read(fd, &mut b);
            for _ in 0..1000 {
                if r != Err(Errno::INTR) {
                    break;
                }
                r = rustix::io::read(fd, &mut b);
            }
            if r == Ok(8) {
                *m.entry(id).or_default() += u64::from_ne_bytes(b);
            }
        }
        m
    }

    fn set(&self, on: bool) -> Result<(), TraceError> {
        let (req, name) = if on {
            (pe::PERF_EVENT_IOC_ENABLE, "PERF_EVENT_IOC_ENABLE")
        } else {
            (pe::PERF_EVENT_IOC_DISABLE, "PERF_EVENT_IOC_DISABLE")
        };
        for (fd, _) in self.all() {
            sys_call::perf_ioctl(fd.as_fd(), req, 0).map_err(|e| TraceError::Ioctl {
                ioctl: name,
                errno: e,
            })?;
        }
        Ok(())
    }

    /// Drains every ring into `rec`.
    fn drain(&mut self, buf: &mut Vec<u8>, rec: &mut Recording) {
        let mut records = Vec::new();
        for (_, ring, _) in &mut self.rings {
            buf.clear();
            ring.drain(buf);
            records.clear();
            if let Err(c) = perf::parse(buf, &mut records) {
                rec.corrupt_bytes += (buf.len() - c.at) as u64;
            }
            for r in records.drain(..) {
                match r {
                    Record::Sample(s) => match decode(&rec.formats, &s) {
                        Some(e) if alloc::keep(&e) => {
                            if e.system == alloc::SYSTEM && e.name == alloc::EXIT {
                                rec.procs
                                    .entry(e.pid)
                                    .or_insert_with(|| ProcInfo::read(e.pid));
                            }
                            rec.events.push(e);
                        }
                        Some(_) => rec.filtered += 1,
                        None => rec.undecoded += 1,
                    },
                    Record::Lost(n) => rec.lost = rec.lost.saturating_add(n),
                    Record::Other(_) => {}
                }
            }
        }
    }

    /// Waits until a ring passes its watermark or `timeout` passes.
    fn wait(&self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds: Vec<PollFd<'_>> = self
            .rings
            .iter()
            .map(|(f, _, _)| PollFd::new(f, PollFlags::IN))
            .collect();
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EINTR: the caller's loop goes round again against its own deadline.
        let _ = poll(&mut fds, Some(&ts));
    }
}

fn target_raw(fd: std::os::fd::BorrowedFd<'_>) -> libc::c_ulong {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd() as libc::c_ulong
}

/// Samples the buffers model: one entry per process holding GPU memory.
fn sample_memory(out: &mut Vec<MemorySample>) {
    let Ok(r) = crate::scan::scan(&crate::scan::Options::default()) else {
        return;
    };
    let time = monotonic_ns();
    for p in &r.processes {
        out.push(MemorySample {
            time,
            pid: p.pid,
            comm: p.comm.as_ref().map(|c| c.escaped()).unwrap_or_default(),
            fdinfo: p.memory_total.value,
            maps: p.mapped_drm.value,
        });
    }
}

/// Samples GPU memory every `every` on a thread of its own, so that a slow scan (a busy
/// machine, thousands of fds) never delays the ring drains: the schedule is absolute (a scan
/// that overruns its slot starts the next at once, never a burst of catch-ups), and stopping
/// wakes the thread at once. Dropping it stops and joins the thread too, so no error path
/// leaves a sampler running.
struct MemorySampler {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<Vec<MemorySample>>>,
}

impl MemorySampler {
    fn start(every: Duration) -> Result<Self, TraceError> {
        use std::sync::{Arc, Condvar, Mutex, PoisonError};
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("trace-memory".into())
            .spawn(move || {
                let mut out = Vec::new();
                let mut next = Some(Instant::now());
                let (lock, cv) = &*flag;
                loop {
                    sample_memory(&mut out);
                    next = next.and_then(|at| next_slot(at, every, Instant::now()));
                    let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    loop {
                        if *stopped {
                            return out;
                        }
                        stopped = match next {
                            // Beyond the clock's range: no further sample, only the stop.
                            None => cv.wait(stopped).unwrap_or_else(PoisonError::into_inner),
                            Some(at) => {
                                let now = Instant::now();
                                if now >= at {
                                    break;
                                }
                                cv.wait_timeout(stopped, at - now)
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .0
                            }
                        };
                    }
                }
            })
            .map_err(|e| TraceError::Sampler {
                error: e.to_string(),
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    fn signal_stop(&self) {
        let (lock, cv) = &*self.stop;
        *lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        cv.notify_all();
    }

    /// Stops the thread and returns its samples (none if it panicked).
    fn finish(mut self) -> Vec<MemorySample> {
        self.signal_stop();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

/// The slot after `prev`, `every` later but never before `now` (a scan that overran its slot
/// starts the next at once, never a burst of catch-ups); `None` past the clock's range (an
/// interval of centuries asked for), where `Instant + Duration` would panic.
fn next_slot(prev: Instant, every: Duration, now: Instant) -> Option<Instant> {
    prev.checked_add(every).map(|t| t.max(now))
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.signal_stop();
            let _ = t.join();
        }
    }
}

/// Records with `opts`.
///
/// # Errors
/// [`TraceError`]: no tracefs, no permission, no tracepoint, an absent category asked for
/// by name, a perf call refused, a command that could not be started.
pub fn record(opts: &Options) -> Result<Recording, TraceError> {
    let root = tracefs().ok_or(TraceError::NoTracefs)?;
    let resolved = resolve(&root, &opts.categories)?;
    if opts.explicit && !resolved.absent.is_empty() {
        return Err(TraceError::Absent {
            missing: resolved.absent.clone(),
            present: present_systems(&root),
        });
    }
    let cpus = online_cpus();
    if cpus.is_empty() {
        return Err(TraceError::NoCpus);
    }
    let mut session = Session::open(&resolved.formats, &cpus, opts.ring_pages)?;
    let mut rec = Recording {
        formats: resolved.formats,
        absent: resolved.absent,
        cpus: cpus.len(),
        ..Default::default()
    };
    let mut buf = Vec::new();
    session.set(true)?;
    rec.start = monotonic_ns();
    let t0 = Instant::now();
    // A duration past the clock's range (`Instant + Duration` would panic) has no deadline.
    let deadline = opts.duration.and_then(|d| t0.checked_add(d));
    // Started before the command, so that a thread that cannot start leaves nothing to undo
    // but the session; dropped (stopped and joined) on every early return below.
    let sampler = match opts.memory_interval.map(MemorySampler::start).transpose() {
        Ok(s) => s,
        Err(e) => {
            let _ = session.set(false);
            return Err(e);
        }
    };
    let mut child = if opts.command.is_empty() {
        None
    } else {
        let mut c = std::process::Command::new(&opts.command[0]);
        c.args(&opts.command[1..]);
        match c.spawn() {
            Ok(ch) => Some(ch),
            Err(e) => {
                let _ = session.set(false);
                return Err(TraceError::Command {
                    program: opts.command[0].to_string_lossy().into_owned(),
                    error: e.to_string(),
                });
            }
        }
    };
    // While the command runs, ^C and kill go to it (as under time(1)): the trace of
    // what it did up to then is still written.
    let saved = child.as_ref().map(|_| sys_call::ignore_job_signals());
    loop {
        let now = Instant::now();
        if let Some(c) = child.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            rec.exit = Some(st);
            break;
        }
        if deadline.is_some_and(|d| now >= d)
            || opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
        {
            break;
        }
        let mut wait = Duration::from_millis(50);
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        session.wait(wait);
        session.drain(&mut buf, &mut rec);
    }
    if let Some(mut c) = child.take()
        && rec.exit.is_none()
    {
        // The duration ran out first: the command does not outlive its trace.
        let _ = c.kill();
        rec.exit = c.wait().ok();
    }
    if let Some(s) = saved {
        sys_call::restore_job_signals(s);
    }
    if let Some(s) = sampler {
        rec.memory = s.finish();
    }
    let off = session.set(false);
    rec.end = monotonic_ns();
    session.drain(&mut buf, &mut rec);
    off?;
    rec.fired = session.fired();
    let fired: u64 = rec.fired.values().sum();
    let kept = (rec.events.len() as u64)
        .saturating_add(rec.undecoded)
        .saturating_add(rec.filtered);
    if !rec.fired.is_empty() {
        rec.lost = rec.lost.max(fired.saturating_sub(kept));
    }
    // Rings are per CPU: merge into one time order (stable: same-time events keep their
    // CPU order).
    rec.events.sort_by_key(|e| e.time);
    rec.alloc_failures = alloc::pair(&rec.events);
    rec.filter_refused = session.refused.iter().cloned().collect();
    Ok(rec)
}

/// A process as the recording saw it: another user's text, escaped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// `/proc/<pid>/comm`, escaped (`None`: gone before it was read).
    pub comm: Option<String>,
    /// Its cgroup v2 path (`0::` line of `/proc/<pid>/cgroup`), escaped.
    pub cgroup: Option<String>,
}

impl ProcInfo {
    /// Reads `pid`'s comm and cgroup (bounded reads).
    pub fn read(pid: u32) -> ProcInfo {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let esc = |t: &str| crate::Untrusted::new(t.as_bytes()).escaped();
        ProcInfo {
            comm: read_bounded(&dir.join("comm"), 64)
                .ok()
                .map(|c| esc(c.trim_end_matches('\n'))),
            cgroup: read_bounded(&dir.join("cgroup"), 4096)
                .ok()
                .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::")).map(esc)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), [0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("0"), [0]);
        assert_eq!(parse_cpu_list("x,2-1,5"), [5]);
        assert_eq!(parse_cpu_list("").len(), 0);
        assert_eq!(parse_cpu_list("0-4294967295").len(), 4096, "bounded");
    }

    /// The next sampling slot: `every` after the last, never in the past, and none past the
    /// clock's range (where `Instant + Duration` panics: `--memory-interval 1e19`).
    #[test]
    fn sampling_slots_never_overflow_the_clock() {
        let t = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(next_slot(t, s, t), Some(t + s));
        assert_eq!(
            next_slot(t, s, t + 5 * s),
            Some(t + 5 * s),
            "an overrun slot starts now"
        );
        assert_eq!(next_slot(t, Duration::MAX, t), None);
        assert_eq!(next_slot(t, Duration::from_secs_f64(1e19), t), None);
    }

    /// Stopping wakes the sampler out of its wait: with an hour between samples, `finish`
    /// and a drop both return (the channel only guards the test against a hang; no time
    /// is asserted).
    #[test]
    fn the_memory_sampler_stops_when_told() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let s = MemorySampler::start(Duration::from_secs(3600)).unwrap();
            let samples = s.finish();
            drop(MemorySampler::start(Duration::from_secs(3600)).unwrap());
            tx.send(samples.len()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the sampler thread did not stop");
    }
}
