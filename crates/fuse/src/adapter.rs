//! The FUSE operations, each mapped onto the engine's facade.
//!
//! Inode lifetime: the kernel holds a reference on every inode it was given
//! (lookup, create, mkdir, mknod, symlink, link and each readdirplus entry)
//! until it sends `forget`; each open file or directory is one more. The
//! adapter turns both into `Fs::open_inode`/`Fs::release`, so an inode
//! unlinked while the kernel still knows it stays (as an orphan) until the
//! last reference is gone, and its number cannot be reused meanwhile.

use crate::convert::{decode_dev, file_attr, timestamp, to_f2fs, to_fuse};
use crate::ioctl::{self, Command, Compression};
use crate::log;
use f2fuse_engine::RenameFlags as EngineRenameFlags;
use f2fuse_engine::{
    lists_xattr, sgid_depends_on_groups, wall_time, AclKind, AtimePolicy, DirEntryInfo, SetAttr,
    SetMode, TimeSet,
};
use f2fuse_engine::{
    Access, AsUser, Credentials, Error, ErrorKind, FallocMode, FileKind, Fs, InodeInfo, SeekTarget,
};
use f2fuse_layout::{inode_flag, F2FS_NAME_LEN, F2FS_ROOT_INO};
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Largest write request the kernel sends.
pub const MAX_WRITE: u32 = 1 << 20;

/// State shared by the request threads and the background thread.
#[derive(Debug)]
pub struct Shared {
    start: Instant,
    /// Nanoseconds since `start` of the last request.
    last_request: AtomicU64,
    /// Bumped by every request that may have changed the file system.
    changes: AtomicU64,
    /// For invalidating the kernel's caches (set once the session exists).
    notifier: OnceLock<Notifier>,
    /// The invalidation thread's queue (see `after_invalidating`), started
    /// with the notifier.
    invalidations: OnceLock<mpsc::Sender<Invalidation>>,
    /// Requests answered off their request thread (each holds the `Fs`).
    helpers: Arc<AtomicUsize>,
    /// A duplicate of the session's /dev/fuse descriptor, for the
    /// notification fuser 0.18 cannot send (`expire_names`).
    device: OnceLock<OwnedFd>,
}

/// An invalidation to send, and what to do once the kernel has done it.
type Invalidation = Box<dyn FnOnce(&Notifier) + Send>;

/// One running helper thread; counted until dropped.
pub struct HelperGuard(Arc<AtomicUsize>);

impl Drop for HelperGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            start: Instant::now(),
            last_request: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            notifier: OnceLock::new(),
            invalidations: OnceLock::new(),
            helpers: Arc::new(AtomicUsize::new(0)),
            device: OnceLock::new(),
        }
    }
}

impl Shared {
    /// Notes a request (for the idle detection of background cleaning).
    ///
    /// There is no gate between requests any more: the engine's facade
    /// readers share its operation lock (checkpoints and cleaning hold it
    /// exclusively) and its mutating calls serialize what they must, so
    /// every request goes straight into `Fs`.
    pub fn request(&self) {
        let now = self.start.elapsed().as_nanos() as u64;
        self.last_request.store(now, Ordering::Relaxed);
    }

    /// Notes a request that may change the file system (the periodic
    /// checkpoint only runs after one).
    pub fn change(&self) {
        self.request();
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Time since the last request.
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_nanos(self.last_request.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Hands the session's notifier to the request handlers and starts
    /// the invalidation thread, which ends with the last `Shared`.
    pub fn set_notifier(&self, notifier: Notifier) {
        let (queue, jobs) = mpsc::channel::<Invalidation>();
        let worker = notifier.clone();
        let started = std::thread::Builder::new()
            .name("f2fuse-inval".into())
            .spawn(move || jobs.into_iter().for_each(|job| job(&worker)));
        match started {
            Ok(_) => {
                let _ = self.invalidations.set(queue);
            }
            Err(e) => log(&format!("no invalidation thread: {e}")),
        }
        let _ = self.notifier.set(notifier);
    }

    /// Hands over (a duplicate of) the session's /dev/fuse descriptor.
    pub fn set_device(&self, device: OwnedFd) {
        let _ = self.device.set(device);
    }

    /// Whether `expire_names` has a descriptor to write to: without one no
    /// name may be cached on a mount without `default_permissions`.
    fn can_expire_names(&self) -> bool {
        self.device.get().is_some()
    }

    /// FUSE_NOTIFY_INC_EPOCH (protocol 7.44, Linux 6.16): every name the
    /// kernel has cached becomes stale and is looked up again at its next
    /// use. The kernel takes no lock for it, so a request thread may send
    /// it before answering. False if it could not be sent.
    fn expire_names(&self) -> bool {
        const FUSE_NOTIFY_INC_EPOCH: i32 = 8;
        let Some(device) = self.device.get() else {
            return false;
        };
        // struct fuse_out_header { len, error: the notification code, unique: 0 }
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&16u32.to_ne_bytes());
        header[4..8].copy_from_slice(&FUSE_NOTIFY_INC_EPOCH.to_ne_bytes());
        // SAFETY: a valid descriptor and a buffer of the length given.
        let sent = unsafe { libc::write(device.as_raw_fd(), header.as_ptr().cast(), 16) };
        if sent != 16 {
            log(&format!(
                "expiring the kernel's names: {}",
                io::Error::last_os_error()
            ));
        }
        sent == 16
    }

    fn helper(&self) -> HelperGuard {
        self.helpers.fetch_add(1, Ordering::Acquire);
        HelperGuard(self.helpers.clone())
    }

    /// Runs `then` on the invalidation thread once the kernel has dropped its
    /// cached attributes of `ino` and its cached pages from byte `offset`
    /// on (`len` bytes; 0: to the end), dirty ones written back first
    /// (launder_folio: WRITE requests to us, waited for). The kernel waits
    /// in the notification until those WRITEs, and READs of pages it finds
    /// locked, are answered, so it is never sent from a request thread:
    /// with every request thread waiting there nobody would answer them.
    /// One long-lived thread sends them in turn (a direct write asks for
    /// one each: no thread per request). `then` gets Ok also when the
    /// kernel has no such inode cached, and ENOSYS without a session to
    /// notify (not mounted through `serve`).
    fn after_invalidating(
        &self,
        ino: u32,
        offset: u64,
        len: u64,
        then: impl FnOnce(io::Result<()>) + Send + 'static,
    ) {
        let Some(queue) = self.invalidations.get() else {
            return then(Err(io::Error::from_raw_os_error(libc::ENOSYS)));
        };
        let helper = self.helper();
        let job: Invalidation = Box::new(move |notifier| {
            let _helper = helper;
            let offset = i64::try_from(offset).unwrap_or(i64::MAX);
            let len = i64::try_from(len).unwrap_or(0);
            then(match notifier.inval_inode(to_fuse(ino), offset, len) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
                other => other,
            })
        });
        if queue.send(job).is_err() {
            // The reply went with `then`; dropping it answers EIO.
            log(&format!("invalidation thread gone: inode {ino}"));
        }
    }

