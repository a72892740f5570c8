//! An fsx-like tester through `f2fuse mount`: random read, write, truncate,
//! fallocate (mode 0), mmap read, mmap write (+ msync) and copy_file_range
//! on a few files, each file checked against an in-memory model after every
//! operation (its size and its whole contents), once through the page cache
//! and once with O_DIRECT. At the end the image is unmounted, must pass
//! fsck.f2fs, and after mounting it again every file must still match.
//!
//! Operations per mode: `F2FUSE_FSX_OPS` (default 2,500 in a debug build,
//! 50,000 in a release build: `cargo test --release --test fsx_mount`).
//! `F2FUSE_FSX_SEED` picks the random seed (printed on failure).
//!
//! Needs /dev/fuse and fusermount3 (Debian: fuse3); without them the test
//! prints a skip note, and fails under `CI=1`.

#[path = "../../engine/tests/support/mod.rs"]
mod support;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const FILES: usize = 3;
/// Largest file size the operations produce.
const MAX_LEN: u64 = 192 * 1024;
/// Largest single read/write/copy.
const MAX_OP: u64 = 40 * 1024;
const PAGE: u64 = 4096;

fn fuse_available() -> bool {
    let ok = Path::new("/dev/fuse").exists()
        && find_tool("fusermount3").is_some()
        && require_f2fs_tools();
    if !ok {
        let msg = "FUSE tests need /dev/fuse, fusermount3 (apt-get install fuse3) and f2fs-tools";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("SKIPPING test: {msg}");
    }
    ok
}

fn f2fuse(args: &[&OsStr]) {
    let out = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run f2fuse");
    assert!(
        out.status.success(),
        "f2fuse {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether some process has `img` open (like `fuser IMG`).
fn held(img: &Path) -> bool {
    let img = img.canonicalize().unwrap();
    fs::read_dir("/proc").unwrap().flatten().any(|p| {
        p.file_name().to_string_lossy().parse::<u32>().is_ok()
            && fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == img))
            })
    })
}

struct Mount {
    img: PathBuf,
    mnt: PathBuf,
    mounted: bool,
}

