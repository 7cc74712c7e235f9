//! Cache-line write-back and `mlock` of DAX mappings (the mappings themselves are
//! [`drm_gem::Mmap`]s, whose `mmap`, copies and `munmap` are drm-gem's).

use drm_gem::{Error, Mmap};

/// Writes back every cache line of `offset..offset + n` of `map` and fences; false (nothing
/// flushed) if the range is outside the mapping. See [`flush_lines`].
pub(crate) fn flush(map: &Mmap, offset: usize, n: usize) -> bool {
    if map.check_range(offset, n).is_err() {
        return false;
    }
    if n > 0 {
        // SAFETY: the range lies inside `map` (checked above), which is mapped while the
        // borrow lives; the flush instructions change no memory contents.
        unsafe { flush_lines(map.as_ptr().add(offset), n) };
    }
    true
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
/// borrowed for as long as it lives. It holds the range as plain numbers (so it is `Send`
/// and `Sync` like any integer pair): `munlock` only changes the pages' lock state.
#[derive(Debug)]
pub(crate) struct Mlocked {
    addr: usize,
    len: usize,
}

impl Mlocked {
    /// Locks the pages of `mem` (the slice proves they are mapped).
    pub(crate) fn slice(mem: &[u8]) -> Result<Self, Error> {
        // SAFETY: the range is a live Rust slice.
        unsafe { mlock(mem.as_ptr().cast_mut(), mem.len()) }?;
        Ok(Self {
            addr: mem.as_ptr() as usize,
            len: mem.len(),
        })
    }

    /// Locks the pages of a DAX mapping.
    pub(crate) fn mapping(map: &Mmap) -> Result<Self, Error> {
        // SAFETY: the range is exactly `map`, which is mapped while the borrow lives.
        unsafe { mlock(map.as_ptr(), map.len()) }?;
        Ok(Self {
            addr: map.addr(),
            len: map.len(),
        })
    }
}

impl Drop for Mlocked {
    fn drop(&mut self) {
        // SAFETY: the creator keeps the memory borrowed (and so mapped) for as long as
        // this value lives; munlock only changes the pages' lock state (and answers ENOMEM
        // for a range that is not mapped), reading and writing none of their bytes.
        let r = unsafe { munlock(self.addr as *mut u8, self.len) };
        // Drop never panics: a failure is counted (`hmm::release_failures`).
        if let Err(e) = r {
            crate::release_failed("munlock", e.errno().unwrap_or(drm_gem::Errno::IO));
        }
    }
}
