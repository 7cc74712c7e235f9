//! The cgroup v2 device program (`BPF_PROG_TYPE_CGROUP_DEVICE`) as data: a [`Policy`] of
//! first-match rules, the program [`build`] emits for it, a small evaluator of such
//! programs ([`run`]) and a [`decode`]r that turns any program of this shape (ours, or the
//! ones container runtimes and systemd attach) back into a device list.
//!
//! The kernel runs the program with `r1` pointing at `struct bpf_cgroup_dev_ctx`:
//! `access_type` (u32 at 0: the access bits `BPF_DEVCG_ACC_MKNOD` 1, `_READ` 2, `_WRITE` 4
//! in the high 16 bits, the device type `BPF_DEVCG_DEV_BLOCK` 1 or `_CHAR` 2 in the low 16),
//! `major` (u32 at 4) and `minor` (u32 at 8). A return of 1 allows the access, 0 denies it
//! (EPERM). With `BPF_F_ALLOW_MULTI` every program of the cgroup and of its ancestors runs
//! and all must allow, so a program that allows what it does not care about leaves the
//! rest to the others.

use super::bpf::{Insn, MODE_MEM, alu, class, jmp, size, src};
use bitflags::bitflags;
use std::collections::BTreeSet;

/// Block or character device (`BPF_DEVCG_DEV_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DevType {
    /// `BPF_DEVCG_DEV_BLOCK` (1).
    Block,
    /// `BPF_DEVCG_DEV_CHAR` (2).
    Char,
}

impl DevType {
    /// The value in the low 16 bits of `access_type`.
    pub const fn code(self) -> u32 {
        match self {
            DevType::Block => 1,
            DevType::Char => 2,
        }
    }

    /// `b` or `c`, as devices.list (cgroup v1) wrote them.
    pub const fn letter(self) -> char {
        match self {
            DevType::Block => 'b',
            DevType::Char => 'c',
        }
    }
}

bitflags! {
    /// Access bits (`BPF_DEVCG_ACC_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub struct Access: u32 {
        /// `mknod(2)` of the device.
        const MKNOD = 1;
        /// Open for reading.
        const READ = 2;
        /// Open for writing.
        const WRITE = 4;
    }
}

impl Access {
    /// `rwm` letters, as devices.list wrote them (`-` for none).
    pub fn letters(self) -> String {
        let mut s = String::new();
        for (bit, c) in [
            (Access::READ, 'r'),
            (Access::WRITE, 'w'),
            (Access::MKNOD, 'm'),
        ] {
            if self.contains(bit) {
                s.push(c);
            }
        }
        if s.is_empty() {
            s.push('-');
        }
        s
    }
}

/// One rule: requests it matches get `allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Allow (true) or deny what matches.
    pub allow: bool,
    /// Only this device type; `None`: both.
    pub dev_type: Option<DevType>,
    /// Only this major; `None`: any.
    pub major: Option<u32>,
    /// Only this minor; `None`: any.
    pub minor: Option<u32>,
    /// Matches a request whose access bits are all in here (runc's rule: a `rw` rule
    /// matches a read, a write and a read-write open, not a mknod).
    pub access: Access,
}

/// A first-match rule list with a default for requests no rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// In order; the first that matches decides.
    pub rules: Vec<Rule>,
    /// For requests no rule matches.
    pub default_allow: bool,
}

/// One access the kernel asks the program about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Device type.
    pub dev_type: DevType,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// The access bits asked for together (an O_RDWR open asks READ | WRITE).
    pub access: Access,
}

impl Request {
    /// `struct bpf_cgroup_dev_ctx` as the kernel lays it out.
    pub fn ctx_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        let at = (self.access.bits() << 16) | self.dev_type.code();
        b[0..4].copy_from_slice(&at.to_ne_bytes());
        b[4..8].copy_from_slice(&self.major.to_ne_bytes());
        b[8..12].copy_from_slice(&self.minor.to_ne_bytes());
        b
    }
}

