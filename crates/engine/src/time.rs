//! Inode time: the timestamp type and the clock inodes are stamped with,
//! below every module that stamps or compares times (inodes, quota grace
//! times).

/// Seconds and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds (below 10^9).
    pub nsec: u32,
}

/// Current time as an inode timestamp, from the clock the kernel stamps
/// inodes with (current_time: the coarse real-time clock, updated once per
/// tick). A FUSE kernel with the write-back cache stamps the mtime and
/// ctime of writes itself: a finer clock here would give a new file an
/// atime after the write's mtime, and relatime would skip its first read.
pub fn wall_time() -> Timestamp {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
        return Timestamp {
            sec: ts.tv_sec,
            nsec: ts.tv_nsec as u32,
        };
    }
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}
