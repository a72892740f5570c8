//! `Fs::set_max_dirty_nodes`: the node blocks waiting in memory for a
//! checkpoint stay within the limit however many files are made (what
//! bounds `f2fuse build`'s memory), and the image stays clean.

use f2fuse_testkit as support;

use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::PathBuf;
use support::*;

fn fresh_fs(scratch: &Scratch) -> (PathBuf, f2fuse_engine::Fs) {
    let img = scratch.join("img");
    format_path(&img, Some(64 << 20), &MkfsOptions::default()).unwrap();
    let fs = open_writable(&img);
    (img, fs)
}

#[test]
fn checkpoints_keep_the_dirty_nodes_within_the_limit() {
    if !require_f2fs_tools() {
        return;
    }
    const LIMIT: usize = 100;
    const FILES: usize = 1000;
    let scratch = Scratch::new("dirty-nodes");
    let (img, fs) = fresh_fs(&scratch);
    fs.set_max_dirty_nodes(LIMIT);
    let dir = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap().ino;
    let before = fs.status().unwrap().checkpoints;
    let mut most = 0;
    for i in 0..FILES {
        let ino = fs
            .create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &[i as u8; 100]).unwrap();
        most = most.max(fs.dirty_node_count());
    }
    // Each create dirties one new inode block (and the directory's, already
    // dirty): the count climbs to the limit, and the operation that passes
    // it checkpoints.
    assert!(
        (LIMIT - 2..=LIMIT).contains(&most),
        "at most {most} dirty node blocks after an operation (limit {LIMIT})"
    );
    let checkpoints = fs.status().unwrap().checkpoints - before;
    assert!(
        checkpoints >= (FILES / LIMIT) as u64 - 1,
        "{checkpoints} checkpoints for {FILES} files"
    );
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn by_default_the_dirty_nodes_wait_for_a_later_checkpoint() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("dirty-nodes-default");
    let (img, fs) = fresh_fs(&scratch);
    for i in 0..300 {
        fs.create(ROOT, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    assert!(fs.dirty_node_count() > 300, "{}", fs.dirty_node_count());
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}
