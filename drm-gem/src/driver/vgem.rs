//! `vgem`: the virtual GEM driver's fences, the way to put real fences on a buffer without
//! a GPU.
//!
//! vgem has a card node (dumb buffers, no KMS) and a render node. `DRM_IOCTL_VGEM_FENCE_ATTACH`
//! adds a new, unsignalled fence to a GEM object's reservation, as a reader or a writer;
//! everything that honours implicit fences then waits for it: a dma-buf exported from the
//! object (poll, `DMA_BUF_IOCTL_SYNC`, `DMA_BUF_IOCTL_EXPORT_SYNC_FILE`), and importers on
//! other devices. `DRM_IOCTL_VGEM_FENCE_SIGNAL` signals it from the CPU.
//!
//! **The kernel signals every vgem fence by itself 10 seconds after attaching it**, so a
//! forgotten fence cannot hang a device; signalling one after that answers ETIMEDOUT.
//! Closing the device file signals the file's remaining fences too.
//!
//! ```no_run
//! use drm_gem::driver::vgem::{Vgem, VgemFenceAccess};
//! use drm_gem::{Device, DmaBufSync, DumbBuffer, DumbSpec, PrimeFlags};
//!
//! let dev = Device::open("/dev/dri/card1")?; // the vgem card node
//! let vgem = Vgem::new(&dev)?;
//! let buf = DumbBuffer::create(&dev, DumbSpec { width: 64, height: 64, bpp: 32 })?;
//! let dmabuf = dev.export(buf.gem(), PrimeFlags::default())?;
//! let fence = vgem.attach_fence(buf.handle(), VgemFenceAccess::Write)?;
//! let readers_wait_for = dmabuf.export_sync_file(DmaBufSync::READ)?; // unsignalled
//! fence.signal()?;
//! assert!(readers_wait_for.wait(Some(std::time::Duration::ZERO))?);
//! # Ok::<(), drm_gem::Error>(())
//! ```

use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::gem::GemHandle;
use crate::sys_call;
use ioctl_sys::vgem as vsys;
use rustix::fd::AsFd;

/// A [`Device`] checked to be vgem, whose driver ioctls mean something else on any other
/// driver.
#[derive(Debug, Clone, Copy)]
pub struct Vgem<D: DeviceRef> {
    dev: D,
}

/// Whether a vgem fence stands for a reader or a writer of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VgemFenceAccess {
    /// A reader: writers (and CPU writes) wait for it; other readers do not.
    Read,
    /// A writer (`VGEM_FENCE_WRITE`): everyone waits for it.
    Write,
}

crate::id::nonzero_id!(
    /// A vgem fence id: a name in one open file's namespace, never reused by it.
    VgemFenceId
);

impl<D: DeviceRef> Vgem<D> {
    /// Checks (`DRM_IOCTL_VERSION`) that `dev` is driven by vgem.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for any other driver.
    pub fn new(dev: D) -> Result<Self> {
        let name = dev.driver()?.name;
        if name == "vgem" {
            Ok(Self { dev })
        } else {
            Err(Error::Unsupported {
                feature: "vgem fences",
                reason: format!("the device is driven by {name}, not vgem"),
                errno: None,
            })
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// How this holds its device (the `&Device` or `Arc<Device>` it was made with).
    pub fn device_ref(&self) -> &D {
        &self.dev
    }

    /// `DRM_IOCTL_VGEM_FENCE_ATTACH`: a new unsignalled fence on the GEM object `handle` of
    /// this device file (a dumb buffer, or an imported dma-buf). Signal it with
    /// [`VgemFence::signal`]; dropping it signals it too.
    ///
    /// # Errors
    /// From the kernel: ENOENT for an unknown handle; EBUSY when an unsignalled fence
    /// conflicts (a writer's fence with any other, a reader's with a writer's).
    pub fn attach_fence(&self, handle: GemHandle, access: VgemFenceAccess) -> Result<VgemFence<D>> {
        let mut a = vsys::drm_vgem_fence_attach {
            handle: handle.get(),
            flags: match access {
                VgemFenceAccess::Read => 0,
                VgemFenceAccess::Write => vsys::VGEM_FENCE_WRITE,
            },
            out_fence: 0,
            pad: 0,
        };
        sys_call::vgem_fence_attach(self.dev.as_fd(), &mut a)?;
        let id = VgemFenceId::new(a.out_fence).ok_or(Error::BadReply {
            ioctl: "DRM_IOCTL_VGEM_FENCE_ATTACH",
            what: "fence id 0",
        })?;
        Ok(VgemFence {
            dev: self.dev.clone(),
            id,
            pending: true,
        })
    }

    /// `DRM_IOCTL_VGEM_FENCE_SIGNAL` by id, for ids given up with [`VgemFence::into_raw`].
    ///
    /// # Errors
    /// From the kernel: ENOENT for an unknown or already signalled id; ETIMEDOUT when the
    /// kernel had already signalled the fence after its 10 s limit (it is consumed anyway).
    pub fn signal_fence(&self, id: VgemFenceId) -> Result<()> {
        signal(&self.dev, id.get())
    }
}

fn signal(dev: &Device, fence: u32) -> Result<()> {
    let mut a = vsys::drm_vgem_fence_signal { fence, flags: 0 };
    sys_call::vgem_fence_signal(dev.as_fd(), &mut a)
}

/// An unsignalled vgem fence; signalled on drop if not before (and by the kernel itself 10 s
/// after it was attached).
#[derive(Debug)]
pub struct VgemFence<D: DeviceRef> {
    dev: D,
    id: VgemFenceId,
    /// False once signalled or given up: the drop signals nothing.
    pending: bool,
}

impl<D: DeviceRef> VgemFence<D> {
    /// The fence's id.
    pub fn id(&self) -> VgemFenceId {
        self.id
    }

    /// `DRM_IOCTL_VGEM_FENCE_SIGNAL`: signals the fence, waking everything that waits on it.
    ///
    /// # Errors
    /// ETIMEDOUT from the kernel when it had already signalled the fence after its 10 s
    /// limit; the fence is signalled and consumed either way.
    pub fn signal(mut self) -> Result<()> {
        self.pending = false;
        signal(&self.dev, self.id.get())
    }

    /// Gives up the fence without signalling it (the kernel still does after 10 s, or when
    /// the device file closes); signal it later with [`Vgem::signal_fence`].
    pub fn into_raw(mut self) -> VgemFenceId {
        self.pending = false;
        self.id
    }
}

impl<D: DeviceRef> Drop for VgemFence<D> {
    fn drop(&mut self) {
        if !self.pending {
            return;
        }
        // ETIMEDOUT (the kernel's timer signalled it first) is expected and harmless; any
        // other failure (ENODEV after the driver is unbound) is counted on the device, as
        // Drop never panics.
        let r = signal(&self.dev, self.id.get());
        if r.as_ref()
            .is_err_and(|e| e.errno() != Some(rustix::io::Errno::TIMEDOUT))
        {
            self.dev.releases.check("DRM_IOCTL_VGEM_FENCE_SIGNAL", r);
        }
    }
}
