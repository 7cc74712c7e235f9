//! `libcuda.so.1` loaded at run time (`dlopen`), for host registration: no build-time CUDA
//! dependency. Only the driver API calls registration needs are resolved.

use drm_gem::Error;
use std::ffi::{CStr, c_int, c_uint, c_void};
use std::sync::OnceLock;

type CuResult = c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> CuResult;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> CuResult;
type CuPrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult;
type CuCtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> CuResult;
type CuMemHostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult;
type CuMemHostUnregister = unsafe extern "C" fn(*mut c_void) -> CuResult;

/// The resolved entry points and the primary context of device 0.
struct Cuda {
    ctx_set_current: CuCtxSetCurrent,
    host_register: CuMemHostRegister,
    host_unregister: CuMemHostUnregister,
    ctx: usize,
}

static CUDA: OnceLock<Result<Cuda, String>> = OnceLock::new();

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Resolves `name` in `lib` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the C signature of the symbol `name`.
unsafe fn sym<T: Copy>(lib: *mut c_void, name: &CStr) -> Result<T, String> {
    // SAFETY: `lib` is a live handle from dlopen; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("{}: {}", name.to_string_lossy(), dlerror()));
    }
    // SAFETY: T is a function pointer type of the symbol's signature (caller's contract);
    // function and data pointers have the same size on every platform dlsym runs on.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

fn load() -> Result<Cuda, String> {
    // SAFETY: dlopen with a constant NUL-terminated name; the library stays loaded for
    // the life of the process (never dlclosed), so the resolved pointers stay valid.
    let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(format!("libcuda.so.1 cannot be loaded: {}", dlerror()));
    }
    // SAFETY: each type alias above is the documented C signature of the CUDA driver API
    // function it is resolved as.
    let (init, device_get, retain, set_current, register, unregister) = unsafe {
        (
            sym::<CuInit>(lib, c"cuInit")?,
            sym::<CuDeviceGet>(lib, c"cuDeviceGet")?,
            sym::<CuPrimaryCtxRetain>(lib, c"cuDevicePrimaryCtxRetain")?,
            sym::<CuCtxSetCurrent>(lib, c"cuCtxSetCurrent")?,
            sym::<CuMemHostRegister>(lib, c"cuMemHostRegister_v2")?,
            sym::<CuMemHostUnregister>(lib, c"cuMemHostUnregister")?,
        )
    };
    // SAFETY: documented driver API calls with valid out-pointers to locals.
    unsafe {
        let r = init(0);
        if r != 0 {
            return Err(format!("cuInit failed: CUresult {r}"));
        }
        let mut dev: c_int = 0;
        let r = device_get(&mut dev, 0);
        if r != 0 {
            return Err(format!("cuDeviceGet(0) failed: CUresult {r}"));
        }
        let mut ctx: *mut c_void = std::ptr::null_mut();
        let r = retain(&mut ctx, dev);
        if r != 0 {
            return Err(format!("cuDevicePrimaryCtxRetain failed: CUresult {r}"));
        }
        Ok(Cuda {
            ctx_set_current: set_current,
            host_register: register,
            host_unregister: unregister,
            ctx: ctx as usize,
        })
    }
}

fn cuda() -> Result<&'static Cuda, Error> {
    CUDA.get_or_init(load)
        .as_ref()
        .map_err(|why| Error::Unsupported {
            feature: "CUDA host registration",
            reason: why.clone(),
            errno: None,
        })
}

/// A range registered with `cuMemHostRegister`; unregistered on drop.
#[derive(Debug)]
pub(crate) struct CudaRegistration {
    addr: usize,
}

impl CudaRegistration {
    /// Registers (page-locks and maps for the GPU) the memory of `mem`. The caller keeps
    /// `mem` borrowed for as long as the returned value lives.
    pub(crate) fn new(mem: &mut [u8]) -> Result<Self, Error> {
        let c = cuda()?;
        // SAFETY: the context is the retained primary context (kept for the process's
        // life); `mem` is a live slice the caller keeps borrowed until drop.
        let r = unsafe {
            (c.ctx_set_current)(c.ctx as *mut c_void);
            (c.host_register)(mem.as_mut_ptr().cast(), mem.len(), 0)
        };
        if r != 0 {
            return Err(Error::InvalidArgument {
                what: format!("cuMemHostRegister failed: CUresult {r}"),
            });
        }
        Ok(Self {
            addr: mem.as_ptr() as usize,
        })
    }
}

impl Drop for CudaRegistration {
    fn drop(&mut self) {
        if let Ok(c) = cuda() {
            // SAFETY: `addr` was registered by `new` and the memory is still borrowed by
            // the owner of this value; unregistering only unpins it.
            let r = unsafe {
                (c.ctx_set_current)(c.ctx as *mut c_void);
                (c.host_unregister)(self.addr as *mut c_void)
            };
            // Drop never panics: a failure is counted (`hmm::release_failures`); a
            // CUresult is not an errno, so it is recorded as EIO.
            if r != 0 {
                crate::release_failed("cuMemHostUnregister", drm_gem::Errno::IO);
            }
        }
    }
}
