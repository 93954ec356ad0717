#!/usr/bin/env bash
# Connection management against Linux rdma_cm on the wire: uroce-rping (apps/rping) and rdma-core's rping (in a
# QEMU guest of the rxe-peer harness) in both roles, at RoCE path MTU 1024 and 4096, with data validation (-V)
# and sizes below and above the PMTU, plus the refusals: a connect to a port nobody listens on must be rejected
# at once (rping reports REJECTED, and so must uroce-rping). Every packet is captured on the guest's tap and
# checked (check_capture.py; the CM MADs on QP1 included, and tshark dissects them as CM).
#
# usage: run_rping_interop.sh UROCE_RPING
#
# Environment, besides harness.sh's: INTEROP_PMTUS (default "1024 4096"), INTEROP_PINGS (default 100),
# INTEROP_CASES (an extended regex over the case names).
set -uo pipefail

RPING=$(readlink -f "${1:?usage: run_rping_interop.sh UROCE_RPING}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
PMTUS=${INTEROP_PMTUS:-1024 4096}
PINGS=${INTEROP_PINGS:-100}
PORT=7174

harness_require
[ -x "$RPING" ] || { log "no uroce-rping at $RPING"; exit 1; }

# One case: uroce's role (server|client|refused-client|refused-server), path MTU, ping size.
run_case() {
  local role=$1 pmtu=$2 size=$3
  local name="rping-uroce-$role-m$pmtu-s$size"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  local urc=0 grc=0 crc=0 notes=""
  local limit=$((90 + PINGS * size / 20000))
  [[ $name =~ ${INTEROP_CASES:-.} ]] || return 0
  log "case $name"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  # uroce's path MTU: the configuration's rdma.path_mtu (the CM offers it; a passive side takes the smaller).
  local uroce_args=("${UROCE_CONFIG_ARGS[@]}" --set "rdma.path_mtu=$pmtu" --timeout 60)
  case $role in
    server)
      ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -s -V -p "$PORT" -S "$size" >"$ulog" 2>&1 &
      uroce_pid=$!
      wait_for_output "$ulog" 'listening on port' "$uroce_pid"
      "$TOOLS/exec.sh" g1 --timeout "$limit" "rping -c -a $UROCE_IP -p $PORT -S $size -C $PINGS -V -v" \
        >"$glog" 2>&1 || grc=$?
      wait "$uroce_pid" || urc=$?
      uroce_pid=""
      [ "$(grep -c '^ping data: rdma-ping-' "$glog")" = "$PINGS" ] || { [ "$grc" = 0 ] && grc=97; notes+=" guest:pings"; }
      ;;
    client)
      local job
      job=$("$TOOLS/exec.sh" g1 --bg "rping -s -a $GUEST -p $PORT -S $size -V -v")
      sleep 1
      ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p "$PORT" -S "$size" \
        -C "$PINGS" -V -v >"$ulog" 2>&1 || urc=$?
      "$TOOLS/exec.sh" g1 --wait "$job" --timeout 60 >"$glog" 2>&1 || grc=$?
      [ "$(grep -c '^ping data: rdma-ping-' "$ulog")" = "$PINGS" ] || { [ "$urc" = 0 ] && urc=97; notes+=" uroce:pings"; }
      [ "$(grep -c '^server ping data: rdma-ping-' "$glog")" = "$PINGS" ] || { [ "$grc" = 0 ] && grc=97; notes+=" guest:pings"; }
      ;;
    refused-client)  # uroce connects to a port with no listener: refused, at once
      ip netns exec "$NS" timeout 60 "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p 9999 -C 1 >"$ulog" 2>&1
      urc=$?
      if [ "$urc" = 1 ] && grep -q 'STATUS_CONNECTION_REFUSED' "$ulog"; then urc=0; else notes+=" uroce:not-refused"; fi
      ;;
    refused-server)  # rping connects to uroce's address on a port nobody listens on: REJECTED, not a timeout
      ip netns exec "$NS" timeout 60 "$RPING" "${uroce_args[@]}" -s -p "$PORT" >"$ulog" 2>&1 &
      uroce_pid=$!
      wait_for_output "$ulog" 'listening on port' "$uroce_pid"
      "$TOOLS/exec.sh" g1 --timeout 30 "rping -c -a $UROCE_IP -p 9999 -C 1" >"$glog" 2>&1
      grc=$?
      if [ "$grc" != 124 ] && grep -q 'RDMA_CM_EVENT_REJECTED' "$glog"; then grc=0; else notes+=" guest:not-rejected"; fi
      kill "$uroce_pid" 2>/dev/null
      wait "$uroce_pid" 2>/dev/null
      uroce_pid=""
      ;;
  esac
  "$TOOLS/capture.sh" stop >>"$OUT/capture.log" 2>&1 || true
  check_capture "$pcap" "$pmtu" "$name" || crc=$?
  notes+=$CHECK_NOTES
  local verdict=PASS
  if [ "$urc" != 0 ] || [ "$grc" != 0 ] || [ "$crc" != 0 ]; then
    verdict=FAIL
    report_failure "$name" "uroce exit $urc, guest exit $grc, capture check $crc"
    notes+=$FAILURE_NOTES
  fi
  summary+=("$(printf '%-4s uroce %-14s PMTU %4s size %5s: uroce %s, rping %s, capture %s%s' "$verdict" "$role" \
    "$pmtu" "$size" "$urc" "$grc" "$([ "$crc" = 0 ] && echo ok || echo FAIL)" "$notes")")
  log "  ${summary[-1]}"
}

for pmtu in $PMTUS; do
  if ! harness_for "$pmtu"; then
    failures=$((failures + 1))
    summary+=("FAIL harness for PMTU $pmtu did not come up")
    continue
  fi
  sizes="64 5000"
  [ "$pmtu" = 4096 ] && sizes="64 16384"
  for size in $sizes; do
    for role in server client; do run_case "$role" "$pmtu" "$size"; done
  done
  if [ "$pmtu" = 1024 ]; then
    run_case refused-client 1024 64
    run_case refused-server 1024 64
  fi
done

harness_summary "uroce <-> rdma_rxe rping (rdma_cm) interop summary"
