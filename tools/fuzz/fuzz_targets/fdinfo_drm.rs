//! DRM fdinfo parser: never panics; every malformed line number exists; sums never wrap.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let f = drmtool::fdinfo::parse_drm(&text);
    let lines = text.lines().count();
    assert!(f.malformed.iter().all(|m| m.line >= 1 && m.line <= lines));
    let _ = (f.total_bytes(), f.shared_bytes(), f.has_usage_keys());
});
