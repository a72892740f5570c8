//! Several processes race on shared files and directories through
//! `f2fuse mount`, so that the daemon serves, for the same inode at the same
//! time, the kernel's write-back WRITEs (and the SETATTRs with which it
//! hands over a file's times) and LINK, UNLINK, RENAME, SETATTR (chmod,
//! chown, utimes, truncate), SETXATTR and REMOVEXATTR; and so that creates,
//! unlinks, renames, mkdir and rmdir in shared directories race chmod, chown,
//! utimes and xattr changes of those directories.
//!
//! The processes (each is this test binary run again with only
//! [`worker_process`] selected and its role in the environment):
//! * `writer-W`: bursts of buffered chunk writes, through write(2) or stores
//!   into a shared mapping (which do not take the inode's lock), into the
//!   byte range writer W owns in every shared file (blocks 0..3050: the
//!   inode's own addresses, direct nodes, an indirect node); the kernel's
//!   flusher sends the WRITEs. Ranges and chunks are not page aligned, so
//!   neighbours share pages. Now and then `sync_file_range` or a reopen
//!   (close flushes); msync and `fdatasync` at the end;
//! * `syncer`: `sync_file_range` (async and waiting), `fdatasync` and
//!   `POSIX_FADV_DONTNEED` on the shared files;
//! * `linker-L`: hard links to shared file L % 2 in the shared directories,
//!   renames and unlinks of those links, renames of small files over them;
//! * `file-attrs-F`: chmod, chown, utimes, setxattr, removexattr of shared
//!   file F, truncates and writes of its tail (the bytes past the writers');
//! * `churn-P`: small files and subdirectories created, renamed across the
//!   shared directories, unlinked and removed;
//! * `dir-attrs`: chmod, chown, utimes, setxattr, removexattr of the shared
//!   directories.
//!
//! Each process records what it did that succeeded (names it left, the last
//! round written to each chunk, attributes, xattrs, the tail). After the
//! load the image is unmounted, the daemon must release it, `fsck.f2fs` and
//! our fsck must find it clean, and the engine must read back exactly what
//! the records say: every name present or absent, link counts, contents of
//! every chunk, the tail, modes, owners and xattrs. Every difference is
//! listed; a worker that fails or hangs (a deadlock in the daemon: the
//! connection is then aborted), and a daemon that panics, fails or writes
//! to stderr, fail the test too. The daemon runs in the foreground (`-f`)
//! as a child of the test, its stderr in a log, so a panic shows up in the
//! failure message. The image has inode checksums (`-O extra_attr,
//! inode_checksum,flexible_inline_xattr`).
//!
//! What can race in the daemon: the kernel holds a directory's lock across
//! creates, unlinks and renames in it and across its chmod, and a file's
//! lock across LINK, RENAME, SETATTR and SETXATTR of it (and write(2)), so
//! those reach the daemon one at a time per inode; write-back WRITEs and
//! the SETATTRs that hand over the times written are sent without it, and
//! overlap all of them.
//!
//! Load time: `F2FUSE_MOUNT_STRESS_SECS` (default 25; about 5 s more for
//! mkfs, unmount, fsck and the check, in a debug build). Needs root (chown), /dev/fuse and
//! fusermount3 (Debian: fuse3); without them the test prints a skip note,
//! and fails under `CI=1`.

use f2fuse_testkit as support;

use f2fuse_engine::{Fs, InodeInfo, OpenOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fmt;
use std::fs::{self, File, FileTimes};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{content_hash_of, fsck_f2fs, fuse_available, is_mounted, scan_image};
use support::{HostEntry, Kind, Rng, Scratch};

// ---- the shape of the load ----

const LOAD_SECS_ENV: &str = "F2FUSE_MOUNT_STRESS_SECS";
const DEFAULT_LOAD_SECS: u64 = 25;
/// How long after the end of the load a worker may take to finish (its
/// final fdatasync) before the test calls it hung.
const FINISH_GRACE: Duration = Duration::from_secs(60);

const SHARED_FILES: usize = 2;
const SHARED_DIRS: usize = 3;
const WRITERS: usize = 3;
const CHURNERS: usize = 2;
/// Link, rename and unlink requests are what lose updates against WRITEs
/// today; two processes per file send twice as many.
const LINKERS_PER_FILE: usize = 2;
/// Not a multiple of the page size: neighbouring chunks, also of different
/// writers, share pages.
const CHUNK: u64 = 65_000;
const CHUNKS_PER_WRITER: u64 = 64;
/// A writer dirties about 1 MiB (half the time through write(2), half
/// through a shared mapping), then pauses. Without the pause the WRITEs
/// queued in the kernel (up to 64 of 1 MiB) keep every other request of
/// the debug build's daemon waiting for seconds; with it, links, renames
/// and chmods are served while WRITEs of the same inode are in flight,
/// several times as many of them.
const BURST_CHUNKS: u64 = 16;
const PAUSE_AFTER_BURST: Duration = Duration::from_millis(100);
/// Where the writers' ranges end: about 3050 blocks, so writes reach the
/// inode's own addresses, its direct nodes and an indirect node.
const WRITTEN_END: u64 = WRITERS as u64 * CHUNKS_PER_WRITER * CHUNK;
/// The tail, owned by the file's `file-attrs` process, starts at the first
/// page boundary after the writers' ranges (truncates never cut their pages).
const TAIL_START: u64 = WRITTEN_END.next_multiple_of(4096);
const TAIL_MAX: u64 = 256 << 10;
const TAIL_WRITE_MAX: u64 = 20_000;
/// Small files straddle the inline-data limit (3488 bytes).
const SMALL_FILE_MAX: u64 = 8_000;
const MAX_LINKS_PER_LINKER: usize = 12;
const MAX_SUBDIRS_PER_CHURNER: usize = 3;
const XATTR_NAMES: u64 = 6;
/// Differences between the image and the records listed at most.
const MAX_DIFFERENCES_SHOWN: usize = 40;

const INITIAL_FILE_MODE: u32 = 0o644;
const INITIAL_DIR_MODE: u32 = 0o755;
const FILE_MODES: [u32; 7] = [0o644, 0o600, 0o640, 0o664, 0o604, 0o666, 0o400];
const DIR_MODES: [u32; 7] = [0o755, 0o775, 0o750, 0o711, 0o777, 0o1777, 0o700];
const OWNERS: [(u32, u32); 4] = [(0, 0), (1000, 1000), (1001, 100), (65534, 65534)];

/// The name under which shared file `file` stays for the whole run: the
/// processes that work through a descriptor open it there, and no process
/// renames or removes it.
fn anchor_path(file: usize) -> String {
    format!("anchor/file{file}")
}

fn shared_dir(dir: usize) -> String {
    format!("d{dir}")
}

fn chunk_offset(writer: usize, chunk: u64) -> u64 {
    (writer as u64 * CHUNKS_PER_WRITER + chunk) * CHUNK
}

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes);
    bytes
}