impl Policy {
    /// What the policy answers for `req`.
    pub fn allows(&self, req: Request) -> bool {
        for r in &self.rules {
            let matches = r.dev_type.is_none_or(|t| t == req.dev_type)
                && r.major.is_none_or(|m| m == req.major)
                && r.minor.is_none_or(|m| m == req.minor)
                && r.access.contains(req.access);
            if matches {
                return r.allow;
            }
        }
        self.default_allow
    }

    /// The policy of `drmtool run --gpu`: the DRM character devices (major 226) with these
    /// minors allowed for every access, every other 226:* denied, everything else allowed
    /// (left to the cgroup's other programs and its ancestors').
    pub fn only_drm_minors(minors: &[u32]) -> Policy {
        let mut rules: Vec<Rule> = minors
            .iter()
            .map(|&m| Rule {
                allow: true,
                dev_type: Some(DevType::Char),
                major: Some(DRM_MAJOR),
                minor: Some(m),
                access: Access::all(),
            })
            .collect();
        rules.push(Rule {
            allow: false,
            dev_type: Some(DevType::Char),
            major: Some(DRM_MAJOR),
            minor: None,
            access: Access::all(),
        });
        Policy {
            rules,
            default_allow: true,
        }
    }
}

impl Policy {
    /// The policy of `drmtool run`: these character devices (major, minor) allowed for
    /// every access, every other node of `majors` denied, everything else allowed (left to
    /// the cgroup's other programs and its ancestors'). With no nodes: every node of
    /// `majors` denied (`drmtool cgroup deny-gpus`).
    pub fn only_nodes(allowed: &[(u32, u32)], majors: &[u32]) -> Policy {
        let mut rules: Vec<Rule> = allowed
            .iter()
            .map(|&(major, minor)| Rule {
                allow: true,
                dev_type: Some(DevType::Char),
                major: Some(major),
                minor: Some(minor),
                access: Access::all(),
            })
            .collect();
        for &m in majors {
            rules.push(Rule {
                allow: false,
                dev_type: Some(DevType::Char),
                major: Some(m),
                minor: None,
                access: Access::all(),
            });
        }
        Policy {
            rules,
            default_allow: true,
        }
    }
}

/// The DRM character-device major.
pub const DRM_MAJOR: u32 = 226;

// Registers of the built program: r1 the context (then free), r2 type, r3 access, r4 major,
// r5 minor, r6 scratch for the access test.
const R0: u8 = 0;
const R1: u8 = 1;
const R_TYPE: u8 = 2;
const R_ACCESS: u8 = 3;
const R_MAJOR: u8 = 4;
const R_MINOR: u8 = 5;
const R_SCRATCH: u8 = 6;

/// The program for `policy`: loads type, access, major and minor once, then one block per
/// rule (each test jumps to the next block on a mismatch: 32-bit compares, so every u32
/// major and minor compares exactly), then the default.
pub fn build(policy: &Policy) -> Vec<Insn> {
    let mut p = vec![
        Insn::ldx_w(R_TYPE, R1, 0),
        Insn::alu32_imm(alu::AND, R_TYPE, 0xffff),
        Insn::ldx_w(R_ACCESS, R1, 0),
        Insn::alu32_imm(alu::RSH, R_ACCESS, 16),
        Insn::ldx_w(R_MAJOR, R1, 4),
        Insn::ldx_w(R_MINOR, R1, 8),
    ];
    for r in &policy.rules {
        // Tests first, with their jump distances filled in once the block's length is known.
        let mut tests: Vec<Insn> = Vec::new();
        if let Some(t) = r.dev_type {
            tests.push(Insn::jmp32_imm(jmp::JNE, R_TYPE, t.code() as i32, 0));
        }
        if r.access != Access::all() {
            tests.push(Insn::alu32_reg(alu::MOV, R_SCRATCH, R_ACCESS));
            tests.push(Insn::alu32_imm(alu::AND, R_SCRATCH, r.access.bits() as i32));
            tests.push(Insn::jmp32_reg(jmp::JNE, R_SCRATCH, R_ACCESS, 0));
        }
        if let Some(m) = r.major {
            tests.push(Insn::jmp32_imm(jmp::JNE, R_MAJOR, m as i32, 0));
        }
        if let Some(m) = r.minor {
            tests.push(Insn::jmp32_imm(jmp::JNE, R_MINOR, m as i32, 0));
        }
        let len = tests.len() + 2;
        for (i, t) in tests.iter_mut().enumerate() {
            if t.class() == class::JMP32 {
                // To the first instruction after this block.
                t.off = (len - i - 1) as i16;
            }
        }
        p.extend(tests);
        p.push(Insn::alu32_imm(alu::MOV, R0, i32::from(r.allow)));
        p.push(Insn::exit());
    }
    p.push(Insn::alu32_imm(
        alu::MOV,
        R0,
        i32::from(policy.default_allow),
    ));
    p.push(Insn::exit());
    p
}

