//! `f2fuse`: F2FS images without a kernel module.

mod android;
mod build;
mod build_compress;
mod edit;
mod extract;
mod fsck;
mod gen_docs;
mod inspect;
mod lab;
mod mkfs;
mod mount;
mod put;
mod quota;
mod rw;
mod size;
mod sparse;
mod tune;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "f2fuse",
    version,
    about = "F2FS in user space: format, inspect, extract and edit F2FS images"
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
    /// Check IMAGE's consistency (report only). Exit 0 clean, 4 errors, 8 I/O error,
    /// 255 not an image that can be opened: the codes of fsck.f2fs.
    Fsck { image: PathBuf },
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
    /// Show the main area's state (logs, segments, utilization) and the
    /// engine's counters: of the running daemon when TARGET is an f2fuse
    /// mount point, else of this open of the image (zero activity).
    Status {
        #[arg(value_name = "IMAGE|MOUNTPOINT")]
        image: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the physical extents of PATH (inside IMAGE, or from the root of
    /// an f2fuse MOUNTPOINT), like filefrag -v.
    Extents {
        #[arg(value_name = "IMAGE|MOUNTPOINT")]
        image: PathBuf,
        path: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
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
    /// Copy a host file into IMAGE (holes kept; mode, owner as root, times).
    Put(put::PutArgs),
    /// Make a directory inside IMAGE.
    Mkdir(edit::MkdirArgs),
    /// Remove a file, link, special file or empty directory (-r: a whole tree).
    Rm(edit::RmArgs),
    /// Rename or move an entry (into TO if it is a directory).
    Mv(edit::MvArgs),
    /// Make a hard link (or with -s a symbolic link).
    Ln(edit::LnArgs),
    /// Change permission bits.
    Chmod(edit::ChmodArgs),
    /// Change the owner and/or group (numeric ids; a symlink itself is
    /// changed; set-id bits are kept).
    Chown(edit::ChownArgs),
    /// Set or remove an extended attribute.
    Setfattr(edit::SetfattrArgs),
    /// Show the quota files of IMAGE (usage and limits per user, group and
    /// project), set limits, or move a file into a project.
    Quota(quota::QuotaArgs),
    /// Make an image from a host directory tree (like mkfs.f2fs + sload.f2fs).
    Build(build::BuildArgs),
    /// Encode a raw image as an Android sparse image (as img2simg).
    Sparse {
        raw: PathBuf,
        out: PathBuf,
        /// Print nothing on success.
        #[arg(short = 'q', long)]
        quiet: bool,
    },
    /// Expand an Android sparse image into a raw image (as simg2img; zeros
    /// become holes, CRC32 chunks are checked).
    Unsparse {
        sparse: PathBuf,
        out: PathBuf,
        /// Print nothing on success.
        #[arg(short = 'q', long)]
        quiet: bool,
    },
    /// Mount IMAGE on MOUNTPOINT through FUSE (serves in the background unless -f).
    Mount(mount::MountArgs),
    /// Show or change the tunables of a mounted image (the kernel's sysfs names).
    Tune(tune::TuneArgs),
    /// Run a deterministic policy experiment on an in-memory image and report
    /// write amplification and cleaning work.
    Lab(lab::LabArgs),
    /// Write man pages and shell completions (for packaging).
    #[command(hide = true)]
    GenerateDocs(gen_docs::GenerateDocsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Mount(_)) {
        // A reader that goes away (`f2fuse info IMG | head -2`) ends the
        // command quietly, as it does other tools: Rust ignores SIGPIPE and
        // printing would panic. The daemon keeps ignoring it (its sockets).
        // SAFETY: restoring a default disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if let Command::Fsck { image } = &cli.command {
        return fsck::run(image);
    }
    let result = match cli.command {
        Command::Fsck { .. } => unreachable!("handled above"),
        Command::Mkfs(args) => mkfs::run(&args),
        Command::Info { image } => inspect::info(&image),
        Command::Ls {
            long,
            all,
            image,
            path,
        } => inspect::ls(&image, &path, long, all),
        Command::Stat { image, path } => inspect::stat(&image, &path),
        Command::Status { image, json } => inspect::status(&image, json),
        Command::Extents { image, path, json } => inspect::extents(&image, &path, json),
        Command::Cat { image, path } => inspect::cat(&image, &path),
        Command::Get { image, path, dest } => inspect::get(&image, &path, &dest),
        Command::Extract(args) => extract::run(&args),
        Command::Put(args) => put::run(&args),
        Command::Mkdir(args) => edit::mkdir(&args),
        Command::Rm(args) => edit::rm(&args),
        Command::Mv(args) => edit::mv(&args),
        Command::Ln(args) => edit::ln(&args),
        Command::Chmod(args) => edit::chmod(&args),
        Command::Chown(args) => edit::chown(&args),
        Command::Setfattr(args) => edit::setfattr(&args),
        Command::Quota(args) => quota::run(&args),
        Command::Build(args) => build::run(&args),
        Command::Sparse { raw, out, quiet } => sparse::to_sparse(&raw, &out, quiet),
        Command::Unsparse { sparse, out, quiet } => sparse::to_raw(&sparse, &out, quiet),
        Command::Mount(args) => mount::run(&args),
        Command::Tune(args) => tune::run(&args),
        Command::Lab(args) => lab::run(&args),
        Command::GenerateDocs(args) => gen_docs::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("f2fuse: {message}");
            ExitCode::FAILURE
        }
    }
}
