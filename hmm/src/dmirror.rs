//! The test_hmm mirror device (`/dev/hmm_dmirrorN`): a pretend device that sees the memory
//! of the process that opened it through HMM, as a GPU with shared virtual memory would.
//!
//! It reads and writes process memory through its own page tables (faulting pages in on
//! the CPU side as a device would: `faults` counts those rounds), migrates pages into its
//! "device memory" (device-private `ZONE_DEVICE` pages; the CPU gets them back by faulting
//! on them or, since Linux 6.0, by an explicit migration back), snapshots what the CPU page
//! tables hold for a range, and takes exclusive (atomic) access to pages.
//!
//! # Which numbering the kernel uses
//! test_hmm's request numbers changed in 5.14 and 6.0 ([`HmmLayout`]), and the device does
//! not say which numbering it speaks. [`Dmirror::open`] finds out with a probe that changes
//! nothing (CHECK_EXCLUSIVE by its 6.0 number, then by its 5.14 number, on a null range),
//! checks the answer against the kernel's version, and fails with [`Error::Unsupported`]
//! when they disagree instead of guessing.
//!
//! # Memory the device touches
//! Every range is a [`PageRange`] of this process's address space (the mirror always works
//! on the address space of the process that opened it). Reading, snapshotting, migrating
//! and exclusive access leave the contents of memory as they were, so they are safe for any
//! address (the kernel answers EFAULT/EINVAL/ENOENT for memory that is not there or not
//! accessible). A device write stores into the range, so [`Dmirror::write`] is `unsafe`;
//! [`Dmirror::write_into`] is its safe form for memory borrowed as `&mut [u8]`.

use crate::HmmLayout;
use crate::sys_call::{self, CmdOut, MirrorFile, Op};
use drm_gem::{Errno, Error, Result};
use ioctl_sys::test_hmm as tsys;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A run of whole pages of this process's address space, by address: what the device is
/// asked to access. Checked when made: page-aligned start, at least one page, no overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageRange {
    start: usize,
    npages: u64,
}

impl PageRange {
    /// `npages` pages from `start`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `start` is not page-aligned, `npages` is 0, or the
    /// range wraps around the address space (the kernel answers EINVAL to all three).
    pub fn new(start: usize, npages: u64) -> Result<Self> {
        let page = page_size();
        if !start.is_multiple_of(page) {
            return Err(invalid(format!(
                "address {start:#x} is not aligned to the page size ({page})"
            )));
        }
        if npages == 0 {
            return Err(invalid("a range of zero pages".into()));
        }
        let len = npages
            .checked_mul(page as u64)
            .and_then(|l| usize::try_from(l).ok());
        if len.and_then(|l| start.checked_add(l)).is_none() {
            return Err(invalid(format!(
                "{npages} pages from {start:#x} run past the end of the address space"
            )));
        }
        Ok(Self { start, npages })
    }

    /// The pages that `bytes` covers exactly (page-aligned start, whole pages).
    pub fn of(bytes: &[u8]) -> Result<Self> {
        let page = page_size();
        if !bytes.len().is_multiple_of(page) {
            return Err(invalid(format!(
                "{} bytes is not a whole number of pages",
                bytes.len()
            )));
        }
        Self::new(bytes.as_ptr() as usize, (bytes.len() / page) as u64)
    }

    /// First address.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Number of pages.
    pub fn npages(&self) -> u64 {
        self.npages
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        // Cannot overflow: checked in `new`.
        self.npages as usize * page_size()
    }

    /// `count` pages starting `first` pages into this range.
    pub fn pages(&self, first: u64, count: u64) -> Result<Self> {
        if first.checked_add(count).is_none_or(|end| end > self.npages) {
            return Err(invalid(format!(
                "pages {first}..{first}+{count} are outside a range of {} pages",
                self.npages
            )));
        }
        Self::new(self.start + first as usize * page_size(), count)
    }
}

