//! Threads sharing one `Fs` (it is `Send + Sync`, offered as a library):
//! data, attribute and namespace operations on shared files and directories
//! must lose no update and tear no request.
//!
//! Each scenario formats a fresh image, runs its threads for a bounded time
//! (`F2FUSE_STRESS_SECS`, default 3 s; `F2FUSE_STRESS_SEED` repeats a seed),
//! prints what each thread did, then checks its models on the live file
//! system, unmounts, runs fsck.f2fs and our fsck, and checks the models again
//! on the image reopened read-only. Every operation must succeed except the
//! few a scenario names as expected (threads own their names and ranges, so
//! a stray ENOENT or EEXIST is a lost update, and ENOSPC means the image is
//! too small for the test).
//!
//! For long runs: `F2FUSE_STRESS_SECS=60 cargo test --release -p
//! f2fuse-engine --test engine concurrency::`.

use f2fuse_testkit as support;

use f2fuse_engine::internals::fs::{RenameFlags, SetAttr};
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions, MKFS_FEATURES};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{FallocMode, FileKind, Fs};
use f2fuse_layout::node::{block_path, AddrCounts};
use f2fuse_layout::{inode_flag, ADDRS_PER_BLOCK, F2FS_BLKSIZE, F2FS_ROOT_INO as ROOT};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{Debug, Display};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{fsck_f2fs, require_f2fs_tools, Rng, Scratch};

const BLOCK: u64 = F2FS_BLKSIZE as u64;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// Large enough that no scenario runs out of space (overwrites are cleaned).
const IMAGE_SIZE: u64 = 256 * MIB;

const STRESS_SECS_ENV: &str = "F2FUSE_STRESS_SECS";
const STRESS_SEED_ENV: &str = "F2FUSE_STRESS_SEED";
const DEFAULT_STRESS_TIME: Duration = Duration::from_secs(3);
/// Workers still running this long after their deadline are deadlocked.
const HANG_GRACE: Duration = Duration::from_secs(120);

// ---- the harness: images, workers, outcomes, checks ----

/// How long each scenario's threads run.
fn stress_time() -> Duration {
    match std::env::var(STRESS_SECS_ENV) {
        Ok(text) => Duration::from_secs_f64(
            text.parse()
                .unwrap_or_else(|_| panic!("{STRESS_SECS_ENV}={text}: not a number of seconds")),
        ),
        Err(_) => DEFAULT_STRESS_TIME,
    }
}

/// The seed of a run: from the environment to repeat one, else the clock.
fn base_seed() -> u64 {
    match std::env::var(STRESS_SEED_ENV) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{STRESS_SEED_ENV}={text}: not a number")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

/// A freshly formatted image file in its own scratch directory.
struct TestImage {
    _scratch: Scratch,
    path: PathBuf,
}

impl TestImage {
    fn new(tag: &str) -> TestImage {
        let scratch = Scratch::new(tag);
        let path = scratch.join("img");
        let opts = MkfsOptions {
            features: MKFS_FEATURES,
            ..MkfsOptions::default()
        };
        format_path(&path, Some(IMAGE_SIZE), &opts).unwrap();
        TestImage {
            _scratch: scratch,
            path,
        }
    }

    fn open(&self) -> Fs {
        support::open_writable(&self.path)
    }
}

/// A worker's failure, or a check's problem, as text for the test report.
type Outcome<T = ()> = Result<T, String>;

trait Context<T> {
    /// Describes an engine error with what was being done.
    fn context(self, what: impl FnOnce() -> String) -> Outcome<T>;
}

impl<T> Context<T> for f2fuse_engine::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Outcome<T> {
        self.map_err(|e| format!("{}: {e} (errno {})", what(), e.to_errno()))
    }
}

/// A write must be taken whole: the image never fills up.
fn expect_whole_write(written: usize, len: usize, what: impl FnOnce() -> String) -> Outcome {
    if written == len {
        Ok(())
    } else {
        Err(format!("{}: short write, {written} of {len} bytes", what()))
    }
}

/// Ends every worker's loop at the deadline or at the first failure, and
/// records the failures in the order they happened.
struct Control {
    deadline: Instant,
    failed: AtomicBool,
    failures: Mutex<Vec<String>>,
}

impl Control {
    fn fail(&self, worker: &str, why: String) {
        self.failures
            .lock()
            .unwrap()
            .push(format!("{worker}: {why}"));
        self.failed.store(true, Ordering::SeqCst);
    }
}

/// What one thread of a scenario gets: the shared control, its own random
/// numbers, and its operation counts.
struct Worker<'c> {
    control: &'c Control,
    rng: Rng,
    counts: BTreeMap<&'static str, u64>,
}

impl Worker<'_> {
    /// Neither past the deadline nor stopped by a failure.
    fn running(&self) -> bool {
        !self.failed() && Instant::now() < self.control.deadline
    }

    fn failed(&self) -> bool {
        self.control.failed.load(Ordering::SeqCst)
    }

    fn count(&mut self, op: &'static str) {
        *self.counts.entry(op).or_default() += 1;
    }

    /// A pick among `n` choices.
    fn pick(&mut self, n: usize) -> usize {
        self.rng.below(n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data);
        data
    }

    /// 1 to `max` random bytes.
    fn some_bytes(&mut self, max: u64) -> Vec<u8> {
        let len = 1 + self.rng.below(max);
        self.bytes(len as usize)
    }
}

type WorkFn<'a> = Box<dyn FnOnce(&mut Worker) -> Outcome + Send + 'a>;

/// The threads of one scenario.
struct Workers<'a> {
    scenario: &'static str,
    list: Vec<(String, WorkFn<'a>)>,
}

impl<'a> Workers<'a> {
    fn new(scenario: &'static str) -> Workers<'a> {
        Workers {
            scenario,
            list: Vec::new(),
        }
    }

    fn spawn(
        mut self,
        name: impl Into<String>,
        work: impl FnOnce(&mut Worker) -> Outcome + Send + 'a,
    ) -> Workers<'a> {
        self.list.push((name.into(), Box::new(work)));
        self
    }

    /// Runs every worker on its own thread for the stress time and prints
    /// their operation counts. Returns the failures (a panic is one), in
    /// the order they happened.
    fn run(self) -> Vec<String> {
        let time = stress_time();
        let seed = base_seed();
        let control = Control {
            deadline: Instant::now() + time,
            failed: AtomicBool::new(false),
            failures: Mutex::new(Vec::new()),
        };
        let _watchdog = Watchdog::arm(self.scenario, time + HANG_GRACE);
        let started = Instant::now();
        let counts: Vec<(String, BTreeMap<&'static str, u64>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (self.list.into_iter().enumerate())
                .map(|(index, (name, work))| {
                    let control = &control;
                    s.spawn(move || {
                        let mut worker = Worker {
                            control,
                            rng: seeded_rng(seed.wrapping_add(index as u64)),
                            counts: BTreeMap::new(),
                        };
                        match catch_unwind(AssertUnwindSafe(|| work(&mut worker))) {
                            Ok(Ok(())) => {}
                            Ok(Err(why)) => control.fail(&name, why),
                            Err(panic) => control.fail(&name, panic_message(&*panic)),
                        }
                        (name, worker.counts)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("worker panics are caught"))
                .collect()
        });
        let counts: Vec<String> = counts
            .iter()
            .map(|(name, ops)| {
                let ops: Vec<String> = ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
                format!("  {name}: {}", ops.join(", "))
            })
            .collect();
        eprintln!(
            "{}: seed {seed} ({STRESS_SEED_ENV}), {:.1} s:\n{}",
            self.scenario,
            started.elapsed().as_secs_f64(),
            counts.join("\n")
        );
        control.failures.into_inner().unwrap()
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    format!("panicked: {text}")
}

/// Aborts the test process if the workers are still running long after
/// their deadline: a deadlock must fail the run, not hang it.
struct Watchdog {
    /// Dropping it tells the watchdog the workers are done.
    _disarm: mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(scenario: &'static str, limit: Duration) -> Watchdog {
        let (disarm, disarmed) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
                eprintln!("{scenario}: workers still running {limit:?} after start: deadlock");
                std::process::abort();
            }
        });
        Watchdog { _disarm: disarm }
    }
}

