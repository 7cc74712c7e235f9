//! Parsers for the DRM debugfs files under `/sys/kernel/debug/dri/<minor>/`: `clients`
//! (one line per open file), `gem_names` (flink-named objects only, not an inventory) and
//! `framebuffer` (every framebuffer and the GEM objects behind it).
//!
//! Formats (drivers/gpu/drm/drm_debugfs.c, drm_framebuffer.c, drm_gem.c):
//! - `clients`: a header ` command  tgid dev master a   uid      magic` (`pid` instead of
//!   `tgid` on older kernels, a trailing `name` column since 6.13), then one row per client;
//!   the command is right-aligned and may contain spaces, so rows are read from the right.
//! - `gem_names`: header `  name     size handles refcount`, rows of four integers.
//! - `framebuffer`: blocks `framebuffer[<id>]:` followed by tab-indented `key=value` lines
//!   (`allocated by = <comm>`, `refcount=`, `format=`, `modifier=`, `size=WxH`, `layers:`,
//!   then per plane `size[i]=`, `pitch[i]=`, `offset[i]=`, `obj[i]:` and the object's
//!   `name=`, `refcount=`, `start=`, `size=`, `imported=`).

use crate::fdinfo::Malformed;
use crate::field::FieldError;
use serde::Serialize;

/// One row of `clients`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Client {
    /// The task's command name.
    pub command: String,
    /// The id column as printed: the process (`tgid` header, 6.x) or, on kernels whose
    /// header says `pid` (5.10, 6.1), the *thread* that opened the file.
    pub id: u32,
    /// Which id the kernel printed: `tgid` or `pid` (a thread id).
    pub id_column: String,
    /// The minor the file was opened on.
    pub minor: u32,
    /// Whether it is the DRM master.
    pub master: bool,
    /// Whether it is authenticated.
    pub authenticated: bool,
    /// Its uid.
    pub uid: u32,
    /// Its auth magic.
    pub magic: u32,
    /// `name` column (6.13+): the client name, `<unset>` when none.
    pub name: Option<String>,
    /// `id` column (7.3 prints it after `name`): the file's `drm-client-id`, which joins
    /// the row to the fdinfo of the fds that hold it.
    pub client_id: Option<u64>,
}

/// A parsed `clients` file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Clients {
    /// Rows.
    pub clients: Vec<Client>,
    /// Unreadable rows (and a missing header).
    pub malformed: Vec<Malformed>,
}

fn yn(s: &str) -> Result<bool, FieldError> {
    match s {
        "y" => Ok(true),
        "n" => Ok(false),
        _ => Err(FieldError::NotYesNo(s.into())),
    }
}

/// Parses `clients`.
pub fn parse_clients(text: &str) -> Clients {
    let mut out = Clients::default();
    let mut lines = text.lines().enumerate();
    let (trailing, id_column) = loop {
        match lines.next() {
            None => return out,
            Some((_, l)) if l.trim().is_empty() => continue,
            Some((i, l)) => {
                let cols: Vec<&str> = l.split_whitespace().collect();
                if cols.first() != Some(&"command") {
                    out.malformed.push(Malformed::new(
                        i + 1,
                        l,
                        "missing the `command ...` header",
                    ));
                    return out;
                }
                let id_column = if cols.contains(&"tgid") {
                    "tgid"
                } else {
                    "pid"
                };
                // The columns after `magic`: none (before 6.13), `name`, or `name id` (7.3).
                let trailing = match cols.iter().position(|c| *c == "magic") {
                    Some(m) => match &cols[m + 1..] {
                        [] => Trailing::None,
                        ["name"] => Trailing::Name,
                        ["name", "id"] => Trailing::NameId,
                        _ => {
                            out.malformed.push(Malformed::new(
                                i + 1,
                                l,
                                "unknown columns after `magic` in the header",
                            ));
                            return out;
                        }
                    },
                    None => {
                        out.malformed.push(Malformed::new(
                            i + 1,
                            l,
                            "no `magic` column in the header",
                        ));
                        return out;
                    }
                };
                break (trailing, id_column);
            }
        }
    };
    for (i, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        match client_row(l, trailing, id_column) {
            Ok(c) => out.clients.push(c),
            Err(why) => out.malformed.push(Malformed::new(i + 1, l, why)),
        }
    }
    out
}

/// What a `clients` header has after `magic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trailing {
    None,
    Name,
    NameId,
}

fn client_row(l: &str, trailing: Trailing, id_column: &'static str) -> Result<Client, FieldError> {
    let mut cols: Vec<&str> = l.split_whitespace().collect();
    let client_id = if trailing == Trailing::NameId {
        let id = cols.pop().ok_or(FieldError::EmptyName("row"))?;
        Some(id.parse::<u64>().map_err(|_| FieldError::bad("id", id))?)
    } else {
        None
    };
    let name = if trailing == Trailing::None {
        None
    } else {
        Some(cols.pop().ok_or(FieldError::EmptyName("row"))?.to_string())
    };
    if cols.len() < 7 {
        return Err(FieldError::Columns {
            expected: 7,
            got: cols.len(),
        });
    }
    let tail = cols.split_off(cols.len() - 6);
    let num = |s: &str, what| s.parse::<u32>().map_err(|_| FieldError::bad(what, s));
    Ok(Client {
        command: cols.join(" "),
        id: num(tail[0], id_column)?,
        id_column: id_column.to_string(),
        minor: num(tail[1], "minor")?,
        master: yn(tail[2])?,
        authenticated: yn(tail[3])?,
        uid: num(tail[4], "uid")?,
        magic: num(tail[5], "magic")?,
        name,
        client_id,
    })
}

