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
}
