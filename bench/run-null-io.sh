#!/usr/bin/env bash
# io forwarding on null ports: Sluice vs dpdk-testpmd (net_null), side by
# side, alternating, median of 3 runs each. Writes bench/results/null-io.md.
# Run from anywhere; as root it sets up hugepages for testpmd when missing.
#   bench/run-null-io.sh [--runs N] [--seconds S] [--burst B]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p appliance -p bench
mkdir -p bench/results
{
  echo "# io forwarding on null ports"
  echo
  echo "Command: \`bench/run-null-io.sh $*\` $(provenance)."
  echo
  target/release/sluice-bench null-io "$@"
} | tee bench/results/null-io.md.tmp
mv bench/results/null-io.md.tmp bench/results/null-io.md
