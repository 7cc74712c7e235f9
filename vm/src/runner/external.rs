//! The external runners: the kernel's selftest programs, one unit per program with a
//! result per TAP line, and libdrm's test programs against each KMS driver present.

use super::Sink;
use super::capture::{KEEP_HEAD, KEEP_TAIL, run_captured, run_limited};
use crate::stream::Outcome;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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
mod tests {
    use super::*;

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
