//! Compressed files: written by us on images mkfs.f2fs made with the
//! compression feature, for every algorithm and cluster size; fsck.f2fs
//! (and our fsck) must find them clean and we must read the bytes back.
//! Debian's sload.f2fs 1.15 is built without LZO and LZ4 ("The selected
//! compression algorithm is not supported"), so it cannot make such
//! images here; the layout follows the kernel's (see docs/ARCHITECTURE.md).

use f2fuse_testkit as support;

use f2fuse_engine::internals::compress::{decompress, CompressMode, CompressOptions};
use f2fuse_engine::internals::fs::SetAttr;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Error, FallocMode, Fs};
use f2fuse_layout::compress::{CompressAlgorithm, I_COMPRESS_ALGORITHM_OFFSET};
use f2fuse_layout::node::I_ADDR_OFFSET;
use f2fuse_layout::NEW_ADDR;
use f2fuse_layout::{inode_flag, F2FS_ROOT_INO as ROOT};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use support::*;

const MIB: u64 = 1 << 20;

fn compression_image(scratch: &Scratch) -> PathBuf {
    let img = scratch.join("compress.img");
    mkfs_f2fs(&img, 128 * MIB, &["-O", "extra_attr,compression"]);
    img
}

/// Text-like bytes that compress well, with a seed-dependent mix.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = support::Rng(seed | 1);
    let words = ["alpha ", "beta ", "gamma ", "delta\n", "f2fs ", "cluster "];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(words[rng.below(words.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = support::Rng(seed | 1);
    (0..len).map(|_| rng.below(256) as u8).collect()
}

/// The files every image gets: compressible (at least two whole clusters
/// of `log`), incompressible, zeros, a mix with a partial last cluster and
/// a tiny file.
fn contents(seed: u64, log: u8) -> Vec<(&'static str, Vec<u8>)> {
    let text_len = (2 * (4096usize << log) + 12_345).max(600_000);
    let mut mixed = text(200_000, seed);
    mixed.extend(noise(70_000, seed + 1));
    mixed.extend(vec![0u8; 50_001]);
    vec![
        ("text.txt", text(text_len, seed)),
        ("noise.bin", noise(100_000, seed)),
        ("zeros", vec![0u8; 300_000]),
        ("mixed", mixed),
        ("tiny", b"hello".to_vec()),
    ]
}

fn read_all(fs: &Fs, ino: u32) -> Vec<u8> {
    let size = fs.inode(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size + 10];
    let n = fs.read_ino(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn assert_clean(img: &Path) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("{report}");
    }
}

/// Writes the files into a `chattr +c` directory with `options`, in
/// uneven pieces, and returns their inode numbers.
fn write_compressed_files(fs: &Fs, options: CompressOptions, seed: u64) -> Vec<(u32, Vec<u8>)> {
    let log = options.log_cluster_size;
    fs.set_compress_options(options).unwrap();
    let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
    let mut out = Vec::new();
    for (name, data) in contents(seed, log) {
        let f = fs.create(dir.ino, name.as_bytes(), 0o644, 0, 0).unwrap();
        assert_ne!(f.flags & inode_flag::COMPR, 0, "{name} inherits +c");
        for (i, piece) in data.chunks(70_001).enumerate() {
            assert_eq!(
                fs.write(f.ino, i as u64 * 70_001, piece).unwrap(),
                piece.len()
            );
        }
        out.push((f.ino, data));
    }
    out
}

#[test]
fn every_algorithm_and_cluster_size_reads_back_and_fsck_is_clean() {
    if !require_f2fs_tools() {
        return;
    }
    for algorithm in CompressAlgorithm::ALL {
        for log in 2..=8u8 {
            let scratch = Scratch::new(&format!("compress-{}-{log}", algorithm.name()));
            let img = compression_image(&scratch);
            let options = CompressOptions {
                algorithm,
                log_cluster_size: log,
                checksum: log % 2 == 0,
                ..Default::default()
            };
            let files = {
                let fs = open_writable(&img);
                let files = write_compressed_files(&fs, options, log as u64);
                fs.unmount().unwrap();
                files
            };
            assert_clean(&img);
            let fs = open_read_only(&img);
            for (ino, data) in &files {
                let inode = fs.inode(*ino).unwrap();
                let c = inode.compression.expect("a compressed file");
                assert_eq!((c.algorithm, c.log_cluster_size), (algorithm, log));
                assert!(
                    read_all(&fs, *ino) == *data,
                    "{} log {log} inode {ino}",
                    algorithm.name()
                );
            }
            // Text does compress: blocks are saved (i_blocks still counts
            // every slot of a compressed cluster; the payload is smaller).
            let text = fs.inode(files[0].0).unwrap();
            assert!(text.compression.unwrap().compr_blocks > 0);
            let stored = payload_blocks(&fs, files[0].0).len();
            let raw = files[0].1.len() / 4096;
            assert!(
                stored < raw * 3 / 4,
                "{} log {log}: {stored} of {raw}",
                algorithm.name()
            );
        }
    }
}

#[test]
fn overwrite_truncate_and_extend_keep_clusters_consistent() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-modify");
    let img = compression_image(&scratch);
    let (ino, expect) = {
        let fs = open_writable(&img);
        let options = CompressOptions {
            algorithm: CompressAlgorithm::Zstd,
            log_cluster_size: 4,
            ..Default::default()
        };
        let files = write_compressed_files(&fs, options, 7);
        let (ino, mut model) = files[0].clone();
        let apply = |model: &mut Vec<u8>, offset: usize, bytes: &[u8]| {
            fs.write(ino, offset as u64, bytes).unwrap();
            if model.len() < offset + bytes.len() {
                model.resize(offset + bytes.len(), 0);
            }
            model[offset..offset + bytes.len()].copy_from_slice(bytes);
        };
        // Inside one cluster, across clusters, incompressible over compressed.
        apply(&mut model, 5, b"changed");
        apply(&mut model, 65_000, &text(10_000, 99));
        apply(&mut model, 200_000, &noise(140_000, 3));
        // Truncate inside a compressed cluster, then at a cluster boundary, then grow.
        for size in [450_123u64, 65_536 * 4, 300_000] {
            fs.setattr(
                ino,
                &SetAttr {
                    size: Some(size),
                    ..Default::default()
                },
            )
            .unwrap();
            model.resize(size as usize, 0);
        }
        apply(&mut model, 290_000, &text(40_000, 5));
        assert_eq!(read_all(&fs, ino), model);
        // As the kernel: no hole punching inside clusters; preallocation is fine.
        let punch = fs.fallocate(ino, 0, 4096, FallocMode::PunchHole);
        assert_eq!(punch.unwrap_err().to_errno(), libc::EOPNOTSUPP);
        fs.fallocate(
            ino,
            400_000,
            100_000,
            FallocMode::Allocate { keep_size: true },
        )
        .unwrap();
        // Deleting a compressed file frees every slot.
        let dir = fs.resolve("/c").unwrap().ino;
        fs.unlink(dir, b"mixed").unwrap();
        fs.unmount().unwrap();
        (ino, model)
    };
    assert_clean(&img);
    let fs = open_read_only(&img);
    assert_eq!(read_all(&fs, ino), expect);
}

#[test]
fn compression_flags_follow_the_kernel_rules() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-flags");
    let img = compression_image(&scratch);
    let fs = open_writable(&img);
    let plain = fs.create(ROOT, b"plain", 0o644, 0, 0).unwrap();
    fs.write(plain.ino, 0, b"data").unwrap();
    let err = fs.set_flags(plain.ino, inode_flag::COMPR).unwrap_err();
    assert_eq!(err.to_errno(), libc::EINVAL, "a file with data");
    let both = fs.set_flags(plain.ino, inode_flag::COMPR | inode_flag::NOCOMP);
    assert_eq!(both.unwrap_err().to_errno(), libc::EINVAL);
    let empty = fs.create(ROOT, b"empty", 0o644, 0, 0).unwrap();
    let flagged = fs.set_flags(empty.ino, inode_flag::COMPR).unwrap();
    assert!(flagged.compression.is_some());
    // Extension lists decide before the directory does.
    fs.set_compress_options(CompressOptions {
        extensions: vec!["LOG".into()],
        nocompress_extensions: vec!["jpg".into()],
        ..Default::default()
    })
    .unwrap();
    let log = fs.create(ROOT, b"app.log", 0o644, 0, 0).unwrap();
    assert!(log.compression.is_some());
    let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
    let jpg = fs.create(dir.ino, b"photo.jpg", 0o644, 0, 0).unwrap();
    assert!(jpg.compression.is_none());
    let sub = fs.mkdir(dir.ino, b"sub", 0o755, 0, 0).unwrap();
    assert_ne!(sub.flags & inode_flag::COMPR, 0);
    let bad = CompressOptions {
        extensions: vec!["txt".into()],
        nocompress_extensions: vec!["TXT".into()],
        ..Default::default()
    };
    assert_eq!(
        fs.set_compress_options(bad).unwrap_err().to_errno(),
        libc::EINVAL
    );
    fs.unmount().unwrap();
    assert_clean(&img);
    // Without the feature, as the kernel: EOPNOTSUPP.
    let plain_img = scratch.join("plain.img");
    mkfs_f2fs(&plain_img, 64 * MIB, &["-O", "extra_attr"]);
    let fs = open_writable(&plain_img);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    assert_eq!(
        fs.set_flags(f.ino, inode_flag::COMPR)
            .unwrap_err()
            .to_errno(),
        libc::EOPNOTSUPP
    );
}

