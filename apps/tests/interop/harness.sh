# shellcheck shell=bash
# Shared by the interop scripts (sourced, not run): the rxe-peer harness (shared/tools/rxe-peer) with guest g1
# running Linux rdma_rxe, a veth that puts uroce on the harness's bridge, and the capture check.
#
#   guest g1 198.18.0.2 (rxe0) -- rxetap1 --+
#                                             rxebr0 198.18.0.1 (the namespace's kernel: TCP exchanges)
#   uroce 198.18.0.100 -- uroce0 == uroce0br -+
#
# uroce0 is a veth whose bridge end is enslaved to rxebr0; uroce drives it with net_af_packet (UROCE_DEVICE) and
# answers ARP for 198.18.0.100 itself (uroce0 has no address and ARP off, so the namespace's kernel never
# answers for it). The out-of-band TCP exchanges run between the guest and a kernel socket of the namespace
# (HOST_TCP); the RoCE GID uroce announces is ::ffff:198.18.0.100.
#
# Before sourcing, set HARNESS_PROJECT (the project root). Optional environment:
#   RXE_PEER_TOOLS          the harness (default: <project>/../shared/tools/rxe-peer)
#   INTEROP_OUT             where logs and captures go (default: a new /tmp/uroce-interop.XXXXXX)
#   INTEROP_KEEP_HARNESS=1  leave a harness this script started running at the end
#   RXE_PEER_NS, RXE_PEER_DIR  the harness's namespace and directory (shared/tools/rxe-peer/common.sh)
#   INTEROP_REQUIRED=1      a harness that cannot build or boot is a failure, not a skip
# A harness that was already running is reused (at the MTU each case needs) and left running; one this script
# started is stopped by harness_cleanup unless INTEROP_KEEP_HARNESS=1.

TOOLS=${RXE_PEER_TOOLS:-$HARNESS_PROJECT/../shared/tools/rxe-peer}
OUT=${INTEROP_OUT:-$(mktemp -d /tmp/uroce-interop.XXXXXX)}
# A second harness can run beside the first with its own namespace and directory (its own guests and bridge);
# the directory may hold symbolic links to the first one's image, kernel and initrd.
NS=${RXE_PEER_NS:-rxepeer}
BR=${RXE_PEER_BR:-rxebr0}
HOST_TCP=198.18.0.1
GUEST=198.18.0.2
UROCE_IP=198.18.0.100
# framesz/blocksz and the mbuf data room: config/examples/af-packet-rxe-peer.yaml explains them.
UROCE_DEVICE=net_af_packet0,iface=uroce0,framesz=4608,blocksz=36864
# The uroce tools' configuration options for this topology (apps/common/tool_setup.h).
# INTEROP_UROCE_ARGS: more uroce tool arguments for every case (e.g. "--set congestion.max_bytes_in_flight=0").
# shellcheck disable=SC2206 # split on purpose: a list of arguments
UROCE_CONFIG_ARGS=(--device "$UROCE_DEVICE" --ip "$UROCE_IP/24"
  --set engine.mbuf_data_room=4736 ${INTEROP_UROCE_ARGS:-})
CHECK_CAPTURE=$HARNESS_PROJECT/apps/tests/interop/check_capture.py
TSHARK=$(command -v tshark || true)
HARNESS_STATUS_FILE=${RXE_PEER_DIR:-/var/tmp/rxe-peer}/run/g1/share/status
harness_started=0

mkdir -p "$OUT"
trap harness_cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[interop %(%T)T] %s\n' -1 "$*"; }

# Exits 77 (meson's "skipped") when this machine cannot run the harness at all.
harness_require() {
  [ "$(id -u)" = 0 ] || { log "needs root"; exit 77; }
  [ -x "$TOOLS/start.sh" ] || { log "no rxe-peer harness at $TOOLS"; exit 77; }
}

# The uroce process a case runs in the background, if any: harness_cleanup stops it.
uroce_pid=""
# One line per case (PASS/FAIL first) and the count of failed ones, for harness_summary.
summary=()
failures=0

