//! The facade: one open F2FS image and POSIX-like operations on it.
//!
//! Locking order (never taken in the other direction):
//! `op_lock` (shared by operations, exclusive for checkpoints and cleaning)
//! → `ns_lock` (namespace changes) → per-inode locks (ascending ino)
//! → `space` (segment manager) / NAT / node cache (leaf locks, held briefly,
//! never across device I/O of file data).

use crate::acl::{Acl, AclKind};
use crate::checkpoint::{load_checkpoint, CheckpointState};
use crate::commit::{write_checkpoint, CheckpointRequest};
use crate::data::{self, FallocMode, SeekTarget};
use crate::device::{BlockDevice, Device, FileDevice, FileDeviceOptions, OverlayDevice};
use crate::dir::{self, DirEntryInfo};
use crate::error::{Error, Result};
use crate::flags::{self, deny_if_immutable, deny_if_locked};
use crate::gc::{self, GcState, GcStats};
use crate::inline;
use crate::inode::{
    create_inode, now, read_inode, set_atime, set_ctime, set_mtime, Ctx, FileKind, InodeCheck,
    InodeInfo, NewInode, Timestamp,
};
use crate::node::{NodeManager, NodeMarks, NodeStamp};
use crate::recovery;
use crate::report::{FileExtents, LogStatus, Status};
use crate::segment::{AllocStats, SegmentManager, SitTable};
use crate::stats::ShardedCounters;
use crate::superblock::{load_superblock, LoadedSuperblock};
use crate::tunables::Tunables;
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
    /// The change time to record instead of the current time: a kernel
    /// that keeps file times itself (FUSE with the writeback cache) sends
    /// the one it gave the change.
    pub ctime: Option<Timestamp>,
    /// Also drop privileges as the VFS does for ATTR_KILL_SUID/SGID/PRIV
    /// (a write, truncate or chown by someone without CAP_FSETID, or any
    /// chown): clear set-user-ID, set-group-ID if group-executable, and the
    /// `security.capability` xattr. Directories are left alone.
    pub kill_privileges: bool,
}

impl SetAttr {
    fn is_empty(&self) -> bool {
        !self.kill_privileges
            && self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
            && self.ctime.is_none()
    }

    /// EPERM for what the immutable and append-only flags forbid (the
    /// VFS's notify_change and truncate rules).
    fn check_flags(&self, inode: &InodeInfo) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        deny_if_immutable(inode, "attribute change")?;
        if self.size.is_some() {
            deny_if_locked(inode, "truncate")?;
        }
        if self.mode.is_some() || self.uid.is_some() || self.gid.is_some() {
            deny_if_locked(inode, "mode or owner change")?;
        }
        // A kernel keeping times itself reports a write as mtime + ctime
        // without atime; append-only files may be written, so that passes.
        let write_times = self.ctime.is_some() && self.atime.is_none();
        let explicit = |t: Option<TimeSet>| matches!(t, Some(TimeSet::At(_)));
        if explicit(self.atime) || (explicit(self.mtime) && !write_times) {
            deny_if_locked(inode, "setting times")?;
        }
        Ok(())
    }
}

/// File capabilities, dropped with set-user-ID (see `SetAttr::kill_privileges`).
const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// Permission bits without set-user-ID, and without set-group-ID when the
/// group may execute (otherwise it marks mandatory locking, which stays).
fn without_privileges(perm: u16) -> u16 {
    let mut perm = perm & !(libc::S_ISUID as u16);
    if perm & libc::S_IXGRP as u16 != 0 {
        perm &= !(libc::S_ISGID as u16);
    }
    perm
}

/// rename(2) flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// Time since mount: the wall clock, or a simulated one for deterministic
/// experiments (`Fs::set_simulated_clock`).
struct Clock {
    mounted_at: Instant,
    simulated: Mutex<Option<Duration>>,
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
    /// Time since mount (`clock`) of the last checkpoint.
    last_checkpoint: Mutex<Duration>,
    clock: Clock,
    tunables: Mutex<Tunables>,
    cold_exts: Vec<String>,
    hot_exts: Vec<String>,
    gc: Mutex<GcState>,
    /// Sections kept free for cleaning (checkpoint rsvd_segment_count).
    reserved_sections: u32,
}

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
}

