//! Filesystem geometry, computed exactly as `mkfs.f2fs` 1.15 computes it.
//!
//! Why this exists: images we create must look like the ones `mkfs.f2fs`
//! makes, and tools that check or rebuild an image need to know what mkfs
//! would have chosen for a device of a given size: where each metadata area
//! starts, how many segments it spans, how many segments are reserved for
//! garbage collection and over-provisioning, and where the six logs start.
//! None of this is stored in one place on disk, and several numbers depend on
//! quirks of mkfs (unsigned truncation, and a floating-point search whose
//! rounding drift decides the over-provision ratio), so this module follows
//! `f2fs_prepare_super_block()` and `f2fs_write_check_point_pack()` of
//! f2fs-tools 1.15 step by step instead of using "nice" formulas.
//!
//! Scope is what mkfs does by default: one regular device starting at sector
//! 0, 512-byte sectors, 4 KiB blocks, no `-i` (large NAT bitmap), no zoned
//! mode (`-m`), no heap allocation (`-a 1`), no `ro` feature. Only `-s`, `-z`
//! and `-o` vary.
//!
//! One quirk the format notes (§1.2) do not mention: mkfs bases the reserved,
//! over-provision, free and user counts on the *usable* segments (every
//! segment after the metadata zones up to the end of the device), not on
//! `segment_count_main`. The two differ when the device does not end on a
//! zone boundary (`-s`/`-z` above 1); see [`Geometry::usable_segment_count`].
//!
//! Pure computation: no I/O, no allocation beyond the error messages.

use std::fmt;

const SECTOR_BYTES: u64 = 512;
const BLOCK_BYTES: u64 = 4096;
const BLOCKS_PER_SEGMENT: u32 = 512;
const SEGMENT_BYTES: u64 = BLOCK_BYTES * BLOCKS_PER_SEGMENT as u64;

/// The two superblock blocks: segment 0 starts at the first zone boundary
/// after them.
const SUPERBLOCK_AREA_BYTES: u64 = 2 * BLOCK_BYTES;

/// mkfs's `F2FS_MIN_SEGMENTS`: SB, 2 CP, SIT, NAT, SSA and main, roughly.
const MIN_SEGMENTS: u32 = 9;
/// Block addresses are 32 bits, so at most 16 TiB (`F2FS_MAX_SEGMENT`).
const MAX_SEGMENTS: u32 = 8 * 1024 * 1024;
const MAX_DEVICE_BYTES: u64 = MAX_SEGMENTS as u64 * SEGMENT_BYTES;
/// mkfs computes the zone size in bytes as a `u32`; larger zones wrap.
const MAX_SEGS_PER_ZONE: u32 = (u32::MAX as u64 / SEGMENT_BYTES) as u32;

const CHECKPOINT_SEGMENTS: u32 = 2;
const SIT_ENTRIES_PER_BLOCK: u32 = 55;
const NAT_ENTRIES_PER_BLOCK: u32 = 455;

/// The version bitmaps live between the 192-byte checkpoint header and the
/// CRC at offset 4092 unless the SIT bitmap is moved to payload blocks.
const CP_BITMAP_OFFSET: u32 = 192;
const CP_CHECKSUM_OFFSET: u32 = 4092;
const MAX_BITMAP_BYTES_IN_CP: u32 = CP_CHECKSUM_OFFSET - CP_BITMAP_OFFSET;
/// mkfs keeps at least this much room for the NAT bitmap in the CP block.
const MIN_NAT_BITMAP_BYTES: u32 = 64;
const MAX_SIT_BITMAP_BYTES_IN_CP: u32 = MAX_BITMAP_BYTES_IN_CP - MIN_NAT_BITMAP_BYTES;
/// SIT bitmap of the largest possible filesystem (mkfs's `MAX_SIT_BITMAP_SIZE`).
const MAX_SIT_BITMAP_BYTES: u32 = MAX_SEGMENTS
    .div_ceil(SIT_ENTRIES_PER_BLOCK)
    .div_ceil(BLOCKS_PER_SEGMENT)
    * BLOCKS_PER_SEGMENT
    / 8;

/// Six logs are open at once; each needs its own zone.
const CURRENT_SEGMENT_COUNT: u32 = 6;
const MIN_MAIN_ZONES: u32 = CURRENT_SEGMENT_COUNT + 1;
/// Smallest metadata: 2 CP + 2 SIT + 2 NAT + 1 SSA segments.
const MIN_META_SEGMENTS: u32 = 7;

// CURSEG type indices of `Geometry::cur_seg`.
const HOT_DATA: usize = 0;
const WARM_DATA: usize = 1;
const COLD_DATA: usize = 2;
const HOT_NODE: usize = 3;
const WARM_NODE: usize = 4;
const COLD_NODE: usize = 5;

/// The mkfs options that influence the layout.
#[derive(Debug, Clone, PartialEq)]
pub struct GeometryOptions {
    /// Device (or image file) size in bytes; mkfs uses whole 512-byte sectors.
    pub device_bytes: u64,
    /// Segments per section (mkfs `-s`, default 1).
    pub segs_per_sec: u32,
    /// Sections per zone (mkfs `-z`, default 1).
    pub secs_per_zone: u32,
    /// Over-provision ratio in percent (mkfs `-o`). `None` lets mkfs pick the
    /// ratio that leaves the most user space; `Some(0.0)` does the same, as
    /// `-o 0` does in mkfs.
    pub overprovision_ratio: Option<f64>,
}

impl Default for GeometryOptions {
    fn default() -> Self {
        Self {
            device_bytes: 0,
            segs_per_sec: 1,
            secs_per_zone: 1,
            overprovision_ratio: None,
        }
    }
}

