//! The writer on small scenarios: every change leaves an image fsck.f2fs
//! accepts, and reopening shows exactly what was written.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::{RenameFlags, SetAttr};
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{FileKind, Fs};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::Path;
use support::*;

fn fresh(scratch: &Scratch, features: &str, size: u64) -> std::path::PathBuf {
    let img = scratch.join("img");
    let opts = MkfsOptions {
        features: parse_features(features).unwrap(),
        ..MkfsOptions::default()
    };
    format_path(&img, Some(size), &opts).unwrap();
    img
}

fn assert_fsck(img: &Path, when: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck.f2fs after {when}:\n{report}");
    }
}

fn read_all(fs: &Fs, path: &str) -> Vec<u8> {
    let inode = fs.resolve(path).unwrap();
    let mut buf = vec![0u8; inode.size as usize];
    assert_eq!(fs.read(&inode, 0, &mut buf).unwrap(), buf.len());
    buf
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn create_write_mkdir_reopen() {
    if !require_f2fs_tools() {
        return;
    }
    for features in [
        "",
        "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,lost_found",
    ] {
        let scratch = Scratch::new("write-basic");
        let img = fresh(&scratch, features, 128 << 20);
        let small = b"hello f2fuse".to_vec();
        let big = pattern(5_000_000, 7);
        {
            let fs = open_writable(&img);
            let d = fs.mkdir(ROOT, b"dir", 0o755, 1000, 1000).unwrap();
            let f = fs.create(d.ino, b"small.txt", 0o644, 1000, 1000).unwrap();
            fs.write(f.ino, 0, &small).unwrap();
            let g = fs.create(ROOT, b"big.bin", 0o600, 0, 0).unwrap();
            for (i, chunk) in big.chunks(1 << 20).enumerate() {
                fs.write(g.ino, (i << 20) as u64, chunk).unwrap();
            }
            fs.symlink(d.ino, b"link", b"../big.bin", 0, 0).unwrap();
            fs.set_xattr(f.ino, b"user.note", b"v1", SetMode::Create)
                .unwrap();
            fs.unmount().unwrap();
        }
        assert_fsck(&img, &format!("create/write [{features}]"));
        let fs = open_read_only(&img);
        assert_eq!(read_all(&fs, "/dir/small.txt"), small);
        assert_eq!(read_all(&fs, "/big.bin"), big);
        assert_eq!(
            fs.read_link(&fs.resolve("/dir/link").unwrap()).unwrap(),
            b"../big.bin"
        );
        let f = fs.resolve("/dir/small.txt").unwrap();
        assert_eq!(fs.get_xattr(&f, b"user.note").unwrap(), b"v1");
        assert_eq!((f.uid, f.gid, f.mode & 0o7777), (1000, 1000, 0o644));
        assert_eq!(fs.resolve("/dir").unwrap().links, 2);
        assert_eq!(fs.resolve("/").unwrap().kind, FileKind::Directory);
    }
}

#[test]
fn namespace_changes_stay_consistent() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("write-ns");
    let img = fresh(&scratch, "", 128 << 20);
    {
        let fs = open_writable(&img);
        let a = fs.mkdir(ROOT, b"a", 0o755, 0, 0).unwrap();
        let b = fs.mkdir(ROOT, b"b", 0o755, 0, 0).unwrap();
        // Enough entries to convert the inline directory and grow hash levels.
        for i in 0..600 {
            let name = format!("file-with-a-longer-name-{i:04}");
            let f = fs.create(a.ino, name.as_bytes(), 0o644, 0, 0).unwrap();
            fs.write(f.ino, 0, name.as_bytes()).unwrap();
        }
        for i in (0..600).step_by(3) {
            fs.unlink(a.ino, format!("file-with-a-longer-name-{i:04}").as_bytes())
                .unwrap();
        }
        fs.rename(
            a.ino,
            b"file-with-a-longer-name-0001",
            b.ino,
            b"moved",
            RenameFlags::default(),
        )
        .unwrap();
        let sub = fs.mkdir(a.ino, b"sub", 0o700, 0, 0).unwrap();
        fs.rename(a.ino, b"sub", b.ino, b"sub2", RenameFlags::default())
            .unwrap();
        let moved = fs.lookup(b.ino, b"moved").unwrap().ino;
        fs.link(moved, ROOT, b"hardlink").unwrap();
        fs.rename(
            ROOT,
            b"hardlink",
            b.ino,
            b"sub2",
            RenameFlags {
                noreplace: true,
                exchange: false,
                whiteout: false,
            },
        )
        .unwrap_err();
        fs.rename(
            b.ino,
            b"moved",
            b.ino,
            b"sub2",
            RenameFlags {
                noreplace: false,
                exchange: true,
                whiteout: false,
            },
        )
        .unwrap();
        assert_eq!(fs.lookup(b.ino, b"moved").unwrap().ino, sub.ino);
        fs.rmdir(ROOT, b"b").unwrap_err();
        fs.setattr(
            moved,
            &SetAttr {
                size: Some(3),
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
        fs.unmount().unwrap();
    }
    assert_fsck(&img, "namespace changes");
    let fs = open_read_only(&img);
    let names: Vec<Vec<u8>> = fs
        .read_dir(fs.resolve("/a").unwrap().ino)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names.len(), 2 + 600 - 200 - 1);
    assert_eq!(read_all(&fs, "/b/sub2"), b"fil");
    assert_eq!(read_all(&fs, "/hardlink"), b"fil");
    assert_eq!(fs.resolve("/hardlink").unwrap().links, 2);
    assert_eq!(
        fs.lookup(fs.resolve("/b/moved").unwrap().ino, b"..")
            .unwrap()
            .ino,
        fs.resolve("/b").unwrap().ino
    );
    assert_eq!(fs.resolve("/b").unwrap().links, 3);
}

#[test]
fn size_limits_and_name_limits_have_their_errno() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("write-limits");
    let img = fresh(&scratch, "", 64 << 20);
    let fs = open_writable(&img);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    // addrs in the inode + 2*1018 + 2*1018^2 + 1018^3 blocks of 4 KiB is the largest file
    // (a new file keeps a 50-word inline xattr area, so 873 addresses in the inode).
    let addrs = fs.inode(f.ino).unwrap().addrs_per_inode() as u64;
    assert_eq!(addrs, 873);
    let max = (addrs + 2 * 1018 + 2 * 1018 * 1018 + 1018 * 1018 * 1018) * 4096;
    let err = fs.write(f.ino, max, b"x").unwrap_err();
    assert_eq!(err.to_errno(), libc::EFBIG, "{err}");
    let err = fs
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(max + 1),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(err.to_errno(), libc::EFBIG, "{err}");
    // The last byte of the largest file is writable: a double-indirect path, sparse.
    fs.write(f.ino, max - 1, b"z").unwrap();
    assert_eq!(fs.inode(f.ino).unwrap().size, max);
    let long = vec![b'n'; 256];
    assert_eq!(
        fs.create(ROOT, &long, 0o644, 0, 0)
            .err()
            .unwrap()
            .to_errno(),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        fs.lookup(ROOT, &long).err().unwrap().to_errno(),
        libc::ENAMETOOLONG
    );
    let ok = vec![b'n'; 255];
    fs.create(ROOT, &ok, 0o644, 0, 0).unwrap();
    assert_eq!(
        fs.create(ROOT, &ok, 0o644, 0, 0).err().unwrap().to_errno(),
        libc::EEXIST
    );
    fs.unmount().unwrap();
    assert_fsck(&img, "size and name limits");
    let fs = open_read_only(&img);
    let inode = fs.resolve("/f").unwrap();
    let mut last = [0u8; 1];
    fs.read(&inode, max - 1, &mut last).unwrap();
    assert_eq!(&last, b"z");
    assert_ne!(
        inode.inode().i_nid[4].get(),
        0,
        "the double-indirect node is in use"
    );
}

