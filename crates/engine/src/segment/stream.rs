//! Per-file streams: a file writing large requests one after another gets
//! segments of its own, outside the six logs, so its blocks stay
//! contiguous while other files write at the same time (issue 11, seed
//! 000: with one shared data log, ten concurrent writers got one extent
//! per request). A stream maps file block `i` to address `base + i`, so
//! requests that arrive out of order (FUSE sends one file's chunks on
//! several threads) still land next to each other. A stream's segments
//! are ordinary data segments on disk, partly filled, with their SIT
//! entries and SSA blocks written at each checkpoint; what a stream leaves
//! unwritten is a hole that SSR and the cleaner reclaim once the stream
//! let go of the segment. See docs/ARCHITECTURE.md, "Per-file streams".

use super::SegmentManager;
use crate::error::Result;
use f2fuse_layout::segment::{Summary, SummaryBlock, SUM_TYPE_DATA};
use f2fuse_layout::{CursegType, BLOCKS_PER_SEG, ENTRIES_IN_SUM};
use std::ops::Range;
use zerocopy::FromZeros;

/// Streams remembered at once (with segments or not yet); the least
/// recently used one, among those without a placement if any, is dropped
/// for a new file.
const MAX_STREAMS: usize = 32;
/// Segments with free slots one stream holds at once; taking one more
/// lets go of its lowest (whatever of it is unwritten stays a hole). A
/// segment with no free slot left is let go of at once, so these are the
/// segments still waiting for chunks: write-back sends some of a file's
/// chunks many megabytes late (7-17 MiB in one traced run), and each such
/// chunk keeps one segment here.
const MAX_HELD: usize = 8;
/// Streams opened by a file's first request and not used since
/// (tentative: the file may write no more) at once; a further first
/// request goes to the log, so that many lone large writes (a copy of many
/// 1 MiB files) leave at most this many partly written segments between
/// two checkpoints (each checkpoint lets go of the tentative streams).
const MAX_TENTATIVE: usize = 4;
/// Segments a new stream expects to fill at least (32 MiB) and at most
/// (128 MiB): the window the logs avoid while they can. Windows are free
/// segments on disk, so a generous one costs nothing. A confirmed stream's
/// window also keeps MIN_WINDOW_SEGMENTS ahead of the last segment it took.
const MIN_WINDOW_SEGMENTS: u64 = 16;
const MAX_WINDOW_SEGMENTS: u64 = 64;

/// How far (in requests' lengths) a request may start after or before
/// the end of the file's last one, or end before it, and still count as
/// the same writing: FUSE's request threads deliver one file's chunks a
/// little out of order, and write-back's may overlap the one before.
const REORDER_REQUESTS: u64 = 2;

/// A serialized write request, as the allocator sees it.
#[derive(Debug, Clone, Copy)]
pub struct StreamRequest {
    pub ino: u32,
    /// First file block of the request.
    pub first: u64,
    /// Blocks of the request.
    pub blocks: u64,
    /// Blocks the file is expected to write after this request: its
    /// preallocated (fallocated) blocks past it, 0 when unknown.
    pub ahead: u64,
    /// Whether the request may open a stream (a serialized write), or only
    /// join the file's open one where that spans it.
    pub may_open: bool,
    /// Whether every block it allocates fills a hole or a preallocated
    /// (NEW_ADDR) slot: new data, not a rewrite.
    pub fills_holes: bool,
    /// The file's size in blocks when the request is placed.
    pub file_blocks: u64,
}

/// The large requests of one file.
pub(super) struct Stream {
    ino: u32,
    log: CursegType,
    /// File block right after the last request (None before the first):
    /// a request starting here continues the file's writing.
    next_index: Option<u64>,
    /// Where the stream puts file blocks, once opened.
    placement: Option<Placement>,
    /// `stream_clock` at the last request: for least-recently-used eviction.
    used: u64,
}

