//! What the file system reports about itself (status, statfs, counters)
//! and its tunables.

use super::{Fs, FsCounter, StatFs};
use crate::error::{Error, ErrorKind, Result};
use crate::gc::GcStats;
use crate::inode::InodeClock;
use crate::report::{LogStatus, Status};
use crate::segment::{AllocStats, SegmentManager};
use crate::time::Timestamp;
use crate::tunables::Tunables;
use f2fuse_layout::*;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Fs {
    /// The main area's layout now and the counters since this open. On a
    /// read-only open the layout is the last checkpoint's.
    pub fn status(&self) -> Result<Status> {
        let _read = self.read_guard();
        // Taken before the segment manager's lock: cleaning holds the GC
        // lock while it takes that one.
        let gc = self.gc_stats();
        let snapshot = |sm: &SegmentManager| Status {
            writable: self.writer.is_some(),
            main_segments: sm.main_segments(),
            segs_per_sec: sm.segs_per_sec(),
            free_sections: sm.free_sections(),
            segments: sm.segment_counts(),
            user_blocks: sm.user_blocks(),
            valid_blocks: sm.valid_blocks(),
            valid_nodes: sm.valid_nodes(),
            valid_inodes: sm.valid_inodes(),
            logs: CursegType::ALL
                .iter()
                .map(|&log| {
                    let cs = sm.curseg(log);
                    LogStatus {
                        log,
                        segno: cs.segno,
                        next_blkoff: cs.next_blkoff,
                        ssr: cs.alloc_type == f2fuse_layout::checkpoint::SSR,
                    }
                })
                .collect(),
            alloc: sm.alloc_stats().clone(),
            gc: gc.clone(),
            checkpoints: self.counters.get(FsCounter::CheckpointsWritten as usize),
            node_cache: self.nm.cache_stats(),
            extent_cache: self.nm.extent_cache().stats(),
            io: self.dev.io_stats(),
            user_bytes_written: self.counters.get(FsCounter::UserBytesWritten as usize),
            user_bytes_read: self.counters.get(FsCounter::UserBytesRead as usize),
        };
        match &self.writer {
            Some(w) => Ok(snapshot(&w.space.lock())),
            None => {
                // The allocator built from the checkpoint: its layout view,
                // with no allocation done.
                let sit = self.sit()?;
                let sm = SegmentManager::new(&self.dev, self.superblock(), &self.cp.read(), &sit)?;
                Ok(snapshot(&sm))
            }
        }
    }

    /// The invariant whose breaking made the file system read-only, if one
    /// broke (release builds; debug builds panic): the image needs fsck.f2fs.
    pub fn needs_fsck(&self) -> Option<String> {
        self.dev.health().needs_fsck().map(str::to_owned)
    }

    /// statfs(2) figures for the whole file system.
    pub fn statfs(&self) -> StatFs {
        let (user, valid, used_nodes) = match &self.writer {
            Some(w) => {
                let sm = w.space.lock();
                (sm.user_blocks(), sm.valid_blocks(), sm.valid_nodes() as u64)
            }
            None => {
                let cp = &self.cp.read().cp;
                (
                    cp.user_block_count.get(),
                    cp.valid_block_count.get(),
                    cp.valid_node_count.get() as u64,
                )
            }
        };
        let free = user.saturating_sub(valid);
        let files = self.nm.max_nid() as u64 - F2FS_ROOT_INO as u64;
        StatFs {
            block_size: F2FS_BLKSIZE as u32,
            blocks: user,
            blocks_free: free,
            blocks_available: free,
            files,
            files_free: files.saturating_sub(used_nodes).min(free),
            name_max: F2FS_NAME_LEN as u32,
        }
    }

    /// The value of tunable `name` (see `tunables::TUNABLES`).
    pub fn tunable(&self, name: &str) -> Result<u64> {
        self.tunables_of()?.lock().get(name)
    }

    /// Sets tunable `name`; an unknown name or a value out of range is an
    /// error and changes nothing.
    pub fn set_tunable(&self, name: &str, value: u64) -> Result<()> {
        let mut t = self.tunables_of()?.lock();
        t.set(name, value)?;
        self.data_policy.store(&t);
        if name == "min_ssr_sections" {
            let w = self.writer();
            w.space
                .lock()
                .set_ssr_threshold(w.reserved_sections.saturating_add(t.min_ssr_sections));
        }
        Ok(())
    }

    /// Every tunable with its current value.
    pub fn tunables(&self) -> Result<Vec<(&'static str, u64)>> {
        Ok(self.tunables_of()?.lock().list())
    }

    fn tunables_of(&self) -> Result<&Mutex<Tunables>> {
        self.writer.as_ref().map(|w| &w.tunables).ok_or_else(|| {
            Error::new(
                ErrorKind::ReadOnly,
                "tunables need a writable file system (opened read-only)",
            )
        })
    }

    /// Replaces the wall clock by a simulated time since mount, for
    /// deterministic experiments (the policy lab): segment ages for
    /// cost-benefit cleaning and `cp_interval` then follow `since_mount`.
    pub fn set_simulated_clock(&self, since_mount: Duration) {
        if let Some(w) = &self.writer {
            *w.clock.simulated.lock() = Some(since_mount);
            w.space.lock().set_simulated_age(since_mount.as_secs());
        }
    }

    /// Pins every time the file system writes, for reproducible images:
    /// inode times are `t` and new inodes get generation 0, and the clock
    /// since mount stands still at zero (the checkpoint's elapsed time,
    /// segment ages and `cp_interval` then never move), so the same
    /// operations on the same image write the same bytes.
    pub fn set_fixed_time(&self, t: Timestamp) {
        if let Some(w) = &self.writer {
            *w.clock.inodes.write() = InodeClock::Fixed(t);
        }
        self.set_simulated_clock(Duration::ZERO);
    }

    /// Checkpoint whenever more than `nodes` node blocks wait in memory
    /// (default 16384, 64 MiB): node blocks reach the disk only at a
    /// checkpoint, so this bounds the dirty node cache. `f2fuse build`
    /// lowers it to keep its memory small.
    pub fn set_max_dirty_nodes(&self, nodes: usize) {
        if let Some(w) = &self.writer {
            w.max_dirty_nodes.store(nodes, Ordering::Relaxed);
        }
    }

    /// Node blocks changed since the last checkpoint, held in memory.
    pub fn dirty_node_count(&self) -> usize {
        self.nm.dirty_node_count()
    }

    /// Block allocation counters (blocks per log, SSR blocks, segments opened).
    pub fn alloc_stats(&self) -> AllocStats {
        self.writer
            .as_ref()
            .map(|w| w.space.lock().alloc_stats().clone())
            .unwrap_or_default()
    }

    /// Cleaning counters.
    pub fn gc_stats(&self) -> GcStats {
        self.writer
            .as_ref()
            .map(|w| w.gc.lock().stats.clone())
            .unwrap_or_default()
    }
}
