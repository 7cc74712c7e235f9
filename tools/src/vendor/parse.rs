//! Pure parsers of the kernel text vendor discovery reads: `/proc/devices`, NVIDIA's
//! per-GPU `information` files and capability files, and sysfs `dev` attributes.
//!
//! They take text (the caller bounds the read) and never panic. A figure is taken only from
//! a line whose key is exactly the one the driver prints, as plain decimal digits within the
//! range the kernel allows; a repeated key is refused (never "first wins"), and anything
//! refused keeps its value only as [`Untrusted`] (escaped when shown).

use crate::untrusted::Untrusted;
use serde::Serialize;

/// The largest character-device major (`MAJORBITS` is 12).
pub const MAX_MAJOR: u32 = (1 << 12) - 1;
/// The largest character-device minor (`MINORBITS` is 20).
pub const MAX_MINOR: u32 = (1 << 20) - 1;
/// The largest NVIDIA GPU minor: 254 and 255 are `nvidia-modeset` and `nvidiactl`.
pub const MAX_NVIDIA_GPU_MINOR: u32 = 253;
/// The largest permission bits a capability file may ask for (`07777`).
pub const MAX_MODE: u32 = 0o7777;

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ValueError {
    /// The key the figure comes from is not in the text.
    #[error("no {0:?} line")]
    Missing(&'static str),
    /// The key is there more than once (refused, never first or last wins).
    #[error("{0:?} is there more than once")]
    Duplicate(&'static str),
    /// The value is not plain decimal digits (a sign, hex, spaces, other bytes, nothing).
    #[error("{key:?} is not a plain decimal number: {value:?}")]
    NotDecimal {
        /// The key.
        key: &'static str,
        /// The value as read (escaped when shown).
        value: Untrusted,
    },
    /// The value is decimal but above the largest the kernel allows.
    #[error("{key:?} is {value}, above {max}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value as read (escaped when shown).
        value: Untrusted,
        /// The largest allowed.
        max: u32,
    },
}

/// Plain decimal digits (leading zeros allowed) no larger than `max`.
fn decimal(key: &'static str, value: &str, max: u32) -> Result<u32, ValueError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::NotDecimal {
            key,
            value: value.into(),
        });
    }
    let significant = value.trim_start_matches('0');
    let n = if significant.len() > 10 {
        None
    } else {
        value.parse::<u64>().ok()
    };
    match n {
        Some(n) if n <= u64::from(max) => Ok(n as u32),
        _ => Err(ValueError::OutOfRange {
            key,
            value: value.into(),
            max,
        }),
    }
}

/// The value of the one `key: value` line whose key (spaces and tabs trimmed) is `key`, with
/// spaces and tabs trimmed; `Missing` or `Duplicate` otherwise. Other lines are ignored.
fn unique_value<'t>(text: &'t str, key: &'static str) -> Result<&'t str, ValueError> {
    let blank = |c: char| c == ' ' || c == '\t';
    let mut found = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if k.trim_matches(blank) != key {
            continue;
        }
        if found.is_some() {
            return Err(ValueError::Duplicate(key));
        }
        found = Some(v.trim_matches(blank));
    }
    found.ok_or(ValueError::Missing(key))
}

/// The character devices of `/proc/devices` ([`parse_proc_devices`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcDevices {
    /// (major, name) of each well-formed line of the "Character devices:" section, in order.
    pub char_devices: Vec<(u32, String)>,
    /// Lines of that section that are not "`<major> <name>`" with a major in range and a
    /// name of printable ASCII.
    pub malformed: usize,
}

/// How a name was found in `/proc/devices` ([`ProcDevices::char_major`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MajorError {
    /// No character device of that name: its driver is not loaded.
    #[error("{0:?} is not in /proc/devices")]
    NotListed(&'static str),
    /// The name is there with more than one major: which one is meant is not guessed.
    #[error("{name:?} has several majors in /proc/devices: {majors:?}")]
    Ambiguous {
        /// The name.
        name: &'static str,
        /// Its majors, in order.
        majors: Vec<u32>,
    },
}

