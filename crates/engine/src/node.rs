//! The node address table and node blocks: translating a nid to the block
//! holding it, reading a node block only after its footer names the node we
//! asked for, and (for a writable file system) the node cache, NAT updates
//! and free-nid allocation.
//!
//! Where a NAT entry comes from, newest first: entries changed since mount
//! (`changed`), the checkpoint's NAT journal, the NAT block copy the
//! checkpoint's bitmap selects. Node contents: the dirty node cache, else
//! the block the NAT entry points at. A node created since the last flush
//! has block_addr `NEW_ADDR` and lives only in the cache.
//!
//! Invariant: a node block is changed only through a [`NodeGuard`], which
//! holds the node's lock from reading the block to putting the changed copy
//! in the dirty cache (as the kernel holds a locked node page), so two
//! changes of one node never lose each other. Readers get a consistent copy
//! without the guard. A node write drops a dirty entry only if it is still
//! the copy it wrote (its generation), so a change made meanwhile stays dirty.

use crate::checkpoint::CheckpointState;
use crate::device::{Block, Device, IoKind};
use crate::error::{Error, ErrorKind, Result};
use crate::extent_cache::ExtentCache;
use crate::lock_order::{self, Level};
use crate::quota::{Charge, Quota};
use crate::segment::SegmentManager;
use crate::stats::ShardedCounters;
use f2fuse_layout::node::{footer_of, footer_of_mut, is_dnode_offset, update_inode_checksum};
use f2fuse_layout::segment::{nat_block_addr, NatBlock, NatEntry, Summary};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use zerocopy::FromBytes;

/// Where a node read found its block.
enum NodeSource {
    /// The dirty node cache (changed since the last node write).
    Dirty,
    /// The clean cache of node blocks by address.
    Clean,
    /// Neither: read from the device.
    Device,
}

/// Node reads by where they were served from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCacheStats {
    /// Lookups of dirty cached nodes.
    pub dirty_hits: u64,
    /// Lookups of clean cached nodes.
    pub clean_hits: u64,
    /// Lookups that read the device.
    pub misses: u64,
}

/// What a caller knows about the node it is about to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeExpect {
    /// The inode that must own the node.
    pub ino: Option<u32>,
    /// The node offset its footer must carry.
    pub ofs: Option<u32>,
}

struct NatState {
    copy_bits: Vec<u8>,
    /// Entries of the checkpoint's NAT journal (they override NAT blocks).
    journal: BTreeMap<u32, NatEntry>,
    /// Entries set since mount: authoritative.
    changed: HashMap<u32, NatEntry>,
    /// Entries changed since the last checkpoint.
    dirty: BTreeSet<u32>,
    /// Current on-disk NAT blocks read so far, by block index.
    blocks: HashMap<u32, Arc<Vec<NatEntry>>>,
    /// Nids known free and not handed out.
    free: BTreeSet<u32>,
    /// Nids freed since the last checkpoint: reusable only after it commits.
    freed_since_checkpoint: Vec<u32>,
    /// Nids given a new node or freed since the last checkpoint (the
    /// kernel's nat entries without IS_CHECKPOINTED).
    created_since_checkpoint: HashSet<u32>,
    /// Inodes written by an fsync since the last checkpoint (HAS_FSYNCED_INODE).
    fsynced_inodes: HashSet<u32>,
    /// Next NAT block to scan for free nids.
    scan_block: u32,
    scanned_blocks: u32,
}

/// A dirty node block and the generation of this copy.
struct DirtyNode {
    block: Block,
    generation: u64,
}

/// A node block copied for writing: `generation` is that of the dirty copy
/// it came from (None if it was clean).
pub struct NodeCopy {
    pub nid: u32,
    pub block: Block,
    generation: Option<u64>,
}

/// Node locks, by nid modulo this count (a thread holds one at a time, so
/// two nids sharing a lock never deadlock).
const NODE_LOCK_STRIPES: usize = 256;

/// Dirty nodes `write_dirty_nodes` copies and writes at a time (4 MiB).
const WRITE_BATCH_NODES: usize = 1024;

