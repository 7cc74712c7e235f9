//! dma-buf file descriptors: PRIME export and import, size, mapping, CPU-access sync,
//! names, fdinfo, and the implicit fences (sync_file export and import, poll).

use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::gem::GemObject;
use crate::mapping::Mapping;
use crate::sync_file::SyncFile;
use crate::sys_call;
use ioctl_sys::{dma_buf as dsys, drm as sys};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::time::Duration;

bitflags::bitflags! {
    /// Which side of a dma-buf's implicit fences a call is about (`DMA_BUF_SYNC_READ`,
    /// `DMA_BUF_SYNC_WRITE`). A reader waits for writers; a writer waits for everyone.
    /// Bits this crate does not name can be passed with `from_bits_retain`; the kernel
    /// rejects them (and an empty set) with EINVAL.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct DmaBufSync: u32 {
        /// The reader side.
        const READ = dsys::DMA_BUF_SYNC_READ;
        /// The writer side.
        const WRITE = dsys::DMA_BUF_SYNC_WRITE;
    }
}

/// What a dma-buf's fdinfo (`/proc/<pid>/fdinfo/<fd>`) says about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DmaBufInfo {
    /// Size in bytes (`size:`).
    pub size: u64,
    /// Open file references to the dma-buf (`count:`).
    pub count: Option<u64>,
    /// The exporter (`exp_name:`): a driver or module name such as `drm`, `udmabuf`.
    pub exp_name: Option<String>,
    /// The name set with [`DmaBuf::set_name`] (`name:`), if any.
    pub name: Option<String>,
}

impl DmaBufInfo {
    /// Parses fdinfo text. `None` when it has no `size:` line (not a dma-buf).
    ///
    /// The kernel prints `size`, `count`, `exp_name` and last, when set, `name:\t<name>`
    /// with whatever bytes `DMA_BUF_SET_NAME` gave (newlines included): so the name is the
    /// rest of the text, never more keys, and a key seen twice keeps its first value.
    pub fn parse(text: &str) -> Option<Self> {
        let mut info = Self::default();
        let mut size = None;
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(name) = rest.strip_prefix("name:") {
                let name = name.strip_prefix('\t').unwrap_or(name);
                info.name = Some(name.strip_suffix('\n').unwrap_or(name).to_string());
                break;
            }
            let (line, next) = rest.split_once('\n').unwrap_or((rest, ""));
            rest = next;
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "size" if size.is_none() => size = Some(value.parse().ok()),
                "count" if info.count.is_none() => info.count = value.parse().ok(),
                "exp_name" if info.exp_name.is_none() => info.exp_name = Some(value.to_string()),
                _ => {}
            }
        }
        info.size = size??;
        Some(info)
    }
}

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

impl DmaBuf {
    /// `DMA_BUF_SET_NAME_B`: names the buffer, for debugging; the name shows in its fdinfo
    /// ([`DmaBuf::info`]) and replaces any earlier one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name with a NUL byte. The kernel takes at most 31
    /// bytes (`DMA_BUF_NAME_LEN` with the NUL) and answers EINVAL for longer names; Linux
    /// 5.10 answers EBUSY while a device has the buffer attached (imported).
    pub fn set_name(&self, name: &str) -> Result<()> {
        let c = std::ffi::CString::new(name).map_err(|_| Error::InvalidArgument {
            what: format!("dma-buf name {name:?} contains a NUL byte"),
        })?;
        sys_call::dma_buf_set_name(self.0.as_fd(), &c)
    }

    /// Reads `/proc/self/fdinfo/<fd>`: size, reference count, exporter and name.
    pub fn info(&self) -> Result<DmaBufInfo> {
        let path = format!("/proc/self/fdinfo/{}", self.0.as_raw_fd());
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Open {
            path: path.clone().into(),
            errno: e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error),
        })?;
        DmaBufInfo::parse(&text).ok_or_else(|| Error::InvalidArgument {
            what: format!("{path} has no size: line (not a dma-buf)"),
        })
    }

    /// `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` (since Linux 6.0): a sync_file holding the fences a
    /// [`DmaBufSync::READ`]er must wait for (the writers) or that a
    /// [`DmaBufSync::WRITE`]r must wait for (all). Without such fences it holds an
    /// already signalled one.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the kernel does not know the ioctl (ENOTTY).
    pub fn export_sync_file(&self, access: DmaBufSync) -> Result<SyncFile> {
        let mut a = dsys::dma_buf_export_sync_file {
            flags: access.bits(),
            fd: -1,
        };
        sys_call::dma_buf_export_sync_file(self.0.as_fd(), &mut a).map_err(no_sync_file_ioctl)?;
        Ok(SyncFile::from_fd(sys_call::own_fd(
            "DMA_BUF_IOCTL_EXPORT_SYNC_FILE",
            a.fd,
        )?))
    }

    /// `DMA_BUF_IOCTL_IMPORT_SYNC_FILE` (since Linux 6.0): adds the sync_file's fences to
    /// the buffer as readers ([`DmaBufSync::READ`]) or writers ([`DmaBufSync::WRITE`]), so
    /// implicit-sync users (poll, CPU access, other drivers) wait for them.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the kernel does not know the ioctl (ENOTTY); EINVAL from
    /// the kernel when `sync_file` is not a sync_file.
    pub fn import_sync_file(&self, sync_file: BorrowedFd<'_>, access: DmaBufSync) -> Result<()> {
        let mut a = dsys::dma_buf_import_sync_file {
            flags: access.bits(),
            fd: sync_file.as_raw_fd(),
        };
        sys_call::dma_buf_import_sync_file(self.0.as_fd(), &mut a).map_err(no_sync_file_ioctl)
    }

    /// Waits (`poll`) until the fences a reader (`POLLIN`) or a writer (`POLLOUT`, when
    /// `access` has [`DmaBufSync::WRITE`]) must wait for have signalled. `None` waits
    /// forever; false once `timeout` (measured from the call, whatever signals interrupt
    /// the wait) has passed.
    pub fn wait_fences(&self, access: DmaBufSync, timeout: Option<Duration>) -> Result<bool> {
        use rustix::event::{PollFd, PollFlags};
        let events = if access.contains(DmaBufSync::WRITE) {
            PollFlags::OUT
        } else if access.contains(DmaBufSync::READ) {
            PollFlags::IN
        } else {
            return Err(Error::InvalidArgument {
                what: "wait for the reader side, the writer side, or both".into(),
            });
        };
        let deadline = crate::deadline::Deadline::after(timeout);
        let mut fds = [PollFd::new(&self.0, events)];
        crate::deadline::poll(&mut fds, deadline)?;
        Ok(fds[0].revents().contains(events))
    }
}