/// Payload block addresses of a compressed file (the extents of its
/// clusters' payload slots).
fn payload_blocks(fs: &Fs, ino: u32) -> Vec<u32> {
    let inode = fs.inode(ino).unwrap();
    fs.extents(&inode)
        .unwrap()
        .into_iter()
        .flat_map(|(_, addr, len)| (0..len as u32).map(move |k| addr + k))
        .collect()
}

fn patch(img: &Path, blkaddr: u32, at: usize, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(bytes, blkaddr as u64 * 4096 + at as u64)
        .unwrap();
}

#[test]
fn corrupt_clusters_are_corrupt_errors_naming_the_inode() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-corrupt");
    for algorithm in CompressAlgorithm::ALL {
        // (what is damaged, byte offset in the first payload block, new bytes)
        let damage: [(&str, usize, &[u8]); 4] = [
            ("clen past its blocks", 0, &[0xff, 0xff, 0, 0]),
            ("checksum", 4, &[1, 2, 3, 4]),
            ("payload", 24, &[0xff; 16]),
            ("payload cut short", 0, &[4, 0, 0, 0]),
        ];
        for (what, at, bytes) in damage {
            let img = compression_image(&scratch);
            let ino = {
                let fs = open_writable(&img);
                let options = CompressOptions {
                    algorithm,
                    checksum: true,
                    ..Default::default()
                };
                let ino = write_compressed_files(&fs, options, 1)[0].0;
                fs.unmount().unwrap();
                ino
            };
            let first = payload_blocks(&open_read_only(&img), ino)[0];
            patch(&img, first, at, bytes);
            let fs = open_read_only(&img);
            let mut buf = vec![0u8; 16384];
            match fs.read_ino(ino, 0, &mut buf) {
                Err(Error::Corrupt(c)) => {
                    let text = c.to_string();
                    assert!(text.contains(&format!("inode {ino}")), "{text}");
                }
                other => panic!("{} {what}: {other:?}", algorithm.name()),
            }
            // Our fsck does not decode payloads (nor does fsck.f2fs): clean.
            assert_clean(&img);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Hostile payloads: an error or exactly a full cluster, never a panic.
    #[test]
    fn cluster_decoders_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..3000),
        log in 2u8..=4,
        pick in 0usize..4,
    ) {
        let mut out = vec![0u8; 4096 << log];
        let _ = decompress(CompressAlgorithm::ALL[pick], &payload, &mut out);
    }

    /// Valid streams with bytes changed or cut: the same.
    #[test]
    fn damaged_streams_never_panic(
        seed in any::<u64>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
        pick in 0usize..4,
    ) {
        let algorithm = CompressAlgorithm::ALL[pick];
        let state = CompressOptions { algorithm, ..Default::default() }.new_file_state();
        let data = text(16384, seed);
        let mut stream = f2fuse_engine::internals::compress::compress_cluster(&state, &data).unwrap();
        let mut out = vec![0u8; 16384];
        prop_assert!(decompress(algorithm, &stream, &mut out).is_ok());
        prop_assert!(out == data);
        for (at, value) in flips {
            let len = stream.len();
            stream[at % len] ^= value;
        }
        stream.truncate(cut % (stream.len() + 1));
        let _ = decompress(algorithm, &stream, &mut out);
    }
}

