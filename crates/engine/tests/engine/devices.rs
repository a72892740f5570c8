//! The engine on every kind of backing store: image file, image file with
//! O_DIRECT, a loop block device, and memory.

use f2fuse_testkit as support;

use f2fuse_engine::internals::device::{BlockDevice, MemDevice, LARGE_DATA_WRITE};
use f2fuse_engine::internals::mkfs::{format_path, MkfsOptions};
use f2fuse_engine::internals::FsInternals;
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

/// What reached a device by which call: (offset, len, through write_data_at).
#[derive(Clone, Default)]
struct WriteLog(std::sync::Arc<std::sync::Mutex<Vec<(u64, usize, bool)>>>);

/// A memory device that logs its writes.
struct LoggingDevice {
    inner: MemDevice,
    log: WriteLog,
}

impl BlockDevice for LoggingDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.0.lock().unwrap().push((offset, buf.len(), false));
        self.inner.write_at(offset, buf)
    }
    fn write_data_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.0.lock().unwrap().push((offset, buf.len(), true));
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Write-behind takes large runs of file data only: a 1 MiB file's data
/// goes to `write_data_at` in runs of at least LARGE_DATA_WRITE, while a
/// 4 KiB rewrite, nodes, dentry blocks and checkpoints take `write_at`.
#[test]
fn large_file_data_writes_take_the_write_behind_path() {
    let scratch = Scratch::new("devices-write-behind");
    let img = scratch.path().join("img");
    format_path(&img, Some(96 << 20), &MkfsOptions::default()).unwrap();
    let log = WriteLog::default();
    let dev = LoggingDevice {
        inner: MemDevice::from_bytes(std::fs::read(&img).unwrap()),
        log: log.clone(),
    };
    let fs = Fs::open_writable(Box::new(dev)).unwrap();
    let file = fs.create(F2FS_ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    fs.write(file.ino, 0, &data).unwrap();
    let bulk: Vec<_> = std::mem::take(&mut *log.0.lock().unwrap());
    let through_data: usize = bulk.iter().filter(|w| w.2).map(|w| w.1).sum();
    assert_eq!(through_data, data.len(), "writes: {bulk:?}");
    assert!(bulk.iter().filter(|w| w.2).all(|w| w.1 >= LARGE_DATA_WRITE));
    fs.write(file.ino, 8192, &[7u8; 4096]).unwrap();
    fs.fsync(file.ino).unwrap();
    fs.checkpoint().unwrap();
    let rest = log.0.lock().unwrap().clone();
    assert!(
        !rest.is_empty() && rest.iter().all(|w| !w.2),
        "writes: {rest:?}"
    );
}

/// The mount's setting on an image file: the data reads back and the image
/// passes fsck.f2fs.
#[test]
fn write_behind_image_reads_back_and_passes_fsck() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("devices-write-behind-file");
    let img = scratch.path().join("img");
    format_path(&img, Some(96 << 20), &MkfsOptions::default()).unwrap();
    let opts = OpenOptions {
        writable: true,
        write_behind: true,
        ..Default::default()
    };
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 13 + i / 4099) as u8).collect();
    let fs = Fs::open_path(&img, opts).unwrap();
    let file = fs.create(F2FS_ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        fs.write(file.ino, (i << 20) as u64, chunk).unwrap();
    }
    fs.fsync(file.ino).unwrap();
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    assert_eq!(read_all(&fs, "/big"), data);
}

/// The mount's read-ahead: a file read by four threads in interleaved
/// 1 MiB pieces (as the FUSE threads answer readahead requests), rewritten
/// in part and read again, reads back what was written; the image passes
/// fsck.f2fs.
#[test]
fn read_ahead_image_reads_back_across_rewrites() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("devices-read-ahead");
    let img = scratch.path().join("img");
    format_path(&img, Some(128 << 20), &MkfsOptions::default()).unwrap();
    let opts = OpenOptions {
        writable: true,
        write_behind: true,
        read_ahead: 8 << 20,
        ..Default::default()
    };
    let mut data: Vec<u8> = (0..24u32 << 20)
        .map(|i| (i * 31 + i / 4091) as u8)
        .collect();
    let fs = Fs::open_path(&img, opts).unwrap();
    let ino = fs.create(F2FS_ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &data).unwrap();
    fs.fsync(ino).unwrap();
    let read_interleaved = |fs: &Fs, expected: &[u8]| {
        std::thread::scope(|scope| {
            for t in 0..4usize {
                scope.spawn(move || {
                    let mut buf = vec![0u8; 1 << 20];
                    for piece in (t..expected.len() >> 20).step_by(4) {
                        let at = piece << 20;
                        assert_eq!(fs.read_ino(ino, at as u64, &mut buf).unwrap(), buf.len());
                        assert!(buf[..] == expected[at..at + (1 << 20)], "piece {piece}");
                    }
                });
            }
        })
    };
    read_interleaved(&fs, &data);
    // Rewrites land at new addresses (and in place once fsync'ed data is
    // rewritten under the in-place policy); either way reads follow them.
    for (at, len, byte) in [
        (5usize << 20, 1 << 20, 0x5a),
        (9 << 20, 300 << 10, 0xc3),
        (17 << 20, 4 << 20, 0x11),
    ] {
        data[at..at + len].fill(byte);
        fs.write(ino, at as u64, &data[at..at + len]).unwrap();
    }
    read_interleaved(&fs, &data);
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();
    let fs = Fs::open_path(
        &img,
        OpenOptions {
            read_ahead: 8 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    read_interleaved(&fs, &data);
}
