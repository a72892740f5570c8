//! `build`: make an image from a host directory tree with our own engine
//! (what `mkfs.f2fs` + `sload.f2fs -P` do, plus the metadata sload drops:
//! xattrs, special files, nanosecond times, the root's attributes).

use crate::android::{self, FileContexts, FsConfig, FsConfigEntry, Label};
use crate::build_compress::CompressArgs;
use crate::mkfs::parse_uuid;
use crate::put::{attrs_of, open_source};
use crate::rw::{self, copy_data, describe, fail, refusal_of, show, CopyError};
use crate::size::{human, parse_size};
use clap::Args;
use f2fuse_engine::{
    format_path, is_sparse_file, parse_features, ErrorKind, FileKind, Fs, MkfsOptions, RawWorkCopy,
    SetMode, TimeSet, Timestamp,
};
use f2fuse_layout::F2FS_ROOT_INO;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{HashMap, HashSet};
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct BuildArgs {
    /// The host directory to copy (it becomes the image's root directory).
    pub src_dir: PathBuf,
    /// Image file or block device. Formatted if it does not exist or is an
    /// empty file, or with --size or --format; otherwise the tree is added to
    /// its file system.
    pub image: PathBuf,
    /// Image size (512M, 4G); formats the image. Default for a new image:
    /// 1.5 x the tree's allocated bytes + 64 MiB, at least 64 MiB.
    #[arg(long, short = 'S')]
    pub size: Option<String>,
    /// Format an existing image or device at its present size.
    #[arg(long)]
    pub format: bool,
    /// Features when formatting, comma-separated (as for mkfs).
    #[arg(short = 'O', value_name = "FEATURES")]
    pub features: Vec<String>,
    /// Volume label when formatting.
    #[arg(short = 'l', long)]
    pub label: Option<String>,
    /// Make everything owned by the caller instead of copying owners.
    #[arg(long)]
    pub no_owner: bool,
    /// Fixed time (seconds since the epoch) for every inode's atime, mtime,
    /// ctime and crtime, and for the format (as sload.f2fs -T). With it
    /// (and -U when formatting) the same tree builds the same bytes.
    #[arg(short = 'T', long, value_name = "SECS")]
    pub timestamp: Option<i64>,
    /// Volume UUID when formatting (default: random).
    #[arg(short = 'U', long)]
    pub uuid: Option<String>,
    /// Canned fs_config file (sload.f2fs -C): owner, mode and capabilities
    /// of every entry by path, lines `PATH UID GID MODE [capabilities=MASK]`.
    #[arg(short = 'C', long, value_name = "FILE")]
    pub fs_config: Option<PathBuf>,
    /// SELinux file_contexts files, comma-separated (sload.f2fs -s): the
    /// security.selinux label of every entry, chosen as libselinux does.
    #[arg(short = 's', long, value_name = "FILE[,FILE]")]
    pub file_contexts: Option<String>,
    /// Mount point the image's paths are looked up under in the fs_config
    /// and file_contexts files (sload.f2fs -t), e.g. /system.
    #[arg(short = 't', long, value_name = "PATH", default_value = "/")]
    pub mount_point: String,
    /// IMAGE is an Android sparse image: a missing one is created, an
    /// existing one is expanded beside it, built into and encoded again.
    #[arg(long)]
    pub sparse: bool,
    /// No progress bar and no summary (warnings are still printed).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[command(flatten)]
    pub compress: CompressArgs,
}

/// What the tree holds, from a first walk.
#[derive(Default, Debug)]
struct Totals {
    entries: u64,
    /// Apparent bytes of regular files (each inode once): the progress total.
    file_bytes: u64,
    /// Bytes the host allocates (4 KiB-rounded) plus one node block per inode.
    need_bytes: u64,
}

type HostId = (u64, u64);

fn id_of(md: &Metadata) -> HostId {
    (md.dev(), md.ino())
}

fn scan(
    path: &Path,
    skip: &[HostId],
    seen: &mut HashSet<HostId>,
    t: &mut Totals,
) -> Result<(), String> {
    let md = fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if skip.contains(&id_of(&md)) {
        return Ok(());
    }
    t.entries += 1;
    if md.nlink() > 1 && !md.is_dir() && !seen.insert(id_of(&md)) {
        return Ok(());
    }
    t.need_bytes += (md.blocks() * 512).div_ceil(4096) * 4096 + 4096;
    if md.is_file() {
        t.file_bytes += md.len();
    }
    if md.is_dir() {
        let rd = fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for de in rd {
            let de = de.map_err(|e| format!("{}: {e}", path.display()))?;
            scan(&de.path(), skip, seen, t)?;
        }
    }
    Ok(())
}

