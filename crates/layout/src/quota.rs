//! Quota files (the VFS v2 revision 1 "vfsv1" format the kernel's
//! quota_v2.c and quota_tree.c read and write, and f2fs-tools' quotaio):
//! a header and info block, a 4-level radix tree of 1 KiB blocks keyed by
//! the id's bytes (most significant first), and leaf blocks of 14 entries.
//!
//! [`QuotaFile`] holds one file in memory and changes it as the kernel
//! does (block allocation, tree walk, leaf choice and free-entry list), so
//! the bytes it produces are what the kernel would have written; it records
//! which quota blocks changed.

use crate::ensure;
use crate::error::Result;
use std::collections::{BTreeMap, BTreeSet};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Quota types, in the order of the superblock's `qf_ino`.
pub const USRQUOTA: usize = 0;
pub const GRPQUOTA: usize = 1;
pub const PRJQUOTA: usize = 2;
pub const MAXQUOTAS: usize = 3;

/// Quota blocks are 1 KiB, whatever the file system's block size.
pub const QT_BLKSIZE: usize = 1024;
/// Levels of tree blocks above the leaves.
pub const QT_TREEDEPTH: usize = 4;
/// The root tree block.
pub const QT_TREEOFF: u32 = 1;
/// Entries in a leaf block: (1024 - 16) / 72.
pub const QT_ENTRIES_PER_BLOCK: usize = (QT_BLKSIZE - 16) / V2R1_DQBLK_SIZE;
pub const V2R1_DQBLK_SIZE: usize = 72;
/// dqh_version of the format with 64-bit limits.
pub const V2_VERSION_R1: u32 = 1;
/// Grace period mkfs.f2fs and the kernel give new files (7 days).
pub const MAX_DQ_TIME: u32 = 604_800;
/// dqh_magic per quota type (user, group, project).
pub const QUOTA_MAGICS: [u32; 3] = [0xD9C0_1F11, 0xD9C0_1927, 0xD9C0_3F14];

/// `struct v2_disk_dqheader` followed by `struct v2_disk_dqinfo`: quota block 0.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct V2DiskHeader {
    pub dqh_magic: U32,
    pub dqh_version: U32,
    pub dqi_bgrace: U32,
    pub dqi_igrace: U32,
    pub dqi_flags: U32,
    /// Quota blocks in the file.
    pub dqi_blocks: U32,
    /// Head of the list of free blocks.
    pub dqi_free_blk: U32,
    /// First leaf block with a free entry.
    pub dqi_free_entry: U32,
}

/// `struct qt_disk_dqdbheader`: the start of a leaf (and of a free block).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct QtDiskDqdbHeader {
    pub dqdh_next_free: U32,
    pub dqdh_prev_free: U32,
    pub dqdh_entries: U16,
    pub dqdh_pad1: U16,
    pub dqdh_pad2: U32,
}

/// `struct v2r1_disk_dqblk`: one id's usage and limits.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct V2r1DiskDqblk {
    pub dqb_id: U32,
    pub dqb_pad: U32,
    pub dqb_ihardlimit: U64,
    pub dqb_isoftlimit: U64,
    pub dqb_curinodes: U64,
    /// Block limits in 1 KiB units.
    pub dqb_bhardlimit: U64,
    pub dqb_bsoftlimit: U64,
    /// Bytes.
    pub dqb_curspace: U64,
    pub dqb_btime: U64,
    pub dqb_itime: U64,
}

const _: () = assert!(size_of::<V2DiskHeader>() == 32);
const _: () = assert!(size_of::<QtDiskDqdbHeader>() == 16);
const _: () = assert!(size_of::<V2r1DiskDqblk>() == V2R1_DQBLK_SIZE);
const _: () = assert!(QT_ENTRIES_PER_BLOCK == 14);

const LEAF_HEADER: usize = size_of::<QtDiskDqdbHeader>();

/// One id's usage and limits as the file stores them (block limits in
/// 1 KiB units, space in bytes, deadlines in seconds since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dquot {
    pub ihardlimit: u64,
    pub isoftlimit: u64,
    pub curinodes: u64,
    pub bhardlimit: u64,
    pub bsoftlimit: u64,
    pub curspace: u64,
    pub btime: u64,
    pub itime: u64,
}

