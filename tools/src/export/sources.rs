//! The families that come from beyond the scan's report: dma-bufs no process holds
//! (debugfs `dma_buf/bufinfo`), GPU leases (`/proc/locks` and the lease directory), and the
//! exporter's own capabilities.

use super::bufinfo::BufInfo;
use super::privilege::{Privileges, SCAN_NEEDS, scan_missing};
use crate::gpu::Gpu;
use crate::scan::Report;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, BTreeSet};

type Labels = Vec<(String, String)>;

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `drm_dmabuf_unattributed_bytes{exporter}`: the bytes of the dma-bufs the kernel's
/// `bufinfo` lists that no process of `report` holds by an fd or a mapping (matched by
/// inode), per exporter; a series for every exporter the table names (0: all held). None
/// when the table could not be read, does not add up to its own total (forged or cut), or
/// has no inode column, or when the scan saw only some processes (`--pid`).
pub fn unattributed(reg: &mut Registry, info: Option<&BufInfo>, report: &Report, all: bool) {
    let Some(info) = info else { return };
    if !all || !info.consistent() || info.objects.iter().any(|o| o.inode.is_none()) {
        return;
    }
    let held: BTreeSet<u64> = report.dmabufs.iter().map(|b| b.inode).collect();
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &info.objects {
        let e = sums.entry(o.exporter.as_str()).or_default();
        if !o.inode.is_some_and(|i| held.contains(&i)) {
            *e = e.saturating_add(o.size);
        }
    }
    let fam = Family::<Labels, Gauge>::default();
    for (exporter, v) in sums {
        let l = vec![
            ("exporter".to_string(), exporter.to_string()),
            ("source".to_string(), "debugfs-dma_buf".to_string()),
        ];
        fam.get_or_create(&l).set(gauge(v));
    }
    reg.register_with_unit(
        "drm_dmabuf_unattributed",
        "Bytes of dma-bufs the kernel has (debugfs dma_buf/bufinfo) that no process holds \
         by an fd or a mapping: held by a DRM file's GEM object (an exported buffer whose fd \
         was closed, an import), a framebuffer, another kernel user, or leaked",
        Unit::Bytes,
        fam,
    );
}

/// The most of `/proc/locks` read for the lease families (a longer table gives none).
pub const LOCKS_MAX: usize = 4 << 20;

/// `drm_lease_holders{device, mode}`: for every GPU of the ordering, how many processes
/// hold an exclusive and a shared lease on it (`drmtool leases`'s rows, counted). None when
/// `/proc/locks` cannot be read whole.
pub fn leases(reg: &mut Registry, gpus: &[Gpu]) {
    if gpus.is_empty() {
        return;
    }
    let Ok(locks) =
        crate::sysfs::read_bounded_bytes(std::path::Path::new("/proc/locks"), LOCKS_MAX)
    else {
        return;
    };
    if locks.len() >= LOCKS_MAX {
        return;
    }
    let locks = String::from_utf8_lossy(&locks);
    let holders = crate::isolate::lease::holders(&crate::isolate::lease::dir(), &locks);
    let fam = Family::<Labels, Gauge>::default();
    for g in gpus {
        let key = crate::isolate::lease::key(g);
        let device = g.bus_id.clone().unwrap_or_else(|| g.name.clone());
        for mode in ["exclusive", "shared"] {
            let n = holders
                .iter()
                .filter(|h| h.device == key && h.mode == mode)
                .count();
            let l = vec![
                ("device".to_string(), device.clone()),
                ("mode".to_string(), mode.to_string()),
            ];
            fam.get_or_create(&l).set(gauge(n as u64));
        }
    }
    reg.register(
        "drm_lease_holders",
        "Processes holding a lease on the GPU (drmtool run, pick --lease), by mode",
        fam,
    );
}

/// `drmtool_export_capability_missing{capability}`: 1 for each capability the scan needs
/// that the exporter's effective set lacks (figures of other users' processes are missing),
/// 0 for those it has. None when `/proc/self/status` could not be read.
pub fn capabilities(reg: &mut Registry, p: Option<&Privileges>) {
    let Some(p) = p else { return };
    let missing = scan_missing(p);
    let fam = Family::<Labels, Gauge>::default();
    for (c, _) in SCAN_NEEDS {
        let l = vec![("capability".to_string(), c.name())];
        fam.get_or_create(&l)
            .set(i64::from(missing.iter().any(|(m, _)| *m == c)));
    }
    reg.register(
        "drmtool_export_capability_missing",
        "1 when the exporter lacks a capability the scan needs to see other users' processes \
         (their GPU memory is then not counted)",
        fam,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::privilege::{CapSet, Capability};

    fn text(reg: &Registry) -> String {
        super::super::encode(reg, super::super::Format::Text)
    }

    #[test]
    fn unattributed_is_what_no_process_holds_by_exporter() {
        let info = super::super::bufinfo::parse(
            b"size\tflags\tmode\tcount\texp_name\tino\tname\n\
              00004096\t0\t0\t1\tdrm\t00000002\tn\n\
              00016384\t0\t0\t1\tdrm\t00000001\tn\n\
              00008192\t0\t0\t1\tudmabuf\t00000007\tn\n\
              Total 3 objects, 28672 bytes\n",
        );
        let mut report = Report::empty();
        for inode in [1, 7] {
            report
                .dmabufs
                .push(crate::scan::DmaBufReport::unread(inode, "not read"));
        }
        let mut reg = Registry::default();
        unattributed(&mut reg, Some(&info), &report, true);
        let t = text(&reg);
        assert!(
            t.contains(
                "drm_dmabuf_unattributed_bytes{exporter=\"drm\",source=\"debugfs-dma_buf\"} 4096"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "drm_dmabuf_unattributed_bytes{exporter=\"udmabuf\",source=\"debugfs-dma_buf\"} 0"
            ),
            "{t}"
        );
        // A scan of some processes only (--pid), or no table: no series.
        for (info, all) in [(Some(&info), false), (None, true)] {
            let mut reg = Registry::default();
            unattributed(&mut reg, info, &report, all);
            assert!(!text(&reg).contains("drm_dmabuf_unattributed"));
        }
    }

    #[test]
    fn missing_capabilities_are_ones() {
        let s = CapSet::of(&[Capability::DAC_READ_SEARCH]);
        let p = Privileges {
            uids: [999; 4],
            inheritable: s,
            permitted: s,
            effective: s,
            bounding: s,
            ambient: s,
        };
        let mut reg = Registry::default();
        capabilities(&mut reg, Some(&p));
        let t = text(&reg);
        assert!(
            t.contains("drmtool_export_capability_missing{capability=\"CAP_SYS_PTRACE\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("drmtool_export_capability_missing{capability=\"CAP_DAC_READ_SEARCH\"} 0"),
            "{t}"
        );
    }
}
