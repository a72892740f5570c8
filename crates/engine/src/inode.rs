//! Inodes: reading an inode block, checking it the way the kernel does
//! before use, and decoding it into the attributes callers need.

use crate::device::{Block, Device};
use crate::error::{Error, ErrorKind, Result};
use crate::extent_cache::Snapshot;
use crate::node::{NodeExpect, NodeManager};
use crate::segment::SegmentManager;
use crate::time::{wall_time, Timestamp};
use f2fuse_layout::compress::InodeCompression;
use f2fuse_layout::dentry::NameRule;
use f2fuse_layout::node::{
    inode_of, max_file_blocks, verify_inode_checksum, AddrCounts, InodeLayout,
};
use f2fuse_layout::node::{
    inode_of_mut, I_ADDR_OFFSET, I_CRTIME_NSEC_OFFSET, I_CRTIME_OFFSET, I_INLINE_XATTR_SIZE_OFFSET,
    I_PROJID_OFFSET,
};
use f2fuse_layout::*;
use parking_lot::Mutex;
use std::sync::Arc;

/// Kind of file, from the mode's type bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

impl FileKind {
    /// The kind of an `i_mode` (None for an unknown type).
    pub fn from_mode(i_mode: u16) -> Option<FileKind> {
        Some(match i_mode & mode::S_IFMT {
            mode::S_IFREG => FileKind::Regular,
            mode::S_IFDIR => FileKind::Directory,
            mode::S_IFLNK => FileKind::Symlink,
            mode::S_IFCHR => FileKind::CharDevice,
            mode::S_IFBLK => FileKind::BlockDevice,
            mode::S_IFIFO => FileKind::Fifo,
            mode::S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }

    /// The kind of a dentry's file type (None for an unknown one).
    pub fn from_file_type(ft: u8) -> Option<FileKind> {
        Some(match ft {
            file_type::REG_FILE => FileKind::Regular,
            file_type::DIR => FileKind::Directory,
            file_type::SYMLINK => FileKind::Symlink,
            file_type::CHRDEV => FileKind::CharDevice,
            file_type::BLKDEV => FileKind::BlockDevice,
            file_type::FIFO => FileKind::Fifo,
            file_type::SOCK => FileKind::Socket,
            _ => return None,
        })
    }
}

/// An inode as read from disk: the raw block and the decoded attributes.
#[derive(Clone)]
pub struct InodeInfo {
    /// The inode number.
    pub ino: u32,
    /// The file type.
    pub kind: FileKind,
    /// Full mode including the type bits.
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub links: u32,
    /// Size in bytes.
    pub size: u64,
    /// 4 KiB blocks, including the inode itself (as stored).
    pub blocks: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last data change.
    pub mtime: Timestamp,
    /// Last inode change.
    pub ctime: Timestamp,
    /// Creation time, where the inode records one.
    pub crtime: Option<Timestamp>,
    /// Generation number (NFS file handles).
    pub generation: u32,
    /// `i_flags` (FS_IMMUTABLE_FL, ...).
    pub flags: u32,
    /// How this directory hashes and compares names (`Exact` for every
    /// other inode).
    pub names: NameRule,
    /// `i_advise` bits (encrypted, verity, ...).
    pub advise: u8,
    /// `i_inline` bits (inline data, dentries, xattrs, ...).
    pub inline: u8,
    /// The node holding further xattrs (0: none).
    pub xattr_nid: u32,
    /// A directory's hash depth.
    pub current_depth: u32,
    /// A directory's level (more blocks per bucket).
    pub dir_level: u8,
    /// Where the inode keeps addresses and extra attributes.
    pub layout: InodeLayout,
    /// Set for the regular files the kernel treats as compressed (their
    /// data lives in clusters; see `compress`).
    pub compression: Option<InodeCompression>,
    /// Device number (major, minor) of a device file.
    pub rdev: (u32, u32),
    /// The inode block as read.
    pub raw: Arc<Block>,
    /// Taken from the read extent cache before this copy was read (None
    /// when decoded from a block of unknown age): extents mapped through
    /// this copy may be cached only under it.
    pub extent_snapshot: Option<Snapshot>,
}

impl InodeInfo {
    /// The project id: i_projid where the image has project quotas and
    /// the inode the field, else 0 (the kernel's F2FS_DEF_PROJID).
    pub fn projid(&self, features: u32) -> u32 {
        if features & feature::PRJQUOTA == 0 {
            return 0;
        }
        self.inode().projid(&self.layout).unwrap_or(0)
    }

    /// The ids quota charges this inode to (user, group, project).
    pub fn quota_ids(&self, features: u32) -> [u32; crate::quota::QUOTA_TYPES] {
        [self.uid, self.gid, self.projid(features)]
    }

    /// A casefolded directory: names match case- and normalization-insensitively.
    pub fn is_casefolded(&self) -> bool {
        self.names != NameRule::Exact
    }

    /// Whether `i_inline` has `flag`.
    pub fn has_inline(&self, flag: u8) -> bool {
        self.inline & flag != 0
    }

    /// fscrypt-encrypted (FADVISE_ENCRYPT_BIT): contents, names or symlink
    /// target are ciphertext we have no key for.
    pub fn is_encrypted(&self) -> bool {
        self.advise & f2fuse_layout::fadvise::ENCRYPT != 0
    }

    /// An fs-verity file (FADVISE_VERITY_BIT): read-only, its Merkle tree
    /// stored past EOF.
    pub fn is_verity(&self) -> bool {
        self.advise & f2fuse_layout::fadvise::VERITY != 0
    }

    /// The raw on-disk inode.
    pub fn inode(&self) -> &node::Inode {
        inode_of(&self.raw)
    }

    /// Data addresses the inode block itself holds.
    pub fn addrs_per_inode(&self) -> u32 {
        self.addrs().per_inode
    }

    /// Data addresses per inode and per direct node: whole clusters only
    /// for a compressed file.
    pub fn addrs(&self) -> AddrCounts {
        addr_counts(&self.layout, self.compression.as_ref())
    }

    /// The 512-byte sectors stat(2) reports, as the kernel's f2fs_getattr:
    /// `i_blocks` without the inode block itself, plus the bytes of inline
    /// data (regular files) or inline dentries, which live in it.
    pub fn stat_sectors(&self) -> u64 {
        let inline = (self.kind == FileKind::Regular && self.has_inline(inline_flag::INLINE_DATA))
            || self.has_inline(inline_flag::INLINE_DENTRY);
        let inline_sectors = if inline { self.size.div_ceil(512) } else { 0 };
        self.blocks.saturating_sub(1) * 8 + inline_sectors
    }

    /// Number of 4 KiB blocks covered by `size`.
    pub fn size_blocks(&self) -> u64 {
        self.size.div_ceil(F2FS_BLKSIZE as u64)
    }
}

fn addr_counts(layout: &InodeLayout, compression: Option<&InodeCompression>) -> AddrCounts {
    match compression {
        Some(c) => AddrCounts::clustered(layout.addrs_per_inode(), c.log_cluster_size),
        None => AddrCounts::plain(layout.addrs_per_inode()),
    }
}

/// Context the checks need from the superblock.
#[derive(Debug, Clone, Copy)]
pub struct InodeCheck {
    pub features: u32,
    pub checksum_seed: u32,
    /// `s_encoding_flags` has F2FS_ENC_STRICT_MODE_FL: casefolded
    /// directories refuse names that are not valid UTF-8.
    pub strict_encoding: bool,
}

pub fn read_inode(nm: &NodeManager, check: &InodeCheck, ino: u32) -> Result<InodeInfo> {
    let snapshot = nm.extent_cache().snapshot(ino);
    let block = nm.read_node(
        ino,
        NodeExpect {
            ino: Some(ino),
            ofs: Some(0),
        },
    )?;
    let mut inode = decode_inode(ino, block, check).map_err(|e| e.at(format!("inode {ino}")))?;
    inode.extent_snapshot = Some(snapshot);
    Ok(inode)
}

fn bad(detail: String) -> Error {
    Corrupt::new("inode", detail).into()
}

/// Validates and decodes an inode block already known to belong to `ino`.
pub fn decode_inode(ino: u32, block: Block, check: &InodeCheck) -> Result<InodeInfo> {
    verify_inode_checksum(&block, check.features, check.checksum_seed)?;
    let inode = inode_of(&block);
    let i_mode = inode.i_mode.get();
    let kind = FileKind::from_mode(i_mode)
        .ok_or_else(|| bad(format!("i_mode {i_mode:#o} has no valid file type")))?;
    let layout = InodeLayout::of(inode, check.features)?;
    let blocks = inode.i_blocks.get();
    if blocks == 0 {
        return Err(bad("i_blocks is 0 (must count the inode itself)".into()));
    }
    let size = inode.i_size.get();
    let inline = inode.i_inline;
    let xattr_nid = inode.i_xattr_nid.get();
    if xattr_nid == ino {
        return Err(bad("i_xattr_nid points at the inode itself".into()));
    }
    if inode.i_namelen.get() as usize > F2FS_NAME_LEN {
        return Err(bad(format!(
            "i_namelen {} exceeds 255",
            inode.i_namelen.get()
        )));
    }
    let max_inline = layout.max_inline_data() as u64;
    if inline & inline_flag::INLINE_DATA != 0 {
        if !matches!(kind, FileKind::Regular | FileKind::Symlink) {
            return Err(bad(format!("inline data on a {kind:?}")));
        }
        if size > max_inline {
            return Err(bad(format!(
                "inline i_size {size} exceeds the inline capacity {max_inline}"
            )));
        }
    }
    if inline & inline_flag::INLINE_DENTRY != 0 && kind != FileKind::Directory {
        return Err(bad(format!("inline dentries on a {kind:?}")));
    }
    // Checked for every kind, as the kernel's sanity_check_inode does; only
    // regular files use clusters.
    let compression =
        InodeCompression::of(inode, check.features)?.filter(|_| kind == FileKind::Regular);
    let max_bytes =
        max_file_blocks(addr_counts(&layout, compression.as_ref())) * F2FS_BLKSIZE as u64;
    if size > max_bytes {
        return Err(bad(format!(
            "i_size {size} exceeds the largest possible file ({max_bytes} bytes)"
        )));
    }
    let current_depth = inode.i_current_depth.get();
    if kind == FileKind::Directory
        && inline & inline_flag::INLINE_DENTRY == 0
        && current_depth > MAX_DIR_HASH_DEPTH
    {
        return Err(bad(format!(
            "directory depth {current_depth} exceeds {MAX_DIR_HASH_DEPTH}"
        )));
    }
    if kind == FileKind::Symlink && size > F2FS_BLKSIZE as u64 {
        return Err(bad(format!(
            "symlink target of {size} bytes exceeds one block"
        )));
    }
    let flags = inode.i_flags.get();
    if flags & inode_flag::CASEFOLD != 0 && check.features & feature::CASEFOLD == 0 {
        return Err(bad(
            "casefold flag on an image without the casefold feature".into(),
        ));
    }
    let names = if kind == FileKind::Directory && flags & inode_flag::CASEFOLD != 0 {
        NameRule::Casefold {
            strict: check.strict_encoding,
        }
    } else {
        NameRule::Exact
    };
    let ts = |sec: u64, nsec: u32| Timestamp {
        sec: sec as i64,
        nsec: nsec.min(999_999_999),
    };
    let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
        inode.rdev(&layout)
    } else {
        (0, 0)
    };
    Ok(InodeInfo {
        ino,
        kind,
        mode: i_mode,
        uid: inode.i_uid.get(),
        gid: inode.i_gid.get(),
        links: inode.i_links.get(),
        size,
        blocks,
        atime: ts(inode.i_atime.get(), inode.i_atime_nsec.get()),
        mtime: ts(inode.i_mtime.get(), inode.i_mtime_nsec.get()),
        ctime: ts(inode.i_ctime.get(), inode.i_ctime_nsec.get()),
        crtime: inode.crtime(&layout).map(|(s, n)| ts(s, n)),
        generation: inode.i_generation.get(),
        flags,
        names,
        advise: inode.i_advise,
        inline,
        xattr_nid,
        current_depth,
        dir_level: inode.i_dir_level,
        layout,
        compression,
        rdev,
        raw: Arc::new(block),
        extent_snapshot: None,
    })
}

/// What every mutating operation below the facade works with.
pub struct Ctx<'a> {
    pub dev: &'a Device,
    pub nm: &'a NodeManager,
    pub space: &'a Mutex<SegmentManager>,
    pub check: &'a InodeCheck,
    /// Cold and hot extension lists from the superblock (file placement).
    pub cold_exts: &'a [String],
    pub hot_exts: &'a [String],
    pub clock: InodeClock,
}

