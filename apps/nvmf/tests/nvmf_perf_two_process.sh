#!/usr/bin/env bash
# uroce-nvmf-perf against uroce-nvmf-target in two processes joined by DPDK's net_memif
# (config/examples/memif-two-process-{server,client}.yaml): the target serves its default RAM namespace on the
# server's address, the initiator runs a verified random mix (every read checked against what it wrote). The end is
# ordered for memif (DPDK 22.11's PMD crashes a process that polls while its peer disconnects): the initiator
# disconnects, stops polling and waits (--wait-pid) while the target is stopped and closes its end.
# usage: nvmf_perf_two_process.sh UROCE_NVMF_TARGET UROCE_NVMF_PERF PROJECT_ROOT
set -uo pipefail
target=$1
perf=$2
project=$3
read -r first_cpu last_cpu < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')
sock=/tmp/uroce-nvmf-memif-$$.sock
tlog=$(mktemp /tmp/uroce-nvmf-target.XXXXXX)
plog=$(mktemp /tmp/uroce-nvmf-perf.XXXXXX)
trap 'rm -f "$sock" "$tlog" "$plog"' EXIT
rm -f "$sock"
server_dev="net_memif0,role=server,id=0,socket=$sock,socket-abstract=no,bsize=8192"
client_dev="net_memif0,role=client,id=0,socket=$sock,socket-abstract=no,bsize=8192"

timeout 180 "$target" --config "$project/config/examples/memif-two-process-server.yaml" --device "$server_dev" \
  --lcores "$first_cpu" --set "eal.file_prefix=uroce-nvmf-t-$$" >"$tlog" 2>&1 &
tpid=$!
# The memif client connects once, when its port starts: let the server's socket exist first. The target's port
# comes up only then, so it listens a moment later; the initiator retries a refused connection meanwhile.
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done

timeout 150 "$perf" --config "$project/config/examples/memif-two-process-client.yaml" --device "$client_dev" \
  --lcores "$last_cpu" --set "eal.file_prefix=uroce-nvmf-p-$$" \
  -r 'trtype:RDMA adrfam:IPv4 traddr:198.18.1.1 trsvcid:4420 subnqn:nqn.2026-11.io.uroce:ram0' \
  -w randrw -M 50 -q 16 -o 4096 -t 3 -P 2 -V --span-mb 16 --wait-pid "$tpid" >"$plog" 2>&1 &
ppid=$!
# Once the initiator has stopped polling, the target may end (SIGTERM: it disconnects nothing, no host is left).
for _ in $(seq 3000); do grep -q 'engines stopped' "$plog" && break; kill -0 "$ppid" 2>/dev/null || break; sleep 0.05; done
kill -TERM "$tpid" 2>/dev/null
target_status=0
wait "$tpid" || target_status=$?
perf_status=0
wait "$ppid" || perf_status=$?
echo "--- uroce-nvmf-target:"
grep -v '^EAL\|^TELEMETRY' "$tlog"
echo "--- uroce-nvmf-perf:"
grep -v '^EAL\|^TELEMETRY' "$plog"
echo "=== perf exit $perf_status, target exit $target_status"
grep -q 'verify_errors=0' "$plog" && grep -q ' errors=0' "$plog" || perf_status=1
[ "$perf_status" -eq 0 ] && [ "$target_status" -eq 0 ]
