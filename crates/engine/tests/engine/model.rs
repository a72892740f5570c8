//! Model-based property tests of the writer: random operation sequences
//! run against the engine and against a plain in-memory model of a POSIX
//! file system (a tree of directories, files with sparse contents,
//! symlinks and device nodes; modes, owners, explicit times, xattrs, hard
//! links as shared inodes, open handles keeping unlinked inodes alive).
//! Every result must match, errno included. After every sequence the whole
//! tree is compared (names, kinds, sizes, contents, which blocks are
//! allocated, modes, owners, link counts, targets, xattrs, device numbers,
//! "." and ".."), the image is unmounted and must pass fsck.f2fs, and a
//! read-only reopen must show the same tree. Every `Reopen` also runs
//! fsck.f2fs and compares.
//!
//! * `model_sequences`: 60..150 random operations on a 64-128 MiB image,
//!   with or without extra_attr,inode_checksum,flexible_inline_xattr,
//!   inode_crtime,lost_found. `F2FUSE_MODEL_CASES` (default 32).
//! * `fill_to_enospc`: fills a 64 MiB image until ENOSPC, trims a few
//!   blocks, runs random operations (which must fail cleanly or be short
//!   writes), deletes, fills again. `F2FUSE_MODEL_FILL_CASES` (default 6).
//! * `gc_churn`: big overwrites of a few files on a 64 MiB image, so the
//!   cleaner moves live blocks. `F2FUSE_MODEL_CHURN_CASES` (default 4).
//! * `compressed_sequences`: the same operations plus compression (`chattr
//!   +c` on files and directories, compressible writes, compression mount
//!   options with every algorithm and cluster size, fsync, release and
//!   reserve of saved blocks, compress/decompress in `compress_mode=user`,
//!   cleaning rounds) on an image with the feature whose root is `+c`.
//!   `F2FUSE_MODEL_COMPRESSED_CASES` (default 16).
//! * `F2FUSE_MODEL_TRACE=1` prints every operation and both results;
//!   `F2FUSE_MODEL_SHRINK` bounds the shrink iterations (default 2000).
//!
//! ENOSPC is accepted from any operation that may allocate, but then
//! nothing may have changed; a write may instead be short. When several
//! errors apply, the expected one is Linux's (VFS then f2fs): parent not
//! a directory, name too long, existence, then file types (including
//! lock_rename's ancestor checks). Operations name the model's current
//! inodes by index (`Sel`: the n-th directory, other inode or entry,
//! modulo their number), so a sequence replays deterministically and
//! shrinks well. A failing case prints as Rust (`Case { .. }`): keep it as
//! a regression test at the bottom of this file.

use f2fuse_testkit as support;

use f2fuse_engine::internals::compress::{CompressMode, CompressOptions};
use f2fuse_engine::internals::fs::{RenameFlags, SetAttr, TimeSet};
use f2fuse_engine::internals::mkfs::{format_path, parse_features, MkfsOptions};
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::internals::FsInternals;
use f2fuse_engine::{Error, ErrorKind, FallocMode, FileKind, Fs, OpenOptions, Timestamp};
use f2fuse_layout::compress::CompressAlgorithm;
use f2fuse_layout::node::{max_file_blocks, AddrCounts};
use f2fuse_layout::{inode_flag, F2FS_ROOT_INO};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use support::{fsck_f2fs, require_f2fs_tools, Scratch};

const BS: u64 = 4096;
const FEATURES: &str =
    "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,lost_found,compression";

// ---------------------------------------------------------------- operations

/// Picks an existing inode: the n-th (modulo their number) of the
/// directories (`D`), the other inodes (`F`; all if there are none), or all
/// (`A`), in the order root, then every entry depth-first by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sel {
    D(u16),
    F(u16),
    A(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Len {
    Short,
    Medium,
    Long,
    TooLong,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Name {
    id: u8,
    len: Len,
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        let id = self.id;
        match self.len {
            Len::Short => format!("f{id}").into_bytes(),
            Len::Medium => {
                // Raw bytes: UTF-8 and invalid UTF-8 both.
                let mut v = format!("medium-{id}-").into_bytes();
                v.extend_from_slice(&[0xC3, 0xA9, 0xFF, b' ', b'\n']);
                v.extend_from_slice(&[b'm'; 24]);
                v
            }
            Len::Long => padded(format!("L{id}-"), 255, b'y'),
            Len::TooLong => padded(format!("T{id}-"), 256, b'z'),
        }
    }
}

fn padded(prefix: String, len: usize, fill: u8) -> Vec<u8> {
    let mut v = prefix.into_bytes();
    v.resize(len, fill);
    v
}

/// Where a name is: an existing entry (never the root), or a name in a directory.
#[derive(Debug, Clone, Copy)]
enum Loc {
    Entry(Sel),
    In(Sel, Name),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nod {
    Fifo,
    Chr,
    Blk,
    Sock,
    /// S_IFREG, and no type bits at all: both make a regular file.
    Reg,
    NoType,
    /// S_IFDIR (EPERM) and S_IFLNK (EINVAL).
    Dir,
    Lnk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RFlags {
    Plain,
    NoReplace,
    Exchange,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TSet {
    Now,
    At(i64, u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XName {
    User(u8),
    Trusted(u8),
    Security(u8),
    /// "user." + 250 bytes: a 255-byte full name, the longest allowed.
    LongUser,
    /// A 256-byte full name: ERANGE.
    TooLongUser,
}

impl XName {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            XName::User(i) => format!("user.u{i}").into_bytes(),
            XName::Trusted(i) => format!("trusted.t{i}").into_bytes(),
            XName::Security(i) => format!("security.s{i}").into_bytes(),
            XName::LongUser => padded("user.long-".into(), 255, b'x'),
            XName::TooLongUser => padded("user.toolong-".into(), 256, b'x'),
        }
    }

    fn is_user(&self) -> bool {
        matches!(self, XName::User(_) | XName::LongUser | XName::TooLongUser)
    }
}

/// Prefixed so that a printed case pasted under `use Op::*` stays unambiguous.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XMode {
    XAny,
    XCreate,
    XReplace,
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        dir: Sel,
        name: Name,
        perm: u16,
        owner: u8,
    },
    Mkdir {
        dir: Sel,
        name: Name,
        perm: u16,
        owner: u8,
    },
    Mknod {
        dir: Sel,
        name: Name,
        kind: Nod,
        perm: u16,
        major: u32,
        minor: u32,
    },
    Symlink {
        dir: Sel,
        name: Name,
        len: u16,
        seed: u8,
    },
    Link {
        src: Sel,
        dir: Sel,
        name: Name,
    },
    Unlink {
        at: Loc,
    },
    Rmdir {
        at: Loc,
    },
    Rename {
        from: Loc,
        to: Loc,
        flags: RFlags,
    },
    Write {
        file: Sel,
        off: u64,
        len: u32,
        seed: u8,
    },
    Truncate {
        file: Sel,
        size: u64,
    },
    SetAttr {
        file: Sel,
        mode: Option<u16>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TSet>,
        mtime: Option<TSet>,
    },
    SetXattr {
        file: Sel,
        name: XName,
        len: u16,
        seed: u8,
        mode: XMode,
    },
    RemoveXattr {
        file: Sel,
        name: XName,
    },
    /// Creates `count` files with 190-byte names (directories grow hash levels).
    Populate {
        dir: Sel,
        count: u8,
        seed: u8,
    },
    Checkpoint,
    Reopen,
    /// Changes how the data path groups blocks (`max_folio_order`,
    /// `serialized_dio_pages`): no effect on any result, so reads at every
    /// order must return what the model holds (the extent cache included).
    Tune {
        folio_order: u8,
        serialized_dio_pages: u16,
        /// `ipu_policy` (every bit; where rewrites land is no result either).
        ipu_policy: u8,
    },
    /// Creates files in the root and writes `chunk_kib` KiB pieces until ENOSPC.
    Fill {
        chunk_kib: u16,
    },
    /// Unlinks every `every`-th file made by `Fill`.
    DeleteFill {
        every: u8,
    },
    /// Frees `blocks` blocks at the end of the last `Fill` file: the next
    /// operations run with exactly that little space.
    Trim {
        blocks: u8,
    },
    /// Opens an inode (unlinking it then leaves an orphan until closed).
    Open {
        file: Sel,
    },
    /// Releases an open handle (by index, modulo their number).
    Close {
        handle: u8,
    },
    /// Links an open inode (ENOENT once it has no name left, as linkat(2)
    /// with AT_EMPTY_PATH).
    LinkOpen {
        handle: u8,
        dir: Sel,
        name: Name,
    },
    /// Writes through an open handle (the inode may have no name left).
    WriteOpen {
        handle: u8,
        off: u64,
        len: u32,
        seed: u8,
    },
    /// fallocate(2) in any mode.
    Fallocate {
        file: Sel,
        off: u64,
        len: u64,
        mode: FallocMode,
    },
    // Compressed files (see "compressed files" below).
    /// FS_IOC_SETFLAGS with COMPR_FL alone (`chattr +c`) or nothing (`-c`).
    CompressFlag {
        file: Sel,
        on: bool,
    },
    /// A write of bytes that compress, unlike `Write`'s.
    WriteText {
        file: Sel,
        off: u64,
        len: u32,
        seed: u8,
    },
    /// The compression mount options files given compression take.
    CompressMount {
        algorithm: u8,
        log: u8,
        checksum: bool,
        user_mode: bool,
    },
    Fsync {
        file: Sel,
    },
    /// F2FS_IOC_RELEASE_COMPRESS_BLOCKS.
    ReleaseBlocks {
        file: Sel,
    },
    /// F2FS_IOC_RESERVE_COMPRESS_BLOCKS.
    ReserveBlocks {
        file: Sel,
    },
    /// F2FS_IOC_COMPRESS_FILE (`compress`) or F2FS_IOC_DECOMPRESS_FILE.
    Recompress {
        file: Sel,
        compress: bool,
    },
    /// Foreground cleaning rounds (compressed clusters move).
    Clean {
        rounds: u8,
    },
}

#[derive(Debug, Clone)]
struct Case {
    features: bool,
    size_mib: u64,
    ops: Vec<Op>,
}

const OWNERS: [(u32, u32); 4] = [(0, 0), (1000, 1000), (65534, 100), (4_000_000_000, 7)];

/// Deterministic file bytes: seed 0 writes zeros.
fn pattern(seed: u8, offset: u64, len: usize) -> Vec<u8> {
    if seed == 0 {
        return vec![0; len];
    }
    (0..len as u64)
        .map(|i| {
            let x = (offset + i).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seed as u64) << 17;
            (x >> 29) as u8 | 1
        })
        .collect()
}

// ---------------------------------------------------------------- strategies

fn name_s() -> impl Strategy<Value = Name> {
    (
        0u8..6,
        prop_oneof![
            6 => Just(Len::Short),
            2 => Just(Len::Medium),
            2 => Just(Len::Long),
            1 => Just(Len::TooLong),
        ],
    )
        .prop_map(|(id, len)| Name { id, len })
}

fn dir_s() -> impl Strategy<Value = Sel> {
    prop_oneof![4 => any::<u16>().prop_map(Sel::D), 1 => any::<u16>().prop_map(Sel::A)]
}

fn file_s() -> impl Strategy<Value = Sel> {
    prop_oneof![5 => any::<u16>().prop_map(Sel::F), 1 => any::<u16>().prop_map(Sel::A)]
}

fn any_s() -> impl Strategy<Value = Sel> {
    prop_oneof![
        2 => any::<u16>().prop_map(Sel::A),
        1 => any::<u16>().prop_map(Sel::F),
        1 => any::<u16>().prop_map(Sel::D),
    ]
}

/// An existing entry picked by what it names (`entry`), or a name in a directory.
fn loc_s(entry: impl Strategy<Value = Sel>) -> impl Strategy<Value = Loc> {
    prop_oneof![
        3 => entry.prop_map(Loc::Entry),
        2 => (dir_s(), name_s()).prop_map(|(s, n)| Loc::In(s, n)),
    ]
}

fn perm_s() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => prop::sample::select(vec![0o644u16, 0o755, 0o600, 0o777]),
        1 => 0u16..0o10000,
    ]
}

fn time_s() -> impl Strategy<Value = Option<TSet>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(TSet::Now)),
        2 => (
            prop::sample::select(vec![0i64, 1, 1 << 31, 4_102_444_800, -1, 1_700_000_000]),
            prop_oneof![Just(0u32), Just(999_999_999), 0u32..1_000_000_000],
        )
            .prop_map(|(s, n)| Some(TSet::At(s, n))),
    ]
}

