//! Tracepoint record layouts, read from tracefs at run time (`events/<system>/<name>/format`)
//! and never assumed per kernel: the fields of `dma_fence_init` or `drm_vblank_event` moved
//! and changed type across kernels (`__data_loc` strings, `__rel_loc` since 5.18, a `time`
//! field that 4.x lacked), so a record is decoded by the offsets its own kernel prints.
//!
//! The text comes from the kernel, but it is parsed as untrusted input all the same: bounded
//! (the caller reads at most [`MAX_FORMAT`] bytes), every line that does not fit skipped, and
//! every offset checked against the record at decode time.

/// The most bytes of one `format` file the caller should read (the largest in a 6.12
/// kernel is under 4 KiB).
pub const MAX_FORMAT: usize = 64 * 1024;

/// How a field's bytes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer of `size` bytes (1, 2, 4 or 8), signed or not.
    Int {
        /// Whether the kernel says `signed:1`.
        signed: bool,
    },
    /// A fixed array of `size` bytes (`char comm[16]`); text up to the first NUL.
    Array,
    /// `__data_loc`: a u32 whose low 16 bits are the data's offset in the record and whose
    /// high 16 bits are its length.
    DataLoc,
    /// `__rel_loc` (5.18+): as [`FieldKind::DataLoc`], but the offset counts from the end of
    /// the u32 itself.
    RelLoc,
}

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name (`seqno`, `timeline`, `common_pid`).
    pub name: String,
    /// The C declaration's type as printed (`unsigned int`, `__data_loc char[]`).
    pub c_type: String,
    /// Byte offset in the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// How to read it.
    pub kind: FieldKind,
}

/// A tracepoint's id and record layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    /// The subsystem (the directory under `events/`: `dma_fence`, `drm`).
    pub system: String,
    /// The event name.
    pub name: String,
    /// Its id (`PERF_TYPE_TRACEPOINT`'s config, and the record's `common_type`).
    pub id: u32,
    /// Every field the kernel lists, common ones included.
    pub fields: Vec<Field>,
}

/// Why a format file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// No `ID:` line (or not a number).
    NoId,
    /// No `name:` line.
    NoName,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoId => f.write_str("no ID line"),
            Self::NoName => f.write_str("no name line"),
        }
    }
}

/// Parses one `field:...;\toffset:N;\tsize:N;\tsigned:N;` line.
fn parse_field(line: &str) -> Option<Field> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, None);
    for part in line.trim().split(';') {
        let part = part.trim();
        if let Some(d) = part.strip_prefix("field:") {
            decl = Some(d.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim().parse::<u8>().ok();
        }
    }
    let decl = decl?;
    let (offset, size) = (offset?, size?);
    // The name is the last word, less any array suffix: `char comm[16]`, `__data_loc
    // char[] name`.
    let (ty, last) = decl.rsplit_once(char::is_whitespace)?;
    let name = last.split('[').next()?.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let ty = ty.trim();
    let array = last.contains('[');
    let kind = if ty.starts_with("__data_loc") {
        FieldKind::DataLoc
    } else if ty.starts_with("__rel_loc") {
        FieldKind::RelLoc
    } else if array {
        FieldKind::Array
    } else if matches!(size, 1 | 2 | 4 | 8) {
        FieldKind::Int {
            signed: signed == Some(1),
        }
    } else {
        // A struct or an odd size: kept as bytes.
        FieldKind::Array
    };
    if matches!(kind, FieldKind::DataLoc | FieldKind::RelLoc) && size != 4 {
        return None;
    }
    let c_type = if array && !matches!(kind, FieldKind::DataLoc | FieldKind::RelLoc) {
        format!("{ty} {}", &last[last.find('[').unwrap_or(last.len())..])
    } else {
        ty.to_string()
    };
    Some(Field {
        name: name.to_string(),
        c_type,
        offset,
        size,
        kind,
    })
}

