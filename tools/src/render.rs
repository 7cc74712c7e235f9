//! Human tables for a [`Report`]: aligned columns, colour only when asked (a TTY without
//! `NO_COLOR`), every figure followed by its source, unknown figures spelled `unknown`.

use crate::fdinfo::RegionStats;
use crate::scan::{ClientReport, Figure, Report, Source};
use crate::untrusted::Untrusted;
use std::fmt::Write;

/// A path or name the scan found (a node path from an fd's link or a maps line), escaped
/// like every other [`Untrusted`] text.
fn esc(s: &str) -> String {
    Untrusted::from(s).escaped()
}

/// How to group the main table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum By {
    /// One row per process.
    Process,
    /// One row per open DRM file.
    Client,
    /// One row per buffer (mapped DRM buffers and dma-bufs).
    Buffer,
    /// One row per cgroup v2 path of the holders.
    Cgroup,
    /// One row per systemd unit (from the cgroup path).
    Unit,
    /// One row per Slurm job (from the cgroup path).
    Job,
}

/// Sort key of the main table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum SortKey {
    /// Largest first.
    Size,
    /// By pid.
    Pid,
    /// By command name.
    Name,
}

/// Human size: `0 B`, `4.0 KiB`, `1.5 MiB`.
pub fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// A source's label as the tables print it (`fdinfo`, `maps`, `dmabuf`, `debugfs`; empty
/// for unknown).
pub fn source_tag(s: Source) -> &'static str {
    match s {
        Source::Fdinfo => "fdinfo",
        Source::FdinfoAmdgpuLegacy => "fdinfo/amdgpu",
        Source::Maps => "maps",
        Source::DmabufFdinfo => "dmabuf",
        Source::DebugfsClients => "debugfs",
        Source::DebugfsFramebuffer => "debugfs",
        Source::DebugfsGemNames => "debugfs",
        Source::Unknown => "",
    }
}

/// `4.0 KiB [maps]` or `unknown`.
pub fn fig(f: &Figure) -> String {
    match f.value {
        Some(v) => format!("{} [{}]", human(v), source_tag(f.source)),
        None => "unknown".into(),
    }
}

fn count(f: &Figure) -> String {
    match f.value {
        Some(v) => format!("{v} [{}]", source_tag(f.source)),
        None => "unknown".into(),
    }
}

struct Style {
    color: bool,
}

impl Style {
    fn bold(&self, s: &str) -> String {
        if self.color {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn dim_unknown(&self, s: String) -> String {
        if self.color && s.contains("unknown") {
            s.replace("unknown", "\x1b[33munknown\x1b[0m")
        } else {
            s
        }
    }
}

/// The one table writer: rows as lines, each column padded to its widest cell (counted in
/// characters), two spaces between columns, no trailing space. Rows may be shorter than
/// others (their missing cells are empty).
pub fn align(rows: &[Vec<String>]) -> Vec<String> {
    let mut w: Vec<usize> = Vec::new();
    for r in rows {
        if w.len() < r.len() {
            w.resize(r.len(), 0);
        }
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            let s: Vec<String> = r
                .iter()
                .zip(&w)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.chars().count()))))
                .collect();
            s.join("  ").trim_end().to_string()
        })
        .collect()
}

fn table(out: &mut String, st: &Style, header: &[&str], rows: &[Vec<String>]) {
    let mut all: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    all.extend(rows.iter().cloned());
    for (i, l) in align(&all).into_iter().enumerate() {
        let l = if i == 0 {
            st.bold(&l)
        } else {
            st.dim_unknown(l)
        };
        let _ = writeln!(out, "{l}");
    }
}

/// The group of a process for `--by cgroup|unit|job` (escaped; `(unknown)` or `(none)`).
fn group_of(p: &crate::scan::ProcessReport, by: By) -> String {
    let a = p.attribution.as_ref();
    match by {
        By::Cgroup => p
            .cgroup
            .as_ref()
            .map_or_else(|| "(unknown)".into(), Untrusted::escaped),
        By::Unit => a
            .and_then(|a| a.unit.as_deref())
            .map_or_else(|| "(none)".into(), esc),
        _ => a.and_then(|a| a.slurm.as_ref()).map_or_else(
            || "(none)".into(),
            |j| match &j.step {
                Some(s) => format!("{}.{}", j.job, esc(s)),
                None => j.job.to_string(),
            },
        ),
    }
}

