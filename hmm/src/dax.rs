//! DAX mappings: files on a DAX filesystem (fsdax) mapped with `MAP_SYNC`, and device-DAX
//! character devices (devdax) mapped at their alignment.

use crate::persist::{PersistMethod, flush_instruction};
use drm_gem::{Errno, Error, Mmap, MmapOptions, Prot, Result, Sharing};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use std::path::{Path, PathBuf};

/// An open device-DAX character device (`/dev/daxN.M`), with the size and alignment sysfs
/// reports for it.
#[derive(Debug)]
pub struct DevDax {
    fd: OwnedFd,
    path: PathBuf,
    size: u64,
    align: u64,
}

impl DevDax {
    /// Opens a devdax node read-write (close-on-exec). `NotFound` when it is not a
    /// character device of the dax bus.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let fd = crate::sys_call::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|errno| Error::Open {
                path: path.to_path_buf(),
                errno,
            })?;
        let st = rustix::fs::fstat(&fd).map_err(|errno| Error::Syscall {
            name: "fstat",
            errno,
        })?;
        if FileType::from_raw_mode(st.st_mode) != FileType::CharacterDevice {
            return Err(Error::NotFound {
                what: format!("{} is not a character device", path.display()),
            });
        }
        let (ma, mi) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        let sys = PathBuf::from(format!("/sys/dev/char/{ma}:{mi}"));
        let num = |f: &str| -> Option<u64> {
            std::fs::read_to_string(sys.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let (Some(size), Some(align)) = (num("size"), num("align")) else {
            return Err(Error::NotFound {
                what: format!(
                    "{} ({ma}:{mi}) has no dax size/align in {}: not a devdax device",
                    path.display(),
                    sys.display()
                ),
            });
        };
        Ok(Self {
            fd,
            path: path.to_path_buf(),
            size,
            align,
        })
    }

    /// The node it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Mapping alignment: offsets and lengths of mappings must be multiples of it (the
    /// kernel answers EINVAL otherwise).
    pub fn align(&self) -> u64 {
        self.align
    }
}

impl AsFd for DevDax {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a [`DaxMapping`] maps, which decides how [`DaxMapping::persist`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaxKind {
    /// An fsdax file mapped `MAP_SHARED_VALIDATE | MAP_SYNC`.
    FsdaxSync,
    /// An fsdax (or any) file mapped plain `MAP_SHARED`: persist needs `msync`.
    FileShared,
    /// A devdax character device.
    Devdax,
}

/// A shared read-write mapping of persistent memory; unmapped on drop.
///
/// The safe API copies in and out (the memory can be written by a device or another
/// process, so no Rust reference to it is handed out) and [`persist`](Self::persist)s
/// ranges. The mapping keeps the file open; truncating the file below the mapping while
/// it exists makes accesses fault (SIGBUS), as for any file mapping, and so does a write
/// into a hole of an fsdax file when the filesystem has no free block left (the write
/// fault cannot allocate one): `fallocate` the file first where that matters.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let f = std::fs::OpenOptions::new().read(true).write(true).open("/mnt/pmem/log")?;
/// let mut m = hmm::DaxMapping::map_file(&f, 0, 4096)?; // EOPNOTSUPP unless DAX
/// m.write_at(0, b"record")?;
/// m.persist(0, 6)?; // durable when this returns (see hmm::persist)
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DaxMapping {
    map: Mmap,
    kind: DaxKind,
    offset: u64,
}

fn file_size(fd: BorrowedFd<'_>) -> Result<u64> {
    let st = rustix::fs::fstat(fd).map_err(|errno| Error::Syscall {
        name: "fstat",
        errno,
    })?;
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

/// A shared read-write mapping whose failed `munmap` (in `Drop`) counts in
/// [`crate::release_failures`].
fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, options: MmapOptions) -> Result<Mmap> {
    let rw = Prot::READ | Prot::WRITE;
    Ok(Mmap::map(fd, offset, len, rw, Sharing::Shared, options)?
        .record_release_failures_in(crate::release_counter()))
}

fn check_range(what: &str, offset: u64, len: usize, size: u64) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument {
            what: "cannot map 0 bytes".into(),
        });
    }
    let end = offset.checked_add(len as u64);
    if end.is_none_or(|e| e > size) {
        return Err(Error::InvalidArgument {
            what: format!("{len} bytes at offset {offset} exceed the {size} bytes of {what}"),
        });
    }
    Ok(())
}

impl DaxMapping {
    /// Maps `len` bytes of an fsdax file at `offset` with `MAP_SHARED_VALIDATE | MAP_SYNC`
    /// (since Linux 4.15), so write faults commit filesystem metadata before returning and
    /// [`persist`](Self::persist) only has to flush CPU caches.
    ///
    /// The range must lie inside the file (extend it first with `set_len`; `InvalidArgument`
    /// otherwise, because touching pages past the end would fault). Where the file is not
    /// DAX (another filesystem, a filesystem mounted without `-o dax`, or a kernel without
    /// MAP_SYNC) the kernel refuses: `Error::Syscall { name:
    /// "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)", errno: EOPNOTSUPP }`, for which
    /// [`Error::is_not_supported`] is true; [`is_not_dax`] names that case.
    pub fn map_file(file: &impl AsFd, offset: u64, len: usize) -> Result<Self> {
        Self::file(
            file.as_fd(),
            offset,
            len,
            MmapOptions::SYNC,
            DaxKind::FsdaxSync,
        )
    }

