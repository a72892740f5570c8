//! `f2fuse build`: host trees with every edge case become images that
//! fsck.f2fs accepts, that read back through the engine exactly like the
//! source tree, and that `f2fuse extract` turns back into the source tree.

use f2fuse_testkit as support;

use crate::common::{acl_with_user_1000, f2fuse, fails, ok};
use f2fuse_engine::{Fs, OpenOptions};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use support::*;

fn assert_fsck(img: &Path, when: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck.f2fs after {when}:\n{report}");
    }
}

fn open(img: &Path) -> Fs {
    Fs::open_path(img, OpenOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", img.display()))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and value buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn set_times(path: &Path, sec: i64, nsec: i64) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: sec - 1000,
            tv_nsec: nsec / 2,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: valid C string and a two-element timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", path.display());
}

fn mknod(path: &Path, mode: u32, major: u32, minor: u32) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    let r = unsafe { libc::mknod(c.as_ptr(), mode, libc::makedev(major, minor)) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// The edge tree plus, as root, what only root can make: device nodes,
/// trusted.* and security.* xattrs (security.selinux and
/// security.capability included) and a root directory with its own owner.
/// Every user gets a root directory with its own mode, times and xattr.
fn source_tree(src: &Path, root: bool) {
    let info = generate_edge_tree(src, &TreeOptions::small());
    let unexpected: Vec<&String> = info
        .skipped
        .iter()
        .filter(|n| root || !n.starts_with("owners:"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "tree generator skipped {unexpected:?}"
    );
    let special = src.join(paths::SPECIAL);
    let x = src.join(paths::XATTR);
    let mut timed = vec![special.clone(), x.join("small"), src.to_path_buf()];
    if root {
        mknod(&special.join("null_like"), libc::S_IFCHR | 0o666, 1, 3);
        mknod(&special.join("block"), libc::S_IFBLK | 0o640, 259, 65_537);
        timed.extend([special.join("null_like"), special.join("block")]);
        set_xattr(&x.join("small"), "trusted.overlay.opaque", b"y");
        set_xattr(
            &x.join("small"),
            "security.selinux",
            b"system_u:object_r:etc_t:s0\0",
        );
        // Dropped by chown: extract must set it after the owner.
        let cap = [
            1, 0, 0, 2, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        set_xattr(&x.join("big"), "security.capability", &cap);
        set_xattr(&special.join("fifo"), "trusted.on_fifo", b"fifo value");
        set_xattr(
            &src.join("symlinks/short"),
            "security.selinux",
            b"system_u:object_r:link_t:s0\0",
        );
        set_xattr(src, "trusted.root", b"\x00\x01");
        std::os::unix::fs::chown(src, Some(1234), Some(5678)).unwrap();
    }
    set_xattr(src, "user.root_attr", b"on the root");
    std::fs::set_permissions(src, std::os::unix::fs::PermissionsExt::from_mode(0o2751)).unwrap();
    for p in timed {
        set_times(&p, 1_600_000_000, 123_456_789);
    }
}

fn compare(
    what: &str,
    expected: &BTreeMap<String, HostEntry>,
    actual: &BTreeMap<String, HostEntry>,
    fields: CompareWhat,
) {
    if let Err(report) = compare_trees(expected, actual, fields) {
        panic!("{what}:\n{report}");
    }
}

/// The whole edge tree: build (default size), fsck, read back through the
/// engine, extract and compare again, every field of `CompareWhat::all()`
/// both times, nothing excluded (directory sizes, which `all()` leaves out,
/// are file-system specific). Not as root, the tree has no device nodes or
/// trusted.*/security.* xattrs, and extract cannot set owners.
#[test]
fn build_edge_tree_round_trip() {
    if !require_f2fs_tools() {
        return;
    }
    let started = Instant::now();
    let scratch = Scratch::new("cli-build");
    let src = scratch.join("src");
    let root = is_root();
    source_tree(&src, root);
    let expected = scan_host_tree(&src);
    let img = scratch.join("built.img");
    let run = ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img.as_os_str(),
        "-q".as_ref(),
    ]);
    assert!(
        run.stderr.is_empty(),
        "quiet build printed:\n{}",
        run.stderr
    );
    let built = Instant::now();
    assert_fsck(&img, "build of the edge tree");
    eprintln!("build {:.1} s", (built - started).as_secs_f64());

    // The default size: 1.5 x what the tree needs + 64 MiB, whole MiB.
    let size = std::fs::metadata(&img).unwrap().len();
    assert_eq!(size % (1 << 20), 0);
    assert!((64 << 20..512 << 20).contains(&size), "image size {size}");

    let fs = open(&img);
    compare(
        "engine view of the built image vs the source",
        &expected,
        &scan_image(&fs),
        CompareWhat::all(),
    );
    // Holes stay holes: the 1 MiB hole-only file has only its inode block,
    // the trailing-hole file its one data block.
    assert_eq!(fs.resolve("/sparse/hole_only").unwrap().blocks, 1);
    assert_eq!(fs.resolve("/sparse/trailing_hole").unwrap().blocks, 2);
    if root {
        let dev = fs.resolve("/special/block").unwrap();
        assert_eq!(dev.rdev, (259, 65_537));
    }
    drop(fs);

    let out = scratch.join("extracted");
    ok(&[
        "extract".as_ref(),
        img.as_os_str(),
        out.as_os_str(),
        "-q".as_ref(),
    ]);
    compare(
        "extracted tree vs the source",
        &expected,
        &scan_host_tree(&out),
        CompareWhat {
            owner: root,
            ..CompareWhat::all()
        },
    );

    // Again with every inode feature the writer supports (inode checksums,
    // extra attribute area, flexible inline xattrs, crtime).
    let img2 = scratch.join("features.img");
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img2.as_os_str(),
        "-q".as_ref(),
        "-O".as_ref(),
        "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime".as_ref(),
    ]);
    assert_fsck(&img2, "build of the edge tree with features");
    compare(
        "engine view of the built image (features) vs the source",
        &expected,
        &scan_image(&open(&img2)),
        CompareWhat::all(),
    );
    eprintln!("whole test {:.1} s", started.elapsed().as_secs_f64());
}

