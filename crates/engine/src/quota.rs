//! Quota accounting: the usage and limits of the quota files the
//! superblock names (`s_qf_ino`: user, group, project), kept in memory as
//! the files' own bytes (`layout::quota::QuotaFile`) and written back by
//! every checkpoint (`fs/quota.rs`).
//!
//! Usage is counted as the kernel and fsck.f2fs count it: every inode but
//! the quota inodes charges its owner's ids one inode and
//! `(i_blocks - 1) * 4096` bytes. Rather than charge at every allocation
//! site, the node manager reports each change of an inode block: the
//! charge of the block before (ids, space) against the charge after
//! ([`Quota::inode_changed`]); a freed inode reports its last charge
//! against none. So usage follows `i_blocks`, uid, gid and projid whatever
//! changes them (writes, truncation, fallocate, xattr nodes, chown,
//! recovery, eviction).
//!
//! Limits are checked before allocating ([`Quota::blocks_allowed`],
//! [`Quota::check_inode`]) for the types enforcement is on for (the
//! kernel's usrquota/grpquota/prjquota mount options); usage is tracked
//! for all types whether enforced or not.
//!
//! The files' state is under one leaf lock (docs/ARCHITECTURE.md,
//! "Concurrency and locking order", says when it is taken).

use crate::error::{Error, ErrorKind, Result};
use f2fuse_layout::node::{footer_of, inode_of, InodeLayout};
use f2fuse_layout::quota::{Dquot, QuotaFile, V2DiskHeader, QT_BLKSIZE};
use f2fuse_layout::{feature, F2FS_BLKSIZE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

pub use f2fuse_layout::quota::{GRPQUOTA, MAXQUOTAS as QUOTA_TYPES, PRJQUOTA, USRQUOTA};
/// Names of the quota types as the quota tools and mount options call them.
pub const TYPE_NAMES: [&str; QUOTA_TYPES] = ["user", "group", "project"];

/// The quota type named `name` ("user", "group", "project").
pub fn type_by_name(name: &str) -> Option<usize> {
    TYPE_NAMES.iter().position(|&n| n == name)
}

/// What an inode is charged: its ids (uid, gid, projid) and its space in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub ids: [u32; QUOTA_TYPES],
    pub space: u64,
}

/// The quota files of a writable file system with the `quota` feature.
pub struct Quota {
    qf_inos: [u32; QUOTA_TYPES],
    features: u32,
    files: Mutex<[Option<QuotaFile>; QUOTA_TYPES]>,
    /// Bit per type: limits enforced.
    enforced: AtomicU8,
}

impl Quota {
    /// Accounting into `files` (None where the superblock names no file),
    /// whose inodes are `qf_inos`.
    pub fn new(
        qf_inos: [u32; QUOTA_TYPES],
        features: u32,
        files: [Option<QuotaFile>; QUOTA_TYPES],
    ) -> Quota {
        Quota {
            qf_inos,
            features,
            files: Mutex::new(files),
            enforced: AtomicU8::new(0),
        }
    }

    pub fn is_quota_inode(&self, ino: u32) -> bool {
        ino != 0 && self.qf_inos.contains(&ino)
    }

    pub fn qf_inos(&self) -> [u32; QUOTA_TYPES] {
        self.qf_inos
    }

    /// Which types have their limits enforced (bit per type).
    pub fn set_enforced(&self, types: u8) {
        self.enforced.store(types, Ordering::Relaxed);
    }

    pub fn enforced(&self) -> u8 {
        self.enforced.load(Ordering::Relaxed)
    }

