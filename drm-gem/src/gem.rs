//! GEM objects: per-open-file handles, owned and closed exactly once.

use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::{AsFd, BorrowedFd};

crate::id::nonzero_id!(
    /// A GEM handle: a name in one open file's namespace (not device-wide, unlike KMS ids).
    GemHandle
);

crate::id::nonzero_id!(
    /// A global GEM name (flink): visible to every open file of the device, unlike a handle.
    GemName
);

/// Owner counts of the GEM handles of one open file. The kernel hands out small
/// consecutive handles (an idr starting at 1), so counts live in a vector indexed by handle;
/// the rare handle above `DENSE` goes to a map. No hashing on the create/close path.
#[derive(Debug, Default)]
pub(crate) struct HandleTable {
    dense: Vec<u32>,
    sparse: std::collections::HashMap<u32, u32>,
    live: usize,
}

impl HandleTable {
    /// Handles below this are counted in the vector (64 KiB of counts at most).
    const DENSE: u32 = 1 << 14;

    /// The count of `h`, made (zero) if it has none yet. Out of line: the dense slot that
    /// exists already is [`acquire`](Self::acquire)'s inlined fast path.
    #[cold]
    #[inline(never)]
    fn slot(&mut self, h: u32) -> &mut u32 {
        if h < Self::DENSE {
            let i = h as usize;
            if i >= self.dense.len() {
                self.dense.resize((i + 1).next_power_of_two().max(64), 0);
            }
            &mut self.dense[i]
        } else {
            self.sparse.entry(h).or_insert(0)
        }
    }

    /// Adds one owner of `h`; returns the new count.
    #[inline]
    pub(crate) fn acquire(&mut self, h: u32) -> u32 {
        let n = match self.dense.get_mut(h as usize) {
            Some(n) if h < Self::DENSE => n,
            _ => self.slot(h),
        };
        *n += 1;
        let v = *n;
        if v == 1 {
            self.live += 1;
        }
        v
    }

    /// Removes one owner of `h` (nothing if it has none); returns how many are left.
    #[inline]
    pub(crate) fn release(&mut self, h: u32) -> u32 {
        let left = match self.dense.get_mut(h as usize) {
            Some(n) if h < Self::DENSE => {
                if *n == 0 {
                    return 0;
                }
                *n -= 1;
                *n
            }
            _ => return self.release_sparse(h),
        };
        if left == 0 {
            self.live -= 1;
        }
        left
    }

    /// [`release`](Self::release) of a handle outside the dense vector.
    #[cold]
    #[inline(never)]
    fn release_sparse(&mut self, h: u32) -> u32 {
        if h < Self::DENSE {
            // Below DENSE but past the vector: never acquired.
            return 0;
        }
        match self.sparse.get_mut(&h) {
            Some(n) => {
                *n -= 1;
                let v = *n;
                if v == 0 {
                    self.sparse.remove(&h);
                    self.live -= 1;
                }
                v
            }
            None => 0,
        }
    }

    /// How many owners `h` has.
    pub(crate) fn owners(&self, h: u32) -> u32 {
        if h < Self::DENSE {
            self.dense.get(h as usize).copied().unwrap_or(0)
        } else {
            self.sparse.get(&h).copied().unwrap_or(0)
        }
    }

    /// How many distinct handles have owners.
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

/// How the last owner releases a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// `DRM_IOCTL_GEM_CLOSE`.
    Close,
    /// `DRM_IOCTL_MODE_DESTROY_DUMB` (dumb buffers).
    DestroyDumb,
    /// Nothing: ownership was given up ([`GemObject::into_raw`]).
    Disowned,
}

/// A GEM object owned by this process on one [`Device`]; its handle is released when the
/// last owner is dropped.
///
/// Owners are counted per device: importing the same dma-buf twice yields two
/// `GemObject`s with the same handle, and the handle is closed once, after both are gone.
///
/// `D` is how the object reaches its device ([`DeviceRef`]): `&Device` (what
/// [`Device::import`] and the other `Device` methods give) or `Arc<Device>` (through
/// [`GemObject::import`] and the other constructors that take the device by value).
#[derive(Debug)]
pub struct GemObject<D: DeviceRef> {
    dev: D,
    handle: GemHandle,
    release: Release,
}

impl<D: DeviceRef> GemObject<D> {
    /// Takes one ownership of `raw`, a handle the ioctl `ioctl` just created on `dev` (a new number:
    /// creation ioctls never answer with a handle the file already has). Ioctls that can
    /// answer with an existing handle count their owner inside [`Device::with_handles`] and
    /// then use [`GemObject::acquired`].
    #[inline]
    pub(crate) fn adopt(dev: D, ioctl: &'static str, raw: u32, release: Release) -> Result<Self> {
        let handle = nonzero_handle(ioctl, raw)?;
        dev.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .acquire(handle.get());
        Ok(Self::acquired(dev, handle, release))
    }

