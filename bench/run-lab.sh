#!/usr/bin/env bash
# Sluice (AF_PACKET and AF_XDP, configs/router-nat.toml) vs the Linux kernel doing the
# same routing, source NAT and filtering with nftables, on the namespace
# lab's veths (scripts/lab-net.sh): a generator in the client namespace
# sends 64-byte UDP frames, 256 flows, to the server through the router at
# fixed rates and at its maximum. The generator is Sluice itself (a
# `flowgen` worker on an AF_PACKET port on c0, paced on the TSC, driven by
# `sluice ctl gen`); with LAB_GEN=trafgen it is netsniff-ng's trafgen, the
# independent generator the figures were first measured with (results then
# in bench/results/lab-trafgen.md). The generator runs on CPU 0, the router
# on CPU 1 (Sluice's worker core; the kernel's forwarding through RPS). Per
# run: offered and forwarded packets per second (the veths' counters), CPU
# 1's busy time (the router CPU) and the machine's (all CPUs, less the
# generator's own user time: the kernel's veth work is in it for every
# router). Alternating runs; each row is the median run.
# These are kernel-bound figures: the veth path limits both routers.
# Writes bench/results/lab.md. As root.
#   [LAB_GEN=sluice|trafgen] bench/run-lab.sh [runs] [seconds] [rates...]
#   (default: 3 3 10000 100000 300000 max)
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-3}
SECS=${2:-3}
shift 2 2>/dev/null
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(10000 100000 300000 max)
GEN=${LAB_GEN:-sluice}
case $GEN in
  sluice) TOOLS="nft ip ethtool python3"; OUT=lab.md ;;
  trafgen) TOOLS="trafgen nft ip ethtool python3"; OUT=lab-trafgen.md ;;
  *) echo "LAB_GEN must be sluice or trafgen" >&2; exit 1 ;;
esac
for t in $TOOLS; do
  command -v $t >/dev/null || { echo "needs $t (apt-get install netsniff-ng nftables iproute2 ethtool python3)" >&2; exit 1; }
done
cargo build --release -q -p appliance --features afxdp || exit 1
SLUICE=$PWD/target/release/sluice
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-labbench.XXXXXX)
# trafgen raises the system's socket send buffers itself, but cannot from
# inside a namespace (read-only there); with the kernel router's work moved
# off its CPU (RPS, below) its default 208 KiB runs out and it stops with
# EAGAIN. Set what trafgen would (4 MiB default, 100 MiB max) here and put
# the old values back on exit.
# The kernel router's per-CPU backlog (where RPS queues frames for CPU 1)
# gets 8,192 packets, the size of Sluice's AF_XDP RX ring, so trafgen's
# bursts (below) find the same buffering on both.
SYSCTLS="net.core.wmem_default net.core.wmem_max net.core.netdev_max_backlog"
OLD=$(for k in $SYSCTLS; do echo -n "$k=$(sysctl -n $k) "; done)
sysctl -qw net.core.wmem_default=4194304 net.core.wmem_max=104857600 net.core.netdev_max_backlog=8192
trap 'lab_down; sysctl -qw $OLD; rm -rf "$WORK"' EXIT
# The router works on CPU 1 and the generator on CPU 0 (trafgen pins its
# one process to CPU 0; Sluice's generating worker is on core 0): Sluice's worker is moved to core 1, and the kernel's
# forwarding is steered there with RPS on the router's interfaces.
ROUTER_CPU=1
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
sed "s/^core = 0/core = $ROUTER_CPU/" configs/router-nat.toml > "$WORK/router-nat.toml"
# The same config with AF_XDP ports.
lab_afxdp_config "$WORK/router-nat.toml" "$WORK/router-nat-afxdp.toml"

# The Sluice generator (its worker busy-polls CPU 0).
lab_tester_config "$WORK/tester.toml" "$WORK/tester.sock" 0

# The same frames for trafgen.
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

# Idle (+ iowait) time of all CPUs / of one CPU. Busy time is what is left of
# the wall time: with a tickless idle the kernel measures idle time exactly,
# while its busy fields are tick samples, which a router that wakes and
# sleeps in step with the tick can dodge entirely.
# (printf: mawk prints a sum over 2^31 in exponent form, and the idle
# total of a host with many CPUs passes that within days of uptime.)
idle_jiffies() { awk '/^cpu / {printf "%.0f\n", $5 + $6}' /proc/stat; }
cpu_idle_jiffies() { awk -v c="cpu$1" '$1 == c {printf "%.0f\n", $5 + $6}' /proc/stat; }
HZ=$(getconf CLK_TCK)
# A process's user time (clock ticks; field 14 of /proc/PID/stat, the 12th
# after the command name in parentheses).
user_jiffies() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12}'; }

