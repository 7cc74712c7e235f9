//! QEMU for a boot: the binary, and its command line for the spec's accelerator, memory,
//! ports and devices.

use super::{Accel, DeviceKind, GuestSpec, NVDIMM_MIB, RunFiles, sh_quote, virgl};
use crate::error::{Result, VmError};
use crate::util::which;
use std::fs;
use std::path::{Path, PathBuf};

/// The guest kernel's command line. `unknown_nmi_panic`: the NMI the host injects into a
/// guest whose heartbeat stopped ([`HANG_AFTER`](crate::guest::HANG_AFTER)) panics the
/// kernel, which prints the stack the interrupted CPU was stuck in (no other NMI source
/// exists under TCG: no PMU, no NMI watchdog). `no_timer_check`: under TCG on a loaded host
/// the IO-APIC timer check can miss its ticks and panic the boot ("IO-APIC + timer doesn't
/// work!", seen on 5.10).
pub const KERNEL_CMDLINE: &str = "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init \
     tsc=reliable no_timer_check unknown_nmi_panic";

/// The QEMU command line for a boot.
pub fn qemu_args(spec: &GuestSpec, files: &RunFiles) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    machine_args(&mut a, spec);
    boot_args(&mut a, spec, files);
    port_args(&mut a, files);
    host_root_args(&mut a, spec);
    device_args(&mut a, spec, files);
    if let Some(link) = spec.cluster {
        cluster_args(&mut a, link);
    }
    a
}

/// The NIC of a two-guest link: a `dgram` netdev (QEMU 7.2) from this guest's UDP port on
/// the host's loopback to the other guest's, and a virtio-net device on it with the link's
/// MAC.
fn cluster_args(a: &mut Vec<String>, link: super::ClusterLink) {
    a.push("-netdev".into());
    a.push(format!(
        "dgram,id=cluster,local.type=inet,local.host=127.0.0.1,local.port={},\
         remote.type=inet,remote.host=127.0.0.1,remote.port={}",
        link.local_port, link.remote_port
    ));
    a.push("-device".into());
    a.push(format!("virtio-net-pci,netdev=cluster,mac={}", link.mac()));
}

/// The machine: its type (with NVDIMM support when one is attached), the accelerator, the
/// CPU model, two vCPUs and the memory (with slots for an NVDIMM or a virtio-pmem).
fn machine_args(a: &mut Vec<String>, spec: &GuestSpec) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    let nvdimm = spec.devices.contains(&DeviceKind::Nvdimm);
    // PCIe ports and switches need a PCIe machine: q35 for the switch profile only (every
    // other lane keeps the machine its device set was proven on).
    let machine = if spec.devices.contains(&DeviceKind::PcieSwitch) {
        "q35"
    } else {
        "pc"
    };
    push(&[
        "-machine",
        &if nvdimm {
            format!("{machine},nvdimm=on")
        } else {
            machine.to_string()
        },
    ]);
    // Multi-threaded TCG races with the kernel's live text patching (text_poke_bp's int3):
    // a Debian 6.12 guest died with "Oops: int3" in sched_clock_cpu at boot. One TCG thread
    // runs the two vCPUs round-robin and cannot race.
    push(&[
        "-accel",
        match spec.accel {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg,thread=single",
        },
    ]);
    push(&[
        "-cpu",
        if spec.accel == Accel::Kvm {
            "host"
        } else {
            "max,la57=off"
        },
    ]);
    push(&["-smp", "2"]);
    let pmem = nvdimm || spec.devices.contains(&DeviceKind::VirtioPmem);
    let mem = if pmem {
        format!(
            "{}M,slots=2,maxmem={}M",
            spec.memory_mib,
            spec.memory_mib + 2048
        )
    } else {
        format!("{}M", spec.memory_mib)
    };
    push(&["-m", &mem]);
    if spec.devices.contains(&DeviceKind::NumaPxb) || spec.devices.contains(&DeviceKind::PcieSwitch)
    {
        numa_args(a, spec.memory_mib);
    }
}

