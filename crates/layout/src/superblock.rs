//! The superblock (`struct f2fs_super_block`): 3072 bytes at byte 1024 of blocks 0 and 1.

use crate::consts::*;
use crate::crc::f2fs_checksum;
use crate::ensure;
use crate::error::{Corrupt, Result};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// One entry of the multi-device list.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
pub struct DeviceEntry {
    pub path: [u8; MAX_PATH_LEN],
    pub total_segments: U32,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone)]
#[repr(C)]
pub struct SuperBlock {
    pub magic: U32,
    pub major_ver: U16,
    pub minor_ver: U16,
    pub log_sectorsize: U32,
    pub log_sectors_per_block: U32,
    pub log_blocksize: U32,
    pub log_blocks_per_seg: U32,
    pub segs_per_sec: U32,
    pub secs_per_zone: U32,
    pub checksum_offset: U32,
    pub block_count: U64,
    pub section_count: U32,
    pub segment_count: U32,
    pub segment_count_ckpt: U32,
    pub segment_count_sit: U32,
    pub segment_count_nat: U32,
    pub segment_count_ssa: U32,
    pub segment_count_main: U32,
    pub segment0_blkaddr: U32,
    pub cp_blkaddr: U32,
    pub sit_blkaddr: U32,
    pub nat_blkaddr: U32,
    pub ssa_blkaddr: U32,
    pub main_blkaddr: U32,
    pub root_ino: U32,
    pub node_ino: U32,
    pub meta_ino: U32,
    pub uuid: [u8; 16],
    pub volume_name: [U16; MAX_VOLUME_NAME],
    pub extension_count: U32,
    pub extension_list: [[u8; F2FS_EXTENSION_LEN]; MAX_EXTENSION],
    pub cp_payload: U32,
    pub version: [u8; VERSION_LEN],
    pub init_version: [u8; VERSION_LEN],
    pub feature: U32,
    pub encryption_level: u8,
    pub encrypt_pw_salt: [u8; 16],
    pub devs: [DeviceEntry; MAX_DEVICES],
    pub qf_ino: [U32; 3],
    pub hot_ext_count: u8,
    pub s_encoding: U16,
    pub s_encoding_flags: U16,
    pub s_stop_reason: [u8; 32],
    pub s_errors: [u8; 16],
    pub reserved: [u8; 258],
    pub crc: U32,
}

const _: () = {
    assert!(core::mem::size_of::<SuperBlock>() == F2FS_SUPER_SIZE);
    assert!(core::mem::offset_of!(SuperBlock, block_count) == 0x24);
    assert!(core::mem::offset_of!(SuperBlock, uuid) == 0x6C);
    assert!(core::mem::offset_of!(SuperBlock, extension_count) == 0x47C);
    assert!(core::mem::offset_of!(SuperBlock, cp_payload) == 0x680);
    assert!(core::mem::offset_of!(SuperBlock, feature) == 0x884);
    assert!(core::mem::offset_of!(SuperBlock, devs) == 0x899);
    assert!(core::mem::offset_of!(SuperBlock, hot_ext_count) == 0xAC5);
    assert!(core::mem::offset_of!(SuperBlock, crc) == 0xBFC);
};

/// Byte range of the superblock checksum when `sb_checksum` is on.
pub const SB_CHKSUM_OFFSET: usize = 0xBFC;

impl SuperBlock {
    /// Decodes a superblock from the 4 KiB block that holds it (at byte 1024).
    pub fn from_block(block: &[u8]) -> Result<SuperBlock> {
        ensure!(
            block.len() >= F2FS_SUPER_OFFSET + F2FS_SUPER_SIZE,
            "superblock",
            "block too short ({} bytes)",
            block.len()
        );
        let bytes = &block[F2FS_SUPER_OFFSET..F2FS_SUPER_OFFSET + F2FS_SUPER_SIZE];
        Ok(SuperBlock::read_from_bytes(bytes).expect("length checked"))
    }

