//! Open counts, orphans and freeing inodes (the kernel's evict_inode and
//! orphan list).

use super::locks::Mode;
use super::Fs;
use crate::data;
use crate::error::Result;
use crate::inode::{set_ctime, Ctx};
use crate::xattr;
use f2fuse_layout::Corrupt;

impl Fs {
    /// Notes that `ino` is open (unlinking it then keeps it until `release`).
    pub fn open_inode(&self, ino: u32) -> Result<()> {
        if let Some(w) = &self.writer {
            *w.open_counts.lock().entry(ino).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Drops one open reference; frees the inode if it was the last one and
    /// the inode is unlinked. Returns whether references remain.
    pub fn release(&self, ino: u32) -> Result<bool> {
        let Some(w) = &self.writer else {
            return Ok(false);
        };
        let remaining = {
            let mut counts = w.open_counts.lock();
            let Some(count) = counts.get_mut(&ino) else {
                return Ok(false);
            };
            *count -= 1;
            let left = *count;
            if left == 0 {
                counts.remove(&ino);
            }
            left
        };
        if remaining == 0 && w.orphans.lock().contains(&ino) {
            self.mutate(|_| {
                let _inode = self.locks().inode(ino, Mode::Exclusive);
                // Another release may have freed it while this one waited.
                if w.orphans.lock().remove(&ino) {
                    self.evict(ino)?;
                }
                Ok(())
            })?;
        }
        Ok(remaining > 0)
    }

    /// Frees an inode with no links: its data, nodes and xattrs. The caller
    /// holds its inode lock exclusively (or is alone: opening).
    pub(super) fn evict(&self, ino: u32) -> Result<()> {
        let ctx = self.ctx();
        let inode = ctx.inode(ino)?;
        data::truncate_blocks(&ctx, ino, 0)?;
        if inode.xattr_nid != 0 {
            xattr::free_xattr_node(&ctx, ino, inode.xattr_nid)?;
        }
        ctx.free_node(ino, true)
    }

    /// Drops one link of `ino` (its inode lock held exclusively); frees it
    /// at zero links unless it is open.
    pub(super) fn drop_link(&self, ctx: &Ctx, ino: u32) -> Result<()> {
        let t = ctx.clock.now();
        let links = ctx.try_update_inode(ino, |raw| {
            let links = raw.i_links.get().checked_sub(1).ok_or_else(|| {
                Corrupt::new("inode", format!("inode {ino}: unlinking with i_links 0"))
            })?;
            raw.i_links.set(links);
            set_ctime(raw, t);
            Ok(links)
        })?;
        if links == 0 {
            let w = self.writer();
            if w.open_counts.lock().contains_key(&ino) {
                w.orphans.lock().insert(ino);
            } else {
                self.evict(ino)?;
            }
        }
        Ok(())
    }

    /// Inodes unlinked while open, freed at their last release.
    pub fn orphans(&self) -> Vec<u32> {
        match &self.writer {
            Some(w) => w.orphans.lock().iter().copied().collect(),
            None => self.cp.read().orphans.clone(),
        }
    }
}
