//! An fsx-like tester through `f2fuse mount`: random read, write, truncate,
//! fallocate (preallocation with and without KEEP_SIZE, punch hole, zero
//! range with and without KEEP_SIZE, collapse and insert range, which the
//! kernel's FUSE refuses with EOPNOTSUPP), mmap read, mmap write (+ msync),
//! copy_file_range and lseek SEEK_DATA/SEEK_HOLE on a few files, each file
//! checked against an in-memory model after every operation (its size and
//! its whole contents; lseek answers exactly, as the model tracks which
//! blocks are holes, reserved or data), once through the page cache and
//! once with O_DIRECT. At the end the image is unmounted, must pass
//! fsck.f2fs, and after mounting it again every file must still match.
//!
//! Operations per mode: `F2FUSE_FSX_OPS` (default 2,500 in a debug build,
//! 50,000 in a release build: `cargo test --release --test cli fsx_mount::`).
//! `F2FUSE_FSX_SEED` picks the random seed (printed on failure). A failing
//! sequence prints its last operations as `FsxOp`s: shrink it and keep it as
//! a named test calling `replay` at the bottom of this file.
//!
//! Needs /dev/fuse and fusermount3 (Debian: fuse3); without them the test
//! prints a skip note, and fails under `CI=1`.

use f2fuse_testkit as support;

use crate::common::ok_output as f2fuse;
use f2fuse_engine::{FallocMode, SeekTarget};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const FILES: usize = 3;
/// Largest file size the operations produce.
const MAX_LEN: u64 = 192 * 1024;
/// Largest single read/write/copy.
const MAX_OP: u64 = 40 * 1024;
const PAGE: u64 = 4096;

struct Mount {
    img: PathBuf,
    mnt: PathBuf,
    mounted: bool,
}

impl Mount {
    /// The model follows the kernel's f2fs block by block (SEEK_DATA and
    /// SEEK_HOLE around reservations), so writes do not zero out the
    /// reserved blocks around them (`extent_zeroout_len`, f2fuse's own).
    fn new(img: &Path, mnt: &Path) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        f2fuse(&[
            "mount".as_ref(),
            img.as_os_str(),
            mnt.as_os_str(),
            "-o".as_ref(),
            "default_permissions,extent_zeroout_len=0".as_ref(),
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
        wait_released(&self.img);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            self.release(true);
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

/// One fsx operation on file `f` (an index), recorded so a failing
/// sequence can be replayed as a named regression test.
#[derive(Debug, Clone, Copy)]
enum FsxOp {
    Read {
        f: usize,
        off: u64,
        len: u64,
    },
    /// Writes bytes generated from `seed`.
    Write {
        f: usize,
        off: u64,
        len: u64,
        seed: u64,
    },
    Truncate {
        f: usize,
        size: u64,
    },
    /// fallocate(2) with raw mode flags.
    Falloc {
        f: usize,
        flags: i32,
        off: u64,
        len: u64,
    },
    MapRead {
        f: usize,
        off: u64,
        len: u64,
    },
    MapWrite {
        f: usize,
        off: u64,
        len: u64,
        seed: u64,
    },
    Copy {
        src: usize,
        src_off: u64,
        len: u64,
        dst: usize,
        dst_off: u64,
    },
    /// lseek(2) with SEEK_DATA or SEEK_HOLE.
    Seek {
        f: usize,
        off: u64,
        whence: i32,
    },
}

const OP_NAMES: [&str; 13] = [
    "read",
    "write",
    "truncate",
    "fallocate",
    "fallocate keep_size",
    "punch_hole",
    "zero_range",
    "zero_range keep_size",
    "collapse/insert",
    "mapread",
    "mapwrite",
    "copy_range",
    "seek",
];

impl FsxOp {
    /// Index into `OP_NAMES`.
    fn kind(&self) -> usize {
        match *self {
            FsxOp::Read { .. } => 0,
            FsxOp::Write { .. } => 1,
            FsxOp::Truncate { .. } => 2,
            FsxOp::Falloc { flags, .. } => {
                let keep = flags & libc::FALLOC_FL_KEEP_SIZE != 0;
                if flags & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                    5
                } else if flags & libc::FALLOC_FL_ZERO_RANGE != 0 {
                    6 + keep as usize
                } else if flags & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE)
                    != 0
                {
                    8
                } else {
                    3 + keep as usize
                }
            }
            FsxOp::MapRead { .. } => 9,
            FsxOp::MapWrite { .. } => 10,
            FsxOp::Copy { .. } => 11,
            FsxOp::Seek { .. } => 12,
        }
    }

    /// The file checked against the model afterwards.
    fn target(&self) -> usize {
        match *self {
            FsxOp::Copy { dst, .. } => dst,
            FsxOp::Read { f, .. }
            | FsxOp::Write { f, .. }
            | FsxOp::Truncate { f, .. }
            | FsxOp::Falloc { f, .. }
            | FsxOp::MapRead { f, .. }
            | FsxOp::MapWrite { f, .. }
            | FsxOp::Seek { f, .. } => f,
        }
    }
}

fn generated(seed: u64, len: u64) -> Vec<u8> {
    let mut data = vec![0u8; len as usize];
    Rng(seed | 1).fill(&mut data);
    data
}

fn errno_of(r: libc::c_long) -> Result<u64, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r as u64)
    }
}