# One run: prints "offered_pps forwarded_pps machine_cpu_pct router_cpu_pct".
run() { # router rate
  lab_up
  local pid=
  if [ "$1" != kernel ]; then
    local cfg=$WORK/router-nat.toml
    [ "$1" = sluice-afxdp ] && cfg=$WORK/router-nat-afxdp.toml
    ip netns exec $NS_R "$SLUICE" run "$cfg" --json > "$WORK/s.json" 2> "$WORK/s.err" &
    pid=$!
    for _ in $(seq 50); do [ -s "$WORK/s.json" ] && break; sleep 0.1; done
  else
    lab_kernel_router $ROUTER_CPU
  fi
  # The server drops the stream first thing (UDP port 9 is closed there, and
  # answering it would cost every router's CPU the same ICMP work).
  inns $NS_S nft -f - <<'EOF'
table inet sink {
  chain pre {
    type filter hook prerouting priority -300;
    udp dport 9 drop
  }
}
EOF
  # Warm up: ARP on the client, the flows' conntrack entries.
  inns $NS_C ping -c 1 -W 1 198.19.0.2 > /dev/null 2>&1
  local rate_opt=() tpid=
  if [ "$GEN" = sluice ]; then
    rm -f "$WORK/tester.sock"
    ip netns exec $NS_C "$SLUICE" run "$WORK/tester.toml" > /dev/null 2> "$WORK/tester.err" &
    tpid=$!
    for _ in $(seq 100); do [ -S "$WORK/tester.sock" ] && break; sleep 0.1; done
  fi
  # trafgen at "max" is given a rate it never reaches, which makes it
  # send with one blocking sendto() a packet (each router is offered what
  # it takes): through its TX ring (no -b) its non-blocking flush gives up
  # with EAGAIN as soon as the kernel router's backlog holds its socket's
  # send buffer (on 2026-12-07 after 38,000 packets/s of a 3 s run).
  # At "max", trafgen sends until `timeout` stops it; else the rate for SECS.
  local until=() count=()
  if [ "$2" = max ]; then
    rate_opt=(-b 100000000pps); until=(timeout -s INT "$SECS")
  else
    rate_opt=(-b "${2}pps"); count=(-n $(( $2 * SECS )))
  fi
  local c0=$(lab_tx $NS_C c0) s0=$(lab_rx $NS_S s0) j0=$(idle_jiffies) p0=$(cpu_idle_jiffies $ROUTER_CPU)
  local u0=0 u1=0
  [ -n "$tpid" ] && u0=$(user_jiffies "$tpid")
  local t0=$(date +%s%N)
  if [ "$GEN" = sluice ]; then
    "$SLUICE" ctl -s "$WORK/tester.sock" gen start "$2" size 60 duration "$SECS" > /dev/null
    sleep "$SECS"
  else
    # trafgen's user time (its forked sender's included, reaped by it),
    # in seconds, from bash's `time`.
    local secs
    secs=$( { TIMEFORMAT=%U; time "${until[@]}" ip netns exec $NS_C trafgen -d c0 -c "$WORK/udp.cfg" -P 1 -q -C "${count[@]}" "${rate_opt[@]}" > /dev/null 2>&1; } 2>&1 )
    u1=$(awk -v s="$secs" -v hz="$HZ" 'BEGIN {printf "%.0f\n", s * hz}')
  fi
  sleep 0.2
  local t1=$(date +%s%N)
  local dt=$(( t1 - t0 ))
  local c1=$(lab_tx $NS_C c0) s1=$(lab_rx $NS_S s0) j1=$(idle_jiffies) p1=$(cpu_idle_jiffies $ROUTER_CPU)
  [ -n "$tpid" ] && u1=$(user_jiffies "$tpid")
  python3 -c '
import sys
c0, c1, s0, s1, j0, j1, p0, p1, u0, u1, dt, hz, n = map(float, sys.argv[1:])
s = dt / 1e9
machine = 100 * (n - (j1 - j0) / hz / s - (u1 - u0) / hz / s)
router = 100 * (1 - (p1 - p0) / hz / s)
print("%.0f %.0f %.1f %.1f" % ((c1 - c0) / s, (s1 - s0) / s, max(machine, 0), max(router, 0)))
' "$c0" "$c1" "$s0" "$s1" "$j0" "$j1" "$p0" "$p1" "$u0" "$u1" "$dt" "$HZ" "$(nproc)"
  if [ -n "$tpid" ]; then
    kill -INT "$tpid" && wait "$tpid" 2>/dev/null
    grep -i -E "error" "$WORK/tester.err" >&2
  fi
  if [ -n "$pid" ]; then
    kill -INT "$pid" && wait "$pid" 2>/dev/null
    grep -i -E "warn|error" "$WORK/s.err" >&2
  fi
  lab_down
}

