//! Stock Debian kernels: Debian's own `linux-image-<abi>-amd64-unsigned`, booted as Debian
//! ships it, as the catalog's `stock-*` kernels.
//!
//! A stock kernel is found and prepared at run time, never installed on the host:
//!
//! 1. the newest image of the series (`linux-image-6.1.0-NN-amd64-unsigned`,
//!    `linux-image-6.12.NNN+deb12-amd64-unsigned`) is looked up in a private apt state;
//! 2. the image, `linux-headers-<abi>-amd64` and what that depends on of ours
//!    (`linux-headers-<abi>-common`, `linux-kbuild-*`) are fetched with `apt-get download`
//!    and unpacked with `dpkg-deb -x` (installing them would pull a kernel, udev and systemd);
//! 3. vkms (which Debian does not build) is built out of tree against those headers from
//!    the matching `linux-source-<series>` (only `drivers/gpu/drm/vkms` is extracted), with an
//!    optional test-only patch; it taints the kernel (unsigned, out of tree), nothing more;
//! 4. `depmod` runs on the unpacked image, and only the modules the guest needs plus their
//!    dependencies ([`WANTED_MODULES`]) are kept, decompressed (`.ko.xz` on 6.12) so the
//!    guest's busybox modprobe can load them, with a fresh `modules.dep`;
//! 5. `vmlinux` is extracted from the vmlinuz with the source's `scripts/extract-vmlinux`
//!    for a direct PVH boot (the vmlinuz itself is kept and booted if that fails).
//!
//! The result is cached under `kernels/<key>` with a manifest like the harness's own builds
//! (a damaged entry is rebuilt); the key is the image version plus a hash of the recipe and
//! the vkms patch. What the stock config lacks (test_hmm, sw_sync, udmabuf on 6.1, ...) is
//! read from the image's own config and becomes [`BuiltKernel::missing_features`].

use crate::apt::{PrivateApt, fetch_debian_source};
use crate::cache::{self, BuiltKernel, Manifest};
use crate::catalog::{self, CatalogKernel, Source};
use crate::error::{Result, VmError};
use crate::kconfig::KConfig;
pub use crate::kconfig::{FEATURE_OPTIONS, VKMS_FDINFO, missing_features, with_vkms_fdinfo};
use crate::util::{self, progress};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Bumped whenever the stock recipe changes what lands in the cache.
pub const STOCK_RECIPE_VERSION: &str = "stock-1";

/// Free space a stock kernel needs while it is prepared (unpacked image, headers, result).
const NEEDED_BYTES: u64 = 2 << 30;

/// The modules the guest needs: the roots of the dependency closure that is packed. A name
/// the kernel does not have as a module (built in, or not configured) is skipped.
pub const WANTED_MODULES: &[&str] = &[
    // The DRM drivers of the device set; drm, the KMS/GEM/TTM helpers come as dependencies.
    "vkms",
    "vgem",
    "virtio_gpu",
    "bochs",
    "bochs_drm",
    "qxl",
    // The virtio transport, the result ports and the host root over 9p (netfs, fscache).
    "virtio_pci",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    // The emulated NVDIMM: ACPI NFIT, libnvdimm, the pmem block device, device DAX.
    "nfit",
    "nd_pmem",
    "dax_pmem",
    "device_dax",
    // virtio-pmem (nd_virtio comes as its dependency): the persistent memory of
    // `vm powercut --cache volatile`, loaded by its virtio modalias.
    "virtio_pmem",
    // Buffer sharing and HMM, where the kernel has them as modules.
    "udmabuf",
    "system_heap",
    "test_hmm",
    // A DAX-capable filesystem (on demand, for fsdax) and configfs. ext4 asks the crypto
    // API for crc32c at every mount; Debian builds it as a module that no dependency pulls.
    "ext4",
    "crc32c_generic",
    "crc32c_intel",
    "configfs",
    // FUSE, for drmtool_hostile's never-answering mount (loaded by the test itself).
    "fuse",
];

/// Modules the init loads explicitly, in this order, where the kernel has them as modules:
/// nothing else would load them (no device uevent, or the device appears only after
/// another module: virtio devices after virtio_pci, NVDIMM namespaces after nfit).
pub const EXPLICIT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "nfit",
    "nd_pmem",
    "dax_pmem",
    "device_dax",
    "udmabuf",
    "system_heap",
];

