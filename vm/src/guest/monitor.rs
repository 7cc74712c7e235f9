//! QEMU's human monitor, asked about a hung guest: every vCPU's registers, then the NMI.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// What the monitor of a hung guest showed, and whether it took the NMI.
pub(super) struct HangReport {
    /// The exchanges, or why the monitor could not be asked.
    pub(super) text: String,
    /// Whether the monitor took the NMI.
    pub(super) nmi: bool,
}

/// Asks QEMU's monitor for every vCPU's registers (where each one is stuck), then injects
/// an NMI (the guest kernel, booted with `unknown_nmi_panic`, panics and prints its stack).
/// Each exchange has a 10 s limit; a monitor that does not answer is reported, not waited
/// for.
pub(super) fn hang_report(socket: &Path) -> HangReport {
    use std::os::unix::net::UnixStream;
    let mut text = String::new();
    let mut nmi = false;
    let mut talk = || -> std::io::Result<()> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        read_prompt(&mut s)?;
        for cmd in ["info registers -a", "nmi"] {
            s.write_all(format!("{cmd}\n").as_bytes())?;
            let answer = read_prompt(&mut s)?;
            // Its first line is the monitor's echo of the command, redrawn as typed.
            let answer = answer.split_once('\n').map_or("", |(_, rest)| rest);
            text.push_str(&format!("(qemu) {cmd}\n{answer}\n"));
            nmi |= cmd == "nmi";
        }
        Ok(())
    };
    if let Err(e) = talk() {
        text.push_str(&format!("monitor {}: {e}\n", socket.display()));
    }
    HangReport { text, nmi }
}

/// Tells QEMU to quit at once (the monitor's `quit`: no shutdown in the guest), for a
/// guest whose work is over; an error when the monitor cannot be reached (QEMU has
/// exited, or never listened).
pub fn quit(socket: &Path) -> std::io::Result<()> {
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    read_prompt(&mut s)?;
    s.write_all(b"quit\n")
}

/// Reads the monitor's output up to its next `(qemu) ` prompt (at most 1 MiB).
fn read_prompt(s: &mut impl Read) -> std::io::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"(qemu) ") {
        let n = s.read(&mut buf)?;
        if n == 0 || got.len() > 1 << 20 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(monitor_text(&String::from_utf8_lossy(&got))
        .trim_end_matches("(qemu) ")
        .to_string())
}

/// The monitor's output as plain text: its line editing writes escape sequences (`ESC [ K`),
/// which are dropped with every other control character but the newline.
fn monitor_text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters, then one final byte in @..~.
            if chars.clone().next() == Some('[') {
                chars.next();
                for f in chars.by_ref() {
                    if ('@'..='~').contains(&f) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\n' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_text_drops_escapes_and_controls() {
        assert_eq!(
            monitor_text("QEMU 7.2 monitor\r\n(qemu) nmi\x1b[K\x1b[D\r\n\x07RIP=ffff\n"),
            "QEMU 7.2 monitor\n(qemu) nmi\nRIP=ffff\n"
        );
        assert_eq!(monitor_text("a\x1b"), "a");
        assert_eq!(monitor_text("a\x1b[12"), "a");
    }
}
