//! Operations on behalf of a caller: [`Fs::access`] (access(2)) and
//! [`AsUser`], the facade's operations run for given [`Credentials`] with
//! the kernel's permission checks (the rules are `crate::perm`).
//!
//! The plain `Fs` methods trust their caller (the CLI, `build`, tests, a
//! FUSE mount whose kernel checks permissions itself): they enforce only
//! what no privilege overrides (immutable and append-only flags, file
//! types, names). A library serving other users goes through
//! [`Fs::as_user`] instead.
//!
//! Checks that depend on what an operation finds (the entry a name
//! names, the directory a rename replaces, the mode of the inode it
//! changes) run inside the operation, under its locks, so a concurrent
//! chmod or rename cannot slip between the check and the change.

use super::{Fs, RenameFlags, SetAttr};
use crate::acl::AclKind;
use crate::dir::DirEntryInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::flags::{is_append_only, is_immutable};
use crate::inode::{FileKind, InodeInfo};
use crate::perm::{self, Access, Credentials};
use crate::xattr::SetMode;
use f2fuse_layout::{inode_flag, mode};

/// open(2)'s flag for an exec (`__FMODE_EXEC`): the kernel opens a program
/// or interpreter with it, and exec needs execute permission, not read.
pub const OPEN_FOR_EXEC: i32 = 0o40;

impl Fs {
    /// access(2): whether `creds` may `want` inode `ino` (EACCES if not;
    /// EPERM for writing an immutable inode, EROFS for writing a file,
    /// directory or symlink of a read-only file system). Root may read and
    /// write everything, and execute what anybody may.
    pub fn access(&self, ino: u32, creds: &Credentials, want: Access) -> Result<()> {
        let inode = self.inode(ino)?;
        let on_disk = matches!(
            inode.kind,
            FileKind::Regular | FileKind::Directory | FileKind::Symlink
        );
        if want.contains(Access::WRITE) && on_disk && !self.is_writable() {
            return Err(Error::new(ErrorKind::ReadOnly, "opened read-only"));
        }
        self.permission(Some(creds), &inode, want)
    }

    /// Every operation of the returned view runs on behalf of `creds`:
    /// checked as the kernel checks a process with those credentials, new
    /// inodes owned by them.
    pub fn as_user<'a>(&'a self, creds: &'a Credentials) -> AsUser<'a> {
        AsUser {
            fs: self,
            creds,
            checked: true,
        }
    }

    /// Like [`as_user`](Self::as_user) (new inodes owned by `creds`, the
    /// set-group-ID rules of ACL changes applied for them) but with no
    /// permission checks: for callers whose permissions someone else
    /// checked already, such as the kernel on a FUSE mount with
    /// `default_permissions`.
    pub fn as_user_unchecked<'a>(&'a self, creds: &'a Credentials) -> AsUser<'a> {
        AsUser {
            fs: self,
            creds,
            checked: false,
        }
    }

    /// `want` on `inode` for `caller` (`None`: a trusted caller).
    pub(super) fn permission(
        &self,
        caller: Option<&Credentials>,
        inode: &InodeInfo,
        want: Access,
    ) -> Result<()> {
        match caller {
            None => Ok(()),
            Some(creds) => perm::check(creds, inode, want, || self.acl(inode, AclKind::Access)),
        }
    }

    /// Adding a name to `dir` (may_create): write and search permission.
    pub(super) fn may_create(&self, caller: Option<&Credentials>, dir: &InodeInfo) -> Result<()> {
        self.permission(caller, dir, Access::WRITE | Access::EXEC)
    }

    /// Removing `victim`'s name from `dir` (may_delete): write and search
    /// permission on the directory, and the sticky-directory rule.
    pub(super) fn may_delete(
        &self,
        caller: Option<&Credentials>,
        dir: &InodeInfo,
        victim: &InodeInfo,
    ) -> Result<()> {
        let Some(creds) = caller else {
            return Ok(());
        };
        self.may_create(caller, dir)?;
        perm::check_sticky(creds, dir, victim)
    }