/// Why a program is not one [`run`] and [`decode`] can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opaque {
    /// An instruction outside the subset (maps, helper calls, stores, stack...): its index
    /// and opcode.
    Instruction {
        /// Index in the program.
        at: usize,
        /// `code`.
        code: u8,
    },
    /// A load from the context outside its 12 bytes, or through a register that is not
    /// the context pointer.
    Load {
        /// Index in the program.
        at: usize,
    },
    /// A jump out of the program, or a path that ran longer than the bound (a loop).
    Flow {
        /// Index in the program.
        at: usize,
    },
    /// Reads a register no instruction wrote.
    Uninitialised {
        /// Index in the program.
        at: usize,
    },
    /// The decision depends on the request in a way a device list cannot say (say, a
    /// range compare between the sampled values).
    NotAList,
}

impl std::fmt::Display for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opaque::Instruction { at, code } => {
                write!(
                    f,
                    "instruction {at} (opcode {code:#04x}) is outside the device-list subset"
                )
            }
            Opaque::Load { at } => write!(f, "instruction {at} loads outside the device context"),
            Opaque::Flow { at } => write!(
                f,
                "control flow at instruction {at} leaves the program or loops"
            ),
            Opaque::Uninitialised { at } => {
                write!(f, "instruction {at} reads a register nothing wrote")
            }
            Opaque::NotAList => write!(f, "its decisions do not reduce to a device list"),
        }
    }
}

/// The access combinations the kernel asks about: `mknod(2)` asks `MKNOD` alone, an open
/// its `READ` and/or `WRITE` bits (`devcgroup_check_permission` callers).
pub const ASKED: &[Access] = &[
    Access::MKNOD,
    Access::READ,
    Access::WRITE,
    Access::READ.union(Access::WRITE),
];

/// The most instructions one run may execute (a loop-free program of the kernel's
/// 4,096-instruction limit for unprivileged loads runs fewer).
const MAX_STEPS: usize = 1 << 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reg {
    Unset,
    Ctx,
    Val(u64),
}

