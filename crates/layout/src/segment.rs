//! SIT, NAT and summary (SSA) structures, and the two journals kept in the
//! checkpoint's current-segment summaries.

use crate::bitmap::count_ones;
use crate::consts::*;
use crate::ensure;
use crate::error::Result;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `struct f2fs_sit_entry`: per-segment valid count, type and block map.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct SitEntry {
    /// Bits 0-9: valid blocks; bits 10-15: segment (log) type.
    pub vblocks: U16,
    pub valid_map: [u8; SIT_VBLOCK_MAP_SIZE],
    pub mtime: U64,
}

const SIT_VBLOCKS_MASK: u16 = (1 << 10) - 1;
const SIT_VBLOCKS_SHIFT: u16 = 10;

impl SitEntry {
    pub fn valid_blocks(&self) -> u32 {
        (self.vblocks.get() & SIT_VBLOCKS_MASK) as u32
    }

    pub fn seg_type(&self) -> u8 {
        (self.vblocks.get() >> SIT_VBLOCKS_SHIFT) as u8
    }

    pub fn set_vblocks(&mut self, seg_type: u8, valid: u32) {
        debug_assert!(valid <= BLOCKS_PER_SEG && seg_type < NR_CURSEG_TYPE as u8);
        self.vblocks
            .set(((seg_type as u16) << SIT_VBLOCKS_SHIFT) | valid as u16);
    }

    /// The kernel's mount-time check: count matches the map and type is a log type.
    pub fn validate(&self, segno: u32) -> Result<()> {
        let counted = count_ones(&self.valid_map);
        ensure!(
            counted == self.valid_blocks(),
            "SIT entry",
            "segment {segno}: vblocks {} but {counted} bits set in valid_map",
            self.valid_blocks()
        );
        ensure!(
            (self.seg_type() as usize) < NR_CURSEG_TYPE,
            "SIT entry",
            "segment {segno}: type {} is not a log type",
            self.seg_type()
        );
        Ok(())
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SitBlock {
    pub entries: [SitEntry; SIT_ENTRY_PER_BLOCK as usize],
    pub unused: [u8; F2FS_BLKSIZE - SIT_ENTRY_PER_BLOCK as usize * SIT_ENTRY_SIZE],
}

/// `struct f2fs_nat_entry`.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Debug,
)]
#[repr(C)]
pub struct NatEntry {
    pub version: u8,
    pub ino: U32,
    pub block_addr: U32,
}

impl NatEntry {
    pub fn new(version: u8, ino: u32, block_addr: u32) -> NatEntry {
        NatEntry {
            version,
            ino: ino.into(),
            block_addr: block_addr.into(),
        }
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct NatBlock {
    pub entries: [NatEntry; NAT_ENTRY_PER_BLOCK as usize],
    pub unused: [u8; F2FS_BLKSIZE - NAT_ENTRY_PER_BLOCK as usize * NAT_ENTRY_SIZE],
}

/// `struct f2fs_summary`: who owns one main-area block.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Debug,
)]
#[repr(C)]
pub struct Summary {
    pub nid: U32,
    pub version: u8,
    pub ofs_in_node: U16,
}

impl Summary {
    pub fn new(nid: u32, version: u8, ofs_in_node: u16) -> Summary {
        Summary {
            nid: nid.into(),
            version,
            ofs_in_node: ofs_in_node.into(),
        }
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct NatJournalEntry {
    pub nid: U32,
    pub ne: NatEntry,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct SitJournalEntry {
    pub segno: U32,
    pub se: SitEntry,
}

/// NAT journal: the journal area of the HOT_DATA summary.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct NatJournal {
    pub n_nats: U16,
    pub entries: [NatJournalEntry; NAT_JOURNAL_ENTRIES],
    pub reserved: [u8; 11],
}

/// SIT journal: the journal area of the COLD_DATA summary.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct SitJournal {
    pub n_sits: U16,
    pub entries: [SitJournalEntry; SIT_JOURNAL_ENTRIES],
    pub reserved: [u8; 37],
}

impl NatJournal {
    pub fn empty() -> NatJournal {
        NatJournal::new_zeroed()
    }