impl Dquot {
    fn from_disk(d: &V2r1DiskDqblk) -> Dquot {
        let mut q = Dquot {
            ihardlimit: d.dqb_ihardlimit.get(),
            isoftlimit: d.dqb_isoftlimit.get(),
            curinodes: d.dqb_curinodes.get(),
            bhardlimit: d.dqb_bhardlimit.get(),
            bsoftlimit: d.dqb_bsoftlimit.get(),
            curspace: d.dqb_curspace.get(),
            btime: d.dqb_btime.get(),
            itime: d.dqb_itime.get(),
        };
        // An all-zero entry is stored with itime 1 (v2r1_disk2memdqb).
        if d.dqb_id.get() == 0
            && q == (Dquot {
                itime: 1,
                ..Dquot::default()
            })
        {
            q.itime = 0;
        }
        q
    }

    fn to_disk(self, id: u32) -> V2r1DiskDqblk {
        let mut d = V2r1DiskDqblk {
            dqb_id: id.into(),
            dqb_pad: 0.into(),
            dqb_ihardlimit: self.ihardlimit.into(),
            dqb_isoftlimit: self.isoftlimit.into(),
            dqb_curinodes: self.curinodes.into(),
            dqb_bhardlimit: self.bhardlimit.into(),
            dqb_bsoftlimit: self.bsoftlimit.into(),
            dqb_curspace: self.curspace.into(),
            dqb_btime: self.btime.into(),
            dqb_itime: self.itime.into(),
        };
        // Else it would read as a free slot (v2r1_mem2diskdqb).
        if d.as_bytes().iter().all(|&b| b == 0) {
            d.dqb_itime = 1.into();
        }
        d
    }
}

/// One quota file in memory.
#[derive(Debug, Clone)]
pub struct QuotaFile {
    /// The first `dqi_blocks` quota blocks.
    data: Vec<u8>,
    /// Byte offset of each id's entry.
    entries: BTreeMap<u32, usize>,
    /// Quota blocks changed since the last [`take_dirty`](Self::take_dirty).
    dirty: BTreeSet<u32>,
}

impl QuotaFile {
    /// A file with no ids yet: header and an empty root block (as
    /// mkfs.f2fs starts one), for quota type `qtype` (0 user, 1 group, 2 project).
    pub fn new(qtype: usize) -> QuotaFile {
        let mut file = QuotaFile {
            data: vec![0; 2 * QT_BLKSIZE],
            entries: BTreeMap::new(),
            dirty: [0, QT_TREEOFF].into(),
        };
        *file.header_mut() = V2DiskHeader {
            dqh_magic: QUOTA_MAGICS[qtype].into(),
            dqh_version: V2_VERSION_R1.into(),
            dqi_bgrace: MAX_DQ_TIME.into(),
            dqi_igrace: MAX_DQ_TIME.into(),
            dqi_flags: 0.into(),
            dqi_blocks: (QT_TREEOFF + 1).into(),
            dqi_free_blk: 0.into(),
            dqi_free_entry: 0.into(),
        };
        file
    }

