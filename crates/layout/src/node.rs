//! Node blocks: the footer every node carries, inodes, direct and indirect
//! nodes, node offsets, and the path from a file block index to its address.

use crate::consts::*;
use crate::crc::f2fs_crc32;
use crate::ensure;
use crate::error::Result;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `struct node_footer`, the last 24 bytes of every node block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct NodeFooter {
    pub nid: U32,
    pub ino: U32,
    /// COLD/FSYNC/DENT bits and the node offset above them.
    pub flag: U32,
    pub cp_ver: U64,
    pub next_blkaddr: U32,
}

impl NodeFooter {
    pub fn ofs(&self) -> u32 {
        self.flag.get() >> node_flag::OFFSET_BIT_SHIFT
    }

    pub fn is_cold(&self) -> bool {
        self.flag.get() & (1 << node_flag::COLD_BIT_SHIFT) != 0
    }

    pub fn is_fsync(&self) -> bool {
        self.flag.get() & (1 << node_flag::FSYNC_BIT_SHIFT) != 0
    }

    pub fn is_dent(&self) -> bool {
        self.flag.get() & (1 << node_flag::DENT_BIT_SHIFT) != 0
    }

    /// Sets the roll-forward marks: FSYNC (a whole fsync ends here) and
    /// DENT (recovery must also add the inode's directory entry).
    pub fn set_marks(&mut self, fsync: bool, dent: bool) {
        let bits = (1 << node_flag::FSYNC_BIT_SHIFT) | (1 << node_flag::DENT_BIT_SHIFT);
        let marks = (fsync as u32) << node_flag::FSYNC_BIT_SHIFT
            | (dent as u32) << node_flag::DENT_BIT_SHIFT;
        self.flag.set(self.flag.get() & !bits | marks);
    }

    pub fn set_ofs_and_cold(&mut self, ofs: u32, cold: bool) {
        self.flag
            .set((ofs << node_flag::OFFSET_BIT_SHIFT) | (cold as u32) << node_flag::COLD_BIT_SHIFT);
    }
}

/// Read-extent hint stored in the inode (`struct f2fs_extent`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Extent {
    pub fofs: U32,
    pub blk: U32,
    pub len: U32,
}

/// `struct f2fs_inode`: the 4072-byte payload of an inode block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone)]
#[repr(C)]
pub struct Inode {
    pub i_mode: U16,
    pub i_advise: u8,
    pub i_inline: u8,
    pub i_uid: U32,
    pub i_gid: U32,
    pub i_links: U32,
    pub i_size: U64,
    pub i_blocks: U64,
    pub i_atime: U64,
    pub i_ctime: U64,
    pub i_mtime: U64,
    pub i_atime_nsec: U32,
    pub i_ctime_nsec: U32,
    pub i_mtime_nsec: U32,
    pub i_generation: U32,
    /// Directories: hash levels in use. Regular files: low 16 bits are `i_gc_failures`.
    pub i_current_depth: U32,
    pub i_xattr_nid: U32,
    pub i_flags: U32,
    pub i_pino: U32,
    pub i_namelen: U32,
    pub i_name: [u8; F2FS_NAME_LEN],
    pub i_dir_level: u8,
    pub i_ext: Extent,
    pub i_addr: [U32; DEF_ADDRS_PER_INODE],
    pub i_nid: [U32; DEF_NIDS_PER_INODE],
}

/// Byte offset of `i_addr` in the inode, where the extra attribute area starts.
pub const I_ADDR_OFFSET: usize = 0x168;
/// Offsets of extra-attribute fields (relative to the inode start).
pub const I_EXTRA_ISIZE_OFFSET: usize = I_ADDR_OFFSET;
pub const I_INLINE_XATTR_SIZE_OFFSET: usize = I_ADDR_OFFSET + 2;
pub const I_PROJID_OFFSET: usize = I_ADDR_OFFSET + 4;
pub const I_INODE_CHECKSUM_OFFSET: usize = I_ADDR_OFFSET + 8;
pub const I_CRTIME_OFFSET: usize = I_ADDR_OFFSET + 12;
pub const I_CRTIME_NSEC_OFFSET: usize = I_ADDR_OFFSET + 20;

