//! Block devices: an image file or block device node (positioned I/O,
//! optionally O_DIRECT), and an in-memory device for tests and simulations.
//!
//! With [`FileDeviceOptions::write_behind`] (the FUSE mount's default),
//! large writes of file data start their write-back at once, so the next
//! fsync finds them on their way to the disk instead of writing them all
//! then. Durability is unchanged: only a flush makes data durable.
//!
//! With [`FileDeviceOptions::read_ahead`] (the mount's default), large
//! reads of file data that follow each other are served from chunks read
//! ahead around the host's page cache (`read_ahead`).

use crate::dentry_cache::{DentryBlock, DentryCache};
use crate::error::{Error, Result};
use crate::invariant::Health;
use crate::read_ahead::ReadAhead;
use crate::stats::ShardedCounters;
use crate::write_behind::WriteBehind;
use f2fuse_layout::F2FS_BLKSIZE;
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Byte-addressed storage the file system lives on. Implementations are
/// shared between threads; writes are not durable until `flush` returns.
pub trait BlockDevice: Send + Sync {
    /// Reads `buf.len()` bytes at byte `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at byte `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// A hint that `len` bytes from `offset` will be read soon (read ahead
    /// into a cache, if the device has one). Nothing by default.
    fn will_need(&self, _offset: u64, _len: u64) {}
    /// Writes a large run of file data (`LARGE_DATA_WRITE` bytes or
    /// more). A device with a write-back cache may start writing it to
    /// its store at once; as with `write_at`, only `flush` makes it durable.
    fn write_data_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)
    }
    /// Reads a large run of file data (`LARGE_DATA_READ` bytes or more),
    /// often the next of a sequential reader, which may go on for at most
    /// `file_rest` more bytes. A device may serve it from data it read
    /// ahead.
    fn read_data_at(&self, offset: u64, buf: &mut [u8], _file_rest: u64) -> io::Result<()> {
        self.read_at(offset, buf)
    }
}

/// File data writes of at least this many bytes go to
/// [`BlockDevice::write_data_at`]. Smaller ones are left to gather in the
/// page cache: a 4 KiB rewrite started on its own would reach the disk
/// alone, and again at the next rewrite.
pub const LARGE_DATA_WRITE: usize = 64 * 1024;

/// File data reads ([`Device::read_file_data`]) of at least this many
/// bytes go to [`BlockDevice::read_data_at`]: the FUSE mount's readahead
/// requests, and large reads of library callers. Smaller ones are left to
/// the page cache.
pub const LARGE_DATA_READ: usize = 64 * 1024;

/// One 4 KiB block.
pub type Block = Box<[u8]>;

pub fn zero_block() -> Block {
    vec![0u8; F2FS_BLKSIZE].into_boxed_slice()
}

/// What a device request carries, named by the caller that knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// Contents of regular files and symlinks.
    UserData,
    /// Dentry blocks of directories.
    DirData,
    /// Node blocks: inodes, direct and indirect nodes, xattr nodes.
    Node,
    /// Superblock, checkpoint packs, SIT, NAT and SSA blocks.
    Meta,
    /// Data blocks read and rewritten by cleaning.
    GcData,
    /// File data rewritten at its own address (in-place updates): no node
    /// points anywhere new because of it.
    InPlaceData,
}

impl IoKind {
    pub const ALL: [IoKind; 6] = [
        IoKind::UserData,
        IoKind::DirData,
        IoKind::Node,
        IoKind::Meta,
        IoKind::GcData,
        IoKind::InPlaceData,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IoKind::UserData => "user data",
            IoKind::DirData => "dir data",
            IoKind::Node => "node",
            IoKind::Meta => "meta",
            IoKind::GcData => "gc data",
            IoKind::InPlaceData => "data in place",
        }
    }
}

const KINDS: usize = IoKind::ALL.len();
/// Counter layout: bytes read per kind, bytes written per kind, flushes.
const FLUSHES: usize = 2 * KINDS;

