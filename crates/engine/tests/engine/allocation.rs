//! Block allocation under concurrent writers (`serialized_dio_pages`,
//! `max_folio_order`): a serialized request gets its blocks from one
//! allocation step, so each is one physical run (split only where its log
//! moves to another segment), however many threads write at once, and the
//! image stays consistent for fsck.f2fs; and consecutive large requests of
//! one file continue each other (per-file streams), so concurrent
//! sequential writers end up with a run per file, not one per request.
//! (That a file's concurrent chunks are allocated in file order is a unit
//! test of the range locks.)

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::SetAttr;
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions, MKFS_FEATURES};
use f2fuse_engine::{FallocMode, Fs};
use f2fuse_layout::{BLOCKS_PER_SEG, F2FS_BLKSIZE, F2FS_ROOT_INO as ROOT};
use std::collections::BTreeMap;
use support::{fsck_f2fs, require_f2fs_tools, Scratch};

const BLOCK: u64 = F2FS_BLKSIZE as u64;
/// One FUSE-sized request.
const REQUEST_BLOCKS: u64 = 256;

fn image(tag: &str) -> (Scratch, std::path::PathBuf) {
    image_of(tag, 256 << 20)
}

fn image_of(tag: &str, size: u64) -> (Scratch, std::path::PathBuf) {
    let scratch = Scratch::new(tag);
    let path = scratch.join("img");
    let opts = MkfsOptions {
        features: MKFS_FEATURES,
        ..MkfsOptions::default()
    };
    format_path(&path, Some(size), &opts).unwrap();
    (scratch, path)
}

/// Physical runs of file `ino`: (file block, block address, length).
fn runs(fs: &Fs, ino: u32) -> Vec<(u64, u32, u64)> {
    fs.extents(&fs.inode(ino).unwrap()).unwrap()
}

/// Whether a run of a request ends where its log had to move on: at the
/// end of a segment.
fn ends_a_segment(fs: &Fs, run: &(u64, u32, u64)) -> bool {
    let main = fs.superblock().main_blkaddr.get() as u64;
    (run.1 as u64 + run.2 - main).is_multiple_of(BLOCKS_PER_SEG as u64)
}

/// One write: its first file block and its length in blocks, inside one
/// request.
type Piece = (u64, u64);

/// Requests `0..requests` in file order, each written as writes of
/// `cuts` blocks (summing to REQUEST_BLOCKS).
fn in_order(requests: u64, cuts: &[u64]) -> Vec<Piece> {
    assert_eq!(cuts.iter().sum::<u64>(), REQUEST_BLOCKS);
    (0..requests)
        .flat_map(|r| {
            cuts.iter().scan(r * REQUEST_BLOCKS, |at, &blocks| {
                *at += blocks;
                Some((*at - blocks, blocks))
            })
        })
        .collect()
}

/// `threads` writers, each writing `requests` requests of REQUEST_BLOCKS
/// blocks to its own file, all at once; returns the files' inode numbers.
fn write_concurrently(fs: &Fs, threads: u32, requests: u64, tunables: &[(&str, u64)]) -> Vec<u32> {
    write_files_concurrently(
        fs,
        threads,
        tunables,
        0,
        &in_order(requests, &[REQUEST_BLOCKS]),
    )
}

