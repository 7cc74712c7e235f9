//! Dumb buffers: CPU-mappable scan-out buffers every KMS driver offers (and vgem).

use crate::device::DeviceRef;
use crate::error::{Error, Result};
use crate::gem::{GemHandle, GemObject, Release};
use crate::mapping::Mapping;
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// What to create: width and height in pixels, bits per pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumbSpec {
    /// Width in pixels (> 0).
    pub width: u32,
    /// Height in pixels (> 0).
    pub height: u32,
    /// Bits per pixel: 8, 16, 24 or 32.
    pub bpp: u32,
}

impl DumbSpec {
    /// `width` x `height` pixels of `bpp` bits.
    pub const fn new(width: u32, height: u32, bpp: u32) -> Self {
        Self { width, height, bpp }
    }

    /// Checks the spec the way `drm_mode_create_dumb` does (non-zero sizes, a bytes-per-pixel
    /// count, `width * cpp * height` within `u32`), plus the bpp values the toolkit supports,
    /// so bad input never reaches the kernel. Returns the minimum pitch and size.
    #[inline]
    pub fn validate(&self) -> Result<(u32, u64)> {
        match self.checked() {
            Some(v) => Ok(v),
            None => Err(self.invalid()),
        }
    }

    /// The minimum pitch and size of a valid spec; `None` for an invalid one. The checks
    /// inline into [`DumbBuffer::create`]; the messages are built out of line
    /// ([`invalid`](Self::invalid)).
    #[inline]
    fn checked(&self) -> Option<(u32, u64)> {
        if self.width == 0 || self.height == 0 || !matches!(self.bpp, 8 | 16 | 24 | 32) {
            return None;
        }
        let pitch = self.width.checked_mul(self.bpp / 8)?;
        let size = pitch.checked_mul(self.height)?;
        Some((pitch, u64::from(size)))
    }

    /// Why [`checked`](Self::checked) refused the spec.
    #[cold]
    #[inline(never)]
    fn invalid(&self) -> Error {
        let what = if self.width == 0 || self.height == 0 {
            format!(
                "dumb buffer {}x{}: width and height must be > 0",
                self.width, self.height
            )
        } else if !matches!(self.bpp, 8 | 16 | 24 | 32) {
            format!("dumb buffer bpp {}: use 8, 16, 24 or 32", self.bpp)
        } else {
            let cpp = self.bpp.div_ceil(8);
            match self.width.checked_mul(cpp) {
                None => format!(
                    "dumb buffer width {} x {cpp} bytes overflows u32",
                    self.width
                ),
                Some(pitch) => format!(
                    "dumb buffer {pitch} bytes x {} rows overflows u32",
                    self.height
                ),
            }
        };
        Error::InvalidArgument { what }
    }
}

/// A dumb buffer on one device; destroyed (`DRM_IOCTL_MODE_DESTROY_DUMB`) when the last
/// owner of its handle is dropped.
#[derive(Debug)]
pub struct DumbBuffer<D: DeviceRef> {
    obj: GemObject<D>,
    spec: DumbSpec,
    pitch: u32,
    size: u64,
}

impl<D: DeviceRef> DumbBuffer<D> {
    /// `DRM_IOCTL_MODE_CREATE_DUMB` after [`DumbSpec::validate`]. Pitch and size are what the
    /// kernel reports (drivers align them).
    /// `dev` is `&Device` or `Arc<Device>` ([`DeviceRef`]).
    #[inline]
    pub fn create(dev: D, spec: DumbSpec) -> Result<Self> {
        spec.validate()?;
        let mut a = sys::drm_mode_create_dumb {
            height: spec.height,
            width: spec.width,
            bpp: spec.bpp,
            ..Default::default()
        };
        sys_call::mode_create_dumb(dev.as_fd(), &mut a)?;
        let obj = GemObject::adopt(
            dev,
            "DRM_IOCTL_MODE_CREATE_DUMB",
            a.handle,
            Release::DestroyDumb,
        )?;
        Ok(Self {
            obj,
            spec,
            pitch: a.pitch,
            size: a.size,
        })
    }

    /// The handle.
    pub fn handle(&self) -> GemHandle {
        self.obj.handle()
    }

    /// The underlying GEM object (for PRIME export).
    pub fn gem(&self) -> &GemObject<D> {
        &self.obj
    }

    /// Gives up ownership without destroying the buffer (cf. `OwnedFd::into_raw_fd`): the
    /// caller must release the handle, e.g. with [`Device::close_handle`](crate::Device::close_handle).
    pub fn into_raw(self) -> GemHandle {
        self.obj.into_raw()
    }

    /// What it was created with.
    pub fn spec(&self) -> DumbSpec {
        self.spec
    }

    /// Bytes per row, as the kernel chose.
    pub fn pitch(&self) -> u32 {
        self.pitch
    }

    /// Size in bytes, as the kernel chose.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `DRM_IOCTL_MODE_MAP_DUMB`: the fake offset to mmap the device fd at.
    #[inline]
    pub fn map_offset(&self) -> Result<u64> {
        let mut a = sys::drm_mode_map_dumb {
            handle: self.handle().get(),
            ..Default::default()
        };
        sys_call::mode_map_dumb(self.obj.device().as_fd(), &mut a)?;
        Ok(a.offset)
    }

    /// Maps the whole buffer read/write. The mapping borrows the buffer mutably, so the
    /// buffer can be neither dropped nor mapped twice while it exists.
    #[inline]
    pub fn map(&mut self) -> Result<Mapping<'_>> {
        let offset = self.map_offset()?;
        let len = usize::try_from(self.size).map_err(|_| Error::InvalidArgument {
            what: format!("dumb buffer of {} bytes does not fit in memory", self.size),
        })?;
        Mapping::new(self.obj.device().as_fd(), offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(width: u32, height: u32, bpp: u32) -> DumbSpec {
        DumbSpec { width, height, bpp }
    }

    #[test]
    fn validation() {
        assert_eq!(spec(64, 32, 32).validate().unwrap(), (256, 8192));
        assert_eq!(spec(3, 2, 24).validate().unwrap(), (9, 18));
        assert_eq!(spec(1, 1, 8).validate().unwrap(), (1, 1));
        for bad in [
            spec(0, 1, 32),
            spec(1, 0, 32),
            spec(1, 1, 0),
            spec(1, 1, 12),
            spec(1, 1, 64),
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidArgument { .. })),
                "{bad:?}"
            );
        }
        assert!(
            spec(u32::MAX / 2, 1, 32)
                .validate()
                .unwrap_err()
                .to_string()
                .contains("overflows")
        );
        assert!(
            spec(65536, 65536, 32)
                .validate()
                .unwrap_err()
                .to_string()
                .contains("overflows")
        );
    }
}
