//! The EDID decoder never panics, and what it decodes is consistent with the bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = drm_gem::kms::edid::parse(data) {
        assert!(data.len() >= 128);
        assert_eq!(e.manufacturer.chars().count(), 3);
        assert_eq!(e.extensions, data[126]);
    }
});
