//! Files drmtool writes for the user (`kms screenshot -o`, `export --textfile`): written to
//! a new file beside the target and renamed over it once complete, so a reader never sees a
//! partial file, an interrupted run leaves none, and a symlink at the target (a root-run
//! tool writing into a directory others can write) is refused rather than written through.

use std::path::{Path, PathBuf};

/// Why [`replace`] wrote nothing; the target is as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutfileError {
    /// A symlink is at the target.
    #[error("{} is a symlink; refusing to write through it (hint: name the file itself)", .0.display())]
    Symlink(PathBuf),
    /// A directory is at the target.
    #[error("{} is a directory (hint: name a file in it)", .0.display())]
    Directory(PathBuf),
    /// The path ends in `..` or `/`.
    #[error("{} names no file", .0.display())]
    NoFileName(PathBuf),
    /// The fresh file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The fresh file's path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the fresh file, or renaming it over the target, failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The target.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Writes `path` by `write` on a fresh file in the same directory, then renames it over
/// `path`. A symlink or directory at `path` is refused; on any failure the fresh file is
/// removed and `path` is as it was.
///
/// # Errors
/// [`OutfileError`], naming the path and what failed.
pub fn replace(
    path: &Path,
    write: impl FnOnce(std::fs::File) -> std::io::Result<()>,
) -> Result<(), OutfileError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(OutfileError::Symlink(path.into())),
        Ok(m) if m.is_dir() => return Err(OutfileError::Directory(path.into())),
        _ => {}
    }
    let name = path
        .file_name()
        .ok_or_else(|| OutfileError::NoFileName(path.into()))?;
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
        .map_err(|source| OutfileError::Create {
            path: tmp.clone(),
            source,
        })?;
    let written = write(f).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        OutfileError::Write {
            path: path.into(),
            source,
        }
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
            f.write_all(b"new\n")
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        // A failing writer leaves the old file and no temporary.
        let e = replace(&target, |_| Err(std::io::Error::other("disk full")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("disk full") && e.contains("a.prom"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let link = dir.join("link.prom");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = replace(&link, |_| Ok(())).unwrap_err();
        assert!(matches!(e, OutfileError::Symlink(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(matches!(
            replace(&dir, |_| Ok(())).unwrap_err(),
            OutfileError::Directory(_)
        ));
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["a.prom", "link.prom", "victim"], "no temporary left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
