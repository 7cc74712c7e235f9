//! [`Mmap`]: the one owner of a memory mapping, and every pointer access to mapped memory.
//!
//! # Safety
//! An `Mmap` is made only by [`Mmap::new_raw`], from an `mmap` with a null hint (the kernel
//! picks a fresh range, so no existing mapping, and no memory Rust already refers to, is
//! replaced); it owns exactly `ptr..ptr + len` until its `Drop` unmaps that range, once.
//! Every copy is bounds-checked against that range (by the safe callers in `crate::mmap`)
//! before a pointer into it is formed, and goes through volatile accesses: the memory may
//! be shared with a device, another mapping or another process, so the compiler must
//! neither assume it unchanged between accesses nor invent or drop accesses. No safe
//! method creates a Rust reference to it, except the slices of a private anonymous
//! mapping, which nothing outside this process can see.

use crate::error::{Error, Result};
use crate::mmap::{MmapOptions, Prot, Sharing, call_name};
use crate::release::ReleaseCounter;
use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};
use std::ptr::NonNull;

/// An owned memory mapping: `mmap` when made, `munmap` on drop.
///
/// It records how it was mapped ([`prot`](Self::prot), [`sharing`](Self::sharing),
/// [`options`](Self::options)) and offers bounds-checked copies only:
/// [`read_at`](Self::read_at) and [`write_at`](Self::write_at), which use volatile accesses
/// because a device, another mapping of the same file or another process may change the
/// memory at any time. It hands out no `&[u8]` over memory that can be shared; the slices
/// of [`as_slice`](Self::as_slice) and [`as_mut_slice`](Self::as_mut_slice) exist only for
/// private anonymous memory ([`Mmap::anonymous`]). `Drop` never panics: a failed `munmap`
/// is counted in [`unowned_release_failures`](crate::unowned_release_failures), or in the
/// counter given to [`record_release_failures_in`](Self::record_release_failures_in).
///
/// Truncating a mapped file below the mapping makes accesses fault (SIGBUS), as for any
/// file mapping; that ends the process and is no undefined behaviour.
///
/// ```
/// use drm_gem::{Mmap, MmapOptions, Prot, Sharing};
/// use rustix::fd::AsFd;
/// # fn main() -> drm_gem::Result<()> {
/// let fd = rustix::fs::memfd_create("example", rustix::fs::MemfdFlags::CLOEXEC)
///     .map_err(|e| drm_gem::Error::Syscall { name: "memfd_create", errno: e })?;
/// rustix::fs::ftruncate(&fd, 4096)
///     .map_err(|e| drm_gem::Error::Syscall { name: "ftruncate", errno: e })?;
/// let rw = Prot::READ | Prot::WRITE;
/// let mut a = Mmap::map(fd.as_fd(), 0, 4096, rw, Sharing::Shared, MmapOptions::empty())?;
/// let b = Mmap::map(fd.as_fd(), 0, 4096, Prot::READ, Sharing::Shared, MmapOptions::empty())?;
/// a.write_at(100, b"hello")?;
/// let mut got = [0u8; 5];
/// b.read_at(100, &mut got)?; // the same pages, through another mapping
/// assert_eq!(&got, b"hello");
/// assert!(a.read_at(4094, &mut got).is_err()); // out of range: nothing copied
/// assert!(b.as_slice().is_none()); // shared memory: copies only
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
    sharing: Sharing,
    options: MmapOptions,
    anonymous: bool,
    release: &'static ReleaseCounter,
}

