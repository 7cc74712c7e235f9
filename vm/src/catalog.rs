//! The kernel catalog: which guest kernels exist, where their sources come from, and where
//! their builds are cached.

use std::path::{Path, PathBuf};

/// Where a catalog kernel's source comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A Debian `linux-source-X.Y` package: the tarball under `/usr/src` when the package is
    /// installed, otherwise downloaded with a private apt state from `suites`.
    DebianSource {
        /// Package name, e.g. `linux-source-6.12`.
        package: &'static str,
        /// `deb` lines' suites to search when the package is not installed.
        suites: &'static [&'static str],
    },
    /// A stock Debian kernel image, booted as Debian ships it: the newest
    /// `linux-image-<series>.<abi>-amd64-unsigned` found at run time (private apt state),
    /// reduced to the modules the guest needs, plus vkms built out of tree against
    /// Debian's headers from the matching `linux-source-<series>` (see [`crate::stock`]).
    DebianStock {
        /// Kernel series, e.g. `6.12` (image packages `linux-image-6.12.*-amd64-unsigned`,
        /// source package `linux-source-6.12`).
        series: &'static str,
        /// `deb` lines' suites to search for the image, headers and (when the installed one
        /// does not match) source packages.
        suites: &'static [&'static str],
        /// A test-only patch applied with `patch -p1` to the extracted vkms sources.
        vkms_patch: Option<&'static str>,
    },
    /// A kernel source tarball no package offers (the v5.15 release in the shared
    /// directory beside the checkout): found by path, checked against its SHA-256, unpacked
    /// once into the cache and never modified in place; `patches` are applied to the
    /// unpacked copy (build fixes for today's compilers, never behaviour changes).
    Tarball {
        /// The file name, looked up in `$VM_KERNEL_TARBALLS` (a directory), then in
        /// `../shared/kernels/` of the checkout.
        file: &'static str,
        /// The top directory the tarball unpacks to (`linux-5.15`).
        top: &'static str,
        /// Its SHA-256, lower-case hex: a different file is refused.
        sha256: &'static str,
        /// The kernel version it holds (`make kernelversion`).
        version: &'static str,
        /// `patch -p1` texts applied to the unpacked copy, in order.
        patches: &'static [&'static str],
    },
}

/// One named kernel of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogKernel {
    /// The name users type (`debian-6.12`).
    pub name: &'static str,
    /// Where its source comes from.
    pub source: Source,
    /// Whether `vm test --kernel all` includes it.
    pub default_matrix: bool,
    /// In `vm test --kernel all` without `--test`: only these kernel-tests targets run on
    /// this lane, and no kernel selftests or libdrm programs (a lane whose kernel differs
    /// from another lane's only where these targets look). `None`: everything.
    pub matrix_suites: Option<&'static [&'static str]>,
    /// Config lines for this kernel alone, merged after the project's fragment and required
    /// in the final `.config` like [`REQUIRED`]'s (options older kernels lack, such as
    /// `CONFIG_CGROUP_DMEM`); empty for most. Part of the cache key only when not empty,
    /// so the other kernels' entries stay valid.
    pub extra_config: &'static str,
    /// Test-only `patch -p1` texts for a Debian source package's tree (applied to an
    /// unpacked copy of its own, keyed by them; part of the cache key like
    /// [`CatalogKernel::extra_config`]).
    pub test_patches: &'static [&'static str],
    /// One line for `vm kernels`.
    pub about: &'static str,
}

