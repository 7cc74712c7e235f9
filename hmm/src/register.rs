//! Host registration: what `cudaHostRegister` means on the kernel side, without a GPU
//! vendor's driver. A range of process memory (ordinary, memfd or PMEM/DAX-backed) is made
//! available to a device by one of several backends, and released when the
//! [`HostRegistration`] is dropped.
//!
//! | backend | kernel mechanism | accepts |
//! |---|---|---|
//! | [`Backend::Pinned`] | `mlock` (pages resident and locked), then the page frames from `/proc/self/pagemap` | any range; PFNs only with CAP_SYS_ADMIN |
//! | [`Backend::Udmabuf`] | `/dev/udmabuf` turns memfd pages into a dma-buf | whole pages of a shared memfd mapping |
//! | [`Backend::Dmirror`] | the test_hmm mirror device faults the range in through HMM | whole pages, anonymous or file-backed |
//! | `Backend::Cuda` (feature `cuda`) | `cuMemHostRegister` from `libcuda.so.1`, loaded at run time | what the NVIDIA driver pins |
//!
//! Long-term pins of fsdax pages are refused by the kernel; a registration that would need
//! one fails early with the explanation of
//! [`DaxMapping::check_longterm_pin`](crate::DaxMapping::check_longterm_pin).
//!
//! # Udmabuf: which memory, and how the memfd is found
//! udmabuf makes a dma-buf out of the pages of a memfd (shmem or hugetlbfs file), by file
//! offset; it knows nothing about virtual addresses. A registration of a range of process
//! memory therefore has to find the memfd and the offset behind the range, and it does so
//! from `/proc/self/maps`: the range must lie inside one `MAP_SHARED` mapping of a memfd
//! (`/memfd:<name> (deleted)`), at whole pages, and the file offset is the mapping's offset
//! plus the range's distance from the mapping's start. Then:
//! - [`HostRegistration::memfd`] takes the memfd from the caller and checks that the mapping
//!   is of that very file (device and inode numbers of `/proc/self/maps` against `fstat`).
//!   This is the form to use: the caller already holds the memfd, as a [`SealedMemfd`].
//! - [`HostRegistration::new`] with [`Backend::Udmabuf`] opens the file behind the mapping
//!   through `/proc/self/map_files/<start>-<end>`, which the kernel allows only to
//!   CAP_SYS_ADMIN (CAP_CHECKPOINT_RESTORE since 5.9) in the initial user namespace:
//!   `Error::Open` with EPERM otherwise. The file's seals are then checked as
//!   [`SealedMemfd::from_fd`] does.
//!
//! Anything else is refused before `/dev/udmabuf` is asked, with
//! [`Error::InvalidArgument`] saying why: anonymous memory or a file that is not a memfd, a
//! private (copy-on-write) mapping of a memfd (the device would keep the file's pages while
//! the CPU writes its own copies), a range that is not page-aligned or spans two mappings,
//! a memfd without `F_SEAL_SHRINK` or with a write seal, a range over the driver's size
//! limit. A missing `/dev/udmabuf` is [`Error::Unsupported`].
//!
//! The registration owns the dma-buf ([`HostRegistration::dma_buf`]); the dma-buf and the
//! registered range share their pages, so what a device (or a mapping of the dma-buf)
//! writes is what the CPU reads from the range after the registration is dropped, and the
//! other way round. Dropping the registration closes the dma-buf; the kernel unpins the
//! pages when the last reference goes (an importer that still holds the buffer keeps them).
//!
//! # Dmirror: what registration means for an HMM device
//! An HMM device pins nothing: it mirrors the CPU page tables, and the kernel invalidates
//! the device's copy (MMU notifiers) whenever the CPU mapping changes (reclaim, migration,
//! `munmap`). Registration is therefore the first device access: the range is read through
//! a newly opened `/dev/hmm_dmirror0` (`HMM_DMIRROR_READ`), which faults every page in on
//! the device side; [`HostRegistration::mirror_report`] gives the pages copied (`cpages`)
//! and the rounds of device faults it took (`faults`). While the registration lives, the
//! device can read and write the range again
//! ([`HostRegistration::device_read`], [`HostRegistration::device_write`]). Dropping it
//! closes that file: test_hmm then unregisters its MMU notifier and frees its page table,
//! which is the whole of "unregistration" for test_hmm (the pages were never pinned, so
//! nothing is unpinned). The device's entries also go whenever the kernel invalidates
//! them, and come back by faulting: on the test kernels, freeing the registering read's
//! own bounce buffer (an `munmap` elsewhere in the process) already makes the next
//! [`HostRegistration::device_read`] fault once more, so do not read `faults` as "was
//! registered". The range must be whole pages; a missing `/dev/hmm_dmirror0`
//! (test_hmm not loaded) is [`Error::Unsupported`].

