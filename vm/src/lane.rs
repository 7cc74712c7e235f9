//! One kernel's lane of `vm test` across kernel crashes: after a boot that ended in an oops
//! or panic, the unit that was running (the last `start` record: the in-guest runner sends
//! it before each unit, straight to the result port) is recorded as failed with the oops,
//! and the next boot leaves out every unit the crashed boot started.
//!
//! The budget is per distinct crash: a kernel bug that oopses the same way in every test
//! that reaches it (vkms's `XRGB8888_to_argb_u16` on 6.2.0, in each compose test) costs
//! each of those tests and a boot, never the rest of the suite. The lane gives up at
//! [`Lane::max_oopses`] distinct signatures ([`Crash::signature`]: a kernel that crashes
//! in many different places), at [`MAX_CRASHES`] crashes in all, or at a crash before any
//! test; then what never ran is listed as not run.

use crate::oops::{self, KnownHang, Oops};
use crate::stream::{Outcome, Record};

/// Distinct crash signatures per kernel after which `vm test` stops booting it.
pub const MAX_OOPSES: usize = 3;

/// Crashes in all per kernel, whatever their signatures, after which `vm test` stops
/// booting it: each costs a boot (half a minute to a minute under TCG), and the lane's time
/// limit covers them all.
pub const MAX_CRASHES: usize = 40;

/// One kernel crash of a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// The boot it ended (1 for the first).
    pub boot: usize,
    /// The unit that was running (`suite::name`), when the payload had started one.
    pub unit: Option<String>,
    /// Whether that unit had already sent its result (the crash came after it).
    pub after_result: bool,
    /// What the console showed.
    pub oops: Oops,
    /// Set when the guest hung (its heartbeat stopped) rather than crashed by itself: what
    /// the harness saw and did (`no heartbeat for 150 s; NMI injected`).
    pub hang: Option<String>,
    /// The known kernel bug the hung stack shows ([`oops::KNOWN_HANGS`]).
    pub known: Option<&'static KnownHang>,
}

impl Crash {
    /// What tells one kernel bug from another: `oops in <function> [<module>]` or
    /// `hang in ...` (with the known bug's name for a known hang). Two crashes with one
    /// signature are taken for one bug met twice.
    pub fn signature(&self) -> String {
        let kind = if self.hang.is_some() { "hang" } else { "oops" };
        let s = format!("{kind} in {}", self.oops.location());
        match self.known {
            Some(k) => format!("known kernel bug {}: {s}", k.name),
            None => s,
        }
    }

    /// `oops in <function> [<module>] during <unit>`, `... after <unit> finished`, or
    /// `... during boot (before any test)`.
    ///
    /// A hang reads `hang in <function> ...` (where the NMI found it stuck), and a known
    /// kernel bug's hang `known kernel bug <name>: hang in ...`.
    pub fn verdict(&self) -> String {
        let loc = self.oops.location();
        let kind = if self.hang.is_some() { "hang" } else { "oops" };
        let v = match (&self.unit, self.after_result) {
            (Some(u), false) => format!("{kind} in {loc} during {u}"),
            (Some(u), true) => format!("{kind} in {loc} after {u} finished"),
            (None, _) => format!("{kind} in {loc} during boot (before any test)"),
        };
        match self.known {
            Some(k) => format!("known kernel bug {}: {v}", k.name),
            None => v,
        }
    }
}

/// What to do after a boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The boot ended without a kernel crash: the lane is complete.
    Done,
    /// Boot again, leaving out these units (`suite::name`, every one started so far).
    Resume(Vec<String>),
    /// Stop: the crash came before any test (it would come again), or a crash limit is
    /// reached ([`Lane::give_up_reason`] says which).
    GiveUp,
}

/// The state of one kernel's lane across boots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lane {
    /// Distinct crash signatures after which the lane gives up ([`MAX_OOPSES`] by
    /// default).
    pub max_oopses: usize,
    /// Every unit started in any boot, in order, as `suite::name`.
    pub started: Vec<String>,
    /// The crashes so far.
    pub crashes: Vec<Crash>,
    /// Boots so far.
    pub boots: usize,
    /// Units a known kernel bug hung, run once more in the next boot (at most once each).
    pub retried: Vec<String>,
}