/// The built-in catalog, in matrix order.
pub const CATALOG: &[CatalogKernel] = &[
    CatalogKernel {
        name: "debian-5.10",
        source: Source::DebianSource {
            package: "linux-source-5.10",
            suites: &["bullseye-security", "bullseye"],
        },
        default_matrix: false,
        matrix_suites: None,
        extra_config: "",
        test_patches: &[],
        about: "Debian bullseye's 5.10 source, project config (below the 5.15 target: on \
                demand since src-5.15 took its place in the matrix)",
    },
    CatalogKernel {
        name: "src-5.15",
        source: Source::Tarball {
            file: "linux-5.15.tar.xz",
            top: "linux-5.15",
            sha256: "9accddb9fb95b555d03aa885757e4c1e1fd5f861e95554c626f69a78db624268",
            version: "5.15.0",
            patches: &[SUBCMD_REALLOC_PATCH],
        },
        default_matrix: true,
        matrix_suites: None,
        extra_config: "",
        test_patches: &[],
        about: "the v5.15 release tarball (../shared/kernels), project config; the floor of \
                the 5.15 target",
    },
    CatalogKernel {
        name: "debian-6.1",
        source: Source::DebianSource {
            package: "linux-source-6.1",
            suites: &["bookworm-security", "bookworm"],
        },
        // Out of CI's matrix since 2026-12-03 (the 75-minute cold-run budget): 6.1 stays in
        // CI through stock-6.1; this lane runs in scripts/guest-extra.
        default_matrix: false,
        matrix_suites: None,
        extra_config: "",
        test_patches: &[],
        about: "Debian bookworm's 6.1 source, project config (scripts/guest-extra: strict \
                suite, selftests, virgl; CI proves 6.1 through stock-6.1)",
    },
    CatalogKernel {
        name: "debian-6.12",
        source: Source::DebianSource {
            package: "linux-source-6.12",
            suites: &["bookworm-security", "bookworm-backports", "bookworm"],
        },
        default_matrix: true,
        matrix_suites: None,
        extra_config: "",
        test_patches: &[],
        about: "Debian bookworm's 6.12 source, project config (the bindings' kernel)",
    },
    CatalogKernel {
        name: "debian-7.3",
        source: Source::DebianSource {
            package: "linux-source-7.3",
            suites: &["trixie-backports"],
        },
        // In CI: the GPU memory limit targets (qxl's dmem region is this kernel's alone:
        // `drmtool run --mem-max` and Slurm's gpumem budget), the allocation failures from
        // the syscall tracepoints (this lane's config has them), the fdinfo and debugfs
        // targets (the newest kernel's keys and client list), and the smoke test. The
        // whole strict suite with its selftests runs in scripts/guest-extra.
        default_matrix: true,
        matrix_suites: Some(&[
            "smoke",
            "drmtool_dmem",
            "drmtool_slurm_dmem",
            "drmtool_trace_alloc",
            "drmtool_buffers",
            "drmtool_export",
            // The dmem series the rules and the dashboard read, in a real scrape.
            "drmtool_export_privilege",
        ]),
        extra_config: DEBIAN_7_3_CONFIG,
        test_patches: &[QXL_DMEM_PATCH],
        about: "Debian trixie-backports' 7.3 source (the newest kernel Debian ships; \
                scripts/setup installs linux-source-7.3 from that suite alone), project config \
                with the dmem cgroup controller and syscall tracepoints",
    },
    CatalogKernel {
        name: "stock-6.1",
        source: Source::DebianStock {
            series: "6.1",
            suites: &["bookworm-security", "bookworm"],
            vkms_patch: None,
        },
        default_matrix: true,
        // Debian 12's own kernel: the drm-gem and hmm suites and drmtool's kernel-facing
        // ones on Debian's config; drmtool's user-space engines (Slurm, Prometheus, the
        // shared server, the KMS screenshot, the buffers and CLI tables) and libdrm's
        // programs run on src-5.15 and debian-6.12 in CI, and on 6.1 in
        // scripts/guest-extra (debian-6.1, the whole suite). The whole lane took 25-30
        // minutes of CI's matrix (2026-12-05), its second phase alone.
        matrix_suites: Some(KERNEL_FACING),
        extra_config: "",
        test_patches: &[],
        about: "Debian bookworm's own 6.1 image (linux-image-6.1.0-NN-amd64-unsigned), \
                vkms built out of tree",
    },
    CatalogKernel {
        name: "stock-6.12",
        source: Source::DebianStock {
            series: "6.12",
            suites: &["bookworm-security", "bookworm-backports", "bookworm"],
            vkms_patch: None,
        },
        // Out of CI's matrix since 2026-12-05 (the cold-run budget on a machine that ran
        // CI twice as slowly as before): the same 6.12.118 source as debian-6.12, which runs
        // everything in CI, and the same image as stock-6.12-fdinfo, which runs the
        // fdinfo-reading suites and the isolation and vendor-node promises on it in CI. The
        // whole strict suite on this image runs in scripts/guest-extra.
        default_matrix: false,
        matrix_suites: None,
        extra_config: "",
        test_patches: &[],
        about: "Debian bookworm's own 6.12 image (linux-image-6.12.NNN+deb12-amd64-unsigned), \
                vkms built out of tree",
    },
    CatalogKernel {
        name: "stock-6.12-fdinfo",
        source: Source::DebianStock {
            series: "6.12",
            suites: &["bookworm-security", "bookworm-backports", "bookworm"],
            vkms_patch: Some(VKMS_FDINFO_PATCH),
        },
        default_matrix: true,
        // The patch changes only vkms' fdinfo. Here: the targets that read DRM fdinfo, and
        // on Debian's own 6.12 config the drivers and the isolation and vendor-node
        // promises (the whole strict suite on this image: stock-6.12 in
        // scripts/guest-extra).
        matrix_suites: Some(&[
            "smoke",
            "census",
            "bochs",
            "dmabuf",
            "drivers",
            "drmtool_buffers",
            "drmtool_export",
            "drmtool_export_engine",
            // The fdinfo memory and engine series the rules and the dashboard read.
            "drmtool_export_privilege",
            "drmtool_export_tls",
            "drmtool_hostile",
            "drmtool_isolation",
            "drmtool_top",
            "drmtool_vendor",
        ]),
        extra_config: "",
        test_patches: &[],
        about: "stock-6.12 with a test-only vkms patch that prints the DRM fdinfo usage \
                stats and a composer engine counter (config/vkms-fdinfo.patch)",
    },
];

