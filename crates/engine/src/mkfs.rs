//! Formatting: writes a fresh F2FS with the layout mkfs.f2fs 1.15 computes
//! for the same size and options, so both tools' images look alike.
//!
//! What is written, in this order: zeroed SIT copy #0 and NAT copies #0;
//! into the hot logs the root directory's dentry block and inode, the quota
//! files' data and inodes (`quota`, `project_quota`), lost+found's; NAT
//! block 0 with the reserved nids and those inodes, a zeroed first block in
//! the warm node log (so no stale fsync chain can be replayed), both
//! checkpoint packs, and last the two superblocks: an interrupted mkfs
//! leaves no valid file system.

use crate::device::{BlockDevice, Device, FileDevice, FileDeviceOptions, IoKind};
use crate::error::{Error, ErrorKind, Result};
use f2fuse_layout::casefold::{F2FS_ENC_STRICT_MODE_FL, F2FS_ENC_UTF8_12_1};
use f2fuse_layout::checkpoint::{
    encode_compacted_summaries, new_checkpoint_block, seal_checkpoint_block, Checkpoint,
    DataSummaries,
};
use f2fuse_layout::dentry::{DentryGeometry, DentrySetMut};
use f2fuse_layout::geometry::{compute, Geometry, GeometryOptions};
use f2fuse_layout::hash::dentry_hash;
use f2fuse_layout::node::{
    footer_of_mut, inode_checksum_seed, inode_of_mut, update_inode_checksum, I_ADDR_OFFSET,
    I_CRTIME_NSEC_OFFSET, I_CRTIME_OFFSET, I_PROJID_OFFSET,
};
use f2fuse_layout::quota::{Dquot, QuotaFile, GRPQUOTA, PRJQUOTA, USRQUOTA};
use f2fuse_layout::segment::{
    nat_block_addr, NatEntry, NatJournal, SitEntry, SitJournal, Summary, SummaryBlock,
    SUM_TYPE_NODE,
};
use f2fuse_layout::superblock::{SuperBlock, DEFAULT_COLD_EXTENSIONS, DEFAULT_HOT_EXTENSIONS};
use f2fuse_layout::*;
use std::path::Path;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Features our formatter can enable.
pub const MKFS_FEATURES: u32 = feature::EXTRA_ATTR
    | feature::INODE_CHKSUM
    | feature::FLEXIBLE_INLINE_XATTR
    | feature::INODE_CRTIME
    | feature::SB_CHKSUM
    | feature::LOST_FOUND
    | feature::CASEFOLD
    | feature::COMPRESSION
    | feature::QUOTA_INO
    | feature::PRJQUOTA;

/// Features that only make sense with the extra attribute area.
const NEEDS_EXTRA_ATTR: u32 = feature::INODE_CHKSUM
    | feature::FLEXIBLE_INLINE_XATTR
    | feature::INODE_CRTIME
    | feature::PRJQUOTA
    | feature::COMPRESSION;

/// How to format: mkfs.f2fs's options.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Volume label.
    pub label: String,
    /// Feature bits (see [`parse_features`]).
    pub features: u32,
    /// Segments per section.
    pub segs_per_sec: u32,
    /// Sections per zone.
    pub secs_per_zone: u32,
    /// Overprovisioning percentage (None: chosen from the size, as mkfs.f2fs).
    pub overprovision_ratio: Option<f64>,
    /// Owner of the root directory (mkfs.f2fs uses the caller's uid/gid).
    pub root_uid: u32,
    /// Group of the root directory.
    pub root_gid: u32,
    /// Creation time in seconds (default: now).
    pub timestamp: Option<u64>,
    /// Volume UUID (default: random).
    pub uuid: Option<[u8; 16]>,
    /// Checkpoint version to start from (default: random odd, like
    /// mkfs.f2fs; derived from `uuid` when that is given, so that a fixed
    /// `timestamp` and `uuid` reproduce an image byte for byte).
    pub checkpoint_ver: Option<u64>,
    /// With `casefold`: strict mode (casefolded directories refuse names
    /// that are not valid UTF-8; mkfs.f2fs -C utf8:strict).
    pub strict_encoding: bool,
}

