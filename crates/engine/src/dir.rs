//! Directories: lookup through the multi-level hash table (or the inline
//! dentry area) and listing every entry.

use crate::data::{addr_slot, get_addr, write_blocks, write_unpublished_blocks, BlockMapper};
use crate::device::{Device, IoKind};
use crate::error::{Error, ErrorKind, Result};
use crate::inline;
use crate::inode::{set_ctime, set_mtime, Ctx, FileKind, InodeInfo};
use crate::node::NodeManager;
use f2fuse_layout::dentry::DentrySetMut;
use f2fuse_layout::dentry::{
    bucket_blocks, dir_block_index, dir_buckets, DentryGeometry, DentryName, DentryRef, DentrySet,
};
use f2fuse_layout::fscrypt::{nokey_name, NokeyName};
use f2fuse_layout::node::inode_of_mut;
use f2fuse_layout::*;
use std::collections::BTreeMap;

/// One directory entry as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    /// The entry's name (any bytes but '/' and NUL).
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u32,
    /// The file type the entry records.
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

/// An entry as a caller sees it: in an encrypted directory (we never have
/// the key) its name is the no-key name of the stored ciphertext.
fn entry_info(dir: &InodeInfo, e: &DentryRef) -> Result<DirEntryInfo> {
    if dir.is_encrypted() && !is_dot(e.name) {
        let shown = nokey_name(e.name, e.hash_code);
        return to_info(dir, &shown, e.ino, e.file_type);
    }
    to_info(dir, e.name, e.ino, e.file_type)
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A name looked up in a directory: as the directory hashes and compares
/// it, or in an encrypted directory a no-key name (its hash is the one
/// stored; ciphertext is never hashed again).
enum Wanted<'a> {
    Plain(DentryName<'a>),
    NoKey(NokeyName),
}

impl Wanted<'_> {
    fn hash(&self) -> u32 {
        match self {
            Wanted::Plain(name) => name.hash,
            Wanted::NoKey(name) => name.hash,
        }
    }

    fn find<'b>(&self, set: &DentrySet<'b>) -> Result<Option<DentryRef<'b>>> {
        match self {
            Wanted::Plain(name) => Ok(set.find(name)?),
            Wanted::NoKey(name) => Ok(set.find_where(name.hash, |stored| name.matches(stored))?),
        }
    }
}

/// What looking `name` up in `dir` searches for; `None` when no entry can
/// have it (a name that is no no-key name in an encrypted directory:
/// fscrypt_setup_filename's ENOENT).
fn wanted<'a>(dir: &InodeInfo, name: &'a [u8]) -> Result<Option<Wanted<'a>>> {
    if dir.is_encrypted() && !is_dot(name) {
        return Ok(NokeyName::parse(name).map(Wanted::NoKey));
    }
    dentry_name(dir, name).map(|n| Some(Wanted::Plain(n)))
}

/// ENOKEY if `dir` is encrypted (fscrypt_require_key): without the key no
/// name can be added to it or renamed in or out of it (fscrypt_prepare_new_inode,
/// _link, _rename, _symlink); removing names needs no key.
pub fn require_key(dir: &InodeInfo) -> Result<()> {
    if dir.is_encrypted() {
        return Err(Error::new(
            ErrorKind::NoKey,
            format!("directory {} is encrypted, no key", dir.ino),
        ));
    }
    Ok(())
}

/// Number of dentry blocks the hash table of `dir` can use: bounded both by
/// i_size and by the levels in use, so a hostile i_size cannot loop forever.
pub fn dir_block_count(dir: &InodeInfo) -> u64 {
    let depth = dir.current_depth.min(MAX_DIR_HASH_DEPTH);
    let table = dir_block_index(depth, dir.dir_level as u32, 0);
    dir.size_blocks().min(table)
}

/// `name` as directory `dir` hashes and compares it; EINVAL for a name a
/// strict casefolded directory refuses (not valid UTF-8), as the kernel.
pub fn dentry_name<'a>(dir: &InodeInfo, name: &'a [u8]) -> Result<DentryName<'a>> {
    DentryName::new(name, dir.names).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "name {:?} is not valid UTF-8 (strict casefolding in directory {})",
                String::from_utf8_lossy(name),
                dir.ino
            ),
        )
    })
}

