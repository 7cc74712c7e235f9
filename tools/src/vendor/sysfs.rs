//! The vendor nodes sysfs describes: AMD's `/dev/kfd` and the accel subsystem's
//! `/dev/accel/accelN`.

use super::{
    MAX_ENTRIES, MAX_MINOR, Reason, VendorNodeKind as Kind, VendorReport, VendorRoots, list_dir,
    numbered, parse_dev, read_required,
};
use crate::sysfs::bus_id_of;
use std::path::Path;

/// `/dev/kfd`, shared, while `/sys/class/kfd/kfd` exists.
pub(super) fn kfd(roots: &VendorRoots, out: &mut VendorReport) {
    let dir = roots.sys_root.join("class/kfd/kfd");
    if !dir.exists() {
        return;
    }
    let source = dir.join("dev");
    match read_required(&source).and_then(|t| parse_dev(&t).map_err(Reason::Malformed)) {
        Ok(dev) => out.node(roots, "kfd", Kind::Kfd, dev),
        Err(r) => out.refuse(Kind::Kfd, &source, None, r),
    }
}

/// `/dev/accel/accelN` for each `/sys/class/accel/accelN`, owned by the device its
/// `device` link leads to.
pub(super) fn accel(roots: &VendorRoots, out: &mut VendorReport) {
    let dir = roots.sys_root.join("class/accel");
    let entries = match list_dir(&dir, MAX_ENTRIES) {
        Ok(Some(v)) => v,
        Ok(None) => return,
        Err(r) => return out.refuse(Kind::Accel, &dir, None, r),
    };
    for e in entries {
        let name = match e.plain_name() {
            Ok(n) if numbered(n, "accel", MAX_MINOR).is_some() => n.to_string(),
            Ok(n) => {
                out.refuse(Kind::Accel, &dir, None, Reason::UnexpectedName(n.into()));
                continue;
            }
            Err(r) => {
                out.refuse(Kind::Accel, &dir, None, r);
                continue;
            }
        };
        let class = dir.join(&name);
        let Some(owner) = owner(&class.join("device")) else {
            out.refuse(Kind::Accel, &class, None, Reason::NoDevice);
            continue;
        };
        let source = class.join("dev");
        match read_required(&source).and_then(|t| parse_dev(&t).map_err(Reason::Malformed)) {
            Ok(dev) => {
                let rel = format!("accel/{name}");
                out.node_of(roots, &rel, Kind::Accel, dev, Some(owner), None);
            }
            Err(r) => out.refuse(Kind::Accel, &source, Some(&owner), r),
        }
    }
}

/// The PCI bus id above the device `link` leads to, or, off PCI, that device's name (as
/// [`crate::gpu::Gpu::name`]); `None` without a link or a plain name.
fn owner(link: &Path) -> Option<String> {
    let device = std::fs::canonicalize(link).ok()?;
    bus_id_of(&device).or_else(|| {
        device
            .file_name()?
            .to_str()
            .filter(|s| s.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .map(str::to_string)
    })
}
