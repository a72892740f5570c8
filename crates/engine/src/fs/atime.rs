//! Access times: which reads update a file's atime (the mount options
//! strictatime, relatime, noatime), and the update, written lazily.

use super::locks::Mode;
use super::Fs;
use crate::error::Result;
use crate::inode::{set_atime, InodeInfo};
use crate::time::Timestamp;
use f2fuse_layout::inode_flag;

/// When reads update the access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    /// `relatime`, Linux's default: when the atime is not newer than the
    /// mtime or the ctime, or is a day old.
    #[default]
    Relative,
    /// `strictatime`: on every read.
    Strict,
    /// `noatime`: never.
    Never,
}

/// A `relatime` atime older than this is updated by the next read.
const RELATIME_MAX_AGE_SECS: i64 = 24 * 60 * 60;

impl AtimePolicy {
    /// Whether a read at `at` updates the atime of `inode` (the kernel's
    /// atime_needs_update and relatime_need_update); never for an inode
    /// with the no-atime flag (chattr +A).
    pub fn is_due(self, inode: &InodeInfo, at: Timestamp) -> bool {
        if inode.flags & inode_flag::NOATIME != 0 {
            return false;
        }
        match self {
            AtimePolicy::Never => false,
            AtimePolicy::Strict => inode.atime != at,
            AtimePolicy::Relative => {
                inode.mtime >= inode.atime
                    || inode.ctime >= inode.atime
                    || at.sec - inode.atime.sec >= RELATIME_MAX_AGE_SECS
            }
        }
    }
}

impl Fs {
    /// Records a read of `ino` now under `policy` (touch_atime). The new
    /// atime goes into the inode's node in the node cache, which the next
    /// checkpoint or fsync of the file writes: a read costs no device
    /// write. Nothing happens on a read-only or failed file system.
    /// Returns whether the atime changed.
    pub fn note_access(&self, ino: u32, policy: AtimePolicy) -> Result<bool> {
        if policy == AtimePolicy::Never || self.healthy_writer().is_err() {
            return Ok(false);
        }
        let at = self.writer().clock.inodes.read().now();
        // Most reads change nothing: decide without the inode lock first.
        if !policy.is_due(&self.inode(ino)?, at) {
            return Ok(false);
        }
        self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            if !policy.is_due(&inode, at) {
                return Ok(false);
            }
            ctx.update_inode(ino, |raw| set_atime(raw, at))?;
            Ok(true)
        })
    }
}
