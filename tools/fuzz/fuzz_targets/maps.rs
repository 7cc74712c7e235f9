//! maps parser: never panics; every mapping it keeps is a non-empty range; the byte parser
//! (what a scan uses) and the text parser see the same lines and mappings.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let m = drmtool::maps::parse(&text);
    assert!(m.gpu.iter().all(|g| g.end > g.start && g.len() > 0));
    assert_eq!(m.lines, text.lines().count());
    let b = drmtool::maps::parse_bytes(data);
    assert_eq!(b.lines, m.lines);
    assert_eq!(b.gpu, m.gpu);
    assert_eq!(b.malformed.len(), m.malformed.len());
});
