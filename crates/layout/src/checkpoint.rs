//! The checkpoint pack: header (`struct f2fs_checkpoint`), orphan blocks and
//! the compacted form of the current data segments' summaries.

use crate::consts::*;
use crate::crc::f2fs_checksum;
use crate::ensure;
use crate::error::Result;
use crate::segment::{NatJournal, SitJournal, Summary};
use crate::superblock::SuperBlock;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The fixed part of the checkpoint header; the version bitmaps follow at byte 192.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone)]
#[repr(C)]
pub struct Checkpoint {
    pub checkpoint_ver: U64,
    pub user_block_count: U64,
    pub valid_block_count: U64,
    pub rsvd_segment_count: U32,
    pub overprov_segment_count: U32,
    pub free_segment_count: U32,
    pub cur_node_segno: [U32; MAX_ACTIVE_LOGS / 2],
    pub cur_node_blkoff: [U16; MAX_ACTIVE_LOGS / 2],
    pub cur_data_segno: [U32; MAX_ACTIVE_LOGS / 2],
    pub cur_data_blkoff: [U16; MAX_ACTIVE_LOGS / 2],
    pub ckpt_flags: U32,
    pub cp_pack_total_block_count: U32,
    pub cp_pack_start_sum: U32,
    pub valid_node_count: U32,
    pub valid_inode_count: U32,
    pub next_free_nid: U32,
    pub sit_ver_bitmap_bytesize: U32,
    pub nat_ver_bitmap_bytesize: U32,
    pub checksum_offset: U32,
    pub elapsed_time: U64,
    pub alloc_type: [u8; MAX_ACTIVE_LOGS],
}

const _: () = {
    assert!(core::mem::size_of::<Checkpoint>() == CP_BITMAP_OFFSET);
    assert!(core::mem::offset_of!(Checkpoint, cur_node_segno) == 0x24);
    assert!(core::mem::offset_of!(Checkpoint, ckpt_flags) == 0x84);
    assert!(core::mem::offset_of!(Checkpoint, elapsed_time) == 0xA8);
};

/// Allocation mode of a log (`alloc_type`).
pub const LFS: u8 = 0;
pub const SSR: u8 = 1;

impl Checkpoint {
    pub fn from_block(block: &[u8]) -> Checkpoint {
        Checkpoint::read_from_bytes(&block[..CP_BITMAP_OFFSET]).expect("block is 4 KiB")
    }

    pub fn flags(&self) -> u32 {
        self.ckpt_flags.get()
    }

    pub fn has_flag(&self, flag: u32) -> bool {
        self.ckpt_flags.get() & flag != 0
    }

    /// Segment and next-free offset of a log.
    pub fn curseg(&self, log: CursegType) -> (u32, u16) {
        let i = log.cp_index();
        if log.is_node() {
            (self.cur_node_segno[i].get(), self.cur_node_blkoff[i].get())
        } else {
            (self.cur_data_segno[i].get(), self.cur_data_blkoff[i].get())
        }
    }

    pub fn set_curseg(&mut self, log: CursegType, segno: u32, blkoff: u16) {
        let i = log.cp_index();
        if log.is_node() {
            self.cur_node_segno[i].set(segno);
            self.cur_node_blkoff[i].set(blkoff);
        } else {
            self.cur_data_segno[i].set(segno);
            self.cur_data_blkoff[i].set(blkoff);
        }
    }

    /// `alloc_type` is indexed by CURSEG type (data logs first).
    pub fn alloc_type_of(&self, log: CursegType) -> u8 {
        self.alloc_type[log as usize]
    }

    /// Summary entries the compacted form holds for a data log.
    pub fn compacted_entry_count(&self, log: CursegType) -> usize {
        debug_assert!(!log.is_node());
        if self.alloc_type_of(log) == SSR {
            ENTRIES_IN_SUM
        } else {
            self.curseg(log).1 as usize
        }
    }

    pub fn has_node_summaries(&self) -> bool {
        self.has_flag(cp_flag::UMOUNT) || self.has_flag(cp_flag::FASTBOOT)
    }

    /// Byte offsets (within header + payload blocks) of the SIT and NAT version bitmaps.
    pub fn bitmap_offsets(&self, cp_payload: u32) -> (usize, usize) {
        let sit_size = self.sit_ver_bitmap_bytesize.get() as usize;
        if self.has_flag(cp_flag::LARGE_NAT_BITMAP) {
            let nat = CP_BITMAP_OFFSET + 4;
            (nat + self.nat_ver_bitmap_bytesize.get() as usize, nat)
        } else if cp_payload > 0 {
            (F2FS_BLKSIZE, CP_BITMAP_OFFSET)
        } else {
            (CP_BITMAP_OFFSET, CP_BITMAP_OFFSET + sit_size)
        }
    }

