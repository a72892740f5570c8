//! The facade's locks above the node guards: per-inode directory,
//! attribute and byte-range locks, and the rename lock. The order they are
//! taken in is `lock_order`'s; every guard here records itself there.
//!
//! * Directory lock (a mutex per directory): held by every change of the
//!   directory's entries, so a name checked absent or present stays so
//!   until the change is made. Lookups and listings take none: every
//!   directory change is published in one guarded node change (a dentry
//!   block's data is on the device before its address is), so they see
//!   the directory before or after it.
//! * Inode lock (a read-write lock per inode): exclusive for changes of
//!   an inode's attributes, xattrs, links or existence (namespace
//!   operations take it on every inode they change, in ascending order);
//!   shared by data reads and writes, which only need those to hold still.
//! * Range locks (per file, in blocks): a write takes its blocks
//!   exclusively and a read shares them, so writers of disjoint ranges run
//!   in parallel and a read never sees part of a write; truncation and
//!   fallocate take what they change.
//! * The rename lock: renames between directories hold it, so no other
//!   directory move can change the ancestry their loop check reads.
//!
//! Lock objects live in a sharded table while someone holds or waits for
//! them and are dropped after the last guard goes.

use crate::lock_order::{self, Held, Level};
use parking_lot::lock_api::{RawMutex as _, RawRwLock as _};
use parking_lot::{Condvar, Mutex, MutexGuard, RawMutex, RawRwLock};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shared or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

/// Every block of a file, for range locks.
pub(crate) const WHOLE_FILE: Range<u64> = 0..u64::MAX;

const SHARDS: usize = 64;

/// The locks of one inode.
struct InodeLocks {
    dir: RawMutex,
    attr: RawRwLock,
    ranges: RangeLock,
}

/// One shard of the lock table: the locks of the inodes in use, by number.
type Shard = Mutex<HashMap<u32, Arc<InodeLocks>>>;

/// The lock table of one file system.
pub(crate) struct Locks {
    shards: Box<[Shard]>,
    rename: Mutex<()>,
}

impl Locks {
    pub fn new() -> Locks {
        Locks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            rename: Mutex::new(()),
        }
    }

    fn shard(&self, ino: u32) -> &Shard {
        &self.shards[ino as usize % SHARDS]
    }

    fn entry(&self, ino: u32) -> Entry<'_> {
        let locks = self
            .shard(ino)
            .lock()
            .entry(ino)
            .or_insert_with(|| {
                Arc::new(InodeLocks {
                    dir: RawMutex::INIT,
                    attr: RawRwLock::INIT,
                    ranges: RangeLock::default(),
                })
            })
            .clone();
        Entry {
            table: self,
            ino,
            locks: Some(locks),
        }
    }

    /// The inode lock of `ino`.
    pub fn inode(&self, ino: u32, mode: Mode) -> InodeGuard<'_> {
        let order = lock_order::acquire(Level::Inode, ino as u64, mode == Mode::Shared);
        let entry = self.entry(ino);
        match mode {
            Mode::Shared => entry.get().attr.lock_shared(),
            Mode::Exclusive => entry.get().attr.lock_exclusive(),
        }
        InodeGuard {
            entry,
            mode,
            _order: order,
        }
    }

    /// Blocks `blocks` of file `ino` (`WHOLE_FILE` for all).
    pub fn range(&self, ino: u32, blocks: Range<u64>, mode: Mode) -> RangeGuard<'_> {
        self.range_in(ino, blocks, mode, false)
    }

    /// Blocks `blocks` of file `ino` held exclusively by a large write that
    /// should be allocated right after the one just before it in the file:
    /// if such an ordered write holds the blocks ending where these start
    /// and has not allocated yet, this waits (at most [`ORDER_WAIT`]) until
    /// it has ([`RangeGuard::allocated`]), so a file written in concurrent
    /// chunks (FUSE write-back, split direct I/O) lands in file order.
    pub fn ordered_write_range(&self, ino: u32, blocks: Range<u64>) -> RangeGuard<'_> {
        self.range_in(ino, blocks, Mode::Exclusive, true)
    }

    fn range_in(&self, ino: u32, blocks: Range<u64>, mode: Mode, ordered: bool) -> RangeGuard<'_> {
        let order = lock_order::acquire(Level::Range, ino as u64, mode == Mode::Shared);
        let entry = self.entry(ino);
        let id = entry.get().ranges.lock(blocks, mode, ordered);
        RangeGuard {
            entry,
            id,
            _order: order,
        }
    }

    /// The rename lock (renames between directories).
    pub fn rename(&self) -> RenameGuard<'_> {
        let order = lock_order::acquire(Level::Rename, 0, false);
        RenameGuard {
            _lock: self.rename.lock(),
            _order: order,
        }
    }

    /// An empty set of namespace locks to fill.
    pub fn namespace(&self) -> NamespaceLocks<'_> {
        NamespaceLocks {
            table: self,
            dirs: Vec::new(),
            inodes: Vec::new(),
        }
    }
}

