//! The HTTP side of `drmtool export`: `GET /metrics` (and `HEAD`), nothing else, over
//! plain TCP or TLS ([`Access`], from `--web.config.file`), with HTTP basic auth when users
//! are configured (401 before anything else).
//!
//! Synchronous, one thread per connection that has spoken, one request per connection
//! (`Connection: close`). The listener is non-blocking and polled (`poll(2)`) together with
//! the connections that have sent nothing yet; each round accepts what the listen queue
//! holds (up to [`ACCEPT_BATCH`] at a time), so a connection never waits in the kernel's
//! FIFO behind others. A connection that has sent nothing waits in the [`Lobby`](super::Lobby): it costs
//! one file descriptor and no thread nor slot, and it is closed when it has sent nothing
//! for [`HEADER_TIMEOUT`], when its peer goes away, or when it is the oldest silent one in
//! a lobby full at [`LOBBY_MAX`] and another connection arrives. A connection whose first
//! bytes arrive (a request line, a TLS ClientHello) is a speaker: it takes one of the
//! [`MAX_CONNECTIONS`] slots ([`Slots`](super::Slots)) and a thread at once when one is free; else the
//! oldest slot still without a complete request head gives way to it once it has held its
//! slot [`EVICT_AFTER`]; else (every slot answering) it waits, speakers in the order they
//! spoke, until a slot is released. So silent connections, however many, never delay a
//! speaker nor take its place: only speakers compete for slots. In a slot the request head
//! (the TLS handshake included) must be complete within [`HEADER_TIMEOUT`] (408), and the
//! answer is written within [`WRITE_TIMEOUT`] as a whole, however slowly the client reads:
//! a slot is held at most [`HEADER_TIMEOUT`] without a request and at most
//! [`WRITE_TIMEOUT`] (plus the scan) with one. At most [`MAX_REQUEST`] bytes of head are
//! read; the body of any request is never read. Parsing is `httparse`'s (hyper's parser).

use super::webconfig::BasicAuth;
use super::{Exporter, Format, negotiate};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of request head read at most; a longer head is answered 431.
pub const MAX_REQUEST: usize = 8192;
/// A connection in the [`Lobby`](super::Lobby) that has sent nothing for this long since it was
/// accepted is closed; a connection in a slot must have sent its whole request head (after
/// the TLS handshake, within the same time) this long after it took the slot, else it is
/// dropped (408).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// The whole answer must be written within this; a client that reads slower is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// With every slot taken and a speaker waiting for one, the oldest slot whose connection
/// has not sent a complete request head gives way (it is shut) once it has held its slot
/// this long; a slot answering a request never gives way.
pub const EVICT_AFTER: Duration = Duration::from_millis(500);
/// [`Slots`](super::Slots)' rule for a slot holder that has sent nothing at all: with every slot taken it
/// gives way first, once it has held its slot this long, before any that has begun.
/// [`serve_with`](super::serve_with) gives slots only to connections that have spoken (silent ones wait in
/// the [`Lobby`](super::Lobby), holding no slot), so there it never applies.
pub const SILENT_GRACE: Duration = Duration::from_millis(100);
/// Connections served at once: slots, each with a thread. A connection that has sent
/// nothing holds none (it waits in the [`Lobby`](super::Lobby)).
pub const MAX_CONNECTIONS: usize = 16;
/// Connections accepted that have sent nothing yet, kept at most: each costs one file
/// descriptor and no thread. A connection accepted into a full lobby puts out the oldest
/// silent one (closed); when every connection there has spoken and waits for a slot, the
/// new one is closed instead (a silent connection never puts out a speaker). A fixed
/// bound: nothing of it comes from what clients send or how many connect. A silent flood
/// larger than this shortens the time a silent connection is kept to about `LOBBY_MAX`
/// over the flood's rate (a client sends its request right after connecting, so it is a
/// speaker, out of reach of the flood, well within that).
pub const LOBBY_MAX: usize = 256;
/// Connections accepted at most per round of the accept loop before the lobby is polled
/// again: an endless flood of reconnects cannot keep the loop from seeing who has spoken.
/// The listener stays readable, so the next round accepts the rest at once.
pub const ACCEPT_BATCH: usize = 64;
/// How long the listener rests after an accept failed for want of resources (EMFILE,
/// ENFILE, ENOMEM...): the lobby and the slots are served meanwhile.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What one connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// 200 with metrics.
    Metrics,
    /// Any other status (the code).
    Status(u16),
    /// The client went away, was too slow or failed the TLS handshake; nothing or a 408
    /// was sent.
    Dropped,
}

