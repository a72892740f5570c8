//! Power cuts at any write: a workload of creates, writes, renames,
//! unlinks, fsyncs and checkpoints runs on a recording device; for a dense
//! sample of cut points the image is rebuilt with unflushed writes kept in
//! order, or lost and reordered at random. fsck.f2fs must accept the cut
//! image as it is (it walks fsync chains itself) and after our writable
//! open has replayed the chain; the recovered state must be exactly the
//! last checkpoint whose trailing header survived (nothing before it lost)
//! plus every fsync that finished before the cut (an fsync cut short may
//! count or not, but only whole).

use f2fuse_testkit as support;

use f2fuse_engine::internals::device::{Device, IoKind, MemDevice, SimDevice, SimEvent};
use f2fuse_engine::internals::fs::RenameFlags;
use f2fuse_engine::internals::mkfs::{format, parse_features, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{FallocMode, FileKind, Fs};
use f2fuse_layout::{inode_flag, BLOCKS_PER_SEG, F2FS_ROOT_INO as ROOT};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use support::{fsck_f2fs, require_f2fs_tools, Scratch};

const SIZE: u64 = 64 << 20;
/// Byte range of the two checkpoint packs (mkfs puts them at blkaddr 512..1536).
const CP_AREA: std::ops::Range<u64> = 512 * 4096..1536 * 4096;

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

/// Path -> file contents (None for a directory).
type Model = BTreeMap<String, Option<Vec<u8>>>;

/// What the file system holds: the tree, and the inode of each file path.
#[derive(Clone, Default, PartialEq, Debug)]
struct State {
    model: Model,
    inos: BTreeMap<String, u32>,
}

/// A committed checkpoint: the index of its trailing header write and the state it holds.
struct Snapshot {
    trailer: usize,
    state: State,
}

/// A file state an fsync wrote as a chain (no checkpoint).
#[derive(Clone)]
struct FsyncEffect {
    /// The fsync's first event and its final flush: durable once the flush is before the cut.
    started: usize,
    flushed: usize,
    ino: u32,
    /// A new inode's first fsync since the checkpoint: recovery adds this entry (DENT).
    dent_path: Option<String>,
    content: Vec<u8>,
}

impl FsyncEffect {
    fn apply(&self, state: &mut State) {
        match &self.dent_path {
            Some(path) => {
                state.model.insert(path.clone(), Some(self.content.clone()));
                state.inos.insert(path.clone(), self.ino);
            }
            None => {
                for (path, ino) in &state.inos {
                    if *ino == self.ino {
                        state.model.insert(path.clone(), Some(self.content.clone()));
                    }
                }
            }
        }
    }
}

struct Run {
    sim: Arc<SimDevice>,
    snapshots: Vec<Snapshot>,
    effects: Vec<FsyncEffect>,
    /// Every content each inode had after a write (for in-place updates).
    history: BTreeMap<u32, Vec<Vec<u8>>>,
}

/// How a workload places its writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Placement {
    /// ipu_policy 0, extent_zeroout_len 0: everything out of place, so
    /// the recovered state is exactly a durable one.
    OutOfPlace,
    /// `ipu_policy` as given (the default 16, or with FORCE), zero-out on,
    /// and pinned, preallocated files: a block rewritten in place after
    /// the durable state may hold any later content of that block.
    InPlace { ipu_policy: u64 },
}

fn fresh_image() -> Vec<u8> {
    fresh_image_of(SIZE)
}

fn fresh_image_of(size: u64) -> Vec<u8> {
    let dev = Device::new(Box::new(MemDevice::new(size)));
    let opts = MkfsOptions {
        timestamp: Some(1),
        uuid: Some([9; 16]),
        checkpoint_ver: Some(100),
        ..MkfsOptions::default()
    };
    format(&dev, &opts, true).unwrap();
    let mut bytes = vec![0u8; size as usize];
    dev.read_blocks(IoKind::Meta, 0, &mut bytes).unwrap();
    bytes
}

fn ino_of(fs: &Fs, path: &str) -> u32 {
    fs.resolve(path).unwrap().ino
}

fn parent_and_name(path: &str) -> (&str, &str) {
    let at = path.rfind('/').unwrap();
    (if at == 0 { "/" } else { &path[..at] }, &path[at + 1..])
}