/// The table by cgroup, unit or Slurm job: each open DRM file counted once, in its lowest
/// holder's group; dma-bufs once per group; mapped bytes summed over the group's processes.
fn grouped(out: &mut String, st: &Style, r: &Report, by: By, sort: SortKey) {
    #[derive(Default)]
    struct G {
        procs: usize,
        clients: usize,
        total: Option<u64>,
        mapped: Option<u64>,
        dmabufs: std::collections::BTreeSet<u64>,
    }
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, None) => x,
        (None, y) => y,
    };
    let title = match by {
        By::Cgroup => "CGROUPS",
        By::Unit => "SYSTEMD UNITS",
        _ => "SLURM JOBS (job.step)",
    };
    let _ = writeln!(out, "{}", st.bold(title));
    let key: std::collections::BTreeMap<u32, String> = r
        .processes
        .iter()
        .map(|p| (p.pid, group_of(p, by)))
        .collect();
    let mut gs: std::collections::BTreeMap<String, G> = Default::default();
    for p in &r.processes {
        let g = gs.entry(key[&p.pid].clone()).or_default();
        g.procs += 1;
        g.mapped = add(g.mapped, p.mapped_drm.value);
        g.dmabufs.extend(p.dmabuf_fds.iter().map(|d| d.inode));
        g.dmabufs.extend(p.dmabuf_mappings.iter().copied());
    }
    for c in &r.clients {
        let Some(k) = c
            .holders
            .iter()
            .map(|h| h.pid)
            .min()
            .and_then(|p| key.get(&p))
        else {
            continue;
        };
        let g = gs.entry(k.clone()).or_default();
        g.clients += 1;
        g.total = add(g.total, c.memory_total.value);
    }
    let sizes: std::collections::BTreeMap<u64, Option<u64>> =
        r.dmabufs.iter().map(|b| (b.inode, b.size.value)).collect();
    let figure = |v: Option<u64>, s: Source| {
        v.map_or_else(|| Figure::unknown("no source"), |v| Figure::known(v, s))
    };
    let mut rows: Vec<(u64, String, Vec<String>)> = gs
        .into_iter()
        .map(|(k, g)| {
            let dmabuf = g
                .dmabufs
                .iter()
                .map(|i| sizes.get(i).copied().flatten())
                .fold(None, add);
            let total = figure(g.total, Source::Fdinfo);
            let mapped = figure(g.mapped, Source::Maps);
            let dmabuf = figure(dmabuf, Source::DmabufFdinfo);
            let size = [&total, &mapped, &dmabuf]
                .iter()
                .filter_map(|f| f.value)
                .fold(0u64, u64::saturating_add);
            let row = vec![
                k.clone(),
                g.procs.to_string(),
                g.clients.to_string(),
                fig(&total),
                fig(&mapped),
                fig(&dmabuf),
            ];
            (size, k, row)
        })
        .collect();
    if sort == SortKey::Size {
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.2).collect();
    table(
        out,
        st,
        &[
            "GROUP",
            "PROCESSES",
            "CLIENTS",
            "FDINFO TOTAL",
            "MAPPED",
            "DMABUF",
        ],
        &rows,
    );
}

/// Renders the report as text tables.
pub fn tables(r: &Report, by: By, sort: SortKey, color: bool) -> String {
    let st = Style { color };
    let mut out = String::new();
    devices_table(&mut out, &st, r);
    let _ = writeln!(out);
    match by {
        By::Process => processes_table(&mut out, &st, r, sort),
        By::Client => clients_table(&mut out, &st, r, sort),
        By::Cgroup | By::Unit | By::Job => grouped(&mut out, &st, r, by, sort),
        By::Buffer => buffers_table(&mut out, &st, r, sort),
    }
    sharing(&mut out, &st, r);
    dmem_tables(&mut out, &st, r);
    footer(&mut out, r);
    out
}

/// The dmem controller's regions and the cgroups charged or limited on them (nothing where
/// the kernel registers no region).
fn dmem_tables(out: &mut String, st: &Style, r: &Report) {
    let Some(d) = r.dmem.as_ref().filter(|d| !d.regions.is_empty()) else {
        return;
    };
    let regions: Vec<Vec<String>> = d
        .regions
        .iter()
        .map(|g| vec![esc(&g.region), human(g.capacity)])
        .collect();
    let charges: Vec<Vec<String>> = d
        .charges
        .iter()
        .map(|c| {
            vec![
                esc(&c.cgroup),
                esc(&c.region),
                human(c.current),
                c.max.map_or_else(|| "max".into(), human),
            ]
        })
        .collect();
    for (title, header, rows) in [
        (
            "GPU MEMORY REGIONS (dmem cgroup controller)",
            &["REGION", "CAPACITY"][..],
            regions,
        ),
        (
            "CGROUPS CHARGED (dmem.current, dmem.max)",
            &["CGROUP", "REGION", "CURRENT", "MAX"][..],
            charges,
        ),
    ] {
        if !rows.is_empty() {
            let _ = writeln!(out, "\n{}", st.bold(title));
            table(out, st, header, &rows);
        }
    }
}

