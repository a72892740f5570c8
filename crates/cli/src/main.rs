//! `f2fuse`: F2FS images without a kernel module.

mod extract;
mod inspect;
mod mkfs;
mod size;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "f2fuse",
    version,
    about = "F2FS in user space: format, inspect and extract F2FS images"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format IMAGE as F2FS (creates the file if missing).
    Mkfs(mkfs::MkfsArgs),
    /// Show the superblock, checkpoint and segment usage of IMAGE.
    Info { image: PathBuf },
    /// List a directory (or show one entry) inside IMAGE.
    Ls {
        /// Long listing: mode, links, owner, size, time.
        #[arg(short = 'l')]
        long: bool,
        /// Include "." and "..".
        #[arg(short = 'a')]
        all: bool,
        image: PathBuf,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show every attribute of PATH inside IMAGE.
    Stat { image: PathBuf, path: String },
    /// Write a file's contents (or a symlink's target) to standard output.
    Cat { image: PathBuf, path: String },
    /// Copy one file out of IMAGE to DEST.
    Get {
        image: PathBuf,
        path: String,
        dest: PathBuf,
    },
    /// Copy the whole tree of IMAGE into DIR, keeping modes, owners, times,
    /// symlinks, hard links and xattrs.
    Extract(extract::ExtractArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mkfs(args) => mkfs::run(&args),
        Command::Info { image } => inspect::info(&image),
        Command::Ls {
            long,
            all,
            image,
            path,
        } => inspect::ls(&image, &path, long, all),
        Command::Stat { image, path } => inspect::stat(&image, &path),
        Command::Cat { image, path } => inspect::cat(&image, &path),
        Command::Get { image, path, dest } => inspect::get(&image, &path, &dest),
        Command::Extract(args) => extract::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("f2fuse: {message}");
            ExitCode::FAILURE
        }
    }
}
