//! Fuzz harness for the f2fuse decoders: one entry point per decoder plus
//! a whole-image one. The cargo-fuzz targets in `fuzz_targets/` call these,
//! and the main workspace's `crates/cli/tests/cli/corrupt_images.rs` includes
//! this file as a module to run deterministic mutations of the same seeds
//! on stable Rust. So this file depends only on the engine, the layout
//! crate and zerocopy, and refers to nothing else in its crate.
//!
//! Each entry point must return normally for every input: a panic, an
//! overflow, an out-of-bounds index or a hang is a bug in the engine or
//! the layout crate.

use f2fuse_engine::internals::checkpoint::load_checkpoint;
use f2fuse_engine::internals::compress::{compress_cluster, decompress};
use f2fuse_engine::internals::device::{BlockDevice, Device};
use f2fuse_engine::internals::dir::dir_block_count;
use f2fuse_engine::internals::inode::{decode_inode, InodeCheck};
use f2fuse_engine::internals::segment::SitTable;
use f2fuse_engine::internals::superblock::{load_superblock, READ_FEATURES};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::internals::{data, inline};
use f2fuse_engine::{FileKind, Fs};
use f2fuse_layout::bitmap::test_bit_msb;
use f2fuse_layout::casefold::F2FS_ENC_STRICT_MODE_FL;
use f2fuse_layout::checkpoint::{
    compacted_blocks_needed, decode_compacted_summaries, verify_checkpoint_crc, Checkpoint,
    OrphanBlock,
};
use f2fuse_layout::compress::{build_cluster, split_cluster, CompressAlgorithm, InodeCompression};
use f2fuse_layout::dentry::{
    dir_block_index, level_of_block, DentryGeometry, DentryName, DentrySet, NameRule,
};
use f2fuse_layout::node::{
    block_path, footer_of, inode_checksum_seed, inode_of, is_dnode_offset, max_file_blocks,
    start_bidx_of_node, verify_inode_checksum, AddrCounts, InodeLayout,
};
use f2fuse_layout::quota::{Dquot, QuotaFile};
use f2fuse_layout::segment::{NatBlock, SitBlock, SummaryBlock};
use f2fuse_layout::superblock::{decode_superblock_copy, SuperBlock};
use f2fuse_layout::xattr::{encode_xattrs, encoded_len, parse_xattrs, XattrEntry};
use f2fuse_layout::{
    feature, CursegType, F2FS_BLKSIZE, F2FS_ROOT_INO, F2FS_SUPER_MAGIC, MAX_DIR_HASH_DEPTH,
    NAT_ENTRY_PER_BLOCK,
};
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::{Arc, OnceLock};
use zerocopy::FromBytes;

const BS: usize = F2FS_BLKSIZE;

// ------------------------------------------------------------------ seeds

/// Magic of the sparse seed format written by `examples/pack_image.rs`.
pub const SPARSE_MAGIC: &[u8; 8] = b"F2SPARS1";

/// A small mkfs.f2fs + sload.f2fs image, keeping only its non-zero blocks.
pub struct SeedImage {
    pub name: &'static str,
    /// Size of the whole image in bytes.
    pub size: u64,
    /// Non-zero blocks by block address.
    pub blocks: BTreeMap<u64, Vec<u8>>,
}

impl SeedImage {
    pub fn block(&self, blkaddr: u64) -> Vec<u8> {
        self.blocks
            .get(&blkaddr)
            .cloned()
            .unwrap_or_else(|| vec![0; BS])
    }

    pub fn superblock(&self) -> SuperBlock {
        decode_superblock_copy(&self.block(0), 0).expect("seed superblock is valid")
    }

    /// The whole image as a device.
    pub fn device(&self) -> SparseDevice {
        SparseDevice {
            size: self.size,
            blocks: self.blocks.clone(),
        }
    }
}

