//! Parsers for `/proc/<pid>/fdinfo/<fd>` of DRM and dma-buf files.
//!
//! DRM keys follow Documentation/gpu/drm-usage-stats.rst: `drm-driver` (mandatory when any
//! `drm-*` key is printed), `drm-pdev`, `drm-client-id`, `drm-client-name`,
//! `drm-engine-<e>` (busy time in ns), `drm-engine-capacity-<e>`, `drm-cycles-<e>`,
//! `drm-total-cycles-<e>`, `drm-maxfreq-<e>` and the memory keys `drm-memory-<region>`
//! (older, the same as resident), `drm-total-`, `drm-shared-`, `drm-resident-`,
//! `drm-purgeable-`, `drm-active-<region>` with an optional `KiB`/`MiB` unit. Before 5.19
//! amdgpu printed its own keys (`pdev`, `pasid`, `vram mem`, `gtt mem`, `cpu mem`, `gfx0`
//! ...), which are parsed too; newer amdgpu (6.12 and 7.3 do) prints `amd-evicted-<region>`,
//! `amd-requested-<region>` and `amd-memory-visible-vram` beside the common keys (kept per
//! region; `visible-vram` is part of `vram` and adds nothing to a total). dma-buf files
//! print `size`, `count`, `exp_name` and `name`.
//!
//! The parsers never fail: a line they cannot read goes to `malformed`, a key they do not
//! know goes to `unknown`, and a value that does not fit stays unknown rather than guessed.
//!
//! # Hostile text
//! Some lines carry text another user chose, printed unescaped. The kernel's line order
//! (`seq_show` in fs/proc/fd.c, then the file's `show_fdinfo`) decides what can be trusted:
//! - dma-buf (`dma_buf_show_fdinfo`, the same in 5.10, 6.1 and 6.12): `pos`, `flags`,
//!   `mnt_id`, `ino` (5.15+), then `size`, `count`, `exp_name` (the exporter's own name, a
//!   kernel string) and last, only when one is set, `name:\t<name>` with the bytes
//!   `DMA_BUF_SET_NAME` gave, newlines included. So everything from the `name:` line to
//!   the end of the file is the name ([`Untrusted`]), never more keys: a name
//!   `x\nsize:\t1099511627776` is a name, not a size.
//! - DRM (`drm_show_fdinfo`): `drm-driver`, `drm-client-id`, `drm-pdev`, (6.13+)
//!   `drm-client-name` — set by the client, but the kernel accepts only printable
//!   characters without spaces, so it cannot start a line — then the driver's keys. The
//!   client name is kept as [`Untrusted`] all the same.
//!
//! In both, a key the kernel prints once that appears again is an anomaly: it goes to
//! `malformed` ("repeated key") and the first value is kept, never overridden.

use crate::field::FieldError;
use crate::untrusted::Untrusted;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Usage figures of one engine (`drm-engine-*`, `drm-cycles-*`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EngineStats {
    /// `drm-engine-<e>`: nanoseconds the engine was busy with this client's work.
    pub busy_ns: Option<u64>,
    /// `drm-engine-capacity-<e>`: how many engines of this kind the client can use.
    pub capacity: Option<u64>,
    /// `drm-cycles-<e>`: cycles the engine spent on this client.
    pub cycles: Option<u64>,
    /// `drm-total-cycles-<e>`: cycles that passed on the engine (the denominator of cycles).
    pub total_cycles: Option<u64>,
    /// `drm-maxfreq-<e>` in Hz.
    pub maxfreq_hz: Option<u64>,
}

/// Memory figures of one region (`drm-total-<region>` ...), in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RegionStats {
    /// `drm-total-<region>`: every buffer the client holds in the region.
    pub total: Option<u64>,
    /// `drm-shared-<region>`: of those, the ones shared with another client.
    pub shared: Option<u64>,
    /// `drm-resident-<region>`: backed by memory now.
    pub resident: Option<u64>,
    /// `drm-purgeable-<region>`: resident and purgeable.
    pub purgeable: Option<u64>,
    /// `drm-active-<region>`: in use by the GPU.
    pub active: Option<u64>,
    /// `drm-memory-<region>`: the older key, defined as resident.
    pub memory: Option<u64>,
    /// `amd-evicted-<region>` (amdgpu): of the client's buffers that want this
    /// region, the bytes evicted out of it now.
    pub amd_evicted: Option<u64>,
    /// `amd-requested-<region>` (amdgpu): the bytes the client asked for in this region.
    pub amd_requested: Option<u64>,
    /// `amd-memory-<region>` (amdgpu, `visible-vram`): resident bytes in the region.
    pub amd_memory: Option<u64>,
}

