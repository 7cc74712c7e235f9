//! Raw ioctls for negative tests: the kernel's own answer to input that `drm-gem`'s safe API
//! refuses before the kernel is asked, or cannot express at all (a stale handle, a closed fd
//! number). The only unsafe code of this crate.
//!
//! # Safety
//! Each request number comes from `ioctl_sys` and is paired with its own argument struct
//! (checked by `ioctl-sys/tests/opcodes.rs`); none of these structs carries a user pointer,
//! so any field values are harmless to the caller's memory.
#![allow(unsafe_code)]

use ioctl_sys::drm as sys;
use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::ioctl::{Opcode, Updater, ioctl};

macro_rules! raw_ioctl {
    ($(#[$m:meta])* $cname:ident => $fname:ident($ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("`", stringify!($cname), "` with exactly the given argument; the errno on failure.")]
        pub fn $fname(fd: BorrowedFd<'_>, mut arg: $ty) -> Result<$ty, Errno> {
            // SAFETY: `$cname` takes exactly one `$ty` (checked by ioctl-sys's opcode
            // tests); `$ty` holds no pointers and `arg` lives for the whole call.
            unsafe { ioctl(fd, Updater::<{ sys::$cname as Opcode }, $ty>::new(&mut arg)) }?;
            Ok(arg)
        }
    };
}

raw_ioctl!(DRM_IOCTL_MODE_CREATE_DUMB => create_dumb(sys::drm_mode_create_dumb));
raw_ioctl!(DRM_IOCTL_MODE_MAP_DUMB => map_dumb(sys::drm_mode_map_dumb));
raw_ioctl!(DRM_IOCTL_MODE_DESTROY_DUMB => destroy_dumb(sys::drm_mode_destroy_dumb));
raw_ioctl!(DRM_IOCTL_GEM_CLOSE => gem_close(sys::drm_gem_close));
raw_ioctl!(DRM_IOCTL_GEM_FLINK => gem_flink(sys::drm_gem_flink));
raw_ioctl!(DRM_IOCTL_GEM_OPEN => gem_open(sys::drm_gem_open));
raw_ioctl!(DRM_IOCTL_PRIME_HANDLE_TO_FD => prime_handle_to_fd(sys::drm_prime_handle));
raw_ioctl!(DRM_IOCTL_PRIME_FD_TO_HANDLE => prime_fd_to_handle(sys::drm_prime_handle));
raw_ioctl!(DRM_IOCTL_MODE_ADDFB2 => addfb2(sys::drm_mode_fb_cmd2));
raw_ioctl!(DRM_IOCTL_MODE_GETFB2 => getfb2(sys::drm_mode_fb_cmd2));

/// A number that is not an open fd of this process right now (the lowest free number after
/// the current ones, just closed).
pub fn closed_fd_number() -> i32 {
    use rustix::fd::AsRawFd;
    let fd = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open /dev/null");
    let n = fd.as_raw_fd();
    drop(fd);
    n
}
