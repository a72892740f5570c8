//! Field-by-field comparison of two scanned trees.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::scan::{HostEntry, Kind};

/// Which fields [`compare_trees`] looks at. Entry kinds are always compared;
/// when they differ the other fields of that entry are not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareWhat {
    /// Permission bits incl. suid/sgid/sticky.
    pub mode: bool,
    /// uid and gid.
    pub owner: bool,
    /// Size of regular files and symlinks.
    pub size: bool,
    /// Size of directories (file-system specific; off by default).
    pub dir_size: bool,
    /// Whole seconds of the modification time.
    pub mtime_secs: bool,
    /// Nanoseconds of the modification time.
    pub mtime_nsec: bool,
    /// Content hash of regular files.
    pub content: bool,
    /// Symlink targets.
    pub link_target: bool,
    /// Extended attributes (names and values).
    pub xattrs: bool,
    /// Link counts of every entry (directories: 2 + subdirectories).
    pub nlink: bool,
    /// Hard-link groups, compared as a partition of paths.
    pub hardlinks: bool,
    /// mode/owner/mtime/xattrs of the root entry "" (sload.f2fs keeps the
    /// root inode mkfs.f2fs made, so these differ from the source dir).
    pub root_metadata: bool,
    /// Keys whose entries (and whole subtrees) are skipped on both sides.
    pub ignore: Vec<String>,
}

impl Default for CompareWhat {
    fn default() -> Self {
        Self::all()
    }
}

impl CompareWhat {
    /// Everything except directory sizes.
    pub fn all() -> Self {
        CompareWhat {
            mode: true,
            owner: true,
            size: true,
            dir_size: false,
            mtime_secs: true,
            mtime_nsec: true,
            content: true,
            link_target: true,
            xattrs: true,
            nlink: true,
            hardlinks: true,
            root_metadata: true,
            ignore: Vec::new(),
        }
    }

    /// What survives `mkfs.f2fs` + `sload.f2fs -P` (f2fs-tools 1.15):
    /// everything but mtime nanoseconds, xattrs and root metadata. (Entries
    /// sload skips, fifos/sockets/devices, are simply missing; generate the
    /// tree without them, see `TreeOptions::sload_compatible`.)
    pub fn sload() -> Self {
        CompareWhat {
            mtime_nsec: false,
            xattrs: false,
            root_metadata: false,
            ..Self::all()
        }
    }

    /// Builder helper: also skip `key` and its subtree.
    pub fn ignoring(mut self, key: impl Into<String>) -> Self {
        self.ignore.push(key.into());
        self
    }

    fn ignored(&self, key: &str) -> bool {
        self.ignore.iter().any(|i| {
            i.is_empty()
                || key == i
                || (key.len() > i.len()
                    && key.starts_with(i.as_str())
                    && key.as_bytes()[i.len()] == b'/')
        })
    }
}

/// Printable form of some bytes: escaped, cut after 48 bytes, with length.
pub fn show_bytes(b: &[u8]) -> String {
    const MAX: usize = 48;
    let shown = &b[..b.len().min(MAX)];
    let s: String = shown.escape_ascii().to_string();
    if b.len() > MAX {
        format!("\"{s}\"... ({} bytes)", b.len())
    } else {
        format!("\"{s}\" ({} bytes)", b.len())
    }
}

fn show_mtime(t: (i64, u32)) -> String {
    format!("{}.{:09}", t.0, t.1)
}

fn show_opt_hash(h: Option<u64>) -> String {
    match h {
        Some(h) => format!("{h:#018x}"),
        None => "none".into(),
    }
}

fn show_opt_bytes(b: &Option<Vec<u8>>) -> String {
    match b {
        Some(b) => show_bytes(b),
        None => "none".into(),
    }
}