fn devices_table(out: &mut String, st: &Style, r: &Report) {
    let _ = writeln!(out, "{}", st.bold("DEVICES"));
    let rows: Vec<Vec<String>> = r
        .devices
        .iter()
        .map(|d| {
            vec![
                d.nodes
                    .iter()
                    .map(|n| esc(n.path.trim_start_matches("/dev/dri/")))
                    .collect::<Vec<_>>()
                    .join(","),
                // The driver's own text (`drm-driver` of an fdinfo): escaped like a name.
                d.driver.as_deref().map_or_else(|| "unknown".into(), esc),
                d.clients.to_string(),
                count(&d.debugfs_clients),
                fig(&d.memory_total),
                fig(&d.mapped),
                fig(&d.framebuffer_bytes),
                fig(&d.named_bytes),
            ]
        })
        .collect();
    table(
        out,
        st,
        &[
            "NODES",
            "DRIVER",
            "CLIENTS",
            "KERNEL CLIENTS",
            "FDINFO TOTAL",
            "MAPPED",
            "FB",
            "NAMED",
        ],
        &rows,
    );
}

fn processes_table(out: &mut String, st: &Style, r: &Report, sort: SortKey) {
    let size_of = |f: &Figure| f.value.unwrap_or(0);
    let _ = writeln!(out, "{}", st.bold("PROCESSES"));
    let mut ps: Vec<_> = r.processes.iter().collect();
    match sort {
        SortKey::Size => ps.sort_by_key(|p| {
            std::cmp::Reverse(
                size_of(&p.mapped_drm)
                    .saturating_add(size_of(&p.dmabuf_bytes))
                    .saturating_add(size_of(&p.memory_total)),
            )
        }),
        SortKey::Pid => ps.sort_by_key(|p| p.pid),
        SortKey::Name => ps.sort_by(|a, b| a.comm.cmp(&b.comm)),
    }
    let rows: Vec<Vec<String>> = ps
        .iter()
        .map(|p| {
            vec![
                pid_cell(p),
                p.comm
                    .as_ref()
                    .map_or_else(|| "?".into(), Untrusted::escaped),
                p.uid.map_or_else(|| "?".into(), |u| u.to_string()),
                p.drm_fds.len().to_string(),
                p.dmabuf_fds.len().to_string(),
                fig(&p.memory_total),
                fig(&p.mapped_drm),
                fig(&p.dmabuf_bytes),
            ]
        })
        .collect();
    table(
        out,
        st,
        &[
            "PID",
            "COMMAND",
            "UID",
            "DRM FDS",
            "DMABUF FDS",
            "FDINFO TOTAL",
            "MAPPED",
            "DMABUF",
        ],
        &rows,
    );
}

fn clients_table(out: &mut String, st: &Style, r: &Report, sort: SortKey) {
    let size_of = |f: &Figure| f.value.unwrap_or(0);
    let _ = writeln!(out, "{}", st.bold("CLIENTS (open DRM files)"));
    let mut cs: Vec<_> = r.clients.iter().collect();
    match sort {
        SortKey::Size => cs.sort_by_key(|c| std::cmp::Reverse(size_of(&c.memory_total))),
        SortKey::Pid | SortKey::Name => cs.sort_by_key(|c| c.holders.first().map(|h| h.pid)),
    }
    // amdgpu's evicted bytes get a column where some client prints them.
    let evicted = cs
        .iter()
        .any(|c| c.regions.values().any(|r| r.amd_evicted.is_some()));
    let rows: Vec<Vec<String>> = cs
        .iter()
        .map(|c| {
            let engines = c
                .engines
                .iter()
                .map(|(n, e)| match e.busy_percent {
                    Some(p) => format!("{} {p:.1}%", esc(n)),
                    None => format!("{} n/a", esc(n)),
                })
                .collect::<Vec<_>>()
                .join(" ");
            let mut row = vec![
                esc(&c.node),
                c.client_id.map_or_else(|| "-".into(), |i| i.to_string()),
                c.holders
                    .iter()
                    .map(|h| format!("{}:{}", h.pid, h.fd))
                    .collect::<Vec<_>>()
                    .join(","),
                c.dedupe.to_string(),
                fig(&c.memory_total),
                fig(&c.memory_shared),
                region_sum(c, |r| r.resident.or(r.memory)),
                region_sum(c, |r| r.purgeable),
            ];
            if evicted {
                row.push(region_sum(c, |r| r.amd_evicted));
            }
            row.push(if engines.is_empty() {
                "-".into()
            } else {
                engines
            });
            row
        })
        .collect();
    let mut head = vec![
        "NODE",
        "CLIENT ID",
        "HELD BY (pid:fd)",
        "SAME FILE BY",
        "TOTAL",
        "SHARED",
        "RESIDENT",
        "PURGEABLE",
    ];
    if evicted {
        head.push("EVICTED");
    }
    head.push("ENGINES");
    table(out, st, &head, &rows);
}

