//! Raw calls for test_hmm's mirror device (see the module header of `sys_call` for the
//! safety argument).
//!
//! The request numbers of test_hmm differ between kernels (`crate::HmmLayout`), so the
//! request is a run-time value here rather than a const generic: every test_hmm request is
//! `_IOWR('H', n, struct hmm_dmirror_cmd)`, the same struct in every layout, and the caller
//! passes the number and the C macro name its layout gives that number.

use super::{ioctl_error, retry};
use crate::HmmLayout;
use crate::dmirror::Dmirror;
use drm_gem::Error;
use ioctl_sys::test_hmm::{hmm_dmirror_cmd, v5_10, v5_14, v6_0};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, ioctl};

/// One test_hmm request with its number chosen at run time.
struct DmirrorRequest<'a> {
    opcode: Opcode,
    cmd: &'a mut hmm_dmirror_cmd,
}

// SAFETY: `as_ptr` names one exclusively borrowed `hmm_dmirror_cmd`, the struct that every
// test_hmm request copies in and back out (`_IOWR`, 40 bytes, checked by ioctl-sys's opcode
// tests); `IS_MUTATING` is true because the kernel writes `cpages` and `faults` back.
unsafe impl Ioctl for DmirrorRequest<'_> {
    type Output = ();
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.opcode
    }

    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        core::ptr::from_mut(self.cmd).cast()
    }

    unsafe fn output_from_ptr(
        _out: IoctlOutput,
        _extract_output: *mut core::ffi::c_void,
    ) -> rustix::io::Result<()> {
        Ok(())
    }
}

/// Issues the test_hmm request `request` (named `name` in the caller's layout) on
/// `npages` pages at `addr` with the buffer `ptr`, retrying on EINTR; returns what it
/// reported.
///
/// # Safety
/// `request` must be `_IOWR('H', n, struct hmm_dmirror_cmd)`, and on the running kernel it
/// must mean the operation the caller intends (the layout was probed). `ptr` must then
/// be valid for what that operation does with it: READ, MIGRATE(_TO_DEV) and EXCLUSIVE
/// write `npages` pages there, WRITE reads `npages` pages, SNAPSHOT writes `npages` bytes;
/// MIGRATE_TO_SYS, CHECK_EXCLUSIVE and RELEASE do not use it (pass 0, so that a mix-up ends
/// in EFAULT instead of a write). For WRITE, the device then stores into the pages at
/// `addr`: nothing may hold a Rust reference to them.
unsafe fn dmirror_cmd(
    fd: BorrowedFd<'_>,
    request: u32,
    name: &'static str,
    addr: usize,
    npages: u64,
    ptr: u64,
) -> Result<CmdOut, Error> {
    let mut cmd = hmm_dmirror_cmd {
        addr: addr as u64,
        ptr,
        npages,
        cpages: 0,
        faults: 0,
    };
    retry(|| {
        let req = DmirrorRequest {
            opcode: request as Opcode,
            cmd: &mut cmd,
        };
        // SAFETY: the request/struct pairing and the meaning of `cmd.ptr` are this
        // function's contract (see `# Safety`).
        unsafe { ioctl(fd, req) }
    })
    .map_err(|errno| ioctl_error(name, errno))?;
    Ok(CmdOut {
        cpages: cmd.cpages,
        faults: cmd.faults,
    })
}

/// What one test_hmm request reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CmdOut {
    pub(crate) cpages: u64,
    pub(crate) faults: u64,
}

/// Panics unless a bounce buffer of `len` bytes is exactly `npages` pages.
fn assert_pages(len: usize, npages: u64) {
    assert_eq!(
        Some(len as u64),
        npages.checked_mul(page_size() as u64),
        "bounce buffer must be exactly npages pages"
    );
}

/// A request that copies `npages` pages from the device's view into `out` (READ,
/// MIGRATE(_TO_DEV), EXCLUSIVE). `out` must be exactly `npages` pages long.
///
/// # Safety
/// `request` must mean one of those three operations on the running kernel (probed layout).
unsafe fn dmirror_copy_out(
    fd: BorrowedFd<'_>,
    request: u32,
    name: &'static str,
    addr: usize,
    npages: u64,
    out: &mut [u8],
) -> Result<CmdOut, Error> {
    assert_pages(out.len(), npages);
    // SAFETY: `out` is an exclusive borrow of exactly `npages` pages (asserted above) that
    // lives for the whole call, which is what these requests write; the request's meaning
    // is the caller's contract.
    unsafe { dmirror_cmd(fd, request, name, addr, npages, out.as_mut_ptr() as u64) }
}