/// What `writer` wrote into `chunk` of `file` in its `round`-th write there
/// (round 0: never written, zeros).
fn chunk_bytes(file: usize, writer: usize, chunk: u64, round: u64) -> Vec<u8> {
    if round == 0 {
        return vec![0; CHUNK as usize];
    }
    let seed = (file as u64) << 56 ^ (writer as u64) << 48 ^ chunk << 32 ^ round;
    random_bytes(seed, CHUNK as usize)
}

// ---- the processes ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Writer(usize),
    Syncer,
    Linker(usize),
    FileAttrs(usize),
    Churn(usize),
    DirAttrs,
}

impl Role {
    fn all() -> Vec<Role> {
        let mut roles: Vec<Role> = (0..WRITERS).map(Role::Writer).collect();
        roles.push(Role::Syncer);
        roles.extend((0..SHARED_FILES * LINKERS_PER_FILE).map(Role::Linker));
        roles.extend((0..SHARED_FILES).map(Role::FileAttrs));
        roles.extend((0..CHURNERS).map(Role::Churn));
        roles.push(Role::DirAttrs);
        roles
    }

    fn name(self) -> String {
        match self {
            Role::Writer(w) => format!("writer-{w}"),
            Role::Syncer => "syncer".to_string(),
            Role::Linker(l) => format!("linker-{l}"),
            Role::FileAttrs(f) => format!("file-attrs-{f}"),
            Role::Churn(p) => format!("churn-{p}"),
            Role::DirAttrs => "dir-attrs".to_string(),
        }
    }

    fn from_name(name: &str) -> Option<Role> {
        Role::all().into_iter().find(|r| r.name() == name)
    }

    /// What the names this role creates start with.
    fn name_prefix(self) -> Option<String> {
        match self {
            Role::Linker(l) => Some(format!("l{l}-")),
            Role::Churn(p) => Some(format!("c{p}-")),
            _ => None,
        }
    }
}

/// How the test tells a worker process what to do.
mod worker_env {
    pub const ROLE: &str = "F2FUSE_STRESS_ROLE";
    pub const MOUNT: &str = "F2FUSE_STRESS_MOUNT";
    pub const RECORD: &str = "F2FUSE_STRESS_RECORD";
    pub const DEADLINE_MS: &str = "F2FUSE_STRESS_DEADLINE_MS";
    pub const SEED: &str = "F2FUSE_STRESS_SEED";
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

// ---- what the processes record ----

/// What a name is, as the process that owns it left it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    SharedFile(usize),
    Small { len: u64, seed: u64 },
    Dir,
}

/// An inode whose attributes one process owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    File(usize),
    Dir(usize),
}

impl Target {
    fn path(self) -> String {
        match self {
            Target::File(f) => anchor_path(f),
            Target::Dir(d) => shared_dir(d),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Target::File(i) => write!(f, "file:{i}"),
            Target::Dir(i) => write!(f, "dir:{i}"),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = ();
    fn from_str(s: &str) -> Result<Target, ()> {
        match s.split_once(':') {
            Some(("file", i)) => i.parse().map(Target::File).map_err(drop),
            Some(("dir", i)) => i.parse().map(Target::Dir).map_err(drop),
            _ => Err(()),
        }
    }
}

/// One line of a worker's record: something it did that succeeded.
#[derive(Debug, PartialEq)]
enum Fact {
    /// `path` (relative to the mount) exists and is `entry`.
    Name { path: String, entry: Entry },
    /// The last write of `writer` to `chunk` of `file` was its `round`-th there.
    Chunk {
        file: usize,
        writer: usize,
        chunk: u64,
        round: u64,
    },
    Attrs {
        target: Target,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Xattr {
        target: Target,
        name: String,
        value: String,
    },
    /// `file` is `size` bytes long, and its bytes from `WRITTEN_END` on hash to `hash`.
    Tail { file: usize, size: u64, hash: u64 },
    /// How many operations of a kind the process did.
    Count { op: String, n: u64 },
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Fact::Name { path, entry } => match entry {
                Entry::SharedFile(i) => write!(f, "name {path} file {i}"),
                Entry::Small { len, seed } => write!(f, "name {path} small {len} {seed}"),
                Entry::Dir => write!(f, "name {path} dir"),
            },
            Fact::Chunk {
                file,
                writer,
                chunk,
                round,
            } => write!(f, "chunk {file} {writer} {chunk} {round}"),
            Fact::Attrs {
                target,
                mode,
                uid,
                gid,
            } => write!(f, "attrs {target} {mode:o} {uid} {gid}"),
            Fact::Xattr {
                target,
                name,
                value,
            } => write!(f, "xattr {target} {name} {value}"),
            Fact::Tail { file, size, hash } => write!(f, "tail {file} {size} {hash}"),
            Fact::Count { op, n } => write!(f, "count {op} {n}"),
        }
    }
}

impl Fact {
    fn parse(line: &str) -> Option<Fact> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = |path: &str, entry| Fact::Name {
            path: path.to_string(),
            entry,
        };
        Some(match words.as_slice() {
            ["name", path, "file", i] => name(path, Entry::SharedFile(i.parse().ok()?)),
            ["name", path, "small", len, seed] => name(
                path,
                Entry::Small {
                    len: len.parse().ok()?,
                    seed: seed.parse().ok()?,
                },
            ),
            ["name", path, "dir"] => name(path, Entry::Dir),
            ["chunk", file, writer, chunk, round] => Fact::Chunk {
                file: file.parse().ok()?,
                writer: writer.parse().ok()?,
                chunk: chunk.parse().ok()?,
                round: round.parse().ok()?,
            },
            ["attrs", target, mode, uid, gid] => Fact::Attrs {
                target: target.parse().ok()?,
                mode: u32::from_str_radix(mode, 8).ok()?,
                uid: uid.parse().ok()?,
                gid: gid.parse().ok()?,
            },
            ["xattr", target, name, value] => Fact::Xattr {
                target: target.parse().ok()?,
                name: name.to_string(),
                value: value.to_string(),
            },
            ["tail", file, size, hash] => Fact::Tail {
                file: file.parse().ok()?,
                size: size.parse().ok()?,
                hash: hash.parse().ok()?,
            },
            ["count", op, n] => Fact::Count {
                op: op.to_string(),
                n: n.parse().ok()?,
            },
            _ => return None,
        })
    }
}

// ---- the worker side ----

/// Not a test of its own: the entry point of the worker processes that
/// `processes_race_writeback_with_namespace_and_attribute_changes` starts
/// (this binary run again with only this test selected). Without a role in
/// the environment it does nothing.
#[test]
fn worker_process() {
    let Ok(role) = std::env::var(worker_env::ROLE) else {
        return;
    };
    let role = Role::from_name(&role).unwrap_or_else(|| panic!("unknown worker role {role}"));
    let mut worker = Worker::from_env(role);
    match role {
        Role::Writer(w) => worker.run_writer(w),
        Role::Syncer => worker.run_syncer(),
        Role::Linker(l) => worker.run_linker(l),
        Role::FileAttrs(f) => worker.run_file_attrs(f),
        Role::Churn(_) => worker.run_churn(),
        Role::DirAttrs => worker.run_dir_attrs(),
    }
    worker.write_record();
}

