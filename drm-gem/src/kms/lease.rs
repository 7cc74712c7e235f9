//! DRM leases: hand a subset of KMS objects to another file (a VR compositor, a test).

use super::resources::fill_lists;
use crate::device::Device;
use crate::error::Result;
use crate::sys_call;
use rustix::fd::AsFd;

/// A lease this master granted: the lessee's id and its device (a new open file that sees
/// only the leased objects). Revoke it with [`Device::revoke_lease`] or just drop the lessee.
#[derive(Debug)]
pub struct Lease {
    /// The lessee id (for listing and revoking).
    pub lessee_id: u32,
    /// The lessee's file.
    pub lessee: Device,
}

impl Device {
    /// `DRM_IOCTL_MODE_CREATE_LEASE` of KMS objects (CRTCs, connectors, planes; master
    /// only). The lessee fd is close-on-exec.
    pub fn create_lease(&self, objects: &[u32]) -> Result<Lease> {
        let flags = rustix::fs::OFlags::CLOEXEC.bits();
        let (lessee_id, fd) = sys_call::mode_create_lease(self.as_fd(), objects, flags)?;
        let lessee = Device::from_fd(sys_call::own_fd("DRM_IOCTL_MODE_CREATE_LEASE", fd)?)?;
        Ok(Lease { lessee_id, lessee })
    }

    /// `DRM_IOCTL_MODE_LIST_LESSEES`: ids of this master's live lessees.
    pub fn lessees(&self) -> Result<Vec<u32>> {
        fill_lists::<1, 16, u32, _, _>(
            "DRM_IOCTL_MODE_LIST_LESSEES",
            |[b]| Ok(([sys_call::mode_list_lessees(self.as_fd(), b)? as usize], ())),
            |[ids], ()| ids.to_vec(),
        )
    }

    /// `DRM_IOCTL_MODE_GET_LEASE`: the objects leased to this file (all objects for a
    /// master that is not a lessee).
    pub fn leased_objects(&self) -> Result<Vec<u32>> {
        fill_lists::<1, 32, u32, _, _>(
            "DRM_IOCTL_MODE_GET_LEASE",
            |[b]| Ok(([sys_call::mode_get_lease(self.as_fd(), b)? as usize], ())),
            |[ids], ()| ids.to_vec(),
        )
    }

    /// `DRM_IOCTL_MODE_REVOKE_LEASE`: ends a lease; the lessee's file stays open but sees
    /// nothing.
    pub fn revoke_lease(&self, lessee_id: u32) -> Result<()> {
        let mut a = ioctl_sys::drm::drm_mode_revoke_lease { lessee_id };
        sys_call::mode_revoke_lease(self.as_fd(), &mut a)
    }
}
