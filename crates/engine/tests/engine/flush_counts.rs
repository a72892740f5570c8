//! Device flushes per operation, the durability contract's count
//! (docs/ARCHITECTURE.md, "Device flushes per operation"): an extra flush
//! fails here, a missing one fails the power-cut sweeps (powercut.rs, and
//! the cuts of concurrent fsyncs below). Each case also checks where the
//! flushes fall among the writes.

use f2fuse_testkit as support;

use f2fuse_engine::internals::device::{Device, IoKind, MemDevice, SimDevice, SimEvent};
use f2fuse_engine::internals::mkfs::{format, MkfsOptions};
use f2fuse_engine::Fs;
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::sync::Arc;
use support::{fsck_f2fs, require_f2fs_tools, Rng, Scratch};

const SIZE: u64 = 64 << 20;

fn fresh_image() -> Vec<u8> {
    let dev = Device::new(Box::new(MemDevice::new(SIZE)));
    format(&dev, &MkfsOptions::default(), true).unwrap();
    let mut bytes = vec![0u8; SIZE as usize];
    dev.read_blocks(IoKind::Meta, 0, &mut bytes).unwrap();
    bytes
}

/// What `op` did to the device, one letter per event: `w` a 4 KiB write,
/// `F` a flush.
fn trace(sim: &SimDevice, op: impl FnOnce()) -> String {
    let from = sim.event_count();
    op();
    sim.events_since(from)
        .iter()
        .map(|e| match e {
            SimEvent::Write { .. } => 'w',
            SimEvent::Flush => 'F',
        })
        .collect()
}

fn flushes(events: &str) -> usize {
    events.matches('F').count()
}

/// A checkpoint: its pack (and what it refers to) written, one flush, the
/// trailing header copy, one flush.
fn assert_checkpoint(what: &str, events: &str) {
    assert_eq!(flushes(events), 2, "{what}: {events}");
    assert!(events.ends_with("FwF"), "{what}: {events}");
    assert!(
        !events.starts_with('F'),
        "{what}: a flush before the pack: {events}"
    );
}

