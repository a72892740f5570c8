//! `sparse` and `unsparse`: convert between raw images and Android sparse
//! images (the engine's `encode_sparse_file` and `expand_sparse_file`).

use crate::rw::describe;
use crate::size::human;
use f2fuse_engine::{encode_sparse_file, expand_sparse_file};
use std::fs;
use std::path::Path;

/// `f2fuse sparse RAW OUT`.
pub fn to_sparse(raw: &Path, out: &Path, quiet: bool) -> Result<(), String> {
    encode_sparse_file(raw, out).map_err(|e| describe(&e))?;
    if !quiet {
        report(raw, out);
    }
    Ok(())
}

/// `f2fuse unsparse SPARSE OUT`.
pub fn to_raw(sparse: &Path, out: &Path, quiet: bool) -> Result<(), String> {
    expand_sparse_file(sparse, out).map_err(|e| describe(&e))?;
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
