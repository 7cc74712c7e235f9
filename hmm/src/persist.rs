//! Making stores to persistent memory durable, and what "durable" means when
//! [`DaxMapping::persist`](crate::DaxMapping::persist) returns.
//!
//! # The guarantee
//! When `persist(offset, len)` returns `Ok`, every store this process made to
//! `offset..offset + len` of the mapping before the call survives a power failure that
//! happens after the return, and is found again at the same offset of the same file or
//! device after the next boot, provided that:
//! - the platform's persistence domain includes the memory controller (ADR) or the CPU
//!   caches (eADR): the region's `persistence_domain` in sysfs says which (QEMU reports
//!   nothing; its NVDIMM is a host file that every store reaches at once);
//! - for fsdax files, the mapping is [`DaxMapping::map_file`](crate::DaxMapping::map_file)
//!   (`MAP_SYNC`): then a write fault that allocated blocks has already committed the
//!   filesystem metadata before the store could happen, so flushing the CPU caches is all
//!   that is left to do, and it is done from user space ([`PersistMethod::CacheFlush`]);
//! - for fsdax files mapped without `MAP_SYNC`
//!   ([`DaxMapping::map_file_without_sync`](crate::DaxMapping::map_file_without_sync)),
//!   `persist` calls `msync(MS_SYNC)` on the pages of the range ([`PersistMethod::Msync`]),
//!   which writes back the caches and commits the metadata, at the price of a syscall;
//! - devdax mappings have no filesystem metadata: a cache flush suffices.
//!
//! Nothing is promised about stores made after `persist` started, nor about atomicity:
//! a power cut during a multi-line write can leave any subset of its cache lines durable,
//! so records should carry a checksum (the power-cut test in `kernel-tests` does).
//!
//! # How the flush is done (x86-64)
//! Each cache line of the range is written back with the best instruction the CPU has
//! (`clwb`, else `clflushopt`, else `clflush`; CPUID leaf 7), then one `sfence` orders the
//! write-backs before any later store. On other architectures there is no flush here and
//! `persist` falls back to `msync` for every kind of mapping.

use crate::sys_call;

/// The cache-line write-back instruction [`DaxMapping::persist`](crate::DaxMapping::persist)
/// uses on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushInstruction {
    /// `clwb`: writes the line back and may keep it cached.
    Clwb,
    /// `clflushopt`: writes back and evicts, weakly ordered (needs the fence).
    Clflushopt,
    /// `clflush`: writes back and evicts, ordered.
    Clflush,
}

/// How one `persist` call made a range durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMethod {
    /// Cache lines written back from user space, then `sfence` (MAP_SYNC fsdax or devdax).
    CacheFlush(FlushInstruction),
    /// `msync(MS_SYNC)` on the pages of the range (fsdax without MAP_SYNC, or no user-space
    /// flush on this architecture).
    Msync,
}

/// The flush instruction this CPU offers, or `None` where there is none usable from user
/// space (not x86-64).
pub fn flush_instruction() -> Option<FlushInstruction> {
    match sys_call::flush_insn() {
        sys_call::FlushInsn::Clwb => Some(FlushInstruction::Clwb),
        sys_call::FlushInsn::Clflushopt => Some(FlushInstruction::Clflushopt),
        sys_call::FlushInsn::Clflush => Some(FlushInstruction::Clflush),
        sys_call::FlushInsn::None => None,
    }
}

/// The cache-line size flushes work in, in bytes.
pub const CACHE_LINE: usize = sys_call::CACHE_LINE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_always_has_a_flush() {
        if cfg!(target_arch = "x86_64") {
            assert!(flush_instruction().is_some());
        }
        assert_eq!(CACHE_LINE, 64);
    }
}
