//! Invariants checked in code: the kernel's `f2fs_bug_on`.
//!
//! An invariant is something the engine's own code keeps true (a node's
//! footer names the node written, a block handed out is free, a count never
//! goes below zero); the image cannot break it, only a bug can. Checks of
//! what comes from the disk are not invariants: a hostile image gets a
//! [`Corrupt`] error where it is read, never a panic.
//!
//! [`ensure_invariant!`](crate::invariant::ensure_invariant) checks one where it can
//! break. What a broken one does depends on the build ([`OnBroken::BUILD`]):
//!
//! - debug and test builds panic with the invariant's description, so a
//!   test fails at the first step that went wrong;
//! - release builds log it (`tracing::error!`), record it in the
//!   file system's [`Health`] and return an error that stops the operation.
//!   From then on the device refuses every write ([`Health::refuse_writes`],
//!   called by `Device::write_blocks`) and the facade answers EROFS with the
//!   reason: the file system is read-only and needs fsck.
//!
//! The kernel also persists its need for fsck (`SBI_NEED_FSCK` becomes
//! `CP_FSCK_FLAG` in the next checkpoint). Here nothing is written after a
//! broken invariant, not even that mark: the only place for it is a
//! checkpoint pack, and writing a new pack would commit the in-memory state
//! the broken invariant shows to be wrong, while rewriting the committed one
//! in place could tear the one consistent state on disk. The image stays as
//! the last checkpoint (and the fsync chains after it) left it; the log, the
//! EROFS errors and [`Health::needs_fsck`] tell the user to run fsck.f2fs.
//!
//! The health object lives in the [`Device`](crate::device::Device) every
//! layer already holds, so the lowest modules (segment, node) report to it
//! without knowing the facade.
//!
//! Checks on hot paths are O(1); recounts (a checkpoint's counters against
//! the SIT and the NAT) run in debug builds only. The lock order is checked
//! by `lock_order`, in debug builds.

use crate::error::{Error, ErrorKind};
use f2fuse_layout::Corrupt;
use std::fmt;
use std::sync::OnceLock;

/// What a broken invariant does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBroken {
    /// Panic (debug and test builds).
    Panic,
    /// Log, record in the [`Health`], return an error (release builds).
    ReadOnly,
}

impl OnBroken {
    /// The behaviour of this build.
    pub const BUILD: OnBroken = if cfg!(debug_assertions) {
        OnBroken::Panic
    } else {
        OnBroken::ReadOnly
    };
}

/// Whether an invariant of one open file system broke, and which first.
#[derive(Debug, Default)]
pub struct Health {
    broken: OnceLock<String>,
}

/// The `Corrupt` structure name of a broken invariant's error.
pub const BROKEN_INVARIANT: &str = "invariant";

impl Health {
    /// Records that the invariant described by `detail` is broken and
    /// returns the error that stops the operation; panics instead when `on`
    /// is [`OnBroken::Panic`]. Only the first broken invariant is kept.
    pub fn broken(&self, on: OnBroken, detail: fmt::Arguments) -> Error {
        let detail = detail.to_string();
        let _ = self.broken.set(detail.clone());
        if on == OnBroken::Panic {
            panic!("invariant broken: {detail}");
        }
        tracing::error!(
            "invariant broken: {detail}; the file system is read-only from now on and needs fsck.f2fs"
        );
        Error::Corrupt(Corrupt::new(BROKEN_INVARIANT, detail))
    }

    /// The first broken invariant, if one broke: the image needs fsck.
    pub fn needs_fsck(&self) -> Option<&str> {
        self.broken.get().map(String::as_str)
    }

    /// An error once an invariant broke: nothing may be written after it.
    pub fn refuse_writes(&self) -> crate::error::Result<()> {
        match self.needs_fsck() {
            Some(detail) => Err(Error::new(
                ErrorKind::ReadOnly,
                format!("read-only after a broken invariant ({detail}): run fsck.f2fs"),
            )),
            None => Ok(()),
        }
    }
}

/// Checks an invariant: if `cond` is false, reports it to `health` (a
/// [`Health`]) with the message given after it, as [`OnBroken::BUILD`]
/// says, and returns the error from the enclosing function.
macro_rules! ensure_invariant {
    ($health:expr, $cond:expr, $($detail:tt)+) => {
        if !$cond {
            return Err($health
                .broken($crate::invariant::OnBroken::BUILD, format_args!($($detail)+))
                .into());
        }
    };
}

/// Like [`ensure_invariant!`](crate::invariant::ensure_invariant) where the enclosing
/// function cannot fail: records a broken invariant (the device then
/// refuses every write) and evaluates to whether `cond` held.
macro_rules! check_invariant {
    ($health:expr, $cond:expr, $($detail:tt)+) => {{
        let held: bool = $cond;
        if !held {
            let _ = $health.broken($crate::invariant::OnBroken::BUILD, format_args!($($detail)+));
        }
        held
    }};
}

pub(crate) use check_invariant;
pub(crate) use ensure_invariant;

#[cfg(test)]
mod tests {
    use super::*;

    fn count_down(health: &Health, count: u32) -> crate::error::Result<u32> {
        crate::invariant::ensure_invariant!(health, count > 0, "count {count} below one");
        Ok(count - 1)
    }

    #[test]
    fn a_kept_invariant_passes() {
        let health = Health::default();
        assert_eq!(count_down(&health, 2).unwrap(), 1);
        assert!(crate::invariant::check_invariant!(health, true, "never"));
        assert_eq!(health.needs_fsck(), None);
        health.refuse_writes().unwrap();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant broken: count 0 below one")]
    fn a_broken_invariant_panics_in_debug_builds() {
        let _ = count_down(&Health::default(), 0);
    }

    #[test]
    fn read_only_mode_records_and_refuses_writes() {
        let health = Health::default();
        let err = health.broken(OnBroken::ReadOnly, format_args!("first"));
        assert!(matches!(&err, Error::Corrupt(c) if c.structure == BROKEN_INVARIANT));
        let _ = health.broken(OnBroken::ReadOnly, format_args!("second"));
        assert_eq!(health.needs_fsck(), Some("first"));
        let refused = health.refuse_writes().unwrap_err();
        assert_eq!(refused.to_errno(), libc::EROFS);
        assert!(refused.to_string().contains("first"), "{refused}");
    }
}
