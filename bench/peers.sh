# shellcheck shell=bash
# bench/lib/peers.sh -- the peers of bench/run.sh and bench/parallel.sh: a fresh image per
# peer, mounted, waited for, and taken down again. Sourced (not run); sets no shell options.
# Not part of the shared kit that the rest of lib/ copies (see bench/README.md).
#
# The caller sets, before it calls a function below:
#   SCRATCH (absolute), IMG_SIZE, LOOP_DIO    images and mount points
#   OUTDIR                                     daemon logs go to OUTDIR/logs/LABEL.daemon.log
#   F2FUSE                                     the f2fuse binary setup_f2fuse formats and mounts with
#   F2FUSE_MKFS=f2fuse|mkfs.f2fs               formatter (unset: f2fuse)
#   F2FUSE_OPTS                                `-o` options for every f2fuse mount
#   NULL_FS                                    the null_fs example binary setup_null mounts
# One peer is set up at a time; CUR_* below describe it (only what this file created),
# and teardown_peer undoes it. setup_PEER LABEL [MOUNT_OPTION] returns non-zero if the
# peer could not be set up (call it where set -e is off: `if !`, `||`); the caller then
# still calls teardown_peer.

log() { echo "== $(date +%H:%M:%S) $*" >&2; }

# ---- state of the peer that is set up ----
CUR_MNT="" CUR_LOOP="" CUR_IMG="" CUR_PID="" CUR_RAW=""

MKFS_EXT4=(mkfs.ext4 -q -F -m 0 -E "lazy_itable_init=0,lazy_journal_init=0")

# ---- teardown ----
unmount_peer() {  # unmount, let a FUSE daemon finish its last writes, detach the loop device
    local _
    if [[ -n $CUR_MNT ]] && mountpoint -q "$CUR_MNT"; then
        for _ in $(seq 1 10); do
            umount "$CUR_MNT" 2> /dev/null && break
            sleep 1
        done
        if mountpoint -q "$CUR_MNT"; then
            log "WARNING: $CUR_MNT busy; lazy unmount"
            umount -l "$CUR_MNT" || true
        fi
    fi
    if [[ -n $CUR_PID ]]; then  # a FUSE daemon we started
        for _ in $(seq 1 120); do kill -0 "$CUR_PID" 2> /dev/null || break; sleep 0.5; done
        if kill -0 "$CUR_PID" 2> /dev/null; then
            log "WARNING: daemon pid $CUR_PID still alive 60 s after unmount; sending TERM"
            kill "$CUR_PID" 2> /dev/null || true
            sleep 2
            kill -0 "$CUR_PID" 2> /dev/null && kill -KILL "$CUR_PID" 2> /dev/null
        fi
        wait "$CUR_PID" 2> /dev/null || true
    fi
    if [[ -n $CUR_LOOP ]]; then losetup -d "$CUR_LOOP" || log "WARNING: could not detach $CUR_LOOP"; fi
    CUR_PID="" CUR_LOOP=""
}

teardown_peer() {  # unmount_peer, then remove the image, the raw directory and the mount point
    unmount_peer
    if [[ -n $CUR_IMG ]]; then rm -f "$CUR_IMG"; fi
    if [[ -n $CUR_RAW ]]; then rm -rf "$CUR_RAW"; fi
    if [[ -n $CUR_MNT && -d $CUR_MNT ]]; then rmdir "$CUR_MNT" 2> /dev/null || true; fi
    CUR_MNT="" CUR_IMG="" CUR_RAW=""
}

cleanup() {  # the EXIT trap: tear the peer down, remove SCRATCH if empty, keep the exit status
    local rc=$?
    set +e
    trap - EXIT INT TERM
    teardown_peer
    rmdir "$SCRATCH" 2> /dev/null
    [[ $rc -ne 0 ]] && log "exit status $rc; partial results in $OUTDIR"
    exit "$rc"
}

cleanup_on_exit() {  # cleanup_on_exit: install cleanup on every way out
    trap cleanup EXIT
    trap 'log interrupted; exit 130' INT TERM
}

# ---- setup ----
new_image() { CUR_IMG=$SCRATCH/$1.img CUR_MNT=$SCRATCH/mnt-$1 && rm -f "$CUR_IMG" && truncate -s "$IMG_SIZE" "$CUR_IMG" && mkdir -p "$CUR_MNT"; }
new_loop() { CUR_LOOP=$(losetup -f --show --direct-io="$LOOP_DIO" "$CUR_IMG") && [[ -b $CUR_LOOP ]]; }

wait_mounted() {  # wait_mounted WHAT LOGFILE: the daemon (CUR_PID) mounted CUR_MNT
    local _
    for _ in $(seq 1 150); do
        mountpoint -q "$CUR_MNT" && return 0
        kill -0 "$CUR_PID" 2> /dev/null || break
        sleep 0.2
    done
    log "$1 did not mount: $(tail -c 400 "$2" | tr '\n' ' ')"
    return 1
}

setup_raw()   { CUR_RAW=$SCRATCH/raw && CUR_MNT=$CUR_RAW && rm -rf "$CUR_RAW" && mkdir -p "$CUR_RAW"; }
setup_null() {  # the FUSE limit: crates/fuse/examples/null_fs (stores nothing; negotiates as f2fuse)
    local lf=$OUTDIR/logs/$1.daemon.log
    CUR_MNT=$SCRATCH/mnt-$1 && mkdir -p "$CUR_MNT" || return 1
    "$NULL_FS" "$CUR_MNT" > "$lf" 2>&1 &
    CUR_PID=$!
    wait_mounted null_fs "$lf"
}
setup_ext4()  { new_image "$1" && new_loop && "${MKFS_EXT4[@]}" "$CUR_LOOP" && mount "$CUR_LOOP" "$CUR_MNT"; }
setup_xfs()   { new_image "$1" && new_loop && mkfs.xfs -q -f "$CUR_LOOP" && mount "$CUR_LOOP" "$CUR_MNT"; }
setup_btrfs() { new_image "$1" && new_loop && mkfs.btrfs -q -f "$CUR_LOOP" > /dev/null && mount "$CUR_LOOP" "$CUR_MNT"; }
setup_fuse2fs() {
    local lf=$OUTDIR/logs/$1.daemon.log
    new_image "$1" && "${MKFS_EXT4[@]}" "$CUR_IMG" || return 1
    fuse2fs "$CUR_IMG" "$CUR_MNT" -f > "$lf" 2>&1 &
    CUR_PID=$!
    wait_mounted fuse2fs "$lf"
}
setup_f2fuse() {  # setup_f2fuse LABEL [EXTRA_OPTION]: $F2FUSE mounts, with F2FUSE_OPTS and EXTRA_OPTION
    local lf=$OUTDIR/logs/$1.daemon.log
    new_image "$1" || return 1
    if [[ ${F2FUSE_MKFS:-f2fuse} == mkfs.f2fs ]]; then
        mkfs.f2fs -q -f "$CUR_IMG" > "$lf" 2>&1 || return 1
    else
        "$F2FUSE" mkfs -q "$CUR_IMG" > "$lf" 2>&1 || return 1
    fi
    local opts=${F2FUSE_OPTS:-} mount_args=()
    [[ -n ${2:-} ]] && opts=${opts:+$opts,}$2
    [[ -n $opts ]] && mount_args=(-o "$opts")
    "$F2FUSE" mount "$CUR_IMG" "$CUR_MNT" -f "${mount_args[@]}" >> "$lf" 2>&1 &
    CUR_PID=$!
    wait_mounted "f2fuse mount ${mount_args[*]}" "$lf"
}
