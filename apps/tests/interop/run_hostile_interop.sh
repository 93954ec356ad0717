#!/usr/bin/env bash
# uroce's RC transport under attack on a real wire (issue #13): an attacker inside the rxe-peer guest
# (rxe_attacker.py: python3's standard library, an AF_PACKET socket on the guest's eth0) forges frames against a
# live connection between the guest's ibv_rc_pingpong (rdma_rxe, client) and uroce-pingpong (server): NAKs
# outside uroce's response window, requests from a spoofed source and over IPv6, and requests with a wrong
# P_Key, a UC opcode or a bad ICRC, each at the PSN that would hurt (rxe_attacker.py says how). The in-process
# counterpart is dataplane/tests/hostile_test.cc. Topology and harness handling: harness.sh.
#
# usage: run_hostile_interop.sh UROCE_PINGPONG
#
# Passes only if
#   - the ping-pong completes all its iterations with no error on either side (uroce checks every byte it
#     receives, so a forged SEND it took would be a data error; a forged NAK it took would fail the connection),
#   - uroce's counters, read over its DPDK telemetry socket while the attacker holds the ping-pong still, show
#     every forgery dropped under its own name and none acted upon (hostile_checks.py counters),
#   - the capture on the guest's tap holds every forged frame, and without them (matched byte for byte) passes
#     the full check of run_pingpong_interop.sh's cases: check_capture.py and tshark (hostile_checks.py strip).
#
# Needs root and the rxe-peer harness (built on first use); exits 77 (skipped) where it cannot run, as the other
# interop scripts. Environment, besides harness.sh's:
#   HOSTILE_ITERS  ping-pong iterations (default 2000, about 30 s under TCG on a busy 2-core host: the ping-pong
#                  must outlast the attack, which takes a few dozen iterations; the attacker holds it still while
#                  the host reads the counters, so that takes no race)
set -euo pipefail

