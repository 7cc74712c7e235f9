//! The in-guest test runner (`vm guest-tests`): runs every test of the given libtest
//! binaries one by one, and external suites (the kernel's selftests, libdrm's test programs),
//! and writes one result line per test to `$VM_RESULTS_FILE` for the init to forward.

use crate::stream::{Outcome, Record};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One libtest binary to run.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// Suite name for reports (`smoke`, `gem`, ...).
    pub suite: String,
    /// The executable.
    pub path: PathBuf,
}

/// The suite name of a cargo test executable: its file stem without the `-<hash>` suffix.
pub fn suite_name(exe: &Path) -> String {
    let stem = exe
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

/// Parses `--list --format terse` output: lines `name: test`.
pub fn parse_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(|s| s.trim().to_string())
        .collect()
}

/// Decides a test's outcome from its exit status and output. A passing test that printed a
/// `SKIP ` line (the `kernel_tests::skip!` macro) was skipped; the reason is that line.
pub fn outcome_of(success: bool, output: &str) -> (Outcome, String) {
    if success {
        if let Some(l) = output.lines().find(|l| l.starts_with("SKIP ")) {
            let reason = l.split_once(": ").map_or(l, |(_, r)| r);
            return (Outcome::Skip, reason.to_string());
        }
        return (Outcome::Pass, String::new());
    }
    let reason = panic_message(output)
        .or_else(|| {
            output
                .lines()
                .find(|l| l.starts_with("FAIL: unkillable"))
                .map(|l| l.trim().to_string())
        })
        .or_else(|| {
            output
                .lines()
                .rev()
                .find(|l| l.starts_with("timed out after"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "non-zero exit".into());
    (Outcome::Fail, reason)
}

/// At most this many bytes of a panic message in a result.
const PANIC_MESSAGE_MAX: usize = 4000;

/// The first panic's whole message on one line, its lines joined by ` | ` (an `assert_eq!`
/// keeps its `left:`/`right:` values), then where it panicked: `assertion ... | left: 0 |
/// right: 1 (at kernel-tests/tests/x.rs:680:5)`. The message ends at the `note:` line, a
/// backtrace, or the test harness's next output; it is cut at [`PANIC_MESSAGE_MAX`] bytes.
fn panic_message(output: &str) -> Option<String> {
    let mut lines = output.lines();
    let head = lines.by_ref().find(|l| l.contains("panicked at"))?;
    let at = head
        .split_once("panicked at ")
        .map(|(_, loc)| loc.trim().trim_end_matches(':').to_string());
    let body: Vec<&str> = lines
        .take_while(|l| {
            !(l.starts_with("note: ")
                || l.starts_with("stack backtrace:")
                || l.starts_with("thread '")
                || l.starts_with("failures:")
                || l.starts_with("test result:")
                || *l == "FAILED")
        })
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut msg = if body.is_empty() {
        head.trim().to_string()
    } else {
        body.join(" | ")
    };
    if let Some(at) = at.filter(|_| !body.is_empty()) {
        msg.push_str(&format!(" (at {at})"));
    }
    if msg.len() > PANIC_MESSAGE_MAX {
        let mut cut = PANIC_MESSAGE_MAX;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push_str(" [...]");
    }
    Some(msg)
}

/// Where results go: straight to the result port when the init hands one over
/// (`$VM_RESULTS_PORT`, each record framed and written as it is made, so a kernel crash
/// loses none of the results before it), else one payload per line to `$VM_RESULTS_FILE`
/// for the init to forward when the payload exits.
pub struct Sink {
    file: Option<std::fs::File>,
    /// The result port, and the file where the number of records written to it is kept
    /// (`$VM_RESULTS_SENT`: the init adds it to its own count for the `end` record).
    port: Option<(std::fs::File, PathBuf)>,
    sent: u64,
    /// Counts per outcome: pass, fail, skip.
    pub counts: [usize; 3],
    /// Failures listed in [`KNOWN_FAILURES`] (also counted in `counts[1]`).
    pub known: usize,
    /// Units ([`Sink::start`]) an earlier boot of this kernel ran already, as
    /// `suite::name`: the runner leaves them out.
    pub done: std::collections::HashSet<String>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("counts", &self.counts)
            .field("sent", &self.sent)
            .finish()
    }
}

/// The id of a unit the runner starts: `suite::name`.
pub fn unit_id(suite: &str, name: &str) -> String {
    format!("{suite}::{name}")
}

impl Sink {
    /// Opens `$VM_RESULTS_PORT` (with `$VM_RESULTS_SENT`), else `$VM_RESULTS_FILE`, else
    /// discards results, printing them only.
    pub fn from_env() -> Self {
        let port = std::env::var_os("VM_RESULTS_PORT").and_then(|p| {
            let sent = PathBuf::from(std::env::var_os("VM_RESULTS_SENT")?);
            let f = std::fs::OpenOptions::new().write(true).open(p).ok()?;
            std::fs::write(&sent, "0").ok()?;
            Some((f, sent))
        });
        let file = if port.is_some() {
            None
        } else {
            std::env::var_os("VM_RESULTS_FILE").and_then(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .ok()
            })
        };
        Self {
            file,
            port,
            sent: 0,
            counts: [0; 3],
            known: 0,
            done: Default::default(),
        }
    }

    fn emit(&mut self, r: &Record) {
        let payload = r.to_payload();
        if let Some((f, sent)) = &mut self.port {
            if f.write_all(crate::stream::encode(&payload).as_bytes())
                .is_ok()
            {
                self.sent += 1;
                let _ = std::fs::write(sent, self.sent.to_string());
            }
        } else if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{payload}");
        }
    }

    /// Whether an earlier boot ran this unit already ([`Sink::done`]).
    pub fn is_done(&self, suite: &str, name: &str) -> bool {
        self.done.contains(&unit_id(suite, name))
    }

    /// Announces the unit about to run (a `start` record), so a kernel crash during it is
    /// attributed to it.
    pub fn start(&mut self, suite: &str, name: &str) {
        self.emit(&Record::Start {
            suite: suite.to_string(),
            name: name.to_string(),
        });
    }

    /// Records one result and echoes a line to stdout.
    pub fn record(&mut self, suite: &str, name: &str, outcome: Outcome, d: Duration, reason: &str) {
        let r = Record::Test {
            suite: suite.to_string(),
            name: name.to_string(),
            outcome,
            duration_ms: d.as_millis() as u64,
            reason: reason.to_string(),
        };
        if outcome == Outcome::Fail && reason.starts_with("known:") {
            self.known += 1;
        }
        self.counts[match outcome {
            Outcome::Pass => 0,
            Outcome::Fail => 1,
            Outcome::Skip => 2,
        }] += 1;
        println!(
            "{:<4} {suite}::{name} ({} ms){}",
            outcome.as_str().to_uppercase(),
            d.as_millis(),
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            }
        );
        self.emit(&r);
    }

    /// Records a note line.
    pub fn note(&mut self, text: &str) {
        println!("note: {text}");
        self.emit(&Record::Note(text.to_string()));
    }
}

