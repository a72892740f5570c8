//! Statistics counters that many threads bump on hot paths.
//!
//! The rule (from the ext4/DAX parallel-I/O work): a hot path never
//! increments a counter shared by every thread, because the cache line
//! holding it then bounces between cores on each increment and serializes
//! otherwise independent I/O. [`ShardedCounters`] keeps `SHARDS` copies of
//! a group of counters, each on its own cache lines; a thread always
//! updates the shard picked for it when it first counted, so threads
//! mostly touch lines no other thread writes. Reading sums the shards: a
//! read is O(shards) and sees each counter at some moment during the read
//! (totals of different counters are not one atomic snapshot).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Copies of each counter group. More than the cores this runs on, so
/// threads rarely share one; a power of two so picking one is a mask.
pub const SHARDS: usize = 32;

/// One thread's copy of `K` counters, aligned so no two shards share a
/// cache line (128 bytes: adjacent-line prefetch pairs 64-byte lines).
#[repr(align(128))]
struct Shard<const K: usize> {
    values: [AtomicU64; K],
}

/// `K` monotonic counters, sharded per thread. Index them with a
/// `#[repr(usize)]`-style enum of counter names.
pub struct ShardedCounters<const K: usize> {
    shards: Box<[Shard<K>]>,
}

thread_local! {
    /// This thread's shard, chosen round robin at its first count.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

/// Hands out shards to threads; touched once per thread, never per count.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl<const K: usize> Default for ShardedCounters<K> {
    fn default() -> Self {
        ShardedCounters {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    values: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
        }
    }
}

impl<const K: usize> ShardedCounters<K> {
    /// Adds `n` to counter `index` in the calling thread's shard. The
    /// atomic add is uncontended unless two threads share a shard, and
    /// keeps counts exact when they do.
    #[inline]
    pub fn add(&self, index: usize, n: u64) {
        let shard = SHARD.with(|s| *s);
        self.shards[shard].values[index].fetch_add(n, Ordering::Relaxed);
    }

    /// The total of counter `index` over all shards.
    pub fn get(&self, index: usize) -> u64 {
        self.shards
            .iter()
            .map(|s| s.values[index].load(Ordering::Relaxed))
            .sum()
    }

    /// The totals of all counters.
    pub fn totals(&self) -> [u64; K] {
        std::array::from_fn(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn shards_do_not_share_cache_lines() {
        assert_eq!(std::mem::align_of::<Shard<1>>(), 128);
        assert_eq!(std::mem::size_of::<Shard<3>>(), 128);
        assert_eq!(std::mem::size_of::<Shard<17>>(), 256);
        let counters = ShardedCounters::<2>::default();
        let a = &counters.shards[0] as *const _ as usize;
        let b = &counters.shards[1] as *const _ as usize;
        assert_eq!(b - a, 128);
    }

    #[test]
    fn single_thread_counts_each_counter_separately() {
        let counters = ShardedCounters::<3>::default();
        counters.add(0, 5);
        counters.add(2, 7);
        counters.add(2, 1);
        assert_eq!(counters.totals(), [5, 0, 8]);
    }

    #[test]
    fn many_threads_lose_no_count() {
        // More threads than shards, so some share a shard and race on it.
        const THREADS: u64 = SHARDS as u64 + 13;
        const ROUNDS: u64 = 20_000;
        let counters = Arc::new(ShardedCounters::<2>::default());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let counters = counters.clone();
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        counters.add(0, 1);
                        counters.add(1, t);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(counters.get(0), THREADS * ROUNDS);
        assert_eq!(counters.get(1), ROUNDS * (0..THREADS).sum::<u64>());
    }

    #[test]
    fn threads_spread_over_shards() {
        let counters = Arc::new(ShardedCounters::<1>::default());
        let handles: Vec<_> = (0..SHARDS)
            .map(|_| {
                let counters = counters.clone();
                std::thread::spawn(move || counters.add(0, 1))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Round robin over all threads of the process: concurrent tests may
        // take ids in between, but these threads still land on several
        // shards, where one shared counter would be a single place.
        let used = counters
            .shards
            .iter()
            .filter(|s| s.values[0].load(Ordering::Relaxed) > 0)
            .count();
        assert!(used > 1, "all threads counted into one shard");
        assert_eq!(counters.get(0), SHARDS as u64);
    }
}
