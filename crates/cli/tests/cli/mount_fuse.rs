//! `f2fuse mount`: images made by `f2fuse mkfs` and by mkfs.f2fs are
//! mounted through FUSE, changed with ordinary system calls, unmounted; then
//! (after waiting until the daemon has closed the image) fsck.f2fs must find
//! the image clean and the engine must read back what was written.
//!
//! Needs /dev/fuse and fusermount3 (Debian: fuse3); without them the tests
//! print a skip note, and fail under `CI=1`.

use f2fuse_testkit as support;

use crate::common::f2fuse_output as f2fuse;
use f2fuse_engine::internals::acl::AclKind;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{FileKind, Fs, OpenOptions};
use f2fuse_layout::{inode_flag, F2FS_ROOT_INO};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn f2fuse_mkfs(img: &Path, size: &str) {
    let out = f2fuse(&[
        "mkfs".as_ref(),
        img.as_os_str(),
        "--size".as_ref(),
        size.as_ref(),
        "-q".as_ref(),
    ]);
    assert!(out.status.success(), "mkfs: {out:?}");
}

/// A mounted image; unmounted (lazily) on drop if the test did not.
struct Mount {
    img: PathBuf,
    mnt: PathBuf,
    mounted: bool,
}

impl Mount {
    fn new(img: &Path, mnt: &Path, opts: &str) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        let mut args: Vec<&OsStr> = vec!["mount".as_ref(), img.as_os_str(), mnt.as_os_str()];
        if !opts.is_empty() {
            args.extend([OsStr::new("-o"), OsStr::new(opts)]);
        }
        let out = f2fuse(&args);
        assert!(
            out.status.success(),
            "f2fuse mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mnt = mnt.canonicalize().unwrap();
        assert!(is_mounted(&mnt), "{} is not a mount point", mnt.display());
        Mount {
            img: img.to_path_buf(),
            mnt,
            mounted: true,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// fusermount3 -u, then waits until the daemon has released the image.
    fn unmount(mut self) {
        let mut tries = 0;
        loop {
            let out = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .output()
                .unwrap();
            if out.status.success() {
                break;
            }
            // Busy for a moment after the last close: retry.
            tries += 1;
            assert!(tries < 100, "fusermount3 -u: {out:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.mounted = false;
        wait_released(&self.img);
        assert!(!is_mounted(&self.mnt));
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .status();
            wait_released(&self.img);
        }
    }
}

/// A fresh 64 MiB image in a new scratch directory, mounted with `opts`
/// (the scratch directory last, so it outlives the mount); None when FUSE
/// is not available.
fn fresh_mount(tag: &str, opts: &str) -> Option<(Mount, PathBuf, Scratch)> {
    if !fuse_available() {
        return None;
    }
    let scratch = Scratch::new(tag);
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let m = Mount::new(&img, &scratch.join("mnt"), opts);
    Some((m, img, scratch))
}

fn fsck_clean(img: &Path, what: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck.f2fs after {what}:\n{report}");
    }
}

fn engine(img: &Path) -> Fs {
    Fs::open_path(img, OpenOptions::default()).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `cp -a` the edge-case tree into the mount; the mount must show it
/// exactly, and after unmounting so must the engine, with a clean fsck.
fn copy_tree_through_mount(tag: &str, make_image: impl FnOnce(&Path)) {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new(tag);
    let src = scratch.join("src");
    let info = generate_edge_tree(&src, &TreeOptions::small());
    if !info.skipped.is_empty() {
        eprintln!("tree generator skipped: {:?}", info.skipped);
    }
    let img = scratch.join("img");
    make_image(&img);
    let expected = scan_host_tree(&src);

    let t = Instant::now();
    let mount = Mount::new(&img, &scratch.join("mnt"), "default_permissions");
    let out = Command::new("cp")
        .arg("-a")
        .arg(src.join("."))
        .arg(&mount.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp -a: {out:?}");
    eprintln!("{tag}: mount + cp -a took {:?}", t.elapsed());
    let through_mount = scan_host_tree(&mount.mnt);
    let what = CompareWhat::all().ignoring("lost+found");
    if let Err(diff) = compare_trees(&expected, &through_mount, what.clone()) {
        panic!("the mount differs from the source:\n{diff}");
    }
    mount.unmount();
    eprintln!("{tag}: up to the released image {:?}", t.elapsed());

    fsck_clean(&img, "cp -a into the mount");
    let in_image = scan_image(&engine(&img));
    if let Err(diff) = compare_trees(&expected, &in_image, what) {
        panic!("the image read by the engine differs from the source:\n{diff}");
    }
}

#[test]
fn copy_tree_into_f2fuse_mkfs_image() {
    copy_tree_through_mount("mount-cp-f2fuse", |img| f2fuse_mkfs(img, "256M"));
}

#[test]
fn copy_tree_into_mkfs_f2fs_image() {
    copy_tree_through_mount("mount-cp-mkfs", |img| {
        mkfs_f2fs(img, 256 << 20, &[]);
    });
}

#[test]
fn file_operations_and_errors_through_mount() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-ops");
    let img = scratch.join("img");
    mkfs_f2fs(&img, 128 << 20, &["-O", "extra_attr,inode_checksum"]);
    let m = Mount::new(&img, &scratch.join("mnt"), "");

    // create, write, read (crossing the inline limit and many blocks)
    let data = pattern(300_000, 7);
    fs::write(m.path("file"), &data).unwrap();
    assert_eq!(fs::read(m.path("file")).unwrap(), data);
    // O_EXCL on an existing name
    let excl = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.path("file"));
    assert_eq!(errno_of(excl), libc::EEXIST);
    // O_APPEND
    {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(m.path("file"))
            .unwrap();
        f.write_all(b"tail").unwrap();
    }
    assert_eq!(fs::metadata(m.path("file")).unwrap().len(), 300_004);
    // O_TRUNC
    fs::write(m.path("trunc"), pattern(10_000, 1)).unwrap();
    fs::write(m.path("trunc"), b"short").unwrap();
    assert_eq!(fs::read(m.path("trunc")).unwrap(), b"short");
    // truncate: shrink, then grow (the new bytes read as zeros)
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.path("file"))
            .unwrap();
        f.set_len(5000).unwrap();
        f.set_len(20_000).unwrap();
    }
    let mut expect_file = data[..5000].to_vec();
    expect_file.resize(20_000, 0);
    assert_eq!(fs::read(m.path("file")).unwrap(), expect_file);
    // pwrite in a hole far away, pread it back
    {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(m.path("sparse"))
            .unwrap();
        f.write_all_at(b"far", 50 << 20).unwrap();
        let mut buf = [0u8; 3];
        f.read_exact_at(&mut buf, 50 << 20).unwrap();
        assert_eq!(&buf, b"far");
    }
    let st = fs::metadata(m.path("sparse")).unwrap();
    assert_eq!(st.len(), (50 << 20) + 3);
    assert!(
        st.blocks() <= 64,
        "sparse file uses {} sectors",
        st.blocks()
    );