/// Encodes a whole image: header, then each non-zero block as its address
/// and a run-length coding of its zero runs.
pub fn encode_sparse(image: &[u8]) -> Vec<u8> {
    assert_eq!(image.len() % BS, 0, "image size must be whole blocks");
    let blocks: Vec<(usize, &[u8])> = image
        .chunks_exact(BS)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|&x| x != 0))
        .collect();
    let mut out = SPARSE_MAGIC.to_vec();
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    for (addr, block) in blocks {
        out.extend_from_slice(&(addr as u32).to_le_bytes());
        let mut pos = 0;
        // Pairs of (zero run, literal run), u16 each, literals inline.
        while pos < BS {
            let zeros = block[pos..].iter().take_while(|&&b| b == 0).count();
            pos += zeros;
            let start = pos;
            while pos < BS {
                let run = block[pos..].iter().take(8).take_while(|&&b| b == 0).count();
                if run == 8 || pos + run == BS {
                    break;
                }
                pos += run.max(1);
            }
            out.extend_from_slice(&(zeros as u16).to_le_bytes());
            out.extend_from_slice(&((pos - start) as u16).to_le_bytes());
            out.extend_from_slice(&block[start..pos]);
        }
    }
    out
}

/// Decodes [`encode_sparse`] output.
pub fn decode_sparse(name: &'static str, bytes: &[u8]) -> SeedImage {
    let mut pos = 0usize;
    let mut take = |n: usize| {
        let s = &bytes[pos..pos + n];
        pos += n;
        s
    };
    assert_eq!(take(8), SPARSE_MAGIC, "not a sparse seed image");
    let size = u64::from_le_bytes(take(8).try_into().unwrap());
    let count = u32::from_le_bytes(take(4).try_into().unwrap());
    let mut blocks = BTreeMap::new();
    for _ in 0..count {
        let addr = u32::from_le_bytes(take(4).try_into().unwrap()) as u64;
        let mut block = Vec::with_capacity(BS);
        while block.len() < BS {
            let zeros = u16::from_le_bytes(take(2).try_into().unwrap()) as usize;
            let lits = u16::from_le_bytes(take(2).try_into().unwrap()) as usize;
            block.resize(block.len() + zeros, 0);
            block.extend_from_slice(take(lits));
        }
        assert_eq!(block.len(), BS, "corrupt seed block {addr}");
        blocks.insert(addr, block);
    }
    SeedImage { name, size, blocks }
}

/// The seed images in `seeds/` (see `seeds/make_seeds.sh`): one with no
/// optional features, one with extra_attr, inode_checksum, sb_checksum and
/// inode_crtime.
pub fn seed_images() -> &'static [SeedImage] {
    static SEEDS: OnceLock<Vec<SeedImage>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        vec![
            decode_sparse("plain", include_bytes!("../seeds/plain.f2sparse")),
            decode_sparse("features", include_bytes!("../seeds/features.f2sparse")),
        ]
    })
}

/// A device holding only some blocks; every other block reads as zeros.
/// Writes are refused.
#[derive(Clone)]
pub struct SparseDevice {
    pub size: u64,
    pub blocks: BTreeMap<u64, Vec<u8>>,
}

impl BlockDevice for SparseDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"))?;
        let mut pos = offset;
        while pos < end {
            let blk = pos / BS as u64;
            let within = (pos % BS as u64) as usize;
            let n = (BS - within).min((end - pos) as usize);
            let dst = &mut buf[(pos - offset) as usize..][..n];
            match self.blocks.get(&blk) {
                Some(b) => dst.copy_from_slice(&b[within..within + n]),
                None => dst.fill(0),
            }
            pos += n as u64;
        }
        Ok(())
    }

    fn write_at(&self, _offset: u64, _buf: &[u8]) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::PermissionDenied))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// One [`SparseDevice`] behind several `Box<dyn BlockDevice>`.
struct Shared(Arc<SparseDevice>);

impl BlockDevice for Shared {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
}

/// `data` as one block: truncated or zero-padded to 4 KiB.
fn to_block(data: &[u8]) -> Vec<u8> {
    let mut block = data[..data.len().min(BS)].to_vec();
    block.resize(BS, 0);
    block
}

