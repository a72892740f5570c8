//! Write-behind for an image file: ranges of file data just written are
//! handed to one background thread, which starts their write-back
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) while the writers go on.
//!
//! Why a thread: starting write-back submits the pages to the disk's
//! queue, and when the disk is slower than the writers the queue is full
//! and the call waits. Made by the request threads, that wait capped every
//! writer at the disk's speed. The thread waits instead; ranges that pile
//! up meanwhile are merged, so the queue of ranges stays bounded however
//! far the disk lags. Writers that never sync still see a lower rate than
//! without write-behind (the disk's work now happens while they write, not
//! after); a writer that syncs finishes sooner (docs/PERFORMANCE.md,
//! "Write-behind and the image's page cache").
//!
//! Nothing here is needed for durability: only a flush (`fdatasync`) makes
//! data durable, whether its write-back started early or not. The thread
//! must never wait for the write-back it starts (`SYNC_FILE_RANGE_WAIT_*`):
//! its descriptor is a `dup` sharing the open file description, so waiting
//! would consume a write-back error the next flush has to report.

use parking_lot::{Condvar, Mutex};
use std::fs::File;
use std::ops::Range;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Ranges kept apart at most; more are merged into the one range that
/// covers them all (write-back then looks only at the dirty pages in it).
const MAX_PENDING_RANGES: usize = 64;

#[derive(Default)]
struct Pending {
    ranges: Vec<Range<u64>>,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

/// The background thread of one image file; stopped when dropped.
pub struct WriteBehind {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBehind {
    /// Starts the thread, with a duplicate of `file`'s descriptor.
    pub fn start(file: &File) -> std::io::Result<WriteBehind> {
        let file = file.try_clone()?;
        let shared = Arc::new(Shared::default());
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("f2fuse-write-behind".into())
            .spawn(move || run(&file, &worker))?;
        Ok(WriteBehind {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for the write-back of `range` of the file to start soon.
    pub fn push(&self, range: Range<u64>) {
        let mut pending = self.shared.pending.lock();
        match pending.ranges.last_mut() {
            // Sequential writers hand in neighbouring ranges: one call for both.
            Some(last) if last.end == range.start => last.end = range.end,
            _ => pending.ranges.push(range),
        }
        if pending.ranges.len() > MAX_PENDING_RANGES {
            let start = pending.ranges.iter().map(|r| r.start).min().unwrap_or(0);
            let end = pending.ranges.iter().map(|r| r.end).max().unwrap_or(0);
            pending.ranges.clear();
            pending.ranges.push(start..end);
        }
        drop(pending);
        self.shared.wake.notify_one();
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.shared.pending.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // The thread only makes system calls; it cannot panic.
            let _ = thread.join();
        }
    }
}

fn run(file: &File, shared: &Shared) {
    loop {
        let ranges = {
            let mut pending = shared.pending.lock();
            while pending.ranges.is_empty() && !pending.stop {
                shared.wake.wait(&mut pending);
            }
            if pending.stop {
                return;
            }
            std::mem::take(&mut pending.ranges)
        };
        for range in ranges {
            // SAFETY: a valid descriptor; the call starts write-back of
            // pages already written and reads no memory of ours. A failure
            // is left to the next flush, which reports the write error.
            unsafe {
                libc::sync_file_range(
                    file.as_raw_fd(),
                    range.start as libc::off64_t,
                    (range.end - range.start) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_ahead::cachestat;
    use std::os::unix::fs::FileExt;

    /// The thread really starts write-back: a pushed range's dirty pages
    /// are written within seconds, where the host alone would leave them
    /// dirty for 30 (`dirty_expire_centisecs`).
    #[test]
    fn a_pushed_range_is_written_back() {
        let path = std::env::temp_dir().join(format!("f2fuse-write-behind-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let len = 8u64 << 20;
        file.write_all_at(&vec![0x5a; len as usize], 0).unwrap();
        let unwritten = || cachestat(&file, 0, len).map(|s| s.nr_dirty + s.nr_writeback);
        match unwritten() {
            Some(0) | None => {
                eprintln!("skipped: no dirty pages to see here (tmpfs, or no cachestat)");
                return;
            }
            Some(_) => {}
        }
        let wb = WriteBehind::start(&file).unwrap();
        wb.push(0..len);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while unwritten() != Some(0) {
            assert!(
                std::time::Instant::now() < deadline,
                "still {:?} pages unwritten",
                unwritten()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn neighbours_are_joined_and_the_queue_stays_bounded() {
        let shared = Shared::default();
        let wb = WriteBehind {
            shared: Arc::new(shared),
            thread: None,
        };
        wb.push(10..20);
        wb.push(20..30);
        wb.push(40..50);
        assert_eq!(wb.shared.pending.lock().ranges, vec![10..30, 40..50]);
        for k in 0..MAX_PENDING_RANGES as u64 - 1 {
            wb.push(1000 + k * 100..1000 + k * 100 + 10);
        }
        // One more than MAX_PENDING_RANGES: merged into the one range over all.
        let last_end = 1000 + (MAX_PENDING_RANGES as u64 - 2) * 100 + 10;
        let merged = wb.shared.pending.lock().ranges.clone();
        assert_eq!((merged.len(), merged.first()), (1, Some(&(10..last_end))));
        wb.push(5..8);
        assert_eq!(wb.shared.pending.lock().ranges, [10..last_end, 5..8]);
    }
}