impl ProcDevices {
    /// The major of the character device named exactly `name`.
    ///
    /// # Errors
    /// [`MajorError::NotListed`] when none has that name, [`MajorError::Ambiguous`] when
    /// several different majors do.
    pub fn char_major(&self, name: &'static str) -> Result<u32, MajorError> {
        let mut majors: Vec<u32> = Vec::new();
        for (m, n) in &self.char_devices {
            if n == name && !majors.contains(m) {
                majors.push(*m);
            }
        }
        match majors[..] {
            [] => Err(MajorError::NotListed(name)),
            [m] => Ok(m),
            _ => Err(MajorError::Ambiguous { name, majors }),
        }
    }
}

/// Parses `/proc/devices`: the "`<major> <name>`" lines after "Character devices:", up to
/// "Block devices:" (block majors are another namespace and are never read).
///
/// ```
/// let d = drmtool::vendor::parse_proc_devices(
///     "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n\nBlock devices:\n509 x\n",
/// );
/// assert_eq!(d.char_major("nvidia-uvm"), Ok(509));
/// assert!(d.char_major("x").is_err());
/// ```
pub fn parse_proc_devices(text: &str) -> ProcDevices {
    let mut out = ProcDevices::default();
    let mut in_chars = false;
    for line in text.lines() {
        match line.trim() {
            "Character devices:" => in_chars = true,
            "Block devices:" => break,
            "" => {}
            t if in_chars => match proc_devices_line(t) {
                Some(entry) => out.char_devices.push(entry),
                None => out.malformed += 1,
            },
            _ => {}
        }
    }
    out
}

fn proc_devices_line(t: &str) -> Option<(u32, String)> {
    let (major, name) = t.split_once(' ')?;
    let major = decimal("major", major, MAX_MAJOR).ok()?;
    let name = name.trim_start_matches(' ');
    let printable = |b: u8| (0x21..0x7f).contains(&b);
    (!name.is_empty() && name.bytes().all(printable)).then(|| (major, name.to_string()))
}

/// What vendor discovery takes from `/proc/driver/nvidia/gpus/<bus id>/information`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NvidiaInformation {
    /// "Device Minor:": the GPU is `/dev/nvidia<minor>`, 195:`<minor>`.
    pub device_minor: u32,
}

/// Parses an NVIDIA `information` file: its one "Device Minor:" line, plain decimal in
/// `0..=253` ([`MAX_NVIDIA_GPU_MINOR`]). Other lines ("Model:", "GPU UUID:", ...) are
/// ignored.
///
/// ```
/// let info = drmtool::vendor::parse_nvidia_information(
///     "Model:           NVIDIA A100-SXM4-40GB\nBus Location:    0000:3b:00.0\nDevice Minor:    1\n",
/// )?;
/// assert_eq!(info.device_minor, 1);
/// # Ok::<(), drmtool::vendor::ValueError>(())
/// ```
///
/// # Errors
/// [`ValueError`]: the line is missing or repeated, or its value is no minor.
pub fn parse_nvidia_information(text: &str) -> Result<NvidiaInformation, ValueError> {
    const KEY: &str = "Device Minor";
    let v = unique_value(text, KEY)?;
    Ok(NvidiaInformation {
        device_minor: decimal(KEY, v, MAX_NVIDIA_GPU_MINOR)?,
    })
}

/// What a capability file under `/proc/driver/nvidia/capabilities/` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CapFile {
    /// "DeviceFileMinor:": the node is `/dev/nvidia-caps/nvidia-cap<minor>`.
    pub minor: u32,
    /// "DeviceFileMode:": the node's permission bits (`292` is `0o444`).
    pub mode: u32,
}

/// Parses an NVIDIA capability file: one "DeviceFileMinor:" and one "DeviceFileMode:"
/// line. The driver prints both with `%d`, so the mode is decimal (`292` is `0o444`, `438`
/// is `0o666`), at most `0o7777`. Other lines ("DeviceFileModify:") are ignored.
///
/// ```
/// let cap = drmtool::vendor::parse_cap_file(
///     "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
/// )?;
/// assert_eq!((cap.minor, cap.mode), (12, 0o444));
/// # Ok::<(), drmtool::vendor::ValueError>(())
/// ```
///
/// # Errors
/// [`ValueError`]: a line is missing or repeated, or a value is out of range.
pub fn parse_cap_file(text: &str) -> Result<CapFile, ValueError> {
    const MINOR: &str = "DeviceFileMinor";
    const MODE: &str = "DeviceFileMode";
    let minor = decimal(MINOR, unique_value(text, MINOR)?, MAX_MINOR)?;
    let mode = decimal(MODE, unique_value(text, MODE)?, MAX_MODE)?;
    Ok(CapFile { minor, mode })
}

