//! `virtio_gpu`: parameters, capability sets, resources (2D, virgl 3D and blob), mappings,
//! transfers, waits, command submission with sync_file fences, and context setup.
//!
//! Open the driver's node (render or primary) as a [`Device`], then wrap it in a
//! [`VirtioGpu`], which checks the driver and probes every `VIRTGPU_PARAM_*` once.
//!
//! Without virgl (QEMU's plain `virtio-gpu-pci`) the kernel answers ENOSYS for
//! `EXECBUFFER`, `TRANSFER_FROM_HOST` and, since such a device has no capability sets,
//! `GET_CAPS`; those calls then return [`Error::Unsupported`] whose reason names the ioctl
//! and the errno. `TRANSFER_TO_HOST` and `WAIT` work in 2D mode too.
//!
//! ```no_run
//! use drm_gem::Device;
//! use drm_gem::driver::virtio_gpu::{ResourceFormat, ResourceSpec, VirtioGpu, Resource, TransferBox};
//!
//! let dev = Device::open("/dev/dri/renderD128")?;
//! let gpu = VirtioGpu::new(&dev)?;
//! println!("virgl: {:?}, blob: {:?}", gpu.params().three_d, gpu.params().resource_blob);
//! let mut res = Resource::create(&gpu, &ResourceSpec::texture_2d(ResourceFormat::B8G8R8X8_UNORM, 64, 64))?;
//! {
//!     let mut map = res.map()?;
//!     map.write_at(0, &[0xff; 256])?;
//! }
//! res.transfer_to_host(&TransferBox::rect(0, 0, 64, 1).into())?;
//! assert!(res.wait(false)?);
//! # Ok::<(), drm_gem::Error>(())
//! ```

use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::gem::{GemHandle, GemObject, Release};
use crate::mapping::Mapping;
use crate::sync_file::SyncFile;
use crate::sys_call;
use ioctl_sys::virtgpu as vsys;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd};
use rustix::io::Errno;
use std::ffi::CStr;

/// The DRM driver name this module talks to.
pub const DRIVER_NAME: &str = "virtio_gpu";

/// One `VIRTGPU_PARAM_*` the driver may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Param {
    /// `VIRTGPU_PARAM_3D_FEATURES`: the host runs virgl (3D).
    ThreeDFeatures,
    /// `VIRTGPU_PARAM_CAPSET_QUERY_FIX`: GET_CAPS honours `cap_set_ver` (always 1).
    CapsetQueryFix,
    /// `VIRTGPU_PARAM_RESOURCE_BLOB`: RESOURCE_CREATE_BLOB works (since Linux 5.11).
    ResourceBlob,
    /// `VIRTGPU_PARAM_HOST_VISIBLE`: host memory can be mapped into the guest.
    HostVisible,
    /// `VIRTGPU_PARAM_CROSS_DEVICE`: resources can get UUIDs for sharing across devices.
    CrossDevice,
    /// `VIRTGPU_PARAM_CONTEXT_INIT`: CONTEXT_INIT works (since Linux 5.16).
    ContextInit,
    /// `VIRTGPU_PARAM_SUPPORTED_CAPSET_IDs`: bit mask of the host's capset ids.
    SupportedCapsetIds,
    /// `VIRTGPU_PARAM_EXPLICIT_DEBUG_NAME`: contexts take a debug name (since Linux 6.7).
    ExplicitDebugName,
}

impl Param {
    /// Every parameter, in `VIRTGPU_PARAM_*` order.
    pub const ALL: [Param; 8] = [
        Param::ThreeDFeatures,
        Param::CapsetQueryFix,
        Param::ResourceBlob,
        Param::HostVisible,
        Param::CrossDevice,
        Param::ContextInit,
        Param::SupportedCapsetIds,
        Param::ExplicitDebugName,
    ];

    /// The `VIRTGPU_PARAM_*` number.
    pub const fn raw(self) -> u32 {
        match self {
            Param::ThreeDFeatures => vsys::VIRTGPU_PARAM_3D_FEATURES,
            Param::CapsetQueryFix => vsys::VIRTGPU_PARAM_CAPSET_QUERY_FIX,
            Param::ResourceBlob => vsys::VIRTGPU_PARAM_RESOURCE_BLOB,
            Param::HostVisible => vsys::VIRTGPU_PARAM_HOST_VISIBLE,
            Param::CrossDevice => vsys::VIRTGPU_PARAM_CROSS_DEVICE,
            Param::ContextInit => vsys::VIRTGPU_PARAM_CONTEXT_INIT,
            Param::SupportedCapsetIds => vsys::VIRTGPU_PARAM_SUPPORTED_CAPSET_IDs,
            Param::ExplicitDebugName => vsys::VIRTGPU_PARAM_EXPLICIT_DEBUG_NAME,
        }
    }
}

