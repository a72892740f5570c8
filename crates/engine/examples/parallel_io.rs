//! Parallel I/O scaling of the engine, without FUSE: threads on two shared
//! files (random reads, writes to disjoint ranges, overlapping writes) and
//! file creates in one directory per thread. Shows how far the engine's own
//! locks let threads run side by side (seed 002: range locks instead of one
//! exclusive lock per inode and one namespace lock per file system).
//!
//! `cargo run --release -p f2fuse-engine --example parallel_io -- --help`
//!
//! Prints CSV on stdout, one line per (workload, thread count); progress and
//! failed checks go to stderr. Every point starts on a freshly formatted
//! image, and what the threads wrote is read back and checked afterwards.

use f2fuse_engine::internals::device::{Device, MemDevice};
use f2fuse_engine::internals::mkfs::{format, format_path, MkfsOptions};
use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const USAGE: &str = "\
parallel_io: engine throughput per thread count (library API, no FUSE)

usage: parallel_io [OPTIONS]

  --workloads LIST      comma-separated, from randread,disjoint,overlap,creates (default: all four)
                          randread  random BS reads of two shared, fully written files
                          disjoint  random BS writes; thread t of N writes only the t-th
                                    N-th of each shared file (disjoint ranges)
                          overlap   random BS writes anywhere in the shared files (or in
                                    their first --overlap-span bytes): ranges overlap
                          creates   each thread creates files of --create-size bytes in its
                                    own directory (create, open, write, release)
                        In the three shared-file workloads every operation picks one of the
                        two files at random, so two threads already share a file.
  --threads LIST        thread counts (default 1,2,4,8)
  --seconds S           run each point for S seconds (default 3)
  --ops N               instead: each thread does N operations; the point lasts until
                        the last thread is done (fixed work, for timing whole runs)
  --memory              use an in-memory device (MemDevice) instead of an image file
  --image PATH          image file to format for every point (overwritten; default: a
                        temporary file in /dev/shm, else in the temp directory, unlinked
                        as soon as it is open)
  --image-size SIZE     device size (default 1G)
  --file-size SIZE      size of each shared file (default 64M)
  --bs SIZE             bytes per read or write, and the unit checked (default 4K)
  --overlap-span SIZE   overlap: write only in the first SIZE bytes of each file
                        (default: the whole file); a small span makes writes collide
  --create-size SIZE    bytes written to each created file (default 4K)
  --seed N              random seed (default 2); thread t uses its own stream
  --label TEXT          first CSV column (default: engine)
  --no-header           omit the CSV header (to append to an earlier run's output)
  -h, --help            this text

SIZE takes a K, M or G suffix (powers of 1024).

Output columns: label, workload, threads, seconds (measured), ops, ops_per_s,
mib_per_s, ops_per_s_per_thread, speedup_vs_1 (ops_per_s over the 1-thread point of
the same workload in this run; empty without one), checkpoints and gc_runs (taken
during the measured part), check (ok, or FAIL: the data read back was wrong or an
operation failed; details on stderr). Exit status 1 if any check failed.
";

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// Stamp writer of the blocks written while setting up a point.
const SETUP_WRITER: u16 = u16::MAX;
const SHARED_FILES: usize = 2;
/// Setup writes the shared files in steps of this size.
const FILL_STEP: usize = MIB as usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    RandRead,
    Disjoint,
    Overlap,
    Creates,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::RandRead,
        Workload::Disjoint,
        Workload::Overlap,
        Workload::Creates,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::RandRead => "randread",
            Workload::Disjoint => "disjoint",
            Workload::Overlap => "overlap",
            Workload::Creates => "creates",
        }
    }

    fn parse(name: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .ok_or_else(|| format!("unknown workload {name:?}"))
    }
}

enum DeviceChoice {
    Memory,
    /// `remove_at_exit`: the path was chosen here, not by the caller.
    Image {
        path: PathBuf,
        remove_at_exit: bool,
    },
}

/// How long each point runs.
#[derive(Clone, Copy)]
enum Duty {
    Seconds(f64),
    OpsPerThread(u64),
}

struct Config {
    workloads: Vec<Workload>,
    threads: Vec<usize>,
    duty: Duty,
    device: DeviceChoice,
    image_size: u64,
    file_size: u64,
    bs: usize,
    overlap_span: Option<u64>,
    create_size: usize,
    seed: u64,
    label: String,
    header: bool,
}

fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], KIB),
        Some((i, 'm' | 'M')) => (&text[..i], MIB),
        Some((i, 'g' | 'G')) => (&text[..i], 1024 * MIB),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("bad size {text:?}"))
}

fn parse_list<T>(text: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(item)
        .collect()
}

fn default_image_path() -> PathBuf {
    // tmpfs keeps the disk out of the measurement: the engine's locks are the subject.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("f2fuse-parallel-io-{}.img", std::process::id()))
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config {
        workloads: Workload::ALL.to_vec(),
        threads: vec![1, 2, 4, 8],
        duty: Duty::Seconds(3.0),
        device: DeviceChoice::Image {
            path: default_image_path(),
            remove_at_exit: true,
        },
        image_size: 1024 * MIB,
        file_size: 64 * MIB,
        bs: 4096,
        overlap_span: None,
        create_size: 4096,
        seed: 2,
        label: "engine".into(),
        header: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--workloads" => cfg.workloads = parse_list(&value()?, Workload::parse)?,
            "--threads" => {
                cfg.threads = parse_list(&value()?, |s| {
                    s.parse::<usize>()
                        .ok()
                        .filter(|&n| (1..=128).contains(&n))
                        .ok_or_else(|| format!("bad thread count {s:?} (1..=128)"))
                })?
            }
            "--seconds" => {
                let text = value()?;
                let seconds = text
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0)
                    .ok_or_else(|| format!("bad --seconds {text:?}"))?;
                cfg.duty = Duty::Seconds(seconds);
            }
            "--ops" => {
                let text = value()?;
                let ops = text
                    .parse::<u64>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("bad --ops {text:?}"))?;
                cfg.duty = Duty::OpsPerThread(ops);
            }
            "--memory" => cfg.device = DeviceChoice::Memory,
            "--image" => {
                cfg.device = DeviceChoice::Image {
                    path: value()?.into(),
                    remove_at_exit: false,
                }
            }
            "--image-size" => cfg.image_size = parse_size(&value()?)?,
            "--file-size" => cfg.file_size = parse_size(&value()?)?,
            "--bs" => cfg.bs = parse_size(&value()?)? as usize,
            "--overlap-span" => cfg.overlap_span = Some(parse_size(&value()?)?),
            "--create-size" => cfg.create_size = parse_size(&value()?)? as usize,
            "--seed" => {
                let text = value()?;
                cfg.seed = text.parse().map_err(|_| format!("bad --seed {text:?}"))?;
            }
            "--label" => cfg.label = value()?,
            "--no-header" => cfg.header = false,
            _ => return Err(format!("unknown argument {arg:?} (see --help)")),
        }
    }
    // A unit must hold at least one stamp (16 bytes) and tile the file exactly.
    if cfg.bs < 16 || !cfg.bs.is_multiple_of(16) || !FILL_STEP.is_multiple_of(cfg.bs) {
        return Err(format!(
            "--bs {} must be a multiple of 16 that divides 1 MiB",
            cfg.bs
        ));
    }
    if cfg.file_size < cfg.bs as u64 || !cfg.file_size.is_multiple_of(FILL_STEP as u64) {
        return Err("--file-size must be a positive multiple of 1 MiB".into());
    }
    if cfg.create_size < 16 || !cfg.create_size.is_multiple_of(16) {
        return Err("--create-size must be a multiple of 16".into());
    }
    if cfg.overlap_span.is_some_and(|s| s < cfg.bs as u64) {
        return Err("--overlap-span must hold at least one --bs unit".into());
    }
    if cfg.workloads.is_empty() || cfg.threads.is_empty() {
        return Err("empty --workloads or --threads".into());
    }
    Ok(cfg)
}

/// xorshift64*, seeded through splitmix64 so that neighbouring seeds
/// (thread numbers) give unrelated streams.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` for picking blocks (n is far below 2^32).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }
}

/// What every 16 bytes of a written unit hold, so that a unit read back
/// tells where it belongs and who wrote it, and a torn unit shows as two
/// different stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    file: u8,
    offset: u64,
    writer: u16,
    seq: u64,
}

impl Stamp {
    const SEQ_BITS: u32 = 48;

