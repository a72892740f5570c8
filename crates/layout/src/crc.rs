//! The F2FS CRC: reflected CRC-32 (IEEE polynomial) whose register starts at
//! the seed, with no final inversion. Equal to `!crc32(data, !seed)` of zlib.

use crate::consts::F2FS_SUPER_MAGIC;

/// CRC of `data` continuing from `seed` (chain calls by passing the previous result).
pub fn f2fs_crc32(seed: u32, data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(!seed);
    hasher.update(data);
    !hasher.finalize()
}

/// Checksum used by superblock and checkpoint blocks.
pub fn f2fs_checksum(data: &[u8]) -> u32 {
    f2fs_crc32(F2FS_SUPER_MAGIC, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bitwise definition from the format doc, as an independent oracle.
    fn reference(seed: u32, data: &[u8]) -> u32 {
        let mut crc = seed;
        for &byte in data {
            crc ^= byte as u32;
            for _ in 0..8 {
                crc = (crc >> 1) ^ if crc & 1 != 0 { 0xEDB8_8320 } else { 0 };
            }
        }
        crc
    }

    #[test]
    fn matches_bitwise_definition() {
        for data in [&b""[..], b"a", b"123456789", &[0xFFu8; 4096][..]] {
            for seed in [0, F2FS_SUPER_MAGIC, 0xFFFF_FFFF] {
                assert_eq!(f2fs_crc32(seed, data), reference(seed, data));
            }
        }
    }

    #[test]
    fn chaining_equals_one_pass() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let one = f2fs_crc32(7, &data);
        let two = f2fs_crc32(f2fs_crc32(7, &data[..333]), &data[333..]);
        assert_eq!(one, two);
    }
}