/// Of [`EXPLICIT_MODULES`], those the init needs before it looks for its result ports.
pub const EARLY_MODULES: &[&str] = &["virtio_pci", "virtio_console"];

/// Modules without which no guest works: each must be a module or built in.
const ESSENTIAL: &[&str] = &["virtio_pci", "virtio_console", "9pnet_virtio", "9p"];

/// A stock image resolved at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockImage {
    /// The kernel ABI, e.g. `6.1.0-57` or `6.12.117+deb12`.
    pub abi: String,
    /// The image package, `linux-image-<abi>-amd64-unsigned`.
    pub package: String,
    /// Its version, e.g. `6.1.192-3` (the same as the matching `linux-source-*`).
    pub version: String,
}

/// The stock parameters of a catalog kernel: series, suites, vkms patch.
fn stock_params(
    k: &CatalogKernel,
) -> Result<(&'static str, &'static [&'static str], Option<&'static str>)> {
    match &k.source {
        Source::DebianStock {
            series,
            suites,
            vkms_patch,
        } => Ok((series, suites, *vkms_patch)),
        _ => Err(VmError::new(format!(
            "{} is built from source, not a stock image",
            k.name
        ))),
    }
}

/// Parses an image package name of `series` into its ABI and a sort key. Accepts
/// `linux-image-<series>.<rest>-amd64-unsigned` where `rest` is made of numbers and
/// `debNN` tags joined by `-`, `+` or `.` (`0-57`, `117+deb12`); flavours such as `-cloud`
/// or `-rt` are rejected.
pub fn parse_image_abi(series: &str, name: &str) -> Option<(String, Vec<u64>)> {
    let rest = name
        .strip_prefix("linux-image-")?
        .strip_prefix(series)?
        .strip_prefix('.')?
        .strip_suffix("-amd64-unsigned")?;
    let mut key = Vec::new();
    for tok in rest.split(['-', '+', '.']) {
        let digits = tok.strip_prefix("deb").unwrap_or(tok);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        key.push(digits.parse().ok()?);
    }
    Some((format!("{series}.{rest}"), key))
}

/// The newest ABI of `series` among package names (`apt-cache pkgnames` output).
pub fn newest_abi<S: AsRef<str>>(series: &str, names: &[S]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| parse_image_abi(series, n.as_ref().trim()))
        .max_by(|a, b| a.1.cmp(&b.1))
        .map(|(abi, _)| abi)
}

/// The packages of a headers package's `Depends:` that a module build needs from us: the
/// `linux-headers-*` and `linux-kbuild-*` names (first of each alternative, no versions).
pub fn header_dependencies(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .filter_map(|alt| alt.split('|').next())
        .filter_map(|d| d.split_whitespace().next())
        .map(|n| n.split(':').next().unwrap_or(n))
        .filter(|n| n.starts_with("linux-headers-") || n.starts_with("linux-kbuild-"))
        .map(String::from)
        .collect()
}

/// Finds the newest stock image of a catalog kernel (private apt state; no download).
pub fn resolve(k: &CatalogKernel) -> Result<StockImage> {
    let (series, suites, _) = stock_params(k)?;
    let apt = PrivateApt::new(suites)?;
    let names = apt.pkgnames(&format!("linux-image-{series}."))?;
    let abi = newest_abi(series, &names).ok_or_else(|| {
        VmError::with_fix(
            format!("no linux-image-{series}.*-amd64-unsigned in the suites {suites:?}"),
            "check VM_DEBIAN_MIRROR (default http://deb.debian.org) is reachable",
        )
    })?;
    let package = format!("linux-image-{abi}-amd64-unsigned");
    let version = apt.candidate(&package)?.ok_or_else(|| {
        VmError::with_fix(
            format!("{package} is listed but has no installable version"),
            format!(
                "remove the private apt state {} and retry",
                catalog::cache_root().join("apt").display()
            ),
        )
    })?;
    Ok(StockImage {
        abi,
        package,
        version,
    })
}

