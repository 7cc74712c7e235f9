//! Per-kernel reports of `vm test`: the summary printed for people, JSON and JUnit for CI.

use crate::guest::{BootResult, Ending};
use crate::lane::Lane;
use crate::stream::{Outcome, Record};
use serde::Serialize;
use std::fmt::Write as _;

/// One test's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TestResult {
    /// Suite (binary or external suite).
    pub suite: String,
    /// Test name.
    pub name: String,
    /// `pass`, `fail` or `skip`.
    pub outcome: &'static str,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Why it failed or was skipped.
    pub reason: String,
}

impl TestResult {
    /// A failure listed in [`crate::runner::KNOWN_FAILURES`]: reported, not fatal.
    pub fn known(&self) -> bool {
        self.outcome == "fail" && self.reason.starts_with("known:")
    }
}

/// A module the init tried to load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModuleResult {
    /// Module name.
    pub name: String,
    /// Whether it loaded.
    pub ok: bool,
    /// modprobe's message when it did not.
    pub detail: String,
}

/// A kernel crash during a kernel's run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OopsReport {
    /// The boot it ended (1 for the first).
    pub boot: usize,
    /// The unit that was running (`suite::name`), if any.
    pub unit: Option<String>,
    /// `oops in <function> [<module>] during <unit>`.
    pub verdict: String,
    /// The function (and module) it happened in, or the report's first line.
    pub location: String,
    /// A hang of a known kernel bug ([`crate::oops::KNOWN_HANGS`]); it does not fail the
    /// kernel by itself.
    pub known: bool,
    /// The report's first lines, the `RIP:` line, the top of the call trace, the panic line.
    pub excerpt: Vec<String>,
}

/// Everything one kernel's run produced.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct KernelReport {
    /// Catalog or custom name.
    pub kernel: String,
    /// `uname -r` reported by the guest.
    pub release: String,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Host wall seconds from QEMU start to the guest init's first record.
    pub boot_s: Option<f64>,
    /// Host wall seconds from QEMU start to the payload's start.
    pub payload_s: Option<f64>,
    /// Kernel uptime at init (seconds).
    pub kernel_boot_s: Option<f64>,
    /// Seconds from boot to power-off.
    pub test_s: f64,
    /// How the boot ended (`exited 0`, `panic: ...`, `timeout`, ...).
    pub ending: String,
    /// Modules loaded.
    pub modules: Vec<ModuleResult>,
    /// Device nodes found, with their drivers.
    pub nodes: Vec<(String, String)>,
    /// Test results.
    pub tests: Vec<TestResult>,
    /// Notes from the guest.
    pub notes: Vec<String>,
    /// Last console lines when the boot failed.
    pub console_tail: Vec<String>,
    /// Boots this kernel took: more than one when the run went on after a kernel crash.
    pub boots: usize,
    /// Kernel crashes (oops, panic), in order.
    pub oopses: Vec<OopsReport>,
    /// Units (`suite::name`) no boot ran: the run gave up after the crash limit, or after a
    /// crash before any test.
    pub not_run: Vec<String>,
    /// Whether this kernel passed: clean exit, no kernel crash, no failed test, every
    /// module loaded, nothing left unrun.
    pub passed: bool,
}

impl KernelReport {
    /// Builds a report from a boot.
    pub fn from_boot(kernel: &str, accel: &str, r: &BootResult) -> Self {
        Self::from_lane(
            kernel,
            accel,
            &[(r.clone(), None)],
            &Lane::new(1),
            Vec::new(),
        )
    }

