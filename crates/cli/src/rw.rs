//! Helpers shared by the write commands: opening an image writable and
//! always unmounting it, paths as raw bytes, error texts, mode and owner
//! parsing, and copying host file data into the image with holes kept.

use f2fuse_engine::{Error, ErrorKind, FileKind, Fs, InodeInfo, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub const BLOCK: usize = 4096;

/// Opens `image` writable, runs `work`, and unmounts (a clean checkpoint)
/// whether or not `work` succeeded, so the image stays consistent. The
/// error of `work` wins over an unmount error.
pub fn with_image<R>(
    image: &Path,
    work: impl FnOnce(&Fs) -> Result<R, String>,
) -> Result<R, String> {
    let fs = open_rw(image)?;
    let result = work(&fs);
    let unmounted = fs
        .unmount()
        .map_err(|e| format!("{}: unmount: {}", image.display(), describe(&e)));
    match result {
        Ok(r) => unmounted.map(|()| r),
        Err(e) => Err(e),
    }
}

/// Opens an image for writing, holding the same lock a mount holds, so an
/// offline command never writes to a mounted image.
pub fn open_rw(image: &Path) -> Result<Fs, String> {
    if f2fuse_engine::is_sparse_file(image) {
        return Err(format!(
            "{}: an Android sparse image is read-only here: expand it with `f2fuse unsparse`, \
             or add a tree to it with `f2fuse build --sparse`",
            image.display()
        ));
    }
    Fs::open_path(
        image,
        OpenOptions {
            writable: true,
            lock: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("{}: {}", image.display(), describe(&e)))
}

/// Why the engine refused an operation, if it refused it (rather than
/// failing on the device or the image).
pub fn refusal_of(e: &Error) -> Option<ErrorKind> {
    e.is_refusal().then(|| e.kind())
}

/// strerror text without Rust's " (os error N)" tail.
pub fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

/// An engine error as text: for POSIX errors the context and the plain
/// strerror text, for anything else the engine's own description.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Refused { kind, context } if context.is_empty() => strerror(kind.errno()),
        Error::Refused { kind, context } => format!("{context}: {}", strerror(kind.errno())),
        Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
            format!("{e} (the disk holding the image is full)")
        }
        other => other.to_string(),
    }
}

/// `"{what}: {text}"` where text is the errno's message (ENOSPC gets a hint).
pub fn fail(what: &str, e: &Error) -> String {
    match refusal_of(e) {
        Some(ErrorKind::NoSpace) => format!("{what}: no space left in the image"),
        Some(kind) => format!("{what}: {}", strerror(kind.errno())),
        None => format!("{what}: {}", describe(e)),
    }
}

