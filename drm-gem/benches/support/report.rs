//! The ratio table, printed after the criterion run from the estimates it wrote.

use super::paired::{Paired, quantile};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The four implementations compared in every per-operation group, in table order.
pub(crate) const PEERS: [&str; 4] = ["drm_gem", "raw", "drm_crate", "libdrm"];

/// The per-operation groups, in table order.
pub(crate) const OPS: [&str; 5] = [
    "get_cap",
    "version",
    "dumb_create_destroy",
    "dumb_map_write_4k",
    "prime_roundtrip",
];

/// The fill group and its functions (the first is the baseline).
pub(crate) const FILL: &str = "fill_8mib";
pub(crate) const FILL_FNS: [&str; 6] = [
    "anon_memset",
    "drm_gem",
    "drm_gem_write_at",
    "raw",
    "drm_crate",
    "libdrm",
];

/// The in-process overhead group.
pub(crate) const OVERHEAD: &str = "overhead";

/// Medians read back from criterion's `estimates.json` files of this run.
#[derive(Debug)]
pub(crate) struct Estimates {
    home: PathBuf,
    since: SystemTime,
}

impl Estimates {
    /// Estimates under `home` written at or after `since` (older files are a previous run's).
    pub(crate) fn new(home: &Path, since: SystemTime) -> Self {
        Self {
            home: home.to_path_buf(),
            since,
        }
    }

    /// The median time per iteration in ns, if this run measured `group/function`.
    pub(crate) fn median_ns(&self, group: &str, function: &str) -> Option<f64> {
        let p = self
            .home
            .join(group)
            .join(function)
            .join("new")
            .join("estimates.json");
        let modified = std::fs::metadata(&p).ok()?.modified().ok()?;
        if modified < self.since {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
        v["median"]["point_estimate"].as_f64()
    }
}

fn time(ns: Option<f64>) -> String {
    match ns {
        None => "-".into(),
        Some(t) if t < 1e3 => format!("{t:.0} ns"),
        Some(t) if t < 1e6 => format!("{:.2} µs", t / 1e3),
        Some(t) => format!("{:.2} ms", t / 1e6),
    }
}

/// `a / b` against a ceiling, e.g. "1.012 ok" or "1.080 OVER".
fn ratio(a: Option<f64>, b: Option<f64>, ceiling: f64) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            format!("{r:.3} {}", if r <= ceiling { "ok" } else { "OVER" })
        }
        _ => "-".into(),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// A paired ratio against a bound: "1.012 [0.998-1.025] ok" (median [p25-p75]); `ceiling`
/// true: the median must be at most `bound`, else at least.
fn paired_cell(r: Option<Vec<f64>>, bound: f64, ceiling: bool) -> String {
    let Some(r) = r else { return "-".into() };
    match (quantile(&r, 0.5), quantile(&r, 0.25), quantile(&r, 0.75)) {
        (Some(m), Some(lo), Some(hi)) => {
            let met = if ceiling { m <= bound } else { m >= bound };
            let word = match (met, ceiling) {
                (true, _) => "ok",
                (false, true) => "OVER",
                (false, false) => "UNDER",
            };
            format!("{m:.3} [{lo:.3}-{hi:.3}] {word}")
        }
        _ => "-".into(),
    }
}

