#!/bin/sh
# Rebuilds seeds/plain.f2sparse and seeds/features.f2sparse: two 96 MiB
# images made by mkfs.f2fs and sload.f2fs (f2fs-tools 1.15), stored as
# their non-zero blocks only. Run from the fuzz directory: sh seeds/make_seeds.sh
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src/dir" "$src/a/b/c"
printf 'hello, inline world\n' > "$src/inline.txt"
head -c 9000 /dev/urandom > "$src/small.bin"
# A direct node (block 1023) and an indirect node (block 3327), sparse between.
head -c 4096 /dev/urandom | dd of="$src/sparse.bin" bs=4096 seek=1023 2>/dev/null
head -c 4096 /dev/urandom | dd of="$src/huge.bin" bs=4096 seek=3327 2>/dev/null
ln -s inline.txt "$src/link"
i=0
while [ $i -lt 30 ]; do
    printf '%s\n' $i > "$src/dir/entry-$i-with-a-name-long-enough-to-need-several-slots"
    i=$((i + 1))
done
printf 'deep\n' > "$src/a/b/c/leaf.txt"
for kind in plain features; do
    img=$work/$kind.f2fs
    truncate -s 96M "$img"
    if [ $kind = plain ]; then
        mkfs.f2fs -q -f -t 0 "$img"
    else
        # Not flexible_inline_xattr: sload.f2fs 1.15 writes such inodes with
        # inline_xattr_size 0 and its own final fsck pass has to repair them.
        mkfs.f2fs -q -f -t 0 -O extra_attr,inode_checksum,sb_checksum,inode_crtime "$img"
    fi
    sload.f2fs -P -f "$src" "$img" > /dev/null || { echo "sload.f2fs failed" >&2; exit 1; }
    fsck.f2fs --dry-run "$img" > /dev/null || { echo "fsck.f2fs failed" >&2; exit 1; }
    cargo run -q --example pack_image -- "$img" "seeds/$kind.f2sparse"
done