/// Bytes of a program's output kept from its start and from its end; the middle is counted
/// and dropped (a kselftest whose failing teardown loops can print gigabytes).
const KEEP_HEAD: usize = 64 << 10;
const KEEP_TAIL: usize = 256 << 10;

/// A bounded capture of a program's combined stdout and stderr.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// The first and last bytes (with a marker where the middle was dropped), for display
    /// and for finding panic messages.
    pub text: String,
    /// Every line, from the whole stream, that starts with `ok `, `not ok `, `SKIP ` or
    /// `#  RUN ` (kselftest_harness names a test there before a nameless `# SKIP`).
    pub verdict_lines: String,
    /// Up to 50 lines that mention `FAIL` (for programs that print no TAP).
    pub fail_lines: Vec<String>,
    /// Total bytes the program wrote.
    pub total: u64,
}

/// Accumulates a stream into a [`Captured`].
#[derive(Debug, Default, Clone)]
struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    line: Vec<u8>,
    verdicts: String,
    fails: Vec<String>,
    total: u64,
}

impl Capture {
    fn feed(&mut self, buf: &[u8]) {
        self.total += buf.len() as u64;
        for &b in buf {
            if self.head.len() < KEEP_HEAD {
                self.head.push(b);
            } else {
                if self.tail.len() == KEEP_TAIL {
                    self.tail.pop_front();
                }
                self.tail.push_back(b);
            }
            if b == b'\n' {
                self.end_line();
            } else if self.line.len() < 4096 {
                self.line.push(b);
            }
        }
    }

