//! Compressed files (the `compression` feature), as Linux 6.1's
//! fs/f2fs/compress.c stores them: the file is cut into clusters of
//! 2^`i_log_cluster_size` blocks. A raw cluster's slots hold ordinary
//! addresses. A compressed cluster's slot 0 holds `COMPRESS_ADDR`, slots
//! 1..=n the blocks of one stream (a 24-byte header, the compressed bytes,
//! zero padding) and the other slots `NEW_ADDR` (`NULL_ADDR` once the file
//! was released). The decoders accept what the kernel's accept; a cluster
//! they refuse is `Corrupt`, never zeros or a panic.

pub mod lzo;
mod manage;

pub use manage::{release_blocks, reserve_blocks, rewrite_cluster};

use crate::data::{addr_slot, data_kind, get_addr, set_addr, AddrSlot, BlockMapper, DataPolicy};
use crate::device::Device;
use crate::error::{Error, ErrorKind, Result};
use crate::inode::{blocks_less, set_ctime, set_mtime, Ctx, InodeInfo};
use crate::node::NodeManager;
use f2fuse_layout::compress::{
    build_cluster, COMPRESS_CHKSUM, COMPRESS_HEADER_SIZE, COMPRESS_LEVEL_OFFSET,
    I_COMPR_BLOCKS_OFFSET,
};
use f2fuse_layout::compress::{split_cluster, CompressAlgorithm, InodeCompression};
use f2fuse_layout::node::max_file_blocks;
use f2fuse_layout::segment::Summary;
use f2fuse_layout::*;
use zerocopy::IntoBytes;

/// What the slots of one cluster say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterShape {
    /// Ordinary addresses, one per page.
    Raw,
    /// `COMPRESS_ADDR`, then this many payload blocks.
    Compressed { payload_blocks: usize },
}

fn is_block(addr: u32) -> bool {
    !matches!(addr, NULL_ADDR | NEW_ADDR | COMPRESS_ADDR)
}

/// The shape of a cluster from its slots, with the kernel's
/// `f2fs_sanity_check_cluster` rules: `COMPRESS_ADDR` only in slot 0, and
/// no payload block after a `NULL_ADDR`/`NEW_ADDR`; plus at least one
/// payload block (the kernel cannot read a cluster without one: EIO).
pub fn cluster_shape(slots: &[u32]) -> std::result::Result<ClusterShape, String> {
    if let Some(i) = slots.iter().skip(1).position(|&a| a == COMPRESS_ADDR) {
        return Err(format!(
            "COMPRESS_ADDR in slot {} of a cluster (only slot 0 may hold it)",
            i + 1
        ));
    }
    if slots.first() != Some(&COMPRESS_ADDR) {
        return Ok(ClusterShape::Raw);
    }
    let payload_blocks = slots[1..].iter().take_while(|&&a| is_block(a)).count();
    if let Some(i) = slots[1 + payload_blocks..]
        .iter()
        .position(|&a| is_block(a))
    {
        return Err(format!(
            "payload block in slot {} after an empty slot",
            1 + payload_blocks + i
        ));
    }
    if payload_blocks == 0 {
        return Err("compressed cluster without payload blocks".into());
    }
    Ok(ClusterShape::Compressed { payload_blocks })
}

/// Decodes `payload` of `algorithm` into `out`, which must come out exactly
/// full, as the kernel requires of a cluster.
pub fn decompress(
    algorithm: CompressAlgorithm,
    payload: &[u8],
    out: &mut [u8],
) -> std::result::Result<(), String> {
    let produced = match algorithm {
        CompressAlgorithm::Lzo | CompressAlgorithm::LzoRle => {
            lzo::decompress(payload, out).map_err(|e| e.to_string())?
        }
        CompressAlgorithm::Lz4 => {
            lz4_flex::block::decompress_into(payload, out).map_err(|e| format!("LZ4: {e}"))?
        }
        CompressAlgorithm::Zstd => zstd_decompress(payload, out)?,
    };
    if produced != out.len() {
        return Err(format!(
            "{} decoded {produced} bytes, the cluster has {}",
            algorithm.name(),
            out.len()
        ));
    }
    Ok(())
}

