//! The facade: one open F2FS image and POSIX-like operations on it.
//!
//! Locking order (never taken in the other direction):
//! `op_lock` (shared by operations, exclusive for checkpoints and cleaning)
//! → `ns_lock` (namespace changes) → per-inode locks (ascending ino)
//! → `space` (segment manager) / NAT / node cache (leaf locks, held briefly,
//! never across device I/O of file data).

use crate::checkpoint::{load_checkpoint, CheckpointState};
use crate::commit::{write_checkpoint, CheckpointRequest};
use crate::data;
use crate::device::{BlockDevice, Device, FileDevice, FileDeviceOptions, OverlayDevice};
use crate::dir::{self, DirEntryInfo};
use crate::error::{Error, Result};
use crate::gc::{self, GcState, GcStats, VictimPolicy};
use crate::inline;
use crate::inode::{
    create_inode, now, read_inode, set_atime, set_ctime, set_mtime, Ctx, FileKind, InodeCheck,
    InodeInfo, NewInode, Timestamp,
};
use crate::node::{NodeManager, NodeMarks, NodeStamp};
use crate::recovery;
use crate::segment::{SegmentManager, SitTable};
use crate::superblock::{load_superblock, LoadedSuperblock};
use crate::xattr::{self, read_xattrs, SetMode};
use f2fuse_layout::node::inode_checksum_seed;
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::xattr::is_visible;
use f2fuse_layout::*;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to open an image.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Use O_DIRECT on the image file.
    pub direct: bool,
    /// Open for writing.
    pub writable: bool,
}

/// File system totals, as statfs reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// A time to set: an explicit value or "now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(Timestamp),
}

/// Attribute changes for `setattr`; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    /// Permission bits (0o7777); the file type is kept.
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

/// rename(2) flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// State only a writable file system has.
struct Writer {
    space: Mutex<SegmentManager>,
    /// Operations share it; checkpoints take it exclusively.
    op_lock: RwLock<()>,
    /// Serializes namespace changes (create, link, unlink, rename, ...).
    ns_lock: Mutex<()>,
    inode_locks: Mutex<HashMap<u32, Arc<RwLock<()>>>>,
    /// Unlinked inodes still open: freed at release, or at the next mount.
    orphans: Mutex<BTreeSet<u32>>,
    /// Something roll-forward cannot replay changed since the last
    /// checkpoint (a directory's xattrs): every fsync checkpoints until the
    /// next one (the kernel's SBI_NEED_CP).
    need_checkpoint: AtomicBool,
    open_counts: Mutex<HashMap<u32, u32>>,
    /// Set after an error that may have left the in-memory state ahead of the
    /// disk: no further checkpoint may be written.
    failed: AtomicBool,
    last_checkpoint: Mutex<Instant>,
    cp_interval: Mutex<Duration>,
    cold_exts: Vec<String>,
    hot_exts: Vec<String>,
    gc: Mutex<GcState>,
    /// Sections kept free for cleaning (checkpoint rsvd_segment_count).
    reserved_sections: u32,
    max_victim_search: u32,
}

pub struct Fs {
    dev: Arc<Device>,
    loaded_sb: LoadedSuperblock,
    cp: RwLock<CheckpointState>,
    nm: NodeManager,
    check: InodeCheck,
    sit: Mutex<Option<Arc<SitTable>>>,
    writer: Option<Writer>,
}

/// Features an image may have for us to write it.
const WRITE_FEATURES: u32 = crate::mkfs::MKFS_FEATURES | feature::PRJQUOTA;

/// Checkpoint this often at least (the kernel's default cp_interval).
pub const DEFAULT_CP_INTERVAL: Duration = Duration::from_secs(60);
/// Dirty segments a background victim search looks at (the kernel's default since 2013).
pub const DEFAULT_MAX_VICTIM_SEARCH: u32 = 4096;
/// Free sections beyond the reserved ones below which foreground cleaning starts:
/// room for the nodes and dentries one operation may write.
const GC_MARGIN_SECTIONS: u32 = 3;
/// Checkpoint when this many node blocks wait in memory.
const MAX_DIRTY_NODES: usize = 16384;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(Error::errno(
            libc::EINVAL,
            format!("invalid name {:?}", String::from_utf8_lossy(name)),
        ));
    }
    if name.len() > F2FS_NAME_LEN {
        return Err(Error::errno(
            libc::ENAMETOOLONG,
            String::from_utf8_lossy(name),
        ));
    }
    Ok(())
}

impl Fs {
    /// Opens an image file or block device.
    pub fn open_path(path: &Path, opts: OpenOptions) -> Result<Fs> {
        let dev = FileDevice::open(
            path,
            FileDeviceOptions {
                writable: opts.writable,
                direct: opts.direct,
            },
        )?;
        if opts.writable {
            Fs::open_writable(Box::new(dev))
        } else {
            Fs::open(Box::new(dev))
        }
    }

    /// Opens read-only. An fsync chain left by a crash is replayed in
    /// memory (nothing is written to the device), so readers see what the
    /// next writable open will recover.
    pub fn open(dev: Box<dyn BlockDevice>) -> Result<Fs> {
        let fs = Fs::load(dev)?;
        if !recovery::has_fsync_data(&fs.dev, fs.superblock(), &fs.cp.read())? {
            return Ok(fs);
        }
        let overlay = Arc::new(OverlayDevice::new(fs.dev.clone()));
        match Fs::open_writable(Box::new(overlay.clone())) {
            Ok(recovered) => drop(recovered),
            // We cannot replay what we could not write: show the checkpoint.
            Err(Error::Unsupported(_)) => return Ok(fs),
            Err(e) => return Err(e),
        }
        Fs::load(Box::new(overlay))
    }

