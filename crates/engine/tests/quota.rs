//! Images with quota files (`quota`, `project_quota`): the quota inodes have
//! no directory entry, the superblock names them (`s_qf_ino`), so our fsck
//! must count them as reachable. Writing such images needs the quota files
//! kept up to date, which the engine does not do yet: it refuses.

mod support;

use f2fuse_engine::{Error, Fs, OpenOptions};
use support::*;

#[test]
fn quota_images_check_clean_and_are_read_only() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota");
    let img = scratch.join("quota.img");
    mkfs_f2fs(
        &img,
        64 << 20,
        &["-O", "extra_attr,quota,project_quota,lost_found"],
    );
    // fsck.f2fs, then our fsck, both clean.
    fsck_f2fs(&img).unwrap();
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let qf: Vec<u32> = fs.superblock().qf_ino.iter().map(|q| q.get()).collect();
    assert_eq!(qf, [4, 5, 6]);
    assert!(fs.lookup(3, b"lost+found").is_ok());
    let writable = Fs::open_path(
        &img,
        OpenOptions {
            writable: true,
            ..OpenOptions::default()
        },
    );
    assert!(matches!(writable, Err(Error::Unsupported(_))));
}