/// Runs the workload on a fresh image: `ops` random operations, a tenth of
/// them fsyncs of a file and a twelfth checkpoints (or directory fsyncs).
/// With `compression`, the image has the feature and `/d2` is a `chattr +c`
/// directory: files made there are compressed (half of them with
/// compressible bytes), and renames move them in and out.
fn run_workload(seed: u64, ops: usize, placement: Placement, compression: bool) -> Run {
    let sim = Arc::new(SimDevice::new(if compression {
        compression_image(SIZE)
    } else {
        fresh_image()
    }));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let (ipu_policy, zeroout) = match placement {
        Placement::OutOfPlace => (0, 0),
        Placement::InPlace { ipu_policy } => (ipu_policy, 16),
    };
    fs.set_tunable("ipu_policy", ipu_policy).unwrap();
    fs.set_tunable("extent_zeroout_len", zeroout).unwrap();
    // Checkpoints only where the workload asks, or cleaning before an
    // operation: then a checkpoint in a step holds the state before it.
    fs.set_tunable("reclaim_segments", u32::MAX as u64).unwrap();
    let mut history: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    let mut rng = Rng(seed);
    let mut state = State::default();
    let mut snapshots = Vec::new();
    let mut effects = Vec::new();
    // Inodes in the last checkpoint, and those fsynced since (DENT only on the first).
    let mut checkpointed: BTreeSet<u32> = BTreeSet::new();
    let mut fsynced: BTreeSet<u32> = BTreeSet::new();
    let dirs = ["/", "/d1", "/d2"];
    for d in &dirs[1..] {
        fs.mkdir(ROOT, &d.as_bytes()[1..], 0o755, 0, 0).unwrap();
        state.model.insert(d.to_string(), None);
    }
    if compression {
        fs.set_flags(ino_of(&fs, "/d2"), inode_flag::COMPR).unwrap();
    }
    for step in 0..ops {
        let before_events = sim.event_count();
        let before = state.clone();
        let files: Vec<String> = state.inos.keys().cloned().collect();
        let mut fsync_of = None;
        // A step of two operations: from this event on, a checkpoint holds this state.
        let mut midway: Option<(usize, State)> = None;
        match rng.below(12) {
            0..=2 => {
                let dir = dirs[rng.below(3) as usize];
                let path = format!("{}/f{}", dir.trim_end_matches('/'), rng.below(40));
                if state.model.contains_key(&path) {
                    continue;
                }
                let (parent, name) = parent_and_name(&path);
                let f = fs
                    .create(ino_of(&fs, parent), name.as_bytes(), 0o644, 0, 0)
                    .unwrap();
                // Cleaning before the write may checkpoint the empty file.
                let mut created = before.clone();
                created.model.insert(path.clone(), Some(Vec::new()));
                created.inos.insert(path.clone(), f.ino);
                midway = Some((sim.event_count(), created));
                let len = [0usize, 100, 3000, 5000, 70_000][rng.below(5) as usize];
                let data = workload_bytes(&mut rng, len, compression);
                fs.write(f.ino, 0, &data).unwrap();
                history.entry(f.ino).or_default().push(data.clone());
                state.model.insert(path.clone(), Some(data));
                state.inos.insert(path, f.ino);
            }
            3..=5 if !files.is_empty() => {
                let path = &files[rng.below(files.len() as u64) as usize];
                let content = state.model.get_mut(path).unwrap().as_mut().unwrap();
                let offset = rng.below(content.len() as u64 + 8192) as usize;
                let len = 1 + rng.below(20_000) as usize;
                let data = workload_bytes(&mut rng, len, compression);
                fs.write(state.inos[path], offset as u64, &data).unwrap();
                if content.len() < offset + len {
                    content.resize(offset + len, 0);
                }
                content[offset..offset + len].copy_from_slice(&data);
                history
                    .entry(state.inos[path])
                    .or_default()
                    .push(content.clone());
            }
            6 if !files.is_empty() => {
                let path = files[rng.below(files.len() as u64) as usize].clone();
                let (parent, name) = parent_and_name(&path);
                fs.unlink(ino_of(&fs, parent), name.as_bytes()).unwrap();
                state.model.remove(&path);
                state.inos.remove(&path);
            }
            7 if !files.is_empty() => {
                let from = files[rng.below(files.len() as u64) as usize].clone();
                let dir = dirs[rng.below(3) as usize];
                let to = format!("{}/r{}", dir.trim_end_matches('/'), rng.below(40));
                if state.model.get(&to).is_some_and(|v| v.is_none()) || from == to {
                    continue;
                }
                let (fp, fname) = parent_and_name(&from);
                let (tp, tname) = parent_and_name(&to);
                fs.rename(
                    ino_of(&fs, fp),
                    fname.as_bytes(),
                    ino_of(&fs, tp),
                    tname.as_bytes(),
                    RenameFlags::default(),
                )
                .unwrap();
                let content = state.model.remove(&from).unwrap();
                let ino = state.inos.remove(&from).unwrap();
                state.model.insert(to.clone(), content);
                state.inos.insert(to, ino);
            }
            10 if placement != Placement::OutOfPlace && !files.is_empty() => {
                // Preallocation: pinned (real zeroed blocks) or reserved
                // (writes zero out chunks around them). Pinning changes
                // nothing the model sees, so a checkpoint between the two
                // operations holds the state from before the step too.
                let path = &files[rng.below(files.len() as u64) as usize];
                let ino = state.inos[path];
                if rng.below(2) == 0 {
                    fs.set_pin_file(ino, true).unwrap();
                }
                let content = state.model.get_mut(path).unwrap().as_mut().unwrap();
                let to = content.len() + 200_000;
                fs.fallocate(ino, 0, to as u64, FallocMode::Allocate { keep_size: false })
                    .unwrap();
                content.resize(to, 0);
                history.entry(ino).or_default().push(content.clone());
            }
            8..=9 if !files.is_empty() => {
                let path = files[rng.below(files.len() as u64) as usize].clone();
                let ino = state.inos[&path];
                fs.fsync(ino).unwrap();
                fsync_of = Some((path, ino));
            }
            _ => {
                if step % 3 == 0 {
                    fs.fsync(ROOT).unwrap();
                } else {
                    fs.checkpoint().unwrap();
                }
            }
        }
        // Checkpoints during this step (explicit, by cleaning before the
        // operation, an fsync's; an fsync may clean and then checkpoint)
        // hold the state from before the step (an fsync changes nothing the
        // model sees). A trailing header is the one checkpoint-area write
        // between two flushes.
        let events = sim.events_since(before_events);
        for trailer in (1..events.len().saturating_sub(1)).filter(|&i| {
            matches!(events[i], SimEvent::Write { offset, .. } if CP_AREA.contains(&offset))
                && matches!(events[i - 1], SimEvent::Flush)
                && matches!(events[i + 1], SimEvent::Flush)
        }) {
            let held = match &midway {
                Some((from, state)) if before_events + trailer >= *from => state,
                _ => &before,
            };
            checkpointed = held.inos.values().copied().collect();
            fsynced.clear();
            snapshots.push(Snapshot {
                trailer: before_events + trailer,
                state: held.clone(),
            });
        }
        if let Some((path, ino)) = fsync_of {
            // An fsync of a clean file writes and flushes nothing: what it
            // promises was durable when it was called.
            let flushed = events
                .iter()
                .rposition(|e| matches!(e, SimEvent::Flush))
                .map_or(before_events, |flush| before_events + flush);
            let dent = !checkpointed.contains(&ino) && fsynced.insert(ino);
            effects.push(FsyncEffect {
                started: before_events,
                flushed,
                ino,
                dent_path: dent.then_some(path.clone()),
                content: state.model[&path].clone().unwrap(),
            });
        }
    }
    if placement != Placement::OutOfPlace {
        let alloc = fs.status().unwrap().alloc;
        assert!(
            alloc.in_place_writes.iter().sum::<u64>() > 0,
            "the workload must rewrite in place"
        );
    }
    drop(fs); // A crash: no unmount.
    Run {
        sim,
        snapshots,
        effects,
        history,
    }
}

