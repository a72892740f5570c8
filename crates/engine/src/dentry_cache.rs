//! Dentry blocks recently read, by block address, so that lookups and
//! listings of a directory do not read its blocks from the device again
//! (a FUSE path walk looks every name up, often twice).
//!
//! The cache lives in [`crate::device::Device`], under every write: each
//! write drops the addresses it covers (whatever its kind: cleaning moves
//! dentry blocks, a freed address is reused for other data, a dentry block
//! may be rewritten in place), so a cached block is always what the device
//! holds. A read that misses is registered while it reads the device; a
//! write to its address meanwhile marks it, and a marked read does not
//! fill the cache (it may hold the contents from before the write).
//! Its mutex is the innermost leaf lock (docs/ARCHITECTURE.md,
//! "Concurrency and locking order"), never held during I/O.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A cached dentry block, shared with the readers that asked for it.
pub type DentryBlock = Arc<[u8]>;

/// Blocks kept (16 MiB): the dentry blocks of some 250,000 entries.
pub const DENTRY_CACHE_BLOCKS: usize = 4096;

#[derive(Default)]
pub struct DentryCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Each block with the number of its insertion.
    blocks: HashMap<u64, (u64, DentryBlock)>,
    /// Insertions in order, for eviction (first in, first out): an entry
    /// whose number is no longer its block's is stale (the block was
    /// dropped, maybe filled again later) and evicts nothing. Compacted
    /// when stale entries would make it twice the capacity.
    order: VecDeque<(u64, u64)>,
    insertions: u64,
    /// Device reads of missing blocks in flight: readers, and whether a
    /// write reached the address since the first of them registered.
    reading: HashMap<u64, (u32, bool)>,
}

/// A miss being read from the device; [`DentryCache::fill`] ends it.
pub struct PendingRead {
    blkaddr: u64,
}

impl DentryCache {
    /// The cached block at `blkaddr`, or a registered miss to read.
    pub fn get(&self, blkaddr: u64) -> Result<DentryBlock, PendingRead> {
        let mut inner = self.inner.lock();
        if let Some((_, block)) = inner.blocks.get(&blkaddr) {
            return Ok(block.clone());
        }
        inner.reading.entry(blkaddr).or_insert((0, false)).0 += 1;
        Err(PendingRead { blkaddr })
    }

    /// Ends a miss: `block` (the device's contents, or `None` if the read
    /// failed) is kept unless a write reached the address meanwhile.
    pub fn fill(&self, miss: PendingRead, block: Option<&DentryBlock>) {
        let mut inner = self.inner.lock();
        let addr = miss.blkaddr;
        let Some((readers, overwritten)) = inner.reading.get_mut(&addr) else {
            return;
        };
        *readers -= 1;
        let keep = !*overwritten;
        if *readers == 0 {
            inner.reading.remove(&addr);
        }
        let Some(block) = block.filter(|_| keep) else {
            return;
        };
        if inner.blocks.contains_key(&addr) {
            return;
        }
        inner.insertions += 1;
        let number = inner.insertions;
        inner.blocks.insert(addr, (number, block.clone()));
        inner.order.push_back((addr, number));
        while inner.blocks.len() > DENTRY_CACHE_BLOCKS {
            let Some((old, old_number)) = inner.order.pop_front() else {
                break;
            };
            if inner
                .blocks
                .get(&old)
                .is_some_and(|(n, _)| *n == old_number)
            {
                inner.blocks.remove(&old);
            }
        }
        if inner.order.len() > 2 * DENTRY_CACHE_BLOCKS {
            let Inner { blocks, order, .. } = &mut *inner;
            order.retain(|(a, n)| blocks.get(a).is_some_and(|(current, _)| current == n));
        }
        debug_assert!(inner.blocks.len() <= DENTRY_CACHE_BLOCKS);
        debug_assert!(inner.order.len() <= 2 * DENTRY_CACHE_BLOCKS);
    }

    /// Drops `count` blocks from `blkaddr` on: they were just written.
    pub fn written(&self, blkaddr: u64, count: u64) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        if inner.blocks.is_empty() && inner.reading.is_empty() {
            return;
        }
        let range = blkaddr..blkaddr + count;
        if count as usize > inner.blocks.len() + inner.reading.len() {
            // A large write: look at what is cached instead of every address.
            inner.blocks.retain(|addr, _| !range.contains(addr));
            for (addr, (_, overwritten)) in inner.reading.iter_mut() {
                *overwritten |= range.contains(addr);
            }
            return;
        }
        for addr in range {
            inner.blocks.remove(&addr);
            if let Some((_, overwritten)) = inner.reading.get_mut(&addr) {
                *overwritten = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(byte: u8) -> DentryBlock {
        vec![byte; 4096].into()
    }

    #[test]
    fn a_filled_miss_is_served_until_written() {
        let cache = DentryCache::default();
        let miss = cache.get(7).expect_err("empty cache");
        cache.fill(miss, Some(&block(1)));
        assert_eq!(cache.get(7).ok().as_deref(), Some(&block(1)[..]));
        cache.written(6, 2);
        assert!(cache.get(7).is_err(), "a write drops the block");
    }

    #[test]
    fn a_read_overtaken_by_a_write_does_not_fill() {
        let cache = DentryCache::default();
        let miss = cache.get(9).expect_err("empty cache");
        cache.written(9, 1);
        cache.fill(miss, Some(&block(2)));
        let again = cache.get(9).expect_err("the older contents were not kept");
        cache.fill(again, Some(&block(3)));
        assert_eq!(cache.get(9).ok().as_deref(), Some(&block(3)[..]));
    }

    #[test]
    fn a_block_dropped_and_filled_again_is_not_evicted_by_its_old_entry() {
        let cache = DentryCache::default();
        let fill = |addr: u64| {
            let miss = cache.get(addr).expect_err("not cached");
            cache.fill(miss, Some(&block(addr as u8)));
        };
        fill(0);
        cache.written(0, 1);
        fill(1);
        fill(0);
        // Up to the capacity: the stale first entry of block 0 must not
        // evict its newer copy.
        for addr in 2..DENTRY_CACHE_BLOCKS as u64 {
            fill(addr);
        }
        assert!(cache.get(0).is_ok(), "block 0, filled again, is kept");
        fill(DENTRY_CACHE_BLOCKS as u64);
        assert!(cache.get(1).is_err(), "the oldest live block goes first");
        assert!(cache.get(0).is_ok());
    }

    #[test]
    fn churn_keeps_the_order_bounded() {
        let cache = DentryCache::default();
        for round in 0..3 * DENTRY_CACHE_BLOCKS as u64 {
            let miss = cache.get(round % 8).expect_err("dropped each round");
            cache.fill(miss, Some(&block(1)));
            cache.written(round % 8, 1);
        }
        assert!(cache.inner.lock().order.len() <= 2 * DENTRY_CACHE_BLOCKS);
    }

    #[test]
    fn large_writes_and_eviction_keep_it_bounded_and_current() {
        let cache = DentryCache::default();
        for addr in 0..(DENTRY_CACHE_BLOCKS as u64 + 10) {
            let miss = cache.get(addr).expect_err("new address");
            cache.fill(miss, Some(&block(addr as u8)));
        }
        assert!(cache.get(0).is_err(), "the oldest was evicted");
        let last = DENTRY_CACHE_BLOCKS as u64 + 9;
        assert!(cache.get(last).is_ok());
        cache.written(0, 1 << 20);
        assert!(
            cache.get(last).is_err(),
            "a write larger than the cache drops it"
        );
    }
}