    /// The charge of node block `block` of `nid`: None unless it is an
    /// inode other than a quota inode.
    pub fn charge_of(&self, nid: u32, block: &[u8]) -> Option<Charge> {
        let footer = footer_of(block);
        if footer.ino.get() != nid || footer.ofs() != 0 || self.is_quota_inode(nid) {
            return None;
        }
        let inode = inode_of(block);
        let blocks = inode.i_blocks.get();
        if blocks == 0 {
            return None;
        }
        Some(Charge {
            ids: [inode.i_uid.get(), inode.i_gid.get(), self.projid_of(block)],
            space: (blocks - 1) * F2FS_BLKSIZE as u64,
        })
    }

    /// The project an inode block is charged to: its i_projid where the
    /// image has project quotas and the inode the field, else 0.
    fn projid_of(&self, block: &[u8]) -> u32 {
        if self.features & feature::PRJQUOTA == 0 {
            return 0;
        }
        let inode = inode_of(block);
        InodeLayout::of(inode, self.features)
            .ok()
            .and_then(|layout| inode.projid(&layout))
            .unwrap_or(0)
    }

    /// Moves usage from the `before` charge of an inode to its `after` one.
    pub fn inode_changed(&self, before: Option<Charge>, after: Option<Charge>) {
        if before == after {
            return;
        }
        let mut files = self.files.lock();
        for (qtype, file) in files.iter_mut().enumerate() {
            let Some(file) = file else { continue };
            let (b, a) = (
                before.map(|c| (c.ids[qtype], c.space)),
                after.map(|c| (c.ids[qtype], c.space)),
            );
            match (b, a) {
                (Some((old_id, old_space)), Some((new_id, new_space))) if old_id == new_id => {
                    if new_space >= old_space {
                        adjust(file, new_id, 0, new_space - old_space, false);
                    } else {
                        adjust(file, new_id, 0, old_space - new_space, true);
                    }
                }
                _ => {
                    if let Some((id, space)) = b {
                        adjust(file, id, 1, space, true);
                    }
                    if let Some((id, space)) = a {
                        adjust(file, id, 1, space, false);
                    }
                }
            }
        }
    }

    /// How many of `wanted` new blocks `ids` may be charged (all of them
    /// where no limit is enforced), as the kernel's check_bdq decides for
    /// each block: EDQUOT if not even one. Starts a grace period where the
    /// soft limit is crossed.
    pub fn blocks_allowed(&self, ids: [u32; QUOTA_TYPES], wanted: u64) -> Result<u64> {
        self.blocks_allowed_in(self.enforced(), ids, wanted)
    }

    /// [`blocks_allowed`](Self::blocks_allowed) for the types in `enforced`.
    fn blocks_allowed_in(&self, enforced: u8, ids: [u32; QUOTA_TYPES], wanted: u64) -> Result<u64> {
        if wanted == 0 {
            return Ok(0);
        }
        let now = now();
        let block = F2FS_BLKSIZE as u64;
        let mut allowed = wanted;
        self.check_enforced(enforced, ids, |header, _, d| {
            let room =
                |limit_kib: u64| limit_kib.saturating_mul(1024).saturating_sub(d.curspace) / block;
            if d.bhardlimit != 0 {
                allowed = allowed.min(room(d.bhardlimit));
            }
            if d.bsoftlimit != 0 && d.btime != 0 && now >= d.btime {
                allowed = allowed.min(room(d.bsoftlimit));
            }
            if d.bsoftlimit != 0
                && d.btime == 0
                && d.curspace.saturating_add(allowed * block) > d.bsoftlimit.saturating_mul(1024)
            {
                d.btime = now.saturating_add(header.dqi_bgrace.get() as u64);
            }
            Ok(())
        })?;
        if allowed == 0 {
            return Err(blocks_exceeded(ids));
        }
        Ok(allowed)
    }

    /// Whether `ids` may be charged all of `wanted` new blocks (a change
    /// that cannot be done in part): EDQUOT if not.
    pub fn admits_blocks(&self, ids: [u32; QUOTA_TYPES], wanted: u64) -> Result<()> {
        if self.blocks_allowed(ids, wanted)? < wanted {
            return Err(blocks_exceeded(ids));
        }
        Ok(())
    }