pub struct NodeManager {
    dev: Arc<Device>,
    nat_blkaddr: u32,
    nat_blocks_per_copy: u32,
    main_start: u64,
    main_end: u64,
    max_nid: u32,
    nat: RwLock<NatState>,
    /// Node blocks modified since they were last written, by nid.
    dirty_nodes: Mutex<DirtyNodes>,
    /// The node guards' locks (see [`NodeGuard`]).
    node_locks: Box<[Mutex<()>]>,
    /// Recently read or written node blocks by block address. A block's
    /// content only changes when a node is written there, which refreshes
    /// the entry, so lookups through the NAT never see stale bytes.
    clean: Mutex<CleanCache>,
    /// Serializes nid allocation so a scan never re-offers a nid just handed out.
    alloc_lock: Mutex<()>,
    /// Where node reads were served from (indexed by [`NodeSource`]).
    lookups: ShardedCounters<3>,
    /// Inode checksums are kept current in cached inode blocks too.
    features: u32,
    checksum_seed: u32,
    /// Mapped runs of file blocks, dropped whenever a node of their inode
    /// changes (see `extent_cache`).
    extents: ExtentCache,
    /// Quota accounting, told of every change of an inode block (set once
    /// a writable open has loaded the quota files).
    quota: OnceLock<Arc<Quota>>,
}

