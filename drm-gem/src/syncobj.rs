//! DRM sync objects ("syncobj"): per-open-file containers for a fence (binary) or for a
//! chain of fences keyed by a 64-bit point (timeline), with waits, signalling, transfer
//! between points, fd export and import, and sync_file interop.
//!
//! Support is a property of the driver (`DRIVER_SYNCOBJ`, `DRIVER_SYNCOBJ_TIMELINE`), read
//! once through `DRM_CAP_SYNCOBJ` and `DRM_CAP_SYNCOBJ_TIMELINE` by [`Syncobjs::probe`];
//! where the driver lacks them every call returns [`Error::Unsupported`] without asking the
//! kernel. [`Syncobjs::without_probe`] skips the probe, for callers (conformance tests) that
//! want the kernel's own answer, which is EOPNOTSUPP.

use crate::caps::DriverCap;
use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::sync_file::SyncFile;
use crate::sys_call;
use crate::sys_call::{ArrayOp, handles_u32};
use ioctl_sys::drm as sys;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use std::time::Duration;

crate::id::nonzero_id!(
    /// A sync object handle: a name in one open file's namespace, like a GEM handle.
    SyncobjHandle
);

bitflags::bitflags! {
    /// `DRM_SYNCOBJ_WAIT_FLAGS_*` for waits and eventfd registration. Bits this crate does
    /// not name can be passed with `from_bits_retain`; the kernel rejects unknown ones
    /// with EINVAL.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SyncobjWaitFlags: u32 {
        /// Wait until every object signalled (without it: until any one did).
        const WAIT_ALL = sys::DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL;
        /// An object (or point) with no fence yet is waited for instead of failing with
        /// EINVAL.
        const WAIT_FOR_SUBMIT = sys::DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT;
        /// Timeline waits and eventfds only: wait until the point has a fence (submitted),
        /// not until that fence signalled.
        const WAIT_AVAILABLE = sys::DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE;
    }
}

/// When a sync object wait gives up: an absolute `CLOCK_MONOTONIC` time in nanoseconds, as
/// the kernel takes it (an absolute deadline survives a restarted ioctl unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SyncobjTimeout(i64);

impl SyncobjTimeout {
    /// Do not wait: report the current state (the kernel's timeout 0).
    pub const POLL: Self = Self(0);
    /// Wait without a limit (the kernel caps the wait at its longest timeout).
    pub const FOREVER: Self = Self(i64::MAX);

    /// A deadline at `ns` on `CLOCK_MONOTONIC`; a time already past checks without waiting.
    pub const fn at_ns(ns: i64) -> Self {
        Self(ns)
    }

    /// The current `CLOCK_MONOTONIC` time as a deadline (a wait with it checks without
    /// blocking); `now().as_ns()` is the clock reading deadlines are compared with.
    pub fn now() -> Self {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        Self(
            t.tv_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec),
        )
    }

    /// A deadline `d` from now (saturating at [`SyncobjTimeout::FOREVER`]).
    pub fn after(d: Duration) -> Self {
        let d = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        Self(Self::now().0.saturating_add(d).max(1))
    }

    /// The deadline as the kernel's `timeout_nsec`.
    pub const fn as_ns(self) -> i64 {
        self.0
    }
}

/// Sync objects on one [`Device`], with what its driver supports. Copy it freely: it is a
/// device reference and two flags.
///
/// Methods here take handles, so one call can cover several objects (and a handle that does
/// not exist reaches the kernel, which answers ENOENT or EINVAL). Handles name objects of
/// this device's open file only.
#[derive(Debug, Clone, Copy)]
pub struct Syncobjs<D: DeviceRef> {
    dev: D,
    timeline: bool,
}

impl Device {
    /// [`Syncobjs::probe`] on this device.
    pub fn syncobjs(&self) -> Result<Syncobjs<&Device>> {
        Syncobjs::probe(self)
    }
}

fn unsupported(feature: &'static str, reason: &str, errno: Option<Errno>) -> Error {
    Error::Unsupported {
        feature,
        reason: reason.to_string(),
        errno,
    }
}

impl<D: DeviceRef> Syncobjs<D> {
    /// Asks `DRM_CAP_SYNCOBJ` and `DRM_CAP_SYNCOBJ_TIMELINE` (two `GET_CAP` ioctls).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the driver has no sync objects.
    pub fn probe(dev: D) -> Result<Self> {
        if dev.driver_cap(DriverCap::Syncobj)?.unwrap_or(0) == 0 {
            return Err(unsupported(
                "syncobj",
                "DRM_CAP_SYNCOBJ is 0: the driver has no sync objects",
                None,
            ));
        }
        let timeline = dev.driver_cap(DriverCap::SyncobjTimeline)?.unwrap_or(0) != 0;
        Ok(Self { dev, timeline })
    }

