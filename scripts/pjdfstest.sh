#!/usr/bin/env bash
# POSIX conformance of the FUSE mount: runs pjdfstest 0.2.2 (the Rust
# rewrite, from crates.io) on a fresh image mounted with
# `-o allow_other,default_permissions` (the kernel checks permissions), or
# with `-o allow_other` alone when DAEMON_CHECKS=1 (the daemon checks them),
# then unmounts, waits until the daemon has closed the image and checks it
# with fsck.f2fs.
#
#   scripts/pjdfstest.sh                 # the whole suite
#   scripts/pjdfstest.sh rename chmod    # only cases matching these patterns
#   DAEMON_CHECKS=1 scripts/pjdfstest.sh # the daemon's permission checks
#
# Environment: SIZE (image size, default 1G), MOUNT_OPTS (extra -o options),
# DAEMON_CHECKS=1 (no default_permissions), KEEP=1 keeps the work directory
# (image, pjd.log). Needs root (pjdfstest
# switches users), /dev/fuse, fusermount3 (fuse3), psmisc, f2fs-tools, cargo.
# Baseline: ext4 383 passed, 15 skipped, 0 failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/.cargo/bin:/usr/sbin:/sbin"

if ! pjdfstest --version 2>/dev/null | grep -qx 'pjdfstest 0.2.2'; then
    echo "== installing pjdfstest 0.2.2"
    cargo install pjdfstest --version 0.2.2 --locked
fi
for user in tests pjdfstest; do
    id -u "$user" >/dev/null 2>&1 ||
        printf '%s:x:::pjdfstest user:/:/usr/sbin/nologin\n' "$user" | newusers
done

echo "== building f2fuse"
cargo build --release -q -p f2fuse
f2fuse=${CARGO_TARGET_DIR:-$PWD/target}/release/f2fuse

work=$(mktemp -d /tmp/f2fuse-pjdfstest.XXXXXX)
chmod 755 "$work"
img=$work/img
mnt=$work/mnt
mkdir -p "$mnt" "$work/other"
cleanup() {
    if mountpoint -q "$mnt"; then fusermount3 -u -z "$mnt" || true; fi
    while fuser -s "$img" 2>/dev/null; do sleep 0.1; done
    if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

cat >"$work/pjdfstest.toml" <<'EOF'
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}
[settings]
naptime = 0.01
allow_remount = false
[dummy_auth]
entries = [ ["nobody", "nogroup"], ["tests", "tests"], ["pjdfstest", "pjdfstest"] ]
EOF

"$f2fuse" mkfs "$img" --size "${SIZE:-1G}" -q
opts=allow_other,default_permissions
if [ "${DAEMON_CHECKS:-0}" = 1 ]; then opts=allow_other; fi
echo "== mount -o $opts${MOUNT_OPTS:+,$MOUNT_OPTS}"
"$f2fuse" mount "$img" "$mnt" -o "$opts${MOUNT_OPTS:+,$MOUNT_OPTS}"
mkdir -p "$mnt/pjd"

echo "== pjdfstest"
start=$(date +%s.%N)
set +e
# -s: a directory on another file system, for the EXDEV cases.
pjdfstest -c "$work/pjdfstest.toml" -p "$mnt/pjd" -s "$work/other" "$@" >"$work/pjd.log" 2>&1
status=$?
set -e
end=$(date +%s.%N)
# Everything that is neither a pass nor a skip (failures and their reasons).
grep -vE $'(ok|skipped)$|^$|^Summary|^\t' "$work/pjd.log" | sed 's/^/  /' || true
grep -E '^Summary' "$work/pjd.log" || tail -5 "$work/pjd.log"
awk -v a="$start" -v b="$end" 'BEGIN { printf "pjdfstest took %.1f s\n", b - a }'

fusermount3 -u "$mnt"
while fuser -s "$img" 2>/dev/null; do sleep 0.1; done
if echo n | fsck.f2fs --dry-run "$img" >"$work/fsck.log" 2>&1 && ! grep -q '\[Fail\]' "$work/fsck.log"; then
    echo "fsck.f2fs: clean"
else
    echo "fsck.f2fs: NOT clean (see $work/fsck.log)"
    KEEP=1
    status=1
fi
exit "$status"
