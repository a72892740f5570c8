//! Compressed files (the `compression` feature), as Linux 6.1's
//! fs/f2fs/compress.c stores them: the file is cut into clusters of
//! 2^`i_log_cluster_size` blocks. A raw cluster's slots hold ordinary
//! addresses. A compressed cluster's slot 0 holds `COMPRESS_ADDR`, slots
//! 1..=n the blocks of one stream (a 24-byte header, the compressed bytes,
//! zero padding) and the other slots `NEW_ADDR` (`NULL_ADDR` once the file
//! was released). The decoders accept what the kernel's accept; a cluster
//! they refuse is `Corrupt`, never zeros or a panic.

pub mod lzo;

use crate::data::{data_kind, BlockMapper};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::inode::InodeInfo;
use crate::node::NodeManager;
use f2fuse_layout::compress::{split_cluster, CompressAlgorithm, InodeCompression};
use f2fuse_layout::*;

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
) -> Result<usize> {
    let Some(compression) = &inode.compression else {
        return crate::data::read_data(dev, nm, inode, offset, buf);
    };
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
