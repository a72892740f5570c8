//! Android sparse images (AOSP libsparse's format, what fastboot flashes and
//! img2simg writes): a header, then chunks that each cover a run of output
//! blocks with RAW data, a 4-byte FILL pattern, nothing (DONT_CARE: read as
//! zeros, as simg2img leaves them) or a CRC32 of everything before it.
//!
//! [`SparseDevice`] reads such an image in place through an index of its
//! chunks (read-only: a write would have to re-encode the file);
//! [`write_sparse`] and [`SparseDevice::expand`] convert between raw and
//! sparse files; [`encode_sparse_file`], [`expand_sparse_file`] and
//! [`RawWorkCopy`] do it for image files by path, as every writer of a
//! sparse image needs.
//! Every field of a hostile file is checked before use: the index is bounded
//! by the file's length, never by a stored count alone.

use crate::device::{BlockDevice, FileDevice, FileDeviceOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::image_lock::lock_image;
use f2fuse_layout::Corrupt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const SPARSE_MAGIC: u32 = 0xED26_FF3A;
const MAJOR_VERSION: u16 = 1;
const CHUNK_RAW: u16 = 0xCAC1;
const CHUNK_FILL: u16 = 0xCAC2;
const CHUNK_DONT_CARE: u16 = 0xCAC3;
const CHUNK_CRC32: u16 = 0xCAC4;

/// `sparse_header_t`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
pub struct SparseHeader {
    pub magic: U32,
    pub major_version: U16,
    pub minor_version: U16,
    /// Bytes from the file's start to the first chunk (28, or more).
    pub file_hdr_sz: U16,
    /// Bytes of each chunk header (12, or more).
    pub chunk_hdr_sz: U16,
    pub blk_sz: U32,
    /// Blocks of the expanded image.
    pub total_blks: U32,
    pub total_chunks: U32,
    /// CRC-32 of the expanded image; writers put 0 and readers ignore it.
    pub image_checksum: U32,
}

/// `chunk_header_t`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
struct ChunkHeader {
    chunk_type: U16,
    reserved1: U16,
    /// Output blocks this chunk covers.
    chunk_sz: U32,
    /// Bytes of the chunk in the file, header included.
    total_sz: U32,
}

const FILE_HEADER_LEN: usize = std::mem::size_of::<SparseHeader>();
const CHUNK_HEADER_LEN: usize = std::mem::size_of::<ChunkHeader>();
const _: () = assert!(FILE_HEADER_LEN == 28 && CHUNK_HEADER_LEN == 12);

/// The block size we write, F2FS's: chunk boundaries fall on F2FS blocks.
const BLOCK: usize = 4096;
/// Longest RAW chunk we write (as mkfs.f2fs -S): `total_sz` is 32-bit.
const MAX_RAW_BLOCKS: u64 = (1 << 30) / BLOCK as u64;

/// Whether the file at `path` starts with the sparse magic (false when it
/// cannot be read: opening it as an image then reports why).
pub fn is_sparse_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut magic, 0))
        .is_ok_and(|()| u32::from_le_bytes(magic) == SPARSE_MAGIC)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// Bytes stored in the sparse file from this offset on.
    Raw {
        file_offset: u64,
    },
    Fill([u8; 4]),
    DontCare,
}

/// One run of output bytes.
#[derive(Debug, Clone, Copy)]
struct Extent {
    start: u64,
    len: u64,
    content: Content,
}

/// A CRC32 chunk: the checksum of the first `covered` output bytes.
#[derive(Debug, Clone, Copy)]
struct Checksum {
    covered: u64,
    crc: u32,
}

/// An Android sparse image read in place, block-addressed like the raw
/// image it stands for.
pub struct SparseDevice {
    source: Box<dyn BlockDevice>,
    header: SparseHeader,
    /// Non-empty extents in output order, contiguous from 0 to `size`.
    extents: Vec<Extent>,
    checksums: Vec<Checksum>,
    size: u64,
}

fn bad(detail: impl Into<String>) -> Error {
    Corrupt::new("sparse image", detail).into()
}

