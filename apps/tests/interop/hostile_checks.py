#!/usr/bin/env python3
"""The host side of run_hostile_interop.sh (python3's standard library only).

  hostile_checks.py counters TELEMETRY_SOCKET INJECTED.json OUT.json
      Reads uroce's engine 0 counters over its DPDK telemetry socket (/uroce/engine,0; dataplane/telemetry.cc),
      saves them in OUT.json, and checks that every forgery rxe_attacker.py counted in INJECTED.json was dropped
      under its own counter, and that none was acted upon. Exit status 0 only if every check holds.

  hostile_checks.py strip CAPTURE.pcap FORGED.hex OUT.pcap
      Writes the capture without the attacker's frames (FORGED.hex, one frame per line, as it sent them: matched
      byte for byte), so that what remains, the real peers' frames and nothing else, can get the full capture
      check. Exit status 0 only if every forged frame is in the capture (it went on the wire).

  hostile_checks.py wait-ack CAPTURE.pcap FROM TO PSN SECONDS
      Waits until the capture, still being written, holds an ACK from FROM to TO of PSN or a later one: the
      ping-pong's last frame. tcpdump lags behind on a busy host, and stopping it drops what it has not written
      yet. Exit status 1 if it is not there after SECONDS.
"""
import json
import socket
import struct
import sys
import time

ENGINE = "/uroce/engine,0"  # the interop configuration runs one engine


def read_counters(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(path)
        s.recv(16384)  # the server's greeting: version, pid, max_output_len
        s.send(ENGINE.encode())
        return json.loads(s.recv(1 << 20))["/uroce/engine"]


def expectations(injected):
    """(counter, relation, value, why) for what the attacker sent."""
    def n(kind):
        return injected.get(kind, 0)

    return [
        # >=: a duplicate ACK from rxe after a retransmission by uroce is out of the window too.
        ("req_response_out_of_window", ">=", n("nak"), "forged NAKs outside [oldest unacked, next)"),
        ("rx_path_mismatch", "==", n("spoofed_source") + n("ipv6"), "requests from 198.18.0.99, and over IPv6"),
        ("rx_pkey_mismatch", "==", n("pkey"), "request with P_Key 0x8001"),
        ("rx_wrong_transport", "==", n("uc_opcode"), "UC opcode at an RC QP"),
        ("rx_icrc_encapsulated", "==", n("bad_icrc"), "request with a bad ICRC"),
        # A forgery acted upon would have moved one of these.
        ("req_remote_access_errors", "==", 0, "a forged NAK taken"),
        ("resp_remote_access_errors", "==", 0, "a forged WRITE taken"),
        ("rx_qp_not_ready", "==", 0, "the QP left RTS"),
        # Forgeries aimed at another QPN would prove nothing.
        ("rx_unknown_qp", "==", 0, "a frame for a QPN uroce does not have"),
    ]


def check_counters(path, injected_path, out_path):
    with open(injected_path) as f:
        injected = json.load(f)
    wanted = expectations(injected)
    failed = ["no reading"]
    # The victim's counters reach telemetry when its QP goes idle, or every millisecond while it is busy: a few
    # readings absorb that lag.
    for _ in range(20):
        try:
            counters = read_counters(path)
        except OSError as e:
            print(f"counters: FAILED (no answer from uroce's telemetry socket {path}: {e})")
            return 1
        failed = []
        for name, relation, value, why in wanted:
            got = counters.get(name)
            ok = got is not None and (got >= value if relation == ">=" else got == value)
            if not ok:
                failed.append(name)
        if not failed:
            break
        time.sleep(0.5)
    with open(out_path, "w") as f:
        json.dump(counters, f, indent=1)
    print(f"injected: {json.dumps(injected, sort_keys=True)}")
    for name, relation, value, why in wanted:
        got = counters.get(name, "missing")
        print(f"  {'FAIL' if name in failed else 'ok  '} {name} = {got} (expected {relation} {value}: {why})")
    print("counters: " + ("ok" if not failed else f"FAILED ({', '.join(failed)})"))
    return 0 if not failed else 1


def pcap_records(data):
    if len(data) < 24:
        return
    endian = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        if off + 16 + incl > len(data):
            return  # a record tcpdump is still writing
        yield data[off:off + 16 + incl], data[off + 16:off + 16 + incl]
        off += 16 + incl


def strip(capture, forged_path, out_path):
    with open(capture, "rb") as f:
        data = f.read()
    with open(forged_path) as f:
        forged = [bytes.fromhex(line) for line in f if line.strip()]
    missing = list(forged)
    kept = removed = 0
    with open(out_path, "wb") as out:
        out.write(data[:24])
        for record, frame in pcap_records(data):
            if frame in missing:
                missing.remove(frame)
                removed += 1
            else:
                out.write(record)
                kept += 1
    print(f"{capture}: {removed} of the attacker's {len(forged)} frames removed, {kept} frames kept in {out_path}")
    for frame in missing:
        print(f"  ERROR forged frame not in the capture: {frame.hex()}")
    return 0 if not missing else 1


def wait_ack(capture, src, dst, psn, seconds):
    src, dst, psn = socket.inet_aton(src), socket.inet_aton(dst), int(psn)
    deadline = time.monotonic() + float(seconds)
    while True:
        with open(capture, "rb") as f:
            data = f.read()
        for _, frame in pcap_records(data):
            if (len(frame) >= 58 and frame[12:14] == b"\x08\x00" and frame[26:30] == src and frame[30:34] == dst and
                    frame[42] == 0x11 and frame[54] >> 5 == 0 and
                    (int.from_bytes(frame[51:54], "big") - psn) & 0x800000 == 0):
                return 0
        if time.monotonic() > deadline:
            print(f"{capture}: no ACK of PSN 0x{psn:06x} or later after {seconds} s")
            return 1
        time.sleep(0.5)


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "wait-ack":
        return wait_ack(*sys.argv[2:])
    if len(sys.argv) == 5 and sys.argv[1] == "counters":
        return check_counters(*sys.argv[2:])
    if len(sys.argv) == 5 and sys.argv[1] == "strip":
        return strip(*sys.argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
