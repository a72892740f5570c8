//! `f2fuse lab WORKLOAD [--seed N] [--set NAME=VALUE]...`: a deterministic
//! policy lab. The workload runs through the library on an in-memory image
//! with a simulated clock (each operation takes `--op-us`; the background
//! cleaner wakes as the daemon's would, the file system always busy), so
//! the same seed and settings give the same numbers.

use crate::size::parse_size;
use clap::{Args, ValueEnum};
use f2fuse_engine::internals::device::Device;
use f2fuse_engine::internals::mkfs::format;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{parse_tunable, BlockDevice, Error, ErrorKind, Fs, MemDevice, MkfsOptions};
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Workload {
    /// The bench's W2: fill with 32 KiB files until --fill % of the blocks are used,
    /// then --ops random 4 KiB rewrites of random files, each with fsync.
    W2,
    /// One file filling the image to --fill %, then --ops random 4 KiB
    /// overwrites (no fsync: checkpoints come from cp_interval and cleaning).
    Randwrite,
}

#[derive(Args)]
pub struct LabArgs {
    pub workload: Workload,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A tunable, NAME=VALUE (repeatable; `f2fuse tune` lists the names).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Size of the in-memory image.
    #[arg(long, default_value = "512M")]
    pub size: String,
    /// Operations in the measured phase.
    #[arg(long, default_value_t = 15_000)]
    pub ops: u64,
    /// How full the fill phase makes the file system: % of the user blocks in use.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub fill: u64,
    /// Simulated duration of one operation, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub op_us: u64,
}

/// A lab run's parameters.
#[derive(Debug, Clone)]
pub struct LabConfig {
    pub workload: Workload,
    pub seed: u64,
    pub tunables: Vec<(String, u64)>,
    pub size: u64,
    pub ops: u64,
    pub fill_percent: u64,
    pub op_time: Duration,
}

/// What the measured phase did.
#[derive(Debug, Clone, PartialEq)]
pub struct LabReport {
    pub files: u64,
    pub ops: u64,
    pub user_bytes: u64,
    pub device_bytes: u64,
    pub checkpoints: u64,
    pub foreground_gc: u64,
    pub background_gc: u64,
    pub sections_cleaned: u64,
    pub sections_searched: u64,
    pub data_blocks_moved: u64,
    pub node_blocks_moved: u64,
    pub blocks_allocated: u64,
    pub ssr_blocks: u64,
}

impl LabReport {
    pub fn write_amplification(&self) -> f64 {
        self.device_bytes as f64 / self.user_bytes.max(1) as f64
    }

    pub fn blocks_moved(&self) -> u64 {
        self.data_blocks_moved + self.node_blocks_moved
    }

    /// `metric value` lines.
    pub fn render(&self) -> String {
        let ssr_share = self.ssr_blocks as f64 / self.blocks_allocated.max(1) as f64;
        [
            ("files", self.files.to_string()),
            ("ops", self.ops.to_string()),
            ("user_MiB", mib(self.user_bytes)),
            ("device_MiB", mib(self.device_bytes)),
            (
                "write_amplification",
                format!("{:.3}", self.write_amplification()),
            ),
            ("checkpoints", self.checkpoints.to_string()),
            ("gc_foreground_runs", self.foreground_gc.to_string()),
            ("gc_background_runs", self.background_gc.to_string()),
            ("gc_sections_cleaned", self.sections_cleaned.to_string()),
            ("gc_sections_searched", self.sections_searched.to_string()),
            ("gc_blocks_moved", self.blocks_moved().to_string()),
            ("gc_data_blocks_moved", self.data_blocks_moved.to_string()),
            ("gc_node_blocks_moved", self.node_blocks_moved.to_string()),
            ("blocks_allocated", self.blocks_allocated.to_string()),
            ("ssr_share", format!("{ssr_share:.3}")),
        ]
        .iter()
        .map(|(k, v)| format!("{k} {v}\n"))
        .collect()
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// The in-memory image, counting the bytes written to it.
struct CountingDevice {
    mem: Arc<MemDevice>,
    written: Arc<AtomicU64>,
}

impl BlockDevice for CountingDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.mem.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.mem.write_at(offset, buf)
    }

    fn flush(&self) -> io::Result<()> {
        self.mem.flush()
    }

    fn size(&self) -> u64 {
        self.mem.size()
    }
}

/// splitmix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// The simulated clock and the background cleaner the daemon would run.
struct Simulation<'a> {
    fs: &'a Fs,
    now: Duration,
    op_time: Duration,
    gc_wait: Duration,
    gc_due: Duration,
}