struct Worker {
    role: Role,
    mnt: PathBuf,
    record: PathBuf,
    deadline: SystemTime,
    rng: Rng,
    facts: Vec<Fact>,
    counts: BTreeMap<&'static str, u64>,
}

impl Worker {
    fn from_env(role: Role) -> Worker {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("worker environment lacks {name}"))
        };
        let deadline_ms: u64 = var(worker_env::DEADLINE_MS).parse().unwrap();
        Worker {
            role,
            mnt: var(worker_env::MOUNT).into(),
            record: var(worker_env::RECORD).into(),
            deadline: UNIX_EPOCH + Duration::from_millis(deadline_ms),
            rng: Rng(var(worker_env::SEED).parse::<u64>().unwrap() | 1),
            facts: Vec::new(),
            counts: BTreeMap::new(),
        }
    }

    fn running(&self) -> bool {
        SystemTime::now() < self.deadline
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn index(&mut self, len: usize) -> usize {
        self.rng.below(len as u64) as usize
    }

    fn choose<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.index(from.len())].clone()
    }

    fn random_shared_dir(&mut self) -> String {
        shared_dir(self.index(SHARED_DIRS))
    }

    /// The value of an operation that must succeed; anything else fails
    /// this worker (and so the test) with what it was doing.
    fn must<T>(&self, result: io::Result<T>, what: fmt::Arguments) -> T {
        result.unwrap_or_else(|e| panic!("{}: {what}: {e}", self.role.name()))
    }

    fn count(&mut self, op: &'static str) {
        *self.counts.entry(op).or_default() += 1;
    }

    fn open_shared_file(&self, file: usize, writable: bool) -> File {
        let path = self.path(&anchor_path(file));
        let opened = fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(&path);
        self.must(opened, format_args!("open {}", path.display()))
    }

    fn write_record(mut self) {
        for (op, n) in std::mem::take(&mut self.counts) {
            self.facts.push(Fact::Count {
                op: op.to_string(),
                n,
            });
        }
        let lines: Vec<String> = self.facts.iter().map(|f| format!("{f}\n")).collect();
        fs::write(&self.record, lines.concat()).unwrap();
    }

    fn record_names(&mut self, names: &OwnedNames) {
        for (path, entry) in &names.entries {
            self.facts.push(Fact::Name {
                path: path.clone(),
                entry: entry.clone(),
            });
        }
    }

    // -- writer --

    fn run_writer(&mut self, writer: usize) {
        let mut files: Vec<File> = (0..SHARED_FILES)
            .map(|f| self.open_shared_file(f, true))
            .collect();
        let mut mappings: Vec<SharedMapping> = files
            .iter()
            .enumerate()
            .map(|(f, file)| {
                let mapped = SharedMapping::new(file, TAIL_START as usize);
                self.must(mapped, format_args!("mmap file{f}"))
            })
            .collect();
        let mut rounds = vec![vec![0u64; CHUNKS_PER_WRITER as usize]; SHARED_FILES];
        let range_start = chunk_offset(writer, 0);
        let range_len = CHUNKS_PER_WRITER * CHUNK;
        while self.running() {
            let f = self.index(SHARED_FILES);
            let through_mapping = self.rng.below(2) == 0;
            for _ in 0..BURST_CHUNKS {
                let chunk = self.rng.below(CHUNKS_PER_WRITER);
                let round = &mut rounds[f][chunk as usize];
                *round += 1;
                let bytes = chunk_bytes(f, writer, chunk, *round);
                let offset = chunk_offset(writer, chunk);
                if through_mapping {
                    mappings[f].store(offset, &bytes);
                    self.count("chunk-stores");
                } else {
                    let written = files[f].write_all_at(&bytes, offset);
                    self.must(written, format_args!("write chunk {chunk} of file{f}"));
                    self.count("chunk-writes");
                }
            }
            match self.rng.below(8) {
                0 => {
                    let flags = libc::SYNC_FILE_RANGE_WRITE;
                    let synced = sync_file_range(&files[f], range_start, range_len, flags);
                    self.must(synced, format_args!("sync_file_range of file{f}"));
                    self.count("sync-file-range");
                }
                1 => {
                    // close sends the dirty pages from this process (FLUSH).
                    files[f] = self.open_shared_file(f, true);
                    self.count("reopen");
                }
                _ => {}
            }
            std::thread::sleep(PAUSE_AFTER_BURST);
        }
        for (f, (file, mapping)) in files.iter().zip(&mappings).enumerate() {
            self.must(mapping.sync(), format_args!("final msync of file{f}"));
            self.must(file.sync_data(), format_args!("final fdatasync of file{f}"));
        }
        for (f, file_rounds) in rounds.iter().enumerate() {
            for (chunk, &round) in file_rounds.iter().enumerate() {
                if round > 0 {
                    self.facts.push(Fact::Chunk {
                        file: f,
                        writer,
                        chunk: chunk as u64,
                        round,
                    });
                }
            }
        }
    }

    // -- syncer --

    fn run_syncer(&mut self) {
        let files: Vec<File> = (0..SHARED_FILES)
            .map(|f| self.open_shared_file(f, false))
            .collect();
        while self.running() {
            let f = self.index(SHARED_FILES);
            let file = &files[f];
            let (op, result) = match self.rng.below(16) {
                0..=7 => (
                    "sync-file-range",
                    sync_file_range(file, 0, 0, libc::SYNC_FILE_RANGE_WRITE),
                ),
                8..=12 => (
                    "sync-file-range-wait",
                    sync_file_range(
                        file,
                        0,
                        0,
                        libc::SYNC_FILE_RANGE_WAIT_BEFORE
                            | libc::SYNC_FILE_RANGE_WRITE
                            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                    ),
                ),
                13 | 14 => ("fadvise-dontneed", drop_clean_pages(file)),
                _ => ("fdatasync", file.sync_data()),
            };
            self.must(result, format_args!("{op} of file{f}"));
            self.count(op);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    // -- linker --

    fn run_linker(&mut self, linker: usize) {
        let file = linker % SHARED_FILES;
        let anchor = self.path(&anchor_path(file));
        let mut names = OwnedNames::new(self.role);
        while self.running() {
            let links = names.paths(|e| *e == Entry::SharedFile(file));
            let smalls = names.paths(|e| matches!(e, Entry::Small { .. }));
            match self.rng.below(10) {
                0..=3 if links.len() < MAX_LINKS_PER_LINKER => {
                    let dir = self.random_shared_dir();
                    let link = names.fresh(&dir);
                    let linked = fs::hard_link(&anchor, self.path(&link));
                    self.must(linked, format_args!("link file{file} as {link}"));
                    names.entries.insert(link, Entry::SharedFile(file));
                    self.count("link");
                }
                4 | 5 if !links.is_empty() => {
                    let link = self.choose(&links);
                    let dir = self.random_shared_dir();
                    self.rename(&mut names, &link, &dir);
                }
                6 | 7 if !links.is_empty() => {
                    let link = self.choose(&links);
                    self.remove_file(&mut names, &link);
                }
                8 if !links.is_empty() => {
                    // A rename that replaces one of the file's names.
                    let link = self.choose(&links);
                    let dir = self.random_shared_dir();
                    let small = self.create_small_file(&mut names, &dir);
                    let renamed = fs::rename(self.path(&small), self.path(&link));
                    self.must(renamed, format_args!("rename {small} over {link}"));
                    names.rename(&small, &link);
                    self.count("rename-over-link");
                }
                9 if !smalls.is_empty() => {
                    let small = self.choose(&smalls);
                    self.remove_file(&mut names, &small);
                }
                _ => {}
            }
        }
        self.record_names(&names);
    }

    // -- churn --

    fn run_churn(&mut self) {
        let mut names = OwnedNames::new(self.role);
        while self.running() {
            let files = names.paths(|e| matches!(e, Entry::Small { .. }));
            let subdirs = names.paths(|e| *e == Entry::Dir);
            let mut parents: Vec<String> = (0..SHARED_DIRS).map(shared_dir).collect();
            parents.extend(subdirs.iter().cloned());
            match self.rng.below(10) {
                0..=3 => {
                    let parent = self.choose(&parents);
                    self.create_small_file(&mut names, &parent);
                }
                4 | 5 if !files.is_empty() => {
                    let file = self.choose(&files);
                    let parent = self.choose(&parents);
                    self.rename(&mut names, &file, &parent);
                }
                6 if !files.is_empty() => {
                    let file = self.choose(&files);
                    self.remove_file(&mut names, &file);
                }
                7 if subdirs.len() < MAX_SUBDIRS_PER_CHURNER => {
                    let parent = self.random_shared_dir();
                    let dir = names.fresh(&parent);
                    let made = fs::create_dir(self.path(&dir));
                    self.must(made, format_args!("mkdir {dir}"));
                    names.entries.insert(dir, Entry::Dir);
                    self.count("mkdir");
                }
                8 if !subdirs.is_empty() => {
                    let dir = self.choose(&subdirs);
                    let parent = self.random_shared_dir();
                    self.rename(&mut names, &dir, &parent);
                }
                9 if !subdirs.is_empty() => {
                    let dir = self.choose(&subdirs);
                    for file in names.paths_under(&dir) {
                        self.remove_file(&mut names, &file);
                    }
                    let removed = fs::remove_dir(self.path(&dir));
                    self.must(removed, format_args!("rmdir {dir}"));
                    names.entries.remove(&dir);
                    self.count("rmdir");
                }
                _ => {}
            }
        }
        self.record_names(&names);
    }

    fn create_small_file(&mut self, names: &mut OwnedNames, parent: &str) -> String {
        let path = names.fresh(parent);
        let len = self.rng.below(SMALL_FILE_MAX);
        let seed = self.rng.next();
        let written = fs::write(self.path(&path), random_bytes(seed, len as usize));
        self.must(written, format_args!("create {path}"));
        names
            .entries
            .insert(path.clone(), Entry::Small { len, seed });
        self.count("create");
        path
    }

    /// Renames owned `path` to a new name in `parent`.
    fn rename(&mut self, names: &mut OwnedNames, path: &str, parent: &str) {
        let to = names.fresh(parent);
        let renamed = fs::rename(self.path(path), self.path(&to));
        self.must(renamed, format_args!("rename {path} to {to}"));
        names.rename(path, &to);
        self.count("rename");
    }

    fn remove_file(&mut self, names: &mut OwnedNames, path: &str) {
        let removed = fs::remove_file(self.path(path));
        self.must(removed, format_args!("unlink {path}"));
        names.entries.remove(path);
        self.count("unlink");
    }

    // -- attributes of shared files and directories --

    fn run_file_attrs(&mut self, file: usize) {
        let handle = self.open_shared_file(file, true);
        let mut attrs = OwnedAttrs::new(Target::File(file), INITIAL_FILE_MODE);
        // The bytes from WRITTEN_END to the end of the file.
        let mut tail = vec![0u8; (TAIL_START - WRITTEN_END) as usize];
        while self.running() {
            match self.rng.below(7) {
                0..=4 => self.change_attribute(&handle, &mut attrs, &FILE_MODES),
                5 => {
                    let size = TAIL_START + self.rng.below(TAIL_MAX + 1);
                    self.must(handle.set_len(size), format_args!("truncate to {size}"));
                    tail.resize((size - WRITTEN_END) as usize, 0);
                    self.count("truncate");
                }
                _ => {
                    let writable_from = TAIL_START - WRITTEN_END;
                    let at = writable_from + self.rng.below(tail.len() as u64 - writable_from + 1);
                    let bytes =
                        random_bytes(self.rng.next(), 1 + self.rng.below(TAIL_WRITE_MAX) as usize);
                    let written = handle.write_all_at(&bytes, WRITTEN_END + at);
                    self.must(written, format_args!("write {} tail bytes", bytes.len()));
                    let end = at as usize + bytes.len();
                    if end > tail.len() {
                        tail.resize(end, 0);
                    }
                    tail[at as usize..end].copy_from_slice(&bytes);
                    self.count("tail-write");
                }
            }
        }
        self.facts.push(Fact::Tail {
            file,
            size: WRITTEN_END + tail.len() as u64,
            hash: content_hash_of(&tail),
        });
        attrs.record(&mut self.facts);
    }

    fn run_dir_attrs(&mut self) {
        let dirs: Vec<File> = (0..SHARED_DIRS)
            .map(|d| {
                let opened = File::open(self.path(&shared_dir(d)));
                self.must(opened, format_args!("open {}", shared_dir(d)))
            })
            .collect();
        let mut attrs: Vec<OwnedAttrs> = (0..SHARED_DIRS)
            .map(|d| OwnedAttrs::new(Target::Dir(d), INITIAL_DIR_MODE))
            .collect();
        while self.running() {
            let d = self.index(SHARED_DIRS);
            self.change_attribute(&dirs[d], &mut attrs[d], &DIR_MODES);
        }
        for a in &attrs {
            a.record(&mut self.facts);
        }
    }

    /// One random chmod, chown, utimes, setxattr or removexattr of `file`.
    fn change_attribute(&mut self, file: &File, attrs: &mut OwnedAttrs, modes: &[u32]) {
        let target = attrs.target;
        match self.rng.below(5) {
            0 => {
                let mode = self.choose(modes);
                let changed = file.set_permissions(fs::Permissions::from_mode(mode));
                self.must(changed, format_args!("chmod {mode:o} {target}"));
                attrs.mode = mode;
                self.count("chmod");
            }
            1 => {
                let (uid, gid) = self.choose(&OWNERS);
                let changed = std::os::unix::fs::fchown(file, Some(uid), Some(gid));
                self.must(changed, format_args!("chown {uid}:{gid} {target}"));
                (attrs.uid, attrs.gid) = (uid, gid);
                self.count("chown");
            }
            2 => {
                let at = UNIX_EPOCH + Duration::from_secs(1_000_000_000 + self.rng.below(1 << 30));
                let times = FileTimes::new().set_accessed(at).set_modified(at);
                self.must(file.set_times(times), format_args!("utimes {target}"));
                self.count("utimes");
            }
            3 => {
                let name = format!("user.x{}", self.rng.below(XATTR_NAMES));
                let value = format!("v{}", self.rng.next() % 1_000_000);
                let set = set_xattr(file, &name, value.as_bytes());
                self.must(set, format_args!("setxattr {name} on {target}"));
                attrs.xattrs.insert(name, value);
                self.count("setxattr");
            }
            _ => {
                let names: Vec<String> = attrs.xattrs.keys().cloned().collect();
                if names.is_empty() {
                    return;
                }
                let name = self.choose(&names);
                let removed = remove_xattr(file, &name);
                self.must(removed, format_args!("removexattr {name} on {target}"));
                attrs.xattrs.remove(&name);
                self.count("removexattr");
            }
        }
    }
}

/// The names one process owns (all with its prefix), as it left them.
struct OwnedNames {
    prefix: String,
    next: u64,
    entries: BTreeMap<String, Entry>,
}

impl OwnedNames {
    fn new(owner: Role) -> OwnedNames {
        OwnedNames {
            prefix: owner.name_prefix().expect("a role that makes names"),
            next: 0,
            entries: BTreeMap::new(),
        }
    }

    /// A name in `parent` that was never used.
    fn fresh(&mut self, parent: &str) -> String {
        self.next += 1;
        format!("{parent}/{}{}", self.prefix, self.next)
    }

    fn paths(&self, wanted: impl Fn(&Entry) -> bool) -> Vec<String> {
        let found = self.entries.iter().filter(|(_, e)| wanted(e));
        found.map(|(p, _)| p.clone()).collect()
    }

    fn paths_under(&self, dir: &str) -> Vec<String> {
        let inside = format!("{dir}/");
        let found = self.entries.keys().filter(|p| p.starts_with(&inside));
        found.cloned().collect()
    }

    /// Moves `from` (with everything under it) to `to`, replacing `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let mut moved = self.paths_under(from);
        moved.push(from.to_string());
        for old in moved {
            let entry = self.entries.remove(&old).unwrap();
            self.entries
                .insert(format!("{to}{}", &old[from.len()..]), entry);
        }
    }
}

