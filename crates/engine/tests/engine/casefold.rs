//! Casefolded directories (`casefold` feature, `chattr +F`): names hashed and
//! matched by the kernel's utf8-12.1 fold, on images formatted by us and by
//! mkfs.f2fs (+ sload.f2fs). fsck.f2fs recomputes every dentry hash with
//! its own copy of the kernel's tables, so a clean run after our writes
//! (support's `fsck_f2fs` fails on "Mismatch hash_code") proves our hashing.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::RenameFlags;
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::{Fs, OpenOptions, Result};
use f2fuse_layout::inode_flag::{CASEFOLD, INDEX};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::{Path, PathBuf};
use support::*;

const NO_FLAGS: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
    whiteout: false,
};

fn ours(scratch: &Scratch, strict: bool) -> PathBuf {
    let img = scratch.join("ours.img");
    let opts = MkfsOptions {
        features: parse_features("extra_attr,inode_checksum,flexible_inline_xattr,casefold")
            .unwrap(),
        strict_encoding: strict,
        ..MkfsOptions::default()
    };
    format_path(&img, Some(64 << 20), &opts).unwrap();
    img
}

fn writable(img: &Path) -> Fs {
    Fs::open_path(
        img,
        OpenOptions {
            writable: true,
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

fn check_image(img: &Path, when: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck after {when}:\n{report}");
    }
}

#[track_caller]
fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("must fail").to_errno()
}

fn names(fs: &Fs, dir: u32) -> Vec<String> {
    let mut out: Vec<String> = fs
        .read_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    out.sort();
    out
}

fn found(fs: &Fs, dir: u32, name: &str) -> Option<u32> {
    found_bytes(fs, dir, name.as_bytes())
}

fn found_bytes(fs: &Fs, dir: u32, name: &[u8]) -> Option<u32> {
    match fs.lookup(dir, name) {
        Ok(e) => Some(e.ino),
        Err(e) if e.to_errno() == libc::ENOENT => None,
        Err(e) => panic!("lookup {:?}: {e}", String::from_utf8_lossy(name)),
    }
}

/// An empty directory made casefolded with chattr +F.
fn casefolded_dir(fs: &Fs, parent: u32, name: &str) -> u32 {
    let dir = fs.mkdir(parent, name.as_bytes(), 0o755, 0, 0).unwrap();
    let flags = fs.get_flags(&dir);
    let dir = fs.set_flags(dir.ino, flags | CASEFOLD).unwrap();
    assert_eq!(fs.get_flags(&dir) & CASEFOLD, CASEFOLD);
    dir.ino
}

/// Names with case and normalization twins, and names without one.
fn populate_and_check(fs: &Fs, cf: u32) {
    let file = |name: &str| fs.create(cf, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    let strasse = file("Straße.txt");
    let cafe = file("café"); // precomposed U+00E9
    let dotless = file("ı"); // Turkish dotless i: no full case folding
    let emoji = file("😀 Party.txt");
    let ignorable = file("A\u{200B}B");
    let mixed = fs.mkdir(cf, b"Mixed", 0o755, 0, 0).unwrap();
    let invalid = fs.create(cf, b"raw\xff", 0o644, 0, 0).unwrap().ino;
    // Enough entries for dentry blocks at several hash levels.
    for i in 0..300 {
        file(&format!("Entry_{i}"));
    }

    assert_eq!(found(fs, cf, "STRASSE.TXT"), Some(strasse));
    assert_eq!(found(fs, cf, "strasse.txt"), Some(strasse));
    assert_eq!(found(fs, cf, "STRAẞE.TXT"), Some(strasse));
    assert_eq!(found(fs, cf, "cafe\u{301}"), Some(cafe)); // decomposed
    assert_eq!(found(fs, cf, "CAFÉ"), Some(cafe));
    assert_eq!(found(fs, cf, "ı"), Some(dotless));
    assert_eq!(found(fs, cf, "I"), None);
    assert_eq!(found(fs, cf, "i"), None);
    assert_eq!(found(fs, cf, "😀 PARTY.TXT"), Some(emoji));
    assert_eq!(found(fs, cf, "ab"), Some(ignorable));
    assert_eq!(found(fs, cf, "mIXED"), Some(mixed.ino));
    assert_eq!(
        found(fs, cf, "ENTRY_299"),
        Some(fs.lookup(cf, b"Entry_299").unwrap().ino)
    );
    // A name that does not fold is matched byte for byte.
    assert_eq!(found_bytes(fs, cf, b"raw\xff"), Some(invalid));
    assert_eq!(found_bytes(fs, cf, b"RAW\xff"), None);

    // Twins are the same name: EEXIST, whatever the spelling.
    assert_eq!(
        errno(fs.create(cf, "STRASSE.TXT".as_bytes(), 0o644, 0, 0)),
        libc::EEXIST
    );
    assert_eq!(
        errno(fs.mkdir(cf, "mixed".as_bytes(), 0o755, 0, 0)),
        libc::EEXIST
    );
    assert_eq!(
        errno(fs.symlink(cf, "CAFE\u{301}".as_bytes(), b"x", 0, 0)),
        libc::EEXIST
    );
    assert_eq!(errno(fs.link(strasse, cf, b"entry_7")), libc::EEXIST);

    // Subdirectories inherit the flag, files do not.
    assert_eq!(fs.inode(mixed.ino).unwrap().flags, CASEFOLD | INDEX);
    assert_eq!(fs.inode(strasse).unwrap().flags & CASEFOLD, 0);
    let inner = fs.create(mixed.ino, b"Inner.txt", 0o644, 0, 0).unwrap().ino;
    assert_eq!(found(fs, mixed.ino, "INNER.TXT"), Some(inner));

    // Renaming onto a twin of itself changes nothing (the VFS's rule);
    // renaming elsewhere keeps the new spelling.
    fs.rename(
        cf,
        "STRASSE.txt".as_bytes(),
        cf,
        "strasse.TXT".as_bytes(),
        NO_FLAGS,
    )
    .unwrap();
    assert!(names(fs, cf).contains(&"Straße.txt".to_string()));
    fs.rename(cf, b"CAFE\xcc\x81", cf, b"Coffee", NO_FLAGS)
        .unwrap();
    assert_eq!(found(fs, cf, "COFFEE"), Some(cafe));
    assert_eq!(found(fs, cf, "café"), None);
    // Replacing an entry through a twin of its name.
    fs.rename(cf, b"coffee", cf, b"ENTRY_0", NO_FLAGS).unwrap();
    assert_eq!(found(fs, cf, "entry_0"), Some(cafe));
    assert!(names(fs, cf).contains(&"Entry_0".to_string()));
    // Remove through other spellings.
    fs.unlink(cf, b"ENTRY_1").unwrap();
    assert_eq!(found(fs, cf, "Entry_1"), None);
    fs.unlink(mixed.ino, b"inner.TXT").unwrap();
    fs.rmdir(cf, b"MIXED").unwrap();
    assert_eq!(found(fs, cf, "Mixed"), None);
}

fn check_after_reopen(fs: &Fs, cf: u32) {
    let listed = names(fs, cf);
    for name in ["Straße.txt", "Entry_0", "😀 Party.txt", "ı", "A\u{200B}B"] {
        assert!(listed.contains(&name.to_string()), "{name} in {listed:?}");
    }
    assert!(!listed.contains(&"Entry_1".to_string()));
    assert_eq!(listed.len(), 5 + 298 + 1);
    assert!(found(fs, cf, "STRASSE.TXT").is_some());
    assert!(found(fs, cf, "ENTRY_150").is_some());
    assert!(found(fs, cf, "ENTRY_1").is_none());
}

#[test]
fn casefolded_directories_on_our_image() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("casefold-ours");
    let img = ours(&scratch, false);
    let cf;
    {
        let fs = writable(&img);
        cf = casefolded_dir(&fs, ROOT, "cf");
        populate_and_check(&fs, cf);
        // Outside +F directories names stay case-sensitive.
        let plain = fs.mkdir(ROOT, b"nocf", 0o755, 0, 0).unwrap().ino;
        fs.mkdir(plain, b"Mixed", 0o755, 0, 0).unwrap();
        fs.mkdir(plain, b"mixed", 0o755, 0, 0).unwrap();
        assert_eq!(found(&fs, plain, "MIXED"), None);
        fs.unmount().unwrap();
    }
    check_image(&img, "casefolded names");
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    check_after_reopen(&fs, cf);
}

#[test]
fn casefold_flag_rules() {
    let scratch = Scratch::new("casefold-flags");
    let img = ours(&scratch, false);
    let fs = writable(&img);
    let dir = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap();
    let file = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
    let flags = fs.get_flags(&dir);
    // Only on an empty directory, set or cleared; never on files.
    assert_eq!(
        errno(fs.set_flags(dir.ino, flags | CASEFOLD)),
        libc::ENOTEMPTY
    );
    assert_eq!(errno(fs.set_flags(file.ino, CASEFOLD)), libc::EOPNOTSUPP);
    fs.unlink(dir.ino, b"f").unwrap();
    fs.set_flags(dir.ino, flags | CASEFOLD).unwrap();
    fs.create(dir.ino, b"F", 0o644, 0, 0).unwrap();
    assert_eq!(errno(fs.set_flags(dir.ino, flags)), libc::ENOTEMPTY);
    fs.unlink(dir.ino, b"f").unwrap();
    let cleared = fs.set_flags(dir.ino, flags).unwrap();
    assert_eq!(cleared.flags & CASEFOLD, 0);
    fs.create(dir.ino, b"F", 0o644, 0, 0).unwrap();
    assert_eq!(found(&fs, dir.ino, "f"), None);
    fs.unmount().unwrap();
}

#[test]
fn strict_encoding_refuses_invalid_utf8() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("casefold-strict");
    let img = ours(&scratch, true);
    {
        let fs = writable(&img);
        let cf = casefolded_dir(&fs, ROOT, "cf");
        assert_eq!(errno(fs.create(cf, b"bad\xff", 0o644, 0, 0)), libc::EINVAL);
        assert_eq!(errno(fs.lookup(cf, b"bad\xff")), libc::EINVAL);
        fs.create(cf, "Ünïcode".as_bytes(), 0o644, 0, 0).unwrap();
        assert!(found(&fs, cf, "ÜNÏCODE").is_some());
        // Other directories take any bytes.
        fs.create(ROOT, b"bad\xff", 0o644, 0, 0).unwrap();
        fs.unmount().unwrap();
    }
    check_image(&img, "strict casefolding");
}

