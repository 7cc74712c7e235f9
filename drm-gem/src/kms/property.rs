//! KMS properties: metadata of every kind, decoded values, typed lookup by name, and
//! property blobs (read, and created as RAII objects).

use super::ids::{BlobId, ModeObject, PropertyId};
use super::resources::Slots;
use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// What values a property takes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "type", rename_all = "snake_case"))]
pub enum PropertyKind {
    /// Unsigned range, inclusive.
    Range {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
    },
    /// Signed range, inclusive.
    SignedRange {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// One of named values.
    Enum {
        /// (value, name) pairs.
        entries: Vec<(u64, String)>,
    },
    /// A set of named bits (`entries` give bit numbers).
    Bitmask {
        /// (bit number, name) pairs.
        entries: Vec<(u64, String)>,
    },
    /// A blob id (0: none).
    Blob,
    /// A mode object id of the given `DRM_MODE_OBJECT_*` type (0: none).
    Object {
        /// `DRM_MODE_OBJECT_*` the id must have.
        object_type: u32,
    },
    /// A type this crate does not know (flags kept).
    Unknown {
        /// The raw flags.
        flags: u32,
    },
}

/// A property's metadata (`DRM_IOCTL_MODE_GETPROPERTY`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Property {
    /// Its id.
    pub id: PropertyId,
    /// Its name (`"CRTC_ID"`, `"type"`, `"IN_FORMATS"`, ...).
    pub name: String,
    /// What values it takes.
    pub kind: PropertyKind,
    /// Userspace may not set it.
    pub immutable: bool,
    /// Only atomic clients see it.
    pub atomic: bool,
}

/// A property value decoded against its [`PropertyKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(untagged))]
pub enum PropertyValue {
    /// A range value.
    Unsigned(u64),
    /// A signed-range value.
    Signed(i64),
    /// An enum value's name (`None` when the value names no entry).
    Enum(Option<String>),
    /// The names of the bits set (unknown bits as `bit N`).
    Bitmask(Vec<String>),
    /// A blob id.
    Blob(Option<BlobId>),
    /// An object id.
    Object(u32),
    /// Undecoded.
    Raw(u64),
}

impl Property {
    /// Decodes a raw value of this property.
    pub fn decode(&self, raw: u64) -> PropertyValue {
        match &self.kind {
            PropertyKind::Range { .. } => PropertyValue::Unsigned(raw),
            PropertyKind::SignedRange { .. } => PropertyValue::Signed(raw as i64),
            PropertyKind::Enum { entries } => PropertyValue::Enum(
                entries
                    .iter()
                    .find(|(v, _)| *v == raw)
                    .map(|(_, n)| n.clone()),
            ),
            PropertyKind::Bitmask { entries } => {
                let mut names = Vec::new();
                for bit in 0..64u64 {
                    if raw & (1 << bit) == 0 {
                        continue;
                    }
                    match entries.iter().find(|(b, _)| *b == bit) {
                        Some((_, n)) => names.push(n.clone()),
                        None => names.push(format!("bit {bit}")),
                    }
                }
                PropertyValue::Bitmask(names)
            }
            PropertyKind::Blob => {
                PropertyValue::Blob(u32::try_from(raw).ok().and_then(BlobId::new))
            }
            PropertyKind::Object { .. } => PropertyValue::Object(raw as u32),
            PropertyKind::Unknown { .. } => PropertyValue::Raw(raw),
        }
    }

    /// Checks `raw` against the property's kind the way the kernel does for a set, so that
    /// a bad value is refused before the kernel is asked.
    pub fn check(&self, raw: u64) -> Result<()> {
        let ok = match &self.kind {
            PropertyKind::Range { min, max } => (*min..=*max).contains(&raw),
            PropertyKind::SignedRange { min, max } => (*min..=*max).contains(&(raw as i64)),
            PropertyKind::Enum { entries } => entries.iter().any(|(v, _)| *v == raw),
            PropertyKind::Bitmask { entries } => {
                let allowed = entries
                    .iter()
                    .fold(0u64, |m, (b, _)| m | (1u64 << (b & 63)));
                raw & !allowed == 0
            }
            PropertyKind::Blob | PropertyKind::Object { .. } => raw <= u64::from(u32::MAX),
            PropertyKind::Unknown { .. } => true,
        };
        if self.immutable {
            return Err(Error::InvalidArgument {
                what: format!("property {} is immutable", self.name),
            });
        }
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                what: format!(
                    "{raw} is out of range for property {} ({:?})",
                    self.name, self.kind
                ),
            })
        }
    }
}

