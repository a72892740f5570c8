//! Per-file streams: a file writing large requests one after another gets
//! segments of its own, outside the six logs, so its blocks stay
//! contiguous while other files write at the same time (issue 11, seed
//! 000: with one shared data log, ten concurrent writers got one extent
//! per request). A stream's segment is an ordinary data segment on disk,
//! partly filled, with its SIT entry and SSA block written at each
//! checkpoint; its unused tail is a hole that SSR and the cleaner reclaim
//! once the stream has moved on. See docs/ARCHITECTURE.md, "Per-file
//! streams".

use super::SegmentManager;
use crate::error::Result;
use f2fuse_layout::segment::{Summary, SummaryBlock, SUM_TYPE_DATA};
use f2fuse_layout::{bitmap, CursegType, BLOCKS_PER_SEG, ENTRIES_IN_SUM};
use std::ops::Range;
use zerocopy::FromZeros;

/// Streams remembered at once (with a segment or not yet); the least
/// recently used one is dropped for a new file.
const MAX_STREAMS: usize = 32;
/// Segments a new stream holds ahead of itself at least (32 MiB) and at
/// most (128 MiB). Held segments stay free on disk: the logs only prefer
/// others while there are any, so a generous window costs nothing.
const MIN_WINDOW_SEGMENTS: u64 = 16;
const MAX_WINDOW_SEGMENTS: u64 = 64;

/// A serialized write request, as the allocator sees it.
#[derive(Debug, Clone, Copy)]
pub struct StreamRequest {
    pub ino: u32,
    /// First file block of the request.
    pub first: u64,
    /// Blocks the request allocates.
    pub blocks: u64,
    /// Blocks the file is expected to write after this request: its
    /// preallocated (fallocated) blocks past it, 0 when unknown.
    pub ahead: u64,
}

/// The large requests of one file: where the next one must start to
/// continue them, and the segment they fill, once opened.
pub(super) struct Stream {
    ino: u32,
    log: CursegType,
    next_index: u64,
    open: Option<StreamSegment>,
    /// `stream_clock` at the last request: for least-recently-used eviction.
    used: u64,
}

/// The segment a stream writes, LFS-style (a block after another, none
/// reused before the next checkpoint), and the segments held for it.
pub(super) struct StreamSegment {
    segno: u32,
    next_blkoff: u16,
    sums: Vec<Summary>,
    /// Segments the stream expects to grow into: the logs pick new
    /// segments outside every window while they can.
    window: Range<u32>,
}

impl StreamSegment {
    fn summary_block(&self) -> Box<SummaryBlock> {
        let mut block = SummaryBlock::new_zeroed();
        block.entries.copy_from_slice(&self.sums);
        block.footer.entry_type = SUM_TYPE_DATA;
        Box::new(block)
    }
}

impl SegmentManager {
    /// Called, under the space lock, before a serialized request's blocks
    /// are allocated: returns whether they go to the file's stream
    /// ([`allocate_streamed`](Self::allocate_streamed)). A stream opens
    /// when the request continues the file's previous one, or writes into
    /// preallocated blocks with more of them ahead; it needs a free
    /// segment, one-segment sections, and space enough that the logs do
    /// not fill holes yet (SSR). Otherwise the request goes to the log.
    pub fn begin_stream_request(&mut self, req: StreamRequest, log: CursegType) -> bool {
        self.stream_clock += 1;
        let i = match self.streams.iter().position(|s| s.ino == req.ino) {
            Some(i) => i,
            None => {
                if self.streams.len() == MAX_STREAMS {
                    let oldest = (0..self.streams.len())
                        .min_by_key(|&i| self.streams[i].used)
                        .expect("MAX_STREAMS > 0");
                    self.close_stream(oldest);
                    self.streams.swap_remove(oldest);
                }
                self.streams.push(Stream {
                    ino: req.ino,
                    log,
                    next_index: u64::MAX,
                    open: None,
                    used: 0,
                });
                self.streams.len() - 1
            }
        };
        let stream = &mut self.streams[i];
        let continues = stream.next_index == req.first && stream.log == log;
        stream.next_index = req.first.saturating_add(req.blocks);
        stream.used = self.stream_clock;
        stream.log = log;
        if continues && stream.open.is_some() {
            return true;
        }
        self.close_stream(i);
        if !continues && req.ahead == 0 || self.segs_per_sec != 1 || self.need_ssr() {
            return false;
        }
        // Expect the rest of a preallocated range, or a file as long again.
        let expected = req.blocks + req.ahead.max(req.first);
        let want = expected
            .div_ceil(BLOCKS_PER_SEG as u64)
            .clamp(MIN_WINDOW_SEGMENTS, MAX_WINDOW_SEGMENTS) as u32;
        let Some(window) = self.find_window(log, want) else {
            return false;
        };
        self.open_stream_segment(i, window.start, window);
        true
    }