/// File offsets around every layout boundary: inline limit, inode -> direct
/// nodes, direct -> indirect, indirect -> double indirect, the largest file.
fn offset_s() -> impl Strategy<Value = u64> {
    let max_lo = max_file_blocks(AddrCounts::plain(923 - 9 - 50)) * BS;
    prop_oneof![
        4 => 0u64..9000,
        2 => 3300u64..3700,
        3 => 0u64..(4 << 20),
        2 => 860 * BS..880 * BS,
        2 => 2890 * BS..2930 * BS,
        1 => 2_075_540 * BS..2_075_580 * BS,
        1 => max_lo - 20 * BS..max_lo + 40 * BS,
    ]
}

fn len_s() -> impl Strategy<Value = u32> {
    prop_oneof![
        5 => 1u32..100,
        4 => 100u32..9000,
        2 => 9000u32..70_000,
        1 => 70_000u32..(3 << 20),
    ]
}

fn size_s() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => offset_s(),
        1 => Just(0u64),
        1 => (0u64..64).prop_map(|b| b * BS),
    ]
}

fn xname_s() -> impl Strategy<Value = XName> {
    prop_oneof![
        6 => (0u8..4).prop_map(XName::User),
        2 => (0u8..3).prop_map(XName::Trusted),
        2 => (0u8..3).prop_map(XName::Security),
        1 => Just(XName::LongUser),
        1 => Just(XName::TooLongUser),
    ]
}

fn xlen_s() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => 0u16..40,
        2 => 150u16..260,
        3 => 2500u16..3100,
        1 => 4180u16..4250,
    ]
}

fn op_s() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (dir_s(), name_s(), perm_s(), 0u8..4)
            .prop_map(|(dir, name, perm, owner)| Op::Create { dir, name, perm, owner }),
        5 => (dir_s(), name_s(), perm_s(), 0u8..4)
            .prop_map(|(dir, name, perm, owner)| Op::Mkdir { dir, name, perm, owner }),
        2 => (
            dir_s(),
            name_s(),
            prop_oneof![
                4 => prop::sample::select(vec![Nod::Fifo, Nod::Chr, Nod::Blk, Nod::Sock]),
                1 => prop::sample::select(vec![Nod::Reg, Nod::NoType, Nod::Dir, Nod::Lnk]),
            ],
            perm_s(),
            prop_oneof![0u32..256, 0u32..4096],
            prop_oneof![0u32..256, 0u32..(1 << 20)],
        )
            .prop_map(|(dir, name, kind, perm, major, minor)| Op::Mknod {
                dir,
                name,
                kind,
                perm,
                major,
                minor
            }),
        3 => (
            dir_s(),
            name_s(),
            prop_oneof![
                4 => 1u16..60,
                2 => 3400u16..3500,
                2 => 4000u16..4097,
                1 => Just(0u16),
            ],
            1u8..=255,
        )
            .prop_map(|(dir, name, len, seed)| Op::Symlink { dir, name, len, seed }),
        4 => (file_s(), dir_s(), name_s())
            .prop_map(|(src, dir, name)| Op::Link { src, dir, name }),
        5 => loc_s(file_s()).prop_map(|at| Op::Unlink { at }),
        3 => loc_s(dir_s()).prop_map(|at| Op::Rmdir { at }),
        7 => (
            loc_s(any_s()),
            loc_s(any_s()),
            prop_oneof![
                6 => Just(RFlags::Plain),
                2 => Just(RFlags::NoReplace),
                3 => Just(RFlags::Exchange),
                1 => Just(RFlags::Both),
            ],
        )
            .prop_map(|(from, to, flags)| Op::Rename { from, to, flags }),
        14 => (file_s(), offset_s(), len_s(), 0u8..8)
            .prop_map(|(file, off, len, seed)| Op::Write { file, off, len, seed }),
        4 => (file_s(), size_s()).prop_map(|(file, size)| Op::Truncate { file, size }),
        4 => (
            any_s(),
            prop::option::weighted(0.4, perm_s()),
            prop::option::weighted(0.3, prop::sample::select(vec![0u32, 1000, 4_000_000_000])),
            prop::option::weighted(0.3, prop::sample::select(vec![0u32, 100, 4_000_000_000])),
            prop::option::weighted(0.15, size_s()),
            time_s(),
            time_s(),
        )
            .prop_map(|(file, mode, uid, gid, size, atime, mtime)| Op::SetAttr {
                file,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime
            }),
        6 => (
            any_s(),
            xname_s(),
            xlen_s(),
            any::<u8>(),
            prop::sample::select(vec![XMode::XAny, XMode::XCreate, XMode::XReplace]),
        )
            .prop_map(|(file, name, len, seed, mode)| Op::SetXattr {
                file,
                name,
                len,
                seed,
                mode
            }),
        2 => (any_s(), xname_s()).prop_map(|(file, name)| Op::RemoveXattr { file, name }),
        1 => (dir_s(), 1u8..40, 0u8..3)
            .prop_map(|(dir, count, seed)| Op::Populate { dir, count, seed }),
        2 => Just(Op::Checkpoint),
        2 => Just(Op::Reopen),
        1 => (
            0u8..=9,
            prop_oneof![Just(0u16), Just(1), Just(64), any::<u16>()],
            prop_oneof![Just(0u8), Just(1), Just(16), any::<u8>()]
        )
            .prop_map(|(folio_order, serialized_dio_pages, ipu_policy)| Op::Tune {
                folio_order,
                serialized_dio_pages,
                ipu_policy
            }),
        2 => any_s().prop_map(|file| Op::Open { file }),
        2 => any::<u8>().prop_map(|handle| Op::Close { handle }),
        1 => (any::<u8>(), dir_s(), name_s())
            .prop_map(|(handle, dir, name)| Op::LinkOpen { handle, dir, name }),
        2 => (any::<u8>(), offset_s(), len_s(), 0u8..8)
            .prop_map(|(handle, off, len, seed)| Op::WriteOpen { handle, off, len, seed }),
        5 => (file_s(), offset_s(), len_s(), any::<bool>(), falloc_mode_s())
            .prop_map(|(file, off, len, aligned, mode)| {
                let (off, len) = if aligned {
                    (off / BS * BS, (len as u64).div_ceil(BS) * BS)
                } else {
                    (off, len as u64)
                };
                Op::Fallocate { file, off, len, mode }
            }),
    ]
}

fn falloc_mode_s() -> impl Strategy<Value = FallocMode> {
    prop::sample::select(vec![
        FallocMode::Allocate { keep_size: false },
        FallocMode::Allocate { keep_size: true },
        FallocMode::PunchHole,
        FallocMode::ZeroRange { keep_size: false },
        FallocMode::ZeroRange { keep_size: true },
        FallocMode::CollapseRange,
        FallocMode::InsertRange,
    ])
}

/// About `chunks` x 2 operations: a list of short lists, so that shrinking
/// can drop operations (inner lists shrink to empty) while a fresh case
/// still has the intended length.
fn ops_s(chunks: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(prop::collection::vec(op_s(), 0..5), chunks)
        .prop_map(|chunks| chunks.into_iter().flatten().collect())
}

fn case_s() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop::sample::select(vec![64u64, 96, 128]),
        ops_s(30..75),
    )
        .prop_map(|(features, size_mib, ops)| Case {
            features,
            size_mib,
            ops,
        })
}

/// Big overwrites of a few files on a small image: the cleaner has to move
/// live blocks while the model checks every byte.
fn churn_case_s() -> impl Strategy<Value = Case> {
    let big_write = (0u16..4, 0u64..(6 << 20), (256u32 << 10)..(3 << 20), 1u8..8).prop_map(
        |(file, off, len, seed)| Op::Write {
            file: Sel::F(file),
            off,
            len,
            seed,
        },
    );
    let op = prop_oneof![3 => big_write, 2 => op_s()];
    (
        any::<bool>(),
        prop::collection::vec(prop::collection::vec(op, 0..4), 20..40),
    )
        .prop_map(|(features, chunks)| {
            let mut ops: Vec<Op> = (0..4)
                .map(|id| {
                    create(
                        Sel::D(0),
                        Name {
                            id,
                            len: Len::Short,
                        },
                    )
                })
                .collect();
            ops.extend(chunks.into_iter().flatten());
            Case {
                features,
                size_mib: 64,
                ops,
            }
        })
}

fn fill_case_s() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        ops_s(0..10),
        (256u16..1024, 0u8..6),
        ops_s(0..12),
        2u8..4,
        ops_s(0..12),
        (16u16..512, 0u8..6),
        ops_s(0..8),
    )
        .prop_map(|(features, a, fill1, b, every, c, fill2, d)| {
            let mut ops = a;
            ops.push(Op::Fill { chunk_kib: fill1.0 });
            ops.push(Op::Trim { blocks: fill1.1 });
            ops.extend(b);
            ops.push(Op::DeleteFill { every });
            ops.extend(c);
            ops.push(Op::Fill { chunk_kib: fill2.0 });
            ops.push(Op::Trim { blocks: fill2.1 });
            ops.extend(d);
            Case {
                features,
                size_mib: 64,
                ops,
            }
        })
}

// ---------------------------------------------------------------- the model

type Id = u32;
const ROOT: Id = 0;

#[derive(Clone, Debug)]
enum Body {
    Dir {
        children: BTreeMap<Vec<u8>, Id>,
        parent: Id,
    },
    /// Sparse contents: the blocks ever written (and not truncated away).
    File {
        size: u64,
        blocks: BTreeMap<u64, Vec<u8>>,
    },
    Symlink(Vec<u8>),
    Special {
        kind: FileKind,
        rdev: (u32, u32),
    },
}

#[derive(Clone, Debug)]
struct MInode {
    perm: u16,
    uid: u32,
    gid: u32,
    /// Known only after an explicit set; `None` once an operation may change it.
    atime: Option<Timestamp>,
    mtime: Option<Timestamp>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Inline xattr area + xattr node payload, in bytes.
    xattr_space: usize,
    body: Body,
    /// COMPR_FL (`chattr +c`): see `Compr`.
    compr: Option<Compr>,
}

impl MInode {
    fn kind(&self) -> FileKind {
        match &self.body {
            Body::Dir { .. } => FileKind::Directory,
            Body::File { .. } => FileKind::Regular,
            Body::Symlink(_) => FileKind::Symlink,
            Body::Special { kind, .. } => *kind,
        }
    }

    fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir { .. })
    }
}

#[derive(Default)]
struct Model {
    nodes: BTreeMap<Id, MInode>,
    next: Id,
    /// Open handles per inode (`Op::Open`).
    open: BTreeMap<Id, u32>,
    /// Inodes with no name left that are still open (orphans).
    detached: BTreeSet<Id>,
}

impl Model {
    fn node(&self, id: Id) -> &MInode {
        &self.nodes[&id]
    }

    fn node_mut(&mut self, id: Id) -> &mut MInode {
        self.nodes.get_mut(&id).expect("live model inode")
    }

    fn children(&self, id: Id) -> Option<&BTreeMap<Vec<u8>, Id>> {
        match &self.node(id).body {
            Body::Dir { children, .. } => Some(children),
            _ => None,
        }
    }

    fn children_mut(&mut self, id: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.node_mut(id).body {
            Body::Dir { children, .. } => children,
            _ => panic!("not a directory"),
        }
    }

    fn parent(&self, id: Id) -> Id {
        match &self.node(id).body {
            Body::Dir { parent, .. } => *parent,
            _ => panic!("not a directory"),
        }
    }

    fn is_dir(&self, id: Id) -> bool {
        self.node(id).is_dir()
    }

    fn lookup(&self, dir: Id, name: &[u8]) -> Option<Id> {
        self.children(dir).and_then(|c| c.get(name).copied())
    }

    /// Every entry (parent, name, child), depth-first by name.
    fn entries(&self) -> Vec<(Id, Vec<u8>, Id)> {
        let mut out = Vec::new();
        let mut stack = vec![ROOT];
        while let Some(dir) = stack.pop() {
            let start = out.len();
            for (name, &child) in self.children(dir).unwrap() {
                out.push((dir, name.clone(), child));
            }
            for (_, _, child) in out[start..].iter().rev() {
                if self.is_dir(*child) {
                    stack.push(*child);
                }
            }
        }
        out
    }

