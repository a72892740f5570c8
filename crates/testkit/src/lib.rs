//! The helpers the f2fuse test suites share (a dev-dependency of the
//! engine and the CLI): comparing our F2FS reader with trees loaded by
//! f2fs-tools 1.15, and the tools, scratch directories and random numbers
//! the suites use. The suites name it `support`
//! (`use f2fuse_testkit as support;`).
//!
//! * [`Scratch`]: self-removing temp dir (keep it with `F2FUSE_KEEP_SCRATCH=1`).
//! * [`generate_edge_tree`] + [`TreeOptions`]: deterministic host tree full of
//!   edge cases ([`TreeOptions::small`] runs in well under a second,
//!   [`TreeOptions::full`] adds the 10_000-entry dir and the sparse 8.6 GB
//!   file; [`TreeOptions::sload_compatible`] leaves out what sload cannot
//!   store). Well-known paths are in [`paths`].
//! * [`scan_host_tree`] -> `BTreeMap<key, HostEntry>`; keys are '/'-joined
//!   [`escape_name`] components ("" = root), so the reader side must build its
//!   keys with [`join_key`]. File contents are hashed with [`ContentHasher`]
//!   (64-bit FNV-1a; holes = zeros, use `update_zeros` for holes).
//! * [`compare_trees`] + [`CompareWhat`] (`all()`, `sload()`, `ignoring()`):
//!   lists every difference.
//! * [`FileModel`]: bytes and block states (hole, reserved, data) of one
//!   file, for the fallocate and SEEK_DATA/SEEK_HOLE tests.
//! * Tools: [`require_tool`], [`require_f2fs_tools`], [`mkfs_f2fs`],
//!   [`sload_f2fs`], [`fsck_f2fs`], [`build_image_from_tree`],
//!   [`image_size_for_tree`], plus [`scan_image_with_f2fs_tools`]: an oracle
//!   view of an image built only from `fsck.f2fs -t` and `dump.f2fs -i`
//!   (no kernel, no code of ours; no xattrs; names with '\n' are skipped);
//!   [`codecs_script`]: independent LZ4, zstd and LZO codecs.
//! * Mounts: [`fuse_available`], [`is_mounted`], [`holders`] of an image
//!   and [`wait_released`] (the daemon closes it after the unmount returns).
//! * [`Rng`]: deterministic random numbers; [`acl()`]: a POSIX ACL in its
//!   user-space xattr form.
//!
//! # What sload.f2fs 1.15 stores (tested, not assumed)
//!
//! Method: `mkfs.f2fs -f -t 0 IMG; sload.f2fs -P -f SRC IMG`, then inode
//! fields from `dump.f2fs -i`, paths/inode numbers from `fsck.f2fs -t`, file
//! contents dumped by `dump.f2fs` (answer "y"), raw byte searches of the
//! image, and reading f2fs-tools' `fsck/sload.c`. The tests
//! `sload_compatible_tree_loads_exactly_and_fsck_is_clean` and
//! `sload_findings_on_the_full_small_tree` in `support_selftest.rs` re-check
//! these facts on every run.
//!
//! Kept:
//! * directories, regular files (contents byte-exact) and symlinks (targets up
//!   to 4095 bytes), with their raw-byte names: 255-byte names, UTF-8,
//!   spaces, control characters, non-UTF-8 bytes;
//! * permission bits including suid/sgid/sticky (04755, 02755, 06711, 01777,
//!   0000); uid/gid only with `-P` (without it everything is 0:0);
//! * mtime seconds of files, directories and symlinks (from `lstat`; 0, 2^31
//!   and 4102444800 survive); atime and ctime are set to the same value;
//! * hard links as hard links: one inode, `i_links` = number of names, across
//!   directories; directory `i_links` = 2 + subdirectories.
//!
//! Not kept / changed:
//! * mtime nanoseconds: always 0. `-T <secs>` would set every mtime to
//!   `<secs>`, so it is not used.
//! * xattrs: none at all (`i_xattr_nid` = 0, no name or value bytes anywhere
//!   in the image); sload only writes SELinux labels when given `-s`.
//! * fifos and sockets (and, per the source, device nodes): silently skipped;
//!   sload creates only directories, regular files and symlinks.
//! * the root directory: sload never touches the root inode, so its mode
//!   (0755), owner (0:0, `mkfs.f2fs -R`) and mtime (mkfs time) are mkfs's.
//! * holes: written as zero data blocks (a 1 MiB hole-only file gets
//!   `i_blocks` 257; the 8.6 GB sparse file 2_101_677 blocks, ~160 s of
//!   sload and ~8.6 GB of host disk), hence [`image_size_for_tree`] counts
//!   apparent sizes.
//! * layout choices: regular files are inline only up to 3344 bytes (the
//!   kernel inlines up to 3488; sload's 3345..=3488-byte files use a data
//!   block); symlinks are inline up to 3487 bytes (target + NUL <= 3488);
//!   directories, even empty ones, always get a dentry block (no inline
//!   dentries); `i_inline` is 0x0B for inline files, 0x01 otherwise.
//! * bug: a symlink whose target is 3488..=3687 bytes long gets its data block
//!   but `i_blocks` = 1. sload ends with its own `fsck -f` pass, which repairs
//!   that and makes sload exit 1 ([`SloadOutcome::repaired`]); the image is
//!   clean afterwards. [`TreeOptions::mid_size_symlinks`] controls these.
//!
//! Hence: compare a [`TreeOptions::sload_compatible`] tree with
//! [`CompareWhat::sload`] (no nanoseconds, xattrs or root metadata; directory
//! sizes are never compared by default).
//!
//! Runtimes (debug build, this machine): small tree generate 0.25 s, scan
//! 0.15 s, mkfs + sload 0.7 s, fsck 0.01 s, oracle ~10 ms per entry; the
//! whole `support_selftest` ~3-4 s. Full tree with the 8.6 GB file: ~170 s
//! (`full_tree_loads_and_fsck_is_clean`, ignored by default).
#![warn(missing_docs)]

pub mod acl;
pub mod compare;
pub mod engine_scan;
pub mod file_model;
pub mod hash;
pub mod oracle;
pub mod rng;
pub mod scan;
pub mod scratch;
pub mod tools;
pub mod tree;

pub use acl::{acl, acl_entry};
pub use compare::{compare_trees, show_bytes, CompareWhat};
pub use engine_scan::{engine_content_hash, open_read_only, open_writable, scan_image};
pub use file_model::{Block, FileModel};
pub use hash::{content_hash_of, content_hash_of_chunks, content_hash_of_file, ContentHasher};
pub use oracle::{image_paths_and_inos, parse_dump_fields, scan_image_with_f2fs_tools, ROOT_INO};
pub use rng::Rng;
pub use scan::{escape_name, join_key, read_xattrs, scan_entry, scan_host_tree, HostEntry, Kind};
pub use scratch::{Scratch, KEEP_SCRATCH_ENV};
pub use tools::{
    build_image_from_tree, codecs_script, dump_f2fs_block, dump_f2fs_inode, find_tool, fsck_f2fs,
    fsck_f2fs_tree, fuse_available, holders, image_size_for_tree, is_mounted, mkfs_f2fs,
    require_f2fs_tools, require_python_codecs, require_tool, sload_f2fs, wait_released,
    SloadOutcome, SYSTEM_PYTHON,
};
pub use tree::{generate_edge_tree, huge_sparse_extents, mtime_for, paths, TreeInfo, TreeOptions};
