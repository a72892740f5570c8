//! Extended attributes: the inode's inline xattr area followed by the
//! payload of its xattr node, parsed as one buffer.

use crate::error::Result;
use crate::inode::InodeInfo;
use crate::node::{NodeExpect, NodeManager};
use f2fuse_layout::xattr::{parse_xattrs, XattrEntry};
use f2fuse_layout::{NODE_PAYLOAD_SIZE, XATTR_NODE_OFFSET};

/// The logical xattr buffer of an inode.
pub fn xattr_buffer(nm: &NodeManager, inode: &InodeInfo) -> Result<Vec<u8>> {
    let mut buf = inode.raw[inode.layout.inline_xattr_range()].to_vec();
    if inode.xattr_nid != 0 {
        let expect = NodeExpect {
            ino: Some(inode.ino),
            ofs: Some(XATTR_NODE_OFFSET),
        };
        let node = nm
            .read_node(inode.xattr_nid, expect)
            .map_err(|e| e.at(format!("xattr node of inode {}", inode.ino)))?;
        buf.extend_from_slice(&node[..NODE_PAYLOAD_SIZE]);
    }
    Ok(buf)
}

pub fn read_xattrs(nm: &NodeManager, inode: &InodeInfo) -> Result<Vec<XattrEntry>> {
    let buf = xattr_buffer(nm, inode)?;
    Ok(parse_xattrs(&buf).map_err(|e| e.at(format!("inode {}", inode.ino)))?)
}
