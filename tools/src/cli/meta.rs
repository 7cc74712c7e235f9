//! `drmtool completions SHELL` and `drmtool man`, generated from the clap tree.

use super::*;
use std::path::Path;

/// The completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> ExitCode {
    // clap_complete panics when its writer fails: generate into memory first.
    let mut cmd = command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "drmtool", &mut script);
    match out.write_all(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The man page (roff) on `out`; with `dir`, one page per command instead, written there.
pub(super) fn man(dir: Option<&Path>, out: &mut dyn Write) -> ExitCode {
    let Some(dir) = dir else {
        return match clap_mangen::Man::new(command()).render(out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drmtool: cannot write the man page: {e}");
                ExitCode::FAILURE
            }
        };
    };
    match write_pages(dir, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: man --dir: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every command of the tree with its page's name (`drmtool`, `drmtool-run`,
/// `drmtool-trace-record`, ...), parents before their subcommands: the hidden ones and
/// clap's `help` left out, as `drmtool --help` lists them.
fn pages() -> Vec<(String, clap::Command)> {
    let mut root = command().disable_help_subcommand(true);
    root.build();
    let mut pages = Vec::new();
    let mut todo = vec![root];
    while let Some(cmd) = todo.pop() {
        let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
        let mut subs: Vec<clap::Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .cloned()
            .collect();
        subs.reverse();
        todo.extend(subs);
        pages.push((name, cmd));
    }
    pages
}

/// Writes `<name>.1` for each of [`pages`] into `dir` (made when missing; a page there is
/// replaced) and prints each path written, one a line.
fn write_pages(dir: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Every page's footer names the program and its version, as the top page's does (a
    // subcommand has no version of its own).
    let source = format!("drmtool {}", env!("CARGO_PKG_VERSION"));
    for (name, cmd) in pages() {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .source(source.clone())
            .render(&mut page)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}

/// The examples, exit codes and GPU grammar under `drmtool --help`.
pub(super) const AFTER_HELP: &str = "Examples:\n  drmtool devices\n  drmtool devices --json\n  \
                  drmtool info vkms\n  drmtool caps --json\n  \
                  drmtool buffers\n  drmtool buffers --by client --json\n  \
                  drmtool buffers --watch 1\n  drmtool buffers --skip maps,kcmp --watch 1\n  \
                  drmtool kms list card0\n  \
                  drmtool kms modeset Virtual-1 1024x768 --seconds 5\n  \
                  drmtool kms screenshot 38 -o crtc.png\n  \
                  drmtool hmm probe\n  drmtool pmem list --json\n  \
                  drmtool run --gpu 0 -- glxinfo -B\n  drmtool run --pick 1 --wait 60 -- ./job.sh\n  \
                  drmtool pick -n 2 --format env\n  drmtool leases\n  \
                  drmtool export --per cgroup\n  \
                  drmtool trace record --duration 5 -o gpu.json\n  \
                  drmtool completions bash > /etc/bash_completion.d/drmtool\n  \
                  drmtool man > drmtool.1\n  drmtool man --dir /usr/share/man/man1\n\n\
                  Exit codes: 0 ok, 1 the command failed (an ioctl, /proc, the output), \
                  2 bad usage, 3 a GPU/pid/connector/mode/CRTC matched nothing, \
                  4 no DRM devices on this machine (pmem list: no persistent memory), \
                  5 too few free GPUs (pick, run --pick); run: the command's status \
                  (125: the isolation could not be set up).\n\n\
                  GPU (every command): an index from `drmtool devices`, a PCI bus id \
                  (00:04.0), a driver (vgem), a node (/dev/dri/card1, card1, 226:1) or a \
                  /dev/dri/by-path name.\n\n\
                  On a machine without /dev/dri, run it in a guest with real drivers:\n  \
                  scripts/drmtool devices";
