#!/usr/bin/env bash
# Real TCP and request/response latency through the gateway, Sluice vs the
# Linux kernel (issue 16 item 2): on the namespace lab's veths
# (scripts/lab-net.sh; offloads off, every frame whole), the router in
# sl-router is Sluice on AF_PACKET (its TPACKET_V3 ring as shipped, or
# `ring = "v2"`) or AF_XDP (configs/router-nat.toml:
# conntrack, firewall, SNAT; its worker on CPU 1, poll mode as shipped;
# and the same with `busy_poll_us = 100`, sluice-afxdp-bp) or
# the kernel (ip_forward, the same policy in nftables, masquerade; RPS
# steers the router interfaces' receive work to CPU 1). The client and the
# server run on CPU 0. Per router and run:
#   - iperf3 TCP, 1 stream and 4 streams, client -> server: Gbit/s
#     received, router CPU (CPU 1 busy) and router CPU per Gbit/s;
#   - ping RTT, 500 echo requests 10 ms apart: p50 and p99, and the
#     router CPU meanwhile (what a policy costs while nearly idle);
#   - a UDP request/response loop (64-byte request, echoed; one in
#     flight, as netperf's UDP_RR): transactions per second, p50, p99.
# Routers alternate; each figure is the median of the runs. Writes
# bench/results/tcp.md. As root; needs iperf3, nft, ethtool, python3.
#   bench/run-tcp.sh [runs] [seconds per iperf3/RR test]   (default 3 5)
#   MTU=9000 bench/run-tcp.sh [runs] [seconds]   (jumbo frames: every lab
#     link and Sluice's ports at that MTU, AF_XDP taking frames in several
#     chunks; writes bench/results/tcp-mtu9000.md)
#   TCP_PROFILE=1 bench/run-tcp.sh [runs] [seconds]   (where the router CPU
#     goes, by perf call chains: bench/results/tcp-profile.md; needs perf)
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-3}
SECS=${2:-5}
for t in iperf3 nft ip ethtool python3 ping taskset; do
  command -v $t >/dev/null || { echo "needs $t (apt-get install iperf3 nftables iproute2 ethtool python3 iputils-ping)" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
cargo build --release -q -p appliance --features afxdp || exit 1
SLUICE=$PWD/target/release/sluice
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-tcpbench.XXXXXX)
trap 'lab_down; rm -rf "$WORK"' EXIT
ROUTER_CPU=1
APP_CPU=0
sed "s/^core = 0/core = $ROUTER_CPU/" configs/router-nat.toml > "$WORK/router-nat.toml"
lab_afxdp_config "$WORK/router-nat.toml" "$WORK/router-nat-afxdp.toml"
sed 's/^\[port\.afpacket\]$/[port.afpacket]\nring = "v2"/' "$WORK/router-nat.toml" > "$WORK/router-nat-v2.toml"
BUSY_POLL_US=100
sed "s/^\[worker\.poll\]\$/[worker.poll]\nbusy_poll_us = $BUSY_POLL_US/" "$WORK/router-nat-afxdp.toml" > "$WORK/router-nat-afxdp-bp.toml"
grep -q "^busy_poll_us = $BUSY_POLL_US" "$WORK/router-nat-afxdp-bp.toml" || { echo "configs/router-nat.toml has no [worker.poll]" >&2; exit 1; }
ROUTERS=(sluice-afpacket sluice-afpacket-v2 sluice-afxdp sluice-afxdp-bp kernel)
MTU=${MTU:-1500}
OUT=tcp.md
if [ "$MTU" != 1500 ]; then
  # Jumbo frames: the ports' `mtu` (the router's), the links' set in
  # router_up.
  for f in router-nat router-nat-v2 router-nat-afxdp router-nat-afxdp-bp; do
    sed -i "s/^ipv4 = \(.*\)$/ipv4 = \1\nmtu = $MTU/" "$WORK/$f.toml"
    [ "$(grep -c "^mtu = $MTU" "$WORK/$f.toml")" = 2 ] || { echo "no two ports' ipv4 in $f.toml" >&2; exit 1; }
  done
  OUT=tcp-mtu$MTU.md
