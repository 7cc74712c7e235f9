//! `bochs` (`bochs-drm` before Linux 5.x's rename): no driver ioctls; buffers are dumb
//! buffers ([`DumbBuffer`](crate::DumbBuffer)) managed by the VRAM helper over TTM. This
//! module reads where they are placed: debugfs `dri/<minor>/vram-mm`, the VRAM range
//! manager's allocation list, parsed by a pure function ([`VramMm::parse`]).
//!
//! The numbers in `vram-mm` are pages (`PAGE_SIZE`), except `usage` (bytes, since 5.18).
//! A new dumb buffer starts in system memory; it gets a VRAM range when it is pinned for
//! scan-out (shown by a CRTC) and keeps it until evicted or destroyed.
//!
//! ```no_run
//! use drm_gem::Device;
//! use drm_gem::driver::bochs;
//!
//! let dev = Device::open("/dev/dri/card0")?;
//! let mm = bochs::vram_mm(&dev)?;
//! println!("VRAM: {} of {} pages used", mm.used_pages, mm.total_pages);
//! for r in mm.used_ranges() {
//!     println!("  pages {:#x}..{:#x}", r.start, r.end);
//! }
//! # Ok::<(), drm_gem::Error>(())
//! ```

use crate::device::Device;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// The DRM driver names of bochs: `bochs-drm` (5.10, 6.1) and `bochs` (later).
pub const DRIVER_NAMES: [&str; 2] = ["bochs-drm", "bochs"];

/// One node of the VRAM range manager: pages `start..end`, allocated or free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VramRange {
    /// First page.
    pub start: u64,
    /// One past the last page.
    pub end: u64,
    /// `end - start`, as the kernel printed it.
    pub pages: u64,
    /// Allocated (`used`) rather than `free`.
    pub used: bool,
}

/// The VRAM manager's state from debugfs `vram-mm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VramMm {
    /// `use_type`: whether the manager is in use.
    pub use_type: Option<bool>,
    /// `use_tt`: whether the placement needs a TT (false for VRAM).
    pub use_tt: Option<bool>,
    /// `size`: the manager's size in pages.
    pub size_pages: Option<u64>,
    /// `usage`: bytes in use (since Linux 5.18, "drm/ttm: add common accounting to the
    /// resource mgr v3"; absent on 5.10 and 5.15).
    pub usage_bytes: Option<u64>,
    /// Every node in address order.
    pub ranges: Vec<VramRange>,
    /// `total` from the summary line, pages.
    pub total_pages: u64,
    /// `used` from the summary line, pages.
    pub used_pages: u64,
    /// `free` from the summary line, pages.
    pub free_pages: u64,
}

