//! Format constants, named as in the kernel's `include/linux/f2fs_fs.h` where one exists.

/// Superblock magic; also the CRC seed for superblock and checkpoint checksums.
pub const F2FS_SUPER_MAGIC: u32 = 0xF2F5_2010;
/// Magic at the start of an xattr buffer.
pub const F2FS_XATTR_MAGIC: u32 = 0xF2F5_2011;

pub const F2FS_BLKSIZE: usize = 4096;
pub const F2FS_BLKSIZE_BITS: u32 = 12;
pub const F2FS_LOG_BLOCKS_PER_SEG: u32 = 9;
pub const BLOCKS_PER_SEG: u32 = 512;
pub const F2FS_SEGSIZE: u64 = (BLOCKS_PER_SEG as u64) * F2FS_BLKSIZE as u64;
/// Byte offset of each superblock copy inside blocks 0 and 1.
pub const F2FS_SUPER_OFFSET: usize = 1024;
pub const F2FS_SUPER_SIZE: usize = 3072;
/// 32-bit block addresses limit a device to this many segments (16 TiB).
pub const F2FS_MAX_SEGMENT: u32 = 8_388_608;
pub const F2FS_MIN_SEGMENTS: u32 = 9;

/// Special block addresses.
pub const NULL_ADDR: u32 = 0;
pub const NEW_ADDR: u32 = 0xFFFF_FFFF;
pub const COMPRESS_ADDR: u32 = 0xFFFF_FFFE;

pub const NAT_ENTRY_SIZE: usize = 9;
pub const NAT_ENTRY_PER_BLOCK: u32 = 455;
pub const SIT_ENTRY_SIZE: usize = 74;
pub const SIT_ENTRY_PER_BLOCK: u32 = 55;
pub const SIT_VBLOCK_MAP_SIZE: usize = 64;
pub const SUMMARY_SIZE: usize = 7;
pub const ENTRIES_IN_SUM: usize = 512;
pub const SUM_JOURNAL_SIZE: usize = 507;
pub const SUM_FOOTER_OFFSET: usize = 4091;
pub const NAT_JOURNAL_ENTRIES: usize = 38;
pub const SIT_JOURNAL_ENTRIES: usize = 6;
pub const F2FS_ORPHANS_PER_BLOCK: usize = 1020;

/// Address words in an inode before extra-attribute and inline carve-outs.
pub const DEF_ADDRS_PER_INODE: usize = 923;
pub const DEF_NIDS_PER_INODE: usize = 5;
pub const ADDRS_PER_BLOCK: u32 = 1018;
pub const NIDS_PER_BLOCK: u32 = 1018;
/// Default inline xattr area, in 4-byte words.
pub const DEFAULT_INLINE_XATTR_ADDRS: usize = 50;
pub const MAX_INLINE_XATTR_WORDS: usize = 903;
/// Largest `i_extra_isize` this format revision defines.
pub const F2FS_TOTAL_EXTRA_ATTR_SIZE: usize = 36;

/// Payload bytes of a node block; the 24-byte footer follows.
pub const NODE_PAYLOAD_SIZE: usize = 4072;
pub const NODE_FOOTER_SIZE: usize = 24;
/// Node offset of an xattr node (all 29 offset bits set).
pub const XATTR_NODE_OFFSET: u32 = 0x1FFF_FFFF;

pub const NR_DENTRY_IN_BLOCK: usize = 214;
pub const SIZE_OF_DIR_ENTRY: usize = 11;
pub const F2FS_SLOT_LEN: usize = 8;
pub const SIZE_OF_DENTRY_BITMAP: usize = 27;
pub const SIZE_OF_RESERVED: usize = 3;
pub const F2FS_NAME_LEN: usize = 255;
pub const MAX_DIR_HASH_DEPTH: u32 = 63;
/// Bytes per inline dentry: one dentry plus one name slot (the bitmap bit is counted apart).
pub const INLINE_DENTRY_BYTES: usize = SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN;

pub const F2FS_NODE_INO: u32 = 1;
pub const F2FS_META_INO: u32 = 2;
pub const F2FS_ROOT_INO: u32 = 3;

pub const NR_CURSEG_DATA_TYPE: usize = 3;
pub const NR_CURSEG_NODE_TYPE: usize = 3;
pub const NR_CURSEG_TYPE: usize = 6;
pub const MAX_ACTIVE_LOGS: usize = 16;
pub const MAX_EXTENSION: usize = 64;
pub const F2FS_EXTENSION_LEN: usize = 8;
pub const MAX_VOLUME_NAME: usize = 512;
pub const VERSION_LEN: usize = 256;
pub const MAX_DEVICES: usize = 8;
pub const MAX_PATH_LEN: usize = 64;
/// Largest symlink target the kernel writes.
pub const F2FS_MAX_SYMLINK_LEN: usize = 4095;