    /// Reads a quota file of type `qtype` (its bytes up to `i_size`),
    /// checked as the kernel checks it at quota-on and while walking it.
    pub fn parse(qtype: usize, bytes: &[u8]) -> Result<QuotaFile> {
        const S: &str = "quota file";
        ensure!(bytes.len() >= QT_BLKSIZE, S, "{} bytes long", bytes.len());
        let header = V2DiskHeader::read_from_prefix(bytes)
            .expect("length checked")
            .0;
        ensure!(
            header.dqh_magic.get() == QUOTA_MAGICS[qtype]
                && header.dqh_version.get() == V2_VERSION_R1,
            S,
            "magic {:#x} version {} (type {qtype} wants {:#x} version {V2_VERSION_R1})",
            header.dqh_magic.get(),
            header.dqh_version.get(),
            QUOTA_MAGICS[qtype]
        );
        let blocks = header.dqi_blocks.get();
        ensure!(
            blocks > QT_TREEOFF && blocks as usize * QT_BLKSIZE <= bytes.len(),
            S,
            "dqi_blocks {blocks} for {} bytes",
            bytes.len()
        );
        for (name, blk) in [
            ("dqi_free_blk", header.dqi_free_blk.get()),
            ("dqi_free_entry", header.dqi_free_entry.get()),
        ] {
            ensure!(
                blk == 0 || (blk > QT_TREEOFF && blk < blocks),
                S,
                "{name} {blk} outside blocks 2..{blocks}"
            );
        }
        let mut file = QuotaFile {
            data: bytes[..blocks as usize * QT_BLKSIZE].to_vec(),
            entries: BTreeMap::new(),
            dirty: BTreeSet::new(),
        };
        file.check_list(header.dqi_free_blk.get(), "free-block")?;
        file.check_list(header.dqi_free_entry.get(), "free-entry")?;
        // Each (block, depth) is walked once: shared subtrees cost nothing twice.
        let mut seen = BTreeSet::new();
        let mut leaves = BTreeSet::new();
        file.collect_leaves(QT_TREEOFF, 0, &mut seen, &mut leaves)?;
        for leaf in leaves {
            // Links a leaf keeps for the free-entry list must stay in the file.
            let h = *file.leaf_header(leaf);
            for link in [h.dqdh_next_free.get(), h.dqdh_prev_free.get()] {
                if link != 0 {
                    file.check_block(link)?;
                }
            }
            for slot in 0..QT_ENTRIES_PER_BLOCK {
                let at = entry_offset(leaf, slot);
                if file.data[at..at + V2R1_DQBLK_SIZE].iter().all(|&b| b == 0) {
                    continue;
                }
                let id = file.u32_at(at);
                // Reached through the tree only where the id's path leads.
                if file.leaf_of(id)? == Some(leaf) {
                    file.entries.insert(id, at);
                }
            }
        }
        Ok(file)
    }

    fn collect_leaves(
        &self,
        blk: u32,
        depth: usize,
        seen: &mut BTreeSet<(u32, usize)>,
        leaves: &mut BTreeSet<u32>,
    ) -> Result<()> {
        if !seen.insert((blk, depth)) {
            return Ok(());
        }
        for i in 0..QT_BLKSIZE / 4 {
            let child = self.u32_at(blk as usize * QT_BLKSIZE + i * 4);
            if child == 0 {
                continue;
            }
            self.check_block(child)?;
            if depth == QT_TREEDEPTH - 1 {
                leaves.insert(child);
            } else {
                self.collect_leaves(child, depth + 1, seen, leaves)?;
            }
        }
        Ok(())
    }

    /// A list linked through `dqdh_next_free` from `head`: every block in
    /// range, and no loop (at most one visit per block).
    fn check_list(&self, head: u32, what: &str) -> Result<()> {
        let mut blk = head;
        let mut steps = 0;
        while blk != 0 {
            self.check_block(blk)?;
            steps += 1;
            ensure!(
                steps < self.header().dqi_blocks.get(),
                "quota file",
                "the {what} list loops"
            );
            let h = self.leaf_header(blk);
            ensure!(
                (h.dqdh_entries.get() as usize) < QT_ENTRIES_PER_BLOCK,
                "quota file",
                "block {blk} on the {what} list holds {} entries",
                h.dqdh_entries.get()
            );
            let prev = h.dqdh_prev_free.get();
            if prev != 0 {
                self.check_block(prev)?;
            }
            blk = h.dqdh_next_free.get();
        }
        Ok(())
    }

    /// The leaf the tree path of `id` leads to, if any.
    fn leaf_of(&self, id: u32) -> Result<Option<u32>> {
        let mut blk = QT_TREEOFF;
        for depth in 0..QT_TREEDEPTH {
            blk = self.u32_at(ref_offset(blk, id, depth));
            if blk == 0 {
                return Ok(None);
            }
            self.check_block(blk)?;
        }
        Ok(Some(blk))
    }

    fn check_block(&self, blk: u32) -> Result<()> {
        let blocks = self.header().dqi_blocks.get();
        ensure!(
            blk > QT_TREEOFF && blk < blocks,
            "quota file",
            "tree reference to block {blk} outside 2..{blocks}"
        );
        Ok(())
    }

    pub fn header(&self) -> &V2DiskHeader {
        V2DiskHeader::ref_from_prefix(&self.data)
            .expect("block 0")
            .0
    }

    fn header_mut(&mut self) -> &mut V2DiskHeader {
        self.dirty.insert(0);
        V2DiskHeader::mut_from_prefix(&mut self.data)
            .expect("block 0")
            .0
    }

