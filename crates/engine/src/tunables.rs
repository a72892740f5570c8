//! Run-time tunables under the kernel's sysfs names (`/sys/fs/f2fs/<disk>/...`,
//! Documentation/ABI/testing/sysfs-fs-f2fs), with the kernel's meanings and
//! defaults. Each one offered here changes what the engine does; the
//! kernel's other names are not accepted (docs/TUNABLES.md).
//!
//! `gc_idle` and `gc_urgent` are two views of one mode, as in the kernel
//! (`sbi->gc_mode`): setting one resets the other. `max_victim_search`
//! bounds foreground searches too, as when the kernel introduced it (current
//! kernels bound only background cleaning and SSR victim searches).

use crate::data::{DataPolicy, DEFAULT_SERIALIZED_DIO_PAGES, MAX_FOLIO_ORDER};
use crate::error::{Error, ErrorKind, Result};
use crate::gc::VictimPolicy;
use crate::ipu::{ipu_bit, IpuPolicy};
use std::time::Duration;

/// The cleaner's mode (the kernel's `gc_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcMode {
    /// Cost-benefit in the background, greedy in the foreground.
    Normal,
    /// `gc_idle=1`: cost-benefit for every cleaning.
    IdleCostBenefit,
    /// `gc_idle=2`: greedy for every cleaning.
    IdleGreedy,
    /// `gc_urgent=1`: the background cleaner runs every
    /// `gc_urgent_sleep_time`, busy or not, greedy.
    UrgentHigh,
    /// `gc_urgent=2`: the background cleaner does not wait for idleness.
    UrgentLow,
    /// `gc_urgent=3`: as high, but cost-benefit.
    UrgentMid,
}

/// One tunable: name, meaning, unit and valid range.
#[derive(Debug, Clone, Copy)]
pub struct TunableInfo {
    /// The name, as in `/sys/fs/f2fs/<dev>/`.
    pub name: &'static str,
    /// What it sets.
    pub meaning: &'static str,
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
}

const fn info(name: &'static str, meaning: &'static str, min: u64, max: u64) -> TunableInfo {
    TunableInfo {
        name,
        meaning,
        min,
        max,
    }
}

/// Longest sleep or interval accepted: one day.
const MAX_MS: u64 = 86_400_000;

/// Every tunable offered, in listing order.
pub const TUNABLES: &[TunableInfo] = &[
    info(
        "max_victim_search",
        "dirty sections one victim search looks at, foreground and background",
        1,
        u32::MAX as u64,
    ),
    info(
        "gc_idle",
        "victim policy: 0 kernel default (background cost-benefit, foreground greedy), \
         1 cost-benefit, 2 greedy",
        0,
        2,
    ),
    info(
        "gc_urgent",
        "0 normal, 1 high (background cleaning every gc_urgent_sleep_time, greedy), \
         2 low (without waiting for idleness), 3 mid (as high, cost-benefit)",
        0,
        3,
    ),
    info(
        "gc_urgent_sleep_time",
        "ms between background cleanings in gc_urgent 1 and 3",
        1,
        MAX_MS,
    ),
    info(
        "gc_min_sleep_time",
        "ms, shortest background cleaner sleep (and its step)",
        1,
        MAX_MS,
    ),
    info(
        "gc_max_sleep_time",
        "ms, longest background cleaner sleep while dirty segments exist",
        1,
        MAX_MS,
    ),
    info(
        "gc_no_gc_sleep_time",
        "ms the background cleaner sleeps after finding no victim",
        1,
        MAX_MS,
    ),
    info(
        "cp_interval",
        "seconds after which an operation or the daemon writes a checkpoint",
        0,
        MAX_MS / 1000,
    ),
    info(
        "reclaim_segments",
        "checkpoint when more segments than this are prefree (invalid but not yet reusable)",
        0,
        u32::MAX as u64,
    ),
    info(
        "min_ssr_sections",
        "data logs fill holes of dirty segments (SSR) instead of opening free ones once free \
         sections are at most the reserved ones plus this many",
        0,
        u32::MAX as u64,
    ),
    info(
        "serialized_dio_pages",
        "a write of at least this many blocks gets all of them in one allocation step, \
         contiguous in its log; smaller writes allocate a unit at a time (0: never)",
        0,
        u32::MAX as u64,
    ),
    info(
        "max_folio_order",
        "the data path maps, allocates and reads in units of up to 2^n blocks \
         (0: block at a time)",
        0,
        MAX_FOLIO_ORDER as u64,
    ),
    info(
        "dir_level",
        "hash level of directories created from now on (i_dir_level): 2^n buckets at level 0",
        0,
        MAX_DIR_LEVEL as u64,
    ),
    info(
        "ipu_policy",
        "bits for rewriting blocks in place (the kernel's F2FS_IPU_*): 1 FORCE, 2 SSR, \
         4 UTIL, 8 SSR_UTIL, 16 FSYNC (small writes between fsyncs), 32 ASYNC, 64 NOCACHE, \
         128 HONOR_OPU_WRITE (the last three change nothing in f2fuse); 0: out of place",
        0,
        (1 << ipu_bit::MAX) - 1,
    ),
    info(
        "min_ipu_util",
        "percent of user blocks in use above which the UTIL and SSR_UTIL policies apply",
        0,
        100,
    ),
    info(
        "min_fsync_blocks",
        "the FSYNC policy rewrites in place while a file has at most this many blocks \
         written since its last fsync",
        0,
        u32::MAX as u64,
    ),
    info(
        "extent_zeroout_len",
        "f2fuse's own (not the kernel's): a write into preallocated space writes zeros to \
         the preallocated blocks after it, up to the end of its aligned window of this many \
         blocks, so they get real blocks that later writes rewrite in place (0: off)",
        0,
        MAX_ZEROOUT_BLOCKS,
    ),
    info(
        "gc_pin_file_thresh",
        "times cleaning may find a pinned file in its way before the file is unpinned",
        0,
        u16::MAX as u64,
    ),
];

