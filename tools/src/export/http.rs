//! The HTTP side of `drmtool export`: `GET /metrics` (and `HEAD`), nothing else, over
//! plain TCP or TLS ([`Access`], from `--web.config.file`), with HTTP basic auth when users
//! are configured (401 before anything else).
//!
//! Synchronous, one thread per connection that has spoken, one request per connection
//! (`Connection: close`). The listener is non-blocking and polled (`poll(2)`) together with
//! the connections that have sent nothing yet; each round accepts what the listen queue
//! holds (up to [`ACCEPT_BATCH`] at a time), so a connection never waits in the kernel's
//! FIFO behind others. A connection that has sent nothing waits in the [`Lobby`]: it costs
//! one file descriptor and no thread nor slot, and it is closed when it has sent nothing
//! for [`HEADER_TIMEOUT`], when its peer goes away, or when it is the oldest silent one in
//! a lobby full at [`LOBBY_MAX`] and another connection arrives. A connection whose first
//! bytes arrive (a request line, a TLS ClientHello) is a speaker: it takes one of the
//! [`MAX_CONNECTIONS`] slots ([`Slots`]) and a thread at once when one is free; else the
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
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of request head read at most; a longer head is answered 431.
pub const MAX_REQUEST: usize = 8192;
/// A connection in the [`Lobby`] that has sent nothing for this long since it was
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
/// [`Slots`]' rule for a slot holder that has sent nothing at all: with every slot taken it
/// gives way first, once it has held its slot this long, before any that has begun.
/// [`serve_with`] gives slots only to connections that have spoken (silent ones wait in
/// the [`Lobby`], holding no slot), so there it never applies.
pub const SILENT_GRACE: Duration = Duration::from_millis(100);
/// Connections served at once: slots, each with a thread. A connection that has sent
/// nothing holds none (it waits in the [`Lobby`]).
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
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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

/// The last exposition served in each format, shared by [`serve`]'s connections: a scrape
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
/// [`Slots::make_room`] reads to let silent connections give way first).
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

/// What [`Slots::make_room`] says to do before a waiting connection takes a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Room<H> {
    /// A slot is free: take it.
    Free,
    /// Every slot is taken; this idle connection (removed from the slots) gives way: shut
    /// it, then take its slot.
    Evict(H),
    /// Every slot is taken; the oldest idle connection may be evicted at this instant.
    WaitUntil(Instant),
    /// Every slot is answering a request: wait for one to end.
    WaitForRelease,
}

#[derive(Debug)]
struct Slot<H> {
    id: u64,
    opened: Instant,
    answering: bool,
    spoke: Arc<AtomicBool>,
    handle: H,
}

/// The connection slots of [`serve`]: which connections hold one, which of them have sent
/// a complete request (answering) and which are still idle, and who gives way when all
/// are taken. Pure bookkeeping; `H` is what shuts a connection (a clone of its socket).
#[derive(Debug)]
pub struct Slots<H> {
    cap: usize,
    next: u64,
    held: Vec<Slot<H>>,
}

