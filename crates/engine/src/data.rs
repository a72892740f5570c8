//! File data: mapping file block indexes to block addresses through the
//! inode, direct, indirect and double-indirect nodes, and reading bytes.

use crate::device::{Block, Device, IoKind};
use crate::error::{Error, ErrorKind, Result};
use crate::extent_cache::CachedExtent;
use crate::inline;
use crate::inode::{blocks_less, set_ctime, set_mtime, Ctx, FileKind as Kind, InodeInfo};
use crate::ipu::{self, IpuPolicy, WriteState};
use crate::node::{NodeExpect, NodeManager};
use crate::segment::StreamRequest;
use f2fuse_layout::node::{
    block_path, max_file_blocks, node_slot, AddrCounts, BlockPath, I_ADDR_OFFSET,
};
use f2fuse_layout::segment::Summary;
use f2fuse_layout::*;
use std::ops::Range;

/// Maps file block indexes of one inode, keeping the last node read at each
/// level so sequential lookups read every node once.
pub struct BlockMapper<'a> {
    nm: &'a NodeManager,
    inode: &'a InodeInfo,
    cached: [Option<(u32, Block)>; 4],
}

impl<'a> BlockMapper<'a> {
    pub fn new(nm: &'a NodeManager, inode: &'a InodeInfo) -> BlockMapper<'a> {
        BlockMapper {
            nm,
            inode,
            cached: Default::default(),
        }
    }

    /// The stored address of block `index`: `NULL_ADDR` for a hole, `NEW_ADDR`
    /// for a reserved block, else a main-area block address.
    pub fn map(&mut self, index: u64) -> Result<u32> {
        self.map_run(index).map(|(addr, _)| addr)
    }

    /// Like [`map`](Self::map), plus how many blocks from `index` on are
    /// known to map the same way: the rest of the range of a node that is
    /// not allocated (nid 0), else 1. Walking a sparse file or directory by
    /// these runs costs one step per missing node, not one per block.
    pub fn map_run(&mut self, index: u64) -> Result<(u32, u64)> {
        let inode = self.inode;
        let Some(path) = block_path(index, inode.addrs()) else {
            return Ok((NULL_ADDR, 1));
        };
        let raw_inode = inode.inode();
        let addr = if path.depth == 0 {
            raw_inode.data_addr(&inode.layout, path.slots[0])
        } else {
            let mut nid = raw_inode.i_nid[path.slots[0]].get();
            for level in 1..=path.depth {
                if nid == 0 {
                    return Ok((NULL_ADDR, rest_of_node_range(&path, level, inode.addrs())));
                }
                let hit = matches!(&self.cached[level], Some((cached, _)) if *cached == nid);
                if !hit {
                    let expect = NodeExpect {
                        ino: Some(inode.ino),
                        ofs: Some(path.node_ofs[level]),
                    };
                    let block = self
                        .nm
                        .read_node(nid, expect)
                        .map_err(|e| e.at(format!("inode {}", inode.ino)))?;
                    self.cached[level] = Some((nid, block));
                }
                let block = &self.cached[level].as_ref().expect("just filled").1;
                nid = node_slot(block, path.slots[level]);
            }
            nid
        };
        Ok((self.check_addr(index, addr)?, 1))
    }

    /// The blocks from `index` on (at most `max`) that map alike: to block
    /// addresses consecutive from the one of `index`, or all unwritten
    /// (holes and reserved blocks). Returns (address of `index`, length).
    /// Nodes are read once however many of their slots the run covers.
    pub fn run(&mut self, index: u64, max: u64) -> Result<(u32, u64)> {
        let (addr, known) = self.map_run(index)?;
        if known > 1 {
            return Ok((addr, known.min(max)));
        }
        let mut len = 1;
        while len < max {
            let (next, _) = self.map_run(index + len)?;
            let continues = if is_unwritten(addr) {
                is_unwritten(next)
            } else {
                !is_unwritten(next) && next as u64 == addr as u64 + len
            };
            if !continues {
                break;
            }
            len += 1;
        }
        Ok((addr, len))
    }

    fn check_addr(&self, index: u64, addr: u32) -> Result<u32> {
        match addr {
            NULL_ADDR | NEW_ADDR => Ok(addr),
            // Checked cluster by cluster by the compress module.
            COMPRESS_ADDR if self.inode.compression.is_some() => Ok(addr),
            COMPRESS_ADDR => Err(Corrupt::new(
                "block address",
                format!("file block {index} holds COMPRESS_ADDR but the file is not compressed"),
            )
            .at(format!("inode {}", self.inode.ino))
            .into()),
            a if self.nm.is_main_blkaddr(a) => Ok(a),
            a => Err(Corrupt::new(
                "block address",
                format!("file block {index} maps to {a:#x}, outside the main area"),
            )
            .at(format!("inode {}", self.inode.ino))
            .into()),
        }
    }
}

/// Blocks from the one `path` leads to until the end of the range covered
/// by the node reached at `level` of that path.
fn rest_of_node_range(path: &BlockPath, level: usize, addrs: AddrCounts) -> u64 {
    let (mut within, mut span) = (0u64, 1u64);
    for k in (level..=path.depth).rev() {
        within += path.slots[k] as u64 * span;
        span = addrs.node_span((path.depth - k) as u32);
    }
    span - within
}

/// How a file's data blocks are counted: dentry blocks or file contents.
pub fn data_kind(inode: &InodeInfo) -> IoKind {
    if inode.kind == crate::inode::FileKind::Directory {
        IoKind::DirData
    } else {
        IoKind::UserData
    }
}

/// Refuses encrypted files' contents: without the key they cannot be
/// opened (fscrypt_file_open: ENOKEY).
pub fn check_readable(inode: &InodeInfo) -> Result<()> {
    if inode.is_encrypted() {
        return Err(Error::new(
            ErrorKind::NoKey,
            format!("inode {}: encrypted file, no key", inode.ino),
        ));
    }
    Ok(())
}

/// Refuses changing the contents or size of encrypted files (ENOKEY) and
/// of fs-verity files (EPERM: fsverity_file_open, fsverity_prepare_setattr).
pub fn check_writable(inode: &InodeInfo) -> Result<()> {
    check_readable(inode)?;
    if inode.is_verity() {
        return Err(Error::new(
            ErrorKind::NotPermitted,
            format!("inode {}: fs-verity file is read-only", inode.ino),
        ));
    }
    Ok(())
}

/// Whether a stored address names no block: a hole or a reserved block
/// (both read as zeros).
fn is_unwritten(addr: u32) -> bool {
    addr == NULL_ADDR || addr == NEW_ADDR
}

/// Whether a stored address names a block (not a hole, reservation or
/// compressed-cluster marker).
fn is_block(addr: u32) -> bool {
    !matches!(addr, NULL_ADDR | NEW_ADDR | COMPRESS_ADDR)
}

/// The kernel's default for `serialized_dio_pages` (blocks).
pub const DEFAULT_SERIALIZED_DIO_PAGES: u32 = 64;
/// Largest `max_folio_order`, and its default: 512-block (2 MiB) units,
/// the kernel's MAX_PAGECACHE_ORDER on x86-64.
pub const MAX_FOLIO_ORDER: u8 = 9;

/// How the data path groups and places blocks: the `max_folio_order`,
/// `serialized_dio_pages`, in-place update and `extent_zeroout_len`
/// tunables, and what the facade knows about one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPolicy {
    /// Blocks per unit, 2^max_folio_order: the most one step maps, reads
    /// with one device request, or (for a write below `serialize_from`)
    /// allocates.
    pub unit_blocks: u64,
    /// A write of at least this many blocks allocates all of them in one
    /// step, so they are contiguous in their log (0: never).
    pub serialize_from: u64,
    /// When rewrites go in place (`ipu`); None: never (f2fuse's internal
    /// rewrites).
    pub ipu: Option<IpuPolicy>,
    /// A write into reserved (NEW_ADDR) blocks also writes zeros to the
    /// reserved blocks after it, up to the end of its aligned window of
    /// this many blocks, so later writes there find real blocks (0: off).
    pub zeroout_blocks: u64,
    /// The write is small between two fsyncs (see `ipu::WriteState`).
    pub fsync_bound: bool,
    /// How the write may use its file's stream (`segment/stream.rs`).
    pub streams: StreamUse,
}

/// Whether a write may go to its file's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamUse {
    /// f2fuse's own writes (a pinned file's sections, directory blocks).
    Off,
    /// Only into a stream the file has open, never opening one: writes that
    /// zero-out widened (the requests of random writers into preallocated
    /// files are small and scattered), and any write below
    /// `serialized_dio_pages`.
    Join,
    /// A serialized write may open one.
    Open,
}

impl Default for DataPolicy {
    fn default() -> Self {
        DataPolicy::new(MAX_FOLIO_ORDER, DEFAULT_SERIALIZED_DIO_PAGES)
    }
}

impl DataPolicy {
    pub fn new(max_folio_order: u8, serialized_dio_pages: u32) -> DataPolicy {
        DataPolicy {
            unit_blocks: 1 << max_folio_order.min(MAX_FOLIO_ORDER),
            serialize_from: serialized_dio_pages as u64,
            ipu: None,
            zeroout_blocks: 0,
            fsync_bound: false,
            streams: StreamUse::Open,
        }
    }

