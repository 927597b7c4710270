#!/usr/bin/env bash
# The rule classifier vs the tuple space and a linear scan on every
# ClassBench set in ../shared/data/classbench, and on 100k-rule sets grown
# from the 10k ones (testdata::classbench), with plots of the cycles a
# lookup and the classifier's memory against the rules' count. Writes
# bench/results/acl.md, acl-cycles.svg and acl-memory.svg.
#   bench/run-acl.sh [--runs N] [--grow RULES]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
{
  echo "# Rule classification"
  echo
  echo "Command: \`bench/run-acl.sh $*\` $(provenance)."
  echo
  echo "Plots: [cycles a lookup](acl-cycles.svg), [the classifier's memory](acl-memory.svg)."
  echo
  target/release/sluice-bench acl "$@"
} | tee bench/results/acl.md.tmp
mv bench/results/acl.md.tmp bench/results/acl.md
target/release/sluice-bench plot-table --table bench/results/acl.md --x rules \
  --y cycles/lookup --series lookup --log-y --out bench/results/acl-cycles.svg \
  --title "Cycles a lookup by the rules' count (ClassBench seeds)"
target/release/sluice-bench plot-table --table bench/results/acl.md --x rules \
  --y "memory (MiB)" --series lookup --log-y --out bench/results/acl-memory.svg \
  --title "The classifier's memory by the rules' count"
