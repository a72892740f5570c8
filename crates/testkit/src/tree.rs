//! Deterministic generator of a host directory tree full of F2FS edge cases.

use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::hash::content_hash_of;
use super::scan::join_key;

/// Data block size.
pub const BLOCK: u64 = 4096;
/// Addresses per direct node / node ids per indirect node.
pub const NIDS_PER_BLOCK: u64 = 1018;
/// Address slots of an inode without inline xattrs / extra attributes.
pub const ADDRS_PER_INODE: u64 = 923;
/// Address slots of an inode with the default 200-byte inline xattr area
/// (what sload.f2fs 1.15 writes for regular files).
pub const ADDRS_PER_INODE_INLINE_XATTR: u64 = 873;
/// First byte that needs an indirect node when the inode has 923 slots.
pub const INDIRECT_START_BYTES: u64 = (ADDRS_PER_INODE + 2 * NIDS_PER_BLOCK) * BLOCK;
/// First byte that needs the double-indirect node (923 slots): 8_501_686_272.
pub const DOUBLE_INDIRECT_START_BYTES: u64 =
    (ADDRS_PER_INODE + 2 * NIDS_PER_BLOCK + 2 * NIDS_PER_BLOCK * NIDS_PER_BLOCK) * BLOCK;
/// Largest inline data size for an inode with inline xattrs (3488).
pub const MAX_INLINE_DATA: u64 = 3488;

/// Default size of the sparse double-indirect file: above
/// [`DOUBLE_INDIRECT_START_BYTES`] and deliberately not block aligned.
pub const HUGE_SPARSE_DEFAULT_SIZE: u64 = 8_600_001_234;

/// Well-known paths (keys) inside a generated tree.
pub mod paths {
    /// An empty directory.
    pub const EMPTY_DIR: &str = "empty_dir";
    /// Files of sizes around the inline, direct and indirect limits.
    pub const SIZES: &str = "sizes";
    /// The dense file that needs indirect nodes.
    pub const INDIRECT_FILE: &str = "sizes/indirect_13m";
    /// Sparse files.
    pub const SPARSE: &str = "sparse";
    /// The sparse file that needs the double-indirect node.
    pub const HUGE_SPARSE_FILE: &str = "sparse/huge_dindirect";
    /// Edge-case names (long, UTF-8, control and non-UTF-8 bytes).
    pub const NAMES: &str = "names";
    /// The directory with many entries.
    pub const BIG_DIR: &str = "bigdir";
    /// Symlinks with targets of every length class.
    pub const SYMLINKS: &str = "symlinks";
    /// Hard links, also across directories.
    pub const LINKS: &str = "links";
    /// Files and directories with user xattrs.
    pub const XATTR: &str = "xattr";
    /// The deeply nested directories.
    pub const DEEP: &str = "deep";
    /// Permission bits including suid, sgid and sticky.
    pub const MODES: &str = "modes";
    /// Entries with other owners.
    pub const OWNERS: &str = "owners";
    /// A fifo and a unix socket.
    pub const SPECIAL: &str = "special";
}

/// What [`generate_edge_tree`] creates and how big.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeOptions {
    /// Seeds names in the big directory, file contents and mtimes.
    pub seed: u64,
    /// Number of files in `bigdir` (10_000 for the full tree).
    pub big_dir_entries: usize,
    /// Nesting depth below `deep` (20).
    pub deep_levels: usize,
    /// Size of the dense `sizes/indirect_13m` file (13 MiB, needs indirect
    /// nodes); 0 leaves it out.
    pub indirect_file_size: u64,
    /// Create `sparse/huge_dindirect` (needs the double-indirect node).
    /// Costly with sload.f2fs, which writes holes as zero blocks.
    pub huge_sparse_file: bool,
    /// Size of `sparse/huge_dindirect` ([`HUGE_SPARSE_DEFAULT_SIZE`]).
    pub huge_sparse_size: u64,
    /// user.* xattrs on files and directories (sload.f2fs drops them).
    pub xattrs: bool,
    /// A fifo and a unix socket (sload.f2fs skips them).
    pub special_files: bool,
    /// chown to 1000:1000, 0:0, 65534:65534 (only effective as root).
    pub owners: bool,
    /// Non-zero nanoseconds in mtimes (sload.f2fs stores 0).
    pub mtime_nsec: bool,
    /// Files with 2 and 3 hard links across directories.
    pub hard_links: bool,
    /// Names with bytes that are not UTF-8 or are control characters.
    pub odd_names: bool,
    /// Symlinks with 3488..=3687-byte targets: sload.f2fs 1.15 stores them
    /// in a data block but leaves i_blocks = 1; its own final fsck pass
    /// then repairs that (exit code 1).
    pub mid_size_symlinks: bool,
}

