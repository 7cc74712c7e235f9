//! A job's GPU memory limits (`drmtool run --mem-max/--mem-low/--mem-min`): resolved
//! against the kernel's dmem regions and the job's GPUs ([`crate::dmem::plan`]), and the
//! controller turned on, with the protection the job asks for, along the job cgroups'
//! parent. [`super::run`] writes the job's own values with [`crate::dmem::apply`].

use super::run::RunError;
use crate::gpu::Gpu;
use std::path::Path;

/// The job's GPU memory limits, resolved against the kernel's regions before anything is
/// set up (fails closed: no dmem, a GPU without a region), and its `--bind` binding (fails
/// closed for a GPU not on PCI).
pub(crate) fn limits_of(
    mem: &[crate::dmem::LimitRequest],
    bind: bool,
    chosen: &[&Gpu],
) -> Result<(Vec<crate::dmem::Setting>, Option<super::bind::Binding>), RunError> {
    let mem = plan(mem, chosen)?;
    let bind = bind
        .then(|| super::bind::Binding::of_gpus(chosen))
        .transpose()?;
    Ok((mem, bind))
}

/// The job's GPU memory limits against the kernel's dmem regions (none asked: none).
pub(crate) fn plan(
    reqs: &[crate::dmem::LimitRequest],
    chosen: &[&Gpu],
) -> Result<Vec<crate::dmem::Setting>, RunError> {
    if reqs.is_empty() {
        return Ok(Vec::new());
    }
    let cap = crate::dmem::Capacity::read(&crate::dmem::root())?;
    let refs: Vec<crate::dmem::GpuRef<'_>> = chosen
        .iter()
        .map(|g| crate::dmem::GpuRef {
            device: &g.name,
            driver: g.driver.as_deref().unwrap_or("no driver"),
        })
        .collect();
    Ok(crate::dmem::plan(reqs, cap.as_ref(), &refs)?)
}

/// Turns the dmem controller on along the job cgroups' parent `rel`: in the root's and
/// every directory's `cgroup.subtree_control` down to the parent (each opened without
/// following links; [`super::anchor::open_parent`] has checked they are root's alone).
///
/// Protection is hierarchical: a job's `dmem.low`/`dmem.min` count only as far as every
/// ancestor below the root protects as much. So where the job asks for protection on a
/// region, each directory of `rel` gets `max` there, and the job's own value decides its
/// share (the kernel distributes an ancestor's protection by its children's).
pub(crate) fn enable_along(rel: &Path, mem: &[crate::dmem::Setting]) -> Result<(), RunError> {
    use crate::dmem::{Knob, Setting, Value};
    let protect: Vec<Setting> = mem
        .iter()
        .filter(|s| s.knob != Knob::Max)
        .map(|s| Setting {
            value: Value::Max,
            ..s.clone()
        })
        .collect();
    super::anchor::walk_down(rel, |fd, path, root| -> Result<(), RunError> {
        if !root {
            crate::dmem::apply(fd, path, &protect)?;
        }
        crate::dmem::enable_for_children(fd, path)?;
        Ok(())
    })
}
