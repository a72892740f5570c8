//! Roll-forward recovery (the kernel's recovery.c): fsyncs since the last
//! checkpoint left a chain of node blocks in the warm node log, each footer
//! stamped with the checkpoint's `cp_ver` and pointing (`next_blkaddr`) at
//! the block the log wrote next. After a crash the chain is read from the
//! log's position in the checkpoint and replayed: inodes (created when
//! DENT-marked and not in the checkpoint), their directory entries, and
//! their block addresses (NAT, SIT and SSA follow). The caller evicts the
//! inodes whose last link a replayed entry replaced, and checkpoints.
//!
//! Like the kernel, a file's chain nodes are replayed up to its last
//! FSYNC-marked one; nodes after it belong to an fsync that did not finish.

use crate::checkpoint::CheckpointState;
use crate::data::{addr_slot, get_addr, set_addr};
use crate::device::{Block, Device, IoKind};
use crate::dir;
use crate::error::{Error, Result};
use crate::inode::{decode_inode, Ctx, FileKind, InodeInfo};
use crate::node::NodeExpect;
use crate::xattr::ensure_xattr_node;
use f2fuse_layout::compress::InodeCompression;
use f2fuse_layout::node::{
    footer_of, inode_of, inode_of_mut, is_dnode_offset, node_slot, set_node_slot,
    start_bidx_of_node, I_ADDR_OFFSET,
};
use f2fuse_layout::segment::Summary;
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use std::collections::HashMap;

/// One node block of the chain and where it was read.
pub struct ChainBlock {
    pub blkaddr: u32,
    pub block: Block,
}

/// Whether a node footer's `cp_ver` belongs to checkpoint `cp` (the kernel's
/// is_recoverable_dnode): with CRC_RECOVERY the checkpoint's CRC is in the
/// high half; NOCRC_RECOVERY (set by fsck.f2fs) compares the version only.
pub fn is_recoverable(cp: &CheckpointState, footer_cp_ver: u64) -> bool {
    if cp.cp.has_flag(cp_flag::NOCRC_RECOVERY) {
        return footer_cp_ver as u32 == cp.version() as u32;
    }
    footer_cp_ver == cp.node_cp_ver()
}

/// Walks the chain from the warm node log's next block in the checkpoint:
/// blocks carrying the checkpoint's `cp_ver`, following `next_blkaddr`,
/// each handed to `visit` in order (nothing is kept: a hostile chain can be
/// as long as the free space). It ends at a block of another checkpoint or
/// an address outside the main area. A loop is corruption, found as the
/// kernel finds it (a second pointer at twice the pace meets the first)
/// and bounded as fsck.f2fs bounds it (no chain is longer than the free
/// blocks). Returns the number of blocks visited.
pub fn walk_chain(
    dev: &Device,
    sb: &SuperBlock,
    cp: &CheckpointState,
    mut visit: impl FnMut(&ChainBlock) -> Result<()>,
) -> Result<u64> {
    let main_blocks = sb.segment_count_main.get() as u64 * BLOCKS_PER_SEG as u64;
    let free_blocks = main_blocks.saturating_sub(cp.cp.valid_block_count.get());
    let (segno, blkoff) = cp.cp.curseg(CursegType::WarmNode);
    let start = sb.main_blkaddr.get() as u64 + segno as u64 * BLOCKS_PER_SEG as u64 + blkoff as u64;
    let mut blkaddr = start;
    // The fast pointer, while it has not run off the chain's end.
    let mut fast = Some(start);
    let mut visited = 0u64;
    while let Some(block) = chain_block(dev, sb, cp, blkaddr)? {
        let next = footer_of(&block).next_blkaddr.get() as u64;
        visit(&ChainBlock {
            blkaddr: blkaddr as u32,
            block,
        })?;
        visited += 1;
        for _ in 0..2 {
            fast = match fast {
                Some(at) => {
                    chain_block(dev, sb, cp, at)?.map(|b| footer_of(&b).next_blkaddr.get() as u64)
                }
                None => None,
            };
        }
        if fast == Some(next) || visited > free_blocks {
            return Err(Corrupt::new(
                "fsync chain",
                format!(
                    "node chain loops (block {blkaddr} names {next} next, after {visited} blocks)"
                ),
            )
            .into());
        }
        blkaddr = next;
    }
    Ok(visited)
}

