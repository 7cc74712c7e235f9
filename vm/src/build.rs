//! Building guest kernels: fetch the source, apply the project's config fragment, build
//! `vmlinux` + `bzImage` + modules, and cache the result with a manifest that detects damage.

use crate::apt::{PrivateApt, fetch_debian_source};
use crate::cache::{BuiltKernel, Manifest, as_built, cached, collect_files};
use crate::catalog::{self, CatalogKernel, Source};
use crate::error::{Result, VmError};
use crate::kconfig::KConfig;
use crate::util::{copy, mib, mkdirs, progress, read, run_capture, run_checked, run_logged, write};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Free space the cache needs for one kernel build (source + objects + result).
const NEEDED_BYTES: u64 = 4 << 30;

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
            format!(
                "{}: source tarball {file} not found (looked at {})",
                k.name,
                list.join(", ")
            ),
            "put it there, or set VM_KERNEL_TARBALLS to the directory that holds it",
        ));
    };
    progress(start, &format!("{}: checking {}", k.name, path.display()));
    let got = crate::cache::sha256_file(path)
        .map_err(|e| VmError::new(format!("{}: {e}", path.display())))?;
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
            "patch -p1 (a catalog kernel's patch to its unpacked tree)",
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

/// Builds (or finds in the cache) a catalog kernel; stock images go to [`crate::stock`].
pub fn ensure_catalog(k: &CatalogKernel, rebuild: bool) -> Result<BuiltKernel> {
    if matches!(k.source, Source::DebianStock { .. }) {
        return crate::stock::ensure(k, rebuild);
    }
    let start = Instant::now();
    let r = resolve(k)?;
    let key = catalog::cache_key(k.name, &r.version, &catalog::kernel_extra(k));
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
        return build_tree(
            k.name,
            top,
            &r.version,
            &tree,
            (&key, k.extra_config),
            start,
        );
    }
    let Source::DebianSource { package, .. } = &k.source else {
        return Err(not_a_source_build(k));
    };
    let tarball = fetch_source(k, &r, start)?;
    let tree = if k.test_patches.is_empty() {
        unpack(&tarball, package, &r.version, start)?
    } else {
        // Its own patched copy, apart from the plain tree of the same package.
        let hash = crate::kconfig::fragment_hash(&[catalog::kernel_extra(k).as_bytes()]);
        let dir_version = format!("{}-patched-{}", r.version, &hash[..8]);
        unpack_with(&tarball, package, &dir_version, start, |t| {
            apply_patches(t, k.test_patches)
        })?
    };
    build_tree(
        k.name,
        package,
        &r.version,
        &tree,
        (&key, k.extra_config),
        start,
    )
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
    let key = catalog::cache_key(&format!("custom-{}", &path_hash[..8]), &version, "");
    let (dir, state) = cached(&key);
    if let (Ok(m), false) = (&state, rebuild) {
        return Ok(as_built(&dir, m));
    }
    build_tree(
        "custom",
        &canon.to_string_lossy(),
        &version,
        &canon,
        (&key, ""),
        start,
    )
}

/// Configures and builds `tree` out of tree into the cache entry `key`, with the
/// kernel's own config lines `extra` ([`CatalogKernel::extra_config`]) after the fragment.
fn build_tree(
    name: &str,
    source: &str,
    version: &str,
    tree: &Path,
    (key, extra): (&str, &str),
    start: Instant,
) -> Result<BuiltKernel> {
    let root = catalog::cache_root();
    mkdirs(&root)?;
    check_free_space(&root)?;
    let obj = root.join("build").join(key);
    mkdirs(&obj)?;
    // One log per attempt (build.log.1, .2, ...; build.log links to the newest), so a
    // failure's error lines are this attempt's.
    let log_path = crate::buildlog::fresh_log(&obj, "build.log")?;
    let b = KernelBuild {
        name,
        version,
        tree,
        extra,
        obj: &obj,
        log: &log_path,
        start,
    };
    let cfg_path = b.configure()?;
    let release = b.compile()?;
    let out = root.join("kernels").join(key);
    b.install(&out, &release, &cfg_path)?;
    b.write_manifest(source, key, release, &out)
}

/// Refuses a build with less than [`NEEDED_BYTES`] free under the cache root.
fn check_free_space(root: &Path) -> Result<()> {
    crate::util::require_free(root, NEEDED_BYTES, "a kernel build")
}

/// One build of a kernel tree out of tree: what the phases of [`build_tree`] share.
struct KernelBuild<'a> {
    /// The kernel's name, for progress lines and the manifest.
    name: &'a str,
    /// The source version (the build log's and the manifest's).
    version: &'a str,
    /// The source tree, never written.
    tree: &'a Path,
    /// The kernel's own config lines, merged after the fragment and required.
    extra: &'a str,
    /// The object directory (`O=`).
    obj: &'a Path,
    /// This attempt's build log.
    log: &'a Path,
    /// When the build started.
    start: Instant,
}

