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
mod tests;