/// Everything mkfs derives from the device size and options: the superblock
/// layout fields plus the checkpoint counters of a fresh filesystem.
///
/// Block addresses are absolute (device block numbers); segment numbers in
/// `cur_seg` are relative to the main area.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// Device size in 4 KiB blocks (the whole device, not just the FS).
    pub block_count: u64,
    /// Segments per section (the GC unit).
    pub segs_per_sec: u32,
    /// Sections per zone (the unit the logs are spread over).
    pub secs_per_zone: u32,
    /// First block of segment 0 (the CP area), at the first zone boundary
    /// after the two superblock blocks.
    pub segment0_blkaddr: u32,
    /// Segments from segment 0 to the last whole zone, metadata included.
    pub segment_count: u32,
    /// Two checkpoint packs, one segment each.
    pub segment_count_ckpt: u32,
    /// Both SIT copies.
    pub segment_count_sit: u32,
    /// Both NAT copies.
    pub segment_count_nat: u32,
    /// SSA segments, including the padding that zone-aligns the main area.
    pub segment_count_ssa: u32,
    /// Segments of the main area (whole sections only).
    pub segment_count_main: u32,
    /// Sections of the main area.
    pub section_count: u32,
    /// First block of CP pack #1 (= `segment0_blkaddr`).
    pub cp_blkaddr: u32,
    /// First block of the SIT area.
    pub sit_blkaddr: u32,
    /// First block of the NAT area.
    pub nat_blkaddr: u32,
    /// First block of the SSA area.
    pub ssa_blkaddr: u32,
    /// First block of the main area, zone-aligned relative to segment 0.
    pub main_blkaddr: u32,
    /// Ratio (percent) actually used: the `-o` value, or the result of
    /// mkfs's search with its floating-point drift (e.g. 6.359999…).
    pub overprovision_ratio: f64,
    /// Segments reserved for garbage collection (checkpoint field).
    pub rsvd_segment_count: u32,
    /// Over-provisioned segments, reserved ones included (checkpoint field).
    pub overprov_segment_count: u32,
    /// Free segments of a fresh filesystem: usable segments minus the six
    /// current segments.
    pub free_segment_count: u32,
    /// Blocks users may fill: (usable − over-provisioned segments) · 512.
    pub user_block_count: u64,
    /// Extra checkpoint blocks holding the SIT version bitmap (large FS only).
    pub cp_payload: u32,
    /// SIT version bitmap size: one bit per SIT block of one copy.
    pub sit_ver_bitmap_bytesize: u32,
    /// NAT version bitmap size: one bit per NAT block of one copy.
    pub nat_ver_bitmap_bytesize: u32,
    /// Number of node ids: 455 entries per NAT block of one copy.
    pub max_nid: u32,
    /// Initial current segment of each log, main-relative segno, indexed by CURSEG type:
    /// [HOT_DATA, WARM_DATA, COLD_DATA, HOT_NODE, WARM_NODE, COLD_NODE]
    pub cur_seg: [u32; 6],
    /// Blocks of NAT bits at the end of each checkpoint pack segment (§3.9).
    pub nat_bits_blocks: u32,
    /// Segments mkfs counts as usable for user data: all segments after the
    /// metadata zones up to the end of the device, including a tail that
    /// does not fill a whole zone. Equals `segment_count_main` unless the
    /// device size is not a multiple of the zone size; mkfs then uses this
    /// larger number for the reserved, over-provision, free and user counts.
    pub usable_segment_count: u32,
}

/// Why mkfs would refuse (or, in its own code, crash on) a layout.
#[derive(Debug, Clone, PartialEq)]
pub enum GeometryError {
    /// The device cannot hold the metadata plus one zone per log.
    /// `min_segments` is a lower bound on the 2 MiB segments needed after
    /// the zone-aligned start; a device that large may still fail with
    /// [`GeometryError::NoOverprovision`] or [`GeometryError::TooManyReserved`].
    TooSmall {
        /// The size that was asked for.
        device_bytes: u64,
        /// Lower bound on the segments needed after the aligned start.
        min_segments: u32,
    },
    /// An option mkfs cannot work with.
    InvalidOption(String),
    /// No candidate over-provision ratio leaves any user space.
    NoOverprovision,
    /// The segments reserved for garbage collection do not fit in the main
    /// area next to the six current segments.
    TooManyReserved {
        /// Segments mkfs would reserve for garbage collection.
        reserved_segments: u64,
        /// Segments of the main area.
        main_segments: u32,
    },
    /// The device is larger than 16 TiB, the limit of 32-bit block addresses.
    TooLarge {
        /// The size that was asked for.
        device_bytes: u64,
        /// The largest size mkfs accepts.
        max_bytes: u64,
    },
    /// The over-provisioned segments (an `-o` ratio of 100 % or more) leave
    /// no segment for user data.
    OverprovisionTooLarge {
        /// Over-provisioned segments, reserved ones included.
        overprov_segments: u64,
        /// Segments usable for user data before over-provisioning.
        usable_segments: u32,
    },
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall {
                device_bytes,
                min_segments,
            } => write!(
                f,
                "a device of {device_bytes} bytes is too small for F2FS, which needs at least \
                 {min_segments} segments of 2 MiB after the zone-aligned start"
            ),
            Self::InvalidOption(message) => write!(f, "invalid mkfs option: {message}"),
            Self::NoOverprovision => write!(
                f,
                "no over-provision ratio leaves any user space, so the device is too small for F2FS"
            ),
            Self::TooManyReserved {
                reserved_segments,
                main_segments,
            } => write!(
                f,
                "garbage collection needs {reserved_segments} reserved segments but the main area \
                 has only {main_segments} segments, six of which are current segments"
            ),
            Self::TooLarge {
                device_bytes,
                max_bytes,
            } => write!(
                f,
                "a device of {device_bytes} bytes exceeds the F2FS maximum of {max_bytes} bytes \
                 (16 TiB)"
            ),
            Self::OverprovisionTooLarge {
                overprov_segments,
                usable_segments,
            } => write!(
                f,
                "{overprov_segments} over-provisioned segments leave nothing of the \
                 {usable_segments} usable segments for user data"
            ),
        }
    }
}

