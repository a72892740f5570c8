//! Setting and removing xattrs and POSIX ACLs (inode lock exclusive).

use super::locks::Mode;
use super::Fs;
use crate::acl::{Acl, AclKind};
use crate::error::{Error, ErrorKind, Result};
use crate::flags::deny_if_locked;
use crate::inode::{set_ctime, FileKind, InodeInfo};
use crate::perm::{self, Access, Credentials};
use crate::xattr::{self, SetMode};
use std::sync::atomic::Ordering;

impl Fs {
    /// Sets an xattr (full name like "user.x") with XATTR_CREATE/REPLACE
    /// semantics. POSIX ACL names go to `set_acl` (as the kernel's ACL
    /// handler, which ignores the flags) by a privileged caller.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        if let Some(kind) = AclKind::of_xattr(name) {
            return self.set_acl(ino, kind, value, true);
        }
        self.change_xattr(ino, name, Some(value), mode, None)
    }

    /// Sets a POSIX ACL (in the user-space xattr format). An access ACL
    /// also sets the permission bits it implies and is stored only if they
    /// cannot say it all; the setgid bit is dropped unless `keep_sgid` (the
    /// caller is in the file's group or privileged), as
    /// posix_acl_update_mode does. Default ACLs exist only on directories.
    pub fn set_acl(&self, ino: u32, kind: AclKind, value: &[u8], keep_sgid: bool) -> Result<()> {
        self.set_acl_for(ino, kind, value, |_| keep_sgid, None)
    }

    /// `set_acl` with the set-group-ID rule decided on the inode as found
    /// under its lock; `caller` (if any) must own the inode.
    pub(super) fn set_acl_for(
        &self,
        ino: u32,
        kind: AclKind,
        value: &[u8],
        keep_sgid: impl Fn(&InodeInfo) -> bool,
        caller: Option<&Credentials>,
    ) -> Result<()> {
        let acl = Acl::parse(value)?;
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            deny_if_locked(&inode, "changing ACLs")?;
            if let Some(creds) = caller {
                perm::check_set_acl(creds, &inode)?;
            }
            let name = kind.xattr_name();
            let bytes = acl.to_bytes();
            match (kind, inode.kind) {
                (_, FileKind::Symlink) => {
                    Err(Error::new(ErrorKind::Unsupported, "ACLs on a symlink"))
                }
                (AclKind::Default, FileKind::Directory) => {
                    xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Any)
                }
                (AclKind::Default, _) => Err(Error::new(
                    ErrorKind::PermissionDenied,
                    "default ACLs are for directories",
                )),
                (AclKind::Access, _) => {
                    let (mut mode, minimal) = acl.equiv_mode(inode.mode);
                    if !keep_sgid(&inode) {
                        mode &= !(libc::S_ISGID as u16);
                    }
                    if !minimal {
                        xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Any)?;
                    } else {
                        match xattr::set_xattr(ctx, ino, name, None, SetMode::Replace) {
                            Err(e) if e.kind() == ErrorKind::NoData => {}
                            other => other?,
                        }
                    }
                    let t = ctx.clock.now();
                    ctx.update_inode(ino, |raw| {
                        raw.i_mode.set(mode);
                        set_ctime(raw, t);
                    })
                }
            }
        })
    }

    /// Removes xattr `name` (ENODATA if there is none).
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        self.change_xattr(ino, name, None, SetMode::Replace, None)
    }

    /// Sets (`Some`) or removes an xattr; `caller` (if any) is checked by
    /// xattr_permission's rules.
    pub(super) fn change_xattr(
        &self,
        ino: u32,
        name: &[u8],
        value: Option<&[u8]>,
        mode: SetMode,
        caller: Option<&Credentials>,
    ) -> Result<()> {
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            deny_if_locked(&inode, "changing xattrs")?;
            if let Some(creds) = caller {
                perm::check_xattr(creds, &inode, name, Access::WRITE, || {
                    self.acl(&inode, AclKind::Access)
                })?;
            }
            xattr::set_xattr(ctx, ino, name, value, mode)?;
            if inode.kind == FileKind::Directory {
                self.writer().need_checkpoint.store(true, Ordering::Relaxed);
            }
            Ok(())
        })
    }
}