    fn end_line(&mut self) {
        let full = String::from_utf8_lossy(&self.line);
        // With --nocapture libtest prints "test NAME ... " and the test's own output then
        // continues on the same line.
        let l = match full
            .strip_prefix("test ")
            .and_then(|r| r.split_once(" ... "))
        {
            Some((_, rest)) => std::borrow::Cow::Owned(rest.to_string()),
            None => full,
        };
        if l.starts_with("ok ")
            || l.starts_with("not ok ")
            || l.starts_with("SKIP ")
            || l.starts_with("#  RUN ")
        {
            self.verdicts.push_str(&l);
            self.verdicts.push('\n');
        } else if l.contains("FAIL") && self.fails.len() < 50 {
            self.fails.push(l.trim().to_string());
        }
        self.line.clear();
    }

    fn finish(mut self) -> Captured {
        if !self.line.is_empty() {
            self.end_line();
        }
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        let kept = (self.head.len() + self.tail.len()) as u64;
        if self.total > kept {
            text.push_str(&format!(
                "\n[... {} bytes not kept ...]\n",
                self.total - kept
            ));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        Captured {
            text,
            verdict_lines: self.verdicts,
            fail_lines: self.fails,
            total: self.total,
        }
    }
}

/// Runs a command with a time limit, capturing its combined output within bounded memory;
/// returns (success, capture, duration).
pub fn run_captured(cmd: &mut Command, limit: Duration) -> (bool, Captured, Duration) {
    let start = Instant::now();
    let (mut reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return (false, captured(format!("pipe: {e}")), start.elapsed()),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return (false, captured(format!("pipe: {e}")), start.elapsed()),
    };
    use std::os::unix::process::CommandExt;
    // Own process group, so a timeout (or a straggler left behind) can be killed whole:
    // kselftest harnesses fork, and a forked child holding the pipe would hold us too.
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0)
        .spawn();
    // The Command still holds the pipe's write ends: drop them so EOF can arrive.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return (
                false,
                captured(format!("cannot start: {e}")),
                start.elapsed(),
            );
        }
    };
    // The reader fills a shared capture, so that what a child wrote is kept even when the
    // child cannot be reaped (and so holds the pipe open forever).
    let shared = std::sync::Arc::new(std::sync::Mutex::new(Capture::default()));
    let reader_thread = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut c) = shared.lock() {
                            c.feed(&buf[..n]);
                        }
                    }
                }
            }
        })
    };
    let mut timed_out = false;
    let mut stuck: Option<String> = None;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.success(),
            Ok(None) if start.elapsed() > limit => {
                // What it is blocked on, before the kill: a task in uninterruptible sleep
                // (a kernel wait that never ends) does not die of SIGKILL.
                let stacks = kernel_stacks(child.id());
                let _ = child.kill();
                let t = Instant::now();
                let reaped = loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break true,
                        Ok(None) if t.elapsed() < UNKILLABLE_AFTER => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        _ => break false,
                    }
                };
                timed_out = true;
                if !reaped {
                    stuck = Some(stacks);
                }
                break false;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break false,
        }
    };
    let d = start.elapsed();
    if let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    if stuck.is_none() {
        let _ = reader_thread.join();
    }
    // An unreaped child holds the pipe: take what was read so far, leave the reader.
    let mut cap = shared
        .lock()
        .map(|c| c.clone())
        .unwrap_or_default()
        .finish();
    if timed_out {
        cap.text
            .push_str(&format!("\ntimed out after {} s\n", limit.as_secs()));
    }
    if let Some(stacks) = stuck {
        let line = format!(
            "FAIL: unkillable: still not reaped {} s after SIGKILL (a task in uninterruptible sleep)",
            UNKILLABLE_AFTER.as_secs()
        );
        cap.text.push_str(&format!("{line}\n{stacks}"));
        cap.fail_lines.insert(0, line);
    }
    (ok, cap, d)
}

/// How long a killed child may take to be reaped before it is reported unkillable.
const UNKILLABLE_AFTER: Duration = Duration::from_secs(10);

/// The kernel stacks of `pid`'s threads and of every other task in uninterruptible sleep
/// (`D`), at most 16 tasks and 4 KiB of stack each: what a hung test is waiting for.
pub fn kernel_stacks(pid: u32) -> String {
    let mut out = String::new();
    let mut tasks: Vec<std::path::PathBuf> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let p = e.path();
            let state = std::fs::read_to_string(p.join("stat")).ok().and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('D'))
            });
            if state == Some(true) && !p.ends_with(pid.to_string()) {
                tasks.push(p);
            }
        }
    }
    for t in tasks.iter().take(16) {
        let read = |f: &str| std::fs::read_to_string(t.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        let mut stack = read("stack");
        stack.truncate(4096);
        out.push_str(&format!(
            "== {} ({}) state {state} wchan {}\n{stack}",
            t.display(),
            read("comm").trim(),
            read("wchan")
        ));
    }
    out
}

