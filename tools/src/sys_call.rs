//! The only module of drmtool that issues a raw syscall: `kcmp(2)`, which rustix does not
//! wrap.
//!
//! # Safety
//! `kcmp` takes two pids, a type and two integers and reads no user memory, so any argument
//! values are memory-safe; the kernel checks permissions (ptrace read access to both
//! processes) and answers EPERM/ESRCH/EBADF on bad input.
#![allow(unsafe_code)]

use rustix::io::Errno;
use std::cmp::Ordering;

/// `KCMP_FILE` from `<linux/kcmp.h>`.
const KCMP_FILE: libc::c_int = 0;

/// Whether fd `fd1` of process `pid1` and fd `fd2` of process `pid2` are the same open file
/// (`kcmp(pid1, pid2, KCMP_FILE, fd1, fd2) == 0`).
///
/// # Errors
/// The errno: `ENOSYS` when the kernel was built without `CONFIG_KCMP`, `EPERM` without
/// ptrace access to either process, `EBADF` when an fd is closed, `ESRCH` when a process
/// is gone.
pub fn same_file(pid1: u32, fd1: u32, pid2: u32, fd2: u32) -> Result<bool, Errno> {
    let (Ok(p1), Ok(p2)) = (libc::pid_t::try_from(pid1), libc::pid_t::try_from(pid2)) else {
        return Err(Errno::SRCH);
    };
    // SAFETY: kcmp's five arguments are plain integers; it reads and writes no user memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            p1,
            p2,
            KCMP_FILE,
            libc::c_ulong::from(fd1),
            libc::c_ulong::from(fd2),
        )
    };
    match r {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => Err(last_errno()),
    }
}

/// The kernel's order of the open files behind fd `fd1` of `pid1` and fd `fd2` of `pid2`:
/// `kcmp(KCMP_FILE)` answers 0 (the same file), 1 (the first sorts before the second) or 2
/// (after), by the files' kernel addresses scrambled with a per-boot cookie. It is a total
/// order for the whole boot, so open files can be sorted and binary-searched by it.
///
/// # Errors
/// As [`same_file`]; `EINVAL` if the kernel answers 3 (unequal but unordered, which it
/// does not do for `KCMP_FILE`).
pub fn compare_files(pid1: u32, fd1: u32, pid2: u32, fd2: u32) -> Result<Ordering, Errno> {
    let (Ok(p1), Ok(p2)) = (libc::pid_t::try_from(pid1), libc::pid_t::try_from(pid2)) else {
        return Err(Errno::SRCH);
    };
    // SAFETY: kcmp's five arguments are plain integers; it reads and writes no user memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            p1,
            p2,
            KCMP_FILE,
            libc::c_ulong::from(fd1),
            libc::c_ulong::from(fd2),
        )
    };
    match r {
        0 => Ok(Ordering::Equal),
        1 => Ok(Ordering::Less),
        2 => Ok(Ordering::Greater),
        3 => Err(Errno::INVAL),
        _ => Err(last_errno()),
    }
}

fn last_errno() -> Errno {
    Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}
