#!/usr/bin/env bash
# Sluice's router (l3fwd mode, DPDK build) vs DPDK's l3fwd example in LPM
# mode, side by side on the same vdevs and routes: `net_pcap0` replays
# 1,024 distinct 64-byte IPv4/UDP packets from memory in a loop
# (infinite_rx) and `net_null1` (no-rx) takes what is routed; 16 routes
# 198.18.N.0/24 -> port 1. One forwarding core each, alternating runs,
# median of N; forwarded Mpps from port 1's TX counter (Sluice's JSON
# summary; l3fwd through DPDK telemetry, /ethdev/stats).
# Builds l3fwd from dpdk-doc's sources (/usr/share/dpdk/examples/l3fwd)
# into target/dpdk-examples. Writes bench/results/dpdk-l3fwd.md. As root.
#   bench/run-dpdk-l3fwd.sh [runs] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-3}
SECS=${2:-5}
SRC=/usr/share/dpdk/examples/l3fwd
[ -d "$SRC" ] || { echo "needs dpdk-doc (apt-get install dpdk-doc) for the l3fwd sources" >&2; exit 1; }
L3FWD=target/dpdk-examples/l3fwd/build/l3fwd
if [ ! -x "$L3FWD" ]; then
  # The example includes ../common: copy both.
  rm -rf target/dpdk-examples && mkdir -p target/dpdk-examples
  cp -r "$SRC" /usr/share/dpdk/examples/common target/dpdk-examples/
  # l3fwd asks every port for RX checksum offload; net_pcap and net_null
  # have none and refuse the configuration, so the copy asks for none.
  # (Without the offload l3fwd does not verify IPv4 header checksums;
  # Sluice does, in software.)
  sed -i 's|\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,|.offloads = 0,|' target/dpdk-examples/l3fwd/main.c
  grep -q '\.offloads = 0,' target/dpdk-examples/l3fwd/main.c
  make -s -C target/dpdk-examples/l3fwd > /dev/null
