//! Recording through ftrace, as trace-cmd does: a tracefs instance of drmtool's own
//! (`instances/drmtool-<pid>-<n>`: its own ring buffers, event switches, filters and clock,
//! so tracing that anyone else runs on the machine is left as it was), the wanted events
//! enabled in it, and each CPU's ring read a whole page at a time from
//! `per_cpu/cpuN/trace_pipe_raw` (see [`super::ring`] for the page format).
//!
//! The instance is set up with:
//! - `trace_clock` = `mono` (`CLOCK_MONOTONIC`, the clock of the memory samples and of
//!   perf's path; a kernel without it makes the recording fall back to perf);
//! - `buffer_size_kb` = the ring per CPU asked for;
//! - `options/overwrite` = 0: a full ring drops the newest events rather than overwriting
//!   unread ones, and counts them (`per_cpu/cpuN/stats`, `dropped events`);
//! - `options/record-tgid` = 1, so that a thread's process can be found (`saved_tgids`)
//!   after it exited;
//! - the alloc category's kernel filters on its syscall events, and with them
//!   `buffer_percent` = 0 (a reader wakes at the first event: a failure's process is read
//!   while it may still run).
//!
//! Dropping the [`Instance`] turns its events off, closes its files and removes it. An
//! instance left by a recorder that was killed (its pid no longer runs) is removed when the
//! next recording starts.

use super::format::EventFormat;
use super::ring::PageLayout;
use super::{TraceError, alloc};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// The prefix of drmtool's instance names.
const PREFIX: &str = "drmtool-";

/// Why the instance could not be made, when perf may still work.
#[derive(Debug)]
pub enum Unavailable {
    /// This tracefs cannot give drmtool an instance of its own, or the instance lacks what
    /// the recording needs (the reason, for the trace's `backend_note`).
    Unsupported(String),
    /// A real failure (permission, a write refused).
    Failed(TraceError),
}

impl From<TraceError> for Unavailable {
    fn from(e: TraceError) -> Self {
        Unavailable::Failed(e)
    }
}

/// The counts of one CPU's ring (`per_cpu/cpuN/stats`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingStats {
    /// Events still in the ring.
    pub entries: u64,
    /// Events overwritten (overwrite mode).
    pub overrun: u64,
    /// Events dropped because the ring was full.
    pub dropped: u64,
    /// Events read out of the ring.
    pub read: u64,
}

impl RingStats {
    /// Parses a `stats` file (`key: value` lines; unknown keys ignored).
    pub fn parse(text: &str) -> RingStats {
        let mut s = RingStats::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let Ok(v) = v.trim().parse::<u64>() else {
                continue;
            };
            match k.trim() {
                "entries" => s.entries = v,
                "overrun" => s.overrun = v,
                "dropped events" => s.dropped = v,
                "read events" => s.read = v,
                _ => {}
            }
        }
        s
    }

    /// Events the kernel could not keep.
    pub fn lost(&self) -> u64 {
        self.overrun.saturating_add(self.dropped)
    }
}

/// drmtool's tracefs instance (see the module doc).
#[derive(Debug)]
pub struct Instance {
    instances: OwnedFd,
    name: String,
    dir: Option<OwnedFd>,
    /// Each CPU's `trace_pipe_raw`, non-blocking.
    cpus: Vec<(u32, OwnedFd)>,
    /// The page layout of this kernel.
    pub layout: PageLayout,
    /// Tracepoints whose kernel filter this kernel refused.
    pub refused: Vec<String>,
}

fn failed(what: String, e: Errno) -> TraceError {
    if matches!(e, Errno::ACCESS | Errno::PERM) {
        TraceError::Permission {
            what,
            errno: e.raw_os_error(),
        }
    } else {
        TraceError::Tracefs { what, errno: e }
    }
}

