//! Writes the hand-made regression inputs of the `image` target to
//! `regressions/image/` (run from the fuzz directory):
//! `cargo run --example make_regressions`.
//!
//! Each one reproduces an engine or layout bug found while writing the
//! corrupt-image suite; all panicked or hung before their fixes.

use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::Fs;
use f2fuse_fuzz::{seed_images, SeedImage};
use f2fuse_layout::checkpoint::{seal_checkpoint_block, Checkpoint};
use f2fuse_layout::node::Inode;
use f2fuse_layout::superblock::SuperBlock;
use f2fuse_layout::{BLOCKS_PER_SEG, F2FS_SUPER_OFFSET, MAX_DIR_HASH_DEPTH};
use std::mem::offset_of;

/// An `image` input: seed 0 plus patches `(blkaddr, offset, bytes)`.
fn input(seed: &SeedImage, patches: &[(u64, usize, Vec<u8>)]) -> Vec<u8> {
    let keys: Vec<u64> = seed.blocks.keys().copied().collect();
    let mut out = vec![0u8];
    for (blkaddr, offset, bytes) in patches {
        for chunk_start in (0..bytes.len()).step_by(255) {
            let chunk = &bytes[chunk_start..bytes.len().min(chunk_start + 255)];
            let index = keys
                .iter()
                .position(|k| k == blkaddr)
                .unwrap_or_else(|| panic!("block {blkaddr} is all zeros in the seed"));
            out.push(u8::try_from(index).expect("selector fits a byte"));
            out.extend_from_slice(&((offset + chunk_start) as u16).to_le_bytes());
            out.push(chunk.len() as u8);
            out.extend_from_slice(chunk);
        }
    }
    out
}

/// Both superblock copies rewritten after `edit`.
fn superblock_patches(seed: &SeedImage, edit: impl FnOnce(&mut SuperBlock)) -> Vec<u8> {
    let mut sb = seed.superblock();
    edit(&mut sb);
    let block = sb.to_block();
    let body = block[F2FS_SUPER_OFFSET..F2FS_SUPER_OFFSET + 0x100].to_vec();
    input(
        seed,
        &[
            (0, F2FS_SUPER_OFFSET, body.clone()),
            (1, F2FS_SUPER_OFFSET, body),
        ],
    )
}

/// Moves the main area behind `ssa` SSA segments and makes it `main` long.
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

fn main() {
    let seed = &seed_images()[0];
    let dir = std::path::Path::new("regressions/image");
    std::fs::create_dir_all(dir).expect("create regressions/image");
    let write = |name: &str, bytes: Vec<u8>| {
        std::fs::write(dir.join(name), bytes).expect("write regression");
        println!("regressions/image/{name}");
    };

    // layout SuperBlock::validate: a SIT too small for the main area
    // (SitTable::load indexed past the SIT version bitmap).
    write(
        "sit-smaller-than-main",
        superblock_patches(seed, |sb| resize_main(sb, 56, 28_200)),
    );

    // layout SuperBlock::validate: a NAT with more than 2^32 nids
    // (SuperBlock::max_nid overflowed).
    write(
        "nat-over-32-bit-nids",
        superblock_patches(seed, |sb| {
            sb.segment_count_nat.set(36_876);
            sb.ssa_blkaddr
                .set(sb.nat_blkaddr.get() + 36_876 * BLOCKS_PER_SEG);
            let (ssa, main) = (sb.segment_count_ssa.get(), sb.segment_count_main.get());
            resize_main(sb, ssa, main);
        }),
    );

    // engine load_checkpoint: cp_pack_total_block_count in range but too
    // small for the summary blocks (u64 subtraction underflowed).
    let sb = seed.superblock();
    let start = sb.cp_blkaddr.get() as u64;
    let mut head = seed.block(start);
    let total = (3..7u64)
        .find(|t| seed.blocks.contains_key(&(start + t - 1)))
        .expect("a non-zero block early in the pack");
    let at = offset_of!(Checkpoint, cp_pack_total_block_count);
    head[at..at + 4].copy_from_slice(&(total as u32).to_le_bytes());
    seal_checkpoint_block(&mut head);
    let end = Checkpoint::from_block(&head).checksum_offset.get() as usize + 4;
    write(
        "checkpoint-pack-too-small",
        input(
            seed,
            &[
                (start, 0, head[..end].to_vec()),
                (start + total - 1, 0, head[..end].to_vec()),
            ],
        ),
    );

    // engine dir::read_dir: a directory with a huge (but legal) i_size and
    // the deepest hash table was read block by block (~2^28 steps).
    let fs = Fs::open(Box::new(seed.device())).expect("seed opens");
    let dir_ino = fs.resolve("/dir").expect("/dir").ino;
    let blkaddr = fs
        .node_manager()
        .nat_entry(dir_ino)
        .unwrap()
        .block_addr
        .get() as u64;
    write(
        "sparse-huge-directory",
        input(
            seed,
            &[
                (
                    blkaddr,
                    offset_of!(Inode, i_size),
                    (1u64 << 40).to_le_bytes().to_vec(),
                ),
                (
                    blkaddr,
                    offset_of!(Inode, i_current_depth),
                    MAX_DIR_HASH_DEPTH.to_le_bytes().to_vec(),
                ),
            ],
        ),
    );
}