    /// Whether a write of `blocks` is serialized: allocated in one step.
    fn serializes(&self, blocks: usize) -> bool {
        self.serialize_from != 0 && blocks as u64 >= self.serialize_from
    }

    /// Blocks allocated per step (one hold of the space lock) for a write of
    /// `blocks`: all of them when it is serialized, else a unit.
    fn allocation_step(&self, blocks: usize) -> usize {
        if self.serializes(blocks) {
            blocks.max(1)
        } else {
            self.unit_blocks as usize
        }
    }
}

/// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past EOF).
/// Blocks go in runs of at most a unit of `policy`, each physically
/// contiguous run with one device request (straight into `buf` when the
/// run is whole blocks of it); mapped runs are found in, or added to, the
/// read extent cache.
pub fn read_data(
    dev: &Device,
    nm: &NodeManager,
    inode: &InodeInfo,
    offset: u64,
    buf: &mut [u8],
    policy: DataPolicy,
) -> Result<usize> {
    check_readable(inode)?;
    read_stored(dev, nm, inode, offset, buf, policy)
}

/// [`read_data`] of the bytes as stored, ciphertext included (encrypted
/// symlink targets are shown without the key).
pub fn read_stored(
    dev: &Device,
    nm: &NodeManager,
    inode: &InodeInfo,
    offset: u64,
    buf: &mut [u8],
    policy: DataPolicy,
) -> Result<usize> {
    if offset >= inode.size || buf.is_empty() {
        return Ok(0);
    }
    let len = (buf.len() as u64).min(inode.size - offset) as usize;
    let buf = &mut buf[..len];
    if inline::has_inline_data(inode) {
        let data = inline::inline_data(inode);
        let start = offset as usize;
        let avail = data.len().saturating_sub(start).min(len);
        buf[..avail].copy_from_slice(&data[start..start + avail]);
        buf[avail..].fill(0);
        return Ok(len);
    }
    let bs = F2FS_BLKSIZE as u64;
    let first = offset / bs;
    let end_block = (offset + len as u64).div_ceil(bs);
    let cache = nm.extent_cache();
    let mut mapper = BlockMapper::new(nm, inode);
    let mut index = first;
    let mut scratch = Vec::new();
    while index < end_block {
        let (addr, mapped) = match cache.lookup(inode.ino, index) {
            Some(extent) => (extent.blkaddr, extent.len),
            None => {
                let (addr, mapped) = mapper.run(index, policy.unit_blocks)?;
                if let (false, Some(seen)) = (is_unwritten(addr), inode.extent_snapshot) {
                    let extent = CachedExtent {
                        fofs: index,
                        blkaddr: addr,
                        len: mapped,
                    };
                    cache.insert(inode.ino, seen, extent);
                }
                (addr, mapped)
            }
        };
        let run = mapped.min(end_block - index).min(policy.unit_blocks);
        let run_start = index * bs;
        let run_end = (index + run) * bs;
        let copy_from = offset.max(run_start);
        let copy_to = (offset + len as u64).min(run_end);
        let dst = &mut buf[(copy_from - offset) as usize..(copy_to - offset) as usize];
        // What may follow this run in a sequential read: the rest of the file.
        let file_rest = inode.size.saturating_sub(run_end);
        if is_unwritten(addr) {
            dst.fill(0);
        } else if copy_from == run_start && copy_to == run_end {
            dev.read_file_data(data_kind(inode), addr as u64, dst, file_rest)?;
        } else {
            scratch.resize((run * bs) as usize, 0);
            dev.read_file_data(data_kind(inode), addr as u64, &mut scratch, file_rest)?;
            let src_start = (copy_from - run_start) as usize;
            dst.copy_from_slice(&scratch[src_start..src_start + dst.len()]);
        }
        index += run;
    }
    Ok(len)
}

/// Where a run of file blocks lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtentPlace {
    /// Consecutive main-area blocks starting at this address.
    Blocks(u32),
    /// Reserved (`NEW_ADDR`, e.g. by fallocate) but never written: reads as zeros.
    Unwritten,
}

/// A run of file blocks stored the same way; holes are not extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First file block.
    pub logical: u64,
    pub len: u64,
    pub place: ExtentPlace,
}

/// Every extent of a file up to its size, in file order. Inline files and
/// special files (whose address slots hold other things) have none. An
/// encrypted file's extents are where its ciphertext lies.
pub fn extent_map(nm: &NodeManager, inode: &InodeInfo) -> Result<Vec<Extent>> {
    let mut out: Vec<Extent> = Vec::new();
    if inline::has_inline_data(inode)
        || inline::has_inline_dentry(inode)
        || !matches!(inode.kind, Kind::Regular | Kind::Directory | Kind::Symlink)
    {
        return Ok(out);
    }
    let mut mapper = BlockMapper::new(nm, inode);
    let end = inode.size_blocks();
    let mut index = 0;
    while index < end {
        let (addr, run) = mapper.map_run(index)?;
        let place = match addr {
            // A compressed cluster's marker owns no block.
            NULL_ADDR | COMPRESS_ADDR => {
                index = index.saturating_add(run);
                continue;
            }
            NEW_ADDR => ExtentPlace::Unwritten,
            a => ExtentPlace::Blocks(a),
        };
        let continues = |last: &Extent| {
            last.logical + last.len == index
                && match (last.place, place) {
                    (ExtentPlace::Blocks(start), ExtentPlace::Blocks(a)) => {
                        start as u64 + last.len == a as u64
                    }
                    (a, b) => a == b,
                }
        };
        match out.last_mut() {
            Some(last) if continues(last) => last.len += 1,
            _ => out.push(Extent {
                logical: index,
                len: 1,
                place,
            }),
        }
        index += 1;
    }
    Ok(out)
}

/// Physical extents of a file: (file block, block address, length); holes
/// and unwritten blocks omitted.
pub fn extents(nm: &NodeManager, inode: &InodeInfo) -> Result<Vec<(u64, u32, u64)>> {
    Ok(extent_map(nm, inode)?
        .into_iter()
        .filter_map(|e| match e.place {
            ExtentPlace::Blocks(addr) => Some((e.logical, addr, e.len)),
            ExtentPlace::Unwritten => None,
        })
        .collect())
}

/// Byte offset of `i_nid[0]` in an inode block.
const I_NID_OFFSET: usize = 0xFD4;

/// Where the address of one file block is stored.
#[derive(Debug, Clone, Copy)]
pub struct AddrSlot {
    /// The inode or direct node holding the address.
    pub nid: u32,
    /// Index in the node's address array as the SSA records it (extra words not counted).
    pub ofs_in_node: u16,
    /// Byte offset of the address in the node block.
    byte: usize,
}

fn read_u32(block: &[u8], byte: usize) -> u32 {
    u32::from_le_bytes(block[byte..byte + 4].try_into().unwrap())
}

fn write_u32(block: &mut [u8], byte: usize, value: u32) {
    block[byte..byte + 4].copy_from_slice(&value.to_le_bytes());
}

/// The log a file's data goes to (kernel temperature rules).
pub fn data_log(inode: &InodeInfo) -> CursegType {
    if inode.kind == Kind::Directory || inode.advise & fadvise::HOT != 0 {
        CursegType::HotData
    } else if inode.advise & fadvise::COLD != 0 {
        CursegType::ColdData
    } else {
        CursegType::WarmData
    }
}

/// Finds the slot of block `index`, creating missing nodes when `create`.
/// Returns `None` for a hole under a missing node when not creating.
pub fn addr_slot(
    ctx: &Ctx,
    inode: &InodeInfo,
    index: u64,
    create: bool,
) -> Result<Option<AddrSlot>> {
    let path = block_path(index, inode.addrs()).ok_or_else(|| {
        Error::new(
            ErrorKind::FileTooLarge,
            format!("inode {}: block {index} beyond the largest file", inode.ino),
        )
    })?;
    let ino = inode.ino;
    if path.depth == 0 {
        let word = inode.layout.extra_words + path.slots[0];
        return Ok(Some(AddrSlot {
            nid: ino,
            ofs_in_node: path.slots[0] as u16,
            byte: I_ADDR_OFFSET + 4 * word,
        }));
    }
    let (mut parent, mut parent_expect, mut parent_byte) = (
        ino,
        NodeExpect {
            ino: Some(ino),
            ofs: Some(0),
        },
        I_NID_OFFSET + 4 * path.slots[0],
    );
    for level in 1..=path.depth {
        let expect = NodeExpect {
            ino: Some(ino),
            ofs: Some(path.node_ofs[level]),
        };
        let mut nid = read_u32(&ctx.nm.read_node(parent, parent_expect)?, parent_byte);
        if nid == 0 {
            if !create {
                return Ok(None);
            }
            let child = ChildNode {
                ofs: path.node_ofs[level],
                at: (parent, parent_expect, parent_byte),
            };
            nid = link_new_node(ctx, inode, child)?;
        }
        if level == path.depth {
            return Ok(Some(AddrSlot {
                nid,
                ofs_in_node: path.slots[level] as u16,
                byte: 4 * path.slots[level],
            }));
        }
        parent = nid;
        parent_expect = expect;
        parent_byte = 4 * path.slots[level];
    }
    unreachable!("the loop returns at the leaf level")
}