impl Mount {
    fn new(img: &Path, mnt: &Path) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        f2fuse(&[
            "mount".as_ref(),
            img.as_os_str(),
            mnt.as_os_str(),
            "-o".as_ref(),
            "default_permissions".as_ref(),
        ]);
        Mount {
            img: img.to_path_buf(),
            mnt: mnt.to_path_buf(),
            mounted: true,
        }
    }

    /// Unmounts and waits until the daemon has released the image.
    fn unmount(mut self) {
        self.release(false);
    }

    fn release(&mut self, lazy: bool) {
        let mut tries = 0;
        loop {
            let mut cmd = Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd.arg(&self.mnt).output().unwrap();
            if out.status.success() || lazy {
                break;
            }
            // Busy for a moment after the last close: retry.
            tries += 1;
            if tries == 600 {
                let users = Command::new("fuser").arg("-vm").arg(&self.mnt).output();
                panic!("fusermount3 -u: {out:?}\nusers of the mount: {users:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.mounted = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while held(&self.img) {
            assert!(Instant::now() < deadline, "image still held after unmount");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            self.release(true);
        }
    }
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// A page-aligned buffer (O_DIRECT wants aligned memory).
struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = Layout::from_size_align(len.max(1), PAGE as usize).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Aligned { ptr, layout }
    }

    fn slice(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.layout.size());
        // SAFETY: allocated with at least `len` bytes, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

struct Tester {
    direct: bool,
    rng: Rng,
    files: Vec<File>,
    /// Plain (page cache) descriptors for mmap.
    mapfds: Vec<File>,
    model: Vec<Vec<u8>>,
    log: VecDeque<String>,
    buf: Aligned,
    op: u64,
    counts: [u64; 7],
}

const OP_NAMES: [&str; 7] = [
    "read",
    "write",
    "truncate",
    "fallocate",
    "mapread",
    "mapwrite",
    "copy_range",
];

impl Tester {
    fn new(dir: &Path, direct: bool, seed: u64) -> Tester {
        let open = |direct: bool, i: usize| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(true);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(dir.join(format!("f{i}"))).unwrap()
        };
        Tester {
            direct,
            rng: Rng(seed | 1),
            files: (0..FILES).map(|i| open(direct, i)).collect(),
            mapfds: (0..FILES).map(|i| open(false, i)).collect(),
            model: vec![Vec::new(); FILES],
            log: VecDeque::new(),
            buf: Aligned::new((MAX_LEN + MAX_OP + PAGE) as usize),
            op: 0,
            counts: [0; 7],
        }
    }

    fn fail(&self, what: String) -> ! {
        let history: Vec<&String> = self.log.iter().collect();
        panic!(
            "fsx ({}) op {}: {what}\nlast operations (oldest first):\n{}",
            if self.direct { "O_DIRECT" } else { "buffered" },
            self.op,
            history
                .iter()
                .map(|s| format!("  {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    fn note(&mut self, s: String) {
        if self.log.len() == 30 {
            self.log.pop_front();
        }
        self.log.push_back(format!("#{} {s}", self.op));
    }

    /// Offset and length of a read or write: page-aligned with O_DIRECT.
    fn range(&mut self, limit: u64) -> (u64, u64) {
        if self.direct {
            let off = self.rng.below(limit / PAGE) * PAGE;
            let len = (1 + self.rng.below(MAX_OP / PAGE)) * PAGE;
            (off, len)
        } else {
            let off = self.rng.below(limit);
            let len = 1 + self.rng.below(MAX_OP);
            (off, len)
        }
    }

    fn check_ok<T>(&self, what: &str, r: std::io::Result<T>) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e}")))
    }

    /// The file's size and whole contents must match the model.
    fn check(&mut self, i: usize) {
        let size = self.check_ok("fstat", self.files[i].metadata()).len();
        let want = self.model[i].len() as u64;
        if size != want {
            self.fail(format!("f{i}: size {size}, model {want}"));
        }
        let read_len = (want.div_ceil(PAGE) * PAGE + PAGE) as usize;
        let mut got = 0usize;
        loop {
            let buf = &mut self.buf.slice(read_len)[got..];
            let r = self.files[i].read_at(buf, got as u64);
            let n = r.unwrap_or_else(|e| self.fail(format!("f{i}: check read: {e}")));
            if n == 0 {
                break;
            }
            got += n;
        }
        if got as u64 != want {
            self.fail(format!("f{i}: read {got} bytes, model has {want}"));
        }
        let data = self.buf.slice(got).to_vec();
        if data != self.model[i] {
            let at = data
                .iter()
                .zip(&self.model[i])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.fail(format!(
                "f{i}: contents differ first at byte {at} (got {:#04x}, model {:#04x})",
                data[at], self.model[i][at]
            ));
        }
    }

    fn step(&mut self) {
        self.op += 1;
        let i = self.rng.below(FILES as u64) as usize;
        let kind = self.rng.below(7) as usize;
        self.counts[kind] += 1;
        let size = self.model[i].len() as u64;
        let fd = self.files[i].as_raw_fd();
        match kind {
            0 => {
                let (off, len) = self.range(MAX_LEN);
                self.note(format!("read f{i} {off}+{len}"));
                let mut data = vec![0u8; len as usize];
                let n = {
                    let buf = self.buf.slice(len as usize);
                    let n = self.files[i].read_at(buf, off);
                    let n = n.unwrap_or_else(|e| panic!("read: {e}"));
                    data[..n].copy_from_slice(&buf[..n]);
                    n
                };
                let end = (off + len).min(size);
                let want = if off < size {
                    &self.model[i][off as usize..end as usize]
                } else {
                    &[][..]
                };
                if &data[..n] != want {
                    self.fail(format!(
                        "f{i}: read {off}+{len} returned {n} bytes that differ from the model's {}",
                        want.len()
                    ));
                }
            }
            1 => {
                let (off, len) = self.range(MAX_LEN - MAX_OP);
                self.note(format!("write f{i} {off}+{len}"));
                let mut data = vec![0u8; len as usize];
                self.rng.fill(&mut data);
                self.buf.slice(len as usize).copy_from_slice(&data);
                let r = self.files[i].write_all_at(self.buf.slice(len as usize), off);
                self.check_ok("write", r);
                let m = &mut self.model[i];
                if m.len() < (off + len) as usize {
                    m.resize((off + len) as usize, 0);
                }
                m[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            2 => {
                let new = if self.rng.below(4) == 0 {
                    self.rng.below(MAX_LEN / PAGE) * PAGE
                } else {
                    self.rng.below(MAX_LEN)
                };
                self.note(format!("truncate f{i} {size} -> {new}"));
                let r = self.files[i].set_len(new);
                self.check_ok("ftruncate", r);
                self.model[i].resize(new as usize, 0);
            }
            3 => {
                let off = self.rng.below(MAX_LEN - MAX_OP);
                let len = 1 + self.rng.below(MAX_OP);
                self.note(format!("fallocate f{i} {off}+{len}"));
                // SAFETY: plain syscall on an open descriptor.
                let r = unsafe { libc::fallocate(fd, 0, off as i64, len as i64) };
                if r != 0 {
                    self.fail(format!("fallocate: {}", std::io::Error::last_os_error()));
                }
                let m = &mut self.model[i];
                if m.len() < (off + len) as usize {
                    m.resize((off + len) as usize, 0);
                }
            }
            4 => {
                if size == 0 {
                    self.note(format!("mapread f{i} (empty, skipped)"));
                    return;
                }
                let off = self.rng.below(size);
                let len = (1 + self.rng.below(MAX_OP)).min(size - off);
                self.note(format!("mapread f{i} {off}+{len}"));
                let data = self.map(i, off, len, None);
                if data[..] != self.model[i][off as usize..(off + len) as usize] {
                    self.fail(format!("f{i}: mapread {off}+{len} differs from the model"));
                }
            }
            5 => {
                let off = self.rng.below(MAX_LEN - MAX_OP);
                let len = 1 + self.rng.below(MAX_OP);
                self.note(format!("mapwrite f{i} {off}+{len} (size {size})"));
                if off + len > size {
                    let r = self.mapfds[i].set_len(off + len);
                    self.check_ok("ftruncate before mapwrite", r);
                    self.model[i].resize((off + len) as usize, 0);
                }
                let mut data = vec![0u8; len as usize];
                self.rng.fill(&mut data);
                self.map(i, off, len, Some(&data));
                self.model[i][off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            _ => {
                let j = (i + 1 + self.rng.below(FILES as u64 - 1) as usize) % FILES;
                let (src_off, len) = self.range(MAX_LEN);
                let (dst_off, _) = self.range(MAX_LEN - MAX_OP);
                self.note(format!(
                    "copy_range f{i} {src_off}+{len} -> f{j} @{dst_off}"
                ));
                let mut done = 0u64;
                while done < len {
                    let mut so = (src_off + done) as i64;
                    let mut dof = (dst_off + done) as i64;
                    // SAFETY: plain syscall on open descriptors.
                    let n = unsafe {
                        libc::copy_file_range(
                            fd,
                            &mut so,
                            self.files[j].as_raw_fd(),
                            &mut dof,
                            (len - done) as usize,
                            0,
                        )
                    };
                    if n < 0 {
                        self.fail(format!(
                            "copy_file_range: {}",
                            std::io::Error::last_os_error()
                        ));
                    }
                    if n == 0 {
                        break;
                    }
                    done += n as u64;
                }
                let want = len.min(size.saturating_sub(src_off));
                if done != want {
                    self.fail(format!(
                        "copy_file_range copied {done} bytes, expected {want}"
                    ));
                }
                if done > 0 {
                    let data = self.model[i][src_off as usize..(src_off + done) as usize].to_vec();
                    let m = &mut self.model[j];
                    if m.len() < (dst_off + done) as usize {
                        m.resize((dst_off + done) as usize, 0);
                    }
                    m[dst_off as usize..(dst_off + done) as usize].copy_from_slice(&data);
                }
                self.check(j);
            }
        }
        self.check(i);
    }

    /// Maps [off, off + len) of file `i` shared; reads it, or writes `data`
    /// into it and msyncs.
    fn map(&self, i: usize, off: u64, len: u64, data: Option<&[u8]>) -> Vec<u8> {
        let start = off / PAGE * PAGE;
        let map_len = (off + len - start) as usize;
        let prot = if data.is_some() {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: the range lies inside the file (size checked by the
        // caller); the mapping is unmapped before returning.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                prot,
                libc::MAP_SHARED,
                self.mapfds[i].as_raw_fd(),
                start as i64,
            );
            if p == libc::MAP_FAILED {
                self.fail(format!("mmap: {}", std::io::Error::last_os_error()));
            }
            let at = (p as *mut u8).add((off - start) as usize);
            let out = match data {
                Some(d) => {
                    std::ptr::copy_nonoverlapping(d.as_ptr(), at, d.len());
                    if libc::msync(p, map_len, libc::MS_SYNC) != 0 {
                        self.fail(format!("msync: {}", std::io::Error::last_os_error()));
                    }
                    Vec::new()
                }
                None => std::slice::from_raw_parts(at, len as usize).to_vec(),
            };
            libc::munmap(p, map_len);
            out
        }
    }
}

fn ops_per_mode() -> u64 {
    match std::env::var("F2FUSE_FSX_OPS") {
        Ok(v) => v.parse().expect("F2FUSE_FSX_OPS: a number"),
        Err(_) if cfg!(debug_assertions) => 2_500,
        Err(_) => 50_000,
    }
}

#[test]
fn fsx_buffered_and_direct_through_mount() {
    if !fuse_available() {
        return;
    }
    let seed: u64 = std::env::var("F2FUSE_FSX_SEED")
        .map(|s| s.parse().expect("F2FUSE_FSX_SEED: a number"))
        .unwrap_or(0x5eed_f2f5);
    let ops = ops_per_mode();
    let scratch = Scratch::new("fsx");
    let img = scratch.join("img");
    let mnt = scratch.join("mnt");
    f2fuse(&[
        "mkfs".as_ref(),
        img.as_os_str(),
        "--size".as_ref(),
        "256M".as_ref(),
        "-q".as_ref(),
    ]);
    let mount = Mount::new(&img, &mnt);
    let mut models = Vec::new();
    for (m, direct) in [false, true].into_iter().enumerate() {
        let dir = mnt.join(if direct { "direct" } else { "buffered" });
        fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let mut tester = Tester::new(&dir, direct, seed.wrapping_add(m as u64));
        for _ in 0..ops {
            tester.step();
        }
        let counts: Vec<String> = OP_NAMES
            .iter()
            .zip(tester.counts)
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        eprintln!(
            "fsx {}: {ops} operations in {:?} (seed {seed}; {})",
            if direct { "O_DIRECT" } else { "buffered" },
            t.elapsed(),
            counts.join(", ")
        );
        models.push((dir, tester.model.clone()));
    }
    mount.unmount();
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after fsx:\n{report}");
    }
    // Everything must still be there after a remount.
    let mount = Mount::new(&img, &mnt);
    for (dir, model) in &models {
        for (i, want) in model.iter().enumerate() {
            let got = fs::read(dir.join(format!("f{i}"))).unwrap();
            assert!(
                got == *want,
                "{}/f{i} differs from the model after remount",
                dir.display()
            );
        }
    }
    mount.unmount();
}

fn seek(file: &File, offset: u64, whence: i32) -> Result<u64, i32> {
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe { libc::lseek(file.as_raw_fd(), offset as i64, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r as u64)
    }
}

fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> Result<(), i32> {
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, len as i64) };
    if r != 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(())
    }
}

/// SEEK_DATA/SEEK_HOLE right after buffered writes that are still dirty in
/// the kernel's page cache (the mount uses the writeback cache): the
/// answers must already cover them.
#[test]
fn seek_data_and_hole_see_buffered_writes() {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("fsx-seek");
    let img = scratch.join("img");
    let mnt = scratch.join("mnt");
    f2fuse(&[
        "mkfs".as_ref(),
        img.as_os_str(),
        "--size".as_ref(),
        "64M".as_ref(),
        "-q".as_ref(),
    ]);
    let mount = Mount::new(&img, &mnt);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(mnt.join("sparse"))
        .unwrap();
    const MIB: u64 = 1 << 20;
    file.write_all_at(&[7u8; PAGE as usize], 0).unwrap();
    file.write_all_at(&[8u8; PAGE as usize], MIB).unwrap();
    file.write_all_at(&[9u8; 100], 3 * MIB).unwrap();
    let eof = 3 * MIB + 100;
    assert_eq!(seek(&file, 0, libc::SEEK_HOLE), Ok(PAGE));
    assert_eq!(seek(&file, PAGE, libc::SEEK_DATA), Ok(MIB));
    assert_eq!(seek(&file, MIB + 10, libc::SEEK_DATA), Ok(MIB + 10));
    assert_eq!(seek(&file, MIB, libc::SEEK_HOLE), Ok(MIB + PAGE));
    assert_eq!(seek(&file, MIB + PAGE, libc::SEEK_DATA), Ok(3 * MIB));
    assert_eq!(seek(&file, 3 * MIB, libc::SEEK_HOLE), Ok(eof));
    assert_eq!(seek(&file, eof, libc::SEEK_DATA), Err(libc::ENXIO));
    // Another dirty page in the first hole, then a punched one in the data.
    file.write_all_at(&[5u8; 10], 2 * PAGE + 3).unwrap();
    assert_eq!(seek(&file, PAGE, libc::SEEK_DATA), Ok(2 * PAGE));
    assert_eq!(seek(&file, 2 * PAGE, libc::SEEK_HOLE), Ok(3 * PAGE));
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fallocate(&file, punch, 0, PAGE).unwrap();
    assert_eq!(seek(&file, 0, libc::SEEK_DATA), Ok(2 * PAGE));
    // Preallocated blocks read as zeros and are neither data nor hole for
    // f2fs: SEEK_DATA skips them, SEEK_HOLE does not stop in them.
    fallocate(&file, libc::FALLOC_FL_KEEP_SIZE, 2 * MIB, 4 * PAGE).unwrap();
    assert_eq!(seek(&file, 2 * MIB, libc::SEEK_DATA), Ok(3 * MIB));
    assert_eq!(
        seek(&file, 2 * MIB, libc::SEEK_HOLE),
        Ok(2 * MIB + 4 * PAGE)
    );
    assert_eq!(file.metadata().unwrap().len(), eof);
    drop(file);
    mount.unmount();
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after the seek test:\n{report}");
    }
}