/// Checkpoint bitmap budget inside the 4 KiB header (see format doc 1.2 step 6).
pub const CP_BITMAP_OFFSET: usize = 192;
pub const CP_CHKSUM_OFFSET: usize = 4092;
pub const CP_MIN_CHKSUM_OFFSET: usize = CP_BITMAP_OFFSET;
pub const MAX_BITMAP_SIZE_IN_CKPT: usize = CP_CHKSUM_OFFSET - CP_BITMAP_OFFSET;
pub const MAX_SIT_BITMAP_SIZE_IN_CKPT: usize = MAX_BITMAP_SIZE_IN_CKPT - 64;

/// Current-segment (log) types, in the kernel's `CURSEG_*` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum CursegType {
    HotData = 0,
    WarmData = 1,
    ColdData = 2,
    HotNode = 3,
    WarmNode = 4,
    ColdNode = 5,
}

impl CursegType {
    pub const ALL: [CursegType; 6] = [
        CursegType::HotData,
        CursegType::WarmData,
        CursegType::ColdData,
        CursegType::HotNode,
        CursegType::WarmNode,
        CursegType::ColdNode,
    ];

    pub fn from_u8(value: u8) -> Option<Self> {
        Self::ALL.get(value as usize).copied()
    }

    pub fn is_node(self) -> bool {
        self as u8 >= CursegType::HotNode as u8
    }

    /// Index into the checkpoint's `cur_node_*` or `cur_data_*` arrays.
    pub fn cp_index(self) -> usize {
        (self as usize) % 3
    }

    pub fn name(self) -> &'static str {
        match self {
            CursegType::HotData => "hot data",
            CursegType::WarmData => "warm data",
            CursegType::ColdData => "cold data",
            CursegType::HotNode => "hot node",
            CursegType::WarmNode => "warm node",
            CursegType::ColdNode => "cold node",
        }
    }
}

/// Superblock feature bits.
pub mod feature {
    pub const ENCRYPT: u32 = 0x0001;
    pub const BLKZONED: u32 = 0x0002;
    pub const ATOMIC_WRITE: u32 = 0x0004;
    pub const EXTRA_ATTR: u32 = 0x0008;
    pub const PRJQUOTA: u32 = 0x0010;
    pub const INODE_CHKSUM: u32 = 0x0020;
    pub const FLEXIBLE_INLINE_XATTR: u32 = 0x0040;
    pub const QUOTA_INO: u32 = 0x0080;
    pub const INODE_CRTIME: u32 = 0x0100;
    pub const LOST_FOUND: u32 = 0x0200;
    pub const VERITY: u32 = 0x0400;
    pub const SB_CHKSUM: u32 = 0x0800;
    pub const CASEFOLD: u32 = 0x1000;
    pub const COMPRESSION: u32 = 0x2000;
    pub const RO: u32 = 0x4000;

    /// `mkfs -O` names, in bit order.
    pub const NAMES: &[(&str, u32)] = &[
        ("encrypt", ENCRYPT),
        ("blkzoned", BLKZONED),
        ("atomic_write", ATOMIC_WRITE),
        ("extra_attr", EXTRA_ATTR),
        ("project_quota", PRJQUOTA),
        ("inode_checksum", INODE_CHKSUM),
        ("flexible_inline_xattr", FLEXIBLE_INLINE_XATTR),
        ("quota", QUOTA_INO),
        ("inode_crtime", INODE_CRTIME),
        ("lost_found", LOST_FOUND),
        ("verity", VERITY),
        ("sb_checksum", SB_CHKSUM),
        ("casefold", CASEFOLD),
        ("compression", COMPRESSION),
        ("ro", RO),
    ];