impl SparseDevice {
    /// Reads and checks the header and every chunk header of `source`, as
    /// libsparse does when it imports a file: version 1, header sizes at
    /// least the standard ones (larger ones are skipped), a block size that
    /// is a non-zero multiple of 4, each chunk's size exactly what its type
    /// needs, all data inside the file, and the chunks covering exactly
    /// `total_blks` blocks.
    pub fn open(source: Box<dyn BlockDevice>) -> Result<SparseDevice> {
        let file_len = source.size();
        let read = |offset: u64, buf: &mut [u8], what: &str| -> Result<()> {
            if offset
                .checked_add(buf.len() as u64)
                .is_none_or(|end| end > file_len)
            {
                return Err(bad(format!(
                    "{what} at byte {offset} runs past the end of the file ({file_len} bytes)"
                )));
            }
            source
                .read_at(offset, buf)
                .map_err(|e| Error::io(format!("reading the sparse image at byte {offset}"), e))
        };
        let mut raw = [0u8; FILE_HEADER_LEN];
        read(0, &mut raw, "the file header")?;
        let header = SparseHeader::read_from_bytes(&raw).expect("exact size");
        if header.magic.get() != SPARSE_MAGIC {
            return Err(bad(format!(
                "magic {:#010x} (expected {SPARSE_MAGIC:#010x})",
                header.magic.get()
            )));
        }
        if header.major_version.get() != MAJOR_VERSION {
            return Err(bad(format!(
                "major version {} (only {MAJOR_VERSION} is defined)",
                header.major_version.get()
            )));
        }
        let file_hdr_sz = header.file_hdr_sz.get() as u64;
        let chunk_hdr_sz = header.chunk_hdr_sz.get() as u64;
        let blk_sz = header.blk_sz.get() as u64;
        if file_hdr_sz < FILE_HEADER_LEN as u64 || chunk_hdr_sz < CHUNK_HEADER_LEN as u64 {
            return Err(bad(format!(
                "header sizes {file_hdr_sz}/{chunk_hdr_sz} below the format's {FILE_HEADER_LEN}/{CHUNK_HEADER_LEN}"
            )));
        }
        if blk_sz == 0 || !blk_sz.is_multiple_of(4) {
            return Err(bad(format!("block size {blk_sz} is not a multiple of 4")));
        }
        let total_blks = header.total_blks.get() as u64;
        let mut extents = Vec::new();
        let mut checksums = Vec::new();
        let mut pos = file_hdr_sz;
        let mut block = 0u64;
        for index in 0..header.total_chunks.get() {
            let at = |detail: String| -> Error {
                Corrupt::new("sparse image", detail)
                    .at(format!("chunk {index} (byte {pos})"))
                    .into()
            };
            let mut raw = [0u8; CHUNK_HEADER_LEN];
            read(pos, &mut raw, &format!("chunk {index}'s header"))?;
            let chunk = ChunkHeader::read_from_bytes(&raw).expect("exact size");
            let blocks = chunk.chunk_sz.get() as u64;
            let total_sz = chunk.total_sz.get() as u64;
            let data_len = total_sz.checked_sub(chunk_hdr_sz).ok_or_else(|| {
                at(format!(
                    "total_sz {total_sz} is below the chunk header size"
                ))
            })?;
            let chunk_type = chunk.chunk_type.get();
            let want = match chunk_type {
                CHUNK_RAW => blocks * blk_sz,
                CHUNK_FILL | CHUNK_CRC32 => 4,
                CHUNK_DONT_CARE => 0,
                other => return Err(at(format!("unknown chunk type {other:#06x}"))),
            };
            if data_len != want {
                return Err(at(format!(
                    "type {chunk_type:#06x} needs {want} data bytes, total_sz says {data_len}"
                )));
            }
            let payload_at = pos + chunk_hdr_sz;
            if payload_at + data_len > file_len {
                return Err(at(format!(
                    "its {data_len} data bytes run past the end of the file ({file_len} bytes)"
                )));
            }
            let mut word = [0u8; 4];
            if want == 4 {
                read(payload_at, &mut word, "a chunk's 4 data bytes")?;
            }
            let content = match chunk_type {
                CHUNK_RAW => Some(Content::Raw {
                    file_offset: payload_at,
                }),
                CHUNK_FILL => Some(Content::Fill(word)),
                CHUNK_DONT_CARE => Some(Content::DontCare),
                _ => {
                    checksums.push(Checksum {
                        covered: block * blk_sz,
                        crc: u32::from_le_bytes(word),
                    });
                    // libsparse ignores a CRC32 chunk's chunk_sz: it covers nothing.
                    None
                }
            };
            if let Some(content) = content {
                if block + blocks > total_blks {
                    return Err(at(format!(
                        "its {blocks} blocks end past the image's {total_blks} blocks"
                    )));
                }
                if blocks > 0 {
                    extents.push(Extent {
                        start: block * blk_sz,
                        len: blocks * blk_sz,
                        content,
                    });
                }
                block += blocks;
            }
            pos += total_sz;
        }
        if block != total_blks {
            return Err(bad(format!(
                "the chunks cover {block} blocks, the header says {total_blks}"
            )));
        }
        Ok(SparseDevice {
            source,
            header,
            extents,
            checksums,
            size: total_blks * blk_sz,
        })
    }

