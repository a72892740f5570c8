//! fallocate(2) modes and SEEK_DATA/SEEK_HOLE in the engine, against an
//! in-memory model of one file: its bytes and, per block, whether it is a
//! hole, a reservation (NEW_ADDR) or data. After every operation the size,
//! the whole contents and every block's state must match, and so must
//! SEEK_DATA/SEEK_HOLE answers from random offsets; every sequence ends
//! with an unmount, fsck.f2fs and our fsck, and a reopen that must show the
//! same file. Random sequences print their seed and operations on failure;
//! shrunk failures are kept as named tests at the bottom.
//!
//! `F2FUSE_FALLOC_CASES` sets the number of random sequences (default 12).

use f2fuse_testkit as support;

use f2fuse_engine::internals::data::BlockMapper;
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{FallocMode, Fs, OpenOptions, SeekTarget};
use f2fuse_layout::{F2FS_ROOT_INO as ROOT, NEW_ADDR, NULL_ADDR};
use std::path::PathBuf;
/// The model tracks reservations block by block: writes must not turn the
/// reserved blocks around them into data (extent_zeroout_len, tested in ipu.rs).
fn open_reserving(img: &std::path::Path) -> Fs {
    let fs = open_writable(img);
    fs.set_tunable("extent_zeroout_len", 0).unwrap();
    fs
}

use support::*;

const BS: u64 = 4096;
/// Largest file offset the random operations touch.
const SPAN: u64 = 1200 * BS;

#[derive(Debug, Clone, Copy)]
enum Op {
    Write(u64, u64),
    Truncate(u64),
    Falloc(u64, u64, FallocMode),
    Seek(u64, SeekTarget),
    Reopen,
}

fn fresh(scratch: &Scratch, size: u64) -> PathBuf {
    let img = scratch.join("img");
    let opts = MkfsOptions {
        features: parse_features("extra_attr,inode_checksum,flexible_inline_xattr").unwrap(),
        ..MkfsOptions::default()
    };
    format_path(&img, Some(size), &opts).unwrap();
    img
}

fn pattern(off: u64, len: u64, seed: u64) -> Vec<u8> {
    (off..off + len)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8 | 1)
        .collect()
}

/// One file under test: the engine's and the model's view.
struct Subject {
    img: PathBuf,
    fs: Option<Fs>,
    ino: u32,
    model: FileModel,
    log: Vec<Op>,
}

