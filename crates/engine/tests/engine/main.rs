//! The engine's integration tests, one module per subject, in one test
//! binary: the engine is linked once instead of once per file, and the
//! tests of every module share the test threads (a long test of one module
//! runs beside the short ones of the others). Run one module with
//! `cargo test -p f2fuse-engine --test engine MODULE::`.
//!
//! No test here changes process-wide state (environment, working
//! directory, signal handlers, umask), so the modules may share a process.
//! The shared helpers are the `f2fuse-testkit` crate.

mod acls;
mod allocation;
mod android;
mod atime;
mod casefold;
mod churn;
mod compression;
mod concurrency;
mod devices;
mod dirty_nodes;
mod fallocate;
mod flags;
mod flush_counts;
mod ipu;
mod mkfs;
mod model;
mod modify_sload;
mod orphans;
mod permissions;
mod powercut;
mod quota;
mod recovery;
mod roundtrip;
mod status;
mod support_selftest;
mod tunables;
mod write_basic;
