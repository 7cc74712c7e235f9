//! `qxl`: buffer objects in the device's VRAM (`QXL_ALLOC`) and surface BAR
//! (`QXL_ALLOC_SURF`), their mappings, and the driver's parameters and client caps.
//!
//! Every qxl ioctl needs an authenticated file on the primary node (`DRM_AUTH`; the first
//! opener is master, and root is always authenticated).
//!
//! ```no_run
//! use drm_gem::Device;
//! use drm_gem::driver::qxl::{Qxl, QxlBo, QxlParam};
//!
//! let dev = Device::open("/dev/dri/card0")?;
//! let qxl = Qxl::new(&dev)?;
//! println!("surfaces: {:?}", qxl.param(QxlParam::NumSurfaces)?);
//! let mut bo = QxlBo::alloc(&qxl, 8192)?;
//! bo.map()?.write_at(0, b"hello")?;
//! # Ok::<(), drm_gem::Error>(())
//! ```

use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::gem::{GemHandle, GemObject, Release};
use crate::mapping::Mapping;
use crate::sys_call;
use ioctl_sys::qxl as qsys;
use rustix::fd::AsFd;
use rustix::io::Errno;

/// The DRM driver name this module talks to.
pub const DRIVER_NAME: &str = "qxl";

/// One `QXL_PARAM_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QxlParam {
    /// `QXL_PARAM_NUM_SURFACES`: how many surfaces the device's ROM offers.
    NumSurfaces,
    /// `QXL_PARAM_MAX_RELOCS`: the most relocations one EXECBUFFER command may carry.
    MaxRelocs,
}

impl QxlParam {
    /// The `QXL_PARAM_*` number.
    pub const fn raw(self) -> u32 {
        match self {
            QxlParam::NumSurfaces => qsys::QXL_PARAM_NUM_SURFACES,
            QxlParam::MaxRelocs => qsys::QXL_PARAM_MAX_RELOCS,
        }
    }
}

/// A qxl node: a borrowed [`Device`] whose driver is `qxl`.
#[derive(Debug, Clone, Copy)]
pub struct Qxl<D: DeviceRef> {
    dev: D,
}

