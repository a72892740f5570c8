//! Inode flags (chattr/lsattr) in the engine: which FS_*_FL bits are stored,
//! reported or refused, and every operation the immutable and append-only
//! flags forbid, as the kernel's VFS and F2FS rule. Each scenario ends with
//! fsck.f2fs and our fsck, and a reopen that must show the stored flags.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::{RenameFlags, SetAttr, TimeSet};
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{Fs, OpenOptions, Result, Timestamp};
use f2fuse_layout::inode_flag::{APPEND, DIRSYNC, IMMUTABLE, INDEX, NOATIME, NODUMP, SYNC};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::{Path, PathBuf};
use support::*;

/// FS_INLINE_DATA_FL: reported for inline files and directories, never stored.
const INLINE_DATA: u32 = 0x1000_0000;

fn fresh(scratch: &Scratch) -> PathBuf {
    let img = scratch.join("img");
    let opts = MkfsOptions {
        features: parse_features(
            "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,lost_found",
        )
        .unwrap(),
        ..MkfsOptions::default()
    };
    format_path(&img, Some(64 << 20), &opts).unwrap();
    img
}

fn check_image(img: &Path, when: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck after {when}:\n{report}");
    }
}

#[track_caller]
fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("must fail").to_errno()
}

#[track_caller]
fn eperm<T: std::fmt::Debug>(r: Result<T>) {
    assert_eq!(errno(r), libc::EPERM);
}

fn flags_of(fs: &Fs, ino: u32) -> u32 {
    fs.get_flags(&fs.inode(ino).unwrap())
}

fn at(sec: i64) -> Option<TimeSet> {
    Some(TimeSet::At(Timestamp { sec, nsec: 0 }))
}

fn truncate(size: u64) -> SetAttr {
    SetAttr {
        size: Some(size),
        ..SetAttr::default()
    }
}

#[test]
fn flags_are_stored_reported_and_refused_like_f2fs() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("flags-store");
    let img = fresh(&scratch);
    let (file, dir, fifo);
    {
        let fs = open_writable(&img);
        file = fs.create(ROOT, b"file", 0o644, 0, 0).unwrap().ino;
        dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap().ino;
        fifo = fs
            .mknod(ROOT, b"fifo", libc::S_IFIFO as u16 | 0o644, (0, 0), 0, 0)
            .unwrap()
            .ino;
        // A new file is inline; a new directory is inline and hash-indexed.
        assert_eq!(flags_of(&fs, file), INLINE_DATA);
        assert_eq!(flags_of(&fs, dir), INLINE_DATA | INDEX);

        let before = fs.inode(file).unwrap().ctime;
        std::thread::sleep(std::time::Duration::from_millis(20));
        // What chattr writes back includes the reported-only bits: ignored.
        fs.set_flags(file, INLINE_DATA | NODUMP | NOATIME | SYNC)
            .unwrap();
        assert_eq!(flags_of(&fs, file), INLINE_DATA | NODUMP | NOATIME | SYNC);
        assert_ne!(fs.inode(file).unwrap().ctime, before, "ctime must change");
        fs.set_flags(dir, INLINE_DATA | INDEX | DIRSYNC).unwrap();
        // Clearing INDEX is ignored like setting INLINE_DATA: neither is settable.
        fs.set_flags(dir, DIRSYNC).unwrap();
        assert_eq!(flags_of(&fs, dir), INLINE_DATA | INDEX | DIRSYNC);

        // Directory-only flags on a file, anything but nodump/noatime on a
        // fifo, compression without the feature, unknown bits: EOPNOTSUPP.
        for (ino, flags) in [
            (file, DIRSYNC),
            (fifo, IMMUTABLE),
            (fifo, SYNC),
            (file, 0x4),         // FS_COMPR_FL
            (file, 0x400),       // FS_NOCOMP_FL
            (dir, 0x4000_0000),  // FS_CASEFOLD_FL
            (file, 0x1),         // FS_SECRM_FL: not an F2FS flag at all
            (file, 0x0200_0000), // FS_DAX_FL
        ] {
            assert_eq!(
                errno(fs.set_flags(ino, flags)),
                libc::EOPNOTSUPP,
                "flags {flags:#x} on inode {ino}"
            );
        }
        fs.set_flags(fifo, NODUMP).unwrap();
        // The refused calls changed nothing.
        assert_eq!(flags_of(&fs, file), INLINE_DATA | NODUMP | NOATIME | SYNC);
        fs.unmount().unwrap();
    }
    check_image(&img, "setting flags");
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    assert_eq!(flags_of(&fs, file), INLINE_DATA | NODUMP | NOATIME | SYNC);
    assert_eq!(flags_of(&fs, dir), INLINE_DATA | INDEX | DIRSYNC);
    assert_eq!(flags_of(&fs, fifo), NODUMP);
}