    // fallocate reserves blocks (mode 0 extends the file, KEEP_SIZE does
    // not), punching frees them; collapse range never reaches the daemon.
    {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(m.path("falloc"))
            .unwrap();
        f.write_all_at(b"head", 0).unwrap();
        let falloc = |mode: i32, offset: i64, len: i64| {
            // SAFETY: a valid descriptor.
            let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap())
            }
        };
        assert_eq!(falloc(0, 0, 1 << 20), Ok(()));
        let st = f.metadata().unwrap();
        assert_eq!(st.len(), 1 << 20);
        assert!(st.blocks() >= 2048, "{} sectors", st.blocks());
        assert_eq!(falloc(libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 8192), Ok(()));
        let grown = f.metadata().unwrap();
        assert_eq!(grown.len(), 1 << 20);
        assert_eq!(grown.blocks(), st.blocks() + 16);
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        assert_eq!(falloc(punch, 4096, 1 << 20), Ok(()));
        assert_eq!(f.metadata().unwrap().blocks(), grown.blocks() - 2048);
        assert_eq!(
            falloc(libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
            Err(libc::EOPNOTSUPP)
        );
        let mut head = [0u8; 4];
        f.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(&head, b"head");
    }

    // chmod, utimens (nanoseconds), chown (as root)
    fs::set_permissions(m.path("file"), fs::Permissions::from_mode(0o6751)).unwrap();
    assert_eq!(
        fs::metadata(m.path("file")).unwrap().mode() & 0o7777,
        0o6751
    );
    let when = std::time::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    fs::File::open(m.path("trunc"))
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(when).set_accessed(when))
        .unwrap();
    let st = fs::metadata(m.path("trunc")).unwrap();
    assert_eq!((st.mtime(), st.mtime_nsec()), (1_600_000_000, 123_456_789));
    // UTIME_NOW / UTIME_OMIT
    let ts = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    // SAFETY: valid C string and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            cstr(&m.path("trunc")).as_ptr(),
            ts.as_ptr(),
            0,
        )
    };
    assert_eq!(rc, 0);
    let st2 = fs::metadata(m.path("trunc")).unwrap();
    assert_eq!(
        (st2.atime(), st2.atime_nsec()),
        (1_600_000_000, 123_456_789)
    );
    assert!(st2.mtime() > 1_600_000_000);
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(m.path("trunc"), Some(1234), Some(4321)).unwrap();
    }

    // directories, hard links, symlinks, rename variants
    fs::create_dir(m.path("dir")).unwrap();
    fs::create_dir(m.path("dir/sub")).unwrap();
    assert_eq!(fs::metadata(m.path("dir")).unwrap().nlink(), 3);
    fs::hard_link(m.path("file"), m.path("dir/link")).unwrap();
    let (a, b) = (
        fs::metadata(m.path("file")).unwrap(),
        fs::metadata(m.path("dir/link")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    std::os::unix::fs::symlink("dir/link", m.path("sym")).unwrap();
    assert_eq!(fs::read_link(m.path("sym")).unwrap(), Path::new("dir/link"));
    assert_eq!(fs::read(m.path("sym")).unwrap(), expect_file);
    fs::rename(m.path("trunc"), m.path("dir/moved")).unwrap();
    assert_eq!(errno_of(fs::metadata(m.path("trunc"))), libc::ENOENT);
    fs::write(m.path("x"), b"x").unwrap();
    fs::write(m.path("y"), b"y").unwrap();
    let renameat2 = |from: &str, to: &str, flags: u32| {
        // SAFETY: valid C strings.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                cstr(&m.path(from)).as_ptr(),
                libc::AT_FDCWD,
                cstr(&m.path(to)).as_ptr(),
                flags,
            )
        };
        if rc == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        }
    };
    assert_eq!(renameat2("x", "y", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(renameat2("x", "y", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("x")).unwrap(), b"y");
    assert_eq!(fs::read(m.path("y")).unwrap(), b"x");
    assert_eq!(renameat2("x", "dir", libc::RENAME_EXCHANGE), 0);
    assert!(fs::metadata(m.path("x")).unwrap().is_dir());
    assert_eq!(fs::read(m.path("dir")).unwrap(), b"y");
    assert_eq!(renameat2("dir", "x/sub2", libc::RENAME_NOREPLACE), 0);
    assert_eq!(renameat2("x", "x/sub/inside", 0), libc::EINVAL);

    // removal
    fs::write(m.path("gone"), b"bye").unwrap();
    fs::remove_file(m.path("gone")).unwrap();
    assert_eq!(errno_of(fs::read(m.path("gone"))), libc::ENOENT);
    assert_eq!(errno_of(fs::remove_dir(m.path("x"))), libc::ENOTEMPTY);
    fs::create_dir(m.path("empty")).unwrap();
    fs::remove_dir(m.path("empty")).unwrap();
    // an unlinked file stays readable while open
    fs::write(m.path("open-unlinked"), pattern(9000, 3)).unwrap();
    {
        let mut f = fs::File::open(m.path("open-unlinked")).unwrap();
        fs::remove_file(m.path("open-unlinked")).unwrap();
        let mut back = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, pattern(9000, 3));
    }

    // names: 255 bytes work, 256 are ENAMETOOLONG everywhere
    let long = "n".repeat(255);
    fs::write(m.path(&long), b"long").unwrap();
    let too_long = "n".repeat(256);
    assert_eq!(
        errno_of(fs::write(m.path(&too_long), b"")),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs::create_dir(m.path(&too_long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("t", m.path(&too_long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs::hard_link(m.path(&long), m.path(&too_long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs::rename(m.path(&long), m.path(&too_long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs::metadata(m.path(&too_long))),
        libc::ENAMETOOLONG
    );

    // xattrs: set, size probe, ERANGE, list, XATTR_CREATE/REPLACE, remove
    let p = cstr(&m.path("file"));
    let set = |name: &str, value: &[u8], flags: i32| {
        let n = CString::new(name).unwrap();
        // SAFETY: valid pointers and lengths.
        let rc = unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        };
        if rc == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        }
    };
    let get = |name: &str, size: usize| -> Result<Vec<u8>, i32> {
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; size];
        // SAFETY: valid pointers; a zero size asks for the length only.
        let rc = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
        if rc < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        } else {
            buf.truncate(if size == 0 { 0 } else { rc as usize });
            if size == 0 {
                buf = vec![0; rc as usize];
            }
            Ok(buf)
        }
    };
    assert_eq!(set("user.color", b"blue", 0), 0);
    assert_eq!(set("user.color", b"red", libc::XATTR_CREATE), libc::EEXIST);
    assert_eq!(set("user.other", b"v", libc::XATTR_REPLACE), libc::ENODATA);
    assert_eq!(set("user.big", &vec![b'v'; 1000], 0), 0);
    assert_eq!(get("user.color", 0).unwrap().len(), 4);
    assert_eq!(get("user.color", 2), Err(libc::ERANGE));
    assert_eq!(get("user.color", 100).unwrap(), b"blue");
    assert_eq!(get("user.missing", 100), Err(libc::ENODATA));
    let mut names = vec![0u8; 256];
    // SAFETY: valid buffer.
    let n = unsafe { libc::listxattr(p.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert_eq!(&names[..n as usize], b"user.color\0user.big\0");
    // SAFETY: a 1-byte buffer is too small for the list.
    let n = unsafe { libc::listxattr(p.as_ptr(), names.as_mut_ptr().cast(), 1) };
    assert_eq!(n, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ERANGE)
    );
    let big = CString::new("user.big").unwrap();
    // SAFETY: valid C strings.
    assert_eq!(unsafe { libc::removexattr(p.as_ptr(), big.as_ptr()) }, 0);
    assert_eq!(get("user.big", 0), Err(libc::ENODATA));

    // a fifo and a device node
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(libc::mkfifo(cstr(&m.path("fifo")).as_ptr(), 0o640), 0);
        if root {
            let dev = libc::makedev(8, 17);
            assert_eq!(
                libc::mknod(cstr(&m.path("blk")).as_ptr(), libc::S_IFBLK | 0o600, dev),
                0
            );
        }
    }
    if root {
        assert_eq!(
            fs::metadata(m.path("blk")).unwrap().rdev(),
            libc::makedev(8, 17)
        );
    }

    // statfs reports the image's geometry
    let mut sfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and buffer.
    assert_eq!(unsafe { libc::statvfs(cstr(&m.mnt).as_ptr(), &mut sfs) }, 0);
    assert_eq!(sfs.f_bsize, 4096);
    assert_eq!(sfs.f_namemax, 255);
    assert!(
        sfs.f_blocks > 10_000 && sfs.f_bfree < sfs.f_blocks,
        "{} blocks, {} free",
        sfs.f_blocks,
        sfs.f_bfree
    );

    // A 1000-entry directory.
    fs::create_dir(m.path("many")).unwrap();
    for i in 0..1000 {
        fs::write(m.path(&format!("many/entry-{i:04}")), i.to_string()).unwrap();
    }
    assert_eq!(fs::read_dir(m.path("many")).unwrap().count(), 1000);

    m.unmount();
    fsck_clean(&img, "file operations");

    // Everything reads back through the engine.
    let fs = engine(&img);
    let file = fs.resolve("/file").unwrap();
    assert_eq!(
        (file.mode & 0o7777, file.links, file.size),
        (0o6751, 2, 20_000)
    );
    let mut buf = vec![0u8; 20_000];
    assert_eq!(fs.read(&file, 0, &mut buf).unwrap(), 20_000);
    assert_eq!(buf, expect_file);
    assert_eq!(fs.get_xattr(&file, b"user.color").unwrap(), b"blue");
    assert!(fs.get_xattr(&file, b"user.big").is_err());
    // After the exchange "x" is the old "dir" and "x/sub2" the file "y".
    assert_eq!(fs.resolve("/x/link").unwrap().ino, file.ino);
    let moved = fs.resolve("/x/moved").unwrap();
    assert_eq!((moved.mtime.sec, moved.mtime.nsec > 0), (st2.mtime(), true));
    assert_eq!(moved.atime.sec, 1_600_000_000);
    if root {
        assert_eq!((moved.uid, moved.gid), (1234, 4321));
        assert_eq!(fs.resolve("/blk").unwrap().rdev, (8, 17));
    }
    let sym = fs.resolve("/sym").unwrap();
    assert_eq!(fs.read_link(&sym).unwrap(), b"dir/link");
    assert_eq!(fs.resolve("/fifo").unwrap().kind, FileKind::Fifo);
    assert_eq!(fs.resolve("/x").unwrap().links, 3); // "..", ".", "sub"
    let sub2 = fs.resolve("/x/sub2").unwrap();
    assert_eq!((sub2.kind, sub2.size), (FileKind::Regular, 1));
    assert!(fs.resolve("/dir").is_err());
    assert!(fs.resolve("/gone").is_err() && fs.resolve("/empty").is_err());
    assert!(fs.resolve("/open-unlinked").is_err());
    assert!(fs.orphans().is_empty(), "orphans left: {:?}", fs.orphans());
    assert_eq!(fs.resolve(&format!("/{long}")).unwrap().size, 4);
    let falloc = fs.resolve("/falloc").unwrap();
    let mut head = vec![1u8; 8192];
    fs.read(&falloc, 0, &mut head).unwrap();
    assert_eq!((falloc.size, &head[..4]), (1 << 20, &b"head"[..]));
    assert!(head[4..].iter().all(|&b| b == 0));
    let sparse = fs.resolve("/sparse").unwrap();
    let mut far = [0u8; 3];
    fs.read(&sparse, 50 << 20, &mut far).unwrap();
    assert_eq!(&far, b"far");
    let many = fs.resolve("/many").unwrap();
    let entries = fs.read_dir(many.ino).unwrap();
    assert_eq!(entries.len(), 1002); // with "." and ".."
    let e = fs.resolve("/many/entry-0999").unwrap();
    let mut v = vec![0u8; 3];
    fs.read(&e, 0, &mut v).unwrap();
    assert_eq!(v, b"999");
}

#[test]
fn mount_refusals_and_read_only() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-refuse");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let mnt = scratch.join("mnt");
    let mnt2 = scratch.join("mnt2");
    fs::create_dir_all(&mnt2).unwrap();

    // Unknown options are refused before anything happens.
    let out = f2fuse(&[
        "mount".as_ref(),
        img.as_os_str(),
        mnt2.as_os_str(),
        "-o".as_ref(),
        "rw,bogus".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus") && err.contains("unknown"), "{err}");
    // A missing image.
    let out = f2fuse(&[
        "mount".as_ref(),
        scratch.join("nope").as_os_str(),
        mnt2.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));

    {
        let m = Mount::new(&img, &mnt, "");
        fs::write(m.path("f"), b"data").unwrap();
        let sparse = fs::File::create(m.path("sparse")).unwrap();
        sparse.write_all_at(b"first", 0).unwrap();
        sparse.write_all_at(b"second", 1 << 20).unwrap();
        sparse.set_len(3 << 20).unwrap();
        drop(sparse);
        // The same image cannot be mounted twice.
        let out = f2fuse(&["mount".as_ref(), img.as_os_str(), mnt2.as_os_str()]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("already mounted"), "{err}");
        assert!(!is_mounted(&mnt2.canonicalize().unwrap()));
        m.unmount();
    }
    fsck_clean(&img, "the refused second mount");

    let m = Mount::new(&img, &mnt, "ro");
    assert_eq!(fs::read(m.path("f")).unwrap(), b"data");
    // Without the write-back cache (a read-only mount has none) the daemon
    // answers SEEK_DATA / SEEK_HOLE from the file's block map.
    let sparse = fs::File::open(m.path("sparse")).unwrap();
    let seek = |offset: i64, whence: i32| {
        // SAFETY: a valid descriptor.
        let at = unsafe { libc::lseek(sparse.as_raw_fd(), offset, whence) };
        if at < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        } else {
            Ok(at)
        }
    };
    assert_eq!(seek(0, libc::SEEK_DATA), Ok(0));
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(4096));
    assert_eq!(seek(4096, libc::SEEK_DATA), Ok(1 << 20));
    assert_eq!(seek((1 << 20) + 10, libc::SEEK_HOLE), Ok((1 << 20) + 4096));
    assert_eq!(seek((1 << 20) + 4096, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(seek(3 << 20, libc::SEEK_HOLE), Err(libc::ENXIO));
    drop(sparse);
    assert_eq!(errno_of(fs::write(m.path("g"), b"")), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(m.path("f"))), libc::EROFS);
    m.unmount();
    fsck_clean(&img, "a read-only mount");
}

/// An aligned buffer for O_DIRECT.
fn aligned(len: usize, fill: u8) -> (Vec<u8>, usize) {
    let v = vec![fill; len + 4096];
    let off = v.as_ptr().align_offset(4096);
    (v, off)
}

#[test]
fn threads_on_different_files_make_progress_concurrently() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-threads");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "256M");
    let m = Mount::new(&img, &scratch.join("mnt"), "threads=4");
    // The daemon serves with 4 threads (fuser names them fuser-N; they
    // exist once a first request has been answered).
    fs::metadata(m.path("")).unwrap();
    let daemon = holders(&img);
    assert_eq!(daemon.len(), 1, "{daemon:?}");
    let servers = || {
        fs::read_dir(format!("/proc/{}/task", daemon[0]))
            .unwrap()
            .flatten()
            .filter(|t| {
                fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("fuser-"))
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while servers() < 4 {
        assert!(Instant::now() < deadline, "{} serving threads", servers());
        std::thread::sleep(Duration::from_millis(10));
    }
    const THREADS: usize = 4;
    const CHUNK: usize = 64 << 10;
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let path = m.path(&format!("t{t}"));
        let stop = stop.clone();
        let counters = counters.clone();
        handles.push(std::thread::spawn(move || {
            // O_DIRECT: every write and read goes to the daemon.
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .unwrap();
            let mut i: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                let (mut buf, off) = aligned(CHUNK, (t as u8) ^ (i as u8));
                let at = (i % 64) * CHUNK as u64;
                f.write_all_at(&buf[off..off + CHUNK], at).unwrap();
                buf[off..off + CHUNK].fill(0);
                f.read_exact_at(&mut buf[off..off + CHUNK], at).unwrap();
                assert!(buf[off..off + CHUNK]
                    .iter()
                    .all(|&b| b == (t as u8) ^ (i as u8)));
                i += 1;
                counters[t].store(i, Ordering::Relaxed);
            }
            i
        }));
    }
    // Sample the counters: in every sampling window each thread must move.
    let mut windows_all_moved = 0;
    let mut last: Vec<u64> = vec![0; THREADS];
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(150));
        let now: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        if now.iter().zip(&last).all(|(n, l)| n > l) {
            windows_all_moved += 1;
        }
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    let totals: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("iterations per thread: {totals:?}; windows where all moved: {windows_all_moved}/10");
    assert!(totals.iter().all(|&n| n >= 10), "{totals:?}");
    assert!(windows_all_moved >= 8, "{windows_all_moved}/10 windows");
    m.unmount();
    fsck_clean(&img, "concurrent writers");
    let fs = engine(&img);
    for (t, &n) in totals.iter().enumerate() {
        let inode = fs.resolve(&format!("/t{t}")).unwrap();
        assert_eq!(inode.size, 64.min(n) * CHUNK as u64);
        // The last chunk written holds the last pattern.
        let last_i = n - 1;
        let mut buf = vec![0u8; CHUNK];
        fs.read(&inode, (last_i % 64) * CHUNK as u64, &mut buf)
            .unwrap();
        assert!(buf.iter().all(|&b| b == (t as u8) ^ (last_i as u8)));
    }
}

#[test]
fn signals_foreground_and_periodic_checkpoints() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-signals");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let mnt = scratch.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();

    // Foreground: serves until SIGINT, then exits 0 after a clean unmount.
    let mut child = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args([
            "mount",
            "-f",
            "-o",
            "cp_interval=1,gc_urgent=1,gc_urgent_sleep_time=100",
        ])
        .arg(&img)
        .arg(&mnt)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_mounted(&mnt) {
        assert!(Instant::now() < deadline, "foreground mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::create_dir(mnt.join("made")).unwrap();
    fs::write(mnt.join("made/file"), pattern(100_000, 9)).unwrap();
    // The periodic checkpoint makes the new names visible in the image
    // while it is still mounted.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A checkpoint being written may be torn: then try again.
        let seen = Fs::open_path(&img, OpenOptions::default())
            .is_ok_and(|fs| fs.resolve("/made/file").is_ok());
        if seen {
            break;
        }
        assert!(Instant::now() < deadline, "no periodic checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Churn a little so the idle-time cleaner has something to look at.
    for round in 0..3 {
        fs::write(mnt.join("churn"), pattern(4 << 20, round)).unwrap();
        fs::remove_file(mnt.join("churn")).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "foreground daemon: {status:?}");
    assert!(!is_mounted(&mnt));
    wait_released(&img);
    fsck_clean(&img, "SIGINT to a foreground mount");
    let fs = engine(&img);
    let f = fs.resolve("/made/file").unwrap();
    let mut buf = vec![0u8; 100_000];
    fs.read(&f, 0, &mut buf).unwrap();
    assert_eq!(buf, pattern(100_000, 9));
    drop(fs);

    // Background daemon: SIGTERM with a file open detaches the mount and
    // finishes once the file is closed.
    let m = Mount::new(&img, &mnt, "");
    let daemon = holders(&img);
    assert_eq!(daemon.len(), 1, "{daemon:?}");
    let mut f = fs::File::open(m.path("made/file")).unwrap();
    // SAFETY: signalling the daemon.
    unsafe { libc::kill(daemon[0] as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_mounted(&mnt) {
        assert!(
            Instant::now() < deadline,
            "SIGTERM did not detach the mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 100_000);
    drop(f);
    let mut m = m;
    m.mounted = false;
    wait_released(&img);
    fsck_clean(&img, "SIGTERM to a background mount");
}

/// With the write-back cache, write(2) returns before the daemon sees the
/// data; when space runs low, files opened for writing bypass the cache, so
/// a full file system answers ENOSPC from write(2) itself (not only from a
/// later fsync or close), and no accepted write is silently dropped.
#[test]
fn low_space_writes_report_enospc_from_write() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-enospc");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let m = Mount::new(&img, &scratch.join("mnt"), "");

    // Fill through the cache, syncing each step: the error surfaces there.
    let chunk = pattern(1 << 20, 7);
    let mut filler = fs::File::create(m.path("filler")).unwrap();
    let filled = (0..256).find(|_| {
        filler
            .write_all(&chunk)
            .and_then(|()| filler.sync_data())
            .is_err()
    });
    assert!(filled.is_some(), "64 MiB image never filled");
    // Give back 2 MiB: room for a new file, far below the low-space mark.
    let len = filler.metadata().unwrap().len();
    filler.set_len(len - (2 << 20)).unwrap();
    filler.sync_all().unwrap();
    drop(filler);

    // A file opened now: write(2) must fail with ENOSPC well before the
    // data could all have been accepted.
    let mut late = fs::File::create(m.path("late")).unwrap();
    let mut accepted = 0usize;
    let err = loop {
        match late.write(&chunk[..64 << 10]) {
            Ok(n) => accepted += n,
            Err(e) => break e,
        }
        assert!(
            accepted < 64 << 20,
            "write(2) accepted {accepted} bytes on a full image"
        );
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // Whatever write(2) accepted is on the image.
    late.sync_all().unwrap();
    drop(late);
    assert_eq!(fs::metadata(m.path("late")).unwrap().len(), accepted as u64);
    m.unmount();
    fsck_clean(&img, "filling the image through the mount");
}

/// The flags column of `lsattr -d path` (e.g. "----i-------------N---").
fn lsattr(path: &Path) -> String {
    let out = Command::new("lsattr").arg("-d").arg(path).output().unwrap();
    assert!(out.status.success(), "lsattr {}: {out:?}", path.display());
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().to_string()
}

/// Runs chattr as `uid` (0: root); whether it succeeded.
fn chattr_as(uid: u32, change: &str, path: &Path) -> bool {
    let mut cmd = if uid == 0 {
        Command::new("chattr")
    } else {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg("chattr");
        c
    };
    cmd.arg(change).arg(path).stderr(Stdio::null());
    cmd.status().unwrap().success()
}

fn set_xattr_errno(path: &Path) -> i32 {
    let c = cstr(path);
    // SAFETY: valid NUL-terminated strings and a 1-byte value.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.x".as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn set_times_errno(path: &Path, sec: i64) -> i32 {
    let c = cstr(path);
    let t = libc::timespec {
        tv_sec: sec,
        tv_nsec: 0,
    };
    // SAFETY: a valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// FS_IOC_GETVERSION on an open file: F2FS answers with i_generation.
fn get_version(file: &fs::File) -> u32 {
    let mut version: libc::c_long = 0;
    // SAFETY: FS_IOC_GETVERSION writes at most a long into `version`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETVERSION, &mut version) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    version as u32
}

/// chattr/lsattr on the mount: immutable and append-only files and
/// directories refuse what they must (also to root), only root changes
/// those two flags, GETVERSION reports the generation; with and without the
/// write-back cache. The flags and data are on disk after unmounting.
#[test]
fn inode_flags_through_mount() {
    if !fuse_available() || !require_tool("chattr") || !require_tool("setpriv") {
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPING inode_flags_through_mount: needs root (chattr +i, other users)");
        return;
    }
    const NOBODY: u32 = 65534;
    for opts in ["", ",no_writeback_cache"] {
        let scratch = Scratch::new("mount-flags");
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let m = Mount::new(
            &img,
            &scratch.join("mnt"),
            &format!("allow_other,default_permissions{opts}"),
        );
        let (f, d, log, mine) = (m.path("f"), m.path("d"), m.path("log"), m.path("mine"));
        fs::write(&f, b"frozen").unwrap();
        fs::create_dir(&d).unwrap();
        fs::write(d.join("inner"), b"x").unwrap();
        fs::write(&log, b"line 1\n").unwrap();
        fs::write(&mine, b"").unwrap();
        std::os::unix::fs::chown(&mine, Some(NOBODY), Some(NOBODY)).unwrap();
        // New files are inline (N), directories hash-indexed (I).
        assert_eq!(lsattr(&f), "------------------N---");
        assert_eq!(lsattr(&d), "-----------I------N---");
        let generation = get_version(&fs::File::open(&f).unwrap());

        // Immutable: nothing changes, not even for root.
        assert!(chattr_as(0, "+i", &f));
        assert!(chattr_as(0, "+i", &d));
        assert_eq!(lsattr(&f), "----i-------------N---");
        let write = fs::OpenOptions::new().write(true).open(&f);
        assert_eq!(errno_of(write), libc::EPERM);
        let append = fs::OpenOptions::new().append(true).open(&f);
        assert_eq!(errno_of(append), libc::EPERM);
        let c = cstr(&f);
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::truncate(c.as_ptr(), 0) }, -1);
        assert_eq!(
            errno_of(Err::<(), _>(std::io::Error::last_os_error())),
            libc::EPERM
        );
        let perm = fs::set_permissions(&f, fs::Permissions::from_mode(0o600));
        assert_eq!(errno_of(perm), libc::EPERM);
        assert_eq!(set_times_errno(&f, 1), libc::EPERM);
        assert_eq!(set_xattr_errno(&f), libc::EPERM);
        assert_eq!(errno_of(fs::remove_file(&f)), libc::EPERM);
        assert_eq!(errno_of(fs::rename(&f, m.path("g"))), libc::EPERM);
        assert_eq!(errno_of(fs::hard_link(&f, m.path("g"))), libc::EPERM);
        assert_eq!(errno_of(fs::write(d.join("new"), b"")), libc::EPERM);
        assert_eq!(errno_of(fs::create_dir(d.join("sub"))), libc::EPERM);
        assert_eq!(errno_of(fs::remove_file(d.join("inner"))), libc::EPERM);
        assert_eq!(errno_of(fs::rename(&log, d.join("log"))), libc::EPERM);
        assert_eq!(fs::read(&f).unwrap(), b"frozen");
        // Only root may clear it; then everything works again.
        assert!(!chattr_as(NOBODY, "-i", &f));
        assert!(chattr_as(0, "-i", &f));
        fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .unwrap()
            .write_all(b"!")
            .unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"frozen!");

        // Append-only: O_APPEND writes only; the data already there stays.
        assert!(chattr_as(0, "+a", &log));
        assert_eq!(lsattr(&log), "-----a------------N---");
        let mut expected = b"line 1\n".to_vec();
        for i in 2..=40 {
            let line = format!("line {i}\n");
            let mut file = fs::OpenOptions::new().append(true).open(&log).unwrap();
            file.write_all(line.as_bytes()).unwrap();
            expected.extend_from_slice(line.as_bytes());
        }
        let write = fs::OpenOptions::new().write(true).open(&log);
        assert_eq!(errno_of(write), libc::EPERM);
        let trunc = fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_TRUNC)
            .open(&log);
        assert_eq!(errno_of(trunc), libc::EPERM);
        let c = cstr(&log);
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::truncate(c.as_ptr(), 0) }, -1);
        assert_eq!(errno_of(fs::remove_file(&log)), libc::EPERM);
        assert_eq!(errno_of(fs::rename(&log, m.path("g"))), libc::EPERM);
        assert_eq!(set_xattr_errno(&log), libc::EPERM);
        assert_eq!(fs::read(&log).unwrap(), expected);

        // The owner may change other flags, but not immutable or append-only.
        assert!(chattr_as(NOBODY, "+d", &mine));
        assert!(!chattr_as(NOBODY, "+a", &mine));
        assert!(!chattr_as(NOBODY, "+i", &mine));
        assert!(!chattr_as(NOBODY, "+d", &f), "not the owner");
        assert_eq!(lsattr(&mine), "------d-----------N---");
        // Flags F2FS does not have, or not without a feature, are refused.
        assert!(!chattr_as(0, "+c", &f));
        assert!(!chattr_as(0, "+s", &f));

        m.unmount();
        fsck_clean(&img, &format!("chattr through the mount{opts}"));
        let fs = engine(&img);
        let on_disk = |path: &str| {
            let inode = fs.resolve(path).unwrap();
            (fs.get_flags(&inode), inode)
        };
        let (flags, inode) = on_disk("/f");
        assert_eq!((flags, inode.generation), (0x1000_0000, generation));
        assert_eq!(on_disk("/d").0 & 0x10, 0x10, "d stays immutable");
        let (flags, inode) = on_disk("/log");
        assert_eq!(flags & 0x20, 0x20, "log stays append-only");
        let mut data = vec![0u8; inode.size as usize];
        fs.read(&inode, 0, &mut data).unwrap();
        assert_eq!(data, expected);
        assert_eq!(on_disk("/mine").0 & 0x40, 0x40, "nodump");
    }
}

/// `chattr +F` on an empty directory of a `-C utf8` image: names in it are
/// found in any case and normalization, also right after a create or
/// unlink through another spelling (the kernel's name cache, which compares
/// bytes, must not answer for them); other directories stay case-sensitive.
#[test]
fn casefolded_directory_through_mount() {
    if !fuse_available() || !require_tool("chattr") {
        return;
    }
    let scratch = Scratch::new("mount-casefold");
    let img = scratch.join("img");
    let out = f2fuse(&[
        "mkfs".as_ref(),
        img.as_os_str(),
        "--size".as_ref(),
        "64M".as_ref(),
        "-C".as_ref(),
        "utf8".as_ref(),
        "-q".as_ref(),
    ]);
    assert!(out.status.success(), "mkfs -C utf8: {out:?}");
    let m = Mount::new(&img, &scratch.join("mnt"), "default_permissions");
    let (cf, plain) = (m.path("cf"), m.path("plain"));
    fs::create_dir(&cf).unwrap();
    fs::create_dir(&plain).unwrap();
    fs::write(plain.join("x"), b"").unwrap();
    assert!(chattr_as(0, "+F", &cf));
    assert!(
        !chattr_as(0, "+F", &plain),
        "casefolding a non-empty directory"
    );
    assert!(lsattr(&cf).contains('F'));
    fs::write(cf.join("Straße.txt"), b"strasse").unwrap();
    assert_eq!(fs::read(cf.join("STRASSE.TXT")).unwrap(), b"strasse");
    assert_eq!(fs::read(cf.join("strasse.txt")).unwrap(), b"strasse");
    // A miss is not remembered: "CAFÉ" is there as soon as "café" is.
    assert_eq!(errno_of(fs::metadata(cf.join("CAFÉ"))), libc::ENOENT);
    fs::write(cf.join("cafe\u{301}"), b"nfd").unwrap();
    assert_eq!(fs::read(cf.join("CAFÉ")).unwrap(), b"nfd");
    assert_eq!(
        errno_of(fs::create_dir(cf.join("Café"))),
        libc::EEXIST,
        "a twin name exists"
    );
    // Nor is a hit: after an unlink through one spelling no other finds it.
    fs::remove_file(cf.join("CAFÉ")).unwrap();
    assert_eq!(errno_of(fs::metadata(cf.join("cafe\u{301}"))), libc::ENOENT);
    fs::rename(cf.join("STRASSE.txt"), cf.join("Renamed")).unwrap();
    let listed: Vec<String> = fs::read_dir(&cf)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, ["Renamed"]);
    fs::create_dir(cf.join("Sub")).unwrap();
    assert!(lsattr(&cf.join("Sub")).contains('F'), "inherited");
    assert_eq!(errno_of(fs::metadata(plain.join("X"))), libc::ENOENT);
    m.unmount();
    fsck_clean(&img, "casefolded names through the mount");
}

/// F2FS's compression ioctls by number (include/uapi/linux/f2fs.h), on
/// `file`, with `arg` pointing at the argument (null for none).
fn f2fs_ioctl(file: &fs::File, nr: u8, arg: *mut libc::c_void) -> std::io::Result<()> {
    const COMMANDS: [(u8, libc::c_ulong); 9] = [
        (13, 0x4004_f50d), // SET_PIN_FILE, in u32
        (14, 0x8004_f50e), // GET_PIN_FILE, out u32
        (17, 0x8008_f511), // GET_COMPRESS_BLOCKS, out u64
        (18, 0x8008_f512), // RELEASE_COMPRESS_BLOCKS, out u64
        (19, 0x8008_f513), // RESERVE_COMPRESS_BLOCKS, out u64
        (21, 0x8002_f515), // GET_COMPRESS_OPTION, out struct f2fs_comp_option
        (22, 0x4002_f516), // SET_COMPRESS_OPTION, in struct f2fs_comp_option
        (23, 0xf517),      // DECOMPRESS_FILE
        (24, 0xf518),      // COMPRESS_FILE
    ];
    let cmd = COMMANDS.iter().find(|c| c.0 == nr).expect("known ioctl").1;
    // SAFETY: the fd is open and `arg` points at what `cmd` reads or writes.
    if unsafe { libc::ioctl(file.as_raw_fd(), cmd, arg) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn compress_blocks_ioctl(file: &fs::File, nr: u8) -> u64 {
    let mut blocks = 0u64;
    f2fs_ioctl(file, nr, (&mut blocks as *mut u64).cast()).unwrap();
    blocks
}

#[test]
fn compression_ioctls_through_mount() {
    if !fuse_available() || !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("mount-compress");
    let img = scratch.join("img");
    mkfs_f2fs(&img, 128 << 20, &["-O", "extra_attr,compression"]);
    let m = Mount::new(
        &img,
        &scratch.join("mnt"),
        "compress_mode=user,compress_extension=txt,no_writeback_cache",
    );
    let data = b"a line of compressible text\n".repeat(40_000);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("a.txt"))
        .unwrap();
    let mut option = [0u8; 2];
    f2fs_ioctl(&file, 21, option.as_mut_ptr().cast()).unwrap();
    assert_eq!(option, [1, 2], "lz4, 4-block clusters");
    let mut zstd = [2u8, 4];
    f2fs_ioctl(&file, 22, zstd.as_mut_ptr().cast()).unwrap();
    file.write_all_at(&data, 0).unwrap();
    file.sync_all().unwrap();
    assert_eq!(compress_blocks_ioctl(&file, 17), 0, "compress_mode=user");
    f2fs_ioctl(&file, 24, std::ptr::null_mut()).unwrap();
    let saved = compress_blocks_ioctl(&file, 17);
    assert!(saved > data.len() as u64 / 4096 / 2, "{saved}");
    assert_eq!(compress_blocks_ioctl(&file, 18), saved, "released");
    assert_eq!(compress_blocks_ioctl(&file, 17), 0);
    assert_eq!(errno_of(file.write_at(b"x", 0)), libc::EPERM);
    assert_eq!(fs::read(m.path("a.txt")).unwrap(), data);
    assert_eq!(compress_blocks_ioctl(&file, 19), saved, "reserved");
    f2fs_ioctl(&file, 23, std::ptr::null_mut()).unwrap();
    assert_eq!(compress_blocks_ioctl(&file, 17), 0, "decompressed");
    let plain = fs::File::create(m.path("plain")).unwrap();
    let err = f2fs_ioctl(&plain, 21, option.as_mut_ptr().cast()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENODATA));
    drop((file, plain));
    m.unmount();
    fsck_clean(&img, "compression ioctls through the mount");
    let fs = engine(&img);
    let ino = fs.resolve("/a.txt").unwrap().ino;
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.read_ino(ino, 0, &mut back).unwrap(), data.len());
    assert!(back == data);
    let c = fs.inode(ino).unwrap().compression.unwrap();
    assert_eq!((c.algorithm as u8, c.log_cluster_size), (2, 4));
}