/// One streaming step into the cluster buffer, as the kernel's
/// zstd_decompress_pages: the window may not exceed the cluster, and bytes
/// after the frame are ignored.
fn zstd_decompress(payload: &[u8], out: &mut [u8]) -> std::result::Result<usize, String> {
    use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer};
    let zstd_err = |code| format!("zstd: {}", zstd::zstd_safe::get_error_name(code));
    let mut dctx = DCtx::create();
    let window_log = out.len().max(1).ilog2();
    dctx.set_parameter(DParameter::WindowLogMax(window_log))
        .map_err(zstd_err)?;
    let mut input = InBuffer::around(payload);
    let mut output = OutBuffer::around(out);
    dctx.decompress_stream(&mut output, &mut input)
        .map_err(zstd_err)?;
    Ok(output.pos())
}

/// Reads the decoded bytes of cluster `cluster` of a compressed file whose
/// payload blocks are `payload` (slots 1..=n).
fn read_compressed_cluster(
    dev: &Device,
    inode: &InodeInfo,
    compression: &InodeCompression,
    payload: &[u32],
) -> std::result::Result<Vec<u8>, Error> {
    let mut stream = vec![0u8; payload.len() * F2FS_BLKSIZE];
    for (block, &addr) in stream.chunks_mut(F2FS_BLKSIZE).zip(payload) {
        dev.read_blocks(data_kind(inode), addr as u64, block)?;
    }
    let bytes = split_cluster(&stream, compression.has_checksum())?;
    let mut out = vec![0u8; compression.cluster_blocks() as usize * F2FS_BLKSIZE];
    decompress(compression.algorithm, bytes, &mut out)
        .map_err(|detail| Corrupt::new("compressed cluster", detail))?;
    Ok(out)
}

/// Fills `dst` with the bytes of a raw cluster from byte `from` of the
/// cluster on; holes and reservations read as zeros.
fn read_raw_cluster(
    dev: &Device,
    inode: &InodeInfo,
    slots: &[u32],
    from: usize,
    dst: &mut [u8],
) -> Result<()> {
    let bs = F2FS_BLKSIZE;
    let mut done = 0;
    let mut scratch = Vec::new();
    while done < dst.len() {
        let page = (from + done) / bs;
        let within = (from + done) % bs;
        // Consecutive addresses are read with one request.
        let mut run = 1;
        if is_block(slots[page]) {
            while page + run < slots.len()
                && (page + run) * bs < from + dst.len()
                && slots[page + run] == slots[page] + run as u32
            {
                run += 1;
            }
        }
        let n = (run * bs - within).min(dst.len() - done);
        let out = &mut dst[done..done + n];
        if is_block(slots[page]) {
            scratch.resize(run * bs, 0);
            dev.read_blocks(data_kind(inode), slots[page] as u64, &mut scratch)?;
            out.copy_from_slice(&scratch[within..within + n]);
        } else {
            out.fill(0);
        }
        done += n;
    }
    Ok(())
}

/// The slots of cluster `cluster` and its shape (a bad shape is `Corrupt`).
pub fn map_cluster(
    mapper: &mut BlockMapper,
    inode: &InodeInfo,
    cluster: u64,
) -> Result<(Vec<u32>, ClusterShape)> {
    let compression = inode.compression.as_ref().expect("a compressed file");
    let cs = compression.cluster_blocks();
    let slots = (cluster * cs..(cluster + 1) * cs)
        .map(|index| mapper.map(index))
        .collect::<Result<Vec<u32>>>()?;
    let shape = cluster_shape(&slots).map_err(|detail| {
        Error::from(
            Corrupt::new("compressed cluster", detail)
                .at(format!("inode {} cluster {cluster}", inode.ino)),
        )
    })?;
    Ok((slots, shape))
}