/// Whether `got` is `expected` but for blocks rewritten in place since:
/// the same names, kinds and sizes (those come from nodes, never written
/// in place), and each 4 KiB block of a file either as expected or as
/// some content the file had after a write (the data a cut may leave
/// where a block was being rewritten in place).
fn same_but_in_place(expected: &State, got: &Model, history: &BTreeMap<u32, Vec<Vec<u8>>>) -> bool {
    const BS: usize = 4096;
    let block = |c: &[u8], at: usize| -> Vec<u8> {
        let mut b = vec![0u8; BS];
        if at < c.len() {
            let n = (c.len() - at).min(BS);
            b[..n].copy_from_slice(&c[at..at + n]);
        }
        b
    };
    expected.model.len() == got.len()
        && expected.model.iter().all(|(path, want)| {
            let Some(have) = got.get(path) else {
                return false;
            };
            match (want, have) {
                (None, None) => true,
                (Some(want), Some(have)) if want.len() == have.len() => {
                    let versions = expected
                        .inos
                        .get(path)
                        .and_then(|ino| history.get(ino))
                        .map_or(&[][..], |v| v.as_slice());
                    (0..want.len()).step_by(BS).all(|at| {
                        let b = block(have, at);
                        let end = (at + BS).min(have.len());
                        b == block(want, at)
                            || versions
                                .iter()
                                .any(|v| block(v, at)[..end - at] == b[..end - at])
                    })
                }
                _ => false,
            }
        })
}

fn scan(fs: &Fs) -> Model {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), ROOT)];
    while let Some((prefix, ino)) = stack.pop() {
        for e in fs.read_dir(ino).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino).unwrap();
            if inode.kind == FileKind::Directory {
                stack.push((path.clone(), e.ino));
                out.insert(path, None);
            } else {
                let mut buf = vec![0u8; inode.size as usize];
                fs.read(&inode, 0, &mut buf).unwrap();
                out.insert(path, Some(buf));
            }
        }
    }
    out
}

fn describe_diff(expected: &Model, got: &Model) -> Vec<String> {
    expected
        .keys()
        .chain(got.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|k| expected.get(*k) != got.get(*k))
        .map(|k| {
            format!(
                "{k}: expected {:?} got {:?}",
                expected.get(k).map(|v| v.as_ref().map(|c| c.len())),
                got.get(k).map(|v| v.as_ref().map(|c| c.len()))
            )
        })
        .collect()
}

