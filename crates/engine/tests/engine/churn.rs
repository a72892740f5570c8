//! Churn: a 256 MiB image kept ~70% full while random overwrites add up to
//! 10x its capacity. Cleaning (and, by default, SSR: filling holes of dirty
//! segments) must keep it going; fsck.f2fs must stay clean; contents must
//! equal the model.

use f2fuse_testkit as support;

use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use support::*;

/// xorshift: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How free space comes back during the churn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reclaim {
    /// `min_ssr_sections=0`: foreground cleaning runs before SSR would.
    Cleaning,
    /// The kernel's default: SSR once free sections run low.
    Ssr,
}

fn churn(size: u64, fill_percent: u64, rewrite_factor: u64, seed: u64, reclaim: Reclaim) {
    let scratch = Scratch::new("churn");
    let img = scratch.join("img");
    format_path(&img, Some(size), &MkfsOptions::default()).unwrap();
    let mut rng = Rng(seed);
    let fs = Fs::open_path(
        &img,
        OpenOptions {
            writable: true,
            ..Default::default()
        },
    )
    .unwrap();
    // Overwrites out of place (the small-volume default rewrites in place),
    // so space comes back only by cleaning or SSR.
    fs.set_tunable("ipu_policy", 0).unwrap();
    if reclaim == Reclaim::Cleaning {
        fs.set_tunable("min_ssr_sections", 0).unwrap();
    }
    let user_bytes = fs.statfs().blocks * 4096;
    let file_size: u64 = 4 << 20;
    let files = (user_bytes * fill_percent / 100 / file_size) as usize;
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut inos = Vec::new();
    for i in 0..files {
        let f = fs
            .create(ROOT, format!("f{i:04}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        let data: Vec<u8> = (0..file_size).map(|_| rng.next() as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        model.push(data);
        inos.push(f.ino);
    }
    let total = size * rewrite_factor;
    let mut written = 0u64;
    while written < total {
        let which = rng.below(files as u64) as usize;
        let len = 4096 * (1 + rng.below(64));
        let offset = 4096 * rng.below((file_size - len) / 4096);
        let byte = rng.next() as u8;
        let chunk = vec![byte; len as usize];
        fs.write(inos[which], offset, &chunk)
            .unwrap_or_else(|e| panic!("write after {written} bytes: {e}"));
        model[which][offset as usize..(offset + len) as usize].copy_from_slice(&chunk);
        written += len;
    }
    let stats = fs.gc_stats();
    let ssr_blocks: u64 = fs.alloc_stats().ssr_blocks.iter().sum();
    match reclaim {
        Reclaim::Cleaning => assert!(
            stats.foreground_runs > 0 && stats.data_blocks_moved > 0,
            "cleaning never ran: {stats:?}"
        ),
        Reclaim::Ssr => assert!(ssr_blocks > 0, "SSR never ran: {stats:?}"),
    }
    eprintln!(
        "churn {}MiB fill {fill_percent}% {reclaim:?}: {stats:?}, {ssr_blocks} SSR blocks",
        size >> 20
    );
    fs.unmount().unwrap();
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after churn:\n{report}");
    }
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    for (i, expected) in model.iter().enumerate() {
        let inode = fs.resolve(&format!("/f{i:04}")).unwrap();
        let mut buf = vec![0u8; expected.len()];
        fs.read(&inode, 0, &mut buf).unwrap();
        assert!(buf == *expected, "file f{i:04} differs from the model");
    }
}

#[test]
fn churn_256m_ten_times_capacity() {
    if !require_f2fs_tools() {
        return;
    }
    churn(256 << 20, 70, 10, 0x1234_5678_9abc_def1, Reclaim::Cleaning);
}

#[test]
fn churn_256m_ten_times_capacity_with_ssr() {
    if !require_f2fs_tools() {
        return;
    }
    churn(256 << 20, 70, 10, 0x0bad_cafe_f00d_1234, Reclaim::Ssr);
}
