//! `drmtool devices`: every node in the one ordering ([`crate::devices`]).

use super::*;

pub(super) fn devices(json: bool, out: &mut dyn Write) -> ExitCode {
    let r = crate::devices::list();
    if json {
        let code = emit_json(&r, out);
        if code != ExitCode::SUCCESS {
            return code;
        }
        return if r.reason.is_some() {
            Exit::NoDevices.into()
        } else {
            code
        };
    }
    if let Some(why) = &r.reason {
        eprintln!("drmtool: {why}");
        return Exit::NoDevices.into();
    }
    emit_text(&crate::devices::render(&r), out)
}