impl NodeManager {
    pub fn new(dev: Arc<Device>, sb: &SuperBlock, cp: &CheckpointState) -> Result<NodeManager> {
        let max_nid = sb.max_nid();
        let mut journal = BTreeMap::new();
        for je in cp.nat_journal.valid_entries()? {
            let nid = je.nid.get();
            if nid >= max_nid {
                return Err(Corrupt::new(
                    "NAT journal",
                    format!("nid {nid} beyond the NAT capacity {max_nid}"),
                )
                .into());
            }
            journal.insert(nid, je.ne);
        }
        let nat_blocks_per_copy = sb.nat_blocks_per_copy();
        let hint = cp.cp.next_free_nid.get().max(F2FS_ROOT_INO + 1);
        Ok(NodeManager {
            dev,
            nat_blkaddr: sb.nat_blkaddr.get(),
            nat_blocks_per_copy,
            main_start: sb.main_blkaddr.get() as u64,
            main_end: sb.main_end_blkaddr(),
            max_nid,
            nat: RwLock::new(NatState {
                copy_bits: cp.nat_bitmap.clone(),
                journal,
                changed: HashMap::new(),
                dirty: BTreeSet::new(),
                blocks: HashMap::new(),
                free: BTreeSet::new(),
                freed_since_checkpoint: Vec::new(),
                created_since_checkpoint: HashSet::new(),
                fsynced_inodes: HashSet::new(),
                scan_block: (hint / NAT_ENTRY_PER_BLOCK).min(nat_blocks_per_copy.saturating_sub(1)),
                scanned_blocks: 0,
            }),
            dirty_nodes: Mutex::new(DirtyNodes::default()),
            node_locks: (0..NODE_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            clean: Mutex::new(CleanCache::default()),
            alloc_lock: Mutex::new(()),
            lookups: ShardedCounters::default(),
            features: sb.feature.get(),
            checksum_seed: f2fuse_layout::node::inode_checksum_seed(&sb.uuid),
            extents: ExtentCache::default(),
            quota: OnceLock::new(),
        })
    }

    /// Starts quota accounting: every later change of an inode block
    /// moves its charge (see `quota`).
    pub fn set_quota(&self, quota: Arc<Quota>) {
        // A second call would mean two accounts of one file system.
        let _ = self.quota.set(quota);
    }

    pub fn quota(&self) -> Option<&Quota> {
        self.quota.get().map(|q| &**q)
    }

    pub fn max_nid(&self) -> u32 {
        self.max_nid
    }

    /// Where node reads were served from since the file system was opened.
    pub fn cache_stats(&self) -> NodeCacheStats {
        let [dirty_hits, clean_hits, misses] = self.lookups.totals();
        NodeCacheStats {
            dirty_hits,
            clean_hits,
            misses,
        }
    }

    pub fn is_main_blkaddr(&self, blkaddr: u32) -> bool {
        (self.main_start..self.main_end).contains(&(blkaddr as u64))
    }

    fn read_nat_block(&self, index: u32, copy: u8) -> Result<Arc<Vec<NatEntry>>> {
        let raw = self
            .dev
            .read_block(IoKind::Meta, nat_block_addr(self.nat_blkaddr, index, copy))?;
        let block = NatBlock::read_from_bytes(&raw).expect("block size");
        Ok(Arc::new(block.entries.to_vec()))
    }

    fn nat_block(&self, index: u32) -> Result<Arc<Vec<NatEntry>>> {
        let copy = {
            let nat = self.nat.read();
            if let Some(block) = nat.blocks.get(&index) {
                return Ok(block.clone());
            }
            bitmap::test_bit_msb(&nat.copy_bits, index as usize) as u8
        };
        let entries = self.read_nat_block(index, copy)?;
        self.nat
            .write()
            .blocks
            .entry(index)
            .or_insert(entries.clone());
        Ok(entries)
    }

    fn check_nid(&self, nid: u32) -> Result<()> {
        if nid >= self.max_nid {
            return Err(Corrupt::new(
                "node reference",
                format!("nid {nid} beyond the NAT capacity {}", self.max_nid),
            )
            .into());
        }
        Ok(())
    }

    /// The current NAT entry of `nid`.
    pub fn nat_entry(&self, nid: u32) -> Result<NatEntry> {
        self.check_nid(nid)?;
        {
            let nat = self.nat.read();
            if let Some(entry) = nat.changed.get(&nid).or_else(|| nat.journal.get(&nid)) {
                return Ok(*entry);
            }
        }
        let block = self.nat_block(nid / NAT_ENTRY_PER_BLOCK)?;
        Ok(block[(nid % NAT_ENTRY_PER_BLOCK) as usize])
    }

    fn set_nat(&self, nid: u32, entry: NatEntry) {
        let mut nat = self.nat.write();
        nat.changed.insert(nid, entry);
        nat.dirty.insert(nid);
    }

    /// Every nid whose current NAT entry is in use, with its block address.
    pub fn used_nids(&self) -> Result<Vec<(u32, u32)>> {
        let mut out = Vec::new();
        for index in 0..self.nat_blocks_per_copy {
            let block = self.nat_block(index)?;
            let nat = self.nat.read();
            for (slot, on_disk) in block.iter().enumerate() {
                let nid = index * NAT_ENTRY_PER_BLOCK + slot as u32;
                let entry = nat
                    .changed
                    .get(&nid)
                    .or_else(|| nat.journal.get(&nid))
                    .unwrap_or(on_disk);
                if entry.block_addr.get() != NULL_ADDR && nid < self.max_nid {
                    out.push((nid, entry.block_addr.get()));
                }
            }
        }
        Ok(out)
    }

    /// Reads node `nid`, checking the NAT entry and the footer against `expect`.
    pub fn read_node(&self, nid: u32, expect: NodeExpect) -> Result<Block> {
        let ne = self.nat_entry(nid)?;
        let blkaddr = ne.block_addr.get();
        let fail = |detail: String| -> Error {
            Corrupt::new("node", detail).at(format!("nid {nid}")).into()
        };
        if nid < F2FS_ROOT_INO {
            return Err(fail("reserved nid referenced as a node".into()));
        }
        if blkaddr == NULL_ADDR {
            return Err(fail("referenced but free in the NAT".into()));
        }
        if let Some(ino) = expect.ino {
            if ne.ino.get() != ino {
                return Err(fail(format!(
                    "NAT says owner ino {}, expected {ino}",
                    ne.ino.get()
                )));
            }
        }
        let cached = self
            .dirty_nodes
            .lock()
            .nodes
            .get(&nid)
            .map(|d| d.block.clone());
        let block = match cached {
            Some(block) => {
                self.lookups.add(NodeSource::Dirty as usize, 1);
                block
            }
            None => {
                if !self.is_main_blkaddr(blkaddr) {
                    return Err(fail(format!(
                        "NAT block_addr {blkaddr:#x} outside the main area [{}, {})",
                        self.main_start, self.main_end
                    )));
                }
                let cached = self.clean.lock().get(blkaddr);
                match cached {
                    Some(block) => {
                        self.lookups.add(NodeSource::Clean as usize, 1);
                        block
                    }
                    None => {
                        self.lookups.add(NodeSource::Device as usize, 1);
                        let block = self.dev.read_block(IoKind::Node, blkaddr as u64)?;
                        self.clean.lock().insert(blkaddr, &block);
                        block
                    }
                }
            }
        };
        let footer = footer_of(&block);
        if footer.nid.get() != nid || footer.ino.get() != ne.ino.get() {
            return Err(fail(format!(
                "footer at blkaddr {blkaddr} names nid {} ino {}, NAT says nid {nid} ino {}",
                footer.nid.get(),
                footer.ino.get(),
                ne.ino.get()
            )));
        }
        if let Some(ofs) = expect.ofs {
            if footer.ofs() != ofs {
                return Err(fail(format!(
                    "footer node offset {} at blkaddr {blkaddr}, expected {ofs}",
                    footer.ofs()
                )));
            }
        }
        Ok(block)
    }

    /// Locks node `nid` (read through `expect`) for changing it; the change
    /// reaches the dirty cache when the guard is dropped.
    pub fn lock_node(&self, nid: u32, expect: NodeExpect) -> Result<NodeGuard<'_>> {
        let order = lock_order::acquire(Level::Node, 0, false);
        let lock = self.node_locks[nid as usize % NODE_LOCK_STRIPES].lock();
        let block = self.read_node(nid, expect)?;
        let charge = self.quota().and_then(|q| q.charge_of(nid, &block));
        Ok(NodeGuard {
            nm: self,
            nid,
            block,
            charge,
            changed: false,
            _lock: lock,
            _order: order,
        })
    }

