//! Read-ahead of an image file for sequential reads of file data, around
//! the host's page cache.
//!
//! Why: a cold sequential read through the mount cost the host twice. The
//! image's page cache was a second copy of the data the kernel already
//! caches for the mount, and filling it (allocating fresh pages, copying out
//! of them) took most of the daemon's CPU time. Its readahead also followed
//! the daemon's reads, which come in bursts (one per FUSE readahead window),
//! so the disk idled between them (docs/PERFORMANCE.md, "Cold reads").
//! Here each sequential stream of large data reads keeps a window of chunk
//! reads in flight ahead of it: O_DIRECT reads into buffers that are reused,
//! made by worker threads, so [`WORKERS`] requests are at the disk at once.
//! A chunk already whole in the page cache (`cachestat`) is copied from
//! there instead.
//!
//! A stream is a run of large data reads at image offsets near each other:
//! each within the window of the end of the furthest one so far (the FUSE
//! threads answer one file's readahead requests in any order). Chunks are
//! read for a stream only once it has read at least half of the span its
//! reads cover, from its second read on: lone large reads, and random ones
//! that happen to land near a stream, read nothing ahead. As the kernel's
//! readahead, a stream reads ahead twice the bytes it has read, up to the
//! window, and never past the end of its file (each read says how much of
//! the file follows it), so reading small files reads no other data. A file
//! in several extents may still read up to the window of other data past
//! the end of each extent.
//!
//! Coherence: every write to the image calls [`ReadAhead::written`] after
//! it returns. A chunk overlapping it is dropped, or, while still being
//! read, marked stale and dropped when its read returns. A chunk read that
//! starts after the write returned sees it: a chunk with dirty pages, or
//! mostly in the page cache, is read through the page cache, and an
//! O_DIRECT read writes back dirty cached pages of its range first. So a read served from a chunk never returns bytes older
//! than a write that returned before the read began.
//!
//! Invariants: chunks held (queued, being read or read) never outnumber
//! the pool's slots, so a worker always finds a free one (asserted); a
//! chunk index is held at most once, and queued only while held as being
//! read.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes of one chunk read, at image offsets that are multiples of it.
/// The FUSE mount's requests are at most this large.
pub const CHUNK: u64 = 1 << 20;

/// Threads reading chunks, so chunk reads at the disk at once. On the
/// test machine's virtual disk, 1 MiB O_DIRECT reads into huge pages 8
/// deep read 3,294-3,435 MiB/s (docs/PERFORMANCE.md, "Cold reads").
pub const WORKERS: usize = 8;

/// Largest window (bytes): the pool is twice the window, and stays mapped.
pub const MAX_WINDOW: u64 = 256 << 20;

/// Streams followed at once; a new one replaces the one used longest ago.
const MAX_STREAMS: usize = 8;

/// Nearby reads a stream must have had before chunks are read for it.
const HITS_BEFORE_READING: u32 = 2;

/// Huge page size the buffers are aligned to.
const HUGE_PAGE: usize = 2 << 20;

/// The chunk buffers: one mapping, asked to be backed by huge pages.
/// Why: a buffer of 4 KiB pages makes each 1 MiB read 256 segments, and
/// a virtio disk without indirect descriptors then holds about one such
/// request at a time (1.1-1.2 GiB/s 8 deep on the test machine); a buffer
/// inside one huge page is one segment (3.3-3.4 GiB/s). Where huge pages
/// are not to be had, the buffers still work, at the lower speed.
struct Pool {
    mapping: *mut libc::c_void,
    mapped_len: usize,
    base: *mut u8,
    slots: usize,
}