fn errno<T: std::fmt::Debug>(result: Result<T, Error>) -> i32 {
    result.unwrap_err().to_errno()
}

#[test]
fn compression_ioctls_follow_the_kernel_rules() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-ioctls");
    let img = compression_image(&scratch);
    let data = text(300_000, 11);
    let (ino, released) = {
        let fs = open_writable(&img);
        fs.set_compress_options(CompressOptions {
            algorithm: CompressAlgorithm::Zstd,
            level: 5,
            ..Default::default()
        })
        .unwrap();
        let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
        fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
        let f = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
        assert_eq!(
            fs.compress_option(f.ino).unwrap(),
            (CompressAlgorithm::Zstd, 2)
        );
        // An empty compressed file takes new options; the level follows the mount's algorithm.
        let lz4 = fs.set_compress_option(f.ino, 1, 4).unwrap();
        let c = lz4.compression.unwrap();
        assert_eq!(
            (c.algorithm, c.log_cluster_size, c.level()),
            (CompressAlgorithm::Lz4, 4, 0)
        );
        let zstd = fs.set_compress_option(f.ino, 2, 3).unwrap();
        assert_eq!(zstd.compression.unwrap().level(), 5);
        assert_eq!(errno(fs.set_compress_option(f.ino, 4, 3)), libc::EINVAL);
        assert_eq!(errno(fs.set_compress_option(f.ino, 1, 9)), libc::EINVAL);
        let plain = fs.create(ROOT, b"plain", 0o644, 0, 0).unwrap();
        assert_eq!(errno(fs.compress_option(plain.ino)), libc::ENODATA);
        assert_eq!(errno(fs.set_compress_option(plain.ino, 1, 2)), libc::EINVAL);
        assert_eq!(errno(fs.compress_blocks(plain.ino)), libc::EINVAL);
        assert_eq!(errno(fs.release_compress_blocks(plain.ino)), libc::EINVAL);

        assert_eq!(fs.write(f.ino, 0, &data).unwrap(), data.len());
        assert_eq!(errno(fs.set_compress_option(f.ino, 1, 2)), libc::EFBIG);
        // compress_mode=fs: writes compress, the ioctls that do it are refused.
        assert_eq!(errno(fs.compress_file(f.ino)), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.decompress_file(f.ino)), libc::EOPNOTSUPP);
        let saved = fs.compress_blocks(f.ino).unwrap();
        assert!(saved > 0);
        // Not released: nothing to reserve while blocks are still saved.
        assert_eq!(fs.reserve_compress_blocks(f.ino).unwrap(), 0);

        let free = fs.statfs().blocks_free;
        assert_eq!(fs.release_compress_blocks(f.ino).unwrap(), saved);
        assert_eq!(fs.statfs().blocks_free, free + saved);
        assert_eq!(fs.compress_blocks(f.ino).unwrap(), 0);
        assert_eq!(errno(fs.release_compress_blocks(f.ino)), libc::EINVAL);
        assert_eq!(read_all(&fs, f.ino), data);
        assert_eq!(errno(fs.write(f.ino, 0, b"x")), libc::EPERM);
        let cut = SetAttr {
            size: Some(1000),
            ..Default::default()
        };
        assert_eq!(errno(fs.setattr(f.ino, &cut)), libc::EINVAL);
        let alloc = FallocMode::Allocate { keep_size: true };
        assert_eq!(errno(fs.fallocate(f.ino, 0, 4096, alloc)), libc::EPERM);
        fs.unmount().unwrap();
        (f.ino, saved)
    };
    assert_clean(&img);
    let fs = open_writable(&img);
    assert!(fs.inode(ino).unwrap().compression.unwrap().released);
    assert_eq!(read_all(&fs, ino), data);
    let free = fs.statfs().blocks_free;
    assert_eq!(fs.reserve_compress_blocks(ino).unwrap(), released);
    assert_eq!(fs.statfs().blocks_free, free - released);
    assert_eq!(fs.compress_blocks(ino).unwrap(), released);
    assert!(!fs.inode(ino).unwrap().compression.unwrap().released);
    // Saving nothing and never released: EINVAL.
    let dir = fs.resolve("/c").unwrap().ino;
    let noisy = fs.create(dir, b"noise", 0o644, 0, 0).unwrap();
    fs.write(noisy.ino, 0, &noise(50_000, 2)).unwrap();
    assert_eq!(errno(fs.reserve_compress_blocks(noisy.ino)), libc::EINVAL);
    fs.write(ino, 5, b"written again").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img);

    // Without the feature, as the kernel: EOPNOTSUPP.
    let plain_img = scratch.join("plain.img");
    mkfs_f2fs(&plain_img, 64 * MIB, &["-O", "extra_attr"]);
    let fs = open_writable(&plain_img);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    assert_eq!(errno(fs.compress_blocks(f.ino)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.compress_option(f.ino)), libc::EOPNOTSUPP);
}