use crate::dax::DaxMapping;
use crate::dmirror::{Dmirror, MirrorReport, PageRange};
use crate::sys_call::Mlocked;
use crate::udmabuf::{SealedMemfd, Udmabuf};
use drm_gem::{DmaBuf, Errno, Error, Result};
use std::marker::PhantomData;

/// How a range is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Lock the pages in memory and list their page frames.
    Pinned,
    /// Wrap memfd pages in a dma-buf through `/dev/udmabuf`.
    Udmabuf,
    /// Let the HMM mirror device (test_hmm) access the range.
    Dmirror,
    /// `cuMemHostRegister` through the NVIDIA driver, loaded at run time.
    #[cfg(feature = "cuda")]
    Cuda,
}

/// A registered range; unregistered (unlocked, released) on drop.
#[derive(Debug)]
pub struct HostRegistration<'m> {
    backend: Backend,
    addr: usize,
    len: usize,
    frames: Option<Vec<u64>>,
    _lock: Option<Mlocked>,
    dma_buf: Option<DmaBuf>,
    mirror: Option<(Dmirror, MirrorReport)>,
    /// The range, where it is borrowed exclusively (`Dmirror` of a `&mut` slice): the
    /// device may write it.
    target: Option<&'m mut [u8]>,
    #[cfg(feature = "cuda")]
    _cuda: Option<crate::sys_call::CudaRegistration>,
    _mem: PhantomData<&'m mut [u8]>,
}