    /// Hands out the next block of file `ino`'s stream; the log's next one
    /// ([`allocate`](Self::allocate)) when it has no stream or the stream
    /// cannot go on into the next segment.
    pub fn allocate_streamed(&mut self, ino: u32, log: CursegType, owner: Summary) -> Result<u32> {
        let Some(i) = self
            .streams
            .iter()
            .position(|s| s.ino == ino && s.open.is_some())
        else {
            return self.allocate(log, owner);
        };
        if self.stream_segment(i).next_blkoff as u32 >= BLOCKS_PER_SEG && !self.advance_stream(i) {
            return self.allocate(log, owner);
        }
        let now = self.elapsed_now();
        let seg = self.streams[i].open.as_mut().expect("checked above");
        let (segno, off) = (seg.segno, seg.next_blkoff as usize);
        seg.sums[off] = owner;
        seg.next_blkoff += 1;
        self.tracking(&[segno], |sm| sm.segs[segno as usize].mark_valid(off, now));
        self.dirty_sit.insert(segno);
        self.stats.lfs_blocks[log as usize] += 1;
        Ok(self.blkaddr_of(segno, off as u32))
    }

    fn stream_segment(&self, i: usize) -> &StreamSegment {
        self.streams[i].open.as_ref().expect("an open stream")
    }

    /// Moves a full stream on: to the segment right after its own if that
    /// one is free, no log's or stream's, and in no other stream's window;
    /// else to a new window as long as its last one (a new run of the
    /// file, but still apart from the other writers). Closes the stream
    /// and returns false when neither is there.
    fn advance_stream(&mut self, i: usize) -> bool {
        let seg = self.stream_segment(i);
        let (next, window) = (seg.segno + 1, seg.window.clone());
        let log = self.streams[i].log;
        self.close_stream(i);
        if self.need_ssr() {
            return false;
        }
        let adjacent = (next as usize) < self.segs.len()
            && self.segs[next as usize].is_free()
            && !self.is_current(next)
            && !self.in_stream_window(next, Some(i));
        let moved = if adjacent {
            Some((next, window.start..window.end.max(next + 1)))
        } else {
            self.find_window(log, window.len() as u32)
                .map(|window| (window.start, window))
        };
        match moved {
            Some((segno, window)) => {
                self.open_stream_segment(i, segno, window);
                true
            }
            None => false,
        }
    }

    /// Makes free segment `segno` stream `i`'s.
    fn open_stream_segment(&mut self, i: usize, segno: u32, window: Range<u32>) {
        let log = self.streams[i].log;
        self.tracking(&[segno], |sm| {
            sm.streams[i].open = Some(StreamSegment {
                segno,
                next_blkoff: 0,
                sums: vec![Summary::default(); ENTRIES_IN_SUM],
                window,
            })
        });
        let seg = &mut self.segs[segno as usize];
        seg.seg_type = log as u8;
        seg.mtime = 0;
        self.dirty_sit.insert(segno);
        self.stats.segments_opened += 1;
    }

