#!/usr/bin/env bash
# bench/run.sh -- f2fuse against kernel ext4, the raw backing directory, a
# null FUSE file system and fuse2fs (and optionally xfs, btrfs) on the same
# backing directory, W1..W5, one command. Root only.
#
#   bench/run.sh                                  compare mode: every peer in PEERS
#   bench/run.sh --policy W2 max_victim_search=20,4096
#                                                 policy mode: one workload group on
#                                                 f2fuse, once per value of a mount tunable
#   bench/run.sh --help
#
# Each peer gets a fresh IMG_SIZE image in SCRATCH:
#   f2fuse   `f2fuse mkfs` (or mkfs.f2fs, F2FUSE_MKFS=mkfs.f2fs) + `f2fuse mount -f`
#   ext4     mkfs.ext4 -m 0 on `losetup --direct-io=$LOOP_DIO`
#   fuse2fs  the same ext4 image file served by fuse2fs (default options)
#   xfs, btrfs  on a loop device as ext4;  raw  a plain directory of SCRATCH
#   null     crates/fuse/examples/null_fs (stores nothing, negotiates FUSE as
#            f2fuse does): the FUSE limit
# The report gives f2fuse / min(null, raw) per row (fsync-bound rows: f2fuse / raw,
# since null makes nothing durable), besides f2fuse / ext4 and f2fuse / fuse2fs.
# and runs bench/run-workloads.sh (the shared kit, unchanged) once per workload
# group, so that for f2fuse the daemon's counters (`f2fuse status MNT --json`,
# when that command exists) can be read before and after each group.
#
# Output in OUTDIR: results.csv (timestamp,label,workload,metric,value,unit;
# label = peer, or NAME=VALUE in policy mode), results.md (table + ratios),
# metrics.png and ratios.png (compare mode), env.txt, logs/, raw/.
#
# Knobs (environment):
#   PEERS="ext4 raw null f2fuse fuse2fs"   also: xfs btrfs
#   SCRATCH=/var/tmp/f2fuse-bench    backing directory (images, mount points)
#   IMG_SIZE=1G  LOOP_DIO=on
#   F2FUSE=<repo>/target/release/f2fuse   binary; when unset it is built first
#                                    (cargo build --release -p f2fuse)
#   F2FUSE_MKFS=f2fuse               or mkfs.f2fs
#   F2FUSE_OPTS=                     extra `-o` options for every f2fuse mount
#   NULL_FS=<repo>/target/release/examples/null_fs   when unset it is built first
#                                    (cargo build --release -p f2fuse-fuse --example null_fs)
#   OUTDIR=bench/results/run-DATE    (policy mode: bench/results/policy-DATE)
#   NO_INSTALL=1                     do not apt-get install missing tools
#   PYTHON=                          interpreter for the report (default: the first
#                                    python3 that has matplotlib)
#   every knob of run-workloads.sh: WORKLOADS="w1a w1b w3 w4 w5 w2", REPEAT,
#   REPEAT_ROUNDS, W1_*, W1B_*, W2_*, W3_*, W4_*, W5_*, W_RUNTIME_CAP
#   (W1_FILESIZE=48m W1_SIZE=32m by default, as the shared anchors were taken)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
# log, the peers (setup_PEER, teardown_peer), cleanup
# shellcheck source-path=SCRIPTDIR source=peers.sh
source "$HERE/peers.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "bench/run.sh: $*" >&2; exit 1; }

