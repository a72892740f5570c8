//! The ioctls the kernel forwards to us, decoded.
//!
//! chattr and lsattr do not reach a FUSE daemon with their own ioctls: the
//! VFS turns FS_IOC_GETFLAGS/SETFLAGS into its fileattr calls, and FUSE's
//! fileattr_get/set send FUSE_IOCTL with FS_IOC_GETFLAGS/SETFLAGS (a 4-byte
//! int) when flags are asked for, and FS_IOC_FSGETXATTR/FSSETXATTR (struct
//! fsxattr) otherwise, which includes the read of the old attributes before
//! every set. FS_IOC_GETVERSION and F2FS's compression ioctls arrive as the
//! program sent them (FUSE forwards ioctls whose size the number encodes).

use fuser::Errno;

const FS_IOC_GETFLAGS: u32 = libc::FS_IOC_GETFLAGS as u32;
const FS_IOC_SETFLAGS: u32 = libc::FS_IOC_SETFLAGS as u32;
const FS_IOC_GETVERSION: u32 = libc::FS_IOC_GETVERSION as u32;
/// _IOR('X', 31, struct fsxattr) and _IOW('X', 32, struct fsxattr).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// F2FS's compression ioctls (include/uapi/linux/f2fs.h, magic 0xf5):
/// _IOR(.., u64) for the block counts, _IOR/_IOW(.., struct
/// f2fs_comp_option) and _IO for the file conversions.
const F2FS_IOC_GET_COMPRESS_BLOCKS: u32 = 0x8008_f511;
const F2FS_IOC_RELEASE_COMPRESS_BLOCKS: u32 = 0x8008_f512;
const F2FS_IOC_RESERVE_COMPRESS_BLOCKS: u32 = 0x8008_f513;
const F2FS_IOC_GET_COMPRESS_OPTION: u32 = 0x8002_f515;
const F2FS_IOC_SET_COMPRESS_OPTION: u32 = 0x4002_f516;
const F2FS_IOC_DECOMPRESS_FILE: u32 = 0x0000_f517;
const F2FS_IOC_COMPRESS_FILE: u32 = 0x0000_f518;

/// F2FS_IOC_SET_PIN_FILE _IOW(.., 13, __u32) and F2FS_IOC_GET_PIN_FILE
/// _IOR(.., 14, __u32).
const F2FS_IOC_SET_PIN_FILE: u32 = 0x4004_f50d;
const F2FS_IOC_GET_PIN_FILE: u32 = 0x8004_f50e;

/// Size of struct fsxattr: xflags, extsize, nextents, projid, cowextsize, 8 pad bytes.
pub const FSXATTR_SIZE: usize = 28;
const FSX_PROJID_AT: usize = 12;

/// FS_XFLAG_* bits and the FS_*_FL flags they stand for (the VFS's
/// fileattr_fill_xflags/fileattr_fill_flags pairs).
const XFLAG_TO_FLAG: &[(u32, u32)] = &[
    (0x0000_0008, 0x0000_0010), // IMMUTABLE
    (0x0000_0010, 0x0000_0020), // APPEND
    (0x0000_0020, 0x0000_0008), // SYNC
    (0x0000_0040, 0x0000_0080), // NOATIME
    (0x0000_0080, 0x0000_0040), // NODUMP
    (0x0000_0200, 0x2000_0000), // PROJINHERIT
    (0x0000_8000, 0x0200_0000), // DAX
];

/// The FS_*_FL flags an fsxattr can express (the VFS's FS_COMMON_FL).
pub const COMMON_FLAGS: u32 = {
    let mut all = 0;
    let mut i = 0;
    while i < XFLAG_TO_FLAG.len() {
        all |= XFLAG_TO_FLAG[i].1;
        i += 1;
    }
    all
};

/// One decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    GetFlags,
    SetFlags(u32),
    GetVersion,
    FsGetXattr,
    /// The FS_*_FL equivalent of the requested xflags, and the project id.
    FsSetXattr {
        flags: u32,
        projid: u32,
    },
    Compression(Compression),
    /// F2FS_IOC_SET_PIN_FILE: pin (true) or unpin.
    SetPin(bool),
    /// F2FS_IOC_GET_PIN_FILE.
    GetPin,
}

/// F2FS's compression ioctls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    GetBlocks,
    ReleaseBlocks,
    ReserveBlocks,
    GetOption,
    /// struct f2fs_comp_option: the algorithm and log2 of the cluster size.
    SetOption {
        algorithm: u8,
        log_cluster_size: u8,
    },
    DecompressFile,
    CompressFile,
}

