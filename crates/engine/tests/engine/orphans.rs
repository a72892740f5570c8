//! The orphan list of a checkpoint pack is read back exactly.

use f2fuse_engine::internals::device::{Device, IoKind, MemDevice};
use f2fuse_engine::internals::mkfs::{format, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::Fs;
use f2fuse_layout::checkpoint::{seal_checkpoint_block, Checkpoint, OrphanBlock};
use f2fuse_layout::{cp_flag, F2FS_BLKSIZE, F2FS_ORPHANS_PER_BLOCK};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const SIZE: usize = 80 << 20;

/// Rewrites pack #1 of a fresh image with `inos` in orphan blocks before the summaries.
fn image_with_orphans(inos: &[u32]) -> Vec<u8> {
    let dev = Device::new(Box::new(MemDevice::new(SIZE as u64)));
    let opts = MkfsOptions {
        timestamp: Some(1),
        uuid: Some([1; 16]),
        checkpoint_ver: Some(11),
        ..MkfsOptions::default()
    };
    format(&dev, &opts, true).unwrap();
    let mut bytes = vec![0u8; SIZE];
    dev.read_blocks(IoKind::Meta, 0, &mut bytes).unwrap();

    let pack = 512 * F2FS_BLKSIZE;
    let block = |i: usize| bytes[pack + i * F2FS_BLKSIZE..pack + (i + 1) * F2FS_BLKSIZE].to_vec();
    let mut header = block(0);
    let body: Vec<Vec<u8>> = (1..5).map(block).collect(); // compacted summary + 3 node summaries
    let chunks: Vec<&[u32]> = inos.chunks(F2FS_ORPHANS_PER_BLOCK).collect();
    {
        let cp = Checkpoint::mut_from_bytes(&mut header[..192]).unwrap();
        cp.ckpt_flags
            .set(cp.ckpt_flags.get() | cp_flag::ORPHAN_PRESENT);
        cp.cp_pack_start_sum.set(1 + chunks.len() as u32);
        cp.cp_pack_total_block_count.set(6 + chunks.len() as u32);
    }
    seal_checkpoint_block(&mut header);
    let mut new_pack = header.clone();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut ob = OrphanBlock::new_zeroed();
        for (slot, ino) in chunk.iter().enumerate() {
            ob.ino[slot].set(*ino);
        }
        ob.blk_addr.set(i as u16 + 1);
        ob.blk_count.set(chunks.len() as u16);
        ob.entry_count.set(chunk.len() as u32);
        new_pack.extend_from_slice(ob.as_bytes());
    }
    for b in &body {
        new_pack.extend_from_slice(b);
    }
    new_pack.extend_from_slice(&header);
    bytes[pack..pack + new_pack.len()].copy_from_slice(&new_pack);
    bytes
}

#[test]
fn orphan_blocks_are_listed() {
    for inos in [vec![4u32], (5..5 + 1500).collect::<Vec<u32>>()] {
        let fs = Fs::open(Box::new(MemDevice::from_bytes(image_with_orphans(&inos)))).unwrap();
        assert_eq!(fs.orphans(), inos);
        assert!(fs.checkpoint_state().cp.has_flag(cp_flag::ORPHAN_PRESENT));
        // The rest of the pack is still found behind the orphan blocks.
        assert_eq!(fs.read_dir(3).unwrap().len(), 2);
    }
}

#[test]
fn orphan_entry_count_past_capacity_is_corrupt() {
    let mut bytes = image_with_orphans(&[4]);
    let orphan_block = 513 * F2FS_BLKSIZE;
    bytes[orphan_block + 4088..orphan_block + 4092].copy_from_slice(&5000u32.to_le_bytes());
    let err = Fs::open(Box::new(MemDevice::from_bytes(bytes)))
        .err()
        .unwrap();
    assert!(err.to_string().contains("orphan"), "{err}");
}
