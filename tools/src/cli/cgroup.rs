//! `drmtool cgroup devices|deny-gpus|show-gpus|allow-gpus`: flags to [`crate::isolate::inspect`] and
//! [`crate::isolate::deny`] calls, their results rendered.

use super::{emit_json, emit_text};
use crate::isolate::{deny, inspect};
use std::io::Write;
use std::process::ExitCode;

/// `drmtool cgroup ...`.
#[derive(clap::Subcommand, Debug)]
pub(super) enum CgroupCmd {
    /// What a cgroup v2 may open: its device programs read back as rules (this drmtool's
    /// exactly, runc/crun/systemd device lists decoded, anything else "opaque").
    #[command(after_help = "Examples:\n  drmtool cgroup devices\n  \
                            drmtool cgroup devices system.slice/docker-1234.scope --json")]
    Devices {
        /// The cgroup: a path under /sys/fs/cgroup or absolute (default: drmtool's own).
        cgroup: Option<String>,
    },
    /// "No GPU outside a job": attach a device program to CGROUP that denies every GPU node
    /// (DRM 226:*, accel 261:*, whole majors, so hot-added GPUs are covered), for
    /// user.slice and the login sessions of a shared server. Jobs started by `drmtool run`
    /// live under drmtool.slice, outside it. Idempotent.
    #[command(after_help = "Examples:\n  drmtool cgroup deny-gpus user.slice\n  \
                            drmtool cgroup devices user.slice")]
    DenyGpus {
        /// The cgroup: a path under /sys/fs/cgroup or absolute.
        cgroup: String,
    },
    /// Whether deny-gpus applies to CGROUP (attached there or to an ancestor).
    #[command(after_help = "Example:\n  drmtool cgroup show-gpus user.slice/user-1000.slice")]
    ShowGpus {
        /// The cgroup: a path under /sys/fs/cgroup or absolute.
        cgroup: String,
    },
    /// Undo deny-gpus: detach the programs deny-gpus attached to CGROUP.
    #[command(after_help = "Example:\n  drmtool cgroup allow-gpus user.slice")]
    AllowGpus {
        /// The cgroup: a path under /sys/fs/cgroup or absolute.
        cgroup: String,
    },
}

pub(super) fn exec(c: &CgroupCmd, json: bool, out: &mut dyn Write) -> ExitCode {
    let (what, r) = match c {
        CgroupCmd::Devices { cgroup } => {
            return match inspect::resolve(cgroup.as_deref()).and_then(|d| inspect::inspect(&d)) {
                Ok(r) if json => emit_json(&r, out),
                Ok(r) => emit_text(&inspect::render(&r), out),
                Err(e) => {
                    eprintln!("drmtool: cgroup devices: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        CgroupCmd::ShowGpus { cgroup } => {
            return match deny::show(cgroup) {
                Ok(o) if json => emit_json(&o, out),
                Ok(o) => emit_text(&deny::render_shown(&o), out),
                Err(e) => {
                    eprintln!("drmtool: cgroup show-gpus: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        CgroupCmd::DenyGpus { cgroup } => ("deny-gpus", deny::deny_gpus(cgroup)),
        CgroupCmd::AllowGpus { cgroup } => ("allow-gpus", deny::allow_gpus(cgroup)),
    };
    match r {
        Ok(o) if json => emit_json(&o, out),
        Ok(o) => emit_text(&deny::render(&o), out),
        Err(e) => {
            eprintln!("drmtool: cgroup {what}: {e}");
            ExitCode::FAILURE
        }
    }
}
