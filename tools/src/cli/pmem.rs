//! `drmtool pmem list`.

use super::*;

/// `drmtool pmem ...`.
#[derive(Subcommand, Debug)]
pub(super) enum PmemCmd {
    /// Regions and namespaces (/sys/bus/nd) with mode, size and alignment, every /dev/pmem*
    /// and /dev/dax* node, and the filesystems mounted from them with their DAX policy
    /// (/proc/self/mountinfo).
    #[command(
        after_help = "Examples:\n  drmtool pmem list\n  drmtool pmem list --json\n\n\
                            Exit codes: 0, 4 no persistent memory on this machine (the JSON \
                            is printed anyway, with its reason), 1 the output could not be \
                            written."
    )]
    List,
}

pub(super) fn pmem_list(json: bool, out: &mut dyn Write) -> ExitCode {
    let r = crate::pmem::list();
    let empty = r.regions.is_empty() && r.devices.is_empty();
    let code = if json {
        emit_json(&r, out)
    } else if empty {
        ExitCode::SUCCESS
    } else {
        emit_text(&crate::pmem::render(&r), out)
    };
    if code != ExitCode::SUCCESS {
        return code;
    }
    if let Some(why) = &r.reason {
        eprintln!("drmtool: {why}");
    }
    if empty { Exit::NoDevices.into() } else { code }
}
