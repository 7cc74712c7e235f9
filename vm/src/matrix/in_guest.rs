//! `vm guest-tests`, inside the guest: the test binaries one test at a time, then the
//! kernel's selftests and libdrm's programs, each result sent to the host as it comes.

use crate::build;
use crate::runner;
use std::path::PathBuf;
use std::time::Duration;

/// `vm guest-tests` settings (its flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestTests {
    /// Test executables.
    pub bins: Vec<PathBuf>,
    /// Make skips fail.
    pub strict: bool,
    /// Per-test limit.
    pub test_timeout: Duration,
    /// Directory of kernel selftest programs built for this kernel.
    pub selftests: Option<PathBuf>,
    /// Also run libdrm's test programs and drm_info.
    pub libdrm: bool,
    /// Units an earlier boot ran already (`suite::name`): left out.
    pub skip_units: Vec<String>,
}

/// Runs `vm guest-tests` and prints its summary line; returns whether it passed (no
/// failure beyond the known ones).
pub fn guest_tests(g: &GuestTests) -> bool {
    let mut sink = runner::Sink::from_env();
    sink.done.extend(g.skip_units.iter().cloned());
    if !g.skip_units.is_empty() {
        sink.note(&format!(
            "resumed after a kernel crash: {} unit(s) ran in earlier boots",
            g.skip_units.len()
        ));
    }
    let bins: Vec<runner::TestBinary> = g
        .bins
        .iter()
        .map(|p| runner::TestBinary {
            suite: runner::suite_name(p),
            path: p.clone(),
        })
        .collect();
    let limit = g.test_timeout;
    runner::run_binaries(&bins, &mut sink, g.strict, limit);
    // Under scripts/guest-storm: the signals the storm delivered in this boot, per binary,
    // as notes (the host's report keeps them; passing tests' own output is not kept).
    if let Some(log) = std::env::var_os("KERNEL_TESTS_STORM_LOG") {
        let text = read_bounded(std::path::Path::new(&log), STORM_LOG_MAX);
        for line in storm_summary(&text) {
            sink.note(&line);
        }
    }
    if let Some(dir) = &g.selftests {
        for (suite, exe) in build::SELFTESTS {
            let run = |sink: &mut runner::Sink| {
                runner::run_kselftest(&dir.join(exe), suite, sink, Duration::from_secs(600))
            };
            if *suite == "hmm-tests" {
                runner::with_thp_madvise(|| run(&mut sink));
            } else {
                run(&mut sink);
            }
        }
    }
    if g.libdrm {
        runner::run_libdrm(&mut sink, limit);
    }
    let (line, passed) = summary_line(sink.counts, sink.known);
    println!("{line}");
    passed
}

/// The most of the storm log read (each test process writes one line of about 80 bytes).
const STORM_LOG_MAX: u64 = 4 << 20;

/// At most `max` bytes of the file at `p`, lossily as text; empty when it cannot be read.
fn read_bounded(p: &std::path::Path, max: u64) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(p) {
        let _ = f.take(max).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The signal storm's log (`kernel_tests::storm`: one line per test process, `signal-storm:
/// D signals delivered (S sent) in T s by SUITE`) summed: one line per suite, sorted, then
/// the total (`signal-storm: 0 signals ...` when the log is empty: no test process ran
/// under the storm). Lines of another form are counted apart, never summed.
pub fn storm_summary(log: &str) -> Vec<String> {
    let mut per: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    let (mut total, mut procs, mut odd) = (0u64, 0u64, 0u64);
    for l in log.lines() {
        let w: Vec<&str> = l.split_ascii_whitespace().collect();
        let parsed = (w.first() == Some(&"signal-storm:") && w.len() >= 5)
            .then(|| w[1].parse::<u64>().ok())
            .flatten()
            .zip(w.last().copied());
        let Some((n, suite)) = parsed else {
            odd += 1;
            continue;
        };
        let e = per.entry(suite).or_default();
        e.0 = e.0.saturating_add(n);
        e.1 += 1;
        total = total.saturating_add(n);
        procs += 1;
    }
    let mut out: Vec<String> = per
        .iter()
        .map(|(s, (n, p))| format!("signal-storm: {s}: {n} signals over {p} test processes"))
        .collect();
    out.push(format!(
        "signal-storm: {total} signals delivered over {procs} test processes in this boot"
    ));
    if odd > 0 {
        out.push(format!("signal-storm: {odd} log lines not understood"));
    }
    out
}

/// The summary line of `vm guest-tests` from its counts (passed, failed, skipped) and its
/// known failures (counted among the failed, shown apart), and whether it passed.
pub fn summary_line([p, f, s]: [usize; 3], known: usize) -> (String, bool) {
    (
        format!(
            "guest-tests: {p} passed, {} failed, {s} skipped, {known} known failures",
            f - known
        ),
        f <= known,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_failures_are_shown_apart_and_do_not_fail() {
        assert_eq!(
            summary_line([5, 2, 1], 2),
            (
                "guest-tests: 5 passed, 0 failed, 1 skipped, 2 known failures".to_string(),
                true
            )
        );
        assert_eq!(
            summary_line([5, 3, 0], 1),
            (
                "guest-tests: 5 passed, 2 failed, 0 skipped, 1 known failures".to_string(),
                false
            )
        );
        assert!(summary_line([0, 0, 0], 0).1);
    }

    #[test]
    fn the_storm_log_is_summed_per_suite() {
        let log = "signal-storm: 10 signals delivered (12 sent) in 1.0 s by atomic\n\
                   signal-storm: 5 signals delivered (5 sent) in 0.5 s by atomic\n\
                   signal-storm: 7 signals delivered (7 sent) in 0.2 s by dumb\n\
                   garbage\n";
        assert_eq!(
            storm_summary(log),
            [
                "signal-storm: atomic: 15 signals over 2 test processes",
                "signal-storm: dumb: 7 signals over 1 test processes",
                "signal-storm: 22 signals delivered over 3 test processes in this boot",
                "signal-storm: 1 log lines not understood",
            ]
        );
        assert_eq!(
            storm_summary(""),
            ["signal-storm: 0 signals delivered over 0 test processes in this boot"]
        );
    }
}
