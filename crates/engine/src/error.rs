//! The engine's one error type, the kinds a caller matches on, and the one
//! errno mapping ([`ErrorKind::errno`]).

use f2fuse_layout::Corrupt;
use std::fmt;
use std::io;

/// What went wrong, for a caller to match on instead of errno numbers.
/// New kinds may be added; match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No such file, directory or entry (ENOENT).
    NotFound,
    /// The name exists already (EEXIST).
    AlreadyExists,
    /// A directory to remove or replace is not empty (ENOTEMPTY).
    NotEmpty,
    /// The file system is full (ENOSPC).
    NoSpace,
    /// A user, group or project quota is exhausted (EDQUOT).
    QuotaExceeded,
    /// The caller's permissions do not allow the access (EACCES).
    PermissionDenied,
    /// The operation is not permitted at all for this caller or inode,
    /// e.g. changing an immutable file or another user's owner (EPERM).
    NotPermitted,
    /// The file system or image is read-only (EROFS).
    ReadOnly,
    /// A path component or the target is not a directory (ENOTDIR).
    NotADirectory,
    /// A directory where a non-directory is needed (EISDIR).
    IsADirectory,
    /// An argument is out of range or contradicts another (EINVAL).
    InvalidArgument,
    /// No such extended attribute, or no data of the kind asked for, such
    /// as the compressed size of an uncompressed file (ENODATA).
    NoData,
    /// The inode's extended attributes have no room for this one (E2BIG).
    TooBig,
    /// The inode has too many links for another one (EMLINK).
    TooManyLinks,
    /// A name is longer than 255 bytes (ENAMETOOLONG).
    NameTooLong,
    /// The object is in use, e.g. a swap file (EBUSY).
    Busy,
    /// The inode number no longer names a live inode (ESTALE).
    Stale,
    /// The file would exceed the format's size limit (EFBIG).
    FileTooLarge,
    /// A value does not fit the type that reports it (EOVERFLOW).
    Overflow,
    /// The caller's buffer is too small for the value (ERANGE).
    BufferTooSmall,
    /// Seeking is not possible on this object (ESPIPE).
    IllegalSeek,
    /// No data or hole past the offset, as lseek(2) reports it (ENXIO).
    NoSuchOffset,
    /// The operation needs a device kind this one is not (ENODEV).
    NoDevice,
    /// The operation would cross file systems or projects (EXDEV).
    CrossDevice,
    /// The file is encrypted and its key is not available (ENOKEY).
    NoKey,
    /// Try again later: the resource is temporarily taken (EAGAIN).
    WouldBlock,
    /// The operation, or a format feature of the image, is not supported
    /// (EOPNOTSUPP).
    Unsupported,
    /// The image violates the format; see [`Error::Corrupt`] for what and
    /// where (EUCLEAN).
    Corrupt,
    /// The device failed; see [`Error::Io`] (EIO unless the device gave
    /// its own errno).
    Io,
}

impl ErrorKind {
    /// The errno a POSIX caller sees for this kind: the engine's one
    /// errno mapping.
    pub fn errno(self) -> i32 {
        use ErrorKind::*;
        match self {
            NotFound => libc::ENOENT,
            AlreadyExists => libc::EEXIST,
            NotEmpty => libc::ENOTEMPTY,
            NoSpace => libc::ENOSPC,
            QuotaExceeded => libc::EDQUOT,
            PermissionDenied => libc::EACCES,
            NotPermitted => libc::EPERM,
            ReadOnly => libc::EROFS,
            NotADirectory => libc::ENOTDIR,
            IsADirectory => libc::EISDIR,
            InvalidArgument => libc::EINVAL,
            NoData => libc::ENODATA,
            TooBig => libc::E2BIG,
            TooManyLinks => libc::EMLINK,
            NameTooLong => libc::ENAMETOOLONG,
            Busy => libc::EBUSY,
            Stale => libc::ESTALE,
            FileTooLarge => libc::EFBIG,
            Overflow => libc::EOVERFLOW,
            BufferTooSmall => libc::ERANGE,
            IllegalSeek => libc::ESPIPE,
            NoSuchOffset => libc::ENXIO,
            NoDevice => libc::ENODEV,
            CrossDevice => libc::EXDEV,
            NoKey => libc::ENOKEY,
            WouldBlock => libc::EAGAIN,
            Unsupported => libc::EOPNOTSUPP,
            Corrupt => libc::EUCLEAN,
            Io => libc::EIO,
        }
    }
}

/// An engine error: a refusal the caller can act on
/// ([`Refused`](Error::Refused)), or a failure of the device or the image.
/// Match on [`kind`](Error::kind); [`to_errno`](Error::to_errno) is for
/// POSIX callers.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The device failed.
    Io {
        /// What was being done, e.g. "reading blkaddr 512".
        context: String,
        /// The device's error.
        source: io::Error,
    },
    /// The image violates the format; the file system must not be written.
    /// The [`Corrupt`] names the structure, where it is and what is wrong.
    Corrupt(Corrupt),
    /// The image uses a format feature this implementation does not handle.
    Unsupported(String),
    /// The engine refused the operation and changed nothing (a missing
    /// name, a full file system, a permission, a bad argument...).
    Refused {
        /// Why.
        kind: ErrorKind,
        /// What was refused, e.g. the name looked up.
        context: String,
    },
}

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A refusal of `kind` with `context` saying what was refused. Device
    /// failures, corruption and unsupported format features have their
    /// own constructors ([`io`](Self::io), `From<Corrupt>`,
    /// [`unsupported`](Self::unsupported)): they are not refusals.
    pub fn new(kind: ErrorKind, context: impl Into<String>) -> Error {
        Error::Refused {
            kind,
            context: context.into(),
        }
    }

    /// A device failure while doing `context`.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The image uses a format feature, `what`, the engine does not handle.
    pub fn unsupported(what: impl Into<String>) -> Error {
        Error::Unsupported(what.into())
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } => ErrorKind::Io,
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Refused { kind, .. } => *kind,
        }
    }

    /// Whether the engine refused the operation (nothing changed), as
    /// opposed to failing in the middle of it (device, image or format
    /// feature).
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Refused { .. })
    }

    /// The errno a POSIX caller should see: the kind's
    /// ([`ErrorKind::errno`]), or the device's own for an I/O error.
    pub fn to_errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            other => other.kind().errno(),
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
            Error::Refused { kind, context } => {
                let text = io::Error::from_raw_os_error(kind.errno());
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
pub(crate) fn corrupt(structure: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt(Corrupt::new(structure, detail))
}
