//! The read extent cache (the read side of the kernel's extent_cache.c):
//! per inode, runs of file blocks that map to consecutive block addresses,
//! so reading a mapped range needs no walk through its nodes.
//!
//! Invariant: a cached extent is what the inode's nodes map now. The node
//! manager calls [`ExtentCache::invalidate`] for the owner inode after
//! every change of one of its node blocks becomes visible (a dirty node
//! inserted, a node created or freed), before the changing thread goes on
//! to free the blocks the old mapping named. A reader takes a
//! [`Snapshot`] before it walks the nodes and [`insert`](ExtentCache::insert)s
//! what it mapped only if the inode's generation is unchanged, so an
//! extent read from nodes that changed meanwhile is never kept (a change
//! after the insert drops it). Generations come from one counter per
//! shard, so they never repeat; an inode without an entry has the shard's
//! floor, raised whenever entries are evicted.

use crate::stats::ShardedCounters;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

const SHARDS: usize = 16;
/// Inodes tracked per shard before the shard is emptied.
const MAX_INODES_PER_SHARD: usize = 1024;
/// Extents kept per inode; the one at the lowest offset goes first.
const MAX_EXTENTS_PER_INODE: usize = 256;

/// A run of file blocks at consecutive block addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedExtent {
    pub fofs: u64,
    pub blkaddr: u32,
    pub len: u64,
}

/// What a reader saw before mapping (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Snapshot(u64);

#[derive(Default)]
struct InodeExtents {
    generation: u64,
    /// By first file block.
    extents: BTreeMap<u64, CachedExtent>,
}

#[derive(Default)]
struct Shard {
    inodes: HashMap<u32, InodeExtents>,
    counter: u64,
    floor: u64,
}

impl Shard {
    fn generation(&self, ino: u32) -> u64 {
        self.inodes.get(&ino).map_or(self.floor, |e| e.generation)
    }

    /// Empties the shard when it is full and `ino` is not in it; the floor
    /// then moves past every generation handed out.
    fn make_room(&mut self, ino: u32) {
        if self.inodes.len() >= MAX_INODES_PER_SHARD && !self.inodes.contains_key(&ino) {
            self.inodes.clear();
            self.floor = self.counter;
        }
    }
}

/// Lookups by outcome.
#[repr(usize)]
enum Outcome {
    Hit,
    Miss,
}

pub struct ExtentCache {
    shards: Vec<Mutex<Shard>>,
    lookups: ShardedCounters<2>,
}

/// Lookups since the file system was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtentCacheStats {
    /// Lookups the cache answered.
    pub hits: u64,
    /// Lookups that went to the node blocks.
    pub misses: u64,
}

impl Default for ExtentCache {
    fn default() -> Self {
        ExtentCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            lookups: ShardedCounters::default(),
        }
    }
}

impl ExtentCache {
    fn shard(&self, ino: u32) -> &Mutex<Shard> {
        &self.shards[ino as usize % SHARDS]
    }

    /// The cached extent holding file block `index` of `ino`, cut to start
    /// there; counts a hit or a miss.
    pub fn lookup(&self, ino: u32, index: u64) -> Option<CachedExtent> {
        let found = self.shard(ino).lock().inodes.get(&ino).and_then(|e| {
            let (_, ext) = e.extents.range(..=index).next_back()?;
            let skip = index - ext.fofs;
            (skip < ext.len).then(|| CachedExtent {
                fofs: index,
                blkaddr: ext.blkaddr + skip as u32,
                len: ext.len - skip,
            })
        });
        let outcome = if found.is_some() {
            Outcome::Hit
        } else {
            Outcome::Miss
        };
        self.lookups.add(outcome as usize, 1);
        found
    }

    /// Taken before mapping blocks of `ino` from its nodes.
    pub fn snapshot(&self, ino: u32) -> Snapshot {
        Snapshot(self.shard(ino).lock().generation(ino))
    }

    /// Keeps `extent` of `ino`, mapped from its nodes after `seen`, unless
    /// they changed since.
    pub fn insert(&self, ino: u32, seen: Snapshot, extent: CachedExtent) {
        debug_assert!(extent.len > 0);
        let mut shard = self.shard(ino).lock();
        if shard.generation(ino) != seen.0 {
            return;
        }
        shard.make_room(ino);
        let generation = seen.0;
        let entry = shard.inodes.entry(ino).or_insert_with(|| InodeExtents {
            generation,
            extents: BTreeMap::new(),
        });
        if entry.extents.len() >= MAX_EXTENTS_PER_INODE {
            entry.extents.pop_first();
        }
        entry.extents.insert(extent.fofs, extent);
    }

    /// Forgets every extent of `ino`: one of its nodes changed.
    pub fn invalidate(&self, ino: u32) {
        let mut shard = self.shard(ino).lock();
        shard.make_room(ino);
        shard.counter += 1;
        let generation = shard.counter;
        let entry = shard.inodes.entry(ino).or_default();
        entry.generation = generation;
        entry.extents.clear();
    }

    pub fn stats(&self) -> ExtentCacheStats {
        let [hits, misses] = self.lookups.totals();
        ExtentCacheStats { hits, misses }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(fofs: u64, blkaddr: u32, len: u64) -> CachedExtent {
        CachedExtent { fofs, blkaddr, len }
    }

    #[test]
    fn a_lookup_inside_an_extent_is_cut_to_start_there() {
        let cache = ExtentCache::default();
        let seen = cache.snapshot(5);
        cache.insert(5, seen, ext(10, 1000, 8));
        assert_eq!(cache.lookup(5, 13), Some(ext(13, 1003, 5)));
        assert_eq!(cache.lookup(5, 18), None);
        assert_eq!(cache.lookup(5, 9), None);
        assert_eq!(cache.lookup(6, 13), None);
        assert_eq!(cache.stats(), ExtentCacheStats { hits: 1, misses: 3 });
    }

    #[test]
    fn a_change_drops_extents_and_refuses_older_mappings() {
        let cache = ExtentCache::default();
        let before = cache.snapshot(5);
        cache.insert(5, before, ext(0, 100, 4));
        cache.invalidate(5);
        assert_eq!(cache.lookup(5, 0), None);
        // Mapped before the change: not kept.
        cache.insert(5, before, ext(0, 100, 4));
        assert_eq!(cache.lookup(5, 0), None);
        let after = cache.snapshot(5);
        cache.insert(5, after, ext(0, 200, 4));
        assert_eq!(cache.lookup(5, 1), Some(ext(1, 201, 3)));
    }

    #[test]
    fn eviction_never_lets_an_old_snapshot_through() {
        let cache = ExtentCache::default();
        let old = cache.snapshot(7);
        cache.invalidate(7);
        // Fill the shard of 7 until it is emptied.
        for i in 1..=(MAX_INODES_PER_SHARD as u32 + 1) {
            let ino = 7 + i * SHARDS as u32;
            cache.insert(ino, cache.snapshot(ino), ext(0, 1, 1));
        }
        cache.insert(7, old, ext(0, 100, 1));
        assert_eq!(cache.lookup(7, 0), None);
    }
}
