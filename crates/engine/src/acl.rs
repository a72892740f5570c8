//! POSIX ACLs in the format user space and the VFS pass them (the xattr
//! format, version 2; `xattr` converts to F2FS's on-disk format), and the
//! rules that tie an access ACL to the file mode, as the kernel's
//! fs/posix_acl.c has them: an ACL is valid, what mode it implies
//! (posix_acl_equiv_mode), chmod rewriting it (posix_acl_chmod), and a new
//! inode inheriting its directory's default ACL (posix_acl_create).

use crate::error::{Error, ErrorKind, Result};
use crate::inode::InodeInfo;
use f2fuse_layout::xattr::{
    ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ, POSIX_ACL_XATTR_VERSION,
};

/// Which of an inode's two ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclKind {
    /// Permissions of the inode itself.
    Access,
    /// What new entries of a directory inherit.
    Default,
}

impl AclKind {
    /// The xattr name this ACL is stored under.
    pub fn xattr_name(self) -> &'static [u8] {
        match self {
            AclKind::Access => b"system.posix_acl_access",
            AclKind::Default => b"system.posix_acl_default",
        }
    }

    /// The kind whose xattr is called `name`, if it is an ACL.
    pub fn of_xattr(name: &[u8]) -> Option<AclKind> {
        [AclKind::Access, AclKind::Default]
            .into_iter()
            .find(|k| k.xattr_name() == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

const ENTRY_SIZE: usize = 8;
const RWX: u16 = 0o7;

/// A valid ACL: entries in the order the kernel requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

fn invalid(detail: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("POSIX ACL: {}", detail.into()),
    )
}

impl Acl {
    /// Decodes and validates (the kernel's posix_acl_valid): one owner,
    /// owning group and other entry, named users then named groups in
    /// ascending id order, a mask whenever there is a named entry, and
    /// permissions within rwx.
    pub fn parse(bytes: &[u8]) -> Result<Acl> {
        if bytes.len() < 4 || !(bytes.len() - 4).is_multiple_of(ENTRY_SIZE) {
            return Err(invalid(format!("{} bytes", bytes.len())));
        }
        let version = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if version != POSIX_ACL_XATTR_VERSION {
            return Err(invalid(format!("version {version}")));
        }
        let entries: Vec<Entry> = bytes[4..]
            .chunks_exact(ENTRY_SIZE)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        // Each tag's position in the required order.
        let rank = |tag: u16| match tag {
            ACL_USER_OBJ => Some(0),
            ACL_USER => Some(1),
            ACL_GROUP_OBJ => Some(2),
            ACL_GROUP => Some(3),
            ACL_MASK => Some(4),
            ACL_OTHER => Some(5),
            _ => None,
        };
        let mut previous: Option<(u8, u32)> = None;
        let mut count = [0usize; 6];
        for e in &entries {
            let r = rank(e.tag).ok_or_else(|| invalid(format!("tag {:#x}", e.tag)))?;
            if e.perm & !RWX != 0 {
                return Err(invalid(format!("permissions {:#o}", e.perm)));
            }
            let named = e.tag == ACL_USER || e.tag == ACL_GROUP;
            let in_order = match previous {
                None => true,
                Some((pr, pid)) => r > pr || (r == pr && named && e.id > pid),
            };
            if !in_order {
                return Err(invalid("entries out of order or repeated"));
            }
            previous = Some((r, e.id));
            count[r as usize] += 1;
        }
        let named = count[1] + count[3];
        if count[0] != 1 || count[2] != 1 || count[5] != 1 || (named > 0 && count[4] == 0) {
            return Err(invalid("owner, group or other entry missing, or a mask"));
        }
        Ok(Acl { entries })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = POSIX_ACL_XATTR_VERSION.to_le_bytes().to_vec();
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    fn find(&mut self, tag: u16) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.tag == tag)
    }

    /// Whether the permission bits say everything the ACL says (no named
    /// entries, no mask): then it need not be stored.
    fn is_minimal(&self) -> bool {
        self.entries
            .iter()
            .all(|e| matches!(e.tag, ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_OTHER))
    }

    /// `mode` with its rwx bits replaced by those the ACL implies (the
    /// group bits are the mask's if there is one), and whether the ACL is
    /// minimal (posix_acl_equiv_mode).
    pub fn equiv_mode(&self, mode: u16) -> (u16, bool) {
        let mut bits = 0;
        for e in &self.entries {
            match e.tag {
                ACL_USER_OBJ => bits |= e.perm << 6,
                ACL_GROUP_OBJ if !self.entries.iter().any(|m| m.tag == ACL_MASK) => {
                    bits |= e.perm << 3
                }
                ACL_MASK => bits |= e.perm << 3,
                ACL_OTHER => bits |= e.perm,
                _ => {}
            }
        }
        ((mode & !0o777) | bits, self.is_minimal())
    }

    /// chmod: the owner, other and mask (or owning group without a mask)
    /// entries take the new permission bits (posix_acl_chmod).
    pub fn chmod(&mut self, mode: u16) {
        if let Some(e) = self.find(ACL_USER_OBJ) {
            e.perm = (mode >> 6) & RWX;
        }
        if let Some(e) = self.find(ACL_OTHER) {
            e.perm = mode & RWX;
        }
        let group = if self.entries.iter().any(|e| e.tag == ACL_MASK) {
            ACL_MASK
        } else {
            ACL_GROUP_OBJ
        };
        if let Some(e) = self.find(group) {
            e.perm = (mode >> 3) & RWX;
        }
    }

    /// Whether this access ACL of `inode` grants `want` (rwx bits) to a
    /// caller with `uid` who is a member of the groups `in_group` accepts
    /// (posix_acl_permission): the owner entry for the owner, else a named
    /// user entry, else the matching group entries (any one granting it
    /// will do), else the other entry; named users and all groups are
    /// limited by the mask.
    pub fn grants(
        &self,
        inode: &InodeInfo,
        uid: u32,
        in_group: impl Fn(u32) -> bool,
        want: u16,
    ) -> bool {
        let want = want & RWX;
        let mask = self
            .entries
            .iter()
            .find(|e| e.tag == ACL_MASK)
            .map_or(RWX, |e| e.perm);
        let mut group_matched = false;
        for e in &self.entries {
            match e.tag {
                ACL_USER_OBJ if uid == inode.uid => return e.perm & want == want,
                ACL_USER if e.id == uid => return e.perm & mask & want == want,
                ACL_GROUP_OBJ | ACL_GROUP => {
                    let gid = if e.tag == ACL_GROUP_OBJ {
                        inode.gid
                    } else {
                        e.id
                    };
                    if in_group(gid) {
                        group_matched = true;
                        if e.perm & want == want {
                            return e.perm & mask & want == want;
                        }
                    }
                }
                ACL_OTHER => return !group_matched && e.perm & want == want,
                _ => {}
            }
        }
        false
    }

    /// A new inode with requested `mode` under a directory whose default
    /// ACL is `self`: the requested bits mask the ACL's owner, other and
    /// mask (or owning group) entries and are masked by them in turn; the
    /// umask does not apply (posix_acl_create). Returns the new mode and the
    /// access ACL to store, `None` when the mode says it all.
    pub fn inherit(&self, mode: u16) -> (u16, Option<Acl>) {
        let mut acl = self.clone();
        let mut bits = mode & 0o777;
        let group = if acl.entries.iter().any(|e| e.tag == ACL_MASK) {
            ACL_MASK
        } else {
            ACL_GROUP_OBJ
        };
        for (tag, shift) in [(ACL_USER_OBJ, 6), (group, 3), (ACL_OTHER, 0)] {
            if let Some(e) = acl.find(tag) {
                e.perm &= (bits >> shift) & RWX;
                bits &= !(RWX << shift) | (e.perm << shift);
            }
        }
        let new_mode = (mode & !0o777) | bits;
        let access = (!acl.is_minimal()).then_some(acl);
        (new_mode, access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut out = POSIX_ACL_XATTR_VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// The id of entries that name nobody (owner, owning group, mask, other).
    const U: u32 = u32::MAX;

    /// An ACL with only the three entries the mode bits express.
    fn minimal(user: u16, group: u16, other: u16) -> Vec<u8> {
        let mut out = POSIX_ACL_XATTR_VERSION.to_le_bytes().to_vec();
        for (tag, perm) in [
            (ACL_USER_OBJ, user),
            (ACL_GROUP_OBJ, group),
            (ACL_OTHER, other),
        ] {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&U.to_le_bytes());
        }
        out
    }

    #[test]
    fn validation_follows_posix_acl_valid() {
        let good = acl(&[
            (ACL_USER_OBJ, 7, U),
            (ACL_USER, 5, 1000),
            (ACL_USER, 4, 1001),
            (ACL_GROUP_OBJ, 5, U),
            (ACL_GROUP, 1, 50),
            (ACL_MASK, 7, U),
            (ACL_OTHER, 0, U),
        ]);
        assert_eq!(Acl::parse(&good).unwrap().to_bytes(), good);
        Acl::parse(&minimal(6, 4, 4)).unwrap();
        for bad in [
            // named entry without a mask
            acl(&[
                (ACL_USER_OBJ, 7, U),
                (ACL_USER, 5, 1),
                (ACL_GROUP_OBJ, 5, U),
                (ACL_OTHER, 0, U),
            ]),
            // repeated id, ids out of order
            acl(&[
                (ACL_USER_OBJ, 7, U),
                (ACL_USER, 5, 2),
                (ACL_USER, 5, 2),
                (ACL_GROUP_OBJ, 5, U),
                (ACL_MASK, 7, U),
                (ACL_OTHER, 0, U),
            ]),
            // no other entry, tags out of order, bad permission, bad tag
            acl(&[(ACL_USER_OBJ, 7, U), (ACL_GROUP_OBJ, 5, U)]),
            acl(&[
                (ACL_GROUP_OBJ, 5, U),
                (ACL_USER_OBJ, 7, U),
                (ACL_OTHER, 0, U),
            ]),
            acl(&[
                (ACL_USER_OBJ, 8, U),
                (ACL_GROUP_OBJ, 5, U),
                (ACL_OTHER, 0, U),
            ]),
            acl(&[(ACL_USER_OBJ, 7, U), (0x40, 5, U), (ACL_OTHER, 0, U)]),
            acl(&[]),
        ] {
            assert_eq!(
                Acl::parse(&bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
        assert!(Acl::parse(&good[..good.len() - 1]).is_err());
        let mut v1 = good.clone();
        v1[0] = 1;
        assert!(Acl::parse(&v1).is_err());
    }

    #[test]
    fn mode_rules_match_the_kernel() {
        let named = Acl::parse(&acl(&[
            (ACL_USER_OBJ, 6, U),
            (ACL_USER, 7, 1000),
            (ACL_GROUP_OBJ, 4, U),
            (ACL_MASK, 5, U),
            (ACL_OTHER, 0, U),
        ]))
        .unwrap();
        // The group bits come from the mask.
        assert_eq!(named.equiv_mode(0o100777), (0o100650, false));
        assert_eq!(
            Acl::parse(&minimal(7, 5, 1)).unwrap().equiv_mode(0o40000),
            (0o40751, true)
        );
        // chmod writes the mask, not the owning group.
        let mut changed = named.clone();
        changed.chmod(0o741);
        assert_eq!(changed.equiv_mode(0), (0o741, false));
        assert_eq!(changed.entries[2].perm, 4, "owning group kept");
        // Inheriting: mode 0666 under a default granting rwx to a named
        // user: the mask and other entries are limited by the mode.
        let default = Acl::parse(&acl(&[
            (ACL_USER_OBJ, 7, U),
            (ACL_USER, 7, 1000),
            (ACL_GROUP_OBJ, 5, U),
            (ACL_MASK, 7, U),
            (ACL_OTHER, 5, U),
        ]))
        .unwrap();
        let (mode, access) = default.inherit(0o100666);
        assert_eq!(mode, 0o100664);
        let access = access.unwrap();
        assert_eq!(access.equiv_mode(0o100000), (0o100664, false));
        assert_eq!(access.entries[1].perm, 7, "named entries are kept");
        // A minimal default ACL only masks the mode.
        let (mode, access) = Acl::parse(&minimal(7, 5, 0)).unwrap().inherit(0o40777);
        assert_eq!((mode, access), (0o40750, None));
    }
}
