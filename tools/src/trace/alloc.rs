//! GPU memory allocation failures: DRM ioctls that return `ENOMEM` or `ENOSPC`, from the
//! syscall tracepoints `syscalls:sys_enter_ioctl` (fd, request) and
//! `syscalls:sys_exit_ioctl` (return value), where the kernel has them
//! (`CONFIG_FTRACE_SYSCALLS`).
//!
//! The kernel filters both (perf's `PERF_EVENT_IOC_SET_FILTER`): the enters to requests of
//! ioctl type `'d'` (DRM's: bits 8-15 of the request), the exits to the two errnos; the
//! recording drops whatever passes where a kernel refused the filter. A failing exit is
//! paired with the last DRM enter of the same thread ([`pair`]): a thread makes one
//! system call at a time, so a DRM enter followed by an exit of that thread is the same
//! call, unless the DRM call succeeded (its exit filtered out) and a non-DRM ioctl of the
//! thread then failed with one of the errnos, whose enter was filtered out: so an enter is
//! used once, and a DRM call is known to have ended once a later DRM enter of the thread
//! shows up. That one case (a non-DRM ioctl failing with ENOMEM or ENOSPC right after a
//! successful DRM ioctl of the same thread) is the pairing's known limit.
//!
//! ```
//! use drmtool::trace::alloc::{ioctl_name, is_drm_request};
//! assert_eq!(ioctl_name(ioctl_sys::qxl::DRM_IOCTL_QXL_ALLOC), "DRM_IOCTL_QXL_ALLOC");
//! assert!(is_drm_request(u64::from(ioctl_sys::drm::DRM_IOCTL_MODE_CREATE_DUMB)));
//! assert_eq!(ioctl_name(0xc0086499), "DRM ioctl 0x99 (driver range)");
//! ```

use super::record::Event;
use std::collections::BTreeMap;

/// The tracepoints' system.
pub const SYSTEM: &str = "syscalls";
/// The enter tracepoint.
pub const ENTER: &str = "sys_enter_ioctl";
/// The exit tracepoint.
pub const EXIT: &str = "sys_exit_ioctl";

/// The kernel's filter for [`ENTER`]: ioctl type `'d'` (0x64) in bits 8-15 of `cmd`, its
/// set bits (0x400, 0x2000, 0x4000) set and the others (0x9b00) clear.
pub const ENTER_FILTER: &std::ffi::CStr =
    c"(cmd & 0x400) && (cmd & 0x2000) && (cmd & 0x4000) && !(cmd & 0x9b00)";
/// The kernel's filter for [`EXIT`]: `-ENOMEM` or `-ENOSPC`.
pub const EXIT_FILTER: &std::ffi::CStr = c"ret == -12 || ret == -28";

/// Whether `cmd` is a DRM ioctl request (type `'d'`).
pub fn is_drm_request(cmd: u64) -> bool {
    (cmd >> 8) & 0xff == 0x64
}

/// Whether a failing exit's return value is one an allocation failure gives.
pub fn is_alloc_errno(ret: i64) -> bool {
    errno_name(ret).is_some()
}

fn errno_name(ret: i64) -> Option<&'static str> {
    match ret {
        -12 => Some("ENOMEM"),
        -28 => Some("ENOSPC"),
        _ => None,
    }
}

/// Whether the recording keeps `e`: DRM enters and allocation-failure exits of
/// [`SYSTEM`]; every event of another system.
pub fn keep(e: &Event) -> bool {
    if e.system != SYSTEM {
        return true;
    }
    match e.name.as_str() {
        ENTER => e.int("cmd").is_some_and(|c| is_drm_request(c as u64)),
        EXIT => e.int("ret").is_some_and(is_alloc_errno),
        _ => true,
    }
}

/// One DRM ioctl that failed with ENOMEM or ENOSPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocFailure {
    /// When it returned (`CLOCK_MONOTONIC` ns).
    pub time: u64,
    /// When it was entered.
    pub start: u64,
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The DRM fd.
    pub fd: i64,
    /// The request number.
    pub cmd: u32,
    /// The request's name ([`ioctl_name`]).
    pub ioctl: String,
    /// `ENOMEM` or `ENOSPC`.
    pub errno: &'static str,
}