#[test]
fn pin_ioctls_through_mount() {
    if !fuse_available() || !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("mount-pin");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "128M");
    let m = Mount::new(&img, &scratch.join("mnt"), "");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("swap"))
        .unwrap();
    let mut pin = 1u32;
    f2fs_ioctl(&file, 13, (&mut pin as *mut u32).cast()).unwrap();
    let mut failures = 99u32;
    f2fs_ioctl(&file, 14, (&mut failures as *mut u32).cast()).unwrap();
    assert_eq!(failures, 0, "pinned, never in the cleaner's way");
    let mut flags = 0 as libc::c_long;
    // SAFETY: the fd is open; FS_IOC_GETFLAGS writes an int.
    assert_eq!(
        unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) },
        0
    );
    assert_ne!(flags as u32 & 0x0080_0000, 0, "NOCOW shows the pin");
    // SAFETY: the fd is open.
    assert_eq!(
        unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, 1 << 20) },
        0
    );
    file.write_all_at(&[7u8; 8192], 40960).unwrap();
    file.sync_all().unwrap();
    let dir_path = m.path("d");
    fs::create_dir(&dir_path).unwrap();
    let dir = fs::File::open(&dir_path).unwrap();
    let err = f2fs_ioctl(&dir, 13, (&mut pin as *mut u32).cast()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    drop((file, dir));
    m.unmount();
    fsck_clean(&img, "pinned file through the mount");
    let fs = engine(&img);
    let ino = fs.resolve("/swap").unwrap().ino;
    assert!(fs.is_pinned(ino).unwrap());
    // Real blocks, one run: the pinned preallocation took a whole section.
    let extents = fs.file_extents("/swap").unwrap().extents;
    assert_eq!(extents.len(), 1, "{extents:?}");
    assert_eq!(extents[0].len, 256);
    let mut back = vec![0u8; 1 << 20];
    assert_eq!(fs.read_ino(ino, 0, &mut back).unwrap(), 1 << 20);
    assert!(back[40960..49152].iter().all(|&b| b == 7));
    assert!(back[..40960].iter().chain(&back[49152..]).all(|&b| b == 0));
}