/// Every parameter as the running kernel answered it: `None` where the kernel does not
/// know the parameter (it answers EINVAL), which is "absent", never an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Params {
    /// [`Param::ThreeDFeatures`].
    pub three_d: Option<bool>,
    /// [`Param::CapsetQueryFix`].
    pub capset_query_fix: Option<bool>,
    /// [`Param::ResourceBlob`].
    pub resource_blob: Option<bool>,
    /// [`Param::HostVisible`].
    pub host_visible: Option<bool>,
    /// [`Param::CrossDevice`].
    pub cross_device: Option<bool>,
    /// [`Param::ContextInit`].
    pub context_init: Option<bool>,
    /// [`Param::SupportedCapsetIds`]: bit `n` set when capset id `n` is offered. The kernel
    /// copies it out as an `int`, so ids above 31 cannot show here.
    pub supported_capset_ids: Option<u32>,
    /// [`Param::ExplicitDebugName`].
    pub explicit_debug_name: Option<bool>,
}

impl Params {
    /// True when the parameter is known and non-zero.
    pub fn has(&self, p: Param) -> bool {
        let b = |v: Option<bool>| v == Some(true);
        match p {
            Param::ThreeDFeatures => b(self.three_d),
            Param::CapsetQueryFix => b(self.capset_query_fix),
            Param::ResourceBlob => b(self.resource_blob),
            Param::HostVisible => b(self.host_visible),
            Param::CrossDevice => b(self.cross_device),
            Param::ContextInit => b(self.context_init),
            Param::SupportedCapsetIds => self.supported_capset_ids.is_some_and(|m| m != 0),
            Param::ExplicitDebugName => b(self.explicit_debug_name),
        }
    }
}

/// A virtio-gpu node: a borrowed [`Device`] whose driver is `virtio_gpu`, with its
/// parameters probed once.
#[derive(Debug)]
pub struct VirtioGpu<D: DeviceRef> {
    dev: D,
    params: Params,
}