impl From<Compression> for Command {
    fn from(c: Compression) -> Command {
        Command::Compression(c)
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// Decodes `cmd` with its input; ENOTTY for ioctls we do not handle, EINVAL
/// for a malformed argument or an output buffer too small for the answer.
pub fn decode(cmd: u32, in_data: &[u8], out_size: u32) -> Result<Command, Errno> {
    let need_out = |size: usize| {
        if (out_size as usize) < size {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    };
    match cmd {
        FS_IOC_GETFLAGS => need_out(4).map(|()| Command::GetFlags),
        FS_IOC_GETVERSION => need_out(4).map(|()| Command::GetVersion),
        FS_IOC_FSGETXATTR => need_out(FSXATTR_SIZE).map(|()| Command::FsGetXattr),
        F2FS_IOC_GET_COMPRESS_BLOCKS => need_out(8).map(|()| Compression::GetBlocks.into()),
        F2FS_IOC_RELEASE_COMPRESS_BLOCKS => need_out(8).map(|()| Compression::ReleaseBlocks.into()),
        F2FS_IOC_RESERVE_COMPRESS_BLOCKS => need_out(8).map(|()| Compression::ReserveBlocks.into()),
        F2FS_IOC_GET_COMPRESS_OPTION => need_out(2).map(|()| Compression::GetOption.into()),
        F2FS_IOC_SET_COMPRESS_OPTION => match in_data {
            [algorithm, log_cluster_size, ..] => Ok(Compression::SetOption {
                algorithm: *algorithm,
                log_cluster_size: *log_cluster_size,
            }
            .into()),
            _ => Err(Errno::EINVAL),
        },
        F2FS_IOC_DECOMPRESS_FILE => Ok(Compression::DecompressFile.into()),
        F2FS_IOC_COMPRESS_FILE => Ok(Compression::CompressFile.into()),
        F2FS_IOC_SET_PIN_FILE => u32_at(in_data, 0)
            .map(|pin| Command::SetPin(pin != 0))
            .ok_or(Errno::EINVAL),
        F2FS_IOC_GET_PIN_FILE => need_out(4).map(|()| Command::GetPin),
        FS_IOC_SETFLAGS => u32_at(in_data, 0)
            .map(Command::SetFlags)
            .ok_or(Errno::EINVAL),
        FS_IOC_FSSETXATTR => {
            if in_data.len() < FSXATTR_SIZE {
                return Err(Errno::EINVAL);
            }
            let xflags = u32_at(in_data, 0).ok_or(Errno::EINVAL)?;
            let mut flags = 0;
            let mut known = 0;
            for &(x, f) in XFLAG_TO_FLAG {
                known |= x;
                if xflags & x != 0 {
                    flags |= f;
                }
            }
            if xflags & !known != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            let projid = u32_at(in_data, FSX_PROJID_AT).ok_or(Errno::EINVAL)?;
            Ok(Command::FsSetXattr { flags, projid })
        }
        _ => Err(Errno::ENOTTY),
    }
}

/// The struct fsxattr answering FS_IOC_FSGETXATTR for inode flags `flags`.
pub fn fsxattr(flags: u32, projid: u32) -> [u8; FSXATTR_SIZE] {
    let xflags = XFLAG_TO_FLAG
        .iter()
        .filter(|&&(_, f)| flags & f != 0)
        .fold(0, |acc, &(x, _)| acc | x);
    let mut out = [0u8; FSXATTR_SIZE];
    out[0..4].copy_from_slice(&xflags.to_ne_bytes());
    out[FSX_PROJID_AT..FSX_PROJID_AT + 4].copy_from_slice(&projid.to_ne_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_linux() {
        // _IOC(dir, type, nr, size) = dir << 30 | size << 16 | type << 8 | nr
        let ioc =
            |dir: u32, ty: u8, nr: u32, size: u32| dir << 30 | size << 16 | (ty as u32) << 8 | nr;
        assert_eq!(FS_IOC_FSGETXATTR, ioc(2, b'X', 31, FSXATTR_SIZE as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(1, b'X', 32, FSXATTR_SIZE as u32));
        assert_eq!(FS_IOC_GETFLAGS, ioc(2, b'f', 1, 8));
        assert_eq!(F2FS_IOC_GET_COMPRESS_BLOCKS, ioc(2, 0xf5, 17, 8));
        assert_eq!(F2FS_IOC_RELEASE_COMPRESS_BLOCKS, ioc(2, 0xf5, 18, 8));
        assert_eq!(F2FS_IOC_RESERVE_COMPRESS_BLOCKS, ioc(2, 0xf5, 19, 8));
        assert_eq!(F2FS_IOC_GET_COMPRESS_OPTION, ioc(2, 0xf5, 21, 2));
        assert_eq!(F2FS_IOC_SET_COMPRESS_OPTION, ioc(1, 0xf5, 22, 2));
        assert_eq!(F2FS_IOC_DECOMPRESS_FILE, ioc(0, 0xf5, 23, 0));
        assert_eq!(F2FS_IOC_COMPRESS_FILE, ioc(0, 0xf5, 24, 0));
        assert_eq!(F2FS_IOC_SET_PIN_FILE, ioc(1, 0xf5, 13, 4));
        assert_eq!(F2FS_IOC_GET_PIN_FILE, ioc(2, 0xf5, 14, 4));
    }

    #[test]
    fn fsxattr_round_trips_the_common_flags() {
        let flags = 0x10 | 0x20 | 0x40 | 0x2000_0000;
        let encoded = fsxattr(flags, 7);
        assert_eq!(
            decode(FS_IOC_FSSETXATTR, &encoded, 0),
            Ok(Command::FsSetXattr { flags, projid: 7 })
        );
        // Flags without an xflag (here FS_INDEX_FL) are not expressed.
        assert_eq!(fsxattr(0x1000, 0), [0u8; FSXATTR_SIZE]);
        let mut unknown = [0u8; FSXATTR_SIZE];
        unknown[0] = 0x01; // FS_XFLAG_REALTIME
        assert_eq!(
            decode(FS_IOC_FSSETXATTR, &unknown, 0),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            decode(FS_IOC_FSSETXATTR, &unknown[..8], 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(decode(FS_IOC_GETFLAGS, &[], 2), Err(Errno::EINVAL));
        assert_eq!(decode(0x1234, &[], 8), Err(Errno::ENOTTY));
        assert_eq!(
            decode(F2FS_IOC_SET_COMPRESS_OPTION, &[2, 4], 0),
            Ok(Command::Compression(Compression::SetOption {
                algorithm: 2,
                log_cluster_size: 4
            }))
        );
        assert_eq!(
            decode(F2FS_IOC_SET_COMPRESS_OPTION, &[2], 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            decode(F2FS_IOC_GET_COMPRESS_BLOCKS, &[], 4),
            Err(Errno::EINVAL)
        );
    }
}
