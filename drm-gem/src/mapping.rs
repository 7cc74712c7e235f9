//! CPU mappings of buffer objects.

use crate::error::Result;
use crate::mmap::{Mmap, MmapOptions, Prot, Sharing};
use core::marker::PhantomData;
use rustix::fd::BorrowedFd;

/// A CPU mapping of a buffer; unmapped on drop.
///
/// It borrows what it maps, so the buffer cannot be dropped (or mapped again mutably)
/// while the mapping exists. The memory can also be written by a device, by importers of an
/// exported dma-buf, or by another process, so the safe API copies in and out (volatile,
/// bounds-checked: the copies of the [`Mmap`] it holds) and never hands out a Rust
/// reference; the slice views are `unsafe`.
#[derive(Debug)]
pub struct Mapping<'b> {
    pub(crate) map: Mmap,
    _borrow: PhantomData<&'b mut ()>,
}

impl Mapping<'_> {
    /// Maps `len` bytes of `fd` at `offset`, shared, read-write.
    #[inline]
    pub(crate) fn new<'a>(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Mapping<'a>> {
        Ok(Mapping {
            map: Mmap::map(
                fd,
                offset,
                len,
                Prot::READ | Prot::WRITE,
                Sharing::Shared,
                MmapOptions::empty(),
            )?,
            _borrow: PhantomData,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The owned mapping underneath (its address, protection and flags; its copies are
    /// the ones of this type).
    pub fn mmap(&self) -> &Mmap {
        &self.map
    }

    /// Copies `src` into the mapping at `offset` ([`Mmap::write_at`]).
    #[inline]
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.map.write_at(offset, src)
    }

    /// Copies from the mapping at `offset` into `dst` ([`Mmap::read_at`]).
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.map.read_at(offset, dst)
    }

    // The unsafe slice views `as_slice` and `as_mut_slice` are in `sys_call` (the crate's
    // only unsafe code).
}
