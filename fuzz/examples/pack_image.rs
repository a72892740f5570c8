//! Packs an image file into the sparse seed format of `seeds/`:
//! `cargo run --example pack_image -- IMAGE OUT.f2sparse`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [image, out] = args.as_slice() else {
        eprintln!("usage: pack_image IMAGE OUT.f2sparse");
        std::process::exit(2);
    };
    let bytes = std::fs::read(image).unwrap_or_else(|e| panic!("read {image}: {e}"));
    let packed = f2fuse_fuzz::encode_sparse(&bytes);
    let back = f2fuse_fuzz::decode_sparse("check", &packed);
    assert_eq!(back.size, bytes.len() as u64);
    for (addr, block) in &back.blocks {
        let at = *addr as usize * 4096;
        assert_eq!(&bytes[at..at + 4096], &block[..], "block {addr}");
    }
    std::fs::write(out, &packed).unwrap_or_else(|e| panic!("write {out}: {e}"));
    eprintln!(
        "{out}: {} non-zero blocks, {} bytes",
        back.blocks.len(),
        packed.len()
    );
}