    /// Whether `ids` may be charged one more inode (check_idq).
    pub fn check_inode(&self, ids: [u32; QUOTA_TYPES]) -> Result<()> {
        self.check_inode_in(self.enforced(), ids)
    }

    /// [`check_inode`](Self::check_inode) for the types in `enforced`.
    fn check_inode_in(&self, enforced: u8, ids: [u32; QUOTA_TYPES]) -> Result<()> {
        let now = now();
        self.check_enforced(enforced, ids, |header, qtype, d| {
            let inodes = d.curinodes.saturating_add(1);
            let over_soft = d.isoftlimit != 0 && inodes > d.isoftlimit;
            if (d.ihardlimit != 0 && inodes > d.ihardlimit)
                || (over_soft && d.itime != 0 && now >= d.itime)
            {
                return Err(Error::new(
                    ErrorKind::QuotaExceeded,
                    format!(
                        "inode quota exceeded ({} {})",
                        TYPE_NAMES[qtype], ids[qtype]
                    ),
                ));
            }
            if over_soft && d.itime == 0 {
                d.itime = now.saturating_add(header.dqi_igrace.get() as u64);
            }
            Ok(())
        })
    }

    /// Runs `check` (given the file's header, the type and the dquot) for
    /// the id of each type in `enforced` that has an entry, keeping what it
    /// changes (a grace deadline it starts). An id without an entry has
    /// no limits.
    fn check_enforced(
        &self,
        enforced: u8,
        ids: [u32; QUOTA_TYPES],
        mut check: impl FnMut(&V2DiskHeader, usize, &mut Dquot) -> Result<()>,
    ) -> Result<()> {
        if enforced == 0 {
            return Ok(());
        }
        let mut files = self.files.lock();
        for (qtype, file) in files.iter_mut().enumerate() {
            let Some(file) = file.as_mut().filter(|_| enforced & (1 << qtype) != 0) else {
                continue;
            };
            let Some(before) = file.get(ids[qtype]) else {
                continue;
            };
            let mut d = before;
            check(file.header(), qtype, &mut d)?;
            if d != before {
                file.set(ids[qtype], &d);
            }
        }
        Ok(())
    }

    /// Whether an inode of `blocks` blocks (besides its inode block) may
    /// move to `id` of quota type `qtype` (dquot_transfer's checks).
    pub fn check_transfer(&self, qtype: usize, id: u32, blocks: u64) -> Result<()> {
        let mut ids = [0; QUOTA_TYPES];
        ids[qtype] = id;
        let only = self.enforced() & (1 << qtype);
        self.check_inode_in(only, ids)?;
        if self.blocks_allowed_in(only, ids, blocks)? < blocks {
            return Err(blocks_exceeded(ids));
        }
        Ok(())
    }

    /// The usage and limits of `id` of type `qtype`, if the image has that
    /// quota file (an id never charged has all zero).
    pub fn get(&self, qtype: usize, id: u32) -> Option<Dquot> {
        let files = self.files.lock();
        let file = files.get(qtype)?.as_ref()?;
        Some(file.get(id).unwrap_or_default())
    }

    /// Every id of `qtype` with an entry, and its dquot.
    pub fn all(&self, qtype: usize) -> Vec<(u32, Dquot)> {
        let files = self.files.lock();
        let Some(file) = files.get(qtype).and_then(|f| f.as_ref()) else {
            return Vec::new();
        };
        file.ids()
            .filter_map(|id| file.get(id).map(|d| (id, d)))
            .collect()
    }

