//! The segment information table: per-segment valid block counts, maps and
//! log types, read from the current SIT copies and overridden by the journal.

use crate::checkpoint::CheckpointState;
use crate::device::{Device, IoKind};
use crate::error::{Error, ErrorKind, Result};
use f2fuse_layout::segment::{
    sit_block_addr, sit_block_addr as sit_addr, SitBlock, SitEntry, SitJournal, Summary,
    SummaryBlock, SUM_TYPE_DATA, SUM_TYPE_NODE,
};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

mod stream;
use std::collections::BTreeMap;
pub use stream::StreamRequest;

/// Main-area segments by state; every segment is in exactly one of
/// free, prefree, dirty and full, so they add up to the main segments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    /// No valid block now nor at the last checkpoint, and not a log's segment.
    pub free: u32,
    /// No valid block now but some at the last checkpoint: free after the next one.
    pub prefree: u32,
    /// Some blocks valid, or a log's segment (open for writing) not yet full.
    pub dirty: u32,
    /// Every block valid.
    pub full: u32,
    /// Segments the six logs write to (counted in dirty or full as well).
    pub current: u32,
}

impl SegmentCounts {
    /// Counts segments given as (valid blocks now, valid at the last checkpoint, is a log's).
    pub fn classify(segments: impl Iterator<Item = (u32, u32, bool)>) -> SegmentCounts {
        let mut counts = SegmentCounts::default();
        for (valid, ckpt_valid, current) in segments {
            counts.current += current as u32;
            match (valid, ckpt_valid, current) {
                (BLOCKS_PER_SEG, _, _) => counts.full += 1,
                (0, 0, false) => counts.free += 1,
                (0, _, false) => counts.prefree += 1,
                _ => counts.dirty += 1,
            }
        }
        counts
    }

    /// All segments.
    pub fn total(&self) -> u32 {
        self.free + self.prefree + self.dirty + self.full
    }
}

/// Usage of the main area, counted from the SIT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentUsage {
    pub segments: SegmentCounts,
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
                IoKind::Meta,
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
        let is_current = |segno: usize| current.contains(&(segno as u32));
        let mut usage = SegmentUsage {
            // A loaded SIT is the checkpoint's: valid now = valid at the checkpoint.
            segments: SegmentCounts::classify(self.entries.iter().enumerate().map(
                |(segno, entry)| {
                    let valid = entry.valid_blocks();
                    (valid, valid, is_current(segno))
                },
            )),
            ..SegmentUsage::default()
        };
        for (segno, entry) in self.entries.iter().enumerate() {
            let valid = entry.valid_blocks();
            usage.valid_blocks += valid as u64;
            if CursegType::from_u8(entry.seg_type()).is_some_and(|t| t.is_node()) {
                usage.valid_node_blocks += valid as u64;
            }
            if valid > 0 || is_current(segno) {
                usage.per_type[entry.seg_type() as usize] += 1;
            }
        }
        usage
    }
}

/// In-memory state of one main-area segment.
#[derive(Clone)]
pub struct SegInfo {
    /// Blocks valid now.
    pub valid_map: [u8; SIT_VBLOCK_MAP_SIZE],
    /// Blocks valid in the last committed checkpoint: never overwritten until the next one.
    pub ckpt_valid_map: [u8; SIT_VBLOCK_MAP_SIZE],
    pub valid: u16,
    pub ckpt_valid: u16,
    pub seg_type: u8,
    pub mtime: u64,
}

impl SegInfo {
    fn from_entry(e: &SitEntry) -> SegInfo {
        SegInfo {
            valid_map: e.valid_map,
            ckpt_valid_map: e.valid_map,
            valid: e.valid_blocks() as u16,
            ckpt_valid: e.valid_blocks() as u16,
            seg_type: e.seg_type(),
            mtime: e.mtime.get(),
        }
    }

    pub fn to_entry(&self) -> SitEntry {
        let mut e = SitEntry::new_zeroed();
        e.set_vblocks(self.seg_type, self.valid as u32);
        e.valid_map = self.valid_map;
        e.mtime.set(self.mtime);
        e
    }

    /// No valid block now and none in the checkpoint: reusable.
    pub fn is_free(&self) -> bool {
        self.valid == 0 && self.ckpt_valid == 0
    }

    /// A slot SSR may write: free now and in the last checkpoint.
    fn slot_free(&self, blkoff: usize) -> bool {
        !bitmap::test_bit_msb(&self.valid_map, blkoff)
            && !bitmap::test_bit_msb(&self.ckpt_valid_map, blkoff)
    }

    /// Marks a block valid. Like the kernel, it also counts as valid in the
    /// last checkpoint from now on, so it is not handed out again before the
    /// next checkpoint even if invalidated: an fsync chain may point at it.
    fn mark_valid(&mut self, blkoff: usize, now: u64) {
        bitmap::set_bit_msb(&mut self.valid_map, blkoff, true);
        if !bitmap::test_bit_msb(&self.ckpt_valid_map, blkoff) {
            bitmap::set_bit_msb(&mut self.ckpt_valid_map, blkoff, true);
            self.ckpt_valid += 1;
        }
        // The weighted average of the SIT's mtime (from disk) and now, in
        // u128 so a hostile mtime cannot overflow; the result lies between
        // the two, so it fits in u64.
        self.mtime = if self.mtime == 0 {
            now
        } else {
            ((self.mtime as u128 * self.valid as u128 + now as u128) / (self.valid as u128 + 1))
                as u64
        };
        // At most BLOCKS_PER_SEG: the bit was clear (callers check) and
        // `valid` is the popcount of the map.
        self.valid += 1;
    }
}

/// One of the six logs.
#[derive(Clone)]
pub struct CurSeg {
    pub segno: u32,
    pub next_blkoff: u16,
    /// `checkpoint::LFS` (append to a free segment) or `checkpoint::SSR` (fill holes of a dirty one).
    pub alloc_type: u8,
    /// Owner of each block of the segment, written to the SSA when the log moves on.
    pub sums: Vec<Summary>,
}

/// Allocation counters, per log. Plain fields: they change only under the
/// segment manager's lock, which every allocation holds anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Blocks handed out by appending to a free segment.
    pub lfs_blocks: [u64; NR_CURSEG_TYPE],
    /// Blocks handed out by filling holes of a dirty segment.
    pub ssr_blocks: [u64; NR_CURSEG_TYPE],
    /// New (free) segments a log moved to.
    pub segments_opened: u64,
    /// Times a log switched to SSR on a dirty segment.
    pub ssr_switches: u64,
    /// Data blocks rewritten at their own address, by the log of their segment.
    pub in_place_writes: [u64; NR_CURSEG_TYPE],
    /// Data blocks written to a new address (holes, reservations, rewrites
    /// out of place; not cleaning's moves), by log.
    pub out_of_place_writes: [u64; NR_CURSEG_TYPE],
}

