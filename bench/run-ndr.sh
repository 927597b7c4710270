#!/usr/bin/env bash
# RFC 2544 no-drop rate and latency of the namespace lab's routers, with
# Sluice as the tester: Sluice (AF_PACKET and AF_XDP, configs/router-nat.toml:
# routing, conntrack, firewall, SNAT) and the Linux kernel with the same
# policy in nftables, each measured by `sluice bench ndr` for each frame
# size. The lab of scripts/lab-net.sh, with the server's veth end (s0) moved
# into the client namespace: the tester (a flowgen worker on CPU 0, AF_PACKET
# ports c0 and s0) sends 264 UDP flows (whole rounds of the IMIX's 12
# lengths) from c0 through the router (CPU 1) and
# receives them on s0. Also reported: what each router forwarded at the
# tester's top rate (the figure bench/run-lab.sh measures with trafgen).
# Writes bench/results/ndr.md and bench/results/ndr-ROUTER.svg. As root.
#   bench/run-ndr.sh [sizes] [trial seconds] [resolution %]
#   (default: 64,128,256,512,1024,1280,1518,imix 1 2)
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SIZES=${1:-64,128,256,512,1024,1280,1518,imix}
TRIAL=${2:-1}
RES=${3:-2}
for t in nft ip ethtool python3; do
  command -v $t >/dev/null || { echo "needs $t (apt-get install nftables iproute2 ethtool python3)" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
cargo build --release -q -p appliance --features afxdp || exit 1
SLUICE=$PWD/target/release/sluice
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-ndr.XXXXXX)
trap 'lab_down; rm -rf "$WORK"' EXIT
ROUTER_CPU=1
TESTER_CPU=0
sed "s/^core = 0/core = $ROUTER_CPU/" configs/router-nat.toml > "$WORK/router-nat.toml"
lab_afxdp_config "$WORK/router-nat.toml" "$WORK/router-nat-afxdp.toml"

# The tester: generates on c0 (to the router's r0), receives on s0; its one
# worker polls both (c0's peer is c0 itself, so it generates there only).
lab_tester_config "$WORK/tester.toml" "$WORK/tester.sock" $TESTER_CPU both 264

measure() { # router
  lab_up
  # The tester owns both ends.
  inns $NS_S ip link set s0 netns $NS_C
  inns $NS_C ip link set s0 up
  local pid=
  if [ "$1" = kernel ]; then
    lab_kernel_router $ROUTER_CPU
  else
    local cfg=$WORK/router-nat.toml
    [ "$1" = sluice-afxdp ] && cfg=$WORK/router-nat-afxdp.toml
    ip netns exec $NS_R "$SLUICE" run "$cfg" > /dev/null 2> "$WORK/router.err" &
    pid=$!
  fi
  rm -f "$WORK/tester.sock"
  ip netns exec $NS_C "$SLUICE" run "$WORK/tester.toml" > /dev/null 2> "$WORK/tester.err" &
  local tpid=$!
  for _ in $(seq 100); do [ -S "$WORK/tester.sock" ] && break; sleep 0.1; done
  sleep 1
  "$SLUICE" bench ndr -s "$WORK/tester.sock" --sizes "$SIZES" --trial "$TRIAL" \
    --resolution "$RES" --latency-at 10,50,90,100 \
    --json "$WORK/$1.json" --svg "$WORK/$1.svg" 2> "$WORK/$1.log" > "$WORK/$1.txt"
  local rc=$?
  cat "$WORK/$1.txt" >&2
  kill -INT "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
  if [ -n "$pid" ]; then
    kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -i -E "warn|error" "$WORK/router.err" >&2
  fi
  lab_down
  [ $rc -eq 0 ] || { echo "$1: sluice bench ndr failed:" >&2; cat "$WORK/$1.log" >&2; exit 1; }
}

ROUTERS=(sluice-afpacket sluice-afxdp kernel)
for r in "${ROUTERS[@]}"; do
  echo "== $r" >&2
  measure $r
done

mkdir -p bench/results
{
  echo "# No-drop rate of the namespace lab's routers, Sluice as the tester"
  echo
  echo "Command: \`bench/run-ndr.sh $SIZES $TRIAL $RES\` $(provenance)."
  echo
  echo "\`sluice bench ndr\` (RFC 2544 throughput: loss 0, ${TRIAL} s trials, resolution ${RES}%) against each router of the namespace lab: Sluice on AF_PACKET or AF_XDP (configs/router-nat.toml, worker on CPU $ROUTER_CPU, poll mode \`interrupt\`: routing, conntrack, firewall, SNAT) and the kernel (ip_forward, the same policy in nftables, RPS to CPU $ROUTER_CPU). The tester is a Sluice \`flowgen\` worker on CPU $TESTER_CPU with AF_PACKET ports on both ends of the lab (264 UDP flows, one source port each, paced on the TSC; imix: TRex's simple IMIX, 64/594/1518 bytes 7:4:1), so on this machine the tester, the router and the kernel's veth work share two CPUs: read the figures as the pair's. Frame sizes with FCS, as RFC 2544 counts them. NDR in packets per second (L1 Mbit/s: frame with FCS, preamble and gap); one-way latency p50/p99 in µs at 50% and 100% of each router's NDR (every percentile at 10/50/90/100% in the JSON of \`sluice bench ndr\`); \"top\": what the router forwarded while the tester sent at its top rate (with loss; the figure bench/run-lab.sh measures with trafgen). \`*\`: no loss at the tester's top rate (the NDR is the tester's limit)."
  echo
  python3 - "$WORK" "$TRIAL" "${ROUTERS[@]}" <<'PY'
import json, sys
work, secs, routers = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
res = {r: {x["size"]: x for x in json.load(open(f"{work}/{r}.json"))} for r in routers}
# Byte sizes in order, then the mixes ("imix").
sizes = sorted(next(iter(res.values())).keys(), key=lambda s: (isinstance(s, str), str(s) if isinstance(s, str) else s))
head = "| size (B) |"
sep = "|---|"
for r in routers:
    head += f" {r} NDR pps (L1 Mbit/s) | {r} p50/p99 µs at 50% / 100% | {r} top: forwarded pps |"
    sep += "---|---|---|"
print(head)
print(sep)
def lat(x, f):
    for frac, t in x["latency"]:
        if abs(frac - f) < 1e-9 and t.get("latency_ns"):
            l = t["latency_ns"]
            return "%.0f/%.0f" % (l["p50"] / 1e3, l["p99"] / 1e3)
    return "-"
for s in sizes:
    row = f"| {s} |"
    for r in routers:
        x = res[r][s]
        top = x["search"][0]
        star = "*" if x["tester_limited"] else ""
        row += " %.0f%s (%.0f) | %s / %s | %.0f |" % (
            x["ndr_pps"], star, x["ndr_l1_bps"] / 1e6, lat(x, 0.5), lat(x, 1.0),
            top["received"] / secs)
    print(row)
print()
for r in routers:
    print(f"![{r}: NDR and latency against frame size](ndr-{r}.svg)")
PY
} > "$WORK/ndr.md"
cp "$WORK/ndr.md" bench/results/ndr.md
for r in "${ROUTERS[@]}"; do cp "$WORK/$r.svg" "bench/results/ndr-$r.svg"; done
cat bench/results/ndr.md
