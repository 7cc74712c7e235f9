//! What `vm run`, `vm test` and `vm powercut` settle before their first boot: the
//! `--accel`, `--env` and `--device` arguments, the kernel to boot (a catalog name, a
//! kernel path with its modules, or a source tree), and what the guest lacks by
//! construction.

use crate::accel::{self, AccelChoice};
use crate::build;
use crate::cache::{self, BuiltKernel};
use crate::catalog;
use crate::error::{Result, VmError};
use crate::guest::{self, DeviceKind};
use std::path::{Path, PathBuf};

/// The kernel arguments of `vm run` and `vm powercut` (`--kernel`, `--modules`,
/// `--kernel-source`, `--accel`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSelection {
    /// A catalog name, or the path of a bzImage/vmlinux to boot as is.
    pub kernel: String,
    /// With a kernel path: its modules (`lib/modules/<release>`, or a directory holding it).
    pub modules: Option<PathBuf>,
    /// A kernel source tree to build with the project's config and boot.
    pub kernel_source: Option<PathBuf>,
    /// `auto`, `kvm` or `tcg`.
    pub accel: String,
}

/// The error for a kernel name that is neither in the catalog nor an existing path.
pub fn unknown_kernel(n: &str) -> VmError {
    let names: Vec<&str> = catalog::CATALOG.iter().map(|k| k.name).collect();
    VmError::with_fix(
        format!("no kernel named {n:?} (catalog: {})", names.join(", ")),
        "vm kernels lists them; pass a path to boot your own (--kernel PATH --modules DIR)",
    )
}

/// `--accel`: auto, kvm or tcg.
pub fn parse_accel(s: &str) -> Result<AccelChoice> {
    AccelChoice::parse(s)
        .ok_or_else(|| VmError::new(format!("--accel {s:?}: use auto, kvm or tcg")))
}

/// Every `--env KEY=VALUE`, in order; the first one without a `=` or with an empty key is
/// the error.
pub fn parse_env(env: &[String]) -> Result<Vec<(String, String)>> {
    let mut envs = Vec::new();
    for e in env {
        match e.split_once('=') {
            Some((a, b)) if !a.is_empty() => envs.push((a.to_string(), b.to_string())),
            _ => return Err(VmError::new(format!("--env {e:?}: expected KEY=VALUE"))),
        }
    }
    Ok(envs)
}

