//! KMS queries in real guests: resources, connectors, encoders, CRTCs, planes, properties
//! of every kind, blobs, IN_FORMATS and EDID, and the whole-device snapshot, on vkms,
//! virtio-gpu, bochs and qxl; plus bad input to the property calls.

use drm_gem::kms::{
    BlobId, ConnectorId, ConnectorStatus, CrtcId, PlaneId, PropertyId, PropertyKind, PropertyValue,
    Snapshot, format_name,
};
use drm_gem::{Device, Errno, Error, NodeKind};
use ioctl_sys::drm as sys;
use kernel_tests::{open_fds, require_driver, require_feature, skip};

fn lib_errno<T: core::fmt::Debug>(r: drm_gem::Result<T>, name: &str) -> Errno {
    match r {
        Err(Error::Ioctl { name: n, errno }) if n == name => errno,
        other => panic!("expected {name} to fail, got {other:?}"),
    }
}

/// The checks every KMS driver must pass.
fn snapshot_is_consistent(dev: &Device) -> Snapshot {
    let fds = open_fds();
    let s = Snapshot::take(dev).expect("snapshot");
    assert_eq!(open_fds(), fds, "fds leaked by the snapshot");
    assert_eq!(dev.live_handles(), 0, "GEM handles leaked by the snapshot");
    assert!(!s.resources.crtcs.is_empty(), "no CRTCs");
    assert!(!s.resources.connectors.is_empty(), "no connectors");
    assert_eq!(s.connectors.len(), s.resources.connectors.len());
    assert_eq!(s.crtcs.len(), s.resources.crtcs.len());
    assert!(
        s.client_caps.contains(&"DRM_CLIENT_CAP_UNIVERSAL_PLANES"),
        "{:?}",
        s.client_caps
    );
    // With universal planes every CRTC has a primary plane that can feed it.
    for (i, _) in s.resources.crtcs.iter().enumerate() {
        assert!(
            s.planes
                .iter()
                .any(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary)
                    && p.plane.possible_crtcs & (1 << i) != 0),
            "CRTC {i} has no primary plane"
        );
    }
    for p in &s.planes {
        assert!(
            !p.plane.formats.is_empty(),
            "plane {} has no formats",
            p.plane.id
        );
        assert!(p.kind.is_some(), "{:?}", p.kind);
        if let Some(f) = &p.in_formats {
            // IN_FORMATS lists the same formats as GETPLANE, each with at least one modifier.
            let mut a: Vec<u32> = f.iter().map(|x| x.format).collect();
            let mut b = p.plane.formats.clone();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "plane {} IN_FORMATS vs GETPLANE", p.plane.id);
            assert!(f.iter().all(|x| !x.modifiers.is_empty()));
        }
    }
    // Every property decodes, and ranges hold their values.
    let all = s
        .connectors
        .iter()
        .flat_map(|c| &c.properties)
        .chain(s.crtcs.iter().flat_map(|c| &c.properties))
        .chain(s.planes.iter().flat_map(|p| &p.properties));
    for p in all {
        if let PropertyKind::Range { min, max } = p.property.kind {
            assert!(
                (min..=max).contains(&p.raw),
                "{} = {}",
                p.property.name,
                p.raw
            );
        }
        if let PropertyKind::Enum { .. } = p.property.kind {
            assert!(
                matches!(&p.value, PropertyValue::Enum(Some(_))),
                "{} = {} names no entry",
                p.property.name,
                p.raw
            );
        }
    }
    for c in &s.connectors {
        let name = c.connector.name();
        assert!(!name.starts_with("Unknown"), "{name}");
        if c.connector.status == ConnectorStatus::Connected {
            assert!(
                !c.connector.modes.is_empty(),
                "{name} connected without modes"
            );
        }
    }
    s
}