/// Decodes `DRM_IOCTL_MODE_GETPROPERTY`'s answer (pure; host-tested).
pub(crate) fn decode_property(
    id: PropertyId,
    a: &sys::drm_mode_get_property,
    values: &[u64],
    enums: &[sys::drm_mode_property_enum],
) -> Property {
    let flags = a.flags;
    let entries = || {
        enums
            .iter()
            .map(|e| (e.value, super::c_name(&e.name.map(|c| c as u8))))
            .collect::<Vec<_>>()
    };
    let ext = flags & sys::DRM_MODE_PROP_EXTENDED_TYPE;
    let kind = if flags & sys::DRM_MODE_PROP_RANGE != 0 && values.len() == 2 {
        PropertyKind::Range {
            min: values[0],
            max: values[1],
        }
    } else if flags & sys::DRM_MODE_PROP_ENUM != 0 {
        PropertyKind::Enum { entries: entries() }
    } else if flags & sys::DRM_MODE_PROP_BITMASK != 0 {
        PropertyKind::Bitmask { entries: entries() }
    } else if flags & sys::DRM_MODE_PROP_BLOB != 0 {
        PropertyKind::Blob
    } else if ext == sys::DRM_MODE_PROP_SIGNED_RANGE && values.len() == 2 {
        PropertyKind::SignedRange {
            min: values[0] as i64,
            max: values[1] as i64,
        }
    } else if ext == sys::DRM_MODE_PROP_OBJECT && values.len() == 1 {
        PropertyKind::Object {
            object_type: values[0] as u32,
        }
    } else {
        PropertyKind::Unknown { flags }
    };
    Property {
        id,
        name: super::c_name(&a.name.map(|c| c as u8)),
        kind,
        immutable: flags & sys::DRM_MODE_PROP_IMMUTABLE != 0,
        atomic: flags & sys::DRM_MODE_PROP_ATOMIC != 0,
    }
}

/// A property blob this file created; destroyed (`DRM_IOCTL_MODE_DESTROYPROPBLOB`) on drop.
/// `D` is `&Device` or `Arc<Device>` ([`DeviceRef`]).
#[derive(Debug)]
pub struct PropertyBlob<D: DeviceRef> {
    dev: D,
    id: BlobId,
}

impl<D: DeviceRef> PropertyBlob<D> {
    /// `DRM_IOCTL_MODE_CREATEPROPBLOB` on `dev`; [`Device::create_blob`] for any
    /// [`DeviceRef`].
    pub fn create(dev: D, data: &[u8]) -> Result<Self> {
        if data.is_empty() || u32::try_from(data.len()).is_err() {
            return Err(Error::InvalidArgument {
                what: format!("a property blob of {} bytes (1 to u32::MAX)", data.len()),
            });
        }
        let raw = sys_call::mode_createpropblob(dev.as_fd(), data)?;
        let id = BlobId::new(raw).ok_or(Error::BadReply {
            ioctl: "DRM_IOCTL_MODE_CREATEPROPBLOB",
            what: "blob id 0",
        })?;
        Ok(Self { dev, id })
    }

    /// Its id (to set as a blob property's value).
    pub fn id(&self) -> BlobId {
        self.id
    }
}

impl<D: DeviceRef> Drop for PropertyBlob<D> {
    fn drop(&mut self) {
        let mut a = sys::drm_mode_destroy_blob {
            blob_id: self.id.get(),
        };
        // Drop cannot return an error and never panics: a failure (ENODEV after the driver
        // is unbound; the id is ours by construction) is counted on the device.
        let r = sys_call::mode_destroypropblob(self.dev.as_fd(), &mut a);
        self.dev.releases.check("DRM_IOCTL_MODE_DESTROYPROPBLOB", r);
    }
}

