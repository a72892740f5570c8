//! Images made by mkfs.f2fs + sload.f2fs, then modified by us: fsck.f2fs
//! must stay clean and dump.f2fs must read back exactly what we wrote.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::{RenameFlags, SetAttr};
use f2fuse_engine::{Fs, OpenOptions};
use support::*;

#[test]
fn modify_an_sload_image_then_check_with_f2fs_tools() {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") {
        return;
    }
    let scratch = Scratch::new("modify-sload");
    let mut opts = TreeOptions::small().sload_compatible();
    opts.big_dir_entries = 400;
    opts.indirect_file_size = 6 << 20;
    let (img, _src) = build_image_from_tree(&scratch, &opts);
    {
        let fs = Fs::open_path(
            &img,
            OpenOptions {
                writable: true,
                ..Default::default()
            },
        )
        .unwrap();
        let root = fs.resolve("/").unwrap().ino;
        let big = fs.resolve(&format!("/{}", paths::BIG_DIR)).unwrap().ino;
        // New entries in a multi-level directory sload built.
        for i in 0..300 {
            let f = fs
                .create(
                    big,
                    format!("added-by-f2fuse-{i:03}").as_bytes(),
                    0o640,
                    1000,
                    1000,
                )
                .unwrap();
            fs.write(
                f.ino,
                0,
                format!("content {i}\n").repeat(i % 7 + 1).as_bytes(),
            )
            .unwrap();
        }
        // Rewrite the middle of a file that uses indirect nodes, extend it, and shrink another.
        let indirect = fs.resolve("/sizes/indirect_13m").unwrap();
        fs.write(indirect.ino, 3 << 20, &vec![0xAB; 300_000])
            .unwrap();
        fs.write(indirect.ino, indirect.size + 12_345, b"tail after a hole")
            .unwrap();
        let sizes = fs.resolve("/sizes").unwrap().ino;
        let victim = fs
            .read_dir(sizes)
            .unwrap()
            .into_iter()
            .find(|e| e.name.starts_with(b"len_4"))
            .unwrap();
        fs.setattr(
            victim.ino,
            &SetAttr {
                size: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
        // Namespace changes across directories sload made.
        let sub = fs.mkdir(root, b"made-by-f2fuse", 0o755, 0, 0).unwrap();
        fs.rename(
            big,
            b"added-by-f2fuse-000",
            sub.ino,
            b"moved",
            RenameFlags::default(),
        )
        .unwrap();
        fs.unlink(big, b"added-by-f2fuse-001").unwrap();
        fs.symlink(sub.ino, b"link", b"../sizes/indirect_13m", 0, 0)
            .unwrap();
        fs.unmount().unwrap();
    }
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after modifying an sload image:\n{report}");
    }
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let ours = scan_image(&fs);
    let theirs = scan_image_with_f2fs_tools(&img, &|key: &str| {
        key.starts_with("made-by-f2fuse")
            || key.starts_with("sizes")
            || key.contains("added-by-f2fuse-2")
    });
    let ours_subset = ours
        .into_iter()
        .filter(|(k, _)| theirs.contains_key(k) || k.starts_with("made-by-f2fuse"))
        .collect();
    let what = CompareWhat {
        xattrs: false,
        ..CompareWhat::all()
    };
    if let Err(report) = compare_trees(&theirs, &ours_subset, what) {
        panic!("dump.f2fs reads something else than we wrote:\n{report}");
    }
    assert!(theirs.contains_key("made-by-f2fuse/moved"));
}