impl Subject {
    fn new(img: PathBuf) -> Subject {
        let fs = open_reserving(&img);
        let ino = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
        Subject {
            img,
            fs: Some(fs),
            ino,
            model: FileModel::default(),
            log: Vec::new(),
        }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    fn fail(&self, what: String) -> ! {
        panic!("{what}\noperations so far:\n{:#?}", self.log);
    }

    fn apply(&mut self, op: Op) {
        self.log.push(op);
        match op {
            Op::Write(off, len) => {
                let data = pattern(off, len, self.log.len() as u64);
                let n = self.fs().write(self.ino, off, &data);
                if n.as_ref().ok() != Some(&data.len()) {
                    self.fail(format!("write {off}+{len}: {n:?}"));
                }
                self.model.write(off, &data);
            }
            Op::Truncate(size) => {
                let attr = f2fuse_engine::internals::fs::SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                if let Err(e) = self.fs().setattr(self.ino, &attr) {
                    self.fail(format!("truncate {size}: {e}"));
                }
                self.model.truncate(size);
            }
            Op::Falloc(off, len, mode) => {
                let got = self
                    .fs()
                    .fallocate(self.ino, off, len, mode)
                    .map_err(|e| e.to_errno());
                let want = self.model.fallocate(off, len, mode);
                if got != want {
                    self.fail(format!(
                        "fallocate {off}+{len} {mode:?}: {got:?}, model {want:?}"
                    ));
                }
            }
            Op::Seek(off, target) => {
                let got = self
                    .fs()
                    .seek(self.ino, off, target)
                    .map_err(|e| e.to_errno());
                let want = self.model.seek(off, target);
                if got != want {
                    self.fail(format!(
                        "seek {target:?} from {off}: {got:?}, model {want:?}"
                    ));
                }
            }
            Op::Reopen => {
                self.fs.take().unwrap().unmount().unwrap();
                if let Err(report) = fsck_f2fs(&self.img) {
                    self.fail(format!("fsck after reopen op:\n{report}"));
                }
                self.fs = Some(open_reserving(&self.img));
            }
        }
        self.check();
    }

    /// Size, contents and every block's state must match the model.
    fn check(&self) {
        let fs = self.fs();
        let inode = fs.inode(self.ino).unwrap();
        if inode.size != self.model.size() {
            self.fail(format!("size {}, model {}", inode.size, self.model.size()));
        }
        let mut buf = vec![0u8; inode.size as usize];
        fs.read(&inode, 0, &mut buf).unwrap();
        if let Some(at) = buf.iter().zip(&self.model.bytes).position(|(a, b)| a != b) {
            self.fail(format!("contents differ first at byte {at}"));
        }
        if fs.has_inline_data(&inode) {
            return; // No blocks: the model's block 0 is the inline area.
        }
        let mut mapper = BlockMapper::new(fs.node_manager(), &inode);
        let last = self.model.blocks.keys().next_back().map_or(0, |b| b + 1);
        for b in 0..last.max(inode.size.div_ceil(BS)).max(SPAN / BS + 64) {
            let got = match mapper.map(b).unwrap() {
                NULL_ADDR => None,
                NEW_ADDR => Some(Block::Reserved),
                _ => Some(Block::Data),
            };
            let want = self.model.blocks.get(&b).copied();
            if got != want {
                self.fail(format!("block {b}: {got:?}, model {want:?}"));
            }
        }
        let counted = self.model.blocks.len() as u64 + 1;
        if inode.blocks < counted {
            self.fail(format!(
                "i_blocks {} < {counted} blocks + inode",
                inode.blocks
            ));
        }
    }

    /// Unmounts, checks with both fsck tools, reopens read-only and compares.
    fn finish(mut self) {
        self.fs.take().unwrap().unmount().unwrap();
        if let Err(report) = fsck_f2fs(&self.img) {
            self.fail(format!("fsck at the end:\n{report}"));
        }
        self.fs = Some(Fs::open_path(&self.img, OpenOptions::default()).unwrap());
        self.check();
    }
}

fn run_ops(ops: &[Op]) {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("falloc");
    let mut subject = Subject::new(fresh(&scratch, 64 << 20));
    for &op in ops {
        subject.apply(op);
    }
    subject.finish();
}

/// An offset below `limit`, block-aligned half of the time.
fn random_offset(rng: &mut Rng, limit: u64) -> u64 {
    let off = rng.below(limit);
    if rng.below(2) == 0 {
        off / BS * BS
    } else {
        off
    }
}

/// A length of up to ~80 blocks, block-aligned half of the time.
fn random_len(rng: &mut Rng) -> u64 {
    let len = 1 + rng.below(80 * BS);
    if rng.below(2) == 0 {
        len.div_ceil(BS) * BS
    } else {
        len
    }
}

fn random_op(rng: &mut Rng, size: u64) -> Op {
    let keep_size = rng.below(2) == 0;
    let near = (size + 8 * BS).min(SPAN);
    let falloc = |rng: &mut Rng, mode| {
        let off = random_offset(rng, near);
        Op::Falloc(off, random_len(rng).min(SPAN - off).max(1), mode)
    };
    match rng.below(12) {
        0 | 1 => {
            let off = random_offset(rng, near);
            Op::Write(off, random_len(rng).min(SPAN - off).max(1))
        }
        2 => Op::Truncate(random_offset(rng, near)),
        3 => falloc(rng, FallocMode::Allocate { keep_size }),
        4 | 5 => falloc(rng, FallocMode::PunchHole),
        6 => falloc(rng, FallocMode::ZeroRange { keep_size }),
        7 => falloc(rng, FallocMode::CollapseRange),
        8 => falloc(rng, FallocMode::InsertRange),
        9 | 10 => Op::Seek(
            random_offset(rng, size + BS),
            if rng.below(2) == 0 {
                SeekTarget::Data
            } else {
                SeekTarget::Hole
            },
        ),
        _ if rng.below(4) == 0 => Op::Reopen,
        _ => falloc(rng, FallocMode::Allocate { keep_size: false }),
    }
}

#[test]
fn random_sequences_match_the_model() {
    if !require_f2fs_tools() {
        return;
    }
    let cases: u64 = std::env::var("F2FUSE_FALLOC_CASES")
        .map(|v| v.parse().expect("F2FUSE_FALLOC_CASES: a number"))
        .unwrap_or(12);
    for case in 0..cases {
        let seed = 0xfa11_0c00 + case;
        let scratch = Scratch::new("falloc");
        let mut subject = Subject::new(fresh(&scratch, 64 << 20));
        let mut rng = Rng(seed | 1);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Start with data so the file is not inline.
            subject.apply(Op::Write(0, 24 * BS));
            for _ in 0..120 {
                let op = random_op(&mut rng, subject.model.size());
                subject.apply(op);
            }
            subject
        }));
        match run {
            Ok(subject) => subject.finish(),
            Err(e) => {
                eprintln!("failing seed {seed:#x}");
                std::panic::resume_unwind(e);
            }
        }
    }
}