/// Sets a flag when dropped: tells other workers that this one ended,
/// however it ended.
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// What a final check found wrong.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn push(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }

    /// The value, or None with the failure recorded.
    fn ok<T>(&mut self, result: Outcome<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    fn expect_eq<T: PartialEq + Debug>(&mut self, what: impl Display, got: T, want: T) {
        if got != want {
            self.push(format!("{what}: {got:?}, expected {want:?}"));
        }
    }

    /// `got` must equal `want`; differences are described by 4 KiB block.
    fn expect_bytes(&mut self, what: impl Display, got: &[u8], want: &[u8]) {
        if let Some(difference) = describe_difference(got, want) {
            self.push(format!("{what}: {difference}"));
        }
    }

    /// The user xattrs of `ino` must be exactly `want`.
    fn expect_xattrs(&mut self, what: impl Display, fs: &Fs, ino: u32, want: &Xattrs) {
        let Some(got) = self.ok(user_xattrs(fs, ino)) else {
            return;
        };
        let names = |map: &Xattrs| map.keys().cloned().collect::<BTreeSet<String>>();
        let missing: Vec<String> = names(want).difference(&names(&got)).cloned().collect();
        let extra: Vec<String> = names(&got).difference(&names(want)).cloned().collect();
        let changed: Vec<&String> = (got.iter())
            .filter(|(n, v)| want.get(*n).is_some_and(|w| w != *v))
            .map(|(n, _)| n)
            .collect();
        if !(missing.is_empty() && extra.is_empty() && changed.is_empty()) {
            self.push(format!(
                "{what} xattrs: missing {}, left behind {}, other value {}",
                first_few(&missing),
                first_few(&extra),
                first_few(&changed)
            ));
        }
    }

    /// The entries of `dir` (without "." and "..") must be exactly `want`.
    fn expect_listing(&mut self, fs: &Fs, dir: u32, want: &BTreeMap<String, u32>) {
        let Some(got) = self.ok(listing(fs, dir)) else {
            return;
        };
        if got == *want {
            return;
        }
        let missing: Vec<&String> = want.keys().filter(|n| !got.contains_key(*n)).collect();
        let extra: Vec<&String> = got.keys().filter(|n| !want.contains_key(*n)).collect();
        let wrong: Vec<String> = (got.iter())
            .filter_map(|(n, ino)| {
                let expected = want.get(n)?;
                (ino != expected).then(|| format!("{n} -> {ino} (expected {expected})"))
            })
            .collect();
        self.push(format!(
            "directory {dir}: {} entries, expected {}; missing {}, left behind {}, wrong inode {}",
            got.len(),
            want.len(),
            first_few(&missing),
            first_few(&extra),
            first_few(&wrong),
        ));
    }
}

fn first_few<T: Debug>(items: &[T]) -> String {
    const SHOWN: usize = 8;
    if items.len() <= SHOWN {
        format!("{items:?}")
    } else {
        format!("{:?} and {} more", &items[..SHOWN], items.len() - SHOWN)
    }
}

/// None if equal, else the lengths or the differing blocks and first byte.
fn describe_difference(got: &[u8], want: &[u8]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} bytes, expected {}", got.len(), want.len()));
    }
    let first = got.iter().zip(want).position(|(g, w)| g != w)?;
    let blocks: Vec<usize> = (got.chunks(F2FS_BLKSIZE).zip(want.chunks(F2FS_BLKSIZE)))
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(i, _)| i)
        .collect();
    Some(format!(
        "{} block(s) differ: {}; first byte {first}: {:#04x}, expected {:#04x}",
        blocks.len(),
        first_few(&blocks),
        got[first],
        want[first]
    ))
}

/// Checks `check` on the live file system, unmounts, runs fsck.f2fs and our
/// fsck, and checks again on the image reopened read-only. After a worker
/// failed the models are unreliable, so only the unmount and the fscks are
/// reported with it. Panics listing every problem.
fn verify(fs: Fs, image: &TestImage, failures: Vec<String>, check: impl Fn(&Fs) -> Problems) {
    let labelled = |label: &str, problems: Problems| -> Vec<String> {
        (problems.0.into_iter())
            .map(|p| format!("{label}: {p}"))
            .collect()
    };
    let mut report: Vec<String> = failures.iter().map(|f| format!("worker {f}")).collect();
    let models_valid = failures.is_empty();
    if models_valid {
        report.extend(labelled("live", check(&fs)));
    }
    if let Err(e) = fs.unmount() {
        report.push(format!("unmount: {e}"));
    }
    if let Err(e) = fsck_f2fs(&image.path) {
        // fsck_f2fs runs ours only when fsck.f2fs is clean: run it here
        // too, so both verdicts are reported.
        let ours = e
            .starts_with("fsck.f2fs")
            .then(|| our_fsck_problems(&image.path));
        report.push(abbreviate(&e));
        report.extend(ours.flatten().map(|o| abbreviate(&o)));
    }
    if models_valid {
        match Fs::open_path(&image.path, Default::default()) {
            Ok(fs) => report.extend(labelled("after unmount", check(&fs))),
            Err(e) => report.push(format!("reopening after unmount: {e}")),
        }
    }
    assert!(
        report.is_empty(),
        "{} problem(s):\n{}",
        report.len(),
        report.join("\n")
    );
}

/// What our fsck finds wrong with the image, if anything.
fn our_fsck_problems(img: &std::path::Path) -> Option<String> {
    let found = Fs::open_path(img, Default::default())
        .and_then(|fs| f2fuse_engine::internals::fsck::check(&fs))
        .map(|report| report.problems.join("\n"));
    match found {
        Ok(problems) if problems.is_empty() => None,
        Ok(problems) => Some(format!("f2fuse fsck:\n{problems}")),
        Err(e) => Some(format!("f2fuse fsck cannot check the image: {e}")),
    }
}

/// The first lines of a long tool report.
fn abbreviate(text: &str) -> String {
    const LINES: usize = 40;
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= LINES {
        return text.to_string();
    }
    format!(
        "{}\n... ({} more lines)",
        lines[..LINES].join("\n"),
        lines.len() - LINES
    )
}

// ---- reading and modelling the file system ----

/// Xattrs by full name.
type Xattrs = BTreeMap<String, Vec<u8>>;

/// A directory's entries without "." and "..", name -> inode.
fn listing(fs: &Fs, dir: u32) -> Outcome<BTreeMap<String, u32>> {
    let entries = fs.read_dir(dir).context(|| format!("read_dir {dir}"))?;
    let mut names = BTreeMap::new();
    for e in entries {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let name = String::from_utf8_lossy(&e.name).into_owned();
        if names.insert(name.clone(), e.ino).is_some() {
            return Err(format!("directory {dir}: name {name:?} listed twice"));
        }
    }
    Ok(names)
}

/// Up to `len` bytes of `ino` from `offset` (fewer at the end of the file),
/// read 1 MiB at a time.
fn read_range(fs: &Fs, ino: u32, offset: u64, len: u64) -> Outcome<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let mut done = 0;
    while done < out.len() {
        let end = (done + MIB as usize).min(out.len());
        let at = offset + done as u64;
        let n = (fs.read_ino(ino, at, &mut out[done..end]))
            .context(|| format!("read inode {ino} at {at}"))?;
        if n == 0 {
            break;
        }
        done += n;
    }
    out.truncate(done);
    Ok(out)
}

fn read_whole(fs: &Fs, ino: u32) -> Outcome<Vec<u8>> {
    let size = fs.inode(ino).context(|| format!("inode {ino}"))?.size;
    read_range(fs, ino, 0, size)
}

/// The i_blocks of a file with data in `blocks` and no xattr node: the
/// inode, the data blocks, and every direct and indirect node on their
/// paths (F2FS counts node blocks in i_blocks).
fn expected_i_blocks(blocks: impl IntoIterator<Item = u64>, addrs_per_inode: u32) -> u64 {
    let mut data = 0;
    let mut nodes = BTreeSet::new();
    for index in blocks {
        data += 1;
        let path =
            block_path(index, AddrCounts::plain(addrs_per_inode)).expect("within the largest file");
        nodes.extend(path.node_ofs[1..=path.depth].iter().copied());
    }
    1 + data + nodes.len() as u64
}

/// A generator whose sequence differs for every seed: splitmix64's
/// finalizer is a bijection, and xorshift must not start at zero.
fn seeded_rng(seed: u64) -> Rng {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Rng((z ^ (z >> 31)).max(1))
}

/// Deterministic bytes for `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    seeded_rng(seed).fill(&mut data);
    data
}

/// Fills `bytes[offset..offset + data.len()]`, growing `bytes` with zeros.
fn apply_write(bytes: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[offset..end].copy_from_slice(data);
}

