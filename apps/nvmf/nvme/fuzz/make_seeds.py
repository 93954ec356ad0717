#!/usr/bin/env python3
"""Writes the seed corpus of capsule_fuzz.cc (its script format is described at the top of that file)."""
import pathlib
import struct
import sys

OPEN, CLOSE, CONNECT_ADMIN, CONNECT_IO, SET_CC, RAW, TEMPLATE, TICK, TAKE_HELD, EXECUTE_ONLY = range(10)
IDENTIFY, SMART, DISC_HEADER, DISC_ENTRIES, NUM_QUEUES, KATO, AER, KEEP_ALIVE = range(8)
READ, WRITE_IN_CAPSULE, WRITE_ZEROES, DSM, FLUSH_ALL, GET_CSTS, READ_NS3, WRITE_NS3 = range(8, 16)


def template(slot, which, patches=(), data=None):
    out = [TEMPLATE, slot, which, len(patches)]
    for offset, value in patches:
        out += [offset, value]
    if data is not None:
        out += [len(data)] + list(data)  # up to 64 bytes, then a pattern
    return out


def linux_host():
    s = [OPEN, 0, 0, 32, CONNECT_ADMIN, 0, 0, 50, 31, SET_CC, 0, 0]
    for t in (IDENTIFY, NUM_QUEUES, AER, KEEP_ALIVE, SMART):
        s += template(0, t)
    s += [OPEN, 1, 1, 128, CONNECT_IO, 1, 0, 0, OPEN, 2, 2, 128, CONNECT_IO, 2, 0, 0]
    s += template(0, IDENTIFY, [(40, 2)])  # active namespace list
    s += template(0, IDENTIFY, [(40, 0), (4, 1)])  # namespace 1
    s += template(0, IDENTIFY, [(40, 3), (4, 1)])  # its descriptors
    s += template(1, WRITE_IN_CAPSULE, data=bytes(range(64)))
    s += template(2, READ) + template(1, WRITE_ZEROES)
    ranges = struct.pack('<IIQ', 0, 4, 8) + struct.pack('<IIQ', 0, 1, 120)
    s += template(1, DSM, data=ranges)
    s += template(2, FLUSH_ALL) + template(2, READ_NS3) + template(1, WRITE_NS3, data=b'\x5a' * 16)
    s += [TICK, 40] + template(1, READ) + [TICK, 200] + template(1, READ)  # KATO 5 s: alive, then expired
    s += [TAKE_HELD, 0, CLOSE, 0, CLOSE, 1]
    return bytes(s)


def discovery():
    s = [OPEN, 0, 0, 32, CONNECT_ADMIN, 0, 2, 0, 31, SET_CC, 0, 3]
    for t in (IDENTIFY, DISC_HEADER, DISC_ENTRIES, KATO, KEEP_ALIVE, AER, SMART):
        s += template(0, t)
    s += [OPEN, 1, 1, 32, CONNECT_IO, 1, 0, 2]  # no I/O queue on a discovery controller
    s += [OPEN, 2, 0, 32, CONNECT_ADMIN, 2, 5, 0, 31]  # the other host into the restricted subsystem
    return bytes(s)


def raw_and_broken():
    s = [OPEN, 0, 0, 4] + [RAW, 0, 0, 0] + [0x06, 0x40] + [0] * 62  # before Connect
    s += [CONNECT_ADMIN, 0, 0, 10, 3, SET_CC, 0, 0, SET_CC, 0, 1, SET_CC, 0, 2, SET_CC, 0, 0]  # shutdown, re-enable
    sqe = bytearray(64)
    sqe[0], sqe[1], sqe[40], sqe[39] = 0x06, 0x40, 0x01, 0x20  # Identify with a segment descriptor
    s += [RAW, 0, 0, 16] + list(sqe)
    s += [EXECUTE_ONLY, 0, 0, 2] + list(sqe)
    s += template(0, READ, [(39, 0x01), (32, 0xFF)])  # in-capsule on the admin queue
    s += [OPEN, 3, 1, 32, CONNECT_IO, 3, 0, 0] + template(3, WRITE_IN_CAPSULE, [(24, 8)])
    s += [OPEN, 0, 0, 32]  # the admin queue closes under its I/O queue
    s += template(3, READ)
    return bytes(s)


def main(folder):
    out = pathlib.Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, seed in (('linux-host', linux_host()), ('discovery', discovery()), ('raw-and-broken', raw_and_broken())):
        (out / name).write_bytes(seed)


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / 'corpus')
