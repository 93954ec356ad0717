#!/usr/bin/env python3
"""Checks the RoCEv2 (IPv4) packets of a pcap taken during an RC ping-pong or a perftest run,
independently of tshark and of either implementation: every field a receiver validates, recomputed.

usage: check_capture.py CAPTURE.pcap --pmtu 1024 [--size N] [--iters N] [--one-way] [--cm-connection K]
                        [--cm-retransmitted] [--quiet]

Per packet (hard errors, exit 1):
  IPv4 header: version/IHL 0x45, header checksum, total length = 20 + UDP length, frame holds it;
  UDP: dport 4791, length >= 8 + BTH + extension headers + ICRC;
  BTH: TVer 0, P_Key 0xFFFF, known RC opcode, pad bytes zero, payload + pad a multiple of 4;
  ICRC recomputed over the masked headers (rocev2.md §3) and compared;
  RC segmentation: FIRST/MIDDLE carry exactly PMTU, LAST 1..PMTU, ONLY <= PMTU;
  opcode sequence per QP: FIRST (MIDDLE)* LAST, or ONLY; no FIRST/ONLY inside a message;
  UD SEND_ONLY only as connection management: to QP 1 from QP 1 with the GSI Q_Key 0x80010000, one 256-byte MAD
  of base version 1, the CM class (7) version 2, and a CM attribute (counted per direction: REQ, REP, RTU, ...;
  a MAD whose attribute and transaction ID the same direction already sent is counted as retransmitted, and
  with --cm-retransmitted every direction that carries CM MADs must have retransmitted one);
  READ responses likewise (FIRST/MIDDLE exactly PMTU, LAST 1..PMTU, ONLY <= PMTU, in sequence).
Per direction (reported; hard errors where stated):
  request PSNs consecutive, a repeated or earlier PSN is counted as a retransmission (a READ request
  takes one PSN per response packet its DMA length needs);
  READ response PSNs within the PSNs their READ requests took; an earlier one is a retransmission;
  AckReq on every LAST/ONLY (hard error if missing: rxe's requester sets it, and uroce must too);
  ACK PSN = the PSN of a request packet seen, MSN non-decreasing, NAK and RNR NAK syndromes counted;
  with --size/--iters: the number of messages and their length (sum of payloads) per direction, READ
  responses counting as the responder's messages; messages in both directions (a ping-pong), or with
  --one-way in exactly one (a bandwidth test).
"""
import argparse
import struct
import sys
import zlib
from collections import Counter, defaultdict

OPCODES = {
    0x00: ("SEND_FIRST", 0), 0x01: ("SEND_MIDDLE", 0), 0x02: ("SEND_LAST", 0), 0x03: ("SEND_LAST_IMM", 4),
    0x04: ("SEND_ONLY", 0), 0x05: ("SEND_ONLY_IMM", 4), 0x06: ("WRITE_FIRST", 16), 0x07: ("WRITE_MIDDLE", 0),
    0x08: ("WRITE_LAST", 0), 0x09: ("WRITE_LAST_IMM", 4), 0x0A: ("WRITE_ONLY", 16), 0x0B: ("WRITE_ONLY_IMM", 20),
    0x0C: ("READ_REQUEST", 16), 0x0D: ("READ_RESP_FIRST", 4), 0x0E: ("READ_RESP_MIDDLE", 0),
    0x0F: ("READ_RESP_LAST", 4), 0x10: ("READ_RESP_ONLY", 4), 0x11: ("ACK", 4), 0x12: ("ATOMIC_ACK", 12),
    0x13: ("CMP_SWAP", 28), 0x14: ("FETCH_ADD", 28), 0x16: ("SEND_LAST_INV", 4), 0x17: ("SEND_ONLY_INV", 4),
    0x64: ("UD_SEND_ONLY", 8),
}
UD_SEND_ONLY = 0x64
GSI_QKEY = 0x80010000
CM_ATTRIBUTES = {0x0001: "ClassPortInfo", 0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU",
                 0x0015: "DREQ", 0x0016: "DREP"}
