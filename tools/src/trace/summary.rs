//! `drmtool trace summary FILE`: the latency figures people ask of a GPU trace, recomputed
//! from the trace file's own events (so a file edited or merged elsewhere is summarised as
//! it is): fence emit-to-signal per timeline, vblank intervals per CRTC, fence waits per
//! process.

use super::chrome::{ALLOC_CAT, DISPLAY_PID, FENCE_PID, VBLANK, WAIT};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Version of the summary JSON (`schemas/trace-summary.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

/// Order statistics in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// One fence timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// The track (`driver timeline (context N)`).
    pub track: String,
    /// Fences begun in the trace.
    pub fences: u64,
    /// Of those, the ones with no signal in the trace.
    pub unsignaled: u64,
    /// Emit (or init) to signal, of the signalled ones; `None` when none signalled.
    pub emit_to_signal_us: Option<Latency>,
}

/// One CRTC's vblanks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Crtc {
    /// CRTC index as the kernel numbers it.
    pub crtc: i64,
    /// Vblank events.
    pub vblanks: u64,
    /// Mean interval between consecutive vblanks (µs); `None` under two vblanks.
    pub mean_interval_us: Option<f64>,
    /// Standard deviation of the intervals (µs): the jitter.
    pub jitter_us: Option<f64>,
    /// Shortest and longest interval (µs).
    pub min_interval_us: Option<f64>,
    /// See `min_interval_us`.
    pub max_interval_us: Option<f64>,
}

/// One process's fence waits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waits {
    /// The process.
    pub pid: u64,
    /// Completed waits.
    pub waits: u64,
    /// Their total (µs).
    pub total_us: f64,
    /// The longest (µs).
    pub max_us: f64,
}

/// The summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The trace's span (µs).
    pub duration_us: f64,
    /// Per tracepoint, how many hits (from the file's `otherData`).
    pub events: BTreeMap<String, u64>,
    /// Samples the kernel dropped (ring full).
    pub lost: u64,
    /// Per fence timeline.
    pub timelines: Vec<Timeline>,
    /// Per CRTC.
    pub crtcs: Vec<Crtc>,
    /// Per process.
    pub waits: Vec<Waits>,
    /// GPU memory allocation failures, by process, cgroup, request and errno.
    pub alloc_failures: Vec<AllocFailures>,
}

/// Allocation failures of one process with one request and errno.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct AllocFailures {
    /// The process.
    pub pid: u64,
    /// Its comm, as the trace has it (escaped when recorded).
    pub comm: Option<String>,
    /// Its cgroup.
    pub cgroup: Option<String>,
    /// The request's name.
    pub ioctl: String,
    /// `ENOMEM` or `ENOSPC`.
    pub errno: String,
    /// How many.
    pub count: u64,
}

/// Nearest-rank percentile of sorted `v` (non-empty).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let n = v.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    v[rank.clamp(1, n) - 1]
}

fn latency(mut v: Vec<f64>) -> Option<Latency> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Latency {
        p50: percentile(&v, 50.0),
        p99: percentile(&v, 99.0),
        max: v[v.len() - 1],
    })
}

/// Why a file is not a trace this command can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotATrace(pub &'static str);

/// Summarises a trace (the JSON `drmtool trace record` writes).
///
/// # Errors
/// [`NotATrace`] when there is no `traceEvents` array.
pub fn summarize(trace: &Value) -> Result<Summary, NotATrace> {
    let evs = trace["traceEvents"]
        .as_array()
        .ok_or(NotATrace("no traceEvents array"))?;
    let f = |e: &Value, k: &str| e[k].as_f64();
    let mut begins: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut lat: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut begun: BTreeMap<String, u64> = BTreeMap::new();
    let mut vblanks: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    let mut waits: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for e in evs {
        let Some(t) = f(e, "ts") else { continue };
        lo = lo.min(t);
        hi = hi.max(t);
        let ph = e["ph"].as_str().unwrap_or("");
        let name = e["name"].as_str().unwrap_or("");
        let pid = e["pid"].as_u64();
        match ph {
            "b" | "e" if pid == Some(FENCE_PID) => {
                let key = (name.to_string(), e["id"].as_str().unwrap_or("").to_string());
                if ph == "b" {
                    *begun.entry(name.to_string()).or_default() += 1;
                    lat.entry(name.to_string()).or_default();
                    begins.insert(key, t);
                } else if let Some(b) = begins.remove(&key) {
                    lat.entry(name.to_string()).or_default().push(t - b);
                }
            }
            "i" if pid == Some(DISPLAY_PID) && name == VBLANK => {
                let crtc = e["args"]["crtc"].as_i64().unwrap_or(-1);
                vblanks.entry(crtc).or_default().push(t);
            }
            "X" if name == WAIT => {
                if let (Some(p), Some(d)) = (pid, f(e, "dur")) {
                    waits.entry(p).or_default().push(d);
                }
            }
            _ => {}
        }
    }
    let timelines = lat
        .into_iter()
        .map(|(track, v)| {
            let fences = begun.get(&track).copied().unwrap_or(0);
            Timeline {
                unsignaled: fences.saturating_sub(v.len() as u64),
                fences,
                emit_to_signal_us: latency(v),
                track,
            }
        })
        .collect();
    let crtcs = vblanks
        .into_iter()
        .map(|(crtc, mut ts)| {
            ts.sort_by(f64::total_cmp);
            let iv: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
            let n = iv.len() as f64;
            let mean = (!iv.is_empty()).then(|| iv.iter().sum::<f64>() / n);
            let jitter =
                mean.map(|m| (iv.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n).sqrt());
            Crtc {
                crtc,
                vblanks: ts.len() as u64,
                mean_interval_us: mean,
                jitter_us: jitter,
                min_interval_us: iv.iter().copied().reduce(f64::min),
                max_interval_us: iv.iter().copied().reduce(f64::max),
            }
        })
        .collect();
    let waits = waits
        .into_iter()
        .map(|(pid, d)| Waits {
            pid,
            waits: d.len() as u64,
            total_us: d.iter().sum(),
            max_us: d.iter().copied().fold(0.0, f64::max),
        })
        .collect();
    let other = &trace["otherData"];
    let events = other["events"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Summary {
        schema_version: SCHEMA_VERSION,
        duration_us: if hi >= lo { hi - lo } else { 0.0 },
        events,
        lost: other["lost"].as_u64().unwrap_or(0),
        timelines,
        crtcs,
        waits,
        alloc_failures: alloc_failures(evs),
    })
}

/// The allocation failures' slices ([`ALLOC_CAT`]), counted by process, cgroup, request
/// and errno.
fn alloc_failures(evs: &[Value]) -> Vec<AllocFailures> {
    type Key = (u64, Option<String>, Option<String>, String, String);
    let mut by: BTreeMap<Key, u64> = BTreeMap::new();
    for e in evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == ALLOC_CAT)
    {
        let a = &e["args"];
        let text = |k: &str| a[k].as_str().map(str::to_string);
        let key = (
            e["pid"].as_u64().unwrap_or(0),
            text("comm"),
            text("cgroup"),
            text("ioctl").unwrap_or_default(),
            text("errno").unwrap_or_default(),
        );
        *by.entry(key).or_default() += 1;
    }
    by.into_iter()
        .map(|((pid, comm, cgroup, ioctl, errno), count)| AllocFailures {
            pid,
            comm,
            cgroup,
            ioctl,
            errno,
            count,
        })
        .collect()
}

fn us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

/// The summary as tables. Track names are a driver's and a user's text: escaped.
pub fn render(s: &Summary) -> String {
    let esc = |t: &str| crate::Untrusted::new(t.as_bytes()).escaped();
    let mut o = format!(
        "trace: {:.1} ms, {} events, {} lost\n\nfence timelines (emit -> signal, us)\n",
        s.duration_us / 1000.0,
        s.events.values().sum::<u64>(),
        s.lost
    );
    o.push_str("  fences  unsignaled       p50       p99       max  timeline\n");
    for t in &s.timelines {
        let l = t.emit_to_signal_us.as_ref();
        o.push_str(&format!(
            "  {:>6}  {:>10}  {:>8}  {:>8}  {:>8}  {}\n",
            t.fences,
            t.unsignaled,
            us(l.map(|l| l.p50)),
            us(l.map(|l| l.p99)),
            us(l.map(|l| l.max)),
            esc(&t.track)
        ));
    }
    o.push_str(
        "\nvblanks (interval, us)\n  crtc  vblanks      mean    jitter       min       max\n",
    );
    for c in &s.crtcs {
        o.push_str(&format!(
            "  {:>4}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}\n",
            c.crtc,
            c.vblanks,
            us(c.mean_interval_us),
            us(c.jitter_us),
            us(c.min_interval_us),
            us(c.max_interval_us)
        ));
    }
    o.push_str("\nfence waits\n      pid   waits  total us    max us\n");
    for w in &s.waits {
        o.push_str(&format!(
            "  {:>7}  {:>6}  {:>8.1}  {:>8.1}\n",
            w.pid, w.waits, w.total_us, w.max_us
        ));
    }
    o.push_str(
        "\nallocation failures (DRM ioctls: ENOMEM, ENOSPC)\n      pid  count  errno   ioctl  \
         comm  cgroup\n",
    );
    for a in &s.alloc_failures {
        o.push_str(&format!(
            "  {:>7}  {:>5}  {:<6}  {}  {}  {}\n",
            a.pid,
            a.count,
            esc(&a.errno),
            esc(&a.ioctl),
            esc(a.comm.as_deref().unwrap_or("-")),
            esc(a.cgroup.as_deref().unwrap_or("-"))
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0)), (50.0, 99.0));
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[1.0, 2.0], 50.0), 1.0);
    }

    #[test]
    fn allocation_failures_are_counted_and_their_text_escaped() {
        let slice = |pid: u64, errno: &str, comm: &str| {
            json!({"ph": "X", "cat": ALLOC_CAT, "name": "x", "ts": 1.0, "dur": 1.0,
                   "pid": pid, "tid": pid, "args": {"ioctl": "DRM_IOCTL_QXL_ALLOC",
                   "errno": errno, "comm": comm, "cgroup": "/job", "fd": 3}})
        };
        let t = json!({"traceEvents": [
            slice(7, "ENOMEM", "a\u{1b}[31m"),
            slice(7, "ENOMEM", "a\u{1b}[31m"),
            slice(7, "ENOSPC", "a\u{1b}[31m"),
            slice(9, "ENOMEM", "b"),
            // A wait slice is not one.
            {"ph": "X", "name": WAIT, "ts": 2.0, "dur": 1.0, "pid": 7},
        ], "otherData": {}});
        let s = summarize(&t).unwrap();
        let rows: Vec<(u64, &str, u64)> = s
            .alloc_failures
            .iter()
            .map(|a| (a.pid, a.errno.as_str(), a.count))
            .collect();
        assert_eq!(rows, [(7, "ENOMEM", 2), (7, "ENOSPC", 1), (9, "ENOMEM", 1)]);
        let text = render(&s);
        assert!(text.contains("DRM_IOCTL_QXL_ALLOC"), "{text}");
        assert!(
            !text.contains('\u{1b}'),
            "no escape byte reaches a terminal: {text}"
        );
    }

    #[test]
    fn figures_from_the_events() {
        let t = json!({"traceEvents": [
            {"ph": "b", "name": "a", "id": "1", "ts": 10.0, "pid": FENCE_PID},
            {"ph": "e", "name": "a", "id": "1", "ts": 15.0, "pid": FENCE_PID},
            {"ph": "b", "name": "a", "id": "2", "ts": 11.0, "pid": FENCE_PID},
            {"ph": "e", "name": "a", "id": "2", "ts": 31.0, "pid": FENCE_PID},
            {"ph": "b", "name": "a", "id": "3", "ts": 12.0, "pid": FENCE_PID},
            {"ph": "i", "name": VBLANK, "ts": 100.0, "pid": DISPLAY_PID, "args": {"crtc": 0}},
            {"ph": "i", "name": VBLANK, "ts": 116.0, "pid": DISPLAY_PID, "args": {"crtc": 0}},
            {"ph": "i", "name": VBLANK, "ts": 134.0, "pid": DISPLAY_PID, "args": {"crtc": 0}},
            {"ph": "X", "name": WAIT, "ts": 20.0, "dur": 4.0, "pid": 7},
            {"ph": "X", "name": WAIT, "ts": 30.0, "dur": 6.0, "pid": 7},
        ], "otherData": {"events": {"dma_fence:dma_fence_init": 3}, "lost": 2}});
        let s = summarize(&t).unwrap();
        assert_eq!(s.timelines.len(), 1);
        let a = &s.timelines[0];
        assert_eq!((a.fences, a.unsignaled), (3, 1));
        let l = a.emit_to_signal_us.as_ref().unwrap();
        assert_eq!((l.p50, l.p99, l.max), (5.0, 20.0, 20.0));
        let c = &s.crtcs[0];
        assert_eq!((c.vblanks, c.mean_interval_us), (3, Some(17.0)));
        assert_eq!(c.jitter_us, Some(1.0));
        assert_eq!(
            (c.min_interval_us, c.max_interval_us),
            (Some(16.0), Some(18.0))
        );
        assert_eq!(s.waits[0].waits, 2);
        assert_eq!((s.waits[0].total_us, s.waits[0].max_us), (10.0, 6.0));
        assert_eq!((s.lost, s.duration_us), (2, 124.0));
        assert!(render(&s).contains("fence timelines"));
        assert_eq!(
            summarize(&json!({})),
            Err(NotATrace("no traceEvents array"))
        );
    }
}