/// What FUSE passes to the daemon: the kernel refuses collapse and insert
/// range itself (fuse_file_fallocate), so those never reach the engine.
fn expected_falloc(model: &mut FileModel, flags: i32, off: u64, len: u64) -> Result<(), i32> {
    if flags & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mode = FallocMode::from_flags(flags).map_err(|e| e.to_errno())?;
    model.fallocate(off, len, mode)
}

struct Tester {
    direct: bool,
    rng: Rng,
    files: Vec<File>,
    /// Plain (page cache) descriptors for mmap.
    mapfds: Vec<File>,
    model: Vec<FileModel>,
    log: VecDeque<String>,
    buf: Aligned,
    op: u64,
    counts: [u64; OP_NAMES.len()],
}

impl Tester {
    fn new(dir: &Path, direct: bool, seed: u64) -> Tester {
        let open = |direct: bool, i: usize| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(true).truncate(false);
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
            model: vec![FileModel::default(); FILES],
            log: VecDeque::new(),
            buf: Aligned::new((MAX_LEN + 2 * MAX_OP + PAGE) as usize),
            op: 0,
            counts: [0; OP_NAMES.len()],
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

    /// A page-aligned range half of the time, else any.
    fn falloc_range(&mut self) -> (u64, u64) {
        let off = self.rng.below(MAX_LEN - MAX_OP);
        let len = 1 + self.rng.below(MAX_OP);
        if self.rng.below(2) == 0 {
            (off / PAGE * PAGE, len.div_ceil(PAGE) * PAGE)
        } else {
            (off, len)
        }
    }

    fn check_ok<T>(&self, what: &str, r: std::io::Result<T>) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e}")))
    }

    /// The file's size and whole contents must match the model.
    fn check(&mut self, i: usize) {
        let size = self.check_ok("fstat", self.files[i].metadata()).len();
        let want = self.model[i].size();
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
        if data != self.model[i].bytes {
            let at = data
                .iter()
                .zip(&self.model[i].bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.fail(format!(
                "f{i}: contents differ first at byte {at} (got {:#04x}, model {:#04x})",
                data[at], self.model[i].bytes[at]
            ));
        }
    }

    /// A random operation on a random file.
    fn random_op(&mut self) -> FsxOp {
        let f = self.rng.below(FILES as u64) as usize;
        let size = self.model[f].size();
        let seed = self.rng.next();
        match self.rng.below(14) {
            0 => {
                let (off, len) = self.range(MAX_LEN);
                FsxOp::Read { f, off, len }
            }
            1 | 2 => {
                let (off, len) = self.range(MAX_LEN - MAX_OP);
                FsxOp::Write { f, off, len, seed }
            }
            3 => {
                let size = if self.rng.below(4) == 0 {
                    self.rng.below(MAX_LEN / PAGE) * PAGE
                } else {
                    self.rng.below(MAX_LEN)
                };
                FsxOp::Truncate { f, size }
            }
            4..=8 => {
                let keep = libc::FALLOC_FL_KEEP_SIZE;
                let flags = match self.rng.below(7) {
                    0 => 0,
                    1 => keep,
                    2 | 3 => libc::FALLOC_FL_PUNCH_HOLE | keep,
                    4 => libc::FALLOC_FL_ZERO_RANGE,
                    5 => libc::FALLOC_FL_ZERO_RANGE | keep,
                    _ if self.rng.below(2) == 0 => libc::FALLOC_FL_COLLAPSE_RANGE,
                    _ => libc::FALLOC_FL_INSERT_RANGE,
                };
                let (off, len) = self.falloc_range();
                FsxOp::Falloc { f, flags, off, len }
            }
            9 if size > 0 => {
                let off = self.rng.below(size);
                let len = (1 + self.rng.below(MAX_OP)).min(size - off);
                FsxOp::MapRead { f, off, len }
            }
            9 | 10 => {
                let off = self.rng.below(MAX_LEN - MAX_OP);
                let len = 1 + self.rng.below(MAX_OP);
                FsxOp::MapWrite { f, off, len, seed }
            }
            11 => {
                let dst = (f + 1 + self.rng.below(FILES as u64 - 1) as usize) % FILES;
                let (src_off, len) = self.range(MAX_LEN);
                let (dst_off, _) = self.range(MAX_LEN - MAX_OP);
                FsxOp::Copy {
                    src: f,
                    src_off,
                    len,
                    dst,
                    dst_off,
                }
            }
            _ => FsxOp::Seek {
                f,
                off: self.rng.below(size + PAGE),
                whence: if self.rng.below(2) == 0 {
                    libc::SEEK_DATA
                } else {
                    libc::SEEK_HOLE
                },
            },
        }
    }

    fn step(&mut self) {
        let op = self.random_op();
        self.apply(op);
    }

    /// Runs one operation on the mount and on the model, then checks the
    /// file it changed (or read) against the model.
    fn apply(&mut self, op: FsxOp) {
        self.op += 1;
        self.counts[op.kind()] += 1;
        if self.log.len() == 30 {
            self.log.pop_front();
        }
        self.log.push_back(format!("#{} {op:?}", self.op));
        match op {
            FsxOp::Read { f, off, len } => {
                let size = self.model[f].size();
                let mut data = vec![0u8; len as usize];
                let n = {
                    let buf = self.buf.slice(len as usize);
                    let n = self.files[f].read_at(buf, off);
                    let n = n.unwrap_or_else(|e| panic!("read: {e}"));
                    data[..n].copy_from_slice(&buf[..n]);
                    n
                };
                let end = (off + len).min(size);
                let want = if off < size {
                    &self.model[f].bytes[off as usize..end as usize]
                } else {
                    &[][..]
                };
                if &data[..n] != want {
                    self.fail(format!(
                        "f{f}: read {off}+{len} returned {n} bytes that differ from the model's {}",
                        want.len()
                    ));
                }
            }
            FsxOp::Write { f, off, len, seed } => {
                let data = generated(seed, len);
                self.buf.slice(len as usize).copy_from_slice(&data);
                let r = self.files[f].write_all_at(self.buf.slice(len as usize), off);
                self.check_ok("write", r);
                self.model[f].write(off, &data);
            }
            FsxOp::Truncate { f, size } => {
                let r = self.files[f].set_len(size);
                self.check_ok("ftruncate", r);
                self.model[f].truncate(size);
            }
            FsxOp::Falloc { f, flags, off, len } => {
                let fd = self.files[f].as_raw_fd();
                // SAFETY: plain syscall on an open descriptor.
                let r = unsafe { libc::fallocate(fd, flags, off as i64, len as i64) };
                let got = errno_of(r as libc::c_long).map(|_| ());
                let want = expected_falloc(&mut self.model[f], flags, off, len);
                if got != want {
                    self.fail(format!("fallocate: {got:?}, model {want:?}"));
                }
            }
            FsxOp::MapRead { f, off, len } => {
                let data = self.map(f, off, len, None);
                if data[..] != self.model[f].bytes[off as usize..(off + len) as usize] {
                    self.fail(format!("f{f}: mapread {off}+{len} differs from the model"));
                }
            }
            FsxOp::MapWrite { f, off, len, seed } => {
                if off + len > self.model[f].size() {
                    let r = self.mapfds[f].set_len(off + len);
                    self.check_ok("ftruncate before mapwrite", r);
                    self.model[f].truncate(off + len);
                }
                let data = generated(seed, len);
                self.map(f, off, len, Some(&data));
                self.model[f].write(off, &data);
            }
            FsxOp::Copy {
                src,
                src_off,
                len,
                dst,
                dst_off,
            } => {
                let mut done = 0u64;
                while done < len {
                    let mut so = (src_off + done) as i64;
                    let mut dof = (dst_off + done) as i64;
                    // SAFETY: plain syscall on open descriptors.
                    let n = unsafe {
                        libc::copy_file_range(
                            self.files[src].as_raw_fd(),
                            &mut so,
                            self.files[dst].as_raw_fd(),
                            &mut dof,
                            (len - done) as usize,
                            0,
                        )
                    };
                    match errno_of(n as libc::c_long) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) => self.fail(format!("copy_file_range: errno {e}")),
                    }
                }
                let want = len.min(self.model[src].size().saturating_sub(src_off));
                if done != want {
                    self.fail(format!(
                        "copy_file_range copied {done} bytes, expected {want}"
                    ));
                }
                if done > 0 {
                    let data =
                        self.model[src].bytes[src_off as usize..(src_off + done) as usize].to_vec();
                    self.model[dst].write(dst_off, &data);
                }
            }
            FsxOp::Seek { f, off, whence } => {
                // SAFETY: plain syscall on an open descriptor.
                let r = unsafe { libc::lseek(self.files[f].as_raw_fd(), off as i64, whence) };
                let got = errno_of(r as libc::c_long);
                let target = if whence == libc::SEEK_DATA {
                    SeekTarget::Data
                } else {
                    SeekTarget::Hole
                };
                let want = self.model[f].seek(off, target);
                if got != want {
                    self.fail(format!("f{f}: lseek: {got:?}, model {want:?}"));
                }
            }
        }
        self.check(op.target());
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
                got == want.bytes,
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

