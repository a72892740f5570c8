//! Damaged images: each case builds a fresh image with mkfs.f2fs and
//! sload.f2fs, damages a copy at offsets found by parsing it, and checks
//! that the engine returns a typed `Error::Corrupt` naming the structure
//! (never a panic or a hang), that the `f2fuse` binary fails with one
//! "f2fuse: " line, and (where it checks that structure) that
//! `fsck.f2fs --dry-run` also calls the image damaged.
//!
//! The "mini fuzz" tests at the end feed pseudo-random mutations of valid
//! structures to every decoder through the same harness the cargo-fuzz
//! targets in `fuzz/` use.

mod corrupt;
/// The cargo-fuzz harness, shared with `fuzz/` (see the mini-fuzz tests).
/// Included by path: the fuzz crate is its own workspace and depends on
/// libfuzzer-sys (nightly flags, a C++ build), so it cannot be a
/// dev-dependency of this one.
#[path = "../../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod fuzz_harness;

use corrupt::*;
use f2fuse_engine::internals::device::IoKind;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{ErrorKind, FileKind};
use f2fuse_layout::checkpoint::{seal_checkpoint_block, Checkpoint};
use f2fuse_layout::node::{footer_of, inode_of, NodeFooter};
use f2fuse_layout::segment::{sit_block_addr, NatEntry, SitEntry};
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::*;
use fuzz_harness::{seed_images, seed_inputs, TARGETS};
use std::mem::offset_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Byte offset of field `$field` of the inode in an inode block.
macro_rules! inode_field {
    ($field:ident) => {
        offset_of!(f2fuse_layout::node::Inode, $field)
    };
}

/// The CLI invocation of a case; "IMG" is replaced by the image path.
fn cli(img: &Path, args: &[&str]) -> CliRun {
    f2fuse(args.iter().map(|a| {
        if *a == "IMG" {
            img.as_os_str()
        } else {
            std::ffi::OsStr::new(a)
        }
    }))
}

/// The common tail of a case whose damage must be reported: the engine
/// check (under the time limit), the CLI run, the fsck cross-check.
fn expect_damage(
    what: &'static str,
    img: &Path,
    engine: impl FnOnce(PathBuf) -> String + Send + 'static,
    cli_args: &[&str],
    fsck: Fsck,
) {
    let path = img.to_path_buf();
    let message = within_limit(what, move || engine(path));
    eprintln!("{what}: engine: {message}");
    let run = cli(img, cli_args);
    let line = assert_cli_fails(&run, what);
    assert!(
        line.contains("corrupt"),
        "{what}: CLI message does not say corrupt: {line}"
    );
    eprintln!("{what}: cli: {line}");
    check_fsck(img, fsck, what);
}

fn sb_offset(copy: u64, field: usize) -> u64 {
    copy * F2FS_BLKSIZE as u64 + F2FS_SUPER_OFFSET as u64 + field as u64
}

// ---------------------------------------------------------------- superblock

#[test]
fn superblock_magic_bad_in_copy1_only() {
    if !have_tools() {
        return;
    }
    let base = build_base("sb1", &[]);
    let img = base.copy("damaged");
    patch(&img, sb_offset(0, offset_of!(SuperBlock, magic)), &[0; 4]);
    let path = img.clone();
    within_limit("sb copy #1", move || {
        let fs = open(&path).expect("opens from copy #2");
        let loaded = fs.loaded_superblock();
        assert_eq!(loaded.copy, 1, "copy #2 must be in use");
        let other = loaded.other_copy_error.as_ref().expect("copy #1 reported");
        assert_eq!(other.structure, "superblock");
        assert!(other.to_string().contains("magic"), "{other}");
        assert!(fs.read_dir(F2FS_ROOT_INO).unwrap().len() > 2);
    });
    let run = cli(&img, &["info", "IMG"]);
    assert_cli_ok(&run, "info with copy #1 damaged");
    assert!(
        run.stdout.contains("copy #2 in use")
            && run.stdout.contains("INVALID")
            && run.stdout.contains("magic"),
        "info does not report the invalid copy:\n{}",
        run.stdout
    );
    assert_cli_ok(&cli(&img, &["ls", "-l", "IMG", "/big"]), "ls from copy #2");
    // fsck.f2fs, like the kernel, goes on with copy #2 (exit 0) but says so.
    check_fsck(
        &img,
        Fsck::Reports("Can't find a valid F2FS superblock at 0x0"),
        "sb copy #1 magic",
    );
}

