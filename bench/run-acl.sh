#!/usr/bin/env bash
# The rule classifier vs the tuple space and a linear scan on every
# ClassBench set in ../shared/data/classbench, and on 100k-rule sets grown
# from the 10k ones (testdata::classbench). Writes bench/results/acl.md.
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
  target/release/sluice-bench acl "$@"
} | tee bench/results/acl.md.tmp
mv bench/results/acl.md.tmp bench/results/acl.md