/// Reads at most `max` bytes of `rel` under `dir`.
fn read_at(dir: BorrowedFd<'_>, rel: &str, max: usize) -> Result<String, Errno> {
    let fd = rustix::fs::openat(
        dir,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < max {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n.min(max - out.len())]),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Writes `value` to `rel` under `dir` (one write, as tracefs files want).
fn write_at(dir: BorrowedFd<'_>, rel: &str, value: &[u8]) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        rel,
        OFlags::WRONLY | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let mut done = 0;
    while done < value.len() {
        match rustix::io::write(&fd, &value[done..]) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Removes the instances of recorders that no longer run (`drmtool-<pid>-*` whose pid has
/// no `/proc` entry). An instance still in use is never removed (the kernel refuses, EBUSY).
fn remove_stale(instances: BorrowedFd<'_>) {
    let Ok(dir) = rustix::fs::Dir::read_from(instances) else {
        return;
    };
    for entry in dir.flatten().take(4096) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = rustix::fs::unlinkat(instances, name.as_str(), rustix::fs::AtFlags::REMOVEDIR);
        }
    }
}

impl Instance {
    /// Makes the instance under tracefs `root`, with the ring of `buffer_kib` KiB per CPU,
    /// the events of `formats` enabled (tracing itself still off: [`Instance::set`]), and
    /// every CPU of `cpus` opened.
    ///
    /// # Errors
    /// [`Unavailable::Unsupported`] where this tracefs has no instances, no `mono` clock or
    /// an unreadable page layout (the caller falls back to perf);
    /// [`Unavailable::Failed`] with [`TraceError::Permission`] without the privilege, or
    /// [`TraceError::Tracefs`] for another refusal.
    pub fn create(
        root: &Path,
        formats: &BTreeMap<u32, EventFormat>,
        cpus: &[u32],
        buffer_kib: usize,
    ) -> Result<Instance, Unavailable> {
        let dirflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let instances = match rustix::fs::open(root.join("instances"), dirflags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                return Err(Unavailable::Unsupported("tracefs has no instances/".into()));
            }
            Err(e) => return Err(failed(root.join("instances").display().to_string(), e).into()),
        };
        remove_stale(instances.as_fd());
        let mut n = crate::trace::record::monotonic_ns() % 1_000_000;
        let name = loop {
            let name = format!("{PREFIX}{}-{n}", std::process::id());
            match rustix::fs::mkdirat(&instances, name.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) => break name,
                Err(Errno::EXIST) if n % 1_000_000 != 999_999 => n += 1,
                Err(e) => {
                    let what = root.join("instances").join(&name).display().to_string();
                    return Err(failed(what, e).into());
                }
            }
        };
        // From here on, Drop removes it.
        let mut inst = Instance {
            instances,
            name,
            dir: None,
            cpus: Vec::new(),
            layout: PageLayout::NATIVE_64,
            refused: Vec::new(),
        };
        inst.set_up(root, formats, cpus, buffer_kib)?;
        Ok(inst)
    }

    fn path(&self, rel: &str) -> String {
        format!("instances/{}/{rel}", self.name)
    }

    fn dir(&self) -> BorrowedFd<'_> {
        match &self.dir {
            Some(d) => d.as_fd(),
            None => self.instances.as_fd(),
        }
    }

    fn write(&self, rel: &str, value: &str) -> Result<(), TraceError> {
        write_at(self.dir(), rel, value.as_bytes()).map_err(|e| failed(self.path(rel), e))
    }

    fn set_up(
        &mut self,
        root: &Path,
        formats: &BTreeMap<u32, EventFormat>,
        cpus: &[u32],
        buffer_kib: usize,
    ) -> Result<(), Unavailable> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let dir = rustix::fs::openat(&self.instances, self.name.as_str(), flags, Mode::empty())
            .map_err(|e| failed(self.path(""), e))?;
        // What was made is a directory of this tracefs owned by this user: nothing else
        // took the name in between.
        let st = rustix::fs::fstat(&dir).map_err(|e| failed(self.path(""), e))?;
        let me = rustix::process::geteuid().as_raw();
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
            || (st.st_uid != me && st.st_uid != 0)
        {
            return Err(failed(self.path(""), Errno::PERM).into());
        }
        self.dir = Some(dir);
        let header = read_at(self.dir(), "events/header_page", 4096)
            .or_else(|_| {
                let top = rustix::fs::open(root, flags, Mode::empty())?;
                read_at(top.as_fd(), "events/header_page", 4096)
            })
            .map_err(|e| failed(self.path("events/header_page"), e))?;
        self.layout = PageLayout::parse(&header)
            .ok_or_else(|| Unavailable::Unsupported("events/header_page did not parse".into()))?;
        self.write("tracing_on", "0")?;
        let clocks = read_at(self.dir(), "trace_clock", 4096)
            .map_err(|e| failed(self.path("trace_clock"), e))?;
        if !clocks
            .split_whitespace()
            .any(|c| c.trim_matches(|c| c == '[' || c == ']') == "mono")
        {
            return Err(Unavailable::Unsupported(format!(
                "no mono trace clock (trace_clock: {})",
                clocks.trim()
            )));
        }
        self.write("trace_clock", "mono")?;
        self.write("buffer_size_kb", &buffer_kib.max(1).to_string())?;
        // Older kernels may lack an option: the recording works without either.
        let _ = self.write("options/overwrite", "0");
        let _ = self.write("options/record-tgid", "1");
        // Allocation failures are decoded at once, and their process read from /proc while
        // it may still run: wake the reader at the first event, not at a half-full ring.
        if formats.values().any(|f| f.system == alloc::SYSTEM) {
            let _ = self.write("buffer_percent", "0");
        }
        for f in formats.values() {
            let ev = format!("events/{}/{}", f.system, f.name);
            if let Some(filter) = alloc::filter_of(f)
                && write_at(self.dir(), &format!("{ev}/filter"), filter.to_bytes()).is_err()
            {
                self.refused.push(format!("{}:{}", f.system, f.name));
            }
            self.write(&format!("{ev}/enable"), "1")?;
        }
        for &cpu in cpus {
            let rel = format!("per_cpu/cpu{cpu}/trace_pipe_raw");
            let fd = rustix::fs::openat(
                self.dir(),
                rel.as_str(),
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .map_err(|e| failed(self.path(&rel), e))?;
            self.cpus.push((cpu, fd));
        }
        Ok(())
    }

    /// Turns tracing in the instance on or off (`tracing_on`).
    ///
    /// # Errors
    /// [`TraceError`] when the write is refused.
    pub fn set(&self, on: bool) -> Result<(), TraceError> {
        self.write("tracing_on", if on { "1" } else { "0" })
    }

    /// The CPUs read, in order, with their pipes.
    pub fn cpus(&self) -> impl Iterator<Item = (u32, BorrowedFd<'_>)> {
        self.cpus.iter().map(|(c, f)| (*c, f.as_fd()))
    }

    /// Reads one page of CPU number `idx` (its place in [`Instance::cpus`]) into `buf`
    /// (of [`PageLayout::page_size`]); `Ok(0)` when the ring is empty now.
    ///
    /// # Errors
    /// The errno of a read that failed otherwise.
    pub fn read_page(&self, idx: usize, buf: &mut [u8]) -> Result<usize, Errno> {
        let Some((_, fd)) = self.cpus.get(idx) else {
            return Ok(0);
        };
        loop {
            match rustix::io::read(fd, &mut *buf) {
                Ok(n) => return Ok(n),
                Err(Errno::AGAIN) => return Ok(0),
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until a CPU's ring has data or `timeout` passes.
    pub fn wait(&self, timeout: std::time::Duration) {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds: Vec<PollFd<'_>> = self
            .cpus
            .iter()
            .map(|(_, f)| PollFd::new(f, PollFlags::IN))
            .collect();
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = poll(&mut fds, Some(&ts));
    }

    /// The counts of every CPU's ring, summed (a CPU whose file cannot be read adds nothing).
    pub fn stats(&self) -> RingStats {
        let mut sum = RingStats::default();
        for (cpu, _) in &self.cpus {
            if let Ok(t) = read_at(self.dir(), &format!("per_cpu/cpu{cpu}/stats"), 4096) {
                let s = RingStats::parse(&t);
                sum.entries += s.entries;
                sum.overrun += s.overrun;
                sum.dropped += s.dropped;
                sum.read += s.read;
            }
        }
        sum
    }

    /// The instance's name under `instances/`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.dir.is_some() {
            let _ = write_at(self.dir(), "tracing_on", b"0");
            let _ = write_at(self.dir(), "events/enable", b"0");
        }
        // The kernel refuses to remove an instance with a file open in it.
        self.cpus.clear();
        self.dir = None;
        let _ = rustix::fs::unlinkat(
            &self.instances,
            self.name.as_str(),
            rustix::fs::AtFlags::REMOVEDIR,
        );
    }
}

