//! Images with Android userdata's feature set (fs_mgr's make_f2fs:
//! extra_attr, inode_checksum, sb_checksum, encrypt, verity, quota,
//! project_quota, casefold, compression, utf8) open writable, the quota
//! files kept up to date (fsck.f2fs checks them). Encrypted and fs-verity
//! files themselves can only be made by the kernel: see
//! crates/cli/tests/kernel_vm.rs (android_userdata_encrypted_and_verity_files).

use f2fuse_testkit as support;

use f2fuse_engine::{Fs, OpenOptions};
use f2fuse_layout::inode_flag::CASEFOLD;
use f2fuse_layout::F2FS_ROOT_INO as ROOT;
use support::*;

const ANDROID_FEATURES: &str =
    "extra_attr,inode_checksum,sb_checksum,encrypt,verity,quota,project_quota,casefold,compression";

#[test]
fn encrypt_and_verity_images_are_writable() {
    if !require_f2fs_tools() {
        return;
    }
    let scratch = Scratch::new("android-rw");
    let img = scratch.join("userdata.img");
    mkfs_f2fs(&img, 64 << 20, &["-O", ANDROID_FEATURES, "-C", "utf8"]);
    let fs = open_writable(&img);
    let dir = fs.mkdir(ROOT, b"media", 0o755, 0, 0).unwrap().ino;
    fs.set_flags(dir, CASEFOLD).unwrap();
    let mut rng = Rng(0x5eed);
    let mut written = Vec::new();
    for (i, name) in ["Photo.JPG", "notes.txt", "big.bin"].iter().enumerate() {
        let mut data = vec![0u8; 1000 + i * 300_000];
        rng.fill(&mut data);
        let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
        written.push((name.to_lowercase(), data));
    }
    fs.symlink(ROOT, b"link", b"media/notes.txt", 0, 0).unwrap();
    fs.unmount().unwrap();
    fsck_f2fs(&img).unwrap();

    let fs = Fs::open_path(&img, OpenOptions::default()).unwrap();
    for (name, data) in &written {
        // Casefolded: found by another case.
        let inode = fs
            .resolve(&format!("/media/{}", name.to_uppercase()))
            .unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(fs.read(&inode, 0, &mut back).unwrap(), data.len());
        assert_eq!(&back, data);
    }
}
