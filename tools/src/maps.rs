//! Parser for `/proc/<pid>/maps`, keeping the mappings that show GPU memory: mmaps of a DRM
//! node (`/dev/dri/...`, one per mapped buffer, at the buffer's fake offset) and of a
//! dma-buf (`/dmabuf:<name>`, or `anon_inode:dmabuf` on older kernels), and the shmem files
//! behind GEM objects (`/drm mm object`, how 5.10 shows a dma-buf mmap of a shmem buffer).
//!
//! Line format (proc(5)): `start-end perms offset major:minor inode [pathname]`, addresses
//! and offset in hex, the inode in decimal, the pathname padded with spaces and possibly
//! followed by ` (deleted)`.

use crate::fdinfo::Malformed;
use crate::field::FieldError;
use serde::Serialize;

/// What a GPU-related mapping maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Target {
    /// A DRM node (a GEM object at `offset` on that device).
    Drm {
        /// The node's path, as the kernel printed it.
        path: String,
    },
    /// A dma-buf.
    DmaBuf {
        /// Its name (after `/dmabuf:`), empty when it has none.
        name: String,
    },
    /// The shmem file behind a GEM object (`/drm mm object`): what a dma-buf mmap of a
    /// shmem-backed buffer shows on older kernels, which swap the mapping's file.
    GemShmem,
}

/// One GPU-related mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuMapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp`/`rwxs` string.
    pub perms: String,
    /// File offset (for DRM nodes the buffer's fake mmap offset).
    pub offset: u64,
    /// Device of the mapped file (`major:minor` of its filesystem).
    pub dev: (u32, u32),
    /// Inode of the mapped file (for dma-bufs, the buffer's inode).
    pub inode: u64,
    /// What it maps.
    pub target: Target,
}

