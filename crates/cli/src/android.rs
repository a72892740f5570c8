//! What `build` takes from an Android build, as sload.f2fs does: a canned
//! fs_config file (`-C`: owner, mode and capabilities by path) and SELinux
//! file_contexts (`-s`: a label by path and file type, chosen as
//! libselinux's label_file backend chooses it).

use regex::bytes::{Regex, RegexBuilder};
use std::path::Path;

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// One line of a canned fs_config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsConfigEntry {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits (0o7777): the type comes from the source tree.
    pub mode: u16,
    /// Capability mask; 0 for none.
    pub capabilities: u64,
}

/// A canned fs_config file, read as libcutils' load_canned_fs_config reads
/// it: `PATH UID GID MODE [capabilities=MASK] [other tokens, ignored]`,
/// tokens separated by spaces, PATH without its leading `/` (a line that
/// starts with a space is the root, path ""), UID and GID decimal, MODE
/// octal, MASK as strtoll base 0 reads it; for a path listed twice the
/// last line wins. Lookups are exact.
pub struct FsConfig {
    entries: std::collections::HashMap<Vec<u8>, FsConfigEntry>,
}

/// strtoll with base 0: `0x` hex, a leading `0` octal, else decimal.
fn parse_c_integer(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if text.len() > 1 && text.starts_with('0') {
        u64::from_str_radix(&text[1..], 8).ok()
    } else {
        text.parse().ok()
    }
}

