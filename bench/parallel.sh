#!/usr/bin/env bash
# bench/parallel.sh -- parallel I/O scaling (seed 002): 1, 2, 4, 8 threads on two shared
# files (random 4 KiB reads; random 4 KiB writes to disjoint ranges; overlapping random
# 4 KiB writes) and file creates in one directory per thread. Two parts:
#   engine  crates/engine/examples/parallel_io: the engine's own scaling, no FUSE
#           (any user; the image is a tmpfs file unless ENGINE_ARGS says otherwise)
#   mount   fio on `f2fuse mount` (direct=1, so every request reaches the daemon) and,
#           as the kernel's reference, on ext4 on a loop device (root, FUSE)
# Several builds can be measured in one run (before/after a change). Builds take turns so
# that a drift of the machine's speed hits them alike: engine points alternate point by
# point; in the mount part every peer gets a fresh image per workload (thread counts
# 1, 2, 4, 8 then run on it in that order, after the two shared files are written once),
# and the peers alternate workload by workload. After each workload the f2fuse image is
# checked with `f2fuse fsck`.
#
#   bench/parallel.sh                               both parts, this checkout's release build
#   BUILDS="before=/work/wt-before/target/release after=target/release" bench/parallel.sh
#   PARTS=engine bench/parallel.sh                  library level only
#   bench/parallel.sh --help
#
# A build is LABEL=DIR, DIR a cargo release directory holding `f2fuse` and
# `examples/parallel_io`. Without BUILDS, this checkout's target/release is built
# (cargo build --release -p f2fuse; -p f2fuse-engine --example parallel_io).
#
# Output in OUTDIR: engine.csv and mount.csv (label,workload,threads,seconds,ops,
# ops_per_s,mib_per_s,ops_per_s_per_thread,speedup_vs_1,checkpoints,gc_runs,check),
# results.md (ops/s per thread count, speed-up over 1 thread, ratio of the last build
# to the first), env.txt, logs/, raw/ (fio JSON). Exit status 1 if a point failed
# (an operation failed, data read back wrong, or fsck found the f2fuse image damaged).
#
# Knobs (environment):
#   BUILDS="LABEL=DIR ..."          default: current=<repo>/target/release
#   PARTS="engine mount"            WORKLOADS="randread disjoint overlap creates"
#   THREADS="1 2 4 8"               SECONDS_PER_POINT=3
#   RAMP_SECONDS=1                  fio runs this long before it starts counting (mount part)
#   OPS=                            fixed work instead of time: operations per thread (engine:
#                                   --ops; fio: io_size = OPS blocks, creates: OPS files per
#                                   job), so that timing the whole script measures the work
#   ROUNDS=1                        repeat everything; results.md shows the median and spread
#   ENGINE_ARGS=                    extra parallel_io options (e.g. --memory, --image PATH)
#   KERNEL_PEERS=ext4               kernel file systems for the mount part ("" for none)
#   SCRATCH=/var/tmp/f2fuse-parallel  IMG_SIZE=2G  LOOP_DIO=on
#   F2FUSE_OPTS=                    extra `-o` options for every f2fuse mount (e.g. threads=8)
#   FILE_SIZE=64m (each shared file)  BS=4k  CREATE_SIZE=4k
#   CREATE_FILES=80000              most files one creates point makes (all jobs together)
#   OUTDIR=bench/results/parallel-DATE   NO_INSTALL=1 (do not apt-get install fio)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
# log, the peers (setup_f2fuse, setup_ext4, unmount_peer, teardown_peer), cleanup
# shellcheck source-path=SCRIPTDIR source=peers.sh
source "$HERE/peers.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "bench/parallel.sh: $*" >&2; exit 1; }

case ${1:-} in
    -h|--help) usage; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (see --help; everything is set through the environment)" ;;
esac