/// A reference to one inode's locks; dropping it removes them from the
/// table when nobody else refers to them.
struct Entry<'a> {
    table: &'a Locks,
    ino: u32,
    locks: Option<Arc<InodeLocks>>,
}

impl Entry<'_> {
    fn get(&self) -> &InodeLocks {
        self.locks.as_ref().expect("present until dropped")
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let mut shard = self.table.shard(self.ino).lock();
        // References are taken and dropped only under the shard lock, so
        // the count cannot change while we look at it.
        drop(self.locks.take());
        if shard
            .get(&self.ino)
            .is_some_and(|locks| Arc::strong_count(locks) == 1)
        {
            shard.remove(&self.ino);
        }
    }
}

/// An inode lock held.
pub(crate) struct InodeGuard<'a> {
    entry: Entry<'a>,
    mode: Mode,
    _order: Held,
}

impl Drop for InodeGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the lock in `mode` and releases it once.
        unsafe {
            match self.mode {
                Mode::Shared => self.entry.get().attr.unlock_shared(),
                Mode::Exclusive => self.entry.get().attr.unlock_exclusive(),
            }
        }
    }
}

/// A directory lock held.
struct DirGuard<'a> {
    entry: Entry<'a>,
    _order: Held,
}

impl Drop for DirGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the lock and releases it once.
        unsafe { self.entry.get().dir.unlock() }
    }
}

/// A range of a file held.
pub(crate) struct RangeGuard<'a> {
    entry: Entry<'a>,
    id: u64,
    _order: Held,
}

impl RangeGuard<'_> {
    /// Tells ordered writes waiting for these blocks that they are
    /// allocated (see `Locks::ordered_write_range`).
    pub fn allocated(&self) {
        self.entry.get().ranges.allocated(self.id);
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        self.entry.get().ranges.unlock(self.id);
    }
}

/// The rename lock held.
pub(crate) struct RenameGuard<'a> {
    _lock: MutexGuard<'a, ()>,
    _order: Held,
}

/// The directory and inode locks of one namespace operation: directories
/// first, then (once) the inodes it changes, each kind in ascending order.
pub(crate) struct NamespaceLocks<'a> {
    table: &'a Locks,
    dirs: Vec<DirGuard<'a>>,
    inodes: Vec<InodeGuard<'a>>,
}

impl NamespaceLocks<'_> {
    fn holds_dir(&self, ino: u32) -> bool {
        self.dirs.iter().any(|d| d.entry.ino == ino)
    }

    /// Takes the directory locks of `inos` not held yet, if all of them
    /// come after every one held (the order allows it); returns false and
    /// takes none otherwise (then [`relock_dirs`](Self::relock_dirs)).
    pub fn add_dirs(&mut self, inos: &[u32]) -> bool {
        debug_assert!(self.inodes.is_empty(), "directories before inodes");
        let mut new: Vec<u32> = inos
            .iter()
            .copied()
            .filter(|&i| !self.holds_dir(i))
            .collect();
        new.sort_unstable();
        new.dedup();
        let highest = self.dirs.last().map(|d| d.entry.ino);
        if new.first().is_some_and(|&first| Some(first) <= highest) {
            return false;
        }
        for ino in new {
            self.lock_dir(ino);
        }
        true
    }

    /// Releases every directory lock and takes those of `inos` and the
    /// ones held before, in ascending order.
    pub fn relock_dirs(&mut self, inos: &[u32]) {
        debug_assert!(self.inodes.is_empty(), "directories before inodes");
        let mut all: Vec<u32> = inos.to_vec();
        all.extend(self.dirs.iter().map(|d| d.entry.ino));
        all.sort_unstable();
        all.dedup();
        self.dirs.clear();
        for ino in all {
            self.lock_dir(ino);
        }
    }

    fn lock_dir(&mut self, ino: u32) {
        let order = lock_order::acquire(Level::Dir, ino as u64, false);
        let entry = self.table.entry(ino);
        entry.get().dir.lock();
        self.dirs.push(DirGuard {
            entry,
            _order: order,
        });
    }

    /// Takes the inode locks (exclusive) of every inode the operation
    /// changes, in ascending order; once, after the directories.
    pub fn lock_inodes(&mut self, inos: &[u32]) {
        debug_assert!(self.inodes.is_empty(), "inode locks are taken once");
        let mut all = inos.to_vec();
        all.sort_unstable();
        all.dedup();
        for ino in all {
            self.inodes.push(self.table.inode(ino, Mode::Exclusive));
        }
    }
}

impl Drop for NamespaceLocks<'_> {
    fn drop(&mut self) {
        // Inodes before directories: the reverse of taking them.
        self.inodes.clear();
        self.dirs.clear();
    }
}

