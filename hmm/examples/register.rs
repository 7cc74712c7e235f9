//! Host registration with the mirror device: a page-aligned heap buffer is registered with
//! `Backend::Dmirror` (the device faults it in through HMM), the device writes it while it
//! is registered, and the CPU reads the device's bytes once the registration is dropped.
//! Where there is no mirror device the registration says so and the example succeeds.

use drm_gem::Error;
use hmm::{Backend, HostRegistration};

/// Runs the example (also called by `kernel-tests/tests/hmm_examples.rs` in the guests).
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let page = hmm::dmirror::page_size();
    // Four whole pages of an ordinary heap buffer.
    let mut buf = vec![1u8; 5 * page];
    let off = buf.as_ptr().align_offset(page);
    let mem = &mut buf[off..off + 4 * page];
    {
        let mut reg = match HostRegistration::new(mem, Backend::Dmirror) {
            Ok(r) => r,
            Err(e @ Error::Unsupported { .. }) => {
                println!("{e}; nothing to show");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let r = reg.mirror_report().expect("a Dmirror registration reports");
        println!(
            "registered {} bytes: the device faulted {} pages in ({} fault rounds)",
            reg.len(),
            r.cpages,
            r.faults
        );
        let w = reg.device_write(&vec![0x42u8; 4 * page])?;
        println!("the device wrote {} pages", w.cpages);
    } // unregistered: the mirror device's file is closed
    assert!(buf[off..off + 4 * page].iter().all(|&b| b == 0x42));
    println!("the CPU reads what the device wrote");
    Ok(())
}