impl Default for MkfsOptions {
    fn default() -> MkfsOptions {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        MkfsOptions {
            label: String::new(),
            features: 0,
            segs_per_sec: 1,
            secs_per_zone: 1,
            overprovision_ratio: None,
            root_uid: uid,
            root_gid: gid,
            timestamp: None,
            uuid: None,
            checkpoint_ver: None,
            strict_encoding: false,
        }
    }
}

/// Parses a comma-separated `-O` list into feature bits.
pub fn parse_features(list: &str) -> Result<u32> {
    let mut bits = 0;
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let bit = feature::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("unknown feature {name:?}"),
                )
            })?;
        bits |= bit;
    }
    Ok(bits)
}

/// What was formatted.
#[derive(Debug, Clone)]
pub struct MkfsReport {
    /// The layout chosen.
    pub geometry: Geometry,
    /// The file system's UUID.
    pub uuid: [u8; 16],
    /// Version of the first checkpoint.
    pub checkpoint_ver: u64,
}

/// Formats the image file at `path`, creating it with `size` bytes if it is
/// missing, resizing it if `size` is given. A regular file is emptied first
/// (so every unwritten block reads as zero, like a trimmed device).
pub fn format_path(path: &Path, size: Option<u64>, opts: &MkfsOptions) -> Result<MkfsReport> {
    let meta = std::fs::metadata(path);
    let is_regular = match &meta {
        Ok(m) => m.file_type().is_file(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            return Err(Error::io(
                format!("examining {}", path.display()),
                std::io::Error::new(e.kind(), e.to_string()),
            ))
        }
    };
    let mut zeroed = false;
    if is_regular {
        let target = match (size, &meta) {
            (Some(s), _) => s,
            (None, Ok(m)) => m.len(),
            (None, Err(_)) => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "{} does not exist: give a size to create it",
                        path.display()
                    ),
                ))
            }
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        file.set_len(target)
            .map_err(|e| Error::io(format!("sizing {}", path.display()), e))?;
        zeroed = true;
    } else if size.is_some() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{} is a device: its size cannot be set", path.display()),
        ));
    }
    let dev = FileDevice::open(
        path,
        FileDeviceOptions {
            writable: true,
            ..Default::default()
        },
    )?;
    let dev = Device::new(Box::new(dev));
    format(&dev, opts, zeroed)
}

/// Formats the device `dev`, e.g. a [`MemDevice`](crate::MemDevice)
/// shared through an `Arc` with the [`Fs`](crate::Fs) that opens it next.
pub fn format_device(dev: Box<dyn BlockDevice>, opts: &MkfsOptions) -> Result<MkfsReport> {
    format(&Device::new(dev), opts, false)
}

