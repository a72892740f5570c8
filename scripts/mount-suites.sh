#!/usr/bin/env bash
# External test suites through `f2fuse mount` (release build), each on a fresh
# image, each followed by unmount, a wait until the daemon has released the
# image and `fsck.f2fs --dry-run` (must be clean):
#
#   pjdfstest      POSIX conformance (scripts/pjdfstest.sh, 0 failed)
#   pjdfstest-daemon  the same without default_permissions (the daemon
#                  checks permissions)
#   fio-buffered   randwrite + crc32c verify through the page cache
#   fio-direct     the same with O_DIRECT (every read and write reaches us)
#   fio-remount    write, unmount, fsck, mount again, verify only
#   fio-randrw     randrw, mixed block sizes (--bssplit), libaio, O_DIRECT
#   stress-ng      file-system stressors with --verify, 60 s
#   dbench         4 clients, 20 s
#   namespace      3 processes creating, linking, renaming, unlinking, setting
#                  xattrs in a shared tree + 1 writing fsync'd files, 60 s
#   kill9-N        namespace stress + fsync'd files, kill -9 of the daemon
#                  after ~10 s, remount (recovery): fsync'd data present,
#                  fsck clean after the recovering mount's unmount (3 times)
#
#   scripts/mount-suites.sh              # everything (about 5 minutes)
#   scripts/mount-suites.sh fio stress   # only suites whose name matches
#
# Needs root, /dev/fuse, fuse3, f2fs-tools, psmisc, attr, fio, stress-ng,
# dbench, cargo. KEEP=1 keeps the work directory. Exits non-zero if any suite
# failed (the failing suites are named in the summary table).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/.cargo/bin:/usr/sbin:/sbin"

for tool in fio stress-ng dbench fuser setfattr fusermount3 fsck.f2fs; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "mount-suites: missing $tool (apt-get install fio stress-ng dbench psmisc attr fuse3 f2fs-tools)" >&2
        exit 2
    fi
done

echo "== building f2fuse (release)"
cargo build --release -q -p f2fuse || {
    echo "mount-suites: build failed" >&2
    exit 2
}
f2fuse=${CARGO_TARGET_DIR:-$PWD/target}/release/f2fuse
opts=allow_other,default_permissions

work=$(mktemp -d /tmp/f2fuse-suites.XXXXXX)
chmod 755 "$work"
img=""
mnt=""
failed=0
declare -a rows=()

unmount_and_wait() {
    if mountpoint -q "$mnt"; then
        local tries=0
        until fusermount3 -u "$mnt" 2>/dev/null; do
            tries=$((tries + 1))
            if [ "$tries" -ge 50 ]; then
                fusermount3 -u -z "$mnt" || true
                break
            fi
            sleep 0.2
        done
    fi
    while fuser -s "$img" 2>/dev/null; do sleep 0.1; done
}