/// Runs `prog` for `req` the way the kernel would, for the subset device programs use:
/// 32-bit context loads, ALU and ALU64 arithmetic, JMP and JMP32 compares, `exit`.
/// Returns `r0` (1 allows).
pub fn run(prog: &[Insn], req: Request) -> Result<u64, Opaque> {
    let ctx = req.ctx_bytes();
    let mut r = [Reg::Unset; 11];
    r[1] = Reg::Ctx;
    let mut pc = 0usize;
    for _ in 0..MAX_STEPS {
        let Some(&i) = prog.get(pc) else {
            return Err(Opaque::Flow { at: pc });
        };
        let bad = || Opaque::Instruction {
            at: pc,
            code: i.code,
        };
        if i.dst > 10 || i.src > 10 {
            return Err(bad());
        }
        let val = |reg: u8| match r[reg as usize] {
            Reg::Val(v) => Ok(v),
            Reg::Unset => Err(Opaque::Uninitialised { at: pc }),
            Reg::Ctx => Err(bad()),
        };
        let c = i.class();
        match c {
            class::LDX => {
                let width = match i.code & 0x18 {
                    size::W => 4,
                    size::H => 2,
                    size::B => 1,
                    _ => return Err(bad()),
                };
                if i.code & 0xe0 != MODE_MEM {
                    return Err(bad());
                }
                if r[i.src as usize] != Reg::Ctx || i.off < 0 || i.off as usize + width > 12 {
                    return Err(Opaque::Load { at: pc });
                }
                let o = i.off as usize;
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(&ctx[o..o + width]);
                r[i.dst as usize] = Reg::Val(u64::from_le_bytes(b));
            }
            class::ALU | class::ALU64 => {
                let op = i.code & 0xf0;
                let s = if i.code & src::X != 0 {
                    val(i.src)?
                } else if c == class::ALU {
                    u64::from(i.imm as u32)
                } else {
                    i.imm as i64 as u64
                };
                let d = if op == alu::MOV { 0 } else { val(i.dst)? };
                let v = match op {
                    alu::MOV => s,
                    alu::AND => d & s,
                    0x40 => d | s,
                    0xa0 => d ^ s,
                    0x00 => d.wrapping_add(s),
                    0x10 => d.wrapping_sub(s),
                    alu::RSH if c == class::ALU => u64::from((d as u32) >> (s & 31)),
                    alu::RSH => d >> (s & 63),
                    0x60 if c == class::ALU => u64::from((d as u32) << (s & 31)),
                    0x60 => d << (s & 63),
                    _ => return Err(bad()),
                };
                r[i.dst as usize] = Reg::Val(if c == class::ALU { v & 0xffff_ffff } else { v });
            }
            class::JMP | class::JMP32 => {
                let op = i.code & 0xf0;
                if op == jmp::EXIT && c == class::JMP {
                    return val(0);
                }
                if !matches!(
                    op,
                    jmp::JA | jmp::JEQ | jmp::JNE | jmp::JSET | 0x20 | 0x30 | 0xa0 | 0xb0
                ) || (op == jmp::JA && c == class::JMP32)
                {
                    return Err(bad());
                }
                let taken = if op == jmp::JA {
                    true
                } else {
                    let (mut a, mut b) = (
                        val(i.dst)?,
                        if i.code & src::X != 0 {
                            val(i.src)?
                        } else {
                            i.imm as i64 as u64
                        },
                    );
                    if c == class::JMP32 {
                        a &= 0xffff_ffff;
                        b &= 0xffff_ffff;
                    }
                    match op {
                        jmp::JEQ => a == b,
                        jmp::JNE => a != b,
                        jmp::JSET => a & b != 0,
                        0x20 => a > b,
                        0x30 => a >= b,
                        0xa0 => a < b,
                        0xb0 => a <= b,
                        _ => return Err(bad()),
                    }
                };
                if taken {
                    let to = pc as i64 + 1 + i64::from(i.off);
                    if to < 0 || to as usize >= prog.len() {
                        return Err(Opaque::Flow { at: pc });
                    }
                    pc = to as usize;
                    continue;
                }
            }
            _ => return Err(bad()),
        }
        pc += 1;
    }
    Err(Opaque::Flow { at: pc })
}

/// One entry of a decoded device list: what a (type, major, minor) cell may do. `None`
/// numbers are "any other".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Entry {
    /// Device type.
    pub dev_type: DevType,
    /// Major; `None`: every major the list does not name.
    pub major: Option<u32>,
    /// Minor; `None`: every minor the list does not name for this major.
    pub minor: Option<u32>,
    /// Accesses allowed (empty: denied).
    #[serde(serialize_with = "ser_access")]
    pub access: Access,
}

fn ser_access<S: serde::Serializer>(a: &Access, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&a.letters())
}

impl std::fmt::Display for Entry {
    /// `c 226:128 rwm`, `c 226:* -`, `b *:* rwm`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
        write!(
            f,
            "{} {}:{} {}",
            self.dev_type.letter(),
            n(self.major),
            n(self.minor),
            self.access.letters()
        )
    }
}

