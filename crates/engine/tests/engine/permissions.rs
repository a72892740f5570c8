//! Permission checks on behalf of a caller: `Fs::access` and the
//! operations of `Fs::as_user`, against the kernel's rules (mode classes,
//! supplementary groups, ACLs, root's overrides, sticky directories,
//! chmod/chown/utimes rules, xattr namespaces, flags); fsck.f2fs and our
//! fsck afterwards.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::{RenameFlags, SetAttr, TimeSet};
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{Access, Credentials, Fs, OpenOptions, Timestamp};
use f2fuse_layout::inode_flag::{APPEND, IMMUTABLE};
use f2fuse_layout::xattr::{ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use support::{acl, fsck_f2fs, tools::our_fsck, Scratch};

const OWNER: u32 = 1000;
const GROUP: u32 = 100;

fn owner() -> Credentials {
    Credentials::new(OWNER, GROUP, vec![])
}

/// In the file's group only through a supplementary group.
fn member() -> Credentials {
    Credentials::new(2000, 2000, vec![7, GROUP])
}

fn other() -> Credentials {
    Credentials::new(3000, 3000, vec![])
}

fn errno<T>(r: f2fuse_engine::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.to_errno(),
    }
}

fn with_fs(tag: &str, test: impl FnOnce(&Fs)) {
    let scratch = Scratch::new(tag);
    let img = scratch.join("img");
    format_path(&img, Some(64 << 20), &MkfsOptions::default()).unwrap();
    let fs = Fs::open_path(
        &img,
        OpenOptions {
            writable: true,
            ..Default::default()
        },
    )
    .unwrap();
    test(&fs);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
    our_fsck(&img).unwrap();
}

#[test]
fn access_follows_mode_classes_groups_and_root() {
    with_fs("perm-access", |fs| {
        let rw = Access::READ | Access::WRITE;
        let f = fs.create(ROOT, b"f", 0o640, OWNER, GROUP).unwrap().ino;
        assert_eq!(errno(fs.access(f, &owner(), rw)), 0);
        assert_eq!(errno(fs.access(f, &owner(), Access::EXEC)), libc::EACCES);
        assert_eq!(errno(fs.access(f, &member(), Access::READ)), 0);
        assert_eq!(errno(fs.access(f, &member(), rw)), libc::EACCES);
        assert_eq!(errno(fs.access(f, &other(), Access::READ)), libc::EACCES);
        assert_eq!(errno(fs.access(f, &other(), Access::NONE)), 0);
        // The owner class applies to the owner even when others have more.
        let g = fs.create(ROOT, b"g", 0o077, OWNER, GROUP).unwrap().ino;
        assert_eq!(errno(fs.access(g, &owner(), Access::READ)), libc::EACCES);
        assert_eq!(errno(fs.access(g, &other(), rw)), 0);
        // Root reads and writes anything, executes what anybody may, and
        // searches every directory.
        let root = Credentials::root();
        assert_eq!(errno(fs.access(f, &root, rw)), 0);
        assert_eq!(errno(fs.access(f, &root, Access::EXEC)), libc::EACCES);
        let x = fs.create(ROOT, b"x", 0o001, OWNER, GROUP).unwrap().ino;
        assert_eq!(errno(fs.access(x, &root, Access::EXEC)), 0);
        let d = fs.mkdir(ROOT, b"d", 0o000, OWNER, GROUP).unwrap().ino;
        assert_eq!(errno(fs.access(d, &root, rw | Access::EXEC)), 0);
        assert_eq!(errno(fs.access(d, &owner(), Access::EXEC)), libc::EACCES);
        // Writing an immutable file is EPERM, for root too.
        fs.set_flags(f, IMMUTABLE).unwrap();
        assert_eq!(errno(fs.access(f, &root, Access::WRITE)), libc::EPERM);
        assert_eq!(errno(fs.access(f, &root, Access::READ)), 0);
        fs.set_flags(f, 0).unwrap();
    });
}

