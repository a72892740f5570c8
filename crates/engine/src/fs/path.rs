//! Whole paths and whole files, for library callers that do not keep inode
//! numbers: [`Fs::read_path`], [`Fs::write_path`] and [`Fs::walk`], on top
//! of [`Fs::resolve`] and the inode operations. Symlinks in a path are not
//! followed, as in [`Fs::resolve`]; the operations trust their caller, as
//! the plain `Fs` methods do.

use super::{Fs, SetAttr};
use crate::error::{Error, ErrorKind, Result};
use crate::inode::{FileKind, InodeInfo};

/// The chunk the whole-file operations read and write at a time.
const CHUNK: usize = 1 << 20;

impl Fs {
    /// The whole contents of the regular file at `path`.
    pub fn read_path(&self, path: &str) -> Result<Vec<u8>> {
        let inode = self.resolve(path)?;
        if inode.kind != FileKind::Regular {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{path}: not a regular file"),
            ));
        }
        let mut data = Vec::with_capacity(inode.size.min(CHUNK as u64) as usize);
        let mut buf = vec![0; CHUNK];
        loop {
            let n = self.read_ino(inode.ino, data.len() as u64, &mut buf)?;
            if n == 0 {
                return Ok(data);
            }
            data.extend_from_slice(&buf[..n]);
        }
    }

    /// Makes the file at `path` hold exactly `data`: an existing regular
    /// file is truncated and rewritten, a missing one is created with mode
    /// 0644, owned by root, in a directory that must exist. Returns the
    /// inode afterwards.
    pub fn write_path(&self, path: &str, data: &[u8]) -> Result<InodeInfo> {
        let (parent_path, name) = match path.trim_end_matches('/').rsplit_once('/') {
            Some((parent, name)) if !name.is_empty() => (parent, name),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{path}: no file name"),
                ))
            }
        };
        let parent = self.resolve(parent_path)?;
        let ino = match self.lookup(parent.ino, name.as_bytes()) {
            Ok(entry) if entry.kind != FileKind::Regular => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{path}: not a regular file"),
                ))
            }
            Ok(entry) => {
                let truncate = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                self.setattr(entry.ino, &truncate)?.ino
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.create(parent.ino, name.as_bytes(), 0o644, 0, 0)?.ino
            }
            Err(e) => return Err(e),
        };
        let mut done = 0;
        while done < data.len() {
            let end = (done + CHUNK).min(data.len());
            match self.write(ino, done as u64, &data[done..end])? {
                // A short write stops where space ran out.
                0 => return Err(Error::new(ErrorKind::NoSpace, path)),
                n => done += n,
            }
        }
        self.inode(ino)
    }

    /// Calls `visit` with the path and inode of `path` and of everything
    /// beneath it, depth first, each directory before its entries and the
    /// entries in directory order. An error from `visit` stops the walk.
    pub fn walk(
        &self,
        path: &str,
        mut visit: impl FnMut(&str, &InodeInfo) -> Result<()>,
    ) -> Result<()> {
        let inode = self.resolve(path)?;
        let mut pending = vec![(path.trim_end_matches('/').to_string(), inode)];
        while let Some((path, inode)) = pending.pop() {
            visit(if path.is_empty() { "/" } else { &path }, &inode)?;
            if inode.kind != FileKind::Directory {
                continue;
            }
            let entries = self.read_dir(inode.ino)?;
            // Reversed onto the stack, so that they come off in order.
            for entry in entries.iter().rev() {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                let child = format!("{path}/{}", String::from_utf8_lossy(&entry.name));
                pending.push((child, self.inode(entry.ino)?));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::device::MemDevice;
    use crate::error::ErrorKind;
    use crate::fs::Fs;
    use crate::mkfs::{format_device, MkfsOptions};
    use f2fuse_layout::F2FS_ROOT_INO;
    use std::sync::Arc;

    fn fresh() -> Fs {
        let image = Arc::new(MemDevice::new(64 << 20));
        format_device(Box::new(image.clone()), &MkfsOptions::default()).unwrap();
        Fs::open_writable(Box::new(image)).unwrap()
    }

    #[test]
    fn files_written_by_path_read_back_and_shrink_when_rewritten() {
        let fs = fresh();
        let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        fs.write_path("/big", &big).unwrap();
        assert_eq!(fs.read_path("/big").unwrap(), big);
        let inode = fs.write_path("/big", b"short").unwrap();
        assert_eq!(inode.size, 5);
        assert_eq!(fs.read_path("/big").unwrap(), b"short");
    }

    #[test]
    fn paths_that_name_no_file_are_refused() {
        let fs = fresh();
        fs.mkdir(F2FS_ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        fn kind<T>(r: crate::Result<T>) -> ErrorKind {
            r.err().expect("refused").kind()
        }
        assert_eq!(kind(fs.write_path("/missing/f", b"x")), ErrorKind::NotFound);
        assert_eq!(kind(fs.write_path("/d", b"x")), ErrorKind::InvalidArgument);
        assert_eq!(kind(fs.write_path("/", b"x")), ErrorKind::InvalidArgument);
        assert_eq!(kind(fs.read_path("/d")), ErrorKind::InvalidArgument);
        assert_eq!(kind(fs.read_path("/d/none")), ErrorKind::NotFound);
    }

    #[test]
    fn walk_visits_parents_before_children_in_directory_order() {
        let fs = fresh();
        fs.mkdir(F2FS_ROOT_INO, b"a", 0o755, 0, 0).unwrap();
        fs.write_path("/a/x", b"1").unwrap();
        fs.write_path("/b", b"2").unwrap();
        let mut seen = Vec::new();
        fs.walk("/", |path, _| {
            seen.push(path.to_string());
            Ok(())
        })
        .unwrap();
        let order = fs.read_dir(F2FS_ROOT_INO).unwrap();
        let a_first =
            order.iter().position(|e| e.name == b"a") < order.iter().position(|e| e.name == b"b");
        let want: &[&str] = if a_first {
            &["/", "/a", "/a/x", "/b"]
        } else {
            &["/", "/b", "/a", "/a/x"]
        };
        assert_eq!(seen, want);
        let stop = fs.walk("/a", |_, _| Err(crate::Error::new(ErrorKind::Busy, "stop")));
        assert_eq!(stop.unwrap_err().kind(), ErrorKind::Busy);
    }
}