#[test]
fn flushes_per_operation() {
    if !require_f2fs_tools() {
        return;
    }
    let sim = Arc::new(SimDevice::new(fresh_image()));
    let fs = Fs::open_writable(Box::new(sim.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    // Out of place unless a case says otherwise.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let file = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap();
    fs.write(file.ino, 0, &[1u8; 8192]).unwrap();

    let events = trace(&sim, || fs.checkpoint().unwrap());
    assert_checkpoint("checkpoint", &events);

    let events = trace(&sim, || fs.fsync(file.ino).unwrap());
    assert_eq!(events, "", "fsync of a file clean since the checkpoint");

    // New data at new addresses: data, flush, the node chain, flush.
    fs.write(file.ino, 0, &[2u8; 4096]).unwrap();
    let events = trace(&sim, || fs.fsync(file.ino).unwrap());
    assert_eq!(flushes(&events), 2, "fsync of new data: {events}");
    assert!(
        events.starts_with('F') && events.ends_with('F') && events.contains("Fw"),
        "fsync of new data: the flush comes between data and nodes: {events}"
    );

    let events = trace(&sim, || fs.fsync(file.ino).unwrap());
    assert_eq!(events, "", "fsync right after an fsync");

    // Only data rewritten in place since the last flush: the chain, one flush.
    fs.set_tunable("ipu_policy", 1).unwrap(); // FORCE
    let data_writes = trace(&sim, || {
        fs.write(file.ino, 4096, &[3u8; 4096]).unwrap();
    });
    assert_eq!(data_writes, "w", "one block rewritten in place");
    let events = trace(&sim, || fs.fsync(file.ino).unwrap());
    assert_eq!(flushes(&events), 1, "fsync of in-place data: {events}");
    assert!(events.starts_with('w') && events.ends_with('F'), "{events}");
    // Data written at a new address since the last flush began (here
    // another file's) brings the data flush back.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let other = fs.create(ROOT, b"other", 0o644, 0, 0).unwrap();
    fs.write(other.ino, 0, &[4u8; 4096]).unwrap();
    fs.set_tunable("ipu_policy", 1).unwrap();
    fs.write(file.ino, 4096, &[5u8; 4096]).unwrap();
    let events = trace(&sim, || fs.fsync(file.ino).unwrap());
    assert_eq!(flushes(&events), 2, "{events}");

    // A new file's first fsync (DENT chain) whose data the fsync above
    // flushed already: nodes, one flush.
    let events = trace(&sim, || fs.fsync(other.ino).unwrap());
    assert_eq!(
        flushes(&events),
        1,
        "fsync of a new file, data durable: {events}"
    );
    assert!(events.starts_with('w') && events.ends_with('F'), "{events}");
    // ... and one whose data is not: data, flush, nodes, flush.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let third = fs.create(ROOT, b"third", 0o644, 0, 0).unwrap();
    fs.write(third.ino, 0, &[6u8; 4096]).unwrap();
    let events = trace(&sim, || fs.fsync(third.ino).unwrap());
    assert_eq!(flushes(&events), 2, "fsync of a new file: {events}");

    // An fsync that must checkpoint (a directory): the checkpoint's two.
    fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap();
    let events = trace(&sim, || fs.fsync(ROOT).unwrap());
    assert_checkpoint("fsync of a directory", &events);

    let events = trace(&sim, || fs.unmount().unwrap());
    assert_checkpoint("unmount", &events);

    let scratch = Scratch::new("flush-counts");
    let img = scratch.join("f.img");
    std::fs::write(&img, sim.bytes()).unwrap();
    fsck_f2fs(&img).unwrap_or_else(|r| panic!("fsck.f2fs:\n{r}"));
    let fs = Fs::open(Box::new(MemDevice::from_bytes(sim.bytes()))).unwrap();
    let read = |path: &str, len: usize| {
        let inode = fs.resolve(path).unwrap();
        let mut buf = vec![0u8; len];
        assert_eq!(fs.read(&inode, 0, &mut buf).unwrap(), len);
        buf
    };
    let mut expected = vec![2u8; 4096];
    expected.extend([5u8; 4096]);
    assert_eq!(read("/f", 8192), expected);
    assert_eq!(read("/other", 4096), vec![4u8; 4096]);
    assert_eq!(read("/third", 4096), vec![6u8; 4096]);
}

/// The concurrent fsyncs' workload: threads, each on its own file of
/// `BLOCKS` blocks, write one block and fsync `ROUNDS` times.
const THREADS: usize = 4;
const ROUNDS: usize = 12;
const BLOCKS: usize = 8;

/// A thread's file after `round` rounds: block `r % BLOCKS` of round r
/// holds bytes (thread, r).
fn content(thread: usize, rounds: usize) -> Vec<u8> {
    let mut bytes = vec![0xEEu8; BLOCKS * 4096];
    for r in 0..rounds {
        let at = (r % BLOCKS) * 4096;
        bytes[at..at + 4096].fill((thread * 16 + r) as u8);
    }
    bytes
}

/// Power cuts while several threads fsync at once, their flushes shared
/// (group commit) and their chains interleaved in the warm node log: after
/// any cut, with the unflushed writes kept or lost in any order, every
/// file holds the state of one of its fsyncs, never older than the last
/// fsync that returned before the cut, and fsck.f2fs accepts the image.
#[test]
fn cuts_during_concurrent_fsyncs_keep_every_returned_fsync() {
    if !require_f2fs_tools() {
        return;
    }
    let sim = Arc::new(SimDevice::new(fresh_image()));
    let fs = Arc::new(Fs::open_writable(Box::new(sim.clone())).unwrap());
    fs.set_tunable("cp_interval", 3600).unwrap();
    // Out of place: every fsync has new data to flush before its nodes.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let inos: Vec<u32> = (0..THREADS)
        .map(|t| {
            let name = format!("f{t}");
            let file = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap();
            fs.write(file.ino, 0, &content(t, 0)).unwrap();
            file.ino
        })
        .collect();
    fs.checkpoint().unwrap();
    let first = sim.event_count();
    // Per thread, per round: the event count once its fsync had returned.
    let returned: Vec<Vec<usize>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fs, sim, ino) = (fs.clone(), sim.clone(), inos[t]);
                scope.spawn(move || {
                    (0..ROUNDS)
                        .map(|r| {
                            let block = [(t * 16 + r) as u8; 4096];
                            fs.write(ino, ((r % BLOCKS) * 4096) as u64, &block).unwrap();
                            fs.fsync(ino).unwrap();
                            sim.event_count()
                        })
                        .collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let flushes = sim
        .events_since(first)
        .iter()
        .filter(|e| matches!(e, SimEvent::Flush))
        .count();
    assert!(
        flushes <= 2 * THREADS * ROUNDS,
        "{flushes} flushes for {} fsyncs",
        THREADS * ROUNDS
    );
    drop(fs); // A crash: no unmount.

    let scratch = Scratch::new("group-commit");
    let img = scratch.join("cut.img");
    let mut crash = sim.crash_images();
    let last = sim.event_count();
    let mut rng = Rng(0x6c0);
    let mut cuts: Vec<usize> = returned
        .iter()
        .flatten()
        .flat_map(|&at| at.saturating_sub(2)..=at.min(last))
        .collect();
    cuts.extend((0..40).map(|_| first + rng.below((last - first) as u64 + 1) as usize));
    cuts.retain(|&c| c >= first);
    cuts.sort();
    cuts.dedup();
    for (n, &cut) in cuts.iter().enumerate() {
        for reorder in [false, true] {
            let mut pick = Rng(cut as u64 * 2 + 1);
            let keep: Vec<bool> = (0..cut).map(|_| !reorder || pick.below(2) == 0).collect();
            let image = crash.at_cut(cut, |i| keep[i]);
            if n % 8 == 0 {
                std::fs::write(&img, &image).unwrap();
                fsck_f2fs(&img).unwrap_or_else(|r| panic!("cut {cut}: crashed image:\n{r}"));
            }
            let fs = Fs::open_writable(Box::new(MemDevice::from_bytes(image))).unwrap();
            for (t, rounds) in returned.iter().enumerate() {
                let durable = rounds.iter().filter(|&&at| at <= cut).count();
                let inode = fs.resolve(&format!("/f{t}")).unwrap();
                let mut got = vec![0u8; BLOCKS * 4096];
                assert_eq!(fs.read(&inode, 0, &mut got).unwrap(), got.len());
                assert!(
                    (durable..=ROUNDS).any(|r| content(t, r) == got),
                    "cut {cut} reorder {reorder}: f{t} is no fsync's state at or after round {durable}"
                );
            }
        }
    }
}