impl KernelBuild<'_> {
    /// Runs `make -C <tree> O=<obj> args`, its output in the build log.
    fn make(&self, args: &[&str], phase: &str) -> Result<()> {
        let mut c = Command::new("make");
        c.arg("-C")
            .arg(self.tree)
            .arg(format!("O={}", self.obj.display()));
        c.args(args);
        run_logged(c, self.log, phase, self.start, self.version)
    }

    /// Makes the `.config`: allnoconfig with the fragment (and the kernel's own lines),
    /// kvm_guest.config, the same merged again, olddefconfig; fails where a required option
    /// or one of the kernel's own lines was dropped. Returns the `.config` path.
    fn configure(&self) -> Result<PathBuf> {
        let (name, start, obj) = (self.name, self.start, self.obj);
        progress(
            start,
            &format!("{name}: configuring (allnoconfig + fragment, kvm_guest.config, fragment)"),
        );
        // allnoconfig keeps what KCONFIG_ALLCONFIG names (and turns on what that depends on),
        // so the base is the fragment's guest and nothing else (see vm/config/guest.config).
        let allconfig = obj.join("guest.allconfig");
        let fragment = format!("{}\n{}", catalog::FRAGMENT, self.extra);
        write(&allconfig, fragment.as_bytes())?;
        let kconfig_allconfig = format!("KCONFIG_ALLCONFIG={}", allconfig.display());
        self.make(&["allnoconfig", &kconfig_allconfig], "allnoconfig")?;
        self.make(&["kvm_guest.config"], "kvm_guest.config")?;
        let cfg_path = obj.join(".config");
        let mut cfg = KConfig::parse(&read(&cfg_path)?);
        let overrides = cfg.merge(&KConfig::parse(&fragment));
        write(&cfg_path, cfg.render().as_bytes())?;
        self.make(&["olddefconfig"], "olddefconfig")?;
        let final_cfg = KConfig::parse(&read(&cfg_path)?);
        let required = format!("{}\n{}", catalog::REQUIRED, self.extra);
        let missing = final_cfg.check(&KConfig::parse(&required));
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
        Ok(cfg_path)
    }

    /// Builds `vmlinux`, `bzImage` and the modules; returns the kernel release.
    fn compile(&self) -> Result<String> {
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
        let j = format!("-j{jobs}");
        progress(
            self.start,
            &format!(
                "{}: make {j} vmlinux bzImage modules (log: {})",
                self.name,
                self.log.display()
            ),
        );
        self.make(&[&j, "vmlinux", "bzImage", "modules"], "compile")?;
        Ok(run_capture(
            Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(self.tree)
                .arg(format!("O={}", self.obj.display()))
                .arg("kernelrelease"),
        )
        .map_err(VmError::new)?
        .trim()
        .to_string())
    }

    /// Fills the cache entry `out` (made anew): the modules (stripped, without the links
    /// back into the build tree), `vmlinux`, `bzImage` and the config.
    fn install(&self, out: &Path, release: &str, cfg_path: &Path) -> Result<()> {
        let _ = fs::remove_dir_all(out);
        mkdirs(out)?;
        self.make(
            &[
                "modules_install",
                "INSTALL_MOD_STRIP=1",
                &format!("INSTALL_MOD_PATH={}", out.join("modules").display()),
            ],
            "modules_install",
        )?;
        // The build and source links point back into the build tree; the guest needs neither.
        let moddir = out.join("modules/lib/modules").join(release);
        let _ = fs::remove_file(moddir.join("build"));
        let _ = fs::remove_file(moddir.join("source"));
        copy(&self.obj.join("vmlinux"), &out.join("vmlinux"))?;
        copy(
            &self.obj.join("arch/x86/boot/bzImage"),
            &out.join("bzImage"),
        )?;
        copy(cfg_path, &out.join("config"))?;
        Ok(())
    }

    /// Writes the manifest of `out` (which completes the cache entry) and returns the
    /// entry as a bootable kernel.
    fn write_manifest(
        &self,
        source: &str,
        key: &str,
        release: String,
        out: &Path,
    ) -> Result<BuiltKernel> {
        let name = self.name;
        let mut files = Vec::new();
        collect_files(out, out, &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let m = Manifest {
            name: name.to_string(),
            source: source.to_string(),
            version: self.version.to_string(),
            key: key.to_string(),
            release,
            build_seconds: self.start.elapsed().as_secs(),
            tree: self.tree.to_path_buf(),
            obj: self.obj.to_path_buf(),
            files,
        };
        let json = serde_json::to_string_pretty(&m).map_err(|e| VmError::new(e.to_string()))?;
        write(&out.join("manifest.json"), json.as_bytes())?;
        progress(
            self.start,
            &format!(
                "{name}: built {} in {} s -> {}",
                m.release,
                m.build_seconds,
                out.display()
            ),
        );
        Ok(as_built(out, &m))
    }
}

