//! `drmtool trace record`: finds the tracepoints in tracefs, opens them on every online CPU
//! through perf, runs the command or waits out the duration, and collects what the kernel
//! wrote, with per-client GPU memory sampled alongside.

use super::alloc;
use super::format::{self, EventFormat, Value};
use super::perf;
use super::{Category, TraceError};
use crate::sys_call;
use std::collections::BTreeMap;
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

/// Decodes a tracepoint record by the format its `common_type` names; `None` for an id
/// not opened.
pub fn decode_raw(
    formats: &BTreeMap<u32, EventFormat>,
    raw: &[u8],
    time: u64,
    pid: u32,
    tid: u32,
    cpu: u32,
) -> Option<Event> {
    let ty = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    let f = formats.get(&u32::from(ty))?;
    let fields = f
        .fields
        .iter()
        .filter(|x| !x.name.starts_with("common_"))
        .filter_map(|x| Some((x.name.clone(), f.decode(raw, x)?)))
        .collect();
    Some(Event {
        system: f.system.clone(),
        name: f.name.clone(),
        time,
        pid,
        tid,
        cpu,
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

/// Which way the tracepoints were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Backend {
    /// ftrace where the kernel gives drmtool an instance of its own, else perf.
    #[default]
    Auto,
    /// ftrace's per-CPU rings through a tracefs instance ([`super::ftrace`]), as trace-cmd.
    Ftrace,
    /// perf_event_open per tracepoint and CPU ([`super::perf`]).
    Perf,
}

impl Backend {
    /// Its name, as `--backend` and the trace's `backend` say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Ftrace => "ftrace",
            Self::Perf => "perf",
        }
    }
}

/// What a recording collected.
#[derive(Debug, Default)]
pub struct Recording {
    /// Decoded events, in time order: filled by [`record`] only ([`record_into`] hands
    /// them to its sink).
    pub events: Vec<Event>,
    /// The formats of what was opened.
    pub formats: BTreeMap<u32, EventFormat>,
    /// Categories with no tracepoint on this kernel.
    pub absent: Vec<Category>,
    /// The way the tracepoints were read ([`Backend::Ftrace`] or [`Backend::Perf`]).
    pub backend: Backend,
    /// Why perf was used where ftrace was not asked against (empty otherwise).
    pub backend_note: String,
    /// The ring per CPU, KiB.
    pub buffer_kib: usize,
    /// Events the kernel could not keep (rings full). perf: the larger of what
    /// `PERF_RECORD_LOST` records said and the tracepoints' own hit counts less the samples
    /// kept; ftrace: the rings' overruns and drops (their `stats`), and what was left unread.
    pub lost: u64,
    /// Hits per tracepoint id while enabled (perf: the events' counters; ftrace has none).
    pub fired: BTreeMap<u32, u64>,
    /// The ftrace rings' own counts, summed over CPUs (ftrace only).
    pub ring: Option<super::ftrace::RingStats>,
    /// Ring bytes that did not parse as records (dropped, counted).
    pub corrupt_bytes: u64,
    /// Records whose `common_type` named no opened tracepoint.
    pub undecoded: u64,
    /// Records dropped by the recording's own filter ([`alloc::keep`]: where the kernel
    /// refused its filter, or passed what it does not test).
    pub filtered: u64,
    /// Tracepoints whose kernel filter this kernel refused.
    pub filter_refused: Vec<String>,
    /// The processes of allocation failures (read back or set by a caller; a live
    /// recording reads them as its failures are written).
    pub procs: BTreeMap<u32, ProcInfo>,
    /// Per-process GPU memory over time: filled by [`record`] only.
    pub memory: Vec<MemorySample>,
    /// Events handed on (kept).
    pub kept: u64,
    /// Memory samples taken.
    pub memory_samples: u64,
    /// Bytes of raw ring data that went through the spill file.
    pub spill_bytes: u64,
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
    /// The ring per CPU, KiB (perf's is rounded up to a power of two pages).
    pub buffer_kib: usize,
    /// How often GPU memory is sampled (`None`: never).
    pub memory_interval: Option<Duration>,
    /// Stops the recording when set (by another thread, a signal handler), as the
    /// duration running out would.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Which way to read the tracepoints.
    pub backend: Backend,
    /// Where the spill file goes (see [`super::stream`]; the system's temporary directory
    /// when `None`): the output's directory, so that a long recording fills the disk the
    /// user chose, never memory.
    pub spill_dir: Option<PathBuf>,
    /// Why perf is used under [`Backend::Auto`] (set by the recording itself).
    pub perf_because: Option<String>,
}