/// A build checkpoints whenever more node blocks than this (16 MiB) wait
/// in memory, not at the engine's default 64 MiB: each file adds an inode
/// block that is seldom read again, and the dirty node cache was most of
/// build's peak memory. A checkpoint per 4096 files costs a few percent of
/// the time (docs/PERFORMANCE.md, "The offline path").
const BUILD_MAX_DIRTY_NODES: usize = 4096;

/// The default size of a new image for a tree needing `need` bytes.
pub fn default_size(need: u64) -> u64 {
    let size = need + need / 2 + (64 << 20);
    size.div_ceil(1 << 20).max(64) << 20
}

pub fn run(args: &BuildArgs) -> Result<(), String> {
    let built = if args.sparse {
        build_sparse(args)?
    } else {
        build_into(args, &args.image, None)?
    };
    if !args.quiet {
        let image_size = fs::metadata(&args.image).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "built {} from {}: {} {}, {} of file data{}",
            args.image.display(),
            args.src_dir.display(),
            built.entries,
            if built.entries == 1 {
                "entry"
            } else {
                "entries"
            },
            human(built.file_bytes),
            if image_size > 0 {
                format!(", image {}", human(image_size))
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// What a build copied.
struct Built {
    entries: u64,
    file_bytes: u64,
}

fn build_sparse(args: &BuildArgs) -> Result<Built, String> {
    let image_md = fs::metadata(&args.image).ok();
    let raw = RawWorkCopy::beside(&args.image);
    if image_md.as_ref().is_some_and(|m| m.len() > 0) {
        if !is_sparse_file(&args.image) {
            return Err(format!(
                "{}: --sparse: the image exists and is not an Android sparse image \
                 (convert it with `f2fuse sparse`, or build without --sparse)",
                args.image.display()
            ));
        }
        raw.expand_from(&args.image).map_err(|e| describe(&e))?;
    }
    let built = build_into(args, raw.path(), image_md.as_ref().map(id_of))?;
    raw.store_into(&args.image).map_err(|e| describe(&e))?;
    Ok(built)
}

/// Builds into `image` (the image itself, or the raw working copy of a
/// sparse one, then `also_skip` is the sparse file).
fn build_into(args: &BuildArgs, image: &Path, also_skip: Option<HostId>) -> Result<Built, String> {
    let src = &args.src_dir;
    let src_md = fs::symlink_metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if !src_md.is_dir() {
        return Err(format!("{}: not a directory", src.display()));
    }
    let size = args.size.as_deref().map(parse_size).transpose()?;
    let android = Android::load(args)?;
    let uuid = args.uuid.as_deref().map(parse_uuid).transpose()?;
    let image_md = fs::metadata(image).ok();
    // A missing or empty image file is new: it gets the default size.
    let new_image = image_md
        .as_ref()
        .is_none_or(|m| m.is_file() && m.len() == 0);
    let format = new_image || size.is_some() || args.format;
    if !format && (!args.features.is_empty() || args.label.is_some() || uuid.is_some()) {
        return Err(format!(
            "{}: exists; -O, -l and -U only apply when formatting (add --size or --format)",
            args.image.display()
        ));
    }
    let mut features = 0;
    for list in &args.features {
        features |= parse_features(list).map_err(|e| describe(&e))?;
    }
    // The image may live inside the tree: never copy it into itself.
    let mut skip: Vec<HostId> = image_md
        .as_ref()
        .map(id_of)
        .into_iter()
        .chain(also_skip)
        .collect();
    let mut totals = Totals::default();
    scan(src, &skip, &mut HashSet::new(), &mut totals)?;

    if format {
        let size = match size {
            Some(s) => Some(s),
            None if new_image => Some(default_size(totals.need_bytes)),
            None => None, // --format: keep the present size
        };
        let opts = MkfsOptions {
            label: args.label.clone().unwrap_or_default(),
            features: features | args.compress.features(),
            root_uid: src_md.uid(),
            root_gid: src_md.gid(),
            timestamp: args.timestamp.map(|sec| sec.max(0) as u64),
            uuid,
            ..MkfsOptions::default()
        };
        format_path(image, size, &opts)
            .map_err(|e| format!("{}: {}", args.image.display(), describe(&e)))?;
        skip.extend(fs::metadata(image).ok().map(|m| id_of(&m)));
    }

    let fs = rw::open_rw(image)?;
    fs.set_max_dirty_nodes(BUILD_MAX_DIRTY_NODES);
    args.compress.configure(&fs)?;
    let free = fs.statfs().blocks_free * 4096;
    // Checked for fresh images only (adding to an image may replace files).
    if format && totals.need_bytes > free {
        let _ = fs.unmount();
        return Err(format!(
            "{}: {} free but the tree needs about {} (use a larger --size)",
            args.image.display(),
            human(free),
            human(totals.need_bytes)
        ));
    }
    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(totals.file_bytes);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar
    };
    if let Some(sec) = args.timestamp {
        fs.set_fixed_time(Timestamp { sec, nsec: 0 });
    }
    let mut b = Builder {
        fs: &fs,
        android,
        fixed_time: args.timestamp,
        owner: args.no_owner.then(rw::caller_ids),
        merge: !format,
        compress: &args.compress,
        skip,
        links: HashMap::new(),
        warnings: Vec::new(),
        progress,
        entries: 0,
        total_entries: totals.entries.saturating_sub(1),
    };
    let result = b
        .copy_dir(src, F2FS_ROOT_INO, b"")
        .and_then(|()| b.finish_entry(F2FS_ROOT_INO, src, &src_md, b"", None));
    b.progress.finish_and_clear();
    let warnings = std::mem::take(&mut b.warnings);
    let entries = b.entries;
    let unmounted = fs
        .unmount()
        .map_err(|e| format!("{}: unmount: {}", args.image.display(), describe(&e)));
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    result?;
    unmounted?;
    Ok(Built {
        entries,
        file_bytes: totals.file_bytes,
    })
}

struct Builder<'a> {
    fs: &'a Fs,
    android: Android,
    /// -T: every time is this second.
    fixed_time: Option<i64>,
    /// Fixed owner for everything (--no-owner), else the host's.
    owner: Option<(u32, u32)>,
    /// Adding to an existing file system: entries may already exist.
    merge: bool,
    compress: &'a CompressArgs,
    /// The image file (and a sparse image's raw working copy), if it lies
    /// inside the tree.
    skip: Vec<HostId>,
    /// Host inode -> our inode, for hard links.
    links: HashMap<HostId, u32>,
    warnings: Vec<String>,
    progress: ProgressBar,
    entries: u64,
    /// Entries below the root, from the first walk (for the progress line).
    total_entries: u64,
}

impl Builder<'_> {
    fn copy_dir(&mut self, host: &Path, dir: u32, at: &[u8]) -> Result<(), String> {
        let mut names: Vec<_> = fs::read_dir(host)
            .map_err(|e| format!("{}: {e}", host.display()))?
            .map(|de| de.map(|d| d.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", host.display()))?;
        names.sort();
        for name in names {
            let path = host.join(&name);
            let entry_path = [at, b"/", name.as_bytes()].concat();
            let md = fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if self.skip.contains(&id_of(&md)) {
                self.warnings.push(format!(
                    "{}: is the image itself; not copied",
                    path.display()
                ));
                continue;
            }
            self.copy_entry(&path, &md, dir, name.as_bytes(), &entry_path)?;
        }
        Ok(())
    }

    fn copy_entry(
        &mut self,
        path: &Path,
        md: &Metadata,
        dir: u32,
        name: &[u8],
        at: &[u8],
    ) -> Result<(), String> {
        let fs = self.fs;
        let shown = &show(at);
        self.entries += 1;
        self.progress
            .set_message(format!("{}/{} entries", self.entries, self.total_entries));
        let (uid, gid) = self.owner.unwrap_or((md.uid(), md.gid()));
        let ft = md.file_type();
        let mut reuse_dir = None;
        if self.merge {
            reuse_dir = self.make_room(dir, name, ft.is_dir(), shown)?;
        }
        if !ft.is_dir() && md.nlink() > 1 {
            if let Some(&ino) = self.links.get(&id_of(md)) {
                fs.link(ino, dir, name).map_err(|e| fail(shown, &e))?;
                if ft.is_file() {
                    self.progress.inc(md.len());
                }
                return Ok(());
            }
        }
        let perm = (md.mode() & 0o7777) as u16;
        let ino = if ft.is_dir() {
            let ino = match reuse_dir {
                Some(ino) => ino,
                None => {
                    fs.mkdir(dir, name, perm, uid, gid)
                        .map_err(|e| fail(shown, &e))?
                        .ino
                }
            };
            self.copy_dir(path, ino, at)?;
            ino
        } else if ft.is_file() {
            let inode = fs
                .create(dir, name, perm, uid, gid)
                .map_err(|e| fail(shown, &e))?;
            self.compress
                .start_file(fs, inode.ino, name)
                .map_err(|e| fail(shown, &e))?;
            // Empty files are not opened (a mode-0000 one is fine without root).
            if md.len() > 0 {
                let file = open_source(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let progress = &self.progress;
                copy_data(fs, inode.ino, &file, md.len(), &mut |n| progress.inc(n)).map_err(
                    |e| match e {
                        CopyError::Host(e) => format!("{}: {e}", path.display()),
                        CopyError::Image(e) => fail(shown, &e),
                    },
                )?;
            }
            inode.ino
        } else if ft.is_symlink() {
            let target = fs::read_link(path).map_err(|e| format!("{}: {e}", path.display()))?;
            fs.symlink(dir, name, target.as_os_str().as_bytes(), uid, gid)
                .map_err(|e| fail(shown, &e))?
                .ino
        } else if ft.is_fifo() || ft.is_socket() || ft.is_char_device() || ft.is_block_device() {
            let mode = (md.mode() & (libc::S_IFMT | 0o7777)) as u16;
            let rdev = (libc::major(md.rdev()), libc::minor(md.rdev()));
            fs.mknod(dir, name, mode, rdev, uid, gid)
                .map_err(|e| fail(shown, &e))?
                .ino
        } else {
            self.warnings
                .push(format!("{}: unknown file type; not copied", path.display()));
            return Ok(());
        };
        if !ft.is_dir() && md.nlink() > 1 {
            self.links.insert(id_of(md), ino);
        }
        let size = ft.is_file().then_some(md.len());
        self.finish_entry(ino, path, md, at, size)?;
        // Last: a released file refuses the size finish_entry sets.
        if ft.is_file() {
            self.compress
                .finish_file(fs, ino)
                .map_err(|e| fail(shown, &e))?;
        }
        Ok(())
    }

    /// When adding to an existing image: clears the way for `name`. Returns
    /// the existing directory's inode when a directory is merged into it.
    fn make_room(
        &mut self,
        dir: u32,
        name: &[u8],
        is_dir: bool,
        shown: &str,
    ) -> Result<Option<u32>, String> {
        let entry = match self.fs.lookup(dir, name) {
            Ok(e) => e,
            Err(e) if refusal_of(&e) == Some(ErrorKind::NotFound) => return Ok(None),
            Err(e) => return Err(fail(shown, &e)),
        };
        match (entry.kind == FileKind::Directory, is_dir) {
            (true, true) => Ok(Some(entry.ino)),
            (true, false) => Err(format!(
                "{shown}: is a directory in the image but not in the source tree"
            )),
            (false, _) => {
                self.fs.unlink(dir, name).map_err(|e| fail(shown, &e))?;
                Ok(None)
            }
        }
    }

    /// Xattrs, then mode, owner and times (after the contents, which change
    /// mtime); what an fs_config or file_contexts file says replaces what
    /// the host says. `at` is the image path ("" for the root).
    fn finish_entry(
        &mut self,
        ino: u32,
        path: &Path,
        md: &Metadata,
        at: &[u8],
        size: Option<u64>,
    ) -> Result<(), String> {
        let shown = &show(if at.is_empty() { b"/" } else { at });
        let config = self.android.fs_config(at)?.cloned();
        let label = self.android.label(at, md.mode())?;
        let mut xattrs =
            rw::host_xattrs(path).map_err(|e| format!("{}: xattrs: {e}", path.display()))?;
        xattrs.retain(|(name, _)| {
            !(config.is_some() && name == CAPABILITY_XATTR
                || label.is_some() && name == SELINUX_XATTR)
        });
        if let Some(Some(context)) = &label {
            xattrs.push((SELINUX_XATTR.to_vec(), context.clone()));
        }
        if let Some(entry) = config.as_ref().filter(|e| e.capabilities != 0) {
            xattrs.push((
                CAPABILITY_XATTR.to_vec(),
                android::capability_xattr(entry.capabilities),
            ));
        }
        // In name order, not the host's listing order: the same tree makes
        // the same xattr blocks.
        xattrs.sort();
        for (name, value) in xattrs {
            if let Some(problem) = rw::xattr_name_problem(&name) {
                self.warnings
                    .push(format!("{}: not copied: {problem}", path.display()));
                continue;
            }
            match self.fs.set_xattr(ino, &name, &value, SetMode::Any) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        refusal_of(&e),
                        Some(ErrorKind::TooBig) | Some(ErrorKind::BufferTooSmall)
                    ) =>
                {
                    self.warnings.push(format!(
                        "{}: xattr {} not copied: {}",
                        path.display(),
                        show(&name),
                        describe(&e)
                    ))
                }
                Err(e) => return Err(format!("{shown}: xattr {}: {}", show(&name), describe(&e))),
            }
        }
        let (uid, gid) = match &config {
            Some(entry) => (entry.uid, entry.gid),
            None => self.owner.unwrap_or((md.uid(), md.gid())),
        };
        let mut attrs = attrs_of(md, uid, gid, size);
        if let Some(entry) = &config {
            attrs.mode = Some(entry.mode);
        }
        if let Some(sec) = self.fixed_time {
            let time = Some(TimeSet::At(Timestamp { sec, nsec: 0 }));
            (attrs.atime, attrs.mtime) = (time, time);
        }
        self.fs.setattr(ino, &attrs).map_err(|e| fail(shown, &e))?;
        Ok(())
    }
}

const SELINUX_XATTR: &[u8] = b"security.selinux";
const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// The Android build inputs of a build (-C, -s, -t).
struct Android {
    fs_config: Option<FsConfig>,
    contexts: Option<FileContexts>,
    /// -t without a trailing slash: "" for "/", else e.g. "/system".
    mount_point: Vec<u8>,
}

impl Android {
    fn load(args: &BuildArgs) -> Result<Android, String> {
        let fs_config = args.fs_config.as_deref().map(FsConfig::load).transpose()?;
        let contexts = match &args.file_contexts {
            Some(list) => {
                let paths: Vec<&Path> = list.split(',').map(Path::new).collect();
                Some(FileContexts::load(&paths)?)
            }
            None => None,
        };
        let trimmed = args.mount_point.trim_end_matches('/');
        let mount_point = if trimmed.is_empty() || trimmed.starts_with('/') {
            trimmed.as_bytes().to_vec()
        } else {
            [b"/", trimmed.as_bytes()].concat()
        };
        Ok(Android {
            fs_config,
            contexts,
            mount_point,
        })
    }

    /// The fs_config entry of image path `at`. As sload.f2fs, the path
    /// looked up is the mount point plus `at`; a missing entry is an
    /// error, except for the root (looked up as "", the canned files'
    /// root line), which otherwise keeps the source directory's attributes.
    fn fs_config(&self, at: &[u8]) -> Result<Option<&FsConfigEntry>, String> {
        let Some(config) = &self.fs_config else {
            return Ok(None);
        };
        if at.is_empty() {
            return Ok(config.lookup(b""));
        }
        let key = [&self.mount_point[..], at].concat();
        config.lookup(&key).map(Some).ok_or_else(|| {
            format!(
                "{}: not in the fs_config file (looked up as {:?})",
                show(at),
                show(key.strip_prefix(b"/").unwrap_or(&key))
            )
        })
    }

    /// The SELinux label of image path `at` (Some(None): `<<none>>`); the
    /// key is the mount point plus `at`, the root's the mount point itself.
    /// A path no line matches is an error, as in sload.f2fs.
    fn label(&self, at: &[u8], mode: u32) -> Result<Option<Option<Vec<u8>>>, String> {
        let Some(contexts) = &self.contexts else {
            return Ok(None);
        };
        let key = match [&self.mount_point[..], at].concat() {
            root if root.is_empty() => b"/".to_vec(),
            key => key,
        };
        match contexts.lookup(&key, mode) {
            Some(Label::Context(context)) => Ok(Some(Some(context.to_vec()))),
            Some(Label::None) => Ok(Some(None)),
            None => Err(format!(
                "{}: no file_contexts line matches {:?}",
                show(if at.is_empty() { b"/" } else { at }),
                show(&key)
            )),
        }
    }
}
