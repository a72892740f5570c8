//! Opening an image (read-only or writable, with recovery) and unmounting.

use super::locks::Locks;
use super::sync::MAX_DIRTY_NODES;
use super::{Clock, DataPolicyCell, Fs, OpenOptions, Writer};
use crate::checkpoint::{load_checkpoint, CheckpointState};
use crate::device::{BlockDevice, Device, FileDevice, FileDeviceOptions, OverlayDevice};
use crate::error::{Error, ErrorKind, Result};
use crate::gc::GcState;
use crate::image_lock::lock_image;
use crate::inode::{FileKind, InodeCheck, InodeClock};
use crate::node::NodeManager;
use crate::recovery;
use crate::segment::{SegmentManager, SitTable};
use crate::sparse::{self, SparseDevice};
use crate::stats::ShardedCounters;
use crate::superblock::{load_superblock, LoadedSuperblock};
use crate::tunables::Tunables;
use f2fuse_layout::casefold::F2FS_ENC_STRICT_MODE_FL;
use f2fuse_layout::node::inode_checksum_seed;
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Features an image may have for us to write it.
/// Encrypted and fs-verity files stay as they are (their contents and
/// names are never rewritten without the key; see `crate::data::check_writable`).
const WRITE_FEATURES: u32 = crate::mkfs::MKFS_FEATURES
    | feature::PRJQUOTA
    | feature::QUOTA_INO
    | feature::COMPRESSION
    | feature::ENCRYPT
    | feature::VERITY;

impl Fs {
    /// Opens an image file or block device, raw or (read-only) an Android
    /// sparse image.
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
        let image_lock = if opts.lock {
            Some(lock_image(path)?)
        } else {
            None
        };
        let mut fs = Fs::open_path_unlocked(path, opts, tunables)?;
        fs.image_lock = image_lock;
        Ok(fs)
    }

    fn open_path_unlocked(
        path: &Path,
        opts: OpenOptions,
        tunables: &[(String, u64)],
    ) -> Result<Fs> {
        if let (false, Some((name, _))) = (opts.writable, tunables.first()) {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                format!("tunable {name}: tunables need a writable file system"),
            ));
        }
        if sparse::is_sparse_file(path) {
            if opts.writable {
                return Err(Error::new(
                    ErrorKind::ReadOnly,
                    "an Android sparse image can only be opened read-only",
                ));
            }
            // Page-cache reads: chunk data sits at arbitrary file offsets.
            let file = FileDevice::open(path, FileDeviceOptions::default())?;
            return Fs::open(Box::new(SparseDevice::open(Box::new(file))?));
        }
        let dev = FileDevice::open(
            path,
            FileDeviceOptions {
                writable: opts.writable,
                direct: opts.direct,
                write_behind: opts.write_behind,
                read_ahead: opts.read_ahead,
            },
        )?;
        if opts.writable {
            Fs::open_writable_with(Box::new(dev), tunables)
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
            strict_encoding: sb.s_encoding_flags.get() & F2FS_ENC_STRICT_MODE_FL != 0,
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
            data_policy: DataPolicyCell::new(&Tunables::defaults(0, 0)),
            image_lock: None,
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
        space.set_ssr_threshold(reserved_sections.saturating_add(tuned.min_ssr_sections));
        let usage_nodes: u64 = sit.usage(&fs.cp.read()).valid_node_blocks;
        if usage_nodes != space.valid_nodes() as u64 {
            return Err(Corrupt::new(
                "checkpoint",
                format!(
                    "valid_node_count {} but the SIT counts {usage_nodes} node blocks",
                    space.valid_nodes()
                ),
            )
            .into());
        }
        let (cold, hot) = sb.extensions();
        let orphans: BTreeSet<u32> = fs.cp.read().orphans.iter().copied().collect();
        fs.data_policy.store(&tuned);
        fs.writer = Some(Writer {
            space: Mutex::new(space),
            op_lock: RwLock::new(()),
            locks: Locks::new(),
            chain_lock: Mutex::new(()),
            orphans: Mutex::new(orphans),
            need_checkpoint: AtomicBool::new(false),
            open_counts: Mutex::new(HashMap::new()),
            unsynced_blocks: Default::default(),
            flushes: Default::default(),
            failed: AtomicBool::new(false),
            last_checkpoint: Mutex::new(Duration::ZERO),
            max_dirty_nodes: AtomicUsize::new(MAX_DIRTY_NODES),
            clock: Clock {
                mounted_at: Instant::now(),
                simulated: Mutex::new(None),
                inodes: RwLock::new(InodeClock::Wall),
            },
            tunables: Mutex::new(tuned),
            cold_exts: cold,
            hot_exts: hot,
            gc: Mutex::new(GcState::default()),
            compress_options: Mutex::new(Default::default()),
            reserved_sections,
            quota_need_fsck: AtomicBool::new(false),
        });
        // Before anything changes usage: orphans and recovery move it too.
        fs.load_quota()?;
        // Nothing else can reach this file system yet: no locks needed.
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

    /// Opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    /// The superblock as read at open.
    pub fn superblock(&self) -> &SuperBlock {
        &self.loaded_sb.sb
    }

    pub(crate) fn loaded_superblock(&self) -> &LoadedSuperblock {
        &self.loaded_sb
    }

    pub(crate) fn checkpoint_state(&self) -> RwLockReadGuard<'_, CheckpointState> {
        self.cp.read()
    }

    pub(crate) fn node_manager(&self) -> &NodeManager {
        &self.nm
    }

    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }

    /// The SIT as of the loaded checkpoint (read-only use: `info`).
    pub(crate) fn sit(&self) -> Result<Arc<SitTable>> {
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
}
