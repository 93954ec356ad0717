#!/usr/bin/python3
"""Cross-checks uroce's RoCEv2 parser, builder and ICRC against scapy and tshark.

  reference  scapy recomputes the ICRC of the rocev2.md §3.4 test vectors, and uroce
             verifies them: checks the reference ICRC code below before trusting it.
  A          scapy builds RoCEv2 frames (IPv4/IPv6, with/without VLAN, every opcode,
             random field values, payloads that need pad); `uroce_pcap_check verify`
             must report every frame ok, with the opcode, payload length and pad count
             scapy built and the ICRC scapy computed.
  B          `uroce_pcap_check generate` builds frames for every opcode; scapy must
             recompute every ICRC to the wire value, and tshark must decode every frame
             as InfiniBand with the intended opcode and headers and raise no error.

Run with Debian's python (/usr/bin/python3), which has python3-scapy:
  /usr/bin/python3 scapy_crosscheck.py --pcap-check BUILD/proto/tests/crosscheck/uroce_pcap_check
Prints `N passed, M failed` and exits non-zero on any failure.
"""

import argparse
import collections
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import scapy
    from scapy.all import Dot1Q, Ether, IP, IPv6, Raw, UDP, raw, rdpcap, wrpcap
    from scapy.contrib import roce
    from scapy.contrib.roce import AETH, BTH
except ImportError as error:
    sys.exit('scapy_crosscheck: cannot import scapy (%s) with %s.\n'
             'Install it for Debian\'s python: apt-get install python3-scapy' % (error, sys.executable))

ROCE_PORT = 4791
ETH_MIN_FRAME = 60  # without FCS: a MAC pads shorter frames with zeros, outside the ICRC

# --- The opcode table, from rocev2.md §2.2-2.3 (independent of uroce's opcode.h) ----

# Extension header sizes; a packet carries them in this order after the BTH.
HEADER_SIZES = collections.OrderedDict([
    ('DETH', 8), ('FETH', 4), ('RETH', 16), ('AtomicETH', 28), ('ImmDt', 4), ('IETH', 4),
    ('AETH', 4), ('AtomicAckETH', 8), ('CNP', 16)])

Op = collections.namedtuple('Op', 'code headers payload')  # payload: pmtu, last, only, none, atomic_write


def _opcode_table():
    table = {}
    shared = [  # RC and UC
        ('SEND_FIRST', (), 'pmtu'), ('SEND_MIDDLE', (), 'pmtu'), ('SEND_LAST', (), 'last'),
        ('SEND_LAST_WITH_IMMEDIATE', ('ImmDt',), 'last'), ('SEND_ONLY', (), 'only'),
        ('SEND_ONLY_WITH_IMMEDIATE', ('ImmDt',), 'only'), ('RDMA_WRITE_FIRST', ('RETH',), 'pmtu'),
        ('RDMA_WRITE_MIDDLE', (), 'pmtu'), ('RDMA_WRITE_LAST', (), 'last'),
        ('RDMA_WRITE_LAST_WITH_IMMEDIATE', ('ImmDt',), 'last'), ('RDMA_WRITE_ONLY', ('RETH',), 'only'),
        ('RDMA_WRITE_ONLY_WITH_IMMEDIATE', ('RETH', 'ImmDt'), 'only')]
    rc_only = [
        ('RDMA_READ_REQUEST', ('RETH',), 'none'), ('RDMA_READ_RESPONSE_FIRST', ('AETH',), 'pmtu'),
        ('RDMA_READ_RESPONSE_MIDDLE', (), 'pmtu'), ('RDMA_READ_RESPONSE_LAST', ('AETH',), 'last'),
        ('RDMA_READ_RESPONSE_ONLY', ('AETH',), 'only'), ('ACKNOWLEDGE', ('AETH',), 'none'),
        ('ATOMIC_ACKNOWLEDGE', ('AETH', 'AtomicAckETH'), 'none'), ('COMPARE_SWAP', ('AtomicETH',), 'none'),
        ('FETCH_ADD', ('AtomicETH',), 'none')]
    # Opcode numbers and names come from scapy where it has them.
    for transport, ops in (('RC', shared + rc_only), ('UC', shared)):
        for op, headers, payload in ops:
            code, name = roce.opcode(transport, op)
            table[name] = Op(code, headers, payload)
    for op, headers in (('SEND_ONLY', ('DETH',)), ('SEND_ONLY_WITH_IMMEDIATE', ('DETH', 'ImmDt'))):
        code, name = roce.opcode('UD', op)
        table[name] = Op(code, headers, 'only')
    # scapy 2.5.0 does not know these: numbers from rocev2.md §2.3.
    table['RC_SEND_LAST_WITH_INVALIDATE'] = Op(0x16, ('IETH',), 'last')
    table['RC_SEND_ONLY_WITH_INVALIDATE'] = Op(0x17, ('IETH',), 'only')
    table['RC_FLUSH'] = Op(0x1C, ('FETH', 'RETH'), 'none')
    table['RC_ATOMIC_WRITE'] = Op(0x1D, ('RETH',), 'atomic_write')
    table['CNP'] = Op(roce.CNP_OPCODE, ('CNP',), 'none')
    return table