PINGPONG=$(readlink -f "${1:?usage: run_hostile_interop.sh UROCE_PINGPONG}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
HERE=$HARNESS_PROJECT/apps/tests/interop
ITERS=${HOSTILE_ITERS:-2000}
SIZE=64
PMTU=1024
NAME=hostile
# The attacker and its files reach the guest through the harness's 9p share, /mnt/share there.
SHARE_DIR=$(dirname "$HARNESS_STATUS_FILE")/hostile
GUEST_DIR=/mnt/share/hostile
# uroce's own EAL file prefix, so that its telemetry socket is found without guessing a pid.
PREFIX=uroce-hostile-$$
TELEMETRY=/var/run/dpdk/$PREFIX/dpdk_telemetry.v2

harness_require
[ -x "$PINGPONG" ] || { log "no uroce-pingpong at $PINGPONG"; exit 1; }

# Besides harness_cleanup: a guest job cut short by an interruption lets the ping-pong go on if it was paused
# and ends the attacker (which ends its ping-pong: rxe retries forever, so a stray one would keep sending).
guest_job=""
hostile_cleanup() {
  if [ -n "$guest_job" ] && [ -d "$SHARE_DIR" ] && [ ! -e "$SHARE_DIR/finished" ]; then
    touch "$SHARE_DIR/resume"
    "$TOOLS/exec.sh" g1 --timeout 30 "kill \$(cat $GUEST_DIR/attacker.pid)" >/dev/null 2>&1 || true
  fi
  rm -rf "/var/run/dpdk/$PREFIX"
}
trap 'hostile_cleanup; harness_cleanup' EXIT

# Waits until the attacker has paused the ping-pong; fails when uroce has exited, the attacker has finished
# without pausing, or after $1 seconds.
wait_for_pause() {
  local end=$((SECONDS + $1))
  until [ -e "$SHARE_DIR/paused" ]; do
    [ -e "$SHARE_DIR/finished" ] && { log "  the attacker finished without pausing the ping-pong"; return 1; }
    kill -0 "$uroce_pid" 2>/dev/null || { log "  uroce exited before the attack was over"; return 1; }
    [ "$SECONDS" -lt "$end" ] || { log "  no pause within $1 s"; return 1; }
    sleep 0.2
  done
}

run_attack() {
  local ulog="$OUT/$NAME.uroce.log" glog="$OUT/$NAME.guest.log" pcap="$OUT/$NAME.pcap"
  local urc=0 grc=0 krc=0 src=0 crc=0 notes="" t0=$SECONDS
  # Generous: under TCG a ping-pong iteration takes a few ms, and the host may be busy.
  local limit=$((300 + ITERS / 20))
  log "case $NAME: ibv_rc_pingpong (rxe, client) x$ITERS, size $SIZE, PMTU $PMTU, uroce-pingpong server; attacker in g1"
  rm -rf "$SHARE_DIR"
  mkdir -p "$SHARE_DIR"
  cp "$HERE/rxe_attacker.py" "$SHARE_DIR/"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  # As run_pingpong_interop.sh's server cases: --strict checks every received byte; ACK timeout 18 rides out
  # a TCG guest that stalls on a busy host.
  ip netns exec "$NS" timeout "$limit" "$PINGPONG" "${UROCE_CONFIG_ARGS[@]}" --set "eal.file_prefix=$PREFIX" \
    --bind "$HOST_TCP" -m "$PMTU" -s "$SIZE" -n "$ITERS" -c --strict --timeout 60 --ack-timeout 18 >"$ulog" 2>&1 &
  uroce_pid=$!
  wait_for_output "$ulog" 'listening on TCP' "$uroce_pid"
  guest_job=$("$TOOLS/exec.sh" g1 --bg "cd $GUEST_DIR && python3 rxe_attacker.py --victim $UROCE_IP --dir . \
    --timeout $limit -- ibv_rc_pingpong -d rxe0 -g \$RXE_GID_INDEX -m $PMTU -s $SIZE -n $ITERS -c $HOST_TCP") ||
    log "  could not start the attacker in g1"
  if wait_for_pause "$limit"; then
    log "  ping-pong paused by the attacker after $((SECONDS - t0)) s: reading uroce's counters"
    python3 "$HERE/hostile_checks.py" counters "$TELEMETRY" "$SHARE_DIR/injected.json" "$OUT/$NAME.counters.json" \
      >"$OUT/$NAME.counters.log" 2>&1 || krc=$?
    sed 's/^/    /' "$OUT/$NAME.counters.log"
    touch "$SHARE_DIR/resume"
  else
    krc=1
    notes+=" counters:unread"
  fi
  "$TOOLS/exec.sh" g1 --wait "$guest_job" --timeout "$limit" >"$glog" 2>&1 || grc=$?
  wait "$uroce_pid" || urc=$?
  uroce_pid=""
  # tcpdump lags behind on a busy host and drops what it has not written when stopped: when uroce completed
  # every SEND, stop it only once it has written rxe's ACK of the last one.
  local first_psn
  first_psn=$(sed -n 's/^  local address:.* PSN 0x\([0-9a-f]*\),.*/\1/p' "$ulog")
  if [ "$urc" = 0 ] && [ -n "$first_psn" ]; then
    python3 "$HERE/hostile_checks.py" wait-ack "$pcap" "$GUEST" "$UROCE_IP" $(((0x$first_psn + ITERS - 1) & 0xFFFFFF)) 120 ||
      log "  the capture never showed the last ACK"
  fi
  "$TOOLS/capture.sh" stop >>"$OUT/capture.log" 2>&1 || true
  # The guest log: the attacker's account, then the ping-pong's output.
  { echo "--- ibv_rc_pingpong:"; cat "$SHARE_DIR/pingpong.log" 2>/dev/null; } >>"$glog"
  cp "$SHARE_DIR/forged.hex" "$OUT/$NAME.forged.hex" 2>/dev/null || true
  # How many of the six forged requests beat rxe's own request with their PSN (the rest were duplicates for
  # uroce: dropped all the same, but a weaker attack).
  local at_expected
  at_expected=$(sed -n 's/.*"at_expected_psn": \([0-9]*\).*/\1/p' "$SHARE_DIR/injected.json" 2>/dev/null)
  notes+=" at-expected-PSN:${at_expected:-?}/6"
  # ibv_rc_pingpong -c reports bad data only as a line of output, with exit status 0.
  if grep -q 'invalid data' "$glog"; then grc=99; notes+=" guest:invalid-data"; fi
  grep -q "^$ITERS iters in" "$glog" || { [ "$grc" = 0 ] && grc=98; }
  # The forged frames went out; everything else on the wire (the real peers' frames) gets the full check.
  python3 "$HERE/hostile_checks.py" strip "$pcap" "$OUT/$NAME.forged.hex" "$OUT/$NAME.real.pcap" \
    >"$OUT/$NAME.strip.log" 2>&1 || src=$?
  notes+=" forged:$(grep -o '[0-9]* of the attacker.s [0-9]* frames' "$OUT/$NAME.strip.log" | awk '{print $1 "/" $5}')"
  check_capture "$OUT/$NAME.real.pcap" "$PMTU" "$NAME" --size "$SIZE" --iters "$ITERS" || crc=$?
  notes+=$CHECK_NOTES
  local verdict=PASS
  if [ "$urc" != 0 ] || [ "$grc" != 0 ] || [ "$krc" != 0 ] || [ "$src" != 0 ] || [ "$crc" != 0 ]; then
    verdict=FAIL
    report_failure "$NAME" "uroce exit $urc, guest exit $grc, counters $krc, forged frames in capture $src, capture check $crc" || true
    notes+=$FAILURE_NOTES
  fi
  summary+=("$(printf '%-4s attacker vs ibv_rc_pingpong x%s -> uroce server: uroce %s, guest %s, counters %s, capture %s, %s s;%s' \
    "$verdict" "$ITERS" "$urc" "$grc" "$([ "$krc" = 0 ] && echo ok || echo FAIL)" \
    "$([ "$src$crc" = 00 ] && echo ok || echo FAIL)" "$((SECONDS - t0))" "$notes")")
  log "  ${summary[-1]}"
}

# run_attack collects every status itself (set -e does not reach into a function called before ||).
if harness_for "$PMTU"; then
  harness_case run_attack || { failures=$((failures + 1)); summary+=("FAIL $NAME: could not start (see above)"); }
else
  failures=$((failures + 1))
  summary+=("FAIL harness for PMTU $PMTU did not come up")
fi
harness_summary "uroce under attack from an rdma_rxe guest (issue #13)"
