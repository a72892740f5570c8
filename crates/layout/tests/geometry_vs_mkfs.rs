//! Checks `geometry::compute` against the installed `mkfs.f2fs` (f2fs-tools
//! 1.15): formats sparse image files of various sizes and compares every
//! layout field with the superblock and checkpoint that mkfs wrote.
//!
//! Skipped (with a message) when mkfs.f2fs is missing, unless `CI` is set.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

use f2fuse_layout::geometry::{compute, Geometry, GeometryOptions};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
const BLOCK_BYTES: u64 = 4096;
const SUPERBLOCK_OFFSET: u64 = 1024;
const F2FS_MAGIC: u32 = 0xF2F5_2010;
const CP_NAT_BITS_FLAG: u32 = 0x80;

struct Case {
    device_bytes: u64,
    segs_per_sec: u32,
    secs_per_zone: u32,
    /// Passed to mkfs as `-o` verbatim, and parsed for `compute`.
    overprovision: Option<&'static str>,
}

const fn case(device_bytes: u64, segs_per_sec: u32, secs_per_zone: u32) -> Case {
    Case {
        device_bytes,
        segs_per_sec,
        secs_per_zone,
        overprovision: None,
    }
}

/// Sizes mkfs accepts: every field must match.
const ACCEPTED: &[Case] = &[
    case(64 * MIB, 1, 1),
    case(100 * MIB, 1, 1),
    case(128 * MIB, 1, 1),
    case(256 * MIB, 1, 1),
    case(GIB, 1, 1),
    case(3 * GIB, 1, 1),
    case(8 * GIB, 1, 1),
    case(64 * GIB, 1, 1),
    case(TIB, 1, 1),
    case(GIB, 2, 1),
    case(GIB, 4, 2),
    // Smallest default image.
    case(52 * MIB, 1, 1),
    // Device not ending on a zone boundary: "usable" segments exceed main.
    case(1026 * MIB, 2, 1),
    case(1030 * MIB, 4, 2),
    // Sections need not be a power of two.
    case(GIB, 3, 1),
    Case {
        overprovision: Some("5"),
        ..case(GIB, 1, 1)
    },
];

/// Layouts mkfs refuses: `compute` must refuse them too.
const REFUSED: &[Case] = &[
    case(20 * MIB, 1, 1),
    case(51 * MIB, 1, 1),
    case(128 * MIB, 1, 8),
    case(200 * MIB, 64, 1),
    Case {
        overprovision: Some("100"),
        ..case(GIB, 1, 1)
    },
];

