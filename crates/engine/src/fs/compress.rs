//! Compression settings of a writable file system (the kernel's mount
//! options), the compression state new inodes get from them and from
//! their directory, and the compression ioctls (F2FS_IOC_*COMPRESS*).

use super::file::WRITE_STEP;
use super::locks::{Mode, WHOLE_FILE};
use super::Fs;
use crate::compress::{self, CompressMode, CompressOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::inode::{Ctx, FileKind, InodeInfo};
use f2fuse_layout::compress::{
    CompressAlgorithm, InodeCompression, MAX_COMPRESS_LOG_SIZE, MIN_COMPRESS_LOG_SIZE,
};
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

    /// When compressed files' clusters are compressed (`compress_mode`).
    pub(super) fn compress_mode(&self) -> CompressMode {
        self.writer
            .as_ref()
            .map(|w| w.compress_options.lock().mode)
            .unwrap_or_default()
    }

    /// Sets them, with the kernel's checks of the mount options: cluster
    /// size 2..=8, lz4 level 0 or 3..=16, zstd level up to 22, no level for
    /// lzo, at most 16 extensions of at most 7 bytes, `*` not a
    /// no-compress extension, no extension in both lists.
    pub fn set_compress_options(&self, options: CompressOptions) -> Result<()> {
        let bad = |why: String| Err(Error::new(ErrorKind::InvalidArgument, why));
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
            .ok_or_else(|| Error::new(ErrorKind::ReadOnly, "compression options"))?;
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

/// EINVAL unless `inode` is a compressed file (what the ioctls answer for
/// other files, except GET_COMPRESS_OPTION).
fn compressed(inode: &InodeInfo) -> Result<InodeCompression> {
    inode.compression.ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {} is not compressed", inode.ino),
        )
    })
}

/// EINVAL for a file whose saved blocks were released.
fn not_released(inode: &InodeInfo, c: &InodeCompression) -> Result<()> {
    if c.released {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {}: compressed blocks were released", inode.ino),
        ));
    }
    Ok(())
}

