//! `drmtool hmm probe` and `drmtool pmem list` on the host: real output validated against
//! tools/schema/{hmm-probe,pmem-list}.schema.json, the schemas rejecting drift, exit codes,
//! and the pieces that need no device (mountinfo parsing, joining a sysfs tree). The guest
//! side is kernel-tests/tests/drmtool_hmm.rs.

use serde_json::{Value, json};
use std::path::Path;
use std::process::ExitCode;

use drmtool::cli::run_captured as run;

fn schema(name: &str) -> jsonschema::Validator {
    let p = format!("{}/schema/{name}", env!("CARGO_MANIFEST_DIR"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn errors(name: &str, v: &Value) -> Vec<String> {
    schema(name)
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn has_pmem() -> bool {
    std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("pmem") || n.starts_with("dax")
        })
}

#[test]
fn hmm_probe_json_validates_and_says_why_things_are_missing() {
    let (code, out) = run(&["hmm", "probe", "--json"]);
    assert_eq!(code, ExitCode::SUCCESS);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["schema_version"], 1);
    let e = errors("hmm-probe.schema.json", &v);
    assert!(e.is_empty(), "{e:#?}\n{out}");
    let t = &v["test_hmm"];
    if t["devices"].as_array().unwrap().is_empty() {
        let why = t["reason"].as_str().unwrap();
        assert!(why.contains("test_hmm"), "{why}");
    }
    let node = &v["udmabuf"]["node"];
    if node["supported"] == false {
        assert!(v["udmabuf"]["limits"].is_null());
        assert_eq!(v["udmabuf"]["create"]["class"], "skipped");
        if node["class"] == "ENOENT" {
            assert!(
                node["detail"].as_str().unwrap().contains("udmabuf"),
                "{node}"
            );
        }
    }
    // Built without the `cuda` feature, the row says so; every backend has a row.
    for b in ["cuda", "dmirror", "pinned", "udmabuf"] {
        assert!(v["host_registration"][b].is_object(), "{b}");
    }
    assert!(
        v["host_registration"]["cuda"]["detail"]
            .as_str()
            .unwrap()
            .contains("cuda")
    );
    // The human view has every section.
    let (code, text) = run(&["hmm", "probe"]);
    assert_eq!(code, ExitCode::SUCCESS);
    for s in [
        "test_hmm:",
        "udmabuf:",
        "host registration backends:",
        "pinned",
    ] {
        assert!(text.contains(s), "{s} missing from\n{text}");
    }
}

fn probe(supported: bool, class: &str) -> Value {
    json!({"supported": supported, "class": class, "probe": "X", "detail": null})
}

fn hmm_sample() -> Value {
    let ok = probe(true, "ok");
    let reqs: serde_json::Map<String, Value> = [
        "check_exclusive",
        "exclusive",
        "migrate_to_device",
        "migrate_to_system",
        "read",
        "release",
        "snapshot",
        "write",
    ]
    .iter()
    .map(|k| (k.to_string(), ok.clone()))
    .collect();
    json!({
        "schema_version": 1, "kernel": "6.12.0",
        "test_hmm": {"major": 245, "reason": null, "devices": [{
            "path": "/dev/hmm_dmirror0", "unit": 0, "memory": "device-private",
            "layout": {"layout": "6.0", "kernel_expects": "6.0", "class": "ok",
                       "method": "m", "detail": null},
            "requests": reqs}]},
        "udmabuf": {"node": ok, "create": ok, "create_list": ok,
                    "parameters": {"path": "/sys/module/udmabuf/parameters",
                                   "size_limit_mb": 64, "list_limit": 1024},
                    "limits": {"list_limit": 1024, "size_limit_bytes": 67108864}},
        "host_registration": {"cuda": probe(false, "unsupported"), "dmirror": ok,
                              "pinned": ok, "udmabuf": ok}
    })
}

/// A change that must make a valid document invalid.
type Drift = Box<dyn Fn(&mut Value)>;

#[test]
fn the_hmm_schema_accepts_a_full_sample_and_rejects_drift() {
    let good = hmm_sample();
    assert!(errors("hmm-probe.schema.json", &good).is_empty());
    let bad: Vec<(&str, Drift)> = vec![
        ("version", Box::new(|v| v["schema_version"] = 2.into())),
        ("extra key", Box::new(|v| v["surprise"] = true.into())),
        (
            "supported with a failure class",
            Box::new(|v| {
                v["test_hmm"]["devices"][0]["requests"]["read"]["class"] = "EINVAL".into()
            }),
        ),
        (
            "a missing request",
            Box::new(|v| {
                v["test_hmm"]["devices"][0]["requests"]
                    .as_object_mut()
                    .unwrap()
                    .remove("release");
            }),
        ),
        (
            "an unknown layout",
            Box::new(|v| v["test_hmm"]["devices"][0]["layout"]["layout"] = "7.0".into()),
        ),
        (
            "a layout with a failure class",
            Box::new(|v| v["test_hmm"]["devices"][0]["layout"]["class"] = "EINVAL".into()),
        ),
        (
            "no devices and no reason",
            Box::new(|v| v["test_hmm"]["devices"] = json!([])),
        ),
        (
            "a reason although devices were probed",
            Box::new(|v| v["test_hmm"]["reason"] = "x".into()),
        ),
        (
            "no node but limits",
            Box::new(|v| v["udmabuf"]["node"] = probe(false, "ENOENT")),
        ),
        (
            "a node but no limits",
            Box::new(|v| v["udmabuf"]["limits"] = Value::Null),
        ),
    ];
    for (what, f) in bad {
        let mut v = good.clone();
        f(&mut v);
        assert!(
            !errors("hmm-probe.schema.json", &v).is_empty(),
            "{what} must not validate"
        );
    }
}

#[test]
fn pmem_list_without_pmem_exits_4_with_a_reason() {
    if has_pmem() {
        eprintln!("SKIP: this host has persistent memory; the guest tests cover it");
        return;
    }
    let (code, out) = run(&["pmem", "list"]);
    assert_eq!(code, ExitCode::from(4));
    assert!(out.is_empty(), "the table view prints nothing: {out}");
    let (code, out) = run(&["pmem", "list", "--json"]);
    assert_eq!(code, ExitCode::from(4));
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let e = errors("pmem-list.schema.json", &v);
    assert!(e.is_empty(), "{e:#?}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("no persistent memory"),
        "{v}"
    );
}

#[test]
fn hmm_and_pmem_bad_usage_exits_2() {
    for args in [
        &["hmm"][..],
        &["pmem"],
        &["hmm", "probe", "extra"],
        &["pmem", "list", "--nope"],
        &["hmm", "list"],
    ] {
        assert_eq!(run(args).0, ExitCode::from(2), "{args:?}");
    }
    let (code, help) = run(&["pmem", "list", "--help"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        help.is_empty(),
        "help goes to stdout through clap, not `out`"
    );
    let mut man = Vec::new();
    assert_eq!(
        drmtool::cli::main_with(["drmtool", "man"].map(Into::into), &mut man),
        ExitCode::SUCCESS
    );
    let man = String::from_utf8(man).unwrap();
    assert!(man.contains("hmm") && man.contains("pmem"));
}

#[test]
fn mountinfo_is_parsed_with_escapes_dax_policies_and_bad_lines() {
    let text = "\
41 39 259:0 / /tmp/pmem\\040fsdax rw,relatime - ext4 /dev/pmem0 rw,dax=always
42 39 259:1 / /mnt/a rw - ext2 /dev/pmem1 rw,dax
43 39 259:2 / /mnt/b rw shared:5 master:2 - xfs /dev/pmem2 rw,attr2,dax=inode
44 39 259:3 / /mnt/c rw - ext4 /dev/pmem3 rw,dax=never
45 39 0:22 / /proc rw,nosuid - proc proc rw
garbage line without a separator
46 39 nocolon / /x rw - ext4 /dev/x rw
47 39 259:4 / /mnt/d rw -
48 39 259:5 / /mnt/e rw - ext4 /dev/pmem5 rw,data=ordered,daxy
";
    let m = drmtool::pmem::parse_mountinfo(text);
    let got: Vec<(&str, &str, Option<&str>)> = m
        .iter()
        .map(|m| (m.dev.as_str(), m.mount_point.as_str(), m.dax.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("259:0", "/tmp/pmem fsdax", Some("always")),
            ("259:1", "/mnt/a", Some("always")),
            ("259:2", "/mnt/b", Some("inode")),
            ("259:3", "/mnt/c", Some("never")),
            ("0:22", "/proc", None),
            ("259:5", "/mnt/e", None),
        ]
    );
    assert_eq!(m[0].fstype, "ext4");
    assert_eq!(m[0].source, "/dev/pmem0");
    assert!(drmtool::pmem::parse_mountinfo("").is_empty());
}

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

#[test]
fn regions_from_a_sysfs_tree_become_the_json_and_table() {
    let root = std::env::temp_dir().join(format!("drmtool-pmem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let nd = root.join("sys/bus/nd/devices");
    write(&nd.join("region0/devtype"), "nd_pmem\n");
    write(&nd.join("region0/size"), "268435456\n");
    write(&nd.join("region0/align"), "0x1000000\n");
    write(&nd.join("region0/persistence_domain"), "\n");
    write(&nd.join("namespace0.0/size"), "268435456\n");
    write(&nd.join("namespace0.0/mode"), "memory\n");
    write(&nd.join("namespace0.0/holder"), "pfn0.0\n");
    write(&nd.join("namespace0.1/size"), "0\n");
    write(&nd.join("pfn0.0/size"), "262144000\n");
    write(&nd.join("pfn0.0/align"), "2097152\n");
    std::fs::create_dir_all(nd.join("pfn0.0/block/pmem0")).unwrap();
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    let regions = hmm::PmemRegion::discover_in(&root.join("sys")).unwrap();
    let r = drmtool::pmem::build(&regions, &dev, &root.join("sys"), "");
    let v = serde_json::to_value(&r).unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let e = errors("pmem-list.schema.json", &v);
    assert!(e.is_empty(), "{e:#?}");
    assert_eq!(
        v["regions"],
        json!([{"name": "region0", "size": 268435456u64, "align": 16777216,
                "persistence_domain": null, "namespaces": [{
                    "name": "namespace0.0", "mode": "fsdax", "size": 262144000,
                    "raw_size": 268435456u64, "align": 2097152, "holder": "pfn0.0",
                    "block_device": "/dev/pmem0", "dax_device": null}]}])
    );
    assert_eq!(v["devices"], json!([]));
    assert!(v["reason"].is_null());
    let text = drmtool::pmem::render(&r);
    assert!(text.contains("region0  256 MiB  16 MiB"), "{text}");
    assert!(text.contains("namespace0.0  fsdax  250 MiB"), "{text}");
    // Drift the schema must catch.
    let mut bad = v.clone();
    bad["reason"] = Value::Null;
    bad["regions"] = json!([]);
    assert!(!errors("pmem-list.schema.json", &bad).is_empty());
    let mut bad = v.clone();
    bad["devices"] = json!([{"path": "/dev/pmem0", "type": "block", "dev": "259:0",
        "size": 1, "align": null, "namespace": null, "mode": null,
        "mounts": [{"mount_point": "/m", "fstype": "ext4", "source": "/dev/pmem0",
                    "dax": "sometimes", "options": ""}]}]);
    assert!(!errors("pmem-list.schema.json", &bad).is_empty());
    bad["devices"][0]["mounts"][0]["dax"] = "always".into();
    assert!(errors("pmem-list.schema.json", &bad).is_empty());
}