/// The chain block at `blkaddr`, or None where the chain ends.
fn chain_block(
    dev: &Device,
    sb: &SuperBlock,
    cp: &CheckpointState,
    blkaddr: u64,
) -> Result<Option<Block>> {
    if !(sb.main_blkaddr.get() as u64..sb.main_end_blkaddr()).contains(&blkaddr) {
        return Ok(None);
    }
    let block = dev.read_block(IoKind::Node, blkaddr)?;
    Ok(is_recoverable(cp, footer_of(&block).cp_ver.get()).then_some(block))
}

/// Whether the chain holds a finished fsync to replay.
pub fn has_fsync_data(dev: &Device, sb: &SuperBlock, cp: &CheckpointState) -> Result<bool> {
    let mut found = false;
    walk_chain(dev, sb, cp, |c| {
        found |= footer_of(&c.block).is_fsync();
        Ok(())
    })?;
    Ok(found)
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Blocks in the chain (replayed or not).
    pub chain_blocks: u64,
    /// Files whose fsynced state was replayed.
    pub files: usize,
    /// Inodes left without a link (a recovered entry replaced theirs): the
    /// caller evicts them.
    pub unlinked: Vec<u32>,
}

/// A file to replay: its last FSYNC-marked node and last DENT-marked inode.
struct FsyncFile {
    last: u32,
    last_dentry: Option<u32>,
    /// The compression state of the file's last fsynced inode block in the
    /// chain (None: the chain has none of its inode blocks). Its direct
    /// nodes are laid out for that state, which may differ from the
    /// checkpoint's: compressed files round their address counts down to
    /// whole clusters.
    layout: Option<Option<InodeCompression>>,
}

fn chain_error(blkaddr: u32, detail: impl Into<String>) -> Error {
    Corrupt::new("fsync chain", detail.into())
        .at(format!("node blkaddr {blkaddr}"))
        .into()
}

/// Replays the chain of checkpoint `cp` (see the module documentation).
pub fn recover(ctx: &Ctx, sb: &SuperBlock, cp: &CheckpointState) -> Result<Recovered> {
    let max_nid = ctx.nm.max_nid();
    // Step 1 (find_fsync_dnodes): the files to replay; inodes created since
    // the checkpoint are made from their DENT-marked inode block first, so
    // no nid allocated during step 2 can take their numbers.
    let mut files: HashMap<u32, FsyncFile> = HashMap::new();
    // Each file's latest inode block in the chain, decoded at its fsyncs
    // (step 2 replays those blocks too).
    let mut inode_blocks: HashMap<u32, ChainBlock> = HashMap::new();
    let chain_blocks = walk_chain(ctx.dev, sb, cp, |c| {
        let footer = footer_of(&c.block);
        let (nid, ino) = (footer.nid.get(), footer.ino.get());
        if !(F2FS_ROOT_INO..max_nid).contains(&nid) || !(F2FS_ROOT_INO..max_nid).contains(&ino) {
            return Err(chain_error(
                c.blkaddr,
                format!("footer names nid {nid} ino {ino}"),
            ));
        }
        if footer.ofs() == 0 && nid != ino {
            return Err(chain_error(
                c.blkaddr,
                format!("inode block of nid {nid} names ino {ino}"),
            ));
        }
        if footer.ofs() == 0 {
            inode_blocks.insert(
                ino,
                ChainBlock {
                    blkaddr: c.blkaddr,
                    block: c.block.clone(),
                },
            );
        }
        if !footer.is_fsync() {
            return Ok(());
        }
        let is_dent_inode = footer.ofs() == 0 && footer.is_dent();
        if !files.contains_key(&ino) {
            if is_dent_inode {
                create_inode_from(ctx, c)?;
            }
            // An inode neither checkpointed nor created here is gone: skip it.
            if ctx.nm.nat_entry(ino)?.block_addr.get() == NULL_ADDR {
                return Ok(());
            }
        }
        let file = files.entry(ino).or_insert(FsyncFile {
            last: c.blkaddr,
            last_dentry: None,
            layout: None,
        });
        file.last = c.blkaddr;
        file.layout = match inode_blocks.get(&ino) {
            Some(block) => Some(chain_inode(ctx, block)?.compression),
            None => None,
        };
        if is_dent_inode {
            file.last_dentry = Some(c.blkaddr);
        }
        Ok(())
    })?;
    let mut out = Recovered {
        chain_blocks,
        files: files.len(),
        ..Recovered::default()
    };
    // Step 2 (recover_data): every chain node of those files up to their
    // last fsync. Nothing was written meanwhile: the chain reads the same.
    // Directory entries come last, once every chain block is claimed and
    // the data logs have moved on: adding a name may write a directory
    // block, and a log's checkpointed position may hold fsync'd data not
    // claimed yet (the kernel's recovery adds the name to a cached page and
    // allocates its block only at the closing checkpoint).
    let mut dentries: Vec<ChainBlock> = Vec::new();
    walk_chain(ctx.dev, sb, cp, |c| {
        let footer = footer_of(&c.block);
        let ino = footer.ino.get();
        let Some(file) = files.get(&ino) else {
            return Ok(());
        };
        let (last, last_dentry, layout) = (file.last, file.last_dentry, file.layout);
        let ofs = footer.ofs();
        let mut inline = false;
        if ofs == 0 {
            inline = recover_inode(ctx, c)?;
        }
        if last_dentry == Some(c.blkaddr) {
            dentries.push(ChainBlock {
                blkaddr: c.blkaddr,
                block: c.block.clone(),
            });
        }
        if ofs == XATTR_NODE_OFFSET {
            recover_xattr_node(ctx, ino, c)?;
        } else if !inline {
            recover_addresses(ctx, ino, c, layout)?;
        }
        if last == c.blkaddr {
            files.remove(&ino);
        }
        Ok(())
    })?;
    if out.files > 0 {
        ctx.space.lock().reopen_data_logs()?;
    }
    for c in &dentries {
        recover_dentry(ctx, c, &mut out.unlinked)?;
    }
    Ok(out)
}

