#!/usr/bin/env bash
# The router (l3fwd, full Internet table, 10k destinations) vs io forwarding
# of the same softnic traffic, side by side, median of 3 alternating runs.
# Writes bench/results/$OUT.md (OUT=router unless set).
#   [OUT=router-dual] bench/run-router.sh [--config configs/router-fulltable.toml,configs/router-fulltable-dual.toml]
#     [--rates 1000000,max] [--seconds S] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p appliance -p bench
OUT=${OUT:-router}
cmd="bench/run-router.sh $*"
[ "$OUT" = router ] || cmd="OUT=$OUT $cmd"
mkdir -p bench/results
{
  echo "# The router with the full table"
  echo
  echo "Command: \`$cmd\` $(provenance)."
  echo
  target/release/sluice-bench router "$@"
} | tee "bench/results/$OUT.md.tmp"
mv "bench/results/$OUT.md.tmp" "bench/results/$OUT.md"
