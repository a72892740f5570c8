//! In-place updates (ipu_policy, min_ipu_util, min_fsync_blocks), pinned
//! files and extent_zeroout_len: where rewrites land, what cleaning does
//! with pinned blocks. Every image written here must pass fsck.f2fs.

use f2fuse_testkit as support;

use f2fuse_engine::internals::data::BlockMapper;
use f2fuse_engine::internals::device::IoKind;
use f2fuse_engine::internals::fs::SetAttr;
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{FallocMode, Fs, OpenOptions, SeekTarget};
use f2fuse_layout::{CursegType, F2FS_ROOT_INO as ROOT, NEW_ADDR, NULL_ADDR};
use std::path::{Path, PathBuf};
use support::*;

const BS: usize = 4096;

fn new_image(scratch: &Scratch, size: u64) -> PathBuf {
    let img = scratch.join("img");
    format_path(&img, Some(size), &MkfsOptions::default()).unwrap();
    img
}

fn open(img: &Path, tunables: &[(&str, u64)]) -> Fs {
    let settings: Vec<(String, u64)> = tunables.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let options = OpenOptions {
        writable: true,
        ..Default::default()
    };
    Fs::open_path_with(img, options, &settings).unwrap()
}

/// Block addresses of file blocks `[0, n)`.
fn addresses(fs: &Fs, ino: u32, n: u64) -> Vec<u32> {
    let inode = fs.inode(ino).unwrap();
    let mut mapper = BlockMapper::new(fs.node_manager(), &inode);
    (0..n).map(|b| mapper.map(b).unwrap()).collect()
}

fn block(byte: u8, blocks: usize) -> Vec<u8> {
    vec![byte; blocks * BS]
}

fn read_all(fs: &Fs, ino: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    assert_eq!(fs.read_ino(ino, 0, &mut buf).unwrap(), len);
    buf
}

fn in_place_total(fs: &Fs) -> u64 {
    fs.status().unwrap().alloc.in_place_writes.iter().sum()
}

fn finish(fs: Fs, img: &Path) {
    fs.unmount().unwrap();
    fsck_f2fs(img).unwrap();
}

/// A file of `blocks` written and fsync'd: its blocks have addresses.
fn synced_file(fs: &Fs, name: &[u8], blocks: usize) -> u32 {
    let ino = fs.create(ROOT, name, 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &block(1, blocks)).unwrap();
    fs.fsync(ino).unwrap();
    ino
}

#[test]
fn fsync_policy_rewrites_small_fsynced_writes_in_place() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-fsync");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[]);
    // The kernel's default on a main area of at most 16 GiB: FORCE | HONOR_OPU_WRITE.
    assert_eq!(fs.tunable("ipu_policy").unwrap(), 0x81);
    fs.set_tunable("ipu_policy", 16).unwrap();
    let ino = synced_file(&fs, b"f", 32);
    let before = addresses(&fs, ino, 32);
    // One block between fsyncs: in place, the address stays.
    fs.write(ino, 5 * BS as u64, &block(2, 1)).unwrap();
    fs.fsync(ino).unwrap();
    let after = addresses(&fs, ino, 32);
    assert_eq!(before, after);
    assert_eq!(in_place_total(&fs), 1);
    // 16 blocks between fsyncs (more than min_fsync_blocks 8): out of place.
    fs.write(ino, 8 * BS as u64, &block(3, 16)).unwrap();
    let moved = addresses(&fs, ino, 32);
    assert!((8..24).all(|b| moved[b] != before[b]), "{moved:?}");
    assert_eq!(&moved[..8], &before[..8]);
    let mut expect = block(1, 32);
    expect[5 * BS..6 * BS].fill(2);
    expect[8 * BS..24 * BS].fill(3);
    assert_eq!(read_all(&fs, ino, 32 * BS), expect);
    // min_fsync_blocks 16 takes a write that size in place.
    fs.set_tunable("min_fsync_blocks", 16).unwrap();
    fs.fsync(ino).unwrap();
    fs.write(ino, 8 * BS as u64, &block(4, 16)).unwrap();
    assert_eq!(addresses(&fs, ino, 32), moved);
    finish(fs, &img);
}

