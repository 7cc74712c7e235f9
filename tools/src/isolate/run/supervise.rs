//! The supervisor's side of a job: clone its init into the cgroup, let it go, forward
//! signals, wait ([`super`]).

use super::RunError;
use super::times::{Mark, StartTimes};
use crate::isolate::anchor::JobCgroup;
use crate::isolate::job::{self, JobPlan};
use rustix::fd::AsFd;

/// Clones the job's init into `cg`, pins it with `bind` before it may go on (a binding
/// that does not take ends it unrun), forwards signals until it exits, and returns the
/// command's status. `times` gets the job's marks (its init's and command's records, the
/// exec and the reaping).
pub(super) fn supervise(
    plan: &JobPlan,
    cg: &JobCgroup,
    bind: Option<&crate::isolate::bind::Binding>,
    times: &mut StartTimes,
) -> Result<u8, RunError> {
    use crate::sys_call::{self, SigSet};
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| RunError::Setup(format!("pipe: {e}")))?;
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| RunError::Setup(format!("pipe: {e}")))?;
    // Blocked before the clone, so that none is lost; the init keeps them blocked and
    // waits for them, the command's process unblocks them before its exec.
    let mut sigs = job::FORWARDED.to_vec();
    sigs.push(libc::SIGCHLD);
    let set = SigSet::of(&sigs);
    let saved = sys_call::block_signals(&set);
    let spec = sys_call::CloneSpec {
        namespaces: true,
        cgroup: Some(cg.fd.as_fd()),
    };
    let init = match sys_call::clone_job(spec) {
        Ok(sys_call::Cloned::Child) => {
            drop(go_w);
            drop(err_r);
            job::init_main(plan, go_r, err_w)
        }
        Ok(sys_call::Cloned::Parent(pid)) => pid,
        Err(e) => {
            sys_call::set_signal_mask(&saved);
            let hint = match e {
                rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS => {
                    " (clone3 with CLONE_INTO_CGROUP needs Linux 5.7)"
                }
                rustix::io::Errno::PERM => " (new namespaces need CAP_SYS_ADMIN)",
                _ => "",
            };
            return Err(RunError::Setup(format!(
                "clone3 of the job into {}: {e}{hint}",
                cg.path.display()
            )));
        }
    };
    drop(go_r);
    drop(err_w);
    // The binding is written with the init in the cgroup: kernels before 6.3 give a task
    // that clone3 put into a cpuset with CLONE_INTO_CGROUP its parent's CPUs and nodes, and
    // only a change of the cpuset moves the tasks already in it ([`crate::isolate::bind`]).
    if let Some(b) = bind
        && let Err(e) = crate::isolate::bind::apply(cg.fd.as_fd(), &cg.path, b)
    {
        // No go byte: the init reads EOF and exits before anything of the job runs.
        drop(go_w);
        let _ = rustix::process::waitpid(Some(init), rustix::process::WaitOptions::empty());
        sys_call::set_signal_mask(&saved);
        return Err(e.into());
    }
    let _ = rustix::io::write(&go_w, &[1]);
    drop(go_w);
    let failed = job::read_report(&err_r, &mut |m, ns| {
        if let Some(m) = Mark::of_child(m) {
            times.set(m, ns);
        }
    });
    if failed.is_none() {
        times.mark(Mark::Execd);
    }
    let ipid = init.as_raw_nonzero().get();
    let mut status = None;
    while status.is_none() {
        if failed.is_none()
            && let Some((sig, code)) =
                sys_call::wait_signal(&set, std::time::Duration::from_millis(100))
            && sig != libc::SIGCHLD
            && code != libc::SI_KERNEL
        {
            let _ = sys_call::send_signal(ipid, sig);
        }
        match rustix::process::waitpid(Some(init), rustix::process::WaitOptions::NOHANG) {
            Ok(Some((_, st))) => {
                status = Some(match (st.exit_status(), st.terminating_signal()) {
                    (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
                    (None, Some(s)) => u8::try_from(128 + s).unwrap_or(255),
                    _ => 1,
                });
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => {
                if failed.is_some() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            Err(e) => {
                sys_call::set_signal_mask(&saved);
                return Err(RunError::Setup(format!("waiting for the job: {e}")));
            }
        }
    }
    times.mark(Mark::Exited);
    sys_call::set_signal_mask(&saved);
    if let Some((step, errno)) = failed {
        let what = plan.describe(step);
        let hint = match (step, errno) {
            (job::phase::EXEC, rustix::io::Errno::ACCESS) => " (the job's user cannot execute it)",
            (job::phase::EXEC, rustix::io::Errno::NOENT) => {
                " (not found in the job's mount namespace)"
            }
            _ => "",
        };
        return Err(RunError::Setup(format!("{what}: {errno}{hint}")));
    }
    Ok(status.unwrap_or(1))
}