fn new_dir(fs: &Fs, parent: u32, name: &str) -> u32 {
    fs.mkdir(parent, name.as_bytes(), 0o755, 0, 0).unwrap().ino
}

fn new_file(fs: &Fs, parent: u32, name: &str) -> u32 {
    fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

fn chmod(perm: u16) -> SetAttr {
    SetAttr {
        mode: Some(perm),
        ..SetAttr::default()
    }
}

fn truncate_to(size: u64) -> SetAttr {
    SetAttr {
        size: Some(size),
        ..SetAttr::default()
    }
}

/// Permission bits the chmod loops cycle through.
const PERMS: [u16; 6] = [0o755, 0o700, 0o750, 0o711, 0o775, 0o705];

// ---- 1. the issue's case A: data writes against link/unlink ----

/// Blocks written, in order, to the file of case A.
const CASE_A_BLOCKS: u64 = 3000;
/// Names the linker adds and removes.
const CASE_A_LINK_NAMES: u64 = 8;

fn case_a_block(index: u64, pass: u64) -> Vec<u8> {
    pattern(index << 20 | pass, F2FS_BLKSIZE)
}

/// One thread writes blocks 0..3000 of a file (then overwrites them, pass
/// after pass) while another links it under other names and unlinks them.
/// Both change the same inode (addresses, i_blocks, i_size; i_links,
/// ctime): neither may undo the other.
#[test]
fn writes_race_links_and_unlinks_of_the_same_file() {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new("stress-write-link");
    let fs = image.open();
    let dir = new_dir(&fs, ROOT, "case-a");
    let file = new_file(&fs, dir, "file");
    // The pass that last wrote each block.
    let mut passes = vec![0u64; CASE_A_BLOCKS as usize];
    let mut links: BTreeSet<String> = BTreeSet::new();
    let writer_done = AtomicBool::new(false);
    let failures = Workers::new("write-vs-link")
        .spawn("writer", |w| {
            let _done = RaiseOnDrop(&writer_done);
            for pass in 1.. {
                for index in 0..CASE_A_BLOCKS {
                    // The first pass goes on past the deadline: the checks want every block.
                    if w.failed() || (pass > 1 && !w.running()) {
                        return Ok(());
                    }
                    let data = case_a_block(index, pass);
                    let what = || format!("write block {index} (pass {pass})");
                    let n = fs.write(file, index * BLOCK, &data).context(what)?;
                    expect_whole_write(n, data.len(), what)?;
                    passes[index as usize] = pass;
                    w.count("write");
                }
            }
            Ok(())
        })
        .spawn("linker", |w| {
            while !writer_done.load(Ordering::SeqCst) && !w.failed() {
                let name = format!("link-{}", w.rng.below(CASE_A_LINK_NAMES));
                if links.contains(&name) {
                    fs.unlink(dir, name.as_bytes())
                        .context(|| format!("unlink {name}"))?;
                    links.remove(&name);
                    w.count("unlink");
                } else {
                    fs.link(file, dir, name.as_bytes())
                        .context(|| format!("link {name}"))?;
                    links.insert(name);
                    w.count("link");
                }
            }
            Ok(())
        })
        .run();
    verify(fs, &image, failures, |fs| {
        let mut p = Problems::default();
        let mut names: BTreeMap<String, u32> = links.iter().map(|n| (n.clone(), file)).collect();
        names.insert("file".into(), file);
        p.expect_listing(fs, dir, &names);
        let Some(inode) = p.ok(fs.inode(file).context(|| "the file".into())) else {
            return p;
        };
        p.expect_eq("file links", inode.links, names.len() as u32);
        p.expect_eq("file size", inode.size, CASE_A_BLOCKS * BLOCK);
        let want_blocks = expected_i_blocks(0..CASE_A_BLOCKS, inode.addrs_per_inode());
        p.expect_eq("file i_blocks", inode.blocks, want_blocks);
        let want: Vec<u8> = (0..CASE_A_BLOCKS)
            .flat_map(|i| case_a_block(i, passes[i as usize]))
            .collect();
        if let Some(got) = p.ok(read_whole(fs, file)) {
            p.expect_bytes("file contents", &got, &want);
        }
        p
    });
}

// ---- 2. the issue's case B: entries against chmod of their directory ----

/// Names the namespace thread of case B toggles; long enough and many
/// enough that the directory outgrows its inline area.
const CASE_B_NAMES: u64 = 600;

fn case_b_name(k: u64) -> String {
    format!("entry-with-a-rather-long-name-{k:04}")
}

/// One thread creates and removes files and subdirectories in a directory
/// while another chmods that directory: the entries (in the inode while the
/// directory is inline), i_links and i_size must survive each chmod, and
/// the last mode must survive the entries.
#[test]
fn entries_change_while_their_directory_is_chmodded() {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new("stress-dir-chmod");
    let fs = image.open();
    let dir = new_dir(&fs, ROOT, "case-b");
    // Name -> (inode, is a directory).
    let mut entries: BTreeMap<String, (u32, bool)> = BTreeMap::new();
    let mut last_perm = 0o755;
    let namespace_done = AtomicBool::new(false);
    let failures = Workers::new("entries-vs-chmod")
        .spawn("namespace", |w| {
            let _done = RaiseOnDrop(&namespace_done);
            while w.running() {
                let name = case_b_name(w.rng.below(CASE_B_NAMES));
                let bytes = name.as_bytes();
                match entries.get(&name) {
                    Some(&(_, true)) => {
                        fs.rmdir(dir, bytes).context(|| format!("rmdir {name}"))?;
                        entries.remove(&name);
                        w.count("rmdir");
                    }
                    Some(&(_, false)) => {
                        fs.unlink(dir, bytes).context(|| format!("unlink {name}"))?;
                        entries.remove(&name);
                        w.count("unlink");
                    }
                    None if w.pick(5) == 0 => {
                        let made = fs.mkdir(dir, bytes, 0o755, 0, 0);
                        let ino = made.context(|| format!("mkdir {name}"))?.ino;
                        entries.insert(name, (ino, true));
                        w.count("mkdir");
                    }
                    None => {
                        let made = fs.create(dir, bytes, 0o644, 0, 0);
                        let ino = made.context(|| format!("create {name}"))?.ino;
                        entries.insert(name, (ino, false));
                        w.count("create");
                    }
                }
            }
            Ok(())
        })
        .spawn("chmod", |w| {
            for perm in PERMS.iter().cycle() {
                if namespace_done.load(Ordering::SeqCst) || w.failed() {
                    break;
                }
                fs.setattr(dir, &chmod(*perm))
                    .context(|| format!("chmod {perm:o} of the directory"))?;
                last_perm = *perm;
                w.count("chmod");
            }
            Ok(())
        })
        .run();
    verify(fs, &image, failures, |fs| {
        let mut p = Problems::default();
        let names: BTreeMap<String, u32> = entries.iter().map(|(n, e)| (n.clone(), e.0)).collect();
        p.expect_listing(fs, dir, &names);
        let Some(inode) = p.ok(fs.inode(dir).context(|| "the directory".into())) else {
            return p;
        };
        let subdirs = entries.values().filter(|e| e.1).count() as u32;
        p.expect_eq("directory mode", inode.mode & 0o7777, last_perm);
        p.expect_eq("directory links", inode.links, 2 + subdirs);
        for (name, &(ino, is_dir)) in &entries {
            if let Some(child) = p.ok(fs.inode(ino).context(|| format!("inode of {name}"))) {
                let want = if is_dir {
                    (FileKind::Directory, 2)
                } else {
                    (FileKind::Regular, 1)
                };
                p.expect_eq(
                    format!("{name} kind and links"),
                    (child.kind, child.links),
                    want,
                );
            }
        }
        p
    });
}

// ---- 3. disjoint ranges of one file written in parallel ----

/// Blocks of the shared file one writer of scenario 3 owns.
const OWNED_RANGE_BLOCKS: u64 = 16;
/// Longest write into an owned range: up to a few blocks, rarely aligned.
const OWNED_WRITE_MAX: u64 = 5 * BLOCK;

/// A range of the shared file, its one writer, and what it must hold.
/// The writer holds `model` across each write so readers compare with
/// exactly what it wrote; other ranges are written meanwhile.
struct OwnedRange {
    start: u64,
    model: parking_lot::Mutex<RangeModel>,
}

#[derive(Default)]
struct RangeModel {
    bytes: Vec<u8>,
    /// File blocks written (each holds a data block now).
    blocks: BTreeSet<u64>,
}

impl OwnedRange {
    fn new(start_block: u64) -> OwnedRange {
        OwnedRange {
            start: start_block * BLOCK,
            model: parking_lot::Mutex::new(RangeModel {
                bytes: vec![0; (OWNED_RANGE_BLOCKS * BLOCK) as usize],
                blocks: BTreeSet::new(),
            }),
        }
    }

    fn len(&self) -> u64 {
        OWNED_RANGE_BLOCKS * BLOCK
    }

    fn end(&self) -> u64 {
        self.start + self.len()
    }
}

/// Random writes, partial blocks included, inside one owned range, of
/// bytes from `make`.
fn write_owned_range(
    fs: &Fs,
    file: u32,
    range: &OwnedRange,
    size: &AtomicU64,
    w: &mut Worker,
    make: fn(&mut Worker, usize) -> Vec<u8>,
) -> Outcome {
    while w.running() {
        let offset = w.rng.below(range.len());
        let len = 1 + w.rng.below((range.len() - offset).min(OWNED_WRITE_MAX));
        let data = make(w, len as usize);
        let at = range.start + offset;
        let mut model = range.model.lock();
        let what = || format!("write {len} bytes at {at}");
        let n = fs.write(file, at, &data).context(what)?;
        expect_whole_write(n, data.len(), what)?;
        model.bytes[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        model.blocks.extend(at / BLOCK..(at + len).div_ceil(BLOCK));
        size.fetch_max(at + len, Ordering::SeqCst);
        // Fairly: a writer relocking at once would starve the reader.
        parking_lot::MutexGuard::unlock_fair(model);
        w.count("write");
    }
    Ok(())
}

/// Bytes that compress: runs of one random byte, a random byte every 61.
fn compressible_bytes(w: &mut Worker, len: usize) -> Vec<u8> {
    let run = w.bytes(1)[0];
    let mut data = vec![run; len];
    for i in (0..len).step_by(61) {
        data[i] = w.bytes(1)[0];
    }
    data
}

/// Reads an owned range (holding its model, so it must match exactly) or
/// part of a gap no one writes (which must read as zeros).
fn read_owned_ranges(
    fs: &Fs,
    file: u32,
    ranges: &[OwnedRange],
    gaps: &[(u64, u64)],
    w: &mut Worker,
) -> Outcome {
    while w.running() {
        let choice = w.pick(ranges.len() + gaps.len());
        if let Some(range) = ranges.get(choice) {
            let model = range.model.lock();
            let got = read_range(fs, file, range.start, range.len())?;
            // Past the end of the file reads stop short; the model has zeros there.
            let mut want = model.bytes.clone();
            want.truncate(got.len());
            if got != want || model.bytes[got.len()..].iter().any(|&b| b != 0) {
                return Err(format!(
                    "range at {} read {} bytes while its writer was idle: {}",
                    range.start,
                    got.len(),
                    describe_difference(&got, &want).unwrap_or("data past the end".into())
                ));
            }
            w.count("read range");
        } else {
            let (start, end) = gaps[choice - ranges.len()];
            let at = start + w.rng.below(end - start - 64 * KIB);
            let got = read_range(fs, file, at, 64 * KIB)?;
            if let Some(i) = got.iter().position(|&b| b != 0) {
                return Err(format!(
                    "no one writes at {} but it holds {:#04x}",
                    at + i as u64,
                    got[i]
                ));
            }
            w.count("read gap");
        }
    }
    Ok(())
}

/// Four writers own disjoint block ranges of one file: two share the
/// inode's address slots, two share the first direct node under the first
/// indirect node (one of them starts in the direct node before it). Each
/// makes random writes, partial blocks included; a reader checks ranges
/// against their models and the gaps for zeros meanwhile. No write may
/// disturb another range, the block map or i_blocks.
#[test]
fn disjoint_ranges_of_one_file_are_written_in_parallel() {
    disjoint_ranges("stress-disjoint", false);
}

/// The same on a compressed file (4-block clusters, compressible bytes):
/// each range is whole clusters, so writers share the inode, its size and
/// direct nodes but never a cluster. i_blocks depends on how each cluster
/// compressed; fsck.f2fs checks it.
#[test]
fn disjoint_clusters_of_a_compressed_file_are_written_in_parallel() {
    disjoint_ranges("stress-disjoint-compressed", true);
}

fn disjoint_ranges(tag: &'static str, compressed: bool) {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new(tag);
    let fs = image.open();
    let dir = new_dir(&fs, ROOT, "disjoint");
    if compressed {
        fs.set_flags(dir, inode_flag::COMPR).unwrap();
    }
    let file = new_file(&fs, dir, "shared");
    assert_eq!(fs.inode(file).unwrap().compression.is_some(), compressed);
    let addrs = fs.inode(file).unwrap().addrs_per_inode() as u64;
    // Whole clusters of the largest size (16 blocks) either way.
    let first_indirect = (addrs + 2 * ADDRS_PER_BLOCK as u64) / 16 * 16;
    let half = OWNED_RANGE_BLOCKS / 2;
    let ranges = [
        0,
        OWNED_RANGE_BLOCKS,
        first_indirect - half,
        first_indirect + half,
    ]
    .map(OwnedRange::new);
    let gaps = [(ranges[1].end(), ranges[2].start)];
    let size = AtomicU64::new(0);
    let make = if compressed {
        compressible_bytes
    } else {
        |w: &mut Worker, len| w.bytes(len)
    };
    let mut workers = Workers::new(tag);
    for (i, range) in ranges.iter().enumerate() {
        let (fs, size) = (&fs, &size);
        workers = workers.spawn(format!("writer-{i}"), move |w| {
            write_owned_range(fs, file, range, size, w, make)
        });
    }
    let failures = workers
        .spawn("reader", |w| {
            read_owned_ranges(&fs, file, &ranges, &gaps, w)
        })
        .run();
    verify(fs, &image, failures, |fs| {
        let mut p = Problems::default();
        let size = size.load(Ordering::SeqCst);
        let mut want = vec![0u8; size as usize];
        let mut blocks = BTreeSet::new();
        for range in &ranges {
            let model = range.model.lock();
            let (start, end) = (
                range.start.min(size) as usize,
                range.end().min(size) as usize,
            );
            want[start..end].copy_from_slice(&model.bytes[..end - start]);
            blocks.extend(model.blocks.iter().copied());
        }
        let Some(inode) = p.ok(fs.inode(file).context(|| "the file".into())) else {
            return p;
        };
        p.expect_eq("file size", inode.size, size);
        if let Some(c) = &inode.compression {
            // Some cluster below the end of the file must have shrunk, or
            // the scenario tested plain writes only.
            p.expect_eq("some blocks saved", c.compr_blocks > 0, true);
        }
        if !compressed {
            p.expect_eq(
                "file i_blocks",
                inode.blocks,
                expected_i_blocks(blocks, addrs as u32),
            );
        }
        if let Some(got) = p.ok(read_whole(fs, file)) {
            p.expect_bytes("file contents", &got, &want);
        }
        p
    });
}

// ---- 4. overlapping requests: atomic writes, reads, truncate, fallocate ----

/// Which request wrote a word: repeated in every 8 bytes a request writes,
/// with the units (of a size the scenario fixes) the request covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    writer: u8,
    first: u8,
    units: u8,
    seq: u32,
}

/// Marks a word as a stamp: zeros and garbage are told apart from stamps.
const STAMP_MAGIC: u64 = 0xA5;

impl Stamp {
    fn word(self) -> u64 {
        STAMP_MAGIC << 56
            | (self.writer as u64) << 48
            | (self.first as u64) << 40
            | (self.units as u64) << 32
            | self.seq as u64
    }

    fn from_word(word: u64) -> Option<Stamp> {
        (word >> 56 == STAMP_MAGIC).then_some(Stamp {
            writer: (word >> 48) as u8,
            first: (word >> 40) as u8,
            units: (word >> 32) as u8,
            seq: word as u32,
        })
    }

    /// The request's bytes: the stamp over all its units.
    fn fill(self, unit: u64) -> Vec<u8> {
        let words = self.units as u64 * unit / 8;
        self.word().to_le_bytes().repeat(words as usize)
    }

    fn start(self, unit: u64) -> u64 {
        self.first as u64 * unit
    }

    fn end(self, unit: u64) -> u64 {
        (self.first as u64 + self.units as u64) * unit
    }
}

fn word_at(buf: &[u8], pos: usize) -> u64 {
    u64::from_le_bytes(buf[pos..pos + 8].try_into().unwrap())
}

/// Requests of scenario 4a are this many units of 64 KiB, all from offset 0.
const PREFIX_UNIT: u64 = 64 * KIB;
const PREFIX_UNITS: [u8; 5] = [1, 2, 4, 8, 16];
const PREFIX_WRITERS: usize = 3;
/// Writer number of the request that fills the file before the threads start.
const INITIAL_WRITER: u8 = 0xff;

/// A read of `buf` at `offset` of a file written only by stamped requests
/// that all start at offset 0: wherever a request's stamp shows, it must
/// go on to the end of that request (or of the read). A later request
/// covering a byte further on covers this one too, so a change of stamp
/// before the request's end is a torn request: a write applied in part, or
/// a read that saw part of a write.
fn check_prefix_read(buf: &[u8], offset: u64) -> Outcome {
    let mut pos = 0;
    while pos < buf.len() {
        let at = offset + pos as u64;
        let word = word_at(buf, pos);
        let stamp = Stamp::from_word(word)
            .ok_or_else(|| format!("offset {at}: {word:#018x} is no request's stamp"))?;
        let valid_writer =
            stamp.writer == INITIAL_WRITER || (stamp.writer as usize) < PREFIX_WRITERS;
        if !valid_writer || stamp.start(PREFIX_UNIT) != 0 || stamp.end(PREFIX_UNIT) <= at {
            return Err(format!("offset {at}: {stamp:?} does not cover it"));
        }
        let end = (stamp.end(PREFIX_UNIT) - offset).min(buf.len() as u64) as usize;
        if let Some(torn) = (pos..end).step_by(8).find(|&p| word_at(buf, p) != word) {
            return Err(format!(
                "torn request {stamp:?} (bytes 0..{}): offset {} holds {:?} in a read of {} bytes at {offset}",
                stamp.end(PREFIX_UNIT),
                offset + torn as u64,
                Stamp::from_word(word_at(buf, torn)),
                buf.len()
            ));
        }
        pos = end;
    }
    Ok(())
}

/// Three writers write requests of 64 KiB..1 MiB, every one from offset 0
/// and filled with its own stamp, while two readers read 64 KiB-aligned
/// windows of up to 1 MiB: no read may show part of a request.
#[test]
fn overlapping_requests_are_never_seen_torn() {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new("stress-torn");
    let fs = image.open();
    let dir = new_dir(&fs, ROOT, "torn");
    let file = new_file(&fs, dir, "shared");
    let largest = *PREFIX_UNITS.last().unwrap();
    let whole = largest as u64 * PREFIX_UNIT;
    let initial = Stamp {
        writer: INITIAL_WRITER,
        first: 0,
        units: largest,
        seq: 0,
    };
    fs.write(file, 0, &initial.fill(PREFIX_UNIT)).unwrap();
    let mut workers = Workers::new("torn-requests");
    for writer in 0..PREFIX_WRITERS {
        let fs = &fs;
        workers = workers.spawn(format!("writer-{writer}"), move |w| {
            for seq in 0.. {
                if !w.running() {
                    break;
                }
                let units = PREFIX_UNITS[w.pick(PREFIX_UNITS.len())];
                let stamp = Stamp {
                    writer: writer as u8,
                    first: 0,
                    units,
                    seq,
                };
                let data = stamp.fill(PREFIX_UNIT);
                let what = || format!("write {stamp:?}");
                let n = fs.write(file, 0, &data).context(what)?;
                expect_whole_write(n, data.len(), what)?;
                w.count("write");
            }
            Ok(())
        });
    }
    for reader in 0..2 {
        let fs = &fs;
        workers = workers.spawn(format!("reader-{reader}"), move |w| {
            while w.running() {
                let first = w.rng.below(largest as u64);
                let units = 1 + w.rng.below(largest as u64 - first);
                let offset = first * PREFIX_UNIT;
                let mut buf = vec![0u8; (units * PREFIX_UNIT) as usize];
                let n = fs
                    .read_ino(file, offset, &mut buf)
                    .context(|| format!("read at {offset}"))?;
                if n != buf.len() {
                    return Err(format!("read at {offset}: {n} of {} bytes", buf.len()));
                }
                check_prefix_read(&buf, offset)?;
                w.count("read");
            }
            Ok(())
        });
    }
    let failures = workers.run();
    verify(fs, &image, failures, |fs| {
        let mut p = Problems::default();
        if let Some(got) = p.ok(read_whole(fs, file)) {
            p.expect_eq("file size", got.len() as u64, whole);
            p.ok(check_prefix_read(&got, 0));
        }
        p
    });
}

/// Every operation of scenario 4b covers whole slots of this size.
const SLOT: u64 = 64 * KIB;
/// 4 MiB: the file spans the inode's addresses and the first direct node.
const SLOTS: u64 = 64;
/// Largest request in slots (512 KiB; one `Fs::write` step is 1 MiB).
const MAX_REQUEST_SLOTS: u64 = 8;
const SLOT_WRITERS: usize = 3;

/// A random run of whole slots: (first, count).
fn random_slots(w: &mut Worker) -> (u64, u64) {
    let first = w.rng.below(SLOTS);
    let count = 1 + w.rng.below(MAX_REQUEST_SLOTS.min(SLOTS - first));
    (first, count)
}

/// A read of `buf` at slot-aligned `offset`, asked for `asked` bytes, of a
/// file changed only by whole-slot operations: each slot must read as
/// zeros (hole, reservation, punched, zeroed or truncated) or as one stamp
/// of a request that covered it, and the file must end on a slot boundary.
fn check_slot_read(buf: &[u8], offset: u64, asked: usize) -> Outcome {
    if buf.len() != asked && !(offset + buf.len() as u64).is_multiple_of(SLOT) {
        return Err(format!(
            "read of {asked} bytes at {offset} ended at {}, inside a slot: a torn size change",
            offset + buf.len() as u64
        ));
    }
    for (i, slot) in buf.chunks(SLOT as usize).enumerate() {
        let at = offset + i as u64 * SLOT;
        let word = word_at(slot, 0);
        if let Some(pos) = (0..slot.len())
            .step_by(8)
            .find(|&p| word_at(slot, p) != word)
        {
            return Err(format!(
                "slot at {at} is not uniform: {:?} at its start, {:?} at +{pos}",
                Stamp::from_word(word),
                Stamp::from_word(word_at(slot, pos))
            ));
        }
        if word == 0 {
            continue;
        }
        let stamp = Stamp::from_word(word).filter(|s| (s.writer as usize) < SLOT_WRITERS);
        if !stamp.is_some_and(|s| s.start(SLOT) <= at && at < s.end(SLOT)) {
            return Err(format!(
                "slot at {at} holds {word:#018x} ({stamp:?}), which never covered it"
            ));
        }
    }
    Ok(())
}

/// Writers of stamped whole-slot requests race a thread that truncates to
/// slot boundaries, punches holes in, zeroes and preallocates whole slots,
/// while a reader checks that every slot is all zeros or one request's
/// stamp and that the size is on a slot boundary. Writes, truncates and
/// fallocates exclude each other, so nothing else can show.
#[test]
fn writes_race_truncate_punch_and_zero_range() {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new("stress-falloc");
    let fs = image.open();
    let dir = new_dir(&fs, ROOT, "falloc");
    let file = new_file(&fs, dir, "shared");
    let mut workers = Workers::new("writes-vs-fallocate");
    for writer in 0..SLOT_WRITERS {
        let fs = &fs;
        workers = workers.spawn(format!("writer-{writer}"), move |w| {
            for seq in 0.. {
                if !w.running() {
                    break;
                }
                let (first, count) = random_slots(w);
                let stamp = Stamp {
                    writer: writer as u8,
                    first: first as u8,
                    units: count as u8,
                    seq,
                };
                let data = stamp.fill(SLOT);
                let what = || format!("write {stamp:?}");
                let n = fs.write(file, first * SLOT, &data).context(what)?;
                expect_whole_write(n, data.len(), what)?;
                w.count("write");
            }
            Ok(())
        });
    }
    let failures = workers
        .spawn("space", |w| {
            while w.running() {
                let (first, count) = random_slots(w);
                let (offset, len) = (first * SLOT, count * SLOT);
                let keep_size = w.pick(2) == 0;
                let (op, result) = match w.pick(4) {
                    0 => (
                        "truncate",
                        fs.setattr(file, &truncate_to(offset)).map(|_| ()),
                    ),
                    1 => (
                        "punch hole",
                        fs.fallocate(file, offset, len, FallocMode::PunchHole),
                    ),
                    2 => (
                        "zero range",
                        fs.fallocate(file, offset, len, FallocMode::ZeroRange { keep_size }),
                    ),
                    _ => (
                        "allocate",
                        fs.fallocate(file, offset, len, FallocMode::Allocate { keep_size }),
                    ),
                };
                result
                    .context(|| format!("{op} {len} bytes at {offset} (keep size {keep_size})"))?;
                w.count(op);
            }
            Ok(())
        })
        .spawn("reader", |w| {
            while w.running() {
                let (first, count) = random_slots(w);
                let mut buf = vec![0u8; (count * SLOT) as usize];
                let offset = first * SLOT;
                let n = fs
                    .read_ino(file, offset, &mut buf)
                    .context(|| format!("read at {offset}"))?;
                check_slot_read(&buf[..n], offset, buf.len())?;
                w.count("read");
            }
            Ok(())
        })
        .run();
    verify(fs, &image, failures, |fs| {
        let mut p = Problems::default();
        if let Some(got) = p.ok(read_whole(fs, file)) {
            p.ok(check_slot_read(&got, 0, got.len()));
        }
        p
    });
}

// ---- 5. everything at once, each thread in its own names and range ----

const MIXED_THREADS: usize = 6;
const SHARED_DIRS: usize = 3;
/// Directories per thread that move between the shared directories and
/// into each other's (and other threads') moving directories.
const MOVING_DIRS: usize = 2;
/// Files a thread keeps at most.
const MAX_OWN_FILES: usize = 16;
const MAX_LEAF_DIRS: usize = 4;
/// Blocks of the shared file each thread owns; the ranges are adjacent and
/// cross from the inode's addresses into the first direct node.
const MIXED_RANGE_BLOCKS: u64 = 24;
const OWN_FILE_MAX_SIZE: u64 = 48 * KIB;
const OWN_WRITE_MAX: u64 = 12 * KIB;
const XATTR_NAMES: u64 = 4;
const XATTR_MAX_VALUE: u64 = 48;

/// What all threads of scenario 5 know: the fixed directories and files.
struct MixedShared {
    top: u32,
    dirs: [u32; SHARED_DIRS],
    /// Moving directories by thread.
    moving: Vec<[u32; MOVING_DIRS]>,
    file: u32,
    /// Where thread 0's range of the shared file starts (bytes).
    file_base: u64,
    /// Largest end written to the shared file.
    file_size: AtomicU64,
}

impl MixedShared {
    fn range_start(&self, thread: usize) -> u64 {
        self.file_base + thread as u64 * MIXED_RANGE_BLOCKS * BLOCK
    }

    fn moving_name(thread: usize, j: usize) -> String {
        format!("t{thread}-x{j}")
    }

    /// Where moving directory `j` of `thread` starts.
    fn moving_home(dirs: &[u32; SHARED_DIRS], thread: usize, j: usize) -> u32 {
        dirs[(thread + j) % SHARED_DIRS]
    }
}

/// A file one thread created and alone changes.
#[derive(Clone, Debug)]
struct OwnFile {
    ino: u32,
    /// (directory, name) of each link.
    names: BTreeSet<(u32, String)>,
    content: Vec<u8>,
    perm: u16,
    xattrs: Xattrs,
}

/// What one thread of scenario 5 did that succeeded.
#[derive(Default)]
struct MixedModel {
    files: Vec<OwnFile>,
    /// Empty directories: (parent, name) -> inode.
    leaf_dirs: BTreeMap<(u32, String), u32>,
    /// Where each moving directory is: (parent, name).
    moving: Vec<(u32, String)>,
    range: Vec<u8>,
    /// The thread's xattrs on each shared directory.
    dir_xattrs: BTreeMap<u32, Xattrs>,
    /// The mode this thread gave the shared directory it owns the mode of.
    dir_perm: Option<u16>,
    next_name: u64,
}

/// One operation of a scenario 5 thread.
type MixedOp<T> = fn(&mut T, &mut Worker) -> Outcome;

/// One thread of scenario 5: its number, the shared state and its model.
struct MixedThread<'a> {
    id: usize,
    fs: &'a Fs,
    shared: &'a MixedShared,
    model: &'a mut MixedModel,
}