/// Feature sets and checksum seeds the inode target decodes under.
fn inode_contexts() -> &'static [InodeCheck] {
    static CTX: OnceLock<Vec<InodeCheck>> = OnceLock::new();
    CTX.get_or_init(|| {
        let mut ctx: Vec<InodeCheck> = seed_images()
            .iter()
            .map(|s| {
                let sb = s.superblock();
                InodeCheck {
                    features: sb.feature.get(),
                    checksum_seed: inode_checksum_seed(&sb.uuid),
                    strict_encoding: sb.s_encoding_flags.get() & F2FS_ENC_STRICT_MODE_FL != 0,
                }
            })
            .collect();
        ctx.push(InodeCheck {
            features: READ_FEATURES,
            checksum_seed: 0,
            strict_encoding: true,
        });
        ctx.push(InodeCheck {
            features: feature::EXTRA_ATTR,
            checksum_seed: 0,
            strict_encoding: false,
        });
        ctx
    })
}

// ------------------------------------------------------------------ targets

/// `SuperBlock::from_block` and validation of both copies, then every
/// accessor the engine uses on a validated superblock.
pub fn superblock(data: &[u8]) {
    let _ = SuperBlock::from_block(data);
    let mut block = vec![0u8; 1024];
    block.extend_from_slice(data);
    block.resize(BS, 0);
    for copy in 0..2 {
        let Ok(sb) = decode_superblock_copy(&block, copy) else {
            continue;
        };
        let _ = sb.max_nid();
        let _ = sb.sit_blocks_per_copy();
        let _ = sb.nat_blocks_per_copy();
        let _ = sb.main_end_blkaddr();
        let _ = sb.extensions();
        let _ = sb.volume_label();
        let _ = sb.uuid_string();
        let _ = sb.version_string();
        let _ = feature::describe(sb.feature.get());
        assert_eq!(sb.to_block()[..BS], block[..], "encode(decode(x)) == x");
        let mut resealed = sb.clone();
        resealed.update_checksum();
        assert!(resealed.validate().is_ok(), "resealing keeps it valid");
    }
}

/// Checkpoint header: CRC, validation against the seed superblock, the
/// version bitmaps the engine slices after validation, then the rest of the
/// input as compacted summaries and as an orphan block.
pub fn checkpoint(data: &[u8]) {
    let seed = &seed_images()[0];
    let sb = seed.superblock();
    let head = to_block(data);
    let rest = &data[data.len().min(BS)..];
    let _ = verify_checkpoint_crc(&head);
    let cp = Checkpoint::from_block(&head);
    if cp.validate(&sb).is_ok() {
        // What load_checkpoint does with a validated header.
        let payload = sb.cp_payload.get();
        let mut raw = head.clone();
        raw.resize(BS * (1 + payload as usize), 0);
        let (sit_off, nat_off) = cp.bitmap_offsets(payload);
        let sit = &raw[sit_off..sit_off + cp.sit_ver_bitmap_bytesize.get() as usize];
        let nat = &raw[nat_off..nat_off + cp.nat_ver_bitmap_bytesize.get() as usize];
        for index in 0..sb.nat_blocks_per_copy() {
            let _ = test_bit_msb(nat, index as usize);
        }
        let sit_blocks = (sb.segment_count_main.get() as usize).div_ceil(55);
        for index in 0..sit_blocks {
            let _ = test_bit_msb(sit, index);
        }
        let start_sum = cp.cp_pack_start_sum.get();
        assert!(start_sum > payload, "orphan count cannot underflow");
    }
    let counts = [
        CursegType::HotData,
        CursegType::WarmData,
        CursegType::ColdData,
    ]
    .map(|log| cp.compacted_entry_count(log));
    let blocks = compacted_blocks_needed(counts);
    if blocks <= 8 {
        let mut sums = rest.to_vec();
        sums.resize(blocks * BS, 0);
        let _ = decode_compacted_summaries(&sums, counts);
    }
    let _ = decode_compacted_summaries(&to_block(rest), [ENTRIES, 0, 1]);
    let orphan = OrphanBlock::read_from_bytes(&to_block(rest)).expect("one block");
    let _ = orphan.inos();
}

const ENTRIES: usize = f2fuse_layout::ENTRIES_IN_SUM;

