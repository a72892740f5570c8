//! `Fs::status` and `Fs::file_extents` against known workloads: byte
//! counts that must come out exactly, counters cross-checked between the
//! places that keep them, segment states that must add up, and extents
//! checked block by block against dump.f2fs (which finds each block's owner
//! through the SSA, code we did not write).

use f2fuse_testkit as support;

use f2fuse_engine::internals::data::{Extent, ExtentPlace};
use f2fuse_engine::internals::device::IoKind;
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Fs, OpenOptions, Status};
use f2fuse_layout::{F2FS_BLKSIZE, F2FS_ROOT_INO as ROOT, NEW_ADDR};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use support::*;

const MIB: u64 = 1 << 20;
const BS: u64 = F2FS_BLKSIZE as u64;

fn fresh_image(scratch: &Scratch, size: u64) -> PathBuf {
    let img = scratch.join("img");
    format_path(&img, Some(size), &MkfsOptions::default()).unwrap();
    img
}

fn assert_segments_add_up(status: &Status) {
    let s = &status.segments;
    assert_eq!(
        s.free + s.prefree + s.dirty + s.full,
        status.main_segments,
        "{s:?}"
    );
    assert_eq!(s.current, 6, "{s:?}");
}

/// A deterministic, incompressible-looking byte pattern.
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn user_writes_are_counted_exactly_and_amplification_follows() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("status-wa");
    let img = fresh_image(&scratch, 64 * MIB);
    let fs = open_writable(&img);
    let before = fs.status().unwrap();
    assert_eq!(before.user_bytes_written, 0);
    assert_eq!(before.io.written_of(IoKind::UserData), 0);
    assert_eq!(before.checkpoints, 0);
    assert_segments_add_up(&before);

    let f = fs.create(ROOT, b"data", 0o644, 0, 0).unwrap();
    let n = 3 * MIB + MIB / 2;
    // Unaligned pieces: user bytes count what callers wrote, device bytes
    // whole blocks.
    let data = pattern(n, 7);
    for (i, piece) in data.chunks(300_000).enumerate() {
        assert_eq!(
            fs.write(f.ino, i as u64 * 300_000, piece).unwrap(),
            piece.len()
        );
    }
    fs.checkpoint().unwrap();
    let after = fs.status().unwrap();
    assert_eq!(after.user_bytes_written, n);
    assert_eq!(after.checkpoints, 1);
    // Each piece rewrites the block it shares with the previous one: in
    // place (the default ipu_policy on a small image is FORCE).
    let pieces = n.div_ceil(300_000);
    let unaligned_joins = (1..pieces).filter(|i| i * 300_000 % BS != 0).count() as u64;
    assert_eq!(after.io.written_of(IoKind::UserData), n.div_ceil(BS) * BS);
    assert_eq!(
        after.io.written_of(IoKind::InPlaceData),
        unaligned_joins * BS
    );
    assert!(after.io.written_of(IoKind::Node) > 0, "{:?}", after.io);
    assert!(after.io.written_of(IoKind::Meta) > 0, "{:?}", after.io);
    // The new name went into the root's one dentry block, rewritten once.
    assert_eq!(after.io.written_of(IoKind::DirData), BS);
    assert_eq!(after.io.written_of(IoKind::GcData), 0);
    assert_eq!(
        after.io.flushes - before.io.flushes,
        2,
        "a checkpoint flushes twice"
    );
    let wa = after.write_amplification().unwrap();
    assert_eq!(wa, after.io.total_written() as f64 / n as f64);
    assert!(wa > 1.0, "{wa}");
    // The allocator handed out every block the device wrote to the main area.
    let data_blocks: u64 = after.alloc.lfs_blocks[..3].iter().sum::<u64>()
        + after.alloc.ssr_blocks[..3].iter().sum::<u64>();
    assert_eq!(
        data_blocks * BS,
        after.io.written_of(IoKind::UserData) + after.io.written_of(IoKind::DirData)
    );
    let node_blocks: u64 = after.alloc.lfs_blocks[3..].iter().sum::<u64>()
        + after.alloc.ssr_blocks[3..].iter().sum::<u64>();
    assert_eq!(node_blocks * BS, after.io.written_of(IoKind::Node));
    assert_segments_add_up(&after);

    // Reading counts what callers got back; the blocks come from the device
    // (the unaligned writes above read the blocks they shared).
    let mut buf = vec![0u8; n as usize];
    assert_eq!(fs.read_ino(f.ino, 0, &mut buf).unwrap(), n as usize);
    assert_eq!(buf, data);
    let read = fs.status().unwrap();
    assert_eq!(read.user_bytes_read, n);
    assert_eq!(
        read.io.read_of(IoKind::UserData) - after.io.read_of(IoKind::UserData),
        n.div_ceil(BS) * BS
    );

    // Checkpoints: one more per call, each writing metadata.
    for k in 1..=3 {
        let meta_before = fs.status().unwrap().io.written_of(IoKind::Meta);
        fs.checkpoint().unwrap();
        let s = fs.status().unwrap();
        assert_eq!(s.checkpoints, 1 + k);
        assert!(s.io.written_of(IoKind::Meta) > meta_before);
    }
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn segment_states_follow_deletion_and_checkpoint() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("status-segments");
    let img = fresh_image(&scratch, 64 * MIB);
    let fs = open_writable(&img);
    // Keep prefree segments until the test's own checkpoint.
    fs.set_tunable("reclaim_segments", 4096).unwrap();
    let f = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &pattern(4 * MIB, 3)).unwrap();
    fs.checkpoint().unwrap();
    let written = fs.status().unwrap();
    assert!(written.segments.full >= 1, "{:?}", written.segments);
    assert_eq!(written.segments.prefree, 0);
    assert_segments_add_up(&written);

    fs.unlink(ROOT, b"big").unwrap();
    let deleted = fs.status().unwrap();
    // The file's full segments are empty now but valid in the checkpoint.
    assert!(deleted.segments.prefree >= 1, "{:?}", deleted.segments);
    assert!(deleted.valid_blocks + 4 * MIB / BS <= written.valid_blocks);
    assert_eq!(deleted.valid_inodes + 1, written.valid_inodes);
    assert_segments_add_up(&deleted);

    fs.checkpoint().unwrap();
    let committed = fs.status().unwrap();
    assert_eq!(committed.segments.prefree, 0);
    assert_eq!(
        committed.segments.free,
        deleted.segments.free + deleted.segments.prefree
    );
    assert_segments_add_up(&committed);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();

    // A read-only open reports the same layout from the checkpoint, and its
    // own (reading-only) activity.
    let ro = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let s = ro.status().unwrap();
    assert!(!s.writable);
    assert_eq!(s.segments.free, committed.segments.free);
    assert_eq!(s.valid_blocks, committed.valid_blocks);
    assert_eq!(s.io.total_written(), 0);
    assert!(s.io.read_of(IoKind::Meta) > 0);
    assert_eq!(s.checkpoints, 0);
    // Layout figures agree with the SIT itself.
    let usage = ro.sit().unwrap().usage(&ro.checkpoint_state());
    assert_eq!(usage.valid_blocks, s.valid_blocks);
    assert_eq!(usage.segments, s.segments);
    assert_segments_add_up(&s);
}

