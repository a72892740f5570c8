//! `f2fuse status` and `f2fuse extents` on images: text for people, JSON
//! that Python's json module parses back (a parser we did not write), and
//! the numbers checked against the engine and dump.f2fs.

use f2fuse_testkit as support;

use crate::common::{f2fuse, ok};
use f2fuse_engine::{Fs, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::*;

fn f2fuse_ok(args: &[&str]) -> String {
    ok(args).stdout
}

/// Evaluates the Python expression `expr` over `d`, the parsed `json`, and
/// returns what it prints.
fn py(json: &str, expr: &str) -> String {
    let mut child = Command::new(find_tool("python3").expect("python3"))
        .arg("-c")
        .arg(format!(
            "import json,sys; d=json.load(sys.stdin); print({expr})"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 on {json}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Img {
    _scratch: Scratch,
    path: PathBuf,
}

impl Img {
    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

/// A 64 MiB image holding /contiguous (1 MiB), /sparse (block 0 and blocks
/// 256..258, a hole between) and /inline (100 bytes), all put by the CLI.
fn image() -> Option<Img> {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") || !require_tool("python3") {
        return None;
    }
    let scratch = Scratch::new("cli-status");
    let img = scratch.join("img");
    let img_arg = img.to_str().unwrap();
    f2fuse_ok(&["mkfs", img_arg, "--size", "64M", "-q"]);
    let host = |name: &str, pieces: &[(u64, usize)], size: u64| {
        let path = scratch.join(name);
        let file = std::fs::File::create(&path).unwrap();
        for &(offset, len) in pieces {
            file.write_all_at(&vec![0x5A; len], offset).unwrap();
        }
        file.set_len(size).unwrap();
        path
    };
    let contiguous = host("contiguous", &[(0, 1 << 20)], 1 << 20);
    let sparse = host("sparse", &[(0, 4096), (256 * 4096, 8192)], 258 * 4096);
    let inline = host("inline", &[(0, 100)], 100);
    for (file, dest) in [
        (&contiguous, "/contiguous"),
        (&sparse, "/sparse"),
        (&inline, "/inline"),
    ] {
        f2fuse_ok(&["put", img_arg, file.to_str().unwrap(), dest]);
    }
    fsck_f2fs(&img).unwrap();
    Some(Img {
        _scratch: scratch,
        path: img,
    })
}

/// The first data address dump.f2fs lists for inode `ino` (`i_addr[0x0]`).
fn dump_first_addr(img: &Path, ino: u32) -> u32 {
    let text = dump_f2fs_inode(img, ino);
    let line = text
        .lines()
        .find(|l| l.starts_with("i_addr[0x0]"))
        .unwrap_or_else(|| panic!("no i_addr[0x0] in:\n{text}"));
    line.rsplit(':')
        .next()
        .and_then(|v| v.trim().trim_end_matches(']').trim().parse().ok())
        .unwrap_or_else(|| panic!("cannot parse {line:?}"))
}

#[test]
fn status_text_and_json() {
    let Some(img) = image() else { return };
    let text = f2fuse_ok(&["status", img.arg()]);
    for want in [
        "Main area:",
        "free:",
        "prefree:",
        "Utilization:",
        "hot data",
        "cold node",
        "Checkpoints written: 0",
        "Read extent cache: hits",
        "Node cache:",
        "Write amplification: n/a",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }

    let json = f2fuse_ok(&["status", img.arg(), "--json"]);
    let s = "d['segments']";
    assert_eq!(
        py(
            &json,
            &format!("{s}['free']+{s}['prefree']+{s}['dirty']+{s}['full'] == d['main_segments']")
        ),
        "True"
    );
    assert_eq!(
        py(&json, "[l['log'] for l in d['logs']]"),
        "['hot data', 'warm data', 'cold data', 'hot node', 'warm node', 'cold node']"
    );
    assert_eq!(
        py(&json, "(d['writable'], d['checkpoints'], d['user_bytes_written'], d['write_amplification'], d['extent_cache'], d['io']['total_written'])"),
        "(False, 0, 0, None, {'hits': 0, 'misses': 0}, 0)"
    );
    // The same figures as the engine's own report of the image.
    let engine = Fs::open_path(&img.path, OpenOptions::default())
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(
        py(&json, "(d['valid_blocks'], d['valid_inodes'], d['segments']['free'], d['logs'][1]['segno'], d['logs'][1]['next_blkoff'])"),
        format!(
            "({}, {}, {}, {}, {})",
            engine.valid_blocks,
            engine.valid_inodes,
            engine.segments.free,
            engine.logs[1].segno,
            engine.logs[1].next_blkoff
        )
    );
    // This open read metadata and wrote nothing.
    assert_eq!(py(&json, "d['io']['read']['meta'] > 0"), "True");
}

#[test]
fn extents_text_and_json() {
    let Some(img) = image() else { return };
    let fs = Fs::open_path(&img.path, OpenOptions::default()).unwrap();
    let contiguous_ino = fs.resolve("/contiguous").unwrap().ino;
    drop(fs);

    let text = f2fuse_ok(&["extents", img.arg(), "/contiguous"]);
    assert!(text.ends_with("/contiguous: 1 extent found\n"), "{text}");
    assert!(text.contains("last"), "{text}");
    let json = f2fuse_ok(&["extents", img.arg(), "/contiguous", "--json"]);
    assert_eq!(
        py(&json, "(d['extent_count'], d['inline'], [(e['logical'], e['length'], e['flags']) for e in d['extents']])"),
        "(1, False, [(0, 256, ['last'])])"
    );
    assert_eq!(
        py(&json, "d['extents'][0]['physical']"),
        dump_first_addr(&img.path, contiguous_ino).to_string()
    );

    let json = f2fuse_ok(&["extents", img.arg(), "/sparse", "--json"]);
    assert_eq!(
        py(&json, "[(e['logical'], e['length']) for e in d['extents']]"),
        "[(0, 1), (256, 2)]"
    );
    assert_eq!(py(&json, "d['size']"), (258 * 4096).to_string());

    let text = f2fuse_ok(&["extents", img.arg(), "/inline"]);
    assert!(text.contains("inline"), "{text}");
    assert!(text.ends_with("/inline: 0 extents found\n"), "{text}");
    let json = f2fuse_ok(&["extents", img.arg(), "/inline", "--json"]);
    assert_eq!(py(&json, "(d['inline'], d['extent_count'])"), "(True, 0)");

    let missing = f2fuse(&["extents", img.arg(), "/missing"]);
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr.starts_with("f2fuse: /missing: No such file"),
        "{}",
        missing.stderr
    );
}

#[test]
fn status_of_something_else_is_a_clear_error() {
    let scratch = Scratch::new("cli-status-bad");
    let zero = scratch.join("zero");
    std::fs::File::create(&zero)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let out = f2fuse(&["status", zero.to_str().unwrap(), "--json"]);
    assert_eq!(out.code, Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.starts_with("f2fuse: ") && out.stderr.contains("superblock"),
        "{}",
        out.stderr
    );
}
