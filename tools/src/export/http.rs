//! The HTTP side of `drmtool export`: `GET /metrics` (and `HEAD`), nothing else.
//!
//! Synchronous, one thread per connection up to [`MAX_CONNECTIONS`] (more are answered 503
//! and closed), one request per connection (`Connection: close`). A request is read with a
//! deadline ([`REQUEST_TIMEOUT`], whatever pace the client sends at) and at most
//! [`MAX_REQUEST`] bytes of head; the body of any request is never read. Parsing is
//! `httparse`'s (hyper's parser).

use super::{Exporter, Format, negotiate};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of request head read at most; a longer head is answered 431.
pub const MAX_REQUEST: usize = 8192;
/// The whole request head must arrive within this; a slower client is dropped (408).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// What one connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// 200 with metrics.
    Metrics,
    /// Any other status (the code).
    Status(u16),
    /// The client went away or was too slow; nothing or a 408 was sent.
    Dropped,
}

fn status_line(code: u16) -> &'static str {
    match code {
        200 => "200 OK",
        400 => "400 Bad Request",
        404 => "404 Not Found",
        405 => "405 Method Not Allowed",
        408 => "408 Request Timeout",
        431 => "431 Request Header Fields Too Large",
        503 => "503 Service Unavailable",
        _ => "500 Internal Server Error",
    }
}

fn respond(s: &mut TcpStream, code: u16, ctype: &str, body: &[u8], head_only: bool, extra: &str) {
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        status_line(code),
        body.len()
    );
    let _ = s.write_all(head.as_bytes());
    if !head_only {
        let _ = s.write_all(body);
    }
    let _ = s.flush();
}

fn plain(s: &mut TcpStream, code: u16, msg: &str, extra: &str) -> Served {
    respond(
        s,
        code,
        "text/plain; charset=utf-8",
        format!("{msg}\n").as_bytes(),
        false,
        extra,
    );
    Served::Status(code)
}

/// Reads one request head (until the blank line) within [`REQUEST_TIMEOUT`]: `Ok(bytes)`,
/// or `Err(Some(code))` to answer, `Err(None)` to drop.
fn read_head(s: &mut TcpStream) -> Result<Vec<u8>, Option<u16>> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Some(408));
        }
        // A read timeout of what is left of the deadline: a client that sends one byte a
        // second cannot hold the thread past it.
        if s.set_read_timeout(Some(left)).is_err() {
            return Err(None);
        }
        match s.read(&mut chunk) {
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
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Some(408));
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

/// Serves one connection: one request, one answer.
pub fn serve_one(s: TcpStream, exporter: &Mutex<Exporter>) -> Served {
    serve_one_with(s, exporter, None)
}

/// [`serve_one`], answering from `last` while another connection's scan holds the
/// exporter.
pub fn serve_one_with(
    mut s: TcpStream,
    exporter: &Mutex<Exporter>,
    last: Option<&LastServed>,
) -> Served {
    let _ = s.set_write_timeout(Some(REQUEST_TIMEOUT));
    let head = match read_head(&mut s) {
        Ok(h) => h,
        Err(Some(code)) => return plain(&mut s, code, status_line(code), ""),
        Err(None) => return Served::Dropped,
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) | Err(_) => {
            return plain(&mut s, 400, "bad request", "");
        }
    }
    let method = req.method.unwrap_or_default();
    let path = req.path.unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return plain(&mut s, 404, "not found: only /metrics is served", "");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return plain(&mut s, 405, "method not allowed", "Allow: GET, HEAD\r\n"),
    };
    let accept = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("accept"))
        .and_then(|h| std::str::from_utf8(h.value).ok());
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
            Err(_) => return plain(&mut s, 500, "the exporter failed", ""),
        },
    };
    respond(
        &mut s,
        200,
        format.content_type(),
        body.as_bytes(),
        head_only,
        "",
    );
    Served::Metrics
}

/// Accepts connections on `listener` forever, each served on a thread of its own (at most
/// [`MAX_CONNECTIONS`] at once).
pub fn serve(listener: TcpListener, exporter: Arc<Mutex<Exporter>>) -> std::io::Error {
    let busy = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(LastServed::default());
    loop {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            // EMFILE and the like: back off instead of spinning.
            Err(e) if e.kind() != std::io::ErrorKind::Interrupted => {
                if e.raw_os_error() == Some(rustix::io::Errno::BADF.raw_os_error()) {
                    return e;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(_) => continue,
        };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::AcqRel);
            let mut s = s;
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            plain(&mut s, 503, "too many connections", "Retry-After: 1\r\n");
            continue;
        }
        let (e, b, l) = (exporter.clone(), busy.clone(), last.clone());
        let spawned = std::thread::Builder::new()
            .name("export-conn".into())
            .spawn(move || {
                serve_one_with(s, &e, Some(&l));
                b.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