#[test]
fn policy_zero_writes_out_of_place_and_force_in_place() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-force");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[("ipu_policy", 0)]);
    let ino = synced_file(&fs, b"f", 64);
    let before = addresses(&fs, ino, 64);
    fs.write(ino, 0, &block(2, 1)).unwrap();
    assert_ne!(addresses(&fs, ino, 1)[0], before[0]);
    assert_eq!(in_place_total(&fs), 0);
    // FORCE: every rewrite, however large, in place.
    fs.set_tunable("ipu_policy", 1).unwrap();
    let now = addresses(&fs, ino, 64);
    fs.write(ino, 0, &block(3, 64)).unwrap();
    assert_eq!(addresses(&fs, ino, 64), now);
    assert_eq!(in_place_total(&fs), 64);
    // Writes into holes still allocate.
    fs.write(ino, 100 * BS as u64, &block(4, 1)).unwrap();
    assert_ne!(addresses(&fs, ino, 101)[100], NULL_ADDR);
    assert_eq!(read_all(&fs, ino, 64 * BS), block(3, 64));
    finish(fs, &img);
}

#[test]
fn util_policies_follow_min_ipu_util() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-util");
    let img = new_image(&scratch, 64 << 20);
    // UTIL (4) with SSR_UTIL (8): utilization here is far below 70%.
    // min_ssr_sections 0: the data logs use SSR only when free sections
    // are down to the reserved ones.
    let fs = open(&img, &[("ipu_policy", 4 | 8), ("min_ssr_sections", 0)]);
    // A few percent of the user blocks in use.
    synced_file(&fs, b"filler", 512);
    let ino = synced_file(&fs, b"f", 16);
    let before = addresses(&fs, ino, 16);
    fs.write(ino, 0, &block(2, 16)).unwrap();
    let moved = addresses(&fs, ino, 16);
    assert!(moved.iter().zip(&before).all(|(a, b)| a != b));
    // Utilization above 0%: UTIL applies (SSR_UTIL also needs SSR).
    assert!(fs.status().unwrap().utilization_percent() >= 1.0);
    fs.set_tunable("min_ipu_util", 0).unwrap();
    fs.write(ino, 0, &block(3, 16)).unwrap();
    assert_eq!(addresses(&fs, ino, 16), moved);
    // SSR alone does not apply: the data logs are not in SSR mode.
    fs.set_tunable("ipu_policy", 2 | 8).unwrap();
    fs.write(ino, 0, &block(4, 16)).unwrap();
    let moved_again = addresses(&fs, ino, 16);
    assert_ne!(moved_again, moved);
    // Once they would (need_SSR), SSR and SSR_UTIL rewrite in place.
    fs.set_tunable("min_ssr_sections", u32::MAX as u64).unwrap();
    fs.write(ino, 0, &block(5, 16)).unwrap();
    assert_eq!(addresses(&fs, ino, 16), moved_again);
    fs.set_tunable("ipu_policy", 8).unwrap();
    fs.write(ino, 0, &block(6, 16)).unwrap();
    assert_eq!(addresses(&fs, ino, 16), moved_again);
    assert_eq!(read_all(&fs, ino, 16 * BS), block(6, 16));
    finish(fs, &img);
}

#[test]
fn pinning_follows_the_kernels_rules() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-pin-rules");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[]);
    let dir = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap().ino;
    assert_eq!(
        fs.set_pin_file(dir, true).unwrap_err().to_errno(),
        libc::EINVAL
    );
    // An inline file is converted to blocks, then pinned.
    let ino = fs.create(ROOT, b"p", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, b"inline bytes").unwrap();
    assert_eq!(fs.set_pin_file(ino, true).unwrap(), 0);
    assert!(fs.is_pinned(ino).unwrap());
    assert!(!fs.has_inline_data(&fs.inode(ino).unwrap()));
    assert_eq!(fs.get_pin_file(ino).unwrap(), 0);
    let mut buf = [0u8; 12];
    fs.read_ino(ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"inline bytes");
    // Pinned: NOCOW in the flags, no compression.
    assert_ne!(fs.get_flags(&fs.inode(ino).unwrap()) & 0x0080_0000, 0);
    // Unpinning resets the failures.
    assert_eq!(fs.set_pin_file(ino, false).unwrap(), 0);
    assert!(!fs.is_pinned(ino).unwrap());
    finish(fs, &img);
}