    /// Human-readable list of the set bits, e.g. "extra_attr,inode_checksum".
    pub fn describe(bits: u32) -> String {
        let mut names: Vec<String> = NAMES
            .iter()
            .filter(|(_, bit)| bits & bit != 0)
            .map(|(name, _)| (*name).to_string())
            .collect();
        let unknown = bits & !NAMES.iter().fold(0, |acc, (_, bit)| acc | bit);
        if unknown != 0 {
            names.push(format!("unknown({unknown:#x})"));
        }
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// Checkpoint flags (`ckpt_flags`).
pub mod cp_flag {
    pub const UMOUNT: u32 = 0x0001;
    pub const ORPHAN_PRESENT: u32 = 0x0002;
    pub const COMPACT_SUM: u32 = 0x0004;
    pub const ERROR: u32 = 0x0008;
    pub const FSCK: u32 = 0x0010;
    pub const FASTBOOT: u32 = 0x0020;
    pub const CRC_RECOVERY: u32 = 0x0040;
    pub const NAT_BITS: u32 = 0x0080;
    pub const TRIMMED: u32 = 0x0100;
    pub const NOCRC_RECOVERY: u32 = 0x0200;
    pub const LARGE_NAT_BITMAP: u32 = 0x0400;
    pub const QUOTA_NEED_FSCK: u32 = 0x0800;
    pub const DISABLED: u32 = 0x1000;
    pub const DISABLED_QUICK: u32 = 0x2000;
    pub const RESIZEFS: u32 = 0x4000;

    pub const NAMES: &[(&str, u32)] = &[
        ("umount", UMOUNT),
        ("orphan_present", ORPHAN_PRESENT),
        ("compacted_summary", COMPACT_SUM),
        ("error", ERROR),
        ("fsck", FSCK),
        ("fastboot", FASTBOOT),
        ("crc_recovery", CRC_RECOVERY),
        ("nat_bits", NAT_BITS),
        ("trimmed", TRIMMED),
        ("nocrc_recovery", NOCRC_RECOVERY),
        ("large_nat_bitmap", LARGE_NAT_BITMAP),
        ("quota_need_fsck", QUOTA_NEED_FSCK),
        ("disabled", DISABLED),
        ("disabled_quick", DISABLED_QUICK),
        ("resizefs", RESIZEFS),
    ];

    pub fn describe(bits: u32) -> String {
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(_, bit)| bits & bit != 0)
            .map(|(name, _)| *name)
            .collect();
        names.join("|")
    }
}

/// `i_inline` bits.
pub mod inline_flag {
    pub const INLINE_XATTR: u8 = 0x01;
    pub const INLINE_DATA: u8 = 0x02;
    pub const INLINE_DENTRY: u8 = 0x04;
    pub const DATA_EXIST: u8 = 0x08;
    pub const INLINE_DOTS: u8 = 0x10;
    pub const EXTRA_ATTR: u8 = 0x20;
    pub const PIN_FILE: u8 = 0x40;
    pub const COMPRESS_RELEASED: u8 = 0x80;
}

/// `i_advise` (FADVISE) bits.
pub mod fadvise {
    pub const COLD: u8 = 0x01;
    pub const LOST_PINO: u8 = 0x02;
    pub const ENCRYPT: u8 = 0x04;
    pub const ENC_NAME: u8 = 0x08;
    pub const KEEP_SIZE: u8 = 0x10;
    pub const HOT: u8 = 0x20;
    pub const VERITY: u8 = 0x40;
    pub const TRUNC: u8 = 0x80;
}

/// `i_flags` bits (FS_*_FL compatible).
pub mod inode_flag {
    pub const COMPR: u32 = 0x0000_0004;
    pub const SYNC: u32 = 0x0000_0008;
    pub const IMMUTABLE: u32 = 0x0000_0010;
    pub const APPEND: u32 = 0x0000_0020;
    pub const NODUMP: u32 = 0x0000_0040;
    pub const NOATIME: u32 = 0x0000_0080;
    pub const NOCOMP: u32 = 0x0000_0400;
    pub const INDEX: u32 = 0x0000_1000;
    pub const DIRSYNC: u32 = 0x0001_0000;
    pub const PROJINHERIT: u32 = 0x2000_0000;
    pub const CASEFOLD: u32 = 0x4000_0000;
}

/// Dentry `file_type` values.
pub mod file_type {
    pub const UNKNOWN: u8 = 0;
    pub const REG_FILE: u8 = 1;
    pub const DIR: u8 = 2;
    pub const CHRDEV: u8 = 3;
    pub const BLKDEV: u8 = 4;
    pub const FIFO: u8 = 5;
    pub const SOCK: u8 = 6;
    pub const SYMLINK: u8 = 7;
    pub const MAX: u8 = 8;
}

/// POSIX mode type bits.
pub mod mode {
    pub const S_IFMT: u16 = 0o170000;
    pub const S_IFSOCK: u16 = 0o140000;
    pub const S_IFLNK: u16 = 0o120000;
    pub const S_IFREG: u16 = 0o100000;
    pub const S_IFBLK: u16 = 0o060000;
    pub const S_IFDIR: u16 = 0o040000;
    pub const S_IFCHR: u16 = 0o020000;
    pub const S_IFIFO: u16 = 0o010000;
}

/// The dentry file type that must accompany an inode mode, or `None` for an invalid type.
pub fn file_type_of_mode(i_mode: u16) -> Option<u8> {
    Some(match i_mode & mode::S_IFMT {
        mode::S_IFREG => file_type::REG_FILE,
        mode::S_IFDIR => file_type::DIR,
        mode::S_IFCHR => file_type::CHRDEV,
        mode::S_IFBLK => file_type::BLKDEV,
        mode::S_IFIFO => file_type::FIFO,
        mode::S_IFSOCK => file_type::SOCK,
        mode::S_IFLNK => file_type::SYMLINK,
        _ => return None,
    })
}

/// Node footer flag bits (low 3 bits; the node offset sits above them).
pub mod node_flag {
    pub const COLD_BIT_SHIFT: u32 = 0;
    pub const FSYNC_BIT_SHIFT: u32 = 1;
    pub const DENT_BIT_SHIFT: u32 = 2;
    pub const OFFSET_BIT_SHIFT: u32 = 3;
}

/// Xattr name indexes.
pub mod xattr_index {
    pub const USER: u8 = 1;
    pub const POSIX_ACL_ACCESS: u8 = 2;
    pub const POSIX_ACL_DEFAULT: u8 = 3;
    pub const TRUSTED: u8 = 4;
    pub const LUSTRE: u8 = 5;
    pub const SECURITY: u8 = 6;
    pub const ADVISE: u8 = 7;
    pub const ENCRYPTION: u8 = 9;
    pub const VERITY: u8 = 11;
}