/// The NUMA topology profile's nodes ([`DeviceKind::NumaPxb`]): vCPU 0 and the first half
/// of the memory on node 0, vCPU 1 and the rest on node 1, 21 between them (the ACPI SLIT
/// the guest's `/sys/devices/system/node/node*/distance` reads back).
pub const NUMA_DISTANCE: u32 = 21;

fn numa_args(a: &mut Vec<String>, memory_mib: u32) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    let half = memory_mib / 2;
    for (node, size) in [(0, half), (1, memory_mib - half)] {
        push(&[
            "-object",
            &format!("memory-backend-ram,id=numa{node},size={size}M"),
        ]);
        push(&[
            "-numa",
            &format!("node,nodeid={node},cpus={node},memdev=numa{node}"),
        ]);
    }
    push(&["-numa", &format!("dist,src=0,dst=1,val={NUMA_DISTANCE}")]);
}

/// No default devices or user config, the display, no reboot, and what to boot: the
/// kernel, the initramfs and the kernel's command line.
fn boot_args(a: &mut Vec<String>, spec: &GuestSpec, files: &RunFiles) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    push(&["-nodefaults", "-no-user-config", "-display"]);
    // virgl needs a GL context on the host: an SDL window on the Xvfb that `boot` starts.
    push(&[if virgl() { "sdl,gl=on" } else { "none" }]);
    push(&["-no-reboot"]);
    push(&["-kernel", &spec.kernel.image.to_string_lossy()]);
    push(&["-initrd", &files.initrd.to_string_lossy()]);
    push(&["-append", KERNEL_CMDLINE]);
}

