#!/usr/bin/env bash
# uroce-nvmf-target's recovery against Linux's NVMe-oF host (nvme-rdma over rdma_rxe, in a QEMU guest of the rxe-peer
# harness), with a file namespace (the file backend), three cases:
#   restart-reconnect  a file system written through the target, the host disconnected, the target stopped (SIGTERM)
#                      and started again on the same file, the host connected again: the files' sha256 match.
#   restart-live       the target stopped and started again under a connected host with the file system mounted; the
#                      host reconnects by itself (nvme connect --reconnect-delay 1 --ctrl-loss-tmo 60); after the page
#                      cache is dropped the files read back through the new target process match, and a file written
#                      after the reconnect survives a remount.
#   keep-alive         the host goes silent (the guest drops every RoCE packet it sends, tc at its NIC's egress); the
#                      target must tear the controller down after the keep-alive timeout and close its queues (its
#                      --progress line: no queue open, no controller held, one keep-alive expiry); traffic restored,
#                      the host reconnects and fio verifies writes through the new controller.
# The guest's traffic is captured on its tap, one capture per target process, and checked (check_capture.py;
# tshark when installed). A step that fails names itself in the case's FAIL line.
#
# usage: run_nvmf_recovery_interop.sh UROCE_NVMF_TARGET
#
# Environment, besides harness.sh's: INTEROP_PMTU (default 4096), INTEROP_KATO (the host's keep-alive timeout in
# seconds, default 15), INTEROP_CASES (a regular expression over the case names, default all).
set -euo pipefail

