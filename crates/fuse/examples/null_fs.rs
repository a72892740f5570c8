//! A FUSE file system that stores nothing: the limit the benchmarks hold
//! f2fuse against. It negotiates FUSE as the f2fuse daemon does (the same
//! request size, background requests, write-back cache, readdirplus,
//! request threads and readahead window), keeps a tree of directories and
//! files that are only sizes (in memory, 1 s entry and attribute timeouts),
//! reads zeros and drops written bytes. What f2fuse costs beyond it is the
//! file system's own work; what it costs beyond a local file system is
//! FUSE. `cp -r TREE MOUNTPOINT` makes a tree whose listing and reading
//! cost only FUSE (the small-file benchmark, bench/smallfiles.sh); mkdir,
//! fallocate and rm -r are enough for bench/run-workloads.sh.
//!
//! `cargo run --release -p f2fuse-fuse --example null_fs -- MOUNTPOINT
//! [--threads N] [--no-writeback-cache] [--read-ahead-kb KIB]`; runs in the
//! foreground until unmounted (`fusermount3 -u MOUNTPOINT`).

use f2fuse_fuse::{
    request_io_options, set_read_ahead_of, MountConfig, MAX_WRITE, NAMESPACE_OPTIONS,
};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, Session, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);
/// Zeros served by reads, as large as the largest read request.
static ZEROS: [u8; MAX_WRITE as usize] = [0; MAX_WRITE as usize];

/// A file or directory: only its kind and size.
struct Node {
    kind: FileType,
    size: u64,
}

/// The tree: nodes by inode number and each directory's names.
struct Tree {
    nodes: HashMap<u64, Node>,
    entries: HashMap<u64, BTreeMap<OsString, u64>>,
    next_ino: u64,
}

impl Default for Tree {
    fn default() -> Self {
        let root = Node {
            kind: FileType::Directory,
            size: 0,
        };
        Tree {
            nodes: HashMap::from([(ROOT, root)]),
            entries: HashMap::from([(ROOT, BTreeMap::new())]),
            next_ino: ROOT,
        }
    }
}

impl Tree {
    fn attr_of(&self, ino: u64) -> Option<FileAttr> {
        self.nodes.get(&ino).map(|node| attr(ino, node))
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> Option<FileAttr> {
        let ino = *self.entries.get(&parent)?.get(name)?;
        self.attr_of(ino)
    }

    /// Adds `name` to directory `parent`: its attributes, or the errno.
    fn add(&mut self, parent: u64, name: &OsStr, kind: FileType) -> Result<FileAttr, Errno> {
        self.next_ino += 1;
        let ino = self.next_ino;
        let names = self.entries.get_mut(&parent).ok_or(Errno::ENOTDIR)?;
        if names.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        names.insert(name.to_os_string(), ino);
        if kind == FileType::Directory {
            self.entries.insert(ino, BTreeMap::new());
        }
        let node = Node { kind, size: 0 };
        let attr = attr(ino, &node);
        self.nodes.insert(ino, node);
        Ok(attr)
    }

    /// Removes `name` from `parent` (a directory only if `dir` and empty).
    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let names = self.entries.get(&parent).ok_or(Errno::ENOTDIR)?;
        let ino = *names.get(name).ok_or(Errno::ENOENT)?;
        match self.entries.get(&ino) {
            Some(_) if !dir => return Err(Errno::EISDIR),
            Some(children) if !children.is_empty() => return Err(Errno::ENOTEMPTY),
            None if dir => return Err(Errno::ENOTDIR),
            _ => {}
        }
        self.entries.remove(&ino);
        self.nodes.remove(&ino);
        if let Some(names) = self.entries.get_mut(&parent) {
            names.remove(name);
        }
        Ok(())
    }

    /// The entries of `dir` from `offset` on ("." and ".." first; both
    /// name the directory itself: nothing here reads them).
    fn listing(&self, dir: u64, offset: u64) -> Option<Vec<(u64, FileType, OsString)>> {
        let names = self.entries.get(&dir)?;
        let dots = [".", ".."].map(|d| (dir, FileType::Directory, OsString::from(d)));
        let children = names.iter().filter_map(|(name, &ino)| {
            let kind = self.nodes.get(&ino)?.kind;
            Some((ino, kind, name.clone()))
        });
        Some(
            dots.into_iter()
                .chain(children)
                .skip(offset as usize)
                .collect(),
        )
    }
}

