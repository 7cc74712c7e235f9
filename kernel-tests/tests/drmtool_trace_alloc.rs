//! `drmtool trace --events alloc`: DRM ioctls that fail with ENOMEM or ENOSPC, paired from
//! the syscall tracepoints (`syscalls:sys_enter_ioctl`/`sys_exit_ioctl`, kernels built
//! with `CONFIG_FTRACE_SYSCALLS`: the debian-7.3 lane), with the process's pid, comm and
//! cgroup and the request's name, in the trace and its summary. The job is `qxl-alloc`
//! asking qxl's VRAM for more than it has, a real allocation failure of a real driver;
//! its successful ioctls (open, getparam, the earlier allocations' setup) must not show.
//! Where the kernel has no syscall tracepoints (by probe), `--events alloc` is refused
//! with a line naming the group.

use drmtool::cli::run_captured;
use kernel_tests::{in_guest, skip};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod schema_common;
use schema_common::validate;

fn scratch() -> PathBuf {
    let d = PathBuf::from(format!("/tmp/drmtool-trace-alloc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn read_json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn drm_allocation_failures_are_traced_with_pid_cgroup_and_request() {
    if !in_guest() {
        skip!("not in a vm guest: tracefs and DRM devices are the guest's");
    }
    let root = drmtool::trace::record::tracefs().expect("the guest init mounts tracefs");
    let dir = scratch();
    let json = dir.join("t.json");
    let j = json.to_str().unwrap();
    let probe = root.join("events/syscalls/sys_enter_ioctl/format");
    if !probe.is_file() {
        // No syscall tracepoints here: the group asked by name is refused, and a default
        // recording lists it as absent.
        let (code, _) = run_captured(&[
            "trace",
            "record",
            "--events",
            "alloc",
            "--duration",
            "0.1",
            "-o",
            j,
        ]);
        assert_eq!(code, ExitCode::FAILURE, "--events alloc without {probe:?}");
        assert!(!json.exists(), "no trace is written");
        let (code, _) = run_captured(&["trace", "record", "--duration", "0.1", "-o", j]);
        assert_eq!(code, ExitCode::SUCCESS);
        let t = read_json(&json);
        validate(&t, "trace.schema.json", "trace record");
        let absent = t["otherData"]["absent"].as_array().unwrap();
        assert!(absent.contains(&Value::from("alloc")), "{absent:?}");
        eprintln!(
            "no syscall tracepoints on this kernel: alloc refused by name, absent by default"
        );
        return;
    }
    // 256 MiB in qxl's VRAM domain, twice: more than the device's VRAM (64 MiB in the
    // guests), which no eviction can make room for.
    let job = format!(
        "exec {} 2 268435456 </dev/null",
        env!("CARGO_BIN_EXE_qxl-alloc")
    );
    let (_, _) = run_captured(&[
        "trace",
        "record",
        "--events",
        "alloc",
        "--duration",
        "120",
        "-o",
        j,
        "--",
        "sh",
        "-c",
        &job,
    ]);
    let t = read_json(&json);
    validate(&t, "trace.schema.json", "trace record --events alloc");
    let od = &t["otherData"];
    eprintln!(
        "otherData: alloc_failures {}, filtered {}, filter_refused {}, events {}",
        od["alloc_failures"], od["filtered"], od["filter_refused"], od["events"]
    );
    assert_eq!(od["lost"], 0, "{od}");
    let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mine = mine.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let slices: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "alloc")
        .collect();
    assert_eq!(
        slices.len(),
        2,
        "one slice per failed allocation (and none for the job's other ioctls): {slices:#?}"
    );
    for s in &slices {
        let a = &s["args"];
        assert_eq!(a["ioctl"], "DRM_IOCTL_QXL_ALLOC", "{s}");
        assert!(a["errno"] == "ENOMEM" || a["errno"] == "ENOSPC", "{s}");
        assert_eq!(a["comm"], "qxl-alloc", "{s}");
        assert_eq!(a["cgroup"], mine, "the job's cgroup is the test's: {s}");
        assert!(a["fd"].as_i64().is_some_and(|fd| fd >= 0), "{s}");
        assert!(s["dur"].as_f64().is_some_and(|d| d >= 0.0), "{s}");
    }
    assert_eq!(od["alloc_failures"], 2);
    // The summary's table names the process, its request and errno.
    let (code, out) = run_captured(&["trace", "summary", "--json", j]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let s: Value = serde_json::from_str(&out).unwrap();
    validate(&s, "trace-summary.schema.json", "trace summary --json");
    let rows = s["alloc_failures"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["count"], 2);
    assert_eq!(rows[0]["ioctl"], "DRM_IOCTL_QXL_ALLOC");
    assert_eq!(rows[0]["pid"], slices[0]["pid"]);
    let (_, text) = run_captured(&["trace", "summary", j]);
    eprintln!("{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("DRM_IOCTL_QXL_ALLOC") && l.contains("qxl-alloc")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
