//! `extract`: copy a whole image tree to the host, keeping metadata.

use crate::inspect::open;
use clap::Args;
use f2fuse_engine::{FileKind, Fs, InodeInfo};
use f2fuse_layout::F2FS_ROOT_INO;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ExtractArgs {
    pub image: PathBuf,
    /// Destination directory (created if missing; must be empty if it exists).
    pub dir: PathBuf,
    /// Path inside the image to extract (default: the whole tree).
    #[arg(long, default_value = "/")]
    pub from: String,
    /// Do not set owners (default: set them when running as root).
    #[arg(long)]
    pub no_owner: bool,
    /// No progress bar or warnings summary.
    #[arg(short, long)]
    pub quiet: bool,
}

struct Extractor<'a> {
    fs: &'a Fs,
    set_owner: bool,
    /// First host path of each multiply-linked inode, to recreate hard links.
    linked: HashMap<u32, PathBuf>,
    visited_dirs: HashSet<u32>,
    /// Directories whose metadata is set after their children, by inode
    /// number: read again then, not kept (an inode holds its 4 KiB block).
    finish_dirs: Vec<(PathBuf, u32)>,
    warnings: Vec<String>,
    /// Entries that could not be read from the image: skipped.
    unreadable: Vec<String>,
    progress: ProgressBar,
    files: u64,
    bytes: u64,
}

pub fn run(args: &ExtractArgs) -> Result<(), String> {
    let fs = open(&args.image)?;
    let root = fs.resolve(&args.from).map_err(|e| e.to_string())?;
    if root.kind != FileKind::Directory {
        return Err(format!(
            "{}: not a directory (use get for one file)",
            args.from
        ));
    }
    if args.dir.exists() {
        let mut entries =
            fs::read_dir(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
        if entries.next().is_some() {
            return Err(format!(
                "{}: destination exists and is not empty",
                args.dir.display()
            ));
        }
    } else {
        fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    }
    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("static template"),
        );
        bar
    };
    let mut ex = Extractor {
        fs: &fs,
        set_owner: !args.no_owner && unsafe { libc::geteuid() } == 0,
        linked: HashMap::new(),
        visited_dirs: HashSet::new(),
        finish_dirs: Vec::new(),
        warnings: Vec::new(),
        unreadable: Vec::new(),
        progress,
        files: 0,
        bytes: 0,
    };
    ex.extract_dir(&root, &args.dir)?;
    // Children first, so setting a directory's mtime is not undone by writing into it.
    for (path, ino) in std::mem::take(&mut ex.finish_dirs).into_iter().rev() {
        match fs.inode(ino) {
            Ok(inode) => ex.apply_metadata(&path, &inode),
            Err(e) => ex
                .warnings
                .push(format!("{}: metadata: {e}", path.display())),
        }
    }
    ex.progress.finish_and_clear();
    if !args.quiet {
        eprintln!(
            "extracted {} entries, {} of file data",
            ex.files,
            crate::size::human(ex.bytes)
        );
        for w in ex.warnings.iter().take(20) {
            eprintln!("warning: {w}");
        }
        if ex.warnings.len() > 20 {
            eprintln!("warning: ... and {} more", ex.warnings.len() - 20);
        }
    }
    // Always, also with -q: these entries are missing from the copy.
    for problem in &ex.unreadable {
        eprintln!("error: {problem}");
    }
    match ex.unreadable.len() {
        0 => Ok(()),
        n => Err(format!(
            "{n} {} could not be read from the image and {} not extracted (listed above)",
            if n == 1 { "entry" } else { "entries" },
            if n == 1 { "was" } else { "were" }
        )),
    }
}

