//! Where a trace's events go ([`Out`]): held in memory, written as Chrome JSON as they come,
//! or as Perfetto's protobuf.

use serde_json::Value;

/// Where the trace's events go, one by one, and how it is closed.
pub trait Out {
    /// One trace event object.
    ///
    /// # Errors
    /// The output's I/O error (the builder stops writing at the first).
    fn push(&mut self, v: Value) -> std::io::Result<()>;
    /// Closes the trace with its `otherData` object.
    ///
    /// # Errors
    /// As [`Out::push`].
    fn close(&mut self, other: Value) -> std::io::Result<()>;
}

/// The whole trace in memory: `traceEvents` and `otherData` ([`super::to_json`]).
#[derive(Debug, Default)]
pub struct InMemory {
    /// The events.
    pub events: Vec<Value>,
    /// `otherData`, once closed.
    pub other: Value,
}

impl Out for InMemory {
    fn push(&mut self, v: Value) -> std::io::Result<()> {
        self.events.push(v);
        Ok(())
    }
    fn close(&mut self, other: Value) -> std::io::Result<()> {
        self.other = other;
        Ok(())
    }
}

/// The JSON Object Format written as it comes: `{"traceEvents":[` at the start, each
/// event as it is made, `],"displayTimeUnit":"ns","otherData":{..}}` at the close.
#[derive(Debug)]
pub struct JsonStream<W: std::io::Write> {
    w: W,
    first: bool,
}

impl<W: std::io::Write> JsonStream<W> {
    /// Starts the document on `w` (buffer it: each event is a few small writes).
    ///
    /// # Errors
    /// The writer's.
    pub fn new(mut w: W) -> std::io::Result<Self> {
        w.write_all(b"{\"traceEvents\":[")?;
        Ok(JsonStream { w, first: true })
    }

    /// The writer back, after [`Out::close`].
    pub fn into_inner(self) -> W {
        self.w
    }
}

impl<W: std::io::Write> Out for JsonStream<W> {
    fn push(&mut self, v: Value) -> std::io::Result<()> {
        if !self.first {
            self.w.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.w, &v)?;
        Ok(())
    }
    fn close(&mut self, other: Value) -> std::io::Result<()> {
        self.w
            .write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
        serde_json::to_writer(&mut self.w, &other)?;
        self.w.write_all(b"}\n")?;
        self.w.flush()
    }
}

/// Perfetto's protobuf trace written as it comes ([`super::super::perfetto::PerfettoWriter`] over
/// each event of the JSON form).
#[derive(Debug)]
pub struct ProtoStream<W: std::io::Write> {
    w: Option<super::super::perfetto::PerfettoWriter<W>>,
    done: Option<W>,
}

impl<W: std::io::Write> ProtoStream<W> {
    /// Starts the trace on `w` with the clock snapshot taken now.
    ///
    /// # Errors
    /// The writer's.
    pub fn new(w: W) -> std::io::Result<Self> {
        let mono = super::super::record::monotonic_ns();
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let boot = (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64;
        Ok(ProtoStream {
            w: Some(super::super::perfetto::PerfettoWriter::new(w, mono, boot)?),
            done: None,
        })
    }

    /// The writer back, after [`Out::close`].
    pub fn into_inner(self) -> Option<W> {
        self.done
    }
}

impl<W: std::io::Write> Out for ProtoStream<W> {
    fn push(&mut self, v: Value) -> std::io::Result<()> {
        match self.w.as_mut() {
            Some(w) => w.event(&v),
            None => Ok(()),
        }
    }
    fn close(&mut self, other: Value) -> std::io::Result<()> {
        if let Some(w) = self.w.take() {
            let mut inner = w.finish(&other)?;
            inner.flush()?;
            self.done = Some(inner);
        }
        Ok(())
    }
}
