//! One kernel's lane of `vm test` across kernel crashes: after a boot that ended in an oops
//! or panic, the unit that was running (the last `start` record: the in-guest runner sends
//! it before each unit, straight to the result port) is recorded as failed with the oops,
//! and the next boot leaves out every unit the crashed boot started. At most
//! [`Lane::max_oopses`] crashes per kernel; then what never ran is listed as not run.

use crate::oops::{self, KnownHang, Oops};
use crate::stream::{Outcome, Record};

/// Crashes per kernel after which `vm test` stops booting it.
pub const MAX_OOPSES: usize = 3;

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
    /// Stop: the crash came before any test (it would come again), or the crash limit is
    /// reached.
    GiveUp,
}

/// The state of one kernel's lane across boots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lane {
    /// Crashes after which the lane gives up ([`MAX_OOPSES`] by default).
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
    /// A lane that gives up after `max_oopses` crashes (at least 1).
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
        if unit.is_none() || self.crashes.len() >= self.max_oopses {
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

    #[test]
    fn the_crash_limit_stops_the_lane_and_lists_what_never_ran() {
        let mut lane = Lane::new(3);
        let plan: Vec<String> = (1..=6).map(|i| format!("t::p{i}")).collect();
        for i in 1..=3 {
            let (next, failed) =
                lane.after_boot(&[start("t", &format!("p{i}"))], true, None, SYSRQ);
            assert!(failed.is_some());
            if i < 3 {
                assert!(matches!(next, Next::Resume(_)), "{next:?}");
            } else {
                assert_eq!(next, Next::GiveUp);
            }
        }
        assert_eq!(lane.crashes.len(), 3);
        assert_eq!(lane.not_run(&plan), ["t::p4", "t::p5", "t::p6"]);
        let mut lane = Lane::new(3);
        lane.after_boot(&[start("libdrm", "modetest-vkms")], false, None, "");
        let plan = ["libdrm::*".to_string(), "sync::*".to_string()];
        assert_eq!(lane.not_run(&plan), ["sync::*"]);
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