impl MixedThread<'_> {
    /// The operations of scenario 5 and their weights. Attribute changes of the
    /// shared directories are frequent (all threads add and remove names there
    /// meanwhile); fsync is rare, as it mostly checkpoints and so stops every
    /// other thread.
    const OPS: [(u64, MixedOp<Self>); 16] = [
        (80, Self::create),
        (80, Self::write_own),
        (30, Self::truncate_own),
        (30, Self::chmod_own),
        (50, Self::xattr_own),
        (70, Self::link),
        (70, Self::unlink),
        (100, Self::rename),
        (70, Self::write_shared),
        (5, Self::fsync),
        (90, Self::xattr_shared_dir),
        (80, Self::chmod_shared_dir),
        (90, Self::move_dir),
        (50, Self::leaf_dir),
        (55, Self::lookup_own),
        (50, Self::read_own),
    ];

    fn new_name(&mut self, kind: &str) -> String {
        self.model.next_name += 1;
        format!("t{}-{kind}{}", self.id, self.model.next_name)
    }

    /// A shared directory or one of this thread's moving directories.
    fn own_dir(&self, w: &mut Worker) -> u32 {
        let own = &self.shared.moving[self.id];
        let choice = w.pick(SHARED_DIRS + own.len());
        *self.shared.dirs.iter().chain(own).nth(choice).unwrap()
    }

    fn file_index(&self, w: &mut Worker) -> Option<usize> {
        (!self.model.files.is_empty()).then(|| w.pick(self.model.files.len()))
    }

    fn one_name(file: &OwnFile, w: &mut Worker) -> (u32, String) {
        file.names
            .iter()
            .nth(w.pick(file.names.len()))
            .unwrap()
            .clone()
    }

    /// Runs random operations, as often as `OPS` weighs them, until
    /// the deadline.
    fn run(&mut self, w: &mut Worker) -> Outcome {
        let total: u64 = Self::OPS.iter().map(|(weight, _)| weight).sum();
        while w.running() {
            let mut pick = w.rng.below(total);
            for (weight, op) in Self::OPS {
                if pick < weight {
                    op(self, w)?;
                    break;
                }
                pick -= weight;
            }
        }
        Ok(())
    }

    fn create(&mut self, w: &mut Worker) -> Outcome {
        if self.model.files.len() >= MAX_OWN_FILES {
            return self.unlink(w);
        }
        let dir = self.own_dir(w);
        let name = self.new_name("f");
        let perm = PERMS[w.pick(PERMS.len())] & 0o666;
        let made = self.fs.create(dir, name.as_bytes(), perm, 0, 0);
        let ino = made.context(|| format!("create {name} in {dir}"))?.ino;
        self.model.files.push(OwnFile {
            ino,
            names: BTreeSet::from([(dir, name)]),
            content: Vec::new(),
            perm,
            xattrs: BTreeMap::new(),
        });
        w.count("create");
        Ok(())
    }

    fn write_own(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let offset = w.rng.below(OWN_FILE_MAX_SIZE - OWN_WRITE_MAX);
        let data = w.some_bytes(OWN_WRITE_MAX);
        let file = &mut self.model.files[i];
        let what = || {
            format!(
                "write {} bytes at {offset} of inode {}",
                data.len(),
                file.ino
            )
        };
        let n = self.fs.write(file.ino, offset, &data).context(what)?;
        expect_whole_write(n, data.len(), what)?;
        apply_write(&mut file.content, offset as usize, &data);
        w.count("write file");
        Ok(())
    }

    fn truncate_own(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let size = w.rng.below(OWN_FILE_MAX_SIZE);
        let file = &mut self.model.files[i];
        (self.fs.setattr(file.ino, &truncate_to(size)))
            .context(|| format!("truncate inode {} to {size}", file.ino))?;
        file.content.resize(size as usize, 0);
        w.count("truncate");
        Ok(())
    }

    fn chmod_own(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let perm = PERMS[w.pick(PERMS.len())];
        let file = &mut self.model.files[i];
        (self.fs.setattr(file.ino, &chmod(perm)))
            .context(|| format!("chmod {perm:o} inode {}", file.ino))?;
        file.perm = perm;
        w.count("chmod file");
        Ok(())
    }

    /// Sets or removes one of a few xattrs of `ino`, as `xattrs` models them.
    fn change_xattr(
        fs: &Fs,
        ino: u32,
        name: String,
        xattrs: &mut Xattrs,
        w: &mut Worker,
    ) -> Outcome {
        if xattrs.contains_key(&name) && w.pick(3) == 0 {
            (fs.remove_xattr(ino, name.as_bytes()))
                .context(|| format!("remove xattr {name} of inode {ino}"))?;
            xattrs.remove(&name);
            w.count("remove xattr");
        } else {
            let value = w.some_bytes(XATTR_MAX_VALUE);
            (fs.set_xattr(ino, name.as_bytes(), &value, SetMode::Any))
                .context(|| format!("set xattr {name} of inode {ino}"))?;
            xattrs.insert(name, value);
            w.count("set xattr");
        }
        Ok(())
    }

    fn xattr_own(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let name = format!("user.k{}", w.rng.below(XATTR_NAMES));
        let file = &mut self.model.files[i];
        Self::change_xattr(self.fs, file.ino, name, &mut file.xattrs, w)
    }

    fn xattr_shared_dir(&mut self, w: &mut Worker) -> Outcome {
        let dir = self.shared.dirs[w.pick(SHARED_DIRS)];
        let name = format!("user.t{}-{}", self.id, w.rng.below(XATTR_NAMES));
        let mine = self.model.dir_xattrs.entry(dir).or_default();
        Self::change_xattr(self.fs, dir, name, mine, w)
    }

    /// Threads 0..SHARED_DIRS each own the mode of one shared directory;
    /// the others change xattrs of the shared directories instead.
    fn chmod_shared_dir(&mut self, w: &mut Worker) -> Outcome {
        let Some(&dir) = self.shared.dirs.get(self.id) else {
            return self.xattr_shared_dir(w);
        };
        let perm = PERMS[w.pick(PERMS.len())];
        (self.fs.setattr(dir, &chmod(perm)))
            .context(|| format!("chmod {perm:o} shared directory {dir}"))?;
        self.model.dir_perm = Some(perm);
        w.count("chmod dir");
        Ok(())
    }

    fn link(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let dir = self.own_dir(w);
        let name = self.new_name("l");
        let file = &mut self.model.files[i];
        (self.fs.link(file.ino, dir, name.as_bytes()))
            .context(|| format!("link inode {} as {name} in {dir}", file.ino))?;
        file.names.insert((dir, name));
        w.count("link");
        Ok(())
    }

    /// Forgets `(dir, name)` of file `i`, and the file once it has no name.
    fn forget_name(&mut self, i: usize, name: &(u32, String)) {
        let file = &mut self.model.files[i];
        file.names.remove(name);
        if file.names.is_empty() {
            self.model.files.swap_remove(i);
        }
    }

    fn unlink(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let (dir, name) = Self::one_name(&self.model.files[i], w);
        (self.fs.unlink(dir, name.as_bytes())).context(|| format!("unlink {name} in {dir}"))?;
        self.forget_name(i, &(dir, name));
        w.count("unlink");
        Ok(())
    }

    /// Renames one of its names to a new name or over another of its
    /// names, within or across directories.
    fn rename(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let from = Self::one_name(&self.model.files[i], w);
        let to = if w.pick(3) == 0 {
            let victim = w.pick(self.model.files.len());
            Self::one_name(&self.model.files[victim], w)
        } else {
            (self.own_dir(w), self.new_name("r"))
        };
        (self.fs.rename(
            from.0,
            from.1.as_bytes(),
            to.0,
            to.1.as_bytes(),
            RenameFlags::default(),
        ))
        .context(|| format!("rename {from:?} to {to:?}"))?;
        // Onto another name of the same inode, rename changes nothing.
        if self.model.files[i].names.contains(&to) {
            w.count("rename onto itself");
            return Ok(());
        }
        let ino = self.model.files[i].ino;
        if let Some(victim) = self.model.files.iter().position(|f| f.names.contains(&to)) {
            self.forget_name(victim, &to);
            w.count("rename over a file");
        } else {
            w.count("rename");
        }
        let moved = self.model.files.iter().position(|f| f.ino == ino).unwrap();
        self.model.files[moved].names.remove(&from);
        self.model.files[moved].names.insert(to);
        Ok(())
    }

    fn write_shared(&mut self, w: &mut Worker) -> Outcome {
        let len_max = MIXED_RANGE_BLOCKS * BLOCK;
        let offset = w.rng.below(len_max);
        let data = w.some_bytes((len_max - offset).min(OWN_WRITE_MAX));
        let at = self.shared.range_start(self.id) + offset;
        let what = || format!("write {} bytes at {at} of the shared file", data.len());
        let n = self.fs.write(self.shared.file, at, &data).context(what)?;
        expect_whole_write(n, data.len(), what)?;
        self.model.range[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        self.shared
            .file_size
            .fetch_max(at + data.len() as u64, Ordering::SeqCst);
        w.count("write shared");
        Ok(())
    }

    fn fsync(&mut self, w: &mut Worker) -> Outcome {
        let ino = match self.file_index(w) {
            Some(i) if w.pick(2) == 0 => self.model.files[i].ino,
            _ => self.shared.file,
        };
        self.fs
            .fsync(ino)
            .context(|| format!("fsync inode {ino}"))?;
        w.count("fsync");
        Ok(())
    }

    /// Moves one of its directories into a shared directory or into any
    /// moving directory. Only the latter may be refused with EINVAL: the
    /// target may be inside the moved directory (other threads move theirs
    /// into ours), and two such moves at once must not make a cycle.
    fn move_dir(&mut self, w: &mut Worker) -> Outcome {
        let j = w.pick(MOVING_DIRS);
        let me = self.shared.moving[self.id][j];
        let moving: Vec<u32> = self
            .shared
            .moving
            .iter()
            .flatten()
            .copied()
            .filter(|&d| d != me)
            .collect();
        let into_moving = w.pick(2) == 0;
        let target = if into_moving {
            moving[w.pick(moving.len())]
        } else {
            self.shared.dirs[w.pick(SHARED_DIRS)]
        };
        let (parent, name) = self.model.moving[j].clone();
        let bytes = name.as_bytes();
        let moved = (self.fs).rename(parent, bytes, target, bytes, RenameFlags::default());
        if into_moving && matches!(&moved, Err(e) if e.to_errno() == libc::EINVAL) {
            w.count("move dir refused (cycle)");
            return Ok(());
        }
        moved.context(|| format!("move directory {name} from {parent} into {target}"))?;
        self.model.moving[j].0 = target;
        w.count("move dir");
        Ok(())
    }

    fn leaf_dir(&mut self, w: &mut Worker) -> Outcome {
        let full = self.model.leaf_dirs.len() >= MAX_LEAF_DIRS;
        if full || (!self.model.leaf_dirs.is_empty() && w.pick(2) == 0) {
            let key = self
                .model
                .leaf_dirs
                .keys()
                .nth(w.pick(self.model.leaf_dirs.len()))
                .unwrap()
                .clone();
            (self.fs.rmdir(key.0, key.1.as_bytes())).context(|| format!("rmdir {key:?}"))?;
            self.model.leaf_dirs.remove(&key);
            w.count("rmdir");
        } else {
            let dir = self.own_dir(w);
            let name = self.new_name("d");
            let made = self.fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0);
            let ino = made.context(|| format!("mkdir {name} in {dir}"))?.ino;
            self.model.leaf_dirs.insert((dir, name), ino);
            w.count("mkdir");
        }
        Ok(())
    }

    /// Its own names must be found whatever other threads do meanwhile.
    fn lookup_own(&mut self, w: &mut Worker) -> Outcome {
        let (dir, name, ino) = match self.file_index(w) {
            Some(i) if w.pick(2) == 0 => {
                let (dir, name) = Self::one_name(&self.model.files[i], w);
                (dir, name, self.model.files[i].ino)
            }
            _ => {
                let j = w.pick(MOVING_DIRS);
                let (dir, name) = self.model.moving[j].clone();
                (dir, name, self.shared.moving[self.id][j])
            }
        };
        let found = self
            .fs
            .lookup(dir, name.as_bytes())
            .context(|| format!("lookup {name} in {dir}"))?;
        if found.ino != ino {
            return Err(format!(
                "lookup {name} in {dir}: inode {}, expected {ino}",
                found.ino
            ));
        }
        w.count("lookup");
        Ok(())
    }

    fn read_own(&mut self, w: &mut Worker) -> Outcome {
        let Some(i) = self.file_index(w) else {
            return Ok(());
        };
        let file = &self.model.files[i];
        let got = read_whole(self.fs, file.ino)?;
        if let Some(difference) = describe_difference(&got, &file.content) {
            return Err(format!(
                "read of inode {} (no other thread writes it): {difference}",
                file.ino
            ));
        }
        w.count("read file");
        Ok(())
    }
}