/// Features and label when formatting; the image lying inside the tree is
/// not copied into itself; a second build into the existing image merges.
#[test]
fn build_with_features_merge_and_self() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("cli-build-opts");
    let src = scratch.join("src");
    std::fs::create_dir_all(src.join("dir/sub")).unwrap();
    std::fs::write(src.join("dir/a"), b"first").unwrap();
    std::fs::write(src.join("keep"), vec![7u8; 10_000]).unwrap();
    // A POSIX ACL (not expressible by the mode: a named user entry), if the
    // host supports them: not copied, with a warning.
    let acl = acl_with_user_1000();
    let keep = std::ffi::CString::new(src.join("keep").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C strings and value buffer.
    let has_acl = unsafe {
        libc::lsetxattr(
            keep.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            acl.as_ptr().cast(),
            acl.len(),
            0,
        )
    } == 0;
    let img = src.join("inside.img");
    let run = ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img.as_os_str(),
        "--size".as_ref(),
        "80M".as_ref(),
        "-O".as_ref(),
        "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime".as_ref(),
        "-l".as_ref(),
        "built-label".as_ref(),
    ]);
    assert!(
        run.stderr.contains("is the image itself; not copied"),
        "{}",
        run.stderr
    );
    if has_acl {
        assert!(
            run.stderr.contains(
                "keep: not copied: system.posix_acl_access: POSIX ACLs are not supported"
            ),
            "{}",
            run.stderr
        );
    }
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 80 << 20);
    assert_fsck(&img, "build with features");
    let info = ok(&["info".as_ref(), img.as_os_str()]).stdout;
    assert!(info.contains("\"built-label\""), "{info}");
    assert!(info.contains("inode_checksum"), "{info}");
    let fs = open(&img);
    assert!(fs.resolve("/inside.img").is_err());
    assert!(fs.resolve("/").unwrap().crtime.is_some());
    drop(fs);

    // Move the image out, change the tree, build into the existing image:
    // new entries are added, files replaced, directories merged, and what
    // the tree does not have stays.
    let img2 = scratch.join("outside.img");
    std::fs::rename(&img, &img2).unwrap();
    ok(&[
        "mkdir".as_ref(),
        img2.as_os_str(),
        "/only_in_image".as_ref(),
    ]);
    std::fs::write(src.join("dir/a"), b"second version").unwrap();
    std::fs::write(src.join("dir/sub/new"), b"new").unwrap();
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img2.as_os_str(),
        "-q".as_ref(),
    ]);
    assert_fsck(&img2, "build into an existing image");
    let fs = open(&img2);
    let a = fs.resolve("/dir/a").unwrap();
    let mut buf = vec![0u8; 64];
    let n = fs.read(&a, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"second version");
    assert!(fs.resolve("/dir/sub/new").is_ok());
    assert!(fs.resolve("/only_in_image").is_ok());
    assert_eq!(fs.resolve("/keep").unwrap().size, 10_000);
    drop(fs);

    // Formatting options on an existing image need --size or --format.
    fails(
        &[
            "build".as_ref(),
            src.as_os_str(),
            img2.as_os_str(),
            "-l".as_ref(),
            "x".as_ref(),
        ],
        "only apply when formatting",
    );
    // --format starts over at the present size.
    ok(&[
        "build".as_ref(),
        scratch.join("src/dir").as_os_str(),
        img2.as_os_str(),
        "--format".as_ref(),
        "-q".as_ref(),
    ]);
    assert_fsck(&img2, "build --format");
    assert_eq!(std::fs::metadata(&img2).unwrap().len(), 80 << 20);
    let fs = open(&img2);
    assert!(fs.resolve("/only_in_image").is_err());
    assert!(fs.resolve("/sub/new").is_ok());
}

