//! The command line on the host (no DRM devices here): exit codes, one-line errors, and the
//! JSON of a real scan validated against tools/schema/buffers.schema.json.

use std::process::ExitCode;

mod synthetic;

use drmtool::cli::run_captured as run;

fn schema() -> jsonschema::Validator {
    let p = format!("{}/schema/buffers.schema.json", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn assert_valid(v: &serde_json::Value) {
    let errors: Vec<String> = schema()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

#[test]
fn buffers_json_validates_against_the_schema() {
    let (code, out) = run(&["buffers", "--json"]);
    assert_eq!(code, ExitCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["schema_version"], 1);
    assert!(v["scan"]["processes"].as_u64().unwrap() >= 1);
    assert_valid(&v);
}

#[test]
fn the_schema_rejects_drift() {
    let (_, out) = run(&["buffers", "--json"]);
    let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["schema_version"] = 2.into();
    assert!(
        !schema().is_valid(&v),
        "a wrong schema_version must not validate"
    );
    let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["surprise"] = true.into();
    assert!(
        !schema().is_valid(&v),
        "an undocumented key must not validate"
    );
    // An unknown figure must be null and say why; a known one must not claim `unknown`.
    let bad = serde_json::json!({"value": 5, "source": "unknown", "note": "x"});
    let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["processes"] = serde_json::json!([{
        "pid": 1, "comm": "x", "uid": 0, "drm_fds": [], "dmabuf_fds": [], "drm_mappings": [],
        "dmabuf_mappings": [], "mapped_gem_shmem": bad, "mapped_drm": bad,
        "dmabuf_bytes": bad, "memory_total": bad, "malformed_maps": []
    }]);
    assert!(!schema().is_valid(&v));
}

#[test]
fn every_table_view_renders() {
    for by in ["process", "client", "buffer"] {
        for sort in ["size", "pid", "name"] {
            let (code, out) = run(&["buffers", "--by", by, "--sort", sort, "--color", "never"]);
            assert_eq!(code, ExitCode::SUCCESS);
            assert!(out.contains("DEVICES") && out.contains("scanned "), "{out}");
            assert!(!out.contains('\x1b'), "no colour when asked for none");
        }
    }
    let (_, out) = run(&["buffers", "--color", "always"]);
    assert!(out.contains("\x1b[1m"), "colour when asked for");
}

#[test]
fn exit_codes() {
    assert_eq!(
        run(&["buffers", "--pid", "4294967295"]).0,
        ExitCode::from(3)
    );
    // No DRM devices here: a spec that could name one exits 4 as `info` does.
    assert_eq!(
        run(&["buffers", "--device", "no-such-driver"]).0,
        ExitCode::from(4)
    );
    assert_eq!(run(&["buffers", "--by", "nonsense"]).0, ExitCode::from(2));
    assert_eq!(
        run(&["buffers", "--count", "1"]).0,
        ExitCode::from(2),
        "--count needs --watch"
    );
    assert_eq!(run(&["buffers", "--watch", "0"]).0, ExitCode::from(2));
}

#[test]
fn watch_refreshes_the_given_number_of_times() {
    let me = std::process::id().to_string();
    let (code, out) = run(&[
        "buffers", "--pid", &me, "--watch", "0.05", "--count", "2", "--json",
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2);
    for d in &docs {
        assert_eq!(d["scan"]["processes"], 1);
        assert_valid(d);
    }
}

#[test]
fn a_process_that_vanished_is_counted_not_fatal() {
    let root = std::env::temp_dir().join(format!("drmtool-fakeproc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // pid 4000000 has a directory but no fd/ (exited between readdir and open).
    std::fs::create_dir_all(root.join("4000000")).unwrap();
    std::fs::create_dir_all(root.join("self-not-a-pid")).unwrap();
    let r = drmtool::scan(&drmtool::Options {
        proc_root: root.clone(),
        debugfs_root: root.join("no-debugfs"),
        ..Default::default()
    })
    .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(r.scan.processes, 1);
    assert_eq!(r.scan.vanished, 1);
    assert_eq!(r.scan.read, 0);
    assert!(r.unreadable.is_empty());
}

#[test]
fn a_missing_proc_is_a_one_line_error_with_a_hint() {
    let e = drmtool::scan(&drmtool::Options {
        proc_root: "/nonexistent/proc".into(),
        ..Default::default()
    })
    .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("/nonexistent/proc") && s.contains("hint:") && !s.contains('\n'),
        "{s}"
    );
}

/// A synthetic /proc with one process holding `/dev/null`, which a synthetic sysfs
/// (`Options::sys_root`) calls a DRM node, with `fdinfo` text of the caller's.
fn synthetic_drm_holder(name: &str, fdinfo: &str) -> (synthetic::TreeDir, drmtool::Options) {
    synthetic::drm_tree(
        name,
        &[synthetic::Proc {
            pid: 5_000_000,
            comm: "holder",
            cgroup: None,
            fdinfo,
        }],
    )
}

#[test]
fn a_char_device_that_sysfs_calls_drm_is_a_drm_fd() {
    let (root, opts) = synthetic_drm_holder(
        "sysfs-root",
        "drm-driver:\tvkms\ndrm-client-id:\t7\ndrm-total-system:\t8 KiB\n",
    );
    let r = drmtool::scan(&opts).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(r.clients.len(), 1, "{r:#?}");
    assert_eq!(r.clients[0].node, "/dev/null");
    assert_eq!(r.clients[0].client_id, Some(7));
    assert_eq!(r.clients[0].memory_total.value, Some(8192));
    assert_eq!(r.processes[0].drm_fds.len(), 1);
}

/// Found by the proc_tree fuzz target: a driver name (`drm-driver`) and engine names
/// (`drm-engine-<name>`) are the driver's text, printed in the tables as they were.
#[test]
fn driver_and_engine_names_are_escaped_in_the_tables() {
    let (root, opts) = synthetic_drm_holder(
        "escape",
        "drm-driver:\tev\x1b[31mil\tx\ndrm-client-id:\t1\ndrm-engine-g\x1b]fx:\t5 ns\n",
    );
    let r = drmtool::scan(&opts).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(r.clients.len(), 1, "{r:#?}");
    for by in [drmtool::render::By::Process, drmtool::render::By::Client] {
        let t = drmtool::render::tables(&r, by, drmtool::render::SortKey::Pid, false);
        assert!(
            !t.chars().any(|c| c != '\n' && c.is_control()),
            "control bytes in the tables:\n{}",
            t.escape_debug()
        );
    }
}

/// Found by the proc_tree fuzz target: sizes are hostile text, and sums of them (a
/// process's dma-buf bytes, the tables' sort by size) overflowed, a panic in debug builds
/// and a wrapped figure in release ones. They saturate, as the fdinfo totals do.
#[test]
fn sums_of_hostile_sizes_saturate() {
    use std::os::unix::fs::{MetadataExt, symlink};
    let (root, opts) = synthetic_drm_holder(
        "saturate",
        "drm-driver:\tvkms\ndrm-client-id:\t1\ndrm-total-vram:\t18446744073709551615\n",
    );
    // pid 5000000 (the DRM holder) and 5000001 each hold a dma-buf of almost 2^64 bytes,
    // and 5000000 maps 5000001's too.
    let mut inodes = Vec::new();
    for pid in ["5000000", "5000001"] {
        let p = root.join("proc").join(pid);
        std::fs::create_dir_all(p.join("fd")).unwrap();
        std::fs::create_dir_all(p.join("fdinfo")).unwrap();
        std::fs::write(p.join("comm"), "big\n").unwrap();
        // The link resolves relative to fd/: this file gives the buffer its inode.
        std::fs::write(p.join("fd/anon_inode:dmabuf"), "").unwrap();
        inodes.push(
            std::fs::metadata(p.join("fd/anon_inode:dmabuf"))
                .unwrap()
                .ino(),
        );
        symlink("anon_inode:dmabuf", p.join("fd/4")).unwrap();
        std::fs::write(
            p.join("fdinfo/4"),
            "size:\t18446744073709551614\ncount:\t1\n",
        )
        .unwrap();
    }
    std::fs::write(
        root.join("proc/5000000/maps"),
        format!(
            "7f0000000000-7f0000001000 rw-s 00000000 00:0a {} /dmabuf:\n",
            inodes[1]
        ),
    )
    .unwrap();
    let r = drmtool::scan(&opts).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let p = r.processes.iter().find(|p| p.pid == 5_000_000).unwrap();
    assert_eq!(p.dmabuf_bytes.value, Some(u64::MAX), "{p:#?}");
    let t = drmtool::render::tables(
        &r,
        drmtool::render::By::Process,
        drmtool::render::SortKey::Size,
        false,
    );
    let first = t.lines().find(|l| l.starts_with("50000")).unwrap();
    assert!(first.starts_with("5000000 "), "{t}");
}