impl Device {
    /// `DRM_IOCTL_MODE_GETPROPERTY`: a property's name, kind and flags.
    pub fn property(&self, id: PropertyId) -> Result<Property> {
        let mut values = Slots::<u64, 8>::new();
        let mut enums = Slots::<sys::drm_mode_property_enum, 32>::new();
        for _ in 0..8 {
            let (mut v, mut e) = (values.buf(), enums.buf());
            let a = sys_call::mode_getproperty(self.as_fd(), id.get(), &mut v, &mut e)?;
            let (tv, te) = (a.count_values as usize, a.count_enum_blobs as usize);
            if v.filled().len() == tv && e.filled().len() == te {
                return Ok(decode_property(id, &a, v.filled(), e.filled()));
            }
            values.grow(tv);
            enums.grow(te);
        }
        Err(super::resources::grew("DRM_IOCTL_MODE_GETPROPERTY"))
    }

    /// `DRM_IOCTL_MODE_OBJ_GETPROPERTIES`: the property ids and raw values of one object.
    pub fn object_properties<O: ModeObject>(&self, obj: O) -> Result<Vec<(PropertyId, u64)>> {
        let mut ids = Slots::<u32, 64>::new();
        let mut values = Slots::<u64, 64>::new();
        for _ in 0..8 {
            let (mut p, mut v) = (ids.buf(), values.buf());
            let n = sys_call::mode_obj_getproperties(
                self.as_fd(),
                obj.raw(),
                O::OBJECT_TYPE,
                &mut p,
                &mut v,
            )? as usize;
            if p.filled().len() == n && v.filled().len() == n {
                return Ok(p
                    .filled()
                    .iter()
                    .zip(v.filled())
                    .filter_map(|(&p, &v)| PropertyId::new(p).map(|p| (p, v)))
                    .collect());
            }
            ids.grow(n);
            values.grow(n);
        }
        Err(super::resources::grew("DRM_IOCTL_MODE_OBJ_GETPROPERTIES"))
    }

    /// An object's properties with metadata and decoded values, in the kernel's order.
    pub fn properties_of<O: ModeObject>(&self, obj: O) -> Result<Vec<(Property, u64)>> {
        self.object_properties(obj)?
            .into_iter()
            .map(|(id, v)| Ok((self.property(id)?, v)))
            .collect()
    }

    /// Finds an object's property by name: its metadata and current raw value.
    ///
    /// # Errors
    /// [`Error::NotFound`] naming the property and the object when it has none such.
    pub fn find_property<O: ModeObject + core::fmt::Debug>(
        &self,
        obj: O,
        name: &str,
    ) -> Result<(Property, u64)> {
        for (id, v) in self.object_properties(obj)? {
            let p = self.property(id)?;
            if p.name == name {
                return Ok((p, v));
            }
        }
        Err(Error::NotFound {
            what: format!("property {name:?} on {obj:?}"),
        })
    }

    /// `DRM_IOCTL_MODE_GETPROPBLOB`: a blob's bytes. Two ioctls: the kernel copies only
    /// into a buffer of exactly the blob's length, which the first call reports (blobs
    /// are immutable, so the length cannot change in between).
    pub fn blob(&self, id: BlobId) -> Result<Vec<u8>> {
        self.blob_sized(id, 0)
    }

