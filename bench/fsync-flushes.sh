#!/usr/bin/env bash
# bench/fsync-flushes.sh -- device flushes per fsync and per checkpoint, through the
# mount: f2fuse on a fresh image, then phases of N operations each, the daemon's
# flush and checkpoint counters (`f2fuse status MNT --json`) read before and after
# every phase. Root only. Prints CSV: phase,ops,flushes,checkpoints,flushes_per_op.
#
#   rewrite    open, 4 KiB pwrite at a random block of one of 64 files written and
#              synced before, fsync, close (the W2 rewrite; in place with the
#              kernel's default ipu_policy on a 1 GiB image)
#   rewrite4   the same from 4 threads at once, each on its own 16 files (concurrent
#              fsyncs share flushes: fewer than one per fsync)
#   rewrite0   the same with ipu_policy=0 (every rewrite out of place: new data)
#   refsync    fsync of a file nothing was written to since its last fsync
#   append     open, 4 KiB write at the end of a new file, fsync, close
#   syncfs     `sync -f MNT` (a checkpoint)
#
# Knobs: F2FUSE=<repo>/target/release/f2fuse (built when unset), N=1000,
#   SCRATCH=/var/tmp/f2fuse-flushes, IMG_SIZE=1G, OUTDIR=SCRATCH/out (daemon log)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source-path=SCRIPTDIR source=peers.sh
source "$HERE/peers.sh"

[[ $EUID -eq 0 ]] || { echo "bench/fsync-flushes.sh: must run as root" >&2; exit 1; }
N=${N:-1000}
SCRATCH=${SCRATCH:-/var/tmp/f2fuse-flushes}
IMG_SIZE=${IMG_SIZE:-1G}
LOOP_DIO=on
OUTDIR=${OUTDIR:-$SCRATCH/out}
if [[ -z ${F2FUSE:-} ]]; then
    F2FUSE=$REPO/target/release/f2fuse
    (cd "$REPO" && cargo build --release -p f2fuse) >&2
fi
mkdir -p "$SCRATCH" "$OUTDIR/logs"
cleanup_on_exit
setup_f2fuse flushes || exit 1
log "load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$CUR_MNT" "$N" "$F2FUSE" <<'EOF'
import json, os, random, subprocess, sys, threading

mnt, n, f2fuse = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(17)
block = os.urandom(4096)


def counters():
    doc = json.loads(subprocess.run([f2fuse, "status", mnt, "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    return doc["io"]["flushes"], doc["checkpoints"]


def phase(name, op, calls=n, ops=None):
    """Runs op `calls` times; `ops` fsyncs (or syncs) in all (default: one a call)."""
    ops = ops or calls
    f0, c0 = counters()
    for i in range(calls):
        op(i)
    f1, c1 = counters()
    print(f"{name},{ops},{f1 - f0},{c1 - c0},{(f1 - f0) / ops:.3f}", flush=True)


files = [os.path.join(mnt, f"f{i:02d}") for i in range(64)]
for path in files:
    with open(path, "wb") as f:
        f.write(os.urandom(32 << 10))
os.sync()


def rewrite(_):
    fd = os.open(rng.choice(files), os.O_WRONLY)
    os.pwrite(fd, block, rng.randrange(8) * 4096)
    os.fsync(fd)
    os.close(fd)


def rewrite4(_):
    def worker(t):
        mine, r = files[t::4], random.Random(t)
        for _ in range(n // 4):
            fd = os.open(r.choice(mine), os.O_WRONLY)
            os.pwrite(fd, block, r.randrange(8) * 4096)
            os.fsync(fd)
            os.close(fd)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def append(i):
    fd = os.open(os.path.join(mnt, f"new{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, block)
    os.fsync(fd)
    os.close(fd)


held = os.open(files[0], os.O_WRONLY)
os.fsync(held)
print("phase,ops,flushes,checkpoints,flushes_per_op")
phase("rewrite", rewrite)
phase("rewrite4", rewrite4, calls=1, ops=4 * (n // 4))
phase("refsync", lambda _: os.fsync(held))
subprocess.run([f2fuse, "tune", mnt, "ipu_policy=0"], check=True, capture_output=True)
phase("rewrite0", rewrite)
phase("append", append)
phase("syncfs", lambda _: subprocess.run(["sync", "-f", mnt], check=True), calls=max(1, n // 100))
os.close(held)
EOF