/// Why a text is not a device-list entry (`c 226:128 rw`, `c *:* m`, `b 8:* -`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a device-list entry (TYPE MAJOR:MINOR ACCESS, as `c 226:128 rw`)")]
pub struct EntryError {
    /// The text refused.
    pub text: String,
}

impl std::str::FromStr for Entry {
    type Err = EntryError;

    /// Reads back what [`Entry`]'s `Display` writes: `b`/`c`, numbers or `*`, and the
    /// access letters `rwm` or `-` for none.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || EntryError {
            text: s.to_string(),
        };
        let mut it = s.split(' ');
        let dev_type = match it.next() {
            Some("b") => DevType::Block,
            Some("c") => DevType::Char,
            _ => return Err(bad()),
        };
        let (ma, mi) = it.next().and_then(|n| n.split_once(':')).ok_or_else(bad)?;
        let num = |v: &str| -> Result<Option<u32>, EntryError> {
            match v {
                "*" => Ok(None),
                v => v.parse().map(Some).map_err(|_| bad()),
            }
        };
        let letters = it.next().ok_or_else(bad)?;
        if it.next().is_some() || letters.is_empty() {
            return Err(bad());
        }
        let mut access = Access::empty();
        if letters != "-" {
            for ch in letters.chars() {
                access |= match ch {
                    'r' => Access::READ,
                    'w' => Access::WRITE,
                    'm' => Access::MKNOD,
                    _ => return Err(bad()),
                };
            }
        }
        Ok(Entry {
            dev_type,
            major: num(ma)?,
            minor: num(mi)?,
            access,
        })
    }
}

/// A value no compare of `prog` names, for the "any other" cells.
fn fresh(used: &BTreeSet<u32>) -> u32 {
    (0x7ff0_0000u32..)
        .find(|v| !used.contains(v))
        .unwrap_or(u32::MAX)
}