/// Block allocation over the six logs, SIT bookkeeping, SSA writes.
///
/// Invariants (checked by `debug_check`): a segment's `valid` equals the
/// popcount of its map; the six current segments are distinct; an LFS log
/// has no valid block at or after `next_blkoff`; no block valid in the last
/// checkpoint is handed out before the next checkpoint commits.
/// `allocate` checks the last one on every block, in every build (see
/// `invariant`); `allocate` and `invalidate` keep each valid count within
/// 0..=512.
///
/// Every field is private: other modules read the state through `&`
/// accessors (`segment`, `curseg`, `valid_blocks`, ...) and change it only
/// through the methods below, which keep the free counts and the set of
/// dirty SIT entries in step with every change.
pub struct SegmentManager {
    dev: std::sync::Arc<Device>,
    main_blkaddr: u32,
    ssa_blkaddr: u32,
    segs_per_sec: u32,
    segs: Vec<SegInfo>,
    cursegs: [CurSeg; NR_CURSEG_TYPE],
    /// Segments whose SIT entry changed since the last checkpoint.
    dirty_sit: std::collections::BTreeSet<u32>,
    /// SSA blocks to write: (segno, summary block).
    pending_ssa: Vec<(u32, Box<SummaryBlock>)>,
    /// Seconds of the file system's age clock at mount (checkpoint elapsed_time).
    elapsed_base: u64,
    mounted_at: std::time::Instant,
    /// Seconds since mount of a simulated clock, replacing `mounted_at`.
    simulated_age: Option<u64>,
    stats: AllocStats,
    /// Blocks in use (data, reserved and node blocks), as the checkpoint counts them.
    valid_blocks: u64,
    valid_nodes: u32,
    valid_inodes: u32,
    /// Blocks users may fill (main area minus overprovision).
    user_blocks: u64,
    /// Data logs fill holes of dirty segments (SSR) instead of opening free
    /// ones once free sections are down to this many (the kernel's
    /// need_SSR: reserved + `min_ssr_sections`; set by the facade).
    ssr_below_sections: u32,
    /// The section the cleaner is emptying: SSR must not refill it (the
    /// kernel's cur_victim_sec).
    gc_victim_section: Option<u32>,
    /// `valid_blocks` at the last checkpoint, and the blocks reserved since:
    /// roll-forward needs both to fit (the kernel's space_for_roll_forward).
    checkpoint_valid_blocks: u64,
    reserved_since_checkpoint: u64,
    /// Free segments and sections, kept in step with every change (see
    /// `FreeCounts`): the space checks run on every operation.
    free: FreeCounts,
    /// Files writing large requests one after another, and the segments
    /// they fill outside the logs (`stream.rs`).
    streams: Vec<stream::Stream>,
    /// Counts stream requests, to find the least recently used stream.
    stream_clock: u64,
    /// `stream_clock` at the last checkpoint: streams used no later are idle.
    stream_clock_at_checkpoint: u64,
}

/// Free space by segment and section, current logs excluded; "after the
/// checkpoint" also counts what the next checkpoint frees (no valid block
/// now, some in the last checkpoint). Kept up to date as segments change,
/// so the per-operation space checks cost O(1) instead of a scan of every
/// segment (tens of thousands on a phone-sized image); debug builds compare
/// it with a full count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FreeCounts {
    segments: u32,
    segments_after_checkpoint: u32,
    sections: u32,
    sections_after_checkpoint: u32,
}

impl FreeCounts {
    fn fields(&mut self) -> [&mut u32; 4] {
        [
            &mut self.segments,
            &mut self.segments_after_checkpoint,
            &mut self.sections,
            &mut self.sections_after_checkpoint,
        ]
    }

    fn add(&mut self, mut other: FreeCounts) {
        for (v, d) in self.fields().into_iter().zip(other.fields()) {
            *v += *d;
        }
    }

    /// Takes away what `add` counted before. Purely internal (a section's
    /// share is subtracted only after it was added, and debug builds compare
    /// the totals with a full count), so a shortfall is a bug: asserted in
    /// debug builds, never wrapped in release ones.
    fn sub(&mut self, mut other: FreeCounts) {
        for (v, d) in self.fields().into_iter().zip(other.fields()) {
            debug_assert!(*v >= *d, "free counts below zero");
            *v = v.saturating_sub(*d);
        }
    }
}

impl SegmentManager {
    /// Builds the allocator from the loaded SIT and checkpoint. Node-log
    /// summaries missing from the pack are rebuilt from the node footers.
    pub fn new(
        dev: &std::sync::Arc<Device>,
        sb: &SuperBlock,
        cp: &CheckpointState,
        sit: &SitTable,
    ) -> Result<SegmentManager> {
        let segs: Vec<SegInfo> = sit.entries.iter().map(SegInfo::from_entry).collect();
        let main_blkaddr = sb.main_blkaddr.get();
        let mut cursegs: Vec<CurSeg> = Vec::with_capacity(NR_CURSEG_TYPE);
        for log in CursegType::ALL {
            let (segno, blkoff) = cp.cp.curseg(log);
            let alloc_type = cp.cp.alloc_type_of(log);
            let mut sums = match &cp.cur_summaries[log as usize] {
                Some(entries) => entries.clone(),
                None => Vec::new(),
            };
            if sums.is_empty() && log.is_node() {
                // Rebuild from the footers of the blocks written so far.
                let start = main_blkaddr as u64 + segno as u64 * BLOCKS_PER_SEG as u64;
                let mut buf = vec![0u8; blkoff as usize * F2FS_BLKSIZE];
                dev.read_blocks(IoKind::Node, start, &mut buf)?;
                for block in buf.chunks_exact(F2FS_BLKSIZE) {
                    let nid = f2fuse_layout::node::footer_of(block).nid.get();
                    sums.push(Summary::new(nid, 0, 0));
                }
            }
            sums.resize(ENTRIES_IN_SUM, Summary::default());
            let seg = &segs[segno as usize];
            if seg.seg_type != log as u8 && (seg.valid > 0 || blkoff > 0) {
                return Err(Corrupt::new(
                    "checkpoint",
                    format!(
                        "{} log segment {segno} has SIT type {}",
                        log.name(),
                        seg.seg_type
                    ),
                )
                .into());
            }
            cursegs.push(CurSeg {
                segno,
                next_blkoff: blkoff,
                alloc_type,
                sums,
            });
        }
        let cursegs: [CurSeg; NR_CURSEG_TYPE] =
            cursegs.try_into().unwrap_or_else(|_| unreachable!());
        let mut sm = SegmentManager {
            dev: dev.clone(),
            main_blkaddr,
            ssa_blkaddr: sb.ssa_blkaddr.get(),
            segs_per_sec: sb.segs_per_sec.get(),
            segs,
            cursegs,
            dirty_sit: Default::default(),
            pending_ssa: Vec::new(),
            elapsed_base: cp.cp.elapsed_time.get(),
            mounted_at: std::time::Instant::now(),
            simulated_age: None,
            stats: AllocStats::default(),
            valid_blocks: cp.cp.valid_block_count.get(),
            valid_nodes: cp.cp.valid_node_count.get(),
            valid_inodes: cp.cp.valid_inode_count.get(),
            user_blocks: cp.cp.user_block_count.get(),
            ssr_below_sections: 0,
            gc_victim_section: None,
            checkpoint_valid_blocks: cp.cp.valid_block_count.get(),
            reserved_since_checkpoint: 0,
            free: FreeCounts::default(),
            streams: Vec::new(),
            stream_clock: 0,
            stream_clock_at_checkpoint: 0,
        };
        // The SIT type of a current segment must be its log type (fsck checks it).
        for log in CursegType::ALL {
            let segno = sm.cursegs[log as usize].segno;
            if sm.segs[segno as usize].seg_type != log as u8 {
                sm.segs[segno as usize].seg_type = log as u8;
                sm.dirty_sit.insert(segno);
            }
            if sm.cursegs[log as usize].alloc_type == checkpoint_lfs() {
                sm.check_lfs_tail(log)?;
            }
        }
        sm.free = sm.count_free();
        Ok(sm)
    }