    /// Applies `change` to node `nid` (read through `expect`) under its guard.
    pub fn update_node<R>(
        &self,
        nid: u32,
        expect: NodeExpect,
        change: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let mut guard = self.lock_node(nid, expect)?;
        Ok(change(guard.block_mut()))
    }

    /// Like [`update_node`](Self::update_node) for a change that may fail:
    /// on an error the guard's copy is dropped, so nothing is changed.
    pub fn try_update_node<R>(
        &self,
        nid: u32,
        expect: NodeExpect,
        change: impl FnOnce(&mut [u8]) -> Result<R>,
    ) -> Result<R> {
        let mut guard = self.lock_node(nid, expect)?;
        let result = change(&mut guard.block)?;
        guard.changed = true;
        Ok(result)
    }

    fn insert_dirty(&self, nid: u32, mut block: Block) {
        if footer_of(&block).ofs() == 0 {
            update_inode_checksum(&mut block, self.features, self.checksum_seed);
        }
        let owner = footer_of(&block).ino.get();
        self.dirty_nodes.lock().insert(nid, block);
        self.extents.invalidate(owner);
    }

    /// The read extent cache of every inode's data blocks.
    pub fn extent_cache(&self) -> &ExtentCache {
        &self.extents
    }

    /// Creates a zeroed node block for `nid`, owned by `ino`, at node offset `ofs`.
    pub fn new_node(&self, nid: u32, ino: u32, ofs: u32, cold: bool) -> Result<()> {
        let old = self.nat_entry(nid)?;
        // Nids come from `alloc_nid` (free in the NAT) or recovery (checked free).
        crate::invariant::ensure_invariant!(
            self.dev.health(),
            old.block_addr.get() == NULL_ADDR,
            "creating node {nid}, which is in use at blkaddr {:#x}",
            old.block_addr.get()
        );
        let mut block = crate::device::zero_block();
        {
            let footer = footer_of_mut(&mut block);
            footer.nid.set(nid);
            footer.ino.set(ino);
            footer.set_ofs_and_cold(ofs, cold);
        }
        self.set_nat(nid, NatEntry::new(old.version, ino, NEW_ADDR));
        self.nat.write().created_since_checkpoint.insert(nid);
        self.insert_dirty(nid, block);
        Ok(())
    }