    /// The element of `all` that `sel` picks (`id_of` gives its inode).
    fn choose<T: Clone>(&self, sel: Sel, all: &[T], id_of: impl Fn(&T) -> Id) -> Option<T> {
        let (n, want) = match sel {
            Sel::D(n) => (n, Some(true)),
            Sel::F(n) => (n, Some(false)),
            Sel::A(n) => (n, None),
        };
        let mut some: Vec<&T> = all
            .iter()
            .filter(|x| want.is_none_or(|d| self.is_dir(id_of(x)) == d))
            .collect();
        if some.is_empty() {
            some = all.iter().collect();
        }
        (!some.is_empty()).then(|| some[n as usize % some.len()].clone())
    }

    fn pick(&self, sel: Sel) -> Id {
        let mut all = vec![ROOT];
        all.extend(self.entries().into_iter().map(|(_, _, id)| id));
        self.choose(sel, &all, |&id| id).expect("the root")
    }

    fn loc(&self, loc: Loc) -> (Id, Vec<u8>) {
        match loc {
            Loc::Entry(sel) => match self.choose(sel, &self.entries(), |e| e.2) {
                Some((parent, name, _)) => (parent, name),
                None => (ROOT, b"f0".to_vec()),
            },
            Loc::In(sel, name) => (self.pick(sel), name.bytes()),
        }
    }

    /// True if directory `a` is `b` or contains it.
    fn is_ancestor(&self, a: Id, mut b: Id) -> bool {
        loop {
            if a == b {
                return true;
            }
            if b == ROOT {
                return false;
            }
            b = self.parent(b);
        }
    }

    fn links(&self, id: Id) -> u32 {
        if let Body::Dir { children, .. } = &self.node(id).body {
            return 2 + children.values().filter(|&&c| self.is_dir(c)).count() as u32;
        }
        self.nodes
            .values()
            .filter_map(|n| match &n.body {
                Body::Dir { children, .. } => Some(children.values().filter(|&&c| c == id).count()),
                _ => None,
            })
            .sum::<usize>() as u32
    }

    fn touch(&mut self, id: Id) {
        self.node_mut(id).mtime = None;
    }

    fn add(&mut self, dir: Id, name: Vec<u8>, node: MInode) -> Id {
        let id = self.next;
        self.next += 1;
        self.nodes.insert(id, node);
        self.children_mut(dir).insert(name, id);
        self.touch(dir);
        id
    }

    /// Removes an entry; returns the inode if that was its last link and
    /// it is not open (an open one lives on as an orphan).
    fn remove(&mut self, dir: Id, name: &[u8]) -> Option<Id> {
        let id = self.children_mut(dir).remove(name).expect("entry");
        self.touch(dir);
        if self.is_dir(id) || self.links(id) == 0 {
            if self.open.contains_key(&id) {
                self.detached.insert(id);
                return None;
            }
            self.nodes.remove(&id);
            return Some(id);
        }
        None
    }
}

fn new_node(perm: u16, owner: (u32, u32), body: Body) -> MInode {
    MInode {
        perm,
        uid: owner.0,
        gid: owner.1,
        atime: None,
        mtime: None,
        xattrs: BTreeMap::new(),
        xattr_space: XATTR_SPACE,
        body,
        compr: None,
    }
}

/// Writes into a model file (blocks it touches become allocated).
fn model_write(size: &mut u64, blocks: &mut BTreeMap<u64, Vec<u8>>, off: u64, data: &[u8]) {
    let mut pos = 0usize;
    while pos < data.len() {
        let at = off + pos as u64;
        let index = at / BS;
        let in_block = (at % BS) as usize;
        let n = (BS as usize - in_block).min(data.len() - pos);
        let block = blocks.entry(index).or_insert_with(|| vec![0; BS as usize]);
        block[in_block..in_block + n].copy_from_slice(&data[pos..pos + n]);
        pos += n;
    }
    *size = (*size).max(off + data.len() as u64);
}

fn model_truncate(size: &mut u64, blocks: &mut BTreeMap<u64, Vec<u8>>, new: u64) {
    if new < *size {
        let keep = new.div_ceil(BS);
        blocks.retain(|&b, _| b < keep);
        if !new.is_multiple_of(BS) {
            if let Some(block) = blocks.get_mut(&(new / BS)) {
                block[(new % BS) as usize..].fill(0);
            }
        }
    }
    *size = new;
}

/// Zeroes bytes `[start, end)` of a model file's blocks; whole blocks in
/// the range are dropped (holes and reservations both read as zeros).
fn model_zero(blocks: &mut BTreeMap<u64, Vec<u8>>, start: u64, end: u64) {
    let whole = start.div_ceil(BS)..end / BS;
    blocks.retain(|b, _| !whole.contains(b));
    for b in [start / BS, (end - 1) / BS] {
        if let Some(block) = blocks.get_mut(&b) {
            let from = start.max(b * BS) - b * BS;
            let to = end.min((b + 1) * BS) - b * BS;
            block[from as usize..to as usize].fill(0);
        }
    }
}

/// The engine's fallocate on a model file (the call was accepted).
fn model_fallocate(
    size: &mut u64,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
    off: u64,
    len: u64,
    mode: FallocMode,
) {
    let end = off + len;
    let live = size.div_ceil(BS);
    let (first, n) = (off / BS, len / BS);
    match mode {
        FallocMode::Allocate { keep_size } if !keep_size => *size = (*size).max(end),
        FallocMode::Allocate { .. } => {}
        FallocMode::PunchHole => {
            if off < *size {
                model_zero(blocks, off, end);
            }
        }
        FallocMode::ZeroRange { keep_size } => {
            model_zero(blocks, off, end);
            if !keep_size {
                *size = (*size).max(end);
            }
        }
        FallocMode::CollapseRange => {
            *blocks = std::mem::take(blocks)
                .into_iter()
                .filter(|&(b, _)| b < live && !(first..first + n).contains(&b))
                .map(|(b, d)| (if b >= first + n { b - n } else { b }, d))
                .collect();
            *size -= len;
        }
        FallocMode::InsertRange => {
            *blocks = std::mem::take(blocks)
                .into_iter()
                .filter(|&(b, _)| b < live)
                .map(|(b, d)| (if b >= first { b + n } else { b }, d))
                .collect();
            *size += len;
        }
    }
}

/// Kernel xattr space of a new inode: 200 inline bytes + 4072 in the xattr
/// node, holding a 24-byte header and entries padded to 4 bytes. (Inodes
/// mkfs made have no inline area.) MAX_VALUE_LEN is the space less the
/// header and one entry header.
const XATTR_SPACE: usize = 200 + 4072;

fn xattr_entry_size(full: &[u8], value_len: usize) -> usize {
    let suffix = full.iter().position(|&b| b == b'.').unwrap() + 1;
    (4 + full.len() - suffix + value_len).div_ceil(4) * 4
}

// ---------------------------------------------------------------- the harness

#[derive(Debug, Default)]
struct Stats {
    ops: u64,
    ok: u64,
    expected_errors: u64,
    enospc: u64,
    short_writes: u64,
    /// Per operation kind and outcome ("Ok", "ENOENT", ...): how often.
    outcomes: BTreeMap<String, u64>,
    /// Unlinked inodes freed at their last close (or unmount).
    orphans_freed: u64,
    /// Free blocks (statfs) each time `Fill` stopped on ENOSPC.
    free_at_enospc: Vec<u64>,
}

struct Harness {
    _scratch: Scratch,
    img: PathBuf,
    fs: Option<Fs>,
    m: Model,
    /// Model inode -> engine inode number.
    ino: HashMap<Id, u32>,
    max_file_bytes: u64,
    /// Open handles (`Op::Open`), by model inode.
    handles: Vec<Id>,
    fill_seq: u32,
    stats: Stats,
    trace: bool,
    compression: CompressionMount,
}

type Outcome<T> = Result<T, String>;

fn errno_name(e: i32) -> String {
    let names = [
        (libc::ENOENT, "ENOENT"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENODATA, "ENODATA"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::E2BIG, "E2BIG"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EPERM, "EPERM"),
        (libc::EFBIG, "EFBIG"),
        (libc::ERANGE, "ERANGE"),
        (libc::EROFS, "EROFS"),
        (libc::EUCLEAN, "EUCLEAN"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == e)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("errno {e}"))
}

fn fmt_expect(e: &Result<(), i32>) -> String {
    match e {
        Ok(()) => "Ok".into(),
        Err(e) => errno_name(*e),
    }
}

fn show(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if name.len() > 24 {
        let head: String = s.chars().take(12).collect();
        format!("{head:?}..({} bytes)", name.len())
    } else {
        format!("{s:?}")
    }
}

/// Opens the image writable. The model tracks reservations block by
/// block, so writes must not turn the reserved blocks around them into
/// data: `extent_zeroout_len` 0 (zero-out chunks are tested in ipu.rs
/// and powercut.rs). With the mount's `write_behind` and read-ahead.
fn open_rw(img: &std::path::Path) -> Outcome<Fs> {
    let settings = [("extent_zeroout_len".to_string(), 0)];
    let options = OpenOptions {
        writable: true,
        write_behind: true,
        read_ahead: 16 << 20,
        ..Default::default()
    };
    Fs::open_path_with(img, options, &settings).map_err(|e| format!("open writable: {e}"))
}

impl Harness {
    fn new(case: &Case) -> Outcome<Harness> {
        let scratch = Scratch::new("model");
        let img = scratch.join("img");
        let opts = MkfsOptions {
            features: parse_features(if case.features { FEATURES } else { "" }).unwrap(),
            root_uid: 0,
            root_gid: 0,
            ..MkfsOptions::default()
        };
        format_path(&img, Some(case.size_mib << 20), &opts).map_err(|e| format!("mkfs: {e}"))?;
        let fs = open_rw(&img)?;
        let extra_words = if case.features { 9 } else { 0 };
        let addrs_per_inode = 923 - extra_words - 50;
        let mut h = Harness {
            _scratch: scratch,
            img,
            m: Model::default(),
            ino: HashMap::new(),
            max_file_bytes: max_file_blocks(AddrCounts::plain(addrs_per_inode)) * BS,
            fill_seq: 0,
            handles: Vec::new(),
            stats: Stats::default(),
            trace: std::env::var_os("F2FUSE_MODEL_TRACE").is_some(),
            fs: None,
            compression: CompressionMount::new(case.features, addrs_per_inode),
        };
        // The model starts as a copy of what mkfs made (root, lost+found).
        let root = fs.inode(F2FS_ROOT_INO).map_err(|e| e.to_string())?;
        h.m.nodes.insert(
            ROOT,
            MInode {
                perm: root.mode & 0o7777,
                uid: root.uid,
                gid: root.gid,
                atime: Some(root.atime),
                mtime: Some(root.mtime),
                xattrs: BTreeMap::new(),
                xattr_space: 4 * root.layout.inline_xattr_words + 4072,
                body: Body::Dir {
                    children: BTreeMap::new(),
                    parent: ROOT,
                },
                compr: None,
            },
        );
        h.m.next = 1;
        h.ino.insert(ROOT, F2FS_ROOT_INO);
        for e in fs.read_dir(F2FS_ROOT_INO).map_err(|e| e.to_string())? {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let info = fs.inode(e.ino).map_err(|e| e.to_string())?;
            if info.kind != FileKind::Directory {
                return Err(format!("unexpected {:?} in a fresh root", e.name));
            }
            let mut node = new_node(
                info.mode & 0o7777,
                (info.uid, info.gid),
                Body::Dir {
                    children: BTreeMap::new(),
                    parent: ROOT,
                },
            );
            node.mtime = Some(info.mtime);
            node.atime = Some(info.atime);
            node.xattr_space = 4 * info.layout.inline_xattr_words + 4072;
            let id = h.m.add(ROOT, e.name, node);
            h.ino.insert(id, e.ino);
        }
        h.m.node_mut(ROOT).mtime = Some(root.mtime);
        h.fs = Some(fs);
        Ok(h)
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("open")
    }

    fn ino(&self, id: Id) -> u32 {
        self.ino[&id]
    }

