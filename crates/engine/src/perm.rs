//! Who may do what to an inode: the kernel's permission rules for a
//! process, as fs/namei.c (generic_permission, may_create, may_delete and
//! the sticky-directory rule), fs/attr.c (setattr_prepare: chown, chgrp,
//! chmod, times), fs/inode.c (inode_init_owner) and fs/xattr.c
//! (xattr_permission) have them. Pure functions of the caller's
//! [`Credentials`] and the inode; the facade (`fs::perm`) applies them
//! under its locks, reading an access ACL only when the rules need it.

use crate::acl::Acl;
use crate::error::{Error, ErrorKind, Result};
use crate::flags::{is_append_only, is_immutable};
use crate::inode::{FileKind, InodeInfo};
use std::ops::BitOr;

/// The identity a request runs with: the kernel's fsuid, fsgid and
/// supplementary groups. User id 0 is privileged as root is by default:
/// it holds every capability the rules ask for (CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID, CAP_CHOWN, CAP_MKNOD,
/// CAP_SYS_ADMIN); capabilities of other users are not modelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User ID.
    pub uid: u32,
    /// Primary group ID.
    pub gid: u32,
    /// Supplementary groups (the primary `gid` need not be repeated).
    pub groups: Vec<u32>,
}

impl Credentials {
    /// A caller with `uid`, `gid` and supplementary `groups`.
    pub fn new(uid: u32, gid: u32, groups: Vec<u32>) -> Credentials {
        Credentials { uid, gid, groups }
    }

    /// The superuser.
    pub fn root() -> Credentials {
        Credentials::new(0, 0, Vec::new())
    }

    /// Root's capabilities (see the type).
    pub fn is_privileged(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the caller's group or one of its supplementary ones
    /// (in_group_p).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// The owner of `inode`, or privileged (inode_owner_or_capable).
    pub fn owns_or_privileged(&self, inode: &InodeInfo) -> bool {
        self.uid == inode.uid || self.is_privileged()
    }

    /// Whether the caller may keep the set-group-ID bit of a file whose
    /// group is `gid` when changing its mode (in_group_or_capable).
    pub fn may_keep_sgid(&self, gid: u32) -> bool {
        self.in_group(gid) || self.is_privileged()
    }
}

/// What a caller wants to do with an inode: the kernel's MAY_READ,
/// MAY_WRITE and MAY_EXEC, with the values of access(2)'s R_OK, W_OK and
/// X_OK. For a directory, EXEC is search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u16);

impl Access {
    /// Nothing (existence only, as F_OK).
    pub const NONE: Access = Access(0);
    /// Read (R_OK).
    pub const READ: Access = Access(4);
    /// Write (W_OK).
    pub const WRITE: Access = Access(2);
    /// Execute or search (X_OK).
    pub const EXEC: Access = Access(1);

    /// From access(2)'s mask (R_OK | W_OK | X_OK; other bits ignored).
    pub fn from_mask(mask: u32) -> Access {
        Access((mask & 0o7) as u16)
    }