    /// Sets the limits of `id` (block limits in 1 KiB units, as stored):
    /// ENOENT if the image has no quota file of that type. Like the
    /// kernel's do_set_dqblk, a grace deadline no longer exceeded is reset.
    pub fn set_limits(&self, qtype: usize, id: u32, limits: &Limits) -> Result<()> {
        let mut files = self.files.lock();
        let file = files
            .get_mut(qtype)
            .and_then(|f| f.as_mut())
            .ok_or_else(|| no_quota_file(qtype))?;
        let mut d = file.get(id).unwrap_or_default();
        d.bhardlimit = limits.block_hard_kib;
        d.bsoftlimit = limits.block_soft_kib;
        d.ihardlimit = limits.inode_hard;
        d.isoftlimit = limits.inode_soft;
        if d.bsoftlimit == 0 || d.curspace <= d.bsoftlimit.saturating_mul(1024) {
            d.btime = 0;
        }
        if d.isoftlimit == 0 || d.curinodes <= d.isoftlimit {
            d.itime = 0;
        }
        store(file, id, &d);
        Ok(())
    }

    /// The changed quota blocks of every file: (type, quota block number,
    /// its 1 KiB), taken so the next call returns only later changes.
    pub fn take_changes(&self) -> Vec<(usize, u32, Vec<u8>)> {
        let mut files = self.files.lock();
        let mut out = Vec::new();
        for (qtype, file) in files.iter_mut().enumerate() {
            let Some(file) = file else { continue };
            for blk in file.take_dirty() {
                let start = blk as usize * QT_BLKSIZE;
                let bytes = file.bytes()[start..start + QT_BLKSIZE].to_vec();
                out.push((qtype, blk, bytes));
            }
        }
        out
    }
}

/// ENOENT: the image keeps no quota file of type `qtype`.
pub fn no_quota_file(qtype: usize) -> Error {
    let name = TYPE_NAMES.get(qtype).unwrap_or(&"unknown");
    Error::new(ErrorKind::NotFound, format!("no {name} quota file"))
}

fn blocks_exceeded(ids: [u32; QUOTA_TYPES]) -> Error {
    Error::new(
        ErrorKind::QuotaExceeded,
        format!(
            "block quota exceeded (uid {}, gid {}, project {})",
            ids[0], ids[1], ids[2]
        ),
    )
}

/// Limits of one id: blocks in 1 KiB units (as the quota tools give
/// them), inodes; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Soft block limit in KiB (0: none).
    pub block_soft_kib: u64,
    /// Hard block limit in KiB (0: none).
    pub block_hard_kib: u64,
    /// Soft inode limit (0: none).
    pub inode_soft: u64,
    /// Hard inode limit (0: none).
    pub inode_hard: u64,
}

/// Adds (or with `release`, takes away) `inodes` and `space` bytes to
/// `id`'s usage; a release that brings usage to the soft limit or below
/// ends its grace period (dquot_decr_inodes / dquot_decr_space). Usage
/// never goes below zero (the kernel clamps it too).
fn adjust(file: &mut QuotaFile, id: u32, inodes: u64, space: u64, release: bool) {
    if inodes == 0 && space == 0 {
        return;
    }
    let mut d = file.get(id).unwrap_or_default();
    if release {
        d.curinodes = d.curinodes.saturating_sub(inodes);
        d.curspace = d.curspace.saturating_sub(space);
        if inodes > 0 && d.curinodes <= d.isoftlimit {
            d.itime = 0;
        }
        if space > 0 && d.curspace <= d.bsoftlimit.saturating_mul(1024) {
            d.btime = 0;
        }
    } else {
        d.curinodes = d.curinodes.saturating_add(inodes);
        d.curspace = d.curspace.saturating_add(space);
    }
    store(file, id, &d);
}

/// Writes `d` as the entry of `id`; an id left without usage, limits or
/// deadlines loses its entry, as the kernel deletes a released dquot that
/// has none (so files do not keep every id that ever owned something).
fn store(file: &mut QuotaFile, id: u32, d: &Dquot) {
    if *d == Dquot::default() {
        file.remove(id);
    } else {
        file.set(id, d);
    }
}

fn now() -> u64 {
    crate::time::wall_time().sec.max(0) as u64
}