/// The kernel-tests targets whose outcome turns on the kernel (drm-gem, hmm, and drmtool's
/// isolation, vendor nodes, run, trace, hostile input, the library example, GPU memory
/// limits): what a lane runs where another lane runs the user-space engines on the same
/// series.
pub const KERNEL_FACING: &[&str] = &[
    "atomic",
    "bochs",
    "census",
    "concurrency",
    "device",
    "dmabuf",
    "drivers",
    "drm_interop",
    "drmtool_containers",
    "drmtool_dmem",
    "drmtool_hostile",
    "drmtool_isolation",
    "drmtool_library",
    "drmtool_pick",
    "drmtool_run",
    "drmtool_trace",
    "drmtool_trace_alloc",
    "drmtool_vendor",
    "example",
    "example_modeset",
    "gem",
    "hmm_examples",
    "hmm_mirror",
    "host_register",
    "kms",
    "kms_legacy",
    "kms_negative",
    "negative",
    "pmem",
    "pmem_example",
    "pointer_props",
    "random_ops",
    "release_failures",
    "signal_storm",
    "smoke",
    "sync_file",
    "syncobj",
    "syncobj_timeline",
    "udmabuf",
    "vgem",
];

/// debian-7.3's own config lines ([`CatalogKernel::extra_config`]): the device-memory
/// cgroup controller (Linux 6.14 and later) and the syscall tracepoints that pair a DRM
/// ioctl's entry with its failed exit.
pub const DEBIAN_7_3_CONFIG: &str = "CONFIG_CGROUP_DMEM=y\nCONFIG_FTRACE_SYSCALLS=y\n";

/// Test-only qxl patch (7.3): qxl's VRAM domain registered as the dmem cgroup region
/// `drm/<bus id>/vram0`, with TTM's reclaim, so that the guests have a driver that charges
/// dmem (upstream, amdgpu and xe do; none of QEMU's devices' drivers).
pub const QXL_DMEM_PATCH: &str = include_str!("../config/qxl-dmem.patch");

/// What shapes a catalog kernel beyond the project's fragment: its own config lines and
/// test patches, as [`cache_key`] hashes them (empty for most kernels).
pub fn kernel_extra(k: &CatalogKernel) -> String {
    let mut s = k.extra_config.to_string();
    for p in k.test_patches {
        s.push_str("\n--- test patch ---\n");
        s.push_str(p);
    }
    s
}