#[test]
fn compress_mode_user_compresses_only_on_request() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-user-mode");
    let img = compression_image(&scratch);
    let fs = open_writable(&img);
    fs.set_compress_options(CompressOptions {
        mode: CompressMode::User,
        ..Default::default()
    })
    .unwrap();
    let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
    let f = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
    let mut data = text(2 * 1024 * 1024 + 5000, 3);
    fs.write(f.ino, 0, &data).unwrap();
    assert_eq!(
        fs.compress_blocks(f.ino).unwrap(),
        0,
        "writes store raw clusters"
    );
    // Nothing compressed: decompressing is a no-op.
    fs.decompress_file(f.ino).unwrap();
    fs.compress_file(f.ino).unwrap();
    let saved = fs.compress_blocks(f.ino).unwrap();
    assert!(saved >= data.len() as u64 / 4096 / 4, "{saved}");
    assert_eq!(read_all(&fs, f.ino), data);
    // A write into a compressed cluster stores it raw again.
    fs.write(f.ino, 100, b"raw again").unwrap();
    data[100..109].copy_from_slice(b"raw again");
    assert!(fs.compress_blocks(f.ino).unwrap() < saved);
    fs.unmount().unwrap();
    assert_clean(&img);

    let fs = open_writable(&img);
    fs.set_compress_options(CompressOptions {
        mode: CompressMode::User,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(read_all(&fs, f.ino), data);
    fs.decompress_file(f.ino).unwrap();
    assert_eq!(fs.compress_blocks(f.ino).unwrap(), 0);
    assert!(fs.inode(f.ino).unwrap().compression.is_some(), "keeps +c");
    assert_eq!(read_all(&fs, f.ino), data);
    fs.release_compress_blocks(f.ino).unwrap();
    assert_eq!(errno(fs.compress_file(f.ino)), libc::EINVAL);
    fs.unmount().unwrap();
    assert_clean(&img);
}

#[test]
fn compressed_write_out_of_space_is_short() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-enospc");
    let img = scratch.join("small.img");
    mkfs_f2fs(&img, 64 * MIB, &["-O", "extra_attr,compression"]);
    let fs = open_writable(&img);
    let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
    let f = fs.create(dir.ino, b"big", 0o644, 0, 0).unwrap();
    // Incompressible: every cluster is stored raw, so the image fills.
    let data = noise(96 * MIB as usize, 8);
    let n = fs.write(f.ino, 0, &data).unwrap();
    assert!(n > 0 && n < data.len(), "{n}");
    assert_eq!(fs.inode(f.ino).unwrap().size, n as u64);
    assert_eq!(errno(fs.write(f.ino, n as u64, &data[n..])), libc::ENOSPC);
    assert!(read_all(&fs, f.ino) == data[..n]);
    fs.unmount().unwrap();
    assert_clean(&img);
}

