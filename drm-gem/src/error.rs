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
        /// The errno the probe's call answered (ENOTTY for an unknown ioctl, EINVAL for an
        /// unknown cap, ...), or `None` when no call failed (the driver's name, a missing
        /// file).
        errno: Option<Errno>,
    },
    /// The kernel's reply to a successful call is impossible (an id or handle 0, a count
    /// that disagrees with what was asked): the call is not trusted.
    BadReply {
        /// The C macro name of the ioctl (or the name of the syscall, such as `mmap`).
        ioctl: &'static str,
        /// What is impossible about the reply.
        what: &'static str,
    },
}

impl Error {
    pub(crate) fn ioctl(name: &'static str, errno: Errno) -> Self {
        Self::Ioctl { name, errno }
    }

    pub(crate) fn syscall(name: &'static str, errno: Errno) -> Self {
        Self::Syscall { name, errno }
    }

    /// The errno, when the failure came from the kernel (for [`Error::Unsupported`], the
    /// errno of the probe that found the feature missing, if a call failed).
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Self::Ioctl { errno, .. } | Self::Syscall { errno, .. } | Self::Open { errno, .. } => {
                Some(*errno)
            }
            Self::Unsupported { errno, .. } => *errno,
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
                write!(f, "{name}: {errno} (")?;
                write_errno_name(f, *errno)?;
                f.write_str(")")
            }
            Self::Open { path, errno } => write!(f, "open {}: {errno}", path.display()),
            Self::NotDrm { why } => write!(f, "not a DRM device node: {why}"),
            Self::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            Self::NotFound { what } => write!(f, "not found: {what}"),
            Self::Unsupported {
                feature, reason, ..
            } => {
                write!(
                    f,
                    "not supported by this kernel/driver: {feature} ({reason})"
                )
            }
            Self::BadReply { ioctl, what } => {
                write!(f, "{ioctl}: impossible reply from the kernel: {what}")
            }
        }
    }
}

/// The errno's symbolic name, or `E<number>` for a number Linux does not define.
fn write_errno_name(f: &mut core::fmt::Formatter<'_>, e: Errno) -> core::fmt::Result {
    match errno_name(e) {
        Some(n) => f.write_str(n),
        None => write!(f, "E{}", e.raw_os_error()),
    }
}

/// The C name of an errno (`"ENOTTY"`), for every errno Linux defines: the user-visible
/// ones of `asm-generic/errno-base.h` and `errno.h` (1 to 133; 41 and 58 are unused), and
/// the kernel-internal ones of `linux/errno.h` (512 to 531) that can leak out of a driver.
/// `None` for any other number (Display shows those as `E<number>`).
pub fn errno_name(e: Errno) -> Option<&'static str> {
    let n = usize::try_from(e.raw_os_error()).ok()?;
    let name = match n {
        1..=133 => USER_ERRNOS[n - 1],
        512..=531 => KERNEL_ERRNOS[n - 512],
        _ => "",
    };
    (!name.is_empty()).then_some(name)
}

/// Errnos 1 to 133 in order ("" for the unused numbers 41 and 58).
const USER_ERRNOS: [&str; 133] = [
    "EPERM",
    "ENOENT",
    "ESRCH",
    "EINTR",
    "EIO",
    "ENXIO",
    "E2BIG",
    "ENOEXEC",
    "EBADF",
    "ECHILD",
    "EAGAIN",
    "ENOMEM",
    "EACCES",
    "EFAULT",
    "ENOTBLK",
    "EBUSY",
    "EEXIST",
    "EXDEV",
    "ENODEV",
    "ENOTDIR",
    "EISDIR",
    "EINVAL",
    "ENFILE",
    "EMFILE",
    "ENOTTY",
    "ETXTBSY",
    "EFBIG",
    "ENOSPC",
    "ESPIPE",
    "EROFS",
    "EMLINK",
    "EPIPE",
    "EDOM",
    "ERANGE",
    "EDEADLK",
    "ENAMETOOLONG",
    "ENOLCK",
    "ENOSYS",
    "ENOTEMPTY",
    "ELOOP",
    "",
    "ENOMSG",
    "EIDRM",
    "ECHRNG",
    "EL2NSYNC",
    "EL3HLT",
    "EL3RST",
    "ELNRNG",
    "EUNATCH",
    "ENOCSI",
    "EL2HLT",
    "EBADE",
    "EBADR",
    "EXFULL",
    "ENOANO",
    "EBADRQC",
    "EBADSLT",
    "",
    "EBFONT",
    "ENOSTR",
    "ENODATA",
    "ETIME",
    "ENOSR",
    "ENONET",
    "ENOPKG",
    "EREMOTE",
    "ENOLINK",
    "EADV",
    "ESRMNT",
    "ECOMM",
    "EPROTO",
    "EMULTIHOP",
    "EDOTDOT",
    "EBADMSG",
    "EOVERFLOW",
    "ENOTUNIQ",
    "EBADFD",
    "EREMCHG",
    "ELIBACC",
    "ELIBBAD",
    "ELIBSCN",
    "ELIBMAX",
    "ELIBEXEC",
    "EILSEQ",
    "ERESTART",
    "ESTRPIPE",
    "EUSERS",
    "ENOTSOCK",
    "EDESTADDRREQ",
    "EMSGSIZE",
    "EPROTOTYPE",
    "ENOPROTOOPT",
    "EPROTONOSUPPORT",
    "ESOCKTNOSUPPORT",
    "EOPNOTSUPP",
    "EPFNOSUPPORT",
    "EAFNOSUPPORT",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "ENETDOWN",
    "ENETUNREACH",
    "ENETRESET",
    "ECONNABORTED",
    "ECONNRESET",
    "ENOBUFS",
    "EISCONN",
    "ENOTCONN",
    "ESHUTDOWN",
    "ETOOMANYREFS",
    "ETIMEDOUT",
    "ECONNREFUSED",
    "EHOSTDOWN",
    "EHOSTUNREACH",
    "EALREADY",
    "EINPROGRESS",
    "ESTALE",
    "EUCLEAN",
    "ENOTNAM",
    "ENAVAIL",
    "EISNAM",
    "EREMOTEIO",
    "EDQUOT",
    "ENOMEDIUM",
    "EMEDIUMTYPE",
    "ECANCELED",
    "ENOKEY",
    "EKEYEXPIRED",
    "EKEYREVOKED",
    "EKEYREJECTED",
    "EOWNERDEAD",
    "ENOTRECOVERABLE",
    "ERFKILL",
    "EHWPOISON",
];