/// `build -c` compresses as sload.f2fs does: the chosen files by
/// extension, with the given algorithm and cluster size, released with -r.
#[test]
fn build_compressed_files() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("build-compress");
    let src = scratch.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let text = b"a line of compressible text\n".repeat(20_000);
    let mut rng = Rng(5);
    let noise: Vec<u8> = (0..100_000).map(|_| rng.below(256) as u8).collect();
    std::fs::write(src.join("a.txt"), &text).unwrap();
    std::fs::write(src.join("sub/b.TXT"), &text).unwrap();
    std::fs::write(src.join("n.bin"), &noise).unwrap();
    std::fs::write(src.join("plain"), &text).unwrap();
    let (img, released) = (scratch.join("img"), scratch.join("released"));
    // The compression options need -c (a usage error, from clap).
    let lone = f2fuse(&[
        "build".as_ref(),
        src.as_os_str(),
        img.as_os_str(),
        "-a".as_ref(),
        "lz4".as_ref(),
    ]);
    assert!(
        lone.code == Some(2) && lone.stderr.contains("--compress"),
        "{}",
        lone.stderr
    );
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img.as_os_str(),
        "-q".as_ref(),
        "-c".as_ref(),
        "-a".as_ref(),
        "zstd".as_ref(),
        "-L".as_ref(),
        "4".as_ref(),
        "-x".as_ref(),
        "bin".as_ref(),
    ]);
    assert_fsck(&img, "build -c -x bin");
    let fs = open(&img);
    for (path, data, compressed) in [
        ("/a.txt", &text, true),
        ("/sub/b.TXT", &text, true),
        ("/n.bin", &noise, false),
        ("/plain", &text, true),
    ] {
        let inode = fs.inode(fs.resolve(path).unwrap().ino).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(fs.read_ino(inode.ino, 0, &mut back).unwrap(), data.len());
        assert!(back == *data, "{path}");
        let c = inode.compression;
        assert_eq!(c.is_some(), compressed, "{path}");
        if let Some(c) = c {
            assert_eq!((c.algorithm.name(), c.log_cluster_size), ("zstd", 4));
            assert!(c.compr_blocks > 0 || path == "/n.bin");
        }
    }
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        released.as_os_str(),
        "-q".as_ref(),
        "-c".as_ref(),
        "-i".as_ref(),
        "txt".as_ref(),
        "-r".as_ref(),
    ]);
    assert_fsck(&released, "build -c -i txt -r");
    let fs = open(&released);
    let a = fs.inode(fs.resolve("/a.txt").unwrap().ino).unwrap();
    let c = a.compression.expect("a.txt compressed");
    assert!(c.released && c.compr_blocks == 0);
    let mut back = vec![0u8; text.len()];
    assert_eq!(fs.read_ino(a.ino, 0, &mut back).unwrap(), text.len());
    assert!(back == text);
    // As sload.f2fs, extensions match case-sensitively.
    let b = fs.inode(fs.resolve("/sub/b.TXT").unwrap().ino).unwrap();
    assert!(b.compression.is_none());
}