/// Parses the text of `events/<system>/<name>/format`. Field lines that do not parse are
/// left out (a decode of them then finds no such field).
///
/// # Errors
/// [`FormatError`] when the id or the name is missing.
pub fn parse(system: &str, text: &str) -> Result<EventFormat, FormatError> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(n) = t.strip_prefix("name:") {
            name = Some(n.trim().to_string());
        } else if let Some(v) = t.strip_prefix("ID:") {
            id = v.trim().parse::<u32>().ok();
        } else if t.starts_with("field:") {
            fields.extend(parse_field(t));
        } else if t.starts_with("print fmt:") {
            break;
        }
    }
    Ok(EventFormat {
        system: system.to_string(),
        name: name.ok_or(FormatError::NoName)?,
        id: id.ok_or(FormatError::NoId)?,
        fields,
    })
}

/// A decoded field value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer field (sign-extended when signed).
    Int(i64),
    /// A string field (dynamic or a char array), up to its first NUL; invalid UTF-8 is
    /// replaced. It is the kernel's copy of text a driver or a user chose (a timeline name):
    /// escape it before a terminal sees it.
    Str(String),
}

impl EventFormat {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Reads integer field `name` of `raw` (the record as `PERF_SAMPLE_RAW` gives it).
    /// `None` when there is no such integer field or the record is too short for it.
    pub fn int(&self, raw: &[u8], name: &str) -> Option<i64> {
        match self.decode(raw, self.field(name)?)? {
            Value::Int(v) => Some(v),
            Value::Str(_) => None,
        }
    }

    /// Reads string field `name` of `raw`; `None` when absent or out of the record.
    pub fn str(&self, raw: &[u8], name: &str) -> Option<String> {
        match self.decode(raw, self.field(name)?)? {
            Value::Str(s) => Some(s),
            Value::Int(_) => None,
        }
    }

    /// Decodes `f` from `raw`; `None` when any byte it needs lies outside `raw`.
    pub fn decode(&self, raw: &[u8], f: &Field) -> Option<Value> {
        let bytes = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
        match f.kind {
            FieldKind::Int { signed } => {
                let mut b = [0u8; 8];
                b[..bytes.len()].copy_from_slice(bytes);
                let u = u64::from_ne_bytes(b);
                let bits = 8 * bytes.len() as u32;
                let v = if signed && bits < 64 {
                    // Sign-extend from `bits`.
                    ((u << (64 - bits)) as i64) >> (64 - bits)
                } else {
                    u as i64
                };
                Some(Value::Int(v))
            }
            FieldKind::Array => Some(Value::Str(text(bytes))),
            FieldKind::DataLoc | FieldKind::RelLoc => {
                let loc = u32::from_ne_bytes(bytes.try_into().ok()?);
                let mut off = (loc & 0xffff) as usize;
                let len = (loc >> 16) as usize;
                if f.kind == FieldKind::RelLoc {
                    off = off.checked_add(f.offset + f.size)?;
                }
                let data = raw.get(off..off.checked_add(len)?)?;
                Some(Value::Str(text(data)))
            }
        }
    }
}

