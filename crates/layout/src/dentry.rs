//! Directory entries: the dentry block, the inline dentry area, and the
//! multi-level hash table that places blocks.

use crate::bitmap::{set_bit_le, test_bit_le};
use crate::casefold::utf8_casefold;
use crate::consts::*;
use crate::ensure;
use crate::error::Result;
use crate::hash::dentry_hash;
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `struct f2fs_dir_entry`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct DirEntry {
    pub hash_code: U32,
    pub ino: U32,
    pub name_len: U16,
    pub file_type: u8,
}

const _: () = assert!(core::mem::size_of::<DirEntry>() == SIZE_OF_DIR_ENTRY);

/// Where the bitmap, dentries and names of one dentry set live, in bytes
/// relative to the set's start (a dentry block, or an inode's inline area).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DentryGeometry {
    pub nr_slots: usize,
    pub bitmap_offset: usize,
    pub bitmap_size: usize,
    pub dentry_offset: usize,
    pub name_offset: usize,
}

impl DentryGeometry {
    /// The layout of a 4 KiB dentry block.
    pub const BLOCK: DentryGeometry = DentryGeometry {
        nr_slots: NR_DENTRY_IN_BLOCK,
        bitmap_offset: 0,
        bitmap_size: SIZE_OF_DENTRY_BITMAP,
        dentry_offset: SIZE_OF_DENTRY_BITMAP + SIZE_OF_RESERVED,
        name_offset: SIZE_OF_DENTRY_BITMAP
            + SIZE_OF_RESERVED
            + NR_DENTRY_IN_BLOCK * SIZE_OF_DIR_ENTRY,
    };

    /// The layout of an inline dentry area of `max_inline` bytes.
    pub fn inline(max_inline: usize) -> DentryGeometry {
        let nr_slots = max_inline * 8 / (INLINE_DENTRY_BYTES * 8 + 1);
        let bitmap_size = nr_slots.div_ceil(8);
        let reserved = max_inline - (INLINE_DENTRY_BYTES * nr_slots + bitmap_size);
        let dentry_offset = bitmap_size + reserved;
        DentryGeometry {
            nr_slots,
            bitmap_offset: 0,
            bitmap_size,
            dentry_offset,
            name_offset: dentry_offset + nr_slots * SIZE_OF_DIR_ENTRY,
        }
    }

    pub fn total_size(&self) -> usize {
        self.name_offset + self.nr_slots * F2FS_SLOT_LEN
    }
}

/// One live directory entry decoded from a dentry set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DentryRef<'a> {
    pub slot: usize,
    pub hash_code: u32,
    pub ino: u32,
    pub file_type: u8,
    pub name: &'a [u8],
}

/// How a directory hashes and compares names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// Byte for byte (every directory without F2FS_CASEFOLD_FL).
    Exact,
    /// A casefolded directory: names are hashed and compared by their
    /// [`utf8_casefold`] form; `strict` (F2FS_ENC_STRICT_MODE_FL) refuses
    /// names that do not fold, otherwise those are taken byte for byte.
    Casefold { strict: bool },
}

/// A name as one directory sees it (the kernel's `struct f2fs_filename`):
/// the hash its entry is stored under and which entries it matches.
#[derive(Debug, Clone)]
pub struct DentryName<'a> {
    pub name: &'a [u8],
    pub hash: u32,
    /// The folded form, in a casefolded directory when the name folds.
    folded: Option<Vec<u8>>,
    strict: bool,
}

impl<'a> DentryName<'a> {
    /// `None` where the directory refuses the name: a strict casefolded
    /// directory and a name that does not fold (the kernel's EINVAL).
    /// "." and ".." are never folded (hash 0).
    pub fn new(name: &'a [u8], rule: NameRule) -> Option<DentryName<'a>> {
        let (folded, strict) = match rule {
            NameRule::Casefold { strict } if name != b"." && name != b".." => {
                let folded = utf8_casefold(name);
                if folded.is_none() && strict {
                    return None;
                }
                (folded, strict)
            }
            _ => (None, false),
        };
        let hash = dentry_hash(folded.as_deref().unwrap_or(name));
        Some(DentryName {
            name,
            hash,
            folded,
            strict,
        })
    }

    /// True if the stored entry name `entry` is this name (after the hash
    /// matched). A folded name matches entries that fold the same; an
    /// entry that does not fold is compared byte for byte with the folded
    /// name unless the directory is strict (f2fs_match_ci_name).
    pub fn matches(&self, entry: &[u8]) -> bool {
        match &self.folded {
            None => entry == self.name,
            Some(folded) => match utf8_casefold(entry) {
                Some(entry_folded) => entry_folded == *folded,
                None => !self.strict && entry == folded.as_slice(),
            },
        }
    }
}

/// Read access to a dentry set (block or inline area).
#[derive(Clone, Copy)]
pub struct DentrySet<'a> {
    bytes: &'a [u8],
    geo: DentryGeometry,
}

