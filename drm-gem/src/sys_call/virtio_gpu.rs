//! Raw calls for `virtio_gpu` (see the module header of `sys_call` for the safety argument).
//!
//! GETPARAM, GET_CAPS, EXECBUFFER, RESOURCE_CREATE_BLOB and CONTEXT_INIT carry user pointers
//! (GETPARAM's `value` is the *address* of an `int` the kernel writes), so their raw forms
//! are `unsafe fn`; the safe wrappers below build every pointer from a Rust borrow and clear
//! it before the struct is handed back.

use crate::error::Error;
use ioctl_sys::virtgpu as vsys;
use rustix::fd::BorrowedFd;
use rustix::ioctl::{Opcode, Updater, ioctl};
use std::ffi::CStr;

drm_ioctl!(safe
    /// Gets the fake mmap offset of a virtio-gpu object. Nodes: primary and render.
    virtgpu::DRM_IOCTL_VIRTGPU_MAP => virtgpu_map(&mut ioctl_sys::virtgpu::drm_virtgpu_map));
drm_ioctl!(safe
    /// Creates a (2D or virgl 3D) resource with a GEM handle. Nodes: primary and render.
    virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_CREATE => virtgpu_resource_create(&mut ioctl_sys::virtgpu::drm_virtgpu_resource_create));
drm_ioctl!(safe
    /// Reads a resource's size, host resource id and blob memory kind.
    virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_INFO => virtgpu_resource_info(&mut ioctl_sys::virtgpu::drm_virtgpu_resource_info));
drm_ioctl!(safe
    /// Copies a box of a resource from the host (virgl only).
    virtgpu::DRM_IOCTL_VIRTGPU_TRANSFER_FROM_HOST => virtgpu_transfer_from_host(&mut ioctl_sys::virtgpu::drm_virtgpu_3d_transfer_from_host));
drm_ioctl!(safe
    /// Copies a box of a resource to the host (2D or virgl).
    virtgpu::DRM_IOCTL_VIRTGPU_TRANSFER_TO_HOST => virtgpu_transfer_to_host(&mut ioctl_sys::virtgpu::drm_virtgpu_3d_transfer_to_host));
drm_ioctl!(safe
    /// Waits (or polls, with `VIRTGPU_WAIT_NOWAIT`) for a resource's fences.
    virtgpu::DRM_IOCTL_VIRTGPU_WAIT => virtgpu_wait(&mut ioctl_sys::virtgpu::drm_virtgpu_3d_wait));
drm_ioctl!(unsafe
    /// Reads one driver parameter; `value` is the address of an `int` the kernel writes.
    virtgpu::DRM_IOCTL_VIRTGPU_GETPARAM => virtgpu_getparam_raw(&mut ioctl_sys::virtgpu::drm_virtgpu_getparam));
drm_ioctl!(unsafe
    /// Copies a capability set into `addr` (`size` bytes at most).
    virtgpu::DRM_IOCTL_VIRTGPU_GET_CAPS => virtgpu_get_caps_raw(&mut ioctl_sys::virtgpu::drm_virtgpu_get_caps));
drm_ioctl!(unsafe
    /// Submits a command buffer (virgl only); may return an out-fence fd.
    virtgpu::DRM_IOCTL_VIRTGPU_EXECBUFFER => virtgpu_execbuffer_raw(&mut ioctl_sys::virtgpu::drm_virtgpu_execbuffer));
drm_ioctl!(unsafe
    /// Creates a blob resource; `cmd` points at `cmd_size` bytes of host commands.
    virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB => virtgpu_resource_create_blob_raw(&mut ioctl_sys::virtgpu::drm_virtgpu_resource_create_blob));
drm_ioctl!(unsafe
    /// Creates this file's context with parameters read from `ctx_set_params`.
    virtgpu::DRM_IOCTL_VIRTGPU_CONTEXT_INIT => virtgpu_context_init_raw(&mut ioctl_sys::virtgpu::drm_virtgpu_context_init));

/// `DRM_IOCTL_VIRTGPU_GETPARAM` for `param`: the `int` the kernel wrote.
pub(crate) fn virtgpu_getparam(fd: BorrowedFd<'_>, param: u64) -> Result<i32, Error> {
    let mut value: i32 = 0;
    let mut a = vsys::drm_virtgpu_getparam {
        param,
        value: core::ptr::from_mut(&mut value) as u64,
    };
    // SAFETY: `value` points at a live, exclusively borrowed `i32`, the exact `int` the
    // kernel copies out (sizeof(int) bytes); it outlives the call.
    unsafe { virtgpu_getparam_raw(fd, &mut a)? };
    Ok(value)
}

