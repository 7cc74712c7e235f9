//! Raw calls for `dma_buf` (see the module header of `sys_call` for the safety argument).
//!
//! `DMA_BUF_IOCTL_SYNC` itself is declared in `sys_call/mod.rs` (it predates this file).

use super::{BorrowedFd, Error, retry};
use ioctl_sys::dma_buf as dsys;
use rustix::ioctl::{IntegerSetter, Opcode, Updater, ioctl};

drm_ioctl!(safe
    /// Returns a sync_file (new fd in `fd`) holding the dma-buf's fences that a reader
    /// (`DMA_BUF_SYNC_READ`) or a writer (`DMA_BUF_SYNC_WRITE`) must wait for. Since Linux
    /// 6.0; ENOTTY before.
    dma_buf::DMA_BUF_IOCTL_EXPORT_SYNC_FILE => dma_buf_export_sync_file(&mut dsys::dma_buf_export_sync_file));
drm_ioctl!(safe
    /// Adds the fences of the sync_file numbered `fd` to the dma-buf as readers or writers.
    /// Since Linux 6.0; ENOTTY before. The kernel only reads the fd number.
    dma_buf::DMA_BUF_IOCTL_IMPORT_SYNC_FILE => dma_buf_import_sync_file(&mut dsys::dma_buf_import_sync_file));

/// `DMA_BUF_SET_NAME_B`: names the dma-buf (shown as `name:` in its fdinfo). The kernel
/// copies at most `DMA_BUF_NAME_LEN` bytes including the NUL and answers EINVAL if the
/// string is longer (EBUSY on Linux 5.10 while the buffer is attached to a device).
pub(crate) fn dma_buf_set_name(fd: BorrowedFd<'_>, name: &core::ffi::CStr) -> Result<(), Error> {
    retry(|| {
        // SAFETY: DMA_BUF_SET_NAME_B takes the string's address itself as the ioctl argument
        // (`IntegerSetter`, nothing is written back); `name` is NUL-terminated and borrowed
        // for the whole call, and the kernel reads it only up to the NUL or
        // DMA_BUF_NAME_LEN bytes, whichever comes first.
        unsafe {
            ioctl(
                fd,
                IntegerSetter::<{ dsys::DMA_BUF_SET_NAME_B as Opcode }>::new_pointer(
                    name.as_ptr().cast_mut().cast(),
                ),
            )
        }
    })
    .map_err(|errno| Error::ioctl("DMA_BUF_SET_NAME_B", errno))
}