fn diff_entry(key: &str, e: &HostEntry, a: &HostEntry, what: &CompareWhat, out: &mut Vec<String>) {
    let name = format!("{key:?}");
    if e.kind != a.kind {
        out.push(format!(
            "{name}: kind: expected {:?}, actual {:?}",
            e.kind, a.kind
        ));
        return;
    }
    let root_meta = !key.is_empty() || what.root_metadata;
    let mut field = |f: &str, ev: String, av: String| {
        if ev != av {
            out.push(format!("{name}: {f}: expected {ev}, actual {av}"));
        }
    };
    if what.mode && root_meta {
        field("mode", format!("{:#o}", e.mode), format!("{:#o}", a.mode));
    }
    if what.owner && root_meta {
        field("uid", e.uid.to_string(), a.uid.to_string());
        field("gid", e.gid.to_string(), a.gid.to_string());
    }
    let size_applies = if e.kind == Kind::Dir {
        what.dir_size
    } else {
        what.size
    };
    if size_applies {
        field("size", e.size.to_string(), a.size.to_string());
    }
    if root_meta {
        if what.mtime_secs && what.mtime_nsec {
            field("mtime", show_mtime(e.mtime), show_mtime(a.mtime));
        } else if what.mtime_secs {
            field(
                "mtime seconds",
                e.mtime.0.to_string(),
                a.mtime.0.to_string(),
            );
        } else if what.mtime_nsec {
            field(
                "mtime nanoseconds",
                e.mtime.1.to_string(),
                a.mtime.1.to_string(),
            );
        }
    }
    if what.content && e.kind == Kind::File {
        field(
            "content hash",
            show_opt_hash(e.content_hash),
            show_opt_hash(a.content_hash),
        );
    }
    if what.link_target && e.kind == Kind::Symlink {
        field(
            "link target",
            show_opt_bytes(&e.link_target),
            show_opt_bytes(&a.link_target),
        );
    }
    if what.nlink {
        field("nlink", e.nlink.to_string(), a.nlink.to_string());
    }
    if what.xattrs && root_meta {
        for (k, ev) in &e.xattrs {
            match a.xattrs.get(k) {
                None => out.push(format!("{name}: xattr {} missing", show_bytes(k))),
                Some(av) if av != ev => out.push(format!(
                    "{name}: xattr {}: expected {}, actual {}",
                    show_bytes(k),
                    show_bytes(ev),
                    show_bytes(av)
                )),
                Some(_) => {}
            }
        }
        for (k, av) in &a.xattrs {
            if !e.xattrs.contains_key(k) {
                out.push(format!(
                    "{name}: extra xattr {} = {}",
                    show_bytes(k),
                    show_bytes(av)
                ));
            }
        }
    }
}

/// Paths sharing `key`'s hard-link group (just `key` when it has none).
fn link_set<'a>(
    key: &'a str,
    tree: &'a BTreeMap<String, HostEntry>,
    groups: &BTreeMap<u64, BTreeSet<&'a str>>,
) -> BTreeSet<&'a str> {
    match tree.get(key).and_then(|e| e.hardlink_group) {
        Some(g) => groups.get(&g).cloned().unwrap_or_default(),
        None => BTreeSet::from([key]),
    }
}

fn groups_of<'a>(
    tree: &'a BTreeMap<String, HostEntry>,
    what: &CompareWhat,
) -> BTreeMap<u64, BTreeSet<&'a str>> {
    let mut g: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for (k, e) in tree {
        if let Some(id) = e.hardlink_group {
            if !what.ignored(k) {
                g.entry(id).or_default().insert(k.as_str());
            }
        }
    }
    g
}

/// Compares two trees and lists every difference: missing and extra
/// entries, each differing field selected by `what`, and hard-link groups
/// (as a partition: the same sets of paths must share an inode, the group
/// ids themselves do not matter). `Err` holds a readable report.
pub fn compare_trees(
    expected: &BTreeMap<String, HostEntry>,
    actual: &BTreeMap<String, HostEntry>,
    what: CompareWhat,
) -> Result<(), String> {
    let mut diffs = Vec::new();
    for (k, e) in expected {
        if what.ignored(k) {
            continue;
        }
        match actual.get(k) {
            None => diffs.push(format!("{k:?}: missing ({:?})", e.kind)),
            Some(a) => diff_entry(k, e, a, &what, &mut diffs),
        }
    }
    for (k, a) in actual {
        if !what.ignored(k) && !expected.contains_key(k) {
            diffs.push(format!("{k:?}: extra ({:?})", a.kind));
        }
    }
    if what.hardlinks {
        let eg = groups_of(expected, &what);
        let ag = groups_of(actual, &what);
        let mut seen = BTreeSet::new();
        for k in expected.keys() {
            if what.ignored(k) || !actual.contains_key(k) {
                continue;
            }
            let es = link_set(k, expected, &eg);
            let acts = link_set(k, actual, &ag);
            if es != acts && seen.insert((es.clone(), acts.clone())) {
                diffs.push(format!(
                    "{k:?}: hard-link group: expected {es:?}, actual {acts:?}"
                ));
            }
        }
    }
    if diffs.is_empty() {
        return Ok(());
    }
    let mut report = format!(
        "{} difference(s) between expected ({} entries) and actual ({} entries) trees:\n",
        diffs.len(),
        expected.len(),
        actual.len()
    );
    for d in &diffs {
        let _ = writeln!(report, "  {d}");
    }
    Err(report)
}