/// A node to create: its node offset and where its nid goes (parent nid,
/// what the parent must be, byte offset of the nid in the parent block).
struct ChildNode {
    ofs: u32,
    at: (u32, NodeExpect, usize),
}

/// Creates node `child` of `inode` and links it into its parent, unless a
/// concurrent writer of another range linked one there first (checked
/// under the parent's guard); returns the nid the parent now holds.
fn link_new_node(ctx: &Ctx, inode: &InodeInfo, child: ChildNode) -> Result<u32> {
    let (parent, parent_expect, byte) = child.at;
    let nid = {
        let mut parent_node = ctx.nm.lock_node(parent, parent_expect)?;
        let existing = read_u32(parent_node.block(), byte);
        if existing != 0 {
            return Ok(existing);
        }
        ctx.quota_admits(inode, 1)?;
        let cold = inode.kind != Kind::Directory;
        let nid = ctx.new_node(None, Some(inode.ino), child.ofs, cold)?;
        write_u32(parent_node.block_mut(), byte, nid);
        nid
    };
    ctx.update_inode(inode.ino, |raw| raw.i_blocks.set(raw.i_blocks.get() + 1))?;
    Ok(nid)
}

fn slot_expect(inode: &InodeInfo, slot: &AddrSlot) -> NodeExpect {
    NodeExpect {
        ino: Some(inode.ino),
        ofs: (slot.nid == inode.ino).then_some(0),
    }
}

pub fn get_addr(ctx: &Ctx, inode: &InodeInfo, slot: &AddrSlot) -> Result<u32> {
    Ok(read_u32(
        &ctx.nm.read_node(slot.nid, slot_expect(inode, slot))?,
        slot.byte,
    ))
}

pub fn set_addr(ctx: &Ctx, inode: &InodeInfo, slot: &AddrSlot, addr: u32) -> Result<()> {
    ctx.nm.update_node(slot.nid, slot_expect(inode, slot), |b| {
        write_u32(b, slot.byte, addr)
    })
}

/// Writes whole blocks starting at file block `first`, out of place: each
/// block gets a new address in the file's log; the old one is invalidated.
/// Returns how many holes were filled (i_blocks grows by that much).
pub fn write_blocks(
    ctx: &Ctx,
    inode: &InodeInfo,
    first: u64,
    data: &[u8],
    log: CursegType,
) -> Result<u64> {
    let target = Target::out_of_place(log);
    let policy = DataPolicy {
        streams: StreamUse::Off,
        ..DataPolicy::default()
    };
    write_blocks_upto(ctx, inode, first, data, target, policy, &|| ()).map_err(|(_, e)| e)
}

/// Where a write's blocks go: `log` for blocks given new addresses; with
/// `in_place`, blocks that have an address keep it and are overwritten
/// there (`ipu`).
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub log: CursegType,
    pub in_place: bool,
}

impl Target {
    /// Every block to a new address in `log`.
    pub fn out_of_place(log: CursegType) -> Target {
        Target {
            log,
            in_place: false,
        }
    }
}

/// [`write_blocks`], but a failure also says how many leading blocks were
/// written: those are fully in place (data on disk, counted in i_blocks),
/// the others untouched. `policy` says how many blocks one allocation
/// step takes (all of a serialized write: one contiguous run);
/// `allocated` is called once every block has its address. A serialized
/// write that continues the file's previous one, or fills preallocated
/// blocks with more ahead, goes to the file's stream (`segment/stream.rs`),
/// so consecutive requests stay contiguous among concurrent writers.
///
/// Blocks are allocated first, their data written, and only then do the
/// nodes point at them (one guarded change per node), so a concurrent
/// reader of a directory or of another range never maps a block whose
/// data is not on the device yet.
pub fn write_blocks_upto(
    ctx: &Ctx,
    inode: &InodeInfo,
    first: u64,
    data: &[u8],
    target: Target,
    policy: DataPolicy,
    allocated: &dyn Fn(),
) -> std::result::Result<u64, (usize, Error)> {
    debug_assert!(data.len().is_multiple_of(F2FS_BLKSIZE));
    let count = data.len() / F2FS_BLKSIZE;
    let mut placed: Vec<PlacedBlock> = Vec::with_capacity(count);
    let placing = map_slots(ctx, inode, first, count).and_then(|slots| {
        // A serialized write may open a stream; a smaller one (write-back
        // cuts some of a file's chunks short) only joins the file's open
        // stream where it spans it, so it lands between its neighbours.
        let opens = policy.streams == StreamUse::Open && policy.serializes(count);
        let joins = policy.streams != StreamUse::Off && policy.serialize_from != 0;
        let step_blocks = policy.allocation_step(count);
        slots
            .chunks(step_blocks)
            .enumerate()
            .try_for_each(|(k, step)| {
                let step_first = first + (k * step_blocks) as u64;
                let stream = joins
                    .then(|| stream_request(inode, step_first, step, target, opens))
                    .flatten();
                place_blocks(ctx, inode, step, target, stream, &mut placed)
            })
    });
    allocated();
    let done = placed.len();
    let written = write_placed(ctx, inode, &placed, data);
    let published = written.and_then(|()| publish_placed(ctx, inode, &placed));
    match (placing, published) {
        (Ok(()), Ok(filled)) => Ok(filled),
        (Err(e), _) | (_, Err(e)) => Err((done, e)),
    }
}

/// What the allocator needs to know to place a serialized write of `slots`
/// (from file block `first`) in the file's stream; None if it allocates
/// nothing (every block rewritten in place).
fn stream_request(
    inode: &InodeInfo,
    first: u64,
    slots: &[(AddrSlot, u32)],
    target: Target,
    may_open: bool,
) -> Option<StreamRequest> {
    let allocating = slots
        .iter()
        .filter(|(_, old)| !(target.in_place && is_block(*old)))
        .count() as u64;
    let end = first + slots.len() as u64;
    // Preallocated up to here: fallocate reserves whole ranges, so the
    // blocks up to the file's end are what its writer will fill next.
    let ahead = match slots.last() {
        Some((_, NEW_ADDR)) => inode.size.div_ceil(F2FS_BLKSIZE as u64).saturating_sub(end),
        _ => 0,
    };
    (allocating > 0).then_some(StreamRequest {
        ino: inode.ino,
        first,
        blocks: slots.len() as u64,
        ahead,
        may_open,
        fills_holes: slots.iter().all(|(_, old)| !is_block(*old)),
        file_blocks: inode.size.div_ceil(F2FS_BLKSIZE as u64),
    })
}

/// The slots of file blocks `[first, first + count)` with the addresses
/// they hold, creating missing nodes: each node is walked to and read once
/// for all of its slots.
fn map_slots(
    ctx: &Ctx,
    inode: &InodeInfo,
    first: u64,
    count: usize,
) -> Result<Vec<(AddrSlot, u32)>> {
    let mut slots = Vec::with_capacity(count);
    while slots.len() < count {
        let index = first + slots.len() as u64;
        let slot = addr_slot(ctx, inode, index, true)?.expect("created");
        let in_node = slots_left_in_node(inode, index).min((count - slots.len()) as u64);
        let node = ctx.nm.read_node(slot.nid, slot_expect(inode, &slot))?;
        for k in 0..in_node as usize {
            let next = AddrSlot {
                nid: slot.nid,
                ofs_in_node: slot.ofs_in_node + k as u16,
                byte: slot.byte + 4 * k,
            };
            slots.push((next, read_u32(&node, next.byte)));
        }
    }
    Ok(slots)
}

/// Slots from the one of file block `index` to the end of its node's
/// address array.
fn slots_left_in_node(inode: &InodeInfo, index: u64) -> u64 {
    let addrs = inode.addrs();
    match block_path(index, addrs) {
        Some(path) if path.depth == 0 => (addrs.per_inode - path.slots[0] as u32) as u64,
        Some(path) => (addrs.per_block - path.slots[path.depth] as u32) as u64,
        None => 1,
    }
}

