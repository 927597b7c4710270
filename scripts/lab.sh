#!/usr/bin/env bash
# The namespace lab: real Linux peers on either side of Sluice.
#
#   client (198.18.0.2) --c0==r0-- router: Sluice --r1==s0-- server (198.19.0.2)
#
# Namespaces sl-client-PID, sl-router-PID, sl-server-PID joined by veth pairs (offloads
# and IPv6 off, so every frame is a whole, countable IPv4/ARP frame); Sluice
# runs in sl-router-PID on r0/r1 over AF_PACKET with configs/router-nat.toml
# (SNAT out of r1, a port forward 198.19.0.1:8080 -> 198.18.0.2:80,
# firewall rules). Then real clients check it: ping, traceroute, curl
# through SNAT (the server's log shows the router's address), curl through
# the port forward, a dropped and a rejected TCP port, iperf3 TCP, UDP
# request/response, and that Sluice accounted for every packet the kernel
# peers sent. Everything is torn down on exit, also when a check fails.
#
#   scripts/lab.sh [--dpdk|--afxdp] [path/to/sluice]   (as root; prints PASS/FAIL lines)
#
# With --dpdk the same checks run with the ports as DPDK net_af_packet
# vdevs (a sluice built with `--features dpdk`); that PMD does not report
# the frames its kernel rings dropped, so its port counters are not
# compared with the peers'. With --afxdp the ports are AF_XDP sockets (a
# sluice built with `--features afxdp`). With SLUICE_AS=USER in the
# environment Sluice, started as root, becomes USER once its ports are open
# (`[service] user`), and the lab checks that it did (`privileges:` on its
# stderr) and that every check passes so.
set -uo pipefail
cd "$(dirname "$0")/.."
DPDK=0 AFXDP=0
if [ "${1:-}" = --dpdk ]; then DPDK=1; shift; fi
if [ "${1:-}" = --afxdp ]; then AFXDP=1; shift; fi
SLUICE=${1:-target/release/sluice}
CONFIG=configs/router-nat.toml
source scripts/lab-net.sh
WORK=$(mktemp -d /tmp/sluice-lab.XXXXXX)
if [ "$DPDK" = 1 ]; then
  # The shipped config with its two AF_PACKET ports as DPDK vdevs.
  python3 - "$CONFIG" "$WORK/router-nat-dpdk.toml" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
for i, dev in enumerate(["r0", "r1"]):
    t = t.replace('driver = "afpacket"', 'driver = "dpdk"', 1)
    t = re.sub(r'\[port\.afpacket\]\niface = "%s"(\nblocks = \d+)?' % dev,
               '[port.dpdk]\ndevice = "net_af_packet%d,iface=%s"' % (i, dev), t)
open(sys.argv[2], "w").write(t)
EOF
  CONFIG=$WORK/router-nat-dpdk.toml
fi
if [ "$AFXDP" = 1 ]; then
  # The shipped config with its two AF_PACKET ports as AF_XDP sockets.
  lab_afxdp_config "$CONFIG" "$WORK/router-nat-afxdp.toml"
  CONFIG=$WORK/router-nat-afxdp.toml
fi
if [ -n "${SLUICE_AS:-}" ]; then
  { cat "$CONFIG"; printf '\n[service]\nuser = "%s"\n' "$SLUICE_AS"; } > "$WORK/as-user.toml"
  CONFIG=$WORK/as-user.toml
fi
SLUICE_PID=
FAILS=0

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
cleanup() {
  [ -n "$SLUICE_PID" ] && kill -INT "$SLUICE_PID" 2>/dev/null
  lab_down
  rm -rf "$WORK"
}
trap cleanup EXIT

for tool in ip ping traceroute curl iperf3 python3 ethtool; do
  command -v "$tool" >/dev/null || { echo "FAIL missing tool: $tool (scripts/test.sh installs it)"; exit 2; }
done
[ -x "$SLUICE" ] || { echo "FAIL no sluice binary at $SLUICE"; exit 2; }

