//! The framed result channel from the guest's init to the host.
//!
//! Each record is framed as `\n@@VMR1 <len> <payload>\n`, where `<len>` is the payload's
//! byte length. The parser finds markers anywhere in the input, so it also works on a
//! serial console where kernel log lines may be interleaved, even mid-record: a record
//! whose length no longer matches is reported as corrupt and skipped.

const MARKER: &[u8] = b"@@VMR1 ";

/// Frames `payload` as one record; `\n` and `\r` in it are replaced by spaces.
pub fn encode(payload: &str) -> String {
    let payload = payload.replace(['\n', '\r'], " ");
    format!("\n@@VMR1 {} {payload}\n", payload.len())
}

/// The outcome of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The test passed.
    Pass,
    /// The test failed.
    Fail,
    /// The test was skipped.
    Skip,
}

impl Outcome {
    /// The wire spelling: `pass`, `fail` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Outcome::Pass, Outcome::Fail, Outcome::Skip]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One record sent by the guest.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// `boot <uptime_s> <release>`: init started.
    Boot {
        /// Kernel uptime in seconds when init started.
        uptime_s: f64,
        /// Kernel release (`uname -r`).
        release: String,
    },
    /// `module <name> ok|fail [<detail...>]`: result of loading a kernel module.
    Module {
        /// Module name.
        name: String,
        /// Whether it loaded.
        ok: bool,
        /// Error text (may be empty).
        detail: String,
    },
    /// `node <path> <driver|->`: a device node and the driver behind it.
    Node {
        /// Device node path, e.g. `/dev/dri/card0`.
        path: String,
        /// Driver name; `None` when unknown (`-`).
        driver: Option<String>,
    },
    /// `test <suite> <name> pass|fail|skip <duration_ms> [<reason...>]`: one test result.
    Test {
        /// Test suite.
        suite: String,
        /// Test name.
        name: String,
        /// Outcome.
        outcome: Outcome,
        /// Duration in milliseconds.
        duration_ms: u64,
        /// Failure or skip reason (may be empty).
        reason: String,
    },
    /// `start <suite> <name>`: the in-guest runner is about to run this unit (one libtest
    /// test, a kernel selftest program as `<suite> (run)`, a libdrm program). Sent before
    /// the unit starts, so after a kernel crash the last one names what was running.
    Start {
        /// Test suite.
        suite: String,
        /// Unit name.
        name: String,
    },
    /// `exit <code>`: the guest's program exit status.
    Exit {
        /// Exit status.
        code: i32,
    },
    /// `note <text...>`: free-form text.
    Note(String),
    /// `end <count>`: last record; `count` is the number of records sent before it.
    End {
        /// Number of records sent before this one.
        count: u64,
    },
    /// A well-framed payload that matches no known grammar.
    Unknown(String),
}

impl Record {
    /// The payload text for this record, in the grammar [`parse`] understands.
    pub fn to_payload(&self) -> String {
        match self {
            Record::Boot { uptime_s, release } => format!("boot {uptime_s} {release}"),
            Record::Module { name, ok, detail } => {
                let mut s = format!("module {name} {}", if *ok { "ok" } else { "fail" });
                if !detail.is_empty() {
                    s.push(' ');
                    s.push_str(detail);
                }
                s
            }
            Record::Node { path, driver } => {
                format!("node {path} {}", driver.as_deref().unwrap_or("-"))
            }
            Record::Test {
                suite,
                name,
                outcome,
                duration_ms,
                reason,
            } => {
                let mut s = format!("test {suite} {name} {} {duration_ms}", outcome.as_str());
                if !reason.is_empty() {
                    s.push(' ');
                    s.push_str(reason);
                }
                s
            }
            Record::Start { suite, name } => format!("start {suite} {name}"),
            Record::Exit { code } => format!("exit {code}"),
            Record::Note(text) => format!("note {text}"),
            Record::End { count } => format!("end {count}"),
            Record::Unknown(payload) => payload.clone(),
        }
    }

    fn from_payload(payload: &str) -> Record {
        Self::parse_known(payload).unwrap_or_else(|| Record::Unknown(payload.to_owned()))
    }