#[test]
fn link_count_limit_gives_emlink() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("write-emlink");
    let img = fresh(&scratch, "", 64 << 20);
    let addr = {
        let fs = open_writable(&img);
        let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
        let addr_of = |fs: &Fs| fs.node_manager().nat_entry(f.ino).unwrap().block_addr.get();
        fs.checkpoint().unwrap();
        let addr = addr_of(&fs);
        fs.unmount().unwrap();
        addr
    };
    // i_links is a u32: put the file at the limit by editing its inode block (offset 0x0C).
    let mut bytes = std::fs::read(&img).unwrap();
    let at = addr as usize * 4096 + 0x0C;
    bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&img, &bytes).unwrap();
    let fs = open_writable(&img);
    let f = fs.resolve("/f").unwrap();
    assert_eq!(f.links, u32::MAX);
    let err = fs.link(f.ino, ROOT, b"one-more").unwrap_err();
    assert_eq!(err.to_errno(), libc::EMLINK, "{err}");
}

/// RENAME_WHITEOUT (f2fs_create_whiteout): the old name becomes a
/// character device 0:0 with mode 0, in the same change; owned by the
/// caller (the directory's group under a set-group-ID one); refused with
/// RENAME_EXCHANGE, for unprivileged callers, and with nothing changed when
/// the rename fails.
#[test]
fn rename_whiteout_leaves_a_whiteout_at_the_old_name() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("rename-whiteout");
    let img = fresh(&scratch, "", 64 << 20);
    let whiteout = RenameFlags {
        whiteout: true,
        ..RenameFlags::default()
    };
    {
        let fs = open_writable(&img);
        let f = fs.create(ROOT, b"file", 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, b"data").unwrap();
        let upper = fs.mkdir(ROOT, b"upper", 0o2775, 0, 50).unwrap();
        fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap();
        fs.rename(ROOT, b"file", upper.ino, b"moved", whiteout)
            .unwrap();
        let dir_creds = f2fuse_engine::Credentials::new(0, 7, vec![]);
        fs.as_user(&dir_creds)
            .rename(ROOT, b"dir", upper.ino, b"dir", whiteout)
            .unwrap();
        // Onto an existing name: replaced, and the whiteout made.
        fs.create(upper.ino, b"a", 0o600, 0, 0).unwrap();
        fs.create(upper.ino, b"b", 0o600, 0, 0).unwrap();
        fs.as_user(&dir_creds)
            .rename(upper.ino, b"a", upper.ino, b"b", whiteout)
            .unwrap();
        // Refusals leave the names as they were.
        let noreplace = RenameFlags {
            noreplace: true,
            ..whiteout
        };
        let err = fs.rename(upper.ino, b"moved", upper.ino, b"b", noreplace);
        assert_eq!(err.unwrap_err().to_errno(), libc::EEXIST);
        let exchange = RenameFlags {
            exchange: true,
            ..whiteout
        };
        let err = fs.rename(upper.ino, b"moved", upper.ino, b"b", exchange);
        assert_eq!(err.unwrap_err().to_errno(), libc::EINVAL);
        let user = f2fuse_engine::Credentials::new(1000, 1000, vec![]);
        let err = fs
            .as_user(&user)
            .rename(upper.ino, b"moved", upper.ino, b"c", whiteout);
        assert_eq!(err.unwrap_err().to_errno(), libc::EPERM);
        assert_eq!(fs.lookup(upper.ino, b"moved").unwrap().ino, f.ino);
        fs.unmount().unwrap();
    }
    assert_fsck(&img, "renames with whiteouts");
    let fs = open_read_only(&img);
    for (path, owner) in [("/file", (0, 0)), ("/dir", (0, 7)), ("/upper/a", (0, 50))] {
        let w = fs.resolve(path).unwrap();
        assert_eq!(w.kind, FileKind::CharDevice, "{path}");
        assert_eq!((w.mode & 0o7777, w.rdev, w.links), (0, (0, 0), 1), "{path}");
        assert_eq!((w.uid, w.gid), owner, "{path}");
    }
    assert_eq!(read_all(&fs, "/upper/moved"), b"data");
    assert_eq!(fs.resolve("/upper/dir").unwrap().kind, FileKind::Directory);
    assert_eq!(fs.resolve("/upper/b").unwrap().kind, FileKind::Regular);
    assert_eq!(fs.resolve("/upper").unwrap().links, 3);
}

