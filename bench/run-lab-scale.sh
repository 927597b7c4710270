#!/usr/bin/env bash
# The gateway at scale on the namespace lab, Sluice beside the Linux kernel
# (conntrack + nftables masquerade) and OVS-DPDK (its userspace conntrack
# and SNAT): the same policy as bench/run-lab.sh (configs/router-nat.toml;
# its nftables translation; OVS's conntrack + NAT flows), with the
# conntrack tables sized for 10k to 4M concurrent UDP flows (OVS-DPDK to
# 1M), one packet a flow a pass. The client replays a capture of N
# distinct flows to the server (`sluice-bench udp-pcap --host`: 4,096
# source ports on each server port, so that the NATs find free ports) with
# tcpreplay (`--topspeed
# --preload-pcap`, on CPU 0): its blocking sends wait while the veth's
# frames are still queued for the router (the kernel's RPS backlog), so
# each router is offered what it takes rather than a rate. The router
# works on CPU 1 (Sluice's worker; the kernel's forwarding steered there
# with RPS). Three passes a run:
#   new          each packet a flow the router has not seen (conntrack
#                insert, firewall, NAT port allocation);
#   fill         unmeasured: the flows whose first packet was dropped in
#                the first pass (a router behind the offered rate) get in;
#   established  every flow in the table: passes of the capture until
#                about EST_PACKETS packets (default 2,000,000) were offered.
# Per pass: forwarded packets per second (the server's s0 counter over the
# window when packets arrived), CPU 1's busy time (wall time less its idle
# time in /proc/stat) per forwarded packet, and the machine's (all CPUs
# less the replayer's user time; it holds the veth work on CPU 0 for every
# router) per forwarded packet; and the flows each router's table holds
# after the fill pass and after the last, and the bytes a held flow takes
# (see mem() below). UDP timeouts of all are raised
# to 300 s (a 4M-flow pass through the kernel takes 20 s, near the
# default 30 s). The
# kernel's nf_conntrack_max and buckets are raised to the table's size,
# and put back on exit. Alternating runs; each row is the run with the
# median established rate.
# Writes bench/results/lab-scale.md and two plots beside it (router CPU per
# packet against the flows, established and new). As root; tcpreplay's
# preloaded capture takes about 700 bytes a packet (3 GB at 4M flows).
#   [LAB_GEN=tcpreplay|trafgen] bench/run-lab-scale.sh [runs] [flows...]
#   (default: 3 10000 100000 1000000 4000000)
#   With tcpreplay, not 10M: it preloads a capture once a pass, and a
#   10M-packet one took over 6 minutes and 7 GB; a run of one router did
#   not finish in 14 minutes. Without --preload-pcap tcpreplay is the
#   bottleneck: on 2026-12-07 it sent 27,000 packets/s at 100% of CPU 0
#   through Sluice on AF_PACKET, whose worker was 12% busy.
#   LAB_GEN=trafgen (netsniff-ng's, apt-get install netsniff-ng) builds
#   each packet as it sends it, so it reaches 10M flows with no capture.
#   It is given a rate it never reaches (-b 100000000pps), which makes it
#   send with one blocking sendto() a packet as tcpreplay does: through
#   its TX ring (no -b) its non-blocking flush gives up with EAGAIN as
#   soon as the kernel router's backlog holds its socket's send buffer,
#   and with a send buffer large enough not to, the backlog overflows and
#   the kernel forwards at a third of its rate. The packets:
#   two counters, the source port over 4,096 values and the server port
#   over an odd number D of them, so every (source, server) port pair
#   comes once in each 4,096 * D packets (coprime periods). The flows are
#   4,096 * D for the smallest odd D that reaches the size asked (10M:
#   10,006,528), every pass sends whole periods, and the table says the
#   flows sent. Results in lab-scale-trafgen.md.
#   ROUTERS="sluice-afpacket sluice-afxdp kernel ovs-dpdk" (default) selects routers;
#   ovs-dpdk is OVS-DPDK (apt-get install openvswitch-switch-dpdk), run up to
#   OVS_MAX_FLOWS (default 1,000,000) flows. OUT names the results file
#   (default lab-scale.md).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-3}
shift 1 2>/dev/null
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(10000 100000 1000000 4000000)
read -r -a ROUTERS <<< "${ROUTERS:-sluice-afpacket sluice-afxdp kernel ovs-dpdk}"
EST_PACKETS=${EST_PACKETS:-2000000}
OVS_MAX_FLOWS=${OVS_MAX_FLOWS:-1000000}
GEN=${LAB_GEN:-tcpreplay}
case $GEN in
  tcpreplay) OUT=${OUT:-lab-scale.md} ;;
  trafgen) OUT=${OUT:-lab-scale-trafgen.md} ;;
  *) echo "LAB_GEN must be tcpreplay or trafgen" >&2; exit 1 ;;
