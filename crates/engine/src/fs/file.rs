//! File data and attributes: write, fallocate, seek, setattr, set_flags.
//! Data changes hold the blocks they touch (range locks) and the inode
//! lock shared; attribute changes hold the inode lock exclusively.

use super::locks::{Mode, RangeGuard, WHOLE_FILE};
use super::{Fs, FsCounter, Writer};
use crate::acl::AclKind;
use crate::data::{self, DataPolicy, FallocMode, SeekTarget};
use crate::error::{Error, ErrorKind, Result};
use crate::flags::{self, deny_if_immutable, deny_if_locked};
use crate::inline;
use crate::inode::{set_atime, set_ctime, set_mtime, FileKind, InodeInfo};
use crate::perm::{without_privileges, Credentials};
use crate::time::Timestamp;
use crate::xattr::{self, SetMode};
use f2fuse_layout::*;
use std::ops::Range;

/// A time to set: an explicit value or "now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time.
    Now,
    /// This time.
    At(Timestamp),
}

/// Attribute changes for `setattr`; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    /// Permission bits (0o7777); the file type is kept.
    pub mode: Option<u16>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size: truncates or extends with a hole.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
    /// The change time to record instead of the current time: a kernel
    /// that keeps file times itself (FUSE with the writeback cache) sends
    /// the one it gave the change.
    pub ctime: Option<Timestamp>,
    /// Also drop privileges as the VFS does for ATTR_KILL_SUID/SGID/PRIV
    /// (a write, truncate or fallocate by someone without CAP_FSETID, or
    /// any chown): clear set-user-ID, set-group-ID if group-executable or
    /// the changer is outside the file's group
    /// (`perm::without_privileges`), and the
    /// `security.capability` xattr. Directories are left alone.
    pub kill_privileges: bool,
    /// The change comes through a file opened for writing (ftruncate, or a
    /// kernel recording the mtime of a write to it): write permission was
    /// checked when it was opened, and a write may set the mtime.
    pub through_writable_file: bool,
}

impl SetAttr {
    fn is_empty(&self) -> bool {
        !self.kill_privileges
            && self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
            && self.ctime.is_none()
    }

    /// Whether `t` is "now": asked as such, or the time the change time
    /// is also given (a kernel that keeps file times itself sends "now" as
    /// its clock's value).
    pub(super) fn is_now(&self, t: Option<TimeSet>) -> bool {
        match t {
            Some(TimeSet::Now) => true,
            Some(TimeSet::At(at)) => self.ctime == Some(at),
            None => false,
        }
    }

    /// Both times set to now (utime(path, NULL), touch).
    pub(super) fn touches(&self) -> bool {
        self.is_now(self.atime) && self.is_now(self.mtime)
    }

    /// EPERM for what the immutable and append-only flags forbid (the
    /// VFS's notify_change and truncate rules).
    fn check_flags(&self, inode: &InodeInfo) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        deny_if_immutable(inode, "attribute change")?;
        if self.size.is_some() {
            deny_if_locked(inode, "truncate")?;
        }
        if self.mode.is_some() || self.uid.is_some() || self.gid.is_some() {
            deny_if_locked(inode, "mode or owner change")?;
        }
        // Times set to now (utime(path, NULL), a write's mtime) are allowed
        // on append-only files; given times are not (notify_change's
        // ATTR_TIMES_SET). A kernel keeping times itself reports a write
        // as mtime + ctime without atime.
        let write_times = self.ctime.is_some() && self.atime.is_none();
        let explicit = |t: Option<TimeSet>| matches!(t, Some(TimeSet::At(_)));
        if !self.touches() && (explicit(self.atime) || (explicit(self.mtime) && !write_times)) {
            deny_if_locked(inode, "setting times")?;
        }
        Ok(())
    }
}

/// File capabilities, dropped with set-user-ID (see `SetAttr::kill_privileges`).
const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// EISDIR for a directory, EINVAL for other files that are not regular
/// (what write(2) and truncate(2) answer).
fn require_regular(inode: &InodeInfo) -> Result<()> {
    match inode.kind {
        FileKind::Regular => Ok(()),
        FileKind::Directory => Err(Error::new(
            ErrorKind::IsADirectory,
            format!("inode {}", inode.ino),
        )),
        _ => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("inode {} is not a regular file", inode.ino),
        )),
    }
}

/// The blocks bytes `[offset, offset + len)` touch (at least one block).
pub(super) fn blocks_of(offset: u64, len: u64) -> Range<u64> {
    let bs = F2FS_BLKSIZE as u64;
    let end = offset.saturating_add(len.max(1));
    offset / bs..end.div_ceil(bs)
}