/// File block `i` goes to address `base_addr + (i - base_index)`, in one
/// of the segments the stream holds (taken free, counted as current).
pub(super) struct Placement {
    base_index: u64,
    base_addr: u64,
    held: Vec<HeldSegment>,
    /// Segments the stream expects to grow into.
    window: Range<u32>,
    /// Opened by the file's first request and not yet used again (see
    /// MAX_TENTATIVE).
    tentative: bool,
}

pub(super) struct HeldSegment {
    segno: u32,
    sums: Vec<Summary>,
}

impl HeldSegment {
    fn summary_block(&self) -> Box<SummaryBlock> {
        let mut block = SummaryBlock::new_zeroed();
        block.entries.copy_from_slice(&self.sums);
        block.footer.entry_type = SUM_TYPE_DATA;
        Box::new(block)
    }
}

impl SegmentManager {
    /// Called, under the space lock, before a request's blocks are
    /// allocated: returns whether they go to the file's stream
    /// ([`allocate_streamed`](Self::allocate_streamed)). They do when the
    /// request falls in the stream's span; else, for a serialized request
    /// (`may_open`), a new stream opens when the request continues the
    /// file's previous one, writes into preallocated blocks with more of
    /// them ahead, or is the file's first and writes new data no more than
    /// two requests past its end (a tentative stream: at most
    /// MAX_TENTATIVE at once). A
    /// smaller request only joins a stream its file has open for the same
    /// log: it neither opens nor displaces one. A stream needs free
    /// segments, one-segment sections, and space enough that the logs do
    /// not fill holes yet (SSR); otherwise the request goes to the log.
    pub fn begin_stream_request(&mut self, req: StreamRequest, log: CursegType) -> bool {
        if !req.may_open
            && !self
                .streams
                .iter()
                .any(|s| s.ino == req.ino && s.log == log && s.placement.is_some())
        {
            return false;
        }
        self.stream_clock += 1;
        let i = self.stream_of(req.ino, log);
        let stream = &mut self.streams[i];
        let reorder = REORDER_REQUESTS * req.blocks;
        let end = req.first.saturating_add(req.blocks);
        // Continues the file's writing: starts where the last request
        // ended, a little after (the chunks between are on their way), or
        // a little before (write-back's chunks of a buffered writer may
        // begin by rewriting the last blocks of the chunk before).
        let expected_at = stream.next_index;
        let continues = expected_at.is_some_and(|at| end > at && req.first.abs_diff(at) <= reorder);
        // A chunk of this writing arriving late: new data behind its end
        // (write-back sends some chunks megabytes late), or anything just
        // behind it. It leaves the end where it is, so the next chunk
        // still continues the writing.
        let late_chunk =
            expected_at.is_some_and(|at| end <= at && (req.fills_holes || at - end <= reorder));
        let first_request = expected_at.is_none();
        if !late_chunk {
            stream.next_index = Some(end);
        }
        stream.used = self.stream_clock;
        // A tentative stream whose file's second request jumps elsewhere
        // (a random writer) is let go of: placed by file offset, random
        // requests would leave holes between them.
        if stream
            .placement
            .as_ref()
            .is_some_and(|p| p.tentative && !continues && !late_chunk)
        {
            self.close_stream(i);
        }
        let stream = &self.streams[i];
        if stream.placement.as_ref().is_some_and(|p| p.spans(&req)) && self.placeable(i, &req) {
            // New data confirms it; a rewrite (its blocks go to the log:
            // their slots are taken) does not.
            if let Some(p) = self.streams[i].placement.as_mut() {
                p.tentative &= !req.fills_holes;
            }
            return true;
        }
        // The file's first request, writing new data inside the file or a
        // little past its end (its earlier chunks on their way; write-back
        // may find the size already final): likely the start of a longer
        // writing, as write-back's first chunk of a file.
        let tentative = first_request
            && req.ahead == 0
            && req.fills_holes
            && req.first <= req.file_blocks + reorder
            && self.tentative_streams() < MAX_TENTATIVE;
        // A late chunk never opens a stream nor moves the file's one.
        if !req.may_open
            || late_chunk
            || !continues && req.ahead == 0 && !tentative
            || self.segs_per_sec != 1
            || self.need_ssr()
        {
            return false;
        }
        self.close_stream(i);
        // Expect the rest of a preallocated range, or a file as long again.
        let expected = req.blocks + req.ahead.max(req.first);
        let want = expected
            .div_ceil(BLOCKS_PER_SEG as u64)
            .clamp(MIN_WINDOW_SEGMENTS, MAX_WINDOW_SEGMENTS) as u32;
        let Some(window) = self.find_window(log, want) else {
            return false;
        };
        // From where the writing continues; a first request may be a later
        // chunk of a write whose earlier chunks are still on their way:
        // room for them (back to the file's end, or one request).
        let base_index = match expected_at {
            Some(at) if continues => at,
            _ if tentative => req.first.min(req.file_blocks),
            // Preallocated: its size says nothing of what was written.
            _ => req.first.saturating_sub(req.blocks),
        };
        self.streams[i].placement = Some(Placement {
            base_index,
            base_addr: self.blkaddr_of(window.start, 0) as u64,
            held: Vec::new(),
            window,
            tentative,
        });
        true
    }