/// `kill_privileges` (the VFS's ATTR_KILL_SUID/SGID/PRIV, which a FUSE
/// daemon with FUSE_HANDLE_KILLPRIV_V2 applies itself): set-user-ID goes,
/// set-group-ID only with group execute for a trusted caller (one outside
/// the group loses it too: tests/permissions.rs), file capabilities go, directories
/// keep theirs; a chown with it is one change.
#[test]
fn kill_privileges_clears_setid_bits_and_capabilities() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("kill-privileges");
    let img = fresh(
        &scratch,
        "extra_attr,inode_checksum,flexible_inline_xattr",
        64 << 20,
    );
    let fs = open_writable(&img);
    let kill = SetAttr {
        kill_privileges: true,
        ..SetAttr::default()
    };
    let exe = fs.create(ROOT, b"exe", 0o6755, 0, 0).unwrap();
    fs.set_xattr(
        exe.ino,
        b"security.capability",
        b"\x01\x00\x00\x02",
        SetMode::Any,
    )
    .unwrap();
    assert_eq!(fs.setattr(exe.ino, &kill).unwrap().mode & 0o7777, 0o755);
    assert!(fs
        .get_xattr(&fs.inode(exe.ino).unwrap(), b"security.capability")
        .is_err());
    // Set-group-ID without group execute marks mandatory locking: it stays.
    let locked = fs.create(ROOT, b"locked", 0o6640, 0, 0).unwrap();
    assert_eq!(fs.setattr(locked.ino, &kill).unwrap().mode & 0o7777, 0o2640);
    // A chown that drops privileges in the same change.
    let chowned = fs.create(ROOT, b"chowned", 0o4711, 0, 0).unwrap();
    let chown = SetAttr {
        uid: Some(1000),
        kill_privileges: true,
        ..SetAttr::default()
    };
    let after = fs.setattr(chowned.ino, &chown).unwrap();
    assert_eq!((after.uid, after.mode & 0o7777), (1000, 0o711));
    let dir = fs.mkdir(ROOT, b"dir", 0o2775, 0, 0).unwrap();
    assert_eq!(fs.setattr(dir.ino, &kill).unwrap().mode & 0o7777, 0o2775);
    fs.unmount().unwrap();
    assert_fsck(&img, "dropping privileges");
    let fs = open_read_only(&img);
    assert_eq!(fs.resolve("/exe").unwrap().mode & 0o7777, 0o755);
    assert_eq!(fs.resolve("/chowned").unwrap().mode & 0o7777, 0o711);
}