/// What pre-5.19 amdgpu printed before the common keys existed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AmdgpuLegacy {
    /// `pdev`: PCI address.
    pub pdev: Option<String>,
    /// `pasid`: the process address-space id (one per open file).
    pub pasid: Option<u64>,
    /// `vram mem`, bytes.
    pub vram: Option<u64>,
    /// `gtt mem`, bytes.
    pub gtt: Option<u64>,
    /// `cpu mem`, bytes.
    pub cpu: Option<u64>,
    /// Per-ring busy percentages (`gfx0`, `compute1`, `dma0`, `dec0`, `enc0`, `jpeg0` ...).
    pub engines_percent: BTreeMap<String, f64>,
}

/// The generic lines every fdinfo has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Common {
    /// `pos`.
    pub pos: Option<u64>,
    /// `flags` (octal in the file).
    pub flags: Option<u32>,
    /// `mnt_id`.
    pub mnt_id: Option<u64>,
    /// `ino` (since 5.15, inferred).
    pub ino: Option<u64>,
}

/// A parsed DRM fdinfo.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DrmFdinfo {
    /// Generic lines.
    pub common: Common,
    /// `drm-driver`.
    pub driver: Option<String>,
    /// `drm-pdev`.
    pub pdev: Option<String>,
    /// `drm-client-id`: unique per open file on the system.
    pub client_id: Option<u64>,
    /// `drm-client-name` (6.13+, set by the client).
    pub client_name: Option<Untrusted>,
    /// Engines by name.
    pub engines: BTreeMap<String, EngineStats>,
    /// Memory regions by name.
    pub regions: BTreeMap<String, RegionStats>,
    /// Pre-5.19 amdgpu keys, when present.
    pub amdgpu_legacy: Option<AmdgpuLegacy>,
    /// Keys this parser does not know, with their raw values.
    pub unknown: Vec<(String, String)>,
    /// Lines it could not read, with why.
    pub malformed: Vec<Malformed>,
}

/// A line a parser could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Malformed {
    /// 1-based line number.
    pub line: usize,
    /// The line (cut to 200 bytes).
    pub text: String,
    /// Why it was rejected.
    pub why: String,
}

impl Malformed {
    pub(crate) fn new(line: usize, text: &str, why: impl std::fmt::Display) -> Self {
        let mut t = text.to_string();
        if t.len() > 200 {
            let mut cut = 200;
            while !t.is_char_boundary(cut) {
                cut -= 1;
            }
            t.truncate(cut);
        }
        Self {
            line,
            text: t,
            why: why.to_string(),
        }
    }
}

impl DrmFdinfo {
    /// Whether the file carried any usage-stats key (`drm-*` or amdgpu legacy keys).
    pub fn has_usage_keys(&self) -> bool {
        self.driver.is_some()
            || self.client_id.is_some()
            || !self.regions.is_empty()
            || !self.engines.is_empty()
            || self.amdgpu_legacy.is_some()
    }

    /// Sum of `drm-total-*` over regions, or `None` when no region reports a total
    /// (falls back to `drm-memory-*`, the older resident key, per region).
    pub fn total_bytes(&self) -> Option<u64> {
        let mut sum: Option<u64> = None;
        for r in self.regions.values() {
            if let Some(v) = r.total.or(r.resident).or(r.memory) {
                sum = Some(sum.unwrap_or(0).saturating_add(v));
            }
        }
        sum
    }

