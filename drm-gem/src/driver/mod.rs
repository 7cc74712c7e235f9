//! Driver-specific buffer objects and submission: each module wraps one driver's own ioctls
//! (`DRM_IOCTL_<DRIVER>_*`) over a [`Device`](crate::Device) opened on that driver's node.

pub mod bochs;
pub mod qxl;
pub mod vgem;
pub mod virtio_gpu;
