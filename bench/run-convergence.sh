#!/usr/bin/env bash
# Convergence of the netlink route mirror: the full IPv4 table (901,899
# prefixes from ../shared/data/routes) put into kernel table 100 with one
# `ip -batch` in a namespace, and Sluice (release build, two softnic ports
# whose generator keeps routing traffic through a route present all along)
# following it. Reported side by side: when the kernel table was complete
# (ip -batch returned), when Sluice's FIB held every route, Sluice's lag,
# the overruns and resyncs it took, and the forwarding during the load;
# then the same for withdrawing 1,000 routes. Writes
# bench/results/convergence.md. As root; needs `ip`.
#   bench/run-convergence.sh [routes]   (default: the whole table)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
N=${1:-0}
cargo build --release -q -p appliance
NS=sl-conv-$$
WORK=$(mktemp -d /tmp/sluice-conv.XXXXXX)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NS"
for d in 0 1; do
  ip -n "$NS" link add d$d type veth peer name d${d}p
  ip -n "$NS" addr add 198.1$((8 + d)).0.1/24 dev d$d
  ip -n "$NS" link set d$d up
  ip -n "$NS" link set d${d}p up
done
# The route the generator's traffic takes, there from the start.
ip -n "$NS" route add 203.0.113.0/24 via 198.19.0.2 dev d1 table 100
# The table as an ip batch (IPv4 prefixes; 203.0.113.0/24 left out).
zcat ../shared/data/routes/bart_tier1_fulltable/prefixes.txt.gz \
  | awk -v n="$N" '$1 !~ /:/ && $1 != "203.0.113.0/24" { print "route add " $1 " via 198.18.0.2 dev d0 table 100"; c++; if (n > 0 && c >= n) exit }' \
  > "$WORK/add.batch"
ROUTES=$(wc -l < "$WORK/add.batch")
head -1000 "$WORK/add.batch" | sed 's/^route add \([^ ]*\) .*/route del \1 table 100/' > "$WORK/del.batch"
SOCK=$WORK/sluice.sock
awk '/^\[\[route\]\]/{skip=1} /^\[\[(port|neighbor|worker)\]\]/{skip=0} !skip' configs/router.toml \
  | sed 's/^duration = 10/duration = 0/; s/rate = 200000/rate = 100000/' > "$WORK/router.toml"
cat >> "$WORK/router.toml" <<EOT

[management]
socket = "$SOCK"

[control_plane]
netlink = true
table = 100
interfaces = { p0 = "d0", p1 = "d1" }
EOT
ip netns exec "$NS" target/release/sluice run "$WORK/router.toml" > "$WORK/run.log" 2>&1 &
PID=$!
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
ctl() { target/release/sluice ctl -s "$SOCK" --json "$@"; }
# Polls stay light (no interpreter start): their cost is measured below.
# (`--json` prints `"key": value`.)
mirrored() { ctl show routes | grep -o '"mirrored": [0-9]*' | cut -d' ' -f2; }
field() { ctl show routes | grep -o "\"$1\": [0-9]*" | cut -d' ' -f2; }
ports() { ctl show ports | python3 -c 'import json,sys; p=json.load(sys.stdin)["ports"]; print(p[0]["rx_pkts"], p[1]["tx_pkts"])'; }
now() { date +%s.%N; }
sleep 1
BASE=$(mirrored)
P0=$(now); for _ in $(seq 20); do mirrored > /dev/null; done; POLL=$(python3 -c "print(($(now) - $P0) / 20)")
# Announce.
read RX0 TX0 < <(ports); T0=$(now)
ip -n "$NS" -batch "$WORK/add.batch"
TK=$(now)
WANT=$((BASE + ROUTES))
while [ "$(mirrored)" -lt "$WANT" ]; do :; done
TS=$(now); read RX1 TX1 < <(ports)
OVR=$(field overruns); RES=$(field resyncs)
# Withdraw 1,000.
sleep 1
W0=$(now)
ip -n "$NS" -batch "$WORK/del.batch"
WK=$(now)
while [ "$(mirrored)" -gt "$((WANT - 1000))" ]; do :; done
WS=$(now)
{
  echo "# Convergence of the netlink route mirror"
  echo
  echo "Command: \`bench/run-convergence.sh $*\` $(provenance)."
  echo
  echo "$ROUTES IPv4 routes put into kernel table 100 by one \`ip -batch\` in a namespace"
  echo "(the kernel at its own pace, faster than a BGP daemon's 70-82k routes/s),"
  echo "mirrored by Sluice (release build, default 32 MiB netlink buffer) into its"
  echo "FIB while its worker routes the generator's 100 kpps on p0 through a route"
  echo "present all along. Times from the start of the batch; the kernel is the"
  echo "lower bound a netlink listener cannot beat, so Sluice's lag is the figure."
  echo
  echo "| figure | value |"
  echo "|---|---|"
  python3 - "$T0" "$TK" "$TS" "$W0" "$WK" "$WS" "$POLL" "$ROUTES" "$OVR" "$RES" "$RX0" "$RX1" "$TX0" "$TX1" <<'PY'
import sys
t0, tk, ts, w0, wk, ws, poll = map(float, sys.argv[1:8])
n, ovr, res, rx0, rx1, tx0, tx1 = map(int, sys.argv[8:15])
print(f"| kernel table complete (ip -batch returned) | {tk - t0:.2f} s ({n / (tk - t0) / 1e3:.0f}k routes/s) |")
print(f"| Sluice's FIB complete | {ts - t0:.2f} s |")
print(f"| **Sluice's lag behind the kernel (announce)** | **{ts - tk:.2f} s** |")
print(f"| overruns (ENOBUFS) and resyncs during the load | {ovr}, {res} (the first resync is the start-up dump) |")
print(f"| packets received on p0 / forwarded to p1 during the load | {rx1 - rx0} / {tx1 - tx0} ({(tx1 - tx0) / max(rx1 - rx0, 1):.4f}), {(rx1 - rx0) / (ts - t0) / 1e3:.0f} kpps received of 100 offered |")
print(f"| 1,000 withdrawals: kernel done | {wk - w0:.3f} s |")
print(f"| 1,000 withdrawals: Sluice's FIB done | {ws - w0:.3f} s |")
print(f"| **Sluice's lag behind the kernel (withdraw)** | **{ws - wk:.3f} s** |")
print(f"| one poll of `sluice ctl show routes` (the lags' resolution) | {poll * 1e3:.0f} ms |")
PY
  echo
  echo "Polled back to back through \`sluice ctl show routes\`; a lag shorter than"
  echo "one poll reads as one poll. p1's TX also carries the router's ICMP"
  echo "unreachables (rate-limited to 1,000/s) to p1's own generator, whose traffic"
  echo "has no route here: TX above RX by about 1,000 per second of load means every"
  echo "received packet was forwarded."
} | tee bench/results/convergence.md.tmp
mv bench/results/convergence.md.tmp bench/results/convergence.md
