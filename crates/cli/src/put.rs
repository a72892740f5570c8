//! `put`: copy one host file into an image.

use crate::rw::{self, copy_data, show, with_image, CopyError};
use clap::Args;
use f2fuse_engine::{FileKind, Fs, SetAttr, TimeSet, Timestamp};
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct PutArgs {
    pub image: PathBuf,
    /// The host file to copy (symlinks are followed).
    pub local_file: PathBuf,
    /// Destination inside the image: a new or existing regular file, or an
    /// existing directory to copy into under the file's own name.
    pub path: OsString,
}

pub fn run(args: &PutArgs) -> Result<(), String> {
    let local = &args.local_file;
    let meta = std::fs::metadata(local).map_err(|e| format!("{}: {e}", local.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", local.display()));
    }
    if let Ok(image) = std::fs::metadata(&args.image) {
        if (image.dev(), image.ino()) == (meta.dev(), meta.ino()) {
            return Err(format!("{}: is the image itself", local.display()));
        }
    }
    let file = open_source(local).map_err(|e| format!("{}: {e}", local.display()))?;
    let dest = args.path.as_bytes();
    with_image(&args.image, |fs| {
        let target = destination(fs, dest, local)?;
        check_overwritable(&target)?;
        let (uid, gid) = if rw::is_root() {
            (meta.uid(), meta.gid())
        } else {
            rw::caller_ids()
        };
        let ino = match &target.existing {
            Some(inode) => {
                // Overwrite in place (other hard links see the new data, as with cp).
                fs.setattr(
                    inode.ino,
                    &SetAttr {
                        size: Some(0),
                        ..Default::default()
                    },
                )
                .map_err(|e| rw::fail(&target.shown, &e))?;
                inode.ino
            }
            None => {
                fs.create(
                    target.parent,
                    &target.name,
                    (meta.mode() & 0o7777) as u16,
                    uid,
                    gid,
                )
                .map_err(|e| rw::fail(&target.shown, &e))?
                .ino
            }
        };
        let copied = copy_data(fs, ino, &file, meta.len(), &mut |_| {})
            .map_err(|e| match e {
                CopyError::Host(e) => format!("{}: {e}", local.display()),
                CopyError::Image(e) => rw::fail(&target.shown, &e),
            })
            .and_then(|()| {
                fs.setattr(ino, &attrs_of(&meta, uid, gid, Some(meta.len())))
                    .map_err(|e| rw::fail(&target.shown, &e))
            });
        if copied.is_err() && target.existing.is_none() {
            // Leave no partial new file behind (e.g. when the image is full).
            let _ = fs.unlink(target.parent, &target.name);
        }
        copied.map(|_| ())
    })
}

/// Opens a host file for reading without changing its atime where allowed.
pub fn open_source(path: &Path) -> std::io::Result<File> {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => File::open(path),
        other => other,
    }
}

/// Mode, owner and times of a host entry as a `setattr` request.
pub fn attrs_of(meta: &Metadata, uid: u32, gid: u32, size: Option<u64>) -> SetAttr {
    SetAttr {
        mode: Some((meta.mode() & 0o7777) as u16),
        uid: Some(uid),
        gid: Some(gid),
        size,
        atime: Some(TimeSet::At(Timestamp {
            sec: meta.atime(),
            nsec: meta.atime_nsec() as u32,
        })),
        mtime: Some(TimeSet::At(Timestamp {
            sec: meta.mtime(),
            nsec: meta.mtime_nsec() as u32,
        })),
        ctime: None,
        // Copying a host file: its mode is taken as it is, set-user-ID too.
        kill_privileges: false,
        through_writable_file: false,
    }
}

struct Target {
    parent: u32,
    name: Vec<u8>,
    /// An existing regular file to overwrite.
    existing: Option<f2fuse_engine::InodeInfo>,
    shown: String,
}

fn destination(fs: &Fs, dest: &[u8], local: &Path) -> Result<Target, String> {
    let into_dir = |dir: u32, dir_path: &[u8]| -> Result<Target, String> {
        let name = rw::basename(local.as_os_str().as_bytes())
            .ok_or_else(|| format!("{}: has no file name", local.display()))?
            .to_vec();
        let full = [dir_path, b"/", &name].concat();
        let slot = rw::slot(fs, &full)?;
        Ok(Target {
            parent: dir,
            name,
            existing: slot.existing,
            shown: show(&full).replace("//", "/"),
        })
    };
    // A path that cannot resolve is reported by `slot` below.
    if let Some(found) = rw::resolve(fs, dest).ok().flatten() {
        if found.kind == FileKind::Directory {
            return into_dir(found.ino, dest);
        }
    } else if dest.ends_with(b"/") && rw::resolve(fs, dest).is_ok() {
        return Err(format!("{}: no such directory", show(dest)));
    }
    let slot = rw::slot(fs, dest)?;
    Ok(Target {
        parent: slot.parent.ino,
        name: slot.name,
        existing: slot.existing,
        shown: show(dest),
    })
}

fn check_overwritable(target: &Target) -> Result<(), String> {
    match &target.existing {
        Some(inode) if inode.kind == FileKind::Directory => {
            Err(format!("{}: is a directory", target.shown))
        }
        Some(inode) if inode.kind != FileKind::Regular => Err(format!(
            "{}: exists and is a {:?}, not a regular file",
            target.shown, inode.kind
        )),
        _ => Ok(()),
    }
}
