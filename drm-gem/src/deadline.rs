//! Deadlines for timed waits: a relative timeout becomes one `CLOCK_MONOTONIC` instant when
//! the wait starts, and every retry (after EINTR or EAGAIN) waits only for what is left, so
//! a signal storm cannot stretch a wait past its timeout.

use crate::error::{Error, Result};
use rustix::event::{PollFd, Timespec};
use rustix::io::Errno;
use std::time::{Duration, Instant};

/// When a timed wait gives up; `None` inside: never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    /// `timeout` from now (`std::time::Instant` is `CLOCK_MONOTONIC` on Linux); `None`, or a
    /// timeout too long to represent, never passes.
    pub(crate) fn after(timeout: Option<Duration>) -> Self {
        Self::after_from(Instant::now(), timeout)
    }

    fn after_from(now: Instant, timeout: Option<Duration>) -> Self {
        Self(timeout.and_then(|d| now.checked_add(d)))
    }

    /// What is left at `now`: `None` for no deadline, zero once it has passed.
    fn left_at(self, now: Instant) -> Option<Duration> {
        self.0.map(|at| at.saturating_duration_since(now))
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(self) -> bool {
        self.left_at(Instant::now()) == Some(Duration::ZERO)
    }

    /// What is left now, as `poll`'s timeout (`None`: wait for ever).
    fn poll_timeout(self) -> Option<Timespec> {
        self.left_at(Instant::now()).map(|d| Timespec {
            tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: d.subsec_nanos().into(),
        })
    }
}

/// `poll` until an fd is ready or `deadline` passes (then 0, like poll's own timeout).
/// EINTR and EAGAIN retry with the time that is left, never with the whole timeout again.
pub(crate) fn poll(fds: &mut [PollFd<'_>], deadline: Deadline) -> Result<usize> {
    loop {
        let ts = deadline.poll_timeout();
        match rustix::event::poll(fds, ts.as_ref()) {
            Ok(n) => return Ok(n),
            Err(Errno::INTR | Errno::AGAIN) if deadline.passed() => return Ok(0),
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(e) => return Err(Error::syscall("poll", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_left_shrinks_and_stops_at_zero() {
        let t0 = Instant::now();
        let d = Deadline::after_from(t0, Some(Duration::from_millis(50)));
        assert_eq!(d.left_at(t0), Some(Duration::from_millis(50)));
        assert_eq!(
            d.left_at(t0 + Duration::from_millis(20)),
            Some(Duration::from_millis(30))
        );
        assert_eq!(d.left_at(t0 + Duration::from_secs(9)), Some(Duration::ZERO));
        let never = Deadline::after_from(t0, None);
        assert_eq!(never.left_at(t0 + Duration::from_secs(9)), None);
        assert!(!never.passed());
        // A timeout past what Instant can hold never passes rather than overflowing.
        assert_eq!(Deadline::after_from(t0, Some(Duration::MAX)), never);
        assert!(Deadline::after(Some(Duration::ZERO)).passed());
    }

    #[test]
    fn poll_of_nothing_returns_at_the_deadline() {
        let t0 = Instant::now();
        let n = poll(&mut [], Deadline::after(Some(Duration::from_millis(20)))).unwrap();
        assert_eq!(n, 0);
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }
}