#[test]
fn churn_cleaning_moves_what_its_counters_say() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("status-gc");
    let img = fresh_image(&scratch, 128 * MIB);
    let fs = open_writable(&img);
    // Cleaning, not SSR, brings space back; rewrites go out of place.
    fs.set_tunable("min_ssr_sections", 0).unwrap();
    fs.set_tunable("ipu_policy", 0).unwrap();
    let user = fs.statfs().blocks * BS;
    let file_size = MIB;
    let files = (user * 75 / 100 / file_size) as usize;
    let mut inos = Vec::new();
    for i in 0..files {
        let f = fs
            .create(ROOT, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &pattern(file_size, i as u64)).unwrap();
        inos.push(f.ino);
    }
    // Scattered 16 KiB overwrites leave every segment partly valid, so
    // space comes back only by cleaning.
    let mut x = 99u64;
    let mut rewritten = 0;
    while fs.gc_stats().data_blocks_moved == 0 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let which = (x >> 33) as usize % inos.len();
        let offset = ((x >> 7) % (file_size / BS - 4)) * BS;
        fs.write(inos[which], offset, &[x as u8; 16384]).unwrap();
        rewritten += 16384;
        assert!(rewritten < 20 * user, "cleaning never started");
    }
    let s = fs.status().unwrap();
    let gc = fs.gc_stats();
    assert_eq!(s.gc, gc);
    assert!(gc.foreground_runs > 0 && gc.sections_cleaned > 0, "{gc:?}");
    // Moved data blocks were each read and written once through the GC kind.
    assert_eq!(s.io.read_of(IoKind::GcData), gc.data_blocks_moved * BS);
    assert_eq!(s.io.written_of(IoKind::GcData), gc.data_blocks_moved * BS);
    assert!(s.checkpoints >= gc.foreground_runs);
    // Moved data goes to the cold data log.
    assert!(s.alloc.lfs_blocks[2] + s.alloc.ssr_blocks[2] >= gc.data_blocks_moved);
    let wa = s.write_amplification().unwrap();
    assert!(wa > 1.0, "{wa}");
    assert_segments_add_up(&s);
    // Every other file gone: the segments they shared with their
    // neighbours are half invalid, enough for a background round to clean
    // one (and checkpoint).
    for i in (0..inos.len()).step_by(2) {
        fs.unlink(ROOT, format!("f{i}").as_bytes()).unwrap();
    }
    let before = fs.status().unwrap();
    assert!(
        fs.background_gc().unwrap(),
        "background cleaning did not start"
    );
    let after = fs.status().unwrap();
    assert_eq!(after.gc.background_runs, 1);
    assert_eq!(after.gc.foreground_runs, before.gc.foreground_runs);
    assert_eq!(after.gc.sections_cleaned, before.gc.sections_cleaned + 1);
    assert_eq!(after.checkpoints, before.checkpoints + 1);
    let moved = after.gc.data_blocks_moved - before.gc.data_blocks_moved;
    assert_eq!(
        after.io.written_of(IoKind::GcData) - before.io.written_of(IoKind::GcData),
        moved * BS
    );
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

