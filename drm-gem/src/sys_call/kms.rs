//! Raw KMS calls (framebuffers so far); see the module header of `sys_call` for the safety
//! argument.

use super::*;

drm_ioctl!(safe
    /// Adds a framebuffer over up to four GEM handles (primary nodes).
    DRM_IOCTL_MODE_ADDFB2 => mode_addfb2(&mut sys::drm_mode_fb_cmd2));
drm_ioctl!(safe
    /// Removes a framebuffer (and disables the planes showing it).
    DRM_IOCTL_MODE_RMFB => mode_rmfb(&mut u32));
drm_ioctl!(safe
    /// Reads a framebuffer's layout back; with master or CAP_SYS_ADMIN also fresh GEM
    /// handles to its objects.
    DRM_IOCTL_MODE_GETFB2 => mode_getfb2(&mut sys::drm_mode_fb_cmd2));

drm_ioctl!(unsafe
    /// Lists framebuffer, CRTC, connector and encoder ids.
    DRM_IOCTL_MODE_GETRESOURCES => mode_getresources_raw(&mut sys::drm_mode_card_res));
drm_ioctl!(unsafe
    /// Reads a connector: encoders, modes (probing when `count_modes` is 0 and the caller
    /// is master), properties.
    DRM_IOCTL_MODE_GETCONNECTOR => mode_getconnector_raw(&mut sys::drm_mode_get_connector));
drm_ioctl!(safe
    /// Reads an encoder.
    DRM_IOCTL_MODE_GETENCODER => mode_getencoder(&mut sys::drm_mode_get_encoder));
drm_ioctl!(unsafe
    /// Reads a CRTC (the connector pointer is only read by SETCRTC).
    DRM_IOCTL_MODE_GETCRTC => mode_getcrtc_raw(&mut sys::drm_mode_crtc));
drm_ioctl!(unsafe
    /// Lists plane ids (all of them with the UNIVERSAL_PLANES client cap).
    DRM_IOCTL_MODE_GETPLANERESOURCES => mode_getplaneresources_raw(&mut sys::drm_mode_get_plane_res));
drm_ioctl!(unsafe
    /// Reads a plane and its formats.
    DRM_IOCTL_MODE_GETPLANE => mode_getplane_raw(&mut sys::drm_mode_get_plane));
drm_ioctl!(unsafe
    /// Lists an object's property ids and values.
    DRM_IOCTL_MODE_OBJ_GETPROPERTIES => mode_obj_getproperties_raw(&mut sys::drm_mode_obj_get_properties));
drm_ioctl!(unsafe
    /// Reads a property: name, flags, values, enum entries.
    DRM_IOCTL_MODE_GETPROPERTY => mode_getproperty_raw(&mut sys::drm_mode_get_property));
drm_ioctl!(unsafe
    /// Reads a property blob's bytes.
    DRM_IOCTL_MODE_GETPROPBLOB => mode_getpropblob_raw(&mut sys::drm_mode_get_blob));
drm_ioctl!(unsafe
    /// Creates a property blob from user bytes.
    DRM_IOCTL_MODE_CREATEPROPBLOB => mode_createpropblob_raw(&mut sys::drm_mode_create_blob));
drm_ioctl!(safe
    /// Destroys a property blob this file created.
    DRM_IOCTL_MODE_DESTROYPROPBLOB => mode_destroypropblob(&mut sys::drm_mode_destroy_blob));

/// A slice's length as an ioctl count and its address as an ioctl pointer (0 when empty).
fn count_ptr<T>(s: &mut [T]) -> (u32, u64) {
    let n = u32::try_from(s.len()).unwrap_or(u32::MAX);
    let p = if s.is_empty() {
        0
    } else {
        s.as_mut_ptr() as u64
    };
    (n, p)
}