impl<D: DeviceRef> VirtioGpu<D> {
    /// Checks the driver (`DRM_IOCTL_VERSION`) and probes every parameter.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the node's driver is not `virtio_gpu`; the ioctl's error
    /// when a probe fails with anything but EINVAL.
    pub fn new(dev: D) -> Result<Self> {
        let name = dev.driver()?.name;
        if name != DRIVER_NAME {
            return Err(Error::Unsupported {
                feature: "virtio_gpu ioctls",
                reason: format!("the node's driver is {name:?}, not {DRIVER_NAME:?}"),
                errno: None,
            });
        }
        let mut gpu = Self {
            dev,
            params: Params::default(),
        };
        let mut p = Params::default();
        for param in Param::ALL {
            let v = gpu.param(param)?;
            let flag = v.map(|v| v != 0);
            match param {
                Param::ThreeDFeatures => p.three_d = flag,
                Param::CapsetQueryFix => p.capset_query_fix = flag,
                Param::ResourceBlob => p.resource_blob = flag,
                Param::HostVisible => p.host_visible = flag,
                Param::CrossDevice => p.cross_device = flag,
                Param::ContextInit => p.context_init = flag,
                Param::SupportedCapsetIds => p.supported_capset_ids = v,
                Param::ExplicitDebugName => p.explicit_debug_name = flag,
            }
        }
        gpu.params = p;
        Ok(gpu)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// How this holds its device (the `&Device` or `Arc<Device>` it was made with).
    pub fn device_ref(&self) -> &D {
        &self.dev
    }

    /// What [`new`](Self::new) probed.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// `DRM_IOCTL_VIRTGPU_GETPARAM` for one parameter: `None` when this kernel does not know
    /// it (EINVAL). The kernel writes an `int`; its bits are returned unchanged.
    pub fn param(&self, p: Param) -> Result<Option<u32>> {
        self.raw_param(u64::from(p.raw()))
    }

    /// `DRM_IOCTL_VIRTGPU_GETPARAM` for a raw parameter number (for numbers newer than this
    /// crate): `None` when the kernel does not know it.
    pub fn raw_param(&self, param: u64) -> Result<Option<u32>> {
        match sys_call::virtgpu_getparam(self.dev.as_fd(), param) {
            Ok(v) => Ok(Some(v as u32)),
            Err(e) if e.errno() == Some(Errno::INVAL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `DRM_IOCTL_VIRTGPU_GET_CAPS`: copies capability set `id` at `version` into `buf` (the
    /// kernel copies `min(buf.len(), host size)` bytes and does not say how many).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the device has no capability sets at all (the kernel
    /// answers ENOSYS; QEMU offers none without virgl); EINVAL for an id or version the
    /// host does not offer, or an empty `buf`.
    pub fn get_caps(&self, id: u32, version: u32, buf: &mut [u8]) -> Result<()> {
        sys_call::virtgpu_get_caps(self.dev.as_fd(), id, version, buf)
            .map_err(|e| nosys("virtio-gpu capability sets", e, "the device offers none"))
    }

    /// `DRM_IOCTL_VIRTGPU_EXECBUFFER`: submits a command buffer for the host (virgl).
    /// Returns the out-fence when [`Submit::out_fence`] asked for one.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without virgl (the kernel answers ENOSYS); EINVAL for unknown
    /// flags or a ring index beyond the context's rings.
    pub fn submit(&self, s: &Submit<'_>) -> Result<Option<SyncFile>> {
        let known = vsys::VIRTGPU_EXECBUF_FENCE_FD_IN
            | vsys::VIRTGPU_EXECBUF_FENCE_FD_OUT
            | vsys::VIRTGPU_EXECBUF_RING_IDX;
        if s.extra_flags & known != 0 {
            return Err(Error::InvalidArgument {
                what: format!(
                    "extra execbuffer flags {:#x} include bits that Submit's fields set",
                    s.extra_flags
                ),
            });
        }
        let mut flags = s.extra_flags;
        let mut fence_fd = -1;
        if let Some(f) = s.in_fence {
            flags |= vsys::VIRTGPU_EXECBUF_FENCE_FD_IN;
            fence_fd = f.as_raw_fd();
        }
        if s.out_fence {
            flags |= vsys::VIRTGPU_EXECBUF_FENCE_FD_OUT;
        }
        let mut ring_idx = 0;
        if let Some(r) = s.ring_idx {
            flags |= vsys::VIRTGPU_EXECBUF_RING_IDX;
            ring_idx = r;
        }
        let handles: Vec<u32> = s.buffers.iter().map(|h| h.get()).collect();
        let a = vsys::drm_virtgpu_execbuffer {
            flags,
            fence_fd,
            ring_idx,
            ..Default::default()
        };
        let out = sys_call::virtgpu_execbuffer(self.dev.as_fd(), a, s.command, &handles).map_err(
            |e| {
                nosys(
                    "virtio-gpu command submission",
                    e,
                    "the device has no virgl",
                )
            },
        )?;
        if s.out_fence {
            Ok(Some(SyncFile::from_fd(sys_call::own_fd(
                "DRM_IOCTL_VIRTGPU_EXECBUFFER",
                out.fence_fd,
            )?)))
        } else {
            Ok(None)
        }
    }

    /// `DRM_IOCTL_VIRTGPU_CONTEXT_INIT`: creates this open file's host context with
    /// `params` (at most once per open file, before anything else creates it implicitly).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`Params::context_init`] or [`Params::three_d`] is not
    /// set and the kernel refused (EINVAL then means "no such feature"; the reason keeps
    /// the errno); otherwise the kernel's errno: EINVAL for a bad parameter, EEXIST when the
    /// context exists already.
    pub fn context_init(&self, params: &[ContextParam<'_>]) -> Result<()> {
        let mut raw = Vec::with_capacity(params.len());
        let mut name = None;
        for p in params {
            let (param, value) = match *p {
                ContextParam::CapsetId(v) => (vsys::VIRTGPU_CONTEXT_PARAM_CAPSET_ID, v),
                ContextParam::NumRings(v) => (vsys::VIRTGPU_CONTEXT_PARAM_NUM_RINGS, v),
                ContextParam::PollRingsMask(v) => (vsys::VIRTGPU_CONTEXT_PARAM_POLL_RINGS_MASK, v),
                ContextParam::DebugName(n) => {
                    if name.replace(n).is_some() {
                        return Err(Error::InvalidArgument {
                            what: "at most one DebugName per CONTEXT_INIT".into(),
                        });
                    }
                    continue;
                }
            };
            raw.push(vsys::drm_virtgpu_context_set_param {
                param: u64::from(param),
                value,
            });
        }
        let supported =
            self.params.has(Param::ContextInit) && self.params.has(Param::ThreeDFeatures);
        sys_call::virtgpu_context_init(self.dev.as_fd(), &raw, name).map_err(|e| {
            if !supported && e.errno() == Some(Errno::INVAL) {
                Error::Unsupported {
                    feature: "virtio-gpu CONTEXT_INIT",
                    reason: format!(
                        "{e}; the device lacks context_init or virgl (params: {:?})",
                        self.params
                    ),
                    errno: Some(Errno::INVAL),
                }
            } else {
                e
            }
        })
    }
}

/// Turns the kernel's ENOSYS into [`Error::Unsupported`], keeping the ioctl and errno in
/// the reason.
fn nosys(feature: &'static str, e: Error, why: &str) -> Error {
    if e.errno() == Some(Errno::NOSYS) {
        Error::Unsupported {
            feature,
            reason: format!("{e}: {why}"),
            errno: Some(Errno::NOSYS),
        }
    } else {
        e
    }
}

/// One CONTEXT_INIT parameter (`VIRTGPU_CONTEXT_PARAM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextParam<'a> {
    /// The capset the context speaks (must be in [`Params::supported_capset_ids`]).
    CapsetId(u64),
    /// How many fence rings the context has (at most 64).
    NumRings(u64),
    /// Rings whose fences send a DRM event on the device fd.
    PollRingsMask(u64),
    /// A name for host-side debugging (since Linux 6.7).
    DebugName(&'a CStr),
}

/// One command submission (`DRM_IOCTL_VIRTGPU_EXECBUFFER`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Submit<'a> {
    /// Host command bytes (a virgl command stream for the virgl capset).
    pub command: &'a [u8],
    /// Objects the commands use; the kernel fences them with the job.
    pub buffers: &'a [GemHandle],
    /// A sync_file to wait for before the job runs (`VIRTGPU_EXECBUF_FENCE_FD_IN`).
    pub in_fence: Option<BorrowedFd<'a>>,
    /// Ask for a sync_file that signals when the job is done (`..._FENCE_FD_OUT`).
    pub out_fence: bool,
    /// Submit on this ring of the context (`VIRTGPU_EXECBUF_RING_IDX`, since Linux 5.16).
    pub ring_idx: Option<u32>,
    /// Further raw flag bits, for flags newer than this crate. Bits the fields above set
    /// are refused here; bits the kernel does not know make it answer EINVAL.
    pub extra_flags: u32,
}

crate::id::nonzero_id!(
    /// The host's resource id (`res_handle`): device-wide, unlike the GEM handle.
    ResourceId
);

/// A resource format (`enum virtio_gpu_formats` for 2D; the virgl format list for 3D).
#[repr(transparent)]
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct ResourceFormat(pub u32);

impl ResourceFormat {
    /// `VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM`.
    pub const B8G8R8A8_UNORM: Self = Self(1);
    /// `VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM` (XRGB8888 in DRM fourcc terms).
    pub const B8G8R8X8_UNORM: Self = Self(2);
    /// `VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM`.
    pub const A8R8G8B8_UNORM: Self = Self(3);
    /// `VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM`.
    pub const X8R8G8B8_UNORM: Self = Self(4);
    /// `VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM`.
    pub const R8G8B8A8_UNORM: Self = Self(67);
    /// `VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM`.
    pub const X8B8G8R8_UNORM: Self = Self(68);
    /// `VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM`.
    pub const A8B8G8R8_UNORM: Self = Self(121);
    /// `VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM`.
    pub const R8G8B8X8_UNORM: Self = Self(134);

    /// The formats the virtio-gpu specification defines for 2D resources (all 32 bpp).
    pub const FORMATS_2D: [Self; 8] = [
        Self::B8G8R8A8_UNORM,
        Self::B8G8R8X8_UNORM,
        Self::A8R8G8B8_UNORM,
        Self::X8R8G8B8_UNORM,
        Self::R8G8B8A8_UNORM,
        Self::X8B8G8R8_UNORM,
        Self::A8B8G8R8_UNORM,
        Self::R8G8B8X8_UNORM,
    ];

    /// Whether this is one of [`FORMATS_2D`](Self::FORMATS_2D).
    pub fn is_2d(self) -> bool {
        Self::FORMATS_2D.contains(&self)
    }
}

bitflags::bitflags! {
    /// virgl bind flags (`VIRGL_BIND_*`) for RESOURCE_CREATE. The kernel passes them to the
    /// host only with virgl; a 2D device ignores them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ResourceBind: u32 {
        /// `VIRGL_BIND_DEPTH_STENCIL`.
        const DEPTH_STENCIL = 1 << 0;
        /// `VIRGL_BIND_RENDER_TARGET`.
        const RENDER_TARGET = 1 << 1;
        /// `VIRGL_BIND_SAMPLER_VIEW`.
        const SAMPLER_VIEW = 1 << 3;
        /// `VIRGL_BIND_VERTEX_BUFFER`.
        const VERTEX_BUFFER = 1 << 4;
        /// `VIRGL_BIND_INDEX_BUFFER`.
        const INDEX_BUFFER = 1 << 5;
        /// `VIRGL_BIND_CONSTANT_BUFFER`.
        const CONSTANT_BUFFER = 1 << 6;
        /// `VIRGL_BIND_DISPLAY_TARGET`.
        const DISPLAY_TARGET = 1 << 7;
        /// `VIRGL_BIND_SCANOUT`.
        const SCANOUT = 1 << 18;
        /// `VIRGL_BIND_SHARED`.
        const SHARED = 1 << 20;
        // Bits this crate does not name are kept as given.
        const _ = !0;
    }
}

/// The gallium texture target for 2D textures (`PIPE_TEXTURE_2D`), the only target a
/// device without virgl accepts.
pub const TARGET_TEXTURE_2D: u32 = 2;

/// Arguments of `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceSpec {
    /// Gallium texture target (`PIPE_*`); [`TARGET_TEXTURE_2D`] without virgl.
    pub target: u32,
    /// Pixel format.
    pub format: ResourceFormat,
    /// How the host will use it (virgl).
    pub bind: ResourceBind,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Depth (1 for 2D).
    pub depth: u32,
    /// Array layers (1 for 2D).
    pub array_size: u32,
    /// Last mip level (0 for one level).
    pub last_level: u32,
    /// Samples (0 or 1).
    pub nr_samples: u32,
    /// Resource flags (virgl).
    pub flags: u32,
    /// Bytes of guest backing to allocate; the kernel allocates one page for 0.
    pub size: u32,
    /// Bytes per row (informational for the host).
    pub stride: u32,
}

impl ResourceSpec {
    /// A 32 bpp 2D texture of `width` x `height`, bound as render target and scan-out, with
    /// a backing of `width * 4 * height` bytes (saturating; [`validate`](Self::validate)
    /// rejects what overflows).
    pub fn texture_2d(format: ResourceFormat, width: u32, height: u32) -> Self {
        let stride = width.saturating_mul(4);
        Self {
            target: TARGET_TEXTURE_2D,
            format,
            bind: ResourceBind::RENDER_TARGET | ResourceBind::SCANOUT,
            width,
            height,
            depth: 1,
            array_size: 1,
            last_level: 0,
            nr_samples: 0,
            flags: 0,
            size: stride.saturating_mul(height),
            stride,
        }
    }

    /// What [`Resource::create`] checks before the kernel sees the spec, for what the kernel
    /// itself does not check: a zero width or height, or (without virgl, `virgl == false`) a
    /// format outside [`ResourceFormat::FORMATS_2D`] or a backing smaller than
    /// `width * 4 * height`. The kernel accepts those and the host rejects the resource
    /// later, asynchronously (the guest only logs it).
    pub fn validate(&self, virgl: bool) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument { what });
        if self.width == 0 || self.height == 0 {
            return bad(format!(
                "resource {}x{}: width and height must be > 0",
                self.width, self.height
            ));
        }
        if !virgl {
            if !self.format.is_2d() {
                return bad(format!(
                    "format {} is not a virtio-gpu 2D format (the device has no virgl)",
                    self.format.0
                ));
            }
            let need = u64::from(self.width) * 4 * u64::from(self.height);
            if u64::from(self.size) < need {
                return bad(format!(
                    "backing of {} bytes is smaller than {}x{}x4 = {need}",
                    self.size, self.width, self.height
                ));
            }
        }
        Ok(())
    }
}

/// Memory kind of a blob resource (`VIRTGPU_BLOB_MEM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlobMem {
    /// Guest memory only (`VIRTGPU_BLOB_MEM_GUEST`).
    Guest,
    /// Host memory made by a 3D context (`VIRTGPU_BLOB_MEM_HOST3D`).
    Host3d,
    /// Host 3D resource backed by guest memory (`VIRTGPU_BLOB_MEM_HOST3D_GUEST`).
    Host3dGuest,
}