    /// Compares an engine result with the model's expectation. Returns
    /// Some(value) when both succeeded; None when both failed alike, or
    /// the engine ran out of space on an operation that may allocate.
    fn check<T>(
        &mut self,
        what: &str,
        got: Result<T, Error>,
        expect: Result<(), i32>,
        may_enospc: bool,
    ) -> Outcome<Option<T>> {
        self.stats.ops += 1;
        if self.trace {
            let g = match &got {
                Ok(_) => "Ok".to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!("  {what}: model {} engine {g}", fmt_expect(&expect));
        }
        let kind = what.split(' ').next().unwrap_or("").to_string();
        let outcome = match &got {
            Ok(_) => "Ok".to_string(),
            Err(e) => errno_name(e.to_errno()),
        };
        *self
            .stats
            .outcomes
            .entry(format!("{kind} {outcome}"))
            .or_default() += 1;
        match (got, expect) {
            (Ok(v), Ok(())) => {
                self.stats.ok += 1;
                Ok(Some(v))
            }
            (Err(e), Err(want)) if e.is_refusal() && e.to_errno() == want => {
                self.stats.expected_errors += 1;
                Ok(None)
            }
            (Err(e), Ok(())) if e.kind() == ErrorKind::NoSpace && may_enospc => {
                self.stats.enospc += 1;
                Ok(None)
            }
            (Ok(_), Err(want)) => Err(format!(
                "{what}: engine succeeded, model expects {}",
                errno_name(want)
            )),
            (Err(e), want) => Err(format!(
                "{what}: engine failed with {} ({e}), model expects {}",
                errno_name(e.to_errno()),
                fmt_expect(&want)
            )),
        }
    }

    fn learn_ino(&mut self, id: Id, ino: u32) -> Outcome<()> {
        if let Some((other, _)) = self.ino.iter().find(|(_, &i)| i == ino) {
            return Err(format!(
                "engine reused inode {ino} of live model inode {other}"
            ));
        }
        self.ino.insert(id, ino);
        Ok(())
    }

    fn forget(&mut self, freed: Option<Id>) {
        if let Some(id) = freed {
            self.ino.remove(&id);
        }
    }

    // ---- namespace

    /// Linux order: parent not a directory, name too long, name exists.
    fn create_expect(&self, dir: Id, name: &[u8]) -> Result<(), i32> {
        if !self.m.is_dir(dir) {
            return Err(libc::ENOTDIR);
        }
        if name.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        if self.m.lookup(dir, name).is_some() {
            return Err(libc::EEXIST);
        }
        Ok(())
    }

    fn do_create(&mut self, dir: Id, name: &[u8], node: MInode) -> Outcome<Option<Id>> {
        self.do_create_via(dir, name, node, None)
    }

    /// `mknod_type`: make a regular file with mknod and these type bits.
    fn do_create_via(
        &mut self,
        dir: Id,
        name: &[u8],
        node: MInode,
        mknod_type: Option<u16>,
    ) -> Outcome<Option<Id>> {
        let expect = match &node.body {
            Body::Symlink(t) if t.is_empty() => Err(libc::ENOENT),
            Body::Symlink(t) if t.len() > 4095 => Err(libc::ENAMETOOLONG),
            _ => self.create_expect(dir, name),
        };
        let parent = self.ino(dir);
        let (uid, gid) = (node.uid, node.gid);
        let fs = self.fs();
        let got = match &node.body {
            Body::Dir { .. } => fs.mkdir(parent, name, node.perm, uid, gid),
            Body::File { .. } => match mknod_type {
                Some(t) => fs.mknod(parent, name, t | node.perm, (0, 0), uid, gid),
                None => fs.create(parent, name, node.perm, uid, gid),
            },
            Body::Symlink(target) => fs.symlink(parent, name, target, uid, gid),
            Body::Special { kind, rdev } => {
                let t = match kind {
                    FileKind::Fifo => libc::S_IFIFO,
                    FileKind::CharDevice => libc::S_IFCHR,
                    FileKind::BlockDevice => libc::S_IFBLK,
                    FileKind::Socket => libc::S_IFSOCK,
                    _ => unreachable!(),
                } as u16;
                fs.mknod(parent, name, t | node.perm, *rdev, uid, gid)
            }
        };
        let what = format!("create {:?} {} in {dir}", node.kind(), show(name));
        let Some(info) = self.check(&what, got, expect, true)? else {
            return Ok(None);
        };
        let mut node = node;
        if let Body::Dir { parent, .. } = &mut node.body {
            *parent = dir;
        }
        node.compr = self.new_inode_compr(dir, &node.body, mknod_type.is_some());
        let id = self.m.add(dir, name.to_vec(), node);
        self.learn_ino(id, info.ino)?;
        Ok(Some(id))
    }

    fn do_link(&mut self, src: Id, dir: Id, name: &[u8]) -> Outcome<()> {
        let expect = self.create_expect(dir, name).and_then(|()| {
            if self.m.is_dir(src) {
                Err(libc::EPERM)
            } else if self.m.detached.contains(&src) {
                Err(libc::ENOENT)
            } else {
                Ok(())
            }
        });
        let got = self.fs().link(self.ino(src), self.ino(dir), name);
        let what = format!("link {src} as {} in {dir}", show(name));
        if self.check(&what, got, expect, true)?.is_some() {
            self.m.children_mut(dir).insert(name.to_vec(), src);
            self.m.touch(dir);
        }
        Ok(())
    }

    fn do_remove(&mut self, dir: Id, name: &[u8], rmdir: bool) -> Outcome<()> {
        let expect = (|| {
            if !self.m.is_dir(dir) {
                return Err(libc::ENOTDIR);
            }
            if name.len() > 255 {
                return Err(libc::ENAMETOOLONG);
            }
            let id = self.m.lookup(dir, name).ok_or(libc::ENOENT)?;
            match (rmdir, self.m.is_dir(id)) {
                (true, false) => Err(libc::ENOTDIR),
                (false, true) => Err(libc::EISDIR),
                (true, true) if !self.m.children(id).unwrap().is_empty() => Err(libc::ENOTEMPTY),
                _ => Ok(()),
            }
        })();
        let parent = self.ino(dir);
        let got = if rmdir {
            self.fs().rmdir(parent, name)
        } else {
            self.fs().unlink(parent, name)
        };
        let what = format!(
            "{} {} in {dir}",
            if rmdir { "rmdir" } else { "unlink" },
            show(name)
        );
        if self.check(&what, got, expect, true)?.is_some() {
            let freed = self.m.remove(dir, name);
            self.forget(freed);
        }
        Ok(())
    }

    fn rename_expect(
        &self,
        (p1, n1): (Id, &[u8]),
        (p2, n2): (Id, &[u8]),
        flags: RFlags,
    ) -> Result<(), i32> {
        let m = &self.m;
        if flags == RFlags::Both {
            return Err(libc::EINVAL);
        }
        if !m.is_dir(p1) || !m.is_dir(p2) {
            return Err(libc::ENOTDIR);
        }
        if n1.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        let src = m.lookup(p1, n1).ok_or(libc::ENOENT)?;
        if n2.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        let dst = m.lookup(p2, n2);
        if flags == RFlags::NoReplace && dst.is_some() {
            return Err(libc::EEXIST);
        }
        if flags == RFlags::Exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        // lock_rename's trap: the source may not contain the new parent, the
        // target may not contain the old parent.
        if p1 != p2 {
            if m.is_dir(src) && m.is_ancestor(src, p2) {
                return Err(libc::EINVAL);
            }
            if let Some(d) = dst {
                if m.is_dir(d) && m.is_ancestor(d, p1) {
                    return Err(if flags == RFlags::Exchange {
                        libc::EINVAL
                    } else {
                        libc::ENOTEMPTY
                    });
                }
            }
        }
        let Some(dst) = dst else { return Ok(()) };
        if src == dst || flags == RFlags::Exchange {
            return Ok(());
        }
        match (m.is_dir(src), m.is_dir(dst)) {
            (true, false) => Err(libc::ENOTDIR),
            (false, true) => Err(libc::EISDIR),
            (true, true) if !m.children(dst).unwrap().is_empty() => Err(libc::ENOTEMPTY),
            _ => Ok(()),
        }
    }

    fn do_rename(&mut self, from: (Id, Vec<u8>), to: (Id, Vec<u8>), flags: RFlags) -> Outcome<()> {
        let (p1, n1) = from;
        let (p2, n2) = to;
        let expect = self.rename_expect((p1, &n1), (p2, &n2), flags);
        let rf = RenameFlags {
            noreplace: matches!(flags, RFlags::NoReplace | RFlags::Both),
            exchange: matches!(flags, RFlags::Exchange | RFlags::Both),
            whiteout: false,
        };
        let got = self.fs().rename(self.ino(p1), &n1, self.ino(p2), &n2, rf);
        let what = format!(
            "rename {} in {p1} -> {} in {p2} {flags:?}",
            show(&n1),
            show(&n2)
        );
        if self.check(&what, got, expect, true)?.is_none() {
            return Ok(());
        }
        let m = &mut self.m;
        let src = m.lookup(p1, &n1).unwrap();
        let dst = m.lookup(p2, &n2);
        if dst == Some(src) {
            return Ok(()); // Two names of one inode: nothing happens.
        }
        if flags == RFlags::Exchange {
            let dst = dst.unwrap();
            m.children_mut(p1).insert(n1, dst);
            m.children_mut(p2).insert(n2, src);
            m.touch(p1);
            m.touch(p2);
            if p1 != p2 {
                for (id, parent) in [(src, p2), (dst, p1)] {
                    if let Body::Dir { parent: p, .. } = &mut m.node_mut(id).body {
                        *p = parent;
                        m.touch(id); // its ".." changed
                    }
                }
            }
            return Ok(());
        }
        let mut freed = None;
        if dst.is_some() {
            freed = m.remove(p2, &n2);
        }
        m.children_mut(p1).remove(&n1);
        m.children_mut(p2).insert(n2, src);
        m.touch(p1);
        m.touch(p2);
        if p1 != p2 {
            if let Body::Dir { parent, .. } = &mut m.node_mut(src).body {
                *parent = p2;
                m.touch(src);
            }
        }
        self.forget(freed);
        Ok(())
    }

    // ---- data and attributes

    fn do_write(&mut self, id: Id, off: u64, data: &[u8]) -> Outcome<usize> {
        let off = self.fsck_safe_offset(id, off, data.len());
        let max = self.max_bytes(id);
        let expect = match self.m.node(id).kind() {
            // As f2fs_file_write_iter: released before the size checks.
            FileKind::Regular if self.released(id) => Err(libc::EPERM),
            FileKind::Regular if off >= max => Err(libc::EFBIG),
            FileKind::Regular => Ok(()),
            FileKind::Directory => Err(libc::EISDIR),
            _ => Err(libc::EINVAL),
        };
        // Like the kernel, a write crossing the largest file size is cut short.
        let want = (data.len() as u64).min(max.saturating_sub(off)) as usize;
        let got = self.fs().write(self.ino(id), off, data);
        let what = format!("write {} bytes at {off} to {id}", data.len());
        let Some(n) = self.check(&what, got, expect, true)? else {
            return Ok(0);
        };
        if n == 0 || n > want {
            return Err(format!("{what}: engine wrote {n} bytes, expected {want}"));
        }
        if n < want {
            self.stats.short_writes += 1;
            if self.trace {
                eprintln!("  (short write: {n} bytes)");
            }
        }
        let node = self.m.node_mut(id);
        node.mtime = None;
        if let Body::File { size, blocks } = &mut node.body {
            model_write(size, blocks, off, &data[..n]);
        }
        Ok(n)
    }

    fn do_fallocate(&mut self, id: Id, off: u64, len: u64, mode: FallocMode) -> Outcome<()> {
        let size = match &self.m.node(id).body {
            Body::File { size, .. } => *size,
            _ => 0,
        };
        let aligned = off.is_multiple_of(BS) && len.is_multiple_of(BS);
        let end = off + len;
        let max = self.max_bytes(id);
        let compressed = self.m.node(id).compr.is_some();
        // The VFS's checks, then f2fs's.
        let expect = match self.m.node(id).kind() {
            FileKind::Directory => Err(libc::EISDIR),
            FileKind::Fifo => Err(libc::ESPIPE),
            FileKind::Regular => match mode {
                _ if len == 0 => Err(libc::EINVAL),
                _ if end > max => Err(libc::EFBIG),
                // Compressed files only preallocate, and not once released.
                FallocMode::Allocate { .. } if self.released(id) => Err(libc::EPERM),
                FallocMode::Allocate { .. } => Ok(()),
                _ if compressed => Err(libc::EOPNOTSUPP),
                FallocMode::CollapseRange if !aligned || end >= size => Err(libc::EINVAL),
                FallocMode::InsertRange if !aligned || off >= size => Err(libc::EINVAL),
                FallocMode::InsertRange if size + len > max => Err(libc::EFBIG),
                _ => Ok(()),
            },
            _ => Err(libc::ENODEV),
        };
        let got = self.fs().fallocate(self.ino(id), off, len, mode);
        let what = format!("fallocate {id} {off}+{len} {mode:?}");
        if self.check(&what, got, expect, true)?.is_none() {
            return Ok(());
        }
        let node = self.m.node_mut(id);
        node.mtime = None;
        if let Body::File { size, blocks } = &mut node.body {
            model_fallocate(size, blocks, off, len, mode);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn do_setattr(
        &mut self,
        id: Id,
        mode: Option<u16>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TSet>,
        mtime: Option<TSet>,
    ) -> Outcome<()> {
        let kind = self.m.node(id).kind();
        let max = self.max_bytes(id);
        let expect = match (size, kind) {
            (None, _) => Ok(()),
            (Some(_), FileKind::Directory) => Err(libc::EISDIR),
            (Some(s), FileKind::Regular) if s > max => Err(libc::EFBIG),
            // A released file keeps whole clusters (f2fs_setattr).
            (Some(s), FileKind::Regular)
                if self.released(id) && !s.is_multiple_of(self.cluster_bytes(id)) =>
            {
                Err(libc::EINVAL)
            }
            (Some(_), FileKind::Regular) => Ok(()),
            (Some(_), _) => Err(libc::EINVAL),
        };
        let ts = |t: Option<TSet>| {
            t.map(|t| match t {
                TSet::Now => TimeSet::Now,
                TSet::At(sec, nsec) => TimeSet::At(Timestamp { sec, nsec }),
            })
        };
        let attr = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: ts(atime),
            mtime: ts(mtime),
            ctime: None,
            kill_privileges: false,
            through_writable_file: false,
        };
        let got = self.fs().setattr(self.ino(id), &attr);
        let what = format!("setattr {id} {attr:?}");
        if self.check(&what, got, expect, size.is_some())?.is_none() {
            return Ok(());
        }
        let node = self.m.node_mut(id);
        if let Some(m) = mode {
            node.perm = m & 0o7777;
        }
        if let Some(u) = uid {
            node.uid = u;
        }
        if let Some(g) = gid {
            node.gid = g;
        }
        if let Some(new) = size {
            node.mtime = None;
            if let Body::File { size, blocks } = &mut node.body {
                model_truncate(size, blocks, new);
            }
            // An empty file is no longer released.
            if let (0, Some(c)) = (new, &mut node.compr) {
                c.released = false;
            }
        }
        let known = |t: TSet| match t {
            TSet::Now => None,
            TSet::At(sec, nsec) => Some(Timestamp { sec, nsec }),
        };
        if let Some(t) = atime {
            node.atime = known(t);
        }
        if let Some(t) = mtime {
            node.mtime = known(t);
        }
        Ok(())
    }

    fn do_set_xattr(&mut self, id: Id, name: XName, value: &[u8], mode: XMode) -> Outcome<()> {
        let node = self.m.node(id);
        if name.is_user() && !matches!(node.kind(), FileKind::Regular | FileKind::Directory) {
            // The VFS refuses user.* on these before any file system sees it.
            return Ok(());
        }
        let full = name.bytes();
        let expect = (|| {
            if full.len() > 255 {
                return Err(libc::ERANGE);
            }
            if value.len() > node.xattr_space - 24 - 4 {
                return Err(libc::E2BIG);
            }
            let old = node.xattrs.get(&full);
            match (mode, old) {
                (XMode::XCreate, Some(_)) => return Err(libc::EEXIST),
                (XMode::XReplace, None) => return Err(libc::ENODATA),
                _ => {}
            }
            let others: usize = node
                .xattrs
                .iter()
                .filter(|(n, _)| **n != full)
                .map(|(n, v)| xattr_entry_size(n, v.len()))
                .sum();
            if 24 + others + xattr_entry_size(&full, value.len()) > node.xattr_space {
                return Err(libc::E2BIG);
            }
            Ok(())
        })();
        let m = match mode {
            XMode::XAny => SetMode::Any,
            XMode::XCreate => SetMode::Create,
            XMode::XReplace => SetMode::Replace,
        };
        let got = self.fs().set_xattr(self.ino(id), &full, value, m);
        let what = format!(
            "set_xattr {id} {} ({} bytes) {mode:?}",
            show(&full),
            value.len()
        );
        if self.check(&what, got, expect, true)?.is_some() {
            self.m.node_mut(id).xattrs.insert(full, value.to_vec());
        }
        Ok(())
    }

    fn do_remove_xattr(&mut self, id: Id, name: XName) -> Outcome<()> {
        let node = self.m.node(id);
        if name.is_user() && !matches!(node.kind(), FileKind::Regular | FileKind::Directory) {
            return Ok(());
        }
        let full = name.bytes();
        let expect = if full.len() > 255 {
            Err(libc::ERANGE)
        } else if !node.xattrs.contains_key(&full) {
            Err(libc::ENODATA)
        } else {
            Ok(())
        };
        let got = self.fs().remove_xattr(self.ino(id), &full);
        let what = format!("remove_xattr {id} {}", show(&full));
        if self.check(&what, got, expect, true)?.is_some() {
            self.m.node_mut(id).xattrs.remove(&full);
        }
        Ok(())
    }

    /// Unmounts (which releases every open handle) and opens again.
    fn reopen(&mut self) -> Outcome<()> {
        let fs = self.fs.take().expect("open");
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        self.forget_handles();
        fsck_f2fs(&self.img).map_err(|report| format!("fsck.f2fs at reopen:\n{report}"))?;
        self.fs = Some(open_rw(&self.img)?);
        // Mount options are not kept.
        self.compression =
            CompressionMount::new(self.compression.feature, self.compression.addrs_per_inode);
        Ok(())
    }

    fn forget_handles(&mut self) {
        self.handles.clear();
        self.m.open.clear();
        for id in std::mem::take(&mut self.m.detached) {
            self.stats.orphans_freed += 1;
            self.m.nodes.remove(&id);
            self.ino.remove(&id);
        }
    }

    fn close(&mut self, handle: u8) -> Outcome<()> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let id = self.handles.remove(handle as usize % self.handles.len());
        let count = self.m.open.get_mut(&id).expect("open");
        *count -= 1;
        let left = *count;
        if left == 0 {
            self.m.open.remove(&id);
        }
        let got = self.fs().release(self.ino(id));
        let what = format!("release {id}");
        if let Some(more) = self.check(&what, got, Ok(()), false)? {
            if more != (left > 0) {
                return Err(format!("{what}: engine says handles remain: {more}"));
            }
        }
        if left == 0 && self.m.detached.remove(&id) {
            self.stats.orphans_freed += 1;
            self.m.nodes.remove(&id);
            self.ino.remove(&id);
        }
        Ok(())
    }

    // ---- operations

    fn apply(&mut self, op: &Op) -> Outcome<()> {
        if self.trace {
            eprintln!("{op:?} (free blocks {})", self.fs().statfs().blocks_free);
        }
        match *op {
            Op::Create {
                dir,
                name,
                perm,
                owner,
            } => {
                let dir = self.m.pick(dir);
                let body = Body::File {
                    size: 0,
                    blocks: BTreeMap::new(),
                };
                self.do_create(
                    dir,
                    &name.bytes(),
                    new_node(perm, OWNERS[owner as usize], body),
                )?;
            }
            Op::Mkdir {
                dir,
                name,
                perm,
                owner,
            } => {
                let dir = self.m.pick(dir);
                let body = Body::Dir {
                    children: BTreeMap::new(),
                    parent: dir,
                };
                self.do_create(
                    dir,
                    &name.bytes(),
                    new_node(perm, OWNERS[owner as usize], body),
                )?;
            }
            Op::Mknod {
                dir,
                name,
                kind,
                perm,
                major,
                minor,
            } => {
                let dir = self.m.pick(dir);
                let (kind, rdev) = match kind {
                    Nod::Fifo => (FileKind::Fifo, (0, 0)),
                    Nod::Sock => (FileKind::Socket, (0, 0)),
                    Nod::Chr => (FileKind::CharDevice, (major, minor)),
                    Nod::Blk => (FileKind::BlockDevice, (major, minor)),
                    Nod::Reg | Nod::NoType => {
                        let body = Body::File {
                            size: 0,
                            blocks: BTreeMap::new(),
                        };
                        let t = if kind == Nod::Reg {
                            libc::S_IFREG as u16
                        } else {
                            0
                        };
                        let node = new_node(perm, (0, 0), body);
                        self.do_create_via(dir, &name.bytes(), node, Some(t))?;
                        return Ok(());
                    }
                    Nod::Dir | Nod::Lnk => {
                        // mknod(2) checks the type before anything else.
                        let (t, errno) = if kind == Nod::Dir {
                            (libc::S_IFDIR, libc::EPERM)
                        } else {
                            (libc::S_IFLNK, libc::EINVAL)
                        };
                        let mode = t as u16 | perm;
                        let got = self
                            .fs()
                            .mknod(self.ino(dir), &name.bytes(), mode, (0, 0), 0, 0);
                        self.check(&format!("mknod {mode:o}"), got, Err(errno), false)?;
                        return Ok(());
                    }
                };
                let body = Body::Special { kind, rdev };
                self.do_create(dir, &name.bytes(), new_node(perm, (0, 0), body))?;
            }
            Op::Symlink {
                dir,
                name,
                len,
                seed,
            } => {
                let dir = self.m.pick(dir);
                let target: Vec<u8> = pattern(seed, 0, len as usize)
                    .into_iter()
                    .map(|b| if b % 7 == 0 { b'/' } else { b'a' + b % 26 })
                    .collect();
                let node = new_node(0o777, (0, 0), Body::Symlink(target));
                self.do_create(dir, &name.bytes(), node)?;
            }
            Op::Link { src, dir, name } => {
                let src = self.m.pick(src);
                let dir = self.m.pick(dir);
                self.do_link(src, dir, &name.bytes())?;
            }
            Op::Unlink { at } => {
                let (dir, name) = self.m.loc(at);
                self.do_remove(dir, &name, false)?;
            }
            Op::Rmdir { at } => {
                let (dir, name) = self.m.loc(at);
                self.do_remove(dir, &name, true)?;
            }
            Op::Rename { from, to, flags } => {
                let from = self.m.loc(from);
                let to = self.m.loc(to);
                self.do_rename(from, to, flags)?;
            }
            Op::Write {
                file,
                off,
                len,
                seed,
            } => {
                let id = self.m.pick(file);
                let data = pattern(seed, off, len as usize);
                self.do_write(id, off, &data)?;
            }
            Op::Fallocate {
                file,
                off,
                len,
                mode,
            } => {
                let id = self.m.pick(file);
                self.do_fallocate(id, off, len, mode)?;
            }
            Op::Truncate { file, size } => {
                let id = self.m.pick(file);
                self.do_setattr(id, None, None, None, Some(size), None, None)?;
            }
            Op::SetAttr {
                file,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
            } => {
                let id = self.m.pick(file);
                self.do_setattr(id, mode, uid, gid, size, atime, mtime)?;
            }
            Op::SetXattr {
                file,
                name,
                len,
                seed,
                mode,
            } => {
                let id = self.m.pick(file);
                let value = pattern(seed, 7, len as usize);
                self.do_set_xattr(id, name, &value, mode)?;
            }
            Op::RemoveXattr { file, name } => {
                let id = self.m.pick(file);
                self.do_remove_xattr(id, name)?;
            }
            Op::Populate { dir, count, seed } => {
                let dir = self.m.pick(dir);
                for i in 0..count {
                    let name = padded(format!("p{seed}-{i:03}-"), 190, b'q');
                    let body = Body::File {
                        size: 0,
                        blocks: BTreeMap::new(),
                    };
                    if let Some(id) = self.do_create(dir, &name, new_node(0o640, (0, 0), body))? {
                        self.do_write(id, 0, format!("populated {i}").as_bytes())?;
                    }
                }
            }
            Op::Checkpoint => {
                let got = self.fs().checkpoint();
                self.check("checkpoint", got, Ok(()), false)?;
            }
            Op::Reopen => {
                self.reopen()?;
                self.compare(self.fs(), true)?;
            }
            Op::Tune {
                folio_order,
                serialized_dio_pages,
                ipu_policy,
            } => {
                let fs = self.fs();
                let got = fs
                    .set_tunable("max_folio_order", folio_order as u64)
                    .and_then(|()| {
                        fs.set_tunable("serialized_dio_pages", serialized_dio_pages as u64)
                    })
                    .and_then(|()| fs.set_tunable("ipu_policy", ipu_policy as u64));
                self.check("tune", got, Ok(()), false)?;
            }
            Op::Fill { chunk_kib } => self.fill(chunk_kib as usize * 1024)?,
            Op::DeleteFill { every } => {
                let names: Vec<Vec<u8>> = self
                    .m
                    .children(ROOT)
                    .unwrap()
                    .keys()
                    .filter(|n| n.starts_with(b"fill-"))
                    .cloned()
                    .collect();
                for name in names.iter().step_by(every.max(1) as usize) {
                    self.do_remove(ROOT, name, false)?;
                }
            }
            Op::Open { file } => {
                let id = self.m.pick(file);
                let got = self.fs().open_inode(self.ino(id));
                self.check(&format!("open {id}"), got, Ok(()), false)?;
                self.handles.push(id);
                *self.m.open.entry(id).or_default() += 1;
            }
            Op::Close { handle } => self.close(handle)?,
            Op::LinkOpen { handle, dir, name } => {
                if !self.handles.is_empty() {
                    let id = self.handles[handle as usize % self.handles.len()];
                    let dir = self.m.pick(dir);
                    self.do_link(id, dir, &name.bytes())?;
                }
            }
            Op::WriteOpen {
                handle,
                off,
                len,
                seed,
            } => {
                if !self.handles.is_empty() {
                    let id = self.handles[handle as usize % self.handles.len()];
                    let data = pattern(seed, off, len as usize);
                    self.do_write(id, off, &data)?;
                }
            }
            Op::Trim { blocks } => {
                let last = self
                    .m
                    .children(ROOT)
                    .unwrap()
                    .iter()
                    .rev()
                    .find_map(|(n, &id)| {
                        (n.starts_with(b"fill-") && !self.m.is_dir(id)).then_some(id)
                    });
                if let Some(id) = last {
                    let Body::File { size, .. } = self.m.node(id).body else {
                        unreachable!("fill files are files")
                    };
                    let new = size.saturating_sub(blocks as u64 * BS) / BS * BS;
                    self.do_setattr(id, None, None, None, Some(new), None, None)?;
                }
            }
            Op::CompressFlag { .. }
            | Op::WriteText { .. }
            | Op::CompressMount { .. }
            | Op::Fsync { .. }
            | Op::ReleaseBlocks { .. }
            | Op::ReserveBlocks { .. }
            | Op::Recompress { .. }
            | Op::Clean { .. } => self.apply_compression_op(op)?,
        }
        Ok(())
    }

    /// Creates files and writes `chunk`-byte pieces (up to 8 MiB per file)
    /// until the file system runs out of space.
    fn fill(&mut self, chunk: usize) -> Outcome<()> {
        for _ in 0..10_000 {
            self.fill_seq += 1;
            let name = format!("fill-{:05}", self.fill_seq).into_bytes();
            let body = Body::File {
                size: 0,
                blocks: BTreeMap::new(),
            };
            let before = self.stats.enospc;
            let Some(id) = self.do_create(ROOT, &name, new_node(0o644, (0, 0), body))? else {
                return self.after_enospc(before);
            };
            let mut off = 0u64;
            while off < 8 << 20 {
                let data = pattern(self.fill_seq as u8 | 1, off, chunk);
                let before = self.stats.enospc;
                let n = self.do_write(id, off, &data)?;
                if n < chunk {
                    return self.after_enospc(before);
                }
                off += n as u64;
            }
        }
        Err("fill: 10000 files and still no ENOSPC".into())
    }

    fn after_enospc(&mut self, before: u64) -> Outcome<()> {
        if self.stats.enospc == before && self.stats.short_writes == 0 {
            return Err("fill stopped without ENOSPC".into());
        }
        let free = self.fs().statfs().blocks_free;
        self.stats.free_at_enospc.push(free);
        // Nothing half-done may be visible.
        self.compare(self.fs(), false)
    }

    // ---- comparison

    fn compare(&self, fs: &Fs, contents: bool) -> Outcome<()> {
        let mut seen: HashMap<Id, ()> = HashMap::new();
        let mut stack = vec![(ROOT, "/".to_string())];
        while let Some((id, path)) = stack.pop() {
            self.compare_inode(fs, id, &path, contents)?;
            let Some(children) = self.m.children(id) else {
                continue;
            };
            let ino = self.ino(id);
            let listed = fs
                .read_dir(ino)
                .map_err(|e| format!("{path}: read_dir: {e}"))?;
            let mut engine: BTreeMap<Vec<u8>, (u32, FileKind)> = BTreeMap::new();
            for e in listed {
                if engine.insert(e.name.clone(), (e.ino, e.kind)).is_some() {
                    return Err(format!("{path}: {} listed twice", show(&e.name)));
                }
            }
            let dot = engine.remove(&b"."[..]);
            let dotdot = engine.remove(&b".."[..]);
            let parent_ino = self.ino(self.m.parent(id));
            if dot.map(|d| d.0) != Some(ino) || dotdot.map(|d| d.0) != Some(parent_ino) {
                return Err(format!(
                    "{path}: \".\" {dot:?} \"..\" {dotdot:?}, expected {ino} and {parent_ino}"
                ));
            }
            let want: Vec<&Vec<u8>> = children.keys().collect();
            let have: Vec<&Vec<u8>> = engine.keys().collect();
            if want != have {
                let missing: Vec<String> = children
                    .keys()
                    .filter(|n| !engine.contains_key(*n))
                    .map(|n| show(n))
                    .collect();
                let extra: Vec<String> = engine
                    .keys()
                    .filter(|n| !children.contains_key(*n))
                    .map(|n| show(n))
                    .collect();
                return Err(format!(
                    "{path}: entries differ: missing {missing:?}, unexpected {extra:?}"
                ));
            }
            // Names of the pool that are not here must not be found either.
            for id in 0..6 {
                let name = Name {
                    id,
                    len: Len::Short,
                }
                .bytes();
                if children.contains_key(&name) {
                    continue;
                }
                match fs.lookup(ino, &name) {
                    Err(e) if e.to_errno() == libc::ENOENT => {}
                    other => {
                        return Err(format!(
                            "{path}: lookup of absent {} gives {:?}",
                            show(&name),
                            other.map(|e| e.ino)
                        ))
                    }
                }
            }
            for (name, &child) in children {
                let child_path = format!("{path}{}", String::from_utf8_lossy(name));
                let (eino, ekind) = engine[name];
                let node = self.m.node(child);
                if eino != self.ino(child) || ekind != node.kind() {
                    return Err(format!(
                        "{child_path}: entry names inode {eino} {ekind:?}, expected {} {:?}",
                        self.ino(child),
                        node.kind()
                    ));
                }
                let found = fs
                    .lookup(ino, name)
                    .map_err(|e| format!("{child_path}: lookup: {e}"))?;
                if found.ino != eino {
                    return Err(format!(
                        "{child_path}: lookup finds {} but read_dir {eino}",
                        found.ino
                    ));
                }
                if node.is_dir() {
                    stack.push((child, format!("{child_path}/")));
                } else if seen.insert(child, ()).is_none() {
                    self.compare_inode(fs, child, &child_path, contents)?;
                }
            }
        }
        Ok(())
    }

    fn compare_inode(&self, fs: &Fs, id: Id, path: &str, contents: bool) -> Outcome<()> {
        let node = self.m.node(id);
        let ino = self.ino(id);
        let info = fs
            .inode(ino)
            .map_err(|e| format!("{path}: inode {ino}: {e}"))?;
        let fail = |what: &str, got: String, want: String| {
            Err(format!(
                "{path} (inode {ino}): {what} is {got}, expected {want}"
            ))
        };
        if info.kind != node.kind() {
            return fail(
                "kind",
                format!("{:?}", info.kind),
                format!("{:?}", node.kind()),
            );
        }
        if info.mode & 0o7777 != node.perm {
            return fail(
                "mode",
                format!("{:o}", info.mode & 0o7777),
                format!("{:o}", node.perm),
            );
        }
        if (info.uid, info.gid) != (node.uid, node.gid) {
            return fail(
                "owner",
                format!("{:?}", (info.uid, info.gid)),
                format!("{:?}", (node.uid, node.gid)),
            );
        }
        let links = self.m.links(id);
        if info.links != links {
            return fail("link count", info.links.to_string(), links.to_string());
        }
        if let Some(t) = node.atime {
            if info.atime != t {
                return fail("atime", format!("{:?}", info.atime), format!("{t:?}"));
            }
        }
        if let Some(t) = node.mtime {
            if info.mtime != t {
                return fail("mtime", format!("{:?}", info.mtime), format!("{t:?}"));
            }
        }
        let mut xattrs = fs
            .xattrs(&info)
            .map_err(|e| format!("{path}: xattrs: {e}"))?;
        xattrs.sort();
        let want: Vec<(Vec<u8>, Vec<u8>)> = node
            .xattrs
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        if xattrs != want {
            let names = |x: &[(Vec<u8>, Vec<u8>)]| -> Vec<String> {
                x.iter()
                    .map(|(n, v)| format!("{}={}B", show(n), v.len()))
                    .collect()
            };
            return fail(
                "xattrs",
                format!("{:?}", names(&xattrs)),
                format!("{:?}", names(&want)),
            );
        }
        self.compare_compression(&info, node)
            .map_err(|e| format!("{path} (inode {ino}): {e}"))?;
        match &node.body {
            Body::Dir { .. } => {}
            Body::Symlink(target) => {
                let got = fs
                    .read_link(&info)
                    .map_err(|e| format!("{path}: read_link: {e}"))?;
                if &got != target || info.size != target.len() as u64 {
                    return fail(
                        "symlink target",
                        format!("{} bytes (size {})", got.len(), info.size),
                        format!("{} bytes", target.len()),
                    );
                }
            }
            Body::Special { rdev, .. } => {
                if info.rdev != *rdev || info.size != 0 {
                    return fail(
                        "rdev/size",
                        format!("{:?}/{}", info.rdev, info.size),
                        format!("{rdev:?}/0"),
                    );
                }
            }
            Body::File { size, blocks } => {
                if info.size != *size {
                    return fail("size", info.size.to_string(), size.to_string());
                }
                if contents {
                    self.compare_contents(fs, &info, (*size, node.compr.is_some()), blocks, path)?;
                }
            }
        }
        Ok(())
    }

    fn compare_contents(
        &self,
        fs: &Fs,
        info: &f2fuse_engine::InodeInfo,
        (size, compressed): (u64, bool),
        blocks: &BTreeMap<u64, Vec<u8>>,
        path: &str,
    ) -> Outcome<()> {
        let extents = fs
            .extents(info)
            .map_err(|e| format!("{path}: extents: {e}"))?;
        // Compressed clusters are stored whole (payload blocks sit in any
        // slot of a written cluster): holes are checked for plain files.
        for &(fofs, _, len) in extents.iter().filter(|_| !compressed) {
            if let Some(b) = (fofs..fofs + len).find(|b| !blocks.contains_key(b)) {
                return Err(format!(
                    "{path}: block {b} is allocated but was never written (a hole must stay a hole)"
                ));
            }
        }
        let read = |off: u64, len: usize| -> Outcome<Vec<u8>> {
            let mut buf = vec![0u8; len];
            let n = fs
                .read(info, off, &mut buf)
                .map_err(|e| format!("{path}: read at {off}: {e}"))?;
            if n != len {
                return Err(format!("{path}: read at {off} gave {n} of {len} bytes"));
            }
            Ok(buf)
        };
        let expected_block = |b: u64| -> Vec<u8> {
            let len = (size - b * BS).min(BS) as usize;
            blocks
                .get(&b)
                .map(|d| d[..len].to_vec())
                .unwrap_or_else(|| vec![0; len])
        };
        let first_diff = |got: &[u8], want: &[u8], base: u64| -> Outcome<()> {
            if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
                return Err(format!(
                    "{path}: byte {} is {:#x}, expected {:#x} (size {size})",
                    base + i as u64,
                    got[i],
                    want[i]
                ));
            }
            Ok(())
        };
        if size <= 4 << 20 {
            let got = read(0, size as usize)?;
            let mut want = vec![0u8; size as usize];
            for (&b, data) in blocks {
                let at = (b * BS) as usize;
                let n = (size as usize - at).min(BS as usize);
                want[at..at + n].copy_from_slice(&data[..n]);
            }
            return first_diff(&got, &want, 0);
        }
        // Large and sparse: the written blocks, the allocated ones, the last one.
        let mut check: Vec<u64> = blocks.keys().copied().collect();
        check.extend(extents.iter().map(|e| e.0));
        check.push((size - 1) / BS);
        check.sort_unstable();
        check.dedup();
        for b in check.into_iter().filter(|b| b * BS < size) {
            let want = expected_block(b);
            let got = read(b * BS, want.len())?;
            first_diff(&got, &want, b * BS)?;
        }
        Ok(())
    }