cleanup() {
    [ -n "${load_pids:-}" ] && kill $load_pids 2>/dev/null
    if [ -n "$mnt" ]; then unmount_and_wait; fi
    if [ -n "${KEEP:-}" ] || [ "$failed" -ne 0 ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

# fsck_clean LOG: the image passes `fsck.f2fs --dry-run` with no [Fail] line.
fsck_clean() {
    echo n | fsck.f2fs --dry-run "$img" >"$1" 2>&1 && ! grep -q '\[Fail\]' "$1"
}

# mount_img: mounts $img on $mnt. The daemon must not inherit fd 3 (the
# pipe a suite's note is read from), or reading the note never ends.
mount_img() {
    "$f2fuse" mount "$img" "$mnt" -o "$opts" 3>&-
}

# fresh NAME: new image and mount for suite NAME.
fresh() {
    img=$work/$1.img
    mnt=$work/$1.mnt
    mkdir -p "$mnt"
    "$f2fuse" mkfs "$img" --size "${SIZE:-2G}" -q &&
        mount_img
}

# finish: unmount, wait for the daemon, fsck. Returns non-zero on corruption.
finish() {
    unmount_and_wait
    fsck_clean "$work/$suite.fsck.log"
}

record() { # record RESULT SECONDS NOTE
    rows+=("$(printf '%-14s %-5s %6s  %s' "$suite" "$1" "$2" "$3")")
    if [ "$1" != ok ]; then
        failed=1
        echo "!! $suite FAILED: $3 (logs in $work)" >&2
    else
        echo "   $suite: ok ($2 s) $3"
    fi
}

# run_suite NAME FUNCTION: fresh image, FUNCTION (its stdout+stderr go to
# NAME.log; it prints a one-line note on fd 3), unmount, fsck.
run_suite() {
    suite=$1
    if [ -n "$filter" ] && ! grep -qE "$filter" <<<"$suite"; then return; fi
    echo "== $suite"
    local start end note status
    start=$(date +%s)
    if ! fresh "$suite" >"$work/$suite.log" 2>&1; then
        record FAIL 0 "mkfs/mount failed (see $suite.log)"
        return
    fi
    note=$("$2" 3>&1 >>"$work/$suite.log" 2>&1)
    status=$?
    if [ $status -ne 0 ]; then
        unmount_and_wait
        end=$(date +%s)
        record FAIL $((end - start)) "${note:-exit $status} (see $suite.log)"
        return
    fi
    if ! finish; then
        end=$(date +%s)
        record FAIL $((end - start)) "$note; fsck.f2fs NOT clean (see $suite.fsck.log)"
        return
    fi
    end=$(date +%s)
    record ok $((end - start)) "$note; fsck clean"
}

fio_ok() { # fio_ok LOG: exit 0 was checked; every job reports err= 0
    ! grep -E 'err= *[1-9]' "$1" >/dev/null && ! grep -qi 'verify: bad' "$1"
}

fio_run() { # fio_run NAME ARGS...: runs fio in $mnt/fio, logs to $work/$suite.fio.log
    mkdir -p "$mnt/fio"
    local log=$work/$suite.fio.log
    # From the work directory: fio keeps its verify state files in the current one.
    (cd "$work" && timeout 300 fio --directory="$mnt/fio" --verify=crc32c --numjobs=2 \
        --group_reporting "$@" >>"$log" 2>&1) &&
        fio_ok "$log"
}

fio_bw() { grep -oE '(READ|WRITE): bw=[^ ]+' "$work/$suite.fio.log" | tr '\n' ' '; }

# ---- the suites ----

suite_pjdfstest() {
    # scripts/pjdfstest.sh makes its own image and does its own fsck.
    unmount_and_wait
    scripts/pjdfstest.sh 3>&-
    local status=$?
    local summary
    summary=$(grep -E '^Summary' "$work/$suite.log" | sed 's/^Summary: //; s/, 0 expected failures//')
    echo "$summary" >&3
    # The runner unmounts and checks this suite's (unused) image as well.
    mount_img
    return $status
}

suite_pjdfstest_daemon() {
    DAEMON_CHECKS=1 suite_pjdfstest
}

suite_fio_buffered() {
    fio_run --name=v --size=128M --bs=4k --rw=randwrite --ioengine=psync \
        --verify_fatal=1 --do_verify=1 || return 1
    echo "$(fio_bw)" >&3
}

suite_fio_direct() {
    fio_run --name=vd --size=64M --bs=4k --rw=randwrite --direct=1 --ioengine=psync \
        --verify_fatal=1 --do_verify=1 || return 1
    echo "$(fio_bw)" >&3
}

suite_fio_remount() {
    fio_run --name=pv --size=64M --bs=4k --rw=randwrite --ioengine=psync \
        --do_verify=0 --verify_state_save=1 --fsync_on_close=1 || return 1
    unmount_and_wait
    if ! fsck_clean "$work/$suite.fsck1.log"; then
        echo "fsck.f2fs NOT clean after the writing mount" >&3
        return 1
    fi
    mount_img || return 1
    fio_run --name=pv --size=64M --bs=4k --rw=randwrite --ioengine=psync \
        --verify_only --verify_state_load=1 --verify_fatal=1 || return 1
    echo "verified after remount" >&3
}

suite_fio_randrw() {
    fio_run --name=mix --size=96M --rw=randrw --bssplit=4k/40:8k/15:16k/15:64k/15:256k/10:1m/5 \
        --ioengine=libaio --iodepth=16 --direct=1 --verify_fatal=1 --do_verify=1 \
        --verify_backlog=1024 || return 1
    echo "$(fio_bw)" >&3
}

suite_stress_ng() {
    mkdir -p "$mnt/sn"
    (cd "$mnt/sn" && timeout 180 stress-ng --timeout "${STRESS_SECS:-60}" --metrics-brief --verify \
        --temp-path "$mnt/sn" \
        --dir 1 --dentry 1 --rename 1 --link 1 --symlink 1 --xattr 1 \
        --fallocate 1 --fallocate-bytes 128M --hdd 2 --hdd-bytes 32M --seek 1 --seek-size 32M \
        --sync-file 1 --sync-file-bytes 128M --chown 1 --chmod 1 --utime 1 \
        --filename 1 --io 1 --lockf 1) || return 1
    if ! grep -q 'successful run' "$work/$suite.log"; then
        echo "stress-ng did not report a successful run" >&3
        return 1
    fi
    # Sizes bounded so the stressors do not fill the image (their defaults,
    # 1 GiB each for fallocate and sync-file, would: see the ENOSPC note in
    # the report of the run that found it).
    echo "successful run, 17 workers, ${STRESS_SECS:-60} s" >&3
}

suite_dbench() {
    mkdir -p "$mnt/db"
    timeout 120 dbench -D "$mnt/db" -t "${DBENCH_SECS:-20}" 4 || return 1
    local tput
    tput=$(grep -E '^Throughput' "$work/$suite.log" | tail -1)
    [ -n "$tput" ] || return 1
    echo "$tput" >&3
}

# The kill -9 workload: shell loops on a shared tree; `sync/` gets files
# written with fsync whose hashes are recorded (after the fsync returned).
start_load() {
    local m=$1 rec=$2
    load_pids=""
    mkdir -p "$m/ns" "$m/sync"
    for w in 1 2 3; do
        (
            i=0
            while [ -d "$m/ns" ]; do
                i=$((i + 1))
                d=$m/ns/w$w.$((i % 7))
                mkdir -p "$d" 2>/dev/null
                echo "$w $i" >"$d/f$i" 2>/dev/null
                ln "$d/f$i" "$m/ns/l$w.$i" 2>/dev/null
                mv "$d/f$i" "$m/ns/w$w.$(((i + 3) % 7))/g$i" 2>/dev/null
                setfattr -n user.k$((i % 5)) -v "v$i" "$m/ns/l$w.$i" 2>/dev/null
                rm -f "$m/ns/l$w.$((i - 20))" "$m/ns/w$w.$(((i - 17) % 7))/g$((i - 17))" 2>/dev/null
                [ $((i % 50)) -eq 0 ] && rm -rf "$m/ns/w$w.$(((i + 1) % 7))" 2>/dev/null
            done
        ) 3>&- &
        load_pids="$load_pids $!"
    done
    (
        i=0
        while [ -d "$m/sync" ]; do
            i=$((i + 1))
            name=$(date +%s%N).$i
            head -c $((4096 + (i % 40) * 1000)) /dev/urandom >"$work/sync.tmp"
            if dd if="$work/sync.tmp" of="$m/sync/$name" bs=64k conv=fsync status=none 2>/dev/null; then
                echo "$name $(sha256sum <"$work/sync.tmp" | cut -d' ' -f1)" >>"$rec"
            fi
        done
    ) 3>&- &
    load_pids="$load_pids $!"
}

suite_namespace() {
    # The kill -9 rounds' workload for a whole minute, then a clean stop:
    # every file whose fsync returned must be there with its content.
    local rec=$work/namespace.records
    : >"$rec"
    start_load "$mnt" "$rec"
    sleep "${NAMESPACE_SECS:-60}"
    kill $load_pids 2>/dev/null
    wait $load_pids 2>/dev/null
    load_pids=""
    local name sum bad=0
    while read -r name sum; do
        [ "$(sha256sum <"$mnt/sync/$name" | cut -d' ' -f1)" = "$sum" ] || bad=$((bad + 1))
    done <"$rec"
    ls -R "$mnt/ns" >/dev/null || return 1
    if [ "$bad" -ne 0 ]; then
        echo "$bad of $(wc -l <"$rec") fsync'd files missing or different" >&3
        return 1
    fi
    echo "4 writers ${NAMESPACE_SECS:-60} s, $(wc -l <"$rec") fsync'd files intact" >&3
}

suite_kill9() {
    local rec=$work/kill9.records
    : >"$rec"
    local round
    for round in 1 2 3; do
        start_load "$mnt" "$rec"
        sleep "${KILL_AFTER:-10}"
        local pid
        pid=$(fuser "$img" 2>/dev/null | tr -s ' ' '\n' | grep -E '^[0-9]+$' | head -1)
        if [ -z "$pid" ]; then
            echo "round $round: no daemon holds the image" >&3
            return 1
        fi
        kill -9 "$pid"
        kill $load_pids 2>/dev/null
        wait $load_pids 2>/dev/null
        load_pids=""
        fusermount3 -u -z "$mnt" 2>/dev/null
        while fuser -s "$img" 2>/dev/null; do sleep 0.1; done
        # Recovery mount.
        if ! mount_img; then
            echo "round $round: the recovering mount failed" >&3
            return 1
        fi
        local name sum missing=0 total=0
        while read -r name sum; do
            total=$((total + 1))
            if [ "$(sha256sum <"$mnt/sync/$name" 2>/dev/null | cut -d' ' -f1)" != "$sum" ]; then
                echo "round $round: fsync'd file sync/$name missing or different"
                missing=$((missing + 1))
            fi
        done <"$rec"
        ls -R "$mnt" >/dev/null || {
            echo "round $round: cannot list the recovered tree" >&3
            return 1
        }
        unmount_and_wait
        if ! fsck_clean "$work/$suite.fsck$round.log"; then
            echo "round $round: fsck.f2fs NOT clean after recovery" >&3
            return 1
        fi
        if [ "$missing" -ne 0 ]; then
            echo "round $round: $missing of $total fsync'd files lost" >&3
            return 1
        fi
        echo "round $round: $total fsync'd files intact, fsck clean"
        [ "$round" -lt 3 ] && { mount_img || return 1; }
    done
    mount_img || return 1
    echo "3 rounds, $(wc -l <"$rec") fsync'd files intact after each recovery" >&3
}

filter=""
if [ $# -gt 0 ]; then filter=$(
    IFS='|'
    echo "$*"
); fi
total_start=$(date +%s)

run_suite pjdfstest suite_pjdfstest
run_suite pjdfstest-daemon suite_pjdfstest_daemon
run_suite fio-buffered suite_fio_buffered
run_suite fio-direct suite_fio_direct
run_suite fio-remount suite_fio_remount
run_suite fio-randrw suite_fio_randrw
run_suite stress-ng suite_stress_ng
run_suite dbench suite_dbench
run_suite namespace suite_namespace
run_suite kill9 suite_kill9

total_end=$(date +%s)
echo
echo "== summary ($((total_end - total_start)) s)"
printf '%-14s %-5s %6s  %s\n' suite result secs note
for row in "${rows[@]}"; do echo "$row"; done
passed=$(printf '%s\n' "${rows[@]}" | awk '$2 == "ok"' | wc -l)
echo "mount-suites: $passed passed, $((${#rows[@]} - passed)) failed"
exit "$failed"
