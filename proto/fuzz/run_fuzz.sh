#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time on a seed corpus made from the rxe
# captures, plus the inputs of past findings (REGRESSIONS_DIR, which libFuzzer runs
# first, as corpus). Any crash, sanitizer report or oracle abort fails (non-zero exit).
# usage: run_fuzz.sh FUZZER CAPTURES_DIR|none SECONDS [REGRESSIONS_DIR]
set -euo pipefail
fuzzer=$(realpath "$1") seconds=$3
work=$(mktemp -d /tmp/uroce-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/seeds"
[ "$2" = none ] || python3 "$(dirname "$0")/seed_corpus.py" "$(realpath "$2")" "$work/seeds"
mkdir -p "$work/corpus"
cd "$work"
# -error_exitcode=1: libFuzzer's default, 77, is what meson reads as "skipped", so a crash would not fail the suite.
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -max_len=9000 -timeout=10 -error_exitcode=1 \
  -artifact_prefix="$work/" "$work/corpus" "$work/seeds" ${4:+"$(realpath "$4")"}