/// Largest `extent_zeroout_len`: 8 MiB.
pub const MAX_ZEROOUT_BLOCKS: u64 = 2048;
/// f2fuse's default `extent_zeroout_len` (chosen by measurement: docs/PERFORMANCE.md).
pub const DEFAULT_ZEROOUT_BLOCKS: u32 = 256;
/// The kernel's DEF_GC_FAILED_PINNED_FILES.
pub const DEFAULT_GC_PIN_FILE_THRESH: u16 = 2048;

/// Largest `dir_level`: hash level 0 (2^(n+1) blocks) must fit in a file.
pub const MAX_DIR_LEVEL: u8 = 28;

/// The kernel's defaults (fs/f2fs/gc.h, segment.h, f2fs.h).
pub const DEFAULT_MAX_VICTIM_SEARCH: u32 = 4096;
pub const DEFAULT_GC_URGENT_SLEEP_MS: u32 = 500;
pub const DEFAULT_GC_MIN_SLEEP_MS: u32 = 30_000;
pub const DEFAULT_GC_MAX_SLEEP_MS: u32 = 60_000;
pub const DEFAULT_GC_NO_GC_SLEEP_MS: u32 = 300_000;
pub const DEFAULT_CP_INTERVAL_SECS: u32 = 60;
/// Default prefree limit: this percentage of the main segments...
const DEFAULT_RECLAIM_PERCENT: u64 = 5;
/// ...but at most this many (8 GiB).
const MAX_DEFAULT_RECLAIM_SEGMENTS: u32 = 4096;

/// The current values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunables {
    pub max_victim_search: u32,
    pub gc_mode: GcMode,
    pub gc_urgent_sleep_ms: u32,
    pub gc_min_sleep_ms: u32,
    pub gc_max_sleep_ms: u32,
    pub gc_no_gc_sleep_ms: u32,
    pub cp_interval_secs: u32,
    pub reclaim_segments: u32,
    /// SSR starts at reserved + this many free sections (the kernel's
    /// need_SSR; default: the reserved sections again).
    pub min_ssr_sections: u32,
    pub dir_level: u8,
    pub serialized_dio_pages: u32,
    pub max_folio_order: u8,
    pub ipu: IpuPolicy,
    pub extent_zeroout_len: u32,
    pub gc_pin_file_thresh: u16,
}

/// The entry of `name`, or a clear error listing the known names.
pub fn lookup(name: &str) -> Result<&'static TunableInfo> {
    TUNABLES.iter().find(|t| t.name == name).ok_or_else(|| {
        let known: Vec<&str> = TUNABLES.iter().map(|t| t.name).collect();
        Error::new(
            ErrorKind::NotFound,
            format!("unknown tunable \"{name}\" (known: {})", known.join(", ")),
        )
    })
}