/// Reads up to `buf.len()` bytes at `offset` of a file; returns the count
/// (0 at or past EOF). Files that are not compressed are read by `data`.
pub fn read_data(
    dev: &Device,
    nm: &NodeManager,
    inode: &InodeInfo,
    offset: u64,
    buf: &mut [u8],
    policy: DataPolicy,
) -> Result<usize> {
    let Some(compression) = &inode.compression else {
        return crate::data::read_data(dev, nm, inode, offset, buf, policy);
    };
    crate::data::check_readable(inode)?;
    if offset >= inode.size || buf.is_empty() {
        return Ok(0);
    }
    let len = (buf.len() as u64).min(inode.size - offset) as usize;
    let buf = &mut buf[..len];
    let cluster_bytes = compression.cluster_blocks() * F2FS_BLKSIZE as u64;
    let end = offset + buf.len() as u64;
    let mut mapper = BlockMapper::new(nm, inode);
    for cluster in offset / cluster_bytes..end.div_ceil(cluster_bytes) {
        let (slots, shape) = map_cluster(&mut mapper, inode, cluster)?;
        let start = cluster * cluster_bytes;
        let from = offset.max(start);
        let to = end.min(start + cluster_bytes);
        let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
        let within = (from - start) as usize;
        match shape {
            ClusterShape::Raw => read_raw_cluster(dev, inode, &slots, within, dst)?,
            ClusterShape::Compressed { payload_blocks } => {
                let data =
                    read_compressed_cluster(dev, inode, compression, &slots[1..=payload_blocks])
                        .map_err(|e| e.at(format!("inode {} cluster {cluster}", inode.ino)))?;
                dst.copy_from_slice(&data[within..within + dst.len()]);
            }
        }
    }
    Ok(len)
}

// ---- Writing ----

/// The kernel's `compress_mode` mount option: when clusters of compressed
/// files are compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompressMode {
    /// At every write.
    #[default]
    Fs,
    /// Only inside F2FS_IOC_COMPRESS_FILE; writes store clusters raw.
    User,
}

/// How files given compression get it: the kernel's mount options
/// `compress_algorithm` (with level), `compress_log_size`,
/// `compress_chksum`, `compress_extension`, `nocompress_extension` and
/// `compress_mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressOptions {
    /// The compression algorithm of new clusters.
    pub algorithm: CompressAlgorithm,
    /// 0 = the algorithm's default (zstd: level 1, as the kernel stores it).
    pub level: u8,
    /// Blocks per cluster, as a power of two.
    pub log_cluster_size: u8,
    /// Store a checksum with each compressed cluster.
    pub checksum: bool,
    /// New files with these extensions (case-insensitive; `*` = all) are compressed.
    pub extensions: Vec<String>,
    /// New files with these extensions are not, whatever their directory says.
    pub nocompress_extensions: Vec<String>,
    /// Who compresses: the file system at write time, or the user on request.
    pub mode: CompressMode,
}

impl Default for CompressOptions {
    /// The kernel's defaults: lz4, clusters of 4 blocks, no checksum.
    fn default() -> Self {
        CompressOptions {
            algorithm: CompressAlgorithm::Lz4,
            level: 0,
            log_cluster_size: 2,
            checksum: false,
            extensions: Vec::new(),
            nocompress_extensions: Vec::new(),
            mode: CompressMode::Fs,
        }
    }
}

impl CompressOptions {
    /// The state a file takes when it is given compression (empty).
    pub fn new_file_state(&self) -> InodeCompression {
        // Stored zstd level 0 is refused by later kernels; 6.1 stores 1.
        let level = match (self.algorithm, self.level) {
            (CompressAlgorithm::Zstd, 0) => 1,
            (CompressAlgorithm::Lz4 | CompressAlgorithm::Zstd, level) => level,
            _ => 0,
        };
        InodeCompression {
            algorithm: self.algorithm,
            log_cluster_size: self.log_cluster_size,
            flag: ((level as u16) << COMPRESS_LEVEL_OFFSET)
                | if self.checksum { COMPRESS_CHKSUM } else { 0 },
            compr_blocks: 0,
            released: false,
        }
    }

    /// What the kernel's set_compress_new_inode decides for a regular file
    /// named `name` created in a directory with flags `parent_flags`:
    /// Some(true) compress, Some(false) NOCOMP, None neither.
    pub fn for_new_file(&self, name: &[u8], parent_flags: u32) -> Option<bool> {
        if matches_extension(name, &self.nocompress_extensions) {
            return None;
        }
        if matches_extension(name, &self.extensions) {
            return Some(true);
        }
        if parent_flags & inode_flag::NOCOMP != 0 {
            Some(false)
        } else if parent_flags & inode_flag::COMPR != 0 {
            Some(true)
        } else {
            None
        }
    }
}

