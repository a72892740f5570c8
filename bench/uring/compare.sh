#!/usr/bin/env bash
# The FUSE transport alone: the null file system of nullfs_ring.c served by
# the classic read/writev loop and by FUSE over io_uring, mounted in turn
# (the order alternates by round), the same jobs on each: the kit's W4
# buffered writes and cold reads at 4k/64k/1m, 4 KiB O_DIRECT random reads
# (one request per read: the request rate) with 1 and 4 jobs, and a
# create/unlink loop. Needs root, gcc, liburing-dev, fio; sets the fuse
# module's enable_uring to Y for the run and restores it.
#
#   bench/uring/compare.sh [ROUNDS]
# env: OUT (default /tmp/uring-compare); FILES, creates per round (20000);
#   MODES, the daemons compared as NAME=FLAGS words (FLAGS comma-separated),
#     the first the baseline (default "classic= ring=--ring");
#   JOBS, which job groups run: w4 dio creates (default all three);
#   W4_SIZE, the W4 file (default 1g: the kit's 256m passes in a fraction of
#     a second at these rates, too short to time on a busy machine).
# Writes $OUT/results.tsv (round mode job value unit) and prints medians.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W4_JOB=$HERE/../workloads/w4-buffered.fio
ROUNDS=${1:-3}
OUT=${OUT:-/tmp/uring-compare}
FILES=${FILES:-20000}
MODES=${MODES:-classic= ring=--ring}
JOBS=${JOBS:-w4 dio creates}
W4_SIZE=${W4_SIZE:-1g}
MNT=$OUT/mnt
RESULTS=$OUT/results.tsv
PARAM=/sys/module/fuse/parameters/enable_uring

mkdir -p "$MNT"
gcc -O2 -Wall -o "$OUT/nullfs_ring" "$HERE/nullfs_ring.c" -luring -lpthread
gcc -O2 -Wall -o "$OUT/create_files" "$HERE/create_files.c"
old_param=$(cat "$PARAM")
DAEMON=
cleanup() {
    if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
    [[ -n $DAEMON ]] && wait "$DAEMON" 2>/dev/null || true
    echo "$old_param" > "$PARAM"
}
trap cleanup EXIT
echo Y > "$PARAM"
: > "$RESULTS"

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log"; }
emit() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RESULTS"; }

fio_mib() {
    (cd "$MNT" && BENCH_DIR=$MNT W_RUNTIME_CAP=60 fio --output-format=json "$@") |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print("%.1f" % (sum(x["read"]["bw"]+x["write"]["bw"] for x in j)/1024))'
}

fio_iops() {
    (cd "$MNT" && fio --output-format=json "$@") |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print("%.0f" % sum(x["read"]["iops"]+x["write"]["iops"] for x in j))'
}

daemon_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$DAEMON/stat"; }

# cpu_per_gib C0: the daemon's CPU seconds since C0, per GiB of the W4 file.
cpu_per_gib() {
    awk -v a="$1" -v b="$(daemon_cpu)" -v size="$(numfmt --from=iec "${W4_SIZE^^}")" \
        'BEGIN{printf "%.3f", (b-a)*1073741824/size}'
}

serve() {
    local flags=${1#*=}
    "$OUT/nullfs_ring" "$MNT" ${flags//,/ } 2>> "$OUT/daemon.log" &
    DAEMON=$!
    for _ in $(seq 100); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
    echo "the $mode daemon did not mount" >&2
    return 1
}

unserve() {
    umount "$MNT"
    wait "$DAEMON"
    DAEMON=
}

jobs_on() {
    local round=$1 mode=$2 bs mib c0
    [[ " $JOBS " == *" w4 "* ]] && for bs in 4k 64k 1m; do
        rm -f "$MNT/w4"
        c0=$(daemon_cpu)
        mib=$(W4_FILE=w4 W4_FILESIZE=$W4_SIZE W4_BS=$bs W4_RW=write W4_OVERWRITE=0 W4_FSYNC=1 fio_mib "$W4_JOB")
        emit "$round" "$mode" "w4-new-$bs" "$mib" MiB/s
        emit "$round" "$mode" "w4-new-$bs-cpu" "$(cpu_per_gib "$c0")" daemon_s/GiB
        sync
        echo 3 > /proc/sys/vm/drop_caches
        c0=$(daemon_cpu)
        mib=$(W4_FILE=w4 W4_FILESIZE=$W4_SIZE W4_BS=$bs W4_RW=read W4_OVERWRITE=0 W4_FSYNC=0 fio_mib "$W4_JOB")
        emit "$round" "$mode" "w4-read-$bs" "$mib" MiB/s
        emit "$round" "$mode" "w4-read-$bs-cpu" "$(cpu_per_gib "$c0")" daemon_s/GiB
    done
    rm -f "$MNT/w4"
    [[ " $JOBS " == *" dio "* ]] && for jobs in 1 4; do
        truncate -s 256m "$MNT/dio"
        emit "$round" "$mode" "dio-randread-4k-j$jobs" "$(fio_iops --name=dio --directory="$MNT" \
            --filename=dio --size=256m --bs=4k --rw=randread --direct=1 --ioengine=psync \
            --runtime=5 --time_based --numjobs=$jobs --group_reporting)" IOPS
    done
    rm -f "$MNT/dio"
    [[ " $JOBS " == *" creates "* ]] || return 0
    read -r creates unlinks < <("$OUT/create_files" "$MNT" "$FILES")
    emit "$round" "$mode" creates "$creates" files/s
    emit "$round" "$mode" unlinks "$unlinks" files/s
}

for round in $(seq "$ROUNDS"); do
    order=$MODES
    (( round % 2 == 0 )) && order=$(tr ' ' '\n' <<< "$MODES" | tac | tr '\n' ' ')
    for mode in $order; do
        log "round $round ${mode%%=*}: load $(cut -d' ' -f1-3 /proc/loadavg)"
        serve "$mode"
        jobs_on "$round" "${mode%%=*}"
        unserve
        tail -1 "$OUT/daemon.log" | tee -a "$OUT/log"
    done
done
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" ${MODES} <<'PY'
import collections, statistics, sys
modes = [m.split("=")[0] for m in sys.argv[2:]]
runs = collections.defaultdict(list)
units, order = {}, []
for line in open(sys.argv[1]):
    rnd, mode, job, value, unit = line.rstrip("\n").split("\t")
    runs[(job, mode)].append(float(value))
    units[job] = unit
    if job not in order:
        order.append(job)
base = modes[0]
cell = lambda v: "%g (%g-%g)" % (statistics.median(v), min(v), max(v))
print("| job | unit | " + " | ".join("%s (median, min-max)" % m for m in modes)
      + "".join(" | %s / %s" % (m, base) for m in modes[1:]) + " |")
print("|---" * (2 + 2 * len(modes) - 1) + "|")
for job in order:
    b = statistics.median(runs[(job, base)])
    ratios = ["%.2f" % (statistics.median(runs[(job, m)]) / b if b else float("nan")) for m in modes[1:]]
    print("| %s | %s | " % (job, units[job]) + " | ".join(cell(runs[(job, m)]) for m in modes)
          + "".join(" | " + r for r in ratios) + " |")
PY
