//! In-memory writer for the Linux initramfs "newc" cpio format.
//!
//! Every entry is a 110-byte ASCII header (magic `070701` and 13 eight-digit hex
//! fields), the NUL-terminated name padded to a multiple of 4, then the file data
//! padded to a multiple of 4. The archive ends with an entry named `TRAILER!!!`.
//! Owners and mtimes are always 0, so the same input always gives the same bytes.

use std::collections::HashSet;

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;
const TRAILER: &str = "TRAILER!!!";

/// Builds a newc cpio archive in memory.
#[derive(Debug, Default)]
pub struct CpioWriter {
    buf: Vec<u8>,
    next_ino: u32,
    paths: HashSet<String>,
}

impl CpioWriter {
    /// Creates an empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a directory with permission bits `perm`.
    pub fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, S_IFDIR | perm, 2, (0, 0), b"");
    }

    /// Adds a regular file with permission bits `perm` and contents `data`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, S_IFREG | perm, 1, (0, 0), data);
    }

    /// Adds a symbolic link (mode 0777) pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes());
    }

    /// Adds a character device node `major:minor` with permission bits `perm`.
    pub fn char_dev(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | perm, 1, (major, minor), b"");
    }

    /// Whether an entry for `path` (leading slash ignored) was already added.
    pub fn contains(&self, path: &str) -> bool {
        self.paths.contains(normalize(path))
    }

    /// Adds `path` and each of its missing parent directories (perm 0755), skipping
    /// any that were already added.
    pub fn dir_all(&mut self, path: &str) {
        let path = normalize(path);
        let mut end = 0;
        for part in path.split('/') {
            end += part.len();
            if !part.is_empty() && !self.contains(&path[..end]) {
                self.dir(&path[..end], 0o755);
            }
            end += 1;
        }
    }

    /// Appends the trailer and returns the archive bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.write_entry(TRAILER, 0, 0, 1, (0, 0), b"");
        self.buf
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        let path = normalize(path);
        self.next_ino += 1;
        let ino = self.next_ino;
        self.write_entry(path, ino, mode, nlink, rdev, data);
        self.paths.insert(path.to_owned());
    }

    fn write_entry(
        &mut self,
        name: &str,
        ino: u32,
        mode: u32,
        nlink: u32,
        (rmajor, rminor): (u32, u32),
        data: &[u8],
    ) {
        // Sizes beyond u32 cannot be represented in newc; callers never get near that.
        let filesize = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let namesize = u32::try_from(name.len() + 1).unwrap_or(u32::MAX);
        let fields = [
            ino, mode, 0, 0, nlink, 0, filesize, 0, 0, rmajor, rminor, namesize, 0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

fn normalize(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Entry {
        name: String,
        ino: u32,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: Vec<u8>,
    }

    fn read(mut buf: &[u8]) -> Vec<Entry> {
        let total = buf.len();
        let mut out = Vec::new();
        loop {
            let off = total - buf.len();
            assert_eq!(off % 4, 0, "entry not aligned");
            assert_eq!(&buf[..6], b"070701");
            let field = |i: usize| {
                let s = std::str::from_utf8(&buf[6 + i * 8..14 + i * 8]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (namesize, filesize) = (field(11) as usize, field(6) as usize);
            assert_eq!(field(12), 0, "check field");
            assert_eq!((field(2), field(3), field(5)), (0, 0, 0), "uid/gid/mtime");
            let name = &buf[110..110 + namesize];
            assert_eq!(name.last(), Some(&0));
            let name = String::from_utf8(name[..namesize - 1].to_vec()).unwrap();
            let data_off = (110 + namesize).next_multiple_of(4);
            assert!(buf[110 + namesize..data_off].iter().all(|&b| b == 0));
            let data = buf[data_off..data_off + filesize].to_vec();
            let next = (data_off + filesize).next_multiple_of(4);
            assert!(buf[data_off + filesize..next].iter().all(|&b| b == 0));
            let e = Entry {
                name,
                ino: field(0),
                mode: field(1),
                nlink: field(4),
                rdev: (field(9), field(10)),
                data,
            };
            buf = &buf[next..];
            if e.name == TRAILER {
                assert!(buf.is_empty(), "bytes after trailer");
                return out;
            }
            out.push(e);
        }
    }

    fn sample() -> CpioWriter {
        let mut w = CpioWriter::new();
        w.dir("/dev", 0o755);
        w.char_dev("dev/console", 0o600, 5, 1);
        w.file("init", 0o755, b"#!/bin/sh\necho hi\n");
        w.file("empty", 0o644, b"");
        w.symlink("sbin", "bin");
        w
    }

    #[test]
    fn round_trip() {
        let entries = read(&sample().finish());
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["dev", "dev/console", "init", "empty", "sbin"]);
        let inos: Vec<_> = entries.iter().map(|e| e.ino).collect();
        assert_eq!(inos, [1, 2, 3, 4, 5]);
        assert_eq!(entries[0].mode, 0o040755);
        assert_eq!(entries[0].nlink, 2);
        assert_eq!(entries[1].mode, 0o020600);
        assert_eq!(entries[1].rdev, (5, 1));
        assert_eq!(entries[2].mode, 0o100755);
        assert_eq!(entries[2].nlink, 1);
        assert_eq!(entries[2].data, b"#!/bin/sh\necho hi\n");
        assert!(entries[3].data.is_empty());
        assert_eq!(entries[4].mode, 0o120777);
        assert_eq!(entries[4].data, b"bin");
    }

    #[test]
    fn padding_for_all_name_and_data_lengths() {
        let mut w = CpioWriter::new();
        for n in 1..=8 {
            w.file(&"x".repeat(n), 0o644, &vec![b'a'; n]);
        }
        let out = w.finish();
        assert_eq!(out.len() % 4, 0);
        let entries = read(&out);
        assert_eq!(entries.len(), 8);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.data.len(), i + 1);
        }
    }

    #[test]
    fn deterministic() {
        assert_eq!(sample().finish(), sample().finish());
    }

    #[test]
    fn dir_all_skips_existing() {
        let mut w = CpioWriter::new();
        w.dir("usr", 0o700);
        w.dir_all("/usr/lib/modules/");
        w.dir_all("usr/lib/firmware");
        assert!(w.contains("/usr/lib/modules"));
        assert!(!w.contains("usr/share"));
        let names: Vec<_> = read(&w.finish())
            .into_iter()
            .map(|e| (e.name, e.mode))
            .collect();
        assert_eq!(
            names,
            [
                ("usr".to_owned(), 0o040700),
                ("usr/lib".to_owned(), 0o040755),
                ("usr/lib/modules".to_owned(), 0o040755),
                ("usr/lib/firmware".to_owned(), 0o040755),
            ]
        );
    }

    #[test]
    fn empty_archive_is_just_trailer() {
        assert!(read(&CpioWriter::new().finish()).is_empty());
    }
}
