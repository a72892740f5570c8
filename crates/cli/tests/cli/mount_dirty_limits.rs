//! `-o max_ratio=PCT,max_bytes=BYTES,strict_limit=0|1`: the mount sets the
//! write-back limits of its backing device (/sys/class/bdi/MAJOR:MINOR)
//! when mounted as root; without them the kernel's FUSE defaults stay.
//! Every mount writes a file and the image must pass fsck.f2fs after.
//!
//! Needs root, /dev/fuse, fusermount3 and f2fs-tools; otherwise a skip note.

use f2fuse_testkit as support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// What is read back from the backing device: the three limits, and the
/// readahead window set through the same sysfs directory.
const ATTRIBUTES: [&str; 4] = ["max_ratio", "max_bytes", "strict_limit", "read_ahead_kb"];

/// Mounts `img` on `mnt` in the foreground with `opts`, reads the backing
/// device's [`ATTRIBUTES`], writes 8 MiB, unmounts and checks the image.
fn attributes_of_a_mount(img: &Path, mnt: &Path, opts: &str) -> Vec<u64> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(["mount", "-f", "-o", opts])
        .arg(img)
        .arg(mnt)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_mounted(mnt) {
        assert!(
            Instant::now() < deadline,
            "mount with {opts} did not appear"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dev = fs::metadata(mnt).unwrap().dev();
    let bdi = format!("/sys/class/bdi/{}:{}", libc::major(dev), libc::minor(dev));
    let values = ATTRIBUTES
        .iter()
        .map(|name| {
            let text = fs::read_to_string(format!("{bdi}/{name}")).unwrap();
            text.trim().parse().unwrap()
        })
        .collect();
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(mnt.join("file"), &data).unwrap();
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "fusermount3 -u: {out:?}");
    let status = child.wait().unwrap();
    assert!(status.success(), "daemon with {opts}: {status:?}");
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck.f2fs after a mount with {opts}:\n{report}");
    }
    values
}

#[test]
fn dirty_limit_options_reach_the_backing_device() {
    if !fuse_available() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPING test: only root may set /sys/class/bdi limits");
        return;
    }
    let scratch = Scratch::new("mount-dirty-limits");
    let img = scratch.join("img");
    mkfs_f2fs(&img, 128 << 20, &[]);
    let mnt = scratch.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();

    // FUSE's own (fs/fuse/inode.c): 1 % of the dirty threshold, strictly;
    // the readahead window is f2fuse's default.
    let [ratio, _, strict, read_ahead] = attributes_of_a_mount(&img, &mnt, "rw")[..] else {
        unreachable!()
    };
    assert_eq!((ratio, strict), (1, 1), "the kernel's FUSE defaults");
    assert_eq!(read_ahead, 4096);

    let [ratio, _, strict, read_ahead] =
        attributes_of_a_mount(&img, &mnt, "max_ratio=40,strict_limit=0,read_ahead_kb=512")[..]
    else {
        unreachable!()
    };
    assert_eq!((ratio, strict, read_ahead), (40, 0, 512));

    // The kernel keeps one limit and shows it both ways: bytes are turned
    // into a (fine-grained) ratio of the dirty threshold, which moves with
    // free memory, so what reads back is close to what was asked, not equal.
    let asked = 256u64 << 20;
    let [ratio, bytes, strict, _] =
        attributes_of_a_mount(&img, &mnt, &format!("max_bytes={asked}"))[..]
    else {
        unreachable!()
    };
    assert_eq!(strict, 1, "strict_limit left as FUSE sets it");
    assert!(
        bytes.abs_diff(asked) <= asked / 10 && ratio != 1,
        "max_bytes={asked} read back as max_bytes {bytes}, max_ratio {ratio}"
    );
}