/// One row of `gem_names`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GemName {
    /// The flink name.
    pub name: u32,
    /// Size in bytes.
    pub size: u64,
    /// Handle count.
    pub handles: u32,
    /// Reference count.
    pub refcount: u32,
}

/// A parsed `gem_names` file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GemNames {
    /// Rows.
    pub names: Vec<GemName>,
    /// Unreadable rows.
    pub malformed: Vec<Malformed>,
}

/// Parses `gem_names`.
pub fn parse_gem_names(text: &str) -> GemNames {
    let mut out = GemNames::default();
    for (i, l) in text.lines().enumerate() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.is_empty() || cols.first() == Some(&"name") {
            continue;
        }
        let row = || -> Result<GemName, FieldError> {
            let [name, size, handles, refcount] = cols.as_slice() else {
                return Err(FieldError::Columns {
                    expected: 4,
                    got: cols.len(),
                });
            };
            let bad = FieldError::bad;
            Ok(GemName {
                name: name.parse().map_err(|_| bad("name", name))?,
                size: size.parse().map_err(|_| bad("size", size))?,
                handles: handles.parse().map_err(|_| bad("handles", handles))?,
                refcount: refcount.parse().map_err(|_| bad("refcount", refcount))?,
            })
        };
        match row() {
            Ok(r) => out.names.push(r),
            Err(why) => out.malformed.push(Malformed::new(i + 1, l, why)),
        }
    }
    out
}

/// A GEM object behind a framebuffer plane.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FbObject {
    /// Plane index.
    pub plane: u32,
    /// flink name (0 when none).
    pub name: Option<u32>,
    /// Size in bytes.
    pub size: Option<u64>,
    /// Whether it was imported from a dma-buf.
    pub imported: Option<bool>,
}

/// One framebuffer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Framebuffer {
    /// Mode-object id.
    pub id: u32,
    /// Command name of the task that created it.
    pub allocated_by: Option<String>,
    /// `WxH`.
    pub width: Option<u32>,
    /// Height in pixels.
    pub height: Option<u32>,
    /// The format as printed (`XR24 little-endian (0x34325258)`).
    pub format: Option<String>,
    /// GEM objects (one per plane that has one).
    pub objects: Vec<FbObject>,
}

/// A parsed `framebuffer` file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Framebuffers {
    /// Framebuffers in file order.
    pub framebuffers: Vec<Framebuffer>,
    /// Unreadable lines.
    pub malformed: Vec<Malformed>,
}

/// Parses `framebuffer`.
pub fn parse_framebuffers(text: &str) -> Framebuffers {
    let mut out = Framebuffers::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(id) = l
            .strip_prefix("framebuffer[")
            .and_then(|r| r.strip_suffix("]:"))
        {
            match id.parse() {
                Ok(id) => out.framebuffers.push(Framebuffer {
                    id,
                    ..Default::default()
                }),
                Err(_) => {
                    out.malformed
                        .push(Malformed::new(n, raw, format!("bad framebuffer id {id:?}")))
                }
            }
            continue;
        }
        let Some(fb) = out.framebuffers.last_mut() else {
            out.malformed
                .push(Malformed::new(n, raw, "line before any `framebuffer[N]:`"));
            continue;
        };
        if let Some(who) = l.strip_prefix("allocated by =") {
            fb.allocated_by = Some(who.trim().to_string());
            continue;
        }
        if l == "layers:" {
            continue;
        }
        if let Some(p) = l.strip_prefix("obj[").and_then(|r| r.split_once("]:")) {
            match p.0.parse() {
                Ok(plane) if p.1.trim().is_empty() => fb.objects.push(FbObject {
                    plane,
                    ..Default::default()
                }),
                Ok(_) => {} // `obj[i]:(null)`: no object on this plane
                Err(_) => out
                    .malformed
                    .push(Malformed::new(n, raw, "bad plane index")),
            }
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            out.malformed
                .push(Malformed::new(n, raw, "expected `key=value`"));
            continue;
        };
        // Keys after `obj[i]:` (two tabs deeper) describe that object.
        let in_obj = raw.starts_with("\t\t\t") && !fb.objects.is_empty();
        let r: Result<(), FieldError> = match (in_obj, k) {
            (true, "name") => v
                .parse()
                .map(|x| fb.objects.last_mut().map(|o| o.name = Some(x)))
                .map(drop)
                .map_err(|_| FieldError::bad("name", v)),
            (true, "size") => v
                .parse()
                .map(|x| fb.objects.last_mut().map(|o| o.size = Some(x)))
                .map(drop)
                .map_err(|_| FieldError::bad("size", v)),
            (true, "imported") => {
                let b = v == "yes";
                if let Some(o) = fb.objects.last_mut() {
                    o.imported = Some(b);
                }
                Ok(())
            }
            (false, "size") => match v.split_once('x').map(|(w, h)| (w.parse(), h.parse())) {
                Some((Ok(w), Ok(h))) => {
                    fb.width = Some(w);
                    fb.height = Some(h);
                    Ok(())
                }
                _ => Err(FieldError::bad("size", v)),
            },
            (false, "format") => {
                fb.format = Some(v.to_string());
                Ok(())
            }
            _ => Ok(()), // refcount, modifier, pitch[i], offset[i], start, driver extras
        };
        if let Err(why) = r {
            out.malformed.push(Malformed::new(n, raw, why));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_612() {
        let c = parse_clients(
            "             command  tgid dev master a   uid      magic\n\
             \x20           probe.sh   191   0   y    y     0          0\n",
        );
        assert!(c.malformed.is_empty(), "{c:?}");
        assert_eq!(c.clients.len(), 1);
        assert_eq!(c.clients[0].command, "probe.sh");
        assert_eq!(c.clients[0].id, 191);
        assert_eq!(c.clients[0].id_column, "tgid");
        assert!(c.clients[0].master);
    }
}