    /// Sum of `drm-shared-*` over regions.
    pub fn shared_bytes(&self) -> Option<u64> {
        let mut sum: Option<u64> = None;
        for r in self.regions.values() {
            if let Some(v) = r.shared {
                sum = Some(sum.unwrap_or(0).saturating_add(v));
            }
        }
        sum
    }
}

/// Splits `key:\tvalue` (the kernel's seq_printf form); `None` without a colon.
fn split_kv(line: &str) -> Option<(&str, &str)> {
    let (k, v) = line.split_once(':')?;
    Some((k.trim(), v.trim()))
}

/// Why a repeated key is in `malformed`.
pub const REPEATED: &str = "repeated key: the kernel prints it once; the first value is kept";

/// Parses a plain decimal `u64`.
fn uint(v: &str) -> Result<u64, FieldError> {
    v.parse::<u64>().map_err(FieldError::NotUnsigned)
}

/// Parses a memory size: an integer with an optional `KiB`/`MiB`/`GiB` unit (bytes without
/// one), or `kB` as pre-5.19 amdgpu printed. Overflow is an error, never a wrapped value.
pub fn parse_size(v: &str) -> Result<u64, FieldError> {
    let mut it = v.split_whitespace();
    let n = uint(it.next().ok_or(FieldError::Empty)?)?;
    let mul: u64 = match it.next() {
        None => 1,
        Some("KiB" | "kB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(u) => return Err(FieldError::UnknownUnit(u.into())),
    };
    if let Some(extra) = it.next() {
        return Err(FieldError::Trailing(extra.into()));
    }
    n.checked_mul(mul)
        .ok_or(FieldError::Overflow { n, unit: mul })
}

fn parse_ns(v: &str) -> Result<u64, FieldError> {
    match v.split_whitespace().collect::<Vec<_>>().as_slice() {
        [n, "ns"] => uint(n),
        [_, u] => Err(FieldError::NotNanoseconds((*u).into())),
        [_] => Err(FieldError::MissingNanoseconds),
        _ => Err(FieldError::Shape("<n> ns")),
    }
}

fn parse_hz(v: &str) -> Result<u64, FieldError> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    let [n, unit] = parts.as_slice() else {
        return Err(FieldError::Shape("<n> Hz|kHz|MHz|GHz"));
    };
    let mul: u64 = match *unit {
        "Hz" => 1,
        "kHz" | "KHz" => 1_000,
        "MHz" => 1_000_000,
        "GHz" => 1_000_000_000,
        u => return Err(FieldError::UnknownUnit(u.into())),
    };
    let n = uint(n)?;
    n.checked_mul(mul)
        .ok_or(FieldError::Overflow { n, unit: mul })
}

/// Parses a percentage like `12.5%`.
fn parse_percent(v: &str) -> Result<f64, FieldError> {
    let n = v
        .strip_suffix('%')
        .ok_or(FieldError::MissingPercent)?
        .trim();
    let f: f64 = n.parse().map_err(|_| FieldError::NotANumber(n.into()))?;
    if !(0.0..=100_000.0).contains(&f) {
        return Err(FieldError::PercentOutOfRange(f));
    }
    Ok(f)
}

fn parse_common(c: &mut Common, key: &str, v: &str) -> Option<Result<(), FieldError>> {
    let r = match key {
        "pos" => uint(v).map(|n| c.pos = Some(n)),
        "flags" => u32::from_str_radix(v, 8)
            .map(|n| c.flags = Some(n))
            .map_err(FieldError::NotOctal),
        "mnt_id" => uint(v).map(|n| c.mnt_id = Some(n)),
        "ino" => uint(v).map(|n| c.ino = Some(n)),
        _ => return None,
    };
    Some(r)
}

