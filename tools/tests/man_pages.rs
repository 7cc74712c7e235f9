//! `drmtool man --dir DIR` (issue 33, the package's man pages): one page per command of
//! the clap tree, each a roff page whose header and NAME line name that command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

/// A fresh directory of this test process (removed at the end of each test).
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("drmtool-man-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every page the clap tree calls for, walked here apart from the code under test, with
/// the command as it is typed: `drmtool`, and `drmtool-<a>[-<b>]` for each visible
/// subcommand (`drmtool a b`; clap's `help` is not a command of ours).
fn expected_pages() -> BTreeMap<String, String> {
    fn walk(cmd: &clap::Command, page: &str, typed: &str, out: &mut BTreeMap<String, String>) {
        out.insert(page.to_string(), typed.to_string());
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let name = sub.get_name();
            walk(
                sub,
                &format!("{page}-{name}"),
                &format!("{typed} {name}"),
                out,
            );
        }
    }
    let mut out = BTreeMap::new();
    walk(&drmtool::cli::command(), "drmtool", "drmtool", &mut out);
    out
}

/// `name` as roff writes it in running text (`-` as `\-`).
fn roff_text(name: &str) -> String {
    name.replace('-', "\\-")
}

#[test]
fn every_command_gets_a_page_with_a_valid_header() {
    let dir = scratch("all");
    let (code, out) = drmtool::cli::run_captured(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");

    let want = expected_pages();
    // The tree has the commands the package's man pages are promised for.
    for p in [
        "drmtool",
        "drmtool-run",
        "drmtool-devices",
        "drmtool-trace-record",
        "drmtool-cgroup-deny-gpus",
        "drmtool-cdi-generate",
        "drmtool-slurm-prolog",
        "drmtool-kms-screenshot",
    ] {
        assert!(want.contains_key(p), "the clap tree lacks {p}: {want:?}");
    }
    let written: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let want_files: BTreeSet<String> = want.keys().map(|p| format!("{p}.1")).collect();
    assert_eq!(written, want_files, "one page per command, nothing else");
    // stdout names each file written, one a line.
    let listed: BTreeSet<PathBuf> = out.lines().map(PathBuf::from).collect();
    let files: BTreeSet<PathBuf> = want_files.iter().map(|f| dir.join(f)).collect();
    assert_eq!(listed, files);

    let version = env!("CARGO_PKG_VERSION");
    for (page, typed) in &want {
        let text = std::fs::read_to_string(dir.join(format!("{page}.1"))).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // The title line (after clap_mangen's two-line quote-string prelude): the page,
        // section 1, no date, the program with its version as the footer's source.
        let th = lines
            .iter()
            .position(|l| l.starts_with(".TH "))
            .unwrap_or_else(|| panic!("{page}: no .TH line"));
        assert!(
            th <= 2,
            "{page}: .TH is line {th}, after more than the prelude"
        );
        assert!(
            lines[..th]
                .iter()
                .all(|l| l.starts_with(".ie ") || l.starts_with(".el ")),
            "{page}: only the prelude comes before .TH: {:?}",
            &lines[..th]
        );
        assert_eq!(
            lines[th],
            format!(".TH {page} 1  \"drmtool {version}\" "),
            "{page}"
        );
        // NAME, then `name \- summary` (what mandb's whatis parser reads), then SYNOPSIS
        // with the command as it is typed.
        assert_eq!(lines[th + 1], ".SH NAME", "{page}");
        let whatis = format!("{} \\- ", roff_text(page));
        assert!(
            lines[th + 2].starts_with(&whatis) && lines[th + 2].len() > whatis.len(),
            "{page}: NAME line {:?}",
            lines[th + 2]
        );
        assert_eq!(lines[th + 3], ".SH SYNOPSIS", "{page}");
        let typed = format!("\\fB{}\\fR", roff_text(typed));
        assert!(
            lines[th + 4].starts_with(&typed),
            "{page}: synopsis {:?}",
            lines[th + 4]
        );
        // Every line is a request, or text that does not start like one by accident.
        for l in &lines {
            assert!(!l.starts_with('\''), "{page}: a line starts with ': {l:?}");
        }
    }
    // The top page points at the subcommands' pages.
    let top = std::fs::read_to_string(dir.join("drmtool.1")).unwrap();
    assert!(top.contains("drmtool\\-run(1)"), "{top}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn man_without_dir_is_the_one_page_and_a_bad_dir_fails() {
    let (code, one) = drmtool::cli::run_captured(&["man"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(one.contains(".TH drmtool 1"), "{one}");
    assert!(!one.contains(".TH drmtool-run"), "one page only");

    // A directory that cannot be made (below a regular file): exit 1, nothing on stdout.
    let dir = scratch("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    let under = file.join("man1");
    let (code, out) = drmtool::cli::run_captured(&["man", "--dir", under.to_str().unwrap()]);
    assert_eq!(code, ExitCode::FAILURE);
    assert!(out.is_empty(), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
