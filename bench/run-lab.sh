#!/usr/bin/env bash
# Sluice (AF_PACKET and AF_XDP, configs/router-nat.toml) vs the Linux kernel doing the
# same routing, source NAT and filtering with nftables, on the namespace
# lab's veths (scripts/lab-net.sh): trafgen (netsniff-ng) in the client
# namespace sends 64-byte UDP frames, 256 flows, to the server through the
# router at fixed rates and at its maximum. Per run: offered and forwarded
# packets per second (the veths' counters), the machine's busy CPU
# (/proc/stat, all CPUs: trafgen and the kernel's veth work are in it for
# both routers), and Sluice's own CPU. Alternating runs, median of N.
# These are kernel-bound figures: the veth path limits both routers.
# Writes bench/results/lab.md. As root.
#   bench/run-lab.sh [runs] [seconds] [rates...]   (default: 3 3 10000 100000 300000 max)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-3}
shift 2 2>/dev/null
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(10000 100000 300000 max)
for t in trafgen nft ip ethtool python3; do
  command -v $t >/dev/null || { echo "needs $t (apt-get install netsniff-ng nftables iproute2 ethtool python3)" >&2; exit 1; }
done
cargo build --release -q -p appliance --features afxdp
SLUICE=$PWD/target/release/sluice
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-labbench.XXXXXX)
trap 'lab_down; rm -rf "$WORK"' EXIT
# The same config with AF_XDP ports.
lab_afxdp_config configs/router-nat.toml "$WORK/router-nat-afxdp.toml"

# 64-byte frames (60 + FCS): client -> server UDP port 9, source ports
# 1024-1279 (256 flows).
cat > "$WORK/udp.cfg" <<'EOF'
{
  0x02, 0x51, 0x00, 0x00, 0x00, 0x00,
  0x02, 0xc1, 0x00, 0x00, 0x00, 0x02,
  const16(0x0800),
  0x45, 0x00, const16(46), const16(0), const16(0x4000), 64, 17, csumip(14, 33),
  198, 18, 0, 2,
  198, 19, 0, 2,
  0x04, dinc(0, 255), const16(9), const16(26), csumudp(14, 34),
  fill(0x41, 18),
}
EOF

kernel_router() {
  inns $NS_R ip addr add 198.18.0.1/24 dev r0
  inns $NS_R ip addr add 198.19.0.1/24 dev r1
  inns $NS_R ip neigh replace 198.18.0.2 lladdr 02:c1:00:00:00:02 dev r0
  inns $NS_R ip neigh replace 198.19.0.2 lladdr 02:5e:00:00:00:02 dev r1
  inns $NS_R sysctl -qw net.ipv4.ip_forward=1
  # The same policy as configs/router-nat.toml.
  inns $NS_R nft -f - <<'EOF'
table inet filter {
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established accept
    oifname "r1" tcp dport 23 reject with tcp reset
    oifname "r1" tcp dport 25 drop
    ct state invalid drop
    iifname "r0" ct state { new, related } accept
    iifname "r1" oifname "r0" tcp dport 80 ct state new accept
    ct state related accept
  }
}
table ip nat {
  chain prerouting {
    type nat hook prerouting priority -100;
    iifname "r1" ip daddr 198.19.0.1 tcp dport 8080 dnat to 198.18.0.2:80
  }
  chain postrouting {
    type nat hook postrouting priority 100;
    oifname "r1" ip saddr 198.18.0.0/24 masquerade
  }
}
EOF
}

busy_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
proc_jiffies() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