    /// Builds a report from every boot of a kernel's lane, each with the failed result the
    /// lane recorded for the unit its crash interrupted; `not_run` lists what never ran.
    pub fn from_lane(
        kernel: &str,
        accel: &str,
        boots: &[(BootResult, Option<Record>)],
        lane: &Lane,
        not_run: Vec<String>,
    ) -> Self {
        let Some((first, _)) = boots.first() else {
            return Self::not_built(kernel, "no boot");
        };
        let last = &boots[boots.len() - 1].0;
        let mut rep = KernelReport {
            kernel: kernel.to_string(),
            accel: accel.to_string(),
            boot_s: first.boot_time.map(|d| d.as_secs_f64()),
            payload_s: first.payload_time.map(|d| d.as_secs_f64()),
            test_s: boots.iter().map(|(b, _)| b.run_time.as_secs_f64()).sum(),
            ending: last.ending.to_string(),
            boots: boots.len(),
            not_run,
            ..Default::default()
        };
        for (i, (r, crashed)) in boots.iter().enumerate() {
            rep.add_records(i, r.parsed.records.iter().chain(crashed));
            for c in &r.parsed.corrupt {
                rep.notes.push(format!("corrupt record: {c}"));
            }
        }
        for c in &lane.crashes {
            rep.oopses.push(OopsReport {
                boot: c.boot,
                unit: c.unit.clone(),
                verdict: c.verdict(),
                known: c.known.is_some(),
                location: c.oops.location(),
                excerpt: c.oops.excerpt.clone(),
            });
        }
        if let Some(first) = rep.oopses.first() {
            let mut e = first.verdict.clone();
            let bugs = lane.bugs();
            if bugs.len() < rep.oopses.len() {
                // One bug met in several tests: said once, with the tests it took.
                e = bugs
                    .iter()
                    .map(|(sig, units)| bug_line(sig, units))
                    .collect::<Vec<_>>()
                    .join("; ");
            } else if rep.oopses.len() > 1 {
                let more: Vec<&str> = rep.oopses[1..].iter().map(|o| o.verdict.as_str()).collect();
                e.push_str(&format!(" (+{} more: {})", more.len(), more.join("; ")));
            }
            if !rep.not_run.is_empty() {
                e.push_str(&format!(
                    "; gave up after {} oops(es) ({}): {} unit(s) not run",
                    rep.oopses.len(),
                    lane.give_up_reason().unwrap_or_default(),
                    rep.not_run.len()
                ));
            } else if boots.len() > 1 {
                e.push_str(&format!(
                    "; resumed, {} boots, the last {}",
                    boots.len(),
                    last.ending
                ));
            }
            rep.ending = e;
        }
        // A hang of a known kernel bug ([`crate::oops::KNOWN_HANGS`]) does not fail the
        // kernel by itself: its unit's result is a known failure and it ran again.
        let clean = matches!(last.ending, Ending::Exited(0)) && rep.oopses.iter().all(|o| o.known);
        let tests_ok = rep
            .tests
            .iter()
            .all(|t| t.outcome != Outcome::Fail.as_str() || t.known());
        let mods_ok = rep.modules.iter().all(|m| m.ok);
        rep.passed = clean && tests_ok && mods_ok && rep.not_run.is_empty();
        // After an oops its excerpt says what the console said; a clean boot's tail says
        // nothing new.
        let tail_useful = match last.ending {
            Ending::Exited(0) => !rep.passed && rep.oopses.is_empty(),
            Ending::Panic(_) => rep.oopses.is_empty(),
            _ => true,
        };
        if tail_useful {
            rep.console_tail = last.console_tail.clone();
        }
        rep
    }

    /// Adds the records of boot `i` (0 for the first): a later boot adds only the modules
    /// that failed anew, no nodes, and its notes marked with the boot.
    fn add_records<'a>(&mut self, i: usize, records: impl Iterator<Item = &'a Record>) {
        for rec in records {
            match rec {
                Record::Boot { uptime_s, release } if i == 0 => {
                    self.release = release.clone();
                    self.kernel_boot_s = Some(*uptime_s);
                }
                Record::Module { name, ok, detail } => {
                    let m = ModuleResult {
                        name: name.clone(),
                        ok: *ok,
                        detail: detail.clone(),
                    };
                    if i == 0 || (!m.ok && !self.modules.contains(&m)) {
                        self.modules.push(m);
                    }
                }
                Record::Node { path, driver } if i == 0 => self
                    .nodes
                    .push((path.clone(), driver.clone().unwrap_or_else(|| "-".into()))),
                Record::Test {
                    suite,
                    name,
                    outcome,
                    duration_ms,
                    reason,
                } => self.tests.push(TestResult {
                    suite: suite.clone(),
                    name: name.clone(),
                    outcome: outcome.as_str(),
                    duration_ms: *duration_ms,
                    reason: reason.clone(),
                }),
                Record::Note(n) if i == 0 => self.notes.push(n.clone()),
                Record::Note(n) => self.notes.push(format!("boot {}: {n}", i + 1)),
                _ => {}
            }
        }
    }

    /// The report of a kernel that could not be built or found, so it never boots.
    pub fn not_built(kernel: &str, why: &str) -> Self {
        KernelReport {
            kernel: kernel.to_string(),
            accel: "-".into(),
            ending: format!("not built: {why}"),
            ..Default::default()
        }
    }

    /// (passed, failed, skipped) test counts; known failures are not in `failed`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |o: Outcome| {
            self.tests
                .iter()
                .filter(|t| t.outcome == o.as_str() && !t.known())
                .count()
        };
        (c(Outcome::Pass), c(Outcome::Fail), c(Outcome::Skip))
    }

    /// Known kernel-side failures.
    pub fn known_failures(&self) -> usize {
        self.tests.iter().filter(|t| t.known()).count()
    }
}

