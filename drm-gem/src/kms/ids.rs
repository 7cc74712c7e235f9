//! Typed KMS object ids (device-wide, unlike GEM handles).

use ioctl_sys::drm as sys;

/// A KMS mode object type: its `DRM_MODE_OBJECT_*` tag, for property calls.
pub trait ModeObject: Copy {
    /// `DRM_MODE_OBJECT_*` of this kind of object.
    const OBJECT_TYPE: u32;
    /// The raw id.
    fn raw(self) -> u32;
}

macro_rules! mode_id {
    ($(#[$m:meta])* $name:ident, $tag:expr) => {
        crate::id::nonzero_id!($(#[$m])* $name);

        impl ModeObject for $name {
            const OBJECT_TYPE: u32 = $tag;
            fn raw(self) -> u32 {
                self.get()
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}", self.get())
            }
        }
    };
}

mode_id!(
    /// A CRTC id.
    CrtcId, sys::DRM_MODE_OBJECT_CRTC);
mode_id!(
    /// A connector id.
    ConnectorId, sys::DRM_MODE_OBJECT_CONNECTOR);
mode_id!(
    /// An encoder id.
    EncoderId, sys::DRM_MODE_OBJECT_ENCODER);
mode_id!(
    /// A plane id.
    PlaneId, sys::DRM_MODE_OBJECT_PLANE);
mode_id!(
    /// A property id.
    PropertyId, sys::DRM_MODE_OBJECT_PROPERTY);
mode_id!(
    /// A property blob id.
    BlobId, sys::DRM_MODE_OBJECT_BLOB);

impl ModeObject for super::FramebufferId {
    const OBJECT_TYPE: u32 = sys::DRM_MODE_OBJECT_FB;
    fn raw(self) -> u32 {
        self.get()
    }
}

/// Collects the non-zero ids of a kernel id array.
pub(crate) fn ids<T>(raw: &[u32], wrap: fn(u32) -> Option<T>) -> Vec<T> {
    raw.iter().filter_map(|&r| wrap(r)).collect()
}
