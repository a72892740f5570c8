//! The facade: one open F2FS image and POSIX-like operations on it.

use crate::checkpoint::{load_checkpoint, CheckpointState};
use crate::data;
use crate::device::{BlockDevice, Device, FileDevice, FileDeviceOptions};
use crate::dir::{self, DirEntryInfo};
use crate::error::{Error, Result};
use crate::inline;
use crate::inode::{read_inode, FileKind, InodeCheck, InodeInfo};
use crate::node::NodeManager;
use crate::segment::SitTable;
use crate::superblock::{load_superblock, LoadedSuperblock};
use crate::xattr::read_xattrs;
use f2fuse_layout::node::inode_checksum_seed;
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::xattr::is_visible;
use f2fuse_layout::*;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

/// How to open an image.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Use O_DIRECT on the image file.
    pub direct: bool,
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

pub struct Fs {
    dev: Arc<Device>,
    loaded_sb: LoadedSuperblock,
    cp: CheckpointState,
    nm: NodeManager,
    check: InodeCheck,
    sit: Mutex<Option<Arc<SitTable>>>,
}

impl Fs {
    /// Opens an image file or block device read-only.
    pub fn open_path(path: &Path, opts: OpenOptions) -> Result<Fs> {
        let dev = FileDevice::open(
            path,
            FileDeviceOptions {
                writable: false,
                direct: opts.direct,
            },
        )?;
        Fs::open(Box::new(dev))
    }

    pub fn open(dev: Box<dyn BlockDevice>) -> Result<Fs> {
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
            cp,
            nm,
            check,
            sit: Mutex::new(None),
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

    pub fn superblock(&self) -> &SuperBlock {
        &self.loaded_sb.sb
    }

    pub fn loaded_superblock(&self) -> &LoadedSuperblock {
        &self.loaded_sb
    }

    pub fn checkpoint(&self) -> &CheckpointState {
        &self.cp
    }

    pub fn node_manager(&self) -> &NodeManager {
        &self.nm
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The SIT, loaded on first use (reading files does not need it).
    pub fn sit(&self) -> Result<Arc<SitTable>> {
        let mut slot = self.sit.lock();
        if let Some(sit) = slot.as_ref() {
            return Ok(sit.clone());
        }
        let sit = Arc::new(SitTable::load(&self.dev, self.superblock(), &self.cp)?);
        *slot = Some(sit.clone());
        Ok(sit)
    }

    pub fn inode(&self, ino: u32) -> Result<InodeInfo> {
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
        let dir = self.dir_inode(dir_ino)?;
        dir::read_dir(&self.dev, &self.nm, &dir)
    }

    /// Reads file bytes at `offset`; returns how many were read (0 at EOF).
    pub fn read(&self, inode: &InodeInfo, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if inode.kind == FileKind::Directory {
            return Err(Error::errno(libc::EISDIR, format!("inode {}", inode.ino)));
        }
        data::read_data(&self.dev, &self.nm, inode, offset, buf)
    }

    pub fn read_link(&self, inode: &InodeInfo) -> Result<Vec<u8>> {
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
        Ok(read_xattrs(&self.nm, inode)?
            .into_iter()
            .filter(|e| is_visible(e.index))
            .map(|e| (e.full_name(), e.value))
            .collect())
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
        data::extents(&self.nm, inode)
    }

    pub fn has_inline_data(&self, inode: &InodeInfo) -> bool {
        inline::has_inline_data(inode)
    }

    pub fn statfs(&self) -> StatFs {
        let cp = &self.cp.cp;
        let user = cp.user_block_count.get();
        let valid = cp.valid_block_count.get();
        let free = user.saturating_sub(valid);
        let max_nid = self.nm.max_nid() as u64;
        let files = max_nid - F2FS_ROOT_INO as u64;
        let used_nodes = cp.valid_node_count.get() as u64;
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

    pub fn orphans(&self) -> &[u32] {
        &self.cp.orphans
    }
}