/// The attributes of one inode, as the process that owns them left them.
struct OwnedAttrs {
    target: Target,
    mode: u32,
    uid: u32,
    gid: u32,
    xattrs: BTreeMap<String, String>,
}

impl OwnedAttrs {
    fn new(target: Target, mode: u32) -> OwnedAttrs {
        OwnedAttrs {
            target,
            mode,
            uid: 0,
            gid: 0,
            xattrs: BTreeMap::new(),
        }
    }

    fn record(&self, facts: &mut Vec<Fact>) {
        facts.push(Fact::Attrs {
            target: self.target,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
        });
        for (name, value) in &self.xattrs {
            facts.push(Fact::Xattr {
                target: self.target,
                name: name.clone(),
                value: value.clone(),
            });
        }
    }
}

/// A `MAP_SHARED` mapping of the start of a file. Stores into it dirty the
/// page cache without the inode's lock, which write(2) holds, so the
/// write-back they cause overlaps links, renames and chmods more often.
struct SharedMapping {
    addr: *mut u8,
    len: usize,
}

impl SharedMapping {
    fn new(file: &File, len: usize) -> io::Result<SharedMapping> {
        // SAFETY: a new shared mapping of an open descriptor; nothing else
        // in this process maps or aliases it.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping {
            addr: addr.cast(),
            len,
        })
    }

    fn store(&mut self, offset: u64, bytes: &[u8]) {
        let offset = offset as usize;
        assert!(offset + bytes.len() <= self.len, "store past the mapping");
        // SAFETY: in bounds (checked above) of a mapping that lives as long
        // as self; the file is never truncated below the mapped length.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr.add(offset), bytes.len())
        };
    }

    /// msync(MS_SYNC): the stored bytes are written back.
    fn sync(&self) -> io::Result<()> {
        // SAFETY: the whole mapping, which is live.
        os_result(unsafe { libc::msync(self.addr.cast(), self.len, libc::MS_SYNC) })
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

fn os_result(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sync_file_range(file: &File, offset: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: a plain system call on an open descriptor.
    os_result(unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) })
}

