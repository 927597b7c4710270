#!/usr/bin/env python3
"""Seed corpora for the fuzz targets: the frames of the real captures in
../shared/data/pcaps (not ours to commit, so built here, into the ignored
fuzz/corpus/), in each target's input format, and the shipped and broken
configs for the config loader.

    python3 fuzz/seed.py        # then: cargo +nightly fuzz run router fuzz/corpus/router
"""
import glob
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PCAPS = os.path.join(ROOT, "..", "shared", "data", "pcaps", "tcpdump_tests")
OUT = os.path.join(ROOT, "fuzz", "corpus")
R0 = bytes([2, 0x51, 0, 0, 0, 0])


def frames(path):
    """Ethernet frames of a classic pcap (other formats are skipped)."""
    data = open(path, "rb").read()
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        return []
    if struct.unpack(end + "I", data[20:24])[0] & 0xFFFF != 1:
        return []  # not Ethernet
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8 : off + 12])[0]
        out.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


def framed(fs, ctl, unit):
    """A frame sequence: length (in `unit`s: 2 for burst, 1 for gateway),
    control byte, bytes."""
    b = b""
    for f in fs:
        f = f[: unit * 255]
        f = f[: len(f) - len(f) % unit]
        b += bytes([len(f) // unit, ctl]) + f
    return b


def main():
    if not os.path.isdir(PCAPS):
        sys.exit(f"no captures at {PCAPS}")
    n = 0
    for t in ("router", "parse", "burst", "gateway", "config"):
        os.makedirs(os.path.join(OUT, t), exist_ok=True)
    for p in sorted(glob.glob(os.path.join(PCAPS, "*.pcap"))):
        name = os.path.basename(p)[:-5]
        fs = frames(p)
        for i, f in enumerate(fs[:64]):
            for t, data in (
                ("parse", f),
                ("router", bytes([0xC0]) + R0[1:] + f[6:] if len(f) >= 6 else f),
            ):
                open(os.path.join(OUT, t, f"{name}-{i}"), "wb").write(data)
                n += 1
        if fs:
            open(os.path.join(OUT, "burst", name), "wb").write(b"\x00" + framed(fs[:32], 0xC0, 2))
            open(os.path.join(OUT, "gateway", name), "wb").write(framed(fs[:32], 0xC0, 1))
            n += 2
    for c in glob.glob(os.path.join(ROOT, "configs", "*.toml")) + glob.glob(
        os.path.join(ROOT, "appliance", "tests", "bad", "*.toml")
    ):
        open(os.path.join(OUT, "config", os.path.basename(c)), "wb").write(open(c, "rb").read())
        n += 1
    print(f"{n} seeds in {OUT}")


main()