OPCODES = _opcode_table()
OPCODE_NAMES = {op.code: name for name, op in OPCODES.items()}


def header_offsets(op):
    """Offset of each extension header from the end of the BTH, and their total length."""
    offsets, offset = {}, 0
    for header, size in HEADER_SIZES.items():
        if header in op.headers:
            offsets[header] = offset
            offset += size
    return offsets, offset


# --- Reference ICRC -----------------------------------------------------------------

_scapy_compute_icrc = BTH.compute_icrc


def icrc_ipv6(bth):
    """The ICRC of an IPv6 RoCEv2 packet, computed the way scapy computes it for IPv4.

    scapy 2.5.0's BTH.compute_icrc supports IPv4 only (it warns and returns 0 for IPv6).
    This follows rocev2.md §3.1: 8 bytes of ones, then the IPv6 header with traffic
    class, flow label and hop limit set to ones, UDP with the checksum set to ones, the
    BTH with byte 4 (FECN, BECN, reserved) set to ones, and the rest up to the ICRC.
    """
    masked = bth.underlayer.underlayer.copy()
    masked.tc, masked.fl, masked.hlim = 0xFF, 0xFFFFF, 0xFF
    masked[UDP].chksum = 0xFFFF
    masked_bth = masked[BTH]
    masked_bth.fecn, masked_bth.becn, masked_bth.resv6 = 1, 1, 0x3F
    masked_bth.icrc = 0  # a placeholder, so that building does not compute an ICRC
    return zlib.crc32(b'\xff' * 8 + raw(masked)[:-4]) & 0xFFFFFFFF


def _compute_icrc(self, p):
    udp = self.underlayer
    if isinstance(udp, UDP) and isinstance(udp.underlayer, IPv6):
        return BTH.pack_icrc(icrc_ipv6(self))
    return _scapy_compute_icrc(self, p)


def scapy_ipv6_icrc(frame):
    """The ICRC this scapy's own BTH.compute_icrc gives an IPv6 frame (2.5.0: zero, with a warning)."""
    logging.getLogger('scapy.runtime').setLevel(logging.ERROR)  # silence "IPv6 is not supported"
    icrc = _scapy_compute_icrc(Ether(frame)[BTH], None)
    logging.getLogger('scapy.runtime').setLevel(logging.WARNING)
    return icrc


def reference_icrc(pkt):
    """The ICRC scapy computes for a dissected packet, as the wire bytes.

    scapy 2.5.0 feeds the Ethernet padding of a short frame (its Padding layer) into the
    ICRC it recomputes, so recompute over the frame cut at the end of the IP packet.
    """
    l3, _ = l3_and_udp_offsets(pkt)
    ip_length = pkt[IP].len if IP in pkt else 40 + pkt[IPv6].plen
    return BTH.compute_icrc(Ether(frame_bytes(pkt)[:l3 + ip_length])[BTH], None)


def scapy_counts_ethernet_padding():
    """Whether scapy's BTH.compute_icrc covers the Ethernet padding of a dissected short frame."""
    ack = bytes.fromhex(SPEC_VECTORS[5][2])
    return _scapy_compute_icrc(Ether(ack.ljust(ETH_MIN_FRAME + 8, b'\0'))[BTH], None) != ack[-4:]


def wire_icrc(pkt):
    """The ICRC field of a dissected packet, as the wire bytes (scapy shows them big-endian)."""
    return struct.pack('!I', pkt[BTH].icrc)


def as_uint32(wire_bytes):
    """The value icrc_load() returns for these wire bytes: uroce prints that."""
    return struct.unpack('<I', wire_bytes)[0]


