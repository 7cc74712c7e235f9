//! debugfs `gem_names` parser: never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let g = drmtool::debugfs::parse_gem_names(&text);
    let _ = g.names.iter().fold(0u64, |a, n| a.saturating_add(n.size));
});
