//! fsync (roll-forward chains) and checkpoints, and when they are due.

use super::locks::Mode;
use super::{Fs, FsCounter, Writer};
use crate::checkpoint::CheckpointState;
use crate::commit::{write_checkpoint, CheckpointRequest};
use crate::error::Result;
use crate::inode::{FileKind, InodeInfo};
use crate::lock_order::{self, Level};
use crate::node::{NodeMarks, NodeStamp};
use f2fuse_layout::*;
use std::sync::atomic::Ordering;

/// Checkpoint when more node blocks than this (64 MiB) wait in memory,
/// unless `Fs::set_max_dirty_nodes` says otherwise.
pub(super) const MAX_DIRTY_NODES: usize = 16384;

impl Fs {
    /// fsync and fdatasync, as the kernel's f2fs_do_sync_file does them
    /// (fsync_mode=posix): a regular file's dirty nodes go to the warm node
    /// log as an fsync chain that recovery replays after a crash, and the
    /// device is flushed; a checkpoint is written only where roll-forward
    /// could not restore the file (`checkpoint_reason`). The inode lock,
    /// held exclusively, keeps every change of the file's nodes out.
    pub fn fsync(&self, ino: u32) -> Result<()> {
        // Cleaning first when space is low, as before any write: the chain
        // needs room in the warm node log.
        self.ensure_space()?;
        let w = self.healthy_writer()?;
        let reason = {
            let _op = self.write_guard()?;
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(&self.ctx(), ino)?;
            w.unsynced_blocks.reset(ino);
            let reason = self.checkpoint_reason(w, &inode);
            if reason.is_none() {
                if let Err(e) = self.write_fsync_chain(w, ino) {
                    w.failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            } else {
                self.fix_lost_pino(&inode)?;
            }
            reason
        };
        match reason {
            Some(_) => self.checkpoint(),
            None => Ok(()),
        }
    }

    /// Why an fsync of `inode` must checkpoint (the kernel's
    /// need_do_checkpoint in its order), or None if its chain suffices.
    fn checkpoint_reason(&self, w: &Writer, inode: &InodeInfo) -> Option<&'static str> {
        let pino = inode.inode().i_pino.get();
        if inode.kind != FileKind::Regular {
            Some("not a regular file")
        } else if inode.compression.is_some() {
            // Linux 6.1's roll-forward has no clusters (CP_COMPRESSED).
            Some("a compressed file")
        } else if inode.links != 1 {
            Some("not exactly one link")
        } else if w.need_checkpoint.load(Ordering::Relaxed) {
            Some("a change roll-forward cannot replay")
        } else if inode.advise & fadvise::LOST_PINO != 0 {
            Some("parent directory unknown")
        } else if !w.space.lock().space_for_roll_forward() {
            Some("no space for roll-forward")
        } else if !self.nm.is_checkpointed(pino) {
            Some("parent directory not checkpointed")
        } else {
            None
        }
    }

    /// Writes the fsync chain of `ino`: data first made durable, then its
    /// nodes (the last one FSYNC-marked, DENT too for a new inode), then a
    /// flush. Flushes go through `Writer::flushes`, outside the chain lock,
    /// so concurrent fsyncs share them (each still starts after the writes
    /// it must cover).
    ///
    /// Nothing dirty: no flush at all (the kernel's fsync of a clean file).
    /// Every write of data dirties the inode (times) under the inode lock,
    /// and a file's nodes are written clean only by its own fsync chain
    /// (whose flush ends before the inode lock is released), by a
    /// checkpoint (which flushes) or by cleaning (which checkpoints before
    /// releasing `op_lock`): so a file whose nodes are clean has nothing on
    /// the device that is not durable yet.
    fn write_fsync_chain(&self, w: &Writer, ino: u32) -> Result<()> {
        let Some(nodes) = self.nm.fsync_nodes_of(ino)? else {
            return Ok(());
        };
        let dent = self.nm.needs_dentry_mark(ino);
        // A node must never reach the disk before the data it points at. If
        // no data was written at a new address since the last flush began,
        // the nodes can only point at blocks on the disk already or
        // rewritten in place (whose address was valid before): one flush
        // serves data and nodes. The file's writes all completed (the inode
        // lock is held), and a write's node is published only after its data
        // write returned. Other fsyncs' chains written since need no flush
        // here: ours follows them in the log and our last flush covers them,
        // and a cut before it may lose our chain (not yet promised) but
        // never shows a wrong one (recovery stops at the first block that
        // is not a node of this checkpoint's chains).
        if w.flushes.data_out_of_place_since_flush(&self.dev) {
            w.flushes.flush(&self.dev)?;
        }
        {
            // One chain at a time: another fsync's nodes allocated between
            // these in the log, but written later, would break this chain
            // at a crash in between.
            let _order = lock_order::acquire(Level::Chain, 0, false);
            let _chain = w.chain_lock.lock();
            let stamp = self.node_stamp(&self.cp.read());
            self.nm
                .write_nodes(&w.space, stamp, nodes, NodeMarks::Fsync { dent })?;
        }
        // Chains written after this one are in the log behind it; the flush
        // that makes them durable makes this one durable too.
        w.flushes.flush(&self.dev)
    }