const MEMORY_KINDS: [&str; 6] = [
    "total",
    "shared",
    "resident",
    "purgeable",
    "active",
    "memory",
];
const AMD_MEMORY_KINDS: [&str; 3] = ["evicted", "requested", "memory"];
const AMDGPU_RINGS: [&str; 7] = ["gfx", "compute", "dma", "dec", "enc_1", "enc", "jpeg"];

/// Parses the text of a DRM fd's fdinfo.
pub fn parse_drm(text: &str) -> DrmFdinfo {
    let mut out = DrmFdinfo::default();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, v)) = split_kv(line) else {
            out.malformed
                .push(Malformed::new(n, line, "no `key:` separator"));
            continue;
        };
        if key.is_empty() {
            out.malformed.push(Malformed::new(n, line, "empty key"));
            continue;
        }
        if !seen.insert(key) {
            out.malformed.push(Malformed::new(n, line, REPEATED));
            continue;
        }
        let r = if let Some(r) = parse_common(&mut out.common, key, v) {
            r
        } else if let Some(rest) = key.strip_prefix("drm-") {
            drm_key(&mut out, rest, v)
        } else if let Some(r) = amdgpu_key(&mut out, key, v) {
            r
        } else {
            out.unknown.push((key.to_string(), v.to_string()));
            Ok(())
        };
        if let Err(why) = r {
            out.malformed.push(Malformed::new(n, line, why));
        }
    }
    out
}

fn drm_key(out: &mut DrmFdinfo, rest: &str, v: &str) -> Result<(), FieldError> {
    let named = |s: &str| -> Result<String, FieldError> {
        if s.is_empty() {
            Err(FieldError::EmptyName("engine or region name"))
        } else {
            Ok(s.to_string())
        }
    };
    match rest {
        "driver" => {
            if v.is_empty() {
                return Err(FieldError::EmptyName("driver name"));
            }
            out.driver = Some(v.to_string());
            return Ok(());
        }
        "pdev" => {
            out.pdev = Some(v.to_string());
            return Ok(());
        }
        "client-id" => {
            out.client_id = Some(uint(v)?);
            return Ok(());
        }
        "client-name" => {
            out.client_name = Some(Untrusted::from(v));
            return Ok(());
        }
        _ => {}
    }
    // Longer prefixes first: `engine-capacity-` before `engine-`, `total-cycles-` before
    // the memory key `total-`.
    if let Some(e) = rest.strip_prefix("engine-capacity-") {
        let val = uint(v)?;
        out.engines.entry(named(e)?).or_default().capacity = Some(val);
    } else if let Some(e) = rest.strip_prefix("engine-") {
        let val = parse_ns(v)?;
        out.engines.entry(named(e)?).or_default().busy_ns = Some(val);
    } else if let Some(e) = rest.strip_prefix("total-cycles-") {
        let val = uint(v)?;
        out.engines.entry(named(e)?).or_default().total_cycles = Some(val);
    } else if let Some(e) = rest.strip_prefix("cycles-") {
        let val = uint(v)?;
        out.engines.entry(named(e)?).or_default().cycles = Some(val);
    } else if let Some(e) = rest.strip_prefix("maxfreq-") {
        let val = parse_hz(v)?;
        out.engines.entry(named(e)?).or_default().maxfreq_hz = Some(val);
    } else if let Some((kind, region)) = MEMORY_KINDS
        .iter()
        .find_map(|k| rest.strip_prefix(k)?.strip_prefix('-').map(|r| (*k, r)))
    {
        let val = parse_size(v)?;
        let r = out.regions.entry(named(region)?).or_default();
        let slot = match kind {
            "total" => &mut r.total,
            "shared" => &mut r.shared,
            "resident" => &mut r.resident,
            "purgeable" => &mut r.purgeable,
            "active" => &mut r.active,
            _ => &mut r.memory,
        };
        *slot = Some(val);
    } else {
        out.unknown.push((format!("drm-{rest}"), v.to_string()));
    }
    Ok(())
}