/// The chain's inode block, validated as any inode read from disk.
fn chain_inode(ctx: &Ctx, c: &ChainBlock) -> Result<InodeInfo> {
    let ino = footer_of(&c.block).ino.get();
    decode_inode(ino, c.block.clone(), ctx.check)
        .map_err(|e| e.at(format!("fsync chain node blkaddr {}", c.blkaddr)))
}

/// Byte offset of `i_ext`: the inode fields before it are taken over whole
/// when recovery creates an inode (f2fs_recover_inode_page).
const I_EXT_OFFSET: usize = 0x15C;

/// Creates an inode that is not in the checkpoint from its fsynced block:
/// no size, blocks or links yet (replay adds them), no xattr node.
fn create_inode_from(ctx: &Ctx, c: &ChainBlock) -> Result<()> {
    let src = chain_inode(ctx, c)?;
    let ino = src.ino;
    if ctx.nm.nat_entry(ino)?.block_addr.get() != NULL_ADDR {
        return Err(chain_error(
            c.blkaddr,
            format!("DENT-marked inode {ino} is already in use"),
        ));
    }
    let mut block = crate::device::zero_block();
    block[..I_EXT_OFFSET].copy_from_slice(&c.block[..I_EXT_OFFSET]);
    let extra_bytes = 4 * src.layout.extra_words;
    block[I_ADDR_OFFSET..I_ADDR_OFFSET + extra_bytes]
        .copy_from_slice(&c.block[I_ADDR_OFFSET..I_ADDR_OFFSET + extra_bytes]);
    {
        let raw = inode_of_mut(&mut block);
        raw.i_size.set(0);
        raw.i_blocks.set(1);
        raw.i_links.set(1);
        raw.i_xattr_nid.set(0);
        raw.i_inline = src.inline & (inline_flag::INLINE_XATTR | inline_flag::EXTRA_ATTR);
    }
    ctx.new_node(Some(ino), None, 0, footer_of(&c.block).is_cold())?;
    ctx.nm.update_node(ino, inode_expect(ino), |b| {
        b[..NODE_PAYLOAD_SIZE].copy_from_slice(&block[..NODE_PAYLOAD_SIZE])
    })?;
    Ok(())
}

fn inode_expect(ino: u32) -> NodeExpect {
    NodeExpect {
        ino: Some(ino),
        ofs: Some(0),
    }
}