struct NullFs {
    tree: Mutex<Tree>,
    writeback_cache: bool,
}

fn attr(ino: u64, node: &Node) -> FileAttr {
    let (perm, nlink) = match node.kind {
        FileType::Directory => (0o777, 2),
        _ => (0o666, 1),
    };
    FileAttr {
        ino: INodeNo(ino),
        size: node.size,
        blocks: node.size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: node.kind,
        perm,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl NullFs {
    fn attr_of(&self, ino: u64) -> Option<FileAttr> {
        self.tree.lock().attr_of(ino)
    }

    fn reply_removed(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        match self.tree.lock().remove(parent.0, name, dir) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn set_size(&self, ino: u64, size: impl FnOnce(u64) -> u64) {
        if let Some(node) = self.tree.lock().nodes.get_mut(&ino) {
            node.size = size(node.size);
        }
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let want = request_io_options(config, self.writeback_cache) | NAMESPACE_OPTIONS;
        let _ = config.add_capabilities(want & config.capabilities());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.tree.lock().lookup(parent.0, name) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size {
            self.set_size(ino.0, |_| size);
        }
        self.getattr(_req, ino, None, reply)
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.tree.lock().add(parent.0, name, FileType::Directory) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.tree.lock().add(parent.0, name, FileType::RegularFile) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_removed(parent, name, false, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_removed(parent, name, true, reply);
    }

    /// Plain allocation only grows the size (the benchmarks' files are
    /// fallocated first); nothing is stored either way.
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode == 0 {
            self.set_size(ino.0, |size| size.max(offset + length));
        }
        reply.ok();
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file_size = self.attr_of(ino.0).map_or(0, |a| a.size);
        let n = file_size.saturating_sub(offset).min(size as u64) as usize;
        reply.data(&ZEROS[..n.min(ZEROS.len())]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.set_size(ino.0, |size| size.max(offset + data.len() as u64));
        reply.written(data.len() as u32);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.tree.lock().listing(ino.0, offset) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (child, kind, name)) in list.iter().enumerate() {
            if reply.add(INodeNo(*child), offset + i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let tree = self.tree.lock();
        let Some(list) = tree.listing(ino.0, offset) else {
            return reply.error(Errno::ENOTDIR);
        };
        for (i, (child, _, name)) in list.iter().enumerate() {
            let Some(a) = tree.attr_of(*child) else {
                continue;
            };
            if reply.add(
                INodeNo(*child),
                offset + i as u64 + 1,
                name,
                &TTL,
                &a,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 24, 1 << 24, 1 << 20, 1 << 20, 4096, 255, 4096);
    }
}

fn main() -> Result<(), String> {
    let usage =
        "usage: null_fs MOUNTPOINT [--threads N] [--no-writeback-cache] [--read-ahead-kb KIB]";
    let defaults = MountConfig::default();
    let (mut mountpoint, mut threads, mut writeback_cache, mut read_ahead_kb) = (
        None,
        defaults.threads,
        defaults.writeback_cache,
        defaults.read_ahead_kb,
    );
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |what: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what}: expected a number\n{usage}"))
        };
        match arg.as_str() {
            "--threads" => threads = number("--threads")?,
            "--read-ahead-kb" => read_ahead_kb = number("--read-ahead-kb")? as u32,
            "--no-writeback-cache" => writeback_cache = false,
            path if mountpoint.is_none() && !path.starts_with('-') => {
                mountpoint = Some(PathBuf::from(path))
            }
            other => return Err(format!("unexpected argument {other}\n{usage}")),
        }
    }
    let mountpoint = mountpoint.ok_or(usage)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("null".into()),
        MountOption::CUSTOM("subtype=null".into()),
    ];
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let fs = NullFs {
        tree: Mutex::default(),
        writeback_cache,
    };
    let session = Session::new(fs, &mountpoint, &config)
        .map_err(|e| format!("mounting on {}: {e}", mountpoint.display()))?;
    set_read_ahead_of(&mountpoint, read_ahead_kb);
    session.run().map_err(|e| e.to_string())
}
