//! Linux kernel `.config` and config-fragment handling: parse, merge, render, check.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};

/// A kernel configuration: option names (`CONFIG_...`) mapped to their raw value text,
/// in first-seen order. `None` stands for `# CONFIG_X is not set`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KConfig {
    entries: Vec<(String, Option<String>)>,
    index: HashMap<String, usize>,
}

/// An option whose value [`KConfig::merge`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Option name, e.g. `CONFIG_DRM_VKMS`.
    pub name: String,
    /// Previous value: outer `None` when the option was absent, inner `None` when
    /// it was "is not set".
    pub old: Option<Option<String>>,
    /// New value (`None`: "is not set").
    pub new: Option<String>,
}

/// A required option whose value differs, as reported by [`KConfig::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Option name.
    pub name: String,
    /// Required value (`None`: not set).
    pub want: Option<String>,
    /// Actual value (`None`: not set or absent).
    pub got: Option<String>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "not set".to_owned());
        write!(
            f,
            "{}: want {}, got {}",
            self.name,
            show(&self.want),
            show(&self.got)
        )
    }
}

impl KConfig {
    /// Parses `.config` text. Accepts `CONFIG_X=v` and `# CONFIG_X is not set` lines,
    /// ignores blank lines, other comments and anything unrecognised; a later line for
    /// an option overrides an earlier one.
    pub fn parse(text: &str) -> KConfig {
        let mut cfg = KConfig::default();
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix('#') {
                let name = rest
                    .trim_start()
                    .strip_suffix(" is not set")
                    .map(str::trim_end);
                if let Some(name) = name.filter(|n| valid_name(n)) {
                    cfg.set(name, None);
                }
            } else if let Some((name, value)) = line.split_once('=') {
                let name = name.trim_end();
                if valid_name(name) {
                    cfg.set(name, Some(value.trim_start().to_owned()));
                }
            }
        }
        cfg
    }

    /// The value of `name`: `None` when absent, `Some(None)` when "is not set".
    pub fn get(&self, name: &str) -> Option<Option<&str>> {
        self.index.get(name).map(|&i| self.entries[i].1.as_deref())
    }

    /// Number of options.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no options.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `name` to `value` (`None`: "is not set"), keeping its position if present.
    pub fn set(&mut self, name: &str, value: Option<String>) {
        match self.index.get(name) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(name.to_owned(), self.entries.len());
                self.entries.push((name.to_owned(), value));
            }
        }
    }

    /// Applies `fragment` over `self` (the fragment wins) and returns the options
    /// whose value changed.
    pub fn merge(&mut self, fragment: &KConfig) -> Vec<Override> {
        let mut changed = Vec::new();
        for (name, new) in &fragment.entries {
            let old = self.get(name).map(|v| v.map(str::to_owned));
            if old.as_ref() != Some(new) {
                changed.push(Override {
                    name: name.clone(),
                    old,
                    new: new.clone(),
                });
                self.set(name, new.clone());
            }
        }
        changed
    }

    /// Renders one line per option, in order, ending in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, value) in &self.entries {
            match value {
                Some(v) => out += &format!("{name}={v}\n"),
                None => out += &format!("# {name} is not set\n"),
            }
        }
        out
    }

    /// Reports every option of `required` whose value here differs; an absent option
    /// counts as "is not set".
    pub fn check(&self, required: &KConfig) -> Vec<Missing> {
        required
            .entries
            .iter()
            .filter_map(|(name, want)| {
                let got = self.get(name).flatten();
                (got != want.as_deref()).then(|| Missing {
                    name: name.clone(),
                    want: want.clone(),
                    got: got.map(str::to_owned),
                })
            })
            .collect()
    }
}