    fn parse_known(payload: &str) -> Option<Record> {
        let (kind, rest) = payload.split_once(' ')?;
        Some(match kind {
            "boot" => {
                let [up, release] = fields(rest, 2)?[..] else {
                    return None;
                };
                Record::Boot {
                    uptime_s: up.parse().ok()?,
                    release: release.to_owned(),
                }
            }
            "module" => {
                let (name, status, detail) = match fields(rest, 3)?[..] {
                    [n, s] => (n, s, ""),
                    [n, s, d] => (n, s, d),
                    _ => return None,
                };
                let ok = match status {
                    "ok" => true,
                    "fail" => false,
                    _ => return None,
                };
                Record::Module {
                    name: name.to_owned(),
                    ok,
                    detail: detail.to_owned(),
                }
            }
            "node" => {
                let [path, driver] = fields(rest, 2)?[..] else {
                    return None;
                };
                let driver = match driver {
                    "" => return None,
                    "-" => None,
                    d => Some(d.to_owned()),
                };
                Record::Node {
                    path: path.to_owned(),
                    driver,
                }
            }
            "test" => {
                let (suite, name, outcome, ms, reason) = match fields(rest, 5)?[..] {
                    [s, n, o, d] => (s, n, o, d, ""),
                    [s, n, o, d, r] => (s, n, o, d, r),
                    _ => return None,
                };
                Record::Test {
                    suite: suite.to_owned(),
                    name: name.to_owned(),
                    outcome: Outcome::parse(outcome)?,
                    duration_ms: ms.parse().ok()?,
                    reason: reason.to_owned(),
                }
            }
            "start" => {
                let [suite, name] = fields(rest, 2)?[..] else {
                    return None;
                };
                if name.is_empty() {
                    return None;
                }
                Record::Start {
                    suite: suite.to_owned(),
                    name: name.to_owned(),
                }
            }
            "exit" => Record::Exit {
                code: rest.parse().ok()?,
            },
            "note" => Record::Note(rest.to_owned()),
            "end" => Record::End {
                count: rest.parse().ok()?,
            },
            _ => return None,
        })
    }
}

/// Splits `s` on single spaces into at most `n` fields, the last taking the remainder.
/// Fails if any field other than that remainder is empty (doubled or trailing space).
fn fields(s: &str, n: usize) -> Option<Vec<&str>> {
    let f: Vec<&str> = s.splitn(n, ' ').collect();
    f.iter().take(n - 1).all(|w| !w.is_empty()).then_some(f)
}

/// Everything recovered from a captured channel or console.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    /// Well-framed records, in order.
    pub records: Vec<Record>,
    /// One short description per marker whose record could not be read.
    pub corrupt: Vec<String>,
}

impl Parsed {
    /// Whether an `end` record is present and its count equals the number of records
    /// before it, i.e. no record was lost.
    pub fn complete(&self) -> bool {
        self.records
            .iter()
            .position(|r| matches!(r, Record::End { .. }))
            .is_some_and(|i| matches!(self.records[i], Record::End { count } if count == i as u64))
    }
}

/// Extracts every framed record from `input`, skipping anything between records.
///
/// A record must hold exactly `<len>` bytes of UTF-8 without line breaks, followed by
/// `\n` (a `\r\n` from a tty is accepted too) or the end of input. Anything else after a
/// marker is reported in [`Parsed::corrupt`] and scanning resumes after that marker.
pub fn parse(input: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let mut pos = 0;
    while let Some(found) = find(&input[pos..], MARKER) {
        let start = pos + found;
        match read_record(&input[start + MARKER.len()..]) {
            Ok((payload, used)) => {
                out.records.push(Record::from_payload(payload));
                pos = start + MARKER.len() + used;
            }
            Err(why) => {
                out.corrupt.push(format!(
                    "{why} at byte {start}: {}",
                    excerpt(&input[start..])
                ));
                pos = start + MARKER.len();
            }
        }
    }
    out
}

