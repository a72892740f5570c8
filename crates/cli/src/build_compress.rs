//! `build`'s compression options, as sload.f2fs's `-c -a -L -i -x -r`:
//! which files are compressed, how, and whether the blocks compression
//! saves are given back.

use clap::Args;
use f2fuse_engine::{CompressOptions, Error, Fs};
use f2fuse_layout::compress::CompressAlgorithm;
use f2fuse_layout::{feature, inode_flag};

#[derive(Args, Default)]
pub struct CompressArgs {
    /// Compress regular files (sload.f2fs -c). A formatted image gets the
    /// compression feature (with extra_attr); an existing one must have it.
    #[arg(short = 'c', long = "compress")]
    pub enabled: bool,
    /// Compression algorithm: lzo, lz4 (default), zstd or lzo-rle.
    #[arg(short = 'a', long = "compress-algorithm", value_name = "ALGORITHM", requires = "enabled", value_parser = parse_algorithm)]
    pub algorithm: Option<CompressAlgorithm>,
    /// log2 of the blocks per cluster, 2 to 8 (default 2: 16 KiB clusters).
    #[arg(short = 'L', long = "compress-log-size", value_name = "LOG", requires = "enabled", value_parser = clap::value_parser!(u8).range(2..=8))]
    pub log_cluster_size: Option<u8>,
    /// Compress only files with this extension (repeatable; as sload.f2fs,
    /// the text after the last dot, case-sensitive).
    #[arg(
        short = 'i',
        long = "compress-only",
        value_name = "EXT",
        requires = "enabled",
        conflicts_with = "exclude"
    )]
    pub include: Vec<String>,
    /// Compress every file except those with this extension (repeatable).
    #[arg(
        short = 'x',
        long = "compress-except",
        value_name = "EXT",
        requires = "enabled"
    )]
    pub exclude: Vec<String>,
    /// Give back the blocks compression saves, as sload.f2fs -r: the
    /// compressed files become read-only (F2FS_IOC_RESERVE_COMPRESS_BLOCKS
    /// makes them writable again).
    #[arg(short = 'r', long = "compress-release", requires = "enabled")]
    pub release: bool,
}

fn parse_algorithm(name: &str) -> Result<CompressAlgorithm, String> {
    CompressAlgorithm::from_name(name)
        .ok_or_else(|| format!("unknown algorithm {name:?} (lzo, lz4, zstd or lzo-rle)"))
}

impl CompressArgs {
    /// Features a formatted image needs for these options.
    pub fn features(&self) -> u32 {
        if self.enabled {
            feature::EXTRA_ATTR | feature::COMPRESSION
        } else {
            0
        }
    }

    /// Checks that the image can hold compressed files and sets how new
    /// ones are compressed.
    pub fn configure(&self, fs: &Fs) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !fs.superblock().has_feature(feature::COMPRESSION) {
            return Err("--compress: the image has no compression feature (format it with -O extra_attr,compression)".into());
        }
        let defaults = CompressOptions::default();
        fs.set_compress_options(CompressOptions {
            algorithm: self.algorithm.unwrap_or(defaults.algorithm),
            log_cluster_size: self.log_cluster_size.unwrap_or(defaults.log_cluster_size),
            ..defaults
        })
        .map_err(|e| format!("--compress: {e}"))
    }

    /// sload.f2fs's choice for a file named `name`: by the text after its
    /// last dot (none without a dot), compared exactly.
    fn wants(&self, name: &[u8]) -> bool {
        let ext = name
            .iter()
            .rposition(|&b| b == b'.')
            .map(|dot| &name[dot + 1..]);
        let listed = |list: &[String]| ext.is_some_and(|e| list.iter().any(|l| l.as_bytes() == e));
        self.enabled
            && if self.include.is_empty() {
                !listed(&self.exclude)
            } else {
                listed(&self.include)
            }
    }

    /// Gives new, empty file `ino` named `name` compression if it is to be
    /// compressed (before its data is written).
    pub fn start_file(&self, fs: &Fs, ino: u32, name: &[u8]) -> Result<(), Error> {
        if self.wants(name) {
            let flags = fs.get_flags(&fs.inode(ino)?);
            fs.set_flags(ino, flags | inode_flag::COMPR)?;
        }
        Ok(())
    }

    /// After file `ino` is complete: releases its saved blocks if asked.
    pub fn finish_file(&self, fs: &Fs, ino: u32) -> Result<(), Error> {
        if self.release && fs.inode(ino)?.compression.is_some() {
            fs.release_compress_blocks(ino)?;
        }
        Ok(())
    }
}
