//! `drmtool topo`: [`crate::topo::report`] of the machine's GPUs, as JSON or its tables.

use super::*;

pub(super) fn topo_cmd(json: bool, out: &mut dyn Write) -> ExitCode {
    let gpus = match crate::gpu::gpus() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("drmtool: {e}");
            return Exit::of_select(&e).into();
        }
    };
    let r = crate::topo::read_report(&gpus);
    if json {
        return emit_json(&r, out);
    }
    emit_text(&crate::topo::report::render(&r), out)
}