/// The kernel-internal errnos 512 to 531 ("" for the unused 520).
const KERNEL_ERRNOS: [&str; 20] = [
    "ERESTARTSYS",
    "ERESTARTNOINTR",
    "ERESTARTNOHAND",
    "ENOIOCTLCMD",
    "ERESTART_RESTARTBLOCK",
    "EPROBE_DEFER",
    "EOPENSTALE",
    "ENOPARAM",
    "",
    "EBADHANDLE",
    "ENOTSYNC",
    "EBADCOOKIE",
    "ENOTSUPP",
    "ETOOSMALL",
    "ESERVERFAULT",
    "EBADTYPE",
    "EJUKEBOX",
    "EIOCBQUEUED",
    "ERECALLCONFLICT",
    "ENOGRACE",
];

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
    fn errno_names_agree_with_the_numbers() {
        // Each name checked against rustix's constant of that name (its numbers come from
        // the platform's headers), so a shifted table fails here.
        let pairs = [
            (Errno::PERM, "EPERM"),
            (Errno::NOENT, "ENOENT"),
            (Errno::INTR, "EINTR"),
            (Errno::IO, "EIO"),
            (Errno::TOOBIG, "E2BIG"),
            (Errno::BADF, "EBADF"),
            (Errno::AGAIN, "EAGAIN"),
            (Errno::NOMEM, "ENOMEM"),
            (Errno::ACCESS, "EACCES"),
            (Errno::FAULT, "EFAULT"),
            (Errno::BUSY, "EBUSY"),
            (Errno::EXIST, "EEXIST"),
            (Errno::NODEV, "ENODEV"),
            (Errno::INVAL, "EINVAL"),
            (Errno::NOTTY, "ENOTTY"),
            (Errno::NOSPC, "ENOSPC"),
            (Errno::RANGE, "ERANGE"),
            (Errno::DEADLK, "EDEADLK"),
            (Errno::NOSYS, "ENOSYS"),
            (Errno::LOOP, "ELOOP"),
            (Errno::NOMSG, "ENOMSG"),
            (Errno::BADE, "EBADE"),
            (Errno::BADSLT, "EBADSLT"),
            (Errno::BFONT, "EBFONT"),
            (Errno::TIME, "ETIME"),
            (Errno::PROTO, "EPROTO"),
            (Errno::OVERFLOW, "EOVERFLOW"),
            (Errno::ILSEQ, "EILSEQ"),
            (Errno::OPNOTSUPP, "EOPNOTSUPP"),
            (Errno::TIMEDOUT, "ETIMEDOUT"),
            (Errno::STALE, "ESTALE"),
            (Errno::REMOTEIO, "EREMOTEIO"),
            (Errno::CANCELED, "ECANCELED"),
            (Errno::OWNERDEAD, "EOWNERDEAD"),
            (Errno::NOTRECOVERABLE, "ENOTRECOVERABLE"),
            (Errno::RFKILL, "ERFKILL"),
            (Errno::HWPOISON, "EHWPOISON"),
        ];
        for (e, name) in pairs {
            assert_eq!(errno_name(e), Some(name), "{e:?}");
        }
        for n in (1..=133).filter(|n| ![41, 58].contains(n)) {
            let name = errno_name(Errno::from_raw_os_error(n)).expect("every user errno named");
            assert!(name.starts_with('E'), "{n}: {name}");
        }
        for n in [41, 58, 134, 511, 520, 532, 4095] {
            assert_eq!(errno_name(Errno::from_raw_os_error(n)), None, "{n}");
        }
        assert_eq!(
            errno_name(Errno::from_raw_os_error(515)),
            Some("ENOIOCTLCMD")
        );
        assert_eq!(errno_name(Errno::from_raw_os_error(524)), Some("ENOTSUPP"));
        let e = Error::ioctl("DRM_IOCTL_GET_CAP", Errno::from_raw_os_error(4000));
        assert!(e.to_string().ends_with("(E4000)"), "{e}");
    }

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
