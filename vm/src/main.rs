//! `vm`: boots real kernels with real GPU drivers in QEMU (work in progress).
fn main() {
    eprintln!("vm: not implemented yet");
    std::process::exit(2);
}
