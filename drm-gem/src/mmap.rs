//! Owned memory mappings: [`Mmap`], with its protection ([`Prot`]), sharing ([`Sharing`])
//! and extra flags ([`MmapOptions`]).
//!
//! This is the one owner of an `mmap` in the workspace: buffer [`Mapping`](crate::Mapping)s,
//! the `hmm` crate's DAX mappings and `drmtool`'s probe pages all hold an [`Mmap`]. The type
//! itself, its copies and its `Drop` live in the crate's `sys_call` module (the only unsafe
//! code); this module holds the flags and the checks made before the kernel is asked.

use crate::error::{Error, Result};
use crate::release::ReleaseCounter;
pub use crate::sys_call::Mmap;
use rustix::fd::BorrowedFd;

bitflags::bitflags! {
    /// The protection of an [`Mmap`] (`PROT_READ`, `PROT_WRITE`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Prot: u8 {
        /// `PROT_READ`: [`Mmap::read_at`] works.
        const READ = 1;
        /// `PROT_WRITE`: [`Mmap::write_at`] works.
        const WRITE = 2;
    }
}

bitflags::bitflags! {
    /// Flags of an [`Mmap`] beyond its [`Sharing`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MmapOptions: u8 {
        /// `MAP_SHARED_VALIDATE | MAP_SYNC` (Linux 4.15): the kernel refuses the mapping
        /// (`EOPNOTSUPP`) unless the file is DAX, and makes filesystem metadata durable
        /// before a write fault returns. Shared mappings of files only.
        const SYNC = 1;
        /// `MAP_POPULATE`: fault every page in before `mmap` returns.
        const POPULATE = 2;
    }
}

/// Whether writes to an [`Mmap`] reach the file (and every other mapping of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// `MAP_SHARED`: the pages are the file's (or, anonymous, shared with forked children):
    /// a device, another mapping or another process may change them at any time.
    Shared,
    /// `MAP_PRIVATE`: copy-on-write. Anonymous private memory is this process's alone; the
    /// pages of a private file mapping follow the file until this process writes them.
    Private,
}

/// The name errors give the `mmap` call: how it was asked (`is_not_dax` in `hmm` keys on
/// `MAP_SYNC` in it).
pub(crate) fn call_name(sharing: Sharing, options: MmapOptions, anonymous: bool) -> &'static str {
    match (sharing, options.contains(MmapOptions::SYNC), anonymous) {
        (_, true, _) => "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)",
        (Sharing::Shared, false, false) => "mmap(MAP_SHARED)",
        (Sharing::Private, false, false) => "mmap(MAP_PRIVATE)",
        (Sharing::Shared, false, true) => "mmap(MAP_SHARED|MAP_ANONYMOUS)",
        (Sharing::Private, false, true) => "mmap(MAP_PRIVATE|MAP_ANONYMOUS)",
    }
}

/// The checks made before the kernel is asked (it would refuse these too, with EINVAL).
#[inline]
fn check_request(len: usize, sharing: Sharing, options: MmapOptions, anon: bool) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument {
            what: "cannot map 0 bytes".into(),
        });
    }
    if options.contains(MmapOptions::SYNC) && (sharing != Sharing::Shared || anon) {
        return Err(Error::InvalidArgument {
            what: "MAP_SYNC needs a shared mapping of a file".into(),
        });
    }
    Ok(())
}

impl Mmap {
    /// Maps `len` (> 0) bytes of `fd` at `offset` (a multiple of the page size), with
    /// `prot`, `sharing` and `options`. The kernel chooses the address.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 bytes and for [`MmapOptions::SYNC`] on a private
    /// mapping; otherwise [`Error::Syscall`] named after the request
    /// (`"mmap(MAP_SHARED)"`, `"mmap(MAP_PRIVATE)"`, `"mmap(MAP_SHARED_VALIDATE|MAP_SYNC)"`)
    /// with the kernel's errno: `EACCES` for a writable shared mapping of a file opened
    /// read-only, `EOPNOTSUPP` for `MAP_SYNC` on a file that is not DAX, `EINVAL` for a
    /// misaligned offset.
    #[inline]
    pub fn map(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        prot: Prot,
        sharing: Sharing,
        options: MmapOptions,
    ) -> Result<Self> {
        check_request(len, sharing, options, false)?;
        Self::new_raw(Some((fd, offset)), len, prot, sharing, options)
    }

