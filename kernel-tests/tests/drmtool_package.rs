//! Issue 33 in the guest: the Debian package of drmtool installed and used as an admin
//! would (`vm test --writable-root --test drmtool_package`, scripts/guest-package). The
//! guest's root is a writable union over the host's (its changes in a tmpfs), so `dpkg -i`
//! works on the host's own dpkg database as on a machine of one's own, and nothing reaches
//! the host. As root:
//!
//! - `dpkg -i` of the .deb scripts/package built (`DRMTOOL_DEB`, else the one .deb in the
//!   workspace's `target/debian`); `dpkg -s drmtool` is then installed, and its version's
//!   upstream part is what `/usr/bin/drmtool --version` prints;
//! - `man -w` finds every page the package ships, `man -P cat drmtool-run` shows the run
//!   page, and man-db's parser reads every page's NAME line (`lexgrog`: what `whatis`
//!   would index; man-db's trigger is off, see below);
//! - bash completion: in `bash -i` with bash-completion sourced, `drmtool`'s completion
//!   loads as Tab would load it (`complete -p drmtool`), and its function, driven through
//!   `COMP_WORDS` for `drmtool ru<TAB>` and `drmtool trace re<TAB>`, offers `run` and
//!   `record`, nothing else;
//! - `/usr/bin/drmtool devices --json` lists the guest's vgem;
//! - the examples are what the tools accept: `visudo -c` of the sudoers drop-in, `sh -n` of
//!   the Slurm scripts, `systemd-analyze verify` of every unit the package holds (their
//!   `ExecStart=` and `Documentation=man:` pages resolve now that it is installed); the
//!   exporter's system user exists where the package ships its sysusers.d file (postinst);
//! - `dpkg -r drmtool` removes every file but the conffiles, `dpkg -P` those too, and
//!   `man -w drmtool-run` no longer finds the page.
//!
//! Outside such a guest every test fails: the target is built only for it.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `prog args` and returns its output; panics when it cannot start.
fn run(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .env("MANWIDTH", "80")
        .output()
        .unwrap_or_else(|e| panic!("{prog} {args:?}: cannot start: {e}"))
}

/// Runs `prog args`, which must exit 0; returns its stdout.
fn ok(prog: &str, args: &[&str]) -> String {
    let o = run(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?}: {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The .deb under test: `DRMTOOL_DEB`, else the only `drmtool_*.deb` in the workspace's
/// `target/debian`.
fn deb() -> PathBuf {
    if let Some(p) = std::env::var_os("DRMTOOL_DEB") {
        return PathBuf::from(p);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debian");
    let debs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/package first)", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("drmtool_") && n.ends_with(".deb"))
        })
        .collect();
    assert_eq!(
        debs.len(),
        1,
        "one drmtool .deb in {} (or DRMTOOL_DEB): {debs:?}",
        dir.display()
    );
    debs.into_iter().next().unwrap()
}