impl Ctx<'_> {
    pub fn inode(&self, ino: u32) -> Result<InodeInfo> {
        read_inode(self.nm, self.check, ino)
    }

    /// Changes an inode block under its node guard.
    pub fn update_inode<R>(
        &self,
        ino: u32,
        change: impl FnOnce(&mut node::Inode) -> R,
    ) -> Result<R> {
        self.nm
            .update_node(ino, inode_expect(ino), |block| change(inode_of_mut(block)))
    }

    /// Changes the raw block of inode `ino` under its guard, given its
    /// layout (for the areas whose place the layout decides).
    pub fn update_inode_block<R>(
        &self,
        ino: u32,
        change: impl FnOnce(&mut [u8], &InodeLayout) -> R,
    ) -> Result<R> {
        let features = self.check.features;
        self.nm.update_node(ino, inode_expect(ino), |block| {
            let layout =
                InodeLayout::of(inode_of(block), features).expect("inode validated on read");
            change(block, &layout)
        })
    }

    /// Like [`update_inode`](Self::update_inode) for a change that may
    /// fail (e.g. a count that would drop below zero): then nothing changes.
    pub fn try_update_inode<R>(
        &self,
        ino: u32,
        change: impl FnOnce(&mut node::Inode) -> Result<R>,
    ) -> Result<R> {
        self.nm
            .try_update_node(ino, inode_expect(ino), |block| change(inode_of_mut(block)))
    }

    /// The one way a node comes into being: its block reserved in the user
    /// blocks, a nid (`nid`, or a free one), a zeroed block in the node
    /// cache and the valid node (and inode) counts. `owner` None makes an
    /// inode (its own owner); otherwise node `ofs` of inode `owner`, which
    /// the caller links into the owner and counts in its `i_blocks`.
    pub fn new_node(
        &self,
        nid: Option<u32>,
        owner: Option<u32>,
        ofs: u32,
        cold: bool,
    ) -> Result<u32> {
        self.space.lock().reserve_blocks(1)?;
        let created = nid.map_or_else(|| self.nm.alloc_nid(), Ok).and_then(|nid| {
            self.nm
                .new_node(nid, owner.unwrap_or(nid), ofs, cold)
                .map(|()| nid)
        });
        let mut space = self.space.lock();
        match created {
            Ok(nid) => {
                space.node_created(owner.is_none())?;
                Ok(nid)
            }
            Err(e) => {
                space.release_blocks(1)?;
                Err(e)
            }
        }
    }

    /// How many of `wanted` new blocks of `inode` its quota limits allow
    /// (EDQUOT if none); all of them without quota accounting and for the
    /// quota files themselves.
    pub fn quota_allows(&self, inode: &InodeInfo, wanted: u64) -> Result<u64> {
        match self.nm.quota() {
            Some(q) if !q.is_quota_inode(inode.ino) => {
                q.blocks_allowed(inode.quota_ids(self.check.features), wanted)
            }
            _ => Ok(wanted),
        }
    }

    /// Like [`quota_allows`](Self::quota_allows) for a change that needs
    /// all `wanted` blocks or none: EDQUOT unless all are allowed.
    pub fn quota_admits(&self, inode: &InodeInfo, wanted: u64) -> Result<()> {
        match self.nm.quota() {
            Some(q) if !q.is_quota_inode(inode.ino) => {
                q.admits_blocks(inode.quota_ids(self.check.features), wanted)
            }
            _ => Ok(()),
        }
    }

    /// The one way a node goes: NAT entry freed, its block invalidated and
    /// uncounted (an inode's too if `inode`). The caller unlinks it.
    pub fn free_node(&self, nid: u32, inode: bool) -> Result<()> {
        // The inode count follows `inode`: it must say what the NAT says.
        let owner = self.nm.nat_entry(nid)?.ino.get();
        crate::invariant::ensure_invariant!(
            self.dev.health(),
            (owner == nid) == inode,
            "freeing node {nid} (owner {owner}) as {}an inode",
            if inode { "" } else { "not " }
        );
        let old = self.nm.free_node(nid)?;
        let mut space = self.space.lock();
        if let Some(addr) = old {
            space.invalidate(addr)?;
        }
        space.node_freed(inode)
    }
}

