//! `drmtool` as a library: `info`, `caps`, `kms`, `hmm_probe` and `pmem` (the subcommands), the parsers behind `drmtool buffers` (fdinfo, dma-buf fdinfo,
//! `/proc/<pid>/maps`, DRM debugfs files), the `/proc` scan that joins them into one
//! report, its table and JSON views, the command line, and the sample client used by the
//! guest tests.
//!
//! Every parser takes text and never fails: lines it cannot read are returned as
//! `malformed`, keys it does not know as `unknown`, so the fuzz targets in `tools/fuzz`
//! and the fixtures in `tools/tests` can drive them directly.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod caps;
pub mod cli;
pub mod debugfs;
pub mod export;
pub mod fdinfo;
pub mod hmm_probe;
pub mod info;
pub mod isolate;
pub mod kms;
pub mod maps;
pub mod outfile;
pub mod pmem;
pub mod probe;
pub mod render;
pub mod sample;
pub mod scan;
pub mod select;
mod sys_call;
pub mod trace;
pub mod untrusted;

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
