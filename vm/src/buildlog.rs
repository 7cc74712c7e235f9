//! Kernel build logs: a fresh log per build attempt, the lines that say why a build failed
//! (compiler `error:` lines, make's `Error N`, the linker's undefined references, missing
//! tools, each with a little context, instead of the last lines of other jobs' warnings),
//! and a fix that fits them.
//!
//! A build log is the compiler's text about a source tree the harness did not write:
//! every function here takes it as untrusted input and bounds what it returns.

use crate::error::{Result, VmError};
use std::fs;
use std::path::{Path, PathBuf};

/// A fresh log for one build attempt in `dir`: `<stem>.<n>`, `n` one above the highest
/// there (1 for the first), with `<stem>` a symbolic link to it. A `<stem>` that is a
/// regular file (a log from before logs were numbered) becomes `<stem>.0`.
pub fn fresh_log(dir: &Path, stem: &str) -> Result<PathBuf> {
    let link = dir.join(stem);
    if let Ok(meta) = fs::symlink_metadata(&link)
        && meta.file_type().is_file()
    {
        let old = dir.join(format!("{stem}.0"));
        if !old.exists() {
            let _ = fs::rename(&link, &old);
        }
    }
    let prefix = format!("{stem}.");
    let highest = fs::read_dir(dir)
        .map_err(|e| VmError::new(format!("{}: {e}", dir.display())))?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(&prefix)?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    let name = format!("{stem}.{}", highest + 1);
    let path = dir.join(&name);
    fs::write(&path, b"").map_err(|e| VmError::new(format!("{}: {e}", path.display())))?;
    let _ = fs::remove_file(&link);
    let _ = std::os::unix::fs::symlink(&name, &link);
    Ok(path)
}

/// Whether a log line says what failed.
fn is_error_line(l: &str) -> bool {
    l.contains("error:")
        || l.contains("Error:")
        || (l.contains("] Error ") && l.contains("***"))
        || l.contains("*** No rule to make target")
        || l.contains("undefined reference to")
        || l.contains(": not found")
        || l.contains("command not found")
        || l.contains("No space left on device")
}

/// The lines of `log` that say why a build failed, each with `before` lines before and
/// `after` lines after it; groups that are not adjacent are separated by `--`. At most
/// `max` lines (the first errors matter most); a cut is said in a last line. Empty when
/// the log shows no error line.
pub fn error_lines(log: &str, before: usize, after: usize, max: usize) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let hits: Vec<usize> = (0..lines.len())
        .filter(|&i| is_error_line(lines[i]))
        .collect();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &h in &hits {
        let (a, b) = (h.saturating_sub(before), (h + after + 1).min(lines.len()));
        match ranges.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => ranges.push((a, b)),
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut shown_hits = 0;
    'outer: for (k, &(a, b)) in ranges.iter().enumerate() {
        if k > 0 {
            out.push("--".into());
        }
        for (i, l) in lines.iter().enumerate().take(b).skip(a) {
            if out.len() >= max {
                break 'outer;
            }
            // A line of megabytes (a runaway macro expansion) is cut too.
            let l: String = l.chars().take(400).collect();
            out.push(l);
            if hits.binary_search(&i).is_ok() {
                shown_hits += 1;
            }
        }
    }
    if shown_hits < hits.len() {
        out.push(format!(
            "[... {} more error line(s) in the log]",
            hits.len() - shown_hits
        ));
    }
    out
}