/// Takes over the fsynced inode's attributes, inline xattrs and inline data
/// (recover_inode, recover_inline_xattr, recover_inline_data). Returns
/// whether the file now keeps its data inline (no addresses to replay).
fn recover_inode(ctx: &Ctx, c: &ChainBlock) -> Result<bool> {
    let src = chain_inode(ctx, c)?;
    let cur = ctx.inode(src.ino)?;
    if src.mode & mode::S_IFMT != cur.mode & mode::S_IFMT || src.layout != cur.layout {
        return Err(chain_error(
            c.blkaddr,
            format!("inode {} changes its type or layout", src.ino),
        ));
    }
    let src_inline = src.inline & inline_flag::INLINE_DATA != 0;
    let cur_inline = cur.inline & inline_flag::INLINE_DATA != 0;
    if src_inline && !cur_inline {
        crate::data::truncate_blocks(ctx, src.ino, 0)?;
    }
    let layout = src.layout;
    let from = inode_of(&c.block);
    ctx.nm
        .update_node(src.ino, inode_expect(src.ino), |block| {
            if layout.inline_xattr_words > 0 && src.inline & inline_flag::INLINE_XATTR != 0 {
                let range = layout.inline_xattr_range();
                block[range.clone()].copy_from_slice(&c.block[range]);
            }
            let data = layout.inline_data_range();
            if src_inline {
                block[data.clone()].copy_from_slice(&c.block[data]);
            } else if cur_inline {
                block[data].fill(0);
            }
            if layout.extra_words >= 2 {
                let projid = I_ADDR_OFFSET + 4..I_ADDR_OFFSET + 8;
                block[projid.clone()].copy_from_slice(&c.block[projid]);
            }
            let raw = inode_of_mut(block);
            raw.i_mode = from.i_mode;
            raw.i_uid = from.i_uid;
            raw.i_gid = from.i_gid;
            raw.i_size = from.i_size;
            raw.i_atime = from.i_atime;
            raw.i_ctime = from.i_ctime;
            raw.i_mtime = from.i_mtime;
            raw.i_atime_nsec = from.i_atime_nsec;
            raw.i_ctime_nsec = from.i_ctime_nsec;
            raw.i_mtime_nsec = from.i_mtime_nsec;
            raw.i_advise = from.i_advise;
            raw.i_flags = from.i_flags;
            // Regular files keep i_gc_failures in the low half of i_current_depth.
            raw.i_current_depth = from.i_current_depth;
            let taken = inline_flag::PIN_FILE | inline_flag::DATA_EXIST | inline_flag::INLINE_DATA;
            raw.i_inline = raw.i_inline & !taken | from.i_inline & taken;
            raw.i_ext = Default::default();
        })?;
    Ok(src_inline)
}

/// Makes the inode's fsynced name (`i_pino`, `i_name`) point at it; an entry
/// of that name for another inode is removed first (recover_dentry).
fn recover_dentry(ctx: &Ctx, c: &ChainBlock, unlinked: &mut Vec<u32>) -> Result<()> {
    let raw = inode_of(&c.block);
    let ino = footer_of(&c.block).ino.get();
    let pino = raw.i_pino.get();
    let len = raw.i_namelen.get() as usize;
    let name = raw.i_name.get(..len).unwrap_or_default();
    if name.is_empty()
        || name == b"."
        || name == b".."
        || name.iter().any(|&b| b == b'/' || b == 0)
        || !(F2FS_ROOT_INO..ctx.nm.max_nid()).contains(&pino)
    {
        return Err(chain_error(
            c.blkaddr,
            format!("inode {ino} names parent {pino} and a name of {len} bytes"),
        ));
    }
    let ft = file_type_of_mode(raw.i_mode.get())
        .ok_or_else(|| chain_error(c.blkaddr, format!("inode {ino} has no file type")))?;
    // At most one other entry can hold the name: two rounds suffice.
    for _ in 0..2 {
        let parent = ctx.inode(pino)?;
        if parent.kind != FileKind::Directory {
            return Err(chain_error(
                c.blkaddr,
                format!("parent {pino} of inode {ino} is not a directory"),
            ));
        }
        match dir::find_entry(ctx, &parent, name)? {
            Some(found) if found.info.ino == ino => return Ok(()),
            Some(found) => {
                let other = ctx.inode(found.info.ino)?;
                if other.kind == FileKind::Directory {
                    return Err(chain_error(
                        c.blkaddr,
                        format!("the name of inode {ino} is held by directory {}", other.ino),
                    ));
                }
                dir::remove_link(ctx, pino, &found)?;
                let links = ctx.update_inode(other.ino, |raw| {
                    let links = raw.i_links.get().saturating_sub(1);
                    raw.i_links.set(links);
                    links
                })?;
                if links == 0 {
                    unlinked.push(other.ino);
                }
            }
            None => return dir::add_link(ctx, pino, name, ino, ft),
        }
    }
    Err(chain_error(
        c.blkaddr,
        format!("name of inode {ino} stays taken"),
    ))
}