#[test]
fn geometry_matches_mkfs() {
    let Some(mkfs) = find_mkfs() else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "mkfs.f2fs not found on PATH: install f2fs-tools (e.g. apt-get install f2fs-tools)"
            );
        }
        eprintln!("skipping geometry_vs_mkfs: mkfs.f2fs not found on PATH");
        return;
    };

    let mut failures = Vec::new();
    for (index, case) in ACCEPTED.iter().enumerate() {
        let image = TempImage::create(index, case.device_bytes);
        let label = describe(case);
        let output = run_mkfs(&mkfs, case, image.path());
        if !output.status.success() {
            failures.push(format!("{label}: mkfs failed: {}", output.text));
            continue;
        }
        let geometry = match compute(&options(case)) {
            Ok(geometry) => geometry,
            Err(err) => {
                failures.push(format!("{label}: mkfs succeeded but compute failed: {err}"));
                continue;
            }
        };
        let on_disk = OnDisk::read(image.path());
        failures.extend(
            compare(&geometry, &on_disk, &output.text)
                .into_iter()
                .map(|mismatch| format!("{label}: {mismatch}")),
        );
    }
    for (index, case) in REFUSED.iter().enumerate() {
        let image = TempImage::create(ACCEPTED.len() + index, case.device_bytes);
        let label = describe(case);
        let output = run_mkfs(&mkfs, case, image.path());
        if output.status.success() {
            failures.push(format!("{label}: expected mkfs to fail, but it succeeded"));
        }
        if let Ok(geometry) = compute(&options(case)) {
            failures.push(format!("{label}: expected an error, got {geometry:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "mismatches with mkfs.f2fs:\n{}",
        failures.join("\n")
    );
}

fn options(case: &Case) -> GeometryOptions {
    GeometryOptions {
        device_bytes: case.device_bytes,
        segs_per_sec: case.segs_per_sec,
        secs_per_zone: case.secs_per_zone,
        overprovision_ratio: case.overprovision.map(|ratio| ratio.parse().unwrap()),
    }
}

fn describe(case: &Case) -> String {
    let mut label = format!(
        "{} bytes -s {} -z {}",
        case.device_bytes, case.segs_per_sec, case.secs_per_zone
    );
    if let Some(ratio) = case.overprovision {
        label.push_str(&format!(" -o {ratio}"));
    }
    label
}

/// Every field of `geometry` against the image; returns the mismatches.
fn compare(geometry: &Geometry, disk: &OnDisk, mkfs_output: &str) -> Vec<String> {
    let sb = |offset| u64::from(le_u32(&disk.superblock, offset));
    let cp = |offset| u64::from(le_u32(&disk.checkpoint, offset));
    let nat_blocks_per_copy = sb(0x3C) / 2 * 512;
    let expected_nat_bits_header = le_u64(&disk.checkpoint, 0x00) | (cp(0xFFC) << 32);

    let checks: Vec<(&str, u64, u64)> = vec![
        ("magic", sb(0x00), F2FS_MAGIC.into()),
        (
            "block_count",
            le_u64(&disk.superblock, 0x24),
            geometry.block_count,
        ),
        ("segs_per_sec", sb(0x18), geometry.segs_per_sec.into()),
        ("secs_per_zone", sb(0x1C), geometry.secs_per_zone.into()),
        ("section_count", sb(0x2C), geometry.section_count.into()),
        ("segment_count", sb(0x30), geometry.segment_count.into()),
        (
            "segment_count_ckpt",
            sb(0x34),
            geometry.segment_count_ckpt.into(),
        ),
        (
            "segment_count_sit",
            sb(0x38),
            geometry.segment_count_sit.into(),
        ),
        (
            "segment_count_nat",
            sb(0x3C),
            geometry.segment_count_nat.into(),
        ),
        (
            "segment_count_ssa",
            sb(0x40),
            geometry.segment_count_ssa.into(),
        ),
        (
            "segment_count_main",
            sb(0x44),
            geometry.segment_count_main.into(),
        ),
        (
            "segment0_blkaddr",
            sb(0x48),
            geometry.segment0_blkaddr.into(),
        ),
        ("cp_blkaddr", sb(0x4C), geometry.cp_blkaddr.into()),
        ("sit_blkaddr", sb(0x50), geometry.sit_blkaddr.into()),
        ("nat_blkaddr", sb(0x54), geometry.nat_blkaddr.into()),
        ("ssa_blkaddr", sb(0x58), geometry.ssa_blkaddr.into()),
        ("main_blkaddr", sb(0x5C), geometry.main_blkaddr.into()),
        ("cp_payload", sb(0x680), geometry.cp_payload.into()),
        (
            "user_block_count",
            le_u64(&disk.checkpoint, 0x08),
            geometry.user_block_count,
        ),
        (
            "rsvd_segment_count",
            cp(0x18),
            geometry.rsvd_segment_count.into(),
        ),
        (
            "overprov_segment_count",
            cp(0x1C),
            geometry.overprov_segment_count.into(),
        ),
        (
            "free_segment_count",
            cp(0x20),
            geometry.free_segment_count.into(),
        ),
        (
            "usable_segment_count (free + 6)",
            cp(0x20) + 6,
            geometry.usable_segment_count.into(),
        ),
        (
            "cur_node_segno[0] (HOT_NODE)",
            cp(0x24),
            geometry.cur_seg[3].into(),
        ),
        (
            "cur_node_segno[1] (WARM_NODE)",
            cp(0x28),
            geometry.cur_seg[4].into(),
        ),
        (
            "cur_node_segno[2] (COLD_NODE)",
            cp(0x2C),
            geometry.cur_seg[5].into(),
        ),
        (
            "cur_data_segno[0] (HOT_DATA)",
            cp(0x54),
            geometry.cur_seg[0].into(),
        ),
        (
            "cur_data_segno[1] (WARM_DATA)",
            cp(0x58),
            geometry.cur_seg[1].into(),
        ),
        (
            "cur_data_segno[2] (COLD_DATA)",
            cp(0x5C),
            geometry.cur_seg[2].into(),
        ),
        (
            "cp_pack_total_block_count",
            cp(0x88),
            6 + u64::from(geometry.cp_payload),
        ),
        (
            "sit_ver_bitmap_bytesize",
            cp(0x9C),
            geometry.sit_ver_bitmap_bytesize.into(),
        ),
        (
            "nat_ver_bitmap_bytesize",
            cp(0xA0),
            geometry.nat_ver_bitmap_bytesize.into(),
        ),
        (
            "max_nid (455 per NAT block)",
            455 * nat_blocks_per_copy,
            geometry.max_nid.into(),
        ),
        (
            "ckpt_flags & CP_NAT_BITS",
            cp(0x84) & u64::from(CP_NAT_BITS_FLAG),
            CP_NAT_BITS_FLAG.into(),
        ),
        // The NAT bits start nat_bits_blocks before the end of the first CP
        // segment with (checkpoint_ver | crc << 32).
        (
            "NAT bits header (locates nat_bits_blocks)",
            disk.nat_bits_header(geometry),
            expected_nat_bits_header,
        ),
    ];
    let mut mismatches: Vec<String> = checks
        .into_iter()
        .filter(|(_, on_disk, expected)| on_disk != expected)
        .map(|(field, on_disk, expected)| {
            format!("{field}: mkfs wrote {on_disk}, compute gave {expected}")
        })
        .collect();

    // mkfs prints the ratio it used with "%.3lf".
    let printed_ratio = mkfs_output
        .lines()
        .find_map(|line| line.split("Overprovision ratio = ").nth(1))
        .map(|rest| rest.trim_end().trim_end_matches('%').to_owned());
    let computed_ratio = format!("{:.3}", geometry.overprovision_ratio);
    if printed_ratio.as_deref() != Some(computed_ratio.as_str()) {
        mismatches.push(format!(
            "overprovision_ratio: mkfs printed {printed_ratio:?}, compute gave {computed_ratio}"
        ));
    }
    mismatches
}

/// The blocks of a formatted image that carry the geometry.
struct OnDisk {
    file: PathBuf,
    superblock: Vec<u8>,
    checkpoint: Vec<u8>,
}

impl OnDisk {
    fn read(path: &Path) -> Self {
        let superblock = read_at(path, SUPERBLOCK_OFFSET, 3072);
        let cp_blkaddr = u64::from(le_u32(&superblock, 0x4C));
        let checkpoint = read_at(path, cp_blkaddr * BLOCK_BYTES, BLOCK_BYTES as usize);
        Self {
            file: path.to_owned(),
            superblock,
            checkpoint,
        }
    }

    /// First 8 bytes of the NAT bits area where `geometry` says it starts.
    fn nat_bits_header(&self, geometry: &Geometry) -> u64 {
        let blkaddr = u64::from(geometry.cp_blkaddr) + 512 - u64::from(geometry.nat_bits_blocks);
        le_u64(&read_at(&self.file, blkaddr * BLOCK_BYTES, 8), 0)
    }
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut file = File::open(path).expect("open image");
    file.seek(SeekFrom::Start(offset)).expect("seek image");
    let mut buf = vec![0; len];
    file.read_exact(&mut buf).expect("read image");
    buf
}

fn le_u32(buf: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(buf[offset..offset + 4].try_into().unwrap())
}

fn le_u64(buf: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(buf[offset..offset + 8].try_into().unwrap())
}

struct MkfsOutput {
    status: std::process::ExitStatus,
    text: String,
}

fn run_mkfs(mkfs: &Path, case: &Case, image: &Path) -> MkfsOutput {
    let mut command = Command::new(mkfs);
    // -t 0: no discard, so sparse files stay sparse and the run stays fast.
    command.args(["-f", "-t", "0"]);
    command.args(["-s", &case.segs_per_sec.to_string()]);
    command.args(["-z", &case.secs_per_zone.to_string()]);
    if let Some(ratio) = case.overprovision {
        command.args(["-o", ratio]);
    }
    let output = command.arg(image).output().expect("run mkfs.f2fs");
    MkfsOutput {
        status: output.status,
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// mkfs.f2fs from PATH, or from the sbin directories that non-root PATHs
/// often omit.
fn find_mkfs() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join("mkfs.f2fs"))
        .find(|candidate| candidate.is_file())
}

/// A sparse file in the temp dir, removed on drop (also when a check panics).
struct TempImage {
    path: PathBuf,
}

impl TempImage {
    fn create(index: usize, device_bytes: u64) -> Self {
        let path = std::env::temp_dir().join(format!(
            "f2fuse-geometry-vs-mkfs-{}-{index}.img",
            std::process::id()
        ));
        let file = File::create(&path).expect("create image file");
        file.set_len(device_bytes).expect("size image file");
        Self { path }
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempImage {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
