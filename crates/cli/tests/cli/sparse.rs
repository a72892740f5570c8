//! Android sparse images: read straight from them (info, ls, cat, get,
//! extract, fsck, a read-only mount), write them (`mkfs --sparse`,
//! `build --sparse`, `sparse`) and expand them (`unsparse`), with AOSP's
//! img2simg/simg2img (Debian: android-sdk-libsparse-utils) as the oracle.

use f2fuse_testkit as support;

use crate::common::{fails, ok_output as ok};
use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

fn tool(name: &str, args: &[&OsStr]) {
    let out = Command::new(find_tool(name).unwrap())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{name} {args:?}: {out:?}");
}

fn libsparse_tools() -> bool {
    require_tool("img2simg") && require_tool("simg2img") && require_f2fs_tools()
}

/// A small tree built into a raw image.
fn raw_image(scratch: &Scratch) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = scratch.join("src");
    fs::create_dir_all(src.join("dir")).unwrap();
    fs::write(src.join("dir/small"), b"hello").unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    fs::write(src.join("big"), &big).unwrap();
    let holes = fs::File::create(src.join("holes")).unwrap();
    holes.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&holes, b"tail", (8 << 20) - 4).unwrap();
    let img = scratch.join("raw.img");
    ok(&args!["build", src, img, "-q", "-S", "96M"]);
    (src, img)
}