#[test]
fn access_acls_grant_and_deny() {
    with_fs("perm-acl", |fs| {
        const U: u32 = u32::MAX;
        let f = fs.create(ROOT, b"f", 0o600, OWNER, GROUP).unwrap().ino;
        // user:3000:rw-, group::r--, group:7:rw-, mask::r--, other::---
        let entries = [
            (ACL_USER_OBJ, 6, U),
            (ACL_USER, 6, 3000),
            (ACL_GROUP_OBJ, 4, U),
            (ACL_GROUP, 6, 7),
            (ACL_MASK, 4, U),
            (ACL_OTHER, 0, U),
        ];
        fs.set_xattr(f, b"system.posix_acl_access", &acl(&entries), SetMode::Any)
            .unwrap();
        // The named user gets only what the mask leaves.
        assert_eq!(errno(fs.access(f, &other(), Access::READ)), 0);
        assert_eq!(errno(fs.access(f, &other(), Access::WRITE)), libc::EACCES);
        // A member of group 7 (and of the owning group) likewise.
        assert_eq!(errno(fs.access(f, &member(), Access::READ)), 0);
        assert_eq!(errno(fs.access(f, &member(), Access::WRITE)), libc::EACCES);
        // Nobody else: the other entry.
        let stranger = Credentials::new(4000, 4000, vec![]);
        assert_eq!(errno(fs.access(f, &stranger, Access::READ)), libc::EACCES);
        // A matching group entry that does not grant denies, even where
        // the other entry would grant.
        let with_other = [
            (ACL_USER_OBJ, 6, U),
            (ACL_GROUP_OBJ, 0, U),
            (ACL_GROUP, 0, 7),
            (ACL_MASK, 7, U),
            (ACL_OTHER, 4, U),
        ];
        fs.set_xattr(
            f,
            b"system.posix_acl_access",
            &acl(&with_other),
            SetMode::Any,
        )
        .unwrap();
        assert_eq!(errno(fs.access(f, &member(), Access::READ)), libc::EACCES);
        assert_eq!(errno(fs.access(f, &stranger, Access::READ)), 0);
    });
}

#[test]
fn names_need_search_and_write_permission() {
    with_fs("perm-names", |fs| {
        let root = Credentials::root();
        let private = fs.mkdir(ROOT, b"private", 0o700, 0, 0).unwrap().ino;
        fs.create(private, b"in", 0o644, 0, 0).unwrap();
        let me = other();
        let user = fs.as_user(&me);
        assert_eq!(errno(user.lookup(private, b"in")), libc::EACCES);
        assert_eq!(errno(user.open_dir(private)), libc::EACCES);
        assert_eq!(errno(user.create(ROOT, b"new", 0o644)), libc::EACCES);
        assert_eq!(errno(user.mkdir(private, b"sub", 0o755)), libc::EACCES);
        assert_eq!(errno(user.unlink(private, b"in")), libc::EACCES);
        assert_eq!(errno(fs.as_user(&root).lookup(private, b"in")), 0);
        // An existing name is EEXIST before write permission counts; a
        // missing one in an unsearchable directory is EACCES.
        assert_eq!(errno(user.mkdir(ROOT, b"private", 0o755)), libc::EEXIST);
        assert_eq!(errno(user.unlink(private, b"missing")), libc::EACCES);
        // Devices need privilege; fifos do not.
        let open = fs.mkdir(ROOT, b"open", 0o777, 0, 0).unwrap().ino;
        let dev = libc::S_IFCHR as u16 | 0o644;
        assert_eq!(errno(user.mknod(open, b"dev", dev, (1, 3))), libc::EPERM);
        let fifo = user.mknod(open, b"fifo", libc::S_IFIFO as u16 | 0o644, (0, 0));
        assert_eq!((fifo.unwrap().uid), me.uid);

        // Sticky directory: only the owner of the entry or directory (or root).
        let tmp = fs.mkdir(ROOT, b"tmp", 0o1777, 0, 0).unwrap().ino;
        let mine = user.create(tmp, b"mine", 0o644).unwrap();
        assert_eq!((mine.uid, mine.gid), (me.uid, me.gid));
        fs.create(tmp, b"roots", 0o666, 0, 0).unwrap();
        assert_eq!(errno(user.unlink(tmp, b"roots")), libc::EPERM);
        let none = RenameFlags::default();
        assert_eq!(
            errno(user.rename(tmp, b"roots", tmp, b"moved", none)),
            libc::EPERM
        );
        assert_eq!(
            errno(user.rename(tmp, b"mine", tmp, b"roots", none)),
            libc::EPERM,
            "replacing another user's file"
        );
        assert_eq!(
            errno(fs.as_user(&owner()).unlink(tmp, b"mine")),
            libc::EPERM
        );
        assert_eq!(errno(user.unlink(tmp, b"mine")), 0);

        // Moving a directory to another parent needs write permission on it.
        let a = fs.mkdir(open, b"a", 0o755, 0, 0).unwrap().ino;
        fs.mkdir(open, b"b", 0o777, 0, 0).unwrap();
        let b = fs.lookup(open, b"b").unwrap().ino;
        assert_eq!(errno(user.rename(open, b"a", b, b"a", none)), libc::EACCES);
        assert_eq!(errno(user.rename(open, b"a", open, b"a2", none)), 0);
        assert_eq!(fs.lookup(open, b"a2").unwrap().ino, a);
        // Links: write permission on the new parent.
        let file = fs.create(open, b"file", 0o644, 0, 0).unwrap().ino;
        assert_eq!(errno(user.link(file, ROOT, b"l")), libc::EACCES);
        assert_eq!(errno(user.link(file, open, b"l")), 0);

        // Set-group-ID directories: their group, and S_ISGID for subdirectories;
        // a group-executable setgid file of a non-member loses the bit.
        let shared = fs.mkdir(ROOT, b"shared", 0o2777, 0, GROUP).unwrap().ino;
        let sub = user.mkdir(shared, b"sub", 0o755).unwrap();
        assert_eq!((sub.gid, sub.mode & 0o7777), (GROUP, 0o2755));
        let exe = user.create(shared, b"exe", 0o2755).unwrap();
        assert_eq!((exe.gid, exe.mode & 0o7777), (GROUP, 0o755));
        let exe = fs
            .as_user(&member())
            .create(shared, b"exe2", 0o2755)
            .unwrap();
        assert_eq!(exe.mode & 0o7777, 0o2755);
    });
}

