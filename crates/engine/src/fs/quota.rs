//! Quota files on a writable open: loaded before anything can change usage
//! (orphans, recovery), written by every checkpoint, and the library's
//! view of usage and limits (`get_quota`, `set_quota_limits`,
//! `set_quota_enforcement`) and project ids (`set_project_id`).

use super::locks::Mode;
use super::{Fs, StatFs};
use crate::data;
use crate::error::{Error, ErrorKind, Result};
use crate::inode::{FileKind, InodeInfo};
use crate::perm::Credentials;
use crate::quota::{no_quota_file, Limits, Quota, QUOTA_TYPES};
use f2fuse_layout::node::I_PROJID_OFFSET;
use f2fuse_layout::quota::{Dquot, QuotaFile, QT_BLKSIZE};
use f2fuse_layout::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Starts quota accounting on an image with the `quota` feature: reads
    /// the files the superblock names. As the kernel, a checkpoint marked
    /// CP_QUOTA_NEED_FSCK is not trusted (no accounting; the mark stays
    /// until fsck.f2fs repairs the files), and a file that cannot be read
    /// sets that mark instead of failing the open.
    pub(super) fn load_quota(&self) -> Result<()> {
        let sb = self.superblock();
        if sb.feature.get() & feature::QUOTA_INO == 0 {
            return Ok(());
        }
        let w = self.writer();
        if self.cp.read().cp.ckpt_flags.get() & cp_flag::QUOTA_NEED_FSCK != 0 {
            w.quota_need_fsck.store(true, Ordering::Relaxed);
            return Ok(());
        }
        let qf_inos: [u32; QUOTA_TYPES] = std::array::from_fn(|t| sb.qf_ino[t].get());
        let mut files: [Option<QuotaFile>; QUOTA_TYPES] = Default::default();
        for (qtype, &ino) in qf_inos.iter().enumerate() {
            if ino == 0 {
                continue;
            }
            match self.read_quota_file(qtype, ino) {
                Ok(file) => files[qtype] = Some(file),
                Err(Error::Corrupt(_)) => {
                    w.quota_need_fsck.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let quota = Quota::new(qf_inos, sb.feature.get(), files);
        self.nm.set_quota(Arc::new(quota));
        Ok(())
    }

    fn read_quota_file(&self, qtype: usize, ino: u32) -> Result<QuotaFile> {
        let inode = self.inode(ino)?;
        // Quota files have no holes: a size beyond the blocks it holds is
        // corruption (and no reason to allocate that much).
        if inode.kind != FileKind::Regular || inode.size > inode.blocks * F2FS_BLKSIZE as u64 {
            return Err(Corrupt::new(
                "quota file",
                format!("inode {ino}: {:?} of {} bytes", inode.kind, inode.size),
            )
            .into());
        }
        let mut bytes = vec![0u8; inode.size as usize];
        let mut done = 0;
        while done < bytes.len() {
            let n = data::read_data(
                &self.dev,
                &self.nm,
                &inode,
                done as u64,
                &mut bytes[done..],
                self.data_policy.load(),
            )?;
            if n == 0 {
                break;
            }
            done += n;
        }
        QuotaFile::parse(qtype, &bytes).map_err(|e| Error::from(e).at(format!("inode {ino}")))
    }

    /// Writes the quota blocks changed since the last checkpoint into the
    /// quota files (through the data path, as the kernel writes its
    /// quota files' pages inside a checkpoint). The caller holds `op_lock`
    /// exclusively, so the files match the checkpoint being written.
    pub(super) fn write_quota_files(&self) -> Result<()> {
        let Some(quota) = self.nm.quota() else {
            return Ok(());
        };
        let ctx = self.ctx();
        let qf_inos = quota.qf_inos();
        for (qtype, blk, bytes) in quota.take_changes() {
            let offset = blk as u64 * QT_BLKSIZE as u64;
            let written = data::write_data(
                &ctx,
                qf_inos[qtype],
                offset,
                &bytes,
                self.data_policy.load(),
                &|| {},
            )?;
            if written != bytes.len() {
                return Err(Error::new(ErrorKind::NoSpace, "writing a quota file"));
            }
        }
        Ok(())
    }

    /// Whether the next checkpoint must ask for a quota repair
    /// (CP_QUOTA_NEED_FSCK): the files could not be trusted at open.
    pub(super) fn quota_needs_fsck(&self) -> bool {
        self.writer().quota_need_fsck.load(Ordering::Relaxed)
    }

    /// Usage and limits of `id` for quota type `qtype` (0 user, 1 group,
    /// 2 project) as the next checkpoint writes them; ENOENT if the image
    /// keeps no such quota file (or the open is read-only: use
    /// [`quota_file`](Self::quota_file) there).
    pub fn get_quota(&self, qtype: usize, id: u32) -> Result<Dquot> {
        self.nm
            .quota()
            .and_then(|q| q.get(qtype, id))
            .ok_or_else(|| no_quota_file(qtype))
    }

    /// Every id with an entry in the quota file of `qtype`, with its usage
    /// and limits: the live state on a writable open, the file as the
    /// checkpoint left it on a read-only one.
    pub fn quota_file(&self, qtype: usize) -> Result<Vec<(u32, Dquot)>> {
        if let Some(q) = self.nm.quota() {
            return Ok(q.all(qtype));
        }
        let ino = self
            .superblock()
            .qf_ino
            .get(qtype)
            .map(|i| i.get())
            .filter(|&i| i != 0 && self.superblock().feature.get() & feature::QUOTA_INO != 0)
            .ok_or_else(|| no_quota_file(qtype))?;
        let _read = self.read_guard();
        let file = self.read_quota_file(qtype, ino)?;
        Ok(file
            .ids()
            .filter_map(|id| file.get(id).map(|d| (id, d)))
            .collect())
    }

    /// Every quota file as a table (as repquota): per id the KiB used,
    /// block soft and hard limits (KiB), inodes, inode soft and hard
    /// limits, and the grace deadlines running. ENOENT if the image has no
    /// quota files.
    pub fn quota_report(&self) -> Result<String> {
        let mut out = String::new();
        for (qtype, name) in crate::quota::TYPE_NAMES.iter().enumerate() {
            let entries = match self.quota_file(qtype) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let ino = self.superblock().qf_ino[qtype].get();
            out += &format!("{name} quota (inode {ino})\n");
            out += &format!(
                "{:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}  grace\n",
                "id", "used KiB", "soft", "hard", "inodes", "soft", "hard"
            );
            for (id, d) in entries {
                let grace = match (d.btime, d.itime) {
                    (0, 0) => String::new(),
                    (b, i) => format!("blocks until {b}, inodes until {i}"),
                };
                out += &format!(
                    "{id:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}  {grace}\n",
                    d.curspace.div_ceil(1024),
                    d.bsoftlimit,
                    d.bhardlimit,
                    d.curinodes,
                    d.isoftlimit,
                    d.ihardlimit
                );
            }
        }
        if out.is_empty() {
            return Err(Error::new(
                ErrorKind::NotFound,
                "the image has no quota files (mkfs -O quota or project_quota)",
            ));
        }
        Ok(out)
    }

    /// statfs(2) of a path inside the file system: as [`statfs`](Self::statfs),
    /// but in a directory with PROJINHERIT, while project limits are
    /// enforced, the project's limits and usage stand for the size and free
    /// space (f2fs_statfs_project: `df` of a project directory).
    pub fn statfs_at(&self, ino: u32) -> Result<StatFs> {
        let mut st = self.statfs();
        let Some(quota) = self.nm.quota() else {
            return Ok(st);
        };
        let inode = self.inode(ino)?;
        if inode.flags & inode_flag::PROJINHERIT == 0
            || quota.enforced() & (1 << crate::quota::PRJQUOTA) == 0
        {
            return Ok(st);
        }
        let Some(d) = quota.get(crate::quota::PRJQUOTA, inode.projid(self.check.features)) else {
            return Ok(st);
        };
        let min_not_zero = |a: u64, b: u64| if a == 0 || (b != 0 && b < a) { b } else { a };
        let block_limit =
            min_not_zero(d.bsoftlimit, d.bhardlimit).saturating_mul(1024) / F2FS_BLKSIZE as u64;
        if block_limit != 0 && st.blocks > block_limit {
            st.blocks = block_limit;
            st.blocks_free = block_limit.saturating_sub(d.curspace / F2FS_BLKSIZE as u64);
            st.blocks_available = st.blocks_free;
        }
        let inode_limit = min_not_zero(d.isoftlimit, d.ihardlimit);
        if inode_limit != 0 && st.files > inode_limit {
            st.files = inode_limit;
            st.files_free = inode_limit.saturating_sub(d.curinodes);
        }
        Ok(st)
    }

    /// Sets the limits of `id` for quota type `qtype` (as setquota(8));
    /// written by the next checkpoint.
    pub fn set_quota_limits(&self, qtype: usize, id: u32, limits: &Limits) -> Result<()> {
        let _op = self.write_guard()?;
        self.nm
            .quota()
            .ok_or_else(|| no_quota_file(qtype))?
            .set_limits(qtype, id, limits)
    }

    /// Enforces the limits of the quota types in `types` (bit 0 user, 1
    /// group, 2 project: the kernel's usrquota, grpquota, prjquota mount
    /// options); usage is tracked either way.
    pub fn set_quota_enforcement(&self, types: u8) -> Result<()> {
        self.writable()?;
        if let Some(q) = self.nm.quota() {
            q.set_enforced(types);
        }
        Ok(())
    }

    /// FS_IOC_FSSETXATTR's project id (f2fs_ioc_setproject): moves the
    /// inode's usage to project `projid`. Without project_quota only 0 is
    /// accepted (EOPNOTSUPP otherwise); EOPNOTSUPP for an inode without
    /// extra attributes, EPERM for a quota file, EOVERFLOW where the field
    /// lies outside the inode's extra area; EDQUOT if the new project's
    /// limits do not admit the inode (dquot_transfer).
    pub fn set_project_id(&self, ino: u32, projid: u32) -> Result<InodeInfo> {
        self.set_project_id_for(ino, projid, None)
    }

    /// [`set_project_id`](Self::set_project_id) for `caller` (if any): the
    /// owner or a privileged caller only (vfs_fileattr_set).
    pub(super) fn set_project_id_for(
        &self,
        ino: u32,
        projid: u32,
        caller: Option<&Credentials>,
    ) -> Result<InodeInfo> {
        let features = self.check.features;
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            if caller.is_some_and(|creds| !creds.owns_or_privileged(&inode)) {
                return Err(Error::new(
                    ErrorKind::NotPermitted,
                    format!("inode {ino}: changing the project of another user's file"),
                ));
            }
            if features & feature::PRJQUOTA == 0 {
                return if projid == 0 {
                    Ok(())
                } else {
                    Err(Error::new(
                        ErrorKind::Unsupported,
                        "no project_quota feature",
                    ))
                };
            }
            if inode.layout.extra_words == 0 {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "inode without extra attributes",
                ));
            }
            if inode.projid(features) == projid {
                return Ok(());
            }
            if self.nm.quota().is_some_and(|q| q.is_quota_inode(ino)) {
                return Err(Error::new(ErrorKind::NotPermitted, "a quota file"));
            }
            if inode.layout.extra_words * 4 < I_PROJID_OFFSET + 4 - node::I_ADDR_OFFSET {
                return Err(Error::new(ErrorKind::Overflow, "no room for i_projid"));
            }
            if let Some(q) = self.nm.quota() {
                q.check_transfer(crate::quota::PRJQUOTA, projid, inode.blocks - 1)?;
            }
            let t = ctx.clock.now();
            ctx.update_inode_block(ino, |block, _| {
                block[I_PROJID_OFFSET..I_PROJID_OFFSET + 4].copy_from_slice(&projid.to_le_bytes());
                crate::inode::set_ctime(node::inode_of_mut(block), t);
            })
        })?;
        self.inode(ino)
    }
}