/// Takes over an fsynced xattr node's contents (f2fs_recover_xattr_data).
fn recover_xattr_node(ctx: &Ctx, ino: u32, c: &ChainBlock) -> Result<()> {
    let inode = ctx.inode(ino)?;
    let xnid = ensure_xattr_node(ctx, &inode)?;
    let expect = NodeExpect {
        ino: Some(ino),
        ofs: Some(XATTR_NODE_OFFSET),
    };
    ctx.nm.update_node(xnid, expect, |b| {
        b[..NODE_PAYLOAD_SIZE].copy_from_slice(&c.block[..NODE_PAYLOAD_SIZE])
    })
}

/// Makes the file's block addresses those of the fsynced direct node (or
/// inode): blocks it dropped are freed, blocks it gained are claimed in the
/// SIT and SSA (do_recover_data).
fn recover_addresses(
    ctx: &Ctx,
    ino: u32,
    c: &ChainBlock,
    layout: Option<Option<InodeCompression>>,
) -> Result<()> {
    let mut inode = ctx.inode(ino)?;
    // Slots are found with the chain's layout: a direct node written for a
    // plain file may be replayed before the inode block that ends the
    // checkpoint's compression (the kernel uses the inode as it is then,
    // and misplaces the blocks of a second direct node).
    if let Some(compression) = layout {
        inode.compression = compression;
    }
    let ofs = footer_of(&c.block).ofs();
    if !is_dnode_offset(ofs) {
        return Err(chain_error(
            c.blkaddr,
            format!("node offset {ofs} is not a direct node"),
        ));
    }
    let addrs: Vec<u32> = if ofs == 0 {
        let layout = inode.layout;
        (0..inode.addrs_per_inode() as usize)
            .map(|i| inode_of(&c.block).data_addr(&layout, i))
            .collect()
    } else {
        (0..ADDRS_PER_BLOCK as usize)
            .map(|i| node_slot(&c.block, i))
            .collect()
    };
    let start = start_bidx_of_node(ofs, inode.addrs());
    let keep_size = inode.advise & fadvise::KEEP_SIZE != 0;
    // A cluster marker the checkpoint holds is counted unless the file was
    // released then (recover_inode keeps the checkpoint's i_inline bit).
    let released = inode.inline & inline_flag::COMPRESS_RELEASED != 0;
    let mut size = inode.size;
    let mut blocks_delta: i64 = 0;
    for (i, &dest) in addrs.iter().enumerate() {
        if dest == COMPRESS_ADDR {
            // Neither the kernel nor we write a chain for a compressed file
            // (its fsync checkpoints); its do_recover_data would skip the slot.
            return Err(chain_error(
                c.blkaddr,
                "COMPRESS_ADDR in an fsynced node: compressed clusters are not rolled forward",
            ));
        }
        if dest != NULL_ADDR && dest != NEW_ADDR && !ctx.nm.is_main_blkaddr(dest) {
            return Err(chain_error(
                c.blkaddr,
                format!("data address {dest:#x} outside the main area"),
            ));
        }
        let index = start + i as u64;
        let Some(slot) = addr_slot(ctx, &inode, index, dest != NULL_ADDR)? else {
            continue;
        };
        let src = get_addr(ctx, &inode, &slot)?;
        // A file compressed at the checkpoint may be plain in the chain
        // (emptied, `chattr -c`, written): its cluster markers own no block
        // (the kernel frees them with f2fs_truncate_data_blocks_range).
        let src_real = !matches!(src, NULL_ADDR | NEW_ADDR | COMPRESS_ADDR);
        let src_counted = match src {
            NULL_ADDR => false,
            COMPRESS_ADDR => !released,
            _ => true,
        };
        if src_real && !(ctx.nm.is_main_blkaddr(src) && ctx.space.lock().is_valid(src)) {
            return Err(Corrupt::new(
                "node",
                format!("inode {ino} block {index} at {src:#x}, not a valid main-area block"),
            )
            .into());
        }
        if src == dest {
            continue;
        }
        {
            let mut space = ctx.space.lock();
            if src_real {
                space.invalidate(src)?;
            }
            match (src_counted, dest) {
                (false, NULL_ADDR) => {}
                (false, _) => {
                    space.reserve_blocks(1)?;
                    blocks_delta += 1;
                }
                (true, NULL_ADDR) => {
                    space.release_blocks(1)?;
                    blocks_delta -= 1;
                }
                (true, _) => {}
            }
        }
        if dest != NULL_ADDR && dest != NEW_ADDR {
            release_previous_slot(ctx, dest)?;
            let version = ctx.nm.nat_entry(slot.nid)?.version;
            ctx.space
                .lock()
                .claim_data_block(dest, Summary::new(slot.nid, version, slot.ofs_in_node))?;
        }
        // The slot found for the chain node's index is in the same file's
        // node tree: replaying never writes into another inode's node.
        let owner = ctx.nm.nat_entry(slot.nid)?.ino.get();
        crate::invariant::ensure_invariant!(
            ctx.dev.health(),
            owner == ino,
            "recovering inode {ino} block {index} into node {}, owned by inode {owner}",
            slot.nid
        );
        set_addr(ctx, &inode, &slot, dest)?;
        if dest != NULL_ADDR && !keep_size && size <= index * F2FS_BLKSIZE as u64 {
            size = (index + 1) * F2FS_BLKSIZE as u64;
        }
    }
    ctx.update_inode(ino, |raw| {
        raw.i_blocks
            .set(raw.i_blocks.get().wrapping_add_signed(blocks_delta));
        raw.i_size.set(size);
        raw.i_ext = Default::default();
    })?;
    Ok(())
}