# One run: prints "offered_pps forwarded_pps machine_cpu_pct router_cpu_pct".
run() { # router rate
  lab_up
  local pid=
  if [ "$1" != kernel ]; then
    local cfg=configs/router-nat.toml
    [ "$1" = sluice-afxdp ] && cfg=$WORK/router-nat-afxdp.toml
    ip netns exec $NS_R "$SLUICE" run "$cfg" --json > "$WORK/s.json" 2> "$WORK/s.err" &
    pid=$!
    for _ in $(seq 50); do [ -s "$WORK/s.json" ] && break; sleep 0.1; done
  else
    kernel_router
  fi
  # Warm up: ARP on the client, the flows' conntrack entries.
  inns $NS_C ping -c 1 -W 1 198.19.0.2 > /dev/null 2>&1
  local n rate_opt=()
  if [ "$2" = max ]; then n=0; else n=$(( $2 * SECS )); rate_opt=(-b "${2}pps"); fi
  local c0=$(lab_tx $NS_C c0) s0=$(lab_rx $NS_S s0) j0=$(busy_jiffies) p0=0
  [ -n "$pid" ] && p0=$(proc_jiffies "$pid")
  local t0=$(date +%s%N)
  if [ "$2" = max ]; then
    timeout -s INT "$SECS" ip netns exec $NS_C trafgen -d c0 -c "$WORK/udp.cfg" -P 1 -q -C "${rate_opt[@]}" > /dev/null 2>&1
  else
    ip netns exec $NS_C trafgen -d c0 -c "$WORK/udp.cfg" -P 1 -q -C -n "$n" "${rate_opt[@]}" > /dev/null 2>&1
  fi
  sleep 0.2
  local t1=$(date +%s%N)
  local dt=$(( t1 - t0 ))
  local c1=$(lab_tx $NS_C c0) s1=$(lab_rx $NS_S s0) j1=$(busy_jiffies) p1=0
  [ -n "$pid" ] && p1=$(proc_jiffies "$pid")
  python3 -c '
import sys
c0, c1, s0, s1, j0, j1, p0, p1, dt, hz = map(float, sys.argv[1:])
s = dt / 1e9
print("%.0f %.0f %.1f %.1f" % ((c1 - c0) / s, (s1 - s0) / s, 100 * (j1 - j0) / hz / s, 100 * (p1 - p0) / hz / s))
' "$c0" "$c1" "$s0" "$s1" "$j0" "$j1" "$p0" "$p1" "$dt" "$HZ"
  [ -n "$pid" ] && kill -INT "$pid" && wait "$pid" 2>/dev/null
  lab_down
}

{
  echo "# Sluice vs the kernel on the namespace lab"
  echo
  echo "Command: \`bench/run-lab.sh $RUNS $SECS ${RATES[*]}\` on $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -r)."
  echo
  echo "trafgen (one process) in sl-client sends 64-byte UDP frames, 256 flows, to 198.19.0.2 through the router in sl-router: Sluice on AF_PACKET or AF_XDP (configs/router-nat.toml, the AF_XDP variant with its ports' driver changed: conntrack, firewall, SNAT; poll mode \`interrupt\`) or the kernel (ip_forward, the same policy in nftables, masquerade). ${SECS} s per run, median of ${RUNS} alternating runs. Machine CPU is all CPUs' busy time from /proc/stat (100% = one CPU), so it includes trafgen and the kernel's veth work for both; Sluice CPU is the Sluice process alone. Kernel-bound figures: the veth path limits both."
  echo
  echo "| offered (pps) | router | sent pps | forwarded pps | machine CPU % | Sluice CPU % | machine CPU ns per forwarded packet |"
  echo "|---|---|---|---|---|---|---|"
  for rate in "${RATES[@]}"; do
    declare -A res=()
    for i in $(seq "$RUNS"); do
      for r in sluice-afpacket sluice-afxdp kernel; do
        out=$(run $r "$rate")
        echo "$rate $r run $i: $out" >&2
        res[$r]+="$out;"
      done
    done
    for r in sluice-afpacket sluice-afxdp kernel; do
      python3 -c '
import sys, statistics
rows = [list(map(float, x.split())) for x in sys.argv[3].split(";") if x.strip()]
m = [statistics.median(c) for c in zip(*rows)]
ns = m[2] / 100 * 1e9 / m[1] if m[1] > 0 else float("nan")
cpu = "%.1f" % m[3] if sys.argv[2].startswith("sluice") else "-"
print("| %s | %s | %.0f | %.0f | %.1f | %s | %.0f |" % (sys.argv[1], sys.argv[2], m[0], m[1], m[2], cpu, ns))
' "$rate" "$r" "${res[$r]}"
    done
    unset res
  done
} | tee "$WORK/lab.md"
mkdir -p bench/results
cp "$WORK/lab.md" bench/results/lab.md
