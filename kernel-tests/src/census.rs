//! A resource census that asks the **kernel**, not `drm-gem`'s own tables, what this
//! process and one of its DRM files hold: for leak checks ([`no_leak`](crate::no_leak)) and
//! for the random-operation test's model.
//!
//! # The API (stable: other tests wrap their cases with it)
//!
//! - [`Census::take`]`(&dev)`: everything below, for one open DRM file `dev`, on the test's
//!   own thread (it counts fds, so it takes the fd lock exclusively, see
//!   [`fixtures`](crate::fixtures)).
//! - [`Census::process`]`()`: the process-wide part only (fds, mappings).
//! - `Census` is `Debug + Clone + PartialEq + Eq`; its fields are public counts, so an
//!   expected census is a copy of a taken one with some counts changed.
//! - [`Census::diff`]`(&before, &after)` names what changed ([`Diff`] displays as
//!   `gem_handles 3 -> 5 (+2), fds 9 -> 10 (+1)`, empty when equal), and
//!   [`Census::assert_unchanged`] panics with that diff.
//!
//! # What is counted, and how
//!
//! | field | source | `None` when |
//! |---|---|---|
//! | `fds` | entries of `/proc/self/fd` (less the listing's own) | never |
//! | `maps` | lines of `/proc/self/maps` backed by a DRM node (`/dev/dri/...`), a dma-buf or udmabuf (`/dmabuf:...`, `anon_inode:dmabuf`) or a GEM object's shmem file (`drm mm object`, which vgem's dma-buf mmap installs) | never |
//! | `gem_handles` | `DRM_IOCTL_MODE_MAP_DUMB` on handles 1, 2, ...: ENOENT is "no such handle"; success or EINVAL (an imported object, which the dumb path refuses to map) is "present" | the file cannot ask (a render node answers EACCES; a driver without dumb buffers ENOSYS) |
//! | `syncobjs` | `DRM_IOCTL_SYNCOBJ_WAIT` of one handle with timeout 0: ENOENT is "no such handle"; success (signalled), ETIME (unsignalled fence) or EINVAL (no fence yet) is "present" | the driver has no `DRIVER_SYNCOBJ` (EOPNOTSUPP) |
//! | `framebuffers` | `DRM_IOCTL_MODE_GETRESOURCES`, which lists only the caller's framebuffers | the device has no KMS (vgem) or the node is a render node |
//! | `blobs` | `DRM_IOCTL_MODE_GETPROPBLOB` on mode object ids 1, 2, ... | as `framebuffers` |
//!
//! The only side effect of a probe is the fake mmap offset `MAP_DUMB` gives an object
//! that had none, which the kernel frees with the object.
//!
//! **The probe bound.** GEM handles and syncobj handles come from per-file idrs that hand
//! out the lowest free number from 1, so a handle number never exceeds the most handles of
//! that kind the file held at one time, and any gap between live handles is shorter than
//! that. A probe stops after [`PROBE_GAP`] consecutive misses: the census is exact for a
//! file that never held more than `PROBE_GAP` handles of a kind at once.
//!
//! **Blobs are device-wide.** Blob ids share the device's mode object idr (with CRTCs,
//! planes, properties and framebuffers) and any file may read any blob; nothing harmless
//! tells this file's blobs from another file's or the kernel's own (the only per-file
//! check, in `DESTROYPROPBLOB`, destroys what it finds). So `blobs` counts every blob of
//! the device, probed up to [`PROBE_GAP`] ids past the highest known mode object id. In a
//! guest this process is the only client; but a blob that a CRTC state references (a
//! `MODE_ID` after a modeset) outlives its creator's `DESTROYPROPBLOB`, so compare `blobs`
//! only around cases that commit no new KMS state.
//!
//! **Mappings** are those backed by GPU objects only: all lines of `/proc/self/maps` change
//! with the allocator (a large `Vec` is a mapping of its own, a thread's first allocation
//! a new arena) and with thread stacks.

use drm_gem::Device;
use drm_gem::kms::BlobId;
use rustix::fd::AsFd;
use rustix::io::Errno;

/// Consecutive misses after which a handle or id probe stops (see the module docs).
pub const PROBE_GAP: u32 = 1024;

/// What this process (and one DRM file of it) holds, as the kernel says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// Open fds of the process.
    pub fds: usize,
    /// Mappings backed by a DRM node, a dma-buf or a GEM shmem file.
    pub maps: usize,
    /// GEM handles of the DRM file (`None`: the file cannot probe them).
    pub gem_handles: Option<usize>,
    /// Sync objects of the DRM file (`None`: no `DRIVER_SYNCOBJ`).
    pub syncobjs: Option<usize>,
    /// Framebuffers of the DRM file (`None`: no KMS on this file).
    pub framebuffers: Option<usize>,
    /// Property blobs of the whole device (`None`: no KMS on this file).
    pub blobs: Option<usize>,
}