/// Bytes moved by a device, by kind (indexed like `IoKind::ALL`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Blocks read, by kind.
    pub read: [u64; KINDS],
    /// Blocks written, by kind.
    pub written: [u64; KINDS],
    /// Cache flushes.
    pub flushes: u64,
}

impl IoStats {
    /// Blocks of `kind` read.
    pub fn read_of(&self, kind: IoKind) -> u64 {
        self.read[kind as usize]
    }

    /// Blocks of `kind` written.
    pub fn written_of(&self, kind: IoKind) -> u64 {
        self.written[kind as usize]
    }

    /// Blocks read, all kinds.
    pub fn total_read(&self) -> u64 {
        self.read.iter().sum()
    }

    /// Blocks written, all kinds.
    pub fn total_written(&self) -> u64 {
        self.written.iter().sum()
    }

    /// Bytes of data written at new addresses (file and directory data,
    /// data moved by cleaning): blocks a node written later may point at,
    /// unlike data rewritten in place, nodes and metadata.
    pub fn data_written_out_of_place(&self) -> u64 {
        [IoKind::UserData, IoKind::DirData, IoKind::GcData]
            .iter()
            .map(|&kind| self.written_of(kind))
            .sum()
    }
}

/// Block-granular access with error context, shared by every subsystem.
/// Every request names its [`IoKind`] and is counted (sharded: the data
/// path of many threads must not share a counter).
/// Single dentry blocks are read through a cache that every write keeps
/// current (`dentry_cache`); only device reads are counted.
pub struct Device {
    inner: Box<dyn BlockDevice>,
    counters: ShardedCounters<{ 2 * KINDS + 1 }>,
    dentries: DentryCache,
    /// Whether an invariant broke: then every write is refused.
    health: Health,
}

impl Device {
    pub fn new(inner: Box<dyn BlockDevice>) -> Device {
        Device {
            inner,
            counters: ShardedCounters::default(),
            dentries: DentryCache::default(),
            health: Health::default(),
        }
    }

    /// The file system's record of broken invariants (see `invariant`).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// What this device has read, written and flushed since it was opened.
    pub fn io_stats(&self) -> IoStats {
        let totals = self.counters.totals();
        IoStats {
            read: std::array::from_fn(|k| totals[k]),
            written: std::array::from_fn(|k| totals[KINDS + k]),
            flushes: totals[FLUSHES],
        }
    }

    pub fn size(&self) -> u64 {
        self.inner.size()
    }

    pub fn block_count(&self) -> u64 {
        self.inner.size() / F2FS_BLKSIZE as u64
    }

    pub fn read_block(&self, kind: IoKind, blkaddr: u64) -> Result<Block> {
        let mut block = zero_block();
        self.read_blocks(kind, blkaddr, &mut block)?;
        Ok(block)
    }

    /// Reads consecutive blocks into `buf` (a multiple of 4 KiB).
    pub fn read_blocks(&self, kind: IoKind, blkaddr: u64, buf: &mut [u8]) -> Result<()> {
        if kind == IoKind::DirData && buf.len() == F2FS_BLKSIZE {
            buf.copy_from_slice(&self.dentry_block(blkaddr)?);
            return Ok(());
        }
        self.read_from_device(kind, blkaddr, buf, None)
    }

    /// Reads a run of a file's blocks for a reader, after which the file
    /// has `file_rest` more bytes: large runs of file contents may be
    /// served from data read ahead ([`BlockDevice::read_data_at`]).
    pub fn read_file_data(
        &self,
        kind: IoKind,
        blkaddr: u64,
        buf: &mut [u8],
        file_rest: u64,
    ) -> Result<()> {
        if kind != IoKind::UserData || buf.len() < LARGE_DATA_READ {
            return self.read_blocks(kind, blkaddr, buf);
        }
        self.read_from_device(kind, blkaddr, buf, Some(file_rest))
    }

