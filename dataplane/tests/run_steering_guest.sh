#!/usr/bin/env bash
# rte_flow steering on net_tap (issue #15 part 3), inside guest g1 of the rxe-peer harness (shared/tools/rxe-peer):
# net_tap implements rte_flow as TC rules (flower, multiq, skbedit, gact, BPF for RSS) on its kernel netdev, which
# the guest's stock Debian 6.1 kernel has and a container host's kernel often has not. The guest has no DPDK: this
# script stages steering_tap_test, the shared libraries it and the PMDs it loads need (ldd's closure, less glibc
# and libstdc++, which host and guest, both Debian 12, share) and net_tap's and mempool_ring's PMDs into the
# guest's 9p share, runs it there (steering_tap_test.cc says what each case checks), and prints PASS or FAIL.
#
# usage: run_steering_guest.sh STEERING_TAP_TEST
#
# Needs root and the harness (built and booted here if needed: harness.sh's harness_for; a running one is reused).
# Environment, besides harness.sh's (INTEROP_KEEP_HARNESS=1 leaves a harness this script started running):
#   STEERING_CASES   only these cases (space-separated names from steering_tap_test.cc; default: all)
set -euo pipefail

TEST_BINARY=$(readlink -f "${1:?usage: run_steering_guest.sh STEERING_TAP_TEST}")
HARNESS_PROJECT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../apps/tests/interop/harness.sh
. "$HARNESS_PROJECT/apps/tests/interop/harness.sh"

harness_require
[ -x "$TEST_BINARY" ] || { log "no steering_tap_test at $TEST_BINARY"; exit 1; }
# EAL's plugin directory (RTE_EAL_PMD_PATH), beside the librte_eal the binary links: Debian's dpdk/pmds-<ABI>.
EAL_LIB=$(ldd "$TEST_BINARY" | awk '$1 ~ /^librte_eal\.so/ {print $3}')
PMD_DIR=$(find "$(dirname "$(readlink -f "$EAL_LIB")")/dpdk" -maxdepth 1 -name 'pmds-*' 2>/dev/null | head -1)
PMDS=("$PMD_DIR/librte_net_tap.so.23" "$PMD_DIR/librte_mempool_ring.so.23")
for pmd in "${PMDS[@]}"; do [ -e "$pmd" ] || { log "no $pmd (DPDK's PMDs)"; exit 1; }; done

t0=$SECONDS
harness_for 4096 || { log "FAIL: the harness did not come up"; exit 1; }

# Stage: the binary in bin/, the PMDs in pmd/ (loaded with EAL -d), every other library they need in lib/.
SHARE=${RXE_PEER_DIR:-/var/tmp/rxe-peer}/run/g1/share
STAGE=$SHARE/uroce-steering
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/pmd"
cp "$TEST_BINARY" "$STAGE/bin/"
for pmd in "${PMDS[@]}"; do cp -L "$pmd" "$STAGE/pmd/"; done
ldd "$TEST_BINARY" "${PMDS[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
log "staged $(find "$STAGE/lib" -type f | wc -l) libraries and ${#PMDS[@]} PMDs into the guest's share ($(du -sh "$STAGE" | cut -f1))"

case_args=""
for c in ${STEERING_CASES:-}; do case_args+=" --case $c"; done
pmd_args=""
for pmd in "${PMDS[@]}"; do pmd_args+=" -d /mnt/share/uroce-steering/pmd/$(basename "$pmd")"; done
GUEST_LOG=$OUT/steering.guest.log
rc=0
"$TOOLS/exec.sh" g1 --timeout 300 "cd /mnt/share/uroce-steering && nproc && \
  LD_LIBRARY_PATH=/mnt/share/uroce-steering/lib timeout 280 bin/$(basename "$TEST_BINARY")$case_args --$pmd_args" \
  >"$GUEST_LOG" 2>&1 || rc=$?
rm -rf "$STAGE"

echo
echo "=== rte_flow steering on net_tap in the rxe-peer guest (log: $GUEST_LOG) ==="
grep -E '^(case |PASS |FAIL |  )|cases passed' "$GUEST_LOG" | grep -vE '^    (filter|  |\s*$)' || true
passed=$(grep -c '^PASS ' "$GUEST_LOG" || true)
failed=$(grep -c '^FAIL ' "$GUEST_LOG" || true)
if [ "$rc" = 0 ] && [ "$passed" -gt 0 ] && [ "$failed" = 0 ]; then
  echo "PASS: $passed cases in $((SECONDS - t0)) s (exit status $rc)"
  exit 0
fi
echo "FAIL: $failed of $((passed + failed)) cases failed, exit status $rc (124: the guest-side timeout); last lines:"
tail -15 "$GUEST_LOG" | sed 's/^/  /'
exit 1
