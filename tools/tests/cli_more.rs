//! The host side of `info`, `caps`, `kms`, `completions` and `man`: exit codes without DRM
//! devices, generated completions and man page, and the schemas themselves (each must be a
//! valid JSON Schema that rejects drift). The guest side is kernel-tests/tests/drmtool_cli.rs.

use std::process::ExitCode;

use drmtool::cli::run_captured as run;

fn schema(name: &str) -> jsonschema::Validator {
    let p = format!("{}/schema/{name}", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn has_dri() -> bool {
    std::path::Path::new("/dev/dri").exists()
}

#[test]
fn without_devices_info_caps_and_kms_exit_4() {
    if has_dri() {
        eprintln!("SKIP: this host has /dev/dri; the guest tests cover it");
        return;
    }
    for args in [
        &["info"][..],
        &["info", "--json"],
        &["caps"],
        &["caps", "--json"],
        &["kms", "list"],
        &["kms", "modeset", "Virtual-1", "--seconds", "0"],
        &["kms", "screenshot", "1", "-o", "/tmp/never.png"],
    ] {
        let (code, out) = run(args);
        assert_eq!(code, ExitCode::from(4), "{args:?}");
        assert!(out.is_empty(), "{args:?} printed {out}");
    }
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["kms"][..],
        &["kms", "screenshot", "1"],
        &["completions", "tcsh"],
        &["info", "--nope"],
        &["kms", "modeset", "X", "--seconds", "soon"],
    ] {
        assert_eq!(run(args).0, ExitCode::from(2), "{args:?}");
    }
}

#[test]
fn completions_for_every_shell() {
    for (shell, must) in [
        ("bash", "_drmtool"),
        ("zsh", "#compdef drmtool"),
        ("fish", "complete -c drmtool"),
        ("elvish", "drmtool"),
        ("powershell", "drmtool"),
    ] {
        let (code, out) = run(&["completions", shell]);
        assert_eq!(code, ExitCode::SUCCESS, "{shell}");
        assert!(out.contains(must), "{shell}: {out}");
        for sub in ["devices", "info", "caps", "buffers", "kms", "screenshot"] {
            assert!(out.contains(sub), "{shell} completion lacks {sub}");
        }
    }
}

#[test]
fn man_page_is_generated_from_the_same_definition() {
    let (code, out) = run(&["man"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains(".TH drmtool 1"), "{out}");
    for sub in [
        "devices",
        "info",
        "caps",
        "buffers",
        "kms",
        "completions",
        "Exit codes",
    ] {
        assert!(out.contains(sub), "man page lacks {sub}");
    }
}

#[test]
fn help_has_examples_and_exit_codes() {
    let h = drmtool::cli::command().render_long_help().to_string();
    assert!(h.contains("Examples:") && h.contains("Exit codes:"), "{h}");
    for sub in ["info", "caps"] {
        let mut c = drmtool::cli::command();
        let s = c
            .find_subcommand_mut(sub)
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(s.contains("Examples:"), "{sub}: {s}");
    }
}

#[test]
fn schemas_accept_samples_and_reject_drift() {
    let probe = serde_json::json!({"supported": true, "class": "ok", "probe": "X", "detail": null});
    let bad_probe =
        serde_json::json!({"supported": true, "class": "EINVAL", "probe": "X", "detail": null});
    let sys = |p: &serde_json::Value| serde_json::json!({"dma_heap": p, "sw_sync": p, "test_hmm": p, "udmabuf": p});
    let caps = serde_json::json!({"schema_version": 1, "kernel": "6.12.0", "system": sys(&probe),
        "devices": [{"path": "/dev/dri/card0", "driver": "vkms", "error": null, "probes": {"dumb": probe}}]});
    let s = schema("caps.schema.json");
    assert!(s.is_valid(&caps));
    let mut v = caps.clone();
    v["system"] = sys(&bad_probe);
    assert!(!s.is_valid(&v), "supported must mean class ok");
    let mut v = caps.clone();
    v["devices"][0]["probes"]["surprise"] = probe.clone();
    assert!(!s.is_valid(&v), "an undocumented family must not validate");
    let mut v = caps;
    v["schema_version"] = 2.into();
    assert!(!s.is_valid(&v));

    let info = serde_json::json!({"schema_version": 1, "devices": [{
        "path": "/dev/dri/card1", "node": {"kind": "primary", "dev": "226:1", "bus": "platform",
        "pci_id": null, "parent_driver": null, "sysfs": "/sys/dev/char/226:1"},
        "driver": {"name": "vgem", "version": [1, 0, 0], "date": "0", "desc": "Virtual GEM provider"},
        "caps": {"DRM_CAP_PRIME": 3, "DRM_CAP_DUMB_BUFFER": null},
        "client_caps": {"DRM_CLIENT_CAP_ATOMIC": false},
        "kms": null, "kms_error": "EOPNOTSUPP", "error": null}]});
    let s = schema("info.schema.json");
    assert!(
        s.is_valid(&info),
        "{:?}",
        s.iter_errors(&info)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
    let mut v = info.clone();
    v["devices"][0]["caps"]["PRIME"] = 3.into();
    assert!(!s.is_valid(&v), "cap names carry their DRM_CAP_ prefix");
    let mut v = info;
    v["devices"][0]["kms"] = serde_json::json!({"connectors": []});
    assert!(!s.is_valid(&v), "a partial snapshot must not validate");

    let shot = serde_json::json!({"schema_version": 1, "device": "/dev/dri/card0", "crtc": "38",
        "file": "x.png", "width": 1024, "height": 768, "method": "getfb"});
    assert!(schema("kms-screenshot.schema.json").is_valid(&shot));
    let lit = serde_json::json!({"schema_version": 1, "device": "/dev/dri/card0",
        "connector": "Virtual-1", "crtc": 38, "mode": "1024x768", "path": "atomic"});
    assert!(schema("kms-modeset.schema.json").is_valid(&lit));
    let _ = schema("kms-list.schema.json");
}

#[test]
fn devices_json_validates() {
    let (code, out) = run(&["devices", "--json"]);
    // Without DRM devices the document is printed (with its reason) and the exit is 4.
    let want = if has_dri() { 0 } else { 4 };
    assert_eq!(code, ExitCode::from(want));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = schema("devices.schema.json");
    assert!(
        s.is_valid(&v),
        "{:?}",
        s.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>()
    );
}

#[test]
fn leases_json_validates_and_pick_needs_devices() {
    let (code, out) = run(&["leases", "--json"]);
    assert_eq!(code, ExitCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = schema("leases.schema.json");
    assert!(
        s.is_valid(&v),
        "{:?}",
        s.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>()
    );
    // A document that drifts is rejected.
    let mut bad = v.clone();
    bad["leases"] = serde_json::json!([{"device": "a b", "mode": "exclusive", "slot": null,
        "pid": 1, "cgroup": null, "since": null}]);
    assert!(!s.is_valid(&bad));
    let _ = schema("pick.schema.json");
    if has_dri() {
        eprintln!("SKIP: this host has /dev/dri; kernel-tests/tests/drmtool_run.rs covers pick");
        return;
    }
    assert_eq!(run(&["pick"]).0, ExitCode::from(4), "no DRM devices");
    assert_eq!(
        run(&["pick", "-n", "0"]).0,
        ExitCode::from(4),
        "devices are looked up first"
    );
    assert_eq!(
        run(&["run", "--pick", "1", "--shared", "0", "--", "true"]).0,
        ExitCode::from(2)
    );
    assert_eq!(
        run(&["run", "--pick", "1", "--wait", "-1", "--", "true"]).0,
        ExitCode::from(2)
    );
    assert_eq!(
        run(&["run", "--shared", "2", "--", "true"]).0,
        ExitCode::from(2),
        "--shared needs --pick"
    );
}
