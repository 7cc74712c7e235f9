//! The one table of exit statuses, and the mapping from the library's typed errors to it.

use crate::cdi::CdiError;
use crate::gpu::SelectError;
use crate::isolate::run::{self, RunError};
use crate::isolate::who::WhoError;
use crate::kms::KmsError;
use std::process::ExitCode;

/// What a `drmtool` process exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// 0: done (also when some processes could not be read: they are listed).
    Success = 0,
    /// 1: the command could not do its job (an ioctl failed, the output could not be
    /// written).
    Failure = 1,
    /// 2: bad usage (an unknown option, a malformed value or GPU spec, a refused identity).
    Usage = 2,
    /// 3: a GPU spec, `--pid`, connector, mode or CRTC named nothing that is there.
    NoMatch = 3,
    /// 4: this machine has no DRM devices at all (`pmem list`: no persistent memory).
    NoDevices = 4,
    /// 5: `pick`/`run --pick` found too few eligible or unleased GPUs.
    NoGpu = 5,
    /// 125: `run` could not set up the isolation (not root included), as `env`/`chroot`
    /// use 125 for their own failures.
    Setup = run::EXIT_SETUP,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

impl Exit {
    /// For a selection that failed: 4 without devices, 3 when nothing matched.
    pub fn of_select(e: &SelectError) -> Exit {
        match e {
            SelectError::NoDevices(_) => Exit::NoDevices,
            _ => Exit::NoMatch,
        }
    }

    /// For `run`, `pick` and `slurm`: 2 usage (and a refused identity), 3/4 as
    /// [`Exit::of_select`], 5 no free GPU, 125 the isolation could not be set up.
    pub fn of_run(e: &RunError) -> Exit {
        match e {
            RunError::Who(WhoError::NotRoot) => Exit::Setup,
            RunError::Usage(_) | RunError::Spec(_) | RunError::Who(_) => Exit::Usage,
            RunError::Select(s) => Exit::of_select(s),
            RunError::NoGpu(_) => Exit::NoGpu,
            RunError::Near(crate::topo::near::NearError::Spec { .. }) => Exit::Usage,
            RunError::Near(_) | RunError::NearOf { .. } => Exit::NoMatch,
            RunError::Mem(crate::dmem::DmemError::BadSize { .. }) => Exit::Usage,
            RunError::Setup(_)
            | RunError::Anchor(_)
            | RunError::Unidentified { .. }
            | RunError::Bind(_)
            | RunError::Mem(_) => Exit::Setup,
        }
    }

    /// For `cdi generate`: 3/4 as [`Exit::of_select`], else 1 (no GPU could be described,
    /// the spec could not be written).
    pub fn of_cdi(e: &CdiError) -> Exit {
        match e {
            CdiError::Select(s) => Exit::of_select(s),
            _ => Exit::Failure,
        }
    }

    /// For `kms`: 3 when a device, connector, mode or CRTC named is not there, 4 without
    /// devices, else 1.
    pub fn of_kms(e: &KmsError) -> Exit {
        match e {
            KmsError::Select(s) => Exit::of_select(s),
            KmsError::NoKmsDevice { .. } | KmsError::NotFound { .. } => Exit::NoMatch,
            _ => Exit::Failure,
        }
    }
}