/// Parses a decimal value for `name` and checks its range.
pub fn parse_value(name: &str, text: &str) -> Result<u64> {
    let value = text.trim().parse::<u64>().map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("tunable {name}={text}: not a non-negative integer"),
        )
    })?;
    check(name, value)?;
    Ok(value)
}

/// Checks that `value` is in `name`'s range.
pub fn check(name: &str, value: u64) -> Result<()> {
    let t = lookup(name)?;
    if !(t.min..=t.max).contains(&value) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("tunable {name}={value}: out of range {}..={}", t.min, t.max),
        ));
    }
    Ok(())
}

/// Parses `name=value`.
pub fn parse_assignment(text: &str) -> Result<(String, u64)> {
    let (name, value) = text.split_once('=').ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("\"{text}\": expected name=value"),
        )
    })?;
    Ok((name.to_string(), parse_value(name, value)?))
}

impl Tunables {
    /// The kernel's defaults for a file system of `main_segments` segments,
    /// `reserved_sections` of them kept for cleaning.
    pub fn defaults(main_segments: u32, reserved_sections: u32) -> Tunables {
        Tunables {
            max_victim_search: DEFAULT_MAX_VICTIM_SEARCH,
            gc_mode: GcMode::Normal,
            gc_urgent_sleep_ms: DEFAULT_GC_URGENT_SLEEP_MS,
            gc_min_sleep_ms: DEFAULT_GC_MIN_SLEEP_MS,
            gc_max_sleep_ms: DEFAULT_GC_MAX_SLEEP_MS,
            gc_no_gc_sleep_ms: DEFAULT_GC_NO_GC_SLEEP_MS,
            cp_interval_secs: DEFAULT_CP_INTERVAL_SECS,
            reclaim_segments: (main_segments as u64 * DEFAULT_RECLAIM_PERCENT / 100)
                .min(MAX_DEFAULT_RECLAIM_SEGMENTS as u64) as u32,
            min_ssr_sections: reserved_sections,
            dir_level: 0,
            serialized_dio_pages: DEFAULT_SERIALIZED_DIO_PAGES,
            max_folio_order: MAX_FOLIO_ORDER,
            ipu: IpuPolicy::kernel_default(main_segments),
            extent_zeroout_len: DEFAULT_ZEROOUT_BLOCKS,
            gc_pin_file_thresh: DEFAULT_GC_PIN_FILE_THRESH,
        }
    }

    pub fn get(&self, name: &str) -> Result<u64> {
        lookup(name)?;
        Ok(match name {
            "max_victim_search" => self.max_victim_search as u64,
            "gc_idle" => match self.gc_mode {
                GcMode::IdleCostBenefit => 1,
                GcMode::IdleGreedy => 2,
                _ => 0,
            },
            "gc_urgent" => match self.gc_mode {
                GcMode::UrgentHigh => 1,
                GcMode::UrgentLow => 2,
                GcMode::UrgentMid => 3,
                _ => 0,
            },
            "gc_urgent_sleep_time" => self.gc_urgent_sleep_ms as u64,
            "gc_min_sleep_time" => self.gc_min_sleep_ms as u64,
            "gc_max_sleep_time" => self.gc_max_sleep_ms as u64,
            "gc_no_gc_sleep_time" => self.gc_no_gc_sleep_ms as u64,
            "cp_interval" => self.cp_interval_secs as u64,
            "reclaim_segments" => self.reclaim_segments as u64,
            "min_ssr_sections" => self.min_ssr_sections as u64,
            "dir_level" => self.dir_level as u64,
            "serialized_dio_pages" => self.serialized_dio_pages as u64,
            "max_folio_order" => self.max_folio_order as u64,
            "ipu_policy" => self.ipu.bits as u64,
            "min_ipu_util" => self.ipu.min_ipu_util as u64,
            "min_fsync_blocks" => self.ipu.min_fsync_blocks as u64,
            "extent_zeroout_len" => self.extent_zeroout_len as u64,
            "gc_pin_file_thresh" => self.gc_pin_file_thresh as u64,
            _ => unreachable!("every name in TUNABLES is handled"),
        })
    }

