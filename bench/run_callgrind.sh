#!/usr/bin/env bash
# Instructions per message for uroce_bench_rc's one-core RDMA WRITE load, and per packet for the raw net_ring
# loop, counted by callgrind (stable on noisy machines, unlike time). See README.md "rc_loopback".
#
#   bench/run_callgrind.sh [BUILD_DIR | path/to/uroce_bench_rc]     default BUILD_DIR: build (beside this folder)
#
# Environment: CASE=64:128:32 (size:window:signal_every, as --case), N1=100000 N2=200000 (message counts),
# MODES="uroce raw", TOP=25 (functions listed), OUT=<folder for the callgrind files> (default: a temp dir).
#
# Method: the benchmark runs `--count=N --callgrind` under callgrind with instrumentation off at start; the
# load's first poll on the engine starts instrumentation and zeroes the counters, and its last completion dumps
# them, so the dump holds the engine thread's instructions for exactly that workload (engine loop, ports,
# protocol, completions). Two counts N1 < N2 are run and Ir/msg = (Ir(N2) - Ir(N1)) / (N2 - N1), which removes
# ramp-up and drain. Under valgrind the CPU looks like it has no AVX-512, so uroce's ICRC runs its PCLMUL
# variant rather than the VPCLMUL one it uses natively; everything else is the same code.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
arg=${1:-$here/../build}
if [[ -f $arg && -x $arg ]]; then bin=$arg; else bin=$arg/bench/uroce_bench_rc; fi
case_spec=${CASE:-64:128:32}
n1=${N1:-100000}
n2=${N2:-200000}
modes=${MODES:-uroce raw}
top=${TOP:-25}
out=${OUT:-$(mktemp -d /tmp/uroce-callgrind.XXXXXX)}

command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[[ -x $bin ]] || { echo "no $bin: build it first (ninja -C BUILD_DIR bench/uroce_bench_rc)" >&2; exit 1; }
((n2 > n1)) || { echo "N2 must be larger than N1" >&2; exit 1; }
mkdir -p "$out"

# The dump file of the load's client-request dump with the most instructions: the engine thread's.
engine_dump() {
  local base=$1 best="" best_ir=-1 f ir
  for f in "$base".1-*; do
    [[ -e $f ]] || continue
    grep -q '^desc: Trigger: Client Request' "$f" || continue
    ir=$(awk '/^summary:/ {print $2; exit}' "$f")
    if ((ir > best_ir)); then best_ir=$ir; best=$f; fi
  done
  [[ -n $best ]] || { echo "no client-request dump in $base.1-* (did the load finish?)" >&2; return 1; }
  echo "$best"
}

run_one() {  # mode count -> prints the dump file
  local mode=$1 n=$2 base="$out/cg.$1.$2"
  rm -f "$base" "$base".*
  valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --dump-instr=no \
    --callgrind-out-file="$base" "$bin" --count="$n" --mode="$mode" --callgrind --case="$case_spec" \
    >"$base.log" 2>&1 || { echo "valgrind run failed; see $base.log" >&2; tail -20 "$base.log" >&2; return 1; }
  grep -q 'ok=1' "$base.log" || { echo "the load did not complete; see $base.log" >&2; return 1; }
  engine_dump "$base"
}

# callgrind_annotate's function table with a per-unit column (Ir / units). With debug info callgrind_annotate
# splits a function by the source file of its inlined code, so rows are summed per function first.
per_unit_table() {  # file units label [extra annotate args]
  local file=$1 units=$2 label=$3
  shift 3
  callgrind_annotate --auto=no --threshold=100 "$@" "$file" 2>/dev/null |
    awk -v bin="$bin" '
      /^-+$/ { rule++; next }
      rule >= 6 && /^ *$/ && seen { exit }
      rule >= 5 && /^ *[0-9,]+ +\( *[0-9.]+%\)/ {
        ir = $1; gsub(",", "", ir)
        match($0, /\( *[0-9.]+%\)/)
        name = substr($0, RSTART + RLENGTH); sub(/^ +/, "", name)
        object = ""
        if (match(name, / \[[^]]*\]$/)) {
          object = substr(name, RSTART + 2, RLENGTH - 3); name = substr(name, 1, RSTART - 1)
          n = split(object, parts, "/"); object = parts[n]
          if (index(bin, object) > 0) object = ""
        }
        sub(/^[^:]*:/, "", name)  # the source file (or ???) before the function
        if (object != "") name = name " [" object "]"
        sum[name] += ir
        seen = 1
      }
      END { for (name in sum) printf "%d\t%s\n", sum[name], name }' |
    sort -t$'\t' -k1,1nr | awk -v top="$top" 'NR <= top' |
    awk -F'\t' -v units="$units" -v label="$label" -v total="$(awk '/^summary:/ {print $2; exit}' "$file")" '
      NR == 1 { printf "%10s %7s  %s\n", label, "share", "function" }
      { name = $2; if (length(name) > 110) name = substr(name, 1, 107) "..."
        printf "%10.1f %6.2f%%  %s\n", $1 / units, 100 * $1 / total, name }'
}

# EngineContext::run()'s self cost: mostly the timer wheel's walk over the ticks that passed since the last loop
# iteration, which grows with wall time, and wall time under valgrind is ~50x native and grows with the machine's
# load. It is about 1 Ir per message natively; the line above the total without it is the stable figure.
loop_self() {  # file -> Ir
  callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
    awk '/uroce::dataplane::EngineContext::run\(\)/ { ir = $1; gsub(",", "", ir); sum += ir } END { print sum + 0 }'
}

echo "uroce_bench_rc under callgrind: case $case_spec, counts $n1 and $n2, files in $out"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $modes; do
  f1=$(run_one "$mode" "$n1")
  f2=$(run_one "$mode" "$n2")
  ir1=$(awk '/^summary:/ {print $2; exit}' "$f1")
  ir2=$(awk '/^summary:/ {print $2; exit}' "$f2")
  unit=$([[ $mode == uroce ]] && echo "message" || echo "packet")
  loop1=$(loop_self "$f1")
  loop2=$(loop_self "$f2")
  echo
  echo "== $mode: Ir($n1) = $ir1, Ir($n2) = $ir2"
  awk -v a="$ir1" -v b="$ir2" -v la="$loop1" -v lb="$loop2" -v n1="$n1" -v n2="$n2" -v u="$unit" 'BEGIN {
    printf "   instructions per %s: %.1f  ((Ir(N2) - Ir(N1)) / (N2 - N1)); Ir(N2) / N2 = %.1f\n", u, (b - a) / (n2 - n1), b / n2
    printf "   without EngineContext::run()'"'"'s own instructions: %.1f per %s (run() itself: %.1f)\n",
           ((b - lb) - (a - la)) / (n2 - n1), u, (lb - la) / (n2 - n1) }'
  echo
  echo "   top functions by self Ir ($n2-$unit run; Ir per $unit):"
  per_unit_table "$f2" "$n2" "Ir/$unit" | sed 's/^/   /'
  echo
  echo "   top functions by inclusive Ir:"
  per_unit_table "$f2" "$n2" "Ir/$unit" --inclusive=yes | sed 's/^/   /'
done