/// WRITE: the device stores `data` (exactly `npages` pages) into the pages at `addr`.
///
/// # Safety
/// `request` must mean WRITE on the running kernel (probed layout), and nothing may hold a
/// Rust reference to the memory at `addr..addr + npages pages` (the device writes it).
unsafe fn dmirror_write(
    fd: BorrowedFd<'_>,
    request: u32,
    name: &'static str,
    addr: usize,
    npages: u64,
    data: &[u8],
) -> Result<CmdOut, Error> {
    assert_pages(data.len(), npages);
    // SAFETY: WRITE only reads `npages` pages at `ptr`, which `data` provides for the whole
    // call; the target memory and the request's meaning are the caller's contract.
    unsafe { dmirror_cmd(fd, request, name, addr, npages, data.as_ptr() as u64) }
}

/// SNAPSHOT: one state byte per page into `out` (exactly `npages` bytes).
///
/// # Safety
/// `request` must mean SNAPSHOT on the running kernel (probed layout).
unsafe fn dmirror_snapshot(
    fd: BorrowedFd<'_>,
    request: u32,
    name: &'static str,
    addr: usize,
    out: &mut [u8],
) -> Result<CmdOut, Error> {
    let npages = out.len() as u64;
    // SAFETY: SNAPSHOT writes one byte per page, `npages` = `out.len()` bytes, into `out`,
    // an exclusive borrow alive for the whole call; the meaning is the caller's contract.
    unsafe { dmirror_cmd(fd, request, name, addr, npages, out.as_mut_ptr() as u64) }
}

/// A request that does not use `ptr` (MIGRATE_TO_SYS, CHECK_EXCLUSIVE, RELEASE): it gets a
/// null pointer, so a request that does use it fails with EFAULT instead of writing.
///
/// # Safety
/// `fd` must be a test_hmm mirror file and `request` one of its requests (any layout).
unsafe fn dmirror_no_buffer(
    fd: BorrowedFd<'_>,
    request: u32,
    name: &'static str,
    addr: usize,
    npages: u64,
) -> Result<CmdOut, Error> {
    // SAFETY: on a test_hmm file (the caller's contract) a request with a null `ptr`
    // either ignores it or fails with EFAULT when it copies (address 0 is never mapped:
    // vm.mmap_min_addr); none of them but WRITE changes the contents of mirrored pages, and
    // WRITE fails with EFAULT before it stores anything.
    unsafe { dmirror_cmd(fd, request, name, addr, npages, 0) }
}

/// The CPU page size.
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}

/// The operations of test_hmm, whatever their numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    MigrateToDev,
    MigrateToSys,
    Snapshot,
    Exclusive,
    CheckExclusive,
    Release,
}

impl Op {
    /// The C macro name of the newest layout, and the Linux release that added it.
    fn name_since(self) -> (&'static str, &'static str) {
        match self {
            Op::Read => ("HMM_DMIRROR_READ", "5.10"),
            Op::Write => ("HMM_DMIRROR_WRITE", "5.10"),
            Op::MigrateToDev => ("HMM_DMIRROR_MIGRATE_TO_DEV", "5.10"),
            Op::MigrateToSys => ("HMM_DMIRROR_MIGRATE_TO_SYS", "6.0"),
            Op::Snapshot => ("HMM_DMIRROR_SNAPSHOT", "5.10"),
            Op::Exclusive => ("HMM_DMIRROR_EXCLUSIVE", "5.14"),
            Op::CheckExclusive => ("HMM_DMIRROR_CHECK_EXCLUSIVE", "5.14"),
            Op::Release => ("HMM_DMIRROR_RELEASE", "6.1"),
        }
    }
}

