//! POSIX ACLs in the engine: stored in F2FS's format, kept in step with the
//! mode (setting an access ACL, chmod), inherited from default ACLs by new
//! inodes, refused where the kernel refuses them. fsck.f2fs and our fsck
//! after each scenario, and the ACLs read back after reopening.

use f2fuse_testkit as support;

use f2fuse_engine::internals::acl::{Acl, AclKind};
use f2fuse_engine::internals::fs::SetAttr;
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::inode_flag::IMMUTABLE;
use f2fuse_layout::xattr::{ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::PathBuf;
use support::*;

const NOBODY: u32 = u32::MAX;

fn fresh(scratch: &Scratch, features: &str) -> PathBuf {
    let img = scratch.join("img");
    let opts = MkfsOptions {
        features: parse_features(features).unwrap(),
        ..MkfsOptions::default()
    };
    format_path(&img, Some(64 << 20), &opts).unwrap();
    img
}

/// user::rw-, user:1000:rwx, group::r--, group:50:r-x, mask::r-x, other::---
fn named_acl() -> Vec<u8> {
    acl(&[
        (ACL_USER_OBJ, 6, NOBODY),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 4, NOBODY),
        (ACL_GROUP, 5, 50),
        (ACL_MASK, 5, NOBODY),
        (ACL_OTHER, 0, NOBODY),
    ])
}

fn stored(fs: &Fs, ino: u32, kind: AclKind) -> Option<Vec<u8>> {
    fs.acl(&fs.inode(ino).unwrap(), kind)
        .unwrap()
        .map(|a| a.to_bytes())
}

fn perm(fs: &Fs, ino: u32) -> u16 {
    fs.inode(ino).unwrap().mode & 0o7777
}

#[test]
fn access_acls_and_the_mode_stay_in_step() {
    if !require_f2fs_tools() {
        return;
    }
    // Without inline xattrs too: then every ACL needs the xattr node.
    for features in ["", "extra_attr,flexible_inline_xattr,inode_checksum"] {
        let scratch = Scratch::new("acl-access");
        let img = fresh(&scratch, features);
        let (file, sgid, plain);
        {
            let fs = open_writable(&img);
            file = fs.create(ROOT, b"file", 0o644, 0, 0).unwrap().ino;
            fs.set_acl(file, AclKind::Access, &named_acl(), true)
                .unwrap();
            // The mode shows the mask as group bits.
            assert_eq!(perm(&fs, file), 0o650);
            assert_eq!(stored(&fs, file, AclKind::Access), Some(named_acl()));
            // chmod rewrites the mask, not the owning group entry.
            fs.setattr(
                file,
                &SetAttr {
                    mode: Some(0o741),
                    ..SetAttr::default()
                },
            )
            .unwrap();
            let expect = acl(&[
                (ACL_USER_OBJ, 7, NOBODY),
                (ACL_USER, 7, 1000),
                (ACL_GROUP_OBJ, 4, NOBODY),
                (ACL_GROUP, 5, 50),
                (ACL_MASK, 4, NOBODY),
                (ACL_OTHER, 1, NOBODY),
            ]);
            assert_eq!(stored(&fs, file, AclKind::Access), Some(expect));

            // A setgid file loses the bit when the setter is not in its group.
            sgid = fs.create(ROOT, b"sgid", 0o2775, 0, 7).unwrap().ino;
            fs.set_acl(sgid, AclKind::Access, &named_acl(), true)
                .unwrap();
            assert_eq!(perm(&fs, sgid), 0o2650);
            fs.set_acl(sgid, AclKind::Access, &named_acl(), false)
                .unwrap();
            assert_eq!(perm(&fs, sgid), 0o650);

            // An ACL the mode says completely is not stored, only applied;
            // one already stored is removed. Through set_xattr as well.
            plain = fs.create(ROOT, b"plain", 0o600, 0, 0).unwrap().ino;
            let minimal = acl(&[
                (ACL_USER_OBJ, 7, NOBODY),
                (ACL_GROUP_OBJ, 5, NOBODY),
                (ACL_OTHER, 1, NOBODY),
            ]);
            fs.set_xattr(plain, b"system.posix_acl_access", &minimal, SetMode::Create)
                .unwrap();
            assert_eq!(
                (perm(&fs, plain), stored(&fs, plain, AclKind::Access)),
                (0o751, None)
            );
            fs.set_acl(sgid, AclKind::Access, &minimal, true).unwrap();
            assert_eq!(
                (perm(&fs, sgid), stored(&fs, sgid, AclKind::Access)),
                (0o751, None)
            );

            // Refused: malformed ACLs, default ACLs on files, changes to
            // immutable files; nothing changes.
            let before = (perm(&fs, file), stored(&fs, file, AclKind::Access));
            let no_mask = acl(&[
                (ACL_USER_OBJ, 7, NOBODY),
                (ACL_USER, 7, 1000),
                (ACL_GROUP_OBJ, 5, NOBODY),
                (ACL_OTHER, 0, NOBODY),
            ]);
            let errno = |r: f2fuse_engine::Result<()>| r.unwrap_err().to_errno();
            assert_eq!(
                errno(fs.set_acl(file, AclKind::Access, &no_mask, true)),
                libc::EINVAL
            );
            assert_eq!(
                errno(fs.set_acl(file, AclKind::Access, b"junk", true)),
                libc::EINVAL
            );
            assert_eq!(
                errno(fs.set_acl(file, AclKind::Default, &named_acl(), true)),
                libc::EACCES
            );
            let link = fs.symlink(ROOT, b"link", b"file", 0, 0).unwrap().ino;
            assert_eq!(
                errno(fs.set_acl(link, AclKind::Access, &named_acl(), true)),
                libc::EOPNOTSUPP
            );
            fs.set_flags(file, IMMUTABLE).unwrap();
            assert_eq!(
                errno(fs.set_acl(file, AclKind::Access, &minimal, true)),
                libc::EPERM
            );
            fs.set_flags(file, 0).unwrap();
            assert_eq!(
                (perm(&fs, file), stored(&fs, file, AclKind::Access)),
                before
            );
            fs.unmount().unwrap();
        }
        if let Err(report) = fsck_f2fs(&img) {
            panic!("fsck after access ACLs [{features}]:\n{report}");
        }
        let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
        assert_eq!(perm(&fs, file), 0o741);
        assert!(stored(&fs, file, AclKind::Access).is_some());
        assert_eq!(stored(&fs, plain, AclKind::Access), None);
        // What getfacl reads is the user-space format again.
        let got = fs
            .get_xattr(&fs.inode(file).unwrap(), b"system.posix_acl_access")
            .unwrap();
        assert_eq!(Acl::parse(&got).unwrap().to_bytes(), got);
    }
}

