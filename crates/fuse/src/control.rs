//! The per-mount control channel: a Unix socket the daemon serves while the
//! image is mounted, for `f2fuse tune` (and later other queries).
//!
//! Where: `/run/f2fuse/` for mounts owned by root, else
//! `/run/user/UID/f2fuse/` (or `/tmp/f2fuse-UID/` without it), a directory
//! of mode 0700 owned by the mount's owner; the socket (mode 0600) is named
//! after a hash of the mount point's canonical path. Clients find the owner
//! in /proc/self/mountinfo (`user_id=` of the FUSE mount: its type is
//! `fuse.f2fuse` unless mounted with `-o subtype=...`), and the
//! daemon accepts only peers whose SO_PEERCRED uid is the owner's or 0.
//!
//! Protocol: one request line per connection (`VERB[ ARGUMENT]`, at most
//! `MAX_REQUEST` bytes); the answer is `ok` and the result lines, or one
//! line `error MESSAGE`; then the daemon closes the connection. Verbs:
//! `tune` (list every tunable as `name=value`), `tune NAME` (its value),
//! `tune NAME=VALUE` (set it; answers `NAME=VALUE`).

use crate::log;
use f2fuse_engine::{parse_tunable_value, Fs};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest request line accepted.
const MAX_REQUEST: u64 = 4096;
/// A client that sends nothing for this long is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The directory holding the control sockets of mounts owned by `uid`.
pub fn socket_dir(uid: u32) -> PathBuf {
    if uid == 0 {
        return PathBuf::from("/run/f2fuse");
    }
    let runtime = PathBuf::from(format!("/run/user/{uid}"));
    if runtime.is_dir() {
        runtime.join("f2fuse")
    } else {
        PathBuf::from(format!("/tmp/f2fuse-{uid}"))
    }
}

/// The control socket of the mount at `mountpoint` (a canonical path).
pub fn socket_path(owner: u32, mountpoint: &Path) -> PathBuf {
    // FNV-1a: stable across builds and processes, unlike std's hasher.
    let hash = mountpoint
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        });
    socket_dir(owner).join(format!("{hash:016x}.sock"))
}

/// A path with its parent resolved, the last component kept: resolving the
/// mount point itself would ask the (perhaps hung) daemon.
fn canonical_mountpoint(mountpoint: &Path) -> Result<PathBuf, String> {
    let shown = mountpoint.display();
    let absolute = std::path::absolute(mountpoint).map_err(|e| format!("{shown}: {e}"))?;
    let name = absolute
        .file_name()
        .ok_or_else(|| format!("{shown}: not a mount point"))?;
    let parent = absolute
        .parent()
        .unwrap_or(Path::new("/"))
        .canonicalize()
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(parent.join(name))
}

/// The owner (`user_id=`) of the FUSE mount at `mountpoint`, from
/// /proc/self/mountinfo (whether f2fuse serves it, its socket tells).
fn mount_owner(mountpoint: &Path) -> Result<u32, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let wanted = mountpoint.as_os_str().as_bytes();
    info.lines()
        .rev()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let point = f2fuse_engine::unescape_mountinfo(mount.split(' ').nth(4)?);
            let mut fs = fs.split(' ');
            let kind = fs.next()?;
            if point != wanted || !(kind == "fuse" || kind.starts_with("fuse.")) {
                return None;
            }
            fs.nth(1)?
                .split(',')
                .find_map(|o| o.strip_prefix("user_id=")?.parse().ok())
        })
        .ok_or_else(|| format!("{}: no f2fuse mount there", mountpoint.display()))
}

/// Sends one request to the daemon serving `mountpoint`; returns the
/// result lines, or the daemon's or the connection's error.
pub fn request(mountpoint: &Path, line: &str) -> Result<String, String> {
    let mountpoint = canonical_mountpoint(mountpoint)?;
    let owner = mount_owner(&mountpoint)?;
    let path = socket_path(owner, &mountpoint);
    let shown = mountpoint.display();
    let mut stream = UnixStream::connect(&path).map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "{shown}: permission denied (only the mount's owner, uid {owner}, or root may use \
             its control channel)"
        ),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => format!(
            "{shown}: the daemon's control socket {} does not answer",
            path.display()
        ),
        _ => format!("{}: {e}", path.display()),
    })?;
    stream
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(body) = answer.strip_prefix("ok\n") {
        Ok(body.to_string())
    } else if let Some(message) = answer.strip_prefix("error ") {
        Err(message.trim_end().to_string())
    } else {
        Err(format!("{}: malformed answer {answer:?}", path.display()))
    }
}

/// The uid of the process at the other end of `stream`.
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for getsockopt to fill.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Creates the socket directory of `uid` (mode 0700), or checks that an
/// existing one belongs to `uid` and nobody else may enter it.
fn private_dir(uid: u32) -> Result<PathBuf, String> {
    let dir = socket_dir(uid);
    let shown = dir.display();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown}: not a private directory of uid {uid} (owner {}, mode {:o})",
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(dir)
}

