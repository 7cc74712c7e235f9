//! `drmtool pick`: flags to a ranking, the choice rendered.

use super::*;

/// `drmtool pick` arguments.
#[derive(clap::Args, Debug)]
pub(super) struct PickArgs {
    /// How many GPUs.
    #[arg(short = 'n', default_value_t = 1)]
    n: usize,
    /// Only GPUs with at least BYTES free (a GPU whose free memory no source gives is
    /// excluded, and said so).
    #[arg(long, value_name = "BYTES")]
    min_free: Option<u64>,
    /// Only GPUs with at most K clients (open DRM files).
    #[arg(long, value_name = "K")]
    max_clients: Option<usize>,
    /// Only GPUs of this driver.
    #[arg(long)]
    driver: Option<String>,
    /// Only among these GPUs (GPU specs as for run --gpu).
    #[arg(long = "gpu", value_delimiter = ',')]
    gpus: Vec<GpuSpec>,
    /// bdf: one bus id (or platform device name) per line; env: the vendor variables;
    /// json: the ranking with every figure and its source.
    #[arg(long, default_value = "bdf", value_parser = ["bdf", "env", "json"])]
    format: String,
}

pub(super) fn pick_cmd(a: &PickArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{lease, pick, run};
    let fail = |e: run::RunError| -> ExitCode {
        eprintln!("drmtool: pick: {e}");
        Exit::of_run(&e).into()
    };
    let (all, cand) = match run::candidates(&a.gpus) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if a.n == 0 {
        return fail(run::RunError::Usage(
            "-n needs a number of GPUs >= 1".into(),
        ));
    }
    let report = scan::scan(&Options::default()).ok();
    let held = run::held_by_index(&all, &cand, &lease::dir());
    let gs: Vec<&crate::gpu::Gpu> = cand.iter().map(|&i| &all[i]).collect();
    let want = pick::Want {
        driver: a.driver.clone(),
        max_clients: a.max_clients,
        min_free: a.min_free,
    };
    let ranked = pick::rank(&gs, report.as_ref(), &held, &pick::sysfs_free, &want);
    let chosen: Vec<&pick::Candidate> = ranked
        .iter()
        .filter(|c| c.excluded.is_none())
        .take(a.n)
        .collect();
    if json || a.format == "json" {
        #[derive(Serialize)]
        struct Doc<'a> {
            schema_version: u32,
            chosen: Vec<usize>,
            candidates: &'a [pick::Candidate],
        }
        let code = emit_json(
            &Doc {
                schema_version: SCHEMA_VERSION,
                chosen: chosen.iter().map(|c| c.index).collect(),
                candidates: &ranked,
            },
            out,
        );
        if chosen.len() < a.n {
            return Exit::NoGpu.into();
        }
        return code;
    }
    for c in &ranked {
        if c.memory.value.is_none() {
            eprintln!(
                "drmtool: pick: {}: memory held unknown ({})",
                c.name, c.memory.source
            );
        }
        if let Some(e) = &c.excluded {
            eprintln!("drmtool: pick: {}: excluded: {e}", c.name);
        }
    }
    if chosen.len() < a.n {
        eprintln!(
            "drmtool: pick: -n {}: only {} eligible GPU(s) of {}",
            a.n,
            chosen.len(),
            ranked.len()
        );
        return Exit::NoGpu.into();
    }
    let text = if a.format == "env" {
        let gpus: Vec<&crate::gpu::Gpu> = chosen.iter().map(|c| &all[c.index]).collect();
        crate::isolate::env::vendor_env(&gpus, &all)
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect::<String>()
    } else {
        chosen.iter().map(|c| format!("{}\n", c.name)).collect()
    };
    emit_text(&text, out)
}
