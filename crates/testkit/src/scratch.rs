//! Self-removing temporary directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Set this environment variable (to anything) to keep scratch directories
/// for inspection; their paths are printed on drop.
pub const KEEP_SCRATCH_ENV: &str = "F2FUSE_KEEP_SCRATCH";

/// A unique directory under `std::env::temp_dir()`, removed recursively on
/// drop unless `F2FUSE_KEEP_SCRATCH` is set.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `$TMPDIR/f2fuse-<tag>-<pid>-<n>-<nanos>`.
    pub fn new(tag: &str) -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tag: String = tag
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!(
                "f2fuse-{tag}-{}-{n}-{nanos:09}-{attempt}",
                std::process::id()
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => return Scratch { path },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create scratch dir {}: {e}", path.display()),
            }
        }
        panic!(
            "cannot find a free scratch dir name under {}",
            base.display()
        );
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_SCRATCH_ENV).is_some() {
            eprintln!("{KEEP_SCRATCH_ENV} set: keeping {}", self.path.display());
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "warning: cannot remove scratch dir {}: {e}",
                self.path.display()
            );
        }
    }
}
