//! Loading the valid checkpoint pack: header, version bitmaps, orphan list
//! and the current segments' summaries with the NAT and SIT journals.

use crate::device::Device;
use crate::error::Result;
use f2fuse_layout::bitmap::test_bit_msb;
use f2fuse_layout::checkpoint::{
    decode_compacted_summaries, verify_checkpoint_crc, Checkpoint, OrphanBlock,
};
use f2fuse_layout::segment::{NatJournal, SitJournal, Summary, SummaryBlock};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use zerocopy::FromBytes;

/// A checkpoint pack as loaded at mount.
pub struct CheckpointState {
    /// Header block plus payload blocks (the version bitmaps live in them).
    pub raw: Vec<u8>,
    pub cp: Checkpoint,
    /// 0 or 1: which of the two packs is current.
    pub pack: u32,
    pub sit_bitmap: Vec<u8>,
    pub nat_bitmap: Vec<u8>,
    pub orphans: Vec<u32>,
    pub nat_journal: NatJournal,
    pub sit_journal: SitJournal,
    /// Summaries of the six current segments, indexed by CURSEG type. Node
    /// logs are only known when the pack carries node summaries.
    pub cur_summaries: [Option<Vec<Summary>>; NR_CURSEG_TYPE],
}

impl CheckpointState {
    pub fn version(&self) -> u64 {
        self.cp.checkpoint_ver.get()
    }

    /// Which copy (0 or 1) holds SIT block `index`.
    pub fn sit_copy(&self, index: u32) -> u8 {
        test_bit_msb(&self.sit_bitmap, index as usize) as u8
    }

    /// Which copy (0 or 1) holds NAT block `index`.
    pub fn nat_copy(&self, index: u32) -> u8 {
        test_bit_msb(&self.nat_bitmap, index as usize) as u8
    }

    pub fn pack_start(&self, sb: &SuperBlock) -> u64 {
        sb.cp_blkaddr.get() as u64 + ((self.pack as u64) << F2FS_LOG_BLOCKS_PER_SEG)
    }
}

/// Reads one pack's header and trailing copy; returns the header if both agree.
fn read_pack_header(dev: &Device, start: u64) -> Result<Vec<u8>> {
    let head = dev.read_block(start)?;
    verify_checkpoint_crc(&head).map_err(|e| e.at(format!("blkaddr {start}")))?;
    let cp = Checkpoint::from_block(&head);
    let total = cp.cp_pack_total_block_count.get();
    if !(3..=BLOCKS_PER_SEG).contains(&total) {
        return Err(Corrupt::new(
            "checkpoint",
            format!("cp_pack_total_block_count {total} outside 3..=512"),
        )
        .at(format!("blkaddr {start}"))
        .into());
    }
    let tail_addr = start + total as u64 - 1;
    let tail = dev.read_block(tail_addr)?;
    verify_checkpoint_crc(&tail)
        .map_err(|e| e.at(format!("trailing copy at blkaddr {tail_addr}")))?;
    let tail_ver = Checkpoint::from_block(&tail).checkpoint_ver.get();
    if tail_ver != cp.checkpoint_ver.get() {
        return Err(Corrupt::new(
            "checkpoint",
            format!(
                "header version {} differs from trailing copy version {tail_ver} (torn checkpoint)",
                cp.checkpoint_ver.get()
            ),
        )
        .at(format!("blkaddr {start}"))
        .into());
    }
    Ok(head.into_vec())
}

