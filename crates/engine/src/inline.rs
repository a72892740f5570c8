//! Inline data and inline dentries: small files and directories stored
//! inside the inode block.

use crate::error::Result;
use crate::inode::{Ctx, InodeInfo};
use f2fuse_layout::dentry::{DentryGeometry, DentrySet, DentrySetMut};
use f2fuse_layout::node::{inode_of_mut, InodeLayout};
use f2fuse_layout::{file_type, inline_flag, F2FS_BLKSIZE};

pub fn has_inline_data(inode: &InodeInfo) -> bool {
    inode.has_inline(inline_flag::INLINE_DATA)
}

pub fn has_inline_dentry(inode: &InodeInfo) -> bool {
    inode.has_inline(inline_flag::INLINE_DENTRY)
}

/// The inline data bytes of a file, up to its size (validated at decode).
pub fn inline_data(inode: &InodeInfo) -> &[u8] {
    let range = inode.layout.inline_data_range();
    let len = (inode.size as usize).min(range.len());
    &inode.raw[range.start..range.start + len]
}

/// The inline dentry area of a directory.
pub fn inline_dentries(inode: &InodeInfo) -> DentrySet<'_> {
    let range = inode.layout.inline_data_range();
    DentrySet::new(
        &inode.raw[range.clone()],
        DentryGeometry::inline(range.len()),
    )
}

/// Runs `change` on the inline area (data or dentries) of inode `ino`.
pub fn with_inline_area<R>(
    ctx: &Ctx,
    ino: u32,
    change: impl FnOnce(&mut [u8], &InodeLayout) -> R,
) -> Result<R> {
    ctx.update_inode_block(ino, |block, layout| {
        change(&mut block[layout.inline_data_range()], layout)
    })
}

/// Fills a new directory's inline dentry area with "." and "..", and sets its
/// size as the kernel does (the inline capacity).
pub fn init_inline_dir(ctx: &Ctx, ino: u32, parent: u32) -> Result<()> {
    let max = with_inline_area(ctx, ino, |area, layout| {
        let geo = DentryGeometry::inline(layout.max_inline_data());
        let mut set = DentrySetMut::new(area, geo);
        // The dot entries are stored under hash 0, also when casefolded.
        set.insert(0, b".", 0, ino, file_type::DIR);
        set.insert(1, b"..", 0, parent, file_type::DIR);
        layout.max_inline_data()
    })?;
    ctx.update_inode(ino, |inode| inode.i_size.set(max as u64))
}

/// Writes `data` at `offset` into the inline data of a file whose new end fits.
pub fn write_inline_data(ctx: &Ctx, ino: u32, offset: usize, data: &[u8]) -> Result<()> {
    with_inline_area(ctx, ino, |area, _| {
        area[offset..offset + data.len()].copy_from_slice(data)
    })?;
    ctx.update_inode(ino, |inode| inode.i_inline |= inline_flag::DATA_EXIST)
}

/// Zeroes inline data from `from` on (truncation).
pub fn truncate_inline_data(ctx: &Ctx, ino: u32, from: usize) -> Result<()> {
    with_inline_area(ctx, ino, |area, _| {
        if from < area.len() {
            area[from..].fill(0)
        }
    })
}

/// Empties the inline area of inode `ino` and lets `retire` change the
/// rest of the block (clear the inline flags, set what replaces them) in
/// the same guarded change, so readers see the inline state whole or not
/// at all.
pub fn retire_inline_area(ctx: &Ctx, ino: u32, retire: impl FnOnce(&mut [u8])) -> Result<()> {
    ctx.update_inode_block(ino, |block, layout| {
        block[layout.inline_data_range()].fill(0);
        retire(block)
    })
}

/// Takes a file's inline bytes out of the inode, clearing the inline state
/// (block 0 is written first by the caller). Returns the bytes (up to i_size).
pub fn take_inline_data(ctx: &Ctx, inode: &InodeInfo) -> Result<Vec<u8>> {
    let data = inline_data(inode).to_vec();
    retire_inline_area(ctx, inode.ino, |block| {
        inode_of_mut(block).i_inline &= !(inline_flag::INLINE_DATA | inline_flag::DATA_EXIST)
    })?;
    debug_assert!(data.len() <= F2FS_BLKSIZE);
    Ok(data)
}
