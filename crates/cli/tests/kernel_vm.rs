//! Kernel compatibility, checked against the real thing: Debian's Linux 6.1
//! f2fs module in a throw-away VM (`scripts/kernel-vm.sh`, qemu; KVM when
//! it boots, else TCG).
//!
//! * Images f2fuse writes (`build` of a varied tree; the feature set
//!   extra_attr + inode_checksum + flexible_inline_xattr + inode_crtime +
//!   sb_checksum; casefolded directories; files compressed with each
//!   algorithm) mount in the kernel, which sees exactly what f2fuse wrote
//!   (a manifest of every entry: type, mode, owner, links, size, SHA-256,
//!   symlink target, user xattrs) and writes more; after its unmount
//!   fsck.f2fs is clean and f2fuse sees exactly what the kernel saw.
//! * Images the kernel writes (compressed files, casefolded directories,
//!   quota, fsync'd files cut off by a power cut before any checkpoint)
//!   read back in f2fuse exactly as the kernel last saw them; the fsync
//!   chain is rolled forward by f2fuse, after which fsck.f2fs is clean and
//!   the kernel mounts the image and sees the same files.
//!
//! Needs root (owners are compared), f2fs-tools, getfattr, and what
//! `scripts/kernel-vm.sh prepare` needs (qemu-system-x86, busybox-static,
//! cpio, Debian's registry for the kernel package). When the VM cannot be
//! prepared the tests print a skip note, also under CI; when it can, any
//! difference fails.

use f2fuse_testkit as support;

use f2fuse_engine::internals::checkpoint::load_checkpoint;
use f2fuse_engine::internals::compress::CompressOptions;
use f2fuse_engine::internals::device::{Device, MemDevice};
use f2fuse_engine::internals::fs::SetAttr;
use f2fuse_engine::internals::mkfs::{format, MkfsOptions};
use f2fuse_engine::internals::recovery::walk_chain;
use f2fuse_engine::internals::superblock::load_superblock;
use f2fuse_engine::internals::xattr::SetMode;
use f2fuse_engine::{FallocMode, Fs, OpenOptions};
use f2fuse_layout::compress::CompressAlgorithm;
use f2fuse_layout::cp_flag;
use f2fuse_layout::inode_flag;
use f2fuse_layout::inode_flag::CASEFOLD;
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use support::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn vm_script() -> PathBuf {
    repo().join("scripts/kernel-vm.sh")
}

/// Whether the VM can run here; a skip note when not (exit status 3 of
/// `kernel-vm.sh prepare`: a tool or the kernel package cannot be had).
fn vm_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPING kernel VM test: needs root (owners are compared)");
        return false;
    }
    if !require_f2fs_tools() || !require_tool("getfattr") {
        return false;
    }
    let out = Command::new(vm_script())
        .arg("prepare")
        .output()
        .expect("run scripts/kernel-vm.sh prepare");
    match out.status.code() {
        Some(0) => {
            eprintln!("kernel VM: {}", String::from_utf8_lossy(&out.stdout).trim());
            true
        }
        Some(3) => {
            eprintln!(
                "SKIPPING kernel VM test: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        _ => panic!(
            "kernel-vm.sh prepare failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Shell functions for both sides (busybox ash in the VM, bash on the
/// host; stat, sha256sum and getfattr print alike in both): `manifest DIR`
/// prints every entry under DIR in a few batched commands (process starts
/// are slow under TCG); [`normalize`] turns that into one line per entry.
const MANIFEST_SH: &str = r##"
manifest() (
    cd "$1" || exit 1
    echo "# stat"
    find . ! -name . -exec stat -c '%F|%a|%u:%g|%h|%s|%n' {} +
    echo "# sha256"
    find . -type f -exec sha256sum {} +
    echo "# readlink"
    find . -type l | while IFS= read -r p; do echo "$(readlink "$p")|$p"; done
    echo "# xattr"
    getfattr -R -h -d -m '^user\.' -e hex . 2>/dev/null || true
)
# section NAME COMMAND...: COMMAND's output between markers the host parses.
section() {
    name=$1
    shift
    echo "=== begin $name"
    "$@"
    echo "=== end $name"
}
"##;

/// Prologue of every VM script: stop at the first failing command, the
/// shared functions, debugfs for the f2fs counters.
fn vm_prologue() -> String {
    format!("set -eu\n{MANIFEST_SH}\nmount -t debugfs none /sys/kernel/debug\n")
}

/// Epilogue: the kernel's f2fs messages as a section.
const VM_EPILOGUE: &str =
    "section dmesg sh -c \"dmesg | grep -iE 'f2fs|unicode|utf8|quota' || true\"\n";

struct VmRun {
    out: String,
    console: String,
}

impl VmRun {
    /// The lines of section `name` (panics if the VM did not print it).
    fn section(&self, name: &str) -> String {
        let begin = format!("=== begin {name}\n");
        let start = self
            .out
            .find(&begin)
            .unwrap_or_else(|| panic!("no section {name} in the VM's output:\n{}", self.out))
            + begin.len();
        let len = self.out[start..]
            .find(&format!("=== end {name}\n"))
            .unwrap_or_else(|| panic!("section {name} not ended:\n{}", self.out));
        self.out[start..start + len].to_string()
    }

    /// `KEY value` lines of the output (the checks' own reports).
    fn values(&self, key: &str) -> Vec<String> {
        self.out
            .lines()
            .filter_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
            .map(str::to_string)
            .collect()
    }

    /// The kernel's f2fs messages (and its f2fs warnings, whose stack
    /// lines name fs/f2fs) must hold no error or inconsistency. Other
    /// subsystems are not judged: under TCG on a busy host the console
    /// may report clock or RCU stalls; an oops ends the run (oops=panic).
    fn assert_kernel_quiet(&self) {
        let kernel = self.section("dmesg");
        let bad: Vec<&str> = kernel
            .lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                [
                    "error",
                    "corrupt",
                    "inconsisten",
                    "fsck",
                    "invalid",
                    "wrong",
                    "mismatch",
                    "fail",
                    "abnormal",
                    "bug",
                    "warning",
                    "call trace",
                ]
                .iter()
                .any(|w| l.contains(w))
            })
            .collect();
        assert!(
            bad.is_empty(),
            "the kernel complained:\n{}\n--- all f2fs messages:\n{kernel}\n--- console:\n{}",
            bad.join("\n"),
            self.console
        );
    }
}

/// Boots the VM with `disks` (/dev/vda, /dev/vdb, ...) and runs `script`;
/// panics unless it exits 0.
fn run_vm(scratch: &Scratch, disks: &[&Path], script: &str) -> VmRun {
    run_vm_with_files(scratch, disks, &[], script)
}

/// [`run_vm`] with host files copied in (`-f HOST:GUEST`).
fn run_vm_with_files(
    scratch: &Scratch,
    disks: &[&Path],
    files: &[(&Path, &str)],
    script: &str,
) -> VmRun {
    let script_path = scratch.join("vm-script.sh");
    fs::write(&script_path, script).unwrap();
    let console = scratch.join("vm-console.log");
    let mut cmd = Command::new(vm_script());
    cmd.arg("run").arg("-t").arg("240").arg("-c").arg(&console);
    for d in disks {
        cmd.arg("-d").arg(d);
    }
    for (host, guest) in files {
        cmd.arg("-f").arg(format!("{}:{guest}", host.display()));
    }
    let out = cmd.arg(&script_path).output().expect("run kernel-vm.sh");
    let run = VmRun {
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        console: fs::read_to_string(&console).unwrap_or_default(),
    };
    assert!(
        out.status.success(),
        "the VM script failed ({}):\n{}\n--- stderr:\n{}\n--- console:\n{}",
        out.status,
        run.out,
        String::from_utf8_lossy(&out.stderr),
        run.console
    );
    run
}

fn f2fuse(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(args)
        .output()
        .expect("run f2fuse");
    assert!(
        out.status.success(),
        "f2fuse {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch path as the &str the CLI takes (scratch paths are ASCII).
fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// One line per entry, sorted by path: `PATH: TYPE MODE UID:GID LINKS
/// [SIZE SHA256 | -> TARGET] [xattr NAME=VALUE]...` from `manifest`'s output.
fn normalize(raw: &str) -> String {
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    let mut part = "";
    let mut xattr_path = String::new();
    for line in raw.lines() {
        if let Some(p) = line
            .strip_prefix("# ")
            .filter(|_| part != "xattr" || line == "# xattr")
        {
            part = match p {
                "stat" | "sha256" | "readlink" | "xattr" => p,
                _ => panic!("unexpected manifest line {line:?}"),
            };
            continue;
        }
        match part {
            "stat" => {
                let f: Vec<&str> = line.splitn(6, '|').collect();
                assert_eq!(f.len(), 6, "stat line {line:?}");
                let kind = f[0].replace("regular empty file", "regular file");
                // Directory sizes are the file system's own business.
                let size = if kind == "directory" { "" } else { f[4] };
                entries.insert(
                    f[5].to_string(),
                    format!("{kind} {} {} {} {size}", f[1], f[2], f[3]),
                );
            }
            "sha256" => {
                let (hash, path) = line.split_once("  ").expect("sha256sum line");
                entry(&mut entries, path).push_str(&format!(" {hash}"));
            }
            "readlink" => {
                let (target, path) = line.rsplit_once('|').expect("readlink line");
                entry(&mut entries, path).push_str(&format!(" -> {target}"));
            }
            "xattr" => {
                if let Some(path) = line.strip_prefix("# file: ") {
                    xattr_path = format!("./{path}");
                } else if !line.is_empty() {
                    entry(&mut entries, &xattr_path).push_str(&format!(" xattr {line}"));
                }
            }
            _ => panic!("manifest line before any part: {line:?}"),
        }
    }
    entries
        .iter()
        .map(|(path, what)| format!("{path}: {what}\n"))
        .collect()
}

fn entry<'a>(entries: &'a mut BTreeMap<String, String>, path: &str) -> &'a mut String {
    entries
        .get_mut(path)
        .unwrap_or_else(|| panic!("manifest: {path:?} has no stat line"))
}

/// The manifest of a host directory, by the same shell function.
fn host_manifest(dir: &Path) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("{MANIFEST_SH}\nmanifest \"$1\""))
        .arg("manifest")
        .arg(dir)
        .output()
        .expect("bash");
    assert!(out.status.success(), "manifest of {}", dir.display());
    normalize(&String::from_utf8(out.stdout).unwrap())
}

/// What f2fuse reads from `img`: `f2fuse extract` (as root: owners, modes,
/// hard links, xattrs kept), then the manifest of the copy.
fn f2fuse_manifest(scratch: &Scratch, img: &Path, tag: &str) -> String {
    let dir = scratch.join(format!("extract-{tag}"));
    let _ = fs::remove_dir_all(&dir);
    f2fuse(&["extract", "-q", arg(img), arg(&dir)]);
    host_manifest(&dir)
}

/// Equal manifests, or a panic listing the lines that differ.
#[track_caller]
fn assert_same(what: &str, expected: &str, got: &str) {
    if expected == got {
        return;
    }
    let want: Vec<&str> = expected.lines().collect();
    let have: Vec<&str> = got.lines().collect();
    let missing: Vec<&&str> = want.iter().filter(|l| !have.contains(l)).collect();
    let extra: Vec<&&str> = have.iter().filter(|l| !want.contains(l)).collect();
    panic!(
        "{what}: manifests differ\nonly in the expected ({} lines):\n{}\nonly in the actual ({} lines):\n{}",
        want.len(),
        missing.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
        have.len(),
        extra.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
    );
}

#[track_caller]
fn assert_fsck(img: &Path, when: &str) {
    if let Err(report) = fsck_f2fs(img) {
        panic!("fsck after {when}:\n{report}");
    }
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

fn set_user_xattr(path: &Path, name: &str, value: &[u8]) {
    let status = Command::new("setfattr")
        .arg("-n")
        .arg(name)
        .arg("-v")
        .arg(format!(
            "0x{}",
            value.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ))
        .arg(path)
        .status()
        .expect("setfattr");
    assert!(status.success(), "setfattr {name} {}", path.display());
}

/// A tree with the cases an image must get right: inline and non-inline
/// files, files past the inode's and the direct nodes' addresses, holes, a
/// sparse file reaching the double-indirect node, symlinks (short, long,
/// dangling), hard links across directories, xattrs (small and large),
/// a 1200-entry directory, UTF-8 and 255-byte names.
fn varied_tree(root: &Path) {
    let mut rng = Rng(0x5eed_f2f5);
    let files = root.join("files");
    fs::create_dir_all(&files).unwrap();
    for (name, len) in [
        ("empty", 0),
        ("one", 1),
        ("inline", 3000),
        ("just_over_inline", 3500),
        ("small", 5000),
        ("medium", 300_000),
        ("big", 6 << 20),
    ] {
        fs::write(files.join(name), random_bytes(&mut rng, len)).unwrap();
    }
    // Holes: data at the start, in the middle, at the end; and a file whose
    // last data block lies past the indirect nodes (double-indirect).
    let sparse = fs::File::create(files.join("sparse")).unwrap();
    use std::os::unix::fs::FileExt;
    // 923 addresses in the inode, 2 x 1018 in direct nodes: block 5200
    // lies under the first indirect node.
    for off in [0u64, 5 << 20, (5200 << 12) + 123] {
        sparse
            .write_all_at(&random_bytes(&mut rng, 10_000), off)
            .unwrap();
    }
    sparse.set_len(24 << 20).unwrap();
    fs::write(files.join("text.txt"), "f2fs text line\n".repeat(2000)).unwrap();

    let other = root.join("other");
    fs::create_dir_all(&other).unwrap();
    fs::hard_link(files.join("small"), other.join("small_link")).unwrap();
    fs::hard_link(files.join("small"), other.join("small_link2")).unwrap();
    symlink("../files/one", other.join("short_sym")).unwrap();
    symlink("x/".repeat(1500), other.join("long_sym")).unwrap();
    symlink("nowhere", other.join("dangling")).unwrap();
    set_user_xattr(&files.join("small"), "user.small", b"v");
    set_user_xattr(
        &files.join("inline"),
        "user.big",
        &random_bytes(&mut rng, 1500),
    );
    set_user_xattr(&other, "user.dir", b"directory value");

    let many = root.join("many");
    fs::create_dir_all(&many).unwrap();
    for i in 0..1200 {
        fs::write(many.join(format!("entry_{i}")), format!("{i}\n")).unwrap();
    }
    let names = root.join("names");
    fs::create_dir_all(&names).unwrap();
    fs::write(names.join("UTF-8 ünïcødé 名前 😀"), b"utf8").unwrap();
    fs::write(names.join("n".repeat(255)), b"long name").unwrap();
    fs::write(names.join("with space"), b"space").unwrap();
}

/// A tree per compression algorithm under `root/ALG`: compressible files of
/// several sizes (partial last cluster, many clusters), an incompressible
/// one (stored raw) and a mixed one.
fn compressible_tree(root: &Path, alg: &str) {
    let mut rng = Rng(0xc0de ^ alg.len() as u64);
    let dir = root.join(alg);
    fs::create_dir_all(&dir).unwrap();
    let text = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("{alg} line {i} of compressible text\n").into_bytes())
            .collect()
    };
    fs::write(dir.join("text"), text(40_000)).unwrap();
    fs::write(dir.join("partial"), text(700)).unwrap();
    fs::write(dir.join("random"), random_bytes(&mut rng, 100_000)).unwrap();
    let mut mixed = text(3000);
    mixed.extend(random_bytes(&mut rng, 50_000));
    mixed.extend(text(3000));
    fs::write(dir.join("mixed"), mixed).unwrap();
    fs::write(dir.join("zeros"), vec![0u8; 200_000]).unwrap();
}

