//! Kernel modesetting: resources, connectors, encoders, CRTCs, planes, properties of every
//! kind, property blobs, `IN_FORMATS` and EDID decoding, framebuffers (`ADDFB2`, `RMFB`,
//! `GETFB2` with its GEM handles owned through the device's handle table), and a
//! serialisable snapshot of it all.
//!
//! ```no_run
//! use drm_gem::{Device, NodeKind};
//! let dev = Device::open_driver("vkms", Some(NodeKind::Primary))?;
//! let snap = drm_gem::kms::Snapshot::take(&dev)?;
//! for c in &snap.connectors {
//!     println!("{} {:?} {} modes", c.connector.name(), c.connector.status, c.connector.modes.len());
//! }
//! # Ok::<(), drm_gem::Error>(())
//! ```

mod atomic;
pub mod edid;
mod events;
mod framebuffer;
mod ids;
pub mod in_formats;
mod lease;
mod legacy;
mod mode;
mod output;
mod property;
mod resources;
mod snapshot;
mod vblank;

pub use atomic::{
    AtomicFlags, AtomicRequest, AtomicValue, Committed, Culprit, Explanation, FenceKind,
    POINTER_PROPERTIES,
};
pub use events::{Event, VblankEvent, parse_events};
pub use framebuffer::{FbPlane, FbPlaneInfo, FbSpec, Framebuffer, FramebufferId, FramebufferInfo};
pub use ids::{BlobId, ConnectorId, CrtcId, EncoderId, ModeObject, PlaneId, PropertyId};
pub use lease::Lease;
pub use legacy::PlaneRect;
pub use mode::Mode;
pub use output::Output;
pub use property::{Property, PropertyBlob, PropertyKind, PropertyValue};
pub use resources::{
    Connector, ConnectorStatus, Crtc, Encoder, Plane, Resources, connector_kind_name,
    encoder_kind_name,
};
pub use snapshot::{
    ConnectorState, CrtcState, FramebufferSummary, ObjectProperty, PlaneState, PlaneType, Snapshot,
};
pub use vblank::Sequence;

/// A NUL-terminated (or full) fixed-size C name as text.
pub(crate) fn c_name(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    match core::str::from_utf8(&b[..end]) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(&b[..end]).into_owned(),
    }
}

#[cfg(feature = "serde")]
pub(crate) fn ser_name<S: serde::Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&c_name(b))
}

/// A DRM fourcc as its four characters (`"XR24"`), as modetest prints it; unprintable codes
/// in hex.
pub fn format_name(fourcc: u32) -> String {
    match drm_fourcc::DrmFourcc::try_from(fourcc) {
        Ok(f) => f.to_string(),
        Err(_) => {
            let b = fourcc.to_le_bytes();
            if b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
                String::from_utf8_lossy(&b).trim_end().to_string()
            } else {
                format!("{fourcc:#010x}")
            }
        }
    }
}

/// A format modifier's name (`"Linear"`, vendor layouts by name, others in hex).
pub fn modifier_name(modifier: u64) -> String {
    match drm_fourcc::DrmModifier::from(modifier) {
        drm_fourcc::DrmModifier::Unrecognized(_) => format!("{modifier:#018x}"),
        m => format!("{m:?}"),
    }
}
