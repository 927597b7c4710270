#!/usr/bin/env bash
# Instructions per packet of the gateway pipeline, counted by valgrind
# (callgrind) in the unclocked gateway passes of `sluice-bench gateway`:
# a figure the host's noise does not move (the cycles of run-gateway.sh
# vary 2x from hour to hour on a shared VM), to compare two revisions
# with. Counted twice, with N and with 1 packets of established flows:
# the difference over N - 1 is the instructions per established packet;
# the second count over the flows, per new flow (its first packet). The
# router alone (its burst path, the same packets and table) is counted
# the same way, in the bench's `router_pass`.
# Writes bench/results/gateway-instructions.md.
#   bench/run-gateway-instructions.sh [--flows N] [--packets N]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
FLOWS=10000
PACKETS=200000
while [ $# -gt 0 ]; do
  case $1 in
    --flows) FLOWS=$2; shift 2 ;;
    --packets) PACKETS=$2; shift 2 ;;
    *) echo "usage: $0 [--flows N] [--packets N]" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p bench
WORK=$(mktemp -d /tmp/sluice-instr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Instructions executed inside sluice_bench::gateway::$2 (gateway_pass:
# the unclocked gateway's passes, new flows then established; router_pass:
# the router alone) with $1 established packets.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
    --collect-atstart=no --toggle-collect="sluice_bench::gateway::$2" \
    target/release/sluice-bench gateway --runs 1 --flows "$FLOWS" --packets "$1" ${3:-} \
    >"$WORK/log" 2>&1
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$WORK/log"
}
all=$(count "$PACKETS" gateway_pass)
one=$(count 1 gateway_pass)
rfall=$(count "$PACKETS" refused_pass)
rfone=$(count 1 refused_pass)
rall=$(count "$PACKETS" router_pass)
rone=$(count 1 router_pass)
# TCP flows (handshakes completed, then their segments), conntrack's
# window tracking on (gateway_pass) and off (nowin_pass).
tall=$(count "$PACKETS" gateway_pass --tcp)
tone=$(count 1 gateway_pass --tcp)
nall=$(count "$PACKETS" nowin_pass --tcp)
none=$(count 1 nowin_pass --tcp)
# TCP again, every interface clamping SYNs' MSS to 1,400 (`clamp_mss`).
call=$(count "$PACKETS" gateway_pass "--tcp --clamp-mss 1400")
cone=$(count 1 gateway_pass "--tcp --clamp-mss 1400")
# The same gateway logging its flows' changes for an HA peer (`--sync`).
sall=$(count "$PACKETS" gateway_pass --sync)
sone=$(count 1 gateway_pass --sync)
for v in "$all" "$one" "$rfall" "$rfone" "$rall" "$rone" "$tall" "$tone" "$nall" "$none" "$call" "$cone" "$sall" "$sone"; do
  [ -n "$v" ] || { echo "no count from valgrind: see $WORK/log" >&2; exit 1; }
done
{
  echo "# The gateway pipeline, instructions per packet"
  echo
  echo "Command: \`bench/run-gateway-instructions.sh --flows $FLOWS --packets $PACKETS\` $(provenance)."
  echo
  echo "valgrind's callgrind counting the instructions of the unclocked gateway passes of \`sluice-bench gateway\` (\`configs/gateway-fulltable.toml\`: full table, fw1_10k rules, SNAT; 64-byte IPv4/UDP in bursts of 32 through the stage's burst path; each packet's template copy included), run twice: $PACKETS and 1 packets of established flows (of the flows the first packets opened) after the first packet of each of $FLOWS flows; the packets of the flows not opened ($PACKETS / 20 of them, their destinations without a route) the same way. The router alone is counted the same way on the same packets (its burst path, \`route_burst\`). The TCP rows (\`--tcp\`): the same flows as TCP, each opened by its SYN, its handshake completed by the server's SYN+ACK and the client's ACK (not counted), then its established packets the client's next segment again and again, in the window; 80-byte segments with the options Linux sends (SYN and SYN+ACK: MSS, SACK permitted, timestamp, window scale 7; then a timestamp and 14 bytes of data); counted with conntrack's window tracking on and, in a gateway of its own, off. The MSS clamping rows (\`--clamp-mss 1400\`): the TCP passes again with every interface clamping SYNs to 1,400 bytes (each SYN's 1,460 lowered as it comes in; not looked at again as it leaves by an interface whose limit is no lower). The state-sync rows (\`--sync\`): the UDP passes again with the gateway logging every change for an HA peer into a ring with room for all of them."
  echo
  echo "| path | instructions/packet |"
  echo "|---|---|"
  echo "| gateway, established flow | $(( (all - one) / (PACKETS - 1) )) |"
  echo "| gateway, new flow (first packet) | $(( one / FLOWS )) |"
  echo "| gateway, packet of a flow not opened (no route) | $(( (rfall - rfone) / (PACKETS / 20 - 1) )) |"
  echo "| router alone | $(( (rall - rone) / (PACKETS - 1) )) |"
  echo "| gateway, established TCP flow (80-byte segments with a timestamp), window tracking on (the default) | $(( (tall - tone) / (PACKETS - 1) )) |"
  echo "| gateway, established TCP flow, \`tcp_window = false\` | $(( (nall - none) / (PACKETS - 1) )) |"
  echo "| gateway, new TCP flow (its SYN) | $(( tone / FLOWS )) |"
  echo "| gateway, new TCP flow, \`clamp_mss\` on every interface (its SYN clamped) | $(( cone / FLOWS )) |"
  echo "| gateway, established TCP flow, \`clamp_mss\` on every interface | $(( (call - cone) / (PACKETS - 1) )) |"
  echo "| gateway, established flow, state sync on (\`[ha]\`: changes logged for the peer) | $(( (sall - sone) / (PACKETS - 1) )) |"
  echo "| gateway, new flow, state sync on (its creation logged) | $(( sone / FLOWS )) |"
} | tee bench/results/gateway-instructions.md.tmp
mv bench/results/gateway-instructions.md.tmp bench/results/gateway-instructions.md