fn inode_expect(ino: u32) -> NodeExpect {
    NodeExpect {
        ino: Some(ino),
        ofs: Some(0),
    }
}

/// `i_blocks` less `freed`; fewer blocks than that is corruption.
pub fn blocks_less(raw: &node::Inode, freed: u64) -> Result<u64> {
    raw.i_blocks.get().checked_sub(freed).ok_or_else(|| {
        Corrupt::new(
            "inode",
            format!(
                "freeing {freed} blocks of {} counted in i_blocks",
                raw.i_blocks.get()
            ),
        )
        .into()
    })
}

/// Where the times and generation numbers of changed and new inodes come
/// from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InodeClock {
    /// The wall clock; generations from getrandom (the kernel's prandom).
    #[default]
    Wall,
    /// One fixed time for every timestamp and generation 0 (as sload.f2fs):
    /// the same operations write the same bytes (reproducible images).
    Fixed(Timestamp),
}

impl InodeClock {
    pub fn now(self) -> Timestamp {
        match self {
            InodeClock::Wall => wall_time(),
            InodeClock::Fixed(t) => t,
        }
    }

    fn generation(self) -> u32 {
        match self {
            InodeClock::Wall => random_generation(),
            InodeClock::Fixed(_) => 0,
        }
    }
}

pub fn set_mtime(inode: &mut node::Inode, t: Timestamp) {
    inode.i_mtime.set(t.sec as u64);
    inode.i_mtime_nsec.set(t.nsec);
}

