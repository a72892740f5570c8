//! The f2fuse engine: an F2FS file system in user space, as a library.
//!
//! Open an image with [`Fs::open_path`] (or a [`BlockDevice`] with
//! [`Fs::open`] / [`Fs::open_writable`]), then work on inodes: look names
//! up, read and write files, list directories. [`Fs`] is `Send + Sync`;
//! operations from many threads run in parallel. [`Fs::as_user`] runs the
//! same operations with a caller's permission checks. The path layer
//! ([`Fs::resolve`], [`Fs::read_path`], [`Fs::write_path`],
//! [`Fs::walk`]) works on whole paths for callers that do not keep inode
//! numbers. [`format`]/[`format_path`] make a new file system, [`fsck`]
//! checks one. Errors carry an [`ErrorKind`] to match on.
//!
//! ```
//! use f2fuse_engine::{format_device, fsck, FileKind, Fs, MemDevice, MkfsOptions};
//! use std::sync::Arc;
//!
//! # fn main() -> f2fuse_engine::Result<()> {
//! // A new 64 MiB file system in memory.
//! let image = Arc::new(MemDevice::new(64 << 20));
//! format_device(Box::new(image.clone()), &MkfsOptions::default())?;
//!
//! // Open it for writing, make a directory and a file in it.
//! let fs = Fs::open_writable(Box::new(image.clone()))?;
//! let root = fs.resolve("/")?;
//! let docs = fs.mkdir(root.ino, b"docs", 0o755, 0, 0)?;
//! let note = fs.create(docs.ino, b"note.txt", 0o644, 0, 0)?;
//! fs.write(note.ino, 0, b"hello, f2fs")?;
//! fs.write_path("/docs/other.txt", b"written by path")?;
//!
//! // Walk the tree and read a file back.
//! let mut files = Vec::new();
//! fs.walk("/", |path, inode| {
//!     if inode.kind == FileKind::Regular {
//!         files.push(path.to_string());
//!     }
//!     Ok(())
//! })?;
//! files.sort();
//! assert_eq!(files, ["/docs/note.txt", "/docs/other.txt"]);
//! assert_eq!(fs.read_path("/docs/note.txt")?, b"hello, f2fs");
//!
//! // Write everything back, then check the image as fsck does.
//! fs.unmount()?;
//! let fs = Fs::open(Box::new(image))?;
//! let report = fsck(&fs)?;
//! assert!(report.problems.is_empty(), "{:?}", report.problems);
//! # Ok(())
//! # }
//! ```
//!
//! Inside, the engine is split the way the kernel's fs/f2fs is. A module
//! uses only the modules before it in this order, its layering (the
//! `layering` test reads this list and checks every `crate::` path of the
//! sources against it):
//!
//! `error` < `lock_order` < `invariant` < `stats` < `time` < `dentry_cache` < `read_ahead`
//! < `write_behind` < `device` < `image_lock` < `sparse` < `superblock`
//! < `checkpoint` < `segment` < `extent_cache` < `quota` < `node` < `inode`
//! < `ipu` < `flags` < `inline` < `data` < `compress` < `xattr` < `acl`
//! < `perm` < `dir` < `gc` < `tunables` < `commit` < `recovery` < `report`
//! < `mkfs` < `fs` (the facade) < `fsck`

// Every item of the public API is documented; `internals` is not (it is
// off unless a dependent asks for it, as the docs check does not).
#![cfg_attr(not(feature = "internals"), warn(missing_docs))]

mod acl;
mod checkpoint;
mod commit;
mod compress;
mod data;
mod dentry_cache;
mod device;
mod dir;
mod error;
mod extent_cache;
mod flags;
mod fs;
mod fsck;
mod gc;
mod image_lock;
mod inline;
mod inode;
mod invariant;
mod ipu;
mod lock_order;
mod mkfs;
mod node;
mod perm;
mod quota;
mod read_ahead;
mod recovery;
mod report;
mod segment;
mod sparse;
mod stats;
mod superblock;
mod time;
mod tunables;
mod write_behind;
mod xattr;

