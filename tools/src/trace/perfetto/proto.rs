//! The subset of Perfetto's trace protos that [`super::PerfettoWriter`] writes, as prost
//! messages. Names, types and field numbers are those of `google/perfetto`'s
//! `protos/perfetto/...` files named over each message (proto2: every scalar is optional,
//! and the repeated scalars are not packed, as in the `.proto` files); fields this writer
//! never sets are left out, which protobuf allows. The field numbers are checked against
//! hand-decoded bytes in the tests.

/// `Trace` (protos/perfetto/trace/trace.proto): the file, a stream of packets, each
/// written as field 1 (length-delimited) as it is made.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    /// `repeated TracePacket packet = 1`.
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// `TracePacket` (protos/perfetto/trace/trace_packet.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    /// `optional uint64 timestamp = 8`: in the clock of [`Self::timestamp_clock_id`].
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// `optional uint32 timestamp_clock_id = 58`: a [`BuiltinClock`].
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// `oneof data`: what the packet carries.
    #[prost(oneof = "Data", tags = "6, 11, 60")]
    pub data: Option<Data>,
    /// `uint32 trusted_packet_sequence_id = 10` (oneof
    /// `optional_trusted_packet_sequence_id`).
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// `optional uint32 sequence_flags = 13`: [`SEQ_INCREMENTAL_STATE_CLEARED`] and others.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
}

/// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`
/// (protos/perfetto/trace/trace_packet.proto).
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

/// `TracePacket`'s `oneof data` (protos/perfetto/trace/trace_packet.proto), the members
/// written here.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    /// `ClockSnapshot clock_snapshot = 6`.
    #[prost(message, tag = "6")]
    ClockSnapshot(ClockSnapshot),
    /// `TrackEvent track_event = 11`.
    #[prost(message, tag = "11")]
    TrackEvent(TrackEvent),
    /// `TrackDescriptor track_descriptor = 60`.
    #[prost(message, tag = "60")]
    TrackDescriptor(TrackDescriptor),
}

/// `BuiltinClock` (protos/perfetto/common/builtin_clock.proto), the POSIX clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BuiltinClock {
    /// `BUILTIN_CLOCK_UNKNOWN = 0`.
    Unknown = 0,
    /// `BUILTIN_CLOCK_REALTIME = 1`.
    Realtime = 1,
    /// `BUILTIN_CLOCK_REALTIME_COARSE = 2`.
    RealtimeCoarse = 2,
    /// `BUILTIN_CLOCK_MONOTONIC = 3`: perf's clock, the trace's.
    Monotonic = 3,
    /// `BUILTIN_CLOCK_MONOTONIC_COARSE = 4`.
    MonotonicCoarse = 4,
    /// `BUILTIN_CLOCK_MONOTONIC_RAW = 5`.
    MonotonicRaw = 5,
    /// `BUILTIN_CLOCK_BOOTTIME = 6`.
    Boottime = 6,
}

/// `ClockSnapshot` (protos/perfetto/trace/clock_snapshot.proto): clocks read together.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    /// `repeated Clock clocks = 1`.
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// `optional BuiltinClock primary_trace_clock = 2`: the trace's time domain.
    #[prost(enumeration = "BuiltinClock", optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// `ClockSnapshot.Clock` (protos/perfetto/trace/clock_snapshot.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    /// `optional uint32 clock_id = 1`: a [`BuiltinClock`].
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    /// `optional uint64 timestamp = 2`: ns.
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

/// `TrackDescriptor` (protos/perfetto/trace/track_event/track_descriptor.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    /// `optional uint64 uuid = 1`: global to the trace; 0 is the implicit global track.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// `optional uint64 parent_uuid = 5`.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// `string name = 2` (oneof `static_or_dynamic_name`).
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// `optional ProcessDescriptor process = 3`: the process's own track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// `optional ThreadDescriptor thread = 4`: the thread's own track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// `optional CounterDescriptor counter = 8`: present on a counter track.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
    /// `optional ChildTracksOrdering child_ordering = 11`: how the UI orders this track's
    /// children.
    #[prost(enumeration = "ChildTracksOrdering", optional, tag = "11")]
    pub child_ordering: Option<i32>,
    /// `optional int32 sibling_order_rank = 12`: this track's place among its siblings
    /// under a parent with [`ChildTracksOrdering::Explicit`].
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
}

/// `TrackDescriptor.ChildTracksOrdering`
/// (protos/perfetto/trace/track_event/track_descriptor.proto).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ChildTracksOrdering {
    /// `UNKNOWN = 0`.
    Unknown = 0,
    /// `LEXICOGRAPHIC = 1`.
    Lexicographic = 1,
    /// `CHRONOLOGICAL = 2`.
    Chronological = 2,
    /// `EXPLICIT = 3`: by the children's `sibling_order_rank`.
    Explicit = 3,
}

/// `ProcessDescriptor` (protos/perfetto/trace/track_event/process_descriptor.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    /// `optional int32 pid = 1`.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// `optional string process_name = 6`.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `ThreadDescriptor` (protos/perfetto/trace/track_event/thread_descriptor.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    /// `optional int32 pid = 1`.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// `optional int32 tid = 2`.
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    /// `optional string thread_name = 5`.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `CounterDescriptor` (protos/perfetto/trace/track_event/counter_descriptor.proto): its
/// presence makes a counter track; none of its fields is set here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {}

/// `TrackEvent.Type` (protos/perfetto/trace/track_event/track_event.proto).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum TrackEventType {
    /// `TYPE_UNSPECIFIED = 0`.
    Unspecified = 0,
    /// `TYPE_SLICE_BEGIN = 1`.
    SliceBegin = 1,
    /// `TYPE_SLICE_END = 2`.
    SliceEnd = 2,
    /// `TYPE_INSTANT = 3`.
    Instant = 3,
    /// `TYPE_COUNTER = 4`.
    Counter = 4,
}

/// `TrackEvent` (protos/perfetto/trace/track_event/track_event.proto), without interning:
/// names and categories are written as strings.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    /// `repeated string categories = 22`.
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// `string name = 23` (oneof `name_field`).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// `optional Type type = 9`.
    #[prost(enumeration = "TrackEventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    /// `optional uint64 track_uuid = 11`.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// `int64 counter_value = 30` (oneof `counter_value_field`).
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    /// `double double_counter_value = 44` (oneof `counter_value_field`).
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    /// `repeated DebugAnnotation debug_annotations = 4`.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// `repeated fixed64 flow_ids = 47` (not packed).
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    /// `repeated fixed64 terminating_flow_ids = 48` (not packed).
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `DebugAnnotation` (protos/perfetto/trace/track_event/debug_annotation.proto): one
/// argument of an event.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    /// `string name = 10` (oneof `name_field`).
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    /// `oneof value`.
    #[prost(oneof = "AnnotationValue", tags = "2, 3, 4, 5, 6")]
    pub value: Option<AnnotationValue>,
}

/// `DebugAnnotation`'s `oneof value`
/// (protos/perfetto/trace/track_event/debug_annotation.proto), the scalar members.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AnnotationValue {
    /// `bool bool_value = 2`.
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// `uint64 uint_value = 3`.
    #[prost(uint64, tag = "3")]
    Uint(u64),
    /// `int64 int_value = 4`.
    #[prost(int64, tag = "4")]
    Int(i64),
    /// `double double_value = 5`.
    #[prost(double, tag = "5")]
    Double(f64),
    /// `string string_value = 6`.
    #[prost(string, tag = "6")]
    String(String),
}
