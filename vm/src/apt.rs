//! Debian packages from suites the host does not use: a private apt state under the
//! harness cache, and the download and unpacking of a kernel source package.

use crate::catalog;
use crate::error::{Result, VmError};
use crate::util::{mib, mkdirs, progress, run_capture, run_checked, write};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A private apt state (lists and cache under the harness cache) used to find and download
/// packages from other suites without touching the host's apt configuration.
pub(crate) struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    /// Opens (and, when older than 6 hours, refreshes) the private state for `suites`.
    pub(crate) fn new(suites: &[&str]) -> Result<Self> {
        let key = suites.join("+");
        let dir = catalog::cache_root().join("apt").join(key);
        mkdirs(&dir.join("lists/partial"))?;
        mkdirs(&dir.join("cache/archives/partial"))?;
        let mirror = std::env::var("VM_DEBIAN_MIRROR")
            .unwrap_or_else(|_| "http://deb.debian.org".to_string());
        let mut list = String::new();
        for s in suites {
            let archive = if s.ends_with("-security") {
                "debian-security"
            } else {
                "debian"
            };
            writeln!(
                list,
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror}/{archive} {s} main"
            )
            .unwrap();
        }
        write(&dir.join("sources.list"), list.as_bytes())?;
        let me = Self { dir };
        let stamp = me.dir.join("updated");
        let fresh = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() < 6 * 3600);
        if !fresh {
            run_checked(
                Command::new("apt-get")
                    .args(me.opts())
                    .arg("-q")
                    .arg("update"),
                "apt-get update (private state for other Debian suites)",
            )?;
            write(&stamp, b"")?;
        }
        Ok(me)
    }

    fn opts(&self) -> Vec<String> {
        let d = self.dir.display();
        vec![
            format!("-oDir::Etc::SourceList={d}/sources.list"),
            "-oDir::Etc::SourceParts=/nonexistent".into(),
            format!("-oDir::State::Lists={d}/lists"),
            format!("-oDir::Cache={d}/cache"),
            "-oDebug::NoLocking=1".into(),
            "-oAPT::Architecture=amd64".into(),
        ]
    }

    /// The candidate version of `package`, if any suite offers it.
    pub(crate) fn candidate(&self, package: &str) -> Result<Option<String>> {
        let out = run_capture(
            Command::new("apt-cache")
                .args(self.opts())
                .args(["policy", package]),
        )
        .map_err(VmError::new)?;
        Ok(out
            .lines()
            .find_map(|l| l.trim().strip_prefix("Candidate:"))
            .map(|v| v.trim().to_string())
            .filter(|v| v != "(none)"))
    }

    /// Every package name that starts with `prefix` (`apt-cache pkgnames`).
    pub(crate) fn pkgnames(&self, prefix: &str) -> Result<Vec<String>> {
        let out = run_capture(
            Command::new("apt-cache")
                .args(self.opts())
                .args(["pkgnames", prefix]),
        )
        .map_err(VmError::new)?;
        Ok(out.lines().map(|l| l.trim().to_string()).collect())
    }

    /// The `Depends:` field of `package` at `version` (`apt-cache show`).
    pub(crate) fn depends(&self, package: &str, version: &str) -> Result<String> {
        let out = run_capture(
            Command::new("apt-cache")
                .args(self.opts())
                .args(["show", &format!("{package}={version}")]),
        )
        .map_err(VmError::new)?;
        Ok(out
            .lines()
            .find_map(|l| l.strip_prefix("Depends:"))
            .unwrap_or("")
            .trim()
            .to_string())
    }

    /// Downloads `package` at `version` into `into` (never installs); returns the .deb.
    pub(crate) fn download(&self, package: &str, version: &str, into: &Path) -> Result<PathBuf> {
        mkdirs(into)?;
        run_checked(
            Command::new("apt-get")
                .args(self.opts())
                .arg("-q")
                .arg("download")
                .arg(format!("{package}={version}"))
                .current_dir(into),
            &format!("apt-get download {package}={version}"),
        )?;
        let deb = fs::read_dir(into)
            .map_err(|e| VmError::new(format!("{}: {e}", into.display())))?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{package}_")))
            })
            .ok_or_else(|| VmError::new(format!("apt-get download left no {package} .deb")))?;
        Ok(deb)
    }
}

/// Downloads (once, into the cache) and unpacks the `.deb` of the source package `package`
/// at `version` from `suites`; returns its `/usr/src/<package>.tar.xz`.
pub(crate) fn fetch_debian_source(
    package: &str,
    suites: &[&str],
    version: &str,
    start: Instant,
) -> Result<PathBuf> {
    let root = catalog::cache_root()
        .join("debs")
        .join(format!("{package}-{version}"));
    let tarball = root.join(format!("usr/src/{package}.tar.xz"));
    if tarball.exists() && root.join(".complete").exists() {
        return Ok(tarball);
    }
    let apt = PrivateApt::new(suites)?;
    progress(start, &format!("downloading {package} {version}"));
    let deb = apt.download(package, version, &root)?;
    let size = fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
    progress(
        start,
        &format!(
            "downloaded {} ({:.1} MiB); unpacking",
            deb.display(),
            mib(size)
        ),
    );
    run_checked(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
        "dpkg-deb -x",
    )?;
    let _ = fs::remove_file(&deb);
    if !tarball.exists() {
        return Err(VmError::new(format!(
            "{package} {version} contains no {}",
            tarball.display()
        )));
    }
    write(&root.join(".complete"), b"")?;
    Ok(tarball)
}