    /// Compares, unmounts, runs fsck.f2fs, reopens read-only and compares again.
    fn finish(mut self) -> Outcome<Stats> {
        self.compare(self.fs(), true)?;
        let fs = self.fs.take().expect("open");
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        self.forget_handles();
        if std::env::var_os("F2FUSE_MODEL_TRACE").is_some() {
            let ro = Fs::open_path(&self.img, OpenOptions::default()).unwrap();
            let cp = ro.checkpoint_state();
            for log in f2fuse_layout::CursegType::ALL {
                eprintln!("{log:?} {:?}", cp.cp.curseg(log));
            }
        }
        fsck_f2fs(&self.img).map_err(|report| format!("fsck.f2fs:\n{report}"))?;
        let ro = Fs::open_path(&self.img, OpenOptions::default())
            .map_err(|e| format!("open read-only: {e}"))?;
        self.compare(&ro, true)
            .map_err(|e| format!("after reopening read-only: {e}"))?;
        Ok(std::mem::take(&mut self.stats))
    }
}

fn run_case(case: &Case) -> Outcome<Stats> {
    let mut h = Harness::new(case)?;
    for (i, op) in case.ops.iter().enumerate() {
        h.apply(op).map_err(|e| format!("op #{i} {op:?}: {e}"))?;
    }
    h.finish()
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run_property(strategy: impl Strategy<Value = Case>, cases: u32) {
    let config = Config {
        cases,
        max_shrink_iters: env_u32("F2FUSE_MODEL_SHRINK", 2000),
        failure_persistence: None,
        ..Config::default()
    };
    let totals = std::sync::Mutex::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |case| {
        let stats = run_case(&case).map_err(TestCaseError::fail)?;
        let mut t = totals.lock().unwrap();
        t.ops += stats.ops;
        t.ok += stats.ok;
        t.expected_errors += stats.expected_errors;
        t.enospc += stats.enospc;
        t.short_writes += stats.short_writes;
        t.orphans_freed += stats.orphans_freed;
        for (k, v) in stats.outcomes {
            *t.outcomes.entry(k).or_default() += v;
        }
        t.free_at_enospc.extend(stats.free_at_enospc);
        Ok(())
    });
    match result {
        Ok(()) => eprintln!("model: {cases} cases, {:#?}", totals.lock().unwrap()),
        Err(TestError::Fail(reason, case)) => {
            panic!("minimal failing case:\n{case:?}\n\nfailure: {reason}")
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn model_sequences() {
    if !require_f2fs_tools() {
        return;
    }
    run_property(case_s(), env_u32("F2FUSE_MODEL_CASES", 32));
}

#[test]
fn gc_churn() {
    if !require_f2fs_tools() {
        return;
    }
    run_property(churn_case_s(), env_u32("F2FUSE_MODEL_CHURN_CASES", 4));
}

#[test]
fn fill_to_enospc() {
    if !require_f2fs_tools() {
        return;
    }
    run_property(fill_case_s(), env_u32("F2FUSE_MODEL_FILL_CASES", 6));
}

// ---------------------------------------------------------------- compressed files
//
// The kernel's rules (6.1 fs/f2fs): set_compress_new_inode gives files
// created by name (not mknod, symlink or tmpfile) and directories the
// flag of a `+c` directory; COMPR_FL changes only on empty files
// (f2fs_setflags_common); compressed files keep the flag, cluster size and
// released state the model tracks in `Compr`; writes to a released file
// are EPERM and it is cut only at cluster boundaries; fallocate only
// preallocates; the ioctls check feature, mode, file, released state in
// that order.

/// COMPR_FL of a file or directory; for a regular file, its clusters
/// (2^`log` blocks) and whether its saved blocks were released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Compr {
    log: u8,
    released: bool,
}

/// What the mount says about compression (reset at every `Reopen`).
#[derive(Clone, Copy, Debug)]
struct CompressionMount {
    /// The image has the compression feature.
    feature: bool,
    /// `compress_log_size`.
    log: u8,
    /// `compress_mode=user`.
    user_mode: bool,
    addrs_per_inode: u32,
}

impl CompressionMount {
    fn new(feature: bool, addrs_per_inode: u32) -> Self {
        CompressionMount {
            feature,
            log: CompressOptions::default().log_cluster_size,
            user_mode: false,
            addrs_per_inode,
        }
    }
}

/// Bytes that compress (six words in a seed-dependent order), the same at
/// the same offset.
fn text_pattern(seed: u8, offset: u64, len: usize) -> Vec<u8> {
    const WORDS: [&[u8; 8]; 6] = [
        b"cluster ",
        b"payload ",
        b"f2fs log",
        b"\n\n\n\n\n\n\n\n",
        b"zzzzzzzz",
        b"release ",
    ];
    (offset..offset + len as u64)
        .map(|at| {
            let word = (at / 8).wrapping_mul(seed as u64 | 1) / 3 % 6;
            WORDS[word as usize][(at % 8) as usize]
        })
        .collect()
}

fn compression_op_s() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any_s(), prop::bool::weighted(0.8)).prop_map(|(file, on)| Op::CompressFlag { file, on }),
        8 => (file_s(), offset_s(), len_s(), any::<u8>())
            .prop_map(|(file, off, len, seed)| Op::WriteText { file, off, len, seed }),
        // Big writes over a few files on a small image: cleaning must move clusters.
        3 => (0u16..4, 0u64..(6 << 20), (256u32 << 10)..(3 << 20), any::<u8>())
            .prop_map(|(file, off, len, seed)| Op::WriteText { file: Sel::F(file), off, len, seed }),
        2 => (0u8..4, 2u8..=8, any::<bool>(), prop::bool::weighted(0.5)).prop_map(
            |(algorithm, log, checksum, user_mode)| Op::CompressMount {
                algorithm,
                log,
                checksum,
                user_mode
            }
        ),
        2 => any_s().prop_map(|file| Op::Fsync { file }),
        2 => file_s().prop_map(|file| Op::ReleaseBlocks { file }),
        2 => file_s().prop_map(|file| Op::ReserveBlocks { file }),
        3 => (file_s(), any::<bool>()).prop_map(|(file, compress)| Op::Recompress { file, compress }),
        2 => (1u8..6).prop_map(|rounds| Op::Clean { rounds }),
    ]
}

