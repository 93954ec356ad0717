#!/usr/bin/env bash
# uroce's RC transport against Linux Soft-RoCE (rdma_rxe) on the wire: uroce-pingpong (apps/pingpong) and
# ibv_rc_pingpong (rdma-core, in a QEMU guest of the rxe-peer harness) in both roles, at RoCE path MTU 1024 and
# 4096 (message sizes around and above the PMTU), plus recovery cases at PMTU 1024 (RNR NAKs; loss, duplication
# and reordering injected on uroce's receive path), with every packet captured on the guest's tap and checked
# (check_capture.py, and tshark when installed). Topology and harness handling: harness.sh.
#
# usage: run_pingpong_interop.sh UROCE_PINGPONG
#
# Needs root, and the rxe-peer harness (shared/tools/rxe-peer; built with its build.sh, which this script runs if
# needed: idempotent, about 5 min the first time). Environment, besides harness.sh's:
#   INTEROP_ITERS       ping-pong iterations per case (default 200)
#   INTEROP_PMTUS       path MTUs to test (default "1024 4096"; harness_for sets the guest's NIC MTU for each)
#   INTEROP_EXTRA=0     skip the recovery cases (RNR NAKs, injected loss/duplication/reordering)
#   INTEROP_CASES       only the cases whose name matches this extended regex (e.g. 'server-.*-faults')
#   INTEROP_REPEAT      run each selected case this many times (default 1; for chasing rare failures)
#   INTEROP_UROCE_ARGS  extra uroce-pingpong options for every case (e.g. "--ack-timeout 14", ibv_rc_pingpong's
#                       own local ACK timeout, instead of 18; the guest's ibv_rc_pingpong always uses 14 and 7 retries)
#
# Exit status 0 only if every case passed: both programs exit 0, no data errors, and the capture check passes.
set -uo pipefail