/// `DRM_IOCTL_MODE_GETRESOURCES` into four id buffers. The returned counts are the kernel's
/// totals, which may exceed the buffers (then only what fitted was copied).
pub(crate) fn mode_getresources(
    fd: BorrowedFd<'_>,
    fbs: &mut [u32],
    crtcs: &mut [u32],
    connectors: &mut [u32],
    encoders: &mut [u32],
) -> Result<sys::drm_mode_card_res, Error> {
    let mut a = sys::drm_mode_card_res::default();
    (a.count_fbs, a.fb_id_ptr) = count_ptr(fbs);
    (a.count_crtcs, a.crtc_id_ptr) = count_ptr(crtcs);
    (a.count_connectors, a.connector_id_ptr) = count_ptr(connectors);
    (a.count_encoders, a.encoder_id_ptr) = count_ptr(encoders);
    // SAFETY: each pointer/count pair is one exclusive slice borrow that outlives the call;
    // the kernel writes at most `count` u32s to each.
    unsafe { mode_getresources_raw(fd, &mut a)? };
    (
        a.fb_id_ptr,
        a.crtc_id_ptr,
        a.connector_id_ptr,
        a.encoder_id_ptr,
    ) = (0, 0, 0, 0);
    Ok(a)
}

/// `DRM_IOCTL_MODE_GETCONNECTOR` of `id` into caller buffers. With an empty `modes` buffer
/// the kernel probes the connector (when the caller is master) before answering.
pub(crate) fn mode_getconnector(
    fd: BorrowedFd<'_>,
    id: u32,
    encoders: &mut [u32],
    modes: &mut [sys::drm_mode_modeinfo],
    props: &mut [u32],
    values: &mut [u64],
) -> Result<sys::drm_mode_get_connector, Error> {
    let mut a = sys::drm_mode_get_connector {
        connector_id: id,
        ..Default::default()
    };
    (a.count_encoders, a.encoders_ptr) = count_ptr(encoders);
    (a.count_modes, a.modes_ptr) = count_ptr(modes);
    let n = props.len().min(values.len());
    (a.count_props, a.props_ptr) = count_ptr(&mut props[..n]);
    (_, a.prop_values_ptr) = count_ptr(&mut values[..n]);
    // SAFETY: every pointer/count pair is an exclusive slice borrow of at least `count`
    // elements of the type the kernel writes (u32 ids, drm_mode_modeinfo, u32, u64), alive
    // for the whole call.
    unsafe { mode_getconnector_raw(fd, &mut a)? };
    (a.encoders_ptr, a.modes_ptr, a.props_ptr, a.prop_values_ptr) = (0, 0, 0, 0);
    Ok(a)
}

/// `DRM_IOCTL_MODE_GETCRTC` of `id`.
pub(crate) fn mode_getcrtc(fd: BorrowedFd<'_>, id: u32) -> Result<sys::drm_mode_crtc, Error> {
    let mut a = sys::drm_mode_crtc {
        crtc_id: id,
        ..Default::default()
    };
    // SAFETY: the only pointer (set_connectors_ptr) is null with a zero count, and GETCRTC
    // never reads it.
    unsafe { mode_getcrtc_raw(fd, &mut a)? };
    Ok(a)
}

/// `DRM_IOCTL_MODE_GETPLANERESOURCES` into `ids`; returns the kernel's total.
pub(crate) fn mode_getplaneresources(fd: BorrowedFd<'_>, ids: &mut [u32]) -> Result<u32, Error> {
    let mut a = sys::drm_mode_get_plane_res::default();
    (a.count_planes, a.plane_id_ptr) = count_ptr(ids);
    // SAFETY: the pointer/count pair is an exclusive borrow of `ids` for the call.
    unsafe { mode_getplaneresources_raw(fd, &mut a)? };
    Ok(a.count_planes)
}

/// `DRM_IOCTL_MODE_GETPLANE` of `id`, its formats into `formats`.
pub(crate) fn mode_getplane(
    fd: BorrowedFd<'_>,
    id: u32,
    formats: &mut [u32],
) -> Result<sys::drm_mode_get_plane, Error> {
    let mut a = sys::drm_mode_get_plane {
        plane_id: id,
        ..Default::default()
    };
    (a.count_format_types, a.format_type_ptr) = count_ptr(formats);
    // SAFETY: the pointer/count pair is an exclusive borrow of `formats` for the call.
    unsafe { mode_getplane_raw(fd, &mut a)? };
    a.format_type_ptr = 0;
    Ok(a)
}

