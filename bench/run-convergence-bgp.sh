#!/usr/bin/env bash
# Convergence through a routing daemon, the way Sluice is deployed with
# one: the shared full table (901,899 IPv4 + 160,147 IPv6 prefixes from
# ../shared/data/routes) announced over eBGP by a BIRD 2 peer to the
# router's BIRD, whose sessions run through Sluice's punt path (AF_PACKET
# ports with TAP mirrors); the router's BIRD fills the kernel's main table,
# Sluice's netlink mirror follows it into the FIB. Reported side by side:
# when the kernel table was complete (BIRD's kernel protocols had exported
# every route), when Sluice's FIB held every route, Sluice's lag; then the
# same for withdrawing 1,000 IPv4 routes; and the forwarding meanwhile (a
# 200-pps ping from a third namespace through Sluice to the peer, over a
# route present all along: its loss). Writes
# bench/results/convergence-bgp.md. As root; needs `ip`, `ping` and
# BIRD 2 (`bird`, `birdc`: apt-get install bird2).
#   bench/run-convergence-bgp.sh [v4-routes [v6-routes]]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
for c in ip ping bird birdc; do
  command -v $c > /dev/null || { echo "needs $c (apt-get install bird2 iproute2 iputils-ping)"; exit 1; }
done
N4=${1:-0}
N6=${2:-0}
cargo build --release -q -p appliance
WORK=$(mktemp -d /tmp/sluice-convbgp.XXXXXX)
P=sl-cbp-$$ R=sl-cbr-$$ S=sl-cbs-$$
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for n in $P $R $S; do ip netns del $n 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 1" INT TERM
for n in $P $R $S; do ip netns add $n; ip -n $n link set lo up; done
ip link add p0 netns $P type veth peer name r0 netns $R
ip link add s0 netns $S type veth peer name r1 netns $R
ip -n $R link set r0 up
ip -n $R link set r1 up
# The router's kernel must not answer on the AF_PACKET ports' interfaces
# (its addresses are on the TAPs).
ip netns exec $R sysctl -qw net.ipv4.conf.r0.arp_ignore=8 net.ipv4.conf.r1.arp_ignore=8 \
  net.ipv6.conf.r0.disable_ipv6=1 net.ipv6.conf.r1.disable_ipv6=1
# The peer's veth keeps TSO/GSO on: Sluice's AF_PACKET port splits its
# aggregates into segments (the rx_gso_* xstats, reported below).
ip -n $P link set p0 up
ip -n $P addr add 198.18.0.2/24 dev p0
ip -n $P addr add 2001:db8:18::2/64 dev p0 nodad
ip -n $P addr add 192.0.2.1/32 dev lo
ip -n $P route add 198.19.0.0/24 via 198.18.0.1
ip -n $S link set s0 up
ip -n $S addr add 198.19.0.2/24 dev s0
ip -n $S route add default via 198.19.0.1

# The table, split: 1,000 IPv4 prefixes in their own protocol (the ones
# withdrawn), the rest; announced as blackholes, next hop self.
zcat ../shared/data/routes/bart_tier1_fulltable/prefixes.txt.gz | tr -d '\r' > "$WORK/prefixes"
awk -v n="$N4" '$1 !~ /:/ && $1 != "192.0.2.0/24" { print; c++; if (n > 0 && c >= n) exit }' "$WORK/prefixes" > "$WORK/v4"
awk -v n="$N6" '$1 ~ /:/ { print; c++; if (n > 0 && c >= n) exit }' "$WORK/prefixes" > "$WORK/v6"
R4=$(wc -l < "$WORK/v4")
R6=$(wc -l < "$WORK/v6")
W=1000
{
  echo "router id 198.18.0.2;"
  echo "protocol device {}"
  echo "protocol static w4 { ipv4; disabled;"
  head -$W "$WORK/v4" | sed 's/.*/  route & blackhole;/'
  echo "}"
  echo "protocol static s4 { ipv4; disabled;"
  tail -n +$((W + 1)) "$WORK/v4" | sed 's/.*/  route & blackhole;/'
  echo "}"
  echo "protocol static s6 { ipv6; disabled;"
  sed 's/.*/  route & blackhole;/' "$WORK/v6"
  echo "}"
  cat <<'EOT'
protocol bgp rtr4 {
  local 198.18.0.2 as 65002; neighbor 198.18.0.1 as 65001;
  connect retry time 1; error wait time 1, 5;
  ipv4 { import none; export all; next hop self; };
}
protocol bgp rtr6 {
  local 2001:db8:18::2 as 65002; neighbor 2001:db8:18::1 as 65001;
  connect retry time 1; error wait time 1, 5;
  ipv6 { import none; export all; next hop self; };
}
EOT
} > "$WORK/peer.conf"
cat > "$WORK/rtr.conf" <<'EOT'
router id 198.18.0.1;
log stderr { warning, error };
protocol device { scan time 10; }
protocol kernel k4 { ipv4 { export where source = RTS_BGP; }; }
protocol kernel k6 { ipv6 { export where source = RTS_BGP; }; }
protocol bgp peer4 {
  local 198.18.0.1 as 65001; neighbor 198.18.0.2 as 65002;
  connect retry time 1; error wait time 1, 5;
  ipv4 { import all; export none; };
}
protocol bgp peer6 {
  local 2001:db8:18::1 as 65001; neighbor 2001:db8:18::2 as 65002;
  connect retry time 1; error wait time 1, 5;
  ipv6 { import all; export none; };
}
EOT

