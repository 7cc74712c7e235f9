//! De-duplication of DRM open files shared between fds: by `drm-client-id` when the driver
//! prints one, else by `kcmp(KCMP_FILE)` in a list kept sorted in the kernel's order.

use super::devices::Layout;
use super::nodes::Nodes;
use super::procfs::RawProcess;
use super::report::client_report;
use super::{Access, ClientReport, FdRef, ScanStats, Skip, errno_name};
use crate::sys_call;
use rustc_hash::FxHashMap as HashMap;
use rustix::io::Errno;
use std::cmp::Ordering;

/// Where an fd's open file is among the clients sorted by kcmp.
pub(super) enum Place {
    /// The same open file as this client.
    Found(usize),
    /// A new open file; keep the list sorted by inserting its client here.
    Insert(usize),
    /// The fd was closed meanwhile: a client of its own, outside the sorted list.
    Closed,
}

/// Binary search of `sorted` (client indices, ascending in kcmp's order of their
/// representative fds `reps`) for the open file behind `at`. A representative whose fd was
/// closed meanwhile leaves the list (its client stays), and the search restarts.
///
/// # Errors
/// A kcmp errno other than `EBADF`/`ESRCH` (`ENOSYS`, `EPERM`).
pub(super) fn locate_file(
    reps: &[FdRef],
    sorted: &mut Vec<usize>,
    at: FdRef,
) -> Result<Place, Errno> {
    'search: loop {
        let (mut lo, mut hi) = (0, sorted.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let r = reps[sorted[mid]];
            match sys_call::compare_files(r.pid, r.fd, at.pid, at.fd) {
                Ok(Ordering::Equal) => return Ok(Place::Found(sorted[mid])),
                Ok(Ordering::Less) => lo = mid + 1,
                Ok(Ordering::Greater) => hi = mid,
                // Closed or exited meanwhile: which of the two?
                Err(Errno::BADF | Errno::SRCH) => {
                    if sys_call::compare_files(at.pid, at.fd, at.pid, at.fd).is_err() {
                        return Ok(Place::Closed);
                    }
                    sorted.remove(mid);
                    continue 'search;
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(Place::Insert(lo));
    }
}

/// De-duplicates the DRM open files of `procs` into clients, setting each fd's `client`;
/// a kcmp failure (or `--skip kcmp`) is recorded in `stats` and `warnings`.
pub(super) fn dedupe_clients(
    procs: &mut [RawProcess],
    nodes: &Nodes,
    layout: &Layout,
    skip: Skip,
    stats: &mut ScanStats,
    warnings: &mut Vec<String>,
) -> Vec<ClientReport> {
    // De-duplicate DRM open files: drm-client-id when printed, else kcmp. Both are looked
    // up, not compared against every client: by id in a map, by kcmp in a list per device
    // kept sorted in the kernel's order of open files (a binary search), so the pass is
    // O(n log n) in the fds, not O(n^2).
    let drm_fds: usize = procs.iter().map(|p| p.drm.len()).sum();
    let mut clients: Vec<ClientReport> = Vec::with_capacity(drm_fds);
    let mut reps: Vec<FdRef> = Vec::with_capacity(drm_fds); // one holder per client, for kcmp
    let mut by_id: HashMap<(usize, u64), usize> = HashMap::default();
    let mut by_file: Vec<Vec<usize>> = vec![Vec::new(); layout.parents.len().max(1)];
    let mut kcmp_failed: Option<String> =
        skip.kcmp.then(|| "kcmp skipped (--skip kcmp)".to_string());
    for p in procs {
        for d in &mut p.drm {
            let device = layout.node_device[d.node];
            let client_id = d.info.as_ref().and_then(|i| i.client_id);
            let mut found = None;
            let mut slot = None;
            let mut how = "none";
            if let Some(id) = client_id {
                found = by_id.get(&(device, id)).copied();
                how = "drm-client-id";
            } else if kcmp_failed.is_none() {
                match locate_file(&reps, &mut by_file[device], d.at) {
                    Ok(Place::Found(i)) => found = Some(i),
                    Ok(Place::Insert(at)) => slot = Some(at),
                    Ok(Place::Closed) => {}
                    Err(e) => {
                        kcmp_failed =
                            Some(format!("kcmp(KCMP_FILE) failed: {} ({})", e, errno_name(e)));
                    }
                }
                how = if kcmp_failed.is_none() {
                    "kcmp"
                } else {
                    "none"
                };
            }
            let idx = match found {
                Some(i) => {
                    clients[i].holders.push(d.at);
                    if clients[i].dedupe == "none" {
                        clients[i].dedupe = how;
                    }
                    i
                }
                None => {
                    let index = clients.len();
                    let info = d.info.take();
                    let node = &nodes.list[d.node].path;
                    clients.push(client_report(index, device, node, d.at, info, how));
                    reps.push(d.at);
                    if let Some(id) = clients[index].client_id {
                        by_id.insert((device, id), index);
                    }
                    if let Some(at) = slot {
                        by_file[device].insert(at, index);
                    }
                    index
                }
            };
            d.client = idx;
        }
    }
    if let Some(why) = &kcmp_failed {
        stats.kcmp = Access {
            readable: false,
            why: Some(why.clone()),
        };
        warnings.push(format!(
            "{why}: DRM fds without drm-client-id are counted as separate clients, \
             so an open file shared between fds may be counted more than once"
        ));
    }
    clients
}
