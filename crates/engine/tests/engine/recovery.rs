//! Roll-forward recovery on chains we tamper with: a chain that loops must
//! fail the open with a corruption error (never hang), one that ends early
//! (an address outside the main area, a footer of another checkpoint) is
//! replayed up to there, and hostile contents never panic. Also: a chain
//! whose fsyncs skipped a checkpoint is replayed by both opens alike.

use f2fuse_testkit as support;

use f2fuse_engine::internals::checkpoint::load_checkpoint;
use f2fuse_engine::internals::device::{Device, MemDevice};
use f2fuse_engine::internals::mkfs::{format, parse_features, MkfsOptions};
use f2fuse_engine::internals::recovery::walk_chain;
use f2fuse_engine::internals::superblock::load_superblock;
use f2fuse_engine::{Error, Fs};
use f2fuse_layout::node::{
    footer_of, footer_of_mut, inode_checksum_seed, inode_of_mut, update_inode_checksum,
};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::sync::Arc;

use support::{fsck_f2fs, require_f2fs_tools, Scratch};

const SIZE: u64 = 64 << 20;
const BLOCK: usize = 4096;

/// An image whose last checkpoint is followed by the fsync chain of two new
/// files, "/a" then "/b" (one inode block each, FSYNC and DENT marked).
fn crashed_image() -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(SIZE));
    let opts = MkfsOptions {
        features: parse_features("extra_attr,inode_checksum,flexible_inline_xattr").unwrap(),
        timestamp: Some(1),
        uuid: Some([3; 16]),
        ..MkfsOptions::default()
    };
    format(&Device::new(Box::new(dev.clone())), &opts, true).unwrap();
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    for (name, len) in [(&b"a"[..], 9000usize), (b"b", 12_000)] {
        let f = fs.create(ROOT, name, 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &vec![name[0]; len]).unwrap();
        fs.fsync(f.ino).unwrap();
    }
    drop(fs);
    dev.snapshot()
}

/// The chain's block addresses, read as the recovery reads them.
fn chain_addrs(image: &[u8]) -> Vec<u32> {
    let dev = Device::new(Box::new(MemDevice::from_bytes(image.to_vec())));
    let sb = load_superblock(&dev).unwrap().sb;
    let cp = load_checkpoint(&dev, &sb).unwrap();
    let mut addrs = Vec::new();
    walk_chain(&dev, &sb, &cp, |c| {
        addrs.push(c.blkaddr);
        Ok(())
    })
    .unwrap();
    addrs
}

/// Changes node block `blkaddr` of the image, keeping its inode checksum valid.
fn tamper(image: &mut [u8], blkaddr: u32, change: impl FnOnce(&mut [u8])) {
    let features = parse_features("extra_attr,inode_checksum,flexible_inline_xattr").unwrap();
    let block = &mut image[blkaddr as usize * BLOCK..(blkaddr as usize + 1) * BLOCK];
    change(block);
    update_inode_checksum(block, features, inode_checksum_seed(&[3; 16]));
}

fn names(fs: &Fs) -> Vec<String> {
    let mut names: Vec<String> = fs
        .read_dir(ROOT)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    names
}

fn expect_corrupt(image: &[u8], what: &str) {
    for writable in [false, true] {
        let dev = Box::new(MemDevice::from_bytes(image.to_vec()));
        let result = if writable {
            Fs::open_writable(dev)
        } else {
            Fs::open(dev)
        };
        match result {
            Err(e @ Error::Corrupt(_)) => assert_eq!(e.to_errno(), libc::EUCLEAN),
            Err(e) => panic!("{what}: expected a corruption error, got {e}"),
            Ok(_) => panic!("{what}: the open succeeded"),
        }
    }
}

