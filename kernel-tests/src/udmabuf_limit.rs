//! udmabuf's size limit, pinned for a test. The driver's `size_limit_mb` module parameter
//! (0644) was 64 by default through 6.x and is INT_MAX in 7.3, where no buffer a guest can
//! map goes over it. A test that checks the refusal over the limit pins the limit to a
//! size it can exceed, and the guard puts the kernel's value back when dropped.

use std::path::Path;

/// The parameter's file.
pub const SIZE_LIMIT_MB: &str = "/sys/module/udmabuf/parameters/size_limit_mb";

/// The limit as the driver has it now, in MiB: the parameter where the kernel has it, else
/// the fixed 64 MiB of the kernels without parameters.
pub fn size_limit_mb() -> u64 {
    std::fs::read_to_string(SIZE_LIMIT_MB)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(64)
}

/// Holds `size_limit_mb` at a value for as long as it lives.
#[derive(Debug)]
pub struct PinnedLimit {
    old: Option<String>,
}

impl PinnedLimit {
    /// Sets the limit to `mb` MiB and reads it back. Without the parameter (kernels whose
    /// limit is fixed) nothing is written, and the limit must already be `mb`.
    ///
    /// # Panics
    /// When the write does not take or the fixed limit is another.
    pub fn set(mb: u64) -> PinnedLimit {
        let path = Path::new(SIZE_LIMIT_MB);
        let Ok(old) = std::fs::read_to_string(path) else {
            assert_eq!(size_limit_mb(), mb, "a fixed udmabuf size limit");
            return PinnedLimit { old: None };
        };
        std::fs::write(path, mb.to_string()).unwrap_or_else(|e| panic!("{SIZE_LIMIT_MB}: {e}"));
        assert_eq!(size_limit_mb(), mb, "{SIZE_LIMIT_MB} did not take {mb}");
        PinnedLimit { old: Some(old) }
    }
}

impl Drop for PinnedLimit {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            // Best effort: a test guard never panics in drop.
            let _ = std::fs::write(SIZE_LIMIT_MB, old.trim());
        }
    }
}
