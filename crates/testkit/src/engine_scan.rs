//! The reader under test: rebuilds the same tree model from an image
//! through `f2fuse_engine::Fs`, so it can be compared with the host's.

use std::collections::BTreeMap;

use f2fuse_engine::{FileKind, Fs, InodeInfo, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO;

use super::hash::ContentHasher;
use super::scan::{join_key, HostEntry, Kind};

/// Opens an image file for reading and writing (panics on failure).
pub fn open_writable(img: &std::path::Path) -> Fs {
    let opts = OpenOptions {
        writable: true,
        ..Default::default()
    };
    Fs::open_path(img, opts).unwrap()
}

/// Opens an image file read-only (panics on failure).
pub fn open_read_only(img: &std::path::Path) -> Fs {
    Fs::open_path(img, OpenOptions::default()).unwrap()
}

fn kind_of(kind: FileKind) -> Kind {
    match kind {
        FileKind::Regular => Kind::File,
        FileKind::Directory => Kind::Dir,
        FileKind::Symlink => Kind::Symlink,
        FileKind::Fifo => Kind::Fifo,
        FileKind::CharDevice => Kind::CharDev,
        FileKind::BlockDevice => Kind::BlockDev,
        FileKind::Socket => Kind::Socket,
    }
}

/// Hash of a file's bytes as read through the engine, 1 MiB at a time.
pub fn engine_content_hash(fs: &Fs, inode: &InodeInfo) -> u64 {
    let mut hasher = ContentHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = fs
            .read(inode, offset, &mut buf)
            .unwrap_or_else(|e| panic!("reading inode {} at {offset}: {e}", inode.ino));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    assert_eq!(offset, inode.size, "inode {}: short read", inode.ino);
    hasher.finish()
}

fn entry_of(fs: &Fs, key: &str, inode: &InodeInfo) -> HostEntry {
    let kind = kind_of(inode.kind);
    HostEntry {
        path: key.to_string(),
        kind,
        mode: (inode.mode & 0o7777) as u32,
        uid: inode.uid,
        gid: inode.gid,
        size: inode.size,
        mtime: (inode.mtime.sec, inode.mtime.nsec),
        content_hash: (kind == Kind::File).then(|| engine_content_hash(fs, inode)),
        link_target: (kind == Kind::Symlink).then(|| fs.read_link(inode).unwrap()),
        xattrs: fs.xattrs(inode).unwrap().into_iter().collect(),
        nlink: inode.links,
        hardlink_group: (kind != Kind::Dir && inode.links > 1).then_some(inode.ino as u64),
    }
}

/// Every entry reachable from the root, keyed like `scan_host_tree`.
pub fn scan_image(fs: &Fs) -> BTreeMap<String, HostEntry> {
    let mut out = BTreeMap::new();
    let root = fs.inode(F2FS_ROOT_INO).unwrap();
    out.insert(String::new(), entry_of(fs, "", &root));
    let mut stack = vec![(String::new(), F2FS_ROOT_INO)];
    while let Some((key, ino)) = stack.pop() {
        for entry in fs.read_dir(ino).unwrap() {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let child_key = join_key(&key, &entry.name);
            let inode = fs.inode(entry.ino).unwrap();
            assert_eq!(
                kind_of(inode.kind),
                kind_of(entry.kind),
                "{child_key}: dentry type vs inode mode"
            );
            if inode.kind == FileKind::Directory {
                stack.push((child_key.clone(), entry.ino));
            }
            let scanned = entry_of(fs, &child_key, &inode);
            assert!(
                out.insert(child_key.clone(), scanned).is_none(),
                "{child_key} listed twice"
            );
        }
    }
    out
}
