//! udmabuf: dma-bufs made from memfd pages, so that devices can use ordinary process
//! memory (the userptr idea, done by the kernel's own exporter).
//!
//! The kernel pins the memfd's pages when the dma-buf is made and refuses a memfd that
//! could shrink under it (it must carry `F_SEAL_SHRINK`) or that must never be written
//! (`F_SEAL_WRITE`, and since late 2024 also `F_SEAL_FUTURE_WRITE`). [`SealedMemfd`] is
//! made that way and adds `F_SEAL_SEAL`, so that nobody can add a write seal later. The
//! result is drm-gem's [`DmaBuf`]: map it, or import it into a DRM device by PRIME.
//!
//! The dma-buf and the memfd share their pages: a write through either is seen through the
//! other (punching holes into the memfd with `fallocate` would break that, and is the one
//! thing `F_SEAL_SHRINK` does not forbid).
//!
//! ```no_run
//! use hmm::{SealedMemfd, Udmabuf};
//! let memfd = SealedMemfd::new("frame", 1 << 20)?;
//! memfd.write_at(0, b"hello")?;
//! let buf = Udmabuf::open()?.create(&memfd, 0, 1 << 20)?;
//! let mut first = [0u8; 5];
//! buf.map()?.read_at(0, &mut first)?;
//! assert_eq!(&first, b"hello");
//! # Ok::<(), drm_gem::Error>(())
//! ```

use crate::sys_call;
use drm_gem::{DmaBuf, Errno, Error, Result};
use ioctl_sys::udmabuf as usys;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::SealFlags;
use std::path::Path;

/// A memfd that udmabuf accepts: sealed against shrinking (`F_SEAL_SHRINK`) and against
/// further sealing (`F_SEAL_SEAL`), never against writes. Close-on-exec.
#[derive(Debug)]
pub struct SealedMemfd {
    fd: OwnedFd,
}

/// Builder of a [`SealedMemfd`].
#[derive(Debug, Clone)]
pub struct SealedMemfdBuilder {
    name: String,
    size: u64,
    seal_grow: bool,
    hugetlb: bool,
}

impl SealedMemfdBuilder {
    /// The name shown in `/proc/<pid>/fd` (`memfd:<name>`); at most 249 bytes.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Also seal against growing (`F_SEAL_GROW`); the default lets the file grow.
    pub fn seal_grow(mut self, yes: bool) -> Self {
        self.seal_grow = yes;
        self
    }

    /// Back the file with huge pages (`MFD_HUGETLB`; udmabuf takes those since Linux 6.1).
    /// The size must then be a multiple of the huge page size.
    pub fn hugetlb(mut self, yes: bool) -> Self {
        self.hugetlb = yes;
        self
    }

    /// Creates the memfd (`memfd_create` with `MFD_CLOEXEC | MFD_ALLOW_SEALING`), sizes it
    /// and seals it.
    pub fn build(self) -> Result<SealedMemfd> {
        use rustix::fs::{MemfdFlags, fcntl_add_seals, ftruncate, memfd_create};
        let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
        if self.hugetlb {
            flags |= MemfdFlags::HUGETLB;
        }
        let name =
            std::ffi::CString::new(self.name.clone()).map_err(|_| Error::InvalidArgument {
                what: format!("memfd name {:?} contains a NUL byte", self.name),
            })?;
        let fd = memfd_create(name.as_c_str(), flags).map_err(|e| Error::Syscall {
            name: "memfd_create",
            errno: e,
        })?;
        ftruncate(&fd, self.size).map_err(|e| Error::Syscall {
            name: "ftruncate",
            errno: e,
        })?;
        let mut seals = SealFlags::SHRINK | SealFlags::SEAL;
        if self.seal_grow {
            seals |= SealFlags::GROW;
        }
        fcntl_add_seals(&fd, seals).map_err(|e| Error::Syscall {
            name: "fcntl(F_ADD_SEALS)",
            errno: e,
        })?;
        Ok(SealedMemfd { fd })
    }
}

impl SealedMemfd {
    /// A builder for a memfd of `size` bytes (a multiple of the page size, for udmabuf).
    pub fn builder(size: u64) -> SealedMemfdBuilder {
        SealedMemfdBuilder {
            name: "udmabuf".into(),
            size,
            seal_grow: false,
            hugetlb: false,
        }
    }

    /// A memfd named `name` of `size` bytes, with the default seals.
    pub fn new(name: &str, size: u64) -> Result<Self> {
        Self::builder(size).name(name).build()
    }