impl Simulation<'_> {
    /// One operation's time passes; the cleaner runs if it is due.
    fn tick(&mut self) -> Result<(), Error> {
        self.now += self.op_time;
        self.fs.set_simulated_clock(self.now);
        if self.now >= self.gc_due {
            self.gc_wait = self.fs.background_gc_step(self.gc_wait, true)?;
            self.gc_due = self.now + self.gc_wait;
        }
        Ok(())
    }
}

const PER_DIR: u64 = 1024;
const W2_FILE: usize = 32 << 10;
const BLOCK: usize = 4096;

fn used_blocks(fs: &Fs) -> u64 {
    let s = fs.statfs();
    s.blocks - s.blocks_free
}

fn fill_w2(fs: &Fs, target: u64, block: &[u8]) -> Result<Vec<u32>, Error> {
    let content = block.repeat(W2_FILE / BLOCK);
    let mut files = Vec::new();
    let mut dir = ROOT;
    while used_blocks(fs) + ((W2_FILE / BLOCK) as u64) < target {
        match add_w2_file(fs, files.len() as u64, &mut dir, &content) {
            Ok(ino) => files.push(ino),
            // As the bench: a full file system ends the fill phase.
            Err(e) if e.kind() == ErrorKind::NoSpace => break,
            Err(e) => return Err(e),
        }
    }
    Ok(files)
}

/// Adds file number `n` (in directories of `PER_DIR`), whole or not at all.
fn add_w2_file(fs: &Fs, n: u64, dir: &mut u32, content: &[u8]) -> Result<u32, Error> {
    if n.is_multiple_of(PER_DIR) {
        let name = format!("d{:04}", n / PER_DIR);
        *dir = fs.mkdir(ROOT, name.as_bytes(), 0o755, 0, 0)?.ino;
    }
    let name = format!("f{n:06}");
    let f = fs.create(*dir, name.as_bytes(), 0o644, 0, 0)?;
    match fs.write(f.ino, 0, content) {
        Ok(len) if len == content.len() => Ok(f.ino),
        Ok(_) => {
            fs.unlink(*dir, name.as_bytes())?;
            Err(Error::new(ErrorKind::NoSpace, "short write"))
        }
        Err(e) => {
            fs.unlink(*dir, name.as_bytes())?;
            Err(e)
        }
    }
}

/// Runs one experiment.
pub fn run_lab(cfg: &LabConfig) -> Result<LabReport, String> {
    let err = |e: Error| e.to_string();
    let mem = Arc::new(MemDevice::new(cfg.size));
    let written = Arc::new(AtomicU64::new(0));
    let device = || {
        Box::new(CountingDevice {
            mem: mem.clone(),
            written: written.clone(),
        })
    };
    let mkfs = MkfsOptions {
        timestamp: Some(0),
        uuid: Some([0x1a; 16]),
        checkpoint_ver: Some(1),
        ..Default::default()
    };
    format(&Device::new(device()), &mkfs, true).map_err(err)?;
    let fs = Fs::open_writable_with(device(), &cfg.tunables).map_err(err)?;
    let gc_wait = Duration::from_millis(fs.tunable("gc_min_sleep_time").map_err(err)?);
    let mut sim = Simulation {
        fs: &fs,
        now: Duration::ZERO,
        op_time: cfg.op_time,
        gc_wait,
        gc_due: gc_wait,
    };
    fs.set_simulated_clock(Duration::ZERO);
    let mut rng = Rng(cfg.seed);
    let mut block = vec![0u8; BLOCK];
    block.iter_mut().for_each(|b| *b = rng.below(255) as u8 + 1);
    // Fill until this many user blocks are in use (data, inodes, directories).
    let statfs = fs.statfs();
    let target = statfs.blocks * cfg.fill_percent / 100;
    let files = match cfg.workload {
        Workload::W2 => fill_w2(&fs, target, &block).map_err(err)?,
        Workload::Randwrite => {
            let f = fs.create(ROOT, b"big", 0o644, 0, 0).map_err(err)?;
            let len = target.saturating_sub(used_blocks(&fs)) * BLOCK as u64;
            let chunk = block.repeat(256);
            let mut offset = 0;
            while offset < len {
                let n = chunk.len().min((len - offset) as usize);
                offset += fs.write(f.ino, offset, &chunk[..n]).map_err(err)? as u64;
            }
            vec![f.ino]
        }
    };
    if files.is_empty() {
        return Err("the image is too small to hold one file".into());
    }
    fs.checkpoint().map_err(err)?;
    let gc0 = fs.gc_stats();
    let alloc0 = fs.alloc_stats();
    let bytes0 = written.load(Ordering::Relaxed);
    let cp0 = fs.checkpoint_state().cp.checkpoint_ver.get();
    let slots = match cfg.workload {
        Workload::W2 => (W2_FILE / BLOCK) as u64,
        Workload::Randwrite => fs.inode(files[0]).map_err(err)?.size / BLOCK as u64,
    };
    for op in 0..cfg.ops {
        let ino = files[rng.below(files.len() as u64) as usize];
        let offset = rng.below(slots) * BLOCK as u64;
        block[..8].copy_from_slice(&op.to_le_bytes());
        fs.write(ino, offset, &block).map_err(err)?;
        if matches!(cfg.workload, Workload::W2) {
            fs.fsync(ino).map_err(err)?;
        }
        sim.tick().map_err(err)?;
    }
    let gc = fs.gc_stats();
    let alloc = fs.alloc_stats();
    let allocated = |a: &f2fuse_engine::AllocStats| {
        a.lfs_blocks.iter().sum::<u64>() + a.ssr_blocks.iter().sum::<u64>()
    };
    let ssr = |a: &f2fuse_engine::AllocStats| a.ssr_blocks.iter().sum::<u64>();
    let report = LabReport {
        files: files.len() as u64,
        ops: cfg.ops,
        user_bytes: cfg.ops * BLOCK as u64,
        device_bytes: written.load(Ordering::Relaxed) - bytes0,
        checkpoints: fs.checkpoint_state().cp.checkpoint_ver.get() - cp0,
        foreground_gc: gc.foreground_runs - gc0.foreground_runs,
        background_gc: gc.background_runs - gc0.background_runs,
        sections_cleaned: gc.sections_cleaned - gc0.sections_cleaned,
        sections_searched: gc.sections_searched - gc0.sections_searched,
        data_blocks_moved: gc.data_blocks_moved - gc0.data_blocks_moved,
        node_blocks_moved: gc.node_blocks_moved - gc0.node_blocks_moved,
        blocks_allocated: allocated(&alloc) - allocated(&alloc0),
        ssr_blocks: ssr(&alloc) - ssr(&alloc0),
    };
    fs.unmount().map_err(err)?;
    Ok(report)
}

