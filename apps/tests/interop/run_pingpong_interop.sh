#!/usr/bin/env bash
# uroce's RC transport against Linux Soft-RoCE (rdma_rxe) on the wire: rc_pingpong (uroce) and
# ibv_rc_pingpong (rdma-core, in a QEMU guest of the rxe-peer harness) in both roles, at RoCE path
# MTU 1024 and 4096 (message sizes around and above the PMTU), plus recovery cases at PMTU 1024 (RNR
# NAKs; loss, duplication and reordering injected on uroce's receive path), with every packet captured
# on the guest's tap and checked (check_capture.py, and tshark when installed).
#
# usage: run_pingpong_interop.sh RC_PINGPONG [CHECK_CAPTURE_PY]
#
# Needs root, and the rxe-peer harness (shared/tools/rxe-peer; built with its build.sh, which this
# script runs if needed: idempotent, about 5 min the first time). Topology, all inside the harness's
# network namespace (rxepeer) and 198.18.0.0/24:
#
#   guest g1 198.18.0.2 (rxe0) -- rxetap1 --+
#                                             rxebr0 198.18.0.1 (Linux: the TCP exchange)
#   uroce 198.18.0.100 -- uroce0 == uroce0br -+
#
# uroce0 is a veth whose bridge end is enslaved to rxebr0; uroce drives it with net_af_packet and
# answers ARP for 198.18.0.100 itself (uroce0 has no address and ARP off, so the namespace's kernel
# never answers for it). The TCP exchange of ibv_rc_pingpong runs between the guest and a kernel
# socket of the namespace (198.18.0.1); the RoCE GID uroce announces is ::ffff:198.18.0.100.
#
# Environment:
#   RXE_PEER_TOOLS      the harness (default: <project>/../shared/tools/rxe-peer)
#   INTEROP_OUT         where logs and captures go (default: a new /tmp/uroce-interop.XXXXXX)
#   INTEROP_ITERS       ping-pong iterations per case (default 200)
#   INTEROP_PMTUS       path MTUs to test (default "1024 4096"; 4096 restarts the guest with
#                       RXE_PEER_MTU=4200)
#   INTEROP_EXTRA=0     skip the recovery cases (RNR NAKs, injected loss/duplication/reordering)
#   INTEROP_KEEP_HARNESS=1  leave the harness running at the end even if this script started it
#   INTEROP_UROCE_ARGS  extra rc_pingpong options for every case (e.g. "--ack-timeout 16": a slower
#                       local ACK timeout for uroce; the guest's ibv_rc_pingpong always uses 14/7)
#
# A harness that was already running with the right MTU is reused and left running; one this script
# started (or restarted for another MTU) is stopped at the end. Exit status 0 only if every case
# passed: both programs exit 0, no data errors, and the capture check passes.
set -uo pipefail

RC_PINGPONG=$(readlink -f "${1:?usage: run_pingpong_interop.sh RC_PINGPONG [CHECK_CAPTURE_PY]}")
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=${2:-$HERE/check_capture.py}
PROJECT=$(cd "$HERE/../../.." && pwd)
TOOLS=${RXE_PEER_TOOLS:-$PROJECT/../shared/tools/rxe-peer}
ITERS=${INTEROP_ITERS:-200}
PMTUS=${INTEROP_PMTUS:-1024 4096}
OUT=${INTEROP_OUT:-$(mktemp -d /tmp/uroce-interop.XXXXXX)}
NS=rxepeer
BR=rxebr0
HOST_TCP=198.18.0.1
GUEST=198.18.0.2
UROCE_IP=198.18.0.100
STATUS_FILE=${RXE_PEER_DIR:-/var/tmp/rxe-peer}/run/g1/share/status