impl FsConfig {
    pub fn load(path: &Path) -> Result<FsConfig, String> {
        let text = read(path)?;
        let mut entries = std::collections::HashMap::new();
        for (number, line) in text.split(|&b| b == b'\n').enumerate() {
            let bad = |what: &str| {
                format!(
                    "{}:{}: {what}: {:?}",
                    path.display(),
                    number + 1,
                    String::from_utf8_lossy(line)
                )
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let root = line[0] == b' ';
            let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
            let name = if root {
                &[][..]
            } else {
                let first = tokens.next().expect("the line is not blank");
                first.strip_prefix(b"/").unwrap_or(first)
            };
            let mut field = |what: &str| {
                tokens
                    .next()
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .map(str::trim_end)
                    .ok_or_else(|| bad(&format!("no {what}")))
            };
            let uid = field("uid")?
                .parse()
                .map_err(|_| bad("uid is not a number"))?;
            let gid = field("gid")?
                .parse()
                .map_err(|_| bad("gid is not a number"))?;
            let mode = u16::from_str_radix(field("mode")?, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| bad("mode is not octal 0..7777"))?;
            let mut capabilities = 0;
            for token in tokens {
                if let Some(mask) = token.trim_ascii_end().strip_prefix(b"capabilities=") {
                    capabilities = std::str::from_utf8(mask)
                        .ok()
                        .and_then(parse_c_integer)
                        .ok_or_else(|| bad("capabilities= is not a number"))?;
                }
            }
            entries.insert(
                name.to_vec(),
                FsConfigEntry {
                    uid,
                    gid,
                    mode,
                    capabilities,
                },
            );
        }
        Ok(FsConfig { entries })
    }

    /// The entry of `path` (one leading `/` is ignored, as canned_fs_config does).
    pub fn lookup(&self, path: &[u8]) -> Option<&FsConfigEntry> {
        self.entries.get(path.strip_prefix(b"/").unwrap_or(path))
    }
}

/// `security.capability` for a capability mask: `vfs_cap_data` revision 2
/// with the effective bit, the mask as permitted set, nothing inheritable
/// (what Android's image tools write).
pub fn capability_xattr(mask: u64) -> Vec<u8> {
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    const VFS_CAP_FLAGS_EFFECTIVE: u32 = 0x1;
    let words = [
        VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
        mask as u32,
        0,
        (mask >> 32) as u32,
        0,
    ];
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// One file_contexts line.
struct Spec {
    regex: Regex,
    source: Vec<u8>,
    /// The file type it applies to (S_IFMT bits), 0 for any.
    file_type: u32,
    /// None for `<<none>>`: the path gets no label.
    label: Option<Vec<u8>>,
    /// libselinux's hasMetaChars.
    has_meta: bool,
}

/// Whether a regex has a character libselinux 3.4 counts as meta
/// (spec_hasMetaChars: `.^$?*+|[({`, a backslash escaping the next one).
fn has_meta_chars(regex: &[u8]) -> bool {
    let mut bytes = regex.iter();
    while let Some(b) = bytes.next() {
        match b {
            b'.' | b'^' | b'$' | b'?' | b'*' | b'+' | b'|' | b'[' | b'(' | b'{' => return true,
            b'\\' => {
                bytes.next();
            }
            _ => {}
        }
    }
    false
}

fn file_type_of(flag: &[u8]) -> Option<u32> {
    Some(match flag {
        b"--" => libc::S_IFREG,
        b"-d" => libc::S_IFDIR,
        b"-l" => libc::S_IFLNK,
        b"-c" => libc::S_IFCHR,
        b"-b" => libc::S_IFBLK,
        b"-p" => libc::S_IFIFO,
        b"-s" => libc::S_IFSOCK,
        _ => return None,
    })
}

/// SELinux file_contexts, matched as libselinux 3.4's label_file backend
/// (sload.f2fs -s) matches them. Lines are `REGEX [TYPE] CONTEXT`, `#`
/// comments. The specs are ordered regex specs first, then the specs
/// without meta characters (plain paths), each group in file order
/// (sort_specs), and a lookup tries them from the last to the first: a
/// matching plain path wins over any regex, and among regexes the last
/// matching line wins, however specific an earlier one is. Each regex is
/// anchored as libselinux anchors it, `^REGEX$` (no group: `a|b` means
/// `^a` or `b$`); `.` matches any byte (PCRE2_DOTALL); the key has runs
/// of `/` collapsed to one first. The stem index libselinux keeps only
/// skips specs that cannot match, so it changes no result.
pub struct FileContexts {
    specs: Vec<Spec>,
}

pub enum Label<'a> {
    Context(&'a [u8]),
    /// `<<none>>`: leave the file unlabeled.
    None,
}

impl FileContexts {
    pub fn load(paths: &[&Path]) -> Result<FileContexts, String> {
        let mut specs: Vec<Spec> = Vec::new();
        for path in paths {
            let text = read(path)?;
            for (number, line) in text.split(|&b| b == b'\n').enumerate() {
                let bad = |what: String| format!("{}:{}: {what}", path.display(), number + 1);
                let fields: Vec<&[u8]> = line
                    .split(u8::is_ascii_whitespace)
                    .filter(|f| !f.is_empty())
                    .collect();
                if fields.first().is_none_or(|f| f.starts_with(b"#")) {
                    continue;
                }
                let (source, file_type, context) = match fields[..] {
                    [regex, context] => (regex, 0, context),
                    [regex, flag, context] => (
                        regex,
                        file_type_of(flag).ok_or_else(|| {
                            bad(format!(
                                "unknown file type {:?}",
                                String::from_utf8_lossy(flag)
                            ))
                        })?,
                        context,
                    ),
                    _ => return Err(bad("expected PATH_REGEX [TYPE] CONTEXT".into())),
                };
                let text = std::str::from_utf8(source)
                    .map_err(|_| bad("the regex is not UTF-8".into()))?;
                let regex = RegexBuilder::new(&format!("^{text}$"))
                    .unicode(false)
                    .dot_matches_new_line(true)
                    .build()
                    .map_err(|e| bad(format!("regex {text:?}: {e}")))?;
                let label = (context != b"<<none>>").then(|| context.to_vec());
                if let Some(other) = specs
                    .iter()
                    .find(|s| s.source == source && s.file_type == file_type)
                {
                    if other.label != label {
                        return Err(bad(format!(
                            "{text:?} is given two different contexts (libselinux refuses this)"
                        )));
                    }
                }
                specs.push(Spec {
                    regex,
                    source: source.to_vec(),
                    file_type,
                    label,
                    has_meta: has_meta_chars(source),
                });
            }
        }
        // Stable: each group keeps its file order.
        specs.sort_by_key(|s| !s.has_meta);
        Ok(FileContexts { specs })
    }

    /// The label of `path` for a file of type `mode & S_IFMT`; None when
    /// no line matches.
    pub fn lookup(&self, path: &[u8], mode: u32) -> Option<Label<'_>> {
        let mut key = Vec::with_capacity(path.len());
        for &b in path {
            if !(b == b'/' && key.last() == Some(&b'/')) {
                key.push(b);
            }
        }
        let file_type = mode & libc::S_IFMT;
        self.specs
            .iter()
            .rev()
            .find(|s| (s.file_type == 0 || s.file_type == file_type) && s.regex.is_match(&key))
            .map(|s| match &s.label {
                Some(context) => Label::Context(context),
                None => Label::None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contexts(text: &str) -> FileContexts {
        // One file per call: the tests run in parallel in one process.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("f2fuse-fc-{}-{call}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let fc = FileContexts::load(&[&path]);
        std::fs::remove_file(&path).unwrap();
        fc.unwrap()
    }

    fn label(fc: &FileContexts, path: &str, mode: u32) -> Option<String> {
        match fc.lookup(path.as_bytes(), mode)? {
            Label::Context(c) => Some(String::from_utf8(c.to_vec()).unwrap()),
            Label::None => Some("<<none>>".into()),
        }
    }

    #[test]
    fn plain_paths_win_then_the_last_regex() {
        let fc = contexts(
            "# comment\n\
             /bin/sh -- u:r:plain:s0\n\
             /bin(/.*)?  u:r:bin:s0\n\
             /.*         u:r:all:s0\n\
             /dir/sub/f  u:r:f:s0\n\
             /dir/sub/.* u:r:sub:s0\n\
             /dev/null -c u:r:null:s0\n\
             /x\\.y u:r:escaped:s0\n\
             /x.* u:r:xregex:s0\n\
             /none <<none>>\n",
        );
        let file = libc::S_IFREG;
        assert_eq!(label(&fc, "/bin/sh", file).unwrap(), "u:r:plain:s0");
        // `/.*` comes later than `/bin(/.*)?`: it wins for /bin and below.
        assert_eq!(label(&fc, "/bin", libc::S_IFDIR).unwrap(), "u:r:all:s0");
        assert_eq!(label(&fc, "/bin/other", file).unwrap(), "u:r:all:s0");
        assert_eq!(label(&fc, "/bin/sh", libc::S_IFLNK).unwrap(), "u:r:all:s0");
        assert_eq!(label(&fc, "/dir/sub/f", file).unwrap(), "u:r:f:s0");
        assert_eq!(label(&fc, "/dir/sub/g", file).unwrap(), "u:r:sub:s0");
        assert_eq!(
            label(&fc, "/dev/null", libc::S_IFCHR).unwrap(),
            "u:r:null:s0"
        );
        assert_eq!(label(&fc, "/dev/null", file).unwrap(), "u:r:all:s0");
        // An escaped dot is no meta character: a plain spec, ahead of regexes.
        assert_eq!(label(&fc, "/x.y", file).unwrap(), "u:r:escaped:s0");
        assert_eq!(label(&fc, "/xzy", file).unwrap(), "u:r:xregex:s0");
        assert_eq!(label(&fc, "//bin///sh", file).unwrap(), "u:r:plain:s0");
        assert_eq!(label(&fc, "/none", file).unwrap(), "<<none>>");
    }

    #[test]
    fn anchoring_is_libselinux_s() {
        let fc = contexts("/a|/b u:r:ab:s0\n");
        assert!(label(&fc, "/a/anything", 0).is_some());
        assert!(label(&fc, "/x/b", 0).is_some());
        assert!(label(&fc, "/x/c", 0).is_none());
    }

    #[test]
    fn fs_config_lines() {
        let path = std::env::temp_dir().join(format!("f2fuse-fsc-{}", std::process::id()));
        std::fs::write(
            &path,
            " 0 0 755 selabel=u:object_r:rootfs:s0 capabilities=0x0\n\
             system/bin 0 2000 751 capabilities=0x0\n\
             /system/bin/ping 0 2000 750 capabilities=0x2000 extra\n\
             system/bin 1 2 700\n",
        )
        .unwrap();
        let fc = FsConfig::load(&path).unwrap();
        std::fs::write(&path, "a 0 0\n").unwrap();
        let err = FsConfig::load(&path).err().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains(":1: no mode"), "{err}");
        assert_eq!(fc.lookup(b"").unwrap().mode, 0o755);
        let bin = fc.lookup(b"/system/bin").unwrap();
        assert_eq!((bin.uid, bin.gid, bin.mode), (1, 2, 0o700));
        assert_eq!(fc.lookup(b"system/bin/ping").unwrap().capabilities, 0x2000);
        assert!(fc.lookup(b"system").is_none());
        assert_eq!(
            capability_xattr(0x1_0000_2000),
            [0x01, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        );
    }
}