/// Cuts the recorded run: around every checkpoint trailer and every fsync's
/// final flush (where a cut decides what is durable; up to `dense` of each),
/// plus `random` cut points anywhere. Each cut is tried with the unflushed
/// writes kept in order and with a random half of them lost (any order).
/// fsck.f2fs runs on every `fsck_every`-th cut, before and after recovery.
fn check_cuts(
    seed: u64,
    ops: usize,
    placement: Placement,
    compression: bool,
    (dense, random, fsck_every): (usize, usize, usize),
) {
    let Run {
        sim,
        snapshots,
        effects,
        history,
    } = run_workload(seed, ops, placement, compression);
    let mut crash = sim.crash_images();
    let events = crash.events.clone();
    assert!(snapshots.len() >= 3, "the workload must commit checkpoints");
    assert!(
        effects.len() >= 10,
        "the workload must fsync without checkpoints"
    );
    let scratch = Scratch::new("powercut");
    let img = scratch.join("cut.img");
    let mut rng = Rng(seed ^ 0xdead_beef);
    let around = |points: Vec<usize>| -> Vec<usize> {
        let step = points.len().div_ceil(dense).max(1);
        points
            .into_iter()
            .step_by(step)
            .flat_map(|p| p.saturating_sub(1)..(p + 2).min(events.len() + 1))
            .collect()
    };
    let mut cuts = around(snapshots.iter().map(|s| s.trailer).collect());
    cuts.extend(around(effects.iter().map(|e| e.flushed).collect()));
    for _ in 0..random {
        cuts.push(rng.below(events.len() as u64 + 1) as usize);
    }
    cuts.sort();
    cuts.dedup();
    let mut recovered_fsyncs = 0;
    for (n, &cut) in cuts.iter().enumerate() {
        for reorder in [false, true] {
            let mut pick = Rng(seed.wrapping_mul(31).wrapping_add(cut as u64) | 1);
            let decisions: Vec<bool> = (0..cut).map(|_| !reorder || pick.below(2) == 0).collect();
            let keep = |i: usize| decisions[i];
            let image = crash.at_cut(cut, keep);
            let last_flush = crash.last_flush_before(cut);
            let survived = |i: usize| i < cut && (last_flush.is_some_and(|f| i < f) || keep(i));
            let base = snapshots.iter().rev().find(|s| survived(s.trailer));
            let since = |e: &&FsyncEffect| base.is_none_or(|s| e.started > s.trailer);
            let mut expected = base.map(|s| s.state.clone()).unwrap_or_default();
            let durable: Vec<&FsyncEffect> = effects
                .iter()
                .filter(since)
                .filter(|e| e.flushed < cut)
                .collect();
            for e in &durable {
                e.apply(&mut expected);
            }
            // An fsync the cut fell into counts whole or not at all.
            let mut alternative = expected.clone();
            if let Some(e) = effects
                .iter()
                .filter(since)
                .find(|e| e.started < cut && e.flushed >= cut)
            {
                e.apply(&mut alternative);
            }
            let check_fsck = n % fsck_every == 0;
            if check_fsck {
                std::fs::write(&img, &image).unwrap();
                if let Err(report) = fsck_f2fs(&img) {
                    panic!("cut {cut} reorder {reorder}: fsck.f2fs on the cut image:\n{report}");
                }
            }
            let dev = Arc::new(MemDevice::from_bytes(image));
            let fs = Fs::open_writable(Box::new(dev.clone()))
                .unwrap_or_else(|e| panic!("cut {cut} reorder {reorder}: open failed: {e}"));
            let got = scan(&fs);
            let acceptable = |state: &State| match placement {
                Placement::OutOfPlace => got == state.model,
                Placement::InPlace { .. } => same_but_in_place(state, &got, &history),
            };
            if !acceptable(&expected) && !acceptable(&alternative) {
                panic!(
                    "seed {seed:#x} cut {cut} reorder {reorder}: state differs from the last durable checkpoint \
                     (trailer {:?}) plus {} durable fsyncs: {:?}",
                    base.map(|s| s.trailer),
                    durable.len(),
                    describe_diff(&expected.model, &got)
                );
            }
            recovered_fsyncs += durable.len();
            if check_fsck {
                fs.unmount().unwrap();
                std::fs::write(&img, dev.snapshot()).unwrap();
                if let Err(report) = fsck_f2fs(&img) {
                    panic!("cut {cut} reorder {reorder}: fsck.f2fs after recovery:\n{report}");
                }
            }
        }
    }
    assert!(
        recovered_fsyncs > 0,
        "no cut kept an fsync beyond a checkpoint"
    );
}

#[test]
fn power_cut_sweep() {
    if !require_f2fs_tools() {
        return;
    }
    // 4 x 600 operations; about 80 cuts each, twice (in order, reordered).
    for seed in [1u64, 2, 3, 4] {
        let seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        check_cuts(seed, 600, Placement::OutOfPlace, false, (12, 12, 6));
    }
}

/// The sweep with in-place updates (the default FSYNC policy, and FORCE
/// with it), zero-out chunks and pinned preallocated files: fsck.f2fs
/// accepts every cut image before and after recovery, and the recovered
/// tree is a durable state in which only blocks rewritten since may hold
/// later contents.
#[test]
fn power_cut_sweep_with_in_place_updates() {
    if !require_f2fs_tools() {
        return;
    }
    for (seed, ipu_policy) in [(5u64, 16), (6, 16), (7, 1 | 16)] {
        let seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        check_cuts(
            seed,
            600,
            Placement::InPlace { ipu_policy },
            false,
            (12, 12, 6),
        );
    }
}