/// Who may scrape, and over what: TLS (a rustls server configuration) and basic-auth
/// users, from `--web.config.file`. The default is plain HTTP without authentication.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// TLS; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Users that must authenticate (none: no authentication).
    pub auth: BasicAuth,
}

fn status_line(code: u16) -> &'static str {
    match code {
        200 => "200 OK",
        400 => "400 Bad Request",
        401 => "401 Unauthorized",
        404 => "404 Not Found",
        405 => "405 Method Not Allowed",
        408 => "408 Request Timeout",
        431 => "431 Request Header Fields Too Large",
        503 => "503 Service Unavailable",
        _ => "500 Internal Server Error",
    }
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(left)
    }
}

/// One accepted connection, plain or TLS, read and written against absolute deadlines.
struct Conn<'a> {
    tcp: TcpStream,
    tls: Option<rustls::ServerConnection>,
    /// Set at the first byte received (the slot is then no longer silent).
    spoke: &'a AtomicBool,
}

impl Conn<'_> {
    /// Writes out what rustls has queued (handshake messages, records, alerts).
    fn flush_tls(&mut self, deadline: Instant) -> io::Result<()> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(());
        };
        while tls.wants_write() {
            self.tcp.set_write_timeout(Some(left(deadline)?))?;
            tls.write_tls(&mut self.tcp)?;
        }
        Ok(())
    }

    /// Reads some plaintext by `deadline` (driving the TLS handshake first); 0 at the end.
    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        if self.tls.is_none() {
            // A read timeout of what is left of the deadline: a client that sends one byte
            // a second cannot hold the thread past it.
            self.tcp.set_read_timeout(Some(left(deadline)?))?;
            let n = self.tcp.read(buf)?;
            if n > 0 {
                self.spoke.store(true, Ordering::Relaxed);
            }
            return Ok(n);
        }
        loop {
            let tls = self.tls.as_mut().expect("checked above");
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            self.flush_tls(deadline)?;
            self.tcp.set_read_timeout(Some(left(deadline)?))?;
            let tls = self.tls.as_mut().expect("checked above");
            if tls.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            self.spoke.store(true, Ordering::Relaxed);
            if let Err(e) = tls.process_new_packets() {
                // The alert rustls queued (a plain-HTTP client gets it as garbage).
                let _ = self.flush_tls(deadline);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    /// Writes all of `data` by `deadline`, however slowly the peer reads.
    fn write_all_by(&mut self, mut data: &[u8], deadline: Instant) -> io::Result<()> {
        if self.tls.is_none() {
            while !data.is_empty() {
                self.tcp.set_write_timeout(Some(left(deadline)?))?;
                match self.tcp.write(data) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => data = &data[n..],
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
        while !data.is_empty() {
            let tls = self.tls.as_mut().expect("checked above");
            let n = tls.writer().write(data)?;
            data = &data[n..];
            if n == 0 && !tls.wants_write() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.flush_tls(deadline)?;
        }
        self.flush_tls(deadline)
    }

    /// Ends the answer: TLS close_notify, then the write side shut.
    fn finish(&mut self, deadline: Instant) {
        if let Some(tls) = self.tls.as_mut() {
            tls.send_close_notify();
            let _ = self.flush_tls(deadline);
        }
        let _ = self.tcp.shutdown(Shutdown::Write);
    }
}

fn respond(c: &mut Conn, code: u16, ctype: &str, body: &[u8], head_only: bool, extra: &str) {
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        status_line(code),
        body.len()
    );
    // One deadline for the whole answer: a slow reader is cut off when it passes.
    let deadline = Instant::now() + WRITE_TIMEOUT;
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    if c.write_all_by(&out, deadline).is_ok() {
        c.finish(deadline);
    }
}

fn plain(c: &mut Conn, code: u16, msg: &str, extra: &str) -> Served {
    respond(
        c,
        code,
        "text/plain; charset=utf-8",
        format!("{msg}\n").as_bytes(),
        false,
        extra,
    );
    Served::Status(code)
}

/// Reads one request head (until the blank line) by `deadline`: `Ok(bytes)`, or
/// `Err(Some(code))` to answer, `Err(None)` to drop.
fn read_head(c: &mut Conn, deadline: Instant) -> Result<Vec<u8>, Option<u16>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        match c.read_by(&mut chunk, deadline) {
            Ok(0) => return Err(None),
            Ok(n) => {
                let room = MAX_REQUEST + 4 - buf.len().min(MAX_REQUEST + 4);
                buf.extend_from_slice(&chunk[..n.min(room)]);
                if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    return Ok(buf);
                }
                if buf.len() > MAX_REQUEST {
                    return Err(Some(431));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A TLS handshake that failed (plain HTTP on the TLS port): nothing to answer.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(None),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // Still in the TLS handshake: no channel to answer on.
                let handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
                return Err(if handshaking { None } else { Some(408) });
            }
            Err(_) => return Err(None),
        }
    }
}