/// Writes `blocks` (file index → contents) of a file whose slots for them
/// are holes as new blocks, and points the slots in nodes other than the
/// inode at them. The slots in the inode itself are returned as (byte
/// offset in the inode block, address) for the caller to set, and count in
/// `i_blocks`, in the change that makes them reachable: an inline
/// directory's inline area overlaps them until its conversion. On an
/// error no block stays allocated.
pub fn write_unpublished_blocks(
    ctx: &Ctx,
    inode: &InodeInfo,
    blocks: &std::collections::BTreeMap<u64, Vec<u8>>,
    log: CursegType,
) -> Result<Vec<(usize, u32)>> {
    let mut placed: Vec<PlacedBlock> = Vec::with_capacity(blocks.len());
    let written = blocks.iter().try_for_each(|(&index, data)| {
        let slot = addr_slot(ctx, inode, index, true)?.expect("created");
        place_blocks(
            ctx,
            inode,
            &[(slot, NULL_ADDR)],
            Target::out_of_place(log),
            None,
            &mut placed,
        )?;
        let new = placed.last().expect("just placed").new;
        ctx.dev.write_blocks(data_kind(inode), new as u64, data)
    });
    if let Err(e) = written {
        let mut space = ctx.space.lock();
        for p in &placed {
            space.invalidate(p.new)?;
            space.release_blocks(1)?;
        }
        return Err(e);
    }
    let (in_inode, in_nodes): (Vec<PlacedBlock>, Vec<PlacedBlock>) =
        placed.into_iter().partition(|p| p.slot.nid == inode.ino);
    publish_placed(ctx, inode, &in_nodes)?;
    Ok(in_inode.iter().map(|p| (p.slot.byte, p.new)).collect())
}

/// A file block given a new address that its node does not point at yet,
/// or (`new == old`) rewritten in place.
struct PlacedBlock {
    slot: AddrSlot,
    old: u32,
    new: u32,
}

/// Allocates new addresses for `slots` (each with the address it holds;
/// a hole's block is counted as used) in one hold of the space lock, so
/// they are consecutive in `log` unless it moves to another segment; the
/// slots are not changed yet. With `target.in_place`, a slot holding a
/// block keeps it. With `stream`, the blocks may go to the file's stream
/// instead of the log. When the space (or the quota) for all the holes is
/// not there, blocks are placed one by one until it runs out.
fn place_blocks(
    ctx: &Ctx,
    inode: &InodeInfo,
    slots: &[(AddrSlot, u32)],
    target: Target,
    stream: Option<StreamRequest>,
    placed: &mut Vec<PlacedBlock>,
) -> Result<()> {
    let Target { log, in_place } = target;
    // Summaries need each node's NAT version; the NAT is not read under the space lock.
    let mut versions = Vec::with_capacity(slots.len());
    let mut last: Option<(u32, u8)> = None;
    for (slot, _) in slots {
        let version = match last {
            Some((nid, version)) if nid == slot.nid => version,
            _ => ctx.nm.nat_entry(slot.nid)?.version,
        };
        last = Some((slot.nid, version));
        versions.push(version);
    }
    let holes = slots.iter().filter(|(_, old)| *old == NULL_ADDR).count() as u64;
    let mut quota_left = ctx.quota_allows(inode, holes)?;
    let mut space = ctx.space.lock();
    let reserved_all = quota_left == holes && space.reserve_blocks(holes).is_ok();
    let streamed = stream.is_some_and(|req| space.begin_stream_request(req, log));
    for (i, (&(slot, old), version)) in slots.iter().zip(versions).enumerate() {
        if in_place && is_block(old) {
            space.note_in_place_write(old)?;
            placed.push(PlacedBlock {
                slot,
                old,
                new: old,
            });
            continue;
        }
        if old == NULL_ADDR && !reserved_all {
            if quota_left == 0 {
                return Err(Error::new(ErrorKind::QuotaExceeded, "block quota exceeded"));
            }
            space.reserve_blocks(1)?;
            quota_left -= 1;
        }
        let owner = Summary::new(slot.nid, version, slot.ofs_in_node);
        let allocated = match stream.filter(|_| streamed) {
            Some(req) => space.allocate_streamed(inode.ino, req.first + i as u64, log, owner),
            None => space.allocate(log, owner),
        };
        match allocated {
            Ok(new) => {
                space.note_out_of_place_writes(log, 1);
                placed.push(PlacedBlock { slot, old, new })
            }
            Err(e) => {
                let unplaced_holes = if reserved_all {
                    slots[i..]
                        .iter()
                        .filter(|(_, old)| *old == NULL_ADDR)
                        .count() as u64
                } else {
                    (old == NULL_ADDR) as u64
                };
                space.release_blocks(unplaced_holes)?;
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Writes the data of `placed` (consecutive blocks of `data` from its
/// start), one device request per run of consecutive addresses.
fn write_placed(ctx: &Ctx, inode: &InodeInfo, placed: &[PlacedBlock], data: &[u8]) -> Result<()> {
    let in_place = |p: &PlacedBlock| p.new == p.old;
    let mut from = 0;
    while from < placed.len() {
        let mut to = from + 1;
        while to < placed.len()
            && placed[to].new == placed[to - 1].new + 1
            && in_place(&placed[to]) == in_place(&placed[from])
        {
            to += 1;
        }
        // Counted apart: fsync needs to know whether new addresses were written.
        let kind = if in_place(&placed[from]) {
            IoKind::InPlaceData
        } else {
            data_kind(inode)
        };
        ctx.dev.write_blocks(
            kind,
            placed[from].new as u64,
            &data[from * F2FS_BLKSIZE..to * F2FS_BLKSIZE],
        )?;
        from = to;
    }
    Ok(())
}

/// Points the slots of `placed` at their new addresses (one guarded change
/// per node), invalidates the old blocks and counts the filled holes in
/// `i_blocks`; returns how many holes were filled.
fn publish_placed(ctx: &Ctx, inode: &InodeInfo, placed: &[PlacedBlock]) -> Result<u64> {
    // Blocks rewritten in place need no change of their node.
    let moved: Vec<&PlacedBlock> = placed.iter().filter(|p| p.new != p.old).collect();
    for same_node in moved.chunk_by(|a, b| a.slot.nid == b.slot.nid) {
        let first = &same_node[0].slot;
        ctx.nm
            .update_node(first.nid, slot_expect(inode, first), |b| {
                for p in same_node {
                    write_u32(b, p.slot.byte, p.new);
                }
            })?;
    }
    let filled = {
        let mut space = ctx.space.lock();
        // The summary a new block got when it was handed out names the slot
        // now pointing at it (checked while its log still holds it).
        for p in &moved {
            let owner = space.log_summary(p.new);
            crate::invariant::ensure_invariant!(
                ctx.dev.health(),
                owner.is_none_or(
                    |s| (s.nid.get(), s.ofs_in_node.get()) == (p.slot.nid, p.slot.ofs_in_node)
                ),
                "block {:#x} given to slot {} of node {}, its summary names {owner:?}",
                p.new,
                p.slot.ofs_in_node,
                p.slot.nid
            );
        }
        for p in moved
            .iter()
            .filter(|p| p.old != NULL_ADDR && p.old != NEW_ADDR)
        {
            space.invalidate(p.old)?;
        }
        placed.iter().filter(|p| p.old == NULL_ADDR).count() as u64
    };
    if filled > 0 {
        ctx.update_inode(inode.ino, |raw| {
            raw.i_blocks.set(raw.i_blocks.get() + filled)
        })?;
    }
    Ok(filled)
}

/// Writes `data` at byte `offset` of a regular file or symlink, growing it.
/// Returns the bytes written, fewer than asked when the write reaches the
/// largest file size or when space runs out after some blocks were written
/// (a short write, as POSIX allows); fails only if nothing was written.
pub fn write_data(
    ctx: &Ctx,
    ino: u32,
    offset: u64,
    data: &[u8],
    policy: DataPolicy,
    allocated: &dyn Fn(),
) -> Result<usize> {
    let mut inode = ctx.inode(ino)?;
    check_readable(&inode)?;
    if !matches!(inode.kind, Kind::Regular | Kind::Symlink) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {ino} is not a regular file"),
        ));
    }
    if data.is_empty() {
        return Ok(0);
    }
    let data = within_largest_file(&inode, offset, data)?;
    let end = offset + data.len() as u64;
    if inline::has_inline_data(&inode) {
        if end <= inode.layout.max_inline_data() as u64 {
            inline::write_inline_data(ctx, ino, offset as usize, data)?;
            finish_write(ctx, ino, end)?;
            return Ok(data.len());
        }
        convert_inline_to_block(ctx, &inode)?;
        inode = ctx.inode(ino)?;
    }
    let bs = F2FS_BLKSIZE as u64;
    let first = offset / bs;
    let last = (end - 1) / bs;
    let head = (offset - first * bs) as usize;
    if offset > inode.size && inode.size / bs < first {
        // The gap before the write reads as zeros, the old last block's tail too.
        zero_tail(ctx, &inode, inode.size)?;
    }
    // Whole blocks are written straight from the caller's buffer; partial
    // first and last blocks are merged with their old bytes in a copy.
    let merged;
    let blocks: &[u8] = if head == 0 && end.is_multiple_of(bs) {
        data
    } else {
        let mut buf = vec![0u8; ((last - first + 1) * bs) as usize];
        if head != 0 || (data.len() as u64) < bs {
            read_block_into(ctx, &inode, first, &mut buf[..F2FS_BLKSIZE])?;
        }
        let tail_block = last - first;
        if tail_block > 0 && !end.is_multiple_of(bs) {
            let at = (tail_block * bs) as usize;
            read_block_into(ctx, &inode, last, &mut buf[at..at + F2FS_BLKSIZE])?;
        }
        buf[head..head + data.len()].copy_from_slice(data);
        merged = buf;
        &merged
    };
    let chunk = zeroout_chunk(ctx, &inode, first..last + 1, policy.zeroout_blocks)?;
    let zeroed;
    let mut policy = policy;
    let blocks: &[u8] = if chunk == (first..last + 1) {
        blocks
    } else {
        policy.streams = policy.streams.min(StreamUse::Join);
        let mut buf = vec![0u8; ((chunk.end - chunk.start) * bs) as usize];
        let at = ((first - chunk.start) * bs) as usize;
        buf[at..at + blocks.len()].copy_from_slice(blocks);
        zeroed = buf;
        &zeroed
    };
    let state = policy.ipu.map(|_| {
        let space = ctx.space.lock();
        WriteState {
            need_ssr: space.need_ssr(),
            utilization: space.utilization(),
            fsync_bound: policy.fsync_bound,
        }
    });
    let target = Target {
        log: data_log(&inode),
        in_place: ipu::should_update_in_place(&inode, policy.ipu, state.unwrap_or_default()),
    };
    match write_blocks_upto(ctx, &inode, chunk.start, blocks, target, policy, allocated) {
        Ok(_) => {
            finish_write(ctx, ino, end)?;
            Ok(data.len())
        }
        Err((done, e)) => {
            let written = ((chunk.start + done as u64) * bs)
                .min(end)
                .saturating_sub(offset);
            if written == 0 || !matches!(e.kind(), ErrorKind::NoSpace | ErrorKind::QuotaExceeded) {
                return Err(e);
            }
            finish_write(ctx, ino, offset + written)?;
            Ok(written as usize)
        }
    }
}

/// The blocks a range lock for writing `blocks` must cover so that the
/// write may zero out the reserved blocks after it: `blocks` widened to
/// the end of its window of `zeroout_blocks` (unchanged when 0). Two
/// writes into one window overlap there, so they never zero out each
/// other's blocks.
pub fn zeroout_window(blocks: Range<u64>, zeroout_blocks: u64) -> Range<u64> {
    if zeroout_blocks == 0 || blocks.is_empty() {
        return blocks;
    }
    let end = blocks
        .end
        .div_ceil(zeroout_blocks)
        .saturating_mul(zeroout_blocks);
    blocks.start..end
}

/// The blocks a write of `blocks` writes (ext4's extent_zeroout_len
/// applied to F2FS reservations): when its last block is reserved
/// (NEW_ADDR), the reserved blocks after it, up to the end of its aligned
/// window of `zeroout_blocks` (`zeroout_window`, which the caller holds),
/// are written too, with zeros; so the window gets real blocks, allocated
/// together, that later writes can rewrite in place. Only after the
/// write: every zeroed block then follows written data without a hole
/// between, so SEEK_DATA from the file's start or from the end of a hole,
/// and every SEEK_HOLE, answer as the kernel's f2fs does, which reports
/// reserved blocks as neither data nor hole (README, `extent_zeroout_len`).
fn zeroout_chunk(
    ctx: &Ctx,
    inode: &InodeInfo,
    blocks: Range<u64>,
    zeroout_blocks: u64,
) -> Result<Range<u64>> {
    let window = zeroout_window(blocks.clone(), zeroout_blocks);
    if window == blocks || inode.kind != Kind::Regular || inode.compression.is_some() {
        return Ok(blocks);
    }
    let max = max_file_blocks(inode.addrs());
    let mut mapper = BlockMapper::new(ctx.nm, inode);
    let mut reserved =
        |index: u64| -> Result<bool> { Ok(index < max && mapper.map(index)? == NEW_ADDR) };
    let mut end = blocks.end;
    if reserved(end - 1)? {
        while end < window.end && reserved(end)? {
            end += 1;
        }
    }
    Ok(blocks.start..end)
}

/// The part of a write of `data` at `offset` below the largest file size
/// (like the kernel, a write crossing it stops there); EFBIG if none is.
pub fn within_largest_file<'d>(inode: &InodeInfo, offset: u64, data: &'d [u8]) -> Result<&'d [u8]> {
    let max = max_file_blocks(inode.addrs()) * F2FS_BLKSIZE as u64;
    if offset >= max {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("inode {}: write past the largest file size", inode.ino),
        ));
    }
    Ok(&data[..(data.len() as u64).min(max - offset) as usize])
}