    /// The dentry block at `blkaddr`, from the cache when it is there
    /// (shared, not copied).
    pub fn dentry_block(&self, blkaddr: u64) -> Result<DentryBlock> {
        match self.dentries.get(blkaddr) {
            Ok(block) => Ok(block),
            Err(miss) => {
                let mut block = zero_block();
                let read = self.read_from_device(IoKind::DirData, blkaddr, &mut block, None);
                let block = DentryBlock::from(block);
                self.dentries.fill(miss, read.is_ok().then_some(&block));
                read.map(|()| block)
            }
        }
    }

    /// Reads from the device itself; with `file_rest`, a large run of file
    /// data ([`BlockDevice::read_data_at`]).
    fn read_from_device(
        &self,
        kind: IoKind,
        blkaddr: u64,
        buf: &mut [u8],
        file_rest: Option<u64>,
    ) -> Result<()> {
        debug_assert!(buf.len().is_multiple_of(F2FS_BLKSIZE));
        let end = blkaddr + (buf.len() / F2FS_BLKSIZE) as u64;
        if end > self.block_count() {
            return Err(Error::io(
                format!("reading blkaddr {blkaddr}"),
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("beyond the device end ({} blocks)", self.block_count()),
                ),
            ));
        }
        let offset = blkaddr * F2FS_BLKSIZE as u64;
        match file_rest {
            Some(rest) => self.inner.read_data_at(offset, buf, rest),
            None => self.inner.read_at(offset, buf),
        }
        .map_err(|e| Error::io(format!("reading blkaddr {blkaddr}"), e))?;
        self.counters.add(kind as usize, buf.len() as u64);
        Ok(())
    }

    pub fn write_blocks(&self, kind: IoKind, blkaddr: u64, buf: &[u8]) -> Result<()> {
        self.health.refuse_writes()?;
        debug_assert!(buf.len().is_multiple_of(F2FS_BLKSIZE));
        let offset = blkaddr * F2FS_BLKSIZE as u64;
        // File data the user wrote, not data the cleaner moves (GcData):
        // only the former is followed by the user's fsync.
        let large_data =
            matches!(kind, IoKind::UserData | IoKind::InPlaceData) && buf.len() >= LARGE_DATA_WRITE;
        let written = if large_data {
            self.inner.write_data_at(offset, buf)
        } else {
            self.inner.write_at(offset, buf)
        };
        // After the write (failed or not): a read that starts later sees it.
        self.dentries
            .written(blkaddr, (buf.len() / F2FS_BLKSIZE) as u64);
        written.map_err(|e| Error::io(format!("writing blkaddr {blkaddr}"), e))?;
        self.counters.add(KINDS + kind as usize, buf.len() as u64);
        Ok(())
    }

    /// Starts reading the given runs of blocks (start, count) into the host's
    /// page cache, without waiting: they are about to be read one by one.
    pub fn will_need(&self, runs: impl IntoIterator<Item = (u64, u64)>) {
        let bs = F2FS_BLKSIZE as u64;
        for (start, count) in runs {
            self.inner.will_need(start * bs, count * bs);
        }
    }

    pub fn flush(&self) -> Result<()> {
        self.inner
            .flush()
            .map_err(|e| Error::io("flushing the device", e))?;
        self.counters.add(FLUSHES, 1);
        Ok(())
    }
}

/// An image file or a block device node.
pub struct FileDevice {
    file: File,
    size: u64,
    direct: bool,
    write_behind: Option<WriteBehind>,
    read_ahead: Option<ReadAhead>,
}

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FileDeviceOptions {
    /// Open for writing.
    pub writable: bool,
    /// Bypass the host page cache (O_DIRECT); I/O goes through aligned bounce buffers.
    pub direct: bool,
    /// Start the write-back of large file data writes at once
    /// (`sync_file_range`), so an fsync finds them written or on their way.
    pub write_behind: bool,
    /// Bytes to read ahead of each sequential stream of large file data
    /// reads, around the page cache (`read_ahead` module); 0 reads nothing
    /// ahead. Ignored with `direct`, and where the image refuses O_DIRECT.
    pub read_ahead: u64,
}

