//! `drmtool export`'s server loop: the listener polled with the lobby's connections,
//! speakers promoted to slots and served each on a thread (`http.rs` serves one
//! connection; `admission.rs` decides who holds a slot).

use super::Exporter;
use super::admission::{Admit, Lobby, Slots};
use super::http::{
    ACCEPT_BACKOFF, ACCEPT_BATCH, Access, LOBBY_MAX, LastServed, MAX_CONNECTIONS,
    serve_conn_flagged,
};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a non-blocking peek at a socket's receive queue found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peeked {
    /// Bytes from the client wait (read or not yet).
    Bytes,
    /// The client closed its side without sending anything.
    End,
    /// Nothing yet.
    Nothing,
    /// The connection failed (reset).
    Failed,
}

/// Peeks at `s`'s receive queue (`MSG_PEEK | MSG_DONTWAIT`: nothing is consumed and the
/// file's blocking mode, shared with the serving thread, is left alone).
fn peek(s: &TcpStream) -> Peeked {
    let mut b = [0u8; 1];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    match rustix::net::recv(s, &mut b, flags) {
        Ok((0, _)) => Peeked::End,
        Ok(_) => Peeked::Bytes,
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Peeked::Nothing,
        Err(_) => Peeked::Failed,
    }
}

/// Accepts plain-HTTP connections on `listener` forever, each served on a thread of its own
/// ([`serve_with`] without TLS or authentication).
pub fn serve(listener: TcpListener, exporter: Arc<Mutex<Exporter>>) -> io::Error {
    serve_with(listener, exporter, Arc::new(Access::default()))
}

/// Accepts connections on `listener` forever under `access` (the listener is made
/// non-blocking): connections that have sent nothing wait in a [`Lobby`] of
/// [`LOBBY_MAX`], without a thread; each that speaks is served on a thread of its own, at
/// most [`MAX_CONNECTIONS`] at once ([`Slots`]), waiting in the lobby while every slot is
/// taken until one is released or an idle one gives way. Returns the error that ended it:
/// the listener's (EBADF), the wake-up eventfd's at the start, or `poll(2)`'s.
pub fn serve_with(
    listener: TcpListener,
    exporter: Arc<Mutex<Exporter>>,
    access: Arc<Access>,
) -> io::Error {
    let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
    let wake = match rustix::event::eventfd(0, flags) {
        Ok(fd) => Arc::new(fd),
        Err(e) => return e.into(),
    };
    if let Err(e) = listener.set_nonblocking(true) {
        return e;
    }
    let mut server = Server {
        listener,
        wake,
        lobby: Lobby::new(LOBBY_MAX),
        slots: Arc::new(Mutex::new(Slots::new(MAX_CONNECTIONS))),
        exporter,
        last: Arc::new(LastServed::default()),
        access,
        rest_until: None,
    };
    loop {
        if let Err(e) = server.round() {
            return e;
        }
    }
}

/// What one `poll(2)` of the accept loop found.
#[derive(Debug, Default)]
struct Ready {
    /// The listener has connections to accept (or failed: accept tells).
    listener: bool,
    /// Silent connections that have sent their first bytes.
    spoke: Vec<u64>,
    /// Connections whose peer went away (closed without a byte, reset, hung up).
    gone: Vec<u64>,
}

/// The state of [`serve_with`]'s accept loop.
struct Server {
    listener: TcpListener,
    /// Written by a connection's thread when it releases its slot: the loop wakes to give
    /// it to a waiting speaker.
    wake: Arc<OwnedFd>,
    lobby: Lobby<TcpStream>,
    slots: Arc<Mutex<Slots<TcpStream>>>,
    exporter: Arc<Mutex<Exporter>>,
    last: Arc<LastServed>,
    access: Arc<Access>,
    /// After an accept failed for want of resources: the listener is not polled until then.
    rest_until: Option<Instant>,
}

impl Server {
    /// One round: silent connections past their time closed, waiting speakers given slots,
    /// then a poll for new connections, first bytes, peers gone and released slots.
    fn round(&mut self) -> io::Result<()> {
        let now = Instant::now();
        drop(self.lobby.expire(now));
        let retry_at = self.promote(now);
        if self.rest_until.is_some_and(|t| t <= now) {
            self.rest_until = None;
        }
        let until = [retry_at, self.lobby.next_expiry(), self.rest_until]
            .into_iter()
            .flatten()
            .min();
        let ready = self.poll(until)?;
        for id in ready.gone {
            drop(self.lobby.remove(id));
        }
        for id in ready.spoke {
            self.lobby.spoke(id);
        }
        if ready.listener {
            self.accept_all()?;
        }
        Ok(())
    }

