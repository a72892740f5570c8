#!/usr/bin/env bash
# Buffered writes against the write-back limits of a FUSE mount's backing
# device: the kit's W4 new-file writes (64k and 1m, with and without the
# closing fsync) on f2fuse and on the null file system (nullfs_ring.c,
# classic transport), under FUSE's defaults (max_ratio 1, strict_limit 1)
# and under raised limits, set through /sys/class/bdi/MAJOR:MINOR after
# mounting (what f2fuse's -o max_ratio=,max_bytes=,strict_limit= do at
# mount). The settings alternate within each round; the daemon's CPU per
# GiB written is recorded with each row. Needs root, fio, gcc,
# liburing-dev, f2fs-tools and a release f2fuse.
#
#   bench/uring/dirty_limits.sh [ROUNDS]
# env: F2FUSE (default target/release/f2fuse of this tree); OUT (default
#   /tmp/dirty-limits); W4_SIZE (default 1g); SETTINGS, NAME=ATTR:VALUE,...
#   words (default below); DAEMONS, which of f2fuse null run (both).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W4_JOB=$HERE/../workloads/w4-buffered.fio
ROUNDS=${1:-3}
F2FUSE=${F2FUSE:-$HERE/../../target/release/f2fuse}
OUT=${OUT:-/tmp/dirty-limits}
W4_SIZE=${W4_SIZE:-1g}
SETTINGS=${SETTINGS:-default= ratio10=max_ratio:10 ratio100=max_ratio:100 \
nostrict=strict_limit:0 nostrict100=strict_limit:0,max_ratio:100}
DAEMONS=${DAEMONS:-f2fuse null}
MNT=$OUT/mnt
IMG=$OUT/f2fs.img
RESULTS=$OUT/results.tsv

mkdir -p "$MNT"
gcc -O2 -Wall -o "$OUT/nullfs_ring" "$HERE/nullfs_ring.c" -luring -lpthread
cleanup() { if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi; }
trap cleanup EXIT
: > "$RESULTS"
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log"; }

mount_daemon() {
    case $1 in
        f2fuse)
            rm -f "$IMG"
            truncate -s 16g "$IMG"  # room for every job's 1 GiB without cleaning
            mkfs.f2fs -q -f "$IMG" > /dev/null
            "$F2FUSE" mount "$IMG" "$MNT"
            DAEMON=$(fuser "$IMG" 2> /dev/null | awk '{print $1}') ;;
        null)
            "$OUT/nullfs_ring" "$MNT" 2>> "$OUT/daemon.log" &
            DAEMON=$!
            for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done ;;
    esac
}

daemon_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$DAEMON/stat"; }

unmount_daemon() {
    umount "$MNT"
    # f2fuse writes its last checkpoint after the unmount returns.
    while [[ $1 == f2fuse ]] && fuser -s "$IMG" 2> /dev/null; do sleep 0.1; done
}

set_limits() {
    local bdi=/sys/class/bdi/$(mountpoint -d "$MNT") pair
    for pair in ${1//,/ }; do
        [[ -n $pair ]] && echo "${pair#*:}" > "$bdi/${pair%%:*}"
    done
    echo "max_ratio=$(cat "$bdi/max_ratio") max_bytes=$(cat "$bdi/max_bytes") strict_limit=$(cat "$bdi/strict_limit")"
}

w4_write() {
    (cd "$MNT" && BENCH_DIR=$MNT W_RUNTIME_CAP=120 W4_FILE=w4 W4_FILESIZE=$W4_SIZE W4_BS=$1 \
        W4_RW=write W4_OVERWRITE=0 W4_FSYNC=$2 fio --output-format=json "$W4_JOB") |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print("%.1f" % (sum(x["write"]["bw"] for x in j)/1024))'
}

for round in $(seq "$ROUNDS"); do
    for daemon in $DAEMONS; do
        order=$SETTINGS
        (( round % 2 == 0 )) && order=$(tr ' ' '\n' <<< "$SETTINGS" | tac | tr '\n' ' ')
        for setting in $order; do
            name=${setting%%=*}
            mount_daemon "$daemon"
            log "round $round $daemon $name ($(set_limits "${setting#*=}")): load $(cut -d' ' -f1-3 /proc/loadavg)"
            for bs in 64k 1m; do
                for fsync in 0 1; do
                    rm -f "$MNT/w4"
                    sync
                    c0=$(daemon_cpu)
                    mib=$(w4_write "$bs" "$fsync")
                    # The daemon's CPU per GiB, with what write-back left after fio.
                    sync
                    cpu=$(awk -v a="$c0" -v b="$(daemon_cpu)" -v size="$(numfmt --from=iec "${W4_SIZE^^}")" \
                        'BEGIN{printf "%.3f", (b-a)*1073741824/size}')
                    printf '%s\t%s\t%s\tw4-new-%s-fsync%s\t%s\t%s\n' "$round" "$daemon" "$name" "$bs" \
                        "$fsync" "$mib" "$cpu" >> "$RESULTS"
                done
            done
            rm -f "$MNT/w4"
            unmount_daemon "$daemon"
        done
    done
done
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" $SETTINGS <<'PY'
import collections, statistics, sys
settings = [s.split("=")[0] for s in sys.argv[2:]]
runs, keys = collections.defaultdict(list), []
for line in open(sys.argv[1]):
    rnd, daemon, setting, job, mib, cpu = line.rstrip("\n").split("\t")
    runs[(daemon, job, setting)].append(float(mib))
    runs[(daemon, job + " daemon s/GiB", setting)].append(float(cpu))
    for key in [(daemon, job), (daemon, job + " daemon s/GiB")]:
        if key not in keys:
            keys.append(key)
print("MiB/s (daemon CPU s/GiB), median (min-max) of the rounds")
print("| daemon | job | " + " | ".join(settings) + " |")
print("|---" * (2 + len(settings)) + "|")
for daemon, job in keys:
    cells = []
    for s in settings:
        v = runs[(daemon, job, s)]
        cells.append("%g (%g-%g)" % (statistics.median(v), min(v), max(v)) if v else "-")
    print("| %s | %s | %s |" % (daemon, job, " | ".join(cells)))
PY