#[test]
fn superblock_magic_bad_in_both_copies() {
    if !have_tools() {
        return;
    }
    let base = build_base("sb2", &[]);
    let img = base.copy("damaged");
    for copy in 0..2 {
        patch(
            &img,
            sb_offset(copy, offset_of!(SuperBlock, magic)),
            &0xDEAD_BEEFu32.to_le_bytes(),
        );
    }
    expect_damage(
        "sb magic both",
        &img,
        |p| expect_corrupt(open(&p), "superblock", &["no valid copy", "magic"], "open"),
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn superblock_crc_bad_in_both_copies() {
    if !have_tools() {
        return;
    }
    let base = build_base("sbcrc", &["-O", "sb_checksum"]);
    assert!(base.open().superblock().has_feature(feature::SB_CHKSUM));
    let img = base.copy("damaged");
    // The volume label is covered by the CRC and checked by nothing else.
    for copy in 0..2 {
        patch(
            &img,
            sb_offset(copy, offset_of!(SuperBlock, volume_name)),
            b"X\0",
        );
    }
    expect_damage(
        "sb crc both",
        &img,
        |p| expect_corrupt(open(&p), "superblock", &["CRC mismatch"], "open"),
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn truncated_image() {
    if !have_tools() {
        return;
    }
    let base = build_base("trunc", &[]);
    let img = base.copy("damaged");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(IMAGE_BYTES / 2)
        .unwrap();
    expect_damage(
        "truncated",
        &img,
        |p| expect_corrupt(open(&p), "superblock", &["truncated"], "open"),
        &["ls", "-l", "IMG", "/"],
        Fsck::Ignores(
            "fsck.f2fs 1.15 does not compare block_count with the device size; \
             every block in use lies in the first half",
        ),
    );
}

// ---------------------------------------------------------------- checkpoint

/// Block address of checkpoint pack `pack` (0 or 1).
fn pack_addr(base: &BaseImage, pack: u32) -> u64 {
    let fs = base.open();
    fs.superblock().cp_blkaddr.get() as u64 + ((pack as u64) << F2FS_LOG_BLOCKS_PER_SEG)
}

fn flip_cp_byte(img: &Path, blkaddr: u64) {
    edit_block(img, blkaddr, |b| {
        b[offset_of!(Checkpoint, user_block_count)] ^= 0x40
    });
}

#[test]
fn checkpoint_crc_bad_in_current_pack_falls_back() {
    if !have_tools() {
        return;
    }
    let base = build_base("cp1", &[]);
    let current = base.open().checkpoint_state().pack;
    let img = base.copy("damaged");
    flip_cp_byte(&img, pack_addr(&base, current));
    let path = img.clone();
    within_limit("cp current pack", move || {
        // mkfs.f2fs 1.15 writes the same checkpoint to both packs and
        // sload.f2fs updates NAT, SIT and nodes in place, so the older pack
        // is still a consistent view of the loaded tree: the engine must
        // fall back to it, as the kernel does.
        let fs = open(&path).expect("falls back to the other pack");
        assert_eq!(fs.checkpoint_state().pack, 1 - current);
        let (inode, _) = inode_at(&fs, "/medium.bin");
        let mut buf = vec![0u8; 100];
        assert_eq!(fs.read(&inode, 0, &mut buf).unwrap(), 100);
    });
    let run = cli(&img, &["info", "IMG"]);
    assert_cli_ok(&run, "info after falling back");
    assert!(
        run.stdout
            .contains(&format!("Checkpoint (pack #{})", 2 - current)),
        "{}",
        run.stdout
    );
    check_fsck(&img, Fsck::Flags, "cp crc current pack");
}

#[test]
fn checkpoint_crc_bad_in_both_packs() {
    if !have_tools() {
        return;
    }
    let base = build_base("cp2", &[]);
    let img = base.copy("damaged");
    for pack in 0..2 {
        flip_cp_byte(&img, pack_addr(&base, pack));
    }
    expect_damage(
        "cp crc both",
        &img,
        |p| expect_corrupt(open(&p), "checkpoint", &["no valid pack", "CRC"], "open"),
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

/// Sets cp_pack_total_block_count of both packs (resealing the CRC), and
/// with `copy_tail` also writes the header where the new count puts the
/// trailing copy, so that only the count itself is wrong.
fn set_pack_total(base: &BaseImage, img: &Path, total: u32, copy_tail: bool) {
    for pack in 0..2 {
        let start = pack_addr(base, pack);
        let mut block = read_block(img, start);
        let at = offset_of!(Checkpoint, cp_pack_total_block_count);
        block[at..at + 4].copy_from_slice(&total.to_le_bytes());
        seal_checkpoint_block(&mut block);
        write_block(img, start, &block);
        if copy_tail {
            write_block(img, start + total as u64 - 1, &block);
        }
    }
}

#[test]
fn checkpoint_pack_total_out_of_range() {
    if !have_tools() {
        return;
    }
    let base = build_base("cptotal", &[]);
    let img = base.copy("damaged");
    set_pack_total(&base, &img, 1000, false);
    expect_damage(
        "cp_pack_total_block_count 1000",
        &img,
        |p| {
            expect_corrupt(
                open(&p),
                "checkpoint",
                &["cp_pack_total_block_count 1000"],
                "open",
            )
        },
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn checkpoint_pack_total_too_small_for_summaries() {
    if !have_tools() {
        return;
    }
    let base = build_base("cpsmall", &[]);
    let img = base.copy("damaged");
    // In range (3..=512) and with a valid trailing copy, but the pack has
    // no room for its summary blocks.
    set_pack_total(&base, &img, 3, true);
    expect_damage(
        "cp_pack_total_block_count 3",
        &img,
        |p| expect_corrupt(open(&p), "checkpoint", &["summaries"], "open"),
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

// ---------------------------------------------------------------- NAT and SIT

#[test]
fn nat_entry_outside_main_area() {
    if !have_tools() {
        return;
    }
    let base = build_base("nat", &[]);
    let (ino, offset, bad) = {
        let fs = base.open();
        let (inode, _) = inode_at(&fs, "/medium.bin");
        let bad = fs.superblock().main_end_blkaddr() as u32 + 100;
        (
            inode.ino,
            nat_entry_offset(&fs, inode.ino),
            bad.to_le_bytes(),
        )
    };
    let img = base.copy("damaged");
    patch(&img, offset + offset_of!(NatEntry, block_addr) as u64, &bad);
    expect_damage(
        "NAT outside main",
        &img,
        move |p| {
            let fs = open(&p).unwrap();
            let msg = expect_corrupt(
                fs.resolve("/medium.bin"),
                "node",
                &["outside the main area"],
                "resolve",
            );
            assert!(msg.contains(&format!("nid {ino}")), "{msg}");
            msg
        },
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn sit_vblocks_disagree_with_bitmap() {
    if !have_tools() {
        return;
    }
    let base = build_base("sit", &[]);
    let (offset, vblocks) = {
        let fs = base.open();
        let sb = fs.superblock();
        let (_, blk) = inode_at(&fs, "/medium.bin");
        let segno = ((blk - sb.main_blkaddr.get() as u64) >> F2FS_LOG_BLOCKS_PER_SEG) as u32;
        let cp = fs.checkpoint_state();
        assert!(
            !cp.sit_journal
                .valid_entries()
                .unwrap()
                .iter()
                .any(|e| e.segno.get() == segno),
            "test assumes segment {segno} is not in the SIT journal"
        );
        let index = segno / SIT_ENTRY_PER_BLOCK;
        let addr = sit_block_addr(
            sb.sit_blkaddr.get(),
            sb.sit_blocks_per_copy(),
            index,
            cp.sit_copy(index),
        );
        let entry = fs.sit().unwrap().entries[segno as usize];
        assert!(entry.valid_blocks() > 0 && entry.valid_blocks() < BLOCKS_PER_SEG);
        let offset = addr * F2FS_BLKSIZE as u64
            + ((segno % SIT_ENTRY_PER_BLOCK) as usize * SIT_ENTRY_SIZE
                + offset_of!(SitEntry, vblocks)) as u64;
        (offset, entry.vblocks.get() + 1)
    };
    let img = base.copy("damaged");
    patch(&img, offset, &vblocks.to_le_bytes());
    expect_damage(
        "SIT vblocks",
        &img,
        |p| {
            let fs = open(&p).expect("the SIT is not needed to open");
            expect_corrupt(fs.sit().map(|_| ()), "SIT entry", &["vblocks"], "sit()")
        },
        &["info", "IMG"],
        Fsck::Flags,
    );
}

// ---------------------------------------------------------------- nodes

#[test]
fn node_footer_nid_mismatch() {
    if !have_tools() {
        return;
    }
    let base = build_base("footer", &[]);
    let (ino, blk) = {
        let fs = base.open();
        let (inode, blk) = inode_at(&fs, "/medium.bin");
        (inode.ino, blk)
    };
    let img = base.copy("damaged");
    edit_block(&img, blk, |b| {
        let at = NODE_PAYLOAD_SIZE + offset_of!(NodeFooter, nid);
        b[at..at + 4].copy_from_slice(&(ino + 1000).to_le_bytes());
    });
    expect_damage(
        "footer nid",
        &img,
        |p| {
            let fs = open(&p).unwrap();
            expect_corrupt(fs.resolve("/medium.bin"), "node", &["footer"], "resolve")
        },
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn indirect_node_footer_offset_wrong() {
    if !have_tools() {
        return;
    }
    let base = build_base("indirect", &[]);
    let (blk, size) = {
        let fs = base.open();
        let (inode, _) = inode_at(&fs, "/huge.bin");
        // i_nid[2] is the first indirect node (node offset 3).
        let nid = inode.inode().i_nid[2].get();
        assert_ne!(nid, 0, "huge.bin must have an indirect node");
        let blk = node_blkaddr(&fs, nid);
        let footer = footer_of(&fs.device().read_block(IoKind::Node, blk).unwrap()).to_owned();
        assert_eq!(footer.ofs(), 3);
        (blk, inode.size)
    };
    let img = base.copy("damaged");
    edit_block(&img, blk, |b| {
        let at = NODE_PAYLOAD_SIZE + offset_of!(NodeFooter, flag);
        let flag = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let low = flag & ((1 << node_flag::OFFSET_BIT_SHIFT) - 1);
        let wrong = (5 << node_flag::OFFSET_BIT_SHIFT) | low;
        b[at..at + 4].copy_from_slice(&wrong.to_le_bytes());
    });
    expect_damage(
        "indirect footer offset",
        &img,
        move |p| {
            let fs = open(&p).unwrap();
            let (inode, _) = inode_at(&fs, "/huge.bin");
            let mut buf = vec![0u8; 4096];
            expect_corrupt(
                fs.read(&inode, size - 4096, &mut buf),
                "node",
                &["footer node offset 5", "expected 3"],
                "read",
            )
        },
        &["cat", "IMG", "/huge.bin"],
        Fsck::Ignores(
            "fsck.f2fs 1.15 uses a node's footer offset only to tell inodes from other nodes",
        ),
    );
}

// ---------------------------------------------------------------- inodes

const I_SIZE_UNCHECKED: &str = "fsck.f2fs 1.15 does not bound i_size by the largest file";

/// Patches one field of the inode block of `path` and expects `words`.
fn inode_field_case(
    what: &'static str,
    mkfs_args: &[&str],
    path: &'static str,
    (field, value): (usize, &[u8]),
    words: &'static [&'static str],
    cli_args: &[&str],
    fsck: Fsck,
) {
    let base = build_base(what, mkfs_args);
    let blk = inode_at(&base.open(), path).1;
    let img = base.copy("damaged");
    patch(&img, blk * F2FS_BLKSIZE as u64 + field as u64, value);
    expect_damage(
        what,
        &img,
        move |p| {
            let fs = open(&p).unwrap();
            expect_corrupt(fs.resolve(path), "inode", words, "resolve")
        },
        cli_args,
        fsck,
    );
}

#[test]
fn huge_i_size_on_file() {
    if !have_tools() {
        return;
    }
    inode_field_case(
        "file i_size 1<<62",
        &[],
        "/medium.bin",
        (inode_field!(i_size), &(1u64 << 62).to_le_bytes()),
        &["i_size", "largest possible file"],
        &["ls", "-l", "IMG", "/"],
        Fsck::Ignores(I_SIZE_UNCHECKED),
    );
}

#[test]
fn huge_i_size_on_directory() {
    if !have_tools() {
        return;
    }
    inode_field_case(
        "dir i_size 1<<62",
        &[],
        "/big",
        (inode_field!(i_size), &(1u64 << 62).to_le_bytes()),
        &["i_size", "largest possible file"],
        &["ls", "IMG", "/big"],
        Fsck::Ignores(I_SIZE_UNCHECKED),
    );
}

#[test]
fn i_blocks_zero() {
    if !have_tools() {
        return;
    }
    inode_field_case(
        "i_blocks 0",
        &[],
        "/medium.bin",
        (inode_field!(i_blocks), &0u64.to_le_bytes()),
        &["i_blocks is 0"],
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

#[test]
fn inode_checksum_mismatch() {
    if !have_tools() {
        return;
    }
    inode_field_case(
        "inode checksum",
        &["-O", "extra_attr,inode_checksum"],
        "/medium.bin",
        (inode_field!(i_mtime), &[0x5A]),
        &["checksum mismatch"],
        &["ls", "-l", "IMG", "/"],
        Fsck::Flags,
    );
}

/// A directory whose i_size is huge but below the format's maximum, with
/// the deepest hash table: listing it must skip the unallocated node
/// ranges instead of probing ~2^28 block indexes one by one.
#[test]
fn sparse_huge_directory_lists_quickly() {
    if !have_tools() {
        return;
    }
    let base = build_base("bigdir", &[]);
    let (blk, want) = {
        let fs = base.open();
        let (dir, blk) = inode_at(&fs, "/big");
        (blk, fs.read_dir(dir.ino).unwrap())
    };
    assert_eq!(want.len(), BIG_DIR_ENTRIES + 2);
    let img = base.copy("damaged");
    edit_block(&img, blk, |b| {
        let at = inode_field!(i_size);
        b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let at = inode_field!(i_current_depth);
        b[at..at + 4].copy_from_slice(&MAX_DIR_HASH_DEPTH.to_le_bytes());
    });
    let path = img.clone();
    within_limit("sparse huge dir", move || {
        let fs = open(&path).unwrap();
        let (dir, _) = inode_at(&fs, "/big");
        assert_eq!(fs.read_dir(dir.ino).unwrap(), want);
        // A lookup walks all 63 levels for a missing name.
        assert!(matches!(
            fs.lookup(dir.ino, b"missing"),
            Err(e) if e.kind() == ErrorKind::NotFound
        ));
    });
    assert_cli_ok(&cli(&img, &["ls", "IMG", "/big"]), "ls sparse huge dir");
    check_fsck(
        &img,
        Fsck::Ignores("i_size/i_current_depth of a directory are not cross-checked"),
        "sparse huge dir",
    );
}

/// Extents of a file whose i_size is huge but legal: no per-block loop.
#[test]
fn sparse_huge_file_extents_quickly() {
    if !have_tools() {
        return;
    }
    let base = build_base("bigfile", &[]);
    let (blk, want) = {
        let fs = base.open();
        let (inode, blk) = inode_at(&fs, "/large.bin");
        (blk, fs.extents(&inode).unwrap())
    };
    let img = base.copy("damaged");
    patch(
        &img,
        blk * F2FS_BLKSIZE as u64 + inode_field!(i_size) as u64,
        &(1u64 << 41).to_le_bytes(),
    );
    let path = img.clone();
    within_limit("sparse huge file", move || {
        let fs = open(&path).unwrap();
        let (inode, _) = inode_at(&fs, "/large.bin");
        assert_eq!(fs.extents(&inode).unwrap(), want);
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            fs.read(&inode, (1u64 << 41) - 4096, &mut buf).unwrap(),
            4096
        );
        assert!(buf.iter().all(|&b| b == 0));
    });
    check_fsck(
        &img,
        Fsck::Ignores("a sparse tail past the last block is legal"),
        "sparse huge file",
    );
}

// ---------------------------------------------------------------- dentries

#[test]
fn dentry_name_len_runs_past_block() {
    if !have_tools() {
        return;
    }
    let base = build_base("namelen", &[]);
    let (blk, ino) = {
        let fs = base.open();
        let (dir, _) = inode_at(&fs, "/big");
        assert!(!dir.has_inline(inline_flag::INLINE_DENTRY));
        let first = fs.extents(&dir).unwrap()[0].1 as u64;
        (first, dir.ino)
    };
    let img = base.copy("damaged");
    edit_block(&img, blk, |b| {
        // Mark the last slot used and give it a 100-byte (13-slot) name.
        let slot = NR_DENTRY_IN_BLOCK - 1;
        b[slot / 8] |= 1 << (slot % 8);
        let geo = f2fuse_layout::dentry::DentryGeometry::BLOCK;
        let at = geo.dentry_offset + slot * SIZE_OF_DIR_ENTRY;
        b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&F2FS_ROOT_INO.to_le_bytes());
        b[at + 8..at + 10].copy_from_slice(&100u16.to_le_bytes());
        b[at + 10] = file_type::REG_FILE;
    });
    expect_damage(
        "dentry name_len",
        &img,
        move |p| {
            let fs = open(&p).unwrap();
            expect_corrupt(
                fs.read_dir(ino),
                "dentry",
                &["slot 213", "name of 100 bytes runs past"],
                "read_dir",
            )
        },
        &["ls", "IMG", "/big"],
        Fsck::Flags,
    );
}

#[test]
fn dentry_name_contains_slash() {
    if !have_tools() {
        return;
    }
    let base = build_base("slash", &[]);
    let name = b"entry-0007-with-a-rather-long-file-name.txt";
    let (loc, ino) = {
        let fs = base.open();
        (
            find_dentry(&fs, "/big", name),
            fs.resolve("/big").unwrap().ino,
        )
    };
    let img = base.copy("damaged");
    edit_block(&img, loc.blkaddr, |b| b[loc.name_offset() + 5] = b'/');
    expect_damage(
        "dentry slash",
        &img,
        move |p| {
            let fs = open(&p).unwrap();
            expect_corrupt(fs.read_dir(ino), "dentry", &["'/'"], "read_dir")
        },
        &["ls", "IMG", "/big"],
        // fsck.f2fs does not check names for '/', but the hash no longer matches.
        Fsck::Reports("Mismatch hash_code"),
    );
}

#[test]
fn directory_cycle_fails_extract() {
    if !have_tools() {
        return;
    }
    let base = build_base("cycle", &[]);
    let (loc, sub_ino) = {
        let fs = base.open();
        (
            find_dentry(&fs, "/sub/nested", b"deeper"),
            fs.resolve("/sub").unwrap().ino,
        )
    };
    let img = base.copy("damaged");
    // /sub/nested/deeper now names /sub: a loop only a tree walk can see.
    edit_block(&img, loc.blkaddr, |b| {
        let at = loc.dentry_offset() + 4;
        b[at..at + 4].copy_from_slice(&sub_ino.to_le_bytes());
    });
    let path = img.clone();
    within_limit("cycle", move || {
        let fs = open(&path).unwrap();
        let looped = fs.resolve("/sub/nested/deeper/nested/deeper").unwrap();
        assert_eq!(looped.ino, sub_ino);
        assert_eq!(looped.kind, FileKind::Directory);
    });
    let dest = base.scratch.join("extract");
    let run = cli(&img, &["extract", "--quiet", "IMG", dest.to_str().unwrap()]);
    let line = assert_cli_fails(&run, "extract of a cycle");
    assert!(line.contains("corrupt"), "{line}");
    eprintln!("cycle: cli: {line}");
    check_fsck(&img, Fsck::Flags, "dir cycle");
}

// ---------------------------------------------------------------- xattrs

#[test]
fn xattr_entry_runs_past_buffer() {
    if !have_tools() {
        return;
    }
    let base = build_base("xattr", &[]);
    let (blk, range) = {
        let fs = base.open();
        let (inode, blk) = inode_at(&fs, "/inline.txt");
        let range = inode.layout.inline_xattr_range();
        assert!(range.len() >= 40, "needs an inline xattr area");
        assert_eq!(inode.xattr_nid, 0);
        (blk, range)
    };
    let img = base.copy("damaged");
    edit_block(&img, blk, |b| {
        let x = &mut b[range];
        x.fill(0);
        x[0..4].copy_from_slice(&F2FS_XATTR_MAGIC.to_le_bytes());
        x[4..8].copy_from_slice(&1u32.to_le_bytes());
        // One user.test entry claiming a 4096-byte value.
        x[24] = xattr_index::USER;
        x[25] = 4;
        x[26..28].copy_from_slice(&4096u16.to_le_bytes());
        x[28..32].copy_from_slice(b"test");
    });
    expect_damage(
        "xattr size",
        &img,
        |p| {
            let fs = open(&p).unwrap();
            let (inode, _) = inode_at(&fs, "/inline.txt");
            expect_corrupt(fs.xattrs(&inode), "xattr", &["runs past"], "xattrs")
        },
        &["stat", "IMG", "/inline.txt"],
        Fsck::Ignores("fsck.f2fs 1.15 does not parse xattr entries"),
    );
}

/// The base image has the shapes the cases rely on, and fsck.f2fs accepts it.
#[test]
fn base_image_has_the_expected_shapes() {
    if !have_tools() {
        return;
    }
    let base = build_base("shapes", &[]);
    let fs = base.open();
    let (inline, blk) = inode_at(&fs, "/inline.txt");
    assert!(fs.has_inline_data(&inline));
    let raw = fs.device().read_block(IoKind::Node, blk).unwrap();
    assert_eq!(inode_of(&raw).i_size.get(), inline.size);
    let (large, _) = inode_at(&fs, "/large.bin");
    assert_ne!(
        large.inode().i_nid[0].get(),
        0,
        "large.bin has a direct node"
    );
    let (big, _) = inode_at(&fs, "/big");
    assert!(big.current_depth >= 2, "entries on several hash levels");
    assert_eq!(fs.read_dir(big.ino).unwrap().len(), BIG_DIR_ENTRIES + 2);
    assert_eq!(
        fs.read_link(&fs.resolve("/link").unwrap()).unwrap(),
        b"inline.txt"
    );
    assert_cli_ok(&cli(&base.img, &["ls", "-l", "IMG", "/"]), "ls base");
    let run = corrupt::fsck_dry_run(&base.img);
    assert_eq!(
        run.code,
        Some(0),
        "fsck.f2fs on the base image:\n{}",
        run.stdout
    );
}

// ---------------------------------------------------------------- mini fuzz
//
// Deterministic pseudo-random mutations of valid inputs, fed to the same
// entry points the cargo-fuzz targets in fuzz/ use (that file is included
// here as a module), so stable `cargo test` covers every decoder too.

const INTERESTING_32: &[u32] = &[
    0,
    1,
    2,
    3,
    7,
    0xFF,
    0x100,
    0x1FF,
    0x200,
    0xFFF,
    0x1000,
    0xFFFF,
    0x1_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFE,
    0xFFFF_FFFF,
];

/// A random position, biased to the start of the input where most fields are.
fn position(rng: &mut Rng, len: usize) -> usize {
    match rng.below(4) {
        0 | 1 => rng.below(len.min(256)),
        2 => len.saturating_sub(1 + rng.below(64.min(len))),
        _ => rng.below(len),
    }
}

/// 1 to 8 random edits of `seed`: bit flips, random or boundary bytes and
/// words, small increments, copies within the input, truncation.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        if v.len() < 4 {
            v.resize(4, 0);
        }
        let pos = position(rng, v.len() - 3);
        let word = |v: &Vec<u8>| u32::from_le_bytes(v[pos..pos + 4].try_into().unwrap());
        match rng.below(9) {
            0 => v[pos] ^= 1 << rng.below(8),
            1 => v[pos] = rng.next_u64() as u8,
            2 => v[pos] = [0, 1, 0x7F, 0x80, 0xFF][rng.below(5)],
            3 => {
                let x = INTERESTING_32[rng.below(INTERESTING_32.len())];
                v[pos..pos + 4].copy_from_slice(&x.to_le_bytes());
            }
            4 => {
                let x = INTERESTING_32[rng.below(INTERESTING_32.len())] as u16;
                v[pos..pos + 2].copy_from_slice(&x.to_le_bytes());
            }
            5 => {
                let delta = rng.below(33) as u32;
                let x = if rng.below(2) == 0 {
                    word(&v).wrapping_add(delta)
                } else {
                    word(&v).wrapping_sub(delta)
                };
                v[pos..pos + 4].copy_from_slice(&x.to_le_bytes());
            }
            6 => {
                let from = rng.below(v.len());
                let n = (1 + rng.below(32)).min(v.len() - from).min(v.len() - pos);
                v.copy_within(from..from + n, pos);
            }
            7 if rng.below(8) == 0 => v.truncate(pos.max(1)),
            _ => {
                let x = rng.next_u64() as u32;
                v[pos..pos + 4].copy_from_slice(&x.to_le_bytes());
            }
        }
    }
    v
}

/// An input of the image target: a seed and 1 to 6 patches of 1 to 8
/// bytes, mostly in the first bytes or the node footer of a block.
fn image_input(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        let offset = match rng.below(4) {
            0 => 1024 + rng.below(256),
            1 => 4096 - 1 - rng.below(64),
            2 => rng.below(256),
            _ => rng.below(4096),
        } as u16;
        let len = 1 + rng.below(8);
        v.push(rng.next_u64() as u8);
        v.extend_from_slice(&offset.to_le_bytes());
        v.push(len as u8);
        let bytes: Vec<u8> = match rng.below(3) {
            0 => rng.bytes(len),
            1 => INTERESTING_32[rng.below(INTERESTING_32.len())]
                .to_le_bytes()
                .iter()
                .copied()
                .cycle()
                .take(len)
                .collect(),
            _ => vec![[0u8, 0xFF][rng.below(2)]; len],
        };
        v.extend_from_slice(&bytes);
    }
    v
}

/// Runs `input` through `target`; on a panic, saves the input under the
/// temp dir and fails naming it (copy it to fuzz/regressions/TARGET/).
fn run_target(target: &str, input: &[u8], what: &str) {
    let f = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("known target")
        .1;
    if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
        let path = std::env::temp_dir().join(format!("f2fuse-crash-{target}-{what}"));
        std::fs::write(&path, input).unwrap();
        panic!(
            "{target}: {what} panicked; input saved to {}",
            path.display()
        );
    }
}

/// Every seed of `target`, then `iterations` mutations of them. The whole
/// loop gets 60 s (a debug build needs a few); a hang in one input fails it.
fn mini_fuzz(target: &'static str, iterations: usize) {
    within(std::time::Duration::from_secs(60), target, move || {
        let seeds: Vec<Vec<u8>> = seed_inputs()
            .into_iter()
            .filter(|(t, _)| *t == target)
            .map(|(_, input)| input)
            .collect();
        assert!(!seeds.is_empty(), "no seeds for {target}");
        for (i, seed) in seeds.iter().enumerate() {
            run_target(target, seed, &format!("seed-{i}"));
        }
        let mut rng = Rng::new(target.len() as u64 * 7919 + target.as_bytes()[0] as u64);
        for i in 0..iterations {
            let seed = &seeds[rng.below(seeds.len())];
            let input = if target == "image" {
                image_input(&mut rng, seed)
            } else {
                mutate(&mut rng, seed)
            };
            run_target(target, &input, &format!("iteration-{i}"));
        }
    });
}

#[test]
fn mini_fuzz_superblock() {
    mini_fuzz("superblock", 6000);
}

#[test]
fn mini_fuzz_checkpoint() {
    mini_fuzz("checkpoint", 6000);
}

#[test]
fn mini_fuzz_segment() {
    mini_fuzz("segment", 10000);
}

#[test]
fn mini_fuzz_inode() {
    mini_fuzz("inode", 20000);
}

#[test]
fn mini_fuzz_dentry() {
    mini_fuzz("dentry", 20000);
}

#[test]
fn mini_fuzz_xattr() {
    mini_fuzz("xattr", 20000);
}

#[test]
fn mini_fuzz_cluster() {
    mini_fuzz("cluster", 20000);
}

#[test]
fn mini_fuzz_quota() {
    mini_fuzz("quota", 5000);
}

#[test]
fn mini_fuzz_image() {
    mini_fuzz("image", 1000);
}

/// The seed images open and hold what the seeds promise.
#[test]
fn fuzz_seed_images_open() {
    for seed in seed_images() {
        let fs = f2fuse_engine::Fs::open(Box::new(seed.device()))
            .unwrap_or_else(|e| panic!("seed {}: {e}", seed.name));
        let huge = fs.resolve("/huge.bin").unwrap();
        assert_ne!(
            huge.inode().i_nid[2].get(),
            0,
            "{}: indirect node",
            seed.name
        );
        let dir = fs.resolve("/dir").unwrap();
        assert!(!dir.has_inline(inline_flag::INLINE_DENTRY));
        assert_eq!(fs.read_dir(dir.ino).unwrap().len(), 32);
    }
}

/// Every input saved under fuzz/regressions/TARGET/ (crashes cargo-fuzz
/// found, after the fix) still runs cleanly.
#[test]
fn fuzz_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut ran = 0;
    for (target, _) in TARGETS {
        let Ok(dir) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for entry in dir {
            let path = entry.unwrap().path();
            let input = std::fs::read(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let target: &'static str = target;
            within_limit(target, move || run_target(target, &input, &name));
            ran += 1;
        }
    }
    eprintln!("{ran} regression inputs");
}

/// The plain seed image with both superblock copies edited, on a (sparse)
/// device as large as the edited block_count.
fn seed_with_superblock(edit: impl FnOnce(&mut SuperBlock)) -> fuzz_harness::SparseDevice {
    let seed = &seed_images()[0];
    let mut dev = seed.device();
    let mut sb = seed.superblock();
    edit(&mut sb);
    dev.size = sb.block_count.get() * F2FS_BLKSIZE as u64;
    for copy in 0..2 {
        dev.blocks.insert(copy, sb.to_block());
    }
    dev
}

/// Moves the main area to start after `ssa` SSA segments and makes it
/// `main` segments long, keeping the areas contiguous.
fn resize_main(sb: &mut SuperBlock, ssa: u32, main: u32) {
    sb.segment_count_ssa.set(ssa);
    let main_blkaddr = sb.ssa_blkaddr.get() + ssa * BLOCKS_PER_SEG;
    sb.main_blkaddr.set(main_blkaddr);
    sb.segment_count_main.set(main);
    sb.section_count.set(main);
    let segments = (main_blkaddr - sb.segment0_blkaddr.get()) / BLOCKS_PER_SEG + main;
    sb.segment_count.set(segments);
    sb.block_count
        .set(sb.segment0_blkaddr.get() as u64 + segments as u64 * BLOCKS_PER_SEG as u64);
}

/// Found by reading SitTable::load: a superblock whose SIT has fewer
/// entries than the main area has segments passed validation, and loading
/// the SIT then indexed past the SIT version bitmap (a panic).
#[test]
fn fuzz_regression_sit_smaller_than_main_area() {
    let dev = seed_with_superblock(|sb| {
        // One SIT segment per copy describes 512 * 55 = 28160 segments.
        assert_eq!(sb.segment_count_sit.get(), 2);
        resize_main(sb, 56, 28_200);
    });
    within_limit("SIT smaller than main", move || {
        fuzz_harness::mount_and_walk(std::sync::Arc::new(dev.clone()));
        expect_corrupt(
            f2fuse_engine::Fs::open(Box::new(dev)),
            "superblock",
            &["SIT", "28200 main segments"],
            "open",
        )
    });
}

/// Found by reading NodeManager: a NAT area holding more than 2^32 nids
/// passed validation, and `SuperBlock::max_nid` then overflowed (a panic
/// with overflow checks, a wrong NAT capacity without).
#[test]
fn fuzz_regression_nat_larger_than_32_bit_nids() {
    let dev = seed_with_superblock(|sb| {
        // (36876 / 2) * 512 blocks * 455 entries > u32::MAX.
        let nat = 36_876;
        sb.segment_count_nat.set(nat);
        sb.ssa_blkaddr
            .set(sb.nat_blkaddr.get() + nat * BLOCKS_PER_SEG);
        let (ssa, main) = (sb.segment_count_ssa.get(), sb.segment_count_main.get());
        resize_main(sb, ssa, main);
    });
    within_limit("NAT over 2^32 nids", move || {
        fuzz_harness::mount_and_walk(std::sync::Arc::new(dev.clone()));
        expect_corrupt(
            f2fuse_engine::Fs::open(Box::new(dev)),
            "superblock",
            &["segment_count_nat 36876"],
            "open",
        )
    });
}
