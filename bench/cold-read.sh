#!/usr/bin/env bash
# bench/cold-read.sh [MOUNT_OPTIONS] -- one cold sequential read through an f2fuse mount:
# a fresh image (peers.sh setup_f2fuse) mounted with MOUNT_OPTIONS, a 256 MiB file written
# with fsync, then for 64k and 1m: sync, drop every cache, read the file with fio psync.
# Prints one line:  OPTIONS: 64k MiB/s 1m MiB/s
# Meant to be repeated, two option sets interleaved (the disk's speed varies from run to run).
# Root only (FUSE, drop_caches); needs fio and python3. Knobs: F2FUSE (default
# target/release/f2fuse), SCRATCH (default /var/tmp/f2fuse-cold-read), FILE_MIB (default 256).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
F2FUSE=${F2FUSE:-$HERE/../target/release/f2fuse}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-cold-read} FILE_MIB=${FILE_MIB:-256} IMG_SIZE=1G
OUTDIR=$SCRATCH/out
[[ $(id -u) -eq 0 ]] || { echo "bench/cold-read.sh: needs root (FUSE, drop_caches)" >&2; exit 1; }
mkdir -p "$OUTDIR/logs"
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
cleanup_on_exit
setup_f2fuse cold-read "${1:-}"
dd if=/dev/urandom of="$CUR_MNT/f" bs=1M count="$FILE_MIB" conv=fsync status=none
line="${1:-defaults}:"
for bs in 64k 1m; do
    sync
    echo 3 > /proc/sys/vm/drop_caches
    line+=" $bs $(fio --name=r --rw=read --bs=$bs --filename="$CUR_MNT/f" --ioengine=psync \
        --output-format=json | python3 -c 'import json,sys; print(round(sum(j["read"]["bw"] for j in json.load(sys.stdin)["jobs"]) / 1024))')"
done
echo "$line"