impl std::error::Error for GeometryError {}

/// Computes the layout `mkfs.f2fs` 1.15 would write for `opts`, or the
/// reason it would fail.
pub fn compute(opts: &GeometryOptions) -> Result<Geometry, GeometryError> {
    let segs_per_zone = validate_options(opts)?;
    let requested_ratio = opts.overprovision_ratio.filter(|&ratio| ratio != 0.0);

    // mkfs sees a whole number of 512-byte sectors.
    let device_bytes = opts.device_bytes / SECTOR_BYTES * SECTOR_BYTES;
    if device_bytes > MAX_DEVICE_BYTES {
        return Err(GeometryError::TooLarge {
            device_bytes: opts.device_bytes,
            max_bytes: MAX_DEVICE_BYTES,
        });
    }
    let too_small = |min_segments: u32| GeometryError::TooSmall {
        device_bytes: opts.device_bytes,
        min_segments,
    };
    let smallest_meta_zones = MIN_META_SEGMENTS.div_ceil(segs_per_zone);
    let general_minimum = min_segments_needed(smallest_meta_zones, segs_per_zone);

    // Segment 0 starts at the first zone boundary after the superblocks.
    let zone_bytes = u64::from(segs_per_zone) * SEGMENT_BYTES;
    let zone_align_start = SUPERBLOCK_AREA_BYTES.div_ceil(zone_bytes) * zone_bytes;
    if device_bytes < zone_align_start {
        return Err(too_small(general_minimum));
    }
    // At most MAX_SEGMENTS, so it fits.
    let total_segments = ((device_bytes - zone_align_start) / SEGMENT_BYTES) as u32;
    if total_segments < MIN_SEGMENTS {
        return Err(too_small(general_minimum));
    }
    let segment_count = total_segments / segs_per_zone * segs_per_zone;
    let segment0_blkaddr = (zone_align_start / BLOCK_BYTES) as u32;
    let block_count = device_bytes / BLOCK_BYTES;

    // SIT: one 74-byte entry per segment, two copies.
    let sit_segments_per_copy = segment_count
        .div_ceil(SIT_ENTRIES_PER_BLOCK)
        .div_ceil(BLOCKS_PER_SEGMENT);
    let segment_count_sit = 2 * sit_segments_per_copy;
    let sit_blkaddr = segment0_blkaddr + CHECKPOINT_SEGMENTS * BLOCKS_PER_SEGMENT;
    let nat_blkaddr = sit_blkaddr + segment_count_sit * BLOCKS_PER_SEGMENT;

    // mkfs's unsigned arithmetic wraps from here on when the zone-rounded
    // segment count cannot even hold the metadata; treat that as too small.
    let segments_after_sit = segment_count
        .checked_sub(CHECKPOINT_SEGMENTS + segment_count_sit)
        .ok_or_else(|| too_small(general_minimum))?;

    // NAT: enough entries for one node per remaining block, but capped so
    // that the NAT version bitmap fits in the checkpoint block.
    let nat_blocks_wanted = (u64::from(segments_after_sit) * u64::from(BLOCKS_PER_SEGMENT))
        .div_ceil(u64::from(NAT_ENTRIES_PER_BLOCK));
    let nat_segments_wanted = nat_blocks_wanted.div_ceil(u64::from(BLOCKS_PER_SEGMENT));
    let sit_bitmap_bytes = sit_segments_per_copy * BLOCKS_PER_SEGMENT / 8;
    let sit_bitmap_bytes_capped = sit_bitmap_bytes.min(MAX_SIT_BITMAP_BYTES);
    // A SIT bitmap too big for the CP block moves to payload blocks, which
    // leaves the whole CP bitmap area to the NAT bitmap.
    let (max_nat_bitmap_bytes, cp_payload) = if sit_bitmap_bytes_capped > MAX_SIT_BITMAP_BYTES_IN_CP
    {
        (
            MAX_BITMAP_BYTES_IN_CP,
            sit_bitmap_bytes_capped.div_ceil(BLOCK_BYTES as u32),
        )
    } else {
        (MAX_BITMAP_BYTES_IN_CP - sit_bitmap_bytes_capped, 0)
    };
    let max_nat_segments = max_nat_bitmap_bytes * 8 / BLOCKS_PER_SEGMENT;
    // The cap is at most 60, so the result fits in u32.
    let nat_segments_per_copy = nat_segments_wanted.min(u64::from(max_nat_segments)) as u32;
    let segment_count_nat = 2 * nat_segments_per_copy;
    let ssa_blkaddr = nat_blkaddr + segment_count_nat * BLOCKS_PER_SEGMENT;

    // SSA: one summary block per remaining segment (plus one, as mkfs does),
    // then padded so that the main area starts on a zone boundary.
    let segments_after_nat = segments_after_sit
        .checked_sub(segment_count_nat)
        .ok_or_else(|| too_small(general_minimum))?;
    let ssa_segments_unpadded = (segments_after_nat + 1).div_ceil(BLOCKS_PER_SEGMENT);
    let meta_segments_unpadded =
        CHECKPOINT_SEGMENTS + segment_count_sit + segment_count_nat + ssa_segments_unpadded;
    let total_meta_zones = meta_segments_unpadded.div_ceil(segs_per_zone);
    let meta_segments = total_meta_zones * segs_per_zone;
    let segment_count_ssa = ssa_segments_unpadded + (meta_segments - meta_segments_unpadded);
    let main_blkaddr = segment0_blkaddr + meta_segments * BLOCKS_PER_SEGMENT;

    let zones_minimum = min_segments_needed(total_meta_zones, segs_per_zone);
    let total_zones = (segment_count / segs_per_zone)
        .checked_sub(total_meta_zones)
        .ok_or_else(|| too_small(zones_minimum))?;
    if total_zones == 0 {
        // mkfs 1.15 divides by zero here.
        return Err(too_small(zones_minimum));
    }
    let section_count = total_zones * opts.secs_per_zone;
    let segment_count_main = section_count * opts.segs_per_sec;
    // total_zones >= 1, so the metadata zones lie within total_segments.
    let usable_segment_count = total_segments - meta_segments;

    let overprovision_ratio = match requested_ratio {
        Some(ratio) => ratio,
        None => best_overprovision_ratio(usable_segment_count, segment_count_main, section_count),
    };
    if overprovision_ratio == 0.0 {
        return Err(GeometryError::NoOverprovision);
    }
    let segs_per_section_rounded_up = usable_segment_count.div_ceil(section_count);
    let reserved = reserved_segments(overprovision_ratio, segs_per_section_rounded_up).trunc();
    // mkfs truncates into a u32; anything that large cannot fit anyway.
    let reserved_fits_u32 = reserved < f64::from(u32::MAX);
    let reserved_too_many = !reserved_fits_u32
        || segment_count_main
            .checked_sub(CURRENT_SEGMENT_COUNT)
            .is_some_and(|non_current| f64::from(non_current) < reserved);
    if reserved_too_many {
        return Err(GeometryError::TooManyReserved {
            reserved_segments: reserved as u64,
            main_segments: segment_count_main,
        });
    }
    let rsvd_segment_count = reserved as u32;
    if total_zones < MIN_MAIN_ZONES {
        return Err(too_small(zones_minimum));
    }

    // The over-provisioned share of the non-reserved segments, truncated.
    let overprovisioned =
        (f64::from(usable_segment_count - rsvd_segment_count) * overprovision_ratio / 100.0)
            .trunc();
    let overprov_total = overprovisioned + f64::from(rsvd_segment_count);
    if overprov_total >= f64::from(usable_segment_count) {
        return Err(GeometryError::OverprovisionTooLarge {
            overprov_segments: overprov_total as u64,
            usable_segments: usable_segment_count,
        });
    }
    let overprov_segment_count = overprov_total as u32;
    let free_segment_count = usable_segment_count - CURRENT_SEGMENT_COUNT;
    let user_block_count =
        u64::from(usable_segment_count - overprov_segment_count) * u64::from(BLOCKS_PER_SEGMENT);

    let nat_bitmap_bytes = nat_segments_per_copy * BLOCKS_PER_SEGMENT / 8;
    // Full and empty NAT bits (one bit per NAT block each) after an 8-byte header.
    let nat_bits_blocks = (2 * nat_bitmap_bytes + 8).div_ceil(BLOCK_BYTES as u32);

    Ok(Geometry {
        block_count,
        segs_per_sec: opts.segs_per_sec,
        secs_per_zone: opts.secs_per_zone,
        segment0_blkaddr,
        segment_count,
        segment_count_ckpt: CHECKPOINT_SEGMENTS,
        segment_count_sit,
        segment_count_nat,
        segment_count_ssa,
        segment_count_main,
        section_count,
        cp_blkaddr: segment0_blkaddr,
        sit_blkaddr,
        nat_blkaddr,
        ssa_blkaddr,
        main_blkaddr,
        overprovision_ratio,
        rsvd_segment_count,
        overprov_segment_count,
        free_segment_count,
        user_block_count,
        cp_payload,
        sit_ver_bitmap_bytesize: sit_bitmap_bytes,
        nat_ver_bitmap_bytesize: nat_bitmap_bytes,
        max_nid: NAT_ENTRIES_PER_BLOCK * nat_segments_per_copy * BLOCKS_PER_SEGMENT,
        cur_seg: initial_current_segments(total_zones, segs_per_zone),
        nat_bits_blocks,
        usable_segment_count,
    })
}