#[test]
fn pinned_files_get_whole_cold_sections_and_keep_their_addresses() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-pin");
    let img = new_image(&scratch, 128 << 20);
    let fs = open(&img, &[("ipu_policy", 0)]);
    let ino = fs.create(ROOT, b"pinned", 0o644, 0, 0).unwrap().ino;
    fs.set_pin_file(ino, true).unwrap();
    let blocks = 1024u64;
    fs.fallocate(
        ino,
        0,
        blocks * BS as u64,
        FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    let addrs = addresses(&fs, ino, blocks);
    // Real blocks, contiguous, starting a section, in the cold data log.
    assert!(addrs.iter().all(|&a| a != NULL_ADDR && a != NEW_ADDR));
    assert!(addrs.windows(2).all(|w| w[1] == w[0] + 1), "not contiguous");
    let status = fs.status().unwrap();
    let main = fs.superblock().main_blkaddr.get();
    assert_eq!((addrs[0] - main) % 512, 0, "not at a section start");
    assert!(status.alloc.out_of_place_writes[CursegType::ColdData as usize] >= blocks);
    assert_eq!(read_all(&fs, ino, BS), vec![0u8; BS]);
    // Rewrites stay where they are, even with ipu_policy 0.
    fs.write(ino, 0, &block(7, 300)).unwrap();
    fs.write(ino, 700 * BS as u64, &block(8, 1)).unwrap();
    assert_eq!(addresses(&fs, ino, blocks), addrs);
    // Churn so that the pinned sections look like victims, then clean.
    churn(&fs);
    // Only preallocation, as f2fs: no holes punched into a pinned file.
    let punch = fs.fallocate(ino, 0, BS as u64, FallocMode::PunchHole);
    assert_eq!(punch.unwrap_err().to_errno(), libc::EOPNOTSUPP);
    // Truncate it to 384 blocks: its first section becomes a cheap victim.
    let blocks = 384u64;
    let attr = SetAttr {
        size: Some(blocks * BS as u64),
        ..Default::default()
    };
    fs.setattr(ino, &attr).unwrap();
    fs.checkpoint().unwrap();
    let kept = addresses(&fs, ino, blocks);
    for _ in 0..20 {
        fs.garbage_collect(true).unwrap();
    }
    assert_eq!(
        addresses(&fs, ino, blocks),
        kept,
        "cleaning moved a pinned block"
    );
    let status = fs.status().unwrap();
    assert!(status.gc.pinned_sections_skipped > 0, "{:?}", status.gc);
    assert!(fs.get_pin_file(ino).unwrap() > 0);
    let mut expect = vec![0u8; blocks as usize * BS];
    expect[..300 * BS].fill(7);
    assert_eq!(read_all(&fs, ino, blocks as usize * BS), expect);
    finish(fs, &img);
    // The pin survives a remount.
    let fs = open(&img, &[]);
    assert!(fs.is_pinned(ino).unwrap());
    finish(fs, &img);
}

/// Files replaced round after round, a checkpoint after each, so that
/// sections around a pinned file fill and empty.
fn churn(fs: &Fs) {
    for round in 0..6 {
        for i in 0..20u32 {
            let name = format!("c{i}");
            if round > 0 {
                fs.unlink(ROOT, name.as_bytes()).unwrap();
            }
            let f = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            fs.write(f, 0, &block(round as u8, 64)).unwrap();
        }
        fs.checkpoint().unwrap();
    }
}

#[test]
fn only_foreground_cleaning_counts_a_pinned_files_failures() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-pin-bg");
    let img = new_image(&scratch, 128 << 20);
    let fs = open(&img, &[("ipu_policy", 0)]);
    let ino = fs.create(ROOT, b"pinned", 0o644, 0, 0).unwrap().ino;
    fs.set_pin_file(ino, true).unwrap();
    let alloc = FallocMode::Allocate { keep_size: false };
    fs.fallocate(ino, 0, 1024 * BS as u64, alloc).unwrap();
    churn(&fs);
    // 384 blocks left: the file's second section is a cheap victim.
    let attr = SetAttr {
        size: Some(384 * BS as u64),
        ..Default::default()
    };
    fs.setattr(ino, &attr).unwrap();
    fs.checkpoint().unwrap();
    let kept = addresses(&fs, ino, 384);
    // Background cleaning (the kernel's BG_GC, also its gc_urgent) leaves
    // the section without counting a failure.
    for _ in 0..20 {
        fs.garbage_collect(false).unwrap();
    }
    assert!(fs.status().unwrap().gc.pinned_sections_skipped > 0);
    assert_eq!(fs.get_pin_file(ino).unwrap(), 0);
    // Foreground cleaning counts it; re-pinning makes the section a
    // candidate again.
    fs.set_pin_file(ino, false).unwrap();
    fs.set_pin_file(ino, true).unwrap();
    for _ in 0..20 {
        fs.garbage_collect(true).unwrap();
    }
    assert_eq!(fs.get_pin_file(ino).unwrap(), 1);
    assert_eq!(addresses(&fs, ino, 384), kept);
    finish(fs, &img);
}

