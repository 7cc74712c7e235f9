//! QEMU kernel-matrix harness: builds the project's guest kernels from Debian source
//! packages (cached by package version and config-fragment hash), or prepares Debian's own
//! stock kernel images with an out-of-tree vkms ([`stock`]), boots them with real GPU
//! drivers (vkms, vgem, virtio-gpu, bochs, qxl, test_hmm, an emulated NVDIMM, udmabuf,
//! sw_sync), runs any host program or test suite inside, and reports results over a framed
//! channel that kernel messages cannot corrupt.
//!
//! ```
//! use vm::guest::{DeviceKind, sh_quote};
//! assert_eq!(DeviceKind::parse("virtio-gpu"), Some(DeviceKind::VirtioGpu));
//! assert_eq!(sh_quote("it's"), "'it'\\''s'");
//! let framed = vm::stream::encode("exit 0");
//! assert_eq!(vm::stream::parse(framed.as_bytes()).records, [vm::stream::Record::Exit { code: 0 }]);
//! ```

pub mod accel;
pub mod apt;
pub mod build;
pub mod buildlog;
pub mod cache;
pub mod catalog;
pub mod cpio;
pub mod error;
pub mod guest;
pub mod kconfig;
pub mod lane;
pub mod matrix;
pub mod oops;
pub mod powercut;
pub mod prepare;
pub mod program;
pub mod report;
pub mod runner;
pub mod stock;
pub mod stream;
pub mod util;
pub mod wbcache;
