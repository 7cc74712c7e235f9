//! Atomic modesetting: a request builder, commit with fences and events, and `explain`,
//! which names the object and property the kernel rejects.

use super::ids::{ConnectorId, CrtcId, ModeObject, PlaneId, PropertyId};
use crate::device::Device;
use crate::error::Result;
use crate::sync_file::SyncFile;
use crate::sys_call::{self, AtomicArrays};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd};
use std::collections::BTreeMap;

bitflags::bitflags! {
    /// `DRM_MODE_ATOMIC_*` and `DRM_MODE_PAGE_FLIP_*` commit flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AtomicFlags: u32 {
        /// Send a flip-complete event per CRTC (`DRM_MODE_PAGE_FLIP_EVENT`).
        const PAGE_FLIP_EVENT = 0x01;
        /// Flip without waiting for vblank where supported (`DRM_MODE_PAGE_FLIP_ASYNC`).
        const PAGE_FLIP_ASYNC = 0x02;
        /// Only check the request (`DRM_MODE_ATOMIC_TEST_ONLY`).
        const TEST_ONLY = 0x100;
        /// Return before the commit is done (`DRM_MODE_ATOMIC_NONBLOCK`).
        const NONBLOCK = 0x200;
        /// Allow a full modeset (`DRM_MODE_ATOMIC_ALLOW_MODESET`).
        const ALLOW_MODESET = 0x400;
    }
}

/// Which fence a pointer property asks the kernel to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceKind {
    /// A CRTC's `OUT_FENCE_PTR`: signalled when the commit is shown.
    CrtcOut,
    /// A writeback connector's `WRITEBACK_OUT_FENCE_PTR`: signalled when the frame is
    /// written to its framebuffer.
    Writeback,
}

/// An atomic request: objects and properties kept sorted, later sets overwrite earlier ones.
///
/// The lifetime ties in-fence fds to the request, so they stay open until it is committed.
#[derive(Debug, Default, Clone)]
pub struct AtomicRequest<'f> {
    objs: BTreeMap<u32, BTreeMap<u32, u64>>,
    fences: Vec<(u32, u32, FenceKind)>,
    in_fences: Vec<BorrowedFd<'f>>,
}

/// A value an atomic request can carry: the kernel takes every property value as a `u64`.
pub trait AtomicValue {
    /// The value as the kernel reads it.
    fn to_raw(self) -> u64;
}

macro_rules! unsigned_value {
    ($($t:ty),*) => {$(
        impl AtomicValue for $t {
            fn to_raw(self) -> u64 {
                u64::from(self)
            }
        }
    )*};
}
unsigned_value!(u64, u32, u16, u8, bool);

/// Signed range properties (`CRTC_X`, `CRTC_Y`) are sign-extended to 64 bits, as the kernel's
/// `I642U64` reads them back.
macro_rules! signed_value {
    ($($t:ty),*) => {$(
        impl AtomicValue for $t {
            fn to_raw(self) -> u64 {
                i64::from(self) as u64
            }
        }
    )*};
}
signed_value!(i64, i32, i16);

/// An object id as the value of an object property (`CRTC_ID`, `FB_ID`, `MODE_ID`).
impl<O: ModeObject> AtomicValue for O {
    fn to_raw(self) -> u64 {
        u64::from(self.raw())
    }
}

/// What a commit handed back.
#[derive(Debug)]
pub struct Committed {
    /// The fences asked for with [`AtomicRequest::out_fence`] and
    /// [`AtomicRequest::writeback_fence`], by object id, in request order.
    pub fences: Vec<(u32, FenceKind, SyncFile)>,
}

/// Why a request fails, found by [`Device::explain_atomic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The error of the whole request.
    pub error: String,
    /// Each (object, property, value) whose removal alone makes the request pass.
    pub culprits: Vec<Culprit>,
    /// Objects whose removal (all their properties) alone makes the request pass, when no
    /// single property does.
    pub culprit_objects: Vec<u32>,
}

/// One property the kernel rejects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    /// The object's id.
    pub object: u32,
    /// The property.
    pub property: PropertyId,
    /// Its name, if the kernel reports one.
    pub name: Option<String>,
    /// The value that was set.
    pub value: u64,
}

