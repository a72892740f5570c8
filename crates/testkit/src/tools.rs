//! Wrappers around the f2fs-tools 1.15 binaries.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::scratch::Scratch;
use super::tree::{generate_edge_tree, TreeOptions};

/// Directories searched after `$PATH` (the tools live in /usr/sbin, which a
/// non-login or non-root `$PATH` often lacks).
const EXTRA_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/local/sbin"];

/// Full path of an executable named `name`, if any.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// True if `name` is installed. If not: panics when `CI` is set (so CI
/// cannot silently skip), else prints a skip note and returns false.
pub fn require_tool(name: &str) -> bool {
    if find_tool(name).is_some() {
        return true;
    }
    missing(&format!(
        "{name} not found (looked in $PATH and {EXTRA_DIRS:?}); install f2fs-tools \
         (Debian/Ubuntu: apt-get install f2fs-tools; version 1.15 expected)"
    ))
}

/// A requirement is not met: panics when `CI` is set (so CI cannot
/// silently skip), else prints a skip note; false.
fn missing(msg: &str) -> bool {
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPING test: {msg}");
    false
}

/// The interpreter [`codecs_script`] runs with.
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// `codecs.py` of this crate: LZ4, zstd and LZO clusters encoded and
/// decoded by Debian's Python bindings of liblz4, libzstd and liblzo2 (run
/// it with [`SYSTEM_PYTHON`]; its header says the record format).
pub fn codecs_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("codecs.py")
}

/// True if [`SYSTEM_PYTHON`] has Debian's python3-lz4, python3-lzo and
/// python3-zstandard (the independent codecs of [`codecs_script`]);
/// else as [`require_tool`].
pub fn require_python_codecs() -> bool {
    let imports = Command::new(SYSTEM_PYTHON)
        .args(["-c", "import lz4.block, lzo, zstandard"])
        .output();
    imports.is_ok_and(|o| o.status.success())
        || missing(&format!(
            "{SYSTEM_PYTHON} cannot import lz4.block, lzo and zstandard; \
             install python3-lz4 python3-lzo python3-zstandard"
        ))
}

/// [`require_tool`] for mkfs.f2fs, sload.f2fs and fsck.f2fs.
pub fn require_f2fs_tools() -> bool {
    // Evaluate all so every missing tool is reported.
    let found = ["mkfs.f2fs", "sload.f2fs", "fsck.f2fs"].map(require_tool);
    found.iter().all(|&f| f)
}

/// Whether something is mounted exactly at `dir` (from /proc/self/mountinfo).
pub fn is_mounted(dir: &Path) -> bool {
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir))
}

/// Processes with `img` open (like `fuser IMG`).
pub fn holders(img: &Path) -> Vec<u32> {
    let img = img.canonicalize().unwrap();
    let mut pids = Vec::new();
    for proc_entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == img))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (up to 60 s) until no process has `img` open: an unmount returns
/// before the daemon has written its last checkpoint and closed the image.
pub fn wait_released(img: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !holders(img).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} still held by {:?} 60 s after unmount",
            img.display(),
            holders(img)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True if FUSE mounts can be made here (for the mount tests); else a skip
