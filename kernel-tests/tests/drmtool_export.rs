//! `drmtool export` against the real Prometheus server (Debian's `prometheus`, run in the
//! guest): sample clients with known buffers in two cgroups, the exporter serving /metrics
//! on the loopback interface, Prometheus scraping it every second, and PromQL over its HTTP
//! API must give exactly the ground truth (clients per cgroup and device, mapped bytes, a
//! dma-buf shared between the cgroups counted once overall and visible as shared in both,
//! fdinfo memory where the driver prints it and no series where it does not), and again
//! after one client exits (its series disappear, the dma-buf becomes exclusive).
//!
//! Engine counters: `drmtool_export_engine.rs`; TLS and basic auth: `drmtool_export_tls.rs`.

use drmtool::export::{Config, Exporter, Per};
use drmtool::gpu;
use kernel_tests::{in_guest, skip};
use std::path::Path;
use std::time::{Duration, Instant};

mod export_common;
use export_common::*;

/// The sample client's entry point (kernel_tests::sample); run plainly it does nothing.
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

fn page_round(n: u64) -> u64 {
    n.div_ceil(4096) * 4096
}

#[test]
fn prometheus_sees_exactly_what_the_cgroups_hold() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices or cgroup v2 here");
    }
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let name_of = |driver: &str| {
        gpus.iter()
            .find(|g| g.driver.as_deref() == Some(driver))
            .map(|g| g.bus_id.clone().unwrap_or_else(|| g.name.clone()))
            .unwrap_or_else(|| panic!("no {driver} in {}", gpu::summary(&gpus)))
    };
    let (vgem, vkms) = (name_of("vgem"), name_of("vkms"));

    let (target, exporter) = serve_per_cgroup();

    let (ga, gb) = (
        Cgroup::new("drmtool-export-a"),
        Cgroup::new("drmtool-export-b"),
    );
    // A (cgroup a): a mapped vgem buffer, exported as a dma-buf it maps too.
    let a = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "64x64",
        "--map",
        "--export",
        "--map-dmabuf",
    ]);
    ga.add(a.pid());
    let shared = a.ready.dmabuf_size.expect("A exported a dma-buf");
    // B (cgroup b): its own mapped vgem buffer, and A's dma-buf imported.
    let b = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "32x32",
        "--map",
        "--import",
        &format!("{}:{}", a.pid(), a.ready.dmabuf_fd.unwrap()),
    ]);
    gb.add(b.pid());
    // C (cgroup b): a mapped vkms buffer; D (cgroup b) holds C's open file too (what a
    // fork does: counted once) and opens one of its own: two vkms clients.
    let c = spawn(&["--device", "vkms", "--dumb", "16x16", "--map"]);
    gb.add(c.pid());
    let d = spawn(&[
        "--device",
        "vkms",
        "--share-drm",
        &format!("{}:{}", c.pid(), c.ready.drm_fd),
    ]);
    gb.add(d.pid());
    let (pa, pb, pc) = (
        page_round(a.ready.buffers[0].size),
        page_round(b.ready.buffers[0].size),
        page_round(c.ready.buffers[0].size),
    );
    // Whether vkms prints the common memory keys (the patched vkms of stock-6.12-fdinfo):
    // the kernel's own fdinfo text decides what the exporter must show.
    let c_fdinfo = std::fs::read_to_string(format!("/proc/{}/fdinfo/{}", c.pid(), c.ready.drm_fd))
        .expect("C's fdinfo");
    let vkms_memory = c_fdinfo.contains("drm-total-memory:");
    eprintln!("vkms prints drm-total-memory: {vkms_memory}");

    let prom = Prometheus::start(target);
    let (ca, cb) = (ga.path(), gb.path());
    let ours = r#"cgroup=~"/drmtool-export-.*""#;
    let k = |g: &str, dev: &str| format!("{g},{dev}");
    prom.expect(
        &format!("sum by (cgroup, device) (drm_clients{{{ours}}})"),
        &["cgroup", "device"],
        &[
            (&k(&ca, &vgem), 1.0),
            (&k(&cb, &vgem), 1.0),
            (&k(&cb, &vkms), 2.0),
        ],
    );
    prom.expect(
        &format!("sum by (cgroup) (drm_mapped_bytes{{{ours}}})"),
        &["cgroup"],
        &[(&ca, pa as f64), (&cb, (pb + pc) as f64)],
    );
    prom.expect(
        &format!("sum by (cgroup, sharing) (drm_dmabuf_bytes{{{ours}}})"),
        &["cgroup", "sharing"],
        &[
            (&format!("{ca},shared"), shared as f64),
            (&format!("{cb},shared"), shared as f64),
        ],
    );
    prom.expect(
        "sum(drm_dmabuf_distinct_bytes)",
        &[],
        &[("", shared as f64)],
    );
    let memory_query =
        format!("sum by (cgroup, device, source) (drm_memory_bytes{{{ours}, kind=\"total\"}})");
    if vkms_memory {
        // C's file, held by C and D, counted once.
        prom.expect(
            &memory_query,
            &["cgroup", "device", "source"],
            &[(&format!("{cb},{vkms},fdinfo"), pc as f64)],
        );
    } else {
        prom.expect(&memory_query, &["cgroup", "device", "source"], &[]);
    }

    // B exits: its series disappear, and A's dma-buf is no longer shared.
    b.exit();
    prom.expect(
        &format!("sum by (cgroup, device) (drm_clients{{{ours}}})"),
        &["cgroup", "device"],
        &[(&k(&ca, &vgem), 1.0), (&k(&cb, &vkms), 2.0)],
    );
    prom.expect(
        &format!("sum by (cgroup, sharing) (drm_dmabuf_bytes{{{ours}}})"),
        &["cgroup", "sharing"],
        &[(&format!("{ca},exclusive"), shared as f64)],
    );
    prom.expect(
        &format!("sum by (cgroup) (drm_mapped_bytes{{{ours}}})"),
        &["cgroup"],
        &[(&ca, pa as f64), (&cb, pc as f64)],
    );
    // The exporter's own series: scans ran, none failed.
    prom.expect("drmtool_export_scan_errors_total", &[], &[("", 0.0)]);
    prom.expect("drmtool_export_scan_ok", &[], &[("", 1.0)]);
    let stats = exporter.lock().unwrap().stats();
    eprintln!("exporter: {stats:?}");
    assert!(stats.scans >= 2);
    drop((a, c, d));
}

