//! Ordinary memory as a dma-buf: a sealed memfd becomes a udmabuf, which a DRM device
//! (vgem, where loaded) imports by PRIME; bytes written through the memfd show through the
//! dma-buf's mapping. Where there is no /dev/udmabuf it says so and succeeds.

use hmm::{SealedMemfd, Udmabuf};

/// Runs the example (also called by `kernel-tests/tests/hmm_examples.rs` in the guests).
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let u = match Udmabuf::open() {
        Ok(u) => u,
        Err(e) => {
            println!("no udmabuf here ({e}); nothing to show");
            return Ok(());
        }
    };
    let size = 1 << 20;
    let memfd = SealedMemfd::new("example", size)?;
    println!("memfd seals: {:?}", memfd.seals()?);
    memfd.write_at(4096, b"written through the memfd")?;
    let buf = u.create(&memfd, 0, size)?;
    println!("udmabuf: {:?}", buf.info()?);

    let mut back = [0u8; 25];
    {
        let map = buf.map()?;
        let _cpu = buf.begin_cpu_access(true, false)?;
        map.read_at(4096, &mut back)?;
    }
    assert_eq!(&back, b"written through the memfd");
    println!(
        "read back through the dma-buf: {:?}",
        std::str::from_utf8(&back)?
    );

    match drm_gem::Device::open_driver("vgem", None) {
        Ok(dev) => {
            let obj = dev.import(rustix::fd::AsFd::as_fd(&buf))?;
            println!("vgem imported it as GEM handle {}", obj.handle().get());
        }
        Err(e) => println!("no vgem to import it into ({e})"),
    }
    Ok(())
}