bitflags::bitflags! {
    /// Access and mapping size of one page in a [`Dmirror::snapshot`]
    /// (`HMM_DMIRROR_PROT_*` low bits).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MirrorProt: u8 {
        /// Readable (`HMM_DMIRROR_PROT_READ`): the CPU page table maps it read-only.
        const READ = tsys::HMM_DMIRROR_PROT_READ as u8;
        /// Writable (`HMM_DMIRROR_PROT_WRITE`).
        const WRITE = tsys::HMM_DMIRROR_PROT_WRITE as u8;
        /// Mapped by a PMD-sized entry (`HMM_DMIRROR_PROT_PMD`, 2 MiB on x86_64).
        const PMD = tsys::HMM_DMIRROR_PROT_PMD as u8;
        /// Mapped by a PUD-sized entry (`HMM_DMIRROR_PROT_PUD`, 1 GiB on x86_64).
        const PUD = tsys::HMM_DMIRROR_PROT_PUD as u8;
    }
}

/// What kind of page backs a mapped address in a [`Dmirror::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// An ordinary system-memory page.
    System,
    /// The shared zero page (`HMM_DMIRROR_PROT_ZERO`): read, never written.
    Zero,
    /// Migrated to this device's private memory (`HMM_DMIRROR_PROT_DEV_PRIVATE_LOCAL`).
    DevicePrivateLocal,
    /// Migrated to another device's private memory (`..._DEV_PRIVATE_REMOTE`).
    DevicePrivateRemote,
    /// In this device's coherent memory (`..._DEV_COHERENT_LOCAL`, since Linux 6.0).
    DeviceCoherentLocal,
    /// In another device's coherent memory (`..._DEV_COHERENT_REMOTE`, since Linux 6.0).
    DeviceCoherentRemote,
    /// A value this crate does not know (the high nibble of the state byte).
    Unknown(u8),
}

/// The state of one page in a [`Dmirror::snapshot`], decoded from test_hmm's state byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageState {
    /// No valid mirror entry could be made (`HMM_DMIRROR_PROT_ERROR`): nothing is mapped at
    /// the address, or the mapping allows no access (PROT_NONE).
    Error,
    /// Mapped but not populated, or with no access the device can use
    /// (`HMM_DMIRROR_PROT_NONE`); also a page in another device's private memory.
    None,
    /// Present in the CPU page tables.
    Mapped {
        /// What backs it.
        kind: PageKind,
        /// Read or write access, and PMD/PUD mapping.
        prot: MirrorProt,
    },
}

impl PageState {
    /// Decodes test_hmm's state byte.
    pub fn from_raw(b: u8) -> Self {
        if b == tsys::HMM_DMIRROR_PROT_ERROR as u8 {
            return Self::Error;
        }
        if b == tsys::HMM_DMIRROR_PROT_NONE as u8 {
            return Self::None;
        }
        let kind = match u32::from(b & 0xf0) {
            0 => PageKind::System,
            tsys::HMM_DMIRROR_PROT_ZERO => PageKind::Zero,
            tsys::HMM_DMIRROR_PROT_DEV_PRIVATE_LOCAL => PageKind::DevicePrivateLocal,
            tsys::HMM_DMIRROR_PROT_DEV_PRIVATE_REMOTE => PageKind::DevicePrivateRemote,
            tsys::HMM_DMIRROR_PROT_DEV_COHERENT_LOCAL => PageKind::DeviceCoherentLocal,
            tsys::HMM_DMIRROR_PROT_DEV_COHERENT_REMOTE => PageKind::DeviceCoherentRemote,
            _ => PageKind::Unknown(b & 0xf0),
        };
        Self::Mapped {
            kind,
            prot: MirrorProt::from_bits_retain(b & 0x0f),
        }
    }

    /// The state byte this was decoded from.
    pub fn raw(self) -> u8 {
        match self {
            Self::Error => tsys::HMM_DMIRROR_PROT_ERROR as u8,
            Self::None => tsys::HMM_DMIRROR_PROT_NONE as u8,
            Self::Mapped { kind, prot } => {
                let k = match kind {
                    PageKind::System => 0,
                    PageKind::Zero => tsys::HMM_DMIRROR_PROT_ZERO as u8,
                    PageKind::DevicePrivateLocal => tsys::HMM_DMIRROR_PROT_DEV_PRIVATE_LOCAL as u8,
                    PageKind::DevicePrivateRemote => {
                        tsys::HMM_DMIRROR_PROT_DEV_PRIVATE_REMOTE as u8
                    }
                    PageKind::DeviceCoherentLocal => {
                        tsys::HMM_DMIRROR_PROT_DEV_COHERENT_LOCAL as u8
                    }
                    PageKind::DeviceCoherentRemote => {
                        tsys::HMM_DMIRROR_PROT_DEV_COHERENT_REMOTE as u8
                    }
                    PageKind::Unknown(k) => k,
                };
                k | prot.bits()
            }
        }
    }
}

