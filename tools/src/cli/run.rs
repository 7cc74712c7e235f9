//! `drmtool run`: flags to a [`RunRequest`], [`run::run`]'s result to an exit status.

use super::{Exit, seconds};
use crate::dmem::{Knob, LimitRequest};
use crate::gpu::GpuSpec;
use crate::isolate::lease::Sharing;
use crate::isolate::run::{self, RunError, RunRequest, StartTimes};
use crate::isolate::who::UserSpec;
use std::io::Write;
use std::process::ExitCode;

/// `drmtool run` arguments.
#[derive(clap::Args, Debug)]
pub(super) struct RunArgs {
    /// GPUs, comma-separated or repeated, as GPU specs: an index of `drmtool devices`, a
    /// PCI bus id, a driver (all its devices), a node path or name, `226:N` or a by-path
    /// name (the GPU of that node). With --pick: the candidates (default: every GPU).
    #[arg(long = "gpu", value_delimiter = ',', required_unless_present = "pick")]
    gpus: Vec<GpuSpec>,
    /// Choose N GPUs as `drmtool pick` does and lease them for the job's lifetime.
    /// Exit 5 when none is free.
    #[arg(long, value_name = "N")]
    pick: Option<usize>,
    /// With --pick: near this place, as `drmtool pick --near` (numa:N, cpus:LIST, gpu:SEL,
    /// net:IFACE, path:FILE).
    #[arg(long, value_name = "SPEC", requires = "pick")]
    near: Option<crate::topo::near::Near>,
    /// Pin the job to its GPUs' local CPUs and NUMA nodes (cgroup cpuset.cpus and
    /// cpuset.mems, read back before the job starts; refused for a GPU not on PCI).
    #[arg(long)]
    bind: bool,
    /// Share each GPU with up to K holders (that also say --shared K) instead of holding
    /// it alone.
    #[arg(long, value_name = "K")]
    shared: Option<u32>,
    /// While the GPUs are leased by others, retry for up to SECS seconds.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    wait: f64,
    /// Run the job as this user: NAME, UID, NAME:GID or UID:GID (its groups as
    /// initgroups, HOME/USER/LOGNAME/SHELL as runuser sets them). Root callers only;
    /// through sudo the job runs as the calling user.
    #[arg(long, value_name = "USER", conflicts_with = "as_root")]
    user: Option<String>,
    /// Run the job as root, scoped to its GPUs but not contained (capabilities reduced to
    /// Docker's default set without MKNOD and NET_RAW). Root callers only.
    #[arg(long)]
    as_root: bool,
    /// Let the job keep this inherited fd (besides 0-2; repeatable). A GPU node outside the
    /// job is refused.
    #[arg(long = "keep-fd", value_name = "N")]
    keep_fds: Vec<i32>,
    /// Where the job cgroups go, relative to /sys/fs/cgroup (default drmtool.slice); every
    /// directory on the way must be root's alone. Root callers only.
    #[arg(long, value_name = "PATH")]
    cgroup_parent: Option<std::path::PathBuf>,
    /// GPU memory the job may have charged, enforced by the kernel (the dmem cgroup
    /// controller, Linux 6.14+): SIZE (8M, 4G) on every region of its GPUs, or
    /// REGION=SIZE (repeatable; `drmtool devices` shows the regions). Written to the
    /// job's cgroup before it starts and read back; exit 125 and nothing runs where it
    /// cannot be (no dmem, a GPU whose driver registers no region).
    #[arg(long = "mem-max", value_name = "[REGION=]SIZE")]
    mem_max: Vec<String>,
    /// GPU memory protected from eviction by other jobs' pressure, best effort (dmem.low):
    /// as --mem-max.
    #[arg(long = "mem-low", value_name = "[REGION=]SIZE")]
    mem_low: Vec<String>,
    /// GPU memory protected from eviction, hard (dmem.min): as --mem-max.
    #[arg(long = "mem-min", value_name = "[REGION=]SIZE")]
    mem_min: Vec<String>,
    /// Present the chosen nodes as card0.., renderD128.. in the order given.
    #[arg(long)]
    renumber: bool,
    /// Print the vendor variables for these GPUs (KEY=VALUE lines) and run nothing.
    #[arg(long)]
    env_only: bool,
    /// After the job, print where its start-up went to stderr: one line per phase (lease,
    /// cgroup, device program, clone3, mounts, capability drop, exec, ...) in ms.
    #[arg(long)]
    timings: bool,
    /// The command and its arguments.
    #[arg(last = true)]
    argv: Vec<std::ffi::OsString>,
}

fn request(a: RunArgs) -> Result<RunRequest, RunError> {
    let gpus = a.gpus;
    let wait = seconds(a.wait).ok_or_else(|| {
        RunError::Usage("--wait needs a number of seconds >= 0 (hint: --wait 30)".into())
    })?;
    if a.shared == Some(0) {
        return Err(RunError::Usage(
            "--shared needs a number of holders >= 1 (hint: --shared 2)".into(),
        ));
    }
    let sharing = a.shared.map_or(Sharing::Exclusive, Sharing::Shared);
    let user = a.user.as_deref().map(UserSpec::parse).transpose()?;
    let mut mem = Vec::new();
    for (knob, args) in [
        (Knob::Max, &a.mem_max),
        (Knob::Low, &a.mem_low),
        (Knob::Min, &a.mem_min),
    ] {
        for arg in args {
            mem.push(LimitRequest::parse(knob, arg)?);
        }
    }
    Ok(RunRequest {
        gpus,
        renumber: a.renumber,
        env_only: a.env_only,
        argv: a.argv,
        pick: a.pick.map(|n| run::PickRequest {
            n,
            sharing,
            wait,
            want: crate::isolate::pick::Want {
                near: a.near,
                ..Default::default()
            },
        }),
        user,
        as_root: a.as_root,
        keep_fds: a.keep_fds,
        shared: a.shared,
        wait,
        cgroup_parent: a.cgroup_parent,
        mem,
        bind: a.bind,
        caller: None,
    })
}

pub(super) fn exec(a: RunArgs, out: &mut dyn Write) -> ExitCode {
    let mut warn = |w: &run::RunWarning| eprintln!("drmtool: run: warning: {w}");
    let mut times = if a.timings {
        StartTimes::on()
    } else {
        StartTimes::off()
    };
    let result = request(a).and_then(|r| run::run_timed(&r, out, &mut warn, &mut times));
    if times.is_on() {
        eprint!("{}", timings_text(&times));
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("drmtool: run: {e}");
            Exit::of_run(&e).into()
        }
    }
}

/// `--timings`: one line per phase reached, then the total.
fn timings_text(times: &StartTimes) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut text = String::new();
    let phases = times.phases();
    for p in &phases {
        text.push_str(&format!(
            "drmtool: run: timing: {:<34} {:>9.3} ms\n",
            p.to.phase(),
            ms(p.ns)
        ));
    }
    if let Some(t) = times.total_ns().filter(|_| !phases.is_empty()) {
        text.push_str(&format!(
            "drmtool: run: timing: {:<34} {:>9.3} ms\n",
            "total",
            ms(t)
        ));
    }
    text
}