/// Looks `name` up in `dir`.
pub fn lookup(
    dev: &Device,
    nm: &NodeManager,
    dir: &InodeInfo,
    name: &[u8],
) -> Result<Option<DirEntryInfo>> {
    let Some(name) = wanted(dir, name)? else {
        return Ok(None);
    };
    let hash = name.hash();
    if inline::has_inline_dentry(dir) {
        return match name
            .find(&inline::inline_dentries(dir))
            .map_err(|e| e.at(format!("directory inode {}", dir.ino)))?
        {
            Some(e) => Ok(Some(entry_info(dir, &e)?)),
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
            let block = dev.dentry_block(addr as u64)?;
            let set = DentrySet::new(&block, DentryGeometry::BLOCK);
            if let Some(e) = name
                .find(&set)
                .map_err(|e| e.at(format!("directory inode {} block {index}", dir.ino)))?
            {
                return Ok(Some(entry_info(dir, &e)?));
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
            out.push(entry_info(dir, &e)?);
        }
        return Ok(out);
    }
    let mut mapper = BlockMapper::new(nm, dir);
    let count = dir_block_count(dir);
    let mut index = 0;
    while index < count {
        let (addr, run) = mapper.map_run(index)?;
        if addr == NULL_ADDR || addr == NEW_ADDR {
            // A hostile i_size must not make us probe every missing block.
            index = index.saturating_add(run);
            continue;
        }
        let block = dev.dentry_block(addr as u64)?;
        let set = DentrySet::new(&block, DentryGeometry::BLOCK);
        for e in set
            .entries()
            .map_err(|e| e.at(format!("directory inode {} block {index}", dir.ino)))?
        {
            out.push(entry_info(dir, &e)?);
        }
        index += 1;
    }
    Ok(out)
}

/// Where an entry lives: the inline area, or dentry block `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPlace {
    Inline,
    Block(u64),
}

/// A found entry and its position.
#[derive(Debug, Clone)]
pub struct FoundEntry {
    pub place: EntryPlace,
    pub slot: usize,
    /// The stored name's length (a no-key name in `info` is longer).
    pub stored_len: usize,
    pub info: DirEntryInfo,
}

fn read_dentry_block(ctx: &Ctx, dir: &InodeInfo, index: u64) -> Result<Option<Vec<u8>>> {
    let Some(slot) = addr_slot(ctx, dir, index, false)? else {
        return Ok(None);
    };
    let addr = get_addr(ctx, dir, &slot)?;
    if addr == NULL_ADDR || addr == NEW_ADDR {
        return Ok(None);
    }
    let mut block = vec![0u8; F2FS_BLKSIZE];
    ctx.dev
        .read_blocks(IoKind::DirData, addr as u64, &mut block)?;
    Ok(Some(block))
}

/// Finds `name` in `dir` with its position (current contents, cache included).
pub fn find_entry(ctx: &Ctx, dir: &InodeInfo, name: &[u8]) -> Result<Option<FoundEntry>> {
    let Some(name) = wanted(dir, name)? else {
        return Ok(None);
    };
    let hash = name.hash();
    if inline::has_inline_dentry(dir) {
        let set = inline::inline_dentries(dir);
        return match name.find(&set)? {
            Some(e) => Ok(Some(FoundEntry {
                place: EntryPlace::Inline,
                slot: e.slot,
                stored_len: e.name.len(),
                info: entry_info(dir, &e)?,
            })),
            None => Ok(None),
        };
    }
    let dir_level = dir.dir_level as u32;
    let limit = dir_block_count(dir);
    for level in 0..dir.current_depth.min(MAX_DIR_HASH_DEPTH) {
        let bucket = hash as u64 % dir_buckets(level, dir_level);
        let first = dir_block_index(level, dir_level, bucket);
        for index in first..(first + bucket_blocks(level)).min(limit) {
            let Some(block) = read_dentry_block(ctx, dir, index)? else {
                continue;
            };
            let set = DentrySet::new(&block, DentryGeometry::BLOCK);
            if let Some(e) = name.find(&set)? {
                let info = entry_info(dir, &e)?;
                return Ok(Some(FoundEntry {
                    place: EntryPlace::Block(index),
                    slot: e.slot,
                    stored_len: e.name.len(),
                    info,
                }));
            }
        }
    }
    Ok(None)
}

