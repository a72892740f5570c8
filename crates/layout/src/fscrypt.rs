//! What fscrypt (Linux 6.1 fs/crypto) shows of encrypted names without the
//! key: the no-key name, base64url (RFC 4648, no padding) of
//! `struct fscrypt_nokey_name { u32 dirhash[2]; u8 bytes[149]; u8 sha256[32]; }`
//! holding the entry's dentry hash (f2fs passes `hash_code` as dirhash[0]
//! and 0 as dirhash[1]), the ciphertext name if it fits in `bytes`, else its
//! first 149 bytes and the SHA-256 of the rest (fscrypt_fname_disk_to_usr),
//! and how a lookup by such a name matches an entry (fscrypt_setup_filename,
//! fscrypt_match_name).

/// Bytes of ciphertext a no-key name holds before it switches to a digest.
const NOKEY_BYTES: usize = 149;
/// Offset of `bytes` in `struct fscrypt_nokey_name`.
const NOKEY_BYTES_OFFSET: usize = 8;
/// Offset of `sha256` and the size of the whole struct.
const NOKEY_SHA256_OFFSET: usize = NOKEY_BYTES_OFFSET + NOKEY_BYTES;
const NOKEY_MAX: usize = NOKEY_SHA256_OFFSET + 32;
/// Longest encoded no-key name (252 characters, within NAME_MAX).
const NOKEY_MAX_ENCODED: usize = NOKEY_MAX.div_ceil(3) * 4 - (3 - NOKEY_MAX % 3) % 3;

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The no-key name of the entry stored as `disk_name` under `hash`.
pub fn nokey_name(disk_name: &[u8], hash: u32) -> Vec<u8> {
    let mut raw = Vec::with_capacity(NOKEY_MAX);
    raw.extend_from_slice(&hash.to_le_bytes());
    raw.extend_from_slice(&0u32.to_le_bytes());
    if disk_name.len() <= NOKEY_BYTES {
        raw.extend_from_slice(disk_name);
    } else {
        raw.extend_from_slice(&disk_name[..NOKEY_BYTES]);
        raw.extend_from_slice(&sha256(&disk_name[NOKEY_BYTES..]));
    }
    base64url_encode(&raw)
}

/// A name looked up in an encrypted directory without its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NokeyName {
    /// The dentry hash the entry is stored under.
    pub hash: u32,
    /// The decoded `struct fscrypt_nokey_name`, up to its real length.
    raw: Vec<u8>,
}

impl NokeyName {
    /// `None` for a name no entry can have without the key (the kernel's
    /// ENOENT): not base64url, or a decoded length fscrypt never produces.
    pub fn parse(name: &[u8]) -> Option<NokeyName> {
        if name.len() > NOKEY_MAX_ENCODED {
            return None;
        }
        let raw = base64url_decode(name)?;
        let valid = (NOKEY_BYTES_OFFSET + 1..=NOKEY_SHA256_OFFSET).contains(&raw.len())
            || raw.len() == NOKEY_MAX;
        if !valid {
            return None;
        }
        let hash = u32::from_le_bytes(raw[..4].try_into().unwrap());
        Some(NokeyName { hash, raw })
    }

    /// Whether the entry stored as `disk_name` is this name (its hash
    /// already matched).
    pub fn matches(&self, disk_name: &[u8]) -> bool {
        let bytes = &self.raw[NOKEY_BYTES_OFFSET..];
        if disk_name.len() <= NOKEY_BYTES {
            return bytes == disk_name;
        }
        self.raw.len() == NOKEY_MAX
            && bytes[..NOKEY_BYTES] == disk_name[..NOKEY_BYTES]
            && bytes[NOKEY_BYTES..] == sha256(&disk_name[NOKEY_BYTES..])
    }
}

fn base64url_encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len().div_ceil(3) * 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &b in bytes {
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(BASE64URL[((acc >> bits) & 63) as usize]);
        }
    }
    if bits > 0 {
        out.push(BASE64URL[((acc << (6 - bits)) & 63) as usize]);
    }
    out
}

/// Decodes as the kernel's fscrypt_base64url_decode: `None` for a
/// character outside the alphabet or nonzero leftover bits.
fn base64url_decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in text {
        let value = BASE64URL.iter().position(|&a| a == c)? as u32;
        acc = ((acc << 6) | value) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    (acc & ((1 << bits) - 1) == 0).then_some(out)
}

/// SHA-256 (FIPS 180-4), for the tail of long ciphertext names.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for chunk in message.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in chunk.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes(word.try_into().unwrap());
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let choice = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(choice)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let majority = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(majority);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (state, value) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *state = state.wrapping_add(value);
        }
    }
    let mut out = [0u8; 32];
    for (bytes, word) in out.chunks_exact_mut(4).zip(h) {
        bytes.copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&sha256(&[b'a'; 1000])),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
        );
    }

    #[test]
    fn base64url_matches_rfc_4648_without_padding() {
        assert_eq!(base64url_encode(b"foob"), b"Zm9vYg");
        assert_eq!(base64url_encode(&[0xfb, 0xff]), b"-_8");
        assert_eq!(base64url_decode(b"-_8").unwrap(), [0xfb, 0xff]);
        // Leftover bits must be zero, as the kernel checks.
        assert!(base64url_decode(b"-_9").is_none());
        assert!(base64url_decode(b"ab+c").is_none());
    }

    #[test]
    fn nokey_names_round_trip_short_and_long() {
        let short: Vec<u8> = (0..32u8).map(|b| b.wrapping_mul(37)).collect();
        let long: Vec<u8> = (0..200u8).map(|b| b.wrapping_mul(91) ^ 0x5a).collect();
        for name in [&short, &long] {
            let encoded = nokey_name(name, 0x1234_5678);
            assert!(encoded.len() <= NOKEY_MAX_ENCODED);
            let parsed = NokeyName::parse(&encoded).unwrap();
            assert_eq!(parsed.hash, 0x1234_5678);
            assert!(parsed.matches(name));
            let mut other = name.clone();
            *other.last_mut().unwrap() ^= 1;
            assert!(!parsed.matches(&other));
        }
        assert_eq!(NOKEY_MAX_ENCODED, 252);
        assert_eq!(nokey_name(&long, 0).len(), 252);
        // Plain names are not no-key names.
        assert!(NokeyName::parse(b"hello.txt").is_none());
        assert!(NokeyName::parse(b"abc").is_none());
    }
}