/// The kernel's is_extension_exist for compression: `*` matches every
/// name; otherwise the name ends in `.ext` (ASCII case ignored) with at
/// least one byte before the dot.
fn matches_extension(name: &[u8], extensions: &[String]) -> bool {
    extensions.iter().any(|ext| {
        let ext = ext.as_bytes();
        ext == b"*"
            || (name.len() >= ext.len() + 2
                && name[name.len() - ext.len() - 1] == b'.'
                && name[name.len() - ext.len()..].eq_ignore_ascii_case(ext))
    })
}

/// Compresses one cluster; `None` when the result would not save a block
/// (the kernel then stores the cluster raw).
pub fn compress_cluster(compression: &InodeCompression, data: &[u8]) -> Option<Vec<u8>> {
    let limit = data.len() - F2FS_BLKSIZE - COMPRESS_HEADER_SIZE;
    let payload = match compression.algorithm {
        CompressAlgorithm::Lzo => lzo::compress(data, false),
        CompressAlgorithm::LzoRle => lzo::compress(data, true),
        CompressAlgorithm::Lz4 => lz4_flex::block::compress(data),
        CompressAlgorithm::Zstd => zstd_compress(compression.level(), data, limit)?,
    };
    (payload.len() <= limit).then_some(payload)
}

/// One zstd frame as the kernel writes it: no content size, no checksum,
/// a window no larger than the cluster (the kernel's decoder limit).
fn zstd_compress(level: u8, data: &[u8], limit: usize) -> Option<Vec<u8>> {
    use zstd::zstd_safe::{CCtx, CParameter};
    let mut cctx = CCtx::create();
    let params = [
        CParameter::CompressionLevel(level.max(1) as i32),
        CParameter::WindowLog(data.len().ilog2()),
        CParameter::ContentSizeFlag(false),
        CParameter::ChecksumFlag(false),
    ];
    for p in params {
        cctx.set_parameter(p).ok()?;
    }
    let mut out = Vec::with_capacity(limit);
    cctx.compress2(&mut out, data).ok()?;
    Some(out)
}

/// What one slot of a cluster is to hold.
enum SlotPlan<'a> {
    /// A new block with these bytes.
    Block(&'a [u8]),
    /// An address without a block: NULL_ADDR, NEW_ADDR or COMPRESS_ADDR.
    Marker(u32),
}

/// Blocks a cluster's slots count in i_blocks, and the blocks its
/// compression saves (`i_compr_blocks`).
fn counts(slots: &[u32], shape: ClusterShape) -> (u64, u64) {
    let counted = slots.iter().filter(|&&a| a != NULL_ADDR).count() as u64;
    let saved = match shape {
        ClusterShape::Compressed { .. } => slots
            .iter()
            .filter(|&&a| a == COMPRESS_ADDR || a == NEW_ADDR)
            .count() as u64,
        ClusterShape::Raw => 0,
    };
    (counted, saved)
}

fn add_compr_blocks(raw: &mut f2fuse_layout::node::Inode, delta: i64) {
    let bytes = &mut raw.as_mut_bytes()[I_COMPR_BLOCKS_OFFSET..I_COMPR_BLOCKS_OFFSET + 8];
    let value = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    bytes.copy_from_slice(&value.saturating_add_signed(delta).to_le_bytes());
}