    /// Sets `name` to `value`; on an error nothing changes.
    pub fn set(&mut self, name: &str, value: u64) -> Result<()> {
        check(name, value)?;
        // In range, so the narrowing casts below are exact.
        match name {
            "max_victim_search" => self.max_victim_search = value as u32,
            "gc_idle" => {
                self.gc_mode = match value {
                    1 => GcMode::IdleCostBenefit,
                    2 => GcMode::IdleGreedy,
                    _ => GcMode::Normal,
                }
            }
            "gc_urgent" => {
                self.gc_mode = match value {
                    1 => GcMode::UrgentHigh,
                    2 => GcMode::UrgentLow,
                    3 => GcMode::UrgentMid,
                    _ => GcMode::Normal,
                }
            }
            "gc_urgent_sleep_time" => self.gc_urgent_sleep_ms = value as u32,
            "gc_min_sleep_time" => self.gc_min_sleep_ms = value as u32,
            "gc_max_sleep_time" => self.gc_max_sleep_ms = value as u32,
            "gc_no_gc_sleep_time" => self.gc_no_gc_sleep_ms = value as u32,
            "cp_interval" => self.cp_interval_secs = value as u32,
            "reclaim_segments" => self.reclaim_segments = value as u32,
            "min_ssr_sections" => self.min_ssr_sections = value as u32,
            "dir_level" => self.dir_level = value as u8,
            "serialized_dio_pages" => self.serialized_dio_pages = value as u32,
            "max_folio_order" => self.max_folio_order = value as u8,
            "ipu_policy" => self.ipu.bits = value as u8,
            "min_ipu_util" => self.ipu.min_ipu_util = value as u8,
            "min_fsync_blocks" => self.ipu.min_fsync_blocks = value as u32,
            "extent_zeroout_len" => self.extent_zeroout_len = value as u32,
            "gc_pin_file_thresh" => self.gc_pin_file_thresh = value as u16,
            _ => unreachable!("checked by lookup"),
        }
        Ok(())
    }

    /// Every tunable with its value, in listing order.
    pub fn list(&self) -> Vec<(&'static str, u64)> {
        TUNABLES
            .iter()
            .map(|t| (t.name, self.get(t.name).expect("known name")))
            .collect()
    }

    /// The victim policy (the kernel's `select_gc_type`).
    pub fn victim_policy(&self, foreground: bool) -> VictimPolicy {
        match self.gc_mode {
            GcMode::IdleCostBenefit | GcMode::UrgentLow | GcMode::UrgentMid => {
                VictimPolicy::CostBenefit
            }
            GcMode::IdleGreedy | GcMode::UrgentHigh => VictimPolicy::Greedy,
            GcMode::Normal if foreground => VictimPolicy::Greedy,
            GcMode::Normal => VictimPolicy::CostBenefit,
        }
    }

    /// Whether the background cleaner runs at the urgent pace, skipping the
    /// idleness and "enough invalid blocks" checks.
    pub fn gc_urgent_pace(&self) -> bool {
        matches!(self.gc_mode, GcMode::UrgentHigh | GcMode::UrgentMid)
    }

    /// Whether the background cleaner may run while the file system is busy.
    pub fn gc_ignores_busy(&self) -> bool {
        matches!(
            self.gc_mode,
            GcMode::UrgentHigh | GcMode::UrgentLow | GcMode::UrgentMid
        )
    }

    /// How the data path groups blocks.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used through `internals` only
    pub fn data_policy(&self) -> DataPolicy {
        DataPolicy::new(self.max_folio_order, self.serialized_dio_pages)
    }

    pub fn cp_interval(&self) -> Duration {
        Duration::from_secs(self.cp_interval_secs as u64)
    }

    /// The kernel's `increase_sleep_time`: one step longer, at most the maximum.
    pub fn longer_gc_sleep(&self, wait_ms: u32) -> u32 {
        let wait = if wait_ms == self.gc_no_gc_sleep_ms {
            self.gc_max_sleep_ms
        } else {
            wait_ms
        };
        wait.saturating_add(self.gc_min_sleep_ms)
            .min(self.gc_max_sleep_ms)
    }