pub fn load_checkpoint(dev: &Device, sb: &SuperBlock) -> Result<CheckpointState> {
    let cp_blkaddr = sb.cp_blkaddr.get() as u64;
    let packs: Vec<Result<Vec<u8>>> = (0..2u64)
        .map(|k| read_pack_header(dev, cp_blkaddr + (k << F2FS_LOG_BLOCKS_PER_SEG)))
        .collect();
    let version = |raw: &Vec<u8>| Checkpoint::from_block(raw).checkpoint_ver.get();
    let (pack, head) = match (&packs[0], &packs[1]) {
        (Ok(a), Ok(b)) => {
            // Versions compare as a wrapping sequence, like the kernel's signed difference.
            if (version(b).wrapping_sub(version(a)) as i64) > 0 {
                (1, b.clone())
            } else {
                (0, a.clone())
            }
        }
        (Ok(a), Err(_)) => (0, a.clone()),
        (Err(_), Ok(b)) => (1, b.clone()),
        (Err(a), Err(b)) => {
            return Err(
                Corrupt::new("checkpoint", format!("no valid pack: #1: {a}; #2: {b}")).into(),
            )
        }
    };
    let start = cp_blkaddr + ((pack as u64) << F2FS_LOG_BLOCKS_PER_SEG);
    let cp = Checkpoint::from_block(&head);
    cp.validate(sb)
        .map_err(|e| e.at(format!("pack #{} at blkaddr {start}", pack + 1)))?;

    let payload = sb.cp_payload.get() as usize;
    let mut raw = head;
    if payload > 0 {
        let mut extra = vec![0u8; payload * F2FS_BLKSIZE];
        dev.read_blocks(start + 1, &mut extra)?;
        raw.extend_from_slice(&extra);
    }
    let (sit_off, nat_off) = cp.bitmap_offsets(payload as u32);
    let sit_bitmap = raw[sit_off..sit_off + cp.sit_ver_bitmap_bytesize.get() as usize].to_vec();
    let nat_bitmap = raw[nat_off..nat_off + cp.nat_ver_bitmap_bytesize.get() as usize].to_vec();

    let start_sum = cp.cp_pack_start_sum.get() as u64;
    let orphans = if cp.has_flag(cp_flag::ORPHAN_PRESENT) {
        read_orphans(
            dev,
            start + 1 + payload as u64,
            start_sum - 1 - payload as u64,
        )?
    } else {
        Vec::new()
    };

    let total = cp.cp_pack_total_block_count.get() as u64;
    // After the data summaries: the node summaries (if any) and the trailing header copy.
    let trailer = if cp.has_node_summaries() { 4 } else { 1 };
    let mut cur_summaries: [Option<Vec<Summary>>; NR_CURSEG_TYPE] = Default::default();
    let data_logs = [
        CursegType::HotData,
        CursegType::WarmData,
        CursegType::ColdData,
    ];
    let (nat_journal, sit_journal) = if cp.has_flag(cp_flag::COMPACT_SUM) {
        let counts = data_logs.map(|log| cp.compacted_entry_count(log));
        let blocks = f2fuse_layout::checkpoint::compacted_blocks_needed(counts) as u64;
        check_in_pack(start_sum, blocks + trailer, total, "compacted summaries")?;
        let mut bytes = vec![0u8; blocks as usize * F2FS_BLKSIZE];
        dev.read_blocks(start + start_sum, &mut bytes)?;
        let sums = decode_compacted_summaries(&bytes, counts)
            .map_err(|e| e.at(format!("checkpoint pack #{}", pack + 1)))?;
        for (i, entries) in sums.entries.into_iter().enumerate() {
            cur_summaries[i] = Some(entries);
        }
        (sums.nat_journal, sums.sit_journal)
    } else {
        let base = 3 + trailer;
        check_in_pack(start_sum, base, total, "data summaries")?;
        let mut journals = (NatJournal::empty(), SitJournal::empty());
        for log in data_logs {
            let block = dev.read_block(start + total - base + log as u64)?;
            let sum = SummaryBlock::read_from_bytes(&block).expect("block size");
            match log {
                CursegType::HotData => journals.0 = sum.nat_journal(),
                CursegType::ColdData => journals.1 = sum.sit_journal(),
                _ => {}
            }
            cur_summaries[log as usize] = Some(sum.entries.to_vec());
        }
        journals.0.valid_entries()?;
        journals.1.valid_entries()?;
        journals
    };
    if cp.has_node_summaries() {
        for log in [
            CursegType::HotNode,
            CursegType::WarmNode,
            CursegType::ColdNode,
        ] {
            let block = dev.read_block(start + total - 4 + log.cp_index() as u64)?;
            let sum = SummaryBlock::read_from_bytes(&block).expect("block size");
            cur_summaries[log as usize] = Some(sum.entries.to_vec());
        }
    }
    Ok(CheckpointState {
        raw,
        cp,
        pack,
        sit_bitmap,
        nat_bitmap,
        orphans,
        nat_journal,
        sit_journal,
        cur_summaries,
    })
}

