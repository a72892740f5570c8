//! Extended attributes: the inode's inline xattr area followed by the
//! payload of its xattr node, parsed as one buffer.

use crate::error::{Error, ErrorKind, Result};
use crate::inode::{blocks_less, set_ctime, Ctx, InodeInfo};
use crate::node::{NodeExpect, NodeManager};
use f2fuse_layout::xattr::{
    encode_xattrs, encoded_len, parse_xattrs, split_name, XattrEntry, XATTR_NAME_MAX,
};
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

/// XATTR_CREATE / XATTR_REPLACE semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetMode {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with EEXIST if the attribute exists.
    Create,
    /// Fail with ENODATA if it does not.
    Replace,
}

/// Largest value the kernel accepts (MAX_VALUE_LEN: the xattr space less the
/// header and one entry header).
pub fn max_value_len(inode: &InodeInfo) -> usize {
    4 * inode.layout.inline_xattr_words + NODE_PAYLOAD_SIZE
        - f2fuse_layout::xattr::XATTR_HEADER_SIZE
        - 4
}

/// Sets (`value` Some) or removes (`None`) the xattr `full_name`.
pub fn set_xattr(
    ctx: &Ctx,
    ino: u32,
    full_name: &[u8],
    value: Option<&[u8]>,
    mode: SetMode,
) -> Result<()> {
    let (index, suffix) = split_name(full_name).ok_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "xattr namespace of {:?}",
                String::from_utf8_lossy(full_name)
            ),
        )
    })?;
    // The VFS limit is on the full name, prefix included.
    if full_name.len() > XATTR_NAME_MAX {
        return Err(Error::new(ErrorKind::BufferTooSmall, "xattr name too long"));
    }
    // ACLs arrive in the user-space format and are stored in F2FS's own.
    let converted;
    let value = match value {
        Some(v) if f2fuse_layout::xattr::is_acl_index(index) => {
            converted = f2fuse_layout::xattr::acl_to_disk(v)
                .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "malformed POSIX ACL"))?;
            Some(converted.as_slice())
        }
        other => other,
    };
    let inode = ctx.inode(ino)?;
    if let Some(v) = value {
        if v.len() > max_value_len(&inode) {
            return Err(Error::new(
                ErrorKind::TooBig,
                format!("xattr value of {} bytes", v.len()),
            ));
        }
    }
    let mut entries = read_xattrs(ctx.nm, &inode)?;
    let pos = entries
        .iter()
        .position(|e| e.index == index && e.name == suffix);
    match (mode, pos, value) {
        (SetMode::Create, Some(_), _) => {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                String::from_utf8_lossy(full_name),
            ))
        }
        (SetMode::Replace, None, _) | (_, None, None) => {
            return Err(Error::new(
                ErrorKind::NoData,
                String::from_utf8_lossy(full_name),
            ))
        }
        _ => {}
    }
    match (pos, value) {
        (Some(p), Some(v)) => entries[p].value = v.to_vec(),
        (Some(p), None) => {
            entries.remove(p);
        }
        (None, Some(v)) => entries.push(XattrEntry {
            index,
            name: suffix.to_vec(),
            value: v.to_vec(),
        }),
        (None, None) => unreachable!("rejected above"),
    }
    store_xattrs(ctx, &inode, &entries)?;
    let t = ctx.clock.now();
    ctx.update_inode(ino, |raw| set_ctime(raw, t))
}

/// Writes the whole xattr set: inline area first, the xattr node for the rest.
fn store_xattrs(ctx: &Ctx, inode: &InodeInfo, entries: &[XattrEntry]) -> Result<()> {
    let inline_bytes = 4 * inode.layout.inline_xattr_words;
    let needed = encoded_len(entries);
    let use_node = needed > inline_bytes;
    let total = inline_bytes + if use_node { NODE_PAYLOAD_SIZE } else { 0 };
    // The kernel reports a full xattr space as E2BIG.
    let buf = encode_xattrs(entries, total)
        .ok_or_else(|| Error::new(ErrorKind::TooBig, "no room for more xattrs"))?;
    let ino = inode.ino;
    // Allocate the xattr node before changing anything: it may fail.
    let xnid = if use_node {
        ensure_xattr_node(ctx, inode)?
    } else {
        inode.xattr_nid
    };
    if inline_bytes > 0 {
        ctx.update_inode_block(ino, |block, layout| {
            block[layout.inline_xattr_range()].copy_from_slice(&buf[..inline_bytes])
        })?;
    }
    if use_node {
        let expect = NodeExpect {
            ino: Some(ino),
            ofs: Some(XATTR_NODE_OFFSET),
        };
        ctx.nm.update_node(xnid, expect, |block| {
            block[..NODE_PAYLOAD_SIZE].copy_from_slice(&buf[inline_bytes..])
        })?;
    } else if xnid != 0 {
        free_xattr_node(ctx, ino, xnid)?;
    }
    Ok(())
}

/// The xattr node of `inode`, allocated (empty) if it has none.
pub fn ensure_xattr_node(ctx: &Ctx, inode: &InodeInfo) -> Result<u32> {
    if inode.xattr_nid != 0 {
        return Ok(inode.xattr_nid);
    }
    ctx.quota_admits(inode, 1)?;
    let cold = inode.kind != crate::inode::FileKind::Directory;
    let xnid = ctx.new_node(None, Some(inode.ino), XATTR_NODE_OFFSET, cold)?;
    ctx.update_inode(inode.ino, |raw| {
        raw.i_xattr_nid.set(xnid);
        raw.i_blocks.set(raw.i_blocks.get() + 1);
    })?;
    Ok(xnid)
}

/// Frees the xattr node of inode `ino`.
pub fn free_xattr_node(ctx: &Ctx, ino: u32, xnid: u32) -> Result<()> {
    ctx.free_node(xnid, false)?;
    ctx.try_update_inode(ino, |raw| {
        raw.i_blocks.set(blocks_less(raw, 1)?);
        raw.i_xattr_nid.set(0);
        Ok(())
    })
}
