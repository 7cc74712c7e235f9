//! `drmtool leases`: [`crate::isolate::lease::report`], as JSON or its table.

use super::*;

pub(super) fn leases_cmd(json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::lease;
    let r = lease::report();
    if json {
        return emit_json(&r, out);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    emit_text(&lease::render(&r, now), out)
}