    /// The file's bytes (`dqi_blocks` quota blocks).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The ids that have an entry.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.keys().copied()
    }

    pub fn get(&self, id: u32) -> Option<Dquot> {
        let at = *self.entries.get(&id)?;
        let disk = V2r1DiskDqblk::read_from_bytes(&self.data[at..at + V2R1_DQBLK_SIZE])
            .expect("entry size");
        Some(Dquot::from_disk(&disk))
    }

    /// Stores `dquot` for `id`, adding an entry (and the tree blocks on its
    /// path) as the kernel's qtree_write_dquot does for a new id.
    pub fn set(&mut self, id: u32, dquot: &Dquot) {
        let at = match self.entries.get(&id) {
            Some(&at) => at,
            None => {
                let at = self.insert(id);
                self.entries.insert(id, at);
                at
            }
        };
        self.data[at..at + V2R1_DQBLK_SIZE].copy_from_slice(dquot.to_disk(id).as_bytes());
        self.dirty.insert((at / QT_BLKSIZE) as u32);
    }

    /// Deletes the entry of `id`, as the kernel's qtree_delete_dquot does
    /// for a released dquot without usage or limits: the slot is freed,
    /// a leaf left empty and tree blocks left without references go on the
    /// free-block list (never the root), a full leaf rejoins the
    /// free-entry list.
    pub fn remove(&mut self, id: u32) {
        let Some(at) = self.entries.remove(&id) else {
            return;
        };
        self.remove_tree(QT_TREEOFF, id, 0, at);
    }

    /// remove_tree: clears the reference to `id` below tree block `blk`;
    /// returns whether `blk` was freed.
    fn remove_tree(&mut self, blk: u32, id: u32, depth: usize, at: usize) -> bool {
        let child_at = ref_offset(blk, id, depth);
        let child = self.u32_at(child_at);
        if child == 0 {
            return false;
        }
        let child_freed = if depth == QT_TREEDEPTH - 1 {
            self.free_entry_at(child, at);
            true
        } else {
            self.remove_tree(child, id, depth + 1, at)
        };
        if !child_freed {
            return false;
        }
        self.set_u32(child_at, 0);
        let start = blk as usize * QT_BLKSIZE;
        let empty = self.data[start..start + QT_BLKSIZE].iter().all(|&b| b == 0);
        if empty && blk != QT_TREEOFF {
            self.put_free_block(blk);
            return true;
        }
        false
    }

    /// free_dqentry: the entry at byte `at` of `leaf` goes.
    fn free_entry_at(&mut self, leaf: u32, at: usize) {
        let entries = self.leaf_header(leaf).dqdh_entries.get().saturating_sub(1);
        self.leaf_header_mut(leaf).dqdh_entries = entries.into();
        if entries == 0 {
            self.unlink_free_leaf(leaf);
            self.put_free_block(leaf);
            return;
        }
        self.data[at..at + V2R1_DQBLK_SIZE].fill(0);
        self.dirty.insert(leaf);
        if entries as usize == QT_ENTRIES_PER_BLOCK - 1 {
            // It was full: it has room again (insert_free_dqentry).
            let head = self.header().dqi_free_entry.get();
            let h = self.leaf_header_mut(leaf);
            h.dqdh_next_free = head.into();
            h.dqdh_prev_free = 0.into();
            if head != 0 {
                self.leaf_header_mut(head).dqdh_prev_free = leaf.into();
            }
            self.header_mut().dqi_free_entry = leaf.into();
        }
    }

    /// put_free_dqblk: `blk` heads the free-block list (its other bytes
    /// are left as they were, as the kernel leaves them).
    fn put_free_block(&mut self, blk: u32) {
        let head = self.header().dqi_free_blk.get();
        let h = self.leaf_header_mut(blk);
        h.dqdh_next_free = head.into();
        h.dqdh_prev_free = 0.into();
        h.dqdh_entries = 0.into();
        self.header_mut().dqi_free_blk = blk.into();
    }

    /// The quota blocks changed since the last call, in order.
    pub fn take_dirty(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.dirty).into_iter().collect()
    }

    /// do_insert_tree from the root: tree blocks allocated where the path
    /// is missing, the entry placed by find_free_dqentry; returns its offset.
    fn insert(&mut self, id: u32) -> usize {
        let mut blk = QT_TREEOFF;
        for depth in 0..QT_TREEDEPTH - 1 {
            let at = ref_offset(blk, id, depth);
            let mut child = self.u32_at(at);
            if child == 0 {
                child = self.alloc_block();
                self.set_u32(at, child);
            }
            blk = child;
        }
        let (leaf, offset) = self.free_entry();
        self.set_u32(ref_offset(blk, id, QT_TREEDEPTH - 1), leaf);
        offset
    }

    /// get_free_dqblk: a block off the free list, else a new one at the end; zeroed.
    fn alloc_block(&mut self) -> u32 {
        let free = self.header().dqi_free_blk.get();
        let blk = if free != 0 {
            let next = self.leaf_header(free).dqdh_next_free.get();
            self.header_mut().dqi_free_blk = next.into();
            free
        } else {
            let blk = self.header().dqi_blocks.get();
            self.header_mut().dqi_blocks = (blk + 1).into();
            self.data.resize((blk as usize + 1) * QT_BLKSIZE, 0);
            blk
        };
        let start = blk as usize * QT_BLKSIZE;
        self.data[start..start + QT_BLKSIZE].fill(0);
        self.dirty.insert(blk);
        blk
    }

    /// find_free_dqentry: the first free slot of the first leaf with room
    /// (a new leaf if none); a leaf filled by it leaves the free-entry list.
    fn free_entry(&mut self) -> (u32, usize) {
        let mut leaf = self.header().dqi_free_entry.get();
        if leaf == 0 {
            leaf = self.alloc_block();
            self.header_mut().dqi_free_entry = leaf.into();
        }
        let entries = self.leaf_header(leaf).dqdh_entries.get();
        if entries as usize + 1 >= QT_ENTRIES_PER_BLOCK {
            self.unlink_free_leaf(leaf);
        }
        self.leaf_header_mut(leaf).dqdh_entries = (entries + 1).into();
        let slot = (0..QT_ENTRIES_PER_BLOCK)
            .find(|&slot| {
                let at = entry_offset(leaf, slot);
                self.data[at..at + V2R1_DQBLK_SIZE].iter().all(|&b| b == 0)
            })
            // dqdh_entries counted a free slot; a leaf that lies is full.
            .unwrap_or(QT_ENTRIES_PER_BLOCK - 1);
        (leaf, entry_offset(leaf, slot))
    }

    /// remove_free_dqentry.
    fn unlink_free_leaf(&mut self, leaf: u32) {
        let h = *self.leaf_header(leaf);
        let (next, prev) = (h.dqdh_next_free.get(), h.dqdh_prev_free.get());
        if next != 0 {
            self.leaf_header_mut(next).dqdh_prev_free = prev.into();
        }
        if prev != 0 {
            self.leaf_header_mut(prev).dqdh_next_free = next.into();
        } else {
            self.header_mut().dqi_free_entry = next.into();
        }
        let h = self.leaf_header_mut(leaf);
        h.dqdh_next_free = 0.into();
        h.dqdh_prev_free = 0.into();
    }

    fn leaf_header(&self, blk: u32) -> &QtDiskDqdbHeader {
        let start = blk as usize * QT_BLKSIZE;
        QtDiskDqdbHeader::ref_from_bytes(&self.data[start..start + LEAF_HEADER])
            .expect("header size")
    }

    fn leaf_header_mut(&mut self, blk: u32) -> &mut QtDiskDqdbHeader {
        self.dirty.insert(blk);
        let start = blk as usize * QT_BLKSIZE;
        QtDiskDqdbHeader::mut_from_bytes(&mut self.data[start..start + LEAF_HEADER])
            .expect("header size")
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.data[at..at + 4].try_into().expect("4 bytes"))
    }

    fn set_u32(&mut self, at: usize, value: u32) {
        self.data[at..at + 4].copy_from_slice(&value.to_le_bytes());
        self.dirty.insert((at / QT_BLKSIZE) as u32);
    }
}

