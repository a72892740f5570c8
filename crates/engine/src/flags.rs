//! Inode flags as chattr/lsattr see them (the FS_*_FL bits of FS_IOC_GETFLAGS
//! and FS_IOC_SETFLAGS), which of them F2FS accepts, and the rules the
//! immutable and append-only flags impose on other operations.
//!
//! F2FS stores the settable flags in `i_flags` with the FS_*_FL values
//! themselves (the kernel's `f2fs_fsflags_map` is the identity), so no
//! translation is needed; a few reported flags come from elsewhere.

use crate::error::{Error, ErrorKind, Result};
use crate::inode::{mask_flags, InodeInfo};
use f2fuse_layout::{feature, inline_flag, inode_flag};

/// FS_*_FL bits F2FS reports but does not keep in `i_flags`.
pub mod reported {
    pub const ENCRYPT: u32 = 0x0000_0800;
    pub const NOCOW: u32 = 0x0080_0000;
    pub const VERITY: u32 = 0x0010_0000;
    pub const INLINE_DATA: u32 = 0x1000_0000;
}

/// Flags user space may set (the kernel's F2FS_SETTABLE_FS_FL).
pub const SETTABLE: u32 = inode_flag::COMPR
    | inode_flag::SYNC
    | inode_flag::IMMUTABLE
    | inode_flag::APPEND
    | inode_flag::NODUMP
    | inode_flag::NOATIME
    | inode_flag::NOCOMP
    | inode_flag::DIRSYNC
    | inode_flag::PROJINHERIT
    | inode_flag::CASEFOLD;

/// Flags user space may see (F2FS_GETTABLE_FS_FL). Setting one of these
/// that is not settable is silently ignored (chattr writes back what it
/// read); setting any other bit is EOPNOTSUPP.
pub const GETTABLE: u32 = SETTABLE
    | inode_flag::INDEX
    | reported::ENCRYPT
    | reported::INLINE_DATA
    | reported::NOCOW
    | reported::VERITY;

/// The flags FS_IOC_GETFLAGS reports for `inode`.
pub fn get_flags(inode: &InodeInfo) -> u32 {
    let mut flags = inode.flags & (SETTABLE | inode_flag::INDEX);
    if inode.has_inline(inline_flag::INLINE_DATA) || inode.has_inline(inline_flag::INLINE_DENTRY) {
        flags |= reported::INLINE_DATA;
    }
    if inode.has_inline(inline_flag::PIN_FILE) {
        flags |= reported::NOCOW;
    }
    if inode.is_encrypted() {
        flags |= reported::ENCRYPT;
    }
    if inode.is_verity() {
        flags |= reported::VERITY;
    }
    flags
}

/// The `i_flags` value FS_IOC_SETFLAGS with `requested` gives `inode` on
/// an image with `features`, or the error the kernel's F2FS returns for
/// it. A change of the casefold flag also needs an empty directory, which
/// the caller checks (ENOTEMPTY).
pub fn flags_to_store(inode: &InodeInfo, requested: u32, features: u32) -> Result<u32> {
    if requested & !GETTABLE != 0 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("inode flags {:#x}", requested & !GETTABLE),
        ));
    }
    let wanted = requested & SETTABLE;
    let allowed = mask_flags(SETTABLE, inode.kind);
    if wanted & !allowed != 0 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("flags {:#x} on a {:?}", wanted & !allowed, inode.kind),
        ));
    }
    if (wanted ^ inode.flags) & inode_flag::CASEFOLD != 0 && features & feature::CASEFOLD == 0 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "casefolding without the casefold feature",
        ));
    }
    if wanted & (inode_flag::COMPR | inode_flag::NOCOMP) != 0
        && features & feature::COMPRESSION == 0
    {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "compression flags without the compression feature",
        ));
    }
    if wanted & inode_flag::COMPR != 0 && wanted & inode_flag::NOCOMP != 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "compression and no-compression flags together",
        ));
    }
    Ok(wanted | (inode.flags & !SETTABLE))
}

pub fn is_immutable(inode: &InodeInfo) -> bool {
    inode.flags & inode_flag::IMMUTABLE != 0
}

pub fn is_append_only(inode: &InodeInfo) -> bool {
    inode.flags & inode_flag::APPEND != 0
}

fn refused(inode: &InodeInfo, why: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::NotPermitted,
        format!("inode {} is {why}: {what}", inode.ino),
    )
}

/// EPERM if `inode` is immutable: what the VFS's write permission check
/// (inode_permission with MAY_WRITE) refuses, e.g. writing a file or adding
/// a name to a directory.
pub fn deny_if_immutable(inode: &InodeInfo, what: &str) -> Result<()> {
    if is_immutable(inode) {
        return Err(refused(inode, "immutable", what));
    }
    Ok(())
}

/// EPERM if `inode` is immutable or append-only: removing or renaming it,
/// linking to it, changing its xattrs, mode, owner or times (may_delete,
/// vfs_link, xattr_permission, notify_change), or removing a name from it
/// as a directory.
pub fn deny_if_locked(inode: &InodeInfo, what: &str) -> Result<()> {
    deny_if_immutable(inode, what)?;
    if is_append_only(inode) {
        return Err(refused(inode, "append-only", what));
    }
    Ok(())
}
