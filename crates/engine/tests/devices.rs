//! The engine on every kind of backing store: image file, image file with
//! O_DIRECT, a loop block device, and memory.

mod support;

use f2fuse_engine::device::{AlignedBuf, MemDevice};
use f2fuse_engine::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::F2FS_ROOT_INO;
use std::path::Path;
use std::process::Command;
use support::{fsck_f2fs, require_f2fs_tools, sload_f2fs, Scratch};

/// A small image with one multi-block file, built by sload.f2fs.
fn sample_image(scratch: &Scratch) -> (std::path::PathBuf, Vec<u8>) {
    let src = scratch.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(src.join("data.bin"), &data).unwrap();
    let img = scratch.path().join("img");
    format_path(&img, Some(96 << 20), &MkfsOptions::default()).unwrap();
    sload_f2fs(&img, &src);
    fsck_f2fs(&img).unwrap();
    (img, data)
}

fn read_all(fs: &Fs, path: &str) -> Vec<u8> {
    let inode = fs.resolve(path).unwrap();
    let mut out = vec![0u8; inode.size as usize];
    let n = fs.read(&inode, 0, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

#[test]
fn image_file_buffered_and_direct() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("devices");
    let (img, data) = sample_image(&scratch);
    for direct in [false, true] {
        let fs = Fs::open_path(
            &img,
            OpenOptions {
                direct,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(read_all(&fs, "/data.bin"), data, "direct={direct}");
    }
    let bytes = std::fs::read(&img).unwrap();
    let fs = Fs::open(Box::new(MemDevice::from_bytes(bytes))).unwrap();
    assert_eq!(read_all(&fs, "/data.bin"), data);
}

struct LoopDevice(String);

impl LoopDevice {
    fn attach(img: &Path) -> Option<LoopDevice> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(img)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!("losetup failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        Some(LoopDevice(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn loop_block_device() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("loopdev");
    let (img, data) = sample_image(&scratch);
    let Some(dev) = LoopDevice::attach(&img) else {
        // CI runs as root with loop devices; elsewhere this may be impossible.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to attach a loop device"
        );
        eprintln!("SKIPPING loop device test: cannot attach a loop device here");
        return;
    };
    let fs = Fs::open_path(Path::new(&dev.0), OpenOptions::default()).unwrap();
    assert_eq!(fs.device().size(), std::fs::metadata(&img).unwrap().len());
    assert_eq!(read_all(&fs, "/data.bin"), data);
    let names: Vec<Vec<u8>> = fs
        .read_dir(F2FS_ROOT_INO)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&b"data.bin".to_vec()));
}

/// Pages of `path` in the host's page cache (mincore over a mapping).
fn resident_pages(path: &Path) -> usize {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: a read-only shared mapping of a file we hold open, unmapped
    // before the function returns; mincore writes one byte per page of it.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
        libc::munmap(addr, len);
    }
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

/// Drops the clean pages of `path` from the host's page cache.
fn drop_cached_pages(path: &Path) {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a valid descriptor; the advice touches no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// With `data_cached_above` (the FUSE mount's choice) large reads into an
/// aligned buffer go around the image's page cache, and still see data
/// written a moment before and not yet flushed; reads into unaligned
/// buffers and small reads return the same bytes. Without it the same reads
/// fill the page cache: the residency check can tell the two apart.
#[test]
fn data_cached_above_reads_around_the_page_cache_and_sees_every_write() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("devices-uncached");
    let img = scratch.path().join("img");
    let file_len = 4 << 20;
    for data_cached_above in [true, false] {
        format_path(&img, Some(96 << 20), &MkfsOptions::default()).unwrap();
        let opts = OpenOptions {
            writable: true,
            data_cached_above,
            ..Default::default()
        };
        let fs = Fs::open_path(&img, opts).unwrap();
        let file = fs.create(F2FS_ROOT_INO, b"big", 0o644, 0, 0).unwrap();
        let mut model: Vec<u8> = (0..file_len as u32)
            .map(|i| (i * 7 + i / 4093) as u8)
            .collect();
        fs.write(file.ino, 0, &model).unwrap();
        fs.checkpoint().unwrap();
        drop_cached_pages(&img);
        let before = resident_pages(&img);
        let read_aligned = |fs: &Fs, offset: u64, len: usize| {
            let inode = fs.resolve("/big").unwrap();
            let mut buf = AlignedBuf::new(len);
            assert_eq!(fs.read(&inode, offset, &mut buf).unwrap(), len);
            buf.to_vec()
        };
        assert_eq!(read_aligned(&fs, 0, file_len), model);
        let filled = resident_pages(&img) - before;
        if data_cached_above {
            assert!(
                filled < 64,
                "{filled} pages of the image cached by an uncached read"
            );
        } else {
            assert!(
                filled >= file_len / 4096,
                "only {filled} pages cached by a cached read"
            );
        }
        // Rewritten, not flushed, read again at once: in place and out of place.
        let patch = vec![0xa5u8; 1 << 20];
        fs.write(file.ino, 1 << 20, &patch).unwrap();
        model[1 << 20..2 << 20].copy_from_slice(&patch);
        assert_eq!(read_aligned(&fs, 0, file_len), model);
        assert_eq!(
            read_aligned(&fs, 768 << 10, 1 << 20),
            model[768 << 10..1792 << 10]
        );
        let inode = fs.resolve("/big").unwrap();
        let mut unaligned = vec![0u8; (1 << 20) + 3];
        fs.read(&inode, 12_345, &mut unaligned[3..]).unwrap();
        assert_eq!(unaligned[3..], model[12_345..12_345 + (1 << 20)]);
        fs.unmount().unwrap();
        fsck_f2fs(&img).unwrap();
    }
}
