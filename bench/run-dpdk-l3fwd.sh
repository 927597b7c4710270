#!/usr/bin/env bash
# Sluice's router (l3fwd mode, DPDK build) vs DPDK's l3fwd example in LPM
# mode, side by side on the same vdevs and routes: `net_pcap0` replays
# distinct 64-byte IPv4/UDP packets from memory in a loop (infinite_rx)
# and `net_null1` (no-rx) takes what is routed. Three tables: 16 routes
# 198.18.N.0/24 -> port 1 (1,024 packets), the shared full table
# (901,899 IPv4 prefixes -> port 1; 8,192 packets to random addresses
# inside random prefixes), and its 160,147 IPv6 prefixes (8,192 62-byte
# IPv6/UDP packets, the same way). Three forwarders: Sluice, l3fwd as
# shipped, and l3fwd with Sluice's costliest IPv4 checks added (header
# checksum, TTL; on the IPv6 table it is l3fwd as shipped, not run).
# TABLES="16 full full6" by default.
# One forwarding core each, alternating runs, median of N; forwarded Mpps
# from port 1's TX counter (Sluice's JSON summary; l3fwd through DPDK
# telemetry, /ethdev/stats, once it forwards).
# Builds both l3fwd variants from dpdk-doc's sources
# (/usr/share/dpdk/examples/l3fwd) into target/dpdk-examples. Writes
# bench/results/dpdk-l3fwd.md. As root.
#   [TABLES="16 full full6"] bench/run-dpdk-l3fwd.sh [runs] [seconds]
#   L3FWD_COUNT=1 bench/run-dpdk-l3fwd.sh   (instructions a packet, valgrind;
#     writes bench/results/dpdk-l3fwd-instructions.md)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-3}
SECS=${2:-5}
SRC=/usr/share/dpdk/examples/l3fwd
[ -d "$SRC" ] || { echo "needs dpdk-doc (apt-get install dpdk-doc) for the l3fwd sources" >&2; exit 1; }
EX=target/dpdk-examples
# What the copies change (rebuilt when this changes):
# - l3fwd asks every port for RX checksum offload; net_pcap and net_null
#   have none and refuse the configuration, so the copies ask for none
#   (l3fwd then verifies no IPv4 header checksum at all);
# - the LPM's limits (1,024 rules, 256 second-level groups) and the FIB's
#   (65,536 routes; for IPv6 65,535 routes and 32,768 lower-level groups)
#   are raised to hold the full tables, and the mbuf pool to hold the
#   8,192 packets net_pcap keeps in memory;
# - the "checked" copy also drops a packet whose IPv4 header checksum does
#   not verify (rte_ipv4_cksum, in software) or whose TTL is under 2, in
#   rfc1812_process, where l3fwd makes its other RFC 1812 checks.
PATCHES=5
if [ "$(cat $EX/.patches 2>/dev/null)" != "$PATCHES" ]; then
  rm -rf $EX && mkdir -p $EX
  cp -r "$SRC" /usr/share/dpdk/examples/common $EX/
  sed -i 's|\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,|.offloads = 0,|' $EX/l3fwd/main.c
  sed -i 's|(unsigned)8192)|(unsigned)65536)|' $EX/l3fwd/main.c
  sed -i 's|#define IPV4_L3FWD_LPM_MAX_RULES         1024|#define IPV4_L3FWD_LPM_MAX_RULES (1 << 20)|; s|#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 8)|#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 16)|' $EX/l3fwd/l3fwd_lpm.c
  grep -q '\.offloads = 0,' $EX/l3fwd/main.c
  grep -q '(unsigned)65536)' $EX/l3fwd/main.c
  sed -i 's|config_ipv4.max_routes = (1 << 16);|config_ipv4.max_routes = (1 << 20);|' $EX/l3fwd/l3fwd_fib.c
  sed -i 's|config.max_routes = (1 << 16) - 1;|config.max_routes = (1 << 20);|; s|config.trie.num_tbl8 = (1 << 15);|config.trie.num_tbl8 = (1 << 17);|' $EX/l3fwd/l3fwd_fib.c
  grep -q 'config.max_routes = (1 << 20);' $EX/l3fwd/l3fwd_fib.c
  grep -q 'config.trie.num_tbl8 = (1 << 17);' $EX/l3fwd/l3fwd_fib.c
  grep -q 'MAX_RULES (1 << 20)' $EX/l3fwd/l3fwd_lpm.c
  grep -q 'max_routes = (1 << 20)' $EX/l3fwd/l3fwd_fib.c
  grep -q 'NUMBER_TBL8S (1 << 16)' $EX/l3fwd/l3fwd_lpm.c
  cp -r $EX/l3fwd $EX/l3fwd-checked
  python3 - $EX/l3fwd-checked/l3fwd_common.h <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
