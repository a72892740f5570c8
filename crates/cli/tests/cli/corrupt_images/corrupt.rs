//! Helpers of the corrupt-image suite: f2fs-tools wrappers, the base image,
//! locating structures inside it, byte patching, and running the engine,
//! the CLI and fsck.f2fs under a time limit.

// Not every test uses every helper.
#![allow(dead_code)]

use f2fuse_engine::internals::device::IoKind;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Error, FileKind, Fs, InodeInfo, OpenOptions};
use f2fuse_layout::dentry::{DentryGeometry, DentrySet};
use f2fuse_layout::segment::nat_block_addr;
use f2fuse_layout::*;
use std::fs::{self, File, OpenOptions as FsOpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{symlink, FileExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// No single check (engine call, CLI run, fsck run) may take longer.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Size of the base image (a sparse file).
pub const IMAGE_BYTES: u64 = 128 << 20;

pub use f2fuse_testkit::find_tool;

/// True if mkfs.f2fs, sload.f2fs and fsck.f2fs are installed. If not:
/// panics when `CI` is set, else prints a skip note and returns false.
pub fn have_tools() -> bool {
    f2fuse_testkit::require_f2fs_tools()
}

/// Runs `f` on another thread; panics if it takes longer than [`LIMIT`]
/// (a hang) and re-raises its panic if it panicked.
pub fn within_limit<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    within(LIMIT, what, f)
}

/// [`within_limit`] with another limit.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(limit) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {limit:?} (hang?)")
        }
    }
}