/// [`write_concurrently`], each file first preallocated (fallocate) to
/// `prealloc_requests` requests' worth, as fio does, and written as the
/// writes of `schedule`, in its order, the writers interleaving at every
/// write; file `t`'s bytes are `pattern(t, request)`.
fn write_files_concurrently(
    fs: &Fs,
    threads: u32,
    tunables: &[(&str, u64)],
    prealloc_requests: u64,
    schedule: &[Piece],
) -> Vec<u32> {
    for (name, value) in tunables {
        fs.set_tunable(name, *value).unwrap();
    }
    let files: Vec<u32> = (0..threads)
        .map(|t| {
            fs.create(ROOT, format!("f{t}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    if prealloc_requests > 0 {
        let mode = FallocMode::Allocate { keep_size: false };
        for &ino in &files {
            fs.fallocate(ino, 0, prealloc_requests * REQUEST_BLOCKS * BLOCK, mode)
                .unwrap();
        }
    }
    // The writers go in rounds of one write each, so their requests
    // interleave however the threads are scheduled.
    let round = std::sync::Barrier::new(files.len());
    std::thread::scope(|s| {
        for (t, &ino) in files.iter().enumerate() {
            let round = &round;
            s.spawn(move || {
                for &(first, blocks) in schedule {
                    let request = first / REQUEST_BLOCKS;
                    assert_eq!((first + blocks - 1) / REQUEST_BLOCKS, request);
                    let piece = vec![pattern(t, request); (blocks * BLOCK) as usize];
                    round.wait();
                    let n = fs.write(ino, first * BLOCK, &piece).unwrap();
                    assert_eq!(n, piece.len());
                }
            });
        }
    });
    files
}

/// The byte file `t` holds in its request `r`.
fn pattern(t: usize, r: u64) -> u8 {
    (t as u64 * 16 + r + 1) as u8
}

/// Every file holds its writer's bytes in its first `requests` requests.
fn verify(fs: &Fs, files: &[u32], requests: u64) {
    let mut buf = vec![0u8; (REQUEST_BLOCKS * BLOCK) as usize];
    for (t, &ino) in files.iter().enumerate() {
        for r in 0..requests {
            let n = fs
                .read_ino(ino, r * REQUEST_BLOCKS * BLOCK, &mut buf)
                .unwrap();
            assert_eq!(n, buf.len());
            assert!(
                buf.iter().all(|&b| b == pattern(t, r)),
                "inode {ino}: request {r} reads back wrong"
            );
        }
    }
}

/// [`verify`], unmount, fsck.f2fs, and [`verify`] again on a fresh open:
/// the streams' segments are ordinary segments to it.
fn verify_after_reopening(fs: Fs, img: &std::path::Path, files: &[u32], requests: u64) {
    verify(&fs, files, requests);
    fs.unmount().unwrap();
    fsck_f2fs(img).unwrap();
    let fs = support::open_writable(img);
    verify(&fs, files, requests);
    fs.unmount().unwrap();
}

/// Every file `f{t}` has at most `most` extents as `f2fuse extents` lists
/// them (unwritten ones too).
fn assert_extents_at_most(fs: &Fs, files: &[u32], most: usize) {
    for (t, &ino) in files.iter().enumerate() {
        let count = fs.file_extents(&format!("/f{t}")).unwrap().extents.len();
        assert!(count <= most, "f{t}: {count} extents: {:?}", runs(fs, ino));
    }
}

#[test]
fn every_serialized_request_is_one_run_under_concurrent_writers() {
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-serialized");
    let fs = support::open_writable(&img);
    // Units of one block, so only serialization keeps a request together.
    let tunables = [("max_folio_order", 0), ("serialized_dio_pages", 64)];
    let files = write_concurrently(&fs, 6, 8, &tunables);
    for &ino in &files {
        let runs = runs(&fs, ino);
        for run in &runs {
            let (start, _, len) = *run;
            let end = start + len;
            // A run ends at a request boundary, or where its log moved on.
            assert!(
                end.is_multiple_of(REQUEST_BLOCKS) || ends_a_segment(&fs, run),
                "inode {ino}: run {run:?} ends inside a request: {runs:?}"
            );
        }
    }
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn block_at_a_time_writers_interleave() {
    // The experiment's baseline: with neither units nor serialization,
    // concurrent writers take turns block by block, as f2fs's DIO did
    // before serialization. Not asserted strictly (a scheduler may run the
    // threads one after another), only that the data reads back.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-interleaved");
    let fs = support::open_writable(&img);
    let tunables = [("max_folio_order", 0), ("serialized_dio_pages", 0)];
    let files = write_concurrently(&fs, 4, 4, &tunables);
    verify(&fs, &files, 4);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn concurrent_sequential_writers_get_one_stream_each() {
    // Write-back and O_DIRECT without preallocation: the first request of
    // each file opens a tentative stream (four at once; the others' first
    // requests go to the shared log and their stream opens at the second),
    // every later one continues the file's stream, so at most two extents
    // per file (one per request without streams: the log interleaves the
    // writers).
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-streams");
    let fs = support::open_writable(&img);
    let (threads, requests) = (6, 8);
    let files =
        write_files_concurrently(&fs, threads, &[], 0, &in_order(requests, &[REQUEST_BLOCKS]));
    assert_extents_at_most(&fs, &files, 2);
    verify_after_reopening(fs, &img, &files, requests);
}

#[test]
fn concurrent_writers_of_preallocated_files_get_one_run_each() {
    // W1a's shape: ten files fallocated to 12 MiB, 8 MiB of each written
    // in 1 MiB requests at once: one written run and the unwritten tail.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image_of("alloc-prealloc-streams", 512 << 20);
    let fs = support::open_writable(&img);
    let (threads, requests) = (10, 8);
    let schedule = in_order(requests, &[REQUEST_BLOCKS]);
    let files = write_files_concurrently(&fs, threads, &[], 12, &schedule);
    assert_extents_at_most(&fs, &files, 2);
    for &ino in &files {
        assert_eq!(runs(&fs, ino).len(), 1, "inode {ino}");
    }
    verify(&fs, &files, requests);
    // A checkpoint in the middle: the streams' segments are recorded part
    // full, and the streams go on writing them afterwards.
    fs.checkpoint().unwrap();
    std::thread::scope(|s| {
        for (t, &ino) in files.iter().enumerate() {
            let fs = &fs;
            s.spawn(move || {
                for r in requests..12 {
                    let data = vec![pattern(t, r); (REQUEST_BLOCKS * BLOCK) as usize];
                    fs.write(ino, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
                }
            });
        }
    });
    assert_extents_at_most(&fs, &files, 1);
    verify(&fs, &files, 12);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn requests_arriving_out_of_order_still_form_one_run() {
    // FUSE sends one file's chunks on several threads: the second chunk
    // of a write may be allocated before the first. A stream places each
    // block by its file offset, so the file is still one run.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-stream-order");
    let fs = support::open_writable(&img);
    let ino = fs.create(ROOT, b"f0", 0o644, 0, 0).unwrap().ino;
    let request_bytes = REQUEST_BLOCKS * BLOCK;
    let mode = FallocMode::Allocate { keep_size: false };
    fs.fallocate(ino, 0, 8 * request_bytes, mode).unwrap();
    // Without preallocation the first request opens a tentative stream:
    // one run too.
    let plain = fs.create(ROOT, b"f1", 0o644, 0, 0).unwrap().ino;
    let write = |ino: u32, t: usize, r: u64| {
        let data = vec![pattern(t, r); request_bytes as usize];
        fs.write(ino, r * request_bytes, &data).unwrap();
    };
    for r in [1, 0, 3, 2, 5, 4, 7, 6] {
        write(ino, 0, r);
    }
    for r in [0, 2, 1, 4, 3, 6, 5, 7] {
        write(plain, 1, r);
    }
    assert_eq!(runs(&fs, ino).len(), 1, "{:?}", runs(&fs, ino));
    assert_eq!(runs(&fs, plain).len(), 1, "{:?}", runs(&fs, plain));
    verify(&fs, &[ino, plain], 8);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn chunks_cut_below_the_serialized_size_join_their_files_stream() {
    // Write-back does not always send whole 1 MiB chunks: some come cut
    // (56 or 32 blocks seen), below `serialized_dio_pages`. Inside a
    // file's open stream they take their place in it instead of the
    // shared log, so concurrent buffered writers still get about a run
    // per file. Here every request is cut in two, 200 + 56 blocks, the
    // writers interleaving at each piece; no preallocation, so the stream
    // opens (tentatively) at the first 200 blocks.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-stream-cut");
    let fs = support::open_writable(&img);
    let requests = 8;
    let files = write_files_concurrently(&fs, 4, &[], 0, &in_order(requests, &[200, 56]));
    for &ino in &files {
        let runs = runs(&fs, ino);
        assert_eq!(runs.len(), 1, "inode {ino}: {runs:?}");
    }
    verify(&fs, &files, requests);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn buffered_write_back_order_leaves_one_run_per_file() {
    // What the kernel's write-back of three buffered 32 MiB writers sends
    // (seen in the daemon): each file's first chunk alone before any
    // other, chunks out of order, some cut below `serialized_dio_pages`,
    // and some sent megabytes late, after the file's stream has moved on
    // by more than four segments (at the end of its writing). Each file still
    // gets one run: its stream opens at the first chunk, places every
    // chunk by its file offset, and keeps the segments still waiting for
    // chunks. (Without that: the first chunk in the log, and each late
    // chunk in the log too.)
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-write-back");
    let fs = support::open_writable(&img);
    let requests = 32;
    let late = [5, 9, 13, 17];
    let whole = |r: u64| (r * REQUEST_BLOCKS, REQUEST_BLOCKS);
    let mut schedule = vec![whole(0), whole(2), whole(1)];
    // Request 3 cut below the serialized size at its end.
    schedule.extend([(3 * REQUEST_BLOCKS, 200), (3 * REQUEST_BLOCKS + 200, 56)]);
    schedule.extend((4..requests).filter(|r| !late.contains(r)).map(whole));
    // Requests 5, 9, 13 and 17, each in its own segment, come last: 5 is
    // due 26 requests (13 segments) after it.
    schedule.extend(late.iter().map(|&r| whole(r)));
    let files = write_files_concurrently(&fs, 3, &[], 0, &schedule);
    for &ino in &files {
        assert_eq!(runs(&fs, ino).len(), 1, "inode {ino}: {:?}", runs(&fs, ino));
    }
    assert_extents_at_most(&fs, &files, 1);
    verify_after_reopening(fs, &img, &files, requests);
}

#[test]
fn lone_large_writes_open_few_tentative_streams() {
    // A first request opens a stream only tentatively: at most four at
    // once, so that a copy of many files of one request each does not
    // leave a partly written segment per file; the others' blocks follow
    // each other in the log. A checkpoint lets go of the tentative ones
    // (a rewrite does not make one ordinary); a random writer's second
    // request lets go of its own.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-tentative");
    let fs = support::open_writable(&img);
    let data = vec![7u8; (REQUEST_BLOCKS * BLOCK) as usize];
    let write_file = |name: String, requests: u64| {
        let ino = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        for r in 0..requests {
            fs.write(ino, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
        }
        ino
    };
    // More files than streams are remembered (32): forgetting the
    // tentative streams would let every few files open another.
    let lone: Vec<u32> = (0..100)
        .map(|k| write_file(format!("lone{k}"), 1))
        .collect();
    // Each file is half a segment: in the log two share a segment, a
    // tentative stream's segment holds its file alone.
    let main = fs.superblock().main_blkaddr.get();
    let segment = |addr: u32| (addr - main) / BLOCKS_PER_SEG;
    let mut files_in: BTreeMap<u32, usize> = BTreeMap::new();
    for &ino in &lone {
        for (_, addr, len) in runs(&fs, ino) {
            for segno in segment(addr)..=segment(addr + len as u32 - 1) {
                *files_in.entry(segno).or_default() += 1;
            }
        }
    }
    let alone = files_in.values().filter(|&&n| n == 1).count();
    // Four streams', and the log's first and last segments.
    assert!(alone <= 6, "{alone} segments of one file: {files_in:?}");
    // The four tentative streams still count: a new file's first request
    // goes to the log, its stream opens at the second.
    let capped = write_file("capped".into(), 4);
    assert_eq!(runs(&fs, capped).len(), 2, "{:?}", runs(&fs, capped));
    fs.checkpoint().unwrap();
    let after = write_file("after".into(), 4);
    assert_eq!(runs(&fs, after).len(), 1, "{:?}", runs(&fs, after));
    // A random writer's second request lets go of its tentative stream:
    // its requests go to the log, not 10 requests apart by file offset.
    let random = fs.create(ROOT, b"random", 0o644, 0, 0).unwrap().ino;
    for r in [0, 10, 20] {
        fs.write(random, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
    }
    let addr_of = |r: u64| {
        let (_, addr, _) = runs(&fs, random)[r as usize];
        addr as u64
    };
    assert_ne!(
        addr_of(2) - addr_of(1),
        10 * REQUEST_BLOCKS,
        "{:?}",
        runs(&fs, random)
    );
    // A rewrite (out of place) of a file's last blocks does not make its
    // tentative stream an ordinary one: the next checkpoint lets go of its
    // segment all the same.
    fs.set_tunable("ipu_policy", 0).unwrap();
    fs.checkpoint().unwrap();
    let current = || fs.status().unwrap().segments.current;
    let held = current();
    let rewritten = write_file("rewritten".into(), 1);
    assert_eq!(current(), held + 1);
    let tail = 4 * BLOCK as usize;
    fs.write(
        rewritten,
        REQUEST_BLOCKS * BLOCK - tail as u64,
        &data[..tail],
    )
    .unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(current(), held);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn sequential_chunks_overlapping_the_previous_one_stay_in_the_stream() {
    // One sequential buffered writer's write-back (fio, 64 KiB writes, seen
    // in the daemon): each 1 MiB chunk begins by rewriting the last blocks
    // of the chunk before (in place), some pairs of chunks swapped. Where
    // the chunk before filled its segment, which the stream then let go
    // of, the chunk's new blocks still belong at their slot in the next
    // segment: it went to the log whole, a 256 MiB file had 25-36 extents.
    // One thread writes f0 in order, another f1 with its pairs swapped,
    // taking turns.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-overlap");
    let fs = support::open_writable(&img);
    const OVERLAP: u64 = 32;
    let chunks: u64 = 16;
    // Chunk k: its request's blocks, from OVERLAP blocks before it.
    let chunk = |k: u64| (k * REQUEST_BLOCKS).saturating_sub(OVERLAP)..(k + 1) * REQUEST_BLOCKS;
    let in_order: Vec<u64> = (0..chunks).collect();
    let swapped: Vec<u64> = (0..chunks).map(|k| k ^ 1).collect();
    // Each block holds its request's bytes (an overlap rewrites them as they are).
    let byte = |t: usize, block: u64| pattern(t, block / REQUEST_BLOCKS);
    let files: Vec<u32> = (0..2)
        .map(|t| {
            fs.create(ROOT, format!("f{t}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    let turn = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for (t, order) in [in_order, swapped].into_iter().enumerate() {
            let (fs, turn, ino) = (&fs, &turn, files[t]);
            s.spawn(move || {
                for k in order {
                    let blocks = chunk(k);
                    let data: Vec<u8> = blocks
                        .clone()
                        .flat_map(|b| [byte(t, b); BLOCK as usize])
                        .collect();
                    turn.wait();
                    fs.write(ino, blocks.start * BLOCK, &data).unwrap();
                }
            });
        }
    });
    for &ino in &files {
        assert_eq!(runs(&fs, ino).len(), 1, "inode {ino}: {:?}", runs(&fs, ino));
    }
    verify_after_reopening(fs, &img, &files, chunks);
}

#[test]
fn a_long_sequential_writing_outgrows_its_first_window() {
    // A stream's window is at most 64 segments (128 MiB), and it spanned
    // no further: a longer file (fio lays out 256 MiB with fallocate, then
    // writes it in order, its write-back chunks widened by zeroing out
    // reservations, so they may join the file's stream but not open one)
    // had the rest in the log, in the order its chunks came. The window
    // keeps ahead of the stream instead. 144 MiB, preallocated, pairs of
    // 1 MiB chunks swapped; after the first two, the chunks are below
    // `serialized_dio_pages` (may only join the stream).
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image_of("alloc-long", 1 << 30);
    let fs = support::open_writable(&img);
    let requests = 144;
    let mode = FallocMode::Allocate { keep_size: false };
    let ino = fs.create(ROOT, b"f0", 0o644, 0, 0).unwrap().ino;
    fs.fallocate(ino, 0, requests * REQUEST_BLOCKS * BLOCK, mode)
        .unwrap();
    for r in (0..requests).map(|r| r ^ 1) {
        if r == 2 {
            fs.set_tunable("serialized_dio_pages", 2 * REQUEST_BLOCKS)
                .unwrap();
        }
        let data = vec![pattern(0, r); (REQUEST_BLOCKS * BLOCK) as usize];
        fs.write(ino, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
    }
    assert_extents_at_most(&fs, &[ino], 1);
    verify_after_reopening(fs, &img, &[ino], requests);
}

#[test]
fn a_file_truncated_and_written_again_gets_a_stream_again() {
    // A stream remembers where its file's writing ended. After a truncate
    // (`> file`, `cp` over it) the rewrite starts behind that end: it must
    // not pass for late chunks of the old writing, which go to the log
    // (here between another file's small writes) instead of to a stream.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-truncated");
    let fs = support::open_writable(&img);
    let data = vec![3u8; (REQUEST_BLOCKS * BLOCK) as usize];
    let big = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap().ino;
    let small = fs.create(ROOT, b"small", 0o644, 0, 0).unwrap().ino;
    for r in 0..8 {
        fs.write(big, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
    }
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    fs.setattr(big, &truncate).unwrap();
    for r in 0..8 {
        fs.write(big, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
        // Below serialized_dio_pages: the log's next blocks.
        fs.write(small, r * 4 * BLOCK, &data[..(4 * BLOCK) as usize])
            .unwrap();
    }
    let big_runs = runs(&fs, big);
    assert!(big_runs.len() <= 2, "{big_runs:?}");
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}

#[test]
fn a_stream_idle_for_a_checkpoint_interval_lets_go_of_its_segments() {
    // A file that stopped writing must not keep its stream's segments
    // current (out of reach of SSR and the cleaner) checkpoint after
    // checkpoint: the second checkpoint without a request lets go of them.
    if !require_f2fs_tools() {
        return;
    }
    let (_scratch, img) = image("alloc-idle");
    let fs = support::open_writable(&img);
    let data = vec![5u8; (REQUEST_BLOCKS * BLOCK) as usize];
    let current = || fs.status().unwrap().segments.current;
    let logs_only = current();
    let ino = fs.create(ROOT, b"stopped", 0o644, 0, 0).unwrap().ino;
    // Five requests: two and a half segments, the last one part written.
    for r in 0..5 {
        fs.write(ino, r * REQUEST_BLOCKS * BLOCK, &data).unwrap();
    }
    assert!(current() > logs_only, "no stream segment held");
    fs.checkpoint().unwrap();
    assert!(
        current() > logs_only,
        "a stream used since the last checkpoint is kept"
    );
    fs.checkpoint().unwrap();
    assert_eq!(current(), logs_only);
    assert_eq!(runs(&fs, ino).len(), 1, "{:?}", runs(&fs, ino));
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}