# rocev2.md §3.4: frames each verified with two independent ICRC implementations.
SPEC_VECTORS = [
    ('a CNP IPv4 ConnectX-4 Lx', 'CNP',
     'e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b7002800008100ffff4000011800'
     '0000000000000000000000000000000000000082fd002a'),
    ('b UC_SEND_ONLY IPv4', 'UC_SEND_ONLY',
     '248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300'
     'cf17104630818be28935d90e9a95505401be885e50000078f353f3'),
    ('c UC_SEND_ONLY IPv6', 'UC_SEND_ONLY',
     '248a07a8fa22248a07a8fa2286dd6e21face002c11ff20220000000000000000000000001023202300000000000000000000000'
     '01024c00012b7002ce7c52460ffff000000d300cf17104630818be28935d90e9a95505401be885e5000003e5b743b'),
    ('d RC_RDMA_WRITE_ONLY', 'RC_RDMA_WRITE_ONLY',
     '0200000000020200000000010800456a004c000140004011b6e2c0a80101c0a80102c13212b7003800000a00ffff0000001280'
     '00010000007f00000010000000123400000010000102030405060708090a0b0c0d0e0f96849a87'),
    ('d RC_SEND_ONLY hello', 'RC_SEND_ONLY',
     '020000000002020000000001080045020034000240004011b761c0a80101c0a80102c13212b7002000000430ffff0000001280'
     '00010168656c6c6f00000086708423'),
    ('d RC_ACKNOWLEDGE', 'RC_ACKNOWLEDGE',
     '020000000001020000000002080045020030001040004011b757c0a80102c0a80101c13212b7001c00001100ffff0000001100'
     '0001011f0000020d79853b'),
    ('d RC_RDMA_READ_REQUEST', 'RC_RDMA_READ_REQUEST',
     '02000000000202000000000108004502003c000340004011b758c0a80101c0a80102c13212b7002800000c00ffff0000001280'
     '00010200007f00000020000000123400002000680f0171'),
    ('d NAK PSN sequence error', 'RC_ACKNOWLEDGE',
     '020000000001020000000002080045020030001140004011b756c0a80102c0a80101c13212b7001c00001100ffff0000001100'
     '000105600000033854d7c4'),
    ('d RNR NAK', 'RC_ACKNOWLEDGE',
     '020000000001020000000002080045020030001240004011b755c0a80102c0a80101c13212b7001c00001100ffff0000001100'
     '0001062e0000031d1d272b'),
    ('d UD_SEND_ONLY to QP1', 'UD_SEND_ONLY',
     '02000000000202000000000108004500003c000440004011b759c0a80101c0a80102c00012b700280000'
     '6400ffff000000010000000080010000000000010107020300000000454e96d0'),
]


# --- Bookkeeping ----------------------------------------------------------------------

class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print('FAIL ' + what)
        return ok

    @staticmethod
    def note(text):
        print('NOTE ' + text)


def run(cmd):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0:
        sys.exit('scapy_crosscheck: %s exited %d:\n%s' % (' '.join(cmd), result.returncode, result.stderr))
    return result.stdout


VerifyLine = collections.namedtuple('VerifyLine', 'status name wire computed payload pad')


def uroce_verify(pcap_check, pcap):
    """uroce's verdict on every frame: INDEX STATUS OPCODE_NAME WIRE_ICRC COMPUTED_ICRC PAYLOAD_LEN PAD."""
    lines = {}
    for line in run([pcap_check, 'verify', pcap]).splitlines():
        index, status, name, wire, computed, payload, pad = line.split()
        lines[int(index)] = VerifyLine(status, name, wire, computed, payload, pad)
    return lines


def frame_bytes(pkt):
    return bytes(pkt.original) if getattr(pkt, 'original', None) else raw(pkt)


def l3_and_udp_offsets(pkt):
    l3 = 14 + (4 if Dot1Q in pkt else 0)
    return l3, l3 + (40 if IPv6 in pkt else 20)


# --- Reference: the spec vectors --------------------------------------------------------

def check_spec_vectors(results, pcap_check, workdir):
    frames = [bytes.fromhex(hex_frame) for _, _, hex_frame in SPEC_VECTORS]
    for (label, _, _), frame in zip(SPEC_VECTORS, frames):
        pkt = Ether(frame)
        results.check(reference_icrc(pkt) == wire_icrc(pkt) == frame[-4:],
                      'reference ICRC of rocev2.md §3.4 vector %s: scapy %s, wire %s'
                      % (label, reference_icrc(pkt).hex(), frame[-4:].hex()))
    pcap = os.path.join(workdir, 'spec_vectors.pcap')
    wrpcap(pcap, [Ether(f) for f in frames])
    verdicts = uroce_verify(pcap_check, pcap)
    for i, (label, name, _) in enumerate(SPEC_VECTORS):
        v = verdicts.get(i)
        results.check(v is not None and v.status == 'ok' and v.name == name and v.wire == v.computed ==
                      '%08x' % as_uint32(frames[i][-4:]),
                      'uroce verify of rocev2.md §3.4 vector %s: %s' % (label, v))


# --- Direction A: scapy builds, uroce verifies ------------------------------------------

