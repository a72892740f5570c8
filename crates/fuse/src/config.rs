//! Mount configuration and `-o` option parsing.

use f2fuse_engine::{
    enforcement_bit, parse_tunable_value, tunable_info, AtimePolicy, CompressMode, CompressOptions,
};
use f2fuse_layout::compress::CompressAlgorithm;
use std::time::Duration;

/// Kernel mount flags passed through unchanged (as mount(8) and fstab give them).
const KERNEL_FLAGS: &[&str] = &[
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "sync", "async",
    "dirsync",
];

/// How to mount an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Open the image read-only and mount with `ro`.
    pub read_only: bool,
    /// Let users other than the one mounting use the file system.
    pub allow_other: bool,
    /// Let the kernel check permissions from the inodes' modes, owners and
    /// ACLs; without it the daemon checks every request itself (there is
    /// no mount without permission checks).
    pub default_permissions: bool,
    /// Threads serving FUSE requests (each with its own cloned /dev/fuse fd).
    pub threads: usize,
    /// Kernel page cache in write-back mode (writes are gathered by the
    /// kernel and sent in large requests).
    pub writeback_cache: bool,
    /// How long the kernel may cache names and attributes.
    pub ttl: Duration,
    /// Engine tunables under the kernel's sysfs names (`cp_interval=60`,
    /// `max_victim_search=20`, ...), checked when parsed, set at open.
    pub tunables: Vec<(String, u64)>,
    /// Kernel flags such as `noatime`, `nosuid`, `nodev`, `noexec`.
    pub kernel_flags: Vec<String>,
    /// Name shown as the source in /proc/mounts (default: the image path).
    pub fsname: Option<String>,
    /// The type is shown as `fuse.SUBTYPE` (default `f2fuse`); empty: plain
    /// `fuse`, which harnesses written for any FUSE file system look for.
    pub subtype: String,
    /// Which reads update access times (`relatime` by default,
    /// `strictatime`, `noatime`): FUSE leaves atime to the daemon.
    pub atime: AtimePolicy,
    /// The kernel's compression options (`compress_algorithm=zstd:3`,
    /// `compress_log_size=4`, `compress_extension=txt`, ...), for files
    /// that get compression on an image with the feature.
    pub compress: CompressOptions,
    /// The kernel's readahead window for this mount (KiB): sequential
    /// reads reach the daemon as requests of up to this size (at most the
    /// largest FUSE request, 1 MiB, each).
    pub read_ahead_kb: u32,
    /// Quota types whose limits are enforced (bit 0 user, 1 group, 2
    /// project), from the kernel's `usrquota`, `grpquota`, `prjquota`
    /// (`quota` = `usrquota`); usage is tracked on quota images either way.
    pub quota_enforced: u8,
    /// The kernel's write-back limits for the mount's backing device
    /// (`max_ratio`, `max_bytes`, `strict_limit` of
    /// /sys/class/bdi/MAJOR:MINOR), in the order given, set at mount when
    /// mounting as root; empty keeps FUSE's (1 % of the dirty threshold,
    /// strictly).
    pub dirty_limits: Vec<(String, u64)>,
    /// Start the image's write-back of large data writes at once
    /// (`write_behind`, the default; `no_write_behind` leaves it to the
    /// host's dirty limits and the next fsync).
    pub write_behind: bool,
    /// KiB of the image read ahead of each sequential stream of large
    /// reads, around the host's page cache (`image_read_ahead_kb`; 0 reads
    /// through the page cache as a plain file would).
    pub image_read_ahead_kb: u32,
}

/// The backing device's write-back limits a mount may set, with the
/// largest value each takes: `max_ratio` (percent of the system's dirty
/// threshold this device may hold), `max_bytes` (the same limit in bytes;
/// the kernel keeps one limit, so the later of the two wins) and
/// `strict_limit` (1: the device is held to its limit even while the
/// system as a whole is below its dirty threshold).
pub const DIRTY_LIMITS: &[(&str, u64)] = &[
    ("max_ratio", 100),
    ("max_bytes", u64::MAX),
    ("strict_limit", 1),
];