/// `DRM_IOCTL_VIRTGPU_GET_CAPS` into `buf` (the kernel copies at most `buf.len()` bytes).
pub(crate) fn virtgpu_get_caps(
    fd: BorrowedFd<'_>,
    cap_set_id: u32,
    cap_set_ver: u32,
    buf: &mut [u8],
) -> Result<(), Error> {
    let mut a = vsys::drm_virtgpu_get_caps {
        cap_set_id,
        cap_set_ver,
        addr: buf.as_mut_ptr() as u64,
        size: u32::try_from(buf.len()).unwrap_or(u32::MAX),
        pad: 0,
    };
    // SAFETY: `addr`/`size` describe `buf` (size clamped to its length), an exclusive
    // borrow that outlives the call; the kernel writes at most `size` bytes there.
    unsafe { virtgpu_get_caps_raw(fd, &mut a) }
}

/// `DRM_IOCTL_VIRTGPU_EXECBUFFER` with `command` and `bo_handles` as its arrays. The other
/// fields of `a` (flags, fence fd, ring index) are the caller's; the syncobj arrays are
/// zeroed. Returns the struct with the pointers cleared (its `fence_fd` may hold a new fd).
pub(crate) fn virtgpu_execbuffer(
    fd: BorrowedFd<'_>,
    mut a: vsys::drm_virtgpu_execbuffer,
    command: &[u8],
    bo_handles: &[u32],
) -> Result<vsys::drm_virtgpu_execbuffer, Error> {
    let too_big = |what: &str| Error::InvalidArgument {
        what: format!("execbuffer {what} longer than u32::MAX"),
    };
    a.size = u32::try_from(command.len()).map_err(|_| too_big("command"))?;
    a.command = command.as_ptr() as u64;
    a.num_bo_handles = u32::try_from(bo_handles.len()).map_err(|_| too_big("handle list"))?;
    a.bo_handles = if bo_handles.is_empty() {
        0
    } else {
        bo_handles.as_ptr() as u64
    };
    a.syncobj_stride = 0;
    a.num_in_syncobjs = 0;
    a.num_out_syncobjs = 0;
    a.in_syncobjs = 0;
    a.out_syncobjs = 0;
    // SAFETY: `command`/`size` and `bo_handles`/`num_bo_handles` describe two live shared
    // borrows the kernel only reads; the syncobj arrays are empty with null pointers.
    unsafe { virtgpu_execbuffer_raw(fd, &mut a)? };
    a.command = 0;
    a.bo_handles = 0;
    Ok(a)
}

/// `DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB` with `cmd` as the host command bytes (which
/// the caller leaves empty for guest blobs).
pub(crate) fn virtgpu_resource_create_blob(
    fd: BorrowedFd<'_>,
    mut a: vsys::drm_virtgpu_resource_create_blob,
    cmd: &[u8],
) -> Result<vsys::drm_virtgpu_resource_create_blob, Error> {
    a.cmd_size = u32::try_from(cmd.len()).map_err(|_| Error::InvalidArgument {
        what: "blob command longer than u32::MAX".into(),
    })?;
    a.cmd = if cmd.is_empty() {
        0
    } else {
        cmd.as_ptr() as u64
    };
    // SAFETY: `cmd`/`cmd_size` describe a live shared borrow the kernel only reads.
    unsafe { virtgpu_resource_create_blob_raw(fd, &mut a)? };
    a.cmd = 0;
    Ok(a)
}

/// `DRM_IOCTL_VIRTGPU_CONTEXT_INIT` with `params` (plain-value parameters) followed, when
/// given, by `VIRTGPU_CONTEXT_PARAM_DEBUG_NAME` pointing at `debug_name`.
///
/// A `DEBUG_NAME` entry inside `params` is refused: its value is an address, which only
/// `debug_name` may provide.
pub(crate) fn virtgpu_context_init(
    fd: BorrowedFd<'_>,
    params: &[vsys::drm_virtgpu_context_set_param],
    debug_name: Option<&CStr>,
) -> Result<(), Error> {
    if params
        .iter()
        .any(|p| p.param == u64::from(vsys::VIRTGPU_CONTEXT_PARAM_DEBUG_NAME))
    {
        return Err(Error::InvalidArgument {
            what: "VIRTGPU_CONTEXT_PARAM_DEBUG_NAME carries an address; pass the name instead"
                .into(),
        });
    }
    let mut all = params.to_vec();
    if let Some(name) = debug_name {
        all.push(vsys::drm_virtgpu_context_set_param {
            param: u64::from(vsys::VIRTGPU_CONTEXT_PARAM_DEBUG_NAME),
            value: name.as_ptr() as u64,
        });
    }
    let mut a = vsys::drm_virtgpu_context_init {
        num_params: u32::try_from(all.len()).map_err(|_| Error::InvalidArgument {
            what: "too many context parameters".into(),
        })?,
        pad: 0,
        ctx_set_params: if all.is_empty() {
            0
        } else {
            all.as_ptr() as u64
        },
    };
    // SAFETY: `ctx_set_params`/`num_params` describe `all`, a live Vec the kernel only
    // reads; the only address inside it is `debug_name`'s, a NUL-terminated string borrowed
    // for the whole call (the kernel reads at most up to its NUL).
    unsafe { virtgpu_context_init_raw(fd, &mut a) }
}
