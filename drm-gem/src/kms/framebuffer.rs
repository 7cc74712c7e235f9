//! Framebuffers: a layout (format, size, up to four planes) over GEM objects.

use crate::device::{Device, DeviceRef};
use crate::dumb::DumbBuffer;
use crate::error::{Error, Result};
use crate::gem::{GemHandle, GemObject, Release};
use crate::sys_call;
use drm_fourcc::DrmFourcc;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

crate::id::nonzero_id!(
    /// A framebuffer id: a device-wide KMS object id (unlike GEM handles).
    FramebufferId
);

/// One plane of a framebuffer being created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FbPlane {
    /// The GEM object holding the plane's pixels.
    pub handle: GemHandle,
    /// Bytes per row.
    pub pitch: u32,
    /// Byte offset of the plane in the object.
    pub offset: u32,
}

/// What `DRM_IOCTL_MODE_ADDFB2` is asked to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FbSpec {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The pixel format.
    pub format: DrmFourcc,
    /// Format modifier for every plane (sets `DRM_MODE_FB_MODIFIERS`); `None` = implicit.
    pub modifier: Option<u64>,
    /// One to four planes, in format order.
    pub planes: Vec<FbPlane>,
}

impl FbSpec {
    /// A single-plane framebuffer of `format` over one object.
    pub fn single(
        width: u32,
        height: u32,
        format: DrmFourcc,
        handle: GemHandle,
        pitch: u32,
    ) -> Self {
        Self {
            width,
            height,
            format,
            modifier: None,
            planes: vec![FbPlane {
                handle,
                pitch,
                offset: 0,
            }],
        }
    }

    /// A single-plane framebuffer of `format` covering the whole dumb buffer `buf` (its
    /// size and the pitch the kernel chose).
    pub fn for_dumb<D: DeviceRef>(buf: &DumbBuffer<D>, format: DrmFourcc) -> Self {
        let s = buf.spec();
        Self::single(s.width, s.height, format, buf.handle(), buf.pitch())
    }

    fn to_raw(&self) -> Result<sys::drm_mode_fb_cmd2> {
        if self.planes.is_empty() || self.planes.len() > 4 {
            return Err(Error::InvalidArgument {
                what: format!("a framebuffer has 1 to 4 planes, not {}", self.planes.len()),
            });
        }
        let mut a = sys::drm_mode_fb_cmd2 {
            width: self.width,
            height: self.height,
            pixel_format: self.format as u32,
            ..Default::default()
        };
        for (i, p) in self.planes.iter().enumerate() {
            a.handles[i] = p.handle.get();
            a.pitches[i] = p.pitch;
            a.offsets[i] = p.offset;
            if let Some(m) = self.modifier {
                a.modifier[i] = m;
            }
        }
        if self.modifier.is_some() {
            a.flags |= sys::DRM_MODE_FB_MODIFIERS;
        }
        Ok(a)
    }
}

/// A framebuffer this process added; removed (`DRM_IOCTL_MODE_RMFB`) on drop, which also
/// turns off any plane still showing it. `D` is `&Device` or `Arc<Device>` ([`DeviceRef`]).
#[derive(Debug)]
pub struct Framebuffer<D: DeviceRef> {
    dev: D,
    id: FramebufferId,
    /// False after [`Framebuffer::into_raw`]: the drop removes nothing.
    owned: bool,
}

impl<D: DeviceRef> Framebuffer<D> {
    /// `DRM_IOCTL_MODE_ADDFB2` on `dev`; [`Device::add_framebuffer`] for any [`DeviceRef`].
    pub fn add(dev: D, spec: &FbSpec) -> Result<Self> {
        let mut a = spec.to_raw()?;
        sys_call::mode_addfb2(dev.as_fd(), &mut a)?;
        let id = FramebufferId::new(a.fb_id).ok_or(Error::BadReply {
            ioctl: "DRM_IOCTL_MODE_ADDFB2",
            what: "framebuffer id 0",
        })?;
        Ok(Self {
            dev,
            id,
            owned: true,
        })
    }

    /// The framebuffer's id.
    pub fn id(&self) -> FramebufferId {
        self.id
    }

    /// The device it was added on.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Gives up ownership without removing the framebuffer; the caller removes it
    /// (`DRM_IOCTL_MODE_RMFB`).
    pub fn into_raw(mut self) -> FramebufferId {
        // Dropped normally (an `Arc<Device>` is released), but without RMFB.
        self.owned = false;
        self.id
    }
}

impl<D: DeviceRef> Drop for Framebuffer<D> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let mut id = self.id.get();
        // Drop cannot return an error and never panics: a failure (ENODEV after the driver
        // is unbound; the type rules out an id that is not ours) is counted on the device.
        let r = sys_call::mode_rmfb(self.dev.as_fd(), &mut id);
        self.dev.releases.check("DRM_IOCTL_MODE_RMFB", r);
    }
}