    /// Streams open and still tentative.
    fn tentative_streams(&self) -> usize {
        self.streams
            .iter()
            .filter(|s| s.placement.as_ref().is_some_and(|p| p.tentative))
            .count()
    }

    /// The stream of file `ino` writing to `log` (a new one, dropping the
    /// least recently used if need be, one without a placement first).
    fn stream_of(&mut self, ino: u32, log: CursegType) -> usize {
        if let Some(i) = self.streams.iter().position(|s| s.ino == ino) {
            if self.streams[i].log != log {
                self.close_stream(i);
                self.streams[i].log = log;
            }
            return i;
        }
        if self.streams.len() == MAX_STREAMS {
            // One with no placement first: dropping it leaves no hole (a
            // copy of many files must not drop the tentative streams, which
            // would let every few files open another).
            let oldest = (0..self.streams.len())
                .min_by_key(|&i| (self.streams[i].placement.is_some(), self.streams[i].used))
                .expect("MAX_STREAMS > 0");
            self.drop_stream(oldest);
        }
        self.streams.push(Stream {
            ino,
            log,
            next_index: None,
            placement: None,
            used: 0,
        });
        self.streams.len() - 1
    }

    /// Hands out the address file block `index` of `ino` has in its
    /// stream; the log's next block ([`allocate`](Self::allocate)) when it
    /// has no stream or that address is not free for it.
    pub fn allocate_streamed(
        &mut self,
        ino: u32,
        index: u64,
        log: CursegType,
        owner: Summary,
    ) -> Result<u32> {
        match self.stream_slot(ino, index) {
            Some((i, segno, off)) => {
                let seg = &self.segs[segno as usize];
                crate::invariant::ensure_invariant!(
                    self.dev.health(),
                    seg.slot_free(off),
                    "stream of inode {ino} handing out block {off} of segment {segno}: not free"
                );
                let now = self.elapsed_now();
                let held = self.streams[i]
                    .placement
                    .as_mut()
                    .and_then(|p| p.held.iter_mut().find(|h| h.segno == segno))
                    .expect("stream_slot holds the segment");
                held.sums[off] = owner;
                self.tracking(&[segno], |sm| sm.segs[segno as usize].mark_valid(off, now));
                self.dirty_sit.insert(segno);
                self.stats.lfs_blocks[log as usize] += 1;
                // Full: no chunk can land in it any more.
                if self.segs[segno as usize].ckpt_valid as usize == BLOCKS_PER_SEG as usize {
                    self.release_segment(i, segno);
                }
                Ok(self.blkaddr_of(segno, off as u32))
            }
            None => self.allocate(log, owner),
        }
    }

