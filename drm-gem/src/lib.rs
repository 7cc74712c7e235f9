//! Safe, zero-cost wrappers over the Linux DRM stack: devices and capabilities, GEM objects
//! and buffers, dma-buf, fences and KMS.
//!
//! Every ioctl goes through one private module (`sys_call`), every failure names the ioctl
//! by its C macro name together with the errno, and every fd is an `OwnedFd` or a
//! `BorrowedFd`.
//!
//! ```no_run
//! // Print the driver of every DRM node on this machine.
//! match drm_gem::enumerate() {
//!     Ok(nodes) => {
//!         for n in nodes {
//!             let dev = drm_gem::Device::open(&n.path)?;
//!             println!("{}: {} ({})", n.path.display(), dev.driver()?.name, n.kind.as_str());
//!         }
//!     }
//!     Err(why) => println!("no DRM nodes: {why:?}"),
//! }
//! # Ok::<(), drm_gem::Error>(())
//! ```
#![deny(unsafe_code)]

mod caps;
mod device;
mod dmabuf;
pub mod driver;
mod dumb;
mod error;
mod gem;
mod mapping;
mod sync_file;
mod sys_call;

pub use caps::{Caps, ClientCap, DriverCap};
pub use device::{Device, DriverVersion, NoNodes, NodeInfo, NodeKind, enumerate, enumerate_in};
pub use dmabuf::{CpuAccess, DmaBuf, PrimeFlags};
pub use dumb::{DumbBuffer, DumbSpec};
pub use error::{Error, Result};
pub use gem::{GemHandle, GemName, GemObject};
pub use mapping::Mapping;
pub use rustix::io::Errno;
pub use sync_file::{FenceInfo, FenceStatus, SwSyncTimeline, SyncFile, SyncFileInfo};
