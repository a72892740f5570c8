//! `mkfs`: format an image with the layout mkfs.f2fs 1.15 would choose.

use crate::size::{human, parse_size};
use clap::Args;
use f2fuse_engine::{format_path, parse_features, MkfsOptions, RawWorkCopy};
use f2fuse_layout::feature;
use std::path::PathBuf;

#[derive(Args)]
pub struct MkfsArgs {
    /// Image file (created if missing) or block device.
    pub image: PathBuf,
    /// Image size, e.g. 512M, 4G, 2T (default: keep the existing file's size).
    #[arg(long, short = 'S')]
    pub size: Option<String>,
    /// Volume label.
    #[arg(long, short = 'l', default_value = "")]
    pub label: String,
    /// Features, comma-separated: extra_attr, inode_checksum, flexible_inline_xattr,
    /// inode_crtime, sb_checksum, lost_found, casefold, compression, quota (user and
    /// group quota files), project_quota (a project quota file; needs extra_attr).
    #[arg(short = 'O', value_name = "FEATURES")]
    pub features: Vec<String>,
    /// Name encoding of casefolded directories (mkfs.f2fs -C): `utf8`, or
    /// `utf8:strict` to refuse names that are not valid UTF-8. Enables
    /// `casefold`; `-O casefold` alone means `utf8`.
    #[arg(short = 'C', value_name = "ENCODING")]
    pub encoding: Option<String>,
    /// Segments per section (mkfs.f2fs -s).
    #[arg(short = 's', default_value_t = 1)]
    pub segs_per_sec: u32,
    /// Sections per zone (mkfs.f2fs -z).
    #[arg(short = 'z', default_value_t = 1)]
    pub secs_per_zone: u32,
    /// Overprovision ratio in percent (mkfs.f2fs -o; default: the best ratio).
    #[arg(short = 'o')]
    pub overprovision: Option<f64>,
    /// Root directory owner as UID:GID (default: the caller's).
    #[arg(long, short = 'R', value_name = "UID:GID")]
    pub root_owner: Option<String>,
    /// Creation time in seconds since the epoch (default: now), for reproducible images.
    #[arg(long, short = 'T')]
    pub timestamp: Option<u64>,
    /// Volume UUID (default: random).
    #[arg(long, short = 'U')]
    pub uuid: Option<String>,
    /// Write an Android sparse image (needs --size): formatted raw beside
    /// it, then encoded as `f2fuse sparse` does.
    #[arg(long)]
    pub sparse: bool,
    /// Print nothing on success.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("invalid UUID {text:?}"));
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
    }
    Ok(out)
}

fn parse_owner(text: &str) -> Result<(u32, u32), String> {
    let (u, g) = text
        .split_once(':')
        .ok_or_else(|| format!("invalid owner {text:?}: expected UID:GID"))?;
    let parse = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("invalid owner {text:?}: expected numbers"))
    };
    Ok((parse(u)?, parse(g)?))
}

pub fn run(args: &MkfsArgs) -> Result<(), String> {
    let size = args.size.as_deref().map(parse_size).transpose()?;
    let mut opts = MkfsOptions {
        label: args.label.clone(),
        segs_per_sec: args.segs_per_sec,
        secs_per_zone: args.secs_per_zone,
        overprovision_ratio: args.overprovision,
        timestamp: args.timestamp,
        ..MkfsOptions::default()
    };
    for list in &args.features {
        opts.features |= parse_features(list).map_err(|e| e.to_string())?;
    }
    if let Some(encoding) = &args.encoding {
        opts.strict_encoding = match encoding.as_str() {
            "utf8" => false,
            "utf8:strict" => true,
            other => return Err(format!("unknown encoding {other:?} (utf8 or utf8:strict)")),
        };
        opts.features |= feature::CASEFOLD;
    }
    if let Some(owner) = &args.root_owner {
        (opts.root_uid, opts.root_gid) = parse_owner(owner)?;
    }
    if let Some(uuid) = &args.uuid {
        opts.uuid = Some(parse_uuid(uuid)?);
    }
    let report = if args.sparse {
        if size.is_none() {
            return Err(format!("{}: --sparse needs --size", args.image.display()));
        }
        let raw = RawWorkCopy::beside(&args.image);
        let report = format_path(raw.path(), size, &opts)
            .map_err(|e| format!("{}: {e}", args.image.display()))?;
        raw.store_into(&args.image)
            .map_err(|e| crate::rw::describe(&e))?;
        report
    } else {
        format_path(&args.image, size, &opts)
            .map_err(|e| format!("{}: {e}", args.image.display()))?
    };
    if !args.quiet {
        let g = &report.geometry;
        println!(
            "formatted {}: {} ({} main segments, overprovision {:.2}% = {} segments, {} reserved), features: {}",
            args.image.display(),
            human(g.block_count * 4096),
            g.segment_count_main,
            g.overprovision_ratio,
            g.overprov_segment_count,
            g.rsvd_segment_count,
            feature::describe(opts.features)
        );
        println!("user space {}", human(g.user_block_count * 4096));
    }
    Ok(())
}