/// Prints the tables (markdown, so they paste into notes and docs).
pub(crate) fn print(e: &Estimates, paired: &[Paired], dumb_driver: &str, prime: &str) {
    let uname = rustix::system::uname();
    println!();
    println!("## drm-gem vs raw ioctl, the drm crate and libdrm");
    println!();
    println!(
        "kernel {} | CPU {} | dumb node {dumb_driver} | PRIME {prime} | {} | ratios: drm_gem time / other time",
        uname.release().to_string_lossy(),
        cpu_model(),
        if std::env::var_os("VM_GUEST").is_some() {
            "in a vm guest"
        } else {
            "on the host"
        }
    );
    println!();
    println!("Criterion medians, and the ratios of those medians:");
    println!();
    println!(
        "| operation | drm_gem | raw | drm crate | libdrm | drm_gem/raw (<= 1.03) | drm_gem/drm (<= 1.00) | drm_gem/libdrm (<= 1.00) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for op in OPS {
        let m: Vec<Option<f64>> = PEERS.iter().map(|f| e.median_ns(op, f)).collect();
        if m.iter().all(Option::is_none) {
            continue;
        }
        println!(
            "| {op} | {} | {} | {} | {} | {} | {} | {} |",
            time(m[0]),
            time(m[1]),
            time(m[2]),
            time(m[3]),
            ratio(m[0], m[1], 1.03),
            ratio(m[0], m[2], 1.0),
            ratio(m[0], m[3], 1.0),
        );
    }

    let base = e.median_ns(FILL, FILL_FNS[0]);
    if base.is_some() {
        println!();
        println!("| fill 8 MiB | median | GiB/s | throughput vs anonymous memset (>= 0.90) |");
        println!("|---|---:|---:|---:|");
        for f in FILL_FNS {
            let m = e.median_ns(FILL, f);
            let gibs = m.map_or("-".into(), |t| {
                format!(
                    "{:.2}",
                    (8u64 << 20) as f64 / (t * 1e-9) / f64::from(1u32 << 30)
                )
            });
            let vs = match (base, m) {
                (Some(b), Some(t)) if t > 0.0 => {
                    let r = b / t;
                    format!("{r:.3} {}", if r >= 0.9 { "ok" } else { "UNDER" })
                }
                _ => "-".into(),
            };
            println!("| {f} | {} | {gibs} | {vs} |", time(m));
        }
    }

    let ops: Vec<&Paired> = OPS
        .iter()
        .filter_map(|op| paired.iter().find(|p| p.group == *op))
        .collect();
    if !ops.is_empty() {
        println!();
        println!(
            "Paired (interleaved rounds; median [p25-p75] of per-round ratios drm_gem / other):"
        );
        println!();
        println!(
            "| operation | rounds x calls | drm_gem/raw (<= 1.03) | drm_gem/drm (<= 1.00) | drm_gem/libdrm (<= 1.00) |"
        );
        println!("|---|---:|---:|---:|---:|");
        for p in ops {
            println!(
                "| {} | {} x {} | {} | {} | {} |",
                p.group,
                p.rounds,
                p.calls,
                paired_cell(p.ratios("drm_gem", "raw"), 1.03, true),
                paired_cell(p.ratios("drm_gem", "drm_crate"), 1.0, true),
                paired_cell(p.ratios("drm_gem", "libdrm"), 1.0, true),
            );
        }
    }
    if let Some(p) = paired.iter().find(|p| p.group == FILL) {
        println!();
        println!(
            "Paired fill (median [p25-p75] of per-round throughput ratios vs anonymous memset, >= 0.90; {} rounds):",
            p.rounds
        );
        println!();
        println!("| fill 8 MiB | vs anon_memset |");
        println!("|---|---:|");
        for f in &FILL_FNS[1..] {
            println!(
                "| {f} | {} |",
                paired_cell(p.ratios(FILL_FNS[0], f), 0.9, false)
            );
        }
    }

    let table = e.median_ns(OVERHEAD, "handle_table");
    let validate = e.median_ns(OVERHEAD, "dumb_spec_validate");
    if table.is_some() || validate.is_some() {
        println!();
        println!("| where drm-gem's extra time goes | value |");
        println!("|---|---:|");
        println!(
            "| handle table alone, no syscall between: lock + count in, lock + count out (replica of GemObject adopt + drop), criterion median | {} |",
            time(table)
        );
        println!(
            "| DumbSpec::validate, criterion median | {} |",
            time(validate)
        );
        let cell = |r: Option<Vec<f64>>| {
            r.and_then(|r| {
                Some(format!(
                    "{:.3} [{:.3}-{:.3}]",
                    quantile(&r, 0.5)?,
                    quantile(&r, 0.25)?,
                    quantile(&r, 0.75)?
                ))
            })
            .unwrap_or_else(|| "-".into())
        };
        for p in paired.iter().filter(|p| p.group != "get_cap") {
            if p.ratios("raw_table", "raw").is_none() {
                continue;
            }
            println!(
                "| {}: raw_table / raw, paired (replica table adopt + release between the syscalls) | {} |",
                p.group,
                cell(p.ratios("raw_table", "raw"))
            );
            println!(
                "| {}: drm_gem / raw_table, paired (all but the table) | {} |",
                p.group,
                cell(p.ratios("drm_gem", "raw_table"))
            );
        }
        if let Some(p) = paired.iter().find(|p| p.group == "get_cap") {
            println!(
                "| retry loop: GET_CAP raw_retry / raw, paired (replica of drm-gem's EINTR/EAGAIN loop) | {} |",
                cell(p.ratios("raw_retry", "raw"))
            );
            println!(
                "| GET_CAP drm_gem / raw_retry, paired (all but the retry loop) | {} |",
                cell(p.ratios("drm_gem", "raw_retry"))
            );
        }
    }
    println!();
}
