//! `drmtool trace` in the guest, against Debian's trace-cmd as the oracle in the same boot.
//!
//! Deterministic workloads (this binary's `workload_entry`): N vgem fences attached and
//! signalled (each on a context of its own, vgem's "unbound" timelines), and M legacy page
//! flips with events on vkms. `trace-cmd record` runs `drmtool trace record`, which runs the
//! workload, so both see the whole workload: the vgem fences (init, signal) and the flips'
//! delivered vblank events must be exactly the same sets in both, in the counts the
//! workload made; drmtool's per-vblank events must all be in trace-cmd's; timestamps must be
//! consistent (init before signal, delivered sequences rising, all inside the recording);
//! the file must validate against tools/schema/trace.schema.json and parse strictly; and
//! `trace summary`'s figures must equal the ones recomputed here from the raw events.
//!
//! A third workload, on the kernels with sw_sync (the self-built lanes): one sw_sync timeline
//! whose fences signal one step at a time, with known gaps.
//!
//! Tracing needs a kernel with event tracing and perf events: Debian's stock images and the
//! project's own kernels (vm/config/guest.config turns on FTRACE and the default tracers,
//! required.list checks EVENT_TRACING and PERF_EVENTS) have them; a kernel without reports
//! `tracing` in VM_MISSING_FEATURES and these tests skip there (counted). A virtio-gpu
//! EXECBUFFER out-fence workload needs virgl, which only scripts/guest-virgl's lane gets: it
//! runs this binary's virtio tests there.

mod schema_common;

use kernel_tests::{require_feature, skip};
use schema_common::validate;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const CLI_ENV: &str = "DRMTOOL_TRACE_CLI_ARGS";
const WORK_ENV: &str = "DRMTOOL_TRACE_WORKLOAD";
const TRACE_CMD: &str = "/usr/bin/trace-cmd";

fn me() -> String {
    std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// drmtool's command line in a process of its own (arguments in [`CLI_ENV`]), so that
/// trace-cmd can run it.
#[test]
fn cli_entry() {
    kernel_tests::sample::cli_entry(CLI_ENV);
}

/// The workload ([`WORK_ENV`]: `vgem:N`, `flips:M`, `swsync:K`, `virtio:J`, comma-separated,
/// in order); run plainly it does nothing.
#[test]
fn workload_entry() {
    let Ok(w) = std::env::var(WORK_ENV) else {
        return;
    };
    for part in w.split(',') {
        let (kind, n) = part.split_once(':').expect("KIND:N");
        let n: u64 = n.parse().expect("a count");
        match kind {
            "vgem" => drmtool::sample::workload::vgem_fences(n).expect("vgem fences"),
            "flips" => drmtool::sample::workload::vkms_flips(n).expect("vkms flips"),
            "virtio" => {
                drmtool::sample::workload::virtio_execbuffers(n).expect("virtio-gpu submissions")
            }
            "swsync" => drmtool::sample::workload::sw_sync_timeline(
                u32::try_from(n).expect("a u32 count"),
                SW_SYNC_GAP,
            )
            .expect("sw_sync timeline"),
            other => panic!("unknown workload {other}"),
        }
    }
    std::process::exit(0);
}

/// `env -u KERNEL_TESTS_SIGNAL_STORM [VAR=VALUE...] <this binary> TEST ...` as argv.
fn entry(test: &str, env: &[(&str, String)]) -> Vec<String> {
    let mut v = vec![
        "env".to_string(),
        "-u".into(),
        "KERNEL_TESTS_SIGNAL_STORM".into(),
    ];
    v.extend(env.iter().map(|(k, val)| format!("{k}={val}")));
    v.extend([
        me(),
        test.into(),
        "--exact".into(),
        "--nocapture".into(),
        "-q".into(),
    ]);
    v
}

/// drmtool `args` in its own process (through [`cli_entry`]).
fn drmtool_argv(args: &[String]) -> Vec<String> {
    entry("cli_entry", &[(CLI_ENV, args.join("\x1f"))])
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/drmtool-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: strict JSON: {e}", p.display()))
}

/// One event of trace-cmd's report: name and its `key=value` fields.
#[derive(Debug)]
struct TcEvent {
    name: String,
    fields: BTreeMap<String, String>,
}

/// Parses `trace-cmd report` lines (`comm-pid [cpu] ts: event: k=v, k=v ...`) of the
/// events named in `names`.
fn parse_report(text: &str, names: &[&str]) -> Vec<TcEvent> {
    let mut out = Vec::new();
    for line in text.lines() {
        for &n in names {
            let tag = format!(" {n}: ");
            let Some(at) = line.find(&tag) else { continue };
            let fields = line[at + tag.len()..]
                .split_whitespace()
                .filter_map(|kv| kv.trim_end_matches(',').split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            out.push(TcEvent {
                name: n.to_string(),
                fields,
            });
            break;
        }
    }
    out
}

/// The raw instants of `system:event` in a drmtool trace.
fn instants<'a>(t: &'a Value, full: &str) -> Vec<&'a Value> {
    t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == full)
        .collect()
}