esac
case " ${ROUTERS[*]} " in
  *" ovs-dpdk "*) [ -x /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk ] ||
    { echo "ovs-dpdk needs openvswitch-switch-dpdk (apt-get install openvswitch-switch-dpdk)" >&2; exit 1; } ;;
esac
for t in $GEN taskset nft ip ethtool python3 sysctl; do
  command -v $t >/dev/null || { echo "needs $t (apt-get install tcpreplay netsniff-ng util-linux nftables iproute2 ethtool python3 procps)" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
cargo build --release -q -p appliance --features afxdp || exit 1
cargo build --release -q -p bench || exit 1
SLUICE=$PWD/target/release/sluice
BENCH=$PWD/target/release/sluice-bench
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-labscale.XXXXXX)
ROUTER_CPU=1
# The kernel's conntrack limits (global, set from the initial namespace)
# and the backlog, as bench/run-lab.sh sets it; put back on exit.
modprobe nf_conntrack 2>/dev/null
SYSCTLS="net.core.netdev_max_backlog net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_buckets vm.nr_hugepages"
OLD=$(for k in $SYSCTLS; do echo -n "$k=$(sysctl -n $k) "; done)
trap 'lab_down; sysctl -qw $OLD; rm -rf "$WORK"' EXIT
trap 'exit 1' INT TERM
sysctl -qw net.core.netdev_max_backlog=8192

# trafgen's flows for a size asked: 4,096 source ports times the smallest
# odd number of server ports that reaches it (coprime periods, so each
# pair comes once a period). tcpreplay's capture has the size asked.
flows_sent() { # size
  if [ "$GEN" = trafgen ]; then
    local d=$(( ($1 + 4095) / 4096 ))
    [ $(( d % 2 )) -eq 1 ] || d=$(( d + 1 ))
    echo $(( 4096 * d ))
  else
    echo "$1"
  fi
}

# trafgen's packets for N flows: what `sluice-bench udp-pcap --host`
# writes (64-byte frames from 198.18.0.2 to 198.19.0.2, DF, TTL 64), the
# source port counting through 1024..5119 and the server port through
# 1024..1023+N/4096; trafgen fills in the checksums.
trafgen_config() { # flows out
  cat > "$2" <<EOF
{
  eth(da=02:51:00:00:00:00, sa=02:c1:00:00:00:02),
  ipv4(sa=198.18.0.2, da=198.19.0.2, ttl=64, df),
  udp(sp=dinc(1024, 5119), dp=dinc(1024, $(( 1023 + $1 / 4096 )))),
  fill(0x41, 18)
}
EOF
}

# The router's config: configs/router-nat.toml on core 1 with a control
# socket and a table for `cap` flows.
router_config() { # flows driver out
  local cap=$(( $1 * 17 / 16 ))
  [ $cap -ge 1024 ] || cap=1024
  {
    sed "s/^core = 0/core = $ROUTER_CPU/" configs/router-nat.toml
    printf '\n[management]\nsocket = "%s"\n\n[conntrack]\ncapacity = %d\nunreplied_s = 300\n' "$WORK/r.sock" "$cap"
  } > "$3.tmp"
  if [ "$2" = afxdp ]; then lab_afxdp_config "$3.tmp" "$3"; rm "$3.tmp"; else mv "$3.tmp" "$3"; fi
}

