//! `drmtool slurm gres-conf` and `slurm task-env`.

use super::*;

/// `drmtool slurm ...`.
#[derive(Subcommand, Debug)]
pub(super) enum SlurmCmd {
    /// gres.conf lines, one per GPU in the ordering (the n-th is GPU index n): Name=gpu,
    /// Type=<driver>, File=</dev/nvidiaN for an NVIDIA GPU, else the render node, else
    /// /dev/accel/accelN, else the card node>, Cores=<local cores> where the GPU has NUMA
    /// affinity.
    #[command(after_help = "Examples:\n  drmtool slurm gres-conf >> /etc/slurm/gres.conf")]
    GresConf,
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

pub(super) fn slurm_cmd(c: &SlurmCmd, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{run, slurm};
    let all = match run::all_gpus() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("drmtool: slurm: {e}");
            return Exit::of_run(&e).into();
        }
    };
    match c {
        SlurmCmd::GresConf => emit_text(&slurm::gres_conf(&all, &slurm::topology()), out),
        SlurmCmd::TaskEnv { unconstrained } => {
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
            emit_text(&slurm::task_env(&idx, &all, !unconstrained), out)
        }
    }
}
