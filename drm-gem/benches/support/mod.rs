//! Devices, the `drm` crate's device type, leak counters and where criterion writes.

pub(crate) mod count;
pub(crate) mod paired;
pub(crate) mod report;
pub(crate) mod sys_call;

use drm_gem::{Caps, Device, NodeKind};
use rustix::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;

/// The `drm` crate's view of one of our open files (same fd, so the same node and open file
/// for all four implementations).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Card<'a>(pub(crate) BorrowedFd<'a>);

impl AsFd for Card<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0
    }
}

impl drm::Device for Card<'_> {}
impl drm::control::Device for Card<'_> {}

/// Whether missing devices are a failure: inside a `vm` guest, or under strict mode.
pub(crate) fn strict() -> bool {
    std::env::var_os("VM_GUEST").is_some()
        || std::env::var_os("KERNEL_TESTS_STRICT").is_some_and(|v| v != "0")
}

/// Where criterion writes its estimates: `$CRITERION_HOME` if set; else `/tmp/criterion` in a
/// guest (whose shared checkout is read-only); else `target/criterion` beside this binary
/// (`target/release/deps/<bench>`). Sets `CRITERION_HOME` so criterion agrees.
pub(crate) fn criterion_home() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    let dir = if std::env::var_os("VM_GUEST").is_some() {
        PathBuf::from("/tmp/criterion")
    } else {
        std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("criterion")))
            .unwrap_or_else(|| PathBuf::from("/tmp/criterion"))
    };
    sys_call::set_criterion_home(&dir);
    dir
}

/// Entries of `/proc/self/fd`.
pub(crate) fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Lines of `/proc/self/maps`.
pub(crate) fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |s| s.lines().count())
}

/// The devices the benchmarks run on.
#[derive(Debug)]
pub(crate) struct Rig {
    /// The dumb-buffer node (vkms's primary node in a guest).
    pub(crate) dumb: Device,
    /// Its driver name.
    pub(crate) dumb_driver: String,
    /// PRIME exporter and importer (separate open files), where a pair exists.
    pub(crate) prime: Option<(Device, Device)>,
    /// Driver names of the pair, `exporter -> importer`.
    pub(crate) prime_names: String,
}

/// Opens the primary node of a driver named one of `names`.
fn open_driver(names: &[&str]) -> Result<Option<(Device, String)>, String> {
    let Ok(nodes) = drm_gem::enumerate() else {
        return Ok(None);
    };
    let Some(n) = nodes.iter().find(|n| {
        n.kind == NodeKind::Primary && n.driver.as_deref().is_some_and(|d| names.contains(&d))
    }) else {
        return Ok(None);
    };
    let dev = Device::open(&n.path).map_err(|e| format!("open {}: {e}", n.path.display()))?;
    Ok(Some((dev, n.driver.clone().unwrap_or_default())))
}

/// The first primary node that says it supports dumb buffers (outside a guest, where vkms
/// may be absent: a real desktop GPU then serves).
fn any_dumb_node() -> Option<(Device, String)> {
    for n in drm_gem::enumerate().ok()? {
        if n.kind != NodeKind::Primary {
            continue;
        }
        let Ok(dev) = Device::open(&n.path) else {
            continue;
        };
        if Caps::probe(&dev).is_ok_and(|c| c.dumb_buffer) {
            return Some((dev, n.driver.unwrap_or_default()));
        }
    }
    None
}

impl Rig {
    /// Opens vkms (or, outside a guest, any dumb-capable node) and a PRIME pair chosen by
    /// `DRM_CAP_PRIME` as kernel-tests/tests/gem.rs does: vkms exports where it can (not on
    /// 5.10), else vgem exports to vkms. `Ok(None)`: no device here and not strict.
    pub(crate) fn open() -> Result<Option<Self>, String> {
        let (dumb, dumb_driver) = match open_driver(&["vkms"])? {
            Some(d) => d,
            None if strict() => return Err("no vkms primary node in this guest".into()),
            None => match any_dumb_node() {
                Some(d) => d,
                None => return Ok(None),
            },
        };
        let vkms = open_driver(&["vkms"])?;
        let vgem = open_driver(&["vgem"])?;
        let mut prime = None;
        let mut prime_names = String::from("none");
        if let (Some((vkms, _)), Some((vgem, _))) = (vkms, vgem) {
            let kc = Caps::probe(&vkms).map_err(|e| format!("vkms caps: {e}"))?;
            let gc = Caps::probe(&vgem).map_err(|e| format!("vgem caps: {e}"))?;
            if kc.prime_export && gc.prime_import {
                prime = Some((vkms, vgem));
                prime_names = "vkms -> vgem".into();
            } else if gc.prime_export && kc.prime_import {
                prime = Some((vgem, vkms));
                prime_names = "vgem -> vkms".into();
            }
        }
        if prime.is_none() && strict() {
            return Err("neither vkms nor vgem can export to the other in this guest".into());
        }
        Ok(Some(Self {
            dumb,
            dumb_driver,
            prime,
            prime_names,
        }))
    }
}
