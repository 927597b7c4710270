#!/usr/bin/env bash
# Live FIB updates on the full Internet table (../shared/data/routes):
# route updates per second on one core while a worker routes on another,
# and the worker's rate during the storm against before and after.
# Writes bench/results/fib.md.
#   bench/run-fib.sh [--updates N] [--quiet S] [--worker-core C] [--writer-core C]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
{
  echo "# Live FIB updates on the full Internet table"
  echo
  echo "Command: \`bench/run-fib.sh $*\` $(provenance)."
  echo
  echo "One writer thread withdraws a random table prefix and announces it again"
  echo "through another gateway, as fast as it can (each call one route update,"
  echo "applied in place: see docs/router.md, \"The live FIB\"), while a worker"
  echo "thread on another core routes 64-byte packets to hosts inside random"
  echo "IPv4 table prefixes through the router stage in bursts of 32, entering"
  echo "and leaving the FIB every burst as a poll round does. Anchor: VPP's FIB"
  echo "API programs 110k-190k routes/s. Three runs back to back: this machine is"
  echo "shared and noisy, so read the spread."
  for run in 1 2 3; do
    echo
    echo "## Run $run"
    echo
    target/release/sluice-bench fib "$@"
  done
} | tee bench/results/fib.md.tmp
mv bench/results/fib.md.tmp bench/results/fib.md