    /// Opens read-only exactly as the last checkpoint left the image.
    fn load(dev: Box<dyn BlockDevice>) -> Result<Fs> {
        let dev = Arc::new(Device::new(dev));
        let loaded_sb = load_superblock(&dev)?;
        let sb = &loaded_sb.sb;
        let cp = load_checkpoint(&dev, sb)?;
        let nm = NodeManager::new(dev.clone(), sb, &cp)?;
        let check = InodeCheck {
            features: sb.feature.get(),
            checksum_seed: inode_checksum_seed(&sb.uuid),
        };
        let fs = Fs {
            dev,
            loaded_sb,
            cp: RwLock::new(cp),
            nm,
            check,
            sit: Mutex::new(None),
            writer: None,
        };
        let root = fs.inode(F2FS_ROOT_INO)?;
        if root.kind != FileKind::Directory {
            return Err(Corrupt::new(
                "root inode",
                format!("is a {:?}, not a directory", root.kind),
            )
            .into());
        }
        Ok(fs)
    }

    /// Opens for reading and writing; after a crash, frees orphan inodes and
    /// replays the fsync chain (roll-forward recovery), then checkpoints.
    pub fn open_writable(dev: Box<dyn BlockDevice>) -> Result<Fs> {
        let mut fs = Fs::load(dev)?;
        let sb = fs.superblock();
        let unsupported = sb.feature.get() & !WRITE_FEATURES;
        if unsupported != 0 {
            return Err(Error::unsupported(format!(
                "writing images with features {}",
                feature::describe(unsupported)
            )));
        }
        let sit = SitTable::load(&fs.dev, sb, &fs.cp.read())?;
        let space = SegmentManager::new(&fs.dev, sb, &fs.cp.read(), &sit)?;
        let usage_nodes: u64 = sit.usage(&fs.cp.read()).valid_node_blocks;
        if usage_nodes != space.valid_nodes as u64 {
            return Err(Corrupt::new(
                "checkpoint",
                format!(
                    "valid_node_count {} but the SIT counts {usage_nodes} node blocks",
                    space.valid_nodes
                ),
            )
            .into());
        }
        let (cold, hot) = sb.extensions();
        let orphans: BTreeSet<u32> = fs.cp.read().orphans.iter().copied().collect();
        fs.writer = Some(Writer {
            space: Mutex::new(space),
            op_lock: RwLock::new(()),
            ns_lock: Mutex::new(()),
            inode_locks: Mutex::new(HashMap::new()),
            orphans: Mutex::new(orphans),
            need_checkpoint: AtomicBool::new(false),
            open_counts: Mutex::new(HashMap::new()),
            failed: AtomicBool::new(false),
            last_checkpoint: Mutex::new(Instant::now()),
            cp_interval: Mutex::new(DEFAULT_CP_INTERVAL),
            cold_exts: cold,
            hot_exts: hot,
            gc: Mutex::new(GcState::default()),
            reserved_sections: fs.cp.read().cp.rsvd_segment_count.get() / sb.segs_per_sec.get(),
            max_victim_search: DEFAULT_MAX_VICTIM_SEARCH,
        });
        let pending: Vec<u32> = fs.writer().orphans.lock().iter().copied().collect();
        for &ino in &pending {
            fs.evict(ino)?;
        }
        fs.writer().orphans.lock().clear();
        let recovered = {
            let cp = fs.cp.read();
            recovery::recover(&fs.ctx(), fs.superblock(), &cp)?
        };
        for &ino in &recovered.unlinked {
            fs.evict(ino)?;
        }
        // Any chain is retired by a checkpoint (a new cp_ver), even one with
        // nothing to replay: otherwise its stale blocks could extend the
        // chains of later fsyncs, which are stamped with the same cp_ver.
        if !pending.is_empty() || recovered.chain_blocks > 0 {
            fs.checkpoint()?;
        }
        Ok(fs)
    }

    pub fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    pub fn superblock(&self) -> &SuperBlock {
        &self.loaded_sb.sb
    }

    pub fn loaded_superblock(&self) -> &LoadedSuperblock {
        &self.loaded_sb
    }