/// `dpkg-query -W -f FORMAT drmtool`, or `None` when dpkg knows no such package.
fn query(format: &str) -> Option<String> {
    let o = run("dpkg-query", &["-W", "-f", format, "drmtool"]);
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `man`'s output as plain text: overstrikes (`X\x08X`, `_\x08X`) and SGR sequences
/// removed, should the pager path keep them.
fn plain(s: &str) -> String {
    let mut out: Vec<char> = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x08' => {
                out.pop();
            }
            '\x1b' if chars.peek() == Some(&'[') => {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.into_iter().collect()
}

/// The paths of the package's regular files (`dpkg -L`, directories and links left out).
fn package_files() -> BTreeSet<PathBuf> {
    ok("dpkg", &["-L", "drmtool"])
        .lines()
        .map(PathBuf::from)
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .collect()
}

/// Completes `line` (ending in the word being completed) with `drmtool`'s bash completion
/// in an interactive bash with bash-completion sourced, as Tab does: loads the completion
/// on demand, prints `complete -p drmtool`, then the candidates, one a line.
fn complete(line: &str) -> (String, Vec<String>) {
    let script = format!(
        r#"set -e
. /usr/share/bash-completion/bash_completion
_completion_loader drmtool || true
spec=$(complete -p drmtool)
echo "SPEC $spec"
fn=${{spec##*-F }}; fn=${{fn%% *}}
COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9; COMP_KEY=9
read -r -a COMP_WORDS <<< "$COMP_LINE"
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMPREPLY=()
"$fn" drmtool "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
for c in "${{COMPREPLY[@]}}"; do echo "CAND $c"; done
"#
    );
    let o = Command::new("bash")
        .args(["--norc", "-i", "-c", &script])
        .env("HOME", "/tmp")
        .output()
        .expect("bash");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "bash completion of {line:?}: {}\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let spec = out
        .lines()
        .find_map(|l| l.strip_prefix("SPEC "))
        .unwrap_or_else(|| panic!("no complete -p line: {out}"))
        .to_string();
    let cands = out
        .lines()
        .filter_map(|l| l.strip_prefix("CAND "))
        .map(|c| c.trim().to_string())
        .collect();
    (spec, cands)
}

/// `systemd-analyze verify UNIT`: exits 0 and says nothing about any drmtool unit.
fn verify_unit(unit: &Path) {
    let o = run(
        "systemd-analyze",
        &["verify", unit.to_str().expect("a UTF-8 path")],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let about_ours: Vec<&str> = text.lines().filter(|l| l.contains("drmtool")).collect();
    assert!(
        o.status.success() && about_ours.is_empty(),
        "systemd-analyze verify {}: {}\n{text}",
        unit.display(),
        o.status
    );
}

/// The whole admin's session, in order: each step needs the one before it.
#[test]
fn install_use_and_remove_the_package() {
    assert_eq!(
        std::env::var("VM_WRITABLE_ROOT").as_deref(),
        Ok("1"),
        "run on a writable root: vm test --writable-root --test drmtool_package"
    );
    assert!(
        rustix::process::geteuid().is_root(),
        "dpkg -i needs root (the guest runs tests as root)"
    );
    let deb = deb();
    assert_eq!(
        query("${Status}"),
        None,
        "drmtool is installed before the test: the host has it, so this proves nothing"
    );

    // man-db's trigger off, as Debian's debconf question man-db/auto-update leaves it when
    // answered no: its incremental mandb rescans every page of a directory that changed,
    // and the host's /usr/share/man/man1 holds 18,000 pages, which under TCG through FUSE
    // and 9p took six minutes of each dpkg -i and -r (drmtool's pages take none of that).
    // What mandb would index, every page's NAME line, is checked below with its parser.
    let auto_update = Path::new("/var/lib/man-db/auto-update");
    if auto_update.exists() {
        std::fs::remove_file(auto_update).expect("man-db auto-update off");
    }

    // Install.
    let out = ok("dpkg", &["-i", deb.to_str().expect("a UTF-8 path")]);
    println!("dpkg -i {}:\n{out}", deb.display());
    assert_eq!(query("${Status}").as_deref(), Some("install ok installed"));
    let version = query("${Version}").expect("a version");
    let upstream = version
        .rsplit_once('-')
        .map_or(version.as_str(), |(u, _)| u);
    let printed = ok("/usr/bin/drmtool", &["--version"]);
    assert_eq!(
        printed.trim(),
        format!("drmtool {upstream}"),
        "drmtool --version against the package's version {version}"
    );
    let files = package_files();
    println!("{} files installed", files.len());

    // Man pages: every page the package ships is found by name, the run page reads.
    let pages: Vec<String> = files
        .iter()
        .filter_map(|p| {
            p.strip_prefix("/usr/share/man/man1")
                .ok()?
                .to_str()?
                .strip_suffix(".1.gz")
                .map(String::from)
        })
        .collect();
    for p in [
        "drmtool",
        "drmtool-run",
        "drmtool-trace-record",
        "drmtool-cdi-generate",
    ] {
        assert!(pages.iter().any(|q| q == p), "no page {p}: {pages:?}");
    }
    // One man (and one lexgrog below) for all pages: each start costs a second under TCG.
    let names: Vec<&str> = pages.iter().map(String::as_str).collect();
    let found: Vec<String> = ok("man", &[&["-w"], names.as_slice()].concat())
        .lines()
        .map(String::from)
        .collect();
    let want: Vec<String> = pages
        .iter()
        .map(|p| format!("/usr/share/man/man1/{p}.1.gz"))
        .collect();
    assert_eq!(found, want, "man -w of every page, in order");
    let page = plain(&ok("man", &["-P", "cat", "drmtool-run"]));
    for want in [
        "drmtool-run - Run a command that can open only the GPUs given",
        "SYNOPSIS",
        "drmtool run [--gpu]",
        "--as-root",
    ] {
        assert!(
            page.contains(want),
            "man drmtool-run lacks {want:?}:\n{page}"
        );
    }
    // mandb's own parser of the NAME line (what whatis and apropos would show) on every
    // page: `FILE: "PAGE - SUMMARY"`.
    let page_files: Vec<&str> = want.iter().map(String::as_str).collect();
    let parsed = ok("lexgrog", &page_files);
    let lines: Vec<&str> = parsed.lines().collect();
    assert_eq!(lines.len(), pages.len(), "lexgrog: {parsed}");
    for ((p, file), line) in pages.iter().zip(&want).zip(lines) {
        assert!(
            line.starts_with(&format!("{file}: \"{p} - ")) && line.ends_with('"'),
            "lexgrog {file}: {line}"
        );
    }

    // Bash completion, as Tab loads and runs it.
    let (spec, cands) = complete("drmtool ru");
    assert!(
        spec.starts_with("complete ") && spec.ends_with(" drmtool") && spec.contains(" -F "),
        "complete -p drmtool: {spec}"
    );
    assert_eq!(cands, ["run"], "drmtool ru<TAB>");
    let (_, cands) = complete("drmtool trace re");
    assert_eq!(cands, ["record"], "drmtool trace re<TAB>");

    // The installed program on the guest's GPUs.
    let devices: Value =
        serde_json::from_str(&ok("/usr/bin/drmtool", &["devices", "--json"])).expect("JSON");
    let drivers: Vec<&str> = devices["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["driver"].as_str())
        .collect();
    assert!(drivers.contains(&"vgem"), "drmtool devices: {drivers:?}");

    // The examples are what the tools they are for accept.
    let ex = Path::new("/usr/share/doc/drmtool/examples");
    let sudoers = ex.join("sudoers.d/drmtool");
    let out = ok("visudo", &["-c", "-f", sudoers.to_str().unwrap()]);
    assert!(out.contains("parsed OK"), "visudo: {out}");
    for s in ["slurm/prolog", "slurm/epilog", "slurm/task-prolog"] {
        let script = ex.join(s);
        let text = std::fs::read_to_string(&script).unwrap();
        assert!(text.contains("exec /usr/bin/drmtool slurm "), "{s}: {text}");
        ok("sh", &["-n", script.to_str().unwrap()]);
    }
    let units: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "service" || e == "slice")
        })
        .collect();
    assert!(
        units.len() >= 3,
        "the CDI and no-GPU-outside-a-job units at least: {units:?}"
    );
    for u in &units {
        verify_unit(u);
    }
    if files.contains(Path::new("/usr/lib/sysusers.d/drmtool-export.conf")) {
        ok("getent", &["passwd", "drmtool-export"]);
    }

    // Remove: every file goes but the conffiles, which purge takes.
    let conffiles: BTreeSet<PathBuf> = query("${Conffiles}")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(PathBuf::from)
        .collect();
    ok("dpkg", &["-r", "drmtool"]);
    let left: Vec<&PathBuf> = files
        .iter()
        .filter(|p| !conffiles.contains(*p) && std::fs::symlink_metadata(p).is_ok())
        .collect();
    assert!(left.is_empty(), "dpkg -r left {left:?}");
    assert_eq!(
        query("${Status}").as_deref(),
        Some("deinstall ok config-files")
    );
    assert!(
        !run("man", &["-w", "drmtool-run"]).status.success(),
        "man -w after -r"
    );
    ok("dpkg", &["-P", "drmtool"]);
    let left: Vec<&PathBuf> = conffiles.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "dpkg -P left {left:?}");
    for d in [
        "/usr/share/drmtool",
        "/usr/share/doc/drmtool",
        "/etc/drmtool",
    ] {
        assert!(!Path::new(d).exists(), "{d} is still there after dpkg -P");
    }
    assert_eq!(query("${Status}"), None, "dpkg still knows drmtool");
}
