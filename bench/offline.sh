#!/usr/bin/env bash
# bench/offline.sh -- the offline path (issue 17, item 6): `f2fuse build` and `f2fuse
# extract` against the tools that do the same without a mount, on a tree of many small
# files and on a tree of a few large files. Root only (drop_caches before every timed
# command; mkfs.ext4 -d and sload.f2fs -P copy owners).
#
#   bench/offline.sh                                   both trees, 3 rounds (~15-25 min)
#   SMALL_DIRS=20 BIG_FILES=2 BIG_MIB=64 ROUNDS=1 bench/offline.sh     a quick run
#   TREES=small bench/offline.sh                       one tree
#
# Trees (made once under SCRATCH and kept for the next run; their names carry the knobs):
#   small  SMALL_DIRS directories of SMALL_FILES files of 0..SMALL_MAX bytes (random
#          sizes and bytes, fixed seed) and one symlink per directory
#   big    BIG_FILES files of BIG_MIB MiB of random bytes
# Every round, each command after `sync; echo 3 > /proc/sys/vm/drop_caches` (cold page
# cache; the tree is read from disk), timed by /usr/bin/time -f "%e %M" (wall seconds,
# peak RSS KiB), in this order:
#   build    f2fuse build -q -S SIZE TREE f.img
#            mkfs.f2fs -f s.img, then sload.f2fs -P -f TREE s.img (timed apart; the
#            table adds the two times and takes the larger peak)
#            mkfs.ext4 -q -F -N INODES -d TREE e.img SIZE (-N: the default inode ratio
#            gives too few inodes for the small tree)
#   extract  f2fuse extract -q f.img OUT
#            debugfs -R "rdump / OUT" e.img
#            dump.f2fs (big tree only): f2fs-tools 1.15's dump.f2fs has no whole-tree
#            mode, only `-i INO` (one file, into ./lost_found, after a y/N prompt); it
#            dumps each file of f.img, the image f2fuse extract reads. For the small
#            tree that would be one process per file: not timed.
# All images have the same SIZE: 1.5 x (the tree's allocated bytes + 4 KiB per entry, a
# node block each) + 256 MiB: room for what f2fuse build checks it needs.
# After the last round (untimed): fsck.f2fs --dry-run of f.img and s.img, e2fsck -fn of
# e.img; `diff -r --no-dereference` of each extracted tree against the source; a
# manifest (type, mode, owner, size, mtime, link target) of f2fuse's copy against the
# source's to the nanosecond, of debugfs's copy to the second (rdump restores seconds, and
# no symlink times); dump.f2fs's files of the big tree (and of 20 small files) by cmp.
# The script fails if an f2fuse image or copy is wrong, or a peer's image fails its fsck;
# a peer's copy that differs is reported (results.md), not fatal.
#
# Output: OUTDIR (bench/results/offline-DATE)/runs.csv (tree,round,command,seconds,
# peak_kib), results.md (medians, ratios, load average), logs/. Knobs: SCRATCH
# (/var/tmp/f2fuse-offline), F2FUSE (built when unset), ROUNDS, TREES, SMALL_DIRS,
# SMALL_FILES, SMALL_MAX, BIG_FILES, BIG_MIB, KEEP_TREES (1: keep the trees, default).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "bench/offline.sh: needs root (drop_caches, owners)" >&2; exit 1; }
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-offline}
OUTDIR=${OUTDIR:-$HERE/results/offline-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${ROUNDS:-3} TREES=${TREES:-small big} KEEP_TREES=${KEEP_TREES:-1}
SMALL_DIRS=${SMALL_DIRS:-200} SMALL_FILES=${SMALL_FILES:-1000} SMALL_MAX=${SMALL_MAX:-3000}
BIG_FILES=${BIG_FILES:-8} BIG_MIB=${BIG_MIB:-256}
if [[ -z ${F2FUSE:-} ]]; then
    (cd "$ROOT" && cargo build --release -q -p f2fuse)
fi
F2FUSE=${F2FUSE:-$ROOT/target/release/f2fuse}
for tool in mkfs.f2fs sload.f2fs fsck.f2fs dump.f2fs mkfs.ext4 e2fsck debugfs python3; do
    command -v "$tool" > /dev/null || { echo "bench/offline.sh: $tool missing" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "bench/offline.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
mkdir -p "$OUTDIR/logs" "$SCRATCH"
WORK=$SCRATCH/work
CSV=$OUTDIR/runs.csv
echo "tree,round,command,seconds,peak_kib" > "$CSV"
FAILED=0

log() { echo "== $(date +%H:%M:%S) $*" >&2; }
# shellcheck disable=SC2317  # reached through the trap
cleanup() {  # the EXIT trap: remove the work directory (and the trees unless kept)
    local rc=$?
    rm -rf "$WORK"
    if [[ $KEEP_TREES != 1 ]]; then rm -rf "$SCRATCH"/small-* "$SCRATCH"/big-*; fi
    exit "$rc"
}
trap cleanup EXIT

# make_tree KIND DIR: the small or big tree, unless DIR.done says it is complete.
make_tree() {
    local kind=$1 dir=$2
    [[ -e $dir.done ]] && return
    rm -rf "$dir" "$dir.done"
    log "making the $kind tree $dir"
    python3 - "$kind" "$dir" "$SMALL_DIRS" "$SMALL_FILES" "$SMALL_MAX" "$BIG_FILES" "$BIG_MIB" << 'EOF'
import os, random, sys
kind, top = sys.argv[1], sys.argv[2]
dirs, files, max_size, big_files, big_mib = map(int, sys.argv[3:])
os.makedirs(top)
if kind == "small":
    rng = random.Random(17)
    pool = rng.randbytes(1 << 16)
    for d in range(dirs):
        sub = os.path.join(top, f"d{d:04}")
        os.mkdir(sub)
        for f in range(files):
            size = rng.randint(0, max_size)
            start = rng.randrange(0, len(pool) - size)
            with open(os.path.join(sub, f"f{d:04}_{f:05}"), "wb") as out:
                out.write(pool[start:start + size])
        os.symlink(f"f{d:04}_00000", os.path.join(sub, f"link{d:04}"))
else:
    for f in range(big_files):
        with open(os.path.join(top, f"big{f:02}"), "wb") as out:
            for _ in range(big_mib):
                out.write(os.urandom(1 << 20))
EOF
    sync
    touch "$dir.done"
}

# timed TREE ROUND COMMAND ARGS...: cold cache, then one timed run; its output goes to
# logs/, a failure stops the script.
timed() {
    local tree=$1 round=$2 label=$3
    shift 3
    local logf="$OUTDIR/logs/$tree-$round-${label//[^a-z0-9.]/_}.log"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    if ! /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" > "$logf" 2>&1 < /dev/null; then
        log "FAILED: $label ($tree, round $round): see $logf"
        tail -5 "$logf" >&2
        exit 1
    fi
    local seconds peak
    read -r seconds peak < <(tail -1 "$WORK/time")
    echo "$tree,$round,$label,$seconds,$peak" >> "$CSV"
    log "$tree round $round: $label ${seconds} s, peak $((peak / 1024)) MiB"
}

# dump_files IMG INO... : dump.f2fs -i of each inode into ./lost_found (answers the prompt).
dump_files() {
    local img=$1 ino
    shift
    for ino in "$@"; do
        echo y | dump.f2fs -i "$ino" "$img" > /dev/null
    done
}

# inodes_of IMG NAME...: the inode numbers of the named files, from fsck.f2fs's tree.
inodes_of() {
    local img=$1
    shift
    fsck.f2fs --dry-run -t "$img" < /dev/null 2> /dev/null \
        | python3 -c '
import re, sys
wanted = set(sys.argv[1:])
for line in sys.stdin:
    m = re.search(r"-- (\S+) <ino = (0x[0-9a-f]+)>", line)
    if m and m.group(1) in wanted:
        print(m.group(2))' "$@"
}

# manifest DIR TIMEFMT: one sorted line per entry below DIR (not DIR itself, not
# lost+found); directories without their size, symlinks without their time.
manifest() {
    find "$1" -mindepth 1 -path "$1/lost+found" -prune -o \
        \( -type d -printf "%P d %m %U %G - $2 -\n" \) -o \
        \( -type l -printf '%P l %m %U %G %s - %l\n' \) -o \
        -printf "%P %y %m %U %G %s $2 -\n" | sort
}

# same_tree SRC COPY TIMEFMT NAME: content and manifest; prints a verdict line for
# results.md, returns 1 if they differ.
same_tree() {
    local src=$1 copy=$2 timefmt=$3 name=$4 diffs
    diffs=$(diff -r --no-dereference -x lost+found "$src" "$copy" 2>&1 | tee "$OUTDIR/logs/$name.diff" | wc -l)
    diff <(manifest "$src" "$timefmt") <(manifest "$copy" "$timefmt") > "$OUTDIR/logs/$name.manifest.diff" || true
    local mdiffs
    mdiffs=$(grep -c '^[<>]' "$OUTDIR/logs/$name.manifest.diff" || true)
    if [[ $diffs -eq 0 && $mdiffs -eq 0 ]]; then
        echo "- $name: identical to the source (diff -r; manifest with times as $timefmt)"
        return 0
    fi
    echo "- $name: DIFFERS: $diffs diff -r lines, $mdiffs manifest lines (logs/$name.*diff)"
    return 1
}

# fsck_ok KIND IMG NAME: fsck.f2fs --dry-run (exit 0, no [FAIL]) or e2fsck -fn.
fsck_ok() {
    local kind=$1 img=$2 name=$3 logf="$OUTDIR/logs/$3.fsck.log" ok=1
    if [[ $kind == f2fs ]]; then
        fsck.f2fs --dry-run "$img" < /dev/null > "$logf" 2>&1 || ok=0
        if grep -qiE '\[fail\]|mismatch hash_code' "$logf"; then ok=0; fi
        [[ $ok == 1 ]] && echo "- $name: fsck.f2fs --dry-run clean" && return 0
        echo "- $name: fsck.f2fs FAILS (logs/$name.fsck.log)"
    else
        e2fsck -fn "$img" > "$logf" 2>&1 || ok=0
        [[ $ok == 1 ]] && echo "- $name: e2fsck -fn clean" && return 0
        echo "- $name: e2fsck FAILS (logs/$name.fsck.log)"
    fi
    return 1
}

run_tree() {
    local tree=$1 src
    if [[ $tree == small ]]; then
        src=$SCRATCH/small-${SMALL_DIRS}x${SMALL_FILES}x${SMALL_MAX}
    else
        src=$SCRATCH/big-${BIG_FILES}x${BIG_MIB}M
    fi
    make_tree "$tree" "$src"
    local alloc entries size inodes
    alloc=$(du -s --block-size=1 "$src" | cut -f1)
    entries=$(find "$src" | wc -l)
    size=$(( ((alloc + 4096 * entries) * 3 / 2 + (256 << 20)) >> 20 ))M
    inodes=$(( entries + entries / 5 + 1024 ))
    echo "$tree,$src,$entries entries,$((alloc >> 20)) MiB allocated,image $size" >> "$OUTDIR/trees.txt"
    log "$tree tree: $entries entries, $((alloc >> 20)) MiB allocated; images of $size"
    local f=$WORK/f.img s=$WORK/s.img e=$WORK/e.img out=$WORK/out round
    local big_names=() big_inos=()
    for ((round = 1; round <= ROUNDS; round++)); do
        rm -f "$f" "$s" "$e"
        timed "$tree" "$round" "f2fuse build" "$F2FUSE" build -q -S "$size" "$src" "$f"
        truncate -s "$size" "$s"
        timed "$tree" "$round" "mkfs.f2fs" mkfs.f2fs -q -f "$s"
        timed "$tree" "$round" "sload.f2fs" sload.f2fs -P -f "$src" "$s"
        truncate -s "$size" "$e"
        timed "$tree" "$round" "mkfs.ext4 -d" mkfs.ext4 -q -F -N "$inodes" -d "$src" "$e"

        rm -rf "$out.f" "$out.e" "$out.d"
        timed "$tree" "$round" "f2fuse extract" "$F2FUSE" extract -q "$f" "$out.f"
        mkdir "$out.e"
        timed "$tree" "$round" "debugfs rdump" debugfs -R "rdump / $out.e" "$e"
        if [[ $tree == big ]]; then
            if [[ ${#big_inos[@]} -eq 0 ]]; then
                mapfile -t big_names < <(cd "$src" && ls)
                mapfile -t big_inos < <(inodes_of "$f" "${big_names[@]}")
            fi
            mkdir "$out.d"
            # shellcheck disable=SC2016  # $0 and $1 are the inner shell's
            timed "$tree" "$round" "dump.f2fs" sh -c 'cd "$1" && shift && for ino; do echo y | dump.f2fs -i "$ino" "$0" || exit 1; done' \
                "$f" "$out.d" "${big_inos[@]}"
        fi
    done

    log "$tree: checking the last round's images and copies"
    {
        echo "### $tree tree: checks"
        echo
        fsck_ok f2fs "$f" "$tree: f2fuse build image" || FAILED=1
        fsck_ok f2fs "$s" "$tree: mkfs.f2fs + sload.f2fs image" || FAILED=1
        fsck_ok ext4 "$e" "$tree: mkfs.ext4 -d image" || FAILED=1
        same_tree "$src" "$out.f" %T@ "$tree-f2fuse-extract" || FAILED=1
        same_tree "$src" "$out.e" %Ts "$tree-debugfs-rdump" || true
        local sample=() names=() name
        if [[ $tree == big ]]; then
            names=("${big_names[@]}")
        else
            # 20 files of the f2fuse image by dump.f2fs: a check by another tool's reader.
            mapfile -t names < <(cd "$src" && find . -type f -name 'f*' | sort | awk 'NR % 9973 == 1' | head -20 | xargs -n1 basename)
            rm -rf "$out.d" && mkdir "$out.d"
            mapfile -t sample < <(inodes_of "$f" "${names[@]}")
            (cd "$out.d" && dump_files "$f" "${sample[@]}")
        fi
        local bad=0
        for name in "${names[@]}"; do
            cmp -s "$(find "$src" -name "$name" -print -quit)" "$out.d/lost_found/$name" || bad=$((bad + 1))
        done
        if [[ $bad -eq 0 && ${#names[@]} -gt 0 ]]; then
            echo "- $tree: dump.f2fs of ${#names[@]} files of the f2fuse image: same bytes as the source"
        else
            echo "- $tree: dump.f2fs of the f2fuse image: $bad of ${#names[@]} files DIFFER"
            FAILED=1
        fi
        echo
    } >> "$OUTDIR/checks.md"
    rm -rf "$out.f" "$out.e" "$out.d" "$f" "$s" "$e"
}

mkdir -p "$WORK"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "output: $OUTDIR; load average $LOAD_START"
for tree in $TREES; do
    run_tree "$tree"
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$CSV" "$LOAD_START" "$LOAD_END" "$ROUNDS" > "$OUTDIR/results.md" << 'EOF'
import csv, statistics, sys
path, load_start, load_end, rounds = sys.argv[1:]
runs = {}
for row in csv.DictReader(open(path)):
    key = (row["tree"], row["command"])
    runs.setdefault(key, {})[int(row["round"])] = (float(row["seconds"]), int(row["peak_kib"]))
# mkfs.f2fs + sload.f2fs as one step: times added, the larger peak, round by round.
for tree in {t for t, _ in runs}:
    mkfs, sload = runs.get((tree, "mkfs.f2fs"), {}), runs.get((tree, "sload.f2fs"), {})
    both = {r: (mkfs[r][0] + sload[r][0], max(mkfs[r][1], sload[r][1])) for r in mkfs if r in sload}
    if both:
        runs[(tree, "mkfs.f2fs + sload.f2fs")] = both
steps = {
    "build": ("f2fuse build", ["mkfs.f2fs + sload.f2fs", "mkfs.ext4 -d"]),
    "extract": ("f2fuse extract", ["dump.f2fs", "debugfs rdump"]),
}
print(f"# Offline path: build and extract ({rounds} rounds, cold page cache before each command)\n")
print(f"Load average at start {load_start}, at end {load_end}.\n")
print("Median of the rounds; the ratio is f2fuse's time (or peak) over the peer's, taken round by round, median.\n")
for tree in ("small", "big"):
    if not any(t == tree for t, _ in runs):
        continue
    print(f"## {tree} tree\n")
    print("| step | command | time (s) | min-max | peak RSS (MiB) | time ratio f2fuse/peer | peak ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for step, (ours, peers) in steps.items():
        mine = runs.get((tree, ours), {})
        for cmd in [ours] + peers:
            r = runs.get((tree, cmd))
            if not r:
                continue
            times = [t for t, _ in r.values()]
            peak = statistics.median(p for _, p in r.values()) / 1024
            tr = pr = ""
            if cmd != ours:
                common = [k for k in r if k in mine]
                if common:
                    tr = f"{statistics.median(mine[k][0] / r[k][0] for k in common):.2f}"
                    pr = f"{statistics.median(mine[k][1] / r[k][1] for k in common):.2f}"
            print(f"| {step} | {cmd} | {statistics.median(times):.2f} | {min(times):.2f}-{max(times):.2f} | {peak:.0f} | {tr} | {pr} |")
    print()
EOF
cat "$OUTDIR/checks.md" >> "$OUTDIR/results.md"
cat "$OUTDIR/results.md"
log "results: $OUTDIR/results.md"
exit "$FAILED"
