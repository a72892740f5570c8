//! The f2fuse engine: an F2FS implementation in user space, split the way
//! the kernel's fs/f2fs is. Lower modules never use higher ones:
//!
//! `device` < `superblock` < `checkpoint` < `segment` < `node` < `inode`
//! < `inline` < `data` < `xattr` < `dir` < `recovery` < `fs` (the facade),
//! with `mkfs` beside `fs` using only the device and the layout crate.

pub mod checkpoint;
pub mod commit;
pub mod data;
pub mod device;
pub mod dir;
pub mod error;
pub mod fs;
pub mod fsck;
pub mod gc;
pub mod inline;
pub mod inode;
pub mod mkfs;
pub mod node;
pub mod recovery;
pub mod segment;
pub mod superblock;
pub mod xattr;

pub use error::{Error, Result};
pub use fs::{Fs, OpenOptions, StatFs};
pub use inode::{FileKind, InodeInfo, Timestamp};
