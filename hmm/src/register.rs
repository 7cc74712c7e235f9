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
//! - Long-term pins of fsdax pages are refused by the kernel; such a registration fails
//!   early ([`DaxMapping::check_longterm_pin`](crate::DaxMapping::check_longterm_pin)).
//! - Udmabuf: the range must lie in one `MAP_SHARED` mapping of a memfd, at whole pages,
//!   the memfd sealed against shrinking and not against writes; anything else (anonymous
//!   memory, another file, a private mapping, a range over two mappings or the driver's
//!   size limit) is [`Error::InvalidArgument`]. Pass the memfd ([`HostRegistration::memfd`]);
//!   [`HostRegistration::new`] has to open it through `/proc/self/map_files`, which needs
//!   CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) and is `Error::Open` with EPERM without it.
//!   The registration owns the dma-buf; it and the range share their pages.
//! - Dmirror: an HMM device pins nothing; registering is the device's first read of the
//!   range, and the registration keeps the mirror file open for
//!   [`HostRegistration::device_read`] and [`HostRegistration::device_write`]. Its
//!   `faults` count rounds of device faults, not whether the range "was registered".
//!
//! A missing device node is [`Error::Unsupported`].

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
                let lock = Mlocked::mapping(map.mmap())?;
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
                    errno: None,
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
                // A missing node is the kernel lacking the feature, not a refusal:
                // no errno, so drmtool classes it `unsupported`.
                errno: None,
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
                // A missing node is the kernel lacking the feature, not a refusal:
                // no errno, so drmtool classes it `unsupported`.
                errno: None,
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
