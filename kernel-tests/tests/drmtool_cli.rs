//! `drmtool info`, `caps` and `kms` in real guests, on vkms, vgem, virtio-gpu and bochs:
//! JSON that validates against tools/schema, `info` agreeing with `drm_info -j` on every
//! fact both report, the caps matrix deciding what each driver is known to have, a mode set
//! that restores what was there, and a screenshot whose pixels equal a pattern this test
//! commits itself.

use drm_gem::kms::{AtomicFlags, AtomicRequest, ConnectorStatus, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, NodeKind};
use kernel_tests::skip;
use serde_json::Value;
use std::process::ExitCode;

/// The drivers every guest has, by `DRM_IOCTL_VERSION` name.
const DRIVERS: [&str; 4] = ["vkms", "vgem", "virtio_gpu", "bochs-drm"];
const KMS_DRIVERS: [&str; 3] = ["vkms", "virtio_gpu", "bochs-drm"];

use drmtool::cli::run_captured as run;

#[path = "../../tools/tests/common/gpu_commands.rs"]
mod gpu_commands;

fn run_json(args: &[&str], schema: &str) -> Value {
    let (code, out) = run(args);
    assert_eq!(code, ExitCode::SUCCESS, "drmtool {args:?} failed:\n{out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"));
    let p = format!("{}/../tools/schema/{schema}", env!("CARGO_MANIFEST_DIR"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let val = jsonschema::validator_for(&s).expect("valid schema");
    let errors: Vec<String> = val
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{args:?} vs {schema}: {errors:#?}");
    v
}

/// The primary node of each driver present; every one of them must be in a guest.
/// vkms's primary node (from [`nodes`]: a guest without it fails there).
fn vkms_primary() -> Option<drm_gem::NodeInfo> {
    nodes()?
        .into_iter()
        .find(|n| n.driver.as_deref() == Some("vkms"))
}

fn nodes() -> Option<Vec<drm_gem::NodeInfo>> {
    kernel_tests::fds_shared();
    let all = drm_gem::enumerate().ok()?;
    let mut out = Vec::new();
    for d in DRIVERS {
        match all
            .iter()
            .find(|n| n.kind == NodeKind::Primary && n.driver.as_deref() == Some(d))
        {
            Some(n) => out.push(n.clone()),
            None if kernel_tests::in_guest() => panic!("the guest has no {d} primary node"),
            None => return None,
        }
    }
    Some(out)
}

/// Probes every connector of every KMS node once, so that status and modes are fresh for
/// both tools (neither probes by itself: drm_info reads the current state).
fn probe_all(nodes: &[drm_gem::NodeInfo]) {
    for n in nodes {
        let Ok(d) = Device::open(&n.path) else {
            continue;
        };
        if let Ok(r) = d.resources() {
            for c in r.connectors {
                d.probe_connector(c).expect("probe connector");
            }
        }
    }
}

fn status_code(s: &str) -> u64 {
    match s {
        "connected" => 1,
        "disconnected" => 2,
        _ => 3,
    }
}

#[test]
fn info_agrees_with_drm_info() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    if !std::path::Path::new("/usr/bin/drm_info").exists() {
        skip!("/usr/bin/drm_info is not installed (Debian package drm-info)");
    }
    probe_all(&nodes);
    let di = std::process::Command::new("/usr/bin/drm_info")
        .arg("-j")
        .output()
        .expect("run drm_info");
    // drm_info prints a line on stderr for nodes it cannot read (vgem) and exits 0.
    assert!(di.status.success(), "drm_info -j: {:?}", di.status);
    let di: Value = serde_json::from_slice(&di.stdout).expect("drm_info JSON");
    let ours = run_json(&["info", "--json"], "info.schema.json");
    let devs = ours["devices"].as_array().unwrap();
    let mut compared = 0;
    for n in &nodes {
        let path = n.path.display().to_string();
        let mine = devs
            .iter()
            .find(|d| d["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no {path} in info"));
        let theirs = &di[&path];
        if n.driver.as_deref() == Some("vgem") {
            // drm_info gives up on a node whose GETRESOURCES fails (vgem: no KMS) and
            // leaves it out; we report the driver and caps and say why there is no KMS.
            assert!(
                theirs.is_null(),
                "drm_info learned to read vgem: compare it"
            );
            assert!(mine["kms"].is_null());
            assert!(
                mine["kms_error"].as_str().unwrap().contains("EOPNOTSUPP"),
                "{mine}"
            );
            assert_eq!(mine["driver"]["name"], "vgem");
            continue;
        }
        assert!(theirs.is_object(), "drm_info has no {path}");
        compared += 1;
        let (d, t) = (&mine["driver"], &theirs["driver"]);
        assert_eq!(d["name"], t["name"], "{path}");
        assert_eq!(d["desc"], t["desc"], "{path}");
        for (i, k) in ["major", "minor", "patch"].iter().enumerate() {
            assert_eq!(d["version"][i], t["version"][k], "{path} version {k}");
        }
        // Caps: every cap drm_info knows, by value (null where GET_CAP fails).
        for (k, v) in t["caps"].as_object().unwrap() {
            assert_eq!(mine["caps"][format!("DRM_CAP_{k}")], *v, "{path} cap {k}");
        }
        for (k, v) in t["client_caps"].as_object().unwrap() {
            assert_eq!(
                mine["client_caps"][format!("DRM_CLIENT_CAP_{k}")],
                *v,
                "{path} client cap {k}"
            );
        }
        let kms = &mine["kms"];
        assert!(kms.is_object(), "{path}: {}", mine["kms_error"]);
        // Connectors: ids, types, status, modes by name and size.
        let tc = theirs["connectors"].as_array().unwrap();
        let mc = kms["connectors"].as_array().unwrap();
        assert_eq!(mc.len(), tc.len(), "{path} connector count");
        for (m, t) in mc.iter().zip(tc) {
            let m = &m["connector"];
            assert_eq!(m["id"], t["id"], "{path}");
            assert_eq!(m["kind"], t["type"], "{path} connector {}", t["id"]);
            assert_eq!(
                status_code(m["status"].as_str().unwrap()),
                t["status"].as_u64().unwrap(),
                "{path} connector {} status",
                t["id"]
            );
            let mm: Vec<(String, u64, u64)> = m["modes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap().to_string(),
                        x["h"][0].as_u64().unwrap(),
                        x["v"][0].as_u64().unwrap(),
                    )
                })
                .collect();
            let tm: Vec<(String, u64, u64)> = t["modes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap().to_string(),
                        x["hdisplay"].as_u64().unwrap(),
                        x["vdisplay"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(mm, tm, "{path} connector {} modes", t["id"]);
        }
        let ids = |a: &Value, key: &str| -> Vec<u64> {
            a.as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    if key.is_empty() {
                        x["id"].as_u64().unwrap()
                    } else {
                        x[key]["id"].as_u64().unwrap()
                    }
                })
                .collect()
        };
        assert_eq!(
            ids(&kms["crtcs"], "crtc"),
            ids(&theirs["crtcs"], ""),
            "{path} CRTC ids"
        );
        assert_eq!(
            ids(&kms["encoders"], ""),
            ids(&theirs["encoders"], ""),
            "{path} encoder ids"
        );
        assert_eq!(
            ids(&kms["planes"], "plane"),
            ids(&theirs["planes"], ""),
            "{path} plane ids"
        );
        for (m, t) in kms["planes"]
            .as_array()
            .unwrap()
            .iter()
            .zip(theirs["planes"].as_array().unwrap())
        {
            assert_eq!(
                m["plane"]["formats"], t["formats"],
                "{path} plane {} formats",
                t["id"]
            );
            assert_eq!(
                m["plane"]["possible_crtcs"], t["possible_crtcs"],
                "{path} plane {}",
                t["id"]
            );
        }
        let fb = &theirs["fb_size"];
        assert_eq!(
            kms["resources"]["min_size"],
            serde_json::json!([fb["min_width"], fb["min_height"]]),
            "{path}"
        );
        assert_eq!(
            kms["resources"]["max_size"],
            serde_json::json!([fb["max_width"], fb["max_height"]]),
            "{path}"
        );
    }
    assert_eq!(compared, 3, "vkms, virtio_gpu and bochs compared");
}

