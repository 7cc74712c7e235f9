//! DAX mappings (`MAP_SHARED_VALIDATE | MAP_SYNC`), cache-line write-back, `msync`, `mlock`.

use drm_gem::Error;
use rustix::fd::BorrowedFd;
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};
use std::ptr::NonNull;

/// How a [`RawDaxMap`] is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapKind {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: the kernel refuses (EOPNOTSUPP) unless the file is
    /// DAX, and makes filesystem metadata durable before a write fault returns.
    Sync,
    /// Plain `MAP_SHARED`.
    Shared,
}

/// One shared read-write mapping of a DAX file or device, owned: unmapped on drop.
#[derive(Debug)]
pub(crate) struct RawDaxMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; nothing about it is tied
// to the thread that made it, and all access goes through `&self`/`&mut self`.
unsafe impl Send for RawDaxMap {}
// SAFETY: `&self` methods only read the mapping (copies out); concurrent readers are fine.
unsafe impl Sync for RawDaxMap {}

impl RawDaxMap {
    /// Maps `len` (> 0) bytes of `fd` at `offset`, read-write.
    pub(crate) fn new(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        kind: MapKind,
    ) -> Result<Self, Error> {
        let flags = match kind {
            MapKind::Sync => MapFlags::SHARED_VALIDATE | MapFlags::SYNC,
            MapKind::Shared => MapFlags::SHARED,
        };
        // SAFETY: a null hint lets the kernel choose the address, so no existing mapping is
        // replaced; the result is owned by the returned value, which unmaps it once.
        let p = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                fd,
                offset,
            )
        }
        .map_err(|errno| Error::Syscall {
            name: match kind {
                MapKind::Sync => "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)",
                MapKind::Shared => "mmap(MAP_SHARED)",
            },
            errno,
        })?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(Error::BadReply {
            ioctl: "mmap",
            what: "a null address",
        })?;
        Ok(Self { ptr, len })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The start address (for reports and page-frame lookups; never dereferenced outside
    /// this module).
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn range_ok(&self, offset: usize, n: usize) -> bool {
        offset.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Copies `src` in at `offset`; false (nothing copied) if it does not fit.
    pub(crate) fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        if !self.range_ok(offset, src.len()) {
            return false;
        }
        // SAFETY: the range is inside this live mapping (checked above); `src` is a Rust
        // slice, which cannot overlap a mapping this type never exposes as a reference.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
        true
    }

    /// Copies out at `offset` into `dst`; false (nothing copied) if it does not fit.
    pub(crate) fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !self.range_ok(offset, dst.len()) {
            return false;
        }
        // SAFETY: as for write_at, in the other direction.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        true
    }

    /// Writes back every cache line of `offset..offset + n` and fences; false if the range
    /// is outside the mapping. See [`flush_lines`].
    pub(crate) fn flush(&self, offset: usize, n: usize) -> bool {
        if !self.range_ok(offset, n) {
            return false;
        }
        if n > 0 {
            // SAFETY: the range lies inside this live mapping (checked above).
            unsafe { flush_lines(self.ptr.as_ptr().add(offset), n) };
        }
        true
    }

    /// `msync(MS_SYNC)` over the pages holding `offset..offset + n`.
    pub(crate) fn msync(&self, offset: usize, n: usize) -> Result<(), Error> {
        if !self.range_ok(offset, n) {
            return Err(Error::InvalidArgument {
                what: format!(
                    "{n} bytes at offset {offset} exceed the mapping's {} bytes",
                    self.len
                ),
            });
        }
        let page = rustix::param::page_size();
        let start = (self.addr() + offset) & !(page - 1);
        let end = self.addr() + offset + n;
        // SAFETY: start..end lies within this live mapping, rounded down to the page that
        // holds `offset`, which is the mapping's own page (mappings start page-aligned).
        unsafe {
            rustix::mm::msync(
                start as *mut core::ffi::c_void,
                end - start,
                MsyncFlags::SYNC,
            )
        }
        .map_err(|errno| Error::Syscall {
            name: "msync",
            errno,
        })
    }

    /// `mlock` over the whole mapping (see [`mlock`]).
    pub(crate) fn mlock(&self) -> Result<(), Error> {
        // SAFETY: the range is exactly this live mapping.
        unsafe { mlock(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for RawDaxMap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping made in `new`, unmapped only here.
        let r = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        // Drop never panics: a failure is counted (`hmm::release_failures`).
        if let Err(e) = r {
            crate::release_failed("munmap", e);
        }
    }
}

/// Which instruction [`flush_lines`] uses on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlushInsn {
    /// `clwb`: write back, keep the line cached.
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and evict, strongly ordered.
    Clflush,
    /// Not x86-64: no user-space flush; callers use `msync`.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    None,
}