#[test]
fn eio_turns_read_only_and_keeps_the_image_consistent() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("eio");
    let img = scratch.join("eio.img");
    for fail_at in [5u64, 40, 200, 1000] {
        for fail_flush in [false, true] {
            let sim = Arc::new(SimDevice::new(fresh_image()));
            let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
            fs.set_tunable("cp_interval", 3600).unwrap();
            if fail_flush {
                sim.fail_flush_at(fail_at / 5);
            } else {
                sim.fail_write_at(fail_at);
            }
            let mut failed = false;
            for i in 0..400 {
                let result = fs
                    .create(ROOT, format!("f{i}").as_bytes(), 0o644, 0, 0)
                    .and_then(|f| fs.write(f.ino, 0, &vec![i as u8; 9000]))
                    .and_then(|_| if i % 10 == 9 { fs.checkpoint() } else { Ok(()) });
                if let Err(e) = result {
                    failed = true;
                    // Once failed, nothing more may be written.
                    let again = fs.create(ROOT, b"after", 0o644, 0, 0).unwrap_err();
                    assert_eq!(again.to_errno(), libc::EROFS, "after {e}: {again}");
                    break;
                }
            }
            assert!(
                failed,
                "the injected error at {fail_at} (flush {fail_flush}) was never reported"
            );
            let events_before = sim.event_count();
            assert!(fs.checkpoint().is_err());
            drop(fs);
            assert_eq!(
                sim.event_count(),
                events_before,
                "no write after the failure"
            );
            std::fs::write(&img, sim.bytes()).unwrap();
            if let Err(report) = fsck_f2fs(&img) {
                panic!("EIO at {fail_at} (flush {fail_flush}): fsck.f2fs:\n{report}");
            }
            Fs::open(Box::new(MemDevice::from_bytes(sim.bytes()))).unwrap();
        }
    }
}

/// Events written into the checkpoint area from index `from` on.
fn checkpoint_writes_since(sim: &SimDevice, from: usize) -> usize {
    sim.events_since(from)
        .iter()
        .filter(|e| matches!(e, SimEvent::Write { offset, .. } if CP_AREA.contains(offset)))
        .count()
}

fn read_all(fs: &Fs, path: &str) -> Vec<u8> {
    let inode = fs.resolve(path).unwrap();
    let mut buf = vec![0u8; inode.size as usize];
    fs.read(&inode, 0, &mut buf).unwrap();
    buf
}

#[test]
fn fsync_rolls_forward_without_a_checkpoint() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("fsync-rf");
    let img = scratch.join("crash.img");
    let sim = Arc::new(SimDevice::new(fresh_image_of(256 << 20)));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    // Out of place: the unsynced rewrite below must not reach the image.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap();
    let old = fs.create(d.ino, b"old", 0o644, 0, 0).unwrap();
    fs.write(old.ino, 0, &[7u8; 9000]).unwrap();
    let shrunk = fs.create(ROOT, b"shrunk", 0o644, 0, 0).unwrap();
    fs.write(shrunk.ino, 0, &vec![3u8; 4_500_000]).unwrap();
    fs.checkpoint().unwrap();
    let before = sim.event_count();
    // Truncation frees a direct node and addresses in the inode.
    let shrink = f2fuse_engine::internals::fs::SetAttr {
        size: Some(5000),
        ..Default::default()
    };
    fs.setattr(shrunk.ino, &shrink).unwrap();
    fs.fsync(shrunk.ino).unwrap();
    // A new file (DENT), an inline one, a rewritten checkpointed one, a big one.
    let new = fs.create(d.ino, b"new", 0o600, 5, 6).unwrap();
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 / 3) as u8).collect();
    fs.write(new.ino, 0, &big).unwrap();
    fs.fsync(new.ino).unwrap();
    let small = fs.create(ROOT, b"small", 0o644, 0, 0).unwrap();
    fs.write(small.ino, 0, b"inline bytes").unwrap();
    fs.fsync(small.ino).unwrap();
    fs.write(old.ino, 4096, &[9u8; 100]).unwrap();
    fs.fsync(old.ino).unwrap();
    fs.write(new.ino, 100, b"second fsync").unwrap();
    fs.fsync(new.ino).unwrap();
    assert_eq!(
        checkpoint_writes_since(&sim, before),
        0,
        "fsync wrote a checkpoint"
    );
    // Written but never fsynced: not expected back.
    fs.write(old.ino, 0, &[1u8; 10]).unwrap();
    let unsynced = fs.create(ROOT, b"unsynced", 0o644, 0, 0).unwrap();
    fs.write(unsynced.ino, 0, b"x").unwrap();
    drop(fs);

    std::fs::write(&img, sim.bytes()).unwrap();
    // fsck.f2fs walks the chain itself; then our fsck sees the replay.
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("crashed image:\n{r}"));
    let mut big2 = big.clone();
    big2[100..112].copy_from_slice(b"second fsync");
    let mut old2 = vec![7u8; 9000];
    old2[4096..4196].fill(9);
    for writable in [false, true] {
        let dev = Arc::new(MemDevice::from_bytes(sim.bytes()));
        let fs = if writable {
            Fs::open_writable(Box::new(dev.clone())).unwrap()
        } else {
            Fs::open(Box::new(dev.clone())).unwrap()
        };
        assert_eq!(read_all(&fs, "/d/new"), big2);
        let attrs = fs.resolve("/d/new").unwrap();
        assert_eq!((attrs.mode & 0o7777, attrs.uid, attrs.gid), (0o600, 5, 6));
        assert_eq!(read_all(&fs, "/small"), b"inline bytes");
        assert_eq!(read_all(&fs, "/d/old"), old2);
        assert_eq!(read_all(&fs, "/shrunk"), vec![3u8; 5000]);
        assert!(fs.resolve("/unsynced").is_err());
        if writable {
            fs.unmount().unwrap();
            std::fs::write(&img, dev.snapshot()).unwrap();
            fsck_f2fs(&img).unwrap_or_else(|r| panic!("after recovery:\n{r}"));
        } else {
            assert_eq!(dev.snapshot(), sim.bytes(), "a read-only open wrote");
        }
    }
}

