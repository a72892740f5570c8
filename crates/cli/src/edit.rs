//! Namespace and attribute changes inside an image: mkdir, rm, mv, ln,
//! chmod, chown, setfattr. Each opens the image writable, makes its change
//! and unmounts cleanly (see `rw::with_image`).

use crate::rw::{self, fail, refusal_of, show, with_image};
use clap::Args;
use f2fuse_engine::{ErrorKind, FileKind, Fs, RenameFlags, SetAttr, SetMode};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Args)]
pub struct MkdirArgs {
    /// Create missing parents too; no error if the directory exists.
    #[arg(short = 'p', long)]
    pub parents: bool,
    pub image: PathBuf,
    pub path: OsString,
    /// Permission bits: octal (755) or symbolic (u=rwx,go=rx, relative to a=rwx).
    #[arg(short = 'm', long, default_value = "755")]
    pub mode: String,
}

pub fn mkdir(args: &MkdirArgs) -> Result<(), String> {
    let perm = rw::parse_mode(&args.mode, 0o777, true)?;
    let path = args.path.as_bytes();
    let (uid, gid) = rw::caller_ids();
    with_image(&args.image, |fs| {
        if !args.parents {
            let slot = rw::slot(fs, path)?;
            if slot.existing.is_some() {
                return Err(format!("{}: already exists", show(path)));
            }
            fs.mkdir(slot.parent.ino, &slot.name, perm, uid, gid)
                .map_err(|e| fail(&show(path), &e))?;
            return Ok(());
        }
        let parts = rw::components(path);
        if parts.iter().any(|p| *p == b"..") {
            return Err(format!("{}: \"..\" is not allowed with -p", show(path)));
        }
        let mut dir = f2fuse_layout::F2FS_ROOT_INO;
        for (i, part) in parts.iter().enumerate() {
            let here = format!("/{}", show(&parts[..=i].join(&b'/')));
            dir = match fs.lookup(dir, part) {
                Ok(entry) => {
                    if entry.kind != FileKind::Directory {
                        return Err(format!(
                            "{}: {here} exists and is not a directory",
                            show(path)
                        ));
                    }
                    entry.ino
                }
                Err(e) if refusal_of(&e) == Some(ErrorKind::NotFound) => {
                    // Parents get 0755 (u+wx over the default), the last one the mode asked for.
                    let mode = if i + 1 == parts.len() { perm } else { 0o755 };
                    fs.mkdir(dir, part, mode, uid, gid)
                        .map_err(|e| fail(&here, &e))?
                        .ino
                }
                Err(e) => return Err(fail(&here, &e)),
            };
        }
        Ok(())
    })
}

#[derive(Args)]
pub struct RmArgs {
    /// Remove directories and everything in them.
    #[arg(short = 'r', short_alias = 'R', long)]
    pub recursive: bool,
    pub image: PathBuf,
    pub path: OsString,
}

/// Removes a file, symlink or special file; an empty directory; with -r a
/// whole tree.
pub fn rm(args: &RmArgs) -> Result<(), String> {
    let path = args.path.as_bytes();
    if rw::components(path).is_empty() {
        return Err("cannot remove the root directory".into());
    }
    with_image(&args.image, |fs| {
        let slot = rw::slot(fs, path)?;
        let Some(target) = slot.existing else {
            return Err(format!("{}: no such file or directory", show(path)));
        };
        if target.kind != FileKind::Directory {
            return fs
                .unlink(slot.parent.ino, &slot.name)
                .map_err(|e| fail(&show(path), &e));
        }
        if args.recursive {
            remove_tree(fs, target.ino, path)?;
        }
        fs.rmdir(slot.parent.ino, &slot.name)
            .map_err(|e| match refusal_of(&e) {
                Some(ErrorKind::NotEmpty) => format!(
                    "{}: directory not empty (use -r to remove it and its contents)",
                    show(path)
                ),
                _ => fail(&show(path), &e),
            })
    })
}