/// What the facade counts itself (the layers below count their own work).
enum FsCounter {
    /// Bytes callers passed to `write` and got accepted.
    UserBytesWritten,
    /// Bytes `read` returned.
    UserBytesRead,
    CheckpointsWritten,
}

/// Features an image may have for us to write it.
const WRITE_FEATURES: u32 = crate::mkfs::MKFS_FEATURES | feature::PRJQUOTA;

/// Free sections beyond the reserved ones below which foreground cleaning starts:
/// room for the nodes and dentries one operation may write.
const GC_MARGIN_SECTIONS: u32 = 3;
/// Free sections moving one victim's blocks may take: the cold data log's
/// current and next section, and as many for the nodes it re-dirties.
const GC_MOVE_SECTIONS: u32 = 4;
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
        Fs::open_path_with(path, opts, &[])
    }

    /// Opens an image file or block device with tunables set (`name`,
    /// value) before the first operation; they need `opts.writable`.
    pub fn open_path_with(
        path: &Path,
        opts: OpenOptions,
        tunables: &[(String, u64)],
    ) -> Result<Fs> {
        let dev = FileDevice::open(
            path,
            FileDeviceOptions {
                writable: opts.writable,
                direct: opts.direct,
            },
        )?;
        if opts.writable {
            Fs::open_writable_with(Box::new(dev), tunables)
        } else if let Some((name, _)) = tunables.first() {
            Err(Error::errno(
                libc::EROFS,
                format!("tunable {name}: tunables need a writable file system"),
            ))
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
            counters: ShardedCounters::default(),
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
        Fs::open_writable_with(dev, &[])
    }

    /// Opens for reading and writing with tunables set (`name`, value);
    /// an unknown name or a value out of range is an error.
    pub fn open_writable_with(dev: Box<dyn BlockDevice>, settings: &[(String, u64)]) -> Result<Fs> {
        let mut fs = Fs::load(dev)?;
        let sb = fs.superblock();
        let reserved_sections = fs.cp.read().cp.rsvd_segment_count.get() / sb.segs_per_sec.get();
        let mut tuned = Tunables::defaults(sb.segment_count_main.get(), reserved_sections);
        for (name, value) in settings {
            tuned.set(name, *value)?;
        }
        let unsupported = sb.feature.get() & !WRITE_FEATURES;
        if unsupported != 0 {
            return Err(Error::unsupported(format!(
                "writing images with features {}",
                feature::describe(unsupported)
            )));
        }
        let sit = SitTable::load(&fs.dev, sb, &fs.cp.read())?;
        let mut space = SegmentManager::new(&fs.dev, sb, &fs.cp.read(), &sit)?;
        space.ssr_below_sections = reserved_sections + tuned.min_ssr_sections;
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
            last_checkpoint: Mutex::new(Duration::ZERO),
            clock: Clock {
                mounted_at: Instant::now(),
                simulated: Mutex::new(None),
            },
            tunables: Mutex::new(tuned),
            cold_exts: cold,
            hot_exts: hot,
            gc: Mutex::new(GcState::default()),
            reserved_sections,
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
        let n = data::read_data(&self.dev, &self.nm, inode, offset, buf)?;
        self.counters
            .add(FsCounter::UserBytesRead as usize, n as u64);
        Ok(n)
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

    /// The ACL of `kind` stored on `inode`, if any.
    pub fn acl(&self, inode: &InodeInfo, kind: AclKind) -> Result<Option<Acl>> {
        match self.get_xattr(inode, kind.xattr_name()) {
            Ok(bytes) => Acl::parse(&bytes)
                .map(Some)
                .map_err(|e| Corrupt::new("ACL", format!("inode {}: {e}", inode.ino)).into()),
            Err(e) if e.to_errno() == libc::ENODATA => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Physical extents: (file block, block address, length).
    pub fn extents(&self, inode: &InodeInfo) -> Result<Vec<(u64, u32, u64)>> {
        let _read = self.read_guard();
        data::extents(&self.nm, inode)
    }

    /// The extents of the file at `path` (not following a final symlink),
    /// consistent with concurrent writers of that file.
    pub fn file_extents(&self, path: &str) -> Result<FileExtents> {
        let ino = self.resolve(path)?.ino;
        let _read = self.read_guard();
        let lock = self.writer.as_ref().map(|_| self.inode_lock(ino));
        let _guard = lock.as_ref().map(|l| l.read());
        let inode = self.inode(ino)?;
        Ok(FileExtents {
            path: path.to_string(),
            ino,
            size: inode.size,
            blocks: inode.blocks,
            inline: inline::has_inline_data(&inode) || inline::has_inline_dentry(&inode),
            extents: data::extent_map(&self.nm, &inode)?,
        })
    }

    /// The main area's layout now and the counters since this open. On a
    /// read-only open the layout is the last checkpoint's.
    pub fn status(&self) -> Result<Status> {
        let _read = self.read_guard();
        // Taken before the segment manager's lock: cleaning holds the GC
        // lock while it takes that one.
        let gc = self.gc_stats();
        let snapshot = |sm: &SegmentManager| Status {
            writable: self.writer.is_some(),
            main_segments: sm.main_segments(),
            segs_per_sec: sm.segs_per_sec(),
            free_sections: sm.free_sections(),
            segments: sm.segment_counts(),
            user_blocks: sm.user_blocks,
            valid_blocks: sm.valid_blocks,
            valid_nodes: sm.valid_nodes,
            valid_inodes: sm.valid_inodes,
            logs: CursegType::ALL
                .iter()
                .map(|&log| {
                    let cs = &sm.cursegs[log as usize];
                    LogStatus {
                        log,
                        segno: cs.segno,
                        next_blkoff: cs.next_blkoff,
                        ssr: cs.alloc_type == f2fuse_layout::checkpoint::SSR,
                    }
                })
                .collect(),
            alloc: sm.stats.clone(),
            gc: gc.clone(),
            checkpoints: self.counters.get(FsCounter::CheckpointsWritten as usize),
            node_cache: self.nm.cache_stats(),
            io: self.dev.io_stats(),
            user_bytes_written: self.counters.get(FsCounter::UserBytesWritten as usize),
            user_bytes_read: self.counters.get(FsCounter::UserBytesRead as usize),
        };
        match &self.writer {
            Some(w) => Ok(snapshot(&w.space.lock())),
            None => {
                // The allocator built from the checkpoint: its layout view,
                // with no allocation done.
                let sit = self.sit()?;
                let sm = SegmentManager::new(&self.dev, self.superblock(), &self.cp.read(), &sit)?;
                Ok(snapshot(&sm))
            }
        }
    }

    pub fn has_inline_data(&self, inode: &InodeInfo) -> bool {
        inline::has_inline_data(inode)
    }

    /// The inode flags FS_IOC_GETFLAGS reports (FS_*_FL bits).
    pub fn get_flags(&self, inode: &InodeInfo) -> u32 {
        flags::get_flags(inode)
    }

    /// The project id FS_IOC_FSGETXATTR reports: 0 (the default project)
    /// unless the image has project quotas, as in the kernel.
    pub fn project_id(&self, inode: &InodeInfo) -> u32 {
        if self.superblock().feature.get() & feature::PRJQUOTA == 0 {
            return 0;
        }
        inode.inode().projid(&inode.layout).unwrap_or(0)
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
        let (policy, max_search) = {
            let t = w.tunables.lock();
            (t.victim_policy(true), t.max_victim_search)
        };
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
            if !self.room_to_move_locked()? {
                break;
            }
            // Bounded too, unlike current kernels' foreground searches (see `tunables`).
            let Some(victim) = gc::select_victim(&ctx, &mut gc_state, policy, max_search) else {
                break;
            };
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            self.flush_nodes_locked()?;
        }
        drop(gc_state);
        self.checkpoint_locked(false)
    }

    /// Whether a victim's blocks can be moved: moving takes free sections
    /// before the victim becomes free at the next checkpoint, so with a
    /// policy that takes fuller sections (cost-benefit) a checkpoint may be
    /// needed first to free the sections already cleaned. Caller holds
    /// `op_lock` exclusively.
    fn room_to_move_locked(&self) -> Result<bool> {
        let w = self.writer();
        if w.space.lock().free_sections() < GC_MOVE_SECTIONS {
            self.checkpoint_locked(false)?;
        }
        Ok(w.space.lock().free_sections() >= GC_MOVE_SECTIONS)
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

    /// Whether enough blocks are invalid for background cleaning to be
    /// worth it (the kernel's `has_enough_invalid_blocks`: invalid blocks
    /// above 40% of user capacity, or free space short).
    fn enough_invalid_blocks(&self, w: &Writer) -> bool {
        let sm = w.space.lock();
        let capacity = sm.main_segments() as u64 * BLOCKS_PER_SEG as u64;
        let free_blocks = sm.free_segments() as u64 * BLOCKS_PER_SEG as u64;
        let invalid = capacity
            .saturating_sub(sm.valid_blocks)
            .saturating_sub(free_blocks);
        invalid * 100 > sm.user_blocks * 40 || free_blocks * 100 < invalid * 40
    }

    /// One round of background cleaning when enough space is invalid to be
    /// worth it, or always in `gc_urgent` 1 and 3. Returns whether a
    /// section was cleaned.
    pub fn background_gc(&self) -> Result<bool> {
        let w = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "opened read-only"))?;
        let urgent = w.tunables.lock().gc_urgent_pace();
        if !urgent && !self.enough_invalid_blocks(w) {
            return Ok(false);
        }
        self.garbage_collect(false)
    }

    /// Cleans one victim section now and checkpoints (the kernel's
    /// F2FS_IOC_GARBAGE_COLLECT): with the foreground victim policy if
    /// `sync`, else the background one (`gc_idle`, `gc_urgent`), the search
    /// bounded by `max_victim_search`. Returns whether a victim was found.
    pub fn garbage_collect(&self, sync: bool) -> Result<bool> {
        self.exclusive(|w| {
            let (policy, max_search) = {
                let t = w.tunables.lock();
                (t.victim_policy(sync), t.max_victim_search)
            };
            if !self.room_to_move_locked()? {
                return Ok(false);
            }
            let ctx = self.ctx();
            let mut gc_state = w.gc.lock();
            let Some(victim) = gc::select_victim(&ctx, &mut gc_state, policy, max_search) else {
                return Ok(false);
            };
            if sync {
                gc_state.stats.foreground_runs += 1;
            } else {
                gc_state.stats.background_runs += 1;
            }
            gc::clean_section(&ctx, &mut gc_state, victim)?;
            drop(gc_state);
            self.checkpoint_locked(false)?;
            Ok(true)
        })
    }

    /// One wake-up of the background cleaner, as the kernel's gc thread
    /// does it: `slept` is how long it slept, `busy` whether the file system
    /// was in use meanwhile. Cleans at most one section; returns how long
    /// to sleep next (the `gc_*_sleep_time` tunables).
    pub fn background_gc_step(&self, slept: Duration, busy: bool) -> Result<Duration> {
        let w = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "opened read-only"))?;
        let t = w.tunables.lock().clone();
        let slept_ms = slept.as_millis().min(u32::MAX as u128) as u32;
        let ms = |ms: u32| Duration::from_millis(ms as u64);
        let wait_ms = if t.gc_urgent_pace() {
            t.gc_urgent_sleep_ms
        } else if busy && !t.gc_ignores_busy() {
            return Ok(ms(t.longer_gc_sleep(slept_ms)));
        } else if self.enough_invalid_blocks(w) {
            t.shorter_gc_sleep(slept_ms)
        } else {
            t.longer_gc_sleep(slept_ms)
        };
        if self.background_gc()? {
            Ok(ms(wait_ms))
        } else {
            Ok(ms(t.gc_no_gc_sleep_ms))
        }
    }

    /// The value of tunable `name` (see `tunables::TUNABLES`).
    pub fn tunable(&self, name: &str) -> Result<u64> {
        self.tunables_of()?.lock().get(name)
    }

    /// Sets tunable `name`; an unknown name or a value out of range is an
    /// error and changes nothing.
    pub fn set_tunable(&self, name: &str, value: u64) -> Result<()> {
        let mut t = self.tunables_of()?.lock();
        t.set(name, value)?;
        if name == "min_ssr_sections" {
            let w = self.writer();
            w.space.lock().ssr_below_sections = w.reserved_sections + t.min_ssr_sections;
        }
        Ok(())
    }

    /// Every tunable with its current value.
    pub fn tunables(&self) -> Result<Vec<(&'static str, u64)>> {
        Ok(self.tunables_of()?.lock().list())
    }

    fn tunables_of(&self) -> Result<&Mutex<Tunables>> {
        self.writer.as_ref().map(|w| &w.tunables).ok_or_else(|| {
            Error::errno(
                libc::EROFS,
                "tunables need a writable file system (opened read-only)",
            )
        })
    }

    /// Replaces the wall clock by a simulated time since mount, for
    /// deterministic experiments (the policy lab): segment ages for
    /// cost-benefit cleaning and `cp_interval` then follow `since_mount`.
    pub fn set_simulated_clock(&self, since_mount: Duration) {
        if let Some(w) = &self.writer {
            *w.clock.simulated.lock() = Some(since_mount);
            w.space.lock().set_simulated_age(since_mount.as_secs());
        }
    }

    /// Block allocation counters (blocks per log, SSR blocks, segments opened).
    pub fn alloc_stats(&self) -> AllocStats {
        self.writer
            .as_ref()
            .map(|w| w.space.lock().stats.clone())
            .unwrap_or_default()
    }

    /// Cleaning counters.
    pub fn gc_stats(&self) -> GcStats {
        self.writer
            .as_ref()
            .map(|w| w.gc.lock().stats.clone())
            .unwrap_or_default()
    }

    /// Checkpoints when `cp_interval` has passed, too many nodes wait in
    /// memory, or more than `reclaim_segments` segments wait for a
    /// checkpoint to become free.
    fn maybe_checkpoint(&self) -> Result<()> {
        let w = self.writer();
        let (interval, reclaim) = {
            let t = w.tunables.lock();
            (t.cp_interval(), t.reclaim_segments)
        };
        let due = w.clock.since_mount() >= *w.last_checkpoint.lock() + interval;
        if due
            || self.nm.dirty_node_count() > MAX_DIRTY_NODES
            || w.space.lock().prefree_segments() > reclaim
        {
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
        self.counters.add(FsCounter::CheckpointsWritten as usize, 1);
        space.commit_checkpoint();
        self.nm.commit_checkpoint(nat);
        w.need_checkpoint.store(false, Ordering::Relaxed);
        *w.last_checkpoint.lock() = w.clock.since_mount();
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
            deny_if_immutable(&dir, "adding a name")?;
            let kind = FileKind::from_mode(spec_mode)
                .ok_or_else(|| Error::errno(libc::EINVAL, "bad file type"))?;
            if kind == FileKind::Directory && dir.links == u32::MAX {
                return Err(Error::errno(libc::EMLINK, "too many subdirectories"));
            }
            let (mode, inherited) = self.inherit_acls(&dir, spec_mode, kind)?;
            let dir_level = self.writer().tunables.lock().dir_level;
            let ino = create_inode(
                ctx,
                &NewInode {
                    mode,
                    uid,
                    gid,
                    parent,
                    name,
                    rdev,
                },
                dir_level,
            )?;
            let linked = (|| {
                if kind == FileKind::Directory {
                    inline::init_inline_dir(ctx, ino, parent)?;
                }
                for (acl_kind, acl) in &inherited {
                    let bytes = acl.to_bytes();
                    xattr::set_xattr(
                        ctx,
                        ino,
                        acl_kind.xattr_name(),
                        Some(&bytes),
                        SetMode::Create,
                    )?;
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

    /// What a new inode of `kind` asking for `mode` gets under directory
    /// `dir`: with a default ACL there, the ACL masks the mode (no umask
    /// applies) and the inode gets an access ACL unless the mode says it
    /// all, plus the default ACL itself if it is a directory
    /// (posix_acl_create). Symlinks have no ACLs.
    fn inherit_acls(
        &self,
        dir: &InodeInfo,
        mode: u16,
        kind: FileKind,
    ) -> Result<(u16, Vec<(AclKind, Acl)>)> {
        let default = match kind {
            FileKind::Symlink => None,
            _ => self.acl(dir, AclKind::Default)?,
        };
        let Some(default) = default else {
            return Ok((mode, Vec::new()));
        };
        let (mode, access) = default.inherit(mode);
        let mut acls: Vec<(AclKind, Acl)> =
            access.map(|a| (AclKind::Access, a)).into_iter().collect();
        if kind == FileKind::Directory {
            acls.push((AclKind::Default, default));
        }
        Ok((mode, acls))
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
            deny_if_immutable(&dir, "adding a name")?;
            let inode = self.inode(ino)?;
            deny_if_locked(&inode, "linking to it")?;
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
            deny_if_locked(&dir, "removing a name")?;
            deny_if_locked(&target, "removing it")?;
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
            // Linux's may_delete of the old name, then may_delete of the
            // replaced name or may_create of the new one.
            deny_if_locked(&old_dir, "removing a name")?;
            deny_if_locked(&moving, "renaming it")?;
            match &existing {
                Some(e) => {
                    deny_if_locked(&new_dir, "replacing a name")?;
                    deny_if_locked(&ctx.inode(e.info.ino)?, "replacing it")?;
                }
                None => deny_if_immutable(&new_dir, "adding a name")?,
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
        let written = self.mutate(|ctx| {
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
            deny_if_immutable(&inode, "writing")?;
            if flags::is_append_only(&inode) && offset < inode.size {
                self.check_unchanged(&inode, offset, buf)?;
            }
            data::write_data(ctx, ino, offset, buf)
        })?;
        self.counters
            .add(FsCounter::UserBytesWritten as usize, written as u64);
        Ok(written)
    }

    /// EPERM unless writing `buf` at `offset` leaves the bytes an
    /// append-only file already has as they are. The kernel enforces
    /// append-only at open (O_APPEND), but with the FUSE writeback cache
    /// an append reaches us as a rewrite of the last partial page, so a
    /// write below the end is refused only if it would change data.
    fn check_unchanged(&self, inode: &InodeInfo, offset: u64, buf: &[u8]) -> Result<()> {
        let overlap = (inode.size - offset).min(buf.len() as u64) as usize;
        let mut old = vec![0u8; overlap];
        let n = data::read_data(&self.dev, &self.nm, inode, offset, &mut old)?;
        if n != overlap || old != buf[..overlap] {
            return Err(Error::errno(
                libc::EPERM,
                format!("inode {} is append-only: changing its data", inode.ino),
            ));
        }
        Ok(())
    }

    /// fallocate(2) on regular file `ino`: preallocation, hole punching,
    /// zeroing, collapsing and inserting ranges (see [`FallocMode`]).
    pub fn fallocate(&self, ino: u32, offset: u64, len: u64, mode: FallocMode) -> Result<()> {
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            match ctx.inode(ino)?.kind {
                FileKind::Regular => data::fallocate(ctx, ino, offset, len, mode),
                FileKind::Directory => Err(Error::errno(libc::EISDIR, format!("inode {ino}"))),
                // As the VFS: fallocate on a fifo is ESPIPE, on other files ENODEV.
                FileKind::Fifo => Err(Error::errno(libc::ESPIPE, format!("inode {ino}"))),
                _ => Err(Error::errno(libc::ENODEV, format!("inode {ino}"))),
            }
        })
    }

    /// lseek(2) SEEK_DATA / SEEK_HOLE on file `ino` from byte `offset`.
    pub fn seek(&self, ino: u32, offset: u64, target: SeekTarget) -> Result<u64> {
        let _read = self.read_guard();
        let lock = self.writer.as_ref().map(|_| self.inode_lock(ino));
        let _guard = lock.as_ref().map(|l| l.read());
        let inode = self.inode(ino)?;
        if inode.kind == FileKind::Directory {
            return Err(Error::errno(libc::EISDIR, format!("inode {ino}")));
        }
        data::seek(&self.nm, &inode, offset, target)
    }

    /// Changes attributes; returns the inode afterwards.
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = ctx.inode(ino)?;
            attr.check_flags(&inode)?;
            let kill = attr.kill_privileges && inode.kind != FileKind::Directory;
            let mode = match attr.mode {
                Some(perm) if kill => Some(without_privileges(perm)),
                None if kill => Some(without_privileges(inode.mode & 0o7777))
                    .filter(|&perm| perm != inode.mode & 0o7777),
                other => other,
            };
            if kill {
                match xattr::set_xattr(ctx, ino, CAPABILITY_XATTR, None, SetMode::Replace) {
                    Err(e) if e.to_errno() == libc::ENODATA => {}
                    other => other?,
                }
            }
            if let Some(perm) = mode {
                // chmod rewrites the access ACL to agree (posix_acl_chmod).
                if let Some(mut acl) = self.acl(&inode, AclKind::Access)? {
                    acl.chmod(perm);
                    let bytes = acl.to_bytes();
                    let name = AclKind::Access.xattr_name();
                    xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Replace)?;
                }
            }
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
                if let Some(perm) = mode {
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
                set_ctime(raw, attr.ctime.unwrap_or(t));
            })
        })?;
        self.inode(ino)
    }

    /// FS_IOC_SETFLAGS: stores the settable FS_*_FL bits of `requested`
    /// (see `flags`); the caller checks who may change immutable and
    /// append-only (CAP_LINUX_IMMUTABLE). Returns the inode afterwards.
    pub fn set_flags(&self, ino: u32, requested: u32) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = ctx.inode(ino)?;
            let stored = flags::flags_to_store(&inode, requested)?;
            let t = now();
            ctx.update_inode(ino, |raw| {
                raw.i_flags.set(stored);
                set_ctime(raw, t);
            })
        })?;
        self.inode(ino)
    }

    /// Sets an xattr (full name like "user.x") with XATTR_CREATE/REPLACE
    /// semantics. POSIX ACL names go to `set_acl` (as the kernel's ACL
    /// handler, which ignores the flags) by a privileged caller.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        if let Some(kind) = AclKind::of_xattr(name) {
            return self.set_acl(ino, kind, value, true);
        }
        self.change_xattr(ino, name, Some(value), mode)
    }

    /// Sets a POSIX ACL (in the user-space xattr format). An access ACL
    /// also sets the permission bits it implies and is stored only if they
    /// cannot say it all; the setgid bit is dropped unless `keep_sgid` (the
    /// caller is in the file's group or privileged), as
    /// posix_acl_update_mode does. Default ACLs exist only on directories.
    pub fn set_acl(&self, ino: u32, kind: AclKind, value: &[u8], keep_sgid: bool) -> Result<()> {
        let acl = Acl::parse(value)?;
        self.mutate(|ctx| {
            let lock = self.inode_lock(ino);
            let _guard = lock.write();
            let inode = ctx.inode(ino)?;
            deny_if_locked(&inode, "changing ACLs")?;
            let name = kind.xattr_name();
            let bytes = acl.to_bytes();
            match (kind, inode.kind) {
                (_, FileKind::Symlink) => Err(Error::errno(libc::EOPNOTSUPP, "ACLs on a symlink")),
                (AclKind::Default, FileKind::Directory) => {
                    xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Any)
                }
                (AclKind::Default, _) => Err(Error::errno(
                    libc::EACCES,
                    "default ACLs are for directories",
                )),
                (AclKind::Access, _) => {
                    let (mut mode, minimal) = acl.equiv_mode(inode.mode);
                    if !keep_sgid {
                        mode &= !(libc::S_ISGID as u16);
                    }
                    if !minimal {
                        xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Any)?;
                    } else {
                        match xattr::set_xattr(ctx, ino, name, None, SetMode::Replace) {
                            Err(e) if e.to_errno() == libc::ENODATA => {}
                            other => other?,
                        }
                    }
                    let t = now();
                    ctx.update_inode(ino, |raw| {
                        raw.i_mode.set(mode);
                        set_ctime(raw, t);
                    })
                }
            }
        })
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
            deny_if_locked(&ctx.inode(ino)?, "changing xattrs")?;
            xattr::set_xattr(ctx, ino, name, value, mode)?;
            if ctx.inode(ino)?.kind == FileKind::Directory {
                self.writer().need_checkpoint.store(true, Ordering::Relaxed);
            }
            Ok(())
        })
    }
}