/// Moves a file's inline bytes to block 0 (the kernel converts before a file
/// outgrows its inode).
pub fn convert_inline_to_block(ctx: &Ctx, inode: &InodeInfo) -> Result<()> {
    let old = inline::inline_data(inode);
    if old.iter().any(|&b| b != 0) {
        // Block 0 first: its address word is not part of the inline area,
        // and if there is no space the file is still unchanged.
        let mut block = vec![0u8; F2FS_BLKSIZE];
        block[..old.len()].copy_from_slice(old);
        write_blocks(ctx, inode, 0, &block, data_log(inode))?;
    }
    inline::take_inline_data(ctx, inode)?;
    Ok(())
}

fn read_block_into(ctx: &Ctx, inode: &InodeInfo, index: u64, out: &mut [u8]) -> Result<()> {
    let addr = match addr_slot(ctx, inode, index, false)? {
        Some(slot) => get_addr(ctx, inode, &slot)?,
        None => NULL_ADDR,
    };
    if addr == NULL_ADDR || addr == NEW_ADDR {
        out.fill(0);
        Ok(())
    } else {
        ctx.dev.read_blocks(data_kind(inode), addr as u64, out)
    }
}

fn finish_write(ctx: &Ctx, ino: u32, end: u64) -> Result<()> {
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        if end > raw.i_size.get() {
            raw.i_size.set(end);
        }
        set_mtime(raw, t);
        set_ctime(raw, t);
        // The cached extent may no longer describe the mapping.
        raw.i_ext = Default::default();
    })
}

/// Frees an address found in a node of `inode`: NEW_ADDR reservations,
/// compressed-cluster markers (counted blocks unless the file was
/// released) and real blocks. Returns the blocks it counted.
fn free_addr(ctx: &Ctx, inode: &InodeInfo, addr: u32) -> Result<u64> {
    let mut space = ctx.space.lock();
    match addr {
        NULL_ADDR => return Ok(0),
        COMPRESS_ADDR if inode.compression.is_some_and(|c| c.released) => return Ok(0),
        NEW_ADDR | COMPRESS_ADDR => {}
        a => space.invalidate(a)?,
    }
    space.release_blocks(1)?;
    Ok(1)
}

/// Frees every address with file index >= `from` under node `nid`, which
/// covers `[start, start + span)` and sits `levels` above the data (0 = a
/// direct node). Frees the node too when it covers nothing kept. Returns
/// (blocks freed, whether the node was freed).
fn truncate_node(
    ctx: &Ctx,
    inode: &InodeInfo,
    nid: u32,
    ofs: u32,
    start: u64,
    levels: u32,
    from: u64,
) -> Result<(u64, bool)> {
    let per = if levels == 0 {
        inode.addrs().per_block
    } else {
        NIDS_PER_BLOCK
    };
    let expect = NodeExpect {
        ino: Some(inode.ino),
        ofs: Some(ofs),
    };
    let block = ctx.nm.read_node(nid, expect)?;
    let child_span = if levels == 0 {
        1
    } else {
        inode.addrs().node_span(levels - 1)
    };
    let mut freed = 0u64;
    let first_slot = if from <= start {
        0
    } else {
        ((from - start) / child_span) as usize
    };
    let mut cleared = Vec::new();
    for slot in first_slot..per as usize {
        let value = node_slot(&block, slot);
        if value == 0 {
            continue;
        }
        let child_start = start + slot as u64 * child_span;
        if levels == 0 {
            if child_start >= from {
                freed += free_addr(ctx, inode, value)?;
                cleared.push(slot);
            }
        } else {
            let child_ofs = child_node_ofs(ofs, levels, slot as u32);
            let (n, gone) =
                truncate_node(ctx, inode, value, child_ofs, child_start, levels - 1, from)?;
            freed += n;
            if gone {
                cleared.push(slot);
            }
        }
    }
    if start >= from {
        ctx.free_node(nid, false)?;
        return Ok((freed + 1, true));
    }
    if !cleared.is_empty() {
        ctx.nm.update_node(nid, expect, |b| {
            for slot in cleared {
                f2fuse_layout::node::set_node_slot(b, slot, 0);
            }
        })?;
    }
    Ok((freed, false))
}

/// Node offset of the `slot`-th child of the node at `ofs` that sits `levels` above data.
fn child_node_ofs(ofs: u32, levels: u32, slot: u32) -> u32 {
    let n = ADDRS_PER_BLOCK;
    match (ofs, levels) {
        // Indirect nodes: their direct children follow them.
        (_, 1) => ofs + 1 + slot,
        // The double-indirect node: each indirect child is followed by its N direct nodes.
        _ => ofs + 1 + slot * (n + 1),
    }
}