    fn check_lfs_tail(&self, log: CursegType) -> Result<()> {
        let cs = &self.cursegs[log as usize];
        let seg = &self.segs[cs.segno as usize];
        for b in cs.next_blkoff as usize..BLOCKS_PER_SEG as usize {
            if bitmap::test_bit_msb(&seg.valid_map, b) {
                return Err(Corrupt::new(
                    "checkpoint",
                    format!(
                        "{} log: block {b} of segment {} is valid past next_blkoff {}",
                        log.name(),
                        cs.segno,
                        cs.next_blkoff
                    ),
                )
                .into());
            }
        }
        Ok(())
    }

    pub fn main_segments(&self) -> u32 {
        self.segs.len() as u32
    }

    /// Every main-area segment, by number (read-only: changes go through
    /// the allocation and invalidation methods).
    pub fn segments(&self) -> &[SegInfo] {
        &self.segs
    }

    /// Main-area segment `segno`.
    pub fn segment(&self, segno: u32) -> &SegInfo {
        &self.segs[segno as usize]
    }

    /// Where `log` writes: its segment, next block, allocation mode and summaries.
    pub fn curseg(&self, log: CursegType) -> &CurSeg {
        &self.cursegs[log as usize]
    }

    /// Blocks in use (data, reserved and node blocks), as the checkpoint counts them.
    pub fn valid_blocks(&self) -> u64 {
        self.valid_blocks
    }

    /// Node blocks in use.
    pub fn valid_nodes(&self) -> u32 {
        self.valid_nodes
    }

    /// Inodes in use.
    pub fn valid_inodes(&self) -> u32 {
        self.valid_inodes
    }

    /// Blocks users may fill (main area minus overprovision).
    pub fn user_blocks(&self) -> u64 {
        self.user_blocks
    }

    /// Allocation counters since this manager was built.
    pub fn alloc_stats(&self) -> &AllocStats {
        &self.stats
    }

    /// Data logs switch to SSR once free sections are down to `sections`
    /// (reserved + `min_ssr_sections`: the kernel's need_SSR).
    pub fn set_ssr_threshold(&mut self, sections: u32) {
        self.ssr_below_sections = sections;
    }

    /// Whether the data logs fill holes of dirty segments now (the
    /// kernel's f2fs_need_SSR).
    pub fn need_ssr(&self) -> bool {
        self.free_sections() <= self.ssr_below_sections
    }

    /// Blocks in use in percent of the user blocks (the kernel's utilization()).
    pub fn utilization(&self) -> u64 {
        self.valid_blocks * 100 / self.user_blocks.max(1)
    }

    /// Checks that data block `blkaddr`, mapped by a file, may be rewritten
    /// in place (valid, in a data segment, as f2fs_inplace_write_data
    /// checks) and counts the write.
    pub fn note_in_place_write(&mut self, blkaddr: u32) -> Result<()> {
        let segno = self.segno_of(blkaddr);
        let log = CursegType::from_u8(self.segs[segno as usize].seg_type);
        match log {
            Some(log) if !log.is_node() && self.is_valid(blkaddr) => {
                self.stats.in_place_writes[log as usize] += 1;
                Ok(())
            }
            _ => Err(crate::error::corrupt(
                "data block",
                format!("block {blkaddr} is mapped but not a valid data block"),
            )),
        }
    }

    /// Counts data blocks written to new addresses in `log`.
    pub fn note_out_of_place_writes(&mut self, log: CursegType, blocks: u64) {
        self.stats.out_of_place_writes[log as usize] += blocks;
    }

    /// Moves `log` to the start of a free section unless it is at the start
    /// of an empty one already (the kernel's f2fs_allocate_new_section,
    /// not forced): a pinned file's preallocation takes whole sections.
    pub fn open_new_section(&mut self, log: CursegType) -> Result<()> {
        let per = self.segs_per_sec;
        let cs = &self.cursegs[log as usize];
        if cs.alloc_type == checkpoint_lfs() && cs.next_blkoff == 0 && cs.segno.is_multiple_of(per)
        {
            return Ok(());
        }
        let sections = self.segs.len() as u32 / per;
        let start = cs.segno / per + 1;
        let new = (0..sections)
            .map(|i| (start + i) % sections)
            .find(|&sec| self.section_is_free(sec * per))
            .map(|sec| sec * per)
            .ok_or_else(|| Error::new(ErrorKind::NoSpace, "no free section left"))?;
        self.switch_log_to(log, new);
        Ok(())
    }

    /// The section the cleaner is emptying (SSR must not refill it), or
    /// `None` once it is done.
    pub fn set_gc_victim(&mut self, section: Option<u32>) {
        self.gc_victim_section = section;
    }

    pub fn segno_of(&self, blkaddr: u32) -> u32 {
        (blkaddr - self.main_blkaddr) / BLOCKS_PER_SEG
    }