impl Options {
    /// Defaults: every category, 512 KiB rings, no command, no duration, memory every
    /// 100 ms, ftrace where it works.
    pub fn new(categories: Vec<Category>) -> Options {
        Options {
            categories,
            explicit: false,
            duration: None,
            command: Vec::new(),
            buffer_kib: DEFAULT_BUFFER_KIB,
            memory_interval: Some(Duration::from_millis(100)),
            stop: None,
            backend: Backend::Auto,
            spill_dir: None,
            perf_because: None,
        }
    }
}

/// The ring per CPU by default, KiB (`--buffer-kib`): trace-cmd's own default is the
/// kernel's (1,410 KiB on 6.x); 512 KiB per CPU holds about 10,000 fence events, and the
/// rings are drained every 50 ms whatever the decoding costs.
pub const DEFAULT_BUFFER_KIB: usize = 512;

/// `CLOCK_MONOTONIC` now, in ns.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

mod sampler;
use sampler::MemorySampler;

/// The rings being read.
enum Source {
    Ftrace(super::ftrace::Instance),
    Perf(perf::Session),
}

impl Source {
    fn set(&self, on: bool) -> Result<(), TraceError> {
        match self {
            Source::Ftrace(i) => i.set(on),
            Source::Perf(s) => s.set(on),
        }
    }

    fn wait(&self, timeout: Duration) {
        match self {
            Source::Ftrace(i) => i.wait(timeout),
            Source::Perf(s) => s.wait(timeout),
        }
    }

