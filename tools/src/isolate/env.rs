//! The vendor variables `drmtool run` sets from the ordering, for the stacks that read
//! them instead of (or before) enumerating `/dev/dri`: Mesa's `DRI_PRIME` (the udev
//! `ID_PATH_TAG` of the first chosen PCI GPU) and `MESA_VK_DEVICE_SELECT` (its
//! `vendor:device`), CUDA's `CUDA_VISIBLE_DEVICES` (with `CUDA_DEVICE_ORDER=PCI_BUS_ID`),
//! ROCm's `ROCR_VISIBLE_DEVICES` and Level Zero's `ZE_AFFINITY_MASK` (with
//! `ZE_ENABLE_PCI_ID_DEVICE_ORDER=1`): each the chosen GPUs' positions among that vendor's
//! GPUs in PCI bus order, set wherever the machine has such GPUs (empty when none is
//! chosen, which hides them all). Inside a `drmtool run` job, which can open only its
//! GPUs, the positions count among the chosen ones ([`vendor_env_in_job`]).

use crate::gpu::Gpu;

/// PCI vendor ids.
const NVIDIA: u16 = 0x10de;
const AMD: u16 = 0x1002;
const INTEL: u16 = 0x8086;

/// The variables inside a `drmtool run` job, which sees only `chosen`: the positions count
/// among the chosen GPUs of each vendor in bus order (CUDA numbers the GPUs it can open
/// from 0, as Slurm's local indices under ConstrainDevices do), in selector order.
pub fn vendor_env_in_job(chosen: &[&Gpu]) -> Vec<(String, String)> {
    let mut seen: Vec<Gpu> = chosen.iter().map(|g| (*g).clone()).collect();
    seen.sort_by_key(|g| g.index);
    vendor_env(chosen, &seen)
}

/// The variables for a job given `chosen` (in selector order) out of `all`, where the job
/// sees all of them (`run --env-only`, `pick --format env`).
pub fn vendor_env(chosen: &[&Gpu], all: &[Gpu]) -> Vec<(String, String)> {
    let mut v = Vec::new();
    if let Some(g) = chosen.iter().find(|g| g.bus_id.is_some()) {
        let bus = g.bus_id.as_deref().unwrap_or_default();
        v.push((
            "DRI_PRIME".into(),
            format!("pci-{}", bus.replace([':', '.'], "_")),
        ));
        if let Some((vid, did)) = g.pci_id {
            v.push((
                "MESA_VK_DEVICE_SELECT".into(),
                format!("{vid:04x}:{did:04x}"),
            ));
        }
    }
    for (vendor, var, order) in [
        (
            NVIDIA,
            "CUDA_VISIBLE_DEVICES",
            Some(("CUDA_DEVICE_ORDER", "PCI_BUS_ID")),
        ),
        (AMD, "ROCR_VISIBLE_DEVICES", None),
        (
            INTEL,
            "ZE_AFFINITY_MASK",
            Some(("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1")),
        ),
    ] {
        // That vendor's GPUs in bus order (the ordering is bus order for PCI devices).
        let theirs: Vec<&Gpu> = all
            .iter()
            .filter(|g| g.bus_id.is_some() && g.pci_id.is_some_and(|(vid, _)| vid == vendor))
            .collect();
        if theirs.is_empty() {
            continue;
        }
        let picked: Vec<String> = chosen
            .iter()
            .filter_map(|c| theirs.iter().position(|t| t.index == c.index))
            .map(|i| i.to_string())
            .collect();
        if let Some((k, val)) = order {
            v.push((k.into(), val.into()));
        }
        v.push((var.into(), picked.join(",")));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::order;

    fn gpu(bus: &str, vid: u16) -> Gpu {
        Gpu {
            index: 0,
            bus_id: Some(bus.into()),
            name: bus.into(),
            driver: None,
            pci_id: Some((vid, 0x1234)),
            nodes: Vec::new(),
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        }
    }

    #[test]
    fn vendor_indices_follow_bus_order() {
        let all = order(vec![
            gpu("0000:41:00.0", NVIDIA),
            gpu("0000:01:00.0", NVIDIA),
            gpu("0000:02:00.0", AMD),
            gpu("0000:81:00.0", NVIDIA),
        ]);
        // Chosen: the NVIDIA GPU at 41 (second NVIDIA by bus) and the one at 81 (third).
        let chosen = [&all[2], &all[3]];
        let env = vendor_env(&chosen, &all);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("1,2"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(
            get("ROCR_VISIBLE_DEVICES"),
            Some(""),
            "the AMD GPU is hidden"
        );
        assert_eq!(get("ZE_AFFINITY_MASK"), None, "no Intel GPU here");
        assert_eq!(get("DRI_PRIME"), Some("pci-0000_41_00_0"));
        assert_eq!(get("MESA_VK_DEVICE_SELECT"), Some("10de:1234"));
    }

    /// Inside a job, which sees only its GPUs, CUDA numbers them from 0 in bus order:
    /// chosen 81 then 41 are "1,0"; a vendor with no chosen GPU is absent (nothing to hide).
    #[test]
    fn in_a_job_the_indices_count_among_the_chosen() {
        let all = order(vec![
            gpu("0000:41:00.0", NVIDIA),
            gpu("0000:01:00.0", NVIDIA),
            gpu("0000:02:00.0", AMD),
            gpu("0000:81:00.0", NVIDIA),
        ]);
        let chosen = [&all[3], &all[2]];
        let env = vendor_env_in_job(&chosen);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("1,0"));
        assert_eq!(get("ROCR_VISIBLE_DEVICES"), None);
        assert_eq!(get("DRI_PRIME"), Some("pci-0000_81_00_0"));
    }
}