#[test]
fn vkms_snapshot() {
    let dev = require_driver!("vkms", &["vkms"]);
    let s = snapshot_is_consistent(&dev);
    // Connector type ids are numbered machine-wide per type, so vkms's virtual connector
    // is `Virtual-N` for some N.
    let virt = s
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_VIRTUAL)
        .expect("vkms has a virtual connector");
    assert!(virt.connector.name().starts_with("Virtual-"));
    // The snapshot never probes: until someone does, vkms's status may still be unknown.
    assert!(
        matches!(
            virt.connector.status,
            ConnectorStatus::Connected | ConnectorStatus::Unknown
        ),
        "{:?}",
        virt.connector.status
    );
    // Asked to, the kernel probes (as master): connected, with vkms's modes.
    dev.set_master().expect("SET_MASTER");
    let probed = dev.probe_connector(virt.connector.id).expect("probe");
    assert_eq!(probed.status, ConnectorStatus::Connected);
    assert!(
        probed.modes.iter().any(|m| m.size() == (1024, 768)),
        "vkms offers 1024x768"
    );
    assert!(probed.modes.iter().any(|m| m.is_preferred()));
    // And a plain query now reports what the probe found, without probing again.
    assert_eq!(
        dev.connector(virt.connector.id).unwrap().modes,
        probed.modes
    );
    // The writeback connector is visible with the cap.
    assert!(
        s.client_caps
            .contains(&"DRM_CLIENT_CAP_WRITEBACK_CONNECTORS")
    );
    assert!(
        s.connectors
            .iter()
            .any(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_WRITEBACK),
        "no writeback connector"
    );
    let primary = s
        .planes
        .iter()
        .find(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary))
        .unwrap();
    assert!(primary.plane.formats.contains(&sys::DRM_FORMAT_XRGB8888));
    assert_eq!(format_name(sys::DRM_FORMAT_XRGB8888), "XR24");
    // IN_FORMATS exists exactly where the device takes modifiers (not 5.10's vkms).
    let modifiers = dev.raw_cap(sys::DRM_CAP_ADDFB2_MODIFIERS).unwrap_or(0) != 0;
    assert_eq!(primary.in_formats.is_some(), modifiers);
    if let Some(f) = &primary.in_formats {
        let x = f
            .iter()
            .find(|x| x.format == sys::DRM_FORMAT_XRGB8888)
            .unwrap();
        assert!(x.modifiers.contains(&0), "XRGB8888 with LINEAR");
    }
    assert!(
        s.planes
            .iter()
            .any(|p| p.kind == Some(drm_gem::kms::PlaneType::Cursor))
    );
}

#[test]
fn virtio_gpu_snapshot_with_edid() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let s = snapshot_is_consistent(&dev);
    let c = &s.connectors[0];
    assert!(
        c.connector.name().starts_with("Virtual-"),
        "{}",
        c.connector.name()
    );
    let edid = c.edid.as_ref().expect("QEMU's virtio-gpu gives an EDID");
    assert!(edid.checksum_ok);
    assert_eq!(edid.manufacturer, "RHT", "QEMU's PNP id");
    assert!(edid.preferred.is_some());
}

#[test]
fn bochs_snapshot() {
    let dev = require_driver!("bochs", &["bochs", "bochs-drm"]);
    let s = snapshot_is_consistent(&dev);
    assert!(!s.connectors.is_empty());
}

#[test]
fn qxl_snapshot() {
    let dev = require_driver!("qxl", &["qxl"]);
    let s = snapshot_is_consistent(&dev);
    assert_eq!(s.resources.crtcs.len(), 4, "QEMU's qxl has 4 heads");
}

