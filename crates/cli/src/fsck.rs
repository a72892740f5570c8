//! `fsck`: our own consistency check, report-only, with fsck.f2fs's exit codes.

use f2fuse_engine::{Fs, OpenOptions};
use std::path::Path;
use std::process::ExitCode;

pub fn run(image: &Path) -> ExitCode {
    let fs = match Fs::open_path(image, OpenOptions::default()) {
        Ok(fs) => fs,
        Err(f2fuse_engine::Error::Io { context, source }) => {
            eprintln!("f2fuse: {}: I/O error {context}: {source}", image.display());
            return ExitCode::from(8);
        }
        Err(e) => {
            eprintln!("f2fuse: {}: {e}", image.display());
            return ExitCode::from(255);
        }
    };
    match f2fuse_engine::fsck(&fs) {
        Ok(report) => {
            for problem in &report.problems {
                println!("error: {problem}");
            }
            println!(
                "{}: {} inodes, {} blocks ({} nodes) checked, {} problem(s)",
                image.display(),
                report.inodes,
                report.blocks,
                report.nodes,
                report.problems.len()
            );
            ExitCode::from(report.exit_code() as u8)
        }
        Err(e) => {
            eprintln!("f2fuse: {}: {e}", image.display());
            ExitCode::from(8)
        }
    }
}
