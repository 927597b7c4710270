#!/usr/bin/env bash
# The polling-versus-interrupts study: offered loads 100 pps .. max × every
# poll-mode policy on the softnic (generator on core 0, worker on core 1),
# 3 s per run, median of 5 alternating runs per point. Writes bench/results/poll-sweep-table.md, poll-cpu.svg and
# poll-p99.svg.
#   bench/run-poll-sweep.sh [--seconds S] [--loads 100,1000,...] [--policies busy,...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p appliance -p bench
target/release/sluice-bench poll-sweep --repeat 5 "$@"
# The table, headed by where it came from.
t=bench/results/poll-sweep-table.md
if [ -f "$t" ] && ! head -1 "$t" | grep -q '^# '; then
  { echo "# Polling versus interrupts"; echo; echo "Command: \`bench/run-poll-sweep.sh $*\` $(provenance)."; echo; cat "$t"; } > "$t.new" && mv "$t.new" "$t"
fi