/// Ours and img2simg write the same bytes; simg2img expands ours to the
/// raw image and we expand img2simg's.
#[test]
fn conversion_agrees_with_libsparse() {
    if !libsparse_tools() {
        return;
    }
    let scratch = Scratch::new("sparse-conv");
    let (_, raw) = raw_image(&scratch);
    let ours = scratch.join("ours.simg");
    let theirs = scratch.join("theirs.simg");
    let out = ok(&args!["sparse", raw, ours]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote"));
    tool("img2simg", &[raw.as_os_str(), theirs.as_os_str()]);
    assert!(
        fs::read(&ours).unwrap() == fs::read(&theirs).unwrap(),
        "f2fuse sparse and img2simg differ"
    );
    assert!(fs::metadata(&ours).unwrap().len() < fs::metadata(&raw).unwrap().len() / 4);
    let expanded = scratch.join("expanded.img");
    tool("simg2img", &[ours.as_os_str(), expanded.as_os_str()]);
    assert!(fs::read(&expanded).unwrap() == fs::read(&raw).unwrap());
    let back = scratch.join("back.img");
    ok(&args!["unsparse", theirs, back, "-q"]);
    assert!(fs::read(&back).unwrap() == fs::read(&raw).unwrap());
    // Holes: the expanded image is allocated only where the raw one has data.
    use std::os::unix::fs::MetadataExt;
    assert!(fs::metadata(&back).unwrap().blocks() * 512 < 16 << 20);

    fails(
        &args!["sparse", ours, scratch.join("x")],
        "already an Android sparse image",
    );
    fails(
        &args!["unsparse", raw, scratch.join("x")],
        "not an Android sparse image",
    );
    fails(
        &args!["sparse", raw, raw],
        "input and output are the same file",
    );
    assert!(!scratch.join("x").exists());
}

/// Every read command works on the sparse image as on the raw one; write
/// commands are refused with a hint; a non-image says what it is not.
#[test]
fn read_commands_on_a_sparse_image() {
    if !libsparse_tools() {
        return;
    }
    let scratch = Scratch::new("sparse-read");
    let (src, raw) = raw_image(&scratch);
    let simg = scratch.join("img.simg");
    tool("img2simg", &[raw.as_os_str(), simg.as_os_str()]);
    for command in [&["info"][..], &["ls", "-l"], &["fsck"], &["status"]] {
        let on = |img: &Path| {
            let mut a: Vec<&OsStr> = command.iter().map(OsStr::new).collect();
            a.push(img.as_os_str());
            String::from_utf8(ok(&a).stdout)
                .unwrap()
                .replace(img.to_str().unwrap(), "IMG")
        };
        assert_eq!(on(&simg), on(&raw), "f2fuse {command:?}");
    }
    let cat = ok(&args!["cat", simg, "/big"]).stdout;
    assert!(cat == fs::read(src.join("big")).unwrap());
    let got = scratch.join("holes");
    ok(&args!["get", simg, "/holes", got]);
    assert!(fs::read(&got).unwrap() == fs::read(src.join("holes")).unwrap());
    let out = scratch.join("extracted");
    ok(&args!["extract", simg, out, "-q"]);
    compare_trees(
        &scan_host_tree(&src),
        &scan_host_tree(&out),
        CompareWhat::all(),
    )
    .unwrap();

    fails(
        &args!["put", simg, raw, "/x"],
        "read-only here: expand it with `f2fuse unsparse`",
    );
    let engine = f2fuse_engine::Fs::open_path(
        &simg,
        f2fuse_engine::OpenOptions {
            writable: true,
            ..Default::default()
        },
    );
    assert_eq!(engine.err().map(|e| e.to_errno()), Some(libc::EROFS));

    let zeros = scratch.join("zeros");
    fs::File::create(&zeros).unwrap().set_len(1 << 20).unwrap();
    fails(
        &args!["info", zeros],
        "not an F2FS image (no magic 0xf2f52010 at byte 1024 or 5120: found 0x00000000 and \
         0x00000000) and not an Android sparse image (no magic 0xed26ff3a at byte 0); its \
         first 8 KiB are all zeros",
    );
    let mut broken = fs::read(&simg).unwrap();
    broken.truncate(broken.len() - 100);
    let short = scratch.join("short.simg");
    fs::write(&short, broken).unwrap();
    fails(&args!["ls", short], "corrupt sparse image at chunk");
}

/// `mkfs --sparse` and `build --sparse` write images simg2img expands to
/// exactly what the raw commands write; a second `build --sparse` adds to
/// the sparse image; fsck.f2fs accepts the results.
#[test]
fn mkfs_and_build_write_sparse_images() {
    if !libsparse_tools() {
        return;
    }
    let scratch = Scratch::new("sparse-write");
    let uuid = "01234567-89ab-cdef-0123-456789abcdef";
    let raw = scratch.join("mkfs.img");
    let simg = scratch.join("mkfs.simg");
    ok(&args![
        "mkfs",
        raw,
        "--size",
        "64M",
        "-T",
        "1600000000",
        "-U",
        uuid,
        "-q"
    ]);
    ok(&args![
        "mkfs",
        simg,
        "--size",
        "64M",
        "-T",
        "1600000000",
        "-U",
        uuid,
        "-q",
        "--sparse"
    ]);
    let expanded = scratch.join("mkfs.expanded");
    tool("simg2img", &[simg.as_os_str(), expanded.as_os_str()]);
    assert!(fs::read(&expanded).unwrap() == fs::read(&raw).unwrap());
    fails(
        &args!["mkfs", scratch.join("nosize.simg"), "--sparse"],
        "--sparse needs --size",
    );

    let src = scratch.join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("a/file"), vec![9u8; 100_000]).unwrap();
    let built_raw = scratch.join("built.img");
    let built = scratch.join("built.simg");
    let build = |img: &Path, sparse: bool| {
        let mut a = args![
            "build",
            src,
            img,
            "-q",
            "-T",
            "1600000000",
            "-U",
            uuid,
            "-S",
            "80M"
        ]
        .to_vec();
        if sparse {
            a.push("--sparse".into());
        }
        ok(&a);
    };
    build(&built_raw, false);
    build(&built, true);
    let expanded = scratch.join("built.expanded");
    tool("simg2img", &[built.as_os_str(), expanded.as_os_str()]);
    assert!(fs::read(&expanded).unwrap() == fs::read(&built_raw).unwrap());
    assert!(!scratch.join("built.simg.raw-tmp").exists());

    // Adding to the sparse image: expanded, built into, encoded again.
    let more = scratch.join("more");
    fs::create_dir_all(&more).unwrap();
    fs::write(more.join("second"), b"second build").unwrap();
    ok(&args!["build", more, built, "-q", "--sparse"]);
    assert_eq!(ok(&args!["cat", built, "/second"]).stdout, b"second build");
    assert_eq!(
        ok(&args!["cat", built, "/a/file"]).stdout,
        vec![9u8; 100_000]
    );
    tool("simg2img", &[built.as_os_str(), expanded.as_os_str()]);
    fsck_f2fs(&expanded).unwrap();
    fails(
        &args!["build", more, built_raw, "--sparse"],
        "is not an Android sparse image",
    );
}

/// `f2fuse mount -o ro` serves a sparse image; a writable mount is refused.
#[test]
fn mount_a_sparse_image_read_only() {
    if !fuse_available() || !libsparse_tools() {
        return;
    }
    let scratch = Scratch::new("sparse-mount");
    let (src, raw) = raw_image(&scratch);
    let simg = scratch.join("img.simg");
    ok(&args!["sparse", raw, simg, "-q"]);
    let mnt = scratch.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    fails(&args!["mount", simg, mnt], "can only be opened read-only");
    ok(&args!["mount", simg, mnt, "-o", "ro"]);
    let read = fs::read(mnt.join("big"));
    let listed = fs::read_dir(mnt.join("dir")).map(|d| d.count());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap()
        .success()
    {
        assert!(Instant::now() < deadline, "fusermount3 -u keeps failing");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(read.unwrap() == fs::read(src.join("big")).unwrap());
    assert_eq!(listed.unwrap(), 1);
}