/// With the write-back cache the kernel keeps mtime and ctime of writes
/// itself and sends both when it writes the inode back: the image must
/// hold exactly the times stat showed.
#[test]
fn kernel_write_times_reach_the_image() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-ctime");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let m = Mount::new(&img, &scratch.join("mnt"), "");
    let path = m.path("f");
    fs::write(&path, b"first").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"second", 0).unwrap();
    let seen = fs::metadata(&path).unwrap();
    file.sync_all().unwrap();
    drop(file);
    m.unmount();
    fsck_clean(&img, "writes with kernel-kept times");
    let inode = engine(&img).resolve("/f").unwrap();
    assert_eq!(
        (inode.mtime.sec, inode.mtime.nsec),
        (seen.mtime(), seen.mtime_nsec() as u32)
    );
    assert_eq!(
        (inode.ctime.sec, inode.ctime.nsec),
        (seen.ctime(), seen.ctime_nsec() as u32)
    );
}

/// What another process sees of `name` in `dir`: `stat -c '%i %s %a %h'`
/// (inode, size, mode, links), or "missing".
fn seen_by_another_process(dir: &Path, name: &str) -> String {
    sh_as(
        0,
        dir,
        &format!("stat -c '%i %s %a %h' {name} 2>/dev/null || echo missing"),
    )
    .unwrap()
    .trim()
    .to_string()
}

/// The kernel caches names (also misses) and attributes for the mount's
/// timeouts (1 s) and lists with attributes: every change made through
/// the mount must show at once, to this process (std::fs) and to another
/// one (stat(1)), whatever was cached just before it. The daemon is the
/// only writer, so the kernel's own invalidation on each change is all
/// that keeps them current. Both ways the names are cached: with
/// `default_permissions` (entries live for the timeout, listings carry
/// attributes) and without (entries are looked up again on each use).
#[test]
fn caches_never_show_stale_data_after_changes_through_the_mount() {
    if !fuse_available() || !require_tool("stat") {
        return;
    }
    for opts in ["default_permissions", ""] {
        let scratch = Scratch::new("mount-caches");
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let m = Mount::new(&img, &scratch.join("mnt"), opts);
        let dir = m.path("d");
        fs::create_dir(&dir).unwrap();
        let at = |name: &str| dir.join(name);
        let other = |name: &str| seen_by_another_process(&dir, name);
        let ino_of = |name: &str| fs::metadata(at(name)).unwrap().ino();
        let cache_everything = || {
            // A listing with attributes, then every name looked up and stat'ed.
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let _ = entry.metadata();
                let _ = other(&entry.file_name().to_string_lossy());
            }
        };

        // Rename over an existing name.
        fs::write(at("a"), b"AAAA").unwrap();
        fs::write(at("b"), b"BB").unwrap();
        let a_ino = ino_of("a");
        cache_everything();
        fs::rename(at("a"), at("b")).unwrap();
        assert_eq!(fs::read(at("b")).unwrap(), b"AAAA", "-o {opts}");
        assert_eq!(other("b"), format!("{a_ino} 4 644 1"), "-o {opts}");
        assert_eq!(other("a"), "missing", "-o {opts}");
        assert!(fs::metadata(at("a")).is_err(), "-o {opts}");

        // Unlink, and a new file under the same name.
        let old_ino = ino_of("b");
        cache_everything();
        fs::remove_file(at("b")).unwrap();
        assert_eq!(other("b"), "missing", "-o {opts}");
        fs::write(at("b"), b"new contents").unwrap();
        let new_ino = ino_of("b");
        assert_ne!(new_ino, old_ino, "-o {opts}");
        assert_eq!(other("b"), format!("{new_ino} 12 644 1"), "-o {opts}");

        // A miss cached, then the name created (by another process, and by us).
        assert_eq!(other("late"), "missing", "-o {opts}");
        assert!(fs::metadata(at("late")).is_err(), "-o {opts}");
        sh_as(0, &dir, "echo hi > late").unwrap();
        assert_eq!(fs::read(at("late")).unwrap(), b"hi\n", "-o {opts}");
        assert!(fs::metadata(at("later")).is_err(), "-o {opts}");
        fs::write(at("later"), b"x").unwrap();
        assert_eq!(
            other("later"),
            format!("{} 1 644 1", ino_of("later")),
            "-o {opts}"
        );

        // chmod, and truncate by another process.
        cache_everything();
        fs::set_permissions(at("late"), fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            other("late"),
            format!("{} 3 600 1", ino_of("late")),
            "-o {opts}"
        );
        sh_as(0, &dir, "truncate -s 10000 late").unwrap();
        assert_eq!(fs::metadata(at("late")).unwrap().len(), 10000, "-o {opts}");
        fs::File::options()
            .write(true)
            .open(at("late"))
            .unwrap()
            .set_len(7)
            .unwrap();
        assert_eq!(
            other("late"),
            format!("{} 7 600 1", ino_of("late")),
            "-o {opts}"
        );

        // A write through one descriptor, the size seen through another
        // and by another process, before and after the write-back.
        let writer = fs::File::options().append(true).open(at("later")).unwrap();
        (&writer).write_all(&[7u8; 5000]).unwrap();
        let reader = fs::File::open(at("later")).unwrap();
        assert_eq!(reader.metadata().unwrap().len(), 5001, "-o {opts}");
        assert_eq!(
            other("later"),
            format!("{} 5001 644 1", ino_of("later")),
            "-o {opts}"
        );
        writer.sync_all().unwrap();
        drop((writer, reader));
        assert_eq!(
            other("later"),
            format!("{} 5001 644 1", ino_of("later")),
            "-o {opts}"
        );

        // Hard links: every name shows the link count.
        let ino = ino_of("later");
        cache_everything();
        sh_as(0, &dir, "ln later linked").unwrap();
        assert_eq!(fs::metadata(at("later")).unwrap().nlink(), 2, "-o {opts}");
        assert_eq!(other("linked"), format!("{ino} 5001 644 2"), "-o {opts}");
        fs::hard_link(at("later"), at("third")).unwrap();
        assert_eq!(other("linked"), format!("{ino} 5001 644 3"), "-o {opts}");
        cache_everything();
        fs::remove_file(at("later")).unwrap();
        assert_eq!(other("third"), format!("{ino} 5001 644 2"), "-o {opts}");
        assert_eq!(fs::metadata(at("linked")).unwrap().nlink(), 2, "-o {opts}");

        // Directories: a new one, one renamed over an empty one, removed.
        fs::create_dir(at("sub")).unwrap();
        fs::create_dir(at("empty")).unwrap();
        cache_everything();
        let sub_ino = ino_of("sub");
        fs::rename(at("sub"), at("empty")).unwrap();
        assert_eq!(ino_of("empty"), sub_ino, "-o {opts}");
        assert_eq!(other("sub"), "missing", "-o {opts}");
        fs::remove_dir(at("empty")).unwrap();
        assert_eq!(other("empty"), "missing", "-o {opts}");

        // The listing holds exactly the names there are now.
        let mut names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["b", "late", "linked", "third"], "-o {opts}");
        m.unmount();
        fsck_clean(&img, &format!("cache checks with -o {opts}"));
        let fs = engine(&img);
        assert_eq!(fs.resolve("/d/third").unwrap().size, 5001);
        assert_eq!(fs.resolve("/d/late").unwrap().size, 7);
    }
}

/// Runs `script` with sh in `dir` as `uid` (0: as is); its output if it succeeded.
fn sh_as(uid: u32, dir: &Path, script: &str) -> Result<String, String> {
    sh_in_groups(uid, &[], dir, script)
}

