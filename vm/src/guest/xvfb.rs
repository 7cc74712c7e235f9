//! virgl's host side: the `VM_VIRGL` switch, and the private X server whose display QEMU's
//! SDL GL window uses.

use super::{DeviceKind, GuestSpec};
use crate::error::{Result, VmError};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether guests get a virgl-capable virtio-gpu (`VM_VIRGL=1`): `virtio-gpu-gl-pci` with
/// an SDL GL display on a private Xvfb, rendering with Mesa's software GL (llvmpipe). Needs
/// Debian's `qemu-system-gui`, `xvfb` and `libgl1-mesa-dri` (scripts/setup installs them).
pub fn virgl() -> bool {
    std::env::var_os("VM_VIRGL").is_some_and(|v| v == "1")
}

/// Refuses virgl next to the bochs or qxl display device.
pub(super) fn refuse_other_displays(spec: &GuestSpec) -> Result<()> {
    if virgl()
        && spec
            .devices
            .iter()
            .any(|d| matches!(d, DeviceKind::Bochs | DeviceKind::Qxl))
    {
        // With another display device first, SDL's GL context is not the one virgl gets
        // (QEMU aborts: "Couldn't find current GLX or EGL context").
        return Err(VmError::with_fix(
            "VM_VIRGL=1 works only without the bochs and qxl devices",
            "pass --device virtio-gpu (and vkms, vgem, ... as needed)",
        ));
    }
    Ok(())
}

/// A private X server for QEMU's GL display; stopped on drop.
#[derive(Debug)]
pub(super) struct Xvfb {
    child: std::process::Child,
    /// Its display, for `DISPLAY` (`:<n>`).
    pub(super) display: String,
}

impl Xvfb {
    /// Starts one on a free display and waits (10 s at most) for its socket.
    pub(super) fn start() -> Result<Self> {
        // A display number of our own: 100 + pid modulo 400, skipping ones in use.
        let base = 100 + std::process::id() % 400;
        for n in base..base + 50 {
            if Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                || Path::new(&format!("/tmp/.X{n}-lock")).exists()
            {
                continue;
            }
            let display = format!(":{n}");
            let child = Command::new("Xvfb")
                .args([
                    display.as_str(),
                    "-screen",
                    "0",
                    "1280x1024x24",
                    "-nolisten",
                    "tcp",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    VmError::with_fix(format!("VM_VIRGL=1 needs Xvfb: {e}"), "scripts/setup")
                })?;
            let mut x = Self { child, display };
            let socket = format!("/tmp/.X11-unix/X{n}");
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if Path::new(&socket).exists() {
                    return Ok(x);
                }
                if x.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = x.child.kill();
        }
        Err(VmError::new(
            "VM_VIRGL=1: Xvfb did not start on any display",
        ))
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