#[test]
fn a_write_into_reservations_zeroes_a_chunk_that_later_writes_reuse() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-zeroout");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[("extent_zeroout_len", 64)]);
    let ino = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
    fs.fallocate(
        ino,
        0,
        256 * BS as u64,
        FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    let blocks_before = fs.inode(ino).unwrap().blocks;
    fs.write(ino, 70 * BS as u64, &block(5, 1)).unwrap();
    fs.fsync(ino).unwrap();
    let addrs = addresses(&fs, ino, 256);
    // Blocks 70..128 (the write to its window's end) are real and
    // contiguous; the rest stays reserved, so SEEK_DATA from the start
    // finds the written block, as in the kernel.
    assert!((70..128).all(|b| addrs[b] != NEW_ADDR));
    assert!(addrs[70..128].windows(2).all(|w| w[1] == w[0] + 1));
    assert!(addrs[..70]
        .iter()
        .chain(&addrs[128..])
        .all(|&a| a == NEW_ADDR));
    assert_eq!(fs.seek(ino, 0, SeekTarget::Data).unwrap(), 70 * BS as u64);
    assert_eq!(
        fs.seek(ino, 0, SeekTarget::Hole).unwrap(),
        256 * BS as u64,
        "reserved blocks are no hole"
    );
    // A write before the chunk zeroes out up to it.
    fs.write(ino, 66 * BS as u64, &block(4, 1)).unwrap();
    let addrs = addresses(&fs, ino, 256);
    assert!(addrs[65] == NEW_ADDR && (66..128).all(|b| addrs[b] != NEW_ADDR));
    assert_eq!(fs.inode(ino).unwrap().blocks, blocks_before);
    // A later small fsync'd write in the chunk goes in place.
    fs.write(ino, 100 * BS as u64, &block(6, 1)).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(addresses(&fs, ino, 256), addrs);
    let mut expect = vec![0u8; 256 * BS];
    expect[66 * BS..67 * BS].fill(4);
    expect[70 * BS..71 * BS].fill(5);
    expect[100 * BS..101 * BS].fill(6);
    assert_eq!(read_all(&fs, ino, 256 * BS), expect);
    // 0: only the block written gets an address.
    fs.set_tunable("extent_zeroout_len", 0).unwrap();
    fs.write(ino, 200 * BS as u64, &block(7, 1)).unwrap();
    let addrs = addresses(&fs, ino, 256);
    assert!(addrs[199] == NEW_ADDR && addrs[201] == NEW_ADDR && addrs[200] != NEW_ADDR);
    finish(fs, &img);
}

#[test]
fn an_fsync_after_rewrites_in_place_flushes_once() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("ipu-flush");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[("ipu_policy", 1)]);
    let ino = synced_file(&fs, b"f", 8);
    let flushes = |fs: &Fs| fs.status().unwrap().io.flushes;
    let fsync_flushes = |fs: &Fs| {
        let before = flushes(fs);
        fs.fsync(ino).unwrap();
        flushes(fs) - before
    };
    // In place only: the nodes point at blocks already valid, one flush.
    fs.write(ino, 0, &block(2, 2)).unwrap();
    assert_eq!(fsync_flushes(&fs), 1);
    let status = fs.status().unwrap();
    assert_eq!(status.io.written_of(IoKind::InPlaceData), 2 * BS as u64);
    // A new block: its data is flushed before the node that points at it.
    fs.write(ino, 20 * BS as u64, &block(3, 1)).unwrap();
    assert_eq!(fsync_flushes(&fs), 2);
    finish(fs, &img);
}