/// Stores cluster `cluster` of a compressed file whose size will be
/// `size` with contents `data` (a whole cluster), out of place, as the
/// kernel's write-back does: compressed when `compress` allows it, the
/// cluster lies below EOF and compression saves a block, else raw (pages
/// at or past EOF get no block; zero pages that were holes or
/// reservations stay so).
fn store_cluster(
    ctx: &Ctx,
    inode: &InodeInfo,
    cluster: u64,
    data: &[u8],
    size: u64,
    compress: bool,
) -> Result<()> {
    let compression = inode.compression.as_ref().expect("a compressed file");
    let cs = compression.cluster_blocks();
    let first = cluster * cs;
    let size_blocks = size.div_ceil(F2FS_BLKSIZE as u64);
    let slots = (first..first + cs)
        .map(|index| Ok(addr_slot(ctx, inode, index, true)?.expect("created")))
        .collect::<Result<Vec<AddrSlot>>>()?;
    let old = slots
        .iter()
        .map(|slot| get_addr(ctx, inode, slot))
        .collect::<Result<Vec<u32>>>()?;
    let corrupt = |detail| {
        Error::from(
            Corrupt::new("compressed cluster", detail)
                .at(format!("inode {} cluster {cluster}", inode.ino)),
        )
    };
    let old_shape = cluster_shape(&old).map_err(corrupt)?;
    let stream = (compress && first + cs <= size_blocks)
        .then(|| compress_cluster(compression, data))
        .flatten()
        .map(|payload| build_cluster(&payload, compression.has_checksum()));
    let plan: Vec<SlotPlan> = match &stream {
        Some(stream) => {
            let n = stream.len() / F2FS_BLKSIZE;
            (0..cs as usize)
                .map(|i| match i {
                    0 => SlotPlan::Marker(COMPRESS_ADDR),
                    i if i <= n => {
                        SlotPlan::Block(&stream[(i - 1) * F2FS_BLKSIZE..i * F2FS_BLKSIZE])
                    }
                    _ => SlotPlan::Marker(NEW_ADDR),
                })
                .collect()
        }
        None => data
            .chunks(F2FS_BLKSIZE)
            .zip(&old)
            .enumerate()
            .map(|(i, (page, &was))| {
                if first + i as u64 >= size_blocks {
                    SlotPlan::Marker(NULL_ADDR)
                } else if old_shape == ClusterShape::Raw
                    && matches!(was, NULL_ADDR | NEW_ADDR)
                    && page.iter().all(|&b| b == 0)
                {
                    SlotPlan::Marker(was)
                } else {
                    SlotPlan::Block(page)
                }
            })
            .collect(),
    };
    let new_blocks = plan
        .iter()
        .filter(|p| matches!(p, SlotPlan::Block(_)))
        .count() as u64;
    let versions = slots
        .iter()
        .map(|slot| Ok(ctx.nm.nat_entry(slot.nid)?.version))
        .collect::<Result<Vec<u8>>>()?;
    let (old_counted, old_saved) = counts(&old, old_shape);
    let not_null = plan
        .iter()
        .filter(|p| !matches!(p, SlotPlan::Marker(NULL_ADDR)))
        .count() as u64;
    // Allocate everything under one lock, after checking the quota and the space.
    let grow = not_null.saturating_sub(old_counted);
    ctx.quota_admits(inode, grow)?;
    let mut new = Vec::with_capacity(plan.len());
    {
        let mut space = ctx.space.lock();
        if space.free_user_blocks() < new_blocks.max(grow) {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!("inode {}: storing cluster {cluster}", inode.ino),
            ));
        }
        if not_null > old_counted {
            space.reserve_blocks(not_null - old_counted)?;
        } else {
            space.release_blocks(old_counted - not_null)?;
        }
        for ((p, slot), version) in plan.iter().zip(&slots).zip(&versions) {
            new.push(match p {
                SlotPlan::Block(_) => space.allocate(
                    CursegType::ColdData,
                    Summary::new(slot.nid, *version, slot.ofs_in_node),
                )?,
                SlotPlan::Marker(marker) => *marker,
            });
        }
        for &addr in old.iter().filter(|&&a| is_block(a)) {
            space.invalidate(addr)?;
        }
    }
    for (p, &addr) in plan.iter().zip(&new) {
        if let SlotPlan::Block(bytes) = p {
            ctx.dev.write_blocks(data_kind(inode), addr as u64, bytes)?;
        }
    }
    for (slot, &addr) in slots.iter().zip(&new) {
        set_addr(ctx, inode, slot, addr)?;
    }
    let new_shape = cluster_shape(&new).map_err(corrupt)?;
    let (counted, saved) = counts(&new, new_shape);
    ctx.try_update_inode(inode.ino, |raw| {
        let blocks = blocks_less(raw, old_counted)? + counted;
        raw.i_blocks.set(blocks);
        add_compr_blocks(raw, saved as i64 - old_saved as i64);
        raw.i_ext = Default::default();
        Ok(())
    })
}

