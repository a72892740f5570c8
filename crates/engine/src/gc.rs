//! Cleaning (garbage collection): picks a victim section, moves its live
//! blocks out through the logs, and leaves it to become free at the next
//! checkpoint.
//!
//! Victim policies: greedy (fewest valid blocks; foreground cleaning) and
//! cost-benefit (old and empty first; background cleaning), searching at
//! most `max_victim_search` candidate (dirty) sections from where the last
//! search of that policy stopped (round robin), as the kernel does.
//!
//! Liveness: a node block is live iff the NAT points at it; a data block is
//! live iff its summary's parent node still has the NAT version recorded in
//! the summary and still maps that file block to this address.

use crate::device::{Block, IoKind};
use crate::error::Result;
use crate::inode::Ctx;
use crate::node::{NodeExpect, NodeManager};
use f2fuse_layout::node::{footer_of, inode_of, InodeLayout};
use f2fuse_layout::segment::Summary;
use f2fuse_layout::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VictimPolicy {
    Greedy,
    CostBenefit,
}

/// Counters of cleaning work. Plain fields: cleaning runs alone (it holds
/// the operation lock exclusively), so nothing contends for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Cleaning passes run because space ran low.
    pub foreground_runs: u64,
    /// Cleaning passes run while idle.
    pub background_runs: u64,
    /// Data blocks moved.
    pub data_blocks_moved: u64,
    /// Node blocks moved.
    pub node_blocks_moved: u64,
    /// Sections freed.
    pub sections_cleaned: u64,
    /// Candidate sections victim searches looked at (bounded by `max_victim_search`).
    pub sections_searched: u64,
    /// Victims left as they were because a pinned file has blocks there.
    pub pinned_sections_skipped: u64,
}

/// Where each policy's last search stopped.
#[derive(Debug, Clone, Default)]
pub struct GcState {
    pub next_greedy: u32,
    pub next_cost_benefit: u32,
    pub stats: GcStats,
    /// Sections holding blocks of pinned files: no victim until a file is
    /// unpinned (the kernel's pinned_secmap, kept here until then).
    pub pinned_sections: std::collections::BTreeSet<u32>,
    /// `gc_pin_file_thresh`: a pinned file found in foreground cleaning's
    /// way more often than this is unpinned (the kernel's
    /// f2fs_pin_file_control).
    pub pin_file_thresh: u16,
    /// Whether the cleaning under way is foreground: only that counts a
    /// pinned file's `i_gc_failures`, as the kernel's FG_GC (its
    /// background and urgent cleaning leave the count alone).
    pub foreground: bool,
}

/// Picks a victim section (returns its first segment), or `None`.
pub fn select_victim(
    ctx: &Ctx,
    state: &mut GcState,
    policy: VictimPolicy,
    max_search: u32,
) -> Option<u32> {
    let sm = ctx.space.lock();
    let per = sm.segs_per_sec();
    let sections = sm.main_segments() / per;
    if sections == 0 {
        return None;
    }
    // Sections a log or a per-file stream writes into are no victims.
    let current = |sec: u32| (sec * per..(sec + 1) * per).any(|segno| sm.is_current(segno));
    let (min_mtime, max_mtime) = sm
        .segments()
        .iter()
        .filter(|s| s.valid > 0)
        .fold((u64::MAX, 0u64), |(lo, hi), s| {
            (lo.min(s.mtime), hi.max(s.mtime))
        });
    let now_age = |mtime: u64| -> u64 {
        if max_mtime <= min_mtime {
            0
        } else {
            100 - 100 * (mtime.saturating_sub(min_mtime)) / (max_mtime - min_mtime)
        }
    };
    let start = match policy {
        VictimPolicy::Greedy => state.next_greedy,
        VictimPolicy::CostBenefit => state.next_cost_benefit,
    } % sections;
    let mut best: Option<(u64, u32)> = None;
    let mut searched = 0u32;
    let mut last = start;
    for i in 0..sections {
        let sec = (start + i) % sections;
        last = sec;
        if current(sec) || state.pinned_sections.contains(&sec) {
            continue;
        }
        let segs = &sm.segments()[(sec * per) as usize..((sec + 1) * per) as usize];
        let valid: u64 = segs.iter().map(|s| s.valid as u64).sum();
        let full = (per * BLOCKS_PER_SEG) as u64;
        if valid == full || segs.iter().all(|s| s.is_free()) {
            continue;
        }
        // Fully invalid sections only need a checkpoint, not cleaning.
        if valid == 0 {
            continue;
        }
        searched += 1;
        let cost = match policy {
            VictimPolicy::Greedy => valid,
            VictimPolicy::CostBenefit => {
                let u = 100 * valid / full;
                let mtime = segs.iter().map(|s| s.mtime).sum::<u64>() / per as u64;
                let age = now_age(mtime);
                u32::MAX as u64 - (100 * (100 - u) * age / (100 + u))
            }
        };
        if best.is_none_or(|(c, _)| cost < c) {
            best = Some((cost, sec));
        }
        if searched >= max_search {
            break;
        }
    }
    state.stats.sections_searched += searched as u64;
    let next = (last + 1) % sections;
    match policy {
        VictimPolicy::Greedy => state.next_greedy = next,
        VictimPolicy::CostBenefit => state.next_cost_benefit = next,
    }
    best.map(|(_, sec)| sec * per)
}