impl BlobMem {
    /// The `VIRTGPU_BLOB_MEM_*` number.
    pub const fn raw(self) -> u32 {
        match self {
            BlobMem::Guest => vsys::VIRTGPU_BLOB_MEM_GUEST,
            BlobMem::Host3d => vsys::VIRTGPU_BLOB_MEM_HOST3D,
            BlobMem::Host3dGuest => vsys::VIRTGPU_BLOB_MEM_HOST3D_GUEST,
        }
    }

    fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            vsys::VIRTGPU_BLOB_MEM_GUEST => Some(BlobMem::Guest),
            vsys::VIRTGPU_BLOB_MEM_HOST3D => Some(BlobMem::Host3d),
            vsys::VIRTGPU_BLOB_MEM_HOST3D_GUEST => Some(BlobMem::Host3dGuest),
            _ => None,
        }
    }
}

bitflags::bitflags! {
    /// How a blob may be used (`VIRTGPU_BLOB_FLAG_USE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct BlobFlags: u32 {
        /// The guest may map it (`VIRTGPU_BLOB_FLAG_USE_MAPPABLE`).
        const MAPPABLE = vsys::VIRTGPU_BLOB_FLAG_USE_MAPPABLE;
        /// It may be exported (`VIRTGPU_BLOB_FLAG_USE_SHAREABLE`).
        const SHAREABLE = vsys::VIRTGPU_BLOB_FLAG_USE_SHAREABLE;
        /// It may be shared with other virtio devices (`..._USE_CROSS_DEVICE`).
        const CROSS_DEVICE = vsys::VIRTGPU_BLOB_FLAG_USE_CROSS_DEVICE;
        // Unknown bits are kept (the kernel refuses them with EINVAL).
        const _ = !0;
    }
}