/// A write is done in steps of this size, so cleaning can run between them.
pub(super) const WRITE_STEP: usize = 1 << 20;

/// Where one step of a write goes, and whether block 0 is held.
#[derive(Clone, Copy)]
struct Step {
    offset: u64,
    holds_block_zero: bool,
    /// The request's last step.
    last: bool,
}

impl Fs {
    /// Runs `change` holding `blocks` of `ino` exclusively. A file still
    /// inline needs block 0 held too (moving its inline bytes out writes
    /// block 0): `change`, told whether block 0 is held, answers None when
    /// it finds the file inline without it, before changing anything, and
    /// runs again holding it. So the common case reads the inode once.
    /// An `ordered` write waits (bounded) for an ordered write of the
    /// blocks just before to finish (`Locks::ordered_write_range`).
    fn with_blocks<R>(
        &self,
        ino: u32,
        mut blocks: Range<u64>,
        ordered: bool,
        mut change: impl FnMut(&RangeGuard, bool) -> Result<Option<R>>,
    ) -> Result<R> {
        loop {
            let range = if ordered {
                self.locks().ordered_write_range(ino, blocks.clone())
            } else {
                self.locks().range(ino, blocks.clone(), Mode::Exclusive)
            };
            if let Some(done) = change(&range, blocks.start == 0)? {
                return Ok(done);
            }
            blocks.start = 0;
        }
    }

