#!/usr/bin/env bash
# Two-process RDMA WRITE over net_memif, uroce against raw memif, interleaved A B A B: each pair is one uroce
# run (server + client process) followed by one raw memif run, and the ratio is reported per pair, because
# cross-core speed on these 2-vCPU guests flips between a "near" and a "far" mode (dpdk-env.md §5). A cache-line
# ping-pong probe before each run records the mode. See README.md "rc_memif".
#
#   bench/memif_ab.sh [BUILD_DIR | path/to/uroce_bench_rc_memif]     default BUILD_DIR: build
#
# Environment: SIZES="64 4096" PAIRS=5 SECONDS_PER_RUN=1 WARMUP=0.3 EXTRA="--window=128 --signal=32". Keep
# (WARMUP + SECONDS_PER_RUN) x rate below 2^23 messages until the PSN bug in README.md "rc_memif" is fixed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
arg=${1:-$here/../build}
if [[ -f $arg && -x $arg ]]; then bin=$arg; else bin=$arg/bench/uroce_bench_rc_memif; fi
[[ -x $bin ]] || { echo "no $bin: build it first" >&2; exit 1; }
sizes=${SIZES:-64 4096}
pairs=${PAIRS:-5}
seconds=${SECONDS_PER_RUN:-1}
warmup=${WARMUP:-0.3}
read -r -a extra <<<"${EXTRA:-}"  # extra options for both processes, e.g. --window=64
work=$(mktemp -d /tmp/uroce-memif-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT

field() {  # key line -> value
  sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2" | awk 'NR == 1'
}

run_pair_member() {  # mode size -> prints the RESULT line that carries the rate
  local mode=$1 size=$2 dir sock server client_status=0 server_status=0
  dir=$(mktemp -d "$work/run.XXXXXX")
  sock=/run/uroce-bench-$$.sock
  rm -f "$sock"
  "$bin" server --mode="$mode" --socket="$sock" --exchange="$dir" --size="$size" --seconds="$seconds" \
    --warmup="$warmup" "${extra[@]}" >"$dir/server.out" 2>"$dir/server.err" &
  server=$!
  # The memif client connects once, when its port starts: let the server's socket exist first.
  for _ in $(seq 400); do [[ -S $sock ]] && break; sleep 0.05; done
  timeout 300 "$bin" client --mode="$mode" --socket="$sock" --exchange="$dir" --size="$size" \
    --seconds="$seconds" --warmup="$warmup" "${extra[@]}" >"$dir/client.out" 2>"$dir/client.err" || client_status=$?
  wait "$server" || server_status=$?
  rm -f "$sock"
  if ((client_status != 0 || server_status != 0)); then
    echo "$mode size $size: client exit $client_status, server exit $server_status" >&2
    tail -n 5 "$dir/server.err" "$dir/client.err" >&2
    return 1
  fi
  cat "$dir/server.out" "$dir/client.out" | awk '/^RESULT/ && /msgs_per_s=/ && !found { print; found = 1 }'
}

summary() {  # label values... -> "median [min .. max]"
  local label=$1
  shift
  printf '%s\n' "$@" | sort -g | awk -v label="$label" '
    { v[NR] = $1 }
    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%s %.3f [%.3f .. %.3f]", label, m, v[1], v[NR] }'
}

echo "memif A/B: $pairs pairs per size, ${seconds} s per run (warm-up ${warmup} s), server on CPU 0, client on CPU 1"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in $sizes; do
  uroce_rates=() raw_rates=() ratios=()
  for ((p = 1; p <= pairs; ++p)); do
    probe_a=$("$bin" probe | sed -n 's/.*rtt_ns=\([^ ]*\).*/\1/p')
    a=$(run_pair_member uroce "$size")
    probe_b=$("$bin" probe | sed -n 's/.*rtt_ns=\([^ ]*\).*/\1/p')
    b=$(run_pair_member raw "$size")
    ua=$(field msgs_per_s "$a")
    rb=$(field msgs_per_s "$b")
    ratio=$(awk -v a="$ua" -v b="$rb" 'BEGIN { printf "%.3f", a / b }')
    uroce_rates+=("$(awk -v a="$ua" 'BEGIN { print a / 1e6 }')")
    raw_rates+=("$(awk -v b="$rb" 'BEGIN { print b / 1e6 }')")
    ratios+=("$ratio")
    printf '  size %-7s pair %d: uroce %8.3f Mmsg/s (%7.2f Gb/s, cpu %s, rtt %s ns)  raw %8.3f Mmsg/s (%7.2f Gb/s, cpu %s, rtt %s ns)  ratio %s\n' \
      "$size" "$p" "$(awk -v a="$ua" 'BEGIN { print a / 1e6 }')" "$(field gbps "$a")" "$(field cpu_share "$a")" \
      "$probe_a" "$(awk -v b="$rb" 'BEGIN { print b / 1e6 }')" "$(field gbps "$b")" "$(field cpu_share "$b")" \
      "$probe_b" "$ratio"
  done
  echo "  size $size: $(summary "uroce Mmsg/s" "${uroce_rates[@]}"); $(summary "raw Mmsg/s" "${raw_rates[@]}"); $(summary "ratio" "${ratios[@]}")"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