    /// [`Device::blob`] with a guess of the blob's length (say, the length of the same
    /// property's blob on another plane): one ioctl when the guess is right, two otherwise
    /// (a wrong guess copies nothing; the kernel answers the real length). 0: no guess.
    pub fn blob_sized(&self, id: BlobId, guess: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; guess];
        let len = sys_call::mode_getpropblob(self.as_fd(), id.get(), &mut buf)? as usize;
        if len == guess {
            return Ok(buf);
        }
        buf = vec![0u8; len];
        let again = sys_call::mode_getpropblob(self.as_fd(), id.get(), &mut buf)? as usize;
        if again != len {
            return Err(super::resources::grew("DRM_IOCTL_MODE_GETPROPBLOB"));
        }
        Ok(buf)
    }

    /// `DRM_IOCTL_MODE_CREATEPROPBLOB`: a blob owned by this file, destroyed on drop.
    pub fn create_blob(&self, data: &[u8]) -> Result<PropertyBlob<&Device>> {
        PropertyBlob::create(self, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_prop(name: &str, flags: u32) -> sys::drm_mode_get_property {
        let mut a = sys::drm_mode_get_property {
            flags,
            ..Default::default()
        };
        for (d, s) in a.name.iter_mut().zip(name.bytes()) {
            *d = s as core::ffi::c_char;
        }
        a
    }

    fn entry(value: u64, name: &str) -> sys::drm_mode_property_enum {
        let mut e = sys::drm_mode_property_enum {
            value,
            ..Default::default()
        };
        for (d, s) in e.name.iter_mut().zip(name.bytes()) {
            *d = s as core::ffi::c_char;
        }
        e
    }

    fn id() -> PropertyId {
        PropertyId::new(9).unwrap()
    }

    #[test]
    fn every_kind_decodes() {
        let p = decode_property(
            id(),
            &raw_prop("alpha", sys::DRM_MODE_PROP_RANGE),
            &[0, 0xffff],
            &[],
        );
        assert_eq!(
            p.kind,
            PropertyKind::Range {
                min: 0,
                max: 0xffff
            }
        );
        assert_eq!(p.decode(7), PropertyValue::Unsigned(7));
        assert!(p.check(0xffff).is_ok() && p.check(0x10000).is_err());

        let p = decode_property(
            id(),
            &raw_prop(
                "SRC_X",
                sys::DRM_MODE_PROP_SIGNED_RANGE | sys::DRM_MODE_PROP_ATOMIC,
            ),
            &[(-5i64) as u64, 5],
            &[],
        );
        assert_eq!(p.kind, PropertyKind::SignedRange { min: -5, max: 5 });
        assert!(p.atomic);
        assert_eq!(p.decode((-3i64) as u64), PropertyValue::Signed(-3));
        assert!(p.check((-5i64) as u64).is_ok() && p.check((-6i64) as u64).is_err());

        let e = [entry(0, "Overlay"), entry(1, "Primary"), entry(2, "Cursor")];
        let p = decode_property(
            id(),
            &raw_prop(
                "type",
                sys::DRM_MODE_PROP_ENUM | sys::DRM_MODE_PROP_IMMUTABLE,
            ),
            &[0, 1, 2],
            &e,
        );
        assert_eq!(p.name, "type");
        assert!(p.immutable);
        assert_eq!(p.decode(1), PropertyValue::Enum(Some("Primary".into())));
        assert_eq!(p.decode(9), PropertyValue::Enum(None));
        assert!(p.check(1).is_err(), "immutable");

        let e = [entry(0, "rotate-0"), entry(4, "reflect-x")];
        let p = decode_property(
            id(),
            &raw_prop("rotation", sys::DRM_MODE_PROP_BITMASK),
            &[],
            &e,
        );
        assert_eq!(
            p.decode(1 | 16 | 32),
            PropertyValue::Bitmask(vec!["rotate-0".into(), "reflect-x".into(), "bit 5".into()])
        );
        assert!(p.check(1).is_ok() && p.check(2).is_err());

        let p = decode_property(id(), &raw_prop("EDID", sys::DRM_MODE_PROP_BLOB), &[], &[]);
        assert_eq!(p.decode(0), PropertyValue::Blob(None));
        assert_eq!(p.decode(5), PropertyValue::Blob(BlobId::new(5)));

        let p = decode_property(
            id(),
            &raw_prop("CRTC_ID", sys::DRM_MODE_PROP_OBJECT),
            &[u64::from(sys::DRM_MODE_OBJECT_CRTC)],
            &[],
        );
        assert_eq!(
            p.kind,
            PropertyKind::Object {
                object_type: sys::DRM_MODE_OBJECT_CRTC
            }
        );

        // A range without its two values is not trusted.
        let p = decode_property(id(), &raw_prop("bad", sys::DRM_MODE_PROP_RANGE), &[1], &[]);
        assert!(matches!(p.kind, PropertyKind::Unknown { .. }));
    }
}