    /// Adopts a memfd made elsewhere, after checking its seals now: `F_SEAL_SHRINK` present,
    /// `F_SEAL_WRITE` and `F_SEAL_FUTURE_WRITE` absent. Without `F_SEAL_SEAL` another holder
    /// of the file could still add a write seal later (udmabuf then answers EINVAL).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the missing or forbidden seal; the `fcntl` error
    /// (EINVAL) for a file that is not a memfd.
    pub fn from_fd(fd: OwnedFd) -> Result<Self> {
        let seals = seals_of(fd.as_fd())?;
        check_seals(seals)?;
        Ok(Self { fd })
    }

    /// The seals the file carries now.
    pub fn seals(&self) -> Result<SealFlags> {
        seals_of(self.fd.as_fd())
    }

    /// Size in bytes.
    pub fn size(&self) -> Result<u64> {
        let st = rustix::fs::fstat(&self.fd).map_err(|e| Error::Syscall {
            name: "fstat",
            errno: e,
        })?;
        Ok(st.st_size as u64)
    }

    /// Writes `data` at `offset` (`pwrite`), all of it.
    pub fn write_at(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            match rustix::io::pwrite(&self.fd, data, offset) {
                Ok(0) => {
                    return Err(Error::Syscall {
                        name: "pwrite",
                        errno: Errno::NOSPC,
                    });
                }
                Ok(n) => {
                    data = &data[n..];
                    offset += n as u64;
                }
                Err(Errno::INTR) => {}
                Err(e) => {
                    return Err(Error::Syscall {
                        name: "pwrite",
                        errno: e,
                    });
                }
            }
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset` (`pread`); bytes past the end read as an error.
    pub fn read_at(&self, mut offset: u64, mut buf: &mut [u8]) -> Result<()> {
        while !buf.is_empty() {
            match rustix::io::pread(&self.fd, &mut *buf, offset) {
                Ok(0) => {
                    return Err(Error::InvalidArgument {
                        what: format!("read past the end of the memfd at {offset}"),
                    });
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(Errno::INTR) => {}
                Err(e) => {
                    return Err(Error::Syscall {
                        name: "pread",
                        errno: e,
                    });
                }
            }
        }
        Ok(())
    }
}

impl AsFd for SealedMemfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl From<SealedMemfd> for OwnedFd {
    fn from(m: SealedMemfd) -> OwnedFd {
        m.fd
    }
}

fn seals_of(fd: BorrowedFd<'_>) -> Result<SealFlags> {
    rustix::fs::fcntl_get_seals(fd).map_err(|e| Error::Syscall {
        name: "fcntl(F_GET_SEALS)",
        errno: e,
    })
}

/// The seal rules of udmabuf, checked before the kernel is asked.
fn check_seals(seals: SealFlags) -> Result<()> {
    if !seals.contains(SealFlags::SHRINK) {
        return Err(Error::InvalidArgument {
            what: "the memfd lacks F_SEAL_SHRINK, which udmabuf requires".into(),
        });
    }
    if seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE) {
        return Err(Error::InvalidArgument {
            what: "the memfd carries F_SEAL_WRITE or F_SEAL_FUTURE_WRITE, which udmabuf refuses"
                .into(),
        });
    }
    Ok(())
}

/// One piece of a [`Udmabuf::create_list`] buffer: `size` bytes of `memfd` from `offset`,
/// both page-aligned.
#[derive(Debug, Clone, Copy)]
pub struct UdmabufRange<'a> {
    /// The memfd.
    pub memfd: &'a SealedMemfd,
    /// Offset into it in bytes.
    pub offset: u64,
    /// Length in bytes (not 0).
    pub size: u64,
}

/// The limits of the udmabuf driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdmabufLimits {
    /// Most items in one list (`list_limit`, default 1024).
    pub list_limit: u32,
    /// Largest buffer in bytes (`size_limit_mb`, default 64 MiB).
    pub size_limit: u64,
}

/// The udmabuf device (`/dev/udmabuf`).
#[derive(Debug)]
pub struct Udmabuf {
    fd: OwnedFd,
}

impl Udmabuf {
    /// Opens `/dev/udmabuf`.
    pub fn open() -> Result<Self> {
        Self::open_path("/dev/udmabuf")
    }

    /// Opens a udmabuf node by path.
    pub fn open_path(path: impl AsRef<Path>) -> Result<Self> {
        use rustix::fs::{Mode, OFlags};
        let path = path.as_ref();
        let fd = crate::sys_call::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|errno| Error::Open {
                path: path.to_path_buf(),
                errno,
            })?;
        Ok(Self { fd })
    }

    /// The driver's limits: its module parameters where it has them (read from
    /// `/sys/module/udmabuf/parameters/`, never inferred from a version: Linux 5.14+,
    /// "udmabuf: configurable list_limit and size_limit_mb"; 5.15 has them, 5.10.262
    /// not), else the constants of older kernels (the same defaults).
    pub fn limits(&self) -> UdmabufLimits {
        let param = |name: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/sys/module/udmabuf/parameters/{name}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        UdmabufLimits {
            list_limit: param("list_limit").map_or(1024, |v| u32::try_from(v).unwrap_or(u32::MAX)),
            size_limit: param("size_limit_mb").map_or(64, |v| v) << 20,
        }
    }

    /// `UDMABUF_CREATE`: a dma-buf over `size` bytes of `memfd` from `offset`,
    /// close-on-exec.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before the kernel is asked for an offset or size that is
    /// not page-aligned, a size of 0, a range past the end of the memfd, or a size over
    /// [`Udmabuf::limits`] (the kernel answers EINVAL to each).
    pub fn create(&self, memfd: &SealedMemfd, offset: u64, size: u64) -> Result<DmaBuf> {
        let r = UdmabufRange {
            memfd,
            offset,
            size,
        };
        self.check(&[r])?;
        let mut a = usys::udmabuf_create {
            memfd: memfd.fd.as_raw_fd() as u32,
            flags: usys::UDMABUF_FLAGS_CLOEXEC,
            offset,
            size,
        };
        let fd = sys_call::udmabuf_create(self.fd.as_fd(), &mut a)?;
        Ok(DmaBuf::from_fd(fd))
    }

    /// `UDMABUF_CREATE_LIST`: one dma-buf over the ranges, in order, close-on-exec. Ranges
    /// may name the same pages more than once (each appearance maps the same memory).
    ///
    /// # Errors
    /// As [`Udmabuf::create`] for each range and for the total, plus an empty list or more
    /// ranges than [`UdmabufLimits::list_limit`].
    pub fn create_list(&self, ranges: &[UdmabufRange<'_>]) -> Result<DmaBuf> {
        self.check(ranges)?;
        let items: Vec<usys::udmabuf_create_item> = ranges
            .iter()
            .map(|r| usys::udmabuf_create_item {
                memfd: r.memfd.fd.as_raw_fd() as u32,
                __pad: 0,
                offset: r.offset,
                size: r.size,
            })
            .collect();
        let fd =
            sys_call::udmabuf_create_list(self.fd.as_fd(), usys::UDMABUF_FLAGS_CLOEXEC, &items)?;
        Ok(DmaBuf::from_fd(fd))
    }

    fn check(&self, ranges: &[UdmabufRange<'_>]) -> Result<()> {
        let page = rustix::param::page_size() as u64;
        let limits = self.limits();
        let invalid = |what: String| Err(Error::InvalidArgument { what });
        if ranges.is_empty() {
            return invalid("an empty list of udmabuf ranges".into());
        }
        if ranges.len() as u64 > u64::from(limits.list_limit) {
            return invalid(format!(
                "{} ranges, over the driver's list_limit of {}",
                ranges.len(),
                limits.list_limit
            ));
        }
        let mut total = 0u64;
        for (i, r) in ranges.iter().enumerate() {
            if !r.offset.is_multiple_of(page) || !r.size.is_multiple_of(page) {
                return invalid(format!(
                    "range {i}: offset {} and size {} must be multiples of the page size ({page})",
                    r.offset, r.size
                ));
            }
            if r.size == 0 {
                return invalid(format!("range {i} is empty"));
            }
            let len = r.memfd.size()?;
            if r.offset.checked_add(r.size).is_none_or(|end| end > len) {
                return invalid(format!(
                    "range {i}: {} bytes at {} run past the end of the memfd ({len} bytes)",
                    r.size, r.offset
                ));
            }
            check_seals(r.memfd.seals()?)?;
            total = total.saturating_add(r.size);
        }
        if total > limits.size_limit {
            return invalid(format!(
                "{total} bytes, over the driver's size limit of {} bytes",
                limits.size_limit
            ));
        }
        Ok(())
    }
}

impl AsFd for Udmabuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