impl<'a> DentrySet<'a> {
    pub fn new(bytes: &'a [u8], geo: DentryGeometry) -> DentrySet<'a> {
        debug_assert!(bytes.len() >= geo.total_size());
        DentrySet { bytes, geo }
    }

    pub fn geometry(&self) -> DentryGeometry {
        self.geo
    }

    pub fn bitmap(&self) -> &'a [u8] {
        &self.bytes[self.geo.bitmap_offset..self.geo.bitmap_offset + self.geo.bitmap_size]
    }

    pub fn is_used(&self, slot: usize) -> bool {
        test_bit_le(self.bitmap(), slot)
    }

    pub fn dentry(&self, slot: usize) -> DirEntry {
        let off = self.geo.dentry_offset + slot * SIZE_OF_DIR_ENTRY;
        DirEntry::read_from_bytes(&self.bytes[off..off + SIZE_OF_DIR_ENTRY]).unwrap()
    }

    fn name_bytes(&self, slot: usize, len: usize) -> &'a [u8] {
        let off = self.geo.name_offset + slot * F2FS_SLOT_LEN;
        &self.bytes[off..off + len]
    }

    /// Decodes the entry starting at a used slot; `Ok(None)` for a continuation
    /// slot (name_len 0). Rejects names that run past the set.
    pub fn entry_at(&self, slot: usize) -> Result<Option<DentryRef<'a>>> {
        let de = self.dentry(slot);
        let len = de.name_len.get() as usize;
        if len == 0 {
            return Ok(None);
        }
        ensure!(
            len <= F2FS_NAME_LEN,
            "dentry",
            "slot {slot}: name_len {len} exceeds {F2FS_NAME_LEN}"
        );
        let slots = len.div_ceil(F2FS_SLOT_LEN);
        ensure!(
            slot + slots <= self.geo.nr_slots,
            "dentry",
            "slot {slot}: name of {len} bytes runs past the last slot {}",
            self.geo.nr_slots
        );
        Ok(Some(DentryRef {
            slot,
            hash_code: de.hash_code.get(),
            ino: de.ino.get(),
            file_type: de.file_type,
            name: self.name_bytes(slot, len),
        }))
    }

    /// All live entries in slot order.
    pub fn entries(&self) -> Result<Vec<DentryRef<'a>>> {
        self.iter().collect()
    }

    /// The live entries in slot order, each checked as it is reached (a
    /// search that stops early reads no further).
    pub fn iter(&self) -> impl Iterator<Item = Result<DentryRef<'a>>> + '_ {
        let mut slot = 0;
        std::iter::from_fn(move || {
            while slot < self.geo.nr_slots {
                if !self.is_used(slot) {
                    slot += 1;
                    continue;
                }
                match self.entry_at(slot) {
                    Ok(Some(entry)) => {
                        slot += entry.name.len().div_ceil(F2FS_SLOT_LEN);
                        return Some(Ok(entry));
                    }
                    Ok(None) => slot += 1,
                    Err(e) => {
                        slot = self.geo.nr_slots;
                        return Some(Err(e));
                    }
                }
            }
            None
        })
    }

    /// Looks `name` up by hash, then by the directory's comparison (as the
    /// kernel's find_target_dentry: the first match, without allocating).
    pub fn find(&self, name: &DentryName) -> Result<Option<DentryRef<'a>>> {
        self.find_where(name.hash, |stored| name.matches(stored))
    }

    /// The first entry with hash `hash` whose stored name `matches`. As
    /// find_target_dentry, only entries whose hash matches are read and
    /// checked; the others are stepped over by their name's slots.
    pub fn find_where(
        &self,
        hash: u32,
        matches: impl Fn(&[u8]) -> bool,
    ) -> Result<Option<DentryRef<'a>>> {
        let mut slot = 0;
        while slot < self.geo.nr_slots {
            if !self.is_used(slot) {
                slot += 1;
                continue;
            }
            let de = self.dentry(slot);
            let len = de.name_len.get() as usize;
            if len == 0 {
                slot += 1;
                continue;
            }
            if de.hash_code.get() == hash {
                if let Some(entry) = self.entry_at(slot)? {
                    if matches(entry.name) {
                        return Ok(Some(entry));
                    }
                }
            }
            slot += len.div_ceil(F2FS_SLOT_LEN);
        }
        Ok(None)
    }

    /// First run of `slots` free slots.
    pub fn find_free_run(&self, slots: usize) -> Option<usize> {
        let mut run = 0;
        for slot in 0..self.geo.nr_slots {
            if self.is_used(slot) {
                run = 0;
            } else {
                run += 1;
                if run == slots {
                    return Some(slot + 1 - slots);
                }
            }
        }
        None
    }
}