/// Replays `ops` on fresh files of a fresh mount (a shrunk fsx failure),
/// then unmounts and runs fsck.f2fs.
fn replay(direct: bool, ops: &[FsxOp]) {
    if !fuse_available() {
        return;
    }
    let scratch = Scratch::new("fsx-replay");
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
    let mut tester = Tester::new(&mnt, direct, 1);
    for &op in ops {
        tester.apply(op);
    }
    drop(tester);
    mount.unmount();
    if let Err(report) = fsck_f2fs(&img) {
        panic!("fsck.f2fs after the replay:\n{report}");
    }
}

/// Blocks preallocated past EOF come inside the file when it grows: they
/// read as zeros, are neither data nor hole to lseek, and writes through
/// the page cache, mmap and O_DIRECT into them allocate them.
#[test]
fn preallocated_blocks_inside_a_grown_file() {
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let data = libc::SEEK_DATA;
    let hole = libc::SEEK_HOLE;
    for direct in [false, true] {
        replay(
            direct,
            &[
                FsxOp::Write {
                    f: 0,
                    off: 0,
                    len: 2 * PAGE,
                    seed: 1,
                },
                FsxOp::Falloc {
                    f: 0,
                    flags: keep,
                    off: 4 * PAGE,
                    len: 8 * PAGE,
                },
                FsxOp::Truncate {
                    f: 0,
                    size: 16 * PAGE,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 2 * PAGE,
                    whence: hole,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 4 * PAGE,
                    whence: hole,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 2 * PAGE,
                    whence: data,
                },
                FsxOp::MapWrite {
                    f: 0,
                    off: 5 * PAGE + 9,
                    len: 100,
                    seed: 2,
                },
                FsxOp::Write {
                    f: 0,
                    off: 8 * PAGE,
                    len: PAGE,
                    seed: 3,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 2 * PAGE,
                    whence: data,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 6 * PAGE,
                    whence: data,
                },
                FsxOp::Falloc {
                    f: 0,
                    flags: libc::FALLOC_FL_ZERO_RANGE,
                    off: PAGE,
                    len: 5 * PAGE,
                },
                FsxOp::Seek {
                    f: 0,
                    off: 0,
                    whence: hole,
                },
                FsxOp::Falloc {
                    f: 0,
                    flags: libc::FALLOC_FL_COLLAPSE_RANGE,
                    off: PAGE,
                    len: PAGE,
                },
            ],
        );
    }
}