fn amdgpu_key(out: &mut DrmFdinfo, key: &str, v: &str) -> Option<Result<(), FieldError>> {
    fn legacy(o: &mut DrmFdinfo) -> &mut AmdgpuLegacy {
        o.amdgpu_legacy.get_or_insert_default()
    }
    let r = match key {
        "pdev" => {
            legacy(out).pdev = Some(v.to_string());
            Ok(())
        }
        "pasid" => uint(v).map(|n| legacy(out).pasid = Some(n)),
        "vram mem" => parse_size(v).map(|n| legacy(out).vram = Some(n)),
        "gtt mem" => parse_size(v).map(|n| legacy(out).gtt = Some(n)),
        "cpu mem" => parse_size(v).map(|n| legacy(out).cpu = Some(n)),
        _ if key.starts_with("amd-") => {
            let (kind, region) = AMD_MEMORY_KINDS.iter().find_map(|k| {
                let region = key
                    .strip_prefix("amd-")?
                    .strip_prefix(k)?
                    .strip_prefix('-')?;
                (!region.is_empty()).then_some((*k, region))
            })?;
            parse_size(v).map(|n| {
                let r = out.regions.entry(region.to_string()).or_default();
                let slot = match kind {
                    "evicted" => &mut r.amd_evicted,
                    "requested" => &mut r.amd_requested,
                    _ => &mut r.amd_memory,
                };
                *slot = Some(n);
            })
        }
        _ => {
            let ring = AMDGPU_RINGS.iter().any(|p| {
                key.strip_prefix(p)
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            });
            if !ring {
                return None;
            }
            parse_percent(v).map(|p| {
                legacy(out).engines_percent.insert(key.to_string(), p);
            })
        }
    };
    Some(r)
}

/// A parsed dma-buf fdinfo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DmaBufFdinfo {
    /// Generic lines.
    pub common: Common,
    /// `size` in bytes.
    pub size: Option<u64>,
    /// `count`: how many files refer to the buffer.
    pub count: Option<u64>,
    /// `exp_name`: the exporter (`drm` for PRIME, `udmabuf`, `system` for heaps).
    pub exp_name: Option<String>,
    /// `name`: set by `DMA_BUF_SET_NAME`, or by the exporter: the rest of the file after
    /// `name:\t` (newlines included, the final one left out).
    pub name: Option<Untrusted>,
    /// Keys this parser does not know.
    pub unknown: Vec<(String, String)>,
    /// Lines it could not read, and repeated keys.
    pub malformed: Vec<Malformed>,
}

/// Parses the text of a dma-buf fd's fdinfo.
pub fn parse_dmabuf(text: &str) -> DmaBufFdinfo {
    parse_dmabuf_bytes(text.as_bytes())
}

