#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| f2fuse_fuzz::cluster(data));
