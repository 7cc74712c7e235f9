//! [`Probe`]: the outcome of one harmless probe of a uapi family (supported or not, the
//! errno class that decided it, the call, what else it learned), shared by `drmtool caps`
//! and `drmtool hmm-probe`.

use crate::errno::error_class;
use serde::Serialize;

/// The outcome of one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// Whether the family works here.
    pub supported: bool,
    /// `ok` when supported; else the errno class of the probe that decided it (`ENOTTY`:
    /// the kernel has no such ioctl, `EINVAL`: an older DRM core or unknown cap,
    /// `EOPNOTSUPP`: the driver lacks it, `ENOSYS`, `ENOENT`: no such node, ...), or
    /// `skipped` when an earlier probe it needs failed, `off` for a virtio-gpu parameter
    /// the kernel knows and answers 0.
    pub class: String,
    /// The call that decided it (`DRM_IOCTL_MODE_CREATE_DUMB`, `open(/dev/udmabuf)`).
    pub probe: String,
    /// What else the probe learned, or why it was skipped.
    pub detail: Option<String>,
}

impl Probe {
    pub(crate) fn ok(probe: &str, detail: Option<String>) -> Self {
        Self {
            supported: true,
            class: "ok".into(),
            probe: probe.into(),
            detail,
        }
    }

    pub(crate) fn failed(probe: &str, e: &drm_gem::Error) -> Self {
        Self {
            supported: false,
            class: error_class(e),
            probe: probe.into(),
            detail: Some(e.to_string()),
        }
    }

    pub(crate) fn skipped(probe: &str, why: &str) -> Self {
        Self {
            supported: false,
            class: "skipped".into(),
            probe: probe.into(),
            detail: Some(why.into()),
        }
    }

    pub(crate) fn of<T>(
        probe: &str,
        r: &drm_gem::Result<T>,
        detail: impl FnOnce(&T) -> Option<String>,
    ) -> Self {
        match r {
            Ok(v) => Self::ok(probe, detail(v)),
            Err(e) => Self::failed(probe, e),
        }
    }
}