/// Reads `<len> <payload>\n` from just after a marker; returns the payload and the
/// number of bytes consumed.
fn read_record(rest: &[u8]) -> Result<(&str, usize), &'static str> {
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b' ') {
        return Err("bad length");
    }
    let len: usize = std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("bad length")?;
    let body = &rest[digits + 1..];
    if len > body.len() {
        return Err("truncated record");
    }
    let (payload, after) = body.split_at(len);
    let term = match after {
        [] => 0,
        [b'\r', b'\n', ..] => 2,
        [b'\n', ..] | [b'\r'] => 1,
        _ => return Err("length mismatch"),
    };
    if payload.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err("length mismatch");
    }
    let payload = std::str::from_utf8(payload).map_err(|_| "invalid UTF-8")?;
    Ok((payload, digits + 1 + len + term))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(48)]);
    text.escape_debug().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_variants() -> Vec<Record> {
        vec![
            Record::Boot {
                uptime_s: 1.234_567,
                release: "6.12.48+deb13-amd64".into(),
            },
            Record::Boot {
                uptime_s: 0.1 + 0.2,
                release: "6.1.0".into(),
            },
            Record::Module {
                name: "vkms".into(),
                ok: true,
                detail: String::new(),
            },
            Record::Module {
                name: "test_hmm".into(),
                ok: false,
                detail: "insmod: can't insert: No such device".into(),
            },
            Record::Node {
                path: "/dev/dri/card0".into(),
                driver: Some("vkms".into()),
            },
            Record::Node {
                path: "/dev/hmm_dmirror0".into(),
                driver: None,
            },
            Record::Test {
                suite: "drm".into(),
                name: "gem_create".into(),
                outcome: Outcome::Pass,
                duration_ms: 12,
                reason: String::new(),
            },
            Record::Test {
                suite: "hmm".into(),
                name: "migrate".into(),
                outcome: Outcome::Skip,
                duration_ms: 0,
                reason: "no device memory here".into(),
            },
            Record::Test {
                suite: "hmm".into(),
                name: "fault".into(),
                outcome: Outcome::Fail,
                duration_ms: u64::MAX,
                reason: "assertion `x == y` failed".into(),
            },
            Record::Start {
                suite: "gem".into(),
                name: "dumb::create_and_map".into(),
            },
            Record::Start {
                suite: "hmm-tests".into(),
                name: "(run)".into(),
            },
            Record::Exit { code: -11 },
            Record::Note("hello  world ".into()),
            Record::Note(String::new()),
            Record::Unknown("future thing 1 2".into()),
            Record::Unknown("exit".into()),
        ]
    }

    fn stream(records: &[Record]) -> String {
        let mut s: String = records.iter().map(|r| encode(&r.to_payload())).collect();
        s += &encode(
            &Record::End {
                count: records.len() as u64,
            }
            .to_payload(),
        );
        s
    }

    #[test]
    fn round_trip_every_variant() {
        let records = all_variants();
        let parsed = parse(stream(&records).as_bytes());
        assert!(parsed.corrupt.is_empty(), "{:?}", parsed.corrupt);
        assert_eq!(parsed.records[..records.len()], records[..]);
        assert!(parsed.complete());
    }

    #[test]
    fn encode_flattens_line_breaks() {
        assert_eq!(encode("note a\nb\r\nc"), "\n@@VMR1 11 note a b  c\n");
        assert_eq!(
            parse(encode("note é").as_bytes()).records,
            [Record::Note("é".into())]
        );
    }

    #[test]
    fn malformed_payloads_are_unknown() {
        for p in [
            "boot x 6.1",
            "boot 1.0",
            "module m maybe",
            "module  ok",
            "node /dev/x",
            "test a b pass",
            "test a b meh 3",
            "test a  b pass 3",
            "exit 1 2",
            "end -1",
            "start gem",
            "start gem ",
            "start  x",
        ] {
            assert_eq!(
                parse(encode(p).as_bytes()).records,
                [Record::Unknown(p.into())],
                "{p}"
            );
        }
    }

    #[test]
    fn kernel_noise_between_records() {
        let mut s = String::from("[    0.000000] Linux version 6.12\r\n");
        s += &encode("exit 0");
        s += "[    1.500000] random: crng init done\n\n";
        s += &encode("note still here");
        s += "[    2.0] reboot: Power down\r\n";
        let parsed = parse(s.as_bytes());
        assert_eq!(
            parsed.records,
            [Record::Exit { code: 0 }, Record::Note("still here".into())]
        );
        assert!(parsed.corrupt.is_empty());
    }

    #[test]
    fn kernel_line_inside_a_record_is_corrupt() {
        let rec = encode("note this record gets split by the kernel");
        let (a, b) = rec.split_at(20);
        let s = format!(
            "{}{a}[   3.14] usb 1-1: new device\n{b}{}",
            encode("exit 0"),
            encode("end 2")
        );
        let parsed = parse(s.as_bytes());
        assert_eq!(
            parsed.records,
            [Record::Exit { code: 0 }, Record::End { count: 2 }]
        );
        assert_eq!(parsed.corrupt.len(), 1);
        assert!(
            parsed.corrupt[0].starts_with("length mismatch"),
            "{:?}",
            parsed.corrupt
        );
        assert!(!parsed.complete());
    }

    #[test]
    fn marker_after_unterminated_kernel_line() {
        let s = format!("[  1.23] foo{}", encode("exit 3").trim_start());
        assert_eq!(parse(s.as_bytes()).records, [Record::Exit { code: 3 }]);
    }

    #[test]
    fn tty_line_endings() {
        let s = stream(&[Record::Exit { code: 1 }]).replace('\n', "\r\n");
        let parsed = parse(s.trim_end_matches('\n').as_bytes());
        assert!(parsed.corrupt.is_empty(), "{:?}", parsed.corrupt);
        assert!(parsed.complete());
    }

    #[test]
    fn truncated_final_record() {
        let full = format!("{}{}", encode("exit 0"), encode("note last one"));
        let no_newline = parse(full.trim_end().as_bytes());
        assert_eq!(no_newline.records.len(), 2);
        assert!(no_newline.corrupt.is_empty());
        let cut = parse(&full.as_bytes()[..full.len() - 4]);
        assert_eq!(cut.records, [Record::Exit { code: 0 }]);
        assert_eq!(cut.corrupt.len(), 1);
        assert!(cut.corrupt[0].starts_with("truncated"));
        for n in 0..full.len() {
            let p = parse(&full.as_bytes()[..n]);
            assert!(p.records.len() + p.corrupt.len() <= 2);
        }
    }

    #[test]
    fn garbage_never_panics() {
        let cases: [&[u8]; 10] = [
            b"",
            b"@@VMR1 ",
            b"@@VMR1",
            b"@@VMR1 @@VMR1 @@VMR1 5",
            b"@@VMR1 x note\n",
            b"@@VMR1 99999999999999999999999999 note\n",
            b"@@VMR1 18446744073709551615 note\n",
            b"@@VMR1 4 \xff\xfe\xfd\xfc\n",
            b"\xff\xfe@@VMR1 6 exit 0\n\xc3",
            b"@@VMR1 3 abcd@@VMR1 6 exit 1\n",
        ];
        let mut all = Vec::new();
        for c in cases {
            all.push(parse(c));
        }
        assert!(all[0].records.is_empty() && all[0].corrupt.is_empty());
        assert_eq!(all[1].corrupt.len(), 1);
        assert!(all[2].records.is_empty() && all[2].corrupt.is_empty());
        assert_eq!(all[3].corrupt.len(), 3);
        assert!(all[5].corrupt[0].starts_with("bad length"));
        assert!(all[6].corrupt[0].starts_with("truncated"));
        assert!(all[7].corrupt[0].starts_with("invalid UTF-8"));
        assert_eq!(all[8].records, [Record::Exit { code: 0 }]);
        assert_eq!(all[9].records, [Record::Exit { code: 1 }]);
        assert_eq!(all[9].corrupt.len(), 1);
        // Every byte string built from a small alphabet must parse without panicking.
        let alphabet = b"@VMR1 9\n\xff";
        for seed in 0u32..20_000 {
            let bytes: Vec<u8> = (0..12)
                .map(|i| alphabet[((seed >> (i % 16)) as usize + i) % alphabet.len()])
                .collect();
            let _ = parse(&bytes);
        }
    }

    #[test]
    fn complete_cases() {
        let recs = [Record::Exit { code: 0 }, Record::Note("x".into())];
        assert!(parse(stream(&recs).as_bytes()).complete());
        assert!(parse(stream(&[]).as_bytes()).complete());
        let lost = stream(&recs).replacen(&encode("exit 0"), "", 1);
        assert!(!parse(lost.as_bytes()).complete());
        let no_end: String = recs.iter().map(|r| encode(&r.to_payload())).collect();
        assert!(!parse(no_end.as_bytes()).complete());
        let extra = format!("{}{}", encode("note early"), stream(&recs));
        assert!(!parse(extra.as_bytes()).complete());
    }
}