/// Test-only vkms patch (6.12): `drm_show_fdinfo` + `drm_show_memory_stats`, so an open
/// vkms fd's `/proc/<pid>/fdinfo/<fd>` shows `drm-driver`, `drm-client-id`,
/// `drm-total-memory` and the other DRM usage-stats keys, and `drm-engine-composer` (the
/// composer's time per open file).
pub const VKMS_FDINFO_PATCH: &str = include_str!("../config/vkms-fdinfo.patch");

/// Build fix for 5.15's `tools/lib/subcmd/subcmd-util.h` (used by objtool): gcc 12 rejects
/// its `xrealloc` with `-Werror=use-after-free` because it calls `realloc(ptr, ...)` again
/// after a failed one; later kernels only retry with size 1. The patch makes that change.
pub const SUBCMD_REALLOC_PATCH: &str = include_str!("../config/subcmd-realloc.patch");

/// Kernels of the signal-storm lane (`scripts/guest-storm`'s default `KERNELS`), the
/// drm-gem/hmm suite (drmtool's binaries under the storm: `scripts/guest-extra`).
pub const STORM_KERNELS: &[&str] = &["debian-6.12"];
/// Kernels of the virgl lane (`scripts/guest-virgl`'s default `KERNELS`).
pub const VIRGL_KERNELS: &[&str] = &["src-5.15", "debian-6.12"];
/// What `scripts/guest-extra` runs, outside CI (the cold-run budget), before an issue is
/// resolved: (lane, kernels).
pub const EXTRA_LANES: &[(&str, &[&str])] = &[
    ("strict suite, selftests", &["debian-6.1", "debian-7.3"]),
    ("strict suite", &["stock-6.12"]),
    (
        "storm with drmtool's binaries",
        &["debian-6.12", "stock-6.1"],
    ),
    ("CDI through podman", &["src-5.15", "stock-6.1"]),
    ("virgl", &["debian-6.1"]),
];
/// The kernels of the power-cut checks in `scripts/guest-powercut` (the NVDIMM on debian-6.12,
/// virtio-pmem behind the write-back cache layer on Debian's own 6.12 image, whose
/// virtio_pmem the project's config leaves out).
pub const POWERCUT_KERNELS: &[&str] = &["debian-6.12", "stock-6.12-fdinfo"];
/// The kernel of the oops-recovery check (`scripts/guest-oops`'s default `KERNEL`).
pub const OOPS_KERNELS: &[&str] = &["debian-6.12"];

/// What CI verifies on a kernel's lane (`scripts/test`'s guest steps): the strict suite
/// (every kernel-tests test, `vm test`), the kernel's own selftests (only kernels built
/// from a source tree), the signal storm, virgl, the power cuts, the oops recovery. A
/// kernel outside the default matrix is verified only on demand.
pub fn verified(k: &CatalogKernel) -> String {
    let stock = matches!(k.source, Source::DebianStock { .. });
    let narrowed = k
        .matrix_suites
        .map(|s| format!("strict suite of {}", s.join(", ")));
    let mut v: Vec<&str> = vec![narrowed.as_deref().unwrap_or("strict suite")];
    // A narrowed lane runs no selftests (nor libdrm's programs).
    if !stock && k.matrix_suites.is_none() {
        v.push("selftests");
    }
    let extra: Vec<&str> = EXTRA_LANES
        .iter()
        .filter(|(_, ks)| ks.contains(&k.name))
        .map(|(lane, _)| *lane)
        .collect();
    let extra = (!extra.is_empty()).then(|| format!("scripts/guest-extra: {}", extra.join(", ")));
    if !k.default_matrix {
        return extra.unwrap_or_else(|| {
            format!("on demand (vm test --kernel {}): {}", k.name, v.join(" + "))
        });
    }
    for (lane, list) in [
        ("storm (drm-gem/hmm suite)", STORM_KERNELS),
        ("virgl", VIRGL_KERNELS),
        ("powercut", POWERCUT_KERNELS),
        ("oops", OOPS_KERNELS),
    ] {
        if list.contains(&k.name) {
            v.push(lane);
        }
    }
    let mut out = v.join(", ");
    if let Some(e) = extra {
        out.push_str(&format!("; {e}"));
    }
    out
}