    /// The sparse image's header.
    pub fn header(&self) -> &SparseHeader {
        &self.header
    }

    /// How many RAW, FILL and DONT_CARE runs of output the image holds.
    pub fn extent_count(&self) -> usize {
        self.extents.len()
    }

    /// Writes the expanded image to `out` (which must be empty): RAW data
    /// copied, zero fills and DONT_CARE left as holes, other fills written.
    /// CRC32 chunks are checked on the way (simg2img does not check them).
    pub fn expand(&self, out: &File) -> Result<()> {
        let mut crc = crc32fast::Hasher::new();
        let mut checksums = self.checksums.iter().peekable();
        let mut buf = vec![0u8; 1 << 20];
        let check = |crc: &crc32fast::Hasher, sum: &Checksum| -> Result<()> {
            let got = crc.clone().finalize();
            if got != sum.crc {
                return Err(bad(format!(
                    "CRC32 chunk after {} bytes says {:#010x}, the data gives {got:#010x}",
                    sum.covered, sum.crc
                )));
            }
            Ok(())
        };
        let write_err = |e| Error::io("writing the expanded image", e);
        for extent in &self.extents {
            while let Some(sum) = checksums.next_if(|s| s.covered <= extent.start) {
                check(&crc, sum)?;
            }
            let mut done = 0;
            while done < extent.len {
                let n = (extent.len - done).min(buf.len() as u64) as usize;
                let piece = &mut buf[..n];
                self.read_at(extent.start + done, piece)
                    .map_err(|e| Error::io("reading the sparse image", e))?;
                if !self.checksums.is_empty() {
                    crc.update(piece);
                }
                if piece.iter().any(|&b| b != 0) {
                    out.write_all_at(piece, extent.start + done)
                        .map_err(write_err)?;
                }
                done += n as u64;
            }
        }
        for sum in checksums {
            check(&crc, sum)?;
        }
        out.set_len(self.size).map_err(write_err)?;
        out.sync_all().map_err(write_err)
    }
}

impl BlockDevice for SparseDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "beyond the device end",
            ));
        }
        let mut index = self.extents.partition_point(|e| e.start + e.len <= offset);
        let mut done = 0;
        while done < buf.len() {
            let extent = &self.extents[index];
            let pos = offset + done as u64;
            let within = pos - extent.start;
            let n = ((extent.len - within) as usize).min(buf.len() - done);
            let out = &mut buf[done..done + n];
            match extent.content {
                Content::Raw { file_offset } => self.source.read_at(file_offset + within, out)?,
                Content::Fill(pattern) => {
                    // Output offsets are multiples of 4 at every block start.
                    for (i, byte) in out.iter_mut().enumerate() {
                        *byte = pattern[(within as usize + i) % 4];
                    }
                }
                Content::DontCare => out.fill(0),
            }
            done += n;
            index += 1;
        }
        Ok(())
    }

    fn write_at(&self, _offset: u64, _buf: &[u8]) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// What one block of a raw image becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    Fill([u8; 4]),
}