    /// setattr_prepare's rules, the write permission truncate(2) needs and
    /// the write permission (or ownership) setting the times to now needs;
    /// returns the change to make (chmod by a caller outside the group
    /// drops S_ISGID).
    pub(super) fn check_setattr(
        &self,
        creds: &Credentials,
        inode: &InodeInfo,
        attr: &SetAttr,
    ) -> Result<SetAttr> {
        let mut attr = *attr;
        if attr.size.is_some() && !attr.through_writable_file {
            self.permission(Some(creds), inode, Access::WRITE)?;
        }
        perm::check_chown(creds, inode, attr.uid, attr.gid)?;
        if let Some(perm_bits) = attr.mode {
            let gid = attr.gid.unwrap_or(inode.gid);
            attr.mode = Some(perm::check_chmod(creds, inode, perm_bits, gid)?);
        }
        if attr.atime.is_none() && attr.mtime.is_none() {
            return Ok(attr);
        }
        // The kernel recording the mtime of a write or truncate (it sends
        // O_TRUNC's without a file handle). utimensat with atime omitted
        // and mtime now looks the same: unlike Linux, a non-owner with
        // write permission may do that too.
        let data_change = attr.atime.is_none() && attr.is_now(attr.mtime);
        if attr.touches() || data_change {
            if !creds.owns_or_privileged(inode) && !attr.through_writable_file {
                self.permission(Some(creds), inode, Access::WRITE)?;
            }
        } else {
            perm::check_set_times(creds, inode)?;
        }
        Ok(attr)
    }
}

/// The facade's operations on behalf of a caller (see [`Fs::as_user`]).
/// Operations not offered here need no check beyond the ones that led to
/// the inode (reading and writing open files, `read_link`, `inode`).
#[derive(Clone, Copy)]
pub struct AsUser<'a> {
    fs: &'a Fs,
    creds: &'a Credentials,
    checked: bool,
}