/// Frees every block at file index >= `from` (and the nodes left empty).
pub fn truncate_blocks(ctx: &Ctx, ino: u32, from: u64) -> Result<()> {
    ctx.space.lock().forget_stream(ino, from);
    let inode = ctx.inode(ino)?;
    // Inline bytes (data or dentries) and device numbers sit where the
    // addresses would be; fifos and sockets have no blocks either.
    if inline::has_inline_data(&inode)
        || inline::has_inline_dentry(&inode)
        || !matches!(inode.kind, Kind::Regular | Kind::Directory | Kind::Symlink)
    {
        return Ok(());
    }
    let addrs = inode.addrs();
    let a = addrs.per_inode as u64;
    let span = |levels| addrs.node_span(levels);
    let mut freed = 0u64;
    // Addresses in the inode itself.
    let mut cleared = Vec::new();
    for index in from.min(a)..a {
        let addr = inode.inode().data_addr(&inode.layout, index as usize);
        if addr != NULL_ADDR {
            freed += free_addr(ctx, &inode, addr)?;
            cleared.push(index as usize);
        }
    }
    let subtrees: [(usize, u32, u64, u32); 5] = [
        (0, 1, a, 0),
        (1, 2, a + span(0), 0),
        (2, node::IND_OFS_1, a + 2 * span(0), 1),
        (3, node::IND_OFS_2, a + 2 * span(0) + span(1), 1),
        (4, node::DIND_OFS, a + 2 * span(0) + 2 * span(1), 2),
    ];
    let mut cleared_nids = Vec::new();
    for (slot, ofs, start, levels) in subtrees {
        let nid = inode.inode().i_nid[slot].get();
        if nid == 0 || start + span(levels) <= from {
            continue;
        }
        let (count, gone) = truncate_node(ctx, &inode, nid, ofs, start, levels, from)?;
        freed += count;
        if gone {
            cleared_nids.push(slot);
        }
    }
    ctx.try_update_inode(ino, |raw| {
        let blocks = blocks_less(raw, freed)?;
        let layout = inode.layout;
        for index in cleared {
            raw.set_data_addr(&layout, index, NULL_ADDR);
        }
        for slot in cleared_nids {
            raw.i_nid[slot].set(0);
        }
        raw.i_blocks.set(blocks);
        raw.i_ext = Default::default();
        Ok(())
    })
}

/// Sets a file's size: frees blocks past it and zeroes the tail of the last one.
pub fn truncate(ctx: &Ctx, ino: u32, size: u64) -> Result<()> {
    let inode = ctx.inode(ino)?;
    if size > max_file_blocks(inode.addrs()) * F2FS_BLKSIZE as u64 {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("inode {ino}: size {size} too large"),
        ));
    }
    if inline::has_inline_data(&inode) && size > inode.layout.max_inline_data() as u64 {
        convert_inline_to_block(ctx, &inode)?;
    } else if size <= inode.size {
        // At the same size too, as f2fs: blocks reserved past EOF go.
        if inline::has_inline_data(&inode) {
            inline::truncate_inline_data(ctx, ino, size as usize)?;
        } else {
            // Zero the tail of the new last block before freeing anything:
            // only this step can run out of space.
            zero_tail(ctx, &inode, size)?;
            truncate_blocks(ctx, ino, size.div_ceil(F2FS_BLKSIZE as u64))?;
        }
    } else if !inline::has_inline_data(&inode) {
        zero_tail(ctx, &inode, inode.size)?;
    }
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        raw.i_size.set(size);
        set_mtime(raw, t);
        set_ctime(raw, t);
    })
}

/// Zeroes the bytes after `size` in the block holding it, if any is not
/// zero. A shrinking truncate leaves zeros there; growing the file makes
/// sure of them: a power cut during an in-place write past an older size
/// that the file fell back to can leave bytes there.
fn zero_tail(ctx: &Ctx, inode: &InodeInfo, size: u64) -> Result<()> {
    let bs = F2FS_BLKSIZE as u64;
    if size.is_multiple_of(bs) {
        return Ok(());
    }
    let index = size / bs;
    let mut block = vec![0u8; F2FS_BLKSIZE];
    read_block_into(ctx, inode, index, &mut block)?;
    let keep = (size % bs) as usize;
    if block[keep..].iter().any(|&b| b != 0) {
        block[keep..].fill(0);
        write_blocks(ctx, inode, index, &block, data_log(inode))?;
    }
    Ok(())
}

/// Frees one block of a file (a hole appears).
pub fn punch_block(ctx: &Ctx, inode: &InodeInfo, index: u64) -> Result<()> {
    let Some(slot) = addr_slot(ctx, inode, index, false)? else {
        return Ok(());
    };
    let addr = get_addr(ctx, inode, &slot)?;
    let freed = free_addr(ctx, inode, addr)?;
    if freed > 0 {
        set_addr(ctx, inode, &slot, NULL_ADDR)?;
        ctx.try_update_inode(inode.ino, |raw| {
            raw.i_blocks.set(blocks_less(raw, freed)?);
            raw.i_ext = Default::default();
            Ok(())
        })?;
    }
    Ok(())
}

// ---- fallocate(2) and lseek(2) SEEK_DATA/SEEK_HOLE ----

/// What a fallocate(2) call does, as F2FS (Linux 6.1 `f2fs_fallocate`)
/// accepts it. Built from the raw flags by [`FallocMode::from_flags`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Reserves the holes of the range as NEW_ADDR blocks (they read as
    /// zeros and count as used); grows the size unless `keep_size`.
    Allocate {
        /// Leave the file size alone (FALLOC_FL_KEEP_SIZE).
        keep_size: bool,
    },
    /// Zeroes the partial blocks at the ends and frees the whole blocks;
    /// the size never changes (the VFS requires KEEP_SIZE with it).
    PunchHole,
    /// Zeroes the partial blocks and turns the whole ones into NEW_ADDR
    /// reservations; grows the size unless `keep_size`.
    ZeroRange {
        /// Leave the file size alone (FALLOC_FL_KEEP_SIZE).
        keep_size: bool,
    },
    /// Removes a block-aligned range, shifting the rest of the file down.
    CollapseRange,
    /// Inserts a block-aligned hole, shifting the rest of the file up.
    InsertRange,
}

impl FallocMode {
    /// Decodes fallocate(2) mode flags with the VFS's and f2fs's rules:
    /// unknown flags and PUNCH_HOLE without KEEP_SIZE are EOPNOTSUPP;
    /// PUNCH_HOLE with ZERO_RANGE, and COLLAPSE/INSERT with anything, EINVAL.
    pub fn from_flags(flags: i32) -> Result<FallocMode> {
        use libc::{
            FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
            FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH,
            FALLOC_FL_ZERO_RANGE as ZERO,
        };
        let bad = |kind, why: &str| {
            Err(Error::new(
                kind,
                format!("fallocate mode {flags:#x}: {why}"),
            ))
        };
        if flags & !(KEEP | PUNCH | COLLAPSE | ZERO | INSERT) != 0 {
            return bad(ErrorKind::Unsupported, "unknown flags");
        }
        if flags & PUNCH != 0 && flags & ZERO != 0 {
            return bad(ErrorKind::InvalidArgument, "punch hole with zero range");
        }
        if flags & PUNCH != 0 && flags & KEEP == 0 {
            return bad(ErrorKind::Unsupported, "punch hole without keep size");
        }
        for (flag, name) in [(COLLAPSE, "collapse range"), (INSERT, "insert range")] {
            if flags & flag != 0 && flags != flag {
                return bad(
                    ErrorKind::InvalidArgument,
                    &format!("{name} with other flags"),
                );
            }
        }
        let keep_size = flags & KEEP != 0;
        Ok(if flags & PUNCH != 0 {
            FallocMode::PunchHole
        } else if flags & ZERO != 0 {
            FallocMode::ZeroRange { keep_size }
        } else if flags & COLLAPSE != 0 {
            FallocMode::CollapseRange
        } else if flags & INSERT != 0 {
            FallocMode::InsertRange
        } else {
            FallocMode::Allocate { keep_size }
        })
    }
}

/// Blocks moved per step of a collapse or insert: also the most blocks such
/// a step holds twice, which the space check before it accounts for.
const SHIFT_STEP_BLOCKS: u64 = 64;
/// Node blocks one shift step may create on its way (a new direct node for
/// each end, an indirect and a double indirect one).
const SHIFT_STEP_NODES: u64 = 4;

/// Runs fallocate on regular file `ino` (the caller checked the kind).
/// The checks vfs_fallocate makes before any file system's: a length,
/// and an end within the largest file. Returns (end, largest size).
pub fn fallocate_range(inode: &InodeInfo, offset: u64, len: u64) -> Result<(u64, u64)> {
    if len == 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "fallocate of length 0",
        ));
    }
    let max = max_file_blocks(inode.addrs()) * F2FS_BLKSIZE as u64;
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= max && e <= i64::MAX as u64)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::FileTooLarge,
                format!("inode {}: fallocate past the largest file size", inode.ino),
            )
        })?;
    Ok((end, max))
}

