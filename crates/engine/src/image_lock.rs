//! The exclusive lock every opener of an image takes before writing it (a
//! mount, the CLI's write commands, a library caller asking for it in
//! [`OpenOptions`](crate::OpenOptions)), so that two writers never share
//! an image.

use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// An exclusive lock on an image: while it is held no other f2fuse can
/// mount or write the image. Block devices are also claimed with O_EXCL,
/// which fails while the kernel has the device mounted. Dropping it lets
/// go.
#[derive(Debug)]
pub struct ImageLock {
    _file: File,
}

/// How long a locker waits for an earlier daemon of the same image to let
/// go of it: after an unmount the daemon still writes its last checkpoint,
/// and `umount; mount` must work.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Takes the [`ImageLock`] of `image`, waiting (up to 10 s) for a daemon
/// whose mount is gone; an image still mounted is refused at once
/// ([`ErrorKind::Busy`]).
pub fn lock_image(image: &Path) -> Result<ImageLock> {
    let meta = std::fs::metadata(image).map_err(|e| Error::io("opening the image", e))?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    if meta.file_type().is_block_device() {
        opts.custom_flags(libc::O_EXCL);
    }
    let file = opts.open(image).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => Error::new(
            ErrorKind::Busy,
            "the device is busy (mounted by the kernel?)",
        ),
        _ => Error::io("opening the image", e),
    })?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(ImageLock { _file: file });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(Error::io("locking the image", e));
        }
        if is_mount_source(image) || Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Busy,
                "the image is already mounted (another f2fuse process holds its lock); \
                 unmount it first",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a FUSE mount names `image` as its source in /proc/self/mountinfo
/// (a daemon's default `fsname`).
fn is_mount_source(image: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let Ok(image) = image.canonicalize() else {
        return false;
    };
    let wanted = image.as_os_str().as_bytes();
    info.lines().any(|line| {
        // After the optional fields: " - TYPE SOURCE SUPER_OPTIONS".
        let Some((_, tail)) = line.split_once(" - ") else {
            return false;
        };
        let mut fields = tail.split(' ');
        let is_fuse = fields.next().is_some_and(|t| t.starts_with("fuse"));
        is_fuse
            && fields
                .next()
                .is_some_and(|s| unescape_mountinfo(s) == wanted)
    })
}

/// A path field of /proc/self/mountinfo with its octal escapes (`\040`
/// for a space, ...) undone.
pub fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |c: &u8| (b'0'..=b'7').contains(c);
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(octal) {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u16, |acc, c| acc * 8 + (c - b'0') as u16);
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}