pub fn show(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// The non-empty components of an image path, without "." components.
pub fn components(path: &[u8]) -> Vec<&[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

/// The last component of a path (host or image), if it has one.
pub fn basename(path: &[u8]) -> Option<&[u8]> {
    components(path).last().copied().filter(|c| *c != b"..")
}

enum Walk {
    /// The directory at this path does not exist.
    Missing(String),
    /// This path is not a directory.
    NotDir(String),
    Other(Error),
}

/// Looks up `parts` from the root without following symlinks; returns the
/// inode number of the last one.
fn walk(fs: &Fs, parts: &[&[u8]]) -> Result<u32, Walk> {
    let mut ino = F2FS_ROOT_INO;
    for (i, part) in parts.iter().enumerate() {
        let here = || format!("/{}", show(&parts[..i].join(&b'/')));
        ino = match fs.lookup(ino, part) {
            Ok(entry) => entry.ino,
            Err(e) => {
                return Err(match refusal_of(&e) {
                    Some(ErrorKind::NotFound) => {
                        Walk::Missing(format!("/{}", show(&parts[..=i].join(&b'/'))))
                    }
                    Some(ErrorKind::NotADirectory) => Walk::NotDir(here()),
                    _ => Walk::Other(e),
                })
            }
        };
    }
    Ok(ino)
}

/// Resolves `path` without following symlinks. `Ok(None)` if the last
/// component does not exist; an error if a directory on the way is missing
/// or is not a directory.
pub fn resolve(fs: &Fs, path: &[u8]) -> Result<Option<InodeInfo>, String> {
    let parts = components(path);
    let (last, dirs) = match parts.split_last() {
        Some(split) => split,
        None => return fs.inode(F2FS_ROOT_INO).map(Some).map_err(|e| fail("/", &e)),
    };
    let dir = match walk(fs, dirs) {
        Ok(ino) => ino,
        Err(Walk::Missing(p)) => {
            return Err(format!("{}: directory {p} does not exist", show(path)))
        }
        Err(Walk::NotDir(p)) => return Err(format!("{}: {p} is not a directory", show(path))),
        Err(Walk::Other(e)) => return Err(fail(&show(path), &e)),
    };
    match fs.lookup(dir, last) {
        Ok(entry) => fs
            .inode(entry.ino)
            .map(Some)
            .map_err(|e| fail(&show(path), &e)),
        Err(e) if refusal_of(&e) == Some(ErrorKind::NotFound) => Ok(None),
        Err(e) if refusal_of(&e) == Some(ErrorKind::NotADirectory) => Err(format!(
            "{}: /{} is not a directory",
            show(path),
            show(&dirs.join(&b'/'))
        )),
        Err(e) => Err(fail(&show(path), &e)),
    }
}

/// Resolves a path that must exist.
pub fn existing(fs: &Fs, path: &[u8]) -> Result<InodeInfo, String> {
    resolve(fs, path)?.ok_or_else(|| format!("{}: no such file or directory", show(path)))
}

/// Where a new entry goes: its parent directory and its name, plus what is
/// there already.
pub struct Slot {
    pub parent: InodeInfo,
    pub name: Vec<u8>,
    pub existing: Option<InodeInfo>,
}

/// Splits `path` into parent and name; the parent must exist and be a directory.
pub fn slot(fs: &Fs, path: &[u8]) -> Result<Slot, String> {
    let parts = components(path);
    let Some((name, dirs)) = parts.split_last() else {
        return Err(format!("{}: is the root directory", show(path)));
    };
    if *name == b".." {
        return Err(format!("{}: cannot use \"..\" as a name", show(path)));
    }
    let parent_path = format!("/{}", show(&dirs.join(&b'/')));
    let parent = match walk(fs, dirs) {
        Ok(ino) => fs.inode(ino).map_err(|e| fail(&show(path), &e))?,
        Err(Walk::Missing(_)) => {
            return Err(format!(
                "{}: parent directory {parent_path} does not exist",
                show(path)
            ))
        }
        Err(Walk::NotDir(p)) => return Err(format!("{}: {p} is not a directory", show(path))),
        Err(Walk::Other(e)) => return Err(fail(&show(path), &e)),
    };
    if parent.kind != FileKind::Directory {
        return Err(format!("{}: {parent_path} is not a directory", show(path)));
    }
    let existing = match fs.lookup(parent.ino, name) {
        Ok(entry) => Some(fs.inode(entry.ino).map_err(|e| fail(&show(path), &e))?),
        Err(e) if refusal_of(&e) == Some(ErrorKind::NotFound) => None,
        Err(e) => return Err(fail(&show(path), &e)),
    };
    Ok(Slot {
        parent,
        name: name.to_vec(),
        existing,
    })
}

/// The caller's uid and gid (owners of entries made without a host file).
pub fn caller_ids() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Parses a mode: octal (`755`, `0644`, `4755`) or symbolic like chmod(1)
/// (`u+x`, `go-w`, `a=rX,u+s`), the latter applied to `current` (the
/// permission bits now; `is_dir` decides what `X` means).
pub fn parse_mode(text: &str, current: u16, is_dir: bool) -> Result<u16, String> {
    let bad = || {
        format!(
            "invalid mode {text:?}: expected octal (755, 0644, 4755) or symbolic (u+x, go-w, a=rX)"
        )
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match u16::from_str_radix(text, 8) {
            Ok(m) if m <= 0o7777 => Ok(m),
            _ => Err(bad()),
        };
    }
    let mut mode = current & 0o7777;
    if text.is_empty() {
        return Err(bad());
    }
    for clause in text.split(',') {
        let bytes = clause.as_bytes();
        let mut i = 0;
        let mut who = 0u16;
        while i < bytes.len() && b"ugoa".contains(&bytes[i]) {
            who |= match bytes[i] {
                b'u' => 0o4700,
                b'g' => 0o2070,
                b'o' => 0o1007,
                _ => 0o7777,
            };
            i += 1;
        }
        if who == 0 {
            who = 0o7777;
        }
        if i == bytes.len() {
            return Err(bad());
        }
        while i < bytes.len() {
            let op = bytes[i];
            if !b"+-=".contains(&op) {
                return Err(bad());
            }
            i += 1;
            let mut perm = 0u16;
            // A copy from another class: "g=u".
            if i < bytes.len() && b"ugo".contains(&bytes[i]) {
                let bits = match bytes[i] {
                    b'u' => (mode >> 6) & 7,
                    b'g' => (mode >> 3) & 7,
                    _ => mode & 7,
                };
                perm = bits | (bits << 3) | (bits << 6);
                i += 1;
            } else {
                while i < bytes.len() && b"rwxXst".contains(&bytes[i]) {
                    perm |= match bytes[i] {
                        b'r' => 0o444,
                        b'w' => 0o222,
                        b'x' => 0o111,
                        b'X' if is_dir || mode & 0o111 != 0 => 0o111,
                        b'X' => 0,
                        b's' => 0o6000,
                        _ => 0o1000,
                    };
                    i += 1;
                }
            }
            let affected = perm & who;
            match op {
                b'+' => mode |= affected,
                b'-' => mode &= !affected,
                _ => {
                    // "=" clears the class's rwx (and its special bit) first.
                    let class_bits = who & 0o777 | (who & 0o7000);
                    mode = (mode & !class_bits) | affected;
                }
            }
            if i < bytes.len() && !b"+-=".contains(&bytes[i]) {
                return Err(bad());
            }
        }
    }
    Ok(mode)
}

/// Parses `UID`, `UID:GID`, `UID:` (group unchanged) or `:GID`, numbers only.
pub fn parse_owner(text: &str) -> Result<(Option<u32>, Option<u32>), String> {
    let bad = || format!("invalid owner {text:?}: expected UID, UID:GID or :GID (numbers)");
    let num = |s: &str| -> Result<Option<u32>, String> {
        if s.is_empty() {
            Ok(None)
        } else if s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<u32>().map(Some).map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (uid, gid) = match text.split_once(':') {
        Some((u, g)) => (num(u)?, num(g)?),
        None => (num(text)?, None),
    };
    if uid.is_none() && gid.is_none() {
        return Err(bad());
    }
    Ok((uid, gid))
}

/// Copies a host file's data into regular file `ino` (assumed empty):
/// only blocks with a non-zero byte are written; holes of the host file
/// (SEEK_DATA/SEEK_HOLE) are not even read. The caller sets the size.
/// `progress` gets the number of bytes covered after each step.
pub fn copy_data(
    fs: &Fs,
    ino: u32,
    file: &File,
    size: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<(), CopyError> {
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    while pos < size {
        let (data_start, data_end) = match data_region(file, pos, size) {
            Some(region) => region,
            None => {
                progress(size - pos);
                return Ok(());
            }
        };
        // Skip the hole (block aligned, as SEEK_DATA reports file-system blocks).
        let data_start = data_start / BLOCK as u64 * BLOCK as u64;
        if data_start > pos {
            progress(data_start - pos);
            pos = data_start;
        }
        while pos < data_end {
            let want = ((data_end - pos) as usize).min(buf.len());
            let got = read_full(file, &mut buf[..want], pos).map_err(CopyError::Host)?;
            if got == 0 {
                return Ok(()); // The file shrank while we copied.
            }
            write_nonzero_runs(fs, ino, pos, &buf[..got]).map_err(CopyError::Image)?;
            progress(got as u64);
            pos += got as u64;
        }
    }
    Ok(())
}

pub enum CopyError {
    Host(std::io::Error),
    Image(Error),
}

/// The next data region at or after `pos`: (start, end), or None if only a
/// hole remains. Without SEEK_DATA support, all of the rest is data.
fn data_region(file: &File, pos: u64, size: u64) -> Option<(u64, u64)> {
    let fd = file.as_raw_fd();
    // SAFETY: lseek on an open descriptor.
    let start = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
    if start < 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENXIO) => None,
            _ => Some((pos, size)),
        };
    }
    let start = (start as u64).max(pos);
    if start >= size {
        return None;
    }
    // SAFETY: as above.
    let end = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
    let end = if end < 0 {
        size
    } else {
        (end as u64).min(size)
    };
    Some((start, end.max(start + 1)))
}

fn read_full(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes the 4 KiB blocks of `data` (at block-aligned `offset`) that hold a
/// non-zero byte, merging neighbours into one write.
fn write_nonzero_runs(fs: &Fs, ino: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
    let mut run_start: Option<usize> = None;
    let mut at = 0;
    while at < data.len() {
        let end = (at + BLOCK).min(data.len());
        let nonzero = data[at..end].iter().any(|&b| b != 0);
        match (nonzero, run_start) {
            (true, None) => run_start = Some(at),
            (false, Some(s)) => {
                fs.write(ino, offset + s as u64, &data[s..at])?;
                run_start = None;
            }
            _ => {}
        }
        at = end;
    }
    if let Some(s) = run_start {
        fs.write(ino, offset + s as u64, &data[s..])?;
    }
    Ok(())
}

/// The extended attributes of a host path (not following symlinks), in the
/// order the host lists them. A host file system without xattrs gives none.
pub fn host_xattrs(path: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut names = vec![0u8; 1024];
    let len = loop {
        // SAFETY: a valid C string and a writable buffer of the given length.
        let r = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if r >= 0 {
            break r as usize;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    };
    let mut out = Vec::new();
    for name in names[..len].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = std::ffi::CString::new(name).expect("split at NUL");
        let mut value = vec![0u8; 256];
        loop {
            // SAFETY: valid C strings and a writable buffer of the given length.
            let r = unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    cname.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            if r >= 0 {
                value.truncate(r as usize);
                out.push((name.to_vec(), value));
                break;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => value.resize(value.len() * 4, 0),
                Some(libc::ENODATA) => break, // Removed meanwhile.
                _ => return Err(e),
            }
        }
    }
    Ok(out)
}

/// Why an xattr name cannot be stored, or None if it can.
pub fn xattr_name_problem(name: &[u8]) -> Option<String> {
    if name.starts_with(b"system.posix_acl_") {
        return Some(format!(
            "{}: POSIX ACLs are not supported (the engine does not convert them to the F2FS format)",
            show(name)
        ));
    }
    if f2fuse_layout::xattr::split_name(name).is_none() {
        return Some(format!(
            "unsupported xattr namespace in {:?}: names must start with user., trusted. or security. and have a name after the prefix",
            show(name)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(parse_mode("755", 0, false), Ok(0o755));
        assert_eq!(parse_mode("04755", 0, false), Ok(0o4755));
        assert!(parse_mode("8", 0, false).is_err());
        assert!(parse_mode("77777", 0, false).is_err());
        assert!(parse_mode("", 0, false).is_err());
        assert!(parse_mode("abc", 0, false).is_err());
        assert!(parse_mode("u", 0, false).is_err());
        assert!(parse_mode("u+q", 0, false).is_err());
        assert_eq!(parse_mode("u+x", 0o644, false), Ok(0o744));
        assert_eq!(parse_mode("go-w", 0o666, false), Ok(0o644));
        assert_eq!(parse_mode("a=rX", 0o600, false), Ok(0o444));
        assert_eq!(parse_mode("a=rX", 0o600, true), Ok(0o555));
        assert_eq!(parse_mode("+x", 0o644, false), Ok(0o755));
        assert_eq!(parse_mode("u+s,g+s", 0o755, false), Ok(0o6755));
        assert_eq!(parse_mode("+t", 0o777, true), Ok(0o1777));
        assert_eq!(parse_mode("o=", 0o757, false), Ok(0o750));
        assert_eq!(parse_mode("g=u", 0o700, false), Ok(0o770));
        assert_eq!(parse_mode("u=rw,go=r", 0o4777, false), Ok(0o644));
        assert_eq!(parse_mode("u+x-w", 0o644, false), Ok(0o544));
    }

    #[test]
    fn owners() {
        assert_eq!(parse_owner("1000"), Ok((Some(1000), None)));
        assert_eq!(parse_owner("1000:50"), Ok((Some(1000), Some(50))));
        assert_eq!(parse_owner(":50"), Ok((None, Some(50))));
        assert_eq!(parse_owner("7:"), Ok((Some(7), None)));
        assert!(parse_owner("bob").is_err());
        assert!(parse_owner(":").is_err());
        assert!(parse_owner("").is_err());
        assert!(parse_owner("1:2:3").is_err());
        assert!(parse_owner("99999999999").is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(components(b"/a//b/./c/"), vec![&b"a"[..], b"b", b"c"]);
        assert_eq!(basename(b"x/y/"), Some(&b"y"[..]));
        assert_eq!(basename(b"/"), None);
        assert_eq!(basename(b"a/.."), None);
    }
}