macro_rules! tracing_guest {
    () => {{
        if !kernel_tests::in_guest() {
            skip!("not in a vm guest: no tracefs or DRM devices here");
        }
        require_feature!("tracing");
        require_feature!("vgem");
        require_feature!("vkms");
        if drmtool::trace::record::tracefs().is_none() {
            panic!(
                "the kernel has event tracing but no tracefs is mounted (the guest init mounts it)"
            );
        }
    }};
}

const FENCES: usize = 50;
const FLIPS: usize = 30;

/// Runs `trace-cmd record -e dma_fence -e drm` over `drmtool trace record --events EVENTS
/// -o DIR/t.json -- <workload WORKLOAD>`; checks what any good recording must be (exit 0,
/// the schema, strict JSON, nothing lost, corrupt or undecoded) and returns drmtool's trace
/// and the events of `names` in trace-cmd's report of the same run.
fn record_under_trace_cmd(
    dir: &Path,
    workload: &str,
    events: &str,
    names: &[&str],
) -> (Value, Vec<TcEvent>) {
    let json = dir.join("t.json");
    let dat = dir.join("t.dat");
    let mut args: Vec<String> = ["trace", "record", "--events", events, "-o"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(json.display().to_string());
    args.push("--".into());
    args.extend(entry("workload_entry", &[(WORK_ENV, workload.to_string())]));
    let out = Command::new(TRACE_CMD)
        .args(["record", "-q", "-e", "dma_fence", "-e", "drm", "-o"])
        .arg(&dat)
        .args(drmtool_argv(&args))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "trace-cmd record: {:?}\n{err}",
        out.status
    );
    eprintln!("{err}");
    let t = read_json(&json);
    validate(&t, "trace.schema.json", "trace record");
    let od = &t["otherData"];
    assert_eq!(od["exit_status"], 0, "the workload's status");
    assert_eq!(od["lost"], 0, "nothing lost at this rate: {od}");
    assert_eq!(
        (od["corrupt_bytes"].as_u64(), od["undecoded"].as_u64()),
        (Some(0), Some(0))
    );
    let rep = Command::new(TRACE_CMD)
        .args(["report", "-i"])
        .arg(&dat)
        .output()
        .unwrap();
    assert!(rep.status.success(), "trace-cmd report: {rep:?}");
    let rep = String::from_utf8_lossy(&rep.stdout);
    (t, parse_report(&rep, names))
}

