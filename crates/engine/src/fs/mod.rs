//! The facade: one open F2FS image and POSIX-like operations on it, split
//! as the kernel's fs/f2fs is: `open` (mount), `read` (lookups and reads),
//! `namei` (names), `file` (data, attributes, fallocate, seek), `xattr`,
//! `evict` (open counts, orphans, freeing inodes), `sync` (fsync and
//! checkpoints), `clean` (driving garbage collection), `info` (status,
//! statfs, tunables), `locks` (the lock table), `quota` (quota files,
//! limits, project ids).
//!
//! # Lock protocol
//!
//! The lock order, what each lock protects and what is atomic are written
//! once, in docs/ARCHITECTURE.md, "Concurrency and locking order";
//! `lock_order` checks the order in debug builds.

mod atime;
mod clean;
mod compress;
mod evict;
mod file;
mod flush;
mod info;
mod locks;
mod namei;
mod open;
mod path;
mod perm;
mod pin;
mod quota;
mod read;
mod sync;
mod xattr;

pub use atime::AtimePolicy;
pub use file::{SetAttr, TimeSet};
pub use namei::RenameFlags;
pub use perm::{AsUser, OPEN_FOR_EXEC};
pub use quota::enforcement_bit;

use crate::checkpoint::CheckpointState;
use crate::data::DataPolicy;
use crate::device::Device;
use crate::error::{Error, ErrorKind, Result};
use crate::gc::GcState;
use crate::image_lock::ImageLock;
use crate::inode::{Ctx, InodeCheck, InodeClock, InodeInfo};
use crate::ipu::IpuPolicy;
use crate::lock_order::{self, Level};
use crate::node::NodeManager;
use crate::segment::{SegmentManager, SitTable};
use crate::stats::ShardedCounters;
use crate::superblock::LoadedSuperblock;
use crate::tunables::Tunables;
use f2fuse_layout::*;
use locks::{InodeGuard, Locks, Mode, RangeGuard};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to open an image.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Use O_DIRECT on the image file.
    pub direct: bool,
    /// Open for writing.
    pub writable: bool,
    /// Start the write-back of large file data writes at once, so that
    /// an fsync finds them on their way to the disk (the FUSE mount's
    /// default). See [`FileDeviceOptions::write_behind`](crate::device::FileDeviceOptions).
    pub write_behind: bool,
    /// Bytes to read ahead of each sequential stream of large file data
    /// reads, around the host's page cache; 0 (the default) for none. See
    /// [`FileDeviceOptions::read_ahead`](crate::device::FileDeviceOptions).
    pub read_ahead: u64,
    /// Take the image's exclusive lock ([`lock_image`](crate::lock_image))
    /// before opening it and hold it while the [`Fs`] is open, as a mount
    /// and the CLI's write commands do: an image another f2fuse has open
    /// this way is refused ([`ErrorKind::Busy`](crate::ErrorKind::Busy)).
    pub lock: bool,
}

/// File system totals, as statfs reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks in the main area.
    pub blocks: u64,
    /// Free blocks.
    pub blocks_free: u64,
    /// Free blocks an unprivileged user may use.
    pub blocks_available: u64,
    /// Inodes the file system can hold.
    pub files: u64,
    /// Inodes still free.
    pub files_free: u64,
    /// Longest name in bytes.
    pub name_max: u32,
}

/// Time since mount: the wall clock, or a simulated one for deterministic
/// experiments (`Fs::set_simulated_clock`); and the time written into
/// inodes (`Fs::set_fixed_time`).
struct Clock {
    mounted_at: Instant,
    simulated: Mutex<Option<Duration>>,
    inodes: RwLock<InodeClock>,
}

impl Clock {
    fn since_mount(&self) -> Duration {
        self.simulated
            .lock()
            .unwrap_or_else(|| self.mounted_at.elapsed())
    }
}