# ---- arguments ----
POLICY_WL="" POLICY_NAME="" POLICY_VALUES=()
while [[ $# -gt 0 ]]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --policy)
            [[ $# -ge 3 && $3 == *=* ]] || die "usage: --policy WORKLOAD NAME=V1,V2,... (e.g. --policy W2 max_victim_search=20,4096)"
            POLICY_WL=${2,,}
            POLICY_NAME=${3%%=*}
            IFS=, read -r -a POLICY_VALUES <<< "${3#*=}"
            [[ -n $POLICY_NAME && ${#POLICY_VALUES[@]} -gt 0 ]] || die "--policy: empty tunable name or value list"
            shift 3 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
if [[ -n $POLICY_WL ]]; then
    case $POLICY_WL in
        w1a|w1b|w2|w3|w4|w4write|w4read|w4hole|w5) ;;
        *) die "--policy: unknown workload group '$POLICY_WL' (w1a w1b w2 w3 w4 w5)" ;;
    esac
fi

# ---- preconditions ----
[[ $EUID -eq 0 ]] || die "must run as root (loop devices, mount, drop_caches)"
[[ -c /dev/fuse ]] || die "/dev/fuse is missing: no FUSE on this machine (modprobe fuse?)"
grep -qw fuse /proc/filesystems || modprobe fuse 2> /dev/null || die "the kernel has no FUSE support"

PEERS=${PEERS:-"ext4 raw null f2fuse fuse2fs"}
if [[ -n $POLICY_WL ]]; then PEERS=f2fuse; fi
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-bench}
IMG_SIZE=${IMG_SIZE:-1G}
LOOP_DIO=${LOOP_DIO:-on}
F2FUSE_MKFS=${F2FUSE_MKFS:-f2fuse}
F2FUSE_OPTS=${F2FUSE_OPTS:-}
if [[ -n $POLICY_WL ]]; then
    OUTDIR=${OUTDIR:-$HERE/results/policy-$(date +%Y%m%d-%H%M%S)}
else
    OUTDIR=${OUTDIR:-$HERE/results/run-$(date +%Y%m%d-%H%M%S)}
fi
export W1_FILESIZE=${W1_FILESIZE:-48m} W1_SIZE=${W1_SIZE:-32m}
# W5 is run a second time for f2fuse's extent count (see w5_extents): same defaults
# as run-workloads.sh
export W5_FILESIZE=${W5_FILESIZE:-128m} W5_SIZE=${W5_SIZE:-16m} W5_RUNTIME=${W5_RUNTIME:-10}
WORKLOADS=${WORKLOADS:-"w1a w1b w3 w4 w5 w2"}
REPEAT=${REPEAT-"w1a w4hole"}
if [[ -n $POLICY_WL ]]; then WORKLOADS=$POLICY_WL REPEAT=""; fi

# ---- tools (installed with apt-get when missing) ----
need_pkgs=()
need() { command -v "$1" > /dev/null || need_pkgs+=("$2"); }
need fio fio
need python3 python3
need mkfs.ext4 e2fsprogs
need filefrag e2fsprogs
need losetup mount
need fuser psmisc
for p in $PEERS; do
    case $p in
        fuse2fs) need fuse2fs fuse2fs ;;
        xfs) need mkfs.xfs xfsprogs ;;
        btrfs) need mkfs.btrfs btrfs-progs ;;
        f2fuse) if [[ $F2FUSE_MKFS == mkfs.f2fs ]]; then need mkfs.f2fs f2fs-tools; fi ;;
        ext4|raw|null) ;;
        *) die "unknown peer '$p' (f2fuse ext4 fuse2fs xfs btrfs raw null)" ;;
    esac
