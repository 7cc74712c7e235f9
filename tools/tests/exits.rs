//! Exit statuses under hostile conditions: absurd numbers, a full output (`>/dev/full`), no
//! DRM devices, a screenshot target that is a symlink. The real binary runs where a panic
//! (exit 101) or the final flush matters; the rest runs in-process.

use drmtool::cli::run_captured as run;
use std::process::{Command, ExitCode, Stdio};

fn has_dri() -> bool {
    std::path::Path::new("/dev/dri").exists()
}

/// Runs the drmtool binary with stdout on /dev/full: (exit status, stderr).
fn to_full(args: &[&str]) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .args(args)
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("run drmtool");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_output_that_cannot_be_written_exits_1_never_0_nor_a_panic() {
    let me = std::process::id().to_string();
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["completions", "bash"],
        vec!["man"],
        vec!["buffers", "--pid", &me],
        vec!["buffers", "--pid", &me, "--json"],
        vec!["devices", "--json"],
    ];
    if has_dri() {
        cases.push(vec!["devices"]);
    }
    for args in &cases {
        let (code, err) = to_full(args);
        assert_eq!(code, Some(1), "drmtool {args:?} >/dev/full: {err}");
        assert!(err.contains("cannot write"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn absurd_pauses_are_usage_errors_not_panics() {
    let me = std::process::id().to_string();
    for watch in ["1e300", "inf", "NaN", "-1", "0", "1e-300"] {
        let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
            .args([
                "buffers",
                "--pid",
                &me,
                &format!("--watch={watch}"),
                "--count",
                "2",
            ])
            .output()
            .expect("run drmtool");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--watch {watch}: {err}");
        assert!(err.contains("--watch needs"), "--watch {watch}: {err}");
    }
    for secs in ["1e300", "inf", "-0.5"] {
        let (code, _) = run(&["kms", "modeset", "Virtual-1", &format!("--seconds={secs}")]);
        // Checked before any device is looked for.
        assert_eq!(code, ExitCode::from(2), "--seconds {secs}");
    }
}

#[test]
fn count_0_is_refused_and_prints_nothing() {
    let me = std::process::id().to_string();
    let (code, out) = run(&["buffers", "--pid", &me, "--watch", "0.01", "--count", "0"]);
    assert_eq!(code, ExitCode::from(2));
    assert!(out.is_empty(), "printed a frame: {out}");
    let (code, out) = run(&["buffers", "--pid", &me, "--watch", "0.01", "--count", "1"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("PROCESSES"), "{out}");
}

#[test]
fn no_drm_devices_exits_4_with_a_hint_that_works() {
    if has_dri() {
        eprintln!("SKIP: this host has /dev/dri");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .arg("devices")
        .output()
        .expect("run drmtool");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains("scripts/drmtool devices"), "{err}");
    let hint = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/drmtool");
    assert!(hint.is_file(), "the hint names {}", hint.display());
    let (code, json) = run(&["devices", "--json"]);
    assert_eq!(code, ExitCode::from(4));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("scripts/drmtool devices")
    );
}

fn image() -> drmtool::kms::Image {
    drmtool::kms::Image {
        width: 2,
        height: 1,
        rgb: vec![1, 2, 3, 4, 5, 6],
        method: "getfb",
        writeback: None,
        detached: Vec::new(),
    }
}

#[test]
fn screenshot_refuses_a_symlink_and_replaces_a_file_whole() {
    let dir = std::env::temp_dir().join(format!("drmtool-png-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.join("shot.png");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = drmtool::kms::write_png(&image(), &link).unwrap_err();
    assert!(
        matches!(err, drmtool::outfile::OutfileError::Symlink(_)),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious",
        "followed the link"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A plain file is replaced by a complete PNG, and no temporary file stays.
    let out = dir.join("out.png");
    std::fs::write(&out, b"old").unwrap();
    drmtool::kms::write_png(&image(), &out).unwrap();
    assert!(std::fs::read(&out).unwrap().starts_with(b"\x89PNG"));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let err = drmtool::kms::write_png(&image(), &dir).unwrap_err();
    assert!(
        matches!(err, drmtool::outfile::OutfileError::Directory(_)),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