impl Default for TreeOptions {
    fn default() -> Self {
        Self::small()
    }
}

impl TreeOptions {
    /// Every edge case, but scaled down: 1000-entry big dir, no 8.6 GB
    /// sparse file. Generating it takes well under a second.
    pub fn small() -> Self {
        TreeOptions {
            seed: 0x5eed_f2f5,
            big_dir_entries: 1000,
            deep_levels: 20,
            indirect_file_size: 13 << 20,
            huge_sparse_file: false,
            huge_sparse_size: HUGE_SPARSE_DEFAULT_SIZE,
            xattrs: true,
            special_files: true,
            owners: true,
            mtime_nsec: true,
            hard_links: true,
            odd_names: true,
            mid_size_symlinks: true,
        }
    }

    /// Full scale: 10_000-entry directory and the sparse 8.6 GB file.
    pub fn full() -> Self {
        TreeOptions {
            big_dir_entries: 10_000,
            huge_sparse_file: true,
            ..Self::small()
        }
    }

    /// Leaves out what sload.f2fs 1.15 cannot store (xattrs, fifo/socket,
    /// mtime nanoseconds) or stores wrongly (mid-size symlinks), so that
    /// the host tree equals the loaded image apart from root metadata (see
    /// [`super::CompareWhat::sload`]) and sload exits 0.
    pub fn sload_compatible(mut self) -> Self {
        self.xattrs = false;
        self.special_files = false;
        self.mtime_nsec = false;
        self.mid_size_symlinks = false;
        self
    }
}

/// Notes from [`generate_edge_tree`].
#[derive(Clone, Debug, Default)]
pub struct TreeInfo {
    /// Requested features that could not be created here, with the reason.
    pub skipped: Vec<String>,
}

// ---------------------------------------------------------------- helpers

