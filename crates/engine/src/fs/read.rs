//! Lookups and reads. Readers take no directory lock (directory changes
//! are published whole); file data reads share the range they read.

use super::{Fs, FsCounter};
use crate::acl::{Acl, AclKind};
use crate::compress;
use crate::data;
use crate::dir::{self, DirEntryInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::flags;
use crate::inline;
use crate::inode::{read_inode, FileKind, InodeInfo};
use crate::report::FileExtents;
use crate::xattr::read_xattrs;
use f2fuse_layout::xattr::is_visible;
use f2fuse_layout::*;

/// Inode blocks at most this far apart are read ahead as one run (the
/// blocks between cost less than another request to the device).
const PREFETCH_GAP: u64 = 16;

impl Fs {
    /// Inode `ino` as it is now.
    pub fn inode(&self, ino: u32) -> Result<InodeInfo> {
        let _read = self.read_guard();
        read_inode(&self.nm, &self.check, ino)
    }

    /// Starts reading the inode blocks of `inos` from the device, without
    /// waiting, for a caller about to read them all (a listing with
    /// attributes): sorted, and blocks less than `PREFETCH_GAP` apart
    /// asked for as one run. Numbers that name no inode are skipped.
    pub fn prefetch_inodes(&self, inos: impl IntoIterator<Item = u32>) {
        let _read = self.read_guard();
        let mut addrs: Vec<u64> = inos
            .into_iter()
            .filter_map(|ino| self.nm.nat_entry(ino).ok())
            .map(|entry| entry.block_addr.get())
            .filter(|&addr| addr != NULL_ADDR && addr != NEW_ADDR)
            .map(u64::from)
            .collect();
        addrs.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for addr in addrs {
            match runs.last_mut() {
                Some((start, count)) if addr < *start + *count + PREFETCH_GAP => {
                    *count = (*count).max(addr - *start + 1)
                }
                _ => runs.push((addr, 1)),
            }
        }
        self.dev.will_need(runs);
    }

    pub(super) fn dir_inode(&self, ino: u32) -> Result<InodeInfo> {
        let dir = self.inode(ino)?;
        if dir.kind != FileKind::Directory {
            return Err(Error::new(ErrorKind::NotADirectory, format!("inode {ino}")));
        }
        Ok(dir)
    }

    /// Looks `name` up in directory `dir_ino`.
    pub fn lookup(&self, dir_ino: u32, name: &[u8]) -> Result<DirEntryInfo> {
        let _read = self.read_guard();
        if name.len() > F2FS_NAME_LEN {
            return Err(Error::new(
                ErrorKind::NameTooLong,
                String::from_utf8_lossy(name),
            ));
        }
        let dir = self.dir_inode(dir_ino)?;
        dir::lookup(&self.dev, &self.nm, &dir, name)?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, String::from_utf8_lossy(name)))
    }

    /// Resolves an absolute or root-relative path without following symlinks.
    pub fn resolve(&self, path: &str) -> Result<InodeInfo> {
        let mut ino = F2FS_ROOT_INO;
        for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            ino = self
                .lookup(ino, component.as_bytes())
                .map_err(|e| match e {
                    Error::Refused { kind, .. } => Error::new(kind, path),
                    other => other,
                })?
                .ino;
        }
        self.inode(ino)
    }

    /// The entries of directory `dir_ino`, "." and ".." included.
    pub fn read_dir(&self, dir_ino: u32) -> Result<Vec<DirEntryInfo>> {
        let _read = self.read_guard();
        let dir = self.dir_inode(dir_ino)?;
        dir::read_dir(&self.dev, &self.nm, &dir)
    }

    /// Reads file bytes at `offset`; returns how many were read (0 at EOF).
    /// The caller's `inode` is a snapshot: concurrent writers are not
    /// excluded (see [`read_ino`](Self::read_ino)).
    pub fn read(&self, inode: &InodeInfo, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let _read = self.read_guard();
        if inode.kind == FileKind::Directory {
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("inode {}", inode.ino),
            ));
        }
        let n = compress::read_data(
            &self.dev,
            &self.nm,
            inode,
            offset,
            buf,
            self.data_policy.load(),
        )?;
        self.counters
            .add(FsCounter::UserBytesRead as usize, n as u64);
        Ok(n)
    }

    /// Reads the current contents of file `ino`: never part of a
    /// concurrent write of the same blocks (their range is shared).
    pub fn read_ino(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let _range = self.range_read_lock(ino, super::file::blocks_of(offset, buf.len() as u64));
        let _read = self.read_guard();
        let _inode = self.inode_read_lock(ino);
        let inode = self.inode(ino)?;
        self.read(&inode, offset, buf)
    }

    /// The target of a symlink.
    pub fn read_link(&self, inode: &InodeInfo) -> Result<Vec<u8>> {
        let _read = self.read_guard();
        if inode.kind != FileKind::Symlink {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("inode {} is not a symlink", inode.ino),
            ));
        }
        let read = if inode.is_encrypted() {
            data::read_stored
        } else {
            data::read_data
        };
        let mut target = vec![0u8; inode.size as usize];
        let n = read(
            &self.dev,
            &self.nm,
            inode,
            0,
            &mut target,
            self.data_policy.load(),
        )?;
        target.truncate(n);
        if inode.is_encrypted() {
            return nokey_symlink_target(inode.ino, &target);
        }
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

    /// The value of xattr `name` (ENODATA if there is none).
    pub fn get_xattr(&self, inode: &InodeInfo, name: &[u8]) -> Result<Vec<u8>> {
        self.xattrs(inode)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::new(ErrorKind::NoData, String::from_utf8_lossy(name)))
    }

    /// The ACL of `kind` stored on `inode`, if any.
    pub fn acl(&self, inode: &InodeInfo, kind: AclKind) -> Result<Option<Acl>> {
        match self.get_xattr(inode, kind.xattr_name()) {
            Ok(bytes) => Acl::parse(&bytes)
                .map(Some)
                .map_err(|e| Corrupt::new("ACL", format!("inode {}: {e}", inode.ino)).into()),
            Err(e) if e.kind() == ErrorKind::NoData => Ok(None),
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
        let _range = self.range_read_lock(ino, super::locks::WHOLE_FILE);
        let _read = self.read_guard();
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

    /// The file's data is stored in its inode.
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
}

/// An encrypted symlink's target as shown without the key: the no-key name
/// of the ciphertext in its `struct fscrypt_symlink_data { __le16 len;
/// u8 encrypted_path[]; }` (fscrypt_get_symlink, with hash 0).
fn nokey_symlink_target(ino: u32, stored: &[u8]) -> Result<Vec<u8>> {
    let len = match stored {
        [lo, hi, ..] => u16::from_le_bytes([*lo, *hi]) as usize,
        _ => 0,
    };
    let Some(ciphertext) = stored.get(2..2 + len).filter(|c| !c.is_empty()) else {
        return Err(Corrupt::new(
            "symlink",
            format!("encrypted target of {len} bytes in {} stored", stored.len()),
        )
        .at(format!("inode {ino}"))
        .into());
    };
    Ok(f2fuse_layout::fscrypt::nokey_name(ciphertext, 0))
}