// SAFETY: the pool is plain memory; which thread may touch which slot is
// decided under `Shared::state` (a worker owns the slot of a chunk it
// reads, readers only read slots of read chunks under the lock).
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Pool {
    fn new(slots: usize) -> io::Result<Pool> {
        let len = slots * CHUNK as usize;
        let mapped_len = len + HUGE_PAGE;
        // SAFETY: a fresh anonymous private mapping; no memory of ours is passed.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mapping == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = (mapping as usize).next_multiple_of(HUGE_PAGE) as *mut u8;
        // SAFETY: the range lies inside the mapping. A refusal (no THP
        // support) leaves small pages, which are slower, not wrong.
        unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
        Ok(Pool {
            mapping,
            mapped_len,
            base,
            slots,
        })
    }

    /// Slot `slot` (below `slots`), for readers of its read chunk.
    fn slot(&self, slot: usize) -> &[u8] {
        assert!(slot < self.slots);
        // SAFETY: inside the mapping; no worker writes a slot of a read chunk.
        unsafe { std::slice::from_raw_parts(self.base.add(slot * CHUNK as usize), CHUNK as usize) }
    }

    /// Slot `slot`, for the worker that took it from the free slots.
    #[allow(clippy::mut_from_ref)]
    fn slot_mut(&self, slot: usize) -> &mut [u8] {
        assert!(slot < self.slots);
        // SAFETY: inside the mapping; exclusive by the protocol above.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(slot * CHUNK as usize), CHUNK as usize)
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.mapping, self.mapped_len) };
    }
}

enum Chunk {
    /// Queued or being read; `stale` once a write overlapped it.
    Reading { stale: bool, asked: u64 },
    /// Read (all of it: only whole chunks are asked for); `consumed` bytes
    /// of it handed out so far (the chunk is dropped once all were).
    /// `asked` orders chunks by age (the clock when it was asked for).
    Ready {
        slot: usize,
        consumed: u64,
        asked: u64,
    },
}

struct Stream {
    /// Start of its first read.
    start: u64,
    /// End of the furthest read of the stream.
    next: u64,
    /// Past this nothing is read ahead: the end of the file of its reads.
    limit: u64,
    /// Chunks below this index were asked for already.
    asked_below: u64,
    /// Bytes its reads asked for.
    read_bytes: u64,
    hits: u32,
    last_used: u64,
}

#[derive(Default)]
struct State {
    chunks: HashMap<u64, Chunk>,
    queue: VecDeque<u64>,
    /// Pool slots not holding a chunk.
    free: Vec<usize>,
    streams: Vec<Stream>,
    clock: u64,
    /// O_DIRECT was refused (the image's file system does not take it):
    /// nothing more is read ahead.
    disabled: bool,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Workers wait here for chunks to read.
    work: Condvar,
    /// Readers wait here for a chunk being read.
    done: Condvar,
    /// Whether `chunks` may be non-empty: writes skip the lock when not.
    has_chunks: AtomicBool,
    window: u64,
    /// One slot per chunk held at most (read, being read or queued).
    pool: Pool,
    size: u64,
}