    /// Gives waiting speakers the slots there is room for and starts their threads; when
    /// an idle slot may give way later.
    fn promote(&mut self, now: Instant) -> Option<Instant> {
        if self.lobby.waiting() == 0 {
            return None;
        }
        let p = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            self.lobby.promote(&mut slots, now, |s| s.try_clone().ok())
        };
        for s in p.evicted {
            let _ = s.shutdown(Shutdown::Both);
        }
        drop(p.dropped);
        for (s, id) in p.admitted {
            self.spawn(s, id);
        }
        p.retry_at
    }

    /// Serves `s`, holding slot `id`, on a thread of its own, which releases the slot and
    /// wakes the loop when done.
    fn spawn(&self, s: TcpStream, id: u64) {
        let (e, sh, l, a, w) = (
            self.exporter.clone(),
            self.slots.clone(),
            self.last.clone(),
            self.access.clone(),
            self.wake.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("export-conn".into())
            .spawn(move || {
                let mark = || {
                    if let Ok(mut slots) = sh.lock() {
                        slots.answering(id);
                    }
                };
                // It has spoken (its first bytes wait in the socket).
                serve_conn_flagged(s, &e, Some(&l), &a, mark, &AtomicBool::new(true));
                sh.lock().unwrap_or_else(|p| p.into_inner()).release(id);
                wake_up(&w);
            });
        if spawned.is_err() {
            // The connection went with the closure; its slot is free for the next speaker.
            self.slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(id);
            wake_up(&self.wake);
        }
    }

    /// Waits until something happens or `until`, and sorts out what did.
    fn poll(&self, until: Option<Instant>) -> io::Result<Ready> {
        let listening = self.rest_until.is_none();
        let mut fds = Vec::with_capacity(2 + self.lobby.len());
        fds.push(PollFd::new(&*self.wake, PollFlags::IN));
        if listening {
            fds.push(PollFd::new(&self.listener, PollFlags::IN));
        }
        let first_guest = fds.len();
        for (_, s, spoken) in self.lobby.guests() {
            // A waiting speaker is watched only for its peer going away (POLLHUP and
            // POLLERR come unasked); a silent one for its first bytes or its end too.
            let events = if spoken {
                PollFlags::empty()
            } else {
                PollFlags::IN
            };
            fds.push(PollFd::new(s, events));
        }
        let timeout = until
            .and_then(|t| Timespec::try_from(t.saturating_duration_since(Instant::now())).ok());
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(Ready::default()),
            Err(rustix::io::Errno::NOMEM) => {
                std::thread::sleep(ACCEPT_BACKOFF);
                return Ok(Ready::default());
            }
            Err(e) => return Err(e.into()),
        }
        let mut ready = Ready {
            listener: listening && !fds[1].revents().is_empty(),
            ..Ready::default()
        };
        let woken = !fds[0].revents().is_empty();
        for ((id, s, spoken), fd) in self.lobby.guests().zip(&fds[first_guest..]) {
            let ev = fd.revents();
            if ev.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) {
                ready.gone.push(id);
            } else if !spoken && ev.contains(PollFlags::IN) {
                match peek(s) {
                    Peeked::Bytes => ready.spoke.push(id),
                    Peeked::End | Peeked::Failed => ready.gone.push(id),
                    Peeked::Nothing => {}
                }
            }
        }
        drop(fds);
        if woken {
            // Reset the eventfd's count (non-blocking; nothing to read is fine).
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&*self.wake, &mut count);
        }
        Ok(ready)
    }

    /// Accepts up to [`ACCEPT_BATCH`] connections into the lobby (all the listen queue
    /// holds, short of a flood). Ends `serve_with` only when the listener itself is bad
    /// (EBADF); on EMFILE and the like the listener rests [`ACCEPT_BACKOFF`].
    fn accept_all(&mut self) -> io::Result<()> {
        for _ in 0..ACCEPT_BATCH {
            let s = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BADF.raw_os_error()) => {
                    return Err(e);
                }
                Err(_) => {
                    self.rest_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return Ok(());
                }
            };
            // The serving thread reads and writes with blocking timeouts (Linux's accept
            // does not pass the listener's O_NONBLOCK on; made sure of all the same).
            if s.set_nonblocking(false).is_err() {
                continue;
            }
            match self.lobby.admit(s, Instant::now()) {
                Admit::In(_) => {}
                Admit::Displaced(_, old) => drop(old),
                Admit::Refused(new) => drop(new),
            }
        }
        Ok(())
    }
}

/// Wakes the accept loop (an eventfd write; a full count already wakes it).
fn wake_up(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::admission::Room;
    use super::super::http::SILENT_GRACE;
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    fn has_pending(s: &TcpStream) -> bool {
        peek(s) == Peeked::Bytes
    }

    /// Over a real socket: a peer that closed without a byte reads as the end, one that sent
    /// a byte as bytes, one that sent nothing as nothing.
    #[test]
    fn a_peek_tells_bytes_from_the_end() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let quiet = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (srv, _) = l.accept().unwrap();
        assert_eq!(peek(&srv), Peeked::Nothing);
        drop(quiet);
        let t = Instant::now();
        while peek(&srv) == Peeked::Nothing && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(peek(&srv), Peeked::End);
    }

    /// A connection whose bytes wait unread (its thread not yet run) counts as spoken.
    #[test]
    fn pending_bytes_make_a_connection_spoken() {
        let t0 = Instant::now();
        let mut s: Slots<bool> = Slots::new(2);
        let _quiet = s.take(false, t0);
        let _hello = s.take(true, t0);
        s.refresh_spoken(|pending| *pending);
        let late = t0 + SILENT_GRACE;
        assert_eq!(s.make_room(late), Room::Evict(false));
        // Over a real socket: nothing sent, then one byte (peeked, not consumed).
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (srv, _) = l.accept().unwrap();
        assert!(!has_pending(&srv));
        c.write_all(b"G").unwrap();
        let t = Instant::now();
        while !has_pending(&srv) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(has_pending(&srv));
        assert!(has_pending(&srv), "a peek leaves the byte");
    }
}