PMTUS = (256, 512, 1024, 2048, 4096)
EDGE_SIZES = {'last': (1, 2, 3, 4, 5, 4093, 4095, 4096), 'only': (0, 1, 2, 3, 5, 6, 7, 4095, 4096)}


def payload_size(rule, rng, edge):
    if rule == 'pmtu':
        return rng.choice(PMTUS)
    if rule == 'atomic_write':
        return 8
    if rule == 'none':
        return 0
    if edge:
        return rng.choice(EDGE_SIZES[rule])
    return rng.randint(1 if rule == 'last' else 0, 4096)


def extension_bytes(header, rng):
    if header == 'DETH':
        return struct.pack('!II', rng.getrandbits(32), rng.getrandbits(24))
    if header == 'FETH':
        return struct.pack('!I', rng.randrange(4) << 4 | rng.randrange(16))  # selectivity, placement type
    if header == 'RETH':
        return struct.pack('!QII', rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32))
    if header == 'AtomicETH':
        return struct.pack('!QIQQ', rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(64),
                           rng.getrandbits(64))
    if header in ('ImmDt', 'IETH'):
        return struct.pack('!I', rng.getrandbits(32))
    if header == 'AtomicAckETH':
        return struct.pack('!Q', rng.getrandbits(64))
    raise ValueError(header)


def ack_syndrome(rng, name):
    if name == 'RC_ACKNOWLEDGE':
        # ACK with a credit count, NAK (PSN sequence error .. invalid RD request), RNR NAK.
        return rng.choice((rng.randrange(0x20), 0x60 + rng.randrange(5), 0x20 | rng.randrange(0x20)))
    return rng.randrange(0x20)  # READ responses and atomic ACKs carry an ACK


def scapy_frame(rng, name, op, ipv6, vlan, size):
    """A frame built by scapy, with its ICRC computed by scapy (and the IPv6 extension)."""
    l2 = Ether(src='02:00:00:%02x:%02x:%02x' % tuple(rng.getrandbits(8) for _ in range(3)),
               dst='02:00:00:%02x:%02x:%02x' % tuple(rng.getrandbits(8) for _ in range(3)))
    if vlan:
        l2 = l2 / Dot1Q(prio=rng.randrange(8), vlan=rng.randrange(1, 4095))
    if ipv6:
        l3 = IPv6(src='2001:db8::%x' % rng.getrandbits(16),
                  dst='fe80::%x:%x' % (rng.getrandbits(16), rng.getrandbits(16)),
                  tc=rng.getrandbits(8), fl=rng.getrandbits(20), hlim=rng.randrange(1, 256))
    else:
        l3 = IP(src='10.%d.%d.%d' % tuple(rng.getrandbits(8) for _ in range(3)),
                dst='192.168.%d.%d' % (rng.getrandbits(8), rng.getrandbits(8)),
                tos=rng.getrandbits(8), ttl=rng.randrange(1, 256), id=rng.getrandbits(16),
                flags=rng.choice(('', 'DF')))
    # Source port 0 (seen from ConnectX CNPs) or 0xC000-0xFFFF (rocev2.md §1.4). scapy picks a UDP
    # payload by either port, so a random port such as 53 would dissect as DNS instead of BTH.
    udp = UDP(sport=rng.choice((0, 0xC000, rng.randrange(0xC000, 0x10000))), dport=ROCE_PORT)
    pad = -size % 4
    fields = dict(solicited=rng.getrandbits(1), migreq=rng.getrandbits(1), padcount=pad, pkey=rng.getrandbits(16),
                  fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6),
                  dqpn=rng.getrandbits(24), ackreq=rng.getrandbits(1), psn=rng.getrandbits(24))
    if name == 'CNP':
        bth = roce.cnp(fields.pop('dqpn'))  # BTH(opcode 0x81, BECN) / CNPPadding
        fields.pop('becn')
        for field, value in fields.items():
            setattr(bth, field, value)
        return l2 / l3 / udp / bth
    bth = BTH(opcode=op.code, **fields)
    body = b''
    for header in op.headers:
        if header == 'AETH':
            bth = bth / AETH(syndrome=ack_syndrome(rng, name), msn=rng.getrandbits(24))
        else:
            body += extension_bytes(header, rng)
    body += bytes(rng.getrandbits(8) for _ in range(size)) + b'\0' * pad
    return l2 / l3 / udp / (bth / Raw(body) if body else bth)


def scapy_cases(rng):
    """(name, op, ipv6, vlan, payload size): every opcode over IPv4/IPv6 with and without VLAN, with an
    edge and a random payload size; then the shortest frames, which Ethernet pads to 60 bytes."""
    by_code = sorted(OPCODES.items(), key=lambda item: item[1].code)
    for name, op in by_code:
        for ipv6 in (False, True):
            for vlan in (False, True):
                for edge in (True, False):
                    yield name, op, ipv6, vlan, payload_size(op.payload, rng, edge)
    for name, op in by_code:
        if op.payload == 'only':
            yield name, op, False, False, 0