#[test]
fn caps_matrix_decides_what_each_driver_has() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in &nodes {
        let d = n.driver.as_deref().unwrap();
        let v = run_json(
            &["caps", &n.path.display().to_string(), "--json"],
            "caps.schema.json",
        );
        let devs = v["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 1, "{d}");
        let p = &devs[0]["probes"];
        let sup = |k: &str| {
            p[k]["supported"]
                .as_bool()
                .unwrap_or_else(|| panic!("{d}: no probe {k}"))
        };
        assert!(sup("dumb"), "{d}: {}", p["dumb"]);
        // PRIME export works exactly where DRM_CAP_PRIME says so; elsewhere the core answers
        // ENOSYS (seen: vkms on 5.10, bochs on 5.10 and 6.1). On 6.12 every driver here has it.
        let dev = Device::open(&n.path).unwrap();
        let prime = dev
            .driver_cap(drm_gem::DriverCap::Prime)
            .unwrap()
            .unwrap_or(0);
        let can_export = prime & 2 != 0;
        assert_eq!(
            sup("prime_export"),
            can_export,
            "{d}: {}",
            p["prime_export"]
        );
        if can_export {
            assert_eq!(sup("prime_import"), prime & 1 != 0, "{d}: {p}");
        } else {
            assert_eq!(p["prime_export"]["class"], "ENOSYS", "{d}");
            assert_eq!(p["dmabuf_set_name"]["class"], "skipped", "{d}");
        }
        // Linux 6.6+ (6b85aa68d9d5, "drm: Enable PRIME import/export for all drivers"):
        // every GEM driver exports.
        if kernel_tests::kernel_version() >= (6, 6) {
            assert!(can_export, "{d} on 6.6+ exports");
        }
        assert!(sup("gem_flink") && sup("gem_open"), "{d}: {p}");
        // dma-buf sync_file ioctls: Linux 6.0+ (20e10881a043, "dma-buf: Add an API for
        // exporting sync files (v14)"); SET_NAME in 5.3. A kernel without them says ENOTTY.
        let new = kernel_tests::kernel_version() >= (6, 0);
        if can_export {
            let got = sup("dmabuf_export_sync_file");
            assert_eq!(got, new, "{d}: {}", p["dmabuf_export_sync_file"]);
            if !new {
                assert_eq!(p["dmabuf_export_sync_file"]["class"], "ENOTTY", "{d}");
            }
            assert!(sup("dmabuf_set_name"), "{d}");
        }
        let kms = d != "vgem";
        assert_eq!(sup("kms_resources"), kms, "{d}: {}", p["kms_resources"]);
        if !kms {
            assert_eq!(p["kms_resources"]["class"], "EOPNOTSUPP", "{d}");
        }
        assert_eq!(sup("atomic"), kms, "{d}: {}", p["atomic"]);
        assert_eq!(sup("writeback"), d == "vkms", "{d}: {}", p["writeback"]);
        // The probes agree with the caps the driver advertises: among these drivers only
        // virtio-gpu has sync objects (on 6.12; not on 5.10), elsewhere the core says
        // EOPNOTSUPP.
        let cap = |c| dev.driver_cap(c).unwrap().unwrap_or(0) != 0;
        let has_syncobj = cap(drm_gem::DriverCap::Syncobj);
        assert_eq!(sup("syncobj"), has_syncobj, "{d}: {}", p["syncobj"]);
        if !has_syncobj {
            assert_eq!(p["syncobj"]["class"], "EOPNOTSUPP", "{d}");
            assert_eq!(p["syncobj_timeline"]["class"], "skipped", "{d}");
        } else {
            let tl = cap(drm_gem::DriverCap::SyncobjTimeline);
            assert_eq!(
                sup("syncobj_timeline"),
                tl,
                "{d}: {}",
                p["syncobj_timeline"]
            );
        }
        if d != "virtio_gpu" {
            assert!(!has_syncobj, "{d} learned sync objects");
        } else if kernel_tests::kernel_version() >= (6, 4) {
            // Linux 6.4+ ("drm/virtio: Support sync objects").
            assert!(has_syncobj, "virtio-gpu on 6.4+ has sync objects");
        }
        assert!(sup("dumb"), "{d}");
        // CLOSEFB: Linux 6.8+ (d208d875667e, "drm: introduce CLOSEFB IOCTL"); an older
        // core answers EINVAL for an ioctl it does not know.
        if kms {
            let closefb = kernel_tests::kernel_version() >= (6, 8);
            assert_eq!(sup("closefb"), closefb, "{d}: {}", p["closefb"]);
            if !closefb {
                assert_eq!(p["closefb"]["class"], "EINVAL", "{d}");
            }
        }
        // virtio-gpu: every VIRTGPU_PARAM_* is answered; without virgl there is no 3D, and
        // CAPSET_QUERY_FIX is 1 on every kernel that knows it (all of the matrix).
        let vparams = p
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("virtio_gpu_param_"))
            .count();
        if d == "virtio_gpu" {
            assert_eq!(vparams, 8, "{p}");
            assert_eq!(p["virtio_gpu_param_3d_features"]["class"], "off", "{d}");
            assert!(sup("virtio_gpu_param_capset_query_fix"), "{d}");
        } else {
            assert_eq!(vparams, 0, "{d}");
        }
        // Keys come sorted, so the text diffs cleanly across kernels.
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
    // The human table runs too.
    let (code, out) = run(&["caps"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("FAMILY") && out.contains("vkms"), "{out}");
}

#[test]
fn kms_list_on_each_driver() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in &nodes {
        let d = n.driver.as_deref().unwrap();
        let p = n.path.display().to_string();
        if d == "vgem" {
            let (code, _) = run(&["kms", "list", &p]);
            assert_eq!(code, ExitCode::FAILURE, "vgem has no KMS");
            continue;
        }
        let v = run_json(&["kms", "list", &p, "--json"], "kms-list.schema.json");
        assert_eq!(v["devices"].as_array().unwrap().len(), 1);
        assert!(
            !v["devices"][0]["kms"]["crtcs"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{d}"
        );
        let (code, text) = run(&["kms", "list", &p]);
        assert_eq!(code, ExitCode::SUCCESS);
        assert!(
            text.contains("Connectors:") && text.contains("Planes:"),
            "{text}"
        );
        let (code, text) = run(&["info", &p]);
        assert_eq!(code, ExitCode::SUCCESS);
        assert!(text.contains("DUMB_BUFFER"), "{text}");
    }
    let (code, _) = run(&["kms", "list", "no-such-driver"]);
    assert_eq!(code, ExitCode::from(3));
    // --probe: vkms's virtual connector lists its modes, and no line says to probe.
    let (code, text) = run(&["kms", "list", "vkms", "--probe"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(text.contains("    mode "), "{text}");
    assert!(!text.contains("no modes until"), "{text}");
}

/// The first non-writeback connector of a device, with its CRTC index.
fn connector(dev: &Device) -> (String, usize) {
    let snap = Snapshot::take(dev).unwrap();
    let c = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind != 18)
        .expect("a connector");
    let probed = dev.probe_connector(c.connector.id).unwrap();
    assert_ne!(probed.status, ConnectorStatus::Disconnected);
    let mask = probed
        .encoders
        .iter()
        .filter_map(|&e| dev.encoder(e).ok())
        .fold(0, |m, e| m | e.possible_crtcs);
    (
        c.connector.name(),
        (0..32).find(|i| mask & (1 << i) != 0).unwrap(),
    )
}

/// Opens `n` as an atomic client (seeing writeback connectors when `writeback`), becomes
/// master and switches every CRTC off; returns the device with the first connector's name
/// and the index of a CRTC it can drive (see [`connector`]).
fn all_off_as_master(n: &drm_gem::NodeInfo, writeback: bool) -> (Device, String, usize) {
    let dev = Device::open(&n.path).unwrap();
    dev.set_client_cap(ClientCap::UniversalPlanes, 1).unwrap();
    dev.set_client_cap(ClientCap::Atomic, 1).unwrap();
    if writeback {
        dev.set_client_cap(ClientCap::WritebackConnectors, 1)
            .unwrap();
    }
    dev.set_master().unwrap();
    kernel_tests::kms_all_off(&dev).unwrap();
    let (name, idx) = connector(&dev);
    (dev, name, idx)
}

#[test]
fn modeset_shows_and_restores() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in nodes
        .iter()
        .filter(|n| KMS_DRIVERS.contains(&n.driver.as_deref().unwrap()))
    {
        let p = n.path.display().to_string();
        // This fd stays open (without master) so that drmtool's close is not the device's
        // last close, after which fbdev emulation re-lights its console (virtio-gpu on 5.10).
        let (dev, name, idx) = all_off_as_master(n, false);
        dev.drop_master().unwrap();
        let fds = kernel_tests::open_fds();
        let (code, out) = run(&[
            "kms",
            "modeset",
            &name,
            "--device",
            &p,
            "--seconds",
            "0",
            "--json",
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{p}: {out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["connector"], name.as_str());
        assert_eq!(v["path"], "atomic");
        assert_eq!(kernel_tests::open_fds(), fds, "no fd leaked");
        // Everything was off before, so everything is off again.
        let snap = Snapshot::take(&dev).unwrap();
        assert!(
            snap.crtcs[idx].crtc.mode.is_none(),
            "{p}: CRTC left on: {:?}",
            snap.crtcs[idx].crtc
        );
        let (code, _) = run(&[
            "kms",
            "modeset",
            "No-Such-1",
            "--device",
            &p,
            "--seconds",
            "0",
        ]);
        assert_eq!(code, ExitCode::from(3));
        let (code, _) = run(&[
            "kms",
            "modeset",
            &name,
            "99999x1",
            "--device",
            &p,
            "--seconds",
            "0",
        ]);
        assert_eq!(code, ExitCode::from(3));
    }
}

/// This test's own pattern: distinct in every channel so that a swapped channel or a
/// shifted row shows.
fn pixel(x: u32, y: u32) -> [u8; 3] {
    [
        (x % 251) as u8,
        (y % 241) as u8,
        ((x / 3 + y * 7) % 256) as u8,
    ]
}

#[test]
fn screenshot_equals_the_committed_pattern() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in nodes
        .iter()
        .filter(|n| KMS_DRIVERS.contains(&n.driver.as_deref().unwrap()))
    {
        let d = n.driver.as_deref().unwrap();
        // Writeback on the lit vkms CRTC: beside the virtual connector where the kernel
        // takes the clone, else swapped in for it for a frame; everything is put back.
        let methods: &[&str] = if d == "vkms" {
            &["getfb", "auto", "writeback"]
        } else {
            &["getfb", "auto"]
        };
        for method in methods {
            shoot(n, method, false);
        }
        // Writeback where there is none: a clear failure.
        if d != "vkms" {
            let (code, _) = run(&[
                "kms",
                "screenshot",
                "1",
                "-o",
                "/tmp/x.png",
                "--device",
                &n.path.display().to_string(),
                "--method",
                "writeback",
            ]);
            assert_ne!(code, ExitCode::SUCCESS);
        }
    }
}

/// What writeback sees and GETFB2 cannot: vkms's cursor plane over the primary one. The
/// writeback PNG shows the cursor's square over the pattern, the GETFB2 PNG the pattern
/// alone.
#[test]
fn writeback_captures_the_cursor_getfb_does_not() {
    let Some(n) = vkms_primary() else {
        skip!("no DRM nodes (not a guest)")
    };
    let n = &n;
    shoot(n, "writeback", true);
    shoot(n, "getfb", true);
}

/// A CRTC that is off shows nothing: writeback (and every method) fails with exit status 1
/// and a hint, and leaks nothing.
#[test]
fn screenshot_of_a_crtc_that_is_off_fails() {
    let Some(n) = vkms_primary() else {
        skip!("no DRM nodes (not a guest)")
    };
    let n = &n;
    let p = n.path.display().to_string();
    let (dev, _, idx) = all_off_as_master(n, false);
    let id = Snapshot::take(&dev).unwrap().crtcs[idx]
        .crtc
        .id
        .get()
        .to_string();
    dev.drop_master().unwrap();
    let fds = kernel_tests::open_fds();
    let fbs = framebuffers(n);
    for method in ["writeback", "getfb", "auto"] {
        let (code, out) = run(&[
            "kms",
            "screenshot",
            &id,
            "-o",
            "/tmp/off.png",
            "--device",
            &p,
            "--method",
            method,
        ]);
        assert_eq!(code, ExitCode::FAILURE, "{method}: {out}");
        assert!(out.is_empty(), "{method}: {out}");
        assert!(!std::path::Path::new("/tmp/off.png").exists());
    }
    // The message (stderr in the CLI) says why and what to do.
    let other = Device::open(&n.path).unwrap();
    let err = drmtool::kms::screenshot(&other, &id, drmtool::kms::Method::Writeback).unwrap_err();
    drop(other);
    assert!(matches!(err, drmtool::kms::KmsError::Cannot(_)), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("is off") && err.contains("hint: `drmtool kms modeset"),
        "{err}"
    );
    assert_eq!(kernel_tests::open_fds(), fds, "no fd leaked");
    assert_eq!(framebuffers(n), fbs, "no framebuffer left behind");
}

/// The ids of every framebuffer of the device (debugfs `framebuffer`: all of them, not
/// only this process's), waiting up to 5 s for `want` when given: a writeback job drops
/// its framebuffer from a kernel work item after the fence signals.
fn framebuffers_settled(n: &drm_gem::NodeInfo, want: Option<&[u32]>) -> Vec<u32> {
    let path = format!("/sys/kernel/debug/dri/{}/framebuffer", n.dev.1);
    let read = || -> Vec<u32> {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut ids: Vec<u32> = text
            .lines()
            .filter_map(|l| l.strip_prefix("framebuffer["))
            .filter_map(|l| l.split(']').next()?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    };
    let mut got = read();
    if let Some(want) = want {
        for _ in 0..250 {
            if got == want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            got = read();
        }
    }
    got
}

fn framebuffers(n: &drm_gem::NodeInfo) -> Vec<u32> {
    framebuffers_settled(n, None)
}

/// The cursor square: x, y, side, RGB (opaque ARGB8888, so the blend is exact).
const CURSOR: (u32, u32, u32, u32) = (100, 50, 64, 0x0012_3456);

/// Whether the core lets vkms's writeback connector drive `crtc` beside the output that
/// lights it (a clone), asked with a `TEST_ONLY` commit of `fb` as the capture buffer: the
/// same question drmtool asks before it falls back to the swap. EINVAL is the refusal;
/// any other answer fails the test.
///
/// The refusal is `drm_atomic_check_valid_clones` (41b4b11da0215, "drm: Add valid clones
/// check", mainline 6.14, backported to stable 5.10.y, 5.15.y, 6.1.y and 6.12.y: the
/// matrix's 5.10.262, 6.1.192 and 6.12.117 have it, 5.15.0 does not): vkms's encoders
/// each list only themselves in `possible_clones`. A vkms that marks its output encoder
/// cloneable with the writeback one passes again, which is why this is probed.
fn writeback_clone_passes(
    dev: &Device,
    snap: &Snapshot,
    crtc: drm_gem::kms::CrtcId,
    fb: &drm_gem::kms::Framebuffer<&Device>,
) -> bool {
    let wb = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == 18)
        .expect("vkms has a writeback connector");
    let mut req = AtomicRequest::new();
    req.set(wb.connector.id, wb.property_id("CRTC_ID").unwrap(), crtc)
        .set(
            wb.connector.id,
            wb.property_id("WRITEBACK_FB_ID").unwrap(),
            fb.id(),
        );
    match dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET | AtomicFlags::TEST_ONLY, 0) {
        Ok(_) => true,
        Err(e) if e.errno() == Some(rustix::io::Errno::INVAL) => false,
        Err(e) => panic!("TEST_ONLY writeback clone: {e:?}"),
    }
}

/// Lights the first connector's CRTC with this test's pattern on the primary plane (and,
/// with `cursor`, the cursor plane's square over it), captures it with `drmtool kms
/// screenshot --method METHOD` and compares every pixel: GETFB2 must show the primary
/// plane alone, writeback everything the CRTC composes. Writeback must put the routing
/// back exactly as it was and leave nothing behind.
fn shoot(n: &drm_gem::NodeInfo, method: &str, cursor: bool) {
    let p = n.path.display().to_string();
    let vkms = n.driver.as_deref() == Some("vkms");
    let (dev, _, idx) = all_off_as_master(n, vkms);
    let snap = Snapshot::take(&dev).unwrap();
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind != 18)
        .unwrap();
    let probed = dev.probe_connector(conn.connector.id).unwrap();
    let mode = *probed
        .modes
        .iter()
        .find(|m| m.is_preferred())
        .unwrap_or(&probed.modes[0]);
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let mut buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        },
    )
    .unwrap();
    let pitch = buf.pitch() as usize;
    let mut px = vec![0u8; pitch * h as usize];
    for y in 0..h {
        for x in 0..w {
            let [r, g, b] = pixel(x, y);
            let v = u32::from(r) << 16 | u32::from(g) << 8 | u32::from(b);
            px[y as usize * pitch + x as usize * 4..][..4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let fb = dev
        .add_framebuffer(&FbSpec::single(
            w,
            h,
            drm_gem::DrmFourcc::Xrgb8888,
            buf.handle(),
            buf.pitch(),
        ))
        .unwrap();
    let crtc = &snap.crtcs[idx];
    let plane = snap
        .planes
        .iter()
        .find(|p| {
            p.kind == Some(drm_gem::kms::PlaneType::Primary)
                && p.plane.possible_crtcs & (1 << idx) != 0
        })
        .unwrap();
    let blob = dev.create_blob(&mode.to_blob_bytes()).unwrap();
    let mut req = AtomicRequest::new();
    req.set(crtc.crtc.id, crtc.property_id("ACTIVE").unwrap(), 1)
        .set(
            crtc.crtc.id,
            crtc.property_id("MODE_ID").unwrap(),
            blob.id(),
        )
        .set(
            conn.connector.id,
            conn.property_id("CRTC_ID").unwrap(),
            crtc.crtc.id,
        );
    let place = |req: &mut AtomicRequest<'_>,
                 pl: &drm_gem::kms::PlaneState,
                 fb: u32,
                 (x, y, pw, ph): (u32, u32, u32, u32)| {
        let pp = |name| pl.property_id(name).unwrap();
        let id = pl.plane.id;
        req.set(id, pp("FB_ID"), u64::from(fb))
            .set(id, pp("CRTC_ID"), crtc.crtc.id)
            .set(id, pp("SRC_X"), 0)
            .set(id, pp("SRC_Y"), 0)
            .set(id, pp("SRC_W"), u64::from(pw) << 16)
            .set(id, pp("SRC_H"), u64::from(ph) << 16)
            .set(id, pp("CRTC_X"), u64::from(x))
            .set(id, pp("CRTC_Y"), u64::from(y))
            .set(id, pp("CRTC_W"), u64::from(pw))
            .set(id, pp("CRTC_H"), u64::from(ph));
    };
    place(&mut req, plane, fb.id().get(), (0, 0, w, h));
    // The cursor: an opaque square on vkms's cursor plane, kept until the end.
    let mut keep = None;
    if cursor {
        let cp = snap
            .planes
            .iter()
            .find(|p| {
                p.kind == Some(drm_gem::kms::PlaneType::Cursor)
                    && p.plane.possible_crtcs & (1 << idx) != 0
            })
            .expect("vkms has a cursor plane on every kernel of the matrix");
        let (x, y, side, rgb) = CURSOR;
        let mut cbuf = DumbBuffer::create(
            &dev,
            DumbSpec {
                width: side,
                height: side,
                bpp: 32,
            },
        )
        .unwrap();
        let argb = (0xff00_0000u32 | rgb).to_le_bytes();
        let fill: Vec<u8> = (0..cbuf.size() / 4).flat_map(|_| argb).collect();
        cbuf.map().unwrap().write_at(0, &fill).unwrap();
        let cfb = dev
            .add_framebuffer(&FbSpec::single(
                side,
                side,
                drm_gem::DrmFourcc::Argb8888,
                cbuf.handle(),
                cbuf.pitch(),
            ))
            .unwrap();
        place(&mut req, cp, cfb.id().get(), (x, y, side, side));
        keep = Some((cfb, cbuf));
    }
    dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
        .unwrap();
    // The pattern goes in once the buffer is scanned out: bochs (VRAM helpers) moves it to
    // VRAM when the commit pins it, and on the Debian-config kernels what was written
    // before the move reads back as zeros afterwards.
    buf.map().unwrap().write_at(0, &px).unwrap();
    // Probed: whether this kernel lets the writeback connector join the lit CRTC beside its
    // output (a clone); drmtool must take exactly that path (auto and writeback alike).
    let clones = vkms && writeback_clone_passes(&dev, &snap, crtc.crtc.id, &fb);
    if vkms {
        eprintln!("{p}: the writeback clone passes TEST_ONLY: {clones}");
    }
    // drmtool becomes master itself for writeback; GETFB2 needs only root.
    dev.drop_master().unwrap();
    let fds = kernel_tests::open_fds();
    let fbs = if vkms { framebuffers(n) } else { Vec::new() };
    let out = format!("/tmp/drmtool-shot-{}-{method}.png", n.dev.1);
    let id = crtc.crtc.id.get().to_string();
    let shot = [
        "kms",
        "screenshot",
        &id,
        "-o",
        &out,
        "--device",
        &p,
        "--method",
        method,
    ];
    let v = run_json(
        &[&shot[..], &["--json"]].concat(),
        "kms-screenshot.schema.json",
    );
    // auto takes writeback only where it disturbs nothing (the clone), else GETFB2.
    let want = match method {
        "auto" if clones => "writeback",
        "auto" => "getfb",
        m => m,
    };
    assert_eq!(v["method"], want, "{p} (clone passes: {clones})");
    if want == "writeback" {
        // Clone exactly where the probe's TEST_ONLY clone passed, else the swap.
        let way = if clones { "clone" } else { "swap" };
        assert_eq!(v["writeback"], way, "{p}: {v}");
        assert_eq!(
            framebuffers_settled(n, Some(&fbs)),
            fbs,
            "{p} {method}: framebuffers left behind"
        );
        // The text says plainly which outputs went dark for a frame (a second capture);
        // after a clone none did, and it says nothing of the kind.
        let (code, text) = run(&shot);
        assert_eq!(code, ExitCode::SUCCESS, "{p}: {text}");
        let name = conn.connector.name();
        let detached = format!("{name} detached from CRTC {id} for one frame");
        if clones {
            assert!(
                text.contains(", writeback, clone)") && !text.contains("detached"),
                "{p}: {text}"
            );
        } else {
            assert!(
                text.contains(", writeback, swap);") && text.contains(&detached),
                "{p}: {text}"
            );
        }
    } else {
        assert!(v.get("writeback").is_none(), "{p}: {v}");
    }
    let img = {
        let f = std::fs::File::open(&out).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(f))
            .read_info()
            .unwrap();
        let mut img = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut img).unwrap();
        assert_eq!((info.width, info.height), (w, h), "{p} {method}");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        img
    };
    // Writeback shows every plane; GETFB2 the primary plane only.
    let sees_cursor = cursor && want == "writeback";
    let (cx, cy, side, rgb) = CURSOR;
    let expect = |x: u32, y: u32| -> [u8; 3] {
        if sees_cursor && (cx..cx + side).contains(&x) && (cy..cy + side).contains(&y) {
            [(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8]
        } else {
            pixel(x, y)
        }
    };
    let mut bad = 0;
    let mut first = None;
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) as usize * 3;
            if img[i..i + 3] != expect(x, y) {
                bad += 1;
                first.get_or_insert((x, y, img[i..i + 3].to_vec(), expect(x, y)));
            }
        }
    }
    assert_eq!(
        bad, 0,
        "{p} {method} cursor {cursor}: {bad} pixels differ, first {first:?}"
    );
    assert_eq!(
        kernel_tests::open_fds(),
        fds,
        "{p} {method}: fds leaked: {:?}",
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .collect::<Vec<_>>()
    );
    if vkms {
        // The capture's framebuffer is gone once the writeback job is cleaned up; nothing
        // else was added.
        assert_eq!(
            framebuffers_settled(n, Some(&fbs)),
            fbs,
            "{p} {method}: framebuffers left behind"
        );
        // The routing is back exactly: the connector on the CRTC, the same mode, the same
        // framebuffer on the primary plane, the writeback connector detached.
        let after = Snapshot::take(&dev).unwrap();
        let c = &after.crtcs[idx];
        assert_eq!(c.property("ACTIVE").expect("ACTIVE").raw, 1, "{p} {method}");
        let mode_blob =
            drm_gem::kms::BlobId::new(c.property("MODE_ID").expect("MODE_ID").raw as u32)
                .expect("the CRTC has a mode");
        assert_eq!(
            dev.blob(mode_blob).unwrap(),
            mode.to_blob_bytes(),
            "{p} {method}: the mode changed"
        );
        for k in &after.connectors {
            let on = k.property("CRTC_ID").expect("CRTC_ID").raw;
            if k.connector.id == conn.connector.id {
                assert_eq!(on, u64::from(crtc.crtc.id.get()), "{p}: connector not back");
            } else if k.connector.kind == 18 {
                assert_eq!(on, 0, "{p}: writeback connector left attached");
            }
        }
        assert!(
            after.connectors.iter().any(|k| k.connector.kind == 18),
            "{p}: the writeback connector is listed"
        );
        let pl = after
            .planes
            .iter()
            .find(|q| q.plane.id == plane.plane.id)
            .unwrap();
        assert_eq!(
            pl.property("FB_ID").expect("FB_ID").raw,
            u64::from(fb.id().get()),
            "{p} {method}: the primary plane's framebuffer changed"
        );
        assert_eq!(
            pl.property("CRTC_ID").expect("CRTC_ID").raw,
            u64::from(crtc.crtc.id.get())
        );
        if let Some((cfb, _)) = &keep {
            let cp = after
                .planes
                .iter()
                .find(|q| q.kind == Some(drm_gem::kms::PlaneType::Cursor))
                .unwrap();
            assert_eq!(
                cp.property("FB_ID").expect("FB_ID").raw,
                u64::from(cfb.id().get())
            );
        }
    }
    dev.set_master().unwrap();
    kernel_tests::kms_all_off(&dev).unwrap();
    drop(keep);
    let _ = std::fs::remove_file(&out);
}