/// A temporary directory removed on drop (kept if `F2FUSE_KEEP_SCRATCH` is set).
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let tag: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = std::env::temp_dir().join(format!(
            "f2fuse-corrupt-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Scratch { path }
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("F2FUSE_KEEP_SCRATCH").is_some() {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

/// Entries in the big directory: enough ~40-byte names for three hash levels.
pub const BIG_DIR_ENTRIES: usize = 300;

/// Writes the source tree loaded into every base image.
fn write_tree(src: &Path) {
    let mut rng = Rng::new(7);
    let w = |p: &str, data: &[u8]| {
        fs::write(src.join(p), data).unwrap_or_else(|e| panic!("write {p}: {e}"));
    };
    fs::create_dir_all(src.join("big")).unwrap();
    fs::create_dir_all(src.join("sub/nested/deeper")).unwrap();
    w("inline.txt", b"hello, inline world\n");
    w("medium.bin", &rng.bytes(20_000));
    // Past the 873 addresses an inode holds: needs direct nodes.
    w("large.bin", &rng.bytes((4 << 20) + 12_345));
    // Past 873 + 2 * 1018 blocks: needs the first indirect node. Sparse in the middle.
    let huge = File::create(src.join("huge.bin")).unwrap();
    huge.set_len(13 << 20).unwrap();
    huge.write_all_at(&rng.bytes(65_536), 0).unwrap();
    huge.write_all_at(&rng.bytes(65_536), (13 << 20) - 65_536)
        .unwrap();
    drop(huge);
    symlink("inline.txt", src.join("link")).unwrap();
    for i in 0..BIG_DIR_ENTRIES {
        w(
            &format!("big/entry-{i:04}-with-a-rather-long-file-name.txt"),
            format!("{i}\n").as_bytes(),
        );
    }
    w("sub/nested/deeper/leaf.txt", b"leaf\n");
    w("sub/nested/note.txt", b"note\n");
}

/// A freshly built image: `mkfs.f2fs -f -t 0 <mkfs_args>` on a 128 MiB
/// sparse file, then `sload.f2fs -P -f` of the test tree.
pub struct BaseImage {
    pub scratch: Scratch,
    pub img: PathBuf,
}

pub fn build_base(tag: &str, mkfs_args: &[&str]) -> BaseImage {
    let scratch = Scratch::new(tag);
    let src = scratch.join("src");
    fs::create_dir_all(&src).unwrap();
    write_tree(&src);
    let img = scratch.join("base.f2fs");
    File::create(&img).unwrap().set_len(IMAGE_BYTES).unwrap();
    let out = Command::new(find_tool("mkfs.f2fs").expect("mkfs.f2fs"))
        .args(["-f", "-t", "0"])
        .args(mkfs_args)
        .arg(&img)
        .output()
        .expect("run mkfs.f2fs");
    assert!(
        out.status.success(),
        "mkfs.f2fs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(find_tool("sload.f2fs").expect("sload.f2fs"))
        .arg("-P")
        .arg("-f")
        .arg(&src)
        .arg(&img)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run sload.f2fs");
    assert!(
        out.status.success(),
        "sload.f2fs failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = fs::remove_dir_all(&src);
    BaseImage { scratch, img }
}

impl BaseImage {
    /// Copies the base image to a new file to damage (a sparse-aware copy).
    pub fn copy(&self, name: &str) -> PathBuf {
        let dst = self.scratch.join(name);
        let out = Command::new("cp")
            .arg("--sparse=always")
            .arg(&self.img)
            .arg(&dst)
            .status()
            .expect("run cp");
        assert!(out.success(), "cp failed");
        dst
    }

    pub fn open(&self) -> Fs {
        open(&self.img).expect("the undamaged base image opens")
    }
}

pub fn open(img: &Path) -> std::result::Result<Fs, Error> {
    Fs::open_path(img, OpenOptions::default())
}

/// Writes `bytes` at `offset` of the image file.
pub fn patch(img: &Path, offset: u64, bytes: &[u8]) {
    let f = FsOpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

pub fn read_block(img: &Path, blkaddr: u64) -> Vec<u8> {
    let f = File::open(img).unwrap();
    let mut block = vec![0u8; F2FS_BLKSIZE];
    f.read_exact_at(&mut block, blkaddr * F2FS_BLKSIZE as u64)
        .unwrap();
    block
}

pub fn write_block(img: &Path, blkaddr: u64, block: &[u8]) {
    assert_eq!(block.len(), F2FS_BLKSIZE);
    patch(img, blkaddr * F2FS_BLKSIZE as u64, block);
}

/// Reads a block, lets `f` change it, writes it back.
pub fn edit_block(img: &Path, blkaddr: u64, f: impl FnOnce(&mut [u8])) {
    let mut block = read_block(img, blkaddr);
    f(&mut block);
    write_block(img, blkaddr, &block);
}

/// Byte offset in the image of the NAT entry of `nid` (which must not be
/// overridden by the NAT journal, as in an image sload.f2fs leaves).
pub fn nat_entry_offset(fs: &Fs, nid: u32) -> u64 {
    let in_journal = fs
        .checkpoint_state()
        .nat_journal
        .valid_entries()
        .unwrap()
        .iter()
        .any(|e| e.nid.get() == nid);
    assert!(
        !in_journal,
        "test assumes nid {nid} is not in the NAT journal"
    );
    let index = nid / NAT_ENTRY_PER_BLOCK;
    let copy = fs.checkpoint_state().nat_copy(index);
    let blkaddr = nat_block_addr(fs.superblock().nat_blkaddr.get(), index, copy);
    blkaddr * F2FS_BLKSIZE as u64 + (nid % NAT_ENTRY_PER_BLOCK) as u64 * NAT_ENTRY_SIZE as u64
}

/// Block address of node `nid`, from the NAT.
pub fn node_blkaddr(fs: &Fs, nid: u32) -> u64 {
    fs.node_manager().nat_entry(nid).unwrap().block_addr.get() as u64
}

/// The inode at `path` and the block address of its inode block.
pub fn inode_at(fs: &Fs, path: &str) -> (InodeInfo, u64) {
    let inode = fs
        .resolve(path)
        .unwrap_or_else(|e| panic!("resolve {path}: {e}"));
    let blkaddr = node_blkaddr(fs, inode.ino);
    (inode, blkaddr)
}

/// Where one dentry of a directory lives: the block holding the dentry
/// set, the set's byte offset in that block, and its geometry and slot.
pub struct DentryLocation {
    pub blkaddr: u64,
    pub set_offset: usize,
    pub geo: DentryGeometry,
    pub slot: usize,
    pub name_len: usize,
}

impl DentryLocation {
    /// Byte offset in the block of the `struct f2fs_dir_entry` of the slot.
    pub fn dentry_offset(&self) -> usize {
        self.set_offset + self.geo.dentry_offset + self.slot * SIZE_OF_DIR_ENTRY
    }

    /// Byte offset in the block of the entry's name.
    pub fn name_offset(&self) -> usize {
        self.set_offset + self.geo.name_offset + self.slot * F2FS_SLOT_LEN
    }
}

/// Finds the entry `name` of directory `dir_path`, inline or in a dentry block.
pub fn find_dentry(fs: &Fs, dir_path: &str, name: &[u8]) -> DentryLocation {
    let (dir, inode_blk) = inode_at(fs, dir_path);
    assert_eq!(dir.kind, FileKind::Directory);
    let mut sets: Vec<(u64, usize, DentryGeometry)> = Vec::new();
    if dir.has_inline(inline_flag::INLINE_DENTRY) {
        let range = dir.layout.inline_data_range();
        sets.push((inode_blk, range.start, DentryGeometry::inline(range.len())));
    } else {
        for (_, blk, len) in fs.extents(&dir).unwrap() {
            for b in blk as u64..blk as u64 + len {
                sets.push((b, 0, DentryGeometry::BLOCK));
            }
        }
    }
    let img_dev = fs.device();
    for (blkaddr, set_offset, geo) in sets {
        let block = img_dev.read_block(IoKind::DirData, blkaddr).unwrap();
        let set = DentrySet::new(&block[set_offset..], geo);
        for e in set.entries().unwrap() {
            if e.name == name {
                return DentryLocation {
                    blkaddr,
                    set_offset,
                    geo,
                    slot: e.slot,
                    name_len: e.name.len(),
                };
            }
        }
    }
    panic!("no entry {:?} in {dir_path}", String::from_utf8_lossy(name));
}

/// What a CLI run produced.
pub use crate::common::Run as CliRun;

/// Runs a child process with a time limit, killing it on timeout.
fn run_limited(mut cmd: Command, stdin: &[u8]) -> CliRun {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if let Some(mut si) = child.stdin.take() {
        let _ = si.write_all(stdin);
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => {
            let out = out.unwrap_or_else(|e| panic!("waiting for {shown}: {e}"));
            CliRun {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            // SAFETY: plain kill(2) of the child we spawned.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{shown}: still running after {LIMIT:?} (hang?); killed")
        }
    }
}

/// Runs the `f2fuse` binary.
pub fn f2fuse<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> CliRun {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_f2fuse"));
    cmd.args(args);
    run_limited(cmd, b"")
}

/// Asserts the CLI failed cleanly: non-zero exit, exactly one stderr line
/// starting with "f2fuse: ", no panic; returns that line.
pub fn assert_cli_fails(run: &CliRun, what: &str) -> String {
    assert!(
        !run.stderr.contains("panicked"),
        "{what}: the CLI panicked:\n{}",
        run.stderr
    );
    assert!(
        run.code.is_some_and(|c| c != 0),
        "{what}: expected a non-zero exit, got {:?}\nstdout: {}\nstderr: {}",
        run.code,
        run.stdout,
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("f2fuse: "),
        "{what}: expected exactly one stderr line starting with \"f2fuse: \", got:\n{}",
        run.stderr
    );
    lines[0].to_string()
}

pub fn assert_cli_ok(run: &CliRun, what: &str) {
    assert!(
        run.code == Some(0) && !run.stderr.contains("panicked"),
        "{what}: expected success, got {:?}\nstderr: {}",
        run.code,
        run.stderr
    );
}

/// What fsck.f2fs 1.15 makes of a damaged image.
#[derive(Debug, Clone, Copy)]
pub enum Fsck {
    /// It checks the damaged structure: `--dry-run` must exit non-zero.
    Flags,
    /// It reports the damage with a line containing this text, yet exits 0
    /// (in `--dry-run` some findings only print a "[FIX]" line).
    Reports(&'static str),
    /// It does not check (or silently tolerates) this damage; the reason is
    /// recorded and the outcome only printed.
    Ignores(&'static str),
}

/// `echo n | fsck.f2fs --dry-run img`, with the time limit.
pub fn fsck_dry_run(img: &Path) -> CliRun {
    let mut cmd = Command::new(find_tool("fsck.f2fs").expect("fsck.f2fs"));
    cmd.arg("--dry-run").arg(img);
    run_limited(cmd, b"n\n")
}

/// Runs [`fsck_dry_run`] and checks `expect`.
pub fn check_fsck(img: &Path, expect: Fsck, what: &str) {
    let run = fsck_dry_run(img);
    let flagged = run.code != Some(0);
    let summary: Vec<&str> = run
        .stdout
        .lines()
        .chain(run.stderr.lines())
        .filter(|l| {
            l.contains("[Fail]")
                || l.contains("[FAIL]")
                || l.contains("[ASSERT]")
                || l.contains("Invalid")
                || l.contains("Mismatch")
                || l.contains("Wrong")
                || l.contains("Can't")
                || l.contains("Error")
        })
        .take(4)
        .collect();
    eprintln!(
        "{what}: fsck.f2fs --dry-run exit {:?}; {}",
        run.code,
        summary.join(" | ")
    );
    match expect {
        Fsck::Flags => assert!(
            flagged,
            "{what}: fsck.f2fs --dry-run accepted the damaged image (exit 0):\n{}",
            run.stdout
        ),
        Fsck::Reports(text) => assert!(
            flagged || run.stdout.contains(text) || run.stderr.contains(text),
            "{what}: fsck.f2fs --dry-run did not report {text:?}:\n{}",
            run.stdout
        ),
        Fsck::Ignores(why) => eprintln!("{what}: fsck.f2fs not asserted: {why}"),
    }
    // Our own checker must agree wherever fsck.f2fs finds the damage.
    if !matches!(expect, Fsck::Ignores(_)) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_f2fuse"));
        cmd.arg("fsck").arg(img);
        let ours = run_limited(cmd, b"");
        assert!(
            ours.code != Some(0) && ours.code.is_some(),
            "{what}: f2fuse fsck accepted an image fsck.f2fs rejects (exit {:?}):\n{}{}",
            ours.code,
            ours.stdout,
            ours.stderr
        );
    }
}

/// Asserts `result` is `Error::Corrupt` of `structure` whose text contains
/// every one of `words`; returns the message.
#[track_caller]
pub fn expect_corrupt<T>(
    result: std::result::Result<T, Error>,
    structure: &str,
    words: &[&str],
    what: &str,
) -> String {
    match result {
        Err(Error::Corrupt(c)) => {
            let text = c.to_string();
            assert_eq!(
                c.structure, structure,
                "{what}: wrong structure in {text:?}"
            );
            for w in words {
                assert!(text.contains(w), "{what}: {text:?} does not mention {w:?}");
            }
            text
        }
        Err(other) => panic!("{what}: expected Error::Corrupt({structure}), got {other:?}"),
        Ok(_) => panic!("{what}: expected Error::Corrupt({structure}), got Ok"),
    }
}
