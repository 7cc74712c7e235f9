//! `drm-sample-client`: allocates known dumb buffers, optionally exports or imports a
//! dma-buf, prints one JSON line describing what it holds and waits for stdin to close.
//! See `drm-sample-client --help`.

fn main() -> std::process::ExitCode {
    drmtool::sample::main_with(std::env::args_os())
}