/// A kernel bug met more than once, for a lane's ending: `<signature> in N tests (a, b,
/// ...)`, the first five tests named.
fn bug_line(sig: &str, units: &[Option<String>]) -> String {
    let named: Vec<&str> = units.iter().flatten().map(String::as_str).collect();
    let mut list = named.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    if named.len() > 5 {
        list.push_str(&format!(", +{} more", named.len() - 5));
    }
    match units.len() {
        1 => format!("{sig} ({list})"),
        n => format!("{sig}, the same bug in {n} tests ({list})"),
    }
}

/// The human summary of a matrix run.
pub fn summary(reports: &[KernelReport]) -> String {
    let mut s = String::new();
    writeln!(s, "\n=== vm test summary ===").unwrap();
    writeln!(
        s,
        "{:<14} {:<18} {:<5} {:>6} {:>9} {:>7} {:>5} {:>5} {:>5} {:>5}  result",
        "kernel",
        "release",
        "accel",
        "boot s",
        "payload s",
        "test s",
        "pass",
        "fail",
        "skip",
        "known"
    )
    .unwrap();
    for r in reports {
        let (p, f, k) = r.counts();
        writeln!(
            s,
            "{:<14} {:<18} {:<5} {:>6} {:>9} {:>7.1} {:>5} {:>5} {:>5} {:>5}  {}",
            r.kernel,
            r.release,
            r.accel,
            r.boot_s.map_or("-".into(), |b| format!("{b:.2}")),
            r.payload_s.map_or("-".into(), |b| format!("{b:.2}")),
            r.test_s,
            p,
            f,
            k,
            r.known_failures(),
            if r.passed {
                "PASS".to_string()
            } else {
                format!("FAIL ({})", r.ending)
            }
        )
        .unwrap();
    }
    for r in reports {
        let bad_mods: Vec<&ModuleResult> = r.modules.iter().filter(|m| !m.ok).collect();
        let fails: Vec<&TestResult> = r.tests.iter().filter(|t| t.outcome == "fail").collect();
        let skips: Vec<&TestResult> = r.tests.iter().filter(|t| t.outcome == "skip").collect();
        if bad_mods.is_empty() && fails.is_empty() && skips.is_empty() && r.passed {
            continue;
        }
        writeln!(s, "\n{} ({}):", r.kernel, r.ending).unwrap();
        for o in &r.oopses {
            writeln!(s, "  OOPS (boot {}): {}", o.boot, o.verdict).unwrap();
            for l in &o.excerpt {
                writeln!(s, "    ! {l}").unwrap();
            }
        }
        if !r.not_run.is_empty() {
            writeln!(
                s,
                "  NOT RUN: {} unit(s), the kernel crashed {} time(s) (limit reached or a crash \
                 before any test):",
                r.not_run.len(),
                r.oopses.len()
            )
            .unwrap();
            for u in &r.not_run {
                writeln!(s, "    NOT RUN {u}").unwrap();
            }
        }
        for m in bad_mods {
            writeln!(s, "  module {} failed to load: {}", m.name, m.detail).unwrap();
        }
        for t in fails {
            let tag = if t.known() { "KNOWN" } else { "FAIL" };
            writeln!(s, "  {tag} {}::{}: {}", t.suite, t.name, t.reason).unwrap();
        }
        for t in skips {
            writeln!(s, "  SKIP {}::{}: {}", t.suite, t.name, t.reason).unwrap();
        }
        if !r.console_tail.is_empty() {
            writeln!(s, "  last console lines:").unwrap();
            for l in &r.console_tail {
                writeln!(s, "    | {l}").unwrap();
            }
        }
    }
    let (p, f, k) = reports.iter().fold((0, 0, 0), |a, r| {
        let c = r.counts();
        (a.0 + c.0, a.1 + c.1, a.2 + c.2)
    });
    let bad = reports.iter().filter(|r| !r.passed).count();
    let not_run: usize = reports.iter().map(|r| r.not_run.len()).sum();
    let oopses: usize = reports.iter().map(|r| r.oopses.len()).sum();
    writeln!(
        s,
        "\nkernels: {} passed, {} failed; tests: {p} passed, {f} failed, {k} skipped{}{}",
        reports.len() - bad,
        bad,
        if not_run > 0 {
            format!(", {not_run} NOT RUN")
        } else {
            String::new()
        },
        if oopses > 0 {
            format!("; kernel oopses: {oopses}")
        } else {
            String::new()
        }
    )
    .unwrap();
    s
}