#[test]
fn cleaning_moves_compressed_clusters() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-gc");
    let img = compression_image(&scratch);
    let mut kept = Vec::new();
    {
        let fs = open_writable(&img);
        let files = write_compressed_files(&fs, CompressOptions::default(), 4);
        // Fill with more compressed files, then free every other one so
        // that the cold data segments are half invalid.
        let dir = fs.resolve("/c").unwrap().ino;
        for i in 0..60u64 {
            let name = format!("f{i}");
            let f = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
            let mut data = text(300_000, i);
            data.extend(noise(100_000, i));
            fs.write(f.ino, 0, &data).unwrap();
            if i % 2 == 0 {
                kept.push((f.ino, data));
            } else {
                fs.unlink(dir, name.as_bytes()).unwrap();
            }
        }
        kept.extend(files);
        let before = fs.gc_stats().data_blocks_moved;
        for _ in 0..40 {
            fs.garbage_collect(true).unwrap();
        }
        assert!(
            fs.gc_stats().data_blocks_moved > before,
            "{:?}",
            fs.gc_stats()
        );
        for (ino, data) in &kept {
            assert!(read_all(&fs, *ino) == *data, "inode {ino}");
        }
        fs.unmount().unwrap();
    }
    assert_clean(&img);
    let fs = open_read_only(&img);
    for (ino, data) in &kept {
        assert!(read_all(&fs, *ino) == *data, "inode {ino}");
    }
}

