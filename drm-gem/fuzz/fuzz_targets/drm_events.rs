//! The DRM event splitter never panics and accounts for every byte it accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(events) = drm_gem::kms::parse_events(data) {
        // Every record is at least its 8-byte header.
        assert!(events.len() * 8 <= data.len());
    }
});