impl<H> Slots<H> {
    /// `cap` slots, all free.
    pub fn new(cap: usize) -> Self {
        Slots {
            cap,
            next: 0,
            held: Vec::new(),
        }
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// What to do at `now` before a waiting connection takes a slot, when every slot is
    /// taken: the oldest connection that has sent nothing gives way once it has had
    /// [`SILENT_GRACE`], else the oldest idle one (no complete request head) once it has
    /// had [`EVICT_AFTER`].
    pub fn make_room(&mut self, now: Instant) -> Room<H> {
        if self.held.len() < self.cap {
            return Room::Free;
        }
        // Slots are kept in the order they were taken: the first of a kind is the oldest.
        let silent = self
            .held
            .iter()
            .position(|s| !s.answering && !s.spoke.load(Ordering::Relaxed))
            .map(|i| (i, self.held[i].opened + SILENT_GRACE));
        let idle = self
            .held
            .iter()
            .position(|s| !s.answering)
            .map(|i| (i, self.held[i].opened + EVICT_AFTER));
        // While a silent connection holds a slot, no connection that has begun gives way:
        // the silent one does, when it has had SILENT_GRACE.
        match (silent, idle) {
            (Some((i, at)), _) | (None, Some((i, at))) if now >= at => {
                Room::Evict(self.held.remove(i).handle)
            }
            (Some((_, at)), _) | (None, Some((_, at))) => Room::WaitUntil(at),
            (None, None) => Room::WaitForRelease,
        }
    }

    /// Marks as spoken every idle, silent connection for which `pending` says bytes have
    /// arrived (read or not by its thread).
    pub fn refresh_spoken(&mut self, pending: impl Fn(&H) -> bool) {
        for s in &self.held {
            if !s.answering && !s.spoke.load(Ordering::Relaxed) && pending(&s.handle) {
                s.spoke.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The flag the connection `id` sets at its first byte ([`serve_conn_flagged`]).
    pub fn spoke_flag(&self, id: u64) -> Option<Arc<AtomicBool>> {
        self.held
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.spoke.clone())
    }

    /// Takes a slot for a connection accepted at `now` (after [`Slots::make_room`] said
    /// [`Room::Free`] or evicted one); its id.
    pub fn take(&mut self, handle: H, now: Instant) -> u64 {
        let id = self.next;
        self.next += 1;
        self.held.push(Slot {
            id,
            opened: now,
            answering: false,
            spoke: Arc::new(AtomicBool::new(false)),
            handle,
        });
        id
    }

    /// Takes a slot, as [`Slots::take`], for a connection that has already spoken (what
    /// [`serve_with`] promotes from its [`Lobby`]): [`SILENT_GRACE`] does not apply to it.
    pub fn take_spoken(&mut self, handle: H, now: Instant) -> u64 {
        let id = self.take(handle, now);
        if let Some(s) = self.held.last() {
            s.spoke.store(true, Ordering::Relaxed);
        }
        id
    }

    /// The connection `id` has sent its request head: it is no longer idle, so no new
    /// connection can evict it.
    pub fn answering(&mut self, id: u64) {
        if let Some(s) = self.held.iter_mut().find(|s| s.id == id) {
            s.answering = true;
        }
    }

    /// The connection `id` is done (a no-op when it was evicted).
    pub fn release(&mut self, id: u64) {
        self.held.retain(|s| s.id != id);
    }
}

/// What [`Lobby::admit`] did with a newly accepted connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<H> {
    /// It waits in the lobby under this id.
    In(u64),
    /// It waits under this id; the lobby was full, and this, its oldest silent connection,
    /// was put out for it: close it.
    Displaced(u64, H),
    /// The lobby is full of speakers waiting for a slot, which a silent connection never
    /// puts out: close the new connection (this).
    Refused(H),
}

/// What [`Lobby::promote`] did: speakers given a slot, slot holders that gave way for them.
#[derive(Debug, PartialEq, Eq)]
pub struct Promoted<H, S> {
    /// Speakers that took a slot, in the order they spoke: the connection and its slot id
    /// (its `spoke` flag already set). Serve each.
    pub admitted: Vec<(H, u64)>,
    /// Slot holders that gave way (idle past [`EVICT_AFTER`]): shut them.
    pub evicted: Vec<S>,
    /// Speakers whose slot handle could not be made: close them.
    pub dropped: Vec<H>,
    /// Speakers still wait and the oldest idle slot may give way at this instant (`None`
    /// while they wait for a release, or when none waits).
    pub retry_at: Option<Instant>,
}

#[derive(Debug)]
struct Guest<H> {
    id: u64,
    arrived: Instant,
    handle: H,
}

/// The connections of [`serve_with`] that hold no slot: the silent ones (accepted, nothing
/// received yet), in the order they were accepted, and the speakers (first bytes received)
/// waiting for a slot, in the order they spoke (those seen in the same round in the order
/// they were accepted). At most `cap` in all; a silent one is closed at [`HEADER_TIMEOUT`]
/// or put out by a newcomer when the lobby is full; a speaker leaves only for a slot or
/// when its peer goes away. Pure bookkeeping; `H` is the connection.
#[derive(Debug)]
pub struct Lobby<H> {
    cap: usize,
    next: u64,
    silent: VecDeque<Guest<H>>,
    speakers: VecDeque<Guest<H>>,
}

impl<H> Lobby<H> {
    /// A lobby of at most `cap` connections (at least one).
    pub fn new(cap: usize) -> Self {
        Lobby {
            cap: cap.max(1),
            next: 0,
            silent: VecDeque::new(),
            speakers: VecDeque::new(),
        }
    }

    /// Connections in the lobby, silent or waiting.
    pub fn len(&self) -> usize {
        self.silent.len() + self.speakers.len()
    }

    /// Whether the lobby is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Speakers waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.speakers.len()
    }

    /// Lets in a connection accepted at `now`, silent: when the lobby is full, the oldest
    /// silent connection is put out for it, or, all of them having spoken, it is refused.
    pub fn admit(&mut self, handle: H, now: Instant) -> Admit<H> {
        let out = if self.len() >= self.cap {
            // Silent connections are kept in the order they were accepted.
            match self.silent.pop_front() {
                Some(g) => Some(g.handle),
                None => return Admit::Refused(handle),
            }
        } else {
            None
        };
        let id = self.next;
        self.next += 1;
        self.silent.push_back(Guest {
            id,
            arrived: now,
            handle,
        });
        match out {
            Some(h) => Admit::Displaced(id, h),
            None => Admit::In(id),
        }
    }

    /// The silent connection `id` has sent its first bytes: it waits for a slot behind the
    /// speakers seen before it. False when `id` is no silent connection of the lobby.
    pub fn spoke(&mut self, id: u64) -> bool {
        let Some(i) = self.silent.iter().position(|g| g.id == id) else {
            return false;
        };
        match self.silent.remove(i) {
            Some(g) => {
                self.speakers.push_back(g);
                true
            }
            None => false,
        }
    }

    /// Takes the connection `id` out (its peer went away): what to close.
    pub fn remove(&mut self, id: u64) -> Option<H> {
        for q in [&mut self.silent, &mut self.speakers] {
            if let Some(i) = q.iter().position(|g| g.id == id) {
                return q.remove(i).map(|g| g.handle);
            }
        }
        None
    }

    /// Takes out every silent connection that has been in the lobby [`HEADER_TIMEOUT`] at
    /// `now`: what to close. Speakers do not expire here (their head's deadline starts
    /// with their slot).
    pub fn expire(&mut self, now: Instant) -> Vec<H> {
        if self.next_expiry().is_none_or(|at| at > now) {
            return Vec::new();
        }
        let (gone, kept) = std::mem::take(&mut self.silent)
            .into_iter()
            .partition(|g| g.arrived + HEADER_TIMEOUT <= now);
        self.silent = kept;
        gone.into_iter().map(|g: Guest<H>| g.handle).collect()
    }

    /// When the next silent connection expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.silent.iter().map(|g| g.arrived + HEADER_TIMEOUT).min()
    }