/// The daemon's side: serves requests until stopped.
pub(crate) struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl ControlServer {
    /// Listens on the control socket of `mountpoint`; `wake_cleaner` runs
    /// after a `gc_*` tunable changed.
    pub(crate) fn start(
        mountpoint: &Path,
        fs: Arc<Fs>,
        wake_cleaner: Box<dyn Fn() + Send>,
    ) -> Result<ControlServer, String> {
        // SAFETY: geteuid cannot fail.
        let owner = unsafe { libc::geteuid() };
        private_dir(owner)?;
        let path = socket_path(owner, &canonical_mountpoint(mountpoint)?);
        // A socket left by a daemon that was killed: its mount is gone.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("f2fuse-control".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stop2.load(Ordering::Relaxed) {
                        return;
                    }
                    match stream {
                        Ok(stream) => serve_client(stream, owner, &fs, &*wake_cleaner),
                        Err(e) => log(&format!("control socket: {e}")),
                    }
                }
            })
            .map_err(|e| format!("starting the control thread: {e}"))?;
        Ok(ControlServer { path, stop, handle })
    }

    /// Stops serving and removes the socket.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop, which then sees `stop`.
        let _ = UnixStream::connect(&self.path);
        let _ = self.handle.join();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve_client(stream: UnixStream, owner: u32, fs: &Fs, wake_cleaner: &dyn Fn()) {
    let answer = match peer_uid(&stream) {
        Ok(uid) if uid == owner || uid == 0 => read_request(&stream)
            .and_then(|line| dispatch(fs, wake_cleaner, &line))
            .map(|body| format!("ok\n{body}")),
        Ok(uid) => Err(format!(
            "permission denied: uid {uid} is neither the mount's owner (uid {owner}) nor root"
        )),
        Err(e) => Err(format!("SO_PEERCRED: {e}")),
    };
    let text = answer.unwrap_or_else(|message| format!("error {}\n", message.replace('\n', " ")));
    let _ = (&stream).write_all(text.as_bytes());
}

fn read_request(stream: &UnixStream) -> Result<String, String> {
    stream
        .set_read_timeout(Some(CLIENT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream.take(MAX_REQUEST))
        .read_line(&mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    if !line.ends_with('\n') {
        return Err(format!(
            "a request is one line of at most {MAX_REQUEST} bytes"
        ));
    }
    Ok(line.trim_end().to_string())
}

/// One request: its verb picks the handler; read-only queries (status,
/// extents PATH) are added here.
fn dispatch(fs: &Fs, wake_cleaner: &dyn Fn(), line: &str) -> Result<String, String> {
    let (verb, argument) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "tune" => tune(fs, wake_cleaner, argument.trim()),
        "status" => report(argument, |_| {
            fs.status().map(|s| (s.to_text(), s.to_json().to_string()))
        }),
        "extents" => report(argument, |path| {
            fs.file_extents(path)
                .map(|e| (e.to_text(), e.to_json().to_string()))
        }),
        "quota" => quota(fs, argument.trim()),
        _ => Err(format!(
            "unknown request \"{verb}\" (known: tune, status, extents, quota)"
        )),
    }
}

/// `quota` (the quota files as a table) and `quota set TYPE ID BSOFT
/// BHARD ISOFT IHARD` (one id's limits, block limits in KiB).
fn quota(fs: &Fs, argument: &str) -> Result<String, String> {
    let text = |e: f2fuse_engine::Error| e.to_string();
    if argument.is_empty() {
        return fs.quota_report().map_err(text);
    }
    let words: Vec<&str> = argument.split_whitespace().collect();
    let usage = || "usage: quota set user|group|project ID BSOFT BHARD ISOFT IHARD".to_string();
    let ["set", kind, numbers @ ..] = words.as_slice() else {
        return Err(usage());
    };
    let qtype = f2fuse_engine::quota_type_by_name(kind).ok_or_else(usage)?;
    let numbers: Vec<u64> = numbers
        .iter()
        .map(|n| n.parse().map_err(|_| usage()))
        .collect::<Result<_, _>>()?;
    let [id, block_soft_kib, block_hard_kib, inode_soft, inode_hard] = numbers[..] else {
        return Err(usage());
    };
    let id = u32::try_from(id).map_err(|_| usage())?;
    let limits = f2fuse_engine::QuotaLimits {
        block_soft_kib,
        block_hard_kib,
        inode_soft,
        inode_hard,
    };
    fs.set_quota_limits(qtype, id, &limits).map_err(text)?;
    Ok(String::new())
}

/// `status [--json]` and `extents [--json] PATH`: a read-only report as
/// text, or as JSON with `--json`; `make` gets the rest of the line.
fn report(
    argument: &str,
    make: impl FnOnce(&str) -> f2fuse_engine::Result<(String, String)>,
) -> Result<String, String> {
    let argument = argument.trim_start();
    let (json, rest) = match argument.strip_prefix("--json") {
        Some(rest) => (true, rest.trim_start()),
        None => (false, argument),
    };
    let (text, json_text) = make(rest).map_err(|e| e.to_string())?;
    Ok(if json { json_text + "\n" } else { text })
}

fn tune(fs: &Fs, wake_cleaner: &dyn Fn(), argument: &str) -> Result<String, String> {
    let text = |e: f2fuse_engine::Error| e.to_string();
    if argument.is_empty() {
        let list = fs.tunables().map_err(text)?;
        return Ok(list.iter().map(|(n, v)| format!("{n}={v}\n")).collect());
    }
    let Some((name, value)) = argument.split_once('=') else {
        return Ok(format!("{}\n", fs.tunable(argument).map_err(text)?));
    };
    let value = parse_tunable_value(name, value).map_err(text)?;
    fs.set_tunable(name, value).map_err(text)?;
    if name.starts_with("gc_") {
        wake_cleaner();
    }
    Ok(format!("{name}={value}\n"))
}
