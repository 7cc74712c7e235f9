//! `drmtool hmm probe`, `drmtool pmem list` and the hmm rows of `drmtool caps` in real
//! guests: the JSON validates against tools/schema, test_hmm's numbering and the requests
//! each kernel answers are exactly those the kernel has (stock kernels have no test_hmm and
//! the tool says so), udmabuf is there with its limits where the kernel has it, and
//! `pmem list` follows the NVDIMM namespace through raw, fsdax (mounted with and without
//! dax) and devdax, agreeing with the hmm crate's own discovery.

use hmm::PmemRegion;
use kernel_tests::pmem::{MNT, RestoreRaw, fsdax_mount, set_mode};
use kernel_tests::{expected, in_guest, kernel_version, open_fds, require_feature, skip};
use serde_json::Value;
use std::process::ExitCode;

use drmtool::cli::run_captured as run;

mod schema_common;
use schema_common::validate;

fn run_json(args: &[&str], schema: &str) -> Value {
    let (code, out) = run(args);
    assert_eq!(code, ExitCode::SUCCESS, "drmtool {args:?} failed:\n{out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"));
    validate(&v, schema, &args.join(" "));
    v
}

/// The numbering a kernel of this version has (the test's own table, not the tool's).
fn numbering((major, minor): (u32, u32)) -> &'static str {
    match (major, minor) {
        (..=4, _) | (5, ..=13) => "5.10",
        (5, _) => "5.14",
        _ => "6.0",
    }
}

fn assert_probe(p: &Value, supported: bool, class: &str, what: &str) {
    assert_eq!(p["supported"], supported, "{what}: {p}");
    assert_eq!(p["class"], class, "{what}: {p}");
}