/// The `--device` list: names, `all` (every device) and `none`; sorted, without repeats.
pub fn parse_devices(list: &[String]) -> Result<Vec<DeviceKind>> {
    let mut out = Vec::new();
    for d in list {
        if d == "all" {
            out.extend(DeviceKind::ALL);
            continue;
        }
        if d == "none" {
            continue;
        }
        let k = DeviceKind::parse(d).ok_or_else(|| {
            let names: Vec<&str> = DeviceKind::ALL.iter().map(|d| d.name()).collect();
            VmError::new(format!(
                "unknown device {d:?} (devices: {}, all, none)",
                names.join(", ")
            ))
        })?;
        out.push(k);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Resolves the kernel arguments to a bootable kernel.
pub fn resolve_kernel(
    name: &str,
    modules: Option<&Path>,
    source: Option<&Path>,
) -> Result<BuiltKernel> {
    if let Some(src) = source {
        return build::ensure_tree(src, false);
    }
    if let Some(k) = catalog::find(name) {
        return build::ensure_catalog(k, false);
    }
    let p = Path::new(name);
    if !p.exists() {
        return Err(unknown_kernel(name));
    }
    if let Some(k) = cached_entry_of(p, modules) {
        return Ok(k);
    }
    let (mods, release) = match modules {
        None => (None, "unknown".to_string()),
        Some(m) => {
            let (dir, rel) = modules_dir(m)?;
            (Some(dir), rel)
        }
    };
    Ok(BuiltKernel {
        name: "custom".into(),
        image: p.to_path_buf(),
        modules: mods,
        release,
        built_from: None,
        cache_dir: None,
        // Not known to carry the project's test-only vkms patch.
        missing_features: crate::kconfig::with_qxl_dmem(
            crate::stock::with_vkms_fdinfo(Vec::new(), false),
            false,
        ),
        extra_modules: Vec::new(),
        early_modules: Vec::new(),
    })
}

/// `--modules` of a kernel path: the directory holding `modules.dep` (`m` itself, or the
/// first `<release>` under `m/lib/modules` or `m` that holds one) and its name, the
/// release.
fn modules_dir(m: &Path) -> Result<(PathBuf, String)> {
    let dir = if m.join("modules.dep").exists() {
        m.to_path_buf()
    } else {
        let base = if m.join("lib/modules").exists() {
            m.join("lib/modules")
        } else {
            m.to_path_buf()
        };
        std::fs::read_dir(&base)
            .ok()
            .and_then(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .find(|p| p.join("modules.dep").exists())
            })
            .ok_or_else(|| {
                VmError::with_fix(
                    format!("{} holds no modules.dep", m.display()),
                    "pass lib/modules/<release> of that kernel (run depmod there first)",
                )
            })?
    };
    let rel = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((dir, rel))
}

/// A kernel path inside an intact cache entry (`kernels/<key>/vmlinux` or `bzImage`) is
/// that entry: its modules (unless `--modules` names others), its features and, for a
/// kernel the harness built from source, its tree (so `vm test` builds its selftests).
fn cached_entry_of(image: &Path, modules: Option<&Path>) -> Option<BuiltKernel> {
    if modules.is_some() {
        return None;
    }
    let dir = image.parent()?;
    if !dir.join("manifest.json").is_file() {
        return None;
    }
    let m = match cache::verify(dir) {
        Ok(m) => m,
        Err(why) => {
            eprintln!(
                "vm: {} is in cache entry {} ({why}): booting it as a plain path",
                image.display(),
                dir.display()
            );
            return None;
        }
    };
    let name = image.file_name()?.to_string_lossy().into_owned();
    if !m.files.iter().any(|f| f.path == name) {
        return None;
    }
    let mut k = if m.obj.as_os_str().is_empty() {
        crate::stock::as_built(dir, &m)
    } else {
        cache::as_built(dir, &m)
    };
    k.image = image.to_path_buf();
    eprintln!(
        "vm: {} is the cache entry of {} ({}){}",
        image.display(),
        m.name,
        m.release,
        if k.built_from.is_some() {
            "; its source tree is known"
        } else {
            ""
        }
    );
    Some(k)
}

/// What the guest lacks by construction, for `VM_MISSING_FEATURES`: the kernel's missing
/// features, plus `virgl` unless `VM_VIRGL=1` gives the guest a virgl-capable virtio-gpu.
pub fn missing_features(kernel: &BuiltKernel) -> String {
    let mut m = kernel.missing_features.clone();
    if !guest::virgl() {
        m.push("virgl".into());
    }
    m.join(",")
}

/// What `vm run` and `vm powercut` set up alike before their first boot.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The payload's environment: every `--env KEY=VALUE`, then `VM_MISSING_FEATURES`.
    pub envs: Vec<(String, String)>,
    /// The kernel to boot.
    pub kernel: BuiltKernel,
    /// The guest's busybox.
    pub busybox: PathBuf,
    /// The accelerator, decided (and probed where `auto`).
    pub decision: accel::Decision,
}