/// One block read as a SIT block, a NAT block, a summary block (with both
/// journals) and an orphan block.
pub fn segment(data: &[u8]) {
    let block = to_block(data);
    let sit = SitBlock::read_from_bytes(&block).expect("one block");
    for (i, e) in sit.entries.iter().enumerate() {
        let _ = e.validate(i as u32);
        let _ = (e.valid_blocks(), e.seg_type());
    }
    let nat = NatBlock::read_from_bytes(&block).expect("one block");
    let _: u64 = nat
        .entries
        .iter()
        .map(|e| e.block_addr.get() as u64 + e.ino.get() as u64 + e.version as u64)
        .sum();
    let sum = SummaryBlock::read_from_bytes(&block).expect("one block");
    if let Ok(entries) = sum.nat_journal().valid_entries() {
        for e in entries {
            let _ = e.nid.get() / NAT_ENTRY_PER_BLOCK;
        }
    }
    if let Ok(entries) = sum.sit_journal().valid_entries() {
        for e in entries {
            let _ = e.se.validate(e.segno.get());
        }
    }
    let _ = OrphanBlock::read_from_bytes(&block)
        .expect("one block")
        .inos();
}

/// A node block: footer, the engine's inode decoder and what it derives
/// (inline data, inline dentries, inline xattrs, block paths). The first
/// byte picks the feature set.
pub fn inode(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let contexts = inode_contexts();
    let check = contexts[pick as usize % contexts.len()];
    let block = to_block(rest);
    let footer = footer_of(&block);
    let ofs = footer.ofs();
    let _ = (footer.is_cold(), footer.is_fsync(), footer.is_dent());
    if is_dnode_offset(ofs) {
        let _ = start_bidx_of_node(ofs, AddrCounts::plain(923));
    }
    let raw = inode_of(&block);
    let _ = verify_inode_checksum(&block, check.features, check.checksum_seed);
    if let Ok(layout) = InodeLayout::of(raw, check.features) {
        let apo = AddrCounts::plain(layout.addrs_per_inode());
        for i in 0..apo.per_inode as usize {
            let _ = raw.data_addr(&layout, i);
        }
        let inline = &raw_bytes(&block)[layout.inline_data_range()];
        let set = DentrySet::new(inline, DentryGeometry::inline(inline.len()));
        let _ = set.entries();
        let _ = parse_xattrs(&raw_bytes(&block)[layout.inline_xattr_range()]);
        let _ = (raw.crtime(&layout), raw.projid(&layout), raw.rdev(&layout));
        let _ = block_path(raw.i_size.get() / BS as u64, apo);
        let _ = block_path(max_file_blocks(apo) - 1, apo);
    }
    let ino = footer.ino.get().max(F2FS_ROOT_INO);
    let Ok(info) = decode_inode(ino, block.clone().into_boxed_slice(), &check) else {
        return;
    };
    let _ = dir_block_count(&info);
    let _ = data::check_readable(&info);
    if inline::has_inline_data(&info) {
        assert!(inline::inline_data(&info).len() as u64 <= info.size);
    }
    if info.kind == FileKind::Directory && inline::has_inline_dentry(&info) {
        let set = inline::inline_dentries(&info);
        if let Ok(entries) = set.entries() {
            for e in entries.iter().take(8) {
                if let Some(name) = DentryName::new(e.name, info.names) {
                    let _ = set.find(&name);
                }
            }
        }
    }
}

fn raw_bytes(block: &[u8]) -> &[u8] {
    &block[..f2fuse_layout::NODE_PAYLOAD_SIZE]
}

/// A dentry block: entries, lookups, free runs; the input's head also as
/// an inline dentry area of every possible size and as hash-table indexes.
pub fn dentry(data: &[u8]) {
    let block = to_block(data);
    let set = DentrySet::new(&block, DentryGeometry::BLOCK);
    if let Ok(entries) = set.entries() {
        for e in entries.iter().take(16) {
            let exact = DentryName::new(e.name, NameRule::Exact).expect("exact names all pass");
            let found = set.find(&exact).expect("entries() succeeded");
            if e.hash_code == exact.hash {
                assert!(found.is_some(), "an entry under its name's hash is found");
            }
            for strict in [false, true] {
                if let Some(name) = DentryName::new(e.name, NameRule::Casefold { strict }) {
                    let _ = set.find(&name);
                }
            }
        }
    }
    let lost_found = DentryName::new(b"lost+found", NameRule::Exact).expect("a valid name");
    let _ = set.find(&lost_found);
    for n in [1, 2, 8, 32] {
        let _ = set.find_free_run(n);
    }
    if data.len() >= 4 {
        let len = u16::from_le_bytes([data[0], data[1]]) as usize % 3700;
        let geo = DentryGeometry::inline(len);
        let _ = DentrySet::new(&block[..len], geo).entries();
        let level = data[2] as u32 % MAX_DIR_HASH_DEPTH;
        let dir_level = data[3] as u32;
        let _ = level_of_block(
            u64::from_le_bytes(to_block(data)[..8].try_into().unwrap()),
            dir_level,
        );
        let _ = dir_block_index(level, dir_level, 0);
    }
}