/// The JSON document of a matrix run.
pub fn json(reports: &[KernelReport]) -> String {
    #[derive(Serialize)]
    struct Doc<'a> {
        schema_version: u32,
        kernels: &'a [KernelReport],
    }
    serde_json::to_string_pretty(&Doc {
        schema_version: 1,
        kernels: reports,
    })
    .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn xml_escape(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&apos;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The JUnit XML of a matrix run: one testsuite per kernel; a boot failure is a failed
/// testcase named `boot`, so it can never look like an empty pass.
pub fn junit(reports: &[KernelReport]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for r in reports {
        let (_, f, k) = r.counts();
        let boot_failed = !r.ending.starts_with("exited");
        writeln!(
            s,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            xml_escape(&r.kernel),
            r.tests.len() + r.not_run.len() + 1,
            f + r.not_run.len() + usize::from(boot_failed),
            k,
            r.test_s
        )
        .unwrap();
        write!(
            s,
            "    <testcase classname=\"{0}\" name=\"boot\" time=\"{1:.3}\">",
            xml_escape(&r.kernel),
            r.boot_s.unwrap_or(0.0)
        )
        .unwrap();
        if boot_failed {
            let body: Vec<String> = r
                .oopses
                .iter()
                .flat_map(|o| std::iter::once(o.verdict.clone()).chain(o.excerpt.iter().cloned()))
                .chain(r.console_tail.iter().cloned())
                .collect();
            write!(
                s,
                "<failure message=\"{}\">{}</failure>",
                xml_escape(&r.ending),
                xml_escape(&body.join("\n"))
            )
            .unwrap();
        }
        s.push_str("</testcase>\n");
        for t in &r.tests {
            write!(
                s,
                "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{:.3}\">",
                xml_escape(&r.kernel),
                xml_escape(&t.suite),
                xml_escape(&t.name),
                t.duration_ms as f64 / 1000.0
            )
            .unwrap();
            match t.outcome {
                "fail" => write!(s, "<failure message=\"{}\"/>", xml_escape(&t.reason)).unwrap(),
                "skip" => write!(s, "<skipped message=\"{}\"/>", xml_escape(&t.reason)).unwrap(),
                _ => {}
            }
            s.push_str("</testcase>\n");
        }
        for u in &r.not_run {
            let (suite, name) = u.split_once("::").unwrap_or(("", u));
            writeln!(
                s,
                "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"0.000\"><failure message=\"not run: the kernel crashed {} time(s)\"/></testcase>",
                xml_escape(&r.kernel),
                xml_escape(suite),
                xml_escape(name),
                r.oopses.len()
            )
            .unwrap();
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::RunFiles;
    use crate::stream::{encode, parse};
    use std::time::Duration;

    fn boot_result(records: &[&str], ending: Ending) -> BootResult {
        let text: String = records.iter().map(|r| encode(r)).collect();
        BootResult {
            ending,
            parsed: parse(text.as_bytes()),
            boot_time: Some(Duration::from_millis(1500)),
            payload_time: Some(Duration::from_millis(2500)),
            run_time: Duration::from_secs(3),
            console_tail: vec!["[ 1.0] last <line> & more".into()],
            files: RunFiles {
                dir: "/r".into(),
                initrd: "/r/i".into(),
                console: "/r/c".into(),
                results: "/r/r".into(),
                output: "/r/o".into(),
                nvdimm: "/r/n".into(),
                alive: "/r/a".into(),
                monitor: "/r/m".into(),
                hang: "/r/h".into(),
                disk: "/r/d".into(),
            },
            hang: None,
        }
    }

    #[test]
    fn report_counts_and_verdicts() {
        let r = boot_result(
            &[
                "boot 1.1 6.12.117",
                "module vkms ok",
                "node /dev/dri/card0 vkms",
                "test smoke vkms_bound pass 12",
                "test smoke pmem skip 1 no /dev/pmem0",
                "exit 0",
                "end 6",
            ],
            Ending::Exited(0),
        );
        let rep = KernelReport::from_boot("debian-6.12", "tcg", &r);
        assert_eq!(rep.release, "6.12.117");
        assert_eq!(rep.counts(), (1, 0, 1));
        assert!(rep.passed);
        assert_eq!(
            rep.nodes,
            [("/dev/dri/card0".to_string(), "vkms".to_string())]
        );

        let bad = boot_result(
            &[
                "boot 1.1 6.1.0",
                "module test_hmm fail modprobe: not found",
                "exit 0",
                "end 3",
            ],
            Ending::Exited(0),
        );
        let rep2 = KernelReport::from_boot("debian-6.1", "tcg", &bad);
        assert!(
            !rep2.passed,
            "a module that failed to load fails the kernel"
        );
        let s = summary(&[rep.clone(), rep2.clone()]);
        assert!(s.contains("module test_hmm failed to load"), "{s}");
        assert!(s.contains("SKIP smoke::pmem: no /dev/pmem0"), "{s}");
        assert!(s.contains("kernels: 1 passed, 1 failed"), "{s}");

        let panic = boot_result(&[], Ending::Panic("Kernel panic - not syncing: x".into()));
        let rep3 = KernelReport::from_boot("custom", "tcg", &panic);
        assert!(!rep3.passed);
        let x = junit(&[rep, rep3]);
        assert!(x.contains("name=\"boot\""));
        assert!(
            x.contains("<failure message=\"kernel panic: Kernel panic - not syncing: x\">"),
            "{x}"
        );
        assert!(x.contains("&lt;line&gt; &amp; more"), "{x}");
        assert!(x.contains("<skipped message=\"no /dev/pmem0\"/>"));
        assert!(json(&[rep2]).contains("\"schema_version\": 1"));
    }

    /// One driver bug met in two tests is said once, with both tests; the kernel fails.
    #[test]
    fn one_bug_in_two_tests_is_said_once() {
        let console = "[ 9.0] BUG: kernel NULL pointer dereference, address: 8\n\
                       [ 9.1] RIP: 0010:XRGB8888_to_argb_u16+0x1c/0x90 [vkms]\n\
                       [ 9.4] Kernel panic - not syncing: Fatal exception\n";
        let mut lane = Lane::new(3);
        let mut boots = Vec::new();
        for unit in ["a", "b"] {
            let start = format!("start atomic {unit}");
            let r = boot_result(&[&start], Ending::Panic("Fatal exception".into()));
            let (_, failed) = lane.after_boot(&r.parsed.records, true, None, console);
            boots.push((r, failed));
        }
        let last = boot_result(&["test kms c pass 5", "exit 0", "end 1"], Ending::Exited(0));
        lane.after_boot(&last.parsed.records, false, None, "");
        boots.push((last, None));
        let rep = KernelReport::from_lane("custom", "tcg", &boots, &lane, Vec::new());
        assert!(!rep.passed);
        assert_eq!(rep.oopses.len(), 2);
        assert!(
            rep.ending.starts_with(
                "oops in XRGB8888_to_argb_u16 [vkms], the same bug in 2 tests (atomic::a, \
                 atomic::b); resumed, 3 boots, the last "
            ),
            "{}",
            rep.ending
        );
        assert_eq!(rep.counts(), (1, 2, 0));
    }
}
