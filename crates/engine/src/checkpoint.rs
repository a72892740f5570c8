//! Loading the valid checkpoint pack: header, version bitmaps, orphan list
//! and the current segments' summaries with the NAT and SIT journals.

use crate::device::{Device, IoKind};
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
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
    pub fn nat_copy(&self, index: u32) -> u8 {
        test_bit_msb(&self.nat_bitmap, index as usize) as u8
    }

    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
    pub fn pack_start(&self, sb: &SuperBlock) -> u64 {
        sb.cp_blkaddr.get() as u64 + ((self.pack as u64) << F2FS_LOG_BLOCKS_PER_SEG)
    }
}

/// Reads one pack's header and trailing copy; returns the header if both agree.
fn read_pack_header(dev: &Device, start: u64) -> Result<Vec<u8>> {
    let head = dev.read_block(IoKind::Meta, start)?;
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
    let tail = dev.read_block(IoKind::Meta, tail_addr)?;
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
        dev.read_blocks(IoKind::Meta, start + 1, &mut extra)?;
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
        dev.read_blocks(IoKind::Meta, start + start_sum, &mut bytes)?;
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
            let block = dev.read_block(IoKind::Meta, start + total - base + log as u64)?;
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
            let block = dev.read_block(IoKind::Meta, start + total - 4 + log.cp_index() as u64)?;
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
        let block = dev.read_block(IoKind::Meta, first + i)?;
        let orphan = OrphanBlock::read_from_bytes(&block).expect("block size");
        inos.extend(
            orphan
                .inos()
                .map_err(|e| e.at(format!("blkaddr {}", first + i)))?,
        );
    }
    Ok(inos)
}

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