#[test]
fn hmm_probe_reports_exactly_what_the_kernel_has() {
    if !in_guest() {
        skip!("not in a vm guest: the host has no test_hmm or udmabuf to compare with");
    }
    let before = open_fds();
    let v = run_json(&["hmm", "probe", "--json"], "hmm-probe.schema.json");
    assert_eq!(open_fds(), before, "hmm probe leaked fds");
    let (text_code, text) = run(&["hmm", "probe"]);
    assert_eq!(text_code, ExitCode::SUCCESS);
    let kv = kernel_version();
    let t = &v["test_hmm"];
    if expected("test_hmm") {
        assert!(t["major"].as_u64().is_some(), "{t}");
        assert!(t["reason"].is_null(), "{t}");
        let devs = t["devices"].as_array().unwrap();
        let units: Vec<u64> = devs.iter().map(|d| d["unit"].as_u64().unwrap()).collect();
        assert!(units.starts_with(&[0, 1]), "units {units:?}");
        let want = numbering(kv);
        for d in devs {
            let path = d["path"].as_str().unwrap();
            assert_eq!(d["layout"]["layout"], want, "{path}: {d}");
            assert_eq!(d["layout"]["kernel_expects"], want, "{path}");
            assert_eq!(d["layout"]["class"], "ok", "{path}");
            let r = &d["requests"];
            for req in ["read", "write", "snapshot", "migrate_to_device"] {
                assert_probe(&r[req], true, "ok", &format!("{path} {req}"));
            }
            assert_eq!(
                r["snapshot"]["detail"], "the page: mapped, System, write",
                "{path}: the page was just written by the device"
            );
            // Requests the numbering lacks are not sent; those it has must work on a page
            // of small, private, anonymous memory (also exclusive access under TCG).
            let has = |since: (u32, u32)| kv >= since;
            for (req, since) in [
                ("migrate_to_system", (6, 0)),
                ("exclusive", (5, 14)),
                ("check_exclusive", (5, 14)),
                ("release", (6, 1)),
            ] {
                if has(since) {
                    assert_probe(&r[req], true, "ok", &format!("{path} {req}"));
                } else {
                    assert_probe(&r[req], false, "unsupported", &format!("{path} {req}"));
                    let why = r[req]["detail"].as_str().unwrap();
                    assert!(
                        why.contains(&format!("added in Linux {}.{}", since.0, since.1)),
                        "{path} {req}: {why}"
                    );
                }
            }
            if has((5, 14)) {
                assert_eq!(
                    r["check_exclusive"]["detail"],
                    "the device holds exclusive access: true"
                );
            }
            assert!(
                text.contains(&format!(
                    "{path} (device-private): request numbering {want}"
                )),
                "{text}"
            );
        }
    } else {
        assert!(t["major"].is_null(), "{t}");
        assert_eq!(t["devices"], Value::Array(vec![]), "{t}");
        assert!(
            t["reason"]
                .as_str()
                .unwrap()
                .starts_with("test_hmm is not loaded"),
            "{t}"
        );
        assert!(text.contains("test_hmm: not loaded"), "{text}");
    }

    let u = &v["udmabuf"];
    if expected("udmabuf") {
        assert_probe(&u["node"], true, "ok", "udmabuf node");
        assert_probe(&u["create"], true, "ok", "UDMABUF_CREATE");
        assert_probe(&u["create_list"], true, "ok", "UDMABUF_CREATE_LIST");
        let limits = &u["limits"];
        let params = &u["parameters"];
        // Probed: where the kernel shows the limits as module parameters (5.15, 6.1 and
        // 6.12 here; 5.10.262's udmabuf has none), the tool reports exactly the values in
        // sysfs and enforces them; elsewhere the fixed defaults.
        let dir = std::path::Path::new("/sys/module/udmabuf/parameters");
        let sysfs = |name: &str| -> u64 {
            std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        if dir.is_dir() {
            assert_eq!(params["path"], "/sys/module/udmabuf/parameters", "{u}");
            assert_eq!(params["list_limit"], sysfs("list_limit"), "{u}");
            assert_eq!(params["size_limit_mb"], sysfs("size_limit_mb"), "{u}");
            assert_eq!(limits["list_limit"], sysfs("list_limit"), "{u}");
            assert_eq!(
                limits["size_limit_bytes"],
                sysfs("size_limit_mb") << 20,
                "{u}"
            );
        } else {
            assert!(params["path"].is_null(), "{u}");
            assert_eq!(limits["list_limit"], 1024, "{u}");
            assert_eq!(limits["size_limit_bytes"], 64u64 << 20, "{u}");
        }
    } else {
        assert_probe(&u["node"], false, "ENOENT", "udmabuf node");
        assert!(
            u["node"]["detail"]
                .as_str()
                .unwrap()
                .contains("udmabuf is not loaded or not built"),
            "{u}"
        );
        assert_probe(&u["create"], false, "skipped", "UDMABUF_CREATE");
        assert!(u["limits"].is_null());
    }

    let h = &v["host_registration"];
    // The guest runs as root, so mlock works and the page frames are visible.
    assert_probe(&h["pinned"], true, "ok", "pinned registration");
    assert_eq!(
        h["pinned"]["detail"],
        "one page registered; page frames visible (1 listed)"
    );
    assert_probe(&h["cuda"], false, "unsupported", "cuda registration");
    // The Dmirror and Udmabuf backends register where their device exists, and say
    // `unsupported` where it does not.
    for (b, feature) in [("dmirror", "test_hmm"), ("udmabuf", "udmabuf")] {
        if expected(feature) {
            assert_probe(&h[b], true, "ok", &format!("{b} registration"));
        } else {
            assert_probe(&h[b], false, "unsupported", &format!("{b} registration"));
        }
    }
}

#[test]
fn caps_has_the_test_hmm_layout_and_udmabuf_rows() {
    kernel_tests::fds_shared();
    if !in_guest() {
        skip!("not in a vm guest: caps needs DRM devices");
    }
    let v = run_json(&["caps", "--json"], "caps.schema.json");
    let s = &v["system"];
    if expected("test_hmm") {
        assert_probe(&s["test_hmm"], true, "ok", "test_hmm");
        assert_probe(&s["test_hmm_layout"], true, "ok", "test_hmm_layout");
        let d = s["test_hmm_layout"]["detail"].as_str().unwrap();
        assert!(
            d.contains(&format!("the {} numbering", numbering(kernel_version()))),
            "{d}"
        );
    } else {
        assert_probe(&s["test_hmm"], false, "ENOENT", "test_hmm");
        assert_probe(&s["test_hmm_layout"], false, "ENOENT", "test_hmm_layout");
        assert!(
            s["test_hmm_layout"]["detail"]
                .as_str()
                .unwrap()
                .contains("test_hmm is not loaded")
        );
    }
    if expected("udmabuf") {
        assert_probe(&s["udmabuf"], true, "ok", "udmabuf");
        assert_probe(&s["udmabuf_create"], true, "ok", "udmabuf_create");
        // The limits the driver has now (7.3's default size limit is INT_MAX MiB).
        let want = format!(
            "limits: list_limit 1024, size_limit {} MiB",
            kernel_tests::udmabuf_limit::size_limit_mb()
        );
        let detail = s["udmabuf"]["detail"].as_str().unwrap();
        assert!(detail.starts_with(&want), "{detail} (want {want})");
    } else {
        assert_probe(&s["udmabuf"], false, "ENOENT", "udmabuf");
        assert_probe(&s["udmabuf_create"], false, "skipped", "udmabuf_create");
    }
    let (_, text) = run(&["caps"]);
    assert!(text.contains("test_hmm_layout"), "{text}");
    assert!(text.contains("udmabuf_create"), "{text}");
}

/// `pmem list --json`, validated, and the namespace the hmm crate discovers.
fn list_and_discover() -> (Value, hmm::Namespace) {
    let v = run_json(&["pmem", "list", "--json"], "pmem-list.schema.json");
    let ns = PmemRegion::discover()
        .unwrap()
        .into_iter()
        .flat_map(|r| r.namespaces)
        .next()
        .expect("a namespace");
    (v, ns)
}

fn the_namespace<'a>(v: &'a Value, ns: &hmm::Namespace) -> &'a Value {
    let regions = v["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 1, "one NVDIMM, one region: {v:#}");
    let nss = regions[0]["namespaces"].as_array().unwrap();
    let n = nss
        .iter()
        .find(|n| n["name"] == ns.name.as_str())
        .unwrap_or_else(|| panic!("no {} in {v:#}", ns.name));
    assert_eq!(n["mode"], ns.mode.ndctl_name());
    assert_eq!(n["size"].as_u64(), Some(ns.size));
    assert_eq!(n["raw_size"].as_u64(), Some(ns.raw_size));
    assert_eq!(n["align"].as_u64(), ns.align);
    n
}

fn device<'a>(v: &'a Value, path: &str) -> &'a Value {
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == path)
        .unwrap_or_else(|| panic!("no {path} in {v:#}"))
}

