//! Our own checker: every invariant the engine relies on, report-only.
//! It is the oracle where fsck.f2fs is not installed. Exit codes follow
//! fsck.f2fs: 0 clean, 4 errors left, 8 operational error, 255 the image
//! cannot even be opened.

use crate::compress::ClusterShape;
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::{FileKind, InodeInfo};
use crate::node::NodeExpect;
use crate::quota::{QUOTA_TYPES, TYPE_NAMES};
use f2fuse_layout::compress::InodeCompression;
use f2fuse_layout::dentry::{dir_buckets, level_of_block, DentryGeometry, DentryName, DentrySet};
use f2fuse_layout::hash::dentry_hash;
use f2fuse_layout::node::{footer_of, node_slot, DIND_OFS, IND_OFS_1, IND_OFS_2};
use f2fuse_layout::segment::{Summary, SummaryBlock};
use f2fuse_layout::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use zerocopy::FromBytes;

/// What a check found.
#[derive(Debug, Default)]
pub struct FsckReport {
    /// What is wrong, one line each; empty for a clean image.
    pub problems: Vec<String>,
    /// Reachable inodes.
    pub inodes: u64,
    /// Reachable blocks on disk (data and nodes).
    pub blocks: u64,
    /// Data blocks reserved by fallocate (NEW_ADDR): counted as valid by
    /// the checkpoint, as by fsck.f2fs, but in no segment.
    pub reserved: u64,
    /// Reachable node blocks.
    pub nodes: u64,
}

impl FsckReport {
    /// No problems found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// fsck.f2fs-style exit code.
    pub fn exit_code(&self) -> i32 {
        if self.is_clean() {
            0
        } else {
            4
        }
    }
}

struct Checker<'a> {
    fs: &'a Fs,
    report: FsckReport,
    /// Every reachable main-area block, with what owns it.
    owner: HashMap<u32, String>,
    /// Summaries of non-current segments, read on demand.
    ssa: HashMap<u32, Vec<Summary>>,
    /// Dentries found per inode, and link counts of directories' children.
    dentries_of: BTreeMap<u32, u32>,
    subdirs_of: BTreeMap<u32, u32>,
    visited: HashSet<u32>,
    /// (file block, address) of the slots of the compressed file being
    /// checked, in file order (slots under missing nodes are not there).
    cluster_slots: Vec<(u64, u32)>,
    /// Quota usage recounted per type and id: (inodes, bytes).
    usage: [BTreeMap<u32, (u64, u64)>; QUOTA_TYPES],
}

/// Checks an open file system.
pub fn check(fs: &Fs) -> Result<FsckReport> {
    let mut c = Checker {
        fs,
        report: FsckReport::default(),
        owner: HashMap::new(),
        ssa: HashMap::new(),
        dentries_of: BTreeMap::new(),
        subdirs_of: BTreeMap::new(),
        visited: HashSet::new(),
        cluster_slots: Vec::new(),
        usage: Default::default(),
    };
    if let Some(e) = &fs.loaded_superblock().other_copy_error {
        c.problem(format!("the other superblock copy is invalid: {e}"));
    }
    c.walk_tree()?;
    c.check_links();
    c.check_global()?;
    c.check_quota()?;
    Ok(c.report)
}

