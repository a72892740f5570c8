//! Tunables: each one offered changes what the engine does. Images written
//! here must pass fsck.f2fs.

use f2fuse_testkit as support;

use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::path::Path;
use std::time::Duration;
use support::*;

const FILE: usize = 64 << 10;

fn open(img: &Path, tunables: &[(&str, u64)]) -> Fs {
    let settings: Vec<(String, u64)> = tunables.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    Fs::open_path_with(
        img,
        OpenOptions {
            writable: true,
            ..Default::default()
        },
        &settings,
    )
    .unwrap()
}

fn new_image(scratch: &Scratch, size: u64) -> std::path::PathBuf {
    let img = scratch.join("img");
    format_path(&img, Some(size), &MkfsOptions::default()).unwrap();
    img
}

fn cp_version(fs: &Fs) -> u64 {
    fs.checkpoint_state().cp.checkpoint_ver.get()
}

/// Writes `count` files of 64 KiB named `{prefix}{i}` and removes those
/// with `i % 5 < removed_of_5`; returns nothing, leaves dirty segments.
fn files_with_holes(fs: &Fs, prefix: &str, count: usize, removed_of_5: usize) {
    let data = vec![0x5a; FILE];
    for i in 0..count {
        let f = fs
            .create(ROOT, format!("{prefix}{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        assert_eq!(fs.write(f.ino, 0, &data).unwrap(), FILE);
    }
    for i in (0..count).filter(|i| i % 5 < removed_of_5) {
        fs.unlink(ROOT, format!("{prefix}{i}").as_bytes()).unwrap();
    }
}

fn check_fsck(fs: Fs, img: &Path) {
    fs.unmount().unwrap();
    if require_f2fs_tools() {
        if let Err(report) = fsck_f2fs(img) {
            panic!("fsck.f2fs:\n{report}");
        }
    }
}

#[test]
fn api_refuses_bad_names_and_values_and_changes_nothing() {
    let scratch = Scratch::new("tun-api");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[("max_victim_search", 20)]);
    assert_eq!(fs.tunable("max_victim_search").unwrap(), 20);
    let before = fs.tunables().unwrap();
    assert_eq!(
        fs.set_tunable("discard_granularity", 1)
            .unwrap_err()
            .to_errno(),
        libc::ENOENT
    );
    assert_eq!(
        fs.set_tunable("ipu_policy", 256).unwrap_err().to_errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.set_tunable("min_ipu_util", 101).unwrap_err().to_errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.set_tunable("gc_urgent", 4).unwrap_err().to_errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.set_tunable("max_victim_search", 0)
            .unwrap_err()
            .to_errno(),
        libc::EINVAL
    );
    assert_eq!(fs.tunables().unwrap(), before);
    fs.unmount().unwrap();
    let err = Fs::open_path_with(
        &img,
        OpenOptions {
            writable: true,
            ..Default::default()
        },
        &[("cp_interval".to_string(), 1 << 40)],
    )
    .err()
    .expect("out of range");
    assert_eq!(err.to_errno(), libc::EINVAL);
    let ro = Fs::open_path(&img, OpenOptions::default()).unwrap();
    assert_eq!(
        ro.tunable("cp_interval").unwrap_err().to_errno(),
        libc::EROFS
    );
}

#[test]
fn max_victim_search_bounds_the_search() {
    let scratch = Scratch::new("tun-search");
    let img = new_image(&scratch, 256 << 20);
    let fs = open(&img, &[("gc_urgent", 1)]);
    files_with_holes(&fs, "f", 600, 2);
    fs.checkpoint().unwrap();
    let searched = |fs: &Fs| fs.gc_stats().sections_searched;
    fs.set_tunable("max_victim_search", 3).unwrap();
    assert!(fs.background_gc().unwrap());
    assert_eq!(searched(&fs), 3);
    fs.set_tunable("max_victim_search", 4096).unwrap();
    assert!(fs.background_gc().unwrap());
    let wide = searched(&fs) - 3;
    assert!(wide > 3, "a wide search looked at {wide} sections");
    check_fsck(fs, &img);
}

/// Old sections 60% valid and young ones 40% valid: greedy takes a young
/// one (fewer blocks to move), cost-benefit an old one.
fn blocks_moved_by_one_cleaning(gc_idle: u64, sync: bool) -> u64 {
    let scratch = Scratch::new("tun-idle");
    let img = new_image(&scratch, 256 << 20);
    let fs = open(&img, &[("cp_interval", 86_400), ("gc_idle", gc_idle)]);
    fs.set_simulated_clock(Duration::ZERO);
    files_with_holes(&fs, "old", 160, 2);
    fs.set_simulated_clock(Duration::from_secs(100_000));
    files_with_holes(&fs, "new", 160, 3);
    fs.checkpoint().unwrap();
    assert!(fs.garbage_collect(sync).unwrap());
    let moved = fs.gc_stats().data_blocks_moved;
    check_fsck(fs, &img);
    moved
}

#[test]
fn gc_idle_changes_the_victim() {
    // A 2 MiB segment holds about 32 files: young ones keep 12 or 13, old ones 18 to 20.
    let per_file = (FILE / 4096) as u64;
    // Foreground: greedy by default, cost-benefit with gc_idle=1.
    let greedy = blocks_moved_by_one_cleaning(0, true);
    let cost_benefit = blocks_moved_by_one_cleaning(1, true);
    assert!(greedy <= 13 * per_file, "greedy moved {greedy}");
    assert!(
        cost_benefit >= 17 * per_file,
        "cost-benefit moved {cost_benefit}"
    );
    // Background: cost-benefit by default, greedy with gc_idle=2.
    assert_eq!(blocks_moved_by_one_cleaning(0, false), cost_benefit);
    assert_eq!(blocks_moved_by_one_cleaning(2, false), greedy);
}

#[test]
fn cp_interval_triggers_checkpoints() {
    let scratch = Scratch::new("tun-cp");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[("cp_interval", 10)]);
    fs.set_simulated_clock(Duration::ZERO);
    let v0 = cp_version(&fs);
    fs.mkdir(ROOT, b"a", 0o755, 0, 0).unwrap();
    assert_eq!(cp_version(&fs), v0, "no checkpoint before the interval");
    fs.set_simulated_clock(Duration::from_secs(11));
    fs.mkdir(ROOT, b"b", 0o755, 0, 0).unwrap();
    assert_eq!(cp_version(&fs), v0 + 1, "a checkpoint after 11 s");
    fs.set_tunable("cp_interval", 3600).unwrap();
    fs.set_simulated_clock(Duration::from_secs(30));
    fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    assert_eq!(cp_version(&fs), v0 + 1, "none with cp_interval=3600");
    check_fsck(fs, &img);
}