/// Empties directory `dir` (depth first).
fn remove_tree(fs: &Fs, dir: u32, path: &[u8]) -> Result<(), String> {
    let entries = fs.read_dir(dir).map_err(|e| fail(&show(path), &e))?;
    for entry in entries {
        if entry.name == b"." || entry.name == b".." {
            continue;
        }
        let child = [path, b"/", &entry.name].concat();
        if entry.kind == FileKind::Directory {
            remove_tree(fs, entry.ino, &child)?;
            fs.rmdir(dir, &entry.name)
        } else {
            fs.unlink(dir, &entry.name)
        }
        .map_err(|e| fail(&show(&child), &e))?;
    }
    Ok(())
}

#[derive(Args)]
pub struct MvArgs {
    pub image: PathBuf,
    pub from: OsString,
    /// New path, or an existing directory to move FROM into.
    pub to: OsString,
}

/// Renames like mv(1): into TO if it is a directory, else to TO (replacing
/// a file, or an empty directory when moving a directory).
pub fn mv(args: &MvArgs) -> Result<(), String> {
    let from = args.from.as_bytes();
    let to = args.to.as_bytes();
    with_image(&args.image, |fs| {
        let src = rw::slot(fs, from)?;
        let Some(moving) = &src.existing else {
            return Err(format!("{}: no such file or directory", show(from)));
        };
        // A path that cannot resolve is reported by `slot` below.
        let dest_path = match rw::resolve(fs, to).ok().flatten() {
            Some(d) if d.kind == FileKind::Directory && d.ino != moving.ino => {
                [to, b"/", &src.name].concat()
            }
            None if to.ends_with(b"/") && rw::resolve(fs, to).is_ok() => {
                return Err(format!("{}: no such directory", show(to)));
            }
            _ => to.to_vec(),
        };
        let dest = rw::slot(fs, &dest_path)?;
        let shown = show(&dest_path).replace("//", "/");
        fs.rename(
            src.parent.ino,
            &src.name,
            dest.parent.ino,
            &dest.name,
            RenameFlags::default(),
        )
        .map_err(|e| match refusal_of(&e) {
            Some(ErrorKind::InvalidArgument) => format!(
                "cannot move {} to {shown}: a directory cannot move into itself",
                show(from)
            ),
            Some(ErrorKind::NotEmpty) => format!("{shown}: directory not empty"),
            Some(ErrorKind::IsADirectory) => format!(
                "cannot move {} to {shown}: a file cannot replace a directory",
                show(from)
            ),
            Some(ErrorKind::NotADirectory) => format!(
                "cannot move {} to {shown}: a directory cannot replace a file",
                show(from)
            ),
            _ => fail(&format!("mv {} {shown}", show(from)), &e),
        })
    })
}

#[derive(Args)]
pub struct LnArgs {
    /// Make a symbolic link (TARGET is stored as text) instead of a hard link.
    #[arg(short = 's', long)]
    pub symbolic: bool,
    pub image: PathBuf,
    /// For a hard link the existing path inside the image; for -s any text.
    pub target: OsString,
    /// The new link, or an existing directory to make it in (named after TARGET).
    pub linkpath: OsString,
}

pub fn ln(args: &LnArgs) -> Result<(), String> {
    let target = args.target.as_bytes();
    let link = args.linkpath.as_bytes();
    if args.symbolic && target.is_empty() {
        return Err("ln: empty symlink target".into());
    }
    let (uid, gid) = rw::caller_ids();
    with_image(&args.image, |fs| {
        let link_path = match rw::resolve(fs, link).ok().flatten() {
            Some(d) if d.kind == FileKind::Directory => {
                let name = rw::basename(target)
                    .ok_or_else(|| format!("{}: cannot name a link after it", show(target)))?;
                [link, b"/", name].concat()
            }
            _ => link.to_vec(),
        };
        let slot = rw::slot(fs, &link_path)?;
        let shown = show(&link_path).replace("//", "/");
        if slot.existing.is_some() {
            return Err(format!("{shown}: already exists"));
        }
        if args.symbolic {
            fs.symlink(slot.parent.ino, &slot.name, target, uid, gid)
                .map_err(|e| fail(&shown, &e))?;
            return Ok(());
        }
        let inode = rw::existing(fs, target)?;
        if inode.kind == FileKind::Directory {
            return Err(format!(
                "{}: is a directory (hard links to directories are not allowed)",
                show(target)
            ));
        }
        fs.link(inode.ino, slot.parent.ino, &slot.name)
            .map_err(|e| fail(&shown, &e))?;
        Ok(())
    })
}