impl Lane {
    /// A lane that gives up after `max_oopses` distinct crash signatures (at least 1).
    pub fn new(max_oopses: usize) -> Self {
        Lane {
            max_oopses: max_oopses.max(1),
            ..Default::default()
        }
    }

    /// Takes one finished boot: its records, whether it ended in a kernel panic, whether
    /// the guest hung (what the harness saw and did, see [`crate::guest::BootResult::hang`]),
    /// and its console. Returns what to do next and, for a crash or hang during a unit, the
    /// failed result to record for it (the guest could not send one).
    ///
    /// A hang whose stack shows a known kernel bug ([`oops::known_hang`]) is recorded as a
    /// known failure (`known: ...`, counted apart, never a pass), and the unit it hung is
    /// run once more in the next boot, so it is still tested on that kernel.
    pub fn after_boot(
        &mut self,
        records: &[Record],
        panicked: bool,
        hang: Option<&str>,
        console: &str,
    ) -> (Next, Option<Record>) {
        self.boots += 1;
        let mut last: Option<(String, String)> = None;
        let mut last_has_result = false;
        for r in records {
            match r {
                Record::Start { suite, name } => {
                    self.started.push(crate::runner::unit_id(suite, name));
                    last = Some((suite.clone(), name.clone()));
                    last_has_result = false;
                }
                Record::Test { suite, name, .. } => {
                    // A kselftest program's results carry their TAP names.
                    if let Some((s, n)) = &last
                        && s == suite
                        && (n == name || n == crate::runner::KSELFTEST_UNIT)
                    {
                        last_has_result = true;
                    }
                }
                _ => {}
            }
        }
        if !panicked && hang.is_none() {
            return (Next::Done, None);
        }
        let oops = oops::find(console).unwrap_or_else(|| Oops {
            headline: if hang.is_some() {
                "no panic report on the console (the guest stayed hung)".into()
            } else {
                "kernel panic (no report on the console)".into()
            },
            panic: None,
            rip: None,
            function: None,
            module: None,
            excerpt: Vec::new(),
        });
        let known = hang.and_then(|_| oops::known_hang(console));
        let unit = last.as_ref().map(|(s, n)| crate::runner::unit_id(s, n));
        let reason = match (hang, known) {
            (Some(h), Some(k)) => format!(
                "known: {}: guest hung ({h}), stuck in {}; {}",
                k.name,
                oops.location(),
                k.why
            ),
            (Some(h), None) => format!("guest hung ({h}); {}", oops.summary()),
            (None, _) => oops.summary(),
        };
        let failed = match (&last, last_has_result) {
            (Some((suite, name)), false) => Some(Record::Test {
                suite: suite.clone(),
                name: name.clone(),
                outcome: Outcome::Fail,
                duration_ms: 0,
                reason,
            }),
            _ => None,
        };
        self.crashes.push(Crash {
            boot: self.boots,
            unit: unit.clone(),
            after_result: last_has_result,
            oops,
            hang: hang.map(str::to_string),
            known,
        });
        if self.give_up_reason().is_some() {
            return (Next::GiveUp, failed);
        }
        let mut skip = self.started.clone();
        if let (Some(u), Some(_), false) = (&unit, known, last_has_result)
            && !self.retried.contains(u)
        {
            self.retried.push(u.clone());
            skip.retain(|s| s != u);
        }
        (Next::Resume(skip), failed)
    }

    /// The kernel bugs met so far: each distinct [`Crash::signature`], first met first,
    /// with the units its crashes interrupted (`None`: outside a test).
    pub fn bugs(&self) -> Vec<(String, Vec<Option<String>>)> {
        let mut out: Vec<(String, Vec<Option<String>>)> = Vec::new();
        for c in &self.crashes {
            let sig = c.signature();
            match out.iter_mut().find(|(s, _)| *s == sig) {
                Some((_, units)) => units.push(c.unit.clone()),
                None => out.push((sig, vec![c.unit.clone()])),
            }
        }
        out
    }