    /// Clears LOST_PINO when the inode's one name is again the one its
    /// `i_pino` and `i_name` record (the kernel's try_to_fix_pino), so its
    /// next fsync can roll forward.
    fn fix_lost_pino(&self, inode: &InodeInfo) -> Result<()> {
        let raw = inode.inode();
        if inode.advise & fadvise::LOST_PINO == 0 || inode.links != 1 {
            return Ok(());
        }
        let name = &raw.i_name[..(raw.i_namelen.get() as usize).min(F2FS_NAME_LEN)];
        let named = match self.lookup(raw.i_pino.get(), name) {
            Ok(entry) => entry.ino == inode.ino,
            Err(e) if e.is_refusal() => false,
            Err(e) => return Err(e),
        };
        if named {
            self.ctx().update_inode(inode.ino, |raw| {
                raw.i_advise &= !fadvise::LOST_PINO;
            })?;
        }
        Ok(())
    }

    /// How nodes written while checkpoint `cp` is in force are stamped.
    pub(super) fn node_stamp(&self, cp: &CheckpointState) -> NodeStamp {
        NodeStamp {
            cp_ver: cp.node_cp_ver(),
            features: self.check.features,
            checksum_seed: self.check.checksum_seed,
        }
    }

    /// Checkpoints when `cp_interval` has passed, too many nodes wait in
    /// memory, or more than `reclaim_segments` segments wait for a
    /// checkpoint to become free.
    pub(super) fn maybe_checkpoint(&self) -> Result<()> {
        let w = self.writer();
        let (interval, reclaim) = {
            let t = w.tunables.lock();
            (t.cp_interval(), t.reclaim_segments)
        };
        let due = w.clock.since_mount() >= *w.last_checkpoint.lock() + interval;
        if due
            || self.nm.dirty_node_count() > w.max_dirty_nodes.load(Ordering::Relaxed)
            || w.space.lock().prefree_segments() > reclaim
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Writes everything to disk and commits a checkpoint.
    pub fn checkpoint(&self) -> Result<()> {
        self.checkpoint_with(false)
    }

    pub(super) fn checkpoint_with(&self, umount: bool) -> Result<()> {
        self.exclusive(|_| self.checkpoint_locked(umount))
    }

    /// Writes a checkpoint; the caller holds `op_lock` exclusively.
    pub(super) fn checkpoint_locked(&self, umount: bool) -> Result<()> {
        let w = self.writer();
        self.write_quota_files()?;
        let mut cp = self.cp.write();
        let stamp = self.node_stamp(&cp);
        self.nm.write_dirty_nodes(&w.space, stamp)?;
        let mut space = w.space.lock();
        space.advance_full_logs()?;
        space.write_pending_ssa(&self.dev)?;
        space.debug_check();
        crate::commit::recount(&self.dev, &space, &self.nm, self.check.features, umount)?;
        let nat = self.nm.flush_nat()?;
        let sit = space.flush_sit(&self.dev, self.superblock(), &cp)?;
        let orphans: Vec<u32> = w.orphans.lock().iter().copied().collect();
        let req = CheckpointRequest {
            umount,
            orphans: &orphans,
            nat_journal: &nat.journal,
            nat_bits: &nat.bits,
            sit,
            next_free_nid: self.nm.next_free_nid(),
            quota_need_fsck: self.quota_needs_fsck(),
        };
        write_checkpoint(&self.dev, self.superblock(), &mut cp, &space, req)?;
        // Its last flush began after every write: nothing is in flight
        // while `op_lock` is held exclusively.
        w.flushes.all_durable(&self.dev);
        self.counters.add(FsCounter::CheckpointsWritten as usize, 1);
        space.commit_checkpoint();
        self.nm.commit_checkpoint(nat);
        w.need_checkpoint.store(false, Ordering::Relaxed);
        w.unsynced_blocks.reset_all();
        *w.last_checkpoint.lock() = w.clock.since_mount();
        Ok(())
    }
}
