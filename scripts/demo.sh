#!/usr/bin/env bash
# Quick start: build f2fuse, format an image, fill it, and read everything back.
# Usage: scripts/demo.sh [WORKDIR]   (default: a fresh temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d /tmp/f2fuse-demo.XXXXXX)}"
mkdir -p "$work"
export PATH="$PATH:/usr/sbin:/sbin"

echo "== building (release)"
cargo build --release --quiet
f2fuse="$PWD/target/release/f2fuse"

echo "== f2fuse mkfs $work/demo.img --size 256M -O extra_attr,inode_checksum,lost_found"
"$f2fuse" mkfs "$work/demo.img" --size 256M -O extra_attr,inode_checksum,lost_found

if command -v sload.f2fs >/dev/null 2>&1; then
    # Until the writer lands, f2fs-tools' sload fills the image; f2fuse reads it.
    echo "== sload.f2fs: copying this repository's sources into the image"
    sload.f2fs -P -f "$PWD/crates" "$work/demo.img" >/dev/null
else
    echo "(sload.f2fs not installed: the image stays empty; apt-get install f2fs-tools to fill it)"
fi

echo "== f2fuse info"
"$f2fuse" info "$work/demo.img"
echo "== f2fuse ls -l / and /engine/src"
"$f2fuse" ls -l "$work/demo.img" /
"$f2fuse" ls -l "$work/demo.img" /engine/src 2>/dev/null || true
echo "== f2fuse extract, then compare with the source"
"$f2fuse" extract --quiet "$work/demo.img" "$work/out"
if command -v sload.f2fs >/dev/null 2>&1; then
    diff -r -x lost+found "$PWD/crates" "$work/out" && echo "extracted tree is identical to the source"
fi
if command -v fsck.f2fs >/dev/null 2>&1; then
    echo "== fsck.f2fs (dry run)"
    echo n | fsck.f2fs --dry-run "$work/demo.img" | grep -E '^\[FSCK\]' || true
fi
echo "demo files are in $work"