/// The kernel writes to a mounted image at $1: new files of every size,
/// appends, overwrites, truncation, links, renames, removals, xattrs.
const KERNEL_WRITES_SH: &str = r#"
kernel_writes() {
    d=$1
    mkdir "$d/kernel"
    dd if=/dev/urandom of="$d/kernel/random" bs=1k count=700 2>/dev/null
    seq 1 100000 >"$d/kernel/seq"
    echo inline >"$d/kernel/inline"
    for i in $(seq 1 300); do echo "$i" >"$d/kernel/k_$i"; done
    cat "$d/files/small" >>"$d/files/big"
    dd if=/dev/urandom of="$d/files/big" bs=4096 seek=100 count=3 conv=notrunc 2>/dev/null
    dd if=/dev/urandom of="$d/files/sparse" bs=4096 seek=700 count=2 conv=notrunc 2>/dev/null
    truncate -s 1000 "$d/files/just_over_inline"
    echo more >>"$d/files/inline"
    ln "$d/files/one" "$d/kernel/one_link"
    ln -s ../files "$d/kernel/sym"
    mv "$d/many/entry_5" "$d/kernel/moved"
    rm "$d/many/entry_6" "$d/other/small_link2"
    setfattr -n user.kernel -v written "$d/kernel/random"
    setfattr -x user.small "$d/files/small"
}
"#;

/// `check DESCRIPTION COMMAND...` in the VM: a CHECK line, ok or FAIL.
const CHECK_SH: &str = r#"
check() {
    what=$1
    shift
    if "$@" >/dev/null 2>&1; then echo "CHECK ok $what"; else echo "CHECK FAIL $what"; fi
}
"#;

/// Every CHECK line says ok, and there are `count` of them.
#[track_caller]
fn assert_checks(run: &VmRun, count: usize) {
    let checks = run.values("CHECK");
    let failed: Vec<&String> = checks.iter().filter(|c| !c.starts_with("ok ")).collect();
    assert!(
        failed.is_empty(),
        "kernel-side checks failed: {failed:#?}\n{}",
        run.out
    );
    assert_eq!(checks.len(), count, "checks run: {checks:#?}");
}

/// Files in casefolded directories, written by f2fuse, for the kernel to
/// find under other spellings.
const CASEFOLD_FILES: &[(&str, &str)] = &[
    ("Straße.txt", "strasse"),
    ("caf\u{e9}", "cafe precomposed"),
    ("\u{131}", "dotless i"),
    ("A\u{200B}B", "ignorable"),
    ("Mixed/Inner.TXT", "inner"),
];