/// Every cut inside a run of fsyncs of a file whose blocks reach past the
/// inode into a direct node: the file is always one fsync's state, whole.
#[test]
fn every_cut_in_fsyncs_of_a_file_with_direct_nodes() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("powercut-dnode");
    let img = scratch.join("cut.img");
    // Room enough that cleaning never has to checkpoint.
    let sim = Arc::new(SimDevice::new(fresh_image_of(96 << 20)));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    // Out of place: a cut between a rewrite and its fsync leaves the old state.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let file = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap();
    let mut content: Vec<u8> = (0..1025 * 4096u32).map(|i| (i / 4096) as u8).collect();
    fs.write(file.ino, 0, &content).unwrap();
    fs.checkpoint().unwrap();
    let first = sim.event_count();
    // (event index of the fsync's final flush, the content it made durable)
    let mut states = vec![(first, content.clone())];
    let mut rng = Rng(77);
    for round in 0..4u8 {
        // Blocks in the inode's range and in the direct node's, and growth.
        for index in [rng.below(900), 923 + rng.below(100), 1025 + round as u64] {
            let data = vec![0xA0 + round; 4096];
            fs.write(file.ino, index * 4096, &data).unwrap();
            let at = index as usize * 4096;
            if content.len() < at + 4096 {
                content.resize(at + 4096, 0);
            }
            content[at..at + 4096].copy_from_slice(&data);
        }
        fs.fsync(file.ino).unwrap();
        let flush = sim.event_count() - 1;
        assert!(matches!(sim.events()[flush], SimEvent::Flush));
        states.push((flush, content.clone()));
    }
    assert_eq!(
        checkpoint_writes_since(&sim, first),
        0,
        "an fsync checkpointed"
    );
    drop(fs);
    for_each_cut(&sim, first, |cut, reorder, image| {
        if (cut - first).is_multiple_of(8) {
            std::fs::write(&img, &image).unwrap();
            fsck_f2fs(&img).unwrap_or_else(|r| panic!("cut {cut}: crashed image:\n{r}"));
        }
        let fs = Fs::open_writable(Box::new(MemDevice::from_bytes(image))).unwrap();
        let got = read_all(&fs, "/big");
        assert_some_fsync_state(&states, cut, reorder, "/big", &got);
    });
}

/// Every cut inside fsyncs of a file written in large sequential requests,
/// which go to the file's own stream segment (outside the logs): the
/// stream's segment is part full at the checkpoint and filled on after
/// it, across a segment boundary (the full segment let go of at once, its
/// summaries queued for the next checkpoint); recovery finds the fsynced
/// blocks there.
#[test]
fn every_cut_in_fsyncs_of_a_streamed_file() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("powercut-stream");
    let img = scratch.join("cut.img");
    let sim = Arc::new(SimDevice::new(fresh_image_of(96 << 20)));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    fs.set_tunable("ipu_policy", 0).unwrap();
    // Streams give way to SSR, which a volume this small needs from the
    // start at the default threshold.
    fs.set_tunable("min_ssr_sections", 0).unwrap();
    // Requests of 16 blocks, serialized: few blocks to cut between.
    fs.set_tunable("serialized_dio_pages", 16).unwrap();
    let file = fs.create(ROOT, b"seq", 0o644, 0, 0).unwrap();
    let request = 16 * 4096;
    let mut content = Vec::new();
    let append = |fs: &Fs, content: &mut Vec<u8>, byte: u8| {
        let data = vec![byte; request];
        fs.write(file.ino, content.len() as u64, &data).unwrap();
        content.extend_from_slice(&data);
    };
    // The first request opens the file's stream, which places file block
    // `i` at its segment's block `i`: 31 requests end 16 blocks short of
    // the segment's end.
    for byte in 1..=31 {
        append(&fs, &mut content, byte);
    }
    fs.checkpoint().unwrap();
    let first = sim.event_count();
    let mut states = vec![(first, content.clone())];
    for byte in 32..=35 {
        append(&fs, &mut content, byte);
        fs.fsync(file.ino).unwrap();
        states.push((sim.event_count() - 1, content.clone()));
    }
    // One run in the stream, across the segment boundary.
    let runs = fs.extents(&fs.inode(file.ino).unwrap()).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let main = fs.superblock().main_blkaddr.get();
    let (_, start, len) = runs[0];
    assert_eq!((start - main) % BLOCKS_PER_SEG, 0, "{runs:?}");
    assert!(len > BLOCKS_PER_SEG as u64, "{runs:?}");
    assert_eq!(
        checkpoint_writes_since(&sim, first),
        0,
        "an fsync checkpointed"
    );
    drop(fs);
    for_each_cut(&sim, first, |cut, reorder, image| {
        if (cut - first).is_multiple_of(4) {
            std::fs::write(&img, &image).unwrap();
            fsck_f2fs(&img).unwrap_or_else(|r| panic!("cut {cut}: crashed image:\n{r}"));
        }
        let fs = Fs::open_writable(Box::new(MemDevice::from_bytes(image))).unwrap();
        let got = read_all(&fs, "/seq");
        assert_some_fsync_state(&states, cut, reorder, "/seq", &got);
        fs.unmount().unwrap();
    });
    let fs = Fs::open_writable(Box::new(MemDevice::from_bytes(sim.bytes()))).unwrap();
    assert_eq!(read_all(&fs, "/seq"), content);
}

