//! Extended attribute storage: a header, then packed entries, ending with a
//! zero word. The buffer is the inode's inline xattr area followed by the
//! xattr node's payload.

use crate::consts::{xattr_index, F2FS_XATTR_MAGIC};
use crate::ensure;
use crate::error::Result;

pub const XATTR_HEADER_SIZE: usize = 24;
const ENTRY_HEADER_SIZE: usize = 4;
/// Longest name suffix an entry can store.
pub const XATTR_NAME_MAX: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrEntry {
    pub index: u8,
    /// Name without its namespace prefix.
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

fn entry_size(name_len: usize, value_len: usize) -> usize {
    (ENTRY_HEADER_SIZE + name_len + value_len).div_ceil(4) * 4
}

impl XattrEntry {
    pub fn encoded_size(&self) -> usize {
        entry_size(self.name.len(), self.value.len())
    }

    /// Full name with its namespace prefix, as user space sees it.
    pub fn full_name(&self) -> Vec<u8> {
        let mut out = prefix_of(self.index).unwrap_or("").as_bytes().to_vec();
        out.extend_from_slice(&self.name);
        out
    }
}

/// Prefixes of the namespaces, longest first where one prefixes another.
const PREFIXES: &[(u8, &str)] = &[
    (xattr_index::POSIX_ACL_ACCESS, "system.posix_acl_access"),
    (xattr_index::POSIX_ACL_DEFAULT, "system.posix_acl_default"),
    (xattr_index::USER, "user."),
    (xattr_index::TRUSTED, "trusted."),
    (xattr_index::SECURITY, "security."),
];

fn prefix_of(index: u8) -> Option<&'static str> {
    PREFIXES.iter().find(|(i, _)| *i == index).map(|(_, p)| *p)
}

/// Splits a user-visible name into (index, stored suffix), or `None` for an unsupported namespace.
pub fn split_name(full: &[u8]) -> Option<(u8, &[u8])> {
    for (index, prefix) in PREFIXES {
        if let Some(rest) = full.strip_prefix(prefix.as_bytes()) {
            let acl =
                *index == xattr_index::POSIX_ACL_ACCESS || *index == xattr_index::POSIX_ACL_DEFAULT;
            if acl && !rest.is_empty() {
                continue;
            }
            if !acl && rest.is_empty() {
                return None;
            }
            return Some((*index, rest));
        }
    }
    None
}

/// True for entries a user can list (internal ones like encryption context are hidden).
pub fn is_visible(index: u8) -> bool {
    prefix_of(index).is_some()
}

pub fn is_acl_index(index: u8) -> bool {
    index == xattr_index::POSIX_ACL_ACCESS || index == xattr_index::POSIX_ACL_DEFAULT
}

/// POSIX ACL tags.
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;
/// Version words of the user-space (VFS) and on-disk ACL formats.
pub const POSIX_ACL_XATTR_VERSION: u32 = 2;
const F2FS_ACL_VERSION: u32 = 1;

/// Converts an ACL from the xattr format user space passes (version 2,
/// 8-byte entries) to F2FS's on-disk format (version 1; entries without an
/// id are 4 bytes). `None` if the input is malformed.
pub fn acl_to_disk(vfs: &[u8]) -> Option<Vec<u8>> {
    if vfs.len() < 4
        || !(vfs.len() - 4).is_multiple_of(8)
        || u32::from_le_bytes(vfs[0..4].try_into().ok()?) != POSIX_ACL_XATTR_VERSION
    {
        return None;
    }
    let mut out = F2FS_ACL_VERSION.to_le_bytes().to_vec();
    for e in vfs[4..].chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        match tag {
            ACL_USER | ACL_GROUP => out.extend_from_slice(e),
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => out.extend_from_slice(&e[..4]),
            _ => return None,
        }
    }
    Some(out)
}

/// Converts an on-disk F2FS ACL to the xattr format user space expects.
pub fn acl_from_disk(disk: &[u8]) -> Result<Vec<u8>> {
    ensure!(
        disk.len() >= 4 && u32::from_le_bytes(disk[0..4].try_into().unwrap()) == F2FS_ACL_VERSION,
        "ACL",
        "bad version header"
    );
    let mut out = POSIX_ACL_XATTR_VERSION.to_le_bytes().to_vec();
    let mut pos = 4;
    while pos < disk.len() {
        ensure!(
            pos + 4 <= disk.len(),
            "ACL",
            "entry at byte {pos} truncated"
        );
        let tag = u16::from_le_bytes([disk[pos], disk[pos + 1]]);
        match tag {
            ACL_USER | ACL_GROUP => {
                ensure!(
                    pos + 8 <= disk.len(),
                    "ACL",
                    "entry at byte {pos} truncated"
                );
                out.extend_from_slice(&disk[pos..pos + 8]);
                pos += 8;
            }
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => {
                out.extend_from_slice(&disk[pos..pos + 4]);
                out.extend_from_slice(&u32::MAX.to_le_bytes());
                pos += 4;
            }
            _ => ensure!(false, "ACL", "unknown tag {tag:#x} at byte {pos}"),
        }
    }
    Ok(out)
}