fn write_casefolded_dirs(img: &Path) {
    let fs = open_writable(img);
    let dir = fs.mkdir(ROOT, b"cf", 0o755, 0, 0).unwrap();
    let flags = fs.get_flags(&dir);
    let cf = fs.set_flags(dir.ino, flags | CASEFOLD).unwrap().ino;
    let mixed = fs.mkdir(cf, b"Mixed", 0o755, 0, 0).unwrap().ino;
    for (path, text) in CASEFOLD_FILES {
        let (parent, name) = match path.split_once('/') {
            Some((_, name)) => (mixed, name),
            None => (cf, *path),
        };
        let ino = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, text.as_bytes()).unwrap();
    }
    for i in 0..300 {
        let ino = fs
            .create(cf, format!("Entry_{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, format!("{i}\n").as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
}

/// Kernel-side lookups of f2fuse's casefolded names under other spellings,
/// then kernel-created names (checked by f2fuse afterwards). $1: the mount.
const CASEFOLD_KERNEL_SH: &str = r#"
casefold_kernel() {
    cf=$1/cf
    lsattr -d "$cf"
    check "cf has F" sh -c "lsattr -d '$cf' | cut -d' ' -f1 | grep -q F"
    check "STRASSE.TXT" sh -c "[ \"\$(cat '$cf/STRASSE.TXT')\" = strasse ]"
    check "strasse.txt" sh -c "[ \"\$(cat '$cf/strasse.txt')\" = strasse ]"
    check "decomposed e" sh -c "[ \"\$(cat \"$cf/\$(printf 'cafe\314\201')\")\" = 'cafe precomposed' ]"
    check "CAFE capital E acute" sh -c "[ \"\$(cat \"$cf/\$(printf 'CAF\303\211')\")\" = 'cafe precomposed' ]"
    check "dotless i" sh -c "[ \"\$(cat \"$cf/\$(printf '\304\261')\")\" = 'dotless i' ]"
    check "I is not dotless i" sh -c "! cat '$cf/I'"
    check "ignorable dropped" sh -c "[ \"\$(cat '$cf/ab')\" = ignorable ]"
    check "mixed/inner.txt" sh -c "[ \"\$(cat '$cf/mixed/inner.txt')\" = inner ]"
    check "ENTRY_299" sh -c "[ \"\$(cat '$cf/ENTRY_299')\" = 299 ]"
    before=$(ls "$cf" | wc -l)
    check "no twin created" sh -c "touch '$cf/STRASSE.TXT' && [ \$(ls '$cf' | wc -l) = $before ]"
    check "twin mkdir EEXIST" sh -c "! mkdir '$cf/MIXED'"
    printf 'kernel\n' >"$cf/$(printf 'Kernel_\303\204.txt')"
    mkdir "$cf/KernelDir"
    echo inner >"$cf/KernelDir/File"
    check "KernelDir inherits F" sh -c "lsattr -d '$cf/KernelDir' | cut -d' ' -f1 | grep -q F"
}
"#;
const CASEFOLD_KERNEL_CHECKS: usize = 13;

/// Kernel writes to f2fuse's compressed files at $1/ALG, after reporting
/// each file's flags and compressed block count.
const COMPRESSED_KERNEL_SH: &str = r#"
compressed_kernel() {
    for alg in lz4 lzo zstd lzo-rle; do
        d=$1/$alg
        for f in text partial random mixed zeros; do
            echo "LSATTR $alg/$f $(lsattr "$d/$f" | cut -d' ' -f1)"
            echo "CBLOCKS $alg/$f $(f2fs_io get_cblocks "$d/$f")"
        done
        seq 1 5000 >>"$d/text"
        dd if=/dev/urandom of="$d/mixed" bs=4096 seek=3 count=2 conv=notrunc 2>/dev/null
        truncate -s 50000 "$d/zeros"
        seq 1 20000 >"$d/new"
    done
    for f in "$1"/engine-*/rewritten "$1"/fuse/*.txt; do
        [ -e "$f" ] || continue
        echo "LSATTR ${f#$1/} $(lsattr "$f" | cut -d' ' -f1)"
        echo "ENGINE_CBLOCKS ${f#$1/} $(f2fs_io get_cblocks "$f")"
        dd if=/dev/urandom of="$f" bs=4096 seek=2 count=1 conv=notrunc 2>/dev/null
        seq 1 3000 >>"$f"
    done
}
"#;

/// Through the library, with each algorithm (zstd at level 3, lz4 with
/// checksums): compressed files written in uneven pieces, overwritten
/// inside clusters with compressible and random data, cut in the middle
/// of a cluster and extended past a hole, under /engine-ALG.
fn rewrite_compressed_files(img: &Path) {
    let fs = open_writable(img);
    let mut rng = Rng(0xfeed);
    for algorithm in CompressAlgorithm::ALL {
        let options = CompressOptions {
            algorithm,
            level: if algorithm == CompressAlgorithm::Zstd {
                3
            } else {
                0
            },
            log_cluster_size: 2 + algorithm as u8,
            checksum: algorithm == CompressAlgorithm::Lz4,
            ..CompressOptions::default()
        };
        fs.set_compress_options(options).unwrap();
        let name = format!("engine-{}", algorithm as u8);
        let dir = fs.mkdir(ROOT, name.as_bytes(), 0o755, 0, 0).unwrap().ino;
        fs.set_flags(dir, inode_flag::COMPR).unwrap();
        let text: Vec<u8> = (0..12_000)
            .flat_map(|i| format!("engine line {i}\n").into_bytes())
            .collect();
        let file = fs.create(dir, b"rewritten", 0o644, 0, 0).unwrap().ino;
        for (i, piece) in text.chunks(70_001).enumerate() {
            fs.write(file, i as u64 * 70_001, piece).unwrap();
        }
        fs.write(file, 50_000, &random_bytes(&mut rng, 10_000))
            .unwrap();
        fs.write(file, 120_000, &text[..30_000]).unwrap();
        fs.setattr(
            file,
            &SetAttr {
                size: Some(300_001),
                ..SetAttr::default()
            },
        )
        .unwrap();
        fs.write(file, 400_000, &text[..20_000]).unwrap();
    }
    fs.unmount().unwrap();
}

/// A small image churned through the library until most segments are
/// partly valid: 24 files of 1 MiB, 3000 random 16 KiB overwrites with a
/// checkpoint every 250, every third file removed and rewritten. Returns
/// f2fuse's cleaning counters (blocks moved, sections cleaned).
fn churned_image(img: &Path) -> (u64, u64) {
    f2fuse(&["mkfs", "-q", "--size", "96M", arg(img)]);
    let fs = open_writable(img);
    // Out of place, or the small volume's default FORCE would rewrite in
    // place and leave the sections whole.
    fs.set_tunable("ipu_policy", 0).unwrap();
    let mut rng = Rng(0xc4a2);
    let mut files = Vec::new();
    for i in 0..24 {
        let ino = fs
            .create(ROOT, format!("churn_{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &random_bytes(&mut rng, 1 << 20)).unwrap();
        files.push(ino);
    }
    fs.checkpoint().unwrap();
    for round in 0..3000u64 {
        let ino = files[rng.below(files.len() as u64) as usize];
        let off = rng.below(64) * 16384;
        fs.write(ino, off, &random_bytes(&mut rng, 16384)).unwrap();
        if round % 250 == 249 {
            fs.checkpoint().unwrap();
        }
    }
    for i in (0..24).step_by(3) {
        let name = format!("churn_{i}");
        fs.unlink(ROOT, name.as_bytes()).unwrap();
        let ino = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &random_bytes(&mut rng, 700_000)).unwrap();
    }
    let gc = fs.gc_stats();
    fs.unmount().unwrap();
    (gc.data_blocks_moved, gc.sections_cleaned)
}

/// The kernel cleans f2fuse's churned image ($1 the mount, $2 the device
/// name) urgently for a while: its cleaner finds every moved block's owner
/// through f2fuse's SSA and checks it against the node (a wrong summary is
/// skipped or reported). The debugfs GC counters are printed.
const KERNEL_CLEANS_SH: &str = r#"
kernel_cleans() {
    echo "GC $(grep -A6 'GC calls' /sys/kernel/debug/f2fs/status | tr -s ' \n' ' ')"
    echo 1 >/sys/fs/f2fs/$2/gc_urgent_sleep_time
    echo 1 >/sys/fs/f2fs/$2/gc_urgent
    sleep 8
    echo 0 >/sys/fs/f2fs/$2/gc_urgent
    sync
    echo "GC $(grep -A6 'GC calls' /sys/kernel/debug/f2fs/status | tr -s ' \n' ' ')"
    dd if=/dev/urandom of="$1/after_gc" bs=1k count=2000 2>/dev/null
}
"#;

/// Through a FUSE mount with `compress_extension=txt` and zstd: `.txt`
/// files are compressed as they are created, one is then overwritten in
/// the middle; a `.bin` file is not compressed. False (with a note) where
/// FUSE mounts cannot be made.
fn write_compressed_through_mount(img: &Path, mnt: &Path) -> bool {
    let Some(daemon) = mount_in_foreground(
        img,
        mnt,
        &["-o", "compress_extension=txt,compress_algorithm=zstd"],
    ) else {
        return false;
    };
    let dir = mnt.join("fuse");
    fs::create_dir(&dir).unwrap();
    let text: Vec<u8> = (0..20_000)
        .flat_map(|i| format!("through the mount {i}\n").into_bytes())
        .collect();
    fs::write(dir.join("a.txt"), &text).unwrap();
    fs::write(dir.join("b.txt"), &text).unwrap();
    let b = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("b.txt"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&b, &random_bytes(&mut Rng(7), 20_000), 100_000)
        .unwrap();
    b.sync_all().unwrap();
    drop(b);
    fs::write(dir.join("c.bin"), &text).unwrap();
    unmount_foreground(daemon, mnt);
    true
}

/// Concurrent large O_DIRECT writers through the mount (issue 11's per-file
/// streams: each file's blocks in segments of its own, outside the six
/// logs), one file deleted again so its held segments are freed before the
/// unmount's checkpoint. Returns false when FUSE is unavailable.
fn write_streams_through_mount(img: &Path, mnt: &Path) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const WRITERS: usize = 3;
    const CHUNK: usize = 1 << 20;
    const CHUNKS: usize = 6;
    let Some(daemon) = mount_in_foreground(img, mnt, &[]) else {
        return false;
    };
    let dir = mnt.join("streams");
    fs::create_dir(&dir).unwrap();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let path = dir.join(format!("s{w}.bin"));
            scope.spawn(move || {
                let file = fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                    .unwrap();
                // Preallocated first, as fio does: a stream starts at the
                // first request (without it too, as a tentative stream).
                let len = (CHUNKS * CHUNK) as libc::off_t;
                // SAFETY: a plain syscall on an open descriptor.
                let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
                assert_eq!(ret, 0, "fallocate: {}", std::io::Error::last_os_error());
                // O_DIRECT wants a block-aligned buffer.
                let mut backing = vec![0u8; CHUNK + 4096];
                let skew = backing.as_ptr().align_offset(4096);
                let buf = &mut backing[skew..skew + CHUNK];
                for c in 0..CHUNKS {
                    buf.copy_from_slice(&random_bytes(
                        &mut Rng((w * CHUNKS + c) as u64 + 1),
                        CHUNK,
                    ));
                    file.write_all_at(buf, (c * CHUNK) as u64).unwrap();
                }
                file.sync_all().unwrap();
            });
        }
    });
    fs::remove_file(dir.join(format!("s{}.bin", WRITERS - 1))).unwrap();
    unmount_foreground(daemon, mnt);
    for w in 0..WRITERS - 1 {
        let text = f2fuse(&["extents", arg(img), &format!("/streams/s{w}.bin")]);
        let count: usize = text
            .rsplit(": ")
            .next()
            .and_then(|tail| tail.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("extent count in {text:?}"));
        assert!(
            count <= 2,
            "s{w}.bin was written by {WRITERS} concurrent 1 MiB O_DIRECT writers: \
             {count} extents (per-file streams should keep it in one run):\n{text}"
        );
    }
    true
}

const ALGORITHMS: &[(&str, &str)] = &[("lz4", "2"), ("lzo", "3"), ("zstd", "4"), ("lzo-rle", "2")];

#[test]
fn f2fuse_images_mount_in_the_kernel() {
    if !vm_available() {
        return;
    }
    let scratch = Scratch::new("kvm-ours");
    let src = scratch.join("src");
    varied_tree(&src);
    let plain = scratch.join("plain.img");
    let featured = scratch.join("featured.img");
    let folded = scratch.join("casefold.img");
    let compressed = scratch.join("compressed.img");
    f2fuse(&["build", "-q", "-S", "160M", arg(&src), arg(&plain)]);
    f2fuse(&[
        "build",
        "-q",
        "-S",
        "160M",
        "-O",
        "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,sb_checksum",
        arg(&src),
        arg(&featured),
    ]);
    f2fuse(&[
        "build",
        "-q",
        "-S",
        "160M",
        "-O",
        "casefold",
        arg(&src),
        arg(&folded),
    ]);
    write_casefolded_dirs(&folded);
    for (i, (alg, log)) in ALGORITHMS.iter().enumerate() {
        let tree = scratch.join(format!("tree-{alg}"));
        compressible_tree(&tree, alg);
        let size: &[&str] = if i == 0 { &["-S", "96M"] } else { &[] };
        let mut args = vec!["build", "-q", "-c", "-a", alg, "-L", log];
        args.extend(size);
        args.extend([arg(&tree), arg(&compressed)]);
        f2fuse(&args);
    }
    write_streams_through_mount(&featured, &scratch.join("mnt-streams"));
    rewrite_compressed_files(&compressed);
    let through_mount = write_compressed_through_mount(&compressed, &scratch.join("mnt"));
    // mkfs.f2fs's image with every inode feature, filled by f2fuse.
    let theirs = scratch.join("mkfs-f2fs.img");
    mkfs_f2fs(
        &theirs,
        160 << 20,
        &[
            "-O",
            "extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,sb_checksum,lost_found",
        ],
    );
    f2fuse(&["build", "-q", arg(&src), arg(&theirs)]);
    let churned = scratch.join("churned.img");
    let (moved, cleaned) = churned_image(&churned);
    eprintln!("churned image: f2fuse cleaned {cleaned} sections, moved {moved} data blocks");
    let images = [
        ("plain", &plain),
        ("featured", &featured),
        ("casefold", &folded),
        ("compressed", &compressed),
        ("churned", &churned),
        ("mkfs-f2fs", &theirs),
    ];
    let mut before = BTreeMap::new();
    for (name, img) in images {
        assert_fsck(img, &format!("f2fuse build ({name})"));
        before.insert(
            name,
            f2fuse_manifest(&scratch, img, &format!("{name}-before")),
        );
    }
    // f2fuse's reader agrees with the source tree (so the kernel's view
    // below is compared with the source, not only with f2fuse).
    assert_same(
        "plain image vs source",
        &host_manifest(&src),
        &before["plain"],
    );

    let mut script = vm_prologue();
    script.push_str(CHECK_SH);
    script.push_str(KERNEL_WRITES_SH);
    script.push_str(CASEFOLD_KERNEL_SH);
    script.push_str(COMPRESSED_KERNEL_SH);
    script.push_str(KERNEL_CLEANS_SH);
    for (disk, (name, _)) in images.iter().enumerate() {
        let dev = format!("/dev/vd{}", (b'a' + disk as u8) as char);
        let writes = match *name {
            "compressed" => "compressed_kernel /mnt/$n".to_string(),
            "churned" => format!("kernel_cleans /mnt/$n vd{}", (b'a' + disk as u8) as char),
            "casefold" => "kernel_writes /mnt/$n\ncasefold_kernel /mnt/$n".to_string(),
            _ => "kernel_writes /mnt/$n".to_string(),
        };
        script.push_str(&format!(
            "n={name}\nmkdir -p /mnt/$n\nmount -t f2fs {dev} /mnt/$n\n\
             section before-$n manifest /mnt/$n\n{writes}\numount /mnt/$n\n\
             mount -t f2fs {dev} /mnt/$n\nsection after-$n manifest /mnt/$n\numount /mnt/$n\n"
        ));
    }
    script.push_str(VM_EPILOGUE);
    let disks: Vec<&Path> = images.iter().map(|(_, p)| p.as_path()).collect();
    let run = run_vm(&scratch, &disks, &script);
    run.assert_kernel_quiet();
    assert_checks(&run, CASEFOLD_KERNEL_CHECKS);

    for (name, img) in images {
        assert_same(
            &format!("{name}: the kernel's view of f2fuse's image"),
            &before[name],
            &normalize(&run.section(&format!("before-{name}"))),
        );
        assert_fsck(img, &format!("the kernel's writes ({name})"));
        assert_same(
            &format!("{name}: f2fuse's view of the kernel's writes"),
            &normalize(&run.section(&format!("after-{name}"))),
            &f2fuse_manifest(&scratch, img, &format!("{name}-after")),
        );
    }

    // Compression: the kernel saw f2fuse's files as compressed (flag c) and
    // compressible clusters as compressed; incompressible ones raw.
    let cblocks: BTreeMap<String, u64> = run
        .values("CBLOCKS")
        .iter()
        .map(|l| {
            let (file, n) = l.split_once(' ').unwrap();
            (
                file.to_string(),
                n.trim().parse().unwrap_or_else(|_| panic!("{l}")),
            )
        })
        .collect();
    for line in run.values("LSATTR") {
        assert!(
            line.split_once(' ').unwrap().1.contains('c'),
            "the kernel does not see f2fuse's compressed file as compressed: {line}"
        );
    }
    for (alg, _) in ALGORITHMS {
        // ("zeros" is all holes: build keeps zero blocks as holes.)
        for file in ["text", "mixed"] {
            assert!(
                cblocks[&format!("{alg}/{file}")] > 0,
                "{alg}/{file}: no compressed blocks per the kernel: {cblocks:?}"
            );
        }
        assert_eq!(cblocks[&format!("{alg}/random")], 0, "{cblocks:?}");
    }

    let gc = run.values("GC");
    eprintln!("kernel GC on the churned image: {gc:#?}");
    assert!(
        kernel_gc_blocks_tried(&run) > 0,
        "the kernel's cleaner moved nothing: {gc:?}"
    );
    let engine_cblocks = run.values("ENGINE_CBLOCKS");
    assert_eq!(
        engine_cblocks.len(),
        if through_mount { 6 } else { 4 },
        "{}",
        run.out
    );
    for line in engine_cblocks {
        let n: u64 = line.split_once(' ').unwrap().1.trim().parse().unwrap();
        assert!(n > 0, "no compressed blocks per the kernel: {line}");
    }

    // Casefolding: f2fuse finds the kernel's names under other spellings.
    let fs = Fs::open_path(&folded, OpenOptions::default()).unwrap();
    let cf = fs.lookup(ROOT, b"cf").unwrap().ino;
    let kernel_file = fs.lookup(cf, "Kernel_\u{c4}.txt".as_bytes()).unwrap().ino;
    assert_eq!(
        fs.lookup(cf, "KERNEL_\u{e4}.TXT".as_bytes()).unwrap().ino,
        kernel_file
    );
    assert_eq!(
        fs.lookup(cf, "kernel_a\u{308}.txt".as_bytes()).unwrap().ino,
        kernel_file
    );
    let kernel_dir = fs.lookup(cf, b"kerneldir").unwrap().ino;
    assert_ne!(fs.inode(kernel_dir).unwrap().flags & CASEFOLD, 0);
    assert!(fs.lookup(kernel_dir, b"FILE").is_ok());
}

/// The kernel writes compressed files with each algorithm (mount options
/// compress_algorithm and compress_extension, chattr +c), overwrites and
/// appends inside compressed clusters, and reports the compressed blocks.
const KERNEL_COMPRESSES_SH: &str = r#"
kernel_compresses() {
    mkdir -p /mnt/a
    for alg in lzo lz4 zstd lzo-rle; do
        opts=compress_algorithm=$alg,compress_extension=txt
        case $alg in
        zstd) opts=$opts,compress_log_size=4 ;;
        lz4) opts=$opts,compress_chksum ;;
        esac
        mount -t f2fs -o "$opts" "$1" /mnt/a
        d=/mnt/a/$alg
        mkdir "$d"
        seq 1 200000 >"$d/seq.txt"
        { seq 1 3000; dd if=/dev/urandom bs=1k count=64 2>/dev/null; seq 1 3000; } >"$d/mixed.txt"
        dd if=/dev/urandom of="$d/random.txt" bs=1k count=40 2>/dev/null
        seq 1 1000 >"$d/partial.txt"
        touch "$d/forced.bin"
        chattr +c "$d/forced.bin"
        yes "forced $alg" | head -c 300000 >>"$d/forced.bin"
        seq 1 50000 >"$d/plain.dat"
        sync
        dd if=/dev/urandom of="$d/seq.txt" bs=4096 seek=5 count=1 conv=notrunc 2>/dev/null
        seq 1 100 >>"$d/seq.txt"
        sync
        for f in seq.txt mixed.txt random.txt partial.txt forced.bin; do
            echo "CBLOCKS $alg/$f $(f2fs_io get_cblocks "$d/$f")"
        done
        umount /mnt/a
    done
}
"#;

/// The kernel fills a casefolded directory (and a plain one with names
/// that differ only in case).
const KERNEL_CASEFOLDS_SH: &str = r#"
kernel_casefolds() {
    mkdir -p /mnt/b
    mount -t f2fs "$1" /mnt/b
    cf=/mnt/b/cf
    mkdir "$cf"
    chattr +F "$cf"
    echo strasse >"$cf/Straße.txt"
    echo cafe >"$cf/$(printf 'caf\303\251')"
    echo dotless >"$cf/$(printf '\304\261')"
    echo ignorable >"$cf/$(printf 'A\342\200\213B')"
    mkdir "$cf/Mixed"
    echo inner >"$cf/Mixed/Inner.TXT"
    i=0
    while [ $i -lt 400 ]; do
        echo $i >"$cf/Entry_$i"
        i=$((i + 1))
    done
    mkdir /mnt/b/plain
    echo upper >/mnt/b/plain/Case
    echo lower >/mnt/b/plain/case
    umount /mnt/b
}
"#;

/// The kernel writes files of several owners on a quota image.
const KERNEL_QUOTA_SH: &str = r#"
kernel_quota() {
    mkdir -p /mnt/c
    mount -t f2fs "$1" /mnt/c
    mkdir /mnt/c/u
    dd if=/dev/urandom of=/mnt/c/u/f bs=1k count=300 2>/dev/null
    chown -R 1000:1000 /mnt/c/u
    dd if=/dev/urandom of=/mnt/c/g bs=1k count=120 2>/dev/null
    chown 2000:3000 /mnt/c/g
    echo root >/mnt/c/r
    umount /mnt/c
}
"#;

/// After a checkpoint (sync), every change is fsync'd or fdatasync'd
/// alone; the f2fs checkpoint counter is printed before and after (equal:
/// every fsync went to the roll-forward chain).
const KERNEL_FSYNCS_SH: &str = r#"
kernel_fsyncs() {
    mkdir -p /mnt/d
    mount -t f2fs "$1" /mnt/d
    d=/mnt/d
    mkdir "$d/dir"
    dd if=/dev/urandom of="$d/append" bs=1k count=100 2>/dev/null
    dd if=/dev/urandom of="$d/overwrite" bs=1k count=1000 2>/dev/null
    dd if=/dev/urandom of="$d/shrink" bs=1k count=500 2>/dev/null
    echo small >"$d/grow"
    dd if=/dev/urandom of="$d/dir/old" bs=1k count=10 2>/dev/null
    sync
    echo "CP $(grep -m1 'CP calls' /sys/kernel/debug/f2fs/status)"
    dd if=/dev/urandom bs=1k count=37 2>/dev/null >>"$d/append"
    sync "$d/append"
    dd if=/dev/urandom of="$d/overwrite" bs=4096 seek=10 count=5 conv=notrunc 2>/dev/null
    sync -d "$d/overwrite"
    truncate -s 12345 "$d/shrink"
    sync "$d/shrink"
    dd if=/dev/urandom of="$d/grow" bs=1k count=8 conv=notrunc 2>/dev/null
    sync "$d/grow"
    dd if=/dev/urandom of="$d/dir/new" bs=1k count=200 2>/dev/null
    sync "$d/dir/new"
    echo tiny >"$d/new_inline"
    sync "$d/new_inline"
    echo "CP $(grep -m1 'CP calls' /sys/kernel/debug/f2fs/status)"
}
"#;

/// An image f2fuse left as a power cut would (on a memory device, never
/// unmounted) after a checkpoint and then fsyncs alone: an append, a new
/// file in an old directory, a new inline file, an overwrite, a truncation.
/// `mirror` gets the same files on the host, as they must read after a
/// roll-forward.
fn f2fuse_cut_image(img: &Path, mirror: &Path) {
    let (dev, fs) = uncheckpointed_memory_image();
    let mut rng = Rng(0xc07);
    fs::create_dir_all(mirror.join("dir")).unwrap();
    let put = |parent: u32, path: &str, offset: u64, data: &[u8]| -> u32 {
        let name = path.rsplit('/').next().unwrap().as_bytes();
        let ino = match fs.lookup(parent, name) {
            Ok(e) => e.ino,
            Err(_) => fs.create(parent, name, 0o644, 0, 0).unwrap().ino,
        };
        fs.write(ino, offset, data).unwrap();
        let host = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(mirror.join(path))
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&host, data, offset).unwrap();
        ino
    };
    let dir = fs.mkdir(ROOT, b"dir", 0o755, 0, 0).unwrap().ino;
    let base = put(ROOT, "base", 0, &random_bytes(&mut rng, 300_000));
    let old = put(dir, "dir/old", 0, &random_bytes(&mut rng, 10_000));
    let shrink = put(ROOT, "shrink", 0, &random_bytes(&mut rng, 90_000));
    fs.checkpoint().unwrap();
    put(ROOT, "base", 300_000, &random_bytes(&mut rng, 37_000));
    fs.fsync(base).unwrap();
    let new = put(dir, "dir/new", 0, &random_bytes(&mut rng, 200_000));
    fs.fsync(new).unwrap();
    let tiny = put(ROOT, "new_inline", 0, b"tiny\n");
    fs.fsync(tiny).unwrap();
    put(dir, "dir/old", 4096, &random_bytes(&mut rng, 8192));
    fs.fsync(old).unwrap();
    let size = SetAttr {
        size: Some(12_345),
        ..SetAttr::default()
    };
    fs.setattr(shrink, &size).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(mirror.join("shrink"))
        .unwrap()
        .set_len(12_345)
        .unwrap();
    fs.fsync(shrink).unwrap();
    drop(fs);
    let image = dev.snapshot();
    // Every fsync went to the chain: no checkpoint since.
    let chain = fsync_chain_len(image.clone());
    assert!(chain >= 5, "fsyncs left a chain of {chain} blocks");
    fs::write(img, image).unwrap();
}

#[test]
fn kernel_written_images_open_in_f2fuse() {
    if !vm_available() {
        return;
    }
    let scratch = Scratch::new("kvm-kernel");
    let compressed = scratch.join("compressed.img");
    let folded = scratch.join("casefold.img");
    let quota = scratch.join("quota.img");
    let cut = scratch.join("fsync.img");
    mkfs_f2fs(&compressed, 160 << 20, &["-O", "extra_attr,compression"]);
    mkfs_f2fs(&folded, 96 << 20, &["-O", "casefold", "-C", "utf8"]);
    mkfs_f2fs(&quota, 96 << 20, &["-O", "quota"]);
    mkfs_f2fs(&cut, 96 << 20, &[]);

    let mut script = vm_prologue();
    for part in [
        KERNEL_COMPRESSES_SH,
        KERNEL_CASEFOLDS_SH,
        KERNEL_QUOTA_SH,
        KERNEL_FSYNCS_SH,
    ] {
        script.push_str(part);
    }
    script.push_str(
        "kernel_compresses /dev/vda\n\
         mount -t f2fs /dev/vda /mnt/a\nsection compressed manifest /mnt/a\numount /mnt/a\n\
         kernel_casefolds /dev/vdb\n\
         mount -t f2fs /dev/vdb /mnt/b\nsection casefold manifest /mnt/b\numount /mnt/b\n\
         kernel_quota /dev/vdc\n\
         mount -t f2fs /dev/vdc /mnt/c\nsection quota manifest /mnt/c\numount /mnt/c\n\
         kernel_fsyncs /dev/vdd\nsection fsync manifest /mnt/d\n",
    );
    script.push_str(VM_EPILOGUE);
    script.push_str("vm-powercut\n");
    let run = run_vm(&scratch, &[&compressed, &folded, &quota, &cut], &script);
    run.assert_kernel_quiet();

    // The kernel did compress: else this would test nothing.
    for line in run.values("CBLOCKS") {
        let (file, n) = line.split_once(' ').unwrap();
        let n: u64 = n.trim().parse().unwrap_or_else(|_| panic!("{line}"));
        if ["seq.txt", "forced.bin"].iter().any(|f| file.ends_with(f)) {
            assert!(n > 0, "the kernel did not compress {file}:\n{}", run.out);
        }
    }
    // No checkpoint between the fsyncs and the cut: f2fuse must roll the
    // kernel's fsync chain forward.
    let cps = run.values("CP");
    assert_eq!(cps.len(), 2, "{}", run.out);
    assert_eq!(cps[0], cps[1], "the kernel checkpointed during the fsyncs");

    for (name, img) in [
        ("compressed", &compressed),
        ("casefold", &folded),
        ("quota", &quota),
    ] {
        assert_same(
            &format!("{name}: f2fuse's view of the kernel's image"),
            &normalize(&run.section(name)),
            &f2fuse_manifest(&scratch, img, name),
        );
        assert_fsck(img, &format!("the kernel's writes ({name})"));
    }

    // Roll-forward: a read-only open replays the chain in memory, a
    // writable one on disk (then checkpoints); both show what the kernel
    // had fsync'd, and the result passes fsck.f2fs.
    let fsynced = normalize(&run.section("fsync"));
    assert_same(
        "fsync'd files, read-only open of the cut image",
        &fsynced,
        &f2fuse_manifest(&scratch, &cut, "cut-ro"),
    );
    open_writable(&cut).unmount().unwrap();
    assert_fsck(&cut, "f2fuse's roll-forward of the kernel's fsync chain");
    assert_same(
        "fsync'd files after f2fuse's recovery",
        &fsynced,
        &f2fuse_manifest(&scratch, &cut, "cut-recovered"),
    );

    // Casefolding: f2fuse finds the kernel's names under other spellings
    // and adds its own, which the kernel then finds.
    let fs = open_writable(&folded);
    let cf = fs.lookup(ROOT, b"cf").unwrap().ino;
    let strasse = fs.lookup(cf, "Straße.txt".as_bytes()).unwrap().ino;
    for twin in ["STRASSE.TXT", "strasse.txt", "STRAẞE.TXT"] {
        assert_eq!(
            fs.lookup(cf, twin.as_bytes()).unwrap().ino,
            strasse,
            "{twin}"
        );
    }
    let cafe = fs.lookup(cf, "caf\u{e9}".as_bytes()).unwrap().ino;
    assert_eq!(fs.lookup(cf, "CAFE\u{301}".as_bytes()).unwrap().ino, cafe);
    assert!(fs.lookup(cf, b"I").is_err());
    assert!(fs.lookup(cf, b"ab").is_ok());
    assert!(fs.lookup(cf, b"entry_399").is_ok());
    let mixed = fs.lookup(cf, b"MIXED").unwrap().ino;
    assert!(fs.lookup(mixed, b"inner.txt").is_ok());
    assert_eq!(
        fs.create(cf, b"STRASSE.txt", 0o644, 0, 0)
            .unwrap_err()
            .to_errno(),
        libc::EEXIST
    );
    let ours = fs
        .create(cf, "F2fuse_\u{d6}".as_bytes(), 0o644, 0, 0)
        .unwrap()
        .ino;
    fs.write(ours, 0, b"from f2fuse\n").unwrap();
    fs.unmount().unwrap();
    assert_fsck(
        &folded,
        "f2fuse's writes to the kernel's casefolded directory",
    );

    // The kernel mounts what f2fuse recovered and wrote, and rolls
    // forward f2fuse's own fsync chain.
    let ours = scratch.join("f2fuse-cut.img");
    let mirror = scratch.join("f2fuse-cut-mirror");
    f2fuse_cut_image(&ours, &mirror);
    let script = format!(
        "{}{CHECK_SH}mkdir -p /mnt/d /mnt/b /mnt/e\n\
         mount -t f2fs /dev/vda /mnt/d\nsection fsync manifest /mnt/d\numount /mnt/d\n\
         mount -t f2fs /dev/vdc /mnt/e\nsection f2fuse-cut manifest /mnt/e\numount /mnt/e\n\
         mount -t f2fs /dev/vdb /mnt/b\n\
         check \"f2fuse_o-umlaut\" sh -c \"[ \\\"\\$(cat \\\"/mnt/b/cf/\\$(printf 'f2fuse_\\303\\266')\\\")\\\" = 'from f2fuse' ]\"\n\
         section casefold manifest /mnt/b\numount /mnt/b\n{VM_EPILOGUE}",
        vm_prologue()
    );
    let run = run_vm(&scratch, &[&cut, &folded, &ours], &script);
    run.assert_kernel_quiet();
    assert_checks(&run, 1);
    assert_same(
        "the kernel's view of f2fuse's recovery",
        &fsynced,
        &normalize(&run.section("fsync")),
    );
    assert_same(
        "the kernel's view of f2fuse's casefolded entries",
        &f2fuse_manifest(&scratch, &folded, "casefold-ours"),
        &normalize(&run.section("casefold")),
    );
    assert_fsck(&cut, "the kernel's mount after f2fuse's recovery");
    assert_same(
        "the kernel's roll-forward of f2fuse's fsync chain",
        &host_manifest(&mirror),
        &normalize(&run.section("f2fuse-cut")),
    );
    assert_fsck(&ours, "the kernel's roll-forward of f2fuse's fsync chain");
}

/// A tiny quotactl(2) tool for the VM (busybox has neither quota applets
/// nor a way to run a command as a bare uid): `qtool report DEV` prints
/// every id of the user, group and project quota the kernel knows as
/// `TYPE ID USED_KIB BSOFT BHARD INODES ISOFT IHARD BTIME ITIME`
/// (Q_GETNEXTQUOTA; limits in KiB, grace deadlines in seconds since the
/// epoch), `qtool set TYPE ID BSOFT BHARD ISOFT IHARD DEV` sets limits
/// (Q_SETQUOTA, as setquota), `qtool as UID GID PROG ARGS...` runs PROG as
/// that owner without capabilities, so quota limits apply to it.
const QTOOL_C: &str = r#"
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/quota.h>
#include <unistd.h>

struct next_dqblk {
    uint64_t bhard, bsoft, curspace, ihard, isoft, curinodes, btime, itime;
    uint32_t valid, id;
};

static const char *names[] = {"user", "group", "project"};

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "report")) {
        for (int type = 0; type < 3; type++) {
            for (uint32_t id = 0;;) {
                struct next_dqblk d;
                if (quotactl(QCMD(0x800009 /* Q_GETNEXTQUOTA */, type), argv[2], id,
                             (caddr_t)&d)) {
                    if (errno == ENOENT) break;
                    perror("Q_GETNEXTQUOTA");
                    return 1;
                }
                printf("%s %u %llu %llu %llu %llu %llu %llu %llu %llu\n", names[type], d.id,
                       (unsigned long long)(d.curspace + 1023) / 1024,
                       (unsigned long long)d.bsoft, (unsigned long long)d.bhard,
                       (unsigned long long)d.curinodes, (unsigned long long)d.isoft,
                       (unsigned long long)d.ihard, (unsigned long long)d.btime,
                       (unsigned long long)d.itime);
                if (d.id == UINT32_MAX) break;
                id = d.id + 1;
            }
        }
        return 0;
    }
    if (argc == 9 && !strcmp(argv[1], "set")) {
        int type = 0;
        while (type < 3 && strcmp(argv[2], names[type])) type++;
        struct next_dqblk d = {
            .bsoft = strtoull(argv[4], 0, 10), .bhard = strtoull(argv[5], 0, 10),
            .isoft = strtoull(argv[6], 0, 10), .ihard = strtoull(argv[7], 0, 10),
            .valid = 1 | 4 /* QIF_BLIMITS | QIF_ILIMITS */,
        };
        if (type == 3 || quotactl(QCMD(0x800008 /* Q_SETQUOTA */, type), argv[8],
                                  atoi(argv[3]), (caddr_t)&d)) {
            perror("Q_SETQUOTA");
            return 1;
        }
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "as")) {
        gid_t gid = (gid_t)atoi(argv[3]);
        if (setgroups(1, &gid) || setgid(gid) || setuid((uid_t)atoi(argv[2]))) {
            perror("qtool as");
            return 1;
        }
        execvp(argv[4], argv + 4);
        perror(argv[4]);
        return 127;
    }
    fprintf(stderr, "usage: qtool report DEV | qtool set TYPE ID BSOFT BHARD ISOFT IHARD DEV"
                    " | qtool as UID GID PROG ARGS...\n");
    return 2;
}
"#;

