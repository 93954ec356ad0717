#!/usr/bin/env bash
# uroce-nvmf-perf against Linux's NVMe-oF target (nvmet-rdma over rdma_rxe, in a QEMU guest of the rxe-peer
# harness), set up through configfs: one subsystem whose namespace is a brd RAM disk (the guest's stock kernel has
# nvmet, nvmet-rdma, brd and null_blk; brd keeps what is written, null_blk only with memory_backed), on an rdma port
# at the guest's address, port 4420. Each case is one uroce-nvmf-perf run with -V: every write carries a pattern
# naming its unit and generation, every read is checked, and after a run that wrote every unit written is read back
# and checked. Randread, randwrite and a 50/50 random mix, at queue depth 1 and 32, at each PMTU. Every packet is
# captured on the guest's tap and checked (check_capture.py; tshark when installed), and the guest's kernel log
# must have no nvmet error.
#
# usage: run_nvmet_interop.sh UROCE_NVMF_PERF
#
# Environment, besides harness.sh's: INTEROP_PMTUS (default "4096 1024"), INTEROP_DEPTHS (default "1 32"; at PMTU 1024
# INTEROP_DEPTHS_1024, default "32": what the smaller PMTU changes is how data is cut into packets, which depth 1 adds
# nothing to),
# INTEROP_WORKLOADS (default "randread randwrite randrw"), INTEROP_SECONDS (each run's measured time, default 2),
# INTEROP_SPAN_MB (the part of the namespace used, default 1: 256 units of 4 KiB, which a read run fills first).
set -euo pipefail

