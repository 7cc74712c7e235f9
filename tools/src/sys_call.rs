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
//! its private anonymous pages until `Drop` unmaps them once, and hands out slices only
//! through `&self` / `&mut self` borrows, so the usual aliasing rules hold for every access
//! from Rust: nothing else maps those pages.
//!
//! A [`SharedMapping`] maps a file `MAP_SHARED`: its pages are also the file's, which
//! another mapping, a `write(2)`, another process or (through a udmabuf made of them) a
//! device may change at any time. So it hands out no slices: [`SharedMapping::read_at`]
//! and [`SharedMapping::write_at`] copy in and out through raw pointers, bounds-checked,
//! and the one place that needs a slice (a udmabuf registration) is
//! [`register_udmabuf`] here, under its contract.
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

/// A private anonymous mapping, read-write, unmapped on drop.
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
        // SAFETY: the range was mapped by `anonymous` and is unmapped only here; no slice
        // of it can outlive `self`. An error cannot be reported from drop and leaves at
        // worst a leaked mapping.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// An access outside a [`SharedMapping`]. (The probe only writes; reads are for tests.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub struct OutOfBounds {
    /// The offset asked for.
    pub offset: usize,
    /// The bytes asked for.
    pub len: usize,
    /// The mapping's length.
    pub mapped: usize,
}

/// `len` bytes of a file mapped `MAP_SHARED` from offset 0, read-write, unmapped on drop.
/// Accessed only by copies (see the [module](self) docs).
#[derive(Debug)]
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
}

#[allow(dead_code)]
impl SharedMapping {
    /// `len` bytes of `fd` from offset 0, shared (writes reach the file).
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> Result<Self, Errno> {
        // SAFETY: a null hint makes the kernel pick an unused range, so no existing mapping
        // (and no memory Rust already refers to) is replaced; `SharedMapping` owns it.
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
        NonNull::new(p.cast::<u8>())
            .map(|ptr| Self { ptr, len })
            .ok_or(Errno::NOMEM)
    }

    /// The mapping's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it maps no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfBounds {
                offset,
                len,
                mapped: self.len,
            }),
        }
    }

    /// Copies `buf.len()` bytes at `offset` into `buf` (what they are at that moment: a
    /// concurrent writer may leave a mix of old and new bytes, never undefined behaviour).
    ///
    /// # Errors
    /// [`OutOfBounds`] when the range does not lie within the mapping.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: `offset + i < len` (checked above), so the byte lies in the readable
            // mapping `self` owns; a volatile read makes no claim that nobody else writes
            // it and creates no reference to the shared memory.
            *b = unsafe { self.ptr.as_ptr().add(offset + i).read_volatile() };
        }
        Ok(())
    }

    /// Copies `data` to `offset`.
    ///
    /// # Errors
    /// [`OutOfBounds`] when the range does not lie within the mapping.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), OutOfBounds> {
        self.check(offset, data.len())?;
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: as in `read_at`: in bounds of the writable mapping, volatile, no
            // reference to the shared memory.
            unsafe { self.ptr.as_ptr().add(offset + i).write_volatile(b) };
        }
        Ok(())
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `new` and is unmapped only here; no slice of it
        // was ever handed out that could outlive `self` (`register_udmabuf` borrows
        // `self`). An error cannot be reported from drop and leaves at worst a leak.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Registers the pages of `map` (a mapping of a sealed memfd this process made and keeps to
/// itself) as a udmabuf, with `hmm::HostRegistration::new(.., Backend::Udmabuf)`, which
/// takes a slice: the registration borrows `map` for its whole life.
///
/// # Errors
/// As `HostRegistration::new`.
pub fn register_udmabuf(map: &mut SharedMapping) -> drm_gem::Result<hmm::HostRegistration<'_>> {
    // SAFETY: the slice covers exactly the mapping `map` owns, and lives no longer than
    // the `&mut` borrow of `map` (the registration's lifetime), during which no copy
    // through `map` can run. Its other aliases are the memfd itself (the caller's
    // `SealedMemfd`, which `drmtool hmm probe` neither writes nor hands to anyone) and the
    // udmabuf the registration makes, which the probe only inspects (it never maps,
    // writes or attaches it); so nothing writes these bytes while the slice lives, and
    // the registration itself only reads its address and length.
    let mem = unsafe { core::slice::from_raw_parts_mut(map.ptr.as_ptr(), map.len) };
    hmm::HostRegistration::new(mem, hmm::Backend::Udmabuf)
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

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;

    #[test]
    fn shared_mapping_copies_in_and_out_within_bounds_only() {
        let fd = rustix::fs::memfd_create("drmtool-test", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd");
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        let m = SharedMapping::new(fd.as_fd(), 8192).expect("mmap");
        m.write_at(4090, b"abcdef").unwrap();
        let mut b = [0u8; 6];
        m.read_at(4090, &mut b).unwrap();
        assert_eq!(&b, b"abcdef");
        // The file sees the write: the pages are shared.
        let mut f = [0u8; 6];
        rustix::io::pread(&fd, &mut f, 4090).unwrap();
        assert_eq!(&f, b"abcdef");
        let oob = OutOfBounds {
            offset: 8190,
            len: 6,
            mapped: 8192,
        };
        assert_eq!(m.write_at(8190, b"abcdef"), Err(oob));
        assert_eq!(m.read_at(8190, &mut b), Err(oob));
        assert!(
            m.read_at(usize::MAX, &mut b).is_err(),
            "offset + len overflows"
        );
        assert!(m.read_at(8192, &mut []).is_ok());
        assert_eq!(m.len(), 8192);
    }
}