impl VramMm {
    /// Parses the text of `vram-mm` (the format printed by `ttm_resource_manager_debug` and
    /// `drm_mm_print` on 5.10, 6.1 and 6.12).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the line that does not fit the format, or when the
    /// summary line is missing or disagrees with the ranges.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |n: usize, line: &str, why: &str| Error::InvalidArgument {
            what: format!("vram-mm line {}: {why}: {line:?}", n + 1),
        };
        let num = |s: &str| -> Option<u64> {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        };
        let mut mm = VramMm {
            use_type: None,
            use_tt: None,
            size_pages: None,
            usage_bytes: None,
            ranges: Vec::new(),
            total_pages: 0,
            used_pages: 0,
            free_pages: 0,
        };
        let mut summary = false;
        for (n, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            if let Some(rest) = t.strip_prefix("total:") {
                // "total: 4096, used 1000 free 3096"
                let mut it = rest.split(|c: char| c == ',' || c.is_whitespace());
                let mut words = it.by_ref().filter(|w| !w.is_empty());
                let total = words.next().and_then(num);
                let (u, used) = (words.next(), words.next().and_then(num));
                let (f, free) = (words.next(), words.next().and_then(num));
                match (total, u, used, f, free) {
                    (Some(t), Some("used"), Some(u), Some("free"), Some(f)) => {
                        mm.total_pages = t;
                        mm.used_pages = u;
                        mm.free_pages = f;
                        summary = true;
                    }
                    _ => return Err(bad(n, line, "unreadable summary")),
                }
                continue;
            }
            if t.starts_with("0x") {
                // "0x0000000000000000-0x00000000000003e8: 1000: used"
                let mut parts = t.split(':');
                let (Some(span), Some(pages), Some(state), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad(n, line, "expected START-END: PAGES: used|free"));
                };
                let (Some(start), Some(end)) = span
                    .split_once('-')
                    .map_or((None, None), |(a, b)| (num(a), num(b)))
                else {
                    return Err(bad(n, line, "unreadable range"));
                };
                let Some(pages) = num(pages) else {
                    return Err(bad(n, line, "unreadable page count"));
                };
                let used = match state.trim() {
                    "used" => true,
                    "free" => false,
                    _ => return Err(bad(n, line, "state is neither used nor free")),
                };
                if end < start || end - start != pages {
                    return Err(bad(n, line, "range and page count disagree"));
                }
                mm.ranges.push(VramRange {
                    start,
                    end,
                    pages,
                    used,
                });
                continue;
            }
            // "use_type: 1", "use_tt: 0", "size: 4096", "usage: 0" (and keys newer kernels add).
            let Some((key, value)) = t.split_once(':') else {
                return Err(bad(n, line, "unknown line"));
            };
            let Some(v) = num(value) else {
                return Err(bad(n, line, "value is not a number"));
            };
            match key.trim() {
                "use_type" => mm.use_type = Some(v != 0),
                "use_tt" => mm.use_tt = Some(v != 0),
                "size" => mm.size_pages = Some(v),
                "usage" => mm.usage_bytes = Some(v),
                _ => {}
            }
        }
        if !summary {
            return Err(Error::InvalidArgument {
                what: "vram-mm has no `total:` summary line".into(),
            });
        }
        let used: u64 = mm.ranges.iter().filter(|r| r.used).map(|r| r.pages).sum();
        let free: u64 = mm.ranges.iter().filter(|r| !r.used).map(|r| r.pages).sum();
        if used != mm.used_pages || free != mm.free_pages {
            return Err(Error::InvalidArgument {
                what: format!(
                    "vram-mm ranges add up to {used} used / {free} free pages, the summary says {} / {}",
                    mm.used_pages, mm.free_pages
                ),
            });
        }
        Ok(mm)
    }

    /// The allocated ranges.
    pub fn used_ranges(&self) -> impl Iterator<Item = &VramRange> {
        self.ranges.iter().filter(|r| r.used)
    }

    /// Used VRAM in bytes (`used_pages * PAGE_SIZE`).
    pub fn used_bytes(&self) -> u64 {
        self.used_pages * rustix::param::page_size() as u64
    }

    /// Total VRAM managed, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_pages * rustix::param::page_size() as u64
    }
}

/// Where debugfs shows `dev`'s VRAM manager: `/sys/kernel/debug/dri/<minor>/vram-mm`.
pub fn vram_mm_path(dev: &Device) -> Result<PathBuf> {
    let st = rustix::fs::fstat(dev).map_err(|e| Error::syscall("fstat", e))?;
    Ok(PathBuf::from(format!(
        "/sys/kernel/debug/dri/{}/vram-mm",
        rustix::fs::minor(st.st_rdev)
    )))
}