#[test]
fn immutable_forbids_every_change() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("flags-immutable");
    let img = fresh(&scratch);
    let (file, dir, inner);
    {
        let fs = open_writable(&img);
        file = fs.create(ROOT, b"file", 0o644, 0, 0).unwrap().ino;
        fs.write(file, 0, b"frozen").unwrap();
        fs.set_xattr(file, b"user.a", b"1", SetMode::Create)
            .unwrap();
        dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap().ino;
        inner = fs.create(dir, b"inner", 0o644, 0, 0).unwrap().ino;
        fs.create(ROOT, b"other", 0o644, 0, 0).unwrap();
        fs.link(file, ROOT, b"second-name").unwrap();
        fs.set_flags(file, IMMUTABLE).unwrap();
        fs.set_flags(dir, IMMUTABLE).unwrap();

        // The file: data, size, attributes, xattrs, names.
        eperm(fs.write(file, 6, b"more"));
        eperm(fs.write(file, 0, b"frozen"));
        eperm(fs.setattr(file, &truncate(0)));
        for attr in [
            SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            },
            SetAttr {
                uid: Some(1),
                ..SetAttr::default()
            },
            SetAttr {
                gid: Some(1),
                ..SetAttr::default()
            },
            SetAttr {
                atime: Some(TimeSet::Now),
                mtime: Some(TimeSet::Now),
                ..SetAttr::default()
            },
            SetAttr {
                mtime: at(1),
                ctime: Some(Timestamp { sec: 2, nsec: 0 }),
                ..SetAttr::default()
            },
        ] {
            eperm(fs.setattr(file, &attr));
        }
        eperm(fs.set_xattr(file, b"user.b", b"2", SetMode::Any));
        eperm(fs.remove_xattr(file, b"user.a"));
        eperm(fs.link(file, ROOT, b"file2"));
        eperm(fs.unlink(ROOT, b"file"));
        eperm(fs.rename(ROOT, b"file", ROOT, b"moved", RenameFlags::default()));
        eperm(fs.rename(ROOT, b"other", ROOT, b"file", RenameFlags::default()));
        let exchange = RenameFlags {
            exchange: true,
            ..RenameFlags::default()
        };
        eperm(fs.rename(ROOT, b"other", ROOT, b"file", exchange));
        // Renaming a name onto another of the same inode does nothing,
        // which Linux allows before any permission check.
        fs.rename(ROOT, b"second-name", ROOT, b"file", RenameFlags::default())
            .unwrap();
        assert_eq!(fs.lookup(ROOT, b"second-name").unwrap().ino, file);
        // An empty request changes nothing and so is no change to refuse.
        fs.setattr(file, &SetAttr::default()).unwrap();

        // The directory: no name added or removed, in or out.
        eperm(fs.create(dir, b"new", 0o644, 0, 0));
        eperm(fs.mkdir(dir, b"sub", 0o755, 0, 0));
        eperm(fs.mknod(dir, b"fifo", libc::S_IFIFO as u16 | 0o644, (0, 0), 0, 0));
        eperm(fs.symlink(dir, b"sym", b"target", 0, 0));
        eperm(fs.link(fs.resolve("/other").unwrap().ino, dir, b"hard"));
        eperm(fs.unlink(dir, b"inner"));
        eperm(fs.rename(dir, b"inner", ROOT, b"out", RenameFlags::default()));
        eperm(fs.rename(ROOT, b"other", dir, b"in", RenameFlags::default()));
        eperm(fs.rmdir(ROOT, b"dir"));
        // Its files are not immutable themselves.
        fs.write(inner, 0, b"still writable").unwrap();
        // Lookups and reads still work.
        assert_eq!(fs.lookup(dir, b"inner").unwrap().ino, inner);
        let mut buf = [0u8; 6];
        fs.read_ino(file, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"frozen");
        fs.unmount().unwrap();
    }
    check_image(&img, "refused changes to immutable inodes");
    {
        let fs = open_writable(&img);
        assert_eq!(flags_of(&fs, file) & IMMUTABLE, IMMUTABLE, "kept on disk");
        // Flags may still change (clearing immutable is how it ends).
        fs.set_flags(file, 0).unwrap();
        fs.set_flags(dir, 0).unwrap();
        fs.write(file, 6, b"!").unwrap();
        fs.rename(ROOT, b"file", dir, b"file", RenameFlags::default())
            .unwrap();
        fs.unlink(dir, b"inner").unwrap();
        fs.unmount().unwrap();
    }
    check_image(&img, "clearing immutable");
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let moved = fs.resolve("/dir/file").unwrap();
    assert_eq!((moved.ino, moved.size), (file, 7));
}