    /// Whether every access in `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// As the rwx bits of a mode (4, 2, 1).
    pub fn bits(self) -> u16 {
        self.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

fn denied(inode: &InodeInfo, want: Access) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!("inode {}: access {:o} denied", inode.ino, want.bits()),
    )
}

fn not_permitted(inode: &InodeInfo, what: &str) -> Error {
    Error::new(
        ErrorKind::NotPermitted,
        format!("inode {}: {what}", inode.ino),
    )
}

/// inode_permission without the read-only check: writing an immutable
/// inode is EPERM, then generic_permission. `access_acl` is called only
/// when the ACL can decide (caller not the owner, group class not empty).
pub fn check(
    creds: &Credentials,
    inode: &InodeInfo,
    want: Access,
    access_acl: impl FnOnce() -> Result<Option<Acl>>,
) -> Result<()> {
    if want.contains(Access::WRITE) && is_immutable(inode) {
        return Err(not_permitted(inode, "immutable"));
    }
    if mode_permits(creds, inode, want, access_acl)? {
        return Ok(());
    }
    // What root may do anyway (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
    // everything on directories; on files everything but executing one
    // that nobody may execute.
    let any_exec = inode.mode & 0o111 != 0;
    if creds.is_privileged()
        && (inode.kind == FileKind::Directory || !want.contains(Access::EXEC) || any_exec)
    {
        return Ok(());
    }
    Err(denied(inode, want))
}

/// acl_permission_check: the owner class for the owner, the ACL if there is
/// one, else the group class for members of the group, else the other
/// class.
fn mode_permits(
    creds: &Credentials,
    inode: &InodeInfo,
    want: Access,
    access_acl: impl FnOnce() -> Result<Option<Acl>>,
) -> Result<bool> {
    let mode = inode.mode;
    let class = |shift: u16| (mode >> shift) & 0o7;
    if creds.uid == inode.uid {
        return Ok(want.bits() & !class(6) == 0);
    }
    // A file whose group class is empty has a mask of nothing: its ACL
    // cannot grant anything beyond the other class.
    if mode & 0o070 != 0 {
        if let Some(acl) = access_acl()? {
            return Ok(acl.grants(inode, creds.uid, |g| creds.in_group(g), want.bits()));
        }
    }
    let bits = if creds.in_group(inode.gid) {
        class(3)
    } else {
        class(0)
    };
    Ok(want.bits() & !bits == 0)
}

/// The sticky-directory rule (check_sticky): in a directory with S_ISVTX
/// only the owner of an entry, the owner of the directory or a privileged
/// caller may remove or rename it.
pub fn check_sticky(creds: &Credentials, dir: &InodeInfo, victim: &InodeInfo) -> Result<()> {
    let sticky = dir.mode & libc::S_ISVTX as u16 != 0;
    if sticky && creds.uid != victim.uid && creds.uid != dir.uid && !creds.is_privileged() {
        return Err(not_permitted(
            victim,
            "in a sticky directory owned by another user",
        ));
    }
    Ok(())
}

/// chown_ok and chgrp_ok: only a privileged caller gives a file to another
/// user; the owner may change its group to one of the owner's own groups.
pub fn check_chown(
    creds: &Credentials,
    inode: &InodeInfo,
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<()> {
    if creds.is_privileged() {
        return Ok(());
    }
    if let Some(uid) = uid {
        if creds.uid != inode.uid || uid != inode.uid {
            return Err(not_permitted(inode, "changing the owner"));
        }
    }
    if let Some(gid) = gid {
        if creds.uid != inode.uid || !(gid == inode.gid || creds.in_group(gid)) {
            return Err(not_permitted(inode, "changing the group"));
        }
    }
    Ok(())
}

/// chmod (setattr_prepare): the owner or a privileged caller; the mode to
/// store loses S_ISGID when the caller is not in the file's group (`gid`,
/// the new one if the same request changes it).
pub fn check_chmod(creds: &Credentials, inode: &InodeInfo, perm: u16, gid: u32) -> Result<u16> {
    if !creds.owns_or_privileged(inode) {
        return Err(not_permitted(inode, "changing the mode"));
    }
    Ok(if creds.may_keep_sgid(gid) {
        perm
    } else {
        perm & !(libc::S_ISGID as u16)
    })
}

/// The permission bits `perm` of a file whose group is `gid` keep after a
/// change that drops privileges (a write, truncate or fallocate by a
/// caller without CAP_FSETID, or a chown: should_remove_suid and
/// setattr_should_drop_sgid): set-user-ID goes; set-group-ID goes when the
/// group may execute, or when `changer` is neither in that group nor
/// privileged (`None`: a trusted changer, taken as in the group).
pub fn without_privileges(perm: u16, gid: u32, changer: Option<&Credentials>) -> u16 {
    let sgid = libc::S_ISGID as u16;
    let perm = perm & !(libc::S_ISUID as u16);
    let group_exec = perm & libc::S_IXGRP as u16 != 0;
    if group_exec || changer.is_some_and(|creds| !creds.may_keep_sgid(gid)) {
        perm & !sgid
    } else {
        perm
    }
}

/// Whether `without_privileges` (the set-ID rule of writes) needs the changer's supplementary
/// groups for a file of mode `perm` and group `gid`: only set-group-ID
/// without group execute can stay, and only for a member of `gid`, which a
/// changer whose primary group it is already is.
pub fn sgid_depends_on_groups(perm: u16, gid: u32, changer_gid: u32) -> bool {
    let (sgid, group_exec) = (libc::S_ISGID as u16, libc::S_IXGRP as u16);
    perm & (sgid | group_exec) == sgid && gid != changer_gid
}

/// Setting times to given values (setattr_prepare with ATTR_*_SET): the
/// owner or a privileged caller only.
pub fn check_set_times(creds: &Credentials, inode: &InodeInfo) -> Result<()> {
    if !creds.owns_or_privileged(inode) {
        return Err(not_permitted(inode, "setting times"));
    }
    Ok(())
}

/// The owner, group and mode of a new inode of `mode` (type bits included)
/// created by `creds` in `dir` (inode_init_owner, with the VFS's
/// mode_strip_sgid): the caller's ids, except the directory's group under
/// a set-group-ID directory, whose subdirectories inherit the bit; a
/// group-executable file there keeps S_ISGID only for members of that
/// group and privileged callers.
pub fn new_inode_owner(creds: &Credentials, dir: &InodeInfo, mode: u16) -> (u32, u32, u16) {
    let sgid = libc::S_ISGID as u16;
    if dir.mode & sgid == 0 {
        return (creds.uid, creds.gid, mode);
    }
    let is_dir = FileKind::from_mode(mode) == Some(FileKind::Directory);
    let mode = if is_dir {
        mode | sgid
    } else if mode & (sgid | 0o010) == sgid | 0o010 && !creds.may_keep_sgid(dir.gid) {
        mode & !sgid
    } else {
        mode
    };
    (creds.uid, dir.gid, mode)
}

/// Namespaces of extended attribute names, as xattr_permission sorts them.
fn namespace(name: &[u8]) -> &[u8] {
    match name.iter().position(|&b| b == b'.') {
        Some(dot) => &name[..=dot],
        None => name,
    }
}

/// xattr_permission plus the security module's rule for `security.*`:
/// `trusted.*` is for privileged callers only (others read nothing:
/// ENODATA), so is changing `security.*`; `user.*` exists only on regular
/// files and directories, changing it on a sticky directory needs its
/// owner, and it needs read or write permission on the inode (`want`).
/// `system.*` (ACLs) has its own rules (see `check_set_acl`).
pub fn check_xattr(
    creds: &Credentials,
    inode: &InodeInfo,
    name: &[u8],
    want: Access,
    access_acl: impl FnOnce() -> Result<Option<Acl>>,
) -> Result<()> {
    let writing = want.contains(Access::WRITE);
    let refused = |what: &str| {
        if writing {
            not_permitted(inode, what)
        } else {
            Error::new(ErrorKind::NoData, format!("inode {}: {what}", inode.ino))
        }
    };
    if writing && (is_immutable(inode) || is_append_only(inode)) {
        return Err(not_permitted(inode, "immutable or append-only"));
    }
    match namespace(name) {
        b"trusted." if !creds.is_privileged() => Err(refused("trusted.* xattrs")),
        b"security." if writing && !creds.is_privileged() => Err(refused("security.* xattrs")),
        b"user." => {
            if !matches!(inode.kind, FileKind::Regular | FileKind::Directory) {
                return Err(refused("user.* xattrs on a special file"));
            }
            let sticky_dir =
                inode.kind == FileKind::Directory && inode.mode & libc::S_ISVTX as u16 != 0;
            if sticky_dir && writing && !creds.owns_or_privileged(inode) {
                return Err(refused("user.* xattrs of a sticky directory"));
            }
            check(creds, inode, want, access_acl)
        }
        _ => Ok(()),
    }
}

/// Setting an ACL (set_posix_acl): the owner or a privileged caller.
pub fn check_set_acl(creds: &Credentials, inode: &InodeInfo) -> Result<()> {
    if !creds.owns_or_privileged(inode) {
        return Err(not_permitted(inode, "changing ACLs"));
    }
    Ok(())
}

/// Whether a caller sees xattr `name` listed: `trusted.*` only privileged
/// ones (the trusted handler's list rule).
pub fn lists_xattr(creds: &Credentials, name: &[u8]) -> bool {
    namespace(name) != b"trusted." || creds.is_privileged()
}
