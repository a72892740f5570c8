//! The segment information table: per-segment valid block counts, maps and
//! log types, read from the current SIT copies and overridden by the journal.

use crate::checkpoint::CheckpointState;
use crate::device::Device;
use crate::error::Result;
use f2fuse_layout::segment::{sit_block_addr, SitBlock, SitEntry};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use zerocopy::FromBytes;

/// Usage of the main area, counted from the SIT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentUsage {
    /// Segments with no valid block that are not current.
    pub free: u32,
    /// Segments with some but not all blocks valid.
    pub dirty: u32,
    pub full: u32,
    pub valid_blocks: u64,
    pub valid_node_blocks: u64,
    /// Segments per log type (0..6), counting only segments with valid blocks or current.
    pub per_type: [u32; NR_CURSEG_TYPE],
}

pub struct SitTable {
    pub entries: Vec<SitEntry>,
}

impl SitTable {
    pub fn load(dev: &Device, sb: &SuperBlock, cp: &CheckpointState) -> Result<SitTable> {
        let main = sb.segment_count_main.get() as usize;
        let blocks = main.div_ceil(SIT_ENTRY_PER_BLOCK as usize);
        let per_copy = sb.sit_blocks_per_copy();
        let mut entries = Vec::with_capacity(main);
        // Read runs of consecutive SIT blocks that live in the same copy at once.
        let mut index = 0u32;
        while (index as usize) < blocks {
            let copy = cp.sit_copy(index);
            let mut run = 1u32;
            while ((index + run) as usize) < blocks && cp.sit_copy(index + run) == copy && run < 256
            {
                run += 1;
            }
            let mut buf = vec![0u8; run as usize * F2FS_BLKSIZE];
            dev.read_blocks(
                sit_block_addr(sb.sit_blkaddr.get(), per_copy, index, copy),
                &mut buf,
            )?;
            for chunk in buf.chunks_exact(F2FS_BLKSIZE) {
                let block = SitBlock::read_from_bytes(chunk).expect("block size");
                let left = main - entries.len();
                entries.extend_from_slice(&block.entries[..left.min(SIT_ENTRY_PER_BLOCK as usize)]);
            }
            index += run;
        }
        for je in cp.sit_journal.valid_entries()? {
            let segno = je.segno.get() as usize;
            if segno >= main {
                return Err(Corrupt::new(
                    "SIT journal",
                    format!("segment {segno} outside the {main} main segments"),
                )
                .into());
            }
            entries[segno] = je.se;
        }
        for (segno, entry) in entries.iter().enumerate() {
            entry.validate(segno as u32)?;
        }
        Ok(SitTable { entries })
    }

    pub fn usage(&self, cp: &CheckpointState) -> SegmentUsage {
        let current: Vec<u32> = CursegType::ALL
            .iter()
            .map(|&log| cp.cp.curseg(log).0)
            .collect();
        let mut usage = SegmentUsage::default();
        for (segno, entry) in self.entries.iter().enumerate() {
            let valid = entry.valid_blocks();
            let is_current = current.contains(&(segno as u32));
            usage.valid_blocks += valid as u64;
            if CursegType::from_u8(entry.seg_type()).is_some_and(|t| t.is_node()) {
                usage.valid_node_blocks += valid as u64;
            }
            if valid > 0 || is_current {
                usage.per_type[entry.seg_type() as usize] += 1;
            }
            match valid {
                0 if !is_current => usage.free += 1,
                0 => {}
                v if v == BLOCKS_PER_SEG => usage.full += 1,
                _ => usage.dirty += 1,
            }
        }
        usage
    }
}
