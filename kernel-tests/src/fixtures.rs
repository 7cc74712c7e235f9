//! What most tests start from: the node of a driver ([`open_driver`],
//! [`require_driver!`](crate::require_driver)), vkms with client caps ([`vkms()`],
//! [`vkms!`](crate::vkms!)), planes by kind, and leak checks ([`open_fds`], [`no_leak`])
//! that hold under the default parallel test runner.
//!
//! # Fd counts and parallel tests
//!
//! A leak check counts the fds of the whole process, and libtest runs a binary's tests as
//! threads of one process. So every test that opens fds holds a process-wide lock for the
//! rest of its run: shared ([`fds_shared`]) by the fixtures of this module and
//! [`skip!`](crate::skip) (which can write the skip log), exclusive ([`fds_exclusive`]) from
//! a test's first [`open_fds`] on. Tests that open fds run in parallel with each other,
//! but never while a test counts. The lock is held by the test's thread until it ends, so
//! call fixtures and [`open_fds`] on the test's own thread (a helper thread that asked for
//! it while its test counts would wait for the test forever). A test that opens fds
//! without a fixture, in a binary with counting tests, calls [`fds_shared`] first.

use drm_gem::kms::{PlaneId, Snapshot};
use drm_gem::{ClientCap, Device, Error};
use std::cell::Cell;
use std::sync::{Condvar, Mutex};

#[doc(hidden)]
pub use drm_gem::ClientCap as __ClientCap;
#[doc(hidden)]
pub use drm_gem::NodeKind;

/// What the lock's holders are: shared holders, and whether one thread holds it exclusively.
struct FdLock {
    shared: usize,
    exclusive: bool,
}

static FD_LOCK: Mutex<FdLock> = Mutex::new(FdLock {
    shared: 0,
    exclusive: false,
});
static FD_LOCK_CHANGED: Condvar = Condvar::new();

/// How this thread holds the fd lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    No,
    Shared,
    Exclusive,
}

/// This thread's hold, given back when the thread (the test) ends.
struct Hold(Cell<Held>);

impl Drop for Hold {
    fn drop(&mut self) {
        release(self.0.get());
    }
}

thread_local! {
    static HOLD: Hold = const { Hold(Cell::new(Held::No)) };
}

fn lock() -> std::sync::MutexGuard<'static, FdLock> {
    // A test that panicked while holding the mutex left the counts consistent: every
    // change to them is one statement.
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn release(held: Held) {
    let mut l = lock();
    match held {
        Held::No => return,
        Held::Shared => l.shared = l.shared.saturating_sub(1),
        Held::Exclusive => l.exclusive = false,
    }
    drop(l);
    FD_LOCK_CHANGED.notify_all();
}

fn acquire(want: Held) {
    let mut l = lock();
    loop {
        let free = match want {
            Held::Shared => !l.exclusive,
            _ => !l.exclusive && l.shared == 0,
        };
        if free {
            break;
        }
        l = FD_LOCK_CHANGED.wait(l).unwrap_or_else(|e| e.into_inner());
    }
    match want {
        Held::Shared => l.shared += 1,
        Held::Exclusive => l.exclusive = true,
        Held::No => {}
    }
}

/// Declares that this test opens fds: until it ends, no test counting fds runs. A no-op
/// when the test holds the lock already.
pub fn fds_shared() {
    HOLD.with(|h| {
        if h.0.get() == Held::No {
            acquire(Held::Shared);
            h.0.set(Held::Shared);
        }
    });
}

/// Declares that this test counts fds: waits until no other test that opens fds runs,
/// and keeps them out until this one ends. [`open_fds`] calls it.
pub fn fds_exclusive() {
    HOLD.with(|h| match h.0.get() {
        Held::Exclusive => {}
        held => {
            // Not an upgrade in place: two shared holders that both wanted it would wait
            // for each other. Holding nothing while it waits, this test opens nothing.
            release(held);
            h.0.set(Held::No);
            acquire(Held::Exclusive);
            h.0.set(Held::Exclusive);
        }
    });
}

