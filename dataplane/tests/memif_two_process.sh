#!/usr/bin/env bash
# Two processes, one engine each, joined by net_memif: RC WRITE/READ/SEND at the sizes
# around the PMTU, for PMTU 1024 and 4096 (dataplane/tests/rc_memif_peer.cc).
# usage: memif_two_process.sh RC_MEMIF_PEER
set -euo pipefail
peer=$1
status=0
for mtu in 1024 4096; do
  dir=$(mktemp -d /tmp/uroce-memif.XXXXXX)
  sock=/run/uroce-memif-test-$$.sock
  rm -f "$sock"
  "$peer" server --socket "$sock" --exchange "$dir" --mtu "$mtu" &
  server=$!
  # The memif client connects once, when its port starts: let the server's socket exist first.
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  client_status=0
  timeout 120 "$peer" client --socket "$sock" --exchange "$dir" --mtu "$mtu" || client_status=$?
  server_status=0
  wait "$server" || server_status=$?
  rm -rf "$dir" "$sock"
  echo "mtu $mtu: client exit $client_status, server exit $server_status"
  [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ] || status=1
done
exit $status
