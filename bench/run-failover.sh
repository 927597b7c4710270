#!/usr/bin/env bash
# A failover of the HA pair, measured: the lab of appliance/tests/failover.rs
# (two Sluice gateways on AF_PACKET with TAP mirrors, keepalived VRRPv3
# every 100 ms moving the LAN gateway and NAT addresses, state sync over a
# link of their own; 20 TCP connections through the active box's NAT, a
# line and its answer every 50 ms each), the active box killed with
# SIGKILL, N times. Per run: connections kept, NAT ports changed, and the
# longest wait for an answer on any connection (the outage plus one 50 ms
# interval and a round trip). Writes bench/results/failover.md. Root.
#   bench/run-failover.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-5}
command -v keepalived >/dev/null || { echo "needs keepalived (apt-get install keepalived)" >&2; exit 1; }
cargo build -q -p appliance --tests
rows=()
for i in $(seq "$RUNS"); do
  log=$(cargo test -q -p appliance --test failover -- --nocapture 2>&1 || true)
  line=$(grep -o 'failover: 20 of 20 connections kept, the longest wait [0-9.]* s' <<<"$log" || true)
  if [ -n "$line" ]; then
    rows+=("| $i | 20 of 20 | 0 | $(grep -o '[0-9.]* s$' <<<"$line") |")
  else
    rows+=("| $i | failed (see the test's output) | | |")
  fi
done
{
  echo "# A failover of the HA pair"
  echo
  echo "Command: \`bench/run-failover.sh $RUNS\` $(provenance)."
  echo
  echo "The lab of \`appliance/tests/failover.rs\` with the shipped pair (\`configs/ha-{a,b}.toml\`, \`configs/keepalived-{a,b}.conf\`): two Sluice gateways on AF_PACKET ports with TAP mirrors and the netlink mirror between a client's LAN bridge and a server's WAN bridge; keepalived (VRRPv3, \`advert_int 0.1\`, one sync group, \`nopreempt\`) on the TAPs moving 198.18.0.1 (the LAN's gateway) and 198.19.0.1 (the NAT address); state sync over a veth of their own. Twenty TCP connections through the active box's NAT, each a line and its answer every 50 ms; after they are open and on the standby, the active Sluice is killed with SIGKILL (its TAPs go with it, so its keepalived stops advertising). \"Longest wait\": the longest time between two answers on any connection (the outage, plus the 50 ms interval and a round trip). A connection is kept when every line it sent was answered and the server saw it from one public address and port throughout."
  echo
  echo "| run | connections kept | NAT ports changed | longest wait |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee bench/results/failover.md.tmp
mv bench/results/failover.md.tmp bench/results/failover.md