fn ctx<T>(r: io::Result<T>, what: &str, path: &Path) -> T {
    r.unwrap_or_else(|e| panic!("generate_edge_tree: {what} {}: {e}", path.display()))
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Deterministic pseudo-random generator keyed by (seed, label).
struct Rng(u64);

impl Rng {
    fn new(seed: u64, label: &str) -> Rng {
        Rng(seed ^ content_hash_of(label.as_bytes()))
    }
    fn next(&mut self) -> u64 {
        splitmix(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }
}

struct Gen<'a> {
    root: &'a Path,
    opts: &'a TreeOptions,
    info: TreeInfo,
    is_root: bool,
}

impl Gen<'_> {
    fn p(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }

    fn dir(&self, rel: impl AsRef<Path>) -> PathBuf {
        let p = self.p(rel);
        ctx(fs::create_dir_all(&p), "mkdir", &p);
        p
    }

    /// File with `len` deterministic pseudo-random bytes.
    fn file(&self, rel: impl AsRef<Path>, len: u64) -> PathBuf {
        let p = self.p(rel);
        let label = p
            .strip_prefix(self.root)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        let mut rng = Rng::new(self.opts.seed, &label);
        let f = ctx(fs::File::create(&p), "create", &p);
        let mut off = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        while off < len {
            let n = (len - off).min(buf.len() as u64) as usize;
            rng.fill(&mut buf[..n]);
            ctx(f.write_all_at(&buf[..n], off), "write", &p);
            off += n as u64;
        }
        p
    }

    /// Sparse file of `size` bytes with data only at the given extents.
    fn sparse(&self, rel: impl AsRef<Path>, size: u64, extents: &[(u64, u64)]) -> PathBuf {
        let p = self.p(rel);
        let label = p
            .strip_prefix(self.root)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        let mut rng = Rng::new(self.opts.seed, &label);
        let f = ctx(fs::File::create(&p), "create", &p);
        ctx(f.set_len(size), "truncate", &p);
        for &(off, len) in extents {
            assert!(off + len <= size, "extent past the end of {}", p.display());
            let data = rng.bytes(len as usize);
            ctx(f.write_all_at(&data, off), "write", &p);
        }
        p
    }

    fn symlink(&self, target: impl AsRef<OsStr>, rel: impl AsRef<Path>) -> PathBuf {
        let p = self.p(rel);
        ctx(
            std::os::unix::fs::symlink(target.as_ref(), &p),
            "symlink",
            &p,
        );
        p
    }

    fn chmod(&self, p: &Path, mode: u32) {
        ctx(
            fs::set_permissions(p, fs::Permissions::from_mode(mode)),
            "chmod",
            p,
        );
    }

    fn chown(&mut self, p: &Path, uid: u32, gid: u32) {
        if !self.opts.owners {
            return;
        }
        if !self.is_root {
            let note = "owners: not running as root, chown skipped".to_string();
            if !self.info.skipped.contains(&note) {
                self.info.skipped.push(note);
            }
            return;
        }
        ctx(
            std::os::unix::fs::lchown(p, Some(uid), Some(gid)),
            "lchown",
            p,
        );
    }

    fn setxattr(&mut self, p: &Path, name: &str, value: &[u8]) {
        let c = CString::new(p.as_os_str().as_bytes()).expect("path without NUL");
        let n = CString::new(name).expect("xattr name without NUL");
        // SAFETY: valid NUL-terminated strings and a valid value buffer.
        let r = unsafe {
            libc::lsetxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOTSUP) {
                let note = format!("xattrs: not supported by the host file system ({e})");
                if !self.info.skipped.contains(&note) {
                    self.info.skipped.push(note);
                }
                return;
            }
            panic!(
                "generate_edge_tree: setxattr {name} on {}: {e}",
                p.display()
            );
        }
    }
}

/// The mtime the generator gives the entry with key `key`.
pub fn mtime_for(opts: &TreeOptions, key: &str) -> (i64, u32) {
    let special: Option<(i64, u32)> = match key {
        "sizes/len_0" => Some((0, 0)),
        "sizes/len_1" => Some((1, 1)),
        "sizes/len_100" => Some((i64::from(i32::MAX), 999_999_999)),
        "sizes/len_3000" => Some((1 << 31, 500_000_000)),
        "sizes/len_3400" => Some((4_102_444_800, 5)), // 2100-01-01
        _ => None,
    };
    let (s, ns) = special.unwrap_or_else(|| {
        let mut r = Rng::new(opts.seed, &format!("mtime:{key}"));
        let s = 1_000_000_000 + r.below(800_000_000) as i64;
        let ns = r.below(1_000_000_000) as u32;
        (s, ns)
    });
    (s, if opts.mtime_nsec { ns } else { 0 })
}

fn set_times(path: &Path, (sec, nsec): (i64, u32)) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    let ts = libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    let times = [ts, ts];
    // SAFETY: valid path string and a two-element timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        panic!(
            "generate_edge_tree: utimensat {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
    }
}