// ---------------------------------------------------------------- independent codecs
//
// Debian's sload.f2fs and dump.f2fs 1.15 have no LZ4 or LZO, so the bytes
// of our clusters are checked with independent decoders of the kernel's
// formats (the test kit's codecs.py: liblz4, libzstd, liblzo2), and streams those
// libraries make must read with ours. Where the clusters are comes from
// dump.f2fs (the inode's slots), the payload from the image file.

const ALGORITHM_NUMBERS: [(CompressAlgorithm, u8); 4] = [
    (CompressAlgorithm::Lzo, 0),
    (CompressAlgorithm::Lz4, 1),
    (CompressAlgorithm::Zstd, 2),
    (CompressAlgorithm::LzoRle, 3),
];

fn algorithm_number(algorithm: CompressAlgorithm) -> u8 {
    ALGORITHM_NUMBERS
        .iter()
        .find(|(a, _)| *a == algorithm)
        .expect("every algorithm")
        .1
}

/// Runs the test kit's codecs.py in `mode` on records (algorithm, param, bytes);
/// returns per record the bytes and checksum, or the library's error.
fn run_codecs(
    mode: &str,
    records: &[(CompressAlgorithm, u32, Vec<u8>)],
) -> Vec<Result<(u32, Vec<u8>), String>> {
    use std::io::Write;
    let script = support::codecs_script();
    let mut input = Vec::new();
    for (algorithm, param, bytes) in records {
        input.push(algorithm_number(*algorithm));
        input.extend_from_slice(&param.to_le_bytes());
        input.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        input.extend_from_slice(bytes);
    }
    let mut child = std::process::Command::new(SYSTEM_PYTHON)
        .arg(&script)
        .arg(mode)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "codecs.py {mode} failed");
    let mut results = Vec::new();
    let mut at = 0;
    let word = |at: usize| u32::from_le_bytes(out.stdout[at..at + 4].try_into().unwrap());
    while at < out.stdout.len() {
        let (ok, crc, len) = (out.stdout[at] == 1, word(at + 1), word(at + 5) as usize);
        let bytes = out.stdout[at + 9..at + 9 + len].to_vec();
        at += 9 + len;
        results.push(if ok {
            Ok((crc, bytes))
        } else {
            Err(String::from_utf8_lossy(&bytes).into_owned())
        });
    }
    assert_eq!(results.len(), records.len());
    results
}

