//! A serialisable snapshot of a device's whole KMS state.

use super::edid::{self, Edid};
use super::in_formats::{self, FormatModifiers};
use super::{
    Connector, Crtc, Encoder, FramebufferId, ModeObject, Plane, Property, PropertyId,
    PropertyValue, Resources,
};
use crate::caps::ClientCap;
use crate::device::Device;
use crate::error::{Error, Result};
use std::sync::Arc;

/// A property of an object: metadata, raw value and decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ObjectProperty {
    /// Metadata, shared by every object of the snapshot that has this property (every
    /// plane's `FB_ID` is one property); serialised as the property itself.
    pub property: Arc<Property>,
    /// The raw value.
    pub raw: u64,
    /// The decoded value.
    pub value: PropertyValue,
}

/// A connector with its properties and decoded EDID.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConnectorState {
    /// The connector.
    pub connector: Connector,
    /// Its properties.
    pub properties: Vec<ObjectProperty>,
    /// Its EDID, when it has one and it decodes.
    pub edid: Option<Edid>,
}

/// A plane with its type, properties and `IN_FORMATS`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PlaneState {
    /// The plane.
    pub plane: Plane,
    /// Its `type` property; `None` when the kernel shows none (a client without the
    /// `UNIVERSAL_PLANES` cap) or names a type this crate does not know.
    pub kind: Option<PlaneType>,
    /// Its properties.
    pub properties: Vec<ObjectProperty>,
    /// Format and modifier pairs from `IN_FORMATS`, where the plane has it.
    pub in_formats: Option<Vec<FormatModifiers>>,
}

/// What a plane is for (its immutable `type` property).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum PlaneType {
    /// The CRTC's main plane (`Primary`).
    Primary,
    /// An extra plane composed over the primary (`Overlay`).
    Overlay,
    /// The cursor plane (`Cursor`).
    Cursor,
}

impl PlaneType {
    /// The type the kernel's enum name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "Primary" => Some(Self::Primary),
            "Overlay" => Some(Self::Overlay),
            "Cursor" => Some(Self::Cursor),
            _ => None,
        }
    }

    /// The kernel's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::Primary => "Primary",
            Self::Overlay => "Overlay",
            Self::Cursor => "Cursor",
        }
    }
}

impl core::fmt::Display for PlaneType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A CRTC with its properties.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CrtcState {
    /// The CRTC.
    pub crtc: Crtc,
    /// Its properties.
    pub properties: Vec<ObjectProperty>,
}

/// A framebuffer's layout (from `GETFB2`; the handles it returns are closed at once).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FramebufferSummary {
    /// Its id.
    pub id: FramebufferId,
    /// Size in pixels.
    pub size: (u32, u32),
    /// DRM fourcc.
    pub format: u32,
    /// Modifier, where reported.
    pub modifier: Option<u64>,
    /// Pitch of each plane.
    pub pitches: Vec<u32>,
}

/// Everything KMS says about a device at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// Client caps this snapshot managed to set (`UNIVERSAL_PLANES`, `ATOMIC`,
    /// `WRITEBACK_CONNECTORS`), which decide what is visible.
    pub client_caps: Vec<&'static str>,
    /// Resources.
    pub resources: Resources,
    /// Connectors.
    pub connectors: Vec<ConnectorState>,
    /// Encoders.
    pub encoders: Vec<Encoder>,
    /// CRTCs.
    pub crtcs: Vec<CrtcState>,
    /// Planes.
    pub planes: Vec<PlaneState>,
    /// Framebuffers.
    pub framebuffers: Vec<FramebufferSummary>,
}

/// `Deref` to the object (`crtc.id`, not `crtc.crtc.id`) and lookups of its properties by
/// name, for the three state types.
macro_rules! object_state {
    ($state:ident, $field:ident, $obj:ty, $what:literal) => {
        impl core::ops::Deref for $state {
            type Target = $obj;
            fn deref(&self) -> &$obj {
                &self.$field
            }
        }

        impl $state {
            /// The property called `name`, with its current value.
            pub fn property(&self, name: &str) -> Option<&ObjectProperty> {
                self.properties.iter().find(|p| p.property.name == name)
            }

            /// The id of the property called `name` (to set it in an
            /// [`AtomicRequest`](super::AtomicRequest)).
            ///
            /// # Errors
            /// [`Error::NotFound`] naming the property and the object when it has none such.
            pub fn property_id(&self, name: &str) -> Result<PropertyId> {
                self.property(name)
                    .map(|p| p.property.id)
                    .ok_or_else(|| Error::NotFound {
                        what: format!("property {name:?} on {} {}", $what, self.$field.id),
                    })
            }
        }
    };
}