fn captured(text: String) -> Captured {
    Captured {
        text,
        ..Default::default()
    }
}

/// [`run_captured`] returning only the displayable text.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (bool, String, Duration) {
    let (ok, c, d) = run_captured(cmd, limit);
    (ok, c.text, d)
}

/// Runs every test of every binary, one process per test (so one crash cannot hide the
/// others, and skips are attributed exactly), leaving out the units [`Sink::done`] lists.
/// A unit after which one of the guest's DRM nodes is gone is a failure of its own
/// ([`NodeWatch`]).
pub fn run_binaries(bins: &[TestBinary], sink: &mut Sink, strict: bool, limit: Duration) {
    let mut watch = NodeWatch::new(Path::new("/dev/dri"));
    for b in bins {
        let (ok, list, _) = run_limited(
            Command::new(&b.path).args(["--list", "--format", "terse"]),
            Duration::from_secs(30),
        );
        let names = parse_list(&list);
        if !ok {
            sink.record(
                &b.suite,
                "(list)",
                Outcome::Fail,
                Duration::ZERO,
                &format!("cannot list tests of {}", b.path.display()),
            );
            continue;
        }
        for name in names {
            if sink.is_done(&b.suite, &name) {
                continue;
            }
            if let Some(w) = watch.as_mut() {
                w.before();
            }
            sink.start(&b.suite, &name);
            let mut c = Command::new(&b.path);
            c.args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"]);
            if strict {
                c.env("KERNEL_TESTS_STRICT", "1");
            }
            let (ok, cap, d) = run_captured(&mut c, limit);
            let out = format!("{}{}", cap.verdict_lines, cap.text);
            let (outcome, reason) = outcome_of(ok, &out);
            if outcome == Outcome::Fail {
                println!("---- {}::{name} output ----\n{}", b.suite, out.trim_end());
            }
            sink.record(&b.suite, &name, outcome, d, &reason);
            if let Some(w) = watch.as_mut() {
                w.after(sink, &b.suite, &name);
            }
        }
    }
}

/// The guest's DRM nodes: `/dev/dri` entry name -> (device number, the DRM driver's name
/// from debugfs `dri/<minor>/name`, `-` where debugfs has none).
pub type NodeSet = std::collections::BTreeMap<String, (u64, String)>;

/// Reads the DRM nodes under `dir` (character devices only).
pub fn node_set(dir: &Path) -> NodeSet {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut out = NodeSet::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(md) = std::fs::metadata(e.path()) else {
            continue;
        };
        if !md.file_type().is_char_device() {
            continue;
        }
        let rdev = md.rdev();
        let minor = rustix::fs::minor(rdev);
        let driver = std::fs::read_to_string(format!("/sys/kernel/debug/dri/{minor}/name"))
            .ok()
            .and_then(|t| t.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "-".into());
        out.insert(e.file_name().to_string_lossy().into_owned(), (rdev, driver));
    }
    out
}

/// What changed between two node sets: each node of `before` that is gone or now names
/// another device or driver, as `card3 (qxl, 226:3) vanished` or `card0 (vkms, 226:0) is
/// now (vgem, 226:0)`. Nodes that appeared are not listed (a test may add a device).
pub fn lost_nodes(before: &NodeSet, after: &NodeSet) -> Vec<String> {
    let show = |(rdev, drv): &(u64, String)| {
        format!(
            "{drv}, {}:{}",
            rustix::fs::major(*rdev),
            rustix::fs::minor(*rdev)
        )
    };
    before
        .iter()
        .filter_map(|(name, was)| match after.get(name) {
            None => Some(format!("{name} ({}) vanished", show(was))),
            Some(now) if now != was => {
                Some(format!("{name} ({}) is now ({})", show(was), show(now)))
            }
            Some(_) => None,
        })
        .collect()
}

/// Suite of the failures [`NodeWatch`] records.
pub const GUEST_SUITE: &str = "guest";

/// Watches the guest's DRM nodes across units: a unit after which a node that was there
/// before it is gone (a driver unbound and not bound again, a node deleted) is one failure
/// of its own, `guest::devices-after-<suite>::<name>`, with the kernel's log; every later
/// test that needs the device then fails for a named reason.
#[derive(Debug)]
pub struct NodeWatch {
    dir: PathBuf,
    base: NodeSet,
}

