//! Opening DRM device nodes and enumerating the ones a machine has.

use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::path::{Path, PathBuf};

/// The two kinds of DRM node userspace opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// `/dev/dri/card*` (minors 0-63): KMS, master, dumb buffers.
    Primary,
    /// `/dev/dri/renderD*` (minors 128-191): rendering and buffer sharing, no KMS.
    Render,
}

impl NodeKind {
    /// Classifies a DRM char-device minor number (the kernel's `DRM_MINOR_*` ranges).
    pub fn from_minor(minor: u32) -> Option<Self> {
        match minor {
            0..=63 => Some(Self::Primary),
            128..=191 => Some(Self::Render),
            _ => None,
        }
    }

    /// `"primary"` or `"render"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Render => "render",
        }
    }
}

/// The driver behind a node, from `DRM_IOCTL_VERSION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverVersion {
    /// Driver name (`vkms`, `virtio_gpu`, `bochs-drm`, ...).
    pub name: String,
    /// `major.minor.patchlevel` of the driver interface.
    pub version: (i32, i32, i32),
    /// Driver date string (frozen by most drivers, empty on newer kernels).
    pub date: String,
    /// Human description.
    pub desc: String,
}

/// An open DRM device node (`/dev/dri/card*` or `/dev/dri/renderD*`).
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    kind: NodeKind,
    /// GEM handles owned through this device, with how many owners each has. The kernel
    /// gives the same handle for every import of one dma-buf on one open file, so two
    /// imports share one handle, which must be closed once, by the last owner.
    pub(crate) handles: std::sync::Mutex<crate::gem::HandleTable>,
    /// KMS property ids seen in atomic requests, and whether each is a user-pointer
    /// property (`OUT_FENCE_PTR`, `WRITEBACK_OUT_FENCE_PTR`). Property objects live as long
    /// as the device, so an id's answer never changes.
    pub(crate) pointer_props: std::sync::Mutex<std::collections::HashMap<u32, bool>>,
    /// Release calls of this device's objects that failed in `Drop`.
    pub(crate) releases: crate::release::ReleaseCounter,
    /// Held by the one thread that reads events at a time (`read_events`), so that a
    /// reader that lost the race finds the queue empty instead of blocking in `read`.
    pub(crate) event_reader: std::sync::Mutex<()>,
}

/// What an owner of a kernel object holds to reach its [`Device`]: `&Device`, `Arc<Device>`,
/// `Rc<Device>`, or any other cheap-to-clone pointer to one (blanket-implemented).
///
/// Owners ([`GemObject`](crate::GemObject), [`DumbBuffer`](crate::DumbBuffer),
/// [`Framebuffer`](crate::kms::Framebuffer), [`PropertyBlob`](crate::kms::PropertyBlob),
/// [`Syncobj`](crate::Syncobj), the driver wrappers) are generic over it. With `&Device`
/// (what the `Device` methods return) the borrow checker ties them to the device; with
/// `Arc<Device>` they can live in one struct together with the device, as a compositor
/// keeps its swapchain:
///
/// ```
/// use std::sync::Arc;
/// use drm_gem::{Device, DumbBuffer, kms::Framebuffer};
///
/// /// A device and its buffers in one value: no self-borrow.
/// struct Swapchain {
///     dev: Arc<Device>,
///     buffers: Vec<(DumbBuffer<Arc<Device>>, Framebuffer<Arc<Device>>)>,
/// }
/// ```
pub trait DeviceRef: core::ops::Deref<Target = Device> + Clone {}

impl<T: core::ops::Deref<Target = Device> + Clone> DeviceRef for T {}