/// The best cache-line write-back instruction this CPU has (CPUID leaf 7: CLWB is EBX bit
/// 24, CLFLUSHOPT bit 23; CLFLUSH is part of SSE2, always present on x86-64).
pub(crate) fn flush_insn() -> FlushInsn {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static INSN: OnceLock<FlushInsn> = OnceLock::new();
        *INSN.get_or_init(|| {
            // CPUID is unprivileged and always present on x86-64; leaf 7 exists when leaf 0
            // reports a maximum of at least 7.
            let max = core::arch::x86_64::__cpuid(0).eax;
            let ebx = if max >= 7 {
                core::arch::x86_64::__cpuid_count(7, 0).ebx
            } else {
                0
            };
            if ebx & (1 << 24) != 0 {
                FlushInsn::Clwb
            } else if ebx & (1 << 23) != 0 {
                FlushInsn::Clflushopt
            } else {
                FlushInsn::Clflush
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        FlushInsn::None
    }
}

/// Cache-line size used for flushing (x86-64: 64 bytes).
pub(crate) const CACHE_LINE: usize = 64;

/// Writes back every cache line overlapping `p..p + n`, then `sfence` (x86-64), so the
/// stores before the call are in the platform's persistence domain when it returns. Does
/// nothing on other architectures (callers check [`flush_insn`] first).
///
/// # Safety
/// `p..p + n` must lie inside one live mapping of this process.
pub(crate) unsafe fn flush_lines(p: *mut u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let insn = flush_insn();
        let start = p as usize & !(CACHE_LINE - 1);
        let end = p as usize + n;
        let mut line = start;
        while line < end {
            // SAFETY: `line` is the start of a cache line overlapping the caller's range,
            // which is mapped (caller's contract); the flush instructions only write back
            // (and maybe evict) that line and change no register or memory contents.
            unsafe {
                match insn {
                    FlushInsn::Clwb => core::arch::asm!(
                        "clwb [{0}]", in(reg) line, options(nostack, preserves_flags)
                    ),
                    FlushInsn::Clflushopt => core::arch::asm!(
                        "clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags)
                    ),
                    _ => core::arch::x86_64::_mm_clflush(line as *const u8),
                }
            }
            line += CACHE_LINE;
        }
        // SAFETY: a store fence has no memory operands; it orders the write-backs above
        // before any later store.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, n);
    }
}

/// `mlock(2)` of `len` bytes at `p`: faults the pages in and keeps them resident.
///
/// # Safety
/// `p..p + len` must be mapped in this process for the whole call.
pub(crate) unsafe fn mlock(p: *mut u8, len: usize) -> Result<(), Error> {
    // SAFETY: forwarded: the caller vouches that the range is mapped.
    unsafe { rustix::mm::mlock(p.cast(), len) }.map_err(|errno| Error::Syscall {
        name: "mlock",
        errno,
    })
}

/// `munlock(2)` of `len` bytes at `p`.
///
/// # Safety
/// `p..p + len` must be mapped in this process for the whole call.
pub(crate) unsafe fn munlock(p: *mut u8, len: usize) -> Result<(), Error> {
    // SAFETY: forwarded: the caller vouches that the range is mapped.
    unsafe { rustix::mm::munlock(p.cast(), len) }.map_err(|errno| Error::Syscall {
        name: "munlock",
        errno,
    })
}

/// A locked (`mlock`ed) address range, unlocked on drop. Whoever makes one keeps the memory
/// borrowed for as long as it lives.
#[derive(Debug)]
pub(crate) struct Mlocked {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mlocked {
    /// Locks the pages of `mem` (the slice proves they are mapped).
    pub(crate) fn slice(mem: &[u8]) -> Result<Self, Error> {
        let ptr = NonNull::new(mem.as_ptr().cast_mut()).ok_or(Error::InvalidArgument {
            what: "null range".into(),
        })?;
        // SAFETY: the range is a live Rust slice.
        unsafe { mlock(ptr.as_ptr(), mem.len()) }?;
        Ok(Self {
            ptr,
            len: mem.len(),
        })
    }

    /// Locks the pages of a DAX mapping.
    pub(crate) fn dax(map: &RawDaxMap) -> Result<Self, Error> {
        map.mlock()?;
        Ok(Self {
            ptr: map.ptr,
            len: map.len,
        })
    }
}

impl Drop for Mlocked {
    fn drop(&mut self) {
        // SAFETY: the creator keeps the memory borrowed (and so mapped) for as long as
        // this value lives; munlock only changes the pages' lock state.
        let r = unsafe { munlock(self.ptr.as_ptr(), self.len) };
        // Drop never panics: a failure is counted (`hmm::release_failures`).
        if let Err(e) = r {
            crate::release_failed("munlock", e.errno().unwrap_or(drm_gem::Errno::IO));
        }
    }
}

// SAFETY: holds only an address range; unlocking from another thread is fine.
unsafe impl Send for Mlocked {}
// SAFETY: no `&self` method touches the memory.
unsafe impl Sync for Mlocked {}