/// Write access to a dentry set.
pub struct DentrySetMut<'a> {
    bytes: &'a mut [u8],
    geo: DentryGeometry,
}

impl<'a> DentrySetMut<'a> {
    pub fn new(bytes: &'a mut [u8], geo: DentryGeometry) -> DentrySetMut<'a> {
        debug_assert!(bytes.len() >= geo.total_size());
        DentrySetMut { bytes, geo }
    }

    pub fn as_set(&self) -> DentrySet<'_> {
        DentrySet::new(self.bytes, self.geo)
    }

    /// Writes an entry at `slot` stored under `hash`, marking all its slots used.
    pub fn insert(&mut self, slot: usize, name: &[u8], hash: u32, ino: u32, file_type: u8) {
        let slots = name.len().div_ceil(F2FS_SLOT_LEN);
        debug_assert!(!name.is_empty() && slot + slots <= self.geo.nr_slots);
        let de = DirEntry {
            hash_code: hash.into(),
            ino: ino.into(),
            name_len: (name.len() as u16).into(),
            file_type,
        };
        let off = self.geo.dentry_offset + slot * SIZE_OF_DIR_ENTRY;
        self.bytes[off..off + SIZE_OF_DIR_ENTRY].copy_from_slice(de.as_bytes());
        let name_off = self.geo.name_offset + slot * F2FS_SLOT_LEN;
        let name_area = &mut self.bytes[name_off..name_off + slots * F2FS_SLOT_LEN];
        name_area.fill(0);
        name_area[..name.len()].copy_from_slice(name);
        for s in slot..slot + slots {
            if s > slot {
                // Continuation slots carry name_len 0 so readers skip them.
                let off = self.geo.dentry_offset + s * SIZE_OF_DIR_ENTRY;
                self.bytes[off..off + SIZE_OF_DIR_ENTRY].fill(0);
            }
            self.set_used(s, true);
        }
    }

    /// Clears the bitmap bits of the entry at `slot` with a name of `name_len` bytes.
    pub fn remove(&mut self, slot: usize, name_len: usize) {
        for s in slot..slot + name_len.div_ceil(F2FS_SLOT_LEN) {
            self.set_used(s, false);
        }
    }

    /// Changes the inode number and type of the entry at `slot` (rename over).
    pub fn set_target(&mut self, slot: usize, ino: u32, file_type: u8) {
        let off = self.geo.dentry_offset + slot * SIZE_OF_DIR_ENTRY;
        self.bytes[off + 4..off + 8].copy_from_slice(&ino.to_le_bytes());
        self.bytes[off + 10] = file_type;
    }

    fn set_used(&mut self, slot: usize, used: bool) {
        let bm = self.geo.bitmap_offset;
        set_bit_le(&mut self.bytes[bm..bm + self.geo.bitmap_size], slot, used);
    }
}

/// Buckets at a hash level.
pub fn dir_buckets(level: u32, dir_level: u32) -> u64 {
    if level + dir_level < 31 {
        1u64 << (level + dir_level)
    } else {
        1u64 << 30
    }
}

/// Blocks in each bucket at a hash level.
pub fn bucket_blocks(level: u32) -> u64 {
    if level < 31 {
        2
    } else {
        4
    }
}

/// First directory block index of `bucket` at `level`.
pub fn dir_block_index(level: u32, dir_level: u32, bucket: u64) -> u64 {
    let before: u64 = (0..level)
        .map(|i| dir_buckets(i, dir_level) * bucket_blocks(i))
        .sum();
    before + bucket * bucket_blocks(level)
}

