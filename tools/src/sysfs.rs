//! Bounded reads of the text the kernel publishes (sysfs, procfs), and what sysfs says of
//! a PCI function: its bus id, vendor and device ids, NUMA node, local CPUs and the driver
//! bound to it.
//!
//! The GPU ordering ([`crate::gpu`]) and the vendor node discovery ([`crate::vendor`]) both
//! read these; they live here so that neither imports the other for them. Every read is
//! bounded, and text that is not what the kernel writes reads as absent (`None`), never as
//! a guess.
//!
//! ```
//! use drmtool::sysfs::{PciFunction, bus_id_of, is_bus_id};
//! assert!(is_bus_id("0000:3b:00.0"));
//! let virtio = std::path::Path::new("/sys/devices/pci0000:00/0000:00:05.0/virtio2");
//! assert_eq!(bus_id_of(virtio).as_deref(), Some("0000:00:05.0"));
//! // A function sysfs does not have: every field unknown.
//! let f = PciFunction::read(std::path::Path::new("/nonexistent"), "0000:3b:00.0");
//! assert_eq!(f, PciFunction::default());
//! ```

use std::path::Path;

/// At most this many bytes of a sysfs attribute are read.
pub const ATTR_MAX: usize = 4096;

/// The longest driver name taken from a `driver` link (the kernel's are far shorter).
pub const DRIVER_NAME_MAX: usize = 64;

/// Reads at most `max` bytes of `path`.
///
/// # Errors
/// The open or read error.
pub fn read_bounded_bytes(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut s = Vec::new();
    std::fs::File::open(path)?
        .take(max as u64)
        .read_to_end(&mut s)?;
    Ok(s)
}

/// A sysfs attribute's text, trimmed: at most [`ATTR_MAX`] bytes; `None` when it cannot be
/// read or is not UTF-8.
pub fn attr(path: &Path) -> Option<String> {
    let b = read_bounded_bytes(path, ATTR_MAX).ok()?;
    Some(String::from_utf8(b).ok()?.trim().to_string())
}

/// Whether `s` is a PCI bus id with its domain (`0000:00:04.0`).
pub fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10 | 11) || c.is_ascii_hexdigit())
}

/// The nearest PCI function above (or at) a canonical sysfs device path.
pub fn bus_id_of(device: &Path) -> Option<String> {
    device
        .components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| is_bus_id(c))
        .map(|c| c.to_ascii_lowercase())
}

/// The name of the driver bound to the sysfs device `device`: the last component of its
/// `driver` link, where that is a plain name (printable ASCII, no `/`, at most
/// [`DRIVER_NAME_MAX`] bytes); `None` without a link (no driver bound).
pub fn driver_of(device: &Path) -> Option<String> {
    // readlink(2) returns at most PATH_MAX bytes: the read is bounded by the kernel.
    let target = std::fs::read_link(device.join("driver")).ok()?;
    target
        .file_name()?
        .to_str()
        .filter(|s| {
            !s.is_empty()
                && s.len() <= DRIVER_NAME_MAX
                && s.bytes().all(|b| (0x21..0x7f).contains(&b))
        })
        .map(str::to_string)
}

/// What sysfs says of one PCI function (`<sys_root>/bus/pci/devices/<bus id>`); each field
/// `None` where its file is missing or does not hold what the kernel writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciFunction {
    /// `vendor` and `device` (`0x10de`, `0x20b0`).
    pub pci_id: Option<(u16, u16)>,
    /// `numa_node` (`None` where the kernel says -1).
    pub numa_node: Option<u32>,
    /// `local_cpulist`, as the kernel prints it (`0-15,32-47`).
    pub local_cpulist: Option<String>,
    /// The driver bound to it ([`driver_of`]).
    pub driver: Option<String>,
}

/// The sysfs directory of the PCI function `bus_id` under `sys_root` (a link into
/// `devices/`).
pub fn function_dir(sys_root: &Path, bus_id: &str) -> std::path::PathBuf {
    sys_root.join("bus/pci/devices").join(bus_id)
}

/// A device directory's `numa_node`: `None` where the kernel says -1 or the text is not a
/// node number.
pub fn numa_node_of(dir: &Path) -> Option<u32> {
    attr(&dir.join("numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|v| u32::try_from(v).ok())
}

impl PciFunction {
    /// Reads the function `bus_id` under `sys_root` (`/sys` on a real machine).
    pub fn read(sys_root: &Path, bus_id: &str) -> PciFunction {
        let dir = function_dir(sys_root, bus_id);
        let hex = |f: &str| {
            attr(&dir.join(f)).and_then(|s| {
                let digits = s.strip_prefix("0x").unwrap_or(&s);
                (digits.len() <= 4)
                    .then(|| u16::from_str_radix(digits, 16).ok())
                    .flatten()
            })
        };
        PciFunction {
            pci_id: hex("vendor").zip(hex("device")),
            numa_node: numa_node_of(&dir),
            local_cpulist: attr(&dir.join("local_cpulist")),
            driver: driver_of(&dir),
        }
    }
}

/// Writes a sorted list of numbers as ranges (`0-3,8`), as the kernel writes a CPU list.
pub fn cpu_ranges(v: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_found_above_the_device() {
        assert_eq!(
            bus_id_of(Path::new("/sys/devices/pci0000:00/0000:00:04.0/virtio2")).as_deref(),
            Some("0000:00:04.0")
        );
        assert_eq!(bus_id_of(Path::new("/sys/devices/platform/vkms")), None);
        assert!(is_bus_id("0000:03:00.1"));
        assert!(!is_bus_id("0000:03:00.8"));
        assert!(!is_bus_id("pci0000:00"));
    }

    /// A synthetic function: every attribute read, a hostile driver link refused.
    #[test]
    fn a_pci_function_is_read_from_its_attributes() {
        let root = std::env::temp_dir().join(format!("drmtool-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices/pci0000:00/0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/drivers/nvidia")).unwrap();
        std::os::unix::fs::symlink(&dev, root.join("bus/pci/devices/0000:3b:00.0")).unwrap();
        std::os::unix::fs::symlink(root.join("bus/pci/drivers/nvidia"), dev.join("driver"))
            .unwrap();
        for (f, t) in [
            ("vendor", "0x10de\n"),
            ("device", "0x20b0\n"),
            ("numa_node", "1\n"),
            ("local_cpulist", "16-31\n"),
        ] {
            std::fs::write(dev.join(f), t).unwrap();
        }
        let f = PciFunction::read(&root, "0000:3b:00.0");
        assert_eq!(
            f,
            PciFunction {
                pci_id: Some((0x10de, 0x20b0)),
                numa_node: Some(1),
                local_cpulist: Some("16-31".into()),
                driver: Some("nvidia".into()),
            }
        );
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        std::fs::write(dev.join("vendor"), "0x10de10de\n").unwrap();
        std::fs::remove_file(dev.join("driver")).unwrap();
        std::os::unix::fs::symlink("../drivers/a\u{1b}b", dev.join("driver")).unwrap();
        let f = PciFunction::read(&root, "0000:3b:00.0");
        assert_eq!((f.pci_id, f.numa_node, f.driver), (None, None, None));
        let _ = std::fs::remove_dir_all(&root);
    }
}