#[test]
fn open_checks_the_access_mode() {
    with_fs("perm-open", |fs| {
        let f = fs.create(ROOT, b"f", 0o604, OWNER, GROUP).unwrap().ino;
        let me = other();
        let user = fs.as_user(&me);
        assert_eq!(errno(user.open(f, libc::O_RDONLY)), 0);
        assert_eq!(errno(user.open(f, libc::O_WRONLY)), libc::EACCES);
        assert_eq!(
            errno(user.open(f, libc::O_RDONLY | libc::O_TRUNC)),
            libc::EACCES
        );
        let owner_creds = owner();
        let own = fs.as_user(&owner_creds);
        assert_eq!(errno(own.open(f, libc::O_RDWR)), 0);
        // The owner class decides for the owner, even against the others'.
        let w = fs.create(ROOT, b"w", 0o204, OWNER, GROUP).unwrap().ino;
        assert_eq!(errno(own.open(w, libc::O_RDONLY)), libc::EACCES);
        assert_eq!(errno(own.open(w, libc::O_WRONLY)), 0);
        assert_eq!(errno(user.open(w, libc::O_RDONLY)), 0);
        // Exec needs execute permission, not read.
        let x = fs.create(ROOT, b"x", 0o711, OWNER, GROUP).unwrap().ino;
        let exec = libc::O_RDONLY | f2fuse_engine::internals::fs::OPEN_FOR_EXEC;
        assert_eq!(errno(user.open(x, exec)), 0);
        assert_eq!(errno(user.open(x, libc::O_RDONLY)), libc::EACCES);
        assert_eq!(errno(user.open(f, exec)), libc::EACCES);
        // Flags hold for unchecked views too.
        fs.set_flags(f, APPEND).unwrap();
        let root = Credentials::root();
        let trusted = fs.as_user_unchecked(&root);
        assert_eq!(errno(trusted.open(f, libc::O_WRONLY)), libc::EPERM);
        assert_eq!(errno(trusted.open(f, libc::O_WRONLY | libc::O_APPEND)), 0);
        fs.set_flags(f, 0).unwrap();
    });
}

