//! Building guest kernels: fetch the source, apply the project's config fragment, build
//! `vmlinux` + `bzImage` + modules, and cache the result with a manifest that detects damage.

use crate::catalog::{self, CatalogKernel, Source};
use crate::kconfig::KConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Bumped whenever the build recipe changes in a way that changes the kernel.
pub const RECIPE_VERSION: &str = "recipe-1";

/// Free space the cache needs for one kernel build (source + objects + result).
const NEEDED_BYTES: u64 = 4 << 30;

/// A harness error: one line saying what failed, and the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmError {
    /// What failed.
    pub what: String,
    /// The command (or action) that fixes it, when there is one.
    pub fix: Option<String>,
}

impl VmError {
    /// An error without a fix.
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            fix: None,
        }
    }

    /// An error with the command that fixes it.
    pub fn with_fix(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
}

impl std::fmt::Display for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fix {
            Some(fix) => write!(f, "{}; fix: {fix}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for VmError {}

/// `Result` with [`VmError`].
pub type Result<T> = std::result::Result<T, VmError>;

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

/// Prints a progress line with the elapsed time.
pub fn progress(start: Instant, msg: &str) {
    eprintln!("[vm {:>5.1}s] {msg}", start.elapsed().as_secs_f64());
}

/// The resolved version of a Debian source package: installed tarball, or a download plan.
#[derive(Debug, Clone)]
pub struct ResolvedSource {
    /// Package version.
    pub version: String,
    /// Path of the tarball once available (installed) or after [`fetch_source`].
    pub tarball: Option<PathBuf>,
}

/// Finds the version of a catalog kernel's source without downloading it.
pub fn resolve(k: &CatalogKernel) -> Result<ResolvedSource> {
    if let Source::Tarball {
        version, sha256, ..
    } = &k.source
    {
        // The checksum names the input: the version alone would let a different tarball of
        // the same release reuse the cache entry.
        return Ok(ResolvedSource {
            version: format!("{version}-{}", &sha256[..12]),
            tarball: None,
        });
    }
    let Source::DebianSource { package, suites } = &k.source else {
        return Err(not_a_source_build(k));
    };
    let series = package.trim_start_matches("linux-source-");
    let tarball = PathBuf::from(format!("/usr/src/{package}.tar.xz"));
    if tarball.exists() {
        let v = run_capture(Command::new("dpkg-query").args(["-W", "-f=${Version}", package]))
            .unwrap_or_default();
        if !v.trim().is_empty() {
            return Ok(ResolvedSource {
                version: v.trim().to_string(),
                tarball: Some(tarball),
            });
        }
    }
    let apt = PrivateApt::new(suites)?;
    let v = apt.candidate(package)?.ok_or_else(|| {
        VmError::with_fix(
            format!("{package} is not installed and no suite of {suites:?} offers it"),
            format!("apt-get install {package} (Linux {series} source)"),
        )
    })?;
    Ok(ResolvedSource {
        version: v,
        tarball: None,
    })
}

/// Where a [`Source::Tarball`] file is looked for: `$VM_KERNEL_TARBALLS/<file>`, then
/// `<checkout>/../shared/kernels/<file>` (the directory CI lays beside the clone).
pub fn tarball_candidates(file: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(d) = std::env::var_os("VM_KERNEL_TARBALLS") {
        v.push(PathBuf::from(d).join(file));
    }
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    v.push(checkout.join("../shared/kernels").join(file));
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/vm -> <checkout>/../shared/kernels, for a binary copied elsewhere
        // with its checkout.
        if let Some(root) = exe.ancestors().nth(3) {
            v.push(root.join("../shared/kernels").join(file));
        }
    }
    v
}

/// Finds a [`Source::Tarball`] file and checks its SHA-256.
fn find_tarball(k: &CatalogKernel, file: &str, sha256: &str, start: Instant) -> Result<PathBuf> {
    let candidates = tarball_candidates(file);
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        let list: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        return Err(VmError::with_fix(
            format!("{}: source tarball {file} not found (looked at {})", k.name, list.join(", ")),
            "put it there, or set VM_KERNEL_TARBALLS to the directory that holds it",
        ));
    };
    progress(start, &format!("{}: checking {}", k.name, path.display()));
    let got = sha256_file(path).map_err(|e| VmError::new(format!("{}: {e}", path.display())))?;
    if got != sha256 {
        return Err(VmError::new(format!(
            "{}: {} has SHA-256 {got}, the catalog expects {sha256}: refusing a different tarball",
            k.name,
            path.display()
        )));
    }
    Ok(path.clone())
}

