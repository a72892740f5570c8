#!/usr/bin/env bash
# bench/units.sh -- seeds 000 and 003 as f2fuse policy experiments, with the limits in
# the same run. Root only (FUSE mounts, drop_caches, sysfs readahead).
#
#   bench/units.sh                     both parts, ~6 min
#   PARTS=alloc bench/units.sh         seed 000 only: serialized_dio_pages
#   PARTS=folio bench/units.sh         seed 003 only: max_folio_order
#
# alloc: W1a (the shared kit's w1a job: 10 jobs x 2 MiB O_DIRECT writes into fallocated
#   files) and a buffered variant (3 jobs x 32 MiB in 1 MiB writes, one fsync each), on a
#   fresh f2fuse image per value of serialized_dio_pages (ALLOC_VALUES, default 0 64 512),
#   at the default max_folio_order and at 0 (block-at-a-time units, where serialization
#   is all that keeps a request together): MiB/s and extents per file (`f2fuse extents`).
# folio: W4 (the kit's w4 job: buffered psync on one 256 MiB file; cold read, hole read,
#   new write + fsync, overwrite + fsync) at 4k/64k/1m for max_folio_order in FOLIO_VALUES
#   (default 0 2 4 9): MiB/s and the daemon's CPU seconds per GiB moved; and the limits,
#   the lower of which the issue measures against: `null` (crates/fuse/examples/null_fs:
#   FUSE negotiated as f2fuse does, nothing stored) and `raw` (a directory of SCRATCH).
#
# Output: OUTDIR (bench/results/units-DATE)/results.csv (label,workload,metric,value,unit)
# and results.md. Knobs: SCRATCH=/var/tmp/f2fuse-bench, IMG_SIZE=1G, F2FUSE (built when
# unset), NULL_FS (built when unset), ALLOC_VALUES, FOLIO_VALUES, PARTS, and BASELINE=PATH
# (an older f2fuse binary: its W4 rows too, labelled `before`, mounted with defaults).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench/units.sh: needs root (FUSE, drop_caches, sysfs)" >&2; exit 1; }
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench} IMG_SIZE=${IMG_SIZE:-1G} LOOP_DIO=on
OUTDIR=${OUTDIR:-$HERE/results/units-$(date +%Y%m%d-%H%M%S)}
PARTS=${PARTS:-alloc folio}
ALLOC_VALUES=${ALLOC_VALUES:-0 64 512} FOLIO_VALUES=${FOLIO_VALUES:-0 2 4 9}
if [[ -z ${F2FUSE:-} || -z ${NULL_FS:-} ]]; then
    # Two builds: with --example, cargo builds only the examples of the packages named.
    (cd "$ROOT" && cargo build --release -q -p f2fuse && cargo build --release -q -p f2fuse-fuse --example null_fs)
fi
F2FUSE=${F2FUSE:-$ROOT/target/release/f2fuse}
NULL_FS=${NULL_FS:-$ROOT/target/release/examples/null_fs}
mkdir -p "$SCRATCH" "$OUTDIR/logs"
CSV=$OUTDIR/results.csv
echo "label,workload,metric,value,unit" > "$CSV"
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
cleanup_on_exit

emit() { echo "$1,$2,$3,$4,$5" >> "$CSV"; }

# fio_bw DIR FIO_ARGS...: one fio run in DIR, the MiB/s of its reads plus writes.
fio_bw() {
    local dir=$1
    shift
    (cd "$dir" && BENCH_DIR=$dir W_RUNTIME_CAP=120 fio --output-format=json "$@") |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print("%.1f" % (sum(x["read"]["bw"]+x["write"]["bw"] for x in j)/1024))'
}

# cpu_secs: user+system CPU seconds of the daemon CUR_PID so far (0 for raw).
cpu_secs() {
    if [[ -n ${CUR_PID:-} ]]; then
        awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$CUR_PID/stat"
    else
        echo 0
    fi
}