/// The sum over a client's regions of one fdinfo figure (`drm-resident-*` ...), human
/// readable; `-` where no region prints it.
fn region_sum(c: &ClientReport, f: impl Fn(&RegionStats) -> Option<u64>) -> String {
    c.regions
        .values()
        .filter_map(f)
        .reduce(u64::saturating_add)
        .map_or_else(|| "-".into(), human)
}

fn buffers_table(out: &mut String, st: &Style, r: &Report, sort: SortKey) {
    let _ = writeln!(out, "{}", st.bold("BUFFERS"));
    let mut rows: Vec<(u64, Vec<String>)> = Vec::new();
    for p in &r.processes {
        for m in &p.drm_mappings {
            rows.push((
                m.bytes.value.unwrap_or(0),
                vec![
                    "drm mmap".into(),
                    esc(&m.node),
                    format!("{} buffer(s)", m.buffers),
                    fig(&m.bytes),
                    format!(
                        "{} ({})",
                        p.pid,
                        p.comm.as_ref().map(Untrusted::escaped).unwrap_or_default()
                    ),
                ],
            ));
        }
    }
    for b in &r.dmabufs {
        rows.push((
            b.size.value.unwrap_or(0),
            vec![
                "dma-buf".into(),
                format!(
                    "ino {} {}{}",
                    b.inode,
                    esc(b.exp_name.as_deref().unwrap_or_default()),
                    b.name
                        .as_ref()
                        .map(|n| format!(" \"{n}\""))
                        .unwrap_or_default()
                ),
                format!("{} holder(s)", b.holders.len()),
                fig(&b.size),
                b.processes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ],
        ));
    }
    if sort == SortKey::Size {
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.1).collect();
    table(
        out,
        st,
        &["KIND", "WHAT", "COUNT", "SIZE", "PROCESSES"],
        &rows,
    );
}

/// The dma-bufs shared between processes, if any.
fn sharing(out: &mut String, st: &Style, r: &Report) {
    if !r.sharing.is_empty() {
        let _ = writeln!(out, "\n{}", st.bold("SHARED DMA-BUFS"));
        for s in &r.sharing {
            let who: Vec<String> = s
                .processes
                .iter()
                .map(|pid| {
                    let comm = r
                        .processes
                        .iter()
                        .find(|p| p.pid == *pid)
                        .and_then(|p| p.comm.as_ref())
                        .map_or_else(|| "?".into(), Untrusted::escaped);
                    format!("{pid} ({comm})")
                })
                .collect();
            let size = s.size.map_or_else(|| "unknown".into(), human);
            let _ = writeln!(out, "  ino {} [{size}]: {}", s.inode, who.join(" <-> "));
        }
    }
}

/// What the scan covered, what it could not read, and its notes.
fn footer(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "\nscanned {} processes: {} read, {} unreadable, {} exited during the scan, {} hold GPU memory",
        r.scan.processes, r.scan.read, r.scan.unreadable, r.scan.vanished, r.scan.holders
    );
    for u in &r.unreadable {
        let _ = writeln!(
            out,
            "  unreadable: pid {} ({}): {}: {}",
            u.pid,
            u.comm
                .as_ref()
                .map_or_else(|| "?".into(), Untrusted::escaped),
            u.path,
            u.reason
        );
    }
    for w in &r.warnings {
        let _ = writeln!(out, "note: {w}");
    }
}

/// A process's pid for tables: `812`, or `812 (1)` with its pid in its own pid namespace
/// when that is another one (`ProcessReport::ns_pids`).
fn pid_cell(p: &crate::scan::ProcessReport) -> String {
    match p.ns_pids.as_deref() {
        Some([.., own]) if *own != p.pid => format!("{} ({own})", p.pid),
        _ => p.pid.to_string(),
    }
}

