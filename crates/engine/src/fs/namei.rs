//! Names: create, mkdir, mknod, symlink, link, unlink, rmdir, rename
//! (the kernel's namei.c). Each takes the directory locks of the
//! directories whose entries it changes, then the inode locks of every
//! inode it changes, in the order `locks` and `lock_order` define.

use super::locks::NamespaceLocks;
use super::Fs;
use crate::acl::{Acl, AclKind};
use crate::data::{self, DataPolicy};
use crate::dir::{self, FoundEntry};
use crate::error::{Error, ErrorKind, Result};
use crate::flags::{deny_if_immutable, deny_if_locked};
use crate::inline;
use crate::inode::{create_inode, set_ctime, Ctx, FileKind, InodeInfo, NewInode};
use crate::perm::{self, Access, Credentials};
use crate::time::Timestamp;
use crate::xattr::{self, SetMode};
use f2fuse_layout::*;

/// rename(2) flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with EEXIST if the target exists (RENAME_NOREPLACE).
    pub noreplace: bool,
    /// Swap the source and the target (RENAME_EXCHANGE).
    pub exchange: bool,
    /// RENAME_WHITEOUT (overlayfs): the old name becomes a whiteout, a
    /// character device 0:0 with mode 0, in the same change (as
    /// f2fs_create_whiteout).
    pub whiteout: bool,
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("invalid name {:?}", String::from_utf8_lossy(name)),
        ));
    }
    if name.len() > F2FS_NAME_LEN {
        return Err(Error::new(
            ErrorKind::NameTooLong,
            String::from_utf8_lossy(name),
        ));
    }
    Ok(())
}

/// The entry `name` of directory `dir`: ENAMETOOLONG for a name no entry
/// can have, ENOENT if there is none.
fn existing_entry(ctx: &Ctx, dir: &InodeInfo, name: &[u8]) -> Result<FoundEntry> {
    if name.len() > F2FS_NAME_LEN {
        return Err(Error::new(
            ErrorKind::NameTooLong,
            String::from_utf8_lossy(name),
        ));
    }
    dir::find_entry(ctx, dir, name)?
        .ok_or_else(|| Error::new(ErrorKind::NotFound, String::from_utf8_lossy(name)))
}

