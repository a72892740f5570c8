//! File data: mapping file block indexes to block addresses through the
//! inode, direct, indirect and double-indirect nodes, and reading bytes.

use crate::device::{Block, Device};
use crate::error::{Error, Result};
use crate::inline;
use crate::inode::InodeInfo;
use crate::node::{NodeExpect, NodeManager};
use f2fuse_layout::node::{block_path, node_slot};
use f2fuse_layout::*;

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
        let inode = self.inode;
        let Some(path) = block_path(index, inode.addrs_per_inode()) else {
            return Ok(NULL_ADDR);
        };
        let raw_inode = inode.inode();
        let addr = if path.depth == 0 {
            raw_inode.data_addr(&inode.layout, path.slots[0])
        } else {
            let mut nid = raw_inode.i_nid[path.slots[0]].get();
            for level in 1..=path.depth {
                if nid == 0 {
                    return Ok(NULL_ADDR);
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
        self.check_addr(index, addr)
    }

    fn check_addr(&self, index: u64, addr: u32) -> Result<u32> {
        match addr {
            NULL_ADDR | NEW_ADDR => Ok(addr),
            COMPRESS_ADDR => Err(Error::unsupported(format!(
                "inode {}: compressed cluster at block {index}",
                self.inode.ino
            ))),
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

/// Refuses files whose bytes this engine cannot decode.
pub fn check_readable(inode: &InodeInfo) -> Result<()> {
    if inode.advise & fadvise::ENCRYPT != 0 {
        return Err(Error::unsupported(format!(
            "inode {}: encrypted file",
            inode.ino
        )));
    }
    if inode.flags & inode_flag::COMPR != 0 {
        return Err(Error::unsupported(format!(
            "inode {}: compressed file",
            inode.ino
        )));
    }
    Ok(())
}

/// Largest run of blocks read with one device request.
const MAX_RUN_BLOCKS: u64 = 256;

/// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past EOF).
pub fn read_data(
    dev: &Device,
    nm: &NodeManager,
    inode: &InodeInfo,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    check_readable(inode)?;
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
    let last = (offset + len as u64 - 1) / bs;
    let mut mapper = BlockMapper::new(nm, inode);
    let mut index = first;
    let mut scratch = Vec::new();
    while index <= last {
        let addr = mapper.map(index)?;
        // Extend the run while physical addresses stay consecutive (or holes stay holes).
        let mut run = 1u64;
        while index + run <= last && run < MAX_RUN_BLOCKS {
            let next = mapper.map(index + run)?;
            let contiguous = match addr {
                NULL_ADDR | NEW_ADDR => next == NULL_ADDR || next == NEW_ADDR,
                a => next != NULL_ADDR && next != NEW_ADDR && next as u64 == a as u64 + run,
            };
            if !contiguous {
                break;
            }
            run += 1;
        }
        let run_start = index * bs;
        let run_end = (index + run) * bs;
        let copy_from = offset.max(run_start);
        let copy_to = (offset + len as u64).min(run_end);
        let dst = &mut buf[(copy_from - offset) as usize..(copy_to - offset) as usize];
        if addr == NULL_ADDR || addr == NEW_ADDR {
            dst.fill(0);
        } else {
            scratch.resize((run * bs) as usize, 0);
            dev.read_blocks(addr as u64, &mut scratch)?;
            let src_start = (copy_from - run_start) as usize;
            dst.copy_from_slice(&scratch[src_start..src_start + dst.len()]);
        }
        index += run;
    }
    Ok(len)
}

/// Physical extents of a file: (file block, block address, length), holes omitted.
pub fn extents(nm: &NodeManager, inode: &InodeInfo) -> Result<Vec<(u64, u32, u64)>> {
    check_readable(inode)?;
    let mut out: Vec<(u64, u32, u64)> = Vec::new();
    if inline::has_inline_data(inode) {
        return Ok(out);
    }
    let mut mapper = BlockMapper::new(nm, inode);
    for index in 0..inode.size_blocks() {
        let addr = mapper.map(index)?;
        if addr == NULL_ADDR || addr == NEW_ADDR {
            continue;
        }
        match out.last_mut() {
            Some((fofs, blk, len))
                if *fofs + *len == index && *blk as u64 + *len == addr as u64 =>
            {
                *len += 1
            }
            _ => out.push((index, addr, 1)),
        }
    }
    Ok(out)
}
