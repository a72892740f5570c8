//! Images with quota files (`quota`, `project_quota`): the quota inodes have
//! no directory entry, the superblock names them (`s_qf_ino`). Writing
//! keeps their usage what fsck.f2fs recomputes: its `--dry-run` compares
//! every id's inodes and bytes with the files and fails on a difference
//! (checked here once on a file made wrong on purpose). Limits are
//! enforced with EDQUOT, project ids inherited through PROJINHERIT.

use f2fuse_testkit as support;

use f2fuse_engine::internals::quota::{Limits, GRPQUOTA, PRJQUOTA, USRQUOTA};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Error, FallocMode, Fs};
use f2fuse_layout::inode_flag;
use std::path::Path;
use support::*;

const QUOTA_FEATURES: &str = "extra_attr,quota,project_quota,lost_found";

fn quota_image(scratch: &Scratch, name: &str) -> std::path::PathBuf {
    let img = scratch.join(name);
    mkfs_f2fs(&img, 64 << 20, &["-O", QUOTA_FEATURES]);
    img
}

fn errno(result: Result<impl Sized, Error>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(e) => e.to_errno(),
    }
}

#[test]
fn fresh_images_check_clean_and_open_writable() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-fresh");
    let img = quota_image(&scratch, "quota.img");
    fsck_f2fs(&img).unwrap();
    let fs = open_read_only(&img);
    let qf: Vec<u32> = fs.superblock().qf_ino.iter().map(|q| q.get()).collect();
    assert_eq!(qf, [4, 5, 6]);
    // mkfs.f2fs: root and lost+found, one data block each, owned by id 0.
    let users = fs.quota_file(USRQUOTA).unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!((users[0].1.curinodes, users[0].1.curspace), (2, 8192));
    drop(fs);
    let fs = open_writable(&img);
    assert_eq!(fs.get_quota(PRJQUOTA, 0).unwrap().curinodes, 2);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

