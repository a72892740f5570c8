//! Read-only commands: info, status, extents, ls, stat, cat, get.

use crate::size::human;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{DirEntryInfo, FileKind, Fs, InodeInfo, OpenOptions, Timestamp};
use f2fuse_layout::casefold::F2FS_ENC_STRICT_MODE_FL;
use f2fuse_layout::checkpoint::SSR;
use f2fuse_layout::{cp_flag, feature, CursegType, F2FS_BLKSIZE};
use std::io::Write;
use std::path::Path;

pub fn open(image: &Path) -> Result<Fs, String> {
    Fs::open_path(image, OpenOptions::default()).map_err(|e| format!("{}: {e}", image.display()))
}

fn resolve(fs: &Fs, path: &str) -> Result<InodeInfo, String> {
    fs.resolve(path).map_err(|e| e.to_string())
}

pub fn info(image: &Path) -> Result<(), String> {
    let fs = open(image)?;
    let sb = fs.superblock();
    let loaded = fs.loaded_superblock();
    let cps = fs.checkpoint_state();
    let cp = &cps.cp;
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<28}{v}\n"));
    println!("Superblock (copy #{} in use)", loaded.copy + 1);
    if let Some(e) = &loaded.other_copy_error {
        line("other copy", format!("INVALID: {e}"));
    }
    line(
        "version",
        format!("{}.{}", sb.major_ver.get(), sb.minor_ver.get()),
    );
    line("uuid", sb.uuid_string());
    line("label", format!("{:?}", sb.volume_label()));
    line("features", feature::describe(sb.feature.get()));
    if sb.has_feature(feature::CASEFOLD) {
        let strict = sb.s_encoding_flags.get() & F2FS_ENC_STRICT_MODE_FL != 0;
        line(
            "casefold encoding",
            format!(
                "utf8-12.1{}",
                if strict {
                    " (strict: no invalid UTF-8)"
                } else {
                    ""
                }
            ),
        );
    }
    line(
        "block count",
        format!(
            "{} ({})",
            sb.block_count.get(),
            human(sb.block_count.get() * F2FS_BLKSIZE as u64)
        ),
    );
    line(
        "segments",
        format!(
            "{} total, {} main",
            sb.segment_count.get(),
            sb.segment_count_main.get()
        ),
    );
    line(
        "segs/section, sections/zone",
        format!("{} / {}", sb.segs_per_sec.get(), sb.secs_per_zone.get()),
    );
    line("sections", sb.section_count.get().to_string());
    line("cp_payload", sb.cp_payload.get().to_string());
    line("max nid", sb.max_nid().to_string());
    let (cold, hot) = sb.extensions();
    line(
        "cold extensions",
        format!("{} ({})", cold.len(), cold.join(" ")),
    );
    line(
        "hot extensions",
        format!("{} ({})", hot.len(), hot.join(" ")),
    );
    line("last mkfs by", sb.version_string());
    print!("{out}");
    out.clear();

    println!("Areas (blkaddr, segments)");
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<28}{v}\n"));
    line(
        "segment0 / checkpoint",
        format!(
            "{} / {} (2 segments)",
            sb.segment0_blkaddr.get(),
            sb.cp_blkaddr.get()
        ),
    );
    line(
        "SIT",
        format!(
            "{} ({} segments)",
            sb.sit_blkaddr.get(),
            sb.segment_count_sit.get()
        ),
    );
    line(
        "NAT",
        format!(
            "{} ({} segments)",
            sb.nat_blkaddr.get(),
            sb.segment_count_nat.get()
        ),
    );
    line(
        "SSA",
        format!(
            "{} ({} segments)",
            sb.ssa_blkaddr.get(),
            sb.segment_count_ssa.get()
        ),
    );
    line(
        "main",
        format!(
            "{} ({} segments)",
            sb.main_blkaddr.get(),
            sb.segment_count_main.get()
        ),
    );
    print!("{out}");
    out.clear();

    println!("Checkpoint (pack #{})", cps.pack + 1);
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<28}{v}\n"));
    line("version", format!("{:#x}", cp.checkpoint_ver.get()));
    line(
        "flags",
        format!("{:#x} ({})", cp.flags(), cp_flag::describe(cp.flags())),
    );
    line(
        "user blocks",
        format!(
            "{} ({})",
            cp.user_block_count.get(),
            human(cp.user_block_count.get() * F2FS_BLKSIZE as u64)
        ),
    );
    line("valid blocks", cp.valid_block_count.get().to_string());
    line(
        "valid nodes / inodes",
        format!(
            "{} / {}",
            cp.valid_node_count.get(),
            cp.valid_inode_count.get()
        ),
    );
    line(
        "reserved / overprov segs",
        format!(
            "{} / {}",
            cp.rsvd_segment_count.get(),
            cp.overprov_segment_count.get()
        ),
    );
    line("free segments", cp.free_segment_count.get().to_string());
    line("next free nid", cp.next_free_nid.get().to_string());
    line("elapsed time", format!("{} s", cp.elapsed_time.get()));
    line("orphan inodes", cps.orphans.len().to_string());
    line(
        "NAT / SIT journal entries",
        format!(
            "{} / {}",
            cps.nat_journal.n_nats.get(),
            cps.sit_journal.n_sits.get()
        ),
    );
    for log in CursegType::ALL {
        let (segno, blkoff) = cp.curseg(log);
        let mode = if cp.alloc_type_of(log) == SSR {
            "SSR"
        } else {
            "LFS"
        };
        line(
            &format!("{} log", log.name()),
            format!("segment {segno}, next block {blkoff} ({mode})"),
        );
    }
    print!("{out}");
    out.clear();

    let sit = fs.sit().map_err(|e| e.to_string())?;
    let usage = sit.usage(&cps);
    println!("Segments (from the SIT)");
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<28}{v}\n"));
    line(
        "free / dirty / full",
        format!(
            "{} / {} / {}",
            usage.segments.free, usage.segments.dirty, usage.segments.full
        ),
    );
    line(
        "valid blocks (all / node)",
        format!("{} / {}", usage.valid_blocks, usage.valid_node_blocks),
    );
    let per_type: Vec<String> = CursegType::ALL
        .iter()
        .map(|log| format!("{} {}", log.name(), usage.per_type[*log as usize]))
        .collect();
    line("in use by type", per_type.join(", "));
    let statfs = fs.statfs();
    line(
        "free space",
        human(statfs.blocks_free * F2FS_BLKSIZE as u64),
    );
    print!("{out}");
    Ok(())
}

