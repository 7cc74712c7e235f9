//! Recognising a kernel crash in the guest's serial console: the oops or panic report
//! (`BUG:`, `Oops:`, `general protection fault`, `kernel BUG at`, `Kernel panic`), the
//! function it happened in (the kernel-mode `RIP:` line, else the first reliable call-trace
//! frame below the panic machinery) and a bounded excerpt for the report.
//!
//! The console is hostile text (anything the kernel printed, interleaved, possibly cut
//! short): nothing here indexes blindly or trusts a line's shape.

/// A kernel crash found in console text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oops {
    /// The report's first line, without its timestamp (`BUG: kernel NULL pointer
    /// dereference, address: 0000000000000008`, or the panic line for a plain `panic()`).
    pub headline: String,
    /// The `Kernel panic - not syncing: ...` line, when the console has one.
    pub panic: Option<String>,
    /// The kernel-mode `RIP:` line, when the report has one.
    pub rip: Option<String>,
    /// The function the kernel crashed in.
    pub function: Option<String>,
    /// The module that function is in (the `[vkms]` after it), when it is in one.
    pub module: Option<String>,
    /// The report, bounded: its first lines, the `RIP:` line, the top of the call trace and
    /// the panic line; timestamps removed.
    pub excerpt: Vec<String>,
}

/// Lines of the report kept from its start.
const HEAD_LINES: usize = 8;
/// Call-trace frames kept.
const TRACE_FRAMES: usize = 8;
/// How far before the panic line the start of the report is looked for.
const LOOK_BACK: usize = 400;
/// How far after the panic line the report's end (and a plain panic's call trace) is.
const LOOK_AHEAD: usize = 80;

/// Functions of the crash machinery itself, skipped when the call trace names the culprit.
const MACHINERY: &[&str] = &[
    "show_stack",
    "show_trace_log_lvl",
    "panic",
    "vpanic",
    "nmi_panic",
    "check_panic_on_warn",
    "die",
    "__die",
    "__die_body",
    "die_body",
    "oops_end",
    "__warn",
    "warn_slowpath_fmt",
    "report_bug",
    "handle_bug",
    "do_trap",
    "do_error_trap",
    "exc_invalid_op",
    "asm_exc_invalid_op",
    "no_context",
    "page_fault_oops",
    "kernelmode_fixup_or_oops",
    "__bad_area_nosemaphore",
    "bad_area_nosemaphore",
    "do_user_addr_fault",
    "exc_page_fault",
    "asm_exc_page_fault",
    "do_general_protection",
    "exc_general_protection",
    "asm_exc_general_protection",
    "kasan_report",
    "__kasan_report",
    "print_report",
    // The NMI the harness injects into a hung guest (unknown_nmi_panic): the stuck code is
    // below these frames.
    "unknown_nmi_error",
    "default_do_nmi",
    "exc_nmi",
    "asm_exc_nmi",
    "end_repeat_nmi",
    "repeat_nmi",
    "first_nmi",
    "nested_nmi",
    "nmi_handle",
];

/// A kernel bug that hangs a guest, recognised in the stack the injected NMI printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownHang {
    /// Short name, for reports.
    pub name: &'static str,
    /// What it is and where upstream documents it (the fix and the kernels it covers).
    pub why: &'static str,
    /// Either side of the deadlock: each entry is a set of functions that must all appear
    /// in the stuck stack (its frames or the `RIP:` of the interrupted context).
    signatures: &'static [&'static [&'static str]],
}

/// Kernel bugs known to hang guests of the matrix.
pub const KNOWN_HANGS: &[KnownHang] = &[KnownHang {
    name: "vkms-vblank-hrtimer-deadlock",
    why: "vkms disable_vblank deadlock: vkms_disable_vblank() calls hrtimer_cancel() with \
          dev->vblank_time_lock held and interrupts off, while the vblank hrtimer's callback \
          (vkms_vblank_simulate -> drm_handle_vblank) spins on that lock, so both CPUs wait \
          for each other with interrupts off (reported upstream 2025-05-10, \
          lore.kernel.org/all/20250510094757.4174662-1-zengheng4@huawei.com; fixed by \
          \"drm/vblank: Add vblank timer\" and \"drm/vkms: Convert to DRM's vblank timer\", \
          Sep 2025, whose cancel no longer waits for the callback; every vkms since its \
          hrtimer vblank (v4.19) up to that change has it)",
    signatures: &[
        // The CPU disabling vblank, waiting for the callback.
        &["vkms_disable_vblank", "hrtimer_cancel"],
        &["vkms_disable_vblank", "hrtimer_try_to_cancel"],
        // The same CPU where vkms_disable_vblank tail-calls hrtimer_cancel (stock 6.1's
        // vkms.ko: `jmp hrtimer_cancel`), so its caller in drm is the frame below: the
        // disable_vblank hook of a driver whose vblank is an hrtimer, vkms in the matrix.
        &["drm_vblank_disable_and_save", "hrtimer_cancel"],
        &["drm_vblank_disable_and_save", "hrtimer_try_to_cancel"],
        // The CPU in the callback, spinning on vblank_time_lock.
        &["vkms_vblank_simulate", "drm_handle_vblank"],
    ],
}];