/// A compression image whose root is `+c`, so most files are compressed,
/// with the plain operations mixed in.
fn compressed_case_s() -> impl Strategy<Value = Case> {
    let op = prop_oneof![3 => op_s(), 2 => compression_op_s()];
    (
        prop::sample::select(vec![64u64, 96, 128]),
        prop::collection::vec(prop::collection::vec(op, 0..5), 20..50),
    )
        .prop_map(|(size_mib, chunks)| {
            let mut ops = vec![Op::CompressFlag {
                file: Sel::D(0),
                on: true,
            }];
            // Compressed files for the big writes, whose overwrites leave
            // invalid clusters for the cleaner.
            ops.extend((0..4).map(|id| create(Sel::D(0), short(id))));
            ops.extend(chunks.into_iter().flatten());
            Case {
                features: true,
                size_mib,
                ops,
            }
        })
}

impl Harness {
    /// The compression a new inode gets from its directory (only
    /// directories and files created by name, as set_compress_new_inode).
    fn new_inode_compr(&self, dir: Id, body: &Body, by_mknod: bool) -> Option<Compr> {
        let inherits = match body {
            Body::Dir { .. } => true,
            Body::File { .. } => !by_mknod,
            _ => false,
        };
        (self.compression.feature && inherits && self.m.node(dir).compr.is_some()).then_some(
            Compr {
                log: self.compression.log,
                released: false,
            },
        )
    }