    /// Frees node `nid`; returns the block it occupied on disk (to invalidate), if any.
    pub fn free_node(&self, nid: u32) -> Result<Option<u32>> {
        let old = self.nat_entry(nid)?;
        if let Some(quota) = self.quota().filter(|_| old.ino.get() == nid) {
            let block = self.read_node(
                nid,
                NodeExpect {
                    ino: Some(nid),
                    ofs: Some(0),
                },
            )?;
            quota.inode_changed(quota.charge_of(nid, &block), None);
        }
        self.dirty_nodes.lock().nodes.remove(&nid);
        self.extents.invalidate(old.ino.get());
        let addr = old.block_addr.get();
        // The version changes so stale summaries and fsync chains never match a reused nid.
        self.set_nat(
            nid,
            NatEntry::new(old.version.wrapping_add(1), old.ino.get(), NULL_ADDR),
        );
        {
            let mut nat = self.nat.write();
            nat.freed_since_checkpoint.push(nid);
            nat.created_since_checkpoint.insert(nid);
        }
        Ok((addr != NULL_ADDR && addr != NEW_ADDR).then_some(addr))
    }

    /// Records where a flushed node now lives.
    pub fn set_node_addr(&self, nid: u32, blkaddr: u32) -> Result<()> {
        let old = self.nat_entry(nid)?;
        self.set_nat(nid, NatEntry::new(old.version, old.ino.get(), blkaddr));
        Ok(())
    }

    /// Whether `nid`'s node is as the last checkpoint recorded it (not
    /// created or freed since; rewriting it elsewhere does not count).
    pub fn is_checkpointed(&self, nid: u32) -> bool {
        !self.nat.read().created_since_checkpoint.contains(&nid)
    }

    /// Whether an fsync of `ino` must ask recovery to add its directory
    /// entry: the inode is new since the checkpoint and no fsync wrote it yet
    /// (the kernel's f2fs_need_dentry_mark).
    pub fn needs_dentry_mark(&self, ino: u32) -> bool {
        let nat = self.nat.read();
        nat.created_since_checkpoint.contains(&ino) && !nat.fsynced_inodes.contains(&ino)
    }

    /// What an fsync of `ino` writes: its dirty direct nodes (and xattr
    /// node) in nid order, then its inode block, dirty or not, last (it
    /// carries the marks). None when none of them is dirty.
    pub fn fsync_nodes_of(&self, ino: u32) -> Result<Option<Vec<NodeCopy>>> {
        let (mut nodes, inode_dirty) = {
            let dirty = self.dirty_nodes.lock();
            let nodes: Vec<NodeCopy> = dirty
                .nodes
                .iter()
                .filter(|(nid, node)| {
                    let footer = footer_of(&node.block);
                    **nid != ino
                        && footer.ino.get() == ino
                        && (is_dnode_offset(footer.ofs()) || footer.ofs() == XATTR_NODE_OFFSET)
                })
                .map(|(nid, node)| node.copy(*nid))
                .collect();
            (nodes, dirty.nodes.get(&ino).map(|node| node.copy(ino)))
        };
        if nodes.is_empty() && inode_dirty.is_none() {
            return Ok(None);
        }
        nodes.sort_by_key(|node| node.nid);
        let inode = match inode_dirty {
            Some(copy) => copy,
            None => NodeCopy {
                nid: ino,
                block: self.read_node(
                    ino,
                    NodeExpect {
                        ino: Some(ino),
                        ofs: Some(0),
                    },
                )?,
                generation: None,
            },
        };
        nodes.push(inode);
        Ok(Some(nodes))
    }

    pub fn dirty_node_count(&self) -> usize {
        self.dirty_nodes.lock().nodes.len()
    }

    /// Writes every dirty node (for a checkpoint, or before cleaning), in
    /// nid order, copying `WRITE_BATCH_NODES` of them at a time: copying
    /// all at once doubled the memory the dirty cache holds, and they went
    /// to disk as one buffer of them all. Each stays in the cache (readers
    /// keep finding it) until `write_nodes` has put it on disk and pointed
    /// the NAT at it. The caller holds `op_lock` exclusively, so no node
    /// becomes dirty meanwhile.
    pub fn write_dirty_nodes(&self, space: &Mutex<SegmentManager>, stamp: NodeStamp) -> Result<()> {
        let mut nids: Vec<u32> = self.dirty_nodes.lock().nodes.keys().copied().collect();
        nids.sort_unstable();
        for batch in nids.chunks(WRITE_BATCH_NODES) {
            let copies: Vec<NodeCopy> = {
                let dirty = self.dirty_nodes.lock();
                batch
                    .iter()
                    .filter_map(|&nid| dirty.nodes.get(&nid).map(|node| node.copy(nid)))
                    .collect()
            };
            self.write_nodes(space, stamp, copies, NodeMarks::None)?;
        }
        Ok(())
    }