/// Checks that `blocks` blocks from `cp_pack_start_sum` on (the summaries and
/// what follows them) fit in the pack, so no block address below underflows.
fn check_in_pack(start_sum: u64, blocks: u64, total: u64, what: &str) -> Result<()> {
    if start_sum + blocks > total {
        return Err(Corrupt::new(
            "checkpoint",
            format!(
                "{what} and the blocks after them need {blocks} blocks from \
                 cp_pack_start_sum {start_sum}, past cp_pack_total_block_count {total}"
            ),
        )
        .into());
    }
    Ok(())
}

fn read_orphans(dev: &Device, first: u64, count: u64) -> Result<Vec<u32>> {
    let mut inos = Vec::new();
    for i in 0..count {
        let block = dev.read_block(first + i)?;
        let orphan = OrphanBlock::read_from_bytes(&block).expect("block size");
        inos.extend(
            orphan
                .inos()
                .map_err(|e| e.at(format!("blkaddr {}", first + i)))?,
        );
    }
    Ok(inos)
}

use crate::segment::{SegmentManager, SitFlush};
use f2fuse_layout::checkpoint::{
    compacted_blocks_needed, encode_compacted_summaries, seal_checkpoint_block, DataSummaries, LFS,
    SSR,
};
use f2fuse_layout::segment::{SUM_TYPE_DATA, SUM_TYPE_NODE};
use std::collections::BTreeMap;
use zerocopy::{FromZeros, IntoBytes};

impl CheckpointState {
    /// The tag node footers carry while this checkpoint is in force.
    pub fn node_cp_ver(&self) -> u64 {
        let offset = self.cp.checksum_offset.get() as usize;
        let crc = u32::from_le_bytes(self.raw[offset..offset + 4].try_into().unwrap());
        let ver = self.cp.checkpoint_ver.get();
        if self.cp.has_flag(cp_flag::CRC_RECOVERY) {
            (ver & 0xFFFF_FFFF) | ((crc as u64) << 32)
        } else {
            ver
        }
    }
}

/// Everything a new checkpoint records besides the segment manager.
pub struct CheckpointRequest<'a> {
    pub umount: bool,
    pub orphans: &'a [u32],
    pub nat_journal: &'a BTreeMap<u32, f2fuse_layout::segment::NatEntry>,
    pub nat_bits: &'a [u8],
    pub sit: SitFlush,
    pub next_free_nid: u32,
}

/// Writes a checkpoint pack into the slot not in use and makes it current.
/// Order: everything it refers to is already on disk; flush; the pack
/// without its trailing header copy; flush; the trailing copy; flush. A
/// crash before the trailer is durable leaves the previous pack in force.
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
        let cs = &sm.cursegs[log as usize];
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
            entries: data_logs
                .map(|log| sm.cursegs[log as usize].sums[..counts[log as usize]].to_vec()),
        })
    } else {
        let mut out = Vec::new();
        for log in data_logs {
            let mut block = SummaryBlock::new_zeroed();
            block
                .entries
                .copy_from_slice(&sm.cursegs[log as usize].sums);
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
        return Err(crate::error::Error::errno(
            libc::ENOSPC,
            "too many orphan inodes for one checkpoint pack",
        ));
    }

    // The header (and payload blocks holding the SIT bitmap on large file systems).
    let mut raw = vec![0u8; (1 + payload) * F2FS_BLKSIZE];
    {
        let mut cp = cur.cp.clone();
        cp.checkpoint_ver.set(cur.version().wrapping_add(1));
        cp.valid_block_count.set(sm.valid_blocks);
        cp.valid_node_count.set(sm.valid_nodes);
        cp.valid_inode_count.set(sm.valid_inodes);
        cp.free_segment_count
            .set(sm.free_segments_after_checkpoint());
        for log in CursegType::ALL {
            let cs = &sm.cursegs[log as usize];
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
            block
                .entries
                .copy_from_slice(&sm.cursegs[log as usize].sums);
            block.footer.entry_type = SUM_TYPE_NODE;
            pack.extend_from_slice(block.as_bytes());
        }
    }
    debug_assert_eq!(pack.len(), (total - 1) * F2FS_BLKSIZE);
    let next_pack = 1 - cur.pack;
    let start = sb.cp_blkaddr.get() as u64 + ((next_pack as u64) << F2FS_LOG_BLOCKS_PER_SEG);
    dev.flush()?;
    dev.write_blocks(start, &pack)?;
    dev.flush()?;
    dev.write_blocks(start + total as u64 - 1, &header)?;
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
        cur.cur_summaries[log as usize] = Some(sm.cursegs[log as usize].sums.clone());
    }
    Ok(())
}
