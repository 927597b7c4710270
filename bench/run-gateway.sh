#!/usr/bin/env bash
# The full gateway pipeline (conntrack + firewall with the fw1_10k rules +
# SNAT + full-table LPM) in one core vs the router alone: cycles per packet
# on 100,000 established flows and the new-flow rate, side by side in one
# run. Writes bench/results/gateway.md.
#   bench/run-gateway.sh [--flows N] [--packets N] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
{
  echo "# The gateway pipeline"
  echo
  echo "Command: \`bench/run-gateway.sh $*\` $(provenance)."
  echo
  target/release/sluice-bench gateway "$@"
} | tee bench/results/gateway.md.tmp
mv bench/results/gateway.md.tmp bench/results/gateway.md