#[test]
fn snapshot_serialises() {
    let dev = require_driver!("vkms", &["vkms"]);
    let s = Snapshot::take(&dev).unwrap();
    let json = serde_json::to_value(&s).unwrap();
    assert!(
        json["resources"]["crtcs"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    assert!(json["planes"][0]["properties"].as_array().is_some());
    let text = json.to_string();
    assert!(text.contains("\"Virtual-1\"") || text.contains("\"name\":\"type\""));
}

#[test]
fn find_property_by_name_and_blobs() {
    let dev = require_driver!("vkms", &["vkms"]);
    dev.set_client_cap(drm_gem::ClientCap::UniversalPlanes, 1)
        .unwrap();
    dev.set_client_cap(drm_gem::ClientCap::Atomic, 1).unwrap();
    let plane = dev.plane_ids().unwrap()[0];
    let (p, v) = dev.find_property(plane, "type").unwrap();
    assert!(p.immutable);
    assert!(matches!(p.decode(v), PropertyValue::Enum(Some(_))));
    let crtc = dev.resources().unwrap().crtcs[0];
    let (p, _) = dev.find_property(crtc, "MODE_ID").unwrap();
    assert_eq!(p.kind, PropertyKind::Blob);
    let e = dev.find_property(crtc, "NO_SUCH_PROPERTY").unwrap_err();
    assert!(e.to_string().contains("NO_SUCH_PROPERTY"), "{e}");
    // A blob round trip, destroyed on drop.
    let fds = open_fds();
    let id;
    {
        let blob = dev.create_blob(b"drm-toolkit blob").unwrap();
        id = blob.id();
        assert_eq!(dev.blob(id).unwrap(), b"drm-toolkit blob");
        // A length guess changes the number of ioctls, never the bytes: right (16), short,
        // long, none.
        for guess in [16, 1, 15, 17, 4096, 0] {
            assert_eq!(
                dev.blob_sized(id, guess).unwrap(),
                b"drm-toolkit blob",
                "guess {guess}"
            );
        }
    }
    assert_eq!(
        lib_errno(dev.blob_sized(id, 16), "DRM_IOCTL_MODE_GETPROPBLOB"),
        Errno::NOENT
    );
    assert_eq!(
        lib_errno(dev.blob(id), "DRM_IOCTL_MODE_GETPROPBLOB"),
        Errno::NOENT
    );
    assert_eq!(open_fds(), fds);
    assert!(matches!(
        dev.create_blob(&[]),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn property_calls_with_bad_ids() {
    let dev = require_driver!("vkms", &["vkms"]);
    let res = dev.resources().unwrap();
    let fds = open_fds();
    let bogus_conn = ConnectorId::new(0x7fff_fff0).unwrap();
    assert_eq!(
        lib_errno(dev.connector(bogus_conn), "DRM_IOCTL_MODE_GETCONNECTOR"),
        Errno::NOENT
    );
    assert_eq!(
        lib_errno(
            dev.crtc(CrtcId::new(0x7fff_fff0).unwrap()),
            "DRM_IOCTL_MODE_GETCRTC"
        ),
        Errno::NOENT
    );
    assert_eq!(
        lib_errno(
            dev.plane(PlaneId::new(0x7fff_fff0).unwrap()),
            "DRM_IOCTL_MODE_GETPLANE"
        ),
        Errno::NOENT
    );
    assert_eq!(
        lib_errno(
            dev.property(PropertyId::new(0x7fff_fff0).unwrap()),
            "DRM_IOCTL_MODE_GETPROPERTY"
        ),
        Errno::NOENT
    );
    // A CRTC's id asked for as a connector: the object type does not match.
    let crtc_as_conn = ConnectorId::new(res.crtcs[0].get()).unwrap();
    assert_eq!(
        lib_errno(
            dev.object_properties(crtc_as_conn),
            "DRM_IOCTL_MODE_OBJ_GETPROPERTIES"
        ),
        Errno::NOENT
    );
    assert_eq!(
        lib_errno(
            dev.blob(BlobId::new(0x7fff_fff0).unwrap()),
            "DRM_IOCTL_MODE_GETPROPBLOB"
        ),
        Errno::NOENT
    );
    assert_eq!(open_fds(), fds);
}

#[test]
fn kms_on_a_driver_without_it() {
    require_feature!("vgem");
    kernel_tests::fds_shared();
    let Ok(dev) = Device::open_driver("vgem", Some(NodeKind::Primary)) else {
        skip!("no vgem primary node");
    };
    assert_eq!(
        lib_errno(
            kernel_tests::unchanged(&dev, "GETRESOURCES on vgem", || dev.resources()),
            "DRM_IOCTL_MODE_GETRESOURCES"
        ),
        Errno::OPNOTSUPP
    );
    let Ok(render) = Device::open_driver("vgem", Some(NodeKind::Render)) else {
        skip!("no vgem render node");
    };
    assert_eq!(
        lib_errno(
            kernel_tests::unchanged(&render, "GETRESOURCES on a render node", || {
                render.resources()
            }),
            "DRM_IOCTL_MODE_GETRESOURCES"
        ),
        Errno::ACCESS
    );
}