/// `secs` (since the epoch) as a UTC date and time with its age before `now`:
/// `2026-12-04 14:33:10Z (2m ago)`.
pub fn since(secs: u64, now: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let age = now.saturating_sub(secs);
    let ago = match age {
        0..60 => format!("{age}s"),
        60..3600 => format!("{}m", age / 60),
        3600..86_400 => format!("{}h{:02}m", age / 3600, age % 3600 / 60),
        _ => format!("{}d{:02}h", age / 86_400, age % 86_400 / 3600),
    };
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z ({ago} ago)",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod since_tests {
    #[test]
    fn align_pads_by_characters_and_trims() {
        use super::align;
        let rows = vec![
            vec!["A".to_string(), "BB".into(), "C".into()],
            vec!["ééé".to_string(), "x".into(), String::new()],
            vec!["d".to_string()],
        ];
        assert_eq!(align(&rows), ["A    BB  C", "ééé  x", "d"]);
    }

    #[test]
    fn dates_and_ages() {
        assert_eq!(super::since(0, 59), "1970-01-01 00:00:00Z (59s ago)");
        // 2026-12-04 14:33:10 UTC
        assert_eq!(
            super::since(1_796_394_790, 1_796_394_790 + 125),
            "2026-12-04 14:33:10Z (2m ago)"
        );
        assert_eq!(
            super::since(951_782_400, 951_782_400 + 90_000),
            "2000-02-29 00:00:00Z (1d01h ago)"
        );
    }

    #[test]
    fn clients_show_resident_purgeable_and_amdgpu_evicted() {
        use crate::scan::{FdRef, Report, report::client_report};
        let st = super::Style { color: false };
        let plain = crate::fdinfo::parse_drm(include_str!(
            "../tests/fixtures/fdinfo-full-usage-stats.txt"
        ));
        let amd =
            crate::fdinfo::parse_drm(include_str!("../tests/fixtures/fdinfo-amdgpu-6.12.txt"));
        let at = |fd| FdRef { pid: 42, fd };
        let mut r = Report::empty();
        r.clients = vec![client_report(
            0,
            0,
            "renderD128",
            at(3),
            Some(plain),
            "drm-client-id",
        )];
        let mut out = String::new();
        super::clients_table(&mut out, &st, &r, super::SortKey::Size);
        assert!(
            out.contains("RESIDENT") && out.contains("PURGEABLE"),
            "{out}"
        );
        assert!(
            !out.contains("EVICTED"),
            "no client prints amd-evicted-*: {out}"
        );
        // resident: 30 MiB of vram, 12288 B of system, the older drm-memory-gtt 3 KiB.
        assert!(out.contains("30.0 MiB"), "{out}");
        assert!(out.contains("1.0 MiB"), "purgeable: {out}");
        r.clients.push(client_report(
            1,
            0,
            "renderD128",
            at(4),
            Some(amd),
            "drm-client-id",
        ));
        out.clear();
        super::clients_table(&mut out, &st, &r, super::SortKey::Size);
        assert!(out.contains("EVICTED"), "{out}");
        assert!(out.contains("128.0 MiB"), "amd-evicted-vram: {out}");
        assert!(
            out.contains("514.0 MiB"),
            "resident from drm-memory-*: {out}"
        );
        // The JSON of both, amdgpu's keys included, is what the schema says.
        let v = serde_json::to_value(&r).unwrap();
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../schema/buffers.schema.json")).unwrap();
        let errors: Vec<String> = jsonschema::validator_for(&schema)
            .unwrap()
            .iter_errors(&v)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(v["clients"][1]["regions"]["vram"]["amd_evicted"], 128 << 20);
    }

    #[test]
    fn dmem_regions_and_charges_are_tables_with_hostile_names_escaped() {
        use crate::scan::{DmemRegion, DmemReport, Report};
        let mut r = Report::empty();
        let mut out = String::new();
        super::dmem_tables(&mut out, &super::Style { color: false }, &r);
        assert_eq!(out, "", "no controller: no section");
        r.dmem = Some(DmemReport {
            regions: vec![DmemRegion {
                region: "drm/0000:00:05.0/vram0".into(),
                device: Some("0000:00:05.0".into()),
                capacity: 64 << 20,
            }],
            charges: vec![crate::dmem::Charge {
                cgroup: "/user.slice/\u{1b}[2Jevil".into(),
                region: "drm/0000:00:05.0/vram0".into(),
                current: 8 << 20,
                max: None,
            }],
        });
        super::dmem_tables(&mut out, &super::Style { color: false }, &r);
        assert!(
            out.contains("GPU MEMORY REGIONS (dmem cgroup controller)"),
            "{out}"
        );
        assert!(out.contains("drm/0000:00:05.0/vram0"), "{out}");
        assert!(out.contains("CGROUPS CHARGED"), "{out}");
        assert!(!out.contains('\u{1b}'), "{out}");
        assert!(out.contains(" max"), "{out}");
    }
}
