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
rolling=()
for i in $(seq "$RUNS"); do
  log=$(cargo test -q -p appliance --test failover -- --nocapture 2>&1 || true)
  line=$(grep -o 'failover: 20 of 20 connections kept, the longest wait [0-9.]* s' <<<"$log" || true)
  # The standby's sync lag (its `show ha` as the test printed it).
  lag=$(grep -o 'failover: 20 of 20.*B: {.*}' <<<"$log" | sed 's/.*B: //' | python3 -c '
import json, sys
try:
    l = json.loads(sys.stdin.read())["lag_s"]
    print("%.2f / %.2f / %.2f ms (%d messages)" % (l["p50"] * 1e3, l["p99"] * 1e3, l["max"] * 1e3, l["messages"]))
except Exception:
    print("-")' || true)
  if [ -n "$line" ]; then
    rows+=("| $i | 20 of 20 | 0 | $(grep -o '[0-9.]* s$' <<<"$line") | $lag |")
  else
    rows+=("| $i | failed (see the test's output) | | | |")
  fi
  r=$(grep -o 'rolling: first.out: 20 of 20 kept, longest wait [0-9.]* s; second.out: 5 of 5 kept, longest wait [0-9.]* s' <<<"$log" || true)
  if [ -n "$r" ]; then
    waits=($(grep -o 'wait [0-9.]* s' <<<"$r" | awk '{print $2}'))
    rolling+=("| $i | 25 of 25 | 0 | ${waits[0]} s | ${waits[1]} s |")
  else
    rolling+=("| $i | failed (see the test's output) | | | |")
  fi
done
{
  echo "# A failover of the HA pair"
  echo
  echo "Command: \`bench/run-failover.sh $RUNS\` $(provenance)."
  echo
  echo "The lab of \`appliance/tests/failover.rs\` with the shipped pair (\`configs/ha-{a,b}.toml\`, \`configs/keepalived-{a,b}.conf\`): two Sluice gateways on AF_PACKET ports with TAP mirrors and the netlink mirror between a client's LAN bridge and a server's WAN bridge; keepalived (VRRPv3, \`advert_int 0.1\`, one sync group, \`nopreempt\`) on the TAPs moving 198.18.0.1 (the LAN's gateway) and 198.19.0.1 (the NAT address); state sync over a veth of their own. Twenty TCP connections through the active box's NAT, each a line and its answer every 50 ms; after they are open and on the standby, the active Sluice is killed with SIGKILL (its TAPs go with it, so its keepalived stops advertising). \"Longest wait\": the longest time between two answers on any connection (the outage, plus the 50 ms interval and a round trip). A connection is kept when every line it sent was answered and the server saw it from one public address and port throughout."
  echo
  echo "\"Sync lag\": the standby's \`show ha\` at the end of the run, from the active's send time of each message of changes to the standby's receipt (one clock: the same host), p50 / p99 / max; the records then reach their worker's ring and are applied within a round (a worker blocked on its interrupts, as the pair's are, is woken by the sync thread); before the send they waited at most the active's 1 ms loop."
  echo
  echo "| run | connections kept | NAT ports changed | longest wait | sync lag p50 / p99 / max |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "## A cut sync link, a return and a rolling restart"
  echo
  echo "The second test of the file, on the same lab: 20 connections open through A, then a forged sync datagram (refused, counted); the sync link cut for 1 s while 5 more connections open through A (their records lost: B finds the gap when the link is back, asks for a bulk sync and holds all 25); A's Sluice killed (SIGKILL) and its keepalived stopped, B takes over; A started again: backup (\`nopreempt\`), every flow from B's bulk sync; B's Sluice stopped with SIGTERM (a planned restart, keepalived left running), A takes over again. Every connection lives through both switchovers; \"longest wait\" is each group's longest time between two answers on any connection."
  echo
  echo "| run | connections kept | NAT ports changed | longest wait, first 20 | longest wait, last 5 |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rolling[@]}"
} | tee bench/results/failover.md.tmp
mv bench/results/failover.md.tmp bench/results/failover.md