    /// The kernel's `decrease_sleep_time`: one step shorter, at least the minimum.
    pub fn shorter_gc_sleep(&self, wait_ms: u32) -> u32 {
        let wait = if wait_ms == self.gc_no_gc_sleep_ms {
            self.gc_max_sleep_ms
        } else {
            wait_ms
        };
        if wait.saturating_sub(self.gc_min_sleep_ms) < self.gc_min_sleep_ms {
            self.gc_min_sleep_ms
        } else {
            wait - self.gc_min_sleep_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_kernels() {
        let t = Tunables::defaults(1000, 2);
        assert_eq!(t.get("max_victim_search").unwrap(), 4096);
        assert_eq!(t.get("gc_min_sleep_time").unwrap(), 30_000);
        assert_eq!(t.get("gc_max_sleep_time").unwrap(), 60_000);
        assert_eq!(t.get("gc_no_gc_sleep_time").unwrap(), 300_000);
        assert_eq!(t.get("gc_urgent_sleep_time").unwrap(), 500);
        assert_eq!(t.get("cp_interval").unwrap(), 60);
        assert_eq!(t.get("reclaim_segments").unwrap(), 50);
        assert_eq!(Tunables::defaults(1 << 20, 2).reclaim_segments, 4096);
        assert_eq!(t.get("serialized_dio_pages").unwrap(), 64);
        // FORCE | HONOR_OPU_WRITE up to 16 GiB of main area, FSYNC above.
        assert_eq!(t.get("ipu_policy").unwrap(), 0x81);
        assert_eq!(Tunables::defaults(8193, 2).get("ipu_policy").unwrap(), 16);
        assert_eq!(t.get("min_ipu_util").unwrap(), 70);
        assert_eq!(t.get("min_fsync_blocks").unwrap(), 8);
        assert_eq!(t.get("gc_pin_file_thresh").unwrap(), 2048);
        assert_eq!(t.list().len(), TUNABLES.len());
    }

    #[test]
    fn parsing_and_bounds() {
        assert_eq!(parse_value("gc_urgent", "3").unwrap(), 3);
        for (name, bad) in [
            ("gc_urgent", "4"),
            ("gc_idle", "3"),
            ("max_victim_search", "0"),
            ("gc_min_sleep_time", "-1"),
            ("cp_interval", "1e3"),
            ("dir_level", "29"),
            ("max_folio_order", "10"),
            ("reclaim_segments", "4294967296"),
        ] {
            let err = parse_value(name, bad).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::InvalidArgument,
                "{name}={bad}: {err}"
            );
        }
        for (name, bad) in [("ipu_policy", "256"), ("min_ipu_util", "101")] {
            let err = parse_value(name, bad).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::InvalidArgument,
                "{name}={bad}: {err}"
            );
        }
        assert_eq!(parse_value("ipu_policy", "255").unwrap(), 255);
        let err = parse_value("discard_granularity", "1").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.to_string().contains("max_victim_search"), "{err}");
        assert_eq!(
            parse_assignment("dir_level=2").unwrap(),
            ("dir_level".to_string(), 2)
        );
        assert!(parse_assignment("dir_level").is_err());
    }

    #[test]
    fn a_refused_value_changes_nothing() {
        let mut t = Tunables::defaults(100, 2);
        let before = t.clone();
        assert!(t.set("gc_urgent", 7).is_err());
        assert!(t.set("nonsense", 1).is_err());
        assert_eq!(t, before);
    }

    #[test]
    fn gc_idle_and_gc_urgent_share_one_mode() {
        let mut t = Tunables::defaults(100, 2);
        assert_eq!(t.victim_policy(true), VictimPolicy::Greedy);
        assert_eq!(t.victim_policy(false), VictimPolicy::CostBenefit);
        t.set("gc_idle", 1).unwrap();
        assert_eq!(t.victim_policy(true), VictimPolicy::CostBenefit);
        t.set("gc_urgent", 1).unwrap();
        assert_eq!(t.get("gc_idle").unwrap(), 0);
        assert_eq!(t.victim_policy(false), VictimPolicy::Greedy);
        assert!(t.gc_urgent_pace() && t.gc_ignores_busy());
        t.set("gc_urgent", 2).unwrap();
        assert!(!t.gc_urgent_pace() && t.gc_ignores_busy());
        t.set("gc_idle", 2).unwrap();
        assert_eq!(t.get("gc_urgent").unwrap(), 0);
        assert_eq!(t.victim_policy(false), VictimPolicy::Greedy);
    }

    #[test]
    fn sleep_steps_follow_the_kernel() {
        let t = Tunables::defaults(100, 2);
        assert_eq!(t.longer_gc_sleep(30_000), 60_000);
        assert_eq!(t.longer_gc_sleep(60_000), 60_000);
        assert_eq!(t.shorter_gc_sleep(60_000), 30_000);
        assert_eq!(t.shorter_gc_sleep(30_000), 30_000);
        // After "no victim" (no_gc_sleep_time) a step starts from the maximum.
        assert_eq!(t.longer_gc_sleep(300_000), 60_000);
        assert_eq!(t.shorter_gc_sleep(300_000), 30_000);
    }
}
