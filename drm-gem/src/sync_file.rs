//! sync_file fences: information, merging, waiting; and sw_sync timelines (debugfs), the
//! kernel's software fence source for tests.

use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::sync_file as ssys;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Where a fence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceStatus {
    /// Not yet signalled.
    Active,
    /// Signalled.
    Signaled,
    /// Signalled with an error (negative errno).
    Error(i32),
}

impl FenceStatus {
    fn from_raw(s: i32) -> Self {
        match s {
            0 => Self::Active,
            1 => Self::Signaled,
            e => Self::Error(e),
        }
    }
}

/// One fence inside a sync_file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceInfo {
    /// The fence's timeline name.
    pub obj_name: String,
    /// The driver that made it (`sw_sync`, `vgem`, ...).
    pub driver_name: String,
    /// Status.
    pub status: FenceStatus,
    /// When it signalled (CLOCK_MONOTONIC ns), 0 while active.
    pub timestamp_ns: u64,
}

/// What `SYNC_IOC_FILE_INFO` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFileInfo {
    /// The sync_file's name.
    pub name: String,
    /// Combined status of all its fences.
    pub status: FenceStatus,
    /// Every fence.
    pub fences: Vec<FenceInfo>,
}

fn c_name(raw: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn to_c_name(name: &str) -> Result<[core::ffi::c_char; 32]> {
    if name.len() > 31 || name.contains('\0') {
        return Err(Error::InvalidArgument {
            what: format!("fence name {name:?}: at most 31 bytes, no NUL"),
        });
    }
    let mut out = [0 as core::ffi::c_char; 32];
    for (o, b) in out.iter_mut().zip(name.bytes()) {
        *o = b as core::ffi::c_char;
    }
    Ok(out)
}

/// A sync_file: an fd holding one or more fences.
#[derive(Debug)]
pub struct SyncFile(OwnedFd);

impl SyncFile {
    /// Adopts an fd that is a sync_file.
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// `SYNC_IOC_FILE_INFO`, with every fence. One ioctl when the file has at most 4 fences;
    /// otherwise it asks for the count and fills exactly that many.
    pub fn info(&self) -> Result<SyncFileInfo> {
        let mut fences = vec![ssys::sync_fence_info::default(); 4];
        let info = match sys_call::sync_file_info(self.0.as_fd(), &mut fences) {
            Ok(i) => i,
            Err(e) if e.errno() == Some(rustix::io::Errno::INVAL) => {
                let count = sys_call::sync_file_info(self.0.as_fd(), &mut [])?.num_fences;
                fences = vec![ssys::sync_fence_info::default(); count as usize];
                sys_call::sync_file_info(self.0.as_fd(), &mut fences)?
            }
            Err(e) => return Err(e),
        };
        fences.truncate((info.num_fences as usize).min(fences.len()));
        Ok(SyncFileInfo {
            name: c_name(&info.name),
            status: FenceStatus::from_raw(info.status),
            fences: fences
                .iter()
                .map(|f| FenceInfo {
                    obj_name: c_name(&f.obj_name),
                    driver_name: c_name(&f.driver_name),
                    status: FenceStatus::from_raw(f.status),
                    timestamp_ns: f.timestamp_ns,
                })
                .collect(),
        })
    }

    /// `SYNC_IOC_MERGE`: a new sync_file that signals when both have.
    pub fn merge(&self, other: BorrowedFd<'_>, name: &str) -> Result<SyncFile> {
        use rustix::fd::AsRawFd;
        let mut a = ssys::sync_merge_data {
            name: to_c_name(name)?,
            fd2: other.as_raw_fd(),
            fence: -1,
            flags: 0,
            pad: 0,
        };
        sys_call::sync_merge(self.0.as_fd(), &mut a)?;
        Ok(SyncFile(sys_call::own_fd("SYNC_IOC_MERGE", a.fence)?))
    }

    /// Waits until every fence signalled (`poll` for POLLIN). `None` waits forever;
    /// returns false once `timeout` (measured from the call, however many signals interrupt
    /// the wait) has passed.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        use rustix::event::{PollFd, PollFlags};
        let deadline = crate::deadline::Deadline::after(timeout);
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        Ok(crate::deadline::poll(&mut fds, deadline)? > 0)
    }
}

impl AsFd for SyncFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<SyncFile> for OwnedFd {
    fn from(s: SyncFile) -> OwnedFd {
        s.0
    }
}

/// A sw_sync timeline (`/sys/kernel/debug/sync/sw_sync`, CONFIG_SW_SYNC): fences on it
/// signal when the timeline is advanced past their value. Closing it signals the rest.
#[derive(Debug)]
pub struct SwSyncTimeline(OwnedFd);

impl SwSyncTimeline {
    /// Where debugfs exposes it.
    pub const PATH: &'static str = "/sys/kernel/debug/sync/sw_sync";

    /// Opens a new timeline. [`Error::Unsupported`] when the kernel has no sw_sync or debugfs
    /// is not mounted.
    pub fn open() -> Result<Self> {
        use rustix::fs::{Mode, OFlags};
        match sys_call::open(Self::PATH, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => Ok(Self(fd)),
            Err(rustix::io::Errno::NOENT) => Err(Error::Unsupported {
                feature: "sw_sync",
                reason: format!(
                    "{} does not exist (CONFIG_SW_SYNC off, or debugfs not mounted)",
                    Self::PATH
                ),
                errno: Some(rustix::io::Errno::NOENT),
            }),
            Err(errno) => Err(Error::Open {
                path: Self::PATH.into(),
                errno,
            }),
        }
    }

    /// `SW_SYNC_IOC_CREATE_FENCE`: a fence that signals at `value`.
    pub fn create_fence(&self, value: u32, name: &str) -> Result<SyncFile> {
        let mut a = ssys::sw_sync_create_fence_data {
            value,
            name: to_c_name(name)?,
            fence: -1,
        };
        sys_call::sw_sync_create_fence(self.0.as_fd(), &mut a)?;
        Ok(SyncFile(sys_call::own_fd(
            "SW_SYNC_IOC_CREATE_FENCE",
            a.fence,
        )?))
    }

    /// `SW_SYNC_IOC_INC`: advances the timeline by `by`.
    pub fn inc(&self, by: u32) -> Result<()> {
        let mut v = by;
        sys_call::sw_sync_inc(self.0.as_fd(), &mut v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = to_c_name("fence-1").unwrap();
        assert_eq!(c_name(&n), "fence-1");
        assert!(to_c_name(&"x".repeat(32)).is_err());
        assert!(to_c_name("a\0b").is_err());
        assert_eq!(FenceStatus::from_raw(1), FenceStatus::Signaled);
        assert_eq!(FenceStatus::from_raw(-62), FenceStatus::Error(-62));
    }
}
