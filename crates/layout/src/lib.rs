//! The F2FS on-disk format as Linux 6.1 and f2fs-tools 1.15 write it:
//! structures with the kernel's field names, constants, the CRC, the dentry
//! name hash and casefolding, the mkfs layout computation and validation. No I/O happens
//! here; every decoder returns [`Corrupt`] naming what is wrong instead of
//! panicking on hostile bytes.

pub mod bitmap;
pub mod casefold;
pub mod checkpoint;
pub mod compress;
pub mod consts;
pub mod crc;
pub mod dentry;
pub mod error;
pub mod fscrypt;
pub mod geometry;
pub mod hash;
pub mod node;
pub mod quota;
pub mod segment;
pub mod superblock;
pub mod xattr;

pub use consts::*;
pub use error::{Corrupt, Result};