/// The slots of file `ino` held in its inode, as dump.f2fs prints them
/// (`i_addr[0x..]` counts from the start of i_addr, extra attributes too).
fn slots_from_dump(img: &Path, ino: u32) -> Vec<u32> {
    let text = dump_f2fs_inode(img, ino);
    let extra = parse_dump_fields(&text)["i_extra_isize"] as usize / 4;
    let mut slots = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("i_addr[0x")) {
        let index = usize::from_str_radix(&line[9..line.find(']').unwrap()], 16).unwrap();
        let value = line.rsplit(" : ").next().unwrap().trim_end_matches(']');
        if index >= extra {
            slots.resize(slots.len().max(index - extra + 1), 0);
            slots[index - extra] = value.trim().parse::<u64>().unwrap() as u32;
        }
    }
    slots
}

/// The compressed clusters of a file as written in the image: (cluster
/// index, header clen, header chksum, payload).
fn compressed_clusters(img: &Path, ino: u32, log: u8) -> Vec<(usize, u32, u32, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let image = std::fs::File::open(img).unwrap();
    let slots = slots_from_dump(img, ino);
    let cs = 1usize << log;
    let mut out = Vec::new();
    for (cluster, slots) in slots.chunks(cs).enumerate() {
        if slots[0] != 0xffff_fffe {
            continue;
        }
        let blocks: Vec<u32> = slots[1..]
            .iter()
            .copied()
            .take_while(|&a| a != 0 && a != 0xffff_ffff)
            .collect();
        let mut stream = vec![0u8; blocks.len() * 4096];
        for (chunk, &addr) in stream.chunks_mut(4096).zip(&blocks) {
            image.read_exact_at(chunk, addr as u64 * 4096).unwrap();
        }
        let word = |at: usize| u32::from_le_bytes(stream[at..at + 4].try_into().unwrap());
        let (clen, chksum) = (word(0), word(4));
        assert!(
            24 + clen as usize <= stream.len(),
            "cluster {cluster}: clen {clen}"
        );
        out.push((
            cluster,
            clen,
            chksum,
            stream[24..24 + clen as usize].to_vec(),
        ));
    }
    out
}

#[test]
fn independent_decoders_read_our_clusters() {
    if !require_f2fs_tools() || !require_python_codecs() {
        return;
    }
    let scratch = Scratch::new("compress-interop");
    for algorithm in CompressAlgorithm::ALL {
        for (log, checksum) in [(2u8, true), (3, false), (5, true)] {
            let img = compression_image(&scratch);
            // Text, zero runs (LZO-RLE's case), a partial last cluster; all in the inode's slots.
            let mut data = text(300_000, log as u64);
            data.extend(vec![0u8; 100_000]);
            data.extend(text(55_555, 9));
            let ino = {
                let fs = open_writable(&img);
                fs.set_compress_options(CompressOptions {
                    algorithm,
                    log_cluster_size: log,
                    checksum,
                    ..Default::default()
                })
                .unwrap();
                let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
                fs.set_flags(f.ino, inode_flag::COMPR).unwrap();
                fs.write(f.ino, 0, &data).unwrap();
                fs.unmount().unwrap();
                f.ino
            };
            assert_clean(&img);
            let clusters = compressed_clusters(&img, ino, log);
            let cluster_bytes = 4096usize << log;
            assert!(
                clusters.len() >= data.len() / cluster_bytes * 3 / 4,
                "{} log {log}: only {} compressed clusters",
                algorithm.name(),
                clusters.len()
            );
            let records: Vec<_> = clusters
                .iter()
                .map(|(_, _, _, payload)| (algorithm, cluster_bytes as u32, payload.clone()))
                .collect();
            for ((cluster, _, chksum, _), result) in
                clusters.iter().zip(run_codecs("decode", &records))
            {
                let what = format!("{} log {log} cluster {cluster}", algorithm.name());
                let (crc, decoded) = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                let start = cluster * cluster_bytes;
                let mut want = data[start..data.len().min(start + cluster_bytes)].to_vec();
                want.resize(cluster_bytes, 0);
                assert!(decoded == want, "{what}: {} bytes decoded", decoded.len());
                assert_eq!(*chksum, if checksum { crc } else { 0 }, "{what}: checksum");
            }
        }
    }
}