/// Checks the options and returns segments per zone.
fn validate_options(opts: &GeometryOptions) -> Result<u32, GeometryError> {
    if opts.segs_per_sec == 0 {
        return Err(GeometryError::InvalidOption(
            "segs_per_sec (-s) must be at least 1".to_owned(),
        ));
    }
    if opts.secs_per_zone == 0 {
        return Err(GeometryError::InvalidOption(
            "secs_per_zone (-z) must be at least 1".to_owned(),
        ));
    }
    let segs_per_zone = opts
        .segs_per_sec
        .checked_mul(opts.secs_per_zone)
        .filter(|&segs| segs <= MAX_SEGS_PER_ZONE)
        .ok_or_else(|| {
            GeometryError::InvalidOption(format!(
                "segs_per_sec (-s) times secs_per_zone (-z) must be at most {MAX_SEGS_PER_ZONE}, \
                 because mkfs keeps the zone size in bytes in 32 bits"
            ))
        })?;
    if let Some(ratio) = opts.overprovision_ratio {
        if !ratio.is_finite() || ratio < 0.0 {
            return Err(GeometryError::InvalidOption(format!(
                "overprovision_ratio (-o) must be a finite, non-negative percentage, not {ratio}"
            )));
        }
    }
    Ok(segs_per_zone)
}

