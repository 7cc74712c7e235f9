//! Test memory for the mirror-device tests: anonymous and file mappings with protections,
//! holes, huge-page advice, pattern fills and checks, and a fork helper. The device reads
//! and writes this memory behind the compiler's back, so nothing here hands out a Rust
//! reference to it except [`Region::as_mut_slice`], which borrows the region. Part of the
//! crate's `sys_call` module; re-exported by `kernel_tests::mem`.
//!
//! It owns its mapping itself rather than through [`drm_gem::Mmap`]: the tests change the
//! mapping under it (`mprotect` per page, holes punched with `munmap`, pages unmapped by
//! another thread mid-ioctl, huge-page alignment inside a larger mapping), which an `Mmap`,
//! whose whole range stays mapped with one protection for its life, must not allow.
//!
//! # Safety
//! Every pointer used here lies inside a mapping the [`Region`] owns (made by `mmap` in the
//! constructor, unmapped once in `Drop`, except the holes it made itself, which it never
//! unmaps again); reads and writes go through raw pointers only while the pages are
//! readable/writable, which the region tracks (`protect`, `unmap_page` and
//! `unmap_pages_while` record what they changed, and the accessors check before touching
//! a page).

use hmm::{Dmirror, MirrorReport, PageRange};
use rustix::fd::BorrowedFd;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use std::ptr::NonNull;

/// Page size.
pub fn page() -> usize {
    rustix::param::page_size()
}

/// What a page of a [`Region`] allows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No access (PROT_NONE) or unmapped.
    None,
    /// Read-only.
    Read,
    /// Read and write.
    ReadWrite,
}

/// A mapping owned by a test.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    /// The whole mapping (for munmap).
    map_len: usize,
    /// The part the test uses (aligned for huge pages where asked).
    start: usize,
    npages: usize,
    access: Vec<Access>,
    /// Pages this region unmapped (holes): never touched or unmapped again, since the
    /// kernel may have put another mapping there.
    hole: Vec<bool>,
}

impl Region {
    fn map(
        len: usize,
        prot: ProtFlags,
        flags: MapFlags,
        fd: Option<BorrowedFd<'_>>,
    ) -> NonNull<u8> {
        // SAFETY: a null hint lets the kernel choose a fresh address range, so no existing
        // mapping is replaced; the region owns the result and unmaps it once.
        let p = unsafe {
            match fd {
                None => rustix::mm::mmap_anonymous(core::ptr::null_mut(), len, prot, flags),
                Some(fd) => rustix::mm::mmap(core::ptr::null_mut(), len, prot, flags, fd, 0),
            }
        }
        .expect("mmap");
        NonNull::new(p.cast()).expect("mmap returned null")
    }

    fn with(base: NonNull<u8>, map_len: usize, start: usize, npages: usize, a: Access) -> Self {
        Self {
            base,
            map_len,
            start,
            npages,
            access: vec![a; npages],
            hole: vec![false; npages],
        }
    }

    /// `npages` of private anonymous memory, read-write, not yet touched.
    pub fn anon(npages: usize) -> Self {
        let len = npages * page();
        let p = Self::map(
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
            None,
        );
        Self::with(p, len, p.as_ptr() as usize, npages, Access::ReadWrite)
    }

    /// `npages` of shared anonymous memory, read-write.
    pub fn anon_shared(npages: usize) -> Self {
        let len = npages * page();
        let p = Self::map(
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            None,
        );
        Self::with(p, len, p.as_ptr() as usize, npages, Access::ReadWrite)
    }

    /// `npages` of private anonymous memory mapped with `access` from the start.
    pub fn anon_with(npages: usize, access: Access) -> Self {
        let len = npages * page();
        let p = Self::map(len, prot_of(access), MapFlags::PRIVATE, None);
        Self::with(p, len, p.as_ptr() as usize, npages, access)
    }

    /// `size` bytes of private anonymous memory aligned to `size` (for transparent huge
    /// pages), with `MADV_HUGEPAGE` (`huge`) or `MADV_NOHUGEPAGE`.
    pub fn anon_aligned(size: usize, huge: bool) -> Self {
        let len = 2 * size;
        let p = Self::map(
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
            None,
        );
        let start = (p.as_ptr() as usize).next_multiple_of(size);
        let r = Self::with(p, len, start, size / page(), Access::ReadWrite);
        r.advise(huge);
        r
    }

