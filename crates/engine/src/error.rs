//! The engine's one error type and its one errno mapping.

use f2fuse_layout::Corrupt;
use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// The device failed.
    Io { context: String, source: io::Error },
    /// The image violates the format; the file system must not be written.
    Corrupt(Corrupt),
    /// The image uses a format feature this implementation does not handle.
    Unsupported(String),
    /// A POSIX error for the caller (ENOENT, ENOTDIR, ...), with context.
    Errno { errno: i32, context: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn errno(errno: i32, context: impl Into<String>) -> Error {
        Error::Errno {
            errno,
            context: context.into(),
        }
    }

    pub fn unsupported(what: impl Into<String>) -> Error {
        Error::Unsupported(what.into())
    }

    /// The errno a POSIX caller should see.
    pub fn to_errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Corrupt(_) => libc::EUCLEAN,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Errno { errno, .. } => *errno,
        }
    }

    /// Adds where a corruption was found, unless already known.
    pub fn at(self, location: impl fmt::Display) -> Error {
        match self {
            Error::Corrupt(c) => Error::Corrupt(c.at(location)),
            other => other,
        }
    }
}

impl From<Corrupt> for Error {
    fn from(c: Corrupt) -> Error {
        Error::Corrupt(c)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "I/O error {context}: {source}"),
            Error::Corrupt(c) => write!(f, "{c}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
            Error::Errno { errno, context } => {
                let text = io::Error::from_raw_os_error(*errno);
                write!(f, "{context}: {text}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Corrupt(c) => Some(c),
            _ => None,
        }
    }
}

/// Shorthand for a corruption error built in place.
pub fn corrupt(structure: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt(Corrupt::new(structure, detail))
}