extents_per_file() {  # extents_per_file DIR_IN_MOUNT: space-separated counts
    local f
    for f in "$CUR_MNT"/"$1"/*; do
        "$F2FUSE" extents "$CUR_MNT" "${f#"$CUR_MNT"}" | grep -c '^ *[0-9]*:' || true
    done | tr '\n' ' '
}

alloc_part() {
    local order s label files
    for order in default 0; do
        for s in $ALLOC_VALUES; do
            label="serialized_dio_pages=$s order=$order"
            local opts="serialized_dio_pages=$s"
            [[ $order == default ]] || opts+=",max_folio_order=$order"
            setup_f2fuse "alloc-$s-$order" "$opts" || { teardown_peer; continue; }
            mkdir -p "$CUR_MNT/w1a" "$CUR_MNT/buffered"
            emit "$label" w1a MiBps "$(W1_FILESIZE=48m W1_SIZE=32m W1_JOBS=10 \
                fio_bw "$CUR_MNT/w1a" "$HERE/workloads/w1a-dio-seqwrite.fio")" MiB/s
            files=$(extents_per_file w1a)
            emit "$label" w1a extents_per_file "\"$files\"" list
            emit "$label" w1a extents_max "$(tr ' ' '\n' <<< "$files" | sort -n | tail -1)" count
            emit "$label" buffered3 MiBps "$(fio_bw "$CUR_MNT/buffered" --name=b \
                --ioengine=psync --rw=write --bs=1m --size=32m --numjobs=3 --fallocate=none \
                --end_fsync=1)" MiB/s
            files=$(extents_per_file buffered)
            emit "$label" buffered3 extents_per_file "\"$files\"" list
            emit "$label" buffered3 extents_max "$(tr ' ' '\n' <<< "$files" | sort -n | tail -1)" count
            log "$label: done"
            teardown_peer
        done
    done
}

# w4_rows LABEL: the kit's W4 variants at 4k/64k/1m in CUR_MNT.
w4_rows() {
    local label=$1 bs rw overwrite fsync name c0 mib
    for bs in 4k 64k 1m; do
        for name in new overwrite read hole; do
            case $name in
                new) rm -f "$CUR_MNT/w4"; rw=write overwrite=0 fsync=1 ;;
                overwrite) rw=write overwrite=1 fsync=1 ;;
                read) rw=read overwrite=0 fsync=0; sync; echo 3 > /proc/sys/vm/drop_caches ;;
                hole) rm -f "$CUR_MNT/w4"; truncate -s 256m "$CUR_MNT/w4"; rw=read overwrite=0 fsync=0 ;;
            esac
            c0=$(cpu_secs)
            mib=$(W4_FILE=w4 W4_FILESIZE=256m W4_BS=$bs W4_RW=$rw W4_OVERWRITE=$overwrite \
                W4_FSYNC=$fsync fio_bw "$CUR_MNT" "$HERE/workloads/w4-buffered.fio")
            emit "$label" "w4-$name-$bs" MiBps "$mib" MiB/s
            emit "$label" "w4-$name-$bs" cpu_s_per_GiB "$(awk -v a="$c0" -v b="$(cpu_secs)" 'BEGIN{printf "%.3f", (b-a)*4}')" s/GiB
        done
        rm -f "$CUR_MNT/w4"
    done
}

folio_part() {
    local order current=$F2FUSE
    if [[ -n ${BASELINE:-} ]]; then
        F2FUSE=$BASELINE
        if setup_f2fuse before; then w4_rows before; fi
        teardown_peer
        F2FUSE=$current
    fi
    for order in $FOLIO_VALUES; do
        setup_f2fuse "folio-$order" "max_folio_order=$order" || { teardown_peer; continue; }
        w4_rows "max_folio_order=$order"
        teardown_peer
    done
    if setup_null null; then w4_rows null; fi
    teardown_peer
    CUR_PID=""
    if setup_raw raw; then w4_rows raw; fi
    teardown_peer
}

{
    echo "host: $(uname -srvm); $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "f2fuse: $F2FUSE ($("$F2FUSE" --version), commit $(git -C "$ROOT" rev-parse --short HEAD))"
    echo "parts: $PARTS; serialized_dio_pages: $ALLOC_VALUES; max_folio_order: $FOLIO_VALUES"
} > "$OUTDIR/env.txt"
for part in $PARTS; do "${part}_part"; done
# One table: a row per workload and metric, a column per label.
python3 - "$CSV" > "$OUTDIR/results.md" << 'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
labels = list(dict.fromkeys(r["label"] for r in rows))
keys = list(dict.fromkeys((r["workload"], r["metric"]) for r in rows))
cell = {(r["label"], r["workload"], r["metric"]): r["value"].strip('"') for r in rows}
print("| workload | metric | " + " | ".join(labels) + " |")
print("|---|---|" + "---|" * len(labels))
for w, m in keys:
    print(f"| {w} | {m} | " + " | ".join(cell.get((l, w, m), "") for l in labels) + " |")
PY
log "results in $OUTDIR"