pub fn fallocate(ctx: &Ctx, ino: u32, offset: u64, len: u64, mode: FallocMode) -> Result<()> {
    let inode = ctx.inode(ino)?;
    check_readable(&inode)?;
    let (end, max) = fallocate_range(&inode, offset, len)?;
    let bs = F2FS_BLKSIZE as u64;
    let aligned = offset.is_multiple_of(bs) && len.is_multiple_of(bs);
    // Refusals first, before any conversion changes the file. A pinned
    // file's blocks may be in use by address (swap, OTA files): as f2fs,
    // only preallocation.
    if ipu::is_pinned(&inode) && !matches!(mode, FallocMode::Allocate { .. }) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("inode {ino}: only preallocation on a pinned file"),
        ));
    }
    match mode {
        FallocMode::CollapseRange if !aligned || end >= inode.size => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "collapse range: unaligned or reaching EOF",
            ))
        }
        FallocMode::InsertRange if !aligned || offset >= inode.size => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "insert range: unaligned or at/after EOF",
            ))
        }
        FallocMode::InsertRange if inode.size + len > max => {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                "insert range: file would grow too large",
            ))
        }
        // As f2fs: punching at or past EOF does nothing.
        FallocMode::PunchHole if offset >= inode.size => return Ok(()),
        _ => {}
    }
    let inode = if inline::has_inline_data(&inode) {
        convert_inline_to_block(ctx, &inode)?;
        ctx.inode(ino)?
    } else {
        inode
    };
    let grow_to = match mode {
        FallocMode::Allocate { keep_size } => {
            preallocate(ctx, &inode, offset / bs, end.div_ceil(bs))?;
            if ipu::is_pinned(&inode) {
                allocate_pinned(ctx, &ctx.inode(ino)?, offset / bs, end.div_ceil(bs))?;
            }
            (!keep_size).then_some(end)
        }
        FallocMode::ZeroRange { keep_size } => {
            zero_range(ctx, &inode, offset, end)?;
            (!keep_size).then_some(end)
        }
        FallocMode::PunchHole => {
            punch_range(ctx, &inode, offset, end)?;
            None
        }
        FallocMode::CollapseRange => {
            shift_range(ctx, &inode, offset / bs, len / bs, Shift::Collapse)?;
            set_size(ctx, ino, inode.size - len)?;
            None
        }
        FallocMode::InsertRange => {
            shift_range(ctx, &inode, offset / bs, len / bs, Shift::Insert)?;
            set_size(ctx, ino, inode.size + len)?;
            None
        }
    };
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        if let Some(size) = grow_to.filter(|&s| s > raw.i_size.get()) {
            raw.i_size.set(size);
        }
        set_mtime(raw, t);
        set_ctime(raw, t);
        raw.i_ext = Default::default();
    })
}

fn set_size(ctx: &Ctx, ino: u32, size: u64) -> Result<()> {
    ctx.update_inode(ino, |raw| raw.i_size.set(size))
}

/// Counts the holes (NULL_ADDR blocks) of `[first, end)`.
fn count_holes(ctx: &Ctx, inode: &InodeInfo, first: u64, end: u64) -> Result<u64> {
    let mut mapper = BlockMapper::new(ctx.nm, inode);
    let (mut index, mut holes) = (first, 0);
    while index < end {
        let (addr, run) = mapper.map_run(index)?;
        let run = run.min(end - index);
        if addr == NULL_ADDR {
            holes += run;
        }
        index += run;
    }
    Ok(holes)
}

/// Makes blocks `[first, end)` NEW_ADDR reservations: only the holes
/// (`holes_only`, fallocate's preallocation) or every block, freeing the
/// data it held. Each node is walked to once and changed in one guarded
/// step, its holes' space reserved before; i_blocks grows by the holes,
/// also when a later node fails.
fn reserve_blocks_in(
    ctx: &Ctx,
    inode: &InodeInfo,
    first: u64,
    end: u64,
    holes_only: bool,
) -> Result<()> {
    let mut added = 0u64;
    let walked = (|| {
        let mut index = first;
        while index < end {
            let count = slots_left_in_node(inode, index).min(end - index) as usize;
            let slot = addr_slot(ctx, inode, index, true)?.expect("created");
            added += ctx
                .nm
                .try_update_node(slot.nid, slot_expect(inode, &slot), |block| {
                    let bytes = (0..count).map(|k| slot.byte + 4 * k);
                    let holes = bytes
                        .clone()
                        .filter(|&byte| read_u32(block, byte) == NULL_ADDR)
                        .count() as u64;
                    ctx.quota_admits(inode, holes)?;
                    let mut space = ctx.space.lock();
                    space.reserve_blocks(holes)?;
                    for byte in bytes {
                        match read_u32(block, byte) {
                            NEW_ADDR => continue,
                            NULL_ADDR => {}
                            _ if holes_only => continue,
                            old => space.invalidate(old)?,
                        }
                        write_u32(block, byte, NEW_ADDR);
                    }
                    Ok(holes)
                })?;
            index += count as u64;
        }
        Ok(())
    })();
    if added > 0 {
        ctx.update_inode(inode.ino, |raw| {
            raw.i_blocks.set(raw.i_blocks.get() + added)
        })?;
    }
    walked
}

/// Applies `change` to each block of `[first, end)` that has a slot, with
/// its current address (missing nodes are skipped in one step), then
/// corrects i_blocks by the sum of what it returned, also when it failed
/// partway.
fn for_each_block(
    ctx: &Ctx,
    inode: &InodeInfo,
    first: u64,
    end: u64,
    mut change: impl FnMut(u32, AddrSlot) -> Result<i64>,
) -> Result<()> {
    let mut delta = 0i64;
    let walked = (|| {
        let mut index = first;
        while index < end {
            let Some(slot) = addr_slot(ctx, inode, index, false)? else {
                // The caller's inode may predate changes made meanwhile.
                let current = ctx.inode(inode.ino)?;
                let (_, run) = BlockMapper::new(ctx.nm, &current).map_run(index)?;
                index += run.max(1);
                continue;
            };
            let addr = get_addr(ctx, inode, &slot)?;
            delta += change(addr, slot)?;
            index += 1;
        }
        Ok(())
    })();
    if delta != 0 {
        ctx.try_update_inode(inode.ino, |raw| {
            let blocks = match delta {
                d if d < 0 => blocks_less(raw, d.unsigned_abs())?,
                d => raw.i_blocks.get() + d as u64,
            };
            raw.i_blocks.set(blocks);
            Ok(())
        })?;
    }
    walked
}

/// Makes every block of `[first, end)` a reservation.
fn reserve_range(ctx: &Ctx, inode: &InodeInfo, first: u64, end: u64) -> Result<()> {
    reserve_blocks_in(ctx, inode, first, end, false)
}

/// Reserves every hole of blocks `[first, end)`. Like f2fs, blocks that
/// hold data or are already reserved stay as they are. The free space is
/// checked first, so running out fails before anything changed (unless
/// the nodes on the way are what does not fit).
/// Gives the reserved blocks of pinned file `inode` in `[first, end)` real
/// blocks, as the kernel's expand_inode_data does for pinned files: each
/// section-sized piece of the range starts a new section of the cold data
/// log, so a pinned file's blocks are contiguous and fill whole sections.
/// Unlike the kernel, which maps the blocks without writing them (they
/// hold whatever was there), f2fuse writes zeros: another file's old data
/// must not show through. Blocks already written are kept.
fn allocate_pinned(ctx: &Ctx, inode: &InodeInfo, first: u64, end: u64) -> Result<()> {
    let section = ctx.space.lock().segs_per_sec() as u64 * BLOCKS_PER_SEG as u64;
    // One allocation step per run: each run is contiguous in the log.
    let policy = DataPolicy {
        streams: StreamUse::Off,
        ..DataPolicy::new(0, 1)
    };
    let mut piece = first;
    while piece < end {
        let piece_end = (piece + section).min(end);
        let mut mapper = BlockMapper::new(ctx.nm, inode);
        let mut opened = false;
        let mut index = piece;
        while index < piece_end {
            if mapper.map(index)? != NEW_ADDR {
                index += 1;
                continue;
            }
            let mut run_end = index + 1;
            while run_end < piece_end && mapper.map(run_end)? == NEW_ADDR {
                run_end += 1;
            }
            if !opened {
                ctx.space.lock().open_new_section(CursegType::ColdData)?;
                opened = true;
            }
            let zeros = vec![0u8; ((run_end - index) as usize) * F2FS_BLKSIZE];
            let target = Target::out_of_place(CursegType::ColdData);
            write_blocks_upto(ctx, inode, index, &zeros, target, policy, &|| ())
                .map_err(|(_, e)| e)?;
            mapper = BlockMapper::new(ctx.nm, inode);
            index = run_end;
        }
        piece = piece_end;
    }
    Ok(())
}

fn preallocate(ctx: &Ctx, inode: &InodeInfo, first: u64, end: u64) -> Result<()> {
    let holes = count_holes(ctx, inode, first, end)?;
    if holes > ctx.space.lock().free_user_blocks() {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!("inode {}: preallocating {holes} blocks", inode.ino),
        ));
    }
    reserve_blocks_in(ctx, inode, first, end, true)
}