# Run in the server's namespace: starts the replayer (the command after
# the first three arguments: tcpreplay or trafgen on CPU 0 in the
# client's namespace) once it has read the counters, waits (up to 120 s: the
# replayer reads its capture first) for the server's s0 to receive 64
# packets, then samples it every 10 ms until the replayer has exited and s0
# has received nothing for 0.5 s. Prints "window_s forwarded
# router_busy_pct machine_busy_pct": the window from the 64th packet to the
# last, the packets s0 received in it, CPU busy time over it (wall less idle in /proc/stat; the machine's less the
# replayer's user time, its forked senders' included, 100% = one CPU).
SAMPLER='
import os, signal, subprocess, sys, time
cpu, err, cmd = "cpu" + sys.argv[1], sys.argv[2], sys.argv[3:]
hz = os.sysconf("SC_CLK_TCK")
def rx():
    with open("/sys/class/net/s0/statistics/rx_packets") as f:
        return int(f.read())
def idle():
    d = {}
    with open("/proc/stat") as f:
        for l in f:
            if l.startswith("cpu"):
                x = l.split()
                d[x[0]] = int(x[4]) + int(x[5])
    return d
def user(pid):
    # The process and its children (trafgen forks a sender a CPU).
    try:
        with open("/proc/%d/stat" % pid) as f:
            t = int(f.read().rsplit(")", 1)[1].split()[11])
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return t + sum(user(int(c)) for c in f.read().split())
    except OSError:
        return 0
r0 = rx()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(err, "w"))
t = time.time()
# The first 64 packets mark the start (a stray frame does not).
while rx() - r0 < 64:
    if time.time() - t > 120 or p.poll() is not None:
        print("0 0 0 0")
        p.send_signal(signal.SIGINT)
        p.wait()
        sys.exit(0)
    time.sleep(0.001)
t0, i0, u0, rs = time.time(), idle(), user(p.pid), rx()
last, tl, il, ul = rs, t0, i0, u0
while True:
    time.sleep(0.01)
    c = rx()
    if c != last:
        last, tl, il, ul = c, time.time(), idle(), user(p.pid)
    elif time.time() - tl > 0.5 and p.poll() is not None:
        break
p.wait()
w = max(tl - t0, 1e-3)
router = 100 * (1 - (il[cpu] - i0[cpu]) / hz / w)
machine = 100 * (os.cpu_count() - (il["cpu"] - i0["cpu"]) / hz / w - (ul - u0) / hz / w)
print("%.3f %d %.1f %.1f" % (w, last - rs, max(router, 0), max(machine, 0)))
'

