//! `f2fuse quota`: the quota files of an image or a mount (usage and
//! limits per id, as repquota shows them), setting limits (as setquota)
//! and, on an image, project ids (as `chattr -p ID` and `+P`).

use crate::inspect::{self, ask_mount};
use crate::rw::{existing, fail, show, with_image};
use clap::{Args, Subcommand, ValueEnum};
use f2fuse_engine::{QuotaLimits as Limits, QUOTA_TYPE_NAMES as TYPE_NAMES};
use f2fuse_layout::inode_flag;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Args)]
pub struct QuotaArgs {
    /// An image made with `-O quota` and/or `-O project_quota`, or the
    /// mount point of one (its daemon answers).
    #[arg(value_name = "IMAGE|MOUNTPOINT")]
    pub target: PathBuf,
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
    /// Move PATH (in an image) into project ID, its usage with it; with
    /// --inherit, a directory passes the project on to new entries
    /// (PROJINHERIT). On a mount: `chattr -p ID [+P] PATH`.
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
    let target = &args.target;
    match &args.action {
        None => {
            let report = match ask_mount(target, "quota".into())? {
                Some(answer) => answer,
                None => inspect::open(target)?
                    .quota_report()
                    .map_err(|e| format!("{}: {e}", target.display()))?,
            };
            print!("{report}");
            Ok(())
        }
        Some(QuotaAction::Set {
            kind,
            id,
            block_soft_kib,
            block_hard_kib,
            inode_soft,
            inode_hard,
        }) => {
            let qtype = *kind as usize;
            let request = format!(
                "quota set {} {id} {block_soft_kib} {block_hard_kib} {inode_soft} {inode_hard}",
                TYPE_NAMES[qtype]
            );
            if ask_mount(target, request)?.is_some() {
                return Ok(());
            }
            let limits = Limits {
                block_soft_kib: *block_soft_kib,
                block_hard_kib: *block_hard_kib,
                inode_soft: *inode_soft,
                inode_hard: *inode_hard,
            };
            with_image(target, |fs| {
                fs.set_quota_limits(qtype, *id, &limits)
                    .map_err(|e| fail(&format!("{} quota of {id}", TYPE_NAMES[qtype]), &e))
            })
        }
        Some(QuotaAction::Project { path, id, inherit }) => {
            if target.is_dir() {
                return Err("on a mount, use chattr -p ID [+P] PATH".into());
            }
            let path = path.as_bytes();
            with_image(target, |fs| {
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
