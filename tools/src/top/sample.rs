//! [`Sampler`]: what one refresh of `drmtool top` reads of the machine. One scan
//! ([`crate::scan::scan`]), the lease directory and `/proc/locks` once, each scanned
//! process's command line (at most [`super::CMDLINE_MAX`] bytes), and each new uid's login
//! name once per session.

use super::Sample;
use crate::gpu::Gpu;
use crate::scan::{self, Options, ScanError};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Instant;

/// Reads samples of the machine, or of a chosen set of its GPUs.
#[derive(Debug)]
pub struct Sampler {
    opts: Options,
    gpus: Vec<Gpu>,
    chosen: Option<Vec<usize>>,
    start: Instant,
    users: BTreeMap<u32, String>,
}

impl Sampler {
    /// A sampler scanning with `opts` over the GPU ordering `gpus`; `chosen`: only those
    /// GPUs' indices (their devices, clients and processes).
    pub fn new(opts: Options, gpus: Vec<Gpu>, chosen: Option<Vec<usize>>) -> Sampler {
        Sampler {
            opts,
            gpus,
            chosen,
            start: Instant::now(),
            users: BTreeMap::new(),
        }
    }

    /// One sample now.
    pub fn sample(&mut self) -> Result<Sample, ScanError> {
        let mut report = scan::scan(&self.opts)?;
        let at = self.start.elapsed();
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let gpus: Vec<Gpu> = match &self.chosen {
            Some(c) => self
                .gpus
                .iter()
                .filter(|g| c.contains(&g.index))
                .cloned()
                .collect(),
            None => self.gpus.clone(),
        };
        if self.chosen.is_some() {
            let refs: Vec<&Gpu> = gpus.iter().collect();
            if !report.keep_gpus(&refs) {
                report.clients.clear();
                report.processes.clear();
                report.devices.clear();
            }
        }
        let cand: Vec<usize> = gpus.iter().map(|g| g.index).collect();
        let leases =
            crate::isolate::choose::held_by_index(&self.gpus, &cand, &crate::isolate::lease::dir());
        let mut cmdlines = BTreeMap::new();
        for p in &report.processes {
            if let Some(c) = read_cmdline(&self.opts.proc_root, p.pid) {
                cmdlines.insert(p.pid, c);
            }
            if let Some(uid) = p.uid
                && !self.users.contains_key(&uid)
            {
                let name = crate::sys_call::passwd_lookup(None, uid)
                    .ok()
                    .flatten()
                    .map(|pw| {
                        use std::os::unix::ffi::OsStrExt;
                        crate::untrusted::Untrusted::new(pw.name.as_bytes()).escaped()
                    })
                    .unwrap_or_else(|| uid.to_string());
                self.users.insert(uid, name);
            }
        }
        Ok(Sample {
            report,
            at,
            unix_ms,
            gpus,
            leases,
            cmdlines,
            users: self.users.clone(),
        })
    }
}

/// `/proc/<pid>/cmdline`, at most [`super::CMDLINE_MAX`] bytes; `None` when unreadable.
fn read_cmdline(proc_root: &std::path::Path, pid: u32) -> Option<Vec<u8>> {
    let f = std::fs::File::open(proc_root.join(pid.to_string()).join("cmdline")).ok()?;
    let mut out = Vec::new();
    f.take(super::CMDLINE_MAX as u64)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// The most processes [`descendants`] lists.
pub const TREE_MAX: usize = 4096;

/// `pid` and its descendants, from each task's `/proc/<pid>/task/<tid>/children` (at most
/// [`TREE_MAX`] processes; a pid that has gone has none).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < TREE_MAX {
        let p = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(f) = std::fs::File::open(t.path().join("children")) else {
                continue;
            };
            let mut text = Vec::new();
            if f.take(64 << 10).read_to_end(&mut text).is_err() {
                continue;
            }
            for c in String::from_utf8_lossy(&text).split_ascii_whitespace() {
                if let Ok(c) = c.parse::<u32>()
                    && !out.contains(&c)
                    && out.len() < TREE_MAX
                {
                    out.push(c);
                }
            }
        }
    }
    out
}