/// The known bug whose signature the stuck stack on `console` shows (the report around the
/// `NMI: Not continuing` panic line), if any. Only for a guest the harness found hung and
/// sent the NMI: a hang is what these bugs do.
pub fn known_hang(console: &str) -> Option<&'static KnownHang> {
    let lines: Vec<&str> = console.lines().map(strip_timestamp).collect();
    let p = lines
        .iter()
        .position(|l| is_panic_line(l) && l.contains("NMI"))?;
    let end = (p + LOOK_AHEAD * 2).min(lines.len());
    let frames: Vec<String> = lines[p..end]
        .iter()
        .filter_map(|l| {
            // Unreliable frames (`? name+...`) count too: a kernel built without the ORC
            // unwinder marks every frame so.
            let l = l.trim_start().trim_start_matches("? ");
            parse_frame(l.strip_prefix("RIP:").unwrap_or(l)).map(|(f, _)| f)
        })
        .collect();
    // Compiler clones (`hrtimer_cancel.part.0`) count as the function.
    let has = |want: &str| {
        frames
            .iter()
            .any(|f| f == want || f.strip_prefix(want).is_some_and(|r| r.starts_with('.')))
    };
    KNOWN_HANGS
        .iter()
        .find(|k| k.signatures.iter().any(|sig| sig.iter().all(|f| has(f))))
}

impl Oops {
    /// Where the kernel crashed: `vkms_vblank_simulate [vkms]`, `sysrq_handle_crash`, or the
    /// headline when no function is known.
    pub fn location(&self) -> String {
        match (&self.function, &self.module) {
            (Some(f), Some(m)) => format!("{f} [{m}]"),
            (Some(f), None) => f.clone(),
            _ => self.headline.clone(),
        }
    }

    /// One line for a test's failure reason: the location, the headline and the panic line.
    pub fn summary(&self) -> String {
        let mut s = format!("kernel oops in {}: {}", self.location(), self.headline);
        if let Some(p) = &self.panic
            && *p != self.headline
        {
            s.push_str(" | ");
            s.push_str(p);
        }
        if let Some(r) = &self.rip {
            s.push_str(" | ");
            s.push_str(r);
        }
        s
    }
}

/// A console line without its printk timestamp (`[   12.345678] `) and caller id
/// (`[    T1] `), and without trailing white space or `\r`.
pub fn strip_timestamp(line: &str) -> &str {
    let mut l = line.trim_end();
    for _ in 0..2 {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix('[') else {
            break;
        };
        let Some(end) = rest.find(']') else {
            break;
        };
        let inner = rest[..end].trim();
        let stamp = !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        let caller = inner.len() > 1
            && matches!(inner.as_bytes()[0], b'T' | b'C')
            && inner[1..].bytes().all(|b| b.is_ascii_digit());
        if !(stamp || caller) {
            break;
        }
        l = &rest[end + 1..];
        // The message starts after one space; frames keep their own indent.
        l = l.strip_prefix(' ').unwrap_or(l);
    }
    l
}

/// The `die()` header of an oops: `...: 0000 [#1] ...` (`Oops: 0002 [#1] SMP`,
/// `general protection fault, ...: 0000 [#1] PREEMPT SMP NOPTI`, `invalid opcode: 0000 [#1]`).
fn is_die_header(l: &str) -> bool {
    let Some(i) = l.find(" [#") else {
        return false;
    };
    let after = &l[i + 3..];
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || after.as_bytes().get(digits) != Some(&b']') {
        return false;
    }
    // Four hex digits (the error code) before " [#".
    let before = &l.as_bytes()[..i];
    before.len() >= 6
        && before[before.len() - 4..]
            .iter()
            .all(|b| b.is_ascii_hexdigit())
        && before[before.len() - 5] == b' '
}

/// Lines that start a crash report (besides the die header and the panic line).
fn is_report_start(l: &str) -> bool {
    let t = l.trim_start();
    t.starts_with("BUG:")
        || t.starts_with("Oops:")
        || t.starts_with("general protection fault")
        || t.contains("kernel BUG at ")
        || t.starts_with("WARNING: CPU:")
}

fn is_panic_line(l: &str) -> bool {
    l.contains("Kernel panic - not syncing")
}

/// Parses `name+0xOFF/0xLEN [module]` out of a frame or `RIP:` text; `None` for a frame
/// the kernel marked unreliable (`? name+...`) or a user-space address.
pub fn parse_frame(text: &str) -> Option<(String, Option<String>)> {
    let toks: Vec<&str> = text.split_whitespace().collect();
    for (i, tok) in toks.iter().enumerate() {
        let t = tok.rsplit(':').next().unwrap_or(tok);
        let Some((name, off)) = t.split_once('+') else {
            continue;
        };
        let Some((a, b)) = off.split_once('/') else {
            continue;
        };
        let hex = |s: &str| {
            s.strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.bytes().all(|c| c.is_ascii_hexdigit()))
        };
        if name.is_empty() || name.starts_with("0x") || !hex(a) || !hex(b) {
            continue;
        }
        if !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            continue;
        }
        if i > 0 && toks[i - 1] == "?" {
            return None;
        }
        let module = toks
            .get(i + 1)
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
            .filter(|m| {
                !m.is_empty()
                    && m.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
            })
            .map(str::to_string);
        return Some((name.to_string(), module));
    }
    None
}