/// What a mirror request reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorReport {
    /// Pages the device copied, migrated or examined (`cpages`).
    pub cpages: u64,
    /// Rounds of device page faults it took (`faults`): 0 when its page table already
    /// held every page, usually 1 otherwise.
    pub faults: u64,
}

impl From<CmdOut> for MirrorReport {
    fn from(c: CmdOut) -> Self {
        Self {
            cpages: c.cpages,
            faults: c.faults,
        }
    }
}

impl HmmLayout {
    /// The layout a kernel of this version has, by version alone (the cross-check of the
    /// probe, never used on its own).
    pub fn for_kernel_version(major: u32, minor: u32) -> Self {
        match (major, minor) {
            (..=4, _) | (5, ..=13) => Self::V5_10,
            (5, _) => Self::V5_14,
            _ => Self::V6_0,
        }
    }

    /// Finds the layout of the test_hmm file `fd` with the harmless probe described in the
    /// [module documentation](crate::dmirror), checked against the running kernel's version.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `fd` is not a test_hmm device; [`Error::Unsupported`]
    /// when the probe gets an answer no known layout gives, or when probe and kernel
    /// version disagree.
    pub fn detect(fd: BorrowedFd<'_>) -> Result<Self> {
        let probed = sys_call::probe_layout(fd)?;
        confirm_layout(probed)?;
        Ok(probed)
    }
}

/// Checks a probed layout against the running kernel's version.
fn confirm_layout(probed: HmmLayout) -> Result<()> {
    let (major, minor) = kernel_version();
    let by_version = HmmLayout::for_kernel_version(major, minor);
    if probed != by_version {
        return Err(Error::Unsupported {
            feature: "test_hmm request numbering",
            reason: format!(
                "the probe answers like the {probed:?} layout but Linux {major}.{minor} \
                 should have {by_version:?}; refusing to guess"
            ),
            errno: None,
        });
    }
    Ok(())
}

/// An open test_hmm mirror device (`/dev/hmm_dmirrorN`) mirroring this process.
#[derive(Debug)]
pub struct Dmirror {
    pub(crate) file: MirrorFile,
    path: Option<PathBuf>,
}

impl Dmirror {
    /// Opens `/dev/hmm_dmirror{unit}` and detects its request numbering. Units 0 and 1 use
    /// device-private memory; 2 and 3 (since Linux 6.0) device-coherent memory, and exist
    /// only when the module was loaded with `spm_addr_dev0/1`.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the node is missing although the module is loaded (Linux
    /// before 5.16 creates no nodes: make them with `mknod`, major from `/proc/devices`),
    /// [`Error::Open`] otherwise, and the errors of [`Dmirror::from_fd`].
    pub fn open(unit: u32) -> Result<Self> {
        Self::open_path(format!("/dev/hmm_dmirror{unit}"))
    }