    fn encode(self) -> [u8; 16] {
        let place = (self.file as u64) << 56 | self.offset;
        let origin =
            (self.writer as u64) << Self::SEQ_BITS | (self.seq & ((1 << Self::SEQ_BITS) - 1));
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&place.to_le_bytes());
        bytes[8..].copy_from_slice(&origin.to_le_bytes());
        bytes
    }

    fn fill(self, unit: &mut [u8]) {
        let bytes = self.encode();
        for chunk in unit.chunks_exact_mut(16) {
            chunk.copy_from_slice(&bytes);
        }
    }

    /// The stamp a unit carries, or `None` if its 16-byte pieces differ (torn).
    fn read(unit: &[u8]) -> Option<Stamp> {
        let first = &unit[..16];
        if !unit.chunks_exact(16).all(|c| c == first) {
            return None;
        }
        let place = u64::from_le_bytes(first[..8].try_into().unwrap());
        let origin = u64::from_le_bytes(first[8..].try_into().unwrap());
        Some(Stamp {
            file: (place >> 56) as u8,
            offset: place & ((1 << 56) - 1),
            writer: (origin >> Self::SEQ_BITS) as u16,
            seq: origin & ((1 << Self::SEQ_BITS) - 1),
        })
    }
}

/// A freshly formatted file system, unmounted (not timed) when dropped.
struct Bench(Option<Fs>);

impl Bench {
    fn fs(&self) -> &Fs {
        self.0.as_ref().expect("open until dropped")
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(fs) = self.0.take() {
            if let Err(e) = fs.unmount() {
                eprintln!("parallel_io: unmount: {e}");
            }
        }
    }
}

fn fresh_fs(cfg: &Config) -> Result<Bench, String> {
    let err = |what: &'static str| move |e: f2fuse_engine::Error| format!("{what}: {e}");
    // Fixed identity: the same layout for every run.
    let mkfs = MkfsOptions {
        timestamp: Some(0),
        uuid: Some([0x02; 16]),
        checkpoint_ver: Some(1),
        ..MkfsOptions::default()
    };
    let fs = match &cfg.device {
        DeviceChoice::Memory => {
            let dev = Arc::new(MemDevice::new(cfg.image_size));
            format(&Device::new(Box::new(dev.clone())), &mkfs, true).map_err(err("mkfs"))?;
            Fs::open_writable(Box::new(dev)).map_err(err("open"))?
        }
        DeviceChoice::Image {
            path,
            remove_at_exit,
        } => {
            format_path(path, Some(cfg.image_size), &mkfs).map_err(err("mkfs"))?;
            let opts = OpenOptions {
                writable: true,
                ..Default::default()
            };
            let fs = Fs::open_path_with(path, opts, &[]).map_err(err("open"))?;
            if *remove_at_exit {
                // Unlinked while open: nothing is left behind, even if the process is killed.
                std::fs::remove_file(path)
                    .map_err(|e| format!("removing {}: {e}", path.display()))?;
            }
            fs
        }
    };
    Ok(Bench(Some(fs)))
}

/// Inode numbers the threads work on.
enum Targets {
    SharedFiles([u32; SHARED_FILES]),
    /// One directory per thread.
    Directories(Vec<u32>),
}

fn set_up(fs: &Fs, cfg: &Config, workload: Workload, threads: usize) -> Result<Targets, String> {
    let err = |what: String| move |e: f2fuse_engine::Error| format!("{what}: {e}");
    if workload == Workload::Creates {
        let dirs = (0..threads)
            .map(|t| {
                let name = format!("t{t}");
                fs.mkdir(F2FS_ROOT_INO, name.as_bytes(), 0o755, 0, 0)
                    .map(|d| d.ino)
                    .map_err(err(format!("mkdir {name}")))
            })
            .collect::<Result<_, _>>()?;
        return Ok(Targets::Directories(dirs));
    }
    let mut files = [0; SHARED_FILES];
    let mut chunk = vec![0u8; FILL_STEP];
    for (index, ino) in files.iter_mut().enumerate() {
        let name = format!("shared{index}");
        *ino = fs
            .create(F2FS_ROOT_INO, name.as_bytes(), 0o644, 0, 0)
            .map_err(err(format!("create {name}")))?
            .ino;
        for start in (0..cfg.file_size).step_by(FILL_STEP) {
            for (i, unit) in chunk.chunks_exact_mut(cfg.bs).enumerate() {
                Stamp {
                    file: index as u8,
                    offset: start + (i * cfg.bs) as u64,
                    writer: SETUP_WRITER,
                    seq: 0,
                }
                .fill(unit);
            }
            let n = fs
                .write(*ino, start, &chunk)
                .map_err(err(format!("filling {name}")))?;
            if n != chunk.len() {
                return Err(format!("filling {name}: short write at {start}"));
            }
        }
    }
    Ok(Targets::SharedFiles(files))
}

