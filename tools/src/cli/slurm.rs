//! `drmtool slurm gres-conf`, `slurm task-env`, and the root hooks `slurm prolog` and
//! `slurm epilog` (a job's `gpumem` budget as its dmem.max).

use super::*;
use std::path::PathBuf;

/// `drmtool slurm ...`.
#[derive(Subcommand, Debug)]
pub(super) enum SlurmCmd {
    /// gres.conf lines, one per GPU in the ordering (the n-th is GPU index n): Name=gpu,
    /// Type=<driver>, File=</dev/nvidiaN for an NVIDIA GPU, else the render node, else
    /// /dev/accel/accelN, else the card node>, Cores=<local cores> where the GPU has NUMA
    /// affinity, Links=<a count per GPU line from drmtool topo's classes: -1 itself, PIX 4,
    /// PXB 3, PHB 2, NODE 1, SYS 0> where any two GPUs have a class.
    #[command(
        after_help = "Examples:\n  drmtool slurm gres-conf >> /etc/slurm/gres.conf\n  \
                            drmtool slurm gres-conf --gpumem >> /etc/slurm/gres.conf"
    )]
    GresConf {
        /// Also the node's GPU memory as a count GRES for `drmtool slurm prolog`:
        /// `Name=gpumem Count=<bytes>`, the sum of the GPUs' dmem regions (a comment names
        /// each GPU without one); the kernel must have the dmem controller. slurm.conf
        /// then needs `GresTypes=gpu,gpumem` and the node's `Gres=...,gpumem:<bytes>`.
        #[arg(long)]
        gpumem: bool,
    },
    /// Slurm's root Prolog: the job's `gpumem` budget (`--gres=gpu:1,gpumem:4G`) written as
    /// dmem.max of its cgroup before any of its steps starts, split evenly among its GPUs
    /// on the node, read back; nothing for a job that asks no budget. Fails (exit 125, so
    /// Slurm drains the node and requeues the job) where it cannot be enforced.
    #[command(after_help = "Examples:\n  Prolog=/etc/slurm/prolog.d/drmtool  \
                            (a script: exec /usr/bin/drmtool slurm prolog)\n  \
                            Epilog=/etc/slurm/epilog.d/drmtool  \
                            (a script: exec /usr/bin/drmtool slurm epilog)")]
    Prolog {
        #[command(flatten)]
        at: HookArgs,
        /// squeue's path (a Prolog runs without a search path).
        #[arg(long, default_value = "/usr/bin/squeue")]
        squeue: PathBuf,
    },
    /// Slurm's root Epilog: removes the job's cgroup where the Prolog made it and none of
    /// the job's steps ran (Slurm removes it otherwise).
    Epilog {
        #[command(flatten)]
        at: HookArgs,
    },
    /// For a TaskProlog: `export KEY=VALUE` lines of the vendor variables (and
    /// DRMTOOL_GPUS) for the GPUs Slurm gave the step (SLURM_STEP_GPUS, else
    /// SLURM_JOB_GPUS: indices in gres-conf order); nothing without them. CUDA_VISIBLE_DEVICES,
    /// ROCR_VISIBLE_DEVICES and ZE_AFFINITY_MASK count among the step's GPUs (0..n-1), as a
    /// job under ConstrainDevices=yes, which opens only its GPUs, numbers them.
    #[command(after_help = "Examples:\n  TaskProlog=/usr/local/sbin/drm-task-env  \
                            (a script: exec drmtool slurm task-env)")]
    TaskEnv {
        /// The cluster runs without ConstrainDevices=yes (a job opens every GPU): count
        /// the positions among all the machine's GPUs, as `run --env-only` does.
        #[arg(long)]
        unconstrained: bool,
    },
}

/// Where the Prolog and Epilog find the job cgroups.
#[derive(clap::Args, Debug)]
pub(super) struct HookArgs {
    /// slurmd's step scope, relative to the cgroup root (default: by probe,
    /// system.slice/<node>_slurmstepd.scope, then system.slice/slurmstepd.scope).
    #[arg(long)]
    scope: Option<PathBuf>,
}

/// slurmd's variables for the Prolog and Epilog.
fn hook_input(at: &HookArgs, squeue: PathBuf) -> crate::isolate::slurm_mem::PrologInput {
    crate::isolate::slurm_mem::PrologInput {
        job_id: std::env::var("SLURM_JOB_ID").ok(),
        node: std::env::var("SLURMD_NODENAME").ok(),
        job_gpus: std::env::var("SLURM_JOB_GPUS").ok(),
        squeue,
        scope: at.scope.clone(),
    }
}