#[test]
fn our_decoder_reads_independent_streams() {
    if !require_python_codecs() {
        return;
    }
    let mut clusters = Vec::new();
    for log in [2u8, 3] {
        let len = 4096usize << log;
        let mut mixed = text(len / 2, log as u64);
        mixed.extend(vec![0u8; len / 4]);
        mixed.extend(noise(len - mixed.len(), 5));
        clusters.extend([text(len, 3), vec![0u8; len], mixed]);
    }
    for (algorithm, _) in ALGORITHM_NUMBERS {
        for variant in [0u32, 1] {
            let records: Vec<_> = clusters
                .iter()
                .map(|data| (algorithm, variant, data.clone()))
                .collect();
            for (data, result) in clusters.iter().zip(run_codecs("encode", &records)) {
                let what = format!(
                    "{} variant {variant}, {} bytes",
                    algorithm.name(),
                    data.len()
                );
                let (_, stream) = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                let mut out = vec![0xAAu8; data.len()];
                decompress(algorithm, &stream, &mut out).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(out == *data, "{what}: wrong bytes");
                // A cluster's stream must fill it exactly: one byte short is refused.
                let mut short = vec![0u8; data.len() - 1];
                assert!(
                    decompress(algorithm, &stream, &mut short).is_err(),
                    "{what}: short"
                );
            }
        }
    }
}

/// Damage outside the payload: an unknown algorithm in the inode and a
/// cluster whose slots break the kernel's rules are `Corrupt` errors that
/// name the inode (the first when the inode is read, as the kernel's iget;
/// the second when the cluster is), and other files read on.
#[test]
fn unknown_algorithms_and_bad_slots_are_corrupt_errors() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("compress-bad-inode");
    let img = compression_image(&scratch);
    let files = {
        let fs = open_writable(&img);
        let files = write_compressed_files(&fs, CompressOptions::default(), 3);
        fs.unmount().unwrap();
        files
    };
    let (text_ino, noise_ino, zeros_ino) = (files[0].0, files[1].0, files[2].0);
    let node_of = |ino: u32| {
        let fs = open_read_only(&img);
        let entry = fs.node_manager().nat_entry(ino).unwrap();
        entry.block_addr.get()
    };
    let extra_words = open_read_only(&img)
        .inode(text_ino)
        .unwrap()
        .layout
        .extra_words;
    let slot_at = |slot: usize| I_ADDR_OFFSET + 4 * (extra_words + slot);
    // Cluster 0 of the text is [COMPRESS_ADDR, payload, payload, NEW_ADDR]:
    // an empty slot before a payload block breaks it.
    assert_eq!(
        slots_from_dump(&img, text_ino)[..4]
            .iter()
            .filter(|&&a| a == NEW_ADDR)
            .count(),
        1
    );
    patch(&img, node_of(text_ino), slot_at(1), &NEW_ADDR.to_le_bytes());
    patch(&img, node_of(noise_ino), I_COMPRESS_ALGORITHM_OFFSET, &[9]);
    let fs = open_read_only(&img);
    let mut buf = vec![0u8; 4096];
    match fs.read_ino(text_ino, 0, &mut buf) {
        Err(Error::Corrupt(c)) => {
            let text = c.to_string();
            assert!(
                text.contains(&format!("inode {text_ino} cluster 0")),
                "{text}"
            );
            assert!(text.contains("after an empty slot"), "{text}");
        }
        other => panic!("bad slots: {other:?}"),
    }
    match fs.inode(noise_ino) {
        Err(Error::Corrupt(c)) => {
            let text = c.to_string();
            assert!(text.contains(&format!("inode {noise_ino}")), "{text}");
            assert!(text.contains("unknown compression algorithm 9"), "{text}");
        }
        other => panic!("algorithm 9: {other:?}"),
    }
    assert_eq!(read_all(&fs, zeros_ino), files[2].1);
    // Our fsck names both; fsck.f2fs 1.15 checks neither.
    let report = f2fuse_engine::internals::fsck::check(&fs).unwrap();
    let problems = report.problems.join("\n");
    for ino in [text_ino, noise_ino] {
        assert!(problems.contains(&format!("inode {ino}")), "{problems}");
    }
}