#[test]
fn append_only_allows_appends_and_new_names_only() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("flags-append");
    let img = fresh(&scratch);
    let (file, dir);
    let expected: Vec<u8> = b"log line 1\nlog line 2\n".repeat(300);
    {
        let fs = open_writable(&img);
        file = fs.create(ROOT, b"log", 0o644, 0, 0).unwrap().ino;
        fs.write(file, 0, &expected[..22]).unwrap();
        fs.set_xattr(file, b"user.a", b"1", SetMode::Create)
            .unwrap();
        dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap().ino;
        fs.create(dir, b"kept", 0o644, 0, 0).unwrap();
        fs.create(ROOT, b"other", 0o644, 0, 0).unwrap();
        fs.set_flags(file, APPEND).unwrap();
        fs.set_flags(dir, APPEND).unwrap();

        // Appends, also past inline data into blocks.
        for chunk_at in (22..expected.len()).step_by(22) {
            fs.write(file, chunk_at as u64, &expected[chunk_at..chunk_at + 22])
                .unwrap();
        }
        // Rewriting what is there unchanged is an append of the rest (the
        // writeback cache sends the last page again); changing it is not.
        let tail = expected.len() as u64 - 5;
        fs.write(file, tail, &expected[tail as usize..]).unwrap();
        eperm(fs.write(file, 0, b"LOG"));
        eperm(fs.write(file, tail, b"XXXXXX"));
        eperm(fs.setattr(file, &truncate(0)));
        eperm(fs.setattr(file, &truncate(expected.len() as u64 + 10)));
        for attr in [
            SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            },
            SetAttr {
                uid: Some(1),
                ..SetAttr::default()
            },
            SetAttr {
                atime: at(1),
                mtime: at(1),
                ..SetAttr::default()
            },
            SetAttr {
                mtime: at(1),
                ..SetAttr::default()
            },
        ] {
            eperm(fs.setattr(file, &attr));
        }
        // "Now" is allowed (touch), and so are the times of a write.
        fs.setattr(
            file,
            &SetAttr {
                atime: Some(TimeSet::Now),
                mtime: Some(TimeSet::Now),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let write_times = SetAttr {
            mtime: at(1_700_000_000),
            ctime: Some(Timestamp {
                sec: 1_700_000_001,
                nsec: 5,
            }),
            ..SetAttr::default()
        };
        let after = fs.setattr(file, &write_times).unwrap();
        assert_eq!(after.mtime.sec, 1_700_000_000);
        assert_eq!((after.ctime.sec, after.ctime.nsec), (1_700_000_001, 5));
        eperm(fs.set_xattr(file, b"user.b", b"2", SetMode::Any));
        eperm(fs.remove_xattr(file, b"user.a"));
        eperm(fs.link(file, ROOT, b"log2"));
        eperm(fs.unlink(ROOT, b"log"));
        eperm(fs.rename(ROOT, b"log", ROOT, b"moved", RenameFlags::default()));
        eperm(fs.rename(ROOT, b"other", ROOT, b"log", RenameFlags::default()));

        // The directory: names may be added, never removed or replaced.
        fs.create(dir, b"new", 0o644, 0, 0).unwrap();
        fs.mkdir(dir, b"sub", 0o755, 0, 0).unwrap();
        fs.rename(ROOT, b"other", dir, b"moved-in", RenameFlags::default())
            .unwrap();
        eperm(fs.unlink(dir, b"kept"));
        eperm(fs.rmdir(dir, b"sub"));
        eperm(fs.rename(dir, b"kept", ROOT, b"out", RenameFlags::default()));
        eperm(fs.rename(dir, b"new", dir, b"kept", RenameFlags::default()));
        fs.unmount().unwrap();
    }
    check_image(&img, "appending to append-only inodes");
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let log = fs.resolve("/log").unwrap();
    assert_eq!(fs.get_flags(&log), APPEND);
    let mut data = vec![0u8; log.size as usize];
    fs.read(&log, 0, &mut data).unwrap();
    assert_eq!(data, expected);
    let names: Vec<Vec<u8>> = fs
        .read_dir(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    for name in [&b"kept"[..], b"new", b"sub", b"moved-in"] {
        assert!(
            names.iter().any(|n| n == name),
            "{:?}",
            String::from_utf8_lossy(name)
        );
    }
}

#[test]
fn setattr_records_the_given_ctime() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("flags-ctime");
    let img = fresh(&scratch);
    let file;
    {
        let fs = open_writable(&img);
        file = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
        let given = Timestamp {
            sec: 1_234_567_890,
            nsec: 123_456_789,
        };
        let inode = fs
            .setattr(
                file,
                &SetAttr {
                    mode: Some(0o600),
                    ctime: Some(given),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        assert_eq!(inode.ctime, given);
        // Without one, a change stamps the current time.
        let inode = fs
            .setattr(
                file,
                &SetAttr {
                    mode: Some(0o640),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        assert!(inode.ctime.sec > given.sec);
        fs.setattr(
            file,
            &SetAttr {
                ctime: Some(given),
                ..SetAttr::default()
            },
        )
        .unwrap();
        fs.unmount().unwrap();
    }
    check_image(&img, "setting ctime");
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let inode = fs.inode(file).unwrap();
    assert_eq!(
        (inode.ctime.sec, inode.ctime.nsec),
        (1_234_567_890, 123_456_789)
    );
    assert_eq!(inode.mode & 0o777, 0o640);
}