impl FileDevice {
    /// Opens the image file or block device at `path`.
    pub fn open(path: &Path, opts: FileDeviceOptions) -> Result<FileDevice> {
        let mut oo = OpenOptions::new();
        oo.read(true).write(opts.writable);
        if opts.direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo
            .open(path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        // Seeking to the end gives the size of regular files and block devices alike.
        let size = {
            use std::io::Seek;
            let mut handle = &file;
            handle
                .seek(io::SeekFrom::End(0))
                .map_err(|e| Error::io(format!("sizing {}", path.display()), e))?
        };
        // O_DIRECT writes are written when they return. Without its thread
        // (none could be started) writes just wait for the flush.
        let write_behind = (opts.write_behind && opts.writable && !opts.direct)
            .then(|| {
                WriteBehind::start(&file)
                    .inspect_err(|e| {
                        tracing::warn!("{}: no write-behind thread: {e}", path.display())
                    })
                    .ok()
            })
            .flatten();
        // Where the image refuses O_DIRECT, reads go through the page cache as before.
        let read_ahead = (opts.read_ahead > 0 && !opts.direct)
            .then(|| {
                ReadAhead::start(path, &file, size, opts.read_ahead)
                    .inspect_err(|e| tracing::warn!("{}: no read-ahead: {e}", path.display()))
                    .ok()
            })
            .flatten();
        Ok(FileDevice {
            file,
            size,
            direct: opts.direct,
            write_behind,
            read_ahead,
        })
    }

    fn with_aligned<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let layout = std::alloc::Layout::from_size_align(len.max(F2FS_BLKSIZE), F2FS_BLKSIZE)
            .expect("valid layout");
        // SAFETY: the layout has non-zero size; the memory is zero-initialised,
        // used only inside `f` and freed with the same layout.
        unsafe {
            let ptr = std::alloc::alloc_zeroed(layout);
            if ptr.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            let result = f(std::slice::from_raw_parts_mut(ptr, len));
            std::alloc::dealloc(ptr, layout);
            result
        }
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.direct && !(buf.as_ptr() as usize).is_multiple_of(F2FS_BLKSIZE) {
            return Self::with_aligned(buf.len(), |bounce| {
                self.file.read_exact_at(bounce, offset)?;
                buf.copy_from_slice(bounce);
                Ok(())
            });
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let written = if self.direct && !(buf.as_ptr() as usize).is_multiple_of(F2FS_BLKSIZE) {
            Self::with_aligned(buf.len(), |bounce| {
                bounce.copy_from_slice(buf);
                self.file.write_all_at(bounce, offset)
            })
        } else {
            self.file.write_all_at(buf, offset)
        };
        // After the write, failed or not (see the read_ahead module's coherence).
        if let Some(read_ahead) = &self.read_ahead {
            read_ahead.written(offset..offset + buf.len() as u64);
        }
        written
    }

    fn read_data_at(&self, offset: u64, buf: &mut [u8], file_rest: u64) -> io::Result<()> {
        match &self.read_ahead {
            Some(read_ahead) => {
                read_ahead.read(offset, buf, file_rest, |at, piece| self.read_at(at, piece))
            }
            None => self.read_at(offset, buf),
        }
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn will_need(&self, offset: u64, len: u64) {
        if !self.direct {
            // SAFETY: a valid descriptor; the hint reads nothing of ours.
            unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    offset as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
        }
    }

    fn write_data_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)?;
        if let Some(write_behind) = &self.write_behind {
            write_behind.push(offset..offset + buf.len() as u64);
        }
        Ok(())
    }
}