/// How many fds this process has open (entries of `/proc/self/fd`, less the one the
/// listing itself uses), for leak checks. From its first call to its end the test holds
/// the fd lock exclusively ([`fds_exclusive`]), so that no other test opens or closes fds
/// between two counts.
pub fn open_fds() -> usize {
    fds_exclusive();
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count().saturating_sub(1))
        .unwrap_or(0)
}

/// Runs `case` and checks that it left nothing behind: the kernel's [`Census`] of the
/// process and of `dev` (fds, GPU mappings, GEM handles, sync objects, framebuffers, the
/// device's property blobs) is the same before and after, and so is `drm-gem`'s own count
/// of `dev`'s GEM handles. The panic names `what` (the case) and the census diff.
///
/// [`Census`]: crate::census::Census
#[track_caller]
pub fn no_leak<T>(dev: &Device, what: &str, case: impl FnOnce(&Device) -> T) -> T {
    let (before, handles) = (crate::census::Census::take(dev), dev.live_handles());
    let r = case(dev);
    before.assert_unchanged(&crate::census::Census::take(dev), what);
    assert_eq!(
        dev.live_handles(),
        handles,
        "{what}: GEM handles leaked (drm-gem's table)"
    );
    r
}

/// Opens the `kind` node of the first of `drivers` that has one: `Ok(None)` when none has;
/// the error when a node exists but does not open.
pub fn open_driver(drivers: &[&str], kind: NodeKind) -> drm_gem::Result<Option<Device>> {
    fds_shared();
    for d in drivers {
        match Device::open_driver(d, Some(kind)) {
            Ok(dev) => return Ok(Some(dev)),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The node of one of `drivers` (`&["bochs", "bochs-drm"]`), primary unless a
/// [`NodeKind`] follows; skips when the guest was not built with `feature` or has no such
/// node (failing in strict mode), and when the node does not open.
///
/// ```
/// fn vgem_test() {
///     let dev = kernel_tests::require_driver!("vgem", &["vgem"]);
///     let _render = kernel_tests::require_driver!("vgem", &["vgem"], drm_gem::NodeKind::Render);
///     assert_eq!(dev.live_handles(), 0);
/// }
/// # if std::env::var_os("KERNEL_TESTS_STRICT").is_none() { vgem_test(); }
/// ```
#[macro_export]
macro_rules! require_driver {
    ($feature:expr, $drivers:expr) => {
        $crate::require_driver!($feature, $drivers, $crate::fixtures::NodeKind::Primary)
    };
    ($feature:expr, $drivers:expr, $kind:expr) => {{
        $crate::require_feature!($feature);
        match $crate::open_driver($drivers, $kind) {
            Ok(Some(d)) => d,
            Ok(None) => $crate::skip!("no {:?} node of {:?}", $kind, $drivers),
            Err(e) => $crate::skip!("{e}"),
        }
    }};
}

/// vkms's primary node with each of `caps` set to 1 and made DRM master where it can be
/// (not while another file is master); `None` without a vkms node or when a cap is refused.
pub fn vkms(caps: &[ClientCap]) -> Option<Device> {
    let dev = open_driver(&["vkms"], NodeKind::Primary).ok()??;
    for &cap in caps {
        dev.set_client_cap(cap, 1).ok()?;
    }
    dev.set_master().ok();
    Some(dev)
}

/// [`vkms()`] with the client caps given (none by default), skipping when the guest has no
/// vkms (failing in strict mode).
#[macro_export]
macro_rules! vkms {
    () => {
        $crate::vkms!(&[])
    };
    ($caps:expr) => {{
        $crate::require_feature!("vkms");
        let caps: &[$crate::fixtures::__ClientCap] = $caps;
        match $crate::vkms(caps) {
            Some(d) => d,
            None => $crate::skip!("no vkms node with client caps {caps:?}"),
        }
    }};
}

/// The first plane of `snap` whose type (the `type` property) is `kind`: `"Primary"`,
/// `"Overlay"` or `"Cursor"`.
pub fn plane_of_kind(snap: &Snapshot, kind: &str) -> Option<PlaneId> {
    snap.planes
        .iter()
        .find(|p| p.kind.as_deref() == Some(kind))
        .map(|p| p.plane.id)
}
