//! A reference view of an image built with f2fs-tools alone (no kernel, no
//! code of ours): `fsck.f2fs -t` gives the paths and inode numbers,
//! `dump.f2fs -i` the inode fields and (answering "y") the contents.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use super::hash::content_hash_of_file;
use super::scan::{join_key, HostEntry, Kind};
use super::scratch::Scratch;
use super::tools::{run, tool};

/// Root inode number of mkfs.f2fs images.
pub const ROOT_INO: u32 = 3;

/// `cmd`'s stdout, with `stdin` fed in.
fn run_bytes(cmd: Command, stdin: &[u8]) -> Vec<u8> {
    run(cmd, stdin).stdout
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// Path key -> inode number for every entry `fsck.f2fs --dry-run -t`
/// lists, plus "" -> [`ROOT_INO`]. Names containing a newline cannot be
/// parsed from that listing and are missing.
pub fn image_paths_and_inos(img: &Path) -> BTreeMap<String, u32> {
    let mut cmd = Command::new(tool("fsck.f2fs"));
    cmd.arg("--dry-run").arg("-t").arg(img);
    let out = run_bytes(cmd, b"n\n");
    let mut map = BTreeMap::from([(String::new(), ROOT_INO)]);
    let mut stack: Vec<String> = Vec::new(); // keys of the ancestors
    for line in out.split(|&b| b == b'\n') {
        // Every child line is "|-- name", the last child of a directory "`-- name".
        let Some(dash) = find(line, b"|-- ").or_else(|| find(line, b"`-- ")) else {
            continue;
        };
        let Some(ino_at) = rfind(line, b" <ino = 0x") else {
            continue;
        };
        if ino_at < dash + 4 || dash % 4 != 0 {
            continue;
        }
        let depth = dash / 4;
        let hex_start = ino_at + b" <ino = 0x".len();
        let hex: String = line[hex_start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .map(|&b| b as char)
            .collect();
        let Ok(ino) = u32::from_str_radix(&hex, 16) else {
            continue;
        };
        if depth > stack.len() {
            continue; // parent line was unparseable (newline in its name)
        }
        stack.truncate(depth);
        let parent = stack.last().map(String::as_str).unwrap_or("");
        let key = join_key(parent, &line[dash + 4..ino_at]);
        stack.push(key.clone());
        map.insert(key, ino);
    }
    map
}

/// Numeric inode fields printed by `dump.f2fs -i` ("i_mode" -> 33188, ...).
pub fn parse_dump_fields(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let Some(open) = line.rfind('[') else {
            continue;
        };
        let name = line[..open].trim();
        if name.is_empty() || name.contains(' ') {
            continue;
        }
        let rest = &line[open + 1..];
        let Some(colon) = rest.find(" : ") else {
            continue;
        };
        let Some(close) = rest.find(']') else {
            continue;
        };
        if close < colon {
            continue;
        }
        if let Ok(v) = rest[colon + 3..close].trim().parse::<u64>() {
            m.entry(name.to_string()).or_insert(v);
        }
    }
    m
}

/// `dump.f2fs -i ino img` run in `dir`, answering `answer` to the "dump
/// into ./lost_found/?" prompt; returns the inode fields.
fn dump_in(img: &Path, ino: u32, dir: &Path, answer: &[u8]) -> BTreeMap<String, u64> {
    let mut cmd = Command::new(tool("dump.f2fs"));
    cmd.arg("-i")
        .arg(format!("{ino:#x}"))
        .arg(img)
        .current_dir(dir);
    let out = run_bytes(cmd, answer);
    parse_dump_fields(&String::from_utf8_lossy(&out))
}

/// The tree of an image as f2fs-tools see it, for the keys `keep` accepts
/// (ancestors need not be kept). Filled: kind, mode, uid, gid, size, mtime
/// (s, ns), nlink, hardlink_group (= ino for files with nlink > 1),
/// content_hash (files, from `dump.f2fs`) and link_target (symlinks).
/// Not filled: xattrs (always empty). About 10-50 ms per entry.
pub fn scan_image_with_f2fs_tools(
    img: &Path,
    keep: &dyn Fn(&str) -> bool,
) -> BTreeMap<String, HostEntry> {
    let img = fs::canonicalize(img).unwrap_or_else(|e| panic!("{}: {e}", img.display()));
    let work = Scratch::new("dump");
    let mut out = BTreeMap::new();
    for (key, ino) in image_paths_and_inos(&img) {
        if !keep(&key) {
            continue;
        }
        let f = dump_in(&img, ino, work.path(), b"n\n");
        let field = |n: &str| -> u64 {
            *f.get(n)
                .unwrap_or_else(|| panic!("dump.f2fs -i {ino:#x}: no {n} for {key:?}"))
        };
        let i_mode = field("i_mode") as u32;
        let kind =
            Kind::from_mode(i_mode).unwrap_or_else(|| panic!("{key:?}: bad i_mode {i_mode:#o}"));
        let nlink = field("i_links") as u32;
        let mut e = HostEntry {
            path: key.clone(),
            kind,
            mode: i_mode & 0o7777,
            uid: field("i_uid") as u32,
            gid: field("i_gid") as u32,
            size: field("i_size"),
            mtime: (field("i_mtime") as i64, field("i_mtime_nsec") as u32),
            nlink,
            hardlink_group: (kind == Kind::File && nlink > 1).then_some(u64::from(ino)),
            ..HostEntry::default()
        };
        if matches!(kind, Kind::File | Kind::Symlink) {
            // dump.f2fs writes ./lost_found/<i_name> with the data.
            let lf = work.join("lost_found");
            let _ = fs::remove_dir_all(&lf);
            dump_in(&img, ino, work.path(), b"y\n");
            let mut files: Vec<_> = fs::read_dir(&lf)
                .unwrap_or_else(|e| panic!("dump.f2fs -i {ino:#x} made no lost_found: {e}"))
                .map(|d| d.expect("read_dir").path())
                .collect();
            assert_eq!(files.len(), 1, "dump.f2fs -i {ino:#x}: {files:?}");
            let p = files.pop().expect("one file");
            if kind == Kind::File {
                let mut fh = fs::File::open(&p).expect("open dumped file");
                let len = fh.metadata().expect("stat dumped file").len();
                e.content_hash = Some(content_hash_of_file(&mut fh, len).expect("hash"));
            } else {
                let mut t = fs::read(&p).expect("read dumped symlink");
                t.truncate(e.size as usize);
                e.link_target = Some(t);
            }
            fs::remove_dir_all(&lf).expect("clean lost_found");
        }
        out.insert(key, e);
    }
    out
}