FIRST = {0x00, 0x06, 0x0D}
MIDDLE = {0x01, 0x07, 0x0E}
LAST = {0x02, 0x03, 0x08, 0x09, 0x0F, 0x16}
ONLY = {0x04, 0x05, 0x0A, 0x0B, 0x10, 0x17}
REQUEST = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x13, 0x14, 0x16, 0x17}
READ_REQUEST = 0x0C
READ_RESPONSE = {0x0D, 0x0E, 0x0F, 0x10}


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        raise SystemExit(f"{path}: not a pcap file (pcapng is not supported)")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}, expected Ethernet")
    subsecond = 1e-9 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1e-6
    off = 24
    n = 0
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        n += 1
        yield n, sec + frac * subsecond, data[off:off + incl], orig
        off += incl


def ip_checksum(hdr):
    s = 0
    for i in range(0, len(hdr), 2):
        s += (hdr[i] << 8) | hdr[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def icrc(ip, udp_and_rest):
    ip = bytearray(ip)
    ip[1] = 0xFF          # TOS
    ip[8] = 0xFF          # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    rest = bytearray(udp_and_rest)
    rest[6:8] = b"\xff\xff"  # UDP checksum
    rest[8 + 4] = 0xFF       # BTH byte 4 (FECN/BECN/reserved)
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(rest)) & 0xFFFFFFFF