#[derive(Args)]
pub struct ChmodArgs {
    pub image: PathBuf,
    /// Octal (644, 4755) or symbolic (u+x, go-w, a=rX).
    #[arg(allow_hyphen_values = true)]
    pub mode: String,
    pub path: OsString,
}

pub fn chmod(args: &ChmodArgs) -> Result<(), String> {
    rw::parse_mode(&args.mode, 0, false)?; // Syntax check before touching the image.
    let path = args.path.as_bytes();
    with_image(&args.image, |fs| {
        let inode = rw::existing(fs, path)?;
        if inode.kind == FileKind::Symlink {
            return Err(format!(
                "{}: is a symbolic link (symlink modes are not used; links are not followed)",
                show(path)
            ));
        }
        let mode = rw::parse_mode(
            &args.mode,
            inode.mode & 0o7777,
            inode.kind == FileKind::Directory,
        )?;
        fs.setattr(
            inode.ino,
            &SetAttr {
                mode: Some(mode),
                ..Default::default()
            },
        )
        .map(|_| ())
        .map_err(|e| fail(&show(path), &e))
    })
}

#[derive(Args)]
pub struct ChownArgs {
    pub image: PathBuf,
    /// UID, UID:GID or :GID, as numbers (the image's users are not the host's).
    #[arg(allow_hyphen_values = true)]
    pub owner: String,
    pub path: OsString,
}

pub fn chown(args: &ChownArgs) -> Result<(), String> {
    let (uid, gid) = rw::parse_owner(&args.owner)?;
    let path = args.path.as_bytes();
    with_image(&args.image, |fs| {
        let inode = rw::existing(fs, path)?;
        fs.setattr(
            inode.ino,
            &SetAttr {
                uid,
                gid,
                ..Default::default()
            },
        )
        .map(|_| ())
        .map_err(|e| fail(&show(path), &e))
    })
}

#[derive(Args)]
pub struct SetfattrArgs {
    pub image: PathBuf,
    /// Attribute name with its namespace: user.*, trusted.* or security.*.
    #[arg(short = 'n', long)]
    pub name: OsString,
    /// Value: text, "quoted text" with \ escapes, 0x-hex or 0s-base64 (as setfattr(1));
    /// default: empty.
    #[arg(
        short = 'v',
        long,
        allow_hyphen_values = true,
        conflicts_with = "remove"
    )]
    pub value: Option<OsString>,
    /// Remove the attribute instead.
    #[arg(short = 'x', long)]
    pub remove: bool,
    pub path: OsString,
}

pub fn setfattr(args: &SetfattrArgs) -> Result<(), String> {
    let name = args.name.as_bytes();
    if let Some(problem) = rw::xattr_name_problem(name) {
        return Err(problem);
    }
    let value = match &args.value {
        Some(v) => decode_value(v.as_bytes())?,
        None => Vec::new(),
    };
    let path = args.path.as_bytes();
    with_image(&args.image, |fs| {
        let inode = rw::existing(fs, path)?;
        if name.starts_with(b"user.")
            && !matches!(inode.kind, FileKind::Regular | FileKind::Directory)
        {
            return Err(format!(
                "{}: user.* attributes are only allowed on regular files and directories",
                show(path)
            ));
        }
        let result = if args.remove {
            fs.remove_xattr(inode.ino, name)
        } else {
            fs.set_xattr(inode.ino, name, &value, SetMode::Any)
        };
        result.map_err(|e| match refusal_of(&e) {
            Some(ErrorKind::NoData) => format!("{}: no attribute {}", show(path), show(name)),
            Some(ErrorKind::TooBig) => format!(
                "{}: attribute {}: a value of {} bytes is too large for F2FS",
                show(path),
                show(name),
                value.len()
            ),
            Some(ErrorKind::NoSpace) => format!(
                "{}: attribute {}: {}",
                show(path),
                show(name),
                rw::describe(&e)
            ),
            Some(ErrorKind::BufferTooSmall) => format!("{}: attribute name too long", show(name)),
            _ => fail(&show(path), &e),
        })
    })
}

