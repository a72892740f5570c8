//! `f2fuse quota`: an image's quota files (usage and limits per id, as
//! repquota shows them), setting limits (as setquota) and project ids (as
//! `chattr -p ID` and `+P`).

use crate::inspect;
use crate::rw::{existing, fail, show, with_image};
use clap::{Args, Subcommand, ValueEnum};
use f2fuse_engine::quota::{Limits, TYPE_NAMES};
use f2fuse_engine::Fs;
use f2fuse_layout::inode_flag;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Args)]
pub struct QuotaArgs {
    /// An image made with `-O quota` and/or `-O project_quota`.
    pub image: PathBuf,
    /// Without one: list every id's usage and limits.
    #[command(subcommand)]
    pub action: Option<QuotaAction>,
}

#[derive(Subcommand)]
pub enum QuotaAction {
    /// Set the limits of one id, as setquota: blocks in KiB, 0 for no limit.
    Set {
        #[arg(value_enum)]
        kind: QuotaKind,
        id: u32,
        block_soft_kib: u64,
        block_hard_kib: u64,
        inode_soft: u64,
        inode_hard: u64,
    },
    /// Move PATH into project ID (its usage moves with it); with
    /// --inherit, a directory passes the project on to new entries
    /// (PROJINHERIT).
    Project {
        path: OsString,
        id: u32,
        #[arg(long)]
        inherit: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum QuotaKind {
    User,
    Group,
    Project,
}

pub fn run(args: &QuotaArgs) -> Result<(), String> {
    match &args.action {
        None => report(&inspect::open(&args.image)?),
        Some(QuotaAction::Set {
            kind,
            id,
            block_soft_kib,
            block_hard_kib,
            inode_soft,
            inode_hard,
        }) => {
            let limits = Limits {
                block_soft_kib: *block_soft_kib,
                block_hard_kib: *block_hard_kib,
                inode_soft: *inode_soft,
                inode_hard: *inode_hard,
            };
            with_image(&args.image, |fs| {
                fs.set_quota_limits(*kind as usize, *id, &limits)
                    .map_err(|e| fail(&format!("{} quota of {id}", TYPE_NAMES[*kind as usize]), &e))
            })
        }
        Some(QuotaAction::Project { path, id, inherit }) => {
            let path = path.as_bytes();
            with_image(&args.image, |fs| {
                let inode = existing(fs, path)?;
                let inode = fs
                    .set_project_id(inode.ino, *id)
                    .map_err(|e| fail(&show(path), &e))?;
                if *inherit {
                    fs.set_flags(inode.ino, fs.get_flags(&inode) | inode_flag::PROJINHERIT)
                        .map_err(|e| fail(&show(path), &e))?;
                }
                Ok(())
            })
        }
    }
}

/// One table per quota file, as repquota: used KiB and inodes with their
/// soft and hard limits, and the grace deadlines running.
fn report(fs: &Fs) -> Result<(), String> {
    let mut any = false;
    for (qtype, name) in TYPE_NAMES.iter().enumerate() {
        let Ok(entries) = fs.quota_file(qtype) else {
            continue;
        };
        any = true;
        println!(
            "{name} quota (inode {})",
            fs.superblock().qf_ino[qtype].get()
        );
        println!(
            "{:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}  grace",
            "id", "used KiB", "soft", "hard", "inodes", "soft", "hard"
        );
        for (id, d) in entries {
            let grace = match (d.btime, d.itime) {
                (0, 0) => String::new(),
                (b, i) => format!("blocks until {b}, inodes until {i}"),
            };
            println!(
                "{id:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}  {grace}",
                d.curspace.div_ceil(1024),
                d.bsoftlimit,
                d.bhardlimit,
                d.curinodes,
                d.isoftlimit,
                d.ihardlimit
            );
        }
    }
    if !any {
        return Err("the image has no quota files (mkfs -O quota or project_quota)".into());
    }
    Ok(())
}