/// ENOTTY from a dma-buf: the running kernel predates the sync_file ioctls.
fn no_sync_file_ioctl(e: Error) -> Error {
    match e {
        Error::Ioctl { name, errno } if errno == Errno::NOTTY => Error::Unsupported {
            feature: name,
            reason: "the kernel does not know the ioctl (ENOTTY; added in Linux 6.0)".into(),
            errno: Some(errno),
        },
        e => e,
    }
}

impl AsFd for DmaBuf {
    #[inline]
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
        // Drop never panics: a failure is counted process-wide (a dma-buf has no Device).
        let r = sys_call::dma_buf_sync(self.buf.0.as_fd(), &mut a);
        crate::release::unowned().check("DMA_BUF_IOCTL_SYNC", r);
    }
}

impl Device {
    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`: exports a GEM object of this device as a dma-buf.
    #[inline]
    pub fn export(&self, obj: &GemObject<impl DeviceRef>, flags: PrimeFlags) -> Result<DmaBuf> {
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
        Ok(DmaBuf(sys_call::own_fd(
            "DRM_IOCTL_PRIME_HANDLE_TO_FD",
            a.fd,
        )?))
    }

    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`: imports a dma-buf. Importing the same dma-buf again
    /// on this device returns the same handle with one more owner; it is closed once the
    /// last owner is dropped.
    ///
    /// Kernels before upstream ea2aa97ca37a ("drm/gem: Fix GEM handle release errors",
    /// 6.0; stable 5.15.68) can answer a closed handle's number here when an object had
    /// two handles in this file (`GEM_OPEN` of its flink name, `GETFB2`), both were
    /// exported and one was closed: the number is then dead or another object's. This
    /// library cannot tell from the answer; on such kernels keep one handle per object in
    /// a file (open names through another `Device`).
    #[inline]
    pub fn import(&self, buf: BorrowedFd<'_>) -> Result<GemObject<&Device>> {
        GemObject::import(self, buf)
    }

    /// PRIME_FD_TO_HANDLE with its new owner counted under the handle lock.
    #[inline]
    pub(crate) fn import_counted(&self, buf: BorrowedFd<'_>) -> Result<crate::GemHandle> {
        use rustix::fd::AsRawFd;
        let mut a = sys::drm_prime_handle {
            handle: 0,
            flags: 0,
            fd: buf.as_raw_fd(),
        };
        // The kernel answers with the handle this open file already has for the buffer, if
        // any: import and adopt under the handle lock, so that its last owner cannot close
        // the number in between (see `GemObject`'s Drop).
        self.with_handles(|t| {
            sys_call::prime_fd_to_handle(self.as_fd(), &mut a)?;
            let h = crate::gem::nonzero_handle("DRM_IOCTL_PRIME_FD_TO_HANDLE", a.handle)?;
            t.acquire(h.get());
            Ok(h)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_parsing() {
        // As Linux 6.12 prints it for a named vgem buffer.
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1061\nsize:\t8192\n\
                    count:\t1\nexp_name:\tdrm\nname:\tscanout-0\n";
        let i = DmaBufInfo::parse(text).unwrap();
        assert_eq!(i.size, 8192);
        assert_eq!(i.count, Some(1));
        assert_eq!(i.exp_name.as_deref(), Some("drm"));
        assert_eq!(i.name.as_deref(), Some("scanout-0"));
        let unnamed = DmaBufInfo::parse("size:\t4096\ncount:\t2\nexp_name:\tudmabuf\n").unwrap();
        assert_eq!(unnamed.name, None);
        assert_eq!(DmaBufInfo::parse("pos:\t0\nflags:\t02\n"), None);
        assert_eq!(DmaBufSync::READ.bits(), 1);
        assert_eq!(DmaBufSync::WRITE.bits(), 2);
    }

    #[test]
    fn a_name_cannot_add_keys() {
        let text = "size:\t8192\ncount:\t1\nexp_name:\tdrm\nname:\tx\nsize:\t1099511627776\n";
        let i = DmaBufInfo::parse(text).unwrap();
        assert_eq!(i.size, 8192);
        assert_eq!(i.name.as_deref(), Some("x\nsize:\t1099511627776"));
        let twice = DmaBufInfo::parse("size:\t4096\nsize:\t1\n").unwrap();
        assert_eq!(twice.size, 4096, "the first value is kept");
    }
}