/// Formats `dev`. `known_zero` says every block already reads as zero.
pub fn format(dev: &Device, opts: &MkfsOptions, known_zero: bool) -> Result<MkfsReport> {
    let unsupported = opts.features & !MKFS_FEATURES;
    if unsupported != 0 {
        return Err(Error::unsupported(format!(
            "mkfs features {}",
            feature::describe(unsupported)
        )));
    }
    if opts.features & NEEDS_EXTRA_ATTR != 0 && opts.features & feature::EXTRA_ATTR == 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "features {} need extra_attr",
                feature::describe(opts.features & NEEDS_EXTRA_ATTR)
            ),
        ));
    }
    let quota_types = quota_types(opts.features);
    // As mkfs.f2fs: project_quota brings the quota inodes with it.
    let opts = &MkfsOptions {
        features: if quota_types.is_empty() {
            opts.features
        } else {
            opts.features | feature::QUOTA_INO
        },
        ..opts.clone()
    };
    let geo = compute(&GeometryOptions {
        device_bytes: dev.size(),
        segs_per_sec: opts.segs_per_sec,
        secs_per_zone: opts.secs_per_zone,
        overprovision_ratio: opts.overprovision_ratio,
    })
    .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))?;
    let now = opts.timestamp.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    });
    let uuid = opts.uuid.unwrap_or_else(random_uuid);
    let cp_ver = opts.checkpoint_ver.unwrap_or_else(|| {
        let seed = match opts.uuid {
            Some(uuid) => f2fuse_layout::crc::f2fs_crc32(F2FS_SUPER_MAGIC, &uuid),
            None => random_u32(),
        };
        (seed | 1) as u64
    });
    let lost_found = opts.features & feature::LOST_FOUND != 0;
    // mkfs.f2fs's order, in nids and in both hot logs: the root, the quota
    // files (user, group, project), lost+found.
    let qf_inos: Vec<(usize, u32)> = quota_types
        .iter()
        .enumerate()
        .map(|(i, &qtype)| (qtype, F2FS_ROOT_INO + 1 + i as u32))
        .collect();
    let lf_ino = lost_found.then_some(F2FS_ROOT_INO + 1 + qf_inos.len() as u32);
    let mut sb = build_superblock(&geo, opts, uuid)?;
    for &(qtype, ino) in &qf_inos {
        sb.qf_ino[qtype].set(ino);
    }
    sb.update_checksum();

    let seg_addr = |log: CursegType| geo.main_blkaddr + geo.cur_seg[log as usize] * BLOCKS_PER_SEG;
    let mut hot = HotLogs {
        node: seg_addr(CursegType::HotNode),
        data: seg_addr(CursegType::HotData),
        inodes: Vec::new(),
        data_owners: Vec::new(),
    };

    // Metadata areas: SIT copy #0 and NAT copy #0 of every segment pair start empty.
    if !known_zero {
        zero_blocks(
            dev,
            IoKind::Meta,
            geo.sit_blkaddr as u64,
            (geo.segment_count_sit / 2 * BLOCKS_PER_SEG) as u64,
        )?;
        for seg in 0..geo.segment_count_nat / 2 {
            zero_blocks(
                dev,
                IoKind::Meta,
                nat_block_addr(geo.nat_blkaddr, seg * BLOCKS_PER_SEG, 0),
                BLOCKS_PER_SEG as u64,
            )?;
        }
    }

    let inode_ctx = InodeContext {
        features: opts.features,
        seed: inode_checksum_seed(&uuid),
        now,
        cp_ver,
    };
    // The root directory, and lost+found inside it.
    let mut root_entries: Vec<(&[u8], u32)> = vec![(b".", F2FS_ROOT_INO), (b"..", F2FS_ROOT_INO)];
    if let Some(nid) = lf_ino {
        root_entries.push((b"lost+found", nid));
    }
    let root_dentry = hot.add_data(F2FS_ROOT_INO);
    dev.write_blocks(
        IoKind::DirData,
        root_dentry as u64,
        &dentry_block(&root_entries),
    )?;
    // A directory of one dentry block, owned as the root.
    let dir = |ino, parent, name, perm, links, dentry| InodeSpec {
        ino,
        parent,
        name,
        mode: mode::S_IFDIR | perm,
        links,
        uid: opts.root_uid,
        gid: opts.root_gid,
        flags: 0,
        size: F2FS_BLKSIZE as u64,
        addrs: vec![dentry],
    };
    let links = 2 + lost_found as u32;
    let root = dir(F2FS_ROOT_INO, 0, b"", 0o755, links, root_dentry);
    hot.write_inode(dev, &inode_ctx, &root)?;
    // The quota files: usage of the root's ids, root and lost+found.
    let charged = 1 + lost_found as u64;
    for &(qtype, ino) in &qf_inos {
        let id = [opts.root_uid, opts.root_gid, 0][qtype];
        let mut file = QuotaFile::new(qtype);
        file.set(
            id,
            &Dquot {
                curinodes: charged,
                curspace: charged * F2FS_BLKSIZE as u64,
                ..Dquot::default()
            },
        );
        let mut bytes = file.bytes().to_vec();
        let size = bytes.len() as u64;
        bytes.resize(bytes.len().next_multiple_of(F2FS_BLKSIZE), 0);
        let mut addrs = Vec::new();
        for block in bytes.chunks(F2FS_BLKSIZE) {
            let addr = hot.add_data(ino);
            dev.write_blocks(IoKind::UserData, addr as u64, block)?;
            addrs.push(addr);
        }
        let spec = InodeSpec {
            ino,
            parent: 0,
            name: b"",
            mode: mode::S_IFREG | 0o600,
            links: 1,
            uid: opts.root_uid,
            gid: opts.root_gid,
            flags: inode_flag::IMMUTABLE,
            size,
            addrs,
        };
        hot.write_inode(dev, &inode_ctx, &spec)?;
    }
    if let Some(nid) = lf_ino {
        let dentry = hot.add_data(nid);
        dev.write_blocks(
            IoKind::DirData,
            dentry as u64,
            &dentry_block(&[(b".", nid), (b"..", F2FS_ROOT_INO)]),
        )?;
        let spec = dir(nid, F2FS_ROOT_INO, b"lost+found", 0o700, 2, dentry);
        hot.write_inode(dev, &inode_ctx, &spec)?;
    }

    // NAT block 0: the reserved nids and the inodes (all of them are in
    // the checkpoint's NAT journal too).
    let mut nat_block = vec![0u8; F2FS_BLKSIZE];
    let reserved = [
        (F2FS_NODE_INO, NatEntry::new(0, F2FS_NODE_INO, 1)),
        (F2FS_META_INO, NatEntry::new(0, F2FS_META_INO, 1)),
    ];
    for (nid, entry) in reserved.iter().chain(&hot.inodes) {
        let off = *nid as usize * 9;
        nat_block[off..off + 9].copy_from_slice(entry.as_bytes());
    }
    dev.write_blocks(
        IoKind::Meta,
        nat_block_addr(geo.nat_blkaddr, 0, 0),
        &nat_block,
    )?;
    // Roll-forward recovery starts at the warm node log: make sure nothing stale is there.
    zero_blocks(dev, IoKind::Node, seg_addr(CursegType::WarmNode) as u64, 1)?;

    write_checkpoint_packs(dev, &geo, cp_ver, known_zero, &hot)?;
    dev.flush()?;
    // The superblocks last: until they exist the device is not an F2FS image.
    let sb_block = sb.to_block();
    dev.write_blocks(IoKind::Meta, 0, &sb_block)?;
    dev.write_blocks(IoKind::Meta, 1, &sb_block)?;
    dev.flush()?;
    Ok(MkfsReport {
        geometry: geo,
        uuid,
        checkpoint_ver: cp_ver,
    })
}