fn touch_dir(ctx: &Ctx, dir_ino: u32) -> Result<()> {
    let t = ctx.clock.now();
    ctx.update_inode(dir_ino, |raw| {
        set_mtime(raw, t);
        set_ctime(raw, t);
    })
}

/// Moves an inline directory's entries into dentry block 0 (slot for slot).
/// With a `dir_level` n, hash level 0 has 2^n buckets and block 0 holds only
/// the first, so every entry goes where its hash belongs (the kernel's
/// `f2fs_move_rehashed_dirents`). The blocks are written first and the
/// inode switches from inline to blocks in one guarded change, so lock-free
/// lookups find every entry throughout.
pub fn convert_inline_dir(ctx: &Ctx, dir: &InodeInfo) -> Result<()> {
    let entries = inline::inline_dentries(dir).entries()?;
    let dir_level = dir.dir_level as u32;
    let mut blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for e in &entries {
        let (index, slot) = if dir_level == 0 {
            (0, e.slot)
        } else {
            let bucket = e.hash_code as u64 % dir_buckets(0, dir_level);
            let first = dir_block_index(0, dir_level, bucket);
            // An inline directory's entries fit in the first block of any bucket.
            let block = blocks
                .entry(first)
                .or_insert_with(|| vec![0u8; F2FS_BLKSIZE]);
            let slots = e.name.len().div_ceil(F2FS_SLOT_LEN);
            let slot = DentrySet::new(block, DentryGeometry::BLOCK)
                .find_free_run(slots)
                .ok_or_else(|| Corrupt::new("inline dentries", "more than one block holds"))?;
            (first, slot)
        };
        let block = blocks
            .entry(index)
            .or_insert_with(|| vec![0u8; F2FS_BLKSIZE]);
        DentrySetMut::new(block, DentryGeometry::BLOCK).insert(
            slot,
            e.name,
            e.hash_code,
            e.ino,
            e.file_type,
        );
    }
    let last_index = blocks.keys().next_back().copied().unwrap_or(0);
    let in_inode = write_unpublished_blocks(ctx, dir, &blocks, CursegType::HotData)?;
    let flexible = ctx.check.features & feature::FLEXIBLE_INLINE_XATTR != 0;
    inline::retire_inline_area(ctx, dir.ino, |block| {
        for &(byte, addr) in &in_inode {
            block[byte..byte + 4].copy_from_slice(&addr.to_le_bytes());
        }
        let raw = inode_of_mut(block);
        raw.i_inline &= !inline_flag::INLINE_DENTRY;
        if !flexible {
            // Keep the 50-word xattr area the inline dentry flag reserved.
            raw.i_inline |= inline_flag::INLINE_XATTR;
        }
        raw.i_blocks.set(raw.i_blocks.get() + in_inode.len() as u64);
        raw.i_size.set((last_index + 1) * F2FS_BLKSIZE as u64);
        raw.i_current_depth.set(1);
    })
}

