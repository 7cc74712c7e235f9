//! The libtest runner: lists the tests of Rust test binaries and runs them unit by unit,
//! one process each, deciding each outcome from the exit status and libtest's output (a
//! panic's message, a `SKIP ` line), and watching the guest's DRM nodes across units.

use super::capture::{run_captured, run_limited};
use super::{Sink, unit_id};
use crate::stream::Outcome;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

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