PARTS=${PARTS:-"engine mount"}
WORKLOADS=${WORKLOADS:-"randread disjoint overlap creates"}
THREADS=${THREADS:-"1 2 4 8"}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-3}
RAMP_SECONDS=${RAMP_SECONDS:-1}
OPS=${OPS:-}
ROUNDS=${ROUNDS:-1}
ENGINE_ARGS=${ENGINE_ARGS:-}
KERNEL_PEERS=${KERNEL_PEERS-ext4}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-parallel}
IMG_SIZE=${IMG_SIZE:-2G}
LOOP_DIO=${LOOP_DIO:-on}
F2FUSE_OPTS=${F2FUSE_OPTS:-}
F2FUSE_MKFS=f2fuse  # not a knob here: images are always made by the build's own `f2fuse mkfs`
FILE_SIZE=${FILE_SIZE:-64m}
BS=${BS:-4k}
CREATE_SIZE=${CREATE_SIZE:-4k}
CREATE_FILES=${CREATE_FILES:-80000}
OUTDIR=${OUTDIR:-$HERE/results/parallel-$(date +%Y%m%d-%H%M%S)}

for w in $WORKLOADS; do
    case $w in randread|disjoint|overlap|creates) ;; *) die "unknown workload '$w'" ;; esac
done
for p in $PARTS; do
    case $p in engine|mount) ;; *) die "unknown part '$p' (engine mount)" ;; esac
done
for p in $KERNEL_PEERS; do
    case $p in ext4) ;; *) die "unknown kernel peer '$p' (ext4)" ;; esac
done

bytes() {  # bytes SIZE: 64m -> 67108864 (k, m, g: powers of 1024)
    local n=${1%[kKmMgG]} shift=0
    case $1 in *[kK]) shift=10 ;; *[mM]) shift=20 ;; *[gG]) shift=30 ;; esac
    [[ $n =~ ^[0-9]+$ ]] || die "bad size '$1'"
    echo $((n << shift))
}
FILE_BYTES=$(bytes "$FILE_SIZE")
BS_BYTES=$(bytes "$BS")
for n in $THREADS; do
    ((FILE_BYTES % (n * BS_BYTES) == 0)) || die "FILE_SIZE must split into $n equal ranges of whole BS blocks"
done

# ---- builds ----
BUILD_LABELS=() BUILD_DIRS=()
if [[ -z ${BUILDS:-} ]]; then
    log "building $REPO/target/release (f2fuse, parallel_io example)"
    (cd "$REPO" && cargo build --release -p f2fuse && cargo build --release -p f2fuse-engine --example parallel_io) ||
        die "cargo build failed (set BUILDS=LABEL=DIR to use prebuilt binaries)"
    BUILDS="current=$REPO/target/release"
fi
for b in $BUILDS; do
    [[ $b == ?*=?* ]] || die "BUILDS entry '$b' is not LABEL=DIR"
    dir=${b#*=}
    [[ -d $dir ]] || die "build directory $dir does not exist"
    dir=$(cd "$dir" && pwd)
    for p in $PARTS; do
        case $p in
            engine) [[ -x $dir/examples/parallel_io ]] || die "$dir/examples/parallel_io is missing (cargo build --release -p f2fuse-engine --example parallel_io)" ;;
            mount) [[ -x $dir/f2fuse ]] || die "$dir/f2fuse is missing (cargo build --release -p f2fuse)" ;;
        esac
    done
    BUILD_LABELS+=("${b%%=*}") BUILD_DIRS+=("$dir")
done

# ---- preconditions of the mount part ----
if [[ " $PARTS " == *" mount "* ]]; then
    [[ $EUID -eq 0 ]] || die "the mount part needs root (loop devices, mount); PARTS=engine runs without"
    [[ -c /dev/fuse ]] || die "/dev/fuse is missing: no FUSE on this machine"
    if ! command -v fio > /dev/null; then
        [[ ${NO_INSTALL:-0} == 1 ]] && die "fio is missing (NO_INSTALL=1)"
        log "installing fio"
        apt-get install -y -q fio > /dev/null ||
            { apt-get update -q > /dev/null && apt-get install -y -q fio > /dev/null; } || die "apt-get install fio failed"
    fi
    command -v python3 > /dev/null || die "python3 is needed to read fio's JSON"
    if [[ -n $KERNEL_PEERS ]]; then command -v mkfs.ext4 > /dev/null || die "mkfs.ext4 is missing (e2fsprogs)"; fi