/// The request number and C macro name of `op` in `layout`; `None` where the layout has no
/// such request.
pub(crate) fn request(layout: HmmLayout, op: Op) -> Option<(u32, &'static str)> {
    use HmmLayout::{V5_10, V5_14, V6_0};
    use Op::*;
    Some(match (layout, op) {
        (V5_10, Read) => (v5_10::HMM_DMIRROR_READ, "HMM_DMIRROR_READ"),
        (V5_10, Write) => (v5_10::HMM_DMIRROR_WRITE, "HMM_DMIRROR_WRITE"),
        (V5_10, MigrateToDev) => (v5_10::HMM_DMIRROR_MIGRATE, "HMM_DMIRROR_MIGRATE"),
        (V5_10, Snapshot) => (v5_10::HMM_DMIRROR_SNAPSHOT, "HMM_DMIRROR_SNAPSHOT"),
        (V5_14, Read) => (v5_14::HMM_DMIRROR_READ, "HMM_DMIRROR_READ"),
        (V5_14, Write) => (v5_14::HMM_DMIRROR_WRITE, "HMM_DMIRROR_WRITE"),
        (V5_14, MigrateToDev) => (v5_14::HMM_DMIRROR_MIGRATE, "HMM_DMIRROR_MIGRATE"),
        (V5_14, Snapshot) => (v5_14::HMM_DMIRROR_SNAPSHOT, "HMM_DMIRROR_SNAPSHOT"),
        (V5_14, Exclusive) => (v5_14::HMM_DMIRROR_EXCLUSIVE, "HMM_DMIRROR_EXCLUSIVE"),
        (V5_14, CheckExclusive) => (
            v5_14::HMM_DMIRROR_CHECK_EXCLUSIVE,
            "HMM_DMIRROR_CHECK_EXCLUSIVE",
        ),
        (V6_0, Read) => (v6_0::HMM_DMIRROR_READ, "HMM_DMIRROR_READ"),
        (V6_0, Write) => (v6_0::HMM_DMIRROR_WRITE, "HMM_DMIRROR_WRITE"),
        (V6_0, MigrateToDev) => (
            v6_0::HMM_DMIRROR_MIGRATE_TO_DEV,
            "HMM_DMIRROR_MIGRATE_TO_DEV",
        ),
        (V6_0, MigrateToSys) => (
            v6_0::HMM_DMIRROR_MIGRATE_TO_SYS,
            "HMM_DMIRROR_MIGRATE_TO_SYS",
        ),
        (V6_0, Snapshot) => (v6_0::HMM_DMIRROR_SNAPSHOT, "HMM_DMIRROR_SNAPSHOT"),
        (V6_0, Exclusive) => (v6_0::HMM_DMIRROR_EXCLUSIVE, "HMM_DMIRROR_EXCLUSIVE"),
        (V6_0, CheckExclusive) => (
            v6_0::HMM_DMIRROR_CHECK_EXCLUSIVE,
            "HMM_DMIRROR_CHECK_EXCLUSIVE",
        ),
        (V6_0, Release) => (v6_0::HMM_DMIRROR_RELEASE, "HMM_DMIRROR_RELEASE"),
        _ => return None,
    })
}

/// The major number test_hmm registered (`HMM_DMIRROR` in `/proc/devices`).
pub(crate) fn dmirror_major() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let major = it.next()?.parse().ok()?;
        (it.next()? == "HMM_DMIRROR").then_some(major)
    })
}

/// Checks that `fd` is a test_hmm character device (its major against `/proc/devices`),
/// before any request: other drivers use the same ioctl type letter `'H'`.
pub(crate) fn check_dmirror_file(fd: BorrowedFd<'_>) -> Result<(), Error> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(fd).map_err(|errno| Error::Syscall {
        name: "fstat",
        errno,
    })?;
    let is_chr = FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice;
    let major = rustix::fs::major(st.st_rdev);
    let want = dmirror_major();
    if !is_chr || want != Some(major) {
        return Err(Error::InvalidArgument {
            what: format!(
                "not a test_hmm mirror device (character device: {is_chr}, major {major}; \
                 HMM_DMIRROR major: {want:?})"
            ),
        });
    }
    Ok(())
}

/// The layout probe (see `crate::dmirror`): CHECK_EXCLUSIVE of the 6.0 layout (number 6),
/// then, only if unknown, of the 5.14 layout (number 5), on one page at address 0 with a
/// null `ptr`. Checks the file first.
pub(crate) fn probe_layout(fd: BorrowedFd<'_>) -> Result<HmmLayout, Error> {
    check_dmirror_file(fd)?;
    let check = |request: u32, name: &'static str| {
        // SAFETY: `fd` is a test_hmm file (checked above) and `request` one of its
        // requests.
        match unsafe { dmirror_no_buffer(fd, request, name, 0, 1) } {
            Ok(_) => Ok(true),
            Err(Error::Ioctl { errno, .. }) if errno == Errno::PERM => Ok(true),
            Err(Error::Ioctl { errno, .. }) if errno == Errno::INVAL => Ok(false),
            Err(e) => Err(Error::Unsupported {
                feature: "test_hmm request numbering",
                reason: format!("unexpected answer to the layout probe: {e}"),
                errno: e.errno(),
            }),
        }
    };
    if check(
        v6_0::HMM_DMIRROR_CHECK_EXCLUSIVE,
        "HMM_DMIRROR_CHECK_EXCLUSIVE (6.0 layout probe)",
    )? {
        Ok(HmmLayout::V6_0)
    } else if check(
        v5_14::HMM_DMIRROR_CHECK_EXCLUSIVE,
        "HMM_DMIRROR_CHECK_EXCLUSIVE (5.14 layout probe)",
    )? {
        Ok(HmmLayout::V5_14)
    } else {
        Ok(HmmLayout::V5_10)
    }
}

/// An open test_hmm file whose request numbering was detected: the invariant that makes
/// its requests sound to issue with the pointers built here.
#[derive(Debug)]
pub(crate) struct MirrorFile {
    fd: OwnedFd,
    layout: HmmLayout,
}

