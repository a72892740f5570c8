//! Streaming 64-bit FNV-1a content hash shared by the host scanner and the
//! image reader side of a comparison.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::io::AsRawFd;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Streaming 64-bit FNV-1a over file contents.
///
/// Holes must be hashed as zero bytes. Because FNV-1a of a zero byte is a
/// plain multiplication by the prime, [`ContentHasher::update_zeros`] hashes
/// any number of zeros in O(log n), so multi-GiB sparse files hash quickly;
/// it gives exactly the same result as feeding the zeros through
/// [`ContentHasher::update`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentHasher {
    state: u64,
    len: u64,
}

impl Default for ContentHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentHasher {
    /// A hasher that has seen no bytes.
    pub const fn new() -> Self {
        ContentHasher {
            state: FNV_OFFSET,
            len: 0,
        }
    }

    /// Feeds bytes. All-zero 4 KiB stretches take the [`Self::update_zeros`]
    /// shortcut (same result), so zero-filled blocks hash fast even in
    /// debug builds.
    pub fn update(&mut self, data: &[u8]) {
        const ZEROS: [u8; 4096] = [0; 4096];
        for chunk in data.chunks(ZEROS.len()) {
            if chunk == &ZEROS[..chunk.len()] {
                self.update_zeros(chunk.len() as u64);
                continue;
            }
            let mut h = self.state;
            for &b in chunk {
                h ^= u64::from(b);
                h = h.wrapping_mul(FNV_PRIME);
            }
            self.state = h;
            self.len += chunk.len() as u64;
        }
    }

    /// Feeds `n` zero bytes (a hole) in O(log n).
    pub fn update_zeros(&mut self, n: u64) {
        self.state = self.state.wrapping_mul(wrapping_pow(FNV_PRIME, n));
        self.len += n;
    }

    /// Number of bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no bytes were fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hash of everything fed so far (the hasher can keep going).
    pub fn finish(&self) -> u64 {
        self.state
    }
}

impl io::Write for ContentHasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn wrapping_pow(mut base: u64, mut exp: u64) -> u64 {
    let mut acc: u64 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

/// Hash of one byte slice.
pub fn content_hash_of(bytes: &[u8]) -> u64 {
    let mut h = ContentHasher::new();
    h.update(bytes);
    h.finish()
}

/// Hash of the concatenation of several chunks.
pub fn content_hash_of_chunks<I>(chunks: I) -> u64
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let mut h = ContentHasher::new();
    for c in chunks {
        h.update(c.as_ref());
    }
    h.finish()
}

/// Hash of a host file's contents, `len` bytes long. Holes found with
/// `SEEK_DATA`/`SEEK_HOLE` are hashed as zeros without reading them; if
/// the file system cannot report holes the whole file is read.
pub fn content_hash_of_file(file: &mut File, len: u64) -> io::Result<u64> {
    let mut h = ContentHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let fd = file.as_raw_fd();
    let mut pos: u64 = 0;
    while pos < len {
        // Where does the next data region start?
        let data = match seek_data_hole(fd, pos, libc::SEEK_DATA) {
            Ok(Some(d)) => d.min(len),
            Ok(None) => len, // only a hole remains (ENXIO)
            Err(_) => pos,   // no hole support: treat everything as data
        };
        if data > pos {
            h.update_zeros(data - pos);
            pos = data;
            if pos >= len {
                break;
            }
        }
        let hole = match seek_data_hole(fd, pos, libc::SEEK_HOLE) {
            Ok(Some(e)) => e.min(len),
            _ => len,
        };
        let hole = if hole <= pos { len } else { hole };
        file.seek(SeekFrom::Start(pos))?;
        let mut left = hole - pos;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let n = file.read(&mut buf[..want])?;
            if n == 0 {
                // The file shrank under us: hash the rest as zeros so the
                // length stays right, the comparison will show the change.
                h.update_zeros(left);
                break;
            }
            h.update(&buf[..n]);
            left -= n as u64;
        }
        pos = hole;
    }
    debug_assert_eq!(h.len(), len);
    Ok(h.finish())
}

/// `lseek(fd, pos, whence)`; `Ok(None)` for ENXIO (no data after `pos`).
fn seek_data_hole(fd: i32, pos: u64, whence: i32) -> io::Result<Option<u64>> {
    let off =
        libc::off_t::try_from(pos).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain lseek on a valid, owned file descriptor.
    let r = unsafe { libc::lseek(fd, off, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}