/// Applies `patches` (`patch -p1`) to the freshly unpacked `tree`.
fn apply_patches(tree: &Path, patches: &[&str]) -> Result<()> {
    for (i, text) in patches.iter().enumerate() {
        let file = tree.join(format!(".vm-patch-{i}.diff"));
        write(&file, text.as_bytes())?;
        let r = run_checked(
            Command::new("patch")
                .arg("-p1")
                .arg("--forward")
                .arg("--batch")
                .arg("-d")
                .arg(tree)
                .arg("-i")
                .arg(&file),
            "patch -p1 (build fix for the tarball's tree)",
        );
        let _ = fs::remove_file(&file);
        r?;
    }
    Ok(())
}

/// The error for a source-build operation asked of a kernel that is not built from source.
fn not_a_source_build(k: &CatalogKernel) -> VmError {
    VmError::new(format!(
        "{} is a stock kernel image, not built from source",
        k.name
    ))
}

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

/// Makes the source tarball available (downloading and unpacking the .deb if needed).
pub fn fetch_source(k: &CatalogKernel, r: &ResolvedSource, start: Instant) -> Result<PathBuf> {
    if let Some(t) = &r.tarball {
        return Ok(t.clone());
    }
    let Source::DebianSource { package, suites } = &k.source else {
        return Err(not_a_source_build(k));
    };
    fetch_debian_source(package, suites, &r.version, start)
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

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Unpacks a source tarball once into the cache; returns the tree.
fn unpack(tarball: &Path, package: &str, version: &str, start: Instant) -> Result<PathBuf> {
    unpack_with(tarball, package, version, start, |_| Ok(()))
}

/// [`unpack`], then `prepare` on the tree before it is marked complete (a failed prepare
/// leaves no complete tree behind).
fn unpack_with(
    tarball: &Path,
    package: &str,
    version: &str,
    start: Instant,
    prepare: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let dir = catalog::cache_root()
        .join("src")
        .join(format!("{package}-{version}"));
    let tree = dir.join(package);
    if dir.join(".complete").exists() && tree.join("Makefile").exists() {
        return Ok(tree);
    }
    let _ = fs::remove_dir_all(&dir);
    mkdirs(&dir)?;
    let size = fs::metadata(tarball).map(|m| m.len()).unwrap_or(0);
    progress(
        start,
        &format!("unpacking {} ({:.0} MiB)", tarball.display(), mib(size)),
    );
    run_checked(
        Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&dir),
        "tar -xf (kernel source)",
    )?;
    if !tree.join("Makefile").exists() {
        return Err(VmError::new(format!(
            "{} did not unpack to {}",
            tarball.display(),
            tree.display()
        )));
    }
    prepare(&tree)?;
    write(&dir.join(".complete"), b"")?;
    Ok(tree)
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
        missing_features: Vec::new(),
        extra_modules: Vec::new(),
        early_modules: Vec::new(),
    }
}

/// Builds (or finds in the cache) a catalog kernel; stock images go to [`crate::stock`].
pub fn ensure_catalog(k: &CatalogKernel, rebuild: bool) -> Result<BuiltKernel> {
    if matches!(k.source, Source::DebianStock { .. }) {
        return crate::stock::ensure(k, rebuild);
    }
    let start = Instant::now();
    let r = resolve(k)?;
    let key = catalog::cache_key(k.name, &r.version);
    let (dir, state) = cached(&key);
    match state {
        Ok(m) if !rebuild => return Ok(as_built(&dir, &m)),
        Ok(_) => progress(start, &format!("{}: rebuilding on request", k.name)),
        Err(why) if why == "not built" => {
            progress(start, &format!("{}: not cached ({key}); building", k.name))
        }
        Err(why) => progress(start, &format!("{}: cache entry {why}; rebuilding", k.name)),
    }
    if let Source::Tarball {
        file,
        top,
        sha256,
        patches,
        ..
    } = &k.source
    {
        let tarball = find_tarball(k, file, sha256, start)?;
        let tree = unpack_with(&tarball, top, &r.version, start, |t| {
            apply_patches(t, patches)
        })?;
        return build_tree(k.name, top, &r.version, &tree, &key, start);
    }
    let Source::DebianSource { package, .. } = &k.source else {
        return Err(not_a_source_build(k));
    };
    let tarball = fetch_source(k, &r, start)?;
    let tree = unpack(&tarball, package, &r.version, start)?;
    build_tree(k.name, package, &r.version, &tree, &key, start)
}