impl NodeWatch {
    /// Watches `dir` (`/dev/dri`); `None` where it has no DRM node.
    pub fn new(dir: &Path) -> Option<Self> {
        let base = node_set(dir);
        (!base.is_empty()).then(|| NodeWatch {
            dir: dir.to_path_buf(),
            base,
        })
    }

    /// The set before a unit (a device that came back since the last unit is counted).
    pub fn before(&mut self) {
        let now = node_set(&self.dir);
        for (k, v) in now {
            self.base.entry(k).or_insert(v);
        }
    }

    /// After a unit: records a failure naming what it lost, with the kernel log's end.
    pub fn after(&mut self, sink: &mut Sink, suite: &str, name: &str) {
        let now = node_set(&self.dir);
        let lost = lost_nodes(&self.base, &now);
        if lost.is_empty() {
            return;
        }
        let unit = format!("devices-after-{}", unit_id(suite, name));
        sink.start(GUEST_SUITE, &unit);
        let log = kernel_log_tail(60);
        println!("---- {GUEST_SUITE}::{unit}: kernel log (last lines) ----\n{log}");
        sink.record(
            GUEST_SUITE,
            &unit,
            Outcome::Fail,
            Duration::ZERO,
            &format!("the guest's DRM nodes changed: {}", lost.join("; ")),
        );
        self.base = now;
    }
}

/// The last `lines` lines of the kernel's log (`dmesg`, every level: the console shows
/// warnings only), bounded.
fn kernel_log_tail(lines: usize) -> String {
    let (_, text, _) = run_limited(
        Command::new("dmesg").stdin(Stdio::null()),
        Duration::from_secs(10),
    );
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_nodes_names_what_vanished_or_changed() {
        let dev = |maj, min| rustix::fs::makedev(maj, min);
        let set = |v: &[(&str, u64, &str)]| -> NodeSet {
            v.iter()
                .map(|(n, d, drv)| (n.to_string(), (*d, drv.to_string())))
                .collect()
        };
        let before = set(&[
            ("card0", dev(226, 0), "vkms"),
            ("card3", dev(226, 3), "qxl"),
            ("renderD128", dev(226, 128), "vgem"),
        ]);
        assert!(lost_nodes(&before, &before).is_empty());
        let mut grown = before.clone();
        grown.insert("card5".into(), (dev(226, 5), "vkms".into()));
        assert!(
            lost_nodes(&before, &grown).is_empty(),
            "an added node is no loss"
        );
        let after = set(&[
            ("card0", dev(226, 0), "vgem"),
            ("renderD128", dev(226, 128), "vgem"),
        ]);
        assert_eq!(
            lost_nodes(&before, &after),
            [
                "card0 (vkms, 226:0) is now (vgem, 226:0)",
                "card3 (qxl, 226:3) vanished"
            ]
        );
    }

    #[test]
    fn suite_names() {
        assert_eq!(
            suite_name(Path::new("/t/deps/smoke-0123456789abcdef")),
            "smoke"
        );
        assert_eq!(
            suite_name(Path::new("/t/deps/dma-buf-0123456789abcdef")),
            "dma-buf"
        );
        assert_eq!(suite_name(Path::new("/usr/bin/modetest")), "modetest");
    }

    #[test]
    fn list_parsing() {
        let out = "a::b: test\nc: test\nbench_x: benchmark\n\n2 tests, 1 benchmark\n";
        assert_eq!(parse_list(out), ["a::b", "c"]);
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            outcome_of(true, "running 1 test\nok\n"),
            (Outcome::Pass, String::new())
        );
        assert_eq!(
            outcome_of(true, "SKIP smoke: no /dev/dri on this machine\n"),
            (Outcome::Skip, "no /dev/dri on this machine".into())
        );
        let (o, r) = outcome_of(
            false,
            "thread 'x' panicked at kernel-tests/tests/smoke.rs:10:5:\nvkms is not bound\nnote: ...",
        );
        assert_eq!(o, Outcome::Fail);
        assert_eq!(r, "vkms is not bound (at kernel-tests/tests/smoke.rs:10:5)");
        // An assert_eq! keeps its values and where it failed (CI once printed only
        // "assertion `left == right` failed: []").
        let (_, r) = outcome_of(
            false,
            "running 1 test\ntest signals ... \nthread 'signals' (4865) panicked at \
             kernel-tests/tests/drmtool_isolation.rs:680:5:\nassertion `left == right` \
             failed: []\n  left: 0\n right: 1\nnote: run with `RUST_BACKTRACE=1`\nFAILED\n",
        );
        assert_eq!(
            r,
            "assertion `left == right` failed: [] | left: 0 | right: 1 \
             (at kernel-tests/tests/drmtool_isolation.rs:680:5)"
        );
        let long = format!("thread 'x' panicked at a.rs:1:1:\n{}\n", "é".repeat(5000));
        let r = outcome_of(false, &long).1;
        assert!(
            r.len() <= PANIC_MESSAGE_MAX + 6 && r.ends_with(" [...]"),
            "{}",
            r.len()
        );
        assert_eq!(outcome_of(false, "Segmentation fault").1, "non-zero exit");
    }
}

