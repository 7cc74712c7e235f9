//! `drmtool` as a library, without argv: name GPUs with the one grammar, read who holds
//! their memory, choose and lease one as `drmtool pick` does, and run an isolated job on
//! it as `drmtool run` does. Run as root on a machine with DRM devices (a guest of this
//! project: `kernel-tests/tests/drmtool_library.rs` runs it there):
//!
//! ```text
//! cargo run -p drmtool --example library -- vgem
//! ```

use drmtool::gpu::{self, GpuSpec};
use drmtool::isolate::run::{self, PickRequest, RunRequest};
use drmtool::isolate::{lease, who};
use std::io::Write;

/// Does the whole tour for the GPUs `spec` names, writing what it finds to `out`, with
/// `job` (a command and its arguments) as the isolated job; returns the job's exit status.
///
/// # Errors
/// Whatever step failed, as its typed error: a malformed spec (`gpu::SpecError`), no
/// match (`gpu::SelectError`), a scan, lease or run error.
pub fn tour(
    spec: &str,
    job: &[&str],
    out: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    // One grammar: an index, bus id, driver, node path or name, MAJ:MIN or by-path name.
    let spec: GpuSpec = spec.parse()?;
    let gpus = gpu::gpus()?;
    let chosen = gpu::select(std::slice::from_ref(&spec), &gpus)?;
    // The buffers report (`drmtool buffers --json`), as a value.
    let report = drmtool::scan(&drmtool::Options::default())?;
    for g in &chosen {
        let paths: Vec<String> = g
            .nodes
            .iter()
            .map(|n| n.path.display().to_string())
            .collect();
        let clients = report
            .devices
            .iter()
            .filter(|d| d.nodes.iter().any(|n| paths.contains(&n.path)))
            .map(|d| d.clients)
            .sum::<usize>();
        writeln!(
            out,
            "GPU {} {} ({}): {clients} open DRM files",
            g.index,
            g.bus_id.as_deref().unwrap_or(&g.name),
            g.driver.as_deref().unwrap_or("?")
        )?;
    }
    // Choose one as `drmtool pick` ranks them, and lease it while it is used.
    let cand: Vec<usize> = chosen.iter().map(|g| g.index).collect();
    let leases = run::pick_and_lease(
        &gpus,
        &cand,
        &PickRequest {
            n: 1,
            sharing: lease::Sharing::Exclusive,
            wait: std::time::Duration::from_secs(5),
            want: Default::default(),
        },
    )?;
    let index = leases[0].index;
    writeln!(out, "leased GPU {index} ({})", leases[0].key)?;
    drop(leases);
    // An isolated job on it, as `drmtool run --as-root --gpu INDEX -- JOB` runs one: it
    // sees only that GPU's nodes (its stdout is this process's).
    let req = RunRequest {
        gpus: vec![GpuSpec::Index(index)],
        argv: job.iter().map(Into::into).collect(),
        as_root: true,
        caller: Some(who::caller()),
        ..Default::default()
    };
    let status = run::run(&req, out)?;
    writeln!(out, "the job exited {status}")?;
    Ok(status)
}

fn main() -> std::process::ExitCode {
    let spec = std::env::args().nth(1).unwrap_or_else(|| "0".into());
    match tour(&spec, &["ls", "/dev/dri"], &mut std::io::stdout()) {
        Ok(status) => std::process::ExitCode::from(status),
        Err(e) => {
            eprintln!("library: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
