//! Inodes: reading an inode block, checking it the way the kernel does
//! before use, and decoding it into the attributes callers need.

use crate::device::Block;
use crate::error::{Error, Result};
use crate::node::{NodeExpect, NodeManager};
use f2fuse_layout::node::{inode_of, max_file_blocks, verify_inode_checksum, InodeLayout};
use f2fuse_layout::*;
use std::sync::Arc;

/// Kind of file, from the mode's type bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

impl FileKind {
    pub fn from_mode(i_mode: u16) -> Option<FileKind> {
        Some(match i_mode & mode::S_IFMT {
            mode::S_IFREG => FileKind::Regular,
            mode::S_IFDIR => FileKind::Directory,
            mode::S_IFLNK => FileKind::Symlink,
            mode::S_IFCHR => FileKind::CharDevice,
            mode::S_IFBLK => FileKind::BlockDevice,
            mode::S_IFIFO => FileKind::Fifo,
            mode::S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }

    pub fn from_file_type(ft: u8) -> Option<FileKind> {
        Some(match ft {
            file_type::REG_FILE => FileKind::Regular,
            file_type::DIR => FileKind::Directory,
            file_type::SYMLINK => FileKind::Symlink,
            file_type::CHRDEV => FileKind::CharDevice,
            file_type::BLKDEV => FileKind::BlockDevice,
            file_type::FIFO => FileKind::Fifo,
            file_type::SOCK => FileKind::Socket,
            _ => return None,
        })
    }
}

/// Seconds and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

/// An inode as read from disk: the raw block and the decoded attributes.
#[derive(Clone)]
pub struct InodeInfo {
    pub ino: u32,
    pub kind: FileKind,
    /// Full mode including the type bits.
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub links: u32,
    pub size: u64,
    /// 4 KiB blocks, including the inode itself (as stored).
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Option<Timestamp>,
    pub generation: u32,
    pub flags: u32,
    pub advise: u8,
    pub inline: u8,
    pub xattr_nid: u32,
    pub current_depth: u32,
    pub dir_level: u8,
    pub layout: InodeLayout,
    pub rdev: (u32, u32),
    pub raw: Arc<Block>,
}

impl InodeInfo {
    pub fn has_inline(&self, flag: u8) -> bool {
        self.inline & flag != 0
    }

    pub fn inode(&self) -> &node::Inode {
        inode_of(&self.raw)
    }

    pub fn addrs_per_inode(&self) -> u32 {
        self.layout.addrs_per_inode()
    }

    /// Number of 4 KiB blocks covered by `size`.
    pub fn size_blocks(&self) -> u64 {
        self.size.div_ceil(F2FS_BLKSIZE as u64)
    }
}

/// Context the checks need from the superblock.
#[derive(Debug, Clone, Copy)]
pub struct InodeCheck {
    pub features: u32,
    pub checksum_seed: u32,
}

pub fn read_inode(nm: &NodeManager, check: &InodeCheck, ino: u32) -> Result<InodeInfo> {
    let block = nm.read_node(
        ino,
        NodeExpect {
            ino: Some(ino),
            ofs: Some(0),
        },
    )?;
    decode_inode(ino, block, check).map_err(|e| e.at(format!("inode {ino}")))
}

fn bad(detail: String) -> Error {
    Corrupt::new("inode", detail).into()
}

/// Validates and decodes an inode block already known to belong to `ino`.
pub fn decode_inode(ino: u32, block: Block, check: &InodeCheck) -> Result<InodeInfo> {
    verify_inode_checksum(&block, check.features, check.checksum_seed)?;
    let inode = inode_of(&block);
    let i_mode = inode.i_mode.get();
    let kind = FileKind::from_mode(i_mode)
        .ok_or_else(|| bad(format!("i_mode {i_mode:#o} has no valid file type")))?;
    let layout = InodeLayout::of(inode, check.features)?;
    let blocks = inode.i_blocks.get();
    if blocks == 0 {
        return Err(bad("i_blocks is 0 (must count the inode itself)".into()));
    }
    let size = inode.i_size.get();
    let inline = inode.i_inline;
    let xattr_nid = inode.i_xattr_nid.get();
    if xattr_nid == ino {
        return Err(bad("i_xattr_nid points at the inode itself".into()));
    }
    if inode.i_namelen.get() as usize > F2FS_NAME_LEN {
        return Err(bad(format!(
            "i_namelen {} exceeds 255",
            inode.i_namelen.get()
        )));
    }
    let max_inline = layout.max_inline_data() as u64;
    if inline & inline_flag::INLINE_DATA != 0 {
        if !matches!(kind, FileKind::Regular | FileKind::Symlink) {
            return Err(bad(format!("inline data on a {kind:?}")));
        }
        if size > max_inline {
            return Err(bad(format!(
                "inline i_size {size} exceeds the inline capacity {max_inline}"
            )));
        }
    }
    if inline & inline_flag::INLINE_DENTRY != 0 && kind != FileKind::Directory {
        return Err(bad(format!("inline dentries on a {kind:?}")));
    }
    let max_bytes = max_file_blocks(layout.addrs_per_inode()) * F2FS_BLKSIZE as u64;
    if size > max_bytes {
        return Err(bad(format!(
            "i_size {size} exceeds the largest possible file ({max_bytes} bytes)"
        )));
    }
    let current_depth = inode.i_current_depth.get();
    if kind == FileKind::Directory
        && inline & inline_flag::INLINE_DENTRY == 0
        && current_depth > MAX_DIR_HASH_DEPTH
    {
        return Err(bad(format!(
            "directory depth {current_depth} exceeds {MAX_DIR_HASH_DEPTH}"
        )));
    }
    if kind == FileKind::Symlink && size > F2FS_BLKSIZE as u64 {
        return Err(bad(format!(
            "symlink target of {size} bytes exceeds one block"
        )));
    }
    let ts = |sec: u64, nsec: u32| Timestamp {
        sec: sec as i64,
        nsec: nsec.min(999_999_999),
    };
    let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
        inode.rdev(&layout)
    } else {
        (0, 0)
    };
    Ok(InodeInfo {
        ino,
        kind,
        mode: i_mode,
        uid: inode.i_uid.get(),
        gid: inode.i_gid.get(),
        links: inode.i_links.get(),
        size,
        blocks,
        atime: ts(inode.i_atime.get(), inode.i_atime_nsec.get()),
        mtime: ts(inode.i_mtime.get(), inode.i_mtime_nsec.get()),
        ctime: ts(inode.i_ctime.get(), inode.i_ctime_nsec.get()),
        crtime: inode.crtime(&layout).map(|(s, n)| ts(s, n)),
        generation: inode.i_generation.get(),
        flags: inode.i_flags.get(),
        advise: inode.i_advise,
        inline,
        xattr_nid,
        current_depth,
        dir_level: inode.i_dir_level,
        layout,
        rdev,
        raw: Arc::new(block),
    })
}
