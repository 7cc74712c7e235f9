//! Counting the release calls that fail in `Drop`.
//!
//! A `Drop` cannot return an error and must never panic, yet its release call can fail for
//! ordinary reasons: after the driver is unbound every ioctl on the open file answers
//! `ENODEV`. Each type that releases a kernel object on drop records such a failure on the
//! [`Device`](crate::Device) it belongs to ([`Device::release_failures`](crate::Device::release_failures));
//! objects that belong to no device (a [`CpuAccess`](crate::CpuAccess) bracket, an
//! [`Mmap`](crate::Mmap), which every [`Mapping`](crate::Mapping) holds) record it in one
//! process-wide counter, [`unowned_release_failures`], unless the owner named another
//! ([`Mmap::record_release_failures_in`](crate::Mmap::record_release_failures_in)).

use rustix::io::Errno;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`ReleaseCounter`] has seen: how many release calls failed in `Drop`, and the
/// latest one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReleaseFailures {
    /// How many release calls failed.
    pub count: u64,
    /// The latest failure: the call (the ioctl's C macro name, or the syscall) and the
    /// errno. `None` while `count` is 0.
    pub last: Option<(&'static str, Errno)>,
}

/// A never-panicking, thread-safe counter of failed release calls (an atomic count and the
/// latest failure behind a mutex that is never held across a call and tolerates poison).
#[derive(Debug, Default)]
pub struct ReleaseCounter {
    count: AtomicU64,
    last: Mutex<Option<(&'static str, Errno)>>,
}

impl ReleaseCounter {
    /// A counter at zero (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }

    /// Records that the release call `call` failed with `errno`.
    #[cold]
    pub fn record(&self, call: &'static str, errno: Errno) {
        // The mutex is taken only here and in `get`, never while the holder can panic, so
        // taking it cannot deadlock; a poisoned one is used as it is.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some((call, errno));
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `r` when it is an error of a kernel call (one with an errno); an error
    /// without one (which no release call returns) is recorded as `EIO`.
    #[inline]
    pub(crate) fn check(&self, call: &'static str, r: crate::Result<()>) {
        if let Err(e) = r {
            self.record(call, e.errno().unwrap_or(Errno::IO));
        }
    }

    /// What has been recorded so far.
    pub fn get(&self) -> ReleaseFailures {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        ReleaseFailures {
            count: self.count.load(Ordering::Relaxed),
            last: *last,
        }
    }
}

static UNOWNED: ReleaseCounter = ReleaseCounter::new();

/// Failed releases of objects that belong to no [`Device`](crate::Device): the
/// `DMA_BUF_IOCTL_SYNC` end of a [`CpuAccess`](crate::CpuAccess) and the `munmap` of an
/// [`Mmap`](crate::Mmap) (of every [`Mapping`](crate::Mapping)), counted for the whole
/// process.
pub fn unowned_release_failures() -> ReleaseFailures {
    UNOWNED.get()
}

pub(crate) fn unowned() -> &'static ReleaseCounter {
    &UNOWNED
}