    pub fn blkaddr_of(&self, segno: u32, blkoff: u32) -> u32 {
        self.main_blkaddr + segno * BLOCKS_PER_SEG + blkoff
    }

    /// The age clock used for SIT mtimes: seconds the file system has been mounted in total.
    pub fn elapsed_now(&self) -> u64 {
        // elapsed_base comes from the checkpoint: saturate, never overflow.
        self.elapsed_base.saturating_add(
            self.simulated_age
                .unwrap_or_else(|| self.mounted_at.elapsed().as_secs()),
        )
    }

    /// Uses a simulated time since mount for segment ages from now on.
    pub fn set_simulated_age(&mut self, secs: u64) {
        self.simulated_age = Some(secs);
    }

    /// Segments with no valid block that only a checkpoint makes free
    /// (valid in the last one), current ones excluded.
    pub fn prefree_segments(&self) -> u32 {
        let (empty, free) = (self.free_segments_after_checkpoint(), self.free_segments());
        // A free segment is empty too: internal, so only asserted.
        debug_assert!(empty >= free);
        empty.saturating_sub(free)
    }

    /// Whether a log or a stream writes into `segno`: not free even when
    /// empty, and no victim for SSR or the cleaner.
    pub fn is_current(&self, segno: u32) -> bool {
        self.cursegs.iter().any(|c| c.segno == segno) || self.is_stream_segment(segno)
    }

    /// Every main-area segment by state, as of now.
    pub fn segment_counts(&self) -> SegmentCounts {
        SegmentCounts::classify(self.segs.iter().enumerate().map(|(segno, s)| {
            (
                s.valid as u32,
                s.ckpt_valid as u32,
                self.is_current(segno as u32),
            )
        }))
    }

    /// Free segments (excluding the current ones).
    pub fn free_segments(&self) -> u32 {
        self.checked_free().segments
    }

    /// Segments with no valid block (free now or after the next checkpoint), excluding current ones.
    pub fn free_segments_after_checkpoint(&self) -> u32 {
        self.checked_free().segments_after_checkpoint
    }

    /// Sections whose every segment is free and none is current.
    pub fn free_sections(&self) -> u32 {
        self.checked_free().sections
    }

    /// Sections with no valid block now (free after the next checkpoint), current ones excluded.
    pub fn free_sections_after_checkpoint(&self) -> u32 {
        self.checked_free().sections_after_checkpoint
    }

    fn checked_free(&self) -> FreeCounts {
        debug_assert_eq!(self.free, self.count_free(), "free counts out of step");
        self.free
    }

    /// What one section contributes to `FreeCounts`.
    fn section_free(&self, sec: u32) -> FreeCounts {
        let per = self.segs_per_sec;
        let mut counts = FreeCounts::default();
        let (mut all_free, mut all_empty) = (true, true);
        for segno in sec * per..(sec + 1) * per {
            let seg = &self.segs[segno as usize];
            let current = self.is_current(segno);
            let free = seg.is_free() && !current;
            let empty = seg.valid == 0 && !current;
            counts.segments += free as u32;
            counts.segments_after_checkpoint += empty as u32;
            all_free &= free;
            all_empty &= empty;
        }
        counts.sections = all_free as u32;
        counts.sections_after_checkpoint = all_empty as u32;
        counts
    }

    fn count_free(&self) -> FreeCounts {
        let mut total = FreeCounts::default();
        for sec in 0..self.segs.len() as u32 / self.segs_per_sec {
            total.add(self.section_free(sec));
        }
        total
    }

    /// Runs `change`, which may alter the segments `segnos` (their blocks or
    /// whether a log is on them), and brings `free` up to date.
    /// Runs on every block allocation, so no heap: at most two segments.
    fn tracking<R>(&mut self, segnos: &[u32], change: impl FnOnce(&mut Self) -> R) -> R {
        debug_assert!(segnos.len() <= 2);
        let mut sections = [0u32; 2];
        let mut n = 0;
        for &segno in segnos {
            let sec = segno / self.segs_per_sec;
            if !sections[..n].contains(&sec) {
                sections[n] = sec;
                n += 1;
            }
        }
        let secs = &sections[..n];
        for &sec in secs {
            let before = self.section_free(sec);
            self.free.sub(before);
        }
        let result = change(self);
        for &sec in secs {
            let after = self.section_free(sec);
            self.free.add(after);
        }
        result
    }

    fn section_is_free(&self, segno: u32) -> bool {
        let per = self.segs_per_sec;
        let first = segno / per * per;
        (first..first + per).all(|s| self.segs[s as usize].is_free() && !self.is_current(s))
    }

    /// Picks the next segment for a log: the next one in its section if free,
    /// else the first free section after the current position (wrapping),
    /// outside the streams' windows while there is one.
    fn pick_new_segment(&self, log: CursegType) -> Option<u32> {
        let cur = self.cursegs[log as usize].segno;
        let per = self.segs_per_sec;
        let next = cur + 1;
        if !next.is_multiple_of(per)
            && (next as usize) < self.segs.len()
            && self.segs[next as usize].is_free()
            && !self.is_current(next)
        {
            return Some(next);
        }
        let sections = self.segs.len() as u32 / per;
        let start = cur / per + 1;
        let usable = |sec: u32, avoid_windows: bool| {
            self.section_is_free(sec * per)
                && !(avoid_windows
                    && (sec * per..(sec + 1) * per).any(|s| self.in_stream_window(s, None)))
        };
        [true, false].into_iter().find_map(|avoid_windows| {
            (0..sections)
                .map(|i| (start + i) % sections)
                .find(|&sec| usable(sec, avoid_windows))
                .map(|sec| sec * per)
        })
    }

    /// Moves `log` to a new segment; its old summary goes to the SSA.
    fn open_new_segment(&mut self, log: CursegType) -> Result<()> {
        let new = self
            .pick_new_segment(log)
            .ok_or_else(|| Error::new(ErrorKind::NoSpace, "no free segment left"))?;
        self.switch_log_to(log, new);
        Ok(())
    }

    /// Moves `log` to free segment `new`; its old summary goes to the SSA.
    fn switch_log_to(&mut self, log: CursegType, new: u32) {
        crate::invariant::check_invariant!(
            self.dev.health(),
            self.segs[new as usize].is_free() && !self.is_current(new),
            "{} log moving to segment {new}, which is not free",
            log.name()
        );
        self.retire_curseg(log);
        let old = self.cursegs[log as usize].segno;
        self.tracking(&[old, new], |sm| sm.cursegs[log as usize].segno = new);
        let cs = &mut self.cursegs[log as usize];
        cs.next_blkoff = 0;
        cs.alloc_type = checkpoint_lfs();
        cs.sums.iter_mut().for_each(|s| *s = Summary::default());
        let seg = &mut self.segs[new as usize];
        seg.seg_type = log as u8;
        seg.mtime = 0;
        self.dirty_sit.insert(new);
        self.stats.segments_opened += 1;
    }

