#!/usr/bin/env bash
# The router (l3fwd, full Internet table, 10k destinations) vs io forwarding
# of the same softnic traffic, side by side, median of 3 alternating runs.
# Writes bench/results/router.md.
#   bench/run-router.sh [--rates 1000000,max] [--seconds S] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p appliance -p bench
mkdir -p bench/results
{
  echo "# The router with the full table"
  echo
  echo "Command: \`bench/run-router.sh $*\` at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo "+changes") on $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."
  echo
  target/release/sluice-bench router "$@"
} | tee bench/results/router.md.tmp
mv bench/results/router.md.tmp bench/results/router.md