#[test]
fn reclaim_segments_checkpoints_to_free_prefree_segments() {
    for (reclaim, expect_checkpoint) in [(1, true), (1000, false)] {
        let scratch = Scratch::new("tun-reclaim");
        let img = new_image(&scratch, 128 << 20);
        let fs = open(
            &img,
            &[("cp_interval", 86_400), ("reclaim_segments", reclaim)],
        );
        let f = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &vec![1u8; 8 << 20]).unwrap();
        fs.checkpoint().unwrap();
        let v0 = cp_version(&fs);
        fs.unlink(ROOT, b"big").unwrap();
        assert_eq!(cp_version(&fs) > v0, expect_checkpoint, "reclaim {reclaim}");
        check_fsck(fs, &img);
    }
}

#[test]
fn dir_level_applies_to_new_directories() {
    let scratch = Scratch::new("tun-dirlevel");
    let img = new_image(&scratch, 64 << 20);
    let fs = open(&img, &[]);
    let flat = fs.mkdir(ROOT, b"flat", 0o755, 0, 0).unwrap();
    fs.set_tunable("dir_level", 3).unwrap();
    let wide = fs.mkdir(ROOT, b"wide", 0o755, 0, 0).unwrap();
    assert_eq!((flat.dir_level, wide.dir_level), (0, 3));
    for i in 0..300 {
        fs.create(wide.ino, format!("entry-{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    for i in 0..300 {
        fs.lookup(wide.ino, format!("entry-{i}").as_bytes())
            .unwrap();
    }
    fs.lookup(wide.ino, b"..").unwrap();
    assert_eq!(fs.read_dir(wide.ino).unwrap().len(), 302);
    check_fsck(fs, &img);
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    assert_eq!(fs.resolve("/wide").unwrap().dir_level, 3);
    fs.resolve("/wide/entry-299").unwrap();
}

#[test]
fn background_gc_sleeps_as_the_kernel() {
    let scratch = Scratch::new("tun-sleep");
    let img = new_image(&scratch, 256 << 20);
    let fs = open(&img, &[]);
    let s = Duration::from_secs;
    // Busy: one step longer, at most the maximum.
    assert_eq!(fs.background_gc_step(s(30), true).unwrap(), s(60));
    fs.set_tunable("gc_max_sleep_time", 45_000).unwrap();
    assert_eq!(fs.background_gc_step(s(30), true).unwrap(), s(45));
    fs.set_tunable("gc_min_sleep_time", 10_000).unwrap();
    assert_eq!(fs.background_gc_step(s(30), true).unwrap(), s(40));
    // Idle but nothing worth cleaning: the "no GC" sleep.
    assert_eq!(fs.background_gc_step(s(30), false).unwrap(), s(300));
    fs.set_tunable("gc_no_gc_sleep_time", 7000).unwrap();
    assert_eq!(fs.background_gc_step(s(30), false).unwrap(), s(7));
    files_with_holes(&fs, "f", 300, 2);
    fs.checkpoint().unwrap();
    // Urgent: cleans even while busy and comes back after gc_urgent_sleep_time.
    fs.set_tunable("gc_urgent", 1).unwrap();
    fs.set_tunable("gc_urgent_sleep_time", 250).unwrap();
    assert_eq!(
        fs.background_gc_step(s(30), true).unwrap(),
        Duration::from_millis(250)
    );
    assert_eq!(fs.gc_stats().background_runs, 1);
    // Low: cleans while busy only if worth it, at the normal pace.
    fs.set_tunable("gc_urgent", 2).unwrap();
    assert_eq!(fs.background_gc_step(s(30), true).unwrap(), s(7));
    assert_eq!(fs.gc_stats().background_runs, 1);
    check_fsck(fs, &img);
}
