//! What Slurm's daemons need of a guest (`mod slurm_common;`).

use std::process::Command;

/// A documentation address (TEST-NET-1) put on `lo`.
pub const ADDRCONFIG_ADDR: &str = "192.0.2.1";

/// Slurm resolves even "127.0.0.1" with AI_ADDRCONFIG, which answers nothing while the
/// machine's only IPv4 address is 127.0.0.1 (the guest has no network): a documentation
/// address on `lo` makes IPv4 configured. Idempotent.
pub fn ipv4_configured() {
    let shown = Command::new("ip")
        .args(["-4", "addr", "show", "dev", "lo"])
        .output()
        .expect("ip");
    if String::from_utf8_lossy(&shown.stdout).contains(ADDRCONFIG_ADDR) {
        return;
    }
    let o = Command::new("ip")
        .args(["addr", "add", &format!("{ADDRCONFIG_ADDR}/32"), "dev", "lo"])
        .output()
        .expect("ip addr add");
    assert!(
        o.status.success(),
        "ip addr add: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
