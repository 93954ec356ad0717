#!/bin/bash
# uroce-stat against a live uroce-perf: an in-process write_bw run (both ends in one process) long enough to attach
# to. Its tables, its counters view, its JSON and one watch interval must show the run's ports, engines and QPs with
# real, nonzero counters. Nothing here depends on speed: we poll until traffic shows, within a generous deadline,
# and stop the run ourselves.
set -euo pipefail
stat=$1
perf=$2
prefix="uroce-stat-test-$$"
work=$(mktemp -d)
"$perf" write_bw --in-process -s 4096 -D 600 --set "eal.file_prefix=$prefix" >"$work/perf.log" 2>&1 &
perf_pid=$!
cleanup() {
  kill "$perf_pid" 2>/dev/null || true
  wait "$perf_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- uroce-perf's output:" >&2
  cat "$work/perf.log" >&2
  exit 1
}

# Until the run's QPs exist and data has moved (the connection is set up after the EAL starts).
ready=""
for _ in $(seq 1 240); do
  kill -0 "$perf_pid" 2>/dev/null || fail "uroce-perf exited early"
  if "$stat" -p "$prefix" --json >"$work/snapshot.json" 2>"$work/stat.err" &&
    python3 - "$work/snapshot.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
qps = [q for q in s["qps"] if q["state"] == "RTS" and q["sq_psn"] != 0]
ok = len(qps) >= 2 and all(p["tx_packets"] > 1000 for p in s["ports"])
sys.exit(0 if ok else 1)
PY
  then
    ready=yes
    break
  fi
  sleep 0.5
done
[ -n "$ready" ] || fail "no traffic seen through uroce-stat: $(cat "$work/stat.err")"

# The JSON: both ports with their queue counters, every engine busy with its mempool, the QPs with peers.
python3 - "$work/snapshot.json" <<'PY' || fail "the JSON snapshot lacks what the run does"
import json, sys
s = json.load(open(sys.argv[1]))
assert [p["name"] for p in s["ports"]] == ["a", "b"], s["ports"]
for p in s["ports"]:
    assert p["rx_packets"] > 1000 and p["tx_packets"] > 1000, p  # one end's WRITEs, the other's ACKs
    assert p["steering"] == "rss" and p["driver"] == "net_ring", p  # a ring link has nothing to steer
    # Read after the sum while traffic flows, so at least as many (counters only grow).
    assert p["rx0_packets"] + p.get("rx1_packets", 0) >= p["rx_packets"] > 0, p
assert max(p["rx_bytes"] for p in s["ports"]) > 4096 * 1000, s["ports"]  # the WRITEs' payload arrived
assert len(s["engines"]) >= 1
for e in s["engines"]:
    assert e["total_cycles"] > 0 and 0 < e["busy_share"] <= 1, e
    # In use can be 0 at the instant of the snapshot (every mbuf back in the pool between two bursts).
    assert e["mempool_size"] > 0 and 0 <= e["mempool_in_use"] <= e["mempool_size"], e
assert sum(e["rx_packets"] for e in s["engines"]) > 2000
qps = [q for q in s["qps"] if q["state"] == "RTS"]
peers = {q["peer"] for q in qps}
assert {"198.18.0.1", "198.18.0.2"} <= peers, peers
assert any(q["rx_write_requests"] > 0 for q in qps), qps
by_qpn = {q["lqpn"]: q for q in qps}
assert any(q["rqpn"] in by_qpn for q in qps), qps  # the two ends of one connection, in one process
PY

# The tables: every section with its header and the run's values.
"$stat" -p "$prefix" >"$work/tables.txt" || fail "uroce-stat (tables) failed"
cat "$work/tables.txt"
for want in "^ports" "^PORT  *DRIVER  *STEERING" "^a  *net_ring  *rss" "^engines" "^ENGINE  *LCORE  *BUSY" \
  "^qps" "^LQPN  *RQPN  *TYPE  *STATE" " RC  *RTS  *198\.18\.0\.[12] "; do
  grep -Eq "$want" "$work/tables.txt" || fail "the tables lack /$want/"
done

# ethtool -S style: each engine's counters by their rxe/mlx5 names.
"$stat" -p "$prefix" counters >"$work/counters.txt" || fail "uroce-stat counters failed"
for want in "^engine 0:" "^ +rx_icrc_encapsulated: 0$" "^ +busy_cycles: [1-9]" "^port a:" "^ +rx0_packets: [1-9]"; do
  grep -Eq "$want" "$work/counters.txt" || fail "the counters lack /$want/"
done

# Watch mode: one interval, as rates; the run is still sending, so the ports' rates are above zero.
"$stat" -p "$prefix" -w 1 -c 1 --json >"$work/watch.json" || fail "uroce-stat -w failed"
python3 - "$work/watch.json" <<'PY' || fail "the watch interval shows no rates"
import json, sys
s = json.load(open(sys.argv[1]))
assert 0.5 < s["interval_seconds"] < 30, s["interval_seconds"]
assert all(p["rates"]["tx_packets"] > 0 for p in s["ports"]), s["ports"]
assert all("busy_share" in e for e in s["engines"])
PY
"$stat" -p "$prefix" -w 1 -c 1 ports >"$work/watch.txt" || fail "uroce-stat -w (tables) failed"
grep -Eq "^a .* [1-9][0-9]*/s" "$work/watch.txt" || fail "the watch table shows no rate: $(cat "$work/watch.txt")"
echo "uroce-stat against a live uroce-perf: PASS"