    /// Maps a file plain `MAP_SHARED` (any file, DAX or not): [`persist`](Self::persist)
    /// then uses `msync`. For comparison with [`map_file`](Self::map_file) and for files
    /// that cannot be DAX.
    pub fn map_file_without_sync(file: &impl AsFd, offset: u64, len: usize) -> Result<Self> {
        Self::file(
            file.as_fd(),
            offset,
            len,
            MmapOptions::empty(),
            DaxKind::FileShared,
        )
    }

    fn file(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        how: MmapOptions,
        kind: DaxKind,
    ) -> Result<Self> {
        check_range("the file", offset, len, file_size(fd)?)?;
        Ok(Self {
            map: map(fd, offset, len, how)?,
            kind,
            offset,
        })
    }

    /// Maps `len` bytes of a devdax device at `offset`. Both must be multiples of
    /// [`DevDax::align`], which this checks before the kernel is asked
    /// ([`Error::InvalidArgument`]): the kernel itself checks only that the mapping's
    /// address and end are aligned (`EINVAL` otherwise), so a misaligned offset with an
    /// aligned length is refused only when the address it picks happens to be misaligned
    /// (one time in 512 with 2 MiB alignment it is not, and the mapping succeeds).
    pub fn map_devdax(dev: &DevDax, offset: u64, len: usize) -> Result<Self> {
        check_range(&dev.path.display().to_string(), offset, len, dev.size)?;
        if !offset.is_multiple_of(dev.align) || !(len as u64).is_multiple_of(dev.align) {
            return Err(Error::InvalidArgument {
                what: format!(
                    "devdax {}: offset {offset:#x} and length {len:#x} must be multiples of its \
                     alignment {:#x}",
                    dev.path.display(),
                    dev.align
                ),
            });
        }
        Ok(Self {
            map: map(dev.as_fd(), offset, len, MmapOptions::empty())?,
            kind: DaxKind::Devdax,
            offset,
        })
    }

    /// What is mapped.
    pub fn kind(&self) -> DaxKind {
        self.kind
    }

    /// Offset of the mapping in its file or device.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The mapping's address in this process (for reports; see also
    /// [`HostRegistration`](crate::HostRegistration)).
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Copies `src` into the mapping at `offset` (not yet durable: see
    /// [`persist`](Self::persist)).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.map.write_at(offset, src)
    }

    /// Copies from the mapping at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.map.read_at(offset, dst)
    }

    /// Makes `offset..offset + len` durable; the guarantee, and when it holds, is in
    /// [`crate::persist`]. Returns how it was done: a user-space cache flush for `MAP_SYNC`
    /// and devdax mappings on x86-64, else `msync(MS_SYNC)`.
    pub fn persist(&self, offset: usize, len: usize) -> Result<PersistMethod> {
        let flush = match (self.kind, flush_instruction()) {
            (DaxKind::FsdaxSync | DaxKind::Devdax, Some(i)) => Some(i),
            _ => None,
        };
        match flush {
            Some(i) => {
                self.map.check_range(offset, len)?;
                crate::sys_call::flush(&self.map, offset, len);
                Ok(PersistMethod::CacheFlush(i))
            }
            None => {
                self.map.msync(offset, len)?;
                Ok(PersistMethod::Msync)
            }
        }
    }

    /// [`persist`](Self::persist) of the whole mapping.
    pub fn persist_all(&self) -> Result<PersistMethod> {
        self.persist(0, self.len())
    }

    /// Whether a long-term pin of these pages (`FOLL_LONGTERM`: RDMA registration, VFIO,
    /// io_uring fixed buffers, GPU host registration) can work. The kernel refuses such
    /// pins of fsdax pages (`EOPNOTSUPP` from `pin_user_pages`), because the filesystem
    /// must be free to move or free a file's blocks (truncate, hole punch, reflink) and a
    /// device holding a pin would keep writing to blocks the file no longer owns. Devdax
    /// pages have no filesystem and can be pinned. The error explains this instead of
    /// leaving the caller with a bare EOPNOTSUPP from the driver.
    pub fn check_longterm_pin(&self) -> Result<()> {
        match self.kind {
            DaxKind::Devdax => Ok(()),
            DaxKind::FsdaxSync | DaxKind::FileShared => Err(Error::Unsupported {
                feature: "long-term pin of file-backed DAX pages",
                reason: "the kernel refuses FOLL_LONGTERM pins of fsdax pages (EOPNOTSUPP), \
                         because the filesystem may move or free the blocks under the pin; \
                         use a devdax namespace, or a short-term mapping (mlock, dmirror)"
                    .into(),
                errno: None,
            }),
        }
    }

    /// The owned mapping underneath (its address, protection and flags).
    pub fn mmap(&self) -> &Mmap {
        &self.map
    }
}

/// True when `e` is the kernel's refusal of `MAP_SYNC` because the file is not DAX
/// (`EOPNOTSUPP` from [`DaxMapping::map_file`]).
pub fn is_not_dax(e: &Error) -> bool {
    matches!(e, Error::Syscall { name, errno }
        if name.contains("MAP_SYNC") && *errno == Errno::OPNOTSUPP)
}