/// The first line of the oops whose die header is line `h`: a `BUG:` or `kernel BUG at`
/// line just above it (across the `#PF:` and page-table lines), else the header itself.
fn first_line_of(lines: &[&str], h: usize) -> usize {
    let mut start = h;
    for i in (h.saturating_sub(6)..h).rev() {
        let t = lines[i].trim_start();
        if t.starts_with("BUG:") || t.contains("kernel BUG at ") {
            start = i;
        } else if !(t.starts_with("#PF:")
            || ["PGD ", "P4D ", "PUD ", "PMD "]
                .iter()
                .any(|p| t.starts_with(p))
            || t.is_empty())
        {
            break;
        }
    }
    start
}

fn is_machinery(name: &str) -> bool {
    name.starts_with("dump_stack") || MACHINERY.contains(&name)
}

/// An interrupt's entry or handler shell (`__sysvec_apic_timer_interrupt`,
/// `asm_sysvec_*`, `common_interrupt`, `irq_exit_rcu`) or the tick's own core
/// ([`is_tick_core`]), where any CPU spends a moment on every tick: an NMI that lands there
/// says nothing about where the task was stuck.
fn is_irq_entry(name: &str) -> bool {
    let n = name.trim_start_matches('_');
    n.starts_with("sysvec_")
        || n.starts_with("asm_sysvec_")
        || n.starts_with("asm_common_interrupt")
        || n == "common_interrupt"
        || n == "irq_exit_rcu"
        || is_tick_core(name)
}

/// The timer tick's own work inside its interrupt: handling the hrtimer interrupt and
/// programming the next event (`hrtimer_interrupt`, `clockevents_program_event`,
/// `lapic_next_event`). A callback the tick runs (a driver's hrtimer, `vkms_vblank_simulate`)
/// is not here: an NMI that lands in one names it.
fn is_tick_core(name: &str) -> bool {
    matches!(
        name,
        "hrtimer_interrupt"
            | "clockevents_program_event"
            | "tick_program_event"
            | "lapic_next_event"
            | "lapic_next_deadline"
    )
}

/// Whether every frame of the `<TASK>` part of the report is interrupt entry (so the task
/// itself was interrupted in user mode, its `RIP: 0033:` line below them).
fn task_frames_are_irq_entry(report: &[&str]) -> bool {
    let Some(t) = report.iter().position(|l| l.trim() == "<TASK>") else {
        return false;
    };
    let mut any = false;
    for l in &report[t + 1..] {
        let s = l.trim();
        if s.starts_with("RIP:") || s == "</TASK>" {
            break;
        }
        if let Some((name, _)) = parse_frame(s) {
            if !is_irq_entry(&name) {
                return false;
            }
            any = true;
        }
    }
    any
}

