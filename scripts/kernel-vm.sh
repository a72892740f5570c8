#!/usr/bin/env bash
# A throw-away Linux VM with Debian's f2fs kernel module, to check f2fuse's
# images against the real kernel (the build machines' kernels have no f2fs).
#
#   scripts/kernel-vm.sh prepare
#       Fills the cache (${F2FUSE_VM_CACHE:-/var/tmp/f2fuse-vm}) once:
#       `apt-get download` of Debian's kernel package (linux-image-amd64's
#       current dependency, bookworm: 6.1; F2FUSE_VM_KERNEL_PKG picks another),
#       unpacked with dpkg-deb -x (nothing is installed on the host), and an
#       initramfs with busybox-static, the modules f2fs, virtio_blk,
#       virtio_pci, crc32, quota_v2 need (modules.dep from busybox depmod;
#       utf8 casefolding is built into Debian's kernel), the host's chattr,
#       lsattr, f2fs_io, getfattr, setfattr with their libraries, and /init.
#       Exit 0: ready (prints the kernel release and the accelerator, kvm or
#       tcg: KVM only when a probe boot with it succeeds). Exit 3: cannot be prepared
#       here (a tool or the package is missing; the reason is on stderr).
#
#   scripts/kernel-vm.sh run [-d IMAGE]... [-f HOST_FILE[:GUEST_PATH]]...
#                            [-t SECONDS] [-c CONSOLE_LOG] SCRIPT
#       Boots the VM (KVM if /dev/kvm is usable, else TCG) with each IMAGE as
#       a virtio disk (/dev/vda, /dev/vdb, ... in order, read-write), copies
#       SCRIPT (run by busybox sh as root in /vmrun) and each HOST_FILE
#       (default guest path /vmrun/NAME) into the VM, and prints the script's
#       stdout+stderr. The exit status is the script's; 3 if the VM cannot be
#       prepared; 124 on time-out (default 120 s); 125 if the VM ended
#       without the script's end marker (kernel panic, crash). The kernel's
#       console (its messages at level warning and above, and any panic) goes
#       to CONSOLE_LOG if given; its last lines are printed on failure.
#       In the VM: busybox applets, `modprobe`d f2fs, /mnt empty, and
#       `vm-powercut`, which ends the run at once like a power cut (sysrq b:
#       no sync, no unmount; what fsync put on the disk is there) with exit 0.
#
# Debian's kernel packages are signed and served by its registry; CI reaches
# it. Needs: qemu-system-x86 (qemu-system-x86_64), busybox-static, cpio,
# apt-get, dpkg-deb.
set -euo pipefail

cache=${F2FUSE_VM_CACHE:-/var/tmp/f2fuse-vm}
end_marker=F2FUSE-VM-EXIT
export PATH="$PATH:/usr/sbin:/sbin"

unavailable() {
    echo "kernel-vm: cannot prepare the VM: $*" >&2
    exit 3
}

# Modules the VM loads, in order (modprobe adds what modules.dep lists).
# crc32 is f2fs's checksum (crypto_alloc_shash("crc32"), not a link-time
# dependency); quota_v2 holds the quota file format f2fs's quota uses;
# xts, ecb, cts and sha512_generic are what fscrypt's v2 policies with
# AES-256-XTS/AES-256-CTS (Android's) need (fs-verity's SHA-256 is built in).
vm_modules="virtio_pci virtio_blk crc32_generic f2fs quota_v2 ecb xts cts sha512_generic"
# Host programs copied in with their libraries, when present.
vm_tools="chattr lsattr f2fs_io getfattr setfattr"

# cache_key PACKAGE: the prepared VM's name in the cache: the package and a
# checksum of what goes into the initramfs, so that branches with other
# module or tool lists keep their own copies instead of rebuilding in turn.
cache_key() {
    echo "$1-$(echo "$vm_modules|$vm_tools" | cksum | cut -d' ' -f1)"
}

kernel_package() {
    if [ -n "${F2FUSE_VM_KERNEL_PKG:-}" ]; then
        echo "$F2FUSE_VM_KERNEL_PKG"
        return
    fi
    # The newest prepared kernel serves when the registry cannot be asked.
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq >/dev/null 2>&1 || true
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
            awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    fi
    if [ -z "$pkg" ]; then
        pkg=$(ls -t "$cache" 2>/dev/null | sed -n 's/^ready-\(.*\)-[0-9]*$/\1/p' | head -n1)
    fi
    [ -n "$pkg" ] || unavailable "no linux-image-amd64 in apt's lists (run apt-get update)"
    echo "$pkg"
}