/// The quota files `features` ask for, by type: user and group with
/// `quota`, project with `project_quota` (mkfs.f2fs's quota_bits).
fn quota_types(features: u32) -> Vec<usize> {
    let mut types = Vec::new();
    if features & feature::QUOTA_INO != 0 {
        types.extend([USRQUOTA, GRPQUOTA]);
    }
    if features & feature::PRJQUOTA != 0 {
        types.push(PRJQUOTA);
    }
    types
}

/// What mkfs writes into the hot node and hot data logs, in order.
struct HotLogs {
    /// Where the next block of each log goes.
    node: u32,
    data: u32,
    /// Each inode and its NAT entry.
    inodes: Vec<(u32, NatEntry)>,
    /// The owner (nid, index in its inode) of each data block.
    data_owners: Vec<Summary>,
}

impl HotLogs {
    /// The next hot data block, for block `index` of inode `ino`'s data.
    fn add_data(&mut self, ino: u32) -> u32 {
        let index = self
            .data_owners
            .iter()
            .filter(|s| s.nid.get() == ino)
            .count();
        self.data_owners.push(Summary::new(ino, 0, index as u16));
        self.data += 1;
        self.data - 1
    }

    fn write_inode(&mut self, dev: &Device, ctx: &InodeContext, spec: &InodeSpec) -> Result<()> {
        let addr = self.node;
        self.node += 1;
        self.inodes
            .push((spec.ino, NatEntry::new(0, spec.ino, addr)));
        dev.write_blocks(IoKind::Node, addr as u64, &inode_block(ctx, spec, addr))
    }
}