#[test]
fn the_chain_holds_both_fsyncs_in_order() {
    let image = crashed_image();
    let chain = chain_addrs(&image);
    assert_eq!(chain.len(), 2, "one inode block per fsync");
    assert_eq!(chain[1], chain[0] + 1, "consecutive in the warm node log");
    for (addr, name) in chain.iter().zip([b'a', b'b']) {
        let block = &image[*addr as usize * BLOCK..(*addr as usize + 1) * BLOCK];
        let footer = footer_of(block);
        assert!(
            footer.is_fsync() && footer.is_dent(),
            "marks of /{}",
            name as char
        );
        assert_eq!(footer.next_blkaddr.get(), addr + 1);
    }
    for writable in [false, true] {
        let dev = Box::new(MemDevice::from_bytes(image.clone()));
        let fs = if writable {
            Fs::open_writable(dev).unwrap()
        } else {
            Fs::open(dev).unwrap()
        };
        assert_eq!(names(&fs), ["a", "b"]);
    }
}

#[test]
fn a_chain_block_naming_itself_is_a_loop() {
    let mut image = crashed_image();
    let chain = chain_addrs(&image);
    let last = *chain.last().unwrap();
    tamper(&mut image, last, |b| {
        footer_of_mut(b).next_blkaddr.set(last)
    });
    expect_corrupt(&image, "self loop");
}

#[test]
fn a_loop_over_several_blocks_is_found() {
    let mut image = crashed_image();
    let chain = chain_addrs(&image);
    tamper(&mut image, chain[1], |b| {
        footer_of_mut(b).next_blkaddr.set(chain[0])
    });
    expect_corrupt(&image, "two-block loop");
}

#[test]
fn an_address_outside_the_main_area_ends_the_chain() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("recovery-range");
    let img = scratch.join("cut.img");
    for next in [0u32, 7, u32::MAX] {
        let mut image = crashed_image();
        let chain = chain_addrs(&image);
        tamper(&mut image, chain[0], |b| {
            footer_of_mut(b).next_blkaddr.set(next)
        });
        let dev = Arc::new(MemDevice::from_bytes(image));
        let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
        assert_eq!(names(&fs), ["a"], "next_blkaddr {next:#x}");
        fs.unmount().unwrap();
        std::fs::write(&img, dev.snapshot()).unwrap();
        fsck_f2fs(&img).unwrap_or_else(|r| panic!("next_blkaddr {next:#x}:\n{r}"));
    }
}

#[test]
fn a_footer_of_another_checkpoint_ends_the_chain() {
    for (position, expected) in [(0usize, &[][..]), (1, &["a"][..])] {
        let mut image = crashed_image();
        let chain = chain_addrs(&image);
        tamper(&mut image, chain[position], |b| {
            let footer = footer_of_mut(b);
            footer.cp_ver.set(footer.cp_ver.get() ^ (1 << 40));
        });
        for writable in [false, true] {
            let dev = Box::new(MemDevice::from_bytes(image.clone()));
            let fs = if writable {
                Fs::open_writable(dev).unwrap()
            } else {
                Fs::open(dev).unwrap()
            };
            assert_eq!(
                names(&fs),
                expected,
                "wrong cp_ver at chain block {position}"
            );
        }
    }
}

#[test]
fn hostile_chain_contents_are_corruption_not_panics() {
    // Each change gets the block and the inode number of "/a".
    type Change = fn(&mut [u8], u32);
    let cases: [(&str, Change); 4] = [
        ("data address outside the main area", |b, _| {
            let extra = u16::from_le_bytes([b[0x168], b[0x169]]) as usize;
            b[0x168 + extra..0x168 + extra + 4].copy_from_slice(&7u32.to_le_bytes());
        }),
        ("nid beyond the NAT", |b, _| {
            footer_of_mut(b).nid.set(u32::MAX)
        }),
        ("parent that is not a directory", |b, a| {
            inode_of_mut(b).i_pino.set(a)
        }),
        ("empty name", |b, _| inode_of_mut(b).i_namelen.set(0)),
    ];
    for (what, change) in cases {
        let mut image = crashed_image();
        let chain = chain_addrs(&image);
        let a = footer_of(&image[chain[0] as usize * BLOCK..][..BLOCK])
            .ino
            .get();
        tamper(&mut image, chain[1], |b| change(b, a));
        expect_corrupt(&image, what);
    }
}