/// Default readahead window (KiB): large enough that a sequential reader
/// keeps several 1 MiB requests in flight (docs/PERFORMANCE.md, W4 reads
/// with 128, 1024 and 4096 KiB).
pub const DEFAULT_READ_AHEAD_KB: u32 = 4096;

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            allow_other: false,
            default_permissions: false,
            threads: 4,
            writeback_cache: true,
            ttl: Duration::from_secs(1),
            tunables: Vec::new(),
            kernel_flags: Vec::new(),
            fsname: None,
            subtype: "f2fuse".to_string(),
            atime: AtimePolicy::default(),
            compress: CompressOptions::default(),
            read_ahead_kb: DEFAULT_READ_AHEAD_KB,
            quota_enforced: 0,
            dirty_limits: Vec::new(),
            write_behind: true,
            image_read_ahead_kb: DEFAULT_IMAGE_READ_AHEAD_KB,
        }
    }
}

/// Largest readahead window accepted (KiB): 1 GiB.
const MAX_READ_AHEAD_KB: u32 = 1 << 20;

/// Default image read-ahead (KiB): four of the default FUSE readahead
/// windows, so the chunk reads stay ahead of the kernel's requests
/// (docs/PERFORMANCE.md, "Cold reads").
pub const DEFAULT_IMAGE_READ_AHEAD_KB: u32 = 16 * 1024;

/// The options `-o` accepts, for error messages and `--help`.
pub const OPTIONS_HELP: &str = "ro, rw, allow_other, default_permissions, threads=N, \
     writeback_cache, no_writeback_cache, write_behind, no_write_behind, ttl=SECS, fsname=NAME, read_ahead_kb=KIB, \
     image_read_ahead_kb=KIB, \
     subtype=[NAME], max_ratio=PCT, max_bytes=BYTES, strict_limit=0|1, relatime, strictatime, the kernel flags dev, nodev, \
     suid, nosuid, exec, noexec, atime, noatime, sync, async, dirsync, and the f2fs tunables as \
     NAME=VALUE (max_victim_search, gc_idle, gc_urgent, gc_urgent_sleep_time, gc_min_sleep_time, \
     gc_max_sleep_time, gc_no_gc_sleep_time, cp_interval, reclaim_segments, min_ssr_sections, \
     dir_level, serialized_dio_pages, max_folio_order, ipu_policy, min_ipu_util, min_fsync_blocks, \
     extent_zeroout_len, gc_pin_file_thresh; \
     see `f2fuse tune`), and the compression options compress_algorithm=lzo|lz4[:LEVEL]|\
     zstd[:LEVEL]|lzo-rle, compress_log_size=2..8, compress_extension=EXT, \
     nocompress_extension=EXT (each may be repeated), compress_chksum, \
     compress_mode=fs|user, and the quota options usrquota, grpquota, prjquota, quota";

/// A window size in KiB, 0 to [`MAX_READ_AHEAD_KB`].
fn kib(name: &str, value: &str) -> Result<u32, String> {
    value
        .parse()
        .ok()
        .filter(|kb| *kb <= MAX_READ_AHEAD_KB)
        .ok_or_else(|| format!("option {name}={value}: expected 0 to {MAX_READ_AHEAD_KB}"))
}