TARGET=$(readlink -f "${1:?usage: run_nvmf_recovery_interop.sh UROCE_NVMF_TARGET}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=../../tests/interop/harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
PMTU=${INTEROP_PMTU:-4096}
# 15 s: under a load average of 20 on 2 CPUs the TCG guest's keep-alive round trips reached 4.7 s, and a 5 s KATO
# expired on hosts that were not silent.
KATO=${INTEROP_KATO:-15}
NQN=nqn.2026-11.io.uroce:file0
NS_FILE=$OUT/recovery-ns1.img
CONFIG=$OUT/recovery-target.yaml
# The host retries every second (--reconnect-delay 1); it reconnected within 3 s of the target's start on an idle
# machine and within 35 s under a load average of 25 (one attempt, its address resolution waiting on a target that
# was down).
RECONNECT_DEADLINE=120
CONNECT="nvme connect -t rdma -a $UROCE_IP -s 4420 -n $NQN -i 1 -Q 32 -k $KATO"

harness_require
[ -x "$TARGET" ] || { log "no uroce-nvmf-target at $TARGET"; exit 1; }

# The target's configuration: one subsystem with a 64 MiB file namespace (the port's device and address come from
# harness.sh's command-line options). The engine backs off when idle, as the other interop scripts' tools do (the
# embedded default's setting; a configuration file's default is to busy-poll): a busy-polling target held most of
# one of the 2 CPUs that the TCG guest it waits on needs.
rm -f "$NS_FILE"
cat >"$CONFIG" <<EOF
ports:
  - name: veth
    device: $UROCE_DEVICE
    addresses: [$UROCE_IP/24]
    mtu: 4200
engine:
  idle: backoff
nvmf:
  subsystems:
    - nqn: $NQN
      namespaces:
        - {nsid: 1, file: $NS_FILE, size_mb: 64, block_size: 512}
EOF

g() { "$TOOLS/exec.sh" g1 --timeout "${G_TIMEOUT:-120}" "$@"; }

# One step of a case: its output goes to the case's guest log; a failure is remembered with the step's name.
step() {
  local what=$1
  shift
  printf '### %(%T)T %s: %s\n' -1 "$what" "$*" >>"$glog"
  if ! g "$*" >>"$glog" 2>&1; then
    log "  step failed: $what"
    failed_steps+=" $what"
    return 1
  fi
}
fail_step() {  # a step checked on this side
  log "  step failed: $1${2:+ ($2)}"
  failed_steps+=" $1"
  return 1
}

# The guest's controller (nvmeN) and block device (nvmeNn1, the multipath head) of our subsystem.
GUEST_CTRL="for d in /sys/class/nvme/nvme*; do [ \"\$(cat \$d/subsysnqn 2>/dev/null)\" = $NQN ] && basename \$d; done | head -1"
GUEST_DEV="for d in /sys/block/nvme*n1; do [ \"\$(cat \$d/device/subsysnqn 2>/dev/null)\" = $NQN ] && basename \$d; done | head -1"
device_of() {  # within 60 s of the connect
  g "for i in \$(seq 300); do d=\$($GUEST_DEV); [ -n \"\$d\" ] && { echo \$d; exit 0; }; sleep 0.2; done; exit 1" \
    2>/dev/null || true
}
# wait_controller STATE SECONDS: the guest's controller of our subsystem reaches STATE ('live', or '!live' for any
# other) within SECONDS; waits in the guest, one poll every 0.2 s.
wait_controller() {
  local want=$1 seconds=$2
  g "c=\$($GUEST_CTRL); [ -n \"\$c\" ] || exit 1
    for i in \$(seq $((seconds * 5))); do s=\$(cat /sys/class/nvme/\$c/state 2>/dev/null)
      case $want in '!'*) [ \"\$s\" != ${want#!} ] && { echo \$c \$s; exit 0; } ;; *) [ \"\$s\" = $want ] && { echo \$c \$s; exit 0; } ;; esac
      sleep 0.2; done; echo \$c still \$s; exit 1"
}

# start_target LOG: starts the target on the namespace file (kept across starts); it prints a status line every
# second (--progress 1), which the keep-alive case reads.
start_target() {
  local tlog=$1
  ip netns exec "$NS" "$TARGET" --config "$CONFIG" "${UROCE_CONFIG_ARGS[@]}" --set "rdma.path_mtu=$PMTU" \
    --set rdma.ack_timeout=18 --progress 1 >"$tlog" 2>&1 &
  uroce_pid=$!
  wait_for_output "$tlog" 'listening on' "$uroce_pid" 300
  grep -q 'listening on' "$tlog" || fail_step target-start "$(grep -v '^EAL\|^TELEMETRY' "$tlog" | tail -1)"
}
# stop_target: SIGTERM, as an operator stops it; a non-zero exit is a failed step.
stop_target() {
  local rc=0
  [ -n "$uroce_pid" ] || return 0
  kill -TERM "$uroce_pid" 2>/dev/null || true
  wait "$uroce_pid" || rc=$?
  uroce_pid=""
  [ "$rc" = 0 ] || fail_step target-exit "exit $rc"
}
# A capture per target process: capture_start NAME.N; capture_stop_and_check NAME.N (a failed check is remembered).
capture_start() {
  "$TOOLS/capture.sh" start "$OUT/$1.pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 || fail_step capture-start
}
capture_checks=""
capture_stop_and_check() {
  stop_capture
  if check_capture_if_complete "$OUT/$1.pcap" "$PMTU" "$1"; then
    capture_checks+=" ${1##*.}:ok$CHECK_NOTES"
  else
    capture_checks+=" ${1##*.}:FAIL$CHECK_NOTES"
    failed_steps+=" capture-$1"
  fi
}
guest_cleanup() {
  g "tc qdisc del dev \$RXE_IF clsact 2>/dev/null; umount /mnt/nvmf 2>/dev/null; nvme disconnect -n $NQN >/dev/null 2>&1; true" \
    >/dev/null 2>&1 || true
}

FILES="for i in 1 2 3 4; do head -c \$((i * 400000)) /dev/urandom >/mnt/nvmf/f\$i; done"

case_restart_reconnect() {
  local name=$1 dev
  capture_start "$name.1"
  start_target "$OUT/$name.1.uroce.log" || return
  step modprobe "modprobe nvme-rdma && modprobe minix" || return
  step connect "$CONNECT" || return
  dev=$(device_of)
  [ -n "$dev" ] || { fail_step device; return; }
  step write-files "mkfs.minix -3 /dev/$dev >/dev/null && mkdir -p /mnt/nvmf && mount /dev/$dev /mnt/nvmf &&
    $FILES && sync && (cd /mnt/nvmf && sha256sum f* >/tmp/recovery.sha256) && umount /mnt/nvmf" || return
  step disconnect "nvme disconnect -n $NQN" || return
  stop_target || return
  capture_stop_and_check "$name.1"
  capture_start "$name.2"
  start_target "$OUT/$name.2.uroce.log" || return
  step reconnect "$CONNECT" || return
  dev=$(device_of)
  [ -n "$dev" ] || { fail_step device-again; return; }
  step files-survive "mount /dev/$dev /mnt/nvmf && (cd /mnt/nvmf && sha256sum -c /tmp/recovery.sha256) && umount /mnt/nvmf" ||
    return
  step disconnect-again "nvme disconnect -n $NQN" || return
  stop_target || return
  capture_stop_and_check "$name.2"
}

case_restart_live() {
  local name=$1 dev
  capture_start "$name.1"
  start_target "$OUT/$name.1.uroce.log" || return
  step modprobe "modprobe nvme-rdma && modprobe minix" || return
  step connect "$CONNECT --reconnect-delay 1 --ctrl-loss-tmo 60" || return
  dev=$(device_of)
  [ -n "$dev" ] || { fail_step device; return; }
  # The previous case's file system when it ran, else a new one.
  step write-files "mkdir -p /mnt/nvmf && { mount /dev/$dev /mnt/nvmf 2>/dev/null ||
      { mkfs.minix -3 /dev/$dev >/dev/null && mount /dev/$dev /mnt/nvmf; }; } &&
    head -c 1500000 /dev/urandom >/mnt/nvmf/live1 && sync && (cd /mnt/nvmf && sha256sum * >/tmp/live.sha256)" || return
  stop_target || return  # under the mounted file system
  capture_stop_and_check "$name.1"
  wait_controller '!live' 30 >>"$glog" 2>&1 || fail_step host-notices || return
  capture_start "$name.2"
  start_target "$OUT/$name.2.uroce.log" || return
  wait_controller live "$RECONNECT_DEADLINE" >>"$glog" 2>&1 || fail_step host-reconnects || return
  # Dropping the page cache makes the reads go to the new target process.
  # The guest's rxe sometimes fails a fast-reg MR under load ("rxe_reg_fast_mr: mr->lkey ... not free"): the host
  # then times the I/O out (30 s) and recovers by itself; the step waits for it.
  G_TIMEOUT=300 step files-after-restart "sync && echo 3 >/proc/sys/vm/drop_caches && (cd /mnt/nvmf && sha256sum -c /tmp/live.sha256)" ||
    return
  G_TIMEOUT=300 step write-after-restart "head -c 700000 /dev/urandom >/mnt/nvmf/live2 && sync &&
    (cd /mnt/nvmf && sha256sum * >/tmp/live.sha256) && umount /mnt/nvmf && mount /dev/$dev /mnt/nvmf &&
    (cd /mnt/nvmf && sha256sum -c /tmp/live.sha256) && umount /mnt/nvmf" || return
  step disconnect "nvme disconnect -n $NQN" || return
  stop_target || return
  capture_stop_and_check "$name.2"
}