    /// The stream (its index), segment and offset where file block `index`
    /// of `ino` goes, taking the segment if the stream does not hold it
    /// yet; None when the slot is not free, or the segment not free to take.
    fn stream_slot(&mut self, ino: u32, index: u64) -> Option<(usize, u32, usize)> {
        let i = self.streams.iter().position(|s| s.ino == ino)?;
        let (segno, off) = self.target_of(i, index)?;
        if !self.holds(i, segno) && !self.hold_segment(i, segno) {
            return None;
        }
        self.segs[segno as usize]
            .slot_free(off)
            .then_some((i, segno, off))
    }

    /// Segment and offset of file block `index` in stream `i`'s placement.
    fn target_of(&self, i: usize, index: u64) -> Option<(u32, usize)> {
        let p = self.streams[i].placement.as_ref()?;
        let addr = p.base_addr + index.checked_sub(p.base_index)?;
        let rel = addr.checked_sub(self.main_blkaddr as u64)?;
        let segno = u32::try_from(rel / BLOCKS_PER_SEG as u64).ok()?;
        ((segno as usize) < self.segs.len())
            .then_some((segno, (rel % BLOCKS_PER_SEG as u64) as usize))
    }

    fn holds(&self, i: usize, segno: u32) -> bool {
        self.streams[i]
            .placement
            .as_ref()
            .is_some_and(|p| p.held.iter().any(|h| h.segno == segno))
    }

    /// Whether blocks of `req` can go to stream `i`: a segment it reaches
    /// is held, or free to take. Any of them, not only its first block's:
    /// write-back sends chunks that start by rewriting the last blocks of
    /// the chunk before (in place), and where that chunk filled its segment
    /// (let go of), the new blocks after them still belong in the next one.
    fn placeable(&self, i: usize, req: &StreamRequest) -> bool {
        let Some(base_index) = self.streams[i].placement.as_ref().map(|p| p.base_index) else {
            return false;
        };
        let Some((first, _)) = self.target_of(i, req.first.max(base_index)) else {
            return false;
        };
        let last = self
            .target_of(i, req.first + req.blocks.max(1) - 1)
            .map_or(first, |(segno, _)| segno);
        (first..=last).any(|segno| self.holds(i, segno) || self.takeable(i, segno))
    }

    /// Whether stream `i` may take segment `segno`: free, no log's or
    /// stream's, in no other stream's window, and the logs do not fill
    /// holes yet.
    fn takeable(&self, i: usize, segno: u32) -> bool {
        self.usable_for_window(segno, Some(i)) && !self.need_ssr()
    }

    /// Makes segment `segno` one stream `i` holds, if it is takeable; lets
    /// go of the stream's lowest segment first when it holds MAX_HELD
    /// (then a chunk still due there goes to the log).
    /// Returns whether it did.
    fn hold_segment(&mut self, i: usize, segno: u32) -> bool {
        if !self.takeable(i, segno) {
            return false;
        }
        let p = self.streams[i].placement.as_ref().expect("an open stream");
        if p.held.len() >= MAX_HELD {
            let lowest = p.held.iter().map(|h| h.segno).min().expect("held");
            self.release_segment(i, lowest);
        }
        let log = self.streams[i].log;
        let window_end = self.window_ahead_of(i, segno);
        self.tracking(&[segno], |sm| {
            let p = sm.streams[i].placement.as_mut().expect("an open stream");
            p.held.push(HeldSegment {
                segno,
                sums: vec![Summary::default(); ENTRIES_IN_SUM],
            });
            p.window.end = window_end;
        });
        let seg = &mut self.segs[segno as usize];
        seg.seg_type = log as u8;
        seg.mtime = 0;
        self.dirty_sit.insert(segno);
        self.stats.segments_opened += 1;
        true
    }