/// The kernel selftests the harness builds for each kernel: (suite, executable).
pub const SELFTESTS: &[(&str, &str)] = &[
    ("hmm-tests", "hmm-tests"),
    ("sync", "sync_test"),
    ("udmabuf", "udmabuf"),
    ("dmabuf-heaps", "dmabuf-heap"),
];

/// The directory of a kernel's cache entry that holds its selftests: named after the
/// recipe, so a change of [`ensure_selftests`] builds them anew instead of reusing what an
/// older recipe made (`selftests/`, without 5.15's `local_config.h`, has no hmm-tests) and
/// never rewrites a directory another run may be using.
pub const SELFTESTS_DIR: &str = "selftests-3";

/// Builds the kernel's own selftests for `k` (from the same source tree, against its
/// installed uapi headers) into `<cache>/`[`SELFTESTS_DIR`], once. Returns the directory. A test
/// that does not compile is left out, with the compiler's message in `<name>.build-error`
/// (the in-guest runner then reports it as a failure).
pub fn ensure_selftests(k: &BuiltKernel) -> Result<PathBuf> {
    let (Some((tree, obj)), Some(dir)) = (&k.built_from, &k.cache_dir) else {
        return Err(VmError::new(format!(
            "{}: selftests need a kernel the harness built (no source tree known)",
            k.name
        )));
    };
    let out = dir.join(SELFTESTS_DIR);
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
    let (recipes, hmm_libs) = selftest_recipes(tree, obj, &hdr)?;
    let mut built = Vec::new();
    for (exe, srcs, incs) in recipes {
        let mut c = selftest_command(&out, exe, &srcs, &incs, hmm_libs.as_deref());
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

/// How one selftest executable is compiled: (executable, sources, include directories).
type SelftestRecipe = (&'static str, Vec<PathBuf>, Vec<PathBuf>);

/// The recipes of the [`SELFTESTS`] in `tree`, against the uapi headers installed in `hdr`,
/// and the extra libraries hmm-tests links with where the tree's `check_config.sh` made its
/// `local_config.h` (in `obj`).
fn selftest_recipes(
    tree: &Path,
    obj: &Path,
    hdr: &Path,
) -> Result<(Vec<SelftestRecipe>, Option<Vec<String>>)> {
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
    let hmm_src = t.join(hmm_dir).join("hmm-tests.c");
    let mut hmm_incs = vec![t.clone(), inc.clone(), tree.to_path_buf()];
    // Newer trees (7.x) build hmm-tests with the mm selftests' helpers (vm_util.c,
    // hugepage_settings.c): each helper whose header hmm-tests.c includes is compiled in,
    // found by the source, not by the version.
    let mut hmm_srcs = vec![hmm_src.clone()];
    let hmm_text = fs::read_to_string(&hmm_src).unwrap_or_default();
    for helper in ["vm_util", "hugepage_settings", "thp_settings"] {
        let c = t.join(hmm_dir).join(format!("{helper}.c"));
        if hmm_text.contains(&format!("{helper}.h")) && c.exists() {
            hmm_srcs.push(c);
        }
    }
    if hmm_srcs.len() > 1 {
        hmm_incs.push(t.join(hmm_dir));
    }
    // Trees around 5.15 include "./local_config.h", which their Makefile makes with
    // check_config.sh (it probes libhugetlbfs); the tree is never written, so the header is
    // made in the object directory and found through -I.
    let hmm_libs = match local_config(&hmm_src, &obj.join("selftest-config"))? {
        Some((dir, libs)) => {
            hmm_incs.push(dir);
            Some(libs)
        }
        None => None,
    };
    let recipes: Vec<SelftestRecipe> = vec![
        ("hmm-tests", hmm_srcs, hmm_incs),
        // 7.x's sync_test includes "kselftest.h".
        ("sync_test", sync_srcs, vec![inc.clone(), t.clone()]),
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
    Ok((recipes, hmm_libs))
}

/// The `cc` command that builds the selftest `exe` into `out`.
fn selftest_command(
    out: &Path,
    exe: &str,
    srcs: &[PathBuf],
    incs: &[PathBuf],
    hmm_libs: Option<&[String]>,
) -> Command {
    let mut c = Command::new("cc");
    c.args(["-O2", "-w", "-D_GNU_SOURCE", "-o"])
        .arg(out.join(exe));
    for i in incs {
        c.arg("-I").arg(i);
    }
    c.args(srcs).args(["-lpthread", "-lrt"]);
    match (hmm_libs, exe) {
        // What check_config.sh found (HMM_EXTRA_LIBS).
        (Some(libs), "hmm-tests") => {
            c.args(libs);
        }
        // 5.10's hmm-tests includes <hugetlbfs.h> unconditionally (Debian
        // libhugetlbfs-dev).
        _ => {
            if srcs
                .iter()
                .any(|s| fs::read_to_string(s).is_ok_and(|t| t.contains("<hugetlbfs.h>")))
            {
                c.arg("-lhugetlbfs");
            }
        }
    }
    c
}

/// For an hmm-tests source that includes `local_config.h` (5.x trees before `mm/`), runs
/// the tree's `check_config.sh` beside it with `cc` in `dir` (created) and returns `dir`
/// and the libraries its `local_config.mk` asks for (`HMM_EXTRA_LIBS`); `None` for a
/// source that needs no such header.
fn local_config(hmm_src: &Path, dir: &Path) -> Result<Option<(PathBuf, Vec<String>)>> {
    let uses = fs::read_to_string(hmm_src).is_ok_and(|t| t.contains("local_config.h"));
    let Some(script) = hmm_src.parent().map(|d| d.join("check_config.sh")) else {
        return Ok(None);
    };
    if !uses || !script.is_file() {
        return Ok(None);
    }
    let _ = fs::remove_dir_all(dir);
    mkdirs(dir)?;
    run_checked(
        Command::new("sh").arg(&script).arg("cc").current_dir(dir),
        "check_config.sh (the hmm selftest's local_config.h)",
    )?;
    if !dir.join("local_config.h").is_file() {
        return Err(VmError::new(format!(
            "{} made no local_config.h in {}",
            script.display(),
            dir.display()
        )));
    }
    let mk = fs::read_to_string(dir.join("local_config.mk")).unwrap_or_default();
    Ok(Some((dir.to_path_buf(), extra_libs(&mk, "HMM_EXTRA_LIBS"))))
}

/// The `-l` flags of `VAR = ...` in a make fragment (`local_config.mk`).
pub fn extra_libs(mk: &str, var: &str) -> Vec<String> {
    mk.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == var).then_some(v)
        })
        .flat_map(|v| v.split_whitespace())
        .filter(|w| {
            w.strip_prefix("-l").is_some_and(|n| {
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'+')
            })
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_from_local_config_mk() {
        assert_eq!(
            extra_libs("HMM_EXTRA_LIBS = -lhugetlbfs\n", "HMM_EXTRA_LIBS"),
            ["-lhugetlbfs"]
        );
        let none = "# No libhugetlbfs support found, so:\nHMM_EXTRA_LIBS = \n";
        assert!(extra_libs(none, "HMM_EXTRA_LIBS").is_empty());
        assert!(extra_libs("IOURING_EXTRA_LIBS = -luring\n", "HMM_EXTRA_LIBS").is_empty());
        assert!(extra_libs("HMM_EXTRA_LIBS = -l; rm -rf / $(x)\n", "HMM_EXTRA_LIBS").is_empty());
    }

    #[test]
    fn local_config_runs_the_trees_check_config() {
        let base = std::env::temp_dir().join(format!("vm-localcfg-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let src = base.join("tree/tools/testing/selftests/vm");
        fs::create_dir_all(&src).unwrap();
        let hmm = src.join("hmm-tests.c");
        fs::write(&hmm, "#include \"./local_config.h\"\n").unwrap();
        // A check_config.sh as 5.15 has it, reduced: writes both files into the cwd.
        fs::write(
            src.join("check_config.sh"),
            "echo '#define LOCAL_CONFIG_HAVE_LIBHUGETLBFS 1' > local_config.h\n\
             echo 'HMM_EXTRA_LIBS = -lhugetlbfs' > local_config.mk\n",
        )
        .unwrap();
        let out = base.join("obj/selftest-config");
        let (dir, libs) = local_config(&hmm, &out).unwrap().unwrap();
        assert_eq!(dir, out);
        assert!(out.join("local_config.h").is_file());
        assert_eq!(libs, ["-lhugetlbfs"]);
        // The tree is not written.
        assert!(!src.join("local_config.h").exists());
        // A newer source without the include needs nothing.
        fs::write(&hmm, "#include \"../kselftest_harness.h\"\n").unwrap();
        assert_eq!(local_config(&hmm, &out).unwrap(), None);
        let _ = fs::remove_dir_all(&base);
    }
}