/// `DRM_IOCTL_MODE_OBJ_GETPROPERTIES` of one object; returns the kernel's total.
pub(crate) fn mode_obj_getproperties(
    fd: BorrowedFd<'_>,
    obj_id: u32,
    obj_type: u32,
    props: &mut [u32],
    values: &mut [u64],
) -> Result<u32, Error> {
    let n = props.len().min(values.len());
    let mut a = sys::drm_mode_obj_get_properties {
        obj_id,
        obj_type,
        ..Default::default()
    };
    (a.count_props, a.props_ptr) = count_ptr(&mut props[..n]);
    (_, a.prop_values_ptr) = count_ptr(&mut values[..n]);
    // SAFETY: both pointers are exclusive borrows of `count_props` elements (u32, u64).
    unsafe { mode_obj_getproperties_raw(fd, &mut a)? };
    Ok(a.count_props)
}

/// `DRM_IOCTL_MODE_GETPROPERTY` of `id` into caller buffers.
pub(crate) fn mode_getproperty(
    fd: BorrowedFd<'_>,
    id: u32,
    values: &mut [u64],
    enums: &mut [sys::drm_mode_property_enum],
) -> Result<sys::drm_mode_get_property, Error> {
    let mut a = sys::drm_mode_get_property {
        prop_id: id,
        ..Default::default()
    };
    (a.count_values, a.values_ptr) = count_ptr(values);
    (a.count_enum_blobs, a.enum_blob_ptr) = count_ptr(enums);
    // SAFETY: both pointers are exclusive borrows of `count_*` elements of the types the
    // kernel writes (u64 values, drm_mode_property_enum entries).
    unsafe { mode_getproperty_raw(fd, &mut a)? };
    (a.values_ptr, a.enum_blob_ptr) = (0, 0);
    Ok(a)
}

/// `DRM_IOCTL_MODE_GETPROPBLOB` of `id` into `data`; returns the blob's length (the kernel
/// copies only when `data.len()` equals it exactly).
pub(crate) fn mode_getpropblob(fd: BorrowedFd<'_>, id: u32, data: &mut [u8]) -> Result<u32, Error> {
    let mut a = sys::drm_mode_get_blob {
        blob_id: id,
        ..Default::default()
    };
    (a.length, a.data) = count_ptr(data);
    // SAFETY: the pointer/length pair is an exclusive borrow of `data` for the call.
    unsafe { mode_getpropblob_raw(fd, &mut a)? };
    Ok(a.length)
}

/// `DRM_IOCTL_MODE_CREATEPROPBLOB` from `data`; returns the new blob id.
pub(crate) fn mode_createpropblob(fd: BorrowedFd<'_>, data: &[u8]) -> Result<u32, Error> {
    let mut a = sys::drm_mode_create_blob {
        data: if data.is_empty() {
            0
        } else {
            data.as_ptr() as u64
        },
        length: u32::try_from(data.len()).unwrap_or(u32::MAX),
        blob_id: 0,
    };
    // SAFETY: the kernel only reads `length` bytes at `data`, a shared borrow alive for the
    // call (a length clamped to u32::MAX is refused by the kernel before any read).
    unsafe { mode_createpropblob_raw(fd, &mut a)? };
    Ok(a.blob_id)
}

drm_ioctl!(unsafe
    /// Commits (or tests) an atomic request.
    DRM_IOCTL_MODE_ATOMIC => mode_atomic_raw(&mut sys::drm_mode_atomic));
drm_ioctl!(safe
    /// Reads a CRTC's current vblank sequence and its timestamp.
    DRM_IOCTL_CRTC_GET_SEQUENCE => crtc_get_sequence(&mut sys::drm_crtc_get_sequence));
drm_ioctl!(safe
    /// Asks for an event when a CRTC reaches a vblank sequence.
    DRM_IOCTL_CRTC_QUEUE_SEQUENCE => crtc_queue_sequence(&mut sys::drm_crtc_queue_sequence));
drm_ioctl!(safe
    /// Waits for (or asks for an event at) a vblank, legacy interface.
    DRM_IOCTL_WAIT_VBLANK => wait_vblank_raw(&mut sys::drm_wait_vblank));

