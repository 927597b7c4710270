#!/usr/bin/env bash
# What flow export (`[export]`, IPFIX) costs a gateway worker, side by
# side in each run: `sluice-bench gateway --export-rows` measures the new
# and established passes without export and, beside them, with it (each
# packet accounted, each new flow's accounting started), and the end of
# every flow (the sweep's expiry; with export, its two records written
# into the ring the exporter thread empties): UDP at 10,000 and 100,000
# flows, TCP at 100,000; and deterministic NAT (`--det-rows`) and port
# blocks (`--block-rows`) against masquerade at 100,000 UDP flows. Then,
# where valgrind is installed, the instructions per packet with and
# without export (a figure the host's noise does not move). Writes bench/results/export.md.
#   bench/run-export.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-7}
cargo build --release -q -p bench
mkdir -p bench/results
WORK=$(mktemp -d /tmp/sluice-export.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The rows of a side-by-side run: the passes without export, with it,
# and the ratios.
rows() {
  target/release/sluice-bench gateway --export-rows --runs "$RUNS" "$@" 2>/dev/null \
    | grep -E '^\| (path|---|gateway, first packet|gateway, [0-9]+ packets of established|gateway, (new flow|established flows), flow export|a flow.s end)|^Flow export on'
}

# Instructions inside sluice_bench::gateway::gateway_pass with $1
# established packets after the first packet of 10,000 flows ($2: more
# arguments).
count() {
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
    --collect-atstart=no --toggle-collect="sluice_bench::gateway::gateway_pass" \
    target/release/sluice-bench gateway --runs 1 --flows 10000 --packets "$1" ${2:-} \
    >"$WORK/log" 2>&1
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$WORK/log"
}

{
  echo "# Flow export and deterministic NAT: what they cost a worker"
  echo
  echo "Command: \`bench/run-export.sh $RUNS\` $(provenance)."
  echo
  echo "\`sluice-bench gateway --export-rows\` (\`configs/gateway-fulltable.toml\`: full table, fw1_10k rules, SNAT; 64-byte UDP or 80-byte TCP in bursts of 32 through the stage's burst path), median of $RUNS runs, each measuring the passes without export and with it side by side: the first packet of each flow, then established packets of those flows; then every flow's end (a tick far past every timeout, repeated until the sweep has expired the whole table), per flow, without export and with it (each flow's two records pushed into a ring with room for all of them, as the exporter thread would empty it). Cycles per packet include copying each template into a work buffer."
  echo
  for spec in "10000" "100000" "100000 --tcp"; do
    set -- $spec
    flows=$1
    shift
    echo "## $flows flows${1:+, TCP}"
    echo
    rows --flows "$flows" "$@"
    echo
  done
  echo "## Deterministic NAT and port blocks instead of masquerade, 100000 flows"
  echo
  echo "The same passes with the LAN's source NAT rule deterministic (198.18.0.0/24 onto 198.51.100.0/28: 16 hosts an address, 4,032 ports each; a flow's port picked in its host's block), and with it a pool in port blocks (the 16 addresses of 198.51.100.0/28 in blocks of 512 ports, 4 at most a host: each host's flows take ports from its block, the table's blocks held and released with the flows), beside masquerade in each run."
  echo
  target/release/sluice-bench gateway --det-rows --block-rows --runs "$RUNS" 2>/dev/null \
    | grep -E '^\| (path|---|gateway, first packet|gateway, [0-9]+ packets of established|gateway, (new flow|established flows), (deterministic|port blocks))|^(Deterministic NAT|Port blocks) instead'
  echo
  if command -v valgrind >/dev/null; then
    all=$(count 200000)
    one=$(count 1)
    xall=$(count 200000 --export)
    xone=$(count 1 --export)
    for v in "$all" "$one" "$xall" "$xone"; do
      [ -n "$v" ] || { echo "no count from valgrind: see $WORK/log" >&2; exit 1; }
    done
    echo "## Instructions per packet"
    echo
    echo "valgrind's callgrind counting the unclocked gateway passes (10,000 UDP flows; 200,000 and 1 established packets, as \`bench/run-gateway-instructions.sh\` counts them), without and with \`--export\`."
    echo
    echo "| path | without export | with export |"
    echo "|---|---|---|"
    echo "| gateway, established flow | $(( (all - one) / 199999 )) | $(( (xall - xone) / 199999 )) |"
    echo "| gateway, new flow (first packet) | $(( one / 10000 )) | $(( xone / 10000 )) |"
  fi
} | tee bench/results/export.md.tmp
mv bench/results/export.md.tmp bench/results/export.md
