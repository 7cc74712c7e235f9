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
    let r = match crate::isolate::placing::place(&reqs, &a.gpus, a.slots) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("drmtool: place: {e}");
            return Exit::of_run(&e).into();
        }
    };
    if json {
        return emit_json(&r, out);
    }
    emit_text(&crate::isolate::placing::render(&r), out)
}
