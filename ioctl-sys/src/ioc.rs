//! The asm-generic ioctl request encoding (`_IOC`), as `const fn`s over Rust types.
//!
//! x86_64 uses the generic layout: number in bits 0-7, type in bits 8-15, argument size in
//! bits 16-29, direction in bits 30-31 (`_IOC_NONE` 0, `_IOC_WRITE` 1, `_IOC_READ` 2).
//! Every generated request constant is computed here from `size_of` the *Rust* struct, so a
//! struct whose layout drifted from C yields a different number, which
//! `tests/opcodes.rs` catches against the numbers a C compiler produced.

/// `_IOC_NONE`: no data transfer.
pub const DIR_NONE: u32 = 0;
/// `_IOC_WRITE`: userspace writes, the kernel reads.
pub const DIR_WRITE: u32 = 1;
/// `_IOC_READ`: the kernel writes, userspace reads.
pub const DIR_READ: u32 = 2;

/// Largest argument size the 14-bit size field can hold.
pub const SIZE_MAX: usize = (1 << 14) - 1;

/// `_IOC(dir, ty, nr, size)`. Fails to compile (in const context) if `size` does not fit.
pub const fn encode(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(
        size <= SIZE_MAX,
        "ioctl argument too large for the size field"
    );
    assert!(ty <= 0xff && nr <= 0xff && dir <= 3);
    (dir << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// `_IO(ty, nr)`.
pub const fn none(ty: u32, nr: u32) -> u32 {
    encode(DIR_NONE, ty, nr, 0)
}

/// `_IOR(ty, nr, T)`.
pub const fn read<T>(ty: u32, nr: u32) -> u32 {
    encode(DIR_READ, ty, nr, core::mem::size_of::<T>())
}

/// `_IOW(ty, nr, T)`.
pub const fn write<T>(ty: u32, nr: u32) -> u32 {
    encode(DIR_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOWR(ty, nr, T)`.
pub const fn read_write<T>(ty: u32, nr: u32) -> u32 {
    encode(DIR_READ | DIR_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// Splits a request number into `(dir, type, nr, size)` (`_IOC_DIR`, `_IOC_TYPE`, ...).
pub const fn decode(req: u32) -> (u32, u32, u32, usize) {
    (
        req >> 30,
        (req >> 8) & 0xff,
        req & 0xff,
        ((req >> 16) & 0x3fff) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_c_macros() {
        // _IOWR('d', 0x0c, struct drm_get_cap) with sizeof == 16.
        assert_eq!(read_write::<[u64; 2]>(b'd' as u32, 0x0c), 0xc010_640c);
        assert_eq!(none(b'd' as u32, 0x1e), 0x641e);
        assert_eq!(decode(0xc010_640c), (3, 0x64, 0x0c, 16));
    }
}