/// Owner of `blkaddr` per dump.f2fs: (file name, file block).
fn dump_owner(img: &Path, blkaddr: u32) -> (String, u64) {
    let text = dump_f2fs_block(img, blkaddr);
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(key))
            .map(|rest| rest.trim_start_matches([' ', ':']).trim().to_string())
            .unwrap_or_else(|| panic!("no {key:?} in dump.f2fs -b {blkaddr}:\n{text}"))
    };
    let name = field("- File name");
    let offset = field("- Data offset");
    let hex = offset
        .strip_prefix("0x")
        .and_then(|o| o.split_whitespace().next())
        .unwrap_or_else(|| panic!("data offset {offset:?}"));
    (name, u64::from_str_radix(hex, 16).unwrap())
}

/// Every mapped extent's first and last block belong to `name` at the
/// file blocks the extent claims. `addrs_per_inode`: dump.f2fs 1.15 numbers
/// blocks under direct nodes as if the inode held 923 addresses (it takes
/// ADDRS_PER_INODE of the direct node block, whose inline flags are zero),
/// so beyond the inode its offsets are shifted by the inline xattr area.
fn check_against_dump(img: &Path, name: &str, addrs_per_inode: u64, extents: &[Extent]) {
    const DUMP_ADDRS_PER_INODE: u64 = 923;
    let dump_offset = |logical: u64| {
        if logical < addrs_per_inode {
            logical
        } else {
            logical - addrs_per_inode + DUMP_ADDRS_PER_INODE
        }
    };
    for e in extents {
        if let ExtentPlace::Blocks(start) = e.place {
            for (phys, logical) in [
                (start, e.logical),
                (start + e.len as u32 - 1, e.logical + e.len - 1),
            ] {
                assert_eq!(
                    dump_owner(img, phys),
                    (name.to_string(), dump_offset(logical)),
                    "block {phys}, file block {logical}"
                );
            }
        }
    }
}