fn classify(block: &[u8]) -> Kind {
    let pattern: [u8; 4] = block[..4].try_into().expect("blocks are 4 KiB");
    if block.chunks_exact(4).all(|word| word == pattern) {
        Kind::Fill(pattern)
    } else {
        Kind::Raw
    }
}

/// The next data region at or after `offset` of a file with holes (the
/// whole rest when the host cannot tell): `None` past the last data.
fn next_data(file: &File, offset: u64, len: u64) -> Option<(u64, u64)> {
    // SAFETY: lseek on an open descriptor; the results are only positions.
    let (data, hole) = unsafe {
        let fd = file.as_raw_fd();
        let data = libc::lseek(fd, offset as libc::off_t, libc::SEEK_DATA);
        if data < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                return None;
            }
            return Some((offset, len));
        }
        (data, libc::lseek(fd, data, libc::SEEK_HOLE))
    };
    let start = (data as u64 / BLOCK as u64) * BLOCK as u64;
    let end = if hole < 0 {
        len
    } else {
        (hole as u64).min(len)
    };
    Some((start, end.div_ceil(BLOCK as u64) * BLOCK as u64))
}

/// The chunks being written: a RAW chunk's header is written when it ends.
struct SparseWriter<'a> {
    out: &'a File,
    /// Where the next chunk goes.
    pos: u64,
    chunks: u32,
    /// The open run: its kind and length in blocks.
    run: Option<(Kind, u64)>,
    /// Where the open RAW chunk's header goes.
    raw_header_at: u64,
}

impl SparseWriter<'_> {
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all_at(bytes, at)
            .map_err(|e| Error::io("writing the sparse image", e))
    }

    fn chunk_header(&mut self, at: u64, chunk_type: u16, blocks: u64, data_len: u64) -> Result<()> {
        let header = ChunkHeader {
            chunk_type: chunk_type.into(),
            reserved1: 0.into(),
            chunk_sz: (blocks as u32).into(),
            total_sz: ((CHUNK_HEADER_LEN as u64 + data_len) as u32).into(),
        };
        self.chunks += 1;
        self.write(at, header.as_bytes())
    }

    /// Ends the open run with its chunk header (and a fill's pattern).
    fn close_run(&mut self) -> Result<()> {
        match self.run.take() {
            Some((Kind::Raw, blocks)) => {
                self.chunk_header(self.raw_header_at, CHUNK_RAW, blocks, blocks * BLOCK as u64)
            }
            Some((Kind::Fill(pattern), blocks)) => {
                self.chunk_header(self.pos, CHUNK_FILL, blocks, 4)?;
                self.write(self.pos + CHUNK_HEADER_LEN as u64, &pattern)?;
                self.pos += CHUNK_HEADER_LEN as u64 + 4;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Adds one block of the image, in order.
    fn push(&mut self, kind: Kind, data: &[u8]) -> Result<()> {
        let continues = match self.run {
            Some((run_kind, blocks)) => {
                run_kind == kind && (kind != Kind::Raw || blocks < MAX_RAW_BLOCKS)
            }
            None => false,
        };
        if !continues {
            self.close_run()?;
            if kind == Kind::Raw {
                self.raw_header_at = self.pos;
                self.pos += CHUNK_HEADER_LEN as u64;
            }
            self.run = Some((kind, 0));
        }
        if kind == Kind::Raw {
            self.write(self.pos, data)?;
            self.pos += data.len() as u64;
        }
        if let Some((_, blocks)) = &mut self.run {
            *blocks += 1;
        }
        Ok(())
    }

    fn fill_zeros(&mut self, blocks: u64) -> Result<()> {
        if blocks == 0 {
            return Ok(());
        }
        let zero = Kind::Fill([0; 4]);
        if !matches!(self.run, Some((kind, _)) if kind == zero) {
            self.close_run()?;
            self.run = Some((zero, 0));
        }
        if let Some((_, run)) = &mut self.run {
            *run += blocks;
        }
        Ok(())
    }
}

/// Writes the raw image `raw` to `out` (which must be empty) as a sparse
/// image, as img2simg does: 4 KiB blocks, runs of blocks repeating one
/// 32-bit pattern (zeros above all, and the raw file's holes) as FILL
/// chunks, everything else as RAW chunks of at most 1 GiB; no DONT_CARE
/// (flashing must reproduce every block) and no checksum.
pub fn write_sparse(raw: &File, out: &File) -> Result<()> {
    let len = raw
        .metadata()
        .map_err(|e| Error::io("sizing the raw image", e))?
        .len();
    if !len.is_multiple_of(BLOCK as u64) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("raw image of {len} bytes: not a whole number of 4 KiB blocks"),
        ));
    }
    let total_blks = u32::try_from(len / BLOCK as u64).map_err(|_| {
        Error::new(
            ErrorKind::FileTooLarge,
            format!("raw image of {len} bytes: a sparse image holds at most 2^32 - 1 blocks"),
        )
    })?;
    let mut w = SparseWriter {
        out,
        pos: FILE_HEADER_LEN as u64,
        chunks: 0,
        run: None,
        raw_header_at: 0,
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0;
    while offset < len {
        let Some((start, end)) = next_data(raw, offset, len) else {
            break;
        };
        w.fill_zeros((start - offset) / BLOCK as u64)?;
        let mut at = start;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            raw.read_exact_at(&mut buf[..n], at)
                .map_err(|e| Error::io(format!("reading the raw image at byte {at}"), e))?;
            for block in buf[..n].chunks_exact(BLOCK) {
                w.push(classify(block), block)?;
            }
            at += n as u64;
        }
        offset = end;
    }
    w.fill_zeros((len - offset) / BLOCK as u64)?;
    w.close_run()?;
    let header = SparseHeader {
        magic: SPARSE_MAGIC.into(),
        major_version: MAJOR_VERSION.into(),
        minor_version: 0.into(),
        file_hdr_sz: (FILE_HEADER_LEN as u16).into(),
        chunk_hdr_sz: (CHUNK_HEADER_LEN as u16).into(),
        blk_sz: (BLOCK as u32).into(),
        total_blks: total_blks.into(),
        total_chunks: w.chunks.into(),
        image_checksum: 0.into(),
    };
    w.write(0, header.as_bytes())?;
    out.set_len(w.pos)
        .and_then(|()| out.sync_all())
        .map_err(|e| Error::io("writing the sparse image", e))
}

