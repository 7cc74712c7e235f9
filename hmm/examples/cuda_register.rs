//! Host registration through CUDA (feature `cuda`): a page-aligned heap buffer is
//! registered with `cuMemHostRegister` (`Backend::Cuda`, `libcuda.so.1` loaded at run
//! time, device 0's primary context) and unregistered when the registration is dropped.
//! Fails (non-zero exit) where CUDA cannot register it: run it where an NVIDIA GPU and
//! its driver are (`scripts/device-check` does).
//!
//! ```text
//! cargo run --release -p hmm --features cuda --example cuda_register
//! ```

use hmm::{Backend, HostRegistration};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let page = hmm::dmirror::page_size();
    // Sixteen whole pages of an ordinary heap buffer.
    let mut buf = vec![7u8; 17 * page];
    let off = buf.as_ptr().align_offset(page);
    let mem = &mut buf[off..off + 16 * page];
    {
        let reg = HostRegistration::new(mem, Backend::Cuda)?;
        println!(
            "registered {} bytes at {:#x} with cuMemHostRegister",
            reg.len(),
            reg.addr()
        );
    } // cuMemHostUnregister
    assert!(buf[off..off + 16 * page].iter().all(|&b| b == 7));
    println!("unregistered; the bytes are unchanged");
    Ok(())
}