    /// Why the lane stops after its last crash, if it does: a crash before any test (it
    /// would come again), [`Lane::max_oopses`] distinct signatures reached by a new one, or
    /// [`MAX_CRASHES`] in all. A crash whose signature was met before costs its test and a
    /// boot and the lane goes on.
    pub fn give_up_reason(&self) -> Option<String> {
        let last = self.crashes.last()?;
        if last.unit.is_none() {
            return Some("the crash came before any test".into());
        }
        let sig = last.signature();
        let seen_before = self.crashes[..self.crashes.len() - 1]
            .iter()
            .any(|c| c.signature() == sig);
        let distinct = self.bugs().len();
        if !seen_before && distinct >= self.max_oopses {
            return Some(format!(
                "{distinct} different kernel crashes, the limit (--max-oopses)"
            ));
        }
        if self.crashes.len() >= MAX_CRASHES {
            return Some(format!("{MAX_CRASHES} kernel crashes in all, the cap"));
        }
        None
    }

    /// The units of `plan` no boot started (in `plan`'s order). A plan entry `suite::*`
    /// (a suite whose units the guest decides, like libdrm's per-driver programs) counts
    /// as started when any unit of that suite was.
    pub fn not_run(&self, plan: &[String]) -> Vec<String> {
        plan.iter()
            .filter(|u| match u.strip_suffix("::*") {
                Some(suite) => !self
                    .started
                    .iter()
                    .any(|s| s.split_once("::").is_some_and(|(a, _)| a == suite)),
                None => !self.started.contains(u),
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(s: &str, n: &str) -> Record {
        Record::Start {
            suite: s.into(),
            name: n.into(),
        }
    }

    fn pass(s: &str, n: &str) -> Record {
        Record::Test {
            suite: s.into(),
            name: n.into(),
            outcome: Outcome::Pass,
            duration_ms: 1,
            reason: String::new(),
        }
    }

    const SYSRQ: &str = "[ 9.0] Kernel panic - not syncing: sysrq triggered crash\n\
                         [ 9.1] Call Trace:\n[ 9.2]  panic+0x1/0x2\n[ 9.3]  sysrq_handle_crash+0x16/0x20\n";

    #[test]
    fn a_crash_fails_the_running_test_and_resumes_after_it() {
        let mut lane = Lane::new(MAX_OOPSES);
        let boot1 = [
            Record::Note("payload start 3.0".into()),
            start("crash", "point_a"),
            pass("crash", "point_a"),
            start("crash", "point_b"),
        ];
        let (next, failed) = lane.after_boot(&boot1, true, None, SYSRQ);
        assert_eq!(
            next,
            Next::Resume(vec!["crash::point_a".into(), "crash::point_b".into()])
        );
        let Some(Record::Test {
            suite,
            name,
            outcome,
            reason,
            ..
        }) = failed
        else {
            panic!("no failed record: {failed:?}");
        };
        assert_eq!((suite.as_str(), name.as_str()), ("crash", "point_b"));
        assert_eq!(outcome, Outcome::Fail);
        assert!(
            reason.starts_with("kernel oops in sysrq_handle_crash: "),
            "{reason}"
        );
        assert_eq!(
            lane.crashes[0].verdict(),
            "oops in sysrq_handle_crash during crash::point_b"
        );
        // The next boot runs the rest and ends cleanly.
        let boot2 = [start("crash", "point_c"), pass("crash", "point_c")];
        assert_eq!(lane.after_boot(&boot2, false, None, "").0, Next::Done);
        assert_eq!(lane.boots, 2);
        let plan: Vec<String> = ["crash::point_a", "crash::point_b", "crash::point_c"]
            .map(String::from)
            .to_vec();
        assert!(lane.not_run(&plan).is_empty());
    }

    /// An oops report in `function` of `module`.
    fn oops_in(function: &str, module: &str) -> String {
        format!(
            "[ 9.0] BUG: kernel NULL pointer dereference, address: 0000000000000008\n\
             [ 9.1] RIP: 0010:{function}+0x1c/0x90 [{module}]\n\
             [ 9.2] Call Trace:\n[ 9.3]  {function}+0x1c/0x90 [{module}]\n\
             [ 9.4] Kernel panic - not syncing: Fatal exception\n"
        )
    }

    #[test]
    fn the_crash_limit_counts_different_crashes_and_lists_what_never_ran() {
        let mut lane = Lane::new(3);
        let plan: Vec<String> = (1..=6).map(|i| format!("t::p{i}")).collect();
        let consoles = [
            oops_in("f1", "m"),
            oops_in("f2", "m"),
            oops_in("f1", "m"),
            oops_in("f3", "m"),
        ];
        for (i, console) in consoles.iter().enumerate() {
            let (next, failed) =
                lane.after_boot(&[start("t", &format!("p{}", i + 1))], true, None, console);
            assert!(failed.is_some());
            // f1 met again (p3) costs p3 and a boot; the third different one stops.
            if i < 3 {
                assert!(matches!(next, Next::Resume(_)), "{i}: {next:?}");
            } else {
                assert_eq!(next, Next::GiveUp);
            }
        }
        assert_eq!(lane.crashes.len(), 4);
        assert_eq!(
            lane.give_up_reason().as_deref(),
            Some("3 different kernel crashes, the limit (--max-oopses)")
        );
        assert_eq!(lane.not_run(&plan), ["t::p5", "t::p6"]);
        assert_eq!(
            lane.bugs(),
            [
                (
                    "oops in f1 [m]".to_string(),
                    vec![Some("t::p1".into()), Some("t::p3".into())]
                ),
                ("oops in f2 [m]".to_string(), vec![Some("t::p2".into())]),
                ("oops in f3 [m]".to_string(), vec![Some("t::p4".into())]),
            ]
        );
        let mut lane = Lane::new(3);
        lane.after_boot(&[start("libdrm", "modetest-vkms")], false, None, "");
        let plan = ["libdrm::*".to_string(), "sync::*".to_string()];
        assert_eq!(lane.not_run(&plan), ["sync::*"]);
    }

    /// The 6.2.0 case: one driver bug in every compose test costs each of them and a boot,
    /// however many there are; the suite runs to its end.
    #[test]
    fn one_bug_met_in_many_tests_costs_only_those_tests() {
        let mut lane = Lane::new(3);
        let console = oops_in("XRGB8888_to_argb_u16", "vkms");
        for i in 1..=6 {
            let recs = [
                start("kms", &format!("ok{i}")),
                pass("kms", &format!("ok{i}")),
                start("atomic", &format!("compose{i}")),
            ];
            let (next, failed) = lane.after_boot(&recs, true, None, &console);
            assert!(matches!(next, Next::Resume(_)), "{i}: {next:?}");
            assert!(failed.is_some());
        }
        assert_eq!(lane.give_up_reason(), None);
        assert_eq!(
            lane.after_boot(
                &[start("kms", "last"), pass("kms", "last")],
                false,
                None,
                ""
            ),
            (Next::Done, None)
        );
        let bugs = lane.bugs();
        assert_eq!(bugs.len(), 1);
        assert_eq!(bugs[0].0, "oops in XRGB8888_to_argb_u16 [vkms]");
        assert_eq!(bugs[0].1.len(), 6);
    }

    /// A kernel that crashes the same way in every test still ends, at the cap.
    #[test]
    fn the_cap_ends_a_lane_that_crashes_in_every_test() {
        let mut lane = Lane::new(3);
        let console = oops_in("f", "m");
        for i in 1..=MAX_CRASHES {
            let (next, _) = lane.after_boot(&[start("t", &format!("p{i}"))], true, None, &console);
            assert_eq!(matches!(next, Next::GiveUp), i == MAX_CRASHES, "{i}");
        }
        assert_eq!(
            lane.give_up_reason(),
            Some(format!("{MAX_CRASHES} kernel crashes in all, the cap"))
        );
    }

    /// The stack of the CPU in the vblank callback, after the harness's NMI.
    const VKMS_HANG: &str = "[ 9.0] Kernel panic - not syncing: NMI: Not continuing\n\
                             [ 9.1] Call Trace:\n[ 9.2]  <NMI>\n[ 9.3]  exc_nmi+0xf3/0x120\n\
                             [ 9.4] RIP: 0010:native_queued_spin_lock_slowpath+0x5f/0x2e0\n\
                             [ 9.5]  </NMI>\n[ 9.6]  drm_handle_vblank+0x6c/0x3e0 [drm]\n\
                             [ 9.7]  vkms_vblank_simulate+0x4f/0x140 [vkms]\n";

    #[test]
    fn a_known_hang_is_a_known_failure_and_its_unit_runs_once_more() {
        let mut lane = Lane::new(3);
        let hang = Some("no heartbeat for 150 s; NMI injected");
        let boot1 = [
            start("atomic", "a"),
            pass("atomic", "a"),
            start("atomic", "crc"),
        ];
        let (next, failed) = lane.after_boot(&boot1, true, hang, VKMS_HANG);
        // crc runs again; a is done.
        assert_eq!(next, Next::Resume(vec!["atomic::a".into()]));
        let Some(Record::Test { reason, .. }) = &failed else {
            panic!("{failed:?}")
        };
        assert!(
            reason.starts_with("known: vkms-vblank-hrtimer-deadlock: guest hung (no heartbeat"),
            "{reason}"
        );
        assert_eq!(
            lane.crashes[0].verdict(),
            "known kernel bug vkms-vblank-hrtimer-deadlock: hang in \
             native_queued_spin_lock_slowpath during atomic::crc"
        );
        // The same hang again on the retry: recorded again, and not a third time.
        let (next, _) = lane.after_boot(&[start("atomic", "crc")], true, hang, VKMS_HANG);
        assert_eq!(
            next,
            Next::Resume(vec![
                "atomic::a".into(),
                "atomic::crc".into(),
                "atomic::crc".into()
            ])
        );
        // A hang with any other stack is a plain failure, never retried.
        let mut lane = Lane::new(3);
        let (next, failed) = lane.after_boot(&[start("t", "x")], true, hang, SYSRQ);
        assert_eq!(next, Next::Resume(vec!["t::x".into()]));
        let Some(Record::Test { reason, .. }) = &failed else {
            panic!("{failed:?}")
        };
        assert!(reason.starts_with("guest hung (no heartbeat for 150 s; NMI injected); kernel oops in sysrq_handle_crash"), "{reason}");
        assert_eq!(
            lane.crashes[0].verdict(),
            "hang in sysrq_handle_crash during t::x"
        );
        // A guest that stayed hung after the NMI: no panic on the console at all.
        let mut lane = Lane::new(3);
        lane.after_boot(&[start("t", "y")], true, hang, "");
        assert_eq!(
            lane.crashes[0].verdict(),
            "hang in no panic report on the console (the guest stayed hung) during t::y"
        );
    }

    #[test]
    fn crashes_outside_a_test() {
        // Before the payload started anything: giving up (it would crash again).
        let mut lane = Lane::new(3);
        let (next, failed) = lane.after_boot(
            &[Record::Note("phase modules 2.0".into())],
            true,
            None,
            SYSRQ,
        );
        assert_eq!((next, failed), (Next::GiveUp, None));
        assert_eq!(
            lane.give_up_reason().as_deref(),
            Some("the crash came before any test")
        );
        assert_eq!(
            lane.crashes[0].verdict(),
            "oops in sysrq_handle_crash during boot (before any test)"
        );
        // After a unit sent its result: no second result for it; the lane goes on.
        let mut lane = Lane::new(3);
        let recs = [
            start("hmm-tests", "(run)"),
            pass("hmm-tests", "hmm.open_close"),
        ];
        let (next, failed) = lane.after_boot(&recs, true, None, "");
        assert_eq!(failed, None);
        assert_eq!(next, Next::Resume(vec!["hmm-tests::(run)".into()]));
        assert!(lane.crashes[0].after_result);
        assert_eq!(
            lane.crashes[0].verdict(),
            "oops in kernel panic (no report on the console) after hmm-tests::(run) finished"
        );
        // A clean boot is done, whatever its records.
        let mut lane = Lane::new(3);
        assert_eq!(
            lane.after_boot(&recs, false, None, SYSRQ),
            (Next::Done, None)
        );
        assert!(lane.crashes.is_empty());
    }
}