/// Creates, writes, truncates, punches, preallocates, chowns, links,
/// renames, sets xattrs and removes, as several owners and projects.
fn workload(fs: &Fs) {
    let root = 3;
    let dir = fs.mkdir(root, b"d", 0o755, 1000, 100).unwrap().ino;
    let a = fs.create(dir, b"a", 0o644, 1000, 100).unwrap().ino;
    fs.write(a, 0, &vec![7u8; 300_000]).unwrap();
    let b = fs.create(root, b"b", 0o644, 1001, 101).unwrap().ino;
    fs.write(b, 0, &vec![1u8; 2 << 20]).unwrap();
    fs.setattr(
        b,
        &f2fuse_engine::internals::fs::SetAttr {
            size: Some(100_000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.fallocate(
        a,
        1 << 20,
        1 << 20,
        FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    fs.fallocate(a, 4096, 65536, FallocMode::PunchHole).unwrap();
    // Inline file, symlink, device, a big xattr (its own node).
    let small = fs.create(dir, b"small", 0o600, 1002, 100).unwrap().ino;
    fs.write(small, 0, b"tiny").unwrap();
    fs.symlink(dir, b"ln", b"a/very/long/target", 1003, 103)
        .unwrap();
    let x = fs.create(root, b"x", 0o644, 1000, 100).unwrap().ino;
    fs.set_xattr(x, b"user.big", &vec![b'v'; 3000], SetMode::Any)
        .unwrap();
    // chown moves usage between users and groups.
    fs.setattr(
        a,
        &f2fuse_engine::internals::fs::SetAttr {
            uid: Some(2000),
            gid: Some(200),
            ..Default::default()
        },
    )
    .unwrap();
    // Hard links count the inode once; unlink one name, rename the other.
    fs.link(b, dir, b"b2").unwrap();
    fs.unlink(root, b"b").unwrap();
    fs.rename(dir, b"b2", root, b"b3", Default::default())
        .unwrap();
    // A project, then a file removed while open (an orphan until released).
    let p = fs.mkdir(root, b"proj", 0o755, 0, 0).unwrap().ino;
    fs.set_project_id(p, 42).unwrap();
    fs.set_flags(p, inode_flag::PROJINHERIT).unwrap();
    let pf = fs.create(p, b"f", 0o644, 1000, 100).unwrap().ino;
    fs.write(pf, 0, &vec![3u8; 50_000]).unwrap();
    let gone = fs.create(root, b"gone", 0o644, 1005, 105).unwrap().ino;
    fs.write(gone, 0, &vec![5u8; 40_000]).unwrap();
    fs.open_inode(gone).unwrap();
    fs.unlink(root, b"gone").unwrap();
    assert!(fs.get_quota(USRQUOTA, 1005).unwrap().curinodes == 1);
    fs.release(gone).unwrap();
    let tmp = fs.mkdir(dir, b"tmp", 0o755, 1004, 104).unwrap().ino;
    let t = fs.create(tmp, b"t", 0o644, 1004, 104).unwrap().ino;
    fs.write(t, 0, &vec![9u8; 10_000]).unwrap();
    fs.unlink(tmp, b"t").unwrap();
    fs.rmdir(dir, b"tmp").unwrap();
}

#[test]
fn usage_after_a_workload_is_what_fsck_recomputes() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-work");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_writable(&img);
    workload(&fs);
    // Checkpoints in the middle write the files too.
    fs.checkpoint().unwrap();
    let pf = fs.resolve("/proj/f").unwrap();
    assert_eq!(fs.project_id(&pf), 42);
    assert_eq!(fs.get_quota(PRJQUOTA, 42).unwrap().curinodes, 2);
    assert_eq!(fs.get_quota(USRQUOTA, 1005).unwrap().curinodes, 0);
    // An id left with nothing loses its entry, as in the kernel's files.
    let users: Vec<u32> = fs
        .quota_file(USRQUOTA)
        .unwrap()
        .iter()
        .map(|e| e.0)
        .collect();
    assert!(!users.contains(&1005) && users.contains(&2000), "{users:?}");
    let a = fs.resolve("/d/a").unwrap();
    let d2000 = fs.get_quota(USRQUOTA, 2000).unwrap();
    assert_eq!(
        (d2000.curinodes, d2000.curspace),
        (1, (a.blocks - 1) * 4096)
    );
    assert_eq!(fs.get_quota(USRQUOTA, 1000).unwrap().curinodes, 3);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();

    // Again on the image as written: usage continues from the files.
    let fs = open_writable(&img);
    fs.unlink(3, b"x").unwrap();
    fs.write(fs.resolve("/b3").unwrap().ino, 0, &vec![2u8; 1 << 20])
        .unwrap();
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

/// The oracle can fail: a quota file one block off is a fsck.f2fs error.
#[test]
fn fsck_f2fs_reports_a_wrong_quota_file() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-wrong");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_read_only(&img);
    let user_file = fs.inode(fs.superblock().qf_ino[0].get()).unwrap();
    let extents = fs.extents(&user_file).unwrap();
    drop(fs);
    // id 0 is the first entry of leaf block 5; curspace is 48 bytes into it.
    let at = 5 * 1024 + 16 + 48;
    let (file_block, blkaddr, _) = *extents
        .iter()
        .find(|(first, _, count)| *first * 4096 <= at && at < (first + count) * 4096)
        .unwrap();
    let image_at = blkaddr as u64 * 4096 + (at - file_block * 4096);
    patch_u64(&img, image_at, 8192 + 4096);
    assert!(
        fsck_f2fs(&img).is_err(),
        "fsck.f2fs must see the wrong usage"
    );
}

fn patch_u64(img: &Path, at: u64, value: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&value.to_le_bytes(), at).unwrap();
}

#[test]
fn limits_give_edquot_and_are_kept_in_the_files() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-limits");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_writable(&img);
    let limits = Limits {
        block_hard_kib: 64,
        inode_hard: 3,
        ..Default::default()
    };
    fs.set_quota_limits(USRQUOTA, 1000, &limits).unwrap();
    fs.set_quota_limits(
        GRPQUOTA,
        300,
        &Limits {
            inode_hard: 1,
            ..Default::default()
        },
    )
    .unwrap();
    // Tracking only until enforcement is on (as without usrquota).
    let f = fs.create(3, b"f", 0o644, 1000, 100).unwrap().ino;
    fs.write(f, 0, &vec![1u8; 100 << 10]).unwrap();
    fs.setattr(
        f,
        &f2fuse_engine::internals::fs::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.set_quota_enforcement(0b111).unwrap();
    // 64 KiB = 16 blocks: a larger write is cut short there.
    assert_eq!(fs.write(f, 0, &vec![1u8; 100 << 10]).unwrap(), 64 << 10);
    assert_eq!(errno(fs.write(f, 64 << 10, &[1u8; 4096])), libc::EDQUOT);
    assert_eq!(
        errno(fs.fallocate(f, 1 << 20, 8192, FallocMode::Allocate { keep_size: true })),
        libc::EDQUOT
    );
    assert_eq!(fs.get_quota(USRQUOTA, 1000).unwrap().curspace, 64 << 10);
    // Inodes: f, g; a third is allowed, a fourth not.
    fs.create(3, b"g", 0o644, 1000, 100).unwrap();
    fs.mkdir(3, b"h", 0o755, 1000, 100).unwrap();
    assert_eq!(errno(fs.create(3, b"i", 0o644, 1000, 100)), libc::EDQUOT);
    fs.create(3, b"j", 0o644, 1001, 300).unwrap();
    assert_eq!(errno(fs.create(3, b"k", 0o644, 1001, 300)), libc::EDQUOT);
    // chown to an owner without room: EDQUOT, nothing moves.
    let other = fs.create(3, b"o", 0o644, 1001, 100).unwrap().ino;
    fs.write(other, 0, &[1u8; 8192]).unwrap();
    let to_1000 = f2fuse_engine::internals::fs::SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    assert_eq!(errno(fs.setattr(other, &to_1000)), libc::EDQUOT);
    fs.unlink(3, b"o").unwrap();
    // Freeing makes room again.
    fs.unlink(3, b"g").unwrap();
    fs.create(3, b"i", 0o644, 1000, 100).unwrap();
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
    // The limits are in the file for the quota tools and the kernel.
    let fs = open_read_only(&img);
    let (_, d) = fs
        .quota_file(USRQUOTA)
        .unwrap()
        .into_iter()
        .find(|(id, _)| *id == 1000)
        .unwrap();
    assert_eq!((d.bhardlimit, d.ihardlimit, d.curinodes), (64, 3, 3));
}

#[test]
fn project_ids_inherit_and_renames_across_projects_are_exdev() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-proj");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_writable(&img);
    let p = fs.mkdir(3, b"p", 0o755, 0, 0).unwrap();
    fs.set_project_id(p.ino, 7).unwrap();
    // Without PROJINHERIT new inodes get project 0.
    let plain = fs.create(p.ino, b"plain", 0o644, 0, 0).unwrap();
    assert_eq!(fs.project_id(&plain), 0);
    fs.set_flags(p.ino, inode_flag::PROJINHERIT).unwrap();
    let sub = fs.mkdir(p.ino, b"sub", 0o755, 0, 0).unwrap();
    assert_eq!(fs.project_id(&sub), 7);
    assert_ne!(
        sub.flags & inode_flag::PROJINHERIT,
        0,
        "directories inherit the flag"
    );
    let file = fs.create(sub.ino, b"f", 0o644, 0, 0).unwrap();
    assert_eq!(fs.project_id(&file), 7);
    assert_eq!(
        file.flags & inode_flag::PROJINHERIT,
        0,
        "files do not carry it"
    );
    // Into a PROJINHERIT directory of another project: EXDEV (link and rename).
    let outside = fs.create(3, b"out", 0o644, 0, 0).unwrap();
    assert_eq!(errno(fs.link(outside.ino, p.ino, b"l")), libc::EXDEV);
    assert_eq!(
        errno(fs.rename(3, b"out", p.ino, b"r", Default::default())),
        libc::EXDEV
    );
    // Out of it is allowed, and so is within the project.
    fs.rename(sub.ino, b"f", 3, b"f", Default::default())
        .unwrap();
    fs.rename(p.ino, b"plain", sub.ino, b"plain2", Default::default())
        .unwrap_err();
    fs.set_project_id(plain.ino, 7).unwrap();
    fs.rename(p.ino, b"plain", sub.ino, b"plain2", Default::default())
        .unwrap();
    assert_eq!(fs.get_quota(PRJQUOTA, 7).unwrap().curinodes, 4);
    let quota_ino = fs.superblock().qf_ino[0].get();
    assert_eq!(errno(fs.set_project_id(quota_ino, 1)), libc::EPERM);
    // df of a project directory shows the project's limits once enforced.
    let whole = fs.statfs();
    let limits = Limits {
        block_hard_kib: 400,
        inode_soft: 10,
        ..Default::default()
    };
    fs.set_quota_limits(PRJQUOTA, 7, &limits).unwrap();
    assert_eq!(fs.statfs_at(p.ino).unwrap(), whole, "not enforced yet");
    fs.set_quota_enforcement(1 << PRJQUOTA).unwrap();
    let in_project = fs.statfs_at(p.ino).unwrap();
    assert_eq!(
        (in_project.blocks, in_project.files, in_project.files_free),
        (100, 10, 6)
    );
    assert_eq!(
        fs.statfs_at(3).unwrap(),
        whole,
        "the root has no PROJINHERIT"
    );
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn quota_need_fsck_checkpoints_are_left_to_fsck() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-needfsck");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_read_only(&img);
    let user_file = fs.inode(fs.superblock().qf_ino[0].get()).unwrap();
    let (_, blkaddr, _) = fs.extents(&user_file).unwrap()[0];
    drop(fs);
    // A header the kernel refuses: the writer marks the checkpoint instead.
    patch_u64(&img, blkaddr as u64 * 4096, 0);
    let fs = open_writable(&img);
    assert!(fs.get_quota(USRQUOTA, 0).is_err());
    fs.create(3, b"f", 0o644, 0, 0).unwrap();
    fs.unmount().unwrap();
    let fs = open_read_only(&img);
    let flags = fs.checkpoint_state().cp.ckpt_flags.get();
    assert_ne!(flags & f2fuse_layout::cp_flag::QUOTA_NEED_FSCK, 0);
}

/// A crash after fsyncs: roll-forward replays the files, and with them
/// their charges (the kernel turns quota on for recovery), and the orphan
/// the checkpoint lists is freed with its charge, so the checkpoint the
/// open writes has files fsck.f2fs agrees with.
#[test]
fn recovery_after_a_power_cut_charges_what_it_replays() {
    use f2fuse_engine::internals::device::MemDevice;
    use std::sync::Arc;
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-powercut");
    let img = quota_image(&scratch, "quota.img");
    let dev = Arc::new(MemDevice::from_bytes(std::fs::read(&img).unwrap()));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let kept = fs.create(3, b"kept", 0o644, 0, 0).unwrap().ino;
    fs.write(kept, 0, &vec![1u8; 20_000]).unwrap();
    // An orphan in the checkpoint (unlinked while open): still charged there.
    let orphan = fs.create(3, b"orphan", 0o644, 1007, 100).unwrap().ino;
    fs.write(orphan, 0, &vec![4u8; 30_000]).unwrap();
    fs.open_inode(orphan).unwrap();
    fs.unlink(3, b"orphan").unwrap();
    fs.checkpoint().unwrap();
    // After the checkpoint: a new file fsync'd, a grown file fsync'd.
    let new = fs.create(3, b"new", 0o644, 1000, 100).unwrap().ino;
    fs.write(new, 0, &vec![2u8; 30_000]).unwrap();
    fs.fsync(new).unwrap();
    fs.write(kept, 20_000, &vec![3u8; 50_000]).unwrap();
    fs.fsync(kept).unwrap();
    drop(fs); // the power cut: no checkpoint, no quota file written
    std::fs::write(&img, dev.snapshot()).unwrap();
    let fs = open_writable(&img);
    assert_eq!(fs.resolve("/kept").unwrap().size, 70_000);
    // The open freed the orphan, and its charge with it.
    assert_eq!(fs.get_quota(USRQUOTA, 1007).unwrap(), Default::default());
    let d = fs.get_quota(USRQUOTA, 1000).unwrap();
    let new = fs.resolve("/new").unwrap();
    assert_eq!((d.curinodes, d.curspace), (1, (new.blocks - 1) * 4096));
    assert!(d.curspace >= 8 * 4096);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

/// `f2fuse mkfs -O quota,project_quota` writes what mkfs.f2fs 1.15 writes:
/// the same superblock quota inodes, the same inodes at the same
/// addresses, the same quota file bytes.
#[test]
fn our_mkfs_writes_the_quota_files_of_mkfs_f2fs() {
    use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-mkfs");
    for features in [
        "extra_attr,quota,project_quota,lost_found",
        "quota",
        "extra_attr,project_quota",
        "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,quota,lost_found",
    ] {
        let ours = scratch.join("ours.img");
        let theirs = scratch.join("theirs.img");
        let _ = std::fs::remove_file(&ours);
        let opts = MkfsOptions {
            features: parse_features(features).unwrap(),
            ..MkfsOptions::default()
        };
        format_path(&ours, Some(64 << 20), &opts).unwrap();
        mkfs_f2fs(&theirs, 64 << 20, &["-O", features]);
        fsck_f2fs(&ours).unwrap_or_else(|e| panic!("{features}: {e}"));
        let (a, b) = (open_read_only(&ours), open_read_only(&theirs));
        assert_eq!(
            a.superblock().feature.get(),
            b.superblock().feature.get(),
            "{features}"
        );
        let qf: Vec<u32> = b.superblock().qf_ino.iter().map(|q| q.get()).collect();
        let ours_qf: Vec<u32> = a.superblock().qf_ino.iter().map(|q| q.get()).collect();
        assert_eq!(ours_qf, qf, "{features}");
        for ino in qf.into_iter().filter(|&i| i != 0).chain([3]) {
            let (x, y) = (a.inode(ino).unwrap(), b.inode(ino).unwrap());
            assert_eq!(
                (x.mode, x.flags, x.size, x.blocks, x.links, x.uid, x.gid, x.inline),
                (y.mode, y.flags, y.size, y.blocks, y.links, y.uid, y.gid, y.inline),
                "{features}: inode {ino}"
            );
            assert_eq!(
                a.extents(&x).unwrap(),
                b.extents(&y).unwrap(),
                "{features}: inode {ino}"
            );
            assert_eq!(
                a.node_manager().nat_entry(ino).unwrap().block_addr.get(),
                b.node_manager().nat_entry(ino).unwrap().block_addr.get(),
                "{features}: inode {ino}"
            );
            if ino == 3 {
                continue;
            }
            let mut bx = vec![0u8; x.size as usize];
            let mut by = vec![0u8; y.size as usize];
            a.read_ino(ino, 0, &mut bx).unwrap();
            b.read_ino(ino, 0, &mut by).unwrap();
            assert!(bx == by, "{features}: contents of inode {ino}");
        }
    }
}

/// Threads creating, growing, truncating, chowning and removing files of
/// several owners at once: the usage they leave is still exact.
#[test]
fn concurrent_changes_keep_usage_exact() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-threads");
    let img = quota_image(&scratch, "quota.img");
    let fs = open_writable(&img);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let fs = &fs;
            s.spawn(move || {
                let dir = fs
                    .mkdir(3, format!("t{t}").as_bytes(), 0o755, t, t)
                    .unwrap()
                    .ino;
                for i in 0..40u32 {
                    let name = format!("f{i}");
                    let f = fs
                        .create(dir, name.as_bytes(), 0o644, 1000 + i % 3, t)
                        .unwrap()
                        .ino;
                    fs.write(f, 0, &vec![i as u8; 4096 * (1 + i as usize % 7)])
                        .unwrap();
                    if i % 3 == 0 {
                        let chown = f2fuse_engine::internals::fs::SetAttr {
                            uid: Some(2000 + t),
                            size: Some(4096),
                            ..Default::default()
                        };
                        fs.setattr(f, &chown).unwrap();
                    }
                    if i % 4 == 0 {
                        fs.unlink(dir, name.as_bytes()).unwrap();
                    }
                }
            });
        }
    });
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

