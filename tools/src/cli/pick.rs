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
    /// Near this place first, then least used: numa:N, cpus:LIST, gpu:SEL, net:IFACE or
    /// path:FILE (the disk under FILE's file system). With -n 2+, the set nearest each
    /// other. Each choice is explained on stderr (its class and use figures).
    #[arg(long, value_name = "SPEC")]
    near: Option<crate::topo::near::Near>,
    /// Only among these GPUs (GPU specs as for run --gpu).
    #[arg(long = "gpu", value_delimiter = ',')]
    gpus: Vec<GpuSpec>,
    /// bdf: one bus id (or platform device name) per line; env: the vendor variables;
    /// json: the ranking with every figure and its source; cdi: the CDI names of the
    /// chosen GPUs (KIND=<bus id>, as `drmtool cdi generate` names them), one per line,
    /// for `podman run --device`. No format takes a lease: `run --pick` does.
    #[arg(long, default_value = "bdf", value_parser = ["bdf", "env", "json", "cdi"])]
    format: String,
    /// With --format cdi: the kind of the spec (`drmtool cdi generate --kind`).
    #[arg(long, value_name = "VENDOR/CLASS")]
    kind: Option<crate::cdi::CdiKind>,
}

pub(super) fn pick_cmd(a: &PickArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{pick, run};
    let fail = |e: run::RunError| -> ExitCode {
        eprintln!("drmtool: pick: {e}");
        Exit::of_run(&e).into()
    };
    if a.kind.is_some() && a.format != "cdi" {
        return fail(run::RunError::Usage("--kind needs --format cdi".into()));
    }
    let (all, cand) = match run::candidates(&a.gpus) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if a.n == 0 {
        return fail(run::RunError::Usage(
            "-n needs a number of GPUs >= 1".into(),
        ));
    }
    let want = pick::Want {
        driver: a.driver.clone(),
        max_clients: a.max_clients,
        min_free: a.min_free,
        near: a.near.clone(),
    };
    let r = match run::choose(&all, &cand, &want, a.n) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if json || a.format == "json" {
        let code = emit_json(&r, out);
        if r.chosen.len() < a.n {
            return Exit::NoGpu.into();
        }
        return code;
    }
    for c in &r.candidates {
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
    if r.chosen.len() < a.n {
        eprintln!(
            "drmtool: pick: -n {}: only {} eligible GPU(s) of {}",
            a.n,
            r.chosen.len(),
            r.candidates.len()
        );
        return Exit::NoGpu.into();
    }
    if a.near.is_some() {
        for line in run::why_lines(&r) {
            eprintln!("drmtool: pick: {line}");
        }
    }
    let gpus: Vec<&crate::gpu::Gpu> = r.chosen.iter().map(|&i| &all[i]).collect();
    let text: String = if a.format == "env" {
        crate::isolate::env::vendor_env(&gpus, &all)
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    } else if a.format == "cdi" {
        let kind = a.kind.clone().unwrap_or_default();
        crate::cdi::qualified_names(&kind, &all, &r.chosen)
            .iter()
            .map(|n| format!("{n}\n"))
            .collect()
    } else {
        gpus.iter()
            .map(|g| format!("{}\n", g.bus_id.as_ref().unwrap_or(&g.name)))
            .collect()
    };
    emit_text(&text, out)
}
