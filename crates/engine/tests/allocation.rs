//! Block allocation under concurrent writers (`serialized_dio_pages`,
//! `max_folio_order`): a serialized request gets its blocks from one
//! allocation step, so each is one physical run (split only where its log
//! moves to another segment), however many threads write at once, and the
//! image stays consistent for fsck.f2fs. (That a file's concurrent chunks
//! are allocated in file order is a unit test of the range locks.)

mod support;

use f2fuse_engine::mkfs::{format_path, MkfsOptions, MKFS_FEATURES};
use f2fuse_engine::Fs;
use f2fuse_layout::{BLOCKS_PER_SEG, F2FS_BLKSIZE, F2FS_ROOT_INO as ROOT};
use support::{fsck_f2fs, require_f2fs_tools, Scratch};

const BLOCK: u64 = F2FS_BLKSIZE as u64;
/// One FUSE-sized request.
const REQUEST_BLOCKS: u64 = 256;

fn image(tag: &str) -> (Scratch, std::path::PathBuf) {
    let scratch = Scratch::new(tag);
    let path = scratch.join("img");
    let opts = MkfsOptions {
        features: MKFS_FEATURES,
        ..MkfsOptions::default()
    };
    format_path(&path, Some(256 << 20), &opts).unwrap();
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

/// `threads` writers, each writing `requests` requests of REQUEST_BLOCKS
/// blocks to its own file, all at once; returns the files' inode numbers.
fn write_concurrently(fs: &Fs, threads: u32, requests: u64, tunables: &[(&str, u64)]) -> Vec<u32> {
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
    let data = vec![0xA5u8; (REQUEST_BLOCKS * BLOCK) as usize];
    std::thread::scope(|s| {
        for &ino in &files {
            let data = &data;
            s.spawn(move || {
                for r in 0..requests {
                    let n = fs.write(ino, r * REQUEST_BLOCKS * BLOCK, data).unwrap();
                    assert_eq!(n, data.len());
                }
            });
        }
    });
    files
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
    let mut buf = vec![0u8; (4 * REQUEST_BLOCKS * BLOCK) as usize];
    for &ino in &files {
        assert_eq!(fs.read_ino(ino, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == 0xA5));
    }
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
}
