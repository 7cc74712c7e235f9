//! eBPF instructions as data: the 8-byte encoding the kernel loads (`struct bpf_insn`) and
//! reads back (`BPF_OBJ_GET_INFO_BY_FD`'s translated instructions), with the opcode fields
//! of `linux/bpf_common.h` and `linux/bpf.h`.

/// Instruction classes (the low 3 bits of `code`).
pub mod class {
    /// Loads (legacy and 64-bit immediates).
    pub const LD: u8 = 0x00;
    /// Loads from memory into a register.
    pub const LDX: u8 = 0x01;
    /// Stores of an immediate.
    pub const ST: u8 = 0x02;
    /// Stores of a register.
    pub const STX: u8 = 0x03;
    /// 32-bit arithmetic.
    pub const ALU: u8 = 0x04;
    /// 64-bit jumps (compare the whole registers).
    pub const JMP: u8 = 0x05;
    /// 32-bit jumps (compare the low halves).
    pub const JMP32: u8 = 0x06;
    /// 64-bit arithmetic.
    pub const ALU64: u8 = 0x07;
}

/// Operand source (bit 3): the immediate or the source register.
pub mod src {
    /// `imm`.
    pub const K: u8 = 0x00;
    /// `src_reg`.
    pub const X: u8 = 0x08;
}

/// Memory access sizes (bits 3-4 of loads and stores).
pub mod size {
    /// 32 bits.
    pub const W: u8 = 0x00;
    /// 16 bits.
    pub const H: u8 = 0x08;
    /// 8 bits.
    pub const B: u8 = 0x10;
    /// 64 bits.
    pub const DW: u8 = 0x18;
}

/// Memory access mode (bits 5-7 of loads and stores): `MEM` is `[reg + off]`.
pub const MODE_MEM: u8 = 0x60;

/// ALU operations (bits 4-7 of ALU/ALU64).
pub mod alu {
    /// `dst &= src`.
    pub const AND: u8 = 0x50;
    /// `dst >>= src` (logical).
    pub const RSH: u8 = 0x70;
    /// `dst = src`.
    pub const MOV: u8 = 0xb0;
}

/// Jump operations (bits 4-7 of JMP/JMP32).
pub mod jmp {
    /// Always.
    pub const JA: u8 = 0x00;
    /// `==`.
    pub const JEQ: u8 = 0x10;
    /// `dst & src != 0`.
    pub const JSET: u8 = 0x40;
    /// `!=`.
    pub const JNE: u8 = 0x50;
    /// A helper call.
    pub const CALL: u8 = 0x80;
    /// Return `r0`.
    pub const EXIT: u8 = 0x90;
}

/// One instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: class | operation/size | source/mode.
    pub code: u8,
    /// Destination register (0-10).
    pub dst: u8,
    /// Source register (0-10).
    pub src: u8,
    /// Signed offset: a jump's distance in instructions after the next one, or a memory
    /// displacement.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// The kernel's 8 bytes (little-endian host: `dst` is the low nibble of byte 1).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// Reads 8 bytes back.
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// `dst = *(u32 *)(src + off)`.
    pub const fn ldx_w(dst: u8, src_reg: u8, off: i16) -> Insn {
        Insn {
            code: class::LDX | size::W | MODE_MEM,
            dst,
            src: src_reg,
            off,
            imm: 0,
        }
    }

    /// A 32-bit ALU operation with an immediate (`op` from [`alu`]).
    pub const fn alu32_imm(op: u8, dst: u8, imm: i32) -> Insn {
        Insn {
            code: class::ALU | op | src::K,
            dst,
            src: 0,
            off: 0,
            imm,
        }
    }

    /// A 32-bit ALU operation with a register (`op` from [`alu`]).
    pub const fn alu32_reg(op: u8, dst: u8, src_reg: u8) -> Insn {
        Insn {
            code: class::ALU | op | src::X,
            dst,
            src: src_reg,
            off: 0,
            imm: 0,
        }
    }

    /// A 32-bit conditional jump against an immediate (`op` from [`jmp`]).
    pub const fn jmp32_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn {
            code: class::JMP32 | op | src::K,
            dst,
            src: 0,
            off,
            imm,
        }
    }

    /// A 32-bit conditional jump against a register (`op` from [`jmp`]).
    pub const fn jmp32_reg(op: u8, dst: u8, src_reg: u8, off: i16) -> Insn {
        Insn {
            code: class::JMP32 | op | src::X,
            dst,
            src: src_reg,
            off,
            imm: 0,
        }
    }

    /// `exit` (returns `r0`).
    pub const fn exit() -> Insn {
        Insn {
            code: class::JMP | jmp::EXIT,
            dst: 0,
            src: 0,
            off: 0,
            imm: 0,
        }
    }

    /// The class bits.
    pub fn class(self) -> u8 {
        self.code & 0x07
    }
}

/// A whole program as the kernel loads it.
pub fn to_bytes(prog: &[Insn]) -> Vec<u8> {
    prog.iter().flat_map(|i| i.to_bytes()).collect()
}

/// A program read back; `None` when the length is not a multiple of 8.
pub fn from_bytes(bytes: &[u8]) -> Option<Vec<Insn>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| Insn::from_bytes(c.try_into().expect("8 bytes")))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_matches_the_kernels_layout() {
        // `r2 = *(u32 *)(r1 + 4)`: 0x61, dst 2 | src 1 << 4, off 4.
        let i = Insn::ldx_w(2, 1, 4);
        assert_eq!(i.to_bytes(), [0x61, 0x12, 4, 0, 0, 0, 0, 0]);
        assert_eq!(Insn::from_bytes(i.to_bytes()), i);
        // `if w4 != 226 goto +3`: JMP32 | JNE | K = 0x56.
        let j = Insn::jmp32_imm(jmp::JNE, 4, 226, 3);
        assert_eq!(j.to_bytes(), [0x56, 0x04, 3, 0, 226, 0, 0, 0]);
        assert_eq!(Insn::exit().to_bytes()[0], 0x95);
        let neg = Insn::jmp32_imm(jmp::JEQ, 1, -1, -2);
        assert_eq!(Insn::from_bytes(neg.to_bytes()), neg);
        assert_eq!(from_bytes(&[0; 7]), None);
        assert_eq!(from_bytes(&to_bytes(&[i, j])).unwrap(), vec![i, j]);
    }
}
