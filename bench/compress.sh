#!/bin/bash
# W4-style comparison of compressed and plain files through an f2fuse mount:
# one thread, buffered sequential writes of one file (end fsync), then a
# cold sequential read; prints MiB/s, the space each file took, and for the
# compressed one the blocks compression saved, which F2FS keeps reserved
# until F2FS_IOC_RELEASE_COMPRESS_BLOCKS gives them back (done last).
#
#   bench/compress.sh            (env: SIZE=256m BS=1m COMPRESSIBLE=70 ALGO=lz4 LOG=2)
#
# COMPRESSIBLE is fio's buffer_compress_percentage. Cold reads need root
# (drop_caches); without it the reads come from the page cache.
set -euo pipefail
SIZE=${SIZE:-256m} BS=${BS:-1m} COMPRESSIBLE=${COMPRESSIBLE:-70}
ALGO=${ALGO:-lz4} LOG=${LOG:-2}
cd "$(dirname "$0")/.."
cargo build --release -q -p f2fuse
F2FUSE=$PWD/target/release/f2fuse
TMP=$(mktemp -d)
cleanup() {
    fusermount3 -u "$TMP/mnt" 2>/dev/null || true
    while fuser -s "$TMP/img" 2>/dev/null; do sleep 0.1; done
    rm -rf "$TMP"
}
trap cleanup EXIT
"$F2FUSE" mkfs "$TMP/img" --size 2G -O extra_attr,compression -q
mkdir "$TMP/mnt"
# Files named *.z are compressed, others not.
"$F2FUSE" mount "$TMP/img" "$TMP/mnt" \
    -o "compress_extension=z,compress_algorithm=$ALGO,compress_log_size=$LOG"
free_kib() { sync; stat -f -c '%f * %S / 1024' "$TMP/mnt" | bc; }
fio_mibs() {  # fio_mibs RW FILE: MiB/s of one fio job
    fio --name=w4 --filename="$2" --rw="$1" --bs="$BS" --size="$SIZE" \
        --ioengine=psync --end_fsync=1 --buffer_compress_percentage="$COMPRESSIBLE" \
        --refill_buffers --output-format=json |
        python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; \
print('%.0f' % ((j['write']['bw'] or j['read']['bw']) / 1024))"
}
# F2FS_IOC_RELEASE_COMPRESS_BLOCKS on a file: prints the blocks released.
release() {
    python3 -c 'import fcntl, struct, sys
buf = bytearray(8)
fcntl.ioctl(open(sys.argv[1], "rb"), 0x8008F512, buf)
print(struct.unpack("Q", buf)[0])' "$1"
}
printf '| file | write MiB/s | cold read MiB/s | space used MiB | after release MiB |\n|---|---|---|---|---|\n'
for f in plain.data compressed.z; do
    before=$(free_kib)
    w=$(fio_mibs write "$TMP/mnt/$f")
    used=$(( (before - $(free_kib)) / 1024 ))
    if [ "$(id -u)" = 0 ]; then echo 3 > /proc/sys/vm/drop_caches; fi
    r=$(fio_mibs read "$TMP/mnt/$f")
    released=0
    if [ "$f" = compressed.z ]; then released=$(release "$TMP/mnt/$f"); fi
    printf '| %s | %s | %s | %s | %s |\n' "$f" "$w" "$r" "$used" $(( used - released * 4 / 1024 ))
done
