//! The compression feature's on-disk parts (Linux 6.1 `fs/f2fs/compress.c`,
//! `f2fs.h`): the per-inode fields in the extra attribute area, the header
//! that starts the payload of a compressed cluster, and its checksum.
//! Cluster slots themselves are ordinary address words: `COMPRESS_ADDR`
//! marks slot 0 of a compressed cluster, `NEW_ADDR` the saved slots.

use crate::consts::*;
use crate::crc::f2fs_crc32;
use crate::ensure;
use crate::error::Result;
use crate::node::{Inode, I_ADDR_OFFSET};
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Offsets of the compression fields in the inode (extra attribute area).
pub const I_COMPR_BLOCKS_OFFSET: usize = I_ADDR_OFFSET + 24;
pub const I_COMPRESS_ALGORITHM_OFFSET: usize = I_ADDR_OFFSET + 32;
pub const I_LOG_CLUSTER_SIZE_OFFSET: usize = I_ADDR_OFFSET + 33;
pub const I_COMPRESS_FLAG_OFFSET: usize = I_ADDR_OFFSET + 34;
/// The kernel treats an inode as compressed only if `i_extra_isize` reaches
/// past `i_log_cluster_size` (F2FS_FITS_IN_INODE).
pub const MIN_COMPRESS_EXTRA_ISIZE: usize = I_LOG_CLUSTER_SIZE_OFFSET + 1 - I_ADDR_OFFSET;

/// Cluster sizes: 2^2 .. 2^8 pages.
pub const MIN_COMPRESS_LOG_SIZE: u8 = 2;
pub const MAX_COMPRESS_LOG_SIZE: u8 = 8;

/// `i_compress_flag` bit 0: the header carries a CRC of the payload.
pub const COMPRESS_CHKSUM: u16 = 0x1;
/// The level is the flag word's high byte. (The kernel header's comment
/// says bits 10..15; its code, and kernel-written images, use bit 8.)
pub const COMPRESS_LEVEL_OFFSET: u16 = 8;

/// `struct compress_data` without its payload: 24 bytes.
pub const COMPRESS_HEADER_SIZE: usize = 24;

/// `i_compress_algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressAlgorithm {
    Lzo = 0,
    Lz4 = 1,
    Zstd = 2,
    LzoRle = 3,
}

impl CompressAlgorithm {
    pub const ALL: [CompressAlgorithm; 4] = [
        CompressAlgorithm::Lzo,
        CompressAlgorithm::Lz4,
        CompressAlgorithm::Zstd,
        CompressAlgorithm::LzoRle,
    ];

    pub fn from_u8(value: u8) -> Option<CompressAlgorithm> {
        CompressAlgorithm::ALL.get(value as usize).copied()
    }

    /// The name the kernel's `compress_algorithm=` mount option uses.
    pub fn name(self) -> &'static str {
        match self {
            CompressAlgorithm::Lzo => "lzo",
            CompressAlgorithm::Lz4 => "lz4",
            CompressAlgorithm::Zstd => "zstd",
            CompressAlgorithm::LzoRle => "lzo-rle",
        }
    }

    pub fn from_name(name: &str) -> Option<CompressAlgorithm> {
        CompressAlgorithm::ALL
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// The compression state of one inode, as its extra attribute area stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeCompression {
    pub algorithm: CompressAlgorithm,
    /// log2 of the pages per cluster.
    pub log_cluster_size: u8,
    /// `i_compress_flag`: checksum bit and level.
    pub flag: u16,
    /// Blocks saved: the `COMPRESS_ADDR` and `NEW_ADDR` slots of the
    /// compressed clusters (0 once released).
    pub compr_blocks: u64,
    /// `F2FS_COMPRESS_RELEASED`: the saved blocks were given back.
    pub released: bool,
}

fn field<const N: usize>(raw: &[u8], offset: usize) -> [u8; N] {
    raw[offset..offset + N]
        .try_into()
        .expect("inside the inode")
}