# ---------------------------------------------------------------- topology
lab_up
# ---------------------------------------------------------------- servers
cat > "$WORK/udp_echo.py" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(data, peer)
EOF
cat > "$WORK/udp_ask.py" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.0)
ok = 0
for i in range(int(sys.argv[3])):
    msg = b"request %d" % i
    s.sendto(msg, (sys.argv[1], int(sys.argv[2])))
    try:
        if s.recvfrom(2048)[0] == msg:
            ok += 1
    except socket.timeout:
        pass
print(ok)
EOF
mkdir -p "$WORK/www-server" "$WORK/www-client"
echo "hello from the server" > "$WORK/www-server/index.html"
echo "hello from the client" > "$WORK/www-client/index.html"
inns $NS_S python3 -m http.server 80 --bind 198.19.0.2 --directory "$WORK/www-server" \
  > "$WORK/http-server.log" 2>&1 &
inns $NS_C python3 -m http.server 80 --bind 198.18.0.2 --directory "$WORK/www-client" \
  > "$WORK/http-client.log" 2>&1 &
inns $NS_S python3 "$WORK/udp_echo.py" 198.19.0.2 5353 > /dev/null 2>&1 &
inns $NS_S iperf3 -s -B 198.19.0.2 -1 > "$WORK/iperf-server.log" 2>&1 &
sleep 1

# ---------------------------------------------------------------- Sluice
C_TX0=$(lab_tx $NS_C c0)
S_TX0=$(lab_tx $NS_S s0)
# Not through `inns` (a function runs in a subshell): $! must be Sluice.
ip netns exec $NS_R "$SLUICE" run "$CONFIG" --json > "$WORK/sluice.json" 2> "$WORK/sluice.err" &
SLUICE_PID=$!
for _ in $(seq 50); do
  [ -s "$WORK/sluice.json" ] && break
  sleep 0.1
done
if ! kill -0 "$SLUICE_PID" 2>/dev/null; then
  echo "FAIL sluice did not start:"; cat "$WORK/sluice.err"; exit 1
fi

# ---------------------------------------------------------------- checks
# A second instance on the same interfaces is refused (it would forward
# every packet a second time).
ip netns exec $NS_R "$SLUICE" run "$CONFIG" --duration 1 > /dev/null 2> "$WORK/second.err"
rc=$?
if [ "$rc" = 2 ] && grep -q "already in use by another sluice (pid $SLUICE_PID" "$WORK/second.err"; then
  pass "second instance on r0/r1 refused: $(head -1 "$WORK/second.err")"
else
  fail "second instance: exit $rc: $(head -2 "$WORK/second.err" | tr '\n' ' ')"
fi

for dst in 198.19.0.2 198.18.0.1 198.19.0.1; do
  if inns $NS_C ping -c 3 -i 0.2 -W 1 -q "$dst" > "$WORK/ping.log" 2>&1 &&
     grep -q " 0% packet loss" "$WORK/ping.log"; then
    pass "ping client -> $dst"
  else
    fail "ping client -> $dst: $(tail -2 "$WORK/ping.log" | head -1)"
  fi
done

# A host Sluice has no neighbour entry for: the first echo request waits
# for the ARP reply (held) and goes out then, so one ping is answered.
inns $NS_S ip addr add 198.19.0.3/24 dev s0
if inns $NS_C ping -c 1 -W 3 -q 198.19.0.3 > "$WORK/ping1.log" 2>&1; then
  pass "first ping to 198.19.0.3 (unresolved neighbour) answered: held for ARP"
else
  fail "first ping to an unresolved neighbour lost: $(tail -2 "$WORK/ping1.log" | head -1)"
fi

inns $NS_C traceroute -n -q 1 -w 1 -m 3 198.19.0.2 > "$WORK/trace.log" 2>&1
hop1=$(awk '$1 == "1" {print $2}' "$WORK/trace.log")
hop2=$(awk '$1 == "2" {print $2}' "$WORK/trace.log")
if [ "$hop1" = 198.18.0.1 ] && [ "$hop2" = 198.19.0.2 ]; then
  pass "traceroute -n: hop 1 $hop1 (the router), hop 2 $hop2 (ICMP errors translated back through NAT)"