impl<'a> AsUser<'a> {
    /// Whose permissions the operations check (`None`: unchecked view).
    fn caller(&self) -> Option<&'a Credentials> {
        self.checked.then_some(self.creds)
    }

    /// The caller's credentials.
    pub fn credentials(&self) -> &'a Credentials {
        self.creds
    }

    /// `name` in directory `dir`: needs search permission on `dir`.
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Result<DirEntryInfo> {
        let dir_inode = self.fs.dir_inode(dir)?;
        self.fs
            .permission(self.caller(), &dir_inode, Access::EXEC)?;
        self.fs.lookup(dir, name)
    }

    /// Opening file `ino` with open(2)'s `flags` (may_open): read and/or
    /// write permission by the access mode, write for O_TRUNC, execute for
    /// [`OPEN_FOR_EXEC`]; EISDIR for writing a directory; EPERM for
    /// writing an immutable file, and for writing an append-only one
    /// without O_APPEND or with O_TRUNC. The flag rules hold for unchecked
    /// views too (FUSE inodes carry no flags the kernel could check).
    pub fn open(&self, ino: u32, flags: i32) -> Result<InodeInfo> {
        let inode = self.fs.inode(ino)?;
        let mut want = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => Access::READ,
            libc::O_WRONLY => Access::WRITE,
            _ => Access::READ | Access::WRITE,
        };
        if flags & libc::O_TRUNC != 0 {
            want = want | Access::WRITE;
        }
        if flags & OPEN_FOR_EXEC != 0 {
            want = Access::EXEC;
        }
        let writing = want.contains(Access::WRITE);
        if writing && inode.kind == FileKind::Directory {
            return Err(Error::new(ErrorKind::IsADirectory, format!("inode {ino}")));
        }
        if writing && is_immutable(&inode) {
            return Err(Error::new(
                ErrorKind::NotPermitted,
                format!("inode {ino} is immutable"),
            ));
        }
        self.fs.permission(self.caller(), &inode, want)?;
        // f2fs_file_open: fscrypt_file_open, then fsverity_file_open.
        if inode.kind == FileKind::Regular {
            if writing {
                crate::data::check_writable(&inode)?;
            } else {
                crate::data::check_readable(&inode)?;
            }
        }
        let appends = flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0;
        if writing && !appends && is_append_only(&inode) {
            return Err(Error::new(
                ErrorKind::NotPermitted,
                format!("inode {ino} is append-only: open without O_APPEND"),
            ));
        }
        Ok(inode)
    }

    /// Opening directory `ino` to list it: needs read permission.
    pub fn open_dir(&self, ino: u32) -> Result<InodeInfo> {
        let dir = self.fs.dir_inode(ino)?;
        self.fs.permission(self.caller(), &dir, Access::READ)?;
        Ok(dir)
    }

    /// A new inode of `mode` (type bits included) in `parent`, owned as
    /// inode_init_owner says; `make` creates it with (mode, uid, gid).
    fn new_inode(
        &self,
        parent: u32,
        mode: u16,
        make: impl FnOnce(u16, (u32, u32)) -> Result<InodeInfo>,
    ) -> Result<InodeInfo> {
        let dir = self.fs.dir_inode(parent)?;
        let (uid, gid, mode) = perm::new_inode_owner(self.creds, &dir, mode);
        make(mode, (uid, gid))
    }

    /// Creates a regular file; needs write and search permission on `parent`.
    pub fn create(&self, parent: u32, name: &[u8], perm_bits: u16) -> Result<InodeInfo> {
        let requested = mode::S_IFREG | (perm_bits & 0o7777);
        self.new_inode(parent, requested, |mode, owner| {
            self.fs
                .new_plain_entry(parent, name, mode, owner, self.caller())
        })
    }

    /// Creates a directory; needs write and search permission on `parent`.
    pub fn mkdir(&self, parent: u32, name: &[u8], perm_bits: u16) -> Result<InodeInfo> {
        let requested = mode::S_IFDIR | (perm_bits & 0o7777);
        self.new_inode(parent, requested, |mode, owner| {
            self.fs
                .new_plain_entry(parent, name, mode, owner, self.caller())
        })
    }

    /// A device node, fifo or socket; devices only for privileged callers
    /// (CAP_MKNOD).
    pub fn mknod(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
    ) -> Result<InodeInfo> {
        let device = matches!(
            FileKind::from_mode(mode),
            Some(FileKind::CharDevice | FileKind::BlockDevice)
        );
        if self.checked && device && !self.creds.is_privileged() {
            return Err(Error::new(ErrorKind::NotPermitted, "mknod of a device"));
        }
        self.new_inode(parent, mode, |mode, owner| {
            self.fs
                .make_node(parent, name, mode, rdev, owner, self.caller())
        })
    }

    /// Creates a symlink; needs write and search permission on `parent`.
    pub fn symlink(&self, parent: u32, name: &[u8], target: &[u8]) -> Result<InodeInfo> {
        self.new_inode(parent, mode::S_IFLNK | 0o777, |_, owner| {
            self.fs
                .make_symlink(parent, name, target, owner, self.caller())
        })
    }

    /// A hard link: write and search permission on `new_parent`.
    pub fn link(&self, ino: u32, new_parent: u32, new_name: &[u8]) -> Result<InodeInfo> {
        self.fs.link_for(ino, new_parent, new_name, self.caller())
    }

    /// Write and search permission on `parent`; in a sticky directory the
    /// caller must own the file or the directory.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.fs.remove_entry(parent, name, false, self.caller())
    }

    /// Removes an empty directory; as [`unlink`](Self::unlink).
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.fs.remove_dir(parent, name, self.caller())
    }

    /// As unlinking the old name and adding (or replacing) the new one;
    /// moving a directory to another parent also needs write permission on
    /// it (its ".." changes). A whiteout needs a privileged caller
    /// (CAP_MKNOD) and belongs to it.
    pub fn rename(
        &self,
        parent: u32,
        name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if self.checked && flags.whiteout && !self.creds.is_privileged() {
            return Err(Error::new(ErrorKind::NotPermitted, "RENAME_WHITEOUT"));
        }
        let (from, to) = ((parent, name), (new_parent, new_name));
        self.fs
            .rename_for(from, to, flags, self.caller(), Some(self.creds))
    }

    /// chown: only privileged callers give files away, owners may change
    /// the group to one of theirs; chmod: owners and privileged callers
    /// (S_ISGID dropped for callers outside the file's group); truncating
    /// needs write permission unless `through_writable_file`; times set
    /// to now need ownership or write permission, other times ownership.
    /// Privileges dropped (`kill_privileges`) take set-group-ID unless the
    /// caller is in the file's group.
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<InodeInfo> {
        self.fs
            .setattr_for(ino, attr, self.caller(), Some(self.creds))
    }

    /// Extended attribute `name` of `inode` (`trusted.*`: privileged
    /// callers only; `user.*`: read permission).
    pub fn get_xattr(&self, inode: &InodeInfo, name: &[u8]) -> Result<Vec<u8>> {
        if let Some(creds) = self.caller() {
            perm::check_xattr(creds, inode, name, Access::READ, || {
                self.fs.acl(inode, AclKind::Access)
            })?;
        }
        self.fs.get_xattr(inode, name)
    }

    /// The extended attributes of `inode` this caller sees listed.
    pub fn xattrs(&self, inode: &InodeInfo) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut list = self.fs.xattrs(inode)?;
        if let Some(creds) = self.caller() {
            list.retain(|(name, _)| perm::lists_xattr(creds, name));
        }
        Ok(list)
    }

    /// Sets an extended attribute: `trusted.*` and `security.*` privileged
    /// callers only, `user.*` with write permission (and on a sticky
    /// directory its owner), POSIX ACLs the owner; an access ACL set by a
    /// caller outside the file's group drops S_ISGID.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        match AclKind::of_xattr(name) {
            Some(kind) => self.fs.set_acl_for(
                ino,
                kind,
                value,
                |inode| self.creds.may_keep_sgid(inode.gid),
                self.caller(),
            ),
            None => self
                .fs
                .change_xattr(ino, name, Some(value), mode, self.caller()),
        }
    }

    /// Removes an xattr; as [`set_xattr`](Self::set_xattr).
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        self.fs
            .change_xattr(ino, name, None, SetMode::Replace, self.caller())
    }

    /// FS_IOC_SETFLAGS: the owner or a privileged caller; changing
    /// immutable or append-only needs a privileged one
    /// (CAP_LINUX_IMMUTABLE).
    pub fn set_flags(&self, ino: u32, requested: u32) -> Result<InodeInfo> {
        self.fs.set_flags_for(ino, requested, self.caller())
    }

    /// FS_IOC_FSSETXATTR's project id: the owner or a privileged caller.
    pub fn set_project_id(&self, ino: u32, projid: u32) -> Result<InodeInfo> {
        self.fs.set_project_id_for(ino, projid, self.caller())
    }
}

/// vfs_fileattr_set's rules for `set_flags` by `creds`.
pub(super) fn check_set_flags(
    creds: &Credentials,
    inode: &InodeInfo,
    requested: u32,
) -> Result<()> {
    let refused = |what: &str| {
        Error::new(
            ErrorKind::NotPermitted,
            format!("inode {}: {what}", inode.ino),
        )
    };
    if !creds.owns_or_privileged(inode) {
        return Err(refused("changing flags of another user's file"));
    }
    let guarded = inode_flag::IMMUTABLE | inode_flag::APPEND;
    if (requested ^ inode.flags) & guarded != 0 && !creds.is_privileged() {
        return Err(refused("changing immutable or append-only"));
    }
    Ok(())
}
