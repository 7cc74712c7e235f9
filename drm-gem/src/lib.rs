//! Safe, zero-cost wrappers over the Linux DRM stack: devices and capabilities, GEM objects
//! and buffers, dma-buf, fences and KMS.
//!
//! Every ioctl goes through one private module (`sys_call`), every failure names the ioctl
//! by its C macro name together with the errno, and every fd is an `OwnedFd` or a
//! `BorrowedFd`.
//!
//! The whole modeset path (`examples/quickstart.rs`, also run inside every test guest by
//! `kernel-tests/tests/example_modeset.rs`): open vkms, fill a dumb buffer, wrap it in a
//! framebuffer, light the first connected output with one atomic commit and wait for the
//! flip event. Where there is no vkms it says so and succeeds.
//!
//! ```
#![doc = include_str!("../examples/quickstart.rs")]
//! ```
//!
//! Sharing a buffer between devices (`examples/share.rs`, run in the guests by
//! `kernel-tests/tests/example.rs`): a dumb buffer on one device, filled through a mapping,
//! exported as a dma-buf, imported on another device and read back through the importer.
//!
//! ```
#![doc = include_str!("../examples/share.rs")]
//! ```
//!
//! Owners of kernel objects ([`GemObject`], [`DumbBuffer`], [`kms::Framebuffer`],
//! [`kms::PropertyBlob`], [`Syncobj`]) hold their device as a [`DeviceRef`]: `&Device`
//! (what the `Device` methods give) or `Arc<Device>`, so they can share a struct with it.
//!
//! # The `conformance` feature
//!
//! `drm_gem::raw` (every fence ioctl field as the kernel sees it, for conformance tests)
//! bypasses ownership: a raw destroy can destroy a handle a [`Syncobj`] owns, and that
//! `Syncobj`'s drop then destroys whatever reused the number. It exists only with the cargo
//! feature `conformance`; without it this does not compile:
//!
#![cfg_attr(not(feature = "conformance"), doc = "```compile_fail")]
#![cfg_attr(feature = "conformance", doc = "```ignore")]
//! let _ = drm_gem::raw::syncobj_destroy;
//! ```
#![deny(unsafe_code)]

mod caps;
mod deadline;
mod device;
mod dmabuf;
pub mod driver;
mod dumb;
mod error;
mod gem;
mod id;
pub mod kms;
mod mapping;
mod mmap;
#[cfg(feature = "conformance")]
pub mod raw;
mod release;
mod sync_file;
mod syncobj;
mod sys_call;

pub use caps::{Caps, ClientCap, DriverCap};
pub use device::{
    AuthMagic, Device, DeviceRef, DriverVersion, NoNodes, NodeInfo, NodeKind, enumerate,
    enumerate_in,
};
pub use dmabuf::{CpuAccess, DmaBuf, DmaBufInfo, DmaBufSync, PrimeFlags};
pub use drm_fourcc::{DrmFourcc, DrmModifier};
pub use dumb::{DumbBuffer, DumbSpec};
pub use error::{Error, Result, errno_name};
pub use gem::{GemHandle, GemName, GemObject};
pub use mapping::Mapping;
pub use mmap::{Mmap, MmapOptions, Prot, Sharing};
pub use release::{ReleaseCounter, ReleaseFailures, unowned_release_failures};
pub use rustix::io::Errno;
pub use sync_file::{FenceInfo, FenceStatus, SwSyncTimeline, SyncFile, SyncFileInfo};
pub use syncobj::{Syncobj, SyncobjHandle, SyncobjTimeout, SyncobjWaitFlags, Syncobjs};