fn build_superblock(geo: &Geometry, opts: &MkfsOptions, uuid: [u8; 16]) -> Result<SuperBlock> {
    let mut sb = SuperBlock::new_zeroed();
    sb.magic.set(F2FS_SUPER_MAGIC);
    sb.major_ver.set(1);
    sb.minor_ver.set(15);
    sb.log_sectorsize.set(9);
    sb.log_sectors_per_block.set(3);
    sb.log_blocksize.set(F2FS_BLKSIZE_BITS);
    sb.log_blocks_per_seg.set(F2FS_LOG_BLOCKS_PER_SEG);
    sb.segs_per_sec.set(geo.segs_per_sec);
    sb.secs_per_zone.set(geo.secs_per_zone);
    sb.block_count.set(geo.block_count);
    sb.section_count.set(geo.section_count);
    sb.segment_count.set(geo.segment_count);
    sb.segment_count_ckpt.set(geo.segment_count_ckpt);
    sb.segment_count_sit.set(geo.segment_count_sit);
    sb.segment_count_nat.set(geo.segment_count_nat);
    sb.segment_count_ssa.set(geo.segment_count_ssa);
    sb.segment_count_main.set(geo.segment_count_main);
    sb.segment0_blkaddr.set(geo.segment0_blkaddr);
    sb.cp_blkaddr.set(geo.cp_blkaddr);
    sb.sit_blkaddr.set(geo.sit_blkaddr);
    sb.nat_blkaddr.set(geo.nat_blkaddr);
    sb.ssa_blkaddr.set(geo.ssa_blkaddr);
    sb.main_blkaddr.set(geo.main_blkaddr);
    sb.root_ino.set(F2FS_ROOT_INO);
    sb.node_ino.set(F2FS_NODE_INO);
    sb.meta_ino.set(F2FS_META_INO);
    sb.uuid = uuid;
    sb.set_volume_label(&opts.label)
        .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.detail))?;
    for (slot, ext) in DEFAULT_COLD_EXTENSIONS
        .iter()
        .chain(DEFAULT_HOT_EXTENSIONS)
        .enumerate()
    {
        sb.extension_list[slot][..ext.len()].copy_from_slice(ext.as_bytes());
    }
    sb.extension_count.set(DEFAULT_COLD_EXTENSIONS.len() as u32);
    sb.hot_ext_count = DEFAULT_HOT_EXTENSIONS.len() as u8;
    sb.cp_payload.set(geo.cp_payload);
    let version = format!("f2fuse {}", env!("CARGO_PKG_VERSION"));
    sb.version[..version.len()].copy_from_slice(version.as_bytes());
    sb.init_version[..version.len()].copy_from_slice(version.as_bytes());
    sb.feature.set(opts.features);
    if opts.features & feature::CASEFOLD != 0 {
        // mkfs.f2fs -O casefold without -C leaves encoding 0, which no
        // kernel mounts; the feature always comes with utf8-12.1 here.
        sb.s_encoding.set(F2FS_ENC_UTF8_12_1);
        if opts.strict_encoding {
            sb.s_encoding_flags.set(F2FS_ENC_STRICT_MODE_FL);
        }
    }
    sb.update_checksum();
    sb.validate().map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("internal layout error: {e}"),
        )
    })?;
    Ok(sb)
}

struct InodeContext {
    features: u32,
    seed: u32,
    now: u64,
    cp_ver: u64,
}

struct InodeSpec<'a> {
    ino: u32,
    parent: u32,
    name: &'a [u8],
    /// Full mode, type bits included.
    mode: u16,
    links: u32,
    uid: u32,
    gid: u32,
    flags: u32,
    size: u64,
    /// Its data blocks, from index 0.
    addrs: Vec<u32>,
}

/// `i_extra_isize` mkfs.f2fs gives inodes for a feature set: the smallest size covering them.
pub fn extra_isize_for(features: u32) -> usize {
    if features & feature::EXTRA_ATTR == 0 {
        0
    } else if features & feature::COMPRESSION != 0 {
        36
    } else if features & feature::INODE_CRTIME != 0 {
        I_CRTIME_NSEC_OFFSET + 4 - I_ADDR_OFFSET
    } else if features & feature::INODE_CHKSUM != 0 {
        12
    } else if features & feature::PRJQUOTA != 0 {
        8
    } else {
        4
    }
}