/// stat(2) sectors as the kernel's f2fs_getattr reports them: inline data
/// and inline dentries count by their bytes (du of small files is not 0).
#[test]
fn stat_sectors_count_inline_bytes() {
    let scratch = Scratch::new("stat-sectors");
    let img = fresh(
        &scratch,
        "extra_attr,inode_checksum,flexible_inline_xattr",
        64 << 20,
    );
    let fs = support::open_writable(&img);
    let small = fs.create(ROOT, b"small", 0o644, 0, 0).unwrap();
    fs.write(small.ino, 0, &[7u8; 1000]).unwrap();
    assert_eq!(fs.inode(small.ino).unwrap().stat_sectors(), 2);
    let large = fs.create(ROOT, b"large", 0o644, 0, 0).unwrap();
    fs.write(large.ino, 0, &[7u8; 5000]).unwrap();
    assert_eq!(fs.inode(large.ino).unwrap().stat_sectors(), 16);
    let dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap();
    assert_eq!(dir.stat_sectors(), dir.size.div_ceil(512));
    assert!(dir.stat_sectors() > 0);
    let link = fs.symlink(ROOT, b"link", b"small", 0, 0).unwrap();
    assert_eq!(link.stat_sectors(), 0, "inline symlinks count nothing");
    fs.unmount().unwrap();
}

/// A write past block 0 of an inline file (and fallocate of such a range)
/// must hold block 0 too: the inline bytes move there. Both keep them.
#[test]
fn writes_past_block_zero_of_inline_files_keep_the_inline_bytes() {
    let scratch = Scratch::new("inline-past-zero");
    let img = fresh(
        &scratch,
        "extra_attr,inode_checksum,flexible_inline_xattr",
        64 << 20,
    );
    let fs = support::open_writable(&img);
    let written = fs.create(ROOT, b"written", 0o644, 0, 0).unwrap();
    fs.write(written.ino, 0, b"inline bytes").unwrap();
    fs.write(written.ino, 8192, b"far").unwrap();
    let allocated = fs.create(ROOT, b"allocated", 0o644, 0, 0).unwrap();
    fs.write(allocated.ino, 0, b"inline bytes").unwrap();
    fs.fallocate(
        allocated.ino,
        8192,
        4096,
        f2fuse_engine::FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    for (path, size) in [("/written", 8195), ("/allocated", 12288)] {
        let data = read_all(&fs, path);
        assert_eq!(data.len(), size, "{path}");
        assert_eq!(&data[..12], b"inline bytes", "{path}");
        assert!(!fs.has_inline_data(&fs.resolve(path).unwrap()), "{path}");
    }
    fs.unmount().unwrap();
    assert_fsck(&img, "writes past block 0 of inline files");
}

/// An inode number kept after its file was freed is a stale handle for a
/// library caller: ESTALE, and the file system stays writable.
#[test]
fn freed_inode_numbers_are_stale_not_corrupt() {
    let scratch = Scratch::new("stale-ino");
    let img = fresh(
        &scratch,
        "extra_attr,inode_checksum,flexible_inline_xattr",
        64 << 20,
    );
    let fs = support::open_writable(&img);
    let gone = fs.create(ROOT, b"gone", 0o644, 0, 0).unwrap();
    fs.unlink(ROOT, b"gone").unwrap();
    let estale = |e: f2fuse_engine::Error| e.to_errno() == libc::ESTALE;
    assert!(fs.write(gone.ino, 0, b"late").is_err_and(estale));
    assert!(fs.setattr(gone.ino, &SetAttr::default()).is_err_and(estale));
    assert!(fs.fsync(gone.ino).is_err_and(estale));
    fs.create(ROOT, b"after", 0o644, 0, 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck(&img, "writes to a freed inode number");
}