done
have_plot_python() {
    local py
    for py in ${PYTHON:-python3 /usr/bin/python3}; do
        if command -v "$py" > /dev/null && "$py" -c 'import matplotlib' 2> /dev/null; then
            echo "$py"; return 0
        fi
    done
    return 1
}
[[ -n $POLICY_WL ]] || have_plot_python > /dev/null || need_pkgs+=(python3-matplotlib)
if [[ ${#need_pkgs[@]} -gt 0 ]]; then
    mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
    [[ ${NO_INSTALL:-0} == 1 ]] && die "missing packages: ${need_pkgs[*]} (NO_INSTALL=1)"
    log "installing ${need_pkgs[*]}"
    apt-get install -y -q "${need_pkgs[@]}" > /dev/null ||
        { apt-get update -q > /dev/null && apt-get install -y -q "${need_pkgs[@]}" > /dev/null; } ||
        die "apt-get install ${need_pkgs[*]} failed"
fi
REPORT_PY=$(have_plot_python) || REPORT_PY=python3

# ---- the f2fuse binary ----
if [[ $PEERS == *f2fuse* ]]; then
    if [[ -z ${F2FUSE:-} ]]; then
        F2FUSE=$REPO/target/release/f2fuse
        log "building $F2FUSE (cargo build --release -p f2fuse)"
        (cd "$REPO" && cargo build --release -p f2fuse) || die "cargo build failed (set F2FUSE=/path/to/f2fuse to use a prebuilt binary)"
    fi
    [[ -x $F2FUSE ]] || die "F2FUSE=$F2FUSE is not an executable"
    F2FUSE=$(cd "$(dirname "$F2FUSE")" && pwd)/$(basename "$F2FUSE")
    # the daemon's counters: commands being added; record NA while they are absent
    HAVE_STATUS=0 HAVE_EXTENTS=0
    "$F2FUSE" status --help > /dev/null 2>&1 && HAVE_STATUS=1
    "$F2FUSE" extents --help > /dev/null 2>&1 && HAVE_EXTENTS=1
fi

# ---- the null FUSE file system ----
if [[ " $PEERS " == *" null "* ]]; then
    if [[ -z ${NULL_FS:-} ]]; then
        NULL_FS=$REPO/target/release/examples/null_fs
        log "building $NULL_FS (cargo build --release -p f2fuse-fuse --example null_fs)"
        (cd "$REPO" && cargo build --release -p f2fuse-fuse --example null_fs) || die "cargo build of null_fs failed (set NULL_FS=/path/to/null_fs)"
    fi
    [[ -x $NULL_FS ]] || die "NULL_FS=$NULL_FS is not an executable"
    NULL_FS=$(cd "$(dirname "$NULL_FS")" && pwd)/$(basename "$NULL_FS")
fi

mkdir -p "$OUTDIR/logs" "$SCRATCH"
OUTDIR=$(cd "$OUTDIR" && pwd)
SCRATCH=$(cd "$SCRATCH" && pwd)
CSV=$OUTDIR/results.csv
[[ -f $CSV ]] || echo "timestamp,label,workload,metric,value,unit" > "$CSV"
emit() { echo "$(date +%Y-%m-%dT%H:%M:%S),$1,$2,$3,$4,$5" >> "$CSV"; }  # LABEL WL METRIC VALUE UNIT

# ---- peers: bench/peers.sh (setup_PEER LABEL [MOUNT_OPTION], teardown_peer) ----
cleanup_on_exit

# ---- f2fuse daemon counters ----
status_snap() {  # status_snap FILE: `f2fuse status MNT --json` or an empty file
    : > "$1"
    [[ ${HAVE_STATUS:-0} == 1 ]] || return 0
    "$F2FUSE" status "$CUR_MNT" --json > "$1" 2>> "$OUTDIR/logs/status.err" || : > "$1"
}

emit_gc_delta() {  # emit_gc_delta LABEL WORKLOAD BEFORE AFTER
    local m v u
    if [[ ${HAVE_STATUS:-0} != 1 ]]; then
        emit "$1" "$2" gc_runs NA no-status-cmd
        emit "$1" "$2" gc_blocks_moved NA no-status-cmd
        return 0
    fi
    while IFS=, read -r m v u; do emit "$1" "$2" "$m" "$v" "$u"; done \
        < <("$REPORT_PY" "$HERE/f2fuse_counters.py" gc-delta "$3" "$4" 2>> "$OUTDIR/logs/status.err" ||
            printf 'gc_runs,NA,status-unparsed\ngc_blocks_moved,NA,status-unparsed\n')
}

# W5's extent count for f2fuse. FUSE does not forward FIEMAP, so filefrag gives NA;
# the daemon reports extents instead. run-workloads.sh deletes the W5 file after
# filefrag, so the same fio job (fixed seed: the same blocks are written) runs once
# more here, outside the timed results, and `f2fuse extents` reads that file.
w5_extents() {  # w5_extents LABEL
    local d=$CUR_MNT/.extents-probe out
    if [[ ${HAVE_EXTENTS:-0} != 1 ]]; then
        emit "$1" w5 extents NA no-extents-cmd
        return 0
    fi
    mkdir -p "$d"
    # PATH as a host path under MNT, else as a path inside the file system
    if BENCH_DIR=$d W_RUNTIME_CAP=${W_RUNTIME_CAP:-15} fio --eta=never --output=/dev/null \
        "$HERE/workloads/w5-fallocate-randwrite.fio" 2> "$OUTDIR/logs/$1.w5-probe.err" && sync &&
        { out=$("$F2FUSE" extents "$CUR_MNT" "$d/w5.falloc" 2>> "$OUTDIR/logs/$1.w5-probe.err") ||
            out=$("$F2FUSE" extents "$CUR_MNT" "/${d#"$CUR_MNT"/}/w5.falloc" 2>> "$OUTDIR/logs/$1.w5-probe.err"); }; then
        echo "$out" > "$OUTDIR/logs/$1.w5.extents"
        emit "$1" w5 extents "$("$REPORT_PY" "$HERE/f2fuse_counters.py" extent-count "$OUTDIR/logs/$1.w5.extents")" count
    else
        emit "$1" w5 extents NA extents-cmd-failed
        log "$1: f2fuse extents failed: $(tail -c 300 "$OUTDIR/logs/$1.w5-probe.err" | tr '\n' ' ')"
    fi
    rm -rf "$d"
}

# ---- one peer: all workload groups ----
run_peer() {  # run_peer LABEL PEER [MOUNT_OPTION]
    local label=$1 peer=$2 t0=$SECONDS w rc repeat lines
    local before=$OUTDIR/logs/status.before after=$OUTDIR/logs/status.after wlog=$OUTDIR/logs/$1.log
    : >> "$wlog"
    sync; echo 3 > /proc/sys/vm/drop_caches
    emit "$label" meta loadavg_at_start "$(cut -d' ' -f1 /proc/loadavg)" load
    log "setting up $label"
    if ! "setup_$peer" "$label" "${3:-}"; then
        log "setup of $label FAILED; skipping it"
        emit "$label" meta status FAIL setup
        teardown_peer
        return 0
    fi
    log "running workloads on $label at $CUR_MNT ($(stat -f -c %T "$CUR_MNT"))"
    for w in $WORKLOADS " "; do
        # the last pass (WORKLOADS=" ") only runs REPEAT
        if [[ $w == " " ]]; then
            [[ -n $REPEAT ]] || continue
        fi
        if [[ $peer == f2fuse ]]; then status_snap "$before"; fi
        repeat="" rc=0
        if [[ $w == " " ]]; then repeat=$REPEAT; fi
        lines=$(wc -l < "$wlog")
        WORKLOADS=$w REPEAT=$repeat BENCH_RAWDIR=$OUTDIR/raw/$label \
            "$HERE/run-workloads.sh" "$CUR_MNT" "$label" "$CSV" > /dev/null 2>> "$wlog" || rc=$?
        tail -n +$((lines + 1)) "$wlog" | grep -v '^\[[^]]*\] \(target\|done\) ' >&2 || true
        if [[ $rc -ne 0 ]]; then log "run-workloads.sh returned $rc for $label ${w}"; fi
        if [[ $peer == f2fuse && $w != " " ]]; then
            status_snap "$after"
            emit_gc_delta "$label" "$w" "$before" "$after"
            if [[ $w == w5 ]]; then w5_extents "$label"; fi
        fi
        if ! mountpoint -q "$CUR_MNT" && [[ $peer != raw ]]; then
            log "ERROR: $CUR_MNT is no longer mounted after $w (daemon died?): $(tail -c 300 "$OUTDIR/logs/$label.daemon.log" 2> /dev/null | tr '\n' ' ')"
            emit "$label" meta status FAIL "unmounted-after-$w"
            break
        fi
    done
    emit "$label" meta suite_wall_s $((SECONDS - t0)) s
    teardown_peer
    log "$label done in $((SECONDS - t0))s"
}

# ---- environment record ----
{
    echo "date: $(date -Is)"
    echo "host: $(uname -srvm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "backing: $SCRATCH on $(df --output=source,fstype "$SCRATCH" | tail -1 | xargs)"
    echo "image: $IMG_SIZE, loop direct-io=$LOOP_DIO, ext4: ${MKFS_EXT4[*]:1}"
    echo "fio: $(fio --version); fuse2fs: $(dpkg-query -W -f='${Version}' fuse2fs 2> /dev/null || echo -)"
    if [[ $PEERS == *f2fuse* ]]; then
        echo "f2fuse: $F2FUSE ($("$F2FUSE" --version), commit $(git -C "$(dirname "$F2FUSE")" rev-parse --short HEAD 2> /dev/null || echo ?)); mkfs: $F2FUSE_MKFS; opts: ${F2FUSE_OPTS:-default}; status cmd: $HAVE_STATUS; extents cmd: $HAVE_EXTENTS"
    fi
    echo "peers: $PEERS; workloads: $WORKLOADS; repeat: ${REPEAT:-none}"
    [[ -n $POLICY_WL ]] && echo "policy: $POLICY_WL $POLICY_NAME=${POLICY_VALUES[*]}"
    env | grep -E '^(W[0-9A-Z_]*|REPEAT_ROUNDS)=' | sort
} > "$OUTDIR/env.txt"
cat "$OUTDIR/env.txt" >&2

T0=$SECONDS
if [[ -n $POLICY_WL ]]; then
    labels=()
    for v in "${POLICY_VALUES[@]}"; do
        run_peer "$POLICY_NAME=$v" f2fuse "$POLICY_NAME=$v"
        labels+=("$POLICY_NAME=$v")
    done
    "$REPORT_PY" "$HERE/report.py" "$CSV" --policy "$POLICY_WL" --labels "$(IFS=,; echo "${labels[*]}")" |
        tee "$OUTDIR/results.md"
else
    for peer in $PEERS; do run_peer "$peer" "$peer"; done
    "$REPORT_PY" "$HERE/report.py" "$CSV" --labels "$(echo "$PEERS" | xargs | tr ' ' ,)" --outdir "$OUTDIR" \
        --title "f2fuse vs peers, $(date +%Y-%m-%d), $(nproc) CPUs, image $IMG_SIZE, backing $SCRATCH" |
        tee "$OUTDIR/results.md"
fi
log "all done in $((SECONDS - T0))s; results in $OUTDIR"
if grep -q ',status,FAIL,' "$CSV"; then
    log "FAILURES: $(grep ',status,FAIL,' "$CSV" | cut -d, -f2-6 | tr '\n' ' ')"
    exit 1
fi