/// The user xattrs of `ino`.
fn user_xattrs(fs: &Fs, ino: u32) -> Outcome<Xattrs> {
    let inode = fs.inode(ino).context(|| format!("inode {ino}"))?;
    let all = fs.xattrs(&inode).context(|| format!("xattrs of {ino}"))?;
    Ok(all
        .into_iter()
        .filter(|(n, _)| n.starts_with(b"user."))
        .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
        .collect())
}

/// Walks the directory tree under `top`: no directory may be reached twice
/// (a cycle or a second link), each one's ".." must be the directory it was
/// found in and its links 2 + its subdirectories. Returns the directories
/// reached.
fn walk_tree(fs: &Fs, top: u32, p: &mut Problems) -> BTreeSet<u32> {
    let mut reached = BTreeSet::from([top]);
    let mut pending = vec![top];
    while let Some(dir) = pending.pop() {
        let Some(entries) = p.ok(fs.read_dir(dir).context(|| format!("read_dir {dir}"))) else {
            continue;
        };
        let mut subdirs = 0;
        for e in entries.iter().filter(|e| e.kind == FileKind::Directory) {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            subdirs += 1;
            let name = String::from_utf8_lossy(&e.name);
            if !reached.insert(e.ino) {
                p.push(format!(
                    "directory {} reached again as {name} in {dir}",
                    e.ino
                ));
                continue;
            }
            if let Some(up) = p.ok(fs
                .lookup(e.ino, b"..")
                .context(|| format!("\"..\" of {name}")))
            {
                p.expect_eq(
                    format!("\"..\" of {name} (inode {}) in {dir}", e.ino),
                    up.ino,
                    dir,
                );
            }
            pending.push(e.ino);
        }
        if let Some(inode) = p.ok(fs.inode(dir).context(|| format!("directory {dir}"))) {
            p.expect_eq(
                format!("links of directory {dir}"),
                inode.links,
                2 + subdirs,
            );
        }
    }
    reached
}

