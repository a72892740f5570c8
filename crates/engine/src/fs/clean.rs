//! Driving garbage collection: foreground cleaning when free sections run
//! low, background cleaning steps, F2FS_IOC_GARBAGE_COLLECT. Cleaning holds
//! the operation lock exclusively.

use super::{Fs, Writer};
use crate::error::Result;
use crate::gc;
use crate::lock_order::{self, Level};
use f2fuse_layout::*;
use std::time::Duration;

/// Free sections beyond the reserved ones below which foreground cleaning starts:
/// room for the nodes and dentries one operation may write.
const GC_MARGIN_SECTIONS: u32 = 3;
/// Free sections moving one victim's blocks may take: the cold data log's
/// current and next section, and as many for the nodes it re-dirties.
const GC_MOVE_SECTIONS: u32 = 4;

impl Fs {
    /// Cleans in the foreground when free sections run low.
    pub(super) fn ensure_space(&self) -> Result<()> {
        // Cleaning waits for the operation lock exclusively: nothing from it
        // on may be held (range locks may).
        lock_order::assert_none_from(Level::Op);
        let w = self.writable()?;
        let low =
            |w: &Writer| w.space.lock().free_sections() <= w.reserved_sections + GC_MARGIN_SECTIONS;
        if !low(w) {
            return Ok(());
        }
        // Another thread may have cleaned while this one waited for the lock.
        self.exclusive(|w| {
            if low(w) {
                self.foreground_gc_locked()
            } else {
                Ok(())
            }
        })
    }

    /// Cleans victim sections until enough will be free, then checkpoints
    /// so the cleaned sections really become free. Caller holds `op_lock`
    /// exclusively.
    pub(super) fn foreground_gc_locked(&self) -> Result<()> {
        let w = self.writer();
        let ctx = self.ctx();
        let target = w.reserved_sections + GC_MARGIN_SECTIONS + 1;
        let (policy, max_search, pin_thresh) = {
            let t = w.tunables.lock();
            (
                t.victim_policy(true),
                t.max_victim_search,
                t.gc_pin_file_thresh,
            )
        };
        let mut gc_state = w.gc.lock();
        gc_state.pin_file_thresh = pin_thresh;
        gc_state.foreground = true;
        gc_state.stats.foreground_runs += 1;
        let sections = {
            let sm = w.space.lock();
            sm.main_segments() / sm.segs_per_sec()
        };
        for _ in 0..sections {
            if w.space.lock().free_sections_after_checkpoint() >= target {
                break;
            }
            if !self.room_to_move_locked()? {
                break;
            }
            // Bounded too, unlike current kernels' foreground searches (see `tunables`).
            let Some(victim) = gc::select_victim(&ctx, &mut gc_state, policy, max_search) else {
                break;
            };
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            self.flush_nodes_locked()?;
            gc::check_cleaned(&ctx, &gc_state, victim, true)?;
        }
        drop(gc_state);
        self.checkpoint_locked(false)
    }

    /// Whether a victim's blocks can be moved: moving takes free sections
    /// before the victim becomes free at the next checkpoint, so with a
    /// policy that takes fuller sections (cost-benefit) a checkpoint may be
    /// needed first to free the sections already cleaned. Caller holds
    /// `op_lock` exclusively.
    fn room_to_move_locked(&self) -> Result<bool> {
        let w = self.writer();
        if w.space.lock().free_sections() < GC_MOVE_SECTIONS {
            self.checkpoint_locked(false)?;
        }
        Ok(w.space.lock().free_sections() >= GC_MOVE_SECTIONS)
    }

    fn flush_nodes_locked(&self) -> Result<()> {
        let stamp = self.node_stamp(&self.cp.read());
        self.nm.write_dirty_nodes(&self.writer().space, stamp)
    }

    /// Whether enough blocks are invalid for background cleaning to be
    /// worth it (the kernel's `has_enough_invalid_blocks`: invalid blocks
    /// above 40% of user capacity, or free space short).
    fn enough_invalid_blocks(&self, w: &Writer) -> bool {
        let sm = w.space.lock();
        let capacity = sm.main_segments() as u64 * BLOCKS_PER_SEG as u64;
        let free_blocks = sm.free_segments() as u64 * BLOCKS_PER_SEG as u64;
        let invalid = capacity
            .saturating_sub(sm.valid_blocks())
            .saturating_sub(free_blocks);
        invalid * 100 > sm.user_blocks() * 40 || free_blocks * 100 < invalid * 40
    }

    /// One round of background cleaning when enough space is invalid to be
    /// worth it, or always in `gc_urgent` 1 and 3. Returns whether a
    /// section was cleaned.
    pub fn background_gc(&self) -> Result<bool> {
        let w = self.writable()?;
        let urgent = w.tunables.lock().gc_urgent_pace();
        if !urgent && !self.enough_invalid_blocks(w) {
            return Ok(false);
        }
        self.garbage_collect(false)
    }

    /// Cleans one victim section now and checkpoints (the kernel's
    /// F2FS_IOC_GARBAGE_COLLECT): with the foreground victim policy if
    /// `sync`, else the background one (`gc_idle`, `gc_urgent`), the search
    /// bounded by `max_victim_search`. Returns whether a victim was found.
    pub fn garbage_collect(&self, sync: bool) -> Result<bool> {
        self.exclusive(|w| {
            let (policy, max_search, pin_thresh) = {
                let t = w.tunables.lock();
                (
                    t.victim_policy(sync),
                    t.max_victim_search,
                    t.gc_pin_file_thresh,
                )
            };
            if !self.room_to_move_locked()? {
                return Ok(false);
            }
            let ctx = self.ctx();
            let mut gc_state = w.gc.lock();
            gc_state.pin_file_thresh = pin_thresh;
            gc_state.foreground = sync;
            let Some(victim) = gc::select_victim(&ctx, &mut gc_state, policy, max_search) else {
                return Ok(false);
            };
            if sync {
                gc_state.stats.foreground_runs += 1;
            } else {
                gc_state.stats.background_runs += 1;
            }
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            gc::check_cleaned(&ctx, &gc_state, victim, false)?;
            drop(gc_state);
            self.checkpoint_locked(false)?;
            Ok(true)
        })
    }

    /// One wake-up of the background cleaner, as the kernel's gc thread
    /// does it: `slept` is how long it slept, `busy` whether the file system
    /// was in use meanwhile. Cleans at most one section; returns how long
    /// to sleep next (the `gc_*_sleep_time` tunables).
    pub fn background_gc_step(&self, slept: Duration, busy: bool) -> Result<Duration> {
        let w = self.writable()?;
        let t = w.tunables.lock().clone();
        let slept_ms = slept.as_millis().min(u32::MAX as u128) as u32;
        let ms = |ms: u32| Duration::from_millis(ms as u64);
        let wait_ms = if t.gc_urgent_pace() {
            t.gc_urgent_sleep_ms
        } else if busy && !t.gc_ignores_busy() {
            return Ok(ms(t.longer_gc_sleep(slept_ms)));
        } else if self.enough_invalid_blocks(w) {
            t.shorter_gc_sleep(slept_ms)
        } else {
            t.longer_gc_sleep(slept_ms)
        };
        if self.background_gc()? {
            Ok(ms(wait_ms))
        } else {
            Ok(ms(t.gc_no_gc_sleep_ms))
        }
    }
}