/// Cache key of a stock kernel: the image version and a hash of the recipe, the module
/// lists and the vkms patch.
pub fn cache_key(name: &str, version: &str, vkms_patch: Option<&str>) -> String {
    let wanted = WANTED_MODULES.join(" ");
    let explicit = EXPLICIT_MODULES.join(" ");
    let hash = crate::kconfig::fragment_hash(&[
        STOCK_RECIPE_VERSION.as_bytes(),
        wanted.as_bytes(),
        explicit.as_bytes(),
        vkms_patch.unwrap_or("").as_bytes(),
    ]);
    format!("{name}-{}-{hash}", catalog::path_safe(version))
}

/// The version a stock kernel resolves to now, and the state of its cache entry.
pub fn cache_state(k: &CatalogKernel) -> Result<(String, std::result::Result<Manifest, String>)> {
    let (_, _, patch) = stock_params(k)?;
    let img = resolve(k)?;
    let key = cache_key(k.name, &img.version, patch);
    Ok((img.version, cache::cached(&key).1))
}

/// Prepares (or finds in the cache) a stock catalog kernel.
pub fn ensure(k: &CatalogKernel, rebuild: bool) -> Result<BuiltKernel> {
    let start = Instant::now();
    let (_, _, patch) = stock_params(k)?;
    let img = resolve(k)?;
    let key = cache_key(k.name, &img.version, patch);
    let (dir, state) = cache::cached(&key);
    match state {
        Ok(m) if !rebuild => return Ok(as_built(&dir, &m)),
        Ok(_) => progress(start, &format!("{}: rebuilding on request", k.name)),
        Err(why) if why == "not built" => {
            progress(start, &format!("{}: not cached ({key}); preparing", k.name))
        }
        Err(why) => progress(start, &format!("{}: cache entry {why}; rebuilding", k.name)),
    }
    prepare(k, &img, &key, start)
}

/// Module name of a `modules.dep` path: the file name without `.ko` (and a compression
/// suffix), with `-` as `_` (as modprobe matches names).
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|s| file.strip_suffix(s))
        .unwrap_or(file);
    stem.replace('-', "_")
}

/// Parses `modules.dep`: module name to (path, dependency paths).
pub fn parse_modules_dep(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(path, deps)| {
            let path = path.trim().to_string();
            let deps = deps.split_whitespace().map(String::from).collect();
            (module_name(&path), (path, deps))
        })
        .collect()
}

/// The `modules.dep` paths of `roots` and of everything they depend on (transitively),
/// sorted; roots that are not modules there are skipped.
pub fn dependency_closure(dep: &str, roots: &[&str]) -> Vec<String> {
    let map = parse_modules_dep(dep);
    let by_path: BTreeMap<&str, &Vec<String>> =
        map.values().map(|(p, d)| (p.as_str(), d)).collect();
    let mut out = BTreeSet::new();
    let mut todo: Vec<String> = roots
        .iter()
        .filter_map(|r| map.get(&r.replace('-', "_")).map(|(p, _)| p.clone()))
        .collect();
    while let Some(p) = todo.pop() {
        if !out.insert(p.clone()) {
            continue;
        }
        if let Some(deps) = by_path.get(p.as_str()) {
            todo.extend(deps.iter().filter(|d| !out.contains(*d)).cloned());
        }
    }
    out.into_iter().collect()
}

/// The names of `wanted`, in order, that are modules in `dep` (a `modules.dep` text).
pub fn modular(wanted: &[&str], dep: &str) -> Vec<String> {
    let map = parse_modules_dep(dep);
    wanted
        .iter()
        .filter(|w| map.contains_key(&w.replace('-', "_")))
        .map(|w| w.to_string())
        .collect()
}

