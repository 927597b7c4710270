#!/usr/bin/env bash
# The polling-versus-interrupts study: offered loads 100 pps .. max × every
# poll-mode policy on the softnic (generator on core 0, worker on core 1),
# 3 s per run, median of 5 alternating runs per point. Writes bench/results/poll-sweep-table.md, poll-cpu.svg and
# poll-p99.svg.
#   bench/run-poll-sweep.sh [--seconds S] [--loads 100,1000,...] [--policies busy,...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p appliance -p bench
target/release/sluice-bench poll-sweep --repeat 5 "$@"