fi
POLICY=$(awk '/^\[worker.poll\]/ {p = 1} p && /^mode/ {gsub(/"/, "", $3); print $3; exit}' configs/router-nat.toml)

HZ=$(getconf CLK_TCK)
cpu_idle_jiffies() { awk -v c="cpu$1" '$1 == c {printf "%.0f\n", $5 + $6}' /proc/stat; }
# Busy % of the router CPU between two idle readings over $3 ns.
busy() { python3 -c 'import sys; a, b, ns, hz = map(float, sys.argv[1:]); print("%.1f" % max(0.0, 100 * (1 - (b - a) / hz / (ns / 1e9))))' "$1" "$2" "$3" "$HZ"; }

cat > "$WORK/echo.py" <<'EOF'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.2", 7007))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
EOF
cat > "$WORK/rr.py" <<'EOF'
import socket, sys, time
secs = float(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.0)
s.connect(("198.19.0.2", 7007))
msg = b"r" * 64
rtt, lost = [], 0
end = time.perf_counter() + secs
while time.perf_counter() < end:
    t = time.perf_counter()
    s.send(msg)
    try:
        s.recv(2048)
        rtt.append(time.perf_counter() - t)
    except socket.timeout:
        lost += 1
rtt.sort()
n = len(rtt)
print("%.0f %.1f %.1f %d" % (n / secs, rtt[n // 2] * 1e6 if n else 0, rtt[min(n - 1, n * 99 // 100)] * 1e6 if n else 0, lost))
EOF

# The lab with router $1 in it (its PID in RPID for Sluice) and the
# iperf3 server up; router_down takes it all down again.
router_up() {
  lab_up
  if [ "$MTU" != 1500 ]; then
    inns $NS_C ip link set c0 mtu "$MTU"
    inns $NS_R ip link set r0 mtu "$MTU"
    inns $NS_R ip link set r1 mtu "$MTU"
    inns $NS_S ip link set s0 mtu "$MTU"
  fi
  RPID=
  if [ "$1" != kernel ]; then
    local cfg=$WORK/router-nat.toml
    [ "$1" = sluice-afxdp ] && cfg=$WORK/router-nat-afxdp.toml
    [ "$1" = sluice-afxdp-bp ] && cfg=$WORK/router-nat-afxdp-bp.toml
    [ "$1" = sluice-afpacket-v2 ] && cfg=$WORK/router-nat-v2.toml
    ip netns exec $NS_R "$SLUICE" run "$cfg" --json > "$WORK/s.json" 2> "$WORK/s.err" &
    RPID=$!
    for _ in $(seq 50); do grep -q "control socket\|^  core" "$WORK/s.err" 2>/dev/null && break; sleep 0.1; done
    sleep 0.5
  else
    lab_kernel_router $ROUTER_CPU
  fi
  inns $NS_S taskset -c $APP_CPU iperf3 -s -B 198.19.0.2 -D -I "$WORK/iperf.pid" > /dev/null 2>&1
}
router_down() {
  [ -s "$WORK/iperf.pid" ] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null
  if [ -n "$RPID" ]; then
    kill -INT "$RPID" && wait "$RPID" 2>/dev/null
    grep -i -E "warn|error" "$WORK/s.err" | grep -v "differs from interface" >&2
  fi
  lab_down
}

# Gbit/s received and the senders' retransmissions, in one read of
# iperf3's report $1.
iperf_result() {
  python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["end"]; print("%.3f %d" % (e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0)))' "$1" 2>/dev/null || echo 0 0
}

# One run of every test through router $1; prints
# "gbps1 cpu1 gbps4 cpu4 ping_p50_us ping_p99_us ping_cpu rr_tps rr_p50 rr_p99 rr_lost
#  retransmits1 dropped1 retransmits4 dropped4".
run() {
  router_up "$1"
  inns $NS_S taskset -c $APP_CPU python3 "$WORK/echo.py" &
  local epid=$!
  sleep 0.3
  inns $NS_C ping -c 1 -W 2 198.19.0.2 > /dev/null 2>&1
  local out=() loss=() streams p0 p1 t0 t1 d0 d1 gbps retr
  for streams in 1 4; do
    p0=$(cpu_idle_jiffies $ROUTER_CPU); t0=$(date +%s%N); d0=$(lab_tx_dropped $NS_C c0)
    inns $NS_C taskset -c $APP_CPU iperf3 -c 198.19.0.2 -t "$SECS" -P $streams -J > "$WORK/i.json" 2> "$WORK/i.err"
    p1=$(cpu_idle_jiffies $ROUTER_CPU); t1=$(date +%s%N); d1=$(lab_tx_dropped $NS_C c0)
    read -r gbps retr < <(iperf_result "$WORK/i.json")
    out+=("$gbps" "$(busy "$p0" "$p1" $((t1 - t0)))")
    # And the client's segments its veth dropped on the way into the
    # router (no room in r0's queue).
    loss+=("$retr" "$((d1 - d0))")
  done
  p0=$(cpu_idle_jiffies $ROUTER_CPU); t0=$(date +%s%N)
  inns $NS_C taskset -c $APP_CPU ping -c 500 -i 0.01 -W 1 198.19.0.2 > "$WORK/ping.txt" 2>&1
  p1=$(cpu_idle_jiffies $ROUTER_CPU); t1=$(date +%s%N)
  out+=("$(python3 -c '
import re, sys
r = sorted(float(x) for x in re.findall(r"time=([0-9.]+) ms", open(sys.argv[1]).read()))
n = len(r)
print("%.0f %.0f" % (r[n // 2] * 1e3, r[min(n - 1, n * 99 // 100)] * 1e3) if n else "0 0")' "$WORK/ping.txt")")
  out+=("$(busy "$p0" "$p1" $((t1 - t0)))")
  out+=("$(inns $NS_C taskset -c $APP_CPU python3 "$WORK/rr.py" "$SECS")")
  out+=("${loss[@]}")
  kill "$epid" 2>/dev/null
  router_down
  echo "${out[*]}"
}

# TCP_PROFILE=1: where the router CPU's time goes instead of the full
# table of rates: for each router, iperf3 1 stream while `perf record`
# samples CPU $ROUTER_CPU (call chains, 4 kHz), each sample put in one
# category by its call chain (the first frame from the leaf up that names
# one): Sluice's own code, the kernel's AF_XDP and AF_PACKET copies and
# XDP frame conversion, the kernel's forwarding and nftables, the end
# hosts' TCP stacks (which run on the router CPU whenever a router's
# transmit hands them a frame), the veths and IP receive common to all.
# Writes bench/results/tcp-profile.md.
if [ "${TCP_PROFILE:-0}" = 1 ]; then
  command -v perf > /dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 1; }
  [ "$SECS" -ge 4 ] || { echo "TCP_PROFILE needs 4 or more seconds a run (perf samples all but the first and last)" >&2; exit 1; }
  cat > "$WORK/classify.py" <<'EOF'
import collections, sys
# Where the router CPU's time went, from `perf script -F comm,ip,sym,dso`
# (call chains, leaf first): each sample goes to the category of the first
# frame, walking from the leaf towards the root, that names one; a sample
# whose leaf is in user space of a Sluice thread is Sluice's own code.
CATS = [
    ("idle", "idle (the CPU halted)", {
        "do_idle", "default_idle", "pv_native_safe_halt", "cpuidle_enter_state"}),
    ("xsk_rx", "AF_XDP receive: the frame copied into the UMEM, its buffer freed", {
        "__xsk_map_redirect", "xsk_rcv", "__xsk_rcv", "xsk_generic_rcv", "__xsk_rcv_zc",
        "xsk_rcv_check"}),
    ("xdp", "XDP on the veth: the skb made an XDP frame (copied when cloned), the program", {
        "veth_xdp_rcv_skb", "veth_convert_skb_to_xdp_buff", "skb_pp_cow_data",
        "veth_xdp_rcv", "do_xdp_generic", "netif_receive_generic_xdp", "bpf_prog_run_generic_xdp"}),
    ("pkt_rx", "AF_PACKET receive: the frame copied into the ring", {
        "tpacket_rcv", "packet_rcv", "packet_rcv_spkt"}),
    ("tx", "Sluice's sends: a new skb per frame, the frame copied in", {
        "__xsk_generic_xmit", "xsk_sendmsg", "packet_sendmsg", "tpacket_snd", "packet_snd"}),
    ("fwd", "kernel forwarding: ip_forward, nftables, conntrack, NAT", {
        "ip_forward", "ip_forward_finish", "nft_do_chain", "nft_do_chain_inet", "nf_hook_slow",
        "nf_conntrack_in", "nf_nat_inet_fn", "nf_nat_ipv4_fn", "nf_nat_manip_pkt", "ipv4_conntrack_in",
        "nf_ct_seq_offset"}),
    ("hosts", "the end hosts' TCP and UDP (client and server stacks run here)", {
        "tcp_v4_rcv", "tcp_v4_do_rcv", "tcp_rcv_established", "tcp_write_xmit", "tcp_sendmsg",
        "tcp_recvmsg", "__tcp_transmit_skb", "tcp_ack", "__tcp_push_pending_frames",
        "tcp_gso_segment", "inet_gso_segment", "__skb_gso_segment", "udp_rcv", "__udp4_lib_rcv",
        "ip_local_deliver", "ip_local_deliver_finish", "tcp_tsq_handler", "tcp_send_ack",
        "tcp_data_queue", "sock_def_readable"}),
    ("wire", "the veths and IP receive common to every router (veth_xmit, netif, ip_rcv, the input route lookup)", {
        "veth_xmit", "__netif_rx", "netif_rx_internal", "enqueue_to_backlog", "veth_poll",
        "ip_rcv", "ip_rcv_core", "__netif_receive_skb_core", "__netif_receive_skb_one_core",
        "ip_sublist_rcv", "ip_list_rcv", "__dev_direct_xmit", "dev_hard_start_xmit",
        "__dev_queue_xmit", "ip_finish_output2", "ip_output", "neigh_hh_output",
        "ip_rcv_finish_core", "ip_route_input_noref", "ip_route_input_slow", "fib_table_lookup"}),
]
KEY = {s: c[0] for c in CATS for s in c[2]}
def classify(comm, frames):
    for ip, sym, dso in frames:
        c = KEY.get(sym)
        if c:
            return c
    if comm == "swapper":
        return "idle"
    if frames and not frames[0][0].startswith("ffff") and comm.startswith("worker"):
        return "user"
    return "other"
counts = collections.Counter()
comm, frames = None, []
def flush():
    if comm is not None:
        counts[classify(comm, frames)] += 1
for line in sys.stdin:
    if not line.strip():
        flush(); comm, frames = None, []
    elif line[0] in " \t":
        p = line.split()
        if len(p) >= 2:
            frames.append((p[0], p[1].split("+")[0], p[-1]))
    else:
        flush(); comm, frames = line.split()[0], []
flush()
if len(sys.argv) > 1:
    print("\n".join(["user\tSluice's own code (user space: parsing, conntrack, firewall, NAT, routing, the rings)"]
                    + ["%s\t%s" % (c[0], c[1]) for c in CATS[1:]]
                    + ["other\tother kernel work (syscall entry, softirq dispatch, skb frees, scheduling)"]))
else:
    print(" ".join("%s=%d" % (k, counts[k]) for k in ["user", *(c[0] for c in CATS), "other"]))
EOF
  PROUTERS=(sluice-afpacket sluice-afxdp kernel)
  declare -A prof=()
  for i in $(seq "$RUNS"); do
    for r in "${PROUTERS[@]}"; do
      router_up $r
      sleep 0.3
      inns $NS_C ping -c 1 -W 2 198.19.0.2 > /dev/null 2>&1
      p0=$(cpu_idle_jiffies $ROUTER_CPU); t0=$(date +%s%N)
      (sleep 1; perf record -C $ROUTER_CPU -g -F 4000 -e cpu-clock -o "$WORK/perf.data" -- sleep $((SECS - 2)) > /dev/null 2>&1) &
      ppid=$!
      inns $NS_C taskset -c $APP_CPU iperf3 -c 198.19.0.2 -t "$SECS" -P 1 -J > "$WORK/i.json" 2> "$WORK/i.err"
      p1=$(cpu_idle_jiffies $ROUTER_CPU); t1=$(date +%s%N)
      wait $ppid
      read -r gbps retr < <(iperf_result "$WORK/i.json")
      cats=$(perf script -i "$WORK/perf.data" -F comm,ip,sym,dso 2> /dev/null | python3 "$WORK/classify.py")
      router_down
      o="$gbps $(busy "$p0" "$p1" $((t1 - t0))) $cats"
      echo "profile $i $r: $o" >&2
      prof[$r]+="$o;"
    done
  done
  {
    echo "# Where the router CPU goes: TCP through Sluice and through the kernel"
    echo
    echo "Command: \`TCP_PROFILE=1 bench/run-tcp.sh $RUNS $SECS\` $(provenance)."
    echo
    echo "The lab and routers of [tcp.md](tcp.md) (gateway policy: conntrack, firewall, SNAT; router on CPU $ROUTER_CPU, client and server programs on CPU $APP_CPU). For each router, \`iperf3 -t $SECS -P 1\` while \`perf record -C $ROUTER_CPU -g\` samples the router CPU at 4 kHz for $((SECS - 2)) s; $RUNS runs each, routers alternating. Each sample goes to the category named by the first frame of its call chain, from the leaf up; the shares are of the busy samples, and **CPU % per Gbit/s** is a category's share times the router CPU's busy % (from /proc/stat over the test) divided by the Gbit/s received (medians of the runs). The end hosts' TCP stacks run on the router CPU whenever a router's transmit hands the receiving veth a frame (the softirq runs in the sender's context), for every router alike; they are not the router's work but are in every router's CPU figure in tcp.md."
    echo
    python3 - "$WORK/classify.py" "${prof[sluice-afpacket]}" "${prof[sluice-afxdp]}" "${prof[kernel]}" <<'EOF'
import statistics, subprocess, sys
names = [l.split("\t") for l in subprocess.run([sys.executable, sys.argv[1], "--names"], input="", capture_output=True, text=True).stdout.splitlines()]
routers = ["sluice-afpacket", "sluice-afxdp", "kernel"]
data = {}
for r, s in zip(routers, sys.argv[2:]):
    runs = [x.split() for x in s.split(";") if x.strip()]
    g = statistics.median(float(x[0]) for x in runs)
    b = statistics.median(float(x[1]) for x in runs)
    c = {}
    for x in runs:
        for kv in x[2:]:
            k, v = kv.split("=")
            c[k] = c.get(k, 0) + int(v)
    data[r] = (g, b, c, sum(c.values()) - c.get("idle", 0))
print("| | " + " | ".join(routers) + " |")
print("|---|" + "---|" * len(routers))
print("| TCP 1 stream Gbit/s (median) | " + " | ".join("%.2f" % data[r][0] for r in routers) + " |")
print("| router CPU busy % | " + " | ".join("%.0f" % data[r][1] for r in routers) + " |")
print("| router CPU % per Gbit/s | " + " | ".join("**%.1f**" % (data[r][1] / data[r][0]) if data[r][0] else "-" for r in routers) + " |")
for k, label in names:
    cells = []
    for r in routers:
        g, b, c, busy = data[r]
        share = c.get(k, 0) / busy if busy else 0
        cells.append("%.0f%%: %.1f" % (100 * share, share * b / g) if share >= 0.0005 and g else "-")
    print("| %s | %s |" % (label, " | ".join(cells)))
print()
print("Each category's cell: its share of the router CPU's busy samples, then its CPU % per Gbit/s. Busy samples per router: " + ", ".join("%s %d" % (r, data[r][3]) for r in routers) + ".")
EOF
  } | tee "$WORK/tcp-profile.md"
  mkdir -p bench/results
  cp "$WORK/tcp-profile.md" bench/results/tcp-profile.md
  exit 0
fi

declare -A res=()
# Each round runs every router once, in reverse order every other round
# (a host whose load drifts during a round favours none), and each
# round's own ratios are reported beside those of the medians: the
# routers of one round share the host's state.
for i in $(seq "$RUNS"); do
  order=("${ROUTERS[@]}")
  if [ $((i % 2)) = 0 ]; then
    order=()
    for ((j = ${#ROUTERS[@]} - 1; j >= 0; j--)); do order+=("${ROUTERS[$j]}"); done
  fi
  for r in "${order[@]}"; do
    o=$(run $r)
    echo "run $i $r: $o" >&2
    res[$r]+="$o;"
  done
done

{
  if [ "$MTU" = 1500 ]; then
    echo "# TCP and latency through the gateway: Sluice vs the kernel"
    echo
    echo "Command: \`bench/run-tcp.sh $RUNS $SECS\` $(provenance)."
  else
    echo "# TCP and latency through the gateway at MTU $MTU: Sluice vs the kernel"
    echo
    echo "Command: \`MTU=$MTU bench/run-tcp.sh $RUNS $SECS\` $(provenance)."
    echo
    echo "Every lab link (c0, r0, r1, s0) at MTU $MTU and Sluice's two ports \`mtu = $MTU\` (jumbo frames; AF_XDP sockets bound for multi-buffer, a frame over 1,792 bytes arriving in several chunks and put together in one buffer, sent from several). Otherwise as [tcp.md](tcp.md):"
  fi
  echo
  echo "The namespace lab (scripts/lab-net.sh: veths, offloads off, every frame whole). The router in sl-router: Sluice on AF_PACKET (sluice-afpacket: its TPACKET_V3 ring, blocks handed over when full or after 1 ms; sluice-afpacket-v2: \`ring = \"v2\"\`, frames handed over one by one) or AF_XDP (configs/router-nat.toml: conntrack, firewall, SNAT; worker on CPU $ROUTER_CPU, poll mode \`$POLICY\` as shipped; sluice-afxdp-bp: the same with \`busy_poll_us = $BUSY_POLL_US\`, polling on for $BUSY_POLL_US µs after the last packet before blocking), or the kernel (ip_forward, the same policy in nftables with masquerade; RPS steers the router interfaces' receive work to CPU $ROUTER_CPU). Client and server programs run on CPU $APP_CPU. Router CPU is CPU $ROUTER_CPU's busy time (wall time less its idle time in /proc/stat). Retransmissions: iperf3's count of the senders'. Dropped by the client's veth: c0's tx_dropped over the test, the segments the router's side had no room for (on AF_XDP r0's XDP ring, which the veth driver fixes at 256 frames; on the kernel's and AF_PACKET's way the CPU's 1,000-packet backlog, \`net.core.netdev_max_backlog\`). TCP: \`iperf3 -c -t $SECS -P N\`, client to server, Gbit/s received. Ping: 500 echo requests 10 ms apart. UDP RR: a 64-byte request echoed by the server, one in flight, for $SECS s (Python on both ends: its own cost is in every router's figure). Each figure is the median of $RUNS runs, routers alternating, in reverse order every other round (runs in brackets, in round order)."
  echo
  echo "| router | TCP 1 stream Gbit/s | router CPU % | CPU % per Gbit/s | TCP 4 streams Gbit/s | router CPU % | CPU % per Gbit/s | ping p50 / p99 µs | router CPU % while pinging | UDP RR transactions/s | RR p50 / p99 µs | TCP retransmissions, 1 / 4 streams [4-stream runs] | dropped by the client's veth, 1 / 4 streams [4-stream runs] |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for r in "${ROUTERS[@]}"; do
    python3 - "$r" "${res[$r]}" <<'EOF'
import statistics, sys
rows = [list(map(float, x.split())) for x in sys.argv[2].split(";") if x.strip()]
col = lambda i: [r[i] for r in rows]
med = lambda i: statistics.median(col(i))
runs = lambda i, f="%.2f": " [" + ", ".join(f % v for v in col(i)) + "]"
per = lambda g, c: "%.0f" % (c / g) if g > 0 else "-"
print("| %s | %.2f%s | %.0f | %s | %.2f%s | %.0f | %s | %.0f / %.0f | %.1f | %.0f%s | %.0f / %.0f | %.0f / %.0f%s | %.0f / %.0f%s |" % (
    sys.argv[1], med(0), runs(0), med(1), per(med(0), med(1)),
    med(2), runs(2), med(3), per(med(2), med(3)),
    med(4), med(5), med(6), med(7), runs(7, "%.0f"), med(8), med(9),
    med(11), med(13), runs(13, "%.0f"), med(12), med(14), runs(14, "%.0f")))
EOF
  done
  echo
  python3 - "${res[sluice-afpacket]}" "${res[sluice-afpacket-v2]:-}" "${res[sluice-afxdp]:-}" "${res[sluice-afxdp-bp]:-}" "${res[kernel]}" "$BUSY_POLL_US" <<'EOF'
import statistics, sys
def rows(s):
    return [list(map(float, x.split())) for x in s.split(";") if x.strip()]
def med(s, i):
    return statistics.median(r[i] for r in rows(s))
def rounds(s, k, i):
    """Each round's own ratio of column i: "median (min-max)"."""
    v = [a[i] / b[i] for a, b in zip(rows(s), rows(k)) if b[i]]
    return "%.2f-%.2f, median %.2fx" % (min(v), max(v), statistics.median(v)) if v else "-"
k = sys.argv[5]
print("Against the kernel (ratios of the medians, then in brackets each round's own ratio, its range and median; the issue's goal for AF_XDP: TCP >= 1.0x at <= its CPU per Gbit/s, ping p50 <= 1.5x):")
print()
for name, s in (("Sluice AF_PACKET (V3 ring)", sys.argv[1]), ("Sluice AF_PACKET (V2 ring)", sys.argv[2]), ("Sluice AF_XDP", sys.argv[3]), ("Sluice AF_XDP, busy_poll_us = " + sys.argv[6], sys.argv[4])):
    if not rows(s):
        continue
    r = lambda i: med(s, i) / med(k, i) if med(k, i) else float("nan")
    cpg = lambda g, c: (med(s, c) / med(s, g)) / (med(k, c) / med(k, g)) if med(s, g) and med(k, g) and med(k, c) else float("nan")
    print("- %s: TCP 1 stream %.2fx [%s] (CPU per Gbit/s %.2fx), 4 streams %.2fx [%s] (%.2fx); ping p50 %.2fx [%s]; UDP RR %.2fx the transactions [%s]" % (
        name, r(0), rounds(s, k, 0), cpg(0, 1), r(2), rounds(s, k, 2), cpg(2, 3), r(4), rounds(s, k, 4), r(7), rounds(s, k, 7)))
EOF
} | tee "$WORK/$OUT"
mkdir -p bench/results
cp "$WORK/$OUT" "bench/results/$OUT"