fn valid_name(name: &str) -> bool {
    name.len() > "CONFIG_".len()
        && name.starts_with("CONFIG_")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A stable cache key over `parts`: the first 16 hex digits of SHA-256 over each part
/// prefixed by its length as 8 little-endian bytes.
pub fn fragment_hash(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Features of the full device set (as `kernel_tests::expected` names them) and the config
/// options that must all be `y` or `m` for the kernel to have them. vkms is not here: it is
/// built out of tree for every stock kernel.
pub const FEATURE_OPTIONS: &[(&str, &[&str])] = &[
    ("vgem", &["CONFIG_DRM_VGEM"]),
    ("virtio_gpu", &["CONFIG_DRM_VIRTIO_GPU"]),
    ("bochs", &["CONFIG_DRM_BOCHS"]),
    ("qxl", &["CONFIG_DRM_QXL"]),
    ("udmabuf", &["CONFIG_UDMABUF"]),
    (
        "dma_heap",
        &["CONFIG_DMABUF_HEAPS", "CONFIG_DMABUF_HEAPS_SYSTEM"],
    ),
    ("sw_sync", &["CONFIG_SW_SYNC"]),
    ("test_hmm", &["CONFIG_DEVICE_PRIVATE", "CONFIG_TEST_HMM"]),
    // Tracepoints readable through perf_event_open (`drmtool trace`): event tracing (the
    // tracefs `events/*/format` files and the tracepoints themselves) and perf events.
    ("tracing", &["CONFIG_EVENT_TRACING", "CONFIG_PERF_EVENTS"]),
    // The device-memory cgroup controller (Linux 6.14+): `drmtool run --mem-max`.
    ("dmem", &["CONFIG_CGROUP_DMEM"]),
    (
        "pmem",
        &[
            "CONFIG_LIBNVDIMM",
            "CONFIG_ACPI_NFIT",
            "CONFIG_BLK_DEV_PMEM",
        ],
    ),
];

/// The feature only a kernel with the test-only vkms patch has (config/vkms-fdinfo.patch:
/// vkms prints the DRM usage stats, memory and the `composer` engine, in fdinfo). Every
/// other kernel lists it as missing.
pub const VKMS_FDINFO: &str = "vkms_fdinfo";

/// `missing` with [`VKMS_FDINFO`] added unless `patched`, sorted.
pub fn with_vkms_fdinfo(missing: Vec<String>, patched: bool) -> Vec<String> {
    with_patch_feature(missing, VKMS_FDINFO, patched)
}

/// `missing` with a test patch's `feature` added (once) unless the kernel carries the
/// patch, sorted.
fn with_patch_feature(mut missing: Vec<String>, feature: &str, patched: bool) -> Vec<String> {
    if !patched && !missing.iter().any(|f| f == feature) {
        missing.push(feature.into());
    }
    missing.sort();
    missing
}

/// The feature of a kernel built with the test-only qxl patch that registers qxl's VRAM
/// as a dmem region ([`crate::catalog::QXL_DMEM_PATCH`]).
pub const QXL_DMEM: &str = "qxl_dmem";

/// `missing` with [`QXL_DMEM`] added unless the kernel carries the qxl dmem patch
/// (`patched`), sorted.
pub fn with_qxl_dmem(missing: Vec<String>, patched: bool) -> Vec<String> {
    with_patch_feature(missing, QXL_DMEM, patched)
}

/// The features of [`FEATURE_OPTIONS`] a kernel config lacks, sorted.
pub fn missing_features(cfg: &KConfig) -> Vec<String> {
    let mut v: Vec<String> = FEATURE_OPTIONS
        .iter()
        .filter(|(_, opts)| {
            !opts
                .iter()
                .all(|o| matches!(cfg.get(o), Some(Some("y" | "m"))))
        })
        .map(|(f, _)| f.to_string())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
#
# Automatically generated file; DO NOT EDIT.
#
CONFIG_CC_VERSION_TEXT=\"gcc (Debian 14.2.0) 14.2.0\"
CONFIG_DRM=y
CONFIG_DRM_VKMS=m
# CONFIG_TEST_HMM is not set
CONFIG_BASE_SMALL=0x10
CONFIG_NEG=-1
";

    #[test]
    fn round_trip() {
        let cfg = KConfig::parse(SAMPLE);
        assert_eq!(cfg.len(), 6);
        let rendered = cfg.render();
        assert_eq!(
            Some(rendered.as_str()),
            SAMPLE.split_once("EDIT.\n#\n").map(|p| p.1)
        );
        assert_eq!(KConfig::parse(&rendered), cfg);
        assert_eq!(
            cfg.get("CONFIG_CC_VERSION_TEXT"),
            Some(Some("\"gcc (Debian 14.2.0) 14.2.0\""))
        );
        assert_eq!(cfg.get("CONFIG_NEG"), Some(Some("-1")));
        assert_eq!(cfg.get("CONFIG_ABSENT"), None);
    }

    #[test]
    fn not_set_whitespace_crlf_and_overrides() {
        let text = "  CONFIG_A=y  \r\n\r\n#CONFIG_B is not set\r\n# just a comment\r\n\
                    garbage line\nCONFIG_=y\n=y\n# CONFIG_C is set\nCONFIG_B=m\nCONFIG_A=n\n# CONFIG_A is not set";
        let cfg = KConfig::parse(text);
        assert_eq!(cfg.get("CONFIG_A"), Some(None));
        assert_eq!(cfg.get("CONFIG_B"), Some(Some("m")));
        assert_eq!(cfg.get("CONFIG_C"), None);
        assert_eq!(cfg.render(), "# CONFIG_A is not set\nCONFIG_B=m\n");
    }

    #[test]
    fn merge_reports_overrides() {
        let mut base = KConfig::parse("CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\n");
        let frag = KConfig::parse(
            "CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=m\nCONFIG_D=\"x\"\n# CONFIG_E is not set\n",
        );
        let changed = base.merge(&frag);
        let o = |name: &str, old: Option<Option<&str>>, new: Option<&str>| Override {
            name: name.to_owned(),
            old: old.map(|v| v.map(str::to_owned)),
            new: new.map(str::to_owned),
        };
        assert_eq!(
            changed,
            [
                o("CONFIG_B", Some(Some("m")), Some("y")),
                o("CONFIG_C", Some(None), Some("m")),
                o("CONFIG_D", None, Some("\"x\"")),
                o("CONFIG_E", None, None),
            ]
        );
        assert_eq!(
            base.render(),
            "CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=m\nCONFIG_D=\"x\"\n# CONFIG_E is not set\n"
        );
        assert!(base.merge(&frag).is_empty());
    }

    #[test]
    fn check_reports_differences() {
        let have = KConfig::parse("CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\n");
        let req = KConfig::parse(
            "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\n# CONFIG_D is not set\nCONFIG_TEST_HMM=m\n",
        );
        let missing = have.check(&req);
        let text: Vec<String> = missing.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "CONFIG_B: want m, got y",
                "CONFIG_TEST_HMM: want m, got not set"
            ]
        );
        assert_eq!(missing[1].got, None);
        let req = KConfig::parse("# CONFIG_B is not set\n");
        assert_eq!(
            have.check(&req)[0].to_string(),
            "CONFIG_B: want not set, got y"
        );
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let h = fragment_hash(&[b"CONFIG_A=y\n", b"6.12.48"]);
        assert_eq!(h.len(), 16);
        assert_eq!(h, EXPECTED);
        assert_ne!(fragment_hash(&[b"CONFIG_A=m\n", b"6.12.48"]), h);
        // Part boundaries matter, not just the concatenation.
        assert_ne!(fragment_hash(&[b"CONFIG_A=y\n6", b".12.48"]), h);
        assert_ne!(fragment_hash(&[]), fragment_hash(&[b""]));
    }

    const EXPECTED: &str = "196be40285976c2f";
}