# copy_with_libs PROGRAM ROOT: PROGRAM and the shared libraries ldd names,
# at their host paths under ROOT.
copy_with_libs() {
    local prog=$1 root=$2 lib
    mkdir -p "$root/usr/bin"
    cp -L "$prog" "$root/usr/bin/"
    for lib in $(ldd "$prog" 2>/dev/null | grep -oE '/[^ ]+'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

write_init() {
    cat >"$1/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt /sbin /usr/sbin
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for m in $(cat /etc/vm-modules); do
    modprobe "$m" || echo "kernel-vm: modprobe $m failed" >/dev/ttyS0
done
cd /vmrun
sh /vmrun/script.sh >/dev/ttyS1 2>&1
echo "F2FUSE-VM-EXIT $?" >/dev/ttyS1
sync
poweroff -f
EOF
    cat >"$1/bin/vm-powercut" <<'EOF'
#!/bin/sh
# Ends the run like a power cut: no sync, no unmount.
echo "F2FUSE-VM-EXIT 0 powercut"
sleep 0.5  # let the serial line carry the marker out
echo b >/proc/sysrq-trigger
EOF
    chmod 755 "$1/init" "$1/bin/vm-powercut"
}

prepare() {
    local tool
    for tool in qemu-system-x86_64 cpio apt-get dpkg-deb; do
        command -v "$tool" >/dev/null 2>&1 || unavailable "$tool missing (apt-get install qemu-system-x86 cpio)"
    done
    [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 ||
        unavailable "no static /bin/busybox (apt-get install busybox-static)"
    local pkg
    pkg=$(kernel_package)
    local key
    key=$(cache_key "$pkg")
    local kdir=$cache/$key
    mkdir -p "$cache"
    # One preparation at a time (tests run in parallel).
    exec 9>"$cache/.lock"
    flock 9
    if [ -f "$cache/ready-$key" ]; then
        echo "$(cat "$cache/ready-$key") $(accelerator "$kdir")"
        return
    fi
    mkdir -p "$cache"
    rm -rf "$kdir" "$kdir.dl"
    mkdir -p "$kdir.dl"
    (cd "$kdir.dl" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        unavailable "apt-get download $pkg failed (no network to Debian's registry?)"
    mkdir -p "$kdir/root"
    dpkg-deb -x "$kdir.dl"/*.deb "$kdir/root"
    rm -rf "$kdir.dl"
    local release
    release=$(ls "$kdir/root/lib/modules")
    /bin/busybox depmod -b "$kdir/root" "$release"
    cp "$kdir/root/boot/vmlinuz-$release" "$kdir/vmlinuz"

    local initrd=$kdir/initramfs
    mkdir -p "$initrd/bin" "$initrd/etc" "$initrd/vmrun"
    cp /bin/busybox "$initrd/bin/busybox"
    # Only the modules the VM loads and what they depend on.
    local moddir=lib/modules/$release m mod
    mkdir -p "$initrd/$moddir"
    cp "$kdir/root/$moddir"/modules.{dep,alias,symbols,builtin,order} "$initrd/$moddir/"
    for m in $vm_modules; do
        mod=$(grep -E "(^|/)${m}\.ko:" "$kdir/root/$moddir/modules.dep") ||
            unavailable "$pkg has no module $m"
        for mod in $(echo "$mod" | tr -d ':'); do
            mkdir -p "$initrd/$moddir/$(dirname "$mod")"
            cp "$kdir/root/$moddir/$mod" "$initrd/$moddir/$mod"
        done
    done
    echo "$vm_modules" >"$initrd/etc/vm-modules"
    for tool in $vm_tools; do
        tool=$(command -v "$tool" 2>/dev/null) && copy_with_libs "$tool" "$initrd"
    done
    write_init "$initrd"
    (cd "$initrd" && find . | cpio -o -H newc --quiet) >"$kdir/initramfs.cpio"
    rm -rf "$initrd" "$kdir/root"
    echo "$release" >"$cache/ready-$key"
    echo "$release $(accelerator "$kdir")"
}

# boot_vm KDIR INITRD CONSOLE OUT TIMEOUT ACCEL_ARGS... -- QEMU_ARGS...
boot_vm() {
    local kdir=$1 initrd=$2 console=$3 out=$4 timeout=$5
    shift 5
    timeout --kill-after=5 "$timeout" qemu-system-x86_64 "$@" \
        -m 512 -smp 1 -nodefaults -display none -no-reboot \
        -kernel "$kdir/vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 quiet panic=-1 oops=panic" \
        -serial "file:$console" -serial "file:$out"
}

# accelerator KDIR: kvm or tcg (F2FUSE_VM_ACCEL overrides). KVM is used
# only if a probe boot with it reached the end marker: nested KVM can exist
# and still hang in early boot (seen in a Firecracker guest), where TCG
# boots in seconds. The probe's answer is kept in the cache.
accelerator() {
    local kdir=$1
    if [ -n "${F2FUSE_VM_ACCEL:-}" ]; then
        echo "$F2FUSE_VM_ACCEL"
        return
    fi
    if ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; then
        echo tcg
        return
    fi
    if ! [ -f "$kdir/accel" ]; then
        local probe
        probe=$(mktemp -d "${TMPDIR:-/tmp}/f2fuse-vm-probe.XXXXXX")
        mkdir -p "$probe/extra/vmrun"
        echo true >"$probe/extra/vmrun/script.sh"
        cp "$kdir/initramfs.cpio" "$probe/initrd"
        (cd "$probe/extra" && find . | cpio -o -H newc --quiet) >>"$probe/initrd"
        if boot_vm "$kdir" "$probe/initrd" /dev/null "$probe/out" 20 -enable-kvm >/dev/null 2>&1 &&
            grep -aq "^$end_marker 0" "$probe/out"; then
            echo kvm >"$kdir/accel"
        else
            echo "kernel-vm: KVM did not boot the VM within 20 s; using TCG" >&2
            echo tcg >"$kdir/accel"
        fi
        rm -rf "$probe"
    fi
    cat "$kdir/accel"
}

run() {
    local disks=() files=() timeout=120 console="" opt
    OPTIND=1
    while getopts "d:f:t:c:" opt; do
        case $opt in
        d) disks+=("$OPTARG") ;;
        f) files+=("$OPTARG") ;;
        t) timeout=$OPTARG ;;
        c) console=$OPTARG ;;
        *) exit 2 ;;
        esac
    done
    shift $((OPTIND - 1))
    [ $# -eq 1 ] || {
        echo "usage: $0 run [-d IMAGE]... [-f FILE[:GUEST_PATH]]... [-t SECS] [-c LOG] SCRIPT" >&2
        exit 2
    }
    (prepare) >/dev/null || exit $? # a subshell: the lock ends with it
    local kdir
    kdir=$cache/$(cache_key "$(kernel_package)")

    work=$(mktemp -d "${TMPDIR:-/tmp}/f2fuse-vm.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/extra/vmrun"
    cp "$1" "$work/extra/vmrun/script.sh"
    local spec host guest
    for spec in ${files[@]+"${files[@]}"}; do
        host=${spec%%:*}
        guest=/vmrun/$(basename "$host")
        [ "$spec" != "$host" ] && guest=${spec#*:}
        mkdir -p "$work/extra$(dirname "$guest")"
        cp -a "$host" "$work/extra$guest"
    done
    # The kernel unpacks concatenated newc archives in turn: the run's files
    # land on top of the prepared image.
    cp "$kdir/initramfs.cpio" "$work/initrd"
    (cd "$work/extra" && find . | cpio -o -H newc --quiet) >>"$work/initrd"

    local accel=(-accel tcg)
    if [ "$(accelerator "$kdir")" = kvm ]; then
        accel=(-enable-kvm)
    fi
    local drives=() d
    for d in ${disks[@]+"${disks[@]}"}; do
        [ -f "$d" ] || [ -b "$d" ] || {
            echo "kernel-vm: no image $d" >&2
            exit 2
        }
        drives+=(-drive "file=$d,format=raw,if=virtio")
    done
    [ -n "$console" ] || console=$work/console.log
    : >"$work/out.log"
    local status=0
    boot_vm "$kdir" "$work/initrd" "$console" "$work/out.log" "$timeout" \
        "${accel[@]}" ${drives[@]+"${drives[@]}"} || status=$?

    local marker
    marker=$(grep -a "^$end_marker " "$work/out.log" | tail -n1 | tr -d '\r' || true)
    grep -av "^$end_marker " "$work/out.log" | tr -d '\r' || true
    if [ -z "$marker" ]; then
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
            echo "kernel-vm: timed out after $timeout s; console:" >&2
            status=124
        else
            echo "kernel-vm: the VM ended without the end marker (qemu status $status); console:" >&2
            status=125
        fi
        tail -n 40 "$console" >&2
        exit "$status"
    fi
    status=$(echo "$marker" | awk '{print $2}')
    if [ "$status" -ne 0 ]; then
        echo "kernel-vm: script exited $status; console's last lines:" >&2
        tail -n 20 "$console" >&2
    fi
    exit "$status"
}

case "${1:-}" in
prepare) prepare ;;
run)
    shift
    run "$@"
    ;;
*)
    echo "usage: $0 prepare | run [-d IMAGE]... [-f FILE[:GUEST_PATH]]... [-t SECS] [-c LOG] SCRIPT" >&2
    exit 2
    ;;
esac
