//! `drmtool place REQUESTS.json`: the file read, [`crate::isolate::placing::place`] on this
//! machine, the plan rendered.

use super::*;

/// `drmtool place` arguments.
#[derive(clap::Args, Debug)]
pub(super) struct PlaceArgs {
    /// The requests (`tools/schema/place-requests.schema.json`): `{"requests": [{"name":
    /// "a", "count": 2, "near": "path:/data", "exclusive": true}, ...]}`.
    file: std::path::PathBuf,
    /// Shared jobs per GPU at most (lease holders count among them).
    #[arg(long, value_name = "K", default_value_t = 4)]
    slots: u32,
    /// Only among these GPUs (GPU specs as for run --gpu).
    #[arg(long = "gpu", value_delimiter = ',')]
    gpus: Vec<GpuSpec>,
}

pub(super) fn place_cmd(a: &PlaceArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::placing;
    let fail = |e: crate::isolate::run::RunError| -> ExitCode {
        eprintln!("drmtool: place: {e}");
        Exit::of_run(&e).into()
    };
    // The GPUs first, as every command that names one: a spec that names none is exit 3
    // whatever the file says.
    let (all, cand) = match placing::candidates(&a.gpus) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let reqs = match crate::place::requests::read(&a.file) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            eprintln!("drmtool: place: {}: {e}", a.file.display());
            return Exit::Usage.into();
        }
        Err(e) => {
            eprintln!("drmtool: place: cannot read {}: {e}", a.file.display());
            return Exit::Failure.into();
        }
    };
    let r = match placing::place(&reqs, &all, cand, a.slots) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if json {
        return emit_json(&r, out);
    }
    emit_text(&placing::render(&r), out)
}