def check_scapy_built(results, pcap_check, workdir, rng):
    frames, expected = [], []
    for name, op, ipv6, vlan, size in scapy_cases(rng):
        frame = raw(scapy_frame(rng, name, op, ipv6, vlan, size))
        pkt = Ether(frame)
        # scapy's own ICRC, as it built it, must be what a fresh recomputation gives.
        results.check(wire_icrc(pkt) == reference_icrc(pkt) == frame[-4:] != b'\0\0\0\0',
                      'A: scapy ICRC of its own %s frame is unstable or zero' % name)
        frames.append(frame.ljust(ETH_MIN_FRAME, b'\0'))
        expected.append((name, size, -size % 4, as_uint32(wire_icrc(pkt)), ipv6, vlan))
    pcap = os.path.join(workdir, 'scapy_built.pcap')
    wrpcap(pcap, [Ether(f) for f in frames])
    verdicts = uroce_verify(pcap_check, pcap)
    for i, (name, size, pad, icrc, ipv6, vlan) in enumerate(expected):
        v = verdicts.get(i)
        want = VerifyLine('ok', name, '%08x' % icrc, '%08x' % icrc, str(size), str(pad))
        results.check(v == want, 'A: frame %d (%s, %s%s): uroce says %s, scapy built %s; bytes %s'
                      % (i, name, 'IPv6' if ipv6 else 'IPv4', ' VLAN' if vlan else '', v, want, frames[i].hex()))
    print('A: %d scapy-built frames checked by uroce (%s)' % (len(frames), pcap))


# --- Direction B: uroce builds, scapy and tshark check ------------------------------------


def check_uroce_built_with_scapy(results, pcap, verdicts):
    """Every frame: scapy dissects the BTH and recomputes the ICRC, and its opcode, payload
    length and pad count (from the UDP length and rocev2.md's header sizes) are uroce's."""
    packets = rdpcap(pcap)
    seen = collections.Counter()
    for i, pkt in enumerate(packets):
        v = verdicts.get(i)
        frame = frame_bytes(pkt)
        what = 'B: frame %d (uroce: %s)' % (i, ' '.join(v) if v else 'no verdict')
        if not results.check(BTH in pkt and pkt[UDP].dport == ROCE_PORT, what + ': scapy finds no BTH; bytes ' +
                             frame.hex()):
            continue
        bth = pkt[BTH]
        name = OPCODE_NAMES.get(bth.opcode, '0x%02x' % bth.opcode)
        seen[(name, IPv6 in pkt, Dot1Q in pkt)] += 1
        _, udp_offset = l3_and_udp_offsets(pkt)
        udp_length = pkt[UDP].len
        ext_length = header_offsets(OPCODES[name])[1] if name in OPCODES else 0
        payload = udp_length - 8 - 12 - ext_length - bth.padcount - 4
        problems = []
        if v is None or v.status != 'ok' or v.name != name:
            problems.append('uroce does not verify it as %s' % name)
        if bth.version != 0 or name not in OPCODES:
            problems.append('scapy sees TVer %d, opcode %s' % (bth.version, name))
        if not reference_icrc(pkt) == wire_icrc(pkt) == frame[udp_offset + udp_length - 4:][:4]:
            problems.append('scapy recomputes ICRC bytes %s, the wire has %s'
                            % (reference_icrc(pkt).hex(), wire_icrc(pkt).hex()))
        elif v is not None and v.wire != '-' and not v.wire == v.computed == '%08x' % as_uint32(wire_icrc(pkt)):
            problems.append('uroce ICRC values differ from the wire bytes %s' % wire_icrc(pkt).hex())
        if v is not None and v.payload != '-' and (v.payload, v.pad) != (str(payload), str(bth.padcount)):
            problems.append('scapy sees payload %d, pad %d' % (payload, bth.padcount))
        results.check(not problems, '%s: %s; bytes %s' % (what, '; '.join(problems), frame.hex()))
    # Every opcode, over IPv4 and IPv6, with and without a VLAN tag.
    for name in sorted(OPCODES):
        for ipv6 in (False, True):
            for vlan in (False, True):
                results.check(seen[(name, ipv6, vlan)] > 0, 'B: generate has no %s %s%s frame'
                              % (name, 'IPv6' if ipv6 else 'IPv4', ' VLAN' if vlan else ''))
    print('B: %d uroce-built frames checked by scapy (%s)' % (len(packets), pcap))
    return packets


