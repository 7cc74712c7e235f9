//! Where `run`'s start-up goes: `CLOCK_MONOTONIC` at the boundaries of its phases, in the
//! supervisor and in the job's init and command process ([`super::run_timed`]).
//!
//! The job's side has no clock of its own to report: its init and command process write
//! each mark into the error pipe ([`super::super::job`]) as a record beside the failure
//! records, and only when the supervisor asked for it (the go byte), so a run that is not
//! timed writes and reads nothing more. The exec is seen from the supervisor: the error
//! pipe is close-on-exec, so its end of file is the moment the kernel's `execve` of the
//! command passed its point of no return (the program's own start-up, the dynamic loader
//! of a dynamic binary included, is then part of "job runs and exits").

/// A moment of `run`'s start-up, in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Mark {
    /// `run` was called.
    Start,
    /// The GPUs are resolved and their leases taken (the device enumeration, the caller,
    /// the job's user).
    Leased,
    /// The job's plan is built: the vendor nodes, environment, program path, mount steps.
    Planned,
    /// The job's cgroup exists (cgroup v2 checked, the parent opened and swept).
    CgroupMade,
    /// The device program is loaded (after the parent's effective list was read).
    ProgramLoaded,
    /// The program is attached and the job's effective list checked.
    Attached,
    /// GPU memory limits set and read back, the job's record written.
    Limited,
    /// The job's init runs: `clone3` into the cgroup with new pid and mount namespaces
    /// (the child's first mark).
    InitStarted,
    /// The init read the supervisor's go byte (the supervisor's `--bind` included).
    Go,
    /// The init is in its cgroup namespace, its mounts private, the held paths open.
    Namespaces,
    /// The mount steps are done: sysfs, /proc, the private /dev with its nodes.
    Mounts,
    /// The command's process runs (forked by the init).
    CommandStarted,
    /// The command's process closed every fd it does not keep.
    FdsClosed,
    /// The command's process took the job's user, or dropped the capabilities of a root job.
    Identity,
    /// `no_new_privs` set and the signals reset: `execve` is called.
    ExecCalled,
    /// The supervisor saw the error pipe's end of file: the exec happened.
    Execd,
    /// The supervisor reaped the job's init: the command ran and exited, the namespace
    /// was killed.
    Exited,
    /// The job's cgroup is removed.
    CgroupRemoved,
    /// The leases are released: `run` returns.
    Released,
}

impl Mark {
    /// Every mark, in order.
    pub const ALL: [Mark; 19] = [
        Mark::Start,
        Mark::Leased,
        Mark::Planned,
        Mark::CgroupMade,
        Mark::ProgramLoaded,
        Mark::Attached,
        Mark::Limited,
        Mark::InitStarted,
        Mark::Go,
        Mark::Namespaces,
        Mark::Mounts,
        Mark::CommandStarted,
        Mark::FdsClosed,
        Mark::Identity,
        Mark::ExecCalled,
        Mark::Execd,
        Mark::Exited,
        Mark::CgroupRemoved,
        Mark::Released,
    ];

    /// The name of the phase that ends at this mark (none for [`Mark::Start`]).
    pub fn phase(self) -> &'static str {
        match self {
            Mark::Start => "",
            Mark::Leased => "resolve + lease",
            Mark::Planned => "plan (vendor nodes, env, mounts)",
            Mark::CgroupMade => "cgroup",
            Mark::ProgramLoaded => "program load",
            Mark::Attached => "attach + check",
            Mark::Limited => "limits + job record",
            Mark::InitStarted => "clone3 (cgroup, pid + mount ns)",
            Mark::Go => "go byte",
            Mark::Namespaces => "cgroup ns, private mounts",
            Mark::Mounts => "sysfs, /proc, private /dev",
            Mark::CommandStarted => "command process forked",
            Mark::FdsClosed => "close fds",
            Mark::Identity => "capability drop / user",
            Mark::ExecCalled => "no_new_privs, signals",
            Mark::Execd => "exec (kernel)",
            Mark::Exited => "job runs + exits, reaped",
            Mark::CgroupRemoved => "cgroup removed",
            Mark::Released => "leases released",
        }
    }

    /// The mark a child's record names (`n` from [`super::super::job::mark`]).
    pub(crate) fn of_child(n: u32) -> Option<Mark> {
        use super::super::job::mark;
        Some(match n {
            mark::INIT => Mark::InitStarted,
            mark::GO => Mark::Go,
            mark::NAMESPACES => Mark::Namespaces,
            mark::MOUNTS => Mark::Mounts,
            mark::COMMAND => Mark::CommandStarted,
            mark::FDS => Mark::FdsClosed,
            mark::IDENTITY => Mark::Identity,
            mark::EXEC => Mark::ExecCalled,
            _ => return None,
        })
    }
}

