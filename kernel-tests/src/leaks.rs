//! Leak checks around one call, asked of the kernel: a [`Census`] before the call and one
//! after must agree ([`unchanged`]), or differ by exactly what the call made on purpose
//! ([`changes`] with a [`Delta`]). For calls outside any DRM file (udmabuf, test_hmm,
//! sync_file, DAX) the process part of the census is compared ([`unchanged_process`],
//! [`changes_process`]).
//!
//! Both kinds also compare the number of dma-bufs the whole system has, from debugfs
//! (`/sys/kernel/debug/dma_buf/bufinfo`, its `Total N objects` line), where it is readable:
//! a dma-buf whose fd was closed but which the kernel still holds shows there and nowhere
//! else. In a guest this process is the only user of dma-bufs, and while a check runs it
//! holds the fd lock exclusively ([`fds_exclusive`](crate::fds_exclusive)), so no other
//! test of the process makes or drops one.
//!
//! ```
//! # fn case() {
//! let Ok(dev) = drm_gem::Device::open_driver("vgem", None) else { return };
//! let r = kernel_tests::unchanged(&dev, "GEM_CLOSE of handle 7", || {
//!     dev.close_handle(drm_gem::GemHandle::new(7).unwrap())
//! });
//! assert!(r.is_err());
//! # }
//! # if std::env::var_os("KERNEL_TESTS_STRICT").is_none() { case(); }
//! ```

use crate::census::Census;
use drm_gem::Device;

/// What a call is expected to change, count by count (as [`Census`]'s fields, plus the
/// system's dma-bufs); [`Delta::NONE`] for a call that must leave everything as it was.
/// Deltas add up: `Delta::fds(1) + Delta::dma_bufs(1)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delta {
    /// Change of [`Census::fds`].
    pub fds: isize,
    /// Change of [`Census::maps`].
    pub maps: isize,
    /// Change of [`Census::gem_handles`].
    pub gem_handles: isize,
    /// Change of [`Census::syncobjs`].
    pub syncobjs: isize,
    /// Change of [`Census::framebuffers`].
    pub framebuffers: isize,
    /// Change of [`Census::blobs`].
    pub blobs: isize,
    /// Change of the system's dma-buf count (debugfs).
    pub dma_bufs: isize,
}

impl Delta {
    /// Nothing changes.
    pub const NONE: Delta = Delta {
        fds: 0,
        maps: 0,
        gem_handles: 0,
        syncobjs: 0,
        framebuffers: 0,
        blobs: 0,
        dma_bufs: 0,
    };

    /// `n` more fds (fewer when negative).
    pub const fn fds(n: isize) -> Delta {
        Delta {
            fds: n,
            ..Self::NONE
        }
    }

    /// `n` more GEM handles of the file.
    pub const fn gem_handles(n: isize) -> Delta {
        Delta {
            gem_handles: n,
            ..Self::NONE
        }
    }

    /// `n` more sync objects of the file.
    pub const fn syncobjs(n: isize) -> Delta {
        Delta {
            syncobjs: n,
            ..Self::NONE
        }
    }

    /// `n` more framebuffers of the file.
    pub const fn framebuffers(n: isize) -> Delta {
        Delta {
            framebuffers: n,
            ..Self::NONE
        }
    }

    /// `n` more dma-bufs in the system.
    pub const fn dma_bufs(n: isize) -> Delta {
        Delta {
            dma_bufs: n,
            ..Self::NONE
        }
    }

    /// `census` with this change applied (counts the census does not have stay `None`).
    fn applied(self, c: &Census) -> Census {
        let add = |n: usize, d: isize| n.saturating_add_signed(d);
        let opt = |n: Option<usize>, d: isize| n.map(|n| add(n, d));
        Census {
            fds: add(c.fds, self.fds),
            maps: add(c.maps, self.maps),
            gem_handles: opt(c.gem_handles, self.gem_handles),
            syncobjs: opt(c.syncobjs, self.syncobjs),
            framebuffers: opt(c.framebuffers, self.framebuffers),
            blobs: opt(c.blobs, self.blobs),
        }
    }
}

impl core::ops::Add for Delta {
    type Output = Delta;

    fn add(self, o: Delta) -> Delta {
        Delta {
            fds: self.fds + o.fds,
            maps: self.maps + o.maps,
            gem_handles: self.gem_handles + o.gem_handles,
            syncobjs: self.syncobjs + o.syncobjs,
            framebuffers: self.framebuffers + o.framebuffers,
            blobs: self.blobs + o.blobs,
            dma_bufs: self.dma_bufs + o.dma_bufs,
        }
    }
}

impl core::fmt::Display for Delta {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let counts = [
            ("fds", self.fds),
            ("maps", self.maps),
            ("gem_handles", self.gem_handles),
            ("syncobjs", self.syncobjs),
            ("framebuffers", self.framebuffers),
            ("blobs", self.blobs),
            ("dma_bufs", self.dma_bufs),
        ];
        let mut any = false;
        for (name, n) in counts.into_iter().filter(|&(_, n)| n != 0) {
            if any {
                f.write_str(", ")?;
            }
            write!(f, "{name} {n:+}")?;
            any = true;
        }
        if !any {
            f.write_str("no change")?;
        }
        Ok(())
    }
}

/// One side of a check: the census, and the system's dma-bufs where debugfs says.
struct Counts {
    census: Census,
    dma_bufs: Option<usize>,
}