def psn_diff(a, b):
    d = (a - b) & 0xFFFFFF
    return d - 0x1000000 if d & 0x800000 else d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--pmtu", type=int, required=True)
    ap.add_argument("--size", type=int, default=0, help="expected SEND message size")
    ap.add_argument("--iters", type=int, default=0, help="expected messages per direction")
    ap.add_argument("--one-way", action="store_true", help="messages flow in one direction only (bandwidth tests)")
    ap.add_argument("--cm-connection", type=int, default=0,
                    help="count only the RC traffic of the K-th connection the CM made, i.e. the K-th REQ a REP "
                         "answered (the QPNs of both); every packet is still checked on its own")
    ap.add_argument("--cm-retransmitted", action="store_true",
                    help="every direction that carries CM MADs retransmitted one (the same attribute and TID again)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    # --cm-connection: each REQ's QPN by its local communication ID, the REQs a REP answered in order, and the two
    # QPNs of the chosen connection.
    req_qpns = {}  # a REQ's local communication ID -> its QPN
    qp_conn = {}   # a QPN -> the label of the CM connection it belongs to
    replied = []   # the communication IDs of REQs a REP answered, in order
    selected_qpns = set() if a.cm_connection else None
    other_connections = 0

    errors = []
    roce = 0
    other = Counter()
    dirs = defaultdict(lambda: {
        "ops": Counter(), "next_psn": None, "first_psn": None, "most_in_flight": 0, "retrans": 0, "in_msg": None, "msg_len": 0, "msgs": [],
        "req_psns": set(), "replay_psn": None, "replay_msg": None, "acks": 0, "naks": Counter(), "rnr": 0, "last_msn": None, "missing_ackreq": 0,
        "ttl": set(), "sport": set(), "df": set(), "tos": set(), "credits": Counter(),
        "read_psns": set(), "next_resp_psn": None, "in_resp": None, "resp_len": 0, "resp_psns": [],
        "resp_retrans": 0, "cm": Counter(), "cm_tids": set(), "cm_retrans": Counter(),
    })

    def err(n, what):
        errors.append(f"frame {n}: {what}")

    def check_sequence(n, name, opcode, d, key):
        """FIRST (MIDDLE)* LAST or ONLY; d[key] is the message in progress (None: between messages)."""
        if opcode in FIRST or opcode in ONLY:
            if d[key] is not None:
                err(n, f"{name} inside a message started by {d[key]}")
            d[key] = name if opcode in FIRST else None
        elif opcode in MIDDLE or opcode in LAST:
            if d[key] is None:
                err(n, f"{name} outside a message")
            d[key] = None if opcode in LAST else d[key] or name

    timeline = []  # (frame, time, src, what): what is "new" (a request PSN not sent before) or "other"
    for n, when, frame, orig in read_pcap(a.pcap):
        if len(frame) < 14:
            continue
        etype = struct.unpack("!H", frame[12:14])[0]
        if etype != 0x0800:
            other["arp" if etype == 0x0806 else hex(etype)] += 1
            continue
        ip = frame[14:34]
        if len(ip) < 20 or ip[9] != 17:
            other["ipv4 non-udp"] += 1
            continue
        udp = frame[34:42]
        dport = struct.unpack("!H", udp[2:4])[0]
        if dport != 4791:
            other["udp other"] += 1
            continue
        roce += 1
        if len(frame) < orig:
            err(n, f"truncated capture ({len(frame)} of {orig} bytes)")
            continue
        if ip[0] != 0x45:
            err(n, f"IPv4 version/IHL 0x{ip[0]:02x}")
        if ip_checksum(ip) != 0:
            err(n, "bad IPv4 header checksum")
        total = struct.unpack("!H", ip[2:4])[0]
        ulen = struct.unpack("!H", udp[4:6])[0]
        if total != 20 + ulen:
            err(n, f"IP total length {total} != 20 + UDP length {ulen}")
        if 14 + total > len(frame):
            err(n, f"frame of {len(frame)} bytes cannot hold IP total length {total}")
            continue
        src = ".".join(map(str, ip[12:16]))
        dst = ".".join(map(str, ip[16:20]))
        seg = frame[34:14 + total]  # UDP header .. ICRC
        bth = seg[8:20]
        if len(seg) < 8 + 12 + 4:
            err(n, f"UDP length {ulen} too short for a BTH and ICRC")
            continue
        opcode = bth[0]
        if opcode not in OPCODES:
            err(n, f"unknown opcode 0x{opcode:02x}")
            continue
        name, ext = OPCODES[opcode]
        pad = (bth[1] >> 4) & 3
        tver = bth[1] & 0xF
        pkey = struct.unpack("!H", bth[2:4])[0]
        dqp = int.from_bytes(bth[5:8], "big")
        ackreq = bool(bth[8] & 0x80)
        psn = int.from_bytes(bth[9:12], "big")
        # Each RC connection the CM made is accounted on its own (its PSNs, messages and ACKs), found by either
        # of its QPNs; traffic of QPs the capture saw no CM exchange for shares one account per direction.
        d = dirs[(src, dst, qp_conn.get(dqp, ""))]
        d["ttl"].add(ip[8])
        d["tos"].add(ip[1])
        d["df"].add(bool(ip[6] & 0x40))
        d["sport"].add(struct.unpack("!H", udp[0:2])[0])
        if tver != 0:
            err(n, f"TVer {tver}")
        if pkey != 0xFFFF:
            err(n, f"P_Key 0x{pkey:04x}")
        hdr = 12 + ext
        if ulen < 8 + hdr + 4:
            err(n, f"UDP length {ulen} < 8 + {hdr} + 4 for {name}")
            continue
        payload = ulen - 8 - hdr - pad - 4
        if payload < 0:
            err(n, f"{name}: pad count {pad} exceeds the payload")
            continue
        body = seg[8 + hdr:len(seg) - 4]
        if any(body[len(body) - pad:]) if pad else False:
            err(n, f"{name}: non-zero pad bytes")
        if (payload + pad) % 4 != 0:
            err(n, f"{name}: payload {payload} + pad {pad} not a multiple of 4")
        want = icrc(ip, seg[:-4])
        got = struct.unpack("<I", seg[-4:])[0]
        if want != got:
            err(n, f"{name} PSN 0x{psn:06x}: ICRC {got:08x} on the wire, {want:08x} computed")
        d["ops"][name] += 1
        timeline.append([n, when, src, "other"])
        if opcode == UD_SEND_ONLY:
            qkey = int.from_bytes(seg[20:24], "big")
            src_qp = int.from_bytes(seg[25:28], "big")
            mad = bytes(body[:payload])
            if dqp != 1 or src_qp != 1 or qkey != GSI_QKEY:
                err(n, f"UD SEND from QP {src_qp} to QP {dqp} with Q_Key 0x{qkey:08x}: only the GSI QP's CM traffic "
                       "is expected")
            elif payload != 256:
                err(n, f"GSI datagram of {payload} bytes, not one 256-byte MAD")
            elif mad[0] != 1 or mad[1] != 7 or mad[2] != 2:
                err(n, f"MAD base version {mad[0]}, class 0x{mad[1]:02x} version {mad[2]}: not the CM's (1, 7, 2)")
            else:
                attribute = struct.unpack("!H", mad[16:18])[0]
                if attribute not in CM_ATTRIBUTES:
                    err(n, f"CM MAD with attribute 0x{attribute:04x}")
                else:
                    d["cm"][CM_ATTRIBUTES[attribute]] += 1
                    sent = (attribute, mad[8:16])  # the attribute and the transaction ID
                    if sent in d["cm_tids"]:
                        d["cm_retrans"][CM_ATTRIBUTES[attribute]] += 1
                    d["cm_tids"].add(sent)
                    if CM_ATTRIBUTES[attribute] == "REQ":
                        req_qpns.setdefault(mad[24:28], int.from_bytes(mad[56:59], "big"))
                    elif CM_ATTRIBUTES[attribute] == "REP" and mad[28:32] in req_qpns:
                        # A connection is made when its REQ is answered by a REP; a rejected REQ (a server not
                        # listening yet, retried) makes none.
                        if mad[28:32] not in replied:
                            replied.append(mad[28:32])
                            qpns = (req_qpns[mad[28:32]], int.from_bytes(mad[36:39], "big"))
                            for q in qpns:
                                qp_conn[q] = f" [connection {len(replied)}: QPs 0x{qpns[0]:06x}, 0x{qpns[1]:06x}]"
                            if len(replied) == a.cm_connection:
                                selected_qpns.update(qpns)
            continue
        if selected_qpns is not None and dqp not in selected_qpns:
            other_connections += 1
            continue

        if opcode in REQUEST:
            d["req_psns"].add(psn)
            d.setdefault("req_frames", []).append(n)
            if opcode in FIRST or opcode in MIDDLE:
                if payload != a.pmtu:
                    err(n, f"{name} carries {payload} bytes, PMTU is {a.pmtu}")
            elif opcode in LAST:
                if not 1 <= payload <= a.pmtu:
                    err(n, f"{name} carries {payload} bytes (1..{a.pmtu} allowed)")
            elif opcode in ONLY and payload > a.pmtu:
                err(n, f"{name} carries {payload} bytes > PMTU {a.pmtu}")
            if (opcode in LAST or opcode in ONLY) and not ackreq:
                d["missing_ackreq"] += 1
            expected = d["next_psn"]
            if expected is not None and psn_diff(psn, expected) < 0:
                # A retransmission (go-back-N, possibly from the middle of a message): check its
                # opcode sequence on its own, from an unknown starting point; count nothing twice.
                d["retrans"] += 1
                rewind = d["replay_psn"] is None or psn != d["replay_psn"]
                if not rewind:
                    check_sequence(n, name, opcode, d, "replay_msg")
                else:
                    d["replay_msg"] = name if opcode in FIRST or opcode in MIDDLE else None
                d["replay_psn"] = (psn + 1) & 0xFFFFFF
                continue
            d["replay_psn"] = None
            timeline[-1][3] = "new"
            if expected is None:
                d["first_psn"] = psn
            if expected is not None and psn != expected:
                err(n, f"{name}: PSN 0x{psn:06x}, expected 0x{expected:06x} (gap)")
            span = 1
            if opcode == READ_REQUEST:
                # One PSN per response packet (IBTA 9.7.4.1.4): the next request starts after them all.
                dma_len = int.from_bytes(seg[8 + 12 + 12:8 + 12 + 16], "big")
                span = max(1, -(-dma_len // a.pmtu))
                for k in range(span):
                    d["read_psns"].add((psn + k) & 0xFFFFFF)
                    d["req_psns"].add((psn + k) & 0xFFFFFF)
            d["next_psn"] = (psn + span) & 0xFFFFFF
            d.setdefault("sent_up_to", []).append((n, d["next_psn"]))
            check_sequence(n, name, opcode, d, "in_msg")
            if opcode in FIRST:
                d["msg_len"] = payload
            elif opcode in MIDDLE or opcode in LAST:
                d["msg_len"] += payload
                if opcode in LAST:
                    d["msgs"].append(d["msg_len"])
            elif opcode in ONLY:
                d["msgs"].append(payload)
        elif opcode in READ_RESPONSE:
            if opcode in (0x0D, 0x0E) and payload != a.pmtu:
                err(n, f"{name} carries {payload} bytes, PMTU is {a.pmtu}")
            elif opcode == 0x0F and not 1 <= payload <= a.pmtu:
                err(n, f"{name} carries {payload} bytes (1..{a.pmtu} allowed)")
            elif opcode == 0x10 and payload > a.pmtu:
                err(n, f"{name} carries {payload} bytes > PMTU {a.pmtu}")
            d["resp_psns"].append((n, psn))
            expected = d["next_resp_psn"]
            if expected is not None and psn_diff(psn, expected) < 0:
                # The requester asked again (a lost response or a timeout): a replay, counted, not rechecked.
                d["resp_retrans"] += 1
                d["in_resp"] = None
                continue
            d["next_resp_psn"] = (psn + 1) & 0xFFFFFF
            if opcode == 0x0D and d["in_resp"] is not None:
                err(n, f"{name} inside a response started by {d['in_resp']}")
            elif opcode in (0x0E, 0x0F) and d["in_resp"] is None:
                err(n, f"{name} outside a response")
            if opcode == 0x0D:
                d["in_resp"], d["resp_len"] = name, payload
            elif opcode == 0x0E and d["in_resp"] is not None:
                d["resp_len"] += payload
            elif opcode == 0x0F:
                if d["in_resp"] is not None:
                    d["msgs"].append(d["resp_len"] + payload)
                d["in_resp"] = None
            elif opcode == 0x10:
                if d["in_resp"] is not None:
                    err(n, f"{name} inside a response started by {d['in_resp']}")
                d["msgs"].append(payload)
                d["in_resp"] = None
        elif opcode == 0x11:
            syn = seg[20]
            msn = int.from_bytes(seg[21:24], "big")
            kind = (syn >> 5) & 3
            if kind == 0:
                d["acks"] += 1
                d["credits"][syn & 0x1F] += 1
            elif kind == 1:
                d["rnr"] += 1
            elif kind == 3:
                d["naks"][syn & 0x1F] += 1
            else:
                err(n, f"ACK with reserved syndrome 0x{syn:02x}")
            if d["last_msn"] is not None and psn_diff(msn, d["last_msn"]) < 0:
                err(n, f"ACK MSN went back from {d['last_msn']} to {msn}")
            d["last_msn"] = msn
            # The PSN an ACK carries must be one the peer sent (checked after the loop).
            d.setdefault("ack_psns", []).append((n, psn, kind))

    # ACK PSNs versus the request PSNs of the opposite direction; READ responses versus its READs.
    for (src, dst, conn), d in dirs.items():
        rev = dirs.get((dst, src, conn))
        for n, psn in d["resp_psns"]:
            if rev is None or psn not in rev["read_psns"]:
                err(n, f"READ response with PSN 0x{psn:06x}, which no READ request from {dst} covers")
        for n, psn, kind in d.get("ack_psns", []):
            if kind == 0 and rev is not None and psn not in rev["req_psns"]:
                err(n, f"ACK for PSN 0x{psn:06x}, which {dst} never sent")

    # The most request PSNs each direction had outstanding as this capture saw it: sent (the highest PSN so far)
    # and not yet acknowledged (by an ACK, a NAK's PSN - 1, or a READ response). Requests pass the capture point
    # after their sender sent them and ACKs before it receives them, so this never exceeds what the sender had out:
    # a sender's in-flight cap must hold here too.
    for (src, dst, conn), d in dirs.items():
        rev = dirs.get((dst, src, conn), {})
        if d.get("first_psn") is None:
            continue
        events = [(n, 0, up_to) for n, up_to in d.get("sent_up_to", [])]
        events += [(n, 1, (psn + 1) & 0xFFFFFF if kind == 0 else psn) for n, psn, kind in rev.get("ack_psns", [])]
        events += [(n, 1, (psn + 1) & 0xFFFFFF) for n, psn in rev.get("resp_psns", [])]
        sent_to = unacked = d["first_psn"]
        for _, kind, psn in sorted(events):
            if kind == 0:
                sent_to = psn
            elif psn_diff(psn, unacked) > 0:
                unacked = psn
            d["most_in_flight"] = max(d["most_in_flight"], psn_diff(sent_to, unacked))

    def first_answer(src, dst, conn, last):
        """The first frame from dst that acknowledges src's requests through PSN `last`: an ACK, or a READ
        response (which acknowledges implicitly); None if there is none."""
        rev = dirs.get((dst, src, conn), {})
        answers = [(n, psn) for n, psn, kind in rev.get("ack_psns", []) if kind == 0] + rev.get("resp_psns", [])
        return min((n for n, psn in answers if psn_diff(psn, last) >= 0), default=None)

    # Whether each direction's final request was acknowledged on the wire, and what its sender did afterwards.
    # A peer that exits once it has everything (ibv_rc_pingpong) leaves a sender whose last ACK was lost with
    # nobody to answer its retransmissions; this line tells that case apart from a request that never arrived.
    finals = {}
    for (src, dst, conn), d in dirs.items():
        rev = dirs.get((dst, src, conn))
        if d["next_psn"] is None or rev is None:
            continue
        last = (d["next_psn"] - 1) & 0xFFFFFF
        acked = first_answer(src, dst, conn, last)
        if acked is None:
            finals[(src, dst, conn)] = f"final request PSN 0x{last:06x} never acknowledged by {dst}"
        else:
            after = sum(1 for n in d.get("req_frames", []) if n > acked)
            answered = sum(1 for n, _, _ in rev.get("ack_psns", []) if n > acked)
            finals[(src, dst, conn)] = (f"final request PSN 0x{last:06x} acknowledged by {dst} in frame {acked}; "
                                  f"{after} request packets after it, {answered} ACKs/NAKs after it")

    # The longest silence on the wire, and whether anything was left unacknowledged when it began. A silence with
    # nothing outstanding that ends with a new request from one side means that side held its next request back
    # for that long (its application or stack stalled); the other side had nothing to answer.
    silence_line = None
    silence = max(zip(timeline, timeline[1:]), key=lambda pair: pair[1][1] - pair[0][1], default=None)
    if silence is not None:
        start, end = silence
        pending = []
        for (src, dst, conn), d in dirs.items():
            sent = [up_to for n, up_to in d.get("sent_up_to", []) if n <= start[0]]
            if not sent:
                continue
            last = (sent[-1] - 1) & 0xFFFFFF
            answered = first_answer(src, dst, conn, last)
            if answered is None or answered > start[0]:
                pending.append(f"{src}'s request PSN 0x{last:06x}")
        then = (f"then {end[2]} sent a new request (frame {end[0]})" if end[3] == "new"
                else f"then {end[2]} sent frame {end[0]}")
        silence_line = (f"  longest silence: {end[1] - start[1]:.3f} s after frame {start[0]}; at its start "
                        f"{'nothing was unacknowledged' if not pending else 'unacknowledged: ' + ', '.join(pending)}; "
                        f"{then}")

    ok = not errors
    print(f"{a.pcap}: {roce} RoCE packets, other: {dict(other) or 'none'}")
    if a.cm_connection:
        print(f"  counted: the RC traffic of CM connection {a.cm_connection} (QPNs "
              f"{', '.join(f'0x{q:06x}' for q in sorted(selected_qpns)) or 'none'}); "
              f"{other_connections} packets of other connections checked on their own only")
        if len(selected_qpns) != 2:
            errors.append(f"CM connection {a.cm_connection} was not made (fewer REQs answered by a REP)")
    for (src, dst, conn), d in sorted(dirs.items()):
        if not d["ops"]:
            continue  # made by a lookup only
        ops = ", ".join(f"{k} {v}" for k, v in sorted(d["ops"].items()))
        line = (f"  {src} -> {dst}{conn}: {ops}; messages {len(d['msgs'])}"
                f"{' of ' + str(sorted(set(d['msgs']))) + ' bytes' if d['msgs'] else ''}; "
                f"retransmitted {d['retrans'] + d['resp_retrans']}; ACKs {d['acks']} (credit codes {dict(d['credits'])}), "
                f"NAKs {sum(d['naks'].values())}{' (codes ' + str(dict(d['naks'])) + ')' if d['naks'] else ''}, RNR NAKs {d['rnr']}; TTL {sorted(d['ttl'])}, TOS {sorted(d['tos'])}, "
                f"DF {sorted(d['df'])}, UDP sport {sorted(hex(s) for s in d['sport'])}"
                f"{'; CM ' + ', '.join(f'{k} {v}' for k, v in sorted(d['cm'].items())) if d['cm'] else ''}"
                f"{' (retransmitted ' + ', '.join(f'{k} {v}' for k, v in sorted(d['cm_retrans'].items())) + ')' if d['cm_retrans'] else ''}"
                f"{'; most in flight ' + str(d['most_in_flight']) if d.get('first_psn') is not None else ''}")
        print(line)
        if (src, dst, conn) in finals:
            print(f"  {src} -> {dst}{conn}: {finals[(src, dst, conn)]}")
        if d["missing_ackreq"]:
            errors.append(f"{src} -> {dst}{conn}: {d['missing_ackreq']} LAST/ONLY request packets without AckReq")
        if a.size and d["msgs"] and any(m != a.size for m in d["msgs"]):
            errors.append(f"{src} -> {dst}{conn}: message sizes {sorted(set(d['msgs']))}, expected {a.size}")
        if a.iters and d["msgs"] and len(d["msgs"]) != a.iters:
            errors.append(f"{src} -> {dst}{conn}: {len(d['msgs'])} messages, expected {a.iters}")
    if silence_line:
        print(silence_line)
    cm_total = Counter()
    for d in dirs.values():
        cm_total.update(d["cm"])
    if cm_total:
        print(f"  CM MADs: {sum(cm_total.values())} ({', '.join(f'{k} {v}' for k, v in sorted(cm_total.items()))}); "
              f"retransmitted {sum(sum(d['cm_retrans'].values()) for d in dirs.values())}")
    if a.cm_retransmitted:
        if not cm_total:
            errors.append("no CM MADs, so none retransmitted")
        for (src, dst, conn), d in sorted(dirs.items()):
            if d["cm"] and not d["cm_retrans"]:
                errors.append(f"{src} -> {dst}: no CM MAD was retransmitted (the same attribute and TID again)")
    with_messages = sum(1 for d in dirs.values() if d["msgs"])
    if a.iters and not a.one_way and with_messages != 2:
        errors.append("expected messages in both directions")
    if a.iters and a.one_way and with_messages != 1:
        errors.append(f"expected messages in one direction, found them in {with_messages}")
    for e in errors[:50]:
        print("  ERROR " + e)
    if len(errors) > 50:
        print(f"  ... {len(errors) - 50} more errors")
    print("capture check: " + ("ok" if not errors else f"FAILED ({len(errors)} errors)"))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