    /// Queues the summary block of a log's segment for the SSA area.
    fn retire_curseg(&mut self, log: CursegType) {
        let cs = &self.cursegs[log as usize];
        let mut block = SummaryBlock::new_zeroed();
        block.entries.copy_from_slice(&cs.sums);
        block.footer.entry_type = if log.is_node() {
            SUM_TYPE_NODE
        } else {
            SUM_TYPE_DATA
        };
        self.queue_ssa(cs.segno, Box::new(block));
    }

    /// Queues `segno`'s summary block for the SSA area, replacing one queued before.
    fn queue_ssa(&mut self, segno: u32, block: Box<SummaryBlock>) {
        self.pending_ssa.retain(|(s, _)| *s != segno);
        self.pending_ssa.push((segno, block));
    }

    /// SSA block address of a segment.
    pub fn ssa_addr(&self, segno: u32) -> u64 {
        self.ssa_blkaddr as u64 + segno as u64
    }

    /// Hands out the next block of `log`, recording its owner. Opens a new
    /// segment when the current one is full (LFS), or continues in holes
    /// (SSR).
    pub fn allocate(&mut self, log: CursegType, owner: Summary) -> Result<u32> {
        loop {
            let off = self.next_usable_offset(log);
            if off >= BLOCKS_PER_SEG as usize {
                self.move_to_next_segment(log)?;
                continue;
            }
            let cs = &self.cursegs[log as usize];
            let segno = cs.segno;
            let ssr = cs.alloc_type == checkpoint_ssr();
            let now = self.elapsed_now();
            let cs = &mut self.cursegs[log as usize];
            cs.sums[off] = owner;
            cs.next_blkoff = off as u16 + 1;
            let seg = &self.segs[segno as usize];
            // A block handed out is free in the SIT (SSR: in the last
            // checkpoint too), in a segment of this log, counted in no free
            // count (`is_current` keeps the log's segment out of them).
            crate::invariant::ensure_invariant!(
                self.dev.health(),
                (seg.slot_free(off) || !ssr && !bitmap::test_bit_msb(&seg.valid_map, off))
                    && seg.seg_type == log as u8
                    && (seg.valid as u32) < BLOCKS_PER_SEG,
                "{} log handing out block {off} of segment {segno} (type {}, {} valid): not free",
                log.name(),
                seg.seg_type,
                seg.valid
            );
            self.tracking(&[segno], |sm| sm.segs[segno as usize].mark_valid(off, now));
            self.dirty_sit.insert(segno);
            if ssr {
                self.stats.ssr_blocks[log as usize] += 1;
            } else {
                self.stats.lfs_blocks[log as usize] += 1;
            }
            self.prepare_next_block(log);
            return Ok(self.blkaddr_of(segno, off as u32));
        }
    }

    /// Moves a log on to the slot it will write next, opening a new segment
    /// when the current one has none left, as the kernel does right after
    /// each allocation: a node footer's `next_blkaddr` must name the block
    /// the log really writes next, or an fsync chain breaks there. With no
    /// free segment the log stays full; its next allocation reports ENOSPC.
    fn prepare_next_block(&mut self, log: CursegType) {
        let off = self.next_usable_offset(log);
        self.cursegs[log as usize].next_blkoff = off as u16;
        if off >= BLOCKS_PER_SEG as usize {
            // ENOSPC here is reported by the next allocation instead.
            let _ = self.move_to_next_segment(log);
        }
    }

    /// The slot `log` can write next in its segment (BLOCKS_PER_SEG if
    /// none): the next one for LFS, the next free one for SSR.
    fn next_usable_offset(&self, log: CursegType) -> usize {
        let cs = &self.cursegs[log as usize];
        let mut off = cs.next_blkoff as usize;
        if cs.alloc_type == checkpoint_ssr() {
            let seg = &self.segs[cs.segno as usize];
            while off < BLOCKS_PER_SEG as usize && !seg.slot_free(off) {
                off += 1;
            }
        }
        off
    }

    /// Moves a full log on: data logs fill the holes of a dirty segment (SSR)
    /// once free sections run low (the kernel's need_SSR), else a free
    /// segment is opened (LFS). Node logs stay LFS: fsync chains follow them
    /// block by block.
    fn move_to_next_segment(&mut self, log: CursegType) -> Result<()> {
        let ssr = !log.is_node() && self.need_ssr() && self.switch_to_ssr(log)?;
        if !ssr {
            self.open_new_segment(log)?;
        }
        Ok(())
    }

    /// The block a log writes next (what node footers record as `next_blkaddr`).
    pub fn next_blkaddr(&self, log: CursegType) -> u32 {
        let cs = &self.cursegs[log as usize];
        self.blkaddr_of(cs.segno, cs.next_blkoff as u32)
    }

    /// Roll-forward recovery: makes `blkaddr`, a data block an fsynced node
    /// points at (written after the checkpoint, so free in it), valid and
    /// owned by `owner`. Its segment keeps its type if it is a current data
    /// log's, else becomes warm data as in the kernel's replace_block.
    pub fn claim_data_block(&mut self, blkaddr: u32, owner: Summary) -> Result<()> {
        let segno = self.segno_of(blkaddr);
        let off = ((blkaddr - self.main_blkaddr) % BLOCKS_PER_SEG) as usize;
        let seg = &self.segs[segno as usize];
        let corrupt = |detail: String| -> crate::error::Error {
            Corrupt::new("fsync chain", detail)
                .at(format!("data blkaddr {blkaddr}"))
                .into()
        };
        // Checkpoint-valid is fine: a block a file moved (replayed earlier
        // from its old slot) is in the checkpoint but free now.
        if bitmap::test_bit_msb(&seg.valid_map, off) {
            return Err(corrupt("points at a block already in use".into()));
        }
        let seg_is_node = CursegType::from_u8(seg.seg_type).is_some_and(|t| t.is_node());
        if let Some(log) = CursegType::ALL
            .into_iter()
            .find(|&log| self.cursegs[log as usize].segno == segno)
        {
            if log.is_node() {
                return Err(corrupt(format!("in the current {} segment", log.name())));
            }
            self.cursegs[log as usize].sums[off] = owner;
        } else {
            if seg.valid > 0 && seg_is_node {
                return Err(corrupt(format!("in node segment {segno}")));
            }
            let mut block = SummaryBlock::new_zeroed();
            block.entries.copy_from_slice(&self.read_summaries(segno)?);
            block.entries[off] = owner;
            block.footer.entry_type = SUM_TYPE_DATA;
            self.queue_ssa(segno, Box::new(block));
            self.segs[segno as usize].seg_type = CursegType::WarmData as u8;
        }
        let now = self.elapsed_now();
        self.tracking(&[segno], |sm| sm.segs[segno as usize].mark_valid(off, now));
        self.dirty_sit.insert(segno);
        Ok(())
    }