/// note (a panic under CI).
pub fn fuse_available() -> bool {
    let ok = std::path::Path::new("/dev/fuse").exists()
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

/// The path of f2fs-tools' `name`; panics when it is not installed.
pub(crate) fn tool(name: &str) -> PathBuf {
    find_tool(name).unwrap_or_else(|| {
        panic!("{name} not found; install f2fs-tools (call require_tool first to skip)")
    })
}

/// Runs `cmd` with `stdin` fed in, collecting stdout and stderr.
pub(crate) fn run(mut cmd: Command, stdin: &[u8]) -> Output {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if let Some(mut si) = child.stdin.take() {
        // The tool may exit without reading; a broken pipe is fine.
        let _ = si.write_all(stdin);
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {shown}: {e}"))
}

/// stdout followed by stderr, lossily decoded.
fn text(out: &Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.is_empty() {
        s.push_str("\n--- stderr ---\n");
        s.push_str(&err);
    }
    s
}

/// Creates (or truncates) `img` as a sparse file of `size_bytes` and runs
/// `mkfs.f2fs -f -t 0 <extra_args> img`. Panics on failure.
pub fn mkfs_f2fs(img: &Path, size_bytes: u64, extra_args: &[&str]) {
    let f = fs::File::create(img).unwrap_or_else(|e| panic!("create {}: {e}", img.display()));
    f.set_len(size_bytes)
        .unwrap_or_else(|e| panic!("set_len {}: {e}", img.display()));
    drop(f);
    let mut cmd = Command::new(tool("mkfs.f2fs"));
    cmd.args(["-f", "-t", "0"]).args(extra_args).arg(img);
    let out = run(cmd, b"");
    if !out.status.success() {
        panic!("mkfs.f2fs failed ({}):\n{}", out.status, text(&out));
    }
}

/// What [`sload_f2fs`] saw.
#[derive(Clone, Debug, Default)]
pub struct SloadOutcome {
    /// stdout + stderr.
    pub output: String,
    /// sload.f2fs 1.15 ends with a built-in `fsck -f` pass; exit code 1
    /// means that pass repaired something. These are its `[ASSERT]` lines
    /// (known case: symlinks with 3488..=3687-byte targets get a data block
    /// but i_blocks = 1).
    pub repaired: Vec<String>,
}

/// Runs `sload.f2fs -P -f src img` on a formatted image. `-P` keeps
/// uid/gid (without it everything is 0:0); modes (incl. suid/sgid/sticky)
/// and mtime seconds are always copied. `-T` must NOT be used: it replaces
/// every mtime with one fixed value.
///
/// Exit code 0 is success; 1 means sload's own final fsck pass repaired the
/// image (a warning is printed and the repairs are returned; check the image
/// with [`fsck_f2fs`]); anything else panics.
pub fn sload_f2fs(img: &Path, src: &Path) -> SloadOutcome {
    let mut cmd = Command::new(tool("sload.f2fs"));
    cmd.arg("-P").arg("-f").arg(src).arg(img);
    let out = run(cmd, b"");
    let output = text(&out);
    match out.status.code() {
        Some(0) => SloadOutcome {
            output,
            repaired: Vec::new(),
        },
        Some(1) => {
            let repaired: Vec<String> = output
                .lines()
                .filter(|l| l.contains("[ASSERT]"))
                .map(str::to_string)
                .collect();
            eprintln!(
                "warning: sload.f2fs exit code 1: its final fsck pass repaired {}:\n  {}",
                img.display(),
                repaired.join("\n  ")
            );
            SloadOutcome { output, repaired }
        }
        _ => panic!("sload.f2fs failed ({}):\n{output}", out.status),
    }
}

/// `fsck.f2fs --dry-run img` with "n\n" on stdin (answers any prompt). Ok
/// iff the exit code is 0 and no output line contains `[Fail]`/`[FAIL]`;
/// the Err carries the exit status and the full output.
pub fn fsck_f2fs(img: &Path) -> Result<(), String> {
    let mut cmd = Command::new(tool("fsck.f2fs"));
    cmd.arg("--dry-run").arg(img);
    let out = run(cmd, b"n\n");
    let t = text(&out);
    // A wrong dentry hash is only a "[FIX]" note in a dry run (exit 0),
    // but it is always a bug of ours: fail on it too.
    let failed_lines = t
        .lines()
        .any(|l| l.contains("[Fail]") || l.contains("[FAIL]") || l.contains("Mismatch hash_code"));
    if out.status.success() && !failed_lines {
        our_fsck(img)
    } else {
        Err(format!(
            "fsck.f2fs --dry-run {} => {}\n{t}",
            img.display(),
            out.status
        ))
    }
}

/// Our own checker (`f2fuse_engine::fsck`) on the same image: it must agree
/// with fsck.f2fs that the image is clean.
pub fn our_fsck(img: &Path) -> Result<(), String> {
    let fs = f2fuse_engine::Fs::open_path(img, f2fuse_engine::OpenOptions::default())
        .map_err(|e| format!("f2fuse fsck cannot open {}: {e}", img.display()))?;
    let report = f2fuse_engine::internals::fsck::check(&fs)
        .map_err(|e| format!("f2fuse fsck {}: {e}", img.display()))?;
    if report.is_clean() {
        Ok(())
    } else {
        Err(format!(
            "f2fuse fsck {} (fsck.f2fs is clean):\n{}",
            img.display(),
            report.problems.join("\n")
        ))
    }
}

/// `fsck.f2fs --dry-run -t img` output: the directory tree with inode
/// numbers (handy to check what an image holds without mounting it).
pub fn fsck_f2fs_tree(img: &Path) -> String {
    let mut cmd = Command::new(tool("fsck.f2fs"));
    cmd.arg("--dry-run").arg("-t").arg(img);
    text(&run(cmd, b"n\n"))
}

/// `dump.f2fs -i <ino> img` output (inode fields; the "dump into
/// ./lost_found?" prompt is answered "n").
pub fn dump_f2fs_inode(img: &Path, ino: u32) -> String {
    let mut cmd = Command::new(tool("dump.f2fs"));
    cmd.arg("-i").arg(format!("{ino:#x}")).arg(img);
    text(&run(cmd, b"n\n"))
}

/// `dump.f2fs -b <blkaddr> img` output: the owner of a main-area block
/// (file name, inode, data offset) as f2fs-tools find it through the SSA.
pub fn dump_f2fs_block(img: &Path, blkaddr: u32) -> String {
    let mut cmd = Command::new(tool("dump.f2fs"));
    cmd.arg("-b").arg(blkaddr.to_string()).arg(img);
    text(&run(cmd, b"n\n"))
}

/// Image size that comfortably holds `src` after sload.f2fs (which stores
/// holes as zero blocks, so apparent sizes count): 1.2 x (data + one block
/// per inode and per 1018 data blocks) + 256 MiB, at least 512 MiB.
pub fn image_size_for_tree(src: &Path) -> u64 {
    fn walk(p: &Path, acc: &mut u64) {
        let md = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
        let blocks = md.size().div_ceil(4096);
        *acc += 4096 * (1 + blocks + blocks.div_ceil(1018));
        if md.is_dir() {
            for de in fs::read_dir(p).unwrap_or_else(|e| panic!("read_dir {}: {e}", p.display())) {
                walk(&de.expect("read_dir entry").path(), acc);
            }
        }
    }
    let mut need = 0;
    walk(src, &mut need);
    let size = (need + need / 5 + (256 << 20)).max(512 << 20);
    size.div_ceil(1 << 20) << 20
}

/// Generates the edge tree into `<scratch>/src`, formats
/// `<scratch>/f2fs.img` (sized by [`image_size_for_tree`]) and loads the
/// tree with [`sload_f2fs`]. Returns (image, source dir). Requires the tools
/// (check [`require_f2fs_tools`] first). With a tree that is not
/// [`TreeOptions::sload_compatible`], sload's own fsck pass repairs the
/// image (see [`SloadOutcome`]); the result is still consistent.
pub fn build_image_from_tree(scratch: &Scratch, opts: &TreeOptions) -> (PathBuf, PathBuf) {
    let src = scratch.join("src");
    let img = scratch.join("f2fs.img");
    generate_edge_tree(&src, opts);
    mkfs_f2fs(&img, image_size_for_tree(&src), &[]);
    sload_f2fs(&img, &src);
    (img, src)
}