/// The one GPU grammar against real devices (the host's `tools/tests/specs.rs` runs the
/// same commands without devices): each form that names vkms (its index, driver, card node
/// path and name, device number) gives `info`, `caps` and `kms list` vkms's card node and
/// `buffers --device`, `run --env-only` and `pick` vkms; a spec that names nothing here
/// exits 3 in every command, `kms modeset` and `screenshot` included, before touching
/// anything.
#[test]
fn every_command_takes_the_same_gpu_specs() {
    let Some(vkms) = vkms_primary() else {
        skip!("no DRM nodes (not a guest)")
    };
    let gpus = drmtool::gpu::gpus().expect("the guest has DRM devices");
    let g = gpus
        .iter()
        .find(|g| g.driver.as_deref() == Some("vkms"))
        .expect("vkms is one of the GPUs");
    let card = vkms.path.display().to_string();
    let specs = [
        g.index.to_string(),
        "vkms".into(),
        card.clone(),
        card.trim_start_matches("/dev/dri/").to_string(),
        format!("{}:{}", vkms.dev.0, vkms.dev.1),
    ];
    for s in &specs {
        for (cmd, schema) in [
            (&["info", s, "--json"][..], "info.schema.json"),
            (&["caps", s, "--json"][..], "caps.schema.json"),
            (&["kms", "list", s, "--json"][..], "kms-list.schema.json"),
        ] {
            let v = run_json(cmd, schema);
            let paths: Vec<&str> = v["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["path"].as_str().unwrap())
                .collect();
            assert_eq!(paths, [card.as_str()], "{cmd:?}");
        }
        let v = run_json(&["buffers", "--device", s, "--json"], "buffers.schema.json");
        for d in v["devices"].as_array().unwrap() {
            assert_eq!(d["driver"], "vkms", "buffers --device {s}: {d}");
        }
        let (code, out) = run(&["run", "--env-only", "--gpu", s]);
        assert_eq!(code, ExitCode::SUCCESS, "run --gpu {s}: {out}");
        let v = run_json(
            &["pick", "--gpu", s, "--format", "json"],
            "pick.schema.json",
        );
        let idx: Vec<u64> = v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["index"].as_u64().unwrap())
            .collect();
        assert_eq!(idx, [g.index as u64], "pick --gpu {s}");
    }
    let nothing = [
        "nosuchdriver",
        "226:250",
        "99",
        "0000:7f:1f.7",
        "/dev/dri/card99",
        "card99",
        "pci-0000:7f:00.0-card",
    ];
    for s in nothing {
        for (name, argv) in gpu_commands::GPU_COMMANDS {
            let cmd = gpu_commands::with_spec(argv, s);
            let (code, out) = run(&cmd);
            assert_eq!(code, ExitCode::from(3), "{name} {s}: {out}");
            assert!(out.is_empty(), "{name} {s} printed {out}");
        }
    }
    assert!(!std::path::Path::new("/nonexistent/x.png").exists());
}
