//! The writer's packets decoded back (with the prost structs, and by hand from the wire
//! bytes so that a wrong field number fails), for every event shape chrome.rs makes.

use super::proto::{AnnotationValue, Trace};
use super::*;
use serde_json::json;

const FENCE_PID: u64 = 10_000_001;
const SCHED_PID: u64 = 10_000_003;

/// The trace written for `events`, its packets, and the skipped count.
fn run(events: &[Value], other: &Value) -> (Vec<u8>, Vec<TracePacket>, u64) {
    let mut w = PerfettoWriter::new(Vec::new(), 1_000, 2_000).unwrap();
    for e in events {
        w.event(e).unwrap();
    }
    let skipped = w.skipped();
    let bytes = w.finish(other).unwrap();
    let packets = Trace::decode(bytes.as_slice()).unwrap().packet;
    (bytes, packets, skipped)
}

fn descriptors(p: &[TracePacket]) -> Vec<&TrackDescriptor> {
    p.iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackDescriptor(d)) => Some(d),
            _ => None,
        })
        .collect()
}

/// The track events with their timestamps.
fn events(p: &[TracePacket]) -> Vec<(u64, &TrackEvent)> {
    p.iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackEvent(e)) => Some((p.timestamp.unwrap(), e)),
            _ => None,
        })
        .collect()
}

fn ty(e: &TrackEvent) -> TrackEventType {
    TrackEventType::try_from(e.r#type.unwrap()).unwrap()
}

/// The uuid of the descriptor named `name` (a track's name, a process's or a thread's).
fn uuid_of(p: &[TracePacket], name: &str) -> u64 {
    descriptors(p)
        .into_iter()
        .rev()
        .find(|d| {
            d.name.as_deref() == Some(name)
                || d.process.as_ref().and_then(|p| p.process_name.as_deref()) == Some(name)
                || d.thread.as_ref().and_then(|t| t.thread_name.as_deref()) == Some(name)
        })
        .and_then(|d| d.uuid)
        .unwrap_or_else(|| panic!("no track {name}"))
}

fn annotation<'a>(e: &'a TrackEvent, name: &str) -> Option<&'a AnnotationValue> {
    e.debug_annotations
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
        .and_then(|a| a.value.as_ref())
}

/// One field as read off the wire by hand.
#[derive(Debug, PartialEq)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let x = b[*i];
        *i += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            break;
        }
    }
    v
}

/// A message's fields in wire order: (field number, value). Protobuf's wire format
/// (varint keys `field << 3 | wire type`), written here apart from prost.
fn fields(b: &[u8]) -> Vec<(u64, Wire<'_>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let w = match key & 7 {
            0 => Wire::Varint(varint(b, &mut i)),
            1 => {
                let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                i += 8;
                Wire::Fixed64(v)
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                i += n;
                Wire::Len(&b[i - n..i])
            }
            t => panic!("wire type {t}"),
        };
        out.push((key >> 3, w));
    }
    out
}