#[test]
fn pmem_list_follows_the_namespace_through_every_mode() {
    require_feature!("pmem");
    if !in_guest() {
        skip!("not in a vm guest: namespaces are only reconfigured there");
    }
    let _restore = RestoreRaw;

    // raw: /dev/pmem0, the whole namespace, nothing mounted.
    if let Err(e) = set_mode("raw") {
        skip!("{e}");
    }
    let before = open_fds();
    let (v, ns) = list_and_discover();
    assert_eq!(open_fds(), before, "pmem list leaked fds");
    let n = the_namespace(&v, &ns);
    assert_eq!(n["mode"], "raw");
    let d = device(&v, "/dev/pmem0");
    assert_eq!(d["type"], "block");
    assert_eq!(d["namespace"], ns.name.as_str());
    assert_eq!(d["size"].as_u64(), Some(ns.size));
    assert_eq!(d["mounts"], Value::Array(vec![]));
    assert!(v["reason"].is_null());
    let (code, text) = run(&["pmem", "list"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(text.contains("/dev/pmem0  block"), "{text}");

    // fsdax, mounted with dax: the mount shows dax=always (ext4 prints `dax=always` or,
    // on older kernels, `dax`; both mean always).
    fsdax_mount(true).expect("fsdax mount with dax");
    let (v, ns) = list_and_discover();
    let n = the_namespace(&v, &ns);
    assert_eq!(n["mode"], "fsdax");
    assert!(n["holder"].as_str().unwrap().starts_with("pfn"), "{n}");
    let d = device(&v, "/dev/pmem0");
    assert_eq!(d["mode"], "fsdax");
    assert_eq!(
        d["size"].as_u64(),
        Some(ns.size),
        "the usable size (less the page map)"
    );
    assert_eq!(d["align"].as_u64(), ns.align);
    let m = d["mounts"].as_array().unwrap();
    assert_eq!(m.len(), 1, "{d}");
    assert_eq!(m[0]["mount_point"], MNT);
    assert_eq!(m[0]["fstype"], "ext4");
    assert_eq!(m[0]["dax"], "always", "{}", m[0]);
    let (_, text) = run(&["pmem", "list"]);
    assert!(
        text.contains(&format!("{MNT} ext4 (dax: always)")),
        "{text}"
    );

    // fsdax without dax: ext4 shows no dax option.
    fsdax_mount(false).expect("fsdax mount without dax");
    let (v, _) = list_and_discover();
    let m = &device(&v, "/dev/pmem0")["mounts"];
    assert_eq!(m[0]["mount_point"], MNT, "{m}");
    assert!(m[0]["dax"].is_null(), "{m}");

    // devdax: a character device with the namespace's alignment, no block device left.
    let ns = set_mode("devdax").expect("devdax");
    let (v, _) = list_and_discover();
    let n = the_namespace(&v, &ns);
    let dax = ns.dax_device.as_ref().expect("devdax node");
    assert_eq!(n["dax_device"], dax.display().to_string().as_str());
    assert!(n["block_device"].is_null());
    let d = device(&v, &dax.display().to_string());
    assert_eq!(d["type"], "char");
    assert_eq!(d["mode"], "devdax");
    assert_eq!(d["size"].as_u64(), Some(ns.size));
    assert_eq!(d["align"].as_u64(), ns.align);
    assert!(ns.align.is_some_and(|a| a >= 4096), "{ns:?}");
    assert!(
        !v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == "/dev/pmem0"),
        "{v:#}"
    );
}
