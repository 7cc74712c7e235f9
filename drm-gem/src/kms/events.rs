//! DRM events read from a device fd: vblank, flip complete, CRTC sequence, and anything
//! else kept raw (driver events such as virtio-gpu's fence event).

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call;
use rustix::fd::AsFd;

/// `DRM_EVENT_VBLANK`.
const EVENT_VBLANK: u32 = 0x01;
/// `DRM_EVENT_FLIP_COMPLETE`.
const EVENT_FLIP_COMPLETE: u32 = 0x02;
/// `DRM_EVENT_CRTC_SEQUENCE`.
const EVENT_CRTC_SEQUENCE: u32 = 0x03;
/// `VIRTGPU_EVENT_FENCE_SIGNALED` (virtio-gpu, 6.0+).
const EVENT_VIRTGPU_FENCE: u32 = 0x9000_0000;

/// A vblank or flip-complete event's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VblankEvent {
    /// What the request passed as user data.
    pub user_data: u64,
    /// Timestamp (CLOCK_MONOTONIC where `DRM_CAP_TIMESTAMP_MONOTONIC`), seconds.
    pub tv_sec: u32,
    /// Microseconds.
    pub tv_usec: u32,
    /// vblank sequence number.
    pub sequence: u32,
    /// The CRTC (0 on kernels before 4.12).
    pub crtc_id: u32,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `DRM_EVENT_VBLANK` (asked for with WAIT_VBLANK's EVENT flag).
    Vblank(VblankEvent),
    /// `DRM_EVENT_FLIP_COMPLETE` (PAGE_FLIP or atomic with PAGE_FLIP_EVENT).
    FlipComplete(VblankEvent),
    /// `DRM_EVENT_CRTC_SEQUENCE` (CRTC_QUEUE_SEQUENCE).
    CrtcSequence {
        /// User data of the request.
        user_data: u64,
        /// Timestamp in ns.
        time_ns: i64,
        /// The sequence reached.
        sequence: u64,
    },
    /// virtio-gpu's fence-signalled event (EXECBUFFER on a context with a poll ring).
    VirtioGpuFence {
        /// The payload after the 8-byte header.
        data: Vec<u8>,
    },
    /// Any other event, kept whole.
    Unknown {
        /// Its type.
        kind: u32,
        /// Its payload after the 8-byte header.
        data: Vec<u8>,
    },
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

/// Splits what a read returned into events (pure; host-tested). A truncated or
/// zero-length record ends the parse with an error naming the offset.
pub fn parse_events(buf: &[u8]) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let kind = le_u32(buf, at);
        let len = le_u32(buf, at + 4) as usize;
        if len < 8 || at + len > buf.len() {
            return Err(Error::InvalidArgument {
                what: format!("DRM event at byte {at}: length {len} does not fit the read"),
            });
        }
        let e = &buf[at..at + len];
        let vblank = || VblankEvent {
            user_data: le_u64(e, 8),
            tv_sec: le_u32(e, 16),
            tv_usec: le_u32(e, 20),
            sequence: le_u32(e, 24),
            crtc_id: le_u32(e, 28),
        };
        out.push(match kind {
            EVENT_VBLANK if len >= 28 => Event::Vblank(vblank()),
            EVENT_FLIP_COMPLETE if len >= 28 => Event::FlipComplete(vblank()),
            EVENT_CRTC_SEQUENCE if len >= 32 => Event::CrtcSequence {
                user_data: le_u64(e, 8),
                time_ns: le_u64(e, 16) as i64,
                sequence: le_u64(e, 24),
            },
            EVENT_VIRTGPU_FENCE => Event::VirtioGpuFence {
                data: e[8..].to_vec(),
            },
            _ => Event::Unknown {
                kind,
                data: e[8..].to_vec(),
            },
        });
        at += len;
    }
    Ok(out)
}