/// A block the chain gives a file may still be in use where the SSA says it
/// was (a file moved it between indices, e.g. by collapsing a range, and
/// the old slot was not replayed yet): that slot lets go of it first (the
/// kernel's check_index_in_prev_nodes). A summary naming another block is
/// left alone; claiming the block then reports the conflict.
fn release_previous_slot(ctx: &Ctx, blkaddr: u32) -> Result<()> {
    let owner = {
        let space = ctx.space.lock();
        if !space.is_valid(blkaddr) {
            return Ok(());
        }
        space.owner_of(blkaddr)?
    };
    let (nid, ofs_in_node) = (owner.nid.get(), owner.ofs_in_node.get() as usize);
    if !(F2FS_ROOT_INO..ctx.nm.max_nid()).contains(&nid) {
        return Ok(());
    }
    let node = ctx.nm.read_node(nid, NodeExpect::default())?;
    let footer = footer_of(&node);
    let (ino, ofs) = (footer.ino.get(), footer.ofs());
    let is_inode = ofs == 0;
    let holder = ctx.inode(ino)?;
    let slots = if is_inode {
        holder.addrs_per_inode() as usize
    } else {
        ADDRS_PER_BLOCK as usize
    };
    if ofs_in_node >= slots || !is_dnode_offset(ofs) || ofs == XATTR_NODE_OFFSET {
        return Ok(());
    }
    let layout = holder.layout;
    let held = if is_inode {
        inode_of(&node).data_addr(&layout, ofs_in_node)
    } else {
        node_slot(&node, ofs_in_node)
    };
    if held != blkaddr {
        return Ok(());
    }
    let expect = NodeExpect {
        ino: Some(ino),
        ofs: Some(ofs),
    };
    ctx.nm.update_node(nid, expect, |block| {
        if is_inode {
            inode_of_mut(block).set_data_addr(&layout, ofs_in_node, NULL_ADDR)
        } else {
            set_node_slot(block, ofs_in_node, NULL_ADDR)
        }
    })?;
    {
        let mut space = ctx.space.lock();
        space.invalidate(blkaddr)?;
        space.release_blocks(1)?;
    }
    ctx.update_inode(ino, |raw| {
        raw.i_blocks.set(raw.i_blocks.get().saturating_sub(1));
        raw.i_ext = Default::default();
    })
}