/// `sh_as` with supplementary `groups` (the primary group is `uid`).
fn sh_in_groups(uid: u32, groups: &[u32], dir: &Path, script: &str) -> Result<String, String> {
    let mut cmd = Command::new("setpriv");
    if uid != 0 {
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"));
        if groups.is_empty() {
            cmd.arg("--clear-groups");
        } else {
            let list: Vec<String> = groups.iter().map(u32::to_string).collect();
            cmd.arg(format!("--groups={}", list.join(",")));
        }
    }
    let out = cmd
        .args(["sh", "-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Names the kernel cached while anyone could search their directory
/// stop working for those a later chmod, ACL or move shuts out, at once:
/// without `default_permissions` a cached name skips our check, so the
/// daemon has the kernel drop its names before it answers such a change.
#[test]
fn cached_names_do_not_outlive_a_loss_of_search_permission() {
    on_shared_mounts(
        "mount-perm-cached-names",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            root("mkdir -m 755 open moved private && mkdir -m 700 closed");
            root("echo a > open/a && echo b > moved/b && echo c > private/c");
            root("chmod 644 open/a moved/b private/c && chmod 711 private");
            for _ in 0..2 {
                // Looked up (and cached, where that is allowed) by nobody.
                assert_eq!(nobody("cat open/a moved/b private/c").unwrap(), "a\nb\nc\n");
            }
            root("chmod 700 open");
            assert!(nobody("cat open/a").is_err(), "chmod 700 of the directory");
            root("mv moved/b closed/b");
            assert!(
                nobody("cat closed/b").is_err(),
                "moved into a 0700 directory"
            );
            if require_tool("setfacl") {
                root(&format!("setfacl -m u:{NOBODY}:--- private"));
                assert!(
                    nobody("cat private/c").is_err(),
                    "an ACL entry denying search"
                );
            }
            root("chmod 755 open");
            assert_eq!(nobody("cat open/a").unwrap(), "a\n", "searchable again");
        },
        |_| {},
    );
}

/// setfacl/getfacl on a shared mount: with `default_permissions`
/// (FUSE_POSIX_ACL) the kernel enforces the ACLs for other users, without
/// it the daemon does; chmod and the ACL stay in step, new files inherit
/// default ACLs (and the umask applies only without one); the image holds
/// the ACLs after unmounting.
#[test]
fn posix_acls_through_mount() {
    if !require_tool("setfacl") {
        return;
    }
    on_shared_mounts("mount-acl", acls_grant_and_deny, acls_in_the_image);
}

fn acls_grant_and_deny(m: &Mount) {
    let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
    let nobody = |script: &str| sh_as(65534, &m.mnt, script);
    let stranger = |script: &str| sh_as(1234, &m.mnt, script);

    root("echo secret > f && chmod 600 f && setfacl -m u:nobody:r f");
    assert_eq!(
        root("getfacl -cp f"),
        "user::rw-\nuser:nobody:r--\ngroup::---\nmask::r--\nother::---\n\n"
    );
    assert_eq!(fs::metadata(m.path("f")).unwrap().mode() & 0o777, 0o640);
    assert_eq!(nobody("cat f").unwrap(), "secret\n");
    assert!(nobody("echo x >> f").is_err(), "read-only entry");
    assert!(stranger("cat f").is_err(), "no entry for uid 1234");
    // chmod rewrites the mask: nobody's entry is now masked away.
    root("chmod 600 f");
    assert!(root("getfacl -cp f").contains("mask::---"));
    assert!(nobody("cat f").is_err());
    root("chmod 640 f");
    assert_eq!(nobody("cat f").unwrap(), "secret\n");
    // Removing the extended entries leaves the owning group's own entry
    // (---) as the group bits, as on any Linux file system.
    root("setfacl -b f");
    assert_eq!(
        root("getfacl -cp f"),
        "user::rw-\ngroup::---\nother::---\n\n"
    );
    assert_eq!(fs::metadata(m.path("f")).unwrap().mode() & 0o777, 0o600);
    assert!(nobody("cat f").is_err());

    // Default ACLs: inherited with the requested mode, umask ignored.
    root("mkdir d && setfacl -d -m u:nobody:rwx d");
    root("umask 077 && touch d/new plain && mkdir d/sub");
    let mode = |rel: &str| fs::metadata(m.path(rel)).unwrap().mode() & 0o7777;
    assert_eq!((mode("d/new"), mode("plain")), (0o664, 0o600));
    assert_eq!(mode("d/sub"), 0o775);
    assert!(root("getfacl -cp d/sub").contains("default:user:nobody:rwx"));
    nobody("echo from-nobody > d/new").unwrap();
    assert!(stranger("echo x > d/new").is_err());
}

/// What `acls_grant_and_deny` left in the image.
fn acls_in_the_image(img: &Path) {
    let fs = engine(img);
    let new = fs.resolve("/d/new").unwrap();
    let access = fs
        .acl(&new, AclKind::Access)
        .unwrap()
        .expect("inherited ACL");
    assert_eq!(access.equiv_mode(new.mode), (new.mode, false));
    let mut data = vec![0u8; new.size as usize];
    fs.read(&new, 0, &mut data).unwrap();
    assert_eq!(data, b"from-nobody\n");
    let f = fs.resolve("/f").unwrap();
    assert_eq!(fs.acl(&f, AclKind::Access).unwrap(), None);
    assert_eq!(f.mode & 0o777, 0o600);
    let sub = fs.resolve("/d/sub").unwrap();
    assert!(fs.acl(&sub, AclKind::Default).unwrap().is_some());
}

fn tune(mnt: &Path, setting: Option<&str>) -> Output {
    let mut args: Vec<&OsStr> = vec!["tune".as_ref(), mnt.as_os_str()];
    args.extend(setting.map(OsStr::new));
    f2fuse(&args)
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "f2fuse tune: {out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn tune_through_the_control_channel() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-tune");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    // Bad mount options are refused before anything is mounted.
    let mnt = scratch.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    for bad in [
        "gc_urgent=9",
        "max_victim_search=0",
        "ipu_policy=256",
        "discard_granularity=1",
    ] {
        let out = f2fuse(&[
            "mount".as_ref(),
            img.as_os_str(),
            mnt.as_os_str(),
            "-o".as_ref(),
            bad.as_ref(),
        ]);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(bad),
            "{out:?}"
        );
    }
    let m = Mount::new(
        &img,
        &mnt,
        "allow_other,max_victim_search=20,cp_interval=30",
    );
    let list = stdout_of(&tune(&m.mnt, None));
    for line in [
        "max_victim_search=20",
        "cp_interval=30",
        "gc_urgent=0",
        "dir_level=0",
    ] {
        assert!(list.lines().any(|l| l == line), "{line} not in\n{list}");
    }
    assert_eq!(stdout_of(&tune(&m.mnt, Some("cp_interval"))), "30\n");
    assert_eq!(
        stdout_of(&tune(&m.mnt, Some("dir_level=2"))),
        "dir_level=2\n"
    );
    assert_eq!(stdout_of(&tune(&m.mnt, Some("dir_level"))), "2\n");
    // The new value takes effect: a directory made now gets hash level 2.
    fs::create_dir(m.path("leveled")).unwrap();
    for (setting, expect) in [
        ("discard_granularity", "unknown tunable"),
        ("ipu_policy=256", "out of range"),
        ("gc_urgent=4", "out of range"),
        ("dir_level=x", "not a non-negative integer"),
    ] {
        let out = tune(&m.mnt, Some(setting));
        assert!(!out.status.success(), "{setting}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{setting}: {err}");
    }
    assert_eq!(stdout_of(&tune(&m.mnt, Some("dir_level"))), "2\n");
    // Not an f2fuse mount.
    let out = tune(scratch.path(), None);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no f2fuse mount"),
        "{out:?}"
    );
    // Another user may not use the channel (the socket is the owner's).
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        use std::os::unix::process::CommandExt;
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
            .arg("tune")
            .arg(&m.mnt)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("permission denied"), "{err}");
    }
    m.unmount();
    fsck_clean(&img, "tuning a mount");
    assert_eq!(engine(&img).resolve("/leveled").unwrap().dir_level, 2);
    // The daemon removed its socket: the mount is gone.
    let out = tune(&mnt, None);
    assert!(!out.status.success());
}

/// `f2fuse status MNT` and `f2fuse extents MNT PATH` ask the running daemon
/// (its counters, its view of the file) through the control channel.
#[test]
fn status_and_extents_of_a_mount() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("mount-status");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let m = Mount::new(&img, &scratch.join("mnt"), "");
    let data = pattern(3 << 20, 9);
    let mut f = fs::File::create(m.path("three")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);

    let out = f2fuse(&["status".as_ref(), m.mnt.as_os_str(), "--json".as_ref()]);
    let json = stdout_of(&out);
    let user_written = json
        .split("\"user_bytes_written\":")
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no user_bytes_written in {json}"));
    // The daemon's counters, not a fresh open's zeros.
    assert!(user_written >= data.len() as u64, "{json}");
    let text = stdout_of(&f2fuse(&["status".as_ref(), m.mnt.as_os_str()]));
    assert!(text.contains("Write amplification"), "{text}");

    let out = f2fuse(&["extents".as_ref(), m.mnt.as_os_str(), "/three".as_ref()]);
    let text = stdout_of(&out);
    assert!(text.contains("768"), "3 MiB = 768 blocks: {text}");
    let out = f2fuse(&["extents".as_ref(), m.mnt.as_os_str(), "/missing".as_ref()]);
    assert!(!out.status.success());
    m.unmount();
    fsck_clean(&img, "status and extents of a mount");
}

/// The daemon drops set-user-ID and set-group-ID itself
/// (FUSE_HANDLE_KILLPRIV_V2): on a write or truncate by a user without
/// CAP_FSETID and on every chown; root's writes keep them.
#[test]
fn setid_bits_dropped_on_write_truncate_and_chown() {
    if !fuse_available() || !require_tool("setpriv") {
        return;
    }
    let scratch = Scratch::new("mount-killpriv");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let m = Mount::new(
        &img,
        &scratch.join("mnt"),
        "allow_other,default_permissions",
    );
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let mode_of = |name: &str| fs::metadata(m.path(name)).unwrap().mode() & 0o7777;
    let setid_file = |name: &str| {
        fs::write(m.path(name), b"x").unwrap();
        let c = cstr(&m.path(name));
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 1234, 1234) }, 0);
        fs::set_permissions(m.path(name), fs::Permissions::from_mode(0o6777)).unwrap();
    };
    // Root (CAP_FSETID) writes: the bits stay.
    setid_file("root-writes");
    fs::OpenOptions::new()
        .append(true)
        .open(m.path("root-writes"))
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(mode_of("root-writes"), 0o6777);
    // The owner (no CAP_FSETID) writes, or truncates: both bits go.
    setid_file("user-writes");
    sh_as(1234, &m.mnt, "printf y >> user-writes").unwrap();
    assert_eq!(mode_of("user-writes"), 0o777);
    setid_file("user-truncates");
    sh_as(1234, &m.mnt, "truncate -s 0 user-truncates").unwrap();
    assert_eq!(mode_of("user-truncates"), 0o777);
    // chown, even by root, drops them.
    setid_file("chowned");
    let c = cstr(&m.path("chowned"));
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 4321, 4321) }, 0);
    assert_eq!(mode_of("chowned"), 0o777);
    m.unmount();
    fsck_clean(&img, "dropping set-ID bits through the mount");
    let fs = engine(&img);
    assert_eq!(fs.resolve("/user-writes").unwrap().mode & 0o7777, 0o777);
    assert_eq!(fs.resolve("/root-writes").unwrap().mode & 0o7777, 0o6777);
}

/// The two ways of sharing a mount with other users: the kernel checks
/// permissions (`default_permissions`), or the daemon does (`allow_other`
/// alone). The permission tests run each scenario on both with the same
/// expectations, the kernel's answers being the reference.
const SHARED_MOUNTS: [&str; 2] = ["allow_other,default_permissions", "allow_other"];

/// Runs `scenario` on a fresh image mounted each way of `SHARED_MOUNTS`
/// (a mount point other users reach), unmounts, checks the image with
/// fsck.f2fs and then with `in_image`. Needs root (to act as other users
/// with setpriv).
fn on_shared_mounts(tag: &str, scenario: impl Fn(&Mount), in_image: impl Fn(&Path)) {
    if !fuse_available() || !require_tool("setpriv") {
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPING {tag}: needs root (other users)");
        return;
    }
    for opts in SHARED_MOUNTS {
        let scratch = Scratch::new(tag);
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let m = Mount::new(&img, &scratch.join("mnt"), opts);
        eprintln!("{tag}: -o {opts}");
        scenario(&m);
        m.unmount();
        fsck_clean(&img, &format!("{tag} with -o {opts}"));
        in_image(&img);
    }
}

const NOBODY: u32 = 65534;
const STRANGER: u32 = 1234;

/// The issue's report: root's 0600 file and 0700 directory, and root's
/// 0755 directory, are closed to other users; what the modes grant stays
/// open; search permission counts for every directory on the path.
#[test]
fn other_users_get_what_the_modes_grant() {
    on_shared_mounts(
        "mount-perm-modes",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            root("echo secret > secret && chmod 600 secret && mkdir private && chmod 700 private");
            root("echo inside > private/inside && chmod 644 private/inside");
            root("echo open > open && chmod 644 open && mkdir shared && chmod 777 shared");
            assert!(nobody("cat secret").is_err(), "read a 0600 file");
            assert!(nobody("ls private").is_err(), "list a 0700 directory");
            assert!(
                nobody("cat private/inside").is_err(),
                "search a 0700 directory"
            );
            assert!(nobody("echo pwn > secret").is_err(), "write another's file");
            assert!(nobody("echo pwn >> open").is_err(), "write a 0644 file");
            assert!(
                nobody("touch newfile").is_err(),
                "create in root's 0755 directory"
            );
            assert!(nobody("mkdir newdir").is_err());
            assert!(
                nobody("rm open").is_err(),
                "unlink in root's 0755 directory"
            );
            assert!(nobody("mv open moved").is_err());
            assert!(nobody("ln open hard").is_err());
            assert!(nobody("ln -s open soft").is_err());
            assert!(nobody("mkfifo fifo").is_err());
            assert_eq!(root("cat secret"), "secret\n");
            assert_eq!(nobody("cat open").unwrap(), "open\n");
            // Execute-only directory: names can be used, not listed.
            root("chmod 711 private");
            assert!(nobody("ls private").is_err());
            assert_eq!(nobody("cat private/inside").unwrap(), "inside\n");
            // A directory everyone may write: the new file is the caller's.
            nobody("echo mine > shared/mine").unwrap();
            let meta = fs::metadata(m.path("shared/mine")).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
            // Root reads anything, executes only what some x bit allows.
            root("chmod 000 secret");
            assert_eq!(root("cat secret"), "secret\n");
            root("printf '#!/bin/sh\\necho ran\\n' > script && chmod 644 script");
            assert!(sh_as(0, &m.mnt, "./script").is_err());
            root("chmod 100 script");
            assert_eq!(root("./script"), "ran\n");
        },
        |_| {},
    );
}

/// access(2) (FUSE ACCESS) and chdir answer for the calling user.
#[test]
fn access_and_chdir_answer_for_the_caller() {
    if !require_tool("setfacl") {
        return;
    }
    on_shared_mounts(
        "mount-perm-access",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            root("touch f && chmod 604 f && mkdir d && chmod 700 d && mkdir x && chmod 711 x");
            let probe = "for t in r w x; do test -$t f && printf $t || printf -; done";
            assert_eq!(nobody(probe).unwrap(), "r--");
            assert_eq!(root(probe), "rw-", "root: no x bit, no execute");
            root("chmod 640 f");
            assert_eq!(nobody(probe).unwrap(), "---");
            assert!(nobody("cd d").is_err());
            nobody("cd x").unwrap();
            assert_eq!(root("test -w d && test -x d && echo yes"), "yes\n");
            // Search permission along the path counts.
            root("touch d/inner && chmod 644 d/inner");
            assert!(nobody("test -r d/inner").is_err());
            root("chmod 711 d");
            nobody("test -r d/inner").unwrap();
            // So do ACL entries.
            root("setfacl -m u:nobody:rw f");
            assert_eq!(nobody(probe).unwrap(), "rw-");
            assert_eq!(sh_as(STRANGER, &m.mnt, probe).unwrap(), "---");
        },
        |_| {},
    );
}

