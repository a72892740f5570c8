#!/usr/bin/env bash
# bench/units-cpu.sh -- the daemon's CPU seconds per GiB of cold buffered reads, two
# f2fuse binaries interleaved round by round (CPU time moves less than MiB/s on a
# loaded machine). Root only.
#
#   A=old/f2fuse B=target/release/f2fuse BS=64k ROUNDS=3 bench/units-cpu.sh
#
# Each round and binary: a fresh 1 GiB image, a 256 MiB file written with dd, then four
# cold reads of it (drop_caches before each) with dd at BS; prints user+system seconds
# of the daemon per GiB read and the load average.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench/units-cpu.sh: needs root" >&2; exit 1; }
: "${A:?A=path of the first f2fuse binary}" "${B:=$ROOT/target/release/f2fuse}"
BS=${BS:-64k} ROUNDS=${ROUNDS:-3} SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench}
IMG=$SCRATCH/cpu.img MNT=$SCRATCH/mnt-cpu HZ=$(getconf CLK_TCK)
mkdir -p "$MNT"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for round in $(seq 1 "$ROUNDS"); do
    for peer in A B; do
        rm -f "$IMG" && truncate -s 1G "$IMG" && "${!peer}" mkfs -q "$IMG"
        "${!peer}" mount "$IMG" "$MNT" -f > /dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 50); do mountpoint -q "$MNT" && break; sleep 0.2; done
        dd if=/dev/zero of="$MNT/f" bs=1M count=256 conv=fsync status=none
        c0=$(cpu "$pid")
        for _ in 1 2 3 4; do
            sync && echo 3 > /proc/sys/vm/drop_caches
            dd if="$MNT/f" of=/dev/null bs="$BS" status=none
        done
        c1=$(cpu "$pid")
        echo "round $round $peer: $(awk -v a="$c0" -v b="$c1" -v hz="$HZ" 'BEGIN{printf "%.2f", (b-a)/hz}') s/GiB, load $(cut -d' ' -f1 /proc/loadavg)"
        umount "$MNT" && wait "$pid"
    done
done
rm -f "$IMG"