/// Pairs failing exits with their threads' DRM enters as events come, in time order (see
/// the module doc). It remembers one open enter per thread.
#[derive(Debug, Default)]
pub struct Pairer {
    open: BTreeMap<u32, (u64, i64, u32)>,
}

/// At most this many threads' enters are remembered.
const OPEN_MAX: usize = 1 << 16;

impl Pairer {
    /// The next event; a failure when it is a failing exit whose enter was seen.
    pub fn push(&mut self, e: &Event) -> Option<AllocFailure> {
        if e.system != SYSTEM {
            return None;
        }
        match e.name.as_str() {
            ENTER => {
                if let (Some(fd), Some(cmd)) = (e.int("fd"), e.int("cmd")) {
                    if self.open.len() >= OPEN_MAX && !self.open.contains_key(&e.tid) {
                        self.open.clear();
                    }
                    self.open.insert(e.tid, (e.time, fd, cmd as u32));
                }
                None
            }
            EXIT => {
                let errno = e.int("ret").and_then(errno_name)?;
                let (start, fd, cmd) = self.open.remove(&e.tid)?;
                Some(AllocFailure {
                    time: e.time,
                    start,
                    pid: e.pid,
                    tid: e.tid,
                    fd,
                    cmd,
                    ioctl: ioctl_name(cmd),
                    errno,
                })
            }
            _ => None,
        }
    }
}

/// Pairs the failing exits in `events` (time order) with their threads' DRM enters.
pub fn pair(events: &[Event]) -> Vec<AllocFailure> {
    let mut p = Pairer::default();
    events.iter().filter_map(|e| p.push(e)).collect()
}

/// The kernel filter a tracepoint is opened with, if any.
pub fn filter_of(f: &super::format::EventFormat) -> Option<&'static std::ffi::CStr> {
    match (f.system.as_str(), f.name.as_str()) {
        (SYSTEM, ENTER) => Some(ENTER_FILTER),
        (SYSTEM, EXIT) => Some(EXIT_FILTER),
        _ => None,
    }
}

/// The name of a DRM request: the uapi macro's for the core's and the bound drivers'
/// (the full request number: direction, size, type and number), else its number and
/// range.
pub fn ioctl_name(cmd: u32) -> String {
    let hits: Vec<&str> = CORE
        .iter()
        .chain(DRIVERS)
        .filter(|(c, _)| *c == cmd)
        .map(|(_, n)| *n)
        .collect();
    if !hits.is_empty() {
        return hits.join("|");
    }
    let nr = cmd & 0xff;
    let range = if (0x40..0xa0).contains(&nr) {
        " (driver range)"
    } else {
        ""
    };
    format!("DRM ioctl {nr:#04x}{range}")
}