impl<'f> AtomicRequest<'f> {
    /// An empty request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `prop` of `obj` to `value` (overwriting an earlier set of the same pair).
    /// Pointer properties ([`POINTER_PROPERTIES`]) are refused at commit: use
    /// [`out_fence`](Self::out_fence) and [`writeback_fence`](Self::writeback_fence). So is
    /// a property whose `DRM_IOCTL_MODE_GETPROPERTY` fails: the commit returns that error
    /// before the kernel is asked.
    ///
    /// `value` is anything [`AtomicValue`]: a number, a bool, an object id
    /// (`CrtcId`, `FramebufferId`, `BlobId`, ...), or a signed coordinate.
    pub fn set<O: ModeObject>(
        &mut self,
        obj: O,
        prop: PropertyId,
        value: impl AtomicValue,
    ) -> &mut Self {
        self.objs
            .entry(obj.raw())
            .or_default()
            .insert(prop.get(), value.to_raw());
        self
    }

    /// Sets a plane's `IN_FENCE_FD` property (`prop`) to `fence`: the plane waits for it.
    pub fn in_fence(
        &mut self,
        plane: PlaneId,
        prop: PropertyId,
        fence: BorrowedFd<'f>,
    ) -> &mut Self {
        let raw = fence.as_raw_fd();
        self.in_fences.push(fence);
        self.set(plane, prop, raw as u64)
    }

    /// Asks for the CRTC's out fence through its `OUT_FENCE_PTR` property (`prop`).
    pub fn out_fence(&mut self, crtc: CrtcId, prop: PropertyId) -> &mut Self {
        self.fence(crtc.get(), prop, FenceKind::CrtcOut)
    }

    /// Asks for a writeback connector's fence through `WRITEBACK_OUT_FENCE_PTR` (`prop`).
    pub fn writeback_fence(&mut self, conn: ConnectorId, prop: PropertyId) -> &mut Self {
        self.fence(conn.get(), prop, FenceKind::Writeback)
    }

    fn fence(&mut self, obj: u32, prop: PropertyId, kind: FenceKind) -> &mut Self {
        self.fences
            .retain(|(o, p, _)| !(*o == obj && *p == prop.get()));
        self.fences.push((obj, prop.get(), kind));
        // The value is filled in at commit with the address of a slot the commit owns.
        self.objs.entry(obj).or_default().insert(prop.get(), 0);
        self
    }

    /// Removes one property of one object (and the object when it has none left).
    pub fn remove(&mut self, obj: u32, prop: PropertyId) -> Option<u64> {
        let props = self.objs.get_mut(&obj)?;
        let v = props.remove(&prop.get());
        if props.is_empty() {
            self.objs.remove(&obj);
        }
        self.fences
            .retain(|(o, p, _)| !(*o == obj && *p == prop.get()));
        v
    }

    /// Every (object, property, value), sorted by object then property.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.objs
            .iter()
            .flat_map(|(o, ps)| ps.iter().map(move |(p, v)| (*o, *p, *v)))
    }

    /// How many properties are set.
    pub fn len(&self) -> usize {
        self.objs.values().map(BTreeMap::len).sum()
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.objs.is_empty()
    }
}

/// The names of the KMS properties whose value the kernel takes as a user pointer and
/// writes through (`drm_atomic_uapi.c`): a CRTC's `OUT_FENCE_PTR` and a writeback
/// connector's `WRITEBACK_OUT_FENCE_PTR`, both unsigned ranges.
///
/// This list is the contract [`AtomicRequest::set`] relies on: a commit refuses a plain set
/// of any property of one of these names (ask for the fence with
/// [`AtomicRequest::out_fence`] or [`AtomicRequest::writeback_fence`]), and of any property
/// id whose name cannot be read (`DRM_IOCTL_MODE_GETPROPERTY` fails), since then it cannot
/// be shown not to be a pointer. `kernel-tests/tests/pointer_props.rs` checks on every
/// guest kernel and driver that no other property looks like a pointer (an unsigned range
/// whose name ends in `_PTR`).
pub const POINTER_PROPERTIES: &[&str] = &["OUT_FENCE_PTR", "WRITEBACK_OUT_FENCE_PTR"];