/// One count of a [`Census`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    /// [`Census::fds`].
    Fds,
    /// [`Census::maps`].
    Maps,
    /// [`Census::gem_handles`].
    GemHandles,
    /// [`Census::syncobjs`].
    Syncobjs,
    /// [`Census::framebuffers`].
    Framebuffers,
    /// [`Census::blobs`].
    Blobs,
}

impl Counted {
    /// The field's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fds => "fds",
            Self::Maps => "maps",
            Self::GemHandles => "gem_handles",
            Self::Syncobjs => "syncobjs",
            Self::Framebuffers => "framebuffers",
            Self::Blobs => "blobs",
        }
    }
}

/// One count that differs between two censuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// Which count.
    pub what: Counted,
    /// The first census's count.
    pub before: Option<usize>,
    /// The second census's count.
    pub after: Option<usize>,
}

impl core::fmt::Display for Change {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let show = |n: Option<usize>| n.map_or_else(|| "none".to_string(), |n| n.to_string());
        write!(
            f,
            "{} {} -> {}",
            self.what.name(),
            show(self.before),
            show(self.after)
        )?;
        if let (Some(b), Some(a)) = (self.before, self.after) {
            write!(f, " ({:+})", a as i64 - b as i64)?;
        }
        Ok(())
    }
}

/// What changed between two censuses ([`Census::diff`]); displays as a comma list,
/// `unchanged` when empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diff(pub Vec<Change>);

impl Diff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl core::fmt::Display for Diff {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("unchanged");
        }
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl Census {
    /// The process-wide counts ([`fds`](Census::fds), [`maps`](Census::maps)); the DRM
    /// file's are `None`. Takes the fd lock exclusively, like [`open_fds`](crate::open_fds).
    pub fn process() -> Census {
        let fds = crate::open_fds();
        Census {
            fds,
            maps: gpu_maps(),
            gem_handles: None,
            syncobjs: None,
            framebuffers: None,
            blobs: None,
        }
    }

    /// Everything, for the DRM file `dev` (see the module docs for each count).
    ///
    /// # Panics
    /// When a probe gets an answer that means neither "present" nor "absent" after its
    /// first one did (the kernel changed its mind mid-census), naming the ioctl and errno.
    pub fn take(dev: &Device) -> Census {
        let mut c = Census::process();
        c.gem_handles = gem_handles(dev);
        c.syncobjs = syncobjs(dev);
        if let Some((fbs, floor)) = kms(dev) {
            c.framebuffers = Some(fbs);
            c.blobs = Some(blobs(dev, floor));
        }
        c
    }

    /// The counts that differ from `self` in `later`, in field order.
    pub fn diff(&self, later: &Census) -> Diff {
        let pairs = [
            (Counted::Fds, Some(self.fds), Some(later.fds)),
            (Counted::Maps, Some(self.maps), Some(later.maps)),
            (Counted::GemHandles, self.gem_handles, later.gem_handles),
            (Counted::Syncobjs, self.syncobjs, later.syncobjs),
            (Counted::Framebuffers, self.framebuffers, later.framebuffers),
            (Counted::Blobs, self.blobs, later.blobs),
        ];
        Diff(
            pairs
                .into_iter()
                .filter(|(_, b, a)| b != a)
                .map(|(what, before, after)| Change {
                    what,
                    before,
                    after,
                })
                .collect(),
        )
    }

    /// Panics, naming `what` and the [`diff`](Census::diff), unless `later` equals `self`.
    #[track_caller]
    pub fn assert_unchanged(&self, later: &Census, what: &str) {
        let d = self.diff(later);
        assert!(d.is_empty(), "{what}: leaked (kernel census): {d}");
    }
}

/// Whether a `/proc/self/maps` line (hostile text) is backed by a GPU object.
pub(crate) fn is_gpu_map(line: &str) -> bool {
    // address perms offset dev inode [path]; the path may contain spaces.
    let mut rest = line.trim_start();
    for _ in 0..5 {
        match rest.find(char::is_whitespace) {
            Some(i) => rest = rest[i..].trim_start(),
            None => return false,
        }
    }
    let path = rest.trim_end();
    path.starts_with("/dev/dri/")
        || path.starts_with("/dmabuf:")
        || path == "anon_inode:dmabuf"
        || path.starts_with("/drm mm object")
        || path.starts_with("drm mm object")
}

fn gpu_maps() -> usize {
    let text = std::fs::read("/proc/self/maps").unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| is_gpu_map(l))
        .count()
}

/// What one handle probe said.
enum Probe {
    Present,
    Absent,
    /// The file cannot ask (the errno).
    Cannot(Errno),
}

/// Counts the ids from 1 that `probe` finds, stopping after [`PROBE_GAP`] misses past the
/// last hit and past `floor`; `None` when the first probe cannot ask.
fn count_ids(what: &str, floor: u32, mut probe: impl FnMut(u32) -> Probe) -> Option<usize> {
    let (mut n, mut last) = (0usize, floor);
    let mut id = 1u32;
    while id <= last.saturating_add(PROBE_GAP) {
        match probe(id) {
            Probe::Present => {
                n += 1;
                last = last.max(id);
            }
            Probe::Absent => {}
            Probe::Cannot(e) if id == 1 => {
                let _ = e;
                return None;
            }
            Probe::Cannot(e) => panic!("census: {what} of id {id} answered {e:?} mid-census"),
        }
        id += 1;
    }
    Some(n)
}

