#!/usr/bin/python3
"""Independent compressors and decompressors for F2FS cluster payloads, from
Debian's python3-lz4 (liblz4: LZ4_decompress_safe), python3-zstandard
(libzstd) and python3-lzo (liblzo2: lzo1x_decompress_safe, LZO1X-1/999).

Usage: codecs.py decode|encode < records > results

A record is [algorithm u8][param u32 LE][length u32 LE][bytes], with the
kernel's algorithm numbers (0 lzo, 1 lz4, 2 zstd, 3 lzo-rle). For decode,
param is the cluster size the stream must fill; for encode, a variant
(0: the kernel's default settings, 1: the strongest). A result is
[ok u8][crc u32 LE][length u32 LE][bytes]: the decoded or encoded bytes
(or an error message), and for decode the kernel's f2fs_crc32 of the
stream (crc32_le seeded with F2FS_SUPER_MAGIC, no final inversion).

LZO-RLE: liblzo2 has no RLE bitstream. The kernel's lzo-rle stream is 17,
the bitstream version 1, then LZO1X instructions where one M4 pattern
(distance 0xbfff) codes a zero run. A stream without that pattern decodes
with liblzo2 after the two bytes; one with it does not (or to other bytes).
In clusters under 48 KiB no LZO1X-1 match is that far, so a liblzo2
stream with the prefix is a valid lzo-rle stream.
"""
import struct
import sys
import zlib

import lz4.block
import lzo
import zstandard

F2FS_SUPER_MAGIC = 0xF2F52010


def f2fs_crc32(data):
    return ~zlib.crc32(data, ~F2FS_SUPER_MAGIC & 0xFFFFFFFF) & 0xFFFFFFFF


def decode(algorithm, size, data):
    if algorithm == 1:
        return lz4.block.decompress(data, uncompressed_size=size)
    if algorithm == 2:
        return zstandard.ZstdDecompressor(max_window_size=max(size, 1 << 10)).decompress(
            data, max_output_size=size
        )
    if algorithm == 3:
        if data[:2] != b"\x11\x01":
            raise ValueError("lzo-rle stream without its version bytes")
        data = data[2:]
    return lzo.decompress(data, False, size)


def encode(algorithm, variant, data):
    if algorithm == 1:
        if variant:
            return lz4.block.compress(data, mode="high_compression", compression=12, store_size=False)
        return lz4.block.compress(data, store_size=False)
    if algorithm == 2:
        level = 19 if variant else 1
        return zstandard.ZstdCompressor(
            level=level, write_content_size=bool(variant), write_checksum=bool(variant)
        ).compress(data)
    stream = lzo.compress(data, 9 if variant else 1, False)
    return b"\x11\x01" + stream if algorithm == 3 else stream


def main():
    mode = sys.argv[1]
    raw = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    at = 0
    while at < len(raw):
        algorithm, param, length = struct.unpack_from("<BII", raw, at)
        at += 9
        data = raw[at : at + length]
        at += length
        try:
            if mode == "decode":
                result, crc = decode(algorithm, param, data), f2fs_crc32(data)
            else:
                result, crc = encode(algorithm, param, data), 0
            out.write(struct.pack("<BII", 1, crc, len(result)) + result)
        except Exception as e:  # reported to the test, which fails on it
            message = repr(e).encode()
            out.write(struct.pack("<BII", 0, 0, len(message)) + message)


main()
