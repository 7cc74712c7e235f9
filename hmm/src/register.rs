//! Host registration: what `cudaHostRegister` means on the kernel side, without a GPU
//! vendor's driver. A range of process memory (ordinary, memfd or PMEM/DAX-backed) is made
//! available to a device by one of several backends, and released when the
//! [`HostRegistration`] is dropped.
//!
//! | backend | kernel mechanism | accepts |
//! |---|---|---|
//! | [`Backend::Pinned`] | `mlock` (pages resident and locked), then the page frames from `/proc/self/pagemap` | any range; PFNs only with CAP_SYS_ADMIN |
//! | [`Backend::Udmabuf`] | `/dev/udmabuf` turns memfd pages into a dma-buf | memfd-backed ranges only |
//! | [`Backend::Dmirror`] | the test_hmm mirror device faults the range in through HMM | anonymous and file ranges |
//! | `Backend::Cuda` (feature `cuda`) | `cuMemHostRegister` from `libcuda.so.1`, loaded at run time | what the NVIDIA driver pins |
//!
//! Long-term pins of fsdax pages are refused by the kernel; a registration that would need
//! one fails early with the explanation of
//! [`DaxMapping::check_longterm_pin`](crate::DaxMapping::check_longterm_pin).

use crate::dax::DaxMapping;
use crate::sys_call::Mlocked;
use drm_gem::{Error, Result};
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
    #[cfg(feature = "cuda")]
    _cuda: Option<crate::sys_call::CudaRegistration>,
    _mem: PhantomData<&'m mut [u8]>,
}

impl<'m> HostRegistration<'m> {
    /// Registers ordinary memory (heap, anonymous or memfd mapping, ...). The slice stays
    /// borrowed while the registration lives.
    pub fn new(mem: &'m mut [u8], backend: Backend) -> Result<Self> {
        if mem.is_empty() {
            return Err(Error::InvalidArgument {
                what: "cannot register 0 bytes".into(),
            });
        }
        let (addr, len) = (mem.as_ptr() as usize, mem.len());
        match backend {
            Backend::Pinned => {
                let lock = Mlocked::slice(mem)?;
                Ok(Self::pinned(addr, len, lock))
            }
            Backend::Udmabuf => Err(udmabuf_refusal(addr)),
            Backend::Dmirror => Err(dmirror_missing()),
            #[cfg(feature = "cuda")]
            Backend::Cuda => Ok(Self {
                backend,
                addr,
                len,
                frames: None,
                _lock: None,
                _cuda: Some(crate::sys_call::CudaRegistration::new(mem)?),
                _mem: PhantomData,
            }),
        }
    }

    /// Registers a PMEM/DAX mapping. Backends that long-term pin pages refuse fsdax
    /// mappings with the kernel's reason (see
    /// [`DaxMapping::check_longterm_pin`]); `Pinned` uses `mlock`, which is no long-term
    /// pin, and works for every kind. `mlock` populates a shared mapping with read faults,
    /// and a read fault on a hole of an fsdax file maps the zero page: write the range (or
    /// `fallocate` the file) first when the page frames should be the file's own blocks.
    pub fn dax(map: &'m DaxMapping, backend: Backend) -> Result<Self> {
        let (addr, len) = (map.addr(), map.len());
        match backend {
            Backend::Pinned => {
                let lock = Mlocked::dax(map.raw())?;
                Ok(Self::pinned(addr, len, lock))
            }
            Backend::Udmabuf => Err(udmabuf_refusal(addr)),
            Backend::Dmirror => Err(dmirror_missing()),
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

    fn pinned(addr: usize, len: usize, lock: Mlocked) -> Self {
        Self {
            backend: Backend::Pinned,
            addr,
            len,
            frames: page_frames(addr, len),
            _lock: Some(lock),
            #[cfg(feature = "cuda")]
            _cuda: None,
            _mem: PhantomData,
        }
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

/// The mapping of `/proc/self/maps` that holds `addr`: its path column (empty for
/// anonymous memory).
fn backing_of(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        let (lo, hi) = cols.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        if !(lo..hi).contains(&addr) {
            return None;
        }
        Some(cols.nth(4).unwrap_or("").to_string())
    })
}

fn udmabuf_refusal(addr: usize) -> Error {
    let backing = backing_of(addr).unwrap_or_default();
    if backing.starts_with("/memfd:") {
        // TODO: create the dma-buf with hmm::Udmabuf once the udmabuf half of this crate
        // is merged (it owns the device and the memfd checks).
        Error::Unsupported {
            feature: "udmabuf host registration",
            reason: "the Udmabuf device wrapper is not part of this build yet".into(),
        }
    } else {
        Error::InvalidArgument {
            what: format!(
                "udmabuf registers memfd pages only; this range is backed by {}",
                if backing.is_empty() {
                    "anonymous memory".to_string()
                } else {
                    backing
                }
            ),
        }
    }
}

fn dmirror_missing() -> Error {
    // TODO: route through hmm::Dmirror (read the range through the mirror) once merged.
    Error::Unsupported {
        feature: "dmirror host registration",
        reason: "the Dmirror device wrapper is not part of this build yet".into(),
    }
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
