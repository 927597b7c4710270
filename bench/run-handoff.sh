#!/usr/bin/env bash
# Ping through the gateway when the replies are handed between workers,
# against one worker, side by side in one run: the namespace lab
# (scripts/lab-net.sh), configs/router-nat.toml on AF_PACKET with the
# shipped `interrupt` policy, once as shipped (one worker, both ports) and
# once with two workers and two RX queues per port (a fanout group each),
# where an echo reply lands on either worker and is handed to the one
# whose slice of the NAT identifiers holds it. A handed reply used to wait
# for its owner's next interrupt or 10 ms timeout; the owner's bell wakes
# it now (docs/firewall-nat.md). Rounds alternate between the two setups.
# Writes bench/results/handoff.md. SLUICE=path runs that binary instead
# of building this tree's (another revision's, to compare).
#   bench/run-handoff.sh [rounds] [pings per round]
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. scripts/lab-net.sh
ROUNDS=${1:-3}
PINGS=${2:-100}
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
if [ -z "${SLUICE:-}" ]; then
  cargo build --release -q --bin sluice || exit 1
  SLUICE=$PWD/target/release/sluice
fi
WORK=$(mktemp -d /tmp/sluice-handoff.XXXXXX)
trap 'lab_down; rm -rf "$WORK"' EXIT

head=$(sed '/^\[\[worker\]\]/,$d' configs/router-nat.toml)
printf '%s\n[[worker]]\ncore = 0\nmode = "l3fwd"\nrx = ["inside", "outside"]\n[worker.poll]\nmode = "interrupt"\n' \
  "$head" > "$WORK/one.toml"
printf '%s\n[[worker]]\ncore = 0\nmode = "l3fwd"\nrx = ["inside:0", "outside:0"]\n[worker.poll]\nmode = "interrupt"\n\n[[worker]]\ncore = 1\nmode = "l3fwd"\nrx = ["inside:1", "outside:1"]\n[worker.poll]\nmode = "interrupt"\n' \
  "$(echo "$head" | sed 's/^driver = "afpacket"$/driver = "afpacket"\nrxq = 2\ntxq = 2/')" > "$WORK/two.toml"

# One round through config $1: RTTs (ms) of $PINGS pings, 20 ms apart,
# from 10 ping processes (each its own ICMP identifier, so its own NAT
# mapping and owner), one per line; the packets handed over go to
# $WORK/handed.
round() {
  lab_up
  ip netns exec "$NS_R" "$SLUICE" run "$1" --json > "$WORK/s.json" 2> "$WORK/s.err" &
  local pid=$!
  for _ in $(seq 50); do grep -q "^  core" "$WORK/s.err" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  inns "$NS_C" ping -c 2 -i 0.2 -W 1 198.19.0.2 > /dev/null || true
  for _ in $(seq 10); do
    timeout 60 ip netns exec "$NS_C" ping -c $((PINGS / 10)) -i 0.02 -W 1 198.19.0.2 \
      | grep -o 'time=[0-9.]*' | cut -d= -f2 || true
  done
  kill -TERM "$pid"
  wait "$pid" || true
  python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(sum(p["drops"]["handed_off"] for p in s["ports"]))' \
    "$WORK/s.json" >> "$WORK/handed"
  lab_down
}

: > "$WORK/one.rtt"; : > "$WORK/two.rtt"; : > "$WORK/handed"
for r in $(seq "$ROUNDS"); do
  round "$WORK/one.toml" >> "$WORK/one.rtt"
  round "$WORK/two.toml" >> "$WORK/two.rtt"
  echo "round $r done" >&2
done

stats() { # file -> "n p50 p90 p99"
  sort -n "$1" | awk '{a[NR]=$1} END {if (NR == 0) {print "0 - - -"; exit}
    printf "%d %.3f %.3f %.3f\n", NR, a[int((NR-1)*0.5)+1], a[int((NR-1)*0.9)+1], a[int((NR-1)*0.99)+1]}'
}
read -r n1 p50_1 p90_1 p99_1 <<< "$(stats "$WORK/one.rtt")"
read -r n2 p50_2 p90_2 p99_2 <<< "$(stats "$WORK/two.rtt")"
handed=$(awk '{s+=$1} END {printf "%.0f\n", s}' "$WORK/handed")
{
  echo "# Ping through the gateway with replies handed between workers"
  echo
  echo "Command: \`bench/run-handoff.sh $ROUNDS $PINGS\` $(provenance)$([ "$SLUICE" != "$PWD/target/release/sluice" ] && echo ", running $SLUICE")."
  echo
  echo "The namespace lab (scripts/lab-net.sh); configs/router-nat.toml on AF_PACKET (firewall, conntrack, masquerade), poll policy \`interrupt\` as shipped; one worker, or two workers with two RX queues per port (a fanout group each: a reply lands on either worker and is handed to the one whose slice of the NAT identifiers holds its mapping). $PINGS pings a round, 20 ms apart, from 10 ping processes (10 identifiers, 10 mappings); $ROUNDS rounds of each, alternating."
  echo
  echo "| setup | pings answered | RTT p50 ms | p90 ms | p99 ms | packets handed over |"
  echo "|---|---|---|---|---|---|"
  echo "| one worker | $n1 | $p50_1 | $p90_1 | $p99_1 | - |"
  echo "| two workers, replies handed | $n2 | $p50_2 | $p90_2 | $p99_2 | $handed |"
  echo
  echo "RTT p50 with two workers ÷ one: $(awk -v a="$p50_2" -v b="$p50_1" 'BEGIN {printf "%.2f", a / b}')."
} | tee bench/results/handoff.md