/// One thread's part of a point.
struct Worker<'a> {
    fs: &'a Fs,
    cfg: &'a Config,
    workload: Workload,
    thread: usize,
    threads: usize,
    targets: &'a Targets,
    /// Most files a creating thread may make: keeps creates clear of ENOSPC.
    max_creates: u64,
    rng: Rng,
    buf: Vec<u8>,
}

impl Worker<'_> {
    fn units_per_file(&self) -> u64 {
        self.cfg.file_size / self.cfg.bs as u64
    }

    /// The units thread `thread` of `threads` owns in each file (`disjoint`).
    fn owned_units(units: u64, thread: usize, threads: usize) -> std::ops::Range<u64> {
        let share = units / threads as u64;
        thread as u64 * share..(thread as u64 + 1) * share
    }

    /// Runs until `stop` (or for the fixed count); returns the operations done.
    fn run(&mut self, stop: &AtomicBool) -> Result<u64, String> {
        let limit = match self.cfg.duty {
            Duty::OpsPerThread(n) => n,
            Duty::Seconds(_) => u64::MAX,
        };
        let limit = if self.workload == Workload::Creates {
            limit.min(self.max_creates)
        } else {
            limit
        };
        let mut done = 0;
        while done < limit && !stop.load(Ordering::Relaxed) {
            self.step(done)?;
            done += 1;
        }
        Ok(done)
    }

    fn step(&mut self, seq: u64) -> Result<(), String> {
        let bs = self.cfg.bs as u64;
        let files = match self.targets {
            Targets::SharedFiles(files) => files,
            Targets::Directories(dirs) => return self.create_one(dirs[self.thread], seq),
        };
        let file = self.rng.below(SHARED_FILES as u64) as usize;
        let units = self.units_per_file();
        let unit = match self.workload {
            Workload::Disjoint => {
                let range = Self::owned_units(units, self.thread, self.threads);
                range.start + self.rng.below(range.end - range.start)
            }
            Workload::Overlap => {
                let span = self.cfg.overlap_span.map_or(units, |s| (s / bs).min(units));
                self.rng.below(span)
            }
            Workload::RandRead | Workload::Creates => self.rng.below(units),
        };
        let offset = unit * bs;
        if self.workload == Workload::RandRead {
            let n = self
                .fs
                .read_ino(files[file], offset, &mut self.buf)
                .map_err(|e| format!("read shared{file} at {offset}: {e}"))?;
            let stamp = Stamp::read(&self.buf);
            if n != self.buf.len()
                || stamp.map(|s| (s.file, s.offset)) != Some((file as u8, offset))
            {
                return Err(format!(
                    "read shared{file} at {offset}: wrong data ({stamp:?})"
                ));
            }
            return Ok(());
        }
        Stamp {
            file: file as u8,
            offset,
            writer: self.thread as u16,
            seq,
        }
        .fill(&mut self.buf);
        let n = self
            .fs
            .write(files[file], offset, &self.buf)
            .map_err(|e| format!("write shared{file} at {offset}: {e}"))?;
        if n != self.buf.len() {
            return Err(format!("write shared{file} at {offset}: short ({n})"));
        }
        Ok(())
    }

    /// A file made as open(O_CREAT) + write + close make it through the mount.
    fn create_one(&mut self, dir: u32, seq: u64) -> Result<(), String> {
        let name = format!("f{seq}");
        let fail = |e: f2fuse_engine::Error| format!("t{}/{name}: {e}", self.thread);
        let ino = self
            .fs
            .create(dir, name.as_bytes(), 0o644, 0, 0)
            .map_err(fail)?
            .ino;
        self.fs.open_inode(ino).map_err(fail)?;
        Stamp {
            file: self.thread as u8,
            offset: 0,
            writer: self.thread as u16,
            seq,
        }
        .fill(&mut self.buf);
        let written = self.fs.write(ino, 0, &self.buf).map_err(fail)?;
        self.fs.release(ino).map_err(fail)?;
        if written != self.buf.len() {
            return Err(format!("t{}/{name}: short write ({written})", self.thread));
        }
        Ok(())
    }
}