/// A lower bound on the segments after segment 0: the metadata zones plus one
/// zone for each log and one more (mkfs wants more than six main zones).
fn min_segments_needed(meta_zones: u32, segs_per_zone: u32) -> u32 {
    ((meta_zones + MIN_MAIN_ZONES) * segs_per_zone).max(MIN_SEGMENTS)
}

/// mkfs's reserved-segment formula before truncation: enough free sections
/// for GC to make progress at the given over-provision ratio.
fn reserved_segments(ratio: f64, segs_per_section_rounded_up: u32) -> f64 {
    (2.0 * (100.0 / ratio + 1.0) + f64::from(CURRENT_SEGMENT_COUNT))
        * f64::from(segs_per_section_rounded_up)
}

/// mkfs's `get_best_overprovision()`: tries ratios in a fixed grid and keeps
/// the one leaving the most user space (first one on ties, 0 if none leaves
/// any). The grid is walked by repeated floating-point addition, and the
/// resulting drift (0.01 added 636 times is not 6.36) is part of the result.
fn best_overprovision_ratio(usable_segments: u32, main_segments: u32, section_count: u32) -> f64 {
    let (first, last, step) = if main_segments < 256 {
        (10.0, 95.0, 5.0)
    } else {
        (0.01, 10.0, 0.01)
    };
    let usable = f64::from(usable_segments);
    let segs_per_section_rounded_up = usable_segments.div_ceil(section_count);
    let mut best_ratio = 0.0;
    let mut best_space = 0.0;
    let mut candidate: f64 = first;
    while candidate <= last {
        let reserved = reserved_segments(candidate, segs_per_section_rounded_up);
        let overprovisioned = (usable - reserved) * candidate / 100.0;
        let space = usable - reserved - overprovisioned;
        if best_space < space {
            best_space = space;
            best_ratio = candidate;
        }
        candidate += step;
    }
    best_ratio
}

