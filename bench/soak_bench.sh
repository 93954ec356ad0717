#!/usr/bin/env bash
# The RC soak at bench scale (issue #14): 10^7 mixed messages (SEND, WRITE, READ, FETCH_ADD) between two engines
# through 1% loss, 1% reordering, 0.5% duplication and 0.1% corruption, every payload checked. ./uroce test runs the
# same test with 10^6 messages (10^5 under ASan); this is the long run, not in CI. See README.md "soak".
#
#   bench/soak_bench.sh [BUILD_DIR] [MESSAGES]        defaults: build (beside this folder), 10000000
#
# Prints the test's summary line (messages, time, rate, lost, duplicated, corrupted, FETCH_ADD error), the
# recovery counters, the CPU it ran on, and PASS only if the run completed with nothing lost, duplicated or
# corrupted.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
messages=${2:-10000000}
bin=$build/dataplane/tests/dataplane_soak_tests
[[ -x $bin ]] || { echo "no $bin: build it first (ninja -C $build dataplane/tests/dataplane_soak_tests)" >&2; exit 1; }
echo "soak_bench: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); load $(cut -d' ' -f1-3 /proc/loadavg); $messages messages"
log=$(mktemp /tmp/uroce-soak.XXXXXX)
trap 'rm -f "$log"' EXIT
rc=0
UROCE_SOAK_MESSAGES=$messages "$bin" --gtest_brief=1 >"$log" 2>&1 || rc=$?
grep -E '^(soak:|A:|B:|engine [0-9]+ counters:)' "$log" || true
if [[ $rc -ne 0 ]]; then
  grep -E 'Failure|Expected|Which is|timed out' "$log" | head -20 >&2 || true
  echo "FAIL (exit $rc)"
  exit 1
fi
grep -qE '^soak: .* lost 0, duplicated 0, corrupted 0, fetch_add off by 0$' "$log" || { echo "FAIL"; exit 1; }
echo "PASS"
