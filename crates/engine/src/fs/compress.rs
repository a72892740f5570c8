//! Compression settings of a writable file system (the kernel's mount
//! options) and the compression state new inodes get from them and from
//! their directory.

use super::Fs;
use crate::compress::CompressOptions;
use crate::error::{Error, Result};
use crate::inode::{Ctx, FileKind};
use f2fuse_layout::compress::{CompressAlgorithm, MAX_COMPRESS_LOG_SIZE, MIN_COMPRESS_LOG_SIZE};
use f2fuse_layout::*;
use std::ops::Range;

/// Limits of the kernel's extension lists (F2FS_EXTENSION_LEN, COMPRESS_EXT_NUM).
const MAX_EXTENSIONS: usize = 16;
const MAX_EXTENSION_LEN: usize = 7;

impl Fs {
    /// The compression settings new compressed files get (the defaults on
    /// a read-only open).
    pub fn compress_options(&self) -> CompressOptions {
        self.writer
            .as_ref()
            .map(|w| w.compress_options.lock().clone())
            .unwrap_or_default()
    }

    /// Sets them, with the kernel's checks of the mount options: cluster
    /// size 2..=8, lz4 level 0 or 3..=16, zstd level up to 22, no level for
    /// lzo, at most 16 extensions of at most 7 bytes, `*` not a
    /// no-compress extension, no extension in both lists.
    pub fn set_compress_options(&self, options: CompressOptions) -> Result<()> {
        let bad = |why: String| Err(Error::errno(libc::EINVAL, why));
        if !(MIN_COMPRESS_LOG_SIZE..=MAX_COMPRESS_LOG_SIZE).contains(&options.log_cluster_size) {
            return bad(format!("compress_log_size {}", options.log_cluster_size));
        }
        let level_ok = match options.algorithm {
            CompressAlgorithm::Lz4 => options.level == 0 || (3..=16).contains(&options.level),
            CompressAlgorithm::Zstd => options.level <= 22,
            CompressAlgorithm::Lzo | CompressAlgorithm::LzoRle => options.level == 0,
        };
        if !level_ok {
            return bad(format!(
                "level {} for {}",
                options.level,
                options.algorithm.name()
            ));
        }
        for list in [&options.extensions, &options.nocompress_extensions] {
            if list.len() > MAX_EXTENSIONS
                || list
                    .iter()
                    .any(|e| e.is_empty() || e.len() > MAX_EXTENSION_LEN)
            {
                return bad(format!("extension list {list:?}"));
            }
        }
        if options.nocompress_extensions.iter().any(|e| e == "*")
            || options.extensions.iter().any(|e| {
                options
                    .nocompress_extensions
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(e))
            })
        {
            return bad("an extension in both compress and nocompress lists".into());
        }
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::errno(libc::EROFS, "compression options"))?;
        *writer.compress_options.lock() = options;
        Ok(())
    }

    /// Gives a regular file or directory just created as `name` in `parent`
    /// compression (COMPR_FL and the current settings) or NOCOMP_FL, as
    /// the kernel's set_compress_new_inode: by extension for files, else
    /// inherited from the directory.
    pub(super) fn give_new_inode_compression(
        &self,
        ctx: &Ctx,
        parent: u32,
        name: &[u8],
        ino: u32,
    ) -> Result<()> {
        if !self.superblock().has_feature(feature::COMPRESSION) {
            return Ok(());
        }
        let options = self.compress_options();
        let parent_flags = ctx.inode(parent)?.flags;
        let inode = ctx.inode(ino)?;
        let decision = if inode.kind == FileKind::Regular {
            options.for_new_file(name, parent_flags)
        } else {
            options.for_new_file(b"", parent_flags)
        };
        match decision {
            None => Ok(()),
            Some(false) => ctx.update_inode(ino, |raw| {
                raw.i_flags.set(raw.i_flags.get() | inode_flag::NOCOMP)
            }),
            Some(true) => ctx.update_inode(ino, |raw| {
                options.new_file_state().store(raw);
                raw.i_flags.set(raw.i_flags.get() | inode_flag::COMPR);
                raw.i_inline &= !inline_flag::INLINE_DATA;
            }),
        }
    }

    /// `blocks` of file `ino` widened to whole clusters when the file is
    /// compressed: a write changes its clusters as a whole.
    pub(super) fn whole_clusters(&self, ino: u32, blocks: Range<u64>) -> Range<u64> {
        match self.inode(ino).ok().and_then(|i| i.compression) {
            Some(c) => {
                let cs = c.cluster_blocks();
                blocks.start / cs * cs..blocks.end.div_ceil(cs) * cs
            }
            None => blocks,
        }
    }
}