    /// After roll-forward recovery: data logs move to new segments, since
    /// the blocks recovery claimed may lie past where they would write next
    /// (the kernel's f2fs_allocate_new_segments at the end of recover_data).
    pub fn reopen_data_logs(&mut self) -> Result<()> {
        for log in [
            CursegType::HotData,
            CursegType::WarmData,
            CursegType::ColdData,
        ] {
            let cs = &self.cursegs[log as usize];
            if cs.next_blkoff > 0 || self.segs[cs.segno as usize].valid > 0 {
                self.open_new_segment(log)?;
            }
        }
        Ok(())
    }

    /// Marks a block invalid (its content was rewritten elsewhere or freed).
    /// The address comes from a node or the NAT: one outside the main area,
    /// or a block not in use (two owners on a hostile image), is corruption.
    pub fn invalidate(&mut self, blkaddr: u32) -> Result<()> {
        let in_main = (blkaddr as u64)
            .checked_sub(self.main_blkaddr as u64)
            .is_some_and(|rel| rel < self.segs.len() as u64 * BLOCKS_PER_SEG as u64);
        if !in_main {
            return Err(Corrupt::new("block address", "outside the main area")
                .at(format!("freeing blkaddr {blkaddr:#x}"))
                .into());
        }
        let segno = self.segno_of(blkaddr);
        let off = ((blkaddr - self.main_blkaddr) % BLOCKS_PER_SEG) as usize;
        if !bitmap::test_bit_msb(&self.segs[segno as usize].valid_map, off) {
            return Err(Corrupt::new(
                "block address",
                format!("freeing a block not in use in segment {segno}"),
            )
            .at(format!("blkaddr {blkaddr:#x}"))
            .into());
        }
        // The bit was set and `valid` is the popcount of the map (checked
        // at load by SitEntry::validate, kept by every change).
        crate::invariant::ensure_invariant!(
            self.dev.health(),
            self.segs[segno as usize].valid > 0,
            "segment {segno}: block {off} valid in the map, but no valid block counted"
        );
        self.tracking(&[segno], |sm| {
            let seg = &mut sm.segs[segno as usize];
            bitmap::set_bit_msb(&mut seg.valid_map, off, false);
            seg.valid = seg.valid.saturating_sub(1);
        });
        self.dirty_sit.insert(segno);
        if self.segs[segno as usize].valid == 0 {
            self.release_emptied(segno);
        }
        Ok(())
    }

    /// The owner the SSA (or a log's summary) records for a block.
    pub fn owner_of(&self, blkaddr: u32) -> Result<Summary> {
        let off = ((blkaddr - self.main_blkaddr) % BLOCKS_PER_SEG) as usize;
        Ok(self.read_summaries(self.segno_of(blkaddr))?[off])
    }

    /// The owner a log records for `blkaddr` if a log writes its segment
    /// (no copy and no I/O: for checks on every write).
    pub fn log_summary(&self, blkaddr: u32) -> Option<Summary> {
        let segno = self.segno_of(blkaddr);
        let off = ((blkaddr - self.main_blkaddr) % BLOCKS_PER_SEG) as usize;
        self.cursegs
            .iter()
            .find(|c| c.segno == segno)
            .map(|c| c.sums[off])
    }

    pub fn is_valid(&self, blkaddr: u32) -> bool {
        let segno = self.segno_of(blkaddr);
        let off = ((blkaddr - self.main_blkaddr) % BLOCKS_PER_SEG) as usize;
        bitmap::test_bit_msb(&self.segs[segno as usize].valid_map, off)
    }

    /// Switches a log to SSR on a dirty segment of its type (else of its
    /// data/node category) with the fewest blocks in use now or at the last
    /// checkpoint, if one has a slot free in both. Returns whether it did.
    pub fn switch_to_ssr(&mut self, log: CursegType) -> Result<bool> {
        let usable = |segno: usize, s: &SegInfo| {
            !self.is_current(segno as u32)
                && self.gc_victim_section != Some(segno as u32 / self.segs_per_sec)
                && !s.is_free()
                && (0..BLOCKS_PER_SEG as usize).any(|b| s.slot_free(b))
        };
        let pick = |same_type: bool| {
            self.segs
                .iter()
                .enumerate()
                .filter(|(segno, s)| {
                    let category_ok = CursegType::from_u8(s.seg_type)
                        .is_some_and(|t| t.is_node() == log.is_node());
                    (if same_type {
                        s.seg_type == log as u8
                    } else {
                        category_ok
                    }) && usable(*segno, s)
                })
                .min_by_key(|(_, s)| {
                    (0..BLOCKS_PER_SEG as usize)
                        .filter(|&b| !s.slot_free(b))
                        .count()
                })
                .map(|(segno, _)| segno as u32)
        };
        let Some(segno) = pick(true).or_else(|| pick(false)) else {
            return Ok(false);
        };
        let sums = self.read_summaries(segno)?;
        let first_free = (0..BLOCKS_PER_SEG as usize)
            .find(|&b| self.segs[segno as usize].slot_free(b))
            .unwrap_or(0);
        self.retire_curseg(log);
        let old = self.cursegs[log as usize].segno;
        self.tracking(&[old, segno], |sm| sm.cursegs[log as usize].segno = segno);
        let cs = &mut self.cursegs[log as usize];
        cs.next_blkoff = first_free as u16;
        cs.alloc_type = checkpoint_ssr();
        cs.sums = sums;
        self.segs[segno as usize].seg_type = log as u8;
        self.dirty_sit.insert(segno);
        self.stats.ssr_switches += 1;
        Ok(true)
    }

    /// The owners of every block of `segno`: from the log if it is current,
    /// a queued SSA write, or the SSA area.
    pub fn read_summaries(&self, segno: u32) -> Result<Vec<Summary>> {
        if let Some(cs) = self.cursegs.iter().find(|c| c.segno == segno) {
            return Ok(cs.sums.clone());
        }
        if let Some(sums) = self.stream_summaries(segno) {
            return Ok(sums);
        }
        if let Some((_, block)) = self.pending_ssa.iter().find(|(s, _)| *s == segno) {
            return Ok(block.entries.to_vec());
        }
        let raw = self.dev.read_block(IoKind::Meta, self.ssa_addr(segno))?;
        let block = SummaryBlock::read_from_bytes(&raw).expect("block size");
        Ok(block.entries.to_vec())
    }