/// Builds a source tree the user brings (`--kernel-source DIR`), cached by its path, its
/// `make kernelversion` and the fragment.
pub fn ensure_tree(tree: &Path, rebuild: bool) -> Result<BuiltKernel> {
    let start = Instant::now();
    if !tree.join("Makefile").exists() || !tree.join("Kconfig").exists() {
        return Err(VmError::new(format!(
            "{} is not a kernel source tree (no Makefile/Kconfig)",
            tree.display()
        )));
    }
    let version = run_capture(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(tree)
            .arg("kernelversion"),
    )
    .map_err(|e| VmError::new(format!("make kernelversion in {}: {e}", tree.display())))?
    .trim()
    .to_string();
    let canon = fs::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf());
    let path_hash = crate::kconfig::fragment_hash(&[canon.to_string_lossy().as_bytes()]);
    let key = catalog::cache_key(&format!("custom-{}", &path_hash[..8]), &version);
    let (dir, state) = cached(&key);
    if let (Ok(m), false) = (&state, rebuild) {
        return Ok(as_built(&dir, m));
    }
    build_tree(
        "custom",
        &canon.to_string_lossy(),
        &version,
        &canon,
        &key,
        start,
    )
}

pub(crate) fn free_bytes(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Configures and builds `tree` out of tree into the cache entry `key`.
fn build_tree(
    name: &str,
    source: &str,
    version: &str,
    tree: &Path,
    key: &str,
    start: Instant,
) -> Result<BuiltKernel> {
    let root = catalog::cache_root();
    mkdirs(&root)?;
    if let Some(free) = free_bytes(&root)
        && free < NEEDED_BYTES
    {
        return Err(VmError::with_fix(
            format!(
                "disk full: {:.1} GiB free under {}, a kernel build needs {:.0} GiB",
                free as f64 / (1u64 << 30) as f64,
                root.display(),
                NEEDED_BYTES as f64 / (1u64 << 30) as f64
            ),
            "free space there, or point VM_CACHE_DIR at a larger disk",
        ));
    }
    let obj = root.join("build").join(key);
    mkdirs(&obj)?;
    let log_path = obj.join("build.log");
    let make = |args: &[&str], phase: &str| -> Result<()> {
        let mut c = Command::new("make");
        c.arg("-C").arg(tree).arg(format!("O={}", obj.display()));
        c.args(args);
        run_logged(c, &log_path, phase, start)
    };

    progress(
        start,
        &format!("{name}: configuring (defconfig + kvm_guest.config + fragment)"),
    );
    make(&["defconfig"], "defconfig")?;
    make(&["kvm_guest.config"], "kvm_guest.config")?;
    let cfg_path = obj.join(".config");
    let mut cfg = KConfig::parse(&read(&cfg_path)?);
    let overrides = cfg.merge(&KConfig::parse(catalog::FRAGMENT));
    write(&cfg_path, cfg.render().as_bytes())?;
    make(&["olddefconfig"], "olddefconfig")?;
    let final_cfg = KConfig::parse(&read(&cfg_path)?);
    let missing = final_cfg.check(&KConfig::parse(catalog::REQUIRED));
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(ToString::to_string).collect();
        return Err(VmError::new(format!(
            "{name}: the kernel's Kconfig dropped required options ({}); this source cannot \
             host the full device set",
            list.join(", ")
        )));
    }
    progress(
        start,
        &format!(
            "{name}: config ready ({} fragment options applied)",
            overrides.len()
        ),
    );

    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let j = format!("-j{jobs}");
    progress(
        start,
        &format!(
            "{name}: make {j} vmlinux bzImage modules (log: {})",
            log_path.display()
        ),
    );
    make(&[&j, "vmlinux", "bzImage", "modules"], "compile")?;
    let release = run_capture(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(tree)
            .arg(format!("O={}", obj.display()))
            .arg("kernelrelease"),
    )
    .map_err(VmError::new)?
    .trim()
    .to_string();

    let out = root.join("kernels").join(key);
    let _ = fs::remove_dir_all(&out);
    mkdirs(&out)?;
    make(
        &[
            "modules_install",
            "INSTALL_MOD_STRIP=1",
            &format!("INSTALL_MOD_PATH={}", out.join("modules").display()),
        ],
        "modules_install",
    )?;
    // The build and source links point back into the build tree; the guest needs neither.
    let moddir = out.join("modules/lib/modules").join(&release);
    let _ = fs::remove_file(moddir.join("build"));
    let _ = fs::remove_file(moddir.join("source"));
    copy(&obj.join("vmlinux"), &out.join("vmlinux"))?;
    copy(&obj.join("arch/x86/boot/bzImage"), &out.join("bzImage"))?;
    copy(&cfg_path, &out.join("config"))?;

    let mut files = Vec::new();
    collect_files(&out, &out, &mut files)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let m = Manifest {
        name: name.to_string(),
        source: source.to_string(),
        version: version.to_string(),
        key: key.to_string(),
        release,
        build_seconds: start.elapsed().as_secs(),
        tree: tree.to_path_buf(),
        obj: obj.clone(),
        files,
    };
    let json = serde_json::to_string_pretty(&m).map_err(|e| VmError::new(e.to_string()))?;
    write(&out.join("manifest.json"), json.as_bytes())?;
    progress(
        start,
        &format!(
            "{name}: built {} in {} s -> {}",
            m.release,
            m.build_seconds,
            out.display()
        ),
    );
    Ok(as_built(&out, &m))
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

/// Runs a command with its output appended to `log`, printing elapsed time every 30 s; on
/// failure reports the last lines of the log and recognises a full disk.
pub(crate) fn run_logged(mut c: Command, log: &Path, phase: &str, start: Instant) -> Result<()> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| VmError::new(format!("{}: {e}", log.display())))?;
    let err = file.try_clone().map_err(|e| VmError::new(e.to_string()))?;
    c.stdout(Stdio::from(file)).stderr(Stdio::from(err));
    let mut child = c.spawn().map_err(|e| {
        VmError::with_fix(
            format!("cannot run make for {phase}: {e}"),
            "scripts/setup (installs make, gcc, flex, bison, bc, libelf-dev, libssl-dev)",
        )
    })?;
    let t0 = Instant::now();
    let mut last = 0;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(VmError::new(format!("waiting for make ({phase}): {e}"))),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let secs = t0.elapsed().as_secs();
        if secs >= last + 30 {
            last = secs;
            progress(start, &format!("  {phase}: {secs} s"));
        }
    };
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(25).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    for l in &tail {
        eprintln!("    | {l}");
    }
    if text.contains("No space left on device") {
        return Err(VmError::with_fix(
            format!(
                "kernel build ({phase}) failed: disk full (log: {})",
                log.display()
            ),
            "free space, or point VM_CACHE_DIR at a larger disk",
        ));
    }
    Err(VmError::with_fix(
        format!(
            "kernel build failed in {phase} ({status}); log: {}",
            log.display()
        ),
        "scripts/setup installs the build dependencies; then vm kernel build NAME --rebuild",
    ))
}