    /// Where stream `i`'s window ends once it takes `segno`: past it, and,
    /// unless the stream is tentative (its file may write no more), up to
    /// MIN_WINDOW_SEGMENTS further over the free segments no log or other
    /// window has. The logs take new segments outside every window, the
    /// first right after this one: kept ahead of the stream, the window
    /// keeps them out of the segments a long writing grows into next (a
    /// 256 MiB file otherwise had its second half in the log, in the order
    /// its chunks came), and a stream spans as far as its window.
    fn window_ahead_of(&self, i: usize, segno: u32) -> u32 {
        let p = self.streams[i].placement.as_ref().expect("an open stream");
        let mut end = p.window.end.max(segno + 1);
        let ahead = if p.tentative {
            0
        } else {
            MIN_WINDOW_SEGMENTS as u32
        };
        while end < (segno + 1 + ahead).min(self.segs.len() as u32)
            && self.usable_for_window(end, Some(i))
        {
            end += 1;
        }
        end
    }

    /// Lets go of segment `segno` of stream `i`: its summaries go to the
    /// SSA and it becomes an ordinary data segment.
    fn release_segment(&mut self, i: usize, segno: u32) {
        let p = self.streams[i].placement.as_ref().expect("an open stream");
        let at = p.held.iter().position(|h| h.segno == segno).expect("held");
        let block = p.held[at].summary_block();
        self.queue_ssa(segno, block);
        self.tracking(&[segno], |sm| {
            let p = sm.streams[i].placement.as_mut().expect("an open stream");
            p.held.swap_remove(at);
        });
    }

    /// Closes stream `i` and forgets it (its file's writing too).
    fn drop_stream(&mut self, i: usize) {
        self.close_stream(i);
        self.streams.swap_remove(i);
    }

    /// Lets go of every segment of stream `i` and of its placement.
    fn close_stream(&mut self, i: usize) {
        let held: Vec<u32> = match &self.streams[i].placement {
            Some(p) => p.held.iter().map(|h| h.segno).collect(),
            None => return,
        };
        for segno in held {
            self.release_segment(i, segno);
        }
        self.streams[i].placement = None;
    }

    /// Before a checkpoint: queues the summary blocks of the streams'
    /// segments for the SSA, which records them as ordinary data segments;
    /// a segment with no valid block is let go of, since the checkpoint
    /// counts it free (or prefree), as fsck does; a stream still tentative
    /// lets go of its segments (its file wrote no more since it opened, so
    /// the rest of its segment is a hole for SSR and the cleaner), and so
    /// does a stream that took no request since the checkpoint before (its
    /// file stopped writing; held, its segments would stay current, out of
    /// reach of SSR and the cleaner, until the disk is nearly full). Once
    /// the logs fill holes (need_SSR) every stream lets go of its segments,
    /// so that SSR and the cleaner may use them.
    pub(super) fn checkpoint_streams(&mut self) {
        let idle_until = std::mem::replace(&mut self.stream_clock_at_checkpoint, self.stream_clock);
        if self.need_ssr() {
            for i in 0..self.streams.len() {
                self.close_stream(i);
            }
            return;
        }
        for i in 0..self.streams.len() {
            let idle = self.streams[i].used <= idle_until;
            let held: Vec<u32> = match &self.streams[i].placement {
                Some(p) if p.tentative || idle => {
                    self.close_stream(i);
                    continue;
                }
                Some(p) => p.held.iter().map(|h| h.segno).collect(),
                None => continue,
            };
            for segno in held {
                if self.segs[segno as usize].valid == 0 {
                    self.release_segment(i, segno);
                } else {
                    let block = self.held_segment(segno).expect("held").summary_block();
                    self.queue_ssa(segno, block);
                }
            }
        }
    }

    /// Forgets file `ino`'s writing once its blocks from `from` on are freed
    /// (a truncate; a delete, whose inode number may come back): a stream
    /// placed by the old offsets would take the rewrite's requests for
    /// late chunks of the old writing and send them all to the log.
    pub fn forget_stream(&mut self, ino: u32, from: u64) {
        let stale = self
            .streams
            .iter()
            .position(|s| s.ino == ino && s.next_index.is_some_and(|at| at > from));
        if let Some(i) = stale {
            self.drop_stream(i);
        }
    }