/// Checks `--accel` and `--env`, makes a program named by a relative path absolute (the
/// guest shares the current directory), resolves the kernel, checks busybox and QEMU and
/// decides the accelerator.
pub fn prepare(k: &KernelSelection, env: &[String], argv: &mut [String]) -> Result<Prepared> {
    let choice = parse_accel(&k.accel)?;
    let mut envs = parse_env(env)?;
    if argv[0].contains('/')
        && let Ok(abs) = std::fs::canonicalize(&argv[0])
    {
        argv[0] = abs.to_string_lossy().into_owned();
    }
    let kernel = resolve_kernel(&k.kernel, k.modules.as_deref(), k.kernel_source.as_deref())?;
    let missing = missing_features(&kernel);
    if !missing.is_empty() {
        envs.push(("VM_MISSING_FEATURES".into(), missing));
    }
    let busybox = guest::busybox_binary()?;
    guest::qemu_binary()?;
    let decision = accel::decide(choice, &kernel, &busybox);
    Ok(Prepared {
        envs,
        kernel,
        busybox,
        decision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn env_pairs_split_at_the_first_equals_sign() {
        let env = parse_env(&strings(&["A=1", "B=x=y", "C="])).unwrap();
        assert_eq!(
            env,
            [("A", "1"), ("B", "x=y"), ("C", "")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let e = parse_env(&strings(&["A=1", "=v", "nokey"])).unwrap_err();
        assert_eq!(e.to_string(), "--env \"=v\": expected KEY=VALUE");
        let e = parse_env(&strings(&["plain"])).unwrap_err();
        assert_eq!(e.to_string(), "--env \"plain\": expected KEY=VALUE");
    }

    #[test]
    fn accel_is_auto_kvm_or_tcg() {
        assert_eq!(
            parse_accel("tcg").unwrap(),
            AccelChoice::parse("tcg").unwrap()
        );
        assert_eq!(
            parse_accel("hvf").unwrap_err().to_string(),
            "--accel \"hvf\": use auto, kvm or tcg"
        );
    }

    #[test]
    fn devices_are_sorted_without_repeats() {
        let d = parse_devices(&strings(&["vgem", "vkms", "vgem", "none"])).unwrap();
        let mut want = vec![
            DeviceKind::parse("vgem").unwrap(),
            DeviceKind::parse("vkms").unwrap(),
        ];
        want.sort();
        assert_eq!(d, want);
        assert_eq!(
            parse_devices(&strings(&["all", "vkms"])).unwrap(),
            DeviceKind::ALL.to_vec()
        );
        assert!(parse_devices(&strings(&["none"])).unwrap().is_empty());
        let e = parse_devices(&strings(&["vkms", "gpu"])).unwrap_err();
        assert!(
            e.what.starts_with("unknown device \"gpu\" (devices: "),
            "{e}"
        );
        assert!(e.what.ends_with(", all, none)"), "{e}");
    }

    #[test]
    fn a_missing_kernel_path_names_the_catalog() {
        let e = resolve_kernel("/nonexistent/vmlinuz-x", None, None).unwrap_err();
        assert_eq!(e, unknown_kernel("/nonexistent/vmlinuz-x"));
        assert!(
            e.what
                .starts_with("no kernel named \"/nonexistent/vmlinuz-x\" (catalog: ")
        );
        assert!(e.fix.unwrap().starts_with("vm kernels lists them"));
    }

    #[test]
    fn a_kernel_path_takes_its_release_from_the_modules_directory() {
        let t = std::env::temp_dir().join(format!("vm-prepare-test-{}", std::process::id()));
        let rel = t.join("root/lib/modules/6.9.0-test");
        std::fs::create_dir_all(&rel).unwrap();
        std::fs::write(rel.join("modules.dep"), "").unwrap();
        let image = t.join("bzImage");
        std::fs::write(&image, "").unwrap();
        let path = image.to_str().unwrap();
        for m in [t.join("root"), t.join("root/lib/modules"), rel.clone()] {
            let k = resolve_kernel(path, Some(&m), None).unwrap();
            assert_eq!(k.name, "custom");
            assert_eq!(k.image, image);
            assert_eq!(k.release, "6.9.0-test");
            assert_eq!(k.modules.as_deref(), Some(rel.as_path()));
        }
        let k = resolve_kernel(path, None, None).unwrap();
        assert_eq!((k.release.as_str(), k.modules), ("unknown", None));
        let e = resolve_kernel(path, Some(&t.join("root/lib")), None).unwrap_err();
        assert!(e.what.ends_with("root/lib holds no modules.dep"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