/// What a bring-your-own kernel gets from `vm test`.
pub const BRING_YOUR_OWN: &str = "--kernel-source DIR: strict suite + selftests (built and \
    cached from your tree); --kernel PATH [--modules DIR]: strict suite, plus selftests when \
    PATH is a vmlinux/bzImage in a cache entry built from a tree; never in CI";

/// Looks a kernel up by name.
pub fn find(name: &str) -> Option<&'static CatalogKernel> {
    CATALOG.iter().find(|k| k.name == name)
}

/// The names of the default matrix.
pub fn default_matrix() -> Vec<&'static str> {
    CATALOG
        .iter()
        .filter(|k| k.default_matrix)
        .map(|k| k.name)
        .collect()
}

/// The cache root: `$VM_CACHE_DIR`, else `$XDG_CACHE_HOME/drm-toolkit`, else
/// `~/.cache/drm-toolkit`. Never inside the repository.
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("VM_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("drm-toolkit");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/drm-toolkit")
}

/// The project's config fragment and required-options list, embedded so the binary needs no
/// checkout at run time.
pub const FRAGMENT: &str = include_str!("../config/guest.config");
/// Options the final `.config` must have.
pub const REQUIRED: &str = include_str!("../config/required.list");

/// Bumped whenever the build recipe ([`crate::build`]) changes in a way that changes the
/// kernel.
pub const RECIPE_VERSION: &str = "recipe-1";

/// Cache key of a catalog build: the package version and a hash of everything that shapes
/// the kernel (fragment, required list, build recipe version, and the kernel's own
/// [`CatalogKernel::extra_config`] when it has one).
pub fn cache_key(name: &str, version: &str, extra_config: &str) -> String {
    let mut parts = vec![
        FRAGMENT.as_bytes(),
        REQUIRED.as_bytes(),
        RECIPE_VERSION.as_bytes(),
    ];
    if !extra_config.is_empty() {
        parts.push(extra_config.as_bytes());
    }
    let hash = crate::kconfig::fragment_hash(&parts);
    format!("{name}-{}-{hash}", path_safe(version))
}