    /// Makes the kernel fetch the attributes of `ino` again: for changes
    /// the daemon makes on its own (a mode without set-ID bits, the ctime
    /// of new flags), which the kernel cannot know of. Without an offset
    /// the kernel only marks its copy stale and waits for nothing, so this
    /// is safe on a request thread.
    fn forget_attributes(&self, ino: u32) {
        let Some(notifier) = self.notifier.get() else {
            return;
        };
        match notifier.inval_inode(to_fuse(ino), -1, 0) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                log(&format!("invalidating the attributes of inode {ino}: {e}"))
            }
            _ => {}
        }
    }

    /// Waits (up to `limit`) until no helper thread holds the `Fs` any more.
    pub fn wait_for_helpers(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.helpers.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A counter that moves whenever something may have changed.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// Settings the adapter itself uses.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    pub ttl: Duration,
    pub writeback_cache: bool,
    /// The kernel checks permissions (`default_permissions`), POSIX ACLs
    /// included (FUSE_POSIX_ACL). Otherwise the adapter checks every
    /// request for the process that sent it (`Fs::as_user`).
    pub default_permissions: bool,
    /// Which reads update access times. FUSE inodes are S_NOATIME: the
    /// kernel leaves atime to the daemon.
    pub atime: AtimePolicy,
}

pub struct F2fsFuse {
    fs: Arc<Fs>,
    cfg: AdapterConfig,
    shared: Arc<Shared>,
    next_fh: AtomicU64,
    /// Directory listings by handle, taken when a listing starts (offset 0).
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntryInfo>>>>,
    /// References the kernel holds per inode (lookups not yet forgotten).
    kernel_refs: Mutex<HashMap<u32, u64>>,
    /// Files open through the kernel's page cache, and files whose cached
    /// pages direct writes made stale while none was (see `open_handle`).
    page_cache: Mutex<HashMap<u32, PageCacheUse>>,
    /// POSIX ACLs are in force (checked by the kernel with FUSE_POSIX_ACL,
    /// else by our own checks) and the kernel leaves the umask to us
    /// (FUSE_DONT_MASK).
    acl: bool,
    /// Our own permission checks, and the kernel can expire every cached
    /// name at once (`Shared::expire_names`): names in directories anyone
    /// may search are cached (see `entry_ttl`).
    name_epochs: AtomicBool,
}

type Res<T> = std::result::Result<T, Errno>;

fn errno(e: &Error) -> Errno {
    if !e.is_refusal() {
        log(&format!("error: {e}"));
    }
    Errno::from_i32(e.to_errno())
}

/// A read that meets damaged data (a compressed cluster that does not
/// decode) is EIO, as the kernel's page reads fail; the log has the detail.
fn read_errno(e: &Error) -> Errno {
    let logged = errno(e);
    if matches!(e, Error::Corrupt(_)) {
        Errno::EIO
    } else {
        logged
    }
}