/// One plane of a framebuffer as `GETFB2` reports it.
#[derive(Debug)]
pub struct FbPlaneInfo<D: DeviceRef> {
    /// A fresh handle to the plane's object, owned through the device's handle table
    /// (closed when the last owner is dropped; planes on one object share one handle).
    /// `None` when the kernel withheld handles (caller neither master nor CAP_SYS_ADMIN).
    pub object: Option<GemObject<D>>,
    /// Bytes per row.
    pub pitch: u32,
    /// Byte offset in the object.
    pub offset: u32,
}

/// What `DRM_IOCTL_MODE_GETFB2` reports about a framebuffer.
#[derive(Debug)]
pub struct FramebufferInfo<D: DeviceRef> {
    /// The framebuffer.
    pub id: FramebufferId,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// DRM fourcc as the kernel reports it ([`FramebufferInfo::fourcc`] decodes it).
    pub format: u32,
    /// The modifier, when the kernel reports one: kernels whose device supports modifiers
    /// report it for every framebuffer (`DRM_FORMAT_MOD_LINEAR`, 0, for an implicit linear
    /// one); older kernels only for framebuffers created with explicit modifiers.
    pub modifier: Option<u64>,
    /// The planes in use.
    pub planes: Vec<FbPlaneInfo<D>>,
}

impl<D: DeviceRef> FramebufferInfo<D> {
    /// The format, where `drm-fourcc` knows it.
    pub fn fourcc(&self) -> Option<DrmFourcc> {
        DrmFourcc::try_from(self.format).ok()
    }

    /// `DRM_IOCTL_MODE_GETFB2` on `dev`; [`Device::framebuffer_info`] for any [`DeviceRef`].
    pub fn get(dev: D, id: FramebufferId) -> Result<Self> {
        let mut a = sys::drm_mode_fb_cmd2 {
            fb_id: id.get(),
            ..Default::default()
        };
        // GETFB2 hands out handles of objects this file may already hold (one per object,
        // shared between its planes): the ioctl and the owner counts under the handle lock.
        // Every handle is owned before anything can fail, so an error below still closes
        // them.
        let handles = dev.with_handles(|t| {
            sys_call::mode_getfb2(dev.as_fd(), &mut a)?;
            Ok(a.handles.map(|h| {
                GemHandle::new(h).inspect(|h| {
                    t.acquire(h.get());
                })
            }))
        })?;
        let objects =
            handles.map(|h| h.map(|h| GemObject::acquired(dev.clone(), h, Release::Close)));
        let mut planes = Vec::new();
        for (i, object) in objects.into_iter().enumerate() {
            if object.is_none() && a.pitches[i] == 0 {
                continue;
            }
            planes.push(FbPlaneInfo {
                object,
                pitch: a.pitches[i],
                offset: a.offsets[i],
            });
        }
        let modifier = (a.flags & sys::DRM_MODE_FB_MODIFIERS != 0).then_some(a.modifier[0]);
        Ok(Self {
            id,
            width: a.width,
            height: a.height,
            format: a.pixel_format,
            modifier,
            planes,
        })
    }
}

impl Device {
    /// `DRM_IOCTL_MODE_ADDFB2`: adds a framebuffer (primary nodes).
    pub fn add_framebuffer(&self, spec: &FbSpec) -> Result<Framebuffer<&Device>> {
        Framebuffer::add(self, spec)
    }

    /// `DRM_IOCTL_MODE_GETFB2`: reads a framebuffer back (any framebuffer on the device,
    /// not only ours). The GEM handles the kernel creates for the caller are owned by the
    /// returned planes, so they cannot leak.
    pub fn framebuffer_info(&self, id: FramebufferId) -> Result<FramebufferInfo<&Device>> {
        FramebufferInfo::get(self, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plane_count_is_checked_before_the_kernel() {
        let h = GemHandle::new(1).unwrap();
        let mut s = FbSpec::single(64, 64, DrmFourcc::Xrgb8888, h, 256);
        let raw = s.to_raw().unwrap();
        assert_eq!((raw.handles[0], raw.pitches[0], raw.flags), (1, 256, 0));
        s.modifier = Some(0);
        assert_eq!(s.to_raw().unwrap().flags, sys::DRM_MODE_FB_MODIFIERS);
        s.planes.clear();
        assert!(matches!(s.to_raw(), Err(Error::InvalidArgument { .. })));
        s.planes = vec![s_plane(h); 5];
        assert!(matches!(s.to_raw(), Err(Error::InvalidArgument { .. })));
    }

    fn s_plane(handle: GemHandle) -> FbPlane {
        FbPlane {
            handle,
            pitch: 4,
            offset: 0,
        }
    }
}