/// Decodes a setfattr(1) value: 0x/0X hex, 0s/0S base64, "quoted" text with
/// backslash escapes (\\, \", octal \ooo), or plain text.
pub fn decode_value(v: &[u8]) -> Result<Vec<u8>, String> {
    let shown = show(v);
    if let Some(hex) = v.strip_prefix(b"0x").or_else(|| v.strip_prefix(b"0X")) {
        let digits: Vec<u8> = hex
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        if !digits.len().is_multiple_of(2) || !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(format!(
                "invalid hex value {shown:?}: expected an even number of hex digits after 0x"
            ));
        }
        return Ok(digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("hex digits"), 16).unwrap())
            .collect());
    }
    if let Some(b64) = v.strip_prefix(b"0s").or_else(|| v.strip_prefix(b"0S")) {
        return base64_decode(b64).ok_or_else(|| format!("invalid base64 value {shown:?}"));
    }
    if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
        let inner = &v[1..v.len() - 1];
        let mut out = Vec::with_capacity(inner.len());
        let mut i = 0;
        while i < inner.len() {
            if inner[i] != b'\\' {
                out.push(inner[i]);
                i += 1;
                continue;
            }
            let rest = &inner[i + 1..];
            let octal = rest
                .iter()
                .take(3)
                .take_while(|b| (b'0'..=b'7').contains(b))
                .count();
            if octal == 3 {
                let n = rest[..3]
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + (b - b'0') as u32);
                if n > 255 {
                    return Err(format!("invalid escape in {shown:?}"));
                }
                out.push(n as u8);
                i += 4;
            } else if let Some(&c) = rest.first() {
                out.push(c);
                i += 2;
            } else {
                return Err(format!("invalid escape at the end of {shown:?}"));
            }
        }
        return Ok(out);
    }
    Ok(v.to_vec())
}

fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let clean: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let body = clean
        .strip_suffix(b"==")
        .or_else(|| clean.strip_suffix(b"="))
        .unwrap_or(&clean);
    let padded = body.len() != clean.len();
    if (padded && !clean.len().is_multiple_of(4)) || body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | value(c)?;
        }
        acc <<= 6 * (4 - chunk.len() as u32);
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(decode_value(b"plain text").unwrap(), b"plain text");
        assert_eq!(decode_value(b"0x00ff10").unwrap(), [0, 0xff, 0x10]);
        assert_eq!(decode_value(b"0XAB").unwrap(), [0xab]);
        assert!(decode_value(b"0xabc").is_err());
        assert!(decode_value(b"0xzz").is_err());
        assert_eq!(decode_value(b"0sAAH//g==").unwrap(), [0, 1, 0xff, 0xfe]);
        assert_eq!(decode_value(b"0saGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_value(b"0saGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_value(b"0saGk=").unwrap(), b"hi");
        assert_eq!(decode_value(b"0s").unwrap(), b"");
        assert!(decode_value(b"0s!!!!").is_err());
        assert!(decode_value(b"0sa").is_err());
        assert_eq!(decode_value(br#""a\"b\\c\012""#).unwrap(), b"a\"b\\c\n");
        assert_eq!(decode_value(b"\"\"").unwrap(), b"");
    }
}
