#!/bin/busybox sh
# Guest init of the vm harness (PID 1 in the initramfs). Mounts the kernel filesystems,
# loads the driver modules, reports what it found, runs the payload from the host root
# (shared read-only over 9p; a writable union over it with VM_WRITABLE_ROOT=1) in a
# chroot, forwards the payload's results, powers off.
#
# Results go to the virtio port named vm.results as framed records
#   "\n@@VMR1 <byte length> <payload>\n"
# so kernel messages on the console can never be mistaken for results. Nothing about the
# payload's outcome is inferred from silence: the host requires an "exit" record and an
# "end <count>" record that matches the number of records received.
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
# cgroup v2 (the device programs of drmtool run/cgroup devices attach to its directories),
# with nsdelegate as systemd mounts it: a cgroup namespace's root is a delegation boundary
# (no process inside moves itself across it), which drmtool run's jobs rely on.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup 2>/dev/null ||
  mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t devtmpfs devtmpfs /dev 2>/dev/null
# Pseudo-terminals (devtmpfs's /dev/ptmx opens this instance): tmux and anything else
# that runs a program in a terminal.
mkdir -p /dev/pts && mount -t devpts -o gid=5,mode=620,ptmxmode=0666 devpts /dev/pts 2>/dev/null
mkdir -p /dev/shm /dev/pts /run /tmp /host
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug
# tracefs where the kernel has event tracing (drmtool trace, trace-cmd), as systemd mounts it
[ -d /sys/kernel/tracing ] && mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t configfs configfs /sys/kernel/config 2>/dev/null

. /etc/vm.env
# The loopback interface, for payloads that talk TCP to themselves (drmtool export and the
# Prometheus server that scrapes it).
if ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null; then :; else
  LO_DOWN=1
fi

