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
    pub(crate) map: RawMap,
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

    // The unsafe slice views `as_slice` and `as_mut_slice` are in `sys_call` (the crate's
    // only unsafe code).
}
