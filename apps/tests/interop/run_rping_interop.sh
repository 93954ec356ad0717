#!/usr/bin/env bash
# Connection management against Linux rdma_cm on the wire: uroce-rping (apps/rping) and rdma-core's rping (in a
# QEMU guest of the rxe-peer harness) in both roles, at RoCE path MTU 1024 and 4096, with data validation (-V)
# and sizes below and above the PMTU, plus the refusals: a connect to a port nobody listens on must be rejected
# at once (rping reports REJECTED, and so must uroce-rping). Every packet is captured on the guest's tap and
# checked (check_capture.py; the CM MADs on QP1 included, and tshark dissects them as CM).
#
# At PMTU 1024, three more:
#   cycles-client  uroce-rping --repeat connects, pings and disconnects INTEROP_CYCLES times (default 100) in one
#                  process against a persistent `rping -s -P`; then uroce's adapter must hold what it held before
#                  (QPs, CQs, MRs, connectors, listeners, CM IDs, ...: the tool checks), and the guest's rdma
#                  resources must be what they were with only the listener up.
#   lossy-client   the first REQ and the first REP are lost on the wire, so both CMs must retransmit: uroce's REQ
#   lossy-server   (client) or REP (server) is dropped as it enters the guest, and the guest's REP or REQ as it
#                  enters the namespace. The capture must show a CM MAD sent twice (the same attribute and TID) in
#                  each direction, and the pings must pass. See inject_cm_loss.
#
# usage: run_rping_interop.sh UROCE_RPING
#
# Environment, besides harness.sh's: INTEROP_PMTUS (default "1024 4096"), INTEROP_PINGS (default 100),
# INTEROP_CYCLES (default 100), INTEROP_CASES (an extended regex over the case names).
set -uo pipefail

