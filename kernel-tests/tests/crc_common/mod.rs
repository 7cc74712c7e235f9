//! vkms's CRC capture (`mod crc_common;`): what makes vkms compose every frame, so that
//! the composer's engine counter (the test-only vkms fdinfo patch) runs.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// vkms's CRC capture on CRTC 0 while this lives: vkms composes every frame of what the
/// CRTC shows; a thread drains `crc/data` (the kernel's queue holds 128 entries) and counts
/// the entries. Dropping it closes `crc/data`, which turns the capture (and composing) off.
pub struct CrcCapture {
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// CRC entries read so far.
    entries: Arc<std::sync::atomic::AtomicU64>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl CrcCapture {
    pub fn start() -> CrcCapture {
        use std::os::unix::fs::OpenOptionsExt;
        let minor = drm_gem::enumerate()
            .expect("enumerate")
            .into_iter()
            .find(|n| n.driver.as_deref() == Some("vkms") && n.kind == drm_gem::NodeKind::Primary)
            .expect("a vkms primary node")
            .dev
            .1;
        let dir = PathBuf::from(format!("/sys/kernel/debug/dri/{minor}/crtc-0/crc"));
        std::fs::write(dir.join("control"), "auto")
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("control").display()));
        let mut data = std::fs::OpenOptions::new()
            .read(true)
            // crc/data answers EAGAIN when empty instead of blocking.
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(dir.join("data"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("data").display()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let entries = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lines = entries.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match data.read(&mut buf) {
                    Ok(n) => {
                        let n = buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                        lines.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => panic!("reading crc/data: {e}"),
                }
            }
        });
        CrcCapture {
            stop,
            entries,
            reader: Some(reader),
        }
    }

    /// CRC entries read so far.
    pub fn entries(&self) -> u64 {
        self.entries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the capture; returns the CRC entries read.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            r.join().expect("crc reader");
        }
        self.entries()
    }
}

impl Drop for CrcCapture {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