impl Device {
    /// Opens `path` read-write and close-on-exec, and checks that it is a DRM node.
    ///
    /// The open itself cannot block or take a controlling terminal whatever the path names
    /// (a FIFO, a tty, a device that waits for a carrier): it is O_NONBLOCK | O_NOCTTY, and
    /// O_NONBLOCK is cleared once the file is known to be a DRM node, so that reads of
    /// events block as on any DRM fd.
    ///
    /// # Errors
    /// [`Error::Open`] if the open fails; [`Error::NotDrm`] if it is not a DRM node.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = sys_call::open(path, flags, Mode::empty()).map_err(|errno| Error::Open {
            path: path.to_path_buf(),
            errno,
        })?;
        let dev = Self::from_fd(fd)?;
        let fl = rustix::fs::fcntl_getfl(&dev.fd).map_err(|e| Error::syscall("fcntl", e))?;
        rustix::fs::fcntl_setfl(&dev.fd, fl - OFlags::NONBLOCK)
            .map_err(|e| Error::syscall("fcntl", e))?;
        Ok(dev)
    }

    /// Adopts an open fd (from a compositor, a test fixture, fd passing).
    ///
    /// # Errors
    /// [`Error::NotDrm`] if the fd is not a DRM char device.
    pub fn from_fd(fd: OwnedFd) -> Result<Self> {
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall("fstat", e))?;
        let kind = classify(st.st_mode, st.st_rdev)?;
        Ok(Self {
            fd,
            kind,
            handles: Default::default(),
            pointer_props: Default::default(),
            releases: Default::default(),
            event_reader: Default::default(),
        })
    }

    /// Which kind of node this is.
    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The release calls of this device's objects that failed in `Drop` (GEM close and
    /// dumb destroy, `RMFB`, `DESTROYPROPBLOB`, `SYNCOBJ_DESTROY`, the vgem fence signal of
    /// a dropped fence): how many, and the latest ioctl and errno. `Drop` never panics;
    /// this is where its failures show. After the driver is unbound every one fails with
    /// `ENODEV`, which is normal.
    pub fn release_failures(&self) -> crate::ReleaseFailures {
        self.releases.get()
    }

    /// `DRM_IOCTL_VERSION`: driver name, version, date and description.
    ///
    /// One ioctl in the common case: the buffers start at a size that fits every
    /// in-tree driver and grow only if the kernel reports longer strings.
    pub fn driver(&self) -> Result<DriverVersion> {
        // First try with stack buffers that fit every in-tree driver: no allocation but
        // the three strings of the answer.
        let (mut name, mut date, mut desc) = ([0u8; 64], [0u8; 32], [0u8; 256]);
        let v = sys_call::version(self.fd.as_fd(), &mut name, &mut date, &mut desc)?;
        let clamp = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let want = [clamp(v.name_len), clamp(v.date_len), clamp(v.desc_len)];
        if want[0] <= name.len() && want[1] <= date.len() && want[2] <= desc.len() {
            return Ok(version_of(
                &v,
                &name[..want[0]],
                &date[..want[1]],
                &desc[..want[2]],
            ));
        }
        // Longer strings: heap buffers sized from the kernel's lengths.
        let mut cap = want;
        loop {
            let mut name = vec![0u8; cap[0]];
            let mut date = vec![0u8; cap[1]];
            let mut desc = vec![0u8; cap[2]];
            let v = sys_call::version(self.fd.as_fd(), &mut name, &mut date, &mut desc)?;
            let want = [clamp(v.name_len), clamp(v.date_len), clamp(v.desc_len)];
            if want.iter().zip(cap).any(|(w, c)| *w > c) {
                cap = [
                    want[0].max(cap[0]),
                    want[1].max(cap[1]),
                    want[2].max(cap[2]),
                ];
                continue;
            }
            return Ok(version_of(
                &v,
                &name[..want[0]],
                &date[..want[1]],
                &desc[..want[2]],
            ));
        }
    }

    /// `DRM_IOCTL_GET_CAP` for one raw capability number (`DRM_CAP_*`).
    #[inline]
    pub fn raw_cap(&self, cap: u32) -> Result<u64> {
        let mut arg = sys::drm_get_cap {
            capability: u64::from(cap),
            value: 0,
        };
        sys_call::get_cap(self.fd.as_fd(), &mut arg)?;
        Ok(arg.value)
    }
}

/// An authentication token (`drm_magic_t`) of one open file of a primary node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthMagic(pub u32);

