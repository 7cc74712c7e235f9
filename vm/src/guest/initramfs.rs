//! The guest's root, an initramfs built in memory: busybox, the init and its environment
//! (`/etc/vm.env`), the payload script, and the kernel's modules.

use super::{DeviceKind, GuestSpec, Payload, sh_quote};
use crate::cpio::CpioWriter;
use crate::error::{Result, VmError};
use std::fs;
use std::path::{Path, PathBuf};

/// The guest init script, embedded.
pub const INIT: &str = include_str!("../../guest/init.sh");

/// The payload script the init runs in the chroot.
pub fn payload_script(p: &Payload) -> String {
    let mut s = String::from("#!/bin/sh\n");
    for (k, v) in &p.env {
        s.push_str(&format!("export {}={}\n", k, sh_quote(v)));
    }
    s.push_str(&format!(
        "cd {} || exit 126\n",
        sh_quote(&p.cwd.to_string_lossy())
    ));
    let argv: Vec<String> = p.argv.iter().map(|a| sh_quote(a)).collect();
    s.push_str(&format!("exec {}\n", argv.join(" ")));
    s
}

/// `/etc/vm.env` for the init.
pub fn init_env(spec: &GuestSpec) -> String {
    // The kernel's own explicit modules (9p, NVDIMM on a stock kernel) come first.
    let mods: Vec<&str> = spec
        .kernel
        .extra_modules
        .iter()
        .map(String::as_str)
        .chain(
            spec.devices
                .iter()
                .filter_map(|d| d.module())
                .filter(|m| !spec.kernel.missing_features.iter().any(|f| f == m)),
        )
        .collect();
    let mut s = String::new();
    s.push_str(&format!(
        "VM_MODE={}\n",
        if spec.probe_only { "probe" } else { "run" }
    ));
    if !spec.kernel.early_modules.is_empty() {
        s.push_str(&format!(
            "VM_EARLY_MODULES={}\n",
            sh_quote(&spec.kernel.early_modules.join(" "))
        ));
    }
    s.push_str(&format!("VM_MODULES={}\n", sh_quote(&mods.join(" "))));
    let pci = spec.devices.iter().any(|d| {
        matches!(
            d,
            DeviceKind::VirtioGpu
                | DeviceKind::Bochs
                | DeviceKind::Qxl
                | DeviceKind::Nvdimm
                | DeviceKind::VirtioPmem
                | DeviceKind::NumaPxb
                | DeviceKind::PcieSwitch
        )
    });
    s.push_str(&format!("VM_MODALIAS={}\n", u8::from(pci)));
    if spec
        .devices
        .iter()
        .any(|d| matches!(d, DeviceKind::Nvdimm | DeviceKind::VirtioPmem))
    {
        s.push_str("VM_WAIT_PMEM=1\n");
    }
    s.push_str(&format!(
        "VM_CMD={}\n",
        u8::from(!spec.payload.argv.is_empty())
    ));
    s.push_str(&format!(
        "VM_HOSTROOT={}\n",
        u8::from(spec.payload.host_root)
    ));
    if spec.payload.host_root && spec.payload.writable_root {
        s.push_str("VM_WRITABLE_ROOT=1\n");
    }
    s.push_str(&format!(
        "VM_TMP_KEEP={}\n",
        sh_quote(&tmp_keep(&spec.payload).join(" "))
    ));
    s
}

/// The top-level directories under `/tmp` that the payload refers to (its working directory
/// and any absolute path among its arguments). The guest mounts a tmpfs over `/tmp` and
/// binds these back from the host so a checkout under `/tmp` still works.
pub fn tmp_keep(p: &Payload) -> Vec<String> {
    let mut keep: Vec<String> = std::iter::once(p.cwd.to_string_lossy().into_owned())
        .chain(p.argv.iter().cloned())
        .filter_map(|a| {
            let rest = a.strip_prefix("/tmp/")?;
            let first = rest.split('/').next()?;
            (!first.is_empty() && first != "." && first != "..").then(|| first.to_string())
        })
        .collect();
    keep.sort();
    keep.dedup();
    keep
}