fi

mkdir -p "$OUTDIR/logs" "$OUTDIR/raw"
OUTDIR=$(cd "$OUTDIR" && pwd)
CSV_HEADER="label,workload,threads,seconds,ops,ops_per_s,mib_per_s,ops_per_s_per_thread,speedup_vs_1,checkpoints,gc_runs,check"
FAILED=0

# ---- environment record ----
{
    echo "date: $(date -Is)"
    echo "host: $(uname -srvm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in "${!BUILD_LABELS[@]}"; do
        commit=$(git -C "${BUILD_DIRS[$i]}" rev-parse --short HEAD 2> /dev/null || echo ?)
        dirty=$(git -C "${BUILD_DIRS[$i]}" status --porcelain --untracked-files=no 2> /dev/null | wc -l) || dirty='?'
        echo "build ${BUILD_LABELS[$i]}: ${BUILD_DIRS[$i]} (commit $commit, $dirty files changed)"
    done
    echo "parts: $PARTS; workloads: $WORKLOADS; threads: $THREADS; per point: ${OPS:+$OPS ops per thread}${OPS:-${SECONDS_PER_POINT}s (fio: after ${RAMP_SECONDS}s ramp)}; rounds: $ROUNDS"
    echo "shared files: 2 x $FILE_SIZE, bs $BS; creates: $CREATE_SIZE files, at most $CREATE_FILES per point"
    echo "engine: parallel_io $ENGINE_ARGS"
    if [[ " $PARTS " == *" mount "* ]]; then
        echo "mount: image $IMG_SIZE in $SCRATCH ($(df --output=source,fstype "$(dirname "$SCRATCH")" | tail -1 | xargs)); f2fuse opts: ${F2FUSE_OPTS:-default}; kernel peers: ${KERNEL_PEERS:-none} (loop direct-io=$LOOP_DIO); $(fio --version)"
    fi
} > "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt" >&2

# ---- engine part ----
# One parallel_io call per (workload, threads, build), builds alternating, so that a
# drift of the machine's speed hits every build alike.
engine_part() {
    local csv=$OUTDIR/engine.csv round w n i duty label row
    local -A one_thread=()
    [[ -f $csv ]] || echo "$CSV_HEADER" > "$csv"
    if [[ -n $OPS ]]; then duty=(--ops "$OPS"); else duty=(--seconds "$SECONDS_PER_POINT"); fi
    for round in $(seq 1 "$ROUNDS"); do
        for w in $WORKLOADS; do
            for n in $THREADS; do
                for i in "${!BUILD_LABELS[@]}"; do
                    label=${BUILD_LABELS[$i]}
                    log "engine round $round: $label $w x$n"
                    # shellcheck disable=SC2086  # ENGINE_ARGS is a list of options
                    row=$("${BUILD_DIRS[$i]}/examples/parallel_io" --workloads "$w" --threads "$n" "${duty[@]}" \
                        --file-size "$FILE_SIZE" --bs "$BS" --create-size "$CREATE_SIZE" \
                        --label "$label" --no-header $ENGINE_ARGS 2>> "$OUTDIR/logs/engine.log") || FAILED=1
                    [[ -n $row ]] || row="$label,$w,$n,,,,,,,,,FAIL"
                    # One point per call: speedup_vs_1 comes from this label's last 1-thread point.
                    if [[ $n == 1 ]]; then one_thread["$label/$w"]=$(cut -d, -f6 <<< "$row"); fi
                    awk -F, -v OFS=, -v one="${one_thread["$label/$w"]:-}" \
                        '{ if (one > 0 && $6 != "") $9 = sprintf("%.2f", $6 / one) } 1' <<< "$row" >> "$csv"
                done
            done
        done
    done
}

