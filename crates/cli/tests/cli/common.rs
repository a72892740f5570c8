//! What the CLI test modules share: running the `f2fuse` binary under test
//! and checking how it ended, and a POSIX ACL in its user-space format.

use f2fuse_testkit::acl;
use std::ffi::OsStr;
use std::fmt::Debug;
use std::process::{Command, Output, Stdio};

/// Arguments of mixed types (`&str`, paths, `String`s) as one array of
/// `OsString`s: `ok(&args!["ls", img, "/"])`.
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(std::ffi::OsStr::new(&$a).to_os_string()),*]
    };
}

/// How a run of the binary ended: its exit code (`None` when a signal
/// ended it) and its output as text.
pub struct Run {
    /// The exit code.
    pub code: Option<i32>,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs `f2fuse ARGS` with an empty stdin and returns what it wrote, as
/// bytes.
pub fn f2fuse_output<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run f2fuse")
}

/// [`f2fuse_output`] as a [`Run`].
pub fn f2fuse<S: AsRef<OsStr>>(args: &[S]) -> Run {
    f2fuse_output(args).into()
}

/// [`f2fuse_output`], which must exit with status 0.
pub fn ok_output<S: AsRef<OsStr> + Debug>(args: &[S]) -> Output {
    let out = f2fuse_output(args);
    assert!(
        out.status.success(),
        "f2fuse {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`ok_output`] as a [`Run`].
pub fn ok<S: AsRef<OsStr> + Debug>(args: &[S]) -> Run {
    ok_output(args).into()
}

/// Runs `f2fuse ARGS`, which must exit with status 1 and write exactly one
/// stderr line, "f2fuse: ..." containing `want`; returns that line.
pub fn fails<S: AsRef<OsStr> + Debug>(args: &[S], want: &str) -> String {
    let run = f2fuse(args);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        run.code == Some(1)
            && lines.len() == 1
            && lines[0].starts_with("f2fuse: ")
            && lines[0].contains(want),
        "f2fuse {args:?}: expected exit 1 and one line with {want:?}, got {:?}:\n{}",
        run.code,
        run.stderr
    );
    lines[0].to_string()
}

/// `user::rw- user:1000:r-- group::r-- mask::r-- other::---` as the value
/// of `system.posix_acl_access` in user space: an ACL the mode cannot
/// express.
pub fn acl_with_user_1000() -> Vec<u8> {
    acl(&[
        (0x01, 6, u32::MAX),
        (0x02, 4, 1000),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ])
}
