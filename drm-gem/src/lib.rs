//! Safe, zero-cost wrappers over the Linux DRM stack: devices and capabilities, GEM objects
//! and buffers, dma-buf, fences and KMS.
//!
//! Every ioctl goes through one private module (`sys_call`), every failure names the ioctl
//! by its C macro name together with the errno, and every fd is an `OwnedFd` or a
//! `BorrowedFd`.
//!
//! The example below (`examples/share.rs`, also run inside the test guests by
//! `kernel-tests/tests/example.rs`) creates a dumb buffer on one device, fills it through a
//! mapping, exports it as a dma-buf, imports it on another device and reads the same bytes
//! back through the importer. Where there are no DRM nodes it says so and succeeds.
//!
//! ```
#![doc = include_str!("../examples/share.rs")]
//! ```
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
    AuthMagic, Device, DriverVersion, NoNodes, NodeInfo, NodeKind, enumerate, enumerate_in,
};
pub use dmabuf::{CpuAccess, DmaBuf, DmaBufInfo, DmaBufSync, PrimeFlags};
pub use dumb::{DumbBuffer, DumbSpec};
pub use error::{Error, Result, errno_name};
pub use gem::{GemHandle, GemName, GemObject};
pub use mapping::Mapping;
pub use mmap::{Mmap, MmapOptions, Prot, Sharing};
pub use release::{ReleaseCounter, ReleaseFailures, unowned_release_failures};
pub use rustix::io::Errno;
pub use sync_file::{FenceInfo, FenceStatus, SwSyncTimeline, SyncFile, SyncFileInfo};
pub use syncobj::{Syncobj, SyncobjHandle, SyncobjTimeout, SyncobjWaitFlags, Syncobjs};