#[test]
fn attribute_changes_follow_setattr_prepare() {
    with_fs("perm-setattr", |fs| {
        let f = fs.create(ROOT, b"f", 0o2666, OWNER, GROUP).unwrap().ino;
        let me = other();
        let user = fs.as_user(&me);
        let owner_creds = owner();
        let own = fs.as_user(&owner_creds);
        let chmod = |mode| SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        assert_eq!(errno(user.setattr(f, &chmod(0o777))), libc::EPERM);
        // The owner outside the file's group loses S_ISGID; a member keeps it.
        let out = Credentials::new(OWNER, 5, vec![]);
        let changed = fs.as_user(&out).setattr(f, &chmod(0o2660)).unwrap();
        assert_eq!(changed.mode & 0o7777, 0o660);
        assert_eq!(
            own.setattr(f, &chmod(0o2666)).unwrap().mode & 0o7777,
            0o2666
        );

        // chown: only root gives files away; the owner picks one of his groups.
        let chown = |uid, gid| SetAttr {
            uid,
            gid,
            ..SetAttr::default()
        };
        assert_eq!(errno(own.setattr(f, &chown(Some(0), None))), libc::EPERM);
        assert_eq!(errno(own.setattr(f, &chown(None, Some(5)))), libc::EPERM);
        assert_eq!(
            errno(user.setattr(f, &chown(None, Some(me.gid)))),
            libc::EPERM
        );
        let regrouped = Credentials::new(OWNER, GROUP, vec![5]);
        let after = fs
            .as_user(&regrouped)
            .setattr(f, &chown(Some(OWNER), Some(5)));
        assert_eq!(after.unwrap().gid, 5);
        let root = Credentials::root();
        let after = fs.as_user(&root).setattr(f, &chown(Some(7), Some(7)));
        assert_eq!((after.as_ref().unwrap().uid, after.unwrap().gid), (7, 7));
        fs.setattr(f, &chown(Some(OWNER), Some(GROUP))).unwrap();

        // Times: now with write permission or ownership, given times only
        // the owner; a time equal to the change time sent with it is now.
        let at = TimeSet::At(Timestamp { sec: 1, nsec: 0 });
        let times = |a, m| SetAttr {
            atime: a,
            mtime: m,
            ..SetAttr::default()
        };
        let now = Some(TimeSet::Now);
        assert_eq!(errno(user.setattr(f, &times(now, now))), 0);
        assert_eq!(
            errno(user.setattr(f, &times(Some(at), Some(at)))),
            libc::EPERM
        );
        assert_eq!(errno(user.setattr(f, &times(now, None))), libc::EPERM);
        let kernel_now = SetAttr {
            ctime: Some(Timestamp { sec: 1, nsec: 0 }),
            ..times(now, Some(at))
        };
        assert_eq!(errno(user.setattr(f, &kernel_now)), 0);
        // mtime now without atime: the kernel recording a write.
        assert_eq!(errno(user.setattr(f, &times(None, now))), 0);
        fs.setattr(f, &chmod(0o644)).unwrap();
        assert_eq!(errno(user.setattr(f, &times(now, now))), libc::EACCES);
        assert_eq!(errno(user.setattr(f, &times(None, now))), libc::EACCES);
        let through_file = SetAttr {
            through_writable_file: true,
            ..times(None, now)
        };
        assert_eq!(errno(user.setattr(f, &through_file)), 0);
        assert_eq!(errno(own.setattr(f, &times(Some(at), Some(at)))), 0);

        // Truncating needs write permission, except through an open file.
        let truncate = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(errno(user.setattr(f, &truncate)), libc::EACCES);
        let ftruncate = SetAttr {
            through_writable_file: true,
            ..truncate
        };
        assert_eq!(errno(user.setattr(f, &ftruncate)), 0);
    });
}

