#!/usr/bin/env bash
# bench/units-ab.sh -- issue 11's 64 KiB / 1 MiB W4 rows for two f2fuse binaries and
# the limits (null FUSE, raw directory), interleaved round by round so that a
# loaded machine's drift hits every column alike. Root only.
#
#   A=old/f2fuse B=target/release/f2fuse bench/units-ab.sh
#
# Each round, for each of A, B, null and raw: a fresh image (or directory), the W4
# file written once (256 MiB), then every row of ROWS on it. Prints MiB/s per round
# and the medians, with the load average. Knobs: A, B, NULL_FS, ROUNDS=5,
# ROWS="read-64k overwrite-64k read-1m overwrite-1m", OPTS (mount options of A and B),
# SCRATCH=/var/tmp/f2fuse-bench, IMG_SIZE=1G, OUTDIR.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench/units-ab.sh: needs root" >&2; exit 1; }
: "${A:?A=path of the first f2fuse binary}" "${B:=$ROOT/target/release/f2fuse}"
NULL_FS=${NULL_FS:-$ROOT/target/release/examples/null_fs}
ROUNDS=${ROUNDS:-5} ROWS=${ROWS:-read-64k overwrite-64k read-1m overwrite-1m}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench} IMG_SIZE=${IMG_SIZE:-1G} LOOP_DIO=on
OUTDIR=${OUTDIR:-$HERE/results/units-ab-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$SCRATCH" "$OUTDIR/logs"
CSV=$OUTDIR/results.csv
echo "round,peer,row,MiBps,load1" > "$CSV"
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
cleanup_on_exit

w4() {  # w4 BS RW OVERWRITE FSYNC: MiB/s of the kit's W4 job on $CUR_MNT/w4
    (cd "$CUR_MNT" && BENCH_DIR=$CUR_MNT W_RUNTIME_CAP=60 W4_FILE=w4 W4_FILESIZE=256m W4_BS=$1 \
        W4_RW=$2 W4_OVERWRITE=$3 W4_FSYNC=$4 fio --output-format=json "$HERE/workloads/w4-buffered.fio") |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print("%.1f" % (sum(x["read"]["bw"]+x["write"]["bw"] for x in j)/1024))'
}

rows() {  # rows ROUND PEER: every row of ROWS on the mounted peer
    local row bs mib
    w4 1m write 0 1 > /dev/null
    for row in $ROWS; do
        bs=${row#*-}
        case ${row%-*} in
            read) sync; echo 3 > /proc/sys/vm/drop_caches; mib=$(w4 "$bs" read 0 0) ;;
            overwrite) mib=$(w4 "$bs" write 1 1) ;;
            *) echo "unknown row $row" >&2; exit 2 ;;
        esac
        echo "$1,$2,$row,$mib,$(cut -d' ' -f1 /proc/loadavg)" >> "$CSV"
    done
}

for round in $(seq 1 "$ROUNDS"); do
    for peer in A B null raw; do
        case $peer in
            A | B) F2FUSE=${!peer}; setup_f2fuse "ab-$peer" "${OPTS:-}" || { teardown_peer; continue; } ;;
            null) CUR_MNT=$SCRATCH/mnt-null && mkdir -p "$CUR_MNT" &&
                { "$NULL_FS" "$CUR_MNT" > "$OUTDIR/logs/null.log" 2>&1 & CUR_PID=$!; } &&
                wait_mounted null_fs "$OUTDIR/logs/null.log" ;;
            raw) CUR_PID="" && setup_raw raw ;;
        esac
        rows "$round" "$peer"
        teardown_peer
    done
    log "round $round done"
done
python3 - "$CSV" << 'PY' | tee "$OUTDIR/results.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
peers = ["A", "B", "null", "raw"]
names = list(dict.fromkeys(r["row"] for r in rows))
med = {(p, n): statistics.median(float(r["MiBps"]) for r in rows if r["peer"] == p and r["row"] == n)
       for p in peers for n in names if any(r["peer"] == p and r["row"] == n for r in rows)}
loads = [float(r["load1"]) for r in rows]
print(f"rounds: {max(int(r['round']) for r in rows)}; load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
print("| W4 row | A | B | null | raw | A / min | B / min | B / A |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for n in names:
    a, b, nu, raw = (med.get((p, n), float("nan")) for p in peers)
    lim = min(nu, raw)
    print(f"| {n} | {a:.0f} | {b:.0f} | {nu:.0f} | {raw:.0f} | {a/lim:.2f} | {b/lim:.2f} | {b/a:.2f} |")
PY