/// Compressed files charge what their clusters hold (i_blocks), and
/// releasing and reserving their saved blocks moves usage with them.
#[test]
fn compressed_files_are_charged_what_they_hold() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("quota-compr");
    let img = scratch.join("quota.img");
    mkfs_f2fs(
        &img,
        64 << 20,
        &["-O", "extra_attr,compression,quota,project_quota"],
    );
    let fs = open_writable(&img);
    let f = fs.create(3, b"c", 0o644, 1000, 100).unwrap().ino;
    fs.set_flags(f, inode_flag::COMPR).unwrap();
    fs.write(f, 0, &vec![b'z'; 256 << 10]).unwrap();
    let plain = fs.create(3, b"p", 0o644, 1000, 100).unwrap().ino;
    fs.write(plain, 0, &vec![b'z'; 64 << 10]).unwrap();
    fs.checkpoint().unwrap();
    let before = fs.get_quota(USRQUOTA, 1000).unwrap().curspace;
    assert!(fs.release_compress_blocks(f).unwrap() > 0);
    assert!(fs.get_quota(USRQUOTA, 1000).unwrap().curspace < before);
    fs.reserve_compress_blocks(f).unwrap();
    assert_eq!(fs.get_quota(USRQUOTA, 1000).unwrap().curspace, before);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}