    /// Skips the probe and sends every call to the kernel, timeline calls included. For
    /// tests that check what the kernel itself answers (EOPNOTSUPP without driver support).
    pub fn without_probe(dev: D) -> Self {
        Self {
            dev,
            timeline: true,
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// How this holds its device (the `&Device` or `Arc<Device>` it was made with).
    pub fn device_ref(&self) -> &D {
        &self.dev
    }

    /// Whether timeline calls are available (`DRM_CAP_SYNCOBJ_TIMELINE`; always true after
    /// [`Syncobjs::without_probe`]).
    pub fn timeline(&self) -> bool {
        self.timeline
    }

    fn need_timeline(&self, feature: &'static str) -> Result<()> {
        if self.timeline {
            Ok(())
        } else {
            Err(unsupported(
                feature,
                "DRM_CAP_SYNCOBJ_TIMELINE is 0: the driver has no timeline sync objects",
                None,
            ))
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.dev.as_fd()
    }

    /// `DRM_IOCTL_SYNCOBJ_CREATE`: a new sync object, empty (no fence) or, with `signaled`,
    /// holding an already signalled fence.
    pub fn create(&self, signaled: bool) -> Result<Syncobj<D>> {
        let mut a = sys::drm_syncobj_create {
            handle: 0,
            flags: if signaled {
                sys::DRM_SYNCOBJ_CREATE_SIGNALED
            } else {
                0
            },
        };
        sys_call::syncobj_create(self.fd(), &mut a)?;
        self.adopt("DRM_IOCTL_SYNCOBJ_CREATE", a.handle)
    }

    fn adopt(&self, ioctl: &'static str, raw: u32) -> Result<Syncobj<D>> {
        let handle = SyncobjHandle::new(raw).ok_or(Error::BadReply {
            ioctl,
            what: "sync object handle 0",
        })?;
        Ok(Syncobj {
            objs: self.clone(),
            handle,
            owned: true,
        })
    }

    /// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE`: imports a sync object exported with
    /// [`Syncobj::export`] (by this or another process or device file). Each import makes a
    /// new handle for the same object.
    pub fn import(&self, fd: BorrowedFd<'_>) -> Result<Syncobj<D>> {
        let mut a = sys::drm_syncobj_handle {
            handle: 0,
            flags: 0,
            fd: fd.as_raw_fd(),
            pad: 0,
        };
        sys_call::syncobj_fd_to_handle(self.fd(), &mut a)?;
        self.adopt("DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE", a.handle)
    }

    /// `DRM_IOCTL_SYNCOBJ_WAIT` for binary objects.
    ///
    /// `Ok(None)` when the deadline passed first (ETIME). `Ok(Some(i))` when the wait was
    /// satisfied, with the kernel's `first_signaled`: without [`SyncobjWaitFlags::WAIT_ALL`]
    /// the index of a signalled object; with it, the index of an object that had already
    /// signalled when the wait began, or `u32::MAX` if none had.
    ///
    /// An object without a fence fails with EINVAL unless
    /// [`SyncobjWaitFlags::WAIT_FOR_SUBMIT`] is set. An empty `handles` is EINVAL up to Linux
    /// 6.1 and an immediate success on later kernels.
    pub fn wait(
        &self,
        handles: &[SyncobjHandle],
        flags: SyncobjWaitFlags,
        timeout: SyncobjTimeout,
    ) -> Result<Option<u32>> {
        timed_out_as_none(sys_call::syncobj_wait(
            self.fd(),
            handles_u32(handles),
            timeout.as_ns(),
            flags.bits(),
        ))
    }

    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT`: waits for `points[i]` of `handles[i]` (same
    /// lengths; point 0 of a binary object is its fence). Results as for
    /// [`Syncobjs::wait`].
    pub fn timeline_wait(
        &self,
        handles: &[SyncobjHandle],
        points: &[u64],
        flags: SyncobjWaitFlags,
        timeout: SyncobjTimeout,
    ) -> Result<Option<u32>> {
        self.need_timeline("syncobj timeline wait")?;
        timed_out_as_none(sys_call::syncobj_timeline_wait(
            self.fd(),
            handles_u32(handles),
            points,
            timeout.as_ns(),
            flags.bits(),
        ))
    }

    /// `DRM_IOCTL_SYNCOBJ_RESET`: removes the fence of each object (EINVAL for none).
    pub fn reset(&self, handles: &[SyncobjHandle]) -> Result<()> {
        sys_call::syncobj_array(self.fd(), ArrayOp::Reset, handles_u32(handles), 0)
    }

    /// `DRM_IOCTL_SYNCOBJ_SIGNAL`: gives each object a signalled fence (EINVAL for none).
    pub fn signal(&self, handles: &[SyncobjHandle]) -> Result<()> {
        sys_call::syncobj_array(self.fd(), ArrayOp::Signal, handles_u32(handles), 0)
    }

    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL`: adds a signalled `points[i]` to `handles[i]`.
    /// Point 0 replaces a binary object's fence.
    pub fn timeline_signal(&self, handles: &[SyncobjHandle], points: &[u64]) -> Result<()> {
        self.need_timeline("syncobj timeline signal")?;
        sys_call::syncobj_timeline_signal(self.fd(), handles_u32(handles), points, 0)
    }

    /// `DRM_IOCTL_SYNCOBJ_QUERY`: the latest signalled point of each timeline into
    /// `points`, or with `last_submitted` the latest point that has a fence at all
    /// (`DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED`). A binary object reads as 0.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `last_submitted` on a kernel that does not know the flag.
    pub fn query(
        &self,
        handles: &[SyncobjHandle],
        points: &mut [u64],
        last_submitted: bool,
    ) -> Result<()> {
        self.need_timeline("syncobj timeline query")?;
        let flags = if last_submitted {
            sys::DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED
        } else {
            0
        };
        sys_call::syncobj_query(self.fd(), handles_u32(handles), points, flags).map_err(|e| {
            // With at least one handle, flags are the only thing checked before the
            // handles, so EINVAL here is the kernel rejecting the flag.
            if last_submitted && !handles.is_empty() && e.errno() == Some(Errno::INVAL) {
                unsupported(
                    "DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED",
                    "DRM_IOCTL_SYNCOBJ_QUERY rejected the flag with EINVAL",
                    Some(Errno::INVAL),
                )
            } else {
                e
            }
        })
    }

    /// `DRM_IOCTL_SYNCOBJ_TRANSFER`: copies the fence at `src_point` of `src` to `dst_point`
    /// of `dst`. Point 0 means the object's binary fence, so this moves fences between
    /// binary and timeline objects in either direction. `flags` apply to finding the source
    /// fence ([`SyncobjWaitFlags::WAIT_FOR_SUBMIT`] waits for it to be submitted).
    pub fn transfer(
        &self,
        src: SyncobjHandle,
        src_point: u64,
        dst: SyncobjHandle,
        dst_point: u64,
        flags: SyncobjWaitFlags,
    ) -> Result<()> {
        self.need_timeline("syncobj transfer")?;
        let mut a = sys::drm_syncobj_transfer {
            src_handle: src.get(),
            dst_handle: dst.get(),
            src_point,
            dst_point,
            flags: flags.bits(),
            pad: 0,
        };
        sys_call::syncobj_transfer(self.fd(), &mut a)
    }
}

fn timed_out_as_none(r: Result<u32>) -> Result<Option<u32>> {
    match r {
        Ok(first) => Ok(Some(first)),
        Err(e) if e.errno() == Some(Errno::TIME) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A sync object owned by this process on one [`Device`]; destroyed
/// (`DRM_IOCTL_SYNCOBJ_DESTROY`) on drop. The kernel object lives on while exported fds or
/// other handles refer to it.
///
/// Single-object calls are methods here; calls over several objects (and the
/// multi-handle forms of these) are on [`Syncobjs`].
///
/// ```no_run
/// use drm_gem::{Device, Syncobj, SyncobjTimeout, SyncobjWaitFlags};
/// use std::time::Duration;
///
/// let dev = Device::open("/dev/dri/renderD128")?;
/// // A binary sync object: one fence, replaced by each signal or import.
/// let done = Syncobj::create(&dev, false)?;
/// // Without a fence a plain wait is EINVAL; WAIT_FOR_SUBMIT waits for one to arrive.
/// let ready = done.wait(
///     SyncobjWaitFlags::WAIT_FOR_SUBMIT,
///     SyncobjTimeout::after(Duration::from_millis(10)),
/// )?;
/// assert!(!ready);
/// done.signal()?;
/// assert!(done.wait(SyncobjWaitFlags::empty(), SyncobjTimeout::POLL)?);
/// // Hand the fence to another API as a sync_file, or the object itself to a process.
/// let fence = done.export_sync_file()?;
/// let shared = done.export()?;
/// # let _ = (fence, shared);
/// # Ok::<(), drm_gem::Error>(())
/// ```
#[derive(Debug)]
pub struct Syncobj<D: DeviceRef> {
    objs: Syncobjs<D>,
    /// False after [`Syncobj::into_raw`]: the drop destroys nothing.
    owned: bool,
    handle: SyncobjHandle,
}

impl<D: DeviceRef> Syncobj<D> {
    /// Probes the device ([`Syncobjs::probe`]) and creates one object, empty or signalled.
    pub fn create(dev: D, signaled: bool) -> Result<Self> {
        Syncobjs::probe(dev)?.create(signaled)
    }

    /// The handle, for multi-object calls on [`Syncobjs`]. Does not transfer ownership.
    pub fn handle(&self) -> SyncobjHandle {
        self.handle
    }

    /// The device and what it supports.
    pub fn syncobjs(&self) -> &Syncobjs<D> {
        &self.objs
    }

    /// Gives up ownership without destroying the handle (cf. `OwnedFd::into_raw_fd`).
    pub fn into_raw(mut self) -> SyncobjHandle {
        // Dropped normally (an `Arc<Device>` is released), but without the destroy.
        self.owned = false;
        self.handle
    }

    /// Waits for this object's fence; false on timeout. See [`Syncobjs::wait`].
    pub fn wait(&self, flags: SyncobjWaitFlags, timeout: SyncobjTimeout) -> Result<bool> {
        Ok(self.objs.wait(&[self.handle], flags, timeout)?.is_some())
    }

    /// Waits for `point` of this timeline; false on timeout. See [`Syncobjs::timeline_wait`].
    pub fn timeline_wait(
        &self,
        point: u64,
        flags: SyncobjWaitFlags,
        timeout: SyncobjTimeout,
    ) -> Result<bool> {
        Ok(self
            .objs
            .timeline_wait(&[self.handle], &[point], flags, timeout)?
            .is_some())
    }

    /// Removes the fence.
    pub fn reset(&self) -> Result<()> {
        self.objs.reset(&[self.handle])
    }

    /// Replaces the fence with a signalled one.
    pub fn signal(&self) -> Result<()> {
        self.objs.signal(&[self.handle])
    }

    /// Adds a signalled `point` to this timeline.
    pub fn timeline_signal(&self, point: u64) -> Result<()> {
        self.objs.timeline_signal(&[self.handle], &[point])
    }

    /// The latest signalled point of this timeline (0 for a binary object).
    pub fn query(&self) -> Result<u64> {
        let mut p = [0u64];
        self.objs.query(&[self.handle], &mut p, false)?;
        Ok(p[0])
    }

    /// The latest point of this timeline that has a fence, signalled or not
    /// (`DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED`).
    pub fn last_submitted(&self) -> Result<u64> {
        let mut p = [0u64];
        self.objs.query(&[self.handle], &mut p, true)?;
        Ok(p[0])
    }

    /// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD`: the object itself as an fd (close-on-exec), to
    /// pass to another process or import on another open file with [`Syncobjs::import`].
    pub fn export(&self) -> Result<OwnedFd> {
        let mut a = sys::drm_syncobj_handle {
            handle: self.handle.get(),
            flags: 0,
            fd: -1,
            pad: 0,
        };
        sys_call::syncobj_handle_to_fd(self.objs.fd(), &mut a)?;
        sys_call::own_fd("DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD", a.fd)
    }

    /// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD` with `EXPORT_SYNC_FILE`: the current fence as a
    /// sync_file. EINVAL when the object has no fence.
    pub fn export_sync_file(&self) -> Result<SyncFile> {
        let mut a = sys::drm_syncobj_handle {
            handle: self.handle.get(),
            flags: sys::DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE,
            fd: -1,
            pad: 0,
        };
        sys_call::syncobj_handle_to_fd(self.objs.fd(), &mut a)?;
        Ok(SyncFile::from_fd(sys_call::own_fd(
            "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
            a.fd,
        )?))
    }

    /// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE` with `IMPORT_SYNC_FILE` and this object's handle:
    /// replaces this object's fence with the sync_file's fence. (No new handle is made;
    /// the `handle` field names the target.)
    pub fn import_sync_file(&self, sync_file: BorrowedFd<'_>) -> Result<()> {
        let mut a = sys::drm_syncobj_handle {
            handle: self.handle.get(),
            flags: sys::DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE,
            fd: sync_file.as_raw_fd(),
            pad: 0,
        };
        sys_call::syncobj_fd_to_handle(self.objs.fd(), &mut a)
    }

    /// `DRM_IOCTL_SYNCOBJ_EVENTFD` (since Linux 6.6, timeline drivers): the kernel adds 1 to
    /// `eventfd` once `point` (0 for a binary object) signals, or with
    /// [`SyncobjWaitFlags::WAIT_AVAILABLE`] once it has a fence. One-shot.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a driver without timelines, or a kernel without the ioctl
    /// (probed: an unknown DRM ioctl answers EINVAL where a known one answers ENOENT for
    /// handle 0).
    pub fn eventfd(
        &self,
        point: u64,
        eventfd: BorrowedFd<'_>,
        flags: SyncobjWaitFlags,
    ) -> Result<()> {
        self.objs.need_timeline("syncobj eventfd")?;
        let mut a = sys::drm_syncobj_eventfd {
            handle: self.handle.get(),
            flags: flags.bits(),
            point,
            fd: eventfd.as_raw_fd(),
            pad: 0,
        };
        match sys_call::syncobj_eventfd(self.objs.fd(), &mut a) {
            Err(e) if e.errno() == Some(Errno::INVAL) && !eventfd_ioctl_known(self.objs.fd()) => {
                Err(unsupported(
                    "DRM_IOCTL_SYNCOBJ_EVENTFD",
                    "the kernel does not know the ioctl (added in Linux 6.6)",
                    Some(Errno::INVAL),
                ))
            }
            r => r,
        }
    }
}

/// Whether the kernel has `DRM_IOCTL_SYNCOBJ_EVENTFD`: with valid flags and padding, a
/// kernel that knows it looks handle 0 up (ENOENT); one that does not answers EINVAL.
fn eventfd_ioctl_known(fd: BorrowedFd<'_>) -> bool {
    let mut a = sys::drm_syncobj_eventfd {
        fd: -1,
        ..Default::default()
    };
    sys_call::syncobj_eventfd(fd, &mut a).map_err(|e| e.errno()) != Err(Some(Errno::INVAL))
}

impl<D: DeviceRef> Drop for Syncobj<D> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let mut a = sys::drm_syncobj_destroy {
            handle: self.handle.get(),
            pad: 0,
        };
        // Drop cannot return an error and never panics: a failure (ENODEV after the driver
        // is unbound; the type rules out a double destroy) is counted on the device.
        let r = sys_call::syncobj_destroy(self.objs.fd(), &mut a);
        self.objs.dev.releases.check("DRM_IOCTL_SYNCOBJ_DESTROY", r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_flags() {
        assert!(SyncobjHandle::new(0).is_none());
        assert_eq!(SyncobjHandle::new(9).map(SyncobjHandle::get), Some(9));
        assert_eq!(
            core::mem::size_of::<Option<SyncobjHandle>>(),
            core::mem::size_of::<u32>()
        );
        let hs = [
            SyncobjHandle::new(3).unwrap(),
            SyncobjHandle::new(7).unwrap(),
        ];
        assert_eq!(handles_u32(&hs), &[3, 7]);
        assert_eq!(SyncobjWaitFlags::WAIT_ALL.bits(), 1);
        assert_eq!(SyncobjWaitFlags::WAIT_FOR_SUBMIT.bits(), 2);
        assert_eq!(SyncobjWaitFlags::WAIT_AVAILABLE.bits(), 4);
        assert_eq!(SyncobjWaitFlags::from_bits_retain(0x80).bits(), 0x80);
    }

    #[test]
    fn timeouts_are_absolute_monotonic() {
        let before = SyncobjTimeout::now().as_ns();
        assert!(before > 0);
        let t = SyncobjTimeout::after(Duration::from_secs(1));
        assert!(t.as_ns() >= before + 1_000_000_000);
        assert_eq!(
            SyncobjTimeout::after(Duration::MAX),
            SyncobjTimeout::FOREVER
        );
        assert_eq!(SyncobjTimeout::POLL.as_ns(), 0);
        assert_eq!(SyncobjTimeout::at_ns(5).as_ns(), 5);
    }
}