/// The daemon's answer to `request` when `target` is an f2fuse mount point
/// (a directory), else None: the caller reads `target` as an image.
pub fn ask_mount(target: &Path, request: String) -> Result<Option<String>, String> {
    if !target.is_dir() {
        return Ok(None);
    }
    f2fuse_fuse::control::request(target, &request).map(Some)
}

fn json_flag(json: bool) -> &'static str {
    if json {
        " --json"
    } else {
        ""
    }
}

pub fn status(image: &Path, json: bool) -> Result<(), String> {
    if let Some(answer) = ask_mount(image, format!("status{}", json_flag(json)))? {
        print!("{answer}");
        return Ok(());
    }
    let fs = open(image)?;
    let status = fs
        .status()
        .map_err(|e| format!("{}: {e}", image.display()))?;
    if json {
        println!("{}", status.to_json());
    } else {
        print!("{}", status.to_text());
    }
    Ok(())
}

pub fn extents(image: &Path, path: &str, json: bool) -> Result<(), String> {
    if let Some(answer) = ask_mount(image, format!("extents{} {path}", json_flag(json)))? {
        print!("{answer}");
        return Ok(());
    }
    let fs = open(image)?;
    let extents = fs.file_extents(path).map_err(|e| e.to_string())?;
    if json {
        println!("{}", extents.to_json());
    } else {
        print!("{}", extents.to_text());
    }
    Ok(())
}