/// Reads the shared files back: every unit whole (one stamp), in its place,
/// and written by a writer `allowed` accepts for that unit.
fn check_shared_files(
    fs: &Fs,
    cfg: &Config,
    files: &[u32; SHARED_FILES],
    allowed: impl Fn(u64, u16) -> bool,
) -> Result<(), String> {
    let mut chunk = vec![0u8; FILL_STEP];
    for (index, &ino) in files.iter().enumerate() {
        for start in (0..cfg.file_size).step_by(FILL_STEP) {
            let n = fs
                .read_ino(ino, start, &mut chunk)
                .map_err(|e| format!("reading shared{index} back at {start}: {e}"))?;
            if n != chunk.len() {
                return Err(format!("shared{index}: short read at {start}"));
            }
            for (i, unit) in chunk.chunks_exact(cfg.bs).enumerate() {
                let offset = start + (i * cfg.bs) as u64;
                let unit_index = offset / cfg.bs as u64;
                match Stamp::read(unit) {
                    None => {
                        return Err(format!(
                            "shared{index} at {offset}: torn unit (mixed writers)"
                        ))
                    }
                    Some(s) if (s.file, s.offset) != (index as u8, offset) => {
                        return Err(format!(
                            "shared{index} at {offset}: holds the data of shared{} at {}",
                            s.file, s.offset
                        ))
                    }
                    Some(s) if !allowed(unit_index, s.writer) => {
                        return Err(format!(
                            "shared{index} at {offset}: written by thread {} (not allowed there)",
                            s.writer
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(())
}

/// Every directory holds exactly the files its thread made, and the last
/// one holds what was written to it.
fn check_created(fs: &Fs, cfg: &Config, dirs: &[u32], per_thread: &[u64]) -> Result<(), String> {
    let mut buf = vec![0u8; cfg.create_size];
    for (t, (&dir, &made)) in dirs.iter().zip(per_thread).enumerate() {
        let entries = fs
            .read_dir(dir)
            .map_err(|e| format!("read_dir t{t}: {e}"))?;
        let files = entries
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .count() as u64;
        if files != made {
            return Err(format!("t{t}: {files} entries, {made} files created"));
        }
        let Some(last) = made.checked_sub(1) else {
            continue;
        };
        let name = format!("f{last}");
        let ino = fs
            .lookup(dir, name.as_bytes())
            .map_err(|e| format!("t{t}/{name}: {e}"))?
            .ino;
        let n = fs
            .read_ino(ino, 0, &mut buf)
            .map_err(|e| format!("t{t}/{name}: {e}"))?;
        let expected = Stamp {
            file: t as u8,
            offset: 0,
            writer: t as u16,
            seq: last,
        };
        if n != buf.len() || Stamp::read(&buf) != Some(expected) {
            return Err(format!("t{t}/{name}: wrong contents"));
        }
    }
    Ok(())
}

struct Point {
    elapsed: Duration,
    ops: u64,
    bytes: u64,
    checkpoints: u64,
    gc_runs: u64,
    /// `None`: the data read back was right.
    failure: Option<String>,
}

fn run_point(cfg: &Config, workload: Workload, threads: usize) -> Result<Point, String> {
    let bench = fresh_fs(cfg)?;
    let fs = bench.fs();
    let targets = set_up(fs, cfg, workload, threads)?;
    // Setup's dirty nodes go now, not in the measured part.
    fs.checkpoint().map_err(|e| format!("checkpoint: {e}"))?;
    let unit_bytes = match workload {
        Workload::Creates => cfg.create_size,
        _ => cfg.bs,
    };
    // Each create takes an inode block and its data blocks; leave room for dentries.
    let per_file_blocks = 1 + (cfg.create_size as u64).div_ceil(4096);
    let max_creates = fs.statfs().blocks_available * 7 / 10 / per_file_blocks / threads as u64;
    let before = fs.status().map_err(|e| format!("status: {e}"))?;

    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(threads + 1);
    let (per_thread, elapsed) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let mut worker = Worker {
                    fs,
                    cfg,
                    workload,
                    thread,
                    threads,
                    targets: &targets,
                    max_creates,
                    rng: Rng::new(cfg.seed, thread as u64),
                    buf: vec![0u8; unit_bytes],
                };
                let (stop, start_line) = (&stop, &start_line);
                scope.spawn(move || {
                    start_line.wait();
                    worker.run(stop)
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        if let Duty::Seconds(seconds) = cfg.duty {
            std::thread::sleep(Duration::from_secs_f64(seconds));
            stop.store(true, Ordering::Relaxed);
        }
        let per_thread: Vec<Result<u64, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect();
        (per_thread, start.elapsed())
    });
    let after = fs.status().map_err(|e| format!("status: {e}"))?;
    let gc_runs = |s: &f2fuse_engine::Status| s.gc.foreground_runs + s.gc.background_runs;

    let mut failure = None;
    let mut counts = Vec::with_capacity(threads);
    for (thread, result) in per_thread.into_iter().enumerate() {
        match result {
            Ok(n) => counts.push(n),
            Err(e) => {
                counts.push(0);
                failure.get_or_insert(format!("thread {thread}: {e}"));
            }
        }
    }
    if failure.is_none() {
        let checked = match (&targets, workload) {
            (Targets::Directories(dirs), _) => check_created(fs, cfg, dirs, &counts),
            (Targets::SharedFiles(files), Workload::Disjoint) => {
                let units = cfg.file_size / cfg.bs as u64;
                check_shared_files(fs, cfg, files, |unit, writer| {
                    writer == SETUP_WRITER
                        || Worker::owned_units(units, writer as usize, threads).contains(&unit)
                })
            }
            (Targets::SharedFiles(files), Workload::Overlap) => {
                check_shared_files(fs, cfg, files, |_, writer| {
                    writer == SETUP_WRITER || (writer as usize) < threads
                })
            }
            (Targets::SharedFiles(files), _) => {
                check_shared_files(fs, cfg, files, |_, writer| writer == SETUP_WRITER)
            }
        };
        failure = checked.err();
    }
    if workload == Workload::Creates && counts.contains(&max_creates) {
        eprintln!(
            "parallel_io: creates x{threads}: a thread reached the {max_creates}-file cap \
             (image space); the rate covers the time until the last thread stopped"
        );
    }
    let ops: u64 = counts.iter().sum();
    Ok(Point {
        elapsed,
        ops,
        bytes: ops * unit_bytes as u64,
        checkpoints: after.checkpoints - before.checkpoints,
        gc_runs: gc_runs(&after) - gc_runs(&before),
        failure,
    })
}

fn main() {
    let cfg = parse_args().unwrap_or_else(|e| {
        eprintln!("parallel_io: {e}");
        std::process::exit(2);
    });
    if cfg.header {
        println!(
            "label,workload,threads,seconds,ops,ops_per_s,mib_per_s,ops_per_s_per_thread,\
             speedup_vs_1,checkpoints,gc_runs,check"
        );
    }
    let mut failed = false;
    for &workload in &cfg.workloads {
        let mut one_thread_rate = None;
        for &threads in &cfg.threads {
            let name = workload.name();
            eprintln!("parallel_io: {name} x{threads}");
            let point = match run_point(&cfg, workload, threads) {
                Ok(point) => point,
                Err(e) => {
                    eprintln!("parallel_io: {name} x{threads}: FAIL: {e}");
                    println!("{},{name},{threads},,,,,,,,,FAIL", cfg.label);
                    failed = true;
                    continue;
                }
            };
            let seconds = point.elapsed.as_secs_f64();
            let rate = point.ops as f64 / seconds;
            if threads == 1 {
                one_thread_rate = Some(rate);
            }
            let speedup = one_thread_rate.map_or(String::new(), |one| format!("{:.2}", rate / one));
            let check = match &point.failure {
                None => "ok",
                Some(e) => {
                    eprintln!("parallel_io: {name} x{threads}: FAIL: {e}");
                    failed = true;
                    "FAIL"
                }
            };
            println!(
                "{},{name},{threads},{seconds:.3},{},{rate:.0},{:.1},{:.0},{speedup},{},{},{check}",
                cfg.label,
                point.ops,
                point.bytes as f64 / MIB as f64 / seconds,
                rate / threads as f64,
                point.checkpoints,
                point.gc_runs,
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
