//! Raw KMS calls (framebuffers so far); see the module header of `sys_call` for the safety
//! argument.

use super::*;
use std::mem::MaybeUninit;

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

/// Element types the kernel writes into KMS output arrays: plain integers and structs of
/// integers, for which every bit pattern is a valid value.
///
/// # Safety
/// Implement only for types with no invalid bit patterns and no drop glue.
pub(crate) unsafe trait OutElem: Copy {}
// SAFETY: integers: every bit pattern is a valid value.
unsafe impl OutElem for u32 {}
// SAFETY: integers: every bit pattern is a valid value.
unsafe impl OutElem for u64 {}
// SAFETY: a bindgen struct of integers and a c_char array: every bit pattern is valid.
unsafe impl OutElem for sys::drm_mode_modeinfo {}
// SAFETY: a bindgen struct of a u64 and a c_char array: every bit pattern is valid.
unsafe impl OutElem for sys::drm_mode_property_enum {}

/// Slots the kernel fills in a KMS list query: uninitialised memory (a stack array or a
/// Vec's spare capacity, never zeroed: under emulation zeroing guess-sized buffers cost
/// more than the ioctl) and how many of them the kernel initialised. Only the sys_call
/// wrappers set that number, right after the ioctl that wrote them.
pub(crate) struct OutBuf<'a, T> {
    slots: &'a mut [MaybeUninit<T>],
    len: usize,
}

impl<'a, T: OutElem> OutBuf<'a, T> {
    /// Empty slots.
    pub(crate) fn new(slots: &'a mut [MaybeUninit<T>]) -> Self {
        Self { slots, len: 0 }
    }

    /// How many slots there are.
    pub(crate) fn room(&self) -> usize {
        self.slots.len()
    }

    /// What the kernel wrote (empty before a call, and when its answer did not fit).
    pub(crate) fn filled(&self) -> &[T] {
        // SAFETY: `len` is 0 or was set by `adopt` right after a successful ioctl that
        // initialised the first `len` slots; `T: OutElem` makes those bytes valid `T`s.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast::<T>(), self.len) }
    }

    /// The slots as an ioctl (count, pointer) pair, at most `max` of them; forgets what was
    /// filled before.
    fn offer(&mut self, max: usize) -> (u32, u64) {
        self.len = 0;
        let n = self.slots.len().min(max).min(u32::MAX as usize);
        let p = if n == 0 {
            0
        } else {
            self.slots.as_mut_ptr() as u64
        };
        (n as u32, p)
    }

    /// Adopts the kernel's answer for slots offered as `offered`: every KMS list query
    /// writes exactly `total` elements when `total <= offered` (and, when more did not fit,
    /// none or the first `offered`, which are not used).
    fn adopt(&mut self, offered: u32, total: u32) {
        if total <= offered {
            self.len = total as usize;
        }
    }
}

/// `DRM_IOCTL_MODE_GETRESOURCES` into four id buffers (their slots are offered; each holds
/// the kernel's ids afterwards, or nothing when they did not fit). The returned counts are
/// the kernel's totals.
pub(crate) fn mode_getresources(
    fd: BorrowedFd<'_>,
    fbs: &mut OutBuf<'_, u32>,
    crtcs: &mut OutBuf<'_, u32>,
    connectors: &mut OutBuf<'_, u32>,
    encoders: &mut OutBuf<'_, u32>,
) -> Result<sys::drm_mode_card_res, Error> {
    let mut a = sys::drm_mode_card_res::default();
    (a.count_fbs, a.fb_id_ptr) = fbs.offer(usize::MAX);
    (a.count_crtcs, a.crtc_id_ptr) = crtcs.offer(usize::MAX);
    (a.count_connectors, a.connector_id_ptr) = connectors.offer(usize::MAX);
    (a.count_encoders, a.encoder_id_ptr) = encoders.offer(usize::MAX);
    let offered = [
        a.count_fbs,
        a.count_crtcs,
        a.count_connectors,
        a.count_encoders,
    ];
    // SAFETY: each pointer/count pair is the slots of one exclusively borrowed OutBuf
    // that outlives the call; the kernel writes at most `count` u32s to each.
    unsafe { mode_getresources_raw(fd, &mut a)? };
    fbs.adopt(offered[0], a.count_fbs);
    crtcs.adopt(offered[1], a.count_crtcs);
    connectors.adopt(offered[2], a.count_connectors);
    encoders.adopt(offered[3], a.count_encoders);
    (
        a.fb_id_ptr,
        a.crtc_id_ptr,
        a.connector_id_ptr,
        a.encoder_id_ptr,
    ) = (0, 0, 0, 0);
    Ok(a)
}