RPING=$(readlink -f "${1:?usage: run_rping_interop.sh UROCE_RPING}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
PMTUS=${INTEROP_PMTUS:-1024 4096}
PINGS=${INTEROP_PINGS:-100}
CYCLES=${INTEROP_CYCLES:-100}
CYCLE_PINGS=2
PORT=7174

harness_require
[ -x "$RPING" ] || { log "no uroce-rping at $RPING"; exit 1; }

# Loss of CM MADs, deterministic and only of the first of a kind each way. The guest's kernel decides (the host's
# may lack tc's gact action): a u32 filter picks the CM MAD (UDP 4791, BTH destination QP 1, the MAD's attribute ID
# at IP offset 64 = IP 20 + UDP 8 + BTH 12 + DETH 8 + 16) and gact's deterministic mode acts on the 1st, 3rd, ...
# match only (determ ok 2: every 2nd match passes). Towards the guest, it drops the MAD at eth0's ingress, after the
# tap captured it. From the guest, a drop at its egress would come before any capture, so the guest marks the MAD
# instead (IP TOS 0x04, which the ICRC does not cover; the header checksum recomputed) and the namespace drops marked
# MADs as they enter from the tap (after the capture), by redirecting them to a veth that is down.
# inject_cm_loss ATTRIBUTE_TO_GUEST ATTRIBUTE_FROM_GUEST (MAD attribute IDs: 0x0010 REQ, 0x0013 REP).
CM_MAD_MATCH=(match u16 4791 0xffff at 22 match u32 0x00000001 0x00ffffff at 32)
loss_injected=0
inject_cm_loss() {
  loss_injected=1
  "$TOOLS/exec.sh" g1 "tc qdisc add dev \$RXE_IF clsact &&
    tc filter add dev \$RXE_IF ingress protocol ip prio 1 u32 ${CM_MAD_MATCH[*]} match u16 $1 0xffff at 64 \
      action gact drop random determ ok 2 &&
    tc filter add dev \$RXE_IF egress protocol ip prio 1 u32 ${CM_MAD_MATCH[*]} match u16 $2 0xffff at 64 \
      action gact pipe random determ ok 2 action pedit ex munge ip tos set 0x04 pipe action csum ip" &&
    ip -n "$NS" link add urocedrop type veth peer name urocedrop1 &&
    ip netns exec "$NS" tc qdisc add dev rxetap1 clsact &&
    ip netns exec "$NS" tc filter add dev rxetap1 ingress protocol ip prio 1 u32 match u8 0x04 0xff at 1 \
      "${CM_MAD_MATCH[@]}" action mirred egress redirect dev urocedrop
}
# Prints "LOST_TO_GUEST LOST_FROM_GUEST" (packets dropped each way); then nothing is left of inject_cm_loss.
remove_cm_loss() {
  local to_guest from_guest
  to_guest=$("$TOOLS/exec.sh" g1 "tc -s actions show action gact 2>/dev/null; tc qdisc del dev \$RXE_IF clsact" \
    2>/dev/null | sed -n 's/.*(dropped \([0-9]*\).*/\1/p' | awk '{n += $1} END {print n + 0}')
  from_guest=$(ip netns exec "$NS" tc -s filter show dev rxetap1 ingress 2>/dev/null |
    sed -n 's/.*Sent [0-9]* bytes \([0-9]*\) pkt.*/\1/p' | awk '{n += $1} END {print n + 0}')
  ip netns exec "$NS" tc qdisc del dev rxetap1 clsact >/dev/null 2>&1
  ip -n "$NS" link del urocedrop >/dev/null 2>&1
  loss_injected=0
  echo "$to_guest $from_guest"
}
trap '[ "$loss_injected" = 0 ] || remove_cm_loss >/dev/null; harness_cleanup' EXIT

# One case: uroce's role (server|client|refused-client|refused-server|cycles-client|lossy-client|lossy-server),
# path MTU, ping size.
run_case() {
  local role=$1 pmtu=$2 size=$3
  local name="rping-uroce-$role-m$pmtu-s$size"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  local urc=0 grc=0 crc=0 notes="" check_args=()
  local limit=$((90 + PINGS * size / 20000))
  [[ $name =~ ${INTEROP_CASES:-.} ]] || return 0
  log "case $name"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  # uroce's path MTU: the configuration's rdma.path_mtu (the CM offers it; a passive side takes the smaller).
  local uroce_args=("${UROCE_CONFIG_ARGS[@]}" --set "rdma.path_mtu=$pmtu" --timeout 60)
  # The cases about connection management give the RC transport 1 s per try (ACK timeout 18) instead of 67 ms: an
  # emulated guest on a busy host can stall for longer than 67 ms x 7 retries, and among 100 connections it may.
  [[ $role =~ ^(cycles|lossy) ]] && uroce_args+=(--set rdma.ack_timeout=18)
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
      # The guest's rping may not listen yet after that second on a busy host (CI once saw the REJ of a port with
      # no listener, and the guest's server then waited for ever): a refusal is retried, as in the cases below.
      ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p "$PORT" -S "$size" \
        -C "$PINGS" -V -v --connect-retries 50 >"$ulog" 2>&1 || urc=$?
      "$TOOLS/exec.sh" g1 --wait "$job" --timeout 60 >"$glog" 2>&1 || grc=$?
      [ "$(grep -c '^ping data: rdma-ping-' "$ulog")" = "$PINGS" ] || { [ "$urc" = 0 ] && urc=97; notes+=" uroce:pings"; }
      [ "$(grep -c '^server ping data: rdma-ping-' "$glog")" = "$PINGS" ] || { [ "$grc" = 0 ] && grc=97; notes+=" guest:pings"; }
      ;;
    refused-client)  # uroce connects to a port with no listener: refused, at once
      ip netns exec "$NS" timeout 60 "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p 9999 -C 1 >"$ulog" 2>&1
      urc=$?
      if [ "$urc" = 1 ] && grep -q 'STATUS_CONNECTION_REFUSED' "$ulog"; then urc=0; else notes+=" uroce:not-refused"; fi
      ;;
    cycles-client)  # CYCLES connections in one process to a persistent server; nothing left behind on either side
      local job resources_before resources_after
      job=$("$TOOLS/exec.sh" g1 --bg "rping -s -P -a $GUEST -p $PORT -V")
      sleep 1
      resources_before=$("$TOOLS/exec.sh" g1 'rdma resource show')  # the listener's
      ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p "$PORT" -S "$size" \
        -C "$CYCLE_PINGS" -V -v -d --repeat "$CYCLES" --connect-retries 20 >"$ulog" 2>&1 || urc=$?
      # The server's last connection may still be going away: give it 3 s.
      resources_after=$("$TOOLS/exec.sh" g1 "for _ in \$(seq 30); do
        [ \"\$(rdma resource show)\" = '$resources_before' ] && break; sleep 0.1; done; rdma resource show")
      "$TOOLS/exec.sh" g1 'pkill -x rping' >/dev/null 2>&1
      "$TOOLS/exec.sh" g1 --wait "$job" --timeout 30 >"$glog" 2>&1
      { echo "guest rdma resources with the listener: $resources_before"
        echo "guest rdma resources after the cycles:  $resources_after"; } >>"$glog"
      [ "$(grep -c '^ping data: rdma-ping-' "$ulog")" = $((CYCLES * CYCLE_PINGS)) ] ||
        { [ "$urc" = 0 ] && urc=97; notes+=" uroce:pings"; }
      grep -q "^uroce-rping: $CYCLES connections; resources back to the start" "$ulog" ||
        { [ "$urc" = 0 ] && urc=98; notes+=" uroce:resources"; }
      { [ -n "$resources_before" ] && [ "$resources_after" = "$resources_before" ]; } ||
        { grc=98; notes+=" guest:resources"; }
      ;;
    lossy-client|lossy-server)  # the first REQ and REP lost: both CMs retransmit, and the connection works
      local job lost
      if [ "$role" = lossy-client ]; then inject_cm_loss 0x0010 0x0013; else inject_cm_loss 0x0013 0x0010; fi ||
        { log "  injecting the loss failed"; crc=1; notes+=" no-loss-injected"; }
      if [ "$role" = lossy-client ]; then
        job=$("$TOOLS/exec.sh" g1 --bg "rping -s -a $GUEST -p $PORT -S $size -V -v")
        sleep 1
        ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -c -a "$GUEST" -p "$PORT" -S "$size" \
          -C "$CYCLE_PINGS" -V -v -d --connect-retries 20 >"$ulog" 2>&1 || urc=$?
        "$TOOLS/exec.sh" g1 --wait "$job" --timeout 60 >"$glog" 2>&1 || grc=$?
        [ "$(grep -c '^ping data: rdma-ping-' "$ulog")" = "$CYCLE_PINGS" ] ||
          { [ "$urc" = 0 ] && urc=97; notes+=" uroce:pings"; }
      else
        ip netns exec "$NS" timeout "$limit" "$RPING" "${uroce_args[@]}" -s -V -p "$PORT" -S "$size" >"$ulog" 2>&1 &
        uroce_pid=$!
        wait_for_output "$ulog" 'listening on port' "$uroce_pid"
        "$TOOLS/exec.sh" g1 --timeout "$limit" "rping -c -a $UROCE_IP -p $PORT -S $size -C $CYCLE_PINGS -V -v" \
          >"$glog" 2>&1 || grc=$?
        wait "$uroce_pid" || urc=$?
        uroce_pid=""
        [ "$(grep -c '^ping data: rdma-ping-' "$glog")" = "$CYCLE_PINGS" ] ||
          { [ "$grc" = 0 ] && grc=97; notes+=" guest:pings"; }
      fi
      read -r -a lost <<<"$(remove_cm_loss)"
      notes+=" lost:${lost[0]}to-guest/${lost[1]}from-guest"
      { [ "${lost[0]}" -ge 1 ] && [ "${lost[1]}" -ge 1 ]; } || { crc=1; notes+="(expected >=1 each way)"; }
      check_args=(--cm-retransmitted --cm-connection 1)  # its RC traffic in full; any other packet on its own
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
  if [ "$role" = cycles-client ]; then
    # Every connection's packets are checked on their own; the last connection's RC traffic in full (PSN sequence,
    # messages), and then the first's; and the CM made every connection without a refusal.
    check_capture "$pcap" "$pmtu" "$name" --cm-connection "$CYCLES" || crc=$?
    python3 "$CHECK_CAPTURE" "$pcap" --pmtu "$pmtu" --cm-connection 1 >>"$OUT/$name.check.log" 2>&1 || crc=1
    local cm_line mad
    cm_line=$(grep -m1 '^  CM MADs: ' "$OUT/$name.check.log")
    for mad in REQ REP RTU DREQ DREP; do
      [ "$(grep -oE "\b$mad [0-9]+" <<<"$cm_line" | awk '{print $2}')" -ge "$CYCLES" ] 2>/dev/null ||
        { crc=1; notes+=" cm:$mad"; }
    done
    grep -q '\bREJ ' <<<"$cm_line" && { crc=1; notes+=" cm:REJ"; }
  else
    check_capture "$pcap" "$pmtu" "$name" "${check_args[@]}" || crc=$?
  fi
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
  harness_for_cases "$pmtu" || continue
  sizes="64 5000"
  [ "$pmtu" = 4096 ] && sizes="64 16384"
  for size in $sizes; do
    for role in server client; do harness_case run_case "$role" "$pmtu" "$size"; done
  done
  if [ "$pmtu" = 1024 ]; then
    harness_case run_case refused-client 1024 64
    harness_case run_case refused-server 1024 64
    harness_case run_case cycles-client 1024 64
    harness_case run_case lossy-client 1024 64
    harness_case run_case lossy-server 1024 64
  fi
done

harness_summary "uroce <-> rdma_rxe rping (rdma_cm) interop summary"
