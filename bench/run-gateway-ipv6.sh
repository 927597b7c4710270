#!/usr/bin/env bash
# Plain IPv6 through the gateway against IPv4 with NAT44, side by side in
# each run (`sluice-bench gateway --ipv6-rows`): the same 100,000 UDP
# flows, first from IPv4 clients through masquerade, then from IPv6
# clients (2001:db8:100::HOST) to their servers' addresses below
# 2409:8000::/20, tracked and classified, not translated; both full tables
# loaded, the fw1_10k rules. New flows and established packets; and the
# router alone on IPv4, on IPv6, and on both families at once (interleaved
# at random, then the same packets grouped per burst). Writes
# bench/results/gateway-ipv6.md.
#   bench/run-gateway-ipv6.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
gateway_beside_nat44 gateway-ipv6.md "Plain IPv6 through the gateway" --ipv6-rows "${1:-5}" \
  'gateway, (new flow|established flows), plain IPv6|router alone' 'Plain IPv6 against|The router alone on both'