impl Fs {
    /// chown/chgrp of `inode` to `uid`/`gid`: EDQUOT where the new
    /// owner's enforced limits do not admit it (dquot_transfer). The usage
    /// itself moves with the inode block's change.
    pub(super) fn check_owner_transfer(
        &self,
        inode: &InodeInfo,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let Some(quota) = self.nm.quota() else {
            return Ok(());
        };
        let space_blocks = inode.blocks - 1;
        for (qtype, new, old) in [
            (crate::quota::USRQUOTA, uid, inode.uid),
            (crate::quota::GRPQUOTA, gid, inode.gid),
        ] {
            if let Some(id) = new.filter(|&id| id != old) {
                quota.check_transfer(qtype, id, space_blocks)?;
            }
        }
        Ok(())
    }

    /// A name for `inode` in `dir`: EXDEV where `dir` has PROJINHERIT and
    /// another project (f2fs_link, f2fs_rename), so a project's usage
    /// cannot be escaped through links and renames.
    pub(super) fn check_same_project(&self, dir: &InodeInfo, inode: &InodeInfo) -> Result<()> {
        let features = self.check.features;
        if dir.flags & inode_flag::PROJINHERIT != 0
            && dir.projid(features) != inode.projid(features)
        {
            return Err(Error::new(
                ErrorKind::CrossDevice,
                format!(
                    "inode {} of project {} into a directory of project {}",
                    inode.ino,
                    inode.projid(features),
                    dir.projid(features)
                ),
            ));
        }
        Ok(())
    }
}

/// Quota types as bits for [`Fs::set_quota_enforcement`], from the
/// kernel's mount option names (usrquota, grpquota, prjquota; quota = usrquota).
pub fn enforcement_bit(option: &str) -> Option<u8> {
    match option {
        "usrquota" | "quota" => Some(1 << crate::quota::USRQUOTA),
        "grpquota" => Some(1 << crate::quota::GRPQUOTA),
        "prjquota" => Some(1 << crate::quota::PRJQUOTA),
        _ => None,
    }
}