/// Supplementary groups of the caller count (the daemon reads them from
/// /proc): a member of the directory's and file's group gets the group
/// class, the same user without the group does not.
#[test]
fn supplementary_groups_count() {
    on_shared_mounts(
        "mount-perm-groups",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            root("mkdir team && chown 0:1234 team && chmod 770 team");
            root("echo plan > team/plan && chown 0:1234 team/plan && chmod 660 team/plan");
            let member = |script: &str| sh_in_groups(NOBODY, &[100, STRANGER], &m.mnt, script);
            assert_eq!(member("ls team").unwrap(), "plan\n");
            member("echo more >> team/plan && touch team/new").unwrap();
            assert_eq!(root("cat team/plan"), "plan\nmore\n");
            // The new file is the member's, in the caller's primary group.
            let meta = fs::metadata(m.path("team/new")).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
            let outsider = |script: &str| sh_in_groups(NOBODY, &[100], &m.mnt, script);
            assert!(outsider("ls team").is_err());
            assert!(outsider("cat team/plan").is_err());
            // chgrp to a group of one's own only.
            member("chgrp 1234 team/new").unwrap();
            assert!(
                outsider("chgrp 100 team/new").is_err(),
                "not the owner's file any more"
            );
        },
        |_| {},
    );
}

/// In a sticky directory (1777) only an entry's owner, the directory's
/// owner and root remove or rename it.
#[test]
fn sticky_directory_keeps_entries_of_other_users() {
    on_shared_mounts(
        "mount-perm-sticky",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            let stranger = |script: &str| sh_as(STRANGER, &m.mnt, script);
            root("mkdir tmp && chmod 1777 tmp");
            nobody("touch tmp/mine tmp/other && mkdir tmp/dir").unwrap();
            assert!(stranger("rm -f tmp/mine").is_err());
            assert!(stranger("mv tmp/mine tmp/taken").is_err());
            assert!(stranger("rmdir tmp/dir").is_err());
            stranger("touch tmp/strangers").unwrap();
            assert!(
                nobody("mv -f tmp/mine tmp/strangers").is_err(),
                "replacing it"
            );
            nobody("rm tmp/mine && rmdir tmp/dir").unwrap();
            root("rm tmp/other");
            // Without the sticky bit, write permission on the directory is enough.
            root("chmod 777 tmp");
            nobody("rm -f tmp/strangers").unwrap();
        },
        |_| {},
    );
}

/// chmod: the owner only; a caller outside the file's group loses the
/// set-group-ID bit. chown: only root gives a file away.
#[test]
fn chmod_and_chown_rules() {
    on_shared_mounts(
        "mount-perm-chmod",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            let mode = |rel: &str| fs::metadata(m.path(rel)).unwrap().mode() & 0o7777;
            root("touch roots && mkdir pub && chmod 777 pub");
            assert!(nobody("chmod 666 roots").is_err(), "chmod of root's file");
            nobody("touch pub/f pub/g").unwrap();
            root("chgrp 0 pub/f");
            nobody("chmod 2755 pub/f").unwrap();
            assert_eq!(mode("pub/f"), 0o755, "set-group-ID of a non-member");
            nobody("chmod 2755 pub/g").unwrap();
            assert_eq!(mode("pub/g"), 0o2755, "set-group-ID in one's own group");
            root("chmod 2755 pub/f");
            assert_eq!(mode("pub/f"), 0o2755);
            assert!(nobody("chown 0 pub/g").is_err(), "giving a file away");
            assert!(nobody("chgrp 0 pub/g").is_err(), "a group one is not in");
            assert!(nobody("chown 65534:65534 roots").is_err());
            root("chown 1234:1234 pub/g");
            let meta = fs::metadata(m.path("pub/g")).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (STRANGER, STRANGER));
        },
        |_| {},
    );
}

/// utimensat: setting the times to now needs write permission or
/// ownership; setting given times needs ownership.
#[test]
fn utimes_rules() {
    on_shared_mounts(
        "mount-perm-utimes",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            let mtime = |rel: &str| fs::metadata(m.path(rel)).unwrap().mtime();
            root("touch -d @1000000000 open closed && chmod 666 open && chmod 644 closed");
            nobody("touch open").unwrap();
            assert!(mtime("open") > 1_000_000_000, "now, with write permission");
            assert!(
                nobody("touch closed").is_err(),
                "now, without write permission"
            );
            assert!(
                nobody("touch -d @2000000000 open").is_err(),
                "given times, not the owner"
            );
            assert!(nobody("touch -m -d @2000000000 open").is_err());
            assert_eq!(mtime("closed"), 1_000_000_000);
            root("mkdir pub && chmod 777 pub");
            nobody("touch pub/own && chmod 444 pub/own && touch -d @2000000000 pub/own").unwrap();
            assert_eq!(mtime("pub/own"), 2_000_000_000, "the owner, read-only file");
            nobody("touch pub/own").unwrap();
            // Writes through an open file set the mtime for non-owners too.
            root("touch -d @1000000000 open");
            nobody("echo data > open").unwrap();
            assert!(mtime("open") > 1_000_000_000);
        },
        |_| {},
    );
}

/// Programs: executing needs execute permission (and no read permission).
#[test]
fn exec_needs_execute_permission() {
    on_shared_mounts(
        "mount-perm-exec",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            root("cp /bin/true prog && chmod 700 prog");
            assert!(nobody("./prog").is_err());
            root("chmod 711 prog");
            nobody("./prog").unwrap();
            assert!(
                nobody("cat prog > /dev/null").is_err(),
                "no read permission"
            );
        },
        |_| {},
    );
}

/// Extended attributes: `user.*` needs read or write permission on the
/// file, `trusted.*` is root's (and not listed for others).
#[test]
fn xattr_namespaces_and_permissions() {
    if !require_tool("setfattr") {
        return;
    }
    on_shared_mounts(
        "mount-perm-xattr",
        |m| {
            let root = |script: &str| sh_as(0, &m.mnt, script).unwrap();
            let nobody = |script: &str| sh_as(NOBODY, &m.mnt, script);
            root("touch f && setfattr -n user.a -v 1 f && setfattr -n trusted.t -v 2 f");
            root("touch secret && chmod 600 secret && setfattr -n user.s -v 3 secret");
            assert!(
                nobody("setfattr -n user.b -v 1 f").is_err(),
                "no write permission"
            );
            assert!(nobody("setfattr -x user.a f").is_err());
            assert!(
                nobody("getfattr -n user.s secret").is_err(),
                "no read permission"
            );
            assert!(nobody("getfattr --only-values -n trusted.t f").is_err());
            // The names listxattr(2) gives, not only the values getfattr could read.
            let listed = nobody("python3 -c \"import os; print(os.listxattr('f'))\"").unwrap();
            assert!(
                listed.contains("user.a") && !listed.contains("trusted"),
                "{listed}"
            );
            assert!(root("getfattr -d -m - f").contains("trusted.t"));
            root("chmod 666 f");
            nobody("setfattr -n user.b -v 1 f").unwrap();
        },
        |_| {},
    );
}

/// The bytes of `path` that differ from `expected`, as "first at N (of M)".
fn differs(path: &Path, expected: &[u8]) -> Option<String> {
    let seen = fs::read(path).unwrap();
    let stale = seen.iter().zip(expected).filter(|(a, b)| a != b).count()
        + seen.len().abs_diff(expected.len());
    let first = seen.iter().zip(expected).position(|(a, b)| a != b);
    (stale > 0).then(|| format!("{stale} bytes differ, the first at {first:?}"))
}

/// Writes `len` bytes of `byte` at offset 0 of `path` with fio: O_DIRECT
/// and asynchronous (libaio), 16 KiB requests, 4 in flight.
fn fio_aio_write(path: &Path, len: usize, byte: u8) {
    let out = Command::new("fio")
        .args([
            "--name=aio",
            "--ioengine=libaio",
            "--direct=1",
            "--rw=write",
        ])
        .args([
            "--bs=16k",
            "--iodepth=4",
            "--invalidate=0",
            "--output=/dev/null",
        ])
        .arg(format!("--size={len}"))
        .arg(format!("--buffer_pattern=0x{byte:02x}"))
        .arg(format!("--filename={}", path.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "fio: {out:?}");
}

/// A file rewritten with O_DIRECT, synchronously and with AIO, while other
/// threads read it through the page cache: once a direct write has
/// returned, a buffered read sees its bytes, with and without the
/// write-back cache. (The kernel drops its cached pages after a
/// synchronous direct write, not after an asynchronous one.)
#[test]
fn direct_writes_reach_buffered_readers() {
    if !fuse_available() || !require_tool("fio") {
        return;
    }
    const LEN: usize = 64 << 10;
    for opts in ["", "no_writeback_cache"] {
        let scratch = Scratch::new("mount-dio-coherency");
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let m = Mount::new(&img, &scratch.join("mnt"), opts);
        let path = m.path("f");
        fs::write(&path, vec![0u8; LEN]).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (path, stop) = (path.clone(), stop.clone());
                std::thread::spawn(move || {
                    let file = fs::File::open(&path).unwrap();
                    let mut buf = vec![0u8; LEN];
                    while !stop.load(Ordering::Relaxed) {
                        file.read_exact_at(&mut buf, 0).unwrap();
                    }
                })
            })
            .collect();
        let writer = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let mut stale = None;
        for generation in 1..=40u8 {
            let (buf, off) = aligned(LEN, generation);
            if generation % 2 == 0 {
                fio_aio_write(&path, LEN, generation);
            } else {
                writer.write_all_at(&buf[off..off + LEN], 0).unwrap();
            }
            if let Some(diff) = differs(&path, &buf[off..off + LEN]) {
                stale = Some(format!("after direct write {generation}: {diff}"));
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(stale, None, "-o {opts:?}");
        drop(writer);
        m.unmount();
        fsck_clean(&img, "direct writes with buffered readers");
    }
}

/// Runs `scenario` on a fresh 64 MiB image mounted with `opts` plus
/// `allow_other,default_permissions` and once more without the write-back
/// cache (`scenario` is told whether it has it); unmounts and checks the
/// image with fsck.f2fs, then `in_image`. Needs root (chattr +i, other users).
fn with_and_without_writeback(
    tag: &str,
    opts: &str,
    scenario: impl Fn(&Mount, bool),
    in_image: impl Fn(&Path),
) {
    if !fuse_available() || !require_tool("setpriv") || !require_tool("chattr") {
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPING {tag}: needs root");
        return;
    }
    for cache in ["", ",no_writeback_cache"] {
        let scratch = Scratch::new(tag);
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let opts = format!("allow_other,default_permissions{opts}{cache}");
        let m = Mount::new(&img, &scratch.join("mnt"), &opts);
        fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777)).unwrap();
        eprintln!("{tag}: -o {opts}");
        scenario(&m, cache.is_empty());
        m.unmount();
        fsck_clean(&img, &format!("{tag} with -o {opts}"));
        in_image(&img);
    }
}

fn ctime_ns(path: &Path) -> (i64, i64) {
    let meta = fs::metadata(path).unwrap();
    (meta.ctime(), meta.ctime_nsec())
}

/// Changes the daemon makes on its own (the ctime of chattr, set-ID bits
/// dropped by a write) show in stat at once, not after the attribute
/// time-out (60 s here). With the write-back cache the kernel keeps the
/// ctime of regular files itself and ignores ours (see README): there only
/// a directory's ctime is checked.
#[test]
fn daemon_changes_reach_cached_attributes() {
    with_and_without_writeback(
        "mount-attr-inval",
        ",ttl=60",
        |m, writeback| {
            let (f, d) = (m.path("f"), m.path("d"));
            fs::write(&f, b"x").unwrap();
            fs::create_dir(&d).unwrap();
            let checked = if writeback { vec![&d] } else { vec![&f, &d] };
            for path in checked {
                let before = ctime_ns(path);
                std::thread::sleep(Duration::from_millis(20));
                assert!(chattr_as(0, "+a", path));
                assert_ne!(ctime_ns(path), before, "ctime after chattr +a {path:?}");
                let before = ctime_ns(path);
                std::thread::sleep(Duration::from_millis(20));
                assert!(chattr_as(0, "-a", path));
                assert_ne!(ctime_ns(path), before, "ctime after chattr -a {path:?}");
            }

            let mode_of = |name: &str| fs::metadata(m.path(name)).unwrap().mode() & 0o7777;
            sh_as(STRANGER, &m.mnt, "printf x > mine && chmod 6755 mine").unwrap();
            assert_eq!(mode_of("mine"), 0o6755);
            sh_as(STRANGER, &m.mnt, "printf y >> mine").unwrap();
            assert_eq!(
                mode_of("mine"),
                0o755,
                "set-ID bits after the owner's write"
            );
        },
        |img| {
            let fs = engine(img);
            assert_eq!(fs.resolve("/mine").unwrap().mode & 0o7777, 0o755);
        },
    );
}

/// fallocate, hole punching and zero range by a user without CAP_FSETID
/// drop set-user-ID and set-group-ID, as a write does.
#[test]
fn fallocate_drops_setid_bits() {
    if !require_tool("fallocate") {
        return;
    }
    with_and_without_writeback(
        "mount-falloc-killpriv",
        "",
        |m, _| {
            let mode_of = |name: &str| fs::metadata(m.path(name)).unwrap().mode() & 0o7777;
            for (name, op) in [
                ("alloc", "fallocate -l 64K"),
                ("punch", "fallocate -p -o 0 -l 4K"),
                ("zero", "fallocate -z -o 0 -l 8K"),
            ] {
                let make = format!("head -c 16384 /dev/zero > {name} && chmod 6777 {name}");
                sh_as(0, &m.mnt, &make).unwrap();
                sh_as(NOBODY, &m.mnt, &format!("{op} {name}")).unwrap();
                assert_eq!(mode_of(name), 0o777, "{op} by another user");
            }
            // Root keeps them.
            sh_as(0, &m.mnt, "chmod 6777 alloc && fallocate -l 128K alloc").unwrap();
            assert_eq!(mode_of("alloc"), 0o6777);
        },
        |img| {
            let fs = engine(img);
            for (name, mode) in [("alloc", 0o6777), ("punch", 0o777), ("zero", 0o777)] {
                assert_eq!(
                    fs.resolve(&format!("/{name}")).unwrap().mode & 0o7777,
                    mode,
                    "{name}"
                );
            }
        },
    );
}