impl InodeCompression {
    /// The compression state of an inode flagged `F2FS_COMPR_FL` on an
    /// image with the compression feature, checked as the kernel's
    /// `sanity_check_inode` does; `None` where the kernel does not treat
    /// the inode as compressed (flag, feature or extra space missing).
    pub fn of(inode: &Inode, features: u32) -> Result<Option<InodeCompression>> {
        let raw = inode.as_bytes();
        let extra_isize = u16::from_le_bytes(field(raw, I_ADDR_OFFSET)) as usize;
        if features & feature::COMPRESSION == 0
            || inode.i_flags.get() & inode_flag::COMPR == 0
            || inode.i_inline & inline_flag::EXTRA_ATTR == 0
            || extra_isize < MIN_COMPRESS_EXTRA_ISIZE
        {
            return Ok(None);
        }
        let algorithm_byte = raw[I_COMPRESS_ALGORITHM_OFFSET];
        let algorithm = CompressAlgorithm::from_u8(algorithm_byte).ok_or_else(|| {
            crate::Corrupt::new(
                "inode",
                format!("unknown compression algorithm {algorithm_byte}"),
            )
        })?;
        let log_cluster_size = raw[I_LOG_CLUSTER_SIZE_OFFSET];
        ensure!(
            (MIN_COMPRESS_LOG_SIZE..=MAX_COMPRESS_LOG_SIZE).contains(&log_cluster_size),
            "inode",
            "i_log_cluster_size {log_cluster_size} outside {MIN_COMPRESS_LOG_SIZE}..={MAX_COMPRESS_LOG_SIZE}"
        );
        let compr_blocks = u64::from_le_bytes(field(raw, I_COMPR_BLOCKS_OFFSET));
        let blocks = inode.i_blocks.get();
        ensure!(
            compr_blocks < blocks,
            "inode",
            "i_compr_blocks {compr_blocks} not below i_blocks {blocks}"
        );
        ensure!(
            inode.i_inline & inline_flag::INLINE_DATA == 0,
            "inode",
            "a compressed file with inline data"
        );
        // The flag word exists only when i_extra_isize covers it.
        let flag = if extra_isize >= I_COMPRESS_FLAG_OFFSET + 2 - I_ADDR_OFFSET {
            u16::from_le_bytes(field(raw, I_COMPRESS_FLAG_OFFSET))
        } else {
            0
        };
        Ok(Some(InodeCompression {
            algorithm,
            log_cluster_size,
            flag,
            compr_blocks,
            released: inode.i_inline & inline_flag::COMPRESS_RELEASED != 0,
        }))
    }

    /// Stores the fields (not the RELEASED bit) in an inode whose extra
    /// attribute area covers them.
    pub fn store(&self, inode: &mut Inode) {
        let raw = inode.as_mut_bytes();
        raw[I_COMPR_BLOCKS_OFFSET..I_COMPR_BLOCKS_OFFSET + 8]
            .copy_from_slice(&self.compr_blocks.to_le_bytes());
        raw[I_COMPRESS_ALGORITHM_OFFSET] = self.algorithm as u8;
        raw[I_LOG_CLUSTER_SIZE_OFFSET] = self.log_cluster_size;
        raw[I_COMPRESS_FLAG_OFFSET..I_COMPRESS_FLAG_OFFSET + 2]
            .copy_from_slice(&self.flag.to_le_bytes());
    }

    /// Pages (blocks) per cluster.
    pub fn cluster_blocks(&self) -> u64 {
        1 << self.log_cluster_size
    }

    pub fn has_checksum(&self) -> bool {
        self.flag & COMPRESS_CHKSUM != 0
    }

    pub fn level(&self) -> u8 {
        (self.flag >> COMPRESS_LEVEL_OFFSET) as u8
    }
}

/// `struct compress_data`'s header: payload length and optional checksum.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Debug, Default)]
#[repr(C)]
pub struct CompressHeader {
    pub clen: U32,
    pub chksum: U32,
    pub reserved: [U32; 4],
}

const _: () = assert!(core::mem::size_of::<CompressHeader>() == COMPRESS_HEADER_SIZE);

/// The checksum a header carries when `COMPRESS_CHKSUM` is set: the F2FS
/// CRC of the payload alone, seeded with the superblock magic.
pub fn compress_checksum(payload: &[u8]) -> u32 {
    f2fs_crc32(F2FS_SUPER_MAGIC, payload)
}

/// Splits the concatenated blocks of a compressed cluster into header and
/// payload, checking the length as the kernel does (`clen` must fit in the
/// blocks read) and, when `checksum` is asked for, the payload's CRC.
pub fn split_cluster(stream: &[u8], checksum: bool) -> Result<&[u8]> {
    ensure!(
        stream.len() >= COMPRESS_HEADER_SIZE,
        "compressed cluster",
        "{} bytes cannot hold the 24-byte header",
        stream.len()
    );
    let (header, rest) = CompressHeader::ref_from_prefix(stream).expect("length checked");
    let clen = header.clen.get() as usize;
    ensure!(
        clen <= rest.len(),
        "compressed cluster",
        "clen {clen} exceeds the {} payload bytes of its blocks",
        rest.len()
    );
    let payload = &rest[..clen];
    if checksum {
        let (stored, computed) = (header.chksum.get(), compress_checksum(payload));
        ensure!(
            stored == computed,
            "compressed cluster",
            "checksum {stored:#010x}, payload has {computed:#010x}"
        );
    }
    Ok(payload)
}