# Prints every case's line under TITLE and the verdict; the status is 0 only if no case failed.
harness_summary() {
  echo
  echo "=== $1 (logs and captures: $OUT) ==="
  local line
  for line in "${summary[@]}"; do echo "$line"; done
  local reruns cases
  reruns=$(printf '%s\n' "${summary[@]}" | grep -c '^RERUN' || true)
  cases=$((${#summary[@]} - reruns))
  echo "=== $([ "$failures" = 0 ] && echo "all $cases cases passed" || echo "$failures of $cases FAILED")$(
    [ "$reruns" = 0 ] || echo ", $reruns run again on a fresh guest after its NIC hung") ==="
  [ "$failures" = 0 ]
}

# A failed case NAME (its $OUT/NAME.{uroce,guest,check}.log) and WHY (the exit statuses): prints the logs'
# tails and the capture check's errors, counts the failure, and sets FAILURE_NOTES to the first error line of
# each log (' uroce:"..." guest:"..."'), for the summary line, which is often all a CI log keeps.
report_failure() {
  local name=$1 why=$2 line
  local ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  failures=$((failures + 1))
  log "  FAILED: $why; logs in $OUT/$name.*"
  grep -v '^EAL\|^TELEMETRY' "$ulog" | tail -3 | sed 's/^/    uroce: /'
  tail -3 "$glog" | sed 's/^/    guest: /'
  grep ERROR "$OUT/$name.check.log" | head -5 | sed 's/^/    /'
  FAILURE_NOTES=""
  # The tools' own complaints start with their name; DPDK's lines are not theirs.
  line=$(grep -m1 -E '^uroce-[a-z]+: ' "$ulog" 2>/dev/null | cut -c1-160)
  [ -n "$line" ] || line=$(grep -v '^EAL\|^TELEMETRY' "$ulog" 2>/dev/null | grep -m1 -iE 'error|fail|expected' | cut -c1-160)
  [ -n "$line" ] && FAILURE_NOTES+=" uroce:\"$line\""
  line=$(grep -m1 -iE "error|fail|can't|couldn|unable|r\^2" "$glog" 2>/dev/null | cut -c1-160)
  [ -n "$line" ] && FAILURE_NOTES+=" guest:\"$line\""
  return 0
}

# Runs on exit (the traps set where this file is sourced): stops a uroce process left running, the capture, the veth, and a harness this
# script started.
harness_cleanup() {
  if [ -n "$uroce_pid" ] && kill -0 "$uroce_pid" 2>/dev/null; then
    kill "$uroce_pid" 2>/dev/null
    wait "$uroce_pid" 2>/dev/null
  fi
  "$TOOLS/capture.sh" stop >/dev/null 2>&1 || true
  ip -n "$NS" link del uroce0 >/dev/null 2>&1 || true
  if [ "$harness_started" = 1 ] && [ "${INTEROP_KEEP_HARNESS:-0}" != 1 ]; then
    log "stopping the harness"
    "$TOOLS/stop.sh" >"$OUT/stop.log" 2>&1 || true
  fi
}

# The harness failed to build or boot. If it never came up in this run, this machine can't host it (no QEMU,
# no tap devices, no Debian mirror for the image): skip (exit 77) rather than fail, unless INTEROP_REQUIRED=1.
# Once it has run here, a failure to come up again is a failure.
harness_was_up=0
harness_unavailable() {
  if [ "$harness_was_up" = 0 ] && [ "${INTEROP_REQUIRED:-0}" != 1 ]; then
    log "SKIPPED: the rxe-peer harness cannot run on this machine (INTEROP_REQUIRED=1 makes this a failure)"
    exit 77
  fi
}

harness_up() {  # the harness's namespace exists and guest g1 said READY
  ip netns list 2>/dev/null | grep -qw "$NS" && grep -q '^READY' "$HARNESS_STATUS_FILE" 2>/dev/null
}

# Brings the harness up with guest g1 at an rxe active MTU that carries `pmtu`, and plugs uroce0 in.
# The harness boots once with a 4200-byte link (tap and bridge) and the guest's NIC MTU is then set for each
# case: rdma_rxe follows its netdev's MTU changes (NETDEV_CHANGEMTU -> rxe_set_mtu), 1500 giving an active MTU of
# 1024 and 4200 one of 4096. Switching costs a second where a reboot costs a minute, so the interop scripts share
# one boot (INTEROP_KEEP_HARNESS=1, as `./uroce test` runs them).
harness_for() {
  local pmtu=$1 nic_mtu=1500 want=1024 have
  if [ "$pmtu" -gt 1024 ]; then nic_mtu=4200; want=4096; fi
  harness_pmtu=$pmtu
  # A guest reused from an earlier script may have lost its NIC (guest_nic_hung): a fresh boot, not a run of
  # failures that are not uroce's.
  if harness_up && ! guest_reaches_host; then
    log "guest g1 cannot reach $HOST_TCP: rebooting it"
    harness_stop_guest
  fi
  if harness_up; then
    harness_was_up=1
  else
    log "building (if needed) and starting the harness: RXE_PEER_MTU=4200 start.sh 1"
    local t0=$SECONDS
    "$TOOLS/build.sh" >"$OUT/build.log" 2>&1 || {
      log "build.sh failed (see $OUT/build.log)"
      tail -5 "$OUT/build.log"
      harness_unavailable
      return 1
    }
    RXE_PEER_MTU=4200 "$TOOLS/start.sh" 1 >"$OUT/start.log" 2>&1 || {
      log "start.sh failed (see $OUT/start.log)"
      tail -5 "$OUT/start.log"
      harness_unavailable
      return 1
    }
    harness_started=1
    harness_was_up=1
    log "harness ready after $((SECONDS - t0)) s: $(cat "$HARNESS_STATUS_FILE")"
  fi
  ip -n "$NS" link set "$BR" mtu 4200 >/dev/null 2>&1
  have=$("$TOOLS/exec.sh" g1 "ip link set \$RXE_IF mtu $nic_mtu && ibv_devinfo -d \$RXE_DEV |
    awk '/active_mtu/ {print \$2; exit}'" 2>/dev/null)
  if [ "$have" != "$want" ]; then
    log "the guest's rxe active MTU is '${have}' after setting its NIC to $nic_mtu, not $want"
    return 1
  fi
  log "guest NIC MTU $nic_mtu: rxe active MTU $have"
  harness_plug_uroce
}

# The PMTU of the last harness_for, which harness_reboot restores.
harness_pmtu=1024
# The calling script's guest-side setup (a function's name, e.g. nvmet's configfs), which harness_reboot redoes.
HARNESS_AFTER_REBOOT=${HARNESS_AFTER_REBOOT:-}

# Guest g1 pings the namespace's address over its NIC (2 s at most when it can, 6 s when it cannot).
guest_reaches_host() {
  "$TOOLS/exec.sh" g1 --timeout 30 "ping -q -c 3 -i 0.3 -W 2 $HOST_TCP >/dev/null 2>&1 ||
    ping -q -c 2 -i 0.3 -W 2 $HOST_TCP >/dev/null 2>&1" >/dev/null 2>&1
}

# Succeeds, printing the guest kernel's report, when guest g1's virtio NIC has stopped transmitting for good: it
# cannot reach the namespace's address and its kernel's netdev watchdog has fired ("NETDEV WATCHDOG: ...
# transmit queue 0 timed out", "virtio_net ... TX timeout on queue"). Seen once in CI under TCG (the stall
# lasted 388 s, until the end of the run): the guest's TX ring stopped moving, in QEMU's virtio-net or in the
# guest's driver, while the guest ran on. That ring lies between the guest's kernel and QEMU; uroce only sees
# what comes out of it.
guest_nic_hung() {
  local report
  guest_reaches_host && return 1
  report=$("$TOOLS/exec.sh" g1 --timeout 30 \
    "dmesg | grep -m1 -E 'TX timeout on queue|transmit queue [0-9]+ timed out'" 2>/dev/null) || return 1
  [ -n "$report" ] && echo "$report"
}

# guest_run_watched SECONDS CMD: runs CMD in guest g1 as exec.sh --timeout SECONDS does, printing its output and
# returning its status, but looks at the guest's NIC every 30 s and gives up at once (status 125) when it has
# hung, instead of waiting out a long step (fio) on a guest that can no longer answer.
guest_run_watched() {
  local limit=$1 id rc out report
  shift
  local end=$((SECONDS + limit))
  id=$("$TOOLS/exec.sh" g1 --bg "$*") || return 1
  while :; do
    # The job's output: all of it once it has ended, what it wrote so far when the wait timed out (status 124).
    rc=0
    out=$("$TOOLS/exec.sh" g1 --wait "$id" --timeout 30 2>/dev/null) || rc=$?
    if [ "$rc" != 124 ]; then
      printf '%s\n' "$out"
      return "$rc"
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      printf 'timeout after %s s; output so far:\n%s\n' "$limit" "$out"
      return 124
    fi
    if report=$(guest_nic_hung); then
      echo "the guest's NIC has hung (its kernel: \"$report\"); given up"
      return 125
    fi
  done
}

harness_stop_guest() {
  "$TOOLS/stop.sh" g1 >>"$OUT/stop.log" 2>&1 || true
  rm -f "$HARNESS_STATUS_FILE"
}

# Boots guest g1 afresh at the last harness_for's PMTU and redoes the script's guest-side setup.
harness_reboot() {
  harness_stop_guest
  harness_for "$harness_pmtu" || return 1
  [ -z "$HARNESS_AFTER_REBOOT" ] || "$HARNESS_AFTER_REBOOT"
}

# harness_case CMD...: runs one case, CMD (the script's run_case and its arguments). When the case failed and
# guest_nic_hung shows that the guest's NIC had died under it, the failure is the harness's: the guest is
# rebooted and the case runs once more, and only that run counts. The first run's summary lines stay, marked
# RERUN, so the log still shows what happened. A case that fails with the guest's NIC alive counts at once.
# INTEROP_FAKE_NIC_HANG=1 tries this path: before the first case, the guest's NIC is set to drop all it sends
# and its kernel log gets a watchdog line, as if the NIC had hung. That case fails, and must pass on its rerun.
# Once a rebooted guest has not come back, the script's remaining cases fail without running.
harness_fake_nic_hang=${INTEROP_FAKE_NIC_HANG:-0}
harness_lost=0
harness_case() {
  local failures_before=$failures lines_before=${#summary[@]} rc=0 report i
  if [ "$harness_lost" = 1 ]; then
    failures=$((failures + 1))
    summary+=("FAIL $*: not run, the guest did not come back")
    return 0
  fi
  if [ "$harness_fake_nic_hang" = 1 ]; then
    harness_fake_nic_hang=0
    log "  INTEROP_FAKE_NIC_HANG=1: the guest's NIC now drops all it sends, as if it had hung"
    # The watchdog's line comes back every 5 s, as the real one does (a case may clear the kernel log).
    "$TOOLS/exec.sh" g1 --timeout 30 "tc qdisc add dev \$RXE_IF clsact &&
      tc filter add dev \$RXE_IF egress protocol all prio 1 u32 match u32 0 0 action drop &&
      { while :; do echo 'virtio_net: TX timeout on queue: 0 (INTEROP_FAKE_NIC_HANG)' >/dev/kmsg; sleep 5; done
      } >/dev/null 2>&1 &"
  fi
  "$@" || rc=$?
  if [ "$rc" = 0 ] && [ "$failures" = "$failures_before" ]; then return 0; fi
  report=$(guest_nic_hung) || return "$rc"
  log "  the guest's NIC has hung (its kernel: \"$report\"): rebooting the guest and running the case again"
  for ((i = lines_before; i < ${#summary[@]}; i++)); do summary[i]="RERUN (the guest's NIC hung) ${summary[i]}"; done
  failures=$failures_before
  if ! harness_reboot; then
    harness_lost=1
    failures=$((failures + 1))
    summary+=("FAIL $*: the guest did not come back after its NIC hung")
    return 0
  fi
  rc=0
  "$@" || rc=$?
  return "$rc"
}

# harness_for, and when it fails a FAIL line in the summary: the caller skips that PMTU's cases.
harness_for_cases() {
  harness_for "$1" && return 0
  failures=$((failures + 1))
  summary+=("FAIL harness for PMTU $1 did not come up")
  return 1
}

# wait_for_output LOG TEXT PID [TENTHS]: waits until LOG (a server's output) shows TEXT, the server PID has
# exited, or TENTHS tenths of a second (default 100) have passed; the caller's next step tells them apart.
wait_for_output() {
  local log_file=$1 text=$2 pid=$3
  for _ in $(seq "${4:-100}"); do
    grep -q "$text" "$log_file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

harness_plug_uroce() {
  ip -n "$NS" link del uroce0 >/dev/null 2>&1 || true
  # Pin the bridge's MAC first: enslaving a port with a lower MAC would otherwise change it under the guest's
  # ARP entry for 198.18.0.1.
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

# Stops the capture started with capture.sh and appends tcpdump's summary to capture.log. CAPTURE_DROPPED is what
# tcpdump says the kernel dropped: on a busy 2-core host it can fall behind a burst (3484 of 20416 packets once,
# with the ASan build and a TCG guest on both cores), and a capture with holes cannot be checked packet by packet.
stop_capture() {
  local summary
  summary=$("$TOOLS/capture.sh" stop 2>&1 || true)
  printf '%s\n' "$summary" >>"$OUT/capture.log"
  CAPTURE_DROPPED=$(sed -n 's/^\([0-9][0-9]*\) packets\{0,1\} dropped by kernel$/\1/p' <<<"$summary" | tail -n 1)
  CAPTURE_DROPPED=${CAPTURE_DROPPED:-0}
}

# check_capture for a case that cannot simply run again: a capture tcpdump dropped packets from (check_capture's 2)
# is reported as not checked, in CHECK_NOTES, rather than failed; the case's other checks still apply.
check_capture_if_complete() {
  local rc=0
  check_capture "$@" || rc=$?
  if [ "$rc" = 2 ]; then
    CHECK_NOTES+=" [capture not checked: incomplete]"
    return 0
  fi
  return $rc
}

# Checks a capture: check_capture.py (every field a receiver validates, ICRC recomputed; extra arguments go to
# it) and, when tshark is installed, that every RoCE frame dissects as InfiniBand without errors. Wireshark also
# tries heuristic dissectors (RPC-over-RDMA, an Ethertype, ...) on SEND payloads, which misfire on arbitrary data:
# errors inside such a payload dissector are not the transport's, so only frames whose dissection ends in the IB
# layers (or plain data) count; the others are reported as "heur". The CM MADs must dissect as CM: as many frames
# carry a MAD of the CM class as check_capture.py counted CM MADs, as many decode as a CM message (Wireshark has
# message dissectors for REQ, REP, RTU, REJ, DREQ and DREP) as it counted of those, and none is malformed or has
# an expert error.
# Writes NAME.check.log; sets CHECK_NOTES (a summary) and returns non-zero on any failure: 2 when the capture was
# incomplete (stop_capture's CAPTURE_DROPPED), so that the failure may be the capture's holes, not the traffic's.
check_capture() {
  local pcap=$1 pmtu=$2 name=$3
  shift 3
  local rc=0
  CHECK_NOTES=""
  python3 "$CHECK_CAPTURE" "$pcap" --pmtu "$pmtu" "$@" >"$OUT/$name.check.log" 2>&1 || rc=1
  if [ -n "$TSHARK" ]; then
    local ib malformed heur roce
    ib=$("$TSHARK" -r "$pcap" -Y infiniband 2>/dev/null | wc -l)
    malformed=$("$TSHARK" -r "$pcap" -Y '(_ws.malformed || _ws.expert.severity == error) && frame.protocols matches "infiniband(:data)?$"' 2>/dev/null | wc -l)
    heur=$("$TSHARK" -r "$pcap" -Y 'infiniband && !(frame.protocols matches "infiniband(:data)?$")' 2>/dev/null | wc -l)
    roce=$(grep -o '^[^:]*: [0-9]* RoCE' "$OUT/$name.check.log" | awk '{print $2}')
    CHECK_NOTES+=" tshark:${ib}ib/${malformed}bad/${heur}heur"
    { [ "$ib" -gt 0 ] && [ "$malformed" = 0 ] && [ "$ib" = "$roce" ]; } || rc=1
    local cm_line cm_mads cm_messages ts_mads ts_messages ts_bad
    local cm_filter='infiniband.cm.req || infiniband.cm.rep || infiniband.cm.rtu.localcommid ||
      infiniband.cm.rej.localcommid || infiniband.cm.dreq.localcommid || infiniband.cm.drsp.localcommid'
    cm_line=$(grep -m1 '^  CM MADs: ' "$OUT/$name.check.log")
    cm_mads=$(sed -n 's/^  CM MADs: \([0-9]*\).*/\1/p' <<<"$cm_line")
    cm_messages=$(grep -oE '\b(REQ|REP|RTU|REJ|DREQ|DREP) [0-9]+' <<<"$cm_line" | awk '{n += $2} END {print n + 0}')
    ts_mads=$("$TSHARK" -r "$pcap" -Y 'infiniband.mad.mgmtclass == 0x07' 2>/dev/null | wc -l)
    ts_messages=$("$TSHARK" -r "$pcap" -Y "$cm_filter" 2>/dev/null | wc -l)
    ts_bad=$("$TSHARK" -r "$pcap" -Y 'infiniband.mad.mgmtclass == 0x07 && (_ws.malformed || _ws.expert.severity == error)' \
      2>/dev/null | wc -l)
    CHECK_NOTES+=" tshark-cm:${ts_messages}msg/${ts_mads}mad/${ts_bad}bad"
    if [ "$ts_mads" != "${cm_mads:-0}" ] || [ "$ts_messages" != "$cm_messages" ] || [ "$ts_bad" != 0 ]; then
      CHECK_NOTES+="(expected ${cm_messages}msg/${cm_mads:-0}mad)"
      rc=1
    fi
  fi
  if [ "$rc" != 0 ] && [ "${CAPTURE_DROPPED:-0}" -gt 0 ]; then
    CHECK_NOTES+=" (capture incomplete: tcpdump says the kernel dropped $CAPTURE_DROPPED)"
    rc=2
  fi
  CAPTURE_DROPPED=0
  return $rc
}