pub fn run(args: &LabArgs) -> Result<(), String> {
    let tunables = args
        .set
        .iter()
        .map(|s| parse_tunable(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = LabConfig {
        workload: args.workload,
        seed: args.seed,
        tunables,
        size: parse_size(&args.size)?,
        ops: args.ops,
        fill_percent: args.fill,
        op_time: Duration::from_micros(args.op_us),
    };
    let started = std::time::Instant::now();
    let report = run_lab(&cfg)?;
    print!("{}", report.render());
    eprintln!("lab: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(workload: Workload, tunables: &[(&str, u64)], size: u64, ops: u64) -> LabConfig {
        LabConfig {
            workload,
            seed: 7,
            tunables: tunables.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            size,
            ops,
            fill_percent: 90,
            op_time: Duration::from_millis(1),
        }
    }

    #[test]
    fn same_seed_same_numbers() {
        for workload in [Workload::W2, Workload::Randwrite] {
            // Background cleaning at a fast pace, so its decisions count
            // too; rewrites out of place (the small-volume default is in
            // place), so there is cleaning to do.
            let urgent = [
                ("ipu_policy", 0),
                ("gc_urgent", 3),
                ("gc_urgent_sleep_time", 50),
                ("gc_min_sleep_time", 100),
            ];
            let cfg = config(workload, &urgent, 128 << 20, 1500);
            let first = run_lab(&cfg).unwrap();
            assert!(first.background_gc > 0, "{first:?}");
            assert_eq!(run_lab(&cfg).unwrap(), first, "{workload:?}");
            let other = run_lab(&LabConfig { seed: 8, ..cfg }).unwrap();
            assert_ne!(other, first, "{workload:?}: the seed changes nothing");
        }
    }

    #[test]
    fn a_wider_victim_search_moves_fewer_blocks_on_w2() {
        // Enough sections that 20 is a small part of them, enough rewrites to clean often.
        let w2 = |search| {
            config(
                Workload::W2,
                &[("max_victim_search", search)],
                512 << 20,
                15000,
            )
        };
        let narrow = run_lab(&w2(20)).unwrap();
        let wide = run_lab(&w2(4096)).unwrap();
        assert!(narrow.foreground_gc > 0, "{narrow:?}");
        assert!(
            wide.blocks_moved() < narrow.blocks_moved(),
            "4096: {wide:?}\n20: {narrow:?}"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        let cfg = config(Workload::W2, &[("discard_granularity", 1)], 64 << 20, 10);
        assert!(run_lab(&cfg).unwrap_err().contains("unknown tunable"));
    }
}