const _: () = {
    assert!(core::mem::size_of::<NodeFooter>() == NODE_FOOTER_SIZE);
    assert!(core::mem::size_of::<Inode>() == NODE_PAYLOAD_SIZE);
    assert!(core::mem::offset_of!(Inode, i_name) == 0x5C);
    assert!(core::mem::offset_of!(Inode, i_ext) == 0x15C);
    assert!(core::mem::offset_of!(Inode, i_addr) == I_ADDR_OFFSET);
    assert!(core::mem::offset_of!(Inode, i_nid) == 0xFD4);
};

/// A node block viewed as raw bytes: payload + footer.
pub fn footer_of(block: &[u8]) -> &NodeFooter {
    NodeFooter::ref_from_bytes(&block[NODE_PAYLOAD_SIZE..F2FS_BLKSIZE]).expect("4 KiB node block")
}

pub fn footer_of_mut(block: &mut [u8]) -> &mut NodeFooter {
    NodeFooter::mut_from_bytes(&mut block[NODE_PAYLOAD_SIZE..F2FS_BLKSIZE])
        .expect("4 KiB node block")
}

pub fn inode_of(block: &[u8]) -> &Inode {
    Inode::ref_from_bytes(&block[..NODE_PAYLOAD_SIZE]).expect("4 KiB node block")
}

pub fn inode_of_mut(block: &mut [u8]) -> &mut Inode {
    Inode::mut_from_bytes(&mut block[..NODE_PAYLOAD_SIZE]).expect("4 KiB node block")
}

/// Entry `i` of a direct node's address array, or of an indirect node's nid array.
pub fn node_slot(block: &[u8], i: usize) -> u32 {
    debug_assert!(i < ADDRS_PER_BLOCK as usize);
    u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap())
}

pub fn set_node_slot(block: &mut [u8], i: usize, value: u32) {
    debug_assert!(i < ADDRS_PER_BLOCK as usize);
    block[4 * i..4 * i + 4].copy_from_slice(&value.to_le_bytes());
}

/// Geometry of one inode's address area, fixed by its flags and the superblock features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeLayout {
    /// Words at the start of `i_addr` used by the extra attribute area.
    pub extra_words: usize,
    /// Words at the end of `i_addr` used by the inline xattr area.
    pub inline_xattr_words: usize,
}

impl InodeLayout {
    /// Reads the layout from an inode, validating the size fields it relies on.
    pub fn of(inode: &Inode, features: u32) -> Result<InodeLayout> {
        let raw = inode.as_bytes();
        let extra_words = if inode.i_inline & inline_flag::EXTRA_ATTR != 0 {
            ensure!(
                features & feature::EXTRA_ATTR != 0,
                "inode",
                "EXTRA_ATTR set but the extra_attr feature is off"
            );
            let isize = read_u16(raw, I_EXTRA_ISIZE_OFFSET) as usize;
            ensure!(
                (4..=F2FS_TOTAL_EXTRA_ATTR_SIZE).contains(&isize) && isize.is_multiple_of(4),
                "inode",
                "i_extra_isize {isize} (must be a multiple of 4 in 4..=36)"
            );
            isize / 4
        } else {
            0
        };
        let inline_xattr_words = if features & feature::FLEXIBLE_INLINE_XATTR != 0 {
            // Like the kernel: with this feature the field decides, flag or not.
            let has_flag = inode.i_inline & inline_flag::INLINE_XATTR != 0;
            if extra_words == 0 {
                ensure!(
                    !has_flag,
                    "inode",
                    "flexible inline xattr without the extra attribute area"
                );
                0
            } else {
                let words = read_u16(raw, I_INLINE_XATTR_SIZE_OFFSET) as usize;
                let min = if has_flag { 6 } else { 0 };
                ensure!(
                    (min..=MAX_INLINE_XATTR_WORDS).contains(&words),
                    "inode",
                    "i_inline_xattr_size {words} words outside {min}..={MAX_INLINE_XATTR_WORDS}"
                );
                words
            }
        } else if inode.i_inline & (inline_flag::INLINE_XATTR | inline_flag::INLINE_DENTRY) != 0 {
            DEFAULT_INLINE_XATTR_ADDRS
        } else {
            0
        };
        ensure!(
            extra_words + inline_xattr_words < DEF_ADDRS_PER_INODE - 1,
            "inode",
            "extra ({extra_words}) and inline xattr ({inline_xattr_words}) words leave no addresses"
        );
        Ok(InodeLayout {
            extra_words,
            inline_xattr_words,
        })
    }