impl Checker<'_> {
    fn problem(&mut self, text: String) {
        if self.report.problems.len() < 10_000 {
            self.report.problems.push(text);
        }
    }

    fn summary_of(&mut self, blkaddr: u32) -> Result<Option<Summary>> {
        let sb = self.fs.superblock();
        let main = sb.main_blkaddr.get();
        let segno = (blkaddr - main) / BLOCKS_PER_SEG;
        let off = ((blkaddr - main) % BLOCKS_PER_SEG) as usize;
        let cp = self.fs.checkpoint_state();
        for log in CursegType::ALL {
            if cp.cp.curseg(log).0 == segno {
                return Ok(cp.cur_summaries[log as usize]
                    .as_ref()
                    .and_then(|s| s.get(off).copied()));
            }
        }
        drop(cp);
        if !self.ssa.contains_key(&segno) {
            let raw = self
                .fs
                .device()
                .read_block(IoKind::Meta, sb.ssa_blkaddr.get() as u64 + segno as u64)?;
            let block = SummaryBlock::read_from_bytes(&raw).expect("block size");
            self.ssa.insert(segno, block.entries.to_vec());
        }
        Ok(self.ssa[&segno].get(off).copied())
    }

    /// Records a reachable block; reports double references and bad owners.
    fn claim(&mut self, blkaddr: u32, what: String, expect: Summary, is_node: bool) -> Result<()> {
        if !self.fs.node_manager().is_main_blkaddr(blkaddr) {
            self.problem(format!("{what}: block {blkaddr:#x} outside the main area"));
            return Ok(());
        }
        if let Some(first) = self.owner.get(&blkaddr) {
            let first = first.clone();
            self.problem(format!("{what}: block {blkaddr} also used by {first}"));
            return Ok(());
        }
        if let Some(sum) = self.summary_of(blkaddr)? {
            let ok = if is_node {
                sum.nid.get() == expect.nid.get()
            } else {
                sum == expect
            };
            if !ok {
                self.problem(format!(
                    "{what}: SSA of block {blkaddr} says nid {} ver {} ofs {}, expected nid {} ver {} ofs {}",
                    sum.nid.get(),
                    sum.version,
                    sum.ofs_in_node.get(),
                    expect.nid.get(),
                    expect.version,
                    expect.ofs_in_node.get()
                ));
            }
        }
        if is_node {
            self.report.nodes += 1;
        }
        self.report.blocks += 1;
        self.owner.insert(blkaddr, what);
        Ok(())
    }

    fn walk_tree(&mut self) -> Result<()> {
        let mut stack = vec![(F2FS_ROOT_INO, F2FS_ROOT_INO)];
        for ino in self.fs.orphans() {
            self.check_inode(ino, None)?;
        }
        // Quota files have no directory entry: the superblock names them
        // (fsck.f2fs checks them the same way, as reachable inodes).
        let sb = self.fs.superblock();
        if sb.has_feature(feature::QUOTA_INO) {
            let quota_inodes: Vec<u32> = sb
                .qf_ino
                .iter()
                .map(|q| q.get())
                .filter(|&q| q != 0)
                .collect();
            for ino in quota_inodes {
                self.check_inode(ino, None)?;
            }
        }
        while let Some((ino, parent)) = stack.pop() {
            if !self.visited.insert(ino) {
                self.problem(format!(
                    "directory inode {ino} reached twice (cycle or hard-linked directory)"
                ));
                continue;
            }
            let Some(inode) = self.check_inode(ino, Some(parent))? else {
                continue;
            };
            if inode.kind != FileKind::Directory {
                continue;
            }
            let entries = match self.check_dir(&inode, parent) {
                Ok(entries) => entries,
                Err(Error::Corrupt(c)) => {
                    self.problem(c.to_string());
                    continue;
                }
                Err(e) => return Err(e),
            };
            for (name, child, ft) in entries {
                let child_inode = match self.fs.inode(child) {
                    Ok(i) => i,
                    Err(Error::Corrupt(c)) => {
                        self.problem(format!(
                            "entry {:?} of directory {ino}: {c}",
                            String::from_utf8_lossy(&name)
                        ));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if file_type_of_mode(child_inode.mode) != Some(ft) {
                    self.problem(format!("entry {:?} of directory {ino}: file_type {ft} but inode {child} has mode {:#o}", String::from_utf8_lossy(&name), child_inode.mode));
                }
                if child_inode.kind == FileKind::Directory {
                    *self.subdirs_of.entry(ino).or_default() += 1;
                    stack.push((child, ino));
                } else {
                    *self.dentries_of.entry(child).or_default() += 1;
                    if self.visited.insert(child) {
                        self.check_inode(child, Some(ino))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks an inode and every node and block under it.
    fn check_inode(&mut self, ino: u32, _parent: Option<u32>) -> Result<Option<InodeInfo>> {
        let inode = match self.fs.inode(ino) {
            Ok(i) => i,
            Err(Error::Corrupt(c)) => {
                self.problem(c.to_string());
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        self.report.inodes += 1;
        let sb = self.fs.superblock();
        if !sb.qf_ino.iter().any(|q| q.get() == ino) {
            let ids = inode.quota_ids(sb.feature.get());
            for (usage, id) in self.usage.iter_mut().zip(ids) {
                let (inodes, bytes) = usage.entry(id).or_default();
                *inodes += 1;
                *bytes += inode.blocks.saturating_sub(1) * F2FS_BLKSIZE as u64;
            }
        }
        if inode.flags & inode_flag::CASEFOLD != 0 && inode.kind != FileKind::Directory {
            self.problem(format!("inode {ino}: casefold flag on a {:?}", inode.kind));
        }
        let nm = self.fs.node_manager();
        let addr = nm.nat_entry(ino)?.block_addr.get();
        self.claim(addr, format!("inode {ino}"), Summary::new(ino, 0, 0), true)?;
        let mut counted = 1u64;
        if inode.xattr_nid != 0 {
            match nm.read_node(
                inode.xattr_nid,
                NodeExpect {
                    ino: Some(ino),
                    ofs: Some(XATTR_NODE_OFFSET),
                },
            ) {
                Ok(_) => {
                    let xaddr = nm.nat_entry(inode.xattr_nid)?.block_addr.get();
                    self.claim(
                        xaddr,
                        format!("xattr node of inode {ino}"),
                        Summary::new(inode.xattr_nid, 0, 0),
                        true,
                    )?;
                    counted += 1;
                }
                Err(e) => self.problem(format!("inode {ino}: {e}")),
            }
        }
        if inode.has_inline(inline_flag::INLINE_DATA)
            || inode.has_inline(inline_flag::INLINE_DENTRY)
        {
            if inode.has_inline(inline_flag::INLINE_DATA)
                && inode.inode().i_addr[inode.layout.extra_words].get() != 0
            {
                self.problem(format!("inode {ino}: inline data reserved word is not 0"));
            }
        } else if matches!(
            inode.kind,
            FileKind::Regular | FileKind::Directory | FileKind::Symlink
        ) {
            counted += self.check_addrs(&inode)?;
        }
        if inode.blocks != counted {
            self.problem(format!(
                "inode {ino}: i_blocks {} but {counted} blocks found",
                inode.blocks
            ));
        }
        Ok(Some(inode))
    }

    fn check_data_addr(
        &mut self,
        inode: &InodeInfo,
        nid: u32,
        ofs: u16,
        addr: u32,
        index: u64,
    ) -> Result<u64> {
        if inode.compression.is_some() {
            self.cluster_slots.push((index, addr));
        }
        match addr {
            NULL_ADDR => Ok(0),
            NEW_ADDR => {
                self.report.reserved += 1;
                Ok(1)
            }
            // Counted like a reservation, except in a released file; its
            // place is checked with the rest of the cluster.
            COMPRESS_ADDR if inode.compression.is_some_and(|c| !c.released) => {
                self.report.reserved += 1;
                Ok(1)
            }
            COMPRESS_ADDR if inode.compression.is_some() => Ok(0),
            a => {
                let version = self.fs.node_manager().nat_entry(nid)?.version;
                self.claim(
                    a,
                    format!("inode {} block {index}", inode.ino),
                    Summary::new(nid, version, ofs),
                    false,
                )?;
                Ok(1)
            }
        }
    }

    /// Data addresses in the inode and every node below it; returns blocks counted.
    fn check_addrs(&mut self, inode: &InodeInfo) -> Result<u64> {
        let addrs = inode.addrs();
        let a = addrs.per_inode as u64;
        let span = |levels| addrs.node_span(levels);
        self.cluster_slots.clear();
        let mut counted = 0;
        // Slots past a compressed file's whole clusters are unused and stay NULL_ADDR.
        for index in 0..inode.layout.addrs_per_inode() as u64 {
            let addr = inode.inode().data_addr(&inode.layout, index as usize);
            if index >= a {
                self.unused_slot(inode, addr, format!("inode slot {index}"));
                continue;
            }
            counted += self.check_data_addr(inode, inode.ino, index as u16, addr, index)?;
        }
        let roots = [
            (1u32, a, 0u32),
            (2, a + span(0), 0),
            (IND_OFS_1, a + 2 * span(0), 1),
            (IND_OFS_2, a + 2 * span(0) + span(1), 1),
            (DIND_OFS, a + 2 * span(0) + 2 * span(1), 2),
        ];
        for (slot, (ofs, start, levels)) in roots.into_iter().enumerate() {
            let nid = inode.inode().i_nid[slot].get();
            if nid != 0 {
                counted += self.check_node(inode, nid, ofs, start, levels)?;
            }
        }
        if let Some(compression) = &inode.compression {
            let slots = std::mem::take(&mut self.cluster_slots);
            self.check_clusters(inode, compression, &slots);
        }
        Ok(counted)
    }

    fn unused_slot(&mut self, inode: &InodeInfo, addr: u32, what: String) {
        if addr != NULL_ADDR {
            self.problem(format!(
                "inode {}: {what} is past the last whole cluster but holds {addr:#x}",
                inode.ino
            ));
        }
    }

    /// The cluster rules of the kernel (see `compress::cluster_shape`) and
    /// `i_compr_blocks`: the COMPRESS_ADDR and NEW_ADDR slots of the
    /// compressed clusters (none once released). fsck.f2fs 1.15 only
    /// repairs a wrong count silently; the kernel relies on it, so it is a
    /// problem here.
    fn check_clusters(
        &mut self,
        inode: &InodeInfo,
        compression: &InodeCompression,
        slots: &[(u64, u32)],
    ) {
        let cs = compression.cluster_blocks();
        let mut saved = 0u64;
        for same in slots.chunk_by(|a, b| a.0 / cs == b.0 / cs) {
            let k = same[0].0 / cs;
            let mut cluster = vec![NULL_ADDR; cs as usize];
            for &(index, addr) in same {
                cluster[(index % cs) as usize] = addr;
            }
            match crate::compress::cluster_shape(&cluster) {
                Ok(ClusterShape::Compressed { .. }) => {
                    saved += cluster
                        .iter()
                        .filter(|&&a| a == COMPRESS_ADDR || a == NEW_ADDR)
                        .count() as u64;
                }
                Ok(ClusterShape::Raw) => {}
                Err(e) => self.problem(format!("inode {} cluster {k}: {e}", inode.ino)),
            }
        }
        let expected = if compression.released { 0 } else { saved };
        if compression.compr_blocks != expected {
            self.problem(format!(
                "inode {}: i_compr_blocks {} but its compressed clusters save {expected}",
                inode.ino, compression.compr_blocks
            ));
        }
    }

    fn check_node(
        &mut self,
        inode: &InodeInfo,
        nid: u32,
        ofs: u32,
        start: u64,
        levels: u32,
    ) -> Result<u64> {
        let nm = self.fs.node_manager();
        let block = match nm.read_node(
            nid,
            NodeExpect {
                ino: Some(inode.ino),
                ofs: Some(ofs),
            },
        ) {
            Ok(b) => b,
            Err(Error::Corrupt(c)) => {
                self.problem(format!("inode {}: {c}", inode.ino));
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let addr = nm.nat_entry(nid)?.block_addr.get();
        self.claim(
            addr,
            format!("node {nid} of inode {}", inode.ino),
            Summary::new(nid, 0, 0),
            true,
        )?;
        if footer_of(&block).is_cold() == (inode.kind == FileKind::Directory) {
            self.problem(format!(
                "node {nid} of inode {}: cold bit does not match the file type",
                inode.ino
            ));
        }
        let mut counted = 1;
        let per_block = inode.addrs().per_block;
        for slot in 0..ADDRS_PER_BLOCK {
            let value = node_slot(&block, slot as usize);
            if levels == 0 && slot >= per_block {
                self.unused_slot(inode, value, format!("slot {slot} of node {nid}"));
            } else if levels == 0 {
                counted +=
                    self.check_data_addr(inode, nid, slot as u16, value, start + slot as u64)?;
            } else if value != 0 {
                let child_ofs = if levels == 1 {
                    ofs + 1 + slot
                } else {
                    ofs + 1 + slot * (ADDRS_PER_BLOCK + 1)
                };
                counted += self.check_node(
                    inode,
                    value,
                    child_ofs,
                    start + slot as u64 * inode.addrs().node_span(levels - 1),
                    levels - 1,
                )?;
            }
        }
        Ok(counted)
    }

    /// Checks a directory's entries; returns (name, ino, file_type) of the real ones.
    fn check_dir(&mut self, dir: &InodeInfo, parent: u32) -> Result<Vec<(Vec<u8>, u32, u8)>> {
        let mut out = Vec::new();
        let (mut dot, mut dotdot) = (0, 0);
        let mut visit = |c: &mut Self, set: DentrySet, block_index: Option<u64>| -> Result<()> {
            for e in set.entries()? {
                let what = format!(
                    "directory {} entry {:?}",
                    dir.ino,
                    String::from_utf8_lossy(e.name)
                );
                // A name a strict casefolded directory would refuse is
                // hashed raw, as the kernel did before strictness and as
                // fsck.f2fs does. An encrypted directory stores ciphertext:
                // hashed raw too, unless casefolded, where the hash is a
                // SipHash of the folded plaintext under a key we lack
                // (f2fs_hash_filename).
                let expected = if dir.is_encrypted() {
                    (!dir.is_casefolded()).then(|| dentry_hash(e.name))
                } else {
                    Some(
                        DentryName::new(e.name, dir.names)
                            .map_or_else(|| dentry_hash(e.name), |n| n.hash),
                    )
                };
                if let Some(expected) = expected.filter(|&h| h != e.hash_code) {
                    c.problem(format!(
                        "{what}: hash {:#x}, expected {expected:#x}",
                        e.hash_code
                    ));
                }
                if let Some(index) = block_index {
                    if let Some((level, bucket)) = level_of_block(index, dir.dir_level as u32) {
                        let want = e.hash_code as u64 % dir_buckets(level, dir.dir_level as u32);
                        if bucket != want && e.name != b"." && e.name != b".." {
                            c.problem(format!("{what}: in bucket {bucket} of level {level}, its hash selects bucket {want}"));
                        }
                    }
                }
                match e.name {
                    b"." => {
                        dot += 1;
                        if e.ino != dir.ino {
                            c.problem(format!("{what}: points at {}, not itself", e.ino));
                        }
                    }
                    b".." => {
                        dotdot += 1;
                        if e.ino != parent {
                            c.problem(format!("{what}: points at {}, parent is {parent}", e.ino));
                        }
                    }
                    _ => out.push((e.name.to_vec(), e.ino, e.file_type)),
                }
            }
            Ok(())
        };
        if dir.has_inline(inline_flag::INLINE_DENTRY) {
            visit(self, crate::inline::inline_dentries(dir), None)?;
        } else {
            let mut mapper = crate::data::BlockMapper::new(self.fs.node_manager(), dir);
            for index in 0..crate::dir::dir_block_count(dir) {
                let addr = mapper.map(index)?;
                if addr == NULL_ADDR || addr == NEW_ADDR {
                    continue;
                }
                let block = self.fs.device().read_block(IoKind::DirData, addr as u64)?;
                visit(
                    self,
                    DentrySet::new(&block, DentryGeometry::BLOCK),
                    Some(index),
                )?;
            }
        }
        if dot != 1 || dotdot != 1 {
            self.problem(format!(
                "directory {}: {dot} \".\" and {dotdot} \"..\" entries",
                dir.ino
            ));
        }
        Ok(out)
    }

    /// The quota files against the usage recounted while walking, as
    /// fsck.f2fs compares them: every id's inodes and bytes (limits are
    /// not checked).
    fn check_quota(&mut self) -> Result<()> {
        let sb = self.fs.superblock();
        if !sb.has_feature(feature::QUOTA_INO) {
            return Ok(());
        }
        for (qtype, name) in TYPE_NAMES.iter().enumerate() {
            if sb.qf_ino[qtype].get() == 0 {
                continue;
            }
            let stored: BTreeMap<u32, (u64, u64)> = match self.fs.quota_file(qtype) {
                Ok(entries) => entries
                    .into_iter()
                    .map(|(id, d)| (id, (d.curinodes, d.curspace)))
                    .collect(),
                Err(Error::Corrupt(c)) => {
                    self.problem(format!("{name} quota file: {c}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let counted = std::mem::take(&mut self.usage[qtype]);
            let ids: std::collections::BTreeSet<u32> =
                stored.keys().chain(counted.keys()).copied().collect();
            for id in ids {
                let found = counted.get(&id).copied().unwrap_or_default();
                let written = stored.get(&id).copied().unwrap_or_default();
                if found != written {
                    self.problem(format!(
                        "{name} quota of id {id}: the file says {} inodes and {} bytes, \
                         the inodes {} and {}",
                        written.0, written.1, found.0, found.1
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_links(&mut self) {
        let dirs: Vec<u32> = self.visited.iter().copied().collect();
        for ino in dirs {
            let Ok(inode) = self.fs.inode(ino) else {
                continue;
            };
            let found = if inode.kind == FileKind::Directory {
                2 + self.subdirs_of.get(&ino).copied().unwrap_or(0)
            } else {
                self.dentries_of.get(&ino).copied().unwrap_or(0)
            };
            if inode.links != found {
                self.problem(format!(
                    "inode {ino}: i_links {} but {found} found",
                    inode.links
                ));
            }
        }
    }

    fn check_global(&mut self) -> Result<()> {
        let sit = self.fs.sit()?;
        let sb = self.fs.superblock();
        let main = sb.main_blkaddr.get();
        let cp = self.fs.checkpoint_state();
        let mut valid_blocks = 0u64;
        let mut valid_nodes = 0u64;
        let mut free_segments = 0u32;
        let current: Vec<u32> = CursegType::ALL.iter().map(|&l| cp.cp.curseg(l).0).collect();
        // Segments holding a reachable block: with the segments that have a
        // valid bit, the only ones to compare block by block (a near-empty
        // large image has millions of segments with neither).
        let reached_segments: HashSet<u32> = self
            .owner
            .keys()
            .filter_map(|&blkaddr| blkaddr.checked_sub(main).map(|rel| rel / BLOCKS_PER_SEG))
            .collect();
        for (segno, entry) in sit.entries.iter().enumerate() {
            let is_node = CursegType::from_u8(entry.seg_type()).is_some_and(|t| t.is_node());
            valid_blocks += entry.valid_blocks() as u64;
            if is_node {
                valid_nodes += entry.valid_blocks() as u64;
            }
            if entry.valid_blocks() == 0 && !current.contains(&(segno as u32)) {
                free_segments += 1;
            }
            if entry.valid_map.iter().all(|&byte| byte == 0)
                && !reached_segments.contains(&(segno as u32))
            {
                continue;
            }
            for off in 0..BLOCKS_PER_SEG {
                let blkaddr = main + segno as u32 * BLOCKS_PER_SEG + off;
                let in_sit = bitmap::test_bit_msb(&entry.valid_map, off as usize);
                let reached = self.owner.get(&blkaddr);
                match (in_sit, reached) {
                    (true, None) => self.report.problems.push(format!(
                        "block {blkaddr} (segment {segno}) valid in the SIT but unreachable"
                    )),
                    (false, Some(owner)) => self
                        .report
                        .problems
                        .push(format!("{owner}: block {blkaddr} not valid in the SIT")),
                    (true, Some(owner)) if owner.contains(" block ") == is_node => {
                        self.report.problems.push(format!(
                            "{owner}: block {blkaddr} in a segment of the wrong kind"
                        ))
                    }
                    _ => {}
                }
            }
        }
        for log in CursegType::ALL {
            let (segno, blkoff) = cp.cp.curseg(log);
            let entry = &sit.entries[segno as usize];
            if entry.seg_type() != log as u8 {
                self.report.problems.push(format!(
                    "{} log segment {segno}: SIT type {}",
                    log.name(),
                    entry.seg_type()
                ));
            }
            if bitmap::test_bit_msb(&entry.valid_map, blkoff as usize) {
                self.report.problems.push(format!(
                    "{} log: next block {blkoff} of segment {segno} is in use",
                    log.name()
                ));
            }
        }
        let checks = [
            (
                "valid_block_count",
                cp.cp.valid_block_count.get(),
                self.report.blocks + self.report.reserved,
                valid_blocks + self.report.reserved,
            ),
            (
                "valid_node_count",
                cp.cp.valid_node_count.get() as u64,
                self.report.nodes,
                valid_nodes,
            ),
            (
                "valid_inode_count",
                cp.cp.valid_inode_count.get() as u64,
                self.report.inodes,
                self.report.inodes,
            ),
            (
                "free_segment_count",
                cp.cp.free_segment_count.get() as u64,
                free_segments as u64,
                free_segments as u64,
            ),
        ];
        for (name, recorded, reached, in_sit) in checks {
            if recorded != reached || recorded != in_sit {
                self.report.problems.push(format!(
                    "checkpoint {name} {recorded}, found {reached} reachable, {in_sit} in the SIT"
                ));
            }
        }
        // NAT entries in use that nothing reaches.
        let nm = self.fs.node_manager();
        let reached_nodes: HashSet<u32> = self
            .owner
            .iter()
            .filter(|(_, o)| !o.contains(" block "))
            .map(|(a, _)| *a)
            .collect();
        for (nid, addr) in nm.used_nids()? {
            if nid >= F2FS_ROOT_INO && !reached_nodes.contains(&addr) {
                self.report.problems.push(format!(
                    "nid {nid}: in use in the NAT (block {addr:#x}) but unreachable"
                ));
            }
        }
        Ok(())
    }
}
