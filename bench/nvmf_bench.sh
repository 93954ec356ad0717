#!/usr/bin/env bash
# NVMe-oF 4 KiB random read and random write, queue depth 1 and 128: uroce-nvmf-perf with the initiator and
# uroce's target in one process (--in-process: the RAM backend, the embedded default's two engines and ring link;
# the initiator's thread also polls the target), next to uroce-perf's 4 KiB RDMA WRITE message rate on the same
# set-up in the same run (write_bw --in-process). Runs are interleaved A B A B (the baseline, then the four NVMe
# cases, REPEATS times) and each figure is the median with min and max; the ratio is median IOPS over the median
# message rate. See README.md "nvmf".
#
#   bench/nvmf_bench.sh [BUILD_DIR]          default BUILD_DIR: build
#
# Environment: REPEATS=3 SECONDS_PER_RUN=3 WARMUP=1. Keep (WARMUP + SECONDS_PER_RUN) x rate below 2^23 messages
# per QP (the PSN bug in README.md "rc_memif").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
nvmf_perf=$build/apps/nvmf/uroce-nvmf-perf
perf=$build/apps/perf/uroce-perf
for b in "$nvmf_perf" "$perf"; do [[ -x $b ]] || { echo "no $b: build it first" >&2; exit 1; }; done
repeats=${REPEATS:-3}
seconds=${SECONDS_PER_RUN:-3}
warmup=${WARMUP:-1}
work=$(mktemp -d /tmp/uroce-nvmf-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

field() {  # key line -> value
  sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2" | awk 'NR == 1'
}

cases=("randread 1" "randread 128" "randwrite 1" "randwrite 128")
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
echo "runs: $repeats x (write_bw, then ${#cases[@]} NVMe cases), ${seconds} s each after ${warmup} s warm-up"
for r in $(seq "$repeats"); do
  # perftest's table: #bytes #iterations BW peak BW average MsgRate[Mpps]; -D prints a line per second.
  "$perf" write_bw --in-process -s 4096 -D "$((seconds + warmup))" >"$work/write_bw.$r" 2>&1 ||
    { cat "$work/write_bw.$r" >&2; exit 1; }
  awk '$1 == 4096 && NF >= 5 { rate = $5 } END { printf "%.0f\n", rate * 1e6 }' "$work/write_bw.$r" >>"$work/baseline"
  for c in "${cases[@]}"; do
    read -r w q <<<"$c"
    "$nvmf_perf" --in-process -w "$w" -q "$q" -o 4096 -t "$seconds" -a "$warmup" >"$work/run" 2>&1 ||
      { cat "$work/run" >&2; exit 1; }
    line=$(grep '^result:' "$work/run")
    echo "$w $q $(field iops "$line") $(field avg_us "$line") $(field p50_us "$line") $(field p99_us "$line")" \
      >>"$work/nvmf"
  done
done

python3 - "$work/baseline" "$work/nvmf" <<'PY'
import statistics, sys
base = [float(x) for x in open(sys.argv[1]).read().split()]
rows = [l.split() for l in open(sys.argv[2]) if l.strip()]
def mmm(v):
    return statistics.median(v), min(v), max(v)
b = mmm(base)
print(f"uroce-perf write_bw 4 KiB message rate: median {b[0]:,.0f}/s (min {b[1]:,.0f}, max {b[2]:,.0f})")
print(f"{'case':<16} {'IOPS median':>12} {'min':>10} {'max':>10} {'avg us':>8} {'p50 us':>8} {'p99 us':>8} {'ratio':>6}")
for w, q in [("randread", "1"), ("randread", "128"), ("randwrite", "1"), ("randwrite", "128")]:
    sel = [r for r in rows if r[0] == w and r[1] == q]
    iops = mmm([float(r[2]) for r in sel])
    avg, p50, p99 = (statistics.median(float(r[i]) for r in sel) for i in (3, 4, 5))
    print(f"{w + ' QD' + q:<16} {iops[0]:>12,.0f} {iops[1]:>10,.0f} {iops[2]:>10,.0f} {avg:>8.2f} {p50:>8.2f} "
          f"{p99:>8.2f} {iops[0] / b[0]:>6.2f}")
PY
