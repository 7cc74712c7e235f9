//! A probe for the kernel's PRIME lookup after a second handle of an exported object is
//! closed.
//!
//! Until upstream commit ea2aa97ca37a ("drm/gem: Fix GEM handle release errors", mainline
//! 6.0; stable 5.15.68), closing a GEM handle removed the open file's PRIME lookup entry
//! by the object's dma-buf, not by the handle. An object with two handles in one file
//! (`GEM_OPEN` of its flink name, `GETFB`) exported through both has two entries for one
//! dma-buf; closing one handle could remove the other's entry and leave its own, so a
//! later `PRIME_FD_TO_HANDLE` of that dma-buf answered the closed number: dead, or by then
//! the handle of another object. 5.15.0 does this; 5.10.262 and 6.1 carry the fix (their
//! `drm_prime_remove_buf_handle` takes the handle).

use drm_gem::{Device, DumbBuffer, DumbSpec, PrimeFlags};
use rustix::fd::{AsFd, AsRawFd};

/// The fix, as tests and notes name it.
pub const FIX: &str = "ea2aa97ca37a 'drm/gem: Fix GEM handle release errors' (6.0; 5.15.68)";
/// The fix's mainline release.
pub const FIX_MAINLINE: (u32, u32) = (6, 0);
/// The stable series known to carry it, with the first patch level (the 5.15.68 review
/// series of 2022-09-13 lists it as patch 010/121).
pub const FIX_STABLE: &[(u32, u32, u32)] = &[(5, 15, 68)];

/// What the probe's re-import answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The handle the object still has: the lookup entry of the closed handle went with it.
    Exact,
    /// The closed handle's number (`reused`: by then another object's handle).
    Stale {
        /// The number answered.
        handle: u32,
        /// Whether a buffer created after the close had been given that number.
        reused: bool,
    },
}

/// Runs the sequence on a new open file of `master`'s device (authenticated by `master`,
/// which must be DRM master), so that whatever a faulty kernel leaves in the file's lookup
/// table goes when the probe closes it: a dumb buffer A, a second handle B through its
/// flink name, A and B exported (one dma-buf, two lookup entries), B closed, a new dumb
/// buffer C (the lowest free number: B's), then A's dma-buf imported again.
pub fn probe(master: &Device) -> Result<Lookup, String> {
    let e = |what: &str, x: drm_gem::Error| format!("prime probe: {what}: {x}");
    let again = format!("/proc/self/fd/{}", master.as_fd().as_raw_fd());
    let dev = Device::open(&again).map_err(|x| e("reopen", x))?;
    let magic = dev.magic().map_err(|x| e("GET_MAGIC", x))?;
    master.authenticate(magic).map_err(|x| e("AUTH_MAGIC", x))?;
    let spec = DumbSpec::new(64, 64, 32);
    let a = DumbBuffer::create(&dev, spec).map_err(|x| e("CREATE_DUMB", x))?;
    let name = a.gem().flink().map_err(|x| e("GEM_FLINK", x))?;
    let (b, _) = dev.open_name(name).map_err(|x| e("GEM_OPEN", x))?;
    let buf = dev
        .export(a.gem(), PrimeFlags::default())
        .map_err(|x| e("PRIME_HANDLE_TO_FD (A)", x))?;
    let through_b = dev
        .export(&b, PrimeFlags::default())
        .map_err(|x| e("PRIME_HANDLE_TO_FD (B)", x))?;
    let closed = b.handle().get();
    drop(b);
    let c = DumbBuffer::create(&dev, spec).map_err(|x| e("CREATE_DUMB (C)", x))?;
    let imported = dev
        .import(buf.as_fd())
        .map_err(|x| e("PRIME_FD_TO_HANDLE", x))?;
    let got = imported.handle().get();
    let verdict = if got == a.gem().handle().get() {
        Lookup::Exact
    } else {
        Lookup::Stale {
            handle: got,
            reused: got == c.gem().handle().get(),
        }
    };
    if verdict
        == (Lookup::Stale {
            handle: closed,
            reused: false,
        })
    {
        // A dead number: GEM_CLOSE would answer ENOENT; closing the file releases it all.
        let _ = imported.into_raw();
    } else {
        drop(imported);
    }
    drop((through_b, buf, c, a));
    Ok(verdict)
}

/// The probe's verdict against the named fix: `Err` when a kernel that must carry the fix
/// answered a stale handle; otherwise a line for the log, which names the fix either way.
pub fn verdict(lookup: Lookup) -> Result<String, String> {
    let fixed = crate::kernel_release::has_fix(FIX_MAINLINE, FIX_STABLE);
    let known = crate::kernel_release::fix_known(FIX_MAINLINE, FIX_STABLE);
    let (a, b, c) = crate::kernel_release::release();
    match (lookup, fixed, known) {
        (Lookup::Exact, _, _) => Ok(format!(
            "{a}.{b}.{c}: PRIME lookup exact after closing a second handle (has {FIX})"
        )),
        (Lookup::Stale { .. }, true, _) => Err(format!(
            "{a}.{b}.{c} should carry {FIX}, yet the re-import answered {lookup:?}"
        )),
        (Lookup::Stale { .. }, false, true) => Ok(format!(
            "{a}.{b}.{c}: stale PRIME lookup entry ({lookup:?}), as expected before {FIX}"
        )),
        (Lookup::Stale { .. }, false, false) => Ok(format!(
            "{a}.{b}.{c}: stale PRIME lookup entry ({lookup:?}): this series lacks {FIX} \
             (no backport listed for it; the kernel's answer is the fact)"
        )),
    }
}