# ---- mount part: peers ----
# Set up and torn down by bench/peers.sh, as in run.sh (same mkfs options, loop
# devices, wait for the daemon, teardown order); setup_f2fuse mounts with $F2FUSE.
cleanup_on_exit

# ---- mount part: fio points ----
# fio_args WORKLOAD JOBS: sets FIO_ARGS to the job of one point on the files in $WORK.
# In the shared-file workloads every job opens both files and picks one at random per
# I/O (file_service_type=random): two jobs already share a file, as the engine part's
# threads do.
FIO_ARGS=()
fio_args() {
    local w=$1 n=$2
    FIO_ARGS=(--name="$w" --ioengine=psync --numjobs="$n" --group_reporting --output-format=json)
    if [[ $w == creates ]]; then
        # job k creates $WORK/creates/jK/f0, f1, ... one at a time: open(O_CREAT), one
        # buffered write of CREATE_SIZE, close. It ends after SECONDS_PER_POINT or once
        # its share of CREATE_FILES (with OPS: OPS files) is made.
        # shellcheck disable=SC2016  # $jobnum and $filenum are fio's, not the shell's
        FIO_ARGS+=(--directory="$WORK/creates" --filename_format='j$jobnum/f$filenum'
            --nrfiles="${OPS:-$((CREATE_FILES / n))}" --filesize="$CREATE_SIZE" --bs="$CREATE_SIZE"
            --rw=write --create_on_open=1 --openfiles=1 --file_service_type=sequential
            --fallocate=none --direct=0)
        if [[ -z $OPS ]]; then FIO_ARGS+=(--runtime="$SECONDS_PER_POINT" --ramp_time="$RAMP_SECONDS"); fi
        return 0
    fi
    FIO_ARGS+=(--directory="$WORK" --filename=shared0:shared1 --file_service_type=random
        --allow_file_create=0 --direct=1 --bs="$BS_BYTES" --norandommap --randrepeat=1)
    if [[ -n $OPS ]]; then
        FIO_ARGS+=(--io_size=$((OPS * BS_BYTES)))  # per job, however small its range
    else
        FIO_ARGS+=(--time_based --runtime="$SECONDS_PER_POINT" --ramp_time="$RAMP_SECONDS")
    fi
    case $w in
        randread) FIO_ARGS+=(--rw=randread --size=$((2 * FILE_BYTES))) ;;
        overlap) FIO_ARGS+=(--rw=randwrite --size=$((2 * FILE_BYTES))) ;;
        disjoint)
            # job k writes [k*F/n, (k+1)*F/n) of each file: fio splits size over the two
            # files and starts each at offset_increment times the job number
            FIO_ARGS+=(--rw=randwrite --size=$((2 * FILE_BYTES / n)) --offset_increment=$((FILE_BYTES / n))) ;;
    esac
}

declare -A ONE_THREAD_RATE=()  # workload -> 1-thread ops/s of the peer being measured
fio_point() {  # fio_point LABEL WORKLOAD JOBS CSV
    local label=$1 w=$2 n=$3 csv=$4 raw metrics rate secs mib err ops speedup="" check=ok
    raw=$OUTDIR/raw/$label.$w.$n.r$ROUND.json
    fio_args "$w" "$n"
    if [[ $w == creates ]]; then mkdir -p "$WORK/creates"; fi
    if ! fio "${FIO_ARGS[@]}" --output="$raw" 2>> "$OUTDIR/logs/$label.fio.log"; then
        log "$label $w x$n: fio failed ($(tail -c 300 "$OUTDIR/logs/$label.fio.log" | tr '\n' ' '))"
        echo "$label,$w,$n,,,,,,,,,FAIL" >> "$csv"
        FAILED=1
        return 0
    fi
    metrics=$(python3 "$HERE/lib/fiojson.py" "$raw")
    metric() { awk -F, -v m="$1" '$1 == m { print $2 }' <<< "$metrics"; }
    secs=$(metric runtime_s) mib=$(metric total_MiBps) err=$(metric fio_error)
    if [[ $w == randread ]]; then rate=$(metric read_iops); else rate=$(metric write_iops); fi
    if [[ ${err:-1} != 0 || -z $rate ]]; then check=FAIL FAILED=1; fi
    ops=$(awk -v r="${rate:-0}" -v s="${secs:-0}" 'BEGIN { printf "%.0f", r * s }')
    if [[ $n == 1 ]]; then ONE_THREAD_RATE[$w]=$rate; fi
    if [[ -n ${ONE_THREAD_RATE[$w]:-} ]]; then
        speedup=$(awk -v r="${rate:-0}" -v o="${ONE_THREAD_RATE[$w]}" 'BEGIN { if (o > 0) printf "%.2f", r / o }')
    fi
    awk -v l="$label" -v w="$w" -v n="$n" -v s="${secs:-0}" -v o="$ops" -v r="${rate:-0}" -v m="${mib:-0}" \
        -v x="$speedup" -v c="$check" \
        'BEGIN { printf "%s,%s,%d,%.3f,%d,%.0f,%.1f,%.0f,%s,,,%s\n", l, w, n, s, o, r, m, r / n, x, c }' >> "$csv"
}