/// Builds [`QTOOL_C`] statically (the VM has no C library).
fn build_qtool(scratch: &Scratch) -> PathBuf {
    let src = scratch.join("qtool.c");
    let bin = scratch.join("qtool");
    fs::write(&src, QTOOL_C).unwrap();
    let out = Command::new("cc")
        .args(["-static", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run cc (a C compiler with static glibc, libc6-dev)");
    assert!(
        out.status.success(),
        "cc qtool.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Quota entries as `qtool report` prints them, sorted, without ids that
/// have neither usage nor limits (the kernel may keep such an entry in
/// memory a while; f2fuse drops it as the kernel does at release).
fn quota_lines<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    let mut entries: Vec<String> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 10 && f[2..].iter().any(|n| *n != "0"))
        .map(|f| f.join(" ") + "\n")
        .collect();
    entries.sort();
    entries.concat()
}

/// `f2fuse quota IMAGE` as [`quota_lines`].
fn f2fuse_quota_lines(img: &Path) -> String {
    let report = f2fuse(&["quota", arg(img)]);
    let mut qtype = "";
    let mut rows = Vec::new();
    for line in report.lines() {
        if let Some((name, _)) = line.split_once(" quota (inode ") {
            qtype = ["user", "group", "project"]
                .into_iter()
                .find(|t| *t == name)
                .unwrap_or_else(|| panic!("f2fuse quota: {line:?}"));
        } else if line.split_whitespace().next().is_some_and(|w| w != "id") {
            // `ID USED BSOFT BHARD INODES ISOFT IHARD [blocks until B,
            // inodes until I]`
            let words: Vec<&str> = line.split_whitespace().collect();
            let (btime, itime) = match words.get(9..13) {
                Some([b, _, _, i]) => (b.trim_end_matches(','), *i),
                _ => ("0", "0"),
            };
            rows.push(format!("{qtype} {} {btime} {itime}", words[..7].join(" ")));
        }
    }
    quota_lines(rows.iter().map(String::as_str))
}

/// The numbers of `qtype id` in [`quota_lines`] output: used KiB, block
/// soft and hard limits, inodes, inode soft and hard limits, block and
/// inode grace deadlines; None if the id has no entry.
fn quota_entry(lines: &str, qtype: &str, id: u32) -> Option<[u64; 8]> {
    let prefix = format!("{qtype} {id} ");
    let line = lines.lines().find(|l| l.starts_with(&prefix))?;
    let n: Vec<u64> = line
        .split(' ')
        .skip(2)
        .map(|n| n.parse().unwrap())
        .collect();
    Some(n.try_into().unwrap())
}

/// Files of ids 10000 and up f2fuse writes (the kernel moves the first
/// [`MANY_MOVED`] to ids 20000 and up).
const MANY_IDS: u32 = 150;
const MANY_MOVED: u32 = 100;

/// Through f2fuse: files of several owners and of [`MANY_IDS`] more,
/// project 77 on a PROJINHERIT directory (its new entries inherit it),
/// limits for users 1000 and 1001, group 3000 and project 77.
fn f2fuse_quota_workload(img: &Path) {
    let fs = open_writable(img);
    let mut rng = Rng(0x9007a);
    let mut put = |parent: u32, name: &str, len: usize, uid: u32, gid: u32| {
        let ino = fs
            .create(parent, name.as_bytes(), 0o644, uid, gid)
            .unwrap()
            .ino;
        fs.write(ino, 0, &random_bytes(&mut rng, len)).unwrap();
    };
    let home = fs.mkdir(ROOT, b"u1000", 0o755, 1000, 1000).unwrap().ino;
    put(home, "a", 200 << 10, 1000, 1000);
    put(home, "b", 40 << 10, 1000, 2000);
    put(ROOT, "g", 120 << 10, 2000, 3000);
    put(ROOT, "r", 3000, 0, 0);
    fs.mkdir(ROOT, b"proj", 0o777, 0, 0).unwrap();
    // Node blocks are charged too: direct nodes of a file past the inode's
    // addresses, an indirect node of a sparse file, an xattr node.
    put(ROOT, "big", 5 << 20, 1500, 1500);
    let big = fs.lookup(ROOT, b"big").unwrap().ino;
    fs.fallocate(big, 1 << 20, 256 << 10, FallocMode::PunchHole)
        .unwrap();
    fs.set_xattr(big, b"user.big", &[b'x'; 3000], SetMode::Any)
        .unwrap();
    let sparse = fs.create(ROOT, b"sparse", 0o644, 1500, 1500).unwrap().ino;
    fs.write(sparse, 0, b"start").unwrap();
    fs.write(sparse, 30 << 20, b"end").unwrap();
    let prealloc = fs.create(ROOT, b"prealloc", 0o644, 1500, 1500).unwrap().ino;
    let allocate = FallocMode::Allocate { keep_size: false };
    fs.fallocate(prealloc, 0, 1 << 20, allocate).unwrap();
    // Enough ids for several leaf blocks of the quota tree (56 a block).
    let many = fs.mkdir(ROOT, b"many", 0o755, 0, 0).unwrap().ino;
    for i in 0..MANY_IDS {
        put(many, &format!("n{i}"), 100, 10_000 + i, 10_000 + i);
    }
    fs.unmount().unwrap();
    f2fuse(&["quota", arg(img), "project", "/proj", "77", "--inherit"]);
    let fs = open_writable(img);
    let proj = fs.lookup(ROOT, b"proj").unwrap().ino;
    let ino = fs.create(proj, b"p1", 0o644, 1001, 1001).unwrap().ino;
    fs.write(ino, 0, &random_bytes(&mut rng, 64 << 10)).unwrap();
    fs.mkdir(proj, b"sub", 0o777, 1001, 1001).unwrap();
    fs.unmount().unwrap();
    for (qtype, id, limits) in [
        ("user", "1000", ["400", "512", "10", "20"]),
        ("user", "1001", ["100", "2048", "0", "100"]),
        ("group", "3000", ["1000", "2000", "0", "0"]),
        ("project", "77", ["300", "400", "0", "50"]),
    ] {
        let mut args = vec!["quota", arg(img), "set", qtype, id];
        args.extend(limits);
        f2fuse(&args);
    }
}

/// In the VM, $1 the device, $2 the mount point, $3 a tag: the kernel's
/// view of quota after mounting with enforcement (`before-TAG`) and the
/// project ids f2fuse set (`lsattr-TAG`); writes past a user's and a
/// project's hard limit by their owners (`edquot-TAG`: the errors) and the
/// view then (`limit-TAG`); more writes by several owners (user 1001
/// passes its soft limit: a grace time starts), a chown, a project change,
/// a removal, truncations (one freeing node blocks), files of user 1600
/// with node blocks (large, sparse, an xattr node) and preallocated
/// blocks, $4 files of `many` moved to ids 20000 and up (the kernel
/// deletes the emptied ids' entries), limits set for a new id and an old
/// one; the view after a sync (`after-TAG`).
const KERNEL_QUOTA_LIMITS_SH: &str = r#"
kernel_quota_limits() {
    dev=$1 m=$2 tag=$3 moved=$4
    mkdir -p $m
    mount -t f2fs -o usrquota,grpquota,prjquota $dev $m
    section before-$tag qtool report $dev
    section lsattr-$tag lsattr -p -d $m/proj $m/proj/p1 $m/proj/sub
    over() {
        if qtool as "$@" 2>/tmp/err; then echo "no error"; else cat /tmp/err; fi
    }
    echo "=== begin edquot-$tag"
    over 1000 1000 dd if=/dev/zero of=$m/u1000/over bs=4k count=256
    over 1002 1002 dd if=/dev/zero of=$m/proj/over bs=4k count=256
    echo "=== end edquot-$tag"
    sync
    section limit-$tag qtool report $dev
    rm $m/proj/over
    qtool as 1001 1001 sh -c "dd if=/dev/urandom of=$m/proj/sub/k1 bs=1k count=50 2>/dev/null &&
        mkdir $m/proj/sub/kd && echo small >$m/proj/sub/kd/s"
    qtool as 1000 1000 truncate -s 5000 $m/u1000/a
    i=0
    while [ $i -lt $moved ]; do
        chown $((20000 + i)):$((20000 + i)) $m/many/n$i
        i=$((i + 1))
    done
    dd if=/dev/urandom of=$m/kbig bs=1M count=6 2>/dev/null
    dd if=/dev/zero of=$m/ksparse bs=4k seek=8000 count=1 2>/dev/null
    fallocate -l 1048576 $m/kpre
    setfattr -n user.big -v "$(head -c 3000 /dev/zero | tr '\0' k)" $m/kbig
    chown 1600:1600 $m/kbig $m/ksparse $m/kpre
    truncate -s 1048576 $m/big
    qtool set user 777 100 200 5 10 $dev
    qtool set group 2000 0 64 0 0 $dev
    dd if=/dev/urandom of=$m/k4000 bs=1k count=30 2>/dev/null
    chown 4000:4001 $m/k4000
    chattr -p 88 $m/k4000
    chown 1001 $m/u1000/b
    rm $m/g
    sync
    section after-$tag qtool report $dev
    umount $m
}
"#;

/// In the VM, $1 the device, $2 the mount point, $3 a tag: a file of user
/// 3100 is removed while held open (an orphan in the checkpoint); after a
/// checkpoint of this file system only (syncfs; a `sync` would also end
/// the chains of the others), owners write and fsync (new files in old
/// directories, an append to a file whose project was just changed, a
/// file in a PROJINHERIT directory, a chown). The kernel's view of quota
/// then (`cut-TAG`), less the orphan, is what recovery must give. The
/// caller ends the run with `vm-powercut`.
const KERNEL_QUOTA_CUT_SH: &str = r#"
kernel_quota_cut() {
    dev=$1 m=$2 tag=$3
    mkdir -p $m
    mount -t f2fs -o usrquota,grpquota,prjquota $dev $m
    mkdir $m/h $m/p
    chown 1000:1000 $m/h
    chmod 777 $m/p
    chattr -p 55 +P $m/p
    dd if=/dev/urandom of=$m/h/old bs=1k count=40 2>/dev/null
    chown 1000:1000 $m/h/old
    dd if=/dev/urandom of=$m/own bs=1k count=20 2>/dev/null
    dd if=/dev/urandom of=$m/orphan bs=1k count=30 2>/dev/null
    chown 3100:3100 $m/orphan
    exec 3<$m/orphan
    rm $m/orphan
    sync -f $m
    chattr -p 66 $m/h/old
    qtool as 1000 1000 dd if=/dev/urandom of=$m/h/old bs=1k count=60 seek=40 conv=notrunc,fsync 2>/dev/null
    qtool as 1000 1000 dd if=/dev/urandom of=$m/h/new bs=1k count=100 conv=fsync 2>/dev/null
    qtool as 1002 1003 dd if=/dev/urandom of=$m/p/inproj bs=1k count=70 conv=fsync 2>/dev/null
    chown 2000:2001 $m/own
    sync $m/own
    section cut-$tag qtool report $dev
}
"#;

/// `view` ([`quota_lines`]) without the charge of the orphan
/// [`KERNEL_QUOTA_CUT_SH`] leaves (user and group 3100, project 0), which
/// recovery frees.
fn without_orphan(view: &str) -> String {
    let orphan = quota_entry(view, "user", 3100).expect("the orphan's charge");
    let lines: Vec<String> = view
        .lines()
        .filter(|l| !l.starts_with("user 3100 ") && !l.starts_with("group 3100 "))
        .map(|l| {
            let Some(numbers) = l.strip_prefix("project 0 ") else {
                return l.to_string();
            };
            let mut n: Vec<u64> = numbers.split(' ').map(|n| n.parse().unwrap()).collect();
            n[0] -= orphan[0];
            n[3] -= orphan[3];
            let n: Vec<String> = n.iter().map(u64::to_string).collect();
            format!("project 0 {}", n.join(" "))
        })
        .collect();
    quota_lines(lines.iter().map(String::as_str))
}

/// Whether the current checkpoint of `img` says CP_QUOTA_NEED_FSCK.
fn quota_need_fsck(img: &Path) -> bool {
    let dev = Device::new(Box::new(MemDevice::from_bytes(fs::read(img).unwrap())));
    let sb = load_superblock(&dev).unwrap().sb;
    load_checkpoint(&dev, &sb).unwrap().cp.ckpt_flags.get() & cp_flag::QUOTA_NEED_FSCK != 0
}

/// The blocks of the fsync chain after the current checkpoint of `image`.
fn fsync_chain_len(image: Vec<u8>) -> usize {
    let dev = Device::new(Box::new(MemDevice::from_bytes(image)));
    let sb = load_superblock(&dev).unwrap().sb;
    let cp = load_checkpoint(&dev, &sb).unwrap();
    let mut len = 0;
    walk_chain(&dev, &sb, &cp, |_| {
        len += 1;
        Ok(())
    })
    .unwrap();
    len
}

/// f2fuse writes again on an image the kernel wrote, enforcing limits: a
/// new file of user 1000 (past its soft limit: a grace time starts), a
/// removal in the project (user 1001 falls below its soft limit: its grace
/// time ends), a chown, a new directory inheriting the project and
/// files of 60 new ids.
fn f2fuse_quota_rewrite(img: &Path) {
    let fs = open_writable(img);
    // As the kernel, grace times start only where limits are enforced
    // (usrquota, grpquota, prjquota).
    fs.set_quota_enforcement(0b111).unwrap();
    let home = fs.lookup(ROOT, b"u1000").unwrap().ino;
    let ino = fs.create(home, b"again", 0o644, 1000, 1000).unwrap().ino;
    fs.write(ino, 0, &[7u8; 130 << 10]).unwrap();
    let proj = fs.lookup(ROOT, b"proj").unwrap().ino;
    fs.unlink(proj, b"p1").unwrap();
    fs.mkdir(proj, b"later", 0o755, 1001, 1001).unwrap();
    let r = fs.lookup(ROOT, b"r").unwrap().ino;
    let chown = SetAttr {
        uid: Some(5000),
        gid: Some(5000),
        ..Default::default()
    };
    fs.setattr(r, &chown).unwrap();
    // New ids where the kernel freed entries and blocks of the tree.
    let many = fs.lookup(ROOT, b"many").unwrap().ino;
    for i in 0..60 {
        let ino = fs.create(
            many,
            format!("m{i}").as_bytes(),
            0o644,
            30_000 + i,
            30_000 + i,
        );
        fs.write(ino.unwrap().ino, 0, b"x").unwrap();
    }
    fs.unmount().unwrap();
}

/// Quota (`-O extra_attr,quota,project_quota`, images from f2fuse's mkfs
/// and from mkfs.f2fs) against Linux 6.1 mounted with `usrquota,grpquota,
/// prjquota`: the kernel reads exactly f2fuse's usage, limits and project
/// ids, stops owners at the hard limits f2fuse set (EDQUOT), and f2fuse
/// reads exactly the kernel's usage after its writes (fsck.f2fs clean);
/// after f2fuse's next writes the kernel again agrees. Fsync'd writes of
/// several owners cut by a power cut are rolled forward once by f2fuse and
/// once by the kernel: either way the usage is the kernel's at the cut,
/// without CP_QUOTA_NEED_FSCK, and fsck.f2fs is clean.
#[test]
fn quota_agrees_with_the_kernel() {
    if !vm_available() {
        return;
    }
    let scratch = Scratch::new("kvm-quota");
    let qtool = build_qtool(&scratch);
    let files = [(qtool.as_path(), "/usr/bin/qtool")];
    let features = "extra_attr,quota,project_quota";
    let ours = scratch.join("quota-ours.img");
    let theirs = scratch.join("quota-theirs.img");
    let cut = scratch.join("quota-cut.img");
    let kernel_cut = scratch.join("quota-kernel-cut.img");
    for img in [&ours, &cut] {
        f2fuse(&["mkfs", arg(img), "--size", "64M", "-q", "-O", features]);
    }
    for img in [&theirs, &kernel_cut] {
        mkfs_f2fs(img, 64 << 20, &["-O", features]);
    }
    let images = [("ours", &ours), ("theirs", &theirs)];
    let mut f2fuse_view = BTreeMap::new();
    for (tag, img) in images {
        f2fuse_quota_workload(img);
        assert_fsck(img, &format!("f2fuse's quota workload ({tag})"));
        f2fuse_view.insert(tag, f2fuse_quota_lines(img));
    }

    // Boot 1: the kernel reads f2fuse's usage, limits and project ids,
    // enforces the limits, writes as several owners.
    let script = format!(
        "{}{KERNEL_QUOTA_LIMITS_SH}kernel_quota_limits /dev/vda /mnt/a ours {MANY_MOVED}\n\
         kernel_quota_limits /dev/vdb /mnt/b theirs {MANY_MOVED}\n{VM_EPILOGUE}",
        vm_prologue()
    );
    let run = run_vm_with_files(&scratch, &[&ours, &theirs], &files, &script);
    run.assert_kernel_quiet();
    for (tag, img) in images {
        assert_eq!(
            quota_lines(run.section(&format!("before-{tag}")).lines()),
            f2fuse_view[tag],
            "{tag}: the kernel's quota (left) against f2fuse's (right)"
        );
        let lsattr = run.section(&format!("lsattr-{tag}"));
        assert_eq!(lsattr.lines().count(), 3, "{tag}: lsattr -p:\n{lsattr}");
        for line in lsattr.lines() {
            assert!(
                line.trim_start().starts_with("77 "),
                "{tag}: project of {line:?}"
            );
        }
        let edquot = run.section(&format!("edquot-{tag}"));
        assert_eq!(
            edquot.matches("Disk quota exceeded").count(),
            2,
            "{tag}: writes past the user's and the project's hard limit:\n{edquot}"
        );
        let at_limit = quota_lines(run.section(&format!("limit-{tag}")).lines());
        for (qtype, id) in [("user", 1000), ("project", 77)] {
            let [used, soft, hard, ..] = quota_entry(&at_limit, qtype, id).unwrap();
            assert!(
                used > soft && used <= hard && hard - used < 4,
                "{tag}: {qtype} {id} stopped at {used} KiB:\n{at_limit}"
            );
        }
        let after = quota_lines(run.section(&format!("after-{tag}")).lines());
        // 6 MiB, 1 MiB preallocated, one sparse block: more is node blocks.
        let user_1600 = quota_entry(&after, "user", 1600).unwrap();
        assert!(user_1600[0] > 6144 + 1024 + 4, "{tag}: {after}");
        let user_1001 = quota_entry(&after, "user", 1001).unwrap();
        assert!(user_1001[0] > 100 && user_1001[6] > 0, "{tag}: {after}");
        assert_eq!(
            quota_entry(&after, "user", 777),
            Some([0, 100, 200, 0, 5, 10, 0, 0])
        );
        for i in 0..MANY_IDS {
            let (old, new) = (10_000 + i, 20_000 + i);
            let moved = i < MANY_MOVED;
            assert_eq!(quota_entry(&after, "user", old).is_some(), !moved, "{old}");
            assert_eq!(quota_entry(&after, "group", new).is_some(), moved, "{new}");
        }
        assert_fsck(img, &format!("the kernel's writes ({tag})"));
        assert_eq!(
            f2fuse_quota_lines(img),
            after,
            "{tag}: f2fuse's quota (left) against the kernel's last view (right)"
        );
        f2fuse_quota_rewrite(img);
        assert_fsck(img, &format!("f2fuse's writes after the kernel's ({tag})"));
        let view = f2fuse_quota_lines(img);
        // User 1001 fell below its soft limit (its grace time ended), user
        // 1000 passed it (one started).
        assert_eq!(quota_entry(&view, "user", 1001).unwrap()[6], 0, "{view}");
        assert!(quota_entry(&view, "user", 1000).unwrap()[6] > 0, "{view}");
        f2fuse_view.insert(tag, view);
    }

    // Boot 2: the kernel reads f2fuse's last usage; on two more images it
    // writes and fsyncs as several owners and loses power.
    let script = format!(
        "{}{KERNEL_QUOTA_CUT_SH}mkdir -p /mnt/a /mnt/b\n\
         mount -t f2fs -o usrquota,grpquota,prjquota /dev/vda /mnt/a\n\
         section final-ours qtool report /dev/vda\numount /mnt/a\n\
         mount -t f2fs -o usrquota,grpquota,prjquota /dev/vdb /mnt/b\n\
         section final-theirs qtool report /dev/vdb\numount /mnt/b\n\
         kernel_quota_cut /dev/vdc /mnt/c f2fuse\n\
         kernel_quota_cut /dev/vdd /mnt/d kernel\n{VM_EPILOGUE}vm-powercut\n",
        vm_prologue()
    );
    let run = run_vm_with_files(
        &scratch,
        &[&ours, &theirs, &cut, &kernel_cut],
        &files,
        &script,
    );
    run.assert_kernel_quiet();
    for (tag, _) in images {
        assert_eq!(
            quota_lines(run.section(&format!("final-{tag}")).lines()),
            f2fuse_view[tag],
            "{tag}: the kernel's quota (left) after f2fuse's writes (right)"
        );
    }
    let at_cut: BTreeMap<&str, String> = [("f2fuse", &cut), ("kernel", &kernel_cut)]
        .into_iter()
        .map(|(tag, img)| {
            let view = quota_lines(run.section(&format!("cut-{tag}")).lines());
            // The project change before the append reached the chain.
            assert_eq!(quota_entry(&view, "project", 66).unwrap()[0], 100, "{view}");
            assert!(
                fsync_chain_len(fs::read(img).unwrap()) > 0,
                "{tag}: the kernel's fsyncs left no chain"
            );
            assert!(
                !quota_need_fsck(img),
                "{tag}: quota_need_fsck before the roll-forward"
            );
            (tag, without_orphan(&view))
        })
        .collect();

    // f2fuse rolls one fsync chain forward, charging its owners.
    open_writable(&cut).unmount().unwrap();
    assert!(
        !quota_need_fsck(&cut),
        "quota_need_fsck after f2fuse's roll-forward"
    );
    assert_fsck(&cut, "f2fuse's roll-forward of the kernel's fsync chain");
    assert_eq!(
        f2fuse_quota_lines(&cut),
        at_cut["f2fuse"],
        "f2fuse's quota after its recovery (left) against the kernel's at the cut less the orphan (right)"
    );

    // Boot 3: the kernel reads what f2fuse recovered and rolls the other
    // chain forward itself.
    let script = format!(
        "{}mkdir -p /mnt/c /mnt/d\n\
         mount -t f2fs -o usrquota,grpquota,prjquota /dev/vda /mnt/c\n\
         section recovered-f2fuse qtool report /dev/vda\numount /mnt/c\n\
         mount -t f2fs -o usrquota,grpquota,prjquota /dev/vdb /mnt/d\n\
         section recovered-kernel qtool report /dev/vdb\numount /mnt/d\n{VM_EPILOGUE}",
        vm_prologue()
    );
    let run = run_vm_with_files(&scratch, &[&cut, &kernel_cut], &files, &script);
    run.assert_kernel_quiet();
    for tag in ["f2fuse", "kernel"] {
        assert_eq!(
            quota_lines(run.section(&format!("recovered-{tag}")).lines()),
            at_cut[tag],
            "the kernel's quota after {tag}'s recovery (left) against the kernel's at the cut less the orphan (right)"
        );
    }
    // Linux 6.1 charges what it rolls forward (quotas are on during
    // recovery) and does not ask for a quota repair.
    assert!(
        !quota_need_fsck(&kernel_cut),
        "quota_need_fsck after the kernel's roll-forward"
    );
    assert_fsck(&kernel_cut, "the kernel's roll-forward of its fsync chain");
    assert_eq!(
        f2fuse_quota_lines(&kernel_cut),
        at_cut["kernel"],
        "f2fuse's quota after the kernel's recovery (left) against the kernel's at the cut less the orphan (right)"
    );
}

/// scripts/vm-fscrypt.c built static for the VM (its initramfs has no
/// libc of its own for tools not copied in); `None` (a skip note) without
/// a C compiler and static libc.
fn vm_fscrypt_tool(scratch: &Scratch) -> Option<PathBuf> {
    let out = scratch.join("vm-fscrypt");
    let built = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(repo().join("scripts/vm-fscrypt.c"))
        .output();
    match built {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => {
            eprintln!(
                "SKIPPING Android userdata VM test: cc -static failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("SKIPPING Android userdata VM test: no cc: {e}");
            None
        }
    }
}

/// `INODE PATH` lines of a section as PATH by inode.
fn paths_by_inode(section: &str) -> BTreeMap<u32, String> {
    section
        .lines()
        .map(|l| {
            let (ino, path) = l.split_once(' ').unwrap();
            (
                ino.parse().unwrap(),
                path.trim_start_matches("./").to_string(),
            )
        })
        .collect()
}

/// `sha256sum` output as PATH -> digest.
fn digests(section: &str) -> BTreeMap<String, String> {
    section
        .lines()
        .map(|l| {
            let (digest, path) = l.split_once("  ").unwrap();
            let path = path.trim_start_matches("./").trim_start_matches("/mnt/");
            (path.to_string(), digest.to_string())
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[track_caller]
fn assert_errno<T: std::fmt::Debug>(what: &str, result: f2fuse_engine::Result<T>, errno: i32) {
    match result {
        Err(e) => assert_eq!(e.to_errno(), errno, "{what}: {e}"),
        Ok(v) => panic!("{what}: succeeded ({v:?}), expected errno {errno}"),
    }
}

/// Kernel-made fscrypt and fs-verity files on an image with Android's
/// userdata features but the quota ones, which f2fuse does not write yet
/// (mkfs.f2fs turns `quota` on for `project_quota` too): the
/// kernel encrypts a directory tree with a v2 policy (AES-256-XTS,
/// AES-256-CTS, a raw key) and enables fs-verity on two files; f2fuse opens
/// the image writable without the key and shows the kernel's no-key names
/// (and no-key symlink target), finds entries by them, refuses encrypted
/// contents and new names with ENOKEY and changes to verity files with
/// EPERM, deletes two encrypted files (one in an encrypted casefolded
/// directory, hashed with a key) and one verity file, writes plain
/// files, cleans sections (moving the raw encrypted and Merkle tree
/// blocks); fsck.f2fs is clean; the kernel, given the key again, reads
/// every remaining file and the same verity measurement.
#[test]
fn android_userdata_encrypted_and_verity_files() {
    if !vm_available() {
        return;
    }
    let scratch = Scratch::new("kvm-android");
    let Some(tool) = vm_fscrypt_tool(&scratch) else {
        return;
    };
    let key = scratch.join("key");
    let mut rng = Rng(0xa17d);
    fs::write(&key, random_bytes(&mut rng, 64)).unwrap();
    let img = scratch.join("userdata.img");
    mkfs_f2fs(
        &img,
        128 << 20,
        &[
            "-O",
            "extra_attr,inode_checksum,sb_checksum,encrypt,verity,quota,project_quota,casefold,compression",
            "-C",
            "utf8",
        ],
    );
    // One boot: the image, the helper and the key; the kernel must stay quiet.
    let boot = |body: &str| {
        let script = format!("{}{body}{VM_EPILOGUE}", vm_prologue());
        let files = [
            (tool.as_path(), "/vmrun/vm-fscrypt"),
            (key.as_path(), "/vmrun/key"),
        ];
        let run = run_vm_with_files(&scratch, &[&img], &files, &script);
        run.assert_kernel_quiet();
        run
    };
    let long_name = "L".repeat(180);
    let run = boot(&format!(
        r#"
mount -t f2fs /dev/vda /mnt
id=$(/vmrun/vm-fscrypt add-key /mnt /vmrun/key)
mkdir /mnt/enc
/vmrun/vm-fscrypt set-policy /mnt/enc "$id"
mkdir /mnt/enc/sub
# Encrypted blocks between filler blocks f2fuse deletes: their sections
# become cleaning victims.
size=7000
for n in a b c d; do
    head -c $size /dev/urandom >/mnt/enc/file_$n
    head -c 400000 /dev/urandom >/mnt/filler_$n
    size=$((size + 150000))
done
head -c 5000 /dev/urandom >/mnt/enc/sub/inner
# Encrypted and casefolded: the dentry hash is a keyed SipHash.
mkdir /mnt/enc/cf
chattr +F /mnt/enc/cf
echo one >/mnt/enc/cf/MixedCase
echo two >/mnt/enc/cf/Other
echo long >/mnt/enc/{long_name}
ln -s file_a /mnt/enc/link
head -c 300000 /dev/urandom >/mnt/verity_keep
head -c 90000 /dev/urandom >/mnt/verity_gone
/vmrun/vm-fscrypt enable-verity /mnt/verity_keep
/vmrun/vm-fscrypt enable-verity /mnt/verity_gone
section plain_inodes sh -c 'cd /mnt/enc && find . ! -name . -exec stat -c "%i %n" {{}} +'
section plain_hashes sh -c 'cd /mnt/enc && find . -type f -exec sha256sum {{}} +'
section measure /vmrun/vm-fscrypt measure /mnt/verity_keep
section verity_hash sha256sum /mnt/verity_keep
umount /mnt
# Without the key (unmounting dropped it): the no-key names.
mount -t f2fs /dev/vda /mnt
section nokey_inodes sh -c 'cd /mnt/enc && find . ! -name . -exec stat -c "%i %n" {{}} +'
section nokey_link sh -c 'find /mnt/enc -type l -exec readlink {{}} \;'
umount /mnt
"#
    ));
    let plain = paths_by_inode(&run.section("plain_inodes"));
    let nokey = paths_by_inode(&run.section("nokey_inodes"));
    assert_eq!(
        plain.keys().collect::<Vec<_>>(),
        nokey.keys().collect::<Vec<_>>()
    );
    let nokey_of = |plain_path: &str| -> &str {
        let (ino, _) = plain.iter().find(|(_, p)| *p == plain_path).unwrap();
        &nokey[ino]
    };
    let plain_hashes = digests(&run.section("plain_hashes"));
    assert_eq!(plain_hashes.len(), 8, "{plain_hashes:?}");
    let measurement = run.section("measure");
    let verity_hash = digests(&run.section("verity_hash"));

    // f2fuse, writable, without the key.
    let fs = open_writable(&img);
    let enc = fs.resolve("/enc").unwrap();
    let mut listed: Vec<String> = fs
        .read_dir(enc.ino)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    listed.sort();
    let mut top: Vec<String> = nokey
        .values()
        .filter(|p| !p.contains('/'))
        .cloned()
        .collect();
    top.sort();
    assert_eq!(listed, top, "the kernel's no-key names");
    for (ino, path) in &nokey {
        let found = fs.resolve(&format!("/enc/{path}")).unwrap();
        assert_eq!(found.ino, *ino, "lookup of no-key name {path}");
    }
    let link = fs.resolve(&format!("/enc/{}", nokey_of("link"))).unwrap();
    assert_eq!(
        String::from_utf8(fs.read_link(&link).unwrap()).unwrap(),
        run.section("nokey_link").trim(),
        "the no-key symlink target"
    );
    let file_a = fs.resolve(&format!("/enc/{}", nokey_of("file_a"))).unwrap();
    assert_errno("reading", fs.read(&file_a, 0, &mut [0u8; 16]), libc::ENOKEY);
    assert_errno("writing", fs.write(file_a.ino, 0, b"x"), libc::ENOKEY);
    let sub = fs.resolve(&format!("/enc/{}", nokey_of("sub"))).unwrap();
    for dir in [enc.ino, sub.ino] {
        assert_errno("create", fs.create(dir, b"new", 0o644, 0, 0), libc::ENOKEY);
        assert_errno("mkdir", fs.mkdir(dir, b"newdir", 0o755, 0, 0), libc::ENOKEY);
        assert_errno("symlink", fs.symlink(dir, b"sl", b"x", 0, 0), libc::ENOKEY);
    }
    assert_errno(
        "link into",
        fs.link(file_a.ino, sub.ino, b"again"),
        libc::ENOKEY,
    );
    let flags = f2fuse_engine::internals::fs::RenameFlags::default();
    let a_name = nokey_of("file_a").as_bytes();
    assert_errno(
        "rename within",
        fs.rename(enc.ino, a_name, enc.ino, b"renamed", flags),
        libc::ENOKEY,
    );
    assert_errno(
        "rename out",
        fs.rename(enc.ino, a_name, ROOT, b"renamed", flags),
        libc::ENOKEY,
    );
    assert_errno(
        "rename in",
        fs.rename(ROOT, b"filler_a", enc.ino, b"renamed", flags),
        libc::ENOKEY,
    );
    // A name that is no no-key name: no such entry.
    assert_errno("lookup", fs.lookup(enc.ino, b"file_a"), libc::ENOENT);

    let keep = fs.resolve("/verity_keep").unwrap();
    assert_ne!(
        fs.get_flags(&keep) & f2fuse_engine::internals::flags::reported::VERITY,
        0
    );
    let mut contents = vec![0u8; keep.size as usize];
    assert_eq!(fs.read(&keep, 0, &mut contents).unwrap(), contents.len());
    assert_eq!(
        hex(&f2fuse_layout::fscrypt::sha256(&contents)),
        verity_hash["verity_keep"]
    );
    assert_errno("verity write", fs.write(keep.ino, 0, b"x"), libc::EPERM);
    let truncate = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_errno(
        "verity truncate",
        fs.setattr(keep.ino, &truncate),
        libc::EPERM,
    );
    assert_errno(
        "verity fallocate",
        fs.fallocate(
            keep.ino,
            0,
            4096,
            f2fuse_engine::FallocMode::Allocate { keep_size: true },
        ),
        libc::EPERM,
    );

    // Deleting needs no key.
    fs.unlink(enc.ino, nokey_of("file_b").as_bytes()).unwrap();
    let cf_other = nokey_of("cf/Other").rsplit('/').next().unwrap();
    let cf = fs.resolve(&format!("/enc/{}", nokey_of("cf"))).unwrap();
    fs.unlink(cf.ino, cf_other.as_bytes()).unwrap();
    fs.unlink(ROOT, b"verity_gone").unwrap();
    for n in ["a", "b", "c", "d"] {
        fs.unlink(ROOT, format!("filler_{n}").as_bytes()).unwrap();
    }
    let plain_dir = fs.mkdir(ROOT, b"plain", 0o755, 0, 0).unwrap().ino;
    let mut plain_files = BTreeMap::new();
    for i in 0..3 {
        let data = random_bytes(&mut rng, 20_000 + i * 70_000);
        let name = format!("f{i}");
        let ino = fs
            .create(plain_dir, name.as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &data).unwrap();
        plain_files.insert(
            format!("plain/{name}"),
            hex(&f2fuse_layout::fscrypt::sha256(&data)),
        );
    }
    fs.checkpoint().unwrap();
    // Where the ciphertext lies (extents need no key).
    let encrypted_extents = || -> Vec<_> {
        ["file_a", "file_c", "file_d", "sub/inner"]
            .iter()
            .map(|p| {
                let path = format!("/enc/{}", nokey_of(p));
                fs.file_extents(&path).unwrap().extents
            })
            .collect()
    };
    let before = encrypted_extents();
    let mut cleaned = 0;
    while cleaned < 64 && fs.garbage_collect(true).unwrap() {
        cleaned += 1;
    }
    let moved = fs.gc_stats().data_blocks_moved;
    assert_ne!(
        before,
        encrypted_extents(),
        "cleaning moved no encrypted block"
    );
    eprintln!("f2fuse cleaned {cleaned} sections, moved {moved} data blocks");
    fs.unmount().unwrap();
    assert_fsck(&img, "f2fuse's changes to the Android userdata image");
    f2fuse(&["fsck", arg(&img)]);

    // The kernel with the key again.
    let run = boot(
        r#"
mount -t f2fs /dev/vda /mnt
/vmrun/vm-fscrypt add-key /mnt /vmrun/key >/dev/null
section enc_hashes sh -c 'cd /mnt/enc && find . -type f -exec sha256sum {} +'
section enc_link readlink /mnt/enc/link
section enc_casefold cat /mnt/enc/cf/MIXEDCASE
section measure /vmrun/vm-fscrypt measure /mnt/verity_keep
section verity_hash sha256sum /mnt/verity_keep
section plain_hashes sh -c 'cd /mnt && sha256sum plain/*'
section top ls /mnt
umount /mnt
"#,
    );
    let mut expected = plain_hashes.clone();
    expected.remove("file_b").unwrap();
    expected.remove("cf/Other").unwrap();
    assert_eq!(digests(&run.section("enc_hashes")), expected);
    assert_eq!(run.section("enc_link").trim(), "file_a");
    assert_eq!(run.section("enc_casefold"), "one\n");
    assert_eq!(run.section("measure"), measurement);
    assert_eq!(digests(&run.section("verity_hash")), verity_hash);
    assert_eq!(digests(&run.section("plain_hashes")), plain_files);
    assert_eq!(
        run.section("top").split_whitespace().collect::<Vec<_>>(),
        ["enc", "plain", "verity_keep"]
    );
    assert_fsck(&img, "the kernel's second mount");
}

/// A new 96 MiB image on a memory device, open for writing, with no
/// checkpoint by time (for images left as a power cut would).
fn uncheckpointed_memory_image() -> (Arc<MemDevice>, Fs) {
    let dev = Arc::new(MemDevice::new(96 << 20));
    format(
        &Device::new(Box::new(dev.clone())),
        &MkfsOptions::default(),
        true,
    )
    .unwrap();
    let fs = Fs::open_writable(Box::new(dev.clone())).unwrap();
    fs.set_tunable("cp_interval", 3600).unwrap();
    (dev, fs)
}

/// An image f2fuse left as a power cut would under `ipu_policy`: three
/// files checkpointed, then small rewrites in place fsync'd, a new file
/// and an append with a rewrite fsync'd into the chain between them, a
/// partial block rewritten in place and fsync'd, blocks only the chain
/// maps rewritten in place and fsync'd, and one block of `unsynced`
/// rewritten but never fsync'd. `mirror` gets the files with
/// every write; returns `unsynced`'s checkpointed contents (a power cut
/// may leave either).
fn ipu_cut_image(img: &Path, mirror: &Path, ipu_policy: u64) -> Vec<u8> {
    let (dev, fs) = uncheckpointed_memory_image();
    // A main area under 16 GiB: the kernel's default FORCE | HONOR_OPU_WRITE.
    assert_eq!(fs.tunable("ipu_policy").unwrap(), 129);
    fs.set_tunable("ipu_policy", ipu_policy).unwrap();
    fs::create_dir_all(mirror).unwrap();
    let mut rng = Rng(0x1b0 ^ ipu_policy);
    let mut put = |ino: u32, name: &str, offset: u64, len: usize| {
        let data = random_bytes(&mut rng, len);
        fs.write(ino, offset, &data).unwrap();
        let host = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(mirror.join(name))
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&host, &data, offset).unwrap();
    };
    let mut create = |name: &str, blocks: usize| {
        let ino = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        put(ino, name, 0, blocks * 4096);
        ino
    };
    let rewritten = create("rewritten", 64);
    let appended = create("appended", 40);
    let unsynced = create("unsynced", 16);
    fs.checkpoint().unwrap();
    let old_unsynced = fs::read(mirror.join("unsynced")).unwrap();
    let in_place = |fs: &Fs| -> u64 { fs.status().unwrap().alloc.in_place_writes.iter().sum() };
    let before = in_place(&fs);

    put(rewritten, "rewritten", 3 * 4096, 4096);
    put(rewritten, "rewritten", 10 * 4096, 3 * 4096);
    fs.fsync(rewritten).unwrap();
    let new = fs.create(ROOT, b"new", 0o644, 0, 0).unwrap().ino;
    put(new, "new", 0, 20 * 4096);
    fs.fsync(new).unwrap();
    put(appended, "appended", 0, 4096);
    put(appended, "appended", 40 * 4096, 5 * 4096 + 77);
    fs.fsync(appended).unwrap();
    put(rewritten, "rewritten", 20 * 4096 + 100, 1000);
    fs.fsync(rewritten).unwrap();
    // Blocks that only the chain maps, rewritten in place and fsync'd.
    put(new, "new", 2 * 4096, 4096);
    fs.fsync(new).unwrap();
    put(appended, "appended", 42 * 4096 + 10, 300);
    fs.fsync(appended).unwrap();
    put(unsynced, "unsynced", 4096, 4096);
    // Rewrites of at most min_fsync_blocks between fsyncs: in place under
    // both policies.
    assert!(
        in_place(&fs) >= before + 8,
        "ipu_policy {ipu_policy}: {} blocks written in place",
        in_place(&fs) - before
    );
    drop(fs);
    let image = dev.snapshot();
    let chain = fsync_chain_len(image.clone());
    assert!(chain >= 4, "fsyncs left a chain of {chain} blocks");
    fs::write(img, image).unwrap();
    old_unsynced
}

/// `f2fs_io fiemap` output (`N<tab>LOGICAL PHYSICAL LENGTH FLAGS`, hex
/// bytes) as (file block, block address, blocks), contiguous runs merged.
fn kernel_fiemap(out: &str) -> Vec<(u64, u64, u64)> {
    let runs = out.lines().filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.first()?.parse::<u32>().ok()?;
        let hex = |i: usize| u64::from_str_radix(f[i], 16).unwrap() / 4096;
        Some((hex(1), hex(2), hex(3)))
    });
    merged_runs(runs)
}

/// f2fuse's extents of `ino` as (file block, block address, blocks),
/// contiguous runs merged.
fn engine_extents(fs: &Fs, ino: u32) -> Vec<(u64, u64, u64)> {
    let inode = fs.inode(ino).unwrap();
    let runs = fs.extents(&inode).unwrap();
    merged_runs(runs.into_iter().map(|(b, a, n)| (b, a as u64, n)))
}

fn merged_runs(runs: impl Iterator<Item = (u64, u64, u64)>) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for (block, addr, len) in runs {
        match out.last_mut() {
            Some(last) if last.0 + last.2 == block && last.1 + last.2 == addr => last.2 += len,
            _ => out.push((block, addr, len)),
        }
    }
    out
}

/// The blocks the kernel's cleaner tried to move, from the last `GC`
/// line `kernel_cleans` printed (debugfs's "Try to move N blocks").
fn kernel_gc_blocks_tried(run: &VmRun) -> u64 {
    let gc = run.values("GC");
    gc.last()
        .and_then(|l| l.split("Try to move ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no GC counters: {gc:?}"))
}

/// `f2fs_io pinfile get`: whether pinned, and its `i_gc_failures`.
fn kernel_pin(line: &str) -> (bool, u32) {
    let rest = line
        .split_once("get_pin_file: ")
        .unwrap_or_else(|| panic!("pinfile get said {line:?}"))
        .1;
    let failures = rest
        .split(" with ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("pinfile get said {line:?}"));
    (!rest.starts_with("un-pinned"), failures)
}

/// f2fuse pins a file, preallocates it and writes into it, then truncates
/// it so that its last section is a cheap victim for cleaning. Returns
/// the file's inode and extents.
fn f2fuse_pinned_image(img: &Path) -> (u32, Vec<(u64, u64, u64)>) {
    f2fuse(&["mkfs", "-q", "--size", "96M", arg(img)]);
    let fs = open_writable(img);
    let mut rng = Rng(0x919);
    let ino = fs.create(ROOT, b"pinned", 0o644, 0, 0).unwrap().ino;
    fs.set_pin_file(ino, true).unwrap();
    fs.fallocate(
        ino,
        0,
        PINNED_BLOCKS * 4096 * 3 / 2,
        f2fuse_engine::FallocMode::Allocate { keep_size: false },
    )
    .unwrap();
    fs.write(ino, 0, &random_bytes(&mut rng, 300 * 4096))
        .unwrap();
    fs.write(ino, 700 * 4096 + 5, &random_bytes(&mut rng, 10 * 4096))
        .unwrap();
    cut_to_pinned_blocks(&fs, ino);
    for i in 0..8 {
        let f = fs
            .create(ROOT, format!("other_{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(f, 0, &random_bytes(&mut rng, 300 * 4096)).unwrap();
    }
    let extents = engine_extents(&fs, ino);
    assert_eq!(
        extents.len(),
        1,
        "pinned blocks not contiguous: {extents:?}"
    );
    fs.unmount().unwrap();
    (ino, extents)
}

/// Starts `f2fuse mount IMG MNT -f EXTRA...` and waits until it serves. In
/// the foreground: the daemon's exit means its last checkpoint is written
/// and the image closed. None (with a note) where FUSE mounts cannot be
/// made.
fn mount_in_foreground(img: &Path, mnt: &Path, extra: &[&str]) -> Option<std::process::Child> {
    if !Path::new("/dev/fuse").exists() || find_tool("fusermount3").is_none() {
        eprintln!("kernel VM test: no /dev/fuse or fusermount3: the FUSE-written part is skipped");
        return None;
    }
    fs::create_dir_all(mnt).unwrap();
    let daemon = Command::new(env!("CARGO_BIN_EXE_f2fuse"))
        .args(["mount", arg(img), arg(mnt), "-f"])
        .args(extra)
        .spawn()
        .expect("f2fuse mount");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !is_mounted(mnt) {
        assert!(
            std::time::Instant::now() < deadline,
            "f2fuse mount did not come up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(daemon)
}

/// Unmounts `mnt` and waits for its foreground daemon, which must exit
/// cleanly (its last checkpoint written).
fn unmount_foreground(mut daemon: std::process::Child, mnt: &Path) {
    let status = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .status()
        .unwrap();
    assert!(status.success(), "fusermount3 -u");
    assert!(daemon.wait().unwrap().success(), "the mount daemon failed");
}

/// Through an `f2fuse mount` of a new image at `mnt`, the host's `f2fs_io`
/// pins a file (the ioctl through FUSE), preallocates 4 MiB and writes
/// 300 blocks, fsync'd; then the daemon is killed (SIGKILL: no checkpoint,
/// the fsync chain holds it all). `mirror` gets the file as it must read.
/// False (with a note) where FUSE mounts cannot be made.
fn pinned_through_mount_then_killed(img: &Path, mnt: &Path, mirror: &Path) -> bool {
    f2fuse(&["mkfs", "-q", "--size", "96M", arg(img)]);
    let Some(mut daemon) = mount_in_foreground(img, mnt, &[]) else {
        return false;
    };
    let file = mnt.join("mpinned");
    let f2fs_io = |args: &[&str]| {
        let out = Command::new("f2fs_io")
            .args(args)
            .arg(&file)
            .output()
            .expect("f2fs_io");
        assert!(
            out.status.success(),
            "f2fs_io {args:?} through the mount: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    fs::File::create(&file).unwrap();
    f2fs_io(&["pinfile", "set"]);
    assert_eq!(kernel_pin(&f2fs_io(&["pinfile", "get"])), (true, 0));
    f2fs_io(&["fallocate", "0", "0", "4194304"]);
    let data = random_bytes(&mut Rng(0x3a7), 300 * 4096);
    let handle = fs::OpenOptions::new().write(true).open(&file).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&handle, &data, 0).unwrap();
    handle.sync_all().unwrap();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let status = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mnt)
        .status()
        .unwrap();
    assert!(status.success(), "fusermount3 -u -z");
    let chain = fsync_chain_len(fs::read(img).unwrap());
    assert!(chain > 0, "the mount's fsync left no chain");
    let mut expect = data;
    expect.resize(4 << 20, 0);
    fs::create_dir_all(mirror).unwrap();
    fs::write(mirror.join("mpinned"), expect).unwrap();
    true
}

/// Blocks of the pinned files: two sections and a bit (2 MiB sections).
const PINNED_BLOCKS: u64 = 1100;

/// Truncates a pinned file to [`PINNED_BLOCKS`]: its last section, mostly
/// invalid then, is a cheap victim for cleaning.
fn cut_to_pinned_blocks(fs: &Fs, ino: u32) {
    let size = SetAttr {
        size: Some(PINNED_BLOCKS * 4096),
        ..SetAttr::default()
    };
    fs.setattr(ino, &size).unwrap();
}

/// The kernel pins a file at $1, preallocates 3 sections and writes into it.
const KERNEL_PINS_SH: &str = r#"
kernel_pins() {
    touch "$1"
    f2fs_io pinfile set "$1"
    f2fs_io fallocate 0 0 6291456 "$1"
    dd if=/dev/urandom of="$1" bs=4096 count=300 conv=notrunc 2>/dev/null
    dd if=/dev/urandom of="$1" bs=4096 seek=1000 count=10 conv=notrunc 2>/dev/null
    sync
}
"#;

#[test]
fn in_place_updates_and_pinned_files_agree_with_the_kernel() {
    if !vm_available() {
        return;
    }
    let scratch = Scratch::new("kvm-ipu");
    // (a) In-place updates and fsync chains, cut before any checkpoint.
    let policies = [129u64, 16];
    let mut cut = Vec::new();
    for policy in policies {
        let img = scratch.join(format!("ipu-{policy}.img"));
        let mirror = scratch.join(format!("ipu-{policy}-mirror"));
        let old_unsynced = ipu_cut_image(&img, &mirror, policy);
        let with_new = host_manifest(&mirror);
        fs::write(mirror.join("unsynced"), old_unsynced).unwrap();
        let with_old = host_manifest(&mirror);
        cut.push((policy, img, with_new, with_old));
    }
    // (b) A file f2fuse pinned.
    let ours = scratch.join("pinned-ours.img");
    let (pinned_ino, pinned_extents) = f2fuse_pinned_image(&ours);
    assert_fsck(&ours, "f2fuse's pinned file");
    let ours_before = f2fuse_manifest(&scratch, &ours, "pinned-ours");
    // (c) A file the kernel pins.
    let theirs = scratch.join("pinned-kernel.img");
    // Large enough that f2fuse's data logs stay out of SSR, which would
    // fill the pinned file's last section.
    mkfs_f2fs(&theirs, 256 << 20, &[]);
    // (b) through the mount, the daemon killed after the fsync.
    let killed = scratch.join("pinned-mount.img");
    let killed_mirror = scratch.join("pinned-mount-mirror");
    let through_mount =
        pinned_through_mount_then_killed(&killed, &scratch.join("mnt"), &killed_mirror);

    let mut script = vm_prologue();
    script.push_str(KERNEL_CLEANS_SH);
    script.push_str(KERNEL_PINS_SH);
    script.push_str(&format!(
        "mkdir -p /mnt/a /mnt/b /mnt/p /mnt/k\n\
         mount -t f2fs /dev/vda /mnt/a\nsection ipu-129 manifest /mnt/a\numount /mnt/a\n\
         mount -t f2fs /dev/vdb /mnt/b\nsection ipu-16 manifest /mnt/b\numount /mnt/b\n\
         mount -t f2fs /dev/vdc /mnt/p\n\
         echo \"PIN ours $(f2fs_io pinfile get /mnt/p/pinned)\"\n\
         section ours-fiemap f2fs_io fiemap 0 {PINNED_BLOCKS} /mnt/p/pinned\n\
         section ours-before manifest /mnt/p\n\
         kernel_cleans /mnt/p vdc\n\
         dd if=/dev/urandom of=/mnt/p/pinned bs=4096 seek=50 count=2 conv=notrunc 2>/dev/null\n\
         sync\n\
         echo \"PIN ours-after-gc $(f2fs_io pinfile get /mnt/p/pinned)\"\n\
         section ours-fiemap-after-gc f2fs_io fiemap 0 {PINNED_BLOCKS} /mnt/p/pinned\n\
         section ours-after manifest /mnt/p\numount /mnt/p\n\
         mount -t f2fs /dev/vdd /mnt/k\nkernel_pins /mnt/k/kpinned\n\
         echo \"PIN theirs $(f2fs_io pinfile get /mnt/k/kpinned)\"\n\
         section theirs-fiemap f2fs_io fiemap 0 1536 /mnt/k/kpinned\n\
         umount /mnt/k\nmount -t f2fs /dev/vdd /mnt/k\nsection theirs manifest /mnt/k\numount /mnt/k\n"
    ));
    if through_mount {
        script.push_str(
            "mkdir -p /mnt/m
mount -t f2fs /dev/vde /mnt/m
             echo \"PIN mount $(f2fs_io pinfile get /mnt/m/mpinned)\"\n\
             section mount-fiemap f2fs_io fiemap 0 1024 /mnt/m/mpinned\n\
             section mount manifest /mnt/m\numount /mnt/m\n",
        );
    }
    script.push_str(VM_EPILOGUE);
    let mut disks: Vec<&Path> = vec![&cut[0].1, &cut[1].1, &ours, &theirs];
    if through_mount {
        disks.push(&killed);
    }
    let run = run_vm(&scratch, &disks, &script);
    run.assert_kernel_quiet();
    let pins: BTreeMap<String, (bool, u32)> = run
        .values("PIN")
        .iter()
        .map(|l| {
            let (what, rest) = l.split_once(' ').unwrap();
            (what.to_string(), kernel_pin(rest))
        })
        .collect();
    eprintln!(
        "kernel pin reports: {pins:?}\nkernel GC: {:#?}",
        run.values("GC")
    );

    // (a) The kernel's roll-forward gives every fsync'd byte; the block
    // never fsync'd reads old or new; fsck.f2fs is clean after its unmount.
    for (policy, img, with_new, with_old) in &cut {
        let got = normalize(&run.section(&format!("ipu-{policy}")));
        let unsynced = if got == *with_old { "old" } else { "new" };
        eprintln!("ipu_policy {policy}: the kernel reads the never-fsync'd block {unsynced}");
        if got != *with_old {
            assert_same(
                &format!("ipu_policy {policy}: the kernel's roll-forward of f2fuse's image"),
                with_new,
                &got,
            );
        }
        assert_fsck(img, &format!("the kernel's recovery (ipu_policy {policy})"));
    }

    // (b) The kernel sees f2fuse's pinned file pinned, at f2fuse's blocks,
    // with f2fuse's bytes; its urgent cleaning tries the section and leaves
    // the file; the kernel's own rewrite of it stays in place.
    assert_same(
        "the kernel's view of f2fuse's pinned file",
        &ours_before,
        &normalize(&run.section("ours-before")),
    );
    assert_eq!(pins["ours"], (true, 0), "{}", run.out);
    assert_eq!(
        kernel_fiemap(&run.section("ours-fiemap")),
        pinned_extents,
        "the kernel's fiemap of f2fuse's pinned file"
    );
    assert_eq!(
        kernel_fiemap(&run.section("ours-fiemap-after-gc")),
        pinned_extents,
        "the kernel's cleaner moved f2fuse's pinned file"
    );
    assert!(
        kernel_gc_blocks_tried(&run) > 0,
        "the kernel's cleaner tried nothing: {:?}",
        run.values("GC")
    );
    let (still_pinned, kernel_failures) = pins["ours-after-gc"];
    assert!(
        still_pinned,
        "the kernel unpinned f2fuse's file: {}",
        run.out
    );
    assert_fsck(&ours, "the kernel's cleaning around f2fuse's pinned file");
    assert_same(
        "f2fuse's view after the kernel's cleaning",
        &normalize(&run.section("ours-after")),
        &f2fuse_manifest(&scratch, &ours, "pinned-ours-after"),
    );
    let fs = Fs::open_path(&ours, OpenOptions::default()).unwrap();
    assert!(fs.is_pinned(pinned_ino).unwrap());
    assert_eq!(fs.get_pin_file(pinned_ino).unwrap(), kernel_failures);
    drop(fs);

    // The kernel rolls the killed daemon's fsync forward: the pin, the
    // preallocation (one contiguous extent) and the bytes.
    if through_mount {
        assert_eq!(pins["mount"], (true, 0), "{}", run.out);
        assert_same(
            "the kernel's roll-forward of the killed mount's pinned file",
            &host_manifest(&killed_mirror),
            &normalize(&run.section("mount")),
        );
        let extents = kernel_fiemap(&run.section("mount-fiemap"));
        assert_eq!(extents.len(), 1, "{extents:?}");
        assert_eq!(extents[0].2, 1024, "{extents:?}");
        assert_fsck(&killed, "the kernel's roll-forward of the killed mount");
    }

    // (c) f2fuse reads the kernel's pinned file, sees it pinned at the
    // kernel's blocks, rewrites it in place; its cleaner leaves it.
    assert_fsck(&theirs, "the kernel's pinned file");
    assert_same(
        "f2fuse's view of the kernel's pinned file",
        &normalize(&run.section("theirs")),
        &f2fuse_manifest(&scratch, &theirs, "pinned-theirs"),
    );
    assert_eq!(pins["theirs"], (true, 0), "{}", run.out);
    let fs = open_writable(&theirs);
    let ino = fs.lookup(ROOT, b"kpinned").unwrap().ino;
    assert!(fs.is_pinned(ino).unwrap());
    assert_eq!(fs.get_pin_file(ino).unwrap(), 0);
    let kernel_extents = kernel_fiemap(&run.section("theirs-fiemap"));
    assert_eq!(engine_extents(&fs, ino), kernel_extents);
    assert_eq!(
        kernel_extents.len(),
        1,
        "the kernel's pinned blocks: {kernel_extents:?}"
    );
    // Its last section becomes a cheap victim; other files churn.
    cut_to_pinned_blocks(&fs, ino);
    let mut rng = Rng(0x7e1);
    for round in 0..6 {
        for i in 0..20 {
            let name = format!("churn_{i}");
            if round > 0 {
                fs.unlink(ROOT, name.as_bytes()).unwrap();
            }
            let f = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            fs.write(f, 0, &random_bytes(&mut rng, 64 * 4096)).unwrap();
        }
        fs.checkpoint().unwrap();
    }
    let kept = engine_extents(&fs, ino);
    let in_place = |fs: &Fs| -> u64 { fs.status().unwrap().alloc.in_place_writes.iter().sum() };
    let before = in_place(&fs);
    fs.write(ino, 5 * 4096, &random_bytes(&mut rng, 3 * 4096))
        .unwrap();
    fs.write(ino, 1050 * 4096 + 9, &random_bytes(&mut rng, 4000))
        .unwrap();
    fs.fsync(ino).unwrap();
    assert!(
        in_place(&fs) >= before + 4,
        "rewrites of the pinned file not in place"
    );
    assert_eq!(
        engine_extents(&fs, ino),
        kept,
        "a rewrite moved a pinned block"
    );
    for _ in 0..20 {
        fs.garbage_collect(true).unwrap();
    }
    assert_eq!(
        engine_extents(&fs, ino),
        kept,
        "cleaning moved a pinned block"
    );
    let gc = fs.gc_stats();
    assert!(
        gc.pinned_sections_skipped > 0,
        "the cleaner never met the pinned file: {gc:?}"
    );
    let failures = fs.get_pin_file(ino).unwrap();
    eprintln!("f2fuse's cleaning: {gc:?}; i_gc_failures {failures}");
    fs.unmount().unwrap();
    assert_fsck(
        &theirs,
        "f2fuse's rewrites and cleaning of the kernel's pinned file",
    );
    let ours_now = f2fuse_manifest(&scratch, &theirs, "pinned-theirs-after");

    // The kernel reads back what f2fuse wrote, the file still pinned there.
    let script = format!(
        "{}mkdir -p /mnt/k\nmount -t f2fs /dev/vda /mnt/k\n\
         echo \"PIN theirs $(f2fs_io pinfile get /mnt/k/kpinned)\"\n\
         section theirs-fiemap f2fs_io fiemap 0 {PINNED_BLOCKS} /mnt/k/kpinned\n\
         section theirs manifest /mnt/k\numount /mnt/k\n{VM_EPILOGUE}",
        vm_prologue()
    );
    let run = run_vm(&scratch, &[&theirs], &script);
    run.assert_kernel_quiet();
    assert_eq!(kernel_pin(&run.values("PIN")[0]), (true, failures));
    assert_eq!(kernel_fiemap(&run.section("theirs-fiemap")), kept);
    assert_same(
        "the kernel's view of f2fuse's rewrites of its pinned file",
        &ours_now,
        &normalize(&run.section("theirs")),
    );
    assert_fsck(&theirs, "the kernel's mount after f2fuse's rewrites");
}