    /// Hands out an unused nid.
    /// The caller must give the nid a NAT entry (`new_node`) before it allocates again.
    pub fn alloc_nid(&self) -> Result<u32> {
        let _serial = self.alloc_lock.lock();
        loop {
            {
                let mut nat = self.nat.write();
                if let Some(nid) = nat.free.pop_first() {
                    return Ok(nid);
                }
                if nat.scanned_blocks >= self.nat_blocks_per_copy {
                    return Err(Error::new(ErrorKind::NoSpace, "no free node id left"));
                }
            }
            self.scan_free_nids()?;
        }
    }

    /// Scans the next NAT block for free nids.
    fn scan_free_nids(&self) -> Result<()> {
        let index = self.nat.read().scan_block;
        let block = self.nat_block(index)?;
        let mut nat = self.nat.write();
        nat.scan_block = (index + 1) % self.nat_blocks_per_copy;
        nat.scanned_blocks += 1;
        for (slot, on_disk) in block.iter().enumerate() {
            let nid = index * NAT_ENTRY_PER_BLOCK + slot as u32;
            if nid <= F2FS_ROOT_INO || nid >= self.max_nid {
                continue;
            }
            let entry = nat
                .changed
                .get(&nid)
                .or_else(|| nat.journal.get(&nid))
                .unwrap_or(on_disk);
            if entry.block_addr.get() == NULL_ADDR && !nat.freed_since_checkpoint.contains(&nid) {
                nat.free.insert(nid);
            }
        }
        Ok(())
    }

    /// Next free nid hint for the checkpoint.
    pub fn next_free_nid(&self) -> u32 {
        let nat = self.nat.read();
        nat.free
            .first()
            .copied()
            .unwrap_or(nat.scan_block * NAT_ENTRY_PER_BLOCK)
            .max(F2FS_ROOT_INO + 1)
    }

    /// Writes dirty NAT entries for a checkpoint: into the journal if all of
    /// them fit, else every journal and dirty entry goes to its NAT block,
    /// written to the block's other copy (the bitmap bit flips). Returns the
    /// new journal and bitmap; `commit_checkpoint` makes them current.
    pub fn flush_nat(&self) -> Result<NatFlush> {
        let nat = self.nat.read();
        let mut journal = nat.journal.clone();
        for nid in &nat.dirty {
            journal.insert(*nid, nat.changed[nid]);
        }
        let mut bits = nat.copy_bits.clone();
        let mut written = HashMap::new();
        if journal.len() > NAT_JOURNAL_ENTRIES {
            let mut by_block: BTreeMap<u32, Vec<(u32, NatEntry)>> = BTreeMap::new();
            for (nid, entry) in std::mem::take(&mut journal) {
                by_block
                    .entry(nid / NAT_ENTRY_PER_BLOCK)
                    .or_default()
                    .push((nid, entry));
            }
            drop(nat);
            for (index, entries) in by_block {
                let mut block = (*self.nat_block(index)?).clone();
                for (nid, entry) in entries {
                    block[(nid % NAT_ENTRY_PER_BLOCK) as usize] = entry;
                }
                let new_copy = !bitmap::test_bit_msb(&bits, index as usize);
                let mut raw = vec![0u8; F2FS_BLKSIZE];
                for (slot, entry) in block.iter().enumerate() {
                    raw[slot * NAT_ENTRY_SIZE..(slot + 1) * NAT_ENTRY_SIZE]
                        .copy_from_slice(zerocopy::IntoBytes::as_bytes(entry));
                }
                self.dev.write_blocks(
                    IoKind::Meta,
                    nat_block_addr(self.nat_blkaddr, index, new_copy as u8),
                    &raw,
                )?;
                bitmap::set_bit_msb(&mut bits, index as usize, new_copy);
                written.insert(index, Arc::new(block));
            }
        }
        Ok(NatFlush {
            journal,
            bits,
            written,
        })
    }