/// Encodes the raw image file `raw` as an Android sparse image `out`,
/// created or replaced (under its image lock if it exists: it may be
/// mounted); a failure removes what was written.
pub fn encode_sparse_file(raw: &Path, out: &Path) -> Result<()> {
    if is_sparse_file(raw) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{}: is already an Android sparse image", raw.display()),
        ));
    }
    distinct(raw, out)?;
    let input = File::open(raw).map_err(|e| Error::io(format!("opening {}", raw.display()), e))?;
    write_new(out, |file| write_sparse(&input, file))
}

/// Expands the Android sparse image file `sparse` into a raw image `out`,
/// created or replaced as by [`encode_sparse_file`].
pub fn expand_sparse_file(sparse: &Path, out: &Path) -> Result<()> {
    if !is_sparse_file(sparse) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{}: not an Android sparse image (no magic 0xed26ff3a at byte 0)",
                sparse.display()
            ),
        ));
    }
    distinct(sparse, out)?;
    let file = FileDevice::open(sparse, FileDeviceOptions::default())?;
    let input = SparseDevice::open(Box::new(file))?;
    write_new(out, |file| input.expand(file))
}

/// Refuses to write a file over itself (it would be truncated before it is read).
fn distinct(input: &Path, out: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (std::fs::metadata(input), std::fs::metadata(out)) {
        if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{}: input and output are the same file", out.display()),
            ));
        }
    }
    Ok(())
}