impl<'m> HostRegistration<'m> {
    /// Registers ordinary memory (heap, anonymous or memfd mapping, ...). The slice stays
    /// borrowed while the registration lives.
    ///
    /// With [`Backend::Udmabuf`] the slice must be whole pages of a `MAP_SHARED` memfd
    /// mapping, whose file is opened through `/proc/self/map_files` (privileged; see the
    /// [module documentation](crate::register)); [`HostRegistration::memfd`] does the same
    /// with a memfd the caller passes. With [`Backend::Dmirror`] the slice must be whole
    /// pages.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 bytes and for a range the backend cannot take (see
    /// the [module documentation](crate::register)); `Udmabuf`: [`Error::Open`] with EPERM
    /// when this process may not open `/proc/self/map_files`; `Udmabuf` and `Dmirror`:
    /// [`Error::Unsupported`] when the device node is missing; `Pinned`: `mlock`'s ENOMEM
    /// over `RLIMIT_MEMLOCK`; otherwise the device's ioctl error.
    pub fn new(mem: &'m mut [u8], backend: Backend) -> Result<Self> {
        if mem.is_empty() {
            return Err(invalid("cannot register 0 bytes".into()));
        }
        let (addr, len) = (mem.as_ptr() as usize, mem.len());
        match backend {
            Backend::Pinned => {
                let lock = Mlocked::slice(mem)?;
                Ok(Self::pinned(addr, len, lock))
            }
            Backend::Udmabuf => Ok(Self::with_dma_buf(addr, len, udmabuf_of(addr, len, None)?)),
            Backend::Dmirror => {
                let range = PageRange::of(mem)?;
                let mut r = Self::with_mirror(addr, len, mirror_in(range)?);
                r.target = Some(mem);
                Ok(r)
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda => {
                let mut r = Self::bare(backend, addr, len);
                r._cuda = Some(crate::sys_call::CudaRegistration::new(mem)?);
                Ok(r)
            }
        }
    }

    /// Registers whole pages of a `MAP_SHARED` mapping of `memfd` through `/dev/udmabuf`
    /// ([`Backend::Udmabuf`]): the dma-buf covers exactly the pages of the file that `mem`
    /// maps. The slice stays borrowed while the registration lives; the memfd need not (the
    /// dma-buf holds its pages).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `mem` is not inside one shared mapping of `memfd`, not
    /// page-aligned, or over the driver's size limit; [`Error::Unsupported`] without
    /// `/dev/udmabuf`; the `UDMABUF_CREATE` error otherwise.
    pub fn memfd(mem: &'m mut [u8], memfd: &SealedMemfd) -> Result<Self> {
        if mem.is_empty() {
            return Err(invalid("cannot register 0 bytes".into()));
        }
        let (addr, len) = (mem.as_ptr() as usize, mem.len());
        Ok(Self::with_dma_buf(
            addr,
            len,
            udmabuf_of(addr, len, Some(memfd))?,
        ))
    }

    /// Registers a PMEM/DAX mapping. Backends that long-term pin pages refuse fsdax
    /// mappings with the kernel's reason (see
    /// [`DaxMapping::check_longterm_pin`]); `Pinned` uses `mlock`, which is no long-term
    /// pin, and works for every kind. `mlock` populates a shared mapping with read faults,
    /// and a read fault on a hole of an fsdax file maps the zero page: write the range (or
    /// `fallocate` the file) first when the page frames should be the file's own blocks.
    ///
    /// `Udmabuf` refuses DAX memory (it is no memfd). `Dmirror` reads the mapping through
    /// the mirror device, which answers what HMM makes of the DAX pages; the mapping is
    /// borrowed shared, so [`HostRegistration::device_write`] is refused.
    pub fn dax(map: &'m DaxMapping, backend: Backend) -> Result<Self> {
        let (addr, len) = (map.addr(), map.len());
        match backend {
            Backend::Pinned => {
                let lock = Mlocked::dax(map.raw())?;
                Ok(Self::pinned(addr, len, lock))
            }
            Backend::Udmabuf => Err(udmabuf_of(addr, len, None).err().unwrap_or_else(|| {
                invalid("udmabuf registers memfd pages only, not DAX memory".into())
            })),
            Backend::Dmirror => {
                let page = crate::dmirror::page_size();
                let range = PageRange::new(addr, len.div_ceil(page) as u64)?;
                Ok(Self::with_mirror(addr, len, mirror_in(range)?))
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda => {
                map.check_longterm_pin()?;
                Err(Error::Unsupported {
                    feature: "CUDA registration of devdax memory",
                    reason: "not implemented: register through HostRegistration::new on a \
                             slice instead"
                        .into(),
                })
            }
        }
    }

    fn bare(backend: Backend, addr: usize, len: usize) -> Self {
        Self {
            backend,
            addr,
            len,
            frames: None,
            _lock: None,
            dma_buf: None,
            mirror: None,
            target: None,
            #[cfg(feature = "cuda")]
            _cuda: None,
            _mem: PhantomData,
        }
    }

    fn pinned(addr: usize, len: usize, lock: Mlocked) -> Self {
        let mut r = Self::bare(Backend::Pinned, addr, len);
        r.frames = page_frames(addr, len);
        r._lock = Some(lock);
        r
    }

    fn with_dma_buf(addr: usize, len: usize, buf: DmaBuf) -> Self {
        let mut r = Self::bare(Backend::Udmabuf, addr, len);
        r.dma_buf = Some(buf);
        r
    }

    fn with_mirror(addr: usize, len: usize, mirror: (Dmirror, MirrorReport)) -> Self {
        let mut r = Self::bare(Backend::Dmirror, addr, len);
        r.mirror = Some(mirror);
        r
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Start address of the registered range.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a registration has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page frame number of each page of the range (`Pinned` only), from
    /// `/proc/self/pagemap`. `None` where the kernel hides PFNs (without CAP_SYS_ADMIN it
    /// reports 0 for every page) or the file cannot be read.
    pub fn page_frames(&self) -> Option<&[u64]> {
        self.frames.as_deref()
    }

    /// The dma-buf over the range (`Udmabuf` only): map it, or import it into a DRM device
    /// by PRIME. It shares its pages with the range.
    pub fn dma_buf(&self) -> Option<&DmaBuf> {
        self.dma_buf.as_ref()
    }

    /// The mirror device that accesses the range (`Dmirror` only), for snapshots and
    /// migrations of it.
    pub fn mirror(&self) -> Option<&Dmirror> {
        self.mirror.as_ref().map(|(d, _)| d)
    }

    /// What the registering read reported (`Dmirror` only): `cpages` is the number of pages
    /// in the range, `faults` the rounds of device faults it took (1 for memory the device
    /// had not seen).
    pub fn mirror_report(&self) -> Option<MirrorReport> {
        self.mirror.as_ref().map(|&(_, r)| r)
    }

    fn mirror_range(&self, what: &str) -> Result<(&Dmirror, PageRange)> {
        let Some((d, _)) = &self.mirror else {
            return Err(invalid(format!(
                "{what} needs a Dmirror registration, this one is {:?}",
                self.backend
            )));
        };
        let page = crate::dmirror::page_size();
        Ok((
            d,
            PageRange::new(self.addr, self.len.div_ceil(page) as u64)?,
        ))
    }

    /// The mirror device reads the whole range again (`HMM_DMIRROR_READ`) into `out`, which
    /// must be as long as the range rounded up to whole pages (`Dmirror` only).
    pub fn device_read(&self, out: &mut [u8]) -> Result<MirrorReport> {
        let (d, range) = self.mirror_range("device_read")?;
        d.read(range, out)
    }

    /// The mirror device writes `data` (as long as the range) into the whole range
    /// (`HMM_DMIRROR_WRITE`; `Dmirror` registrations of a `&mut` slice only). The CPU sees
    /// the bytes in the slice once the registration is dropped.
    pub fn device_write(&mut self, data: &[u8]) -> Result<MirrorReport> {
        self.mirror_range("device_write")?;
        match (&self.mirror, self.target.as_deref_mut()) {
            (Some((d, _)), Some(target)) => d.write_into(target, data),
            _ => Err(invalid(
                "device_write into a DAX mapping registered through a shared borrow; \
                 write it with DaxMapping::write_at"
                    .into(),
            )),
        }
    }
}

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MapsLine {
    start: usize,
    end: usize,
    shared: bool,
    offset: u64,
    dev: (u32, u32),
    inode: u64,
    /// The path column, empty for anonymous memory.
    path: String,
}

impl MapsLine {
    /// Parses `start-end perms offset maj:min inode [path]`.
    fn parse(l: &str) -> Option<Self> {
        let mut rest = l;
        let mut col = || {
            rest = rest.trim_start();
            let (c, r) = rest.split_at(rest.find(' ').unwrap_or(rest.len()));
            rest = r;
            c
        };
        let (lo, hi) = col().split_once('-')?;
        let perms = col();
        let offset = u64::from_str_radix(col(), 16).ok()?;
        let (ma, mi) = col().split_once(':')?;
        let inode = col().parse().ok()?;
        Some(Self {
            start: usize::from_str_radix(lo, 16).ok()?,
            end: usize::from_str_radix(hi, 16).ok()?,
            shared: perms.as_bytes().get(3) == Some(&b's'),
            offset,
            dev: (
                u32::from_str_radix(ma, 16).ok()?,
                u32::from_str_radix(mi, 16).ok()?,
            ),
            inode,
            path: rest.trim().to_string(),
        })
    }

    fn is_memfd(&self) -> bool {
        self.path.starts_with("/memfd:")
    }

    fn describe(&self) -> String {
        if self.path.is_empty() {
            "anonymous memory".into()
        } else {
            self.path.clone()
        }
    }
}

/// The mapping of `/proc/self/maps` that holds `addr`.
fn mapping_of(addr: usize) -> Result<MapsLine> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| Error::Syscall {
        name: "read(/proc/self/maps)",
        errno: Errno::from_io_error(&e).unwrap_or(Errno::IO),
    })?;
    maps.lines()
        .filter_map(MapsLine::parse)
        .find(|m| (m.start..m.end).contains(&addr))
        .ok_or_else(|| invalid(format!("nothing is mapped at {addr:#x}")))
}

/// A udmabuf over the memfd pages that `addr..addr + len` maps (see the module docs).
fn udmabuf_of(addr: usize, len: usize, memfd: Option<&SealedMemfd>) -> Result<DmaBuf> {
    let m = mapping_of(addr)?;
    if !m.is_memfd() {
        return Err(invalid(format!(
            "udmabuf registers memfd pages only; this range is backed by {}",
            m.describe()
        )));
    }
    if !m.shared {
        return Err(invalid(format!(
            "the range is a private (copy-on-write) mapping of {}: the dma-buf would keep the \
             file's pages while CPU writes go to private copies; map the memfd MAP_SHARED",
            m.path
        )));
    }
    let page = crate::dmirror::page_size();
    if !addr.is_multiple_of(page) || !len.is_multiple_of(page) {
        return Err(invalid(format!(
            "udmabuf registers whole pages: address {addr:#x} and length {len} must be \
             multiples of the page size ({page})"
        )));
    }
    if addr.checked_add(len).is_none_or(|end| end > m.end) {
        return Err(invalid(format!(
            "{len} bytes at {addr:#x} run past the end of the memfd mapping at {:#x}-{:#x}",
            m.start, m.end
        )));
    }
    let offset = m.offset + (addr - m.start) as u64;
    let opened;
    let memfd = match memfd {
        Some(f) => {
            let st = rustix::fs::fstat(f).map_err(|errno| Error::Syscall {
                name: "fstat",
                errno,
            })?;
            let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
            if (dev, st.st_ino) != (m.dev, m.inode) {
                return Err(invalid(format!(
                    "the range maps {} (inode {}), not the memfd given (inode {})",
                    m.path, m.inode, st.st_ino
                )));
            }
            f
        }
        None => {
            let path = format!("/proc/self/map_files/{:x}-{:x}", m.start, m.end);
            let fd = crate::sys_call::open(
                path.as_str(),
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|errno| Error::Open {
                path: path.into(),
                errno,
            })?;
            opened = SealedMemfd::from_fd(fd)?;
            &opened
        }
    };
    let dev = match Udmabuf::open() {
        Ok(d) => d,
        Err(Error::Open { errno, .. }) if errno == Errno::NOENT => {
            return Err(Error::Unsupported {
                feature: "udmabuf host registration",
                reason: "/dev/udmabuf is missing (CONFIG_UDMABUF not built or not loaded)".into(),
            });
        }
        Err(e) => return Err(e),
    };
    dev.create(memfd, offset, len as u64)
}

/// Opens the mirror device and reads `range` through it once.
fn mirror_in(range: PageRange) -> Result<(Dmirror, MirrorReport)> {
    let d = match Dmirror::open(0) {
        Ok(d) => d,
        Err(Error::Open { errno, .. }) if errno == Errno::NOENT => {
            return Err(Error::Unsupported {
                feature: "dmirror host registration",
                reason: "/dev/hmm_dmirror0 is missing (test_hmm not loaded)".into(),
            });
        }
        Err(e) => return Err(e),
    };
    let mut bounce = vec![0u8; range.len_bytes()];
    let report = d.read(range, &mut bounce)?;
    Ok((d, report))
}

/// Page frames of the pages covering `addr..addr + len`: bit 63 of a pagemap entry says
/// "present", bits 0-54 hold the PFN (zeroed for unprivileged readers since Linux 4.2).
fn page_frames(addr: usize, len: usize) -> Option<Vec<u64>> {
    use std::io::{Read, Seek, SeekFrom};
    let page = rustix::param::page_size();
    let first = addr / page;
    let last = (addr + len - 1) / page;
    let n = last - first + 1;
    let mut f = std::fs::File::open("/proc/self/pagemap").ok()?;
    f.seek(SeekFrom::Start((first as u64) * 8)).ok()?;
    let mut buf = vec![0u8; n * 8];
    f.read_exact(&mut buf).ok()?;
    let mut out = Vec::with_capacity(n);
    for e in buf.chunks_exact(8) {
        let v = u64::from_ne_bytes(e.try_into().ok()?);
        let present = v >> 63 == 1;
        let pfn = v & ((1 << 55) - 1);
        if !present || pfn == 0 {
            return None;
        }
        out.push(pfn);
    }
    Some(out)
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument { what }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_registration_of_heap_memory() {
        let mut v = vec![7u8; 3 * 4096];
        let r = match HostRegistration::new(&mut v, Backend::Pinned) {
            Ok(r) => r,
            // An unprivileged host user may have a 0 RLIMIT_MEMLOCK.
            Err(e) if e.errno() == Some(drm_gem::Errno::NOMEM) => return,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(r.len(), 3 * 4096);
        assert_eq!(r.backend(), Backend::Pinned);
        if let Some(f) = r.page_frames() {
            assert!(f.len() >= 3 && f.len() <= 4, "{}", f.len());
        }
    }

    #[test]
    fn maps_lines_parse() {
        let m = MapsLine::parse(
            "7f12a0000000-7f12a0400000 rw-s 00002000 00:01 5127   /memfd:frame (deleted)",
        )
        .unwrap();
        assert_eq!((m.start, m.end), (0x7f12_a000_0000, 0x7f12_a040_0000));
        assert!(m.shared && m.is_memfd());
        assert_eq!((m.offset, m.dev, m.inode), (0x2000, (0, 1), 5127));
        assert_eq!(m.path, "/memfd:frame (deleted)");
        let a = MapsLine::parse("55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 ").unwrap();
        assert!(!a.shared && !a.is_memfd());
        assert_eq!(a.describe(), "anonymous memory");
        let f = MapsLine::parse("7f00-8f00 r--p 0000a000 fe:01 42 /usr/lib/a b.so").unwrap();
        assert_eq!((f.dev, f.path.as_str()), ((0xfe, 1), "/usr/lib/a b.so"));
        assert_eq!(MapsLine::parse("garbage"), None);
    }

    #[test]
    fn udmabuf_refuses_anonymous_memory() {
        let mut v = vec![0u8; 4096];
        let e = HostRegistration::new(&mut v, Backend::Udmabuf).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { what } if what.contains("memfd")),
            "{e}"
        );
        assert!(matches!(
            HostRegistration::new(&mut [], Backend::Pinned),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[cfg(all(test, feature = "cuda"))]
mod cuda_tests {
    use super::*;

    #[test]
    fn cuda_registers_or_says_why_not() {
        let mut v = vec![0u8; 1 << 20];
        match HostRegistration::new(&mut v, Backend::Cuda) {
            Ok(r) => assert_eq!(r.len(), 1 << 20),
            Err(Error::Unsupported { reason, .. }) => {
                eprintln!("SKIP cuda: {reason}");
                assert!(
                    reason.contains("libcuda") || reason.contains("cu"),
                    "{reason}"
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
}
