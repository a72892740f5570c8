#!/usr/bin/env bash
# Every test: the Rust test suites (unit, integration, power-cut, model,
# mount tests), then the external suites through a FUSE mount
# (scripts/mount-suites.sh: pjdfstest, fio verify, stress-ng, dbench, kill -9
# rounds; fsck.f2fs after each), then the README's quick start (scripts/demo.sh).
# Needs root and /dev/fuse for the last two parts;
# without them it is skipped with a note, and fails under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/.cargo/bin:/usr/sbin:/sbin"
SECONDS=0

echo "== cargo test --workspace --locked"
cargo test --workspace --locked

if [ "$(id -u)" -ne 0 ] || [ ! -e /dev/fuse ]; then
    if [ -n "${CI:-}" ]; then
        echo "test-all: the mount suites need root and /dev/fuse" >&2
        exit 1
    fi
    echo "test-all: not root or no /dev/fuse: mount suites skipped"
    exit 0
fi
echo "== scripts/mount-suites.sh (at ${SECONDS} s)"
scripts/mount-suites.sh
echo "== scripts/demo.sh (the README's quick start) (at ${SECONDS} s)"
demo_dir=$(mktemp -d /tmp/f2fuse-demo-ci.XXXXXX)
scripts/demo.sh "$demo_dir" >"$demo_dir.log" 2>&1 || {
    tail -20 "$demo_dir.log" >&2
    echo "test-all: the quick start failed (log: $demo_dir.log)" >&2
    exit 1
}
rm -rf "$demo_dir" "$demo_dir.log"
echo "quick start: ok"
echo "test-all: passed in ${SECONDS} s"
