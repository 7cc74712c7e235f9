//! Synthetic NVIDIA GPUs for the guest tests of issue 28 (`mod nvidia_common;`): no NVIDIA
//! GPU or driver is in the guests, so some of the guest's PCI GPUs are made "NVIDIA" by a
//! `/proc/driver/nvidia/gpus/<bus id>/information` tree (a tmpfs over `/proc/driver`)
//! giving them device minors, and by the nodes `/dev/nvidia0`, `/dev/nvidia1` (195:0,
//! 195:1) and `/dev/nvidiactl` (195:255). With no driver bound to major 195, an open a
//! device program allows fails with ENXIO and one it denies with EPERM.

use std::path::PathBuf;

/// The synthetic NVIDIA GPUs, undone on drop.
pub struct SyntheticNvidia;

impl SyntheticNvidia {
    /// `gpus`: (PCI bus id, device minor).
    pub fn new(gpus: &[(&str, u32)]) -> SyntheticNvidia {
        use rustix::fs::{CWD, FileType, Mode, mknodat};
        for (name, minor) in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)] {
            let p = format!("/dev/{name}");
            let _ = std::fs::remove_file(&p);
            mknodat(
                CWD,
                p.as_str(),
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o666),
                rustix::fs::makedev(195, minor),
            )
            .unwrap_or_else(|e| panic!("mknod {p}: {e}"));
        }
        rustix::mount::mount(
            "drmtool-test",
            "/proc/driver",
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            c"mode=755",
        )
        .expect("a tmpfs over /proc/driver");
        for (bus, minor) in gpus {
            let d = PathBuf::from(format!("/proc/driver/nvidia/gpus/{bus}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("information"),
                format!(
                    "Model: \t\t Synthetic GPU\nIRQ:   \t\t 0\nGPU UUID: \t GPU-0000\n\
                     Device Minor: \t {minor}\nBus Location: \t {bus}\n"
                ),
            )
            .unwrap();
        }
        SyntheticNvidia
    }
}

impl Drop for SyntheticNvidia {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount("/proc/driver", rustix::mount::UnmountFlags::DETACH);
        for n in ["nvidia0", "nvidia1", "nvidiactl"] {
            let _ = std::fs::remove_file(format!("/dev/{n}"));
        }
    }
}
