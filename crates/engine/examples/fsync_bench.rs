//! fsyncs per second: a 4 KiB pwrite + fsync loop on one file, on a memory
//! device and on an image file (real fdatasync), compared with a checkpoint
//! per write (what fsync did before roll-forward recovery).
//!
//! `cargo run -p f2fuse-engine --example fsync_bench [ITERATIONS] [IMAGE_DIR]`

use f2fuse_engine::internals::device::{
    BlockDevice, Device, FileDevice, FileDeviceOptions, MemDevice,
};
use f2fuse_engine::internals::mkfs::{format, MkfsOptions};
use f2fuse_engine::Fs;
use f2fuse_layout::F2FS_ROOT_INO;
use std::sync::Arc;
use std::time::Instant;

const SIZE: u64 = 256 << 20;

fn rate(dev: Box<dyn BlockDevice>, iterations: u32, by_checkpoint: bool) -> f64 {
    let fs = Fs::open_writable(dev).expect("open");
    fs.set_tunable("cp_interval", 3600).unwrap();
    let file = fs
        .create(F2FS_ROOT_INO, b"bench", 0o644, 0, 0)
        .expect("create");
    fs.checkpoint().expect("checkpoint");
    let block = [0x5au8; 4096];
    let start = Instant::now();
    for i in 0..iterations {
        // A rolling window of 64 blocks: the file keeps its size, as a log would.
        fs.write(file.ino, (i % 64) as u64 * 4096, &block)
            .expect("write");
        if by_checkpoint {
            fs.checkpoint().expect("checkpoint");
        } else {
            fs.fsync(file.ino).expect("fsync");
        }
    }
    let per_second = iterations as f64 / start.elapsed().as_secs_f64();
    fs.unmount().expect("unmount");
    per_second
}

fn formatted<D: BlockDevice + 'static>(dev: D) -> Box<dyn BlockDevice> {
    let dev = Arc::new(dev);
    format(
        &Device::new(Box::new(dev.clone())),
        &MkfsOptions::default(),
        true,
    )
    .expect("mkfs");
    Box::new(dev)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: u32 = args.next().map_or(2000, |a| a.parse().expect("ITERATIONS"));
    let dir = args.next().map_or_else(std::env::temp_dir, Into::into);
    let image = dir.join(format!("f2fuse-fsync-bench-{}.img", std::process::id()));
    for by_checkpoint in [true, false] {
        let label = if by_checkpoint {
            "checkpoint per fsync"
        } else {
            "fsync chain"
        };
        let mem = rate(formatted(MemDevice::new(SIZE)), iterations, by_checkpoint);
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(SIZE))
            .expect("image file");
        let open = || {
            FileDevice::open(
                &image,
                FileDeviceOptions {
                    writable: true,
                    ..Default::default()
                },
            )
            .expect("open image")
        };
        let file = rate(formatted(open()), iterations, by_checkpoint);
        println!("{label:>22}: {mem:>8.0}/s on a memory device, {file:>8.0}/s on an image file");
    }
    let _ = std::fs::remove_file(&image);
}