    /// `size` bytes of hugetlbfs memory (`MAP_HUGETLB`), or `None` where none can be had.
    pub fn hugetlb(size: usize) -> Option<Self> {
        // SAFETY: as in `map`: a fresh range chosen by the kernel, owned by the region.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                core::ptr::null_mut(),
                size,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::HUGETLB,
            )
        }
        .ok()?;
        let p = NonNull::new(p.cast::<u8>())?;
        Some(Self::with(
            p,
            size,
            p.as_ptr() as usize,
            size / page(),
            Access::ReadWrite,
        ))
    }

    /// `npages` of the file `fd` from offset 0, shared or private, read-only or read-write.
    pub fn file(fd: BorrowedFd<'_>, npages: usize, shared: bool, access: Access) -> Self {
        let len = npages * page();
        let flags = if shared {
            MapFlags::SHARED
        } else {
            MapFlags::PRIVATE
        };
        let p = Self::map(len, prot_of(access), flags, Some(fd));
        Self::with(p, len, p.as_ptr() as usize, npages, access)
    }

    /// The whole region as a device range.
    pub fn range(&self) -> PageRange {
        PageRange::new(self.start, self.npages as u64).unwrap()
    }

    /// `n` pages from page `first`, as a device range.
    pub fn pages(&self, first: usize, n: usize) -> PageRange {
        PageRange::new(self.start + first * page(), n as u64).unwrap()
    }

    /// Number of pages.
    pub fn npages(&self) -> usize {
        self.npages
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.npages * page()
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        self.npages == 0
    }

    fn addr(&self, page_index: usize) -> *mut u8 {
        assert!(page_index < self.npages);
        (self.start + page_index * page()) as *mut u8
    }

    /// `mprotect` of `n` pages from `first`.
    pub fn protect(&mut self, first: usize, n: usize, access: Access) {
        self.assert_no_hole(first, n);
        // SAFETY: the pages lie inside this region's mapping and are no holes (still ours);
        // no reference into it is alive (accessors copy), and later accesses check the
        // recorded protection.
        unsafe { rustix::mm::mprotect(self.addr(first).cast(), n * page(), mprotect_of(access)) }
            .expect("mprotect");
        self.access[first..first + n].fill(access);
    }

    /// Unmaps page `i`, leaving a hole (once; a hole stays a hole).
    pub fn unmap_page(&mut self, i: usize) {
        assert!(!self.hole[i], "page {i} is already a hole");
        // SAFETY: the page lies inside this region's mapping and is not a hole (still ours),
        // and no reference into it is alive; the region records the hole and never touches
        // or unmaps it again.
        unsafe { rustix::mm::munmap(self.addr(i).cast(), page()) }.expect("munmap");
        self.access[i] = Access::None;
        self.hole[i] = true;
    }

    /// Unmaps pages `first..first+n`.
    pub fn unmap_pages(&mut self, first: usize, n: usize) {
        for i in first..first + n {
            self.unmap_page(i);
        }
    }

    /// Runs `during` on this thread while another thread unmaps pages `first..first+n`
    /// (none of them a hole yet), and returns its result once both are done; the pages are
    /// holes afterwards. While `during` runs those pages already count as inaccessible, so
    /// the accessors refuse them (only the device may race with the unmap).
    pub fn unmap_pages_while<R>(
        &mut self,
        first: usize,
        n: usize,
        during: impl FnOnce(&Self) -> R,
    ) -> R {
        assert!(first + n <= self.npages && n > 0);
        assert!(
            !self.hole[first..first + n].contains(&true),
            "pages {first}..{} hold a hole",
            first + n
        );
        self.access[first..first + n].fill(Access::None);
        self.hole[first..first + n].fill(true);
        let (addr, len) = (self.addr(first) as usize, n * page());
        let this = &*self;
        std::thread::scope(|s| {
            let t = s.spawn(move || {
                std::thread::yield_now();
                // SAFETY: the range lies inside this region's mapping and holds no hole; the
                // region, borrowed for the whole scope, already records it as holes (never
                // touched or unmapped again), and no reference into it is alive.
                unsafe { rustix::mm::munmap(addr as *mut _, len) }
            });
            let r = during(this);
            t.join().expect("unmap thread").expect("munmap");
            r
        })
    }

    /// Whether `len` bytes at address `addr` lie inside this region's pages and touch no
    /// hole (a hole may hold someone else's mapping by now).
    pub(crate) fn covers(&self, addr: u64, len: u64) -> bool {
        let (start, end) = (self.start as u64, (self.start + self.len()) as u64);
        if addr < start || addr.checked_add(len).is_none_or(|e| e > end) {
            return false;
        }
        let p = page() as u64;
        let first = ((addr - start) / p) as usize;
        let last = ((addr + len).div_ceil(p) * p - start) / p;
        !self.hole[first..last as usize].contains(&true)
    }

    fn assert_no_hole(&self, first: usize, n: usize) {
        assert!(first + n <= self.npages, "outside the region");
        assert!(
            !self.hole[first..first + n].contains(&true),
            "pages {first}..{} hold a hole, which may be someone else's mapping by now",
            first + n
        );
    }

    /// `MADV_HUGEPAGE` or `MADV_NOHUGEPAGE` on the region.
    pub fn advise(&self, huge: bool) {
        use rustix::mm::Advice;
        let a = if huge {
            Advice::LinuxHugepage
        } else {
            Advice::LinuxNoHugepage
        };
        // SAFETY: advice on this region's own range; it changes how pages are backed, not
        // what they hold.
        unsafe { rustix::mm::madvise(self.addr(0).cast(), self.len(), a) }.expect("madvise");
    }

    fn check(&self, offset: usize, len: usize, write: bool) {
        assert!(offset + len <= self.len(), "outside the region");
        if len == 0 {
            return;
        }
        for p in offset / page()..=(offset + len - 1) / page() {
            let ok = match self.access[p] {
                Access::None => false,
                Access::Read => !write,
                Access::ReadWrite => true,
            };
            assert!(ok, "page {p} does not allow this access");
        }
    }

    /// The u32 at index `i` (as words from the start).
    pub fn u32_at(&self, i: usize) -> u32 {
        self.check(i * 4, 4, false);
        // SAFETY: inside the region and readable (checked); volatile because the device
        // may have changed it.
        unsafe { self.addr(0).add(i * 4).cast::<u32>().read_volatile() }
    }

    /// Stores `v` at word `i`.
    pub fn set_u32(&self, i: usize, v: u32) {
        self.check(i * 4, 4, true);
        // SAFETY: inside the region and writable (checked); no reference to it is alive.
        unsafe { self.addr(0).add(i * 4).cast::<u32>().write_volatile(v) }
    }

    /// Fills pages `first..first+n` with `f(word index)`.
    pub fn fill(&self, first: usize, n: usize, f: impl Fn(usize) -> u32) {
        let per = page() / 4;
        for i in first * per..(first + n) * per {
            self.set_u32(i, f(i));
        }
    }

    /// Index of the first word of pages `first..first+n` that is not `f(index)`.
    pub fn first_mismatch(
        &self,
        first: usize,
        n: usize,
        f: impl Fn(usize) -> u32,
    ) -> Option<usize> {
        let per = page() / 4;
        (first * per..(first + n) * per).find(|&i| self.u32_at(i) != f(i))
    }

    /// A copy of `n` pages from `first`.
    pub fn copy(&self, first: usize, n: usize) -> Vec<u8> {
        self.check(first * page(), n * page(), false);
        let mut v = vec![0u8; n * page()];
        // SAFETY: readable pages inside the region (checked) into a fresh Vec.
        unsafe { core::ptr::copy_nonoverlapping(self.addr(first), v.as_mut_ptr(), v.len()) };
        v
    }

    /// The region as a mutable slice; every page must be read-write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.check(0, self.len(), true);
        // SAFETY: the whole region is mapped read-write (checked) and borrowed mutably for
        // the slice's lifetime, so nothing else reads or writes it meanwhile.
        unsafe { core::slice::from_raw_parts_mut(self.addr(0), self.len()) }
    }

    /// The device writes `data` into pages `first..first+n`, whatever their protection
    /// (for the EPERM/EFAULT cases); none of them may be a hole (panics).
    pub fn device_write(
        &self,
        d: &Dmirror,
        first: usize,
        n: usize,
        data: &[u8],
    ) -> drm_gem::Result<MirrorReport> {
        self.assert_no_hole(first, n);
        // SAFETY: the pages are no holes (still this region's), and the region never lends
        // out a reference except through `as_mut_slice`, which borrows it mutably, so none
        // is alive during `&self`.
        unsafe { d.write(self.pages(first, n), data) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Unmap everything but the holes, in runs: the mapping before the used part
        // (aligned regions), each run of pages that are not holes, and the rest.
        let base = self.base.as_ptr() as usize;
        let end = base + self.map_len;
        let mut runs = Vec::new();
        let mut from = base;
        for (i, &hole) in self.hole.iter().enumerate() {
            let at = self.start + i * page();
            if hole {
                runs.push((from, at));
                from = at + page();
            }
        }
        runs.push((from, end));
        for (a, b) in runs.into_iter().filter(|(a, b)| b > a) {
            // SAFETY: a part of the mapping made in the constructor that holds no hole (so
            // it is still ours), unmapped only here.
            let r = unsafe { rustix::mm::munmap(a as *mut _, b - a) };
            // Drop never panics: a failure is only reported.
            if let Err(e) = r {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "Region drop: munmap: {e}");
            }
        }
    }
}