fn check_mixed(fs: &Fs, shared: &MixedShared, models: &[MixedModel]) -> Problems {
    let mut p = Problems::default();
    // Every directory's expected entries, from the models.
    let mut want: BTreeMap<u32, BTreeMap<String, u32>> = BTreeMap::new();
    let mut top = BTreeMap::from([("shared".to_string(), shared.file)]);
    for (k, &dir) in shared.dirs.iter().enumerate() {
        top.insert(format!("d{k}"), dir);
        want.insert(dir, BTreeMap::new());
    }
    want.insert(shared.top, top);
    for (thread, model) in models.iter().enumerate() {
        for (j, (parent, name)) in model.moving.iter().enumerate() {
            let ino = shared.moving[thread][j];
            want.entry(ino).or_default();
            want.entry(*parent).or_default().insert(name.clone(), ino);
        }
        for ((parent, name), &ino) in &model.leaf_dirs {
            want.insert(ino, BTreeMap::new());
            want.entry(*parent).or_default().insert(name.clone(), ino);
        }
        for file in &model.files {
            for (dir, name) in &file.names {
                want.entry(*dir).or_default().insert(name.clone(), file.ino);
            }
        }
    }
    for (dir, entries) in &want {
        p.expect_listing(fs, *dir, entries);
    }
    let reached = walk_tree(fs, shared.top, &mut p);
    let unreached: Vec<&u32> = want.keys().filter(|d| !reached.contains(d)).collect();
    if !unreached.is_empty() {
        p.push(format!(
            "directories not reachable from the top: {}",
            first_few(&unreached)
        ));
    }
    for file in models.iter().flat_map(|m| &m.files) {
        let Some(inode) = p.ok(fs.inode(file.ino).context(|| format!("file {}", file.ino))) else {
            continue;
        };
        let what = format!("file {} {:?}", file.ino, file.names.first().unwrap());
        p.expect_eq(
            format!("{what} links"),
            inode.links,
            file.names.len() as u32,
        );
        p.expect_eq(format!("{what} mode"), inode.mode & 0o7777, file.perm);
        if let Some(got) = p.ok(read_whole(fs, file.ino)) {
            p.expect_bytes(format!("{what} contents"), &got, &file.content);
        }
        p.expect_xattrs(&what, fs, file.ino, &file.xattrs);
    }
    let size = shared.file_size.load(Ordering::SeqCst);
    if let Some(got) = p.ok(read_whole(fs, shared.file)) {
        p.expect_eq("shared file size", got.len() as u64, size);
        for (thread, model) in models.iter().enumerate() {
            // Within the file as read; past the end the model holds zeros.
            let start = (shared.range_start(thread) as usize).min(got.len());
            let end = (start + model.range.len()).min(got.len());
            let what = format!("thread {thread}'s range of the shared file");
            p.expect_bytes(what, &got[start..end], &model.range[..end - start]);
        }
    }
    for (k, &dir) in shared.dirs.iter().enumerate() {
        let want_xattrs: Xattrs = (models.iter())
            .filter_map(|m| m.dir_xattrs.get(&dir))
            .flatten()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        p.expect_xattrs(format!("shared directory d{k}"), fs, dir, &want_xattrs);
        let want_perm = models.get(k).and_then(|m| m.dir_perm).unwrap_or(0o755);
        if let Some(inode) = p.ok(fs.inode(dir).context(|| format!("shared directory d{k}"))) {
            p.expect_eq(
                format!("mode of shared directory d{k}"),
                inode.mode & 0o7777,
                want_perm,
            );
        }
    }
    p
}