// Opening an image, the file system and its callers.
pub use device::{BlockDevice, FileDevice, FileDeviceOptions, MemDevice};
pub use fs::{AsUser, Fs, OpenOptions, OPEN_FOR_EXEC};
pub use image_lock::{lock_image, unescape_mountinfo, ImageLock};
pub use perm::{lists_xattr, sgid_depends_on_groups, Access, Credentials};
pub use sparse::{
    encode_sparse_file, expand_sparse_file, is_sparse_file, write_sparse, RawWorkCopy, SparseDevice,
};

// What operations take and return.
pub use acl::AclKind;
pub use compress::{CompressMode, CompressOptions};
pub use data::{FallocMode, SeekTarget};
pub use dir::DirEntryInfo;
pub use fs::{AtimePolicy, RenameFlags, SetAttr, StatFs, TimeSet};
pub use inode::{FileKind, InodeInfo};
pub use time::{wall_time, Timestamp};
pub use xattr::SetMode;

// Errors.
pub use error::{Error, ErrorKind, Result};
pub use f2fuse_layout::Corrupt;

// Statistics and reports.
pub use device::IoStats;
pub use extent_cache::ExtentCacheStats;
pub use gc::GcStats;
pub use node::NodeCacheStats;
pub use report::{FileExtents, Json, LogStatus, Status};
pub use segment::{AllocStats, SegmentCounts};

// Quotas and tunables.
pub use fs::enforcement_bit;
pub use quota::{type_by_name as quota_type_by_name, Limits as QuotaLimits};
pub use quota::{GRPQUOTA, PRJQUOTA, TYPE_NAMES as QUOTA_TYPE_NAMES, USRQUOTA};
pub use tunables::{
    lookup as tunable_info, parse_assignment as parse_tunable, parse_value as parse_tunable_value,
    GcMode, TunableInfo, TUNABLES,
};

// Making and checking a file system.
pub use fsck::{check as fsck, FsckReport};
pub use mkfs::{format_device, format_path, parse_features, MkfsOptions, MkfsReport};

/// The engine's modules and the state [`Fs`] keeps, for the fuzzers, the
/// white-box tests and the CLI's `inspect`. Not a stable API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    /// Makes the engine's module `m` reachable as `internals::m`.
    macro_rules! expose {
        ($($m:ident),*) => {
            $(
                #[doc = concat!("The engine's `", stringify!($m), "` module.")]
                pub mod $m {
                    pub use crate::$m::*;
                }
            )*
        };
    }
    expose!(
        acl,
        checkpoint,
        commit,
        compress,
        data,
        device,
        dir,
        error,
        extent_cache,
        flags,
        fs,
        fsck,
        gc,
        inline,
        inode,
        ipu,
        lock_order,
        mkfs,
        node,
        perm,
        quota,
        recovery,
        report,
        segment,
        sparse,
        stats,
        superblock,
        tunables,
        xattr
    );

    use crate::checkpoint::CheckpointState;
    use crate::device::Device;
    use crate::node::NodeManager;
    use crate::segment::SitTable;
    use crate::superblock::LoadedSuperblock;
    use crate::{Fs, Result};
    use parking_lot::RwLockReadGuard;
    use std::sync::Arc;

    /// The parts of an open [`Fs`] that tests and debugging tools look at
    /// directly.
    pub trait FsInternals {
        /// The superblock as loaded, with what was wrong with the other copy.
        fn loaded_superblock(&self) -> &LoadedSuperblock;
        /// The checkpoint in memory.
        fn checkpoint_state(&self) -> RwLockReadGuard<'_, CheckpointState>;
        /// The node manager (NAT and node blocks).
        fn node_manager(&self) -> &NodeManager;
        /// The device with its I/O counters.
        fn device(&self) -> &Device;
        /// The SIT as of the loaded checkpoint.
        fn sit(&self) -> Result<Arc<SitTable>>;
    }

    impl FsInternals for Fs {
        fn loaded_superblock(&self) -> &LoadedSuperblock {
            Fs::loaded_superblock(self)
        }
        fn checkpoint_state(&self) -> RwLockReadGuard<'_, CheckpointState> {
            Fs::checkpoint_state(self)
        }
        fn node_manager(&self) -> &NodeManager {
            Fs::node_manager(self)
        }
        fn device(&self) -> &Device {
            Fs::device(self)
        }
        fn sit(&self) -> Result<Arc<SitTable>> {
            Fs::sit(self)
        }
    }
}

#[cfg(test)]
mod layering;