    /// Writes `data` at `offset` of file `ino`; returns the bytes written
    /// (short at the largest file size, or when space runs out midway).
    /// Overlapping writes, reads, truncation and fallocate of the same
    /// blocks wait for each other; large writes go in 1 MiB steps (cleaning
    /// may run between them), all holding the request's blocks.
    pub fn write(&self, ino: u32, offset: u64, buf: &[u8]) -> Result<usize> {
        let w = self.healthy_writer()?;
        let mut policy = self.data_policy.load();
        let written = blocks_of(offset, buf.len() as u64);
        policy.fsync_bound = self.note_unsynced(w, ino, &policy, written.end - written.start);
        // The blocks a write into reservations may zero out around it are held too.
        let blocks = data::zeroout_window(self.whole_clusters(ino, written), policy.zeroout_blocks);
        // Serialized writes also allocate in file order (per file).
        let serialize_from = policy.serialize_from;
        let ordered = serialize_from != 0 && blocks.end - blocks.start >= serialize_from;
        let done = self.with_blocks(ino, blocks, ordered, |range, holds_block_zero| {
            let mut generation = None;
            let mut done = 0;
            let steps = buf.len().div_ceil(WRITE_STEP);
            for (i, chunk) in buf.chunks(WRITE_STEP).enumerate() {
                let step = Step {
                    offset: offset + done as u64,
                    holds_block_zero,
                    last: i + 1 == steps,
                };
                // A short step ends the write; so does an error once some
                // bytes are written (a short write: the caller sees the error next).
                match self.write_step(ino, step, chunk, policy, range, &mut generation) {
                    Ok(None) => return Ok(None),
                    Ok(Some(n)) => {
                        done += n;
                        if n < chunk.len() {
                            break;
                        }
                    }
                    Err(e) if done == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            if buf.is_empty() {
                let step = Step {
                    offset,
                    holds_block_zero,
                    last: true,
                };
                return self.write_step(ino, step, buf, policy, range, &mut generation);
            }
            Ok(Some(done))
        })?;
        self.counters
            .add(FsCounter::UserBytesWritten as usize, done as u64);
        Ok(done)
    }

    /// One step of `write` (None: the file is inline and block 0 is not
    /// held; nothing was written); `generation` makes later steps fail with
    /// ESTALE if the inode was freed and its number reused meanwhile.
    /// The last step tells ordered writes after this one when its blocks
    /// are allocated (also when it fails).
    fn write_step(
        &self,
        ino: u32,
        step: Step,
        buf: &[u8],
        policy: DataPolicy,
        range: &RangeGuard,
        generation: &mut Option<u32>,
    ) -> Result<Option<usize>> {
        let allocated = || {
            if step.last {
                range.allocated();
            }
        };
        let written = self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Shared);
            let inode = self.caller_inode(ctx, ino)?;
            if !step.holds_block_zero && inline::has_inline_data(&inode) {
                return Ok(None);
            }
            if generation.is_some_and(|g| g != inode.generation) {
                return Err(Error::new(
                    ErrorKind::Stale,
                    format!("inode {ino} was replaced"),
                ));
            }
            *generation = Some(inode.generation);
            require_regular(&inode)?;
            crate::data::check_writable(&inode)?;
            deny_if_immutable(&inode, "writing")?;
            if flags::is_append_only(&inode) && step.offset < inode.size {
                self.check_unchanged(&inode, step.offset, buf)?;
            }
            let mode = self.compress_mode();
            crate::compress::write_data(ctx, ino, step.offset, buf, policy, mode, &allocated)
                .map(Some)
        });
        allocated();
        written
    }

    /// Counts `blocks` written to `ino` since its last fsync; returns
    /// whether the file stays within `min_fsync_blocks` (the FSYNC
    /// in-place policy's test, see `ipu::WriteState::fsync_bound`).
    fn note_unsynced(&self, w: &Writer, ino: u32, policy: &DataPolicy, blocks: u64) -> bool {
        let Some(ipu) = policy.ipu else {
            return false;
        };
        w.unsynced_blocks.add(ino, blocks) <= ipu.min_fsync_blocks as u64
    }

    /// EPERM unless writing `buf` at `offset` leaves the bytes an
    /// append-only file already has as they are. The kernel enforces
    /// append-only at open (O_APPEND), but with the FUSE writeback cache
    /// an append reaches us as a rewrite of the last partial page, so a
    /// write below the end is refused only if it would change data.
    fn check_unchanged(&self, inode: &InodeInfo, offset: u64, buf: &[u8]) -> Result<()> {
        let overlap = (inode.size - offset).min(buf.len() as u64) as usize;
        let mut old = vec![0u8; overlap];
        let n = crate::compress::read_data(
            &self.dev,
            &self.nm,
            inode,
            offset,
            &mut old,
            self.data_policy.load(),
        )?;
        if n != overlap || old != buf[..overlap] {
            return Err(Error::new(
                ErrorKind::NotPermitted,
                format!("inode {} is append-only: changing its data", inode.ino),
            ));
        }
        Ok(())
    }

    /// fallocate(2) on regular file `ino`: preallocation, hole punching,
    /// zeroing, collapsing and inserting ranges (see [`FallocMode`]).
    /// Collapse and insert move the whole file's blocks: they hold all of
    /// it and the inode lock exclusively; the others hold their range.
    pub fn fallocate(&self, ino: u32, offset: u64, len: u64, mode: FallocMode) -> Result<()> {
        self.healthy_writer()?;
        let shifts = matches!(mode, FallocMode::CollapseRange | FallocMode::InsertRange);
        let (blocks, inode_mode) = if shifts {
            (WHOLE_FILE, Mode::Exclusive)
        } else {
            (blocks_of(offset, len), Mode::Shared)
        };
        self.with_blocks(ino, blocks, false, |_, holds_block_zero| {
            self.mutate(|ctx| {
                let _inode = self.locks().inode(ino, inode_mode);
                let inode = self.caller_inode(ctx, ino)?;
                if !holds_block_zero && inline::has_inline_data(&inode) {
                    return Ok(None);
                }
                match inode.kind {
                    FileKind::Regular => {
                        crate::data::check_writable(&inode)?;
                        crate::compress::fallocate(ctx, ino, offset, len, mode).map(Some)
                    }
                    FileKind::Directory => {
                        Err(Error::new(ErrorKind::IsADirectory, format!("inode {ino}")))
                    }
                    // As the VFS: fallocate on a fifo is ESPIPE, on other files ENODEV.
                    FileKind::Fifo => {
                        Err(Error::new(ErrorKind::IllegalSeek, format!("inode {ino}")))
                    }
                    _ => Err(Error::new(ErrorKind::NoDevice, format!("inode {ino}"))),
                }
            })
        })
    }

    /// lseek(2) SEEK_DATA / SEEK_HOLE on file `ino` from byte `offset`.
    pub fn seek(&self, ino: u32, offset: u64, target: SeekTarget) -> Result<u64> {
        let _read = self.read_guard();
        let _inode = self.inode_read_lock(ino);
        let inode = self.inode(ino)?;
        if inode.kind == FileKind::Directory {
            return Err(Error::new(ErrorKind::IsADirectory, format!("inode {ino}")));
        }
        data::seek(&self.nm, &inode, offset, target)
    }

    /// Changes attributes; returns the inode afterwards. A size change
    /// holds the whole file (no write or read of it runs meanwhile).
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<InodeInfo> {
        self.setattr_for(ino, attr, None, None)
    }

    /// `setattr` checked for `caller` (if given), made by `changer` (whose
    /// groups decide whether dropped privileges take set-group-ID).
    pub(super) fn setattr_for(
        &self,
        ino: u32,
        attr: &SetAttr,
        caller: Option<&Credentials>,
        changer: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        self.healthy_writer()?;
        let _range = attr
            .size
            .map(|_| self.locks().range(ino, WHOLE_FILE, Mode::Exclusive));
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            attr.check_flags(&inode)?;
            let checked;
            let attr = match caller {
                Some(creds) => {
                    checked = self.check_setattr(creds, &inode, attr)?;
                    &checked
                }
                None => attr,
            };
            // fscrypt_prepare_setattr, fsverity_prepare_setattr.
            if attr.size.is_some() && inode.kind == FileKind::Regular {
                crate::data::check_writable(&inode)?;
            }
            self.check_owner_transfer(&inode, attr.uid, attr.gid)?;
            let kill = attr.kill_privileges && inode.kind != FileKind::Directory;
            // The group before a chown decides (chown_common).
            let gid = inode.gid;
            let mode = match attr.mode {
                Some(perm) if kill => Some(without_privileges(perm, gid, changer)),
                None if kill => Some(without_privileges(inode.mode & 0o7777, gid, changer))
                    .filter(|&perm| perm != inode.mode & 0o7777),
                other => other,
            };
            if kill {
                match xattr::set_xattr(ctx, ino, CAPABILITY_XATTR, None, SetMode::Replace) {
                    Err(e) if e.kind() == ErrorKind::NoData => {}
                    other => other?,
                }
            }
            if let Some(perm) = mode {
                // chmod rewrites the access ACL to agree (posix_acl_chmod).
                if let Some(mut acl) = self.acl(&inode, AclKind::Access)? {
                    acl.chmod(perm);
                    let bytes = acl.to_bytes();
                    let name = AclKind::Access.xattr_name();
                    xattr::set_xattr(ctx, ino, name, Some(&bytes), SetMode::Replace)?;
                }
            }
            if let Some(size) = attr.size {
                require_regular(&inode)?;
                crate::compress::truncate(ctx, ino, size)?;
            }
            let t = ctx.clock.now();
            let resolve = |ts: TimeSet| match ts {
                TimeSet::Now => t,
                TimeSet::At(x) => x,
            };
            ctx.update_inode(ino, |raw| {
                if let Some(perm) = mode {
                    raw.i_mode
                        .set((raw.i_mode.get() & mode::S_IFMT) | (perm & 0o7777));
                }
                if let Some(uid) = attr.uid {
                    raw.i_uid.set(uid);
                }
                if let Some(gid) = attr.gid {
                    raw.i_gid.set(gid);
                }
                if let Some(a) = attr.atime {
                    set_atime(raw, resolve(a));
                }
                if let Some(m) = attr.mtime {
                    set_mtime(raw, resolve(m));
                }
                set_ctime(raw, attr.ctime.unwrap_or(t));
            })
        })?;
        self.inode(ino)
    }

    /// FS_IOC_SETFLAGS: stores the settable FS_*_FL bits of `requested`
    /// (see `flags`); the caller checks who may change immutable and
    /// append-only (CAP_LINUX_IMMUTABLE). Returns the inode afterwards.
    pub fn set_flags(&self, ino: u32, requested: u32) -> Result<InodeInfo> {
        self.set_flags_for(ino, requested, None)
    }

    pub(super) fn set_flags_for(
        &self,
        ino: u32,
        requested: u32,
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            if let Some(creds) = caller {
                super::perm::check_set_flags(creds, &inode, requested)?;
            }
            let stored = flags::flags_to_store(&inode, requested, self.superblock().feature.get())?;
            if (stored ^ inode.flags) & inode_flag::CASEFOLD != 0
                && !crate::dir::is_empty_dir(ctx, &inode)?
            {
                return Err(Error::new(
                    ErrorKind::NotEmpty,
                    format!("casefolding of non-empty directory {ino}"),
                ));
            }
            let options = self.compress_options();
            let t = ctx.clock.now();
            ctx.try_update_inode(ino, |raw| {
                crate::compress::apply_compr_flag(&inode, raw, stored, &options)?;
                raw.i_flags.set(stored);
                set_ctime(raw, t);
                Ok(())
            })
        })?;
        self.inode(ino)
    }
}