    /// Accounts `blocks` more blocks in use, or fails with ENOSPC.
    pub fn reserve_blocks(&mut self, blocks: u64) -> Result<()> {
        // valid_blocks starts as the checkpoint's count: an overflow is
        // more than the user blocks too.
        match self.valid_blocks.checked_add(blocks) {
            Some(valid) if valid <= self.user_blocks => {
                self.valid_blocks = valid;
                self.reserved_since_checkpoint += blocks;
                Ok(())
            }
            _ => Err(Error::new(ErrorKind::NoSpace, "no space left")),
        }
    }

    /// Whether what was valid at the last checkpoint plus everything reserved
    /// since fits: otherwise recovery could run out of space replaying an
    /// fsync chain, and fsync must checkpoint instead.
    pub fn space_for_roll_forward(&self) -> bool {
        self.checkpoint_valid_blocks
            .checked_add(self.reserved_since_checkpoint)
            .is_some_and(|needed| needed <= self.user_blocks)
    }

    /// Accounts `blocks` fewer blocks in use; more than are counted is
    /// corruption (an on-disk count that was wrong).
    pub fn release_blocks(&mut self, blocks: u64) -> Result<()> {
        self.valid_blocks = self.valid_blocks.checked_sub(blocks).ok_or_else(|| {
            Corrupt::new(
                "checkpoint",
                format!(
                    "freeing {blocks} blocks with {} counted in use",
                    self.valid_blocks
                ),
            )
        })?;
        Ok(())
    }

    /// Counts a new node block (its space reserved already), an inode too
    /// if `inode`. The counts start as the checkpoint's: one past `u32::MAX`
    /// is corruption.
    pub fn node_created(&mut self, inode: bool) -> Result<()> {
        let overflow = |what: &str| {
            Corrupt::new(
                "checkpoint",
                format!("{what} count overflows creating a node"),
            )
        };
        let nodes = self
            .valid_nodes
            .checked_add(1)
            .ok_or_else(|| overflow("valid node"))?;
        let inodes = if inode {
            self.valid_inodes
                .checked_add(1)
                .ok_or_else(|| overflow("valid inode"))?
        } else {
            self.valid_inodes
        };
        self.valid_nodes = nodes;
        self.valid_inodes = inodes;
        Ok(())
    }

    /// Uncounts a freed node block (and inode); one more than counted is corruption.
    pub fn node_freed(&mut self, inode: bool) -> Result<()> {
        let underflow =
            |what: &str| Corrupt::new("checkpoint", format!("freeing a {what} with none counted"));
        self.valid_nodes = self
            .valid_nodes
            .checked_sub(1)
            .ok_or_else(|| underflow("node"))?;
        if inode {
            self.valid_inodes = self
                .valid_inodes
                .checked_sub(1)
                .ok_or_else(|| underflow("inode"))?;
        }
        self.release_blocks(1)
    }

    /// Blocks still available to users.
    pub fn free_user_blocks(&self) -> u64 {
        self.user_blocks.saturating_sub(self.valid_blocks)
    }

    /// SIT entries changed since the last checkpoint.
    pub fn dirty_entries(&self) -> Vec<(u32, SitEntry)> {
        self.dirty_sit
            .iter()
            .map(|&s| (s, self.segs[s as usize].to_entry()))
            .collect()
    }

    /// After a checkpoint commits: what it recorded is now the checkpointed state.
    pub fn commit_checkpoint(&mut self) {
        self.checkpoint_valid_blocks = self.valid_blocks;
        self.reserved_since_checkpoint = 0;
        for segno in std::mem::take(&mut self.dirty_sit) {
            let seg = &mut self.segs[segno as usize];
            seg.ckpt_valid_map = seg.valid_map;
            seg.ckpt_valid = seg.valid;
        }
        self.free = self.count_free();
    }

    /// Checks the invariants in debug builds.
    pub fn debug_check(&self) {
        if cfg!(debug_assertions) {
            for (segno, s) in self.segs.iter().enumerate() {
                assert_eq!(
                    bitmap::count_ones(&s.valid_map),
                    s.valid as u32,
                    "segment {segno} valid count"
                );
            }
            for (i, a) in self.cursegs.iter().enumerate() {
                for b in &self.cursegs[i + 1..] {
                    assert_ne!(a.segno, b.segno, "two logs share a segment");
                }
            }
            self.debug_check_streams();
        }
    }
}

fn checkpoint_lfs() -> u8 {
    f2fuse_layout::checkpoint::LFS
}

fn checkpoint_ssr() -> u8 {
    f2fuse_layout::checkpoint::SSR
}

/// The SIT part of a checkpoint being written.
pub struct SitFlush {
    pub journal: SitJournal,
    pub bits: Vec<u8>,
}

impl SegmentManager {
    /// Writes queued SSA blocks, and those of the streams' segments.
    pub fn write_pending_ssa(&mut self, dev: &Device) -> Result<()> {
        self.checkpoint_streams();
        for (segno, block) in std::mem::take(&mut self.pending_ssa) {
            dev.write_blocks(IoKind::Meta, self.ssa_addr(segno), block.as_bytes())?;
        }
        Ok(())
    }

    /// Dirty SIT entries into the journal if they fit with what it holds,
    /// else every journal and dirty entry into SIT blocks written to their
    /// other copy (the bitmap bits flip).
    pub fn flush_sit(
        &self,
        dev: &Device,
        sb: &SuperBlock,
        cp: &CheckpointState,
    ) -> Result<SitFlush> {
        let mut entries: BTreeMap<u32, SitEntry> = BTreeMap::new();
        for je in cp.sit_journal.valid_entries()? {
            let segno = je.segno.get();
            entries.insert(segno, self.segs[segno as usize].to_entry());
        }
        for (segno, entry) in self.dirty_entries() {
            entries.insert(segno, entry);
        }
        let mut bits = cp.sit_bitmap.clone();
        let mut journal = SitJournal::empty();
        if entries.len() <= SIT_JOURNAL_ENTRIES {
            journal.n_sits.set(entries.len() as u16);
            for (slot, (segno, entry)) in entries.into_iter().enumerate() {
                journal.entries[slot].segno.set(segno);
                journal.entries[slot].se = entry;
            }
            return Ok(SitFlush { journal, bits });
        }
        let blocks: std::collections::BTreeSet<u32> =
            entries.keys().map(|s| s / SIT_ENTRY_PER_BLOCK).collect();
        let per_copy = sb.sit_blocks_per_copy();
        for index in blocks {
            let mut block = SitBlock::new_zeroed();
            let first = index * SIT_ENTRY_PER_BLOCK;
            for slot in 0..SIT_ENTRY_PER_BLOCK {
                if let Some(seg) = self.segs.get((first + slot) as usize) {
                    block.entries[slot as usize] = seg.to_entry();
                }
            }
            let new_copy = !bitmap::test_bit_msb(&bits, index as usize);
            dev.write_blocks(
                IoKind::Meta,
                sit_addr(sb.sit_blkaddr.get(), per_copy, index, new_copy as u8),
                block.as_bytes(),
            )?;
            bitmap::set_bit_msb(&mut bits, index as usize, new_copy);
        }
        Ok(SitFlush { journal, bits })
    }
}