/// An xattr buffer; what decodes must encode back to the same entries.
pub fn xattr(data: &[u8]) {
    let Ok(entries) = parse_xattrs(data) else {
        return;
    };
    for e in &entries {
        let _ = (e.full_name(), e.encoded_size());
    }
    let buf = encode_xattrs(&entries, encoded_len(&entries)).expect("fits by construction");
    assert_eq!(parse_xattrs(&buf).expect("re-encoded"), entries);
}

/// A compressed cluster as a file's payload blocks hold it: the first byte
/// picks the algorithm, the second the cluster size (4..=32 blocks), the
/// third whether the inode asks for the checksum; the rest is the stream
/// (header, compressed bytes; padded to whole blocks). Whatever decodes
/// fills the cluster exactly, and our own encoding of it decodes back.
pub fn cluster(data: &[u8]) {
    let [pick, size, flags, stream @ ..] = data else {
        return;
    };
    let algorithm = CompressAlgorithm::ALL[*pick as usize % CompressAlgorithm::ALL.len()];
    let log_cluster_size = 2 + size % 4;
    let checksum = flags & 1 != 0;
    let mut blocks = stream.to_vec();
    blocks.resize(stream.len().next_multiple_of(BS), 0);
    let Ok(payload) = split_cluster(&blocks, checksum) else {
        return;
    };
    let mut out = vec![0u8; BS << log_cluster_size];
    if decompress(algorithm, payload, &mut out).is_err() {
        return;
    }
    if let Some(ours) = compress_cluster(&cluster_state(algorithm, log_cluster_size), &out) {
        let mut back = vec![0u8; out.len()];
        decompress(algorithm, &ours, &mut back).expect("our own stream decodes");
        assert!(back == out, "{} round trip", algorithm.name());
    }
}

/// A compressed file's state with default settings (no level, no checksum).
fn cluster_state(algorithm: CompressAlgorithm, log_cluster_size: u8) -> InodeCompression {
    InodeCompression {
        algorithm,
        log_cluster_size,
        flag: 0,
        compr_blocks: 0,
        released: false,
    }
}