    pub fn checkpoint_state(&self) -> RwLockReadGuard<'_, CheckpointState> {
        self.cp.read()
    }

    pub fn node_manager(&self) -> &NodeManager {
        &self.nm
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The SIT as of the loaded checkpoint (read-only use: `info`).
    pub fn sit(&self) -> Result<Arc<SitTable>> {
        let mut slot = self.sit.lock();
        if let Some(sit) = slot.as_ref() {
            return Ok(sit.clone());
        }
        let sit = Arc::new(SitTable::load(
            &self.dev,
            self.superblock(),
            &self.cp.read(),
        )?);
        *slot = Some(sit.clone());
        Ok(sit)
    }

    /// Readers of a writable file system share the operation lock, so they
    /// never see a checkpoint or a cleaning pass half done. Recursive: the
    /// facade's writers call its readers while holding the lock shared.
    fn read_guard(&self) -> Option<RwLockReadGuard<'_, ()>> {
        self.writer.as_ref().map(|w| w.op_lock.read_recursive())
    }

    pub fn inode(&self, ino: u32) -> Result<InodeInfo> {
        let _read = self.read_guard();
        read_inode(&self.nm, &self.check, ino)
    }

    fn dir_inode(&self, ino: u32) -> Result<InodeInfo> {
        let dir = self.inode(ino)?;
        if dir.kind != FileKind::Directory {
            return Err(Error::errno(libc::ENOTDIR, format!("inode {ino}")));
        }
        Ok(dir)
    }

    /// Looks `name` up in directory `dir_ino`.
    pub fn lookup(&self, dir_ino: u32, name: &[u8]) -> Result<DirEntryInfo> {
        let _read = self.read_guard();
        if name.len() > F2FS_NAME_LEN {
            return Err(Error::errno(
                libc::ENAMETOOLONG,
                String::from_utf8_lossy(name),
            ));
        }
        let dir = self.dir_inode(dir_ino)?;
        dir::lookup(&self.dev, &self.nm, &dir, name)?
            .ok_or_else(|| Error::errno(libc::ENOENT, String::from_utf8_lossy(name)))
    }

    /// Resolves an absolute or root-relative path without following symlinks.
    pub fn resolve(&self, path: &str) -> Result<InodeInfo> {
        let mut ino = F2FS_ROOT_INO;
        for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            ino = self
                .lookup(ino, component.as_bytes())
                .map_err(|e| match e {
                    Error::Errno { errno, .. } => Error::errno(errno, path),
                    other => other,
                })?
                .ino;
        }
        self.inode(ino)
    }

    pub fn read_dir(&self, dir_ino: u32) -> Result<Vec<DirEntryInfo>> {
        let _read = self.read_guard();
        let dir = self.dir_inode(dir_ino)?;
        dir::read_dir(&self.dev, &self.nm, &dir)
    }

    /// Reads file bytes at `offset`; returns how many were read (0 at EOF).
    pub fn read(&self, inode: &InodeInfo, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let _read = self.read_guard();
        if inode.kind == FileKind::Directory {
            return Err(Error::errno(libc::EISDIR, format!("inode {}", inode.ino)));
        }
        data::read_data(&self.dev, &self.nm, inode, offset, buf)
    }

    /// Reads the current contents of file `ino` (consistent with concurrent writers).
    pub fn read_ino(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        // The operation lock before the inode lock (the locking order): the
        // other way round, a writer holding `op_lock` shared and waiting for
        // this inode's lock, plus a checkpoint or cleaning waiting for
        // `op_lock` exclusively, deadlock with this reader.
        let _read = self.read_guard();
        let lock = self.writer.as_ref().map(|_| self.inode_lock(ino));
        let _guard = lock.as_ref().map(|l| l.read());
        let inode = self.inode(ino)?;
        self.read(&inode, offset, buf)
    }

    pub fn read_link(&self, inode: &InodeInfo) -> Result<Vec<u8>> {
        let _read = self.read_guard();
        if inode.kind != FileKind::Symlink {
            return Err(Error::errno(
                libc::EINVAL,
                format!("inode {} is not a symlink", inode.ino),
            ));
        }
        let mut target = vec![0u8; inode.size as usize];
        let n = data::read_data(&self.dev, &self.nm, inode, 0, &mut target)?;
        target.truncate(n);
        Ok(target)
    }

    /// User-visible xattrs as (full name, value), in stored order.
    pub fn xattrs(&self, inode: &InodeInfo) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let _read = self.read_guard();
        read_xattrs(&self.nm, inode)?
            .into_iter()
            .filter(|e| is_visible(e.index))
            .map(|e| {
                let value = if f2fuse_layout::xattr::is_acl_index(e.index) {
                    f2fuse_layout::xattr::acl_from_disk(&e.value)
                        .map_err(|c| Error::from(c.at(format!("inode {}", inode.ino))))?
                } else {
                    e.value.clone()
                };
                Ok((e.full_name(), value))
            })
            .collect()
    }

    pub fn get_xattr(&self, inode: &InodeInfo, name: &[u8]) -> Result<Vec<u8>> {
        self.xattrs(inode)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::errno(libc::ENODATA, String::from_utf8_lossy(name)))
    }

    /// Physical extents: (file block, block address, length).
    pub fn extents(&self, inode: &InodeInfo) -> Result<Vec<(u64, u32, u64)>> {
        let _read = self.read_guard();
        data::extents(&self.nm, inode)
    }

    pub fn has_inline_data(&self, inode: &InodeInfo) -> bool {
        inline::has_inline_data(inode)
    }

    pub fn statfs(&self) -> StatFs {
        let (user, valid, used_nodes) = match &self.writer {
            Some(w) => {
                let sm = w.space.lock();
                (sm.user_blocks, sm.valid_blocks, sm.valid_nodes as u64)
            }
            None => {
                let cp = &self.cp.read().cp;
                (
                    cp.user_block_count.get(),
                    cp.valid_block_count.get(),
                    cp.valid_node_count.get() as u64,
                )
            }
        };
        let free = user.saturating_sub(valid);
        let files = self.nm.max_nid() as u64 - F2FS_ROOT_INO as u64;
        StatFs {
            block_size: F2FS_BLKSIZE as u32,
            blocks: user,
            blocks_free: free,
            blocks_available: free,
            files,
            files_free: files.saturating_sub(used_nodes).min(free),
            name_max: F2FS_NAME_LEN as u32,
        }
    }

    pub fn orphans(&self) -> Vec<u32> {
        match &self.writer {
            Some(w) => w.orphans.lock().iter().copied().collect(),
            None => self.cp.read().orphans.clone(),
        }
    }

    // ---- writing ----

    fn writer(&self) -> &Writer {
        self.writer.as_ref().expect("checked by write_guard")
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
        }
    }

    /// The writer of a writable file system no error has made read-only.
    fn healthy_writer(&self) -> Result<&Writer> {
        let w = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "opened read-only"))?;
        if w.failed.load(Ordering::Relaxed) {
            return Err(Error::errno(
                libc::EROFS,
                "an earlier error made the file system read-only",
            ));
        }
        Ok(w)
    }

    /// Admits a mutating operation: the file system must be writable and healthy.
    fn write_guard(&self) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        Ok(self.healthy_writer()?.op_lock.read())
    }

    /// Runs `work` with `op_lock` held exclusively (checkpoints, cleaning);
    /// an error marks the file system failed, as the disk may lag memory.
    fn exclusive<R>(&self, work: impl FnOnce(&Writer) -> Result<R>) -> Result<R> {
        let w = self.healthy_writer()?;
        let _exclusive = w.op_lock.write();
        // Another thread may have failed while this one waited for the lock.
        let w = self.healthy_writer()?;
        let result = work(w);
        if result.is_err() {
            w.failed.store(true, Ordering::Relaxed);
        }
        result
    }

    fn inode_lock(&self, ino: u32) -> Arc<RwLock<()>> {
        self.writer()
            .inode_locks
            .lock()
            .entry(ino)
            .or_default()
            .clone()
    }

    /// Runs a mutating operation; errors other than expected POSIX ones turn
    /// the file system read-only (the in-memory state may be ahead of disk).
    fn mutate<R>(&self, op: impl FnOnce(&Ctx) -> Result<R>) -> Result<R> {
        self.ensure_space()?;
        let result = {
            let _op = self.write_guard()?;
            op(&self.ctx())
        };
        match &result {
            Err(Error::Errno { .. }) | Ok(_) => self.maybe_checkpoint()?,
            Err(_) => self.writer().failed.store(true, Ordering::Relaxed),
        }
        result
    }

    /// Cleans in the foreground when free sections run low.
    fn ensure_space(&self) -> Result<()> {
        let w = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "opened read-only"))?;
        let low =
            |w: &Writer| w.space.lock().free_sections() <= w.reserved_sections + GC_MARGIN_SECTIONS;
        if !low(w) {
            return Ok(());
        }
        // Another thread may have cleaned while this one waited for the lock.
        self.exclusive(|w| {
            if low(w) {
                self.foreground_gc_locked()
            } else {
                Ok(())
            }
        })
    }

    /// Cleans victim sections until enough will be free, then checkpoints
    /// so the cleaned sections really become free. Caller holds `op_lock`
    /// exclusively.
    fn foreground_gc_locked(&self) -> Result<()> {
        let w = self.writer();
        let ctx = self.ctx();
        let target = w.reserved_sections + GC_MARGIN_SECTIONS + 1;
        let mut gc_state = w.gc.lock();
        gc_state.stats.foreground_runs += 1;
        let sections = {
            let sm = w.space.lock();
            sm.main_segments() / sm.segs_per_sec()
        };
        for _ in 0..sections {
            if w.space.lock().free_sections_after_checkpoint() >= target {
                break;
            }
            // Foreground cleaning looks at every section (the search bound is for background work).
            let Some(victim) =
                gc::select_victim(&ctx, &mut gc_state, VictimPolicy::Greedy, u32::MAX)
            else {
                break;
            };
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            self.flush_nodes_locked()?;
        }
        drop(gc_state);
        self.checkpoint_locked(false)
    }

    fn flush_nodes_locked(&self) -> Result<()> {
        let stamp = self.node_stamp(&self.cp.read());
        self.nm.write_nodes(
            &self.writer().space,
            stamp,
            self.nm.dirty_nodes(),
            NodeMarks::None,
        )
    }

    /// How nodes written while checkpoint `cp` is in force are stamped.
    fn node_stamp(&self, cp: &CheckpointState) -> NodeStamp {
        NodeStamp {
            cp_ver: cp.node_cp_ver(),
            features: self.check.features,
            checksum_seed: self.check.checksum_seed,
        }
    }

    /// One round of background cleaning (cost-benefit victim, search bounded
    /// by `max_victim_search`), when enough space is invalid to be worth it.
    /// Returns whether a section was cleaned.
    pub fn background_gc(&self) -> Result<bool> {
        let w = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "opened read-only"))?;
        {
            // The kernel's trigger: invalid blocks above 40% of user capacity, or free space short.
            let sm = w.space.lock();
            let segs = sm.main_segments() as u64;
            let valid = sm.valid_blocks;
            let capacity = segs * BLOCKS_PER_SEG as u64;
            let free_blocks = sm.free_segments() as u64 * BLOCKS_PER_SEG as u64;
            let invalid = capacity.saturating_sub(valid).saturating_sub(free_blocks);
            if invalid * 100 <= sm.user_blocks * 40 && free_blocks * 100 >= invalid * 40 {
                return Ok(false);
            }
        }
        self.exclusive(|w| {
            let ctx = self.ctx();
            let mut gc_state = w.gc.lock();
            let Some(victim) = gc::select_victim(
                &ctx,
                &mut gc_state,
                VictimPolicy::CostBenefit,
                w.max_victim_search,
            ) else {
                return Ok(false);
            };
            gc_state.stats.background_runs += 1;
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            drop(gc_state);
            self.checkpoint_locked(false)?;
            Ok(true)
        })
    }

    /// How often operations trigger a checkpoint (the kernel's `cp_interval`).
    pub fn set_checkpoint_interval(&self, interval: Duration) {
        if let Some(w) = &self.writer {
            *w.cp_interval.lock() = interval;
        }
    }

    /// Cleaning counters.
    pub fn gc_stats(&self) -> GcStats {
        self.writer
            .as_ref()
            .map(|w| w.gc.lock().stats.clone())
            .unwrap_or_default()
    }

    fn maybe_checkpoint(&self) -> Result<()> {
        let w = self.writer();
        let due = w.last_checkpoint.lock().elapsed() >= *w.cp_interval.lock();
        if due || self.nm.dirty_node_count() > MAX_DIRTY_NODES {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Writes everything to disk and commits a checkpoint.
    pub fn checkpoint(&self) -> Result<()> {
        self.checkpoint_with(false)
    }

    fn checkpoint_with(&self, umount: bool) -> Result<()> {
        self.exclusive(|_| self.checkpoint_locked(umount))
    }

    fn checkpoint_locked(&self, umount: bool) -> Result<()> {
        let w = self.writer();
        let mut cp = self.cp.write();
        let stamp = self.node_stamp(&cp);
        self.nm
            .write_nodes(&w.space, stamp, self.nm.dirty_nodes(), NodeMarks::None)?;
        let mut space = w.space.lock();
        space.advance_full_logs()?;
        space.write_pending_ssa(&self.dev)?;
        space.debug_check();
        let nat = self.nm.flush_nat()?;
        let sit = space.flush_sit(&self.dev, self.superblock(), &cp)?;
        let orphans: Vec<u32> = w.orphans.lock().iter().copied().collect();
        let req = CheckpointRequest {
            umount,
            orphans: &orphans,
            nat_journal: &nat.journal,
            nat_bits: &nat.bits,
            sit,
            next_free_nid: self.nm.next_free_nid(),
        };
        write_checkpoint(&self.dev, self.superblock(), &mut cp, &space, req)?;
        space.commit_checkpoint();
        self.nm.commit_checkpoint(nat);
        w.need_checkpoint.store(false, Ordering::Relaxed);
        *w.last_checkpoint.lock() = Instant::now();
        Ok(())
    }

    /// Commits everything and marks the image cleanly unmounted.
    pub fn unmount(self) -> Result<()> {
        if self.writer.is_some() {
            let open: Vec<u32> = self.writer().open_counts.lock().keys().copied().collect();
            for ino in open {
                while self.release(ino)? {}
            }
            self.checkpoint_with(true)?;
        }
        Ok(())
    }

    /// fsync and fdatasync, as the kernel's f2fs_do_sync_file does them
    /// (fsync_mode=posix): a regular file's dirty nodes go to the warm node
    /// log as an fsync chain that recovery replays after a crash, and the
    /// device is flushed; a checkpoint is written only where roll-forward
    /// could not restore the file (`checkpoint_reason`).
    pub fn fsync(&self, ino: u32) -> Result<()> {
        // Cleaning first when space is low, as before any write: the chain
        // needs room in the warm node log.
        self.ensure_space()?;
        let w = self.healthy_writer()?;
        let reason = {
            let _op = w.op_lock.read();
            // Namespace changes also touch the inode; no other fsync may
            // interleave its nodes with this chain.
            let _ns = w.ns_lock.lock();
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = self.inode(ino)?;
            let reason = self.checkpoint_reason(w, &inode);
            if reason.is_none() {
                if let Err(e) = self.write_fsync_chain(w, ino) {
                    w.failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            } else {
                self.fix_lost_pino(&inode)?;
            }
            reason
        };
        match reason {
            Some(_) => self.checkpoint(),
            None => Ok(()),
        }
    }

    /// Why an fsync of `inode` must checkpoint (the kernel's
    /// need_do_checkpoint in its order), or None if its chain suffices.
    fn checkpoint_reason(&self, w: &Writer, inode: &InodeInfo) -> Option<&'static str> {
        let pino = inode.inode().i_pino.get();
        if inode.kind != FileKind::Regular {
            Some("not a regular file")
        } else if inode.links != 1 {
            Some("not exactly one link")
        } else if w.need_checkpoint.load(Ordering::Relaxed) {
            Some("a change roll-forward cannot replay")
        } else if inode.advise & fadvise::LOST_PINO != 0 {
            Some("parent directory unknown")
        } else if !w.space.lock().space_for_roll_forward() {
            Some("no space for roll-forward")
        } else if !self.nm.is_checkpointed(pino) {
            Some("parent directory not checkpointed")
        } else {
            None
        }
    }

    /// Writes the fsync chain of `ino`: data first made durable, then its
    /// nodes (the last one FSYNC-marked, DENT too for a new inode), then a
    /// flush. Nothing dirty: only the flush.
    fn write_fsync_chain(&self, w: &Writer, ino: u32) -> Result<()> {
        let Some(nodes) = self.nm.fsync_nodes_of(ino)? else {
            return self.dev.flush();
        };
        let dent = self.nm.needs_dentry_mark(ino);
        // A node must never reach the disk before the data it points at.
        self.dev.flush()?;
        let stamp = self.node_stamp(&self.cp.read());
        self.nm
            .write_nodes(&w.space, stamp, nodes, NodeMarks::Fsync { dent })?;
        self.dev.flush()
    }

    /// Clears LOST_PINO when the inode's one name is again the one its
    /// `i_pino` and `i_name` record (the kernel's try_to_fix_pino), so its
    /// next fsync can roll forward.
    fn fix_lost_pino(&self, inode: &InodeInfo) -> Result<()> {
        let raw = inode.inode();
        if inode.advise & fadvise::LOST_PINO == 0 || inode.links != 1 {
            return Ok(());
        }
        let name = &raw.i_name[..(raw.i_namelen.get() as usize).min(F2FS_NAME_LEN)];
        let named = match self.lookup(raw.i_pino.get(), name) {
            Ok(entry) => entry.ino == inode.ino,
            Err(Error::Errno { .. }) => false,
            Err(e) => return Err(e),
        };
        if named {
            self.ctx().update_inode(inode.ino, |raw| {
                raw.i_advise &= !fadvise::LOST_PINO;
            })?;
        }
        Ok(())
    }

    /// Notes that `ino` is open (unlinking it then keeps it until `release`).
    pub fn open_inode(&self, ino: u32) -> Result<()> {
        if let Some(w) = &self.writer {
            *w.open_counts.lock().entry(ino).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Drops one open reference; frees the inode if it was the last one and
    /// the inode is unlinked. Returns whether references remain.
    pub fn release(&self, ino: u32) -> Result<bool> {
        let Some(w) = &self.writer else {
            return Ok(false);
        };
        let remaining = {
            let mut counts = w.open_counts.lock();
            let Some(count) = counts.get_mut(&ino) else {
                return Ok(false);
            };
            *count -= 1;
            let left = *count;
            if left == 0 {
                counts.remove(&ino);
            }
            left
        };
        if remaining == 0 && w.orphans.lock().contains(&ino) {
            self.mutate(|_| {
                self.evict(ino)?;
                w.orphans.lock().remove(&ino);
                Ok(())
            })?;
        }
        Ok(remaining > 0)
    }

    /// Frees an inode with no links: its data, nodes and xattrs.
    fn evict(&self, ino: u32) -> Result<()> {
        let ctx = self.ctx();
        let inode = ctx.inode(ino)?;
        data::truncate_blocks(&ctx, ino, 0)?;
        if inode.xattr_nid != 0 {
            xattr::free_xattr_node(&ctx, ino, inode.xattr_nid)?;
        }
        let old = self.nm.free_node(ino)?;
        let mut space = ctx.space.lock();
        if let Some(addr) = old {
            space.invalidate(addr);
        }
        space.release_blocks(1);
        space.valid_nodes -= 1;
        space.valid_inodes -= 1;
        Ok(())
    }

    /// Drops one link of `ino`; frees it at zero links unless it is open.
    fn drop_link(&self, ctx: &Ctx, ino: u32) -> Result<()> {
        let t = now();
        let links = ctx.update_inode(ino, |raw| {
            let links = raw.i_links.get().saturating_sub(1);
            raw.i_links.set(links);
            set_ctime(raw, t);
            links
        })?;
        if links == 0 {
            let w = self.writer();
            if w.open_counts.lock().contains_key(&ino) {
                w.orphans.lock().insert(ino);
            } else {
                self.evict(ino)?;
            }
        }
        Ok(())
    }

    fn new_entry(
        &self,
        spec: NewInode,
        fill: impl FnOnce(&Ctx, u32) -> Result<()>,
    ) -> Result<InodeInfo> {
        let NewInode {
            mode: spec_mode,
            uid,
            gid,
            parent,
            name,
            rdev,
        } = spec;
        let ino = self.mutate(|ctx| {
            let _ns = self.writer().ns_lock.lock();
            let dir = self.dir_inode(parent)?;
            if dir.links == 0 {
                return Err(Error::errno(libc::ENOENT, "directory was removed"));
            }
            check_name(name)?;
            if dir::find_entry(ctx, &dir, name)?.is_some() {
                return Err(Error::errno(libc::EEXIST, String::from_utf8_lossy(name)));
            }
            let kind = FileKind::from_mode(spec_mode)
                .ok_or_else(|| Error::errno(libc::EINVAL, "bad file type"))?;
            if kind == FileKind::Directory && dir.links == u32::MAX {
                return Err(Error::errno(libc::EMLINK, "too many subdirectories"));
            }
            let ino = create_inode(
                ctx,
                &NewInode {
                    mode: spec_mode,
                    uid,
                    gid,
                    parent,
                    name,
                    rdev,
                },
            )?;
            let linked = (|| {
                if kind == FileKind::Directory {
                    inline::init_inline_dir(ctx, ino, parent)?;
                }
                fill(ctx, ino)?;
                let ft = file_type_of_mode(spec_mode).expect("valid kind");
                dir::add_link(ctx, parent, name, ino, ft)
            })();
            if let Err(e) = linked {
                // Out of space for the symlink target or the entry: the new
                // inode must not stay allocated without a name.
                self.evict(ino)?;
                return Err(e);
            }
            if kind == FileKind::Directory {
                ctx.update_inode(parent, |raw| raw.i_links.set(raw.i_links.get() + 1))?;
            }
            Ok(ino)
        })?;
        self.inode(ino)
    }

    /// Creates a regular file (fails with EEXIST if `name` exists).
    pub fn create(
        &self,
        parent: u32,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        self.new_entry(
            NewInode {
                parent,
                name,
                mode: mode::S_IFREG | (perm & 0o7777),
                uid,
                gid,
                rdev: (0, 0),
            },
            |_, _| Ok(()),
        )
    }

    pub fn mkdir(
        &self,
        parent: u32,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        self.new_entry(
            NewInode {
                parent,
                name,
                mode: mode::S_IFDIR | (perm & 0o7777),
                uid,
                gid,
                rdev: (0, 0),
            },
            |_, _| Ok(()),
        )
    }

    /// Creates a device node, fifo or socket (`mode` includes the type bits).
    pub fn mknod(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        // As mknod(2): no type bits make a regular file; a directory is EPERM.
        let mode = if mode & mode::S_IFMT == 0 {
            mode | mode::S_IFREG
        } else {
            mode
        };
        match FileKind::from_mode(mode) {
            Some(FileKind::Directory) => Err(Error::errno(libc::EPERM, "mknod of a directory")),
            Some(FileKind::Symlink) | None => Err(Error::errno(libc::EINVAL, "mknod of that type")),
            Some(_) => self.new_entry(
                NewInode {
                    parent,
                    name,
                    mode,
                    uid,
                    gid,
                    rdev,
                },
                |_, _| Ok(()),
            ),
        }
    }

    pub fn symlink(
        &self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        if target.is_empty() || target.len() > F2FS_MAX_SYMLINK_LEN {
            return Err(Error::errno(
                if target.is_empty() {
                    libc::ENOENT
                } else {
                    libc::ENAMETOOLONG
                },
                "symlink target length",
            ));
        }
        self.new_entry(
            NewInode {
                parent,
                name,
                mode: mode::S_IFLNK | 0o777,
                uid,
                gid,
                rdev: (0, 0),
            },
            // One block at most: written whole or not at all.
            |ctx, ino| data::write_data(ctx, ino, 0, target).map(|_| ()),
        )
    }

    /// Adds a hard link `new_parent/new_name` to `ino`.
    pub fn link(&self, ino: u32, new_parent: u32, new_name: &[u8]) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let _ns = self.writer().ns_lock.lock();
            // Linux's order: the new parent, the new name, then the source.
            let dir = self.dir_inode(new_parent)?;
            check_name(new_name)?;
            if dir::find_entry(ctx, &dir, new_name)?.is_some() {
                return Err(Error::errno(
                    libc::EEXIST,
                    String::from_utf8_lossy(new_name),
                ));
            }
            let inode = self.inode(ino)?;
            if inode.kind == FileKind::Directory {
                return Err(Error::errno(libc::EPERM, "hard links to directories"));
            }
            if inode.links == u32::MAX {
                return Err(Error::errno(libc::EMLINK, "too many links"));
            }
            if inode.links == 0 {
                return Err(Error::errno(libc::ENOENT, "inode was unlinked"));
            }
            dir::add_link(
                ctx,
                new_parent,
                new_name,
                ino,
                file_type_of_mode(inode.mode).expect("valid"),
            )?;
            let t = now();
            ctx.update_inode(ino, |raw| {
                raw.i_links.set(raw.i_links.get() + 1);
                // Recovery can no longer trust i_pino (the kernel's LOST_PINO).
                raw.i_advise |= fadvise::LOST_PINO;
                set_ctime(raw, t);
            })
        })?;
        self.inode(ino)
    }

    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, false)
    }

    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::errno(libc::EINVAL, "rmdir of \".\""));
        }
        if name == b".." {
            return Err(Error::errno(libc::ENOTEMPTY, "rmdir of \"..\""));
        }
        self.remove_entry(parent, name, true)
    }

    fn remove_entry(&self, parent: u32, name: &[u8], want_dir: bool) -> Result<()> {
        self.mutate(|ctx| {
            let _ns = self.writer().ns_lock.lock();
            let dir = self.dir_inode(parent)?;
            if name.len() > F2FS_NAME_LEN {
                return Err(Error::errno(
                    libc::ENAMETOOLONG,
                    String::from_utf8_lossy(name),
                ));
            }
            let found = dir::find_entry(ctx, &dir, name)?
                .ok_or_else(|| Error::errno(libc::ENOENT, String::from_utf8_lossy(name)))?;
            let target = ctx.inode(found.info.ino)?;
            match (want_dir, target.kind == FileKind::Directory) {
                (true, false) => {
                    return Err(Error::errno(libc::ENOTDIR, String::from_utf8_lossy(name)))
                }
                (false, true) => {
                    return Err(Error::errno(libc::EISDIR, String::from_utf8_lossy(name)))
                }
                _ => {}
            }
            if want_dir && !dir::is_empty_dir(ctx, &target)? {
                return Err(Error::errno(libc::ENOTEMPTY, String::from_utf8_lossy(name)));
            }
            if want_dir && target.ino == F2FS_ROOT_INO {
                return Err(Error::errno(libc::EBUSY, "the root directory"));
            }
            dir::remove_link(ctx, parent, &found)?;
            if want_dir {
                ctx.update_inode(parent, |raw| raw.i_links.set(raw.i_links.get() - 1))?;
                ctx.update_inode(target.ino, |raw| raw.i_links.set(1))?;
            }
            self.drop_link(ctx, target.ino)
        })
    }

    /// True if directory `ancestor` is `ino` or contains it.
    fn is_ancestor(&self, ancestor: u32, mut ino: u32) -> Result<bool> {
        for _ in 0..=4096 {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == F2FS_ROOT_INO {
                return Ok(false);
            }
            ino = self.lookup(ino, b"..")?.ino;
        }
        Err(Corrupt::new(
            "directory tree",
            format!("\"..\" chain from inode {ino} does not reach the root"),
        )
        .into())
    }

    pub fn rename(
        &self,
        parent: u32,
        name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return Err(Error::errno(
                libc::EINVAL,
                "RENAME_NOREPLACE with RENAME_EXCHANGE",
            ));
        }
        self.mutate(|ctx| {
            let _ns = self.writer().ns_lock.lock();
            // Linux's order: both parents, the old name, then the new one.
            let old_dir = self.dir_inode(parent)?;
            let new_dir = self.dir_inode(new_parent)?;
            if name.len() > F2FS_NAME_LEN {
                return Err(Error::errno(
                    libc::ENAMETOOLONG,
                    String::from_utf8_lossy(name),
                ));
            }
            let old = dir::find_entry(ctx, &old_dir, name)?
                .ok_or_else(|| Error::errno(libc::ENOENT, String::from_utf8_lossy(name)))?;
            check_name(new_name)?;
            let existing = dir::find_entry(ctx, &new_dir, new_name)?;
            let moving = ctx.inode(old.info.ino)?;
            let moving_dir = moving.kind == FileKind::Directory;
            if let Some(e) = &existing {
                if flags.noreplace {
                    return Err(Error::errno(
                        libc::EEXIST,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if e.info.ino == old.info.ino {
                    return Ok(()); // Two links of one inode: nothing to do.
                }
            } else if flags.exchange {
                return Err(Error::errno(
                    libc::ENOENT,
                    String::from_utf8_lossy(new_name),
                ));
            }
            if moving_dir && parent != new_parent && self.is_ancestor(old.info.ino, new_parent)? {
                return Err(Error::errno(
                    libc::EINVAL,
                    "cannot move a directory into itself",
                ));
            }
            // Nor may the target contain the old parent; Linux checks this
            // before the file types (ENOTEMPTY, EINVAL for an exchange).
            if let Some(e) = &existing {
                if e.info.kind == FileKind::Directory
                    && parent != new_parent
                    && self.is_ancestor(e.info.ino, parent)?
                {
                    return Err(Error::errno(
                        if flags.exchange {
                            libc::EINVAL
                        } else {
                            libc::ENOTEMPTY
                        },
                        "the target contains the source",
                    ));
                }
            }
            let t = now();
            if flags.exchange {
                let other = existing.expect("checked");
                let other_inode = ctx.inode(other.info.ino)?;
                let other_dir = other_inode.kind == FileKind::Directory;
                dir::set_link(
                    ctx,
                    new_parent,
                    &other,
                    old.info.ino,
                    file_type_of_mode(moving.mode).unwrap(),
                )?;
                let old_again =
                    dir::find_entry(ctx, &self.dir_inode(parent)?, name)?.expect("still there");
                dir::set_link(
                    ctx,
                    parent,
                    &old_again,
                    other.info.ino,
                    file_type_of_mode(other_inode.mode).unwrap(),
                )?;
                if parent != new_parent {
                    if moving_dir {
                        self.set_dotdot(ctx, old.info.ino, new_parent)?;
                    }
                    if other_dir {
                        self.set_dotdot(ctx, other.info.ino, parent)?;
                    }
                    let delta = moving_dir as i64 - other_dir as i64;
                    self.adjust_links(ctx, parent, -delta)?;
                    self.adjust_links(ctx, new_parent, delta)?;
                }
                self.set_parent_name(ctx, old.info.ino, new_parent, new_name, t)?;
                self.set_parent_name(ctx, other.info.ino, parent, name, t)?;
                return Ok(());
            }
            if let Some(target) = &existing {
                let victim = ctx.inode(target.info.ino)?;
                let victim_dir = victim.kind == FileKind::Directory;
                if moving_dir && !victim_dir {
                    return Err(Error::errno(
                        libc::ENOTDIR,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if !moving_dir && victim_dir {
                    return Err(Error::errno(
                        libc::EISDIR,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if victim_dir && !dir::is_empty_dir(ctx, &victim)? {
                    return Err(Error::errno(
                        libc::ENOTEMPTY,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                dir::set_link(
                    ctx,
                    new_parent,
                    target,
                    old.info.ino,
                    file_type_of_mode(moving.mode).unwrap(),
                )?;
                if victim_dir {
                    ctx.update_inode(victim.ino, |raw| raw.i_links.set(1))?;
                    self.adjust_links(ctx, new_parent, -1)?;
                }
                self.drop_link(ctx, victim.ino)?;
            } else {
                dir::add_link(
                    ctx,
                    new_parent,
                    new_name,
                    old.info.ino,
                    file_type_of_mode(moving.mode).unwrap(),
                )?;
            }
            // The old entry may have moved if the directory was converted or rewritten.
            let old_entry = dir::find_entry(ctx, &self.dir_inode(parent)?, name)?
                .expect("old entry still present");
            dir::remove_link(ctx, parent, &old_entry)?;
            if moving_dir && parent != new_parent {
                self.set_dotdot(ctx, old.info.ino, new_parent)?;
                self.adjust_links(ctx, parent, -1)?;
                self.adjust_links(ctx, new_parent, 1)?;
            }
            self.set_parent_name(ctx, old.info.ino, new_parent, new_name, t)
        })
    }

    fn set_dotdot(&self, ctx: &Ctx, dir_ino: u32, new_parent: u32) -> Result<()> {
        let dir = ctx.inode(dir_ino)?;
        let dotdot = dir::find_entry(ctx, &dir, b"..")?
            .ok_or_else(|| Corrupt::new("directory", format!("inode {dir_ino} has no \"..\"")))?;
        dir::set_link(ctx, dir_ino, &dotdot, new_parent, file_type::DIR)
    }

    fn adjust_links(&self, ctx: &Ctx, ino: u32, delta: i64) -> Result<()> {
        if delta != 0 {
            ctx.update_inode(ino, |raw| {
                raw.i_links.set((raw.i_links.get() as i64 + delta) as u32)
            })?;
        }
        Ok(())
    }

    fn set_parent_name(
        &self,
        ctx: &Ctx,
        ino: u32,
        parent: u32,
        name: &[u8],
        t: Timestamp,
    ) -> Result<()> {
        ctx.update_inode(ino, |raw| {
            // As the kernel: a renamed file's fsync checkpoints until its
            // parent is confirmed (fix_lost_pino).
            if raw.i_mode.get() & mode::S_IFMT != mode::S_IFDIR {
                raw.i_advise |= fadvise::LOST_PINO;
            }
            raw.i_pino.set(parent);
            raw.i_namelen.set(name.len() as u32);
            raw.i_name = [0; F2FS_NAME_LEN];
            raw.i_name[..name.len()].copy_from_slice(name);
            set_ctime(raw, t);
        })
    }

    /// Writes `data` at `offset` of file `ino`; returns the bytes written
    /// (short at the largest file size, or when space runs out midway).
    /// Large writes go in 1 MiB steps so cleaning can run between them.
    pub fn write(&self, ino: u32, offset: u64, buf: &[u8]) -> Result<usize> {
        const STEP: usize = 1 << 20;
        if buf.len() > STEP {
            let mut done = 0;
            for chunk in buf.chunks(STEP) {
                // A short chunk ends the write; so does an error once some
                // bytes are written (a short write: the caller sees the error next).
                match self.write(ino, offset + done as u64, chunk) {
                    Ok(n) => {
                        done += n;
                        if n < chunk.len() {
                            break;
                        }
                    }
                    Err(e) if done == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            return Ok(done);
        }
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = ctx.inode(ino)?;
            match inode.kind {
                FileKind::Regular => {}
                FileKind::Directory => {
                    return Err(Error::errno(libc::EISDIR, format!("inode {ino}")))
                }
                _ => {
                    return Err(Error::errno(
                        libc::EINVAL,
                        format!("inode {ino} is not a regular file"),
                    ))
                }
            }
            data::write_data(ctx, ino, offset, buf)
        })
    }

    /// Changes attributes; returns the inode afterwards.
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = ctx.inode(ino)?;
            if let Some(size) = attr.size {
                match inode.kind {
                    FileKind::Regular => data::truncate(ctx, ino, size)?,
                    FileKind::Directory => {
                        return Err(Error::errno(libc::EISDIR, format!("inode {ino}")))
                    }
                    _ => {
                        return Err(Error::errno(
                            libc::EINVAL,
                            format!("inode {ino} is not a regular file"),
                        ))
                    }
                }
            }
            let t = now();
            let resolve = |ts: TimeSet| match ts {
                TimeSet::Now => t,
                TimeSet::At(x) => x,
            };
            ctx.update_inode(ino, |raw| {
                if let Some(perm) = attr.mode {
                    raw.i_mode
                        .set((raw.i_mode.get() & mode::S_IFMT) | (perm & 0o7777));
                }
                if let Some(uid) = attr.uid {
                    raw.i_uid.set(uid);
                }
                if let Some(gid) = attr.gid {
                    raw.i_gid.set(gid);
                }
                if let Some(a) = attr.atime {
                    set_atime(raw, resolve(a));
                }
                if let Some(m) = attr.mtime {
                    set_mtime(raw, resolve(m));
                }
                set_ctime(raw, t);
            })
        })?;
        self.inode(ino)
    }

    /// Sets an xattr (full name like "user.x") with XATTR_CREATE/REPLACE semantics.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        self.change_xattr(ino, name, Some(value), mode)
    }

    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        self.change_xattr(ino, name, None, SetMode::Replace)
    }

    fn change_xattr(
        &self,
        ino: u32,
        name: &[u8],
        value: Option<&[u8]>,
        mode: SetMode,
    ) -> Result<()> {
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            xattr::set_xattr(ctx, ino, name, value, mode)?;
            if ctx.inode(ino)?.kind == FileKind::Directory {
                self.writer().need_checkpoint.store(true, Ordering::Relaxed);
            }
            Ok(())
        })
    }
}
