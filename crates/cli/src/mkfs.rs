//! `mkfs`: format an image.
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct MkfsArgs {
    pub image: PathBuf,
}

pub fn run(_args: &MkfsArgs) -> Result<(), String> {
    Err("mkfs: not built yet".into())
}
