//! Pinned files (F2FS_IOC_SET_PIN_FILE / F2FS_IOC_GET_PIN_FILE): files
//! whose blocks never move. Writes to them always go in place (`ipu`),
//! fallocate gives them real blocks in whole sections of the cold data log
//! (`data::fallocate`), and cleaning leaves their sections alone, counting
//! each time one was in its way in `i_gc_failures` (`gc`).

use super::locks::{Mode, WHOLE_FILE};
use super::Fs;
use crate::compress;
use crate::data;
use crate::error::{Error, ErrorKind, Result};
use crate::inline;
use crate::inode::{FileKind, InodeInfo};
use crate::ipu;
use f2fuse_layout::*;

/// The kernel keeps `i_gc_failures` in the low 16 bits of `i_current_depth`.
fn gc_failures(inode: &InodeInfo) -> u32 {
    inode.current_depth & 0xFFFF
}

impl Fs {
    /// F2FS_IOC_SET_PIN_FILE as Linux 6.1's f2fs_ioc_set_pin_file: pins
    /// (or with `pin` false unpins, resetting `i_gc_failures`) regular
    /// file `ino`; returns its `i_gc_failures` (0 when unpinning). Refused:
    /// other file types (EINVAL), a file cleaning has been stopped by more
    /// than `gc_pin_file_thresh` times (EAGAIN), a compressed file with
    /// blocks (EOPNOTSUPP; an empty one loses its compression). Inline
    /// data is moved to a block first. Pinning a file that already has
    /// blocks is allowed, as in 6.1 (later kernels refuse it with EFBIG).
    pub fn set_pin_file(&self, ino: u32, pin: bool) -> Result<u32> {
        let w = self.healthy_writer()?;
        let thresh = w.tunables.lock().gc_pin_file_thresh as u32;
        // Moving inline data out writes block 0.
        let _range = self.locks().range(ino, WHOLE_FILE, Mode::Exclusive);
        let failures = self.mutate(|ctx| {
            let _inode = self.locks().inode(ino, Mode::Exclusive);
            let inode = self.caller_inode(ctx, ino)?;
            if inode.kind != FileKind::Regular {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("inode {ino}: only regular files can be pinned"),
                ));
            }
            if !pin {
                ctx.update_inode(ino, |raw| {
                    raw.i_inline &= !inline_flag::PIN_FILE;
                    raw.i_current_depth
                        .set(raw.i_current_depth.get() & 0xFFFF_0000);
                })?;
                return Ok(None);
            }
            let failures = gc_failures(&inode);
            if failures > thresh {
                return Err(Error::new(
                    ErrorKind::WouldBlock,
                    format!("inode {ino}: cleaning failed {failures} times because of its pin"),
                ));
            }
            if inline::has_inline_data(&inode) {
                data::convert_inline_to_block(ctx, &inode)?;
            }
            if inode.compression.is_some() && compress::has_blocks(&ctx.inode(ino)?) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("inode {ino}: a compressed file with blocks cannot be pinned"),
                ));
            }
            ctx.update_inode(ino, |raw| {
                raw.i_flags.set(raw.i_flags.get() & !inode_flag::COMPR);
                raw.i_inline |= inline_flag::PIN_FILE;
            })?;
            Ok(Some(failures))
        })?;
        if failures.is_none() {
            // Sections the file held back are candidates again.
            w.gc.lock().pinned_sections.clear();
        }
        Ok(failures.unwrap_or(0))
    }

    /// F2FS_IOC_GET_PIN_FILE: `i_gc_failures` of pinned file `ino`, 0 for
    /// a file not pinned (the kernel's answer: 0 also for a pinned file
    /// cleaning never met; `is_pinned` tells the two apart).
    pub fn get_pin_file(&self, ino: u32) -> Result<u32> {
        let inode = self.inode(ino)?;
        Ok(if ipu::is_pinned(&inode) {
            gc_failures(&inode)
        } else {
            0
        })
    }

    /// Whether file `ino` is pinned (what FS_IOC_GETFLAGS shows as NOCOW).
    pub fn is_pinned(&self, ino: u32) -> Result<bool> {
        Ok(ipu::is_pinned(&self.inode(ino)?))
    }
}