impl MirrorFile {
    /// Checks the file, probes its layout and has `confirm` check the result (against the
    /// kernel version).
    pub(crate) fn new(
        fd: OwnedFd,
        confirm: impl FnOnce(HmmLayout) -> Result<(), Error>,
    ) -> Result<Self, Error> {
        let layout = probe_layout(fd.as_fd())?;
        confirm(layout)?;
        Ok(Self { fd, layout })
    }

    pub(crate) fn layout(&self) -> HmmLayout {
        self.layout
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn req(&self, op: Op) -> Result<(u32, &'static str), Error> {
        request(self.layout, op).ok_or_else(|| {
            let (feature, since) = op.name_since();
            Error::Unsupported {
                feature,
                reason: format!(
                    "the running kernel's test_hmm ({:?} numbering) has no such request \
                     (added in Linux {since})",
                    self.layout
                ),
                errno: None,
            }
        })
    }

    /// READ, MIGRATE(_TO_DEV) or EXCLUSIVE: the device's copy of the pages into `out`
    /// (exactly `npages` pages).
    pub(crate) fn copy_out(
        &self,
        op: Op,
        addr: usize,
        npages: u64,
        out: &mut [u8],
    ) -> Result<CmdOut, Error> {
        assert!(matches!(op, Op::Read | Op::MigrateToDev | Op::Exclusive));
        let (req, name) = self.req(op)?;
        // SAFETY: `req` means `op` on this kernel (probed layout), one of the requests
        // that write `npages` pages to `ptr`, which `dmirror_copy_out` checks `out` holds.
        unsafe { dmirror_copy_out(self.fd(), req, name, addr, npages, out) }
    }

    /// WRITE of `data` (exactly `npages` pages) to the pages at `addr`.
    ///
    /// # Safety
    /// Nothing may hold a Rust reference to the memory at `addr` for `npages` pages.
    pub(crate) unsafe fn write(
        &self,
        addr: usize,
        npages: u64,
        data: &[u8],
    ) -> Result<CmdOut, Error> {
        let (req, name) = self.req(Op::Write)?;
        // SAFETY: `req` means WRITE on this kernel (probed layout); the target memory is
        // the caller's contract.
        unsafe { dmirror_write(self.fd(), req, name, addr, npages, data) }
    }

    /// SNAPSHOT of `out.len()` pages at `addr`.
    pub(crate) fn snapshot(&self, addr: usize, out: &mut [u8]) -> Result<CmdOut, Error> {
        let (req, name) = self.req(Op::Snapshot)?;
        // SAFETY: `req` means SNAPSHOT on this kernel (probed layout).
        unsafe { dmirror_snapshot(self.fd(), req, name, addr, out) }
    }

    /// MIGRATE_TO_SYS, CHECK_EXCLUSIVE or RELEASE (no buffer).
    pub(crate) fn no_buffer(&self, op: Op, addr: usize, npages: u64) -> Result<CmdOut, Error> {
        assert!(matches!(
            op,
            Op::MigrateToSys | Op::CheckExclusive | Op::Release
        ));
        let (req, name) = self.req(op)?;
        // SAFETY: our fd is a test_hmm file (checked when made) and `req` one of its
        // requests.
        unsafe { dmirror_no_buffer(self.fd(), req, name, addr, npages) }
    }
}

impl Dmirror {
    /// `HMM_DMIRROR_WRITE`: the device stores `data` (exactly the range's length) into the
    /// range, faulting pages in for writing as needed.
    ///
    /// # Errors
    /// EPERM where the memory is mapped read-only; EFAULT where nothing writable is mapped.
    ///
    /// # Safety
    /// The range's memory is written behind the compiler's back: no Rust reference to any of
    /// it may be alive during the call (and memory the program treats as immutable, such as
    /// a `static`, must not be in it). See [`Dmirror::write_into`] for the safe form.
    pub unsafe fn write(
        &self,
        range: crate::PageRange,
        data: &[u8],
    ) -> Result<crate::MirrorReport, Error> {
        crate::dmirror::check_len(range, data.len())?;
        // SAFETY: forwarded: the caller vouches that no reference to the range is alive.
        Ok(unsafe { self.file.write(range.start(), range.npages(), data) }?.into())
    }

    /// [`Dmirror::write`] into memory borrowed exclusively: `target` must cover whole,
    /// page-aligned pages, and `data` be as long.
    pub fn write_into(&self, target: &mut [u8], data: &[u8]) -> Result<crate::MirrorReport, Error> {
        let range = crate::PageRange::of(target)?;
        // SAFETY: `target` is an exclusive borrow of exactly the range, so no other
        // reference to that memory is alive while the device writes it.
        unsafe { self.write(range, data) }
    }
}