/// Text up to the first NUL, invalid UTF-8 replaced.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `events/dma_fence/dma_fence_init/format` as 6.12 prints it.
    const FENCE_INIT: &str = "name: dma_fence_init\nID: 552\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:__data_loc char[] driver;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:__data_loc char[] timeline;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int context;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int seqno;\toffset:20;\tsize:4;\tsigned:0;\n\
\n\
print fmt: \"driver=%s timeline=%s context=%u seqno=%u\", __get_str(driver), __get_str(timeline), REC->context, REC->seqno\n";

    fn record() -> Vec<u8> {
        let mut r = vec![0u8; 24];
        r[0..2].copy_from_slice(&552u16.to_ne_bytes());
        r[4..8].copy_from_slice(&(-7i32).to_ne_bytes());
        let drv = b"vgem\0";
        let tl = b"unbound\0";
        let d_off = 24u32;
        let t_off = d_off + drv.len() as u32;
        r[8..12].copy_from_slice(&(d_off | (drv.len() as u32) << 16).to_ne_bytes());
        r[12..16].copy_from_slice(&(t_off | (tl.len() as u32) << 16).to_ne_bytes());
        r[16..20].copy_from_slice(&5u32.to_ne_bytes());
        r[20..24].copy_from_slice(&0xffff_fffeu32.to_ne_bytes());
        r.extend_from_slice(drv);
        r.extend_from_slice(tl);
        r
    }

    #[test]
    fn parses_a_fence_format_and_decodes_its_record() {
        let f = parse("dma_fence", FENCE_INIT).unwrap();
        assert_eq!(
            (f.system.as_str(), f.name.as_str(), f.id),
            ("dma_fence", "dma_fence_init", 552)
        );
        assert_eq!(f.fields.len(), 8);
        let drv = f.field("driver").unwrap();
        assert_eq!(
            (drv.kind, drv.offset, drv.c_type.as_str()),
            (FieldKind::DataLoc, 8, "__data_loc char[]")
        );
        let r = record();
        assert_eq!(f.int(&r, "common_type"), Some(552));
        assert_eq!(f.int(&r, "common_pid"), Some(-7), "signed:1 sign-extends");
        assert_eq!(f.int(&r, "context"), Some(5));
        assert_eq!(
            f.int(&r, "seqno"),
            Some(0xffff_fffe),
            "unsigned stays positive"
        );
        assert_eq!(f.str(&r, "driver").as_deref(), Some("vgem"));
        assert_eq!(f.str(&r, "timeline").as_deref(), Some("unbound"));
        assert_eq!(f.int(&r, "driver"), None, "a string is not an int");
        assert_eq!(f.int(&r, "nope"), None);
    }

    #[test]
    fn out_of_record_offsets_decode_to_none() {
        let f = parse("dma_fence", FENCE_INIT).unwrap();
        let r = record();
        assert_eq!(f.int(&r[..18], "seqno"), None, "the field is past the end");
        let mut bad = r.clone();
        bad[8..12].copy_from_slice(&(0xfff0u32 | 4 << 16).to_ne_bytes());
        assert_eq!(f.str(&bad, "driver"), None, "the data is past the end");
        bad[8..12].copy_from_slice(&(24u32 | 0xffff << 16).to_ne_bytes());
        assert_eq!(f.str(&bad, "driver"), None, "the length runs past the end");
    }

    #[test]
    fn rel_loc_arrays_and_odd_lines() {
        let text = "name: e\nID: 9\nformat:\n\
\tfield:__rel_loc char[] name;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
\tfield:ktime_t time;\toffset:28;\tsize:8;\tsigned:1;\n\
\tfield:bool high_prec;\toffset:36;\tsize:1;\tsigned:0;\n\
\tfield:garbage\n\
\tfield:int bad name;\toffset:x;\tsize:4;\tsigned:1;\n\
\tfield:__data_loc char[] wide;\toffset:40;\tsize:8;\tsigned:0;\n";
        let f = parse("s", text).unwrap();
        let names: Vec<&str> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["name", "comm", "time", "high_prec"]);
        assert_eq!(f.field("comm").unwrap().c_type, "char [16]");
        let mut r = vec![0u8; 37];
        // __rel_loc: offset 25 from the end of the u32 (8 + 4 = 12), i.e. byte 37.
        r[8..12].copy_from_slice(&(25u32 | 3 << 16).to_ne_bytes());
        r[12..16].copy_from_slice(b"Xorg");
        r[28..36].copy_from_slice(&(-1i64).to_ne_bytes());
        r[36] = 1;
        r.extend_from_slice(b"ab\0");
        assert_eq!(f.str(&r, "name").as_deref(), Some("ab"));
        assert_eq!(f.str(&r, "comm").as_deref(), Some("Xorg"));
        assert_eq!(f.int(&r, "time"), Some(-1));
        assert_eq!(f.int(&r, "high_prec"), Some(1));
        assert_eq!(parse("s", "ID: 3\n"), Err(FormatError::NoName));
        assert_eq!(parse("s", "name: x\nID: q\n"), Err(FormatError::NoId));
    }
}
