#!/usr/bin/env python3
"""Writes one libFuzzer seed file per frame of the rxe captures: an options byte
(3 = verify ICRC and IP checksum) followed by the frame. Standard library only."""
import pathlib
import struct
import sys


def frames(path):
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    offset = 24
    while offset + 16 <= len(data):
        _, _, incl, _ = struct.unpack_from(endian + "IIII", data, offset)
        offset += 16
        yield data[offset:offset + incl]
        offset += incl


def main():
    captures, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for pcap in sorted(captures.glob("rxe-*.pcap")):
        for i, frame in enumerate(frames(pcap)):
            (out / f"{pcap.stem}-{i:04d}").write_bytes(b"\x03" + frame)
            n += 1
    if n == 0:
        sys.exit(f"no frames found in {captures}/rxe-*.pcap")
    print(f"{n} seed inputs in {out}")


if __name__ == "__main__":
    main()