#[test]
fn extents_of_contiguous_sparse_and_inline_files() {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") {
        return;
    }
    let scratch = Scratch::new("status-extents");
    let img = fresh_image(&scratch, 64 * MIB);
    let fs = open_writable(&img);
    let contiguous = fs.create(ROOT, b"contiguous", 0o644, 0, 0).unwrap();
    fs.write(contiguous.ino, 0, &pattern(2 * MIB, 1)).unwrap();
    let sparse = fs.create(ROOT, b"sparse", 0o644, 0, 0).unwrap();
    // Pieces in the inode's slots and in a direct node, written out of
    // order so their blocks are not in file order.
    for (block, count) in [(2000u64, 3u64), (0, 4), (100, 10)] {
        fs.write(sparse.ino, block * BS, &pattern(count * BS, block))
            .unwrap();
    }
    let inline = fs.create(ROOT, b"inline", 0o644, 0, 0).unwrap();
    fs.write(inline.ino, 0, b"small").unwrap();
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();

    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let c = fs.file_extents("/contiguous").unwrap();
    assert!(!c.inline);
    assert_eq!(c.extents.len(), 1, "{c:?}");
    assert_eq!((c.extents[0].logical, c.extents[0].len), (0, 512));
    let api = fs.resolve("/contiguous").unwrap().addrs_per_inode() as u64;
    check_against_dump(&img, "contiguous", api, &c.extents);

    let s = fs.file_extents("/sparse").unwrap();
    let pieces: Vec<(u64, u64)> = s.extents.iter().map(|e| (e.logical, e.len)).collect();
    assert_eq!(pieces, [(0, 4), (100, 10), (2000, 3)]);
    assert!(s
        .extents
        .iter()
        .all(|e| matches!(e.place, ExtentPlace::Blocks(_))));
    assert!(api < 2000, "block 2000 must sit under a direct node");
    check_against_dump(&img, "sparse", api, &s.extents);
    let text = s.to_text();
    assert!(text.ends_with("/sparse: 3 extents found\n"), "{text}");
    assert_eq!(text.matches("last").count(), 1, "{text}");

    let i = fs.file_extents("/inline").unwrap();
    assert!(i.inline && i.extents.is_empty(), "{i:?}");
    assert!(i.to_text().contains("inline"), "{}", i.to_text());

    assert_eq!(
        fs.file_extents("/missing").unwrap_err().to_errno(),
        libc::ENOENT
    );
}

#[test]
fn extents_show_reserved_unwritten_blocks() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("status-unwritten");
    let img = fresh_image(&scratch, 64 * MIB);
    let fs = open_writable(&img);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &pattern(1000 * BS, 5)).unwrap();
    fs.unmount().unwrap();

    // What fallocate leaves (the kernel's NEW_ADDR), put into the first
    // direct node by hand: blocks 950..954 reserved but never written.
    let (node_addr, first_in_node) = {
        let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
        let inode = fs.resolve("/f").unwrap();
        let nid = inode.inode().i_nid[0].get();
        let addr = fs.node_manager().nat_entry(nid).unwrap().block_addr.get();
        (addr as u64, inode.addrs_per_inode() as u64)
    };
    let file = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    for block in 950..954u64 {
        let slot = block - first_in_node;
        file.write_all_at(&NEW_ADDR.to_le_bytes(), node_addr * BS + 4 * slot)
            .unwrap();
    }
    drop(file);

    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let report = fs.file_extents("/f").unwrap();
    let shape: Vec<(u64, u64, bool)> = report
        .extents
        .iter()
        .map(|e| (e.logical, e.len, e.place == ExtentPlace::Unwritten))
        .collect();
    assert_eq!(
        shape,
        [(0, 950, false), (950, 4, true), (954, 46, false)],
        "{report:?}"
    );
    let text = report.to_text();
    assert!(text.contains("unwritten"), "{text}");
    // The unwritten range reads as zeros.
    let mut buf = vec![1u8; 4 * BS as usize];
    let inode = fs.resolve("/f").unwrap();
    fs.read(&inode, 950 * BS, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn node_reads_are_counted_where_they_are_served() {
    let scratch = Scratch::new("status-nodecache");
    let img = fresh_image(&scratch, 64 * MIB);
    let fs = open_writable(&img);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    // The new inode exists only in the dirty cache.
    let before = fs.status().unwrap().node_cache;
    fs.inode(f.ino).unwrap();
    let after = fs.status().unwrap().node_cache;
    assert_eq!(after.dirty_hits, before.dirty_hits + 1);
    assert_eq!(
        (after.clean_hits, after.misses),
        (before.clean_hits, before.misses)
    );
    fs.unmount().unwrap();

    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    let first = fs.status().unwrap().node_cache;
    fs.inode(f.ino).unwrap();
    let read = fs.status().unwrap().node_cache;
    assert_eq!(read.misses, first.misses + 1, "first read from the device");
    let node_bytes = fs.status().unwrap().io.read_of(IoKind::Node);
    fs.inode(f.ino).unwrap();
    let again = fs.status().unwrap();
    assert_eq!(again.node_cache.clean_hits, read.clean_hits + 1);
    assert_eq!(again.node_cache.misses, read.misses);
    assert_eq!(
        again.io.read_of(IoKind::Node),
        node_bytes,
        "a hit reads nothing"
    );
    assert_eq!(again.node_cache.dirty_hits, 0, "read-only: nothing dirty");
}