    /// Encodes into a full block: 1024 zero bytes, the superblock, zero fill.
    pub fn to_block(&self) -> Vec<u8> {
        let mut block = vec![0u8; F2FS_BLKSIZE];
        block[F2FS_SUPER_OFFSET..F2FS_SUPER_OFFSET + F2FS_SUPER_SIZE]
            .copy_from_slice(self.as_bytes());
        block
    }

    pub fn has_feature(&self, bit: u32) -> bool {
        self.feature.get() & bit != 0
    }

    /// Computes and stores the CRC when the `sb_checksum` feature is on.
    pub fn update_checksum(&mut self) {
        if self.has_feature(feature::SB_CHKSUM) {
            self.checksum_offset.set(SB_CHKSUM_OFFSET as u32);
            let crc = f2fs_checksum(&self.as_bytes()[..SB_CHKSUM_OFFSET]);
            self.crc.set(crc);
        }
    }

    pub fn volume_label(&self) -> String {
        let units: Vec<u16> = self
            .volume_name
            .iter()
            .map(|u| u.get())
            .take_while(|&u| u != 0)
            .collect();
        String::from_utf16_lossy(&units)
    }

    pub fn set_volume_label(&mut self, label: &str) -> Result<()> {
        let units: Vec<u16> = label.encode_utf16().collect();
        ensure!(
            units.len() < MAX_VOLUME_NAME,
            "superblock",
            "volume label longer than {} UTF-16 units",
            MAX_VOLUME_NAME - 1
        );
        for (slot, unit) in self.volume_name.iter_mut().enumerate() {
            unit.set(units.get(slot).copied().unwrap_or(0));
        }
        Ok(())
    }

    /// Extension strings: (cold list, hot list).
    pub fn extensions(&self) -> (Vec<String>, Vec<String>) {
        let cold = self.extension_count.get() as usize;
        let hot = self.hot_ext_count as usize;
        let names: Vec<String> = self
            .extension_list
            .iter()
            .take((cold + hot).min(MAX_EXTENSION))
            .map(|raw| {
                let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                String::from_utf8_lossy(&raw[..len]).into_owned()
            })
            .collect();
        let split = cold.min(names.len());
        (names[..split].to_vec(), names[split..].to_vec())
    }