fn field<'a>(f: &'a [(u64, Wire<'a>)], n: u64) -> &'a Wire<'a> {
    &f.iter()
        .find(|(k, _)| *k == n)
        .unwrap_or_else(|| panic!("no field {n}"))
        .1
}

fn len<'a>(w: &'a Wire<'a>) -> &'a [u8] {
    match w {
        Wire::Len(b) => b,
        w => panic!("{w:?} is not length-delimited"),
    }
}

#[test]
fn the_first_packet_is_the_clock_snapshot_byte_for_byte() {
    let (bytes, p, _) = run(&[], &json!({}));
    // Trace.packet (1, LEN) { clock_snapshot (6, LEN) { clocks (1) { clock_id (1) = 3,
    // timestamp (2) = 1000 }, clocks (1) { clock_id = 6, timestamp = 2000 },
    // primary_trace_clock (2) = 3 }, trusted_packet_sequence_id (10) = 1,
    // sequence_flags (13) = 1 }.
    let first = [
        0x0a, 22, 0x32, 16, 0x0a, 5, 0x08, 3, 0x10, 0xe8, 0x07, 0x0a, 5, 0x08, 6, 0x10, 0xd0, 0x0f,
        0x10, 3, 0x50, 1, 0x68, 1,
    ];
    assert_eq!(bytes[..first.len()], first);
    let Some(Data::ClockSnapshot(c)) = &p[0].data else {
        panic!("{:?}", p[0]);
    };
    assert_eq!(c.primary_trace_clock, Some(BuiltinClock::Monotonic as i32));
    assert_eq!(
        p[0].sequence_flags,
        Some(proto::SEQ_INCREMENTAL_STATE_CLEARED)
    );
    assert!(
        p.iter()
            .all(|p| p.trusted_packet_sequence_id == Some(SEQUENCE_ID))
    );
    assert!(p[1..].iter().all(|p| p.sequence_flags.is_none()));
}

#[test]
fn an_instant_s_field_numbers_read_by_hand() {
    let ev = json!({"ph": "i", "s": "t", "name": "dma_fence:dma_fence_emit",
                    "cat": "dma_fence", "ts": 1.5, "pid": 7, "tid": 8,
                    "args": {"seqno": -3}});
    let mut w = PerfettoWriter::new(Vec::new(), 0, 0).unwrap();
    let start = w.out.len();
    w.event(&ev).unwrap();
    let bytes = w.out[start..].to_vec();
    // Process track, thread track, then the instant: three Trace.packet fields.
    let packets = fields(&bytes);
    assert_eq!(packets.len(), 3);
    assert!(packets.iter().all(|(n, _)| *n == 1));
    let thread = fields(len(&packets[1].1));
    let thread_desc = fields(len(field(&thread, 60)));
    let Wire::Varint(thread_uuid) = field(&thread_desc, 1) else {
        panic!()
    };
    let td = fields(len(field(&thread_desc, 4)));
    assert_eq!(field(&td, 1), &Wire::Varint(7));
    assert_eq!(field(&td, 2), &Wire::Varint(8));

    let packet = fields(len(&packets[2].1));
    assert_eq!(field(&packet, 8), &Wire::Varint(1500), "timestamp, ns");
    assert_eq!(
        field(&packet, 58),
        &Wire::Varint(3),
        "timestamp_clock_id MONOTONIC"
    );
    assert_eq!(field(&packet, 10), &Wire::Varint(u64::from(SEQUENCE_ID)));
    let te = fields(len(field(&packet, 11)));
    assert_eq!(field(&te, 23), &Wire::Len(b"dma_fence:dma_fence_emit"));
    assert_eq!(field(&te, 22), &Wire::Len(b"dma_fence"));
    assert_eq!(field(&te, 9), &Wire::Varint(3), "TYPE_INSTANT");
    assert_eq!(field(&te, 11), &Wire::Varint(*thread_uuid));
    let da = fields(len(field(&te, 4)));
    assert_eq!(field(&da, 10), &Wire::Len(b"seqno"));
    assert_eq!(field(&da, 4), &Wire::Varint(-3i64 as u64), "int_value");
}

#[test]
fn flows_are_unpacked_fixed64_on_the_wire() {
    let mut e = TrackEvent::default();
    add_flow(&mut e, 0x0102_0304_0506_0708, false);
    add_flow(&mut e, 9, true);
    let bytes = e.encode_to_vec();
    assert_eq!(
        fields(&bytes),
        [
            (47, Wire::Fixed64(0x0102_0304_0506_0708)),
            (48, Wire::Fixed64(9))
        ]
    );
}

/// Every shape chrome.rs makes, in its order: instants, a wait slice, fences, a
/// scheduler job with its flow, counters, then the names.
fn chrome_like() -> Vec<Value> {
    vec![
        json!({"ph": "i", "s": "t", "name": "drm:drm_vblank_event", "cat": "drm",
               "ts": 10.0, "pid": 100, "tid": 101,
               "args": {"crtc": 0, "big": u64::MAX, "f": 0.5, "s": "t\"1\n", "b": true,
                        "n": null, "o": {"x": 1, "y": [2, 3]}}}),
        json!({"ph": "X", "name": "fence wait", "cat": "fence", "ts": 11.0, "dur": 3.2,
               "pid": 100, "tid": 101, "args": {"context": 7, "seqno": 1}}),
        json!({"ph": "b", "name": "sw_sync t (context 7)", "cat": "fence", "id": "0x7:1",
               "ts": 1.0, "pid": FENCE_PID, "tid": 0, "args": {"seqno": 1}}),
        json!({"ph": "e", "name": "sw_sync t (context 7)", "cat": "fence", "id": "0x7:1",
               "ts": 5.0, "pid": FENCE_PID, "tid": 0}),
        json!({"ph": "X", "name": "submit job", "cat": "sched", "ts": 20.0, "dur": 0.001,
               "pid": 100, "tid": 102, "args": {"job": 5}}),
        json!({"ph": "s", "name": "job", "cat": "sched.flow", "id": "job:5", "ts": 20.0,
               "pid": 100, "tid": 102}),
        json!({"ph": "X", "name": "run job", "cat": "sched", "ts": 30.0, "dur": 0.001,
               "pid": SCHED_PID, "tid": 1, "args": {"job": 5}}),
        json!({"ph": "f", "bp": "e", "name": "job", "cat": "sched.flow", "id": "job:5",
               "ts": 30.0, "pid": SCHED_PID, "tid": 1}),
        json!({"ph": "b", "name": "ring0 jobs", "cat": "sched.job", "id": "job:5",
               "ts": 30.0, "pid": SCHED_PID, "tid": 0, "args": {"job": 5}}),
        json!({"ph": "C", "name": "GPU memory (bytes)", "ts": 40.0, "pid": 100,
               "args": {"fdinfo": 4096, "maps": 1.5}}),
        json!({"ph": "C", "name": "GPU memory (bytes)", "ts": 41.0, "pid": 100,
               "args": {"fdinfo": 8192, "maps": 2}}),
        json!({"ph": "M", "name": "process_name", "pid": FENCE_PID,
               "args": {"name": "GPU fence timelines"}}),
        json!({"ph": "M", "name": "process_name", "pid": SCHED_PID,
               "args": {"name": "GPU scheduler"}}),
        json!({"ph": "M", "name": "thread_name", "pid": SCHED_PID, "tid": 1,
               "args": {"name": "ring0"}}),
        json!({"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "glmark2"}}),
    ]
}

#[test]
fn every_chrome_shape_is_translated() {
    let other = json!({"tool": "drmtool trace", "end_ns": 50_000, "lost": 0,
                       "events": {"drm:drm_vblank_event": 1}, "command": ["x"]});
    let (_, p, skipped) = run(&chrome_like(), &other);
    assert_eq!(skipped, 0);
    let ev = events(&p);
    assert!(
        p[1..].iter().all(|p| p.timestamp.is_none()
            || p.timestamp_clock_id == Some(BuiltinClock::Monotonic as u32))
    );

    // "i": an instant on the thread's track, its args as typed annotations.
    let thread = descriptors(&p)
        .into_iter()
        .find(|d| d.thread.as_ref().is_some_and(|t| t.tid == Some(101)))
        .unwrap();
    let (ts, i) = ev[0];
    assert_eq!(
        (ts, ty(i), i.track_uuid),
        (10_000, TrackEventType::Instant, thread.uuid)
    );
    assert_eq!(thread.parent_uuid, Some(uuid_of(&p, "glmark2")));
    assert_eq!(i.categories, ["drm"]);
    assert_eq!(annotation(i, "crtc"), Some(&AnnotationValue::Int(0)));
    assert_eq!(annotation(i, "big"), Some(&AnnotationValue::Uint(u64::MAX)));
    assert_eq!(annotation(i, "f"), Some(&AnnotationValue::Double(0.5)));
    assert_eq!(
        annotation(i, "s"),
        Some(&AnnotationValue::String("t\"1\n".into()))
    );
    assert_eq!(annotation(i, "b"), Some(&AnnotationValue::Bool(true)));
    assert_eq!(
        annotation(i, "n"),
        Some(&AnnotationValue::String("null".into()))
    );
    assert_eq!(annotation(i, "o.x"), Some(&AnnotationValue::Int(1)));
    assert_eq!(annotation(i, "o.y[1]"), Some(&AnnotationValue::Int(3)));

    // "X": begin at ts, end at ts + dur on the same track.
    let wait: Vec<_> = ev
        .iter()
        .filter(|(_, e)| e.track_uuid == thread.uuid && ty(e) != TrackEventType::Instant)
        .collect();
    assert_eq!(wait.len(), 2);
    assert_eq!(
        (wait[0].0, ty(wait[0].1)),
        (11_000, TrackEventType::SliceBegin)
    );
    assert_eq!(wait[0].1.name.as_deref(), Some("fence wait"));
    assert_eq!(
        annotation(wait[0].1, "seqno"),
        Some(&AnnotationValue::Int(1))
    );
    assert_eq!(
        (wait[1].0, ty(wait[1].1)),
        (14_200, TrackEventType::SliceEnd)
    );

    // "b"/"e": a lane under the name's track under the fence process.
    let lane = uuid_of(&p, "sw_sync t (context 7)");
    let lane_d = descriptors(&p)
        .into_iter()
        .find(|d| d.uuid == Some(lane))
        .unwrap();
    let group = descriptors(&p)
        .into_iter()
        .find(|d| d.uuid == lane_d.parent_uuid)
        .unwrap();
    assert_eq!(group.parent_uuid, Some(uuid_of(&p, "GPU fence timelines")));
    let fence: Vec<_> = ev
        .iter()
        .filter(|(_, e)| e.track_uuid == Some(lane))
        .collect();
    assert_eq!(
        fence.iter().map(|(t, e)| (*t, ty(e))).collect::<Vec<_>>(),
        [
            (1_000, TrackEventType::SliceBegin),
            (5_000, TrackEventType::SliceEnd)
        ]
    );

    // The process named at the end: its descriptor again, same uuid, with the name.
    let fence_pid = descriptors(&p)
        .into_iter()
        .filter(|d| d.process.as_ref().and_then(|p| p.pid) == Some(FENCE_PID as i32))
        .collect::<Vec<_>>();
    assert_eq!(fence_pid.len(), 2);
    assert_eq!(fence_pid[0].uuid, fence_pid[1].uuid);

    // finish: the otherData on "drmtool".
    let (ts, last) = *ev.last().unwrap();
    assert_eq!(ts, 50_000);
    assert_eq!(last.track_uuid, Some(uuid_of(&p, "drmtool")));
    assert_eq!(last.name.as_deref(), Some("drmtool trace"));
    assert_eq!(
        annotation(last, "tool"),
        Some(&AnnotationValue::String("drmtool trace".into()))
    );
    assert_eq!(
        annotation(last, "events.drm:drm_vblank_event"),
        Some(&AnnotationValue::Int(1))
    );
    assert_eq!(
        annotation(last, "command[0]"),
        Some(&AnnotationValue::String("x".into()))
    );
}

#[test]
fn flows_bind_to_the_slices_chrome_writes_them_on() {
    let (_, p, skipped) = run(&chrome_like(), &json!({}));
    assert_eq!(skipped, 0);
    let ev = events(&p);
    let job = flow_id("job:5");
    let submit = ev
        .iter()
        .find(|(_, e)| e.name.as_deref() == Some("submit job"))
        .unwrap();
    assert_eq!(
        (submit.0, ty(submit.1)),
        (20_000, TrackEventType::SliceBegin)
    );
    assert_eq!(submit.1.flow_ids, [job]);
    let run_job = ev
        .iter()
        .find(|(_, e)| e.name.as_deref() == Some("run job"))
        .unwrap();
    assert_eq!(run_job.1.terminating_flow_ids, [job]);
    assert_eq!(run_job.1.track_uuid, Some(uuid_of(&p, "ring0")));
    // No instant was made for them.
    assert!(!ev.iter().any(|(_, e)| e.name.as_deref() == Some("job")));
    // A job's async slice never ended stays open: a begin with no end.
    let jobs = uuid_of(&p, "ring0 jobs");
    let on: Vec<_> = ev
        .iter()
        .filter(|(_, e)| e.track_uuid == Some(jobs))
        .collect();
    assert_eq!(on.len(), 1);

    // A flow with no slice under it: an instant of its own carries it.
    let (_, p, _) = run(
        &[
            json!({"ph": "s", "name": "job", "cat": "sched.flow", "id": "job:6",
                 "ts": 2.0, "pid": 1, "tid": 1}),
        ],
        &json!({}),
    );
    let ev = events(&p);
    assert_eq!(ty(ev[0].1), TrackEventType::Instant);
    assert_eq!(ev[0].1.flow_ids, [flow_id("job:6")]);
    assert_ne!(flow_id("job:5"), flow_id("job:6"));
    assert_eq!(flow_id("job:5"), flow_id("job:5"));
}

#[test]
fn counters_have_a_track_per_series() {
    let (_, p, _) = run(&chrome_like(), &json!({}));
    let fdinfo = uuid_of(&p, "GPU memory (bytes) fdinfo");
    let maps = uuid_of(&p, "GPU memory (bytes) maps");
    assert_ne!(fdinfo, maps);
    for u in [fdinfo, maps] {
        let d = descriptors(&p)
            .into_iter()
            .find(|d| d.uuid == Some(u))
            .unwrap();
        assert!(d.counter.is_some());
        assert_eq!(d.parent_uuid, Some(uuid_of(&p, "glmark2")));
    }
    let values = |u: u64| {
        events(&p)
            .into_iter()
            .filter(|(_, e)| e.track_uuid == Some(u))
            .map(|(t, e)| {
                assert_eq!(ty(e), TrackEventType::Counter);
                (t, e.counter_value, e.double_counter_value)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        values(fdinfo),
        [(40_000, Some(4096), None), (41_000, Some(8192), None)]
    );
    assert_eq!(
        values(maps),
        [(40_000, None, Some(1.5)), (41_000, Some(2), None)]
    );
}

#[test]
fn overlapping_async_slices_take_lanes() {
    let f = |ph: &str, id: u32, ts: f64| {
        json!({"ph": ph, "name": "tl", "cat": "fence", "id": format!("0x1:{id}"),
               "ts": ts, "pid": FENCE_PID, "tid": 0})
    };
    let evs = [
        f("b", 1, 1.0),
        f("b", 2, 2.0), // 1 is open: a second lane
        f("e", 1, 3.0),
        f("b", 3, 4.0), // lane 1 is free again and ended before 4
        f("e", 2, 5.0),
        f("e", 3, 6.0),
        f("b", 4, 2.5), // both lanes ended after 2.5: a third
        f("b", 5, 7.0), // never ends
    ];
    let mut w = PerfettoWriter::new(Vec::new(), 0, 0).unwrap();
    for e in &evs {
        w.event(e).unwrap();
    }
    assert_eq!(w.open_slices(), 2);
    assert_eq!(w.tracks(), 1 + 1 + 3, "process, name, three lanes");
    let bytes = w.finish(&json!({})).unwrap();
    let p = Trace::decode(bytes.as_slice()).unwrap().packet;
    let lanes = ["tl", "tl #2", "tl #3"].map(|n| uuid_of(&p, n));
    let group = descriptors(&p)
        .into_iter()
        .find(|d| d.name.as_deref() == Some("tl"));
    let group = group.unwrap();
    assert_eq!(
        group.child_ordering,
        Some(ChildTracksOrdering::Explicit as i32)
    );
    let group = group.uuid;
    for (n, l) in lanes.into_iter().enumerate() {
        let d = descriptors(&p)
            .into_iter()
            .find(|d| d.uuid == Some(l))
            .unwrap();
        assert_eq!(
            (d.parent_uuid, d.sibling_order_rank),
            (group, Some(n as i32))
        );
    }
    let lane = |t| lanes.iter().position(|&l| Some(l) == t).unwrap();
    let got: Vec<_> = events(&p)
        .into_iter()
        .filter(|(_, e)| e.name.as_deref() != Some("drmtool trace"))
        .map(|(t, e)| (t, ty(e), lane(e.track_uuid)))
        .collect();
    use TrackEventType::{SliceBegin as B, SliceEnd as E};
    assert_eq!(
        got,
        [
            (1_000, B, 0),
            (2_000, B, 1),
            (3_000, E, 0),
            (4_000, B, 0),
            (5_000, E, 1),
            (6_000, E, 0),
            (2_500, B, 2),
            (7_000, B, 0),
        ]
    );
}

#[test]
fn malformed_events_are_counted_not_fatal() {
    let bad = [
        json!(null),
        json!([1, 2]),
        json!(3),
        json!({"name": "no ph", "ts": 1.0, "pid": 1, "tid": 1}),
        json!({"ph": "Z", "name": "unknown", "ts": 1.0, "pid": 1, "tid": 1}),
        json!({"ph": "i", "name": "no ts", "pid": 1, "tid": 1}),
        json!({"ph": "i", "name": "ts a string", "ts": "1", "pid": 1, "tid": 1}),
        json!({"ph": "i", "name": "negative ts", "ts": -1.0, "pid": 1, "tid": 1}),
        json!({"ph": "i", "name": "huge ts", "ts": 1e300, "pid": 1, "tid": 1}),
        json!({"ph": "i", "name": "pid a string", "ts": 1.0, "pid": "1", "tid": 1}),
        json!({"ph": "i", "name": "pid over int32", "ts": 1.0, "pid": 1u64 << 40, "tid": 1}),
        json!({"ph": "i", "ts": 1.0, "pid": 1, "tid": 1}),
        json!({"ph": "X", "name": "no dur", "ts": 1.0, "pid": 1, "tid": 1}),
        json!({"ph": "X", "name": "no tid", "ts": 1.0, "dur": 1.0, "pid": 1}),
        json!({"ph": "b", "name": "no id", "ts": 1.0, "pid": 1}),
        json!({"ph": "e", "name": "never begun", "id": "x", "ts": 1.0, "pid": 1}),
        json!({"ph": "C", "name": "no args", "ts": 1.0, "pid": 1}),
        json!({"ph": "C", "name": "a string series", "ts": 1.0, "pid": 1,
               "args": {"v": "12"}}),
        json!({"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": 1}}),
        json!({"ph": "M", "name": "thread_name", "pid": 1, "args": {"name": "no tid"}}),
        json!({"ph": "s", "name": "no id", "ts": 1.0, "pid": 1, "tid": 1}),
        json!({"ph": "f", "name": "no tid", "id": "x", "ts": 1.0, "pid": 1}),
    ];
    let mut good = chrome_like();
    good.push(json!({"ph": "b", "name": "twice", "id": "d", "ts": 1.0, "pid": 1}));
    good.push(json!({"ph": "b", "name": "twice", "id": "d", "ts": 2.0, "pid": 1}));
    let mut evs = bad.to_vec();
    evs.extend(good);
    let (_, p, skipped) = run(&evs, &json!({"x": 1}));
    assert_eq!(
        skipped,
        bad.len() as u64 + 1,
        "each bad one and the second begin"
    );
    // What was good is all there.
    let ev = events(&p);
    assert!(ev.iter().any(|(_, e)| e.name.as_deref() == Some("run job")));
    assert!(
        ev.iter()
            .any(|(_, e)| e.name.as_deref() == Some("drmtool trace"))
    );
}

/// A writer that keeps nothing: counts bytes and packets.
#[derive(Default)]
struct Counting {
    bytes: u64,
    writes: u64,
}

impl Write for Counting {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.bytes += b.len() as u64;
        self.writes += 1;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Event `i` of an endless chrome-like stream: instants on four threads, fences of two
/// timelines two at a time in flight, jobs with their flows, counters.
fn nth(i: u64) -> Value {
    let ts = i as f64 * 0.5;
    let fence = i / 8;
    match i % 8 {
        0 | 1 => json!({"ph": "i", "s": "t", "name": "drm:x", "cat": "drm", "ts": ts,
                        "pid": 100, "tid": 100 + i % 4, "args": {"i": i}}),
        2 => json!({"ph": "b", "name": format!("tl {}", fence % 2), "id": format!("{fence}"),
                    "ts": ts, "pid": FENCE_PID, "tid": 0}),
        3 if fence > 1 => json!({"ph": "e", "name": format!("tl {}", fence % 2),
                                 "id": format!("{}", fence - 2), "ts": ts,
                                 "pid": FENCE_PID, "tid": 0}),
        4 => json!({"ph": "X", "name": "submit job", "ts": ts, "dur": 0.001, "pid": 100,
                    "tid": 101, "args": {"job": i}}),
        5 => json!({"ph": "s", "name": "job", "id": format!("job:{i}"), "ts": ts - 0.5,
                    "pid": 100, "tid": 101}),
        6 => json!({"ph": "C", "name": "mem", "ts": ts, "pid": 100,
                    "args": {"a": i, "b": ts}}),
        _ => json!({"ph": "i", "s": "p", "name": "p", "ts": ts, "pid": SCHED_PID}),
    }
}

#[test]
fn a_long_stream_keeps_the_writer_s_state_bounded() {
    let mut w = PerfettoWriter::new(Counting::default(), 0, 0).unwrap();
    let state = |w: &PerfettoWriter<Counting>| (w.tracks(), w.open_slices());
    for i in 0..1_000 {
        w.event(&nth(i)).unwrap();
    }
    let early = state(&w);
    let early_buf = w.buf.capacity();
    for i in 1_000..100_000 {
        w.event(&nth(i)).unwrap();
    }
    assert_eq!(
        state(&w),
        early,
        "tracks and open slices after 1,000 and 100,000 events"
    );
    assert_eq!(
        w.buf.capacity(),
        early_buf,
        "the encode buffer did not grow"
    );
    assert_eq!(w.skipped(), 0);
    // Two fence timelines of two lanes each; two fences in flight.
    assert_eq!(early.1, 2);
    let out = w.finish(&json!({})).unwrap();
    assert!(out.writes > 100_000, "packets went out as they were made");
    assert!(out.bytes > 2_000_000);
}

#[test]
fn timestamps_come_back_to_the_nanosecond() {
    for (us, ns_) in [
        (1.1, 1_100),
        (0.001, 1),
        (123_456_789.123, 123_456_789_123u64),
    ] {
        assert_eq!(ns(Some(&json!(us))), Some(ns_));
    }
    // chrome.rs's own conversion (ns as f64 / 1000) of a 30-day uptime, and back.
    let t: u64 = 30 * 86_400 * 1_000_000_000 + 7;
    assert_eq!(ns(Some(&json!(t as f64 / 1000.0))), Some(t));
    assert_eq!(ns(Some(&json!(-0.5))), None);
}
