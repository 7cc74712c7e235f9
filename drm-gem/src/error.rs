//! The crate's error type: every kernel failure names the call (the C macro name of the
//! ioctl, or the syscall) and the errno.

use rustix::io::Errno;
use std::path::PathBuf;

/// Errors from this crate.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An ioctl failed. `name` is the C macro name, e.g. `DRM_IOCTL_MODE_CREATE_DUMB`,
    /// produced by the same macro that declares the call.
    Ioctl {
        /// C macro name of the request.
        name: &'static str,
        /// What the kernel returned.
        errno: Errno,
    },
    /// Another syscall failed (`fstat`, `mmap`, `readlink`, ...).
    Syscall {
        /// Name of the syscall.
        name: &'static str,
        /// What the kernel returned.
        errno: Errno,
    },
    /// Opening a device node failed.
    Open {
        /// The node.
        path: PathBuf,
        /// What the kernel returned.
        errno: Errno,
    },
    /// The file is not a DRM device node.
    NotDrm {
        /// Why it was rejected.
        why: String,
    },
    /// An argument was rejected before the kernel was asked (the kernel would reject it too,
    /// or the value cannot be represented in the ioctl's fields).
    InvalidArgument {
        /// What is wrong.
        what: String,
    },
    /// What was asked for does not exist here (no node of that driver, for example).
    NotFound {
        /// What was looked for, and what was found instead.
        what: String,
    },
    /// The kernel or driver lacks what this call needs (learned from a probe).
    Unsupported {
        /// The missing feature.
        feature: &'static str,
        /// Why it is known to be missing.
        reason: String,
    },
}

impl Error {
    pub(crate) fn ioctl(name: &'static str, errno: Errno) -> Self {
        Self::Ioctl { name, errno }
    }

    pub(crate) fn syscall(name: &'static str, errno: Errno) -> Self {
        Self::Syscall { name, errno }
    }

    /// The errno, when the failure came from the kernel.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Self::Ioctl { errno, .. } | Self::Syscall { errno, .. } | Self::Open { errno, .. } => {
                Some(*errno)
            }
            _ => None,
        }
    }

    /// True for [`Error::Unsupported`] and for the errnos a kernel uses for "no such ioctl
    /// or feature here" (ENOTTY, EOPNOTSUPP, ENOSYS).
    pub fn is_not_supported(&self) -> bool {
        matches!(self, Self::Unsupported { .. })
            || matches!(
                self.errno(),
                Some(Errno::NOTTY | Errno::OPNOTSUPP | Errno::NOSYS)
            )
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Ioctl { name, errno } | Self::Syscall { name, errno } => {
                write!(f, "{name}: {errno} (E{})", errno_name(*errno))
            }
            Self::Open { path, errno } => write!(f, "open {}: {errno}", path.display()),
            Self::NotDrm { why } => write!(f, "not a DRM device node: {why}"),
            Self::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            Self::NotFound { what } => write!(f, "not found: {what}"),
            Self::Unsupported { feature, reason } => {
                write!(
                    f,
                    "not supported by this kernel/driver: {feature} ({reason})"
                )
            }
        }
    }
}

/// The symbolic name of the errnos this crate's callers match on most.
fn errno_name(e: Errno) -> &'static str {
    match e {
        Errno::PERM => "PERM",
        Errno::NOENT => "NOENT",
        Errno::INTR => "INTR",
        Errno::IO => "IO",
        Errno::BADF => "BADF",
        Errno::AGAIN => "AGAIN",
        Errno::NOMEM => "NOMEM",
        Errno::ACCESS => "ACCES",
        Errno::FAULT => "FAULT",
        Errno::BUSY => "BUSY",
        Errno::EXIST => "EXIST",
        Errno::NODEV => "NODEV",
        Errno::INVAL => "INVAL",
        Errno::NOSPC => "NOSPC",
        Errno::NOTTY => "NOTTY",
        Errno::RANGE => "RANGE",
        Errno::NOSYS => "NOSYS",
        Errno::OPNOTSUPP => "OPNOTSUPP",
        Errno::TIME => "TIME",
        Errno::TIMEDOUT => "TIMEDOUT",
        Errno::OVERFLOW => "OVERFLOW",
        _ => "?",
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e.errno() {
            Some(errno) => std::io::Error::new(std::io::Error::from(errno).kind(), e),
            None => std::io::Error::other(e),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_ioctl_and_errno() {
        let e = Error::ioctl("DRM_IOCTL_GET_CAP", Errno::NOTTY);
        let s = e.to_string();
        assert!(s.starts_with("DRM_IOCTL_GET_CAP: "), "{s}");
        assert!(s.ends_with("(ENOTTY)"), "{s}");
        assert!(e.is_not_supported());
        assert!(!Error::ioctl("X", Errno::INVAL).is_not_supported());
    }
}
