//! LZO1X decoding that accepts exactly what the kernel's
//! `lzo1x_decompress_safe` (lib/lzo, Linux 5.1 and later) accepts,
//! including the LZO-RLE bitstream (version byte 1 after a leading 17:
//! zero runs coded as an M4 match with distance field 0x3fff). No crate
//! decodes LZO-RLE, and one decoder serves both F2FS algorithms, as in
//! the kernel. Every read and write is bounds-checked: hostile input ends
//! in an error, never a panic.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LzoError {
    InputOverrun,
    OutputOverrun,
    LookbehindOverrun,
    /// The end marker came with a wrong length.
    BadEndMarker,
    InputNotConsumed,
}

impl fmt::Display for LzoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LzoError::InputOverrun => "LZO input overrun",
            LzoError::OutputOverrun => "LZO output overrun",
            LzoError::LookbehindOverrun => "LZO match before the start of the output",
            LzoError::BadEndMarker => "LZO end marker with a bad length",
            LzoError::InputNotConsumed => "LZO stream ends before its input",
        })
    }
}

/// Runs shorter than this are not coded as zero runs.
const MIN_ZERO_RUN_LENGTH: usize = 4;
const M2_MAX_OFFSET: usize = 0x0800;

/// Where the decoder goes next (the kernel's gotos).
enum Next {
    Instruction,
    Literals(usize),
    /// Up to 3 literals that follow a match (the state for the next instruction).
    TrailingLiterals(usize),
}

struct Decoder<'a> {
    input: &'a [u8],
    ip: usize,
    out: &'a mut [u8],
    op: usize,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<usize, LzoError> {
        let b = *self.input.get(self.ip).ok_or(LzoError::InputOverrun)?;
        self.ip += 1;
        Ok(b as usize)
    }

    fn need_ip(&self, n: usize) -> Result<(), LzoError> {
        if self.input.len() - self.ip >= n {
            Ok(())
        } else {
            Err(LzoError::InputOverrun)
        }
    }

    fn need_op(&self, n: usize) -> Result<(), LzoError> {
        if self.out.len() - self.op >= n {
            Ok(())
        } else {
            Err(LzoError::OutputOverrun)
        }
    }

    fn le16(&self) -> Result<usize, LzoError> {
        self.need_ip(2)?;
        Ok(u16::from_le_bytes([self.input[self.ip], self.input[self.ip + 1]]) as usize)
    }

    /// A length continued in zero bytes (each adding 255) and a final byte.
    fn extended_length(&mut self, base: usize) -> Result<usize, LzoError> {
        let mut zeros = 0usize;
        while self.byte()? == 0 {
            zeros += 1;
        }
        let last = self.input[self.ip - 1] as usize;
        Ok(zeros * 255 + base + last)
    }

    fn copy_literals(&mut self, n: usize) -> Result<(), LzoError> {
        self.need_op(n)?;
        self.out[self.op..self.op + n].copy_from_slice(&self.input[self.ip..self.ip + n]);
        self.op += n;
        self.ip += n;
        Ok(())
    }

    /// Copies `len` bytes from `distance` bytes back (overlap repeats them).
    fn copy_match(&mut self, distance: usize, len: usize) -> Result<(), LzoError> {
        if distance > self.op {
            return Err(LzoError::LookbehindOverrun);
        }
        self.need_op(len)?;
        let from = self.op - distance;
        for k in 0..len {
            self.out[self.op + k] = self.out[from + k];
        }
        self.op += len;
        Ok(())
    }
}