pub fn set_ctime(inode: &mut node::Inode, t: Timestamp) {
    inode.i_ctime.set(t.sec as u64);
    inode.i_ctime_nsec.set(t.nsec);
}

pub fn set_atime(inode: &mut node::Inode, t: Timestamp) {
    inode.i_atime.set(t.sec as u64);
    inode.i_atime_nsec.set(t.nsec);
}

/// What a new inode looks like.
pub struct NewInode<'a> {
    /// Full mode, type bits included.
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub parent: u32,
    pub name: &'a [u8],
    pub rdev: (u32, u32),
}

/// Extra attribute size the kernel gives new inodes.
const NEW_INODE_EXTRA_ISIZE: usize = F2FS_TOTAL_EXTRA_ATTR_SIZE;

fn has_extension(name: &[u8], exts: &[String]) -> bool {
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    exts.iter().any(|ext| {
        let dotted = format!(".{}", ext.to_ascii_lowercase());
        name.len() > dotted.len()
            && (name.ends_with(&dotted) || name.contains(&format!("{dotted}.")))
    })
}

/// Flags that only mean something on directories (the kernel masks them
/// off regular files: F2FS_REG_FLMASK).
const DIRECTORY_ONLY_FLAGS: u32 =
    inode_flag::DIRSYNC | inode_flag::PROJINHERIT | inode_flag::CASEFOLD;