/// Post-order walk setting every entry's atime/mtime from [`mtime_for`].
fn set_all_times(opts: &TreeOptions, path: &Path, key: &str) {
    let md = ctx(fs::symlink_metadata(path), "lstat", path);
    if md.is_dir() {
        for de in ctx(fs::read_dir(path), "read_dir", path) {
            let de = ctx(de, "read_dir", path);
            let name = de.file_name();
            set_all_times(opts, &de.path(), &join_key(key, name.as_bytes()));
        }
    }
    set_times(path, mtime_for(opts, key));
}

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// Chunks of the huge sparse file: around every node-boundary (for 923 and
/// 873 inode slots), at offset 0 and over the (unaligned) end.
pub fn huge_sparse_extents(size: u64) -> Vec<(u64, u64)> {
    let n = NIDS_PER_BLOCK;
    let mut offs = vec![0u64];
    for a in [ADDRS_PER_INODE_INLINE_XATTR, ADDRS_PER_INODE] {
        for blk in [
            a,
            a + n,
            a + 2 * n,
            a + 3 * n,
            a + 2 * n + 2 * n * n,
            a + 2 * n + 2 * n * n + n,
        ] {
            offs.push(blk * BLOCK);
        }
    }
    offs.push(size / 2 / BLOCK * BLOCK);
    offs.retain(|&o| o + BLOCK <= size.saturating_sub(BLOCK));
    offs.sort_unstable();
    offs.dedup();
    let mut ext: Vec<(u64, u64)> = offs.into_iter().map(|o| (o, BLOCK)).collect();
    if size >= BLOCK {
        ext.push((size - BLOCK, BLOCK)); // crosses the last block boundary
    }
    ext
}