    /// One round: a mark, then what every ring holds, to the spill.
    fn drain(&mut self, buf: &mut Vec<u8>, spill: &super::stream::Spill) -> Result<(), TraceError> {
        spill.mark(monotonic_ns());
        match self {
            Source::Perf(s) => s.drain(buf, spill),
            Source::Ftrace(i) => {
                buf.resize(i.layout.page_size, 0);
                let cpus: Vec<u32> = i.cpus().map(|(c, _)| c).collect();
                for (idx, cpu) in cpus.into_iter().enumerate() {
                    // A bound per round, so that one busy CPU cannot starve the others.
                    for _ in 0..4096 {
                        let n = i.read_page(idx, buf).map_err(|errno| TraceError::Tracefs {
                            what: format!("instances/{}/per_cpu/cpu{cpu}/trace_pipe_raw", i.name()),
                            errno,
                        })?;
                        if n == 0 {
                            break;
                        }
                        spill.page(cpu, &buf[..n]);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether this process may record through the backend asked for (see
/// [`super::privilege`]); under [`Backend::Auto`] without the rights of a tracefs instance
/// but with perf's, `Some(why)`: perf is used instead.
///
/// # Errors
/// [`TraceError::Privilege`] naming what is missing, for both ways under `Auto`.
fn privileges(root: &Path, backend: Backend) -> Result<Option<String>, TraceError> {
    use super::privilege::{Backend as Way, check};
    let ftrace = match backend {
        Backend::Perf => None,
        _ => Some(check(root, Way::Instance)),
    };
    match (backend, ftrace) {
        (_, Some(Ok(()))) => Ok(None),
        (Backend::Ftrace, Some(Err(e))) => Err(TraceError::Privilege {
            ftrace: Some(e.to_string()),
            perf: None,
        }),
        (Backend::Perf, _) => match check(root, Way::Perf) {
            Ok(()) => Ok(None),
            Err(e) => Err(TraceError::Privilege {
                ftrace: None,
                perf: Some(e.to_string()),
            }),
        },
        (_, ftrace) => {
            let ftrace = ftrace.and_then(Result::err).map(|e| e.to_string());
            match check(root, Way::Perf) {
                Ok(()) => Ok(Some(ftrace.unwrap_or_default())),
                Err(e) => Err(TraceError::Privilege {
                    ftrace,
                    perf: Some(e.to_string()),
                }),
            }
        }
    }
}

/// Opens the rings the options ask for: ftrace's, else (where the kernel cannot give an
/// instance, and perf was not ruled out) perf's, saying why.
fn open_source(
    opts: &Options,
    root: &Path,
    formats: &BTreeMap<u32, EventFormat>,
    cpus: &[u32],
) -> Result<(Source, String), TraceError> {
    use super::ftrace::{Instance, Unavailable};
    let perf = || {
        let page = rustix::param::page_size();
        let pages = (opts.buffer_kib * 1024).div_ceil(page).next_power_of_two();
        perf::Session::open(formats, cpus, pages).map(Source::Perf)
    };
    if opts.backend == Backend::Perf {
        return Ok((perf()?, opts.perf_because.clone().unwrap_or_default()));
    }
    match Instance::create(root, formats, cpus, opts.buffer_kib) {
        Ok(i) => Ok((Source::Ftrace(i), String::new())),
        Err(Unavailable::Unsupported(why)) if opts.backend == Backend::Auto => Ok((perf()?, why)),
        Err(Unavailable::Unsupported(why)) => Err(TraceError::NoInstance { why }),
        Err(Unavailable::Failed(e)) => Err(e),
    }
}

/// Records with `opts`, keeping every event and memory sample in the returned
/// [`Recording`] (for a bounded recording; a long one goes through [`record_into`]).
///
/// # Errors
/// As [`record_into`].
pub fn record(opts: &Options) -> Result<Recording, TraceError> {
    let mut c = super::stream::Collect::default();
    let mut rec = record_into(opts, &mut c)?;
    rec.events = c.events;
    rec.memory = c.memory;
    Ok(rec)
}

/// Records with `opts`, handing every event (in time order) and memory sample to `sink` as
/// they are decoded, on a thread of its own (see [`super::stream`]); returns the
/// recording's counts.
///
/// # Errors
/// [`TraceError`]: no tracefs, no permission, no tracepoint, an absent category asked for
/// by name, a tracefs write or perf call refused, no spill file, a command that could not
/// be started.
pub fn record_into(
    opts: &Options,
    sink: &mut (dyn super::stream::Sink + Send),
) -> Result<Recording, TraceError> {
    let root = tracefs().ok_or(TraceError::NoTracefs)?;
    let mut opts = std::borrow::Cow::Borrowed(opts);
    if let Some(perf_instead) = privileges(&root, opts.backend)? {
        let o = opts.to_mut();
        o.backend = Backend::Perf;
        o.perf_because = Some(perf_instead);
    }
    let opts = opts.as_ref();
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
    let (mut source, note) = open_source(opts, &root, &resolved.formats, &cpus)?;
    let dir = opts.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
    let spill = super::stream::Spill::new(&dir).map_err(|e| TraceError::Spill {
        dir: dir.display().to_string(),
        error: e.to_string(),
    })?;
    let mut rec = Recording {
        formats: resolved.formats,
        absent: resolved.absent,
        cpus: cpus.len(),
        backend_note: note,
        buffer_kib: opts.buffer_kib,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (layout, tgids) = match &source {
        Source::Ftrace(i) => (i.layout, Some(super::ftrace::Tgids::new(&root))),
        Source::Perf(_) => (super::ring::PageLayout::NATIVE_64, None),
    };
    let formats = rec.formats.clone();
    let (ran, decoded) = std::thread::scope(|s| {
        let (spill_at, formats_at) = (&spill, &formats);
        let decoder = std::thread::Builder::new()
            .name("trace-decode".into())
            .spawn_scoped(s, move || {
                let mut d = super::stream::Decoding {
                    formats: formats_at,
                    layout,
                    tgids,
                    // An allocation failure's process is read from /proc when the failure
                    // is decoded: decode at once while it may still run.
                    hold: if opts.categories.contains(&Category::Alloc) {
                        0
                    } else {
                        super::stream::HOLD
                    },
                };
                super::stream::decode(spill_at, &mut d, &rx, sink)
            });
        let ran = match &decoder {
            Ok(_) => run(opts, &mut source, &spill, tx, &mut rec),
            Err(e) => Err(TraceError::Sampler {
                error: e.to_string(),
            }),
        };
        spill.finish();
        (ran, decoder.ok().and_then(|d| d.join().ok()))
    });
    ran?;
    let d = decoded.unwrap_or_default();
    if let Some(kind) = spill.failed() {
        return Err(TraceError::Spill {
            dir: dir.display().to_string(),
            error: std::io::Error::from(kind).to_string(),
        });
    }
    rec.kept = d.events;
    rec.undecoded = d.undecoded;
    rec.filtered = d.filtered;
    rec.corrupt_bytes = d.corrupt_bytes;
    rec.spill_bytes = d.spill_bytes;
    match &source {
        Source::Ftrace(i) => {
            rec.backend = Backend::Ftrace;
            let st = i.stats();
            rec.lost = st.lost().saturating_add(st.entries).max(d.lost);
            rec.ring = Some(st);
            rec.filter_refused = i.refused.clone();
        }
        Source::Perf(p) => {
            rec.backend = Backend::Perf;
            rec.fired = p.fired();
            let fired: u64 = rec.fired.values().sum();
            let kept = d
                .events
                .saturating_add(d.undecoded)
                .saturating_add(d.filtered);
            rec.lost = d.lost;
            if !rec.fired.is_empty() {
                rec.lost = rec.lost.max(fired.saturating_sub(kept));
            }
            rec.filter_refused = p.refused();
        }
    }
    Ok(rec)
}

/// The recording proper: tracing on, the command started, the rings drained each round
/// until the command exits, the duration runs out or `stop` is set; then tracing off and a
/// last drain. Fills the start, end, exit status and memory sample count of `rec`.
fn run(
    opts: &Options,
    source: &mut Source,
    spill: &super::stream::Spill,
    memory: std::sync::mpsc::Sender<MemorySample>,
    rec: &mut Recording,
) -> Result<(), TraceError> {
    let mut buf = Vec::new();
    source.set(true)?;
    rec.start = monotonic_ns();
    let t0 = Instant::now();
    // A duration past the clock's range (`Instant + Duration` would panic) has no deadline.
    let deadline = opts.duration.and_then(|d| t0.checked_add(d));
    // Started before the command, so that a thread that cannot start leaves nothing to undo
    // but the rings; dropped (stopped and joined) on every early return below.
    let sampler = match opts
        .memory_interval
        .map(|every| MemorySampler::start(every, memory))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            let _ = source.set(false);
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
                let _ = source.set(false);
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
    let mut drained = Ok(());
    loop {
        let now = Instant::now();
        if let Some(c) = child.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            rec.exit = Some(st);
            break;
        }
        if drained.is_err()
            || spill.failed().is_some()
            || deadline.is_some_and(|d| now >= d)
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
        source.wait(wait);
        drained = source.drain(&mut buf, spill);
    }
    if let Some(mut c) = child.take()
        && rec.exit.is_none()
    {
        // The duration ran out first (or the rings failed): the command does not outlive
        // its trace.
        let _ = c.kill();
        rec.exit = c.wait().ok();
    }
    if let Some(s) = saved {
        sys_call::restore_job_signals(s);
    }
    if let Some(s) = sampler {
        rec.memory_samples = s.finish();
    }
    let off = source.set(false);
    rec.end = monotonic_ns();
    let last = source.drain(&mut buf, spill);
    drained?;
    off?;
    last
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
}