    /// The owner of `handle`, whose ownership was already counted in the device's handle
    /// table (`HandleTable::acquire` under the lock, around the ioctl that returned it).
    #[inline]
    pub(crate) fn acquired(dev: D, handle: GemHandle, release: Release) -> Self {
        Self {
            dev,
            handle,
            release,
        }
    }

    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE` on `dev`; [`Device::import`] for any [`DeviceRef`].
    #[inline]
    pub fn import(dev: D, buf: BorrowedFd<'_>) -> Result<Self> {
        let handle = dev.import_counted(buf)?;
        Ok(Self::acquired(dev, handle, Release::Close))
    }

    /// `DRM_IOCTL_GEM_OPEN` on `dev`; [`Device::open_name`] for any [`DeviceRef`].
    pub fn open_name(dev: D, name: GemName) -> Result<(Self, u64)> {
        let (handle, size) = dev.open_name_counted(name)?;
        Ok((Self::acquired(dev, handle, Release::Close), size))
    }

    /// The handle, for building ioctl arguments. Does not transfer ownership.
    pub fn handle(&self) -> GemHandle {
        self.handle
    }

    /// The device whose open file the handle belongs to.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// How this object holds its device (the `&Device` or `Arc<Device>` it was made with).
    pub fn device_ref(&self) -> &D {
        &self.dev
    }

    /// How many owners (in this process, on this device) share the handle.
    pub fn owners(&self) -> u32 {
        let t = self.dev.handles.lock().unwrap_or_else(|p| p.into_inner());
        t.owners(self.handle.get())
    }

    /// `DRM_IOCTL_GEM_FLINK`: a global name others can open with [`Device::open_name`]. The
    /// name lives as long as the object. Primary nodes only (render nodes answer EACCES).
    pub fn flink(&self) -> Result<GemName> {
        let mut a = sys::drm_gem_flink {
            handle: self.handle.get(),
            name: 0,
        };
        sys_call::gem_flink(self.dev.as_fd(), &mut a)?;
        GemName::new(a.name).ok_or(Error::BadReply {
            ioctl: "DRM_IOCTL_GEM_FLINK",
            what: "GEM name 0",
        })
    }

    /// Maps the first `len` bytes of the object through its fake offset
    /// (`DRM_IOCTL_MODE_MAP_DUMB`), which drivers with dumb-buffer support give for their
    /// own GEM objects however the handle was obtained (create, `GETFB2`, `GEM_OPEN`). The
    /// kernel refuses imported objects (EINVAL: map the dma-buf instead) and mappings
    /// larger than the object.
    pub fn map(&mut self, len: usize) -> Result<crate::Mapping<'_>> {
        let mut a = sys::drm_mode_map_dumb {
            handle: self.handle.get(),
            ..Default::default()
        };
        sys_call::mode_map_dumb(self.dev.as_fd(), &mut a)?;
        crate::Mapping::new(self.dev.as_fd(), a.offset, len)
    }

    /// Gives up this ownership without releasing the handle (cf. `OwnedFd::into_raw_fd`);
    /// the caller becomes responsible for closing it.
    pub fn into_raw(mut self) -> GemHandle {
        let h = self.handle;
        self.dev
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(h.get());
        // Dropped normally (an `Arc<Device>` is released), but without touching the handle.
        self.release = Release::Disowned;
        h
    }
}

impl<D: DeviceRef> GemObject<D> {
    /// Counts a failed release ioctl of `Drop` on the device (out of line: a failure is
    /// rare, ENODEV after the driver is unbound).
    #[cold]
    #[inline(never)]
    fn release_failed(&self, e: Error) {
        let call = match self.release {
            Release::Close => "DRM_IOCTL_GEM_CLOSE",
            _ => "DRM_IOCTL_MODE_DESTROY_DUMB",
        };
        self.dev.releases.check(call, Err(e));
    }
}

impl<D: DeviceRef> Drop for GemObject<D> {
    #[inline]
    fn drop(&mut self) {
        if self.release == Release::Disowned {
            return;
        }
        let raw = self.handle.get();
        // The lock is held across the release ioctl: an import that answers with this number
        // (Device::with_handles) must not adopt it between the count reaching 0 and the close.
        let mut handles = self.dev.handles.lock().unwrap_or_else(|p| p.into_inner());
        if handles.release(raw) > 0 {
            return;
        }
        // Drop cannot return an error and never panics: a failure (ENODEV after the driver
        // is unbound) is counted on the device. The type system rules out a double close.
        let fd = self.dev.as_fd();
        let r = match self.release {
            Release::Close => sys_call::gem_close(
                fd,
                &mut sys::drm_gem_close {
                    handle: raw,
                    pad: 0,
                },
            ),
            Release::DestroyDumb => {
                sys_call::mode_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: raw })
            }
            Release::Disowned => return,
        };
        drop(handles);
        if let Err(e) = r {
            self.release_failed(e);
        }
    }
}

/// `raw` as a handle; the kernel never returns handle 0 for an object, so 0 from `ioctl`
/// is [`Error::BadReply`].
#[inline]
pub(crate) fn nonzero_handle(ioctl: &'static str, raw: u32) -> Result<GemHandle> {
    GemHandle::new(raw).ok_or(Error::BadReply {
        ioctl,
        what: "GEM handle 0",
    })
}

impl Device {
    /// Runs `f` with this device's GEM handle table locked: for an ioctl whose answer may
    /// be a handle this open file already has (PRIME import, `GEM_OPEN`, `GETFB2`), which
    /// must run and count its owner (`HandleTable::acquire`) before a last owner elsewhere can
    /// close the number. `f` must not drop a [`GemObject`] of this device (that locks too).
    #[inline]
    pub(crate) fn with_handles<T>(
        &self,
        f: impl FnOnce(&mut HandleTable) -> Result<T>,
    ) -> Result<T> {
        let mut t = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut t)
    }

    /// `DRM_IOCTL_GEM_CLOSE` of a handle nobody owns any more: one given up with
    /// [`GemObject::into_raw`], or received from elsewhere on this open file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing closed) while a [`GemObject`] still owns the
    /// handle; EINVAL from the kernel for a handle this open file does not have.
    pub fn close_handle(&self, handle: GemHandle) -> Result<()> {
        let t = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if t.owners(handle.get()) > 0 {
            return Err(Error::InvalidArgument {
                what: format!(
                    "GEM handle {} is still owned by a GemObject; drop it instead",
                    handle.get()
                ),
            });
        }
        let mut a = sys::drm_gem_close {
            handle: handle.get(),
            pad: 0,
        };
        // Closed under the lock, so that no import can hand the same number out to an
        // owner between the check and the close.
        sys_call::gem_close(self.as_fd(), &mut a)
    }

    /// `DRM_IOCTL_GEM_OPEN`: opens a flinked object by name; returns it and its size.
    pub fn open_name(&self, name: GemName) -> Result<(GemObject<&Device>, u64)> {
        GemObject::open_name(self, name)
    }

    /// GEM_OPEN with its new owner counted under the handle lock.
    fn open_name_counted(&self, name: GemName) -> Result<(GemHandle, u64)> {
        let mut a = sys::drm_gem_open {
            name: name.get(),
            handle: 0,
            size: 0,
        };
        // GEM_OPEN makes a new handle today, but under the lock like every ioctl that hands
        // a number to an owner of an object that may already have one here.
        self.with_handles(|t| {
            sys_call::gem_open(self.as_fd(), &mut a)?;
            let h = nonzero_handle("DRM_IOCTL_GEM_OPEN", a.handle)?;
            t.acquire(h.get());
            Ok((h, a.size))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_table_counts_owners_dense_and_sparse() {
        let mut t = HandleTable::default();
        for h in [1, 2, 70_000] {
            assert_eq!(t.acquire(h), 1);
        }
        assert_eq!(t.acquire(2), 2);
        assert_eq!(t.acquire(70_000), 2);
        assert_eq!(t.len(), 3);
        assert_eq!((t.owners(2), t.owners(70_000), t.owners(3)), (2, 2, 0));
        assert_eq!(t.release(2), 1);
        assert_eq!(t.release(2), 0);
        assert_eq!(
            t.release(2),
            0,
            "releasing an unowned handle changes nothing"
        );
        assert_eq!(t.release(70_000), 1);
        assert_eq!(t.release(70_000), 0);
        assert_eq!(t.release(99_999), 0);
        assert_eq!(t.len(), 1);
        assert_eq!(t.release(1), 0);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn handle_zero_is_none() {
        assert!(GemHandle::new(0).is_none());
        assert_eq!(GemHandle::new(7).map(GemHandle::get), Some(7));
        assert_eq!(
            core::mem::size_of::<Option<GemHandle>>(),
            core::mem::size_of::<u32>()
        );
        assert_eq!(format!("{:?}", GemHandle::new(3).unwrap()), "GemHandle(3)");
    }
}