/// A device held in memory.
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zeroed device of `size` bytes.
    pub fn new(size: u64) -> MemDevice {
        MemDevice {
            bytes: RwLock::new(vec![0; size as usize]),
        }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice {
            bytes: RwLock::new(bytes),
        }
    }

    /// A copy of the device's bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

fn range_check(len: usize, offset: u64, want: usize) -> io::Result<std::ops::Range<usize>> {
    let start =
        usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let end = start
        .checked_add(want)
        .filter(|&end| end <= len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "beyond the device end"))?;
    Ok(start..end)
}

impl BlockDevice for MemDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let bytes = self.bytes.read();
        let range = range_check(bytes.len(), offset, buf.len())?;
        buf.copy_from_slice(&bytes[range]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut bytes = self.bytes.write();
        let range = range_check(bytes.len(), offset, buf.len())?;
        bytes[range].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.bytes.read().len() as u64
    }
}

/// Writes kept in memory over a device that is only read: a read-only
/// open replays an fsync chain into it without writing the image.
pub struct OverlayDevice {
    base: std::sync::Arc<Device>,
    written: RwLock<std::collections::HashMap<u64, Block>>,
}

impl OverlayDevice {
    pub fn new(base: std::sync::Arc<Device>) -> OverlayDevice {
        OverlayDevice {
            base,
            written: RwLock::new(Default::default()),
        }
    }
}

/// The blocks a block-aligned byte range covers.
fn aligned_blocks(offset: u64, len: usize) -> io::Result<std::ops::Range<u64>> {
    let bs = F2FS_BLKSIZE as u64;
    if !offset.is_multiple_of(bs) || !(len as u64).is_multiple_of(bs) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "overlay I/O must be block-aligned",
        ));
    }
    Ok(offset / bs..(offset + len as u64) / bs)
}

impl BlockDevice for OverlayDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let written = self.written.read();
        for (blkaddr, out) in aligned_blocks(offset, buf.len())?.zip(buf.chunks_mut(F2FS_BLKSIZE)) {
            match written.get(&blkaddr) {
                Some(block) => out.copy_from_slice(block),
                // Counted by kind in the Device over this overlay; the base
                // Device's own counters go unread (its Fs is gone).
                None => self
                    .base
                    .read_blocks(IoKind::Meta, blkaddr, out)
                    .map_err(|e| io::Error::other(e.to_string()))?,
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let blocks = aligned_blocks(offset, buf.len())?;
        if blocks.end > self.base.block_count() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "beyond the device end",
            ));
        }
        let mut written = self.written.write();
        for (blkaddr, data) in blocks.zip(buf.chunks(F2FS_BLKSIZE)) {
            written.insert(blkaddr, data.into());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.size()
    }
}

/// One recorded device event.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
pub enum SimEvent {
    Write { offset: u64, data: Vec<u8> },
    Flush,
}

#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
struct SimState {
    /// What the device holds (every write applied, flushed or not).
    bytes: Vec<u8>,
    /// Contents before the first recorded event.
    initial: Vec<u8>,
    events: Vec<SimEvent>,
    writes: u64,
    flushes: u64,
    fail_write: Option<u64>,
    fail_flush: Option<u64>,
}

/// A device for crash tests: records every write and flush so any power-cut
/// image can be rebuilt afterwards (unflushed writes lost or reordered), and
/// can fail a chosen write or flush with EIO.
#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
pub struct SimDevice {
    state: parking_lot::Mutex<SimState>,
}

#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
impl SimDevice {
    pub fn new(initial: Vec<u8>) -> SimDevice {
        SimDevice {
            state: parking_lot::Mutex::new(SimState {
                bytes: initial.clone(),
                initial,
                events: Vec::new(),
                writes: 0,
                flushes: 0,
                fail_write: None,
                fail_flush: None,
            }),
        }
    }

    /// Makes the `n`-th write from now (0-based, counting all writes so far) fail with EIO.
    pub fn fail_write_at(&self, n: u64) {
        self.state.lock().fail_write = Some(n);
    }

