//! The one error this crate returns: a structure failed validation.

use std::fmt;

/// A decoded structure violates the format. Says what, where and why, so a
/// user can tell a damaged image from a bug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt {
    /// The structure that failed, e.g. "superblock", "checkpoint", "inode".
    pub structure: &'static str,
    /// Where it was found, e.g. "blkaddr 512" or "nid 7"; filled in by the caller that knows.
    pub location: Option<String>,
    /// What is wrong, naming the field and its value.
    pub detail: String,
}

impl Corrupt {
    pub fn new(structure: &'static str, detail: impl Into<String>) -> Self {
        Corrupt {
            structure,
            location: None,
            detail: detail.into(),
        }
    }

    /// Adds the location unless a more precise one is already recorded.
    pub fn at(mut self, location: impl fmt::Display) -> Self {
        if self.location.is_none() {
            self.location = Some(location.to_string());
        }
        self
    }
}

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt {}", self.structure)?;
        if let Some(location) = &self.location {
            write!(f, " at {location}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

impl std::error::Error for Corrupt {}

pub type Result<T> = std::result::Result<T, Corrupt>;

/// Returns `Err(Corrupt)` built from the format arguments when `cond` is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $structure:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::Corrupt::new($structure, format!($($arg)+)));
        }
    };
}