    fn file_compr(&self, id: Id) -> Option<Compr> {
        let node = self.m.node(id);
        matches!(node.body, Body::File { .. })
            .then_some(node.compr)
            .flatten()
    }

    fn released(&self, id: Id) -> bool {
        self.file_compr(id).is_some_and(|c| c.released)
    }

    fn cluster_bytes(&self, id: Id) -> u64 {
        self.file_compr(id).map_or(BS, |c| BS << c.log)
    }

    /// The largest size of file `id`: a compressed file's address counts
    /// are whole clusters.
    fn max_bytes(&self, id: Id) -> u64 {
        match self.file_compr(id) {
            Some(c) => {
                let addrs = AddrCounts::clustered(self.compression.addrs_per_inode, c.log);
                max_file_blocks(addrs) * BS
            }
            None => self.max_file_bytes,
        }
    }

    /// Where a write to a compressed file goes: below the first indirect
    /// node's first direct node. fsck.f2fs 1.15 (Debian 12) advances its
    /// file offset past an absent child of an indirect node by the
    /// indirect node's bytes read as an inode (ADDRS_PER_BLOCK(&node_blk->i),
    /// 1018 instead of the compressed file's 1016; fixed upstream in 2023),
    /// so it misplaces and does not count every COMPRESS_ADDR after such a
    /// child and reports an i_blocks mismatch on a correct image.
    fn fsck_safe_offset(&self, id: Id, off: u64, len: usize) -> u64 {
        const FIRST_INDIRECT_CHILD_END: u64 = (923 + 2 * 1018) * BS;
        if self.file_compr(id).is_none() || off + len as u64 <= FIRST_INDIRECT_CHILD_END {
            return off;
        }
        off % (FIRST_INDIRECT_CHILD_END - (3 << 20) - BS)
    }

    fn compare_compression(&self, info: &f2fuse_engine::InodeInfo, node: &MInode) -> Outcome<()> {
        let flag = info.flags & inode_flag::COMPR != 0;
        if flag != node.compr.is_some() {
            return Err(format!("COMPR_FL is {flag}, expected {}", !flag));
        }
        if let Body::File { .. } = node.body {
            let got = info.compression.map(|c| Compr {
                log: c.log_cluster_size,
                released: c.released,
            });
            if got != node.compr {
                return Err(format!("compression {got:?}, expected {:?}", node.compr));
            }
        }
        Ok(())
    }

    /// Checks a release (`released`) or reserve of file `id`'s saved
    /// blocks; the model follows when it succeeded. Only a reserve may
    /// run out of space.
    fn check_released(
        &mut self,
        id: Id,
        got: Result<u64, Error>,
        expect: Result<(), i32>,
        released: bool,
    ) -> Outcome<()> {
        let what = format!("{} {id}", if released { "release" } else { "reserve" });
        if self.check(&what, got, expect, !released)?.is_some() {
            self.m.node_mut(id).compr.as_mut().unwrap().released = released;
        }
        Ok(())
    }

