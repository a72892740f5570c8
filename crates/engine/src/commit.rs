//! Writing a checkpoint (the kernel's do_checkpoint): the commit point of
//! every change. Loading a checkpoint lives in `checkpoint`, below the
//! segment and node managers this module drives.

use crate::checkpoint::CheckpointState;
use crate::device::Block;
use crate::device::{Device, IoKind};
use crate::error::{Error, ErrorKind, Result};
use crate::gc::{slot_in_node, summary_node};
use crate::node::NodeManager;
use crate::segment::{SegInfo, SegmentManager, SitFlush};
use f2fuse_layout::checkpoint::{
    compacted_blocks_needed, encode_compacted_summaries, seal_checkpoint_block, DataSummaries, LFS,
    SSR,
};
use f2fuse_layout::checkpoint::{Checkpoint, OrphanBlock};
use f2fuse_layout::segment::{NatJournal, SummaryBlock};
use f2fuse_layout::segment::{SUM_TYPE_DATA, SUM_TYPE_NODE};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::collections::HashMap;
use zerocopy::{FromZeros, IntoBytes};

/// Everything a new checkpoint records besides the segment manager.
pub struct CheckpointRequest<'a> {
    pub umount: bool,
    pub orphans: &'a [u32],
    pub nat_journal: &'a BTreeMap<u32, f2fuse_layout::segment::NatEntry>,
    pub nat_bits: &'a [u8],
    pub sit: SitFlush,
    pub next_free_nid: u32,
    /// CP_QUOTA_NEED_FSCK: the quota files are not up to date.
    pub quota_need_fsck: bool,
}