/// Moves every live block of the section starting at `first_segno` out of it.
pub fn clean_section(ctx: &Ctx, state: &mut GcState, first_segno: u32) -> Result<()> {
    let per = {
        let mut sm = ctx.space.lock();
        let section = first_segno / sm.segs_per_sec();
        sm.set_gc_victim(Some(section));
        sm.segs_per_sec()
    };
    let mut cleaned = Ok(Moved::All);
    for segno in first_segno..first_segno + per {
        cleaned = clean_segment(ctx, state, segno);
        if !matches!(cleaned, Ok(Moved::All)) {
            break;
        }
    }
    ctx.space.lock().set_gc_victim(None);
    match cleaned? {
        Moved::All => state.stats.sections_cleaned += 1,
        Moved::StoppedAtPinned => {
            state.pinned_sections.insert(first_segno / per);
            state.stats.pinned_sections_skipped += 1;
        }
    }
    Ok(())
}

/// After cleaning the section starting at `first_segno`: unless a pinned
/// file stopped it, no block of its data segments is valid any more (every
/// valid block was live and moved), nor, once the nodes it dirtied are
/// written (`nodes_written`), of its node segments.
pub fn check_cleaned(
    ctx: &Ctx,
    state: &GcState,
    first_segno: u32,
    nodes_written: bool,
) -> Result<()> {
    let sm = ctx.space.lock();
    let per = sm.segs_per_sec();
    if state.pinned_sections.contains(&(first_segno / per)) {
        return Ok(());
    }
    for segno in first_segno..first_segno + per {
        let seg = sm.segment(segno);
        if !nodes_written && CursegType::from_u8(seg.seg_type).is_some_and(|t| t.is_node()) {
            continue;
        }
        let valid = seg.valid;
        crate::invariant::ensure_invariant!(
            ctx.dev.health(),
            valid == 0,
            "segment {segno} still has {valid} valid blocks after cleaning"
        );
    }
    Ok(())
}

/// How cleaning a segment ended.
enum Moved {
    All,
    /// A block of a pinned file is there: it stays, so the section cannot
    /// become free and cleaning it stops.
    StoppedAtPinned,
}

fn clean_segment(ctx: &Ctx, state: &mut GcState, segno: u32) -> Result<Moved> {
    let (sums, valid_offs, is_node, base) = {
        let sm = ctx.space.lock();
        let seg = sm.segment(segno);
        let offs: Vec<usize> = (0..BLOCKS_PER_SEG as usize)
            .filter(|&b| bitmap::test_bit_msb(&seg.valid_map, b))
            .collect();
        let is_node = CursegType::from_u8(seg.seg_type).is_some_and(|t| t.is_node());
        (
            sm.read_summaries(segno)?,
            offs,
            is_node,
            sm.blkaddr_of(segno, 0),
        )
    };
    for off in valid_offs {
        let blkaddr = base + off as u32;
        let sum = sums[off];
        if is_node {
            move_node(ctx, state, blkaddr, sum)?;
        } else if let Moved::StoppedAtPinned = move_data(ctx, state, blkaddr, sum)? {
            return Ok(Moved::StoppedAtPinned);
        }
    }
    Ok(Moved::All)
}

fn move_node(ctx: &Ctx, state: &mut GcState, blkaddr: u32, sum: Summary) -> Result<()> {
    let nid = sum.nid.get();
    if nid >= ctx.nm.max_nid() || ctx.nm.nat_entry(nid)?.block_addr.get() != blkaddr {
        return Ok(()); // Stale: the node lives elsewhere now (its block is just not yet invalid).
    }
    // Dirtying the node makes the next node flush write it elsewhere and invalidate this block.
    ctx.nm.update_node(nid, NodeExpect::default(), |_| ())?;
    state.stats.node_blocks_moved += 1;
    Ok(())
}

