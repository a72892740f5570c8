//! Conversions between the engine's types and FUSE's.

use f2fuse_engine::{FileKind, InodeInfo, Timestamp};
use f2fuse_layout::F2FS_ROOT_INO;
use fuser::{FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// FUSE's root node id (the kernel always uses 1 for the root).
pub const FUSE_ROOT: u64 = 1;

/// FUSE node id -> F2FS inode number. The root is 1 for FUSE and 3 for F2FS;
/// every other inode keeps its F2FS number (F2FS numbers 1 and 2 are the
/// node and meta inodes, which are never visible).
pub fn to_f2fs(ino: INodeNo) -> Option<u32> {
    match ino.0 {
        FUSE_ROOT => Some(F2FS_ROOT_INO),
        n if n > FUSE_ROOT && n <= u32::MAX as u64 && n != F2FS_ROOT_INO as u64 => Some(n as u32),
        _ => None,
    }
}

/// F2FS inode number -> FUSE node id.
pub fn to_fuse(ino: u32) -> INodeNo {
    if ino == F2FS_ROOT_INO {
        INodeNo(FUSE_ROOT)
    } else {
        INodeNo(ino as u64)
    }
}

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

pub fn system_time(t: Timestamp) -> SystemTime {
    let nsec = Duration::from_nanos(t.nsec.min(999_999_999) as u64);
    let at = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.sec as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.sec.unsigned_abs()))
    };
    at.and_then(|a| a.checked_add(nsec)).unwrap_or(UNIX_EPOCH)
}

pub fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                Timestamp {
                    sec: -secs,
                    nsec: 0,
                }
            } else {
                Timestamp {
                    sec: -secs - 1,
                    nsec: 1_000_000_000 - d.subsec_nanos(),
                }
            }
        }
    }
}

/// Linux `new_encode_dev`: the dev_t layout FUSE uses for rdev.
pub fn encode_dev((major, minor): (u32, u32)) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Linux `new_decode_dev`.
pub fn decode_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// The attributes stat(2) shows for an inode.
pub fn file_attr(inode: &InodeInfo) -> FileAttr {
    FileAttr {
        ino: to_fuse(inode.ino),
        size: inode.size,
        blocks: inode.stat_sectors(),
        atime: system_time(inode.atime),
        mtime: system_time(inode.mtime),
        ctime: system_time(inode.ctime),
        crtime: inode.crtime.map(system_time).unwrap_or(UNIX_EPOCH),
        kind: file_type(inode.kind),
        perm: inode.mode & 0o7777,
        nlink: inode.links,
        uid: inode.uid,
        gid: inode.gid,
        rdev: match inode.kind {
            FileKind::CharDevice | FileKind::BlockDevice => encode_dev(inode.rdev),
            _ => 0,
        },
        blksize: 4096,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_map_both_ways() {
        assert_eq!(to_f2fs(INodeNo(1)), Some(3));
        assert_eq!(to_fuse(3), INodeNo(1));
        assert_eq!(to_f2fs(INodeNo(4)), Some(4));
        assert_eq!(to_fuse(4), INodeNo(4));
        // 3 is never a FUSE node id (the root is 1), nor are 0 and 2^32.
        assert_eq!(to_f2fs(INodeNo(3)), None);
        assert_eq!(to_f2fs(INodeNo(0)), None);
        assert_eq!(to_f2fs(INodeNo(1 << 32)), None);
    }

    #[test]
    fn times_round_trip() {
        for (sec, nsec) in [
            (0, 0),
            (1_700_000_000, 123_456_789),
            (-1, 0),
            (-2, 800_000_000),
        ] {
            let t = Timestamp { sec, nsec };
            assert_eq!(timestamp(system_time(t)), t);
        }
    }

    #[test]
    fn dev_numbers_round_trip() {
        for dev in [(0, 0), (8, 1), (259, 65_536), (4095, 0xfffff)] {
            assert_eq!(decode_dev(encode_dev(dev)), dev);
        }
        // Linux makedev(8, 1) = 0x801.
        assert_eq!(encode_dev((8, 1)), 0x801);
    }
}