    /// Opens a mirror device node by path (see [`Dmirror::open`]).
    pub fn open_path(path: impl AsRef<Path>) -> Result<Self> {
        use rustix::fs::{Mode, OFlags};
        let path = path.as_ref();
        let fd = match sys_call::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if sys_call::dmirror_major().is_some() => {
                return Err(Error::NotFound {
                    what: format!(
                        "{}: test_hmm is loaded (HMM_DMIRROR in /proc/devices) but this \
                         kernel made no node; create it with mknod",
                        path.display()
                    ),
                });
            }
            Err(errno) => {
                return Err(Error::Open {
                    path: path.to_path_buf(),
                    errno,
                });
            }
        };
        let mut d = Self::from_fd(fd)?;
        d.path = Some(path.to_path_buf());
        Ok(d)
    }

    /// Adopts an open test_hmm file and detects its numbering ([`HmmLayout::detect`]). The
    /// file mirrors the address space of the process that opened it, which must be this
    /// one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `fd` is not a test_hmm character device (its major
    /// number is checked against `HMM_DMIRROR` in `/proc/devices` before any request, since
    /// other drivers use the same ioctl type letter); [`Error::Unsupported`] when the
    /// numbering cannot be told for sure.
    pub fn from_fd(fd: OwnedFd) -> Result<Self> {
        Ok(Self {
            file: MirrorFile::new(fd, confirm_layout)?,
            path: None,
        })
    }

    /// The request numbering of the running kernel's test_hmm.
    pub fn layout(&self) -> HmmLayout {
        self.file.layout()
    }

    /// The node this was opened from, if opened by path.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// `HMM_DMIRROR_READ`: the device reads the range through its page table (faulting
    /// pages in as needed) into `out`, which must be exactly the range's length.
    ///
    /// # Errors
    /// EFAULT where the memory cannot be read (PROT_NONE, nothing mapped); EBUSY if the
    /// range kept changing for a second.
    pub fn read(&self, range: PageRange, out: &mut [u8]) -> Result<MirrorReport> {
        check_len(range, out.len())?;
        Ok(self
            .file
            .copy_out(Op::Read, range.start, range.npages, out)?
            .into())
    }

    // `write` (unsafe) and `write_into` (`HMM_DMIRROR_WRITE`) are in `sys_call` (the
    // crate's only unsafe code).

    /// `HMM_DMIRROR_MIGRATE_TO_DEV` (`HMM_DMIRROR_MIGRATE` before Linux 6.0): moves the
    /// range's anonymous pages into the device's memory, then copies what the device holds
    /// into `out` (exactly the range's length). The CPU's next access to a migrated page
    /// faults it back (device-private memory); contents never change.
    ///
    /// # Errors
    /// EINVAL where the range is not covered by readable mappings (PROT_NONE, holes);
    /// ENOENT when some page could not be moved (shared mappings, pages on another device),
    /// because the copy back then finds it missing.
    pub fn migrate_to_device(&self, range: PageRange, out: &mut [u8]) -> Result<MirrorReport> {
        check_len(range, out.len())?;
        Ok(self
            .file
            .copy_out(Op::MigrateToDev, range.start, range.npages, out)?
            .into())
    }

    /// `HMM_DMIRROR_MIGRATE_TO_SYS` (since Linux 6.0): moves the range's pages back from
    /// the device's memory; `cpages` counts the pages moved.
    ///
    /// # Errors
    /// [`Error::Unsupported`] before Linux 6.0 (there a CPU access faults a page back).
    pub fn migrate_to_system(&self, range: PageRange) -> Result<MirrorReport> {
        Ok(self
            .file
            .no_buffer(Op::MigrateToSys, range.start, range.npages)?
            .into())
    }

    /// `HMM_DMIRROR_SNAPSHOT`: what the CPU page tables hold for each page of the range,
    /// as this device sees it, without faulting anything in.
    pub fn snapshot(&self, range: PageRange) -> Result<Vec<PageState>> {
        let n = usize::try_from(range.npages).map_err(|_| invalid("range too large".into()))?;
        let mut raw = vec![0u8; n];
        let r = self.file.snapshot(range.start, &mut raw)?;
        if r.cpages != range.npages {
            return Err(invalid(format!(
                "SNAPSHOT examined {} of {} pages",
                r.cpages, range.npages
            )));
        }
        Ok(raw.into_iter().map(PageState::from_raw).collect())
    }

    /// `HMM_DMIRROR_EXCLUSIVE` (since Linux 5.14): takes exclusive (atomic) access to the
    /// range's pages for the device: the CPU mappings are replaced by device-exclusive
    /// entries until the CPU touches a page again. Copies the device's view into `out`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on the 5.10 numbering. EBUSY when the kernel could not make
    /// every page exclusive: on Linux 6.1 and 6.12 that is the case for the pages of a
    /// transparent huge page (`make_device_exclusive_range` skips the tail pages of large
    /// folios), so back the range with small pages (`MADV_NOHUGEPAGE`).
    pub fn make_exclusive(&self, range: PageRange, out: &mut [u8]) -> Result<MirrorReport> {
        check_len(range, out.len())?;
        Ok(self
            .file
            .copy_out(Op::Exclusive, range.start, range.npages, out)?
            .into())
    }

    /// `HMM_DMIRROR_CHECK_EXCLUSIVE` (since Linux 5.14): whether the device still holds
    /// exclusive access to some page of the range (true: the kernel answers EPERM), or the
    /// CPU has taken every page back (false).
    pub fn check_exclusive(&self, range: PageRange) -> Result<bool> {
        match self
            .file
            .no_buffer(Op::CheckExclusive, range.start, range.npages)
        {
            Ok(_) => Ok(false),
            Err(Error::Ioctl { errno, .. }) if errno == Errno::PERM => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// `HMM_DMIRROR_RELEASE` (since Linux 6.1): the device gives up all its memory, moving
    /// every page it holds, for any process, back to system memory.
    ///
    /// # Errors
    /// [`Error::Unsupported`] before Linux 6.1 (a 6.0 kernel answers EINVAL).
    pub fn release(&self) -> Result<()> {
        // A valid one-page range at 0, so that EINVAL can only mean an unknown request.
        match self.file.no_buffer(Op::Release, 0, 1) {
            Ok(_) => Ok(()),
            Err(Error::Ioctl { errno, .. }) if errno == Errno::INVAL => Err(Error::Unsupported {
                feature: "HMM_DMIRROR_RELEASE",
                reason: "the kernel does not know the request (EINVAL; added in Linux 6.1)".into(),
                errno: Some(errno),
            }),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Dmirror {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.fd()
    }
}

/// The CPU page size.
pub fn page_size() -> usize {
    sys_call::page_size()
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument { what }
}

pub(crate) fn check_len(range: PageRange, len: usize) -> Result<()> {
    if len != range.len_bytes() {
        return Err(invalid(format!(
            "buffer of {len} bytes for a range of {} pages ({} bytes)",
            range.npages,
            range.len_bytes()
        )));
    }
    Ok(())
}

/// The running kernel's `major.minor` (`uname`).
fn kernel_version() -> (u32, u32) {
    let u = rustix::system::uname();
    let rel = u.release().to_string_lossy();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bytes_decode_and_round_trip() {
        assert_eq!(PageState::from_raw(0xff), PageState::Error);
        assert_eq!(PageState::from_raw(0), PageState::None);
        assert_eq!(
            PageState::from_raw(0x11),
            PageState::Mapped {
                kind: PageKind::Zero,
                prot: MirrorProt::READ
            }
        );
        assert_eq!(
            PageState::from_raw(0x22),
            PageState::Mapped {
                kind: PageKind::DevicePrivateLocal,
                prot: MirrorProt::WRITE
            }
        );
        assert_eq!(
            PageState::from_raw(0x06),
            PageState::Mapped {
                kind: PageKind::System,
                prot: MirrorProt::WRITE | MirrorProt::PMD
            }
        );
        for b in 0..=255u8 {
            assert_eq!(PageState::from_raw(b).raw(), b, "{b:#x}");
        }
    }

    #[test]
    fn layouts_by_version_and_requests() {
        assert_eq!(HmmLayout::for_kernel_version(5, 10), HmmLayout::V5_10);
        assert_eq!(HmmLayout::for_kernel_version(5, 15), HmmLayout::V5_14);
        assert_eq!(HmmLayout::for_kernel_version(6, 1), HmmLayout::V6_0);
        use sys_call::request;
        assert_eq!(request(HmmLayout::V5_10, Op::Exclusive), None);
        assert_eq!(request(HmmLayout::V5_14, Op::Release), None);
        // The same number, different meanings: why the layout must be known.
        assert_eq!(
            request(HmmLayout::V5_14, Op::Snapshot).unwrap().0,
            request(HmmLayout::V6_0, Op::MigrateToSys).unwrap().0
        );
    }

    #[test]
    fn ranges_are_checked_before_the_kernel() {
        let p = page_size();
        assert!(PageRange::new(p + 1, 1).is_err());
        assert!(PageRange::new(p, 0).is_err());
        assert!(PageRange::new(usize::MAX - p + 1, 2).is_err());
        let r = PageRange::new(4 * p, 3).unwrap();
        assert_eq!(r.len_bytes(), 3 * p);
        assert_eq!(r.pages(1, 2).unwrap().start(), 5 * p);
        assert!(r.pages(2, 2).is_err());
    }
}
