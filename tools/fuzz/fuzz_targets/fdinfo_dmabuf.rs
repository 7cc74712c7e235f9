//! dma-buf fdinfo parser: never panics; malformed line numbers exist.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let f = drmtool::fdinfo::parse_dmabuf(&text);
    let lines = text.lines().count();
    assert!(f.malformed.iter().all(|m| m.line >= 1 && m.line <= lines));
});
