//! A small EDID (1.3/1.4 base block) decoder: identity, physical size and the preferred
//! mode. Every field read is bounds-checked; extension blocks are counted, not decoded.

/// What the base block of an EDID says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Edid {
    /// EDID version and revision (1, 4).
    pub version: (u8, u8),
    /// Three-letter PNP manufacturer id (`"RHT"` for QEMU).
    pub manufacturer: String,
    /// Manufacturer's product code.
    pub product: u16,
    /// Serial number (0 when unset).
    pub serial: u32,
    /// Year of manufacture (or model year).
    pub year: u16,
    /// Monitor name descriptor (tag 0xFC), if any.
    pub name: Option<String>,
    /// Serial string descriptor (tag 0xFF), if any.
    pub serial_text: Option<String>,
    /// Maximum image size in centimetres (0 when unknown or variable).
    pub size_cm: (u8, u8),
    /// The first detailed timing: the preferred mode, as (width, height, pixel clock kHz,
    /// refresh in mHz).
    pub preferred: Option<(u16, u16, u32, u32)>,
    /// Extension blocks announced.
    pub extensions: u8,
    /// Whether the base block's checksum is right.
    pub checksum_ok: bool,
}

/// Why bytes are not an EDID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEdid(pub &'static str);

impl core::fmt::Display for BadEdid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad EDID: {}", self.0)
    }
}

impl std::error::Error for BadEdid {}

const HEADER: [u8; 8] = [0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];

/// Decodes the base block of `bytes` (at least 128 bytes, starting with the EDID header).
pub fn parse(bytes: &[u8]) -> Result<Edid, BadEdid> {
    let b: &[u8; 128] = bytes
        .get(..128)
        .and_then(|s| s.try_into().ok())
        .ok_or(BadEdid("shorter than 128 bytes"))?;
    if b[..8] != HEADER {
        return Err(BadEdid("no EDID header"));
    }
    let id = u16::from_be_bytes([b[8], b[9]]);
    let letter = |shift: u16| {
        let v = ((id >> shift) & 0x1f) as u8;
        if (1..=26).contains(&v) {
            char::from(b'A' + v - 1)
        } else {
            '?'
        }
    };
    let manufacturer: String = [letter(10), letter(5), letter(0)].iter().collect();
    let mut name = None;
    let mut serial_text = None;
    let mut preferred = None;
    for d in b[54..126].chunks_exact(18) {
        if d[0] == 0 && d[1] == 0 {
            let text = || {
                let t = &d[5..18];
                let end = t.iter().position(|&c| c == 0x0a).unwrap_or(t.len());
                String::from_utf8_lossy(&t[..end]).trim_end().to_string()
            };
            match d[3] {
                0xfc => name = Some(text()),
                0xff => serial_text = Some(text()),
                _ => {}
            }
        } else if preferred.is_none() {
            let clock_khz = u32::from(u16::from_le_bytes([d[0], d[1]])) * 10;
            let hactive = u16::from(d[2]) | (u16::from(d[4] & 0xf0) << 4);
            let hblank = u16::from(d[3]) | (u16::from(d[4] & 0x0f) << 8);
            let vactive = u16::from(d[5]) | (u16::from(d[7] & 0xf0) << 4);
            let vblank = u16::from(d[6]) | (u16::from(d[7] & 0x0f) << 8);
            let total = u64::from(hactive + hblank) * u64::from(vactive + vblank);
            let refresh_mhz = (u64::from(clock_khz) * 1_000_000)
                .checked_div(total)
                .map_or(0, |r| u32::try_from(r).unwrap_or(u32::MAX));
            preferred = Some((hactive, vactive, clock_khz, refresh_mhz));
        }
    }
    let sum = b.iter().fold(0u8, |s, &v| s.wrapping_add(v));
    Ok(Edid {
        version: (b[18], b[19]),
        manufacturer,
        product: u16::from_le_bytes([b[10], b[11]]),
        serial: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        year: 1990 + u16::from(b[17]),
        name,
        serial_text,
        size_cm: (b[21], b[22]),
        preferred,
        extensions: b[126],
        checksum_ok: sum == 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A base block written for this test: manufacturer "RHT", product 0x1234, 1024x768
    /// at 65 MHz (1344x806 total), name "QEMU Monitor", 30x23 cm.
    pub(crate) fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 128];
        b[..8].copy_from_slice(&HEADER);
        let id: u16 = (18 << 10) | (8 << 5) | 20; // R H T
        b[8..10].copy_from_slice(&id.to_be_bytes());
        b[10..12].copy_from_slice(&0x1234u16.to_le_bytes());
        b[12..16].copy_from_slice(&7u32.to_le_bytes());
        b[17] = 34; // 2024
        b[18] = 1;
        b[19] = 4;
        b[21] = 30;
        b[22] = 23;
        let dtd = &mut b[54..72];
        dtd[0..2].copy_from_slice(&6500u16.to_le_bytes());
        dtd[2] = (1024 & 0xff) as u8;
        dtd[3] = (320 & 0xff) as u8;
        dtd[4] = (((1024 >> 8) << 4) | (320 >> 8)) as u8;
        dtd[5] = (768 & 0xff) as u8;
        dtd[6] = 38;
        dtd[7] = ((768 >> 8) << 4) as u8;
        let name = &mut b[72..90];
        name[3] = 0xfc;
        name[5..18].copy_from_slice(b"QEMU Monitor\n");
        let sum = b.iter().fold(0u8, |s, &v| s.wrapping_add(v));
        b[127] = 0u8.wrapping_sub(sum);
        b
    }

    #[test]
    fn decodes_identity_size_and_preferred_mode() {
        let e = parse(&sample()).unwrap();
        assert_eq!(e.manufacturer, "RHT");
        assert_eq!((e.product, e.serial, e.year), (0x1234, 7, 2024));
        assert_eq!(e.version, (1, 4));
        assert_eq!(e.name.as_deref(), Some("QEMU Monitor"));
        assert_eq!(e.size_cm, (30, 23));
        assert_eq!(e.preferred, Some((1024, 768, 65000, 60003)));
        assert!(e.checksum_ok);
    }

    #[test]
    fn refuses_or_flags_bad_input() {
        assert_eq!(parse(&[0; 10]), Err(BadEdid("shorter than 128 bytes")));
        assert_eq!(parse(&[0; 128]), Err(BadEdid("no EDID header")));
        let mut b = sample();
        b[100] ^= 1;
        assert!(!parse(&b).unwrap().checksum_ok);
        // Garbage manufacturer letters and a zero timing do not panic.
        let mut b = sample();
        b[8] = 0xff;
        b[9] = 0xff;
        b[54..72].fill(0xff);
        let e = parse(&b).unwrap();
        assert_eq!(e.manufacturer.len(), 3);
    }
}
