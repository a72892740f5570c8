//! Host-side tree model and `lstat`-based scanner.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::hash::{content_hash_of_file, ContentHasher};

/// Kind of a tree entry (the file-type part of `st_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A regular file.
    #[default]
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
    /// A unix socket.
    Socket,
}

impl Kind {
    /// From a full `st_mode` / `i_mode` (`S_IFMT` bits).
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFSOCK => Kind::Socket,
            _ => return None,
        })
    }
}

/// One entry of a tree, as seen on the host (or rebuilt from an image by
/// the reader under test, which must fill the fields the same way).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEntry {
    /// Relative, '/'-separated, "" for the root; each component is
    /// [`escape_name`] of the raw name bytes (see [`join_key`]).
    pub path: String,
    /// The entry's type.
    pub kind: Kind,
    /// Permission bits including suid/sgid/sticky (`mode & 0o7777`).
    pub mode: u32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// `st_size` (symlinks: target length; directories: file-system
    /// specific, normally not compared).
    pub size: u64,
    /// (seconds, nanoseconds) of the modification time.
    pub mtime: (i64, u32),
    /// Regular files: [`super::ContentHasher`] over the contents, holes read
    /// as zeros. `None` for everything else.
    pub content_hash: Option<u64>,
    /// Symlinks: the raw target bytes.
    pub link_target: Option<Vec<u8>>,
    /// Full names like `b"user.foo"` -> value.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Link count (`st_nlink`).
    pub nlink: u32,
    /// Regular files with `nlink > 1`: an id shared by all paths of the same
    /// inode (the host inode number here). Compared as a partition.
    pub hardlink_group: Option<u64>,
}

/// Turns raw name bytes into a path-key component: valid UTF-8 is kept as
/// is except `\` which becomes `\\`; every byte of an invalid UTF-8 sequence
/// becomes `\xNN` (lower-case hex). The mapping is injective, so keys from
/// the host and from the image match iff the raw names match.
pub fn escape_name(mut bytes: &[u8]) -> String {
    fn push_escaped(out: &mut String, s: &str) {
        for c in s.chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
    }
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                push_escaped(&mut out, s);
                return out;
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                push_escaped(&mut out, std::str::from_utf8(good).expect("valid prefix"));
                let bad = e.error_len().unwrap_or(rest.len());
                for b in &rest[..bad] {
                    let _ = write!(out, "\\x{b:02x}");
                }
                bytes = &rest[bad..];
            }
        }
    }
}

/// Path key of `name` inside the directory whose key is `parent`.
pub fn join_key(parent: &str, name: &[u8]) -> String {
    if parent.is_empty() {
        escape_name(name)
    } else {
        format!("{parent}/{}", escape_name(name))
    }
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

/// All extended attributes of `path` (not following symlinks). File systems
/// without xattr support give an empty map.
pub fn read_xattrs(path: &Path) -> io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let c = cpath(path);
    let mut out = BTreeMap::new();
    let mut names = vec![0u8; 1024];
    let len = loop {
        // SAFETY: buffer pointer/length describe a valid writable buffer.
        let r = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(out),
            _ => return Err(e),
        }
    };
    for name in names[..len].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name).expect("xattr name without NUL");
        let mut val = vec![0u8; 256];
        let vlen = loop {
            // SAFETY: as above.
            let r = unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    cname.as_ptr(),
                    val.as_mut_ptr().cast(),
                    val.len(),
                )
            };
            if r >= 0 {
                break Some(r as usize);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => val.resize(val.len() * 4, 0),
                Some(libc::ENODATA) => break None, // removed meanwhile
                _ => return Err(e),
            }
        };
        if let Some(vlen) = vlen {
            val.truncate(vlen);
            out.insert(name.to_vec(), val);
        }
    }
    Ok(out)
}

/// One entry from `lstat` data (no recursion).
pub fn scan_entry(key: &str, path: &Path) -> io::Result<HostEntry> {
    let md = fs::symlink_metadata(path)?;
    let ft = md.file_type();
    let kind = if ft.is_file() {
        Kind::File
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else if ft.is_socket() {
        Kind::Socket
    } else {
        return Err(io::Error::other(format!(
            "unknown file type: {}",
            path.display()
        )));
    };
    let content_hash = if kind == Kind::File && md.len() == 0 {
        // Not opened: lets a non-root scan cover empty mode-0000 files.
        Some(ContentHasher::new().finish())
    } else if kind == Kind::File {
        let mut f = fs::File::open(path)?;
        Some(content_hash_of_file(&mut f, md.len())?)
    } else {
        None
    };
    let link_target = if kind == Kind::Symlink {
        Some(fs::read_link(path)?.into_os_string().into_vec())
    } else {
        None
    };
    let nlink = u32::try_from(md.nlink()).unwrap_or(u32::MAX);
    Ok(HostEntry {
        path: key.to_string(),
        kind,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        content_hash,
        link_target,
        xattrs: read_xattrs(path)?,
        nlink,
        hardlink_group: (kind == Kind::File && nlink > 1).then_some(md.ino()),
    })
}

/// Scans the tree under `root` (included as key ""), never following
/// symlinks. Panics with the offending path on I/O errors.
pub fn scan_host_tree(root: &Path) -> BTreeMap<String, HostEntry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), root.to_path_buf())];
    while let Some((key, path)) = stack.pop() {
        let e = scan_entry(&key, &path).unwrap_or_else(|e| panic!("scan {}: {e}", path.display()));
        if e.kind == Kind::Dir {
            let rd =
                fs::read_dir(&path).unwrap_or_else(|e| panic!("read_dir {}: {e}", path.display()));
            for de in rd {
                let de = de.unwrap_or_else(|e| panic!("read_dir {}: {e}", path.display()));
                let name = de.file_name();
                stack.push((join_key(&key, name.as_bytes()), de.path()));
            }
        }
        out.insert(key, e);
    }
    out
}
