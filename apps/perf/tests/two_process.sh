#!/usr/bin/env bash
# uroce-perf as perftest's server and client in two processes: the exchange runs over TCP on 127.0.0.1, the RoCE
# traffic over DPDK's net_memif between the processes (config/examples/memif-two-process-*.yaml), so CI
# exercises perftest's exchange end to end without QEMU. Both sides check the data they receive (--verify).
# usage: two_process.sh UROCE_PERF PROJECT_ROOT
set -uo pipefail
perf=$1
project=$2
port=$((20000 + $$ % 20000))
status=0
# The examples put the server's engine on CPU 0 and the client's on CPU 1; use the first and the last CPU this
# test may run on instead (the same one under taskset -c N), since an engine outside the affinity is an error.
read -r first_cpu last_cpu < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')
# mode, then the test options both sides get
cases=(
  "write_bw -s 65536 -n 2000"
  "read_bw -s 5000 -n 2000 -m 1024"
  "send_bw -s 4096 -n 2000 -q 2"
  "send_bw -a -n 20"
  "write_lat -s 64 -n 500"
  "read_lat -s 4096 -n 300"
  "send_lat -s 1500 -n 300 -m 1024"
)
for c in "${cases[@]}"; do
  sock=/tmp/uroce-perf-memif-$$.sock
  rm -f "$sock"
  # Each process needs its own hugepage file prefix; the example configurations' fixed ones would collide with any
  # other run of them on this machine (a second copy of this test, a developer's), so make them unique.
  server_dev="net_memif0,role=server,id=0,socket=$sock,socket-abstract=no,bsize=8192"
  client_dev="net_memif0,role=client,id=0,socket=$sock,socket-abstract=no,bsize=8192"
  slog=$(mktemp /tmp/uroce-perf-server.XXXXXX)
  # shellcheck disable=SC2086
  timeout 120 "$perf" $c --verify --timeout 60 --set rdma.ack_timeout=18 -p "$port" \
    --config "$project/config/examples/memif-two-process-server.yaml" --device "$server_dev" \
    --lcores "$first_cpu" --set "eal.file_prefix=uroce-perf-s-$$" >"$slog" 2>&1 &
  server=$!
  # The memif client connects once, when its port starts: let the server's socket exist first. (The server's port
  # comes up only then, so it listens for the exchange after that; the client retries its TCP connect.)
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  client_status=0
  # shellcheck disable=SC2086
  timeout 120 "$perf" $c --verify --timeout 60 --set rdma.ack_timeout=18 -p "$port" \
    --config "$project/config/examples/memif-two-process-client.yaml" --device "$client_dev" \
    --lcores "$last_cpu" --set "eal.file_prefix=uroce-perf-c-$$" 127.0.0.1 ||
    client_status=$?
  server_status=0
  wait "$server" || server_status=$?
  echo "--- server side of '$c':"
  grep -v '^EAL\|^TELEMETRY' "$slog"
  rm -f "$slog" "$sock"
  echo "=== $c: client exit $client_status, server exit $server_status"
  [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ] || status=1
done
exit $status