/// The read-ahead of one image file; its workers stop when it is dropped.
pub struct ReadAhead {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts the workers over `file` (the image, `size` bytes long),
    /// reading up to `window` bytes ahead of each stream (1 MiB to
    /// [`MAX_WINDOW`]). Fails when the image cannot be opened with O_DIRECT
    /// (tmpfs before Linux 6.6, some FUSE file systems) or a thread cannot
    /// be started.
    pub fn start(
        path: &std::path::Path,
        file: &File,
        size: u64,
        window: u64,
    ) -> io::Result<ReadAhead> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let cached = file.try_clone()?;
        let window = window.clamp(CHUNK, MAX_WINDOW);
        // The window ahead, plus chunks read but not yet consumed behind it.
        let budget = 2 * window.div_ceil(CHUNK) as usize;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                // Popped from the end: the lowest slots are used first.
                free: (0..budget).rev().collect(),
                ..State::default()
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            has_chunks: AtomicBool::new(false),
            window,
            pool: Pool::new(budget)?,
            size,
        });
        let files = Arc::new((direct, cached));
        let mut ra = ReadAhead {
            shared,
            workers: Vec::new(),
        };
        for k in 0..WORKERS {
            let (shared, files) = (ra.shared.clone(), files.clone());
            ra.workers.push(
                std::thread::Builder::new()
                    .name(format!("f2fuse-read-ahead-{k}"))
                    .spawn(move || work(&shared, &files.0, &files.1))?,
            );
        }
        Ok(ra)
    }

    /// Reads `buf.len()` bytes at `offset`, after which the reader's file
    /// has `file_rest` more bytes: from chunks read ahead where there are
    /// some, the rest with `read_here`. Notes the read in its stream, and
    /// asks for the chunks ahead of it.
    pub fn read(
        &self,
        offset: u64,
        buf: &mut [u8],
        file_rest: u64,
        read_here: impl Fn(u64, &mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let shared = &*self.shared;
        let end = offset + buf.len() as u64;
        let mut state = shared.state.lock();
        if shared.follow(&mut state, offset, end, end.saturating_add(file_rest)) {
            shared.work.notify_all();
        }
        let mut pos = offset;
        while pos < end {
            let index = pos / CHUNK;
            let piece = pos..end.min((index + 1) * CHUNK);
            let dst = &mut buf[(piece.start - offset) as usize..(piece.end - offset) as usize];
            loop {
                match state.chunks.get_mut(&index) {
                    Some(Chunk::Reading { .. }) => shared.done.wait(&mut state),
                    Some(Chunk::Ready { slot, consumed, .. }) => {
                        let from = (piece.start - index * CHUNK) as usize;
                        dst.copy_from_slice(&shared.pool.slot(*slot)[from..from + dst.len()]);
                        *consumed += dst.len() as u64;
                        if *consumed >= CHUNK {
                            shared.release(&mut state, index);
                        }
                        break;
                    }
                    _ => {
                        drop(state);
                        read_here(piece.start, dst)?;
                        state = shared.state.lock();
                        break;
                    }
                }
            }
            pos = piece.end;
        }
        Ok(())
    }

    /// Forgets what was read ahead of `range`, which was just written.
    pub fn written(&self, range: Range<u64>) {
        let shared = &*self.shared;
        if !shared.has_chunks.load(Ordering::SeqCst) || range.is_empty() {
            return;
        }
        let mut state = shared.state.lock();
        for index in range.start / CHUNK..range.end.div_ceil(CHUNK) {
            match state.chunks.get_mut(&index) {
                Some(Chunk::Reading { stale, .. }) => *stale = true,
                Some(Chunk::Ready { .. }) => shared.release(&mut state, index),
                None => {}
            }
        }
    }
}

impl Shared {
    /// Notes a read of `offset..end` in its stream (or a new one), whose
    /// file ends at image offset `limit` at the latest, and asks for the
    /// chunks ahead of the stream. Returns whether any were asked for.
    fn follow(&self, state: &mut State, offset: u64, end: u64, limit: u64) -> bool {
        state.clock += 1;
        let clock = state.clock;
        let window = self.window;
        let near = |s: &Stream| offset + window >= s.next && offset <= s.next + window;
        let Some(i) = state.streams.iter().position(near) else {
            let stream = Stream {
                start: offset,
                next: end,
                limit,
                asked_below: 0,
                read_bytes: end - offset,
                hits: 1,
                last_used: clock,
            };
            if state.streams.len() < MAX_STREAMS {
                state.streams.push(stream);
            } else if let Some(oldest) = state.streams.iter_mut().min_by_key(|s| s.last_used) {
                *oldest = stream;
            }
            return false;
        };
        let stream = &mut state.streams[i];
        stream.start = stream.start.min(offset);
        stream.next = stream.next.max(end);
        stream.limit = stream.limit.max(limit);
        stream.read_bytes += end - offset;
        stream.hits += 1;
        stream.last_used = clock;
        let covered = 2 * stream.read_bytes >= stream.next - stream.start;
        if stream.hits < HITS_BEFORE_READING || !covered || state.disabled {
            return false;
        }
        let ahead = window.min(2 * stream.read_bytes);
        let first = stream.asked_below.max(stream.next / CHUNK);
        // Whole chunks only: a chunk is read to its end.
        let limit = stream.limit.div_ceil(CHUNK).saturating_mul(CHUNK);
        let last = (stream.next + ahead).min(limit).min(self.size) / CHUNK;
        let mut asked = false;
        let mut index = first;
        while index < last {
            if !state.chunks.contains_key(&index) {
                if state.chunks.len() >= self.pool.slots && !self.evict_one(state) {
                    break;
                }
                let reading = Chunk::Reading {
                    stale: false,
                    asked: clock,
                };
                state.chunks.insert(index, reading);
                state.queue.push_back(index);
                asked = true;
            }
            index += 1;
        }
        state.streams[i].asked_below = index;
        debug_assert!(state.chunks.len() <= self.pool.slots);
        if asked {
            self.has_chunks.store(true, Ordering::SeqCst);
        }
        asked
    }

