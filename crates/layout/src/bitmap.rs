//! The two bit orders of the format: SIT maps and checkpoint version bitmaps
//! number bits from the most significant bit; dentry bitmaps from the least.

pub fn test_bit_msb(bitmap: &[u8], bit: usize) -> bool {
    bitmap[bit / 8] & (0x80 >> (bit % 8)) != 0
}

pub fn set_bit_msb(bitmap: &mut [u8], bit: usize, value: bool) {
    let mask = 0x80 >> (bit % 8);
    if value {
        bitmap[bit / 8] |= mask;
    } else {
        bitmap[bit / 8] &= !mask;
    }
}

pub fn test_bit_le(bitmap: &[u8], bit: usize) -> bool {
    bitmap[bit / 8] & (1 << (bit % 8)) != 0
}

pub fn set_bit_le(bitmap: &mut [u8], bit: usize, value: bool) {
    let mask = 1 << (bit % 8);
    if value {
        bitmap[bit / 8] |= mask;
    } else {
        bitmap[bit / 8] &= !mask;
    }
}

/// Number of set bits among the first `bits` bits (bit order does not matter for a count).
pub fn count_ones(bitmap: &[u8]) -> u32 {
    bitmap.iter().map(|b| b.count_ones()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_orders_match_format_doc() {
        let mut sit = [0u8; 2];
        set_bit_msb(&mut sit, 0, true);
        assert_eq!(sit[0], 0x80);
        let mut dentry = [0u8; 2];
        set_bit_le(&mut dentry, 0, true);
        set_bit_le(&mut dentry, 1, true);
        assert_eq!(dentry[0], 0x03);
        assert!(test_bit_le(&dentry, 1) && !test_bit_le(&dentry, 2));
        set_bit_le(&mut dentry, 1, false);
        assert_eq!(dentry[0], 0x01);
        assert_eq!(count_ones(&[0xFF, 0x01]), 9);
    }
}
