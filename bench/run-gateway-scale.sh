#!/usr/bin/env bash
# The gateway's cost against its size: new flows and established packets
# at 10k to 10M concurrent flows (the conntrack table sized for each),
# the table's bytes per flow beside Linux conntrack's entry, and plots of
# both against the flows (log scale). One core, in process (the bench's
# gateway passes, as bench/run-gateway.sh's sweep).
# Writes bench/results/gateway-scale.md, gateway-scale-cycles.svg and
# gateway-scale-memory.svg.
#   bench/run-gateway-scale.sh [--sweep N,N,...] [--runs N] [--packets N] [--tcp]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
out=bench/results/gateway-scale.md
{
  echo "# The gateway at scale: cost and memory against the flows it holds"
  echo
  echo "Command: \`bench/run-gateway-scale.sh${*:+ $*}\` $(provenance)."
  echo
  echo "Plots: [cycles](gateway-scale-cycles.svg), [bytes per flow](gateway-scale-memory.svg)."
  args=(--sweep-only --plot bench/results/gateway-scale "$@")
  case " $* " in *" --runs"*) ;; *) args+=(--runs 3) ;; esac
  case " $* " in *" --sweep"*) ;; *) args+=(--sweep 10000,100000,1000000,4000000,10000000) ;; esac
  target/release/sluice-bench gateway "${args[@]}"
} | tee "$out.tmp"
mv "$out.tmp" "$out"
