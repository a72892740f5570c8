#!/usr/bin/env bash
# bench/units-profile.sh -- where the daemon spends its time on one W4 row (issue 11's
# 64 KiB / 1 MiB gap): mounts a fresh image, runs the row once to warm up, then again
# under `perf record -g` attached to the daemon, and prints the top of `perf report`.
# Root only; needs perf (apt-get install -y linux-perf).
#
#   ROW=read BS=64k bench/units-profile.sh        ROW: new | overwrite | read | hole
#
# Knobs: F2FUSE (default target/release/f2fuse), SCRATCH=/var/tmp/f2fuse-bench,
# IMG_SIZE=1G, OPTS (mount options), OUT (perf.data path), TOP (lines of the report).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROW=${ROW:-read} BS=${BS:-64k} TOP=${TOP:-45}
F2FUSE=${F2FUSE:-$ROOT/target/release/f2fuse}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench} IMG_SIZE=${IMG_SIZE:-1G}
OUT=${OUT:-$SCRATCH/perf-$ROW-$BS.data}
IMG=$SCRATCH/profile.img MNT=$SCRATCH/mnt-profile
mkdir -p "$SCRATCH" "$MNT"
rm -f "$IMG" && truncate -s "$IMG_SIZE" "$IMG"
"$F2FUSE" mkfs -q "$IMG"
"$F2FUSE" mount "$IMG" "$MNT" -f ${OPTS:+-o "$OPTS"} > "$SCRATCH/profile.log" 2>&1 &
PID=$!
trap 'umount "$MNT" 2> /dev/null || true; wait "$PID" 2> /dev/null || true' EXIT
for _ in $(seq 1 100); do mountpoint -q "$MNT" && break; sleep 0.2; done

w4() {  # w4 RW OVERWRITE FSYNC: the kit's W4 job on $MNT/w4
    (cd "$MNT" && BENCH_DIR=$MNT W_RUNTIME_CAP=60 W4_FILE=w4 W4_FILESIZE=256m W4_BS=$BS \
        W4_RW=$1 W4_OVERWRITE=$2 W4_FSYNC=$3 fio --output-format=terse --terse-version=3 \
        "$HERE/workloads/w4-buffered.fio" | awk -F';' '{printf "%s: %.0f MiB/s read, %.0f MiB/s written\n", "'"$ROW-$BS"'", $7/1024, $48/1024}')
}
prepare() {  # what the row needs before each run (as bench/units.sh)
    case $ROW in
        new) rm -f "$MNT/w4" ;;
        overwrite) [[ -e $MNT/w4 ]] || w4 write 0 1 > /dev/null ;;
        read) [[ -e $MNT/w4 ]] || w4 write 0 1 > /dev/null; sync; echo 3 > /proc/sys/vm/drop_caches ;;
        hole) rm -f "$MNT/w4"; truncate -s 256m "$MNT/w4" ;;
    esac
}
run_row() {
    case $ROW in
        new) w4 write 0 1 ;;
        overwrite) w4 write 1 1 ;;
        read | hole) w4 read 0 0 ;;
    esac
}
prepare && run_row
prepare
perf record -q -g -o "$OUT" -p "$PID" 2> /dev/null &
PERF=$!
sleep 0.5
run_row
kill -INT "$PERF" && wait "$PERF" || true
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
perf report -i "$OUT" --no-children --sort dso,sym -g none --percent-limit 0.7 --stdio 2> /dev/null |
    grep -E '^ +[0-9]' | head -n "$TOP"
