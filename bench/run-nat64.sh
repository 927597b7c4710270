#!/usr/bin/env bash
# NAT64 against NAT44 on one core, side by side in each run
# (`sluice-bench gateway --nat64-rows`): the same 100,000 UDP flows,
# first from IPv4 clients through masquerade, then from IPv6-only clients
# (2001:db8:100::HOST) to the well-known prefix's addresses of the same
# servers through `[[nat.nat64]]` out of the same port; the full table,
# the fw1_10k rules. New flows, established packets (IPv6 to IPv4) and the
# servers' replies (IPv4 to IPv6). Writes bench/results/nat64.md.
#   bench/run-nat64.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
gateway_beside_nat44 nat64.md "NAT64 against NAT44" --nat64-rows "${1:-5}" \
  'gateway, (new flow|established flows|the servers. replies), NAT64' 'NAT64 against'