    /// Drops the read chunk asked for longest ago among those no stream
    /// will read (behind or far from every stream: passed by, or of a
    /// stream that ended), to make room. False when there is none: a chunk
    /// ahead of a stream is not dropped for another's.
    fn evict_one(&self, state: &mut State) -> bool {
        let window = self.window;
        let wanted = |index: u64| {
            let at = index * CHUNK;
            state
                .streams
                .iter()
                .any(|s| at + CHUNK + window > s.next && at < s.next + window)
        };
        let victim = state
            .chunks
            .iter()
            .filter_map(|(&index, chunk)| match chunk {
                Chunk::Ready { asked, .. } if !wanted(index) => Some((*asked, index)),
                _ => None,
            })
            .min()
            .map(|(_, index)| index);
        match victim {
            Some(index) => {
                self.release(state, index);
                true
            }
            None => false,
        }
    }

    /// Removes chunk `index`; the slot of a read chunk goes back to the
    /// free ones (a chunk being read has its slot with its worker).
    fn release(&self, state: &mut State, index: u64) {
        if let Some(Chunk::Ready { slot, .. }) = state.chunks.remove(&index) {
            state.free.push(slot);
        }
        if state.chunks.is_empty() {
            self.has_chunks.store(false, Ordering::SeqCst);
        }
    }
}

fn work(shared: &Shared, direct: &File, cached: &File) {
    let mut state = shared.state.lock();
    loop {
        if state.stop {
            return;
        }
        let Some(index) = state.queue.pop_front() else {
            shared.work.wait(&mut state);
            continue;
        };
        if matches!(
            state.chunks.get(&index),
            Some(Chunk::Reading { stale: true, .. })
        ) {
            // Written over before its read began: not worth reading.
            shared.release(&mut state, index);
            shared.done.notify_all();
            continue;
        }
        // A chunk is queued only with a slot to spare (`follow`).
        let slot = state.free.pop().expect("a free slot per queued chunk");
        drop(state);
        let read = read_chunk(direct, cached, index * CHUNK, shared.pool.slot_mut(slot));
        state = shared.state.lock();
        if matches!(&read, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) {
            state.disabled = true;
        }
        match state.chunks.get(&index) {
            Some(&Chunk::Reading {
                stale: false,
                asked,
            }) if read.is_ok() => {
                state.chunks.insert(
                    index,
                    Chunk::Ready {
                        slot,
                        consumed: 0,
                        asked,
                    },
                );
            }
            // Stale, or failed: a reader reads the range itself (and sees the error).
            _ => {
                shared.release(&mut state, index);
                state.free.push(slot);
            }
        }
        shared.done.notify_all();
    }
}

/// Reads one chunk: through the page cache when it holds dirty pages of
/// it (an O_DIRECT read would first wait for their write-back) or most of
/// it, else around it.
fn read_chunk(direct: &File, cached: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: sysconf reads no memory of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let pages = (buf.len() as u64).div_ceil(page);
    let cached_enough = cachestat(cached, offset, buf.len() as u64)
        .is_some_and(|stat| stat.nr_dirty > 0 || 2 * stat.nr_cache >= pages);
    if cached_enough {
        cached.read_exact_at(buf, offset)
    } else {
        direct.read_exact_at(buf, offset)
    }
}

/// The kernel's `struct cachestat`: pages of a range in the page cache.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Cachestat {
    pub nr_cache: u64,
    pub nr_dirty: u64,
    pub nr_writeback: u64,
    pub nr_evicted: u64,
    pub nr_recently_evicted: u64,
}