/// A quota file: the first byte picks the type, the rest is the file. What
/// parses must take new ids and lose them again as the kernel's tree code
/// does, every step leaving a file that parses with exactly the ids set.
pub fn quota(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let qtype = pick as usize % 3;
    let Ok(mut file) = QuotaFile::parse(qtype, bytes) else {
        return;
    };
    let mut ids: Vec<u32> = file.ids().collect();
    for (i, id) in [0u32, 1, 255, 256, 65_536, 1 << 24, u32::MAX]
        .into_iter()
        .enumerate()
    {
        let dquot = Dquot {
            curinodes: i as u64 + 1,
            ..Dquot::default()
        };
        file.set(id, &dquot);
        assert_eq!(file.get(id), Some(dquot));
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    for &id in ids.iter().step_by(2) {
        file.remove(id);
    }
    // A hostile file can share leaves and slots between ids; only a file
    // that was well formed is bound to hold exactly what was set.
    let Ok(again) = QuotaFile::parse(qtype, file.bytes()) else {
        return;
    };
    let _ = again.ids().count();
}

/// Devices larger than this are clamped, so fuzzed geometry stays cheap.
const MAX_FUZZ_DEVICE: u64 = 1 << 37;

/// Whole image: the first byte picks a seed image, the rest is a list of
/// patches `[block selector u8][offset u16 LE][len u8][len bytes]` applied
/// to its non-zero blocks. The device grows to the superblock's
/// block_count (it is sparse), then the image is mounted layer by layer
/// and, if it opens, its tree is walked and every file read, with budgets.
pub fn image(data: &[u8]) {
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let seeds = seed_images();
    let seed = &seeds[pick as usize % seeds.len()];
    let mut dev = seed.device();
    let keys: Vec<u64> = dev.blocks.keys().copied().collect();
    while rest.len() >= 4 {
        let key = keys[rest[0] as usize % keys.len()];
        let offset = u16::from_le_bytes([rest[1], rest[2]]) as usize % BS;
        let len = (rest[3] as usize).min(rest.len() - 4).min(BS - offset);
        let block = dev.blocks.get_mut(&key).expect("listed key");
        block[offset..offset + len].copy_from_slice(&rest[4..4 + len]);
        rest = &rest[4 + len..];
    }
    if let Some(b0) = dev.blocks.get(&0) {
        let sb = SuperBlock::from_block(b0).expect("one block");
        if sb.magic.get() == F2FS_SUPER_MAGIC {
            let claimed = sb.block_count.get().saturating_mul(BS as u64);
            dev.size = dev.size.max(claimed.min(MAX_FUZZ_DEVICE));
        }
    }
    mount_and_walk(Arc::new(dev));
}

/// Loads each layer the way `Fs::open` does, so that damage behind a
/// broken root inode is still reached, then opens and walks the tree.
pub fn mount_and_walk(dev: Arc<SparseDevice>) {
    let device = Device::new(Box::new(Shared(dev.clone())));
    if let Ok(loaded) = load_superblock(&device) {
        if let Ok(cp) = load_checkpoint(&device, &loaded.sb) {
            if let Ok(sit) = SitTable::load(&device, &loaded.sb, &cp) {
                let _ = sit.usage(&cp);
            }
        }
    }
    if let Ok(fs) = Fs::open(Box::new(Shared(dev))) {
        walk(&fs);
    }
}

/// Walks the tree of an open image: at most 1000 entries, 8 levels deep,
/// each directory once; reads the head and tail of every regular file,
/// every symlink target, every xattr list and every file's extents.
pub fn walk(fs: &Fs) {
    let _ = fs.statfs();
    let _ = fs.orphans();
    if let Ok(sit) = fs.sit() {
        let _ = sit.usage(&fs.checkpoint_state());
    }
    let _ = fs.resolve("/a/b/c");
    let mut budget = 1000usize;
    let mut seen = HashSet::new();
    let mut stack = vec![(F2FS_ROOT_INO, 0u32)];
    let mut buf = vec![0u8; 64 << 10];
    while let Some((dir, depth)) = stack.pop() {
        if !seen.insert(dir) {
            continue;
        }
        let Ok(entries) = fs.read_dir(dir) else {
            continue;
        };
        for (i, e) in entries.iter().enumerate() {
            if budget == 0 {
                return;
            }
            budget -= 1;
            if i < 32 {
                let _ = fs.lookup(dir, &e.name);
            }
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let Ok(inode) = fs.inode(e.ino) else {
                continue;
            };
            let _ = fs.xattrs(&inode);
            match inode.kind {
                FileKind::Directory if depth < 8 => stack.push((e.ino, depth + 1)),
                FileKind::Regular => {
                    let _ = fs.read(&inode, 0, &mut buf);
                    let _ = fs.read(&inode, inode.size.saturating_sub(5000), &mut buf[..8192]);
                    let _ = fs.extents(&inode);
                }
                FileKind::Symlink => {
                    let _ = fs.read_link(&inode);
                }
                _ => {}
            }
        }
    }
}

// ------------------------------------------------------------------ corpus

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// The entry points by name, as the fuzz targets are named.
pub const TARGETS: &[(&str, Target)] = &[
    ("superblock", superblock),
    ("checkpoint", checkpoint),
    ("segment", segment),
    ("inode", inode),
    ("dentry", dentry),
    ("xattr", xattr),
    ("cluster", cluster),
    ("quota", quota),
    ("image", image),
];

/// Valid inputs for every target, cut from the seed images: the starting
/// corpus (`examples/write_corpus.rs`) and the mini-fuzz test's seeds.
pub fn seed_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    for (pick, seed) in seed_images().iter().enumerate() {
        let sb = seed.superblock();
        for copy in 0..2 {
            out.push(("superblock", seed.block(copy)[1024..1024 + 3072].to_vec()));
        }
        let cp_addr = sb.cp_blkaddr.get() as u64;
        for pack in 0..2u64 {
            let start = cp_addr + pack * 512;
            let mut input = seed.block(start);
            let total = Checkpoint::from_block(&input)
                .cp_pack_total_block_count
                .get();
            let start_sum = Checkpoint::from_block(&input).cp_pack_start_sum.get() as u64;
            if pick == 0 && total < 512 {
                input.extend(seed.block(start + start_sum));
                out.push(("checkpoint", input));
            }
            for b in start..start + (total as u64).min(512) {
                out.push(("segment", seed.block(b)));
            }
        }
        out.push(("segment", seed.block(sb.nat_blkaddr.get() as u64)));
        out.push(("segment", seed.block(sb.sit_blkaddr.get() as u64)));
        out.push(("segment", seed.block(sb.ssa_blkaddr.get() as u64)));
        // Node blocks (footer nid == its NAT nid is too costly to check here:
        // any block with a plausible footer will do) and dentry blocks.
        let main = sb.main_blkaddr.get() as u64;
        for block in seed.blocks.range(main..).map(|(_, b)| b) {
            let footer = footer_of(block);
            if footer.nid.get() >= F2FS_ROOT_INO && footer.ino.get() >= F2FS_ROOT_INO {
                let mut input = vec![pick as u8];
                input.extend_from_slice(block);
                out.push(("inode", input));
            } else if block[0] & 0x3 == 0x3 && block[27 + 3 + 8..27 + 3 + 10] == [1, 0] {
                // Slots 0 and 1 used and slot 0's name_len 1: "." of a dentry block.
                out.push(("dentry", block.clone()));
            }
        }
        out.push(("image", vec![pick as u8]));
    }
    let xattrs = [
        XattrEntry {
            index: 1,
            name: b"comment".to_vec(),
            value: b"hello".to_vec(),
        },
        XattrEntry {
            index: 6,
            name: b"selinux".to_vec(),
            value: b"system_u:object_r:etc_t:s0\0".to_vec(),
        },
        XattrEntry {
            index: 4,
            name: b"x".to_vec(),
            value: vec![2, 0, 0, 0, 1, 0, 6, 0],
        },
    ];
    for cap in [200, 200 + 4072] {
        out.push(("xattr", encode_xattrs(&xattrs, cap).expect("fits")));
    }
    for (qtype, ids) in [(0u8, 1u32), (1, 20), (2, 40)] {
        let mut file = QuotaFile::new(qtype as usize);
        for id in 0..ids {
            let dquot = Dquot {
                curinodes: 1,
                curspace: 4096,
                ..Dquot::default()
            };
            file.set(id * 1000 + (id << 24), &dquot);
        }
        let mut input = vec![qtype];
        input.extend_from_slice(file.bytes());
        out.push(("quota", input));
    }
    out.extend(cluster_seeds().into_iter().map(|input| ("cluster", input)));
    out
}

/// One cluster per algorithm, size and checksum setting, each as our
/// writer stores it: text that compresses, with runs of zeros (LZO-RLE's).
fn cluster_seeds() -> Vec<Vec<u8>> {
    let mut text = Vec::new();
    while text.len() < BS << 5 {
        text.extend_from_slice(b"f2fs compressed cluster seed ");
        text.extend_from_slice(&[0u8; 37]);
    }
    let mut out = Vec::new();
    for (pick, &algorithm) in CompressAlgorithm::ALL.iter().enumerate() {
        for size in 0..4u8 {
            let log_cluster_size = 2 + size;
            let data = &text[..BS << log_cluster_size];
            let payload = compress_cluster(&cluster_state(algorithm, log_cluster_size), data)
                .expect("the seed text compresses");
            for checksum in [false, true] {
                let mut input = vec![pick as u8, size, checksum as u8];
                let stream = build_cluster(&payload, checksum);
                // Trailing zero padding is restored by the entry point.
                let used = stream.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                input.extend_from_slice(&stream[..used]);
                out.push(input);
            }
        }
    }
    out
}