/// The compression ioctls, with the kernel's (6.1 fs/f2fs/file.c) checks
/// and errors. The caller checks that the file was opened for writing
/// where the kernel does (EBADF).
impl Fs {
    /// EOPNOTSUPP on an image without the compression feature.
    fn require_compression(&self) -> Result<()> {
        if self.superblock().has_feature(feature::COMPRESSION) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Unsupported,
                "the image has no compression feature",
            ))
        }
    }

    /// F2FS_IOC_GET_COMPRESS_OPTION: the algorithm and log2 of the cluster
    /// size of compressed file `ino` (ENODATA for another file).
    pub fn compress_option(&self, ino: u32) -> Result<(CompressAlgorithm, u8)> {
        self.require_compression()?;
        let inode = self.inode(ino)?;
        let c = inode.compression.ok_or_else(|| {
            Error::new(ErrorKind::NoData, format!("inode {ino} is not compressed"))
        })?;
        Ok((c.algorithm, c.log_cluster_size))
    }

    /// F2FS_IOC_SET_COMPRESS_OPTION: gives empty compressed file `ino`
    /// another algorithm (its number) and cluster size. EINVAL for values
    /// out of range or a file that is not compressed, EFBIG for one with
    /// blocks. The level is reset as the kernel does: the mount's level
    /// if the algorithm is the mount's, else the algorithm's default.
    pub fn set_compress_option(
        &self,
        ino: u32,
        algorithm: u8,
        log_cluster_size: u8,
    ) -> Result<InodeInfo> {
        self.require_compression()?;
        self.healthy_writer()?;
        let _range = self.locks().range(ino, WHOLE_FILE, Mode::Exclusive);
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            let current = compressed(&inode)?;
            let algorithm = CompressAlgorithm::from_u8(algorithm)
                .filter(|_| {
                    (MIN_COMPRESS_LOG_SIZE..=MAX_COMPRESS_LOG_SIZE).contains(&log_cluster_size)
                })
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        format!("compress option {algorithm}/{log_cluster_size}"),
                    )
                })?;
            if compress::has_blocks(&inode) {
                return Err(Error::new(
                    ErrorKind::FileTooLarge,
                    format!("inode {ino}: compress option of a file with blocks"),
                ));
            }
            let mount = self.compress_options();
            let state = CompressOptions {
                algorithm,
                level: if algorithm == mount.algorithm {
                    mount.level
                } else {
                    0
                },
                log_cluster_size,
                checksum: current.has_checksum(),
                ..Default::default()
            }
            .new_file_state();
            let t = ctx.clock.now();
            ctx.update_inode(ino, |raw| {
                state.store(raw);
                crate::inode::set_ctime(raw, t);
            })
        })?;
        self.inode(ino)
    }

    /// F2FS_IOC_GET_COMPRESS_BLOCKS: the blocks compression saves in
    /// compressed file `ino` (`i_compr_blocks`).
    pub fn compress_blocks(&self, ino: u32) -> Result<u64> {
        self.require_compression()?;
        Ok(compressed(&self.inode(ino)?)?.compr_blocks)
    }

    /// F2FS_IOC_RELEASE_COMPRESS_BLOCKS: gives the blocks compression
    /// saves in file `ino` back to the file system and marks the file
    /// released: it reads as before, but writes are EPERM and it can only
    /// be truncated at a cluster boundary until they are reserved again.
    /// Returns the blocks released. The kernel also refuses (EBUSY) while
    /// another process has the file open for writing.
    pub fn release_compress_blocks(&self, ino: u32) -> Result<u64> {
        self.require_compression()?;
        self.healthy_writer()?;
        let _range = self.locks().range(ino, WHOLE_FILE, Mode::Exclusive);
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            not_released(&inode, &compressed(&inode)?)?;
            compress::release_blocks(ctx, ino)
        })
    }

    /// F2FS_IOC_RESERVE_COMPRESS_BLOCKS: takes back the blocks a release
    /// gave away (ENOSPC if they are not free) and clears the released
    /// mark; returns the blocks reserved. As the kernel, a file still
    /// counting saved blocks is left as it is (0); one never released is EINVAL.
    pub fn reserve_compress_blocks(&self, ino: u32) -> Result<u64> {
        self.require_compression()?;
        self.healthy_writer()?;
        let _range = self.locks().range(ino, WHOLE_FILE, Mode::Exclusive);
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            let c = compressed(&inode)?;
            if c.compr_blocks != 0 {
                return Ok(0);
            }
            if !c.released {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("inode {ino}: compressed blocks were not released"),
                ));
            }
            compress::reserve_blocks(ctx, ino)
        })
    }

    /// F2FS_IOC_COMPRESS_FILE: stores every whole cluster of compressed
    /// file `ino` compressed where that saves a block. Only with
    /// `compress_mode=user` (EOPNOTSUPP otherwise, as the kernel: in `fs`
    /// mode writes compress already).
    pub fn compress_file(&self, ino: u32) -> Result<()> {
        self.rewrite_clusters(ino, true)
    }

    /// F2FS_IOC_DECOMPRESS_FILE: stores every cluster of compressed file
    /// `ino` raw. The file keeps its compression flag. Only with
    /// `compress_mode=user`, as the kernel.
    pub fn decompress_file(&self, ino: u32) -> Result<()> {
        self.rewrite_clusters(ino, false)
    }

    /// Rewrites the clusters of `ino` compressed or raw, a megabyte of
    /// them per step so that checkpoints and cleaning can run between
    /// steps; an error midway leaves the file partly converted (and
    /// consistent), as the kernel's.
    fn rewrite_clusters(&self, ino: u32, compress: bool) -> Result<()> {
        self.require_compression()?;
        if self.compress_mode() != CompressMode::User {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "compressing or decompressing a file needs compress_mode=user",
            ));
        }
        self.healthy_writer()?;
        let _range = self.locks().range(ino, WHOLE_FILE, Mode::Exclusive);
        let inode = self.inode(ino)?;
        let c = compressed(&inode)?;
        not_released(&inode, &c)?;
        if !compress && c.compr_blocks == 0 {
            return Ok(());
        }
        let cs = c.cluster_blocks();
        let clusters = inode.size_blocks().div_ceil(cs);
        let per_step = (WRITE_STEP as u64 / (cs * F2FS_BLKSIZE as u64)).max(1);
        for first in (0..clusters).step_by(per_step as usize) {
            self.mutate(|ctx| {
                let _inode = self.locks().inode(ino, Mode::Shared);
                self.caller_inode(ctx, ino)?;
                (first..clusters.min(first + per_step))
                    .try_for_each(|cluster| compress::rewrite_cluster(ctx, ino, cluster, compress))
            })?;
        }
        Ok(())
    }
}