    /// Lets go of `segno` if a stream holds it: called when its last valid
    /// block was freed (the file truncated or deleted), so that it counts
    /// as prefree at once, like any other emptied segment.
    pub(super) fn release_emptied(&mut self, segno: u32) {
        let holder = self.streams.iter().position(|s| {
            s.placement
                .as_ref()
                .is_some_and(|p| p.held.iter().any(|h| h.segno == segno))
        });
        if let Some(i) = holder {
            self.release_segment(i, segno);
        }
    }

    fn held_segment(&self, segno: u32) -> Option<&HeldSegment> {
        self.streams
            .iter()
            .filter_map(|s| s.placement.as_ref())
            .flat_map(|p| &p.held)
            .find(|h| h.segno == segno)
    }

    /// The owners of the blocks of `segno` if a stream holds it.
    pub(super) fn stream_summaries(&self, segno: u32) -> Option<Vec<Summary>> {
        self.held_segment(segno).map(|h| h.sums.clone())
    }

    /// Whether a stream holds `segno`.
    pub(super) fn is_stream_segment(&self, segno: u32) -> bool {
        self.held_segment(segno).is_some()
    }

    /// Whether `segno` lies in the window of a stream other than `except`.
    pub(super) fn in_stream_window(&self, segno: u32, except: Option<usize>) -> bool {
        self.streams.iter().enumerate().any(|(i, s)| {
            Some(i) != except
                && s.placement
                    .as_ref()
                    .is_some_and(|p| p.window.contains(&segno))
        })
    }

    /// Whether `segno` may join a window of stream `except` (None: a new
    /// stream's): free, no log's or stream's, in no other stream's window.
    fn usable_for_window(&self, segno: u32, except: Option<usize>) -> bool {
        self.segs[segno as usize].is_free()
            && !self.is_current(segno)
            && !self.in_stream_window(segno, except)
    }

    /// Free segments for a new stream: the first run of `want` segments
    /// after `log`'s own (wrapping) that are free, no log's or stream's and
    /// in no stream's window; else the first run half as long, and so on
    /// down to one segment.
    fn find_window(&self, log: CursegType, want: u32) -> Option<Range<u32>> {
        let total = self.segs.len() as u32;
        let start = self.cursegs[log as usize].segno + 1;
        let mut want = want.min(total);
        while want > 0 {
            let mut run = 0u32;
            for k in 0..total {
                let segno = (start + k) % total;
                // Runs do not wrap: a window is consecutive addresses.
                if segno == 0 {
                    run = 0;
                }
                run = if self.usable_for_window(segno, None) {
                    run + 1
                } else {
                    0
                };
                if run == want {
                    return Some(segno + 1 - want..segno + 1);
                }
            }
            want /= 2;
        }
        None
    }

    /// Checks the streams' invariant (debug builds): a segment a stream
    /// holds is no log's and no other stream's.
    pub(super) fn debug_check_streams(&self) {
        let held: Vec<u32> = self
            .streams
            .iter()
            .filter_map(|s| s.placement.as_ref())
            .flat_map(|p| p.held.iter().map(|h| h.segno))
            .collect();
        for (k, &segno) in held.iter().enumerate() {
            assert!(
                self.cursegs.iter().all(|c| c.segno != segno),
                "stream segment {segno} is a log's"
            );
            assert!(
                !held[k + 1..].contains(&segno),
                "two streams hold segment {segno}"
            );
        }
    }
}

impl Placement {
    /// Whether `req` lies in the stream: from its base (blocks before it,
    /// rewritten where they are, may lead) to as far as its window
    /// reaches, by at most the largest window.
    fn spans(&self, req: &StreamRequest) -> bool {
        let limit =
            self.window.len().max(MAX_WINDOW_SEGMENTS as usize) as u64 * BLOCKS_PER_SEG as u64;
        let end = req.first + req.blocks;
        end > self.base_index && end - self.base_index <= limit
    }
}
