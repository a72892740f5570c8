//! Dentry name hash: the TEA-based hash f2fs inherited from ext3's htree.

const DELTA: u32 = 0x9E37_79B9;

fn tea_transform(buf: &mut [u32; 2], words: &[u32; 4]) {
    let (mut x, mut y, mut sum) = (buf[0], buf[1], 0u32);
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        x = x.wrapping_add(
            (y << 4).wrapping_add(words[0]) ^ y.wrapping_add(sum) ^ (y >> 5).wrapping_add(words[1]),
        );
        y = y.wrapping_add(
            (x << 4).wrapping_add(words[2]) ^ x.wrapping_add(sum) ^ (x >> 5).wrapping_add(words[3]),
        );
    }
    buf[0] = buf[0].wrapping_add(x);
    buf[1] = buf[1].wrapping_add(y);
}

/// Packs up to 16 bytes into four words, padding with the remaining length
/// repeated in every byte (the kernel's `str2hashbuf`).
fn str_to_hash_words(chunk: &[u8], remaining: usize) -> [u32; 4] {
    let pad = {
        let r = remaining as u32;
        let x = r | (r << 8);
        x | (x << 16)
    };
    let mut words = [pad; 4];
    let mut emitted = 0;
    let mut value = pad;
    for (i, &byte) in chunk.iter().enumerate() {
        if i % 4 == 0 {
            value = pad;
        }
        value = (value << 8).wrapping_add(byte as u32);
        if i % 4 == 3 {
            words[emitted] = value;
            emitted += 1;
            value = pad;
        }
    }
    if emitted < 4 {
        words[emitted] = value;
    }
    words
}

/// Hash stored in `f2fs_dir_entry.hash_code` for `name` (non-casefolded directories).
pub fn dentry_hash(name: &[u8]) -> u32 {
    if name == b"." || name == b".." {
        return 0;
    }
    let mut buf = [0x6745_2301u32, 0xEFCD_AB89];
    let mut rest = name;
    loop {
        let take = rest.len().min(16);
        let words = str_to_hash_words(&rest[..take], rest.len());
        tea_transform(&mut buf, &words);
        if rest.len() <= 16 {
            break;
        }
        rest = &rest[16..];
    }
    buf[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_doc_vectors() {
        let long = vec![b'N'; 255];
        let cases: &[(&[u8], u32)] = &[
            (b"a", 0x6D0E_A4C1),
            (b"ab", 0xD27D_8659),
            (b"abc", 0xB143_5EC5),
            (b"abcd", 0x5A24_112E),
            (b"d1", 0xFC23_784F),
            (b"hello.txt", 0x5107_C3F3),
            (b"lost+found", 0x2DBF_9E80),
            (b"0123456789abcdef", 0x5A07_88B2),
            (b"0123456789abcdefg", 0xFB1A_23EC),
            (b"file_with_longish_name_1", 0xCBB7_7E5F),
            ("été".as_bytes(), 0x2ED2_FEAD),
            (&long, 0x675B_2283),
            (b".", 0),
            (b"..", 0),
        ];
        for (name, want) in cases {
            assert_eq!(
                dentry_hash(name),
                *want,
                "hash of {:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