/// The bytes of a whole cluster as they are now (zeros past EOF).
fn cluster_contents(ctx: &Ctx, ino: u32, cluster: u64, cluster_bytes: u64) -> Result<Vec<u8>> {
    let current = ctx.inode(ino)?;
    let mut buf = vec![0u8; cluster_bytes as usize];
    read_data(
        ctx.dev,
        ctx.nm,
        &current,
        cluster * cluster_bytes,
        &mut buf,
        DataPolicy::default(),
    )?;
    Ok(buf)
}

/// Writes `data` at `offset` of a file, cluster by cluster for a
/// compressed one (each cluster touched is read, changed and stored
/// whole, compressed if `mode` says writes compress); other files are
/// written by `data`.
pub fn write_data(
    ctx: &Ctx,
    ino: u32,
    offset: u64,
    data: &[u8],
    policy: DataPolicy,
    mode: CompressMode,
    allocated: &dyn Fn(),
) -> Result<usize> {
    let inode = ctx.inode(ino)?;
    let Some(compression) = &inode.compression else {
        return crate::data::write_data(ctx, ino, offset, data, policy, allocated);
    };
    if compression.released {
        return Err(Error::new(
            ErrorKind::NotPermitted,
            format!("inode {ino}: compressed blocks were released"),
        ));
    }
    if data.is_empty() {
        return Ok(0);
    }
    let data = crate::data::within_largest_file(&inode, offset, data)?;
    let end = offset + data.len() as u64;
    let size = inode.size.max(end);
    let cluster_bytes = compression.cluster_blocks() * F2FS_BLKSIZE as u64;
    // Where the bytes stored so far end.
    let mut stored = offset;
    for cluster in offset / cluster_bytes..end.div_ceil(cluster_bytes) {
        let start = cluster * cluster_bytes;
        let from = offset.max(start);
        let to = end.min(start + cluster_bytes);
        let mut buf = if to - from == cluster_bytes {
            vec![0u8; cluster_bytes as usize]
        } else {
            cluster_contents(ctx, ino, cluster, cluster_bytes)?
        };
        buf[(from - start) as usize..(to - start) as usize]
            .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        let compress = mode == CompressMode::Fs;
        match store_cluster(ctx, &ctx.inode(ino)?, cluster, &buf, size, compress) {
            Ok(()) => stored = to,
            // As plain writes: once some clusters are stored, running out
            // of space (or another refusal) makes a short write; the
            // caller sees the error at its next write.
            Err(Error::Refused { .. }) if stored > offset => break,
            Err(e) => return Err(e),
        }
    }
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        raw.i_size.set(raw.i_size.get().max(stored));
        set_mtime(raw, t);
        set_ctime(raw, t);
    })?;
    Ok((stored - offset) as usize)
}

/// Sets a file's size. A compressed file keeps whole clusters: a cluster
/// cut by the new size is rewritten (raw, as it now reaches EOF), the
/// clusters after it are freed with their saved blocks.
pub fn truncate(ctx: &Ctx, ino: u32, size: u64) -> Result<()> {
    let inode = ctx.inode(ino)?;
    let Some(compression) = &inode.compression else {
        return crate::data::truncate(ctx, ino, size);
    };
    let cs = compression.cluster_blocks();
    let cluster_bytes = cs * F2FS_BLKSIZE as u64;
    if size > max_file_blocks(inode.addrs()) * F2FS_BLKSIZE as u64 {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("inode {ino}: size {size} too large"),
        ));
    }
    if compression.released && !size.is_multiple_of(cluster_bytes) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {ino}: released file cut inside a cluster"),
        ));
    }
    if size < inode.size {
        if !size.is_multiple_of(cluster_bytes) {
            let cluster = size / cluster_bytes;
            let mut buf = cluster_contents(ctx, ino, cluster, cluster_bytes)?;
            buf[(size % cluster_bytes) as usize..].fill(0);
            // The cut cluster now reaches EOF: stored raw in any mode.
            store_cluster(ctx, &ctx.inode(ino)?, cluster, &buf, size, false)?;
        }
        let first_gone = size.div_ceil(cluster_bytes);
        let current = ctx.inode(ino)?;
        let mut mapper = BlockMapper::new(ctx.nm, &current);
        let mut saved = 0;
        for cluster in first_gone..current.size_blocks().div_ceil(cs) {
            let (slots, shape) = map_cluster(&mut mapper, &current, cluster)?;
            saved += counts(&slots, shape).1;
        }
        crate::data::truncate_blocks(ctx, ino, first_gone * cs)?;
        if !compression.released {
            ctx.update_inode(ino, |raw| add_compr_blocks(raw, -(saved as i64)))?;
        }
    }
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        raw.i_size.set(size);
        if size == 0 {
            raw.i_inline &= !inline_flag::COMPRESS_RELEASED;
        }
        set_mtime(raw, t);
        set_ctime(raw, t);
    })
}

