//! `drmtool top` on the host: its frame against tools/schema/top.schema.json (which must
//! reject drift), a recorded session replayed as text and as JSON (the same frames back),
//! and its refusals (bad interval, count, size, recording; no devices). The live view on
//! real drivers, in a real terminal, is kernel-tests/tests/drmtool_top.rs.

mod synthetic;
use synthetic::{Proc, drm_tree};

use drmtool::cli::run_captured as run;
use drmtool::top::{Bytes, ClientRow, Frame, GpuRow, Region, ScanRow};
use std::collections::BTreeMap;
use std::process::ExitCode;

fn schema() -> jsonschema::Validator {
    let p = format!("{}/schema/top.schema.json", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn frame(seq: u64) -> Frame {
    Frame {
        schema_version: drmtool::top::SCHEMA_VERSION,
        seq,
        unix_ms: 1_765_000_000_000 + seq * 1000,
        interval_ms: (seq > 0).then_some(1000),
        gpus: vec![GpuRow {
            index: 0,
            name: "0000:00:02.0".into(),
            driver: Some("virtio_gpu".into()),
            clients: 1,
            leases: 0,
            memory: Bytes {
                value: Some(4096),
                source: "fdinfo".into(),
            },
            regions: BTreeMap::from([(
                "system".into(),
                Region {
                    total: Some(4096),
                    resident: None,
                },
            )]),
            dmem: vec![drmtool::top::DmemRow {
                region: "drm/0000:00:02.0/vram0".into(),
                capacity: 1 << 30,
                current: 4096,
            }],
            engines: BTreeMap::from([("gfx".into(), 12.5)]),
            memory_history: vec![Some(4096); (seq + 1) as usize],
            busy_history: vec![None, Some(12.5)],
        }],
        clients: vec![ClientRow {
            gpu: Some(0),
            gpu_name: "0000:00:02.0".into(),
            client_id: Some(9),
            pid: 77,
            ns_pids: vec![77, 1],
            holders: vec![77],
            comm: "app".into(),
            cmdline: "app --x".into(),
            uid: Some(1000),
            user: Some("alice".into()),
            cgroup: Some("/system.slice/slurmstepd.scope/job_4/step_0".into()),
            unit: Some("slurmstepd.scope".into()),
            container: None,
            pod: None,
            slurm_job: Some("4.0".into()),
            memory: Bytes {
                value: Some(4096),
                source: "fdinfo".into(),
            },
            regions: BTreeMap::new(),
            engines: BTreeMap::from([("gfx".into(), 12.5)]),
            dmabufs: 1,
            dmabufs_shared: 0,
            dmabuf_bytes: Some(4096),
        }],
        missing: vec![],
        scan: ScanRow {
            processes: 3,
            unreadable: 0,
        },
    }
}

#[test]
fn a_frame_fits_the_schema_and_the_schema_rejects_drift() {
    let s = schema();
    let v = serde_json::to_value(frame(1)).unwrap();
    if let Err(e) = s.validate(&v) {
        panic!("{e}: {v}");
    }
    let mut extra = v.clone();
    extra["gpus"][0]["surprise"] = 1.into();
    assert!(!s.is_valid(&extra));
    let mut unknown_source = v.clone();
    unknown_source["clients"][0]["memory"]["source"] = "guess".into();
    assert!(!s.is_valid(&unknown_source));
    let mut over = v;
    over["gpus"][0]["engines"]["gfx"] = 140.into();
    assert!(!s.is_valid(&over));
}

/// A recorded session of three frames, in a directory of the calling test's own.
fn recording(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("top-host-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("session.jsonl");
    let text: String = (0..3)
        .map(|i| serde_json::to_string(&frame(i)).unwrap() + "\n")
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_replay_gives_the_recorded_frames_back() {
    let p = recording("replay");
    let f = p.to_string_lossy();
    let (code, out) = run(&["top", "--replay", &f, "--json"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(out, std::fs::read_to_string(&p).unwrap());
    let (code, text) = run(&["top", "--replay", &f, "--print", "--size", "80x24"]);
    assert_eq!(code, ExitCode::SUCCESS);
    // Three screens of 24 lines, a blank line between them.
    assert_eq!(text.lines().count(), 3 * 24 + 2, "{text}");
    assert!(
        text.contains("4.0 KiB [fdinfo]") && text.contains("gfx 12%"),
        "{text}"
    );
    assert!(text.contains("replay 3/3"), "{text}");
    let (_, one) = run(&[
        "top", "--replay", &f, "--print", "--size", "80x24", "--count", "1",
    ]);
    assert_eq!(one.lines().count(), 24);
    let (_, by_job) = run(&[
        "top", "--replay", &f, "--print", "--group", "job", "--count", "1",
    ]);
    assert!(by_job.contains("JOB") && by_job.contains("4.0"), "{by_job}");
    let _ = std::fs::remove_dir_all(p.parent().unwrap());
}

#[test]
fn refusals_say_why() {
    let p = recording("refusals");
    let f = p.to_string_lossy().into_owned();
    let bad = p.with_file_name("bad.jsonl");
    std::fs::write(&bad, "{\"schema_version\": 1}\n").unwrap();
    let newer = p.with_file_name("newer.jsonl");
    let mut v = serde_json::to_value(frame(0)).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&newer, format!("{v}\n")).unwrap();
    let hostile = p.with_file_name("hostile.jsonl");
    let mut h = serde_json::to_value(frame(0)).unwrap();
    h["clients"][0]["cmdline"] = "app \u{1b}]0;owned\u{7}\u{1b}[2J".into();
    std::fs::write(&hostile, format!("{h}\n")).unwrap();
    let empty = p.with_file_name("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    // The library's errors are matchable.
    use drmtool::top::record::{RecordingError as E, read};
    assert!(matches!(
        read("/nonexistent/s.jsonl".as_ref()),
        Err(E::Read { .. })
    ));
    assert!(matches!(read(&bad), Err(E::NotAFrame { line: 1, .. })));
    assert!(matches!(read(&newer), Err(E::Version { found: 99, .. })));
    assert!(matches!(read(&empty), Err(E::Empty { .. })));
    assert!(matches!(
        read(&hostile),
        Err(E::ControlCharacter { line: 1, .. })
    ));
    assert_eq!(read(&p).unwrap().len(), 3);
    for (args, want) in [
        (vec!["top", "--replay", "/nonexistent/s.jsonl"], 1),
        (vec!["top", "--replay", bad.to_str().unwrap()], 1),
        (vec!["top", "--replay", newer.to_str().unwrap()], 1),
        (vec!["top", "--replay", empty.to_str().unwrap()], 1),
        (
            vec!["top", "--replay", hostile.to_str().unwrap(), "--print"],
            1,
        ),
        (vec!["top", "--replay", &f, "-d", "0.1"], 2),
        (vec!["top", "--replay", &f, "--count", "0"], 2),
        (vec!["top", "--replay", &f, "--size", "10x2"], 2),
        (vec!["top", "--replay", &f, "--gpu", "0"], 2),
        (vec!["top", "--replay", &f, "--record", "/tmp/x.jsonl"], 2),
    ] {
        let (code, _) = run(&args);
        assert_eq!(code, ExitCode::from(want), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(p.parent().unwrap());
}

#[test]
fn without_devices_top_exits_4() {
    if std::path::Path::new("/dev/dri").exists() {
        eprintln!("SKIP: this host has /dev/dri; the guest tests cover it");
        return;
    }
    let (code, out) = run(&["top", "--once", "--json"]);
    assert_eq!(code, ExitCode::from(4));
    assert!(out.is_empty());
}

/// The model over a synthetic /proc that changes between refreshes (the real scan reads it):
/// a counter that grows is a rate; one that went back (the same id) gives none; a process
/// that exits leaves; a reused pid with another command is another client; hostile names
/// are escaped.
#[test]
fn rates_over_a_synthetic_proc_that_changes() {
    let fdinfo = |id: u32, ns: u64| {
        format!("drm-driver:\tsynthetic\ndrm-client-id:\t{id}\ndrm-engine-render:\t{ns} ns\n")
    };
    let tree = |a_ns: u64, b: Option<(&str, u32, u64)>| {
        let first = fdinfo(1, a_ns);
        let second = b.map(|(_, id, ns)| fdinfo(id, ns));
        let mut procs = vec![Proc {
            pid: 100,
            comm: "render\u{1b}[2J",
            cgroup: Some("0::/user.slice/user-1000.slice\n"),
            fdinfo: &first,
        }];
        if let (Some((comm, ..)), Some(text)) = (b, second.as_ref()) {
            procs.push(Proc {
                pid: 200,
                comm,
                cgroup: Some("0::/system.slice/slurmstepd.scope/job_9/step_0\n"),
                fdinfo: text,
            });
        }
        drm_tree("top-rates", &procs)
    };
    let mut model = drmtool::top::Model::new();
    let mut refresh = |t: (synthetic::TreeDir, drmtool::Options), secs: u64| {
        let mut s = drmtool::top::Sampler::new(t.1.clone(), Vec::new(), None);
        let mut sample = s.sample().expect("a sample of the synthetic tree");
        sample.at = std::time::Duration::from_secs(secs);
        model.update(sample)
    };
    let f = refresh(tree(0, Some(("job", 7, 0))), 0);
    assert_eq!(f.clients.len(), 2, "{f:?}");
    assert!(
        f.clients.iter().all(|c| c.engines.is_empty()),
        "one scan: no rate"
    );
    // A second later: A busy 250 ms of it; B's id 7 counter went 0 -> 500 ms.
    let f = refresh(tree(250_000_000, Some(("job", 7, 500_000_000))), 1);
    let busy = |f: &Frame, pid: u32| {
        f.clients
            .iter()
            .find(|c| c.pid == pid)
            .map(|c| c.engines.get("render").copied())
    };
    assert_eq!(busy(&f, 100), Some(Some(25.0)));
    assert_eq!(busy(&f, 200), Some(Some(50.0)));
    let a = f.clients.iter().find(|c| c.pid == 100).unwrap();
    assert!(!a.comm.contains('\u{1b}'), "{:?}", a.comm);
    let b = f.clients.iter().find(|c| c.pid == 200).unwrap();
    assert_eq!(b.slurm_job.as_deref(), Some("9.0"));
    // B's counter goes back under the same id: no rate. A goes on.
    let f = refresh(tree(500_000_000, Some(("job", 7, 10))), 2);
    assert_eq!(busy(&f, 200), Some(None));
    assert_eq!(busy(&f, 100), Some(Some(25.0)));
    // B exits: its row goes.
    let f = refresh(tree(750_000_000, None), 3);
    assert_eq!(busy(&f, 200), None);
    // pid 200 again, another program and client: no rate from the old one's counter.
    let f = refresh(tree(1_000_000_000, Some(("other", 8, 900_000_000))), 4);
    assert_eq!(busy(&f, 200), Some(None));
    assert_eq!(f.gpus.len(), 1, "the synthetic device");
    assert_eq!(f.gpus[0].busy_history.len(), 5);
}