mkdir -p "$OUT"
log() { printf '[interop %s] %s\n' "$(date +%T)" "$*"; }
[ "$(id -u)" = 0 ] || { log "needs root"; exit 77; }
[ -x "$RC_PINGPONG" ] || { log "no rc_pingpong at $RC_PINGPONG"; exit 1; }
[ -x "$TOOLS/start.sh" ] || { log "no rxe-peer harness at $TOOLS"; exit 77; }
TSHARK=$(command -v tshark || true)

started_harness=0
summary=()
failures=0
uroce_pid=""

cleanup() {
  if [ -n "$uroce_pid" ] && kill -0 "$uroce_pid" 2>/dev/null; then kill "$uroce_pid" 2>/dev/null; wait "$uroce_pid" 2>/dev/null; fi
  "$TOOLS/capture.sh" stop >/dev/null 2>&1 || true
  ip -n "$NS" link del uroce0 >/dev/null 2>&1 || true
  if [ "$started_harness" = 1 ] && [ "${INTEROP_KEEP_HARNESS:-0}" != 1 ]; then
    log "stopping the harness"
    "$TOOLS/stop.sh" >"$OUT/stop.log" 2>&1 || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

harness_mtu() {  # the guest's rxe active MTU, or empty when the harness is not up
  ip netns list 2>/dev/null | grep -qw "$NS" || return 0
  grep -q '^READY' "$STATUS_FILE" 2>/dev/null || return 0
  sed -n 's/.*active_mtu=\([0-9]*\).*/\1/p' "$STATUS_FILE"
}

# Brings the harness up with guest g1 at an rxe active MTU that carries `pmtu`.
harness_for() {
  local pmtu=$1 link_mtu=1500 want=1024 have
  if [ "$pmtu" -gt 1024 ]; then link_mtu=4200; want=4096; fi
  have=$(harness_mtu)
  if [ -n "$have" ] && [ "$have" -ge "$want" ] && { [ "$want" = 4096 ] || [ "$have" = 1024 ]; }; then
    log "harness up, rxe active MTU $have: reusing it"
  else
    if [ -n "$(ip netns list 2>/dev/null | grep -w "$NS")" ]; then
      log "harness up with rxe MTU ${have:-?}: restarting it with RXE_PEER_MTU=$link_mtu"
      ip -n "$NS" link del uroce0 >/dev/null 2>&1 || true
      "$TOOLS/stop.sh" >>"$OUT/stop.log" 2>&1 || true
    fi
    log "building (if needed) and starting the harness: RXE_PEER_MTU=$link_mtu start.sh 1"
    local t0=$SECONDS
    "$TOOLS/build.sh" >"$OUT/build.log" 2>&1 || { log "build.sh failed (see $OUT/build.log)"; return 1; }
    RXE_PEER_MTU=$link_mtu "$TOOLS/start.sh" 1 >"$OUT/start-$link_mtu.log" 2>&1 ||
      { log "start.sh failed (see $OUT/start-$link_mtu.log)"; tail -5 "$OUT/start-$link_mtu.log"; return 1; }
    started_harness=1
    log "harness ready after $((SECONDS - t0)) s: $(cat "$STATUS_FILE")"
  fi
  setup_veth
}

setup_veth() {
  ip -n "$NS" link del uroce0 >/dev/null 2>&1 || true
  # Pin the bridge's MAC first: enslaving a port with a lower MAC would otherwise change it under
  # the guest's ARP entry for 198.18.0.1.
  local brmac
  brmac=$(ip -n "$NS" -br link show "$BR" | awk '{print $3}')
  ip -n "$NS" link set "$BR" address "$brmac"
  ip -n "$NS" link add uroce0 mtu 4200 type veth peer name uroce0br mtu 4200 &&
    ip -n "$NS" link set uroce0br master "$BR" &&
    ip -n "$NS" link set uroce0 arp off &&
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.uroce0.disable_ipv6=1 &&
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.uroce0br.disable_ipv6=1 &&
    ip -n "$NS" link set uroce0 up && ip -n "$NS" link set uroce0br up || { log "veth setup failed"; return 1; }
  # Forget the uroce MAC a previous run (another QP, same IP) may have left in the guest: ARP again.
  "$TOOLS/exec.sh" g1 "ip neigh flush to $UROCE_IP" >/dev/null 2>&1 || true
}

# One case: role of uroce (server|client), path MTU, message size, iterations, [label, extra
# rc_pingpong options].
run_case() {
  local role=$1 pmtu=$2 size=$3 iters=$4 label=${5:-} extra=${6:-}
  local name="uroce-$role-m$pmtu-s$size${label:+-$label}"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  local urc=0 grc=0 crc=0 trc=0 notes=""
  local guest_cmd="ibv_rc_pingpong -d rxe0 -g \$RXE_GID_INDEX -m $pmtu -s $size -n $iters -c"
  local limit=$((120 + iters * size / 20000))
  log "case $name"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  if [ "$role" = server ]; then
    ip netns exec "$NS" timeout "$limit" "$RC_PINGPONG" --bind "$HOST_TCP" --ip "$UROCE_IP/24" \
      -m "$pmtu" -s "$size" -n "$iters" -c --strict --timeout 60 $extra ${INTEROP_UROCE_ARGS:-} >"$ulog" 2>&1 &
    uroce_pid=$!
    for _ in $(seq 100); do grep -q 'listening on TCP' "$ulog" 2>/dev/null && break; kill -0 "$uroce_pid" 2>/dev/null || break; sleep 0.1; done
    "$TOOLS/exec.sh" g1 --timeout "$limit" "$guest_cmd $HOST_TCP" >"$glog" 2>&1 || grc=$?
    wait "$uroce_pid" || urc=$?
    uroce_pid=""
  else
    local job
    job=$("$TOOLS/exec.sh" g1 --bg "$guest_cmd")
    ip netns exec "$NS" timeout "$limit" "$RC_PINGPONG" --ip "$UROCE_IP/24" \
      -m "$pmtu" -s "$size" -n "$iters" -c --pattern --timeout 60 $extra ${INTEROP_UROCE_ARGS:-} "$GUEST" >"$ulog" 2>&1 || urc=$?
    "$TOOLS/exec.sh" g1 --wait "$job" --timeout 60 >"$glog" 2>&1 || grc=$?
  fi
  # rxe treats retry_cnt 7 as "retry forever": an ibv_rc_pingpong whose peer is gone never ends by itself.
  if [ "$grc" = 124 ] || [ "$urc" != 0 ]; then
    "$TOOLS/exec.sh" g1 'pkill -x ibv_rc_pingpong; sleep 1; pkill -9 -x ibv_rc_pingpong; true' >/dev/null 2>&1 || true
  fi
  "$TOOLS/capture.sh" stop >>"$OUT/capture.log" 2>&1 || true
  # ibv_rc_pingpong -c reports bad data only as a line of output, with exit status 0.
  if grep -q 'invalid data' "$glog"; then grc=99; notes+=" guest:invalid-data"; fi
  grep -q 'iters in' "$glog" || { [ "$grc" = 0 ] && grc=98; }
  python3 "$CHECK" "$pcap" --pmtu "$pmtu" --size "$size" --iters "$iters" >"$OUT/$name.check.log" 2>&1 || crc=$?
  if [ -n "$TSHARK" ]; then
    # Every RoCE packet must dissect as InfiniBand without errors. Wireshark also tries heuristic
    # dissectors (RPC-over-RDMA, an Ethertype, ...) on SEND payloads, which misfire on arbitrary
    # data: errors inside such a payload dissector are not the transport's, so only frames whose
    # dissection ends in the IB layers (or plain data) count; the others are reported as "heur".
    local ib malformed heur
    ib=$("$TSHARK" -r "$pcap" -Y infiniband 2>/dev/null | wc -l)
    malformed=$("$TSHARK" -r "$pcap" -Y '(_ws.malformed || _ws.expert.severity == error) && frame.protocols matches "infiniband(:data)?$"' 2>/dev/null | wc -l)
    heur=$("$TSHARK" -r "$pcap" -Y 'infiniband && !(frame.protocols matches "infiniband(:data)?$")' 2>/dev/null | wc -l)
    notes+=" tshark:${ib}ib/${malformed}bad/${heur}heur"
    { [ "$ib" -gt 0 ] && [ "$malformed" = 0 ] && [ "$ib" = "$(grep -o '^[^:]*: [0-9]* RoCE' "$OUT/$name.check.log" | awk '{print $2}')" ]; } || trc=1
  fi
  local retrans
  retrans=$(grep -o 'retransmitted [0-9]*' "$OUT/$name.check.log" | awk '{printf "%s%s", s, $2; s="/"}')
  local verdict=PASS
  if [ "$urc" != 0 ] || [ "$grc" != 0 ] || [ "$crc" != 0 ] || [ "$trc" != 0 ]; then
    verdict=FAIL
    failures=$((failures + 1))
    log "  FAILED: uroce exit $urc, guest exit $grc, capture check $crc, tshark $trc; logs in $OUT/$name.*"
    tail -3 "$ulog" | sed 's/^/    uroce: /'
    tail -3 "$glog" | sed 's/^/    guest: /'
    grep ERROR "$OUT/$name.check.log" | head -5 | sed 's/^/    /'
  fi
  local naks
  naks=$(sed -n 's/.*, NAKs \([0-9]*\).*, RNR NAKs \([0-9]*\);.*/\1+\2rnr/p' "$OUT/$name.check.log" | paste -sd/ -)
  summary+=("$(printf '%-4s uroce %-6s PMTU %4s size %5s x%-4s %-7s: uroce %s, ibv_rc_pingpong %s, capture %s, retransmitted (uroce/rxe) %s, NAKs (uroce/rxe) %s%s' \
    "$verdict" "$role" "$pmtu" "$size" "$iters" "${label:-}" "$urc" "$grc" "$([ "$crc" = 0 ] && echo ok || echo FAIL)" \
    "${retrans:-?}" "${naks:-?}" "$notes")")
  log "  ${summary[-1]}"
}

for pmtu in $PMTUS; do
  if ! harness_for "$pmtu"; then
    failures=$((failures + 1))
    summary+=("FAIL harness for PMTU $pmtu did not come up")
    continue
  fi
  sizes="4096 1025"
  [ "$pmtu" = 4096 ] && sizes="4096 1025 5000"
  for size in $sizes; do
    for role in server client; do
      run_case "$role" "$pmtu" "$size" "$ITERS"
    done
  done
  if [ "$pmtu" = 1024 ] && [ "${INTEROP_EXTRA:-1}" = 1 ]; then
    # Recovery paths. rnr: uroce posts its receives 300 ms late, so rxe's SENDs meet RNR NAKs from uroce
    # (rxe waits min_rnr_timer and retries, rnr_retry 7 = forever). faults: uroce drops, duplicates and
    # reorders 2% of what it receives, so uroce NAKs sequence errors to rxe, sees duplicates, and retries
    # on timeouts. uroce's ACK timeout is 16 (268 ms) here: with 14 (67 ms) x 8 tries, a TCG guest's
    # occasional half-second stall alone can exhaust uroce's retries (rxe treats retry_cnt 7 as forever).
    for role in server client; do
      run_case "$role" 1024 4096 20 rnr "--rnr-delay 300"
      run_case "$role" 1024 5000 "$ITERS" faults "--faults loss=0.02,reorder=0.02,duplicate=0.02,seed=$RANDOM --ack-timeout 16"
    done
  fi
done

echo
echo "=== uroce <-> rdma_rxe ibv_rc_pingpong interop summary (logs and captures: $OUT) ==="
for line in "${summary[@]}"; do echo "$line"; done
echo "=== $([ "$failures" = 0 ] && echo "all ${#summary[@]} cases passed" || echo "$failures of ${#summary[@]} FAILED") ==="
[ "$failures" = 0 ]
