//! The HTTP side of `drmtool export`: `GET /metrics` (and `HEAD`), nothing else, over
//! plain TCP or TLS ([`Access`], from `--web.config.file`), with HTTP basic auth when users
//! are configured (401 before anything else).
//!
//! Synchronous, one thread per connection, one request per connection (`Connection:
//! close`). At most [`MAX_CONNECTIONS`] connections hold a slot ([`Slots`]); a connection
//! that has not sent a complete request head (the TLS handshake included) within
//! [`HEADER_TIMEOUT`] is dropped (408), and when every slot is taken the oldest connection
//! still waiting for its head, once it has had [`EVICT_AFTER`], gives way to the next one
//! in the listen queue. The answer is written within [`WRITE_TIMEOUT`] as a whole, however
//! slowly the client reads. So idle or slow connections, from any address, cannot keep a
//! scrape out: a slot is held at most [`HEADER_TIMEOUT`] without a request and at most
//! [`WRITE_TIMEOUT`] (plus the scan) with one. At most [`MAX_REQUEST`] bytes of head are
//! read; the body of any request is never read. Parsing is `httparse`'s (hyper's parser).

use super::webconfig::BasicAuth;
use super::{Exporter, Format, negotiate};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes of request head read at most; a longer head is answered 431.
pub const MAX_REQUEST: usize = 8192;
/// The whole request head (after the TLS handshake, within the same time) must arrive
/// within this; a slower client is dropped (408).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// The whole answer must be written within this; a client that reads slower is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// With every slot taken, a connection still without a complete request head gives way to
/// a new one once it has been open this long.
pub const EVICT_AFTER: Duration = Duration::from_millis(500);
/// With every slot taken, a connection that has sent nothing at all gives way first, once
/// it has been open this long: a client that connects and sends nothing keeps no scraper
/// waiting, and a scraper that has begun its TLS handshake or request is not cut off while
/// such connections remain.
pub const SILENT_GRACE: Duration = Duration::from_millis(100);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

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

/// What [`Slots::make_room`] says to do before accepting the next connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Room<H> {
    /// A slot is free: accept.
    Free,
    /// Every slot is taken; this idle connection (removed from the slots) gives way: shut
    /// it, then accept.
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

    /// What to do at `now` before the next accept, when every slot is taken: the oldest
    /// connection that has sent nothing gives way once it has had [`SILENT_GRACE`], else
    /// the oldest idle one (no complete request head) once it has had [`EVICT_AFTER`].
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

/// Whether bytes from the client wait in `s`'s receive queue (a non-blocking peek: the
/// file's blocking mode, shared with the serving thread, is left alone).
fn has_pending(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        rustix::net::recv(s, &mut b, rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT),
        Ok((n, _)) if n > 0
    )
}

/// The slots and the condition the accept loop waits on.
type Shared = (Mutex<Slots<TcpStream>>, Condvar);

/// Accepts plain-HTTP connections on `listener` forever, each served on a thread of its own
/// ([`serve_with`] without TLS or authentication).
pub fn serve(listener: TcpListener, exporter: Arc<Mutex<Exporter>>) -> io::Error {
    serve_with(listener, exporter, Arc::new(Access::default()))
}

/// Accepts connections on `listener` forever under `access`, each served on a thread of
/// its own, at most [`MAX_CONNECTIONS`] at once ([`Slots`]): when every slot is taken the
/// next connection waits in the listen queue until a slot frees or an idle connection
/// gives way.
pub fn serve_with(
    listener: TcpListener,
    exporter: Arc<Mutex<Exporter>>,
    access: Arc<Access>,
) -> io::Error {
    let shared: Arc<Shared> = Arc::new((Mutex::new(Slots::new(MAX_CONNECTIONS)), Condvar::new()));
    let last = Arc::new(LastServed::default());
    loop {
        // Room first, then accept: a new connection never evicts one younger than
        // EVICT_AFTER, so a flood of connections cannot cut a scraper off mid-handshake.
        {
            let (lock, cv) = &*shared;
            let mut slots = lock.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                // A client whose first bytes wait in the socket has spoken, even if its
                // thread has not run yet (a loaded machine): it is no silent connection.
                slots.refresh_spoken(has_pending);
                match slots.make_room(Instant::now()) {
                    Room::Free => break,
                    Room::Evict(s) => {
                        let _ = s.shutdown(Shutdown::Both);
                        break;
                    }
                    Room::WaitUntil(at) => {
                        let wait = at.saturating_duration_since(Instant::now());
                        slots = cv
                            .wait_timeout(slots, wait)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    Room::WaitForRelease => {
                        slots = cv.wait(slots).unwrap_or_else(|p| p.into_inner());
                    }
                }
            }
        }
        let s = match listener.accept() {
            Ok((s, _)) => s,
            // EMFILE and the like: back off instead of spinning.
            Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                if e.raw_os_error() == Some(rustix::io::Errno::BADF.raw_os_error()) {
                    return e;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(_) => continue,
        };
        let Ok(handle) = s.try_clone() else {
            continue;
        };
        let (id, spoke) = {
            let mut slots = shared.0.lock().unwrap_or_else(|p| p.into_inner());
            let id = slots.take(handle, Instant::now());
            (id, slots.spoke_flag(id).unwrap_or_default())
        };
        let (e, sh, l, a) = (
            exporter.clone(),
            shared.clone(),
            last.clone(),
            access.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("export-conn".into())
            .spawn(move || {
                let mark = || {
                    if let Ok(mut slots) = sh.0.lock() {
                        slots.answering(id);
                    }
                };
                serve_conn_flagged(s, &e, Some(&l), &a, mark, &spoke);
                let mut slots = sh.0.lock().unwrap_or_else(|p| p.into_inner());
                slots.release(id);
                sh.1.notify_all();
            });
        if spawned.is_err() {
            shared
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
