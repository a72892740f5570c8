//! The CLI's integration tests (all but the kernel VM's, `kernel_vm.rs`),
//! one module per subject, in one test binary: the engine and the CLI are
//! linked once instead of once per file, and the tests of every module
//! share the test threads. Run one module with
//! `cargo test -p f2fuse --test cli MODULE::`.
//!
//! The mount modules (`mount_*`, `fsx_mount`) need root, /dev/fuse and
//! fusermount3, and print a skip note without them; `-- --skip mount` leaves
//! them out. No test here changes process-wide state (environment, working
//! directory, signal handlers, umask): the processes it starts get their
//! own. The shared helpers are the `f2fuse-testkit` crate.

#[macro_use]
mod common;

mod build;
mod corrupt_images;
mod fsx_mount;
mod mount_concurrency;
mod mount_dirty_limits;
mod mount_fuse;
mod sparse;
mod status_extents;
mod write_commands;