// SAFETY: (both impls, stated once for every mapping in the workspace) an `Mmap` owns its
// address range; nothing about the range is tied to the thread that mapped it (munmap from
// any thread of the process is fine). Through `&self` the only accesses are volatile copies
// *out* (`read_at`), `msync` and the address; writes (`write_at`) and `&mut [u8]` need
// `&mut self`, and `&[u8]` exists only for private anonymous memory, which nothing but this
// value can write while the slice's shared borrow of it lives. So sending it, or sharing
// `&Mmap` between threads, allows no data race from Rust code.
unsafe impl Send for Mmap {}
// SAFETY: see the `Send` impl above.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` (> 0, checked by the callers in `crate::mmap`) bytes of `file` (fd and
    /// offset) or, without one, anonymous memory.
    #[inline]
    pub(crate) fn new_raw(
        file: Option<(BorrowedFd<'_>, u64)>,
        len: usize,
        prot: Prot,
        sharing: Sharing,
        options: MmapOptions,
    ) -> Result<Self> {
        let mut p = ProtFlags::empty();
        if prot.contains(Prot::READ) {
            p |= ProtFlags::READ;
        }
        if prot.contains(Prot::WRITE) {
            p |= ProtFlags::WRITE;
        }
        let mut f = match sharing {
            Sharing::Shared if options.contains(MmapOptions::SYNC) => {
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC
            }
            Sharing::Shared => MapFlags::SHARED,
            Sharing::Private => MapFlags::PRIVATE,
        };
        if options.contains(MmapOptions::POPULATE) {
            f |= MapFlags::POPULATE;
        }
        let name = call_name(sharing, options, file.is_none());
        // SAFETY: a null hint lets the kernel choose the address, so no existing mapping is
        // replaced; the result is owned by the returned value, which unmaps it once.
        let r = unsafe {
            match file {
                Some((fd, offset)) => {
                    rustix::mm::mmap(core::ptr::null_mut(), len, p, f, fd, offset)
                }
                None => rustix::mm::mmap_anonymous(core::ptr::null_mut(), len, p, f),
            }
        };
        let addr = r.map_err(|errno| Error::Syscall { name, errno })?;
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or(Error::BadReply {
            ioctl: name,
            what: "a null address",
        })?;
        Ok(Self {
            ptr,
            len,
            prot,
            sharing,
            options,
            anonymous: file.is_none(),
            release: crate::release::unowned(),
        })
    }

    pub(crate) fn set_release_counter(&mut self, counter: &'static ReleaseCounter) {
        self.release = counter;
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The protection it was mapped with.
    pub fn prot(&self) -> Prot {
        self.prot
    }

    /// Shared or private.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// The extra flags it was mapped with.
    pub fn options(&self) -> MmapOptions {
        self.options
    }

    /// Whether it maps anonymous memory (no file).
    pub fn is_anonymous(&self) -> bool {
        self.anonymous
    }

    /// The start address. Safe to have; using it as a pointer is the caller's `unsafe`
    /// business (the range is mapped, with [`prot`](Self::prot), while `self` lives).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Only private anonymous memory can be borrowed as a slice: nothing else (no device,
    /// file, other mapping or process) sees its pages.
    fn exclusive(&self) -> bool {
        self.anonymous && self.sharing == Sharing::Private
    }

    /// The mapping as a slice: `Some` only for readable private anonymous memory
    /// ([`Mmap::anonymous`]), which nothing outside this process can change; `None` for
    /// every other mapping (use [`read_at`](Self::read_at)).
    pub fn as_slice(&self) -> Option<&[u8]> {
        if !self.exclusive() || !self.prot.contains(Prot::READ) {
            return None;
        }
        // SAFETY: ptr/len are this live, readable mapping, which outlives `&self`; it is
        // private anonymous memory, so only Rust code through this value writes it, and that
        // needs `&mut self`, excluded while the returned borrow lives.
        Some(unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The mapping as a mutable slice: `Some` only for readable and writable private
    /// anonymous memory ([`Mmap::anonymous`]).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if !self.exclusive() || !self.prot.contains(Prot::READ | Prot::WRITE) {
            return None;
        }
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes this the only
        // reference to the memory while it lives.
        Some(unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// The whole mapping as a slice, whatever shares it.
    ///
    /// # Safety
    /// Nothing may write the memory while the slice lives (device, importer, other mapping,
    /// other process); the mapping must be readable.
    pub(crate) unsafe fn slice_unchecked(&self) -> &[u8] {
        // SAFETY: ptr/len are this live mapping, which outlives `&self`; the absence of
        // writers is the caller's contract.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole mapping as a mutable slice, whatever shares it.
    ///
    /// # Safety
    /// Nothing else may read or write the memory while the slice lives; the mapping must be
    /// readable and writable.
    pub(crate) unsafe fn slice_mut_unchecked(&mut self) -> &mut [u8] {
        // SAFETY: as for `slice_unchecked`, with exclusive access the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    fn in_range(&self, offset: usize, n: usize) -> bool {
        offset.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Volatile copy out of `offset..offset + dst.len()`, which the caller checked lies
    /// inside the mapping, which is readable. A range outside copies nothing.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        if !self.in_range(offset, dst.len()) {
            return;
        }
        // SAFETY: the range lies inside this live mapping (checked just above; mappings
        // are page-aligned); `dst` is a Rust slice, which cannot overlap a mapping this type
        // never lends out as a reference while `&self` copies.
        unsafe { volatile_copy_out(self.ptr.as_ptr().add(offset), dst) }
    }

    /// Volatile copy of `src` into `offset..`, which the caller checked lies inside the
    /// mapping, which is writable. A range outside copies nothing.
    pub(crate) fn copy_in(&mut self, offset: usize, src: &[u8]) {
        if !self.in_range(offset, src.len()) {
            return;
        }
        // SAFETY: as in `copy_out`, in the other direction; `&mut self` excludes every
        // other Rust access through this value.
        unsafe { volatile_copy_in(self.ptr.as_ptr().add(offset), src) }
    }

    /// `msync(MS_SYNC)` over the pages holding `offset..offset + n` (inside the mapping:
    /// checked by the caller; EINVAL from here otherwise, touching nothing).
    pub(crate) fn msync_in_range(&self, offset: usize, n: usize) -> rustix::io::Result<()> {
        if !self.in_range(offset, n) {
            return Err(Errno::INVAL);
        }
        let page = rustix::param::page_size();
        let base = self.ptr.as_ptr() as usize;
        let start = (base + offset) & !(page - 1);
        let end = base + offset + n;
        // SAFETY: start..end lies inside this live mapping: rounded down to the page holding
        // `offset`, which is the mapping's own (mappings start page-aligned). msync reads
        // and writes no memory of ours; it writes dirty pages back.
        unsafe {
            rustix::mm::msync(
                start as *mut core::ffi::c_void,
                end - start,
                MsyncFlags::SYNC,
            )
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping made in `new_raw`, unmapped only here; no
        // reference into it outlives `self`.
        let r = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        // Drop never panics: a failure is counted (a mapping belongs to no Device).
        if let Err(e) = r {
            self.release.record("munmap", e);
        }
    }
}

/// The copies' loops for one access width `$chunk`: single bytes up to the first aligned
/// chunk, four aligned chunks per iteration, single chunks, then the remaining bytes. The
/// mapping side is accessed with volatile loads or stores, the Rust side with ordinary
/// unaligned ones. `$attr` names the target feature the width needs, if any (the callers
/// check it at run time).
macro_rules! volatile_copies {
    ($(#[$attr:meta])* $copy_in:ident, $copy_out:ident, $chunk:ty) => {
        /// Copies `src` to `dst` with volatile stores (see `volatile_copies!`).
        ///
        /// # Safety
        /// `dst..dst + src.len()` must be writable mapped memory that no Rust reference
        /// covers; the CPU must have the target features this function is built with.
        $(#[$attr])*
        unsafe fn $copy_in(dst: *mut u8, src: &[u8]) {
            const C: usize = core::mem::size_of::<$chunk>();
            let n = src.len();
            let head = dst.align_offset(C).min(n);
            let body = (n - head) / C * C;
            let quad = body / (4 * C) * (4 * C);
            let s = src.as_ptr();
            // SAFETY: (every loop) each index is below `n`, so each access stays inside
            // the caller's range and `src`; the chunk stores are aligned (`head` aligns
            // `dst`) and the chunk loads from `src` are unaligned reads of initialized bytes.
            unsafe {
                for i in 0..head {
                    dst.add(i).write_volatile(*s.add(i));
                }
                let mut i = head;
                while i < head + quad {
                    let a = s.add(i).cast::<$chunk>().read_unaligned();
                    let b = s.add(i + C).cast::<$chunk>().read_unaligned();
                    let c = s.add(i + 2 * C).cast::<$chunk>().read_unaligned();
                    let d = s.add(i + 3 * C).cast::<$chunk>().read_unaligned();
                    dst.add(i).cast::<$chunk>().write_volatile(a);
                    dst.add(i + C).cast::<$chunk>().write_volatile(b);
                    dst.add(i + 2 * C).cast::<$chunk>().write_volatile(c);
                    dst.add(i + 3 * C).cast::<$chunk>().write_volatile(d);
                    i += 4 * C;
                }
                while i < head + body {
                    let v = s.add(i).cast::<$chunk>().read_unaligned();
                    dst.add(i).cast::<$chunk>().write_volatile(v);
                    i += C;
                }
                for i in head + body..n {
                    dst.add(i).write_volatile(*s.add(i));
                }
            }
        }

        /// Copies into `dst` from `src` with volatile loads, aligned like the copy in.
        ///
        /// # Safety
        /// `src..src + dst.len()` must be readable mapped memory; the CPU must have the
        /// target features this function is built with.
        $(#[$attr])*
        unsafe fn $copy_out(src: *const u8, dst: &mut [u8]) {
            const C: usize = core::mem::size_of::<$chunk>();
            let n = dst.len();
            let head = src.align_offset(C).min(n);
            let body = (n - head) / C * C;
            let quad = body / (4 * C) * (4 * C);
            let d = dst.as_mut_ptr();
            // SAFETY: (every loop) as in the copy in, with the roles swapped: aligned
            // volatile loads from the mapping, unaligned stores into `dst`.
            unsafe {
                for i in 0..head {
                    *d.add(i) = src.add(i).read_volatile();
                }
                let mut i = head;
                while i < head + quad {
                    let a = src.add(i).cast::<$chunk>().read_volatile();
                    let b = src.add(i + C).cast::<$chunk>().read_volatile();
                    let c = src.add(i + 2 * C).cast::<$chunk>().read_volatile();
                    let e = src.add(i + 3 * C).cast::<$chunk>().read_volatile();
                    d.add(i).cast::<$chunk>().write_unaligned(a);
                    d.add(i + C).cast::<$chunk>().write_unaligned(b);
                    d.add(i + 2 * C).cast::<$chunk>().write_unaligned(c);
                    d.add(i + 3 * C).cast::<$chunk>().write_unaligned(e);
                    i += 4 * C;
                }
                while i < head + body {
                    let v = src.add(i).cast::<$chunk>().read_volatile();
                    d.add(i).cast::<$chunk>().write_unaligned(v);
                    i += C;
                }
                for i in head + body..n {
                    *d.add(i) = src.add(i).read_volatile();
                }
            }
        }
    };
}

// The base width: a 16-byte SSE2 register on x86-64 (SSE2 is part of the base
// architecture), else a machine word.
#[cfg(target_arch = "x86_64")]
volatile_copies!(copy_in_base, copy_out_base, core::arch::x86_64::__m128i);
#[cfg(not(target_arch = "x86_64"))]
volatile_copies!(copy_in_base, copy_out_base, usize);
// 32-byte AVX registers where the CPU has them (checked at run time, once per process by
// std's detection cache): half the loop iterations of the SSE2 copy.
#[cfg(target_arch = "x86_64")]
volatile_copies!(
    #[target_feature(enable = "avx")]
    copy_in_avx,
    copy_out_avx,
    core::arch::x86_64::__m256i
);

/// Copies at or above this many bytes take the AVX loops where the CPU has AVX.
#[cfg(target_arch = "x86_64")]
const WIDE_FROM: usize = 256;

/// Copies `src` to `dst` with volatile stores, in the widest chunks the CPU offers.
///
/// # Safety
/// `dst..dst + src.len()` must be writable mapped memory that no Rust reference covers.
unsafe fn volatile_copy_in(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= WIDE_FROM && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the caller's contract, forwarded; AVX is present (checked just above).
        return unsafe { copy_in_avx(dst, src) };
    }
    // SAFETY: the caller's contract, forwarded; the base width needs no feature check.
    unsafe { copy_in_base(dst, src) }
}

/// Copies into `dst` from `src` with volatile loads, in the widest chunks the CPU offers.
///
/// # Safety
/// `src..src + dst.len()` must be readable mapped memory.
unsafe fn volatile_copy_out(src: *const u8, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= WIDE_FROM && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the caller's contract, forwarded; AVX is present (checked just above).
        return unsafe { copy_out_avx(src, dst) };
    }
    // SAFETY: the caller's contract, forwarded; the base width needs no feature check.
    unsafe { copy_out_base(src, dst) }
}