/// The guest's ports to host files: the serial console, the `vm.results`, `vm.output` and
/// `vm.alive` virtio-serial ports, and the monitor's socket.
fn port_args(a: &mut Vec<String>, files: &RunFiles) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    push(&[
        "-chardev",
        &format!("file,id=con,path={}", files.console.display()),
    ]);
    push(&["-serial", "chardev:con"]);
    push(&["-device", "virtio-serial-pci,id=vser"]);
    push(&[
        "-chardev",
        &format!("file,id=res,path={}", files.results.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=res,name=vm.results",
    ]);
    push(&[
        "-chardev",
        &format!("file,id=out,path={}", files.output.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=out,name=vm.output",
    ]);
    push(&[
        "-chardev",
        &format!("file,id=alive,path={}", files.alive.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=alive,name=vm.alive",
    ]);
    push(&[
        "-monitor",
        &format!("unix:{},server=on,wait=off", files.monitor.display()),
    ]);
}

/// The host root, shared read-only over 9p (not to a probe boot).
fn host_root_args(a: &mut Vec<String>, spec: &GuestSpec) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    if spec.payload.host_root && !spec.probe_only {
        // multidevs=remap: the host root spans several filesystems whose inode numbers
        // collide (the root directories of /proc and /sys are both inode 1); without it the
        // guest's 9p client merges such directories and /proc in the chroot shows sysfs.
        push(&[
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        ]);
        push(&["-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"]);
    }
}

/// The spec's devices (the module-only ones add nothing).
fn device_args(a: &mut Vec<String>, spec: &GuestSpec, files: &RunFiles) {
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    for d in &spec.devices {
        match d {
            DeviceKind::VirtioGpu => push(&[
                "-device",
                if virgl() {
                    "virtio-gpu-gl-pci"
                } else {
                    "virtio-gpu-pci"
                },
            ]),
            DeviceKind::VirtioGpu2 => push(&["-device", "virtio-gpu-pci"]),
            DeviceKind::Bochs => push(&["-vga", "std"]),
            DeviceKind::Qxl => push(&["-device", "qxl"]),
            DeviceKind::Nvdimm => {
                push(&[
                    "-object",
                    &format!(
                        "memory-backend-file,id=nvmem0,share=on,mem-path={},size={}M",
                        files.nvdimm.display(),
                        NVDIMM_MIB
                    ),
                ]);
                push(&["-device", "nvdimm,id=nvdimm0,memdev=nvmem0"]);
            }
            DeviceKind::NumaPxb => {
                // An expander per node (its root bus numbered from bus_nr), each with a
                // GPU; node 1's also holds "the data": a 16 MiB virtio-blk disk that reads
                // zeros (QEMU's null-co driver: no host file).
                for (node, bus) in [(0, 32), (1, 64)] {
                    push(&[
                        "-device",
                        &format!("pxb,id=pxb{node},bus=pci.0,bus_nr={bus},numa_node={node}"),
                    ]);
                    push(&["-device", &format!("virtio-gpu-pci,bus=pxb{node},addr=0x0")]);
                }
                push(&[
                    "-blockdev",
                    "driver=null-co,node-name=topodata,size=16777216,read-zeroes=on",
                ]);
                push(&["-device", "virtio-blk-pci,drive=topodata,bus=pxb1,addr=0x1"]);
                // A NIC beside node 0's GPU, on a hub port to nothing (no traffic: its
                // place on PCI is what the profile needs).
                push(&["-netdev", "hubport,id=topo-net,hubid=0"]);
                push(&[
                    "-device",
                    "virtio-net-pci,netdev=topo-net,bus=pxb0,addr=0x1",
                ]);
            }
            DeviceKind::PcieSwitch => {
                // The NVMe drive's data: the boot's sparse file, raw.
                push(&[
                    "-blockdev",
                    &format!(
                        "driver=raw,node-name=topodisk,file.driver=file,file.filename={}",
                        files.disk.display()
                    ),
                ]);
                for d in SWITCH_DEVICES {
                    push(&["-device", d]);
                }
            }
            DeviceKind::VirtioPmem => {
                push(&[
                    "-object",
                    &format!(
                        "memory-backend-file,id=vpmem0,share=on,mem-path={},size={}M",
                        files.nvdimm.display(),
                        NVDIMM_MIB
                    ),
                ]);
                push(&["-device", "virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0"]);
            }
            _ => {}
        }
    }
}

/// The PCIe switch profile's devices ([`DeviceKind::PcieSwitch`]), `-device` values in
/// order: an expander bridge per node (its root bus 32 on node 0, 64 on node 1); behind
/// node 0's first root port the switch (upstream port, three downstream ports) with GPU A,
/// GPU B and the NVMe drive on the `topodisk` block node; behind its second root port GPU
/// D; behind node 1's root port GPU C.
const SWITCH_DEVICES: &[&str] = &[
    "pxb-pcie,id=pxb0,bus=pcie.0,bus_nr=32,numa_node=0",
    "pcie-root-port,id=rp0,bus=pxb0,chassis=10,slot=0,addr=0x0",
    "x3130-upstream,id=up0,bus=rp0",
    "xio3130-downstream,id=dn0,bus=up0,chassis=11,slot=0,addr=0x0",
    "xio3130-downstream,id=dn1,bus=up0,chassis=12,slot=0,addr=0x1",
    "xio3130-downstream,id=dn2,bus=up0,chassis=13,slot=0,addr=0x2",
    "virtio-gpu-pci,bus=dn0,addr=0x0",
    "virtio-gpu-pci,bus=dn1,addr=0x0",
    "nvme,serial=drmtopo,drive=topodisk,bus=dn2,addr=0x0",
    "pcie-root-port,id=rp1,bus=pxb0,chassis=14,slot=0,addr=0x1",
    "virtio-gpu-pci,bus=rp1,addr=0x0",
    "pxb-pcie,id=pxb1,bus=pcie.0,bus_nr=64,numa_node=1",
    "pcie-root-port,id=rp2,bus=pxb1,chassis=15,slot=0,addr=0x0",
    "virtio-gpu-pci,bus=rp2,addr=0x0",
];

/// Writes the command line, each argument shell-quoted after the binary, to `qemu.cmdline`
/// in `dir` (to rerun a boot by hand); a failure to write it is ignored.
pub(super) fn write_cmdline(dir: &Path, qemu: &Path, args: &[String]) {
    fs::write(
        dir.join("qemu.cmdline"),
        format!(
            "{} {}\n",
            qemu.display(),
            args.iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
    .ok();
}

/// Finds `qemu-system-x86_64` (`$VM_QEMU` overrides).
pub fn qemu_binary() -> Result<PathBuf> {
    if let Some(q) = std::env::var_os("VM_QEMU") {
        return Ok(PathBuf::from(q));
    }
    which("qemu-system-x86_64").ok_or_else(|| {
        VmError::with_fix(
            "qemu-system-x86_64 not found",
            "scripts/setup (or apt-get install qemu-system-x86)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::init_env;
    use crate::guest::tests::{files, spec};

    #[test]
    fn qemu_command_for_the_full_device_set() {
        let a = qemu_args(&spec(DeviceKind::ALL.to_vec()), &files()).join(" ");
        for want in [
            "-machine pc,nvdimm=on",
            "-accel tcg,thread=single",
            "-cpu max,la57=off",
            "-m 1024M,slots=2,maxmem=3072M",
            "-kernel /k/vmlinux",
            "-initrd /r/initramfs.cpio",
            "-no-reboot",
            "panic=-1",
            "-serial chardev:con",
            "name=vm.results",
            "name=vm.output",
            "name=vm.alive",
            "-monitor unix:/r/monitor.sock,server=on,wait=off",
            "unknown_nmi_panic",
            "-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device virtio-gpu-pci",
            "-vga std",
            "-device qxl",
            "memory-backend-file,id=nvmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device nvdimm,id=nvdimm0,memdev=nvmem0",
        ] {
            assert!(a.contains(want), "missing {want:?} in {a}");
        }
        // The full set has two virtio-gpus: two render nodes of one driver.
        assert_eq!(a.matches("-device virtio-gpu-pci").count(), 2, "{a}");
    }

    /// The topology profiles: NUMA on `pc`, the switch on q35 (with the NVDIMM's option
    /// kept), both with the two nodes; the switch's drive on the boot's file and its
    /// devices in their order; no network but the cluster link's.
    #[test]
    fn topology_profiles_and_the_cluster_link() {
        let numa = qemu_args(&spec(vec![DeviceKind::NumaPxb]), &files()).join(" ");
        for want in [
            "-machine pc ",
            "-numa node,nodeid=0,cpus=0,memdev=numa0",
            "-numa node,nodeid=1,cpus=1,memdev=numa1",
            "-numa dist,src=0,dst=1,val=21",
            "pxb,id=pxb1,bus=pci.0,bus_nr=64,numa_node=1",
        ] {
            assert!(numa.contains(want), "missing {want:?} in {numa}");
        }
        let sw = qemu_args(
            &spec(vec![DeviceKind::Nvdimm, DeviceKind::PcieSwitch]),
            &files(),
        );
        let text = sw.join(" ");
        for want in [
            "-machine q35,nvdimm=on",
            "-numa dist,src=0,dst=1,val=21",
            "-blockdev driver=raw,node-name=topodisk,file.driver=file,file.filename=/r/disk.img",
        ] {
            assert!(text.contains(want), "missing {want:?} in {text}");
        }
        let devices: Vec<&str> = sw
            .windows(2)
            .filter(|w| w[0] == "-device")
            .map(|w| w[1].as_str())
            .filter(|d| SWITCH_DEVICES.contains(d))
            .collect();
        assert_eq!(devices, SWITCH_DEVICES, "{text}");
        assert!(!text.contains("-netdev"), "{text}");

        let mut s = spec(vec![DeviceKind::Vkms]);
        s.cluster = Some(super::super::ClusterLink {
            node: 2,
            local_port: 5001,
            remote_port: 5000,
        });
        let link = qemu_args(&s, &files()).join(" ");
        assert!(
            link.contains(
                "-netdev dgram,id=cluster,local.type=inet,local.host=127.0.0.1,local.port=5001,\
                 remote.type=inet,remote.host=127.0.0.1,remote.port=5000 \
                 -device virtio-net-pci,netdev=cluster,mac=52:54:00:c1:00:02"
            ),
            "{link}"
        );
    }

    /// The whole QEMU command line, argument by argument, for two option sets that between
    /// them take every branch of [`qemu_args`] (virgl off).
    #[test]
    fn qemu_command_is_pinned() {
        let full = qemu_args(&spec(DeviceKind::ALL.to_vec()), &files());
        let want: Vec<&str> = vec![
            "-machine",
            "pc,nvdimm=on",
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max,la57=off",
            "-smp",
            "2",
            "-m",
            "1024M,slots=2,maxmem=3072M",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            "/k/vmlinux",
            "-initrd",
            "/r/initramfs.cpio",
            "-append",
            "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init tsc=reliable \
             no_timer_check unknown_nmi_panic",
            "-chardev",
            "file,id=con,path=/r/console.log",
            "-serial",
            "chardev:con",
            "-device",
            "virtio-serial-pci,id=vser",
            "-chardev",
            "file,id=res,path=/r/results.bin",
            "-device",
            "virtserialport,bus=vser.0,chardev=res,name=vm.results",
            "-chardev",
            "file,id=out,path=/r/output.log",
            "-device",
            "virtserialport,bus=vser.0,chardev=out,name=vm.output",
            "-chardev",
            "file,id=alive,path=/r/alive.log",
            "-device",
            "virtserialport,bus=vser.0,chardev=alive,name=vm.alive",
            "-monitor",
            "unix:/r/monitor.sock,server=on,wait=off",
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-device",
            "virtio-gpu-pci",
            "-device",
            "virtio-gpu-pci",
            "-vga",
            "std",
            "-device",
            "qxl",
            "-object",
            "memory-backend-file,id=nvmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device",
            "nvdimm,id=nvdimm0,memdev=nvmem0",
        ];
        assert_eq!(full, want);

        // KVM, a virtio-pmem, and a probe boot (which shares no host root).
        let mut s = spec(vec![DeviceKind::VirtioPmem, DeviceKind::Vkms]);
        s.accel = Accel::Kvm;
        s.probe_only = true;
        s.memory_mib = 512;
        let probe = qemu_args(&s, &files());
        let mut want: Vec<&str> = vec![
            "-machine",
            "pc",
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-smp",
            "2",
            "-m",
            "512M,slots=2,maxmem=2560M",
        ];
        // From -nodefaults to -monitor the two are the same.
        let shared = full.iter().position(|a| a == "-nodefaults").unwrap();
        let after = full.iter().position(|a| a == "-fsdev").unwrap();
        want.extend(full[shared..after].iter().map(String::as_str));
        want.extend([
            "-object",
            "memory-backend-file,id=vpmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device",
            "virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0",
        ]);
        assert_eq!(probe, want);
    }

    #[test]
    fn qemu_command_minimal_and_kvm() {
        let mut s = spec(vec![]);
        s.accel = Accel::Kvm;
        s.payload.host_root = false;
        let a = qemu_args(&s, &files()).join(" ");
        assert!(a.contains("-machine pc -accel kvm "), "{a}");
        assert!(a.contains("-cpu host"));
        assert!(a.contains("-m 1024M "));
        for absent in ["nvdimm", "virtio-9p", "-vga", "qxl", "virtio-gpu"] {
            assert!(!a.contains(absent), "{absent} in {a}");
        }
    }

    #[test]
    fn qemu_command_for_virtio_pmem() {
        let s = spec(vec![DeviceKind::VirtioPmem]);
        let a = qemu_args(&s, &files()).join(" ");
        for want in [
            "-machine pc ",
            "-m 1024M,slots=2,maxmem=3072M",
            "memory-backend-file,id=vpmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0",
        ] {
            assert!(a.contains(want), "missing {want:?} in {a}");
        }
        assert!(!a.contains("nvdimm=on"), "{a}");
        assert!(init_env(&s).contains("VM_WAIT_PMEM=1\n"));
        assert_eq!(
            DeviceKind::parse("virtio-pmem"),
            Some(DeviceKind::VirtioPmem)
        );
        assert!(!DeviceKind::ALL.contains(&DeviceKind::VirtioPmem));
    }
}