/// mkfs.f2fs -C utf8 and sload.f2fs: the tools' image opens, its plain
/// directories stay case-sensitive, and a casefolded directory made here
/// passes fsck.f2fs, in strict mode too.
#[test]
fn casefolded_directories_on_mkfs_f2fs_images() {
    if !require_f2fs_tools() {
        return;
    }
    for encoding in ["utf8", "utf8:strict"] {
        let scratch = Scratch::new("casefold-tools");
        let img = scratch.join("tools.img");
        let src = scratch.join("src");
        std::fs::create_dir_all(src.join("Data")).unwrap();
        std::fs::write(src.join("Data/Report.TXT"), b"report").unwrap();
        std::fs::write(src.join("Data/report.txt"), b"other").unwrap();
        mkfs_f2fs(
            &img,
            64 << 20,
            &["-O", "extra_attr,casefold", "-C", encoding],
        );
        sload_f2fs(&img, &src);
        check_image(&img, "mkfs.f2fs + sload.f2fs");
        let cf;
        {
            let fs = writable(&img);
            assert_eq!(
                fs.superblock().s_encoding_flags.get(),
                (encoding == "utf8:strict") as u16
            );
            let data = fs.lookup(ROOT, b"Data").unwrap().ino;
            assert_eq!(names(&fs, data), ["Report.TXT", "report.txt"]);
            assert_eq!(found(&fs, data, "REPORT.TXT"), None);
            cf = casefolded_dir(&fs, ROOT, "cf");
            populate_and_check_portable(&fs, cf, encoding == "utf8:strict");
            fs.unmount().unwrap();
        }
        check_image(&img, &format!("writes to a mkfs.f2fs -C {encoding} image"));
    }
}

/// `populate_and_check` without the invalid name in strict mode.
fn populate_and_check_portable(fs: &Fs, cf: u32, strict: bool) {
    if strict {
        assert_eq!(errno(fs.create(cf, b"raw\xff", 0o644, 0, 0)), libc::EINVAL);
        for name in ["Straße.txt", "café", "Mixed", "ı"] {
            fs.create(cf, name.as_bytes(), 0o644, 0, 0).unwrap();
        }
        assert!(found(fs, cf, "STRASSE.TXT").is_some());
        assert!(found(fs, cf, "CAFE\u{301}").is_some());
        assert_eq!(found(fs, cf, "I"), None);
    } else {
        populate_and_check(fs, cf);
    }
}