/// Arguments of `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobSpec<'a> {
    /// Where the memory lives.
    pub mem: BlobMem,
    /// How it may be used.
    pub flags: BlobFlags,
    /// Size in bytes.
    pub size: u64,
    /// Host blob id (host 3D blobs; 0 for guest blobs).
    pub blob_id: u64,
    /// Host commands run before creation (host 3D blobs; dword-aligned length).
    pub cmd: &'a [u8],
}

/// What `DRM_IOCTL_VIRTGPU_RESOURCE_INFO` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The host resource id.
    pub res_handle: Option<ResourceId>,
    /// Size of the GEM object in bytes.
    pub size: u32,
    /// Blob memory kind, for blob resources.
    pub blob_mem: Option<BlobMem>,
}

/// A box of a resource for transfers (pixels; `z`/`d` are layers or depth).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferBox {
    /// Left.
    pub x: u32,
    /// Top.
    pub y: u32,
    /// Front.
    pub z: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
    /// Depth.
    pub d: u32,
}

impl TransferBox {
    /// A 2D rectangle (`z` 0, depth 1).
    pub const fn rect(x: u32, y: u32, w: u32, h: u32) -> Self {
        Self {
            x,
            y,
            z: 0,
            w,
            h,
            d: 1,
        }
    }
}

