//! `drmtool export`'s engine counters against the real Prometheus server: on
//! stock-6.12-fdinfo, whose test-only vkms patch prints `drm-engine-composer` (the
//! composer's time per open file), Prometheus's `drm_engine_busy_seconds_total` and its
//! `rate()` follow the kernel's counter exactly, and a client's time stays in its cgroup's
//! counter after it exits. The other counters (`drm-cycles-*` and the rest) have no driver
//! in the guests; tools/tests/export.rs covers them on fixture trees.

use kernel_tests::sample::Client;
use kernel_tests::{in_guest, skip};
use std::path::Path;
use std::time::{Duration, Instant};

mod export_common;
use export_common::*;

mod crc_common;
use crc_common::CrcCapture;

/// The sample client's entry point (kernel_tests::sample); run plainly it does nothing.
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

/// `drm-engine-composer` of `pid`'s fd `fd`, in ns (the test-only vkms patch's counter).
fn composer_ns(pid: u32, fd: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .unwrap_or_else(|e| panic!("fdinfo of {pid}:{fd}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix("drm-engine-composer:"))
        .and_then(|v| v.trim().strip_suffix(" ns"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no drm-engine-composer in {pid}:{fd}'s fdinfo:\n{text}"))
}

/// The engine path end to end, with the kernel's own counter as the ground truth: vkms with
/// the test-only fdinfo patch (stock-6.12-fdinfo) charges the composer's time to the file
/// whose framebuffer it composes. In one cgroup: L lights vkms's output with its own
/// framebuffer, N is a second vkms client that composes nothing (its counter stays 0 and
/// keeps the cgroup's series alive). With CRC capture on, Prometheus's `rate()` of
/// `drm_engine_busy_seconds_total` turns positive; with it off, L's counter stops and the
/// series equals it exactly. L exits: its time stays in the cgroup's counter (the exporter
/// keeps what departed clients counted). M lights the output next: the series equals L's
/// final count plus M's. Everyone exits: the series disappears.
#[test]
fn prometheus_rates_the_kernels_engine_counter() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices or cgroup v2 here");
    }
    kernel_tests::require_feature!("vkms_fdinfo");
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    let (target, _exporter) = serve_per_cgroup();
    let g = Cgroup::new("drmtool-export-engine");
    let cg = g.path();
    // L first: the first opener of a primary node is its DRM master, which lighting needs.
    let l = spawn(&["--device", "vkms", "--light"]);
    g.add(l.pid());
    let n = spawn(&["--device", "vkms"]);
    g.add(n.pid());
    eprintln!("L lit {:?}", l.ready.lit);
    assert!(l.ready.lit.is_some(), "L reports what it lit");
    assert_eq!(
        composer_ns(l.pid(), l.ready.drm_fd),
        0,
        "composed before any CRC capture"
    );
    assert_eq!(composer_ns(n.pid(), n.ready.drm_fd), 0);

    let prom = Prometheus::start(target);
    let series = format!(r#"drm_engine_busy_seconds_total{{cgroup="{cg}", engine="composer"}}"#);
    let sum = format!("sum by (cgroup) ({series})");
    prom.expect(&sum, &["cgroup"], &[(&cg, 0.0)]);

    // Composes while the capture is on; Prometheus sees the counter move. The rate's
    // window is the one shown to be 0 before each phase, so a positive rate is this
    // phase's.
    let rate = format!("sum by (cgroup) (rate({series}[3s]))");
    let phase = |who: &Client, name: &str| -> u64 {
        assert_eq!(
            composer_ns(who.pid(), who.ready.drm_fd),
            0,
            "{name} composed before its CRC capture"
        );
        let crc = CrcCapture::start();
        let t0 = Instant::now();
        loop {
            let r = prom.query(&rate, &["cgroup"]).unwrap_or_default();
            if r.get(&cg).is_some_and(|&v| v > 0.0)
                && crc.entries() > 0
                && composer_ns(who.pid(), who.ready.drm_fd) > 0
            {
                eprintln!("{name}: rate {:?} after {:?}", r, t0.elapsed());
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "{rate}: never above 0 while {name}'s framebuffer was composed: {r:?}\nlog: {}",
                prom.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let entries = crc.stop();
        // The capture is off: the counter stops, once the frame in flight (a composer work
        // queued before the stop) is done: it must hold still for a second within 10 s.
        let t0 = Instant::now();
        let mut frozen = composer_ns(who.pid(), who.ready.drm_fd);
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = composer_ns(who.pid(), who.ready.drm_fd);
            if now == frozen {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{name}'s counter still moves 10 s after the CRC capture stopped ({frozen} -> {now} ns)"
            );
            frozen = now;
        }
        eprintln!("{name}: {entries} CRC entries, drm-engine-composer {frozen} ns");
        assert!(
            entries > 0 && frozen > 0,
            "{name}: {entries} entries, {frozen} ns"
        );
        frozen
    };
    let l_ns = phase(&l, "L");
    assert_eq!(
        composer_ns(n.pid(), n.ready.drm_fd),
        0,
        "N composed nothing"
    );
    prom.expect(&sum, &["cgroup"], &[(&cg, l_ns as f64 / 1e9)]);
    // Stopped: the rate over a window after the stop falls to 0.
    prom.expect(&rate, &["cgroup"], &[(&cg, 0.0)]);

    // L exits: its time stays in the cgroup's counter while N keeps the series alive.
    // With L's file closed the device has no master; M's open makes it the master.
    l.exit();
    let m = spawn(&["--device", "vkms", "--light"]);
    g.add(m.pid());
    prom.expect(&sum, &["cgroup"], &[(&cg, l_ns as f64 / 1e9)]);
    let m_ns = phase(&m, "M");
    prom.expect(&sum, &["cgroup"], &[(&cg, (l_ns + m_ns) as f64 / 1e9)]);
    // The raw samples never went backwards.
    let (code, body) = get(
        prom.addr,
        &format!("/api/v1/query?query={}", encode(&format!("{series}[10m]"))),
    )
    .expect("range query");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let values: Vec<f64> = v["data"]["result"][0]["values"]
        .as_array()
        .expect("a matrix result")
        .iter()
        .map(|p| p[1].as_str().unwrap().parse().unwrap())
        .collect();
    eprintln!("{} samples, last {:?}", values.len(), values.last());
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "went backwards: {values:?}"
    );
    assert_eq!(values.last(), Some(&((l_ns + m_ns) as f64 / 1e9)));

    m.exit();
    n.exit();
    prom.expect(&sum, &["cgroup"], &[]);
    prom.expect("drmtool_export_scan_errors_total", &[], &[("", 0.0)]);
}