/// Creates the edge-case tree under `root` (created if missing; must be
/// empty). Deterministic for a given [`TreeOptions`] (inode numbers and
/// ctimes aside). Panics on I/O errors.
pub fn generate_edge_tree(root: &Path, opts: &TreeOptions) -> TreeInfo {
    ctx(fs::create_dir_all(root), "mkdir", root);
    if ctx(fs::read_dir(root), "read_dir", root).next().is_some() {
        panic!("generate_edge_tree: {} is not empty", root.display());
    }
    let mut g = Gen {
        root,
        opts,
        info: TreeInfo::default(),
        // SAFETY: geteuid has no preconditions.
        is_root: unsafe { libc::geteuid() } == 0,
    };

    g.dir(paths::EMPTY_DIR);

    // Sizes around the inline limit, inode address slots and indirect nodes.
    g.dir(paths::SIZES);
    // Inline limits: the kernel inlines regular files up to 3488 bytes
    // (MAX_INLINE_DATA with inline xattrs); sload.f2fs 1.15 only up to 3344.
    for len in [
        0u64,
        1,
        100,
        3000,
        3344,
        3345,
        3400,
        MAX_INLINE_DATA,
        MAX_INLINE_DATA + 1,
        3500,
        4095,
        4096,
        4097,
        8192,
        ADDRS_PER_INODE_INLINE_XATTR * BLOCK,
        ADDRS_PER_INODE_INLINE_XATTR * BLOCK + 1,
        ADDRS_PER_INODE * BLOCK,
        ADDRS_PER_INODE * BLOCK + 1,
    ] {
        g.file(format!("sizes/len_{len}"), len);
    }
    if opts.indirect_file_size > 0 {
        g.file(paths::INDIRECT_FILE, opts.indirect_file_size);
    }

    // Sparse files.
    g.dir(paths::SPARSE);
    g.sparse("sparse/hole_only", (1 << 20) + 5, &[]);
    g.sparse("sparse/leading_hole", 65536 + 10, &[(65536, 10)]);
    g.sparse("sparse/trailing_hole", 3 << 20, &[(0, 4096)]);
    g.sparse(
        "sparse/mixed",
        5 << 20,
        &[
            (0, 100),                 // partial first block
            (3 * BLOCK, BLOCK),       // after a 2-block hole
            (260 * BLOCK, 2 * BLOCK), // after a 1 MiB hole
            (900 * BLOCK - 10, 20),   // unaligned, across a block boundary
            (930 * BLOCK, BLOCK),     // first direct node, after a hole
            ((5 << 20) - 7, 7),       // the very end
        ],
    );
    g.sparse(
        "sparse/indirect_holes",
        INDIRECT_START_BYTES + (3 << 20),
        &[
            (INDIRECT_START_BYTES, BLOCK),
            (INDIRECT_START_BYTES + (1 << 20) + 123, 3000),
            (INDIRECT_START_BYTES + (3 << 20) - 1, 1),
        ],
    );
    if opts.huge_sparse_file {
        let size = opts.huge_sparse_size;
        g.sparse(paths::HUGE_SPARSE_FILE, size, &huge_sparse_extents(size));
    }

    // Names.
    g.dir(paths::NAMES);
    let mut names: Vec<Vec<u8>> = vec![
        vec![b'n'; 255],
        ["é".repeat(127), "x".into()].concat().into_bytes(),
        "日".repeat(85).into_bytes(),
        ["😀".repeat(63), "abc".into()].concat().into_bytes(),
        "é".into(),
        "日本語".into(),
        "emoji 😀🎉".into(),
        "with space".into(),
        " leading space".into(),
        "trailing space ".into(),
        "back\\slash".into(),
        "quote\"'`".into(),
        "glob*?[x]{a,b}".into(),
        "-dash".into(),
        ".hidden".into(),
        "...".into(),
        "%s$HOME&|;<>#~=".into(),
        "UPPER lower".into(),
        "upper LOWER".into(),
    ];
    if opts.odd_names {
        names.extend([
            b"tab\there".to_vec(),
            b"new\nline".to_vec(),
            b"\x01ctrl\x7f".to_vec(),
            b"\xff\xfe raw".to_vec(),
            b"latin1 caf\xe9".to_vec(),
        ]);
    }
    for (i, n) in names.iter().enumerate() {
        let rel = Path::new(paths::NAMES).join(os(n));
        g.file(rel, i as u64 * 7);
    }
    let ud = g.dir("names/dir é 日本語 😀");
    g.file(ud.join("inner file"), 10);
    g.dir(Path::new(paths::NAMES).join(os(&[b'd'; 255])));

    // The big directory: several hash levels.
    g.dir(paths::BIG_DIR);
    let mut rng = Rng::new(opts.seed, "bigdir");
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.";
    for i in 0..opts.big_dir_entries {
        let mut name = format!("e{i:05}-").into_bytes();
        let extra = if i % 1000 == 999 {
            255 - name.len()
        } else {
            rng.below(48) as usize
        };
        for _ in 0..extra {
            name.push(ALNUM[rng.below(ALNUM.len() as u64) as usize]);
        }
        if i % 333 == 7 {
            name.truncate(240);
            name.extend_from_slice("é日😀".as_bytes());
        }
        let len = if i % 97 == 0 { (i % 5000) as u64 } else { 0 };
        g.file(Path::new(paths::BIG_DIR).join(os(&name)), len);
    }

    // Symlinks.
    g.dir(paths::SYMLINKS);
    g.symlink("../sizes/len_100", "symlinks/short");
    g.symlink(".", "symlinks/dot");
    g.symlink("/nonexistent/absolute/target", "symlinks/absolute_dangling");
    g.symlink("no/such/file", "symlinks/dangling");
    g.symlink("../names/日本語", "symlinks/utf8");
    g.symlink("x", "symlinks/one_byte");
    // 3487 is the longest inline target (target + NUL must fit 3488).
    for len in [3000usize, 3487, 3488, 3489, 3687, 3688, 4000, 4095] {
        if !opts.mid_size_symlinks && (3488..=3687).contains(&len) {
            continue;
        }
        // A path-like target: "seg/seg/..." cut to `len` bytes.
        let mut t = Vec::with_capacity(len);
        while t.len() < len {
            t.extend_from_slice(format!("segment{:03}/", t.len() % 1000).as_bytes());
        }
        t.truncate(len);
        g.symlink(os(&t), format!("symlinks/len_{len}"));
    }

    // Hard links across directories.
    if opts.hard_links {
        g.dir("links/a");
        g.dir("links/b");
        let two = g.file("links/a/two_1", 100);
        ctx(fs::hard_link(&two, g.p("links/b/two_2")), "link", &two);
        let three = g.file("links/a/three_1", 5000);
        ctx(
            fs::hard_link(&three, g.p("links/b/three_2")),
            "link",
            &three,
        );
        ctx(fs::hard_link(&three, g.p("links/three_3")), "link", &three);
        let empty = g.file("links/empty_1", 0);
        ctx(
            fs::hard_link(&empty, g.p("links/b/empty_2")),
            "link",
            &empty,
        );
    }

    // Extended attributes.
    if opts.xattrs {
        let d = g.dir(paths::XATTR);
        g.setxattr(&d, "user.dir_attr", b"on a directory");
        let f = g.file("xattr/small", 10);
        g.setxattr(&f, "user.a", b"1");
        g.setxattr(&f, "user.empty", b"");
        g.setxattr(&f, "user.binary", &[0, 1, 2, 0xff, 0xfe, 0]);
        let f = g.file("xattr/big", 4000);
        let big: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
        g.setxattr(&f, "user.big", &big);
        g.setxattr(&f, "user.small", b"next to a big one");
        let f = g.file("xattr/many", 0);
        for i in 0..20 {
            g.setxattr(
                &f,
                &format!("user.key{i:02}"),
                format!("value {i}").as_bytes(),
            );
        }
        let sd = g.dir("xattr/subdir");
        g.setxattr(&sd, "user.utf8_é", "日本語".as_bytes());
        g.file("xattr/subdir/plain", 1);
    }

    // Deep nesting.
    let mut deep = PathBuf::from(paths::DEEP);
    for level in 1..=opts.deep_levels {
        deep.push(format!("d{level:02}"));
    }
    g.dir(&deep);
    g.file(deep.join("leaf"), 33);

    // Modes.
    g.dir(paths::MODES);
    for mode in [0o600u32, 0o644, 0o755, 0o4755, 0o2755, 0o6711, 0o000, 0o777] {
        let f = g.file(format!("modes/m{mode:04o}"), if mode == 0 { 0 } else { 5 });
        g.chmod(&f, mode);
    }
    for (name, mode) in [
        ("sticky_dir", 0o1777u32),
        ("private_dir", 0o700),
        ("sgid_dir", 0o2775),
    ] {
        let d = g.dir(format!("modes/{name}"));
        g.file(d.join("inside"), 3);
        g.chmod(&d, mode);
    }

    // Owners (chown before any chmod that must survive it).
    if opts.owners {
        g.dir(paths::OWNERS);
        for (name, uid, gid, mode) in [
            ("u1000", 1000u32, 1000u32, 0o644u32),
            ("u0", 0, 0, 0o644),
            ("nobody", 65534, 65534, 0o640),
            ("mixed", 1000, 65534, 0o4750),
        ] {
            let f = g.file(format!("owners/{name}"), 8);
            g.chown(&f, uid, gid);
            g.chmod(&f, mode);
        }
        let d = g.dir("owners/dir_1000");
        g.file(d.join("inside_root_owned"), 1);
        g.chown(&d, 1000, 1000);
        let l = g.symlink("u0", "owners/link_nobody");
        g.chown(&l, 65534, 65534);
    }

    // Special files.
    if opts.special_files {
        let d = g.dir(paths::SPECIAL);
        let fifo = d.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).expect("path without NUL");
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } != 0 {
            panic!(
                "generate_edge_tree: mkfifo {}: {}",
                fifo.display(),
                io::Error::last_os_error()
            );
        }
        let sock = d.join("socket");
        match std::os::unix::net::UnixListener::bind(&sock) {
            Ok(l) => drop(l), // the socket inode stays
            Err(e) => g.info.skipped.push(format!("socket: {e}")),
        }
    }

    g.chmod(root, 0o755);
    set_all_times(opts, root, "");
    g.info
}
