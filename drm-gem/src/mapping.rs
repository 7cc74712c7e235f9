//! CPU mappings of buffer objects.

use crate::error::{Error, Result};
use crate::sys_call::RawMap;
use core::marker::PhantomData;
use rustix::fd::BorrowedFd;

/// A CPU mapping of a buffer; unmapped on drop.
///
/// It borrows what it maps, so the buffer cannot be dropped (or mapped again mutably)
/// while the mapping exists. The memory can also be written by a device, by importers of an
/// exported dma-buf, or by another process, so the safe API copies in and out and never
/// hands out a Rust reference; the slice views are `unsafe`.
#[derive(Debug)]
pub struct Mapping<'b> {
    map: RawMap,
    _borrow: PhantomData<&'b mut ()>,
}

impl Mapping<'_> {
    /// Maps `len` bytes of `fd` at `offset`, shared, read-write.
    pub(crate) fn new<'a>(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Mapping<'a>> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                what: "cannot map 0 bytes".into(),
            });
        }
        Ok(Mapping {
            map: RawMap::new(fd, offset, len)?,
            _borrow: PhantomData,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    fn out_of_range(&self, offset: usize, n: usize) -> Error {
        Error::InvalidArgument {
            what: format!(
                "{n} bytes at offset {offset} exceed the mapping's {} bytes",
                self.len()
            ),
        }
    }

    /// Copies `src` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        if self.map.write_at(offset, src) {
            Ok(())
        } else {
            Err(self.out_of_range(offset, src.len()))
        }
    }

    /// Copies from the mapping at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        if self.map.read_at(offset, dst) {
            Ok(())
        } else {
            Err(self.out_of_range(offset, dst.len()))
        }
    }

    /// Views the mapping as a slice.
    ///
    /// # Safety
    /// While the slice lives nothing may write this memory: no device job, no importer of
    /// an exported dma-buf, no other process or mapping.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: forwarded: the caller guarantees no concurrent writer.
        unsafe { self.map.slice() }
    }

    /// Views the mapping as a mutable slice.
    ///
    /// # Safety
    /// While the slice lives nothing else may read or write this memory: no device job, no
    /// importer of an exported dma-buf, no other process or mapping.
    #[allow(unsafe_code)]
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: forwarded: the caller guarantees exclusive access.
        unsafe { self.map.slice_mut() }
    }
}