# Wireshark's heuristic dissectors guess the upper-layer protocol of InfiniBand payloads
# (RPC-over-RDMA, Mellanox EoIB, SDP, iSER, ...). The payloads here are synthetic bytes,
# so the guesses produce "Malformed Packet" reports about protocols that are not there;
# turn them off and check the transport headers only. Names as of Wireshark 4.0.
TSHARK_HEURISTICS = ['rpcrdma_infiniband', 'mellanox_eoib', 'sdp_infiniband', 'iser_infiniband', 'lnet_ib',
                     'smb_direct_infiniband', 'smcr_infiniband', 'fc_infiniband', 'eth_over_ib', 'nvme_rdma']

TSHARK_PREFS = [
    # Validate the IPv4 header checksum uroce writes.
    'ip.check_checksum:TRUE',
    # RoCEv2 senders put 0 in the UDP checksum over IPv6 as well (rxe hardcodes it, ConnectX
    # sends it; rocev2.md §1.4, RFC 6935/6936). Wireshark otherwise reports every such frame
    # as an error, "Illegal checksum value (0)".
    'udp.ignore_ipv6_zero_checksum:TRUE',
]

TSHARK_FIELDS = [
    'frame.number', 'infiniband.bth.opcode', 'infiniband.bth.se', 'infiniband.bth.m', 'infiniband.bth.padcnt',
    'infiniband.bth.tver', 'infiniband.bth.p_key', 'infiniband.bth.destqp', 'infiniband.bth.a',
    'infiniband.bth.psn', 'infiniband.invariant.crc', 'infiniband.deth.q_key', 'infiniband.deth.srcqp',
    'infiniband.reth.va', 'infiniband.reth.r_key', 'infiniband.reth.dmalen', 'infiniband.atomiceth.swapdt',
    'infiniband.atomiceth.cmpdt', 'infiniband.immdt', 'infiniband.ieth', 'infiniband.aeth.syndrome',
    'infiniband.aeth.msn', 'infiniband.atomicacketh.origremdt', 'infiniband.vendor', 'data.len',
    '_ws.expert.severity', '_ws.expert.message', '_ws.malformed']

# Wireshark 4.0 does not know these opcodes: it shows "Unknown (N)" and everything after
# the BTH, ICRC included, as "Unknown/Vendor Specific Data". That is no error (no expert
# info, not malformed), so for them the check is the BTH and the length of that data.
#   0x81 CNP: RoCEv2's congestion notification (Wireshark only knows Linux's native-IB 0x80).
#   0x1C FLUSH, 0x1D ATOMIC_WRITE: IBA 1.5 additions, newer than Wireshark 4.0's table.
WIRESHARK_UNKNOWN_OPCODES = {0x81, 0x1C, 0x1D}

EXPERT_WARNING = 0x00600000  # _ws.expert.severity of PI_WARN; PI_ERROR is 0x00800000


def run_tshark(tshark, pcap):
    heuristics = list(TSHARK_HEURISTICS)
    while True:
        cmd = [tshark, '-n', '-r', pcap]
        for heuristic in heuristics:
            cmd += ['--disable-heuristic', heuristic]
        for pref in TSHARK_PREFS:
            cmd += ['-o', pref]
        cmd += ['-T', 'fields', '-E', 'separator=/t', '-E', 'occurrence=a', '-E', 'aggregator=|']
        for field in TSHARK_FIELDS:
            cmd += ['-e', field]
        # stderr has "Running as user root" and the like: ignored unless tshark fails.
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        unknown = [h for h in heuristics if "No such protocol %s," % h in result.stderr]
        if result.returncode != 0 and unknown:  # another Wireshark version: drop the names it lacks
            heuristics = [h for h in heuristics if h not in unknown]
            continue
        if result.returncode != 0:
            sys.exit('scapy_crosscheck: %s exited %d:\n%s' % (' '.join(cmd), result.returncode, result.stderr))
        rows = {}
        for line in result.stdout.splitlines():
            row = dict(zip(TSHARK_FIELDS, line.split('\t')))
            rows[int(row['frame.number'])] = row
        return rows


def tshark_int(text):
    return int(text.split('|')[0], 0)


def tshark_bytes(text):
    return max(text.split('|'), key=len).replace(':', '')


