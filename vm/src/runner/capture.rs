//! Running one program with a time limit: its combined output captured within bounded
//! memory (the head, the tail, and every verdict line), a hung program killed with its
//! whole process group, and one that cannot be reaped reported with the kernel stacks of
//! what it waits on.

use std::io::PipeReader;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of a program's output kept from its start and from its end; the middle is counted
/// and dropped (a kselftest whose failing teardown loops can print gigabytes).
pub(super) const KEEP_HEAD: usize = 64 << 10;
/// See [`KEEP_HEAD`].
pub(super) const KEEP_TAIL: usize = 256 << 10;

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
    let (mut child, reader) = match spawn_piped(cmd) {
        Ok(c) => c,
        Err(text) => return (false, captured(text), start.elapsed()),
    };
    // The reader fills a shared capture, so that what a child wrote is kept even when the
    // child cannot be reaped (and so holds the pipe open forever).
    let shared = Arc::new(Mutex::new(Capture::default()));
    let reader_thread = spawn_reader(reader, shared.clone());
    let (ok, timed_out, stuck) = wait_limited(&mut child, start, limit);
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

/// Starts `cmd` in its own process group with stdout and stderr on one pipe; returns the
/// child and the pipe's read end, or the text of the failure (`pipe: ...`, `cannot start:
/// ...`).
fn spawn_piped(cmd: &mut Command) -> std::result::Result<(Child, PipeReader), String> {
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return Err(format!("pipe: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return Err(format!("pipe: {e}")),
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
    match child {
        Ok(c) => Ok((c, reader)),
        Err(e) => Err(format!("cannot start: {e}")),
    }
}

/// Reads the pipe until EOF on a thread of its own, feeding `shared`.
fn spawn_reader(mut reader: PipeReader, shared: Arc<Mutex<Capture>>) -> JoinHandle<()> {
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
}

/// Waits for `child` until `limit` has passed since `start`, then kills it and waits up
/// to [`UNKILLABLE_AFTER`] for it to be reaped. Returns (success, timed out, the kernel
/// stacks taken before the kill where the child could not be reaped).
fn wait_limited(
    child: &mut Child,
    start: Instant,
    limit: Duration,
) -> (bool, bool, Option<String>) {
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
    (ok, timed_out, stuck)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::outcome_of;
    use crate::stream::Outcome;

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
}