old = "\t\tipv4_hdr->time_to_live--;\n"
assert s.count(old) == 1
s = s.replace(old, "\t\tif (rte_ipv4_cksum(ipv4_hdr) != 0 || ipv4_hdr->time_to_live < 2)\n\t\t\tdp[0] = BAD_PORT;\n" + old)
open(p, "w").write(s)
EOF
  make -s -C $EX/l3fwd > /dev/null
  make -s -C $EX/l3fwd-checked > /dev/null
  echo "$PATCHES" > $EX/.patches
fi
cargo build --release -q -p appliance --features dpdk
cargo build --release -q -p bench
SLUICE=$PWD/target/release/sluice
BENCH=$PWD/target/release/sluice-bench
TABLE=$(realpath ../shared/data/routes/bart_tier1_fulltable/prefixes.txt.gz)
WORK=$(mktemp -d /tmp/sluice-l3fwd.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The traffic, addressed to Sluice's port 0 MAC (l3fwd does not check the
# destination MAC): 1,024 packets to 198.18.(i % 16).(i / 16 + 1), and
# 8,192 to the full table.
"$BENCH" udp-pcap --out "$WORK/in-16.pcap" --packets 1024 --dst-mac 02:51:00:00:00:00
"$BENCH" udp-pcap --out "$WORK/in-full.pcap" --packets 8192 --full-table --dst-mac 02:51:00:00:00:00
"$BENCH" udp-pcap --out "$WORK/in-full6.pcap" --packets 8192 --full-table6 --size 62 --dst-mac 02:51:00:00:00:00
# l3fwd's routes per table: routesF-T.cfg, family F, table T.
: > "$WORK/routes4-16.cfg"
for n in $(seq 0 15); do echo "R198.18.$n.0/24 1" >> "$WORK/routes4-16.cfg"; done
zcat "$TABLE" | tr -d '\r' | awk '!/:/ && NF { print "R" $1 " 1" }' > "$WORK/routes4-full.cfg"
cp "$WORK/routes4-16.cfg" "$WORK/routes4-full6.cfg"
echo "R2001:db8::/32 1" > "$WORK/routes6-16.cfg"
cp "$WORK/routes6-16.cfg" "$WORK/routes6-full.cfg"
zcat "$TABLE" | tr -d '\r' | awk '/:/ && NF { print "R" $1 " 1" }' > "$WORK/routes6-full6.cfg"
TABLES=${TABLES:-16 full full6}
for t in $TABLES; do
  {
    cat <<EOF
[run]
duration = $SECS
stats_period = 1.0
burst = 32
drain_us = 100

[dpdk]
eal_args = ["-l", "0,1"]
mbufs = 65535

[[port]]
name = "in"
driver = "dpdk"
mac = "02:51:00:00:00:00"
ipv4 = ["198.19.0.1/24"]
ipv6 = ["2001:db8:19::1/64"]
rxd = 1024
txd = 1024
[port.dpdk]
device = "net_pcap0,rx_pcap=$WORK/in-$t.pcap,infinite_rx=1"

[[port]]
name = "out"
driver = "dpdk"
mac = "02:51:00:00:00:01"
ipv4 = ["198.20.0.1/24"]
ipv6 = ["2001:db8:20::1/64"]
rxd = 1024
txd = 1024
[port.dpdk]
device = "net_null1,no-rx=1"

[[neighbor]]
ip = "198.20.0.2"
mac = "02:5e:00:00:00:01"
port = "out"

[[neighbor]]
ip = "2001:db8:20::2"
mac = "02:5e:00:00:00:01"
port = "out"
EOF
    if [ "$t" = full ]; then
      printf '\n[router]\nroute_file = "%s"\nroute_file_via = ["198.20.0.2"]\n' "$TABLE"
    elif [ "$t" = full6 ]; then
      printf '\n[router]\nroute_file = "%s"\nroute_file_via = ["2001:db8:20::2"]\n' "$TABLE"
    else
      for n in $(seq 0 15); do printf '\n[[route]]\nprefix = "198.18.%d.0/24"\nvia = "198.20.0.2"\n' "$n"; done
    fi
    cat <<EOF

[[worker]]
core = 1
mode = "l3fwd"
rx = ["in", "out"]
EOF
  } > "$WORK/sluice-$t.toml"
done

# L3FWD_COUNT=1: instructions a packet instead of rates. valgrind's
# callgrind counts every instruction of each forwarder's loop (Sluice's
# worker thread, l3fwd's lpm_main_loop) over a run on the 16 routes, in
# DPDK's --no-huge mode (valgrind cannot map huge pages), and splits off
# what net_pcap's RX and net_null's TX execute, the same driver code for
# all three; packets are the calls net_null makes once a packet. Counts do
# not depend on what else the machine runs, as rates here do. The full
# table is not counted: loading it under valgrind takes many minutes.
if [ "${L3FWD_COUNT:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
  CSECS=${L3FWD_COUNT_SECS:-60}
  sed 's|eal_args = \["-l", "0,1"\]|eal_args = ["-l", "0,1", "--no-huge", "-m", "1024"]|; s|^duration = .*|duration = '"$CSECS"'|' \
    "$WORK/sluice-16.toml" > "$WORK/sluice-16v.toml"
  grep -q -- '--no-huge' "$WORK/sluice-16v.toml"
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.sluice" \
    "$SLUICE" run "$WORK/sluice-16v.toml" > /dev/null 2> "$WORK/s.err"
  for b in l3fwd l3fwd-checked; do
    # SIGINT after the run: l3fwd stops its loop and exits, and callgrind
    # writes its counts.
    timeout -s INT $((CSECS + 60)) valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$b" \
      "$EX/$b/build/l3fwd" -l 1 --no-pci --no-huge -m 3072 --file-prefix "l3fwd-$$" --log-level '*:error' \
      --vdev "net_pcap0,rx_pcap=$WORK/in-16.pcap,infinite_rx=1" --vdev "net_null1,no-rx=1" \
      -- -p 0x3 -P --parse-ptype --config "(0,0,1),(1,0,1)" --lookup lpm \
      --rule_ipv4 "$WORK/routes4-16.cfg" --rule_ipv6 "$WORK/routes6-16.cfg" > "$WORK/l3fwd.log" 2>&1 || true
  done
  for f in sluice l3fwd l3fwd-checked; do
    callgrind_annotate --tree=calling --inclusive=yes "$WORK/cg.$f" > "$WORK/tree.$f" 2>/dev/null
  done
  {
    echo "# Sluice l3fwd vs DPDK l3fwd: instructions per packet"
    echo
    echo "Command: \`L3FWD_COUNT=1 bench/run-dpdk-l3fwd.sh\` $(provenance)."
    echo
    echo "valgrind's callgrind counting every instruction of each forwarder's forwarding loop (Sluice's worker thread; l3fwd's \`lpm_main_loop\`) over a ${CSECS} s run of the rate benchmark's 16-route input (net_pcap0 replaying 1,024 distinct 64-byte IPv4/UDP packets to net_null1, burst 32, DPDK's \`--no-huge\` mode under valgrind), divided by the packets forwarded (the calls net_null's TX makes once a packet). **Drivers** is what net_pcap's RX and net_null's TX execute inside the loop, the same code for all three; **own** is the rest: the forwarder's loop, parsing, checks, lookup, rewrite (for l3fwd its software ptype parser too, which \`--parse-ptype\` installs as an RX callback). What each does per packet is in [dpdk-l3fwd.md](dpdk-l3fwd.md)."
    echo
    echo "| forwarder | instructions/packet | drivers | own |"
    echo "|---|---|---|---|"
    python3 - "$WORK" <<'EOF'
import re, sys
work = sys.argv[1]
def count(path, child):
    blocks, cur = [], None
    for l in open(path):
        m = re.match(r'\s*([\d,]+) \([ \d.%]+\)  ([*>])\s+(.*)$', l)
        if not m:
            continue
        n = int(m.group(1).replace(',', ''))
        if m.group(2) == '*':
            cur = {'incl': n, 'name': m.group(3), 'calls': []}
            blocks.append(cur)
        elif cur is not None:
            c = re.match(r'(.*) \(([\d,]+)x\)(?: \[(.*)\])?$', m.group(3))
            if c:
                cur['calls'].append((n, c.group(1), int(c.group(2).replace(',', '')), c.group(3) or ''))
    drv = lambda s: 'librte_net_pcap' in s or 'librte_net_null' in s
    # The loop: the caller of `child` that calls it most.
    root = max((b for b in blocks if any(child in c[1] for c in b['calls'])),
               key=lambda b: max(c[2] for c in b['calls'] if child in c[1]))
    drivers = sum(c[0] for b in blocks if not drv(b['name']) for c in b['calls'] if drv(c[3]))
    packets = max(c[2] for b in blocks if 'librte_net_null' in b['name']
                  for c in b['calls'] if 'librte_net_null' in c[3])
    return root['incl'] / packets, drivers / packets, (root['incl'] - drivers) / packets, packets
rows = [("Sluice, l3fwd mode", "sluice", "::poll_round"),
        ("DPDK l3fwd (LPM) as shipped", "l3fwd", "l3fwd_lpm_process_packets"),
        ("DPDK l3fwd (LPM) + checksum and TTL checks", "l3fwd-checked", "l3fwd_lpm_process_packets")]
own = {}
for name, f, child in rows:
    t, d, o, n = count("%s/tree.%s" % (work, f), child)
    own[f] = o
    print("| %s | %.1f | %.1f | %.1f |" % (name, t, d, o))
print()
print("Sluice's own instructions ÷ l3fwd's as shipped **%.2f×**, ÷ l3fwd + checks' **%.2f×**  " % (own["sluice"] / own["l3fwd"], own["sluice"] / own["l3fwd-checked"]))
EOF
  } | tee "$WORK/out.md"
  mkdir -p bench/results
  cp "$WORK/out.md" bench/results/dpdk-l3fwd-instructions.md
  exit 0
fi

# Hugepages for both: EAL needs them reserved and a hugetlbfs mounted. As
# root the bench mounts one where pages are free and none is (as
# run-dpdk-io.sh's does); without, both run --no-huge (Sluice's EAL
# decides the same way: appliance/src/dpdk.rs).
HUGE=()
FREE=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
if [ "$FREE" -gt 256 ] && ! grep -q hugetlbfs /proc/mounts && [ "$(id -u)" = 0 ]; then
  mkdir -p /mnt/huge && mount -t hugetlbfs nodev /mnt/huge || true
fi
# Without them, 2 GiB: the full IPv6 table's rte_fib6 (its RIB and 2^17
# groups) does not fit in 1 GiB beside the mbufs.
[ "$FREE" -gt 256 ] && grep -q hugetlbfs /proc/mounts || HUGE=(--no-huge -m 2048)

# sluice_run TABLE: "Mpps cycles/packet" of one run.
sluice_run() {
  "$SLUICE" run "$WORK/sluice-$1.toml" --json 2> "$WORK/s.err" | tail -1 | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
tx = s["ports"][1]["tx_pps"]
c = s["cores"][0]
print("%.3f %.1f" % (tx / 1e6, c["cycles_per_pkt"] or float("nan")))'
}

# l3fwd_run BINARY TABLE: "Mpps nan" of one run, measured once it forwards
# (loading the full table takes seconds after the telemetry socket is up).
# The full table is looked up with rte_fib (`--lookup fib`, DIR-24-8 like
# rte_lpm): rte_lpm takes over two minutes to load it (its rule table
# insert scans every rule of the same length).
l3fwd_run() {
  local prefix=l3fwd-$$ lookup=lpm
  [ "$2" != 16 ] && lookup=fib
  "$EX/$1/build/l3fwd" -l 1 --no-pci "${HUGE[@]}" --file-prefix "$prefix" --log-level '*:error' \
    --vdev "net_pcap0,rx_pcap=$WORK/in-$2.pcap,infinite_rx=1" --vdev "net_null1,no-rx=1" \
    -- -p 0x3 -P --parse-ptype --config "(0,0,1),(1,0,1)" --lookup "$lookup" \
    --rule_ipv4 "$WORK/routes4-$2.cfg" --rule_ipv6 "$WORK/routes6-$2.cfg" > "$WORK/l3fwd.log" 2>&1 &
  local pid=$!
  local sock=/var/run/dpdk/$prefix/dpdk_telemetry.v2
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
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
for _ in range(600):
    if stats(sys.argv[1])[0] > 0:
        break
    time.sleep(0.1)
time.sleep(1)
a, t0 = stats(sys.argv[1])
time.sleep(float(sys.argv[2]) - 1)
b, t1 = stats(sys.argv[1])
print("%.3f nan" % ((b - a) / (t1 - t0) / 1e6))
EOF
  kill -INT $pid; wait $pid 2>/dev/null || true
}

{
  echo "# Sluice l3fwd vs DPDK l3fwd"
  echo
  echo "Command: \`bench/run-dpdk-l3fwd.sh $RUNS $SECS\` $(provenance); hugepages: $([ ${#HUGE[@]} -eq 0 ] && echo yes || echo "no (--no-huge)")."
  echo
  echo "net_pcap0 replays distinct 64-byte IPv4/UDP packets from memory (infinite_rx) to net_null1 (no-rx); one forwarding core (core 1) each, burst 32; ${SECS} s per run, median of ${RUNS} runs, the forwarders alternating (in reverse order every other round). The ratios below are of the medians, then (in brackets) each round's own ratio, its median and range: the forwarders of one round share the host's state. The tables (those of \`TABLES\`, \`$TABLES\` here): **16 routes** 198.18.N.0/24 (1,024 packets across them), the **full table**, the shared 901,899 IPv4 prefixes (8,192 packets to random addresses inside random prefixes: the lookups miss the caches' first level more often), and the **full IPv6 table**, the same file's 160,147 IPv6 prefixes (8,192 62-byte IPv6/UDP packets to random addresses inside random prefixes, none multicast, link-local, unique-local or 2001:db8::/32; l3fwd looks them up in rte_fib6, a trie with a 24-bit first level and 8-bit levels below, Sluice's IPv6 LPM's layout), all to port 1. l3fwd looks the 16 routes up in rte_lpm (\`--lookup lpm\`) and the full table in rte_fib (\`--lookup fib\`, the same DIR-24-8 structure): rte_lpm takes over two minutes to load 901,899 routes, as its rule table insert scans every rule of the same length. Sluice uses its own DIR-24-8 in both. The replay itself (net_pcap copying each packet into a fresh mbuf) is part of every figure."
  echo
  echo "What each forwarder does per packet. **Sluice**: checks the destination MAC, EtherType, version and header length, total length, TTL > 1, the IPv4 header checksum (in software: the vdevs have no checksum offload; on a device with it Sluice takes the NIC's verdict instead, as l3fwd relies on it), a martian or own destination; looks up the LPM; decrements the TTL with an RFC 1624 checksum update; writes both MACs from its next hop's resolved neighbour. **l3fwd as shipped** (LPM, SSE path, \`--parse-ptype\`): takes the EtherType and header length from its software ptype parser; checks only the header length and total length (its RFC 1812 checks); does not verify the header checksum (it leaves that to a NIC's offload, which these vdevs lack), nor the TTL (a TTL of 0 or 1 is decremented and sent), nor the destination MAC; decrements the TTL and adds 1 to the checksum's high byte (no end-around carry); writes MACs from a per-port table. **l3fwd + checks**: the same, and drops a packet whose header checksum does not verify (\`rte_ipv4_cksum\`) or whose TTL is under 2: Sluice's costliest checks, not the MAC, martian and own-address ones. Per IPv6 packet, **Sluice** checks the destination MAC, EtherType, version, payload length against the frame, hop limit > 1, an upper layer right after the fixed header that is not neighbour discovery, a destination neither multicast nor its own; looks the chunk's routes up level by level; decrements the hop limit; writes both MACs. **l3fwd** checks nothing of an IPv6 packet (its RFC 1812 checks are IPv4's) and leaves its hop limit as it came; it looks the burst up with \`rte_fib6_lookup_bulk\` and writes the MACs; its checked copy does the same (not run on that table)."
  echo
  echo "| table | forwarder | forwarded Mpps: median [runs] | Sluice busy cycles/packet |"
  echo "|---|---|---|---|"
  for t in $TABLES; do
    s=() l=() c=()
    # The checked copy differs from l3fwd in its IPv4 path only.
    checked=1
    [ "$t" = full6 ] && checked=0
    # Each round runs the three back to back, in reverse order every
    # other round (a host whose load drifts during a round favours
    # neither side), and its own ratios are kept: a round's forwarders
    # share the host's state more than the medians of all rounds do.
    for i in $(seq "$RUNS"); do
      if [ $((i % 2)) = 1 ]; then
        r=$(sluice_run $t); echo "$t run $i sluice: $r" >&2; s+=("$r")
        r=$(l3fwd_run l3fwd $t); echo "$t run $i l3fwd: $r" >&2; l+=("$r")
        if [ $checked = 1 ]; then r=$(l3fwd_run l3fwd-checked $t); echo "$t run $i l3fwd+checks: $r" >&2; c+=("$r"); fi
      else
        if [ $checked = 1 ]; then r=$(l3fwd_run l3fwd-checked $t); echo "$t run $i l3fwd+checks: $r" >&2; c+=("$r"); fi
        r=$(l3fwd_run l3fwd $t); echo "$t run $i l3fwd: $r" >&2; l+=("$r")
        r=$(sluice_run $t); echo "$t run $i sluice: $r" >&2; s+=("$r")
      fi
    done
    python3 - "$t" "${s[*]}" "${l[*]}" "${c[*]}" "$WORK/ratios" <<'EOF' >> "$WORK/rows"
import statistics, sys
def med(x, k):
    v = x.split()
    return statistics.median(float(v[i]) for i in range(k, len(v), 2))
t, s, l, c, ratios = sys.argv[1:]
name = {"16": "16 routes", "full": "full table", "full6": "full IPv6 table"}[t]
lk = "LPM" if t == "16" else "FIB"
# The median, then every run in brackets: single runs swing here.
def runs(x):
    v = x.split()
    return "%.2f [%s]" % (med(x, 0), ", ".join("%.2f" % float(r) for r in v[0::2]))
print("| %s | Sluice, l3fwd mode | %s | %.1f |" % (name, runs(s), med(s, 1)))
print("| %s | DPDK l3fwd (%s) as shipped | %s | - |" % (name, lk, runs(l)))
if c.strip():
    print("| %s | DPDK l3fwd (%s) + checksum and TTL checks | %s | - |" % (name, lk, runs(c)))
# Each round's own ratio: its median and range.
def paired(x, y):
    r = [float(a) / float(b) for a, b in zip(x.split()[0::2], y.split()[0::2])]
    return "per round %.2f× (%.2f–%.2f)" % (statistics.median(r), min(r), max(r))
with open(ratios, "a") as f:
    line = "%s: Sluice ÷ l3fwd as shipped **%.2f×** (%s)" % (name, med(s, 0) / med(l, 0), paired(s, l))
    if c.strip():
        line += ", Sluice ÷ l3fwd + checks **%.2f×** (%s)" % (med(s, 0) / med(c, 0), paired(s, c))
    print(line, file=f)
EOF
  done
  cat "$WORK/rows"
  echo
  sed 's/$/  /' "$WORK/ratios"
} | tee "$WORK/out.md"
mkdir -p bench/results
cp "$WORK/out.md" bench/results/dpdk-l3fwd.md
