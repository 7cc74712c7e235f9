//! The job of the GPU memory limit tests (`kernel-tests/tests/drmtool_dmem.rs`), run under
//! `drmtool run --gpu <qxl> [--mem-max SIZE] -- qxl-alloc COUNT BYTES`: allocates COUNT
//! buffer objects of BYTES each in qxl's VRAM domain (`DRM_IOCTL_QXL_ALLOC`, what the
//! patched qxl of the debian-7.3 guest charges to the job's dmem region), one after
//! another, keeping them all, and prints one line per allocation (`alloc I ok` or
//! `alloc I errno E`) and then `held N` (how many it holds). It then holds them until its
//! standard input closes, so that the test can read the job's cgroup meanwhile.
//!
//! The node: the render (else card) node the job was given whose driver is qxl (qxl has
//! no render node: its card node, where master is given up at once).

use drm_gem::driver::qxl::{Qxl, QxlBo};
use std::io::Read;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(count), Some(bytes)) = (
        args.get(1).and_then(|a| a.parse::<usize>().ok()),
        args.get(2).and_then(|a| a.parse::<u32>().ok()),
    ) else {
        eprintln!("usage: qxl-alloc COUNT BYTES");
        return std::process::ExitCode::from(2);
    };
    let open = |kind| kernel_tests::open_driver(&["qxl"], kind).ok().flatten();
    let Some(dev) = open(drm_gem::NodeKind::Render).or_else(|| open(drm_gem::NodeKind::Primary))
    else {
        eprintln!("qxl-alloc: no qxl node in this job");
        return std::process::ExitCode::from(3);
    };
    // qxl has no render node: on its card node the first opener is DRM master (and so
    // authenticated, which QXL_ALLOC needs); giving master up at once leaves the next job
    // on the GPU to become master in turn, while this file stays authenticated.
    let _ = dev.drop_master();
    let qxl = match Qxl::new(&dev) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("qxl-alloc: {e}");
            return std::process::ExitCode::from(3);
        }
    };
    let mut held = Vec::new();
    for i in 0..count {
        match QxlBo::alloc(&qxl, bytes) {
            Ok(bo) => {
                println!("alloc {i} ok");
                held.push(bo);
            }
            Err(e) => println!(
                "alloc {i} errno {}",
                e.errno()
                    .and_then(drm_gem::errno_name)
                    .map_or_else(|| e.to_string(), str::to_string)
            ),
        }
    }
    println!("held {}", held.len());
    // Holds everything until the test closes our stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::ExitCode::SUCCESS
}