if [ "$GEN" = sluice ]; then
  GEN_WHO="Sluice as the generator (a flowgen worker on CPU 0, AF_PACKET port on c0, driven by \`sluice ctl gen start RATE size 60 duration $SECS\`)"
  GEN_NOTE="Sluice paces a fixed rate on the TSC: packets evenly spaced, so at low rates every router wakes for nearly every packet (more CPU per packet than with bursts). Its worker busy-polls CPU 0: machine CPU, less its user time, still holds the system time of that polling, so compare machine CPU between routers of one run, not with trafgen's runs."
else
  GEN_WHO="trafgen (netsniff-ng, one process, on CPU 0)"
  GEN_NOTE="trafgen's rate shaper sends each second's packets at its full speed and then sleeps out the second, so a fixed rate is a burst per second that the router has to buffer."
fi
{
  echo "# Sluice vs the kernel on the namespace lab"
  echo
  echo "Command: \`LAB_GEN=$GEN bench/run-lab.sh $RUNS $SECS ${RATES[*]}\` $(provenance)."
  echo
  echo "$GEN_WHO in sl-client sends 64-byte UDP frames, 256 flows, to 198.19.0.2 through the router in sl-router: Sluice on AF_PACKET or AF_XDP (configs/router-nat.toml with its worker on core $ROUTER_CPU, and the AF_XDP variant with its ports' driver changed: conntrack, firewall, SNAT; poll mode \`interrupt\`) or the kernel (ip_forward, the same policy in nftables, masquerade; RPS steers the router interfaces' receive work to CPU $ROUTER_CPU). ${SECS} s per run, ${RUNS} alternating runs; each row is the run with the median forwarded rate. Router CPU is CPU $ROUTER_CPU's busy time (wall time less its idle time in /proc/stat, which a tickless kernel measures exactly; the busy fields are tick samples); machine CPU is all CPUs' (100% = one CPU) less the generator's own user time, so it includes the kernel's veth work on CPU 0 (in the generator's system time) (for AF_XDP, the XDP program and the copy into the UMEM; for the kernel, the RPS hand-off). $GEN_NOTE The kernel's backlog is raised to 8,192 packets, the size of Sluice's AF_XDP RX ring. The server drops the stream in its first netfilter hook, so that answering a closed port does not cost every router's CPU. Kernel-bound figures: the veth path limits every router."
  echo
  echo "| offered (pps) | router | sent pps | forwarded pps | router CPU (CPU $ROUTER_CPU) % | router CPU ns per forwarded packet | machine CPU % | machine CPU ns per forwarded packet |"
  echo "|---|---|---|---|---|---|---|---|"
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
import sys
rows = [list(map(float, x.split())) for x in sys.argv[3].split(";") if x.strip()]
# The run with the median forwarded rate, whole (columns stay together).
m = sorted(rows, key=lambda r: r[1])[(len(rows) - 1) // 2]
ns = lambda pct: pct / 100 * 1e9 / m[1] if m[1] > 0 else float("nan")
print("| %s | %s | %.0f | %.0f | %.1f | %.0f | %.1f | %.0f |" % (sys.argv[1], sys.argv[2], m[0], m[1], m[3], ns(m[3]), m[2], ns(m[2])))
' "$rate" "$r" "${res[$r]}"
    done
    unset res
  done
} | tee "$WORK/lab.md"
mkdir -p bench/results
cp "$WORK/lab.md" "bench/results/$OUT"
