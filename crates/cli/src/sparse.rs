//! `sparse` and `unsparse`: convert between raw images and Android sparse
//! images, and the raw working copy behind `mkfs --sparse` and
//! `build --sparse` (F2FS is written raw, then encoded).

use crate::rw::describe;
use crate::size::human;
use f2fuse_engine::{is_sparse_file, write_sparse, FileDevice, FileDeviceOptions, SparseDevice};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

/// Opens `out` for writing from scratch, holding the image lock when it
/// already exists (it may be mounted from this very file).
fn create_output(out: &Path) -> Result<(Option<f2fuse_fuse::ImageLock>, File), String> {
    let lock = match fs::metadata(out) {
        Ok(_) => Some(f2fuse_fuse::lock_image(out)?),
        Err(_) => None,
    };
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok((lock, file))
}

/// Refuses to write a file over itself (it would be truncated before it is read).
fn distinct(input: &Path, out: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (fs::metadata(input), fs::metadata(out)) {
        if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
            return Err(format!(
                "{}: input and output are the same file",
                out.display()
            ));
        }
    }
    Ok(())
}

/// Runs `write` on a new `out`; a failure removes what it wrote.
fn write_new(out: &Path, write: impl FnOnce(&File) -> Result<(), String>) -> Result<(), String> {
    let (_lock, file) = create_output(out)?;
    write(&file).inspect_err(|_| {
        let _ = fs::remove_file(out);
    })
}

/// `f2fuse sparse RAW OUT`.
pub fn to_sparse(raw: &Path, out: &Path, quiet: bool) -> Result<(), String> {
    if is_sparse_file(raw) {
        return Err(format!(
            "{}: is already an Android sparse image",
            raw.display()
        ));
    }
    distinct(raw, out)?;
    let input = File::open(raw).map_err(|e| format!("{}: {e}", raw.display()))?;
    write_new(out, |file| {
        write_sparse(&input, file).map_err(|e| format!("{}: {}", out.display(), describe(&e)))
    })?;
    if !quiet {
        report(raw, out);
    }
    Ok(())
}

/// `f2fuse unsparse SPARSE OUT`.
pub fn to_raw(sparse: &Path, out: &Path, quiet: bool) -> Result<(), String> {
    if !is_sparse_file(sparse) {
        return Err(format!(
            "{}: not an Android sparse image (no magic 0xed26ff3a at byte 0)",
            sparse.display()
        ));
    }
    distinct(sparse, out)?;
    let input = FileDevice::open(sparse, FileDeviceOptions::default())
        .and_then(|file| SparseDevice::open(Box::new(file)))
        .map_err(|e| format!("{}: {}", sparse.display(), describe(&e)))?;
    write_new(out, |file| {
        input
            .expand(file)
            .map_err(|e| format!("{}: {}", sparse.display(), describe(&e)))
    })?;
    if !quiet {
        report(sparse, out);
    }
    Ok(())
}

fn report(from: &Path, to: &Path) {
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} ({}) from {} ({})",
        to.display(),
        human(size(to)),
        from.display(),
        human(size(from))
    );
}

/// A raw working copy of a sparse image, next to it; removed when dropped.
pub struct RawCopy {
    pub path: PathBuf,
}

impl RawCopy {
    /// The working copy's path for `image` (nothing is written yet).
    pub fn beside(image: &Path) -> RawCopy {
        let mut name = image.as_os_str().to_owned();
        name.push(".raw-tmp");
        // A copy left by an interrupted run is stale.
        let _ = fs::remove_file(&name);
        RawCopy { path: name.into() }
    }

    /// Expands the sparse `image` into the working copy.
    pub fn expand_from(&self, image: &Path) -> Result<(), String> {
        to_raw(image, &self.path, true)
    }

    /// Encodes the working copy into `image`.
    pub fn store_into(&self, image: &Path) -> Result<(), String> {
        to_sparse(&self.path, image, true)
    }
}

impl Drop for RawCopy {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
