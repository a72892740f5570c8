//! Writes the starting corpus of every fuzz target, cut from the seed
//! images, to `corpus/<target>/seed-<n>` (run from the fuzz directory):
//! `cargo run --example write_corpus`.

use std::path::Path;

fn main() {
    let mut counts = std::collections::BTreeMap::new();
    for (target, input) in f2fuse_fuzz::seed_inputs() {
        let n = counts.entry(target).or_insert(0u32);
        let dir = Path::new("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        std::fs::write(dir.join(format!("seed-{n}")), input).expect("write seed");
        *n += 1;
    }
    for (target, n) in counts {
        println!("corpus/{target}: {n} seeds");
    }
}
