//! Name folding of casefolded directories: the kernel's `utf8_casefold`
//! with the "utf8-12.1.0" tables (fs/unicode), the only encoding F2FS
//! defines (`s_encoding` 1).
//!
//! The kernel folds each code point to the fixed point of "full case folding
//! (CaseFolding.txt status C and F), else canonical decomposition", drops
//! Default_Ignorable code points, then puts each run of non-starters in
//! canonical order; it never composes. This is not NFD(casefold(NFD(s))):
//! U+0345 folds to U+03B9, a starter, before the reordering.
//!
//! The data comes from crates that carry a newer Unicode than 12.1:
//! `caseless` (full case folding), `unicode-normalization` (canonical
//! decompositions, combining classes) and `regex-syntax` (which code points
//! Unicode 12.1 had assigned). Unicode's stability policies freeze the
//! decompositions and combining classes of assigned characters and keep
//! their case folding, so the newer data agrees with 12.1 for every code
//! point 12.1 assigned; code points assigned later are passed through
//! unchanged as starters, as the kernel's 12.1 tables do. The
//! Default_Ignorable set is 12.1's, written out below.

use std::sync::OnceLock;
use unicode_normalization::char::{canonical_combining_class, decompose_canonical};

/// `s_encoding` of UTF-8 with the Unicode 12.1 tables (F2FS_ENC_UTF8_12_1).
pub const F2FS_ENC_UTF8_12_1: u16 = 1;
/// `s_encoding_flags` bit: refuse names that are not valid UTF-8.
pub const F2FS_ENC_STRICT_MODE_FL: u16 = 0x0001;

/// Default_Ignorable_Code_Point in Unicode 12.1: removed by folding.
const IGNORABLE_12_1: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

fn in_ranges(ranges: &[(u32, u32)], c: u32) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Code points assigned in Unicode 12.1 (DerivedAge <= 12.1), as sorted ranges.
fn assigned_12_1() -> &'static [(u32, u32)] {
    static RANGES: OnceLock<Vec<(u32, u32)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        use regex_syntax::hir::{Class, HirKind};
        let hir = regex_syntax::Parser::new()
            .parse(r"\p{Age=12.1}")
            .expect("regex-syntax knows Age=12.1");
        match hir.kind() {
            HirKind::Class(Class::Unicode(class)) => class
                .ranges()
                .iter()
                .map(|r| (r.start() as u32, r.end() as u32))
                .collect(),
            other => unreachable!("\\p{{Age=12.1}} parsed as {other:?}"),
        }
    })
}

/// Appends the fold of `c` (an assigned, not ignorable code point): its full
/// case folding if it has one, else its canonical decomposition, each
/// resulting code point folded again (the 12.1 table is that fixed point).
fn fold_char(c: char, out: &mut Vec<char>) {
    let mut folded = caseless::Caseless::default_case_fold(std::iter::once(c));
    let first = folded.next();
    if first != Some(c) {
        for d in first.into_iter().chain(folded) {
            fold_char(d, out);
        }
        return;
    }
    let mut parts = Vec::with_capacity(4);
    decompose_canonical(c, |d| parts.push(d));
    if parts.as_slice() == [c] {
        out.push(c);
    } else {
        for d in parts {
            fold_char(d, out);
        }
    }
}

