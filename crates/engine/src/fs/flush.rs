//! Device flushes shared between concurrent callers (group commit, the
//! daemon's analogue of the kernel's flush_merge), and what they made
//! durable; and the per-file count of blocks written since the last fsync.

use crate::device::Device;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Flushes numbered in the order they start; one runs at a time.
#[derive(Default)]
struct GateState {
    started: u64,
    completed: u64,
    running: bool,
    /// The number of the last flush that failed (0: none).
    failed: u64,
    /// Callers waiting for a flush to end.
    waiting: usize,
}

/// Serves every caller of `flush` with one device flush that starts after
/// the call: callers arriving while a flush runs wait for it to end and
/// then share the next one, so N concurrent fsyncs cost about one flush
/// each step instead of N.
#[derive(Default)]
pub(super) struct FlushGate {
    state: Mutex<GateState>,
    finished: Condvar,
    /// `IoStats::data_written_out_of_place` when the last completed flush
    /// began: that much of the data at new addresses is on the disk.
    durable_written: AtomicU64,
}

impl FlushGate {
    /// Returns once a flush that started after this call has completed:
    /// every write that completed before the call is then durable.
    pub(super) fn flush(&self, dev: &Device) -> Result<()> {
        let mut state = self.state.lock();
        let needed = state.started + 1;
        loop {
            if state.completed >= needed {
                // `failed` is the latest failed flush: one after ours
                // failing fails us too. That errs on the safe side (the
                // caller marks the file system failed either way).
                return if state.failed >= needed {
                    Err(Error::io(
                        "flushing the device (a shared flush failed)",
                        io::Error::from_raw_os_error(libc::EIO),
                    ))
                } else {
                    Ok(())
                };
            }
            if !state.running {
                state.running = true;
                state.started += 1;
                let number = state.started;
                drop(state);
                let written = dev.io_stats().data_written_out_of_place();
                let result = dev.flush();
                if result.is_ok() {
                    self.durable_written.fetch_max(written, Ordering::AcqRel);
                }
                let mut state = self.state.lock();
                state.running = false;
                state.completed = number;
                if result.is_err() {
                    state.failed = number;
                }
                self.finished.notify_all();
                return result;
            }
            state.waiting += 1;
            self.finished.wait(&mut state);
            state.waiting -= 1;
        }
    }

    /// Whether data was written at a new address since the last completed
    /// flush began.
    pub(super) fn data_out_of_place_since_flush(&self, dev: &Device) -> bool {
        dev.io_stats().data_written_out_of_place() != self.durable_written.load(Ordering::Acquire)
    }

    /// Records that everything written so far is durable (a checkpoint's
    /// last flush, with no write in flight).
    pub(super) fn all_durable(&self, dev: &Device) {
        let written = dev.io_stats().data_written_out_of_place();
        self.durable_written.fetch_max(written, Ordering::AcqRel);
    }
}

/// Shards of [`UnsyncedBlocks`]: more than the threads that write at once,
/// so writers of different files rarely share a lock.
const UNSYNCED_SHARDS: usize = 64;

/// Blocks written per file since its last fsync (the FSYNC in-place
/// policy's count), sharded by inode number: every write of every file
/// updates it, and one shared lock serialized all writers.
pub(super) struct UnsyncedBlocks {
    shards: Box<[Mutex<HashMap<u32, u64>>]>,
}

impl Default for UnsyncedBlocks {
    fn default() -> Self {
        UnsyncedBlocks {
            shards: (0..UNSYNCED_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl UnsyncedBlocks {
    fn shard(&self, ino: u32) -> &Mutex<HashMap<u32, u64>> {
        &self.shards[ino as usize % UNSYNCED_SHARDS]
    }

    /// Adds `blocks` to the count of `ino`; returns the new count.
    pub(super) fn add(&self, ino: u32, blocks: u64) -> u64 {
        let mut shard = self.shard(ino).lock();
        let count = shard.entry(ino).or_default();
        *count = count.saturating_add(blocks);
        *count
    }

    /// Starts the count of `ino` again (its fsync).
    pub(super) fn reset(&self, ino: u32) {
        self.shard(ino).lock().remove(&ino);
    }

    /// Starts every count again (a checkpoint).
    pub(super) fn reset_all(&self) {
        for shard in self.shards.iter() {
            shard.lock().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BlockDevice;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A device whose flushes wait while `hold` is set.
    #[derive(Default)]
    struct HeldFlushes {
        hold: AtomicBool,
        entered: AtomicU64,
    }

    impl BlockDevice for HeldFlushes {
        fn read_at(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
            Ok(())
        }
        fn write_at(&self, _: u64, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            Ok(())
        }
        fn size(&self) -> u64 {
            1 << 20
        }
    }

    /// Callers arriving while a flush runs share one flush after it.
    #[test]
    fn waiters_share_the_next_flush() {
        let held = Arc::new(HeldFlushes::default());
        held.hold.store(true, Ordering::SeqCst);
        let dev = Arc::new(Device::new(Box::new(held.clone())));
        let gate = Arc::new(FlushGate::default());
        let spawn = |gate: &Arc<FlushGate>| {
            let (gate, dev) = (gate.clone(), dev.clone());
            std::thread::spawn(move || gate.flush(&dev))
        };
        let first = spawn(&gate);
        while held.entered.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let waiters: Vec<_> = (0..4).map(|_| spawn(&gate)).collect();
        // Every waiter has asked for a flush after the running one.
        while gate.state.lock().waiting < 4 {
            std::thread::yield_now();
        }
        held.hold.store(false, Ordering::SeqCst);
        first.join().unwrap().unwrap();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert_eq!(dev.io_stats().flushes, 2, "one flush for all four waiters");
    }

    #[test]
    fn a_caller_after_a_flush_gets_a_new_one() {
        let dev = Device::new(Box::new(HeldFlushes::default()));
        let gate = FlushGate::default();
        gate.flush(&dev).unwrap();
        gate.flush(&dev).unwrap();
        assert_eq!(dev.io_stats().flushes, 2);
    }
}