/// State only a writable file system has.
struct Writer {
    space: Mutex<SegmentManager>,
    /// Operations share it; checkpoints and cleaning take it exclusively.
    op_lock: RwLock<()>,
    /// Directory, inode and range locks, and the rename lock.
    locks: Locks,
    /// One fsync chain at a time in the warm node log: a chain's blocks
    /// must follow each other there, in the order they become durable.
    chain_lock: Mutex<()>,
    /// Unlinked inodes still open: freed at release, or at the next mount.
    orphans: Mutex<BTreeSet<u32>>,
    /// Something roll-forward cannot replay changed since the last
    /// checkpoint (a directory's xattrs): every fsync checkpoints until the
    /// next one (the kernel's SBI_NEED_CP).
    need_checkpoint: AtomicBool,
    open_counts: Mutex<HashMap<u32, u32>>,
    /// Blocks written per file since its last fsync (the FSYNC in-place
    /// policy); emptied at checkpoints, so it holds only files written since.
    unsynced_blocks: flush::UnsyncedBlocks,
    /// fsync's device flushes, shared by concurrent fsyncs, and how much of
    /// the data written at new addresses they made durable.
    flushes: flush::FlushGate,
    /// Set after an error that may have left the in-memory state ahead of the
    /// disk: no further checkpoint may be written.
    failed: AtomicBool,
    /// Time since mount (`clock`) of the last checkpoint.
    last_checkpoint: Mutex<Duration>,
    /// Checkpoint when more node blocks than this wait in memory
    /// (`Fs::set_max_dirty_nodes`).
    max_dirty_nodes: AtomicUsize,
    clock: Clock,
    tunables: Mutex<Tunables>,
    cold_exts: Vec<String>,
    hot_exts: Vec<String>,
    gc: Mutex<GcState>,
    /// How files given compression are compressed (the kernel's mount options).
    compress_options: Mutex<crate::compress::CompressOptions>,
    /// Sections kept free for cleaning (checkpoint rsvd_segment_count).
    reserved_sections: u32,
    /// The quota files are not trusted: checkpoints carry
    /// CP_QUOTA_NEED_FSCK (see `quota`).
    quota_need_fsck: AtomicBool,
}

/// An open F2FS file system: every operation on it, by inode number.
/// `Send + Sync`: share it (e.g. in an `Arc`) between threads.
pub struct Fs {
    dev: Arc<Device>,
    loaded_sb: LoadedSuperblock,
    cp: RwLock<CheckpointState>,
    nm: NodeManager,
    check: InodeCheck,
    sit: Mutex<Option<Arc<SitTable>>>,
    writer: Option<Writer>,
    /// Indexed by [`FsCounter`]; sharded because reads and writes of many
    /// threads bump them.
    counters: ShardedCounters<3>,
    /// The data path's tunables, read by every read and write without a lock.
    data_policy: DataPolicyCell,
    /// Held while open when [`OpenOptions::lock`] asked for it; declared
    /// last, so it is let go after everything else is dropped.
    image_lock: Option<ImageLock>,
}

/// [`DataPolicy`] in atomics (`max_folio_order`, `serialized_dio_pages`,
/// the in-place update tunables, `extent_zeroout_len`).
struct DataPolicyCell {
    folio_order: AtomicU8,
    serialized_dio_pages: AtomicU32,
    ipu_policy: AtomicU8,
    min_ipu_util: AtomicU8,
    min_fsync_blocks: AtomicU32,
    zeroout_blocks: AtomicU32,
}

impl DataPolicyCell {
    fn new(tunables: &Tunables) -> DataPolicyCell {
        let cell = DataPolicyCell {
            folio_order: AtomicU8::new(0),
            serialized_dio_pages: AtomicU32::new(0),
            ipu_policy: AtomicU8::new(0),
            min_ipu_util: AtomicU8::new(0),
            min_fsync_blocks: AtomicU32::new(0),
            zeroout_blocks: AtomicU32::new(0),
        };
        cell.store(tunables);
        cell
    }