pub fn mode_string(inode: &InodeInfo) -> String {
    let kind = match inode.kind {
        FileKind::Regular => '-',
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
    };
    let m = inode.mode as u32;
    let mut s = String::from(kind);
    for (shift, special, special_char) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let exec = bits & 1 != 0;
        s.push(match (m & special != 0, exec) {
            (true, true) => special_char,
            (true, false) => special_char.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// "YYYY-MM-DD hh:mm:ss" in UTC.
pub fn format_time(t: Timestamp) -> String {
    let days = t.sec.div_euclid(86_400);
    let secs = t.sec.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

fn display_name(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn long_line(fs: &Fs, entry_name: &[u8], inode: &InodeInfo) -> String {
    let size = match inode.kind {
        FileKind::CharDevice | FileKind::BlockDevice => {
            format!("{}, {}", inode.rdev.0, inode.rdev.1)
        }
        _ => inode.size.to_string(),
    };
    let mut text = format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {}",
        mode_string(inode),
        inode.links,
        inode.uid,
        inode.gid,
        size,
        format_time(inode.mtime),
        display_name(entry_name)
    );
    if inode.kind == FileKind::Symlink {
        if let Ok(target) = fs.read_link(inode) {
            text.push_str(&format!(" -> {}", display_name(&target)));
        }
    }
    text
}

pub fn ls(image: &Path, path: &str, long: bool, all: bool) -> Result<(), String> {
    let fs = open(image)?;
    let target = resolve(&fs, path)?;
    let mut stdout = std::io::stdout().lock();
    if target.kind != FileKind::Directory {
        let name = path.rsplit('/').find(|c| !c.is_empty()).unwrap_or(path);
        let text = if long {
            long_line(&fs, name.as_bytes(), &target)
        } else {
            name.to_string()
        };
        return writeln!(stdout, "{text}").map_err(|e| e.to_string());
    }
    let mut entries: Vec<DirEntryInfo> = fs.read_dir(target.ino).map_err(|e| e.to_string())?;
    entries.retain(|e| all || (e.name != b"." && e.name != b".."));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let text = if long {
            let inode = fs.inode(entry.ino).map_err(|e| e.to_string())?;
            long_line(&fs, &entry.name, &inode)
        } else {
            display_name(&entry.name)
        };
        if writeln!(stdout, "{text}").is_err() {
            break; // Closed pipe (e.g. `| head`): stop quietly.
        }
    }
    Ok(())
}

pub fn stat(image: &Path, path: &str) -> Result<(), String> {
    let fs = open(image)?;
    let inode = resolve(&fs, path)?;
    println!("  File: {path}");
    let node_addr = fs
        .node_manager()
        .nat_entry(inode.ino)
        .map(|ne| ne.block_addr.get())
        .map_err(|e| e.to_string())?;
    println!(
        "  Type: {:?}    Inode: {} (node block {node_addr})    Links: {}",
        inode.kind, inode.ino, inode.links
    );
    println!(
        "  Size: {}    Blocks: {} (4 KiB, incl. inode)    Inline: {:#04x}",
        inode.size, inode.blocks, inode.inline
    );
    println!(
        "  Mode: {:04o} ({})    Uid: {}    Gid: {}",
        inode.mode & 0o7777,
        mode_string(&inode),
        inode.uid,
        inode.gid
    );
    if matches!(inode.kind, FileKind::CharDevice | FileKind::BlockDevice) {
        println!("  Device: {}, {}", inode.rdev.0, inode.rdev.1);
    }
    for (label, t) in [
        ("Access", inode.atime),
        ("Modify", inode.mtime),
        ("Change", inode.ctime),
    ] {
        println!("{label:>6}: {}.{:09} UTC", format_time(t), t.nsec);
    }
    if let Some(t) = inode.crtime {
        println!(" Birth: {}.{:09} UTC", format_time(t), t.nsec);
    }
    println!(
        "  Flags: {:#x}    Advise: {:#04x}    Generation: {}",
        inode.flags, inode.advise, inode.generation
    );
    if fs.superblock().has_feature(feature::PRJQUOTA) {
        println!("Project: {}", fs.project_id(&inode));
    }
    if inode.kind == FileKind::Symlink {
        let target = fs.read_link(&inode).map_err(|e| e.to_string())?;
        println!(" Target: {}", display_name(&target));
    }
    let xattrs = fs.xattrs(&inode).map_err(|e| e.to_string())?;
    for (name, value) in xattrs {
        println!("  Xattr: {} = {}", display_name(&name), printable(&value));
    }
    Ok(())
}

fn printable(value: &[u8]) -> String {
    if value.iter().all(|&b| (0x20..0x7F).contains(&b)) {
        format!("{:?}", String::from_utf8_lossy(value))
    } else {
        let hex: String = value.iter().take(64).map(|b| format!("{b:02x}")).collect();
        let more = if value.len() > 64 { "..." } else { "" };
        format!("0x{hex}{more}")
    }
}

/// Streams a file's bytes to `out` in 1 MiB reads.
pub fn copy_out(fs: &Fs, inode: &InodeInfo, out: &mut dyn Write) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = fs
            .read(inode, offset, &mut buf)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("writing output: {e}"))?;
        offset += n as u64;
    }
}

pub fn cat(image: &Path, path: &str) -> Result<(), String> {
    let fs = open(image)?;
    let inode = resolve(&fs, path)?;
    let mut stdout = std::io::stdout().lock();
    match inode.kind {
        FileKind::Regular => copy_out(&fs, &inode, &mut stdout).map_err(|e| format!("{path}: {e}")),
        FileKind::Symlink => {
            let target = fs.read_link(&inode).map_err(|e| e.to_string())?;
            stdout.write_all(&target).map_err(|e| e.to_string())
        }
        other => Err(format!("{path}: is a {other:?}, not a file")),
    }
}

pub fn get(image: &Path, path: &str, dest: &Path) -> Result<(), String> {
    let fs = open(image)?;
    let inode = resolve(&fs, path)?;
    if inode.kind != FileKind::Regular {
        return Err(format!(
            "{path}: is a {:?}, not a regular file (use extract for trees)",
            inode.kind
        ));
    }
    crate::extract::write_file(&fs, &inode, dest).map_err(|e| e.into_message())
}