/// Arguments of `TRANSFER_TO_HOST` / `TRANSFER_FROM_HOST`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfer {
    /// The box to copy.
    pub bbox: TransferBox,
    /// Mip level.
    pub level: u32,
    /// Byte offset into the guest backing.
    pub offset: u32,
    /// Row stride of the guest backing (host 3D blobs only; otherwise 0).
    pub stride: u32,
    /// Layer stride of the guest backing (host 3D blobs only; otherwise 0).
    pub layer_stride: u32,
}

impl From<TransferBox> for Transfer {
    fn from(bbox: TransferBox) -> Self {
        Self {
            bbox,
            ..Self::default()
        }
    }
}

fn raw_box(b: &TransferBox) -> vsys::drm_virtgpu_3d_box {
    vsys::drm_virtgpu_3d_box {
        x: b.x,
        y: b.y,
        z: b.z,
        w: b.w,
        h: b.h,
        d: b.d,
    }
}

/// A virtio-gpu resource: a GEM object plus its host resource; the handle is closed (and
/// the host resource released by the kernel) when the last owner drops.
#[derive(Debug)]
pub struct Resource<D: DeviceRef> {
    obj: GemObject<D>,
    res_id: Option<ResourceId>,
    size: u32,
    virgl: bool,
}

impl<D: DeviceRef> Resource<D> {
    /// [`ResourceSpec::validate`] (for the device's virgl state), then
    /// `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE`, then `RESOURCE_INFO` for the size the kernel
    /// allocated.
    pub fn create(gpu: &VirtioGpu<D>, spec: &ResourceSpec) -> Result<Self> {
        let virgl = gpu.params.has(Param::ThreeDFeatures);
        spec.validate(virgl)?;
        Self::create_unvalidated(gpu, spec)
    }

    /// `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE` without this crate's checks: what the kernel
    /// alone accepts (it checks target, depth, array size, levels and samples without
    /// virgl; nothing with virgl, where the host decides).
    pub fn create_unvalidated(gpu: &VirtioGpu<D>, spec: &ResourceSpec) -> Result<Self> {
        let mut a = vsys::drm_virtgpu_resource_create {
            target: spec.target,
            format: spec.format.0,
            bind: spec.bind.bits(),
            width: spec.width,
            height: spec.height,
            depth: spec.depth,
            array_size: spec.array_size,
            last_level: spec.last_level,
            nr_samples: spec.nr_samples,
            flags: spec.flags,
            bo_handle: 0,
            res_handle: 0,
            size: spec.size,
            stride: spec.stride,
        };
        sys_call::virtgpu_resource_create(gpu.dev.as_fd(), &mut a)?;
        Self::adopt(
            gpu,
            "DRM_IOCTL_VIRTGPU_RESOURCE_CREATE",
            a.bo_handle,
            a.res_handle,
        )
    }