    fn store(&self, tunables: &Tunables) {
        let r = Ordering::Relaxed;
        self.folio_order.store(tunables.max_folio_order, r);
        self.serialized_dio_pages
            .store(tunables.serialized_dio_pages, r);
        self.ipu_policy.store(tunables.ipu.bits, r);
        self.min_ipu_util.store(tunables.ipu.min_ipu_util, r);
        self.min_fsync_blocks
            .store(tunables.ipu.min_fsync_blocks, r);
        self.zeroout_blocks.store(tunables.extent_zeroout_len, r);
    }

    /// The policy of callers' writes (and reads, which use only the units).
    fn load(&self) -> DataPolicy {
        let r = Ordering::Relaxed;
        DataPolicy {
            ipu: Some(IpuPolicy {
                bits: self.ipu_policy.load(r),
                min_ipu_util: self.min_ipu_util.load(r),
                min_fsync_blocks: self.min_fsync_blocks.load(r),
            }),
            zeroout_blocks: self.zeroout_blocks.load(r) as u64,
            ..DataPolicy::new(self.folio_order.load(r), self.serialized_dio_pages.load(r))
        }
    }
}

/// What the facade counts itself (the layers below count their own work).
enum FsCounter {
    /// Bytes callers passed to `write` and got accepted.
    UserBytesWritten,
    /// Bytes `read` returned.
    UserBytesRead,
    CheckpointsWritten,
}

impl Fs {
    fn writer(&self) -> &Writer {
        self.writer.as_ref().expect("checked by write_guard")
    }

    fn locks(&self) -> &Locks {
        &self.writer().locks
    }