#[test]
fn build_errors() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("cli-build-err");
    let src = scratch.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Not a multiple of 2 MiB (see engine_bug_full_segment_in_checkpoint
    // in write_commands.rs).
    std::fs::write(src.join("big"), vec![1u8; (100 << 20) + 12_345]).unwrap();
    let img = scratch.join("img");

    fails(
        &[
            "build".as_ref(),
            scratch.join("missing").as_os_str(),
            img.as_os_str(),
        ],
        "No such file or directory",
    );
    fails(
        &[
            "build".as_ref(),
            src.join("big").as_os_str(),
            img.as_os_str(),
        ],
        "not a directory",
    );
    fails(
        &[
            "build".as_ref(),
            src.as_os_str(),
            img.as_os_str(),
            "--size".as_ref(),
            "12Q".as_ref(),
        ],
        "invalid size",
    );
    fails(
        &[
            "build".as_ref(),
            src.as_os_str(),
            img.as_os_str(),
            "-O".as_ref(),
            "bogus".as_ref(),
        ],
        "unknown feature",
    );
    // Too small: refused before anything is copied; the image stays clean.
    fails(
        &[
            "build".as_ref(),
            src.as_os_str(),
            img.as_os_str(),
            "--size".as_ref(),
            "64M".as_ref(),
        ],
        "use a larger --size",
    );
    assert_fsck(&img, "a refused build");
    // The default size fits.
    std::fs::remove_file(&img).unwrap();
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        img.as_os_str(),
        "-q".as_ref(),
    ]);
    assert_fsck(&img, "build with the default size");
    let size = std::fs::metadata(&img).unwrap().len();
    assert!(
        size >= (100 << 20) * 3 / 2 + (64 << 20),
        "default size {size}"
    );
    // An empty image file (as from mktemp) counts as new: default size too.
    let empty = scratch.join("empty.img");
    std::fs::File::create(&empty).unwrap();
    ok(&[
        "build".as_ref(),
        src.as_os_str(),
        empty.as_os_str(),
        "-q".as_ref(),
    ]);
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), size);
    assert_fsck(&empty, "build into an empty file");
}

/// Arguments from strings and paths alike.
fn selinux_label(fs: &Fs, path: &str) -> Option<String> {
    let inode = fs.resolve(path).unwrap();
    fs.get_xattr(&inode, b"security.selinux")
        .ok()
        .map(|v| String::from_utf8(v).unwrap())
}

/// A tree and file_contexts where libselinux's choice is not the most
/// specific line: a plain path beats any regex, a later regex beats an
/// earlier more specific one, type fields are honoured.
fn android_tree(src: &Path) -> std::path::PathBuf {
    for dir in ["bin", "dir/sub", "lib"] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
    }
    for file in ["bin/sh", "bin/other", "dir/sub/f", "dir/sub/g", "a.txt"] {
        std::fs::write(src.join(file), file).unwrap();
    }
    std::os::unix::fs::symlink("bin/sh", src.join("link")).unwrap();
    let contexts = src.with_file_name("file_contexts");
    std::fs::write(
        &contexts,
        "# test contexts\n\
         /             u:object_r:rootfs:s0\n\
         /bin/sh    -- u:object_r:shell_exec:s0\n\
         /bin(/.*)?    u:object_r:bin:s0\n\
         /.*           u:object_r:all:s0\n\
         /dir/sub/f    u:object_r:f_plain:s0\n\
         /dir/sub/.*   u:object_r:sub:s0\n\
         /lib(/.*)? -d u:object_r:libdir:s0\n\
         /link      -l u:object_r:link:s0\n\
         /system(/.*)? u:object_r:system_file:s0\n\
         /system/bin/sh u:object_r:sys_sh:s0\n",
    )
    .unwrap();
    contexts
}

