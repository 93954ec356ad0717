#!/usr/bin/env bash
# uroce-rping against itself through connection management: a server and a client process joined by DPDK's
# net_memif (config/examples/memif-two-process-*.yaml), rping's SEND / RDMA READ / RDMA WRITE cycle validated
# (-V) at sizes below and above the path MTU, five connections in turn with nothing left behind (--repeat), then a
# connect to a port nobody listens on (refused at once).
# The same tool meets Linux's rping in the interop suite (apps/tests/interop/run_rping_interop.sh).
#
# usage: rping_memif.sh UROCE_RPING CONFIG_DIR
set -uo pipefail
RPING=${1:?usage: rping_memif.sh UROCE_RPING CONFIG_DIR}
CONFIGS=${2:?usage: rping_memif.sh UROCE_RPING CONFIG_DIR}
WORK=$(mktemp -d /tmp/uroce-rping-memif.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid"; wait "$server_pid"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# The engines on the first and the last CPU this test may use (the same one under taskset -c N).
read -r first_cpu last_cpu < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')
failures=0

# run NAME "SERVER OPTIONS" "CLIENT OPTIONS" EXPECT: EXPECT is "pings N" or "refused"
run() {
  local name=$1 server_opts=$2 client_opts=$3 expect=$4 src=0 crc=0
  local socket=$WORK/$name.sock
  # shellcheck disable=SC2086 # the option strings are word lists
  "$RPING" --config "$CONFIGS/memif-two-process-server.yaml" --set "eal.file_prefix=rp-s-$$-$name" \
    --lcores "$first_cpu" --device "net_memif0,role=server,id=0,socket=$socket,socket-abstract=no,bsize=8192" \
    --timeout 30 -s $server_opts >"$WORK/$name.server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  # shellcheck disable=SC2086
  timeout -k 5 60 "$RPING" --config "$CONFIGS/memif-two-process-client.yaml" --set "eal.file_prefix=rp-c-$$-$name" \
    --lcores "$last_cpu" --device "net_memif0,role=client,id=0,socket=$socket,socket-abstract=no,bsize=8192" \
    --timeout 30 -c -a 198.18.1.1 --connect-retries 100 $client_opts >"$WORK/$name.client.log" 2>&1 || crc=$?
  local ok=0
  if [ "$expect" = refused ]; then
    kill "$server_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    [ "$crc" = 1 ] && grep -q 'STATUS_CONNECTION_REFUSED' "$WORK/$name.client.log" && ok=1
  else
    wait "$server_pid" || src=$?
    local pings=${expect#pings }
    [ "$src" = 0 ] && [ "$crc" = 0 ] &&
      [ "$(grep -c '^ping data: rdma-ping-' "$WORK/$name.client.log")" = "$pings" ] &&
      [ "$(grep -c '^server ping data: rdma-ping-' "$WORK/$name.server.log")" = "$pings" ] && ok=1
  fi
  server_pid=""
  if [ "$ok" = 1 ]; then
    echo "PASS $name"
  else
    echo "FAIL $name: server exit $src, client exit $crc"
    grep -v '^EAL\|^TELEMETRY' "$WORK/$name.server.log" | tail -5 | sed 's/^/  server: /'
    grep -v '^EAL\|^TELEMETRY' "$WORK/$name.client.log" | tail -5 | sed 's/^/  client: /'
    failures=$((failures + 1))
  fi
}

run small-m1024 "-V -v --set rdma.path_mtu=1024" "-C 20 -V -v -S 64 --set rdma.path_mtu=1024" "pings 20"
run large-m1024 "-V -v -S 5000 --set rdma.path_mtu=1024" "-C 20 -V -v -S 5000 --set rdma.path_mtu=1024" "pings 20"
run large-m4096 "-V -v -S 16384" "-C 20 -V -v -S 16384" "pings 20"
# Five connections in turn, each side checking at the end that its adapter holds what it held before.
run repeat "-V -v --repeat 5" "-C 4 -V -v --repeat 5" "pings 20"
# The server is up (its adapter opened with the client's) long before the client gives up: a refusal on the
# wrong port is the CM's answer, not a server still starting.
run refused "-p 7174" "-p 9999 -C 1 --connect-retries 3" refused
[ "$failures" = 0 ]