/// The DRM core's ioctls (`drm.h`, `drm_mode.h`) by full request number.
const CORE: &[(u32, &str)] = &[
    (ioctl_sys::drm::DRM_IOCTL_VERSION, "DRM_IOCTL_VERSION"),
    (ioctl_sys::drm::DRM_IOCTL_GET_UNIQUE, "DRM_IOCTL_GET_UNIQUE"),
    (ioctl_sys::drm::DRM_IOCTL_GET_MAGIC, "DRM_IOCTL_GET_MAGIC"),
    (ioctl_sys::drm::DRM_IOCTL_IRQ_BUSID, "DRM_IOCTL_IRQ_BUSID"),
    (ioctl_sys::drm::DRM_IOCTL_GET_MAP, "DRM_IOCTL_GET_MAP"),
    (ioctl_sys::drm::DRM_IOCTL_GET_CLIENT, "DRM_IOCTL_GET_CLIENT"),
    (ioctl_sys::drm::DRM_IOCTL_GET_STATS, "DRM_IOCTL_GET_STATS"),
    (
        ioctl_sys::drm::DRM_IOCTL_SET_VERSION,
        "DRM_IOCTL_SET_VERSION",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODESET_CTL,
        "DRM_IOCTL_MODESET_CTL",
    ),
    (ioctl_sys::drm::DRM_IOCTL_GEM_CLOSE, "DRM_IOCTL_GEM_CLOSE"),
    (ioctl_sys::drm::DRM_IOCTL_GEM_FLINK, "DRM_IOCTL_GEM_FLINK"),
    (ioctl_sys::drm::DRM_IOCTL_GEM_OPEN, "DRM_IOCTL_GEM_OPEN"),
    (ioctl_sys::drm::DRM_IOCTL_GET_CAP, "DRM_IOCTL_GET_CAP"),
    (
        ioctl_sys::drm::DRM_IOCTL_SET_CLIENT_CAP,
        "DRM_IOCTL_SET_CLIENT_CAP",
    ),
    (ioctl_sys::drm::DRM_IOCTL_SET_UNIQUE, "DRM_IOCTL_SET_UNIQUE"),
    (ioctl_sys::drm::DRM_IOCTL_AUTH_MAGIC, "DRM_IOCTL_AUTH_MAGIC"),
    (ioctl_sys::drm::DRM_IOCTL_BLOCK, "DRM_IOCTL_BLOCK"),
    (ioctl_sys::drm::DRM_IOCTL_UNBLOCK, "DRM_IOCTL_UNBLOCK"),
    (ioctl_sys::drm::DRM_IOCTL_CONTROL, "DRM_IOCTL_CONTROL"),
    (ioctl_sys::drm::DRM_IOCTL_ADD_MAP, "DRM_IOCTL_ADD_MAP"),
    (ioctl_sys::drm::DRM_IOCTL_ADD_BUFS, "DRM_IOCTL_ADD_BUFS"),
    (ioctl_sys::drm::DRM_IOCTL_MARK_BUFS, "DRM_IOCTL_MARK_BUFS"),
    (ioctl_sys::drm::DRM_IOCTL_INFO_BUFS, "DRM_IOCTL_INFO_BUFS"),
    (ioctl_sys::drm::DRM_IOCTL_MAP_BUFS, "DRM_IOCTL_MAP_BUFS"),
    (ioctl_sys::drm::DRM_IOCTL_FREE_BUFS, "DRM_IOCTL_FREE_BUFS"),
    (ioctl_sys::drm::DRM_IOCTL_RM_MAP, "DRM_IOCTL_RM_MAP"),
    (
        ioctl_sys::drm::DRM_IOCTL_SET_SAREA_CTX,
        "DRM_IOCTL_SET_SAREA_CTX",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_GET_SAREA_CTX,
        "DRM_IOCTL_GET_SAREA_CTX",
    ),
    (ioctl_sys::drm::DRM_IOCTL_SET_MASTER, "DRM_IOCTL_SET_MASTER"),
    (
        ioctl_sys::drm::DRM_IOCTL_DROP_MASTER,
        "DRM_IOCTL_DROP_MASTER",
    ),
    (ioctl_sys::drm::DRM_IOCTL_ADD_CTX, "DRM_IOCTL_ADD_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_RM_CTX, "DRM_IOCTL_RM_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_MOD_CTX, "DRM_IOCTL_MOD_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_GET_CTX, "DRM_IOCTL_GET_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_SWITCH_CTX, "DRM_IOCTL_SWITCH_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_NEW_CTX, "DRM_IOCTL_NEW_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_RES_CTX, "DRM_IOCTL_RES_CTX"),
    (ioctl_sys::drm::DRM_IOCTL_ADD_DRAW, "DRM_IOCTL_ADD_DRAW"),
    (ioctl_sys::drm::DRM_IOCTL_RM_DRAW, "DRM_IOCTL_RM_DRAW"),
    (ioctl_sys::drm::DRM_IOCTL_DMA, "DRM_IOCTL_DMA"),
    (ioctl_sys::drm::DRM_IOCTL_LOCK, "DRM_IOCTL_LOCK"),
    (ioctl_sys::drm::DRM_IOCTL_UNLOCK, "DRM_IOCTL_UNLOCK"),
    (ioctl_sys::drm::DRM_IOCTL_FINISH, "DRM_IOCTL_FINISH"),
    (
        ioctl_sys::drm::DRM_IOCTL_PRIME_HANDLE_TO_FD,
        "DRM_IOCTL_PRIME_HANDLE_TO_FD",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_PRIME_FD_TO_HANDLE,
        "DRM_IOCTL_PRIME_FD_TO_HANDLE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_AGP_ACQUIRE,
        "DRM_IOCTL_AGP_ACQUIRE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_AGP_RELEASE,
        "DRM_IOCTL_AGP_RELEASE",
    ),
    (ioctl_sys::drm::DRM_IOCTL_AGP_ENABLE, "DRM_IOCTL_AGP_ENABLE"),
    (ioctl_sys::drm::DRM_IOCTL_AGP_INFO, "DRM_IOCTL_AGP_INFO"),
    (ioctl_sys::drm::DRM_IOCTL_AGP_ALLOC, "DRM_IOCTL_AGP_ALLOC"),
    (ioctl_sys::drm::DRM_IOCTL_AGP_FREE, "DRM_IOCTL_AGP_FREE"),
    (ioctl_sys::drm::DRM_IOCTL_AGP_BIND, "DRM_IOCTL_AGP_BIND"),
    (ioctl_sys::drm::DRM_IOCTL_AGP_UNBIND, "DRM_IOCTL_AGP_UNBIND"),
    (ioctl_sys::drm::DRM_IOCTL_SG_ALLOC, "DRM_IOCTL_SG_ALLOC"),
    (ioctl_sys::drm::DRM_IOCTL_SG_FREE, "DRM_IOCTL_SG_FREE"),
    (
        ioctl_sys::drm::DRM_IOCTL_WAIT_VBLANK,
        "DRM_IOCTL_WAIT_VBLANK",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_CRTC_GET_SEQUENCE,
        "DRM_IOCTL_CRTC_GET_SEQUENCE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_CRTC_QUEUE_SEQUENCE,
        "DRM_IOCTL_CRTC_QUEUE_SEQUENCE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_UPDATE_DRAW,
        "DRM_IOCTL_UPDATE_DRAW",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETRESOURCES,
        "DRM_IOCTL_MODE_GETRESOURCES",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETCRTC,
        "DRM_IOCTL_MODE_GETCRTC",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_SETCRTC,
        "DRM_IOCTL_MODE_SETCRTC",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CURSOR,
        "DRM_IOCTL_MODE_CURSOR",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETGAMMA,
        "DRM_IOCTL_MODE_GETGAMMA",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_SETGAMMA,
        "DRM_IOCTL_MODE_SETGAMMA",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETENCODER,
        "DRM_IOCTL_MODE_GETENCODER",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETCONNECTOR,
        "DRM_IOCTL_MODE_GETCONNECTOR",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_ATTACHMODE,
        "DRM_IOCTL_MODE_ATTACHMODE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_DETACHMODE,
        "DRM_IOCTL_MODE_DETACHMODE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETPROPERTY,
        "DRM_IOCTL_MODE_GETPROPERTY",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_SETPROPERTY,
        "DRM_IOCTL_MODE_SETPROPERTY",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETPROPBLOB,
        "DRM_IOCTL_MODE_GETPROPBLOB",
    ),
    (ioctl_sys::drm::DRM_IOCTL_MODE_GETFB, "DRM_IOCTL_MODE_GETFB"),
    (ioctl_sys::drm::DRM_IOCTL_MODE_ADDFB, "DRM_IOCTL_MODE_ADDFB"),
    (ioctl_sys::drm::DRM_IOCTL_MODE_RMFB, "DRM_IOCTL_MODE_RMFB"),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_PAGE_FLIP,
        "DRM_IOCTL_MODE_PAGE_FLIP",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_DIRTYFB,
        "DRM_IOCTL_MODE_DIRTYFB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CREATE_DUMB,
        "DRM_IOCTL_MODE_CREATE_DUMB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_MAP_DUMB,
        "DRM_IOCTL_MODE_MAP_DUMB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_DESTROY_DUMB,
        "DRM_IOCTL_MODE_DESTROY_DUMB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETPLANERESOURCES,
        "DRM_IOCTL_MODE_GETPLANERESOURCES",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETPLANE,
        "DRM_IOCTL_MODE_GETPLANE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_SETPLANE,
        "DRM_IOCTL_MODE_SETPLANE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_ADDFB2,
        "DRM_IOCTL_MODE_ADDFB2",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_OBJ_GETPROPERTIES,
        "DRM_IOCTL_MODE_OBJ_GETPROPERTIES",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_OBJ_SETPROPERTY,
        "DRM_IOCTL_MODE_OBJ_SETPROPERTY",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CURSOR2,
        "DRM_IOCTL_MODE_CURSOR2",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_ATOMIC,
        "DRM_IOCTL_MODE_ATOMIC",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CREATEPROPBLOB,
        "DRM_IOCTL_MODE_CREATEPROPBLOB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_DESTROYPROPBLOB,
        "DRM_IOCTL_MODE_DESTROYPROPBLOB",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_CREATE,
        "DRM_IOCTL_SYNCOBJ_CREATE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_DESTROY,
        "DRM_IOCTL_SYNCOBJ_DESTROY",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD,
        "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE,
        "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_WAIT,
        "DRM_IOCTL_SYNCOBJ_WAIT",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_RESET,
        "DRM_IOCTL_SYNCOBJ_RESET",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_SIGNAL,
        "DRM_IOCTL_SYNCOBJ_SIGNAL",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CREATE_LEASE,
        "DRM_IOCTL_MODE_CREATE_LEASE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_LIST_LESSEES,
        "DRM_IOCTL_MODE_LIST_LESSEES",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GET_LEASE,
        "DRM_IOCTL_MODE_GET_LEASE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_REVOKE_LEASE,
        "DRM_IOCTL_MODE_REVOKE_LEASE",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT,
        "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_QUERY,
        "DRM_IOCTL_SYNCOBJ_QUERY",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_TRANSFER,
        "DRM_IOCTL_SYNCOBJ_TRANSFER",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL,
        "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_GETFB2,
        "DRM_IOCTL_MODE_GETFB2",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_SYNCOBJ_EVENTFD,
        "DRM_IOCTL_SYNCOBJ_EVENTFD",
    ),
    (
        ioctl_sys::drm::DRM_IOCTL_MODE_CLOSEFB,
        "DRM_IOCTL_MODE_CLOSEFB",
    ),
];