run_workload() {  # run_workload LABEL WORKLOAD: every thread count on the mounted peer
    local label=$1 w=$2 csv=$OUTDIR/mount.csv n f
    WORK=$CUR_MNT/parallel
    ONE_THREAD_RATE=()
    mkdir -p "$WORK"
    if [[ $w != creates ]]; then
        for f in shared0 shared1; do
            fio --name=layout --filename="$WORK/$f" --size="$FILE_BYTES" --rw=write --bs=1m --direct=1 \
                --end_fsync=1 --output=/dev/null 2>> "$OUTDIR/logs/$label.fio.log" ||
                { log "$label: laying out $f failed"; return 1; }
        done
    fi
    for n in $THREADS; do
        log "mount round $ROUND: $label $w x$n"
        fio_point "$label" "$w" "$n" "$csv"
        if [[ $w == creates ]]; then rm -rf "$WORK/creates"; fi
    done
}

check_row() {  # check_row LABEL WHAT RESULT: a mount.csv row for a setup or an fsck (WHAT:
    # setup:WORKLOAD, fsck:WORKLOAD; RESULT ok or FAIL, which fails the run)
    echo "$1,$2,,,,,,,,,,$3" >> "$OUTDIR/mount.csv"
    if [[ $3 != ok ]]; then FAILED=1; fi
}

peer_workload() {  # peer_workload LABEL PEER WORKLOAD [F2FUSE_BINARY]: a fresh PEER (f2fuse:
    # of that build), every thread count of WORKLOAD on it, for f2fuse an fsck, teardown
    local label=$1 peer=$2 w=$3 ok=1
    if [[ $peer == f2fuse ]]; then
        F2FUSE=$4
        setup_f2fuse "$label" || ok=0
    else
        "setup_$peer" "$label" >> "$OUTDIR/logs/$label.setup.log" 2>&1 || ok=0
    fi
    if [[ $ok == 0 ]]; then
        check_row "$label" "setup:$w" FAIL
        teardown_peer
        return 0
    fi
    run_workload "$label" "$w" || check_row "$label" "setup:$w" FAIL
    if [[ $peer == f2fuse ]]; then
        # Is the image consistent after the concurrent writers?
        unmount_peer
        if "$F2FUSE" fsck "$CUR_IMG" > "$OUTDIR/logs/$label.fsck.$w.r$ROUND.log" 2>&1; then
            check_row "$label" "fsck:$w" ok
        else
            log "$label: fsck found errors after $w (logs/$label.fsck.$w.r$ROUND.log)"
            check_row "$label" "fsck:$w" FAIL
        fi
    fi
    teardown_peer
}