# Kernels that build the virtio transport or console as modules (stock distribution
# kernels): load them before looking for the result ports, and wait until the ports are
# named (the device announces them asynchronously).
if [ -n "$VM_EARLY_MODULES" ]; then
  for m in $VM_EARLY_MODULES; do modprobe "$m" 2>/dev/null; done
  i=0
  until grep -qsx vm.results /sys/class/virtio-ports/*/name || [ $i -ge 50 ]; do
    sleep 0.1; i=$((i + 1))
  done
fi

RES=""
for p in /sys/class/virtio-ports/*; do
  [ -e "$p/name" ] || continue
  case "$(cat "$p/name")" in
    vm.results) RES=/dev/${p##*/} ;;
    vm.output) OUT=/dev/${p##*/} ;;
    vm.alive) ALIVE=/dev/${p##*/} ;;
  esac
done
[ -n "$RES" ] || RES=/dev/ttyS0
[ -n "$OUT" ] || OUT=/dev/console
COUNT=0
rec() {
  line=$(printf '%s' "$*" | tr '\n\r' '  ')
  printf '\n@@VMR1 %d %s\n' "${#line}" "$line" > "$RES"
  COUNT=$((COUNT + 1))
}
finish() {
  rec "exit $1"
  rec "end $COUNT"
  sync
  poweroff -f
  reboot -f
}

rec "boot $(cut -d' ' -f1 /proc/uptime) $(uname -r)"
# The heartbeat: a byte to the vm.alive port every 5 s, from a plain (SCHED_OTHER) process of
# the initramfs. When it stops while QEMU still runs, nothing in the guest is being scheduled
# (a kernel deadlock with interrupts off, or a CPU hog that starves every task): the host
# injects an NMI, and with unknown_nmi_panic the kernel panics with the stack it was stuck
# in, which the lane reports like an oops.
if [ -n "$ALIVE" ]; then
  ( while printf .; do sleep 5; done > "$ALIVE" 2>/dev/null ) &
fi
[ -n "$LO_DOWN" ] && rec "note cannot bring up the loopback interface lo"
[ "$VM_MODE" = probe ] && finish 0

# Driver modules: explicit ones (no device to trigger them), then every device modalias
# (virtio-gpu, bochs, qxl, NFIT, ...), as udev would.
for m in $VM_MODULES; do
  name=${m%%:*}; args=""
  [ "$name" != "$m" ] && args=$(echo "${m#*:}" | tr ',' ' ')
  if [ -d "/sys/module/$name" ] && [ ! -e "/sys/module/$name/initstate" ]; then
    rec "module $name ok built in"
  elif [ -e "/sys/module/$name/initstate" ]; then
    rec "module $name ok already loaded"
  elif err=$(modprobe "$name" $args 2>&1); then
    rec "module $name ok"
  else
    rec "module $name fail $err"
  fi
done
rec "note phase modules $(cut -d' ' -f1 /proc/uptime)"
if [ -n "$VM_MODULES" ] || [ "$VM_MODALIAS" = 1 ]; then
  # One modprobe for every distinct alias: each call re-reads modules.alias.
  aliases=$(cat /sys/bus/*/devices/*/modalias 2>/dev/null | sort -u)
  [ -n "$aliases" ] && modprobe -qa $aliases 2>/dev/null
fi
rec "note phase modalias $(cut -d' ' -f1 /proc/uptime)"
# Kernels before 5.16 register test_hmm's char devices without creating nodes.
if grep -q HMM_DMIRROR /proc/devices && [ ! -e /dev/hmm_dmirror0 ]; then
  major=$(awk '$2 == "HMM_DMIRROR" {print $1}' /proc/devices)
  for i in 0 1; do mknod /dev/hmm_dmirror$i c "$major" $i; done
  rec "note made /dev/hmm_dmirror0,1 with mknod (major $major): this kernel creates no nodes"
fi
# Huge pages for the hmm selftests' hugetlbfs cases (libhugetlbfs needs a mount).
echo 32 > /proc/sys/vm/nr_hugepages 2>/dev/null
mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages 2>/dev/null
# NVDIMM namespaces appear asynchronously.
if [ -n "$VM_WAIT_PMEM" ]; then
  i=0; while [ ! -e /dev/pmem0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  rec "note phase pmem $(cut -d' ' -f1 /proc/uptime)"
fi

for n in /dev/dri/* /dev/udmabuf /dev/hmm_dmirror* /dev/pmem* /dev/dax* /dev/dma_heap/* /sys/kernel/debug/sync/sw_sync; do
  [ -e "$n" ] || continue
  drv=-
  case "$n" in
    /dev/dri/*)
      # The DRM driver's own name (debugfs), else the parent device's bound driver.
      minor=$(( $(stat -c %T "$n" 2>/dev/null | sed 's/^/0x/') ))
      if [ -r /sys/kernel/debug/dri/$minor/name ]; then
        drv=$(cut -d' ' -f1 /sys/kernel/debug/dri/$minor/name)
      else
        d=/sys/class/drm/${n##*/}/device/driver
        [ -e "$d" ] && drv=$(basename "$(readlink "$d")")
      fi
      ;;
  esac
  rec "node $n $drv"
done

if [ -z "$VM_CMD" ]; then finish 0; fi

# A writable root over the host root (vm test --writable-root): /merged, a union of the
# read-only 9p mount /host and a tmpfs (/rw) that takes every change and goes with the
# guest. overlayfs where the kernel has it; else the host's own fuse-overlayfs (the
# project's kernels have FUSE, not overlayfs), started from /host with the host's loader
# and libraries, as root with allow_other (the payload's other users, man's "man", use it
# too). Made before anything is mounted below /host, so the union sees the host root only.
writable_root() {
  mkdir -p /rw /merged
  mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir -p /rw/upper /rw/work || return 1
  if mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /merged 2>/dev/null; then
    rec "note writable root: overlayfs over the host root, changes in a tmpfs"
    return 0
  fi
  fo=/host/usr/bin/fuse-overlayfs
  if [ ! -x "$fo" ]; then
    rec "note writable root: no overlayfs in this kernel and no $fo on the host (scripts/setup installs fuse-overlayfs)"
    return 1
  fi
  ld=/host/lib64/ld-linux-x86-64.so.2
  # An absolute link on the host (Debian's /lib64/ld-linux-x86-64.so.2) points into the
  # host's tree, which is /host here.
  t=$(readlink "$ld") && case "$t" in /*) ld=/host$t ;; esac
  libs=/host/usr/lib/x86_64-linux-gnu:/host/lib/x86_64-linux-gnu
  if ! err=$("$ld" --library-path "$libs" "$fo" \
      -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work,allow_other,default_permissions,noacl \
      /merged 2>&1); then
    rec "note writable root: fuse-overlayfs failed: $err"
    return 1
  fi
  rec "note writable root: fuse-overlayfs over the host root, changes in a tmpfs"
}

ROOT=/
if [ "$VM_HOSTROOT" = 1 ]; then
  if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host; then
    rec "note cannot mount the host root over 9p"
    finish 125
  fi
  ROOT=/host
  if [ "$VM_WRITABLE_ROOT" = 1 ]; then
    writable_root || finish 125
    ROOT=/merged
  fi
  mount -t proc proc "$ROOT/proc"
  mount -t sysfs sysfs "$ROOT/sys"
  mount -t cgroup2 cgroup2 "$ROOT/sys/fs/cgroup" 2>/dev/null
  mount -o rbind /dev "$ROOT/dev"
  mount -t debugfs debugfs "$ROOT/sys/kernel/debug"
  # tracefs of its own: debugfs no longer mounts it at debug/tracing by itself once the
  # kernel drops CONFIG_TRACEFS_AUTOMOUNT_DEPRECATED (7.3's Debian config does).
  [ -d "$ROOT/sys/kernel/tracing" ] &&
    mount -t tracefs tracefs "$ROOT/sys/kernel/tracing" 2>/dev/null
  mount -t configfs configfs "$ROOT/sys/kernel/config" 2>/dev/null
  # /tmp becomes a writable tmpfs; host directories under /tmp that the payload needs
  # (its working directory, programs given by path) are bound back in, read-only.
  mkdir -p /mnt/hosttmp
  mount -o bind /host/tmp /mnt/hosttmp
  mount -t tmpfs tmpfs "$ROOT/tmp"
  for k in $VM_TMP_KEEP; do
    if [ -d "/mnt/hosttmp/$k" ]; then
      mkdir -p "$ROOT/tmp/$k" && mount -o bind "/mnt/hosttmp/$k" "$ROOT/tmp/$k"
    fi
  done
  mount -t tmpfs tmpfs "$ROOT/run"
fi

cp /etc/vm-payload.sh "$ROOT/run/vm-payload.sh"
# The guest kernel's modules where the payload can reach them: `modprobe -d
# "$VM_MODULES_ROOT" NAME ARGS` (a test reloads vkms with other parameters).
if [ -d /lib/modules ]; then
  mkdir -p "$ROOT/run/vm-modules/lib/modules"
  mount -o bind /lib/modules "$ROOT/run/vm-modules/lib/modules"
fi
rm -f "$ROOT/tmp/vm-results" "$ROOT/tmp/vm-results-sent"
# A payload that speaks the framing (vm guest-tests) writes its records straight to the
# result port, as it makes them, so a kernel crash loses none of them; it keeps the number
# it wrote in VM_RESULTS_SENT, which counts toward the end record. The port is free while
# the payload runs: the init writes nothing until it exits.
PORT_ENV=""
case "$RES" in /dev/vport*) PORT_ENV="VM_RESULTS_PORT=$RES VM_RESULTS_SENT=/tmp/vm-results-sent" ;; esac
rec "note payload start $(cut -d' ' -f1 /proc/uptime)"
# shellcheck disable=SC2086
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp \
  TMPDIR=/tmp TERM=dumb LANG=C.UTF-8 VM_GUEST=1 VM_RESULTS_FILE=/tmp/vm-results $PORT_ENV \
  VM_MODULES_ROOT=/run/vm-modules chroot "$ROOT" /bin/sh /run/vm-payload.sh > "$OUT" 2>&1 < /dev/null
rc=$?
if [ -f "$ROOT/tmp/vm-results-sent" ]; then
  sent=$(cat "$ROOT/tmp/vm-results-sent")
  case "$sent" in ''|*[!0-9]*) rec "note unreadable VM_RESULTS_SENT: $sent" ;; *) COUNT=$((COUNT + sent)) ;; esac
fi
# Results a payload wrote to the file (one record payload per line) are forwarded in order.
if [ -f "$ROOT/tmp/vm-results" ]; then
  while IFS= read -r line; do rec "$line"; done < "$ROOT/tmp/vm-results"
fi
finish $rc
