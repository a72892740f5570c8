//! Choosing the superblock: copy #1 at block 0 unless it is invalid, then copy #2.

use crate::device::{Block, Device, IoKind};
use crate::error::{Error, Result};
use crate::sparse::SPARSE_MAGIC;
use f2fuse_layout::casefold::F2FS_ENC_UTF8_12_1;
use f2fuse_layout::superblock::{decode_superblock_copy, SuperBlock};
use f2fuse_layout::{feature, Corrupt, F2FS_BLKSIZE, F2FS_SUPER_MAGIC, F2FS_SUPER_OFFSET};

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
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
    pub copy: usize,
    /// Why the other copy was rejected, if it was.
    pub other_copy_error: Option<Corrupt>,
}

/// When neither superblock copy has the F2FS magic, what the device holds
/// instead, as far as we can tell: a user who opens the wrong file learns
/// what it is not rather than a bare "bad magic".
fn not_f2fs(blocks: &[Block]) -> Option<String> {
    let word = |block: &Block, at: usize| {
        u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"))
    };
    let magics: Vec<u32> = blocks.iter().map(|b| word(b, F2FS_SUPER_OFFSET)).collect();
    if magics.contains(&F2FS_SUPER_MAGIC) {
        return None;
    }
    if word(&blocks[0], 0) == SPARSE_MAGIC {
        return Some(
            "an Android sparse image, not a raw F2FS image: open it by path or expand it first"
                .into(),
        );
    }
    let zeros = if blocks.iter().all(|b| b.iter().all(|&x| x == 0)) {
        "; its first 8 KiB are all zeros"
    } else {
        ""
    };
    Some(format!(
        "not an F2FS image (no magic {F2FS_SUPER_MAGIC:#010x} at byte {F2FS_SUPER_OFFSET} or {}: found {:#010x} and {:#010x}) \
         and not an Android sparse image (no magic {SPARSE_MAGIC:#010x} at byte 0){zeros}",
        F2FS_BLKSIZE + F2FS_SUPER_OFFSET,
        magics[0],
        magics[1],
    ))
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
    let mut blocks = Vec::with_capacity(2);
    for copy in 0..2 {
        let block = dev.read_block(IoKind::Meta, copy as u64)?;
        match decode_superblock_copy(&block, copy) {
            Ok(sb) if found.is_none() => found = Some((sb, copy)),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
        blocks.push(block);
    }
    let Some((sb, copy)) = found else {
        if let Some(what) = not_f2fs(&blocks) {
            return Err(Corrupt::new("superblock", format!("no valid copy: {what}")).into());
        }
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