def expected_tshark_fields(op, frame, bth_offset):
    """What tshark should show for the extension headers, decoded from the bytes per rocev2.md §2.2."""
    offsets, _ = header_offsets(op)
    at = {header: bth_offset + 12 + offset for header, offset in offsets.items()}
    want = {}
    if 'DETH' in at:
        qkey, srcqp = struct.unpack_from('!II', frame, at['DETH'])
        want.update({'infiniband.deth.q_key': qkey, 'infiniband.deth.srcqp': srcqp & 0xFFFFFF})
    if 'RETH' in at:
        want.update(zip(('infiniband.reth.va', 'infiniband.reth.r_key', 'infiniband.reth.dmalen'),
                        struct.unpack_from('!QII', frame, at['RETH'])))
    if 'AtomicETH' in at:  # Wireshark shows the AtomicETH VA and R_Key with the RETH fields
        want.update(zip(('infiniband.reth.va', 'infiniband.reth.r_key', 'infiniband.atomiceth.swapdt',
                         'infiniband.atomiceth.cmpdt'), struct.unpack_from('!QIQQ', frame, at['AtomicETH'])))
    if 'ImmDt' in at:
        want['infiniband.immdt'] = frame[at['ImmDt']:at['ImmDt'] + 4].hex()
    if 'IETH' in at:
        want['infiniband.ieth'] = frame[at['IETH']:at['IETH'] + 4].hex()
    if 'AETH' in at:
        syndrome, msn_hi, msn_lo = struct.unpack_from('!BBH', frame, at['AETH'])
        want.update({'infiniband.aeth.syndrome': syndrome, 'infiniband.aeth.msn': msn_hi << 16 | msn_lo})
    if 'AtomicAckETH' in at:
        want['infiniband.atomicacketh.origremdt'] = struct.unpack_from('!Q', frame, at['AtomicAckETH'])[0]
    return want


def check_uroce_built_with_tshark(results, tshark, pcap, packets):
    rows = run_tshark(tshark, pcap)
    for i, pkt in enumerate(packets):
        row = rows.get(i + 1, {})
        bth = pkt[BTH] if BTH in pkt else None
        op = OPCODES.get(OPCODE_NAMES.get(bth.opcode)) if bth else None
        what = 'B tshark: frame %d (%s)' % (i + 1, OPCODE_NAMES.get(bth.opcode) if bth else 'no BTH')
        if not results.check(op is not None and row.get('infiniband.bth.opcode', '') != '',
                             what + ': not decoded as InfiniBand: %s' % row):
            continue
        frame = frame_bytes(pkt)
        _, udp_offset = l3_and_udp_offsets(pkt)
        bth_offset = udp_offset + 8
        problems = []
        severities = [int(s) for s in row.get('_ws.expert.severity', '').split('|') if s]
        if row.get('_ws.malformed') or any(s >= EXPERT_WARNING for s in severities):
            problems.append('expert info: %s %s' % (row.get('_ws.expert.message'), row.get('_ws.malformed')))
        # BTH fields: tshark against scapy's dissection of the same bytes.
        bth_fields = {'infiniband.bth.opcode': op.code, 'infiniband.bth.se': bth.solicited,
                      'infiniband.bth.m': bth.migreq, 'infiniband.bth.padcnt': bth.padcount,
                      'infiniband.bth.tver': bth.version, 'infiniband.bth.p_key': bth.pkey,
                      'infiniband.bth.destqp': bth.dqpn, 'infiniband.bth.a': bth.ackreq,
                      'infiniband.bth.psn': bth.psn}
        for field, want in bth_fields.items():
            if tshark_int(row.get(field) or '-1') != want:
                problems.append('%s is %s, want %s' % (field, row.get(field), want))
        rest = pkt[UDP].len - 8 - 12  # bytes after the BTH, ICRC included
        if op.code in WIRESHARK_UNKNOWN_OPCODES and not row.get('infiniband.invariant.crc'):
            if len(tshark_bytes(row.get('infiniband.vendor', ''))) != 2 * rest:
                problems.append('vendor data %s is not the %d bytes after the BTH'
                                % (row.get('infiniband.vendor'), rest))
        else:
            if tshark_int(row.get('infiniband.invariant.crc') or '-1') != bth.icrc:
                problems.append('invariant CRC %s, scapy %#010x' % (row.get('infiniband.invariant.crc'), bth.icrc))
            for field, want in expected_tshark_fields(op, frame, bth_offset).items():
                got = row.get(field, '')
                if (tshark_bytes(got) if isinstance(want, str) else tshark_int(got or '-1')) != want:
                    problems.append('%s is %s, want %s' % (field, got, want))
            # Wireshark hands payload and pad on as data.
            data = rest - header_offsets(op)[1] - 4
            if tshark_int(row.get('data.len') or '0') != data:
                problems.append('data.len %s, want payload + pad = %d' % (row.get('data.len'), data))
        results.check(not problems, what + ': ' + '; '.join(problems))
    print('B: %d uroce-built frames checked by tshark' % len(packets))