/// Decodes `input` into `out`; returns the bytes produced. As the kernel,
/// succeeds only when the end marker is reached exactly at the end of the
/// input.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<usize, LzoError> {
    if input.len() < 3 {
        return Err(LzoError::InputOverrun);
    }
    let mut d = Decoder {
        input,
        ip: 0,
        out,
        op: 0,
    };
    let rle = if input.len() >= 5 && input[0] == 17 {
        d.ip = 2;
        input[1] != 0
    } else {
        false
    };
    let mut state = 0usize;
    let mut next = Next::Instruction;
    if d.input[d.ip] > 17 {
        let t = d.byte()? - 17;
        next = if t < 4 {
            Next::TrailingLiterals(t)
        } else {
            Next::Literals(t)
        };
    }
    loop {
        match next {
            Next::Literals(t) => {
                d.need_ip(t + 3)?;
                d.copy_literals(t)?;
                state = 4;
                next = Next::Instruction;
                continue;
            }
            Next::TrailingLiterals(t) => {
                state = t;
                d.need_ip(t + 3)?;
                d.copy_literals(t)?;
                next = Next::Instruction;
                continue;
            }
            Next::Instruction => {}
        }
        let t = d.byte()?;
        let (distance, len, trailing);
        if t < 16 {
            if state == 0 {
                let run = if t == 0 { d.extended_length(15)? } else { t };
                next = Next::Literals(run + 3);
                continue;
            } else if state != 4 {
                // A 2-byte match right after a match's trailing literals.
                let low = d.byte()?;
                d.copy_match(1 + (t >> 2) + (low << 2), 2)?;
                next = Next::TrailingLiterals(t & 3);
                continue;
            } else {
                let low = d.byte()?;
                distance = 1 + M2_MAX_OFFSET + (t >> 2) + (low << 2);
                len = 3;
                trailing = t & 3;
            }
        } else if t >= 64 {
            let low = d.byte()?;
            distance = 1 + ((t >> 2) & 7) + (low << 3);
            len = (t >> 5) + 1;
            trailing = t & 3;
        } else if t >= 32 {
            let mut n = (t & 31) + 2;
            if n == 2 {
                n = d.extended_length(31 + 2)?;
            }
            let word = d.le16()?;
            d.ip += 2;
            distance = 1 + (word >> 2);
            len = n;
            trailing = word & 3;
        } else {
            let word = d.le16()?;
            if rle && word & 0xfffc == 0xfffc && t & 0xf8 == 0x18 {
                d.need_ip(3)?;
                let run = ((t & 7) | ((d.input[d.ip + 2] as usize) << 3)) + MIN_ZERO_RUN_LENGTH;
                d.need_op(run)?;
                d.out[d.op..d.op + run].fill(0);
                d.op += run;
                d.ip += 3;
                next = Next::TrailingLiterals(word & 3);
                continue;
            }
            let mut n = (t & 7) + 2;
            let mut word = word;
            if n == 2 {
                n = d.extended_length(7 + 2)?;
                word = d.le16()?;
            }
            d.ip += 2;
            let far = (t & 8) << 11;
            if far + (word >> 2) == 0 {
                // The end marker: a match of length 3 at distance 0.
                return if n != 3 {
                    Err(LzoError::BadEndMarker)
                } else if d.ip == input.len() {
                    Ok(d.op)
                } else {
                    Err(LzoError::InputNotConsumed)
                };
            }
            distance = far + (word >> 2) + 0x4000;
            len = n;
            trailing = word & 3;
        }
        d.copy_match(distance, len)?;
        next = Next::TrailingLiterals(trailing);
    }
}

/// Longest distance an M3 match reaches; the encoder uses no M4 matches
/// (16..48 KiB back), so its streams can never contain the instruction
/// LZO-RLE reads as a zero run and serve both algorithms.
const M3_MAX_OFFSET: usize = 0x4000;
const MIN_MATCH: usize = 4;
const HASH_BITS: u32 = 14;

/// Encodes `input` as an LZO1X stream (greedy, literal runs and M3
/// matches), which the kernel's decoder accepts; `rle` prefixes the
/// LZO-RLE version bytes. Output is at most `input.len() + input.len() / 255 + 16`.
pub fn compress(input: &[u8], rle: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() / 2 + 16);
    if rle {
        out.extend_from_slice(&[17, 1]);
    }
    let stream_start = out.len();
    let mut table = vec![usize::MAX; 1 << HASH_BITS];
    let mut last_match_low = None;
    let (mut literal_start, mut i) = (0, 0);
    while i + MIN_MATCH <= input.len() {
        let word = u32::from_le_bytes(input[i..i + 4].try_into().expect("4 bytes"));
        let slot = (word.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize;
        let candidate = std::mem::replace(&mut table[slot], i);
        let found = candidate != usize::MAX
            && i - candidate <= M3_MAX_OFFSET
            && input[candidate..candidate + MIN_MATCH] == input[i..i + MIN_MATCH];
        if !found {
            i += 1;
            continue;
        }
        let len = MIN_MATCH
            + input[i + MIN_MATCH..]
                .iter()
                .zip(&input[candidate + MIN_MATCH..])
                .take_while(|(a, b)| a == b)
                .count();
        let at_start = out.len() == stream_start;
        emit_literals(&mut out, &input[literal_start..i], at_start, last_match_low);
        // M3: 001LLLLL [length bytes] then (distance - 1) << 2 | trailing literals.
        if len <= 33 {
            out.push(32 | (len - 2) as u8);
        } else {
            out.push(32);
            push_length(&mut out, len - 33);
        }
        last_match_low = Some(out.len());
        out.extend_from_slice(&(((i - candidate - 1) << 2) as u16).to_le_bytes());
        i += len;
        literal_start = i;
    }
    let at_start = out.len() == stream_start;
    emit_literals(&mut out, &input[literal_start..], at_start, last_match_low);
    out.extend_from_slice(&[0x11, 0, 0]);
    out
}

