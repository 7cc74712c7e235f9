//! `drmtool` as a library: the work behind every `drmtool` command, callable without argv.
//!
//! - [`gpu`]: the one ordering of GPUs and the one grammar that names them ([`gpu::GpuSpec`]).
//! - [`scan()`]: who holds which GPU memory (`drmtool buffers`), from the parsers of
//!   [`fdinfo`], [`maps`] and [`debugfs`], joined into a [`Report`]; [`render`] draws it.
//! - [`devices`]: every node in the ordering (`drmtool devices`).
//! - [`dmem`]: GPU memory limits per job through the kernel's device-memory cgroup controller.
//! - [`info`], [`caps`], [`kms`], [`hmm_probe`], [`pmem`]: a device's identity, capability
//!   matrix and KMS state, the HMM and persistent-memory probes.
//! - [`isolate`]: `run` (kernel-enforced GPU isolation), `pick` and `lease`, `slurm`, cgroup
//!   device programs; [`export`]: the Prometheus exporter; [`trace`]: GPU work tracing.
//! - [`vendor`]: the non-DRM nodes of GPUs and accelerators (NVIDIA, `/dev/kfd`,
//!   `/dev/accel`) and which GPU each belongs to; a GPU with such a node and no DRM node
//!   still takes its place in the ordering (issue 28); [`cdi`]: Container Device
//!   Interface specs for them (`drmtool cdi generate`).
//! - [`sysfs`]: bounded reads of kernel text, and what sysfs says of a PCI function.
//! - `cli` (feature `cli`, on by default): the command line, a thin layer that maps flags
//!   to these calls and their errors to exit statuses (`cli::Exit`). Without the feature
//!   the library has no clap in it.
//!
//! Every parser takes text and never fails: lines it cannot read are returned as
//! `malformed`, keys it does not know as `unknown`, so the fuzz targets in `tools/fuzz`
//! and the fixtures in `tools/tests` can drive them directly.
//!
//! ```no_run
//! // The GPUs vgem drives, and how many DRM files are open on each.
//! let gpus = drmtool::gpu::gpus()?;
//! let vgem = drmtool::gpu::select(&["vgem".parse()?], &gpus)?;
//! let report = drmtool::scan(&drmtool::Options::default())?;
//! for g in vgem {
//!     let files: usize = report
//!         .devices
//!         .iter()
//!         .filter(|d| d.nodes.iter().any(|n| g.nodes.iter().any(|m| m.path.display().to_string() == n.path)))
//!         .map(|d| d.clients)
//!         .sum();
//!     println!("GPU {}: {files} open DRM files", g.index);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `tools/examples/library.rs` goes further: a pick, a lease and an isolated job.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod caps;
pub mod cdi;
#[cfg(feature = "cli")]
pub mod cli;
pub mod debugfs;
pub mod devices;
pub mod dmem;
pub mod errno;
pub mod export;
pub mod fdinfo;
pub mod field;
pub mod gpu;
pub mod hmm_probe;
pub mod info;
pub mod isolate;
pub mod kms;
pub mod maps;
pub mod outfile;
pub mod place;
pub mod pmem;
pub mod probe;
pub mod render;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod sample;
pub mod scan;

mod sys_call;
pub mod sysfs;
pub mod top;
pub mod topo;
pub mod trace;
pub mod untrusted;
pub mod vendor;

pub use scan::{Options, Report, SCHEMA_VERSION, scan};
pub use untrusted::Untrusted;

/// Whether fds `fd1` of `pid1` and `fd2` of `pid2` are one open file (`kcmp(KCMP_FILE)`).
///
/// # Errors
/// The errno from the kernel (`ENOSYS` without `CONFIG_KCMP`, `EPERM` without ptrace
/// access, `EBADF`, `ESRCH`).
pub fn same_open_file(pid1: u32, fd1: u32, pid2: u32, fd2: u32) -> Result<bool, rustix::io::Errno> {
    sys_call::same_file(pid1, fd1, pid2, fd2)
}
