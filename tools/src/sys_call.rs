//! The only module of drmtool with unsafe code: `kcmp(2)`, which rustix does not wrap, and
//! the one slice over a shared memfd mapping that `drmtool hmm probe` registers as a
//! udmabuf.
//!
//! # Safety
//! `kcmp` takes two pids, a type and two integers and reads no user memory, so any argument
//! values are memory-safe; the kernel checks permissions (ptrace read access to both
//! processes) and answers EPERM/ESRCH/EBADF on bad input.
//!
//! The probe's mappings are [`drm_gem::Mmap`]s (drm-gem owns every `mmap` and `munmap`, and
//! their copies): private anonymous pages, borrowed as slices through `Mmap::as_mut_slice`,
//! and a memfd mapped `MAP_SHARED`, whose pages another mapping, a `write(2)`, another
//! process or (through a udmabuf made of them) a device may change at any time, so `Mmap`
//! hands out no slice of it. The one place that needs one (a udmabuf registration) is
//! [`register_udmabuf`] here, under its contract.
#![allow(unsafe_code)]

use drm_gem::{Mmap, Sharing};
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
    compare_files(pid1, fd1, pid2, fd2).map(|o| o == Ordering::Equal)
}

/// Registers the pages of `map` (a shared read-write mapping of a sealed memfd this process
/// made and keeps to itself) as a udmabuf, with `hmm::HostRegistration::new(..,
/// Backend::Udmabuf)`, which takes a slice: the registration borrows `map` for its whole
/// life.
///
/// # Errors
/// As `HostRegistration::new`; [`drm_gem::Error::InvalidArgument`] when `map` is not a
/// readable and writable shared mapping of a file.
pub fn register_udmabuf(map: &mut Mmap) -> drm_gem::Result<hmm::HostRegistration<'_>> {
    let rw = drm_gem::Prot::READ | drm_gem::Prot::WRITE;
    if map.sharing() != Sharing::Shared || map.is_anonymous() || map.prot() != rw {
        return Err(drm_gem::Error::InvalidArgument {
            what: "a udmabuf registers a shared read-write memfd mapping".into(),
        });
    }
    // SAFETY: the slice covers exactly the readable, writable range `map` owns (it stays
    // mapped while `map` lives), and lives no longer than
    // the `&mut` borrow of `map` (the registration's lifetime), during which no copy
    // through `map` can run. Its other aliases are the memfd itself (the caller's
    // `SealedMemfd`, which `drmtool hmm probe` neither writes nor hands to anyone) and the
    // udmabuf the registration makes, which the probe only inspects (it never maps,
    // writes or attaches it); so nothing writes these bytes while the slice lives, and
    // the registration itself only reads its address and length.
    let mem = unsafe { core::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
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
        use drm_gem::{Error, MmapOptions, Prot};
        let fd = rustix::fs::memfd_create("drmtool-test", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd");
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        let rw = Prot::READ | Prot::WRITE;
        let mut m = Mmap::map(
            fd.as_fd(),
            0,
            8192,
            rw,
            Sharing::Shared,
            MmapOptions::empty(),
        )
        .expect("mmap");
        m.write_at(4090, b"abcdef").unwrap();
        let mut b = [0u8; 6];
        m.read_at(4090, &mut b).unwrap();
        assert_eq!(&b, b"abcdef");
        // The file sees the write: the pages are shared.
        let mut f = [0u8; 6];
        rustix::io::pread(&fd, &mut f, 4090).unwrap();
        assert_eq!(&f, b"abcdef");
        assert!(matches!(
            m.write_at(8190, b"abcdef"),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            m.read_at(8190, &mut b),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(
            m.read_at(usize::MAX, &mut b).is_err(),
            "offset + len overflows"
        );
        assert!(m.read_at(8192, &mut []).is_ok());
        assert_eq!(m.len(), 8192);
        // No slice of shared memory, and no udmabuf registration of anonymous memory.
        assert!(m.as_slice().is_none());
        let mut anon = Mmap::anonymous(4096, rw).unwrap();
        assert!(matches!(
            register_udmabuf(&mut anon),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
