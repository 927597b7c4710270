#!/usr/bin/env bash
# A failover of the HA pair, measured: the lab of appliance/tests/failover.rs
# (two Sluice gateways on AF_PACKET with TAP mirrors, keepalived VRRPv3
# every 100 ms moving the LAN gateway and NAT addresses, state sync over a
# link of their own; 20 TCP connections through the active box's NAT, a
# line and its answer every 50 ms each, a UDP stream and a TCP transfer),
# the active box killed with SIGKILL and, in a second run, its ports set
# down, N times. Per run: connections kept, NAT ports changed, the longest
# wait for an answer on any connection (the outage plus one 50 ms interval
# and a round trip), the UDP stream's answers, the transfer. Writes bench/results/failover.md. Root.
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
  for how in killed "ports down"; do
    line=$(grep -o "failover ($how): 20 of 20 connections kept.*" <<<"$log" || true)
    if [ -z "$line" ]; then
      rows+=("| $i | $how | failed (see the test's output) | | | | | |")
      continue
    fi
    # The standby's sync lag (its `show ha` as the test printed it).
    lag=$(sed 's/.*B: //' <<<"$line" | python3 -c '
import json, sys
try:
    l = json.loads(sys.stdin.read())["lag_s"]
    print("%.2f / %.2f / %.2f ms (%d messages)" % (l["p50"] * 1e3, l["p99"] * 1e3, l["max"] * 1e3, l["messages"]))
except Exception:
    print("-")' || true)
    wait=$(sed -E 's/.*kept, the longest wait ([0-9.]+) s;.*/\1/' <<<"$line")
    udp=$(sed -E 's/.*UDP ([0-9]+) of ([0-9]+) answered, the longest wait ([0-9.]+) s.*/\1 of \2 (\3 s)/' <<<"$line")
    bytes=$(sed -E 's/.*transfer ([0-9]+) bytes.*/\1/' <<<"$line")
    rows+=("| $i | $how | 20 of 20 | 0 | $wait s | $udp | $((bytes / 1048576)) MiB, all | $lag |")
  done
  r=$(grep -o 'rolling: first.out: 20 of 20 kept, longest wait [0-9.]* s; second.out: 5 of 5 kept, longest wait [0-9.]* s' <<<"$log" || true)
  if [ -n "$r" ]; then
    waits=($(grep -o 'wait [0-9.]* s' <<<"$r" | awk '{print $2}'))
    rolling+=("| $i | 25 of 25 | 0 | ${waits[0]} s | ${waits[1]} s |")
  else
    rolling+=("| $i | failed (see the test's output) | | | |")
  fi
done
# The lab at scale, the Sluice pair and the Linux pair side by side.
SCALE_RUNS=${SCALE_RUNS:-3}
scale=()
for i in $(seq "$SCALE_RUNS"); do
  log=$(cargo test -q -p appliance --test failover -- --ignored --nocapture at_scale 2>&1 || true)
  for pair in "Sluice" "Sluice, no sync" "Linux, conntrackd, ports kept" "Linux, no sync, ports kept" \
              "Linux, conntrackd, random ports" "Linux, no sync, random ports"; do
    # -q prints a dot per passing test on the same stream: take the line from "at scale" on.
    line=$(grep -F "at scale ($pair): " <<<"$log" | sed -E 's/^.*(at scale \()/\1/' | head -n1 || true)
    if [ -z "$line" ]; then
      scale+=("| $i | $pair | failed (see the test's output) | | | | | |")
      continue
    fi
    scale+=("$(sed -E 's/^at scale \((.*)\): ([0-9]+) connections: ([0-9]+) kept, ([0-9]+) ports changed, ([0-9]+) lost(.*); probes: ([0-9]+) of 20 kept, the longest wait ([^;]+); open .*/| '"$i"' | \1 | \2 | \3 | \4 | \5\6 | \7 of 20 | \8 |/' <<<"$line")")
  done
done
{
  echo "# A failover of the HA pair"
  echo
  echo "Command: \`bench/run-failover.sh $RUNS\` $(provenance)."
  echo
  echo "The lab of \`appliance/tests/failover.rs\` with the shipped pair (\`configs/ha-{a,b}.toml\`, \`configs/keepalived-{a,b}.conf\`): two Sluice gateways on AF_PACKET ports with TAP mirrors and the netlink mirror between a client's LAN bridge and a server's WAN bridge; keepalived (VRRPv3, \`advert_int 0.1\`, one sync group, \`nopreempt\`) on the TAPs moving 198.18.0.1 (the LAN's gateway) and 198.19.0.1 (the NAT address); state sync over a veth of their own. Through the active box's NAT for 8 s: twenty TCP connections, each a line and its answer every 50 ms; a UDP stream, a datagram every 20 ms to an echo; a TCP transfer of 32 KiB every 10 ms (about 26 Mbit/s) to a sink. After they are open and on the standby, the active box fails: \`killed\`, its Sluice killed with SIGKILL (its TAPs go with it, so its keepalived stops advertising); \`ports down\`, both its ports' links set down (Sluice and keepalived running: the TAPs' carriers follow the ports, keepalived goes to FAULT), and up again a second after the switchover (it stays backup). \"Longest wait\": the longest time between two answers on any connection (the outage, plus the 50 ms interval and a round trip). A connection is kept when every line it sent was answered and the server saw it from one public address and port throughout; the UDP stream's datagrams lost are those sent in the outage, and the server saw one public address and port; the transfer's bytes all reached the sink, from one public address and port."
  echo
  echo "\"Sync lag\": the standby's \`show ha\` at the end of the run, from the active's send time of each message of changes to the standby's receipt (one clock: the same host), p50 / p99 / max; the records then reach their worker's ring and are applied within a round (a worker blocked on its interrupts, as the pair's are, is woken by the sync thread); before the send they waited at most the active's 1 ms loop."
  echo
  echo "| run | failure | connections kept | NAT ports changed | longest wait | UDP answered (longest wait) | transfer arrived | sync lag p50 / p99 / max |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "## A cut sync link, a return and a rolling restart"
  echo
  echo "The second test of the file, on the same lab: 20 connections open through A, then a forged sync datagram (refused, counted); the sync link cut for 1 s while 5 more connections open through A (their records lost: B finds the gap when the link is back, asks for a bulk sync and holds all 25); A's Sluice killed (SIGKILL) and its keepalived stopped, B takes over; A started again: backup (\`nopreempt\`), every flow from B's bulk sync; B's Sluice stopped with SIGTERM (a planned restart, keepalived left running), A takes over again. Every connection lives through both switchovers; \"longest wait\" is each group's longest time between two answers on any connection."
  echo
  echo "| run | connections kept | NAT ports changed | longest wait, first 20 | longest wait, last 5 |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rolling[@]}"
  echo
  echo "## 10,000 connections, the Sluice pair and the Linux pair side by side"
  echo
  echo "The ignored \`at_scale_*\` tests of the file, $SCALE_RUNS rounds (each round every pair, one after another): the same namespaces, 10,000 TCP connections opened through the master's NAT (a line and its answer each, the public address and port the server saw noted) and, once the standby holds them, the 20 probes of the first table (a line every 50 ms, for the outage); then the master's ports are set down (the box gone dark: the same failure for both pairs) and, after the switchover, each of the 10,000 connections sends a second line: kept when it is answered from the same public address and port. The Linux pair: two namespaces as routers, nftables (a stateful forward chain, \`snat to 198.19.0.1\`, or with \`fully-random\`), keepalived with the same VRRP settings on their own interfaces, conntrackd (FTFW over the same sync link, committed to the kernel by keepalived's notify script as conntrack-tools' \`primary-backup.sh\` does) or none. \"no sync\": Sluice without its \`[ha]\` section, Linux without conntrackd. Lost: reset, closed or unanswered in 30 s."
  echo
  echo "| round | pair | connections | kept | NAT ports changed | lost | probes kept | longest wait (probes) |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${scale[@]}"
} | tee bench/results/failover.md.tmp
mv bench/results/failover.md.tmp bench/results/failover.md