# OVS-DPDK as the router (Open vSwitch's userspace datapath, the
# `ovs-vswitchd-dpdk` of Debian's openvswitch-switch-dpdk): its own
# database and run directory under $WORK/ovs, DPDK on 1 GiB of 2 MiB huge
# pages (OVS runs DPDK `--in-memory`, which `--no-huge` cannot), r0 and r1 as DPDK af_packet ports, one PMD thread
# on CPU 1 (busy-polling: it is always 100% busy), the rest on CPU 0.
# OpenFlow: conntrack in zone 1 with source NAT to 198.19.0.1 on the way
# out and un-NAT on the way back (OVS's documented NAT pattern: ct(nat) to
# look up, ct(commit, nat(src=...)) for a new flow), MACs rewritten and the
# TTL decremented as a router does; invalid and everything else dropped.
# UDP timeouts 300 s through a zone timeout policy; conntrack's limit
# raised to the table's size.
OVS_SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
OVS_VSWITCHD=/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk
ovs() { inns $NS_R env OVS_RUNDIR="$WORK/ovs" OVS_LOGDIR="$WORK/ovs" OVS_DBDIR="$WORK/ovs" "$@"; }
ovs_vsctl() { ovs ovs-vsctl --db="unix:$WORK/ovs/db.sock" --timeout=60 "$@"; }
ovs_router() { # flows
  [ "$(sysctl -n vm.nr_hugepages)" -ge 600 ] || sysctl -qw vm.nr_hugepages=600
  rm -rf "$WORK/ovs"
  mkdir -p "$WORK/ovs"
  ovs ovsdb-tool create "$WORK/ovs/conf.db" "$OVS_SCHEMA" || return 1
  ovs ovsdb-server "$WORK/ovs/conf.db" --remote="punix:$WORK/ovs/db.sock" \
    --pidfile="$WORK/ovs/ovsdb.pid" --log-file="$WORK/ovs/ovsdb.log" -vconsole:off --detach 2>> "$WORK/ovs/start.err" || return 1
  ovs_vsctl --no-wait init
  ovs_vsctl --no-wait set Open_vSwitch . other_config:dpdk-init=true \
    other_config:dpdk-extra="--no-pci --file-prefix=ovs-$$" other_config:dpdk-socket-mem=1024 \
    other_config:pmd-cpu-mask=$(printf %x $((1 << ROUTER_CPU)))
  ovs taskset -c 0 "$OVS_VSWITCHD" "unix:$WORK/ovs/db.sock" --pidfile="$WORK/ovs/vswitchd.pid" \
    --log-file="$WORK/ovs/vswitchd.log" --unixctl="$WORK/ovs/vswitchd.ctl" -vconsole:off --detach 2>> "$WORK/ovs/start.err" ||
    { tail -5 "$WORK/ovs/vswitchd.log" >&2; return 1; }
  ovs_vsctl add-br br0 -- set bridge br0 datapath_type=netdev \
    -- add-port br0 p0 -- set Interface p0 type=dpdk options:dpdk-devargs=net_af_packet0,iface=r0 ofport_request=1 \
    -- add-port br0 p1 -- set Interface p1 type=dpdk options:dpdk-devargs=net_af_packet1,iface=r1 ofport_request=2 || return 1
  ovs_vsctl -- --id=@m create Datapath datapath_version=0 -- set Open_vSwitch . datapaths:netdev=@m > /dev/null
  ovs_vsctl add-zone-tp netdev zone=1 udp_first=300 udp_single=300 udp_multiple=300 || echo "ovs: no zone timeout policy" >&2
  ovs ovs-appctl -t "$WORK/ovs/vswitchd.ctl" dpctl/ct-set-maxconns $(( $1 * 17 / 16 > 3000000 ? $1 * 17 / 16 : 3000000 )) > /dev/null
  ovs ovs-ofctl del-flows br0
  ovs ovs-ofctl add-flows br0 - <<'EOF2'
table=0,priority=100,ip,in_port=1,nw_src=198.18.0.0/24,actions=ct(zone=1,nat,table=1)
table=0,priority=100,ip,in_port=2,nw_dst=198.19.0.1,actions=ct(zone=1,nat,table=1)
table=0,priority=0,actions=drop
table=1,priority=100,ct_state=+new+trk,ip,in_port=1,actions=ct(zone=1,commit,nat(src=198.19.0.1:1024-65535)),mod_dl_src:02:51:00:00:00:01,mod_dl_dst:02:5e:00:00:00:02,dec_ttl,output:2
table=1,priority=100,ct_state=+est+trk,ip,in_port=1,actions=mod_dl_src:02:51:00:00:00:01,mod_dl_dst:02:5e:00:00:00:02,dec_ttl,output:2
table=1,priority=100,ct_state=+est+trk,ip,in_port=2,actions=mod_dl_src:02:51:00:00:00:00,mod_dl_dst:02:c1:00:00:00:02,dec_ttl,output:1
table=1,priority=0,actions=drop
EOF2
}

# The flows the router holds.
held() { # router
  if [ "$1" = kernel ]; then
    inns $NS_R cat /proc/sys/net/netfilter/nf_conntrack_count
  elif [ "$1" = ovs-dpdk ]; then
    ovs ovs-appctl -t "$WORK/ovs/vswitchd.ctl" dpctl/ct-get-nconns 2>/dev/null || echo "?"
  else
    "$SLUICE" ctl -s "$WORK/r.sock" --json show conntrack --limit 0 2>/dev/null |
      python3 -c 'import json, sys; print(sum(w["entries"] for w in json.load(sys.stdin)["workers"]))' 2>/dev/null || echo "?"
  fi
}

