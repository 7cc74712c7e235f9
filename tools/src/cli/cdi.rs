//! `drmtool cdi generate`: the machine's CDI spec, printed or written.

use super::*;
use crate::cdi::{self, CdiFormat, CdiKind, CdiOptions};
use std::path::PathBuf;

/// `drmtool cdi ...`.
#[derive(Subcommand, Debug)]
pub(super) enum CdiCmd {
    /// A Container Device Interface spec for every GPU: one device per GPU named by its
    /// index and by its PCI bus id (off PCI: its name), and `all`, each with every node a
    /// job on it needs (DRM, NVIDIA, kfd, accel: what `run --gpu` gives) and
    /// DRMTOOL_GPU_<index>. cdiVersion 0.5.0 (podman 4.3 loads it). A GPU whose vendor
    /// nodes cannot be identified is left out, and said so on stderr. Exit 4 without DRM
    /// devices, 1 when no GPU can be described or the file cannot be written.
    #[command(
        after_help = "Examples:\n  drmtool cdi generate -o /etc/cdi/drmtool.yaml\n  \
                      podman run --device drmtool.dev/gpu=0 --rm IMAGE CMD\n  \
                      podman run --device drmtool.dev/gpu=0000:3b:00.0 --rm IMAGE CMD\n  \
                      drmtool cdi generate --kind example.com/gpu --format json"
    )]
    Generate(GenerateArgs),
}

/// `drmtool cdi generate` arguments.
#[derive(clap::Args, Debug)]
pub(super) struct GenerateArgs {
    /// Write the spec to FILE (atomically, mode 0644; a symlink there is refused) instead
    /// of printing it. Runtimes read /etc/cdi and /var/run/cdi.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// The spec's kind: devices are named KIND=NAME (VENDOR and CLASS: letters, digits,
    /// '_', '-', '.', starting with a letter and ending with a letter or digit).
    #[arg(long, value_name = "VENDOR/CLASS", default_value = CdiKind::DEFAULT)]
    kind: CdiKind,
    /// json or yaml. Default: yaml when FILE ends in .yaml or .yml, else json.
    #[arg(long, value_parser = ["json", "yaml"])]
    format: Option<String>,
}

pub(super) fn exec(c: &CdiCmd, json: bool, out: &mut dyn Write) -> ExitCode {
    let CdiCmd::Generate(a) = c;
    let format = match (a.format.as_deref(), &a.output) {
        (Some("yaml"), _) => CdiFormat::Yaml,
        (Some(_), _) => CdiFormat::Json,
        (None, _) if json => CdiFormat::Json,
        (None, Some(p)) => CdiFormat::for_path(p),
        (None, None) => CdiFormat::Json,
    };
    let opts = CdiOptions {
        kind: a.kind.clone(),
        ..Default::default()
    };
    let fail = |e: cdi::CdiError| -> ExitCode {
        eprintln!("drmtool: cdi generate: {e}");
        Exit::of_cdi(&e).into()
    };
    let g = match cdi::generate(&opts) {
        Ok(g) => g,
        Err(e) => return fail(e),
    };
    for why in &g.left_out {
        eprintln!("drmtool: cdi generate: {why}");
    }
    match &a.output {
        Some(p) => match cdi::write_file(p, &g.spec, format) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        None => match cdi::render(&g.spec, format) {
            Ok(text) => emit_text(&text, out),
            Err(e) => fail(e),
        },
    }
}
