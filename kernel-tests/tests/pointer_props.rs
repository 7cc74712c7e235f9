//! The user-pointer property contract of `AtomicRequest::set`: the kernel takes the value of
//! a few KMS properties as a user pointer it writes through, and drm-gem refuses a plain
//! set of any of them, knowing them by name (`drm_gem::kms::POINTER_PROPERTIES`). This
//! checks on the running kernel, over every property of every connector (writeback ones
//! included), CRTC and plane of every KMS node the guest has (vkms, virtio-gpu, bochs, qxl),
//! that nothing outside the list looks like a pointer, that the list's entries are what the
//! kernel has, and that a property the kernel will not describe is refused before the
//! kernel is asked to commit it.

use drm_gem::kms::{
    AtomicFlags, AtomicRequest, POINTER_PROPERTIES, Property, PropertyId, PropertyKind,
};
use drm_gem::{ClientCap, Device, Errno, Error, NodeKind};
use kernel_tests::{require_feature, skip};
use std::collections::BTreeMap;

/// Every KMS primary node, opened with every client cap that shows more properties (atomic
/// ones, writeback connectors); its driver name with it.
fn kms_nodes() -> Vec<(String, Device)> {
    kernel_tests::fds_shared();
    let Ok(nodes) = drm_gem::enumerate() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in nodes.iter().filter(|n| n.kind == NodeKind::Primary) {
        let Ok(dev) = Device::open(&n.path) else {
            continue;
        };
        if dev.resources().is_err() {
            continue; // no KMS (vgem)
        }
        let _ = dev.set_client_cap(ClientCap::UniversalPlanes, 1);
        if dev.set_client_cap(ClientCap::Atomic, 1).is_ok() {
            let _ = dev.set_client_cap(ClientCap::WritebackConnectors, 1);
        }
        let name = n.driver.clone().unwrap_or_else(|| "?".into());
        out.push((name, dev));
    }
    out
}