    /// `len` (> 0) bytes of fresh zero-filled anonymous memory, private to this process
    /// (`MAP_PRIVATE | MAP_ANONYMOUS`); [`as_slice`](Self::as_slice) and
    /// [`as_mut_slice`](Self::as_mut_slice) work on it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 bytes; [`Error::Syscall`]
    /// `"mmap(MAP_PRIVATE|MAP_ANONYMOUS)"` (`ENOMEM`) otherwise.
    pub fn anonymous(len: usize, prot: Prot) -> Result<Self> {
        check_request(len, Sharing::Private, MmapOptions::empty(), true)?;
        Self::new_raw(None, len, prot, Sharing::Private, MmapOptions::empty())
    }

    /// Records a failed `munmap` of this mapping's `Drop` in `counter` instead of
    /// [`unowned_release_failures`](crate::unowned_release_failures) (a crate that counts
    /// its own objects' release failures passes its counter).
    pub fn record_release_failures_in(mut self, counter: &'static ReleaseCounter) -> Self {
        self.set_release_counter(counter);
        self
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The start address (for reports and page-frame lookups; see [`as_ptr`](Self::as_ptr)).
    pub fn addr(&self) -> usize {
        self.as_ptr() as usize
    }

    /// `Ok` when `offset..offset + n` lies inside the mapping; otherwise the
    /// [`Error::InvalidArgument`] that [`read_at`](Self::read_at) and
    /// [`write_at`](Self::write_at) return for it.
    #[inline]
    pub fn check_range(&self, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).is_some_and(|end| end <= self.len()) {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                what: format!(
                    "{n} bytes at offset {offset} exceed the mapping's {} bytes",
                    self.len()
                ),
            })
        }
    }

    #[inline]
    fn check_prot(&self, need: Prot, what: &str) -> Result<()> {
        if self.prot().contains(need) {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                what: format!("the mapping is not {what} (mapped {:?})", self.prot()),
            })
        }
    }

    /// Copies from the mapping at `offset` into `dst`: the bytes as they are at that
    /// moment (a device or another process writing concurrently may leave a mix of old
    /// and new bytes; never undefined behaviour).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing copied) when the range does not lie inside the
    /// mapping or the mapping lacks [`Prot::READ`].
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        self.check_prot(Prot::READ, "readable")?;
        self.copy_out(offset, dst);
        Ok(())
    }

    /// Copies `src` into the mapping at `offset`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing copied) when the range does not lie inside the
    /// mapping or the mapping lacks [`Prot::WRITE`].
    #[inline]
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        self.check_prot(Prot::WRITE, "writable")?;
        self.copy_in(offset, src);
        Ok(())
    }

    /// `msync(MS_SYNC)` over the pages holding `offset..offset + n`: a shared file
    /// mapping's dirty pages are written back (and, on DAX, made durable) when it returns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the range does not lie inside the mapping;
    /// [`Error::Syscall`] `"msync"` with the kernel's errno.
    pub fn msync(&self, offset: usize, n: usize) -> Result<()> {
        self.check_range(offset, n)?;
        self.msync_in_range(offset, n)
            .map_err(|errno| Error::syscall("msync", errno))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::{AsFd, OwnedFd};

    fn memfd(len: u64) -> OwnedFd {
        let fd = rustix::fs::memfd_create("drm-gem-mmap-test", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd_create");
        rustix::fs::ftruncate(&fd, len).expect("ftruncate");
        fd
    }

    fn rw() -> Prot {
        Prot::READ | Prot::WRITE
    }

    /// A shared read-write mapping without options, the common case of these tests.
    fn shared_rw(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Mmap> {
        Mmap::map(fd, offset, len, rw(), Sharing::Shared, MmapOptions::empty())
    }

    fn in_maps(addr: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let start = format!("{addr:x}-");
        maps.lines().any(|l| l.starts_with(&start))
    }

    #[test]
    fn copies_stay_inside_the_mapping() {
        let fd = memfd(8192);
        let mut m = shared_rw(fd.as_fd(), 0, 8192).unwrap();
        assert_eq!((m.len(), m.is_empty(), m.prot()), (8192, false, rw()));
        assert_eq!(m.sharing(), Sharing::Shared);
        // Every alignment of head, body and tail, across the page boundary.
        let data: Vec<u8> = (0..100u8).collect();
        for off in 4090..4110 {
            for n in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100] {
                m.write_at(off, &data[..n]).unwrap();
                let mut back = vec![0xeeu8; n];
                m.read_at(off, &mut back).unwrap();
                assert_eq!(back, &data[..n], "offset {off}, {n} bytes");
            }
        }
        // The last byte, and an empty copy at the very end.
        m.write_at(8191, b"z").unwrap();
        m.read_at(8192, &mut []).unwrap();
        let mut z = [0u8];
        m.read_at(8191, &mut z).unwrap();
        assert_eq!(&z, b"z");
    }

    #[test]
    fn wide_copies_round_trip_at_every_alignment_and_touch_nothing_else() {
        // Lengths around the wide (AVX) threshold and the four-chunk loop, at offsets that
        // give every alignment of a 32-byte chunk; each copy is checked together with the
        // bytes around it, which must keep their guard pattern.
        let fd = memfd(16384);
        let mut m = shared_rw(fd.as_fd(), 0, 16384).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 131 + 7) as u8).collect();
        let guard = vec![0xa5u8; 16384];
        for n in [
            127, 128, 129, 255, 256, 257, 300, 511, 512, 4095, 4096, 4999,
        ] {
            for off in (4000..4034).chain([0, 16384 - n]) {
                m.write_at(0, &guard).unwrap();
                m.write_at(off, &data[..n]).unwrap();
                let mut all = vec![0u8; 16384];
                m.read_at(0, &mut all).unwrap();
                assert_eq!(&all[off..off + n], &data[..n], "{n} bytes at {off}");
                assert!(
                    all[..off].iter().chain(&all[off + n..]).all(|&b| b == 0xa5),
                    "{n} bytes at {off} wrote outside their range"
                );
                let mut back = vec![0u8; n];
                m.read_at(off, &mut back).unwrap();
                assert_eq!(back, &data[..n], "read back {n} bytes at {off}");
            }
        }
    }

    #[test]
    fn out_of_range_copies_are_refused_and_copy_nothing() {
        let fd = memfd(4096);
        let mut m = shared_rw(fd.as_fd(), 0, 4096).unwrap();
        m.write_at(4088, &[1; 8]).unwrap();
        for (off, n) in [(4089, 8), (4096, 1), (usize::MAX, 2), (0, 4097)] {
            let r = m.write_at(off, &vec![9; n]);
            assert!(
                matches!(r, Err(Error::InvalidArgument { .. })),
                "write {n} at {off}: {r:?}"
            );
            let mut dst = vec![7u8; n];
            let r = m.read_at(off, &mut dst);
            assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
            assert!(dst.iter().all(|&b| b == 7), "a refused read copied nothing");
        }
        let mut tail = [0u8; 8];
        m.read_at(4088, &mut tail).unwrap();
        assert_eq!(tail, [1; 8], "refused writes changed nothing");
        assert!(m.check_range(4096, 0).is_ok());
        assert!(m.check_range(4097, 0).is_err());
        assert!(m.msync(4000, 200).is_err());
        m.msync(4000, 96).unwrap();
    }

    #[test]
    fn protection_is_enforced_before_the_copy() {
        let fd = memfd(4096);
        let mut ro = Mmap::map(
            fd.as_fd(),
            0,
            4096,
            Prot::READ,
            Sharing::Shared,
            MmapOptions::empty(),
        )
        .unwrap();
        assert!(matches!(
            ro.write_at(0, b"x"),
            Err(Error::InvalidArgument { .. })
        ));
        let mut b = [1u8; 4];
        ro.read_at(0, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
        let wo = Mmap::map(
            fd.as_fd(),
            0,
            4096,
            Prot::WRITE,
            Sharing::Shared,
            MmapOptions::empty(),
        )
        .unwrap();
        assert!(matches!(
            wo.read_at(0, &mut b),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn a_shared_memfd_mapping_is_seen_by_a_second_mapping_and_the_file() {
        let fd = memfd(8192);
        let mut a = shared_rw(fd.as_fd(), 0, 8192).unwrap();
        let b = Mmap::map(
            fd.as_fd(),
            4096,
            4096,
            Prot::READ,
            Sharing::Shared,
            MmapOptions::POPULATE,
        )
        .unwrap();
        assert_ne!(a.addr(), b.addr());
        a.write_at(4096 + 10, b"shared").unwrap();
        let mut got = [0u8; 6];
        b.read_at(10, &mut got).unwrap();
        assert_eq!(
            &got, b"shared",
            "the second mapping sees the first one's write"
        );
        let mut f = [0u8; 6];
        rustix::io::pread(&fd, &mut f, 4096 + 10).unwrap();
        assert_eq!(&f, b"shared", "so does the file");
        // A private mapping of the same file keeps its own copy once written.
        let mut p = Mmap::map(
            fd.as_fd(),
            0,
            8192,
            rw(),
            Sharing::Private,
            MmapOptions::empty(),
        )
        .unwrap();
        assert_eq!(p.sharing(), Sharing::Private);
        assert!(p.as_slice().is_none(), "a file mapping hands out no slice");
        p.write_at(4096 + 10, b"mine!!").unwrap();
        b.read_at(10, &mut got).unwrap();
        assert_eq!(&got, b"shared");
    }

    #[test]
    fn drop_unmaps_once() {
        let fd = memfd(4096);
        let m = shared_rw(fd.as_fd(), 0, 4096).unwrap();
        let addr = m.addr();
        assert!(in_maps(addr));
        let before = crate::unowned_release_failures().count;
        drop(m);
        assert!(!in_maps(addr), "unmapped on drop");
        // Other tests' drops may run concurrently, but none of them fails.
        assert_eq!(crate::unowned_release_failures().count, before);
    }

    #[test]
    fn anonymous_private_memory_has_slices_and_requests_are_checked() {
        let mut m = Mmap::anonymous(4096, rw()).unwrap();
        assert!(m.is_anonymous());
        assert_eq!(m.as_slice().map(|s| s.len()), Some(4096));
        m.as_mut_slice().unwrap()[4095] = 5;
        let mut b = [0u8];
        m.read_at(4095, &mut b).unwrap();
        assert_eq!(b, [5]);
        let ro = Mmap::anonymous(4096, Prot::READ).unwrap();
        assert!(ro.as_slice().is_some());
        let mut ro = ro;
        assert!(ro.as_mut_slice().is_none(), "no &mut over read-only pages");
        assert!(matches!(
            Mmap::anonymous(0, rw()),
            Err(Error::InvalidArgument { .. })
        ));
        let fd = memfd(4096);
        assert!(matches!(
            Mmap::map(
                fd.as_fd(),
                0,
                4096,
                rw(),
                Sharing::Private,
                MmapOptions::SYNC
            ),
            Err(Error::InvalidArgument { .. })
        ));
        // tmpfs offers no MAP_SYNC: the kernel's EOPNOTSUPP, named after the request.
        match Mmap::map(
            fd.as_fd(),
            0,
            4096,
            rw(),
            Sharing::Shared,
            MmapOptions::SYNC,
        ) {
            Err(Error::Syscall { name, errno }) => {
                assert_eq!(name, "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)");
                assert_eq!(errno, rustix::io::Errno::OPNOTSUPP);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn it_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Mmap>();
        // Buffer mappings are, through their Mmap (before it they were neither).
        both::<crate::Mapping<'static>>();
        let fd = memfd(4096);
        let mut m = shared_rw(fd.as_fd(), 0, 4096).unwrap();
        m.write_at(0, b"t").unwrap();
        let m = std::thread::spawn(move || {
            let mut b = [0u8];
            m.read_at(0, &mut b).unwrap();
            assert_eq!(&b, b"t");
            m
        })
        .join()
        .unwrap();
        drop(m);
    }
}
