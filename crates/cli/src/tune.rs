//! `f2fuse tune MOUNTPOINT [NAME[=VALUE]]`: read or change a mounted file
//! system's tunables at run time, through the daemon's control channel.

use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct TuneArgs {
    /// Where an f2fuse mount is.
    pub mountpoint: PathBuf,
    /// NAME prints one tunable, NAME=VALUE sets it; nothing lists them all.
    pub setting: Option<String>,
}

pub fn run(args: &TuneArgs) -> Result<(), String> {
    let request = match &args.setting {
        Some(setting) => format!("tune {setting}"),
        None => "tune".to_string(),
    };
    print!(
        "{}",
        f2fuse_fuse::control::request(&args.mountpoint, &request)?
    );
    Ok(())
}