impl<D: DeviceRef> Qxl<D> {
    /// Checks the driver (`DRM_IOCTL_VERSION`).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the node's driver is not `qxl`.
    pub fn new(dev: D) -> Result<Self> {
        let name = dev.driver()?.name;
        if name != DRIVER_NAME {
            return Err(Error::Unsupported {
                feature: "qxl ioctls",
                reason: format!("the node's driver is {name:?}, not {DRIVER_NAME:?}"),
                errno: None,
            });
        }
        Ok(Self { dev })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// How this holds its device (the `&Device` or `Arc<Device>` it was made with).
    pub fn device_ref(&self) -> &D {
        &self.dev
    }

    /// `DRM_IOCTL_QXL_GETPARAM`.
    pub fn param(&self, p: QxlParam) -> Result<u64> {
        self.raw_param(u64::from(p.raw()))
    }

    /// `DRM_IOCTL_QXL_GETPARAM` for a raw number; the kernel answers EINVAL for numbers it
    /// does not know.
    pub fn raw_param(&self, param: u64) -> Result<u64> {
        let mut a = qsys::drm_qxl_getparam { param, value: 0 };
        sys_call::qxl_getparam(self.dev.as_fd(), &mut a)?;
        Ok(a.value)
    }

    /// `DRM_IOCTL_QXL_CLIENTCAP`: whether the device announces client capability bit
    /// `index`. The kernel answers ENOSYS both for "not set" and for devices older than
    /// revision 4 or indices past the ROM's table; all of those read as false.
    pub fn client_cap(&self, index: u32) -> Result<bool> {
        let mut a = qsys::drm_qxl_clientcap { index, pad: 0 };
        match sys_call::qxl_clientcap(self.dev.as_fd(), &mut a) {
            Ok(()) => Ok(true),
            Err(e) if e.errno() == Some(Errno::NOSYS) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Arguments of `DRM_IOCTL_QXL_ALLOC_SURF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SurfaceSpec {
    /// `SPICE_SURFACE_FMT_*` (e.g. 32 for 32-bit xRGB, 96 for ARGB).
    pub format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes per row; negative for bottom-up surfaces.
    pub stride: i32,
}

/// A qxl buffer object; its handle is closed (`DRM_IOCTL_GEM_CLOSE`) when the last owner
/// drops.
#[derive(Debug)]
pub struct QxlBo<D: DeviceRef> {
    obj: GemObject<D>,
    size: u64,
}

impl<D: DeviceRef> QxlBo<D> {
    /// `DRM_IOCTL_QXL_ALLOC`: `size` bytes (rounded up to pages by the kernel) in VRAM.
    /// The kernel answers EINVAL for 0.
    pub fn alloc(qxl: &Qxl<D>, size: u32) -> Result<Self> {
        let mut a = qsys::drm_qxl_alloc { size, handle: 0 };
        sys_call::qxl_alloc(qxl.dev.as_fd(), &mut a)?;
        let page = rustix::param::page_size() as u64;
        Ok(Self {
            obj: GemObject::adopt(
                qxl.dev.clone(),
                "DRM_IOCTL_QXL_ALLOC",
                a.handle,
                Release::Close,
            )?,
            size: u64::from(size).div_ceil(page) * page,
        })
    }

    /// `DRM_IOCTL_QXL_ALLOC_SURF`: a surface object of `|stride| * (height + 1)` bytes.
    pub fn alloc_surface(qxl: &Qxl<D>, spec: &SurfaceSpec) -> Result<Self> {
        let size = u64::from(spec.stride.unsigned_abs()) * (u64::from(spec.height) + 1);
        if size == 0 || size > i32::MAX as u64 {
            return Err(Error::InvalidArgument {
                what: format!(
                    "surface of stride {} and height {}: size {size} must be in 1..=i32::MAX",
                    spec.stride, spec.height
                ),
            });
        }
        let mut a = qsys::drm_qxl_alloc_surf {
            format: spec.format,
            width: spec.width,
            height: spec.height,
            stride: spec.stride,
            handle: 0,
            pad: 0,
        };
        sys_call::qxl_alloc_surf(qxl.dev.as_fd(), &mut a)?;
        let page = rustix::param::page_size() as u64;
        Ok(Self {
            obj: GemObject::adopt(
                qxl.dev.clone(),
                "DRM_IOCTL_QXL_ALLOC_SURF",
                a.handle,
                Release::Close,
            )?,
            size: size.div_ceil(page) * page,
        })
    }

    /// The handle.
    pub fn handle(&self) -> GemHandle {
        self.obj.handle()
    }

    /// The underlying GEM object.
    pub fn gem(&self) -> &GemObject<D> {
        &self.obj
    }

    /// Size in bytes (page-rounded, as the kernel allocates).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `DRM_IOCTL_QXL_MAP`: the fake offset to mmap the device fd at.
    pub fn map_offset(&self) -> Result<u64> {
        map_offset(self.obj.device(), self.handle().get())
    }

    /// Maps the whole object read/write.
    pub fn map(&mut self) -> Result<Mapping<'_>> {
        let offset = self.map_offset()?;
        let len = usize::try_from(self.size).map_err(|_| Error::InvalidArgument {
            what: format!("object of {} bytes does not fit in memory", self.size),
        })?;
        Mapping::new(self.obj.device().as_fd(), offset, len)
    }
}

/// `DRM_IOCTL_QXL_MAP` for any handle of `dev` (ENOENT for handles the file lacks).
pub fn map_offset(dev: &Device, handle: u32) -> Result<u64> {
    let mut a = qsys::drm_qxl_map {
        handle,
        ..Default::default()
    };
    sys_call::qxl_map(dev.as_fd(), &mut a)?;
    Ok(a.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_numbers() {
        assert_eq!(QxlParam::NumSurfaces.raw(), 1);
        assert_eq!(QxlParam::MaxRelocs.raw(), 2);
    }

    #[test]
    fn raw_calls_name_their_ioctl() {
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let mut a = qsys::drm_qxl_alloc {
            size: 4096,
            handle: 0,
        };
        match sys_call::qxl_alloc(null.as_fd(), &mut a) {
            Err(Error::Ioctl { name, errno }) => {
                assert_eq!((name, errno), ("DRM_IOCTL_QXL_ALLOC", Errno::NOTTY))
            }
            other => panic!("{other:?}"),
        }
    }
}
