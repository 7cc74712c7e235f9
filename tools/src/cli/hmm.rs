//! `drmtool hmm probe`.

use super::*;

/// `drmtool hmm ...`.
#[derive(Subcommand, Debug)]
pub(super) enum HmmCmd {
    /// Which test_hmm requests this kernel answers (probed harmlessly on one page of this
    /// process's own memory), the request numbering and how it was decided, udmabuf with its
    /// limits, and which host registration backends work. Each "no" has its errno class.
    ///
    /// The last probe, HMM_DMIRROR_RELEASE, moves every page the mirror device holds back
    /// to system memory (contents unchanged), also those of other processes using it.
    #[command(
        after_help = "Examples:\n  drmtool hmm probe\n  drmtool hmm probe --json\n\n\
                            Exit codes: 0 (also when test_hmm or udmabuf is missing: that is \
                            reported), 1 the output could not be written."
    )]
    Probe,
}

/// `drmtool hmm probe`.
pub(super) fn hmm_probe(json: bool, out: &mut dyn Write) -> ExitCode {
    let r = crate::hmm_probe::probe();
    if json {
        emit_json(&r, out)
    } else {
        emit_text(&crate::hmm_probe::render(&r), out)
    }
}