impl Extractor<'_> {
    fn extract_dir(&mut self, dir: &InodeInfo, host: &Path) -> Result<(), String> {
        if !self.visited_dirs.insert(dir.ino) {
            return Err(format!(
                "corrupt image: directory inode {} is reached twice (a directory cycle or hard-linked directory)",
                dir.ino
            ));
        }
        self.finish_dirs.push((host.to_path_buf(), dir.ino));
        let entries = match self.fs.read_dir(dir.ino) {
            Ok(entries) => entries,
            Err(e) => {
                self.unreadable.push(format!("{}: {e}", host.display()));
                return Ok(());
            }
        };
        for entry in entries {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            if entry.ino == F2FS_ROOT_INO {
                return Err(format!(
                    "corrupt image: directory inode {} lists the root directory as {:?}",
                    dir.ino,
                    String::from_utf8_lossy(&entry.name)
                ));
            }
            let path = host.join(OsStr::from_bytes(&entry.name));
            let inode = match self.fs.inode(entry.ino) {
                Ok(inode) => inode,
                Err(e) => {
                    self.unreadable.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            self.files += 1;
            self.progress.set_message(format!(
                "{} entries, {}",
                self.files,
                crate::size::human(self.bytes)
            ));
            self.progress.tick();
            if inode.kind != FileKind::Directory && inode.links > 1 {
                if let Some(first) = self.linked.get(&inode.ino) {
                    fs::hard_link(first, &path).map_err(|e| format!("{}: {e}", path.display()))?;
                    continue;
                }
            }
            match inode.kind {
                FileKind::Directory => {
                    fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                    self.extract_dir(&inode, &path)?;
                    continue;
                }
                FileKind::Regular => match write_file(self.fs, &inode, &path) {
                    Ok(()) => self.bytes += inode.size,
                    Err(CopyOutError::Image(e)) => {
                        self.unreadable.push(e);
                        continue;
                    }
                    Err(CopyOutError::Host(e)) => return Err(e),
                },
                FileKind::Symlink => {
                    let target = match self.fs.read_link(&inode) {
                        Ok(target) => target,
                        Err(e) => {
                            self.unreadable.push(format!("{}: {e}", path.display()));
                            continue;
                        }
                    };
                    symlink(OsStr::from_bytes(&target), &path)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
                FileKind::Fifo
                | FileKind::Socket
                | FileKind::CharDevice
                | FileKind::BlockDevice => {
                    self.make_special(&inode, &path);
                    if !path.exists() && fs::symlink_metadata(&path).is_err() {
                        continue;
                    }
                }
            }
            // Only once it exists: later links to it are made from it.
            if inode.links > 1 {
                self.linked.insert(inode.ino, path.clone());
            }
            self.apply_metadata(&path, &inode);
        }
        Ok(())
    }

    fn make_special(&mut self, inode: &InodeInfo, path: &Path) {
        let kind_bits = (inode.mode as libc::mode_t) & libc::S_IFMT;
        let dev = libc::makedev(inode.rdev.0, inode.rdev.1);
        let c = cstring(path);
        // SAFETY: c is a valid NUL-terminated path.
        let rc = unsafe { libc::mknod(c.as_ptr(), kind_bits | 0o600, dev) };
        if rc != 0 {
            self.warnings.push(format!(
                "{}: cannot create {:?}: {}",
                path.display(),
                inode.kind,
                std::io::Error::last_os_error()
            ));
        }
    }

    /// Owner, xattrs, mode and times, in an order where no step undoes an
    /// earlier one; failures become warnings (the host may not allow them).
    fn apply_metadata(&mut self, path: &Path, inode: &InodeInfo) {
        let c = cstring(path);
        if self.set_owner {
            // SAFETY: valid C string.
            if unsafe { libc::lchown(c.as_ptr(), inode.uid, inode.gid) } != 0 {
                self.warnings.push(format!(
                    "{}: chown: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
        // After chown, which drops security.capability.
        match self.fs.xattrs(inode) {
            Ok(xattrs) => {
                for (name, value) in xattrs {
                    let cname = CString::new(name.clone()).expect("xattr names have no NUL");
                    // SAFETY: valid C strings and a buffer of the given length.
                    let rc = unsafe {
                        libc::lsetxattr(
                            c.as_ptr(),
                            cname.as_ptr(),
                            value.as_ptr().cast(),
                            value.len(),
                            0,
                        )
                    };
                    if rc != 0 {
                        self.warnings.push(format!(
                            "{}: xattr {}: {}",
                            path.display(),
                            String::from_utf8_lossy(&name),
                            std::io::Error::last_os_error()
                        ));
                    }
                }
            }
            Err(e) => self
                .warnings
                .push(format!("{}: xattrs: {e}", path.display())),
        }
        if inode.kind != FileKind::Symlink {
            // After chown, which clears set-id bits.
            // SAFETY: valid C string.
            if unsafe { libc::chmod(c.as_ptr(), (inode.mode & 0o7777) as libc::mode_t) } != 0 {
                self.warnings.push(format!(
                    "{}: chmod: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
        let times = [
            libc::timespec {
                tv_sec: inode.atime.sec,
                tv_nsec: inode.atime.nsec as i64,
            },
            libc::timespec {
                tv_sec: inode.mtime.sec,
                tv_nsec: inode.mtime.nsec as i64,
            },
        ];
        // SAFETY: valid C string and a two-element timespec array.
        let rc = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            self.warnings.push(format!(
                "{}: times: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("paths from dentries have no NUL")
}

/// Why a file could not be copied out.
pub enum CopyOutError {
    /// Reading the image failed: the file is skipped.
    Image(String),
    /// Writing the host file failed (no space, no permission...).
    Host(String),
}

impl CopyOutError {
    pub fn into_message(self) -> String {
        match self {
            CopyOutError::Image(m) | CopyOutError::Host(m) => m,
        }
    }
}

/// Writes a regular file to `dest`, leaving holes where the image has
/// zeros. On any failure `dest` is removed: no partial copy is left
/// looking like the file.
pub fn write_file(fs: &Fs, inode: &InodeInfo, dest: &Path) -> Result<(), CopyOutError> {
    let host = |e: std::io::Error| CopyOutError::Host(format!("{}: {e}", dest.display()));
    let file = File::create(dest).map_err(host)?;
    let copied = (|| {
        let mut buf = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        loop {
            let n = fs.read(inode, offset, &mut buf).map_err(|e| {
                CopyOutError::Image(format!(
                    "{}: reading byte {offset} of {} from the image: {e}",
                    dest.display(),
                    inode.size
                ))
            })?;
            if n == 0 {
                break;
            }
            if buf[..n].iter().any(|&b| b != 0) {
                file.write_all_at(&buf[..n], offset).map_err(host)?;
            }
            offset += n as u64;
        }
        file.set_len(inode.size).map_err(host)
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(dest);
    }
    copied
}
