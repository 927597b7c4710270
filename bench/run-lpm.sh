#!/usr/bin/env bash
# LPM on the full Internet table (../shared/data/routes): build time,
# memory, lookups per second on one core. Writes bench/results/lpm.md.
#   bench/run-lpm.sh [--addrs N] [--runs R]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
{
  echo "# LPM on the full Internet table"
  echo
  echo "Command: \`bench/run-lpm.sh $*\` $(provenance)."
  echo
  target/release/sluice-bench lpm "$@"
} | tee bench/results/lpm.md.tmp
mv bench/results/lpm.md.tmp bench/results/lpm.md