#[test]
fn a_block_moved_between_indices_is_taken_from_its_old_slot() {
    if !require_f2fs_tools() {
        return;
    }
    let features = parse_features("extra_attr,inode_checksum,flexible_inline_xattr").unwrap();
    let mut image = crashed_image();
    // "/m": blocks A, B checkpointed; C written and fsynced after.
    let dev = Arc::new(MemDevice::from_bytes(image));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let m = fs.create(ROOT, b"m", 0o644, 0, 0).unwrap();
    let blocks: Vec<Vec<u8>> = (1..=3u8).map(|i| vec![i; BLOCK]).collect();
    fs.write(m.ino, 0, &blocks[..2].concat()).unwrap();
    fs.checkpoint().unwrap();
    fs.write(m.ino, 2 * BLOCK as u64, &blocks[2]).unwrap();
    fs.fsync(m.ino).unwrap();
    drop(fs);
    image = dev.snapshot();
    let chain = chain_addrs(&image);
    assert_eq!(chain.len(), 1);
    // As if the file had moved B to index 0 (a collapsed range) before the fsync.
    tamper(&mut image, chain[0], |b| {
        let layout =
            f2fuse_layout::node::InodeLayout::of(f2fuse_layout::node::inode_of(b), features)
                .unwrap();
        let raw = inode_of_mut(b);
        let b_addr = raw.data_addr(&layout, 1);
        raw.set_data_addr(&layout, 0, b_addr);
        raw.set_data_addr(&layout, 1, 0);
    });
    let dev = Arc::new(MemDevice::from_bytes(image));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    let inode = fs.resolve("/m").unwrap();
    let mut got = vec![0u8; 3 * BLOCK];
    fs.read(&inode, 0, &mut got).unwrap();
    assert_eq!(got, [&blocks[1][..], &[0; BLOCK], &blocks[2]].concat());
    assert_eq!(inode.blocks, 1 + 2, "the inode and two data blocks");
    fs.unmount().unwrap();
    let scratch = Scratch::new("recovery-move");
    let img = scratch.join("moved.img");
    std::fs::write(&img, dev.snapshot()).unwrap();
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("after recovery:\n{r}"));
}

/// New files whose data went to the hot data log after the checkpoint (a
/// hot extension; Linux 6.1 also writes fsync'd data there), each in a
/// directory with dentry blocks: replaying a name rewrites a dentry block,
/// which must not land on fsync'd data at the log's checkpointed position
/// that the chain has not claimed yet or has (found with Linux 6.1's
/// chains: a debug assertion in the allocator, or "points at a block
/// already in use").
#[test]
fn replayed_names_do_not_overwrite_fsyncd_data_in_the_hot_log() {
    if !require_f2fs_tools() {
        return;
    }
    let dev = Arc::new(MemDevice::from_bytes(crashed_image()));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let dirs: Vec<u32> = [&b"d"[..], b"e"]
        .iter()
        .map(|name| {
            let dir = fs.mkdir(ROOT, name, 0o755, 0, 0).unwrap().ino;
            for i in 0..200 {
                fs.create(dir, format!("entry_{i}").as_bytes(), 0o644, 0, 0)
                    .unwrap();
            }
            dir
        })
        .collect();
    fs.checkpoint().unwrap();
    let data: Vec<u8> = (0..5 * BLOCK).map(|i| (i % 251) as u8).collect();
    for &dir in &dirs {
        let hot = fs.create(dir, b"table.db", 0o644, 0, 0).unwrap().ino;
        fs.write(hot, 0, &data).unwrap();
        fs.fsync(hot).unwrap();
    }
    drop(fs);
    let image = dev.snapshot();
    assert_eq!(chain_addrs(&image).len(), 2, "two fsyncs, no checkpoint");

    let dev = Arc::new(MemDevice::from_bytes(image));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    for (path, &dir) in ["/d/table.db", "/e/table.db"].iter().zip(&dirs) {
        let inode = fs.resolve(path).unwrap();
        let mut got = vec![0u8; data.len()];
        fs.read(&inode, 0, &mut got).unwrap();
        assert!(got == data, "the fsync'd data of {path}");
        assert_eq!(fs.read_dir(dir).unwrap().len(), 2 + 200 + 1);
    }
    fs.unmount().unwrap();
    let scratch = Scratch::new("recovery-hot");
    let img = scratch.join("hot.img");
    std::fs::write(&img, dev.snapshot()).unwrap();
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("after recovery:\n{r}"));
}