/// `drm-client-id` of a process's fd, from the kernel's own fdinfo text (drivers print it
/// since "drm: Add fdinfo memory stats" / `drm_show_fdinfo`, 6.5; none before).
fn client_id(pid: u32, fd: u32) -> Option<String> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).expect("fdinfo");
    t.lines()
        .find_map(|l| l.strip_prefix("drm-client-id:"))
        .map(|v| v.trim().to_string())
}

/// The `client` label the exporter must give an open file: its `drm-client-id`, else
/// `<pid>/<fd>` of its first holder in pid order.
fn client_label(holders: &[(u32, u32)]) -> String {
    let (pid, fd) = *holders.iter().min().expect("a holder");
    client_id(pid, fd).unwrap_or_else(|| format!("{pid}/{fd}"))
}

/// `--per client` on the fdinfo path: per open file, `drm-total`, `drm-shared` and
/// `drm-active` as the kernel counts them (an exported buffer is shared; an import into
/// another file is in both totals), the file three processes hold (C, the child C forked,
/// and E, which took it with pidfd_getfd) counted once under the lowest pid, and no memory
/// series at all where the driver prints no such keys.
#[test]
fn per_client_series_follow_the_kernels_fdinfo() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices here");
    }
    if kernel_tests::node_of_driver(&["vkms"]).is_none() {
        skip!("no vkms node");
    }
    // C: a vkms buffer, exported, and a forked child holding C's file; D: imports the
    // buffer into its own file; E: holds C's file too (taken with pidfd_getfd) and opens one
    // of its own.
    let c = spawn(&["--device", "vkms", "--dumb", "16x16", "--export", "--fork"]);
    let (child, child_fd) = c.ready.fork_child.expect("--fork reports its child");
    let d = spawn(&[
        "--device",
        "vkms",
        "--import",
        &format!("{}:{}", c.pid(), c.ready.dmabuf_fd.unwrap()),
    ]);
    let e = spawn(&[
        "--device",
        "vkms",
        "--share-drm",
        &format!("{}:{}", c.pid(), c.ready.drm_fd),
    ]);
    let size = page_round(c.ready.buffers[0].size);
    let c_file = [
        (c.pid(), c.ready.drm_fd),
        (child, child_fd),
        (e.pid(), e.ready.extra_drm_fds[0]),
    ];
    let (idc, idd, ide) = (
        client_label(&c_file),
        client_label(&[(d.pid(), d.ready.drm_fd)]),
        client_label(&[(e.pid(), e.ready.drm_fd)]),
    );
    if let Some(id) = client_id(c.pid(), c.ready.drm_fd) {
        assert_eq!(
            client_id(e.pid(), e.ready.extra_drm_fds[0]),
            Some(id.clone()),
            "E holds C's open file"
        );
        assert_eq!(
            client_id(child, child_fd),
            Some(id),
            "C's child holds C's open file"
        );
    }
    eprintln!("client labels: C's file {idc}, D {idd}, E {ide}");
    let fdinfo =
        std::fs::read_to_string(format!("/proc/{}/fdinfo/{}", c.pid(), c.ready.drm_fd)).unwrap();
    let prints_memory = fdinfo.contains("drm-total-memory:");
    eprintln!("vkms prints drm-total-memory: {prints_memory}");

    let mut x = Exporter::new(Config {
        scan: drmtool::Options {
            pids: vec![c.pid(), child, d.pid(), e.pid()],
            ..Default::default()
        },
        per: Per::Client,
        client_names: false,
        min_interval: Duration::ZERO,
    });
    let text = x.scrape(drmtool::export::Format::Text, Instant::now());
    let s = samples(&text);
    let find = |metric: &str, client: &str, kind: Option<&str>| -> Vec<(String, f64)> {
        s.iter()
            .filter(|(n, l, _)| {
                n == metric
                    && l.get("client").map(String::as_str) == Some(client)
                    && kind.is_none_or(|k| l.get("kind").map(String::as_str) == Some(k))
            })
            .map(|(_, l, v)| (l.get("pid").cloned().unwrap_or_default(), *v))
            .collect()
    };
    let low = c.pid().min(e.pid()).min(child).to_string();
    assert_eq!(
        find("drm_clients", &idc, None),
        [(low.clone(), 1.0)],
        "{text}"
    );
    assert_eq!(
        find("drm_clients", &idd, None),
        [(d.pid().to_string(), 1.0)],
        "{text}"
    );
    assert_eq!(
        find("drm_clients", &ide, None),
        [(e.pid().to_string(), 1.0)],
        "{text}"
    );
    if prints_memory {
        let mem = |id: &str, kind: &str| find("drm_memory_bytes", id, Some(kind));
        for (id, pid, total, shared) in [
            (&idc, &low, size, size),
            (&idd, &d.pid().to_string(), size, size),
            (&ide, &e.pid().to_string(), 0, 0),
        ] {
            assert_eq!(
                mem(id, "total"),
                [(pid.clone(), total as f64)],
                "{id}: {text}"
            );
            assert_eq!(
                mem(id, "shared"),
                [(pid.clone(), shared as f64)],
                "{id}: {text}"
            );
            assert_eq!(mem(id, "active"), [(pid.clone(), 0.0)], "{id}: {text}");
        }
        assert!(
            s.iter()
                .filter(|(n, _, _)| n == "drm_memory_bytes")
                .all(|(_, l, _)| l.get("source").map(String::as_str) == Some("fdinfo")),
            "{text}"
        );
    } else {
        assert!(
            !s.iter().any(|(n, _, _)| n == "drm_memory_bytes"),
            "memory series without a source:\n{text}"
        );
    }
    drop((c, d, e));
}