/// What `prog` allows, as a device list: the cells it names (every immediate its compares
/// use, as a major and as a minor) and "any other" cells, most specific first in
/// precedence (`M:m`, then `M:*`, then `*:*`), with the access bits allowed in each.
/// Sound by construction: the list is checked against [`run`] on every sampled request
/// (the named values, their neighbours and a fresh one), in every combination of access
/// bits, and a program whose answers the list cannot reproduce is [`Opaque::NotAList`].
pub fn decode(prog: &[Insn]) -> Result<Vec<Entry>, Opaque> {
    let mut named = BTreeSet::new();
    for i in prog {
        let c = i.class();
        if (c == class::JMP || c == class::JMP32) && i.code & src::X == 0 {
            named.insert(i.imm as u32);
        }
    }
    // Values where a range compare could change its answer: each named value and its
    // neighbours, plus the extremes.
    let mut sample: BTreeSet<u32> = BTreeSet::new();
    for &v in &named {
        sample.extend([v.wrapping_sub(1), v, v.wrapping_add(1)]);
    }
    sample.extend([0, u32::MAX]);
    let other = fresh(&sample);
    sample.insert(other);
    // What the kernel asks: mknod alone, or an open's read and/or write bits.
    let combos = ASKED;
    let singles = [Access::MKNOD, Access::READ, Access::WRITE];
    let cell = |t: DevType, major: u32, minor: u32| -> Result<Access, Opaque> {
        let mut allowed = Access::empty();
        for a in singles {
            let req = Request {
                dev_type: t,
                major,
                minor,
                access: a,
            };
            if run(prog, req)? == 1 {
                allowed |= a;
            }
        }
        Ok(allowed)
    };
    // Built from the least to the most specific, each entry only where it changes what
    // the list already answers for its cell.
    let mut out: Vec<Entry> = Vec::new();
    let add =
        |out: &mut Vec<Entry>, t: DevType, major: Option<u32>, minor: Option<u32>, a: Access| {
            if lookup(out, t, major.unwrap_or(other), minor.unwrap_or(other)) != Some(a) {
                out.push(Entry {
                    dev_type: t,
                    major,
                    minor,
                    access: a,
                });
            }
        };
    for t in [DevType::Block, DevType::Char] {
        let a = cell(t, other, other)?;
        out.push(Entry {
            dev_type: t,
            major: None,
            minor: None,
            access: a,
        });
        for &minor in &named {
            let a = cell(t, other, minor)?;
            add(&mut out, t, None, Some(minor), a);
        }
        for &major in &named {
            let a = cell(t, major, other)?;
            add(&mut out, t, Some(major), None, a);
        }
        for &major in &named {
            for &minor in &named {
                let a = cell(t, major, minor)?;
                add(&mut out, t, Some(major), Some(minor), a);
            }
        }
    }
    // The check: every sampled request, every access combination, answered the same way
    // by the program and by the list.
    for t in [DevType::Block, DevType::Char] {
        for &major in &sample {
            for &minor in &sample {
                for &a in combos {
                    let req = Request {
                        dev_type: t,
                        major,
                        minor,
                        access: a,
                    };
                    let prog_allows = run(prog, req)? == 1;
                    if prog_allows != list_allows(&out, req) {
                        return Err(Opaque::NotAList);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What a decoded list answers for `req`: the most specific entry for the cell (`M:m`,
/// `M:*`, `*:m`, `*:*`), whose bits must include all the request's.
pub fn list_allows(list: &[Entry], req: Request) -> bool {
    lookup(list, req.dev_type, req.major, req.minor).is_some_and(|a| a.contains(req.access))
}

/// The access bits the most specific entry for a cell allows.
fn lookup(list: &[Entry], t: DevType, major: u32, minor: u32) -> Option<Access> {
    let find = |ma: Option<u32>, mi: Option<u32>| {
        list.iter()
            .find(|e| e.dev_type == t && e.major == ma && e.minor == mi)
            .map(|e| e.access)
    };
    find(Some(major), Some(minor))
        .or_else(|| find(Some(major), None))
        .or_else(|| find(None, Some(minor)))
        .or_else(|| find(None, None))
}

/// The policy of a program [`build`] made (this drmtool's own), read back exactly; `None`
/// for any other program.
pub fn ours(prog: &[Insn]) -> Option<Policy> {
    let empty = Policy {
        rules: Vec::new(),
        default_allow: false,
    };
    let prologue = build(&empty);
    let head = prologue.len() - 2;
    if prog.len() < prologue.len() || prog[..head] != prologue[..head] {
        return None;
    }
    let mut rules = Vec::new();
    let mut i = head;
    let ret = |a: &Insn, b: &Insn| -> Option<bool> {
        (a.code == class::ALU | alu::MOV | src::K
            && a.dst == R0
            && (a.imm == 0 || a.imm == 1)
            && *b == Insn::exit())
        .then_some(a.imm == 1)
    };
    loop {
        let rest = &prog[i..];
        if rest.len() == 2 {
            let default_allow = ret(&rest[0], &rest[1])?;
            let p = Policy {
                rules,
                default_allow,
            };
            return (build(&p) == prog).then_some(p);
        }
        let mut r = Rule {
            allow: false,
            dev_type: None,
            major: None,
            minor: None,
            access: Access::all(),
        };
        let mut j = i;
        let jne = |x: &Insn, reg: u8| x.code == class::JMP32 | jmp::JNE | src::K && x.dst == reg;
        if prog.get(j).is_some_and(|x| jne(x, R_TYPE)) {
            r.dev_type = match prog[j].imm {
                1 => Some(DevType::Block),
                2 => Some(DevType::Char),
                _ => return None,
            };
            j += 1;
        }
        if prog
            .get(j)
            .is_some_and(|x| x.code == class::ALU | alu::MOV | src::X && x.dst == R_SCRATCH)
        {
            r.access = Access::from_bits(prog.get(j + 1)?.imm as u32)?;
            j += 3;
        }
        if prog.get(j).is_some_and(|x| jne(x, R_MAJOR)) {
            r.major = Some(prog[j].imm as u32);
            j += 1;
        }
        if prog.get(j).is_some_and(|x| jne(x, R_MINOR)) {
            r.minor = Some(prog[j].imm as u32);
            j += 1;
        }
        r.allow = ret(prog.get(j)?, prog.get(j + 1)?)?;
        rules.push(r);
        i = j + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_what_display_writes() {
        for text in [
            "c 226:128 rw",
            "c *:* m",
            "b 8:* -",
            "c 195:255 rwm",
            "b *:0 r",
        ] {
            let e: Entry = text.parse().unwrap();
            assert_eq!(e.to_string(), text);
        }
        let e: Entry = "c 226:128 rw".parse().unwrap();
        assert_eq!(
            (e.dev_type, e.major, e.minor, e.access),
            (
                DevType::Char,
                Some(226),
                Some(128),
                Access::READ | Access::WRITE
            )
        );
        for bad in [
            "",
            "x 1:2 r",
            "c 1 r",
            "c 1:2",
            "c 1:2 rx",
            "c a:2 r",
            "c 1:2 r extra",
            "c 1:2 ",
        ] {
            assert_eq!(
                bad.parse::<Entry>(),
                Err(EntryError { text: bad.into() }),
                "{bad:?}"
            );
        }
    }

    /// Every (type, access, major, minor) a policy names, with neighbours and a stranger.
    fn requests(policy: &Policy) -> Vec<Request> {
        let mut nums = BTreeSet::from([0u32, 1, 7, u32::MAX, 0x7fff_ffff, 0x8000_0000]);
        for r in &policy.rules {
            for v in [r.major, r.minor].into_iter().flatten() {
                nums.extend([v.wrapping_sub(1), v, v.wrapping_add(1)]);
            }
        }
        let mut out = Vec::new();
        for t in [DevType::Block, DevType::Char] {
            for &major in &nums {
                for &minor in &nums {
                    for &access in ASKED {
                        out.push(Request {
                            dev_type: t,
                            major,
                            minor,
                            access,
                        });
                    }
                }
            }
        }
        out
    }

    /// rbpf's interpreter (an eBPF VM written apart from this crate) on the kernel's bytes.
    fn rbpf_allows(prog: &[Insn], req: Request) -> bool {
        let bytes = crate::isolate::bpf::to_bytes(prog);
        let vm = rbpf::EbpfVmRaw::new(Some(&bytes)).expect("rbpf accepts the program");
        let mut ctx = req.ctx_bytes();
        match vm.execute_program(&mut ctx).expect("rbpf runs it") {
            0 => false,
            1 => true,
            other => panic!("r0 = {other}"),
        }
    }

    fn policies() -> Vec<Policy> {
        let any = Access::all();
        let rule = |allow, dev_type, major, minor, access| Rule {
            allow,
            dev_type,
            major,
            minor,
            access,
        };
        vec![
            Policy::only_drm_minors(&[0, 128]),
            Policy::only_drm_minors(&[]),
            Policy::only_drm_minors(&[1, 2, 129, 130, 131]),
            // runc's default allowlist shape: a few char devices, everything else denied.
            Policy {
                rules: vec![
                    rule(true, Some(DevType::Char), Some(1), Some(3), any),
                    rule(true, Some(DevType::Char), Some(1), Some(5), any),
                    rule(true, Some(DevType::Char), Some(5), Some(0), any),
                    rule(true, Some(DevType::Char), Some(136), None, any),
                    rule(true, None, None, None, Access::MKNOD),
                    rule(
                        true,
                        Some(DevType::Char),
                        Some(226),
                        Some(128),
                        Access::READ | Access::WRITE,
                    ),
                ],
                default_allow: false,
            },
            // Deny rules with partial access, any-type rules, big numbers.
            Policy {
                rules: vec![
                    rule(false, Some(DevType::Block), Some(8), None, Access::WRITE),
                    rule(true, None, Some(u32::MAX), Some(0x8000_0000), Access::READ),
                    rule(false, Some(DevType::Char), None, Some(5), any),
                ],
                default_allow: true,
            },
        ]
    }

    #[test]
    fn every_built_program_agrees_with_its_policy_in_rbpf_and_in_run() {
        for p in policies() {
            let prog = build(&p);
            for req in requests(&p) {
                let want = p.allows(req);
                assert_eq!(rbpf_allows(&prog, req), want, "rbpf: {p:?} {req:?}");
                assert_eq!(run(&prog, req), Ok(u64::from(want)), "run: {p:?} {req:?}");
            }
        }
    }

    #[test]
    fn a_wrong_program_is_seen_wrong() {
        // The oracle can fail: a program whose minor test compares the major instead.
        let p = Policy::only_drm_minors(&[128]);
        let mut prog = build(&p);
        let at = prog
            .iter()
            .position(|i| i.dst == R_MINOR && i.class() == class::JMP32)
            .unwrap();
        prog[at].dst = R_MAJOR;
        let req = Request {
            dev_type: DevType::Char,
            major: 226,
            minor: 128,
            access: Access::READ,
        };
        assert!(p.allows(req));
        assert!(!rbpf_allows(&prog, req));
    }

    #[test]
    fn decoded_lists_answer_like_the_programs() {
        let mut all = policies();
        // A deny of `w` alone does not match an O_RDWR open (its bits are not all in the
        // rule), which a device list cannot say: the decoder refuses rather than guess.
        let quirk = all.pop().unwrap();
        assert_eq!(decode(&build(&quirk)), Err(Opaque::NotAList));
        assert_eq!(ours(&build(&quirk)), Some(quirk));
        for p in all {
            let prog = build(&p);
            let list = decode(&prog).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            for req in requests(&p) {
                assert_eq!(
                    list_allows(&list, req),
                    p.allows(req),
                    "{p:?} {req:?}: {list:?}"
                );
            }
            assert_eq!(ours(&prog).as_ref(), Some(&p));
        }
        let list = decode(&build(&Policy::only_drm_minors(&[128]))).unwrap();
        let text: Vec<String> = list.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            text,
            ["b *:* rwm", "c *:* rwm", "c 226:* -", "c 226:128 rwm"],
            "{list:?}"
        );
    }

    #[test]
    fn programs_outside_the_subset_are_opaque() {
        let req = Request {
            dev_type: DevType::Char,
            major: 1,
            minor: 3,
            access: Access::READ,
        };
        // A helper call.
        let call = Insn {
            code: class::JMP | jmp::CALL,
            dst: 0,
            src: 0,
            off: 0,
            imm: 14,
        };
        assert_eq!(
            run(&[call, Insn::exit()], req),
            Err(Opaque::Instruction { at: 0, code: 0x85 })
        );
        // r0 never written.
        assert_eq!(
            run(&[Insn::exit()], req),
            Err(Opaque::Uninitialised { at: 0 })
        );
        // A load past the context.
        assert_eq!(
            run(&[Insn::ldx_w(2, 1, 12), Insn::exit()], req),
            Err(Opaque::Load { at: 0 })
        );
        // A loop.
        let spin = Insn {
            code: class::JMP | jmp::JA,
            dst: 0,
            src: 0,
            off: -1,
            imm: 0,
        };
        assert_eq!(run(&[spin], req), Err(Opaque::Flow { at: 0 }));
        // A range compare between sampled values: allowed iff major > 10 (not a list).
        let range = [
            Insn::ldx_w(4, 1, 4),
            Insn::alu32_imm(alu::MOV, 0, 0),
            Insn::jmp32_imm(0xb0, 4, 10, 1),
            Insn::alu32_imm(alu::MOV, 0, 1),
            Insn::exit(),
        ];
        assert_eq!(decode(&range), Err(Opaque::NotAList));
        assert_eq!(ours(&range), None);
    }
}