fi
cargo build --release -q -p appliance --features dpdk
cargo build --release -q -p bench
SLUICE=$PWD/target/release/sluice
BENCH=$PWD/target/release/sluice-bench
WORK=$(mktemp -d /tmp/sluice-l3fwd.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The traffic: 1,024 packets to 198.18.(i % 16).(i / 16 + 1), addressed to
# Sluice's port 0 MAC (l3fwd does not check the destination MAC).
"$BENCH" udp-pcap --out "$WORK/in.pcap" --packets 1024 --dst-mac 02:51:00:00:00:00
: > "$WORK/routes4.cfg"
for n in $(seq 0 15); do echo "R198.18.$n.0/24 1" >> "$WORK/routes4.cfg"; done
echo "R2001:db8::/32 1" > "$WORK/routes6.cfg"
{
  cat <<EOF
[run]
duration = $SECS
stats_period = 1.0
burst = 32
drain_us = 100

[dpdk]
eal_args = ["-l", "0,1"]

[[port]]
name = "in"
driver = "dpdk"
mac = "02:51:00:00:00:00"
ipv4 = ["198.19.0.1/24"]
rxd = 1024
txd = 1024
[port.dpdk]
device = "net_pcap0,rx_pcap=$WORK/in.pcap,infinite_rx=1"

[[port]]
name = "out"
driver = "dpdk"
mac = "02:51:00:00:00:01"
ipv4 = ["198.20.0.1/24"]
rxd = 1024
txd = 1024
[port.dpdk]
device = "net_null1,no-rx=1"

[[neighbor]]
ip = "198.20.0.2"
mac = "02:5e:00:00:00:01"
port = "out"
EOF
  for n in $(seq 0 15); do printf '\n[[route]]\nprefix = "198.18.%d.0/24"\nvia = "198.20.0.2"\n' "$n"; done
  cat <<EOF

[[worker]]
core = 1
mode = "l3fwd"
rx = ["in", "out"]
EOF
} > "$WORK/sluice.toml"

HUGE=()
[ "$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)" -gt 256 ] || HUGE=(--no-huge -m 1024)

sluice_run() {
  "$SLUICE" run "$WORK/sluice.toml" --json 2> "$WORK/s.err" | tail -1 | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
tx = s["ports"][1]["tx_pps"]
c = s["cores"][0]
print("%.3f %.1f" % (tx / 1e6, c["cycles_per_pkt"] or float("nan")))'
}

l3fwd_run() {
  local prefix=l3fwd-$$
  "$L3FWD" -l 1 --no-pci "${HUGE[@]}" --file-prefix "$prefix" --log-level '*:error' \
    --vdev "net_pcap0,rx_pcap=$WORK/in.pcap,infinite_rx=1" --vdev "net_null1,no-rx=1" \
    -- -p 0x3 -P --parse-ptype --config "(0,0,1),(1,0,1)" --lookup lpm \
    --rule_ipv4 "$WORK/routes4.cfg" --rule_ipv6 "$WORK/routes6.cfg" > "$WORK/l3fwd.log" 2>&1 &
  local pid=$!
  local sock=/var/run/dpdk/$prefix/dpdk_telemetry.v2
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  sleep 1
  python3 - "$sock" "$SECS" <<'EOF'
import json, socket, sys, time
def stats(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.recv(4096)
    s.send(b"/ethdev/stats,1")
    v = json.loads(s.recv(65536))["/ethdev/stats"]["opackets"]
    s.close()
    return v, time.time()
a, t0 = stats(sys.argv[1])
time.sleep(float(sys.argv[2]) - 1)
b, t1 = stats(sys.argv[1])
print("%.3f nan" % ((b - a) / (t1 - t0) / 1e6))
EOF
  kill -INT $pid; wait $pid 2>/dev/null || true
}

{
  echo "# Sluice l3fwd vs DPDK l3fwd (LPM)"
  echo
  echo "Command: \`bench/run-dpdk-l3fwd.sh $RUNS $SECS\` $(provenance); hugepages: $([ ${#HUGE[@]} -eq 0 ] && echo yes || echo "no (--no-huge)")."
  echo
  echo "net_pcap0 replays 1,024 distinct 64-byte IPv4/UDP packets from memory (infinite_rx); 16 routes 198.18.N.0/24 to port 1 (net_null1, no-rx); one forwarding core (core 1) each, burst 32; ${SECS} s per run, median of ${RUNS} alternating runs. Both check the IPv4 header (l3fwd its version and lengths; Sluice also its checksum, in software: the vdevs have no checksum offload), look up the LPM table, decrement the TTL with a checksum update and rewrite the MACs. The replay itself (net_pcap copying each packet into a fresh mbuf) is part of both figures."
  echo
  echo "| forwarder | forwarded Mpps | Sluice busy cycles/packet |"
  echo "|---|---|---|"
  s=() l=()
  for i in $(seq "$RUNS"); do
    r=$(sluice_run); echo "run $i sluice: $r" >&2; s+=("$r")
    r=$(l3fwd_run); echo "run $i l3fwd: $r" >&2; l+=("$r")
  done
  python3 - "${s[*]}" "${l[*]}" <<'EOF'
import statistics, sys
def med(x, k):
    v = x.split()
    return statistics.median(float(v[i]) for i in range(k, len(v), 2))
s, l = sys.argv[1], sys.argv[2]
print("| Sluice, l3fwd mode | %.2f | %.1f |" % (med(s, 0), med(s, 1)))
print("| DPDK l3fwd example, LPM | %.2f | - |" % med(l, 0))
print("\nSluice ÷ l3fwd: %.2f×" % (med(s, 0) / med(l, 0)))
EOF
} | tee "$WORK/out.md"
mkdir -p bench/results
cp "$WORK/out.md" bench/results/dpdk-l3fwd.md