/// Finds the crash that ended a boot: the `Kernel panic - not syncing` line and the report
/// that led to it, or, without a panic line, the last report start (a console cut short).
/// `None` when the console shows no crash.
pub fn find(console: &str) -> Option<Oops> {
    let lines: Vec<&str> = console.lines().map(strip_timestamp).collect();
    let panic_at = lines.iter().position(|l| is_panic_line(l));
    let (start, end) = match panic_at {
        Some(p) => {
            let from = p.saturating_sub(LOOK_BACK);
            // The fatal oops is the last die header before the panic; a BUG:/kernel BUG
            // line just above it is the report's first line.
            let start = match (from..p).rev().find(|&i| is_die_header(lines[i])) {
                Some(h) => first_line_of(&lines, h),
                None => (from..p)
                    .rev()
                    .find(|&i| is_report_start(lines[i]))
                    .unwrap_or(p),
            };
            let limit = (p + LOOK_AHEAD).min(lines.len());
            let end = (p..limit)
                .find(|&i| lines[i].contains("---[ end Kernel panic"))
                .map_or(limit, |i| i + 1);
            (start, end)
        }
        None => {
            let s = lines
                .iter()
                .rposition(|l| is_die_header(l) || is_report_start(l))?;
            // A lone warning (a WARN without panic_on_warn) is not a crash.
            if lines[s].trim_start().starts_with("WARNING: CPU:") && !is_die_header(lines[s]) {
                return None;
            }
            let s = if is_die_header(lines[s]) {
                first_line_of(&lines, s)
            } else {
                s
            };
            (s, (s + LOOK_AHEAD).min(lines.len()))
        }
    };
    let report = &lines[start..end];
    let headline = report
        .first()
        .map_or(String::new(), |l| l.trim().to_string());
    let panic = panic_at.map(|p| lines[p].trim().to_string());
    let rip_at = report.iter().position(|l| {
        l.trim_start()
            .strip_prefix("RIP:")
            .is_some_and(|r| parse_frame(r).is_some())
    });
    let rip = rip_at.map(|i| report[i].trim().to_string());
    let mut culprit = rip_at.and_then(|i| parse_frame(report[i].trim_start().get(4..)?));
    let trace_at = report
        .iter()
        .position(|l| l.trim_start().starts_with("Call Trace:"));
    let mut frames = Vec::new();
    if let Some(t) = trace_at {
        for l in &report[t + 1..] {
            let s = l.trim();
            if s.starts_with('<') && s.ends_with('>') {
                continue;
            }
            if !s.contains("+0x") {
                break;
            }
            frames.push(*l);
        }
    }
    if culprit.is_none() {
        culprit = frames
            .iter()
            .filter_map(|f| parse_frame(f))
            .find(|(name, _)| !is_machinery(name));
    }
    let mut excerpt: Vec<String> = Vec::new();
    let mut keep = |l: &str| {
        let l = l.trim_end().to_string();
        let marker = l.trim().starts_with('<') && l.trim().ends_with('>');
        if !l.trim().is_empty() && !marker && !excerpt.contains(&l) {
            excerpt.push(l);
        }
    };
    report.iter().take(HEAD_LINES).for_each(|l| keep(l));
    if let Some(r) = &rip {
        keep(r);
    }
    if trace_at.is_some() {
        keep("Call Trace:");
        frames.iter().take(TRACE_FRAMES).for_each(|l| keep(l));
    }
    if let Some(p) = &panic {
        keep(p);
    }
    let user_rip = report
        .iter()
        .any(|l| l.trim_start().starts_with("RIP: 0033:"));
    let (function, module) = match culprit {
        // The NMI caught the CPU in the entry of an interrupt that came from user mode (a
        // timer tick over the user-space loop that hung): the task was in user space.
        Some((f, _)) if user_rip && is_irq_entry(&f) && task_frames_are_irq_entry(report) => {
            (Some("user space".to_string()), None)
        }
        Some((f, m)) => (Some(f), m),
        // An NMI (or other report) that interrupted user mode, with no kernel frame.
        None if user_rip => (Some("user space".to_string()), None),
        None => (None, None),
    };
    Some(Oops {
        headline,
        panic,
        rip,
        function,
        module,
        excerpt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness's NMI into a guest whose CPUs a SCHED_FIFO loop took (6.12, as printed).
    const NMI_USER: &str = "\
[   29.337494] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:
[   38.187326] Uhhuh. NMI received for unknown reason 21 on CPU 0.
[   38.187666] Kernel panic - not syncing: NMI: Not continuing
[   38.188148] CPU: 0 UID: 0 PID: 207 Comm: sh Not tainted 6.12.118 #1 
[   38.188208] Call Trace:
[   38.188289]  <TASK>
[   38.188301]  vpanic+0x280/0x2a0
[   38.188340]  nmi_panic+0x85/0x90
[   38.188353]  default_do_nmi+0x1cf/0x2b0
[   38.188371]  exc_nmi+0xdb/0x100
[   38.188383]  asm_exc_nmi+0x70/0xb9
[   38.188515] RIP: 0033:0x555dce8fad4c
[   38.188550] RSP: 002b:00007ffe007f26d0 EFLAGS: 00000202
[   38.188666]  </TASK>
[   38.189284] Kernel Offset: disabled
";

    /// The NMI into the CPU spinning in the vblank hrtimer's callback of the vkms deadlock
    /// ([`KNOWN_HANGS`]); the shape of an NMI that interrupted kernel code in an interrupt.
    const NMI_VKMS_CALLBACK: &str = "\
[  812.000001] Uhhuh. NMI received for unknown reason 21 on CPU 1.
[  812.000002] Kernel panic - not syncing: NMI: Not continuing
[  812.000003] CPU: 1 PID: 0 Comm: swapper/1 Not tainted 6.1.0-57-amd64 #1  Debian 6.1.192-3
[  812.000004] Call Trace:
[  812.000005]  <NMI>
[  812.000006]  dump_stack_lvl+0x44/0x5c
[  812.000007]  panic+0x118/0x2ed
[  812.000008]  nmi_panic.cold+0xc/0xc
[  812.000009]  default_do_nmi+0x10c/0x110
[  812.000010]  exc_nmi+0xf3/0x120
[  812.000011]  end_repeat_nmi+0x16/0x67
[  812.000012] RIP: 0010:native_queued_spin_lock_slowpath+0x5f/0x2e0
[  812.000013] Code: 0f ba 2a 08 0f 92 c0 0f b6 c0 c1 e0 08 89 c2 8b 02
[  812.000014] RSP: 0018:ffffb0d1800f0ea8 EFLAGS: 00000002
[  812.000015]  </NMI>
[  812.000016]  <IRQ>
[  812.000017]  _raw_spin_lock+0x25/0x30
[  812.000018]  drm_handle_vblank+0x6c/0x3e0 [drm]
[  812.000019]  vkms_vblank_simulate+0x4f/0x140 [vkms]
[  812.000020]  ? vkms_disable_vblank+0x20/0x20 [vkms]
[  812.000021]  __hrtimer_run_queues+0x112/0x2b0
[  812.000022]  hrtimer_interrupt+0xfc/0x210
[  812.000023]  </IRQ>
[  812.000024] Kernel Offset: 0x1000000 from 0xffffffff81000000
";

    /// The harness's NMI landing in a timer tick that interrupted the hung user-space loop
    /// (6.12 under TCG with three guests on two cores, as printed): the task was in user
    /// space. A kernel function below the tick would still be named.
    const NMI_IN_TICK_OVER_USER: &str = "[   32.074885] Uhhuh. NMI received for unknown reason 21 on CPU 0.
[   32.075212] Kernel panic - not syncing: NMI: Not continuing
[   32.075347] CPU: 0 UID: 0 PID: 221 Comm: sh Not tainted 6.12.118 #1 
[   32.075371] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[   32.075403] Call Trace:
[   32.075569]  <NMI>
[   32.075586]  vpanic+0x280/0x2a0
[   32.075627]  nmi_panic+0x85/0x90
[   32.075640]  default_do_nmi+0x1cf/0x2b0
[   32.075656]  exc_nmi+0xdb/0x100
[   32.075667]  end_repeat_nmi+0xf/0x18
[   32.075810] RIP: 0010:__sysvec_apic_timer_interrupt+0x17/0xe0
[   32.075938] Code: 5b 5d c3 31 d2 31 f6 bf e0 06 00 00 e8 42 af 3e 00 eb da 55 53 65 48 8b 1d a6 51 fe 7e 65 48 89 3d 9e 51 fe 7e e8 19 51 00 00 <8b> 05 db 2b f2 00 85 c0 7f 3e 65 48 8b 05 bf ef fc 7e 48 83 b8 c0
[   32.075952] RSP: 0000:ffff88800374bf28 EFLAGS: 00000046
[   32.075974] RAX: 0000000000000000 RBX: 0000000000000000 RCX: 0000000000000000
[   32.075982] RDX: 0000000000000000 RSI: fffffe0000003000 RDI: ffff88800374bf58
[   32.075989] RBP: 0000000000000000 R08: 0000000000000000 R09: 0000000000000000
[   32.075995] R10: 0000000000000000 R11: 0000000000000000 R12: 0000000000000000
[   32.076002] R13: 0000000000000000 R14: 0000000000000000 R15: 0000000000000000
[   32.076113]  ? __sysvec_apic_timer_interrupt+0x17/0xe0
[   32.076129]  ? __sysvec_apic_timer_interrupt+0x17/0xe0
[   32.076141]  </NMI>
[   32.076147]  <TASK>
[   32.076151]  sysvec_apic_timer_interrupt+0x2c/0x80
[   32.076164]  asm_sysvec_apic_timer_interrupt+0x16/0x20
[   32.076177] RIP: 0033:0x5593b2d80bbd
[   32.076197] Code: e1 ff ff 66 2e 0f 1f 84 00 00 00 00 00 41 55 41 54 41 89 f4 55 48 89 fd 53 48 83 ec 08 0f b6 37 89 f1 c1 e1 04 40 84 f6 74 22 <48> 89 fa eb 09 66 0f 1f 44 00 00 0f b6 f0 0f b6 42 01 48 83 c2 01
[   32.076206] RSP: 002b:00007fff5b38fc70 EFLAGS: 00000206
[   32.076215] RAX: 00007fff5b391eb3 RBX: 0000000000000010 RCX: 00000000000003a0
[   32.076222] RDX: 00007fff5b391eb3 RSI: 000000000000003a RDI: 00005593b2d9a8c0
[   32.076229] RBP: 00005593b2d9a8c0 R08: 0000000000000002 R09: 0000000000000001
[   32.076235] R10: 0000000000000008 R11: 00005593b2d9a823 R12: 0000000000000000
[   32.076242] R13: 00007fff5b38fe50 R14: 0000000000000000 R15: 00005593b2d9a8c8
[   32.076253]  </TASK>
[   32.076794] Kernel Offset: disabled
";

    /// The harness's NMI landing while the tick programmed the next timer event, over the
    /// hung user-space loop (6.12 under TCG, four guests on two cores, 2026-12-05, as
    /// printed; register lines left out).
    const NMI_IN_TICK_PROGRAMMING_OVER_USER: &str = "[   42.698482] Kernel panic - not syncing: NMI: Not continuing
[   42.698688] CPU: 0 UID: 0 PID: 223 Comm: sh Not tainted 6.12.118 #1 
[   42.698765] Call Trace:
[   42.699011]  <NMI>
[   42.699024]  vpanic+0x280/0x2a0
[   42.699065]  nmi_panic+0x85/0x90
[   42.699084]  default_do_nmi+0x1cf/0x2b0
[   42.699107]  exc_nmi+0xdb/0x100
[   42.699123]  end_repeat_nmi+0xf/0x18
[   42.699372] RIP: 0010:lapic_next_event+0xc/0x10
[   42.699602] RSP: 0000:ffff88800407bea8 EFLAGS: 00000003
[   42.699876]  ? lapic_next_event+0xc/0x10
[   42.699903]  ? lapic_next_event+0xc/0x10
[   42.699923]  </NMI>
[   42.699931]  <TASK>
[   42.699936]  clockevents_program_event+0x84/0xe0
[   42.699959]  hrtimer_interrupt+0x11a/0x220
[   42.699980]  __sysvec_apic_timer_interrupt+0x4a/0xe0
[   42.700001]  sysvec_apic_timer_interrupt+0x2c/0x80
[   42.700021]  asm_sysvec_apic_timer_interrupt+0x16/0x20
[   42.700041] RIP: 0033:0x557a78e19ffe
[   42.700082] RSP: 002b:00007ffc07e51060 EFLAGS: 00000202
[   42.700149]  </TASK>
[   42.701087] Kernel Offset: disabled
";

    #[test]
    fn an_nmi_while_the_tick_programs_the_next_event_is_a_hang_in_user_space() {
        let c = NMI_IN_TICK_PROGRAMMING_OVER_USER;
        assert_eq!(find(c).unwrap().location(), "user space");
        // A driver's hrtimer callback run by the tick is named, not taken for user space.
        let callback = c.replace(
            "  hrtimer_interrupt+0x11a/0x220",
            "  vkms_vblank_simulate+0x10/0x80\n[   42.699959]  hrtimer_interrupt+0x11a/0x220",
        );
        assert_ne!(find(&callback).unwrap().location(), "user space");
        // So is a hang in the tick over a kernel function.
        let kernel = c.replace(
            "asm_sysvec_apic_timer_interrupt+0x16/0x20",
            "asm_sysvec_apic_timer_interrupt+0x16/0x20\n[   42.700030]  drm_ioctl+0x10/0x80",
        );
        assert_ne!(find(&kernel).unwrap().location(), "user space");
    }

    #[test]
    fn an_nmi_in_a_tick_over_user_space_is_a_hang_in_user_space() {
        let o = find(NMI_IN_TICK_OVER_USER).expect("the NMI panic is a crash");
        assert_eq!(o.location(), "user space");
        assert_eq!(known_hang(NMI_IN_TICK_OVER_USER), None);
        // The same tick over a kernel function: that function's frame makes it a kernel hang.
        let kernel = NMI_IN_TICK_OVER_USER.replace(
            "asm_sysvec_apic_timer_interrupt+0x16/0x20",
            "asm_sysvec_apic_timer_interrupt+0x16/0x20\n[   32.076170]  vkms_vblank_simulate+0x10/0x80",
        );
        assert_ne!(find(&kernel).unwrap().location(), "user space");
    }

    #[test]
    fn an_nmi_into_user_space_is_a_hang_of_no_known_bug() {
        let o = find(NMI_USER).expect("the NMI panic is a crash");
        assert_eq!(o.location(), "user space");
        assert_eq!(
            o.panic.as_deref(),
            Some("Kernel panic - not syncing: NMI: Not continuing")
        );
        assert_eq!(known_hang(NMI_USER), None);
        // The same stack without the NMI panic line is no hang of ours.
        assert_eq!(
            known_hang(NMI_VKMS_CALLBACK.replace("NMI: Not", "x").as_str()),
            None
        );
    }

    #[test]
    fn the_vkms_vblank_deadlock_is_known_from_either_cpu() {
        let o = find(NMI_VKMS_CALLBACK).expect("crash");
        assert_eq!(o.location(), "native_queued_spin_lock_slowpath");
        let k = known_hang(NMI_VKMS_CALLBACK).expect("known");
        assert_eq!(k.name, "vkms-vblank-hrtimer-deadlock");
        // The other CPU: in hrtimer_cancel, called by vkms_disable_vblank under the lock
        // (a compiler clone of the name, and unreliable frames, as a non-ORC kernel prints).
        let canceller = NMI_VKMS_CALLBACK
            .replace(
                " _raw_spin_lock+0x25/0x30",
                " ? hrtimer_cancel.part.0+0x15/0x30",
            )
            .replace(
                "drm_handle_vblank+0x6c/0x3e0 [drm]",
                "? vkms_disable_vblank+0x11/0x20 [vkms]",
            )
            .replace(
                " vkms_vblank_simulate+0x4f/0x140 [vkms]",
                " drm_vblank_disable_and_save+0x9e/0xd0 [drm]",
            );
        assert_eq!(known_hang(&canceller).map(|k| k.name), Some(k.name));
        // One side's function alone is not the signature.
        let half = NMI_VKMS_CALLBACK.replace("drm_handle_vblank", "drm_crtc_add_crc_entry");
        assert_eq!(known_hang(&half), None);
    }

    /// The cancelling CPU of the vkms deadlock on stock 6.1 (CI, atomic CRC test, RIP as
    /// printed there): vkms_disable_vblank is a tail call (`jmp hrtimer_cancel`), so no frame
    /// names it and drm's caller sits right below hrtimer_cancel.
    const NMI_VKMS_TAIL_CALL: &str = "\
[  901.000001] Uhhuh. NMI received for unknown reason 21 on CPU 0.
[  901.000002] Kernel panic - not syncing: NMI: Not continuing
[  901.000003] CPU: 0 PID: 4712 Comm: atomic-e3f1 Not tainted 6.1.0-57-amd64 #1  Debian 6.1.192-3
[  901.000004] Call Trace:
[  901.000005]  <NMI>
[  901.000006]  dump_stack_lvl+0x44/0x5c
[  901.000007]  panic+0x118/0x2ed
[  901.000008]  nmi_panic.cold+0xc/0xc
[  901.000009]  default_do_nmi+0x10c/0x110
[  901.000010]  exc_nmi+0xf3/0x120
[  901.000011]  end_repeat_nmi+0x16/0x67
[  901.000012] RIP: 0010:hrtimer_cancel+0x1d/0x20
[  901.000013] RSP: 0018:ffffb0d1807c7b70 EFLAGS: 00000002
[  901.000014]  </NMI>
[  901.000015]  <TASK>
[  901.000016]  drm_vblank_disable_and_save+0xb6/0xd0 [drm]
[  901.000017]  drm_crtc_vblank_off+0x1a5/0x230 [drm]
[  901.000018]  drm_atomic_helper_commit_modeset_disables+0x3f1/0x5a0 [drm_kms_helper]
[  901.000019]  vkms_atomic_commit_tail+0x3a/0xe0 [vkms]
[  901.000020]  </TASK>
[  901.000021] Kernel Offset: 0x1000000 from 0xffffffff81000000
";

    #[test]
    fn the_vkms_deadlock_is_known_when_its_cancel_is_a_tail_call() {
        let k = known_hang(NMI_VKMS_TAIL_CALL).expect("known");
        assert_eq!(k.name, "vkms-vblank-hrtimer-deadlock");
        // hrtimer_cancel from anything but drm's disable path is no known bug.
        let other = NMI_VKMS_TAIL_CALL.replace("drm_vblank_disable_and_save", "tick_nohz_stop");
        assert_eq!(known_hang(&other), None);
    }

    /// A NULL dereference in a module, as 6.12 prints it (shortened), with boot noise
    /// before it and an earlier, harmless warning.
    const NULL_DEREF_6_12: &str = "\
[    1.000000] Linux version 6.12.117 (gcc 12.2.0)\r
[    3.100000] ------------[ cut here ]------------\r
[    3.100001] WARNING: CPU: 0 PID: 1 at drivers/base/dd.c:12 really_probe+0x10/0x20\r
[    3.100002] ---[ end trace 0000000000000000 ]---\r
[   12.345678] BUG: kernel NULL pointer dereference, address: 0000000000000008\r
[   12.345679] #PF: supervisor read access in kernel mode\r
[   12.345680] #PF: error_code(0x0000) - not-present page\r
[   12.345681] PGD 0 P4D 0 \r
[   12.345682] Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI\r
[   12.345683] CPU: 1 UID: 0 PID: 312 Comm: gem-1234 Not tainted 6.12.117 #1\r
[   12.345684] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996)\r
[   12.345685] RIP: 0010:vkms_gem_create+0x2a/0x90 [vkms]\r
[   12.345686] Code: 48 8b 47 08 <48> 8b 00 c3\r
[   12.345687] RSP: 0018:ffffc90000abfd38 EFLAGS: 00010246\r
[   12.345688] Call Trace:\r
[   12.345689]  <TASK>\r
[   12.345690]  ? __die+0x1e/0x60\r
[   12.345691]  ? page_fault_oops+0x17b/0x4a0\r
[   12.345692]  vkms_gem_create+0x2a/0x90 [vkms]\r
[   12.345693]  drm_ioctl_kernel+0xad/0x100 [drm]\r
[   12.345694]  drm_ioctl+0x23f/0x4a0 [drm]\r
[   12.345695]  __x64_sys_ioctl+0x90/0xd0\r
[   12.345696]  do_syscall_64+0x82/0x170\r
[   12.345697]  entry_SYSCALL_64_after_hwframe+0x76/0x7e\r
[   12.345698] RIP: 0033:0x7f3a1c2b3c5b\r
[   12.345699]  </TASK>\r
[   12.345700] Modules linked in: vkms vgem test_hmm\r
[   12.345701] CR2: 0000000000000008\r
[   12.345702] ---[ end trace 0000000000000000 ]---\r
[   12.345703] RIP: 0010:vkms_gem_create+0x2a/0x90 [vkms]\r
[   12.345704] Kernel panic - not syncing: Fatal exception\r
[   12.345705] Kernel Offset: disabled\r
[   12.345706] ---[ end Kernel panic - not syncing: Fatal exception ]---\r
";

    /// `echo c > /proc/sysrq-trigger` on 5.10: a plain panic(), no RIP line.
    const SYSRQ_5_10: &str = "\
[    9.000000] sysrq: Trigger a crash
[    9.000001] Kernel panic - not syncing: sysrq triggered crash
[    9.000002] CPU: 0 PID: 301 Comm: crash-9f3e Not tainted 5.10.262 #1
[    9.000003] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996)
[    9.000004] Call Trace:
[    9.000005]  dump_stack+0x6d/0x88
[    9.000006]  panic+0x10a/0x2e9
[    9.000007]  ? printk+0x58/0x6f
[    9.000008]  sysrq_handle_crash+0x16/0x20
[    9.000009]  __handle_sysrq.cold+0x43/0x113
[    9.000010]  write_sysrq_trigger+0x24/0x40
[    9.000011]  proc_reg_write+0x51/0x90
[    9.000012]  vfs_write+0xc0/0x260
[    9.000013] Kernel Offset: disabled
[    9.000014] ---[ end Kernel panic - not syncing: sysrq triggered crash ]---
";

    #[test]
    fn null_deref_in_a_module() {
        let o = find(NULL_DEREF_6_12).expect("an oops");
        assert_eq!(
            o.headline,
            "BUG: kernel NULL pointer dereference, address: 0000000000000008"
        );
        assert_eq!(o.function.as_deref(), Some("vkms_gem_create"));
        assert_eq!(o.module.as_deref(), Some("vkms"));
        assert_eq!(o.location(), "vkms_gem_create [vkms]");
        assert_eq!(
            o.rip.as_deref(),
            Some("RIP: 0010:vkms_gem_create+0x2a/0x90 [vkms]")
        );
        assert_eq!(
            o.panic.as_deref(),
            Some("Kernel panic - not syncing: Fatal exception")
        );
        assert_eq!(o.excerpt[0], o.headline);
        assert!(
            o.excerpt
                .contains(&"Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI".to_string())
        );
        assert!(o.excerpt.contains(&"Call Trace:".to_string()));
        assert!(
            o.excerpt.iter().any(|l| l.contains("drm_ioctl_kernel")),
            "{:?}",
            o.excerpt
        );
        assert!(!o.excerpt.iter().any(|l| l.contains("really_probe")));
        assert!(o.excerpt.iter().all(|l| !l.contains('\r')));
        let s = o.summary();
        assert!(
            s.starts_with("kernel oops in vkms_gem_create [vkms]: BUG: kernel NULL"),
            "{s}"
        );
        assert!(s.contains("Fatal exception"), "{s}");
    }

    #[test]
    fn sysrq_panic_names_the_first_real_frame() {
        let o = find(SYSRQ_5_10).expect("a panic");
        assert_eq!(
            o.headline,
            "Kernel panic - not syncing: sysrq triggered crash"
        );
        assert_eq!(o.rip, None);
        assert_eq!(o.function.as_deref(), Some("sysrq_handle_crash"));
        assert_eq!(o.module, None);
        assert_eq!(o.location(), "sysrq_handle_crash");
        assert_eq!(
            o.summary(),
            "kernel oops in sysrq_handle_crash: Kernel panic - not syncing: sysrq triggered crash"
        );
        // ` ? printk` is unreliable and skipped; the trace is kept from its top.
        assert!(o.excerpt.iter().any(|l| l.contains("dump_stack+0x6d")));
    }

    #[test]
    fn general_protection_fault_and_kernel_bug() {
        let gpf = "[ 5.1] general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP NOPTI\n\
                   [ 5.2] CPU: 0 PID: 1 Comm: x\n\
                   [ 5.3] RIP: 0010:list_del+0x9/0x30\n\
                   [ 5.4] Kernel panic - not syncing: Fatal exception\n";
        let o = find(gpf).unwrap();
        assert!(o.headline.starts_with("general protection fault"));
        assert_eq!(o.location(), "list_del");
        let bug = "[ 7.0] ------------[ cut here ]------------\n\
                   [ 7.1] kernel BUG at mm/slub.c:379!\n\
                   [ 7.2] invalid opcode: 0000 [#1] PREEMPT SMP\n\
                   [ 7.3] RIP: 0010:[<ffffffff8139b8f6>]  [<ffffffff8139b8f6>] kfree+0x1c6/0x1d0\n\
                   [ 7.4] Kernel panic - not syncing: Fatal exception in interrupt\n";
        let o = find(bug).unwrap();
        assert_eq!(o.headline, "kernel BUG at mm/slub.c:379!");
        assert_eq!(o.location(), "kfree");
    }

    #[test]
    fn quiet_consoles_and_warnings_are_no_crash() {
        assert_eq!(find(""), None);
        assert_eq!(
            find("[ 1.0] Linux version 6.1\n[ 2.0] reboot: Power down\n"),
            None
        );
        let warn = "[ 3.0] WARNING: CPU: 0 PID: 1 at x.c:1 f+0x1/0x2\n[ 3.1] ---[ end trace ]---\n";
        assert_eq!(find(warn), None);
    }

    #[test]
    fn a_console_cut_short_still_names_the_oops() {
        let cut = "[ 4.0] BUG: unable to handle page fault for address: ffffffffc0201000\n\
                   [ 4.1] Oops: 0002 [#1] SMP\n[ 4.2] RIP: 0010:vgem_fence_signal+0x1";
        let o = find(cut).unwrap();
        assert_eq!(
            o.headline,
            "BUG: unable to handle page fault for address: ffffffffc0201000"
        );
        assert_eq!(o.panic, None);
        // The RIP line was cut mid-frame: no function, so the headline stands in.
        assert_eq!(o.function, None);
        assert_eq!(o.location(), o.headline);
    }

    #[test]
    fn timestamps_caller_ids_and_hostile_lines() {
        assert_eq!(strip_timestamp("[   12.345678] BUG: x\r"), "BUG: x");
        assert_eq!(strip_timestamp("[    1.0][    T1] Oops: y"), "Oops: y");
        assert_eq!(strip_timestamp("[not a stamp] z"), "[not a stamp] z");
        assert_eq!(strip_timestamp("[   1.0]  frame+0x1/0x2"), " frame+0x1/0x2");
        assert_eq!(
            parse_frame(" vkms_x+0x1/0x2 [vkms]"),
            Some(("vkms_x".into(), Some("vkms".into())))
        );
        assert_eq!(parse_frame(" ? page_fault_oops+0x17b/0x4a0"), None);
        assert_eq!(parse_frame("0033:0x7f3a1c2b3c5b"), None);
        assert_eq!(parse_frame("f+0x1/0xZZ"), None);
        assert_eq!(parse_frame("ünï+0x1/0x2"), None);
        assert_eq!(
            parse_frame("f+0x1/0x2 [bad module!]"),
            Some(("f".into(), None))
        );
        for junk in [
            "[",
            "[]",
            "[ ]",
            " [#",
            "x [#1]",
            "a: 000 [#1]",
            "RIP:",
            "RIP: 0010:",
            "\u{0}\u{ff}",
        ] {
            let _ = find(junk);
            let _ = is_die_header(junk);
            let _ = strip_timestamp(junk);
        }
        assert!(is_die_header("Oops: 0000 [#1] SMP"));
        assert!(!is_die_header("Oops: 0000 [#x] SMP"));
        // A panic with no report before it and nothing after it.
        let o = find("Kernel panic - not syncing: VFS: Unable to mount root fs").unwrap();
        assert_eq!(
            o.location(),
            "Kernel panic - not syncing: VFS: Unable to mount root fs"
        );
        assert_eq!(o.excerpt.len(), 1);
    }
}