    /// Valid entries; an out-of-range count is corruption.
    pub fn valid_entries(&self) -> Result<&[NatJournalEntry]> {
        let n = self.n_nats.get() as usize;
        ensure!(
            n <= NAT_JOURNAL_ENTRIES,
            "NAT journal",
            "n_nats {n} exceeds {NAT_JOURNAL_ENTRIES}"
        );
        Ok(&self.entries[..n])
    }
}

impl SitJournal {
    pub fn empty() -> SitJournal {
        SitJournal::new_zeroed()
    }

    pub fn valid_entries(&self) -> Result<&[SitJournalEntry]> {
        let n = self.n_sits.get() as usize;
        ensure!(
            n <= SIT_JOURNAL_ENTRIES,
            "SIT journal",
            "n_sits {n} exceeds {SIT_JOURNAL_ENTRIES}"
        );
        Ok(&self.entries[..n])
    }
}

/// Summary footer `entry_type` values.
pub const SUM_TYPE_DATA: u8 = 0;
pub const SUM_TYPE_NODE: u8 = 1;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct SummaryFooter {
    pub entry_type: u8,
    pub check_sum: U32,
}

/// `struct f2fs_summary_block`: one SSA block, or a current-segment summary in the checkpoint.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone)]
#[repr(C)]
pub struct SummaryBlock {
    pub entries: [Summary; ENTRIES_IN_SUM],
    pub journal: [u8; SUM_JOURNAL_SIZE],
    pub footer: SummaryFooter,
}

impl SummaryBlock {
    pub fn nat_journal(&self) -> NatJournal {
        NatJournal::read_from_bytes(&self.journal).expect("journal size")
    }

    pub fn sit_journal(&self) -> SitJournal {
        SitJournal::read_from_bytes(&self.journal).expect("journal size")
    }

    pub fn set_journal(&mut self, journal: &[u8]) {
        self.journal.copy_from_slice(journal);
    }
}

const _: () = {
    assert!(core::mem::size_of::<SitEntry>() == SIT_ENTRY_SIZE);
    assert!(core::mem::size_of::<SitBlock>() == F2FS_BLKSIZE);
    assert!(core::mem::size_of::<NatEntry>() == NAT_ENTRY_SIZE);
    assert!(core::mem::size_of::<NatBlock>() == F2FS_BLKSIZE);
    assert!(core::mem::size_of::<Summary>() == SUMMARY_SIZE);
    assert!(core::mem::size_of::<NatJournal>() == SUM_JOURNAL_SIZE);
    assert!(core::mem::size_of::<SitJournal>() == SUM_JOURNAL_SIZE);
    assert!(core::mem::size_of::<SummaryBlock>() == F2FS_BLKSIZE);
    assert!(core::mem::offset_of!(SummaryBlock, footer) == SUM_FOOTER_OFFSET);
};

/// Where NAT block `index` of each copy lives: copies alternate per segment.
pub fn nat_block_addr(nat_blkaddr: u32, index: u32, copy: u8) -> u64 {
    let seg = BLOCKS_PER_SEG as u64;
    let i = index as u64;
    nat_blkaddr as u64 + (i / seg) * 2 * seg + i % seg + copy as u64 * seg
}

/// Where SIT block `index` of each copy lives: copy #1 follows all of copy #0.
pub fn sit_block_addr(sit_blkaddr: u32, sit_blocks_per_copy: u32, index: u32, copy: u8) -> u64 {
    sit_blkaddr as u64 + index as u64 + copy as u64 * sit_blocks_per_copy as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nat_copies_interleave_per_segment() {
        assert_eq!(nat_block_addr(2560, 0, 0), 2560);
        assert_eq!(nat_block_addr(2560, 0, 1), 3072);
        assert_eq!(nat_block_addr(2560, 511, 0), 3071);
        assert_eq!(nat_block_addr(2560, 512, 0), 3584);
        assert_eq!(nat_block_addr(2560, 512, 1), 4096);
    }

    #[test]
    fn sit_vblocks_packing() {
        let mut se = SitEntry::new_zeroed();
        se.set_vblocks(3, 1);
        assert_eq!(se.vblocks.get(), 0x0C01);
        assert_eq!((se.seg_type(), se.valid_blocks()), (3, 1));
        assert!(se.validate(0).is_err());
        se.valid_map[0] = 0x80;
        assert!(se.validate(0).is_ok());
    }
}