fn drop_clean_pages(file: &File) -> io::Result<()> {
    // SAFETY: a plain system call on an open descriptor.
    let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    match ret {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

fn set_xattr(file: &File, name: &str, value: &[u8]) -> io::Result<()> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid descriptor, NUL-terminated name, value pointer and length agree.
    os_result(unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
}

fn remove_xattr(file: &File, name: &str) -> io::Result<()> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid descriptor and NUL-terminated name.
    os_result(unsafe { libc::fremovexattr(file.as_raw_fd(), name.as_ptr()) })
}

// ---- the test ----

#[test]
fn processes_race_writeback_with_namespace_and_attribute_changes() {
    if !fuse_available() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let msg = "the mount concurrency test needs root (it chowns files)";
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("SKIPPING test: {msg}");
        return;
    }
    let load = Duration::from_secs(
        std::env::var(LOAD_SECS_ENV)
            .map(|s| s.parse().expect("F2FUSE_MOUNT_STRESS_SECS: whole seconds"))
            .unwrap_or(DEFAULT_LOAD_SECS),
    );
    let started = Instant::now();
    let scratch = Scratch::new("mount-concurrency");
    let img = scratch.join("img");
    f2fuse_mkfs(
        &img,
        "1G",
        "extra_attr,inode_checksum,flexible_inline_xattr",
    );
    let mount = ForegroundMount::start(
        &img,
        &scratch.join("mnt"),
        "allow_other,default_permissions",
        scratch.join("daemon.log"),
    );
    create_shared_tree(&mount.mnt);

    let run = run_workers(&scratch, &mount.mnt, load);
    let mut expected = Expected::new(run.silent);
    for fact in run.facts {
        expected.add(fact);
    }
    eprintln!(
        "{} processes, {load:?} of load; operations: {:?}",
        Role::all().len(),
        expected.counts
    );
    let unmounting = Instant::now();
    let mut problems = if run.hung {
        mount.abort()
    } else {
        mount.unmount()
    };
    eprintln!(
        "unmount until the daemon exited: {:?}",
        unmounting.elapsed()
    );
    problems.extend(run.failures);
    problems.extend(fsck_problems(&img));
    let mut differences = check_image(&img, &expected);
    if differences.len() > MAX_DIFFERENCES_SHOWN {
        let more = differences.len() - MAX_DIFFERENCES_SHOWN;
        differences.truncate(MAX_DIFFERENCES_SHOWN);
        differences.push(format!("... and {more} more differences"));
    }
    problems.extend(differences);
    eprintln!("whole test: {:?}", started.elapsed());
    if !problems.is_empty() {
        let shown: Vec<String> = problems.iter().map(|p| first_lines(p, 40)).collect();
        panic!(
            "{} problems after {load:?} of concurrent load through the mount (image and \
             logs in {}, removed unless {}=1):\n{}",
            problems.len(),
            scratch.path().display(),
            support::KEEP_SCRATCH_ENV,
            shown.join("\n")
        );
    }
}