/// The only flags devices, fifos, sockets and symlinks may carry (F2FS_OTHER_FLMASK).
const OTHER_FILES_FLAGS: u32 = inode_flag::NODUMP | inode_flag::NOATIME;
/// Flags a new inode takes over from its directory (F2FS_FL_INHERITED;
/// the compression flags follow their own rules).
const INHERITED_FLAGS: u32 = inode_flag::SYNC
    | inode_flag::NODUMP
    | inode_flag::NOATIME
    | inode_flag::DIRSYNC
    | inode_flag::PROJINHERIT
    | inode_flag::CASEFOLD;

/// `flags` as an inode of `kind` may carry them (the kernel's
/// f2fs_mask_flags): what a new inode inherits, what chattr may set.
pub fn mask_flags(flags: u32, kind: FileKind) -> u32 {
    match kind {
        FileKind::Directory => flags,
        FileKind::Regular => flags & !DIRECTORY_ONLY_FLAGS,
        _ => flags & OTHER_FILES_FLAGS,
    }
}

/// Allocates and initialises an inode (in the node cache); returns its number.
/// A directory gets hash level `dir_level` (the kernel's i_dir_level); the
/// inode takes over what its type keeps of the flags of `parent`, and its
/// project id if the directory has PROJINHERIT (f2fs_new_inode). EDQUOT
/// where the owner's inode limit is reached.
pub fn create_inode(ctx: &Ctx, spec: &NewInode, dir_level: u8, parent: &InodeInfo) -> Result<u32> {
    let kind = FileKind::from_mode(spec.mode)
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, format!("mode {:#o}", spec.mode)))?;
    let dir = kind == FileKind::Directory;
    let features = ctx.check.features;
    let projid = if parent.flags & inode_flag::PROJINHERIT != 0 {
        parent.projid(features)
    } else {
        0
    };
    if let Some(quota) = ctx.nm.quota() {
        quota.check_inode([spec.uid, spec.gid, projid])?;
    }
    let ino = ctx.new_node(None, None, 0, !dir)?;
    let flags = mask_flags(parent.flags & INHERITED_FLAGS, kind);
    let t = ctx.clock.now();
    ctx.nm.update_node(ino, NodeExpect::default(), |block| {
        let extra = if features & feature::EXTRA_ATTR != 0 {
            NEW_INODE_EXTRA_ISIZE
        } else {
            0
        };
        {
            let inode = inode_of_mut(block);
            inode.i_mode.set(spec.mode);
            inode.i_uid.set(spec.uid);
            inode.i_gid.set(spec.gid);
            inode.i_links.set(if dir { 2 } else { 1 });
            inode.i_blocks.set(1);
            set_atime(inode, t);
            set_mtime(inode, t);
            set_ctime(inode, t);
            inode.i_generation.set(ctx.clock.generation());
            inode.i_pino.set(spec.parent);
            let name_len = spec.name.len().min(F2FS_NAME_LEN);
            inode.i_namelen.set(name_len as u32);
            inode.i_name[..name_len].copy_from_slice(&spec.name[..name_len]);
            inode.i_flags.set(flags);
            let mut inline = inline_flag::INLINE_XATTR;
            match kind {
                FileKind::Directory => {
                    inline |= inline_flag::INLINE_DENTRY;
                    inode.i_current_depth.set(1);
                    inode.i_dir_level = dir_level;
                    inode.i_flags.set(flags | inode_flag::INDEX);
                }
                FileKind::Regular | FileKind::Symlink => inline |= inline_flag::INLINE_DATA,
                _ => {}
            }
            if extra > 0 {
                inline |= inline_flag::EXTRA_ATTR;
            }
            inode.i_inline = inline;
            if kind == FileKind::Regular {
                if has_extension(spec.name, ctx.cold_exts) {
                    inode.i_advise |= fadvise::COLD;
                } else if has_extension(spec.name, ctx.hot_exts) {
                    inode.i_advise |= fadvise::HOT;
                }
            }
        }
        if extra > 0 {
            block[I_ADDR_OFFSET..I_ADDR_OFFSET + 2].copy_from_slice(&(extra as u16).to_le_bytes());
            if features & feature::FLEXIBLE_INLINE_XATTR != 0 {
                let words = DEFAULT_INLINE_XATTR_ADDRS as u16;
                block[I_INLINE_XATTR_SIZE_OFFSET..I_INLINE_XATTR_SIZE_OFFSET + 2]
                    .copy_from_slice(&words.to_le_bytes());
            }
            if features & feature::PRJQUOTA != 0 {
                block[I_PROJID_OFFSET..I_PROJID_OFFSET + 4].copy_from_slice(&projid.to_le_bytes());
            }
            if features & feature::INODE_CRTIME != 0 {
                block[I_CRTIME_OFFSET..I_CRTIME_OFFSET + 8]
                    .copy_from_slice(&(t.sec as u64).to_le_bytes());
                block[I_CRTIME_NSEC_OFFSET..I_CRTIME_NSEC_OFFSET + 4]
                    .copy_from_slice(&t.nsec.to_le_bytes());
            }
        }
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            let inode = inode_of_mut(block);
            let layout = InodeLayout::of(inode, features).expect("layout just written");
            inode.set_rdev(&layout, spec.rdev.0, spec.rdev.1);
        }
    })?;
    Ok(ino)
}

fn random_generation() -> u32 {
    let mut out = [0u8; 4];
    // SAFETY: writes at most 4 bytes into a 4-byte buffer.
    let got = unsafe { libc::getrandom(out.as_mut_ptr().cast(), 4, 0) };
    if got == 4 {
        u32::from_le_bytes(out)
    } else {
        wall_time().nsec
    }
}

impl std::fmt::Debug for InodeInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InodeInfo")
            .field("ino", &self.ino)
            .field("kind", &self.kind)
            .field("mode", &format_args!("{:#o}", self.mode))
            .field("links", &self.links)
            .field("size", &self.size)
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}
