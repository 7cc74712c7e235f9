//! Persistent-memory fixtures: put the guest's NVDIMM namespace into a mode with the host's
//! `ndctl`, make and mount a DAX ext4 on it. Used by `tests/pmem.rs` and the power-cut
//! driver (`src/bin/pmem-powercut.rs`).

use hmm::PmemRegion;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where [`fsdax_mount`] mounts the filesystem.
pub const MNT: &str = "/tmp/pmem-fsdax";

/// Runs a setup command; Err with its output on failure.
pub fn sh(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{prog} {}: {}: {text}", args.join(" "), out.status))
    }
}

/// Whether something is mounted at `dir`.
pub fn mounted(dir: &str) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(dir))
}

/// The NVDIMM's namespace name, or why there is none.
pub fn namespace_name() -> Result<String, String> {
    let regions = PmemRegion::discover().map_err(|e| e.to_string())?;
    regions
        .iter()
        .flat_map(|r| r.namespaces.iter())
        .map(|n| n.name.clone())
        .next()
        .ok_or_else(|| "no pmem namespace (no NVDIMM, or libnvdimm not loaded)".to_string())
}

/// Puts the namespace into `mode` (ndctl's name) and returns its fresh description.
pub fn set_mode(mode: &str) -> Result<hmm::Namespace, String> {
    if !crate::in_guest() {
        return Err("not in a vm guest: namespaces are only reconfigured there".into());
    }
    let ns = namespace_name()?;
    if mounted(MNT) {
        sh("umount", &[MNT])?;
    }
    sh("ndctl", &["create-namespace", "-f", "-e", &ns, "-m", mode])?;
    // The block or char device node appears asynchronously after the mode change.
    for _ in 0..100 {
        let found = PmemRegion::discover()
            .map_err(|e| e.to_string())?
            .into_iter()
            .flat_map(|r| r.namespaces)
            .find(|n| n.name == ns);
        if let Some(n) = found {
            let node = n.dax_device.clone().or_else(|| n.block_device.clone());
            if n.mode.ndctl_name() == mode && node.as_deref().is_some_and(Path::exists) {
                return Ok(n);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Err(format!("{ns} did not show up in mode {mode}"))
}

/// A fresh ext4 on the fsdax namespace, mounted at [`MNT`] (`-o dax` when `dax`).
pub fn fsdax_mount(dax: bool) -> Result<PathBuf, String> {
    let ns = set_mode("fsdax")?;
    let dev = ns
        .block_device
        .ok_or("fsdax namespace without a block device")?;
    let dev = dev.to_string_lossy().into_owned();
    // 4 KiB blocks: DAX needs block size = page size. No orphan_file (5.10's ext4 lacks
    // it) and no metadata_csum (it needs the crc32c crypto module, which the stock guests
    // do not pack).
    sh(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-b",
            "4096",
            "-O",
            "^orphan_file,^metadata_csum,^metadata_csum_seed",
            &dev,
        ],
    )?;
    std::fs::create_dir_all(MNT).map_err(|e| e.to_string())?;
    let opts = if dax { "dax" } else { "defaults" };
    sh("mount", &["-o", opts, &dev, MNT])?;
    Ok(PathBuf::from(MNT))
}

/// Mounts the existing filesystem of the fsdax namespace at [`MNT`] with `-o dax` (after a
/// reboot: the namespace mode and the filesystem live in the NVDIMM). Replays the journal.
pub fn fsdax_remount() -> Result<PathBuf, String> {
    let ns = PmemRegion::discover()
        .map_err(|e| e.to_string())?
        .into_iter()
        .flat_map(|r| r.namespaces)
        .find(|n| n.mode == hmm::NamespaceMode::Fsdax)
        .ok_or("no fsdax namespace after the reboot")?;
    let dev = ns
        .block_device
        .ok_or("fsdax namespace without a block device")?;
    std::fs::create_dir_all(MNT).map_err(|e| e.to_string())?;
    sh("mount", &["-o", "dax", &dev.to_string_lossy(), MNT])?;
    Ok(PathBuf::from(MNT))
}

/// Unmounts [`MNT`] and puts the namespace back into raw mode when dropped (also when a
/// test panics), so later tests and suites of the same guest find `/dev/pmem0` as the
/// harness made it. Errors are ignored: a drop must not panic.
#[derive(Debug)]
pub struct RestoreRaw;

impl Drop for RestoreRaw {
    fn drop(&mut self) {
        if !crate::in_guest() {
            return;
        }
        if mounted(MNT) {
            let _ = sh("umount", &[MNT]);
        }
        if let Ok(ns) = namespace_name() {
            let _ = sh("ndctl", &["create-namespace", "-f", "-e", &ns, "-m", "raw"]);
        }
    }
}
