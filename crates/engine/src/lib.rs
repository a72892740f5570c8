//! The f2fuse engine: an F2FS implementation in user space, split the way
//! the kernel's fs/f2fs is. Lower modules never use higher ones:
//!
//! `lock_order` < `invariant` < `stats` < `device` (with `sparse`) < `superblock` < `checkpoint` < `segment`
//! < `extent_cache` < `node` < `inode` < `ipu` < `flags` < `inline` < `data` < `compress`
//! < `xattr` < `acl` < `perm` < `dir` < `gc`
//! < `tunables` < `commit` < `recovery` < `report` < `fs` (the facade), with
//! `mkfs` beside `fs` using only the device and the layout crate.

pub mod acl;
pub mod checkpoint;
pub mod commit;
pub mod compress;
pub mod data;
mod dentry_cache;
pub mod device;
pub mod dir;
pub mod error;
pub mod extent_cache;
pub mod flags;
pub mod fs;
pub mod fsck;
pub mod gc;
pub mod inline;
pub mod inode;
pub mod invariant;
pub mod ipu;
pub mod lock_order;
pub mod mkfs;
pub mod node;
pub mod perm;
pub mod quota;
mod read_ahead;
pub mod recovery;
pub mod report;
pub mod segment;
pub mod sparse;
pub mod stats;
pub mod superblock;
pub mod tunables;
mod write_behind;
pub mod xattr;

pub use data::{FallocMode, SeekTarget};
pub use error::{Error, Result};
pub use fs::{AsUser, Fs, OpenOptions, StatFs};
pub use inode::{FileKind, InodeInfo, Timestamp};
pub use perm::{Access, Credentials};
pub use report::{FileExtents, Json, Status};