# Bytes the router's flows take, read before the first pass and after the
# fill pass: the kernel's slab memory (/proc/meminfo `Slab`: the
# `nf_conntrack` objects, their extensions, NAT's hash) and OVS-DPDK's
# resident memory (its conntrack allocates each connection as it comes);
# Sluice allocates its whole table at start, so its figure is the table's
# size as `sluice check` prints it (whole MiB).
# (Integers printed with %.0f: mawk prints a product over 2^31 in
# exponent form, which the shell's arithmetic refuses.)
mem() { # router
  case $1 in
    kernel) awk '/^Slab:/ {printf "%.0f\n", $2 * 1024}' /proc/meminfo ;;
    ovs-dpdk) awk '/^VmRSS:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$WORK/ovs/vswitchd.pid")/status" 2>/dev/null || echo 0 ;;
    *) echo 0 ;;
  esac
}
table_bytes() { # router flows
  case $1 in
    kernel) echo $(( 8 * $(sysctl -n net.netfilter.nf_conntrack_buckets) )) ;; # the bucket heads
    ovs-dpdk) echo 0 ;;
    *) ip netns exec $NS_R "$SLUICE" check "$WORK/router.toml" 2>/dev/null |
         sed -n 's/.*conntrack: [0-9]* flows per worker (\([0-9]*\) MiB each.*/\1/p' |
         awk '{printf "%.0f\n", $1 * 1048576}' ;;
  esac
}

# BYTES over FLOWS, or "?" when FLOWS is not a count.
per_flow() { # bytes flows
  case $2 in
    ''|*[!0-9]*|0) echo "?" ;;
    *) echo $(( $1 / $2 )) ;;
  esac
}

# One pass: the replayer sends the flows LOOPS times; prints "sent
# window_s forwarded router_pct machine_pct".
pass() { # loops flows
  local c0 c1 out gen
  if [ "$GEN" = trafgen ]; then
    gen=(trafgen -d c0 -c "$WORK/flows.cfg" -P 1 -q -b 100000000pps -n $(( $1 * $2 )))
  else
    gen=(tcpreplay -q -i c0 --topspeed --preload-pcap --loop="$1" "$WORK/flows.pcap")
  fi
  c0=$(lab_tx $NS_C c0)
  out=$(ip netns exec $NS_S python3 -c "$SAMPLER" "$ROUTER_CPU" "$WORK/replayer.err" \
    ip netns exec $NS_C taskset -c 0 "${gen[@]}")
  grep -i -E "error|fatal|fail" "$WORK/replayer.err" >&2
  c1=$(lab_tx $NS_C c0)
  echo "$(( c1 - c0 )) $out"
}

# One run: prints "new: <pass>|fill: held|est: <pass> held|bytes a flow".
run() { # router flows
  lab_up
  local pid= n=$2
  case $1 in
    sluice-afpacket|sluice-afxdp)
      router_config "$n" "${1#sluice-}" "$WORK/router.toml"
      rm -f "$WORK/r.sock"
      ip netns exec $NS_R "$SLUICE" run "$WORK/router.toml" > /dev/null 2> "$WORK/s.err" &
      pid=$!
      for _ in $(seq 600); do [ -S "$WORK/r.sock" ] && break; sleep 0.1; done
      ;;
    ovs-dpdk)
      ovs_router "$n" || echo "ovs-dpdk did not start" >&2
      ;;
    kernel)
      local cap=$(( n * 17 / 16 ))
      [ $cap -ge 262144 ] || cap=262144
      sysctl -qw net.netfilter.nf_conntrack_buckets=$cap net.netfilter.nf_conntrack_max=$cap
      lab_kernel_router $ROUTER_CPU
      inns $NS_R sysctl -qw net.netfilter.nf_conntrack_udp_timeout=300
      ;;
  esac
  # The server drops every UDP packet first thing, before its own conntrack.
  inns $NS_S nft -f - <<'EOF'
table inet sink {
  chain pre {
    type filter hook prerouting priority -300;
    meta l4proto udp drop
  }
}
EOF
  # The passes start once the router forwards: Sluice answers its
  # control socket before its workers have written their tables (at 10M
  # flows 2.4 GB, 5 s measured), and a pass started earlier meets full
  # rings.
  local i
  for i in $(seq 240); do
    inns $NS_C ping -c 1 -W 0.5 198.19.0.2 > /dev/null 2>&1 && break
  done
  [ "$i" -lt 240 ] || echo "$1: no answer through the router in 2 minutes" >&2
  local loops=$(( (EST_PACKETS + n - 1) / n ))
  local new fill est h1 h2 m0 m1 t
  m0=$(mem "$1")
  new=$(pass 1 "$n")
  fill=$(pass 1 "$n")
  h1=$(held "$1")
  m1=$(mem "$1")
  t=$(table_bytes "$1" "$n")
  est=$(pass "$loops" "$n")
  h2=$(held "$1")
  echo "$new|$h1|$est $h2|$(per_flow "$(( m1 - m0 + ${t:-0} ))" "$h1")"
  if [ -n "$pid" ]; then
    kill -INT "$pid" && wait "$pid" 2>/dev/null
    grep -i -E "warn|error" "$WORK/s.err" >&2
  fi
  lab_down
}