    fn ctx(&self) -> Ctx<'_> {
        let w = self.writer();
        Ctx {
            dev: &self.dev,
            nm: &self.nm,
            space: &w.space,
            check: &self.check,
            cold_exts: &w.cold_exts,
            hot_exts: &w.hot_exts,
            clock: *w.clock.inodes.read(),
        }
    }

    /// Readers of a writable file system share the operation lock, so they
    /// never see a checkpoint or a cleaning pass half done. Recursive: the
    /// facade's writers call its readers while holding the lock shared.
    fn read_guard(&self) -> Option<(RwLockReadGuard<'_, ()>, lock_order::Held)> {
        self.writer.as_ref().map(|w| {
            let order = lock_order::acquire(Level::Op, 0, true);
            (w.op_lock.read_recursive(), order)
        })
    }

    /// The writer, or EROFS on a read-only open.
    fn writable(&self) -> Result<&Writer> {
        self.writer
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::ReadOnly, "opened read-only"))
    }

    /// The writer of a writable file system no error has made read-only.
    fn healthy_writer(&self) -> Result<&Writer> {
        let w = self.writable()?;
        self.dev.health().refuse_writes()?;
        if w.failed.load(Ordering::Relaxed) {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                "an earlier error made the file system read-only",
            ));
        }
        Ok(w)
    }

    /// Admits one step of a mutating operation: the file system must be
    /// writable and healthy; holds the operation lock shared.
    fn write_guard(&self) -> Result<(RwLockReadGuard<'_, ()>, lock_order::Held)> {
        let w = self.healthy_writer()?;
        let order = lock_order::acquire(Level::Op, 0, true);
        Ok((w.op_lock.read(), order))
    }

    /// Runs `work` with `op_lock` held exclusively (checkpoints, cleaning);
    /// an error marks the file system failed, as the disk may lag memory.
    fn exclusive<R>(&self, work: impl FnOnce(&Writer) -> Result<R>) -> Result<R> {
        let w = self.healthy_writer()?;
        let _order = lock_order::acquire(Level::Op, 0, false);
        let _exclusive = w.op_lock.write();
        // Another thread may have failed while this one waited for the lock.
        let w = self.healthy_writer()?;
        let result = work(w);
        if result.is_err() {
            w.failed.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Runs one step of a mutating operation under the operation lock;
    /// errors other than expected POSIX ones turn the file system read-only
    /// (the in-memory state may be ahead of disk). Cleaning may run before
    /// it and a checkpoint after it, so the caller holds no lock but range
    /// locks.
    fn mutate<R>(&self, op: impl FnOnce(&Ctx) -> Result<R>) -> Result<R> {
        self.ensure_space()?;
        let result = {
            let _op = self.write_guard()?;
            op(&self.ctx())
        };
        match &result {
            Err(Error::Refused { .. }) | Ok(_) => self.maybe_checkpoint()?,
            Err(_) => self.writer().failed.store(true, Ordering::Relaxed),
        }
        result
    }

    /// The inode lock of `ino` shared, on a writable file system (a
    /// read-only one has no writers to exclude).
    fn inode_read_lock(&self, ino: u32) -> Option<InodeGuard<'_>> {
        self.writer
            .as_ref()
            .map(|w| w.locks.inode(ino, Mode::Shared))
    }

    /// Blocks `blocks` of `ino` shared, on a writable file system.
    fn range_read_lock(&self, ino: u32, blocks: Range<u64>) -> Option<RangeGuard<'_>> {
        self.writer
            .as_ref()
            .map(|w| w.locks.range(ino, blocks, Mode::Shared))
    }

    /// Inode `ino` as a caller names it: ESTALE if it no longer exists (a
    /// library caller may hold a number after its file was freed), instead
    /// of the corruption a dangling on-disk reference would be.
    fn caller_inode(&self, ctx: &Ctx, ino: u32) -> Result<InodeInfo> {
        let stale = || Error::new(ErrorKind::Stale, format!("inode {ino} no longer exists"));
        if ino < F2FS_ROOT_INO || ino >= self.nm.max_nid() {
            return Err(stale());
        }
        // Freed, or (after a checkpoint) reused for another inode's node.
        let entry = self.nm.nat_entry(ino)?;
        if entry.block_addr.get() == NULL_ADDR || entry.ino.get() != ino {
            return Err(stale());
        }
        ctx.inode(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::invariant::OnBroken;
    use crate::mkfs::{format, MkfsOptions};

    /// A broken invariant in release builds: the operation fails, nothing
    /// more reaches the device, writes get EROFS with the reason, reads go on.
    #[test]
    fn a_broken_invariant_makes_the_file_system_read_only() {
        let mem = Arc::new(MemDevice::new(64 << 20));
        format(
            &Device::new(Box::new(mem.clone())),
            &MkfsOptions::default(),
            true,
        )
        .unwrap();
        let fs = Fs::open_writable(Box::new(mem.clone())).unwrap();
        let file = fs.create(F2FS_ROOT_INO, b"kept", 0o644, 0, 0).unwrap();
        fs.write(file.ino, 0, b"before").unwrap();
        fs.checkpoint().unwrap();
        let image = mem.snapshot();

        let broken = fs.mutate(|ctx| -> Result<()> {
            Err(ctx
                .dev
                .health()
                .broken(OnBroken::ReadOnly, format_args!("a count below zero")))
        });
        assert!(matches!(broken, Err(Error::Corrupt(_))), "{broken:?}");
        assert_eq!(fs.needs_fsck().as_deref(), Some("a count below zero"));
        for refused in [
            fs.write(file.ino, 0, b"after").map(|_| ()),
            fs.create(F2FS_ROOT_INO, b"new", 0o644, 0, 0).map(|_| ()),
            fs.checkpoint(),
        ] {
            let err = refused.unwrap_err();
            assert_eq!(err.to_errno(), libc::EROFS, "{err}");
            assert!(err.to_string().contains("a count below zero"), "{err}");
        }
        let mut buf = [0u8; 6];
        let inode = fs.resolve("/kept").unwrap();
        assert_eq!(fs.read(&inode, 0, &mut buf).unwrap(), 6);
        assert_eq!(&buf, b"before");
        assert!(fs.unmount().is_err());
        assert!(mem.snapshot() == image, "nothing written after the break");
    }
}