/// `cachestat(2)` (Linux 6.5) of `len` bytes at `offset` of `file`; None
/// where the kernel lacks it.
pub(crate) fn cachestat(file: &File, offset: u64, len: u64) -> Option<Cachestat> {
    /// `cachestat`'s number in the unified system call table (x86_64,
    /// aarch64, riscv64 and most others; libc lacks it for x86_64-gnu).
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct CachestatRange {
        off: u64,
        len: u64,
    }
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: both structs are laid out as the kernel's and outlive the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(stat)
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.work.notify_all();
        for worker in self.workers.drain(..) {
            // Workers only read into their buffers; they cannot panic.
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize};

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: &[u8]) -> TempFile {
            let path = std::env::temp_dir()
                .join(format!("f2fuse-read-ahead-{}-{name}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            TempFile(path)
        }

        fn open(&self) -> File {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.0)
                .unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    /// A file of `len` patterned bytes, open, with a read-ahead of `window`.
    fn patterned(name: &str, len: usize, window: u64) -> (Vec<u8>, TempFile, File, ReadAhead) {
        let data = pattern(len);
        let tmp = TempFile::new(name, &data);
        let file = tmp.open();
        let ra = ReadAhead::start(&tmp.0, &file, len as u64, window).unwrap();
        (data, tmp, file, ra)
    }

    /// Reads `len` bytes at `offset` through `ra`; returns them and how
    /// many were read outside it.
    fn read(ra: &ReadAhead, file: &File, offset: u64, len: usize) -> (Vec<u8>, usize) {
        let here = AtomicUsize::new(0);
        let mut buf = vec![0; len];
        ra.read(offset, &mut buf, u64::MAX, |at, piece| {
            here.fetch_add(piece.len(), Ordering::Relaxed);
            file.read_exact_at(piece, at)
        })
        .unwrap();
        (buf, here.into_inner())
    }

    #[test]
    fn a_sequential_reader_is_served_from_chunks_read_ahead() {
        let (data, _tmp, file, ra) = patterned("sequential", 48 << 20, 8 << 20);
        // Not chunk-aligned, as a file's blocks in an image are not.
        let mut offset = 3 * 4096u64;
        let mut outside = 0;
        while offset + CHUNK <= data.len() as u64 {
            let (bytes, here) = read(&ra, &file, offset, CHUNK as usize);
            assert!(
                bytes == data[offset as usize..(offset + CHUNK) as usize],
                "at {offset}"
            );
            outside += here;
            offset += CHUNK;
        }
        // The stream's first reads, and the chunk they end in, go around it.
        assert!(
            outside <= 3 * CHUNK as usize,
            "{outside} bytes read outside"
        );
    }

    #[test]
    fn lone_large_reads_read_nothing_ahead() {
        let (data, _tmp, file, ra) = patterned("lone", 64 << 20, 4 << 20);
        for offset in [40u64 << 20, 0, 20 << 20, 56 << 20, 10 << 20] {
            let (bytes, here) = read(&ra, &file, offset, 1 << 20);
            assert_eq!((bytes.len(), here), (1 << 20, 1 << 20));
            assert!(bytes == data[offset as usize..offset as usize + (1 << 20)]);
        }
        assert!(ra.shared.state.lock().chunks.is_empty());
    }

    #[test]
    fn random_reads_near_each_other_read_nothing_ahead() {
        let (data, _tmp, file, ra) = patterned("random", 48 << 20, 16 << 20);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let offset = (seed % ((48 << 20) / 65536 - 1)) * 65536;
            let (bytes, here) = read(&ra, &file, offset, 65536);
            assert_eq!(
                here, 65536,
                "a random read at {offset} was served from a chunk"
            );
            assert!(bytes == data[offset as usize..offset as usize + 65536]);
        }
        let state = ra.shared.state.lock();
        assert!(state.chunks.is_empty() && state.queue.is_empty());
    }

    #[test]
    fn nothing_is_read_ahead_past_the_end_of_the_file() {
        let (data, _tmp, file, ra) = patterned("file-end", 32 << 20, 16 << 20);
        // A 4 MiB file at image offset 0, read in 1 MiB pieces.
        let file_end = 4u64 << 20;
        for offset in (0..file_end).step_by(CHUNK as usize) {
            let mut buf = vec![0u8; CHUNK as usize];
            ra.read(offset, &mut buf, file_end - offset - CHUNK, |at, piece| {
                file.read_exact_at(piece, at)
            })
            .unwrap();
            assert!(buf[..] == data[offset as usize..(offset + CHUNK) as usize]);
        }
        let state = ra.shared.state.lock();
        assert_eq!(state.streams.len(), 1);
        assert!(
            state.streams[0].asked_below <= file_end / CHUNK,
            "asked past the file"
        );
        assert!(state.chunks.keys().all(|&index| index < file_end / CHUNK));
    }

    #[test]
    fn a_write_drops_what_was_read_ahead_of_it() {
        let (data, _tmp, file, ra) = patterned("written", 32 << 20, 8 << 20);
        read(&ra, &file, 0, CHUNK as usize);
        read(&ra, &file, CHUNK, CHUNK as usize);
        // Wait until chunk 4 is read ahead, then write over part of it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut state = ra.shared.state.lock();
        while !matches!(state.chunks.get(&4), Some(Chunk::Ready { .. })) {
            assert!(
                std::time::Instant::now() < deadline,
                "chunk 4 was not read ahead"
            );
            ra.shared
                .done
                .wait_for(&mut state, std::time::Duration::from_millis(100));
        }
        drop(state);
        let new = vec![0xa5u8; 8192];
        let at = 4 * CHUNK + 12288;
        file.write_all_at(&new, at).unwrap();
        ra.written(at..at + new.len() as u64);
        for index in 2..6 {
            let (bytes, _) = read(&ra, &file, index * CHUNK, CHUNK as usize);
            let mut expected =
                data[(index * CHUNK) as usize..((index + 1) * CHUNK) as usize].to_vec();
            if index == 4 {
                expected[12288..12288 + 8192].copy_from_slice(&new);
            }
            assert!(bytes == expected, "chunk {index}");
        }
    }

    /// Writers stamp 4 KiB blocks with rising versions (each block has one
    /// writer), sequential readers check every block they read holds at
    /// least the version its writer had finished when the read began.
    #[test]
    fn reads_never_return_bytes_older_than_a_finished_write() {
        const BLOCKS: usize = 4096; // 16 MiB
        const WRITERS: usize = 2;
        let stamp = |version: u64| -> Vec<u8> { version.to_le_bytes().repeat(512) };
        let mut initial = Vec::new();
        for _ in 0..BLOCKS {
            initial.extend(stamp(0));
        }
        let tmp = TempFile::new("stamps", &initial);
        let file = tmp.open();
        let ra = ReadAhead::start(&tmp.0, &file, initial.len() as u64, 4 << 20).unwrap();
        let finished: Vec<AtomicU64> = (0..BLOCKS).map(|_| AtomicU64::new(0)).collect();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for w in 0..WRITERS {
                let (file, ra, finished, stop) = (&file, &ra, &finished, &stop);
                scope.spawn(move || {
                    let mut version = 0u64;
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ w as u64;
                    while !stop.load(Ordering::Relaxed) {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let block = ((seed >> 33) as usize % (BLOCKS / WRITERS)) * WRITERS + w;
                        version += 1;
                        let at = (block * 4096) as u64;
                        file.write_all_at(&stamp(version), at).unwrap();
                        ra.written(at..at + 4096);
                        finished[block].store(version, Ordering::SeqCst);
                    }
                });
            }
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (file, ra, finished) = (&file, &ra, &finished);
                    scope.spawn(move || {
                        let mut buf = vec![0u8; 1 << 20];
                        for pass in 0..24u64 {
                            let start = (r * 5 + pass) * 4096;
                            let mut offset = start;
                            while offset + buf.len() as u64 <= (BLOCKS * 4096) as u64 {
                                let first = (offset / 4096) as usize;
                                let before: Vec<u64> = finished[first..first + 256]
                                    .iter()
                                    .map(|v| v.load(Ordering::SeqCst))
                                    .collect();
                                ra.read(offset, &mut buf, u64::MAX, |at, piece| {
                                    file.read_exact_at(piece, at)
                                })
                                .unwrap();
                                for (k, block) in buf.chunks(4096).enumerate() {
                                    for word in block.chunks(8) {
                                        let seen = u64::from_le_bytes(word.try_into().unwrap());
                                        assert!(
                                            seen >= before[k],
                                            "block {}: version {seen} read after {} was written",
                                            first + k,
                                            before[k]
                                        );
                                    }
                                }
                                offset += buf.len() as u64;
                            }
                        }
                    })
                })
                .collect();
            let outcomes: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
            // Before any failure is raised: the writers run until told to stop.
            stop.store(true, Ordering::Relaxed);
            for outcome in outcomes {
                if let Err(panic) = outcome {
                    std::panic::resume_unwind(panic);
                }
            }
        });
    }
}