/// The ioctls of the drivers the project binds (`qxl_drm.h`, `vgem_drm.h`,
/// `virtgpu_drm.h`) by full request number.
const DRIVERS: &[(u32, &str)] = &[
    (ioctl_sys::qxl::DRM_IOCTL_QXL_ALLOC, "DRM_IOCTL_QXL_ALLOC"),
    (ioctl_sys::qxl::DRM_IOCTL_QXL_MAP, "DRM_IOCTL_QXL_MAP"),
    (
        ioctl_sys::qxl::DRM_IOCTL_QXL_EXECBUFFER,
        "DRM_IOCTL_QXL_EXECBUFFER",
    ),
    (
        ioctl_sys::qxl::DRM_IOCTL_QXL_UPDATE_AREA,
        "DRM_IOCTL_QXL_UPDATE_AREA",
    ),
    (
        ioctl_sys::qxl::DRM_IOCTL_QXL_GETPARAM,
        "DRM_IOCTL_QXL_GETPARAM",
    ),
    (
        ioctl_sys::qxl::DRM_IOCTL_QXL_CLIENTCAP,
        "DRM_IOCTL_QXL_CLIENTCAP",
    ),
    (
        ioctl_sys::qxl::DRM_IOCTL_QXL_ALLOC_SURF,
        "DRM_IOCTL_QXL_ALLOC_SURF",
    ),
    (
        ioctl_sys::vgem::DRM_IOCTL_VGEM_FENCE_ATTACH,
        "DRM_IOCTL_VGEM_FENCE_ATTACH",
    ),
    (
        ioctl_sys::vgem::DRM_IOCTL_VGEM_FENCE_SIGNAL,
        "DRM_IOCTL_VGEM_FENCE_SIGNAL",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_MAP,
        "DRM_IOCTL_VIRTGPU_MAP",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_EXECBUFFER,
        "DRM_IOCTL_VIRTGPU_EXECBUFFER",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_GETPARAM,
        "DRM_IOCTL_VIRTGPU_GETPARAM",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_CREATE,
        "DRM_IOCTL_VIRTGPU_RESOURCE_CREATE",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_INFO,
        "DRM_IOCTL_VIRTGPU_RESOURCE_INFO",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_TRANSFER_FROM_HOST,
        "DRM_IOCTL_VIRTGPU_TRANSFER_FROM_HOST",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_TRANSFER_TO_HOST,
        "DRM_IOCTL_VIRTGPU_TRANSFER_TO_HOST",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_WAIT,
        "DRM_IOCTL_VIRTGPU_WAIT",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_GET_CAPS,
        "DRM_IOCTL_VIRTGPU_GET_CAPS",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB,
        "DRM_IOCTL_VIRTGPU_RESOURCE_CREATE_BLOB",
    ),
    (
        ioctl_sys::virtgpu::DRM_IOCTL_VIRTGPU_CONTEXT_INIT,
        "DRM_IOCTL_VIRTGPU_CONTEXT_INIT",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::Value as V;

    fn ev(name: &str, time: u64, tid: u32, fields: &[(&str, i64)]) -> Event {
        let fields: Vec<(&str, V)> = fields.iter().map(|&(k, v)| (k, V::Int(v))).collect();
        Event::for_test(SYSTEM, name, time, tid, &fields)
    }

    const ALLOC: u32 = ioctl_sys::qxl::DRM_IOCTL_QXL_ALLOC;
    const DUMB: u32 = ioctl_sys::drm::DRM_IOCTL_MODE_CREATE_DUMB;

    #[test]
    fn the_filter_matches_exactly_the_drm_type() {
        // The kernel filter's arithmetic, checked against the user-space test.
        let kernel = |cmd: u64| {
            cmd & 0x400 != 0 && cmd & 0x2000 != 0 && cmd & 0x4000 != 0 && cmd & 0x9b00 == 0
        };
        for ty in 0..=0xffu64 {
            for cmd in [ty << 8, (ty << 8) | 0xc008_0040, (ty << 8) | 0x4000_00ff] {
                assert_eq!(kernel(cmd), is_drm_request(cmd), "{cmd:#x}");
            }
        }
        assert!(is_drm_request(u64::from(ALLOC)) && is_drm_request(u64::from(DUMB)));
        // TCGETS ('T').
        assert!(!is_drm_request(0x5401));
    }

    #[test]
    fn failing_exits_pair_with_their_threads_drm_enter() {
        let evs = [
            ev(ENTER, 1, 7, &[("fd", 5), ("cmd", i64::from(ALLOC))]),
            ev(ENTER, 2, 8, &[("fd", 6), ("cmd", i64::from(DUMB))]),
            ev(EXIT, 3, 8, &[("ret", -28)]),
            ev(EXIT, 4, 7, &[("ret", -12)]),
            // An exit of a thread whose DRM enter was used already: no pair.
            ev(EXIT, 5, 7, &[("ret", -12)]),
        ];
        let f = pair(&evs);
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].tid, f[0].fd, f[0].errno, f[0].ioctl.as_str()),
            (8, 6, "ENOSPC", "DRM_IOCTL_MODE_CREATE_DUMB")
        );
        assert_eq!(
            (
                f[1].tid,
                f[1].start,
                f[1].time,
                f[1].errno,
                f[1].ioctl.as_str()
            ),
            (7, 1, 4, "ENOMEM", "DRM_IOCTL_QXL_ALLOC")
        );
    }

    #[test]
    fn a_later_drm_enter_ends_the_earlier_call() {
        let evs = [
            ev(ENTER, 1, 7, &[("fd", 5), ("cmd", i64::from(DUMB))]),
            ev(ENTER, 2, 7, &[("fd", 5), ("cmd", i64::from(ALLOC))]),
            ev(EXIT, 3, 7, &[("ret", -12)]),
        ];
        let f = pair(&evs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].ioctl, "DRM_IOCTL_QXL_ALLOC");
    }

    #[test]
    fn what_the_recording_keeps() {
        assert!(keep(&ev(
            ENTER,
            1,
            1,
            &[("fd", 3), ("cmd", i64::from(DUMB))]
        )));
        assert!(!keep(&ev(ENTER, 1, 1, &[("fd", 3), ("cmd", 0x5401)])));
        assert!(keep(&ev(EXIT, 1, 1, &[("ret", -12)])));
        assert!(!keep(&ev(EXIT, 1, 1, &[("ret", 0)])));
        assert!(!keep(&ev(EXIT, 1, 1, &[("ret", -22)])));
    }

    #[test]
    fn unknown_requests_are_named_by_number() {
        assert_eq!(ioctl_name(0xc0106400), "DRM ioctl 0x00");
        assert_eq!(ioctl_name(0x4008_6450), "DRM ioctl 0x50 (driver range)");
        assert_eq!(
            ioctl_name(ioctl_sys::drm::DRM_IOCTL_GEM_CLOSE),
            "DRM_IOCTL_GEM_CLOSE"
        );
    }
}