/// fallocate on a compressed file: as the kernel, only preallocation
/// (it reserves raw clusters' holes); the modes that move or drop blocks
/// inside clusters are EOPNOTSUPP. A released file is EPERM (as later
/// kernels): reservations in its clusters would unbalance
/// `i_compr_blocks` once they are reserved again.
pub fn fallocate(
    ctx: &Ctx,
    ino: u32,
    offset: u64,
    len: u64,
    mode: crate::data::FallocMode,
) -> Result<()> {
    let inode = ctx.inode(ino)?;
    // The VFS's refusals come first.
    crate::data::fallocate_range(&inode, offset, len)?;
    if inode.compression.is_some() && !matches!(mode, crate::data::FallocMode::Allocate { .. }) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("inode {ino}: {mode:?} on a compressed file"),
        ));
    }
    if inode.compression.is_some_and(|c| c.released) {
        return Err(Error::new(
            ErrorKind::NotPermitted,
            format!("inode {ino}: compressed blocks were released"),
        ));
    }
    crate::data::fallocate(ctx, ino, offset, len, mode)
}

/// True when a file owns blocks besides its inode and xattr node (data,
/// reservations, address nodes): the kernel's F2FS_HAS_BLOCKS, which only
/// empty files fail.
pub fn has_blocks(inode: &InodeInfo) -> bool {
    inode.blocks > 1 + u64::from(inode.xattr_nid != 0)
}

/// Gives an empty regular file (or a directory, for the files created in
/// it) compression with `options`, or takes it away: FS_IOC_SETFLAGS with
/// COMPR_FL changed, as f2fs_setflags_common allows it. `raw` is the
/// inode being changed; `flags` the new i_flags.
pub fn apply_compr_flag(
    inode: &InodeInfo,
    raw: &mut f2fuse_layout::node::Inode,
    flags: u32,
    options: &CompressOptions,
) -> Result<()> {
    let was = inode.flags & inode_flag::COMPR != 0;
    let wants = flags & inode_flag::COMPR != 0;
    if was == wants {
        return Ok(());
    }
    let busy =
        inode.kind == crate::inode::FileKind::Regular && (inode.size > 0 || has_blocks(inode));
    if busy {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "inode {}: compression changes only on empty files",
                inode.ino
            ),
        ));
    }
    if wants && crate::ipu::is_pinned(inode) {
        // f2fs_may_compress: pinned files are never compressed.
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {}: a pinned file cannot be compressed", inode.ino),
        ));
    }
    if wants {
        options.new_file_state().store(raw);
        raw.i_inline &= !inline_flag::INLINE_DATA;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0x1000;

    #[test]
    fn cluster_shapes_follow_the_kernel_rules() {
        let c = COMPRESS_ADDR;
        assert_eq!(
            cluster_shape(&[A, A + 1, 0, NEW_ADDR]),
            Ok(ClusterShape::Raw)
        );
        assert_eq!(
            cluster_shape(&[c, A, A + 9, NEW_ADDR]),
            Ok(ClusterShape::Compressed { payload_blocks: 2 })
        );
        assert_eq!(
            cluster_shape(&[c, A, 0, 0]),
            Ok(ClusterShape::Compressed { payload_blocks: 1 })
        );
        for bad in [
            [c, A, NEW_ADDR, A + 1],
            [c, c, A, NEW_ADDR],
            [A, c, A, NEW_ADDR],
            [c, NEW_ADDR, NEW_ADDR, NEW_ADDR],
        ] {
            assert!(cluster_shape(&bad).is_err(), "{bad:x?}");
        }
    }
}