    /// Every connection in the lobby, waiting speakers first: its id, the connection, and
    /// whether it has spoken.
    pub fn guests(&self) -> impl Iterator<Item = (u64, &H, bool)> {
        let speakers = self.speakers.iter().map(|g| (g.id, &g.handle, true));
        speakers.chain(self.silent.iter().map(|g| (g.id, &g.handle, false)))
    }

    /// Gives waiting speakers slots at `now`, in the order they spoke, as [`Slots`] makes
    /// room ([`Slots::make_room`]: a free slot, else the oldest idle one once it has had
    /// [`EVICT_AFTER`]); `slot_handle` makes what the slot keeps to shut the connection.
    /// Room is asked for only while a speaker waits, so no slot gives way for nothing;
    /// silent connections never take a slot.
    pub fn promote<S>(
        &mut self,
        slots: &mut Slots<S>,
        now: Instant,
        mut slot_handle: impl FnMut(&H) -> Option<S>,
    ) -> Promoted<H, S> {
        let mut out = Promoted {
            admitted: Vec::new(),
            evicted: Vec::new(),
            dropped: Vec::new(),
            retry_at: None,
        };
        while !self.speakers.is_empty() {
            match slots.make_room(now) {
                Room::Free => {}
                Room::Evict(h) => out.evicted.push(h),
                Room::WaitUntil(at) => {
                    out.retry_at = Some(at);
                    break;
                }
                Room::WaitForRelease => break,
            }
            let Some(g) = self.speakers.pop_front() else {
                break;
            };
            match slot_handle(&g.handle) {
                Some(s) => {
                    let id = slots.take_spoken(s, now);
                    out.admitted.push((g.handle, id));
                }
                None => out.dropped.push(g.handle),
            }
        }
        out
    }
}

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
    use super::*;

    fn has_pending(s: &TcpStream) -> bool {
        peek(s) == Peeked::Bytes
    }

    /// [`Lobby::promote`] with the connection's name for its slot handle.
    fn promote(
        l: &mut Lobby<&'static str>,
        s: &mut Slots<&'static str>,
        now: Instant,
    ) -> Promoted<&'static str, &'static str> {
        l.promote(s, now, |h| Some(*h))
    }

    fn names(p: &Promoted<&'static str, &'static str>) -> Vec<&'static str> {
        p.admitted.iter().map(|(h, _)| *h).collect()
    }

    /// However many silent connections come (more than the lobby holds), a speaker takes a
    /// free slot at once; silent ones never take a slot.
    #[test]
    fn silent_floods_never_delay_a_speaker() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(8), Slots::new(2));
        for _ in 0..100 {
            let _ = l.admit("silent", t0);
        }
        assert_eq!(l.len(), 8);
        let p = promote(&mut l, &mut s, t0);
        assert!(
            p.admitted.is_empty() && s.is_empty(),
            "no slot for the silent"
        );
        let Admit::Displaced(scraper, "silent") = l.admit("scraper", t0) else {
            panic!("the oldest silent one makes room");
        };
        assert!(l.spoke(scraper));
        // Once it has spoken, no flood puts it out.
        for _ in 0..100 {
            let _ = l.admit("silent", t0);
        }
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["scraper"]);
        assert_eq!(p.retry_at, None);
        assert_eq!(s.len(), 1);
        assert_eq!(l.len(), 7);
    }

    /// A full lobby puts out its oldest silent connection for a newcomer, never a speaker;
    /// full of speakers, it refuses the newcomer.
    #[test]
    fn the_lobby_bound_puts_out_the_oldest_silent() {
        let t0 = Instant::now();
        let mut l = Lobby::new(3);
        let Admit::In(_) = l.admit("a", t0) else {
            panic!()
        };
        let Admit::In(b) = l.admit("b", t0 + Duration::from_millis(1)) else {
            panic!()
        };
        let Admit::In(c) = l.admit("c", t0 + Duration::from_millis(2)) else {
            panic!()
        };
        assert!(l.spoke(b));
        let Admit::Displaced(d, "a") = l.admit("d", t0 + Duration::from_millis(3)) else {
            panic!("a, the oldest silent")
        };
        let Admit::Displaced(_, "c") = l.admit("e", t0 + Duration::from_millis(4)) else {
            panic!("c: b has spoken")
        };
        assert!(l.spoke(d));
        let Admit::Displaced(_, "e") = l.admit("f", t0) else {
            panic!("e, the only silent one")
        };
        assert!(!l.spoke(c), "gone");
        assert_eq!(l.remove(c), None);
        let f = l.guests().find(|g| *g.1 == "f").unwrap().0;
        assert!(l.spoke(f));
        assert_eq!(
            l.admit("g", t0),
            Admit::Refused("g"),
            "all three wait for a slot"
        );
        assert_eq!(l.len(), 3);
        assert_eq!(l.waiting(), 3);
    }

    /// A speaker waits for a free slot or an idle one that has had EVICT_AFTER (answering
    /// slots never give way), and silent newcomers never put it out meanwhile.
    #[test]
    fn a_speaker_waits_for_a_free_or_evictable_slot() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(2), Slots::new(2));
        let busy = s.take_spoken("busy", t0);
        s.answering(busy);
        s.take_spoken("idle", t0 + Duration::from_millis(100));
        let Admit::In(x) = l.admit("speaker", t0) else {
            panic!()
        };
        assert!(l.spoke(x));
        let now = t0 + Duration::from_millis(200);
        let p = promote(&mut l, &mut s, now);
        assert!(p.admitted.is_empty());
        let at = t0 + Duration::from_millis(100) + EVICT_AFTER;
        assert_eq!(p.retry_at, Some(at), "when the idle slot may give way");
        for _ in 0..10 {
            let _ = l.admit("silent", now);
        }
        assert_eq!(l.waiting(), 1, "still waiting, not put out");
        let p = promote(&mut l, &mut s, at);
        assert_eq!((names(&p), p.evicted), (vec!["speaker"], vec!["idle"]));
        // The speaker's slot has spoken: it is never taken for a silent one, and gives way
        // only as an idle one does.
        let speaker = p.admitted[0].1;
        assert!(s.spoke_flag(speaker).unwrap().load(Ordering::Relaxed));
        let Some((y, _, _)) = l.guests().next() else {
            panic!()
        };
        assert!(l.spoke(y));
        s.answering(speaker);
        let p = promote(&mut l, &mut s, at + EVICT_AFTER * 10);
        assert_eq!(
            (p.admitted.len(), p.retry_at),
            (0, None),
            "every slot answering"
        );
        s.release(busy);
        let p = promote(&mut l, &mut s, at + EVICT_AFTER * 10);
        assert_eq!(names(&p), ["silent"]);
        assert_eq!(l.waiting(), 0);
    }

    /// A silent connection is closed once it has been in the lobby HEADER_TIMEOUT; a
    /// speaker waiting for a slot is not.
    #[test]
    fn silent_connections_expire_at_the_header_timeout() {
        let t0 = Instant::now();
        let mut l = Lobby::new(4);
        let Admit::In(_) = l.admit("early", t0) else {
            panic!()
        };
        let later = t0 + Duration::from_millis(300);
        let Admit::In(_) = l.admit("later", later) else {
            panic!()
        };
        let Admit::In(sp) = l.admit("speaker", t0) else {
            panic!()
        };
        assert!(l.spoke(sp));
        assert_eq!(l.next_expiry(), Some(t0 + HEADER_TIMEOUT));
        let just_before = t0 + HEADER_TIMEOUT - Duration::from_millis(1);
        assert!(l.expire(just_before).is_empty());
        assert_eq!(l.expire(t0 + HEADER_TIMEOUT), ["early"]);
        assert_eq!(l.next_expiry(), Some(later + HEADER_TIMEOUT));
        assert_eq!(l.expire(later + HEADER_TIMEOUT * 5), ["later"]);
        assert_eq!(l.next_expiry(), None);
        assert_eq!(l.waiting(), 1, "the speaker stays");
        assert_eq!(l.remove(sp), Some("speaker"), "until its peer goes away");
        assert!(l.is_empty());
    }

    /// Speakers take slots in the order they spoke (in the order they were accepted when
    /// seen in the same round), whatever the silent ones around them.
    #[test]
    fn speakers_take_slots_in_the_order_they_spoke() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(8), Slots::new(8));
        let ids: Vec<u64> = ["a", "b", "c", "d", "e"]
            .into_iter()
            .map(|n| match l.admit(n, t0) {
                Admit::In(id) => id,
                other => panic!("{other:?}"),
            })
            .collect();
        // Seen in this order: d, then b and a in the same round (accept order: a, b).
        for i in [3, 0, 1] {
            assert!(l.spoke(ids[i]));
        }
        let spoken: Vec<_> = l.guests().filter(|g| g.2).map(|g| *g.1).collect();
        assert_eq!(spoken, ["d", "a", "b"]);
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["d", "a", "b"]);
        assert_eq!(l.len(), 2);
        // With one slot, the first speaker waits for it, then the next.
        let (mut l, mut s) = (Lobby::new(8), Slots::new(1));
        let first = s.take_spoken("holder", t0);
        s.answering(first);
        for n in ["x", "y"] {
            let Admit::In(id) = l.admit(n, t0) else {
                panic!()
            };
            assert!(l.spoke(id));
        }
        assert!(promote(&mut l, &mut s, t0).admitted.is_empty());
        s.release(first);
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["x"]);
    }

    /// A slot handle that cannot be made drops that speaker, not the next one.
    #[test]
    fn a_speaker_without_a_slot_handle_is_dropped() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(4), Slots::new(1));
        for n in ["bad", "good"] {
            let Admit::In(id) = l.admit(n, t0) else {
                panic!()
            };
            assert!(l.spoke(id));
        }
        let p = l.promote(&mut s, t0, |h| (*h != "bad").then_some(*h));
        assert_eq!((names(&p), p.dropped), (vec!["good"], vec!["bad"]));
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

    /// A connection that has sent nothing gives way after SILENT_GRACE, before an older one
    /// that has begun (a scraper mid-handshake), which keeps its slot until EVICT_AFTER and
    /// then only when no silent one is left.
    #[test]
    fn silent_connections_give_way_before_one_that_has_begun() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(2);
        let scraper = s.take("scraper", t0);
        let _idle = s.take("idle", t0 + Duration::from_millis(10));
        s.spoke_flag(scraper)
            .unwrap()
            .store(true, Ordering::Relaxed);
        assert_eq!(
            s.make_room(t0 + Duration::from_millis(20)),
            Room::WaitUntil(t0 + Duration::from_millis(10) + SILENT_GRACE)
        );
        let late = t0 + EVICT_AFTER * 3;
        assert_eq!(
            s.make_room(late),
            Room::Evict("idle"),
            "the silent one, not the older scraper"
        );
        let _next = s.take("next", late);
        s.spoke_flag(_next).unwrap().store(true, Ordering::Relaxed);
        // Only connections that have begun: the oldest past EVICT_AFTER.
        assert_eq!(s.make_room(late), Room::Evict("scraper"));
        assert!(SILENT_GRACE < EVICT_AFTER);
    }

    /// A scraper past EVICT_AFTER (a slow handshake on a loaded machine) is not cut off
    /// while a young silent connection holds a slot: the silent one goes once it has had
    /// SILENT_GRACE (the matrix caught the scraper evicted that way).
    #[test]
    fn a_slow_scraper_outlasts_young_silent_connections() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(2);
        let scraper = s.take("scraper", t0);
        s.spoke_flag(scraper)
            .unwrap()
            .store(true, Ordering::Relaxed);
        let young = t0 + EVICT_AFTER;
        s.take("silent", young);
        let now = young + Duration::from_millis(10);
        assert_eq!(s.make_room(now), Room::WaitUntil(young + SILENT_GRACE));
        assert_eq!(s.make_room(young + SILENT_GRACE), Room::Evict("silent"));
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

    #[test]
    fn free_slots_are_taken_then_the_oldest_idle_gives_way() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(3);
        assert_eq!(s.make_room(t0), Room::Free);
        let a = s.take("a", t0);
        let b = s.take("b", t0 + Duration::from_millis(10));
        let c = s.take("c", t0 + Duration::from_millis(20));
        assert_eq!(s.len(), 3);
        // All three have begun (a TLS handshake, part of a request): EVICT_AFTER applies.
        for id in [a, b, c] {
            s.spoke_flag(id).unwrap().store(true, Ordering::Relaxed);
        }
        // Full; no one has had EVICT_AFTER yet: wait until the oldest has.
        assert_eq!(s.make_room(t0), Room::WaitUntil(t0 + EVICT_AFTER));
        // a sent its request: answering connections never give way; b is the oldest idle.
        s.answering(a);
        let later = t0 + EVICT_AFTER + Duration::from_millis(5);
        assert_eq!(
            s.make_room(t0 + Duration::from_millis(15)),
            Room::WaitUntil(t0 + Duration::from_millis(10) + EVICT_AFTER)
        );
        assert_eq!(
            s.make_room(later + Duration::from_millis(10)),
            Room::Evict("b")
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.make_room(later), Room::Free);
        let d = s.take("d", later);
        s.spoke_flag(d).unwrap().store(true, Ordering::Relaxed);
        s.answering(c);
        s.answering(d);
        assert_eq!(s.make_room(later + EVICT_AFTER * 10), Room::WaitForRelease);
        // An evicted connection's release is a no-op; a real one frees its slot.
        s.release(b);
        assert_eq!(s.len(), 3);
        s.release(c);
        assert_eq!(s.make_room(later), Room::Free);
        s.release(a);
        s.release(d);
        assert!(s.is_empty());
    }

    #[test]
    fn idle_connections_give_way_in_the_order_they_came() {
        let t0 = Instant::now();
        let mut s: Slots<u32> = Slots::new(2);
        s.take(1, t0);
        s.take(2, t0);
        let late = t0 + EVICT_AFTER;
        assert_eq!(s.make_room(late), Room::Evict(1));
        let n3 = s.take(3, late);
        assert_eq!(s.make_room(late), Room::Evict(2));
        let n4 = s.take(4, late);
        // The newcomers are young again: nothing gives way before they have had their time
        // (SILENT_GRACE while they have sent nothing, EVICT_AFTER once they have begun).
        assert_eq!(s.make_room(late), Room::WaitUntil(late + SILENT_GRACE));
        for id in [n3, n4] {
            s.spoke_flag(id).unwrap().store(true, Ordering::Relaxed);
        }
        assert_eq!(s.make_room(late), Room::WaitUntil(late + EVICT_AFTER));
    }
}