impl Device {
    /// Whether property `prop` is a user-pointer property (one of [`POINTER_PROPERTIES`];
    /// cached per device). Fails closed: when its name cannot be read the error is
    /// returned, and the commit fails before the kernel is asked.
    fn is_pointer_prop(&self, prop: u32) -> Result<bool> {
        if let Some(&b) = self
            .pointer_props
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&prop)
        {
            return Ok(b);
        }
        let Some(id) = PropertyId::new(prop) else {
            // Id 0 names no property: the kernel refuses it (ENOENT) without using the value.
            return Ok(false);
        };
        let b = POINTER_PROPERTIES.contains(&self.property(id)?.name.as_str());
        self.pointer_props
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(prop, b);
        Ok(b)
    }

    /// `DRM_IOCTL_MODE_ATOMIC`: commits (or, with `TEST_ONLY`, checks) `req`. Needs the
    /// `ATOMIC` client cap. `user_data` comes back in flip-complete events.
    pub fn atomic_commit(
        &self,
        req: &AtomicRequest<'_>,
        flags: AtomicFlags,
        user_data: u64,
    ) -> Result<Committed> {
        let mut objs = Vec::with_capacity(req.objs.len());
        let mut counts = Vec::with_capacity(req.objs.len());
        let mut props = Vec::with_capacity(req.len());
        let mut values = Vec::with_capacity(req.len());
        let mut fence_at = vec![0usize; req.fences.len()];
        for (&o, ps) in &req.objs {
            objs.push(o);
            counts.push(ps.len() as u32);
            for (&p, &v) in ps {
                if let Some(i) = req
                    .fences
                    .iter()
                    .position(|(fo, fp, _)| *fo == o && *fp == p)
                {
                    fence_at[i] = props.len();
                }
                props.push(p);
                values.push(v);
            }
        }
        let arrays = AtomicArrays {
            objs: &objs,
            counts: &counts,
            props: &props,
            values: &values,
        };
        let (r, slots) = sys_call::mode_atomic(
            self.as_fd(),
            flags.bits(),
            &arrays,
            &fence_at,
            |p| self.is_pointer_prop(p),
            user_data,
        )?;
        // Adopt every fd the kernel wrote, even on failure, so none leaks.
        let mut fences = Vec::new();
        for ((o, _, kind), raw) in req.fences.iter().zip(slots) {
            if raw >= 0 {
                fences.push((
                    *o,
                    *kind,
                    SyncFile::from_fd(sys_call::own_fd("DRM_IOCTL_MODE_ATOMIC", raw)?),
                ));
            }
        }
        r?;
        Ok(Committed { fences })
    }

    /// Bisects a failing request with `TEST_ONLY` commits: first each single property
    /// removed, then each whole object, and reports those whose removal makes the rest
    /// pass. Nothing is committed. Returns `None` when the request passes as it is.
    pub fn explain_atomic(
        &self,
        req: &AtomicRequest<'_>,
        flags: AtomicFlags,
    ) -> Result<Option<Explanation>> {
        let test =
            (flags | AtomicFlags::TEST_ONLY) - AtomicFlags::NONBLOCK - AtomicFlags::PAGE_FLIP_EVENT;
        let error = match self.atomic_commit(req, test, 0) {
            Ok(_) => return Ok(None),
            Err(e) => e.to_string(),
        };
        let mut culprits = Vec::new();
        for (o, p, v) in req.entries().collect::<Vec<_>>() {
            let mut less = req.clone();
            let Some(pid) = PropertyId::new(p) else {
                continue;
            };
            less.remove(o, pid);
            if self.atomic_commit(&less, test, 0).is_ok() {
                culprits.push(Culprit {
                    object: o,
                    property: pid,
                    name: self.property(pid).ok().map(|x| x.name),
                    value: v,
                });
            }
        }
        let mut culprit_objects = Vec::new();
        if culprits.is_empty() {
            for &o in req.objs.keys() {
                let mut less = req.clone();
                less.objs.remove(&o);
                less.fences.retain(|(fo, _, _)| *fo != o);
                if self.atomic_commit(&less, test, 0).is_ok() {
                    culprit_objects.push(o);
                }
            }
        }
        Ok(Some(Explanation {
            error,
            culprits,
            culprit_objects,
        }))
    }
}