impl SegmentManager {
    pub fn segs_per_sec(&self) -> u32 {
        self.segs_per_sec
    }
}

impl SegmentManager {
    /// A checkpoint may not record a full log (next block 512): like the
    /// kernel, move such logs to a new segment first. An SSR log's next
    /// block must be a free slot (fsck checks it).
    pub fn advance_full_logs(&mut self) -> Result<()> {
        for log in CursegType::ALL {
            let cs = &self.cursegs[log as usize];
            let next = if cs.alloc_type == checkpoint_ssr() {
                let seg = &self.segs[cs.segno as usize];
                (cs.next_blkoff as usize..BLOCKS_PER_SEG as usize).find(|&b| seg.slot_free(b))
            } else {
                ((cs.next_blkoff as u32) < BLOCKS_PER_SEG).then_some(cs.next_blkoff as usize)
            };
            match next {
                Some(off) => self.cursegs[log as usize].next_blkoff = off as u16,
                None => self.open_new_segment(log)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use std::sync::Arc;

    fn fresh() -> SegmentManager {
        let dev = Arc::new(Device::new(Box::new(MemDevice::new(64 << 20))));
        crate::mkfs::format(&dev, &crate::mkfs::MkfsOptions::default(), true).unwrap();
        let sb = crate::superblock::load_superblock(&dev).unwrap().sb;
        let cp = crate::checkpoint::load_checkpoint(&dev, &sb).unwrap();
        let sit = SitTable::load(&dev, &sb, &cp).unwrap();
        SegmentManager::new(&dev, &sb, &cp, &sit).unwrap()
    }

    fn is_corrupt(r: Result<()>) -> bool {
        matches!(r, Err(crate::error::Error::Corrupt(_)))
    }

    #[test]
    fn invalidate_refuses_free_and_outside_blocks() {
        let mut sm = fresh();
        let log = CursegType::HotData;
        let addr = sm.allocate(log, Summary::default()).unwrap();
        let segno = sm.segno_of(addr);
        let before = (sm.segment(segno).valid, sm.free_segments());
        sm.invalidate(addr).unwrap();
        assert_eq!(sm.segment(segno).valid, before.0 - 1);
        assert_eq!(sm.free_segments(), before.1);
        // Freed twice (two owners of one block on a hostile image).
        assert!(is_corrupt(sm.invalidate(addr)));
        assert_eq!(sm.segment(segno).valid, before.0 - 1);
        // Outside the main area, below and past it.
        assert!(is_corrupt(sm.invalidate(0)));
        let past = sm.blkaddr_of(sm.main_segments(), 0);
        assert!(is_corrupt(sm.invalidate(past)));
        assert!(is_corrupt(sm.invalidate(u32::MAX)));
        sm.debug_check();
    }

    #[test]
    fn a_stream_places_blocks_by_file_offset_and_lets_go_of_empty_segments() {
        let mut sm = fresh();
        let log = CursegType::WarmData;
        let req = StreamRequest {
            ino: 9,
            first: 0,
            blocks: 8,
            ahead: 100,
            may_open: true,
            fills_holes: true,
            file_blocks: 108,
        };
        assert!(sm.begin_stream_request(req, log));
        // Out of order: block 5 first, then block 0 right before it.
        let five = sm.allocate_streamed(9, 5, log, Summary::default()).unwrap();
        let zero = sm.allocate_streamed(9, 0, log, Summary::default()).unwrap();
        assert_eq!(five, zero + 5);
        let segno = sm.segno_of(zero);
        assert!(sm.is_current(segno), "a held segment is no one else's");
        assert_ne!(segno, sm.curseg(log).segno);
        // Another file's request goes to the log, not into the stream.
        let other = sm.allocate(log, Summary::default()).unwrap();
        assert_ne!(sm.segno_of(other), segno);
        sm.debug_check();
        // Emptied (the file deleted), the segment is let go of at once: it
        // counts as prefree like any other.
        sm.invalidate(five).unwrap();
        assert!(sm.is_current(segno));
        sm.invalidate(zero).unwrap();
        assert!(!sm.is_current(segno));
        assert_eq!(sm.prefree_segments(), 1);
        sm.debug_check();
    }

    #[test]
    fn hostile_counts_do_not_overflow() {
        let mut sm = fresh();
        sm.valid_inodes = u32::MAX;
        let nodes = sm.valid_nodes();
        assert!(is_corrupt(sm.node_created(true)));
        assert_eq!((sm.valid_nodes(), sm.valid_inodes()), (nodes, u32::MAX));
        sm.node_created(false).unwrap();
        assert_eq!(sm.valid_nodes(), nodes + 1);
        sm.valid_blocks = u64::MAX - 1;
        assert_eq!(sm.valid_blocks(), u64::MAX - 1);
        assert!(sm.reserve_blocks(4).is_err());
        assert_eq!(sm.valid_blocks(), u64::MAX - 1);
        sm.checkpoint_valid_blocks = u64::MAX;
        sm.reserved_since_checkpoint = 1;
        assert!(!sm.space_for_roll_forward());
        sm.elapsed_base = u64::MAX;
        assert_eq!(sm.elapsed_now(), u64::MAX);
        // A hostile SIT mtime: the weighted average stays between the two.
        let mut seg = sm.segment(0).clone();
        seg.mtime = u64::MAX;
        seg.valid = 1; // mark_valid only averages; the map is not checked here
        let off = (0..BLOCKS_PER_SEG as usize)
            .find(|&b| seg.slot_free(b))
            .unwrap();
        seg.mark_valid(off, 5);
        assert!(seg.mtime > 5);
    }
}