fn inode_block(ctx: &InodeContext, spec: &InodeSpec, blkaddr: u32) -> Vec<u8> {
    let mut block = vec![0u8; F2FS_BLKSIZE];
    let extra_isize = extra_isize_for(ctx.features);
    {
        let inode = inode_of_mut(&mut block);
        inode.i_mode.set(spec.mode);
        inode.i_uid.set(spec.uid);
        inode.i_gid.set(spec.gid);
        inode.i_links.set(spec.links);
        inode.i_size.set(spec.size);
        inode.i_blocks.set(1 + spec.addrs.len() as u64);
        inode.i_atime.set(ctx.now);
        inode.i_ctime.set(ctx.now);
        inode.i_mtime.set(ctx.now);
        if spec.mode & mode::S_IFMT == mode::S_IFDIR {
            inode.i_current_depth.set(1);
        }
        inode.i_flags.set(spec.flags);
        inode.i_pino.set(spec.parent);
        inode.i_namelen.set(spec.name.len() as u32);
        inode.i_name[..spec.name.len()].copy_from_slice(spec.name);
        if extra_isize > 0 {
            inode.i_inline = inline_flag::EXTRA_ATTR;
        }
        for (i, &addr) in spec.addrs.iter().enumerate() {
            inode.i_addr[extra_isize / 4 + i].set(addr);
        }
    }
    if extra_isize > 0 {
        block[I_ADDR_OFFSET..I_ADDR_OFFSET + 2]
            .copy_from_slice(&(extra_isize as u16).to_le_bytes());
        if ctx.features & feature::PRJQUOTA != 0 {
            block[I_PROJID_OFFSET..I_PROJID_OFFSET + 4].copy_from_slice(&0u32.to_le_bytes());
        }
        if ctx.features & feature::INODE_CRTIME != 0 {
            block[I_CRTIME_OFFSET..I_CRTIME_OFFSET + 8].copy_from_slice(&ctx.now.to_le_bytes());
        }
    }
    let footer = footer_of_mut(&mut block);
    footer.nid.set(spec.ino);
    footer.ino.set(spec.ino);
    footer.set_ofs_and_cold(0, false);
    footer.cp_ver.set(ctx.cp_ver);
    footer.next_blkaddr.set(blkaddr + 1);
    update_inode_checksum(&mut block, ctx.features, ctx.seed);
    block
}

fn dentry_block(entries: &[(&[u8], u32)]) -> Vec<u8> {
    let mut block = vec![0u8; F2FS_BLKSIZE];
    let mut set = DentrySetMut::new(&mut block, DentryGeometry::BLOCK);
    let mut slot = 0;
    for (name, ino) in entries {
        set.insert(slot, name, dentry_hash(name), *ino, file_type::DIR);
        slot += name.len().div_ceil(F2FS_SLOT_LEN);
    }
    block
}