    /// `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB`, then `RESOURCE_INFO`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`Params::resource_blob`] is not set and the kernel
    /// refused (EINVAL; on kernels before 5.11 the ioctl does not exist, which also reads
    /// EINVAL); the reason keeps the ioctl and errno.
    pub fn create_blob(gpu: &VirtioGpu<D>, spec: &BlobSpec<'_>) -> Result<Self> {
        let a = vsys::drm_virtgpu_resource_create_blob {
            blob_mem: spec.mem.raw(),
            blob_flags: spec.flags.bits(),
            size: spec.size,
            blob_id: spec.blob_id,
            ..Default::default()
        };
        let out =
            sys_call::virtgpu_resource_create_blob(gpu.dev.as_fd(), a, spec.cmd).map_err(|e| {
                if !gpu.params.has(Param::ResourceBlob) && e.errno() == Some(Errno::INVAL) {
                    Error::Unsupported {
                        feature: "virtio-gpu blob resources",
                        reason: format!(
                            "{e}; VIRTGPU_PARAM_RESOURCE_BLOB is {:?}",
                            gpu.params.resource_blob
                        ),
                        errno: Some(Errno::INVAL),
                    }
                } else {
                    e
                }
            })?;
        Self::adopt(
            gpu,
            "DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB",
            out.bo_handle,
            out.res_handle,
        )
    }

    fn adopt(
        gpu: &VirtioGpu<D>,
        ioctl: &'static str,
        bo_handle: u32,
        res_handle: u32,
    ) -> Result<Self> {
        let obj = GemObject::adopt(gpu.dev.clone(), ioctl, bo_handle, Release::Close)?;
        let mut r = Self {
            obj,
            res_id: ResourceId::new(res_handle),
            size: 0,
            virgl: gpu.params.has(Param::ThreeDFeatures),
        };
        r.size = r.info()?.size;
        Ok(r)
    }

    /// The GEM handle.
    pub fn handle(&self) -> GemHandle {
        self.obj.handle()
    }

    /// The underlying GEM object (for PRIME export).
    pub fn gem(&self) -> &GemObject<D> {
        &self.obj
    }

    /// The host resource id the kernel reported at creation.
    pub fn resource_id(&self) -> Option<ResourceId> {
        self.res_id
    }

    /// Size of the guest object in bytes (from `RESOURCE_INFO` at creation).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// `DRM_IOCTL_VIRTGPU_RESOURCE_INFO`.
    pub fn info(&self) -> Result<ResourceInfo> {
        resource_info(self.obj.device(), self.handle().get())
    }

    /// `DRM_IOCTL_VIRTGPU_MAP`: the fake offset to mmap the device fd at.
    pub fn map_offset(&self) -> Result<u64> {
        map_offset(self.obj.device(), self.handle().get())
    }

    /// Maps the whole object read/write (guest backing; host-visible memory for mappable
    /// host blobs). The mapping borrows the resource mutably.
    pub fn map(&mut self) -> Result<Mapping<'_>> {
        let offset = self.map_offset()?;
        Mapping::new(self.obj.device().as_fd(), offset, self.size as usize)
    }

    /// `DRM_IOCTL_VIRTGPU_TRANSFER_TO_HOST`: copies a box of the guest backing to the
    /// host resource (queued; [`wait`](Self::wait) for completion with virgl).
    pub fn transfer_to_host(&self, t: &Transfer) -> Result<()> {
        let mut a = vsys::drm_virtgpu_3d_transfer_to_host {
            bo_handle: self.handle().get(),
            box_: raw_box(&t.bbox),
            level: t.level,
            offset: t.offset,
            stride: t.stride,
            layer_stride: t.layer_stride,
        };
        sys_call::virtgpu_transfer_to_host(self.obj.device().as_fd(), &mut a)
    }

    /// `DRM_IOCTL_VIRTGPU_TRANSFER_FROM_HOST`: copies a box of the host resource into the
    /// guest backing (virgl only).
    ///
    /// # Errors
    /// [`Error::Unsupported`] without virgl (the kernel answers ENOSYS).
    pub fn transfer_from_host(&self, t: &Transfer) -> Result<()> {
        let mut a = vsys::drm_virtgpu_3d_transfer_from_host {
            bo_handle: self.handle().get(),
            box_: raw_box(&t.bbox),
            level: t.level,
            offset: t.offset,
            stride: t.stride,
            layer_stride: t.layer_stride,
        };
        sys_call::virtgpu_transfer_from_host(self.obj.device().as_fd(), &mut a).map_err(|e| {
            nosys(
                "virtio-gpu TRANSFER_FROM_HOST",
                e,
                "the device has no virgl",
            )
        })
    }

    /// `DRM_IOCTL_VIRTGPU_WAIT`: true when the object is idle. With `nowait` it only polls;
    /// otherwise the kernel waits up to 15 s. False when still busy (the kernel's EBUSY).
    pub fn wait(&self, nowait: bool) -> Result<bool> {
        wait(self.obj.device(), self.handle().get(), nowait)
    }

    /// Whether the device had virgl when this resource was created.
    pub fn is_virgl(&self) -> bool {
        self.virgl
    }
}