/// Parses a sysfs `dev` attribute: "`MAJ:MIN`" and one optional newline.
///
/// ```
/// assert_eq!(drmtool::vendor::parse_dev("261:0\n"), Ok((261, 0)));
/// ```
///
/// # Errors
/// [`ValueError`] naming `dev`: no colon, or a part that is not decimal or out of range.
pub fn parse_dev(text: &str) -> Result<(u32, u32), ValueError> {
    const KEY: &str = "dev";
    let t = text.strip_suffix('\n').unwrap_or(text);
    let Some((major, minor)) = t.split_once(':') else {
        return Err(ValueError::NotDecimal {
            key: KEY,
            value: t.into(),
        });
    };
    Ok((
        decimal(KEY, major, MAX_MAJOR)?,
        decimal(KEY, minor, MAX_MINOR)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_DEVICES: &str = "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 \
                                /dev/tty\n 10 misc\n195 nvidia-frontend\n226 drm\n236 \
                                nvidia-caps\n237 nvidia-caps-imex-channels\n261 accel\n509 \
                                nvidia-uvm\n510 kfd\n\nBlock devices:\n  8 sd\n259 blkext\n\
                                236 nvidia-caps\n";

    #[test]
    fn proc_devices_reads_the_character_section_only() {
        let d = parse_proc_devices(PROC_DEVICES);
        assert_eq!(d.malformed, 0);
        assert_eq!(d.char_major("nvidia-uvm"), Ok(509));
        assert_eq!(
            d.char_major("nvidia-caps"),
            Ok(236),
            "block 236 not mixed in"
        );
        assert_eq!(d.char_major("nvidia-caps-imex-channels"), Ok(237));
        assert_eq!(d.char_major("/dev/tty"), Ok(5));
        assert_eq!(d.char_major("sd"), Err(MajorError::NotListed("sd")));
        assert_eq!(d.char_major("nvidia"), Err(MajorError::NotListed("nvidia")));
        assert_eq!(d.char_devices.len(), 12);
    }

    #[test]
    fn proc_devices_refuses_what_is_not_a_line_of_it() {
        let text = "  1 mem\nCharacter devices:\n-1 neg\n4096 big\n99999999999999999999 huge\n\
                    12 a\x1b[31m\n13 \n14 nul\0\n0x10 hex\n300 nvidia-uvm\n301 nvidia-uvm\n\
                    300 nvidia-uvm\nBlock devices:\n";
        let d = parse_proc_devices(text);
        assert_eq!(d.malformed, 7);
        assert!(d.char_major("mem").is_err(), "before the section");
        assert_eq!(
            d.char_major("nvidia-uvm"),
            Err(MajorError::Ambiguous {
                name: "nvidia-uvm",
                majors: vec![300, 301]
            })
        );
        let long = format!("Character devices:\n1 {}\n", "x".repeat(1 << 20));
        assert_eq!(parse_proc_devices(&long).char_devices.len(), 1);
        assert_eq!(parse_proc_devices(""), ProcDevices::default());
    }

    #[test]
    fn information_gives_the_device_minor() {
        let text = "Model:           NVIDIA A100-SXM4-80GB\nIRQ:             143\nGPU UUID:        \
                    GPU-2b0f6a0e-1c1f-4c3e-9d0b-6f1f0e5d2a11\nVideo BIOS:      92.00.45.00.06\n\
                    Bus Type:        PCIe\nDMA Size:        47 bits\nDMA Mask:        \
                    0x7fffffffffff\nBus Location:    0000:5e:00.0\nDevice Minor:    1\n\
                    GPU Excluded:    No\nSome Future Key: 7\n";
        assert_eq!(
            parse_nvidia_information(text),
            Ok(NvidiaInformation { device_minor: 1 })
        );
        assert_eq!(
            parse_nvidia_information("Device Minor: \t 0\n").map(|i| i.device_minor),
            Ok(0)
        );
        assert_eq!(
            parse_nvidia_information("Device Minor:253").map(|i| i.device_minor),
            Ok(253)
        );
    }

    #[test]
    fn information_refuses_hostile_minors() {
        let bad = |t: &str| parse_nvidia_information(t).unwrap_err();
        assert_eq!(bad("Model: x\n"), ValueError::Missing("Device Minor"));
        assert_eq!(bad(""), ValueError::Missing("Device Minor"));
        assert_eq!(
            bad("Device Minor: 0\nDevice Minor: 1\n"),
            ValueError::Duplicate("Device Minor")
        );
        for v in ["-1", "+1", "0x1", "1 2", "", "1\0", "\x1b[2J1", "١"] {
            assert!(
                matches!(
                    bad(&format!("Device Minor: {v}\n")),
                    ValueError::NotDecimal { .. }
                ),
                "{v:?}"
            );
        }
        for v in ["254", "255", "4294967296", "99999999999999999999999999"] {
            assert!(
                matches!(
                    bad(&format!("Device Minor: {v}\n")),
                    ValueError::OutOfRange { .. }
                ),
                "{v:?}"
            );
        }
        let huge = format!("Device Minor: {}\n", "9".repeat(1 << 16));
        assert!(matches!(bad(&huge), ValueError::OutOfRange { .. }));
        // A key with other bytes in it is another key.
        assert_eq!(
            bad("Device\0Minor: 1\n"),
            ValueError::Missing("Device Minor")
        );
        // What is shown of a refused value is escaped.
        let e = bad("Device Minor: \x1b]0;owned\x07\n").to_string();
        assert!(!e.contains('\x1b') && !e.contains('\x07'), "{e}");
    }

    #[test]
    fn cap_files_give_minor_and_decimal_mode() {
        let cap = parse_cap_file("DeviceFileMinor: 1\nDeviceFileMode: 438\nDeviceFileModify: 0\n");
        assert_eq!(
            cap,
            Ok(CapFile {
                minor: 1,
                mode: 0o666
            })
        );
        assert_eq!(
            parse_cap_file("DeviceFileMode: 256\nDeviceFileMinor: 1048575\n"),
            Ok(CapFile {
                minor: MAX_MINOR,
                mode: 0o400
            })
        );
        let bad = |t: &str| parse_cap_file(t).unwrap_err();
        assert_eq!(
            bad("DeviceFileMode: 292\n"),
            ValueError::Missing("DeviceFileMinor")
        );
        assert_eq!(
            bad("DeviceFileMinor: 3\n"),
            ValueError::Missing("DeviceFileMode")
        );
        assert_eq!(
            bad("DeviceFileMinor: 3\nDeviceFileMinor: 3\nDeviceFileMode: 292\n"),
            ValueError::Duplicate("DeviceFileMinor")
        );
        assert!(matches!(
            bad("DeviceFileMinor: 1048576\nDeviceFileMode: 292\n"),
            ValueError::OutOfRange { max: MAX_MINOR, .. }
        ));
        assert!(matches!(
            bad("DeviceFileMinor: 1\nDeviceFileMode: 4096\n"),
            ValueError::OutOfRange { max: MAX_MODE, .. }
        ));
        assert!(matches!(
            bad("DeviceFileMinor: -3\nDeviceFileMode: 292\n"),
            ValueError::NotDecimal { .. }
        ));
    }

    #[test]
    fn dev_attributes() {
        assert_eq!(parse_dev("261:3\n"), Ok((261, 3)));
        assert_eq!(parse_dev("240:0"), Ok((240, 0)));
        for t in [
            "",
            "\n",
            "261",
            "261:3\n\n",
            " 261:3",
            "261:-1",
            "261:3:4",
            "a:b",
            "261:\x1b",
        ] {
            assert!(
                matches!(parse_dev(t), Err(ValueError::NotDecimal { key: "dev", .. })),
                "{t:?}"
            );
        }
        assert!(matches!(
            parse_dev("4096:0"),
            Err(ValueError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_dev("1:1048576"),
            Err(ValueError::OutOfRange { .. })
        ));
    }
}