impl Device {
    /// Reads the events queued on this file, waiting up to `timeout` for the first
    /// (`None`: wait for ever). An empty list means the timeout passed: it is measured from
    /// the call, however many signals interrupt the wait.
    ///
    /// Threads sharing this `Device` may read concurrently: one of them reads what is
    /// queued, the others keep waiting (in `poll`, not spinning) for later events; no event
    /// is read twice or lost. A reader outside this `Device` (another process sharing the
    /// open file, a raw `read`) can drain the queue between the poll and the read: on an
    /// O_NONBLOCK fd that EAGAIN sends the call back to waiting until the deadline, while a
    /// blocking fd's read waits for the next event (or a signal) as `read` does.
    ///
    /// The buffer starts at 4 KiB, the kernel's per-file event budget, and doubles if the
    /// kernel ever reports that the next event does not fit (a read of 0 bytes).
    pub fn read_events(&self, timeout: Option<std::time::Duration>) -> Result<Vec<Event>> {
        use crate::deadline::{Deadline, poll};
        use rustix::event::{PollFd, PollFlags};
        use rustix::io::Errno;
        let deadline = Deadline::after(timeout);
        let now = Deadline::after(Some(std::time::Duration::ZERO));
        let fd = self.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let mut buf = Vec::new();
        loop {
            if poll(&mut fds, deadline)? == 0 {
                return Ok(Vec::new());
            }
            // One reader at a time; the others find the queue empty below and wait again.
            let _reader = self.event_reader.lock().unwrap_or_else(|p| p.into_inner());
            if poll(&mut fds, now)? == 0 {
                continue;
            }
            if buf.is_empty() {
                buf.resize(4096, 0);
            }
            loop {
                match sys_call::read_events(fd, &mut buf) {
                    Ok(0) if buf.len() >= 1 << 20 => {
                        return Err(Error::InvalidArgument {
                            what: "a DRM event larger than 1 MiB".into(),
                        });
                    }
                    Ok(0) => buf.resize(buf.len() * 2, 0),
                    Ok(n) => {
                        buf.truncate(n);
                        return parse_events(&buf);
                    }
                    // Drained by another reader, or interrupted: wait again with what is
                    // left of the timeout.
                    Err(Errno::AGAIN | Errno::INTR) => break,
                    Err(e) => return Err(Error::syscall("read", e)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = kind.to_le_bytes().to_vec();
        v.extend_from_slice(&((8 + payload.len()) as u32).to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_each_kind_and_keeps_unknown_ones() {
        let mut vb = Vec::new();
        vb.extend_from_slice(&42u64.to_le_bytes());
        vb.extend_from_slice(&5u32.to_le_bytes());
        vb.extend_from_slice(&6u32.to_le_bytes());
        vb.extend_from_slice(&7u32.to_le_bytes());
        vb.extend_from_slice(&31u32.to_le_bytes());
        let mut seq = Vec::new();
        seq.extend_from_slice(&9u64.to_le_bytes());
        seq.extend_from_slice(&(-1i64).to_le_bytes());
        seq.extend_from_slice(&100u64.to_le_bytes());
        let mut buf = record(EVENT_FLIP_COMPLETE, &vb);
        buf.extend(record(EVENT_VBLANK, &vb));
        buf.extend(record(EVENT_CRTC_SEQUENCE, &seq));
        buf.extend(record(0x8000_0001, &[1, 2, 3, 4]));
        buf.extend(record(EVENT_VIRTGPU_FENCE, &[]));
        let ev = parse_events(&buf).unwrap();
        let want = VblankEvent {
            user_data: 42,
            tv_sec: 5,
            tv_usec: 6,
            sequence: 7,
            crtc_id: 31,
        };
        assert_eq!(ev[0], Event::FlipComplete(want));
        assert_eq!(ev[1], Event::Vblank(want));
        assert_eq!(
            ev[2],
            Event::CrtcSequence {
                user_data: 9,
                time_ns: -1,
                sequence: 100
            }
        );
        assert_eq!(
            ev[3],
            Event::Unknown {
                kind: 0x8000_0001,
                data: vec![1, 2, 3, 4]
            }
        );
        assert_eq!(ev[4], Event::VirtioGpuFence { data: vec![] });
    }

    #[test]
    fn refuses_truncated_records() {
        assert!(parse_events(&[]).unwrap().is_empty());
        let mut buf = record(EVENT_VBLANK, &[0; 24]);
        buf.truncate(20);
        assert!(parse_events(&buf).is_err());
        assert!(parse_events(&record(1, &[])[..4]).is_err());
        let mut zero = 1u32.to_le_bytes().to_vec();
        zero.extend_from_slice(&0u32.to_le_bytes());
        assert!(
            parse_events(&zero).is_err(),
            "a zero length would loop for ever"
        );
        // A known type too short for its payload is kept raw, not misread.
        assert!(matches!(
            parse_events(&record(EVENT_VBLANK, &[0; 4])).unwrap()[0],
            Event::Unknown { kind: 1, .. }
        ));
    }
}