/// `DRM_IOCTL_VIRTGPU_RESOURCE_INFO` for any handle of `dev` (one this process does not
/// own, too: the kernel answers ENOENT for handles the open file lacks).
pub fn resource_info(dev: &Device, handle: u32) -> Result<ResourceInfo> {
    let mut a = vsys::drm_virtgpu_resource_info {
        bo_handle: handle,
        ..Default::default()
    };
    sys_call::virtgpu_resource_info(dev.as_fd(), &mut a)?;
    Ok(ResourceInfo {
        res_handle: ResourceId::new(a.res_handle),
        size: a.size,
        blob_mem: BlobMem::from_raw(a.blob_mem),
    })
}

/// `DRM_IOCTL_VIRTGPU_MAP` for any handle of `dev` (ENOENT for handles the file lacks).
pub fn map_offset(dev: &Device, handle: u32) -> Result<u64> {
    let mut a = vsys::drm_virtgpu_map {
        handle,
        ..Default::default()
    };
    sys_call::virtgpu_map(dev.as_fd(), &mut a)?;
    Ok(a.offset)
}

/// `DRM_IOCTL_VIRTGPU_WAIT` for any handle of `dev`: true when idle, false on EBUSY.
pub fn wait(dev: &Device, handle: u32, nowait: bool) -> Result<bool> {
    let mut a = vsys::drm_virtgpu_3d_wait {
        handle,
        flags: if nowait { vsys::VIRTGPU_WAIT_NOWAIT } else { 0 },
    };
    match sys_call::virtgpu_wait(dev.as_fd(), &mut a) {
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(Errno::BUSY) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_numbers_and_absence() {
        assert_eq!(Param::ThreeDFeatures.raw(), 1);
        assert_eq!(Param::ExplicitDebugName.raw(), 8);
        let p = Params {
            three_d: Some(false),
            supported_capset_ids: Some(0b110),
            ..Default::default()
        };
        assert!(!p.has(Param::ThreeDFeatures));
        assert!(!p.has(Param::ResourceBlob));
        assert!(p.has(Param::SupportedCapsetIds));
    }

    #[test]
    fn raw_calls_name_their_ioctl() {
        // On a non-DRM fd every call reaches the kernel and fails with ENOTTY, named.
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let fd = null.as_fd();
        let name = |e: Error| match e {
            Error::Ioctl { name, errno } if errno == Errno::NOTTY => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            name(sys_call::virtgpu_getparam(fd, 1).unwrap_err()),
            "DRM_IOCTL_VIRTGPU_GETPARAM"
        );
        assert_eq!(
            name(sys_call::virtgpu_get_caps(fd, 1, 1, &mut [0; 8]).unwrap_err()),
            "DRM_IOCTL_VIRTGPU_GET_CAPS"
        );
        let ex = vsys::drm_virtgpu_execbuffer::default();
        assert_eq!(
            name(sys_call::virtgpu_execbuffer(fd, ex, &[0; 4], &[1]).unwrap_err()),
            "DRM_IOCTL_VIRTGPU_EXECBUFFER"
        );
        let blob = vsys::drm_virtgpu_resource_create_blob::default();
        assert_eq!(
            name(sys_call::virtgpu_resource_create_blob(fd, blob, &[]).unwrap_err()),
            "DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB"
        );
        assert_eq!(
            name(sys_call::virtgpu_context_init(fd, &[], Some(c"x")).unwrap_err()),
            "DRM_IOCTL_VIRTGPU_CONTEXT_INIT"
        );
        // The address-carrying parameter is only built from a borrowed name.
        let raw = vsys::drm_virtgpu_context_set_param {
            param: u64::from(vsys::VIRTGPU_CONTEXT_PARAM_DEBUG_NAME),
            value: 0x1000,
        };
        assert!(matches!(
            sys_call::virtgpu_context_init(fd, &[raw], None),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn spec_validation() {
        let ok = ResourceSpec::texture_2d(ResourceFormat::B8G8R8X8_UNORM, 64, 32);
        assert_eq!(ok.size, 64 * 4 * 32);
        assert!(ok.validate(false).is_ok());
        let bad_format = ResourceSpec {
            format: ResourceFormat(9999),
            ..ok
        };
        assert!(matches!(
            bad_format.validate(false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(bad_format.validate(true).is_ok(), "virgl: the host decides");
        let zero = ResourceSpec::texture_2d(ResourceFormat::B8G8R8X8_UNORM, 0, 32);
        assert!(zero.validate(true).is_err() && zero.validate(false).is_err());
        let small = ResourceSpec { size: 4096, ..ok };
        assert!(small.validate(false).is_err());
        assert_eq!(
            BlobMem::from_raw(BlobMem::Host3dGuest.raw()),
            Some(BlobMem::Host3dGuest)
        );
        assert_eq!(BlobMem::from_raw(0), None);
        assert_eq!(ResourceBind::from_bits_retain(1 << 30).bits(), 1 << 30);
    }
}
