//! The `IN_FORMATS` plane property blob: which format supports which modifiers.
//!
//! Layout (uapi `drm_format_modifier_blob`, version 1): a 24-byte header with the count and
//! offset of a `u32` fourcc array and of an array of 24-byte `drm_format_modifier` entries;
//! entry bit `i` of its 64-bit `formats` mask means format `offset + i` supports its
//! modifier. Every offset and count is checked against the blob's length.

/// One format with the modifiers the plane accepts for it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FormatModifiers {
    /// DRM fourcc.
    pub format: u32,
    /// Modifiers (`DRM_FORMAT_MOD_*`), in blob order.
    pub modifiers: Vec<u64>,
}

/// Why a blob is not a valid `IN_FORMATS` blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBlob(pub String);

impl core::fmt::Display for BadBlob {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad IN_FORMATS blob: {}", self.0)
    }
}

impl std::error::Error for BadBlob {}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Decodes an `IN_FORMATS` blob into (format, modifiers) pairs, in format order.
pub fn parse(blob: &[u8]) -> Result<Vec<FormatModifiers>, BadBlob> {
    let bad = |why: &str| BadBlob(why.to_string());
    let header = |i: usize| u32_at(blob, i * 4).ok_or_else(|| bad("shorter than its header"));
    let version = header(0)?;
    if version != 1 {
        return Err(BadBlob(format!("version {version} (only 1 is defined)")));
    }
    let (count_formats, formats_offset) = (header(2)? as usize, header(3)? as usize);
    let (count_modifiers, modifiers_offset) = (header(4)? as usize, header(5)? as usize);
    let in_bounds = |off: usize, n: usize, size: usize| {
        n.checked_mul(size)
            .and_then(|len| off.checked_add(len))
            .is_some_and(|end| end <= blob.len())
    };
    if !in_bounds(formats_offset, count_formats, 4) {
        return Err(bad("format array past the end"));
    }
    if !in_bounds(modifiers_offset, count_modifiers, 24) {
        return Err(bad("modifier array past the end"));
    }
    let mut out: Vec<FormatModifiers> = (0..count_formats)
        .map(|i| FormatModifiers {
            format: u32_at(blob, formats_offset + 4 * i).unwrap_or(0),
            modifiers: Vec::new(),
        })
        .collect();
    for m in 0..count_modifiers {
        let base = modifiers_offset + 24 * m;
        let mask = u64_at(blob, base).unwrap_or(0);
        let offset = u32_at(blob, base + 8).unwrap_or(0) as usize;
        let modifier = u64_at(blob, base + 16).unwrap_or(0);
        for bit in 0..64 {
            if mask & (1u64 << bit) == 0 {
                continue;
            }
            match out.get_mut(offset + bit) {
                Some(f) => f.modifiers.push(modifier),
                None => return Err(bad("modifier names a format past the format array")),
            }
        }
    }
    Ok(out)
}

/// Builds a blob in the kernel's layout (for tests and fuzzing seeds).
pub fn build(formats: &[u32], modifiers: &[(u64, u32, u64)]) -> Vec<u8> {
    let formats_offset = 24u32;
    let modifiers_offset = formats_offset + 4 * formats.len() as u32;
    let mut b = Vec::new();
    for v in [
        1,
        0,
        formats.len() as u32,
        formats_offset,
        modifiers.len() as u32,
        modifiers_offset,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for f in formats {
        b.extend_from_slice(&f.to_le_bytes());
    }
    for (mask, offset, modifier) in modifiers {
        b.extend_from_slice(&mask.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&modifier.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const XR24: u32 = 0x3432_5258;
    const AR24: u32 = 0x3432_5241;
    const NV12: u32 = 0x3231_564e;

    #[test]
    fn decodes_masks_and_offsets() {
        let b = build(&[XR24, AR24, NV12], &[(0b111, 0, 0), (0b10, 1, 7)]);
        let f = parse(&b).unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(
            f[0],
            FormatModifiers {
                format: XR24,
                modifiers: vec![0]
            }
        );
        assert_eq!(f[1].modifiers, vec![0]);
        assert_eq!(f[2].modifiers, vec![0, 7], "offset 1 + bit 1 = format 2");
    }

    #[test]
    fn refuses_what_does_not_add_up() {
        assert!(parse(&[]).is_err());
        assert!(parse(&[1, 0, 0, 0]).is_err());
        let mut b = build(&[XR24], &[(1, 0, 0)]);
        b[0] = 2;
        assert!(parse(&b).unwrap_err().0.contains("version 2"));
        let b = build(&[XR24], &[(0b10, 0, 0)]);
        assert!(
            parse(&b).is_err(),
            "bit 1 names a second format that is not there"
        );
        let mut b = build(&[XR24], &[(1, 0, 0)]);
        b.truncate(b.len() - 1);
        assert!(parse(&b).is_err(), "truncated modifier array");
        let mut b = build(&[XR24], &[]);
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&b).is_err(), "huge count");
        let mut b = build(&[XR24], &[(1, u32::MAX, 0)]);
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&b).is_err(), "huge offset");
        // Empty but well-formed.
        assert_eq!(parse(&build(&[], &[])).unwrap(), vec![]);
    }
}