/// `text` cut after `n` lines.
fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        return text.to_string();
    }
    format!(
        "{}\n... ({} more lines)",
        lines[..n].join("\n"),
        lines.len() - n
    )
}

/// The directories and files the processes share, with their initial
/// attributes (those the attribute processes start from).
fn create_shared_tree(mnt: &Path) {
    let set_mode = |path: &Path, mode| {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    };
    fs::create_dir(mnt.join("anchor")).unwrap();
    for d in 0..SHARED_DIRS {
        let dir = mnt.join(shared_dir(d));
        fs::create_dir(&dir).unwrap();
        set_mode(&dir, INITIAL_DIR_MODE);
    }
    for f in 0..SHARED_FILES {
        let path = mnt.join(anchor_path(f));
        File::create(&path).unwrap().set_len(TAIL_START).unwrap();
        set_mode(&path, INITIAL_FILE_MODE);
    }
}

struct WorkerRun {
    facts: Vec<Fact>,
    failures: Vec<String>,
    /// Some worker did not finish in time (left to the caller: abort the mount).
    hung: bool,
    /// Workers that left no record (failed or hung).
    silent: Vec<Role>,
}

/// Starts every role, waits for them, and reads their records.
fn run_workers(scratch: &Scratch, mnt: &Path, load: Duration) -> WorkerRun {
    let deadline = SystemTime::now() + load;
    let seed = unix_ms(SystemTime::now());
    eprintln!("worker seed base {seed}");
    let mut children: Vec<(Role, Child)> = Role::all()
        .into_iter()
        .enumerate()
        .map(|(i, role)| {
            let log = File::create(scratch.join(format!("{}.log", role.name()))).unwrap();
            let child = Command::new(std::env::current_exe().unwrap())
                .args([
                    // Its name in the test binary (tests/cli/main.rs).
                    "mount_concurrency::worker_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(worker_env::ROLE, role.name())
                .env(worker_env::MOUNT, mnt)
                .env(worker_env::RECORD, record_path(scratch, role))
                .env(worker_env::DEADLINE_MS, unix_ms(deadline).to_string())
                .env(worker_env::SEED, (seed + i as u64).to_string())
                .env("RUST_BACKTRACE", "0")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start a worker process");
            (role, child)
        })
        .collect();

    let give_up = Instant::now() + load + FINISH_GRACE;
    let mut exits: Vec<Option<ExitStatus>> = vec![None; children.len()];
    while exits.iter().any(Option::is_none) && Instant::now() < give_up {
        for (exit, (_, child)) in exits.iter_mut().zip(&mut children) {
            if exit.is_none() {
                *exit = child.try_wait().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut run = WorkerRun {
        facts: Vec::new(),
        failures: Vec::new(),
        hung: false,
        silent: Vec::new(),
    };
    for (exit, (role, mut child)) in exits.into_iter().zip(children) {
        let name = role.name();
        match exit {
            None => {
                run.failures.push(format!(
                    "{name} still running {FINISH_GRACE:?} after the end of the load \
                     (a deadlock?), its threads waiting in: {}",
                    thread_waits(child.id())
                ));
                run.hung = true;
                run.silent.push(role);
                let _ = child.kill();
            }
            Some(status) if !status.success() => {
                run.silent.push(role);
                let log = fs::read_to_string(scratch.join(format!("{name}.log")));
                run.failures.push(format!(
                    "{name} failed ({status}):\n{}",
                    panic_message(&log.unwrap_or_default())
                ));
            }
            Some(_) => {
                let record = fs::read_to_string(record_path(scratch, role)).unwrap();
                for line in record.lines() {
                    match Fact::parse(line) {
                        Some(fact) => run.facts.push(fact),
                        None => run
                            .failures
                            .push(format!("{name}: bad record line {line:?}")),
                    }
                }
            }
        }
    }
    if run.hung {
        // After the mount is aborted the killed workers go away.
        eprintln!("workers hung; aborting the FUSE connection");
    }
    run
}

fn record_path(scratch: &Scratch, role: Role) -> PathBuf {
    scratch.join(format!("{}.record", role.name()))
}

/// Where the threads of process `pid` wait (their kernel wait channels),
/// e.g. "futex_do_wait x3, request_wait_answer".
fn thread_waits(pid: u32) -> String {
    let mut waits: BTreeMap<String, usize> = BTreeMap::new();
    for task in fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let wchan = task.map(|t| fs::read_to_string(t.path().join("wchan")));
        let wchan = wchan.ok().and_then(Result::ok).unwrap_or_default();
        *waits.entry(wchan).or_default() += 1;
    }
    let shown: Vec<String> = waits
        .into_iter()
        .map(|(wchan, n)| {
            if n > 1 {
                format!("{wchan} x{n}")
            } else {
                wchan
            }
        })
        .collect();
    shown.join(", ")
}

/// The panic message in a worker's log (its last lines if there is none).
fn panic_message(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.iter().position(|l| l.contains(" panicked at "));
    let start = start.unwrap_or(lines.len().saturating_sub(10));
    let message = lines[start..]
        .iter()
        .take_while(|l| !l.starts_with("note: "));
    message.copied().collect::<Vec<_>>().join("\n")
}

// ---- the check ----

/// The final state the records describe.
struct Expected {
    names: BTreeMap<String, Entry>,
    /// (file, writer, chunk) -> the last round written; absent: never written.
    rounds: BTreeMap<(usize, usize, u64), u64>,
    /// Workers that left no record (failed or hung): their chunks, the names
    /// they made and the link counts of the files they linked are unknown.
    silent: Vec<Role>,
    attrs: BTreeMap<Target, (u32, u32, u32)>,
    xattrs: BTreeMap<Target, BTreeMap<String, String>>,
    tails: BTreeMap<usize, (u64, u64)>,
    counts: BTreeMap<String, u64>,
}

impl Expected {
    /// The shared tree as `create_shared_tree` made it.
    fn new(silent: Vec<Role>) -> Expected {
        let mut names = BTreeMap::from([("anchor".to_string(), Entry::Dir)]);
        names.extend((0..SHARED_DIRS).map(|d| (shared_dir(d), Entry::Dir)));
        names.extend((0..SHARED_FILES).map(|f| (anchor_path(f), Entry::SharedFile(f))));
        Expected {
            names,
            rounds: BTreeMap::new(),
            silent,
            attrs: BTreeMap::new(),
            xattrs: BTreeMap::new(),
            tails: BTreeMap::new(),
            counts: BTreeMap::new(),
        }
    }

    fn reported(&self, role: Role) -> bool {
        !self.silent.contains(&role)
    }

    /// Whether `path` may be a name a silent worker made.
    fn made_by_silent_worker(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        let prefixes = self.silent.iter().filter_map(|r| r.name_prefix());
        prefixes.into_iter().any(|p| name.starts_with(&p))
    }

    fn links_known(&self, file: usize) -> bool {
        let linkers = (0..SHARED_FILES * LINKERS_PER_FILE).filter(|l| l % SHARED_FILES == file);
        linkers.into_iter().all(|l| self.reported(Role::Linker(l)))
    }

    fn add(&mut self, fact: Fact) {
        match fact {
            Fact::Name { path, entry } => {
                let previous = self.names.insert(path.clone(), entry);
                assert!(previous.is_none(), "{path} recorded twice");
            }
            Fact::Chunk {
                file,
                writer,
                chunk,
                round,
            } => {
                self.rounds.insert((file, writer, chunk), round);
            }
            Fact::Attrs {
                target,
                mode,
                uid,
                gid,
            } => {
                self.attrs.insert(target, (mode, uid, gid));
            }
            Fact::Xattr {
                target,
                name,
                value,
            } => {
                self.xattrs.entry(target).or_default().insert(name, value);
            }
            Fact::Tail { file, size, hash } => {
                self.tails.insert(file, (size, hash));
            }
            Fact::Count { op, n } => *self.counts.entry(op).or_default() += n,
        }
    }
}

/// fsck.f2fs and our fsck, each reported on its own.
fn fsck_problems(img: &Path) -> Vec<String> {
    let checked = Instant::now();
    // fsck_f2fs runs our fsck only when fsck.f2fs is clean; run it anyway.
    let problems: Vec<String> = match fsck_f2fs(img) {
        Ok(()) => Vec::new(),
        Err(report) if report.starts_with("fsck.f2fs") => {
            let ours = f2fuse_fsck(img).unwrap_or_else(|| "f2fuse fsck: clean".into());
            vec![report, ours]
        }
        Err(report) => vec![report],
    };
    eprintln!("fsck.f2fs and f2fuse fsck: {:?}", checked.elapsed());
    problems
}

/// Our fsck's report, if it finds anything (support's `our_fsck` assumes
/// fsck.f2fs was clean and says so).
fn f2fuse_fsck(img: &Path) -> Option<String> {
    let fs = match Fs::open_path(img, OpenOptions::default()) {
        Ok(fs) => fs,
        Err(e) => return Some(format!("f2fuse fsck cannot open the image: {e}")),
    };
    match f2fuse_engine::internals::fsck::check(&fs) {
        Ok(report) if report.is_clean() => None,
        Ok(report) => Some(format!("f2fuse fsck:\n{}", report.problems.join("\n"))),
        Err(e) => Some(format!("f2fuse fsck: {e}")),
    }
}

/// Everything in the image that differs from what the processes recorded.
fn check_image(img: &Path, expected: &Expected) -> Vec<String> {
    let fs = match Fs::open_path(img, OpenOptions::default()) {
        Ok(fs) => fs,
        Err(e) => return vec![format!("the engine cannot open the image: {e}")],
    };
    let tree = match panic::catch_unwind(AssertUnwindSafe(|| scan_image(&fs))) {
        Ok(tree) => tree,
        Err(_) => return vec!["reading the tree through the engine panicked (above)".into()],
    };
    let mut problems = Vec::new();
    check_names(&tree, expected, &mut problems);
    check_attributes(&tree, expected, &mut problems);
    for file in 0..SHARED_FILES {
        if let Err(e) = check_shared_file(&fs, &tree, expected, file, &mut problems) {
            problems.push(format!("file{file}: reading it through the engine: {e}"));
        }
    }
    problems
}

/// Every recorded name present and what it should be; no other names.
fn check_names(
    tree: &BTreeMap<String, HostEntry>,
    expected: &Expected,
    problems: &mut Vec<String>,
) {
    for (path, entry) in &expected.names {
        let Some(found) = tree.get(path) else {
            problems.push(format!("{path}: missing (recorded as {entry:?})"));
            continue;
        };
        let wrong = match entry {
            Entry::Dir => (found.kind != Kind::Dir).then(|| format!("a {:?}", found.kind)),
            Entry::SharedFile(_) => {
                (found.kind != Kind::File).then(|| format!("a {:?}", found.kind))
            }
            Entry::Small { len, seed } => {
                let want_hash = content_hash_of(&random_bytes(*seed, *len as usize));
                if found.kind != Kind::File || found.size != *len || found.nlink != 1 {
                    Some(format!(
                        "a {:?} of {} bytes with {} links",
                        found.kind, found.size, found.nlink
                    ))
                } else if found.content_hash != Some(want_hash) {
                    Some("different contents".into())
                } else {
                    None
                }
            }
        };
        if let Some(wrong) = wrong {
            problems.push(format!("{path}: recorded as {entry:?}, found {wrong}"));
        }
    }
    for (path, found) in tree {
        let known = path.is_empty() || path == "lost+found" || expected.names.contains_key(path);
        if !known && !expected.made_by_silent_worker(path) {
            problems.push(format!(
                "{path}: a {:?} (inode links {}) no process left there",
                found.kind, found.nlink
            ));
        }
    }
}

fn check_attributes(
    tree: &BTreeMap<String, HostEntry>,
    expected: &Expected,
    problems: &mut Vec<String>,
) {
    let no_xattrs = BTreeMap::new();
    for (&target, &(mode, uid, gid)) in &expected.attrs {
        let path = target.path();
        let Some(found) = tree.get(&path) else {
            continue; // reported as missing
        };
        if (found.mode, found.uid, found.gid) != (mode, uid, gid) {
            problems.push(format!(
                "{path}: mode {:o} owner {}:{}, recorded {mode:o} {uid}:{gid}",
                found.mode, found.uid, found.gid
            ));
        }
        let want: BTreeMap<Vec<u8>, Vec<u8>> = expected
            .xattrs
            .get(&target)
            .unwrap_or(&no_xattrs)
            .iter()
            .map(|(n, v)| (n.clone().into_bytes(), v.clone().into_bytes()))
            .collect();
        if found.xattrs != want {
            problems.push(format!(
                "{path}: xattrs {}, recorded {}",
                show_xattrs(&found.xattrs),
                show_xattrs(&want)
            ));
        }
    }
}

fn show_xattrs(xattrs: &BTreeMap<Vec<u8>, Vec<u8>>) -> String {
    let shown: Vec<String> = xattrs
        .iter()
        .map(|(n, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    format!("{{{}}}", shown.join(", "))
}

/// Shared file `file`: all its names one inode with that many links; every
/// chunk holds its writer's last round; size and tail as recorded.
fn check_shared_file(
    fs: &Fs,
    tree: &BTreeMap<String, HostEntry>,
    expected: &Expected,
    file: usize,
    problems: &mut Vec<String>,
) -> Result<(), String> {
    let names: Vec<&String> = expected
        .names
        .iter()
        .filter(|(_, e)| **e == Entry::SharedFile(file))
        .map(|(p, _)| p)
        .collect();
    let mut inos = BTreeMap::new();
    for &path in &names {
        if let Ok(inode) = fs.resolve(path) {
            inos.insert(path.clone(), inode.ino);
        }
    }
    if inos.values().collect::<BTreeSet<_>>().len() > 1 {
        problems.push(format!(
            "file{file}: its names are different inodes: {inos:?}"
        ));
    }
    let inode = fs.resolve(&anchor_path(file)).map_err(|e| e.to_string())?;
    if expected.links_known(file) && inode.links as usize != names.len() {
        let found = tree
            .iter()
            .filter(|(_, e)| e.hardlink_group == Some(inode.ino as u64));
        let found: Vec<&String> = found.map(|(p, _)| p).collect();
        problems.push(format!(
            "file{file}: {} links, recorded {} names (found {} in the tree)",
            inode.links,
            names.len(),
            found.len()
        ));
    }
    check_chunks(fs, &inode, expected, file, problems)?;
    if let Some(&(size, hash)) = expected.tails.get(&file) {
        if inode.size != size {
            problems.push(format!("file{file}: size {}, recorded {size}", inode.size));
        } else if content_hash_of(&read_range(fs, &inode, WRITTEN_END, size - WRITTEN_END)?) != hash
        {
            problems.push(format!(
                "file{file}: the tail (from byte {WRITTEN_END}) differs"
            ));
        }
    }
    Ok(())
}

fn check_chunks(
    fs: &Fs,
    inode: &InodeInfo,
    expected: &Expected,
    file: usize,
    problems: &mut Vec<String>,
) -> Result<(), String> {
    const SHOWN: usize = 8;
    let mut wrong = Vec::new();
    for writer in (0..WRITERS).filter(|&w| expected.reported(Role::Writer(w))) {
        for chunk in 0..CHUNKS_PER_WRITER {
            let round = expected
                .rounds
                .get(&(file, writer, chunk))
                .copied()
                .unwrap_or(0);
            let offset = chunk_offset(writer, chunk);
            let found = read_range(fs, inode, offset, CHUNK)?;
            if found != chunk_bytes(file, writer, chunk, round) {
                let holds = (0..round)
                    .rev()
                    .find(|&r| found == chunk_bytes(file, writer, chunk, r))
                    .map_or("no round's data".to_string(), |r| {
                        format!("round {r}'s data")
                    });
                wrong.push(format!(
                    "file{file}: writer {writer} chunk {chunk} (bytes {offset}..{}): holds {holds}, \
                     recorded round {round}",
                    offset + CHUNK
                ));
            }
        }
    }
    if wrong.len() > SHOWN {
        let more = wrong.len() - SHOWN;
        wrong.truncate(SHOWN);
        wrong.push(format!("file{file}: ... and {more} more chunks differ"));
    }
    problems.extend(wrong);
    Ok(())
}

fn read_range(fs: &Fs, inode: &InodeInfo, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len as usize];
    let mut done = 0;
    while done < buf.len() {
        match fs.read(inode, offset + done as u64, &mut buf[done..]) {
            Ok(0) => return Err(format!("short read at {}", offset + done as u64)),
            Ok(n) => done += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(buf)
}

// ---- mounting ----

fn f2fuse_mkfs(img: &Path, size: &str, features: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(["mkfs".as_ref(), img.as_os_str()])
        .args(["--size", size, "-O", features, "-q"])
        .stdin(Stdio::null())
        .output()
        .expect("run f2fuse mkfs");
    assert!(out.status.success(), "mkfs: {out:?}");
}

/// `f2fuse mount -f`, the daemon a child of the test with its stderr (a
/// panic, errors it logs) in a file, so that the test sees how it ended.
/// Unmounted lazily, and the daemon killed if it does not exit, on drop.
struct ForegroundMount {
    daemon: Child,
    mnt: PathBuf,
    log: PathBuf,
    /// The FUSE connection's number under /sys/fs/fuse/connections (read
    /// at mount: a hung mount cannot be asked later).
    connection: u64,
}

impl ForegroundMount {
    fn start(img: &Path, mnt: &Path, opts: &str, log: PathBuf) -> ForegroundMount {
        fs::create_dir_all(mnt).unwrap();
        let mnt = mnt.canonicalize().unwrap();
        let log_file = File::create(&log).unwrap();
        let daemon = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
            .args(["mount".as_ref(), img.as_os_str(), mnt.as_os_str()])
            .args(["-o", opts, "-f"])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("run f2fuse mount -f");
        let mut mount = ForegroundMount {
            daemon,
            mnt,
            log,
            connection: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(&mount.mnt) {
            if let Some(ended) = mount.daemon_ended() {
                panic!("f2fuse mount -f: {ended}");
            }
            assert!(Instant::now() < deadline, "no mount after 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        let dev = fs::metadata(&mount.mnt).unwrap().dev();
        mount.connection = (dev & 0xff) | ((dev >> 12) & 0xfff00);
        mount
    }

    fn daemon_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How the daemon ended, if it has: its status and what it wrote.
    fn daemon_ended(&mut self) -> Option<String> {
        let status = self.daemon.try_wait().unwrap()?;
        Some(format!(
            "the daemon exited ({status}):\n{}",
            self.daemon_log()
        ))
    }

    /// `fusermount3 -u` (retried while busy), then waits until the daemon
    /// has exited, so has released the image after its final checkpoint.
    /// Problems: the daemon died before, failed, wrote to stderr, or did
    /// not exit within 60 s.
    fn unmount(mut self) -> Vec<String> {
        if let Some(ended) = self.daemon_ended() {
            self.detach(); // a dead daemon's mount stays until detached
            return vec![format!("before the unmount, {ended}")];
        }
        for tries in 1.. {
            let out = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .output()
                .unwrap();
            if out.status.success() {
                break;
            }
            assert!(tries < 100, "fusermount3 -u: {out:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        match self.wait_for_exit(Duration::from_secs(60)) {
            Some(status) if status.success() && self.daemon_log().is_empty() => Vec::new(),
            Some(status) => vec![format!(
                "at the unmount the daemon exited ({status}):\n{}",
                self.daemon_log()
            )],
            None => vec![format!(
                "the daemon did not exit within 60 s of the unmount:\n{}",
                self.kill_daemon()
            )],
        }
    }

    /// After a hang: aborts the FUSE connection (every waiting request
    /// fails), detaches the mount and, if the daemon does not exit then,
    /// kills it (the image then needs recovery).
    fn abort(mut self) -> Vec<String> {
        let abort = format!("/sys/fs/fuse/connections/{}/abort", self.connection);
        if let Err(e) = fs::write(&abort, "1") {
            eprintln!("cannot write {abort}: {e}");
        }
        self.detach();
        match self.wait_for_exit(Duration::from_secs(20)) {
            Some(status) => vec![format!(
                "after the connection was aborted the daemon exited ({status}):\n{}",
                self.daemon_log()
            )],
            None => vec![format!(
                "the daemon did not exit after the connection was aborted, killed (the image \
                 may need recovery):\n{}",
                self.kill_daemon()
            )],
        }
    }

    fn detach(&self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.mnt)
            .status();
    }

    fn wait_for_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.daemon.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon; returns its log and where its threads waited.
    fn kill_daemon(&mut self) -> String {
        let waits = thread_waits(self.daemon.id());
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        format!("its threads waited in: {waits}\n{}", self.daemon_log())
    }
}

impl Drop for ForegroundMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            self.detach();
        }
        if self.wait_for_exit(Duration::from_secs(20)).is_none() {
            self.kill_daemon();
        }
    }
}
