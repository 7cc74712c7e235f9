//! `drmtool trace`'s parsers of kernel bytes: a tracefs `format` text (the input up to its
//! first NUL) with every field decoded from the rest as a tracepoint record, and the whole
//! input as perf ring-buffer records. Never panics; a string field never reads past the
//! record (its text is at most the record's length); the ring parser keeps only records
//! that fit the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (text, raw) = data.split_at(cut);
    let text = String::from_utf8_lossy(text);
    if let Ok(f) = drmtool::trace::format::parse("fuzz", &text) {
        for field in &f.fields {
            if let Some(drmtool::trace::format::Value::Str(s)) = f.decode(raw, field) {
                // Lossy decoding may widen a byte to 3; never more than the record holds.
                assert!(s.len() <= 3 * raw.len());
            }
        }
    }
    let mut out = Vec::new();
    let _ = drmtool::trace::perf::parse(data, &mut out);
    let samples: usize = out
        .iter()
        .map(|r| match r {
            drmtool::trace::perf::Record::Sample(s) => s.raw.len() + 36,
            _ => 8,
        })
        .sum();
    assert!(samples <= data.len());
});
