#!/usr/bin/env bash
# The flow table kept across a restart ([ha] state_file): the time a stop
# takes to list and write a table of N flows, and a start to read it back
# (checked, aged) and install it; the file's bytes per flow. The file is
# written where the state file would be (--dir; default /tmp).
# Writes bench/results/state.md.
#   bench/run-state.sh [--flows N] [--runs N] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
out=bench/results/state.md
{
  echo "# Restarts that keep the flows: save and load"
  echo
  echo "Command: \`bench/run-state.sh${*:+ $*}\` $(provenance)."
  echo
  echo "A conntrack table of UDP flows, each with a NAT mapping (\`sluice-bench state\`): listed as a worker lists its table when it stops, written as \`[ha] state_file\` is (\`appliance::state::write\`: 96-byte records, CRC-32, a new file synced and renamed over the old), read back as a start reads it (\`appliance::state::read\`: owner and mode checked, every record decoded and checked, the CRC, the downtime taken off), and installed into an empty table (\`ConnTrack::install\`). The goal (issue 53): a 1 M-flow table saved and loaded in at most 1 s each."
  echo
  target/release/sluice-bench state "$@"
} | tee "$out.tmp"
mv "$out.tmp" "$out"