/// `trace summary --json` of `json`, validated against its schema.
fn summary_of(json: &Path) -> Value {
    let (code, s) =
        drmtool::cli::run_captured(&["trace", "summary", "--json", json.to_str().unwrap()]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{s}");
    let s: Value = serde_json::from_str(&s).unwrap();
    validate(&s, "trace-summary.schema.json", "trace summary --json");
    s
}

/// Checks the summary `s`'s row for the fence timeline `track`: `lat.len()` fences, none
/// unsignalled, and p50/p99/max equal to the nearest-rank figures of `lat` (the
/// emit-to-signal times recomputed from the raw events, µs).
fn assert_timeline_row(s: &Value, track: &str, mut lat: Vec<f64>) {
    lat.sort_by(f64::total_cmp);
    let rank = |p: f64| lat[((p / 100.0 * lat.len() as f64).ceil() as usize).max(1) - 1];
    let row = s["timelines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["track"] == track)
        .unwrap_or_else(|| panic!("no summary row {track}: {s}"));
    assert_eq!(
        (row["fences"].as_u64(), row["unsignaled"].as_u64()),
        (Some(lat.len() as u64), Some(0)),
        "{row}"
    );
    for (k, want) in [
        ("p50", rank(50.0)),
        ("p99", rank(99.0)),
        ("max", lat[lat.len() - 1]),
    ] {
        let got = row["emit_to_signal_us"][k].as_f64().unwrap();
        assert!((got - want).abs() < 1e-6, "{track} {k}: {got} vs {want}");
    }
}

#[test]
fn record_agrees_with_trace_cmd_and_the_summary_with_the_events() {
    tracing_guest!();
    if !Path::new(TRACE_CMD).exists() {
        skip!("{TRACE_CMD} is not installed (scripts/setup installs Debian's trace-cmd)");
    }
    let dir = scratch("oracle");
    let json = dir.join("t.json");
    let names = [
        "dma_fence_init",
        "dma_fence_signaled",
        "drm_vblank_event_delivered",
        "drm_vblank_event",
    ];
    let (t, tc) = record_under_trace_cmd(
        &dir,
        &format!("vgem:{FENCES},flips:{FLIPS}"),
        "fence,vblank",
        &names,
    );
    let od = &t["otherData"];
    let (start, end) = (
        od["start_ns"].as_f64().unwrap() / 1e3,
        od["end_ns"].as_f64().unwrap() / 1e3,
    );

    // vgem fences: the same (event, context, seqno) set, FENCES of each.
    let key = |ev: &str, c: &str, s: &str| (ev.to_string(), c.to_string(), s.to_string());
    let tc_fences: BTreeSet<_> = tc
        .iter()
        .filter(|e| {
            e.name.starts_with("dma_fence")
                && e.fields.get("driver").map(String::as_str) == Some("vgem")
        })
        .map(|e| key(&e.name, &e.fields["context"], &e.fields["seqno"]))
        .collect();
    let mut ours = BTreeSet::new();
    let mut init_ts = BTreeMap::new();
    let mut lat = BTreeMap::new();
    for ev in ["dma_fence_init", "dma_fence_signaled"] {
        for e in instants(&t, &format!("dma_fence:{ev}")) {
            let a = &e["args"];
            if a["driver"] != "vgem" {
                continue;
            }
            let ts = e["ts"].as_f64().unwrap();
            assert!(ts >= start && ts <= end, "{e} outside [{start}, {end}]");
            let c = a["context"].as_i64().unwrap();
            ours.insert(key(
                ev,
                &c.to_string(),
                &a["seqno"].as_i64().unwrap().to_string(),
            ));
            if ev == "dma_fence_init" {
                init_ts.insert(c, ts);
            } else {
                let t0 = init_ts[&c];
                assert!(
                    ts >= t0,
                    "context {c}: signalled at {ts} before its init at {t0}"
                );
                lat.insert(c, ts - t0);
            }
        }
    }
    let count =
        |s: &BTreeSet<(String, String, String)>, ev: &str| s.iter().filter(|k| k.0 == ev).count();
    assert_eq!(count(&ours, "dma_fence_init"), FENCES, "{ours:?}");
    assert_eq!(count(&ours, "dma_fence_signaled"), FENCES);
    assert_eq!(
        ours, tc_fences,
        "drmtool and trace-cmd saw the same vgem fences"
    );

    // Flips: the same delivered (crtc, seq) set, FLIPS of them, sequences rising. Only
    // events for a file count: the atomic helpers' own commits (SETCRTC here, fbdev's)
    // complete through events with no file (`file` NULL), which are not the workload's.
    let user_file = |f: &str| !matches!(f, "0" | "0x0" | "(nil)" | "0000000000000000");
    let tc_delivered: BTreeSet<(i64, i64)> = tc
        .iter()
        .filter(|e| e.name == "drm_vblank_event_delivered")
        .filter(|e| e.fields.get("file").is_some_and(|f| user_file(f)))
        .map(|e| {
            (
                e.fields["crtc"].parse().unwrap(),
                e.fields["seq"].parse().unwrap(),
            )
        })
        .collect();
    let delivered: Vec<(i64, i64)> = instants(&t, "drm:drm_vblank_event_delivered")
        .iter()
        .filter(|e| e["args"]["file"].as_i64().is_some_and(|f| f != 0))
        .map(|e| {
            (
                e["args"]["crtc"].as_i64().unwrap(),
                e["args"]["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(delivered.len(), FLIPS, "{delivered:?}");
    assert!(
        delivered.windows(2).all(|w| w[1].1 > w[0].1),
        "rising: {delivered:?}"
    );
    assert_eq!(
        delivered.iter().copied().collect::<BTreeSet<_>>(),
        tc_delivered
    );
    // Every vblank drmtool saw, trace-cmd saw (its window is wider).
    let tc_vbl: BTreeSet<(i64, i64)> = tc
        .iter()
        .filter(|e| e.name == "drm_vblank_event")
        .map(|e| {
            (
                e.fields["crtc"].parse().unwrap(),
                e.fields["seq"].parse().unwrap(),
            )
        })
        .collect();
    let vbl = instants(&t, "drm:drm_vblank_event");
    assert!(
        vbl.len() >= FLIPS,
        "a vblank per flip at least: {}",
        vbl.len()
    );
    for e in &vbl {
        let k = (
            e["args"]["crtc"].as_i64().unwrap(),
            e["args"]["seq"].as_i64().unwrap(),
        );
        assert!(tc_vbl.contains(&k), "vblank {k:?} not in trace-cmd's");
    }
    assert_eq!(
        od["events"]["drm:drm_vblank_event"].as_u64(),
        Some(vbl.len() as u64),
        "the header counts what the file holds"
    );

    // The summary, recomputed: each vgem context's one fence, and CRTC 0's intervals.
    let s = summary_of(&json);
    for (c, l) in &lat {
        let track = drmtool::trace::chrome::timeline_label("vgem", "unbound", *c);
        assert_timeline_row(&s, &track, vec![*l]);
    }
    let mut by_crtc: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for e in &vbl {
        by_crtc
            .entry(e["args"]["crtc"].as_i64().unwrap())
            .or_default()
            .push(e["ts"].as_f64().unwrap());
    }
    for (crtc, mut ts) in by_crtc {
        ts.sort_by(f64::total_cmp);
        let iv: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = iv.iter().sum::<f64>() / iv.len() as f64;
        let row = s["crtcs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["crtc"] == crtc)
            .unwrap();
        assert_eq!(row["vblanks"].as_u64(), Some(ts.len() as u64));
        let got = row["mean_interval_us"].as_f64().unwrap();
        assert!((got - mean).abs() < 1e-6, "crtc {crtc}: {got} vs {mean}");
        // vkms's vblank timer runs at 60 Hz (16.7 ms); under TCG it is what it is: shown,
        // never asserted.
        eprintln!(
            "crtc {crtc}: {} vblanks, mean interval {mean:.0} us",
            ts.len()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

const SW_FENCES: usize = 20;
const SW_SYNC_GAP: std::time::Duration = std::time::Duration::from_millis(2);

/// One sw_sync timeline with SW_FENCES fences at values 1..=SW_FENCES, advanced one step
/// every SW_SYNC_GAP: drmtool and trace-cmd see the same (event, context, seqno) set; the
/// fences are all on one context, signalled in seqno order, each after its init and at
/// least SW_SYNC_GAP after the one before (the workload sleeps that long between steps); the
/// summary's row for the timeline has the figures recomputed here from the raw events.
#[test]
fn a_sw_sync_timeline_signals_in_order_as_trace_cmd_saw() {
    tracing_guest!();
    require_feature!("sw_sync");
    if !Path::new(TRACE_CMD).exists() {
        skip!("{TRACE_CMD} is not installed (scripts/setup installs Debian's trace-cmd)");
    }
    let dir = scratch("sw_sync");
    let json = dir.join("t.json");
    let (t, tc) = record_under_trace_cmd(
        &dir,
        &format!("swsync:{SW_FENCES}"),
        "fence",
        &["dma_fence_init", "dma_fence_signaled"],
    );
    let sw = |a: &Value| a["driver"] == "sw_sync";
    let key = |ev: &str, c: &str, s: &str| (ev.to_string(), c.to_string(), s.to_string());
    let tc_set: BTreeSet<_> = tc
        .iter()
        .filter(|e| e.fields.get("driver").map(String::as_str) == Some("sw_sync"))
        .map(|e| key(&e.name, &e.fields["context"], &e.fields["seqno"]))
        .collect();
    let mut ours = BTreeSet::new();
    let mut init: BTreeMap<i64, f64> = BTreeMap::new();
    let mut signals: Vec<(f64, i64)> = Vec::new();
    let mut contexts = BTreeSet::new();
    let mut timeline = String::new();
    for ev in ["dma_fence_init", "dma_fence_signaled"] {
        for e in instants(&t, &format!("dma_fence:{ev}")) {
            let a = &e["args"];
            if !sw(a) {
                continue;
            }
            let (c, seq) = (a["context"].as_i64().unwrap(), a["seqno"].as_i64().unwrap());
            contexts.insert(c);
            timeline = a["timeline"].as_str().unwrap().to_string();
            ours.insert(key(ev, &c.to_string(), &seq.to_string()));
            let ts = e["ts"].as_f64().unwrap();
            if ev == "dma_fence_init" {
                init.insert(seq, ts);
            } else {
                signals.push((ts, seq));
            }
        }
    }
    assert_eq!(contexts.len(), 1, "one timeline, one context: {contexts:?}");
    let context = *contexts.first().unwrap();
    let seqnos: Vec<i64> = (1..=SW_FENCES as i64).collect();
    assert_eq!(init.keys().copied().collect::<Vec<_>>(), seqnos, "{init:?}");
    signals.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        signals.iter().map(|s| s.1).collect::<Vec<_>>(),
        seqnos,
        "signalled in seqno order: {signals:?}"
    );
    let gap_us = SW_SYNC_GAP.as_secs_f64() * 1e6;
    for w in signals.windows(2) {
        assert!(
            w[1].0 - w[0].0 >= gap_us,
            "seqno {} signalled {} us after seqno {}, under the workload's {gap_us} us sleep",
            w[1].1,
            w[1].0 - w[0].0,
            w[0].1
        );
    }
    let lat: Vec<f64> = signals
        .iter()
        .map(|&(ts, seq)| {
            let t0 = init[&seq];
            assert!(
                ts >= t0,
                "seqno {seq}: signalled at {ts} before its init at {t0}"
            );
            ts - t0
        })
        .collect();
    assert_eq!(
        ours, tc_set,
        "drmtool and trace-cmd saw the same sw_sync fences"
    );

    // The summary's row, recomputed: nearest-rank percentiles of the emit-to-signal times.
    let track = drmtool::trace::chrome::timeline_label("sw_sync", &timeline, context);
    assert_eq!(lat.len(), SW_FENCES);
    assert_timeline_row(&summary_of(&json), &track, lat);
    std::fs::remove_dir_all(&dir).unwrap();
}

const VIRTIO_SUBMITS: usize = 20;

/// virtio-gpu with virgl (scripts/guest-virgl's lane; elsewhere `virgl` is missing and this
/// skips, counted): VIRTIO_SUBMITS EXECBUFFERs with out-fences, each waited for. drmtool and
/// trace-cmd see the same virtio_gpu (event, context, seqno) multiset; the emitted fences
/// are VIRTIO_SUBMITS on one context, seqnos consecutive and rising, each signalled after
/// its emit, in seqno order; every init has seqno 0 (the driver numbers a fence at emit,
/// drivers/gpu/drm/virtio/virtgpu_fence.c) and is no fence of the timeline; the summary's
/// row has the VIRTIO_SUBMITS fences, none unsignalled, with the emit-to-signal figures
/// recomputed here.
#[test]
fn virtio_gpu_execbuffer_out_fences_as_trace_cmd_saw() {
    if !kernel_tests::in_guest() {
        skip!("not in a vm guest: no tracefs or DRM devices here");
    }
    require_feature!("tracing");
    require_feature!("virgl");
    assert!(
        drmtool::trace::record::tracefs().is_some(),
        "the kernel has event tracing but no tracefs is mounted (the guest init mounts it)"
    );
    if !Path::new(TRACE_CMD).exists() {
        skip!("{TRACE_CMD} is not installed (scripts/setup installs Debian's trace-cmd)");
    }
    let dir = scratch("virtio");
    let json = dir.join("t.json");
    let names = ["dma_fence_init", "dma_fence_emit", "dma_fence_signaled"];
    let (t, tc) =
        record_under_trace_cmd(&dir, &format!("virtio:{VIRTIO_SUBMITS}"), "fence", &names);
    let key = |ev: &str, c: &str, s: &str| (ev.to_string(), c.to_string(), s.to_string());
    let mut tc_keys: Vec<_> = tc
        .iter()
        .filter(|e| e.fields.get("driver").map(String::as_str) == Some("virtio_gpu"))
        .map(|e| key(&e.name, &e.fields["context"], &e.fields["seqno"]))
        .collect();
    tc_keys.sort();
    let mut ours = Vec::new();
    let mut inits = Vec::new();
    let mut emits: Vec<(f64, i64, i64)> = Vec::new();
    let mut signals: BTreeMap<i64, f64> = BTreeMap::new();
    let mut timeline = String::new();
    for ev in names {
        for e in instants(&t, &format!("dma_fence:{ev}")) {
            let a = &e["args"];
            if a["driver"] != "virtio_gpu" {
                continue;
            }
            let (c, seq) = (a["context"].as_i64().unwrap(), a["seqno"].as_i64().unwrap());
            ours.push(key(ev, &c.to_string(), &seq.to_string()));
            let ts = e["ts"].as_f64().unwrap();
            match ev {
                "dma_fence_init" => inits.push(seq),
                "dma_fence_emit" => {
                    timeline = a["timeline"].as_str().unwrap().to_string();
                    emits.push((ts, c, seq));
                }
                _ => {
                    assert!(
                        signals.insert(seq, ts).is_none(),
                        "seqno {seq} signalled twice"
                    );
                }
            }
        }
    }
    ours.sort();
    assert_eq!(
        ours, tc_keys,
        "drmtool and trace-cmd saw the same virtio_gpu fence events"
    );
    assert_eq!(inits, vec![0; VIRTIO_SUBMITS], "every init with seqno 0");
    emits.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(emits.len(), VIRTIO_SUBMITS, "{emits:?}");
    let contexts: BTreeSet<i64> = emits.iter().map(|e| e.1).collect();
    assert_eq!(contexts.len(), 1, "one fence context: {contexts:?}");
    let context = emits[0].1;
    let first = emits[0].2;
    assert_eq!(
        emits.iter().map(|e| e.2).collect::<Vec<_>>(),
        (first..first + VIRTIO_SUBMITS as i64).collect::<Vec<_>>(),
        "emitted in order, seqnos consecutive"
    );
    assert_eq!(
        signals.keys().copied().collect::<Vec<_>>(),
        (first..first + VIRTIO_SUBMITS as i64).collect::<Vec<_>>(),
        "every emitted fence signalled"
    );
    let mut by_time: Vec<(f64, i64)> = signals.iter().map(|(&s, &ts)| (ts, s)).collect();
    by_time.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        by_time.windows(2).all(|w| w[0].1 < w[1].1),
        "signalled in seqno order: {by_time:?}"
    );
    let lat: Vec<f64> = emits
        .iter()
        .map(|&(ts, _, seq)| {
            let end = signals[&seq];
            assert!(
                end >= ts,
                "seqno {seq}: signalled at {end} before its emit at {ts}"
            );
            end - ts
        })
        .collect();

    // The summary's row, recomputed: emit to signal, nearest rank.
    let track = drmtool::trace::chrome::timeline_label("virtio_gpu", &timeline, context);
    assert_eq!(lat.len(), VIRTIO_SUBMITS);
    assert_timeline_row(&summary_of(&json), &track, lat);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The command's exit status comes back, and the trace is written all the same; a group the
/// kernel lacks, asked for by name, is an error listing what the kernel has (a probe of
/// tracefs decides which is expected); an unprivileged user gets the permission error.
#[test]
fn statuses_absent_groups_and_permissions() {
    tracing_guest!();
    let dir = scratch("status");
    let json = dir.join("t.json");
    let j = json.to_str().unwrap();
    let (code, _) = drmtool::cli::run_captured(&[
        "trace", "record", "--events", "fence", "-o", j, "--", "sh", "-c", "exit 3",
    ]);
    assert_eq!(
        code,
        std::process::ExitCode::from(3),
        "the command's status"
    );
    let t = read_json(&json);
    validate(&t, "trace.schema.json", "trace record of a failing command");
    assert_eq!(t["otherData"]["exit_status"], 3);

    let root = drmtool::trace::record::tracefs().unwrap();
    let has_gpu_mem = root.join("events/gpu_mem/gpu_mem_total").is_dir();
    let argv = drmtool_argv(&[
        "trace".into(),
        "record".into(),
        "--events".into(),
        "gpumem".into(),
        "--duration".into(),
        "0.2".into(),
        "-o".into(),
        j.into(),
    ]);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if has_gpu_mem {
        assert!(out.status.success(), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("this kernel has no tracepoint of gpumem"),
            "{err}"
        );
        assert!(err.contains("dma_fence"), "it lists what there is: {err}");
    }

    // As nobody: tracefs is root-only (or perf refuses system-wide tracing).
    let _ = std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777));
    let nobody = format!("{}/n.json", dir.display());
    let mut argv = vec![
        "setpriv".to_string(),
        "--reuid=65534".into(),
        "--regid=65534".into(),
        "--clear-groups".into(),
    ];
    argv.extend(drmtool_argv(&[
        "trace".into(),
        "record".into(),
        "--duration".into(),
        "0.2".into(),
        "-o".into(),
        nobody.clone(),
    ]));
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("tracefs is root-only")
            || err.contains("perf_event_paranoid")
            || err.contains("no tracefs"),
        "{err}"
    );
    assert!(!Path::new(&nobody).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ring too small for a burst loses events: they are counted in the file and reported,
/// and what was kept plus what was lost covers the burst, through ftrace (the default) and
/// through perf.
#[test]
fn a_full_ring_counts_what_it_lost() {
    tracing_guest!();
    for backend in ["ftrace", "perf"] {
        full_ring(backend);
    }
}

fn full_ring(backend: &str) {
    let dir = scratch(&format!("lost-{backend}"));
    let json = dir.join("t.json");
    let n = 4000;
    let mut args: Vec<String> = [
        "trace",
        "record",
        "--events",
        "fence",
        "--buffer-kib",
        "4",
        "--memory-interval",
        "0",
        "--backend",
        backend,
        "-o",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(json.display().to_string());
    args.push("--".into());
    args.extend(entry("workload_entry", &[(WORK_ENV, format!("vgem:{n}"))]));
    let argv = drmtool_argv(&args);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let t = read_json(&json);
    let od = &t["otherData"];
    assert_eq!(od["backend"], backend, "{od}");
    let lost = od["lost"].as_u64().unwrap();
    let kept = instants(&t, "dma_fence:dma_fence_init").len()
        + instants(&t, "dma_fence:dma_fence_signaled").len();
    eprintln!("{backend}: kept {kept}, lost {lost}");
    assert!(
        lost > 0,
        "{backend}: a 4 KiB ring under {n} fences must overflow (kept {kept})"
    );
    assert!(err.contains("events lost"), "{err}");
    assert!(
        kept as u64 + lost >= 2 * n,
        "{backend}: kept {kept} + lost {lost} < {}",
        2 * n
    );
    let all_kept: u64 = od["events"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    if backend == "perf" {
        // The exact books: every hit the counters saw was kept or counted lost.
        let fired: u64 = od["fired"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().expect("every counter read"))
            .sum();
        assert_eq!(fired, all_kept + lost, "fired = kept + lost: {od}");
        assert!(
            od["fired"]["dma_fence:dma_fence_init"].as_u64().unwrap() >= n,
            "{od}"
        );
    } else {
        // The exact books of the rings: every event read out of them was decoded and kept,
        // and what they could not keep is what the file says was lost.
        let ring = &od["ring"];
        assert_eq!(ring["read"].as_u64(), Some(all_kept), "read = kept: {od}");
        assert_eq!(
            ring["overrun"].as_u64().unwrap()
                + ring["dropped"].as_u64().unwrap()
                + ring["entries"].as_u64().unwrap(),
            lost,
            "{od}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The recording runs in a tracefs instance of its own: the top level's events, ring size
/// and clock (someone else's tracing) are as they were before and after, the instance is
/// gone after, and one left by a recorder that no longer runs is removed. The same events
/// written as Perfetto's protobuf: a `Trace` whose packets name every fence event.
#[test]
fn records_in_an_instance_of_its_own_and_leaves_tracing_as_it_was() {
    tracing_guest!();
    let root = drmtool::trace::record::tracefs().unwrap();
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    // Someone else's tracing at the top level: one fence event on, a ring size of its own.
    std::fs::write(root.join("events/dma_fence/dma_fence_signaled/enable"), "1").unwrap();
    std::fs::write(root.join("buffer_size_kb"), "1234").unwrap();
    let before = (
        read("events/dma_fence/enable"),
        read("buffer_size_kb"),
        read("trace_clock"),
        read("tracing_on"),
    );
    let stale = root.join("instances/drmtool-4000000-1");
    std::fs::create_dir(&stale).unwrap();
    let dir = scratch("instance");
    let pf = dir.join("t.pftrace");
    let mut args: Vec<String> = ["trace", "record", "--events", "fence", "-o"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(pf.display().to_string());
    args.push("--".into());
    args.extend(entry(
        "workload_entry",
        &[(WORK_ENV, "vgem:50".to_string())],
    ));
    let argv = drmtool_argv(&args);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("(ftrace,"), "{err}");
    let after = (
        read("events/dma_fence/enable"),
        read("buffer_size_kb"),
        read("trace_clock"),
        read("tracing_on"),
    );
    assert_eq!(before, after, "the top level's tracing is untouched");
    assert!(!stale.exists(), "a dead recorder's instance is removed");
    let left: Vec<_> = std::fs::read_dir(root.join("instances"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("drmtool-"))
        .collect();
    assert!(left.is_empty(), "instances left: {left:?}");
    std::fs::write(root.join("events/dma_fence/dma_fence_signaled/enable"), "0").unwrap();
    // A protobuf Trace: packets (field 1, length-delimited: 0x0a) all the way, with the
    // fence events' names in them.
    let b = std::fs::read(&pf).unwrap();
    assert_eq!(b.first(), Some(&0x0a), "a Trace's first packet");
    let has = |s: &[u8]| b.windows(s.len()).any(|w| w == s);
    assert!(has(b"dma_fence:dma_fence_init"));
    assert!(has(b"dma_fence:dma_fence_signaled"));
    let mut at = 0;
    let mut packets = 0;
    while at < b.len() {
        assert_eq!(b[at], 0x0a, "packet {packets} at {at}");
        let (mut len, mut shift) = (0usize, 0);
        at += 1;
        loop {
            let byte = b[at];
            at += 1;
            len |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        at += len;
        packets += 1;
    }
    assert_eq!(at, b.len(), "packets end where the file ends");
    assert!(packets > 100, "{packets} packets for 50 fences");
    std::fs::remove_dir_all(&dir).unwrap();
}