/// Every cut from event `first` to the last, twice: with every write
/// before it kept, and with a random choice of the unflushed ones lost.
fn for_each_cut(sim: &SimDevice, first: usize, mut check: impl FnMut(usize, bool, Vec<u8>)) {
    let mut crash = sim.crash_images();
    let last = sim.event_count();
    for cut in first..=last {
        for reorder in [false, true] {
            let mut pick = Rng(cut as u64 * 2 + 1);
            let keep: Vec<bool> = (0..cut).map(|_| !reorder || pick.below(2) == 0).collect();
            check(cut, reorder, crash.at_cut(cut, |i| keep[i]));
        }
    }
}

/// `got` (file `path` after recovery from `cut`) is the state of the last
/// fsync finished before the cut, or of the one the cut fell into;
/// `states` holds each fsync's final flush event and content.
fn assert_some_fsync_state(
    states: &[(usize, Vec<u8>)],
    cut: usize,
    reorder: bool,
    path: &str,
    got: &[u8],
) {
    let done = states
        .iter()
        .rposition(|(flush, _)| *flush < cut)
        .unwrap_or(0);
    let candidates = &states[done..(done + 2).min(states.len())];
    assert!(
        candidates.iter().any(|(_, c)| *c == got),
        "cut {cut} reorder {reorder}: {path} is no fsync's state ({} bytes)",
        got.len()
    );
}

/// fsync checkpoints exactly where the kernel's need_do_checkpoint says so.
#[test]
fn fsync_checkpoints_where_the_kernel_does() {
    let sim = Arc::new(SimDevice::new(fresh_image()));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap();
    let f = fs.create(d.ino, b"f", 0o644, 0, 0).unwrap();
    // Whether an fsync of `ino`, after a write to `file`, wrote a checkpoint.
    let fsync_checkpoints = |file: u32, ino: u32| {
        fs.write(file, 0, b"more").unwrap();
        let before = sim.event_count();
        fs.fsync(ino).unwrap();
        checkpoint_writes_since(&sim, before) > 0
    };
    let mut seen = vec![
        (
            "parent created since the checkpoint",
            fsync_checkpoints(f.ino, f.ino),
        ),
        ("plain file", fsync_checkpoints(f.ino, f.ino)),
        ("directory", fsync_checkpoints(f.ino, d.ino)),
    ];
    fs.rename(d.ino, b"f", ROOT, b"g", RenameFlags::default())
        .unwrap();
    seen.push((
        "first fsync after a rename",
        fsync_checkpoints(f.ino, f.ino),
    ));
    seen.push((
        "second fsync after a rename",
        fsync_checkpoints(f.ino, f.ino),
    ));
    fs.link(f.ino, ROOT, b"h").unwrap();
    seen.push(("hard link", fsync_checkpoints(f.ino, f.ino)));
    fs.unlink(ROOT, b"h").unwrap();
    fs.set_xattr(d.ino, b"user.x", b"1", SetMode::Create)
        .unwrap();
    seen.push((
        "a directory's xattrs changed",
        fsync_checkpoints(f.ino, f.ino),
    ));
    let new = fs.create(ROOT, b"new", 0o644, 0, 0).unwrap();
    seen.push((
        "new file in a checkpointed directory",
        fsync_checkpoints(new.ino, new.ino),
    ));
    let expected = [
        ("parent created since the checkpoint", true),
        ("plain file", false),
        ("directory", true),
        ("first fsync after a rename", true),
        ("second fsync after a rename", false),
        ("hard link", true),
        ("a directory's xattrs changed", true),
        ("new file in a checkpointed directory", false),
    ];
    assert_eq!(seen, expected);
}

// ---------------------------------------------------------------- compressed files
//
// The kernel has no roll-forward of compressed clusters: an fsync of a
// compressed file checkpoints (need_do_checkpoint's CP_COMPRESSED), and
// do_recover_data leaves COMPRESS_ADDR slots alone. So compressed data is
// durable through checkpoints only, which the cuts below check; a chain may
// still meet a cluster's slots when a file was compressed at the checkpoint
// and plain when it was fsynced.

fn compression_image(size: u64) -> Vec<u8> {
    let dev = Device::new(Box::new(MemDevice::new(size)));
    let opts = MkfsOptions {
        features: parse_features("extra_attr,compression").unwrap(),
        timestamp: Some(1),
        uuid: Some([9; 16]),
        checkpoint_ver: Some(100),
        ..MkfsOptions::default()
    };
    format(&dev, &opts, true).unwrap();
    let mut bytes = vec![0u8; size as usize];
    dev.read_blocks(IoKind::Meta, 0, &mut bytes).unwrap();
    bytes
}

/// Random bytes; with `compressible`, half the time words that compress.
fn workload_bytes(rng: &mut Rng, len: usize, compressible: bool) -> Vec<u8> {
    if compressible && rng.below(2) == 0 {
        return words(rng.below(4) as usize, len);
    }
    (0..len).map(|_| rng.next() as u8).collect()
}

/// `len` bytes of repeated words, from word `first` on: they compress.
fn words(first: usize, len: usize) -> Vec<u8> {
    let words: [&[u8]; 4] = [b"cluster ", b"f2fs ", b"payload\n", b"zeros "];
    words
        .iter()
        .cycle()
        .skip(first)
        .flat_map(|w| w.iter().copied())
        .take(len)
        .collect()
}