SOCK=$WORK/sluice.sock
cat > "$WORK/sluice.toml" <<EOT
[run]
duration = 0
stats_period = 1.0

[[port]]
name = "inside"
driver = "afpacket"
mac = "02:51:00:00:00:00"
ipv4 = ["198.18.0.1/24"]
ipv6 = ["2001:db8:18::1/64"]
[port.afpacket]
iface = "r0"

[[port]]
name = "outside"
driver = "afpacket"
mac = "02:51:00:00:00:01"
ipv4 = ["198.19.0.1/24"]
[port.afpacket]
iface = "r1"

# The ping's destination, routed all along.
[[route]]
prefix = "192.0.2.0/24"
via = "198.18.0.2"

[control_plane]
tap = true
netlink = true

[management]
socket = "$SOCK"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["inside", "outside"]
[worker.poll]
mode = "adaptive"
EOT
ip netns exec $R target/release/sluice run "$WORK/sluice.toml" > "$WORK/sluice.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ -S "$SOCK" ] || { cat "$WORK/sluice.log"; exit 1; }
ip -n $R addr add 198.18.0.1/24 dev sl-inside
ip -n $R addr add 2001:db8:18::1/64 dev sl-inside nodad
ip -n $R addr add 198.19.0.1/24 dev sl-outside
ip netns exec $R bird -f -c "$WORK/rtr.conf" -s "$WORK/rtr.ctl" 2> "$WORK/rtr.log" &
PIDS+=($!)
ip netns exec $P bird -f -c "$WORK/peer.conf" -s "$WORK/peer.ctl" &
PIDS+=($!)
birdr() { ip netns exec $R birdc -s "$WORK/rtr.ctl" "$@"; }
birdp() { ip netns exec $P birdc -s "$WORK/peer.ctl" "$@"; }
for _ in $(seq 600); do
  [ "$(birdr show protocols 2>/dev/null | grep -c Established)" = 2 ] && break
  sleep 0.1