/// Builds the initramfs: busybox, the init, the kernel's modules, the payload.
pub fn initramfs(spec: &GuestSpec, busybox: &Path) -> Result<Vec<u8>> {
    let mut w = CpioWriter::new();
    for d in [
        "bin", "sbin", "etc", "proc", "sys", "dev", "tmp", "run", "host", "lib", "usr",
    ] {
        w.dir(d, 0o755);
    }
    w.char_dev("dev/console", 0o600, 5, 1);
    let bb = fs::read(busybox).map_err(|e| {
        VmError::with_fix(
            format!("cannot read {}: {e}", busybox.display()),
            "scripts/setup (installs busybox-static)",
        )
    })?;
    w.file("bin/busybox", 0o755, &bb);
    w.file("init", 0o755, INIT.as_bytes());
    w.file("etc/vm.env", 0o644, init_env(spec).as_bytes());
    w.file(
        "etc/vm-payload.sh",
        0o755,
        payload_script(&spec.payload).as_bytes(),
    );
    // A probe boot needs no modules, unless the result ports themselves are modules.
    if let Some(mods) = &spec.kernel.modules
        && (!spec.probe_only || !spec.kernel.early_modules.is_empty())
    {
        let dest = format!("lib/modules/{}", spec.kernel.release);
        w.dir_all(&dest);
        add_tree(&mut w, mods, &dest)?;
    }
    Ok(w.finish())
}

fn add_tree(w: &mut CpioWriter, src: &Path, dest: &str) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(src)
        .map_err(|e| VmError::new(format!("{}: {e}", src.display())))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let to = format!("{dest}/{name}");
        let ft = e.file_type().map_err(|e| VmError::new(e.to_string()))?;
        if ft.is_dir() {
            w.dir(&to, 0o755);
            add_tree(w, &path, &to)?;
        } else if ft.is_file() {
            let data =
                fs::read(&path).map_err(|e| VmError::new(format!("{}: {e}", path.display())))?;
            w.file(&to, 0o644, &data);
        }
    }
    Ok(())
}

/// Finds a static busybox for the initramfs (`$VM_BUSYBOX` overrides).
pub fn busybox_binary() -> Result<PathBuf> {
    if let Some(b) = std::env::var_os("VM_BUSYBOX") {
        return Ok(PathBuf::from(b));
    }
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = Path::new(p);
        if p.exists() {
            return Ok(p.to_path_buf());
        }
    }
    Err(VmError::with_fix(
        "busybox not found (the guest init needs a static busybox)",
        "scripts/setup (or apt-get install busybox-static)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::tests::spec;

    #[test]
    fn payload_script_quotes_everything() {
        let mut p = spec(vec![]).payload;
        p.argv = vec![
            "/bin/echo".into(),
            "it's".into(),
            "a b".into(),
            "$HOME".into(),
        ];
        p.env = vec![("X".into(), "1 2".into())];
        let s = payload_script(&p);
        assert!(s.contains("export X='1 2'\n"), "{s}");
        assert!(s.contains("cd /work/main || exit 126\n"), "{s}");
        assert!(
            s.contains("exec /bin/echo 'it'\\''s' 'a b' '$HOME'\n"),
            "{s}"
        );
    }

    #[test]
    fn init_env_lists_modules_and_modes() {
        let e = init_env(&spec(DeviceKind::ALL.to_vec()));
        assert!(e.contains("VM_MODULES='vkms vgem test_hmm'\n"), "{e}");
        assert!(e.contains("VM_MODALIAS=1\n"));
        assert!(e.contains("VM_WAIT_PMEM=1\n"));
        assert!(e.contains("VM_CMD=1\n"));
        assert!(e.contains("VM_HOSTROOT=1\n"));
        assert!(!e.contains("VM_EARLY_MODULES"), "{e}");
        assert!(!e.contains("VM_WRITABLE_ROOT"), "{e}");
        let mut w = spec(vec![]);
        w.payload.writable_root = true;
        assert!(init_env(&w).contains("VM_WRITABLE_ROOT=1\n"));
        let mut s = spec(vec![]);
        s.probe_only = true;
        assert!(init_env(&s).contains("VM_MODE=probe\n"));
    }

    #[test]
    fn init_env_for_a_stock_kernel() {
        let mut s = spec(DeviceKind::ALL.to_vec());
        s.kernel.extra_modules = vec!["virtio_pci".into(), "9pnet_virtio".into(), "9p".into()];
        s.kernel.early_modules = vec!["virtio_pci".into()];
        s.kernel.missing_features = vec!["test_hmm".into(), "sw_sync".into()];
        let e = init_env(&s);
        assert!(
            e.contains("VM_MODULES='virtio_pci 9pnet_virtio 9p vkms vgem'\n"),
            "{e}"
        );
        assert!(e.contains("VM_EARLY_MODULES=virtio_pci\n"), "{e}");
    }

    #[test]
    fn tmp_paths_are_kept() {
        let mut p = spec(vec![]).payload;
        p.cwd = "/tmp/ci-clone".into();
        p.argv = vec![
            "/tmp/ci-clone/target/release/vm".into(),
            "--bin".into(),
            "/tmp/other/x".into(),
            "/tmpfoo/y".into(),
            "/tmp/../etc".into(),
        ];
        assert_eq!(tmp_keep(&p), ["ci-clone", "other"]);
        assert!(init_env(&spec(vec![])).contains("VM_TMP_KEEP=''\n"));
    }
}