/// The last exposition served in each format, shared by [`serve`](super::serve)'s connections: a scrape
/// that arrives while another's scan holds the exporter gets it at once instead of queueing
/// behind the scan (a slow scan, on a loaded machine, would otherwise make every scraper
/// time out and the connections pile up to [`MAX_CONNECTIONS`]).
#[derive(Debug, Default)]
pub struct LastServed(Mutex<[Option<String>; 2]>);

impl LastServed {
    fn slot(format: Format) -> usize {
        match format {
            Format::OpenMetrics => 0,
            Format::Text => 1,
        }
    }

    fn get(&self, format: Format) -> Option<String> {
        self.0.lock().ok()?[Self::slot(format)].clone()
    }

    fn put(&self, format: Format, body: &str) {
        if let Ok(mut l) = self.0.lock() {
            l[Self::slot(format)] = Some(body.to_string());
        }
    }
}

/// Serves one plain-HTTP connection: one request, one answer.
pub fn serve_one(s: TcpStream, exporter: &Mutex<Exporter>) -> Served {
    serve_one_with(s, exporter, None)
}

/// [`serve_one`], answering from `last` while another connection's scan holds the
/// exporter.
pub fn serve_one_with(
    s: TcpStream,
    exporter: &Mutex<Exporter>,
    last: Option<&LastServed>,
) -> Served {
    serve_conn(s, exporter, last, &Access::default(), || {})
}

/// Serves one connection under `access` (TLS, basic auth); `head_done` is called once the
/// request head is complete (the slot is then no longer idle).
pub fn serve_conn(
    s: TcpStream,
    exporter: &Mutex<Exporter>,
    last: Option<&LastServed>,
    access: &Access,
    head_done: impl FnOnce(),
) -> Served {
    serve_conn_flagged(
        s,
        exporter,
        last,
        access,
        head_done,
        &AtomicBool::new(false),
    )
}

/// [`serve_conn`], setting `spoke` at the first byte the client sends (what
/// [`Slots::make_room`](super::Slots::make_room) reads to let silent connections give way first).
pub fn serve_conn_flagged(
    s: TcpStream,
    exporter: &Mutex<Exporter>,
    last: Option<&LastServed>,
    access: &Access,
    head_done: impl FnOnce(),
    spoke: &AtomicBool,
) -> Served {
    let deadline = Instant::now() + HEADER_TIMEOUT;
    let tls = match &access.tls {
        Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
            Ok(t) => Some(t),
            Err(_) => return Served::Dropped,
        },
        None => None,
    };
    let mut c = Conn { tcp: s, tls, spoke };
    let head = match read_head(&mut c, deadline) {
        Ok(h) => h,
        Err(Some(code)) => return plain(&mut c, code, status_line(code), ""),
        Err(None) => return Served::Dropped,
    };
    head_done();
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) | Err(_) => {
            return plain(&mut c, 400, "bad request", "");
        }
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    if access.auth.authorize(header("authorization")).is_err() {
        return plain(
            &mut c,
            401,
            "unauthorized",
            "WWW-Authenticate: Basic realm=\"drmtool\", charset=\"UTF-8\"\r\n",
        );
    }
    let method = req.method.unwrap_or_default();
    let path = req.path.unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return plain(&mut c, 404, "not found: only /metrics is served", "");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return plain(&mut c, 405, "method not allowed", "Allow: GET, HEAD\r\n"),
    };
    let accept = header("accept").and_then(|v| std::str::from_utf8(v).ok());
    let format: Format = negotiate(accept);
    let stale = match (last, exporter.try_lock()) {
        (Some(l), Err(std::sync::TryLockError::WouldBlock)) => l.get(format),
        _ => None,
    };
    let body = match stale {
        Some(b) => b,
        None => match exporter.lock() {
            Ok(mut e) => {
                let b = e.scrape(format, Instant::now());
                if let Some(l) = last {
                    l.put(format, &b);
                }
                b
            }
            // A scrape that panicked poisoned the lock: the state may be half-updated.
            Err(_) => return plain(&mut c, 500, "the exporter failed", ""),
        },
    };
    respond(
        &mut c,
        200,
        format.content_type(),
        body.as_bytes(),
        head_only,
        "",
    );
    Served::Metrics
}
