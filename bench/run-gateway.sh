#!/usr/bin/env bash
# The full gateway pipeline (conntrack + firewall with the fw1_10k rules +
# SNAT + full-table LPM) in one core vs the router alone: cycles per packet
# on 100,000 established flows and the new-flow rate, side by side in one
# run; then new and established flows again at 1,000 to 200,000 flows
# (the established path's cost is its cache misses: see the table).
# Writes bench/results/gateway.md.
#   bench/run-gateway.sh [--flows N] [--packets N] [--runs N] [--sweep N,N,...]
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
  case " $* " in
    *" --sweep"*) target/release/sluice-bench gateway "$@" ;;
    *) target/release/sluice-bench gateway "$@" --sweep 1000,10000,30000,100000,200000 ;;
  esac
} | tee bench/results/gateway.md.tmp
mv bench/results/gateway.md.tmp bench/results/gateway.md