impl Device {
    /// Opens the first node (by path order) whose driver is `driver` (as `DRM_IOCTL_VERSION`
    /// names it, e.g. `vkms`, `virtio_gpu`, `bochs-drm`, `qxl`, `vgem`), of `kind` if given.
    ///
    /// # Errors
    /// [`Error::NotFound`] naming the driver and what was found instead; [`Error::Open`] if
    /// the matching node cannot be opened.
    pub fn open_driver(driver: &str, kind: Option<NodeKind>) -> Result<Self> {
        let nodes = enumerate().unwrap_or_default();
        let found = nodes
            .iter()
            .find(|n| n.driver.as_deref() == Some(driver) && kind.is_none_or(|k| k == n.kind));
        match found {
            Some(n) => Self::open(&n.path),
            None => {
                let mut have: Vec<String> = nodes
                    .iter()
                    .map(|n| format!("{} {}", n.driver.as_deref().unwrap_or("?"), n.kind.as_str()))
                    .collect();
                have.dedup();
                Err(Error::NotFound {
                    what: format!(
                        "no {}DRM node of driver {driver:?} (found: {})",
                        kind.map(|k| format!("{} ", k.as_str())).unwrap_or_default(),
                        if have.is_empty() {
                            "none".to_string()
                        } else {
                            have.join(", ")
                        }
                    ),
                })
            }
        }
    }

    /// `DRM_IOCTL_SET_MASTER`: becomes DRM master (primary nodes; the first opener of an idle
    /// device is master already). EBUSY/EPERM while another file is master, unless the caller
    /// has CAP_SYS_ADMIN.
    pub fn set_master(&self) -> Result<()> {
        sys_call::set_master(self.fd.as_fd())
    }

    /// `DRM_IOCTL_DROP_MASTER`: gives up DRM master. EINVAL if this file is not master.
    pub fn drop_master(&self) -> Result<()> {
        sys_call::drop_master(self.fd.as_fd())
    }

    /// `DRM_IOCTL_GET_MAGIC`: this file's authentication token, to hand to the master.
    /// Primary nodes only.
    pub fn magic(&self) -> Result<AuthMagic> {
        let mut a = sys::drm_auth::default();
        sys_call::get_magic(self.fd.as_fd(), &mut a)?;
        Ok(AuthMagic(a.magic))
    }

    /// `DRM_IOCTL_AUTH_MAGIC`: (master only) authenticates the open file that owns `magic`,
    /// which lets it use authenticated-only ioctls such as `GEM_FLINK`/`GEM_OPEN`. EINVAL
    /// for an unknown magic, EACCES when this file is not master.
    pub fn authenticate(&self, magic: AuthMagic) -> Result<()> {
        let mut a = sys::drm_auth { magic: magic.0 };
        sys_call::auth_magic(self.fd.as_fd(), &mut a)
    }

