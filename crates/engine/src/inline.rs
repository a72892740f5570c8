//! Inline data and inline dentries: small files and directories stored
//! inside the inode block.

use crate::inode::InodeInfo;
use f2fuse_layout::dentry::{DentryGeometry, DentrySet};
use f2fuse_layout::inline_flag;

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