/// The marks of one `run` ([`super::run_timed`]): `CLOCK_MONOTONIC` in nanoseconds, or
/// none for a mark the run did not reach (a failure, an `--env-only`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartTimes {
    on: bool,
    ns: [u64; Mark::ALL.len()],
}

/// One phase of a [`StartTimes`]: from the previous mark reached to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// Where it ends.
    pub to: Mark,
    /// Its length in nanoseconds (0 where the clocks of two processes disagree by less
    /// than the scheduling between them).
    pub ns: u64,
}

impl StartTimes {
    /// Times that record (the job's side too).
    pub fn on() -> StartTimes {
        StartTimes {
            on: true,
            ..Default::default()
        }
    }

    /// Times that record nothing (what [`super::run`] passes: no cost).
    pub fn off() -> StartTimes {
        StartTimes::default()
    }

    /// Whether this records.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Records `m` now (nothing when off).
    pub fn mark(&mut self, m: Mark) {
        if self.on {
            self.set(m, super::super::job::monotonic_ns());
        }
    }

    /// Records `m` at `ns` (`CLOCK_MONOTONIC`; a child's record; nothing when off).
    pub fn set(&mut self, m: Mark, ns: u64) {
        if self.on
            && let Some(i) = Mark::ALL.iter().position(|x| *x == m)
        {
            self.ns[i] = ns;
        }
    }

    /// `CLOCK_MONOTONIC` of `m` in nanoseconds, if reached.
    pub fn at(&self, m: Mark) -> Option<u64> {
        let i = Mark::ALL.iter().position(|x| *x == m)?;
        Some(self.ns[i]).filter(|&t| t != 0)
    }

    /// The phases between the marks reached, in order (each from the previous mark
    /// reached).
    pub fn phases(&self) -> Vec<Phase> {
        let mut out = Vec::new();
        let mut prev: Option<u64> = None;
        for m in Mark::ALL {
            let Some(t) = self.at(m) else { continue };
            if let Some(p) = prev {
                out.push(Phase {
                    to: m,
                    ns: t.saturating_sub(p),
                });
            }
            prev = Some(prev.map_or(t, |p| p.max(t)));
        }
        out
    }

    /// From [`Mark::Start`] to the last mark reached, in nanoseconds.
    pub fn total_ns(&self) -> Option<u64> {
        let start = self.at(Mark::Start)?;
        let end = Mark::ALL.iter().rev().find_map(|&m| self.at(m))?;
        Some(end.saturating_sub(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing() {
        let mut t = StartTimes::off();
        t.mark(Mark::Start);
        t.set(Mark::Go, 5);
        assert_eq!(t.at(Mark::Start), None);
        assert!(t.phases().is_empty());
        assert_eq!(t.total_ns(), None);
    }

    #[test]
    fn phases_run_from_the_previous_mark_reached() {
        let mut t = StartTimes::on();
        t.set(Mark::Start, 1_000);
        t.set(Mark::Leased, 1_500);
        // Planned is skipped: the cgroup's phase starts at Leased.
        t.set(Mark::CgroupMade, 2_500);
        // A child's clock a little behind the supervisor's last mark: 0, and the next
        // phase starts from the later of the two.
        t.set(Mark::Limited, 3_000);
        t.set(Mark::InitStarted, 2_990);
        t.set(Mark::Go, 3_100);
        let p = t.phases();
        let got: Vec<(Mark, u64)> = p.iter().map(|p| (p.to, p.ns)).collect();
        assert_eq!(
            got,
            vec![
                (Mark::Leased, 500),
                (Mark::CgroupMade, 1_000),
                (Mark::Limited, 500),
                (Mark::InitStarted, 0),
                (Mark::Go, 100),
            ]
        );
        assert_eq!(t.total_ns(), Some(2_100));
    }

    #[test]
    fn every_child_mark_maps_to_a_distinct_mark() {
        use super::super::super::job::mark;
        let all = [
            mark::INIT,
            mark::GO,
            mark::NAMESPACES,
            mark::MOUNTS,
            mark::COMMAND,
            mark::FDS,
            mark::IDENTITY,
            mark::EXEC,
        ];
        let mut seen: Vec<Mark> = all.iter().filter_map(|&n| Mark::of_child(n)).collect();
        assert_eq!(seen.len(), all.len());
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), all.len());
        assert_eq!(Mark::of_child(0), None);
    }
}