    /// Kernel mount-time sanity checks of a header against its superblock.
    pub fn validate(&self, sb: &SuperBlock) -> Result<()> {
        const S: &str = "checkpoint";
        let main = sb.segment_count_main.get();
        let meta = sb.segment_count_ckpt.get() as u64
            + sb.segment_count_sit.get() as u64
            + sb.segment_count_nat.get() as u64
            + sb.segment_count_ssa.get() as u64
            + self.rsvd_segment_count.get() as u64;
        ensure!(
            meta < sb.segment_count.get() as u64,
            S,
            "metadata plus reserved segments ({meta}) leave no main area"
        );
        ensure!(
            self.rsvd_segment_count.get() != 0 && self.overprov_segment_count.get() != 0,
            S,
            "rsvd_segment_count {} / overprov_segment_count {} must be non-zero",
            self.rsvd_segment_count.get(),
            self.overprov_segment_count.get()
        );
        let user = self.user_block_count.get();
        let main_blocks = (main as u64) << F2FS_LOG_BLOCKS_PER_SEG;
        ensure!(
            user > 0 && user < main_blocks,
            S,
            "user_block_count {user} outside (0, {main_blocks})"
        );
        ensure!(
            self.valid_block_count.get() <= user,
            S,
            "valid_block_count {} exceeds user_block_count {user}",
            self.valid_block_count.get()
        );
        ensure!(
            self.free_segment_count.get() <= main,
            S,
            "free_segment_count {} exceeds main segments {main}",
            self.free_segment_count.get()
        );
        ensure!(
            (self.valid_node_count.get() as u64) < sb.max_nid() as u64,
            S,
            "valid_node_count {} exceeds the NAT capacity",
            self.valid_node_count.get()
        );
        ensure!(
            self.valid_inode_count.get() <= self.valid_node_count.get(),
            S,
            "valid_inode_count {} exceeds valid_node_count {}",
            self.valid_inode_count.get(),
            self.valid_node_count.get()
        );
        for log in CursegType::ALL {
            let (segno, blkoff) = self.curseg(log);
            ensure!(
                segno < main && (blkoff as u32) < BLOCKS_PER_SEG,
                S,
                "{} log at segment {segno} offset {blkoff} outside the main area",
                log.name()
            );
            ensure!(
                self.alloc_type_of(log) <= SSR,
                S,
                "{} log alloc_type {}",
                log.name(),
                self.alloc_type_of(log)
            );
            for other in CursegType::ALL {
                if other > log {
                    ensure!(
                        self.curseg(other).0 != segno,
                        S,
                        "{} and {} logs share segment {segno}",
                        log.name(),
                        other.name()
                    );
                }
            }
        }
        let sit_size = (sb.segment_count_sit.get() / 2) * BLOCKS_PER_SEG / 8;
        let nat_size = (sb.segment_count_nat.get() / 2) * BLOCKS_PER_SEG / 8;
        ensure!(
            self.sit_ver_bitmap_bytesize.get() == sit_size
                && self.nat_ver_bitmap_bytesize.get() == nat_size,
            S,
            "version bitmap sizes sit={} nat={} (expected {sit_size}, {nat_size})",
            self.sit_ver_bitmap_bytesize.get(),
            self.nat_ver_bitmap_bytesize.get()
        );
        let payload = sb.cp_payload.get();
        let start_sum = self.cp_pack_start_sum.get();
        ensure!(
            start_sum > payload && start_sum <= BLOCKS_PER_SEG - 1 - NR_CURSEG_TYPE as u32,
            S,
            "cp_pack_start_sum {start_sum} with cp_payload {payload}"
        );
        let total = self.cp_pack_total_block_count.get();
        ensure!(
            total > start_sum && total <= BLOCKS_PER_SEG,
            S,
            "cp_pack_total_block_count {total} with cp_pack_start_sum {start_sum}"
        );
        let (sit_off, nat_off) = self.bitmap_offsets(payload);
        let area_end = F2FS_BLKSIZE * (1 + payload as usize);
        let checksum_offset = self.checksum_offset.get() as usize;
        let nat_end = nat_off + nat_size as usize;
        let sit_end = sit_off + sit_size as usize;
        ensure!(
            nat_end <= area_end && sit_end <= area_end,
            S,
            "version bitmaps do not fit the header and {payload} payload blocks"
        );
        if self.has_flag(cp_flag::LARGE_NAT_BITMAP) {
            ensure!(
                checksum_offset == CP_MIN_CHKSUM_OFFSET,
                S,
                "large NAT bitmap layout requires checksum_offset 192, found {checksum_offset}"
            );
        } else if payload == 0 {
            ensure!(
                sit_end.max(nat_end) <= checksum_offset,
                S,
                "version bitmaps overlap the checksum at {checksum_offset}"
            );
        }
        ensure!(
            !self.has_flag(cp_flag::ERROR),
            S,
            "CP_ERROR is set: the file system recorded a fatal error; run fsck.f2fs"
        );
        Ok(())
    }
}

