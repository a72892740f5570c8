#!/usr/bin/env bash
# bench/smallfiles.sh -- a tree of small files (issue 17): cold `du -s` and cold
# `tar cf - . | cat` on ext4 on a loop device, the raw directory, the null FUSE
# file system and f2fuse (mounted as by default, and -o default_permissions; optionally
# a second f2fuse binary, for A/B in one run);
# and W2's fill phase (32 KiB file creates) on the null file system and f2fuse.
# Root only. One command:
#
#   bench/smallfiles.sh                 DIRS=200 FILES=1000: 200,000 files
#   DIRS=40 FILES=500 ROUNDS=2 bench/smallfiles.sh      a quick run (minutes)
#
# The tree: DIRS directories of FILES files of 0..MAX_BYTES random bytes (fixed
# seed), made once in SCRATCH/stage (the raw peer). f2fuse's image is made from it
# with `f2fuse build`, ext4's with cp -a onto a fresh mkfs.ext4, the null file
# system's with cp -r (it keeps only names and sizes and reads zeros: listing and
# reading it costs FUSE and nothing else).
# Cold: f2fuse is unmounted and mounted again, then for every peer `sync` and
# drop_caches (3) before each timed command. Rounds interleave the peers.
# tar writes to a pipe: GNU tar skips reading files when its archive is /dev/null.
#
# Knobs (environment):
#   DIRS=200 FILES=1000 MAX_BYTES=3000 SEED=17 ROUNDS=3
#   PEERS="ext4 raw null f2fuse f2fuse-dp"   f2fuse-dp: mounted -o default_permissions;
#                                    f2fuse-b is added when F2FUSE_B is set
#   F2FUSE=<repo>/target/release/f2fuse  (built when unset)
#   F2FUSE_B=                        a second f2fuse binary (label f2fuse-b)
#   F2FUSE_OPTS=                     `-o` options for every f2fuse mount
#   NULL_FS=<repo>/target/release/examples/null_fs  (built when unset)
#   LOOP_DIO=off                     ext4's loop device (issue 17's figures: off)
#   W2_MB=256                        W2 fill volume per run (0: no W2)
#   SCRATCH=/var/tmp/f2fuse-small    OUTDIR=bench/results/small-DATE
#   KEEP_STAGE=1                     keep SCRATCH/stage for the next run
# Output: OUTDIR/results.csv (round,peer,test,seconds,extra), OUTDIR/results.md
# (medians and ratios to ext4 and to null), env.txt, logs/.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
die() { echo "bench/smallfiles.sh: $*" >&2; exit 1; }
log() { echo "== $(date +%H:%M:%S) $*" >&2; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
[[ $EUID -eq 0 ]] || die "must run as root (loop devices, mount, drop_caches)"

DIRS=${DIRS:-200} FILES=${FILES:-1000} MAX_BYTES=${MAX_BYTES:-3000} SEED=${SEED:-17}
ROUNDS=${ROUNDS:-3} LOOP_DIO=${LOOP_DIO:-off} W2_MB=${W2_MB:-256}
PEERS=${PEERS:-"ext4 raw null f2fuse f2fuse-dp"}
F2FUSE_B=${F2FUSE_B:-}
[[ -n $F2FUSE_B ]] && PEERS="$PEERS f2fuse-b"
F2FUSE_OPTS=${F2FUSE_OPTS:-}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-small}
OUTDIR=${OUTDIR:-$HERE/results/small-$(date +%Y%m%d-%H%M%S)}
if [[ -z ${F2FUSE:-} || -z ${NULL_FS:-} ]]; then
    (cd "$REPO" && cargo build --release -q -p f2fuse && cargo build --release -q -p f2fuse-fuse --example null_fs)
fi
F2FUSE=${F2FUSE:-$REPO/target/release/f2fuse}
NULL_FS=${NULL_FS:-$REPO/target/release/examples/null_fs}
for tool in mkfs.ext4 losetup tar du python3; do command -v $tool > /dev/null || die "$tool missing"; done

mkdir -p "$SCRATCH" "$OUTDIR/logs"
CSV=$OUTDIR/results.csv
echo "round,peer,test,seconds,extra" > "$CSV"
{
    echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git -C "$REPO" rev-parse --short HEAD 2> /dev/null)"
    echo "kernel: $(uname -r)"; echo "cpus: $(nproc)"; echo "loadavg at start: $(cat /proc/loadavg)"
    echo "tree: DIRS=$DIRS FILES=$FILES MAX_BYTES=$MAX_BYTES SEED=$SEED ROUNDS=$ROUNDS LOOP_DIO=$LOOP_DIO W2_MB=$W2_MB"
    echo "f2fuse: $F2FUSE ${F2FUSE_OPTS:+-o $F2FUSE_OPTS}"; [[ -n $F2FUSE_B ]] && echo "f2fuse-b: $F2FUSE_B"
} > "$OUTDIR/env.txt"