/// Byte-range locks of one file, in blocks: ranges held exclusively
/// overlap no other held range; shared ones overlap only shared ones.
#[derive(Default)]
struct RangeLock {
    state: Mutex<HeldRanges>,
    released: Condvar,
}

#[derive(Default)]
struct HeldRanges {
    held: Vec<HeldRange>,
    next_id: u64,
}

struct HeldRange {
    blocks: Range<u64>,
    mode: Mode,
    id: u64,
    /// Held by an ordered write that has not allocated its blocks yet
    /// (see `Locks::ordered_write_range`).
    allocating: bool,
}

/// How long an ordered write waits for the one before it in the file.
pub(crate) const ORDER_WAIT: Duration = Duration::from_millis(20);

impl RangeLock {
    /// Waits until `blocks` can be held in `mode`, holds it; returns its
    /// id. An `ordered` holder then waits (bounded) while an ordered holder
    /// of the blocks just before is still allocating.
    fn lock(&self, blocks: Range<u64>, mode: Mode, ordered: bool) -> u64 {
        let mut state = self.state.lock();
        while state.held.iter().any(|h| {
            h.blocks.start < blocks.end
                && blocks.start < h.blocks.end
                && (h.mode == Mode::Exclusive || mode == Mode::Exclusive)
        }) {
            self.released.wait(&mut state);
        }
        state.next_id += 1;
        let id = state.next_id;
        let start = blocks.start;
        state.held.push(HeldRange {
            blocks,
            mode,
            id,
            allocating: ordered,
        });
        if ordered {
            let deadline = Instant::now() + ORDER_WAIT;
            while state
                .held
                .iter()
                .any(|h| h.allocating && h.blocks.end == start)
                && !self.released.wait_until(&mut state, deadline).timed_out()
            {}
        }
        id
    }

    fn allocated(&self, id: u64) {
        let mut state = self.state.lock();
        if let Some(h) = state.held.iter_mut().find(|h| h.id == id && h.allocating) {
            h.allocating = false;
            drop(state);
            self.released.notify_all();
        }
    }

    fn unlock(&self, id: u64) {
        let mut state = self.state.lock();
        state.held.retain(|h| h.id != id);
        drop(state);
        self.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn disjoint_ranges_are_held_together_and_overlapping_ones_wait() {
        let locks = Locks::new();
        let a = locks.range(7, 0..4, Mode::Exclusive);
        let overlapping_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Disjoint: taken at once on another thread.
            s.spawn(|| drop(locks.range(7, 4..8, Mode::Exclusive)))
                .join()
                .unwrap();
            let waiter = s.spawn(|| {
                let _b = locks.range(7, 3..5, Mode::Shared);
                overlapping_done.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!overlapping_done.load(Ordering::SeqCst));
            drop(a);
            waiter.join().unwrap();
            assert!(overlapping_done.load(Ordering::SeqCst));
        });
        assert!(locks.shards.iter().all(|s| s.lock().is_empty()));
    }

    #[test]
    fn an_ordered_write_waits_for_the_allocation_of_the_one_before() {
        let locks = Locks::new();
        let before = locks.ordered_write_range(9, 0..256);
        let after_held = AtomicBool::new(false);
        std::thread::scope(|s| {
            let started = Instant::now();
            let after = s.spawn(|| {
                let _after = locks.ordered_write_range(9, 256..512);
                after_held.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(ORDER_WAIT / 4);
            // Unless this thread slept past the bound, the next chunk waits.
            if started.elapsed() < ORDER_WAIT {
                assert!(!after_held.load(Ordering::SeqCst));
            }
            before.allocated();
            after.join().unwrap();
            assert!(after_held.load(Ordering::SeqCst));
            // Still held after its allocation: the data is not written yet.
            drop(before);
        });
        // A write that is not ordered never waits.
        let _first = locks.ordered_write_range(9, 0..256);
        std::thread::scope(|s| {
            s.spawn(|| drop(locks.range(9, 256..512, Mode::Exclusive)))
                .join()
                .unwrap();
        });
    }

    #[test]
    fn shared_ranges_overlap() {
        let locks = Locks::new();
        let _a = locks.range(3, 0..10, Mode::Shared);
        std::thread::scope(|s| {
            s.spawn(|| drop(locks.range(3, 5..20, Mode::Shared)))
                .join()
                .unwrap();
        });
    }

    #[test]
    fn directory_locks_refuse_to_go_backwards() {
        let locks = Locks::new();
        let mut ns = locks.namespace();
        assert!(ns.add_dirs(&[10]));
        assert!(!ns.add_dirs(&[4]));
        ns.relock_dirs(&[4]);
        assert!(ns.holds_dir(4) && ns.holds_dir(10));
        assert!(ns.add_dirs(&[12, 10]));
        ns.lock_inodes(&[12, 3]);
    }
}