/// Six threads, each owning its names in three shared directories, two
/// directories of its own that it moves around (into each other and into
/// other threads' moving directories too) and a range of a shared file,
/// create, write, truncate, chmod, set xattrs, link, rename (across
/// directories and over their own names), unlink, fsync, look up and
/// read; they set xattrs on the shared directories and chmod them too.
/// Every listing, link count, size, content, mode and xattr must match the
/// threads' models, and the tree must have no cycle.
#[test]
fn mixed_operations_on_shared_directories_and_files() {
    if !require_f2fs_tools() {
        return;
    }
    let image = TestImage::new("stress-mixed");
    let fs = image.open();
    let top = new_dir(&fs, ROOT, "mixed");
    let dirs: [u32; SHARED_DIRS] = std::array::from_fn(|k| new_dir(&fs, top, &format!("d{k}")));
    let moving = (0..MIXED_THREADS)
        .map(|t| {
            std::array::from_fn(|j| {
                let home = MixedShared::moving_home(&dirs, t, j);
                new_dir(&fs, home, &MixedShared::moving_name(t, j))
            })
        })
        .collect();
    let file = new_file(&fs, top, "shared");
    let addrs = fs.inode(file).unwrap().addrs_per_inode() as u64;
    let shared = MixedShared {
        top,
        dirs,
        moving,
        file,
        file_base: (addrs - MIXED_THREADS as u64 / 2 * MIXED_RANGE_BLOCKS) * BLOCK,
        file_size: AtomicU64::new(0),
    };
    let mut models: Vec<MixedModel> = (0..MIXED_THREADS)
        .map(|t| MixedModel {
            moving: (0..MOVING_DIRS)
                .map(|j| {
                    (
                        MixedShared::moving_home(&dirs, t, j),
                        MixedShared::moving_name(t, j),
                    )
                })
                .collect(),
            range: vec![0; (MIXED_RANGE_BLOCKS * BLOCK) as usize],
            ..MixedModel::default()
        })
        .collect();
    let mut workers = Workers::new("mixed");
    for (id, model) in models.iter_mut().enumerate() {
        let (fs, shared) = (&fs, &shared);
        workers = workers.spawn(format!("thread-{id}"), move |w| {
            MixedThread {
                id,
                fs,
                shared,
                model,
            }
            .run(w)
        });
    }
    let failures = workers.run();
    verify(fs, &image, failures, |fs| check_mixed(fs, &shared, &models));
}