PERF=$(readlink -f "${1:?usage: run_nvmet_interop.sh UROCE_NVMF_PERF}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=../../tests/interop/harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"
PMTUS=${INTEROP_PMTUS:-4096 1024}
DEPTHS=${INTEROP_DEPTHS:-1 32}
DEPTHS_1024=${INTEROP_DEPTHS_1024:-32}
WORKLOADS=${INTEROP_WORKLOADS:-randread randwrite randrw}
SECONDS_PER_RUN=${INTEROP_SECONDS:-2}
SPAN_MB=${INTEROP_SPAN_MB:-1}
NQN=nqn.2026-11.io.uroce:nvmet0
NVMET=/sys/kernel/config/nvmet
RAM_DISK_MB=64

harness_require
[ -x "$PERF" ] || { log "no uroce-nvmf-perf at $PERF"; exit 1; }

g() { "$TOOLS/exec.sh" g1 --timeout "${G_TIMEOUT:-120}" "$@"; }

# Removes what nvmet_setup made (and what an aborted run left): the port's link, the port, the namespace, the
# subsystem. nvmet refuses to remove a port with a subsystem linked, or a subsystem with a namespace.
NVMET_TEARDOWN="rm -f $NVMET/ports/1/subsystems/$NQN 2>/dev/null; rmdir $NVMET/ports/1 2>/dev/null;
  echo 0 >$NVMET/subsystems/$NQN/namespaces/1/enable 2>/dev/null; rmdir $NVMET/subsystems/$NQN/namespaces/1 2>/dev/null;
  rmdir $NVMET/subsystems/$NQN 2>/dev/null; true"
nvmet_set_up=0
nvmet_setup() {
  g "$NVMET_TEARDOWN
    modprobe nvmet-rdma && modprobe brd rd_nr=1 rd_size=$((RAM_DISK_MB * 1024)) && [ -b /dev/ram0 ] &&
    mkdir $NVMET/subsystems/$NQN && echo 1 >$NVMET/subsystems/$NQN/attr_allow_any_host &&
    mkdir $NVMET/subsystems/$NQN/namespaces/1 &&
    echo -n /dev/ram0 >$NVMET/subsystems/$NQN/namespaces/1/device_path &&
    echo 1 >$NVMET/subsystems/$NQN/namespaces/1/enable &&
    mkdir $NVMET/ports/1 && echo rdma >$NVMET/ports/1/addr_trtype && echo ipv4 >$NVMET/ports/1/addr_adrfam &&
    echo \$RXE_IP >$NVMET/ports/1/addr_traddr && echo 4420 >$NVMET/ports/1/addr_trsvcid &&
    ln -s $NVMET/subsystems/$NQN $NVMET/ports/1/subsystems/$NQN &&
    dmesg | tail -2" >"$OUT/nvmet-setup.log" 2>&1
}
# A guest rebooted under a case (harness_case) comes back without the subsystem.
# shellcheck disable=SC2034 # read by harness.sh's harness_reboot
HARNESS_AFTER_REBOOT=nvmet_setup
nvmet_cleanup() {
  if [ "$nvmet_set_up" = 1 ]; then g "$NVMET_TEARDOWN" >/dev/null 2>&1 || true; fi
  harness_cleanup
}
trap nvmet_cleanup EXIT

# One uroce-nvmf-perf run against nvmet; a FAIL line names what went wrong.
run_case() {
  local pmtu=$1 depth=$2 workload=$3
  local name="nvmet-m$pmtu-q$depth-$workload"
  local pcap="$OUT/$name.pcap" ulog="$OUT/$name.uroce.log" glog="$OUT/$name.guest.log"
  local urc crc grc notes="" result attempt
  log "case $name"
  # A capture the kernel dropped packets from cannot be checked packet by packet (check_capture answers 2): the case
  # runs again, up to three times; after that it counts as not checked, the other checks still applying.
  for attempt in 1 2 3; do
    urc=0 crc=0 grc=0
    g "dmesg -C" >/dev/null 2>&1 || true
    "$TOOLS/capture.sh" start "$pcap" rxetap1 'udp port 4791 or arp' >/dev/null 2>&1 ||
      { log "capture.sh start failed"; return 1; }
    # uroce's ACK timeout is 18 (1.07 s) as in the other interop scripts: with the default 14 (67 ms) x 8 tries, the
    # TCG guest, which stalls for over half a second on a busy 2-core host (seen here mid-run), exhausts uroce's
    # retries. It costs time only when a packet is really lost.
    ip netns exec "$NS" timeout 120 "$PERF" "${UROCE_CONFIG_ARGS[@]}" --set "rdma.path_mtu=$pmtu" \
      --set rdma.ack_timeout=18 -r "trtype:RDMA adrfam:IPv4 traddr:$GUEST trsvcid:4420 subnqn:$NQN" -q "$depth" \
      -o 4096 -w "$workload" -t "$SECONDS_PER_RUN" --span-mb "$SPAN_MB" -V >"$ulog" 2>&1 || urc=$?
    stop_capture
    check_capture "$pcap" "$pmtu" "$name" || crc=$?
    # The guest's side: nvmet logs the controller it made; an error there fails the case.
    g "dmesg" >"$glog" 2>&1 || true
    if grep -iE 'nvmet.*(error|fail|invalid|bogus)|rxe.*(error|fail)' "$glog" >/dev/null; then grc=1; fi
    [ "$crc" = 2 ] || break
    log "  attempt $attempt: the capture is incomplete ($CHECK_NOTES)"
    notes+=" [attempt $attempt: capture incomplete]"
  done
  if [ "$crc" = 2 ]; then
    crc=0
    notes+=" [capture not checked: incomplete three times]"
  fi
  result=$(grep -m1 '^result:' "$ulog" || true)
  # The run must have done I/O and, with -V, checked reads (the read-back after writes included) without a mismatch.
  if [ "$urc" = 0 ] && { ! grep -q ' verify_errors=0$' <<<"$result" || grep -q ' verified=0 ' <<<"$result" ||
    grep -q ' ios=0 ' <<<"$result"; }; then
    urc=verify
  fi
  local verdict=PASS
  if [ "$urc" != 0 ] || [ "$crc" != 0 ] || [ "$grc" != 0 ]; then
    verdict=FAIL
    report_failure "$name" "uroce-nvmf-perf exit $urc, guest log $grc, capture check $crc" || true
    notes+=$FAILURE_NOTES
  fi
  summary+=("$(printf '%-4s nvmet-rdma target, PMTU %4s, QD %2s, %-9s: %s, uroce %s, guest %s, capture %s%s' \
    "$verdict" "$pmtu" "$depth" "$workload" \
    "$(sed -n 's/.* iops=\([0-9.]*\).* verified=\([0-9]*\) verify_errors=\([0-9]*\).*/\1 IOPS, \2 reads checked, \3 bad/p' \
      <<<"$result")" "$urc" "$grc" "$([ "$crc" = 0 ] && echo ok || echo FAIL)" "$CHECK_NOTES$notes")")
  log "  ${summary[-1]}"
}

start=$SECONDS
for pmtu in $PMTUS; do
  harness_for_cases "$pmtu" || continue
  if [ "$nvmet_set_up" = 0 ]; then
    if nvmet_setup; then
      nvmet_set_up=1
    else
      log "nvmet setup in the guest failed:"
      tail -5 "$OUT/nvmet-setup.log"
      failures=$((failures + 1))
      summary+=("FAIL nvmet configfs setup in the guest (see $OUT/nvmet-setup.log)")
      break
    fi
  fi
  depths=$DEPTHS
  [ "$pmtu" = 1024 ] && depths=$DEPTHS_1024
  for depth in $depths; do
    for workload in $WORKLOADS; do
      harness_case run_case "$pmtu" "$depth" "$workload" || {
        failures=$((failures + 1))
        summary+=("FAIL PMTU $pmtu QD $depth $workload: the case could not run")
      }
    done
  done
done
harness_summary "uroce-nvmf-perf <-> Linux nvmet-rdma target: interop summary, $((SECONDS - start)) s"