/// Runs a command; on failure, a one-line error with its last line of stderr.
pub(crate) fn run_checked(c: &mut Command, what: &str) -> Result<()> {
    let out = c
        .output()
        .map_err(|e| VmError::with_fix(format!("{what}: {e}"), "scripts/setup"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(VmError::new(format!(
            "{what} failed ({}): {last}",
            out.status
        )));
    }
    Ok(())
}

/// Runs a command and returns its stdout, or a one-line error.
pub fn run_capture(c: &mut Command) -> std::result::Result<String, String> {
    let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{:?} failed: {}",
            c.get_program(),
            err.lines().last().unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel selftests the harness builds for each kernel: (suite, executable).
pub const SELFTESTS: &[(&str, &str)] = &[
    ("hmm-tests", "hmm-tests"),
    ("sync", "sync_test"),
    ("udmabuf", "udmabuf"),
    ("dmabuf-heaps", "dmabuf-heap"),
];

/// Builds the kernel's own selftests for `k` (from the same source tree, against its
/// installed uapi headers) into `<cache>/selftests`, once. Returns the directory. A test
/// that does not compile is left out, with the compiler's message in `<name>.build-error`
/// (the in-guest runner then reports it as a failure).
pub fn ensure_selftests(k: &BuiltKernel) -> Result<PathBuf> {
    let (Some((tree, obj)), Some(dir)) = (&k.built_from, &k.cache_dir) else {
        return Err(VmError::new(format!(
            "{}: selftests need a kernel the harness built (no source tree known)",
            k.name
        )));
    };
    let out = dir.join("selftests");
    if out.join(".complete").exists() {
        return Ok(out);
    }
    let start = Instant::now();
    progress(start, &format!("{}: building kernel selftests", k.name));
    let _ = fs::remove_dir_all(&out);
    mkdirs(&out)?;
    let hdr = obj.join("selftest-headers");
    run_checked(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(tree)
            .arg(format!("O={}", obj.display()))
            .arg(format!("INSTALL_HDR_PATH={}", hdr.display()))
            .arg("headers_install"),
        "make headers_install (for selftests)",
    )?;
    let t = tree.join("tools/testing/selftests");
    let inc = hdr.join("include");
    let hmm_dir = if t.join("mm/hmm-tests.c").exists() {
        "mm"
    } else {
        "vm"
    };
    let sync_srcs: Vec<PathBuf> = fs::read_dir(t.join("sync"))
        .map(|rd| {
            let mut v: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "c"))
                .collect();
            v.sort();
            v
        })
        .unwrap_or_default();
    let recipes: Vec<(&str, Vec<PathBuf>, Vec<PathBuf>)> = vec![
        (
            "hmm-tests",
            vec![t.join(hmm_dir).join("hmm-tests.c")],
            vec![t.clone(), inc.clone(), tree.clone()],
        ),
        ("sync_test", sync_srcs, vec![inc.clone()]),
        (
            "udmabuf",
            vec![t.join("drivers/dma-buf/udmabuf.c")],
            vec![t.clone(), inc.clone()],
        ),
        (
            "dmabuf-heap",
            vec![t.join("dmabuf-heaps/dmabuf-heap.c")],
            vec![t.clone(), inc.clone()],
        ),
    ];
    let mut built = Vec::new();
    for (exe, srcs, incs) in recipes {
        let mut c = Command::new("cc");
        c.args(["-O2", "-w", "-D_GNU_SOURCE", "-o"])
            .arg(out.join(exe));
        for i in &incs {
            c.arg("-I").arg(i);
        }
        c.args(&srcs).args(["-lpthread", "-lrt"]);
        // 5.10's hmm-tests uses libhugetlbfs (Debian libhugetlbfs-dev).
        if srcs
            .iter()
            .any(|s| fs::read_to_string(s).is_ok_and(|t| t.contains("<hugetlbfs.h>")))
        {
            c.arg("-lhugetlbfs");
        }
        match c.output() {
            Ok(o) if o.status.success() => built.push(exe),
            Ok(o) => {
                let _ = fs::write(out.join(format!("{exe}.build-error")), &o.stderr);
                progress(
                    start,
                    &format!("  {exe}: does not compile (see {exe}.build-error)"),
                );
            }
            Err(e) => {
                return Err(VmError::with_fix(
                    format!("cannot run cc: {e}"),
                    "scripts/setup",
                ));
            }
        }
    }
    write(&out.join(".complete"), built.join("\n").as_bytes())?;
    progress(
        start,
        &format!("{}: selftests built: {}", k.name, built.join(", ")),
    );
    Ok(out)
}

pub(crate) fn mkdirs(p: &Path) -> Result<()> {
    fs::create_dir_all(p).map_err(|e| {
        VmError::with_fix(
            format!("cannot create {}: {e}", p.display()),
            "make the cache writable or set VM_CACHE_DIR",
        )
    })
}

pub(crate) fn write(p: &Path, data: &[u8]) -> Result<()> {
    fs::write(p, data).map_err(|e| VmError::new(format!("cannot write {}: {e}", p.display())))
}

pub(crate) fn read(p: &Path) -> Result<String> {
    fs::read_to_string(p).map_err(|e| VmError::new(format!("cannot read {}: {e}", p.display())))
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| VmError::new(format!("copy {} -> {}: {e}", from.display(), to.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_and_how_to_fix() {
        let e = VmError::with_fix("qemu-system-x86_64 not found", "scripts/setup");
        assert_eq!(
            e.to_string(),
            "qemu-system-x86_64 not found; fix: scripts/setup"
        );
        assert_eq!(VmError::new("x").to_string(), "x");
    }

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