fn seconds(name: &str, value: &str) -> Result<Duration, String> {
    let secs: f64 = value
        .parse()
        .map_err(|_| format!("option {name}={value}: not a number of seconds"))?;
    if !(0.0..=86_400.0 * 365.0).contains(&secs) {
        return Err(format!("option {name}={value}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl MountConfig {
    /// `relatime` or `strictatime`: reads update atimes again after a `noatime`.
    fn set_atime(&mut self, policy: AtimePolicy) {
        self.atime = policy;
        self.kernel_flags.retain(|f| f != "noatime");
    }

    /// One of [`DIRTY_LIMITS`]; `max_ratio` and `max_bytes` replace each
    /// other, as they do in the kernel.
    fn set_dirty_limit(&mut self, name: &str, value: &str) -> Result<(), String> {
        let max = DIRTY_LIMITS
            .iter()
            .find_map(|&(n, max)| (n == name).then_some(max))
            .unwrap_or(0);
        let value: u64 = value
            .parse()
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("option {name}={value}: expected 0 to {max}"))?;
        let replaced = match name {
            "max_ratio" => "max_bytes",
            "max_bytes" => "max_ratio",
            _ => name,
        };
        self.dirty_limits
            .retain(|(n, _)| n != name && n != replaced);
        self.dirty_limits.push((name.to_string(), value));
        Ok(())
    }

    /// Applies one comma-separated `-o` list (later options win).
    pub fn apply_options(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').filter(|o| !o.is_empty()) {
            self.apply_option(opt)?;
        }
        Ok(())
    }

    /// Applies one option such as `ro` or `threads=8`.
    pub fn apply_option(&mut self, opt: &str) -> Result<(), String> {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        match (name, value) {
            ("ro", None) => self.read_only = true,
            ("rw", None) => self.read_only = false,
            ("allow_other", None) => self.allow_other = true,
            ("default_permissions", None) => self.default_permissions = true,
            ("writeback_cache", None) => self.writeback_cache = true,
            ("no_writeback_cache", None) => self.writeback_cache = false,
            ("write_behind", None) => self.write_behind = true,
            ("no_write_behind", None) => self.write_behind = false,
            ("threads", Some(v)) => {
                self.threads = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .ok_or_else(|| format!("option threads={v}: expected 1 to 256"))?;
            }
            ("ttl", Some(v)) => self.ttl = seconds(name, v)?,
            ("read_ahead_kb", Some(v)) => self.read_ahead_kb = kib(name, v)?,
            ("image_read_ahead_kb", Some(v)) => self.image_read_ahead_kb = kib(name, v)?,
            (name, Some(v)) if DIRTY_LIMITS.iter().any(|(n, _)| *n == name) => {
                self.set_dirty_limit(name, v)?
            }
            (name, Some(v)) if tunable_info(name).is_ok() => {
                let value = parse_tunable_value(name, v).map_err(|e| format!("option {e}"))?;
                self.tunables.retain(|(n, _)| n != name);
                self.tunables.push((name.to_string(), value));
            }
            ("fsname", Some(v)) if !v.is_empty() => self.fsname = Some(v.to_string()),
            ("subtype", Some(v)) if !v.contains(',') => self.subtype = v.to_string(),
            (name, None) if enforcement_bit(name).is_some() => {
                self.quota_enforced |= enforcement_bit(name).unwrap_or(0);
            }
            ("relatime", None) => self.set_atime(AtimePolicy::Relative),
            ("strictatime", None) => self.set_atime(AtimePolicy::Strict),
            ("compress_algorithm", Some(v)) => {
                let (name, level) = match v.split_once(':') {
                    Some((n, l)) => (n, Some(l)),
                    None => (v, None),
                };
                self.compress.algorithm = CompressAlgorithm::from_name(name)
                    .ok_or_else(|| format!("option compress_algorithm={v}: unknown algorithm"))?;
                self.compress.level = match level {
                    Some(l) => l
                        .parse()
                        .map_err(|_| format!("option compress_algorithm={v}: bad level"))?,
                    None => 0,
                };
            }
            ("compress_log_size", Some(v)) => {
                self.compress.log_cluster_size = v
                    .parse()
                    .ok()
                    .filter(|n| (2..=8).contains(n))
                    .ok_or_else(|| format!("option compress_log_size={v}: expected 2 to 8"))?;
            }
            ("compress_extension", Some(v)) if !v.is_empty() => {
                self.compress.extensions.push(v.to_string())
            }
            ("nocompress_extension", Some(v)) if !v.is_empty() => {
                self.compress.nocompress_extensions.push(v.to_string())
            }
            ("compress_chksum", None) => self.compress.checksum = true,
            ("compress_mode", Some(v)) => {
                self.compress.mode = match v {
                    "fs" => CompressMode::Fs,
                    "user" => CompressMode::User,
                    _ => return Err(format!("option compress_mode={v}: expected fs or user")),
                }
            }
            (flag, None) if KERNEL_FLAGS.contains(&flag) => {
                // A later flag overrides its opposite ("noatime" after "atime").
                let opposite = flag
                    .strip_prefix("no")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("no{flag}"));
                let opposite = match flag {
                    "sync" => "async".to_string(),
                    "async" => "sync".to_string(),
                    _ => opposite,
                };
                self.kernel_flags.retain(|f| f != flag && *f != opposite);
                self.kernel_flags.push(flag.to_string());
                match flag {
                    "noatime" => self.atime = AtimePolicy::Never,
                    "atime" => self.atime = AtimePolicy::Relative,
                    _ => {}
                }
            }
            _ => {
                return Err(format!(
                    "unknown or malformed mount option \"{opt}\" (known: {OPTIONS_HELP})"
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn options_help_names_every_tunable() {
        for tunable in f2fuse_engine::TUNABLES {
            assert!(
                OPTIONS_HELP.contains(tunable.name),
                "OPTIONS_HELP does not name {}",
                tunable.name
            );
        }
    }

    #[test]
    fn compression_options_parse() {
        let mut c = MountConfig::default();
        c.apply_options(
            "compress_algorithm=zstd:3,compress_log_size=4,compress_extension=txt,\
             compress_extension=log,nocompress_extension=jpg,compress_chksum,compress_mode=user",
        )
        .unwrap();
        assert_eq!(c.compress.algorithm, CompressAlgorithm::Zstd);
        assert_eq!((c.compress.level, c.compress.log_cluster_size), (3, 4));
        assert_eq!(c.compress.extensions, ["txt", "log"]);
        assert_eq!(c.compress.nocompress_extensions, ["jpg"]);
        assert!(c.compress.checksum);
        assert_eq!(c.compress.mode, CompressMode::User);
        for bad in [
            "compress_algorithm=gzip",
            "compress_log_size=9",
            "compress_mode=auto",
            "compress_algorithm=lz4:x",
        ] {
            assert!(c.apply_option(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_parse() {
        let mut c = MountConfig::default();
        c.apply_options("ro,allow_other,default_permissions,threads=8,noatime")
            .unwrap();
        assert!(c.read_only && c.allow_other && c.default_permissions);
        assert_eq!(c.threads, 8);
        assert_eq!(c.kernel_flags, ["noatime"]);
        c.apply_options("rw,atime,ttl=0.5,no_writeback_cache")
            .unwrap();
        assert!(!c.read_only && !c.writeback_cache);
        assert_eq!(c.kernel_flags, ["atime"]);
        assert_eq!(c.ttl, Duration::from_millis(500));
        c.apply_options("noatime,subtype=f2test").unwrap();
        assert_eq!(
            (c.atime, c.subtype.as_str()),
            (AtimePolicy::Never, "f2test")
        );
        c.apply_options("strictatime").unwrap();
        assert_eq!(c.atime, AtimePolicy::Strict);
        c.apply_options("subtype=").unwrap();
        assert_eq!(c.subtype, "");
        assert!(c.kernel_flags.is_empty());
        assert!(c.write_behind);
        c.apply_options("no_write_behind").unwrap();
        assert!(!c.write_behind);
        c.apply_options("write_behind").unwrap();
        assert!(c.write_behind);
    }

    #[test]
    fn tunables_use_the_kernel_names() {
        let mut c = MountConfig::default();
        c.apply_options("max_victim_search=20,cp_interval=5,gc_urgent=1")
            .unwrap();
        c.apply_options("cp_interval=30").unwrap();
        assert_eq!(
            c.tunables,
            named(&[
                ("max_victim_search", 20),
                ("gc_urgent", 1),
                ("cp_interval", 30)
            ])
        );
    }

    #[test]
    fn dirty_limits_parse_in_order_and_replace_each_other() {
        let mut c = MountConfig::default();
        c.apply_options("strict_limit=0,max_ratio=50").unwrap();
        c.apply_options("max_bytes=1073741824").unwrap();
        assert_eq!(
            c.dirty_limits,
            named(&[("strict_limit", 0), ("max_bytes", 1 << 30)])
        );
        c.apply_options("max_ratio=100,strict_limit=1").unwrap();
        assert_eq!(
            c.dirty_limits,
            named(&[("max_ratio", 100), ("strict_limit", 1)])
        );
        assert!(MountConfig::default().dirty_limits.is_empty());
    }

    #[test]
    fn bad_options_are_refused() {
        let mut c = MountConfig::default();
        for bad in [
            "bogus",
            "threads=0",
            "threads=x",
            "ro=1",
            "ttl=-1",
            "fsname=",
            "gc_urgent=4",
            "max_victim_search=0",
            "max_victim_search=x",
            "checkpoint_interval=60",
            "gc_interval=30",
            "ipu_policy=256",
            "discard_granularity=1",
            "max_ratio=101",
            "max_ratio=-1",
            "strict_limit=2",
            "max_bytes=lots",
            "max_ratio",
        ] {
            let err = c.apply_options(bad).unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
