//! The kernel cache: what a cached build is (its [`Manifest`], written last), checking an
//! entry against it, and turning an intact entry into a bootable [`BuiltKernel`].

use crate::catalog;
use crate::error::{Result, VmError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One file of a cached build, with what it must still be.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Path relative to the build's cache directory.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
}

/// What a cached kernel is; written last, so its presence means the build completed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Catalog name, or `custom`.
    pub name: String,
    /// Where the source came from (package name or directory).
    pub source: String,
    /// Package or tree version.
    pub version: String,
    /// Cache key.
    pub key: String,
    /// `uname -r` of the built kernel.
    pub release: String,
    /// Seconds the build took.
    pub build_seconds: u64,
    /// The source tree it was built from.
    pub tree: PathBuf,
    /// The out-of-tree object directory.
    pub obj: PathBuf,
    /// Every file of the result.
    pub files: Vec<FileEntry>,
}

/// A kernel ready to boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltKernel {
    /// Name for reports.
    pub name: String,
    /// The image QEMU boots (`vmlinux` for PVH, or a bzImage).
    pub image: PathBuf,
    /// `lib/modules/<release>` directory, if the kernel has modules.
    pub modules: Option<PathBuf>,
    /// `uname -r`.
    pub release: String,
    /// Source tree and object directory, when the harness built it (for selftests).
    pub built_from: Option<(PathBuf, PathBuf)>,
    /// The cache directory of the build, when cached.
    pub cache_dir: Option<PathBuf>,
    /// Features of the full device set this kernel lacks by construction (passed to the
    /// guest as `VM_MISSING_FEATURES`; tests of them skip instead of failing).
    pub missing_features: Vec<String>,
    /// Modules the init loads explicitly before the device modules (`VM_MODULES`): what a
    /// distribution kernel builds as modules but the guest needs without a device uevent to
    /// load it (9p for the host root, the NVDIMM drivers). Empty for the harness's own builds.
    pub extra_modules: Vec<String>,
    /// Modules the init must load before it looks for its virtio result ports
    /// (`VM_EARLY_MODULES`: virtio_pci and virtio_console where they are modules).
    pub early_modules: Vec<String>,
}

/// The cache directory of a build, and whether it holds an intact result.
pub fn cached(key: &str) -> (PathBuf, std::result::Result<Manifest, String>) {
    let dir = catalog::cache_root().join("kernels").join(key);
    let m = verify(&dir);
    (dir, m)
}

/// Checks a cached build against its manifest (every file present, same size, same hash).
pub fn verify(dir: &Path) -> std::result::Result<Manifest, String> {
    let text =
        fs::read_to_string(dir.join("manifest.json")).map_err(|_| "not built".to_string())?;
    let m: Manifest =
        serde_json::from_str(&text).map_err(|e| format!("manifest unreadable: {e}"))?;
    for f in &m.files {
        let p = dir.join(&f.path);
        let meta = fs::metadata(&p).map_err(|_| format!("damaged: {} is missing", f.path))?;
        if meta.len() != f.size {
            return Err(format!(
                "damaged: {} is {} bytes, manifest says {}",
                f.path,
                meta.len(),
                f.size
            ));
        }
        if sha256_file(&p).map_err(|e| format!("damaged: {}: {e}", f.path))? != f.sha256 {
            return Err(format!("damaged: {} does not match its hash", f.path));
        }
    }
    if m.files.is_empty() {
        return Err("damaged: manifest lists no files".into());
    }
    Ok(m)
}

/// The result of a cached build as a bootable kernel.
pub fn as_built(dir: &Path, m: &Manifest) -> BuiltKernel {
    let mods = dir.join("modules/lib/modules").join(&m.release);
    BuiltKernel {
        name: m.name.clone(),
        image: dir.join("vmlinux"),
        modules: mods.exists().then_some(mods),
        release: m.release.clone(),
        built_from: Some((m.tree.clone(), m.obj.clone())),
        cache_dir: Some(dir.to_path_buf()),
        // What the build's own config lacks (the project's fragment turns event tracing
        // off, for example), read from the `config` the build kept.
        // The project's kernels carry upstream vkms: no fdinfo usage stats.
        // Only a catalog kernel that carries the qxl dmem patch has qxl charging dmem.
        missing_features: crate::kconfig::with_qxl_dmem(
            crate::kconfig::with_vkms_fdinfo(
                fs::read_to_string(dir.join("config"))
                    .map(|c| crate::kconfig::missing_features(&crate::kconfig::KConfig::parse(&c)))
                    .unwrap_or_default(),
                false,
            ),
            crate::catalog::find(&m.name)
                .is_some_and(|k| k.test_patches.contains(&crate::catalog::QXL_DMEM_PATCH)),
        ),
        extra_modules: Vec::new(),
        early_modules: Vec::new(),
    }
}

/// Lists every regular file under `dir` (recursively) with its size and SHA-256, paths
/// relative to `base`.
pub(crate) fn collect_files(base: &Path, dir: &Path, out: &mut Vec<FileEntry>) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| VmError::new(format!("{}: {e}", dir.display())))?;
    for e in rd.flatten() {
        let p = e.path();
        let ft = e.file_type().map_err(|e| VmError::new(e.to_string()))?;
        if ft.is_dir() {
            collect_files(base, &p, out)?;
        } else if ft.is_file() {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            let sha = sha256_file(&p).map_err(|e| VmError::new(format!("{}: {e}", p.display())))?;
            out.push(FileEntry {
                path: p
                    .strip_prefix(base)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned(),
                size,
                sha256: sha,
            });
        }
    }
    Ok(())
}

/// SHA-256 of a file, hex.
pub fn sha256_file(p: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_detects_missing_resized_and_changed_files() {
        let dir = std::env::temp_dir().join(format!("vm-verify-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(verify(&dir).unwrap_err(), "not built");
        fs::write(dir.join("vmlinux"), b"kernel").unwrap();
        let mut files = Vec::new();
        collect_files(&dir, &dir, &mut files).unwrap();
        let m = Manifest {
            name: "t".into(),
            source: "s".into(),
            version: "1".into(),
            key: "k".into(),
            release: "r".into(),
            build_seconds: 0,
            tree: "/t".into(),
            obj: "/o".into(),
            files,
        };
        fs::write(
            dir.join("manifest.json"),
            serde_json::to_string(&m).unwrap(),
        )
        .unwrap();
        assert_eq!(verify(&dir).unwrap(), m);
        fs::write(dir.join("vmlinux"), b"kernel!").unwrap();
        assert!(verify(&dir).unwrap_err().contains("bytes"));
        fs::write(dir.join("vmlinux"), b"KERNEL").unwrap();
        assert!(verify(&dir).unwrap_err().contains("hash"));
        fs::remove_file(dir.join("vmlinux")).unwrap();
        assert!(verify(&dir).unwrap_err().contains("missing"));
        fs::write(dir.join("manifest.json"), b"{").unwrap();
        assert!(verify(&dir).unwrap_err().contains("unreadable"));
        let _ = fs::remove_dir_all(&dir);
    }
}