if [ "$GEN" = trafgen ]; then
  GEN_WHO="The client sends N distinct UDP flows (64-byte frames from 198.18.0.2 to 198.19.0.2) with trafgen (netsniff-ng's, one sender on CPU 0, \`-b 100000000pps\`: a rate it never reaches, which makes it send with one blocking \`sendto()\` a packet, as tcpreplay does, rather than through its TX ring, whose non-blocking flush gives up with EAGAIN when the kernel router's backlog holds the socket's send buffer; so it waits while its frames are still queued for the router, and each router is offered what it takes), building each packet as it sends it: the source port counts through 4,096 values and the server port through an odd number D of them, so each of the 4,096 * D flows comes once a period (coprime counters) and every pass sends whole periods. The flows column is 4,096 * D for the smallest odd D that reaches the size asked (10M: 10,006,528)"
else
  GEN_WHO="The client replays a capture of N distinct UDP flows (64-byte frames; \`sluice-bench udp-pcap --host 198.19.0.2\`: 4,096 source ports on each server port) with tcpreplay (\`--topspeed --preload-pcap\`, on CPU 0, one blocking \`send()\` a packet on c0: it waits while its frames are still queued for the router, so each router is offered what it takes)"
fi
{
  echo "# The gateway at scale on the namespace lab: Sluice vs Linux conntrack + nftables masquerade and OVS-DPDK"
  echo
  echo "Command: \`LAB_GEN=$GEN bench/run-lab-scale.sh $RUNS ${SIZES[*]}\` $(provenance)."
  echo
  echo "Plots: [established](${OUT%.md}-established.svg), [new flows](${OUT%.md}-new.svg) (router CPU per forwarded packet against the flows)."
  echo
  echo "$GEN_WHO, through the router in sl-router to the server, which drops them in its first netfilter hook. Routers: Sluice on AF_PACKET or AF_XDP (configs/router-nat.toml: conntrack, firewall, masquerade; worker on core $ROUTER_CPU, poll mode \`interrupt\`; \`conntrack.capacity\` 17/16 of the flows) and the kernel (ip_forward, the same policy in nftables with masquerade, RPS steering the receive work to CPU $ROUTER_CPU; \`nf_conntrack_max\` and \`nf_conntrack_buckets\` 17/16 of the flows, at least 262,144). OVS-DPDK up to $OVS_MAX_FLOWS flows (Debian's \`ovs-vswitchd-dpdk\`, Open vSwitch's userspace datapath: r0 and r1 as DPDK af_packet ports, one PMD thread busy-polling CPU $ROUTER_CPU, so always 100% busy; DPDK on 2 MiB huge pages; OpenFlow: \`ct(zone=1,nat,table=1)\`, a new flow \`ct(commit,nat(src=198.19.0.1:1024-65535))\`, MACs rewritten, \`dec_ttl\`, the rest dropped; its conntrack, no firewall rules beyond that). UDP timeouts 300 s on all (OVS: a zone timeout policy). A run: a **new** pass (each packet a new flow: conntrack insert, firewall, NAT port allocation), an unmeasured fill pass (the flows whose first packet the router dropped), then **established** passes until about $EST_PACKETS packets were offered. Forwarded pps over the window when the server received; router CPU is CPU $ROUTER_CPU's busy time (wall less idle in /proc/stat) per forwarded packet; machine CPU is all CPUs' busy time less the replayer's user time, per forwarded packet (it holds the veths' work on CPU 0: for the kernel, the RPS hand-off; for AF_XDP, the XDP program and the copy into the UMEM). Held: the flows in the router's table after the fill pass and after the established passes (Sluice: \`sluice ctl show conntrack\`; the kernel: \`nf_conntrack_count\`; OVS: \`ovs-appctl dpctl/ct-get-nconns\`). Bytes a flow: what the flows take over the flows held after the fill pass: for the kernel its slab memory's growth from before the first pass (/proc/meminfo \`Slab\`: the \`nf_conntrack\` objects, their extensions, NAT's hash) plus its bucket heads (8 bytes each, 17/16 of the flows); for OVS-DPDK its resident memory's growth (it allocates each connection as it comes); for Sluice its table as \`sluice check\` prints it (whole MiB; allocated at start for 17/16 of the flows). $RUNS alternating runs; each row is the run with the median established forwarded rate. The veth path limits every router: these are CPU-per-packet figures at the rate the lab reaches, not line rates."
  echo
  echo "| flows | router | new: sent pps | new: forwarded pps | new: router ns/pkt | held after fill | bytes a flow | established: sent pps | forwarded pps | router CPU % | router ns/pkt | machine ns/pkt | held after |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for size in "${SIZES[@]}"; do
    n=$(flows_sent "$size")
    if [ "$GEN" = trafgen ]; then
      trafgen_config "$n" "$WORK/flows.cfg"
    else
      "$BENCH" udp-pcap --out "$WORK/flows.pcap" --packets "$n" --host 198.19.0.2 \
        --src 198.18.0.2 --src-mac 02:c1:00:00:00:02 --dst-mac 02:51:00:00:00:00 || exit 1
    fi
    declare -A res=()
    for i in $(seq "$RUNS"); do
      for r in "${ROUTERS[@]}"; do
        [ "$r" = ovs-dpdk ] && [ "$size" -gt "$OVS_MAX_FLOWS" ] && continue
        out=$(run "$r" "$n")
        echo "$n $r run $i: $out" >&2
        res[$r]+="$out;"
      done
    done
    for r in "${ROUTERS[@]}"; do
      [ -n "${res[$r]:-}" ] || continue
      python3 -c '
import sys
def row(x):
    new, held, est, per_flow = x.split("|")
    return [float(v) for v in new.split()], held.strip(), est.split(), per_flow.strip()
rows = [row(x) for x in sys.argv[3].split(";") if x.strip()]
# The run with the median established forwarded rate, whole.
def rate(p):
    return float(p[2]) / float(p[1]) if float(p[1]) > 0 else 0.0
rows.sort(key=lambda r: rate(r[2]))
new, held, est, per_flow = rows[(len(rows) - 1) // 2]
ns = lambda pct, fwd, w: pct / 100 * 1e9 * w / fwd if fwd > 0 else float("nan")
nsent, nw, nfwd, nrouter, _ = new
sent, w, fwd, router, machine, held2 = est
sent, w, fwd, router, machine = map(float, (sent, w, fwd, router, machine))
# A new pass under 0.2 s (10k flows) is too short for /proc/stat.
newcols = ("%.0f | %.0f | %.0f" % (nsent / nw, nfwd / nw, ns(nrouter, nfwd, nw))) if nw >= 0.2 else "(%.0f ms) | | " % (nw * 1e3)
print("| %s | %s | %s | %s | %s | %.0f | %.0f | %.1f | %.0f | %.0f | %s |" % (
    sys.argv[1], sys.argv[2], newcols,
    held, per_flow, sent / w if w else 0, fwd / w if w else 0, router, ns(router, fwd, w), ns(machine, fwd, w), held2))
' "$n" "$r" "${res[$r]}"
    done
    unset res
  done
} | tee "$WORK/out.md"
mkdir -p bench/results
cp "$WORK/out.md" "bench/results/$OUT"
# The plots, from the table just written.
for plot in "established|router ns/pkt|Established packets" "new|new: router ns/pkt|New flows (each packet a flow's first)"; do
  IFS='|' read -r name col what <<< "$plot"
  "$BENCH" plot-table --table "bench/results/$OUT" --x flows --y "$col" --series router \
    --out "bench/results/${OUT%.md}-$name.svg" --ylabel "router CPU ns per forwarded packet" \
    --title "$what through the router on the lab, by concurrent flows"
done
