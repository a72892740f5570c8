#!/usr/bin/env bash
# Quick start: build f2fuse, make an F2FS image from a folder, mount it with
# FUSE, use it, unmount, check it with fsck.f2fs (where f2fs-tools is not
# installed, with `f2fuse fsck`) and extract it again. Exits non-zero if a
# check finds a problem.
# Usage: scripts/demo.sh [WORKDIR]   (default: a fresh temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d /tmp/f2fuse-demo.XXXXXX)}"
mkdir -p "$work"
export PATH="$PATH:/usr/sbin:/sbin"

echo "== building (release)"
cargo build --release --quiet -p f2fuse
f2fuse="${CARGO_TARGET_DIR:-$PWD/target}/release/f2fuse"

echo "== f2fuse build crates/ $work/demo.img -O extra_attr,inode_checksum,lost_found"
"$f2fuse" build --quiet "$PWD/crates" "$work/demo.img" -O extra_attr,inode_checksum,lost_found
"$f2fuse" info "$work/demo.img" | sed -n '1,5p;/^Checkpoint/,/valid nodes/p'
echo "== f2fuse ls -l / and /engine/src"
"$f2fuse" ls -l "$work/demo.img" /
"$f2fuse" ls -l "$work/demo.img" /engine/src | sed -n 1,5p # not head: SIGPIPE fails pipefail

mnt="$work/mnt"
mkdir -p "$mnt"
if [ -e /dev/fuse ] && "$f2fuse" mount "$work/demo.img" "$mnt" 2>"$work/mount.err"; then
    echo "== mounted at $mnt"
    df -h "$mnt" | tail -1
    echo "hello from a FUSE mount" > "$mnt/hello.txt"
    cp -r "$PWD/docs" "$mnt/docs"
    ls -la "$mnt" | sed -n 1,8p
    fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt"
    # The daemon writes its final checkpoint after umount returns: wait for it.
    while fuser -s "$work/demo.img" 2>/dev/null; do sleep 0.1; done
    echo "== after unmount: $("$f2fuse" cat "$work/demo.img" /hello.txt)"
else
    echo "(FUSE not available here: $(cat "$work/mount.err" 2>/dev/null); skipping the mount part)"
fi

if command -v fsck.f2fs >/dev/null 2>&1; then
    echo "== fsck.f2fs --dry-run"
    fsck_ok=1
    echo n | fsck.f2fs --dry-run "$work/demo.img" >"$work/fsck.log" 2>&1 || fsck_ok=0
    grep -E '^\[FSCK\]' "$work/fsck.log" || true
    if [ "$fsck_ok" -eq 0 ] || grep -q '\[Fail\]' "$work/fsck.log"; then
        echo "fsck.f2fs finds the image damaged (log: $work/fsck.log)" >&2
        exit 1
    fi
else
    # Our own checker, so the image is still checked (exit 4 on a problem).
    echo "== f2fuse fsck (fsck.f2fs is not installed: apt-get install f2fs-tools)"
    "$f2fuse" fsck "$work/demo.img"
fi
echo "== f2fuse extract, then compare with the source"
"$f2fuse" extract --quiet "$work/demo.img" "$work/out"
diff -r "$PWD/crates" "$work/out" -x lost+found -x hello.txt -x docs && echo "extracted tree is identical to the source"
echo "demo files are in $work"