/// One result line of TAP / kselftest output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapLine {
    /// Test description.
    pub name: String,
    /// Pass, fail, or skip (`# SKIP`).
    pub outcome: Outcome,
    /// The directive text (`SKIP reason`, `XFAIL ...`).
    pub directive: String,
}

/// Parses the `ok N name` / `not ok N name # SKIP why` lines of TAP output (kselftest and
/// kselftest_harness both print them); indented subtest lines and comments are ignored.
pub fn parse_tap(text: &str) -> Vec<TapLine> {
    let mut out = Vec::new();
    let mut running = String::new();
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("#  RUN ") {
            running = r.trim().trim_end_matches("...").trim().to_string();
            continue;
        }
        let (ok, rest) = if let Some(r) = line.strip_prefix("not ok ") {
            (false, r)
        } else if let Some(r) = line.strip_prefix("ok ") {
            (true, r)
        } else {
            continue;
        };
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
        let (name, directive) = match rest.split_once(" # ") {
            Some((n, d)) => (n.trim(), d.trim()),
            None => match rest.strip_prefix("# ") {
                Some(d) => ("", d.trim()),
                None => (rest, ""),
            },
        };
        let upper = directive.to_ascii_uppercase();
        let outcome = if upper.starts_with("SKIP") {
            Outcome::Skip
        } else if ok || upper.starts_with("XFAIL") {
            Outcome::Pass
        } else {
            Outcome::Fail
        };
        let name = name.trim_start_matches("- ");
        let name = if name.is_empty() {
            running.as_str()
        } else {
            name
        };
        out.push(TapLine {
            name: name.to_string(),
            outcome,
            directive: directive.to_string(),
        });
        running.clear();
    }
    out
}

/// Known kernel-side failures: (suite, substring of the test name, why). A matching failure
/// is recorded as a failure whose reason starts with `known:`; reports count it apart and it
/// does not fail the kernel, but it is never turned into a pass.
///
/// Empty now: the hmm selftest's `exclusive*` failures were not TCG but transparent huge
/// pages (the guests default to THP `always`, and `make_device_exclusive_range` skips the
/// tail pages of large folios, so the selftest's 4 MiB buffers got EBUSY); the runner now
/// sets THP to `madvise` for that suite ([`with_thp_madvise`]), where all of them pass.
pub const KNOWN_FAILURES: &[(&str, &str, &str)] = &[];

fn known_failure(suite: &str, name: &str) -> Option<&'static str> {
    KNOWN_FAILURES
        .iter()
        .find(|(s, n, _)| *s == suite && name.contains(n))
        .map(|(_, _, why)| *why)
}

/// The guest's transparent-huge-page policy file.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Runs `f` with THP set to `madvise` (huge pages only where a test asks with MADV_HUGEPAGE,
/// as the hmm selftest's THP cases do), then puts the previous policy back.
pub fn with_thp_madvise<T>(f: impl FnOnce() -> T) -> T {
    let before = std::fs::read_to_string(THP_ENABLED).ok().and_then(|s| {
        s.split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(['[', ']']).to_string())
    });
    let _ = std::fs::write(THP_ENABLED, "madvise");
    let out = f();
    if let Some(b) = before {
        let _ = std::fs::write(THP_ENABLED, b);
    }
    out
}

/// The unit name of a whole kernel selftest program (its results are per TAP line).
pub const KSELFTEST_UNIT: &str = "(run)";