/// A thread's process, for the ftrace path (a ring record carries the thread only):
/// `/proc/<tid>/status`'s `Tgid:` while the thread runs, else the kernel's `saved_tgids`
/// (filled because the instance records tgids), else the thread itself.
#[derive(Debug, Default)]
pub struct Tgids {
    known: rustc_hash::FxHashMap<u32, u32>,
    saved: Option<rustc_hash::FxHashMap<u32, u32>>,
    tracefs: Option<std::path::PathBuf>,
}

/// At most this many threads are remembered (then the memory starts again).
const TGIDS_MAX: usize = 1 << 16;

impl Tgids {
    /// Resolves against `tracefs` (for `saved_tgids`).
    pub fn new(tracefs: &Path) -> Tgids {
        Tgids {
            tracefs: Some(tracefs.to_path_buf()),
            ..Default::default()
        }
    }

    /// Forgets `saved_tgids` (read again at the next miss).
    pub fn refresh(&mut self) {
        self.saved = None;
    }

    /// The process of thread `tid`.
    pub fn of(&mut self, tid: u32) -> u32 {
        if tid == 0 {
            return 0;
        }
        if let Some(&p) = self.known.get(&tid) {
            return p;
        }
        let p = status_tgid(tid).or_else(|| self.saved(tid)).unwrap_or(tid);
        if self.known.len() >= TGIDS_MAX {
            self.known.clear();
        }
        self.known.insert(tid, p);
        p
    }