/// The level and bucket a directory block index belongs to, or `None` past level 63.
pub fn level_of_block(index: u64, dir_level: u32) -> Option<(u32, u64)> {
    let mut start = 0u64;
    for level in 0..MAX_DIR_HASH_DEPTH {
        let size = dir_buckets(level, dir_level) * bucket_blocks(level);
        if index < start + size {
            return Some((level, (index - start) / bucket_blocks(level)));
        }
        start += size;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_geometry_matches_format_doc() {
        for (max_inline, nr, bm, dentries, names) in [
            (3488, 182, 23, 30, 2032),
            (3452, 180, 23, 32, 2012),
            (3464, 181, 23, 25, 2016),
            (3652, 190, 24, 42, 2132),
        ] {
            let g = DentryGeometry::inline(max_inline);
            assert_eq!(
                (g.nr_slots, g.bitmap_size, g.dentry_offset, g.name_offset),
                (nr, bm, dentries, names),
                "max_inline {max_inline}"
            );
            assert!(g.total_size() <= max_inline);
        }
        assert_eq!(DentryGeometry::BLOCK.total_size(), F2FS_BLKSIZE);
        assert_eq!(DentryGeometry::BLOCK.name_offset, 2384);
    }

    #[test]
    fn hash_table_positions() {
        assert_eq!(dir_block_index(0, 0, 0), 0);
        assert_eq!(dir_block_index(1, 0, 1), 4);
        assert_eq!(dir_block_index(2, 0, 3), 2 + 4 + 6);
        assert_eq!(level_of_block(13, 0), Some((2, 3)));
        assert_eq!(level_of_block(1, 0), Some((0, 0)));
    }

    #[test]
    fn insert_find_remove() {
        let mut block = vec![0u8; F2FS_BLKSIZE];
        let mut set = DentrySetMut::new(&mut block, DentryGeometry::BLOCK);
        set.insert(0, b".", 0, 3, file_type::DIR);
        set.insert(1, b"..", 0, 3, file_type::DIR);
        let long = [b'x'; 20];
        let slot = set.as_set().find_free_run(3).unwrap();
        assert_eq!(slot, 2);
        set.insert(slot, &long, dentry_hash(&long), 9, file_type::REG_FILE);
        let names: Vec<Vec<u8>> = set
            .as_set()
            .entries()
            .unwrap()
            .iter()
            .map(|e| e.name.to_vec())
            .collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), long.to_vec()]);
        let exact = DentryName::new(&long, NameRule::Exact).unwrap();
        let found = set.as_set().find(&exact).unwrap().unwrap();
        assert_eq!(found.ino, 9);
        set.remove(slot, long.len());
        assert_eq!(set.as_set().entries().unwrap().len(), 2);
    }

    #[test]
    fn casefolded_names() {
        let folding = NameRule::Casefold { strict: false };
        let strict = NameRule::Casefold { strict: true };
        let mut block = vec![0u8; F2FS_BLKSIZE];
        let mut set = DentrySetMut::new(&mut block, DentryGeometry::BLOCK);
        let stored = DentryName::new("Straße".as_bytes(), folding).unwrap();
        assert_eq!(stored.hash, dentry_hash(b"strasse"));
        set.insert(0, stored.name, stored.hash, 5, file_type::REG_FILE);
        let invalid = DentryName::new(b"x\xff", folding).unwrap();
        assert_eq!(invalid.hash, dentry_hash(b"x\xff"));
        set.insert(1, invalid.name, invalid.hash, 6, file_type::REG_FILE);
        let set = set.as_set();
        let find = |name: &[u8], rule| {
            let name = DentryName::new(name, rule).unwrap();
            set.find(&name).unwrap().map(|e| e.ino)
        };
        assert_eq!(find(b"STRASSE", folding), Some(5));
        assert_eq!(find(b"strasse", strict), Some(5));
        assert_eq!(find(b"STRASSE", NameRule::Exact), None);
        assert_eq!(find(b"x\xff", folding), Some(6));
        assert_eq!(find(b"X\xff", folding), None);
        assert!(DentryName::new(b"x\xff", strict).is_none());
        let dots = DentryName::new(b"..", strict).unwrap();
        assert_eq!((dots.hash, dots.matches(b"..")), (0, true));
    }
}