/// Runs `write` on `out`, created or truncated under its lock if it
/// exists; a failure removes what it wrote.
fn write_new(out: &Path, write: impl FnOnce(&File) -> Result<()>) -> Result<()> {
    let _lock = match std::fs::metadata(out) {
        // The lock's errors name no file; this one is about `out`.
        Ok(_) => Some(lock_image(out).map_err(|e| match e {
            Error::Refused { kind, context } => {
                Error::new(kind, format!("{}: {context}", out.display()))
            }
            Error::Io { context, source } => {
                Error::io(format!("{context} {}", out.display()), source)
            }
            other => other,
        })?),
        Err(_) => None,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(out)
        .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    write(&file).inspect_err(|_| {
        let _ = std::fs::remove_file(out);
    })
}

/// A raw working copy of a sparse image, next to it, for writing it: F2FS
/// is written raw, then encoded ([`expand_from`](Self::expand_from), work
/// on [`path`](Self::path), [`store_into`](Self::store_into)). Removed
/// when dropped.
pub struct RawWorkCopy {
    path: PathBuf,
}

impl RawWorkCopy {
    /// The working copy's path for `image` (nothing is written yet; a copy
    /// left by an interrupted run is removed).
    pub fn beside(image: &Path) -> RawWorkCopy {
        let mut name = image.as_os_str().to_owned();
        name.push(".raw-tmp");
        let _ = std::fs::remove_file(&name);
        RawWorkCopy { path: name.into() }
    }

    /// Where the raw copy is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Expands the sparse `image` into the working copy.
    pub fn expand_from(&self, image: &Path) -> Result<()> {
        expand_sparse_file(image, &self.path)
    }

    /// Encodes the working copy into `image`.
    pub fn store_into(&self, image: &Path) -> Result<()> {
        encode_sparse_file(&self.path, image)
    }
}

impl Drop for RawWorkCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use proptest::prelude::*;

    fn header(total_blks: u32, total_chunks: u32) -> Vec<u8> {
        SparseHeader {
            magic: SPARSE_MAGIC.into(),
            major_version: 1.into(),
            minor_version: 0.into(),
            file_hdr_sz: 28.into(),
            chunk_hdr_sz: 12.into(),
            blk_sz: 4096.into(),
            total_blks: total_blks.into(),
            total_chunks: total_chunks.into(),
            image_checksum: 0.into(),
        }
        .as_bytes()
        .to_vec()
    }

    fn chunk(out: &mut Vec<u8>, chunk_type: u16, blocks: u32, payload: &[u8]) {
        let h = ChunkHeader {
            chunk_type: chunk_type.into(),
            reserved1: 0.into(),
            chunk_sz: blocks.into(),
            total_sz: (12 + payload.len() as u32).into(),
        };
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(payload);
    }

    /// RAW 1, FILL 2 (pattern), DONT_CARE 1, CRC32, RAW 1.
    fn sample() -> (Vec<u8>, Vec<u8>) {
        let mut file = header(5, 5);
        let raw1: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        let raw2 = vec![0x5A; 4096];
        chunk(&mut file, CHUNK_RAW, 1, &raw1);
        chunk(&mut file, CHUNK_FILL, 2, &[1, 2, 3, 4]);
        chunk(&mut file, CHUNK_DONT_CARE, 1, &[]);
        let mut expanded = raw1.clone();
        expanded.extend(std::iter::repeat_n([1u8, 2, 3, 4], 2048).flatten());
        expanded.extend(vec![0; 4096]);
        let crc = crc32fast::hash(&expanded);
        chunk(&mut file, CHUNK_CRC32, 0, &crc.to_le_bytes());
        chunk(&mut file, CHUNK_RAW, 1, &raw2);
        expanded.extend(raw2);
        (file, expanded)
    }

    fn open(bytes: Vec<u8>) -> Result<SparseDevice> {
        SparseDevice::open(Box::new(MemDevice::from_bytes(bytes)))
    }

    #[test]
    fn reads_every_chunk_type_at_any_offset() {
        let (file, expanded) = sample();
        let dev = open(file).unwrap();
        assert_eq!(dev.size(), expanded.len() as u64);
        assert_eq!(dev.extent_count(), 4);
        let mut all = vec![0u8; expanded.len()];
        dev.read_at(0, &mut all).unwrap();
        assert_eq!(all, expanded);
        for (offset, len) in [(4090, 10), (4097, 8191), (12288 + 5, 8000), (20479, 1)] {
            let mut part = vec![0u8; len];
            dev.read_at(offset, &mut part).unwrap();
            assert_eq!(part, expanded[offset as usize..offset as usize + len]);
        }
        let mut past = [0u8; 2];
        assert!(dev.read_at(expanded.len() as u64 - 1, &mut past).is_err());
        assert!(dev.write_at(0, &[0; 4096]).is_err());
    }

    #[test]
    fn larger_headers_are_skipped() {
        let mut file = header(1, 1);
        file[8] = 32; // file_hdr_sz
        file[10] = 16; // chunk_hdr_sz
        file.extend_from_slice(&[0xEE; 4]);
        let mut chunk_bytes = Vec::new();
        chunk(&mut chunk_bytes, CHUNK_FILL, 1, &[]);
        chunk_bytes[8..12].copy_from_slice(&(16u32 + 4).to_le_bytes());
        file.extend_from_slice(&chunk_bytes[..12]);
        file.extend_from_slice(&[0xEE; 4]);
        file.extend_from_slice(&[7, 7, 7, 7]);
        let dev = open(file).unwrap();
        let mut block = vec![0u8; 4096];
        dev.read_at(0, &mut block).unwrap();
        assert!(block.iter().all(|&b| b == 7));
    }

    fn expect_error(bytes: Vec<u8>, want: &str) {
        match open(bytes) {
            Err(e) => assert!(e.to_string().contains(want), "{e} lacks {want:?}"),
            Ok(_) => panic!("accepted, expected an error with {want:?}"),
        }
    }

    #[test]
    fn hostile_headers_are_refused_with_a_reason() {
        let (good, _) = sample();
        let patch = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        expect_error(patch(0, &[0; 4]), "magic");
        expect_error(patch(4, &2u16.to_le_bytes()), "major version 2");
        expect_error(patch(8, &20u16.to_le_bytes()), "header sizes");
        expect_error(patch(12, &4098u32.to_le_bytes()), "not a multiple of 4");
        expect_error(
            patch(16, &4u32.to_le_bytes()),
            "end past the image's 4 blocks",
        );
        expect_error(
            patch(16, &6u32.to_le_bytes()),
            "cover 5 blocks, the header says 6",
        );
        expect_error(
            patch(20, &6u32.to_le_bytes()),
            "runs past the end of the file",
        );
        expect_error(
            patch(20, &u32::MAX.to_le_bytes()),
            "runs past the end of the file",
        );
        expect_error(
            patch(28, &0xCAC5u16.to_le_bytes()),
            "unknown chunk type 0xcac5",
        );
        expect_error(patch(32, &2u32.to_le_bytes()), "needs 8192 data bytes");
        expect_error(
            patch(36, &4u32.to_le_bytes()),
            "below the chunk header size",
        );
        expect_error(
            good[..good.len() - 1].to_vec(),
            "run past the end of the file",
        );
        expect_error(good[..10].to_vec(), "the file header");
    }

    #[test]
    fn a_wrong_crc32_chunk_fails_expansion() {
        let (mut file, _) = sample();
        let crc_at = 28 + 12 + 4096 + 16 + 12 + 12;
        file[crc_at] ^= 1;
        let dev = open(file).unwrap();
        let dir = std::env::temp_dir().join(format!("f2fuse-sparse-crc-{}", std::process::id()));
        let out = File::create(&dir).unwrap();
        let err = dev.expand(&out).unwrap_err().to_string();
        std::fs::remove_file(&dir).unwrap();
        assert!(err.contains("CRC32 chunk after 16384 bytes"), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any bytes at all, and any edit of a valid image: an error or a
        /// device whose every byte can be read, never a panic.
        #[test]
        fn hostile_files_never_panic(
            edits in proptest::collection::vec((0usize..8300, any::<u8>()), 0..8),
            cut in 0usize..8400,
            noise in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (mut file, _) = sample();
            for (at, byte) in edits {
                let at = at % file.len();
                file[at] = byte;
            }
            file.truncate(cut.max(4));
            for bytes in [file, noise] {
                if let Ok(dev) = open(bytes) {
                    let mut buf = vec![0u8; dev.size().min(1 << 16) as usize];
                    let _ = dev.read_at(0, &mut buf);
                }
            }
        }
    }
}
