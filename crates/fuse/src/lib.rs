//! f2fuse-fuse: mounts an F2FS image through FUSE, on top of the engine's
//! facade (`f2fuse_engine::Fs`).
//!
//! [`serve`] does everything a mount daemon does: locks the image (one
//! daemon per image), opens it, mounts (fuser 0.18, pure Rust, no libfuse),
//! serves requests on several threads each with its own cloned /dev/fuse fd,
//! runs a background thread for periodic checkpoints and idle-time cleaning,
//! and on unmount, SIGTERM, SIGINT or SIGHUP unmounts the engine cleanly
//! (`Fs::unmount`).

mod adapter;
pub mod config;
pub mod control;
mod convert;
mod ioctl;

pub use adapter::{AdapterConfig, F2fsFuse, Shared, MAX_WRITE};
pub use config::{MountConfig, OPTIONS_HELP};
use control::ControlServer;

use f2fuse_engine::{unescape_mountinfo, AtimePolicy, ErrorKind, Fs, OpenOptions};
use fuser::{InitFlags, KernelConfig, MountOption, Session, SessionACL, SessionUnmounter};
use parking_lot::{Condvar, Mutex};
use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static USE_SYSLOG: AtomicBool = AtomicBool::new(false);

/// Sends later log lines to syslog instead of stderr (for a daemon whose
/// stderr is /dev/null).
pub fn log_to_syslog() {
    static IDENT: &[u8] = b"f2fuse\0";
    // SAFETY: IDENT is a static NUL-terminated string, as openlog requires.
    unsafe { libc::openlog(IDENT.as_ptr().cast(), libc::LOG_PID, libc::LOG_DAEMON) };
    USE_SYSLOG.store(true, Ordering::Relaxed);
}

/// Reports a problem the daemon cannot return to a caller.
pub(crate) fn log(msg: &str) {
    if USE_SYSLOG.load(Ordering::Relaxed) {
        if let Ok(c) = CString::new(msg.replace('\0', " ")) {
            // SAFETY: a constant format string taking one C string.
            unsafe { libc::syslog(libc::LOG_ERR, c"%s".as_ptr(), c.as_ptr()) };
        }
    } else {
        eprintln!("f2fuse: {msg}");
    }
}

fn fuser_config(image: &Path, cfg: &MountConfig) -> fuser::Config {
    let mut options = vec![MountOption::FSName(
        cfg.fsname
            .clone()
            .unwrap_or_else(|| image.display().to_string()),
    )];
    // Shown as "fuse.SUBTYPE" in /proc/mounts; without one as "fuse".
    if !cfg.subtype.is_empty() {
        options.push(MountOption::CUSTOM(format!("subtype={}", cfg.subtype)));
    }
    if cfg.read_only {
        options.push(MountOption::RO);
    }
    if cfg.default_permissions {
        options.push(MountOption::DefaultPermissions);
    }
    for flag in &cfg.kernel_flags {
        options.push(match flag.as_str() {
            "dev" => MountOption::Dev,
            "nodev" => MountOption::NoDev,
            "suid" => MountOption::Suid,
            "nosuid" => MountOption::NoSuid,
            "exec" => MountOption::Exec,
            "noexec" => MountOption::NoExec,
            "atime" => MountOption::Atime,
            "noatime" => MountOption::NoAtime,
            "sync" => MountOption::Sync,
            "async" => MountOption::Async,
            "dirsync" => MountOption::DirSync,
            other => MountOption::CUSTOM(other.to_string()),
        });
    }
    let mut config = fuser::Config::default();
    config.mount_options = options;
    config.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    config
}

/// What the background thread is told: stop, or wake up now (a tunable changed).
#[derive(Default)]
struct BackgroundSignal {
    stop: bool,
    wake: bool,
}

/// Periodic checkpoints (`cp_interval`) and the background cleaner, paced as
/// the kernel's gc thread (`Fs::background_gc_step`).
struct Background {
    signal: Arc<(Mutex<BackgroundSignal>, Condvar)>,
    handle: JoinHandle<()>,
}

/// The background thread re-reads the tunables at least this often.
const MAX_BACKGROUND_SLEEP: Duration = Duration::from_secs(1);

impl Background {
    fn start(fs: Arc<Fs>, shared: Arc<Shared>) -> io::Result<Background> {
        let signal = Arc::new((Mutex::new(BackgroundSignal::default()), Condvar::new()));
        let signal2 = signal.clone();
        let handle = std::thread::Builder::new()
            .name("f2fuse-bg".into())
            .spawn(move || background_loop(&fs, &shared, &signal2))?;
        Ok(Background { signal, handle })
    }