/// Privileges dropped by a data change (`kill_privileges`: a write,
/// truncate or fallocate by a caller without CAP_FSETID) take
/// set-group-ID from a file without group execute too when the caller is
/// outside the file's group (setattr_should_drop_sgid); members (also
/// through a supplementary group) keep it; the rule is the same whether
/// the engine checks permissions or not.
#[test]
fn dropped_privileges_take_set_group_id_from_callers_outside_the_group() {
    with_fs("perm-kill-sgid", |fs| {
        let kill = SetAttr {
            kill_privileges: true,
            ..SetAttr::default()
        };
        let (outsider, group_member) = (other(), member());
        for checked in [true, false] {
            let view = |creds| {
                if checked {
                    fs.as_user(creds)
                } else {
                    fs.as_user_unchecked(creds)
                }
            };
            for (mode, who, kept) in [
                (0o2666, &outsider, 0o666),
                (0o2666, &group_member, 0o2666),
                (0o6666, &group_member, 0o2666),
                (0o2676, &group_member, 0o676),
            ] {
                let name = format!("f{mode:o}-{}-{checked}", who.uid);
                let f = fs
                    .create(ROOT, name.as_bytes(), mode, OWNER, GROUP)
                    .unwrap();
                let after = view(who).setattr(f.ino, &kill).unwrap();
                assert_eq!(after.mode & 0o7777, kept, "{name}");
            }
        }
        // A trusted caller (no credentials) counts as in the group.
        let f = fs.create(ROOT, b"trusted", 0o2666, OWNER, GROUP).unwrap();
        assert_eq!(fs.setattr(f.ino, &kill).unwrap().mode & 0o7777, 0o2666);
    });
}

#[test]
fn xattrs_acls_and_flags_need_their_rights() {
    with_fs("perm-xattr", |fs| {
        const U: u32 = u32::MAX;
        let f = fs.create(ROOT, b"f", 0o644, OWNER, GROUP).unwrap().ino;
        let me = other();
        let user = fs.as_user(&me);
        let owner_creds = owner();
        let own = fs.as_user(&owner_creds);
        let set = |who: &f2fuse_engine::AsUser, name: &[u8]| {
            errno(who.set_xattr(f, name, b"v", SetMode::Any))
        };
        assert_eq!(set(&user, b"user.a"), libc::EACCES);
        assert_eq!(set(&own, b"user.a"), 0);
        assert_eq!(set(&own, b"trusted.a"), libc::EPERM);
        assert_eq!(set(&own, b"security.a"), libc::EPERM);
        assert_eq!(set(&fs.as_user(&Credentials::root()), b"trusted.a"), 0);
        let inode = fs.inode(f).unwrap();
        assert_eq!(user.get_xattr(&inode, b"user.a").unwrap(), b"v");
        assert_eq!(errno(user.get_xattr(&inode, b"trusted.a")), libc::ENODATA);
        let names: Vec<Vec<u8>> = user
            .xattrs(&inode)
            .unwrap()
            .into_iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(names, vec![b"user.a".to_vec()]);
        assert_eq!(errno(user.remove_xattr(f, b"user.a")), libc::EACCES);

        // ACLs: the owner only; S_ISGID dropped for callers outside the group.
        let minimal = acl(&[
            (ACL_USER_OBJ, 6, U),
            (ACL_GROUP_OBJ, 4, U),
            (ACL_OTHER, 4, U),
        ]);
        let name = b"system.posix_acl_access";
        assert_eq!(
            errno(user.set_xattr(f, name, &minimal, SetMode::Any)),
            libc::EPERM
        );
        fs.setattr(
            f,
            &SetAttr {
                mode: Some(0o2644),
                ..SetAttr::default()
            },
        )
        .unwrap();
        own.set_xattr(f, name, &minimal, SetMode::Any).unwrap();
        assert_eq!(fs.inode(f).unwrap().mode & 0o7777, 0o2644, "owner in group");
        let outsider = Credentials::new(OWNER, 5, vec![]);
        let named = acl(&[
            (ACL_USER_OBJ, 6, U),
            (ACL_GROUP_OBJ, 4, U),
            (ACL_GROUP, 4, 5),
            (ACL_MASK, 4, U),
            (ACL_OTHER, 4, U),
        ]);
        fs.as_user(&outsider)
            .set_xattr(f, name, &named, SetMode::Any)
            .unwrap();
        assert_eq!(fs.inode(f).unwrap().mode & 0o7777, 0o644);

        // Flags: the owner; immutable and append-only root only.
        assert_eq!(errno(user.set_flags(f, 0)), libc::EPERM);
        assert_eq!(errno(own.set_flags(f, IMMUTABLE)), libc::EPERM);
        assert_eq!(
            errno(fs.as_user(&Credentials::root()).set_flags(f, IMMUTABLE)),
            0
        );
        assert_eq!(errno(own.set_flags(f, IMMUTABLE)), 0, "unchanged flags");
        fs.set_flags(f, 0).unwrap();
    });
}