/// Runs one kselftest program and records each TAP result; a program that printed no TAP
/// result is one failure (never an empty pass).
pub fn run_kselftest(exe: &Path, suite: &str, sink: &mut Sink, limit: Duration) {
    if sink.is_done(suite, KSELFTEST_UNIT) {
        return;
    }
    sink.start(suite, KSELFTEST_UNIT);
    if !exe.exists() {
        sink.record(
            suite,
            "(build)",
            Outcome::Fail,
            Duration::ZERO,
            &format!("{} was not built", exe.display()),
        );
        return;
    }
    let (ok, cap, d) = run_captured(&mut Command::new(exe), limit);
    let lines = parse_tap(&cap.verdict_lines);
    if cap.total > (KEEP_HEAD + KEEP_TAIL) as u64 {
        sink.note(&format!(
            "{suite} printed {} bytes; kept the first and last",
            cap.total
        ));
    }
    if lines.is_empty() {
        // Older selftests (udmabuf, dmabuf-heap before 6.x) print no TAP: the exit status
        // is the verdict, and any line saying FAIL makes it a failure.
        let good = ok && cap.fail_lines.is_empty();
        if !good {
            println!("---- {suite} output ----\n{}", cap.text.trim_end());
        }
        let why = if good {
            String::new()
        } else if let Some(l) = cap.fail_lines.first() {
            l.clone()
        } else {
            format!(
                "exit status failure, no TAP output ({})",
                cap.text.lines().last().unwrap_or("")
            )
        };
        let outcome = if good { Outcome::Pass } else { Outcome::Fail };
        sink.record(suite, "(run,no-TAP)", outcome, d, &why);
        return;
    }
    let per = d / lines.len() as u32;
    let mut seen = std::collections::HashMap::new();
    for t in lines {
        let n = seen.entry(t.name.clone()).or_insert(0);
        *n += 1;
        let name = if *n > 1 {
            format!("{}#{n}", t.name)
        } else {
            t.name.clone()
        };
        let name = name.replace(' ', "_");
        let reason = match (t.outcome, known_failure(suite, &name)) {
            (Outcome::Fail, Some(why)) => why.to_string(),
            _ => t.directive.clone(),
        };
        sink.record(suite, &name, t.outcome, per, &reason);
    }
}

/// Runs libdrm's test programs (Debian `libdrm-tests`) and `drm_info` against each KMS
/// driver present; each program's verdict is its exit status plus the output it must print.
pub fn run_libdrm(sink: &mut Sink, limit: Duration) {
    let nodes = list_drm_drivers();
    let kms: Vec<&str> = ["vkms", "virtio_gpu", "bochs-drm", "bochs", "qxl"]
        .into_iter()
        .filter(|d| nodes.iter().any(|n| n == d))
        .collect();
    if kms.is_empty() {
        if sink.is_done("libdrm", "(drivers)") {
            return;
        }
        sink.start("libdrm", "(drivers)");
        sink.record(
            "libdrm",
            "(drivers)",
            Outcome::Fail,
            Duration::ZERO,
            "no KMS driver present",
        );
        return;
    }
    for d in &kms {
        for (prog, flag, must) in [
            ("/usr/bin/modetest", "-M", "Connectors:"),
            ("/usr/bin/proptest", "-M", "Connector"),
        ] {
            let base = prog.rsplit('/').next().unwrap_or(prog);
            check_program(sink, &format!("{base}-{d}"), prog, &[flag, d], must, limit);
        }
    }
    check_program(
        sink,
        "drmdevice",
        "/usr/bin/drmdevice",
        &[],
        "device[0]",
        limit,
    );
    check_program(
        sink,
        "drm_info",
        "/usr/bin/drm_info",
        &["-j"],
        "\"driver\"",
        limit,
    );
}

/// Runs one peer program; it passes when it exits 0 and prints `must`. A program missing
/// from the host is a skip naming the package.
fn check_program(
    sink: &mut Sink,
    name: &str,
    prog: &str,
    args: &[&str],
    must: &str,
    limit: Duration,
) {
    if sink.is_done("libdrm", name) {
        return;
    }
    sink.start("libdrm", name);
    if !Path::new(prog).exists() {
        let why = format!("{prog} is not installed on the host (libdrm-tests, drm-info)");
        sink.record("libdrm", name, Outcome::Skip, Duration::ZERO, &why);
        return;
    }
    let (ok, out, t) = run_limited(Command::new(prog).args(args), limit);
    let good = ok && out.contains(must);
    if !good {
        println!("---- {name} ----\n{}", out.trim_end());
    }
    let why = if good {
        String::new()
    } else {
        format!("exit ok={ok}, {must:?} printed={}", out.contains(must))
    };
    let outcome = if good { Outcome::Pass } else { Outcome::Fail };
    sink.record("libdrm", name, outcome, t, &why);
}