    /// Makes a flushed NAT state the checkpointed one; freed nids become reusable.
    pub fn commit_checkpoint(&self, flush: NatFlush) {
        let mut nat = self.nat.write();
        nat.journal = flush.journal;
        nat.copy_bits = flush.bits;
        for (index, block) in flush.written {
            nat.blocks.insert(index, block);
        }
        nat.dirty.clear();
        nat.created_since_checkpoint.clear();
        nat.fsynced_inodes.clear();
        let freed = std::mem::take(&mut nat.freed_since_checkpoint);
        nat.free.extend(freed);
    }

    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
    pub fn dirty_nat_count(&self) -> usize {
        self.nat.read().dirty.len()
    }
}

/// A node block locked for changing (see the module docs). Read it with
/// [`block`](Self::block); [`block_mut`](Self::block_mut) marks it changed,
/// and dropping the guard then puts the block in the dirty cache (inode
/// checksum updated) before the lock is released.
pub struct NodeGuard<'a> {
    nm: &'a NodeManager,
    nid: u32,
    block: Block,
    /// The quota charge of the block as read (inodes only).
    charge: Option<Charge>,
    changed: bool,
    _lock: MutexGuard<'a, ()>,
    _order: lock_order::Held,
}

impl NodeGuard<'_> {
    pub fn block(&self) -> &[u8] {
        &self.block
    }

    pub fn block_mut(&mut self) -> &mut Block {
        self.changed = true;
        &mut self.block
    }
}

impl Drop for NodeGuard<'_> {
    fn drop(&mut self) {
        if self.changed {
            if let Some(quota) = self.nm.quota() {
                quota.inode_changed(self.charge, quota.charge_of(self.nid, &self.block));
            }
            let block = std::mem::take(&mut self.block);
            self.nm.insert_dirty(self.nid, block);
        }
    }
}

/// The dirty node cache: blocks by nid, each with the generation of its
/// last change.
#[derive(Default)]
struct DirtyNodes {
    nodes: HashMap<u32, DirtyNode>,
    next_generation: u64,
}

impl DirtyNodes {
    fn insert(&mut self, nid: u32, block: Block) {
        self.next_generation += 1;
        let generation = self.next_generation;
        self.nodes.insert(nid, DirtyNode { block, generation });
    }

    /// Drops `nid` unless it changed after the copy of `generation` was taken.
    fn remove_if_unchanged(&mut self, nid: u32, generation: u64) {
        if self
            .nodes
            .get(&nid)
            .is_some_and(|n| n.generation == generation)
        {
            self.nodes.remove(&nid);
        }
    }
}

impl DirtyNode {
    fn copy(&self, nid: u32) -> NodeCopy {
        NodeCopy {
            nid,
            block: self.block.clone(),
            generation: Some(self.generation),
        }
    }
}

/// A bounded FIFO cache of node blocks by block address.
#[derive(Default)]
struct CleanCache {
    blocks: HashMap<u32, Block>,
    order: std::collections::VecDeque<u32>,
}

impl CleanCache {
    const CAPACITY: usize = 8192;

    fn get(&self, blkaddr: u32) -> Option<Block> {
        self.blocks.get(&blkaddr).cloned()
    }

    fn insert(&mut self, blkaddr: u32, block: &[u8]) {
        if self.blocks.insert(blkaddr, block.into()).is_none() {
            self.order.push_back(blkaddr);
            while self.order.len() > Self::CAPACITY {
                if let Some(old) = self.order.pop_front() {
                    self.blocks.remove(&old);
                }
            }
        }
    }
}

/// The NAT part of a checkpoint being written.
pub struct NatFlush {
    pub journal: BTreeMap<u32, NatEntry>,
    pub bits: Vec<u8>,
    written: HashMap<u32, Arc<Vec<NatEntry>>>,
}

/// The node log a node goes to: direct nodes of directories hot, of files
/// warm, indirect nodes cold (kernel rules).
pub fn node_log(block: &[u8]) -> CursegType {
    let footer = footer_of(block);
    if !is_dnode_offset(footer.ofs()) {
        CursegType::ColdNode
    } else if footer.is_cold() {
        CursegType::WarmNode
    } else {
        CursegType::HotNode
    }
}