/// A length beyond an instruction's own bits: a zero byte per 255, then the rest (1..=255).
fn push_length(out: &mut Vec<u8>, mut rest: usize) {
    while rest > 255 {
        out.push(0);
        rest -= 255;
    }
    out.push(rest as u8);
}

/// A literal run: 1..=3 bytes ride in the low bits of the match before
/// them; the stream's first run has its own short form (17 + length).
fn emit_literals(out: &mut Vec<u8>, literals: &[u8], at_start: bool, match_low: Option<usize>) {
    let n = literals.len();
    if n == 0 {
        return;
    }
    match match_low {
        Some(low) if !at_start && n <= 3 => out[low] |= n as u8,
        _ if at_start && n <= 238 => out.push(17 + n as u8),
        _ if n <= 18 => out.push((n - 3) as u8),
        _ => {
            out.push(0);
            push_length(out, n - 18);
        }
    }
    out.extend_from_slice(literals);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_literals_matches_and_the_end_marker() {
        // 21 literals "abcdefghijklmnopqrstu" (first byte 17 + 21), a
        // 10-byte match 21 back (M3: 32 | (10 - 2), distance field 20 << 2),
        // then the end marker 0x11 0x00 0x00.
        let mut input = vec![17 + 21];
        input.extend_from_slice(b"abcdefghijklmnopqrstu");
        input.extend_from_slice(&[32 | 8, 20 << 2, 0, 0x11, 0, 0]);
        let mut out = [0u8; 31];
        assert_eq!(decompress(&input, &mut out), Ok(31));
        assert_eq!(&out, b"abcdefghijklmnopqrstuabcdefghij");
        let mut short = [0u8; 30];
        assert_eq!(decompress(&input, &mut short), Err(LzoError::OutputOverrun));
        let mut trailing = input.clone();
        trailing.push(0);
        assert_eq!(
            decompress(&trailing, &mut out),
            Err(LzoError::InputNotConsumed)
        );
        assert_eq!(
            decompress(&input[..input.len() - 1], &mut out),
            Err(LzoError::InputOverrun)
        );
    }

    #[test]
    fn encoded_streams_round_trip_in_both_bitstreams() {
        let mut text = Vec::new();
        for i in 0..3000u32 {
            text.extend_from_slice(format!("line {} of {}\n", i % 97, i % 13).as_bytes());
        }
        let zeros = vec![0u8; 70_000];
        let mut noise = vec![0u8; 20_000];
        let mut x = 1u32;
        for b in &mut noise {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        for input in [
            &text[..],
            &zeros,
            &noise,
            b"ab",
            b"abcabcabcabcabcabcabcabcx",
        ] {
            for rle in [false, true] {
                let stream = compress(input, rle);
                assert!(stream.len() <= input.len() + input.len() / 255 + 16);
                let mut out = vec![0u8; input.len()];
                assert_eq!(decompress(&stream, &mut out), Ok(input.len()));
                assert_eq!(out, input);
            }
        }
    }

    #[test]
    fn rle_streams_decode_zero_runs() {
        // Version 1: 4 literals, a zero run of 4 + (2 | 5 << 3) = 46, end.
        let input = [
            17,
            1,
            17 + 4,
            b'w',
            b'x',
            b'y',
            b'z',
            0x18 | 2,
            0xfc,
            0xff,
            5,
            0x11,
            0,
            0,
        ];
        let mut out = [0xAAu8; 50];
        assert_eq!(decompress(&input, &mut out), Ok(50));
        assert_eq!(&out[..4], b"wxyz");
        assert!(out[4..].iter().all(|&b| b == 0));
        // The same instruction in a plain stream is a far match: before the start.
        let plain = &input[2..];
        assert_eq!(
            decompress(plain, &mut out),
            Err(LzoError::LookbehindOverrun)
        );
    }
}
