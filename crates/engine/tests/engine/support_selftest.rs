//! Self-test of the test kit (`f2fuse-testkit`): the tree generator, the
//! host scanner, the comparison and the f2fs-tools wrappers, without any
//! code of the engine. The image tests also pin down what sload.f2fs 1.15
//! preserves (see the kit's crate documentation).

use f2fuse_testkit as support;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use support::{
    compare_trees, content_hash_of, content_hash_of_chunks, escape_name, fsck_f2fs,
    generate_edge_tree, huge_sparse_extents, image_size_for_tree, join_key, mkfs_f2fs, paths,
    require_f2fs_tools, require_tool, scan_host_tree, scan_image_with_f2fs_tools, sload_f2fs,
    CompareWhat, ContentHasher, HostEntry, Kind, Scratch, TreeOptions,
};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn entry<'a>(tree: &'a BTreeMap<String, HostEntry>, key: &str) -> &'a HostEntry {
    tree.get(key)
        .unwrap_or_else(|| panic!("no entry {key:?} in the scanned tree"))
}

#[test]
fn content_hasher_is_streaming_fnv1a() {
    // Published FNV-1a 64 test vectors.
    assert_eq!(content_hash_of(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(content_hash_of(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(content_hash_of(b"foobar"), 0x8594_4171_f739_67e8);
    assert_eq!(
        content_hash_of_chunks([&b"foo"[..], b"", b"bar"]),
        content_hash_of(b"foobar")
    );

    for n in [0usize, 1, 7, 4096, 100_003] {
        let mut a = ContentHasher::new();
        a.update(b"x");
        a.update_zeros(n as u64);
        a.update(b"y");
        let mut b = ContentHasher::new();
        b.write_all(b"x").unwrap();
        b.write_all(&vec![0u8; n]).unwrap();
        b.write_all(b"y").unwrap();
        assert_eq!(a.finish(), b.finish(), "zeros n={n}");
        assert_eq!(a.len(), n as u64 + 2);
    }

    // The zero-block shortcut in `update` equals the plain byte loop.
    let naive = |data: &[u8]| {
        data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    };
    let mut mixed = vec![0u8; 3 * 4096 + 17];
    mixed[5000] = 1;
    mixed[3 * 4096 + 3] = 2;
    for cut in [0usize, 1, 4095, 4096, 8193, mixed.len()] {
        let mut h = ContentHasher::new();
        h.update(&mixed[..cut]);
        h.update(&mixed[cut..]);
        assert_eq!(h.finish(), naive(&mixed), "cut at {cut}");
    }

    // File hashing skips holes but must equal hashing every byte.
    let s = Scratch::new("hash");
    let p = s.join("sparse");
    let f = fs::File::create(&p).unwrap();
    f.set_len(3 << 20).unwrap();
    f.write_all_at(b"middle", 1 << 20).unwrap();
    f.write_all_at(b"end", (3 << 20) - 3).unwrap();
    drop(f);
    let mut f = fs::File::open(&p).unwrap();
    let quick = support::content_hash_of_file(&mut f, 3 << 20).unwrap();
    assert_eq!(quick, content_hash_of(&fs::read(&p).unwrap()));
}

#[test]
fn escape_name_is_injective_and_readable() {
    assert_eq!(escape_name(b"plain"), "plain");
    assert_eq!(escape_name("日本語 😀".as_bytes()), "日本語 😀");
    assert_eq!(escape_name(b"back\\slash"), "back\\\\slash");
    assert_eq!(escape_name(b"\xff\xfe raw"), "\\xff\\xfe raw");
    assert_eq!(escape_name(b"caf\xe9"), "caf\\xe9");
    // A literal "\xff" in a valid name differs from the byte 0xff.
    assert_ne!(escape_name(b"\\xff"), escape_name(b"\xff"));
    assert_eq!(join_key("", b"a"), "a");
    assert_eq!(join_key("a/b", b"c"), "a/b/c");
}

#[test]
fn huge_sparse_extents_reach_the_double_indirect_node() {
    let size = support::tree::HUGE_SPARSE_DEFAULT_SIZE;
    assert!(size > support::tree::DOUBLE_INDIRECT_START_BYTES);
    assert_eq!(support::tree::DOUBLE_INDIRECT_START_BYTES, 8_501_686_272);
    let ext = huge_sparse_extents(size);
    assert!(ext.iter().all(|&(o, l)| o + l <= size));
    assert_eq!(
        ext.last().map(|&(o, l)| o + l),
        Some(size),
        "data at the very end"
    );
    assert!(ext
        .iter()
        .any(|&(o, _)| o >= support::tree::DOUBLE_INDIRECT_START_BYTES && o + 4096 < size));
}

#[test]
fn small_tree_has_the_requested_edge_cases() {
    let s = Scratch::new("gen");
    let opts = TreeOptions::small();
    let t0 = Instant::now();
    let info = generate_edge_tree(&s.join("src"), &opts);
    let t1 = Instant::now();
    let tree = scan_host_tree(&s.join("src"));
    eprintln!(
        "small tree: {} entries, generate {:?}, scan {:?}, skipped {:?}",
        tree.len(),
        t1 - t0,
        t1.elapsed(),
        info.skipped
    );

    // Root.
    let root = entry(&tree, "");
    assert_eq!((root.kind, root.path.as_str()), (Kind::Dir, ""));

    // Sizes around the inline and node limits.
    for len in [
        0u64, 1, 100, 3000, 3344, 3345, 3400, 3488, 3489, 3500, 4096, 4097,
    ] {
        let e = entry(&tree, &format!("sizes/len_{len}"));
        assert_eq!((e.kind, e.size), (Kind::File, len));
        assert!(e.content_hash.is_some());
    }
    let big = entry(&tree, paths::INDIRECT_FILE);
    assert_eq!(big.size, 13 << 20);
    assert!(big.size > support::tree::INDIRECT_START_BYTES);

    // Sparse files: holes hash as zeros.
    let mixed = entry(&tree, "sparse/mixed");
    assert_eq!(mixed.size, 5 << 20);
    let bytes = fs::read(s.join("src/sparse/mixed")).unwrap();
    assert_eq!(mixed.content_hash, Some(content_hash_of(&bytes)));
    assert_eq!(
        entry(&tree, "sparse/hole_only").content_hash,
        Some(content_hash_of(&vec![0u8; (1 << 20) + 5]))
    );
    assert!(
        !tree.contains_key(paths::HUGE_SPARSE_FILE),
        "small() has no 8.6 GB file"
    );

    // Names.
    assert!(tree.contains_key(&format!("names/{}", "n".repeat(255))));
    let e255 = format!("names/{}x", "é".repeat(127));
    assert_eq!(e255.len() - "names/".len(), 255);
    assert!(tree.contains_key(&e255));
    for k in [
        "names/日本語",
        "names/emoji 😀🎉",
        "names/with space",
        "names/\\xff\\xfe raw",
    ] {
        assert!(tree.contains_key(k), "{k:?}");
    }
    assert!(tree.contains_key("names/new\nline"));

    // Big directory.
    let n_big = tree.keys().filter(|k| k.starts_with("bigdir/")).count();
    assert_eq!(n_big, opts.big_dir_entries);
    assert!(tree
        .keys()
        .any(|k| k.starts_with("bigdir/") && k.len() - "bigdir/".len() == 255));

    // Symlinks.
    for len in [3000usize, 3487, 3488, 3687, 3688, 4000, 4095] {
        let e = entry(&tree, &format!("symlinks/len_{len}"));
        assert_eq!(e.kind, Kind::Symlink);
        assert_eq!(e.link_target.as_ref().map(Vec::len), Some(len));
        assert_eq!(e.size, len as u64);
    }
    assert_eq!(
        entry(&tree, "symlinks/dangling").link_target.as_deref(),
        Some(&b"no/such/file"[..])
    );
    assert!(!s.join("src/symlinks/dangling").exists(), "dangling");

    // Hard links.
    let two: Vec<_> = ["links/a/two_1", "links/b/two_2"]
        .map(|k| entry(&tree, k).clone())
        .into();
    let three: Vec<_> = ["links/a/three_1", "links/b/three_2", "links/three_3"]
        .map(|k| entry(&tree, k).clone())
        .into();
    assert!(two
        .iter()
        .all(|e| e.nlink == 2 && e.hardlink_group == two[0].hardlink_group));
    assert!(three
        .iter()
        .all(|e| e.nlink == 3 && e.hardlink_group == three[0].hardlink_group));
    assert!(two[0].hardlink_group.is_some());
    assert_ne!(two[0].hardlink_group, three[0].hardlink_group);
    assert_eq!(entry(&tree, "sizes/len_1").hardlink_group, None);

    // Xattrs (unless the host file system has none).
    if info.skipped.iter().any(|n| n.starts_with("xattrs")) {
        eprintln!("host file system without user xattrs: not checked");
    } else {
        let small = &entry(&tree, "xattr/small").xattrs;
        assert_eq!(
            small.get(&b"user.a"[..]).map(Vec::as_slice),
            Some(&b"1"[..])
        );
        assert_eq!(small.get(&b"user.empty"[..]).map(Vec::len), Some(0));
        assert_eq!(
            entry(&tree, "xattr/big").xattrs[&b"user.big"[..]].len(),
            3000
        );
        assert_eq!(entry(&tree, "xattr/many").xattrs.len(), 20);
        assert!(entry(&tree, "xattr")
            .xattrs
            .contains_key(&b"user.dir_attr"[..]));
    }

    // Nesting, modes, owners, special files, mtimes.
    let deep = format!(
        "deep/{}/leaf",
        (1..=20)
            .map(|i| format!("d{i:02}"))
            .collect::<Vec<_>>()
            .join("/")
    );
    assert_eq!(entry(&tree, &deep).size, 33);
    assert_eq!(entry(&tree, "modes/m4755").mode, 0o4755);
    assert_eq!(entry(&tree, "modes/m0600").mode, 0o600);
    assert_eq!(entry(&tree, "modes/sticky_dir").mode, 0o1777);
    assert_eq!(entry(&tree, "special/fifo").kind, Kind::Fifo);
    if is_root() {
        let u = entry(&tree, "owners/u1000");
        assert_eq!((u.uid, u.gid), (1000, 1000));
        let n = entry(&tree, "owners/nobody");
        assert_eq!((n.uid, n.gid), (65534, 65534));
        let l = entry(&tree, "owners/link_nobody");
        assert_eq!((l.kind, l.uid), (Kind::Symlink, 65534));
        assert_eq!(
            entry(&tree, "owners/mixed").mode,
            0o4750,
            "chmod after chown"
        );
    }
    assert_eq!(entry(&tree, "sizes/len_1").mtime, (1, 1));
    assert_eq!(entry(&tree, "sizes/len_0").mtime, (0, 0));
    assert_eq!(entry(&tree, "").mtime, support::mtime_for(&opts, ""));
    assert!(tree.values().any(|e| e.mtime.1 != 0), "nanoseconds are set");
}

#[test]
fn generation_is_deterministic_and_compare_accepts_equal_trees() {
    let s = Scratch::new("det");
    let opts = TreeOptions {
        big_dir_entries: 300,
        indirect_file_size: 1 << 20,
        ..TreeOptions::small()
    };
    generate_edge_tree(&s.join("a"), &opts);
    generate_edge_tree(&s.join("b"), &opts);
    let a = scan_host_tree(&s.join("a"));
    let b = scan_host_tree(&s.join("b"));
    compare_trees(&a, &b, CompareWhat::all()).unwrap();

    // A different seed changes names, contents and mtimes.
    generate_edge_tree(&s.join("c"), &TreeOptions { seed: 99, ..opts });
    let c = scan_host_tree(&s.join("c"));
    let report = compare_trees(&a, &c, CompareWhat::all()).unwrap_err();
    assert!(
        report.contains("content hash") && report.contains("mtime"),
        "{report}"
    );
}

#[test]
fn compare_trees_reports_every_difference() {
    let s = Scratch::new("cmp");
    let opts = TreeOptions {
        big_dir_entries: 50,
        indirect_file_size: 0,
        ..TreeOptions::small()
    };
    generate_edge_tree(&s.join("src"), &opts);
    let expected = scan_host_tree(&s.join("src"));
    compare_trees(&expected, &expected, CompareWhat::all()).unwrap();

    // Renumbering hard-link groups consistently is not a difference.
    let mut renumbered = expected.clone();
    for e in renumbered.values_mut() {
        if let Some(g) = e.hardlink_group.as_mut() {
            *g = g.wrapping_mul(31).wrapping_add(7);
        }
    }
    compare_trees(&expected, &renumbered, CompareWhat::all()).unwrap();

    let mut actual = expected.clone();
    actual.get_mut("modes/m0755").unwrap().mode = 0o700;
    actual.get_mut("owners/u1000").unwrap().uid = 1;
    actual.get_mut("sizes/len_100").unwrap().content_hash = Some(1);
    actual.get_mut("sizes/len_3000").unwrap().mtime.1 += 1;
    actual.get_mut("symlinks/short").unwrap().link_target = Some(b"elsewhere".to_vec());
    actual.remove("sizes/len_4097");
    let mut extra = expected["sizes/len_1"].clone();
    extra.path = "sizes/extra".into();
    actual.insert(extra.path.clone(), extra);
    // Split the 3-link group: three_3 becomes its own inode.
    actual.get_mut("links/three_3").unwrap().hardlink_group = Some(u64::MAX);
    let xa = &mut actual.get_mut("xattr/small").unwrap().xattrs;
    xa.remove(&b"user.a"[..]);
    xa.insert(b"user.new".to_vec(), b"v".to_vec());

    let report = compare_trees(&expected, &actual, CompareWhat::all()).unwrap_err();
    eprintln!("{report}");
    for needle in [
        "\"modes/m0755\": mode: expected 0o755, actual 0o700",
        "\"owners/u1000\": uid: expected",
        "\"sizes/len_100\": content hash",
        "\"sizes/len_3000\": mtime: expected 2147483648.500000000, actual 2147483648.500000001",
        "\"symlinks/short\": link target",
        "\"sizes/len_4097\": missing (File)",
        "\"sizes/extra\": extra (File)",
        "hard-link group",
        "\"xattr/small\": xattr \"user.a\" (6 bytes) missing",
        "\"xattr/small\": extra xattr \"user.new\"",
    ] {
        let has_xattrs = !expected["xattr/small"].xattrs.is_empty();
        if needle.contains("xattr") && !has_xattrs {
            continue;
        }
        assert!(report.contains(needle), "missing {needle:?} in:\n{report}");
    }

    // What the sload profile skips: nanoseconds and xattrs.
    let mut ns_only = expected.clone();
    ns_only.get_mut("sizes/len_3000").unwrap().mtime.1 += 1;
    ns_only
        .get_mut("xattr/small")
        .unwrap()
        .xattrs
        .insert(b"user.other".to_vec(), vec![]);
    compare_trees(&expected, &ns_only, CompareWhat::sload()).unwrap();
    assert!(compare_trees(&expected, &ns_only, CompareWhat::all()).is_err());

    // `ignore` skips whole subtrees on both sides.
    compare_trees(
        &expected,
        &actual,
        CompareWhat::all()
            .ignoring("modes")
            .ignoring("owners")
            .ignoring("sizes")
            .ignoring("symlinks")
            .ignoring("links")
            .ignoring("xattr"),
    )
    .unwrap();
}

/// Builds an image from a tree with mkfs.f2fs + sload.f2fs; returns the
/// host scan, the image and how sload ended.
fn load(s: &Scratch, opts: &TreeOptions) -> (std::path::PathBuf, support::SloadOutcome) {
    let src = s.join("src");
    let img = s.join("f2fs.img");
    generate_edge_tree(&src, opts);
    mkfs_f2fs(&img, image_size_for_tree(&src), &[]);
    let outcome = sload_f2fs(&img, &src);
    (img, outcome)
}

/// Keys the f2fs-tools oracle looks at: everything but most of the big
/// directory (≈25 ms per entry) and names with newlines (fsck -t listing).
fn oracle_keys(k: &str) -> bool {
    if k.contains('\n') {
        return false;
    }
    match k.strip_prefix("bigdir/e") {
        Some(rest) => {
            rest.get(..5)
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0)
                % 97
                == 0
        }
        None => true,
    }
}

fn filtered(tree: &BTreeMap<String, HostEntry>) -> BTreeMap<String, HostEntry> {
    tree.iter()
        .filter(|(k, _)| oracle_keys(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn sload_compatible_tree_loads_exactly_and_fsck_is_clean() {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") {
        return;
    }
    let s = Scratch::new("sload");
    let opts = TreeOptions::small().sload_compatible();
    let t0 = Instant::now();
    let (img, outcome) = load(&s, &opts);
    let t1 = Instant::now();
    assert!(
        outcome.repaired.is_empty(),
        "sload repaired: {:?}",
        outcome.repaired
    );
    fsck_f2fs(&img).unwrap_or_else(|e| panic!("fsck not clean:\n{e}"));
    let t2 = Instant::now();

    // All paths are in the image (fsck -t listing, no names lost).
    let host = scan_host_tree(&s.join("src"));
    let listed = support::image_paths_and_inos(&img);
    let host_keys: Vec<_> = host.keys().filter(|k| !k.contains('\n')).collect();
    let image_keys: Vec<_> = listed.keys().collect();
    assert_eq!(host_keys, image_keys);

    // Every field f2fs-tools can show matches (root metadata aside).
    let image = scan_image_with_f2fs_tools(&img, &oracle_keys);
    compare_trees(&filtered(&host), &image, CompareWhat::sload())
        .unwrap_or_else(|r| panic!("host tree vs image (via dump.f2fs):\n{r}"));
    eprintln!(
        "sload-compatible small tree: build {:?}, fsck {:?}, oracle ({} entries) {:?}",
        t1 - t0,
        t2 - t1,
        image.len(),
        t2.elapsed()
    );
}

/// Records what sload.f2fs 1.15 drops or changes, with the full small tree
/// (xattrs, fifo, socket, nanoseconds, mid-size symlinks).
#[test]
fn sload_findings_on_the_full_small_tree() {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") {
        return;
    }
    let s = Scratch::new("findings");
    let opts = TreeOptions::small();
    let (img, outcome) = load(&s, &opts);
    // sload's own final fsck pass repairs i_blocks of the symlinks whose
    // target is 3488..=3687 bytes long; the image is consistent after.
    eprintln!("sload repairs: {:#?}", outcome.repaired);
    assert!(
        outcome.repaired.iter().all(|l| l.contains("i_blocks")),
        "{outcome:#?}"
    );
    fsck_f2fs(&img).unwrap_or_else(|e| panic!("fsck not clean after sload:\n{e}"));

    let host = scan_host_tree(&s.join("src"));
    let keep = |k: &str| oracle_keys(k) && !k.starts_with("bigdir");
    let image = scan_image_with_f2fs_tools(&img, &keep);
    let expected: BTreeMap<_, _> = host
        .iter()
        .filter(|(k, _)| keep(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    // Fifo and socket are not loaded; nanoseconds are 0; root metadata is
    // mkfs's. Everything else matches.
    assert!(!image.contains_key("special/fifo") && !image.contains_key("special/socket"));
    assert!(
        image.values().all(|e| e.mtime.1 == 0),
        "sload stores no nanoseconds"
    );
    compare_trees(&expected, &image, CompareWhat::sload().ignoring("special"))
        .unwrap_or_else(|r| panic!("host tree vs image (via dump.f2fs):\n{r}"));
    let all = compare_trees(&expected, &image, CompareWhat::all()).unwrap_err();
    assert!(all.contains("\"special/fifo\": missing (Fifo)"), "{all}");
    assert!(all.contains("mtime: expected"), "{all}");

    // No xattr name or value made it into the image...
    let needles: [&[u8]; 4] = [
        b"next to a big one",
        b"on a directory",
        b"dir_attr",
        b"key07",
    ];
    assert_eq!(
        find_in_image(&img, &needles),
        None,
        "xattr bytes in the image"
    );
    // ...while file data is there (sanity check of the search).
    let data = fs::read(s.join("src/sizes/len_3000")).unwrap();
    assert_eq!(find_in_image(&img, &[&data[..64]]), Some(0));
}

/// Index of the first needle found in the allocated parts of `img`.
fn find_in_image(img: &Path, needles: &[&[u8]]) -> Option<usize> {
    use std::os::unix::io::AsRawFd;
    let f = fs::File::open(img).unwrap();
    let len = f.metadata().unwrap().len();
    let longest = needles.iter().map(|n| n.len()).max().unwrap_or(0);
    let mut firsts = [false; 256];
    for n in needles {
        firsts[n[0] as usize] = true;
    }
    let seek = |pos: u64, whence| -> Option<u64> {
        // SAFETY: lseek on an open descriptor.
        let r = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, whence) };
        (r >= 0).then_some(r as u64)
    };
    let mut buf = vec![0u8; (1 << 20) + longest];
    let mut pos = 0;
    while let Some(data) = seek(pos, libc::SEEK_DATA).filter(|&d| d < len) {
        let end = seek(data, libc::SEEK_HOLE).unwrap_or(len).min(len);
        let mut at = data;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            f.read_exact_at(&mut buf[..n], at).unwrap();
            for i in 0..n {
                if firsts[buf[i] as usize] {
                    if let Some(k) = needles.iter().position(|nd| buf[i..n].starts_with(nd)) {
                        return Some(k);
                    }
                }
            }
            if at + n as u64 >= end {
                break;
            }
            at += (n - longest) as u64; // overlap so no match is cut in two
        }
        pos = end;
    }
    None
}

#[test]
fn require_tool_skips_or_panics_under_ci() {
    assert!(require_tool("sh"));
    let missing = "f2fuse-no-such-tool-7d1c";
    if std::env::var_os("CI").is_some() {
        assert!(std::panic::catch_unwind(|| require_tool(missing)).is_err());
    } else {
        assert!(!require_tool(missing));
    }
}

#[test]
fn fsck_f2fs_reports_a_broken_image() {
    if !require_f2fs_tools() {
        return;
    }
    let s = Scratch::new("fsck");
    let img = s.join("f2fs.img");
    mkfs_f2fs(&img, 64 << 20, &[]);
    fsck_f2fs(&img).unwrap();
    // Wipe both superblock copies.
    let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0u8; 4096], 0).unwrap();
    f.write_all_at(&[0u8; 4096], 4096).unwrap();
    drop(f);
    let err = fsck_f2fs(&img).unwrap_err();
    assert!(err.contains("fsck.f2fs --dry-run"), "{err}");
}

/// The full-scale tree (10_000-entry directory, sparse 8.6 GB file). Slow:
/// sload.f2fs writes the holes as zero blocks (~10 s per GiB, ~9 GB of
/// disk). Run with `cargo test -p f2fuse-engine --test engine
/// support_selftest:: -- --ignored`.
#[test]
#[ignore = "slow: about 2 minutes and 9 GB of disk"]
fn full_tree_loads_and_fsck_is_clean() {
    if !require_f2fs_tools() || !require_tool("dump.f2fs") {
        return;
    }
    let s = Scratch::new("full");
    let opts = TreeOptions::full().sload_compatible();
    let t0 = Instant::now();
    generate_edge_tree(&s.join("src"), &opts);
    let host = scan_host_tree(&s.join("src"));
    let t1 = Instant::now();
    let img = s.join("f2fs.img");
    let size = image_size_for_tree(&s.join("src"));
    mkfs_f2fs(&img, size, &[]);
    let outcome = sload_f2fs(&img, &s.join("src"));
    assert!(outcome.repaired.is_empty(), "{:?}", outcome.repaired);
    let t2 = Instant::now();
    fsck_f2fs(&img).unwrap_or_else(|e| panic!("fsck not clean:\n{e}"));
    let t3 = Instant::now();
    let listed = support::image_paths_and_inos(&img);
    let host_keys: Vec<_> = host.keys().filter(|k| !k.contains('\n')).collect();
    assert_eq!(host_keys, listed.keys().collect::<Vec<_>>());
    // The oracle would dump 8.6 GB of zeros for the huge file: only stat it.
    let huge = support::dump_f2fs_inode(&img, listed[paths::HUGE_SPARSE_FILE]);
    let fields = support::parse_dump_fields(&huge);
    assert_eq!(fields["i_size"], opts.huge_sparse_size);
    eprintln!(
        "full tree: {} entries, generate+scan {:?}, image {} MiB, mkfs+sload {:?}, fsck {:?}, \
         i_blocks of the huge file {}",
        host.len(),
        t1 - t0,
        size >> 20,
        t2 - t1,
        t3 - t2,
        fields["i_blocks"]
    );
}