PINGPONG=$(readlink -f "${1:?usage: run_pingpong_interop.sh UROCE_PINGPONG}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
ITERS=${INTEROP_ITERS:-200}
PMTUS=${INTEROP_PMTUS:-1024 4096}

harness_require
[ -x "$PINGPONG" ] || { log "no uroce-pingpong at $PINGPONG"; exit 1; }


# One case: role of uroce (server|client), path MTU, message size, iterations, [label, extra uroce-pingpong
# options].
run_case() {
  local role=$1 pmtu=$2 size=$3 iters=$4 label=${5:-} extra=${6:-}
  local name="uroce-$role-m$pmtu-s$size${label:+-$label}${INTEROP_RUN_TAG:-}"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  local urc=0 grc=0 crc=0 notes=""
  local guest_cmd="ibv_rc_pingpong -d rxe0 -g \$RXE_GID_INDEX -m $pmtu -s $size -n $iters -c"
  local limit=$((120 + iters * size / 20000))
  [[ $name =~ ${INTEROP_CASES:-.} ]] || return 0
  if [ "${INTEROP_REPEAT:-1}" -gt 1 ] && [ -z "${INTEROP_RUN_TAG:-}" ]; then
    local repeat
    for ((repeat = 1; repeat <= INTEROP_REPEAT; repeat++)); do INTEROP_RUN_TAG=-r$repeat run_case "$@"; done
    return
  fi
  log "case $name"
  # uroce's ACK timeout is 18 (1.07 s), as in the perftest cases: with ibv_rc_pingpong's 14 (67 ms) x 8 tries, a
  # TCG guest that stalls for half a second on a busy 2-core host (seen) exhausts uroce's retries, and rxe, which
  # treats retry_cnt 7 as forever, then never ends. It costs time only when a packet is really lost.
  local timeout_args="--ack-timeout 18"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  if [ "$role" = server ]; then
    ip netns exec "$NS" timeout "$limit" "$PINGPONG" "${UROCE_CONFIG_ARGS[@]}" --bind "$HOST_TCP" \
      -m "$pmtu" -s "$size" -n "$iters" -c --strict --timeout 60 $timeout_args $extra ${INTEROP_UROCE_ARGS:-} >"$ulog" 2>&1 &
    uroce_pid=$!
    wait_for_output "$ulog" 'listening on TCP' "$uroce_pid"
    "$TOOLS/exec.sh" g1 --timeout "$limit" "$guest_cmd $HOST_TCP" >"$glog" 2>&1 || grc=$?
    wait "$uroce_pid" || urc=$?
    uroce_pid=""
  else
    local job
    job=$("$TOOLS/exec.sh" g1 --bg "$guest_cmd")
    ip netns exec "$NS" timeout "$limit" "$PINGPONG" "${UROCE_CONFIG_ARGS[@]}" \
      -m "$pmtu" -s "$size" -n "$iters" -c --pattern --timeout 60 $timeout_args $extra ${INTEROP_UROCE_ARGS:-} "$GUEST" >"$ulog" 2>&1 || urc=$?
    "$TOOLS/exec.sh" g1 --wait "$job" --timeout 60 >"$glog" 2>&1 || grc=$?
  fi
  # rxe treats retry_cnt 7 as "retry forever": an ibv_rc_pingpong whose peer is gone never ends by itself.
  if [ "$grc" = 124 ] || [ "$urc" != 0 ]; then
    "$TOOLS/exec.sh" g1 'pkill -x ibv_rc_pingpong; sleep 1; pkill -9 -x ibv_rc_pingpong; true' >/dev/null 2>&1 || true
  fi
  stop_capture
  # ibv_rc_pingpong -c reports bad data only as a line of output, with exit status 0.
  if grep -q 'invalid data' "$glog"; then grc=99; notes+=" guest:invalid-data"; fi
  grep -q 'iters in' "$glog" || { [ "$grc" = 0 ] && grc=98; }
  check_capture_if_complete "$pcap" "$pmtu" "$name" --size "$size" --iters "$iters" || crc=$?
  notes+=$CHECK_NOTES
  # ibv_rc_pingpong's protocol has no closing handshake: the side that receives the last message exits, and its
  # QP with it. If the ACK for the other side's last message is then lost, that sender retries into silence and
  # fails with "retry exceeded", although the peer received everything (on a real network as here). Only with
  # injected loss is that likely (2% of ACKs dropped), so only there, and only when the capture proves it (the
  # peer ACKed uroce's final request on the wire, then never answered again) and every other check passed, is it
  # not a failure.
  if [ "$label" = faults ] && [ "$urc" = 1 ] && [ "$grc" = 0 ] && [ "$crc" = 0 ] &&
    grep -q '^Failed status STATUS_IO_TIMEOUT' "$ulog" &&
    grep -q "sent $((iters - 1)) received $iters, 0 data errors" "$ulog" &&
    grep -qE "^  $UROCE_IP -> $GUEST: final request PSN 0x[0-9a-f]+ acknowledged by $GUEST in frame [0-9]+; [0-9]+ request packets after it, 0 ACKs/NAKs after it" \
      "$OUT/$name.check.log"; then
    urc=0
    notes+=" (uroce's last ACK lost to injection after the peer had exited: the ping-pong protocol's hazard)"
  fi
  local retrans
  retrans=$(grep -o 'retransmitted [0-9]*' "$OUT/$name.check.log" | awk '{printf "%s%s", s, $2; s="/"}')
  local verdict=PASS
  if [ "$urc" != 0 ] || [ "$grc" != 0 ] || [ "$crc" != 0 ]; then
    verdict=FAIL
    report_failure "$name" "uroce exit $urc, guest exit $grc, capture check $crc"
    notes+=$FAILURE_NOTES
  fi
  local naks
  naks=$(sed -n 's/.*, NAKs \([0-9]*\).*, RNR NAKs \([0-9]*\);.*/\1+\2rnr/p' "$OUT/$name.check.log" | paste -sd/ -)
  summary+=("$(printf '%-4s uroce %-6s PMTU %4s size %5s x%-4s %-7s: uroce %s, ibv_rc_pingpong %s, capture %s, retransmitted (uroce/rxe) %s, NAKs (uroce/rxe) %s%s' \
    "$verdict" "$role" "$pmtu" "$size" "$iters" "${label:-}" "$urc" "$grc" "$([ "$crc" = 0 ] && echo ok || echo FAIL)" \
    "${retrans:-?}" "${naks:-?}" "$notes")")
  log "  ${summary[-1]}"
}

for pmtu in $PMTUS; do
  harness_for_cases "$pmtu" || continue
  # At PMTU 1024 messages of four packets and of two (one byte in the second); at 4096 one packet and two.
  sizes="4096 1025"
  [ "$pmtu" = 4096 ] && sizes="4096 5000"
  for size in $sizes; do
    for role in server client; do
      harness_case run_case "$role" "$pmtu" "$size" "$ITERS"
    done
  done
  if [ "$pmtu" = 1024 ] && [ "${INTEROP_EXTRA:-1}" = 1 ]; then
    # Recovery paths. rnr: uroce posts its receives 300 ms late, so rxe's SENDs meet RNR NAKs from uroce
    # (rxe waits min_rnr_timer and retries, rnr_retry 7 = forever). faults: uroce drops, duplicates and
    # reorders 2% of what it receives, so uroce NAKs sequence errors to rxe, sees duplicates, and retries
    # on timeouts.
    for role in server client; do
      harness_case run_case "$role" 1024 4096 20 rnr "--rnr-delay 300"
      harness_case run_case "$role" 1024 5000 "$ITERS" faults "--set faults.loss=0.02 --set faults.reorder=0.02 --set faults.duplicate=0.02 --set faults.seed=$RANDOM"
    done
  fi
done

harness_summary "uroce <-> rdma_rxe ibv_rc_pingpong interop summary"
