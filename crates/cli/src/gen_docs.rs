//! `f2fuse generate-docs DIR` (hidden): man pages and shell completions
//! generated from the CLI definition itself, so they never drift from
//! `--help`. Packagers run it once at install time.

use crate::Cli;
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// The shells completions are written for.
const SHELLS: [Shell; 4] = [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::PowerShell];

#[derive(Args)]
pub struct GenerateDocsArgs {
    /// Output directory: man pages go to DIR/man1, completions to
    /// DIR/completions (both created if missing).
    pub dir: PathBuf,
}

pub fn run(args: &GenerateDocsArgs) -> Result<(), String> {
    generate(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))
}

/// Writes `f2fuse.1` and one `f2fuse-SUBCOMMAND.1` per visible subcommand
/// (nested ones too) under `dir/man1`, and the completion scripts under
/// `dir/completions`.
fn generate(dir: &Path) -> std::io::Result<()> {
    let man_dir = dir.join("man1");
    let completion_dir = dir.join("completions");
    std::fs::create_dir_all(&man_dir)?;
    std::fs::create_dir_all(&completion_dir)?;
    clap_mangen::generate_to(Cli::command(), &man_dir)?;
    let mut command = Cli::command();
    for shell in SHELLS {
        clap_complete::generate_to(shell, &mut command, "f2fuse", &completion_dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_per_subcommand_and_completions_for_each_shell() {
        let dir = std::env::temp_dir().join(format!("f2fuse-gen-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        generate(&dir).unwrap();

        let command = Cli::command();
        let visible: Vec<_> = command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .collect();
        assert!(visible.len() >= 25, "{} subcommands", visible.len());
        assert!(visible.iter().all(|sub| sub.get_name() != "generate-docs"));
        let top = std::fs::read_to_string(dir.join("man1/f2fuse.1")).unwrap();
        for sub in &visible {
            let name = sub.get_name();
            let page = std::fs::read_to_string(dir.join(format!("man1/f2fuse-{name}.1")))
                .unwrap_or_else(|e| panic!("man page of {name}: {e}"));
            assert!(page.contains(".TH"), "{name}: not a man page");
            assert!(top.contains(&format!("f2fuse\\-{name}(1)")), "{name}");
        }
        // Nested subcommands get their own pages.
        assert!(dir.join("man1/f2fuse-quota-set.1").is_file());
        assert!(!dir.join("man1/f2fuse-generate-docs.1").exists());

        for file in ["f2fuse.bash", "_f2fuse", "f2fuse.fish", "_f2fuse.ps1"] {
            let script = std::fs::read_to_string(dir.join("completions").join(file))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(script.contains("unsparse"), "{file} lacks a subcommand");
            assert!(script.contains("json"), "{file} lacks a flag");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