    pub fn uuid_string(&self) -> String {
        let u = &self.uuid;
        format!(
            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]
        )
    }

    pub fn version_string(&self) -> String {
        c_string(&self.version)
    }

    pub fn sit_blocks_per_copy(&self) -> u32 {
        (self.segment_count_sit.get() / 2) << F2FS_LOG_BLOCKS_PER_SEG
    }

    pub fn nat_blocks_per_copy(&self) -> u32 {
        (self.segment_count_nat.get() / 2) << F2FS_LOG_BLOCKS_PER_SEG
    }

    /// One past the largest node id the NAT can hold.
    pub fn max_nid(&self) -> u32 {
        NAT_ENTRY_PER_BLOCK * self.nat_blocks_per_copy()
    }

    pub fn main_end_blkaddr(&self) -> u64 {
        self.main_blkaddr.get() as u64
            + ((self.segment_count_main.get() as u64) << F2FS_LOG_BLOCKS_PER_SEG)
    }

    /// Checks everything the kernel checks before trusting a superblock copy.
    pub fn validate(&self) -> Result<()> {
        self.validate_inner().map_err(|e| e.at("superblock"))
    }

    fn validate_inner(&self) -> Result<()> {
        const S: &str = "superblock";
        ensure!(
            self.magic.get() == F2FS_SUPER_MAGIC,
            S,
            "bad magic {:#010x} (expected {:#010x})",
            self.magic.get(),
            F2FS_SUPER_MAGIC
        );
        if self.has_feature(feature::SB_CHKSUM) {
            ensure!(
                self.checksum_offset.get() as usize == SB_CHKSUM_OFFSET,
                S,
                "checksum_offset {} (expected {SB_CHKSUM_OFFSET})",
                self.checksum_offset.get()
            );
            let crc = f2fs_checksum(&self.as_bytes()[..SB_CHKSUM_OFFSET]);
            ensure!(
                crc == self.crc.get(),
                S,
                "CRC mismatch: stored {:#010x}, computed {crc:#010x}",
                self.crc.get()
            );
        }
        ensure!(
            self.log_blocksize.get() == F2FS_BLKSIZE_BITS,
            S,
            "log_blocksize {} (only 4 KiB blocks exist)",
            self.log_blocksize.get()
        );
        ensure!(
            self.log_blocks_per_seg.get() == F2FS_LOG_BLOCKS_PER_SEG,
            S,
            "log_blocks_per_seg {} (must be 9)",
            self.log_blocks_per_seg.get()
        );
        let log_sector = self.log_sectorsize.get();
        ensure!(
            (9..=12).contains(&log_sector)
                && log_sector.checked_add(self.log_sectors_per_block.get())
                    == Some(F2FS_BLKSIZE_BITS),
            S,
            "log_sectorsize {} with log_sectors_per_block {}",
            log_sector,
            self.log_sectors_per_block.get()
        );
        let segment_count = self.segment_count.get();
        ensure!(
            (F2FS_MIN_SEGMENTS..=F2FS_MAX_SEGMENT).contains(&segment_count),
            S,
            "segment_count {segment_count} out of range"
        );
        let segs_per_sec = self.segs_per_sec.get();
        let secs_per_zone = self.secs_per_zone.get();
        let section_count = self.section_count.get();
        let main = self.segment_count_main.get();
        ensure!(
            segs_per_sec > 0 && segs_per_sec <= segment_count,
            S,
            "segs_per_sec {segs_per_sec}"
        );
        ensure!(
            section_count >= 1 && section_count <= main,
            S,
            "section_count {section_count} with segment_count_main {main}"
        );
        ensure!(
            main as u64 == section_count as u64 * segs_per_sec as u64,
            S,
            "segment_count_main {main} != section_count {section_count} * segs_per_sec {segs_per_sec}"
        );
        ensure!(
            segment_count / segs_per_sec >= section_count,
            S,
            "segment_count {segment_count} too small for {section_count} sections"
        );
        ensure!(
            segment_count as u64 <= self.block_count.get() >> F2FS_LOG_BLOCKS_PER_SEG,
            S,
            "segment_count {segment_count} exceeds block_count {}",
            self.block_count.get()
        );
        ensure!(
            secs_per_zone > 0 && secs_per_zone <= section_count,
            S,
            "secs_per_zone {secs_per_zone}"
        );
        let (cold, hot) = (
            self.extension_count.get() as usize,
            self.hot_ext_count as usize,
        );
        ensure!(
            cold <= MAX_EXTENSION && hot <= MAX_EXTENSION && cold + hot <= MAX_EXTENSION,
            S,
            "extension counts {cold} cold + {hot} hot exceed {MAX_EXTENSION}"
        );
        ensure!(
            self.cp_payload.get() < BLOCKS_PER_SEG - 2 - 6,
            S,
            "cp_payload {} too large",
            self.cp_payload.get()
        );
        ensure!(
            self.node_ino.get() == F2FS_NODE_INO
                && self.meta_ino.get() == F2FS_META_INO
                && self.root_ino.get() == F2FS_ROOT_INO,
            S,
            "reserved inode numbers node={} meta={} root={} (expected 1, 2, 3)",
            self.node_ino.get(),
            self.meta_ino.get(),
            self.root_ino.get()
        );
        ensure!(
            self.segment_count_ckpt.get() == 2,
            S,
            "segment_count_ckpt {} (expected 2)",
            self.segment_count_ckpt.get()
        );
        ensure!(
            self.segment_count_sit.get() >= 2
                && self.segment_count_sit.get().is_multiple_of(2)
                && self.segment_count_nat.get() >= 2
                && self.segment_count_nat.get().is_multiple_of(2)
                && self.segment_count_ssa.get() >= 1,
            S,
            "metadata segment counts sit={} nat={} ssa={}",
            self.segment_count_sit.get(),
            self.segment_count_nat.get(),
            self.segment_count_ssa.get()
        );
        ensure!(
            self.segment_count_ssa.get() as u64 * BLOCKS_PER_SEG as u64 >= main as u64,
            S,
            "SSA area ({} segments) cannot describe {main} main segments",
            self.segment_count_ssa.get()
        );
        // The areas must follow each other without gaps.
        let seg = BLOCKS_PER_SEG as u64;
        let segment0 = self.segment0_blkaddr.get() as u64;
        let chain = [
            ("cp_blkaddr", self.cp_blkaddr.get() as u64, segment0),
            (
                "sit_blkaddr",
                self.sit_blkaddr.get() as u64,
                segment0 + self.segment_count_ckpt.get() as u64 * seg,
            ),
            (
                "nat_blkaddr",
                self.nat_blkaddr.get() as u64,
                self.sit_blkaddr.get() as u64 + self.segment_count_sit.get() as u64 * seg,
            ),
            (
                "ssa_blkaddr",
                self.ssa_blkaddr.get() as u64,
                self.nat_blkaddr.get() as u64 + self.segment_count_nat.get() as u64 * seg,
            ),
            (
                "main_blkaddr",
                self.main_blkaddr.get() as u64,
                self.ssa_blkaddr.get() as u64 + self.segment_count_ssa.get() as u64 * seg,
            ),
        ];
        for (field, actual, expected) in chain {
            ensure!(
                actual == expected,
                S,
                "{field} {actual} (areas must be contiguous: expected {expected})"
            );
        }
        ensure!(
            segment0 >= 2,
            S,
            "segment0_blkaddr {segment0} overlaps the superblocks"
        );
        let fs_end = segment0 + segment_count as u64 * seg;
        ensure!(
            self.main_end_blkaddr() <= fs_end,
            S,
            "main area ends at blkaddr {} beyond segment_count end {fs_end}",
            self.main_end_blkaddr()
        );
        ensure!(
            fs_end <= self.block_count.get(),
            S,
            "file system end {fs_end} beyond block_count {}",
            self.block_count.get()
        );
        // Readers index the SIT and the NAT by these capacities.
        let sit_entries = (self.segment_count_sit.get() as u64 / 2)
            * BLOCKS_PER_SEG as u64
            * SIT_ENTRY_PER_BLOCK as u64;
        ensure!(
            sit_entries >= main as u64,
            S,
            "SIT area ({} segments) cannot describe {main} main segments",
            self.segment_count_sit.get()
        );
        let nids = (self.segment_count_nat.get() as u64 / 2)
            * BLOCKS_PER_SEG as u64
            * NAT_ENTRY_PER_BLOCK as u64;
        ensure!(
            nids <= u32::MAX as u64,
            S,
            "segment_count_nat {} holds {nids} nids, more than 32 bits can number",
            self.segment_count_nat.get()
        );
        Ok(())
    }
}