    /// Data block addresses held directly in the inode.
    pub fn addrs_per_inode(&self) -> u32 {
        (DEF_ADDRS_PER_INODE - self.extra_words - self.inline_xattr_words) as u32
    }

    /// Byte range of inline data / inline dentries inside the inode payload.
    pub fn inline_data_range(&self) -> std::ops::Range<usize> {
        let start = I_ADDR_OFFSET + 4 * (self.extra_words + 1);
        start..start + self.max_inline_data()
    }

    /// `MAX_INLINE_DATA`: bytes available for inline data or dentries.
    pub fn max_inline_data(&self) -> usize {
        4 * (DEF_ADDRS_PER_INODE - self.extra_words - self.inline_xattr_words - 1)
    }

    /// Byte range of the inline xattr area inside the inode payload.
    pub fn inline_xattr_range(&self) -> std::ops::Range<usize> {
        let end = I_ADDR_OFFSET + 4 * DEF_ADDRS_PER_INODE;
        end - 4 * self.inline_xattr_words..end
    }
}

fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

impl Inode {
    /// Data address of file block `index` stored in the inode (`index < addrs_per_inode`).
    pub fn data_addr(&self, layout: &InodeLayout, index: usize) -> u32 {
        self.i_addr[layout.extra_words + index].get()
    }

    pub fn set_data_addr(&mut self, layout: &InodeLayout, index: usize, addr: u32) {
        self.i_addr[layout.extra_words + index].set(addr);
    }

    pub fn file_type(&self) -> u16 {
        self.i_mode.get() & mode::S_IFMT
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == mode::S_IFDIR
    }

    pub fn name(&self) -> &[u8] {
        let len = (self.i_namelen.get() as usize).min(F2FS_NAME_LEN);
        &self.i_name[..len]
    }

    fn extra_u32(&self, layout: &InodeLayout, offset: usize) -> Option<u32> {
        let end_of_field = offset + 4 - I_ADDR_OFFSET;
        (end_of_field <= layout.extra_words * 4).then(|| {
            let raw = self.as_bytes();
            u32::from_le_bytes(raw[offset..offset + 4].try_into().unwrap())
        })
    }

    pub fn projid(&self, layout: &InodeLayout) -> Option<u32> {
        self.extra_u32(layout, I_PROJID_OFFSET)
    }

    /// Creation time, if the inode's extra area holds it.
    pub fn crtime(&self, layout: &InodeLayout) -> Option<(u64, u32)> {
        if layout.extra_words * 4 < I_CRTIME_NSEC_OFFSET + 4 - I_ADDR_OFFSET {
            return None;
        }
        let raw = self.as_bytes();
        let secs = u64::from_le_bytes(
            raw[I_CRTIME_OFFSET..I_CRTIME_OFFSET + 8]
                .try_into()
                .unwrap(),
        );
        let nsec = self.extra_u32(layout, I_CRTIME_NSEC_OFFSET)?;
        Some((secs, nsec))
    }