else
  fail "traceroute: $(tr '\n' '|' < "$WORK/trace.log")"
fi

if inns $NS_C curl -s -m 5 http://198.19.0.2/ | grep -q "hello from the server"; then
  if grep -q "^198.19.0.1 " "$WORK/http-server.log"; then
    pass "curl through SNAT; the server saw $(awk '/^[0-9]/ {print $1}' "$WORK/http-server.log" | sort -u | tr '\n' ' ')"
  else
    fail "curl through SNAT: server log shows $(cut -d' ' -f1 "$WORK/http-server.log" | sort -u | tr '\n' ' ')"
  fi
else
  fail "curl client -> server"
fi

if inns $NS_S curl -s -m 5 http://198.19.0.1:8080/ | grep -q "hello from the client"; then
  pass "curl through the port forward 198.19.0.1:8080 -> 198.18.0.2:80 (client log: $(awk '/^[0-9]/ {print $1}' "$WORK/http-client.log" | sort -u | tr '\n' ' '))"
else
  fail "curl server -> port forward"
fi

# The same inside service reached directly (the server given a route to
# the inside for this check): the firewall accepts new flows from the
# outside only through the port forward (ct_status = "dnat").
inns $NS_S ip route add 198.18.0.0/24 via 198.19.0.1
inns $NS_S curl -s -m 3 --connect-timeout 2 http://198.18.0.2:80/ > /dev/null 2>&1
rc=$?
inns $NS_S ip route del 198.18.0.0/24 via 198.19.0.1
[ "$rc" = 28 ] && pass "direct access 198.18.0.2:80 from outside dropped (only the port forward is open)" || fail "direct access 198.18.0.2:80 from outside: curl exit $rc, wanted 28 (timeout)"

inns $NS_C curl -s -m 3 --connect-timeout 2 http://198.19.0.2:25/ > /dev/null 2>&1
rc=$?
[ "$rc" = 28 ] && pass "TCP port 25 dropped: no connection (curl timed out)" || fail "TCP port 25: curl exit $rc, wanted 28 (timeout)"

t0=$(date +%s%N)
inns $NS_C curl -s -m 3 --connect-timeout 2 http://198.19.0.2:23/ > /dev/null 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 7 ] && pass "TCP port 23 rejected with a RST: connection refused in $ms ms" || fail "TCP port 23: curl exit $rc, wanted 7 (refused)"

if inns $NS_C iperf3 -c 198.19.0.2 -t 3 -J > "$WORK/iperf.json" 2> "$WORK/iperf.err"; then
  bps=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]))' "$WORK/iperf.json")
  pass "iperf3 TCP 3 s through NAT: $((bps / 1000000)) Mbit/s"
else
  fail "iperf3: $(tail -1 "$WORK/iperf.err")"
fi

ok=$(inns $NS_C python3 "$WORK/udp_ask.py" 198.19.0.2 5353 200)
[ "$ok" = 200 ] && pass "UDP request/response through NAT: 200 of 200 answered" || fail "UDP request/response: $ok of 200"

