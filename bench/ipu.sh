#!/usr/bin/env bash
# bench/ipu.sh -- seed 004 in F2FS terms: in-place updates, zero-out chunks and a
# pinned file on W5 (posix_fallocate 128 MiB, 4 KiB random writes + fsync), W2's sync
# rewrites by ipu_policy, and the peers (raw directory, kernel ext4, fuse2fs) on W5 and
# W2 in the same run. Root only (FUSE mounts, loop devices, drop_caches).
#
#   bench/ipu.sh                       everything, ~15 min
#   PARTS="pinned" bench/ipu.sh        one part: ipu zeroout w2 pinned peers
#
# Parts (each a fresh f2fuse image per value, through bench/run.sh --policy):
#   ipu      W5 with ipu_policy 0, 16 (FSYNC, the default above 16 GiB) and 129 (FORCE |
#            HONOR_OPU_WRITE, the default up to 16 GiB: IMG_SIZE 1G)
#   zeroout  W5 with extent_zeroout_len 0 7 64 256 (ipu_policy default)
#   w2       W2 with ipu_policy 0, 16 and 129
#   pinned   W5 on a pinned file: the kit's w5 job run by fio on a file created,
#            pinned (F2FS_IOC_SET_PIN_FILE) and posix_fallocate'd first (real blocks in
#            whole sections, zeroed: 128 MiB written outside fio's timed run and outside
#            the device bytes counted)
#   peers    bench/run.sh compare mode, PEERS="raw ext4 fuse2fs", W5 and W2
# Per W5 value: IOPS, device bytes written and data blocks written in / out of place
# during the group (`f2fuse status --json` before and after), extents after (`f2fuse
# extents` of a second run of the same job: see run.sh w5_extents).
#
# Output: OUTDIR (bench/results/ipu-DATE)/PART/ (run.sh's results.csv, results.md) and
# OUTDIR/pinned.csv. Knobs: SCRATCH, IMG_SIZE (run.sh's), F2FUSE (built when unset),
# PARTS, and the kit's W5_* / W2_* variables.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench/ipu.sh: needs root (FUSE, loop devices)" >&2; exit 1; }
export SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench} IMG_SIZE=${IMG_SIZE:-1G} LOOP_DIO=${LOOP_DIO:-on}
OUTDIR=${OUTDIR:-$HERE/results/ipu-$(date +%Y%m%d-%H%M%S)}
PARTS=${PARTS:-ipu zeroout w2 pinned peers}
if [[ -z ${F2FUSE:-} ]]; then
    (cd "$ROOT" && cargo build --release -q -p f2fuse)
fi
export F2FUSE=${F2FUSE:-$ROOT/target/release/f2fuse}
export W5_FILESIZE=${W5_FILESIZE:-128m} W5_SIZE=${W5_SIZE:-16m} W5_RUNTIME=${W5_RUNTIME:-10}
mkdir -p "$OUTDIR/logs" "$SCRATCH"

policy() {  # policy PART WORKLOAD NAME=VALUES
    OUTDIR=$OUTDIR/$1 "$HERE/run.sh" --policy "$2" "$3"
}

# The pinned file: mount, create w5.falloc, pin it, run the kit's w5 job on it.
pinned_part() {
    local csv=$OUTDIR/pinned.csv dir json before after ext
    # shellcheck source=bench/peers.sh
    source "$HERE/peers.sh"
    cleanup_on_exit
    echo "label,workload,metric,value,unit" > "$csv"
    mkdir -p "$SCRATCH"  # run.sh removes it when it is empty
    setup_f2fuse pinned || { echo "bench/ipu.sh: mount failed" >&2; return 1; }
    dir=$CUR_MNT/w5 json=$OUTDIR/logs/pinned.w5.json
    before=$OUTDIR/logs/pinned.status.before after=$OUTDIR/logs/pinned.status.after
    mkdir -p "$dir"
    # Pinned, then preallocated to the job's size: fio finds the file laid out (a
    # smaller file it would recreate, unpinned).
    python3 - "$dir/w5.falloc" "$W5_FILESIZE" <<'EOF'
import fcntl, os, struct, sys
size = int(sys.argv[2][:-1]) << {"k": 10, "m": 20, "g": 30}[sys.argv[2][-1].lower()]
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
fcntl.ioctl(fd, 0x4004F50D, struct.pack("I", 1))  # F2FS_IOC_SET_PIN_FILE
os.posix_fallocate(fd, 0, size)
os.close(fd)
EOF
    "$F2FUSE" status "$CUR_MNT" --json > "$before"
    BENCH_DIR=$dir fio --eta=never --output-format=json --output="$json" \
        "$HERE/workloads/w5-fallocate-randwrite.fio"
    sync
    "$F2FUSE" status "$CUR_MNT" --json > "$after"
    ext=$OUTDIR/logs/pinned.w5.extents
    "$F2FUSE" extents "$CUR_MNT" /w5/w5.falloc > "$ext"
    {
        "$HERE/lib/fiojson.py" "$json"
        python3 "$HERE/f2fuse_counters.py" gc-delta "$before" "$after"
        echo "extents,$(python3 "$HERE/f2fuse_counters.py" extent-count "$ext"),count"
    } | sed 's/^/pinned,w5,/' >> "$csv"
    teardown_peer
    column -s, -t < "$csv" >&2
}

for part in $PARTS; do
    case $part in
        ipu) policy ipu W5 ipu_policy=0,16,129 ;;
        zeroout) policy zeroout W5 extent_zeroout_len=0,7,64,256 ;;
        w2) policy w2 W2 ipu_policy=0,16,129 ;;
        pinned) pinned_part ;;
        peers) OUTDIR=$OUTDIR/peers PEERS="raw ext4 fuse2fs" WORKLOADS="w5 w2" REPEAT="" \
            "$HERE/run.sh" ;;
        *) echo "bench/ipu.sh: unknown part '$part' (ipu zeroout w2 pinned peers)" >&2; exit 1 ;;
    esac
done
echo "bench/ipu.sh: results in $OUTDIR" >&2
