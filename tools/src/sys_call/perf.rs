//! `perf_event_open(2)` and the perf event ioctls `drmtool trace` uses (the crate's
//! `sys_call` module, split by concern; its safety notes hold here).

#![allow(unsafe_code)]

use super::{adopt, retry_eintr};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::io::Errno;

/// `perf_event_open(attr, pid, cpu, -1, flags)`: a new perf event fd (no group).
///
/// EINTR (none is documented, but a signal storm is no reason to fail) is retried a
/// bounded number of times.
///
/// # Errors
/// The kernel's errno: `EACCES`/`EPERM` (perf_event_paranoid, no CAP_PERFMON), `ENOENT` or
/// `EINVAL` (no such tracepoint), `ENODEV` (an offline CPU), `E2BIG` (an attr size this
/// kernel refuses, with non-zero bytes past its own), `EMFILE`.
pub fn perf_event_open(
    attr: &ioctl_sys::perf_event::perf_event_attr,
    pid: i32,
    cpu: u32,
    flags: u32,
) -> Result<OwnedFd, Errno> {
    let cpu = libc::c_int::try_from(cpu).map_err(|_| Errno::INVAL)?;
    let r = retry_eintr(|| {
        // SAFETY: `attr` is a live `struct perf_event_attr` whose `size` field is its own
        // size (the kernel reads that many bytes and, for the output fields, writes back
        // at most `size` on E2BIG); the other arguments are integers; group fd -1.
        unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const ioctl_sys::perf_event::perf_event_attr,
                libc::pid_t::from(pid),
                cpu,
                -1 as libc::c_int,
                libc::c_ulong::from(flags),
            )
        }
    })?;
    adopt(r)
}

/// A perf event fd ioctl whose argument is an integer (`PERF_EVENT_IOC_ENABLE`,
/// `_DISABLE`, `_RESET` with 0, `_SET_OUTPUT` with a target fd). EINTR is retried a
/// bounded number of times.
///
/// # Errors
/// The kernel's errno (`EINVAL` for a target ring on another CPU, `EBADF`).
pub fn perf_ioctl(fd: BorrowedFd<'_>, request: u32, arg: libc::c_ulong) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    retry_eintr(|| {
        // SAFETY: these requests take their argument as an integer (a flag or an fd number);
        // the kernel dereferences no user pointer for them; `fd` is a live fd.
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::c_ulong::from(request), arg) }
    })
    .map(drop)
}

/// `PERF_EVENT_IOC_SET_FILTER`: a tracepoint event's ftrace filter expression. EINTR is
/// retried a bounded number of times.
///
/// # Errors
/// The kernel's errno (`EINVAL` for an expression it does not parse, `EBADF`).
pub fn perf_set_filter(fd: BorrowedFd<'_>, filter: &std::ffi::CStr) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    retry_eintr(|| {
        // SAFETY: the request takes a NUL-terminated string, which `filter` is and stays
        // alive through the call (the kernel copies it in, bounded by a page); `fd` is live.
        unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::c_ulong::from(ioctl_sys::perf_event::PERF_EVENT_IOC_SET_FILTER),
                filter.as_ptr(),
            )
        }
    })
    .map(drop)
}
