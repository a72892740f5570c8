//! Directories: lookup through the multi-level hash table (or the inline
//! dentry area) and listing every entry.

use crate::data::BlockMapper;
use crate::device::Device;
use crate::error::Result;
use crate::inline;
use crate::inode::{FileKind, InodeInfo};
use crate::node::NodeManager;
use f2fuse_layout::dentry::{
    bucket_blocks, dir_block_index, dir_buckets, DentryGeometry, DentrySet,
};
use f2fuse_layout::hash::dentry_hash;
use f2fuse_layout::*;

/// One directory entry as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    pub name: Vec<u8>,
    pub ino: u32,
    pub kind: FileKind,
}

fn to_info(dir: &InodeInfo, name: &[u8], ino: u32, ft: u8) -> Result<DirEntryInfo> {
    // A '/' or NUL would let a hostile image escape the target of an extraction.
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Corrupt::new(
            "dentry",
            format!(
                "name {:?} contains '/' or NUL",
                String::from_utf8_lossy(name)
            ),
        )
        .at(format!("directory inode {}", dir.ino))
        .into());
    }
    let kind = FileKind::from_file_type(ft).ok_or_else(|| {
        Corrupt::new(
            "dentry",
            format!(
                "entry {:?} has file_type {ft}",
                String::from_utf8_lossy(name)
            ),
        )
        .at(format!("directory inode {}", dir.ino))
    })?;
    Ok(DirEntryInfo {
        name: name.to_vec(),
        ino,
        kind,
    })
}

/// Number of dentry blocks the hash table of `dir` can use: bounded both by
/// i_size and by the levels in use, so a hostile i_size cannot loop forever.
pub fn dir_block_count(dir: &InodeInfo) -> u64 {
    let depth = dir.current_depth.min(MAX_DIR_HASH_DEPTH);
    let table = dir_block_index(depth, dir.dir_level as u32, 0);
    dir.size_blocks().min(table)
}

/// Looks `name` up in `dir`.
pub fn lookup(
    dev: &Device,
    nm: &NodeManager,
    dir: &InodeInfo,
    name: &[u8],
) -> Result<Option<DirEntryInfo>> {
    let hash = dentry_hash(name);
    if inline::has_inline_dentry(dir) {
        return match inline::inline_dentries(dir)
            .find(name, hash)
            .map_err(|e| e.at(format!("directory inode {}", dir.ino)))?
        {
            Some(e) => Ok(Some(to_info(dir, e.name, e.ino, e.file_type)?)),
            None => Ok(None),
        };
    }
    let mut mapper = BlockMapper::new(nm, dir);
    let limit = dir_block_count(dir);
    let dir_level = dir.dir_level as u32;
    for level in 0..dir.current_depth.min(MAX_DIR_HASH_DEPTH) {
        let bucket = hash as u64 % dir_buckets(level, dir_level);
        let first = dir_block_index(level, dir_level, bucket);
        for index in first..first + bucket_blocks(level) {
            if index >= limit {
                break;
            }
            let addr = mapper.map(index)?;
            if addr == NULL_ADDR || addr == NEW_ADDR {
                continue;
            }
            let block = dev.read_block(addr as u64)?;
            let set = DentrySet::new(&block, DentryGeometry::BLOCK);
            if let Some(e) = set
                .find(name, hash)
                .map_err(|e| e.at(format!("directory inode {} block {index}", dir.ino)))?
            {
                return Ok(Some(to_info(dir, e.name, e.ino, e.file_type)?));
            }
        }
    }
    Ok(None)
}

/// Every entry of `dir`, "." and ".." included, in on-disk order.
pub fn read_dir(dev: &Device, nm: &NodeManager, dir: &InodeInfo) -> Result<Vec<DirEntryInfo>> {
    let mut out = Vec::new();
    if inline::has_inline_dentry(dir) {
        for e in inline::inline_dentries(dir)
            .entries()
            .map_err(|e| e.at(format!("directory inode {}", dir.ino)))?
        {
            out.push(to_info(dir, e.name, e.ino, e.file_type)?);
        }
        return Ok(out);
    }
    let mut mapper = BlockMapper::new(nm, dir);
    for index in 0..dir_block_count(dir) {
        let addr = mapper.map(index)?;
        if addr == NULL_ADDR || addr == NEW_ADDR {
            continue;
        }
        let block = dev.read_block(addr as u64)?;
        let set = DentrySet::new(&block, DentryGeometry::BLOCK);
        for e in set
            .entries()
            .map_err(|e| e.at(format!("directory inode {} block {index}", dir.ino)))?
        {
            out.push(to_info(dir, e.name, e.ino, e.file_type)?);
        }
    }
    Ok(out)
}
