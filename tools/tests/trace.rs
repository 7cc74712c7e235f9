//! The host side of `drmtool trace`: the trace and summary JSON against their schemas, the
//! summary's figures, and every usage error and the no-tracefs error (this host has no
//! tracefs). Recording itself is tested in guests (kernel-tests/tests/drmtool_trace.rs).

use drmtool::trace::chrome::{self, FENCE_PID};
use drmtool::trace::format::Value as V;
use drmtool::trace::record::{Event, MemorySample, Recording};
use drmtool::trace::summary;
use std::process::Command;

fn schema(name: &str) -> jsonschema::Validator {
    let p = format!("{}/schema/{name}", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn errors(s: &jsonschema::Validator, v: &serde_json::Value) -> Vec<String> {
    s.iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn fence(name: &str, time: u64, context: i64, seqno: i64) -> Event {
    Event {
        system: "dma_fence".into(),
        name: name.into(),
        time,
        pid: 50,
        tid: 51,
        cpu: 1,
        fields: [
            ("driver".to_string(), V::Str("vgem".into())),
            ("timeline".to_string(), V::Str("unbound".into())),
            ("context".to_string(), V::Int(context)),
            ("seqno".to_string(), V::Int(seqno)),
        ]
        .into_iter()
        .collect(),
    }
}

fn recording() -> Recording {
    let mut events = Vec::new();
    // Ten vgem fences, each on its own context, signalled 1..10 us after init.
    for i in 0..10u64 {
        let t = 1_000_000 + i * 100_000;
        events.push(fence("dma_fence_init", t, 40 + i as i64, 1));
        events.push(fence(
            "dma_fence_signaled",
            t + (i + 1) * 1000,
            40 + i as i64,
            1,
        ));
    }
    events.push(fence("dma_fence_init", 3_000_000, 99, 1));
    for i in 0..4u64 {
        events.push(Event {
            system: "drm".into(),
            name: "drm_vblank_event".into(),
            time: 2_000_000 + i * 16_666_667,
            pid: 0,
            tid: 0,
            cpu: 0,
            fields: [
                ("crtc".to_string(), V::Int(0)),
                ("seq".to_string(), V::Int(100 + i as i64)),
            ]
            .into_iter()
            .collect(),
        });
    }
    Recording {
        backend: drmtool::trace::record::Backend::Ftrace,
        buffer_kib: 512,
        events,
        start: 900_000,
        end: 80_000_000,
        cpus: 2,
        memory: vec![MemorySample {
            time: 1_500_000,
            pid: 50,
            comm: "job".into(),
            fdinfo: None,
            maps: Some(65536),
        }],
        ..Default::default()
    }
}

#[test]
fn trace_and_summary_validate_and_the_figures_add_up() {
    let t = chrome::to_json(&recording(), "6.12.0", &["./job".into()]);
    let s = schema("trace.schema.json");
    assert!(errors(&s, &t).is_empty(), "{:#?}", errors(&s, &t));
    let evs = t["traceEvents"].as_array().unwrap();
    let begins = evs
        .iter()
        .filter(|e| e["ph"] == "b" && e["pid"] == FENCE_PID)
        .count();
    assert_eq!(begins, 11, "every fence, the unsignalled one too");
    assert!(
        evs.iter()
            .any(|e| e["ph"] == "C" && e["args"]["maps"] == 65536)
    );

    let sum = summary::summarize(&t).unwrap();
    let v = serde_json::to_value(&sum).unwrap();
    let ss = schema("trace-summary.schema.json");
    assert!(errors(&ss, &v).is_empty(), "{:#?}", errors(&ss, &v));
    // One track per context: ten with one signalled fence each (1..10 us), one unsignalled.
    assert_eq!(sum.timelines.len(), 11);
    let lat: Vec<f64> = sum
        .timelines
        .iter()
        .filter_map(|t| t.emit_to_signal_us.as_ref().map(|l| l.max))
        .collect();
    assert_eq!(lat, (1..=10).map(f64::from).collect::<Vec<_>>());
    assert_eq!(sum.timelines.iter().map(|t| t.unsignaled).sum::<u64>(), 1);
    let c = &sum.crtcs[0];
    assert_eq!(c.vblanks, 4);
    assert!((c.mean_interval_us.unwrap() - 16_666.667).abs() < 1e-6);
    assert!(c.jitter_us.unwrap() < 1e-6);

    // Drift is rejected.
    let mut bad = t.clone();
    bad["otherData"]["schema_version"] = 2.into();
    assert!(!s.is_valid(&bad));
    let mut bad = t.clone();
    bad["traceEvents"][0]["ph"] = "Q".into();
    assert!(!s.is_valid(&bad));
    let mut bad = v.clone();
    bad["timelines"][0]["surprise"] = 1.into();
    assert!(!ss.is_valid(&bad));
}

fn sched(name: &str, time: u64, tid: u32, fields: &[(&str, V)]) -> Event {
    Event {
        system: "gpu_scheduler".into(),
        name: name.into(),
        time,
        pid: tid,
        tid,
        cpu: 0,
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    }
}

/// The DRM scheduler's events as the kernel gives them (job `id`, the finished fence's
/// address): three jobs queued by thread 70 on ring "gfx", run by the scheduler thread 80;
/// the third job's fence address is one the kernel reused from the first. Each job becomes a
/// flow from a "submit job" slice on thread 70 to a "run job" slice on the ring, and an
/// execution slice from run to the first `drm_sched_process_job` of its fence at or after the
/// run; the second job never finishes in the recording (a slice with no end); a run with no
/// queue event gets no flow. The whole validates against the schema.
#[test]
fn scheduler_jobs_become_flows_and_execution_slices() {
    let job = |name: &str, t: u64, tid: u32, id: i64, fence: i64| {
        sched(
            name,
            t,
            tid,
            &[
                ("name", V::Str("gfx".into())),
                ("id", V::Int(id)),
                ("fence", V::Int(fence)),
                ("job_count", V::Int(1)),
                ("hw_job_count", V::Int(0)),
            ],
        )
    };
    let done =
        |t: u64, fence: i64| sched("drm_sched_process_job", t, 0, &[("fence", V::Int(fence))]);
    let rec = Recording {
        backend: drmtool::trace::record::Backend::Ftrace,
        buffer_kib: 512,
        events: vec![
            job("drm_sched_job", 1_000, 70, 1, 0xa0),
            job("drm_run_job", 2_000, 80, 1, 0xa0),
            job("drm_sched_job", 2_500, 70, 2, 0xb0),
            job("drm_run_job", 3_000, 80, 2, 0xb0),
            done(5_000, 0xa0),
            job("drm_sched_job", 6_000, 70, 3, 0xa0),
            job("drm_run_job", 7_000, 80, 3, 0xa0),
            done(9_000, 0xa0),
            job("drm_run_job", 9_500, 80, 4, 0xc0),
        ],
        start: 500,
        end: 10_000,
        cpus: 1,
        ..Default::default()
    };
    let t = chrome::to_json(&rec, "6.12.0", &[]);
    let s = schema("trace.schema.json");
    assert!(errors(&s, &t).is_empty(), "{:#?}", errors(&s, &t));
    let evs = t["traceEvents"].as_array().unwrap();
    // In time order: a streamed trace writes a job when it finishes, and the order of a
    // Chrome trace's events carries no meaning.
    let of = |ph: &str, name: &str| {
        let mut v = evs
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .map(|e| {
                (
                    e["ts"].as_f64().unwrap(),
                    e["tid"].as_i64().unwrap(),
                    e["id"].as_str().map(String::from),
                )
            })
            .collect::<Vec<_>>();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let job_ids = |v: Vec<(f64, i64, Option<String>)>| {
        v.into_iter().map(|e| e.2.unwrap()).collect::<Vec<_>>()
    };
    let starts = of("s", "job");
    let ends = of("f", "job");
    assert_eq!(job_ids(starts.clone()), ["job:1", "job:2", "job:3"]);
    assert_eq!(
        job_ids(ends.clone()),
        ["job:1", "job:2", "job:3"],
        "job 4 was never seen queued"
    );
    assert!(
        starts.iter().all(|e| e.1 == 70),
        "flows leave the queuing thread"
    );
    let ring = ends[0].1;
    assert!(ends.iter().all(|e| e.1 == ring));
    assert_eq!(
        starts.iter().map(|e| e.0).collect::<Vec<_>>(),
        [1.0, 2.5, 6.0]
    );
    assert_eq!(
        ends.iter().map(|e| e.0).collect::<Vec<_>>(),
        [2.0, 3.0, 7.0]
    );
    // Each flow end binds to a slice there: the 1 ns slices at both ends.
    assert_eq!(of("X", "submit job").len(), 3);
    assert_eq!(
        of("X", "run job").iter().map(|e| e.0).collect::<Vec<_>>(),
        [2.0, 3.0, 7.0]
    );
    assert!(
        evs.iter()
            .filter(|e| e["ph"] == "f")
            .all(|e| e["bp"] == "e")
    );
    // Execution: job 1 ends at 5 us, job 3 at 9 us (the reused address), job 2 never, job 4
    // (no process_job after its run) never.
    let b: Vec<_> = of("b", "gfx jobs")
        .into_iter()
        .map(|e| (e.2.unwrap(), e.0))
        .collect();
    let e: Vec<_> = of("e", "gfx jobs")
        .into_iter()
        .map(|e| (e.2.unwrap(), e.0))
        .collect();
    assert_eq!(
        b,
        [
            ("job:1".to_string(), 2.0),
            ("job:2".to_string(), 3.0),
            ("job:3".to_string(), 7.0),
            ("job:4".to_string(), 9.5)
        ]
    );
    assert_eq!(e, [("job:1".to_string(), 5.0), ("job:3".to_string(), 9.0)]);
    // Fence timelines are untouched by job slices.
    assert!(summary::summarize(&t).unwrap().timelines.is_empty());
}

fn drmtool(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_are_exit_2_with_one_line() {
    for (args, want) in [
        (
            &["trace", "record"][..],
            "give --duration SECS or a command",
        ),
        (
            &["trace", "record", "--duration", "0"],
            "--duration needs a positive",
        ),
        (
            &["trace", "record", "--duration=-1"],
            "--duration needs a positive",
        ),
        (
            &["trace", "record", "--duration", "1e300"],
            "--duration needs a positive",
        ),
        (
            &["trace", "record", "--duration", "1", "-o", "x.txt"],
            "must end in .json or .pftrace",
        ),
        (
            &["trace", "record", "--duration", "1", "--buffer-kib", "0"],
            "--buffer-kib",
        ),
        (
            &["trace", "record", "--duration", "1", "--memory-interval=-2"],
            "--memory-interval",
        ),
    ] {
        let (code, err) = drmtool(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line: {err}"
        );
    }
    let (code, err) = drmtool(&["trace", "record", "--events", "nope", "--duration", "1"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn without_tracefs_record_says_so_and_writes_nothing() {
    if drmtool::trace::record::tracefs().is_some() {
        eprintln!("SKIP: this host has tracefs; the guest tests cover recording");
        return;
    }
    let dir = std::env::temp_dir().join(format!("drmtool-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.json");
    let (code, err) = drmtool(&[
        "trace",
        "record",
        "--duration",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no tracefs at /sys/kernel/tracing"), "{err}");
    assert!(!out.exists(), "no trace file on failure");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn summary_of_missing_bad_and_good_files() {
    let dir = std::env::temp_dir().join(format!("drmtool-tsum-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (code, err) = drmtool(&["trace", "summary", dir.join("none.json").to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"traceEvents\": [1, 2").unwrap();
    let (code, err) = drmtool(&["trace", "summary", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not JSON"), "{err}");
    std::fs::write(&bad, "{}").unwrap();
    let (code, err) = drmtool(&["trace", "summary", bad.to_str().unwrap()]);
    assert!(code == Some(1) && err.contains("no traceEvents"), "{err}");
    let good = dir.join("good.json");
    let t = chrome::to_json(&recording(), "6.12.0", &[]);
    std::fs::write(&good, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .args(["trace", "summary", "--json", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["crtcs"][0]["vblanks"], 4);
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .args(["trace", "summary", good.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("vgem unbound (context 40)"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tracefs tree with the given `(system, event, format text)` files.
fn fake_tracefs(events: &[(&str, &str, String)]) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!(
        "drmtool-fake-tracefs-{}-{}",
        std::process::id(),
        events.len()
    ));
    let _ = std::fs::remove_dir_all(&root);
    for (system, event, text) in events {
        let d = root.join("events").join(system).join(event);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("format"), text).unwrap();
    }
    root
}

/// A format file as the kernel writes one: the common fields, then `fields`
/// (`(declaration, offset, size, signed)`).
fn format_text(name: &str, id: u32, fields: &[(&str, u32, u32, u32)]) -> String {
    let mut t = format!(
        "name: {name}\nID: {id}\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    );
    for (decl, off, size, signed) in fields {
        t.push_str(&format!(
            "\tfield:{decl};\toffset:{off};\tsize:{size};\tsigned:{signed};\n"
        ));
    }
    t.push_str("\nprint fmt: \"\"\n");
    t
}

/// The eviction group finds the drivers' tracepoints by their format files and decodes
/// them generically (amdgpu's `amdgpu_bo_move`, fields as amdgpu_trace.h declares them);
/// the allocation group needs both syscall tracepoints or is absent.
#[test]
fn eviction_tracepoints_are_found_and_decoded_and_alloc_needs_both_syscalls() {
    use drmtool::trace::Category;
    use drmtool::trace::record::{decode_raw, resolve};
    let bo_move = format_text(
        "amdgpu_bo_move",
        1201,
        &[
            ("struct amdgpu_bo * bo", 8, 8, 0),
            ("int pages", 16, 4, 1),
            ("u32 old_placement", 20, 4, 0),
            ("u32 new_placement", 24, 4, 0),
        ],
    );
    let enter = format_text(
        "sys_enter_ioctl",
        700,
        &[
            ("int __syscall_nr", 8, 4, 1),
            ("unsigned int fd", 16, 8, 0),
            ("unsigned int cmd", 24, 8, 0),
            ("unsigned long arg", 32, 8, 0),
        ],
    );
    let exit = format_text(
        "sys_exit_ioctl",
        701,
        &[("int __syscall_nr", 8, 4, 1), ("long ret", 16, 8, 1)],
    );
    let half = fake_tracefs(&[
        ("amdgpu", "amdgpu_bo_move", bo_move.clone()),
        ("syscalls", "sys_enter_ioctl", enter.clone()),
    ]);
    let r = resolve(&half, &[Category::Alloc, Category::Evict]).unwrap();
    assert_eq!(
        r.absent,
        vec![Category::Alloc],
        "one syscall tracepoint is no pair"
    );
    assert_eq!(r.formats.len(), 1);
    let f = &r.formats[&1201];
    assert_eq!(
        (f.system.as_str(), f.name.as_str()),
        ("amdgpu", "amdgpu_bo_move")
    );
    // A hit: bo 0xffff8880deadbeef, 256 pages, from placement 2 (GTT) to 4 (VRAM).
    let mut raw = vec![0u8; 28];
    raw[0..2].copy_from_slice(&1201u16.to_ne_bytes());
    raw[8..16].copy_from_slice(&0xffff_8880_dead_beef_u64.to_ne_bytes());
    raw[16..20].copy_from_slice(&256i32.to_ne_bytes());
    raw[20..24].copy_from_slice(&2u32.to_ne_bytes());
    raw[24..28].copy_from_slice(&4u32.to_ne_bytes());
    let e = decode_raw(&r.formats, &raw, 1000, 42, 43, 0).unwrap();
    assert_eq!(
        (
            e.int("pages"),
            e.int("old_placement"),
            e.int("new_placement")
        ),
        (Some(256), Some(2), Some(4))
    );
    let both = fake_tracefs(&[
        ("syscalls", "sys_enter_ioctl", enter),
        ("syscalls", "sys_exit_ioctl", exit),
        ("amdgpu", "amdgpu_bo_move", bo_move),
    ]);
    let r = resolve(&both, &[Category::Alloc]).unwrap();
    assert!(r.absent.is_empty());
    let names: Vec<&str> = r.formats.values().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["sys_enter_ioctl", "sys_exit_ioctl"]);
    let _ = std::fs::remove_dir_all(&half);
    let _ = std::fs::remove_dir_all(&both);
}