/// Where mkfs opens the six logs: node logs in the first zones, hot data
/// right after them, cold data a quarter and warm data half way into the
/// main area, so that the logs start far apart.
fn initial_current_segments(main_zones: u32, segs_per_zone: u32) -> [u32; 6] {
    // Start of zone `zone_number` counted from 1 (mkfs's `last_zone`).
    let zone_start = |zone_number: u32| (zone_number - 1) * segs_per_zone;
    let mut segs = [0; 6];
    segs[HOT_NODE] = 0;
    segs[WARM_NODE] = segs[HOT_NODE] + segs_per_zone;
    segs[COLD_NODE] = segs[WARM_NODE] + segs_per_zone;
    segs[HOT_DATA] = segs[COLD_NODE] + segs_per_zone;
    // main_zones > 6 here, so both zone numbers are at least 1.
    segs[COLD_DATA] = zone_start(main_zones >> 2).max(segs[HOT_DATA] + segs_per_zone);
    segs[WARM_DATA] = zone_start(main_zones >> 1).max(segs[COLD_DATA] + segs_per_zone);

    // mkfs falls back to consecutive zones in CURSEG order if two logs
    // collide (cannot happen with the placement above, kept for fidelity).
    let collide = (0..segs.len()).any(|i| segs[i + 1..].contains(&segs[i]));
    if collide {
        for (index, seg) in (0u32..).zip(segs.iter_mut()) {
            *seg = index * segs_per_zone;
        }
    }
    segs
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    fn options(device_bytes: u64, segs_per_sec: u32, secs_per_zone: u32) -> GeometryOptions {
        GeometryOptions {
            device_bytes,
            segs_per_sec,
            secs_per_zone,
            overprovision_ratio: None,
        }
    }

    fn geometry(device_bytes: u64, segs_per_sec: u32, secs_per_zone: u32) -> Geometry {
        compute(&options(device_bytes, segs_per_sec, secs_per_zone)).unwrap_or_else(|err| {
            panic!("{device_bytes} bytes -s {segs_per_sec} -z {secs_per_zone}: {err}")
        })
    }

    /// One row of the format notes' §1.2 table (values written by real
    /// `mkfs.f2fs -t 0`).
    struct Row {
        device_bytes: u64,
        segment0: u32,
        segment_count: u32,
        sit_nat_ssa: [u32; 3],
        main: u32,
        sit_nat_ssa_main_blkaddr: [u32; 4],
        ovp_percent: &'static str,
        rsvd: u32,
        ovp: u32,
        free: u32,
        user_block_count: u64,
        cp_payload: u32,
        cur_data: [u32; 3],
    }

    #[rustfmt::skip]
    const DOC_TABLE: &[Row] = &[
        Row { device_bytes: 64 * MIB, segment0: 512, segment_count: 31, sit_nat_ssa: [2, 2, 1], main: 24, sit_nat_ssa_main_blkaddr: [1536, 2560, 3584, 4096], ovp_percent: "35.00", rsvd: 13, ovp: 16, free: 18, user_block_count: 4096, cp_payload: 0, cur_data: [3, 11, 5] },
        Row { device_bytes: 128 * MIB, segment0: 512, segment_count: 63, sit_nat_ssa: [2, 2, 1], main: 56, sit_nat_ssa_main_blkaddr: [1536, 2560, 3584, 4096], ovp_percent: "20.00", rsvd: 18, ovp: 25, free: 50, user_block_count: 15872, cp_payload: 0, cur_data: [3, 27, 13] },
        Row { device_bytes: 256 * MIB, segment0: 512, segment_count: 127, sit_nat_ssa: [2, 2, 1], main: 120, sit_nat_ssa_main_blkaddr: [1536, 2560, 3584, 4096], ovp_percent: "15.00", rsvd: 21, ovp: 35, free: 114, user_block_count: 43520, cp_payload: 0, cur_data: [3, 59, 29] },
        Row { device_bytes: 512 * MIB, segment0: 512, segment_count: 255, sit_nat_ssa: [2, 2, 1], main: 248, sit_nat_ssa_main_blkaddr: [1536, 2560, 3584, 4096], ovp_percent: "10.00", rsvd: 28, ovp: 50, free: 242, user_block_count: 101376, cp_payload: 0, cur_data: [3, 123, 61] },
        Row { device_bytes: GIB, segment0: 512, segment_count: 511, sit_nat_ssa: [2, 4, 1], main: 502, sit_nat_ssa_main_blkaddr: [1536, 2560, 4608, 5120], ovp_percent: "6.36", rsvd: 39, ovp: 68, free: 496, user_block_count: 222208, cp_payload: 0, cur_data: [3, 250, 124] },
        Row { device_bytes: 2 * GIB, segment0: 512, segment_count: 1023, sit_nat_ssa: [2, 6, 2], main: 1011, sit_nat_ssa_main_blkaddr: [1536, 2560, 5632, 6656], ovp_percent: "4.47", rsvd: 52, ovp: 94, free: 1005, user_block_count: 469504, cp_payload: 0, cur_data: [3, 504, 251] },
        Row { device_bytes: 4 * GIB, segment0: 512, segment_count: 2047, sit_nat_ssa: [2, 10, 4], main: 2029, sit_nat_ssa_main_blkaddr: [1536, 2560, 7680, 9728], ovp_percent: "3.15", rsvd: 71, ovp: 132, free: 2023, user_block_count: 971264, cp_payload: 0, cur_data: [3, 1013, 506] },
        Row { device_bytes: 8 * GIB, segment0: 512, segment_count: 4095, sit_nat_ssa: [2, 18, 8], main: 4065, sit_nat_ssa_main_blkaddr: [1536, 2560, 11776, 15872], ovp_percent: "2.22", rsvd: 98, ovp: 186, free: 4059, user_block_count: 1986048, cp_payload: 0, cur_data: [3, 2031, 1015] },
        Row { device_bytes: 16 * GIB, segment0: 512, segment_count: 8191, sit_nat_ssa: [2, 36, 16], main: 8135, sit_nat_ssa_main_blkaddr: [1536, 2560, 20992, 29184], ovp_percent: "1.57", rsvd: 135, ovp: 260, free: 8129, user_block_count: 4032000, cp_payload: 0, cur_data: [3, 4066, 2032] },
        Row { device_bytes: 64 * GIB, segment0: 512, segment_count: 32767, sit_nat_ssa: [4, 116, 64], main: 32581, sit_nat_ssa_main_blkaddr: [1536, 3584, 62976, 95744], ovp_percent: "0.78", rsvd: 264, ovp: 516, free: 32575, user_block_count: 16417280, cp_payload: 0, cur_data: [3, 16289, 8144] },
        Row { device_bytes: 256 * GIB, segment0: 512, segment_count: 131071, sit_nat_ssa: [10, 110, 256], main: 130693, sit_nat_ssa_main_blkaddr: [1536, 6656, 62976, 194048], ovp_percent: "0.39", rsvd: 520, ovp: 1027, free: 130687, user_block_count: 66388992, cp_payload: 0, cur_data: [3, 65345, 32672] },
        Row { device_bytes: TIB, segment0: 512, segment_count: 524287, sit_nat_ssa: [38, 82, 1024], main: 523141, sit_nat_ssa_main_blkaddr: [1536, 20992, 62976, 587264], ovp_percent: "0.20", rsvd: 1007, ovp: 2051, free: 523135, user_block_count: 266798080, cp_payload: 0, cur_data: [3, 261569, 130784] },
        Row { device_bytes: 4 * TIB, segment0: 512, segment_count: 2097151, sit_nat_ssa: [150, 120, 4096], main: 2092783, sit_nat_ssa_main_blkaddr: [1536, 78336, 139776, 2236928], ovp_percent: "0.10", rsvd: 2008, ovp: 4098, free: 2092777, user_block_count: 1069406720, cp_payload: 2, cur_data: [3, 1046390, 523194] },
    ];

    #[test]
    fn matches_format_notes_table() {
        for row in DOC_TABLE {
            let geo = geometry(row.device_bytes, 1, 1);
            let size = row.device_bytes;
            assert_eq!(geo.block_count, size / 4096, "{size}");
            assert_eq!((geo.segs_per_sec, geo.secs_per_zone), (1, 1), "{size}");
            assert_eq!(geo.segment0_blkaddr, row.segment0, "{size}");
            assert_eq!(geo.cp_blkaddr, row.segment0, "{size}");
            assert_eq!(geo.segment_count, row.segment_count, "{size}");
            assert_eq!(geo.segment_count_ckpt, 2, "{size}");
            assert_eq!(
                [
                    geo.segment_count_sit,
                    geo.segment_count_nat,
                    geo.segment_count_ssa
                ],
                row.sit_nat_ssa,
                "{size}"
            );
            assert_eq!(geo.segment_count_main, row.main, "{size}");
            assert_eq!(geo.section_count, row.main, "{size}");
            assert_eq!(geo.usable_segment_count, row.main, "{size}");
            assert_eq!(
                [
                    geo.sit_blkaddr,
                    geo.nat_blkaddr,
                    geo.ssa_blkaddr,
                    geo.main_blkaddr
                ],
                row.sit_nat_ssa_main_blkaddr,
                "{size}"
            );
            assert_eq!(
                format!("{:.2}", geo.overprovision_ratio),
                row.ovp_percent,
                "{size}"
            );
            assert_eq!(geo.rsvd_segment_count, row.rsvd, "{size}");
            assert_eq!(geo.overprov_segment_count, row.ovp, "{size}");
            assert_eq!(geo.free_segment_count, row.free, "{size}");
            assert_eq!(geo.user_block_count, row.user_block_count, "{size}");
            assert_eq!(geo.cp_payload, row.cp_payload, "{size}");
            assert_eq!(geo.cur_seg[..3], row.cur_data, "{size}: data logs");
            assert_eq!(geo.cur_seg[3..], [0, 1, 2], "{size}: node logs");
            assert_eq!(
                geo.sit_ver_bitmap_bytesize,
                row.sit_nat_ssa[0] / 2 * 64,
                "{size}"
            );
            assert_eq!(
                geo.nat_ver_bitmap_bytesize,
                row.sit_nat_ssa[1] / 2 * 64,
                "{size}"
            );
            assert_eq!(geo.max_nid, row.sit_nat_ssa[1] / 2 * 512 * 455, "{size}");
        }
    }

    #[test]
    fn overprovision_ratio_keeps_floating_point_drift() {
        // 0.01 added to itself 635 times is slightly below 6.36.
        let geo = geometry(GIB, 1, 1);
        let mut expected = 0.01_f64;
        for _ in 0..635 {
            expected += 0.01;
        }
        assert_eq!(geo.overprovision_ratio, expected);
        assert_ne!(geo.overprovision_ratio, 6.36);
    }

    #[test]
    fn nat_bits_blocks_and_max_nid() {
        // 512 MiB: one NAT segment per copy -> 64-byte maps -> one block (§14.6).
        let small = geometry(512 * MIB, 1, 1);
        assert_eq!(small.nat_bits_blocks, 1);
        assert_eq!(small.max_nid, 512 * 455);
        // 4 TiB: 60 NAT segments per copy -> 3840-byte maps -> two blocks.
        let large = geometry(4 * TIB, 1, 1);
        assert_eq!(large.nat_bits_blocks, 2);
        assert_eq!(large.max_nid, 60 * 512 * 455);
        assert_eq!(large.sit_ver_bitmap_bytesize, 75 * 64);
    }

    #[test]
    fn one_gib_two_segments_per_section() {
        let geo = geometry(GIB, 2, 1);
        assert_eq!(geo.segment0_blkaddr, 1024);
        assert_eq!(geo.segment_count, 510);
        assert_eq!(
            [
                geo.segment_count_sit,
                geo.segment_count_nat,
                geo.segment_count_ssa
            ],
            [2, 4, 2]
        );
        assert_eq!(
            [
                geo.sit_blkaddr,
                geo.nat_blkaddr,
                geo.ssa_blkaddr,
                geo.main_blkaddr
            ],
            [2048, 3072, 5120, 6144]
        );
        assert_eq!((geo.segment_count_main, geo.section_count), (500, 250));
        assert_eq!(format!("{:.3}", geo.overprovision_ratio), "9.090");
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (60, 99)
        );
        assert_eq!(
            (geo.free_segment_count, geo.user_block_count),
            (494, 205312)
        );
        assert_eq!(geo.cur_seg, [6, 248, 122, 0, 2, 4]);
    }

    #[test]
    fn one_gib_four_segments_per_section_two_sections_per_zone() {
        let geo = geometry(GIB, 4, 2);
        assert_eq!(geo.segment0_blkaddr, 4096);
        assert_eq!(geo.segment_count, 504);
        // The SSA is padded from 1 to 8 segments to zone-align the main area.
        assert_eq!(
            [
                geo.segment_count_sit,
                geo.segment_count_nat,
                geo.segment_count_ssa
            ],
            [2, 4, 8]
        );
        assert_eq!(
            [
                geo.sit_blkaddr,
                geo.nat_blkaddr,
                geo.ssa_blkaddr,
                geo.main_blkaddr
            ],
            [5120, 6144, 8192, 12288]
        );
        assert_eq!((geo.segment_count_main, geo.section_count), (488, 122));
        assert_eq!(format!("{:.3}", geo.overprovision_ratio), "10.000");
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (112, 149)
        );
        assert_eq!(
            (geo.free_segment_count, geo.user_block_count),
            (482, 173568)
        );
        assert_eq!(geo.cur_seg, [24, 232, 112, 0, 8, 16]);
    }

    #[test]
    fn unaligned_tail_counts_as_usable() {
        // 1026 MiB with -s 2: 511 segments after segment 0, only 510 in whole
        // zones. mkfs still counts the odd one for reserved/free/user space,
        // which also rounds segments-per-section up from 2 to 3.
        let geo = geometry(1026 * MIB, 2, 1);
        assert_eq!((geo.segment_count, geo.segment_count_main), (510, 500));
        assert_eq!(geo.usable_segment_count, 501);
        assert_eq!(format!("{:.3}", geo.overprovision_ratio), "10.000");
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (84, 125)
        );
        assert_eq!(
            (geo.free_segment_count, geo.user_block_count),
            (495, 192512)
        );

        let geo = geometry(1030 * MIB, 4, 2);
        assert_eq!(
            (geo.segment_count_main, geo.usable_segment_count),
            (488, 491)
        );
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (140, 175)
        );
        assert_eq!(
            (geo.free_segment_count, geo.user_block_count),
            (485, 161792)
        );
    }

    #[test]
    fn non_power_of_two_section_size_is_accepted() {
        let geo = geometry(GIB, 3, 1);
        assert_eq!((geo.segment0_blkaddr, geo.segment_count), (1536, 507));
        assert_eq!(geo.segment_count_ssa, 1);
        assert_eq!((geo.segment_count_main, geo.section_count), (498, 166));
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (112, 150)
        );
        assert_eq!(
            (geo.free_segment_count, geo.user_block_count),
            (494, 179200)
        );
        assert_eq!(geo.cur_seg, [9, 246, 120, 0, 3, 6]);
    }

    #[test]
    fn explicit_overprovision_ratio() {
        let geo = compute(&GeometryOptions {
            overprovision_ratio: Some(5.0),
            ..options(GIB, 1, 1)
        })
        .unwrap();
        assert_eq!(geo.overprovision_ratio, 5.0);
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (48, 70)
        );
        assert_eq!(geo.user_block_count, 221184);

        // -o 0 means "choose automatically" in mkfs.
        let auto = compute(&GeometryOptions {
            overprovision_ratio: Some(0.0),
            ..options(GIB, 1, 1)
        });
        assert_eq!(auto, Ok(geometry(GIB, 1, 1)));
    }

    #[test]
    fn smallest_default_image() {
        let geo = geometry(52 * MIB, 1, 1);
        assert_eq!((geo.segment_count, geo.segment_count_main), (25, 18));
        assert_eq!(format!("{:.3}", geo.overprovision_ratio), "45.000");
        assert_eq!(
            (geo.rsvd_segment_count, geo.overprov_segment_count),
            (12, 14)
        );
        assert_eq!((geo.free_segment_count, geo.user_block_count), (12, 2048));
        assert_eq!(geo.cur_seg, [3, 8, 4, 0, 1, 2]);

        // One segment less and the reserved segments no longer fit.
        assert_eq!(
            compute(&options(51 * MIB, 1, 1)),
            Err(GeometryError::TooManyReserved {
                reserved_segments: 12,
                main_segments: 17
            })
        );
    }

    #[test]
    fn largest_device() {
        let geo = geometry(16 * TIB, 1, 1);
        assert_eq!(geo.segment_count, MAX_SEGMENTS - 1);
        assert_eq!(geo.sit_ver_bitmap_bytesize, MAX_SIT_BITMAP_BYTES);
        assert_eq!(geo.cp_payload, 5);

        assert_eq!(
            compute(&options(16 * TIB + 512, 1, 1)),
            Err(GeometryError::TooLarge {
                device_bytes: 16 * TIB + 512,
                max_bytes: 16 * TIB
            })
        );
        // mkfs ignores a partial trailing sector.
        assert!(compute(&options(16 * TIB + 511, 1, 1)).is_ok());
    }

    #[test]
    fn too_small_devices() {
        for size in [0, 4096, 2 * MIB, 19 * MIB] {
            assert!(
                matches!(
                    compute(&options(size, 1, 1)),
                    Err(GeometryError::TooSmall { .. })
                ),
                "{size}"
            );
        }
        // 20 MiB: 9 segments, 2 main segments: every ratio reserves more than that.
        assert_eq!(
            compute(&options(20 * MIB, 1, 1)),
            Err(GeometryError::NoOverprovision)
        );
        // Zones so big that no main zone remains (mkfs 1.15 divides by zero)
        // or that the metadata does not fit (mkfs wraps around).
        for (size, segs_per_sec) in [(46 * MIB, 8), (200 * MIB, 64)] {
            assert!(
                matches!(
                    compute(&options(size, segs_per_sec, 1)),
                    Err(GeometryError::TooSmall { .. })
                ),
                "{size} -s {segs_per_sec}"
            );
        }
        // Six main zones of 8 segments: enough room for the reserved
        // segments, but mkfs wants more than six zones.
        assert_eq!(
            compute(&options(128 * MIB, 1, 8)),
            Err(GeometryError::TooSmall {
                device_bytes: 128 * MIB,
                min_segments: 64
            })
        );
    }

    #[test]
    fn invalid_options() {
        for (segs_per_sec, secs_per_zone) in [(0, 1), (1, 0), (2048, 1), (64, 32), (u32::MAX, 2)] {
            assert!(
                matches!(
                    compute(&options(GIB, segs_per_sec, secs_per_zone)),
                    Err(GeometryError::InvalidOption(_))
                ),
                "-s {segs_per_sec} -z {secs_per_zone}"
            );
        }
        for ratio in [-1.0, f64::NAN, f64::INFINITY] {
            let result = compute(&GeometryOptions {
                overprovision_ratio: Some(ratio),
                ..options(GIB, 1, 1)
            });
            assert!(
                matches!(result, Err(GeometryError::InvalidOption(_))),
                "{ratio}"
            );
        }
    }

    #[test]
    fn overprovision_of_everything_is_rejected() {
        let result = compute(&GeometryOptions {
            overprovision_ratio: Some(100.0),
            ..options(GIB, 1, 1)
        });
        assert!(matches!(
            result,
            Err(GeometryError::OverprovisionTooLarge { .. })
        ));
        // A ratio this small reserves more segments than exist.
        let result = compute(&GeometryOptions {
            overprovision_ratio: Some(0.001),
            ..options(GIB, 1, 1)
        });
        assert!(matches!(result, Err(GeometryError::TooManyReserved { .. })));
    }

    #[test]
    fn errors_display_one_sentence() {
        let errors = [
            GeometryError::TooSmall {
                device_bytes: 1,
                min_segments: 14,
            },
            GeometryError::InvalidOption("x".to_owned()),
            GeometryError::NoOverprovision,
            GeometryError::TooManyReserved {
                reserved_segments: 12,
                main_segments: 17,
            },
            GeometryError::TooLarge {
                device_bytes: 1,
                max_bytes: 2,
            },
            GeometryError::OverprovisionTooLarge {
                overprov_segments: 3,
                usable_segments: 2,
            },
        ];
        for error in errors {
            let text = error.to_string();
            assert!(!text.is_empty() && !text.contains('\n'), "{text}");
        }
    }
}