/// Reads and parses `dev`'s debugfs `vram-mm`.
///
/// # Errors
/// [`Error::Unsupported`] when debugfs is not mounted (or the kernel lacks it), or the
/// driver has no VRAM manager file; [`Error::Open`] for other read failures.
pub fn vram_mm(dev: &Device) -> Result<VramMm> {
    let path = vram_mm_path(dev)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => VramMm::parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dri = PathBuf::from("/sys/kernel/debug/dri");
            let reason = if dri.is_dir() {
                format!(
                    "{} does not exist: the driver has no VRAM manager",
                    path.display()
                )
            } else {
                format!(
                    "{} does not exist: debugfs is not mounted (or CONFIG_DEBUG_FS is off)",
                    dri.display()
                )
            };
            Err(Error::Unsupported {
                feature: "debugfs vram-mm",
                reason,
                errno: Some(rustix::io::Errno::NOENT),
            })
        }
        Err(e) => Err(Error::Open {
            path,
            errno: rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian 5.10.262, `-vga std`, at boot (fbcon holds 1000 pages).
    const DEBIAN_5_10: &str = "  use_type: 1
  use_tt: 0
  size: 4096
0x0000000000000000-0x00000000000003e8: 1000: used
0x00000000000003e8-0x0000000000001000: 3096: free
total: 4096, used 1000 free 3096
";

    /// Debian 6.1.192 (self-built), at boot: nothing placed in VRAM yet.
    const DEBIAN_6_1: &str = "  use_type: 1
  use_tt: 0
  size: 4096
  usage: 0
0x0000000000000000-0x0000000000001000: 4096: free
total: 4096, used 0 free 4096
";

    /// Debian's stock 6.1.0-57 kernel (and stock 6.12): fbcon in VRAM, `usage` in bytes.
    const STOCK_6_1: &str = "  use_type: 1
  use_tt: 0
  size: 4096
  usage: 4096000
0x0000000000000000-0x00000000000003e8: 1000: used
0x00000000000003e8-0x0000000000001000: 3096: free
total: 4096, used 1000 free 3096
";

    /// Debian 5.10.262 while a 640x480 XRGB8888 dumb buffer is scanned out beside fbcon's.
    const DEBIAN_5_10_SCANOUT: &str = "  use_type: 1
  use_tt: 0
  size: 4096
0x0000000000000000-0x00000000000003e8: 1000: used
0x00000000000003e8-0x0000000000000514: 300: used
0x0000000000000514-0x0000000000001000: 2796: free
total: 4096, used 1300 free 2796
";

    /// Debian's stock 6.12 kernel, the same scan-out.
    const STOCK_6_12_SCANOUT: &str = "  use_type: 1
  use_tt: 0
  size: 4096
  usage: 5324800
0x0000000000000000-0x00000000000003e8: 1000: used
0x00000000000003e8-0x0000000000000514: 300: used
0x0000000000000514-0x0000000000001000: 2796: free
total: 4096, used 1300 free 2796
";

    #[test]
    fn parses_scanned_out_buffers() {
        for text in [DEBIAN_5_10_SCANOUT, STOCK_6_12_SCANOUT] {
            let mm = VramMm::parse(text).unwrap();
            let used: Vec<_> = mm.used_ranges().map(|r| (r.start, r.end)).collect();
            assert_eq!(used, [(0, 1000), (1000, 1300)]);
            assert_eq!(mm.ranges.len(), 3);
            assert_eq!((mm.used_pages, mm.free_pages), (1300, 2796));
            assert_eq!(mm.used_pages * 4096, 640 * 480 * 4 + 1280 * 800 * 4);
        }
        assert_eq!(
            VramMm::parse(STOCK_6_12_SCANOUT).unwrap().usage_bytes,
            Some(5_324_800)
        );
    }

    #[test]
    fn parses_5_10() {
        let mm = VramMm::parse(DEBIAN_5_10).unwrap();
        assert_eq!(mm.use_type, Some(true));
        assert_eq!(mm.use_tt, Some(false));
        assert_eq!(mm.size_pages, Some(4096));
        assert_eq!(mm.usage_bytes, None);
        assert_eq!(
            (mm.total_pages, mm.used_pages, mm.free_pages),
            (4096, 1000, 3096)
        );
        assert_eq!(
            mm.ranges[0],
            VramRange {
                start: 0,
                end: 1000,
                pages: 1000,
                used: true
            }
        );
        assert_eq!(mm.used_ranges().count(), 1);
    }

    #[test]
    fn parses_6_1_empty_and_stock() {
        let mm = VramMm::parse(DEBIAN_6_1).unwrap();
        assert_eq!(mm.usage_bytes, Some(0));
        assert_eq!(mm.used_pages, 0);
        assert_eq!(mm.used_ranges().count(), 0);
        assert_eq!(mm.ranges.len(), 1);
        let s = VramMm::parse(STOCK_6_1).unwrap();
        assert_eq!(s.usage_bytes, Some(4_096_000));
        assert_eq!(s.used_pages * 4096, 4_096_000);
    }

    #[test]
    fn rejects_what_does_not_fit() {
        for bad in [
            "",
            "0x0-0x10: 16: used\n",
            "0x0-0x10: 15: used\ntotal: 16, used 15 free 0\n",
            "0x0-0x10: 16: maybe\ntotal: 16, used 16 free 0\n",
            "0x0-0x10: 16: used\ntotal: 16, used 15 free 1\n",
            "garbage\ntotal: 0, used 0 free 0\n",
            "total: sixteen\n",
        ] {
            assert!(
                matches!(VramMm::parse(bad), Err(Error::InvalidArgument { .. })),
                "{bad:?}"
            );
        }
    }
}