fn gem_handles(dev: &Device) -> Option<usize> {
    count_ids("DRM_IOCTL_MODE_MAP_DUMB", 0, |h| {
        let arg = ioctl_sys::drm::drm_mode_map_dumb {
            handle: h,
            ..Default::default()
        };
        match crate::raw::map_dumb(dev.as_fd(), arg) {
            Ok(_) | Err(Errno::INVAL) => Probe::Present,
            Err(Errno::NOENT) => Probe::Absent,
            Err(e) => Probe::Cannot(e),
        }
    })
}

fn syncobjs(dev: &Device) -> Option<usize> {
    count_ids(
        "DRM_IOCTL_SYNCOBJ_WAIT",
        0,
        |h| match drm_gem::raw::syncobj_wait(dev, &[h], 0, 0) {
            Ok(_) => Probe::Present,
            Err(e) => match e.errno() {
                Some(Errno::NOENT) => Probe::Absent,
                Some(Errno::TIME | Errno::INVAL) => Probe::Present,
                Some(e) => Probe::Cannot(e),
                None => panic!("census: DRM_IOCTL_SYNCOBJ_WAIT of handle {h}: {e}"),
            },
        },
    )
}

/// This file's framebuffer count and the highest mode object id `GETRESOURCES` and
/// `GETPLANERESOURCES` name; `None` without KMS.
fn kms(dev: &Device) -> Option<(usize, u32)> {
    let r = match dev.resources() {
        Ok(r) => r,
        Err(e)
            if e.is_not_supported() || matches!(e.errno(), Some(Errno::INVAL | Errno::ACCESS)) =>
        {
            return None;
        }
        Err(e) => panic!("census: {e}"),
    };
    let planes = dev.plane_ids().unwrap_or_default();
    let floor = r
        .framebuffers
        .iter()
        .map(|i| i.get())
        .chain(r.crtcs.iter().map(|i| i.get()))
        .chain(r.connectors.iter().map(|i| i.get()))
        .chain(r.encoders.iter().map(|i| i.get()))
        .chain(planes.iter().map(|i| i.get()))
        .max()
        .unwrap_or(0);
    Some((r.framebuffers.len(), floor))
}

fn blobs(dev: &Device, floor: u32) -> usize {
    count_ids("DRM_IOCTL_MODE_GETPROPBLOB", floor, |id| {
        let Some(b) = BlobId::new(id) else {
            return Probe::Absent;
        };
        match dev.blob(b) {
            Ok(_) => Probe::Present,
            Err(e) => match e.errno() {
                Some(Errno::NOENT) => Probe::Absent,
                Some(e) => Probe::Cannot(e),
                None => panic!("census: DRM_IOCTL_MODE_GETPROPBLOB of id {id}: {e}"),
            },
        }
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_maps_are_told_from_others() {
        let yes = [
            "7f0000000000-7f0000001000 rw-s 100000000 00:06 123 /dev/dri/card0",
            "7f0000000000-7f0000001000 rw-s 00000000 00:0f 4567 /dmabuf:",
            "7f0000000000-7f0000001000 rw-s 00000000 00:0f 4567 /dmabuf:my name",
            "7f0000000000-7f0000001000 rw-s 00000000 00:0f 4567    anon_inode:dmabuf",
            "7f0000000000-7f0000001000 rw-s 00000000 00:01 99 /drm mm object (deleted)",
        ];
        let no = [
            "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0 [heap]",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0",
            "7f0000000000-7f0000001000 r-xp 00000000 fe:01 12 /usr/lib/libc.so.6",
            "7f0000000000-7f0000001000 r-xp 00000000 fe:01 12 /home/x/dev/dri/card0",
            "garbage",
            "",
            "1 2 3 4",
        ];
        for l in yes {
            assert!(is_gpu_map(l), "{l}");
        }
        for l in no {
            assert!(!is_gpu_map(l), "{l}");
        }
    }

    #[test]
    fn diff_names_what_changed() {
        let a = Census {
            fds: 5,
            maps: 0,
            gem_handles: Some(3),
            syncobjs: None,
            framebuffers: Some(1),
            blobs: Some(2),
        };
        let mut b = a.clone();
        assert!(a.diff(&b).is_empty());
        assert_eq!(a.diff(&b).to_string(), "unchanged");
        b.gem_handles = Some(5);
        b.fds = 4;
        b.syncobjs = Some(0);
        assert_eq!(
            a.diff(&b).to_string(),
            "fds 5 -> 4 (-1), gem_handles 3 -> 5 (+2), syncobjs none -> 0"
        );
        assert_ne!(a, b);
    }
}
