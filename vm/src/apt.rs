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

/// The Debian archive URIs the private apt state fetches from: the host's own, as its apt
/// sources name them (no registry host is written into this project), or `VM_DEBIAN_MIRROR`
/// (a base URI holding `debian/` and `debian-security/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrors {
    /// The main archive (`.../debian`): release, `-updates` and `-backports` suites.
    pub archive: String,
    /// The security archive (`.../debian-security`).
    pub security: String,
}

impl Mirrors {
    /// From `VM_DEBIAN_MIRROR`, else from the host's apt sources (`/etc/apt/sources.list`
    /// and `/etc/apt/sources.list.d/*.{list,sources}`) for its release
    /// (`VERSION_CODENAME` of `/etc/os-release`).
    pub fn of_host() -> Result<Self> {
        if let Ok(base) = std::env::var("VM_DEBIAN_MIRROR") {
            let base = base.trim_end_matches('/');
            return Ok(Mirrors {
                archive: format!("{base}/debian"),
                security: format!("{base}/debian-security"),
            });
        }
        let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
        let codename = os
            .lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .map(|c| c.trim_matches('"').to_string())
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                VmError::with_fix(
                    "/etc/os-release names no VERSION_CODENAME: cannot tell which apt sources are Debian's",
                    "set VM_DEBIAN_MIRROR to a Debian mirror's base URI",
                )
            })?;
        let mut text = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
        let mut parts: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        parts.sort();
        let mut deb822 = String::new();
        for p in parts {
            match p.extension().and_then(|e| e.to_str()) {
                Some("list") => text.push_str(&fs::read_to_string(&p).unwrap_or_default()),
                Some("sources") => {
                    deb822.push_str(&fs::read_to_string(&p).unwrap_or_default());
                    deb822.push_str("\n\n");
                }
                _ => {}
            }
        }
        let mut entries = parse_one_line(&text);
        entries.extend(parse_deb822(&deb822));
        Self::from_entries(&entries, &codename).ok_or_else(|| {
            VmError::with_fix(
                format!(
                    "the host's apt sources name no Debian archive for {codename} and {codename}-security"
                ),
                "set VM_DEBIAN_MIRROR to a Debian mirror's base URI",
            )
        })
    }

    /// The first `deb` entry with a suite of `codename` (`codename` or `codename-*`) other
    /// than `-security` gives the archive, the first with `codename-security` the security
    /// archive; the security archive falls back to the archive's sibling `debian-security`.
    pub fn from_entries(entries: &[SourceEntry], codename: &str) -> Option<Self> {
        let ours = |s: &str| s == codename || s.starts_with(&format!("{codename}-"));
        let security = format!("{codename}-security");
        let find = |want_security: bool| {
            entries.iter().find_map(|e| {
                e.suites
                    .iter()
                    .any(|s| ours(s) && (s == &security) == want_security)
                    .then(|| e.uri.trim_end_matches('/').to_string())
            })
        };
        let archive = find(false)?;
        let security = find(true).unwrap_or_else(|| format!("{archive}-security"));
        Some(Mirrors { archive, security })
    }
}

/// One `deb` source: a URI and its suites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    /// The archive URI.
    pub uri: String,
    /// Its suites.
    pub suites: Vec<String>,
}

/// The `deb` lines of a one-line-style `sources.list` (comments, `deb-src` and options in
/// brackets skipped).
pub fn parse_one_line(text: &str) -> Vec<SourceEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']').map_or("", |(_, after)| after),
            None => rest,
        };
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            out.push(SourceEntry {
                uri: uri.to_string(),
                suites: vec![suite.to_string()],
            });
        }
    }
    out
}

/// The enabled `deb` stanzas of deb822 `.sources` text (one entry per URI).
pub fn parse_deb822(text: &str) -> Vec<SourceEntry> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields = std::collections::BTreeMap::new();
        let mut last: Option<String> = None;
        for line in stanza.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if line.starts_with([' ', '\t']) {
                if let Some(k) = &last {
                    let v: &mut String = fields.entry(k.clone()).or_default();
                    v.push(' ');
                    v.push_str(line.trim());
                }
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                fields.insert(k.clone(), v.trim().to_string());
                last = Some(k);
            }
        }
        let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or("");
        if !get("types").split_whitespace().any(|t| t == "deb")
            || get("enabled").eq_ignore_ascii_case("no")
        {
            continue;
        }
        let suites: Vec<String> = get("suites").split_whitespace().map(String::from).collect();
        for uri in get("uris").split_whitespace() {
            out.push(SourceEntry {
                uri: uri.to_string(),
                suites: suites.clone(),
            });
        }
    }
    out
}

/// A private apt state (lists and cache under the harness cache) used to find and download
/// packages from other suites without touching the host's apt configuration.
pub(crate) struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    /// Opens (and, when older than 6 hours, refreshes) the private state for `suites`, from
    /// the host's Debian mirrors ([`Mirrors::of_host`]).
    pub(crate) fn new(suites: &[&str]) -> Result<Self> {
        let key = suites.join("+");
        let dir = catalog::cache_root().join("apt").join(key);
        mkdirs(&dir.join("lists/partial"))?;
        mkdirs(&dir.join("cache/archives/partial"))?;
        let mirrors = Mirrors::of_host()?;
        let mut list = String::new();
        for s in suites {
            let uri = if s.ends_with("-security") {
                &mirrors.security
            } else {
                &mirrors.archive
            };
            writeln!(
                list,
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {s} main"
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

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n\
        Suites: bookworm bookworm-updates\nComponents: main\n\n\
        Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\
        Components: main\n\n\
        Types: deb\nURIs: https://vendor.example/apt\nSuites: nodistro\nComponents: main\n\n\
        Types: deb\nEnabled: no\nURIs: http://off.example/debian\nSuites: bookworm\n";

    #[test]
    fn the_hosts_debian_entries_give_the_mirrors() {
        let e = parse_deb822(DEB822);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(
            Mirrors::from_entries(&e, "bookworm"),
            Some(Mirrors {
                archive: "http://mirror.example/debian".into(),
                security: "http://mirror.example/debian-security".into(),
            })
        );
        // Another release's sources are not this host's archive.
        assert_eq!(Mirrors::from_entries(&e, "trixie"), None);
    }

    #[test]
    fn one_line_sources_with_options_and_comments() {
        let text = "# deb http://old.example/debian bookworm main\n\
            deb-src http://src.example/debian bookworm main\n\
            deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian/ bookworm-updates main # x\n\
            deb http://vendor.example/apt cloud-sdk-bookworm main\n";
        let e = parse_one_line(text);
        assert_eq!(e.len(), 2, "{e:?}");
        // No -security entry: its sibling archive, as Debian lays them out.
        assert_eq!(
            Mirrors::from_entries(&e, "bookworm"),
            Some(Mirrors {
                archive: "http://a.example/debian".into(),
                security: "http://a.example/debian-security".into(),
            })
        );
    }
}
