//! Helpers shared by the fence tests (`syncobj`, `dmabuf`, `vgem`): the running kernel's
//! version (for test gating only), fd counting for leak checks (both from `kernel_tests`),
//! and exact-errno assertions.
#![allow(dead_code, unused_macros)]

use drm_gem::{Errno, Error};
use std::fmt::Debug;

/// A loud skip that is not a failure in strict mode: for what the running kernel lacks by
/// its version (the other side is asserted by the caller before skipping).
macro_rules! skip_on_this_kernel {
    ($($why:tt)+) => {{
        let why = format!($($why)+);
        let thread = std::thread::current();
        let test = thread.name().unwrap_or(module_path!());
        eprintln!("SKIP {test}: {why}");
        kernel_tests::log_skip(test, &why);
        return;
    }};
}

/// The running kernel's (major, minor), from uname ([`kernel_tests::kernel_version`]).
/// For test gating and per-kernel expectations only; the library probes instead.
pub fn kernel() -> (u32, u32) {
    kernel_tests::kernel_version()
}

/// Whether the running kernel is at least `major.minor`.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    kernel() >= (major, minor)
}

/// Open fds of this process ([`kernel_tests::open_fds`]), for leak checks.
pub fn fd_count() -> usize {
    kernel_tests::open_fds()
}

/// Asserts that `r` failed in the ioctl `name` with exactly `errno`.
#[track_caller]
pub fn expect_errno<T: Debug>(case: &str, r: drm_gem::Result<T>, name: &str, errno: Errno) {
    match r {
        Err(e @ Error::Ioctl { .. }) if matches!(e, Error::Ioctl { name: n, errno: x } if n == name && x == errno) =>
        {
            eprintln!("ok   {case}: {e}");
        }
        other => panic!("{case}: expected {name} to fail with {errno:?}, got {other:?}"),
    }
}

/// [`expect_errno`] of `call`, run between two kernel censuses of `dev` (and of this
/// process) that must agree: the failing call left nothing behind.
#[track_caller]
pub fn expect_errno_quiet<T: Debug>(
    dev: &drm_gem::Device,
    case: &str,
    call: impl FnOnce() -> drm_gem::Result<T>,
    name: &str,
    errno: Errno,
) {
    let r = kernel_tests::unchanged(dev, case, call);
    expect_errno(case, r, name, errno);
}

/// Asserts that `r` is [`Error::Unsupported`] (decided without asking the kernel).
#[track_caller]
pub fn expect_unsupported<T: Debug>(case: &str, r: drm_gem::Result<T>) {
    match r {
        Err(Error::Unsupported {
            feature,
            reason,
            errno,
        }) => {
            eprintln!("ok   {case}: Unsupported {feature} ({reason}; probe errno {errno:?})");
        }
        other => panic!("{case}: expected Error::Unsupported, got {other:?}"),
    }
}

/// A number that is not an open fd of this process: one that was, and was closed.
pub fn closed_fd() -> i32 {
    kernel_tests::raw::closed_fd_number()
}
