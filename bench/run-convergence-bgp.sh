#!/usr/bin/env bash
# Convergence through a routing daemon, the way Sluice is deployed with
# one: the shared full table (901,899 IPv4 + 160,147 IPv6 prefixes from
# ../shared/data/routes) announced over eBGP by a BIRD 2 peer to the
# router's BIRD, whose sessions run through Sluice's punt path (AF_PACKET
# ports with TAP mirrors); the router's BIRD fills the kernel's main table,
# Sluice's netlink mirror follows it into the FIB. Reported side by side:
# when the kernel table was complete (its last route notification, stamped
# by `ip -ts monitor`), when Sluice's FIB held every route, Sluice's lag; then the
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
RMEM=$(sysctl -n net.core.rmem_max)
cleanup() {
  sysctl -qw net.core.rmem_max="$RMEM"
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "rc 67108864 monitor route" 2>/dev/null || true
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
ctl() { target/release/sluice ctl -s "$SOCK" --json "$@"; }
field() { ctl show routes | grep -o "\"$1\": [0-9]*" | head -1 | cut -d' ' -f2; }
now() { date +%s.%N; }
sleep 1
BASE=$(field mirrored)
# One poll of Sluice: the lags' resolution.
P0=$(now); for _ in $(seq 10); do field mirrored > /dev/null; done; POLL=$(python3 -c "print(($(now) - $P0) / 10)")
WANT=$((BASE + R4 + R6))

# The kernel's side, timed by its own notifications: `ip -ts monitor
# route` stamps each as it arrives, into a file (nothing slows its
# reading); counted afterwards.
# (`ip` asks with SO_RCVBUF, which the kernel caps at net.core.rmem_max:
# raised for the run, put back at exit.)
sysctl -qw net.core.rmem_max=67108864
ip netns exec $R ip -ts -rc 67108864 monitor route > "$WORK/monitor.txt" 2>&1 &
MON=$!
PIDS+=($MON)

# Forwarding meanwhile: a ping through Sluice to the peer.
ip netns exec $S ping -q -i 0.005 192.0.2.1 > "$WORK/ping.txt" 2>&1 &
PING=$!
PIDS+=($PING)
sleep 1
T0=$(now); S0=$SECONDS
birdp enable w4 > /dev/null
birdp enable s4 > /dev/null
birdp enable s6 > /dev/null
# Sluice's FIB cannot be complete before the kernel's table.
until [ "$(field mirrored)" -ge "$WANT" ]; do
  if [ $SECONDS -gt $((S0 + 600)) ]; then
    echo "no convergence in 600 s: Sluice $(field mirrored) of $WANT" >&2
    exit 1
  fi
done
TS=$(now)
kill -INT $PING
wait $PING 2>/dev/null || true
SENT=$(grep -o '^[0-9]* packets transmitted' "$WORK/ping.txt" | cut -d' ' -f1 || echo "?")
GOT=$(grep -o '[0-9]* received' "$WORK/ping.txt" | cut -d' ' -f1 || echo "?")
OVR=$(field overruns); RES=$(field resyncs); REF=$(field refused)
GSO=$(ctl stats | python3 -c 'import json,sys; x=json.load(sys.stdin)["ports"][0]["xstats"]; print(x.get("rx_gso_frames", 0), x.get("rx_gso_segments", 0), x.get("rx_too_big", 0))')
BIRD_DROPS=$(grep -c "dropped some netlink" "$WORK/rtr.log" || true)

# Withdraw 1,000.
sleep 2
M1=$(field mirrored)
W0=$(now); S0=$SECONDS
birdp disable w4 > /dev/null
until [ "$(field mirrored)" -le $((M1 - W)) ]; do
  if [ $SECONDS -gt $((S0 + 120)) ]; then
    echo "withdrawal not complete in 120 s" >&2
    exit 1
  fi
done
WS=$(now)
sleep 1
kill $MON 2>/dev/null || true
# The stamps of the kernel's last add (the distinct prefixes BIRD put into
# the main table reaching the table's size) and of its 1,000th delete;
# none when the monitor lost notifications (its socket overran).
read TK WK LOST < <(awk -v want=$((R4 + R6)) -v w=$W '
  / proto bird/ && !/ table / {
    ts = substr($1, 2, length($1) - 2)
    if ($2 == "Deleted") { if (a && ($3 in seen)) { delete seen[$3]; d++ } }
    else if (!($2 in seen)) { seen[$2] = 1; n++ }
    if (!a && n >= want) { a = 1; tk = ts }
    if (a && !wk && d >= w) { wk = ts }
  }
  /No buffer space|ENOBUFS/ { lost++ }
  END { print (tk ? tk : "-"), (wk ? wk : "-"), lost + 0 }' "$WORK/monitor.txt")
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
  python3 - "$T0" "$TK" "$TS" "$W0" "$WK" "$WS" "$POLL" "$R4" "$R6" <<'PY'
import sys, datetime
def t(v):
    # `ip -ts` stamps are local time, ISO; the others epoch seconds.
    if v == "-":
        return None
    if "T" in v:
        return datetime.datetime.strptime(v, "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    return float(v)
t0, tk, ts, w0, wk, ws, poll = map(t, sys.argv[1:8])
n = int(sys.argv[8]) + int(sys.argv[9])
def lag(d):
    # The kernel's time is its notification's; Sluice's is polled.
    if d is None:
        return "unknown (the monitor lost notifications)"
    return f"{d:.3f} s" if d >= poll else f"< {poll * 1e3:.0f} ms (within one poll)"
if tk:
    print(f"| kernel table complete (its last notification) | {tk - t0:.2f} s ({n / (tk - t0) / 1e3:.0f}k routes/s) |")
print(f"| Sluice's FIB complete | {ts - t0:.2f} s ({n / (ts - t0) / 1e3:.0f}k routes/s) |")
print(f"| **Sluice's lag behind the kernel (announce)** | **{lag(ts - tk if tk else None)}** |")
if wk:
    print(f"| 1,000 IPv4 withdrawals: kernel done | {wk - w0:.3f} s |")
print(f"| 1,000 IPv4 withdrawals: Sluice's FIB done | {ws - w0:.3f} s |")
print(f"| **Sluice's lag behind the kernel (withdraw)** | **{lag(ws - wk if wk else None)}** |")
print(f"| one poll of Sluice (the lags' resolution) | {poll * 1e3:.0f} ms |")
PY
  echo "| netlink overruns (ENOBUFS) and resyncs during the load | $OVR, $RES (the first resync is the start-up dump) |"
  echo "| notifications the timing monitor lost (overruns) | $LOST |"
  echo "| routes the FIB refused | $REF |"
  read GF GS TB <<< "$GSO"
  echo "| the peer's TSO aggregates split by the inside port (frames, segments), dropped as too big (whole run) | $GF, $GS; $TB |"
  echo "| \"kernel dropped some netlink messages\" in the router's BIRD log | $BIRD_DROPS |"
  echo "| ping through Sluice during the load (200/s, route present all along) | $SENT sent, $GOT answered (ping counts an echo still in flight when it is stopped as lost) |"
  echo
  echo "The kernel's times come from its own notifications: \`ip -ts monitor"
  echo "route\` stamps each as it arrives (into a file); the stamp at which the"
  echo "distinct prefixes BIRD put into the main table reach the table's size,"
  echo "and that of the 1,000th delete, are the kernel's. Sluice's FIB is polled"
  echo "back to back (\`sluice ctl show routes\`), so a lag shorter than one poll"
  echo "reads as one poll. The peer's veth has TSO/GSO on, as a veth has by"
  echo "default."
} | tee bench/results/convergence-bgp.md.tmp
mv bench/results/convergence-bgp.md.tmp bench/results/convergence-bgp.md