/// `-s` and `-t` label every entry as sload.f2fs 1.15 (libselinux 3.4)
/// does, and `-T` gives every inode sload's fixed time: checked against
/// sload.f2fs itself with the mount points / and /system. The root is
/// compared with `-t /` only: sload looks it up as mount point twice
/// (`/system/system`), we as the mount point.
#[test]
fn build_labels_and_times_like_sload() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("cli-build-selinux");
    let src = scratch.join("src");
    let contexts = android_tree(&src);
    let paths = [
        "/bin",
        "/bin/sh",
        "/bin/other",
        "/dir",
        "/dir/sub",
        "/dir/sub/f",
        "/dir/sub/g",
        "/a.txt",
        "/link",
        "/lib",
    ];
    for mount_point in ["/", "/system"] {
        let theirs = scratch.join("sload.img");
        mkfs_f2fs(&theirs, 64 << 20, &[]);
        let out = Command::new(find_tool("sload.f2fs").unwrap())
            .args(["-s".as_ref(), contexts.as_os_str(), "-t".as_ref()])
            .args([mount_point, "-T", "1600000000", "-f"])
            .args([src.as_os_str(), theirs.as_os_str()])
            .output()
            .unwrap();
        assert!(out.status.success(), "sload.f2fs: {out:?}");
        let ours = scratch.join("ours.img");
        let _ = std::fs::remove_file(&ours);
        ok(&args![
            "build",
            src,
            ours,
            "-q",
            "-s",
            contexts,
            "-t",
            mount_point,
            "-T",
            "1600000000"
        ]);
        assert_fsck(&ours, "a labelled build");
        let (theirs, ours) = (open(&theirs), open(&ours));
        let root: &[&str] = if mount_point == "/" { &["/"] } else { &[] };
        for path in root.iter().chain(&paths) {
            assert_eq!(
                selinux_label(&ours, path),
                selinux_label(&theirs, path),
                "label of {path} with -t {mount_point}"
            );
        }
        for path in paths {
            let (a, b) = (theirs.resolve(path).unwrap(), ours.resolve(path).unwrap());
            assert_eq!(
                (b.atime, b.mtime, b.ctime),
                (a.atime, a.mtime, a.ctime),
                "times of {path}"
            );
        }
    }
    assert_eq!(
        selinux_label(&open(&scratch.join("ours.img")), "/"),
        Some("u:object_r:system_file:s0".into())
    );

    // No matching line is an error (as in sload.f2fs); <<none>> means no label.
    let img = scratch.join("none.img");
    std::fs::write(&contexts, "/ u:r:root:s0\n/bin(/.*)? <<none>>\n").unwrap();
    fails(
        &args!["build", src, img, "-q", "-s", contexts],
        "/a.txt: no file_contexts line matches \"/a.txt\"",
    );
    std::fs::write(&contexts, "/.* u:r:all:s0\n/bin(/.*)? <<none>>\n").unwrap();
    let _ = std::fs::remove_file(&img);
    ok(&args!["build", src, img, "-q", "-s", contexts]);
    let fs = open(&img);
    assert_eq!(selinux_label(&fs, "/bin/sh"), None);
    assert_eq!(selinux_label(&fs, "/a.txt"), Some("u:r:all:s0".into()));
    drop(fs);
    std::fs::write(&contexts, "/a u:r:x:s0\n/a u:r:y:s0\n").unwrap();
    fails(
        &args!["build", src, img, "-q", "-s", contexts],
        ":2: \"/a\" is given two different contexts",
    );
}

