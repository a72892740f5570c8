//! Access times on read (`Fs::note_access`): the relatime, strictatime and
//! noatime rules, chattr +A, and the lazy write: an update changes the node
//! cache only, the next checkpoint writes it.

use f2fuse_testkit as support;

use f2fuse_engine::internals::device::IoKind;
use f2fuse_engine::internals::fs::{AtimePolicy, SetAttr, TimeSet};
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::{Fs, OpenOptions, Timestamp};
use f2fuse_layout::inode_flag::NOATIME;
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use support::*;

const OLD: Timestamp = Timestamp {
    sec: 1_000_000_000,
    nsec: 0,
};

fn set_atime(fs: &Fs, ino: u32, at: Timestamp) {
    let attr = SetAttr {
        atime: Some(TimeSet::At(at)),
        ..SetAttr::default()
    };
    fs.setattr(ino, &attr).unwrap();
}

#[test]
fn reads_update_atime_by_policy_lazily() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("atime");
    let img = scratch.join("img");
    format_path(&img, Some(64 << 20), &MkfsOptions::default()).unwrap();
    let fs = open_writable(&img);
    let ino = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, b"data").unwrap();
    let atime = |fs: &Fs| fs.inode(ino).unwrap().atime;

    // noatime: never.
    set_atime(&fs, ino, OLD);
    assert!(!fs.note_access(ino, AtimePolicy::Never).unwrap());
    assert_eq!(atime(&fs), OLD);

    // relatime: the atime is older than the mtime and ctime; once updated,
    // it is not again until the file changes. Inode times come from the
    // coarse clock (one tick is up to 10 ms): an atime taken in the tick of
    // the mtime equals it and is updated again, as in Linux, so let a tick
    // pass first.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs.checkpoint().unwrap();
    let node_writes = fs.status().unwrap().io.written_of(IoKind::Node);
    assert!(fs.note_access(ino, AtimePolicy::Relative).unwrap());
    let updated = atime(&fs);
    assert!(updated > OLD);
    assert_eq!(
        fs.status().unwrap().io.written_of(IoKind::Node),
        node_writes,
        "no node write per read"
    );
    assert!(!fs.note_access(ino, AtimePolicy::Relative).unwrap());
    assert_eq!(atime(&fs), updated);
    // ... but a day-old atime is, even if newer than mtime and ctime.
    let future = Timestamp {
        sec: updated.sec + 100,
        nsec: 0,
    };
    set_atime(&fs, ino, future);
    assert!(!fs.note_access(ino, AtimePolicy::Relative).unwrap());
    assert!(
        fs.note_access(ino, AtimePolicy::Strict).unwrap(),
        "strictatime"
    );
    assert!(atime(&fs) < future);

    // chattr +A: never.
    fs.set_flags(ino, NOATIME).unwrap();
    set_atime(&fs, ino, OLD);
    assert!(!fs.note_access(ino, AtimePolicy::Strict).unwrap());
    assert_eq!(atime(&fs), OLD);
    fs.set_flags(ino, 0).unwrap();
    assert!(fs.note_access(ino, AtimePolicy::Relative).unwrap());
    let last = atime(&fs);
    fs.unmount().unwrap();

    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    assert_eq!(atime(&fs), last, "written by the unmount's checkpoint");
    assert!(
        !fs.note_access(ino, AtimePolicy::Strict).unwrap(),
        "read-only"
    );
    drop(fs);
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck after atime updates:\n{report}");
    }
}