def check_capture(results, tshark, path, expected_opcodes):
    """Wire truth for a capture the engines wrote (pcap or pcapng): every RoCEv2 frame has
    the ICRC scapy computes and decodes in tshark as that opcode with no malformed-packet
    or warning-level expert info; and the capture holds every expected opcode."""
    packets = rdpcap(path)
    rows = run_tshark(tshark, path)
    seen = collections.Counter()
    for i, pkt in enumerate(packets):
        if UDP not in pkt or pkt[UDP].dport != ROCE_PORT:
            continue
        what = 'capture frame %d' % (i + 1)
        if not results.check(BTH in pkt, what + ': scapy finds no BTH'):
            continue
        name = OPCODE_NAMES.get(pkt[BTH].opcode, '0x%02x' % pkt[BTH].opcode)
        seen[name] += 1
        row = rows.get(i + 1, {})
        problems = []
        if reference_icrc(pkt) != wire_icrc(pkt):
            problems.append('ICRC on the wire %s, scapy computes %s' % (wire_icrc(pkt).hex(), reference_icrc(pkt).hex()))
        if tshark_int(row.get('infiniband.bth.opcode') or '-1') != pkt[BTH].opcode:
            problems.append('tshark decodes opcode %s' % row.get('infiniband.bth.opcode'))
        severities = [int(s) for s in row.get('_ws.expert.severity', '').split('|') if s]
        if row.get('_ws.malformed') or any(s >= EXPERT_WARNING for s in severities):
            problems.append('expert info: %s %s' % (row.get('_ws.expert.message'), row.get('_ws.malformed')))
        results.check(not problems, '%s (%s): %s' % (what, name, '; '.join(problems)))
    for name in expected_opcodes:
        results.check(seen[name] > 0, 'capture has no %s frame' % name)
    print('capture %s: %d RoCEv2 frames: %s' % (path, sum(seen.values()),
                                                ' '.join('%s=%d' % kv for kv in sorted(seen.items()))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--capture', help='check this capture written by uroce instead of the cross-check')
    parser.add_argument('--expect', nargs='*', default=[], help='with --capture: opcode names that must appear')
    parser.add_argument('--pcap-check', help='path to the uroce_pcap_check executable')
    parser.add_argument('--workdir',
                        help='directory for the pcaps (default: a temporary directory, kept only on failure)')
    parser.add_argument('--tshark', default=shutil.which('tshark') or 'tshark', help='path to tshark')
    parser.add_argument('--seed', type=int, default=4791, help='seed of the random field values in direction A')
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix='uroce_crosscheck_')
    os.makedirs(workdir, exist_ok=True)
    results = Results()

    ipv6_vector = bytes.fromhex(SPEC_VECTORS[2][2])
    native = scapy_ipv6_icrc(ipv6_vector)
    if native == b'\0\0\0\0':
        results.note('scapy %s BTH.compute_icrc does not support IPv6 (warns and returns 0); IPv6 ICRCs come '
                     'from icrc_ipv6() here, checked against rocev2.md §3.4 (c)' % scapy.VERSION)
    else:  # a newer scapy: its own IPv6 ICRC must be right too
        results.check(native == ipv6_vector[-4:], 'scapy\'s own IPv6 ICRC of rocev2.md §3.4 (c) is %s, want %s'
                      % (native.hex(), ipv6_vector[-4:].hex()))
    if scapy_counts_ethernet_padding():
        results.note('scapy %s BTH.compute_icrc covers the Ethernet padding of a dissected short frame (wrong '
                     'ICRC); ICRCs are recomputed here over the frame cut at the IP length' % scapy.VERSION)
    BTH.compute_icrc = _compute_icrc

    if args.capture:
        check_capture(results, args.tshark, args.capture, args.expect)
        print('%d passed, %d failed' % (results.passed, results.failed))
        return 1 if results.failed else 0
    if not args.pcap_check:
        parser.error('--pcap-check is required without --capture')
    check_spec_vectors(results, args.pcap_check, workdir)
    check_scapy_built(results, args.pcap_check, workdir, random.Random(args.seed))

    generated = os.path.join(workdir, 'uroce_built.pcap')
    print('B: uroce_pcap_check generate: ' + run([args.pcap_check, 'generate', generated]).strip())
    verdicts = uroce_verify(args.pcap_check, generated)
    packets = check_uroce_built_with_scapy(results, generated, verdicts)
    check_uroce_built_with_tshark(results, args.tshark, generated, packets)

    if args.workdir or results.failed:
        print('pcaps in %s' % workdir)
    else:
        shutil.rmtree(workdir)
    print('%d passed, %d failed' % (results.passed, results.failed))
    return 1 if results.failed else 0


if __name__ == '__main__':
    sys.exit(main())
