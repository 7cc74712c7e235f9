//! Files drmtool writes for the user (`kms screenshot -o`, `export --textfile`): written to
//! a new file beside the target and renamed over it once complete, so a reader never sees a
//! partial file, an interrupted run leaves none, and a symlink at the target (a root-run
//! tool writing into a directory others can write) is refused rather than written through.

use std::path::Path;

/// Writes `path` by `write` on a fresh file in the same directory, then renames it over
/// `path`. A symlink or directory at `path` is refused; on any failure the fresh file is
/// removed and `path` is as it was.
///
/// # Errors
/// One line naming the path and what failed.
pub fn replace(
    path: &Path,
    write: impl FnOnce(std::fs::File) -> Result<(), String>,
) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!(
                "{} is a symlink; refusing to write through it (hint: name the file itself)",
                path.display()
            ));
        }
        Ok(m) if m.is_dir() => {
            return Err(format!(
                "{} is a directory (hint: name a file in it)",
                path.display()
            ));
        }
        _ => {}
    }
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A leading dot and a `.tmp` suffix: node_exporter's textfile collector reads only
    // `*.prom`, and `ls` hides it.
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let written = write(f).and_then(|()| {
        std::fs::rename(&tmp, path).map_err(|e| format!("cannot rename to it: {e}"))
    });
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("writing {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_refuses_links_and_directories() {
        let dir = std::env::temp_dir().join(format!("drmtool-outfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("a.prom");
        std::fs::write(&target, "old\n").unwrap();
        replace(&target, |mut f| {
            use std::io::Write;
            f.write_all(b"new\n").map_err(|e| e.to_string())
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        // A failing writer leaves the old file and no temporary.
        let e = replace(&target, |_| Err("disk full".into())).unwrap_err();
        assert!(e.contains("disk full") && e.contains("a.prom"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let link = dir.join("link.prom");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = replace(&link, |_| Ok(())).unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(replace(&dir, |_| Ok(())).unwrap_err().contains("directory"));
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["a.prom", "link.prom", "victim"], "no temporary left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