impl Fs {
    /// Creates the inode `spec` describes and its entry, `fill` adding
    /// what it holds; `caller` (if any) needs search permission on the
    /// parent, and write permission once the name is known to be free.
    fn new_entry(
        &self,
        spec: NewInode,
        caller: Option<&Credentials>,
        fill: impl FnOnce(&Ctx, u32) -> Result<()>,
    ) -> Result<InodeInfo> {
        let NewInode {
            mode: spec_mode,
            uid,
            gid,
            parent,
            name,
            rdev,
        } = spec;
        let ino = self.mutate(|ctx| {
            let mut locks = self.locks().namespace();
            locks.relock_dirs(&[parent]);
            locks.lock_inodes(&[parent]);
            let dir = self.caller_dir(ctx, parent)?;
            self.permission(caller, &dir, Access::EXEC)?;
            if dir.links == 0 {
                return Err(Error::new(ErrorKind::NotFound, "directory was removed"));
            }
            check_name(name)?;
            if dir::find_entry(ctx, &dir, name)?.is_some() {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    String::from_utf8_lossy(name),
                ));
            }
            self.may_create(caller, &dir)?;
            deny_if_immutable(&dir, "adding a name")?;
            dir::require_key(&dir)?;
            let kind = FileKind::from_mode(spec_mode)
                .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "bad file type"))?;
            if kind == FileKind::Directory && dir.links == u32::MAX {
                return Err(Error::new(
                    ErrorKind::TooManyLinks,
                    "too many subdirectories",
                ));
            }
            let (mode, inherited) = self.inherit_acls(&dir, spec_mode, kind)?;
            let dir_level = self.writer().tunables.lock().dir_level;
            let ino = create_inode(
                ctx,
                &NewInode {
                    mode,
                    uid,
                    gid,
                    parent,
                    name,
                    rdev,
                },
                dir_level,
                &dir,
            )?;
            let linked = (|| {
                if kind == FileKind::Directory {
                    inline::init_inline_dir(ctx, ino, parent)?;
                }
                for (acl_kind, acl) in &inherited {
                    let bytes = acl.to_bytes();
                    xattr::set_xattr(
                        ctx,
                        ino,
                        acl_kind.xattr_name(),
                        Some(&bytes),
                        SetMode::Create,
                    )?;
                }
                fill(ctx, ino)?;
                let ft = file_type_of_mode(spec_mode).expect("valid kind");
                dir::add_link(ctx, parent, name, ino, ft)
            })();
            if let Err(e) = linked {
                // Out of space for the symlink target or the entry: the new
                // inode must not stay allocated without a name.
                self.evict(ino)?;
                return Err(e);
            }
            if kind == FileKind::Directory {
                ctx.update_inode(parent, |raw| raw.i_links.set(raw.i_links.get() + 1))?;
            }
            Ok(ino)
        })?;
        self.inode(ino)
    }

    /// What a new inode of `kind` asking for `mode` gets under directory
    /// `dir`: with a default ACL there, the ACL masks the mode (no umask
    /// applies) and the inode gets an access ACL unless the mode says it
    /// all, plus the default ACL itself if it is a directory
    /// (posix_acl_create). Symlinks have no ACLs.
    fn inherit_acls(
        &self,
        dir: &InodeInfo,
        mode: u16,
        kind: FileKind,
    ) -> Result<(u16, Vec<(AclKind, Acl)>)> {
        let default = match kind {
            FileKind::Symlink => None,
            _ => self.acl(dir, AclKind::Default)?,
        };
        let Some(default) = default else {
            return Ok((mode, Vec::new()));
        };
        let (mode, access) = default.inherit(mode);
        let mut acls: Vec<(AclKind, Acl)> =
            access.map(|a| (AclKind::Access, a)).into_iter().collect();
        if kind == FileKind::Directory {
            acls.push((AclKind::Default, default));
        }
        Ok((mode, acls))
    }

    /// Creates a regular file (fails with EEXIST if `name` exists).
    pub fn create(
        &self,
        parent: u32,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        let mode = mode::S_IFREG | (perm & 0o7777);
        self.new_plain_entry(parent, name, mode, (uid, gid), None)
    }

    /// Creates a directory (fails with EEXIST if `name` exists).
    pub fn mkdir(
        &self,
        parent: u32,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        let mode = mode::S_IFDIR | (perm & 0o7777);
        self.new_plain_entry(parent, name, mode, (uid, gid), None)
    }

    /// A new inode of `mode` with nothing to fill in (no device, no
    /// target), compressed as its name or directory asks.
    pub(super) fn new_plain_entry(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        (uid, gid): (u32, u32),
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        let spec = NewInode {
            parent,
            name,
            mode,
            uid,
            gid,
            rdev: (0, 0),
        };
        self.new_entry(spec, caller, |ctx, ino| {
            self.give_new_inode_compression(ctx, parent, name, ino)
        })
    }

    /// Creates a device node, fifo or socket (`mode` includes the type bits).
    pub fn mknod(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        self.make_node(parent, name, mode, rdev, (uid, gid), None)
    }

    pub(super) fn make_node(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
        (uid, gid): (u32, u32),
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        // As mknod(2): no type bits make a regular file; a directory is EPERM.
        let mode = if mode & mode::S_IFMT == 0 {
            mode | mode::S_IFREG
        } else {
            mode
        };
        match FileKind::from_mode(mode) {
            Some(FileKind::Directory) => {
                Err(Error::new(ErrorKind::NotPermitted, "mknod of a directory"))
            }
            Some(FileKind::Symlink) | None => {
                Err(Error::new(ErrorKind::InvalidArgument, "mknod of that type"))
            }
            Some(_) => self.new_entry(
                NewInode {
                    parent,
                    name,
                    mode,
                    uid,
                    gid,
                    rdev,
                },
                caller,
                |_, _| Ok(()),
            ),
        }
    }

    /// Creates a symlink to `target`.
    pub fn symlink(
        &self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<InodeInfo> {
        self.make_symlink(parent, name, target, (uid, gid), None)
    }

    pub(super) fn make_symlink(
        &self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        (uid, gid): (u32, u32),
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        if target.is_empty() || target.len() > F2FS_MAX_SYMLINK_LEN {
            return Err(Error::new(
                if target.is_empty() {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::NameTooLong
                },
                "symlink target length",
            ));
        }
        self.new_entry(
            NewInode {
                parent,
                name,
                mode: mode::S_IFLNK | 0o777,
                uid,
                gid,
                rdev: (0, 0),
            },
            caller,
            // One block at most: written whole or not at all.
            |ctx, ino| {
                data::write_data(ctx, ino, 0, target, DataPolicy::default(), &|| ()).map(|_| ())
            },
        )
    }

    /// Adds a hard link `new_parent/new_name` to `ino`.
    pub fn link(&self, ino: u32, new_parent: u32, new_name: &[u8]) -> Result<InodeInfo> {
        self.link_for(ino, new_parent, new_name, None)
    }

    pub(super) fn link_for(
        &self,
        ino: u32,
        new_parent: u32,
        new_name: &[u8],
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let mut locks = self.locks().namespace();
            locks.relock_dirs(&[new_parent]);
            locks.lock_inodes(&[new_parent, ino]);
            // Linux's order: the new parent, the new name, then the source.
            let dir = self.caller_dir(ctx, new_parent)?;
            self.permission(caller, &dir, Access::EXEC)?;
            check_name(new_name)?;
            if dir::find_entry(ctx, &dir, new_name)?.is_some() {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    String::from_utf8_lossy(new_name),
                ));
            }
            self.may_create(caller, &dir)?;
            deny_if_immutable(&dir, "adding a name")?;
            let inode = self.caller_inode(ctx, ino)?;
            self.check_same_project(&dir, &inode)?;
            deny_if_locked(&inode, "linking to it")?;
            if inode.kind == FileKind::Directory {
                return Err(Error::new(
                    ErrorKind::NotPermitted,
                    "hard links to directories",
                ));
            }
            if inode.links == u32::MAX {
                return Err(Error::new(ErrorKind::TooManyLinks, "too many links"));
            }
            if inode.links == 0 {
                return Err(Error::new(ErrorKind::NotFound, "inode was unlinked"));
            }
            dir::require_key(&dir)?;
            dir::add_link(
                ctx,
                new_parent,
                new_name,
                ino,
                file_type_of_mode(inode.mode).expect("valid"),
            )?;
            let t = ctx.clock.now();
            ctx.update_inode(ino, |raw| {
                raw.i_links.set(raw.i_links.get() + 1);
                // Recovery can no longer trust i_pino (the kernel's LOST_PINO).
                raw.i_advise |= fadvise::LOST_PINO;
                set_ctime(raw, t);
            })
        })?;
        self.inode(ino)
    }

    /// Removes the name of a non-directory; the inode goes with its last
    /// link and last open.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, false, None)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_dir(parent, name, None)
    }

    pub(super) fn remove_dir(
        &self,
        parent: u32,
        name: &[u8],
        caller: Option<&Credentials>,
    ) -> Result<()> {
        if name == b"." {
            return Err(Error::new(ErrorKind::InvalidArgument, "rmdir of \".\""));
        }
        if name == b".." {
            return Err(Error::new(ErrorKind::NotEmpty, "rmdir of \"..\""));
        }
        self.remove_entry(parent, name, true, caller)
    }

    pub(super) fn remove_entry(
        &self,
        parent: u32,
        name: &[u8],
        want_dir: bool,
        caller: Option<&Credentials>,
    ) -> Result<()> {
        self.mutate(|ctx| {
            // A directory to remove is locked too: no entry may appear in it.
            let (mut locks, found) = self.lock_dirs_for(&[parent], || {
                let dir = self.caller_dir(ctx, parent)?;
                self.permission(caller, &dir, Access::EXEC)?;
                let found = existing_entry(ctx, &dir, name)?;
                let also =
                    (want_dir && found.info.kind == FileKind::Directory).then_some(found.info.ino);
                Ok((found, also.into_iter().collect()))
            })?;
            locks.lock_inodes(&[parent, found.info.ino]);
            let dir = ctx.inode(parent)?;
            let target = ctx.inode(found.info.ino)?;
            self.may_delete(caller, &dir, &target)?;
            deny_if_locked(&dir, "removing a name")?;
            deny_if_locked(&target, "removing it")?;
            match (want_dir, target.kind == FileKind::Directory) {
                (true, false) => {
                    return Err(Error::new(
                        ErrorKind::NotADirectory,
                        String::from_utf8_lossy(name),
                    ))
                }
                (false, true) => {
                    return Err(Error::new(
                        ErrorKind::IsADirectory,
                        String::from_utf8_lossy(name),
                    ))
                }
                _ => {}
            }
            if want_dir && !dir::is_empty_dir(ctx, &target)? {
                return Err(Error::new(
                    ErrorKind::NotEmpty,
                    String::from_utf8_lossy(name),
                ));
            }
            if want_dir && target.ino == F2FS_ROOT_INO {
                return Err(Error::new(ErrorKind::Busy, "the root directory"));
            }
            dir::remove_link(ctx, parent, &found)?;
            if want_dir {
                self.adjust_links(ctx, parent, -1)?;
                ctx.update_inode(target.ino, |raw| raw.i_links.set(1))?;
            }
            self.drop_link(ctx, target.ino)
        })
    }

    /// True if directory `ancestor` is `ino` or contains it.
    fn is_ancestor(&self, ancestor: u32, mut ino: u32) -> Result<bool> {
        for _ in 0..=4096 {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == F2FS_ROOT_INO {
                return Ok(false);
            }
            ino = self.lookup(ino, b"..")?.ino;
        }
        Err(Corrupt::new(
            "directory tree",
            format!("\"..\" chain from inode {ino} does not reach the root"),
        )
        .into())
    }

    /// rename(2) and renameat2(2) with `flags`.
    pub fn rename(
        &self,
        parent: u32,
        name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.rename_for((parent, name), (new_parent, new_name), flags, None, None)
    }

    /// `rename` of `(parent, name)` to `(new_parent, new_name)` checked for
    /// `caller` (if given); a whiteout belongs to `owner` as a new inode
    /// would (`None`: root).
    pub(super) fn rename_for(
        &self,
        (parent, name): (u32, &[u8]),
        (new_parent, new_name): (u32, &[u8]),
        flags: RenameFlags,
        caller: Option<&Credentials>,
        owner: Option<&Credentials>,
    ) -> Result<()> {
        if flags.exchange && (flags.noreplace || flags.whiteout) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "RENAME_EXCHANGE with RENAME_NOREPLACE or RENAME_WHITEOUT",
            ));
        }
        self.mutate(|ctx| {
            let _rename = (parent != new_parent).then(|| self.locks().rename());
            // Linux's order: both parents, the old name, then the new one.
            // Directories whose ".." changes or that may be replaced are
            // locked too.
            let (mut locks, (old, existing)) = self.lock_dirs_for(&[parent, new_parent], || {
                let old_dir = self.caller_dir(ctx, parent)?;
                let new_dir = self.caller_dir(ctx, new_parent)?;
                self.permission(caller, &old_dir, Access::EXEC)?;
                self.permission(caller, &new_dir, Access::EXEC)?;
                let old = existing_entry(ctx, &old_dir, name)?;
                check_name(new_name)?;
                let existing = dir::find_entry(ctx, &new_dir, new_name)?;
                let is_dir = |e: &FoundEntry| e.info.kind == FileKind::Directory;
                let mut also = Vec::new();
                if is_dir(&old) && parent != new_parent {
                    also.push(old.info.ino);
                }
                also.extend(existing.iter().filter(|e| is_dir(e)).map(|e| e.info.ino));
                Ok(((old, existing), also))
            })?;
            let mut changed = vec![parent, new_parent, old.info.ino];
            changed.extend(existing.iter().map(|e| e.info.ino));
            locks.lock_inodes(&changed);
            let old_dir = ctx.inode(parent)?;
            let new_dir = ctx.inode(new_parent)?;
            let moving = ctx.inode(old.info.ino)?;
            let moving_dir = moving.kind == FileKind::Directory;
            if let Some(e) = &existing {
                if flags.noreplace {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if e.info.ino == old.info.ino {
                    return Ok(()); // Two links of one inode: nothing to do.
                }
            } else if flags.exchange {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    String::from_utf8_lossy(new_name),
                ));
            }
            // Linux's may_delete of the old name, then may_delete of the
            // replaced name or may_create of the new one; a directory
            // moving to another parent (or exchanged there) needs write
            // permission on itself, as its ".." changes.
            let replaced = match &existing {
                Some(e) => Some(ctx.inode(e.info.ino)?),
                None => None,
            };
            self.check_same_project(&new_dir, &moving)?;
            if let Some(victim) = replaced.as_ref().filter(|_| flags.exchange) {
                self.check_same_project(&old_dir, victim)?;
            }
            self.may_delete(caller, &old_dir, &moving)?;
            match &replaced {
                Some(victim) => self.may_delete(caller, &new_dir, victim)?,
                None => self.may_create(caller, &new_dir)?,
            }
            if parent != new_parent {
                if moving_dir {
                    self.permission(caller, &moving, Access::WRITE)?;
                }
                if let Some(victim) = replaced.as_ref().filter(|_| flags.exchange) {
                    if victim.kind == FileKind::Directory {
                        self.permission(caller, victim, Access::WRITE)?;
                    }
                }
            }
            deny_if_locked(&old_dir, "removing a name")?;
            deny_if_locked(&moving, "renaming it")?;
            match &replaced {
                Some(victim) => {
                    deny_if_locked(&new_dir, "replacing a name")?;
                    deny_if_locked(victim, "replacing it")?;
                }
                None => deny_if_immutable(&new_dir, "adding a name")?,
            }
            if moving_dir && parent != new_parent && self.is_ancestor(old.info.ino, new_parent)? {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "cannot move a directory into itself",
                ));
            }
            dir::require_key(&old_dir)?;
            dir::require_key(&new_dir)?;
            // Nor may the target contain the old parent; Linux checks this
            // before the file types (ENOTEMPTY, EINVAL for an exchange).
            if let Some(e) = &existing {
                if e.info.kind == FileKind::Directory
                    && parent != new_parent
                    && self.is_ancestor(e.info.ino, parent)?
                {
                    return Err(Error::new(
                        if flags.exchange {
                            ErrorKind::InvalidArgument
                        } else {
                            ErrorKind::NotEmpty
                        },
                        "the target contains the source",
                    ));
                }
            }
            if let Some(victim) = replaced.as_ref().filter(|_| !flags.exchange) {
                let victim_dir = victim.kind == FileKind::Directory;
                if moving_dir && !victim_dir {
                    return Err(Error::new(
                        ErrorKind::NotADirectory,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if !moving_dir && victim_dir {
                    return Err(Error::new(
                        ErrorKind::IsADirectory,
                        String::from_utf8_lossy(new_name),
                    ));
                }
                if victim_dir && !dir::is_empty_dir(ctx, victim)? {
                    return Err(Error::new(
                        ErrorKind::NotEmpty,
                        String::from_utf8_lossy(new_name),
                    ));
                }
            }
            let whiteout = match flags.whiteout {
                true => Some(self.new_whiteout(ctx, &old_dir, name, owner)?),
                false => None,
            };
            let t = ctx.clock.now();
            if flags.exchange {
                let other = existing.expect("checked");
                let other_inode = ctx.inode(other.info.ino)?;
                let other_dir = other_inode.kind == FileKind::Directory;
                dir::set_link(
                    ctx,
                    new_parent,
                    &other,
                    old.info.ino,
                    file_type_of_mode(moving.mode).unwrap(),
                )?;
                let old_again = self.entry_again(ctx, parent, name)?;
                dir::set_link(
                    ctx,
                    parent,
                    &old_again,
                    other.info.ino,
                    file_type_of_mode(other_inode.mode).unwrap(),
                )?;
                if parent != new_parent {
                    if moving_dir {
                        self.set_dotdot(ctx, old.info.ino, new_parent)?;
                    }
                    if other_dir {
                        self.set_dotdot(ctx, other.info.ino, parent)?;
                    }
                    let delta = moving_dir as i64 - other_dir as i64;
                    self.adjust_links(ctx, parent, -delta)?;
                    self.adjust_links(ctx, new_parent, delta)?;
                }
                self.set_parent_name(ctx, old.info.ino, new_parent, new_name, t)?;
                self.set_parent_name(ctx, other.info.ino, parent, name, t)?;
                return Ok(());
            }
            let moved = (|| {
                self.move_entry(ctx, (new_parent, new_name), existing.as_ref(), &moving)?;
                // The old entry may have moved if the directory was converted or rewritten.
                let old_entry = self.entry_again(ctx, parent, name)?;
                match whiteout {
                    Some(ino) => dir::set_link(ctx, parent, &old_entry, ino, file_type::CHRDEV),
                    None => dir::remove_link(ctx, parent, &old_entry),
                }
            })();
            if let Err(e) = moved {
                if let Some(ino) = whiteout {
                    self.evict(ino)?;
                }
                return Err(e);
            }
            if moving_dir && parent != new_parent {
                self.set_dotdot(ctx, old.info.ino, new_parent)?;
                self.adjust_links(ctx, parent, -1)?;
                self.adjust_links(ctx, new_parent, 1)?;
            }
            self.set_parent_name(ctx, old.info.ino, new_parent, new_name, t)
        })
    }

    /// Points `new_name` of `new_parent` at `moving`: a new entry, or the
    /// replaced one's (whose inode loses the link).
    fn move_entry(
        &self,
        ctx: &Ctx,
        (new_parent, new_name): (u32, &[u8]),
        existing: Option<&FoundEntry>,
        moving: &InodeInfo,
    ) -> Result<()> {
        let file_type = file_type_of_mode(moving.mode).expect("valid kind");
        let Some(target) = existing else {
            return dir::add_link(ctx, new_parent, new_name, moving.ino, file_type);
        };
        let victim = ctx.inode(target.info.ino)?;
        dir::set_link(ctx, new_parent, target, moving.ino, file_type)?;
        if victim.kind == FileKind::Directory {
            ctx.update_inode(victim.ino, |raw| raw.i_links.set(1))?;
            self.adjust_links(ctx, new_parent, -1)?;
        }
        self.drop_link(ctx, victim.ino)
    }

    /// A whiteout for `name` in `dir` (a character device 0:0, mode 0),
    /// owned by `owner` (`None`: root) as a new inode there would be;
    /// not yet linked.
    fn new_whiteout(
        &self,
        ctx: &Ctx,
        dir: &InodeInfo,
        name: &[u8],
        owner: Option<&Credentials>,
    ) -> Result<u32> {
        let root = Credentials::root();
        let (uid, gid, mode) = perm::new_inode_owner(owner.unwrap_or(&root), dir, mode::S_IFCHR);
        let spec = NewInode {
            mode,
            uid,
            gid,
            parent: dir.ino,
            name,
            rdev: (0, 0),
        };
        let dir_level = self.writer().tunables.lock().dir_level;
        create_inode(ctx, &spec, dir_level, dir)
    }

    fn set_dotdot(&self, ctx: &Ctx, dir_ino: u32, new_parent: u32) -> Result<()> {
        let dir = ctx.inode(dir_ino)?;
        let dotdot = dir::find_entry(ctx, &dir, b"..")?
            .ok_or_else(|| Corrupt::new("directory", format!("inode {dir_ino} has no \"..\"")))?;
        dir::set_link(ctx, dir_ino, &dotdot, new_parent, file_type::DIR)
    }

    /// Adds `delta` to the links of `ino`; a count that would leave the
    /// u32 range is corruption.
    fn adjust_links(&self, ctx: &Ctx, ino: u32, delta: i64) -> Result<()> {
        if delta != 0 {
            ctx.try_update_inode(ino, |raw| {
                let links = u32::try_from(raw.i_links.get() as i64 + delta).map_err(|_| {
                    Corrupt::new(
                        "inode",
                        format!("inode {ino}: i_links {} {delta:+}", raw.i_links.get()),
                    )
                })?;
                raw.i_links.set(links);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// `name` in directory `dir_ino`, looked up again after a change of
    /// the directory may have moved it; gone is corruption.
    fn entry_again(&self, ctx: &Ctx, dir_ino: u32, name: &[u8]) -> Result<FoundEntry> {
        dir::find_entry(ctx, &ctx.inode(dir_ino)?, name)?.ok_or_else(|| {
            Corrupt::new(
                "directory",
                format!(
                    "inode {dir_ino}: entry {:?} vanished during a rename",
                    String::from_utf8_lossy(name)
                ),
            )
            .into()
        })
    }

    /// Directory `ino` as a caller names it (see `caller_inode`).
    fn caller_dir(&self, ctx: &Ctx, ino: u32) -> Result<InodeInfo> {
        let dir = self.caller_inode(ctx, ino)?;
        if dir.kind != FileKind::Directory {
            return Err(Error::new(ErrorKind::NotADirectory, format!("inode {ino}")));
        }
        Ok(dir)
    }

    /// Takes the directory locks of `base`, then those of the directories
    /// `resolve` (run under the locks held) says the operation changes too.
    /// When one of those comes before a lock held, every lock is released
    /// and the whole set taken in order, and `resolve` runs again (the
    /// names may have changed meanwhile), until what it needs is held.
    fn lock_dirs_for<T>(
        &self,
        base: &[u32],
        resolve: impl Fn() -> Result<(T, Vec<u32>)>,
    ) -> Result<(NamespaceLocks<'_>, T)> {
        let mut locks = self.locks().namespace();
        locks.relock_dirs(base);
        loop {
            let (found, also) = resolve()?;
            if locks.add_dirs(&also) {
                return Ok((locks, found));
            }
            locks.relock_dirs(&also);
        }
    }

    fn set_parent_name(
        &self,
        ctx: &Ctx,
        ino: u32,
        parent: u32,
        name: &[u8],
        t: Timestamp,
    ) -> Result<()> {
        ctx.update_inode(ino, |raw| {
            // As the kernel: a renamed file's fsync checkpoints until its
            // parent is confirmed (fix_lost_pino).
            if raw.i_mode.get() & mode::S_IFMT != mode::S_IFDIR {
                raw.i_advise |= fadvise::LOST_PINO;
            }
            raw.i_pino.set(parent);
            raw.i_namelen.set(name.len() as u32);
            raw.i_name = [0; F2FS_NAME_LEN];
            raw.i_name[..name.len()].copy_from_slice(name);
            set_ctime(raw, t);
        })
    }
}