fn name_ok(name: &OsStr) -> Res<&[u8]> {
    let bytes = name.as_bytes();
    // The kernel does not enforce NAME_MAX for FUSE.
    if bytes.len() > F2FS_NAME_LEN {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(bytes)
}

fn ino_of(ino: INodeNo) -> Res<u32> {
    to_f2fs(ino).ok_or(Errno::ENOENT)
}

impl F2fsFuse {
    pub fn new(fs: Arc<Fs>, cfg: AdapterConfig, shared: Arc<Shared>) -> F2fsFuse {
        F2fsFuse {
            fs,
            cfg,
            shared,
            next_fh: AtomicU64::new(1),
            dirs: Mutex::new(HashMap::new()),
            page_cache: Mutex::new(HashMap::new()),
            kernel_refs: Mutex::new(HashMap::new()),
            acl: false,
            name_epochs: AtomicBool::new(false),
        }
    }

    fn inode(&self, ino: u32) -> Res<InodeInfo> {
        let inode = self.fs.inode(ino).map_err(|e| errno(&e))?;
        if inode.ino < F2FS_ROOT_INO {
            // The node and meta inodes are never files.
            return Err(Errno::from_i32(libc::EUCLEAN));
        }
        Ok(inode)
    }

    /// A new handle for `inode` opened with `open_flags`, and how it is
    /// opened (`open_mode`). A handle through the kernel's page cache (no
    /// O_DIRECT, no FOPEN_DIRECT_IO) is counted until released; if direct
    /// writes made the file's cached pages stale while no such handle was
    /// open, this open drops them (no FOPEN_KEEP_CACHE).
    fn open_handle(&self, inode: &InodeInfo, open_flags: i32) -> (FileHandle, FopenFlags) {
        let mut mode = self.open_mode(inode, open_flags);
        let mut fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if mode.contains(FopenFlags::FOPEN_DIRECT_IO) {
            fh |= DIRECT_IO_HANDLE;
        } else if open_flags & libc::O_DIRECT == 0 {
            fh |= BUFFERED_HANDLE;
            let mut users = self.page_cache.lock();
            let used = users.entry(inode.ino).or_default();
            used.buffered_handles += 1;
            if std::mem::take(&mut used.stale) {
                mode.remove(FopenFlags::FOPEN_KEEP_CACHE);
            }
        }
        (FileHandle(fh), mode)
    }

    /// Forgets handle `fh` of `ino` (see `open_handle`).
    fn close_handle(&self, ino: u32, fh: FileHandle) {
        if fh.0 & BUFFERED_HANDLE == 0 {
            return;
        }
        let mut users = self.page_cache.lock();
        if let Some(used) = users.get_mut(&ino) {
            used.buffered_handles = used.buffered_handles.saturating_sub(1);
            if used.buffered_handles == 0 && !used.stale {
                users.remove(&ino);
            }
        }
    }

    /// Whether a direct write to `ino` must have the kernel drop the pages
    /// it covers before it is answered: only while a handle through the
    /// page cache is open (a reader could see them). Otherwise the pages
    /// are marked stale, and the next such open drops them all; so direct
    /// I/O alone costs no round trip to the kernel per write.
    fn direct_write_needs_invalidation(&self, ino: u32) -> bool {
        let mut users = self.page_cache.lock();
        let used = users.entry(ino).or_default();
        if used.buffered_handles > 0 {
            return true;
        }
        used.stale = true;
        false
    }

    /// Notes one more kernel reference to `ino` (the root is never released).
    fn kernel_ref(&self, ino: u32) {
        if ino == F2FS_ROOT_INO {
            return;
        }
        let mut refs = self.kernel_refs.lock();
        let count = refs.entry(ino).or_insert(0);
        if *count == 0 {
            // Cannot fail; the engine only counts.
            let _ = self.fs.open_inode(ino);
        }
        *count += 1;
    }

    fn kernel_unref(&self, ino: u32, n: u64) {
        let last = {
            let mut refs = self.kernel_refs.lock();
            match refs.get_mut(&ino) {
                Some(count) => {
                    *count = count.saturating_sub(n);
                    if *count == 0 {
                        refs.remove(&ino);
                        true
                    } else {
                        false
                    }
                }
                None => false,
            }
        };
        if last {
            self.release_engine(ino);
        }
    }

    fn release_engine(&self, ino: u32) {
        self.shared.change();
        if let Err(e) = self.fs.release(ino) {
            log(&format!("releasing inode {ino}: {e}"));
        }
    }

    /// Replies with a new entry of directory `parent`; the kernel then
    /// holds one reference.
    fn reply_entry(&self, reply: ReplyEntry, parent: u32, inode: &InodeInfo) {
        self.kernel_ref(inode.ino);
        reply.entry_with_ttls(
            &self.cfg.ttl,
            &self.entry_ttl(parent),
            &file_attr(inode),
            Generation(inode.generation as u64),
        );
    }

    /// How long the kernel may keep a name of directory `parent`. Not at
    /// all in a casefolded directory: the kernel's cache compares names
    /// byte for byte, so a cached "foo" would outlive an unlink of "FOO",
    /// and a cached miss of "FOO" a create of "foo". Without
    /// `default_permissions` a path walk through cached names skips our
    /// check of search permission (the kernel asks us only on a miss), so
    /// names are kept only in directories anyone may search, and only if
    /// the kernel can be made to drop them all when one stops being so
    /// (`name_epochs`; `after_search_change`).
    fn entry_ttl(&self, parent: u32) -> Duration {
        let Ok(dir) = self.fs.inode(parent) else {
            return Duration::ZERO;
        };
        let cacheable = !dir.is_casefolded()
            && (self.cfg.default_permissions
                || (self.name_epochs.load(Ordering::Relaxed)
                    && self.shared.can_expire_names()
                    && self.searchable_by_all(&dir)));
        if cacheable {
            self.cfg.ttl
        } else {
            Duration::ZERO
        }
    }

    /// Directory `dir` grants search to every caller: execute for owner,
    /// group and others, and no access ACL (whose named entries may deny).
    fn searchable_by_all(&self, dir: &InodeInfo) -> bool {
        dir.kind == FileKind::Directory
            && dir.mode & 0o111 == 0o111
            && matches!(self.fs.acl(dir, AclKind::Access), Ok(None))
    }

    /// After a change of `ino`'s mode, owner or ACL: if it is a directory
    /// that not everyone may search now, the kernel may hold names found in
    /// it while everyone could, and forgets them all before we answer.
    fn after_search_change(&self, ino: u32) {
        if !self.name_epochs.load(Ordering::Relaxed) {
            return;
        }
        let narrowed = self
            .fs
            .inode(ino)
            .is_ok_and(|dir| dir.kind == FileKind::Directory && !self.searchable_by_all(&dir));
        if narrowed && !self.shared.expire_names() {
            // Names cached so far live out their timeout; no more are.
            self.name_epochs.store(false, Ordering::Relaxed);
        }
    }

    /// The operations on behalf of `creds`: checked here unless the kernel
    /// checks them (`default_permissions`).
    fn as_user<'a>(&'a self, creds: &'a Credentials) -> AsUser<'a> {
        user_view(&self.fs, creds, !self.cfg.default_permissions)
    }

    /// The requesting process's credentials, with its supplementary groups
    /// when our checks need them.
    fn caller(&self, req: &Request) -> Credentials {
        credentials(req, !self.cfg.default_permissions)
    }

    fn do_lookup(&self, req: &Request, parent: u32, name: &OsStr) -> Res<InodeInfo> {
        let name = name_ok(name)?;
        let creds = self.caller(req);
        let entry = self
            .as_user(&creds)
            .lookup(parent, name)
            .map_err(|e| errno(&e))?;
        self.inode(entry.ino)
    }

    fn do_setattr(&self, who: AsUser, ino: u32, attr: &SetAttr) -> Res<InodeInfo> {
        who.setattr(ino, attr).map_err(|e| errno(&e))
    }

    /// The requesting process's credentials for a change of `inode` that
    /// may drop its privileges: whether set-group-ID stays can depend on
    /// the supplementary groups (`without_privileges`), which `caller`
    /// leaves out when the kernel checks permissions.
    fn changer(&self, req: &Request, inode: &InodeInfo) -> Credentials {
        let groups_decide = sgid_depends_on_groups(inode.mode, inode.gid, req.gid());
        credentials(req, !self.cfg.default_permissions || groups_decide)
    }

    /// What the VFS does before a caller without CAP_FSETID changes a
    /// file's data (file_remove_privs): drops set-user-ID, set-group-ID
    /// and file capabilities. With FUSE_HANDLE_KILLPRIV_V2 the kernel
    /// leaves that to us and keeps the mode it has cached, so that is
    /// invalidated when the mode changed.
    fn remove_privileges(&self, req: &Request, ino: u32) -> Res<()> {
        let before = self.inode(ino)?;
        let kill = SetAttr {
            kill_privileges: true,
            ..SetAttr::default()
        };
        let creds = self.changer(req, &before);
        let after = self.do_setattr(self.as_user(&creds), ino, &kill)?;
        if after.mode != before.mode {
            self.shared.forget_attributes(ino);
        }
        Ok(())
    }

    /// How `inode` is opened. Normally through the kernel's cache, kept
    /// across opens (every change comes through this kernel, so it stays
    /// valid). With the write-back cache, write(2) returns before we see the
    /// data, so an ENOSPC met at write-back could only be reported by a later
    /// fsync or close; when space runs low, files opened for writing bypass
    /// the cache (FOPEN_DIRECT_IO) so that write(2) itself reports ENOSPC.
    /// Reads served from the cache never reach us, so when the next read
    /// is due to update the atime the cache is dropped at open (no
    /// FOPEN_KEEP_CACHE) and the first reads come to us.
    fn open_mode(&self, inode: &InodeInfo, open_flags: i32) -> FopenFlags {
        let access = open_flags & libc::O_ACCMODE;
        if self.cfg.writeback_cache && access != libc::O_RDONLY && self.low_on_space() {
            FopenFlags::FOPEN_DIRECT_IO
        } else if access != libc::O_WRONLY && self.cfg.atime.is_due(inode, wall_time()) {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    /// A read of `ino`: updates its atime if the policy says so.
    fn note_access(&self, ino: u32) {
        match self.fs.note_access(ino, self.cfg.atime) {
            Ok(true) => self.shared.change(),
            Ok(false) => {}
            // Linux ignores a failed atime update too.
            Err(e) => log(&format!("access time of inode {ino}: {e}")),
        }
    }

    /// True when free space is below what the kernel may hold as dirty
    /// pages of this mount (FUSE limits a mount to a small share of the dirty
    /// limit: tens of MiB), or below an eighth of a small image.
    fn low_on_space(&self) -> bool {
        let st = self.fs.statfs();
        let threshold = (LOW_SPACE_BYTES / st.block_size as u64).min(st.blocks / 8);
        st.blocks_available < threshold
    }

    /// The mode to ask the engine for. Without ACLs the kernel applied
    /// the umask already; with them it leaves that to us (FUSE_DONT_MASK),
    /// and it applies only where the directory has no default ACL, which
    /// masks the mode instead (the engine does that).
    fn requested_mode(&self, dir: &InodeInfo, mode: u32, umask: u32) -> Res<u32> {
        if !self.acl {
            return Ok(mode);
        }
        let default = self.fs.acl(dir, AclKind::Default).map_err(|e| errno(&e))?;
        Ok(if default.is_some() {
            mode
        } else {
            mode & !umask
        })
    }

    /// ACL names are refused (EOPNOTSUPP, as on a `noacl` mount, so
    /// `cp -a` falls back to chmod) unless ACLs are in force.
    fn xattr_served(&self, name: &[u8]) -> Res<()> {
        if !self.acl && AclKind::of_xattr(name).is_some() {
            return Err(Errno::EOPNOTSUPP);
        }
        Ok(())
    }

    /// mknod, mkdir, symlink: checks the name, has `make(who, parent,
    /// name, dir)` create the inode in `parent` for the caller and replies
    /// with its entry.
    fn reply_new_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl FnOnce(AsUser, u32, &[u8], &InodeInfo) -> Res<InodeInfo>,
    ) {
        let parent = match ino_of(parent) {
            Ok(ino) => ino,
            Err(e) => return reply.error(e),
        };
        self.shared.change();
        let creds = self.caller(req);
        let result = name_ok(name).and_then(|name| {
            let dir = self.inode(parent)?;
            make(self.as_user(&creds), parent, name, &dir)
        });
        match result {
            Ok(inode) => self.reply_entry(reply, parent, &inode),
            Err(e) => reply.error(e),
        }
    }

    fn do_create(
        &self,
        req: &Request,
        parent: u32,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Res<InodeInfo> {
        let name = name_ok(name)?;
        let dir = self.inode(parent)?;
        let mode = self.requested_mode(&dir, mode, umask)?;
        let creds = self.caller(req);
        let who = self.as_user(&creds);
        match who.create(parent, name, (mode & 0o7777) as u16) {
            Ok(inode) => Ok(inode),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && flags & libc::O_EXCL == 0 => {
                // The name appeared after the kernel's lookup: open it.
                let entry = who.lookup(parent, name).map_err(|e| errno(&e))?;
                if entry.kind == FileKind::Directory {
                    return Err(Errno::EISDIR);
                }
                let inode = who.open(entry.ino, flags).map_err(|e| errno(&e))?;
                match inode.kind {
                    FileKind::Regular if flags & libc::O_TRUNC != 0 => self.do_setattr(
                        who,
                        inode.ino,
                        &SetAttr {
                            size: Some(0),
                            through_writable_file: true,
                            ..SetAttr::default()
                        },
                    ),
                    _ => Ok(inode),
                }
            }
            Err(e) => Err(errno(&e)),
        }
    }

    fn do_read(&self, ino: u32, offset: u64, size: u32) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let done = self.read_into(ino, offset, &mut buf)?;
        buf.truncate(done);
        Ok(buf)
    }

    /// Fills `buf` from `offset` of `ino`; returns the bytes read (fewer at EOF).
    fn read_into(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Res<usize> {
        let mut done = 0;
        while done < buf.len() {
            let n = self
                .fs
                .read_ino(ino, offset + done as u64, &mut buf[done..])
                .map_err(|e| read_errno(&e))?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    fn do_write(&self, ino: u32, offset: u64, data: &[u8]) -> Res<u32> {
        self.shared.change();
        let n = self.fs.write(ino, offset, data).map_err(|e| errno(&e))?;
        if n == 0 && !data.is_empty() {
            return Err(Errno::EFBIG);
        }
        Ok(n as u32)
    }

    /// Loads the listing of `dir` for handle `fh` (at offset 0, or if missing).
    fn listing(&self, dir: u32, fh: u64, offset: u64) -> Res<Arc<Vec<DirEntryInfo>>> {
        if offset != 0 {
            if let Some(list) = self.dirs.lock().get(&fh) {
                return Ok(list.clone());
            }
        }
        let list = Arc::new(self.fs.read_dir(dir).map_err(|e| errno(&e))?);
        self.dirs.lock().insert(fh, list.clone());
        // Reading a directory is an access (as iterate_dir's file_accessed).
        self.note_access(dir);
        Ok(list)
    }

    fn do_ioctl(&self, req: &Request, ino: u32, cmd: Command, reply: ReplyIoctl) {
        let inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(e) => return reply.error(e),
        };
        let flags = self.fs.get_flags(&inode);
        match cmd {
            Command::GetFlags => reply.ioctl(0, &flags.to_ne_bytes()),
            // i_generation, as a 4-byte int like the kernel's F2FS.
            Command::GetVersion => reply.ioctl(0, &inode.generation.to_ne_bytes()),
            Command::FsGetXattr => {
                reply.ioctl(0, &ioctl::fsxattr(flags, self.fs.project_id(&inode)))
            }
            Command::SetFlags(new) => self.set_flags(req, ino, flags, new, reply),
            Command::FsSetXattr {
                flags: common,
                projid,
            } => {
                // The project first, then the flags (the kernel sets them the
                // other way round; only which error a failing pair reports differs).
                if projid != self.fs.project_id(&inode) {
                    self.shared.change();
                    let creds = self.caller(req);
                    let view = user_view(&self.fs, &creds, !self.cfg.default_permissions);
                    if let Err(e) = view.set_project_id(ino, projid) {
                        return reply.error(errno(&e));
                    }
                    self.shared.forget_attributes(ino);
                }
                let new = (flags & !ioctl::COMMON_FLAGS) | common;
                self.set_flags(req, ino, flags, new, reply)
            }
            Command::Compression(c) => match self.compression_ioctl(req, ino, c) {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(e),
            },
            // As the kernel: the ioctl's return value is i_gc_failures.
            Command::SetPin(pin) => {
                self.shared.change();
                match self.fs.set_pin_file(ino, pin) {
                    Ok(failures) => reply.ioctl(failures.min(i32::MAX as u32) as i32, &[]),
                    Err(e) => reply.error(errno(&e)),
                }
            }
            Command::GetPin => match self.fs.get_pin_file(ino) {
                Ok(failures) => reply.ioctl(0, &failures.to_ne_bytes()),
                Err(e) => reply.error(errno(&e)),
            },
        }
    }

    /// F2FS's compression ioctls. The kernel wants the file open for
    /// writing to set options or convert it (else EBADF); FUSE does not
    /// tell us how the descriptor was opened, so the caller must at least
    /// be allowed to open it so.
    fn compression_ioctl(&self, req: &Request, ino: u32, cmd: Compression) -> Res<Vec<u8>> {
        let count = |n: u64| n.to_ne_bytes().to_vec();
        if matches!(
            cmd,
            Compression::SetOption { .. } | Compression::CompressFile | Compression::DecompressFile
        ) && self
            .fs
            .access(ino, &self.caller(req), Access::WRITE)
            .is_err()
        {
            return Err(Errno::EBADF);
        }
        if !matches!(cmd, Compression::GetBlocks | Compression::GetOption) {
            self.shared.change();
        }
        let result = match cmd {
            Compression::GetBlocks => self.fs.compress_blocks(ino).map(count),
            Compression::GetOption => self
                .fs
                .compress_option(ino)
                .map(|(algorithm, log)| vec![algorithm as u8, log]),
            Compression::ReleaseBlocks => self.fs.release_compress_blocks(ino).map(count),
            Compression::ReserveBlocks => self.fs.reserve_compress_blocks(ino).map(count),
            Compression::SetOption {
                algorithm,
                log_cluster_size,
            } => self
                .fs
                .set_compress_option(ino, algorithm, log_cluster_size)
                .map(|_| Vec::new()),
            Compression::CompressFile => self.fs.compress_file(ino).map(|()| Vec::new()),
            Compression::DecompressFile => self.fs.decompress_file(ino).map(|()| Vec::new()),
        };
        result.map_err(|e| errno(&e))
    }

    /// The VFS's rules (vfs_fileattr_set), checked by the engine: only the
    /// owner or root changes flags, and only root immutable or append-only.
    /// The flags are no attribute the kernel knows, but the ctime they set
    /// is. With the write-back cache, the kernel's dirty pages of a file
    /// becoming immutable or append-only are written back first: from then
    /// on the engine would refuse them, and they were written before.
    fn set_flags(&self, req: &Request, ino: u32, old: u32, new: u32, reply: ReplyIoctl) {
        self.shared.change();
        let creds = self.caller(req);
        let (fs, shared, checked) = (
            self.fs.clone(),
            self.shared.clone(),
            !self.cfg.default_permissions,
        );
        let set = move |reply: ReplyIoctl| match user_view(&fs, &creds, checked).set_flags(ino, new)
        {
            Ok(_) => {
                shared.forget_attributes(ino);
                reply.ioctl(0, &[]);
            }
            Err(e) => reply.error(errno(&e)),
        };
        let locking = (new & !old) & (inode_flag::IMMUTABLE | inode_flag::APPEND) != 0;
        if !(locking && self.cfg.writeback_cache) {
            return set(reply);
        }
        self.shared
            .after_invalidating(ino, 0, 0, move |flushed| match flushed {
                Ok(()) => set(reply),
                Err(e) => {
                    log(&format!(
                        "chattr: writing back the kernel's pages of inode {ino}: {e}"
                    ));
                    reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))
                }
            });
    }
}

/// The operations on behalf of `creds`, permission-checked by the engine
/// if `checked` (else the kernel has checked them).
fn user_view<'a>(fs: &'a Fs, creds: &'a Credentials, checked: bool) -> AsUser<'a> {
    if checked {
        fs.as_user(creds)
    } else {
        fs.as_user_unchecked(creds)
    }
}

/// The credentials of the process that sent `req`: the kernel sends its
/// fsuid and fsgid (the real ids for access(2)); its supplementary groups
/// (if `with_groups`, and not for root, whose privileges make them moot)
/// come from /proc/PID/status. That is racy: a process that changes its
/// groups or exits (its pid reused) between the request and the read is
/// judged by what /proc then says, and requests the kernel makes on its
/// own (pid 0) or for a process outside our pid namespace have no groups.
fn credentials(req: &Request, with_groups: bool) -> Credentials {
    let groups = if with_groups && req.uid() != 0 && req.pid() != 0 {
        supplementary_groups(req.pid())
    } else {
        Vec::new()
    };
    Credentials::new(req.uid(), req.gid(), groups)
}

/// The supplementary groups of process `pid` ("Groups:" in its status).
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The attributes of a negative entry: node id 0, nothing else read.
fn negative_attr() -> fuser::FileAttr {
    fuser::FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: std::time::UNIX_EPOCH,
        mtime: std::time::UNIX_EPOCH,
        ctime: std::time::UNIX_EPOCH,
        crtime: std::time::UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(at) => TimeSet::At(timestamp(at)),
    }
}

/// Free space below which writers bypass the write-back cache (see
/// `F2fsFuse::open_mode`).
const LOW_SPACE_BYTES: u64 = 128 << 20;

/// Set in the handles of files opened with FOPEN_DIRECT_IO: their writes
/// bypass the kernel's page cache as those of O_DIRECT files do.
const DIRECT_IO_HANDLE: u64 = 1 << 63;
/// Set in the handles of files opened through the kernel's page cache
/// (counted in `F2fsFuse::page_cache` until released).
const BUFFERED_HANDLE: u64 = 1 << 62;

/// A file's use of the kernel's page cache (see `F2fsFuse::open_handle`).
#[derive(Default)]
struct PageCacheUse {
    buffered_handles: u32,
    stale: bool,
}

macro_rules! ino_or_reply {
    ($ino:expr, $reply:expr) => {
        match ino_of($ino) {
            Ok(i) => i,
            Err(e) => return $reply.error(e),
        }
    };
}

impl Filesystem for F2fsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // NAMESPACE_OPTIONS: we drop set-user-ID, set-group-ID and
        // capabilities on write, truncate and chown ourselves
        // (HANDLE_KILLPRIV_V2); in return the kernel stops asking for
        // security.capability before every write (SB_NOSEC).
        let mut want = crate::request_io_options(config, self.cfg.writeback_cache)
            | crate::NAMESPACE_OPTIONS
            | InitFlags::FUSE_CACHE_SYMLINKS
            // Shared mmap of files opened in low-space (direct I/O) mode.
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        // With ACLs the daemon keeps mode and ACLs in step, makes new
        // inodes inherit default ACLs and applies the umask where none is
        // inherited. The kernel checks permissions against them with
        // `default_permissions` (FUSE_POSIX_ACL, which implies it); our own
        // checks do without it (the kernel then passes the ACL xattrs on
        // as they are, since Linux 6.2).
        // Without the kernel's permission checks a cached name would let a
        // path walk skip our check of search permission on its directory.
        // Names are cached only where anyone may search (`entry_ttl`); when
        // a directory stops being so, every cached name is expired, which
        // needs FUSE_NOTIFY_INC_EPOCH (7.44).
        let abi = config.kernel_abi();
        // (The session's descriptor reaches `Shared` after this handshake,
        // before the first request.)
        let name_epochs = !self.cfg.default_permissions && (abi.0, abi.1) >= (7, 44);
        self.name_epochs.store(name_epochs, Ordering::Relaxed);
        if !self.cfg.default_permissions && !name_epochs {
            // Every name gets entry timeout 0, so the kernel looks each one
            // up again before using it: attributes handed out with a
            // listing would only double the work per name.
            want.remove(InitFlags::FUSE_DO_READDIRPLUS);
        }
        let acl = if self.cfg.default_permissions {
            InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK
        } else {
            InitFlags::FUSE_DONT_MASK
        };
        self.acl = config.capabilities().contains(acl);
        if self.acl {
            want |= acl;
        }
        let _ = config.add_capabilities(want & config.capabilities());
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.shared.request();
        let parent = ino_or_reply!(parent, reply);
        match self.do_lookup(req, parent, name) {
            Ok(inode) => self.reply_entry(reply, parent, &inode),
            Err(e) if e == Errno::ENOENT => {
                // A negative entry the kernel may cache for the TTL: every
                // change comes through the kernel, which drops it on create.
                let ttl = self.entry_ttl(parent);
                reply.entry(&ttl, &negative_attr(), Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Some(ino) = to_f2fs(ino) {
            self.kernel_unref(ino, nlookup);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        match self.inode(ino) {
            Ok(inode) => reply.attr(&self.cfg.ttl, &file_attr(&inode)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = ino_or_reply!(ino, reply);
        let mut creds = self.caller(req);
        let attr = SetAttr {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            ctime: ctime.map(timestamp),
            // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves this to us:
            // every chown, and a truncate by someone without CAP_FSETID.
            kill_privileges: uid.is_some()
                || gid.is_some()
                || (size.is_some() && !creds.is_privileged()),
            // The kernel names a file handle for ftruncate and when it
            // records the times of writes through it.
            through_writable_file: fh.is_some(),
        };
        if attr.kill_privileges {
            if let Ok(inode) = self.inode(ino) {
                creds = self.changer(req, &inode);
            }
        }
        self.shared.change();
        let result = self.do_setattr(self.as_user(&creds), ino, &attr);
        if result.is_ok() && (mode.is_some() || uid.is_some() || gid.is_some()) {
            self.after_search_change(ino);
        }
        match result {
            Ok(inode) => reply.attr(&self.cfg.ttl, &file_attr(&inode)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let result = self
            .inode(ino)
            .and_then(|inode| self.fs.read_link(&inode).map_err(|e| errno(&e)));
        match result {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.reply_new_entry(req, parent, name, reply, |who, parent, name, dir| {
            let mode = self.requested_mode(dir, mode, umask)?;
            who.mknod(parent, name, mode as u16, decode_dev(rdev))
                .map_err(|e| errno(&e))
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.reply_new_entry(req, parent, name, reply, |who, parent, name, dir| {
            let mode = self.requested_mode(dir, mode, umask)?;
            who.mkdir(parent, name, (mode & 0o7777) as u16)
                .map_err(|e| errno(&e))
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(parent, reply);
        self.shared.change();
        let creds = self.caller(req);
        let who = self.as_user(&creds);
        match name_ok(name).and_then(|n| who.unlink(parent, n).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(parent, reply);
        self.shared.change();
        let creds = self.caller(req);
        let who = self.as_user(&creds);
        match name_ok(name).and_then(|n| who.rmdir(parent, n).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.reply_new_entry(req, parent, link_name, reply, |who, parent, name, _| {
            who.symlink(parent, name, target.as_os_str().as_bytes())
                .map_err(|e| errno(&e))
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let parent = ino_or_reply!(parent, reply);
        let newparent = ino_or_reply!(newparent, reply);
        let known = RenameFlags::RENAME_NOREPLACE
            | RenameFlags::RENAME_EXCHANGE
            | RenameFlags::RENAME_WHITEOUT;
        if !known.contains(flags) {
            return reply.error(Errno::EINVAL);
        }
        let engine_flags = EngineRenameFlags {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
            whiteout: flags.contains(RenameFlags::RENAME_WHITEOUT),
        };
        self.shared.change();
        let creds = self.caller(req);
        let result = name_ok(name).and_then(|old| {
            let new = name_ok(newname)?;
            self.as_user(&creds)
                .rename(parent, old, newparent, new, engine_flags)
                .map_err(|e| errno(&e))
        });
        if result.is_ok() && parent != newparent {
            // The kernel moves the cached name with its timeout: found where
            // anyone could search, it may now sit where not everyone may
            // (either way for an exchange).
            self.after_search_change(parent);
            self.after_search_change(newparent);
        }
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let ino = ino_or_reply!(ino, reply);
        let newparent = ino_or_reply!(newparent, reply);
        self.shared.change();
        let creds = self.caller(req);
        let who = self.as_user(&creds);
        let result =
            name_ok(newname).and_then(|name| who.link(ino, newparent, name).map_err(|e| errno(&e)));
        match result {
            Ok(inode) => self.reply_entry(reply, newparent, &inode),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let creds = self.caller(req);
        let opened = self.inode(ino).and_then(|inode| match inode.kind {
            FileKind::Directory => Err(Errno::EISDIR),
            _ => self
                .as_user(&creds)
                .open(ino, flags.0)
                .map_err(|e| errno(&e)),
        });
        match opened {
            Ok(inode) => {
                let _ = self.fs.open_inode(ino);
                let (fh, mode) = self.open_handle(&inode, flags.0);
                reply.opened(fh, mode);
            }
            Err(e) => reply.error(e),
        }
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
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        thread_local! {
            /// The request thread's read buffer, kept from one read to the
            /// next: a fresh zeroed one per request cost an allocation and
            /// a memset of up to 1 MiB (5 % of the daemon's CPU time on
            /// 64 KiB reads, bench/units-profile.sh).
            static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        READ_BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match self.read_into(ino, offset, &mut buf[..size as usize]) {
                Ok(n) => {
                    // Before answering: the kernel fetches the atime again
                    // once the read is done.
                    self.note_access(ino);
                    reply.data(&buf[..n]);
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let ino = ino_or_reply!(ino, reply);
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(e) = self.remove_privileges(req, ino) {
                return reply.error(e);
            }
        }
        let n = match self.do_write(ino, offset, data) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        // A direct write bypasses the kernel's page cache, which may hold
        // the range: read before the write, or read into while it ran.
        // The kernel drops such pages itself only after a synchronous
        // O_DIRECT write, not after an asynchronous one (AIO, io_uring)
        // nor a write to a FOPEN_DIRECT_IO file, so buffered readers could
        // keep the old bytes; we have it drop them before we answer.
        // Write-back (FUSE_WRITE_CACHE) comes from those pages themselves.
        let direct = !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
            && (flags.0 & libc::O_DIRECT != 0 || fh.0 & DIRECT_IO_HANDLE != 0);
        if !direct || !self.direct_write_needs_invalidation(ino) {
            return reply.written(n);
        }
        self.shared
            .after_invalidating(ino, offset, n.into(), move |dropped| {
                if let Err(e) = dropped {
                    log(&format!(
                        "direct write: dropping the kernel's pages of inode {ino}: {e}"
                    ));
                }
                reply.written(n)
            });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do on close (no POSIX locks are negotiated; the kernel
        // writes dirty pages back before it would send FLUSH either way):
        // ENOSYS makes it stop sending one per close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(ino) = to_f2fs(ino) {
            self.close_handle(ino, fh);
            self.release_engine(ino);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(ino, reply);
        if !self.fs.is_writable() {
            return reply.ok();
        }
        self.shared.change();
        match self.fs.fsync(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let creds = self.caller(req);
        match self.as_user(&creds).open_dir(ino) {
            Ok(_) => {
                let _ = self.fs.open_inode(ino);
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let list = match self.listing(ino, fh.0, offset) {
            Ok(list) => list,
            Err(e) => return reply.error(e),
        };
        for (i, entry) in list.iter().enumerate().skip(offset as usize) {
            let full = reply.add(
                to_fuse(entry.ino),
                i as u64 + 1,
                crate::convert::file_type(entry.kind),
                OsStr::from_bytes(&entry.name),
            );
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.shared.request();
        let dir = ino_or_reply!(ino, reply);
        let list = match self.listing(dir, fh.0, offset) {
            Ok(list) => list,
            Err(e) => return reply.error(e),
        };
        if offset == 0 {
            // Every entry's inode is read for this listing: ask the device
            // for them all at once, in address order.
            self.fs.prefetch_inodes(list.iter().map(|e| e.ino));
        }
        let ttl = self.entry_ttl(dir);
        for (i, entry) in list.iter().enumerate().skip(offset as usize) {
            let dot = entry.name == b"." || entry.name == b"..";
            // The listing may be older than this request: only names that
            // still exist are handed out with attributes.
            let current = if dot {
                Some(entry.ino)
            } else {
                self.fs.lookup(dir, &entry.name).ok().map(|e| e.ino)
            };
            let Some(child) = current else { continue };
            let inode = match self.inode(child) {
                Ok(inode) => inode,
                Err(e) if e == Errno::ENOENT => continue,
                Err(e) => return reply.error(e),
            };
            let full = reply.add(
                to_fuse(inode.ino),
                i as u64 + 1,
                OsStr::from_bytes(&entry.name),
                &ttl,
                &file_attr(&inode),
                Generation(inode.generation as u64),
            );
            if full {
                break;
            }
            // The kernel takes a reference on every entry but "." and "..".
            if !dot {
                self.kernel_ref(inode.ino);
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        if let Some(ino) = to_f2fs(ino) {
            self.release_engine(ino);
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync(req, ino, fh, datasync, reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.shared.request();
        let s = match ino_of(ino).and_then(|ino| self.fs.statfs_at(ino).map_err(|e| errno(&e))) {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_available,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(ino, reply);
        let mode = match flags {
            0 => SetMode::Any,
            libc::XATTR_CREATE => SetMode::Create,
            libc::XATTR_REPLACE => SetMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        // Groups always: setting an access ACL keeps S_ISGID only for
        // members of the file's group.
        let creds = credentials(req, true);
        let result = self.xattr_served(name.as_bytes()).and_then(|_| {
            self.shared.change();
            self.as_user(&creds)
                .set_xattr(ino, name.as_bytes(), value, mode)
                .map_err(|e| errno(&e))
        });
        if result.is_ok() && name.as_bytes() == AclKind::Access.xattr_name() {
            // The ACL's mask became the mode's group bits, which the kernel
            // does not know of (it has the mode cached for the attribute
            // timeout, and paths to the file for the entry timeout).
            self.shared.forget_attributes(ino);
            self.after_search_change(ino);
        }
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        if let Err(e) = self.xattr_served(name.as_bytes()) {
            return reply.error(e);
        }
        let creds = self.caller(req);
        let result = self.inode(ino).and_then(|inode| {
            self.as_user(&creds)
                .get_xattr(&inode, name.as_bytes())
                .map_err(|e| errno(&e))
        });
        match result {
            Ok(value) if size == 0 => reply.size(value.len() as u32),
            Ok(value) if value.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(value) => reply.data(&value),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let creds = self.caller(req);
        let result = self
            .inode(ino)
            .and_then(|inode| self.as_user(&creds).xattrs(&inode).map_err(|e| errno(&e)));
        match result {
            Ok(list) => {
                let mut names = Vec::new();
                // `trusted.*` names are root's also with default_permissions,
                // where the view checks nothing (the kernel does not filter
                // listxattr for FUSE).
                let listed = |n: &[u8]| {
                    (self.acl || AclKind::of_xattr(n).is_none()) && lists_xattr(&creds, n)
                };
                for (name, _) in list.iter().filter(|(n, _)| listed(n)) {
                    names.extend_from_slice(name);
                    names.push(0);
                }
                if size == 0 {
                    reply.size(names.len() as u32)
                } else if names.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&names)
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ino = ino_or_reply!(ino, reply);
        if let Err(e) = self.xattr_served(name.as_bytes()) {
            return reply.error(e);
        }
        self.shared.change();
        let creds = self.caller(req);
        match self.as_user(&creds).remove_xattr(ino, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// access(2) and chdir(2): the kernel asks only without
    /// `default_permissions`.
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let want = Access::from_mask(mask.bits() as u32);
        match self.fs.access(ino, &self.caller(req), want) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = ino_or_reply!(parent, reply);
        self.shared.change();
        match self.do_create(req, parent, name, mode, umask, flags) {
            Ok(inode) => {
                self.kernel_ref(inode.ino);
                let _ = self.fs.open_inode(inode.ino);
                let (fh, mode) = self.open_handle(&inode, flags);
                reply.created(
                    &self.entry_ttl(parent),
                    &file_attr(&inode),
                    Generation(inode.generation as u64),
                    fh,
                    mode,
                );
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(ino, reply);
        self.shared.change();
        let result = FallocMode::from_flags(mode)
            .map_err(|e| errno(&e))
            .and_then(|mode| {
                // As every fallocate mode on Linux (file_modified).
                if !self.caller(req).is_privileged() {
                    self.remove_privileges(req, ino)?;
                }
                self.fs
                    .fallocate(ino, offset, length, mode)
                    .map_err(|e| errno(&e))
            });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// copy_file_range(2), done here rather than by the kernel's fallback
    /// through its page cache: each chunk is checked as a write of the
    /// destination when it is written (an immutable file refuses it, also
    /// if it became immutable after it was opened). The kernel wrote its
    /// dirty pages of both ranges back before asking and drops its pages
    /// of the destination range after.
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let from = ino_or_reply!(ino_in, reply);
        let to = ino_or_reply!(ino_out, reply);
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        self.shared.change();
        // The answer is a 32-bit count; a shorter copy makes the caller ask again.
        let len = len.min((u32::MAX as u64) & !(MAX_WRITE as u64 - 1));
        let result = (|| {
            if !self.caller(req).is_privileged() {
                self.remove_privileges(req, to)?;
            }
            // Copies one chunk at `done`: (bytes written, bytes read).
            let step = |done: u64| -> Res<(u32, usize)> {
                let chunk = (len - done).min(MAX_WRITE as u64) as u32;
                let data = self.do_read(from, offset_in + done, chunk)?;
                if data.is_empty() {
                    return Ok((0, 0));
                }
                Ok((self.do_write(to, offset_out + done, &data)?, data.len()))
            };
            let mut done = 0u64;
            while done < len {
                // An error after some bytes ends the copy short, as a write.
                let (n, wanted) = match step(done) {
                    Ok((_, 0)) => break,
                    Ok(step) => step,
                    Err(_) if done > 0 => break,
                    Err(e) => return Err(e),
                };
                done += n as u64;
                if (n as usize) < wanted {
                    break;
                }
            }
            Ok(done as u32)
        })();
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        let target = match whence {
            libc::SEEK_DATA => SeekTarget::Data,
            libc::SEEK_HOLE => SeekTarget::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        if !self.cfg.writeback_cache {
            // Every write reached us before its syscall returned.
            return reply_seek(&self.fs, ino, offset, target, reply);
        }
        // With the writeback cache the kernel may hold dirty pages we have
        // not seen, and it sends FUSE_LSEEK without writing them back
        // (fuse_lseek, Linux 6.x). Invalidating the inode's pages makes it
        // write the dirty ones back first, so the answer then covers them.
        let fs = self.fs.clone();
        self.shared
            .after_invalidating(ino, 0, 0, move |flushed| match flushed {
                Ok(()) => reply_seek(&fs, ino, offset, target, reply),
                // Not mounted through `serve`: no way to flush. ENOSYS makes
                // the kernel answer "all data up to EOF" from now on, always
                // correct.
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => reply.error(Errno::ENOSYS),
                Err(e) => {
                    log(&format!(
                        "lseek: flushing the kernel's pages of inode {ino}: {e}"
                    ));
                    reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))
                }
            });
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.shared.request();
        let ino = ino_or_reply!(ino, reply);
        match ioctl::decode(cmd, in_data, out_size) {
            Ok(cmd) => self.do_ioctl(req, ino, cmd, reply),
            Err(e) => reply.error(e),
        }
    }
}

fn reply_seek(fs: &Fs, ino: u32, offset: u64, target: SeekTarget, reply: ReplyLseek) {
    match fs.seek(ino, offset, target) {
        Ok(at) => reply.offset(at as i64),
        Err(e) => reply.error(errno(&e)),
    }
}