impl GpuMapping {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Always false: the parser rejects empty ranges.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The GPU-related mappings of one process, with the lines that could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Maps {
    /// DRM and dma-buf mappings, in file order.
    pub gpu: Vec<GpuMapping>,
    /// How many lines were read in all.
    pub lines: usize,
    /// Lines that were not in the documented format: truncated lines, and lines mapping GPU
    /// memory whose fields do not parse (other lines' fields are not checked).
    pub malformed: Vec<Malformed>,
}

/// Parses the text of a maps file.
pub fn parse(text: &str) -> Maps {
    parse_bytes(text.as_bytes())
}

/// Parses the bytes of a maps file as read (a pathname need not be UTF-8; only lines that
/// map GPU memory are converted, lossily).
///
/// Each line is split into its five fields with a byte loop and only its pathname is looked
/// at; the full [`parse_line`] runs on lines that map GPU memory.
pub fn parse_bytes(text: &[u8]) -> Maps {
    let mut out = Maps::default();
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(k) => (&rest[..k], &rest[k + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        out.lines += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let as_text = || String::from_utf8_lossy(line);
        match pathname(line) {
            None => out
                .malformed
                .push(Malformed::new(out.lines, &as_text(), "truncated line")),
            Some(path) if is_gpu_path(path) => match parse_line(&as_text()) {
                Ok(Some(m)) => out.gpu.push(m),
                Ok(None) => {}
                Err(why) => out
                    .malformed
                    .push(Malformed::new(out.lines, &as_text(), why)),
            },
            Some(_) => {}
        }
    }
    out
}

/// The pathname of a maps line (empty for anonymous memory), after its five fields; `None`
/// when a field is missing.
fn pathname(line: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    for _ in 0..5 {
        while i < line.len() && line[i] == b' ' {
            i += 1;
        }
        let start = i;
        while i < line.len() && line[i] != b' ' {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    while i < line.len() && line[i] == b' ' {
        i += 1;
    }
    Some(&line[i..])
}

/// Whether [`target_of`] would find GPU memory behind `path`.
fn is_gpu_path(path: &[u8]) -> bool {
    path.starts_with(b"/dev/dri/")
        || path.starts_with(b"/dmabuf:")
        || path.starts_with(b"/drm mm object")
        || path.starts_with(b"anon_inode:dmabuf")
}

fn hex(s: &str, what: &'static str) -> Result<u64, FieldError> {
    u64::from_str_radix(s, 16).map_err(|_| FieldError::bad(what, s))
}

/// What a mapped path is, when it is GPU memory.
fn target_of(path: &str) -> Option<Target> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if path.starts_with("/dev/dri/") {
        Some(Target::Drm {
            path: path.to_string(),
        })
    } else if let Some(name) = path.strip_prefix("/dmabuf:") {
        Some(Target::DmaBuf {
            name: name.to_string(),
        })
    } else if path.starts_with("/drm mm object") {
        Some(Target::GemShmem)
    } else if path == "anon_inode:dmabuf" {
        Some(Target::DmaBuf {
            name: String::new(),
        })
    } else {
        None
    }
}

/// Parses one line; `Ok(None)` for a line that maps no GPU memory.
///
/// Every line must have the five fields before the pathname (else it is truncated); the
/// fields themselves are checked only on lines that map GPU memory: a scan reads the maps
/// of every process, and most of their lines are libraries it would parse for nothing.
pub fn parse_line(line: &str) -> Result<Option<GpuMapping>, FieldError> {
    let mut rest = line;
    let mut field = || -> Result<&str, FieldError> {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        if end == 0 {
            return Err(FieldError::Truncated);
        }
        let (f, r) = t.split_at(end);
        rest = r;
        Ok(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let path = rest.trim_start_matches(' ');
    let Some(target) = target_of(path) else {
        return Ok(None);
    };

    let (s, e) = range.split_once('-').ok_or(FieldError::NoSeparator {
        what: "address range",
        sep: '-',
    })?;
    let (start, end) = (hex(s, "start address")?, hex(e, "end address")?);
    if end <= start {
        return Err(FieldError::EmptyRange(range.into()));
    }
    if perms.len() != 4 {
        return Err(FieldError::Permissions(perms.into()));
    }
    let offset = hex(offset, "offset")?;
    let (ma, mi) = dev.split_once(':').ok_or(FieldError::NoSeparator {
        what: "device",
        sep: ':',
    })?;
    let dev = (
        u32::from_str_radix(ma, 16).map_err(|_| FieldError::bad("major", ma))?,
        u32::from_str_radix(mi, 16).map_err(|_| FieldError::bad("minor", mi))?,
    );
    let inode: u64 = inode.parse().map_err(|_| FieldError::bad("inode", inode))?;
    Ok(Some(GpuMapping {
        start,
        end,
        perms: perms.to_string(),
        offset,
        dev,
        inode,
        target,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drm_line() {
        let m = parse_line("7f00c0000000-7f00c0010000 rw-s 100000000 00:05 127   /dev/dri/card0")
            .unwrap()
            .unwrap();
        assert_eq!(m.len(), 0x10000);
        assert_eq!(m.offset, 0x1_0000_0000);
        assert_eq!(m.dev, (0, 5));
        assert_eq!(
            m.target,
            Target::Drm {
                path: "/dev/dri/card0".into()
            }
        );
    }

    #[test]
    fn bytes_that_are_not_utf8() {
        let text = b"55d0-55e0 r--p 00000000 08:01 1234 /usr/lib/\xff\xfe.so\n\
                     7f00-7f01 rw-s 100000000 00:05 127 /dev/dri/card\xff\n\
                     7f10-7f20 rw-s 100001000 00:05 127 /dev/dri/card0\r\n\
                     7f20-7f30 rw-s\n";
        let m = parse_bytes(text);
        assert_eq!(m.lines, 4);
        assert_eq!(m.gpu.len(), 2, "{m:?}");
        assert_eq!(
            m.gpu[0].target,
            Target::Drm {
                path: "/dev/dri/card\u{fffd}".into()
            },
            "a GPU path that is not UTF-8 is converted lossily"
        );
        assert_eq!(m.gpu[1].offset, 0x1_0000_1000);
        let bad: Vec<usize> = m.malformed.iter().map(|x| x.line).collect();
        assert_eq!(bad, vec![4]);
        // The same as the text parser where the text is UTF-8.
        let utf8 = "7f10-7f20 rw-s 100001000 00:05 127 /dev/dri/card0\n\nx\n";
        assert_eq!(parse(utf8), parse_bytes(utf8.as_bytes()));
        assert_eq!(parse(utf8).malformed[0].line, 3);
    }

    #[test]
    fn other_lines() {
        assert_eq!(
            parse_line("55d0-55e0 r--p 00000000 08:01 1234 /usr/bin/true"),
            Ok(None)
        );
        assert_eq!(parse_line("7ffd-7ffe rw-p 00000000 00:00 0 "), Ok(None));
        assert!(parse_line("7ffd-7ffe rw-p").is_err());
    }
}