fn c_string(bytes: &[u8]) -> String {
    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..len]).into_owned()
}

/// The extension lists mkfs.f2fs 1.15 writes by default: (cold, hot).
pub const DEFAULT_COLD_EXTENSIONS: &[&str] = &[
    "mp", "wm", "og", "jp", "avi", "m4v", "m4p", "mkv", "mov", "webm", "wav", "m4a", "3gp", "opus",
    "flac", "gif", "png", "svg", "webp", "jar", "deb", "iso", "gz", "xz", "zst", "pdf", "pyc",
    "ttc", "ttf", "exe", "apk", "cnt", "exo", "odex", "vdex", "so",
];
pub const DEFAULT_HOT_EXTENSIONS: &[&str] = &["db", "vmdk", "vdi", "qcow2"];

/// Decodes the copy at block 0 or 1 and validates it, naming the copy in errors.
pub fn decode_superblock_copy(
    block: &[u8],
    copy: usize,
) -> std::result::Result<SuperBlock, Corrupt> {
    let sb = SuperBlock::from_block(block)
        .map_err(|e| e.at(format!("superblock copy #{}", copy + 1)))?;
    sb.validate_inner()
        .map_err(|e| e.at(format!("superblock copy #{}", copy + 1)))?;
    Ok(sb)
}
