#!/usr/bin/env bash
# The full gateway pipeline (conntrack + firewall with the fw1_10k rules +
# SNAT + full-table LPM) in one core vs the router alone: cycles per packet
# on 100,000 established flows and the new-flow rate, side by side in one
# run, and the gateway's again with state sync on (the active's cost of
# syncing: its changes logged for the HA peer), in each run beside them;
# then new and established flows again at 1,000 to 200,000 flows
# (the established path's cost is its cache misses: see the table).
# Writes bench/results/gateway.md; with GATEWAY_TCP=1, the same on TCP
# flows (handshakes completed, then their segments: conntrack's window
# tracking on, and off in a row of its own) into bench/results/gateway-tcp.md.
#   [GATEWAY_TCP=1] bench/run-gateway.sh [--flows N] [--packets N] [--runs N] [--sweep N,N,...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p bench
mkdir -p bench/results
out=bench/results/gateway.md
env=
shown="$*"
if [ "${GATEWAY_TCP:-0}" = 1 ]; then
  set -- --tcp "$@"
  out=bench/results/gateway-tcp.md
  env="GATEWAY_TCP=1 "
fi
{
  echo "# The gateway pipeline$([ "$out" = bench/results/gateway-tcp.md ] && echo ", TCP flows")"
  echo
  echo "Command: \`${env}bench/run-gateway.sh${shown:+ $shown}\` $(provenance)."
  echo
  case " $* " in
    *" --sweep"*) target/release/sluice-bench gateway --sync-rows "$@" ;;
    *) target/release/sluice-bench gateway --sync-rows "$@" --sweep 1000,10000,30000,100000,200000 ;;
  esac
} | tee "$out.tmp"
mv "$out.tmp" "$out"