/// Every (object kind, object id, property) of the device.
fn all_properties(dev: &Device) -> Vec<(&'static str, u32, Property)> {
    let res = dev.resources().expect("DRM_IOCTL_MODE_GETRESOURCES");
    let mut ids: Vec<(&'static str, u32, Vec<PropertyId>)> = Vec::new();
    let only_ids = |v: Vec<(PropertyId, u64)>| v.into_iter().map(|(p, _)| p).collect();
    for &c in &res.connectors {
        ids.push((
            "connector",
            c.get(),
            only_ids(dev.object_properties(c).unwrap()),
        ));
    }
    for &c in &res.crtcs {
        ids.push(("crtc", c.get(), only_ids(dev.object_properties(c).unwrap())));
    }
    for p in dev.plane_ids().expect("DRM_IOCTL_MODE_GETPLANERESOURCES") {
        ids.push((
            "plane",
            p.get(),
            only_ids(dev.object_properties(p).unwrap()),
        ));
    }
    let mut out = Vec::new();
    for (kind, obj, props) in ids {
        for id in props {
            let p = dev
                .property(id)
                .unwrap_or_else(|e| panic!("{kind} {obj} property {id:?}: {e}"));
            out.push((kind, obj, p));
        }
    }
    out
}

/// Whether a property looks like one the kernel writes through: an unsigned range (the
/// kind of both known ones, 0 to U64_MAX) whose name ends in `_PTR`.
fn looks_like_pointer(p: &Property) -> bool {
    matches!(p.kind, PropertyKind::Range { .. }) && p.name.ends_with("_PTR")
}

#[test]
fn every_pointer_like_property_is_in_the_list() {
    require_feature!("vkms");
    let nodes = kms_nodes();
    if nodes.is_empty() {
        skip!("no KMS node");
    }
    let mut missing = Vec::new();
    // Where each listed name was found, and as what kind.
    let mut seen: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut total = 0;
    for (driver, dev) in &nodes {
        let props = all_properties(dev);
        total += props.len();
        eprintln!("{driver}: {} properties", props.len());
        for (kind, obj, p) in &props {
            if looks_like_pointer(p) && !POINTER_PROPERTIES.contains(&p.name.as_str()) {
                missing.push(format!("{driver} {kind} {obj}: {} ({:?})", p.name, p.kind));
            }
            if let Some(&n) = POINTER_PROPERTIES.iter().find(|&&n| n == p.name) {
                seen.entry(n)
                    .or_default()
                    .push(format!("{driver} {kind} {obj}: {:?}", p.kind));
                // What the kernel writes through is a u64 address: a full unsigned range.
                assert!(
                    matches!(
                        p.kind,
                        PropertyKind::Range {
                            min: 0,
                            max: u64::MAX
                        }
                    ),
                    "{driver} {kind} {obj}: {} is {:?}, not a 0..=U64_MAX range",
                    p.name,
                    p.kind
                );
            }
        }
    }
    assert!(total > 0, "no properties at all");
    assert!(
        missing.is_empty(),
        "pointer-like properties missing from POINTER_PROPERTIES: {missing:#?}"
    );
    // vkms (always in the guest) has both: OUT_FENCE_PTR on each CRTC and
    // WRITEBACK_OUT_FENCE_PTR on its writeback connector.
    for n in POINTER_PROPERTIES {
        let at = seen.get(n).cloned().unwrap_or_default();
        eprintln!("{n}: {at:?}");
        assert!(
            at.iter().any(|s| s.starts_with("vkms ")),
            "{n} not found on vkms"
        );
    }
    let crtcs = nodes
        .iter()
        .find(|(d, _)| d == "vkms")
        .map_or(0, |(_, d)| d.resources().unwrap().crtcs.len());
    assert!(
        seen["OUT_FENCE_PTR"]
            .iter()
            .filter(|s| s.starts_with("vkms crtc"))
            .count()
            >= crtcs
    );
}

/// A property id that GETPROPERTY refuses cannot be shown not to be a pointer: the commit
/// fails with GETPROPERTY's error, and the kernel is never asked to commit it (the error
/// names `DRM_IOCTL_MODE_GETPROPERTY`, not `DRM_IOCTL_MODE_ATOMIC`).
#[test]
fn a_property_getproperty_refuses_fails_before_the_commit() {
    require_feature!("vkms");
    let Some((_, dev)) = kms_nodes().into_iter().find(|(d, _)| d == "vkms") else {
        skip!("no vkms node");
    };
    let res = dev.resources().unwrap();
    let crtc = res.crtcs[0];
    // Ids that are no property: a CRTC's own id (an object of another type), and one far
    // past every object the driver made.
    for bogus in [crtc.get(), 0x7fff_fff0] {
        let id = PropertyId::new(bogus).unwrap();
        let probe = kernel_tests::unchanged(&dev, "GETPROPERTY of a bogus id", || dev.property(id));
        assert!(
            matches!(probe, Err(Error::Ioctl { name: "DRM_IOCTL_MODE_GETPROPERTY", errno })
                if errno == Errno::NOENT),
            "GETPROPERTY {bogus}: {probe:?}"
        );
        let mut req = AtomicRequest::new();
        req.set(crtc, id, 0x1000);
        for flags in [AtomicFlags::TEST_ONLY, AtomicFlags::empty()] {
            let r = kernel_tests::unchanged(&dev, "commit of a bogus property", || {
                dev.atomic_commit(&req, flags, 0)
            });
            match r {
                Err(Error::Ioctl {
                    name: "DRM_IOCTL_MODE_GETPROPERTY",
                    errno,
                }) => assert_eq!(errno, Errno::NOENT, "{bogus}"),
                other => panic!(
                    "property id {bogus} ({flags:?}): expected GETPROPERTY's ENOENT before the \
                     commit, got {other:?}"
                ),
            }
        }
    }
    // A listed pointer property set by value is refused before the kernel is asked, too.
    let (p, _) = dev.find_property(crtc, "OUT_FENCE_PTR").unwrap();
    let mut req = AtomicRequest::new();
    req.set(crtc, p.id, 0x1000);
    assert!(
        matches!(
            dev.atomic_commit(&req, AtomicFlags::TEST_ONLY, 0),
            Err(Error::InvalidArgument { .. })
        ),
        "a plain set of OUT_FENCE_PTR"
    );
}