    /// A function that makes the cleaner run now and then follow the
    /// current tunables (as the kernel wakes its gc thread when gc_urgent
    /// is set).
    fn waker(&self) -> Box<dyn Fn() + Send> {
        let signal = self.signal.clone();
        Box::new(move || {
            signal.0.lock().wake = true;
            signal.1.notify_all();
        })
    }

    fn stop(self) {
        self.signal.0.lock().stop = true;
        self.signal.1.notify_all();
        let _ = self.handle.join();
    }
}

fn tunable_ms(fs: &Fs, name: &str) -> Duration {
    Duration::from_millis(fs.tunable(name).unwrap_or(0))
}

fn background_loop(fs: &Fs, shared: &Shared, signal: &(Mutex<BackgroundSignal>, Condvar)) {
    let mut gc_wait = tunable_ms(fs, "gc_min_sleep_time");
    let mut gc_due = Instant::now() + gc_wait;
    let mut last_cp = Instant::now();
    let mut cp_changes = shared.changes();
    loop {
        let cp_interval = Duration::from_secs(fs.tunable("cp_interval").unwrap_or(60));
        {
            let mut s = signal.0.lock();
            let next = gc_due.min(last_cp + cp_interval);
            let sleep = next
                .saturating_duration_since(Instant::now())
                .min(MAX_BACKGROUND_SLEEP);
            if !s.stop && !s.wake && !sleep.is_zero() {
                signal.1.wait_for(&mut s, sleep);
            }
            if s.stop {
                return;
            }
            if std::mem::take(&mut s.wake) {
                gc_due = Instant::now();
            }
        }
        if last_cp.elapsed() >= cp_interval {
            last_cp = Instant::now();
            let changes = shared.changes();
            if changes != cp_changes {
                match fs.checkpoint() {
                    Ok(()) => cp_changes = changes,
                    Err(e) => {
                        log(&format!("periodic checkpoint: {e}"));
                        if e.kind() == ErrorKind::ReadOnly {
                            return;
                        }
                    }
                }
            }
        }
        if Instant::now() >= gc_due {
            // Busy: a request came in while the cleaner slept.
            let busy = shared.idle_for() < gc_wait;
            match fs.background_gc_step(gc_wait, busy) {
                Ok(next) => gc_wait = next,
                Err(e) => {
                    log(&format!("background cleaning: {e}"));
                    if e.kind() == ErrorKind::ReadOnly {
                        return;
                    }
                }
            }
            gc_due = Instant::now() + gc_wait;
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks SIGINT/SIGTERM/SIGHUP in this thread (and so in every thread it
/// starts later); returns the previous mask.
fn block_signals() -> libc::sigset_t {
    let set = signal_set();
    // SAFETY: valid sigset pointers.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: valid sigset pointer.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Detaches the mount even while files are open (the kernel ends the
/// connection when the last one is closed).
fn lazy_unmount(mountpoint: &Path) {
    if let Ok(c) = CString::new(mountpoint.as_os_str().as_bytes()) {
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            return;
        }
    }
    for tool in ["fusermount3", "fusermount"] {
        let status = Command::new(tool)
            .args(["-u", "-z", "-q", "--"])
            .arg(mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if status.map(|s| s.success()).unwrap_or(false) {
            return;
        }
    }
    log(&format!("cannot unmount {}", mountpoint.display()));
}

/// The I/O part of FUSE init, shared with the null file system the
/// benchmarks measure as the limit: requests of up to [`MAX_WRITE`]
/// bytes, 64 background requests, asynchronous direct I/O, and the
/// write-back cache when `writeback_cache`. Returns the init flags to ask
/// for (the caller intersects them with what the kernel offers).
pub fn request_io_options(config: &mut KernelConfig, writeback_cache: bool) -> InitFlags {
    let _ = config.set_max_write(MAX_WRITE);
    let _ = config.set_max_background(64);
    let mut want = InitFlags::FUSE_ASYNC_DIO;
    if writeback_cache {
        want |= InitFlags::FUSE_WRITEBACK_CACHE;
    }
    want
}

/// The namespace part of FUSE init, shared with the null file system:
/// every listing with attributes (readdirplus; not READDIRPLUS_AUTO, under
/// which the kernel asks for them only in a listing's first request or
/// after a lookup in the directory, so `du`, `ls -l` and `tar`, which
/// list a directory before they stat its names, would look every name up
/// again), lookups and creates in one directory in parallel, and
/// privileges dropped on write by the daemon (so the kernel asks no
/// GETXATTR security.capability per write).
pub const NAMESPACE_OPTIONS: InitFlags = InitFlags::FUSE_DO_READDIRPLUS
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2);

/// Sets the readahead window of the FUSE mount at `mountpoint` (see
/// [`set_read_ahead`]); for the benchmarks' null file system.
pub fn set_read_ahead_of(mountpoint: &Path, kb: u32) {
    if let Some(conn) = connection_of(mountpoint) {
        set_read_ahead(conn, kb);
    }
}

/// Writes `value` to attribute `name` of connection `conn`'s backing
/// device info (/sys/class/bdi, named after the mount's device number);
/// only root may.
fn set_bdi_attribute(conn: u64, name: &str, value: u64) -> Result<(), String> {
    let path = format!("/sys/class/bdi/{}:{}/{name}", conn >> 20, conn & 0xfffff);
    std::fs::write(&path, value.to_string()).map_err(|e| format!("{path}: {e}"))
}

/// Sets the readahead window of connection `conn`: FUSE's init only lets
/// a daemon shrink the kernel's 128 KiB default; sysfs can grow it.
fn set_read_ahead(conn: u64, kb: u32) {
    if let Err(e) = set_bdi_attribute(conn, "read_ahead_kb", kb.into()) {
        log(&format!("readahead window left at the kernel's: {e}"));
    }
}

/// Sets the write-back limits `-o` asked for (`max_ratio`, `max_bytes`,
/// `strict_limit`) on connection `conn`'s backing device, in order. FUSE
/// starts every mount at 1 % of the dirty threshold, strictly: a buffered
/// writer is throttled once that much waits for the daemon.
fn set_dirty_limits(conn: u64, limits: &[(String, u64)]) {
    for (name, value) in limits {
        if let Err(e) = set_bdi_attribute(conn, name, *value) {
            log(&format!("write-back limit {name}={value} not set: {e}"));
        }
    }
}

/// Ends the FUSE connection `conn` through fusectl, if it is mounted.
fn abort_connection(conn: u64) -> bool {
    std::fs::write(format!("/sys/fs/fuse/connections/{conn}/abort"), b"1").is_ok()
}

/// Waits for SIGINT/SIGTERM/SIGHUP (until `done`), then unmounts.
fn signal_loop(
    set: libc::sigset_t,
    done: &AtomicBool,
    mut unmounter: SessionUnmounter,
    mountpoint: &Path,
    conn: Option<u64>,
) {
    loop {
        if done.load(Ordering::Relaxed) {
            return;
        }
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        // SAFETY: valid pointers; a null siginfo is allowed.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if done.load(Ordering::Relaxed) {
            // The session is over (the wake-up signal from `serve`).
            return;
        }
        if sig > 0 {
            break;
        }
    }
    if let Err(e) = unmounter.unmount() {
        if e.raw_os_error() == Some(libc::EBUSY) {
            log(&format!(
                "{} is busy: detaching it; the image is closed when the last file is",
                mountpoint.display()
            ));
        }
        lazy_unmount(mountpoint);
    }
    // If files stay open, end the connection after a grace period (the
    // engine is still unmounted cleanly; unflushed page cache is lost).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done.load(Ordering::Relaxed) {
        if Instant::now() >= deadline {
            if let Some(conn) = conn {
                if abort_connection(conn) {
                    log("aborted the FUSE connection after 10 s of open files");
                }
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The FUSE connection number (fusectl's directory name) of the mount at
/// `mountpoint`, from /proc/self/mountinfo: a stat of the mount point would
/// be a request to ourselves, which nobody answers before the session runs.
fn connection_of(mountpoint: &Path) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = mountpoint.as_os_str().as_bytes();
    info.lines().rev().find_map(|line| {
        let mut fields = line.split(' ');
        let dev = fields.nth(2)?;
        let point = unescape_mountinfo(fields.nth(1)?);
        if point != wanted {
            return None;
        }
        let (major, minor) = dev.split_once(':')?;
        Some((major.parse::<u64>().ok()? << 20) | minor.parse::<u64>().ok()?)
    })
}

/// Mounts `image` on `mountpoint` and serves it until it is unmounted
/// (fusermount3 -u, umount) or a SIGINT/SIGTERM/SIGHUP arrives; then
/// unmounts the engine cleanly. `ready` runs once the mount is usable.
pub fn serve(
    image: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let old_mask = block_signals();
    let result = serve_blocked(image, mountpoint, cfg, ready);
    restore_signals(&old_mask);
    result
}

fn serve_blocked(
    image: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let meta =
        std::fs::metadata(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    if !meta.is_dir() {
        return Err(format!("{}: not a directory", mountpoint.display()));
    }
    let fs = Fs::open_path_with(
        image,
        OpenOptions {
            writable: !cfg.read_only,
            direct: false,
            write_behind: cfg.write_behind,
            read_ahead: u64::from(cfg.image_read_ahead_kb) * 1024,
            // One daemon per image, and no offline writer meanwhile.
            lock: true,
        },
        &cfg.tunables,
    )
    .map_err(|e| format!("{}: {e}", image.display()))?;
    if !cfg.read_only {
        fs.set_compress_options(cfg.compress.clone())
            .map_err(|e| format!("compression options: {e}"))?;
        fs.set_quota_enforcement(cfg.quota_enforced)
            .map_err(|e| format!("quota options: {e}"))?;
    }
    let fs = Arc::new(fs);
    let shared = Arc::new(Shared::default());
    let adapter = F2fsFuse::new(
        fs.clone(),
        AdapterConfig {
            ttl: cfg.ttl,
            writeback_cache: cfg.writeback_cache && !cfg.read_only,
            default_permissions: cfg.default_permissions,
            // Nothing is written on a read-only mount, atimes neither.
            atime: if cfg.read_only {
                AtimePolicy::Never
            } else {
                cfg.atime
            },
        },
        shared.clone(),
    );
    let mut session = Session::new(adapter, mountpoint, &fuser_config(image, cfg))
        .map_err(|e| format!("mounting on {}: {e}", mountpoint.display()))?;
    shared.set_notifier(session.notifier());
    match session.as_fd().try_clone_to_owned() {
        Ok(device) => shared.set_device(device),
        Err(e) => log(&format!(
            "the kernel keeps no names on this mount (no descriptor to expire them with): {e}"
        )),
    }
    let mountpoint: PathBuf = mountpoint.to_path_buf();
    let conn = connection_of(&mountpoint);
    if let Some(conn) = conn {
        set_read_ahead(conn, cfg.read_ahead_kb);
        set_dirty_limits(conn, &cfg.dirty_limits);
    }
    let unmounter = session.unmount_callable();
    let done = Arc::new(AtomicBool::new(false));
    let signals = {
        let done = done.clone();
        let mountpoint = mountpoint.clone();
        let set = signal_set();
        std::thread::Builder::new()
            .name("f2fuse-signals".into())
            .spawn(move || signal_loop(set, &done, unmounter, &mountpoint, conn))
            .map_err(|e| format!("starting the signal thread: {e}"))?
    };
    let background = if fs.is_writable() {
        Some(
            Background::start(fs.clone(), shared.clone())
                .map_err(|e| format!("starting the background thread: {e}"))?,
        )
    } else {
        None
    };
    let waker = background.as_ref().map_or_else(
        || Box::new(|| ()) as Box<dyn Fn() + Send>,
        Background::waker,
    );
    let control = ControlServer::start(&mountpoint, fs.clone(), waker)
        .map_err(|e| log(&format!("no control channel (f2fuse tune): {e}")))
        .ok();
    ready();
    let served = session.run();
    done.store(true, Ordering::Relaxed);
    // Wake the signal thread now rather than at its next timeout.
    // SAFETY: the thread is alive until joined; SIGHUP is blocked in every
    // thread, so it only ends its sigtimedwait.
    unsafe { libc::pthread_kill(signals.as_pthread_t(), libc::SIGHUP) };
    let _ = signals.join();
    if let Some(control) = control {
        control.stop();
    }
    if let Some(bg) = background {
        bg.stop();
    }
    // A request answered on a helper thread may still hold the file system.
    shared.wait_for_helpers(Duration::from_secs(10));
    let fs = Arc::try_unwrap(fs).map_err(|_| {
        "internal error: the file system is still in use after the session".to_string()
    })?;
    let unmounted = fs
        .unmount()
        .map_err(|e| format!("{}: unmounting: {e}", image.display()));
    if let Err(e) = &served {
        log(&format!("FUSE session ended with an error: {e}"));
    }
    unmounted
}
