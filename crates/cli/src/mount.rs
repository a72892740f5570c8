//! `f2fuse mount IMAGE MOUNTPOINT [-o opt,...] [-f]`: serve an image through
//! FUSE. By default the command returns once the mount is usable and a
//! daemon serves it until it is unmounted (`fusermount3 -u MOUNTPOINT`,
//! `umount`) or gets SIGTERM/SIGINT; `-f` serves in the foreground.

use clap::Args;
use f2fuse_fuse::{MountConfig, OPTIONS_HELP};
use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::io::FromRawFd;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(after_help = format!(
    "Options for -o (comma-separated, repeatable): {OPTIONS_HELP}.\n\
     Unmount with `fusermount3 -u MOUNTPOINT` (or `umount` as root); the daemon \
     then writes a final checkpoint and exits."
))]
pub struct MountArgs {
    /// Image file or block device.
    pub image: PathBuf,
    /// Directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount options: ro, rw, allow_other, default_permissions, threads=N, ...
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Serve in the foreground (default: return once mounted, serve in the background).
    #[arg(short = 'f', long)]
    pub foreground: bool,
}

pub fn run(args: &MountArgs) -> Result<(), String> {
    let mut cfg = MountConfig::default();
    for list in &args.options {
        cfg.apply_options(list)?;
    }
    // Absolute paths: the daemon changes to "/".
    let image = args
        .image
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.image.display()))?;
    let mountpoint = args
        .mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.mountpoint.display()))?;
    if args.foreground {
        return f2fuse_fuse::serve(&image, &mountpoint, &cfg, || {});
    }
    serve_in_background(&image, &mountpoint, &cfg)
}

/// Forks a daemon that mounts and serves; returns when the mount is usable
/// (or with the daemon's error if mounting failed).
fn serve_in_background(image: &Path, mountpoint: &Path, cfg: &MountConfig) -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // Fork before any thread exists: the daemon starts its threads itself.
    // SAFETY: this process is single-threaded here.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            // SAFETY: we own both descriptors; the read end is the parent's.
            let pipe = unsafe {
                libc::close(read_end);
                File::from_raw_fd(write_end)
            };
            daemon(image, mountpoint, cfg, pipe)
        }
        child => {
            // SAFETY: we own both descriptors; the write end is the daemon's.
            let mut pipe = unsafe {
                libc::close(write_end);
                File::from_raw_fd(read_end)
            };
            let mut report = Vec::new();
            let _ = pipe.read_to_end(&mut report);
            if report.first() == Some(&0) {
                return Ok(());
            }
            // The daemon failed and is exiting: reap it.
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            if report.is_empty() {
                Err(format!(
                    "the mount daemon exited before the mount was ready (status {status:#x})"
                ))
            } else {
                Err(String::from_utf8_lossy(&report).into_owned())
            }
        }
    }
}

/// The daemon side: detaches from the terminal, serves, and reports
/// readiness (one NUL byte) or the error text through `pipe`.
fn daemon(image: &Path, mountpoint: &Path, cfg: &MountConfig, pipe: File) -> Result<(), String> {
    // SAFETY: plain system calls on descriptors this process owns.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    let _ = std::env::set_current_dir("/");
    f2fuse_fuse::log_to_syslog();
    let pipe = RefCell::new(Some(pipe));
    let result = f2fuse_fuse::serve(image, mountpoint, cfg, || {
        if let Some(mut p) = pipe.borrow_mut().take() {
            let _ = p.write_all(&[0]);
        }
    });
    if let Err(message) = &result {
        if let Some(mut p) = pipe.borrow_mut().take() {
            let _ = p.write_all(message.as_bytes());
        }
    }
    result
}
