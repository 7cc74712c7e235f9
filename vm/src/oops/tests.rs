//! The crash finder and the hang classifier against consoles as the guests printed them.

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
const NMI_IN_TICK_PROGRAMMING_OVER_USER: &str =
    "[   42.698482] Kernel panic - not syncing: NMI: Not continuing
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