/// Zeroes bytes `[from, to)` of block `index` in place of its data;
/// holes and reservations already read as zeros.
fn zero_in_block(ctx: &Ctx, inode: &InodeInfo, index: u64, from: usize, to: usize) -> Result<()> {
    let addr = match addr_slot(ctx, inode, index, false)? {
        Some(slot) => get_addr(ctx, inode, &slot)?,
        None => NULL_ADDR,
    };
    if from >= to || addr == NULL_ADDR || addr == NEW_ADDR {
        return Ok(());
    }
    let mut block = vec![0u8; F2FS_BLKSIZE];
    ctx.dev
        .read_blocks(data_kind(inode), addr as u64, &mut block)?;
    block[from..to].fill(0);
    write_blocks(ctx, inode, index, &block, data_log(inode)).map(|_| ())
}

/// The whole blocks inside bytes `[start, end)`, as `[first, end)`.
fn whole_blocks(start: u64, end: u64) -> (u64, u64) {
    let bs = F2FS_BLKSIZE as u64;
    let first = start.div_ceil(bs);
    (first, (end / bs).max(first))
}

/// Zeroes the parts of bytes `[start, end)` that do not cover a whole block.
fn zero_partial_ends(ctx: &Ctx, inode: &InodeInfo, start: u64, end: u64) -> Result<()> {
    let bs = F2FS_BLKSIZE as u64;
    let (first, last) = (start / bs, (end - 1) / bs);
    let ends = if first == last {
        vec![first]
    } else {
        vec![first, last]
    };
    for index in ends {
        let from = (start.max(index * bs) - index * bs) as usize;
        let to = (end.min((index + 1) * bs) - index * bs) as usize;
        if to - from < F2FS_BLKSIZE {
            zero_in_block(ctx, inode, index, from, to)?;
        }
    }
    Ok(())
}

fn punch_range(ctx: &Ctx, inode: &InodeInfo, start: u64, end: u64) -> Result<()> {
    zero_partial_ends(ctx, inode, start, end)?;
    let (first, end) = whole_blocks(start, end);
    free_blocks(ctx, inode, first, end)
}

/// Frees blocks `[first, end)` (data and reservations), leaving holes.
fn free_blocks(ctx: &Ctx, inode: &InodeInfo, first: u64, end: u64) -> Result<()> {
    for_each_block(ctx, inode, first, end, |addr, slot| {
        if addr == NULL_ADDR {
            return Ok(0);
        }
        set_addr(ctx, inode, &slot, NULL_ADDR)?;
        Ok(-(free_addr(ctx, inode, addr)? as i64))
    })
}

/// ZERO_RANGE as f2fs does it: partial blocks zeroed, whole blocks become
/// reservations (their data freed). Space for the holes is checked first.
fn zero_range(ctx: &Ctx, inode: &InodeInfo, start: u64, end: u64) -> Result<()> {
    let (first, whole_end) = whole_blocks(start, end);
    let holes = count_holes(ctx, inode, first, whole_end)?;
    if holes > ctx.space.lock().free_user_blocks() {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!("inode {}: zeroing {holes} unallocated blocks", inode.ino),
        ));
    }
    zero_partial_ends(ctx, inode, start, end)?;
    reserve_range(ctx, inode, first, whole_end)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shift {
    Collapse,
    Insert,
}

/// Moves the blocks after a removed range down (collapse) or the blocks
/// from `first` on up (insert) by `blocks`. Blocks beyond EOF are dropped
/// first, as f2fs does. A block is moved by writing its data to its new
/// index (out of place, so its summary names its new slot) and freeing the
/// old one; reservations move as reservations and holes as holes.
fn shift_range(ctx: &Ctx, inode: &InodeInfo, first: u64, blocks: u64, shift: Shift) -> Result<()> {
    let step_need = SHIFT_STEP_BLOCKS + SHIFT_STEP_NODES;
    if ctx.space.lock().free_user_blocks() < step_need {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!("inode {}: no room to move blocks", inode.ino),
        ));
    }
    let size_blocks = inode.size_blocks();
    truncate_blocks(ctx, inode.ino, size_blocks)?;
    match shift {
        Shift::Collapse => {
            free_blocks(ctx, inode, first, first + blocks)?;
            let mut src = first + blocks;
            while src < size_blocks {
                let n = SHIFT_STEP_BLOCKS.min(size_blocks - src);
                src += move_step(ctx, inode, src, src - blocks, n, size_blocks - src)?;
            }
        }
        Shift::Insert => {
            let mut src_end = size_blocks;
            while src_end > first {
                let n = SHIFT_STEP_BLOCKS.min(src_end - first);
                src_end -= move_step(ctx, inode, src_end - n, src_end - n + blocks, n, n)?;
            }
        }
    }
    Ok(())
}

/// One step of a shift: `n` blocks from `src` to `dst`, or, when `src`
/// starts a run of missing nodes (a sparse file), up to `most` blocks of
/// it at once by punching the destination. Returns the blocks done.
fn move_step(ctx: &Ctx, inode: &InodeInfo, src: u64, dst: u64, n: u64, most: u64) -> Result<u64> {
    let current = ctx.inode(inode.ino)?;
    let (addr, run) = BlockMapper::new(ctx.nm, &current).map_run(src)?;
    if addr == NULL_ADDR && run >= n {
        let done = run.min(most);
        free_blocks(ctx, inode, dst, dst + done)?;
        return Ok(done);
    }
    move_blocks(ctx, inode, src, dst, n)?;
    Ok(n)
}

/// Moves `n` blocks from index `src` to index `dst` (the ranges may
/// overlap): reads them all, places them at `dst`, then frees the source
/// blocks `dst` did not cover.
fn move_blocks(ctx: &Ctx, inode: &InodeInfo, src: u64, dst: u64, n: u64) -> Result<()> {
    // Mapped from the current inode, before anything in the range changes.
    let current = ctx.inode(inode.ino)?;
    let mut mapper = BlockMapper::new(ctx.nm, &current);
    let addrs = (src..src + n)
        .map(|index| mapper.map(index))
        .collect::<Result<Vec<u32>>>()?;
    let mut i = 0usize;
    while i < addrs.len() {
        let to = dst + i as u64;
        match addrs[i] {
            NULL_ADDR => {
                free_blocks(ctx, inode, to, to + 1)?;
                i += 1;
            }
            NEW_ADDR => {
                reserve_range(ctx, inode, to, to + 1)?;
                i += 1;
            }
            _ => {
                // A run of data blocks, read and written with one request each.
                let run = addrs[i..]
                    .iter()
                    .take_while(|&&a| a != NULL_ADDR && a != NEW_ADDR)
                    .count();
                let mut data = vec![0u8; run * F2FS_BLKSIZE];
                for (k, chunk) in data.chunks_mut(F2FS_BLKSIZE).enumerate() {
                    ctx.dev
                        .read_blocks(data_kind(inode), addrs[i + k] as u64, chunk)?;
                }
                write_blocks(ctx, inode, to, &data, data_log(inode))?;
                i += run;
            }
        }
    }
    let (dst_start, dst_end) = (dst, dst + n);
    let (src_start, src_end) = (src, src + n);
    // The source blocks outside the destination range are left behind: free them.
    if src_start < dst_start {
        free_blocks(ctx, inode, src_start, src_end.min(dst_start))?;
    } else {
        free_blocks(ctx, inode, src_start.max(dst_end), src_end)?;
    }
    Ok(())
}

/// What lseek(2) looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    /// The next offset holding data (SEEK_DATA).
    Data,
    /// The next offset in a hole (SEEK_HOLE).
    Hole,
}

/// SEEK_DATA / SEEK_HOLE from byte `offset`, as f2fs_seek_block answers:
/// ENXIO at or past EOF; an inline file is all data; a block with data is
/// data; a hole (NULL_ADDR) is a hole; a reservation (NEW_ADDR) is neither
/// (f2fs counts it as data only while a dirty page covers it, and writes
/// here replace it at once). EOF is the implicit hole at the end.
pub fn seek(nm: &NodeManager, inode: &InodeInfo, offset: u64, target: SeekTarget) -> Result<u64> {
    check_readable(inode)?;
    let size = inode.size;
    if offset >= size {
        return Err(Error::new(
            ErrorKind::NoSuchOffset,
            format!("inode {}: seek at or past EOF", inode.ino),
        ));
    }
    if inline::has_inline_data(inode) {
        return Ok(match target {
            SeekTarget::Data => offset,
            SeekTarget::Hole => size,
        });
    }
    let bs = F2FS_BLKSIZE as u64;
    let mut mapper = BlockMapper::new(nm, inode);
    let mut index = offset / bs;
    while index * bs < size {
        let (addr, run) = mapper.map_run(index)?;
        let found = match target {
            SeekTarget::Data => addr != NULL_ADDR && addr != NEW_ADDR,
            SeekTarget::Hole => addr == NULL_ADDR,
        };
        if found {
            return Ok((index * bs).max(offset).min(size));
        }
        index = index.saturating_add(run);
    }
    match target {
        SeekTarget::Data => Err(Error::new(
            ErrorKind::NoSuchOffset,
            format!("inode {}: no data after {offset}", inode.ino),
        )),
        SeekTarget::Hole => Ok(size),
    }
}