/// Verifies the CRC of a checkpoint header block (and its `checksum_offset`).
pub fn verify_checkpoint_crc(block: &[u8]) -> Result<()> {
    let cp = Checkpoint::from_block(block);
    let offset = cp.checksum_offset.get() as usize;
    ensure!(
        (CP_MIN_CHKSUM_OFFSET..=CP_CHKSUM_OFFSET).contains(&offset),
        "checkpoint",
        "checksum_offset {offset} outside [{CP_MIN_CHKSUM_OFFSET}, {CP_CHKSUM_OFFSET}]"
    );
    let stored = u32::from_le_bytes(block[offset..offset + 4].try_into().unwrap());
    let computed = checkpoint_crc(block, offset);
    ensure!(
        stored == computed,
        "checkpoint",
        "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
    );
    Ok(())
}

fn checkpoint_crc(block: &[u8], offset: usize) -> u32 {
    let mut crc = f2fs_checksum(&block[..offset]);
    if offset < CP_CHKSUM_OFFSET {
        crc = crate::crc::f2fs_crc32(crc, &block[offset + 4..F2FS_BLKSIZE]);
    }
    crc
}

/// Stores the CRC at the header's `checksum_offset`; returns it.
pub fn seal_checkpoint_block(block: &mut [u8]) -> u32 {
    let offset = Checkpoint::from_block(block).checksum_offset.get() as usize;
    let crc = checkpoint_crc(block, offset);
    block[offset..offset + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// `struct f2fs_orphan_block`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct OrphanBlock {
    pub ino: [U32; F2FS_ORPHANS_PER_BLOCK],
    pub reserved: U32,
    pub blk_addr: U16,
    pub blk_count: U16,
    pub entry_count: U32,
    pub check_sum: U32,
}

const _: () = assert!(core::mem::size_of::<OrphanBlock>() == F2FS_BLKSIZE);

impl OrphanBlock {
    pub fn inos(&self) -> Result<Vec<u32>> {
        let n = self.entry_count.get() as usize;
        ensure!(
            n <= F2FS_ORPHANS_PER_BLOCK,
            "orphan block",
            "entry_count {n} exceeds {F2FS_ORPHANS_PER_BLOCK}"
        );
        Ok(self.ino[..n].iter().map(|i| i.get()).collect())
    }
}

/// Journals and current data-log summaries, as stored in a checkpoint pack.
pub struct DataSummaries {
    pub nat_journal: NatJournal,
    pub sit_journal: SitJournal,
    /// Entries for HOT, WARM, COLD data logs (as many as the compacted form holds).
    pub entries: [Vec<Summary>; NR_CURSEG_DATA_TYPE],
}

/// Summary entries of the first compacted block, and of each further one.
const COMPACT_FIRST_OFFSET: usize = 2 * SUM_JOURNAL_SIZE;
const COMPACT_LIMIT: usize = F2FS_BLKSIZE - 5;

/// Blocks the compacted form needs for these entry counts (the kernel uses it only if < 3).
pub fn compacted_blocks_needed(counts: [usize; NR_CURSEG_DATA_TYPE]) -> usize {
    let total: usize = counts.iter().sum();
    let first = (COMPACT_LIMIT - COMPACT_FIRST_OFFSET) / SUMMARY_SIZE;
    let rest = COMPACT_LIMIT / SUMMARY_SIZE;
    if total <= first {
        1
    } else {
        1 + (total - first).div_ceil(rest)
    }
}

/// Decodes compacted data summaries from consecutive pack blocks.
pub fn decode_compacted_summaries(
    blocks: &[u8],
    counts: [usize; NR_CURSEG_DATA_TYPE],
) -> Result<DataSummaries> {
    ensure!(
        blocks.len().is_multiple_of(F2FS_BLKSIZE) && !blocks.is_empty(),
        "compacted summary",
        "need whole blocks"
    );
    let nat_journal = NatJournal::read_from_bytes(&blocks[..SUM_JOURNAL_SIZE]).unwrap();
    let sit_journal =
        SitJournal::read_from_bytes(&blocks[SUM_JOURNAL_SIZE..COMPACT_FIRST_OFFSET]).unwrap();
    nat_journal.valid_entries()?;
    sit_journal.valid_entries()?;
    let mut entries: [Vec<Summary>; 3] = Default::default();
    let (mut block, mut offset) = (0usize, COMPACT_FIRST_OFFSET);
    for (log, count) in counts.iter().enumerate() {
        ensure!(
            *count <= ENTRIES_IN_SUM,
            "compacted summary",
            "{count} entries for one log"
        );
        for _ in 0..*count {
            let start = block * F2FS_BLKSIZE + offset;
            ensure!(
                start + SUMMARY_SIZE <= blocks.len(),
                "compacted summary",
                "entries run past the {} summary blocks",
                blocks.len() / F2FS_BLKSIZE
            );
            entries[log]
                .push(Summary::read_from_bytes(&blocks[start..start + SUMMARY_SIZE]).unwrap());
            offset += SUMMARY_SIZE;
            if offset + SUMMARY_SIZE > COMPACT_LIMIT {
                block += 1;
                offset = 0;
            }
        }
    }
    Ok(DataSummaries {
        nat_journal,
        sit_journal,
        entries,
    })
}

/// Encodes compacted data summaries into as many blocks as needed.
pub fn encode_compacted_summaries(sums: &DataSummaries) -> Vec<u8> {
    let counts = [0, 1, 2].map(|i| sums.entries[i].len());
    let mut out = vec![0u8; compacted_blocks_needed(counts) * F2FS_BLKSIZE];
    out[..SUM_JOURNAL_SIZE].copy_from_slice(sums.nat_journal.as_bytes());
    out[SUM_JOURNAL_SIZE..COMPACT_FIRST_OFFSET].copy_from_slice(sums.sit_journal.as_bytes());
    let (mut block, mut offset) = (0usize, COMPACT_FIRST_OFFSET);
    for entry in sums.entries.iter().flatten() {
        let start = block * F2FS_BLKSIZE + offset;
        out[start..start + SUMMARY_SIZE].copy_from_slice(entry.as_bytes());
        offset += SUMMARY_SIZE;
        if offset + SUMMARY_SIZE > COMPACT_LIMIT {
            block += 1;
            offset = 0;
        }
    }
    out
}

/// Zeroed header with the fixed fields a fresh checkpoint needs.
pub fn new_checkpoint_block() -> Vec<u8> {
    let mut block = vec![0u8; F2FS_BLKSIZE];
    let mut cp = Checkpoint::new_zeroed();
    cp.checksum_offset.set(CP_CHKSUM_OFFSET as u32);
    block[..CP_BITMAP_OFFSET].copy_from_slice(cp.as_bytes());
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_capacity_matches_format_doc() {
        assert_eq!(compacted_blocks_needed([439, 0, 0]), 1);
        assert_eq!(compacted_blocks_needed([400, 40, 0]), 2);
        assert_eq!(compacted_blocks_needed([439, 584, 0]), 2);
        assert_eq!(compacted_blocks_needed([439, 584, 1]), 3);
    }

    #[test]
    fn compacted_round_trip_across_blocks() {
        let mut sums = DataSummaries {
            nat_journal: NatJournal::empty(),
            sit_journal: SitJournal::empty(),
            entries: Default::default(),
        };
        sums.nat_journal.n_nats.set(1);
        sums.nat_journal.entries[0].nid.set(3);
        for i in 0..500u32 {
            sums.entries[(i % 3) as usize].push(Summary::new(i, (i % 7) as u8, i as u16));
        }
        let bytes = encode_compacted_summaries(&sums);
        assert_eq!(bytes.len(), 2 * F2FS_BLKSIZE);
        let counts = [0, 1, 2].map(|i| sums.entries[i].len());
        let back = decode_compacted_summaries(&bytes, counts).unwrap();
        assert_eq!(back.entries, sums.entries);
        assert_eq!(back.nat_journal.entries[0].nid.get(), 3);
    }

    #[test]
    fn crc_seal_and_verify() {
        let mut block = new_checkpoint_block();
        block[0] = 0x45;
        seal_checkpoint_block(&mut block);
        verify_checkpoint_crc(&block).unwrap();
        block[100] ^= 1;
        assert!(verify_checkpoint_crc(&block).is_err());
    }
}
