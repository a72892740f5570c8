//! The node address table and node blocks: translating a nid to the block
//! holding it (the journal overrides the NAT blocks), and reading a node
//! block only after checking its footer names the node we asked for.

use crate::checkpoint::CheckpointState;
use crate::device::{Block, Device};
use crate::error::Result;
use f2fuse_layout::node::footer_of;
use f2fuse_layout::segment::{nat_block_addr, NatBlock, NatEntry};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use zerocopy::FromBytes;

/// What a caller knows about the node it is about to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeExpect {
    /// The inode that must own the node.
    pub ino: Option<u32>,
    /// The node offset its footer must carry.
    pub ofs: Option<u32>,
}

pub struct NodeManager {
    dev: Arc<Device>,
    nat_blkaddr: u32,
    main_start: u64,
    main_end: u64,
    max_nid: u32,
    nat_copy_bits: Vec<u8>,
    journal: HashMap<u32, NatEntry>,
    /// NAT blocks read so far, by block index.
    nat_blocks: RwLock<HashMap<u32, Arc<Vec<NatEntry>>>>,
}

impl NodeManager {
    pub fn new(dev: Arc<Device>, sb: &SuperBlock, cp: &CheckpointState) -> Result<NodeManager> {
        let max_nid = sb.max_nid();
        let mut journal = HashMap::new();
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
        Ok(NodeManager {
            dev,
            nat_blkaddr: sb.nat_blkaddr.get(),
            main_start: sb.main_blkaddr.get() as u64,
            main_end: sb.main_end_blkaddr(),
            max_nid,
            nat_copy_bits: cp.nat_bitmap.clone(),
            journal,
            nat_blocks: RwLock::new(HashMap::new()),
        })
    }

    pub fn max_nid(&self) -> u32 {
        self.max_nid
    }

    pub fn is_main_blkaddr(&self, blkaddr: u32) -> bool {
        (self.main_start..self.main_end).contains(&(blkaddr as u64))
    }

    fn nat_block(&self, index: u32) -> Result<Arc<Vec<NatEntry>>> {
        if let Some(block) = self.nat_blocks.read().get(&index) {
            return Ok(block.clone());
        }
        let copy = bitmap::test_bit_msb(&self.nat_copy_bits, index as usize) as u8;
        let raw = self
            .dev
            .read_block(nat_block_addr(self.nat_blkaddr, index, copy))?;
        let block = NatBlock::read_from_bytes(&raw).expect("block size");
        let entries = Arc::new(block.entries.to_vec());
        self.nat_blocks.write().insert(index, entries.clone());
        Ok(entries)
    }

    /// The NAT entry of `nid` as of the loaded checkpoint.
    pub fn nat_entry(&self, nid: u32) -> Result<NatEntry> {
        if nid >= self.max_nid {
            return Err(Corrupt::new(
                "node reference",
                format!("nid {nid} beyond the NAT capacity {}", self.max_nid),
            )
            .into());
        }
        if let Some(entry) = self.journal.get(&nid) {
            return Ok(*entry);
        }
        let block = self.nat_block(nid / NAT_ENTRY_PER_BLOCK)?;
        Ok(block[(nid % NAT_ENTRY_PER_BLOCK) as usize])
    }

    /// Reads node `nid`, checking the NAT entry and the footer against `expect`.
    pub fn read_node(&self, nid: u32, expect: NodeExpect) -> Result<Block> {
        let ne = self.nat_entry(nid)?;
        let blkaddr = ne.block_addr.get();
        let fail = |detail: String| -> crate::error::Error {
            Corrupt::new("node", detail).at(format!("nid {nid}")).into()
        };
        if nid < F2FS_ROOT_INO {
            return Err(fail("reserved nid referenced as a node".into()));
        }
        if blkaddr == NULL_ADDR {
            return Err(fail("referenced but free in the NAT".into()));
        }
        if !self.is_main_blkaddr(blkaddr) {
            return Err(fail(format!(
                "NAT block_addr {blkaddr:#x} outside the main area [{}, {})",
                self.main_start, self.main_end
            )));
        }
        if let Some(ino) = expect.ino {
            if ne.ino.get() != ino {
                return Err(fail(format!(
                    "NAT says owner ino {}, expected {ino}",
                    ne.ino.get()
                )));
            }
        }
        let block = self.dev.read_block(blkaddr as u64)?;
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
}