/// Writes a checkpoint pack into the slot not in use and makes it current,
/// with two flushes (the kernel's do_checkpoint: one flush, then the
/// trailing copy written with PREFLUSH|FUA). Order: everything it refers to
/// has been written (not necessarily flushed); the pack without its
/// trailing header copy; flush; the trailing copy; flush. A pack is valid
/// only when its trailing copy matches its header, and that copy is written
/// after a flush that began when the pack and all it refers to were
/// written: no flush is needed before the pack. A crash before the trailer
/// is durable leaves the previous pack in force. The last flush makes the
/// pack durable before anything it frees is written again (and before
/// fsync, sync or unmount return).
pub fn write_checkpoint(
    dev: &Device,
    sb: &SuperBlock,
    cur: &mut CheckpointState,
    sm: &SegmentManager,
    req: CheckpointRequest,
) -> Result<()> {
    let payload = sb.cp_payload.get() as usize;
    let data_logs = [
        CursegType::HotData,
        CursegType::WarmData,
        CursegType::ColdData,
    ];
    let counts = data_logs.map(|log| {
        let cs = &sm.curseg(log);
        if cs.alloc_type == SSR {
            ENTRIES_IN_SUM
        } else {
            cs.next_blkoff as usize
        }
    });
    let mut nat_journal = NatJournal::empty();
    nat_journal.n_nats.set(req.nat_journal.len() as u16);
    for (slot, (nid, entry)) in req.nat_journal.iter().enumerate() {
        nat_journal.entries[slot].nid.set(*nid);
        nat_journal.entries[slot].ne = *entry;
    }
    let compact = compacted_blocks_needed(counts) < 3;
    let data_sum_bytes = if compact {
        encode_compacted_summaries(&DataSummaries {
            nat_journal,
            sit_journal: req.sit.journal,
            entries: data_logs.map(|log| sm.curseg(log).sums[..counts[log as usize]].to_vec()),
        })
    } else {
        let mut out = Vec::new();
        for log in data_logs {
            let mut block = SummaryBlock::new_zeroed();
            block.entries.copy_from_slice(&sm.curseg(log).sums);
            match log {
                CursegType::HotData => block.set_journal(nat_journal.as_bytes()),
                CursegType::ColdData => block.set_journal(req.sit.journal.as_bytes()),
                _ => {}
            }
            block.footer.entry_type = SUM_TYPE_DATA;
            out.extend_from_slice(block.as_bytes());
        }
        out
    };
    let orphan_blocks: Vec<Vec<u8>> = {
        let chunks: Vec<&[u32]> = req.orphans.chunks(F2FS_ORPHANS_PER_BLOCK).collect();
        chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut ob = OrphanBlock::new_zeroed();
                for (slot, ino) in chunk.iter().enumerate() {
                    ob.ino[slot].set(*ino);
                }
                ob.blk_addr.set(i as u16 + 1);
                ob.blk_count.set(chunks.len() as u16);
                ob.entry_count.set(chunk.len() as u32);
                ob.as_bytes().to_vec()
            })
            .collect()
    };
    let data_blocks = data_sum_bytes.len() / F2FS_BLKSIZE;
    let node_blocks = if req.umount { 3 } else { 0 };
    let start_sum = 1 + payload + orphan_blocks.len();
    let total = start_sum + data_blocks + node_blocks + 1;
    if total + 1 > BLOCKS_PER_SEG as usize {
        return Err(Error::new(
            ErrorKind::NoSpace,
            "too many orphan inodes for one checkpoint pack",
        ));
    }

    // The header (and payload blocks holding the SIT bitmap on large file systems).
    let mut raw = vec![0u8; (1 + payload) * F2FS_BLKSIZE];
    {
        let mut cp = cur.cp.clone();
        cp.checkpoint_ver.set(cur.version().wrapping_add(1));
        cp.valid_block_count.set(sm.valid_blocks());
        cp.valid_node_count.set(sm.valid_nodes());
        cp.valid_inode_count.set(sm.valid_inodes());
        cp.free_segment_count
            .set(sm.free_segments_after_checkpoint());
        for log in CursegType::ALL {
            let cs = &sm.curseg(log);
            cp.set_curseg(log, cs.segno, cs.next_blkoff);
            cp.alloc_type[log as usize] = if cs.alloc_type == SSR { SSR } else { LFS };
        }
        let mut flags = cp_flag::CRC_RECOVERY;
        if req.umount {
            flags |= cp_flag::UMOUNT;
        }
        if compact {
            flags |= cp_flag::COMPACT_SUM;
        }
        if !req.orphans.is_empty() {
            flags |= cp_flag::ORPHAN_PRESENT;
        }
        if req.quota_need_fsck {
            flags |= cp_flag::QUOTA_NEED_FSCK;
        }
        cp.ckpt_flags.set(flags);
        cp.cp_pack_total_block_count.set(total as u32);
        cp.cp_pack_start_sum.set(start_sum as u32);
        cp.next_free_nid.set(req.next_free_nid);
        cp.checksum_offset.set(CP_CHKSUM_OFFSET as u32);
        cp.elapsed_time.set(sm.elapsed_now());
        raw[..CP_BITMAP_OFFSET].copy_from_slice(cp.as_bytes());
        let (sit_off, nat_off) = cp.bitmap_offsets(payload as u32);
        raw[sit_off..sit_off + req.sit.bits.len()].copy_from_slice(&req.sit.bits);
        raw[nat_off..nat_off + req.nat_bits.len()].copy_from_slice(req.nat_bits);
    }
    seal_checkpoint_block(&mut raw[..F2FS_BLKSIZE]);
    let header = raw[..F2FS_BLKSIZE].to_vec();

    let mut pack = raw.clone();
    for ob in &orphan_blocks {
        pack.extend_from_slice(ob);
    }
    pack.extend_from_slice(&data_sum_bytes);
    if req.umount {
        for log in [
            CursegType::HotNode,
            CursegType::WarmNode,
            CursegType::ColdNode,
        ] {
            let mut block = SummaryBlock::new_zeroed();
            block.entries.copy_from_slice(&sm.curseg(log).sums);
            block.footer.entry_type = SUM_TYPE_NODE;
            pack.extend_from_slice(block.as_bytes());
        }
    }
    debug_assert_eq!(pack.len(), (total - 1) * F2FS_BLKSIZE);
    let next_pack = 1 - cur.pack;
    let start = sb.cp_blkaddr.get() as u64 + ((next_pack as u64) << F2FS_LOG_BLOCKS_PER_SEG);
    dev.write_blocks(IoKind::Meta, start, &pack)?;
    dev.flush()?;
    dev.write_blocks(IoKind::Meta, start + total as u64 - 1, &header)?;
    dev.flush()?;

    // The new pack is in force.
    cur.cp = Checkpoint::from_block(&header);
    cur.raw = raw;
    cur.pack = next_pack;
    cur.sit_bitmap = req.sit.bits;
    cur.nat_bitmap = req.nat_bits.to_vec();
    cur.orphans = req.orphans.to_vec();
    cur.nat_journal = nat_journal;
    cur.sit_journal = req.sit.journal;
    for log in CursegType::ALL {
        cur.cur_summaries[log as usize] = Some(sm.curseg(log).sums.clone());
    }
    Ok(())
}