/// Where tree block `blk` keeps the reference for `id` at `depth`.
fn ref_offset(blk: u32, id: u32, depth: usize) -> usize {
    let index = (id >> (8 * (QT_TREEDEPTH - 1 - depth))) & 0xFF;
    blk as usize * QT_BLKSIZE + index as usize * 4
}

fn entry_offset(leaf: u32, slot: usize) -> usize {
    leaf as usize * QT_BLKSIZE + LEAF_HEADER + slot * V2R1_DQBLK_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_id_makes_the_mkfs_shape() {
        let mut f = QuotaFile::new(0);
        f.set(
            0,
            &Dquot {
                curinodes: 2,
                curspace: 8192,
                ..Dquot::default()
            },
        );
        let h = f.header();
        assert_eq!(
            (
                h.dqi_blocks.get(),
                h.dqi_free_blk.get(),
                h.dqi_free_entry.get()
            ),
            (6, 0, 5)
        );
        for (blk, child) in [(1, 2), (2, 3), (3, 4), (4, 5)] {
            assert_eq!(f.u32_at(blk * QT_BLKSIZE), child);
        }
        assert_eq!(f.leaf_header(5).dqdh_entries.get(), 1);
        let again = QuotaFile::parse(0, f.bytes()).unwrap();
        assert_eq!(again.get(0).unwrap().curspace, 8192);
    }

    #[test]
    fn ids_share_leaves_and_a_full_leaf_leaves_the_free_list() {
        let mut f = QuotaFile::new(1);
        let ids: Vec<u32> = (0..20).map(|i| i * 1000 + (i << 24)).collect();
        for &id in &ids {
            f.set(
                id,
                &Dquot {
                    curinodes: id as u64 + 1,
                    ..Dquot::default()
                },
            );
        }
        let again = QuotaFile::parse(1, f.bytes()).unwrap();
        for &id in &ids {
            assert_eq!(again.get(id).unwrap().curinodes, id as u64 + 1);
        }
        // 14 in the first leaf, 6 in the second, which is now the free-entry leaf.
        let leaf = f.header().dqi_free_entry.get();
        assert_eq!(f.leaf_header(leaf).dqdh_entries.get(), 6);
    }

    #[test]
    fn removed_ids_free_their_blocks_and_slots_for_new_ones() {
        let mut f = QuotaFile::new(0);
        let ids: Vec<u32> = (0..30).map(|i| i * 70_001).collect();
        for &id in &ids {
            f.set(
                id,
                &Dquot {
                    curinodes: 1,
                    ..Dquot::default()
                },
            );
        }
        let blocks = f.header().dqi_blocks.get();
        for &id in ids.iter().filter(|&&id| id % 2 == 1) {
            f.remove(id);
        }
        let again = QuotaFile::parse(0, f.bytes()).unwrap();
        for &id in &ids {
            assert_eq!(again.get(id).is_some(), id % 2 == 0, "id {id}");
        }
        assert_ne!(
            f.header().dqi_free_blk.get(),
            0,
            "freed tree blocks are listed"
        );
        // New ids take freed blocks and slots before the file grows.
        for &id in ids.iter().filter(|&&id| id % 2 == 1) {
            f.set(
                id + 1,
                &Dquot {
                    curinodes: 2,
                    ..Dquot::default()
                },
            );
        }
        assert_eq!(f.header().dqi_blocks.get(), blocks);
        let again = QuotaFile::parse(0, f.bytes()).unwrap();
        assert_eq!(again.ids().count(), ids.len());
        for id in ids {
            f.remove(id);
            f.remove(id + 1);
        }
        let empty = QuotaFile::parse(0, f.bytes()).unwrap();
        assert_eq!(empty.ids().count(), 0);
        assert_eq!(f.header().dqi_free_entry.get(), 0);
    }

    #[test]
    fn zero_entry_of_id_0_is_kept_distinct_from_a_free_slot() {
        let mut f = QuotaFile::new(2);
        f.set(0, &Dquot::default());
        let again = QuotaFile::parse(2, f.bytes()).unwrap();
        assert_eq!(again.get(0), Some(Dquot::default()));
    }

    #[test]
    fn bad_references_are_corrupt() {
        let mut f = QuotaFile::new(0);
        f.set(7, &Dquot::default());
        let mut bytes = f.bytes().to_vec();
        bytes[QT_BLKSIZE..QT_BLKSIZE + 4].copy_from_slice(&99u32.to_le_bytes());
        assert!(QuotaFile::parse(0, &bytes).is_err());
        // A free-entry list leaving the file, or looping.
        let leaf = f.header().dqi_free_entry.get() as usize;
        for next in [99u32, leaf as u32] {
            let mut bytes = f.bytes().to_vec();
            bytes[leaf * QT_BLKSIZE..leaf * QT_BLKSIZE + 4].copy_from_slice(&next.to_le_bytes());
            assert!(QuotaFile::parse(0, &bytes).is_err(), "next {next}");
        }
        assert!(QuotaFile::parse(1, f.bytes()).is_err());
    }
}
