//! Reports for people and programs: the file system's status (what the
//! kernel's /sys/kernel/debug/f2fs/status shows, adapted) and a file's
//! extents (what `filefrag -v` shows), each as text and as JSON.
//!
//! The facade builds them (`Fs::status`, `Fs::file_extents`); this module
//! only holds and renders them, so any front end (the CLI on an image, a
//! mount's control channel) prints the same thing.

use crate::data::{Extent, ExtentPlace};
use crate::device::{IoKind, IoStats};
use crate::extent_cache::ExtentCacheStats;
use crate::gc::GcStats;
use crate::node::NodeCacheStats;
use crate::segment::{AllocStats, SegmentCounts};
use f2fuse_layout::{CursegType, F2FS_BLKSIZE};
use std::fmt::{self, Write as _};

/// A JSON value, enough to write reports (no parser: readers bring their own).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(u64),
    /// Non-finite values are written as `null`.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// Members in the order given.
    Object(Vec<(&'static str, Json)>),
}

fn write_json_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Int(n) => write!(f, "{n}"),
            Json::Float(x) if x.is_finite() => write!(f, "{x}"),
            Json::Float(_) => f.write_str("null"),
            Json::Str(s) => write_json_string(f, s),
            Json::Array(items) => {
                f.write_char('[')?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_char(']')
            }
            Json::Object(members) => {
                f.write_char('{')?;
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write_json_string(f, key)?;
                    write!(f, ":{value}")?;
                }
                f.write_char('}')
            }
        }
    }
}

/// One log's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStatus {
    /// Which log.
    pub log: CursegType,
    /// The segment it writes.
    pub segno: u32,
    /// The next block the log writes in its segment.
    pub next_blkoff: u16,
    /// Slack space recycling (filling holes of a dirty segment) rather than
    /// log-structured appending to a free one.
    pub ssr: bool,
}

impl LogStatus {
    /// "SSR" or "LFS".
    pub fn mode(&self) -> &'static str {
        if self.ssr {
            "SSR"
        } else {
            "LFS"
        }
    }
}

/// The state of a file system and what it has done since it was opened.
/// Layout figures are current; counters start at zero at each open.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// Opened for writing.
    pub writable: bool,
    /// Segments in the main area.
    pub main_segments: u32,
    /// Segments per section.
    pub segs_per_sec: u32,
    /// Sections with no valid block.
    pub free_sections: u32,
    /// Segments by state.
    pub segments: SegmentCounts,
    /// Blocks users may fill (main area minus overprovisioning).
    pub user_blocks: u64,
    /// Blocks in use, data and node, as the checkpoint counts them.
    pub valid_blocks: u64,
    /// Valid node blocks.
    pub valid_nodes: u32,
    /// Valid inodes.
    pub valid_inodes: u32,
    /// The six logs in `CursegType::ALL` order.
    pub logs: Vec<LogStatus>,
    /// Blocks allocated, by log and mode.
    pub alloc: AllocStats,
    /// Cleaning done.
    pub gc: GcStats,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Node cache lookups.
    pub node_cache: NodeCacheStats,
    /// Read extent cache lookups (the on-disk `i_ext` is not used: it is
    /// cleared whenever a mapping changes).
    pub extent_cache: ExtentCacheStats,
    /// Device I/O, by kind.
    pub io: IoStats,
    /// Bytes callers passed to `write` and got accepted.
    pub user_bytes_written: u64,
    /// Bytes `read` returned to callers.
    pub user_bytes_read: u64,
}

impl Status {
    /// Valid blocks as a percentage of user blocks.
    pub fn utilization_percent(&self) -> f64 {
        if self.user_blocks == 0 {
            0.0
        } else {
            self.valid_blocks as f64 * 100.0 / self.user_blocks as f64
        }
    }