    pub fn fail_flush_at(&self, n: u64) {
        self.state.lock().fail_flush = Some(n);
    }

    pub fn events(&self) -> Vec<SimEvent> {
        self.state.lock().events.clone()
    }

    /// Events recorded from index `from` on.
    pub fn events_since(&self, from: usize) -> Vec<SimEvent> {
        self.state.lock().events[from..].to_vec()
    }

    /// Index of the last recorded write event.
    pub fn last_write_index(&self) -> Option<usize> {
        self.state
            .lock()
            .events
            .iter()
            .rposition(|e| matches!(e, SimEvent::Write { .. }))
    }

    pub fn event_count(&self) -> usize {
        self.state.lock().events.len()
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.state.lock().bytes.clone()
    }

    /// Builds power-cut images from what was recorded so far.
    pub fn crash_images(&self) -> CrashImages {
        let state = self.state.lock();
        CrashImages {
            events: state.events.clone(),
            durable: state.initial.clone(),
            applied: 0,
        }
    }
}

impl BlockDevice for SimDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let state = self.state.lock();
        let range = range_check(state.bytes.len(), offset, buf.len())?;
        buf.copy_from_slice(&state.bytes[range]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        let n = state.writes;
        state.writes += 1;
        if state.fail_write == Some(n) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let range = range_check(state.bytes.len(), offset, buf.len())?;
        state.bytes[range].copy_from_slice(buf);
        // Record block by block: the unit the crash model treats as atomic.
        for (i, block) in buf.chunks(F2FS_BLKSIZE).enumerate() {
            state.events.push(SimEvent::Write {
                offset: offset + (i * F2FS_BLKSIZE) as u64,
                data: block.to_vec(),
            });
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        let n = state.flushes;
        state.flushes += 1;
        if state.fail_flush == Some(n) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        state.events.push(SimEvent::Flush);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.state.lock().bytes.len() as u64
    }
}

/// Power-cut images of a recorded run, for cut points in increasing order.
#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
pub struct CrashImages {
    pub events: Vec<SimEvent>,
    /// The device with every write before `applied` that a flush made durable.
    durable: Vec<u8>,
    applied: usize,
}

#[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
impl CrashImages {
    /// Index of the last flush before event `cut`.
    pub fn last_flush_before(&self, cut: usize) -> Option<usize> {
        self.events[..cut.min(self.events.len())]
            .iter()
            .rposition(|e| matches!(e, SimEvent::Flush))
    }

    /// The device after a power cut just before event `cut`: every write
    /// before the last flush preceding `cut` is durable; of the writes after
    /// it, those `keep` accepts (by event index) survive, in any order. Each
    /// 4 KiB write is atomic. Cuts must not decrease between calls.
    pub fn at_cut(&mut self, cut: usize, keep: impl Fn(usize) -> bool) -> Vec<u8> {
        let cut = cut.min(self.events.len());
        let flushed = self.last_flush_before(cut).unwrap_or(0);
        assert!(flushed >= self.applied, "cuts must not decrease");
        for event in &self.events[self.applied..flushed] {
            if let SimEvent::Write { offset, data } = event {
                self.durable[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
            }
        }
        self.applied = flushed;
        let mut image = self.durable.clone();
        for (i, event) in self.events.iter().enumerate().take(cut).skip(flushed) {
            if let SimEvent::Write { offset, data } = event {
                if keep(i) {
                    image[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
                }
            }
        }
        image
    }
}

/// Shared devices (a test keeps a handle to inspect what the file system wrote).
impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, buf)
    }

    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }

    fn size(&self) -> u64 {
        (**self).size()
    }

    fn will_need(&self, offset: u64, len: u64) {
        (**self).will_need(offset, len)
    }

    fn write_data_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_data_at(offset, buf)
    }

    fn read_data_at(&self, offset: u64, buf: &mut [u8], file_rest: u64) -> io::Result<()> {
        (**self).read_data_at(offset, buf, file_rest)
    }
}