#[test]
fn mode_flags_follow_the_kernel_rules() {
    use libc::{
        FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
        FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO,
    };
    let decode = |flags| FallocMode::from_flags(flags).map_err(|e| e.to_errno());
    assert_eq!(decode(0), Ok(FallocMode::Allocate { keep_size: false }));
    assert_eq!(decode(KEEP), Ok(FallocMode::Allocate { keep_size: true }));
    assert_eq!(decode(PUNCH | KEEP), Ok(FallocMode::PunchHole));
    assert_eq!(decode(PUNCH), Err(libc::EOPNOTSUPP));
    assert_eq!(decode(ZERO), Ok(FallocMode::ZeroRange { keep_size: false }));
    assert_eq!(
        decode(ZERO | KEEP),
        Ok(FallocMode::ZeroRange { keep_size: true })
    );
    assert_eq!(decode(ZERO | PUNCH | KEEP), Err(libc::EINVAL));
    assert_eq!(decode(COLLAPSE), Ok(FallocMode::CollapseRange));
    assert_eq!(decode(COLLAPSE | KEEP), Err(libc::EINVAL));
    assert_eq!(decode(INSERT), Ok(FallocMode::InsertRange));
    assert_eq!(decode(INSERT | KEEP), Err(libc::EINVAL));
    assert_eq!(decode(0x100), Err(libc::EOPNOTSUPP));
}