    /// Device bytes written per user byte written; `None` before any user write.
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_bytes_written > 0)
            .then(|| self.io.total_written() as f64 / self.user_bytes_written as f64)
    }

    /// As `f2fuse status` prints it.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        let s = &self.segments;
        line(format!(
            "Main area: {} segments, {} sections ({} segment{} each); opened {}",
            self.main_segments,
            self.main_segments / self.segs_per_sec.max(1),
            self.segs_per_sec,
            if self.segs_per_sec == 1 { "" } else { "s" },
            if self.writable {
                "read-write"
            } else {
                "read-only"
            }
        ));
        line(format!(
            "  - free: {}, prefree: {}, dirty: {}, full: {} (current: {})",
            s.free, s.prefree, s.dirty, s.full, s.current
        ));
        line(format!("  - free sections: {}", self.free_sections));
        line(format!(
            "Utilization: {:.1}% ({} valid blocks of {} user blocks)",
            self.utilization_percent(),
            self.valid_blocks,
            self.user_blocks
        ));
        line(format!(
            "  - valid nodes: {}, valid inodes: {}",
            self.valid_nodes, self.valid_inodes
        ));
        line(
            "Logs:         segment  next block  mode  LFS blocks  SSR blocks  data in place  \
             data out of place"
                .into(),
        );
        for l in &self.logs {
            let i = l.log as usize;
            line(format!(
                "  {:<10} {:>9}  {:>10}  {:<4}  {:>10}  {:>10}  {:>13}  {:>17}",
                l.log.name(),
                l.segno,
                l.next_blkoff,
                l.mode(),
                self.alloc.lfs_blocks[i],
                self.alloc.ssr_blocks[i],
                self.alloc.in_place_writes[i],
                self.alloc.out_of_place_writes[i]
            ));
        }
        line(format!(
            "  - new segments opened: {}, switches to SSR: {}",
            self.alloc.segments_opened, self.alloc.ssr_switches
        ));
        line(format!("Checkpoints written: {}", self.checkpoints));
        let gc = &self.gc;
        line(format!(
            "GC: foreground runs {}, background runs {}, sections cleaned {}",
            gc.foreground_runs, gc.background_runs, gc.sections_cleaned
        ));
        line(format!(
            "  - blocks moved: data {}, node {}; victims left to pinned files {}",
            gc.data_blocks_moved, gc.node_blocks_moved, gc.pinned_sections_skipped
        ));
        let ec = &self.extent_cache;
        line(format!(
            "Read extent cache: hits {}, misses {}",
            ec.hits, ec.misses
        ));
        let nc = &self.node_cache;
        line(format!(
            "Node cache: dirty hits {}, clean hits {}, misses (device reads) {}",
            nc.dirty_hits, nc.clean_hits, nc.misses
        ));
        line("I/O (bytes):          read        written".into());
        for kind in IoKind::ALL {
            line(format!(
                "  {:<10} {:>14} {:>14}",
                kind.name(),
                self.io.read_of(kind),
                self.io.written_of(kind)
            ));
        }
        line(format!(
            "  {:<10} {:>14} {:>14}",
            "total",
            self.io.total_read(),
            self.io.total_written()
        ));
        line(format!("  - flushes: {}", self.io.flushes));
        line(format!(
            "User bytes: read {}, written {}",
            self.user_bytes_read, self.user_bytes_written
        ));
        line(match self.write_amplification() {
            Some(wa) => {
                format!("Write amplification: {wa:.3} (device bytes written / user bytes written)")
            }
            None => "Write amplification: n/a (no user bytes written)".into(),
        });
        out
    }

    /// As `f2fuse status --json` prints it.
    pub fn to_json(&self) -> Json {
        let int = Json::Int;
        let per_kind = |values: &[u64]| {
            Json::Object(
                IoKind::ALL
                    .iter()
                    .map(|&k| (json_key(k), int(values[k as usize])))
                    .collect(),
            )
        };
        let s = &self.segments;
        Json::Object(vec![
            ("writable", Json::Bool(self.writable)),
            ("main_segments", int(self.main_segments as u64)),
            ("segs_per_sec", int(self.segs_per_sec as u64)),
            ("free_sections", int(self.free_sections as u64)),
            (
                "segments",
                Json::Object(vec![
                    ("free", int(s.free as u64)),
                    ("prefree", int(s.prefree as u64)),
                    ("dirty", int(s.dirty as u64)),
                    ("full", int(s.full as u64)),
                    ("current", int(s.current as u64)),
                ]),
            ),
            ("user_blocks", int(self.user_blocks)),
            ("valid_blocks", int(self.valid_blocks)),
            ("valid_nodes", int(self.valid_nodes as u64)),
            ("valid_inodes", int(self.valid_inodes as u64)),
            (
                "utilization_percent",
                Json::Float(self.utilization_percent()),
            ),
            (
                "logs",
                Json::Array(
                    self.logs
                        .iter()
                        .map(|l| {
                            Json::Object(vec![
                                ("log", Json::Str(l.log.name().into())),
                                ("segno", int(l.segno as u64)),
                                ("next_blkoff", int(l.next_blkoff as u64)),
                                ("mode", Json::Str(l.mode().into())),
                                ("lfs_blocks", int(self.alloc.lfs_blocks[l.log as usize])),
                                ("ssr_blocks", int(self.alloc.ssr_blocks[l.log as usize])),
                                (
                                    "data_in_place",
                                    int(self.alloc.in_place_writes[l.log as usize]),
                                ),
                                (
                                    "data_out_of_place",
                                    int(self.alloc.out_of_place_writes[l.log as usize]),
                                ),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("segments_opened", int(self.alloc.segments_opened)),
            ("ssr_switches", int(self.alloc.ssr_switches)),
            ("checkpoints", int(self.checkpoints)),
            (
                "gc",
                Json::Object(vec![
                    ("foreground_runs", int(self.gc.foreground_runs)),
                    ("background_runs", int(self.gc.background_runs)),
                    ("sections_cleaned", int(self.gc.sections_cleaned)),
                    ("data_blocks_moved", int(self.gc.data_blocks_moved)),
                    ("node_blocks_moved", int(self.gc.node_blocks_moved)),
                    (
                        "pinned_sections_skipped",
                        int(self.gc.pinned_sections_skipped),
                    ),
                ]),
            ),
            (
                "extent_cache",
                Json::Object(vec![
                    ("hits", int(self.extent_cache.hits)),
                    ("misses", int(self.extent_cache.misses)),
                ]),
            ),
            (
                "node_cache",
                Json::Object(vec![
                    ("dirty_hits", int(self.node_cache.dirty_hits)),
                    ("clean_hits", int(self.node_cache.clean_hits)),
                    ("misses", int(self.node_cache.misses)),
                ]),
            ),
            (
                "io",
                Json::Object(vec![
                    ("read", per_kind(&self.io.read)),
                    ("written", per_kind(&self.io.written)),
                    ("total_read", int(self.io.total_read())),
                    ("total_written", int(self.io.total_written())),
                    ("flushes", int(self.io.flushes)),
                ]),
            ),
            ("user_bytes_read", int(self.user_bytes_read)),
            ("user_bytes_written", int(self.user_bytes_written)),
            (
                "write_amplification",
                self.write_amplification().map_or(Json::Null, Json::Float),
            ),
        ])
    }
}

fn json_key(kind: IoKind) -> &'static str {
    match kind {
        IoKind::UserData => "user_data",
        IoKind::DirData => "dir_data",
        IoKind::Node => "node",
        IoKind::Meta => "meta",
        IoKind::GcData => "gc_data",
        IoKind::InPlaceData => "in_place_data",
    }
}

/// A file's extents, as `filefrag -v` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileExtents {
    /// The file's path.
    pub path: String,
    /// Its inode number.
    pub ino: u32,
    /// Its size in bytes.
    pub size: u64,
    /// `i_blocks`: 4 KiB blocks held, the inode and other nodes included.
    pub blocks: u64,
    /// Data kept in the inode itself (inline data or inline dentries): no extents.
    pub inline: bool,
    /// The extents in file order.
    pub extents: Vec<Extent>,
}

impl FileExtents {
    fn flags(&self, index: usize) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if self.extents[index].place == ExtentPlace::Unwritten {
            flags.push("unwritten");
        }
        if index + 1 == self.extents.len() {
            flags.push("last");
        }
        flags
    }

    fn count_line(&self) -> String {
        let n = self.extents.len();
        format!(
            "{}: {n} extent{} found",
            self.path,
            if n == 1 { "" } else { "s" }
        )
    }

    /// As `f2fuse extents` prints it.
    pub fn to_text(&self) -> String {
        let bs = F2FS_BLKSIZE as u64;
        let mut out = format!(
            "File size of {} is {} ({} block{} of {bs} bytes), inode {}, {} blocks held\n",
            self.path,
            self.size,
            self.size.div_ceil(bs),
            if self.size.div_ceil(bs) == 1 { "" } else { "s" },
            self.ino,
            self.blocks
        );
        if self.inline {
            out.push_str("inline: the data is in the inode, no extents\n");
        } else {
            out.push_str(" ext:     logical_offset:        physical_offset: length:   flags:\n");
        }
        for (i, e) in self.extents.iter().enumerate() {
            let physical = match e.place {
                ExtentPlace::Blocks(start) => {
                    format!("{:>10}..{:>10}", start, start as u64 + e.len - 1)
                }
                ExtentPlace::Unwritten => format!("{:>22}", "-"),
            };
            let _ = writeln!(
                out,
                "{i:>4}: {:>10}..{:>10}: {physical}: {:>6}:   {}",
                e.logical,
                e.logical + e.len - 1,
                e.len,
                self.flags(i).join(",")
            );
        }
        out.push_str(&self.count_line());
        out.push('\n');
        out
    }

    /// As `f2fuse extents --json` prints it.
    pub fn to_json(&self) -> Json {
        let int = Json::Int;
        Json::Object(vec![
            ("path", Json::Str(self.path.clone())),
            ("ino", int(self.ino as u64)),
            ("size", int(self.size)),
            ("blocks", int(self.blocks)),
            ("inline", Json::Bool(self.inline)),
            ("extent_count", int(self.extents.len() as u64)),
            (
                "extents",
                Json::Array(
                    self.extents
                        .iter()
                        .enumerate()
                        .map(|(i, e)| {
                            Json::Object(vec![
                                ("logical", int(e.logical)),
                                (
                                    "physical",
                                    match e.place {
                                        ExtentPlace::Blocks(start) => int(start as u64),
                                        ExtentPlace::Unwritten => Json::Null,
                                    },
                                ),
                                ("length", int(e.len)),
                                (
                                    "flags",
                                    Json::Array(
                                        self.flags(i)
                                            .into_iter()
                                            .map(|f| Json::Str(f.into()))
                                            .collect(),
                                    ),
                                ),
                            ])
                        })
                        .collect(),
                ),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_and_nests() {
        let value = Json::Object(vec![
            ("s", Json::Str("a\"b\\c\n\u{1}é".into())),
            (
                "n",
                Json::Array(vec![Json::Int(1), Json::Null, Json::Bool(false)]),
            ),
            ("x", Json::Float(1.5)),
            ("bad", Json::Float(f64::NAN)),
        ]);
        assert_eq!(
            value.to_string(),
            r#"{"s":"a\"b\\c\n\u0001é","n":[1,null,false],"x":1.5,"bad":null}"#
        );
    }

    #[test]
    fn extent_flags_mark_unwritten_and_last() {
        let report = FileExtents {
            path: "/f".into(),
            ino: 4,
            size: 5 * 4096,
            blocks: 4,
            inline: false,
            extents: vec![
                Extent {
                    logical: 0,
                    len: 2,
                    place: ExtentPlace::Blocks(100),
                },
                Extent {
                    logical: 3,
                    len: 2,
                    place: ExtentPlace::Unwritten,
                },
            ],
        };
        assert_eq!(report.flags(0), Vec::<&str>::new());
        assert_eq!(report.flags(1), vec!["unwritten", "last"]);
        let text = report.to_text();
        assert!(text.contains("100..       101"), "{text}");
        assert!(text.ends_with("/f: 2 extents found\n"), "{text}");
        assert!(report
            .to_json()
            .to_string()
            .contains(r#"{"logical":3,"physical":null,"length":2,"flags":["unwritten","last"]}"#));
    }
}
