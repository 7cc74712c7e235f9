//! `drmtool info`, `caps` and `kms list` in real guests, on vkms, vgem, virtio-gpu and
//! bochs: JSON that validates against tools/schema, `info` agreeing with `drm_info -j` on
//! every fact both report, the caps matrix deciding what each driver is known to have, and
//! one GPU grammar in every command, `topo` on the guest's PCI tree. Mode sets and
//! screenshots: `drmtool_kms.rs`.

use drm_gem::Device;
use drmtool::cli::run_captured as run;
use kernel_tests::skip;
use serde_json::Value;
use std::process::ExitCode;

mod drmtool_cli_common;
use drmtool_cli_common::*;

#[path = "../../tools/tests/common/gpu_commands.rs"]
mod gpu_commands;

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

/// `drm_info -j PATH`: its object for that node (null where it prints none).
fn drm_info_of(path: &str) -> Value {
    let out = std::process::Command::new("/usr/bin/drm_info")
        .args(["-j", path])
        .output()
        .expect("run drm_info");
    assert!(out.status.success(), "drm_info -j {path}: {:?}", out.status);
    let v: Value = serde_json::from_slice(&out.stdout).expect("drm_info JSON");
    v[path].clone()
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
        let by_path;
        let mut theirs = &di[&path];
        if theirs.is_null() && n.driver.as_deref() != Some("vgem") {
            // drm_info enumerates through libdrm's drmGetDevices2, which leaves out a device
            // whose bus libdrm cannot name (7.3's vkms is a faux device); asked by path it
            // reads the node, and that is what we compare.
            by_path = drm_info_of(&path);
            eprintln!("drm_info's enumeration left out {path}: compared by path");
            theirs = &by_path;
        }
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

/// `drmtool topo` in the guest, QEMU's `pc` machine as the harness builds it: every PCI
/// GPU on the root bus of host bridge `pci0000:00` (no root port, no switch), so PHB
/// between any two; vkms and vgem with no PCI path and no class; each GPU of the ordering
/// under its index and name, its path the one sysfs resolves its function to; the JSON
/// valid against its schema, the table with its legend.
#[test]
fn topo_places_every_gpu_of_the_ordering() {
    if nodes().is_none() {
        skip!("no DRM nodes (not a guest)")
    }
    let gpus = drmtool::gpu::gpus().expect("the guest has DRM devices");
    let v = run_json(&["topo", "--json"], "topo.schema.json");
    let listed = v["gpus"].as_array().unwrap();
    assert_eq!(listed.len(), gpus.len(), "{v}");
    for (g, l) in gpus.iter().zip(listed) {
        assert_eq!(l["index"], g.index, "{l}");
        assert_eq!(l["name"], g.name.as_str(), "{l}");
        let Some(bus) = &g.bus_id else {
            assert!(
                l["pci_path"].is_null() && l["dra"]["pcieRoot"].is_null(),
                "{l}"
            );
            continue;
        };
        let canon = std::fs::canonicalize(format!("/sys/bus/pci/devices/{bus}")).unwrap();
        let comps: Vec<String> = canon
            .strip_prefix("/sys/devices")
            .unwrap()
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        assert_eq!(comps.len(), 2, "on the root bus: {}", canon.display());
        assert_eq!(l["pci_path"]["host_bridge"], comps[0].as_str(), "{l}");
        assert_eq!(l["pci_path"]["bridges"], serde_json::json!([]), "{l}");
        assert_eq!(l["pci_path"]["device"], bus.as_str(), "{l}");
        assert_eq!(l["dra"]["pciBusID"], bus.as_str(), "{l}");
        assert_eq!(l["dra"]["pcieRoot"], comps[0].as_str(), "{l}");
    }
    for (i, a) in gpus.iter().enumerate() {
        for (j, b) in gpus.iter().enumerate() {
            let want = if i == j {
                Value::from("X")
            } else if a.bus_id.is_some() && b.bus_id.is_some() {
                Value::from("PHB")
            } else {
                Value::Null
            };
            assert_eq!(v["matrix"][i][j], want, "{} to {}", a.name, b.name);
        }
    }
    assert!(
        gpus.iter().any(|g| g.bus_id.is_none()),
        "vkms and vgem are platform devices"
    );
    let (code, text) = run(&["topo"]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    for want in ["none (a platform device: not on PCI)", "PHB ", "Legend:"] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}
