//! What the compression ioctls do to a file's clusters: give back the
//! blocks compression saves (RELEASE), take them again (RESERVE), and
//! store clusters compressed or raw on request (COMPRESS_FILE,
//! DECOMPRESS_FILE). The callers check the kernel's preconditions.

use super::{add_compr_blocks, cluster_contents, map_cluster, store_cluster, ClusterShape};
use crate::data::{addr_slot, set_addr, BlockMapper};
use crate::error::{Error, Result};
use crate::inode::{blocks_less, set_ctime, Ctx, InodeInfo};
use f2fuse_layout::*;

/// The compressed clusters of `inode` below its size, with their slots.
fn compressed_clusters(ctx: &Ctx, inode: &InodeInfo) -> Result<Vec<(u64, Vec<u32>)>> {
    let cs = inode
        .compression
        .as_ref()
        .expect("a compressed file")
        .cluster_blocks();
    let mut mapper = BlockMapper::new(ctx.nm, inode);
    let mut out = Vec::new();
    for cluster in 0..inode.size_blocks().div_ceil(cs) {
        let (slots, shape) = map_cluster(&mut mapper, inode, cluster)?;
        if matches!(shape, ClusterShape::Compressed { .. }) {
            out.push((cluster, slots));
        }
    }
    Ok(out)
}

/// Sets every slot of `cluster` that holds `from` to `to`.
fn replace_slots(
    ctx: &Ctx,
    inode: &InodeInfo,
    cluster: u64,
    slots: &[u32],
    from: u32,
    to: u32,
) -> Result<()> {
    let first = cluster * slots.len() as u64;
    for (i, _) in slots.iter().enumerate().filter(|&(_, &a)| a == from) {
        // A compressed cluster's slots all live in one existing node.
        let slot = addr_slot(ctx, inode, first + i as u64, false)?.ok_or_else(|| {
            Error::from(Corrupt::new(
                "compressed cluster",
                format!("inode {} cluster {cluster}: its node vanished", inode.ino),
            ))
        })?;
        set_addr(ctx, inode, &slot, to)?;
    }
    Ok(())
}

/// F2FS_IOC_RELEASE_COMPRESS_BLOCKS on compressed file `ino`: every
/// compressed cluster's NEW_ADDR slots become NULL_ADDR and its
/// COMPRESS_ADDR stops being counted, so i_blocks, the file system's
/// valid blocks and `i_compr_blocks` drop by the blocks compression saved;
/// the file is marked released (read-only until reserved or emptied).
/// Returns the blocks released.
pub fn release_blocks(ctx: &Ctx, ino: u32) -> Result<u64> {
    let inode = ctx.inode(ino)?;
    let mut released = 0;
    for (cluster, slots) in compressed_clusters(ctx, &inode)? {
        replace_slots(ctx, &inode, cluster, &slots, NEW_ADDR, NULL_ADDR)?;
        released += slots
            .iter()
            .filter(|&&a| a == NEW_ADDR || a == COMPRESS_ADDR)
            .count() as u64;
    }
    ctx.space.lock().release_blocks(released)?;
    let t = ctx.clock.now();
    ctx.try_update_inode(ino, |raw| {
        raw.i_blocks.set(blocks_less(raw, released)?);
        add_compr_blocks(raw, -(released as i64));
        raw.i_inline |= inline_flag::COMPRESS_RELEASED;
        set_ctime(raw, t);
        Ok(())
    })?;
    Ok(released)
}

/// F2FS_IOC_RESERVE_COMPRESS_BLOCKS on released file `ino`: charges the
/// file system again for every compressed cluster's COMPRESS_ADDR and
/// empty slots (ENOSPC, with nothing changed, when they do not fit), turns
/// the empty slots into NEW_ADDR and clears the released mark. Returns
/// the blocks reserved.
pub fn reserve_blocks(ctx: &Ctx, ino: u32) -> Result<u64> {
    let inode = ctx.inode(ino)?;
    let clusters = compressed_clusters(ctx, &inode)?;
    let mut charged = 0;
    let mut saved = 0;
    for (_, slots) in &clusters {
        let empty = slots.iter().filter(|&&a| a == NULL_ADDR).count() as u64;
        let payload = slots.iter().filter(|&&a| super::is_block(a)).count() as u64;
        // The COMPRESS_ADDR of a released file is not counted either.
        charged += empty + 1;
        saved += slots.len() as u64 - payload;
    }
    ctx.quota_admits(&inode, charged)?;
    ctx.space.lock().reserve_blocks(charged)?;
    for (cluster, slots) in &clusters {
        replace_slots(ctx, &inode, *cluster, slots, NULL_ADDR, NEW_ADDR)?;
    }
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| {
        raw.i_blocks.set(raw.i_blocks.get() + charged);
        add_compr_blocks(raw, saved as i64);
        raw.i_inline &= !inline_flag::COMPRESS_RELEASED;
        set_ctime(raw, t);
    })?;
    Ok(charged)
}

/// Stores cluster `cluster` of compressed file `ino` again: compressed
/// (where that saves a block) when `compress`, else raw, as
/// F2FS_IOC_COMPRESS_FILE and DECOMPRESS_FILE rewrite each cluster.
/// Clusters already as asked, holes and the cluster at EOF (never
/// compressed) are left alone instead of being copied for nothing.
pub fn rewrite_cluster(ctx: &Ctx, ino: u32, cluster: u64, compress: bool) -> Result<()> {
    let inode = ctx.inode(ino)?;
    let cs = inode
        .compression
        .as_ref()
        .expect("a compressed file")
        .cluster_blocks();
    let (slots, shape) = map_cluster(&mut BlockMapper::new(ctx.nm, &inode), &inode, cluster)?;
    let rewrite = match shape {
        ClusterShape::Compressed { .. } => !compress,
        ClusterShape::Raw => {
            compress
                && (cluster + 1) * cs <= inode.size_blocks()
                && slots.iter().any(|&a| a != NULL_ADDR)
        }
    };
    if rewrite {
        let data = cluster_contents(ctx, ino, cluster, cs * F2FS_BLKSIZE as u64)?;
        store_cluster(ctx, &inode, cluster, &data, inode.size, compress)?;
    }
    Ok(())
}
