#!/usr/bin/env bash
# The router (l3fwd, full Internet table, 10k destinations) vs io forwarding
# of the same softnic traffic, side by side, median of 3 alternating runs.
# Writes bench/results/router.md.
#   bench/run-router.sh [--rates 1000000,max] [--seconds S] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p appliance -p bench
mkdir -p bench/results
{
  echo "# The router with the full table"
  echo
  echo "Command: \`bench/run-router.sh $*\` $(provenance)."
  echo
  target/release/sluice-bench router "$@"
} | tee bench/results/router.md.tmp
mv bench/results/router.md.tmp bench/results/router.md