/// Adds `name -> ino` to `dir_ino` (the caller checked it does not exist).
pub fn add_link(ctx: &Ctx, dir_ino: u32, name: &[u8], ino: u32, ft: u8) -> Result<()> {
    let mut dir = ctx.inode(dir_ino)?;
    let name = dentry_name(&dir, name)?;
    let hash = name.hash;
    let name = name.name;
    let slots = name.len().div_ceil(F2FS_SLOT_LEN);
    if inline::has_inline_dentry(&dir) {
        if let Some(slot) = inline::inline_dentries(&dir).find_free_run(slots) {
            inline::with_inline_area(ctx, dir_ino, |area, layout| {
                let geo = DentryGeometry::inline(layout.max_inline_data());
                DentrySetMut::new(area, geo).insert(slot, name, hash, ino, ft);
            })?;
            return touch_dir(ctx, dir_ino);
        }
        convert_inline_dir(ctx, &dir)?;
        dir = ctx.inode(dir_ino)?;
    }
    let dir_level = dir.dir_level as u32;
    for level in 0..MAX_DIR_HASH_DEPTH {
        let bucket = hash as u64 % dir_buckets(level, dir_level);
        let first = dir_block_index(level, dir_level, bucket);
        for index in first..first + bucket_blocks(level) {
            let mut block =
                read_dentry_block(ctx, &dir, index)?.unwrap_or_else(|| vec![0u8; F2FS_BLKSIZE]);
            let Some(slot) = DentrySet::new(&block, DentryGeometry::BLOCK).find_free_run(slots)
            else {
                continue;
            };
            DentrySetMut::new(&mut block, DentryGeometry::BLOCK).insert(slot, name, hash, ino, ft);
            // Before the write: the entry is where it was put, its slots taken.
            let set = DentrySet::new(&block, DentryGeometry::BLOCK);
            let entry = set.dentry(slot);
            crate::invariant::ensure_invariant!(
                ctx.dev.health(),
                (entry.ino.get(), entry.hash_code.get()) == (ino, hash)
                    && (slot..slot + slots).all(|s| set.is_used(s)),
                "directory {dir_ino} block {index}: entry for inode {ino} not at slot {slot}"
            );
            write_blocks(ctx, &dir, index, &block, CursegType::HotData)?;
            let t = ctx.clock.now();
            return ctx.update_inode(dir_ino, |raw| {
                if level >= raw.i_current_depth.get() {
                    raw.i_current_depth.set(level + 1);
                }
                let end = (index + 1) * F2FS_BLKSIZE as u64;
                if end > raw.i_size.get() {
                    raw.i_size.set(end);
                }
                set_mtime(raw, t);
                set_ctime(raw, t);
            });
        }
    }
    Err(Error::new(
        ErrorKind::NoSpace,
        format!("directory {dir_ino} has no room at any hash level"),
    ))
}

/// Changes an existing entry's target (rename over an entry, or "..").
pub fn set_link(ctx: &Ctx, dir_ino: u32, found: &FoundEntry, ino: u32, ft: u8) -> Result<()> {
    match found.place {
        EntryPlace::Inline => inline::with_inline_area(ctx, dir_ino, |area, layout| {
            let geo = DentryGeometry::inline(layout.max_inline_data());
            DentrySetMut::new(area, geo).set_target(found.slot, ino, ft);
        })?,
        EntryPlace::Block(index) => {
            let dir = ctx.inode(dir_ino)?;
            let mut block = read_dentry_block(ctx, &dir, index)?
                .ok_or_else(|| Corrupt::new("dentry", "entry block vanished"))?;
            DentrySetMut::new(&mut block, DentryGeometry::BLOCK).set_target(found.slot, ino, ft);
            write_blocks(ctx, &dir, index, &block, CursegType::HotData)?;
        }
    }
    touch_dir(ctx, dir_ino)
}

/// Removes an entry; a dentry block left empty (other than block 0) is freed.
pub fn remove_link(ctx: &Ctx, dir_ino: u32, found: &FoundEntry) -> Result<()> {
    let name_len = found.stored_len;
    match found.place {
        EntryPlace::Inline => inline::with_inline_area(ctx, dir_ino, |area, layout| {
            let geo = DentryGeometry::inline(layout.max_inline_data());
            DentrySetMut::new(area, geo).remove(found.slot, name_len);
        })?,
        EntryPlace::Block(index) => {
            let dir = ctx.inode(dir_ino)?;
            let mut block = read_dentry_block(ctx, &dir, index)?
                .ok_or_else(|| Corrupt::new("dentry", "entry block vanished"))?;
            DentrySetMut::new(&mut block, DentryGeometry::BLOCK).remove(found.slot, name_len);
            let empty = block[..SIZE_OF_DENTRY_BITMAP].iter().all(|&b| b == 0);
            if empty && index != 0 {
                crate::data::punch_block(ctx, &dir, index)?;
            } else {
                write_blocks(ctx, &dir, index, &block, CursegType::HotData)?;
            }
        }
    }
    touch_dir(ctx, dir_ino)
}

/// True if the directory holds nothing but "." and "..".
pub fn is_empty_dir(ctx: &Ctx, dir: &InodeInfo) -> Result<bool> {
    Ok(read_dir(ctx.dev, ctx.nm, dir)?
        .iter()
        .all(|e| e.name == b"." || e.name == b".."))
}
