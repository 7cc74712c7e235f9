//! The only module of drmtool with unsafe code: `kcmp(2)`, which rustix does not wrap, and
//! the small private mappings `drmtool hmm probe` lets the mirror device and the host
//! registration backends work on.
//!
//! # Safety
//! `kcmp` takes two pids, a type and two integers and reads no user memory, so any argument
//! values are memory-safe; the kernel checks permissions (ptrace read access to both
//! processes) and answers EPERM/ESRCH/EBADF on bad input.
//!
//! A [`Mapping`] is made by `mmap` with a null hint (a fresh range, replacing nothing), owns
//! its pages until `Drop` unmaps them once, and hands out slices only through `&self` /
//! `&mut self` borrows, so the usual aliasing rules hold for every access from Rust.
#![allow(unsafe_code)]

use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use std::cmp::Ordering;
use std::ptr::NonNull;

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
    compare_files(pid1, fd1, pid2, fd2).map(|o| o == Ordering::Equal)
}

/// A private anonymous or shared file mapping, read-write, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// `len` bytes of fresh private anonymous memory (zero-filled).
    pub fn anonymous(len: usize) -> Result<Self, Errno> {
        // SAFETY: a null hint makes the kernel pick an unused range, so no existing mapping
        // (and no memory Rust already refers to) is replaced; `Mapping` owns the result.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        Self::adopt(p, len)
    }

    /// `len` bytes of `fd` from offset 0, shared (writes reach the file).
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> Result<Self, Errno> {
        // SAFETY: as in `anonymous`: a fresh range chosen by the kernel, owned by `Mapping`.
        let p = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Self::adopt(p, len)
    }

    fn adopt(p: *mut core::ffi::c_void, len: usize) -> Result<Self, Errno> {
        NonNull::new(p.cast::<u8>())
            .map(|ptr| Self { ptr, len })
            .ok_or(Errno::NOMEM)
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a readable mapping owned by `self` for its lifetime;
        // the shared borrow of `self` keeps `as_mut_slice` from handing out a `&mut` to it.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and the exclusive borrow of `self` makes this the only
        // reference to the mapping while it lives.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `anonymous`/`shared` and is unmapped only here;
        // no slice of it can outlive `self`. An error cannot be reported from drop and
        // leaves at worst a leaked mapping.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
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