/// `DRM_IOCTL_MODE_GETCONNECTOR` of `id` into caller buffers (their slots are offered;
/// each holds the kernel's entries afterwards, or nothing when they did not fit). With no
/// slots for modes the kernel probes the connector (when the caller is master) before
/// answering.
pub(crate) fn mode_getconnector(
    fd: BorrowedFd<'_>,
    id: u32,
    encoders: &mut OutBuf<'_, u32>,
    modes: &mut OutBuf<'_, sys::drm_mode_modeinfo>,
    props: &mut OutBuf<'_, u32>,
    values: &mut OutBuf<'_, u64>,
) -> Result<sys::drm_mode_get_connector, Error> {
    let mut a = sys::drm_mode_get_connector {
        connector_id: id,
        ..Default::default()
    };
    (a.count_encoders, a.encoders_ptr) = encoders.offer(usize::MAX);
    (a.count_modes, a.modes_ptr) = modes.offer(usize::MAX);
    let n = props.room().min(values.room());
    (a.count_props, a.props_ptr) = props.offer(n);
    (_, a.prop_values_ptr) = values.offer(n);
    let offered = [a.count_encoders, a.count_modes, a.count_props];
    // SAFETY: every pointer/count pair is the slots of an exclusively borrowed OutBuf
    // with room for at least `count` elements of the type the kernel writes (u32 ids,
    // drm_mode_modeinfo, u32, u64; props and values share one count), alive for the call.
    unsafe { mode_getconnector_raw(fd, &mut a)? };
    encoders.adopt(offered[0], a.count_encoders);
    modes.adopt(offered[1], a.count_modes);
    props.adopt(offered[2], a.count_props);
    values.adopt(offered[2], a.count_props);
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

/// `DRM_IOCTL_MODE_GETPLANERESOURCES` into `ids` (slots offered, as for GETRESOURCES);
/// returns the kernel's total.
pub(crate) fn mode_getplaneresources(
    fd: BorrowedFd<'_>,
    ids: &mut OutBuf<'_, u32>,
) -> Result<u32, Error> {
    let mut a = sys::drm_mode_get_plane_res::default();
    (a.count_planes, a.plane_id_ptr) = ids.offer(usize::MAX);
    let offered = a.count_planes;
    // SAFETY: the pointer/count pair is the slots of `ids`, exclusively borrowed
    // for the call.
    unsafe { mode_getplaneresources_raw(fd, &mut a)? };
    ids.adopt(offered, a.count_planes);
    Ok(a.count_planes)
}

/// `DRM_IOCTL_MODE_GETPLANE` of `id`, its formats into `formats` (slots offered).
pub(crate) fn mode_getplane(
    fd: BorrowedFd<'_>,
    id: u32,
    formats: &mut OutBuf<'_, u32>,
) -> Result<sys::drm_mode_get_plane, Error> {
    let mut a = sys::drm_mode_get_plane {
        plane_id: id,
        ..Default::default()
    };
    (a.count_format_types, a.format_type_ptr) = formats.offer(usize::MAX);
    let offered = a.count_format_types;
    // SAFETY: the pointer/count pair is the slots of `formats`, exclusively
    // borrowed for the call.
    unsafe { mode_getplane_raw(fd, &mut a)? };
    formats.adopt(offered, a.count_format_types);
    a.format_type_ptr = 0;
    Ok(a)
}

/// `DRM_IOCTL_MODE_OBJ_GETPROPERTIES` of one object (slots offered); returns the kernel's
/// total.
pub(crate) fn mode_obj_getproperties(
    fd: BorrowedFd<'_>,
    obj_id: u32,
    obj_type: u32,
    props: &mut OutBuf<'_, u32>,
    values: &mut OutBuf<'_, u64>,
) -> Result<u32, Error> {
    let n = props.room().min(values.room());
    let mut a = sys::drm_mode_obj_get_properties {
        obj_id,
        obj_type,
        ..Default::default()
    };
    (a.count_props, a.props_ptr) = props.offer(n);
    (_, a.prop_values_ptr) = values.offer(n);
    let offered = a.count_props;
    // SAFETY: both pointers are the slots of exclusively borrowed OutBufs with room
    // for `count_props` elements each (u32, u64).
    unsafe { mode_obj_getproperties_raw(fd, &mut a)? };
    props.adopt(offered, a.count_props);
    values.adopt(offered, a.count_props);
    Ok(a.count_props)
}

/// `DRM_IOCTL_MODE_GETPROPERTY` of `id` into caller buffers (slots offered).
pub(crate) fn mode_getproperty(
    fd: BorrowedFd<'_>,
    id: u32,
    values: &mut OutBuf<'_, u64>,
    enums: &mut OutBuf<'_, sys::drm_mode_property_enum>,
) -> Result<sys::drm_mode_get_property, Error> {
    let mut a = sys::drm_mode_get_property {
        prop_id: id,
        ..Default::default()
    };
    (a.count_values, a.values_ptr) = values.offer(usize::MAX);
    (a.count_enum_blobs, a.enum_blob_ptr) = enums.offer(usize::MAX);
    let offered = [a.count_values, a.count_enum_blobs];
    // SAFETY: both pointers are the slots of exclusively borrowed OutBufs with room
    // for `count_*` elements of the types the kernel writes (u64 values,
    // drm_mode_property_enum entries).
    unsafe { mode_getproperty_raw(fd, &mut a)? };
    values.adopt(offered[0], a.count_values);
    enums.adopt(offered[1], a.count_enum_blobs);
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
/// arrives unless the caller polled first, or the fd is O_NONBLOCK). Returns the bytes read.
/// One read, no retry: the caller handles EINTR and EAGAIN against its deadline.
pub(crate) fn read_events(fd: BorrowedFd<'_>, buf: &mut [u8]) -> rustix::io::Result<usize> {
    rustix::io::read(fd, buf)
}

drm_ioctl!(unsafe
    /// Sets a CRTC's mode, framebuffer and connectors (legacy modeset).
    DRM_IOCTL_MODE_SETCRTC => mode_setcrtc_raw(&mut sys::drm_mode_crtc));
drm_ioctl!(safe
    /// Shows a framebuffer on a plane (legacy).
    DRM_IOCTL_MODE_SETPLANE => mode_setplane(&mut sys::drm_mode_set_plane));
drm_ioctl!(safe
    /// Sets or moves a CRTC's cursor (with hotspot).
    DRM_IOCTL_MODE_CURSOR2 => mode_cursor2(&mut sys::drm_mode_cursor2));
drm_ioctl!(unsafe
    /// Reads a CRTC's gamma ramps.
    DRM_IOCTL_MODE_GETGAMMA => mode_getgamma_raw(&mut sys::drm_mode_crtc_lut));
drm_ioctl!(unsafe
    /// Sets a CRTC's gamma ramps.
    DRM_IOCTL_MODE_SETGAMMA => mode_setgamma_raw(&mut sys::drm_mode_crtc_lut));
drm_ioctl!(unsafe
    /// Flushes damaged rectangles of a framebuffer.
    DRM_IOCTL_MODE_DIRTYFB => mode_dirtyfb_raw(&mut sys::drm_mode_fb_dirty_cmd));
drm_ioctl!(safe
    /// Removes a framebuffer without turning off the planes showing it (6.8+).
    DRM_IOCTL_MODE_CLOSEFB => mode_closefb(&mut sys::drm_mode_closefb));
drm_ioctl!(unsafe
    /// Leases objects to a new file (the lessee fd is returned).
    DRM_IOCTL_MODE_CREATE_LEASE => mode_create_lease_raw(&mut sys::drm_mode_create_lease));
drm_ioctl!(unsafe
    /// Lists this master's lessees.
    DRM_IOCTL_MODE_LIST_LESSEES => mode_list_lessees_raw(&mut sys::drm_mode_list_lessees));
drm_ioctl!(unsafe
    /// Lists the objects leased to this file.
    DRM_IOCTL_MODE_GET_LEASE => mode_get_lease_raw(&mut sys::drm_mode_get_lease));
drm_ioctl!(safe
    /// Revokes a lease.
    DRM_IOCTL_MODE_REVOKE_LEASE => mode_revoke_lease(&mut sys::drm_mode_revoke_lease));

/// `DRM_IOCTL_MODE_SETCRTC` over `connectors` (empty with fb 0 and no mode: off).
pub(crate) fn mode_setcrtc(
    fd: BorrowedFd<'_>,
    mut arg: sys::drm_mode_crtc,
    connectors: &[u32],
) -> Result<(), Error> {
    arg.count_connectors = u32::try_from(connectors.len()).unwrap_or(u32::MAX);
    arg.set_connectors_ptr = if connectors.is_empty() {
        0
    } else {
        connectors.as_ptr() as u64
    };
    // SAFETY: the kernel reads `count_connectors` u32 ids at `set_connectors_ptr`, which
    // is exactly `connectors`, borrowed for the call.
    unsafe { mode_setcrtc_raw(fd, &mut arg) }
}

/// `DRM_IOCTL_MODE_GETGAMMA` / `SETGAMMA` over three equal ramps.
pub(crate) fn mode_gamma(
    fd: BorrowedFd<'_>,
    crtc: u32,
    red: &mut [u16],
    green: &mut [u16],
    blue: &mut [u16],
    set: bool,
) -> Result<(), Error> {
    if red.len() != green.len() || red.len() != blue.len() {
        return Err(Error::InvalidArgument {
            what: "gamma ramps of different lengths".into(),
        });
    }
    let mut a = sys::drm_mode_crtc_lut {
        crtc_id: crtc,
        gamma_size: u32::try_from(red.len()).unwrap_or(u32::MAX),
        red: red.as_mut_ptr() as u64,
        green: green.as_mut_ptr() as u64,
        blue: blue.as_mut_ptr() as u64,
    };
    // SAFETY: the kernel reads (SETGAMMA) or writes (GETGAMMA) `gamma_size` u16s at each
    // of the three pointers, exclusive borrows of exactly that length; it refuses a size
    // other than the CRTC's before touching them.
    unsafe {
        if set {
            mode_setgamma_raw(fd, &mut a)
        } else {
            mode_getgamma_raw(fd, &mut a)
        }
    }
}

/// `DRM_IOCTL_MODE_DIRTYFB` of `fb` with `clips` (x1, y1, x2, y2 as u16; empty: all).
pub(crate) fn mode_dirtyfb(
    fd: BorrowedFd<'_>,
    fb: u32,
    clips: &[sys::drm_clip_rect],
) -> Result<(), Error> {
    let mut a = sys::drm_mode_fb_dirty_cmd {
        fb_id: fb,
        flags: 0,
        color: 0,
        num_clips: u32::try_from(clips.len()).unwrap_or(u32::MAX),
        clips_ptr: if clips.is_empty() {
            0
        } else {
            clips.as_ptr() as u64
        },
    };
    // SAFETY: the kernel reads `num_clips` drm_clip_rect at `clips_ptr`, exactly `clips`.
    unsafe { mode_dirtyfb_raw(fd, &mut a) }
}

/// `DRM_IOCTL_MODE_CREATE_LEASE` of `objects`; returns (lessee id, lessee fd number).
pub(crate) fn mode_create_lease(
    fd: BorrowedFd<'_>,
    objects: &[u32],
    flags: u32,
) -> Result<(u32, i32), Error> {
    let mut a = sys::drm_mode_create_lease {
        object_ids: if objects.is_empty() {
            0
        } else {
            objects.as_ptr() as u64
        },
        object_count: u32::try_from(objects.len()).unwrap_or(u32::MAX),
        flags,
        lessee_id: 0,
        fd: 0,
    };
    // SAFETY: the kernel reads `object_count` u32 ids at `object_ids`, exactly `objects`.
    unsafe { mode_create_lease_raw(fd, &mut a)? };
    Ok((a.lessee_id, a.fd as i32))
}

/// `DRM_IOCTL_MODE_LIST_LESSEES` into `ids`; returns the kernel's total.
pub(crate) fn mode_list_lessees(
    fd: BorrowedFd<'_>,
    ids: &mut OutBuf<'_, u32>,
) -> Result<u32, Error> {
    let mut a = sys::drm_mode_list_lessees::default();
    (a.count_lessees, a.lessees_ptr) = ids.offer(usize::MAX);
    let offered = a.count_lessees;
    // SAFETY: the kernel writes at most `count_lessees` u32s at `lessees_ptr`, the slots
    // of the exclusively borrowed `ids`.
    unsafe { mode_list_lessees_raw(fd, &mut a)? };
    ids.adopt(offered, a.count_lessees);
    Ok(a.count_lessees)
}

/// `DRM_IOCTL_MODE_GET_LEASE` into `ids`; returns the kernel's total.
pub(crate) fn mode_get_lease(fd: BorrowedFd<'_>, ids: &mut OutBuf<'_, u32>) -> Result<u32, Error> {
    let mut a = sys::drm_mode_get_lease::default();
    (a.count_objects, a.objects_ptr) = ids.offer(usize::MAX);
    let offered = a.count_objects;
    // SAFETY: the kernel writes at most `count_objects` u32s at `objects_ptr`, the slots
    // of the exclusively borrowed `ids`.
    unsafe { mode_get_lease_raw(fd, &mut a)? };
    ids.adopt(offered, a.count_objects);
    Ok(a.count_objects)
}