fn prot_of(a: Access) -> ProtFlags {
    match a {
        Access::None => ProtFlags::empty(),
        Access::Read => ProtFlags::READ,
        Access::ReadWrite => ProtFlags::READ | ProtFlags::WRITE,
    }
}

fn mprotect_of(a: Access) -> MprotectFlags {
    match a {
        Access::None => MprotectFlags::empty(),
        Access::Read => MprotectFlags::READ,
        Access::ReadWrite => MprotectFlags::READ | MprotectFlags::WRITE,
    }
}

/// Runs `child` in a forked child process and returns its exit status (0 when it returned
/// true; 1 when it returned false; 2 when it panicked). The child never returns into the
/// test harness.
pub fn in_child(child: impl FnOnce() -> bool) -> i32 {
    // SAFETY: fork duplicates the process; the child only runs `child` (the tests run one
    // at a time, so no other test thread holds locks it needs) and then leaves with
    // `_exit`, never unwinding into the parent's harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(_) => 2,
        };
        // SAFETY: ends the child at once, without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    let r = loop {
        // SAFETY: waits for our own child, writing its status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        // A signal (the signal storm's, say) interrupts the wait; the child runs on.
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break r;
    };
    assert_eq!(r, pid, "waitpid");
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of someone else's, mapped into a hole of a region (as the kernel may do for
    /// any later mmap): the region's drop must leave it alone.
    #[test]
    fn a_hole_refilled_by_another_mapping_survives_the_regions_drop() {
        let mut r = Region::anon(4);
        r.fill(0, 4, |i| i as u32);
        r.unmap_page(1);
        let hole = r.addr(1);
        // SAFETY: MAP_FIXED_NOREPLACE at the hole, which is unmapped, so nothing is
        // replaced (the call fails with EEXIST otherwise); the page is ours until unmapped
        // below.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                hole.cast(),
                page(),
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
            )
        }
        .expect("a page in the hole");
        assert_eq!(p.cast::<u8>(), hole);
        // SAFETY: the page mapped above, read-write, referenced by nothing else.
        unsafe { p.cast::<u32>().write_volatile(0x5a5a_5a5a) };
        drop(r);
        // The page is still mapped and holds what was written (the old drop unmapped the
        // whole range, holes included, and this read faulted).
        // SAFETY: as above; still mapped if the region's drop left it alone.
        assert_eq!(unsafe { p.cast::<u32>().read_volatile() }, 0x5a5a_5a5a);
        // SAFETY: exactly the page mapped above.
        unsafe { rustix::mm::munmap(p, page()) }.unwrap();
    }

    #[test]
    fn pages_unmapped_while_something_runs_become_holes() {
        let mut r = Region::anon(4);
        r.fill(0, 4, |i| i as u32);
        let seen = r.unmap_pages_while(2, 2, |r| (r.u32_at(0), r.range().npages()));
        assert_eq!(seen, (0, 4));
        assert_eq!(r.first_mismatch(0, 2, |i| i as u32), None);
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.unmap_page(2)));
        assert!(again.is_err(), "a hole cannot be unmapped twice");
        let read =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.u32_at(3 * page() / 4)));
        assert!(read.is_err(), "a hole cannot be read");
    }
}
