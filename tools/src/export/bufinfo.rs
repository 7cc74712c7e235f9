//! debugfs `dma_buf/bufinfo`: every dma-buf the kernel has, held by a process or not, for
//! `drm_dmabuf_unattributed_bytes` (the dma-bufs no scanned process holds by an fd or a
//! mapping).
//!
//! The kernel's table (`dma_buf_debug_show`, drivers/dma-buf/dma-buf.c): a header line
//! naming the columns (`size`, `flags`, `mode`, `count`, `exp_name`, `ino` since 5.x,
//! `name`), one line per buffer whose fields are tab-separated (`%08zu` size first, the
//! buffer's name last), fence and attachment lines that start with a tab, a `Total N
//! devices attached` line per buffer, and a last line `Total N objects, B bytes`.
//!
//! The name is text a user sets (`DMA_BUF_SET_NAME`) and may hold a newline, and so forge
//! a line that reads like a buffer: the table is believed only when the buffers parsed
//! count and sum to exactly the kernel's last `Total` line ([`BufInfo::consistent`]).

use std::path::Path;

/// The most of `bufinfo` read: 4 MiB (about 40,000 buffers); a longer table is cut, fails
/// [`BufInfo::consistent`] and gives no series.
pub const BUFINFO_MAX: usize = 4 << 20;

/// One buffer of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufObject {
    /// Bytes.
    pub size: u64,
    /// The exporter's name (a kernel module's), escaped.
    pub exporter: String,
    /// The dma-buf file's inode, where the kernel prints the column.
    pub inode: Option<u64>,
}

/// What `bufinfo` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufInfo {
    /// The buffers, in the kernel's order.
    pub objects: Vec<BufObject>,
    /// The last `Total N objects, B bytes` line: (N, B).
    pub total: Option<(u64, u64)>,
    /// Lines that looked like a buffer and did not parse.
    pub malformed: usize,
}

impl BufInfo {
    /// Whether the buffers parsed are exactly the kernel's: as many, and the same bytes, as
    /// its `Total` line says (a forged or cut table is not).
    pub fn consistent(&self) -> bool {
        let sum = self
            .objects
            .iter()
            .try_fold(0u64, |s, o| s.checked_add(o.size));
        self.malformed == 0
            && self.total == Some((self.objects.len() as u64, sum.unwrap_or(u64::MAX)))
    }
}

/// Parses a `bufinfo` table (never fails: what does not parse is counted).
pub fn parse(text: &[u8]) -> BufInfo {
    let mut out = BufInfo::default();
    // Column positions from the header line; none until it is seen.
    let mut cols: Option<(usize, usize, Option<usize>)> = None;
    for line in text.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(line);
        if let Some(rest) = line.strip_prefix("Total ")
            && let Some((n, bytes)) = rest.split_once(" objects, ")
        {
            let b = bytes.strip_suffix(" bytes").unwrap_or("");
            out.total = n.trim().parse().ok().zip(b.trim().parse().ok());
            continue;
        }
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        if fields.first() == Some(&"size") {
            let at = |name: &str| fields.iter().position(|f| *f == name);
            cols = at("exp_name").map(|e| (0, e, at("ino")));
            continue;
        }
        // A buffer line starts with its size's digits (fence and attachment lines with a
        // tab, the per-buffer total with "Total").
        if !line.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let Some((size_at, exp_at, ino_at)) = cols else {
            out.malformed += 1;
            continue;
        };
        let size = fields.get(size_at).and_then(|s| s.parse::<u64>().ok());
        let exporter = fields.get(exp_at);
        let inode = ino_at.map(|i| fields.get(i).and_then(|s| s.parse::<u64>().ok()));
        match (size, exporter, inode) {
            (Some(size), Some(e), None | Some(Some(_))) => out.objects.push(BufObject {
                size,
                exporter: crate::Untrusted::from(*e).escaped(),
                inode: inode.flatten(),
            }),
            _ => out.malformed += 1,
        }
    }
    out
}