/// Writes pack #1 (the live checkpoint) and pack #2 (the same state one version
/// older, so a damaged pack #1 still leaves a valid fresh file system).
fn write_checkpoint_packs(
    dev: &Device,
    geo: &Geometry,
    cp_ver: u64,
    trimmed: bool,
    hot: &HotLogs,
) -> Result<()> {
    let inodes = hot.inodes.len() as u32;
    let data_blocks = hot.data_owners.len() as u32;
    let payload = geo.cp_payload;
    let mut head = new_checkpoint_block();
    {
        let cp = Checkpoint::mut_from_bytes(&mut head[..CP_BITMAP_OFFSET]).expect("header size");
        cp.user_block_count.set(geo.user_block_count);
        cp.valid_block_count.set((inodes + data_blocks) as u64);
        cp.rsvd_segment_count.set(geo.rsvd_segment_count);
        cp.overprov_segment_count.set(geo.overprov_segment_count);
        // mkfs.f2fs 1.15 writes usable - 6 here, which exceeds the real count (and fails
        // its own fsck) when the device does not end on a zone boundary: count what is free.
        cp.free_segment_count
            .set(geo.segment_count_main - NR_CURSEG_TYPE as u32);
        for i in 0..MAX_ACTIVE_LOGS / 2 {
            cp.cur_node_segno[i].set(u32::MAX);
            cp.cur_data_segno[i].set(u32::MAX);
        }
        for log in CursegType::ALL {
            let used = match log {
                CursegType::HotNode => inodes as u16,
                CursegType::HotData => data_blocks as u16,
                _ => 0,
            };
            cp.set_curseg(log, geo.cur_seg[log as usize], used);
        }
        let mut flags = cp_flag::UMOUNT | cp_flag::COMPACT_SUM;
        if trimmed {
            flags |= cp_flag::TRIMMED;
        }
        cp.ckpt_flags.set(flags);
        cp.cp_pack_total_block_count.set(6 + payload);
        cp.cp_pack_start_sum.set(1 + payload);
        cp.valid_node_count.set(inodes);
        cp.valid_inode_count.set(inodes);
        cp.next_free_nid.set(F2FS_ROOT_INO + inodes);
        cp.sit_ver_bitmap_bytesize.set(geo.sit_ver_bitmap_bytesize);
        cp.nat_ver_bitmap_bytesize.set(geo.nat_ver_bitmap_bytesize);
    }

    // Current data summaries with both journals, compacted into one block.
    let mut nat_journal = NatJournal::empty();
    nat_journal.n_nats.set(hot.inodes.len() as u16);
    for (slot, (nid, entry)) in hot.inodes.iter().enumerate() {
        nat_journal.entries[slot].nid.set(*nid);
        nat_journal.entries[slot].ne = *entry;
    }
    let mut sit_journal = SitJournal::empty();
    sit_journal.n_sits.set(NR_CURSEG_TYPE as u16);
    let journal_order = [
        CursegType::HotNode,
        CursegType::WarmNode,
        CursegType::ColdNode,
        CursegType::HotData,
        CursegType::WarmData,
        CursegType::ColdData,
    ];
    for (slot, log) in journal_order.into_iter().enumerate() {
        let mut se = SitEntry::new_zeroed();
        let used = match log {
            CursegType::HotNode => inodes,
            CursegType::HotData => data_blocks,
            _ => 0,
        };
        se.set_vblocks(log as u8, used);
        for b in 0..used as usize {
            bitmap::set_bit_msb(&mut se.valid_map, b, true);
        }
        sit_journal.entries[slot]
            .segno
            .set(geo.cur_seg[log as usize]);
        sit_journal.entries[slot].se = se;
    }
    let data_sums = DataSummaries {
        nat_journal,
        sit_journal,
        entries: [hot.data_owners.clone(), Vec::new(), Vec::new()],
    };
    let compacted = encode_compacted_summaries(&data_sums);
    debug_assert_eq!(compacted.len(), F2FS_BLKSIZE);

    let mut node_sums = Vec::new();
    for log in [
        CursegType::HotNode,
        CursegType::WarmNode,
        CursegType::ColdNode,
    ] {
        let mut sum = SummaryBlock::new_zeroed();
        sum.footer.entry_type = SUM_TYPE_NODE;
        if log == CursegType::HotNode {
            for (slot, (nid, _)) in hot.inodes.iter().enumerate() {
                sum.entries[slot] = Summary::new(*nid, 0, 0);
            }
        }
        node_sums.extend_from_slice(sum.as_bytes());
    }

    for (pack, version) in [(0u32, cp_ver), (1, cp_ver.wrapping_sub(1))] {
        let start = geo.cp_blkaddr as u64 + (pack * BLOCKS_PER_SEG) as u64;
        let mut header = head.clone();
        header[..8].copy_from_slice(&version.to_le_bytes());
        seal_checkpoint_block(&mut header);
        let mut pack_bytes = header.clone();
        pack_bytes.resize((1 + payload as usize) * F2FS_BLKSIZE, 0);
        pack_bytes.extend_from_slice(&compacted);
        pack_bytes.extend_from_slice(&node_sums);
        pack_bytes.extend_from_slice(&header);
        debug_assert_eq!(pack_bytes.len(), (6 + payload as usize) * F2FS_BLKSIZE);
        dev.write_blocks(IoKind::Meta, start, &pack_bytes)?;
    }
    Ok(())
}

fn zero_blocks(dev: &Device, kind: IoKind, start: u64, count: u64) -> Result<()> {
    const CHUNK: u64 = 256;
    let zeros = vec![0u8; (CHUNK as usize) * F2FS_BLKSIZE];
    let mut done = 0;
    while done < count {
        let n = CHUNK.min(count - done);
        dev.write_blocks(kind, start + done, &zeros[..n as usize * F2FS_BLKSIZE])?;
        done += n;
    }
    Ok(())
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    // SAFETY: writes at most N bytes into a buffer of N bytes.
    let got = unsafe { libc::getrandom(out.as_mut_ptr().cast(), N, 0) };
    if got != N as isize {
        // No entropy source: fall back to the clock, which is unique enough for a UUID.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in out.iter_mut().enumerate() {
            *b = (nanos >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(151);
        }
    }
    out
}

fn random_u32() -> u32 {
    u32::from_le_bytes(random_bytes::<4>())
}

/// A random (version 4) UUID.
pub fn random_uuid() -> [u8; 16] {
    let mut uuid = random_bytes::<16>();
    uuid[6] = (uuid[6] & 0x0F) | 0x40;
    uuid[8] = (uuid[8] & 0x3F) | 0x80;
    uuid
}
