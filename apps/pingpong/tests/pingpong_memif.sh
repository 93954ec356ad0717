#!/usr/bin/env bash
# uroce-pingpong against itself: two processes joined by DPDK's net_memif, with ibv_rc_pingpong's TCP exchange on
# 127.0.0.1, in both data-check modes and around the path MTU. The same exchange and ping-pong run against
# rdma-core's ibv_rc_pingpong in the interop suite (apps/tests/interop/run_pingpong_interop.sh).
#
# usage: pingpong_memif.sh UROCE_PINGPONG CONFIG_DIR
set -uo pipefail
PINGPONG=${1:?usage: pingpong_memif.sh UROCE_PINGPONG CONFIG_DIR}
CONFIGS=${2:?usage: pingpong_memif.sh UROCE_PINGPONG CONFIG_DIR}
WORK=$(mktemp -d /tmp/uroce-pingpong-memif.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid"; wait "$server_pid"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
# ACK timeout 18 (1.07 s) x 8 tries rather than ibv_rc_pingpong's 14 (67 ms): a peer process starved of its CPU
# for half a second (ASan on a loaded 2-CPU machine: seen) must not fail the case; the timeout paths have their own
# tests (loopback fault injection, the soak).
ack_timeout="--ack-timeout 18"
# A TCP port of its own per run, so a concurrent run of this test on the machine can't answer.
tcp_port=$((20000 + $$ % 20000))
# The examples put the server's engine on CPU 0 and the client's on CPU 1; use the first and the last CPU this
# test may run on instead (the same one under taskset -c N), since an engine outside the affinity is an error.
read -r first_cpu last_cpu < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')

# run NAME PMTU SIZE ITERS "SERVER OPTIONS" "CLIENT OPTIONS"
run() {
  local name=$1 pmtu=$2 size=$3 iters=$4 server_opts=$5 client_opts=$6 src=0 crc=0
  local socket=$WORK/$name.sock
  tcp_port=$((tcp_port + 1))
  # shellcheck disable=SC2086 # the option strings are word lists
  "$PINGPONG" --config "$CONFIGS/memif-two-process-server.yaml" --set "eal.file_prefix=pp-s-$$-$name" --lcores "$first_cpu" \
    --device "net_memif0,role=server,id=0,socket=$socket,socket-abstract=no,bsize=8192" \
    --bind 127.0.0.1 -p "$tcp_port" -m "$pmtu" -s "$size" -n "$iters" --timeout 30 --linger 300 $ack_timeout $server_opts \
    >"$WORK/$name.server.log" 2>&1 &
  server_pid=$!
  # The server's adapter waits for the memif link, so start the client once the memif socket exists; the
  # client retries its TCP connect until the server listens.
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  # shellcheck disable=SC2086
  timeout 90 "$PINGPONG" --config "$CONFIGS/memif-two-process-client.yaml" --set "eal.file_prefix=pp-c-$$-$name" --lcores "$last_cpu" \
    --device "net_memif0,role=client,id=0,socket=$socket,socket-abstract=no,bsize=8192" \
    -p "$tcp_port" -m "$pmtu" -s "$size" -n "$iters" --timeout 30 --linger 600 $ack_timeout $client_opts 127.0.0.1 \
    >"$WORK/$name.client.log" 2>&1 || crc=$?
  wait "$server_pid" || src=$?
  server_pid=""
  if [ "$src" = 0 ] && [ "$crc" = 0 ] && grep -q ': ok$' "$WORK/$name.server.log" &&
    grep -q ': ok$' "$WORK/$name.client.log"; then
    echo "PASS $name: $(grep 'usec/iter' "$WORK/$name.client.log")"
  else
    echo "FAIL $name: server exit $src, client exit $crc"
    sed 's/^/  server: /' "$WORK/$name.server.log" | grep -v EAL | tail -8
    sed 's/^/  client: /' "$WORK/$name.client.log" | grep -v EAL | tail -8
    failures=$((failures + 1))
  fi
}

# As ibv_rc_pingpong -c on both ends: the server checks every byte it receives.
run chk-m1024-s4096 1024 4096 200 "-c --strict" "-c"
# A different pattern in every message, checked in the echo; sizes around the PMTU.
run pattern-m1024-s1025 1024 1025 200 "-c" "-c --pattern"
run pattern-m4096-s4096 4096 4096 200 "" "--pattern"
run pattern-m4096-s5000 4096 5000 200 "" "--pattern"
# A server whose receives come late: the client's first SEND meets RNR NAKs and is retried.
run rnr-m1024-s4096 1024 4096 20 "--rnr-delay 200" "--pattern"

[ "$failures" = 0 ]