    /// Device number of a char/block device inode (old or new Linux encoding).
    pub fn rdev(&self, layout: &InodeLayout) -> (u32, u32) {
        let old = self.i_addr[layout.extra_words].get();
        if old != 0 {
            ((old >> 8) & 0xFF, old & 0xFF)
        } else {
            let new = self.i_addr[layout.extra_words + 1].get();
            ((new & 0xFFF00) >> 8, (new & 0xFF) | ((new >> 12) & 0xFFF00))
        }
    }

    /// Stores a device number the way the kernel does.
    pub fn set_rdev(&mut self, layout: &InodeLayout, major: u32, minor: u32) {
        let base = layout.extra_words;
        if major < 256 && minor < 256 {
            self.i_addr[base].set((major << 8) | minor);
            self.i_addr[base + 1].set(0);
        } else {
            self.i_addr[base].set(0);
            self.i_addr[base + 1].set((minor & 0xFF) | (major << 8) | ((minor & !0xFF) << 12));
            self.i_addr[base + 2].set(0);
        }
    }
}

/// Seed of the inode checksum: CRC of the volume UUID.
pub fn inode_checksum_seed(uuid: &[u8; 16]) -> u32 {
    f2fs_crc32(0xFFFF_FFFF, uuid)
}

/// The `inode_checksum` of a whole inode block (footer included, checksum field as zero).
pub fn inode_checksum(seed: u32, block: &[u8]) -> u32 {
    let footer = footer_of(block);
    let inode = inode_of(block);
    let mut crc = f2fs_crc32(seed, &footer.ino.get().to_le_bytes());
    crc = f2fs_crc32(crc, &inode.i_generation.get().to_le_bytes());
    crc = f2fs_crc32(crc, &block[..I_INODE_CHECKSUM_OFFSET]);
    crc = f2fs_crc32(crc, &[0; 4]);
    f2fs_crc32(crc, &block[I_INODE_CHECKSUM_OFFSET + 4..F2FS_BLKSIZE])
}

/// True if the inode carries a checksum field under these features.
pub fn inode_has_checksum(block: &[u8], features: u32) -> bool {
    let inode = inode_of(block);
    features & feature::INODE_CHKSUM != 0
        && inode.i_inline & inline_flag::EXTRA_ATTR != 0
        && read_u16(block, I_EXTRA_ISIZE_OFFSET) as usize
            >= I_INODE_CHECKSUM_OFFSET + 4 - I_ADDR_OFFSET
}

pub fn verify_inode_checksum(block: &[u8], features: u32, seed: u32) -> Result<()> {
    if !inode_has_checksum(block, features) {
        return Ok(());
    }
    let stored = u32::from_le_bytes(
        block[I_INODE_CHECKSUM_OFFSET..I_INODE_CHECKSUM_OFFSET + 4]
            .try_into()
            .unwrap(),
    );
    let computed = inode_checksum(seed, block);
    ensure!(
        stored == computed,
        "inode",
        "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
    );
    Ok(())
}

pub fn update_inode_checksum(block: &mut [u8], features: u32, seed: u32) {
    if inode_has_checksum(block, features) {
        let crc = inode_checksum(seed, block);
        block[I_INODE_CHECKSUM_OFFSET..I_INODE_CHECKSUM_OFFSET + 4]
            .copy_from_slice(&crc.to_le_bytes());
    }
}

/// Child pointers per indirect node.
const N: u64 = NIDS_PER_BLOCK as u64;

/// Node offsets of the inode's indirect and double-indirect nodes.
pub const IND_OFS_1: u32 = 3;
pub const IND_OFS_2: u32 = 4 + NIDS_PER_BLOCK;
pub const DIND_OFS: u32 = 5 + 2 * NIDS_PER_BLOCK;