/// DRM driver names present: debugfs `dri/<minor>/name`, plus drivers bound in sysfs.
fn list_drm_drivers() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/kernel/debug/dri") {
        for e in rd.flatten() {
            if let Ok(t) = std::fs::read_to_string(e.path().join("name"))
                && let Some(n) = t.split_whitespace().next()
            {
                out.push(n.to_string());
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir("/sys/class/drm") {
        for e in rd.flatten() {
            if let Ok(l) = std::fs::read_link(e.path().join("device/driver"))
                && let Some(n) = l.file_name()
            {
                out.push(n.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tap_tests {
    use super::*;

    #[test]
    fn capture_is_bounded_and_keeps_every_verdict() {
        let mut c = Capture::default();
        c.feed(b"TAP version 13\nok 1 first\n");
        let spam = b"# hmm-tests.c:157:exclusive:Expected ret (-1) == 0 (0)\n".repeat(50_000);
        c.feed(&spam);
        c.feed(b"not ok 2 second\ntest t ... SKIP t: why\nok 3 last");
        let total = c.total;
        let cap = c.finish();
        assert_eq!(cap.total, total);
        assert!(
            cap.text.len() < KEEP_HEAD + KEEP_TAIL + 100,
            "{}",
            cap.text.len()
        );
        assert!(cap.text.contains("bytes not kept"));
        assert_eq!(
            cap.verdict_lines,
            "ok 1 first\nnot ok 2 second\nSKIP t: why\nok 3 last\n"
        );
        assert!(cap.text.ends_with("ok 3 last"));
    }

    #[test]
    fn run_captured_times_out_and_reports() {
        let (ok, cap, _) = run_captured(
            Command::new("sh").args(["-c", "echo ok 1 a; echo SKIP x: y >&2; sleep 5"]),
            Duration::from_millis(300),
        );
        assert!(!ok);
        assert!(cap.text.contains("timed out"), "{}", cap.text);
        assert!(cap.verdict_lines.contains("ok 1 a"));
        let (ok, cap, _) = run_captured(
            Command::new("sh").args(["-c", "echo hi; exit 0"]),
            Duration::from_secs(5),
        );
        assert!(ok);
        assert_eq!(cap.text, "hi\n");
    }

    #[test]
    fn a_hung_unit_is_named_with_its_stacks() {
        let (o, why) = outcome_of(false, "some output\ntimed out after 300 s\n");
        assert_eq!((o, why.as_str()), (Outcome::Fail, "timed out after 300 s"));
        let (_, why) = outcome_of(
            false,
            "x\ntimed out after 300 s\nFAIL: unkillable: still not reaped 10 s after SIGKILL\n== /proc/1/task/1",
        );
        assert!(why.starts_with("FAIL: unkillable"), "{why}");
        // The stacks of a live process: its threads, with state and wchan (the kernel stack
        // itself needs root and CONFIG_STACKTRACE).
        let me = std::process::id();
        let s = kernel_stacks(me);
        assert!(s.contains(&format!("== /proc/{me}/task/{me} (")), "{s}");
        assert!(s.contains(" state "), "{s}");
    }

    #[test]
    fn tap_lines() {
        let out = "TAP version 13\n1..4\n# Starting 4 tests\n#  RUN  hmm.open_close ...\n\
                   ok 1 hmm.open_close\nnot ok 2 hmm.exclusive\nok 3 hmm.huge # SKIP no THP\n\
                   ok 4 # SKIP whole test\n  ok 1 nested\n# Totals: pass:2 fail:1\n";
        let t = parse_tap(out);
        assert_eq!(t.len(), 4);
        assert_eq!(
            (t[0].name.as_str(), t[0].outcome),
            ("hmm.open_close", Outcome::Pass)
        );
        assert_eq!(
            (t[1].name.as_str(), t[1].outcome),
            ("hmm.exclusive", Outcome::Fail)
        );
        assert_eq!(
            (t[2].outcome, t[2].directive.as_str()),
            (Outcome::Skip, "SKIP no THP")
        );
        assert_eq!((t[3].name.as_str(), t[3].outcome), ("", Outcome::Skip));
        let named = parse_tap(
            "#  RUN           hmm.hmm_device_private.anon_write_hugetlbfs ...\n#      SKIP      no size\nok 9 # SKIP no size\n",
        );
        assert_eq!(named[0].name, "hmm.hmm_device_private.anon_write_hugetlbfs");
        assert_eq!(named[0].outcome, Outcome::Skip);
        assert_eq!(known_failure("hmm-tests", "hmm.exclusive"), None);
        assert_eq!(known_failure("hmm-tests", "hmm.open_close"), None);
    }
}