#[test]
fn new_inodes_inherit_default_acls() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("acl-default");
    let img = fresh(&scratch, "extra_attr,flexible_inline_xattr,inode_checksum");
    let default = acl(&[
        (ACL_USER_OBJ, 7, NOBODY),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 5, NOBODY),
        (ACL_MASK, 7, NOBODY),
        (ACL_OTHER, 5, NOBODY),
    ]);
    let (file, sub, fifo, link, outside);
    {
        let fs = open_writable(&img);
        let dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap().ino;
        fs.set_acl(dir, AclKind::Default, &default, true).unwrap();
        // A default ACL does not change the directory's own mode.
        assert_eq!(perm(&fs, dir), 0o755);
        file = fs.create(dir, b"file", 0o666, 0, 0).unwrap().ino;
        sub = fs.mkdir(dir, b"sub", 0o777, 0, 0).unwrap().ino;
        fifo = fs
            .mknod(dir, b"fifo", libc::S_IFIFO as u16 | 0o640, (0, 0), 0, 0)
            .unwrap()
            .ino;
        link = fs.symlink(dir, b"link", b"file", 0, 0).unwrap().ino;
        outside = fs.create(ROOT, b"outside", 0o666, 0, 0).unwrap().ino;
        fs.unmount().unwrap();
    }
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck after inheriting ACLs:\n{report}");
    }
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    // The requested mode masks the owner, mask and other entries.
    assert_eq!(perm(&fs, file), 0o664);
    let file_acl = acl(&[
        (ACL_USER_OBJ, 6, NOBODY),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 5, NOBODY),
        (ACL_MASK, 6, NOBODY),
        (ACL_OTHER, 4, NOBODY),
    ]);
    assert_eq!(stored(&fs, file, AclKind::Access), Some(file_acl));
    assert_eq!(stored(&fs, file, AclKind::Default), None);
    // Directories also inherit the default ACL itself.
    assert_eq!(perm(&fs, sub), 0o775);
    assert_eq!(stored(&fs, sub, AclKind::Default), Some(default.clone()));
    assert!(stored(&fs, sub, AclKind::Access).is_some());
    assert_eq!(perm(&fs, fifo), 0o640);
    assert!(stored(&fs, fifo, AclKind::Access).is_some());
    // Symlinks have no ACLs; outside the directory nothing is inherited.
    assert_eq!(perm(&fs, link), 0o777);
    assert!(fs.xattrs(&fs.inode(link).unwrap()).unwrap().is_empty());
    assert_eq!(perm(&fs, outside), 0o666);
    assert!(fs.xattrs(&fs.inode(outside).unwrap()).unwrap().is_empty());
}