/// `-C`: owner, mode and capabilities by path (under the mount point),
/// the root's line when there is one, an error for a path the file lacks.
#[test]
fn build_with_fs_config() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("cli-build-fsconfig");
    let src = scratch.join("src");
    android_tree(&src);
    if is_root() {
        // The host's capability is replaced by the fs_config file's.
        set_xattr(
            &src.join("bin/other"),
            "security.capability",
            &[1, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
    }
    let config = scratch.join("fs_config");
    std::fs::write(
        &config,
        " 0 0 755 selabel=u:object_r:rootfs:s0 capabilities=0x0\n\
         system/a.txt 1000 1000 600\n\
         system/bin 0 2000 751 capabilities=0x0\n\
         system/bin/sh 0 2000 4755 capabilities=0x1000000000\n\
         system/bin/other 2000 2000 750 capabilities=0x0\n\
         system/dir 1 2 700\n\
         system/dir/sub 1 2 700\n\
         system/dir/sub/f 1 2 640\n\
         system/dir/sub/g 1 2 640\n\
         system/lib 0 0 755\n\
         system/link 0 0 777\n",
    )
    .unwrap();
    let img = scratch.join("img");
    ok(&args![
        "build", src, img, "-q", "-C", config, "-t", "/system"
    ]);
    assert_fsck(&img, "a build with fs_config");
    let fs = open(&img);
    let attrs = |path: &str| {
        let i = fs.resolve(path).unwrap();
        (i.uid, i.gid, i.mode & 0o7777)
    };
    assert_eq!(attrs("/"), (0, 0, 0o755));
    assert_eq!(attrs("/a.txt"), (1000, 1000, 0o600));
    assert_eq!(attrs("/bin"), (0, 2000, 0o751));
    assert_eq!(attrs("/bin/sh"), (0, 2000, 0o4755));
    assert_eq!(attrs("/dir/sub/f"), (1, 2, 0o640));
    let sh = fs.resolve("/bin/sh").unwrap();
    assert_eq!(
        fs.get_xattr(&sh, b"security.capability").unwrap(),
        [1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0],
        "vfs_cap_data v2, effective, CAP_SYSLOG (36) permitted"
    );
    let other = fs.resolve("/bin/other").unwrap();
    assert!(fs.get_xattr(&other, b"security.capability").is_err());
    drop(fs);

    std::fs::write(&config, "system/bin 0 0 755\n").unwrap();
    let img2 = scratch.join("img2");
    fails(
        &args!["build", src, img2, "-q", "-C", config, "-t", "/system/"],
        "/a.txt: not in the fs_config file (looked up as \"system/a.txt\")",
    );
    std::fs::write(&config, "system/bin 0 0 9755\n").unwrap();
    fails(
        &args!["build", src, img2, "-q", "-C", config],
        ":1: mode is not octal 0..7777",
    );
}

/// The same tree builds the same bytes with -T: into images made by the
/// same `mkfs -T -U`, and when build formats with -T -U, also from a copy
/// of the tree whose xattrs the host lists in another order.
#[test]
fn build_is_reproducible() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("cli-build-repro");
    let src = scratch.join("src");
    source_tree(&src, false);
    let copy = scratch.join("copy");
    assert!(Command::new("cp")
        .args(["-a".as_ref(), src.as_os_str(), copy.as_os_str()])
        .status()
        .unwrap()
        .success());
    for (tree, order) in [(&src, ["user.b", "user.a"]), (&copy, ["user.a", "user.b"])] {
        for name in order {
            set_xattr(tree, name, name.as_bytes());
        }
    }
    let uuid = "01234567-89ab-cdef-0123-456789abcdef";
    let features = "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,lost_found";
    let mut images = Vec::new();
    for (i, tree) in [&src, &src, &copy].into_iter().enumerate() {
        let img = scratch.join(format!("mkfs{i}.img"));
        ok(&args![
            "mkfs",
            img,
            "--size",
            "256M",
            "-T",
            "1500000000",
            "-U",
            uuid,
            "-O",
            features,
            "-q"
        ]);
        ok(&args!["build", tree, img, "-q", "-T", "1600000000"]);
        images.push(std::fs::read(&img).unwrap());
        let img = scratch.join(format!("build{i}.img"));
        ok(&args![
            "build",
            tree,
            img,
            "-q",
            "-T",
            "1600000000",
            "-U",
            uuid,
            "-S",
            "256M",
            "-O",
            features
        ]);
        assert_fsck(&img, "a reproducible build");
        images.push(std::fs::read(&img).unwrap());
    }
    let differing = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    for (i, image) in images.iter().enumerate().skip(2) {
        assert_eq!(
            differing(&images[i % 2], image),
            0,
            "image {i} differs from image {}",
            i % 2
        );
    }
    // The root comes from mkfs -T, everything after from build -T.
    let fs = open(&scratch.join("mkfs0.img"));
    let root = fs.resolve("/").unwrap();
    assert_eq!(
        (root.ctime.sec, root.crtime.unwrap().sec),
        (1_600_000_000, 1_500_000_000)
    );
    let file = fs.resolve("/sparse/hole_only").unwrap();
    assert_eq!(
        (file.ctime.sec, file.crtime.unwrap().sec),
        (1_600_000_000, 1_600_000_000)
    );
    assert_eq!(file.generation, 0);
}