# The target's last --progress line ("... N queues open, M controllers held, K keep-alive expired, E errors").
last_progress() { grep 'queues open' "$1" | tail -1; }
# wait_target_state LOG SECONDS REGEX: the target's progress line matches REGEX within SECONDS.
wait_target_state() {
  local tlog=$1 seconds=$2 regex=$3 deadline=$((SECONDS + $2))
  while [ "$SECONDS" -le "$deadline" ]; do
    last_progress "$tlog" | grep -qE "$regex" && return 0
    kill -0 "$uroce_pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

case_keep_alive() {
  local name=$1
  local dev tlog="$OUT/$name.uroce.log" t0 t_expired t_closed
  capture_start "$name.1"
  start_target "$tlog" || return
  step modprobe "modprobe nvme-rdma" || return
  step connect "$CONNECT --reconnect-delay 1 --ctrl-loss-tmo 120" || return
  dev=$(device_of)
  [ -n "$dev" ] || { fail_step device; return; }
  step read "dd if=/dev/$dev of=/dev/null bs=4k count=64 iflag=direct status=none" || return
  wait_target_state "$tlog" 20 ' 2 queues open, 1 controllers held, 0 keep-alive expired' ||
    fail_step target-connected "$(last_progress "$tlog")" || return
  # Silence: every RoCE packet the guest sends is dropped at its NIC's egress (before the tap: not in the capture).
  t0=$SECONDS
  step silence "tc qdisc add dev \$RXE_IF clsact &&
    tc filter add dev \$RXE_IF egress protocol ip prio 1 u32 match ip dport 4791 0xffff action drop" || return
  # KATO, plus the target's granularity and the specification's grace; then the queues close once their CM
  # disconnects time out (the host's DREPs are dropped too).
  wait_for_output "$tlog" 'keep-alive timeout' "$uroce_pid" $(((KATO * 3 + 10) * 10))
  grep -q 'keep-alive timeout' "$tlog" || fail_step keep-alive-expiry "$(last_progress "$tlog")" || return
  t_expired=$((SECONDS - t0))
  wait_target_state "$tlog" 90 ' 0 queues open, 0 controllers held, 1 keep-alive expired' ||
    fail_step target-freed "$(last_progress "$tlog")" || return
  t_closed=$((SECONDS - t0))
  log "  silent host: the controller was torn down after ~${t_expired} s and its queues closed after ~${t_closed} s"
  step restore "tc qdisc del dev \$RXE_IF clsact" || return
  wait_controller live "$RECONNECT_DEADLINE" >>"$glog" 2>&1 || fail_step host-reconnects || return
  wait_target_state "$tlog" 20 ' 2 queues open, 1 controllers held, 1 keep-alive expired' ||
    fail_step target-reconnected "$(last_progress "$tlog")" || return
  G_TIMEOUT=300 step fio-after "fio --name=after --filename=/dev/$dev --ioengine=libaio --direct=1 --bs=4k --iodepth=8 \
    --size=1M --rw=randwrite --verify=crc32c --verify_fatal=1 --do_verify=1" || return
  step disconnect "nvme disconnect -n $NQN" || return
  stop_target || return
  grep -q 'keep-alive expired 1$' "$tlog" || fail_step target-counters "$(grep 'stopping:' "$tlog")" || return
  capture_stop_and_check "$name.1"
}

run_case() {
  local name=$1
  [[ $name =~ ${INTEROP_CASES:-.} ]] || return 0
  glog="$OUT/$name.guest.log"
  failed_steps=""
  capture_checks=""
  log "case $name"
  local t0=$SECONDS
  "case_${name//-/_}" "$name" || true
  # Whatever a failed step left: the host's state in the guest, the target, the capture.
  if [ -n "$failed_steps" ]; then
    g "dmesg | grep -iE 'nvme|rdma' | tail -20" >>"$glog" 2>&1 || true
  fi
  guest_cleanup
  if [ -n "$uroce_pid" ]; then stop_target || true; fi
  "$TOOLS/capture.sh" stop >>"$OUT/capture.log" 2>&1 || true
  local verdict=PASS notes=""
  if [ -n "$failed_steps" ]; then
    verdict=FAIL
    # report_failure reads NAME.uroce.log and NAME.check.log: the per-process ones, together.
    cat "$OUT/$name".[0-9].uroce.log >>"$OUT/$name.uroce.log" 2>/dev/null || true
    cat "$OUT/$name".[0-9].check.log >"$OUT/$name.check.log" 2>/dev/null || true
    report_failure "$name" "failed steps:$failed_steps" || true
    notes=$FAILURE_NOTES
  fi
  summary+=("$(printf '%-4s nvme-rdma host, %-17s PMTU %4s: %3d s, steps %s, captures%s%s' "$verdict" "$name" "$PMTU" \
    $((SECONDS - t0)) "${failed_steps:-all ok}" "${capture_checks:- none}" "$notes")")
  log "  ${summary[-1]}"
}

start=$SECONDS
if harness_for_cases "$PMTU"; then
  for c in restart-reconnect restart-live keep-alive; do harness_case run_case "$c"; done
fi
harness_summary "uroce-nvmf-target recovery <-> Linux nvme-rdma host: interop summary, $((SECONDS - start)) s"