done
[ "$(birdr show protocols | grep -c Established)" = 2 ] || { birdr show protocols; cat "$WORK/sluice.log"; exit 1; }
# Routes in the router's kernel: IPv4 main-table prefixes (the FIB trie's
# own count) plus IPv6 route entries (rt6_stats), read without a dump.
kernel() {
  ip netns exec $R sh -c 'awk "/^Main:/ { m = 1 } m && /Prefixes:/ { print \$2; exit }" /proc/net/fib_triestat; cat /proc/net/rt6_stats' \
    | { read v4; read _ _ _ e6 _; echo $(( v4 + 16#$e6 )); }
}
ctl() { target/release/sluice ctl -s "$SOCK" --json "$@"; }
field() { ctl show routes | grep -o "\"$1\": [0-9]*" | head -1 | cut -d' ' -f2; }
now() { date +%s.%N; }
sleep 1
BASE=$(field mirrored)
KBASE=$(kernel)
# One round of the loops below (the kernel's count, then Sluice's): the
# lags' resolution.
P0=$(now); for _ in $(seq 10); do kernel > /dev/null; field mirrored > /dev/null; done; POLL=$(python3 -c "print(($(now) - $P0) / 10)")
WANT=$((BASE + R4 + R6))

# Forwarding meanwhile: a ping through Sluice to the peer.
ip netns exec $S ping -q -i 0.005 192.0.2.1 > "$WORK/ping.txt" 2>&1 &
PING=$!
PIDS+=($PING)
sleep 1
T0=$(now); S0=$SECONDS
birdp enable w4 > /dev/null
birdp enable s4 > /dev/null
birdp enable s6 > /dev/null
TK= TS=
while [ -z "$TK" ] || [ -z "$TS" ]; do
  [ -z "$TK" ] && [ "$(kernel)" -ge $((KBASE + R4 + R6)) ] && TK=$(now)
  [ -z "$TS" ] && [ "$(field mirrored)" -ge "$WANT" ] && TS=$(now)
  if [ $SECONDS -gt $((S0 + 600)) ]; then
    echo "no convergence in 600 s: kernel $(kernel), Sluice $(field mirrored) of $WANT" >&2
    exit 1
  fi
done
kill -INT $PING
wait $PING 2>/dev/null || true
SENT=$(grep -o '^[0-9]* packets transmitted' "$WORK/ping.txt" | cut -d' ' -f1 || echo "?")
GOT=$(grep -o '[0-9]* received' "$WORK/ping.txt" | cut -d' ' -f1 || echo "?")
OVR=$(field overruns); RES=$(field resyncs); REF=$(field refused)
GSO=$(ctl stats | python3 -c 'import json,sys; x=json.load(sys.stdin)["ports"][0]["xstats"]; print(x.get("rx_gso_frames", 0), x.get("rx_gso_segments", 0), x.get("rx_too_big", 0))')
BIRD_DROPS=$(grep -c "dropped some netlink" "$WORK/rtr.log" || true)

# The poll round again, with the whole table in the kernel (reading the
# kernel's count walks its trie): the resolution near the end of the load
# and for the withdrawals.
P0=$(now); for _ in $(seq 5); do kernel > /dev/null; field mirrored > /dev/null; done; POLL2=$(python3 -c "print(($(now) - $P0) / 5)")

# Withdraw 1,000.
sleep 2
K1=$(kernel); M1=$(field mirrored)
W0=$(now); S0=$SECONDS
birdp disable w4 > /dev/null
WK= WS=
while [ -z "$WK" ] || [ -z "$WS" ]; do
  [ -z "$WK" ] && [ "$(kernel)" -le $((K1 - W)) ] && WK=$(now)
  [ -z "$WS" ] && [ "$(field mirrored)" -le $((M1 - W)) ] && WS=$(now)
  if [ $SECONDS -gt $((S0 + 120)) ]; then
    echo "withdrawal not complete in 120 s" >&2
    exit 1
  fi
done
{
  echo "# Convergence through BIRD: the full table over eBGP, through Sluice's punt path"
  echo
  echo "Command: \`bench/run-convergence-bgp.sh $*\` $(provenance)."
  echo
  echo "$R4 IPv4 and $R6 IPv6 prefixes announced by a BIRD $(bird --version 2>&1 | awk '{print $NF}') peer over two"
  echo "eBGP sessions (IPv4, IPv6) to the router's BIRD, whose sessions run through"
  echo "Sluice (AF_PACKET ports, TAP mirrors, punt path; worker \`adaptive\`); the router's"
  echo "BIRD fills the kernel's main table, Sluice's netlink mirror (default 32 MiB"
  echo "buffer) follows it into the FIB. The kernel is the lower bound a netlink"
  echo "listener cannot beat, so Sluice's lag is the figure. Times from the peer"
  echo "enabling its static protocols."
  echo
  echo "| figure | value |"
  echo "|---|---|"
  python3 - "$T0" "$TK" "$TS" "$W0" "$WK" "$WS" "$POLL2" "$R4" "$R6" "$POLL" <<'PY'
import sys
t0, tk, ts, w0, wk, ws, poll = map(float, sys.argv[1:8])
n4, n6 = map(int, sys.argv[8:10])
poll0 = float(sys.argv[10])
n = n4 + n6
print(f"| kernel table complete | {tk - t0:.2f} s ({n / (tk - t0) / 1e3:.0f}k routes/s) |")
print(f"| Sluice's FIB complete | {ts - t0:.2f} s |")
def lag(d):
    # Each round reads the kernel, then Sluice: a lag under one round is
    # within the resolution (it can even read negative).
    return f"{d:.3f} s" if d >= poll else f"< {poll * 1e3:.0f} ms (within one poll round)"
print(f"| **Sluice's lag behind the kernel (announce)** | **{lag(ts - tk)}** |")
print(f"| 1,000 IPv4 withdrawals: kernel done | {wk - w0:.3f} s |")
print(f"| 1,000 IPv4 withdrawals: Sluice's FIB done | {ws - w0:.3f} s |")
print(f"| **Sluice's lag behind the kernel (withdraw)** | **{lag(ws - wk)}** |")
print(f"| one poll round: empty table / whole table (the lags' resolution) | {poll0 * 1e3:.0f} ms / {poll * 1e3:.0f} ms |")
PY
  echo "| netlink overruns (ENOBUFS) and resyncs during the load | $OVR, $RES (the first resync is the start-up dump) |"
  echo "| routes the FIB refused | $REF |"
  read GF GS TB <<< "$GSO"
  echo "| the peer's TSO aggregates split by the inside port (frames, segments), dropped as too big (whole run) | $GF, $GS; $TB |"
  echo "| \"kernel dropped some netlink messages\" in the router's BIRD log | $BIRD_DROPS |"
  echo "| ping through Sluice during the load (200/s, route present all along) | $SENT sent, $GOT answered (ping counts an echo still in flight when it is stopped as lost) |"
  echo
  echo "Polled in rounds, back to back: the kernel's own counts (\`/proc/net/fib_triestat\`"
  echo "main-table prefixes, \`/proc/net/rt6_stats\` route entries), Sluice's"
  echo "\`sluice ctl show routes\`; a lag shorter than one poll reads as one poll."
  echo "Reading the kernel's IPv4 count walks its trie (about 0.2-0.3 s of"
  echo "kernel CPU at a million routes), so the polling takes CPU from BIRD and"
  echo "the kernel during the load: the fill rate above is lower than"
  echo "unobserved. The peer's veth has TSO/GSO on, as a veth has by default."
} | tee bench/results/convergence-bgp.md.tmp
mv bench/results/convergence-bgp.md.tmp bench/results/convergence-bgp.md