/// The exit status of a Prolog/Epilog failure: 2 outside Slurm, else 125 (the limit
/// cannot be set up).
fn hook_exit(e: &crate::isolate::slurm_mem::GpumemError) -> Exit {
    use crate::isolate::slurm_mem::GpumemError;
    match e {
        GpumemError::NotInProlog { .. } => Exit::Usage,
        _ => Exit::Setup,
    }
}

pub(super) fn slurm_cmd(c: &SlurmCmd, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::slurm_mem;
    match c {
        SlurmCmd::Prolog { at, squeue } => {
            match slurm_mem::prolog(&hook_input(at, squeue.clone())) {
                Ok(o) => emit_text(&render_prolog(&o), out),
                Err(e) => {
                    eprintln!("drmtool: slurm prolog: {e}");
                    hook_exit(&e).into()
                }
            }
        }
        SlurmCmd::Epilog { at } => match slurm_mem::epilog(&hook_input(at, PathBuf::new())) {
            Ok(o) => emit_text(&render_epilog(o), out),
            Err(e) => {
                eprintln!("drmtool: slurm epilog: {e}");
                hook_exit(&e).into()
            }
        },
        SlurmCmd::GresConf { gpumem } => with_gpus(out, |all, out| gres_conf(all, *gpumem, out)),
        SlurmCmd::TaskEnv { unconstrained } => {
            with_gpus(out, |all, out| task_env(all, *unconstrained, out))
        }
    }
}

/// `f` with the machine's GPUs in the ordering, or the exit status of not having them.
fn with_gpus(
    out: &mut dyn Write,
    f: impl FnOnce(&[crate::gpu::Gpu], &mut dyn Write) -> ExitCode,
) -> ExitCode {
    match crate::isolate::run::all_gpus() {
        Ok(all) => f(&all, out),
        Err(e) => {
            eprintln!("drmtool: slurm: {e}");
            Exit::of_run(&e).into()
        }
    }
}

/// `slurm gres-conf [--gpumem]`.
fn gres_conf(all: &[crate::gpu::Gpu], gpumem: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{slurm, slurm_mem};
    let places = crate::topo::report::places_at(all, std::path::Path::new("/sys"));
    let pair = |a: usize, b: usize| crate::topo::report::pair_class(places.get(a)?, places.get(b)?);
    let mut text = slurm::gres_conf_linked(all, &slurm::topology(), &pair);
    if gpumem {
        let cap = match crate::dmem::Capacity::read(&crate::dmem::root()) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("drmtool: slurm gres-conf --gpumem: {e}");
                return Exit::Failure.into();
            }
        };
        match slurm_mem::gres_conf_line(all, cap.as_ref()) {
            Some(l) => text.push_str(&l),
            None => {
                eprintln!(
                    "drmtool: slurm gres-conf --gpumem: this kernel has no dmem cgroup \
                     controller (no dmem.capacity in the cgroup root): GPU memory budgets \
                     cannot be enforced here"
                );
                return Exit::Setup.into();
            }
        }
    }
    emit_text(&text, out)
}

/// `slurm task-env [--unconstrained]`.
fn task_env(all: &[crate::gpu::Gpu], unconstrained: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::slurm;
    let step = std::env::var("SLURM_STEP_GPUS").ok();
    let job = std::env::var("SLURM_JOB_GPUS").ok();
    let idx = match slurm::job_gpus(step.as_deref(), job.as_deref(), all.len()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("drmtool: slurm task-env: {e}");
            return Exit::Usage.into();
        }
    };
    if idx.is_empty() {
        return ExitCode::SUCCESS;
    }
    emit_text(&slurm::task_env(&idx, all, !unconstrained), out)
}

/// The Prolog's one line.
fn render_prolog(o: &crate::isolate::slurm_mem::PrologOutcome) -> String {
    use crate::isolate::slurm_mem::PrologOutcome;
    match o {
        PrologOutcome::NotAsked { job } => format!("job {job}: no gpumem asked, no limit\n"),
        PrologOutcome::Limited {
            job,
            budget,
            cgroup,
            settings,
        } => {
            let each: Vec<String> = settings
                .iter()
                .map(|s| format!("{} {}", s.region, s.value))
                .collect();
            format!(
                "job {job}: gpumem {budget} bytes: {}/dmem.max: {}\n",
                cgroup.display(),
                each.join(", ")
            )
        }
    }
}

/// The Epilog's one line.
fn render_epilog(o: crate::isolate::slurm_mem::EpilogOutcome) -> String {
    use crate::isolate::slurm_mem::EpilogOutcome;
    match o {
        EpilogOutcome::Gone => "job cgroup: already removed\n",
        EpilogOutcome::Removed => "job cgroup: removed (no step of the job ran)\n",
        EpilogOutcome::Busy => "job cgroup: processes remain; Slurm removes it\n",
    }
    .to_string()
}