#[test]
fn power_cut_sweep_with_compressed_files() {
    if !require_f2fs_tools() {
        return;
    }
    for seed in [5u64, 6] {
        check_cuts(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            500,
            Placement::OutOfPlace,
            true,
            (12, 12, 4),
        );
    }
}

fn set_size(fs: &Fs, ino: u32, size: u64) {
    let attr = f2fuse_engine::internals::fs::SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &attr).unwrap();
}

/// Every cut in a run of overwrites and fsyncs of a compressed file (each
/// fsync a checkpoint): the file is one fsync's state, whole, and
/// fsck.f2fs accepts the image before and after our recovery.
#[test]
fn every_cut_in_fsyncs_of_a_compressed_file() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("powercut-compressed");
    let img = scratch.join("cut.img");
    let sim = Arc::new(SimDevice::new(compression_image(SIZE)));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let dir = fs.mkdir(ROOT, b"c", 0o755, 0, 0).unwrap();
    fs.set_flags(dir.ino, inode_flag::COMPR).unwrap();
    let file = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
    assert!(file.compression.is_some());
    let mut rng = Rng(41);
    let mut content = workload_bytes(&mut rng, 200_000, true);
    fs.write(file.ino, 0, &content).unwrap();
    fs.checkpoint().unwrap();
    let first = sim.event_count();
    let mut states = vec![(first, content.clone())];
    for round in 0..5 {
        let offset = rng.below(content.len() as u64 + 20_000) as usize;
        let len = 1 + rng.below(40_000) as usize;
        let data = workload_bytes(&mut rng, len, round % 2 == 0);
        fs.write(file.ino, offset as u64, &data).unwrap();
        if content.len() < offset + data.len() {
            content.resize(offset + data.len(), 0);
        }
        content[offset..offset + data.len()].copy_from_slice(&data);
        if round == 3 {
            // A cut inside a compressed cluster, then growth again.
            let size = content.len() as u64 * 2 / 3 + 123;
            set_size(&fs, file.ino, size);
            content.truncate(size as usize);
        }
        let before = sim.event_count();
        fs.fsync(file.ino).unwrap();
        assert!(
            checkpoint_writes_since(&sim, before) > 0,
            "an fsync of a compressed file checkpoints, as the kernel's"
        );
        states.push((sim.event_count() - 1, content.clone()));
    }
    assert!(
        fs.compress_blocks(file.ino).unwrap() > 0,
        "nothing compressed"
    );
    drop(fs);
    let last = sim.event_count();
    for_each_cut(&sim, first, |cut, reorder, image| {
        let check_fsck = (cut - first).is_multiple_of(16) || cut == last;
        if check_fsck {
            std::fs::write(&img, &image).unwrap();
            fsck_f2fs(&img).unwrap_or_else(|r| panic!("cut {cut}: crashed image:\n{r}"));
        }
        let dev = Arc::new(MemDevice::from_bytes(image));
        let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
        let got = read_all(&fs, "/c/f");
        assert_some_fsync_state(&states, cut, reorder, "/c/f", &got);
        if check_fsck {
            fs.unmount().unwrap();
            std::fs::write(&img, dev.snapshot()).unwrap();
            fsck_f2fs(&img).unwrap_or_else(|r| panic!("cut {cut}: after recovery:\n{r}"));
        }
    });
}

/// A file compressed at the checkpoint, emptied, made plain (`chattr -c`)
/// and written and fsynced as a plain file: its fsync rolls forward, and
/// recovery replaces the checkpointed cluster slots (COMPRESS_ADDR,
/// payload, NEW_ADDR) with the chain's, as the kernel's do_recover_data
/// (which frees them through f2fs_truncate_data_blocks_range).
#[test]
fn a_file_compressed_at_the_checkpoint_rolls_forward_plain() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("powercut-decompressed");
    let img = scratch.join("crash.img");
    // Room enough that cleaning never has to checkpoint.
    let sim = Arc::new(SimDevice::new(compression_image(256 << 20)));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    let file = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    fs.set_flags(file.ino, inode_flag::COMPR).unwrap();
    // Past the inode's addresses, so that a direct node holds clusters too.
    let compressed = words(1, 10_000_000);
    fs.write(file.ino, 0, &compressed).unwrap();
    assert!(fs.compress_blocks(file.ino).unwrap() > 0);
    fs.checkpoint().unwrap();
    set_size(&fs, file.ino, 0);
    fs.set_flags(file.ino, 0).unwrap();
    let plain: Vec<u8> = (0..10_000_000u32).map(|i| (i % 251) as u8).collect();
    fs.write(file.ino, 0, &plain).unwrap();
    let before = sim.event_count();
    fs.fsync(file.ino).unwrap();
    assert_eq!(
        checkpoint_writes_since(&sim, before),
        0,
        "the plain file's fsync rolls forward"
    );
    drop(fs);
    std::fs::write(&img, sim.bytes()).unwrap();
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("crashed image:\n{r}"));
    let dev = Arc::new(MemDevice::from_bytes(sim.bytes()));
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    assert!(fs.resolve("/f").unwrap().compression.is_none());
    assert!(read_all(&fs, "/f") == plain);
    fs.unmount().unwrap();
    std::fs::write(&img, dev.snapshot()).unwrap();
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("after recovery:\n{r}"));
}
