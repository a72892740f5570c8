#!/usr/bin/env bash
# bench/cold-read.sh [MOUNT_OPTIONS] -- one cold sequential read through an f2fuse mount:
# mkfs a fresh image, mount it with MOUNT_OPTIONS, write a 256 MiB file with fsync, then for
# 64k and 1m: sync, drop every cache, read the file with fio psync. Prints one line:
#   OPTIONS: 64k MiB/s 1m MiB/s
# Meant to be repeated, two option sets interleaved (the disk's speed varies from run to run).
# Root only (FUSE, drop_caches); needs fio and python3. Knobs: F2FUSE (default target/release/f2fuse),
# SCRATCH (default /var/tmp/f2fuse-cold-read), FILE_MIB (default 256).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
F2FUSE=${F2FUSE:-$ROOT/target/release/f2fuse}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-cold-read} FILE_MIB=${FILE_MIB:-256}
[[ $(id -u) -eq 0 ]] || { echo "bench/cold-read.sh: needs root (FUSE, drop_caches)" >&2; exit 1; }
mkdir -p "$SCRATCH/mnt"
rm -f "$SCRATCH/img"
truncate -s 1G "$SCRATCH/img"
"$F2FUSE" mkfs -q "$SCRATCH/img"
opts=()
[[ -n ${1:-} ]] && opts=(-o "$1")
"$F2FUSE" mount "$SCRATCH/img" "$SCRATCH/mnt" -f ${opts[@]+"${opts[@]}"} > "$SCRATCH/daemon.log" 2>&1 &
pid=$!
trap 'umount "$SCRATCH/mnt" 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do mountpoint -q "$SCRATCH/mnt" && break; sleep 0.1; done
mountpoint -q "$SCRATCH/mnt" || { cat "$SCRATCH/daemon.log" >&2; exit 1; }
dd if=/dev/urandom of="$SCRATCH/mnt/f" bs=1M count="$FILE_MIB" conv=fsync status=none
line="${1:-defaults}:"
for bs in 64k 1m; do
    sync
    echo 3 > /proc/sys/vm/drop_caches
    line+=" $bs $(fio --name=r --rw=read --bs=$bs --filename="$SCRATCH/mnt/f" --ioengine=psync \
        --output-format=json | python3 -c 'import json,sys; print(round(sum(j["read"]["bw"] for j in json.load(sys.stdin)["jobs"]) / 1024))')"
done
echo "$line"
