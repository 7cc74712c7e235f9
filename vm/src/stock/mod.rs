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

mod prepare;

use crate::apt::PrivateApt;
use crate::cache::{self, BuiltKernel, Manifest};
use crate::catalog::{self, CatalogKernel, Source};
use crate::error::{Result, VmError};
use crate::kconfig::KConfig;
pub use crate::kconfig::{FEATURE_OPTIONS, VKMS_FDINFO, missing_features, with_vkms_fdinfo};
use crate::util::progress;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::time::Instant;

/// Bumped whenever the stock recipe changes what lands in the cache.
pub const STOCK_RECIPE_VERSION: &str = "stock-1";

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
    // The topology profiles' data and network devices (by their PCI modaliases): the PCIe
    // switch profile's NVMe drive, the NUMA profile's virtio disk and NIC, and the NIC of
    // `vm test --cluster`.
    "nvme",
    "virtio_blk",
    "virtio_net",
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
            "check that the host's Debian mirror (its apt sources, or VM_DEBIAN_MIRROR) is reachable",
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
    prepare::prepare(k, &img, &key, start)
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
        missing_features: crate::kconfig::with_qxl_dmem(
            with_vkms_fdinfo(missing_features(&cfg), dir.join("vkms.patch").exists()),
            false,
        ),
        extra_modules: modular(EXPLICIT_MODULES, &dep),
        early_modules: modular(EARLY_MODULES, &dep),
    }
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
            [
                "dma_heap", "dmem", "sw_sync", "test_hmm", "tracing", "udmabuf"
            ]
        );
        let cfg612 = KConfig::parse(
            "CONFIG_DRM_VGEM=m\nCONFIG_DRM_VIRTIO_GPU=m\nCONFIG_DRM_BOCHS=m\nCONFIG_DRM_QXL=m\n\
             CONFIG_UDMABUF=y\nCONFIG_DMABUF_HEAPS=y\nCONFIG_DMABUF_HEAPS_SYSTEM=y\n\
             # CONFIG_SW_SYNC is not set\n# CONFIG_DEVICE_PRIVATE is not set\n\
             CONFIG_LIBNVDIMM=m\nCONFIG_ACPI_NFIT=m\nCONFIG_BLK_DEV_PMEM=m\n\
             CONFIG_EVENT_TRACING=y\nCONFIG_PERF_EVENTS=y\n",
        );
        assert_eq!(missing_features(&cfg612), ["dmem", "sw_sync", "test_hmm"]);
        let mut cfg73 = cfg612.clone();
        cfg73.set("CONFIG_CGROUP_DMEM", Some("y".into()));
        assert_eq!(missing_features(&cfg73), ["sw_sync", "test_hmm"]);
        // Perf events without event tracing (a kernel built with CONFIG_FTRACE off).
        let mut no_ftrace = cfg612.clone();
        no_ftrace.set("CONFIG_EVENT_TRACING", None);
        assert_eq!(
            missing_features(&no_ftrace),
            ["dmem", "sw_sync", "test_hmm", "tracing"]
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
