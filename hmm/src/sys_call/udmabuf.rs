//! Raw calls for udmabuf (see the module header of `sys_call` for the safety argument).

use super::{ioctl_error, retry};
use drm_gem::Error;
use ioctl_sys::udmabuf as usys;
use rustix::fd::{BorrowedFd, FromRawFd, OwnedFd};
use rustix::ioctl::{IoctlOutput, Opcode, ioctl};

/// Adopts the fd that the udmabuf request `ioctl` returned as its result.
fn own_result(ioctl: &'static str, raw: IoctlOutput) -> Result<OwnedFd, Error> {
    if raw < 0 {
        return Err(Error::BadReply {
            ioctl,
            what: "a negative fd",
        });
    }
    // SAFETY: udmabuf's create requests return a new dma-buf fd as the ioctl result; nothing
    // else owns it, so it is closed exactly once, by the returned OwnedFd.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A `_IOW` request whose result (the ioctl's return value) is a new fd. `arg` points at
/// the argument (for CREATE_LIST: the header with its items behind it, in one allocation,
/// so the pointer keeps the provenance of the whole allocation).
struct FdResult<const OPCODE: Opcode> {
    arg: *mut core::ffi::c_void,
}

// SAFETY: `as_ptr` returns the argument pointer, which the constructing code pairs with a
// request that reads exactly what it points at (see each call); the kernel only reads it,
// but `IS_MUTATING` stays true to be conservative. The output is the raw return value.
unsafe impl<const OPCODE: Opcode> rustix::ioctl::Ioctl for FdResult<OPCODE> {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        OPCODE
    }

    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        self.arg
    }

    unsafe fn output_from_ptr(
        out: IoctlOutput,
        _extract_output: *mut core::ffi::c_void,
    ) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// `UDMABUF_CREATE`: a dma-buf over `size` bytes of the memfd numbered `arg.memfd` from
/// `arg.offset`. The kernel only reads the fd number.
pub(crate) fn udmabuf_create(
    fd: BorrowedFd<'_>,
    arg: &mut usys::udmabuf_create,
) -> Result<OwnedFd, Error> {
    let out = retry(|| {
        // SAFETY: UDMABUF_CREATE is an _IOW over exactly one udmabuf_create (checked by
        // ioctl-sys's opcode tests), a plain-data struct borrowed for the whole call.
        unsafe {
            ioctl(
                fd,
                FdResult::<{ usys::UDMABUF_CREATE as Opcode }> {
                    arg: core::ptr::from_mut(&mut *arg).cast(),
                },
            )
        }
    })
    .map_err(|errno| ioctl_error("UDMABUF_CREATE", errno))?;
    own_result("UDMABUF_CREATE", out)
}

/// `UDMABUF_CREATE_LIST`: a dma-buf over the concatenation of `items`, with `flags`.
pub(crate) fn udmabuf_create_list(
    fd: BorrowedFd<'_>,
    flags: u32,
    items: &[usys::udmabuf_create_item],
) -> Result<OwnedFd, Error> {
    // One allocation: the 8-byte header, then the items (24 bytes each, 8-aligned), in
    // u64 words so that the items are aligned as the kernel struct is.
    let head_words = core::mem::size_of::<usys::udmabuf_create_list>() / 8;
    let item_words = core::mem::size_of::<usys::udmabuf_create_item>() / 8;
    let mut words = vec![0u64; head_words + item_words * items.len()];
    let count = u32::try_from(items.len()).map_err(|_| Error::InvalidArgument {
        what: "more udmabuf items than fit in a u32".into(),
    })?;
    words[0] = u64::from(flags) | (u64::from(count) << 32);
    for (i, it) in items.iter().enumerate() {
        let w = &mut words[head_words + i * item_words..head_words + (i + 1) * item_words];
        w[0] = u64::from(it.memfd) | (u64::from(it.__pad) << 32);
        w[1] = it.offset;
        w[2] = it.size;
    }
    // The header is the first word: `flags` at byte 0, `count` at byte 4 (little endian,
    // x86_64 only like the rest of ioctl-sys).
    const _: () = assert!(cfg!(target_endian = "little"));
    let head = words.as_mut_ptr().cast::<core::ffi::c_void>();
    let out = retry(|| {
        // SAFETY: UDMABUF_CREATE_LIST is an _IOW over a udmabuf_create_list header
        // (checked by ioctl-sys's opcode tests) and then reads `count` items right behind
        // it; `words` holds exactly the header and `count` items in the kernel's layout
        // (8-byte aligned u64 words), is exclusively ours and outlives the call. The
        // kernel only reads it.
        unsafe {
            ioctl(
                fd,
                FdResult::<{ usys::UDMABUF_CREATE_LIST as Opcode }> { arg: head },
            )
        }
    })
    .map_err(|errno| ioctl_error("UDMABUF_CREATE_LIST", errno))?;
    own_result("UDMABUF_CREATE_LIST", out)
}