    fn apply_compression_op(&mut self, op: &Op) -> Outcome<()> {
        let feature = self.compression.feature;
        let no_feature = || -> Result<(), i32> { Err(libc::EOPNOTSUPP) };
        match *op {
            Op::CompressFlag { file, on } => {
                let id = self.m.pick(file);
                let node = self.m.node(id);
                let kind = node.kind();
                if !matches!(kind, FileKind::Regular | FileKind::Directory) {
                    return Ok(()); // FS_IOC_SETFLAGS needs an open file or directory
                }
                let size = match node.body {
                    Body::File { size, .. } => size,
                    _ => 0,
                };
                let ino = self.ino(id);
                // Reservations past EOF are blocks the model does not track.
                let has_blocks = || {
                    self.fs()
                        .inode(ino)
                        .is_ok_and(|i| f2fuse_engine::internals::compress::has_blocks(&i))
                };
                let expect = if on && !feature {
                    no_feature()
                } else if node.compr.is_some() == on {
                    Ok(())
                } else if kind == FileKind::Regular && (size > 0 || has_blocks()) {
                    Err(libc::EINVAL)
                } else {
                    Ok(())
                };
                let flags = if on { inode_flag::COMPR } else { 0 };
                let got = self.fs().set_flags(ino, flags);
                let what = format!("set_flags {id} compress {on}");
                if self.check(&what, got, expect, false)?.is_some() {
                    let mount = self.compression;
                    let node = self.m.node_mut(id);
                    if node.compr.is_some() != on {
                        node.compr = on.then_some(Compr {
                            log: mount.log,
                            released: false,
                        });
                    }
                }
            }
            Op::WriteText {
                file,
                off,
                len,
                seed,
            } => {
                let id = self.m.pick(file);
                self.do_write(id, off, &text_pattern(seed, off, len as usize))?;
            }
            Op::CompressMount {
                algorithm,
                log,
                checksum,
                user_mode,
            } => {
                let options = CompressOptions {
                    algorithm: CompressAlgorithm::ALL[algorithm as usize % 4],
                    log_cluster_size: log,
                    checksum,
                    mode: if user_mode {
                        CompressMode::User
                    } else {
                        CompressMode::Fs
                    },
                    ..Default::default()
                };
                let got = self.fs().set_compress_options(options);
                if self
                    .check("compress options", got, Ok(()), false)?
                    .is_some()
                {
                    self.compression.log = log;
                    self.compression.user_mode = user_mode;
                }
            }
            Op::Fsync { file } => {
                let id = self.m.pick(file);
                let got = self.fs().fsync(self.ino(id));
                self.check(&format!("fsync {id}"), got, Ok(()), true)?;
            }
            Op::ReleaseBlocks { file } => {
                let id = self.m.pick(file);
                let expect = match self.file_compr(id) {
                    _ if !feature => no_feature(),
                    None => Err(libc::EINVAL),
                    Some(c) if c.released => Err(libc::EINVAL),
                    Some(_) => Ok(()),
                };
                let got = self.fs().release_compress_blocks(self.ino(id));
                self.check_released(id, got, expect, true)?;
            }
            Op::ReserveBlocks { file } => {
                let id = self.m.pick(file);
                let saved = || {
                    let info = self.fs().inode(self.ino(id)).unwrap();
                    info.compression.map_or(0, |c| c.compr_blocks)
                };
                // A file that still counts saved blocks is left alone.
                let expect = match self.file_compr(id) {
                    _ if !feature => no_feature(),
                    None => Err(libc::EINVAL),
                    Some(c) if !c.released && saved() == 0 => Err(libc::EINVAL),
                    Some(_) => Ok(()),
                };
                let got = self.fs().reserve_compress_blocks(self.ino(id));
                self.check_released(id, got, expect, false)?;
            }
            Op::Recompress { file, compress } => {
                let id = self.m.pick(file);
                let expect = match self.file_compr(id) {
                    _ if !feature || !self.compression.user_mode => no_feature(),
                    None => Err(libc::EINVAL),
                    Some(c) if c.released => Err(libc::EINVAL),
                    Some(_) => Ok(()),
                };
                let ino = self.ino(id);
                let got = if compress {
                    self.fs().compress_file(ino)
                } else {
                    self.fs().decompress_file(ino)
                };
                let what = format!("recompress {id} {compress}");
                self.check(&what, got, expect, true)?;
            }
            Op::Clean { rounds } => {
                for _ in 0..rounds {
                    let got = self.fs().garbage_collect(true);
                    self.check("clean", got, Ok(()), true)?;
                }
            }
            _ => unreachable!("not a compression operation: {op:?}"),
        }
        Ok(())
    }
}

#[test]
fn compressed_sequences() {
    if !require_f2fs_tools() {
        return;
    }
    run_property(
        compressed_case_s(),
        env_u32("F2FUSE_MODEL_COMPRESSED_CASES", 16),
    );
}

// ---------------------------------------------------------------- regressions
//
// Sequences the property tests found (shrunk, or rebuilt by hand from the
// shrunk case), one per bug; each failed before its fix.

fn replay(case: Case) {
    if !require_f2fs_tools() {
        return;
    }
    if let Err(e) = run_case(&case) {
        panic!("{e}");
    }
}

fn replay_both(ops: Vec<Op>, size_mib: u64) {
    for features in [false, true] {
        replay(Case {
            features,
            size_mib,
            ops: ops.clone(),
        });
    }
}

fn short(id: u8) -> Name {
    Name {
        id,
        len: Len::Short,
    }
}

fn long(id: u8) -> Name {
    Name { id, len: Len::Long }
}

fn too_long(id: u8) -> Name {
    Name {
        id,
        len: Len::TooLong,
    }
}

fn create(dir: Sel, name: Name) -> Op {
    Op::Create {
        dir,
        name,
        perm: 0o644,
        owner: 0,
    }
}

fn mkdir(dir: Sel, name: Name) -> Op {
    Op::Mkdir {
        dir,
        name,
        perm: 0o755,
        owner: 0,
    }
}

/// Removing an inline directory walked its dentry bytes as block addresses
/// (a panic in debug builds, freed random blocks in release).
#[test]
fn regression_rmdir_inline_directory() {
    use Sel::*;
    replay_both(
        vec![
            mkdir(D(0), short(0)),
            Op::Rmdir {
                at: Loc::In(D(0), short(0)),
            },
        ],
        96,
    );
}

/// Removing a device node walked its device number as block addresses.
#[test]
fn regression_unlink_device_node() {
    use Sel::*;
    replay_both(
        vec![
            Op::Mknod {
                dir: D(0),
                name: short(0),
                kind: Nod::Chr,
                perm: 0o644,
                major: 0,
                minor: 1,
            },
            Op::Unlink {
                at: Loc::In(D(0), short(0)),
            },
        ],
        96,
    );
}

/// When several errors apply, Linux reports the parent before the name,
/// the name before existence, existence before the file types: link of a
/// directory into a file is ENOTDIR (was EPERM), onto an existing name
/// EEXIST (was EPERM); a 256-byte name under a file is ENOTDIR (was
/// ENAMETOOLONG); a file renamed over a directory holding it is ENOTEMPTY
/// (was EISDIR).
#[test]
fn regression_error_precedence() {
    use Sel::*;
    replay_both(
        vec![
            mkdir(D(0), short(0)),
            mkdir(D(1), short(1)),
            create(D(2), short(2)),
            create(D(0), short(3)),
            Op::Link {
                src: D(1),
                dir: F(0),
                name: short(4),
            },
            Op::Link {
                src: D(1),
                dir: D(0),
                name: short(3),
            },
            create(F(0), too_long(0)),
            mkdir(F(0), too_long(0)),
            Op::Unlink {
                at: Loc::In(F(0), too_long(0)),
            },
            Op::Rename {
                from: Loc::In(F(0), too_long(0)),
                to: Loc::In(D(0), too_long(1)),
                flags: RFlags::Plain,
            },
            Op::Rename {
                from: Loc::In(D(2), short(2)),
                to: Loc::In(D(0), short(0)),
                flags: RFlags::Plain,
            },
        ],
        96,
    );
}

/// mknod(2): no type bits make a regular file (was EINVAL), a directory
/// type is EPERM (was EINVAL).
#[test]
fn regression_mknod_types() {
    use Sel::*;
    let mknod = |kind, id| Op::Mknod {
        dir: D(0),
        name: short(id),
        kind,
        perm: 0o640,
        major: 0,
        minor: 0,
    };
    replay_both(
        vec![
            mknod(Nod::NoType, 0),
            mknod(Nod::Reg, 1),
            mknod(Nod::Dir, 2),
            mknod(Nod::Lnk, 3),
            Op::Write {
                file: F(0),
                off: 0,
                len: 5000,
                seed: 1,
            },
        ],
        96,
    );
}

/// The VFS limits the full xattr name (prefix included) to 255 bytes.
#[test]
fn regression_xattr_name_length() {
    use Sel::*;
    let set = |name| Op::SetXattr {
        file: F(0),
        name,
        len: 10,
        seed: 1,
        mode: XMode::XAny,
    };
    replay_both(
        vec![
            create(D(0), short(0)),
            set(XName::TooLongUser),
            set(XName::LongUser),
        ],
        96,
    );
}

/// Xattr space as the kernel counts it: entries may fill it exactly (no
/// end marker needed), MAX_VALUE_LEN is the space less 28 bytes, and a
/// full space is E2BIG (was ENOSPC). The root has no inline xattr area.
#[test]
fn regression_xattr_space() {
    use Sel::*;
    let set = |file, name, len| Op::SetXattr {
        file,
        name,
        len,
        seed: 3,
        mode: XMode::XAny,
    };
    replay_both(
        vec![
            create(D(0), short(0)),
            set(F(0), XName::User(0), 4242),
            set(F(0), XName::User(1), 1),
            Op::RemoveXattr {
                file: F(0),
                name: XName::User(0),
            },
            set(F(0), XName::User(0), 3000),
            set(F(0), XName::User(2), 3000),
            set(D(0), XName::User(0), 4043),
            set(D(0), XName::User(0), 4042),
        ],
        96,
    );
}

/// A write crossing the largest file size is cut short there (was EFBIG),
/// also when Fs::write splits it into 1 MiB pieces and the last piece
/// starts exactly at the limit.
#[test]
fn regression_write_across_max_file_size() {
    use Sel::*;
    for (features, max_blocks) in [(false, 1_057_053_389u64), (true, 1_057_053_380)] {
        let write = |off, len| Op::Write {
            file: F(0),
            off,
            len,
            seed: 5,
        };
        replay(Case {
            features,
            size_mib: 96,
            ops: vec![
                create(D(0), short(0)),
                write((max_blocks - 2) * BS + 100, 3 * 4096),
                write((max_blocks - 256) * BS, (1 << 20) + 1),
                write(max_blocks * BS, 1),
            ],
        });
    }
}

/// A log exactly full at a checkpoint was recorded with next_blkoff 512:
/// fsck.f2fs ("Checkpoint is polluted") and our own open refused the image.
#[test]
fn regression_log_full_at_checkpoint() {
    use Sel::*;
    replay(Case {
        features: false,
        size_mib: 96,
        ops: vec![
            create(D(0), short(0)),
            Op::Write {
                file: F(0),
                off: 0,
                len: 512 * 4096,
                seed: 1,
            },
        ],
    });
}

/// Out of space midway, a write left the blocks it had placed allocated
/// beyond i_size (and i_blocks short); now it is a short write.
#[test]
fn regression_short_write_on_enospc() {
    use Op::*;
    use Sel::*;
    replay(Case {
        features: true,
        size_mib: 64,
        ops: vec![
            Create {
                dir: D(63942),
                name: long(0),
                perm: 420,
                owner: 0,
            },
            Create {
                dir: D(4512),
                name: short(1),
                perm: 420,
                owner: 0,
            },
            Symlink {
                dir: D(17804),
                name: short(0),
                len: 1,
                seed: 1,
            },
            Unlink {
                at: Loc::Entry(F(0)),
            },
            Fill { chunk_kib: 256 },
            DeleteFill { every: 2 },
            Unlink {
                at: Loc::Entry(F(22158)),
            },
            Write {
                file: F(46667),
                off: 11837440,
                len: 1,
                seed: 0,
            },
            Fill { chunk_kib: 16 },
        ],
    });
    replay_both(
        vec![
            create(D(0), short(0)),
            Fill { chunk_kib: 256 },
            Trim { blocks: 2 },
            Write {
                file: F(0),
                off: 0,
                len: 5 * 4096,
                seed: 2,
            },
        ],
        64,
    );
}

/// Out of space while moving inline data to a block, the inline bytes
/// were already gone.
#[test]
fn regression_inline_conversion_on_enospc() {
    use Op::*;
    use Sel::*;
    replay_both(
        vec![
            create(D(0), short(0)),
            Write {
                file: F(0),
                off: 0,
                len: 11,
                seed: 3,
            },
            Fill { chunk_kib: 256 },
            Trim { blocks: 0 },
            Write {
                file: F(0),
                off: 0,
                len: 9000,
                seed: 0,
            },
        ],
        64,
    );
}

/// Out of space for a long symlink's block (or a new entry), the new inode
/// stayed allocated without a name (fsck.f2fs: unreachable inode).
#[test]
fn regression_create_on_enospc_frees_the_inode() {
    use Op::*;
    use Sel::*;
    replay_both(
        vec![
            Fill { chunk_kib: 256 },
            Trim { blocks: 1 },
            Symlink {
                dir: D(0),
                name: short(0),
                len: 4000,
                seed: 1,
            },
        ],
        64,
    );
}

/// Out of space for a new xattr node, the inline xattr area was already
/// rewritten with half an entry (the xattrs read as corrupt).
#[test]
fn regression_xattr_node_on_enospc() {
    use Op::*;
    use Sel::*;
    let set = |name, seed| SetXattr {
        file: F(0),
        name,
        len: 100,
        seed,
        mode: XMode::XAny,
    };
    replay_both(
        vec![
            create(D(0), short(0)),
            set(XName::User(0), 1),
            Fill { chunk_kib: 256 },
            Trim { blocks: 0 },
            set(XName::User(1), 2),
        ],
        64,
    );
}

/// Out of space while converting a full inline directory to a dentry
/// block, the directory had already lost every entry.
#[test]
fn regression_dir_conversion_on_enospc() {
    use Sel::*;
    let mut ops = vec![mkdir(D(0), short(0))];
    ops.extend((0..5).map(|id| create(D(1), long(id))));
    ops.push(Op::Fill { chunk_kib: 256 });
    ops.push(Op::Trim { blocks: 1 });
    ops.push(create(D(1), long(5)));
    replay_both(ops, 64);
}