object_state!(ConnectorState, connector, Connector, "connector");
object_state!(CrtcState, crtc, Crtc, "CRTC");
object_state!(PlaneState, plane, Plane, "plane");

/// Property metadata by id: many objects share one property (every plane's `FB_ID`), so
/// each is asked for once per snapshot. A few dozen entries: a linear scan beats hashing.
type PropCache = Vec<(PropertyId, Arc<Property>)>;

fn props<O: ModeObject>(
    dev: &Device,
    cache: &mut PropCache,
    obj: O,
) -> Result<Vec<ObjectProperty>> {
    let list = dev.object_properties(obj)?;
    let mut out = Vec::with_capacity(list.len());
    for (id, raw) in list {
        let property = match cache.iter().find(|(c, _)| *c == id) {
            Some((_, p)) => Arc::clone(p),
            None => {
                let p = Arc::new(dev.property(id)?);
                cache.push((id, Arc::clone(&p)));
                p
            }
        };
        out.push(ObjectProperty {
            value: property.decode(raw),
            property,
            raw,
        });
    }
    Ok(out)
}

/// The blob of property `name`, guessing the length of the last blob read for it (every
/// plane's `IN_FORMATS` is often the same size): one ioctl instead of two when right.
fn blob_of(
    dev: &Device,
    props: &[ObjectProperty],
    name: &str,
    last_len: &mut usize,
) -> Option<Vec<u8>> {
    let p = props.iter().find(|p| p.property.name == name)?;
    match p.value {
        PropertyValue::Blob(Some(id)) => {
            let b = dev.blob_sized(id, *last_len).ok()?;
            *last_len = b.len();
            Some(b)
        }
        _ => None,
    }
}

impl Snapshot {
    /// Reads the whole KMS state of `dev`. Sets the `UNIVERSAL_PLANES`, `ATOMIC` and
    /// `WRITEBACK_CONNECTORS` client caps on it first, where the kernel accepts them, so
    /// that every plane, connector and property is visible; the caps stay set.
    pub fn take(dev: &Device) -> Result<Self> {
        let mut client_caps = Vec::new();
        for cap in [
            ClientCap::UniversalPlanes,
            ClientCap::Atomic,
            ClientCap::WritebackConnectors,
        ] {
            if dev.set_client_cap(cap, 1).is_ok() {
                client_caps.push(cap.name());
            }
        }
        let resources = dev.resources()?;
        let mut cache = PropCache::new();
        let (mut edid_len, mut in_formats_len) = (0, 0);
        let mut connectors = Vec::new();
        for &id in &resources.connectors {
            let connector = dev.connector(id)?;
            let properties = props(dev, &mut cache, id)?;
            let edid =
                blob_of(dev, &properties, "EDID", &mut edid_len).and_then(|b| edid::parse(&b).ok());
            connectors.push(ConnectorState {
                connector,
                properties,
                edid,
            });
        }
        let encoders = resources
            .encoders
            .iter()
            .map(|&id| dev.encoder(id))
            .collect::<Result<_>>()?;
        let mut crtcs = Vec::new();
        for &id in &resources.crtcs {
            crtcs.push(CrtcState {
                crtc: dev.crtc(id)?,
                properties: props(dev, &mut cache, id)?,
            });
        }
        let mut planes = Vec::new();
        for id in dev.plane_ids()? {
            let plane = dev.plane(id)?;
            let properties = props(dev, &mut cache, id)?;
            let kind = properties
                .iter()
                .find(|p| p.property.name == "type")
                .and_then(|p| match &p.value {
                    PropertyValue::Enum(Some(name)) => PlaneType::from_name(name),
                    _ => None,
                });
            let in_formats = blob_of(dev, &properties, "IN_FORMATS", &mut in_formats_len)
                .and_then(|b| in_formats::parse(&b).ok());
            planes.push(PlaneState {
                plane,
                kind,
                properties,
                in_formats,
            });
        }
        let framebuffers = resources
            .framebuffers
            .iter()
            .filter_map(|&id| dev.framebuffer_info(id).ok())
            .map(|fb| FramebufferSummary {
                id: fb.id,
                size: (fb.width, fb.height),
                format: fb.format,
                modifier: fb.modifier,
                pitches: fb.planes.iter().map(|p| p.pitch).collect(),
            })
            .collect();
        Ok(Self {
            client_caps,
            resources,
            connectors,
            encoders,
            crtcs,
            planes,
            framebuffers,
        })
    }
}