/// Parses the bytes of a dma-buf fd's fdinfo (the name is kept byte for byte).
pub fn parse_dmabuf_bytes(bytes: &[u8]) -> DmaBufFdinfo {
    let mut out = DmaBufFdinfo::default();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut rest = bytes;
    let mut n = 0;
    while !rest.is_empty() {
        n += 1;
        // The name is the last thing the kernel prints: all that follows is its text.
        if let Some(name) = rest.strip_prefix(b"name:") {
            let name = name.strip_prefix(b"\t").unwrap_or(name);
            let name = name.strip_suffix(b"\n").unwrap_or(name);
            // The kernel prints `name:\t<name>` only when one is set; keep an empty one as
            // none.
            out.name = (!name.is_empty()).then(|| Untrusted::new(name));
            break;
        }
        let (raw, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        rest = next;
        let line = String::from_utf8_lossy(raw);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, v)) = split_kv(line) else {
            out.malformed
                .push(Malformed::new(n, line, "no `key:` separator"));
            continue;
        };
        if !seen.insert(key.to_string()) {
            out.malformed.push(Malformed::new(n, line, REPEATED));
            continue;
        }
        let r = if let Some(r) = parse_common(&mut out.common, key, v) {
            r
        } else {
            match key {
                "size" => uint(v).map(|x| out.size = Some(x)),
                "count" => uint(v).map(|x| out.count = Some(x)),
                "exp_name" => {
                    out.exp_name = Some(v.to_string());
                    Ok(())
                }
                _ => {
                    out.unknown.push((key.to_string(), v.to_string()));
                    Ok(())
                }
            }
        };
        if let Err(why) = r {
            out.malformed.push(Malformed::new(n, line, why));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("3 KiB"), Ok(3072));
        assert_eq!(parse_size("2 MiB"), Ok(2 << 20));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("18446744073709551615 KiB").is_err());
        assert!(parse_size("18446744073709551616").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("1 KiB extra").is_err());
    }

    #[test]
    fn prefixes_do_not_collide() {
        let f = parse_drm(
            "drm-driver:\tx\ndrm-total-cycles-gfx:\t10\ndrm-total-vram:\t1 KiB\n\
             drm-engine-capacity-gfx:\t2\ndrm-engine-gfx:\t5 ns\n",
        );
        assert_eq!(f.engines["gfx"].total_cycles, Some(10));
        assert_eq!(f.engines["gfx"].capacity, Some(2));
        assert_eq!(f.engines["gfx"].busy_ns, Some(5));
        assert_eq!(f.regions["vram"].total, Some(1024));
        assert!(f.malformed.is_empty() && f.unknown.is_empty(), "{f:?}");
    }

    #[test]
    fn dmabuf_name_cannot_inject_a_size() {
        let f = parse_dmabuf_bytes(
            b"pos:\t0\nflags:\t02\nmnt_id:\t9\nino:\t5\nsize:\t8192\ncount:\t1\n\
              exp_name:\tudmabuf\nname:\tx\nsize:\t1099511627776\n",
        );
        assert_eq!(f.size, Some(8192));
        assert_eq!(f.exp_name.as_deref(), Some("udmabuf"));
        assert_eq!(
            f.name.as_ref().map(Untrusted::as_bytes),
            Some(&b"x\nsize:\t1099511627776"[..])
        );
        assert!(f.malformed.is_empty() && f.unknown.is_empty(), "{f:?}");
    }

    #[test]
    fn dmabuf_name_keeps_escapes_and_invalid_utf8() {
        let f = parse_dmabuf_bytes(b"size:\t4096\nname:\t\x1b]2;owned\x07\xff\xfe\n");
        let name = f.name.unwrap();
        assert_eq!(name.as_bytes(), b"\x1b]2;owned\x07\xff\xfe");
        assert_eq!(name.to_string(), "\\x1b]2;owned\\x07\\xff\\xfe");
    }

    #[test]
    fn repeated_keys_are_flagged_and_never_override() {
        let f = parse_dmabuf("size:\t8192\ncount:\t1\nsize:\t1099511627776\n");
        assert_eq!(f.size, Some(8192));
        assert_eq!(f.malformed.len(), 1);
        assert_eq!(f.malformed[0].why, REPEATED);
        assert_eq!(f.malformed[0].line, 3);
        let d = parse_drm(
            "drm-driver:\tvkms\ndrm-total-system:\t4 KiB\ndrm-total-system:\t1 GiB\n\
             drm-driver:\tevil\n",
        );
        assert_eq!(d.driver.as_deref(), Some("vkms"));
        assert_eq!(d.regions["system"].total, Some(4096));
        assert_eq!(d.malformed.len(), 2);
        assert!(d.malformed.iter().all(|m| m.why == REPEATED));
    }

    #[test]
    fn drm_client_name_is_untrusted() {
        let d = parse_drm("drm-driver:\tx\ndrm-client-name:\t\x1b[2Jhi\n");
        assert_eq!(d.client_name.unwrap().to_string(), "\\x1b[2Jhi");
    }
}