/// A write, truncate or any fallocate mode by a user outside a set-group-ID
/// file's group takes the bit even without group execute (2666 becomes
/// 0666, as on Linux's local file systems); members of the group keep it,
/// through the primary group or a supplementary one. The same with the
/// kernel's permission checks and with the daemon's.
#[test]
fn setgid_dropped_for_changers_outside_the_group() {
    if !require_tool("fallocate") || !require_tool("truncate") {
        return;
    }
    const GROUP: u32 = 4321;
    let changes = [
        ("write", "printf x >>"),
        ("truncate", "truncate -s 1"),
        ("alloc", "fallocate -l 64K"),
        ("punch", "fallocate -p -o 0 -l 4K"),
        ("zero", "fallocate -z -o 0 -l 8K"),
    ];
    on_shared_mounts(
        "mount-killpriv-sgid",
        |m| {
            let mode_of = |name: &str| fs::metadata(m.path(name)).unwrap().mode() & 0o7777;
            for (what, change) in changes {
                for (who, uid, groups, kept) in [
                    ("outsider", NOBODY, &[100][..], 0o666),
                    ("member", NOBODY, &[100, GROUP][..], 0o2666),
                    ("primary", GROUP, &[][..], 0o2666),
                ] {
                    let name = format!("{what}-{who}");
                    let make = format!(
                        "head -c 16384 /dev/zero > {name} && chgrp {GROUP} {name} && chmod 2666 {name}"
                    );
                    sh_as(0, &m.mnt, &make).unwrap();
                    sh_in_groups(uid, groups, &m.mnt, &format!("{change} {name}")).unwrap();
                    assert_eq!(mode_of(&name), kept, "{what} by the {who}");
                }
            }
        },
        |img| {
            let fs = engine(img);
            for (what, _) in changes {
                let mode = fs.resolve(&format!("/{what}-outsider")).unwrap().mode;
                assert_eq!(mode & 0o7777, 0o666, "{what}");
            }
        },
    );
}

/// SEEK_DATA / SEEK_HOLE after a write into preallocated space answer as
/// the kernel's f2fs with its default settings, in the default mount
/// (zero-out chunks on): the preallocated blocks before the write are not
/// data (f2fs: 172032, the written block; zeroing them out gave 57344, the
/// preallocation's start), nor are any of them a hole; the same after
/// fsync.
#[test]
fn seek_after_a_write_into_preallocated_space() {
    let Some((m, img, _scratch)) = fresh_mount("mount-seek-prealloc", "") else {
        return;
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("f"))
        .unwrap();
    file.set_len(2 << 20).unwrap();
    let (start, end) = (57344, 1 << 20);
    // SAFETY: a valid descriptor.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            start,
            end - start,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    file.write_all_at(&[7u8; 4096], 172032).unwrap();
    let seek = |offset: i64, whence: i32| {
        // SAFETY: a valid descriptor.
        let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
        if at < 0 {
            -(std::io::Error::last_os_error().raw_os_error().unwrap() as i64)
        } else {
            at
        }
    };
    for when in ["before fsync", "after fsync"] {
        assert_eq!(seek(0, libc::SEEK_DATA), 172032, "SEEK_DATA {when}");
        assert_eq!(seek(start, libc::SEEK_DATA), 172032, "{when}");
        assert_eq!(seek(0, libc::SEEK_HOLE), 0, "{when}");
        assert_eq!(seek(172032, libc::SEEK_HOLE), end, "SEEK_HOLE {when}");
        assert_eq!(seek(end, libc::SEEK_DATA), -(libc::ENXIO as i64), "{when}");
        file.sync_all().unwrap();
    }
    drop(file);
    m.unmount();
    fsck_clean(&img, "a write into preallocated space");
}

/// copy_file_range(2) from `from` to `to` (whole range, offsets 0).
fn copy_range(from: &fs::File, to: &fs::File, len: usize) -> i32 {
    let (mut off_in, mut off_out): (i64, i64) = (0, 0);
    // SAFETY: valid descriptors and offset pointers.
    let r = unsafe {
        libc::copy_file_range(
            from.as_raw_fd(),
            &mut off_in,
            to.as_raw_fd(),
            &mut off_out,
            len,
            0,
        )
    };
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    } else {
        0
    }
}

/// A file made immutable after it was opened for writing: copy_file_range
/// into it is refused with EPERM, and so is write(2) where the kernel asks
/// the daemon (without the write-back cache); data written before the flag
/// was set stays.
#[test]
fn immutable_after_open_refuses_writes() {
    with_and_without_writeback(
        "mount-immutable-open",
        "",
        |m, writeback| {
            let (f, src) = (m.path("f"), m.path("src"));
            fs::write(&src, b"source bytes").unwrap();
            let out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&f)
                .unwrap();
            out.write_all_at(b"before", 0).unwrap();
            assert!(chattr_as(0, "+i", &f));
            let input = fs::File::open(&src).unwrap();
            assert_eq!(copy_range(&input, &out, 12), libc::EPERM, "copy_file_range");
            if !writeback {
                assert_eq!(
                    errno_of(out.write_all_at(b"after", 0)),
                    libc::EPERM,
                    "write"
                );
            }
            drop(out);
            assert_eq!(fs::read(&f).unwrap(), b"before");
            assert!(chattr_as(0, "-i", &f));
        },
        |img| {
            let fs = engine(img);
            let inode = fs.resolve("/f").unwrap();
            let mut data = vec![0u8; inode.size as usize];
            fs.read(&inode, 0, &mut data).unwrap();
            assert_eq!(data, b"before");
        },
    );
}

/// utime(path, NULL) (both times to now) works on an append-only file;
/// explicit times are refused.
#[test]
fn touch_of_append_only_file() {
    with_and_without_writeback(
        "mount-append-touch",
        "",
        |m, _| {
            let f = m.path("log");
            fs::write(&f, b"x").unwrap();
            assert!(chattr_as(0, "+a", &f));
            let c = cstr(&f);
            // SAFETY: a valid path; NULL times mean now.
            let r = unsafe { libc::utime(c.as_ptr(), std::ptr::null()) };
            assert_eq!(r, 0, "utime(NULL): {}", std::io::Error::last_os_error());
            assert_eq!(set_times_errno(&f, 1), libc::EPERM);
            assert!(chattr_as(0, "-a", &f));
        },
        |_| {},
    );
}
/// The atime of `path` in seconds.
fn atime_of(path: &Path) -> i64 {
    fs::metadata(path).unwrap().atime()
}

/// atime on read: relatime by default (updated when older than the mtime,
/// or a day old), strictatime (every read the daemon sees), noatime
/// (never); the times reach the image.
#[test]
fn atime_follows_the_mount_options() {
    if !fuse_available() {
        return;
    }
    const OLD: i64 = 1_000_000_000;
    for (opts, updated_twice) in [
        ("", Some(false)),
        ("strictatime", Some(true)),
        ("noatime", None),
    ] {
        let scratch = Scratch::new("mount-atime");
        let img = scratch.join("img");
        f2fuse_mkfs(&img, "64M");
        let m = Mount::new(&img, &scratch.join("mnt"), opts);
        let f = m.path("f");
        fs::write(&f, b"data").unwrap();
        // Written a moment ago, last read long ago.
        let c = cstr(&f);
        let times = [
            libc::timespec {
                tv_sec: OLD,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        // SAFETY: a valid path and two timespecs.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
            0
        );
        fs::read(&f).unwrap();
        let first = atime_of(&f);
        match updated_twice {
            None => assert_eq!(first, OLD, "-o {opts}: no update"),
            Some(_) => assert!(first > OLD, "-o {opts}: read after the write"),
        }
        // A second read: relatime leaves an atime newer than the mtime and
        // the ctime (which the utimensat sets to now).
        let recent = first + 100;
        let times = [
            libc::timespec {
                tv_sec: recent,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: first - 5,
                tv_nsec: 0,
            },
        ];
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
            0
        );
        fs::read(&f).unwrap();
        let second = atime_of(&f);
        match updated_twice {
            None => assert_eq!(second, recent),
            Some(true) => assert!(second < recent, "-o {opts}: every read"),
            Some(false) => assert_eq!(second, recent, "-o {opts}: relatime"),
        }
        // Directories: listing one is a read.
        fs::create_dir(m.path("d")).unwrap();
        let d = cstr(&m.path("d"));
        let times = [
            libc::timespec {
                tv_sec: OLD,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, d.as_ptr(), times.as_ptr(), 0) },
            0
        );
        fs::read_dir(m.path("d")).unwrap().for_each(drop);
        let dir_atime = atime_of(&m.path("d"));
        assert_eq!(
            dir_atime > OLD,
            updated_twice.is_some(),
            "-o {opts}: directory"
        );
        m.unmount();
        fsck_clean(&img, "atime updates");
        let fs = engine(&img);
        assert_eq!(fs.resolve("/f").unwrap().atime.sec, second, "-o {opts}");
        assert_eq!(fs.resolve("/d").unwrap().atime.sec, dir_atime, "-o {opts}");
    }
}

/// renameat2 with RENAME_WHITEOUT leaves a whiteout (a character device
/// 0:0) at the old name, so the mount serves as an overlayfs upper layer
/// whose removals of lower files stick. O_TMPFILE stays EOPNOTSUPP: the
/// kernel asks with FUSE_TMPFILE, which fuser 0.18 does not decode (README).
#[test]
fn rename_whiteout_and_overlay_upper_layer() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!(
            "SKIPPING rename_whiteout_and_overlay_upper_layer: needs root (CAP_MKNOD, overlayfs)"
        );
        return;
    }
    let Some((m, img, scratch)) = fresh_mount("mount-whiteout", "") else {
        return;
    };
    fs::write(m.path("old"), b"data").unwrap();
    // SAFETY: valid C strings.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cstr(&m.path("old")).as_ptr(),
            libc::AT_FDCWD,
            cstr(&m.path("new")).as_ptr(),
            libc::RENAME_WHITEOUT,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let whiteout = fs::symlink_metadata(m.path("old")).unwrap();
    assert_eq!(whiteout.mode(), libc::S_IFCHR, "a character device, mode 0");
    assert_eq!(whiteout.rdev(), 0);
    assert_eq!(fs::read(m.path("new")).unwrap(), b"data");

    // An overlay with the mount as its upper layer.
    let lower = scratch.join("lower");
    let merged = scratch.join("merged");
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&merged).unwrap();
    fs::write(lower.join("gone"), b"lower").unwrap();
    fs::create_dir(m.path("upper")).unwrap();
    fs::create_dir(m.path("work")).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        m.path("upper").display(),
        m.path("work").display()
    );
    let out = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .output()
        .unwrap();
    assert!(out.status.success(), "overlay mount: {out:?}");
    fs::remove_file(merged.join("gone")).unwrap();
    let listed: Vec<_> = fs::read_dir(&merged).unwrap().flatten().collect();
    let umount = Command::new("umount").arg(&merged).output().unwrap();
    assert!(umount.status.success(), "{umount:?}");
    assert!(listed.is_empty(), "removed lower file still listed");
    let kept = fs::symlink_metadata(m.path("upper/gone")).unwrap();
    assert_eq!(
        (kept.mode() & libc::S_IFMT, kept.rdev()),
        (libc::S_IFCHR, 0)
    );

    let tmpfile = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(&m.mnt);
    assert_eq!(errno_of(tmpfile), libc::EOPNOTSUPP);
    m.unmount();
    fsck_clean(&img, "whiteouts");
    let fs = engine(&img);
    for path in ["/old", "/upper/gone"] {
        let w = fs.resolve(path).unwrap();
        assert_eq!((w.kind, w.rdev), (FileKind::CharDevice, (0, 0)), "{path}");
    }
}

/// The atime of `path` in nanoseconds.
fn atime_ns(path: &Path) -> i128 {
    let meta = fs::metadata(path).unwrap();
    meta.atime() as i128 * 1_000_000_000 + meta.atime_nsec() as i128
}

/// The first read of a new file updates its atime under relatime in the
/// default mount (write-back cache): the kernel stamps the write's mtime
/// with its coarse clock, so the daemon stamps the new inode's atime with
/// the same clock, not a finer one that would put the atime after the
/// mtime (and make relatime skip the read).
#[test]
fn first_read_of_a_new_file_updates_its_atime() {
    let Some((m, img, _scratch)) = fresh_mount("mount-atime-new", "") else {
        return;
    };
    let mut born = Vec::new();
    for i in 0..8 {
        let f = m.path(&format!("f{i}"));
        fs::write(&f, b"data").unwrap();
        born.push((f.clone(), atime_ns(&f)));
    }
    // Past the clock's tick, so the read's atime differs from the birth's.
    std::thread::sleep(Duration::from_millis(50));
    for (f, birth) in &born {
        assert_eq!(fs::read(f).unwrap(), b"data");
        assert!(
            atime_ns(f) > *birth,
            "{f:?}: atime not updated by the first read"
        );
    }
    m.unmount();
    fsck_clean(&img, "reading new files");
}

/// `-o subtype=` with no name mounts as plain `fuse`, the type generic
/// FUSE test harnesses look for; the control channel still finds it.
#[test]
fn empty_subtype_mounts_as_plain_fuse() {
    let Some((m, img, _scratch)) = fresh_mount("mount-no-subtype", "subtype=") else {
        return;
    };
    assert_eq!(mount_entry(&m.mnt).0, "fuse");
    let out = tune(&m.mnt, Some("cp_interval"));
    assert_eq!(stdout_of(&out), "60\n", "f2fuse tune finds it: {out:?}");
    fs::write(m.path("f"), b"1").unwrap();
    m.unmount();
    fsck_clean(&img, "a mount without subtype");
}