impl Counts {
    fn take(dev: Option<&Device>) -> Counts {
        let census = match dev {
            Some(d) => Census::take(d),
            None => Census::process(),
        };
        let dma_bufs = dma_buf_count();
        // The guest mounts debugfs: a count missing there is a check that did not run.
        assert!(
            dma_bufs.is_some() || !(crate::strict() && crate::in_guest()),
            "leak check: /sys/kernel/debug/dma_buf/bufinfo unreadable in a strict guest"
        );
        Counts { census, dma_bufs }
    }
}

/// The number of dma-bufs in the system: the `Total N objects` line of debugfs's
/// `dma_buf/bufinfo` (hostile text: anything else, or no debugfs, is `None`).
pub fn dma_buf_count() -> Option<usize> {
    let text = std::fs::read("/sys/kernel/debug/dma_buf/bufinfo").ok()?;
    parse_bufinfo_total(&String::from_utf8_lossy(&text))
}

/// The `N` of the last `Total N objects, ...` line of a `bufinfo` text.
fn parse_bufinfo_total(text: &str) -> Option<usize> {
    text.lines().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("Total ")?;
        let (n, tail) = rest.split_once(' ')?;
        tail.starts_with("objects").then(|| n.parse().ok())?
    })
}

#[track_caller]
fn check(what: &str, before: &Counts, after: &Counts, want: Delta) {
    let expected = want.applied(&before.census);
    let off = expected.diff(&after.census);
    assert!(
        off.is_empty(),
        "{what}: leaked (kernel census): expected {want}, got {}",
        before.census.diff(&after.census)
    );
    if let (Some(b), Some(a)) = (before.dma_bufs, after.dma_bufs) {
        assert_eq!(
            a as isize - b as isize,
            want.dma_bufs,
            "{what}: leaked (kernel census): the system's dma-bufs went {b} -> {a}, expected {want}"
        );
    }
}

/// Runs `call` between two censuses of `dev` (its file and this process, as the kernel
/// says) and the system's dma-bufs, which must agree: a refused request leaves nothing
/// behind. Returns what `call` returned; the panic names `what` and the change.
#[track_caller]
pub fn unchanged<T>(dev: &Device, what: &str, call: impl FnOnce() -> T) -> T {
    changes(dev, what, |_| Delta::NONE, call)
}

/// [`unchanged`] for a call that makes something on purpose: the censuses must differ by
/// exactly `want(&result)` (taken while the result is still alive).
#[track_caller]
pub fn changes<T>(
    dev: &Device,
    what: &str,
    want: impl FnOnce(&T) -> Delta,
    call: impl FnOnce() -> T,
) -> T {
    let before = Counts::take(Some(dev));
    let r = call();
    let after = Counts::take(Some(dev));
    check(what, &before, &after, want(&r));
    r
}

/// [`unchanged`] for a call outside any DRM file: this process's fds and GPU mappings
/// ([`Census::process`]) and the system's dma-bufs must agree before and after.
#[track_caller]
pub fn unchanged_process<T>(what: &str, call: impl FnOnce() -> T) -> T {
    changes_process(what, |_| Delta::NONE, call)
}

/// [`changes`] for a call outside any DRM file (see [`unchanged_process`]).
#[track_caller]
pub fn changes_process<T>(
    what: &str,
    want: impl FnOnce(&T) -> Delta,
    call: impl FnOnce() -> T,
) -> T {
    let before = Counts::take(None);
    let r = call();
    let after = Counts::take(None);
    check(what, &before, &after, want(&r));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bufinfo_total_is_the_last_total_line() {
        let text = "\nDma-buf Objects:\nsize\tflags\tmode\tcount\tino\texp_name\tname\n\
                    00004096\t00000002\t00080007\t00000003\tvgem\t00012345\t<none>\n\
                    \tAttached Devices:\nTotal 0 devices attached\n\n\
                    \nTotal 1 objects, 4096 bytes\n";
        assert_eq!(parse_bufinfo_total(text), Some(1));
        // A buffer's name is user text: a fake total in it is not the last line.
        let named = "00004096\t0\t0\t1\tdrm\t7\tTotal 99 objects\n\nTotal 2 objects, 8192 bytes\n";
        assert_eq!(parse_bufinfo_total(named), Some(2));
        assert_eq!(parse_bufinfo_total(""), None);
        assert_eq!(parse_bufinfo_total("Total x objects"), None);
        assert_eq!(parse_bufinfo_total("Total 3 devices attached"), None);
    }

    #[test]
    fn deltas_apply_to_the_counts_a_census_has() {
        let c = Census {
            fds: 5,
            maps: 1,
            gem_handles: Some(2),
            syncobjs: None,
            framebuffers: Some(0),
            blobs: Some(3),
        };
        let want = (Delta::fds(1) + Delta::gem_handles(-1) + Delta::syncobjs(4)).applied(&c);
        assert_eq!(want.fds, 6);
        assert_eq!(want.gem_handles, Some(1));
        assert_eq!(
            want.syncobjs, None,
            "a count the census lacks stays missing"
        );
        assert_eq!(Delta::NONE.applied(&c), c);
        assert_eq!(
            (Delta::fds(1) + Delta::dma_bufs(1)).to_string(),
            "fds +1, dma_bufs +1"
        );
        assert_eq!(Delta::NONE.to_string(), "no change");
    }
}
