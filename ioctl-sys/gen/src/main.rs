//! Regenerates `ioctl-sys/src/x86_64/*.rs` and `ioctl-sys/tests/c_numbers/mod.rs` from the
//! uapi headers of one pinned kernel source package.
//!
//! Run from anywhere: `cargo run --release --manifest-path ioctl-sys/gen/Cargo.toml`.
//! `--check` regenerates into a temporary directory and compares with the committed files
//! instead of writing them (exit status 1 on a difference).
//!
//! Steps, all deterministic for a given source package and toolchain:
//! 1. unpack `/usr/src/linux-source-6.12.tar.xz` (Debian package `linux-source-6.12`);
//! 2. `make headers_install ARCH=x86`; copy `lib/test_hmm_uapi.h` (not exported) and extract
//!    the sw_sync ioctl block from `drivers/dma-buf/sw_sync.c` (not exported either);
//! 3. per module: bindgen over a wrapper header (types and the constants clang can evaluate);
//! 4. per module: collect the module's ioctl macros from the preprocessor (`cc -E -dM`) and
//!    emit each as a Rust `const` computed from the *Rust* struct's size;
//! 5. per module: compile and run a C program over the same headers that prints every ioctl
//!    number and every integer macro bindgen could not evaluate (fourcc codes, modifiers);
//!    the ioctl numbers become the test table that `ioctl-sys/tests/opcodes.rs` checks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Debian source package the bindings are generated from. Bump deliberately, in its own
/// commit, with the regenerated diff only.
const PACKAGE: &str = "linux-source-6.12";
/// Where the package puts its tarball.
const TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";
/// The package version the committed files were generated from. `--check` accepts a newer
/// package whose output differs only in the provenance line, and says so.
const PINNED_VERSION: &str = "6.12.118-1~deb12u1";

/// One generated Rust module.
struct Module {
    /// Rust module name (file `src/x86_64/<name>.rs`).
    name: &'static str,
    /// What the module is, for its `//!` line.
    doc: &'static str,
    /// Headers (relative to the installed include dir) whose items belong to this module.
    headers: &'static [&'static str],
    /// Submodules that carry only ioctl numbers, from wrapper headers in `gen/headers/`
    /// (the test_hmm layouts). `(name, doc, header)`.
    layouts: &'static [(&'static str, &'static str, &'static str)],
    /// Whether the module's own headers define ioctl numbers for the top-level module.
    top_level_ioctls: bool,
}