    /// Lets go of stream `i`'s segment, if it has one: its summaries go to
    /// the SSA and it becomes an ordinary data segment.
    fn close_stream(&mut self, i: usize) {
        let Some(segno) = self.streams[i].open.as_ref().map(|s| s.segno) else {
            return;
        };
        let block = self.stream_segment(i).summary_block();
        self.queue_ssa(segno, block);
        self.tracking(&[segno], |sm| sm.streams[i].open = None);
    }

    /// Before a checkpoint: queues the summary blocks of the streams'
    /// segments for the SSA, which records them as ordinary data segments;
    /// a stream whose segment holds no valid block lets go of it, since the
    /// checkpoint counts such a segment free (or prefree), as fsck does.
    pub(super) fn checkpoint_streams(&mut self) {
        for i in 0..self.streams.len() {
            let Some(seg) = &self.streams[i].open else {
                continue;
            };
            if self.segs[seg.segno as usize].valid == 0 {
                self.close_stream(i);
            } else {
                let (segno, block) = (seg.segno, seg.summary_block());
                self.queue_ssa(segno, block);
            }
        }
    }

    /// The owners of the blocks of `segno` if it is a stream's segment.
    pub(super) fn stream_summaries(&self, segno: u32) -> Option<Vec<Summary>> {
        self.streams
            .iter()
            .filter_map(|s| s.open.as_ref())
            .find(|seg| seg.segno == segno)
            .map(|seg| seg.sums.clone())
    }

    /// Whether `segno` is a stream's segment.
    pub(super) fn is_stream_segment(&self, segno: u32) -> bool {
        self.streams
            .iter()
            .any(|s| s.open.as_ref().is_some_and(|seg| seg.segno == segno))
    }

    /// Whether `segno` lies ahead of a stream (other than `except`), in the
    /// window held for it.
    pub(super) fn in_stream_window(&self, segno: u32, except: Option<usize>) -> bool {
        self.streams.iter().enumerate().any(|(i, s)| {
            Some(i) != except
                && s.open
                    .as_ref()
                    .is_some_and(|seg| segno > seg.segno && seg.window.contains(&segno))
        })
    }

    /// Free segments for a new stream: the first run of `want` segments
    /// after `log`'s own (wrapping) that are free, no log's or stream's and
    /// in no stream's window; else the first run half as long, and so on
    /// down to one segment.
    fn find_window(&self, log: CursegType, want: u32) -> Option<Range<u32>> {
        let total = self.segs.len() as u32;
        let start = self.cursegs[log as usize].segno + 1;
        let usable = |segno: u32| {
            self.segs[segno as usize].is_free()
                && !self.is_current(segno)
                && !self.in_stream_window(segno, None)
        };
        let mut want = want.min(total);
        while want > 0 {
            let mut run = 0u32;
            // Runs do not wrap: a window is consecutive addresses.
            for k in 0..total {
                let segno = (start + k) % total;
                if segno == 0 {
                    run = 0;
                }
                run = if usable(segno) { run + 1 } else { 0 };
                if run == want {
                    return Some(segno + 1 - want..segno + 1);
                }
            }
            want /= 2;
        }
        None
    }

    /// Checks the streams' invariants (debug builds): each stream segment
    /// is no log's and no other stream's, and, LFS-style, has no valid
    /// block at or after its next block.
    pub(super) fn debug_check_streams(&self) {
        let segs: Vec<&StreamSegment> = self
            .streams
            .iter()
            .filter_map(|s| s.open.as_ref())
            .collect();
        for (k, seg) in segs.iter().enumerate() {
            assert!(
                self.cursegs.iter().all(|c| c.segno != seg.segno),
                "stream segment {} is a log's",
                seg.segno
            );
            assert!(
                segs[k + 1..].iter().all(|o| o.segno != seg.segno),
                "two streams share segment {}",
                seg.segno
            );
            let s = &self.segs[seg.segno as usize];
            assert!(
                (seg.next_blkoff as usize..BLOCKS_PER_SEG as usize)
                    .all(|b| !bitmap::test_bit_msb(&s.valid_map, b)),
                "stream segment {} has valid blocks past its next block",
                seg.segno
            );
        }
    }
}
