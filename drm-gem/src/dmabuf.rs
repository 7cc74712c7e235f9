//! dma-buf file descriptors: PRIME export and import, size, mapping, CPU-access sync.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::gem::{GemObject, Release};
use crate::mapping::Mapping;
use crate::sys_call;
use ioctl_sys::{dma_buf as dsys, drm as sys};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

/// Flags for PRIME export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrimeFlags {
    /// Map read-write (`DRM_RDWR`); without it importers' mmaps are read-only.
    pub read_write: bool,
    /// Close-on-exec (`DRM_CLOEXEC`).
    pub cloexec: bool,
}

impl Default for PrimeFlags {
    /// Read-write and close-on-exec.
    fn default() -> Self {
        Self {
            read_write: true,
            cloexec: true,
        }
    }
}

/// A dma-buf (`doc(alias = "prime")`): an `OwnedFd` naming a buffer shareable between
/// devices and processes. Made by PRIME export here, or by udmabuf and dma-buf heaps.
#[doc(alias = "prime")]
#[derive(Debug)]
pub struct DmaBuf(OwnedFd);

impl DmaBuf {
    /// Adopts an fd that is a dma-buf (not checked beyond what later calls report).
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// Size in bytes (`lseek(SEEK_END)`, which dma-buf supports for exactly this).
    pub fn size(&self) -> Result<u64> {
        let end = rustix::fs::seek(&self.0, rustix::fs::SeekFrom::End(0))
            .map_err(|e| Error::syscall("lseek", e))?;
        rustix::fs::seek(&self.0, rustix::fs::SeekFrom::Start(0))
            .map_err(|e| Error::syscall("lseek", e))?;
        Ok(end)
    }

    /// Maps the whole buffer read-write (the exporter must allow it: PRIME `read_write`).
    ///
    /// Takes `&self`, so that a [`CpuAccess`] guard can be held around reads and writes of
    /// the mapping; several mappings of one dma-buf may coexist (they are the same memory,
    /// and the safe API only copies in and out).
    pub fn map(&self) -> Result<Mapping<'_>> {
        let len = usize::try_from(self.size()?).map_err(|_| Error::InvalidArgument {
            what: "dma-buf larger than the address space".into(),
        })?;
        Mapping::new(self.0.as_fd(), 0, len)
    }

    /// Begins CPU access (`DMA_BUF_IOCTL_SYNC` with `START`); the returned guard ends it on
    /// drop. Wrap every CPU read or write of a mapping that a device may also touch.
    pub fn begin_cpu_access(&self, read: bool, write: bool) -> Result<CpuAccess<'_>> {
        let mut rw = 0u64;
        if read {
            rw |= u64::from(dsys::DMA_BUF_SYNC_READ);
        }
        if write {
            rw |= u64::from(dsys::DMA_BUF_SYNC_WRITE);
        }
        if rw == 0 {
            return Err(Error::InvalidArgument {
                what: "CPU access must be read, write or both".into(),
            });
        }
        let mut a = dsys::dma_buf_sync {
            flags: rw | u64::from(dsys::DMA_BUF_SYNC_START),
        };
        sys_call::dma_buf_sync(self.0.as_fd(), &mut a)?;
        Ok(CpuAccess { buf: self, rw })
    }
}

impl AsFd for DmaBuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<DmaBuf> for OwnedFd {
    fn from(d: DmaBuf) -> OwnedFd {
        d.0
    }
}

/// CPU access to a dma-buf in progress; ends (`DMA_BUF_SYNC_END`) on drop.
#[derive(Debug)]
pub struct CpuAccess<'a> {
    buf: &'a DmaBuf,
    rw: u64,
}

impl Drop for CpuAccess<'_> {
    fn drop(&mut self) {
        let mut a = dsys::dma_buf_sync {
            flags: self.rw | u64::from(dsys::DMA_BUF_SYNC_END),
        };
        let r = sys_call::dma_buf_sync(self.buf.0.as_fd(), &mut a);
        debug_assert!(r.is_ok(), "DMA_BUF_SYNC end failed: {r:?}");
    }
}

impl Device {
    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`: exports a GEM object of this device as a dma-buf.
    pub fn export(&self, obj: &GemObject<'_>, flags: PrimeFlags) -> Result<DmaBuf> {
        if !core::ptr::eq(obj.device(), self) {
            return Err(Error::InvalidArgument {
                what: "the GEM object belongs to another Device (handles are per open file)".into(),
            });
        }
        let mut f = 0u32;
        if flags.read_write {
            f |= sys::DRM_RDWR;
        }
        if flags.cloexec {
            f |= sys::DRM_CLOEXEC;
        }
        let mut a = sys::drm_prime_handle {
            handle: obj.handle().get(),
            flags: f,
            fd: -1,
        };
        sys_call::prime_handle_to_fd(self.as_fd(), &mut a)?;
        Ok(DmaBuf(sys_call::own_fd(a.fd)?))
    }

    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`: imports a dma-buf. Importing the same dma-buf again
    /// on this device returns the same handle with one more owner; it is closed once the
    /// last owner is dropped.
    pub fn import(&self, buf: BorrowedFd<'_>) -> Result<GemObject<'_>> {
        use rustix::fd::AsRawFd;
        let mut a = sys::drm_prime_handle {
            handle: 0,
            flags: 0,
            fd: buf.as_raw_fd(),
        };
        sys_call::prime_fd_to_handle(self.as_fd(), &mut a)?;
        GemObject::adopt(self, a.handle, Release::Close)
    }
}