#[test]
fn each_mode_once() {
    let data = FallocMode::Allocate { keep_size: false };
    run_ops(&[
        Op::Write(0, 40 * BS),
        // Preallocation past EOF with and without the size.
        Op::Falloc(50 * BS, 10 * BS, FallocMode::Allocate { keep_size: true }),
        Op::Falloc(44 * BS + 100, 3 * BS, data),
        Op::Seek(40 * BS, SeekTarget::Data),
        Op::Seek(0, SeekTarget::Hole),
        // Writes into reserved blocks allocate them.
        Op::Write(45 * BS + 7, 2 * BS),
        Op::Falloc(3 * BS + 5, 6 * BS, FallocMode::PunchHole),
        Op::Seek(3 * BS + 100, SeekTarget::Hole),
        Op::Seek(4 * BS, SeekTarget::Data),
        Op::Falloc(
            20 * BS + 1,
            4 * BS,
            FallocMode::ZeroRange { keep_size: false },
        ),
        Op::Falloc(
            60 * BS,
            2 * BS + 3,
            FallocMode::ZeroRange { keep_size: true },
        ),
        Op::Falloc(8 * BS, 5 * BS, FallocMode::CollapseRange),
        Op::Falloc(2 * BS, 3 * BS, FallocMode::InsertRange),
        Op::Reopen,
        // Refusals: unaligned, reaching EOF, at EOF.
        Op::Falloc(BS + 1, BS, FallocMode::CollapseRange),
        Op::Falloc(0, 200 * BS, FallocMode::CollapseRange),
        Op::Falloc(300 * BS, BS, FallocMode::InsertRange),
        Op::Falloc(500 * BS, BS, FallocMode::PunchHole),
    ]);
}

#[test]
fn inline_file_converts_before_fallocate() {
    run_ops(&[
        Op::Write(10, 300),
        Op::Falloc(100, 50, FallocMode::PunchHole),
        Op::Falloc(0, 3 * BS, FallocMode::Allocate { keep_size: true }),
        Op::Seek(0, SeekTarget::Data),
        Op::Reopen,
    ]);
}

#[test]
fn enospc_while_preallocating_changes_nothing() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("falloc-enospc");
    let img = fresh(&scratch, 64 << 20);
    let fs = open_writable(&img);
    let ino = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(0, 5 * BS, 1)).unwrap();
    let before = fs.inode(ino).unwrap();
    let free = fs.statfs().blocks_available;
    for mode in [
        FallocMode::Allocate { keep_size: false },
        FallocMode::Allocate { keep_size: true },
        FallocMode::ZeroRange { keep_size: false },
    ] {
        let err = fs
            .fallocate(ino, 2 * BS, (free + 10) * BS, mode)
            .unwrap_err();
        assert_eq!(err.to_errno(), libc::ENOSPC, "{mode:?}: {err}");
        let after = fs.inode(ino).unwrap();
        assert_eq!(
            (after.size, after.blocks),
            (before.size, before.blocks),
            "{mode:?}"
        );
        assert_eq!(fs.statfs().blocks_available, free, "{mode:?}");
    }
    // The data blocks fit but the nodes on the way do not: ENOSPC partway,
    // the size unchanged, the image consistent (checked at the end).
    let other = fs.create(ROOT, b"rest", 0o644, 0, 0).unwrap().ino;
    let left = fs.statfs().blocks_available;
    let err = fs
        .fallocate(
            other,
            0,
            left * BS,
            FallocMode::Allocate { keep_size: false },
        )
        .unwrap_err();
    assert_eq!(err.to_errno(), libc::ENOSPC);
    assert_eq!(fs.inode(other).unwrap().size, 0);
    let truncate = f2fuse_engine::internals::fs::SetAttr {
        size: Some(0),
        ..Default::default()
    };
    fs.setattr(other, &truncate).unwrap();
    assert_eq!(fs.statfs().blocks_available, left);
    // With room for the nodes it fits; then nothing more does.
    let fit = left - 40;
    fs.fallocate(
        other,
        0,
        fit * BS,
        FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    assert_eq!(fs.inode(other).unwrap().size, fit * BS);
    assert!(fs.statfs().blocks_available < 40);
    let err = fs
        .fallocate(
            other,
            fit * BS,
            64 * BS,
            FallocMode::Allocate { keep_size: false },
        )
        .unwrap_err();
    assert_eq!(err.to_errno(), libc::ENOSPC);
    // The reserved space is usable by writes into it.
    fs.write(other, 3 * BS, &pattern(0, 2 * BS, 2)).unwrap();
    fs.unmount().unwrap();
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after ENOSPC:\n{report}");
    }
}