/// `DRM_IOCTL_WAIT_VBLANK` with a request; returns the kernel's reply.
pub(crate) fn wait_vblank(
    fd: BorrowedFd<'_>,
    request: sys::drm_wait_vblank_request,
) -> Result<sys::drm_wait_vblank_reply, Error> {
    let mut u = sys::drm_wait_vblank { request };
    wait_vblank_raw(fd, &mut u)?;
    // SAFETY: both union variants are plain integers of the same size (any bit pattern is
    // valid), and the kernel fills the reply variant on success.
    Ok(unsafe { u.reply })
}
drm_ioctl!(safe
    /// Queues a page flip of a CRTC's primary plane (event with `user_data` on request).
    DRM_IOCTL_MODE_PAGE_FLIP => mode_page_flip(&mut sys::drm_mode_crtc_page_flip));

/// The arrays of one atomic request, in the kernel's layout.
pub(crate) struct AtomicArrays<'a> {
    pub objs: &'a [u32],
    pub counts: &'a [u32],
    pub props: &'a [u32],
    pub values: &'a [u64],
}

/// `DRM_IOCTL_MODE_ATOMIC` over `arrays`, where the values at `fence_at` (indices into
/// `props`/`values`) are replaced by the addresses of fence slots owned by this call; returns
/// the call's result and the fd the kernel wrote into each slot (-1: none).
///
/// Every other property must be confirmed by `is_pointer` (`Ok(false)`) not to take a user
/// pointer; a property it calls a pointer is refused before the kernel is asked.
pub(crate) fn mode_atomic(
    fd: BorrowedFd<'_>,
    flags: u32,
    arrays: &AtomicArrays<'_>,
    fence_at: &[usize],
    mut is_pointer: impl FnMut(u32) -> Result<bool, Error>,
    user_data: u64,
) -> Result<(Result<(), Error>, Vec<i32>), Error> {
    let total: usize = arrays.counts.iter().map(|&c| c as usize).sum();
    if arrays.objs.len() != arrays.counts.len()
        || arrays.props.len() != total
        || arrays.values.len() != total
        || fence_at.iter().any(|&i| i >= total)
    {
        return Err(Error::InvalidArgument {
            what: "atomic request arrays do not agree".into(),
        });
    }
    for (i, &p) in arrays.props.iter().enumerate() {
        if !fence_at.contains(&i) && is_pointer(p)? {
            return Err(Error::InvalidArgument {
                what: format!(
                    "property {p} takes a user pointer: ask for the fence with \
                     AtomicRequest::out_fence or writeback_fence instead"
                ),
            });
        }
    }
    let mut slots: Vec<i32> = vec![-1; fence_at.len()];
    let mut values = arrays.values.to_vec();
    for (slot, &i) in slots.iter_mut().zip(fence_at) {
        values[i] = (slot as *mut i32) as u64;
    }
    let ptr = |p: *const u8, empty: bool| if empty { 0 } else { p as u64 };
    let mut a = sys::drm_mode_atomic {
        flags,
        count_objs: u32::try_from(arrays.objs.len()).unwrap_or(u32::MAX),
        objs_ptr: ptr(arrays.objs.as_ptr().cast(), arrays.objs.is_empty()),
        count_props_ptr: ptr(arrays.counts.as_ptr().cast(), arrays.counts.is_empty()),
        props_ptr: ptr(arrays.props.as_ptr().cast(), arrays.props.is_empty()),
        prop_values_ptr: ptr(values.as_ptr().cast(), values.is_empty()),
        reserved: 0,
        user_data,
    };
    // SAFETY: the kernel reads `count_objs` object ids and per-object counts, then as many
    // property ids and values as the counts add up to: the arrays were checked to have
    // exactly those lengths and live for the call. The only values the kernel treats as
    // user pointers are those of pointer properties: each is the address of one `slots`
    // entry (an i32 the kernel may write, untouched by us until the call returns), and
    // every other property was confirmed above not to be one.
    let r = unsafe { mode_atomic_raw(fd, &mut a) };
    Ok((r, slots))
}

/// Reads whatever events are queued on a DRM fd into `buf` (blocking until at least one
/// arrives unless the caller polled first). Returns the bytes read.
pub(crate) fn read_events(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Error> {
    retry(|| rustix::io::read(fd, &mut *buf)).map_err(|e| Error::syscall("read", e))
}