# Every workload starts on a fresh image, and the peers take turns workload by
# workload, so a change of the machine's speed during the run hits all of them.
mount_part() {
    local csv=$OUTDIR/mount.csv i w peer
    [[ -f $csv ]] || echo "$CSV_HEADER" > "$csv"
    mkdir -p "$SCRATCH"
    SCRATCH=$(cd "$SCRATCH" && pwd)
    for ROUND in $(seq 1 "$ROUNDS"); do
        for w in $WORKLOADS; do
            for i in "${!BUILD_LABELS[@]}"; do
                peer_workload "f2fuse-${BUILD_LABELS[$i]}" f2fuse "$w" "${BUILD_DIRS[$i]}/f2fuse"
            done
            for peer in $KERNEL_PEERS; do
                peer_workload "$peer" "$peer" "$w"
            done
        done
    done
}

# ---- report: results.md ----
report() {
    python3 - "$OUTDIR" "${BUILD_LABELS[@]}" << 'PY'
"""engine.csv / mount.csv -> markdown: median ops/s over rounds per label, workload
and thread count; speed-up over the same label's 1-thread median; the last build
over the first."""
import csv, os, statistics, sys
from collections import defaultdict

outdir, builds = sys.argv[1], sys.argv[2:]
UNITS = {"creates": "files/s"}
print(f"# Parallel I/O scaling (seed 002)\n\n```\n{open(os.path.join(outdir, 'env.txt')).read()}```\n")
for part, prefix in (("engine", ""), ("mount", "f2fuse-")):
    path = os.path.join(outdir, f"{part}.csv")
    if not os.path.exists(path):
        continue
    rates, failed, labels, rows, checks = defaultdict(list), set(), [], [], defaultdict(list)
    for r in csv.DictReader(open(path, newline="")):
        label, w = r["label"], r["workload"]
        if label not in labels:
            labels.append(label)
        if w.startswith(("fsck:", "setup:")):  # a peer's setup failure, or fsck after a workload
            checks[label].append(f"{w} {r['check']}")
            continue
        key = (label, w, int(r["threads"]))
        if (w, key[2]) not in rows:
            rows.append((w, key[2]))
        if r["check"] != "ok" or not r["ops_per_s"]:
            failed.add(key)
        else:
            rates[key].append(float(r["ops_per_s"]))
    first, last = prefix + builds[0], prefix + builds[-1]
    compare = len(builds) > 1 and first in labels and last in labels
    title = "Engine (library API, no FUSE)" if part == "engine" else "Through the mount (fio)"
    print(f"## {title}\n")
    print("ops/s (files/s for creates), median of rounds; in brackets: over the same label's 1 thread\n")
    head = ["workload", "threads"] + labels + ([f"{last} / {first}"] if compare else [])
    print("| " + " | ".join(head) + " |")
    print("|---|---:|" + "---:|" * (len(head) - 2))
    def median(key):
        return statistics.median(rates[key]) if rates[key] else None
    for w, n in rows:
        cells = [f"{w} ({UNITS.get(w, 'ops/s')})", str(n)]
        for label in labels:
            key, one = (label, w, n), median((label, w, 1))
            m = median(key)
            if key in failed:
                cells.append("FAIL")
            elif m is None:
                cells.append("-")
            else:
                spread = ""
                if len(rates[key]) > 1:
                    spread = f" ±{(max(rates[key]) - min(rates[key])) / 2 / m * 100:.0f}%"
                ratio = f" ({m / one:.2f}×)" if one else ""
                cells.append(f"{m:,.0f}{spread}{ratio}")
        if compare:
            a, b = median((last, w, n)), median((first, w, n))
            cells.append(f"{a / b:.2f}" if a and b else "-")
        print("| " + " | ".join(cells) + " |")
    if checks:
        print("\nImage checks: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in checks.items()))
    if failed:
        print("\n**Failed points:** " + ", ".join(f"{l} {w} x{n}" for l, w, n in sorted(failed)))
    print()
PY
}

T0=$SECONDS
ROUND=1
for p in $PARTS; do "${p}_part"; done
report | tee "$OUTDIR/results.md"
log "all done in $((SECONDS - T0))s; results in $OUTDIR"
[[ $FAILED == 0 ]] || { log "some points FAILED (see results.md, logs/)"; exit 1; }
