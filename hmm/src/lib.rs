//! Letting a device see process memory, and registering persistent memory with a device.
//!
//! This crate owns [`Dmirror`] (the test_hmm mirror device), [`Udmabuf`] with [`SealedMemfd`],
//! persistent memory ([`PmemRegion`] discovery, [`DaxMapping`] with [`DaxMapping::persist`],
//! whose guarantee is in [`persist`]) and [`HostRegistration`]. It also exposes the test_hmm
//! request-number layouts, which differ between kernels.
//!
//! `examples/pmem.rs` (run in the test guests by `kernel-tests/tests/pmem_example.rs`)
//! lists the regions and namespaces and persists a record through a MAP_SYNC mapping:
//!
//! ```no_run
#![doc = include_str!("../examples/pmem.rs")]
//! ```
//!
//! ```
//! use hmm::HmmLayout;
//! assert_eq!(HmmLayout::V6_0.snapshot_request(), ioctl_sys::test_hmm::v6_0::HMM_DMIRROR_SNAPSHOT);
//! assert_ne!(HmmLayout::V5_14.snapshot_request(), HmmLayout::V6_0.snapshot_request());
//! ```
#![deny(unsafe_code)]

mod dax;
pub mod dmirror;
pub mod persist;
mod pmem;
pub mod register;
mod sys_call;
pub mod udmabuf;

pub use dax::{DaxKind, DaxMapping, DevDax, is_not_dax};
pub use dmirror::{Dmirror, MirrorProt, MirrorReport, PageKind, PageRange, PageState};
pub use persist::{FlushInstruction, PersistMethod};
pub use pmem::{Namespace, NamespaceMode, PmemRegion};
pub use register::{Backend, HostRegistration};
pub use udmabuf::{SealedMemfd, SealedMemfdBuilder, Udmabuf, UdmabufLimits, UdmabufRange};

use ioctl_sys::test_hmm::{v5_10, v5_14, v6_0};

static RELEASES: drm_gem::ReleaseCounter = drm_gem::ReleaseCounter::new();

/// Release calls of this crate's objects that failed in `Drop`, counted for the whole
/// process (these objects belong to no [`drm_gem::Device`]): the `munmap` of a
/// [`DaxMapping`], the `munlock` of a pinned [`HostRegistration`], and (feature `cuda`)
/// `cuMemHostUnregister`, whose `CUresult` is not an errno and is recorded as `EIO`.
/// `Drop` never panics; this is where its failures show.
pub fn release_failures() -> drm_gem::ReleaseFailures {
    RELEASES.get()
}

pub(crate) fn release_counter() -> &'static drm_gem::ReleaseCounter {
    &RELEASES
}

pub(crate) fn release_failed(call: &'static str, errno: drm_gem::Errno) {
    RELEASES.record(call, errno);
}

/// Which numbering of the test_hmm ioctls a kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HmmLayout {
    /// Linux 5.10 to 5.13: READ, WRITE, MIGRATE, SNAPSHOT.
    V5_10,
    /// Linux 5.14 to 5.19: adds EXCLUSIVE and CHECK_EXCLUSIVE.
    V5_14,
    /// Linux 6.0 and later: MIGRATE split into MIGRATE_TO_DEV/TO_SYS, later ones renumbered.
    V6_0,
}

impl HmmLayout {
    /// The `HMM_DMIRROR_SNAPSHOT` request number in this layout.
    pub const fn snapshot_request(self) -> u32 {
        match self {
            Self::V5_10 => v5_10::HMM_DMIRROR_SNAPSHOT,
            Self::V5_14 => v5_14::HMM_DMIRROR_SNAPSHOT,
            Self::V6_0 => v6_0::HMM_DMIRROR_SNAPSHOT,
        }
    }
}