    fn saved(&mut self, tid: u32) -> Option<u32> {
        if self.saved.is_none() {
            let text = self
                .tracefs
                .as_ref()
                .and_then(|t| {
                    crate::sysfs::read_bounded_bytes(&t.join("saved_tgids"), 8 << 20).ok()
                })
                .unwrap_or_default();
            self.saved = Some(parse_saved_tgids(&String::from_utf8_lossy(&text)));
        }
        self.saved.as_ref()?.get(&tid).copied().filter(|&p| p != 0)
    }
}

fn status_tgid(tid: u32) -> Option<u32> {
    let b =
        crate::sysfs::read_bounded_bytes(Path::new(&format!("/proc/{tid}/status")), 4096).ok()?;
    let t = String::from_utf8_lossy(&b);
    t.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Parses `saved_tgids` (`pid tgid` lines).
pub fn parse_saved_tgids(text: &str) -> rustc_hash::FxHashMap<u32, u32> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_stats_parse() {
        let t = "entries: 3\noverrun: 4\ncommit overrun: 9\nbytes: 100\n\
                 oldest event ts:  1.5\nnow ts:  2.0\ndropped events: 5\nread events: 60\n";
        let s = RingStats::parse(t);
        assert_eq!(
            s,
            RingStats {
                entries: 3,
                overrun: 4,
                dropped: 5,
                read: 60
            }
        );
        assert_eq!(s.lost(), 9);
        assert_eq!(
            RingStats::parse("junk\n: :\nentries: x"),
            RingStats::default()
        );
    }

    #[test]
    fn saved_tgids_parse() {
        let m = parse_saved_tgids("12 10\n13 10\nbad\n14\n");
        assert_eq!(m.get(&12), Some(&10));
        assert_eq!(m.get(&13), Some(&10));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn a_thread_of_this_process_resolves_to_it() {
        let mut t = Tgids::default();
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        assert_eq!(t.of(tid), std::process::id());
        assert_eq!(t.of(0), 0);
    }
}