/// Debug builds, before a checkpoint records them: the segment manager's
/// node count against the node segments' valid blocks and its block count
/// against the SIT (at least its valid blocks: a reservation without an
/// address counts too); with `full` (at unmount: it reads the whole NAT and
/// every summary), its node and inode counts against the NAT, and every
/// valid block against its summary (the NAT points a node block's nid at
/// it; a data block's owner maps it). The free segment counts are
/// recounted by the segment manager itself (`checked_free`). Release
/// builds skip it. Every node must be written (none at `NEW_ADDR`).
pub fn recount(
    dev: &Device,
    sm: &SegmentManager,
    nm: &NodeManager,
    features: u32,
    full: bool,
) -> Result<()> {
    if !cfg!(debug_assertions) {
        return Ok(());
    }
    let health = dev.health();
    let is_node_seg =
        |seg: &SegInfo| CursegType::from_u8(seg.seg_type).is_some_and(|t| t.is_node());
    let segs = sm.segments();
    let sit_nodes: u64 = segs
        .iter()
        .filter(|s| is_node_seg(s))
        .map(|s| s.valid as u64)
        .sum();
    let sit_blocks: u64 = segs.iter().map(|s| s.valid as u64).sum();
    crate::invariant::ensure_invariant!(
        health,
        sit_nodes == sm.valid_nodes() as u64,
        "checkpoint counts {} nodes, the SIT {sit_nodes} node blocks",
        sm.valid_nodes()
    );
    crate::invariant::ensure_invariant!(
        health,
        sm.valid_blocks() >= sit_blocks,
        "checkpoint counts {} valid blocks, fewer than the {sit_blocks} the SIT has",
        sm.valid_blocks()
    );
    if !full {
        return Ok(());
    }
    let (mut nodes, mut inodes) = (0u32, 0u32);
    for (nid, blkaddr) in nm.used_nids()? {
        if nm.is_main_blkaddr(blkaddr) {
            nodes += 1;
            inodes += (nm.nat_entry(nid)?.ino.get() == nid) as u32;
        }
    }
    crate::invariant::ensure_invariant!(
        health,
        (sm.valid_nodes(), sm.valid_inodes()) == (nodes, inodes),
        "checkpoint counts {} nodes and {} inodes, the NAT has {nodes} and {inodes}",
        sm.valid_nodes(),
        sm.valid_inodes()
    );
    // Node blocks by the nid and NAT version summaries name, None for a
    // stale one (freed or reused since): a node owns up to a thousand
    // blocks, read once.
    let mut owners: HashMap<(u32, u8), Option<Block>> = HashMap::new();
    for (segno, seg) in segs.iter().enumerate() {
        let segno = segno as u32;
        if seg.valid == 0 {
            continue;
        }
        let sums = sm.read_summaries(segno)?;
        for off in (0..BLOCKS_PER_SEG as usize).filter(|&b| bitmap::test_bit_msb(&seg.valid_map, b))
        {
            let blkaddr = sm.blkaddr_of(segno, off as u32);
            let sum = sums[off];
            let owned = if is_node_seg(seg) {
                let nid = sum.nid.get();
                nid < nm.max_nid() && nm.nat_entry(nid)?.block_addr.get() == blkaddr
            } else {
                let node = match owners.entry((sum.nid.get(), sum.version)) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(new) => new.insert(summary_node(nm, sum)?),
                };
                match node {
                    Some(node) => {
                        slot_in_node(node, features, sum)?.is_some_and(|slot| slot.addr == blkaddr)
                    }
                    None => false,
                }
            };
            crate::invariant::ensure_invariant!(
                health,
                owned,
                "valid block {blkaddr:#x} (segment {segno} type {}): its summary (nid {}, offset {}) does not own it",
                seg.seg_type,
                sum.nid.get(),
                sum.ofs_in_node.get()
            );
        }
    }
    Ok(())
}
