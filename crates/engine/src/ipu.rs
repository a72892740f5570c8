//! In-place updates (IPU): when a rewrite of a block that already has an
//! address goes back to that address instead of the log head, as the
//! kernel's f2fs_should_update_outplace / f2fs_should_update_inplace /
//! check_inplace_update_policy (fs/f2fs/data.c, Linux 6.1) decide it.
//!
//! Why it is safe here: a data block's address names one (inode, index)
//! from its allocation until the checkpoint after it is freed (no block
//! allocated or valid since the last checkpoint is handed out again before
//! the next one, `segment`), and it moves only by being rewritten elsewhere
//! (a new address). So every state a power cut can lead back to (the
//! checkpoint, or an fsync chain replayed over it) maps a block written in
//! place to the same file block, or not at all: a cut during the write
//! leaves that block's old or new content, or a mix of the two (torn),
//! never another file's data and never a wrong mapping. Cleaning holds the
//! operation lock exclusively and a write step holds it shared from
//! mapping to device write, so the cleaner never copies a block away while
//! it is being rewritten in place.

use crate::inode::{FileKind, InodeInfo};
use f2fuse_layout::*;

/// Bits of `ipu_policy` (the kernel's enum in segment.h).
pub mod ipu_bit {
    /// Every rewrite in place.
    pub const FORCE: u8 = 0;
    /// In place while the data logs use SSR (the kernel's need_SSR).
    pub const SSR: u8 = 1;
    /// In place while utilization is above `min_ipu_util`.
    pub const UTIL: u8 = 2;
    /// Both of the above at once.
    pub const SSR_UTIL: u8 = 3;
    /// In place for small writes that an fsync makes durable.
    pub const FSYNC: u8 = 4;
    /// Asynchronous write-back in place: f2fuse has none (every write is
    /// on the device when it is answered), so this bit never matches.
    #[allow(dead_code)] // the kernel's bit, kept so the numbering reads as segment.h's
    pub const ASYNC: u8 = 5;
    /// Do not merge in-place bios in the kernel's cache: f2fuse submits
    /// every write at once, so this bit changes nothing.
    #[allow(dead_code)] // the kernel's bit, kept so the numbering reads as segment.h's
    pub const NOCACHE: u8 = 6;
    /// Out of place for inodes marked FI_OPU_WRITE: f2fuse's own rewrites
    /// that the kernel would mark (moving blocks for collapse/insert range,
    /// compressing) are always out of place, so this bit changes nothing.
    pub const HONOR_OPU_WRITE: u8 = 7;
    /// Number of bits (values below 2^MAX are valid).
    pub const MAX: u8 = 8;
}

/// The kernel's defaults (segment.h, super.c's f2fs_tuning_parameters):
/// FSYNC, but FORCE with HONOR_OPU_WRITE on a main area of at most
/// `SMALL_VOLUME_SEGMENTS` (16 GiB).
pub const DEFAULT_IPU_POLICY: u8 = 1 << ipu_bit::FSYNC;
pub const SMALL_VOLUME_IPU_POLICY: u8 = 1 << ipu_bit::FORCE | 1 << ipu_bit::HONOR_OPU_WRITE;
pub const SMALL_VOLUME_SEGMENTS: u32 = 16 * 512;
pub const DEFAULT_MIN_IPU_UTIL: u8 = 70;
pub const DEFAULT_MIN_FSYNC_BLOCKS: u32 = 8;

/// The in-place update tunables (`ipu_policy`, `min_ipu_util`,
/// `min_fsync_blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpuPolicy {
    pub bits: u8,
    pub min_ipu_util: u8,
    pub min_fsync_blocks: u32,
}

impl IpuPolicy {
    /// The kernel's defaults for a main area of `main_segments`.
    pub fn kernel_default(main_segments: u32) -> IpuPolicy {
        IpuPolicy {
            bits: if main_segments <= SMALL_VOLUME_SEGMENTS {
                SMALL_VOLUME_IPU_POLICY
            } else {
                DEFAULT_IPU_POLICY
            },
            min_ipu_util: DEFAULT_MIN_IPU_UTIL,
            min_fsync_blocks: DEFAULT_MIN_FSYNC_BLOCKS,
        }
    }

    fn has(&self, bit: u8) -> bool {
        self.bits & (1 << bit) != 0
    }
}

/// What a write tells the policy about itself and the file system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteState {
    /// The data logs use SSR now (the kernel's f2fs_need_SSR).
    pub need_ssr: bool,
    /// Valid user blocks in percent of the user blocks (the kernel's
    /// utilization()).
    pub utilization: u64,
    /// The write is small and an fsync follows: the blocks written to the
    /// file since its last fsync, this write included, are at most
    /// `min_fsync_blocks` (the analogue of the kernel's FI_NEED_IPU, set
    /// while fsync writes back at most that many dirty pages; the daemon
    /// writes at write time, so it counts the blocks in between).
    pub fsync_bound: bool,
}

/// Whether `inode` is pinned (F2FS_IOC_SET_PIN_FILE).
pub fn is_pinned(inode: &InodeInfo) -> bool {
    inode.has_inline(inline_flag::PIN_FILE)
}

/// The kernel's f2fs_should_update_outplace: files whose rewrites always
/// go to the log head (the kernel's other cases, LFS mode, atomic writes,
/// quota files, GC'ed pages, do not arise here). Compressed files too:
/// their clusters are rewritten whole, out of place (the kernel may
/// rewrite a raw cluster in place).
pub fn must_update_out_of_place(inode: &InodeInfo) -> bool {
    inode.kind != FileKind::Regular || inode.compression.is_some()
}

/// Whether a rewrite of blocks of `inode` that already have addresses goes
/// in place (f2fs_should_update_inplace over check_inplace_update_policy).
/// `policy` None marks f2fuse's internal rewrites (symlinks, inline
/// conversion, moved and compressed blocks): never in place.
pub fn should_update_in_place(
    inode: &InodeInfo,
    policy: Option<IpuPolicy>,
    state: WriteState,
) -> bool {
    let Some(policy) = policy else {
        return false;
    };
    if must_update_out_of_place(inode) {
        return false;
    }
    // Pinned files never move; cold files are overwritten against fragmentation.
    if is_pinned(inode) || inode.advise & fadvise::COLD != 0 {
        return true;
    }
    let util = state.utilization > policy.min_ipu_util as u64;
    policy.has(ipu_bit::FORCE)
        || (policy.has(ipu_bit::SSR) && state.need_ssr)
        || (policy.has(ipu_bit::UTIL) && util)
        || (policy.has(ipu_bit::SSR_UTIL) && state.need_ssr && util)
        || (policy.has(ipu_bit::FSYNC) && state.fsync_bound)
}