/// How many data addresses the inode and each direct node of one file
/// hold. Compressed files round both down to whole clusters (the kernel's
/// `addrs_per_inode`/`addrs_per_block`) so that no cluster straddles two
/// nodes; the unused tail slots stay `NULL_ADDR`. Indirect nodes always
/// hold `NIDS_PER_BLOCK` pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrCounts {
    pub per_inode: u32,
    pub per_block: u32,
}

impl AddrCounts {
    /// A file without clusters.
    pub const fn plain(per_inode: u32) -> AddrCounts {
        AddrCounts {
            per_inode,
            per_block: ADDRS_PER_BLOCK,
        }
    }

    /// A compressed file with clusters of `1 << log_cluster_size` blocks.
    pub const fn clustered(per_inode: u32, log_cluster_size: u8) -> AddrCounts {
        let mask = !((1u32 << log_cluster_size) - 1);
        AddrCounts {
            per_inode: per_inode & mask,
            per_block: ADDRS_PER_BLOCK & mask,
        }
    }

    /// File blocks covered by one node `levels` above the data (0 = a direct node).
    pub fn node_span(&self, levels: u32) -> u64 {
        self.per_block as u64 * N.pow(levels)
    }
}

/// True unless `ofs` is the node offset of an indirect or double-indirect node.
pub fn is_dnode_offset(ofs: u32) -> bool {
    if ofs == IND_OFS_1 || ofs == IND_OFS_2 || ofs == DIND_OFS {
        return false;
    }
    if ofs > DIND_OFS {
        return !(ofs - DIND_OFS - 1).is_multiple_of(NIDS_PER_BLOCK + 1);
    }
    true
}

/// First file block index covered by the direct node at node offset `ofs`.
pub fn start_bidx_of_node(ofs: u32, addrs: AddrCounts) -> u64 {
    let ofs = ofs as u64;
    if ofs == 0 {
        return 0;
    }
    let idx = if ofs <= 2 {
        ofs - 1
    } else if ofs <= 2 * N + 4 {
        ofs - 2 - (ofs - 4) / (N + 1)
    } else {
        ofs - 5 - (ofs - 2 * N - 7) / (N + 1)
    };
    idx * addrs.per_block as u64 + addrs.per_inode as u64
}

/// Largest number of blocks a file can address.
pub fn max_file_blocks(addrs: AddrCounts) -> u64 {
    addrs.per_inode as u64 + 2 * addrs.node_span(0) + 2 * addrs.node_span(1) + addrs.node_span(2)
}

/// How to reach one file block: which slot of which node at each level.
///
/// `slots[0]` indexes the inode: an address slot (depth 0) or `i_nid` slot
/// (depth > 0). `slots[1..=depth]` index the nodes below. `node_ofs[k]` is the
/// node offset of the node reached at level `k` (0 = the inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPath {
    pub depth: usize,
    pub slots: [usize; 4],
    pub node_ofs: [u32; 4],
}