/// Reads `<debugfs>/dma_buf/bufinfo`, `debugfs_dri` being the DRM debugfs directory
/// (`/sys/kernel/debug/dri`, whose parent is debugfs); `None` where it cannot be read (not
/// root nor `CAP_DAC_READ_SEARCH`, debugfs not mounted).
pub fn read(debugfs_dri: &Path) -> Option<BufInfo> {
    let path = debugfs_dri.parent()?.join("dma_buf/bufinfo");
    crate::sysfs::read_bounded_bytes(&path, BUFINFO_MAX)
        .ok()
        .map(|b| parse(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured in a debian-6.12 guest (6.12.118): two vgem buffers exported through DRM
    /// PRIME (`exp_name` is drm_prime's module, `drm`).
    const GUEST: &str = "\nDma-buf Objects:\n\
        size    \tflags   \tmode    \tcount   \texp_name\tino     \tname\n\
        00004096\t00000002\t00080007\t00000003\tdrm\t00000002\t<none>\n\
        \tAttached Devices:\nTotal 0 devices attached\n\n\
        00016384\t00000002\t00080007\t00000004\tdrm\t00000001\t<none>\n\
        \tAttached Devices:\nTotal 0 devices attached\n\n\nTotal 2 objects, 20480 bytes\n";

    #[test]
    fn the_guests_table_parses_and_adds_up() {
        let b = parse(GUEST.as_bytes());
        assert_eq!(
            b.objects,
            [
                BufObject {
                    size: 4096,
                    exporter: "drm".into(),
                    inode: Some(2)
                },
                BufObject {
                    size: 16384,
                    exporter: "drm".into(),
                    inode: Some(1)
                },
            ]
        );
        assert_eq!(b.total, Some((2, 20480)));
        assert!(b.consistent());
        // No buffers at all.
        let empty = parse(
            b"\nDma-buf Objects:\nsize\tflags\tmode\tcount\texp_name\tino\tname\n\n\
              Total 0 objects, 0 bytes\n",
        );
        assert!(empty.objects.is_empty() && empty.consistent());
    }

    #[test]
    fn a_forged_or_cut_table_is_not_believed() {
        // A buffer named "x\n99999999\t...": its name's second line reads like a buffer.
        let forged = GUEST.replace(
            "00000001\t<none>\n",
            "00000001\tx\n99999999\t00000002\t00080007\t00000001\tdrm\t00000009\ty\n",
        );
        let b = parse(forged.as_bytes());
        assert_eq!(b.objects.len(), 3);
        assert!(!b.consistent(), "three buffers against the kernel's two");
        // Cut before the total (a table beyond BUFINFO_MAX): no total, not believed.
        let cut = &GUEST[..GUEST.find("\n\n\nTotal 2").unwrap()];
        assert!(!parse(cut.as_bytes()).consistent());
        // A buffer line before any header, or with a size that is not a number.
        assert_eq!(parse(b"00004096\t0\t0\t1\tdrm\t1\tn\n").malformed, 1);
        let bad = GUEST.replace("00004096\t", "0000x096\t");
        assert!(!parse(bad.as_bytes()).consistent());
        // Control bytes in an exporter's name are escaped.
        let esc = GUEST.replace("\tdrm\t00000002", "\td\x1b[2Jm\t00000002");
        assert_eq!(parse(esc.as_bytes()).objects[0].exporter, "d\\x1b[2Jm");
    }

    #[test]
    fn a_kernel_without_the_inode_column_gives_buffers_without_inodes() {
        let old = "\nDma-buf Objects:\nsize\tflags\tmode\tcount\texp_name\n\
                   00004096\t00000002\t00080007\t00000003\ti915\n\
                   \tAttached Devices:\nTotal 0 devices attached\n\nTotal 1 objects, 4096 bytes\n";
        let b = parse(old.as_bytes());
        assert_eq!(b.objects[0].inode, None);
        assert_eq!(b.objects[0].exporter, "i915");
        assert!(b.consistent());
    }
}