/// The address slot a data block's summary names: the owning inode, the
/// slot's byte offset in node `sum.nid` and the address it holds now.
pub struct SummarySlot {
    pub ino: u32,
    pub byte: usize,
    pub addr: u32,
}

/// The node block a data block's summary names, or None when the summary
/// is stale (the node freed, or its nid reused since: another NAT version).
pub fn summary_node(nm: &NodeManager, sum: Summary) -> Result<Option<Block>> {
    let nid = sum.nid.get();
    if nid >= nm.max_nid() {
        return Ok(None);
    }
    let ne = nm.nat_entry(nid)?;
    if ne.block_addr.get() == NULL_ADDR || ne.version != sum.version {
        return Ok(None);
    }
    nm.read_node(nid, NodeExpect::default()).map(Some)
}

/// The slot `sum` names in `node`, its [`summary_node`], or None when the
/// offset is beyond the node's addresses. A data block is live iff the slot
/// exists and holds the block's address.
pub fn slot_in_node(node: &[u8], features: u32, sum: Summary) -> Result<Option<SummarySlot>> {
    let footer = footer_of(node);
    let ino = footer.ino.get();
    let ofs = sum.ofs_in_node.get() as usize;
    // Inodes keep addresses after their extra attribute area.
    let byte = if footer.ofs() == 0 {
        let layout = InodeLayout::of(inode_of(node), features)?;
        if ofs >= layout.addrs_per_inode() as usize {
            return Ok(None);
        }
        node::I_ADDR_OFFSET + 4 * (layout.extra_words + ofs)
    } else {
        if ofs >= ADDRS_PER_BLOCK as usize {
            return Ok(None);
        }
        4 * ofs
    };
    let addr = u32::from_le_bytes(node[byte..byte + 4].try_into().unwrap());
    Ok(Some(SummarySlot { ino, byte, addr }))
}

fn move_data(ctx: &Ctx, state: &mut GcState, blkaddr: u32, sum: Summary) -> Result<Moved> {
    let nid = sum.nid.get();
    let Some(node) = summary_node(ctx.nm, sum)? else {
        return Ok(Moved::All);
    };
    let Some(SummarySlot { ino, byte, addr }) = slot_in_node(&node, ctx.check.features, sum)?
    else {
        return Ok(Moved::All);
    };
    if addr != blkaddr {
        return Ok(Moved::All);
    }
    if ctx.inode(ino)?.has_inline(inline_flag::PIN_FILE) {
        if state.foreground {
            note_pinned_failure(ctx, state, ino)?;
        }
        return Ok(Moved::StoppedAtPinned);
    }
    let data = ctx.dev.read_block(IoKind::GcData, blkaddr as u64)?;
    let new = {
        let mut sm = ctx.space.lock();
        // Cleaning holds the operation lock exclusively: a block found
        // valid in the victim stays valid until it is moved.
        crate::invariant::ensure_invariant!(
            ctx.dev.health(),
            sm.is_valid(blkaddr),
            "cleaning moves data block {blkaddr:#x} of inode {ino}, which is not valid"
        );
        let new = sm.allocate(CursegType::ColdData, sum)?;
        sm.invalidate(blkaddr)?;
        new
    };
    ctx.dev.write_blocks(IoKind::GcData, new as u64, &data)?;
    ctx.nm.update_node(nid, NodeExpect::default(), |b| {
        b[byte..byte + 4].copy_from_slice(&new.to_le_bytes())
    })?;
    // The inode's cached extent may cover the moved block.
    ctx.update_inode(ino, |raw| {
        if raw.i_ext.len.get() != 0 {
            raw.i_ext = Default::default();
        }
    })?;
    state.stats.data_blocks_moved += 1;
    Ok(Moved::All)
}

/// Counts a cleaning that pinned file `ino` stopped in its
/// `i_gc_failures`, and unpins it once that exceeds `gc_pin_file_thresh`
/// (the kernel's f2fs_pin_file_control); then every section is a
/// candidate again.
fn note_pinned_failure(ctx: &Ctx, state: &mut GcState, ino: u32) -> Result<()> {
    let thresh = state.pin_file_thresh;
    let unpinned = ctx.update_inode(ino, |raw| {
        let depth = raw.i_current_depth.get();
        let failures = (depth as u16).saturating_add(1);
        raw.i_current_depth
            .set(depth & 0xFFFF_0000 | failures as u32);
        let unpin = failures > thresh;
        if unpin {
            raw.i_inline &= !inline_flag::PIN_FILE;
        }
        unpin
    })?;
    if unpinned {
        state.pinned_sections.clear();
    }
    Ok(())
}
