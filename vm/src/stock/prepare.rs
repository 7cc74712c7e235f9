//! Preparing a stock kernel into its cache entry, phase by phase (the steps of the
//! [`crate::stock`] module documentation): download and unpack the packages, build vkms
//! out of tree, pack the module closure the guest needs, write the images, and write the
//! manifest.

use super::{
    StockImage, WANTED_MODULES, as_built, dependency_closure, header_dependencies,
    headers_compiler, module_name, parse_modules_dep, relocate_headers_makefile, stock_params,
};
use crate::apt::{PrivateApt, fetch_debian_source};
use crate::cache::{self, BuiltKernel, Manifest};
use crate::catalog::{self, CatalogKernel};
use crate::error::{Result, VmError};
use crate::kconfig::KConfig;
use crate::util::{self, progress};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Free space a stock kernel needs while it is prepared (unpacked image, headers, result).
const NEEDED_BYTES: u64 = 2 << 30;

/// Modules without which no guest works: each must be a module or built in.
const ESSENTIAL: &[&str] = &["virtio_pci", "virtio_console", "9pnet_virtio", "9p"];

/// Finds a host tool on `PATH` or in the sbin directories.
fn tool(name: &str, fix: &str) -> Result<PathBuf> {
    util::which(name)
        .or_else(|| {
            ["/usr/sbin", "/sbin", "/usr/bin"]
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            VmError::with_fix(
                format!("{name} not found (needed to prepare a stock kernel)"),
                fix.to_string(),
            )
        })
}

fn io_err(what: &Path, e: std::io::Error) -> VmError {
    VmError::new(format!("{}: {e}", what.display()))
}