/// `s` with every character other than ASCII letters, digits, `.` and `-` replaced by `_`,
/// for cache keys and file names.
pub fn path_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_findable() {
        for k in CATALOG {
            assert_eq!(find(k.name), Some(k));
        }
        assert!(find("debian-9.9").is_none());
        assert_eq!(
            default_matrix(),
            [
                "src-5.15",
                "debian-6.12",
                "debian-7.3",
                "stock-6.1",
                "stock-6.12-fdinfo"
            ]
        );
        for n in ["stock-6.1", "stock-6.12", "stock-6.12-fdinfo"] {
            let k = find(n).unwrap();
            assert!(matches!(k.source, Source::DebianStock { .. }), "{n}");
        }
    }

    #[test]
    fn lanes_match_the_scripts() {
        let scripts = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/");
        let read = |f: &str| std::fs::read_to_string(format!("{scripts}{f}")).unwrap();
        assert!(read("guest-storm").contains(&format!(
            "KERNELS=${{KERNELS:-\"{}\"}}",
            STORM_KERNELS.join(" ")
        )));
        assert!(!read("test").contains("guest-storm-6.1"));
        assert!(read("guest-extra").contains("--kernel stock-6.12 "));
        assert!(read("guest-virgl").contains(&format!(
            "KERNELS=${{KERNELS:-{}}}",
            VIRGL_KERNELS.join(" ")
        )));
        assert!(
            read("guest-powercut")
                .contains(&format!("KERNEL={} scripts/powercut", POWERCUT_KERNELS[0]))
        );
        assert!(
            read("guest-powercut")
                .contains(&format!("VKERNEL={} scripts/powercut", POWERCUT_KERNELS[1]))
        );
        assert!(read("guest-oops").contains(&format!("KERNEL=${{KERNEL:-{}}}", OOPS_KERNELS[0])));
        assert_eq!(
            verified(find("debian-6.12").unwrap()),
            "strict suite, selftests, storm (drm-gem/hmm suite), virgl, powercut, oops; \
             scripts/guest-extra: storm with drmtool's binaries"
        );
        let fdinfo = find("stock-6.12-fdinfo").unwrap();
        assert_eq!(
            verified(fdinfo),
            format!(
                "strict suite of {}, powercut",
                fdinfo.matrix_suites.unwrap().join(", ")
            )
        );
        assert_eq!(
            verified(find("stock-6.12").unwrap()),
            "scripts/guest-extra: strict suite"
        );
        assert_eq!(
            verified(find("src-5.15").unwrap()),
            "strict suite, selftests, virgl; scripts/guest-extra: CDI through podman"
        );
        assert_eq!(
            verified(find("debian-6.1").unwrap()),
            "scripts/guest-extra: strict suite, selftests, virgl"
        );
        assert_eq!(
            verified(find("stock-6.1").unwrap()),
            format!(
                "strict suite of {}; scripts/guest-extra: storm with drmtool's binaries, CDI \
                 through podman",
                KERNEL_FACING.join(", ")
            )
        );
        let k73 = find("debian-7.3").unwrap();
        assert_eq!(
            verified(k73),
            format!(
                "strict suite of {}; scripts/guest-extra: strict suite, selftests",
                k73.matrix_suites.unwrap().join(", ")
            )
        );
        assert_eq!(
            verified(find("debian-5.10").unwrap()),
            "on demand (vm test --kernel debian-5.10): strict suite + selftests"
        );
    }

    #[test]
    fn only_debian_7_3_has_config_lines_and_test_patches() {
        for k in CATALOG {
            assert_eq!(
                kernel_extra(k).is_empty(),
                k.name != "debian-7.3",
                "{}",
                k.name
            );
        }
        let k = find("debian-7.3").unwrap();
        assert!(k.extra_config.contains("CONFIG_CGROUP_DMEM=y"));
        assert!(QXL_DMEM_PATCH.starts_with("--- a/drivers/gpu/drm/qxl/qxl_drv.h\n"));
        for l in QXL_DMEM_PATCH.lines().filter(|l| l.starts_with("+++ ")) {
            assert!(l.starts_with("+++ b/drivers/gpu/drm/qxl/"), "{l}");
        }
        assert!(QXL_DMEM_PATCH.contains("\"drm/%s/vram0\", qdev->ddev.unique"));
    }

    #[test]
    fn fdinfo_patch_touches_only_vkms_drv() {
        assert!(VKMS_FDINFO_PATCH.contains("--- a/vkms_drv.c\n+++ b/vkms_drv.c\n"));
        assert!(VKMS_FDINFO_PATCH.contains(".show_fdinfo\t= drm_show_fdinfo"));
        assert!(VKMS_FDINFO_PATCH.contains("drm_show_memory_stats(p, file);"));
    }

    #[test]
    fn cache_key_is_path_safe_and_versioned() {
        let a = cache_key("debian-6.12", "6.12.117-1~deb12u1", "");
        assert!(a.starts_with("debian-6.12-6.12.117-1_deb12u1-"), "{a}");
        assert!(!a.contains('/') && !a.contains('~'));
        assert_ne!(a, cache_key("debian-6.12", "6.12.118-1~deb12u1", ""));
        // A kernel's own config lines change its key; none leave the key as it was (the
        // cached entries of the kernels without any stay valid).
        assert_ne!(
            a,
            cache_key("debian-6.12", "6.12.117-1~deb12u1", DEBIAN_7_3_CONFIG)
        );
        assert!(a.ends_with(&crate::kconfig::fragment_hash(&[
            FRAGMENT.as_bytes(),
            REQUIRED.as_bytes(),
            RECIPE_VERSION.as_bytes()
        ])));
    }
}