/// Builds the blocks of a compressed cluster: header, payload, zero padding
/// to a whole number of blocks.
pub fn build_cluster(payload: &[u8], checksum: bool) -> Vec<u8> {
    let len = (COMPRESS_HEADER_SIZE + payload.len()).next_multiple_of(F2FS_BLKSIZE);
    let mut out = vec![0u8; len];
    let header = CompressHeader {
        clen: U32::new(payload.len() as u32),
        chksum: U32::new(if checksum {
            compress_checksum(payload)
        } else {
            0
        }),
        reserved: Default::default(),
    };
    out[..COMPRESS_HEADER_SIZE].copy_from_slice(header.as_bytes());
    out[COMPRESS_HEADER_SIZE..COMPRESS_HEADER_SIZE + payload.len()].copy_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn field_offsets_match_the_format_doc() {
        assert_eq!(I_COMPR_BLOCKS_OFFSET, 0x180);
        assert_eq!(I_COMPRESS_ALGORITHM_OFFSET, 0x188);
        assert_eq!(I_LOG_CLUSTER_SIZE_OFFSET, 0x189);
        assert_eq!(I_COMPRESS_FLAG_OFFSET, 0x18A);
        assert_eq!(MIN_COMPRESS_EXTRA_ISIZE, 34);
    }

    fn compressed_inode(algorithm: u8, log: u8, blocks: u64, compr_blocks: u64) -> Inode {
        let mut inode = Inode::new_zeroed();
        inode.i_flags.set(inode_flag::COMPR);
        inode.i_inline = inline_flag::EXTRA_ATTR;
        inode.i_blocks.set(blocks);
        inode.i_addr[0].set(36);
        let raw = inode.as_mut_bytes();
        raw[I_COMPRESS_ALGORITHM_OFFSET] = algorithm;
        raw[I_LOG_CLUSTER_SIZE_OFFSET] = log;
        raw[I_COMPR_BLOCKS_OFFSET..I_COMPR_BLOCKS_OFFSET + 8]
            .copy_from_slice(&compr_blocks.to_le_bytes());
        raw[I_COMPRESS_FLAG_OFFSET..I_COMPRESS_FLAG_OFFSET + 2]
            .copy_from_slice(&0x0101u16.to_le_bytes());
        inode
    }

    #[test]
    fn inode_fields_are_checked_as_the_kernel_does() {
        let f = feature::EXTRA_ATTR | feature::COMPRESSION;
        let c = InodeCompression::of(&compressed_inode(2, 4, 368, 330), f)
            .unwrap()
            .unwrap();
        assert_eq!(c.algorithm, CompressAlgorithm::Zstd);
        assert_eq!(
            (c.cluster_blocks(), c.level(), c.has_checksum()),
            (16, 1, true)
        );
        assert!(
            InodeCompression::of(&compressed_inode(2, 4, 368, 330), feature::EXTRA_ATTR)
                .unwrap()
                .is_none()
        );
        for bad in [
            compressed_inode(4, 2, 10, 0),
            compressed_inode(1, 1, 10, 0),
            compressed_inode(1, 9, 10, 0),
            compressed_inode(1, 2, 10, 10),
        ] {
            assert!(InodeCompression::of(&bad, f).is_err());
        }
        let mut stored = Inode::new_zeroed();
        c.store(&mut stored);
        assert_eq!(
            stored.as_bytes()[I_COMPR_BLOCKS_OFFSET..I_COMPRESS_FLAG_OFFSET + 2],
            compressed_inode(2, 4, 368, 330).as_bytes()
                [I_COMPR_BLOCKS_OFFSET..I_COMPRESS_FLAG_OFFSET + 2]
        );
    }

    #[test]
    fn cluster_header_round_trips_and_rejects_bad_lengths_and_checksums() {
        let payload = b"\x28\xb5\x2f\xfd some payload";
        let blocks = build_cluster(payload, true);
        assert_eq!(blocks.len(), F2FS_BLKSIZE);
        assert_eq!(split_cluster(&blocks, true).unwrap(), payload);
        let mut bad_sum = blocks.clone();
        bad_sum[30] ^= 1;
        assert!(split_cluster(&bad_sum, true).is_err());
        assert!(split_cluster(&bad_sum, false).is_ok());
        let mut long = blocks.clone();
        long[..4].copy_from_slice(&4073u32.to_le_bytes());
        assert!(split_cluster(&long, false).is_err());
        assert!(split_cluster(&blocks[..10], false).is_err());
    }
}