/// The folded form the kernel hashes and compares for `name` in a
/// casefolded directory, or `None` where the kernel's `utf8_casefold`
/// fails (invalid UTF-8; a result of 255 bytes or more, since the kernel
/// folds into a 255-byte buffer that must hold a terminator) or F2FS
/// treats the result as a failure (empty: the name was only ignorables).
///
/// One known difference: the kernel accepts a stray continuation byte
/// after a complete character (`41 80` folds to `61 80`); such names are
/// not valid UTF-8 here and fail.
pub fn utf8_casefold(name: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(name).ok()?;
    // Code points with their combining class; `run_start` is where the
    // current run of non-starters may be reordered from.
    let mut folded: Vec<(char, u8)> = Vec::with_capacity(name.len());
    let mut run_start = 0;
    let mut pieces = Vec::new();
    for c in text.chars() {
        let cp = c as u32;
        if in_ranges(IGNORABLE_12_1, cp) {
            // Removed, but still ends a run of non-starters.
            run_start = folded.len();
            continue;
        }
        pieces.clear();
        if in_ranges(assigned_12_1(), cp) {
            fold_char(c, &mut pieces);
        } else {
            // Unknown to 12.1: kept as it is, as a starter.
            folded.push((c, 0));
            run_start = folded.len();
            continue;
        }
        for &p in &pieces {
            let ccc = canonical_combining_class(p);
            folded.push((p, ccc));
            if ccc == 0 {
                run_start = folded.len();
                continue;
            }
            // Canonical ordering: a stable insertion into the run.
            let mut i = folded.len() - 1;
            while i > run_start && folded[i - 1].1 > ccc {
                folded.swap(i - 1, i);
                i -= 1;
            }
        }
    }
    let mut out = Vec::with_capacity(folded.len());
    let mut buf = [0u8; 4];
    for (c, _) in folded {
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
    (!out.is_empty() && out.len() < crate::F2FS_NAME_LEN).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::dentry_hash;

    fn fold(name: &str) -> Option<Vec<u8>> {
        utf8_casefold(name.as_bytes())
    }

    /// Folded bytes and their TEA hash, as the kernel computed them
    /// (hashes stored by Linux 6.1 in casefolded directories, and the
    /// kernel's own fold compiled in user space).
    #[test]
    fn kernel_vectors() {
        let cases: &[(&[u8], &[u8], u32)] = &[
            ("Straße.txt".as_bytes(), b"strasse.txt", 0x40C2_35AE),
            (b"Mixed", b"mixed", 0x53A1_FFC8),
            ("café".as_bytes(), b"cafe\xcc\x81", 0xC1EA_8E5F),
            (b"cafe\xcc\x81", b"cafe\xcc\x81", 0xC1EA_8E5F),
            (b"Entry_1", b"entry_1", 0x669E_6515),
            (b"Entry_300", b"entry_300", 0x5091_5625),
            (b"Inner.txt", b"inner.txt", 0xDD7D_AC62),
            ("A\u{200B}B".as_bytes(), b"ab", 0xD27D_8659),
            ("\u{130}".as_bytes(), b"i\xcc\x87", 0x8783_FC03),
            ("ΣΑΣ".as_bytes(), "σασ".as_bytes(), 0xCA15_B614),
            ("\u{FB01}le".as_bytes(), b"file", 0x53FC_F74E),
            ("\u{C5}".as_bytes(), b"a\xcc\x8a", 0xA16D_93F1),
            (
                "\u{212B}ngström".as_bytes(),
                b"a\xcc\x8angstro\xcc\x88m",
                0x1DEB_8F23,
            ),
            (
                "\u{AC00}".as_bytes(),
                b"\xe1\x84\x80\xe1\x85\xa1",
                0xA386_6623,
            ),
        ];
        for &(name, want, hash) in cases {
            let got = utf8_casefold(name).expect("folds");
            assert_eq!(got, want, "fold of {:?}", String::from_utf8_lossy(name));
            assert_eq!(
                dentry_hash(&got),
                hash,
                "hash of {:?}",
                String::from_utf8_lossy(name)
            );
        }
        let a254 = vec![b'A'; 254];
        let folded = utf8_casefold(&a254).unwrap();
        assert_eq!(folded, vec![b'a'; 254]);
        assert_eq!(dentry_hash(&folded), 0xD4FC_58EB);
    }

    #[test]
    fn failures_fall_back_to_raw_names() {
        // Invalid UTF-8, only ignorables, a 255-byte result.
        assert_eq!(utf8_casefold(b"A\xff"), None);
        assert_eq!(dentry_hash(b"A\xff"), 0x4AFE_4805);
        assert_eq!(fold("\u{E0001}"), None);
        assert_eq!(dentry_hash("\u{E0001}".as_bytes()), 0x56F3_DEF8);
        assert_eq!(utf8_casefold(&[b'A'; 255]), None);
        assert_eq!(dentry_hash(&[b'A'; 255]), 0xD019_8BA8);
        // 127 x U+00DF (254 bytes) folds to 254 x "s": fine; one more is not.
        assert_eq!(fold(&"ß".repeat(127)).unwrap().len(), 254);
        assert_eq!(fold(&"ßs".repeat(85)), None);
    }

    #[test]
    fn twins_and_non_twins() {
        assert_eq!(fold("Straße"), fold("STRASSE"));
        assert_eq!(fold("\u{1E9E}"), fold("ss"));
        // Turkish dotless ı has no C/F folding: it is not "i" nor "I".
        assert_ne!(fold("ı"), fold("i"));
        assert_eq!(fold("I"), fold("i"));
        assert_eq!(fold("ς"), fold("Σ"));
        // Emoji are kept (and the variation selector dropped).
        assert_eq!(fold("😀\u{FE0F}"), Some("😀".as_bytes().to_vec()));
        assert_eq!(fold("\u{212A}"), fold("k"));
    }

    #[test]
    fn canonical_order_after_folding() {
        // U+0345 folds to U+03B9 (a starter) before reordering, so the
        // U+0301 after it is not moved in front of it.
        assert_eq!(
            fold("\u{3B1}\u{345}\u{301}").unwrap(),
            "\u{3B1}\u{3B9}\u{301}".as_bytes()
        );
        // Classes 230 then 220 are swapped; an ignorable ends the run.
        assert_eq!(
            fold("a\u{301}\u{316}").unwrap(),
            "a\u{316}\u{301}".as_bytes()
        );
        assert_eq!(
            fold("a\u{301}\u{AD}\u{316}").unwrap(),
            "a\u{301}\u{316}".as_bytes()
        );
    }

    #[test]
    fn code_points_after_12_1_are_kept() {
        // Added in 13.0 and 14.0 with case foldings or decompositions that
        // the 12.1 tables do not have.
        for c in ['\u{A7C7}', '\u{2C2F}', '\u{10570}', '\u{11938}'] {
            let s = c.to_string();
            assert_eq!(fold(&s), Some(s.clone().into_bytes()), "U+{:04X}", c as u32);
        }
        // New non-starters count as starters: no reordering around them.
        assert_eq!(
            fold("a\u{301}\u{1AC1}\u{316}").unwrap(),
            "a\u{301}\u{1AC1}\u{316}".as_bytes()
        );
    }

    #[test]
    fn every_code_point_folds() {
        for cp in 1..=0x10FFFFu32 {
            if let Some(c) = char::from_u32(cp) {
                let _ = utf8_casefold(c.to_string().as_bytes());
            }
        }
    }
}