/// Points a Debian headers `Makefile` (`include /usr/src/linux-headers-...-common/Makefile`)
/// at the copy unpacked under `root`.
pub fn relocate_headers_makefile(text: &str, root: &Path) -> String {
    let to = format!("include {}/usr/src/", root.display());
    text.lines()
        .map(|l| match l.strip_prefix("include /usr/src/") {
            Some(rest) => format!("{to}{rest}"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The compiler a Debian headers package builds with (`gcc-12`), from `.kernelvariables`.
pub fn headers_compiler(kernelvariables: &str) -> Option<String> {
    kernelvariables.split_whitespace().find_map(|tok| {
        let i = tok.find("gcc-")?;
        let name = &tok[i..];
        let ver = &name[4..];
        (!ver.is_empty() && ver.bytes().all(|b| b.is_ascii_digit())).then(|| name.to_string())
    })
}

/// The cached result as a bootable kernel: the PVH vmlinux when it was extracted, else the
/// vmlinuz; extra and early modules from what is modular; missing features from the config.
pub fn as_built(dir: &Path, m: &Manifest) -> BuiltKernel {
    let mods = dir.join("modules/lib/modules").join(&m.release);
    let dep = fs::read_to_string(mods.join("modules.dep")).unwrap_or_default();
    let cfg = KConfig::parse(&fs::read_to_string(dir.join("config")).unwrap_or_default());
    let vmlinux = dir.join("vmlinux");
    BuiltKernel {
        name: m.name.clone(),
        image: if vmlinux.exists() {
            vmlinux
        } else {
            dir.join("vmlinuz")
        },
        modules: Some(mods),
        release: m.release.clone(),
        built_from: None,
        cache_dir: Some(dir.to_path_buf()),
        // The patch is kept beside the build when one was applied.
        missing_features: with_vkms_fdinfo(missing_features(&cfg), dir.join("vkms.patch").exists()),
        extra_modules: modular(EXPLICIT_MODULES, &dep),
        early_modules: modular(EARLY_MODULES, &dep),
    }
}

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

/// Downloads, builds and packs a stock kernel into `kernels/<key>`.
fn prepare(k: &CatalogKernel, img: &StockImage, key: &str, start: Instant) -> Result<BuiltKernel> {
    let (series, suites, patch) = stock_params(k)?;
    let name = k.name;
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
    if patch.is_some() {
        tool("patch", "apt-get install patch")?;
    }
    let root_cache = catalog::cache_root();
    util::mkdirs(&root_cache)?;
    if let Some(free) = util::free_bytes(&root_cache)
        && free < NEEDED_BYTES
    {
        return Err(VmError::with_fix(
            format!(
                "disk full: {:.1} GiB free under {}, a stock kernel needs {:.0} GiB while it \
                 is prepared",
                free as f64 / (1u64 << 30) as f64,
                root_cache.display(),
                NEEDED_BYTES as f64 / (1u64 << 30) as f64
            ),
            "free space there, or point VM_CACHE_DIR at a larger disk",
        ));
    }
    let work = root_cache.join("stock-work").join(key);
    let _ = fs::remove_dir_all(&work);
    let root = work.join("root");
    let debs = work.join("debs");
    util::mkdirs(&root)?;

    // 1. Image, headers, kbuild: downloaded and unpacked, never installed.
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
        let deb = apt.download(p, &img.version, &debs)?;
        total += fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
        util::run_checked(
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
            &format!("dpkg-deb -x {}", deb.display()),
        )?;
        let _ = fs::remove_file(&deb);
    }
    let (mod_base, release) = find_release(&root)?;
    progress(
        start,
        &format!(
            "{name}: unpacked {} packages ({:.0} MiB of .deb); release {release}",
            pkgs.len(),
            util::mib(total)
        ),
    );
    let config_path = root.join(format!("boot/config-{release}"));
    let vmlinuz = root.join(format!("boot/vmlinuz-{release}"));
    let config_text = util::read(&config_path)?;
    if !vmlinuz.exists() {
        return Err(VmError::new(format!(
            "{} has no boot/vmlinuz-{release}",
            img.package
        )));
    }

    // 2. vkms from the matching source, built against the unpacked headers.
    let src_pkg = format!("linux-source-{series}");
    let installed = PathBuf::from(format!("/usr/src/{src_pkg}.tar.xz"));
    let installed_version =
        util::run_capture(Command::new("dpkg-query").args(["-W", "-f=${Version}", &src_pkg]))
            .unwrap_or_default();
    let tarball = if installed.exists() && installed_version.trim() == img.version {
        installed
    } else {
        progress(
            start,
            &format!(
                "{name}: installed {src_pkg} is {:?}, the image is {}: fetching the matching \
                 source",
                installed_version.trim(),
                img.version
            ),
        );
        fetch_debian_source(&src_pkg, suites, &img.version, start)?
    };
    let src = work.join("src");
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
            .arg(&tarball)
            .arg("-C")
            .arg(&src)
            .arg(format!("{src_pkg}/drivers/gpu/drm/vkms"))
            .arg(format!("{src_pkg}/scripts/extract-vmlinux")),
        &format!("tar -xf {} (vkms sources)", tarball.display()),
    )?;
    let vkms_src = src.join(&src_pkg).join("drivers/gpu/drm/vkms");
    if let Some(p) = patch {
        let pf = work.join("vkms.patch");
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
    let hdr = root.join(format!("usr/src/linux-headers-{release}"));
    let mk = hdr.join("Makefile");
    let text = util::read(&mk)?;
    util::write(&mk, relocate_headers_makefile(&text, &root).as_bytes())?;
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
        &work.join("vkms-build.log"),
        "vkms out of tree",
        start,
        &img.version,
    )?;
    let ko = vkms_src.join("vkms.ko");
    util::run_checked(
        Command::new("strip").arg("--strip-debug").arg(&ko),
        "strip --strip-debug vkms.ko",
    )?;
    let moddir = mod_base.join("lib/modules").join(&release);
    util::mkdirs(&moddir.join("extra"))?;
    util::copy(&ko, &moddir.join("extra/vkms.ko"))?;

    // 3. The module closure the guest needs, decompressed, with its own modules.dep.
    let _ = fs::remove_file(moddir.join("build"));
    let _ = fs::remove_file(moddir.join("source"));
    let depmod = tool("depmod", "apt-get install kmod")?;
    util::run_checked(
        Command::new(&depmod).arg("-b").arg(&mod_base).arg(&release),
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
                img.package
            )));
        }
    }
    let closure = dependency_closure(&dep, WANTED_MODULES);
    if !closure.iter().any(|p| module_name(p) == "vkms") {
        return Err(VmError::new(format!(
            "{name}: depmod did not list the out-of-tree vkms.ko"
        )));
    }
    let out = root_cache.join("kernels").join(key);
    let _ = fs::remove_dir_all(&out);
    let out_base = out.join("modules");
    let out_mod = out_base.join("lib/modules").join(&release);
    util::mkdirs(&out_mod)?;
    let mut packed = BTreeSet::new();
    for p in &closure {
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
    for f in ["modules.builtin", "modules.builtin.modinfo"] {
        if moddir.join(f).exists() {
            util::copy(&moddir.join(f), &out_mod.join(f))?;
        }
    }
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
    for p in &packed {
        if !order.contains(p) {
            order.push(p.clone());
        }
    }
    util::write(
        &out_mod.join("modules.order"),
        (order.join("\n") + "\n").as_bytes(),
    )?;
    util::run_checked(
        Command::new(&depmod).arg("-b").arg(&out_base).arg(&release),
        "depmod (reduced module tree)",
    )?;
    let size: u64 = packed
        .iter()
        .map(|p| fs::metadata(out_mod.join(p)).map(|m| m.len()).unwrap_or(0))
        .sum();
    progress(
        start,
        &format!(
            "{name}: packed {} of {} modules ({:.1} MiB)",
            packed.len(),
            have.len(),
            util::mib(size)
        ),
    );

    // 4. The images: vmlinuz as shipped, and vmlinux for a direct PVH boot when possible.
    util::copy(&vmlinuz, &out.join("vmlinuz"))?;
    util::write(&out.join("config"), config_text.as_bytes())?;
    if let Some(p) = patch {
        util::write(&out.join("vkms.patch"), p.as_bytes())?;
    }
    let cfg = KConfig::parse(&config_text);
    if cfg.get("CONFIG_PVH") == Some(Some("y")) {
        let script = src.join(&src_pkg).join("scripts/extract-vmlinux");
        let vmlinux = out.join("vmlinux");
        let ok = run_to_file(
            Command::new("sh").arg(&script).arg(&vmlinuz),
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

    let mut files = Vec::new();
    cache::collect_files(&out, &out, &mut files)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let m = Manifest {
        name: name.to_string(),
        source: format!(
            "{} + vkms from {src_pkg}{}",
            img.package,
            if patch.is_some() { " (patched)" } else { "" }
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
    let _ = fs::remove_dir_all(&work);
    let built = as_built(&out, &m);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_newest_abi_of_the_series() {
        let names = [
            "linux-image-6.1.0-47-amd64-unsigned",
            "linux-image-6.1.0-57-amd64-unsigned",
            "linux-image-6.1.0-9-amd64-unsigned",
            "linux-image-6.1.0-58-cloud-amd64-unsigned",
            "linux-image-6.1.0-58-rt-amd64-unsigned",
            "linux-image-6.1.0-58-amd64",
            "linux-image-6.1.0-58-amd64-dbg",
            "linux-image-6.12.117+deb12-amd64-unsigned",
        ];
        assert_eq!(newest_abi("6.1", &names).as_deref(), Some("6.1.0-57"));
        let names = [
            "linux-image-6.12.95+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-cloud-amd64-unsigned",
            "linux-image-6.12.117+deb12-rt-amd64-unsigned",
            "linux-image-6.12.113+deb12-amd64-unsigned",
            "linux-image-6.1.0-57-amd64-unsigned",
        ];
        assert_eq!(
            newest_abi("6.12", &names).as_deref(),
            Some("6.12.117+deb12")
        );
        // apt-cache pkgnames output, with a trailing newline.
        let out = "linux-image-6.1.0-53-amd64-unsigned\nlinux-image-6.1.0-54-amd64-unsigned\n";
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(newest_abi("6.1", &lines).as_deref(), Some("6.1.0-54"));
        assert_eq!(newest_abi("6.2", &lines), None);
        assert_eq!(
            parse_image_abi("6.1", "linux-image-6.10.3-amd64-unsigned"),
            None
        );
    }

    #[test]
    fn header_dependencies_from_apt_cache_show() {
        let d61 = "linux-headers-6.1.0-57-common (= 6.1.192-3), linux-kbuild-6.1 (>= \
                   6.1.192-3), linux-compiler-gcc-12-x86";
        assert_eq!(
            header_dependencies(d61),
            ["linux-headers-6.1.0-57-common", "linux-kbuild-6.1"]
        );
        let d612 = "linux-base (>= 4.12~), linux-headers-6.12.117+deb12-common (= \
                    6.12.117-1~deb12u1), linux-image-6.12.117+deb12-amd64 (= 6.12.117-1~deb12u1) \
                    | linux-image-6.12.117+deb12-amd64-unsigned (= 6.12.117-1~deb12u1), \
                    linux-kbuild-6.12.117+deb12, gcc-12";
        assert_eq!(
            header_dependencies(d612),
            [
                "linux-headers-6.12.117+deb12-common",
                "linux-kbuild-6.12.117+deb12"
            ]
        );
    }

    const DEP: &str = "\
kernel/drivers/gpu/drm/drm.ko.xz:
kernel/drivers/gpu/drm/drm_kms_helper.ko.xz: kernel/drivers/gpu/drm/drm.ko.xz
kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz: kernel/drivers/gpu/drm/drm.ko.xz
kernel/drivers/gpu/drm/virtio/virtio-gpu.ko.xz: kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz kernel/drivers/gpu/drm/drm_kms_helper.ko.xz
kernel/net/9p/9pnet.ko.xz: kernel/fs/netfs/netfs.ko.xz
kernel/fs/netfs/netfs.ko.xz:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz
kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/sound/core/snd.ko.xz:
extra/vkms.ko: kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz kernel/drivers/gpu/drm/drm_kms_helper.ko.xz
";

    #[test]
    fn module_closure_follows_modules_dep() {
        let c = dependency_closure(DEP, &["vkms", "9p", "9pnet_virtio", "virtio-gpu", "qxl"]);
        assert_eq!(
            c,
            [
                "extra/vkms.ko",
                "kernel/drivers/gpu/drm/drm.ko.xz",
                "kernel/drivers/gpu/drm/drm_kms_helper.ko.xz",
                "kernel/drivers/gpu/drm/drm_shmem_helper.ko.xz",
                "kernel/drivers/gpu/drm/virtio/virtio-gpu.ko.xz",
                "kernel/fs/9p/9p.ko.xz",
                "kernel/fs/netfs/netfs.ko.xz",
                "kernel/net/9p/9pnet.ko.xz",
                "kernel/net/9p/9pnet_virtio.ko.xz",
            ]
        );
        assert!(dependency_closure(DEP, &["nothing"]).is_empty());
        assert_eq!(
            module_name("kernel/drivers/gpu/drm/virtio/virtio-gpu.ko.xz"),
            "virtio_gpu"
        );
        assert_eq!(module_name("extra/vkms.ko"), "vkms");
        assert_eq!(
            modular(EXPLICIT_MODULES, DEP),
            ["9pnet_virtio", "9p"],
            "only what is a module, in init order"
        );
        assert!(modular(EARLY_MODULES, DEP).is_empty());
    }

    #[test]
    fn only_a_patched_kernel_has_vkms_fdinfo() {
        let base = vec!["tracing".to_string(), "sw_sync".to_string()];
        assert_eq!(
            with_vkms_fdinfo(base.clone(), false),
            ["sw_sync", "tracing", VKMS_FDINFO]
        );
        assert_eq!(with_vkms_fdinfo(base, true), ["sw_sync", "tracing"]);
        assert_eq!(
            with_vkms_fdinfo(vec![VKMS_FDINFO.into()], false),
            [VKMS_FDINFO],
            "listed once"
        );
    }

    #[test]
    fn missing_features_come_from_the_config() {
        let cfg61 = KConfig::parse(
            "CONFIG_DRM_VGEM=m\nCONFIG_DRM_VIRTIO_GPU=m\nCONFIG_DRM_BOCHS=m\nCONFIG_DRM_QXL=m\n\
             # CONFIG_UDMABUF is not set\n# CONFIG_DMABUF_HEAPS is not set\n\
             # CONFIG_SW_SYNC is not set\n# CONFIG_DEVICE_PRIVATE is not set\n\
             CONFIG_LIBNVDIMM=m\nCONFIG_ACPI_NFIT=m\nCONFIG_BLK_DEV_PMEM=m\n",
        );
        assert_eq!(
            missing_features(&cfg61),
            ["dma_heap", "sw_sync", "test_hmm", "tracing", "udmabuf"]
        );
        let cfg612 = KConfig::parse(
            "CONFIG_DRM_VGEM=m\nCONFIG_DRM_VIRTIO_GPU=m\nCONFIG_DRM_BOCHS=m\nCONFIG_DRM_QXL=m\n\
             CONFIG_UDMABUF=y\nCONFIG_DMABUF_HEAPS=y\nCONFIG_DMABUF_HEAPS_SYSTEM=y\n\
             # CONFIG_SW_SYNC is not set\n# CONFIG_DEVICE_PRIVATE is not set\n\
             CONFIG_LIBNVDIMM=m\nCONFIG_ACPI_NFIT=m\nCONFIG_BLK_DEV_PMEM=m\n\
             CONFIG_EVENT_TRACING=y\nCONFIG_PERF_EVENTS=y\n",
        );
        assert_eq!(missing_features(&cfg612), ["sw_sync", "test_hmm"]);
        // Perf events without event tracing (a kernel built with CONFIG_FTRACE off).
        let mut no_ftrace = cfg612.clone();
        no_ftrace.set("CONFIG_EVENT_TRACING", None);
        assert_eq!(
            missing_features(&no_ftrace),
            ["sw_sync", "test_hmm", "tracing"]
        );
    }

    #[test]
    fn headers_makefile_and_compiler() {
        let mk = "include /usr/src/linux-headers-6.1.0-57-common/Makefile\n";
        assert_eq!(
            relocate_headers_makefile(mk, Path::new("/c/w/root")),
            "include /c/w/root/usr/src/linux-headers-6.1.0-57-common/Makefile\n"
        );
        let kv = "override ARCH = x86\nCC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) \
                  $(CROSS_COMPILE)gcc-12\n";
        assert_eq!(headers_compiler(kv).as_deref(), Some("gcc-12"));
        assert_eq!(headers_compiler("CC = gcc"), None);
    }

    #[test]
    fn cache_keys_follow_version_and_patch() {
        let a = cache_key("stock-6.12", "6.12.117-1~deb12u1", None);
        assert!(a.starts_with("stock-6.12-6.12.117-1_deb12u1-"), "{a}");
        assert_ne!(a, cache_key("stock-6.12", "6.12.117-1~deb12u1", Some("x")));
        assert_ne!(a, cache_key("stock-6.12", "6.12.118-1~deb12u1", None));
    }
}
