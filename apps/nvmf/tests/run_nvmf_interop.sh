#!/usr/bin/env bash
# uroce-nvmf-target against Linux's NVMe-oF host (nvme-rdma over rdma_rxe, in a QEMU guest of the rxe-peer
# harness): nvme discover; nvme connect with two I/O queues (the guest's one CPU gives one); fio random read/write
# with crc32c verification over 64 MiB in two jobs; a file system (ext4, or minix where the guest lacks e2fsprogs)
# with files written, unmounted, disconnected, reconnected and checked by sha256;
# nvme disconnect. Every packet is captured on the guest's tap and checked (check_capture.py; tshark when installed).
#
# usage: run_nvmf_interop.sh UROCE_NVMF_TARGET
#
# Environment, besides harness.sh's: INTEROP_PMTUS (default "4096"), INTEROP_FIO_SIZE (per job, two jobs; default 32M),
# INTEROP_QUEUE_SIZE (default "32 128": one connect per size), INTEROP_FILE_BYTES (the file system's four files are
# 1, 2, 3 and 4 times this; default 3000000).
set -uo pipefail

TARGET=$(readlink -f "${1:?usage: run_nvmf_interop.sh UROCE_NVMF_TARGET}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=../../tests/interop/harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
PMTUS=${INTEROP_PMTUS:-4096}
FIO_SIZE=${INTEROP_FIO_SIZE:-32M}
QUEUE_SIZES=${INTEROP_QUEUE_SIZE:-32 128}
FILE_BYTES=${INTEROP_FILE_BYTES:-3000000}
NQN=nqn.2026-11.io.uroce:ram0

harness_require
[ -x "$TARGET" ] || { log "no uroce-nvmf-target at $TARGET"; exit 1; }

g() { "$TOOLS/exec.sh" g1 --timeout "${G_TIMEOUT:-120}" "$@"; }

# One step of a case: its output goes to the case's guest log; a failure is remembered with the step's name.
# G_WATCH=SECONDS runs a long step under guest_run_watched. Once the guest's NIC has hung (guest_nic_hung), the
# case's remaining steps are skipped: harness_case reruns the case on a fresh guest.
step() {
  local what=$1 rc=0
  shift
  if [ "$guest_hung" = 1 ]; then
    failed_steps+=" $what(skipped)"
    return 1
  fi
  echo "### $what: $*" >>"$glog"
  if [ -n "${G_WATCH:-}" ]; then
    guest_run_watched "$G_WATCH" "$*" >>"$glog" 2>&1 || rc=$?
  else
    g "$*" >>"$glog" 2>&1 || rc=$?
  fi
  [ "$rc" = 0 ] && return 0
  log "  step failed: $what"
  failed_steps+=" $what"
  if [ "$rc" = 125 ] || guest_nic_hung >>"$glog"; then
    log "  the guest's NIC has hung: skipping the case's other steps"
    guest_hung=1
  fi
  return 1
}

# The guest's block device of our subsystem, once connected.
device_of() {
  g "for d in /sys/class/nvme/nvme*; do [ \"\$(cat \$d/subsysnqn 2>/dev/null)\" = $NQN ] && ls -d \$d/nvme*n1 2>/dev/null; done" |
    head -1 | xargs -r basename
}

run_case() {
  local pmtu=$1 qsize=$2
  local name="nvmf-m$pmtu-q$qsize"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log"
  glog="$OUT/$name.guest.log"
  failed_steps=""
  guest_hung=0
  local urc=0 crc=0 notes=""
  log "case $name"
  "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
    { log "capture.sh start failed"; return 1; }
  ip netns exec "$NS" "$TARGET" "${UROCE_CONFIG_ARGS[@]}" --set "rdma.path_mtu=$pmtu" >"$ulog" 2>&1 &
  uroce_pid=$!
  wait_for_output "$ulog" 'listening on' "$uroce_pid" 300
  step modprobe "modprobe nvme-rdma"
  step discover "nvme discover -t rdma -a $UROCE_IP -s 4420 | tee /dev/stderr | grep -q 'subnqn: *$NQN'"
  local dev=""
  if step connect "nvme connect -t rdma -a $UROCE_IP -s 4420 -n $NQN -i 2 -Q $qsize -k 5"; then
    for _ in $(seq 50); do dev=$(device_of); [ -n "$dev" ] && break; sleep 0.2; done
    [ -n "$dev" ] || { failed_steps+=" no-device"; log "  no block device appeared"; }
  fi
  if [ -n "$dev" ]; then
    G_WATCH=600 step fio "fio --name=verify --filename=/dev/$dev --ioengine=libaio --direct=1 --bs=4k \
      --iodepth=16 --numjobs=2 --size=$FIO_SIZE --offset_increment=$FIO_SIZE --rw=randrw --rwmixread=50 \
      --verify=crc32c --verify_fatal=1 --verify_backlog=256 --group_reporting"
    # ext4 where the guest has e2fsprogs; the rxe-peer image has only util-linux's mkfs.minix (and the module).
    step mkfs "if command -v mkfs.ext4 >/dev/null; then mkfs.ext4 -q -F /dev/$dev; else modprobe minix &&
      mkfs.minix -3 /dev/$dev >/dev/null; fi && mkdir -p /mnt/nvmf && mount /dev/$dev /mnt/nvmf &&
      for i in 1 2 3 4; do head -c \$((i * $FILE_BYTES)) /dev/urandom >/mnt/nvmf/f\$i; done &&
      (cd /mnt/nvmf && sha256sum f* >/tmp/nvmf.sha256) && umount /mnt/nvmf"
    step disconnect "nvme disconnect -n $NQN"
    step reconnect "nvme connect -t rdma -a $UROCE_IP -s 4420 -n $NQN -i 2 -Q $qsize -k 5" &&
      for _ in $(seq 50); do dev=$(device_of); [ -n "$dev" ] && break; sleep 0.2; done
    step files-survive "mount /dev/$dev /mnt/nvmf && (cd /mnt/nvmf && sha256sum -c /tmp/nvmf.sha256) && umount /mnt/nvmf"
    step disconnect-again "nvme disconnect -n $NQN"
  fi
  # (A guest whose NIC hung is rebooted instead.)
  [ "$guest_hung" = 1 ] || g "nvme disconnect -n $NQN >/dev/null 2>&1; umount /mnt/nvmf 2>/dev/null; true" >/dev/null 2>&1
  kill -TERM "$uroce_pid" 2>/dev/null
  wait "$uroce_pid" || urc=$?
  uroce_pid=""
  stop_capture
  check_capture_if_complete "$pcap" "$pmtu" "$name" || crc=1
  local verdict=PASS
  if [ -n "$failed_steps" ] || [ "$urc" != 0 ] || [ "$crc" != 0 ]; then
    verdict=FAIL
    report_failure "$name" "failed steps:${failed_steps:- none}; uroce exit $urc, capture check $crc"
    notes+=$FAILURE_NOTES
  fi
  summary+=("$(printf '%-4s nvme-rdma host, PMTU %4s, queue size %3s: steps%s, uroce %s, capture %s%s' "$verdict" \
    "$pmtu" "$qsize" "${failed_steps:- all ok}" "$urc" "$([ "$crc" = 0 ] && echo ok || echo FAIL)" \
    "$CHECK_NOTES$notes")")
  log "  ${summary[-1]}"
}

start=$SECONDS
for pmtu in $PMTUS; do
  harness_for_cases "$pmtu" || continue
  for qsize in $QUEUE_SIZES; do harness_case run_case "$pmtu" "$qsize"; done
done
harness_summary "uroce-nvmf-target <-> Linux nvme-rdma host: interop summary, $((SECONDS - start)) s"