/// The kernel's `get_node_path`, or `None` past the maximum file size.
pub fn block_path(index: u64, addrs: AddrCounts) -> Option<BlockPath> {
    let a = addrs.per_inode as u64;
    let d = addrs.per_block as u64;
    let mut path = BlockPath {
        depth: 0,
        slots: [0; 4],
        node_ofs: [0; 4],
    };
    let mut block = index;
    if block < a {
        path.slots[0] = block as usize;
        return Some(path);
    }
    block -= a;
    if block < d {
        path.depth = 1;
        path.slots = [0, block as usize, 0, 0];
        path.node_ofs[1] = 1;
        return Some(path);
    }
    block -= d;
    if block < d {
        path.depth = 1;
        path.slots = [1, block as usize, 0, 0];
        path.node_ofs[1] = 2;
        return Some(path);
    }
    block -= d;
    for (nid_slot, ind_ofs) in [(2usize, IND_OFS_1), (3, IND_OFS_2)] {
        if block < N * d {
            path.depth = 2;
            let child = block / d;
            path.slots = [nid_slot, child as usize, (block % d) as usize, 0];
            path.node_ofs[1] = ind_ofs;
            path.node_ofs[2] = ind_ofs + 1 + child as u32;
            return Some(path);
        }
        block -= N * d;
    }
    if block < N * N * d {
        path.depth = 3;
        let ind = block / (N * d);
        let dnode = (block / d) % N;
        path.slots = [4, ind as usize, dnode as usize, (block % d) as usize];
        path.node_ofs[1] = DIND_OFS;
        path.node_ofs[2] = DIND_OFS + 1 + ind as u32 * (NIDS_PER_BLOCK + 1);
        path.node_ofs[3] = path.node_ofs[2] + 1 + dnode as u32;
        return Some(path);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    #[allow(unused_imports)]
    use zerocopy::FromZeros;

    #[test]
    fn node_offsets_match_format_doc() {
        assert_eq!(IND_OFS_2, 1022);
        assert_eq!(DIND_OFS, 2041);
        assert!(is_dnode_offset(0) && is_dnode_offset(1) && is_dnode_offset(4));
        assert!(!is_dnode_offset(3) && !is_dnode_offset(1022) && !is_dnode_offset(2041));
        assert!(!is_dnode_offset(2042) && is_dnode_offset(2043));
        assert!(!is_dnode_offset(2042 + 1019));
        assert_eq!(max_file_blocks(AddrCounts::plain(923)), 1_057_053_439);
    }

    #[test]
    fn path_and_start_index_agree() {
        let a = AddrCounts::plain(923);
        let probes = [
            0u64,
            922,
            923,
            923 + 1017,
            923 + 1018,
            923 + 2036,
            923 + 2036 + 1018 * 5 + 7,
            923 + 2036 + 1018 * 1018,
            923 + 2036 + 2 * 1018 * 1018,
            923 + 2036 + 2 * 1018 * 1018 + 1018 * 1018 * 3 + 1018 * 4 + 5,
            max_file_blocks(a) - 1,
        ];
        for index in probes {
            let path = block_path(index, a).unwrap();
            let leaf_ofs = path.node_ofs[path.depth];
            assert!(is_dnode_offset(leaf_ofs), "index {index}");
            let start = start_bidx_of_node(leaf_ofs, a);
            let slot = path.slots[path.depth] as u64;
            assert_eq!(start + slot, index, "index {index}: path {path:?}");
            for level in 1..path.depth {
                assert!(!is_dnode_offset(path.node_ofs[level]), "index {index}");
            }
        }
        assert!(block_path(max_file_blocks(a), a).is_none());
        // Clusters of 16 (compressed files): 864 and 1008 addresses.
        let c = AddrCounts::clustered(914 - 50, 4);
        assert_eq!((c.per_inode, c.per_block), (864, 1008));
        for index in [
            0,
            863,
            864,
            864 + 1007,
            864 + 1008,
            864 + 2016,
            864 + 2016 + 1008 * 1018 + 5,
            max_file_blocks(c) - 1,
        ] {
            let path = block_path(index, c).unwrap();
            let leaf_ofs = path.node_ofs[path.depth];
            assert!(is_dnode_offset(leaf_ofs), "index {index}");
            assert!(path.slots[path.depth] < 1008 || path.depth == 0);
            assert_eq!(
                start_bidx_of_node(leaf_ofs, c) + path.slots[path.depth] as u64,
                index
            );
        }
        assert!(block_path(max_file_blocks(c), c).is_none());
    }

    #[test]
    fn rdev_encodings_round_trip() {
        let layout = InodeLayout {
            extra_words: 0,
            inline_xattr_words: 0,
        };
        let mut inode = Inode::new_zeroed();
        for (major, minor) in [(1, 3), (8, 0), (259, 70000), (4095, 255), (10, 1048575)] {
            inode.set_rdev(&layout, major, minor);
            assert_eq!(inode.rdev(&layout), (major, minor));
        }
    }
}