# The peers' TX checksum offload on, as a veth has it by default: their
# TCP and UDP reach Sluice with the checksum left unfinished
# (CHECKSUM_PARTIAL). AF_PACKET says so per frame, AF_XDP does not; either
# way Sluice must finish them, or the far side's kernel drops every one.
inns $NS_C ethtool -K c0 tx on >/dev/null 2>&1
inns $NS_S ethtool -K s0 tx on >/dev/null 2>&1
ok=$(inns $NS_C python3 "$WORK/udp_ask.py" 198.19.0.2 5353 50)
body=$(inns $NS_C curl -s -m 5 http://198.19.0.2/ 2>/dev/null)
if [ "$ok" = 50 ] && [ "$body" = "hello from the server" ]; then
  pass "peers' checksum offload on: UDP 50 of 50 answered, curl through SNAT answered"
else
  fail "peers' checksum offload on: UDP $ok of 50, curl got '$body'"
fi
inns $NS_C ethtool -K c0 tx off >/dev/null 2>&1
inns $NS_S ethtool -K s0 tx off >/dev/null 2>&1

# ---------------------------------------------------------------- accounting
# The peers fall silent before their counters are read and Sluice stops:
# their links go down (nothing more leaves them: no ARP probe of a stale
# neighbour, no late TCP segment), what is in flight reaches Sluice, and
# only then is Sluice stopped. Read after the stop instead, a packet a
# peer sends in between counts as sent and never reaches Sluice.
sleep 0.5
inns $NS_C ip link set c0 down
inns $NS_S ip link set s0 down
sleep 0.3
C_TX=$(( $(lab_tx $NS_C c0) - C_TX0 ))
S_TX=$(( $(lab_tx $NS_S s0) - S_TX0 ))
kill -INT "$SLUICE_PID"
wait "$SLUICE_PID"
src=$?
SLUICE_PID=
if [ -n "${SLUICE_AS:-}" ]; then
  uid=$(id -u "$SLUICE_AS")
  if grep -q "^privileges: uid $uid, gid $(id -g "$SLUICE_AS"), capabilities kept: " "$WORK/sluice.err"; then
    pass "ran as $SLUICE_AS: $(grep '^privileges:' "$WORK/sluice.err")"
  else
    fail "did not become $SLUICE_AS: $(grep '^privileges:' "$WORK/sluice.err")"
  fi
fi
summary=$(tail -1 "$WORK/sluice.json")
read -r offered balanced handed injected held_sent oow ignored <<< "$(python3 -c '
import json, sys
s = json.loads(sys.argv[1])
b = s["balance"]
ev = lambda k: sum(c["events"].get(k, 0) for c in s["cores"])
print(b["offered"], b["balanced"], sum(p["drops"]["handed_off"] for p in s["ports"]),
      b["injected"], ev("held_sent"), ev("ct_out_of_window"), ev("ct_window_ignored"))
' "$summary")"
# Real TCP stacks (curl, iperf3: window scaling, SACK, timestamps) stay
# inside the windows conntrack tracks: not one segment called invalid.
if [ "$oow" = 0 ]; then
  pass "TCP window tracking: no segment of the real connections out of window ($ignored ignored as old)"
else
  fail "TCP window tracking: $oow segments of real connections called out of window"
fi
if [ "$held_sent" -ge 1 ] && [ "$injected" = "$held_sent" ]; then
  pass "held packets: $held_sent sent once resolved, $injected injected in the balance"
else
  fail "held packets: held_sent $held_sent, injected $injected"
fi
sent=$((C_TX + S_TX))
if [ "$DPDK" = 1 ]; then
  if [ "$src" = 0 ] && [ "$balanced" = True ]; then
    pass "accounting (DPDK): balanced over the PMD's counters: it counted $offered of the $sent frames the peers sent (net_af_packet does not report its ring drops)"
  else
    fail "accounting (DPDK): exit $src balanced $balanced"
  fi
elif [ "$src" = 0 ] && [ "$balanced" = True ] && [ "$offered" = "$sent" ]; then
  pass "accounting: the peers sent $sent packets (client $C_TX, server $S_TX); Sluice received $offered, balanced"
else
  fail "accounting: peers sent $sent (client $C_TX, server $S_TX), Sluice offered $offered balanced $balanced exit $src"
fi
python3 -c '
import json, sys
s = json.loads(sys.argv[1])
for p in s["ports"]:
    d = p["drops"]
    drops = {k: v for k, v in d["stage"].items() if v}
    print("  port %s: stage drops %s" % (p["name"], drops or "none"))
for o, n in s.get("rule_hits", []):
    print("  rule %s: %d packets" % (o, n))
print("  events:", {k: v for c in s["cores"] for k, v in c["events"].items()})
' "$summary"

if [ "$FAILS" -gt 0 ]; then
  echo "lab: $FAILS check(s) failed"
  echo "--- sluice stderr"; cat "$WORK/sluice.err"
  exit 1
fi
echo "lab: all checks passed"
