//! The only module of this crate that issues syscalls with raw arguments or touches raw
//! memory.
//!
//! # Safety
//! Every request number comes from `ioctl_sys` (generated from the pinned uapi headers) and
//! is paired with the exact struct type the kernel copies for it (`ioctl-sys/tests` checks
//! the numbers, which encode the struct's size). Both test_hmm's `hmm_dmirror_cmd` and
//! udmabuf's `udmabuf_create_list` lead the kernel to user memory (a bounce buffer, a
//! trailing item array), so the raw calls are `unsafe fn` and the safe wrappers here build
//! those pointers from slices whose lengths they check. DAX mappings are
//! [`drm_gem::Mmap`]s (drm-gem owns their `mmap`, copies and `munmap`); the cache-line
//! flushes here form a pointer into one only after checking the range against it
//! (`Mmap::check_range`), while it is borrowed. Calls that take a caller's address range
//! (`mlock`, `munlock`, the flushes) are `unsafe fn`: their callers vouch that the range is
//! mapped for the whole call.
//!
//! One file per area: `dmirror.rs` (test_hmm), `udmabuf.rs`, `dax.rs` (cache-line
//! flushes and page locking of DAX mappings), `cuda.rs` (feature `cuda`).
#![allow(unsafe_code)]

use drm_gem::Error;
use rustix::io::Errno;

#[cfg(feature = "cuda")]
mod cuda;
mod dax;
mod dmirror;
mod udmabuf;
#[cfg(feature = "cuda")]
pub(crate) use cuda::CudaRegistration;
pub(crate) use dax::*;
pub(crate) use dmirror::*;
pub(crate) use udmabuf::*;

/// Retries `f` while it fails with EINTR (the kernel's answer when a signal arrives during
/// a long fault or migration).
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}

/// `open(2)`, repeated while a signal interrupts it (EINTR: device opens that sleep
/// interruptibly, such as test_hmm's, under a signal storm).
pub(crate) fn open(
    path: impl rustix::path::Arg + Copy,
    flags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
) -> rustix::io::Result<rustix::fd::OwnedFd> {
    retry(|| rustix::fs::open(path, flags, mode))
}

/// The error of a failed ioctl, named by its C macro.
fn ioctl_error(name: &'static str, errno: Errno) -> Error {
    Error::Ioctl { name, errno }
}
