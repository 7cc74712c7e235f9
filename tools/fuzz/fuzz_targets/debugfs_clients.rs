//! debugfs `clients` parser: never panics; ids come from the header's column.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let c = drmtool::debugfs::parse_clients(&text);
    assert!(c.clients.iter().all(|r| r.id_column == "tgid" || r.id_column == "pid"));
});