/// `(major, minor)` of a kernel version (`5.15.0`, `6.12.117-1~deb12u1`,
/// `5.15.0-9accddb9fb95`).
pub fn kernel_series(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split(['.', '-', '+', '~']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The gcc major version that was current when a kernel series was released (what its
/// code was last made warning-free with).
pub fn gcc_of_series((major, minor): (u32, u32)) -> u32 {
    match (major, minor) {
        (0..=4, _) => 8,
        (5, 0..=6) => 9,
        (5, 7..=13) => 10,
        (5, _) | (6, 0) => 11,
        (6, 1..=5) => 12,
        (6, 6..=10) => 13,
        (6, _) => 14,
        _ => 15,
    }
}

/// The major version of a `gcc -dumpversion` answer (`12`, `12.2.0`).
pub fn gcc_major(dumpversion: &str) -> Option<u32> {
    dumpversion.trim().split('.').next()?.parse().ok()
}

/// A fix that fits the error lines of a failed build of kernel `version` with the host's
/// gcc (`host_gcc`, its major version), or `None` when nothing specific fits.
pub fn suggest_fix(errors: &[String], version: &str, host_gcc: Option<u32>) -> Option<String> {
    let any = |p: &str| errors.iter().any(|l| l.contains(p));
    if any("No space left on device") {
        return Some("free space, or point VM_CACHE_DIR at a larger disk".into());
    }
    if any("use-after-free") && any("subcmd") {
        return Some(
            "gcc 12 and later reject tools/lib/subcmd's xrealloc (-Werror=use-after-free, \
             before Linux 6.0): apply the harness's patch to the tree, `patch -p1 -d TREE < \
             vm/config/subcmd-realloc.patch` (catalog tarball kernels get it), or build with \
             gcc-11"
                .into(),
        );
    }
    for (needle, fix) in [
        ("flex: not found", "apt-get install flex"),
        ("bison: not found", "apt-get install bison"),
        ("bc: not found", "apt-get install bc"),
        ("openssl/", "apt-get install libssl-dev"),
        ("gelf.h", "apt-get install libelf-dev"),
        ("libelf.h", "apt-get install libelf-dev"),
        ("pahole", "apt-get install dwarves"),
        ("zstd: not found", "apt-get install zstd"),
    ] {
        if any(needle) {
            return Some(format!(
                "{fix} (scripts/setup installs the build dependencies)"
            ));
        }
    }
    let compiler = any("[-Werror=")
        || any("unrecognized command-line option")
        || any("unrecognized command line option")
        || any("error: unknown type name")
        || any("error: initializer element is not constant");
    if compiler {
        let series = kernel_series(version)?;
        let want = gcc_of_series(series);
        return Some(match host_gcc {
            Some(h) if h > want => format!(
                "a compiler incompatibility: the host's gcc {h} is newer than Linux {}.{} \
                 (released with gcc {want}); build with gcc-{want} (apt-get install gcc-{want}; \
                 make CC=gcc-{want} HOSTCC=gcc-{want}), or backport the upstream fix of the \
                 file named above",
                series.0, series.1
            ),
            _ => format!(
                "a compiler incompatibility in Linux {}.{} (released with gcc {want}): check \
                 the file named above against upstream, or build with gcc-{want}",
                series.0, series.1
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parallel build's tail: the error is far from the end, among other jobs' output.
    fn subcmd_log() -> String {
        let mut s = String::from("  CC      init/main.o\n");
        s += "In file included from subcmd-util.h:8,\n";
        s += "                 from exec-cmd.c:11:\n";
        s += "subcmd-util.h: In function 'xrealloc':\n";
        s += "subcmd-util.h:56:23: error: pointer 'ptr' may be used after 'realloc' [-Werror=use-after-free]\n";
        s += "   56 |                 ret = realloc(ptr, size);\n";
        s += "      |                       ^~~~~~~~~~~~~~~~~~\n";
        s += "cc1: all warnings being treated as errors\n";
        s += "make[4]: *** [/linux-5.15/tools/build/Makefile.build:97: /obj/tools/objtool/libsubcmd/exec-cmd.o] Error 1\n";
        for i in 0..200 {
            s += &format!(
                "drivers/gpu/drm/x{i}.c:1:1: warning: unused variable 'v' [-Wunused-variable]\n"
            );
        }
        s += "make[1]: *** [/linux-5.15/Makefile:1371: tools/objtool] Error 2\n";
        s += "make: *** [Makefile:226: __sub-make] Error 2\n";
        s
    }

    #[test]
    fn error_lines_with_context_not_the_tail() {
        let e = error_lines(&subcmd_log(), 2, 2, 40);
        assert!(e[0].contains("from exec-cmd.c:11"), "{e:#?}");
        assert!(
            e.iter()
                .any(|l| l.contains("error: pointer 'ptr' may be used after 'realloc'"))
        );
        assert!(e.iter().any(|l| l.contains("exec-cmd.o] Error 1")));
        assert!(e.iter().any(|l| l == "--"));
        assert!(e.iter().any(|l| l.contains("tools/objtool] Error 2")));
        // Other jobs' warnings are at most context (two after, two before), never the bulk.
        let warnings = e.iter().filter(|l| l.contains("warning: unused")).count();
        assert!(warnings <= 4, "{e:#?}");
        assert!(e.len() < 20, "{e:#?}");
        assert_eq!(
            suggest_fix(&e, "5.15.0-9accddb9fb95", Some(12))
                .map(|s| s.contains("subcmd-realloc.patch")),
            Some(true)
        );
    }

    #[test]
    fn error_lines_are_bounded_and_merged() {
        assert!(error_lines("", 3, 3, 10).is_empty());
        assert!(error_lines("  CC a.o\n  LD vmlinux\n", 3, 3, 10).is_empty());
        let many: String = (0..100).map(|i| format!("f{i}.c:1: error: x\n")).collect();
        let e = error_lines(&many, 1, 1, 10);
        assert_eq!(e.len(), 11);
        assert_eq!(e[10], "[... 90 more error line(s) in the log]");
        assert!(
            !e[..10].contains(&"--".to_string()),
            "adjacent hits are one group"
        );
        let long = format!("a.c: error: {}\n", "x".repeat(100_000));
        assert_eq!(error_lines(&long, 0, 0, 5)[0].chars().count(), 400);
    }

    #[test]
    fn fixes_that_fit() {
        let e = |l: &str| vec![l.to_string()];
        let gpp = e(
            "arch/x86/kvm/x.c:12:5: error: array subscript 2 is outside array bounds [-Werror=array-bounds]",
        );
        let fix = suggest_fix(&gpp, "5.10.262-1", Some(14)).unwrap();
        assert!(fix.contains("gcc 14 is newer than Linux 5.10"), "{fix}");
        assert!(fix.contains("gcc-10"), "{fix}");
        let fix = suggest_fix(&gpp, "6.12.117-1~deb12u1", Some(12)).unwrap();
        assert!(fix.contains("gcc-14") && !fix.contains("newer"), "{fix}");
        assert!(
            suggest_fix(&e("/bin/sh: 1: flex: not found"), "6.1", Some(12))
                .unwrap()
                .starts_with("apt-get install flex")
        );
        assert!(
            suggest_fix(
                &e("fatal error: openssl/opensslv.h: No such file or directory"),
                "6.1",
                None
            )
            .unwrap()
            .contains("libssl-dev")
        );
        assert!(
            suggest_fix(&e("ld: No space left on device"), "6.1", None)
                .unwrap()
                .contains("VM_CACHE_DIR")
        );
        assert_eq!(
            suggest_fix(&e("a.c:1: error: expected ';'"), "6.1", Some(12)),
            None
        );
        assert_eq!(kernel_series("5.15.0"), Some((5, 15)));
        assert_eq!(kernel_series("6.12.117-1~deb12u1"), Some((6, 12)));
        assert_eq!(kernel_series("linux"), None);
        assert_eq!(gcc_of_series((5, 15)), 11);
        assert_eq!(gcc_of_series((6, 1)), 12);
        assert_eq!(gcc_major("12\n"), Some(12));
        assert_eq!(gcc_major("12.2.0"), Some(12));
    }

    #[test]
    fn a_fresh_log_per_attempt() {
        let dir = std::env::temp_dir().join(format!("vm-buildlog-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("build.log"), b"an old single log").unwrap();
        let a = fresh_log(&dir, "build.log").unwrap();
        assert_eq!(a, dir.join("build.log.1"));
        assert_eq!(
            fs::read(dir.join("build.log.0")).unwrap(),
            b"an old single log"
        );
        fs::write(&a, b"attempt 1").unwrap();
        let b = fresh_log(&dir, "build.log").unwrap();
        assert_eq!(b, dir.join("build.log.2"));
        assert_eq!(fs::read(&b).unwrap(), b"");
        assert_eq!(fs::read(&a).unwrap(), b"attempt 1");
        assert_eq!(
            fs::read_link(dir.join("build.log")).unwrap(),
            Path::new("build.log.2")
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