const MODULES: &[Module] = &[
    Module {
        name: "drm",
        doc: "Core DRM and KMS uapi: `drm/drm.h`, `drm/drm_mode.h` and the fourcc codes and \
              modifiers of `drm/drm_fourcc.h`.",
        headers: &["drm/drm.h", "drm/drm_mode.h", "drm/drm_fourcc.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "virtgpu",
        doc: "virtio-gpu driver uapi: `drm/virtgpu_drm.h`.",
        headers: &["drm/virtgpu_drm.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "qxl",
        doc: "QXL driver uapi: `drm/qxl_drm.h`.",
        headers: &["drm/qxl_drm.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "vgem",
        doc: "vgem driver uapi: `drm/vgem_drm.h`.",
        headers: &["drm/vgem_drm.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "dma_buf",
        doc: "dma-buf uapi: `linux/dma-buf.h`.",
        headers: &["linux/dma-buf.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "sync_file",
        doc: "sync_file uapi (`linux/sync_file.h`) and the sw_sync debugfs ioctls \
              (`SW_SYNC_IOC_*`, from `drivers/dma-buf/sw_sync.c`, which no uapi header exports).",
        headers: &["linux/sync_file.h", "sw_sync_uapi.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "udmabuf",
        doc: "udmabuf uapi: `linux/udmabuf.h`.",
        headers: &["linux/udmabuf.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "bpf",
        doc: "bpf(2) uapi: `linux/bpf_common.h` and `linux/bpf.h` (instruction encoding, \
              `union bpf_attr`, program info, program and attach types), for the cgroup \
              device programs of drmtool's isolation.",
        headers: &["linux/bpf_common.h", "linux/bpf.h"],
        layouts: &[],
        top_level_ioctls: false,
    },
    Module {
        name: "perf_event",
        doc: "perf_event_open(2) uapi: `linux/perf_event.h` (`struct perf_event_attr`, the \
              ring buffer's `struct perf_event_mmap_page`, record types, `PERF_EVENT_IOC_*`), \
              for the tracepoint recorder of `drmtool trace`.",
        headers: &["linux/perf_event.h"],
        layouts: &[],
        top_level_ioctls: true,
    },
    Module {
        name: "test_hmm",
        doc: "test_hmm mirror-device uapi (`lib/test_hmm_uapi.h`, not exported by \
              `headers_install`). The structs and enums are the same on every kernel; the \
              request numbers are not, so they live in one submodule per layout.",
        headers: &["test_hmm_uapi.h"],
        layouts: &[
            (
                "v6_0",
                "Request numbers of Linux 6.0 and later (MIGRATE_TO_DEV 2, MIGRATE_TO_SYS 3, \
                 SNAPSHOT 4, EXCLUSIVE 5, CHECK_EXCLUSIVE 6, RELEASE 7 since 6.1), from the \
                 pinned header.",
                "test_hmm_uapi.h",
            ),
            (
                "v5_14",
                "Request numbers of Linux 5.14 to 5.19 (MIGRATE 2, SNAPSHOT 3, EXCLUSIVE 4, \
                 CHECK_EXCLUSIVE 5).",
                "test_hmm_v5_14.h",
            ),
            (
                "v5_10",
                "Request numbers of Linux 5.10 to 5.13 (READ 0, WRITE 1, MIGRATE 2, SNAPSHOT 3; \
                 no exclusive access).",
                "test_hmm_v5_10.h",
            ),
        ],
        top_level_ioctls: false,
    },
];

/// An ioctl macro found in a header.
struct IoctlDef {
    name: String,
    /// `none`, `read`, `write` or `read_write`.
    dir: &'static str,
    /// The C argument type, as written (`struct drm_get_cap`, `unsigned int`, ...).
    c_type: Option<String>,
}

/// What the C program printed for one ioctl.
struct CIoctl {
    ty: u32,
    nr: u32,
    value: u32,
}

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ioctl-sys-gen: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Res<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    if let Some(bad) = args.iter().find(|a| *a != "--check") {
        return Err(format!(
            "unknown argument {bad:?}; usage: ioctl-sys-gen [--check]"
        ));
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no parent of gen/")?
        .to_path_buf();
    let gen_dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();

    if !Path::new(TARBALL).exists() {
        return Err(format!(
            "{TARBALL} is missing: install it with `apt-get install {PACKAGE}`"
        ));
    }
    let deb_version = cmd_output(Command::new("dpkg-query").args(["-W", "-f=${Version}", PACKAGE]))
        .unwrap_or_else(|_| "unknown".into());

    let work = TempDir::new("ioctl-sys-gen")?;
    eprintln!("[1/4] unpacking {TARBALL}");
    run_cmd(
        Command::new("tar")
            .args(["-xf", TARBALL, "-C"])
            .arg(work.path()),
    )?;
    let src = work.path().join(PACKAGE);
    let upstream = upstream_version(&src)?;

    eprintln!("[2/4] make headers_install (Linux {upstream})");
    let hdr = work.path().join("hdr");
    run_cmd(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&src)
            .arg("ARCH=x86")
            .arg(format!("INSTALL_HDR_PATH={}", hdr.display()))
            .arg("headers_install"),
    )?;
    let inc = hdr.join("include");
    fs::copy(src.join("lib/test_hmm_uapi.h"), inc.join("test_hmm_uapi.h"))
        .map_err(|e| format!("copy lib/test_hmm_uapi.h: {e}"))?;
    fs::write(
        inc.join("sw_sync_uapi.h"),
        extract_sw_sync(&src.join("drivers/dma-buf/sw_sync.c"))?,
    )
    .map_err(|e| format!("write sw_sync_uapi.h: {e}"))?;

    let provenance = format!(
        "// @generated by ioctl-sys/gen from Debian {PACKAGE} {deb_version} (Linux {upstream}), \
         x86_64; do not edit."
    );
    let out = work.path().join("out");
    fs::create_dir_all(out.join("src/x86_64")).map_err(|e| e.to_string())?;
    fs::create_dir_all(out.join("tests/c_numbers")).map_err(|e| e.to_string())?;

    eprintln!(
        "[3/4] bindgen + C ioctl numbers for {} modules",
        MODULES.len()
    );
    let mut table = String::new();
    let mut layouts = String::new();
    for m in MODULES {
        let (code, rows, lay) = generate_module(m, &inc, &gen_dir, work.path(), &provenance)?;
        layouts.push_str(&lay);
        let file = out.join(format!("src/x86_64/{}.rs", m.name));
        fs::write(&file, code).map_err(|e| e.to_string())?;
        rustfmt(&file)?;
        table.push_str(&rows);
    }
    let c_numbers = format!(
        "{provenance}\n\
         //! Ioctl request numbers computed by a C program compiled against the same headers.\n\
         //! Each row: (C macro name, the C value, the Rust constant computed from the Rust\n\
         //! struct's size).\n\n\
         /// Every ioctl number the generator found, in header order.\n\
         pub const C_NUMBERS: &[(&str, u32, u32)] = &[\n{table}];\n\n\
         /// `sizeof` and every field's `offsetof` of each ioctl argument struct: (what, the C\n\
         /// value, the Rust value). A field missing on the Rust side fails to compile here.\n\
         pub const C_LAYOUTS: &[(&str, usize, usize)] = &[\n{layouts}];\n"
    );
    let file = out.join("tests/c_numbers/mod.rs");
    fs::write(&file, c_numbers).map_err(|e| e.to_string())?;
    rustfmt(&file)?;

    let mut files: Vec<String> = MODULES
        .iter()
        .map(|m| format!("src/x86_64/{}.rs", m.name))
        .collect();
    files.push("tests/c_numbers/mod.rs".into());

    if check {
        eprintln!("[4/4] comparing with the committed files");
        compare(&out, &crate_dir, &files, &deb_version)
    } else {
        eprintln!(
            "[4/4] writing {} files under {}",
            files.len(),
            crate_dir.display()
        );
        for f in &files {
            let dst = crate_dir.join(f);
            fs::create_dir_all(dst.parent().unwrap()).map_err(|e| e.to_string())?;
            fs::copy(out.join(f), &dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        }
        if deb_version != PINNED_VERSION {
            eprintln!(
                "note: generated from {PACKAGE} {deb_version}, but PINNED_VERSION says \
                 {PINNED_VERSION}: update it in gen/src/main.rs in the same commit"
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Compares generated files with the committed ones. A difference only in the `@generated`
/// provenance line (a newer Debian revision of the same uapi) is reported but accepted.
fn compare(out: &Path, crate_dir: &Path, files: &[String], deb_version: &str) -> Res<ExitCode> {
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| !l.starts_with("// @generated"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut stale = Vec::new();
    let mut provenance_only = false;
    for f in files {
        let new = fs::read_to_string(out.join(f)).map_err(|e| e.to_string())?;
        let old = fs::read_to_string(crate_dir.join(f)).unwrap_or_default();
        if new == old {
            continue;
        }
        if strip(&new) == strip(&old) {
            provenance_only = true;
        } else {
            stale.push(f.clone());
            let diff = Command::new("diff")
                .arg("-u")
                .arg(crate_dir.join(f))
                .arg(out.join(f))
                .output();
            if let Ok(d) = diff {
                let text = String::from_utf8_lossy(&d.stdout);
                for line in text.lines().take(40) {
                    eprintln!("    {line}");
                }
            }
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "bindings are stale: {} file(s) differ from a fresh generation: {}\n\
             fix: cargo run --release --manifest-path ioctl-sys/gen/Cargo.toml, then commit",
            stale.len(),
            stale.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    if provenance_only {
        eprintln!(
            "note: {PACKAGE} is now {deb_version} (pinned {PINNED_VERSION}); the generated \
             bindings are identical apart from the provenance line"
        );
    }
    eprintln!("bindings are fresh: {} files identical", files.len());
    Ok(ExitCode::SUCCESS)
}

/// Generates one module's Rust source and its rows of the C-number table.
fn generate_module(
    m: &Module,
    inc: &Path,
    gen_dir: &Path,
    work: &Path,
    provenance: &str,
) -> Res<(String, String, String)> {
    let wrapper = work.join(format!("wrap_{}.h", m.name));
    let mut w = String::new();
    for h in m.headers {
        writeln!(w, "#include <{h}>").unwrap();
    }
    fs::write(&wrapper, &w).map_err(|e| e.to_string())?;

    // bindgen: every item declared in the module's own headers.
    let mut b = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(["-nostdinc", "--target=x86_64-unknown-linux-gnu", "-I"])
        .clang_arg(inc.to_string_lossy())
        .use_core()
        .ctypes_prefix("core::ffi")
        .rust_target(bindgen::RustTarget::stable(85, 0).map_err(|e| e.to_string())?)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .sort_semantically(true)
        .prepend_enum_name(false)
        .formatter(bindgen::Formatter::None);
    for h in m.headers {
        b = b.allowlist_file(format!(
            "{}/{}",
            regex::escape(&inc.to_string_lossy()),
            regex::escape(h)
        ));
    }
    let bindings = b
        .generate()
        .map_err(|e| format!("bindgen {}: {e}", m.name))?
        .to_string();
    let bindings = strip_unsafe_helpers(&bindings)?;
    let emitted: BTreeSet<String> = regex::Regex::new(r"pub const ([A-Za-z_][A-Za-z0-9_]*)\s*:")
        .unwrap()
        .captures_iter(&bindings)
        .map(|c| c[1].to_string())
        .collect();

    let mut code = String::new();
    writeln!(code, "{provenance}").unwrap();
    writeln!(code, "//! {}", m.doc).unwrap();
    code.push_str(&bindings);
    code.push('\n');

    let mut rows = String::new();
    let mut layout_rows = String::new();
    let include_args = [
        "-I".to_string(),
        inc.to_string_lossy().into_owned(),
        "-I".to_string(),
        gen_dir.join("headers").to_string_lossy().into_owned(),
    ];

    // Top-level ioctls and the integer macros bindgen could not evaluate.
    let own: Vec<PathBuf> = m.headers.iter().map(|h| inc.join(h)).collect();
    let defs = macro_bodies(&wrapper, &include_args)?;
    let names = own_macro_names(&own)?;
    let mut ioctls = Vec::new();
    let mut values = Vec::new();
    for n in &names {
        let Some(body) = defs.get(n) else { continue };
        if let Some(d) = parse_ioctl(n, body) {
            ioctls.push(d);
        } else if !emitted.contains(n) && looks_integer(body) {
            values.push(n.clone());
        }
    }
    if m.top_level_ioctls {
        let c = run_c_program(&wrapper, &include_args, &ioctls, &values, work, m.name)?;
        code.push_str(&emit_ioctls(&ioctls, &c.0, "")?);
        code.push_str(&emit_values(&values, &c.1, &defs));
        rows.push_str(&table_rows(&ioctls, &c.0, m.name));
        let structs = arg_structs(&ioctls, &bindings);
        layout_rows = run_layout_program(&wrapper, &include_args, &structs, work, m.name)?;
    } else if !values.is_empty() {
        let c = run_c_program(&wrapper, &include_args, &[], &values, work, m.name)?;
        code.push_str(&emit_values(&values, &c.1, &defs));
    }

    // Layout submodules (test_hmm).
    for (sub, doc, header) in m.layouts {
        let path = if inc.join(header).exists() {
            inc.join(header)
        } else {
            gen_dir.join("headers").join(header)
        };
        let wrap = work.join(format!("wrap_{}_{sub}.h", m.name));
        fs::write(&wrap, format!("#include \"{}\"\n", path.display()))
            .map_err(|e| e.to_string())?;
        let defs = macro_bodies(&wrap, &include_args)?;
        let names = own_macro_names(std::slice::from_ref(&path))?;
        let ioctls: Vec<IoctlDef> = names
            .iter()
            .filter_map(|n| defs.get(n).and_then(|b| parse_ioctl(n, b)))
            .collect();
        let c = run_c_program(
            &wrap,
            &include_args,
            &ioctls,
            &[],
            work,
            &format!("{}_{sub}", m.name),
        )?;
        writeln!(code, "\n/// {doc}\npub mod {sub} {{\n    use super::*;\n").unwrap();
        code.push_str(&emit_ioctls(&ioctls, &c.0, "    ")?);
        code.push_str("}\n");
        rows.push_str(&table_rows(&ioctls, &c.0, &format!("{}::{sub}", m.name)));
    }
    Ok((code, rows, layout_rows))
}

/// The structs used as ioctl arguments, with their fields as `(rust name, C name)`, parsed
/// from the bindgen output. Unions, bitfields and anonymous members are left to bindgen's
/// own layout assertions.
fn arg_structs(ioctls: &[IoctlDef], bindings: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let field_re = regex::Regex::new(r"pub ([A-Za-z_][A-Za-z0-9_]*) :").unwrap();
    for d in ioctls {
        let Some(t) = d.c_type.as_deref().and_then(|t| t.strip_prefix("struct ")) else {
            continue;
        };
        let t = t.trim().to_string();
        if !seen.insert(t.clone()) {
            continue;
        }
        let head = format!("pub struct {t} {{");
        let Some(start) = bindings.find(&head) else {
            continue;
        };
        let body_start = start + head.len();
        let Some(len) = bindings[body_start..].find('}') else {
            continue;
        };
        let body = &bindings[body_start..body_start + len];
        let fields = field_re
            .captures_iter(body)
            .map(|c| c[1].to_string())
            .filter(|f| !f.starts_with("_bindgen") && !f.starts_with("__bindgen"))
            .map(|f| {
                // bindgen appends `_` to C names that are Rust keywords.
                let bare = f.strip_suffix('_').unwrap_or(&f);
                let c = if f.ends_with('_') && RUST_KEYWORDS.contains(&bare) {
                    bare.to_string()
                } else {
                    f.clone()
                };
                (f, c)
            })
            .collect();
        out.push((t, fields));
    }
    out
}

const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "static", "struct", "super", "trait", "true", "try", "type", "typeof", "unsafe",
    "unsized", "use", "virtual", "where", "while", "yield",
];

/// Compiles and runs a C program printing `sizeof` and `offsetof` for `structs`, and returns
/// the rows of the layout table.
fn run_layout_program(
    wrapper: &Path,
    include_args: &[String],
    structs: &[(String, Vec<(String, String)>)],
    work: &Path,
    tag: &str,
) -> Res<String> {
    let mut c = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <fcntl.h>\n#include \"{}\"\nint main(void) {{\n",
        wrapper.display()
    );
    for (s, fields) in structs {
        writeln!(c, "  printf(\"%zu\\n\", sizeof(struct {s}));").unwrap();
        for (_, f) in fields {
            writeln!(c, "  printf(\"%zu\\n\", offsetof(struct {s}, {f}));").unwrap();
        }
    }
    c.push_str("  return 0;\n}\n");
    let src = work.join(format!("layout_{tag}.c"));
    let exe = work.join(format!("layout_{tag}"));
    fs::write(&src, c).map_err(|e| e.to_string())?;
    run_cmd(
        Command::new("cc")
            .args(["-O0", "-w", "-o"])
            .arg(&exe)
            .args(include_args)
            .arg(&src),
    )?;
    let out = cmd_output(&mut Command::new(&exe))?;
    let mut vals = out.lines();
    let mut rows = String::new();
    let path = format!("ioctl_sys::{tag}");
    for (s, fields) in structs {
        let v = vals.next().ok_or("layout program printed too little")?;
        writeln!(
            rows,
            "    (\"{tag}::{s}\", {v}, core::mem::size_of::<{path}::{s}>()),"
        )
        .unwrap();
        for (rf, cf) in fields {
            let v = vals.next().ok_or("layout program printed too little")?;
            writeln!(
                rows,
                "    (\"{tag}::{s}.{cf}\", {v}, core::mem::offset_of!({path}::{s}, {rf})),"
            )
            .unwrap();
        }
    }
    Ok(rows)
}

/// Removes the `unsafe fn` accessors bindgen adds to its flexible-array helper
/// (`__IncompleteArrayField::{as_ptr, as_slice, ...}`): this crate is data only, and the
/// wrappers above it build flexible-array arguments from byte buffers instead. The struct
/// itself (a zero-sized marker with the C alignment) and its trait impls stay.
fn strip_unsafe_helpers(code: &str) -> Res<String> {
    let needle = "impl < T > __IncompleteArrayField < T > {";
    let Some(start) = code.find(needle) else {
        return strip_unsafe_fns(code);
    };
    let open = start + needle.len() - 1;
    let end = block_end(code, open).ok_or("unbalanced braces in bindgen output")?;
    let rest = format!("{}{}", &code[..start], &code[end..]);
    strip_unsafe_fns(&rest)
}

/// The index just after the `}` that closes the `{` at `open`.
fn block_end(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, ch) in code[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes every `unsafe fn` item with its body (and its attributes and `pub` before it): bindgen's raw-pointer bitfield accessors (`raw_get`, `*_raw`, as for `struct
/// bpf_insn`'s register nibbles). The safe accessors beside them stay; ioctl-sys stays data
/// with safe accessors only.
fn strip_unsafe_fns(code: &str) -> Res<String> {
    let mut out = code.to_string();
    while let Some(at) = out.find("unsafe fn ") {
        let mut start = at;
        loop {
            let before = out[..start].trim_end();
            let cut = ["pub", "pub (crate)", "const"]
                .iter()
                .find(|t| before.ends_with(*t));
            if let Some(t) = cut {
                start = before.len() - t.len();
                continue;
            }
            // An attribute (`# [inline]`, `# [doc = "..."]`) of the removed fn.
            match before.rfind("# [") {
                Some(a) if before.ends_with(']') => start = a,
                _ => break,
            }
        }
        let open = out[at..].find('{').ok_or("unsafe fn without a body")? + at;
        let end = block_end(&out, open).ok_or("unbalanced braces in bindgen output")?;
        out.replace_range(start..end, "");
    }
    Ok(out)
}

/// `#define` bodies as the preprocessor sees them after including `wrapper`.
fn macro_bodies(wrapper: &Path, include_args: &[String]) -> Res<BTreeMap<String, String>> {
    let out = cmd_output(
        Command::new("cc")
            .args(["-E", "-dM"])
            .args(include_args)
            .arg(wrapper),
    )?;
    let re = regex::Regex::new(r"^#define ([A-Za-z_][A-Za-z0-9_]*)(\(?)\s*(.*)$").unwrap();
    let mut map = BTreeMap::new();
    for line in out.lines() {
        if let Some(c) = re.captures(line)
            && c[2].is_empty()
        {
            map.insert(c[1].to_string(), c[3].trim().to_string());
        }
    }
    Ok(map)
}

/// Object-like macro names defined in `files`, in order of appearance, without duplicates.
fn own_macro_names(files: &[PathBuf]) -> Res<Vec<String>> {
    let re = regex::Regex::new(r"(?m)^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)(\(?)").unwrap();
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for f in files {
        let text = fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let text = text.replace("\\\n", " ");
        for c in re.captures_iter(&text) {
            if c[2].is_empty() && seen.insert(c[1].to_string()) {
                names.push(c[1].to_string());
            }
        }
    }
    Ok(names)
}

/// Recognises `_IO*(type, nr[, arg])` and `DRM_IO*(nr[, arg])` bodies.
fn parse_ioctl(name: &str, body: &str) -> Option<IoctlDef> {
    let re =
        regex::Regex::new(r"^(DRM_IO|DRM_IOR|DRM_IOW|DRM_IOWR|_IO|_IOR|_IOW|_IOWR)\s*\((.*)\)$")
            .unwrap();
    let c = re.captures(body.trim())?;
    let mac = &c[1];
    let args = split_top_level(&c[2]);
    let dir = match mac.trim_start_matches("DRM").trim_start_matches('_') {
        "IO" => "none",
        "IOR" => "read",
        "IOW" => "write",
        "IOWR" => "read_write",
        _ => return None,
    };
    let want = if mac.starts_with("DRM") { 1 } else { 2 } + usize::from(dir != "none");
    if args.len() != want {
        eprintln!("warning: {name}: unexpected argument count in {body:?}");
        return None;
    }
    let c_type = (dir != "none").then(|| args.last().unwrap().trim().to_string());
    Some(IoctlDef {
        name: name.to_string(),
        dir,
        c_type,
    })
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    out
}

/// Whether a macro body can be printed as an integer by the C program.
fn looks_integer(body: &str) -> bool {
    !body.is_empty()
        && !body.contains('"')
        && !body.contains('{')
        && !body.starts_with("struct")
        && !body.starts_with("__attribute")
        && !body.starts_with("typedef")
}

/// Maps a C ioctl argument type to the Rust type whose size encodes it.
fn rust_type(c: &str) -> Res<String> {
    let c = c.split_whitespace().collect::<Vec<_>>().join(" ");
    // A pointer argument (perf's `__u64 *`, `struct perf_event_attr *`): the number encodes
    // the pointer's size.
    if let Some(inner) = c.strip_suffix('*').map(str::trim)
        && !inner.ends_with("char")
    {
        return Ok(format!("*mut {}", rust_type(inner)?));
    }
    if let Some(s) = c
        .strip_prefix("struct ")
        .or_else(|| c.strip_prefix("union "))
    {
        return Ok(s.trim().to_string());
    }
    Ok(match c.as_str() {
        "__u8" => "u8",
        "__u16" => "u16",
        "__u32" => "u32",
        "__s32" => "i32",
        "__u64" => "u64",
        "__s64" => "i64",
        "int" => "core::ffi::c_int",
        "unsigned int" => "core::ffi::c_uint",
        "unsigned long" => "core::ffi::c_ulong",
        "const char *" | "char *" => "*const core::ffi::c_char",
        other if other.starts_with("drm_") && other.ends_with("_t") => other,
        other => return Err(format!("no Rust type for C ioctl argument type {other:?}")),
    }
    .to_string())
}

/// Compiles and runs a C program that prints the ioctl numbers and integer macro values.
fn run_c_program(
    wrapper: &Path,
    include_args: &[String],
    ioctls: &[IoctlDef],
    values: &[String],
    work: &Path,
    tag: &str,
) -> Res<(BTreeMap<String, CIoctl>, BTreeMap<String, u64>)> {
    let mut c = String::new();
    writeln!(
        c,
        "#include <stdio.h>\n#include <fcntl.h>\n#include \"{}\"\nint main(void) {{",
        wrapper.display()
    )
    .unwrap();
    for d in ioctls {
        writeln!(
            c,
            "  printf(\"I %s %u %u %u\\n\", \"{n}\", (unsigned)_IOC_TYPE({n}), (unsigned)_IOC_NR({n}), (unsigned)({n}));",
            n = d.name
        )
        .unwrap();
    }
    for v in values {
        writeln!(
            c,
            "  printf(\"V %s %llu\\n\", \"{v}\", (unsigned long long)({v}));"
        )
        .unwrap();
    }
    c.push_str("  return 0;\n}\n");
    let src = work.join(format!("numbers_{tag}.c"));
    let exe = work.join(format!("numbers_{tag}"));
    fs::write(&src, c).map_err(|e| e.to_string())?;
    run_cmd(
        Command::new("cc")
            .args(["-O0", "-w", "-o"])
            .arg(&exe)
            .args(include_args)
            .arg(&src),
    )?;
    let out = cmd_output(&mut Command::new(&exe))?;
    let mut io = BTreeMap::new();
    let mut vals = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Res<u64> {
            f.get(i)
                .ok_or_else(|| format!("short line {line:?}"))?
                .parse::<u64>()
                .map_err(|e| format!("{line:?}: {e}"))
        };
        match f.first() {
            Some(&"I") => {
                io.insert(
                    f[1].to_string(),
                    CIoctl {
                        ty: num(2)? as u32,
                        nr: num(3)? as u32,
                        value: num(4)? as u32,
                    },
                );
            }
            Some(&"V") => {
                vals.insert(f[1].to_string(), num(2)?);
            }
            _ => return Err(format!("unexpected output {line:?}")),
        }
    }
    Ok((io, vals))
}

fn emit_ioctls(ioctls: &[IoctlDef], c: &BTreeMap<String, CIoctl>, indent: &str) -> Res<String> {
    let mut s = String::new();
    for d in ioctls {
        let ci = c
            .get(&d.name)
            .ok_or_else(|| format!("C printed nothing for {}", d.name))?;
        let ty = ci.ty;
        let nr = ci.nr;
        let arg = match &d.c_type {
            Some(t) => format!("`{t}`"),
            None => "no argument".into(),
        };
        writeln!(
            s,
            "{indent}#[doc = \"`{}`: type `{}`, number {nr:#04x}, {arg}.\"]",
            d.name,
            char_or_hex(ty)
        )
        .unwrap();
        let expr = match &d.c_type {
            None => format!("crate::ioc::none({ty:#04x}, {nr:#04x})"),
            Some(t) => format!(
                "crate::ioc::{}::<{}>({ty:#04x}, {nr:#04x})",
                d.dir,
                rust_type(t)?
            ),
        };
        writeln!(s, "{indent}pub const {}: u32 = {expr};", d.name).unwrap();
    }
    Ok(s)
}

fn char_or_hex(ty: u32) -> String {
    match char::from_u32(ty) {
        Some(ch) if ch.is_ascii_graphic() && ch != '"' && ch != '\\' && ch != '`' => {
            format!("'{ch}'")
        }
        _ => format!("{ty:#04x}"),
    }
}

fn emit_values(
    values: &[String],
    c: &BTreeMap<String, u64>,
    defs: &BTreeMap<String, String>,
) -> String {
    let mut s = String::new();
    if values.is_empty() {
        return s;
    }
    s.push_str("\n// Integer macros that bindgen cannot evaluate (function-like macro expansions),\n// with the values the C compiler computed.\n");
    for v in values {
        let Some(&val) = c.get(v) else { continue };
        let body = defs.get(v).map(String::as_str).unwrap_or("");
        let wide =
            val > u64::from(u32::MAX) || body.contains("fourcc_mod_code") || body.contains("ULL");
        let ty = if wide { "u64" } else { "u32" };
        let body_doc = body.replace('"', "'").replace('\\', "");
        writeln!(s, "#[doc = \"`{v}`: `{body_doc}`.\"]").unwrap();
        writeln!(s, "pub const {v}: {ty} = {val:#x};").unwrap();
    }
    s
}

fn table_rows(ioctls: &[IoctlDef], c: &BTreeMap<String, CIoctl>, path: &str) -> String {
    let mut s = String::new();
    for d in ioctls {
        if let Some(ci) = c.get(&d.name) {
            writeln!(
                s,
                "    (\"{path}::{n}\", {v:#010x}, ioctl_sys::{path}::{n}),",
                n = d.name,
                v = ci.value
            )
            .unwrap();
        }
    }
    s
}

/// The sw_sync ioctl block of `drivers/dma-buf/sw_sync.c`, as a standalone header.
fn extract_sw_sync(path: &Path) -> Res<String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("struct sw_sync_create_fence_data {"))
        .ok_or("sw_sync.c: struct sw_sync_create_fence_data not found")?;
    let mut end = start;
    for (i, l) in lines.iter().enumerate().skip(start) {
        if l.starts_with("#define SW_SYNC_IOC_") || l.starts_with("#define SW_SYNC_GET_") {
            end = i;
            let mut j = i;
            while lines[j].ends_with('\\') {
                j += 1;
            }
            end = end.max(j);
        }
        if l.starts_with("static ") {
            break;
        }
    }
    if end == start {
        return Err("sw_sync.c: no SW_SYNC_IOC_* definitions found".into());
    }
    let body: Vec<&str> = lines[start..=end]
        .iter()
        .copied()
        .filter(|l| !l.starts_with("#define SW_SYNC_HAS_"))
        .collect();
    Ok(format!(
        "/* Extracted by ioctl-sys/gen from drivers/dma-buf/sw_sync.c, lines {}-{}. */\n\
         #ifndef IOCTL_SYS_SW_SYNC_UAPI_H\n#define IOCTL_SYS_SW_SYNC_UAPI_H\n\
         #include <linux/types.h>\n#include <linux/ioctl.h>\n\n{}\n#endif\n",
        start + 1,
        end + 1,
        body.join("\n")
    ))
}

fn upstream_version(src: &Path) -> Res<String> {
    let mk = fs::read_to_string(src.join("Makefile")).map_err(|e| e.to_string())?;
    let get = |k: &str| -> String {
        mk.lines()
            .find_map(|l| {
                l.strip_prefix(k)
                    .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
            })
            .unwrap_or_default()
    };
    Ok(format!(
        "{}.{}.{}",
        get("VERSION"),
        get("PATCHLEVEL"),
        get("SUBLEVEL")
    ))
}

fn rustfmt(file: &Path) -> Res<()> {
    run_cmd(
        Command::new("rustfmt")
            .args(["--edition", "2024"])
            .arg(file),
    )
    .inspect_err(|_| {
        // Kept for a look: the work directory goes when the run ends.
        let keep = std::env::temp_dir().join("ioctl-sys-gen-rustfmt-failed.rs");
        let _ = fs::copy(file, &keep);
        eprintln!(
            "ioctl-sys-gen: the file rustfmt refused is kept at {}",
            keep.display()
        );
    })
}

fn run_cmd(cmd: &mut Command) -> Res<()> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn cmd_output(cmd: &mut Command) -> Res<String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> Res<Self> {
        let base = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        Ok(Self(base))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
