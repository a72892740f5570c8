//! POSIX ACLs in the form user space passes them in the
//! `system.posix_acl_access` and `system.posix_acl_default` xattrs.

/// One entry (`posix_acl_xattr_entry`): tag, permissions, id, little-endian.
pub fn acl_entry(tag: u16, perm: u16, id: u32) -> Vec<u8> {
    [
        &tag.to_le_bytes()[..],
        &perm.to_le_bytes(),
        &id.to_le_bytes(),
    ]
    .concat()
}

/// A whole ACL: the version 2 header, then (tag, permissions, id) entries.
pub fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&acl_entry(tag, perm, id));
    }
    out
}