    /// How many distinct GEM handles this process owns through this `Device` (live
    /// [`GemObject`](crate::GemObject)s, counted once per handle). For leak checks.
    pub fn live_handles(&self) -> usize {
        self.handles.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl AsFd for Device {
    #[inline]
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl From<Device> for OwnedFd {
    fn from(d: Device) -> OwnedFd {
        d.fd
    }
}

/// Builds the answer of `DRM_IOCTL_VERSION` from the filled prefixes of its buffers, each
/// exactly as long as the kernel's string (`drm_copy_field` copies `strlen` bytes, no NUL:
/// there is none to cut at).
fn version_of(v: &sys::drm_version, name: &[u8], date: &[u8], desc: &[u8]) -> DriverVersion {
    DriverVersion {
        name: text(name),
        version: (v.version_major, v.version_minor, v.version_patchlevel),
        date: text(date),
        desc: text(desc),
    }
}

/// `b` as text, invalid UTF-8 replaced by U+FFFD: valid UTF-8 (every driver's strings) is
/// validated once and copied; the lossy path runs only when the validation fails.
fn text(b: &[u8]) -> String {
    match core::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn classify(mode: u32, rdev: u64) -> Result<NodeKind> {
    if rustix::fs::FileType::from_raw_mode(mode) != rustix::fs::FileType::CharacterDevice {
        return Err(Error::NotDrm {
            why: "not a character device".into(),
        });
    }
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    // Trust sysfs rather than a hard-coded major of 226.
    let sys = format!("/sys/dev/char/{major}:{minor}/subsystem");
    let subsystem = std::fs::read_link(&sys)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if subsystem.as_deref() != Some("drm") {
        return Err(Error::NotDrm {
            why: format!("char device {major}:{minor} is not in the drm subsystem"),
        });
    }
    NodeKind::from_minor(minor).ok_or_else(|| Error::NotDrm {
        why: format!("minor {minor} is neither a primary nor a render node"),
    })
}

/// One DRM node found on the machine, with its sysfs identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `/dev/dri/...` path.
    pub path: PathBuf,
    /// Primary or render.
    pub kind: NodeKind,
    /// Char-device major and minor.
    pub dev: (u32, u32),
    /// DRM driver name (`vkms`, `virtio_gpu`, `bochs-drm`, ...): `DRM_IOCTL_VERSION` on a
    /// render node (debugfs `dri/<minor>/name` when it cannot be opened). A primary node is
    /// never opened here (its first opener becomes DRM master while it holds it): it takes
    /// the name of its device's render node, else debugfs's (root), else the driver bound
    /// to its parent device in sysfs ([`NodeInfo::parent_driver`]), else none.
    pub driver: Option<String>,
    /// Driver bound to the parent device in sysfs (`/sys/.../device/driver`): `virtio-pci`,
    /// `bochs-drm`, `qxl`; none for virtual devices such as vkms and vgem.
    pub parent_driver: Option<String>,
    /// Bus of the parent device (`pci`, `platform`, `virtio`, ...), if any.
    pub bus: Option<String>,
    /// PCI vendor and device ids where the parent is a PCI device.
    pub pci_id: Option<(u16, u16)>,
    /// The node's sysfs directory.
    pub sysfs: PathBuf,
}

/// Why enumeration found nothing, for a plain message to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoNodes {
    /// `/dev/dri` does not exist (no DRM driver loaded, or a container without it).
    NoDevDri,
    /// `/dev/dri` exists but holds no DRM nodes.
    Empty,
}

/// Lists every DRM primary and render node under `/dev/dri`, sorted by path.
///
/// Identity comes from sysfs, so nodes are found by driver, never by number. Only render
/// nodes are opened (for `DRM_IOCTL_VERSION`): opening a primary node could make this
/// process DRM master for that moment and another's SET_MASTER fail (see
/// [`NodeInfo::driver`]).
pub fn enumerate() -> core::result::Result<Vec<NodeInfo>, NoNodes> {
    enumerate_in(Path::new("/dev/dri"))
}

/// [`enumerate`] over another directory of device nodes.
pub fn enumerate_in(dir: &Path) -> core::result::Result<Vec<NodeInfo>, NoNodes> {
    let entries = std::fs::read_dir(dir).map_err(|_| NoNodes::NoDevDri)?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let Ok(st) = rustix::fs::stat(&path) else {
            continue;
        };
        let Ok(kind) = classify(st.st_mode, st.st_rdev) else {
            continue;
        };
        let dev = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        let sysfs = PathBuf::from(format!("/sys/dev/char/{}:{}", dev.0, dev.1));
        let link_name = |p: PathBuf| {
            std::fs::read_link(p)
                .ok()
                .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        };
        let hex = |p: PathBuf| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        };
        let bus = link_name(sysfs.join("device/subsystem"));
        let pci_id = if bus.as_deref() == Some("pci") {
            hex(sysfs.join("device/vendor")).zip(hex(sysfs.join("device/device")))
        } else {
            None
        };
        // A render node is opened for its name; a primary node never is: its first opener
        // becomes DRM master while it holds the file, so a scan that opened one would make
        // a compositor's SET_MASTER at that moment fail with EBUSY.
        let driver = match kind {
            NodeKind::Render => Device::open(&path)
                .and_then(|d| d.driver())
                .map(|v| v.name)
                .ok()
                .or_else(|| debugfs_name(dev.1)),
            NodeKind::Primary => None,
        };
        out.push(NodeInfo {
            driver,
            parent_driver: link_name(sysfs.join("device/driver")),
            bus,
            pci_id,
            path,
            kind,
            dev,
            sysfs,
        });
    }
    if out.is_empty() {
        return Err(NoNodes::Empty);
    }
    // Primary nodes: the name their device's render node gave, else debugfs's (root), else
    // the driver bound to the parent device in sysfs.
    let parent = |n: &NodeInfo| std::fs::canonicalize(n.sysfs.join("device")).ok();
    let render_names: Vec<(PathBuf, String)> = out
        .iter()
        .filter(|n| n.kind == NodeKind::Render)
        .filter_map(|n| Some((parent(n)?, n.driver.clone()?)))
        .collect();
    for n in out.iter_mut().filter(|n| n.kind == NodeKind::Primary) {
        let p = parent(n);
        n.driver = render_names
            .iter()
            .find(|(rp, _)| p.as_ref() == Some(rp))
            .map(|(_, name)| name.clone())
            .or_else(|| debugfs_name(n.dev.1))
            .or_else(|| n.parent_driver.clone());
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The driver name from debugfs `dri/<minor>/name` ("vkms dev=vkms unique=vkms").
fn debugfs_name(minor: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/sys/kernel/debug/dri/{minor}/name")).ok()?;
    text.split_whitespace().next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_ranges() {
        assert_eq!(NodeKind::from_minor(0), Some(NodeKind::Primary));
        assert_eq!(NodeKind::from_minor(63), Some(NodeKind::Primary));
        assert_eq!(NodeKind::from_minor(64), None);
        assert_eq!(NodeKind::from_minor(128), Some(NodeKind::Render));
        assert_eq!(NodeKind::from_minor(191), Some(NodeKind::Render));
        assert_eq!(NodeKind::from_minor(192), None);
    }

    #[test]
    fn dev_null_is_not_drm() {
        let fd = rustix::fs::open("/dev/null", OFlags::RDWR, Mode::empty()).unwrap();
        match Device::from_fd(fd) {
            Err(Error::NotDrm { why }) => assert!(why.contains("drm subsystem"), "{why}"),
            other => panic!("expected NotDrm, got {other:?}"),
        }
    }

    #[test]
    fn regular_file_is_not_drm() {
        let fd = rustix::fs::open("/proc/self/status", OFlags::RDONLY, Mode::empty()).unwrap();
        assert!(matches!(Device::from_fd(fd), Err(Error::NotDrm { .. })));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        // Nobody opens the other end: an open that could block would hang here.
        let dir = std::env::temp_dir().join(format!("drm-gem-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &dir,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let r = Device::open(&dir);
        let _ = std::fs::remove_file(&dir);
        match r {
            Err(Error::NotDrm { why }) => assert!(why.contains("not a character device"), "{why}"),
            other => panic!("expected NotDrm, got {other:?}"),
        }
    }

    #[test]
    fn missing_dir_says_so() {
        assert_eq!(
            enumerate_in(Path::new("/nonexistent/dri")),
            Err(NoNodes::NoDevDri)
        );
    }

    #[test]
    fn get_cap_on_a_non_drm_fd_names_the_ioctl() {
        // GET_CAP on /dev/null: the kernel answers ENOTTY and the error says which call.
        let fd = rustix::fs::open("/dev/null", OFlags::RDWR, Mode::empty()).unwrap();
        let mut arg = sys::drm_get_cap::default();
        let e = sys_call::get_cap(fd.as_fd(), &mut arg).unwrap_err();
        assert!(
            matches!(e, Error::Ioctl { name: "DRM_IOCTL_GET_CAP", errno } if errno == rustix::io::Errno::NOTTY),
            "{e:?}"
        );
    }
}
