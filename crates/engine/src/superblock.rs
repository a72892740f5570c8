//! Choosing the superblock: copy #1 at block 0 unless it is invalid, then copy #2.

use crate::device::{Device, IoKind};
use crate::error::{Error, Result};
use f2fuse_layout::casefold::F2FS_ENC_UTF8_12_1;
use f2fuse_layout::superblock::{decode_superblock_copy, SuperBlock};
use f2fuse_layout::{feature, Corrupt, F2FS_BLKSIZE};

/// Features whose images this engine reads correctly.
pub const READ_FEATURES: u32 = feature::EXTRA_ATTR
    | feature::PRJQUOTA
    | feature::INODE_CHKSUM
    | feature::FLEXIBLE_INLINE_XATTR
    | feature::QUOTA_INO
    | feature::INODE_CRTIME
    | feature::LOST_FOUND
    | feature::SB_CHKSUM
    | feature::VERITY
    | feature::ENCRYPT
    | feature::COMPRESSION
    | feature::CASEFOLD
    | feature::RO;

/// The superblock in use and which copy it came from.
pub struct LoadedSuperblock {
    pub sb: SuperBlock,
    /// 0 for the copy in block 0, 1 for block 1.
    pub copy: usize,
    /// Why the other copy was rejected, if it was.
    pub other_copy_error: Option<Corrupt>,
}

pub fn load_superblock(dev: &Device) -> Result<LoadedSuperblock> {
    if dev.size() < 2 * F2FS_BLKSIZE as u64 {
        return Err(Corrupt::new(
            "superblock",
            format!(
                "device of {} bytes is too small to hold an F2FS image",
                dev.size()
            ),
        )
        .into());
    }
    let mut errors = Vec::new();
    let mut found = None;
    for copy in 0..2 {
        let block = dev.read_block(IoKind::Meta, copy as u64)?;
        match decode_superblock_copy(&block, copy) {
            Ok(sb) if found.is_none() => found = Some((sb, copy)),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    let Some((sb, copy)) = found else {
        let detail = errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Corrupt::new("superblock", format!("no valid copy: {detail}")).into());
    };
    let needed = sb.block_count.get().min(
        sb.segment0_blkaddr.get() as u64
            + ((sb.segment_count.get() as u64) << f2fuse_layout::F2FS_LOG_BLOCKS_PER_SEG),
    );
    if dev.block_count() < needed {
        return Err(Corrupt::new(
            "superblock",
            format!(
                "the file system needs {needed} blocks but the device has only {} (truncated image?)",
                dev.block_count()
            ),
        )
        .into());
    }
    if sb.has_feature(feature::BLKZONED) {
        return Err(Error::unsupported(format!(
            "image features {} (zoned devices are not supported)",
            feature::describe(sb.feature.get())
        )));
    }
    // As the kernel's f2fs_sb_read_encoding: 1 (utf8-12.1) is the only
    // encoding there is; mkfs.f2fs -O casefold without -C writes 0.
    if sb.has_feature(feature::CASEFOLD) && sb.s_encoding.get() != F2FS_ENC_UTF8_12_1 {
        return Err(Error::unsupported(format!(
            "casefold encoding {} (only 1, utf8-12.1, is defined)",
            sb.s_encoding.get()
        )));
    }
    let unknown = sb.feature.get() & !READ_FEATURES;
    if unknown != 0 {
        return Err(Error::unsupported(format!(
            "image features {}",
            feature::describe(unknown)
        )));
    }
    Ok(LoadedSuperblock {
        sb,
        copy,
        other_copy_error: errors.into_iter().next(),
    })
}