/// Runs a command with its stdout written to `to` (decompressors, extract-vmlinux).
fn run_to_file(c: &mut Command, to: &Path, what: &str) -> Result<()> {
    let f = fs::File::create(to).map_err(|e| io_err(to, e))?;
    let out = c
        .stdout(Stdio::from(f))
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| VmError::with_fix(format!("{what}: {e}"), "scripts/setup"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(VmError::new(format!(
            "{what} failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        )));
    }
    Ok(())
}

/// The single `lib/modules/<release>` directory of an unpacked image: (base for
/// `depmod -b`, release).
fn find_release(root: &Path) -> Result<(PathBuf, String)> {
    for base in [root.to_path_buf(), root.join("usr")] {
        let Ok(rd) = fs::read_dir(base.join("lib/modules")) else {
            continue;
        };
        let rels: Vec<String> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if let [rel] = rels.as_slice() {
            return Ok((base, rel.clone()));
        }
    }
    Err(VmError::new(format!(
        "{} holds no single lib/modules/<release> (not a kernel image package?)",
        root.display()
    )))
}

/// What the phases of [`prepare`] share: the kernel's name, its image, the clock, and the
/// work directory (`stock-work/<key>`) with the packages unpacked under `root`.
struct Prep<'a> {
    name: &'a str,
    img: &'a StockImage,
    start: Instant,
    work: PathBuf,
    root: PathBuf,
}

/// The unpacked image, headers and kbuild (phase 1).
struct Unpacked {
    /// The base of `lib/modules` for `depmod -b`.
    mod_base: PathBuf,
    /// The kernel release (`uname -r`).
    release: String,
    /// The image's `boot/config-<release>`.
    config_text: String,
    /// The image's `boot/vmlinuz-<release>`.
    vmlinuz: PathBuf,
}

/// Downloads, builds and packs a stock kernel into `kernels/<key>`.
pub(super) fn prepare(
    k: &CatalogKernel,
    img: &StockImage,
    key: &str,
    start: Instant,
) -> Result<BuiltKernel> {
    let (series, suites, patch) = stock_params(k)?;
    let name = k.name;
    check_tools(patch.is_some())?;
    let root_cache = catalog::cache_root();
    util::mkdirs(&root_cache)?;
    check_free_space(&root_cache)?;
    let work = root_cache.join("stock-work").join(key);
    let _ = fs::remove_dir_all(&work);
    let root = work.join("root");
    let debs = work.join("debs");
    util::mkdirs(&root)?;
    let prep = Prep {
        name,
        img,
        start,
        work,
        root,
    };

    // 1. Image, headers, kbuild: downloaded and unpacked, never installed.
    let u = prep.download_and_unpack(suites, &debs)?;

    // 2. vkms from the matching source, built against the unpacked headers.
    let src_pkg = format!("linux-source-{series}");
    let tarball = prep.matching_source(&src_pkg, suites)?;
    let (src, vkms_src) = prep.extract_vkms(&tarball, &src_pkg, patch)?;
    let moddir = prep.build_vkms(&u, &vkms_src)?;

    // 3. The module closure the guest needs, decompressed, with its own modules.dep.
    let out = root_cache.join("kernels").join(key);
    prep.pack_modules(&u, &moddir, &out)?;

    // 4. The images: vmlinuz as shipped, and vmlinux for a direct PVH boot when possible.
    let script = src.join(&src_pkg).join("scripts/extract-vmlinux");
    prep.write_images(&u, &out, patch, &script)?;

    prep.write_entry(key, &out, u.release, &src_pkg, patch.is_some(), tarball)
}

/// Checks that the host tools a stock kernel needs are there (`patch` only for a patched
/// vkms).
fn check_tools(patched: bool) -> Result<()> {
    for (t, fix) in [
        ("apt-get", "run on Debian (apt-get is needed)"),
        ("dpkg-deb", "apt-get install dpkg"),
        ("depmod", "apt-get install kmod"),
        ("make", "scripts/setup (or apt-get install make)"),
        ("tar", "apt-get install tar xz-utils"),
        ("xz", "apt-get install xz-utils"),
        ("strip", "apt-get install binutils"),
    ] {
        tool(t, fix)?;
    }
    if patched {
        tool("patch", "apt-get install patch")?;
    }
    Ok(())
}

/// Refuses to start with less than [`NEEDED_BYTES`] free under the cache root.
fn check_free_space(root_cache: &Path) -> Result<()> {
    util::require_free(root_cache, NEEDED_BYTES, "a stock kernel being prepared")
}

impl Prep<'_> {
    /// Phase 1: downloads the image, its headers and what they depend on of ours into
    /// `debs`, unpacks each into `root` (never installed), and finds the release, the
    /// config and the vmlinuz.
    fn download_and_unpack(&self, suites: &[&str], debs: &Path) -> Result<Unpacked> {
        let (name, img, start) = (self.name, self.img, self.start);
        let apt = PrivateApt::new(suites)?;
        let headers = format!("linux-headers-{}-amd64", img.abi);
        let mut pkgs = vec![img.package.clone(), headers.clone()];
        let deps = header_dependencies(&apt.depends(&headers, &img.version)?);
        if !deps.iter().any(|d| d.starts_with("linux-kbuild-")) {
            return Err(VmError::new(format!(
                "{headers} {} depends on no linux-kbuild package; cannot build vkms against it",
                img.version
            )));
        }
        pkgs.extend(deps);
        progress(
            start,
            &format!(
                "{name}: {} {}; downloading {}",
                img.package,
                img.version,
                pkgs[1..].join(", ")
            ),
        );
        let mut total = 0;
        for p in &pkgs {
            let deb = apt.download(p, &img.version, debs)?;
            total += fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
            util::run_checked(
                Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&self.root),
                &format!("dpkg-deb -x {}", deb.display()),
            )?;
            let _ = fs::remove_file(&deb);
        }
        let (mod_base, release) = find_release(&self.root)?;
        progress(
            start,
            &format!(
                "{name}: unpacked {} packages ({:.0} MiB of .deb); release {release}",
                pkgs.len(),
                util::mib(total)
            ),
        );
        let config_path = self.root.join(format!("boot/config-{release}"));
        let vmlinuz = self.root.join(format!("boot/vmlinuz-{release}"));
        let config_text = util::read(&config_path)?;
        if !vmlinuz.exists() {
            return Err(VmError::new(format!(
                "{} has no boot/vmlinuz-{release}",
                img.package
            )));
        }
        Ok(Unpacked {
            mod_base,
            release,
            config_text,
            vmlinuz,
        })
    }

    /// The `linux-source-<series>` tarball of the image's version: the host's installed
    /// one where its version matches, else fetched.
    fn matching_source(&self, src_pkg: &str, suites: &[&str]) -> Result<PathBuf> {
        let (name, img, start) = (self.name, self.img, self.start);
        let installed = PathBuf::from(format!("/usr/src/{src_pkg}.tar.xz"));
        let installed_version =
            util::run_capture(Command::new("dpkg-query").args(["-W", "-f=${Version}", src_pkg]))
                .unwrap_or_default();
        if installed.exists() && installed_version.trim() == img.version {
            Ok(installed)
        } else {
            progress(
                start,
                &format!(
                    "{name}: installed {src_pkg} is {:?}, the image is {}: fetching the \
                     matching source",
                    installed_version.trim(),
                    img.version
                ),
            );
            fetch_debian_source(src_pkg, suites, &img.version, start)
        }
    }

    /// Extracts `drivers/gpu/drm/vkms` and `scripts/extract-vmlinux` from the source
    /// tarball into `work/src` and applies the vkms test patch, if any; returns (the
    /// extracted source directory, the vkms sources).
    fn extract_vkms(
        &self,
        tarball: &Path,
        src_pkg: &str,
        patch: Option<&str>,
    ) -> Result<(PathBuf, PathBuf)> {
        let (name, start) = (self.name, self.start);
        let src = self.work.join("src");
        util::mkdirs(&src)?;
        progress(
            start,
            &format!(
                "{name}: extracting drivers/gpu/drm/vkms and scripts/extract-vmlinux from {}",
                tarball.display()
            ),
        );
        util::run_checked(
            Command::new("tar")
                .arg("-xf")
                .arg(tarball)
                .arg("-C")
                .arg(&src)
                .arg(format!("{src_pkg}/drivers/gpu/drm/vkms"))
                .arg(format!("{src_pkg}/scripts/extract-vmlinux")),
            &format!("tar -xf {} (vkms sources)", tarball.display()),
        )?;
        let vkms_src = src.join(src_pkg).join("drivers/gpu/drm/vkms");
        if let Some(p) = patch {
            let pf = self.work.join("vkms.patch");
            util::write(&pf, p.as_bytes())?;
            util::run_checked(
                Command::new("patch")
                    .args(["-p1", "--batch", "--forward", "-d"])
                    .arg(&vkms_src)
                    .arg("-i")
                    .arg(&pf),
                &format!("patch -p1 (vkms test patch) in {}", vkms_src.display()),
            )?;
            progress(start, &format!("{name}: applied the vkms test patch"));
        }
        Ok((src, vkms_src))
    }

    /// Builds vkms out of tree against the unpacked headers (pointed at their unpacked
    /// location) and puts the stripped `vkms.ko` into the image's `extra/`; returns the
    /// image's `lib/modules/<release>`.
    fn build_vkms(&self, u: &Unpacked, vkms_src: &Path) -> Result<PathBuf> {
        let (name, start, root, release) = (self.name, self.start, &self.root, &u.release);
        let hdr = root.join(format!("usr/src/linux-headers-{release}"));
        let mk = hdr.join("Makefile");
        let text = util::read(&mk)?;
        util::write(&mk, relocate_headers_makefile(&text, root).as_bytes())?;
        let kvars = fs::read_to_string(hdr.join(".kernelvariables")).unwrap_or_default();
        if let Some(cc) = headers_compiler(&kvars) {
            tool(&cc, &format!("apt-get install {cc}"))?;
        }
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
        progress(
            start,
            &format!("{name}: building vkms out of tree against Debian's headers"),
        );
        let mut c = Command::new("make");
        c.arg("-C")
            .arg(&hdr)
            .arg(format!("M={}", vkms_src.display()))
            .arg("CONFIG_DRM_VKMS=m")
            // No BTF for the module: it needs pahole and nothing in the guest reads it.
            .arg("CONFIG_DEBUG_INFO_BTF_MODULES=")
            .arg(format!("-j{jobs}"))
            .arg("modules");
        util::run_logged(
            c,
            &self.work.join("vkms-build.log"),
            "vkms out of tree",
            start,
            &self.img.version,
        )?;
        let ko = vkms_src.join("vkms.ko");
        util::run_checked(
            Command::new("strip").arg("--strip-debug").arg(&ko),
            "strip --strip-debug vkms.ko",
        )?;
        let moddir = u.mod_base.join("lib/modules").join(release);
        util::mkdirs(&moddir.join("extra"))?;
        util::copy(&ko, &moddir.join("extra/vkms.ko"))?;
        Ok(moddir)
    }

    /// Phase 3: runs depmod on the unpacked image, checks it has the [`ESSENTIAL`] modules
    /// and the out-of-tree vkms, and packs the closure of [`WANTED_MODULES`] (decompressed,
    /// with `modules.order` and a fresh `modules.dep`) into `out` (made anew).
    fn pack_modules(&self, u: &Unpacked, moddir: &Path, out: &Path) -> Result<()> {
        let (name, release) = (self.name, &u.release);
        let _ = fs::remove_file(moddir.join("build"));
        let _ = fs::remove_file(moddir.join("source"));
        let depmod = tool("depmod", "apt-get install kmod")?;
        util::run_checked(
            Command::new(&depmod)
                .arg("-b")
                .arg(&u.mod_base)
                .arg(release),
            "depmod (unpacked stock image)",
        )?;
        let dep = util::read(&moddir.join("modules.dep"))?;
        let builtin = fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default();
        let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
        let have = parse_modules_dep(&dep);
        for m in ESSENTIAL {
            if !have.contains_key(*m) && !builtin.contains(*m) {
                return Err(VmError::new(format!(
                    "{} has no {m} (neither a module nor built in): the guest cannot work with it",
                    self.img.package
                )));
            }
        }
        let closure = dependency_closure(&dep, WANTED_MODULES);
        if !closure.iter().any(|p| module_name(p) == "vkms") {
            return Err(VmError::new(format!(
                "{name}: depmod did not list the out-of-tree vkms.ko"
            )));
        }
        let _ = fs::remove_dir_all(out);
        let out_base = out.join("modules");
        let out_mod = out_base.join("lib/modules").join(release);
        util::mkdirs(&out_mod)?;
        let packed = copy_closure(moddir, &out_mod, &closure)?;
        for f in ["modules.builtin", "modules.builtin.modinfo"] {
            if moddir.join(f).exists() {
                util::copy(&moddir.join(f), &out_mod.join(f))?;
            }
        }
        write_modules_order(moddir, &out_mod, &packed)?;
        util::run_checked(
            Command::new(&depmod).arg("-b").arg(&out_base).arg(release),
            "depmod (reduced module tree)",
        )?;
        let size: u64 = packed
            .iter()
            .map(|p| fs::metadata(out_mod.join(p)).map(|m| m.len()).unwrap_or(0))
            .sum();
        progress(
            self.start,
            &format!(
                "{name}: packed {} of {} modules ({:.1} MiB)",
                packed.len(),
                have.len(),
                util::mib(size)
            ),
        );
        Ok(())
    }

    /// Phase 4: the vmlinuz as shipped, the config and the vkms patch, and a vmlinux
    /// extracted with `script` for a direct PVH boot where the kernel has PVH (left out,
    /// and the vmlinuz booted, if that fails).
    fn write_images(
        &self,
        u: &Unpacked,
        out: &Path,
        patch: Option<&str>,
        script: &Path,
    ) -> Result<()> {
        let (name, start) = (self.name, self.start);
        util::copy(&u.vmlinuz, &out.join("vmlinuz"))?;
        util::write(&out.join("config"), u.config_text.as_bytes())?;
        if let Some(p) = patch {
            util::write(&out.join("vkms.patch"), p.as_bytes())?;
        }
        let cfg = KConfig::parse(&u.config_text);
        if cfg.get("CONFIG_PVH") == Some(Some("y")) {
            let vmlinux = out.join("vmlinux");
            let ok = run_to_file(
                Command::new("sh").arg(script).arg(&u.vmlinuz),
                &vmlinux,
                "scripts/extract-vmlinux",
            )
            .is_ok()
                && fs::read(&vmlinux)
                    .map(|b| b.starts_with(b"\x7fELF"))
                    .unwrap_or(false);
            if ok {
                progress(
                    start,
                    &format!("{name}: extracted vmlinux (PVH boot, faster than the vmlinuz)"),
                );
            } else {
                let _ = fs::remove_file(&vmlinux);
                progress(
                    start,
                    &format!("{name}: extract-vmlinux failed; the vmlinuz is booted as is"),
                );
            }
        }
        Ok(())
    }

    /// Phase 5: writes the manifest of `out` (which completes the cache entry), removes
    /// the work directory, and returns the entry as a bootable kernel.
    fn write_entry(
        &self,
        key: &str,
        out: &Path,
        release: String,
        src_pkg: &str,
        patched: bool,
        tarball: PathBuf,
    ) -> Result<BuiltKernel> {
        let (name, img, start) = (self.name, self.img, self.start);
        let mut files = Vec::new();
        cache::collect_files(out, out, &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let m = Manifest {
            name: name.to_string(),
            source: format!(
                "{} + vkms from {src_pkg}{}",
                img.package,
                if patched { " (patched)" } else { "" }
            ),
            version: img.version.clone(),
            key: key.to_string(),
            release,
            build_seconds: start.elapsed().as_secs(),
            tree: tarball,
            obj: PathBuf::new(),
            files,
        };
        let json = serde_json::to_string_pretty(&m).map_err(|e| VmError::new(e.to_string()))?;
        util::write(&out.join("manifest.json"), json.as_bytes())?;
        let _ = fs::remove_dir_all(&self.work);
        let built = as_built(out, &m);
        progress(
            start,
            &format!(
                "{name}: ready {} in {} s -> {} (lacks: {})",
                m.release,
                m.build_seconds,
                out.display(),
                if built.missing_features.is_empty() {
                    "nothing".to_string()
                } else {
                    built.missing_features.join(", ")
                }
            ),
        );
        Ok(built)
    }
}

/// Copies (decompressing `.xz`, `.zst`, `.gz`) each module of `closure` from `moddir` to
/// `out_mod`; returns the packed paths, without compression suffix.
fn copy_closure(moddir: &Path, out_mod: &Path, closure: &[String]) -> Result<BTreeSet<String>> {
    let mut packed = BTreeSet::new();
    for p in closure {
        let from = moddir.join(p);
        let (plain, decompress) = match [(".xz", "xz"), (".zst", "zstd"), (".gz", "gzip")]
            .iter()
            .find_map(|(ext, prog)| p.strip_suffix(ext).map(|s| (s.to_string(), *prog)))
        {
            Some((s, prog)) => (s, Some(prog)),
            None => (p.clone(), None),
        };
        let to = out_mod.join(&plain);
        if let Some(parent) = to.parent() {
            util::mkdirs(parent)?;
        }
        match decompress {
            Some(prog) => {
                let prog_path = tool(prog, &format!("apt-get install {prog}"))?;
                run_to_file(
                    Command::new(prog_path).arg("-dc").arg(&from),
                    &to,
                    &format!("{prog} -dc {p}"),
                )?;
            }
            None => util::copy(&from, &to)?,
        }
        packed.insert(plain);
    }
    Ok(packed)
}

/// Writes `out_mod/modules.order`: the image's order of the packed modules, then any packed
/// module it does not list.
fn write_modules_order(moddir: &Path, out_mod: &Path, packed: &BTreeSet<String>) -> Result<()> {
    let order = fs::read_to_string(moddir.join("modules.order")).unwrap_or_default();
    let mut order: Vec<String> = order
        .lines()
        .map(|l| {
            let l = l.trim();
            [".xz", ".zst", ".gz"]
                .iter()
                .find_map(|e| l.strip_suffix(e))
                .unwrap_or(l)
                .to_string()
        })
        .filter(|l| packed.contains(l))
        .collect();
    for p in packed {
        if !order.contains(p) {
            order.push(p.clone());
        }
    }
    util::write(
        &out_mod.join("modules.order"),
        (order.join("\n") + "\n").as_bytes(),
    )
}
