//! A FUSE file system that stores nothing: the limit the benchmarks hold
//! f2fuse against. It negotiates FUSE as the f2fuse daemon does (the same
//! request size, background requests, write-back cache, request threads
//! and readahead window), keeps a tree of directories and files that are
//! only sizes (enough for bench/run-workloads.sh: mkdir -p, create,
//! fallocate, rm -r), reads zeros and drops written bytes. What f2fuse costs beyond it
//! is the file system's own work; what it costs beyond a local file system
//! is FUSE.
//!
//! `cargo run --release -p f2fuse-fuse --example null_fs -- MOUNTPOINT
//! [--threads N] [--no-writeback-cache] [--read-ahead-kb KIB]`; runs in the
//! foreground until unmounted (`fusermount3 -u MOUNTPOINT`).

use f2fuse_fuse::{request_io_options, set_read_ahead_of, MountConfig, MAX_WRITE};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, Session,
    TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);
/// Zeros served by reads, as large as the largest read request.
static ZEROS: [u8; MAX_WRITE as usize] = [0; MAX_WRITE as usize];

/// An inode: a directory, or a regular file of this size.
#[derive(Clone, Copy)]
enum Node {
    Dir,
    File(u64),
}

#[derive(Default)]
struct Files {
    /// (parent, name) -> inode number.
    by_name: HashMap<(u64, OsString), u64>,
    /// Every inode but the root.
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

impl Files {
    fn add(&mut self, parent: u64, name: &OsStr, node: Node) -> u64 {
        self.next_ino = self.next_ino.max(ROOT) + 1;
        let ino = self.next_ino;
        self.by_name.insert((parent, name.to_os_string()), ino);
        self.nodes.insert(ino, node);
        ino
    }

    fn node(&self, ino: u64) -> Option<Node> {
        if ino == ROOT {
            Some(Node::Dir)
        } else {
            self.nodes.get(&ino).copied()
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.node(ino), Some(Node::Dir))
    }

    fn size_mut(&mut self, ino: u64) -> Option<&mut u64> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(size)) => Some(size),
            _ => None,
        }
    }

    /// Removes the entry `name` of `parent` if `wanted_dir` says what it is
    /// (a directory only when empty).
    fn remove(&mut self, parent: u64, name: &OsStr, wanted_dir: bool) -> Result<(), Errno> {
        let key = (parent, name.to_os_string());
        let ino = *self.by_name.get(&key).ok_or(Errno::ENOENT)?;
        match (self.node(ino), wanted_dir) {
            (Some(Node::Dir), false) => return Err(Errno::EISDIR),
            (Some(Node::File(_)), true) => return Err(Errno::ENOTDIR),
            (Some(Node::Dir), true) if self.by_name.keys().any(|(p, _)| *p == ino) => {
                return Err(Errno::ENOTEMPTY)
            }
            _ => {}
        }
        self.by_name.remove(&key);
        self.nodes.remove(&ino);
        Ok(())
    }
}

struct NullFs {
    files: Mutex<Files>,
    writeback_cache: bool,
}

fn attr(ino: u64, node: Node) -> FileAttr {
    let (kind, perm, nlink, size) = match node {
        Node::Dir => (FileType::Directory, 0o777, 2, 0),
        Node::File(size) => (FileType::RegularFile, 0o666, 1, size),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
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
        self.files.lock().node(ino).map(|node| attr(ino, node))
    }

    fn reply_removed(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        match self.files.lock().remove(parent.0, name, dir) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn make(&self, parent: INodeNo, name: &OsStr, node: Node) -> Result<FileAttr, Errno> {
        let mut files = self.files.lock();
        if !files.is_dir(parent.0) {
            return Err(Errno::ENOENT);
        }
        if files.by_name.contains_key(&(parent.0, name.to_os_string())) {
            return Err(Errno::EEXIST);
        }
        Ok(attr(files.add(parent.0, name, node), node))
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let want = request_io_options(config, self.writeback_cache);
        let _ = config.add_capabilities(want & config.capabilities());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self
            .files
            .lock()
            .by_name
            .get(&(parent.0, name.to_os_string()))
            .copied();
        match found.and_then(|ino| self.attr_of(ino)) {
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
        if let (Some(size), Some(current)) = (size, self.files.lock().size_mut(ino.0)) {
            *current = size;
        }
        self.getattr(_req, ino, None, reply)
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
        match self.make(parent, name, Node::File(0)) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
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
        match self.make(parent, name, Node::Dir) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_removed(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_removed(parent, name, true, reply)
    }

    /// Preallocation only grows the size (no mode: without KEEP_SIZE).
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
        if let (0, Some(size)) = (mode, self.files.lock().size_mut(ino.0)) {
            *size = (*size).max(offset + length);
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
        let file_size = self.files.lock().size_mut(ino.0).map_or(0, |size| *size);
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
        if let Some(size) = self.files.lock().size_mut(ino.0) {
            *size = (*size).max(offset + data.len() as u64);
        }
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
        let files = self.files.lock();
        if !files.is_dir(ino.0) {
            return reply.error(Errno::ENOTDIR);
        }
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ino.0, FileType::Directory, OsStr::new("..")),
        ];
        // Offsets are positions in this listing: stable while nothing is
        // removed, which is all `rm -r` (read all, then remove) needs.
        let kind_of = |child: u64| match files.node(child) {
            Some(Node::Dir) => FileType::Directory,
            _ => FileType::RegularFile,
        };
        let mut children: Vec<(u64, &OsStr)> = files
            .by_name
            .iter()
            .filter(|((parent, _), _)| *parent == ino.0)
            .map(|((_, name), &child)| (child, name.as_os_str()))
            .collect();
        children.sort_unstable();
        let entries = dots.into_iter().chain(
            children
                .into_iter()
                .map(|(child, name)| (child, kind_of(child), name)),
        );
        for (i, (ino, kind, name)) in entries.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
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
        files: Mutex::default(),
        writeback_cache,
    };
    let session = Session::new(fs, &mountpoint, &config)
        .map_err(|e| format!("mounting on {}: {e}", mountpoint.display()))?;
    set_read_ahead_of(&mountpoint, read_ahead_kb);
    session.run().map_err(|e| e.to_string())
}