/// Decodes a logical xattr buffer. A buffer whose magic is not set holds no xattrs.
pub fn parse_xattrs(buf: &[u8]) -> Result<Vec<XattrEntry>> {
    if buf.len() < XATTR_HEADER_SIZE
        || u32::from_le_bytes(buf[0..4].try_into().unwrap()) != F2FS_XATTR_MAGIC
    {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut pos = XATTR_HEADER_SIZE;
    loop {
        if pos + 4 > buf.len() || buf[pos..pos + 4] == [0; 4] {
            break;
        }
        let index = buf[pos];
        let name_len = buf[pos + 1] as usize;
        let value_len = u16::from_le_bytes([buf[pos + 2], buf[pos + 3]]) as usize;
        let size = entry_size(name_len, value_len);
        ensure!(
            pos + size <= buf.len(),
            "xattr",
            "entry at byte {pos} ({size} bytes) runs past the {}-byte buffer",
            buf.len()
        );
        // POSIX ACL entries are the only ones stored without a name suffix.
        ensure!(
            name_len > 0 || is_acl_index(index),
            "xattr",
            "entry at byte {pos} has an empty name"
        );
        let name = buf[pos + 4..pos + 4 + name_len].to_vec();
        let value = buf[pos + 4 + name_len..pos + 4 + name_len + value_len].to_vec();
        out.push(XattrEntry { index, name, value });
        pos += size;
    }
    Ok(out)
}

/// Bytes `entries` need, header and end marker included.
pub fn encoded_len(entries: &[XattrEntry]) -> usize {
    XATTR_HEADER_SIZE + entries.iter().map(|e| e.encoded_size()).sum::<usize>() + 4
}

/// Encodes into a zeroed buffer of `capacity` bytes, or `None` if it does not fit.
/// Like the kernel, entries may fill the buffer exactly: the end marker is
/// then implied by the end of the buffer (readers stop there too).
pub fn encode_xattrs(entries: &[XattrEntry], capacity: usize) -> Option<Vec<u8>> {
    if encoded_len(entries) - 4 > capacity {
        return None;
    }
    let mut buf = vec![0u8; capacity];
    buf[0..4].copy_from_slice(&F2FS_XATTR_MAGIC.to_le_bytes());
    buf[4..8].copy_from_slice(&1u32.to_le_bytes());
    let mut pos = XATTR_HEADER_SIZE;
    for e in entries {
        debug_assert!(
            (!e.name.is_empty() || is_acl_index(e.index))
                && e.name.len() <= XATTR_NAME_MAX
                && e.value.len() <= u16::MAX as usize
        );
        buf[pos] = e.index;
        buf[pos + 1] = e.name.len() as u8;
        buf[pos + 2..pos + 4].copy_from_slice(&(e.value.len() as u16).to_le_bytes());
        buf[pos + 4..pos + 4 + e.name.len()].copy_from_slice(&e.name);
        let value_at = pos + 4 + e.name.len();
        buf[value_at..value_at + e.value.len()].copy_from_slice(&e.value);
        pos += e.encoded_size();
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_names() {
        let entries = vec![
            XattrEntry {
                index: xattr_index::USER,
                name: b"test".to_vec(),
                value: b"value".to_vec(),
            },
            XattrEntry {
                index: xattr_index::SECURITY,
                name: b"selinux".to_vec(),
                value: vec![1, 2, 3],
            },
        ];
        let buf = encode_xattrs(&entries, 200).unwrap();
        assert_eq!(parse_xattrs(&buf).unwrap(), entries);
        assert_eq!(entries[0].full_name(), b"user.test");
        assert_eq!(split_name(b"user.x"), Some((xattr_index::USER, &b"x"[..])));
        assert_eq!(
            split_name(b"system.posix_acl_access"),
            Some((xattr_index::POSIX_ACL_ACCESS, &b""[..]))
        );
        assert_eq!(split_name(b"user."), None);
        assert_eq!(split_name(b"bogus.x"), None);
        assert!(encode_xattrs(&entries, 40).is_none());
        // Exactly full (no room for the end marker) still encodes and parses.
        let exact = encoded_len(&entries) - 4;
        let buf = encode_xattrs(&entries, exact).unwrap();
        assert_eq!(parse_xattrs(&buf).unwrap(), entries);
        assert!(encode_xattrs(&entries, exact - 1).is_none());
        assert!(parse_xattrs(&[0u8; 64]).unwrap().is_empty());
    }

    #[test]
    fn acl_formats_round_trip() {
        // user::rw-, user:1000:r--, group::r--, mask::r--, other::---
        let mut vfs = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 6u16, u32::MAX),
            (2, 4, 1000),
            (4, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            vfs.extend_from_slice(&tag.to_le_bytes());
            vfs.extend_from_slice(&perm.to_le_bytes());
            vfs.extend_from_slice(&id.to_le_bytes());
        }
        let disk = acl_to_disk(&vfs).unwrap();
        assert_eq!(disk.len(), 4 + 4 + 8 + 4 + 4 + 4);
        assert_eq!(acl_from_disk(&disk).unwrap(), vfs);
        assert!(acl_to_disk(&vfs[..7]).is_none());
        let entries = vec![XattrEntry {
            index: xattr_index::POSIX_ACL_ACCESS,
            name: Vec::new(),
            value: disk,
        }];
        let buf = encode_xattrs(&entries, 200).unwrap();
        assert_eq!(parse_xattrs(&buf).unwrap(), entries);
    }

    #[test]
    fn truncated_entry_is_corrupt() {
        let entries = vec![XattrEntry {
            index: 1,
            name: b"n".to_vec(),
            value: vec![7; 40],
        }];
        let buf = encode_xattrs(&entries, 80).unwrap();
        assert!(parse_xattrs(&buf[..50]).is_err());
    }
}