# ---- mounts: every peer stays set up for the whole run ----
declare -A MNT PID IMG BIN OPTS
LOOP="" BUILT=""
cleanup() {
    local rc=$? p
    set +e
    for p in "${!MNT[@]}"; do
        [[ $p == raw ]] && continue
        mountpoint -q "${MNT[$p]}" && umount "${MNT[$p]}"
        [[ -n ${PID[$p]:-} ]] && wait "${PID[$p]}" 2> /dev/null
    done
    [[ -n $LOOP ]] && losetup -d "$LOOP"
    rm -f "$SCRATCH"/*.img
    rmdir "$SCRATCH"/mnt-* 2> /dev/null
    [[ -z ${KEEP_STAGE:-} ]] && rm -rf "$SCRATCH/stage"
    log "exit $rc; results in $OUTDIR"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_mounted() {  # wait_mounted PEER
    local _
    for _ in $(seq 1 300); do
        mountpoint -q "${MNT[$1]}" && return 0
        kill -0 "${PID[$1]}" 2> /dev/null || break
        sleep 0.1
    done
    die "$1 did not mount: $(tail -c 400 "$OUTDIR/logs/$1.log")"
}

mount_f2fuse() {  # mount_f2fuse PEER
    local args=()
    [[ -n ${OPTS[$1]} ]] && args=(-o "${OPTS[$1]}")
    "${BIN[$1]}" mount "${IMG[$1]}" "${MNT[$1]}" -f "${args[@]}" >> "$OUTDIR/logs/$1.log" 2>&1 &
    PID[$1]=$!
    wait_mounted "$1"
}

unmount_f2fuse() {  # unmount_f2fuse PEER: and wait for the daemon's last checkpoint
    umount "${MNT[$1]}"
    wait "${PID[$1]}" || die "$1's daemon failed: $(tail -c 400 "$OUTDIR/logs/$1.log")"
    PID[$1]=""
}

start_null() {  # start_null PEER MOUNTPOINT
    MNT[$1]=$2
    mkdir -p "$2"
    "$NULL_FS" "$2" >> "$OUTDIR/logs/$1.log" 2>&1 &
    PID[$1]=$!
    wait_mounted "$1"
}

# ---- the tree ----
STAGE=$SCRATCH/stage
if [[ ! -f $STAGE/.complete-$DIRS-$FILES-$MAX_BYTES-$SEED ]]; then
    log "making the tree: $DIRS x $FILES files of 0..$MAX_BYTES bytes"
    rm -rf "$STAGE"
    python3 - "$STAGE" "$DIRS" "$FILES" "$MAX_BYTES" "$SEED" << 'EOF'
import os, random, sys
root, dirs, files, max_bytes, seed = sys.argv[1], *map(int, sys.argv[2:])
rng = random.Random(seed)
pool = rng.randbytes(1 << 20)
for d in range(dirs):
    path = os.path.join(root, "d%04d" % d)
    os.makedirs(path)
    for f in range(files):
        n = rng.randint(0, max_bytes)
        at = rng.randrange(len(pool) - n)
        with open(os.path.join(path, "f%05d" % f), "wb") as out:
            out.write(pool[at:at + n])
EOF
    touch "$STAGE/.complete-$DIRS-$FILES-$MAX_BYTES-$SEED"
fi
TREE_KB=$(du -sk "$STAGE" | cut -f1)
IMG_MB=$(( TREE_KB * 3 / 1024 + 1024 ))
echo "tree: $(( DIRS * FILES )) files, $TREE_KB KiB on the host; images $IMG_MB MiB" >> "$OUTDIR/env.txt"

for p in $PEERS; do
    case $p in
        raw) MNT[raw]=$STAGE ;;
        ext4)
            IMG[ext4]=$SCRATCH/ext4.img MNT[ext4]=$SCRATCH/mnt-ext4
            rm -f "${IMG[ext4]}"; truncate -s "${IMG_MB}M" "${IMG[ext4]}"; mkdir -p "${MNT[ext4]}"
            LOOP=$(losetup -f --show --direct-io="$LOOP_DIO" "${IMG[ext4]}")
            mkfs.ext4 -q -F -m 0 -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"
            mount "$LOOP" "${MNT[ext4]}"
            log "ext4: copying the tree"
            cp -a "$STAGE/." "${MNT[ext4]}/" ;;
        null)
            start_null null "$SCRATCH/mnt-null"
            log "null: copying the tree (sizes only)"
            cp -r "$STAGE/." "${MNT[null]}/" ;;
        f2fuse|f2fuse-b|f2fuse-dp)
            BIN[$p]=$F2FUSE OPTS[$p]=$F2FUSE_OPTS
            [[ $p == f2fuse-b ]] && BIN[$p]=$F2FUSE_B
            [[ $p == f2fuse-dp ]] && OPTS[$p]=${F2FUSE_OPTS:+$F2FUSE_OPTS,}default_permissions
            IMG[$p]=$SCRATCH/$p.img MNT[$p]=$SCRATCH/mnt-$p
            rm -f "${IMG[$p]}"; mkdir -p "${MNT[$p]}"
            if [[ -z $BUILT ]]; then
                log "$p: f2fuse build"
                "${BIN[$p]}" build "$STAGE" "${IMG[$p]}" --size "${IMG_MB}M" > "$OUTDIR/logs/$p.build.log" 2>&1 \
                    || die "$p build failed: $(tail -c 400 "$OUTDIR/logs/$p.build.log")"
                BUILT=${IMG[$p]}
            else
                cp --sparse=always "$BUILT" "${IMG[$p]}"
            fi ;;
        *) die "unknown peer $p (ext4 raw null f2fuse f2fuse-dp)" ;;
    esac
done

for p in $PEERS; do
    if [[ $p == f2fuse* ]]; then mount_f2fuse "$p"; fi
done

# ---- timed commands ----
cold() {  # cold PEER: fresh f2fuse mount; every cache dropped
    if [[ $1 == f2fuse* ]]; then unmount_f2fuse "$1"; mount_f2fuse "$1"; fi
    sync
    echo 3 > /proc/sys/vm/drop_caches
}

timed() {  # timed ROUND PEER TEST COMMAND...: one CSV row. The command's last line of
    # output goes to EXTRA; if it is "seconds=S ..." S is the figure (W2: its fill time).
    local t0 t1 out secs
    t0=$(date +%s.%N)
    out=$("${@:4}" 2> "$OUTDIR/logs/$2.$3.err" | tail -n 1 | tr ',\t' '; ')
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    if [[ $out == seconds=* ]]; then secs=${out#seconds=} secs=${secs%% *}; fi
    echo "$1,$2,$3,$secs,$out" >> "$CSV"
    log "round $1 $2 $3: $secs s ($out)"
}

du_s() { du -s "$1"; }
tar_cat() { (cd "$1" && tar cf - . | cat > /dev/null && echo ok); }

w2_fill() {  # w2_fill DIR: W2's fill phase only; prints its files/s
    python3 "$HERE/workloads/w2-gc-fill-rewrite.py" "$1/w2" --max-fill-mb "$W2_MB" --rewrites 0 \
        --fill-timeout 600 \
        | awk -F, '$1 == "fill_s" { s = $2 } $1 == "fill_files_per_s" { f = $2 } END { print "seconds=" s " " f " files/s" }'
}

for r in $(seq 1 "$ROUNDS"); do
    log "round $r of $ROUNDS; load $(cut -d' ' -f1-3 /proc/loadavg)"
    for p in $PEERS; do cold "$p"; timed "$r" "$p" du du_s "${MNT[$p]}"; done
    for p in $PEERS; do cold "$p"; timed "$r" "$p" tar tar_cat "${MNT[$p]}"; done
    if [[ $W2_MB != 0 ]]; then
        for p in $PEERS; do
            [[ $p == null || $p == f2fuse* ]] || continue
            timed "$r" "$p" w2fill w2_fill "${MNT[$p]}"
        done
    fi
done
echo "loadavg at end: $(cat /proc/loadavg)" >> "$OUTDIR/env.txt"

python3 - "$CSV" > "$OUTDIR/results.md" << 'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tests = list(dict.fromkeys(r["test"] for r in rows))
peers = list(dict.fromkeys(r["peer"] for r in rows))
med = {}
for t in tests:
    for p in peers:
        v = [float(r["seconds"]) for r in rows if r["test"] == t and r["peer"] == p]
        if v:
            med[t, p] = (statistics.median(v), min(v), max(v), len(v))
print("| test | peer | median s | min-max s | runs | speed vs ext4 | speed vs null |")
print("|---|---|---|---|---|---|---|")
for t in tests:
    for p in peers:
        if (t, p) not in med:
            continue
        m, lo, hi, n = med[t, p]
        ratio = lambda base: f"{med[t, base][0] / m:.2f}x" if (t, base) in med and m else "-"
        print(f"| {t} | {p} | {m:.2f} | {lo:.2f}-{hi:.2f} | {n} | {ratio('ext4')} | {ratio('null')} |")
print()
print("Speed ratio = the peer's median time / this row's median time (1.00x: as fast).")
print("w2fill: seconds of W2's fill phase (create + write + close of 32 KiB files, then sync).")
EOF
cat "$OUTDIR/results.md"
