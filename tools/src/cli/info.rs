//! `drmtool info` and `drmtool caps`.

use super::*;

/// Nodes for `spec`, or the exit status after a one-line error.
pub(super) fn nodes_for(spec: Option<&GpuSpec>) -> Result<Vec<drm_gem::NodeInfo>, ExitCode> {
    crate::gpu::nodes(spec).map_err(|e| {
        eprintln!("drmtool: {e}");
        Exit::of_select(&e).into()
    })
}

pub(super) fn info(
    spec: Option<&GpuSpec>,
    probe: bool,
    json: bool,
    out: &mut dyn Write,
) -> ExitCode {
    let nodes = match nodes_for(spec) {
        Ok(n) => n,
        Err(c) => return c,
    };
    let devices: Vec<_> = nodes
        .iter()
        .map(|n| crate::info::device_info(n, probe))
        .collect();
    if json {
        let doc = crate::info::InfoReport {
            schema_version: crate::info::INFO_SCHEMA_VERSION,
            devices,
        };
        return emit_json(&doc, out);
    }
    let text: Vec<String> = devices.iter().map(crate::info::render).collect();
    emit_text(&text.join("\n"), out)
}

pub(super) fn caps(spec: Option<&GpuSpec>, json: bool, out: &mut dyn Write) -> ExitCode {
    let nodes = match nodes_for(spec) {
        Ok(n) => n,
        Err(c) => return c,
    };
    let r = crate::caps::probe_all(&nodes);
    if json {
        emit_json(&r, out)
    } else {
        emit_text(&crate::caps::render(&r), out)
    }
}
