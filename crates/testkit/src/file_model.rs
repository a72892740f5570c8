//! An in-memory model of one file for the fallocate and seek tests (the
//! engine's and the fsx tester's through the mount): its bytes (the size is
//! their length) and, per block, whether it holds data or a reservation
//! (NEW_ADDR; absent = a hole), with the engine's documented semantics.

use f2fuse_engine::{FallocMode, SeekTarget};
use std::collections::BTreeMap;

const BS: u64 = 4096;

/// The state of an allocated block of the model (a hole has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Preallocated (NEW_ADDR): reads as zeros, SEEK_DATA finds it.
    Reserved,
    /// Written data.
    Data,
}

/// The model: contents (the size is their length) and allocated blocks.
#[derive(Default, Clone)]
pub struct FileModel {
    /// The contents; the size is their length.
    pub bytes: Vec<u8>,
    /// Allocated blocks by file block index; a missing index is a hole.
    pub blocks: BTreeMap<u64, Block>,
}

impl FileModel {
    /// The file size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Extends the contents with zeros to `to` bytes (never shrinks).
    pub fn grow(&mut self, to: u64) {
        if to > self.size() {
            self.bytes.resize(to as usize, 0);
        }
    }

    /// Zeroes the bytes of `[start, end)` inside the file; blocks keep their state.
    pub fn zero(&mut self, start: u64, end: u64) {
        let end = end.min(self.size());
        if start < end {
            self.bytes[start as usize..end as usize].fill(0);
        }
    }

    /// Writes `data` at `off` (growing the file); the blocks it covers hold data.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        self.grow(off + data.len() as u64);
        self.bytes[off as usize..off as usize + data.len()].copy_from_slice(data);
        for b in off / BS..(off + data.len() as u64).div_ceil(BS) {
            self.blocks.insert(b, Block::Data);
        }
    }

    /// Shrinking (or keeping the size) frees every block past the new size,
    /// reservations past EOF too; growing changes no block.
    pub fn truncate(&mut self, size: u64) {
        if size <= self.size() {
            self.blocks.retain(|&b, _| b < size.div_ceil(BS));
        }
        self.bytes.resize(size as usize, 0);
    }

    /// Whole blocks inside `[start, end)`, after zeroing the partial ends.
    pub fn zero_partial_ends(&mut self, start: u64, end: u64) -> std::ops::Range<u64> {
        self.zero(start, end);
        start.div_ceil(BS)..end / BS
    }

    /// Expected result of a fallocate call (errno on refusal).
    pub fn fallocate(&mut self, off: u64, len: u64, mode: FallocMode) -> Result<(), i32> {
        let end = off + len;
        let aligned = off.is_multiple_of(BS) && len.is_multiple_of(BS);
        let size = self.size();
        match mode {
            FallocMode::Allocate { keep_size } => {
                for b in off / BS..end.div_ceil(BS) {
                    self.blocks.entry(b).or_insert(Block::Reserved);
                }
                if !keep_size {
                    self.grow(end);
                }
            }
            FallocMode::PunchHole => {
                if off < size {
                    for b in self.zero_partial_ends(off, end) {
                        self.blocks.remove(&b);
                    }
                }
            }
            FallocMode::ZeroRange { keep_size } => {
                for b in self.zero_partial_ends(off, end) {
                    self.blocks.insert(b, Block::Reserved);
                }
                if !keep_size {
                    self.grow(end);
                }
            }
            FallocMode::CollapseRange => {
                if !aligned || end >= size {
                    return Err(libc::EINVAL);
                }
                self.bytes.drain(off as usize..end as usize);
                let (first, n) = (off / BS, len / BS);
                let live = size.div_ceil(BS);
                self.blocks = std::mem::take(&mut self.blocks)
                    .into_iter()
                    .filter(|&(b, _)| b < live && !(first..first + n).contains(&b))
                    .map(|(b, s)| (if b >= first + n { b - n } else { b }, s))
                    .collect();
            }
            FallocMode::InsertRange => {
                if !aligned || off >= size {
                    return Err(libc::EINVAL);
                }
                let tail = self.bytes.split_off(off as usize);
                self.bytes.resize((off + len) as usize, 0);
                self.bytes.extend(tail);
                let (first, n) = (off / BS, len / BS);
                let live = size.div_ceil(BS);
                self.blocks = std::mem::take(&mut self.blocks)
                    .into_iter()
                    .filter(|&(b, _)| b < live)
                    .map(|(b, s)| (if b >= first { b + n } else { b }, s))
                    .collect();
            }
        }
        Ok(())
    }

    /// SEEK_DATA/SEEK_HOLE: data blocks are data, holes are holes,
    /// reservations neither; EOF is a hole.
    pub fn seek(&self, off: u64, target: SeekTarget) -> Result<u64, i32> {
        let size = self.size();
        if off >= size {
            return Err(libc::ENXIO);
        }
        let found = (off / BS..size.div_ceil(BS)).find(|b| match target {
            SeekTarget::Data => self.blocks.get(b) == Some(&Block::Data),
            SeekTarget::Hole => !self.blocks.contains_key(b),
        });
        match (found, target) {
            (Some(b), _) => Ok((b * BS).max(off).min(size)),
            (None, SeekTarget::Hole) => Ok(size),
            (None, SeekTarget::Data) => Err(libc::ENXIO),
        }
    }
}
