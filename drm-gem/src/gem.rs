//! GEM objects: per-open-file handles, owned and closed exactly once.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call;
use core::num::NonZeroU32;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// A GEM handle: a name in one open file's namespace (not device-wide, unlike KMS ids).
#[repr(transparent)]
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GemHandle(NonZeroU32);

impl GemHandle {
    /// Wraps a raw handle; `None` for 0, which the kernel never hands out.
    pub const fn new(raw: u32) -> Option<Self> {
        match NonZeroU32::new(raw) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The raw handle.
    pub const fn get(self) -> u32 {
        self.0.get()
    }
}

impl core::fmt::Debug for GemHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GemHandle({})", self.get())
    }
}

/// A global GEM name (flink): visible to every open file of the device, unlike a handle.
#[repr(transparent)]
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct GemName(NonZeroU32);

impl GemName {
    /// Wraps a raw name; `None` for 0.
    pub const fn new(raw: u32) -> Option<Self> {
        match NonZeroU32::new(raw) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The raw name.
    pub const fn get(self) -> u32 {
        self.0.get()
    }
}

/// How the last owner releases a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// `DRM_IOCTL_GEM_CLOSE`.
    Close,
    /// `DRM_IOCTL_MODE_DESTROY_DUMB` (dumb buffers).
    DestroyDumb,
}

/// A GEM object owned by this process on one [`Device`]; its handle is released when the
/// last owner is dropped.
///
/// Owners are counted per device: importing the same dma-buf twice yields two
/// `GemObject`s with the same handle, and the handle is closed once, after both are gone.
#[derive(Debug)]
pub struct GemObject<'d> {
    dev: &'d Device,
    handle: GemHandle,
    release: Release,
}

impl<'d> GemObject<'d> {
    /// Takes one ownership of `raw`, a handle the kernel just returned on `dev`.
    pub(crate) fn adopt(dev: &'d Device, raw: u32, release: Release) -> Result<Self> {
        let handle = GemHandle::new(raw).ok_or(Error::NotDrm {
            why: "the kernel returned GEM handle 0".into(),
        })?;
        let mut t = dev.handles.lock().unwrap_or_else(|p| p.into_inner());
        *t.entry(raw).or_insert(0) += 1;
        Ok(Self {
            dev,
            handle,
            release,
        })
    }

    /// The handle, for building ioctl arguments. Does not transfer ownership.
    pub fn handle(&self) -> GemHandle {
        self.handle
    }

    /// The device whose open file the handle belongs to.
    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// How many owners (in this process, on this device) share the handle.
    pub fn owners(&self) -> u32 {
        let t = self.dev.handles.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&self.handle.get()).copied().unwrap_or(0)
    }

    /// `DRM_IOCTL_GEM_FLINK`: a global name others can open with [`Device::open_name`]. The
    /// name lives as long as the object. Primary nodes only (render nodes answer EACCES).
    pub fn flink(&self) -> Result<GemName> {
        let mut a = sys::drm_gem_flink {
            handle: self.handle.get(),
            name: 0,
        };
        sys_call::gem_flink(self.dev.as_fd(), &mut a)?;
        GemName::new(a.name).ok_or(Error::NotDrm {
            why: "the kernel returned GEM name 0".into(),
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
    pub fn into_raw(self) -> GemHandle {
        let h = self.handle;
        {
            let mut t = self.dev.handles.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = t.get_mut(&h.get()) {
                *n -= 1;
                if *n == 0 {
                    t.remove(&h.get());
                }
            }
        }
        core::mem::forget(self);
        h
    }
}

impl Drop for GemObject<'_> {
    fn drop(&mut self) {
        let raw = self.handle.get();
        let last = {
            let mut t = self.dev.handles.lock().unwrap_or_else(|p| p.into_inner());
            match t.get_mut(&raw) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    t.remove(&raw);
                    true
                }
            }
        };
        if !last {
            return;
        }
        // Errors are ignored: the only way to report them from Drop is a panic (memmap2
        // makes the same choice for munmap). The type system rules out a double close.
        let r = match self.release {
            Release::Close => {
                let mut a = sys::drm_gem_close {
                    handle: raw,
                    pad: 0,
                };
                sys_call::gem_close(self.dev.as_fd(), &mut a)
            }
            Release::DestroyDumb => {
                let mut a = sys::drm_mode_destroy_dumb { handle: raw };
                sys_call::mode_destroy_dumb(self.dev.as_fd(), &mut a)
            }
        };
        debug_assert!(r.is_ok(), "releasing GEM handle {raw} failed: {r:?}");
    }
}

impl Device {
    /// `DRM_IOCTL_GEM_CLOSE` of a handle nobody owns any more: one given up with
    /// [`GemObject::into_raw`], or received from elsewhere on this open file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing closed) while a [`GemObject`] still owns the
    /// handle; EINVAL from the kernel for a handle this open file does not have.
    pub fn close_handle(&self, handle: GemHandle) -> Result<()> {
        let t = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if t.contains_key(&handle.get()) {
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
    pub fn open_name(&self, name: GemName) -> Result<(GemObject<'_>, u64)> {
        let mut a = sys::drm_gem_open {
            name: name.get(),
            handle: 0,
            size: 0,
        };
        sys_call::gem_open(self.as_fd(), &mut a)?;
        Ok((GemObject::adopt(self, a.handle, Release::Close)?, a.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
