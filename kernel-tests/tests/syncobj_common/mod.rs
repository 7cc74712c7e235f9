//! Helpers shared by the sync object tests (`syncobj`, `syncobj_timeline`; `mod
//! syncobj_common;` after `#[macro_use] mod fence_common;`): the wait constants, the
//! virtio-gpu probe with its per-kernel expectations and loud skip, and vgem as the source
//! of a real, unsignalled fence.
// Each test target that includes this module uses part of it.
#![allow(dead_code, unused_macros)]

use crate::fence_common::{expect_unsupported, kernel, kernel_at_least};
use drm_gem::driver::vgem::{Vgem, VgemFence, VgemFenceAccess};
use drm_gem::{
    Device, DmaBufSync, DumbBuffer, DumbSpec, Error, FenceStatus, PrimeFlags, SyncFile, Syncobj,
    SyncobjTimeout, SyncobjWaitFlags, Syncobjs,
};
use kernel_tests::unchanged;

pub const POLL: SyncobjTimeout = SyncobjTimeout::POLL;
pub const NONE: SyncobjWaitFlags = SyncobjWaitFlags::empty();
pub const SUBMIT: SyncobjWaitFlags = SyncobjWaitFlags::WAIT_FOR_SUBMIT;

/// What the probe must say for virtio-gpu on this kernel: sync objects from Linux 6.4
/// ("drm/virtio: Support sync objects"); timelines (DRIVER_SYNCOBJ_TIMELINE) are asserted
/// on 6.12, which has them, and taken as the probe says in 6.4-6.11.
pub fn virtio_support(dev: &Device) -> Option<Syncobjs<&Device>> {
    let (major, minor) = kernel();
    match dev.syncobjs() {
        Ok(s) => {
            assert!(
                kernel_at_least(6, 4),
                "virtio-gpu on Linux {major}.{minor} must not claim sync objects"
            );
            if kernel_at_least(6, 12) {
                assert!(s.timeline(), "virtio-gpu on 6.12 has timeline sync objects");
            }
            Some(s)
        }
        Err(e @ Error::Unsupported { .. }) => {
            assert!(
                !kernel_at_least(6, 4),
                "virtio-gpu on Linux {major}.{minor} must have sync objects: {e}"
            );
            expect_unsupported(
                "Syncobj::create",
                unchanged(dev, "Syncobj::create", || Syncobj::create(dev, false)),
            );
            None
        }
        Err(e) => panic!("probing sync objects on virtio-gpu: {e}"),
    }
}

/// The virtio-gpu device's sync objects, or a loud (non-failing) skip on kernels where the
/// driver has none, after asserting that the probe says so.
macro_rules! virtio_syncobjs {
    ($dev:expr) => {
        match $crate::syncobj_common::virtio_support(&$dev) {
            Some(s) => s,
            None => skip_on_this_kernel!(
                "virtio-gpu has no sync objects on Linux {:?} (asserted: Unsupported)",
                $crate::fence_common::kernel()
            ),
        }
    };
}

pub fn spec() -> DumbSpec {
    DumbSpec {
        width: 16,
        height: 16,
        bpp: 32,
    }
}

/// A vgem dumb buffer with an unsignalled write fence, and the sync_file a reader of its
/// dma-buf must wait for (`DMA_BUF_IOCTL_EXPORT_SYNC_FILE`, Linux 6.0+).
pub fn vgem_fenced<'d>(
    vgem: &Vgem<&'d Device>,
) -> (DumbBuffer<&'d Device>, VgemFence<&'d Device>, SyncFile) {
    let dev: &'d Device = vgem.device_ref();
    let buf = DumbBuffer::create(dev, spec()).expect("vgem CREATE_DUMB");
    let dmabuf = dev.export(buf.gem(), PrimeFlags::default()).unwrap();
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("VGEM_FENCE_ATTACH");
    let sf = dmabuf
        .export_sync_file(DmaBufSync::READ)
        .expect("DMA_BUF_IOCTL_EXPORT_SYNC_FILE");
    assert_eq!(sf.info().unwrap().status, FenceStatus::Active);
    (buf, fence, sf)
}

macro_rules! vgem {
    ($dev:expr) => {
        drm_gem::driver::vgem::Vgem::new(&$dev).expect("the vgem node is vgem")
    };
}