/// The roll-forward marks a node write carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMarks {
    /// Checkpoint and cleaning writes: none (old marks are cleared).
    None,
    /// An fsync: FSYNC on the last node only, so recovery replays an fsync
    /// whole or not at all (the kernel's marking for atomic writes; its
    /// posix mode marks every node, which lets a cut-short fsync replay in
    /// part); DENT on it too when `dent` (it is then the inode block).
    Fsync { dent: bool },
}

/// How node footers are stamped when written.
#[derive(Debug, Clone, Copy)]
pub struct NodeStamp {
    /// `checkpoint_ver | crc << 32` of the checkpoint in force.
    pub cp_ver: u64,
    pub features: u32,
    pub checksum_seed: u32,
}

impl NodeManager {
    /// Writes `nodes` out of place through the node logs, then points the
    /// NAT at the new blocks, drops them from the dirty cache and
    /// invalidates the blocks they replace.
    pub fn write_nodes(
        &self,
        space: &Mutex<SegmentManager>,
        stamp: NodeStamp,
        nodes: Vec<NodeCopy>,
        marks: NodeMarks,
    ) -> Result<()> {
        let mut placed: Vec<(u32, NodeCopy)> = Vec::with_capacity(nodes.len());
        let count = nodes.len();
        for (i, mut node) in nodes.into_iter().enumerate() {
            let (nid, block) = (node.nid, &mut node.block);
            // Before the write, the footer names the node and its owner as
            // the NAT does (after a read, `read_node` checks the same).
            let footer = footer_of(block);
            let (footer_nid, footer_ino) = (footer.nid.get(), footer.ino.get());
            let nat_ino = self.nat_entry(nid)?.ino.get();
            crate::invariant::ensure_invariant!(
                self.dev.health(),
                footer_nid == nid && footer_ino == nat_ino && (footer.ofs() != 0 || nid == nat_ino),
                "writing node {nid} (NAT owner {nat_ino}) with footer nid {footer_nid} ino {footer_ino} offset {}",
                footer.ofs()
            );
            let log = node_log(block);
            let addr = {
                let mut sm = space.lock();
                let addr = sm.allocate(log, Summary::new(nid, 0, 0))?;
                let footer = footer_of_mut(block);
                footer.cp_ver.set(stamp.cp_ver);
                footer.next_blkaddr.set(sm.next_blkaddr(log));
                match marks {
                    NodeMarks::Fsync { dent } if i + 1 == count => footer.set_marks(true, dent),
                    _ => footer.set_marks(false, false),
                }
                addr
            };
            if footer_of(block).ofs() == 0 {
                update_inode_checksum(block, stamp.features, stamp.checksum_seed);
            }
            self.clean.lock().insert(addr, block);
            placed.push((addr, node));
        }
        placed.sort_by_key(|(addr, ..)| *addr);
        let mut i = 0;
        while i < placed.len() {
            let mut j = i + 1;
            while j < placed.len() && placed[j].0 == placed[j - 1].0 + 1 {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * F2FS_BLKSIZE);
            for (_, node) in &placed[i..j] {
                buf.extend_from_slice(&node.block);
            }
            self.dev
                .write_blocks(IoKind::Node, placed[i].0 as u64, &buf)?;
            i = j;
        }
        // Only now that the blocks are written may readers reach them through the NAT.
        if marks != NodeMarks::None {
            let mut nat = self.nat.write();
            for (_, node) in &placed {
                if footer_of(&node.block).ofs() == 0 {
                    nat.fsynced_inodes.insert(node.nid);
                }
            }
        }
        for (
            addr,
            NodeCopy {
                nid, generation, ..
            },
        ) in placed
        {
            let old = self.nat_entry(nid)?.block_addr.get();
            self.set_node_addr(nid, addr)?;
            if let Some(generation) = generation {
                self.dirty_nodes.lock().remove_if_unchanged(nid, generation);
            }
            if old != NULL_ADDR && old != NEW_ADDR {
                space.lock().invalidate(old)?;
            }
        }
        Ok(())
    }
}