/// The fuse.TYPE of the mount at `mnt` and its mount flags, from /proc/self/mountinfo.
fn mount_entry(mnt: &Path) -> (String, String) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = mnt.to_str().unwrap();
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(wanted))
        .unwrap();
    let fields: Vec<&str> = line.split(' ').collect();
    let dash = fields.iter().position(|f| *f == "-").unwrap();
    (fields[dash + 1].to_string(), fields[5].to_string())
}

/// Runs scripts/mount.fuse.f2fuse as mount(8) would.
fn mount_helper(args: &[&OsStr]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mount.fuse.f2fuse");
    Command::new("sh")
        .arg(script)
        .args(args)
        .env("F2FUSE", env!("CARGO_BIN_EXE_f2fuse"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// What generic FUSE tooling expects: `-o subtype=`, the mount(8) helper's
/// remount branch (ro and back to rw) and suid/dev for root, and a mount
/// right after unmounting the same image (the previous daemon still
/// writing its last checkpoint).
#[test]
fn mount_conventions() {
    if !fuse_available() {
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPING mount_conventions: needs root (mount(8), suid)");
        return;
    }
    let scratch = Scratch::new("mount-conventions");
    let img = scratch.join("img");
    f2fuse_mkfs(&img, "64M");
    let mnt = scratch.join("mnt");
    let m = Mount::new(&img, &mnt, "subtype=f2test");
    assert_eq!(mount_entry(&m.mnt).0, "fuse.f2test");
    let out = tune(&m.mnt, Some("cp_interval"));
    assert_eq!(stdout_of(&out), "60\n", "f2fuse tune finds it: {out:?}");
    fs::write(m.path("f"), b"1").unwrap();
    // Unmount and mount again at once: the new daemon waits for the old
    // one, which here serves a file still open on the detached mount for
    // another half second.
    let held = fs::File::open(m.path("f")).unwrap();
    let out = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut m = m;
    m.mounted = false;
    drop(m);
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
    });

    // mount(8) passes the options it does not turn into flags; root's
    // mount without nosuid/nodev gets suid and dev, as any file system.
    let out = mount_helper(&[
        img.as_os_str(),
        mnt.as_os_str(),
        "-o".as_ref(),
        "rw,allow_other".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = Mount {
        img: img.clone(),
        mnt: mnt.canonicalize().unwrap(),
        mounted: true,
    };
    closer.join().unwrap();
    assert_eq!(
        fs::read(m.path("f")).unwrap(),
        b"1",
        "the earlier daemon's data"
    );
    let (kind, flags) = mount_entry(&m.mnt);
    assert_eq!(kind, "fuse.f2fuse");
    assert!(
        !flags.contains("nosuid") && !flags.contains("nodev"),
        "{flags}"
    );
    // mount -o remount,ro: mount(8) hands the helper the whole option list.
    let remount = |change: &str| {
        let opts = format!("{change},nosuid,relatime,remount,user_id=0,group_id=0,allow_other");
        mount_helper(&[
            img.as_os_str(),
            m.mnt.as_os_str(),
            "-o".as_ref(),
            opts.as_ref(),
        ])
    };
    let out = remount("ro");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, flags) = mount_entry(&m.mnt);
    assert!(
        flags.starts_with("ro,") && flags.contains("nosuid"),
        "{flags}"
    );
    assert_eq!(errno_of(fs::write(m.path("g"), b"")), libc::EROFS);
    let out = remount("rw");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(m.path("g"), b"2").unwrap();
    m.unmount();
    fsck_clean(&img, "remounting");
    assert!(engine(&img).resolve("/g").is_ok());
}

/// Damaged compressed files: the CLI names the path and the damage,
/// extract leaves only them out, and the mount answers EIO for the
/// damaged cluster's bytes (as the kernel's page reads) and EUCLEAN (the
/// kernel's EFSCORRUPTED from iget) for an inode with an unknown
/// algorithm; everything else reads on.
#[test]
fn damaged_compressed_files_through_cli_and_mount() {
    if !fuse_available() || !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("mount-compress-damaged");
    let img = scratch.join("img");
    mkfs_f2fs(&img, 64 << 20, &["-O", "extra_attr,compression"]);
    let text = b"a line of compressible text\n".repeat(10_000);
    let (bad_payload, alg_node) = {
        let fs = Fs::open_path(
            &img,
            OpenOptions {
                writable: true,
                ..Default::default()
            },
        )
        .unwrap();
        let dir = fs.mkdir(F2FS_ROOT_INO, b"c", 0o755, 0, 0).unwrap();
        fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
        for name in ["bad", "alg", "good"] {
            let f = fs.create(dir.ino, name.as_bytes(), 0o644, 0, 0).unwrap();
            assert!(f.compression.is_some());
            fs.write(f.ino, 0, &text).unwrap();
        }
        fs.unmount().unwrap();
        let fs = engine(&img);
        let bad = fs.resolve("/c/bad").unwrap();
        let first_payload = fs.extents(&bad).unwrap()[0].1;
        let alg = fs.resolve("/c/alg").unwrap();
        let node = fs.node_manager().nat_entry(alg.ino).unwrap();
        (first_payload, node.block_addr.get())
    };
    let image = fs::OpenOptions::new().write(true).open(&img).unwrap();
    // clen past its blocks in cluster 0; algorithm 9 in the inode.
    image
        .write_all_at(&[0xff, 0xff, 0, 0], bad_payload as u64 * 4096)
        .unwrap();
    let algorithm_at = f2fuse_layout::compress::I_COMPRESS_ALGORITHM_OFFSET as u64;
    image
        .write_all_at(&[9], alg_node as u64 * 4096 + algorithm_at)
        .unwrap();
    drop(image);

    let cat = |path: &str| f2fuse(&["cat".as_ref(), img.as_os_str(), path.as_ref()]);
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = cat("/c/bad");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("/c/bad") && stderr(&out).contains("corrupt compressed cluster"),
        "{}",
        stderr(&out)
    );
    let out = cat("/c/alg");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown compression algorithm 9"),
        "{}",
        stderr(&out)
    );
    let out = cat("/c/good");
    assert!(
        out.status.success() && out.stdout == text,
        "{}",
        stderr(&out)
    );
    let dest = scratch.join("out");
    let out = f2fuse(&["extract".as_ref(), img.as_os_str(), dest.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for damaged in ["c/bad", "c/alg"] {
        assert!(stderr(&out).contains(damaged), "{}", stderr(&out));
    }
    assert_eq!(fs::read(dest.join("c/good")).unwrap(), text);
    assert!(!dest.join("c/bad").exists(), "no partial file");

    let m = Mount::new(&img, &scratch.join("mnt"), "ro");
    assert_eq!(fs::read(m.path("c/good")).unwrap(), text);
    assert_eq!(errno_of(fs::read(m.path("c/bad"))), libc::EIO);
    // The clusters after the damaged one still read.
    let bad = fs::File::open(m.path("c/bad")).unwrap();
    let mut tail = vec![0u8; 4096];
    bad.read_exact_at(&mut tail, 65536).unwrap();
    assert_eq!(tail, text[65536..65536 + 4096]);
    assert_eq!(errno_of(fs::metadata(m.path("c/alg"))), libc::EUCLEAN);
    drop(bad);
    m.unmount();
}

/// A writable mount compresses as the kernel: `chattr +c` on a directory
/// gives its new files compression with the mount's algorithm, level,
/// cluster size and checksum, `nocompress_extension` wins over the
/// directory, and writes, a truncation inside a cluster and fsync through
/// the mount leave an image fsck.f2fs finds clean with the bytes intact.
#[test]
fn compressed_writes_through_mount() {
    if !fuse_available() || !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("mount-compress-writes");
    let img = scratch.join("img");
    mkfs_f2fs(&img, 128 << 20, &["-O", "extra_attr,compression"]);
    let m = Mount::new(
        &img,
        &scratch.join("mnt"),
        "compress_algorithm=zstd:3,compress_log_size=4,compress_chksum,nocompress_extension=jpg",
    );
    let dir = m.path("c");
    fs::create_dir(&dir).unwrap();
    assert!(chattr_as(0, "+c", &dir));
    assert!(lsattr(&dir).contains('c'));
    let mut text = b"a line of compressible text\n".repeat(60_000);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.join("a.txt"))
        .unwrap();
    file.write_all_at(&text, 0).unwrap();
    file.write_all_at(b"overwritten", 100_000).unwrap();
    text[100_000..100_011].copy_from_slice(b"overwritten");
    file.sync_all().unwrap();
    // Cut inside a cluster of 16 blocks.
    file.set_len(1_000_123).unwrap();
    text.truncate(1_000_123);
    file.sync_all().unwrap();
    drop(file);
    fs::write(dir.join("b.jpg"), &text[..50_000]).unwrap();
    assert!(lsattr(&dir.join("a.txt")).contains('c'));
    assert_eq!(fs::read(dir.join("a.txt")).unwrap(), text);
    m.unmount();
    fsck_clean(&img, "compressed writes through the mount");
    let fs = engine(&img);
    let a = fs.resolve("/c/a.txt").unwrap();
    let c = a.compression.expect("a.txt compressed");
    assert_eq!(
        (c.algorithm as u8, c.level(), c.log_cluster_size),
        (2, 3, 4)
    );
    assert!(c.has_checksum());
    assert!(c.compr_blocks > 100, "{}", c.compr_blocks);
    let mut back = vec![0u8; text.len()];
    assert_eq!(fs.read(&a, 0, &mut back).unwrap(), text.len());
    assert!(back == text);
    assert!(fs.resolve("/c/b.jpg").unwrap().compression.is_none());
}

/// A quota image (mkfs.f2fs -O quota,project_quota) used through the
/// mount: usage after a workload is what fsck.f2fs recomputes; chattr -p
/// and +P set and pass on project ids; with `usrquota` a write past the
/// limit `f2fuse quota ... set` gave fails with EDQUOT.
#[test]
fn quota_accounting_and_limits_through_mount() {
    if !fuse_available() || !require_f2fs_tools() || !require_tool("chattr") {
        return;
    }
    let scratch = Scratch::new("mount-quota");
    let img = scratch.join("img");
    mkfs_f2fs(
        &img,
        128 << 20,
        &["-O", "extra_attr,quota,project_quota,lost_found"],
    );
    let m = Mount::new(&img, &scratch.join("mnt"), "default_permissions");
    let (d, p) = (m.path("d"), m.path("p"));
    fs::create_dir(&d).unwrap();
    fs::write(d.join("a"), pattern(300_000, 1)).unwrap();
    fs::write(d.join("b"), pattern(2 << 20, 2)).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(d.join("b"))
        .unwrap()
        .set_len(70_000)
        .unwrap();
    std::os::unix::fs::chown(d.join("a"), Some(1000), Some(100)).unwrap();
    fs::hard_link(d.join("a"), m.path("a2")).unwrap();
    fs::rename(d.join("b"), m.path("b")).unwrap();
    std::os::unix::fs::symlink("a/long/target/name", d.join("ln")).unwrap();
    fs::write(d.join("gone"), pattern(50_000, 3)).unwrap();
    fs::remove_file(d.join("gone")).unwrap();
    fs::create_dir(&p).unwrap();
    let status = Command::new("chattr")
        .args(["-p", "42", "+P"])
        .arg(&p)
        .status()
        .unwrap();
    assert!(status.success(), "chattr -p 42 +P");
    fs::write(p.join("f"), pattern(90_000, 4)).unwrap();
    fs::create_dir(p.join("sub")).unwrap();
    let projid = |path: &Path| {
        let out = Command::new("lsattr")
            .args(["-d", "-p"])
            .arg(path)
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(projid(&p.join("f")), "42");
    assert_eq!(projid(&p.join("sub")), "42");
    assert_eq!(errno_of(fs::rename(m.path("b"), p.join("b"))), libc::EXDEV);
    m.unmount();
    fsck_clean(&img, "a quota workload through the mount");
    let quota_of = |kind: usize, id: u32| {
        engine(&img)
            .quota_file(kind)
            .unwrap()
            .into_iter()
            .find(|(i, _)| *i == id)
            .map(|(_, d)| (d.curinodes, d.curspace))
    };
    assert_eq!(quota_of(2, 42).map(|q| q.0), Some(3));
    assert_eq!(quota_of(0, 1000).map(|q| q.0), Some(1));

    // Limits, enforced with usrquota (root included: see README), set
    // through the mount's control channel.
    let m = Mount::new(
        &img,
        &scratch.join("mnt"),
        "default_permissions,usrquota,no_writeback_cache",
    );
    let mnt = m.path("");
    let set: Vec<&OsStr> = ["quota", "", "set", "user", "1000", "0", "400", "0", "0"]
        .iter()
        .map(|a| {
            if a.is_empty() {
                mnt.as_os_str()
            } else {
                OsStr::new(a)
            }
        })
        .collect();
    let out = f2fuse(&set);
    assert!(out.status.success(), "quota set: {out:?}");
    let out = f2fuse(&["quota".as_ref(), mnt.as_os_str()]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..]
                .starts_with(&["1000", "296", "0", "400"])),
        "{table}"
    );
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.path("d/a"))
        .unwrap();
    f.seek(SeekFrom::Start(300_000)).unwrap();
    let err = f.write_all(&pattern(200_000, 5)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EDQUOT), "{err}");
    drop(f);
    m.unmount();
    fsck_clean(&img, "EDQUOT through the mount");
    assert_eq!(quota_of(0, 1000).map(|q| q.1), Some(400 << 10));
}
