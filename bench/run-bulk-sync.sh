#!/usr/bin/env bash
# A bulk sync of a big table, timed: box A starts from a state file of N
# flows (UDP, each with a NAT mapping: `sluice-bench state --keep`), box B
# starts empty and asks A for its whole table over their sync link (a veth
# between two namespaces, HMAC-SHA256 datagrams); the time from B's start
# until B's table holds all N flows, RUNS times. Writes
# bench/results/bulk-sync.md. Root.
#   bench/run-bulk-sync.sh [RUNS] [FLOWS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-5}
FLOWS=${2:-1000000}
cargo build --release -q -p appliance -p bench
dir=$(mktemp -d /tmp/sluice-bulk-sync.XXXXXX)
nsa=sl-bulk-a-$$
nsb=sl-bulk-b-$$
cleanup() {
  pkill -f "sluice run $dir/" 2>/dev/null || true
  sleep 0.5
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$nsa"
ip netns add "$nsb"
ip link add ha netns "$nsa" type veth peer name hb netns "$nsb"
ip -n "$nsa" addr add 198.18.9.1/30 dev ha
ip -n "$nsb" addr add 198.18.9.2/30 dev hb
for ns in "$nsa" "$nsb"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$( [ "$ns" = "$nsa" ] && echo ha || echo hb )" up
  # The box's port: a veth whose other end stays in the namespace, idle.
  ip -n "$ns" link add d0 type veth peer name d1
  ip -n "$ns" link set d0 up
  ip -n "$ns" link set d1 up
done
head -c 48 /dev/urandom > "$dir/ha.key"
chmod 600 "$dir/ha.key"
cap=$(( FLOWS + FLOWS / 10 + 1024 ))
for x in a b; do
  if [ $x = a ]; then me=1; peer=2; state="state_file = \"$dir/a.state\""; else me=2; peer=1; state=""; fi
  cat > "$dir/$x.toml" <<EOF
[run]
duration = 0
stats_period = 1.0

[[port]]
name = "p"
driver = "afpacket"
ipv4 = ["198.18.10.$me/24"]
[port.afpacket]
iface = "d0"

[[worker]]
core = 0
mode = "l3fwd"
rx = ["p"]
[worker.poll]
mode = "interrupt"

[conntrack]
capacity = $cap

[ha]
listen = "198.18.9.$me:8101"
peer = "198.18.9.$peer:8101"
key_file = "$dir/ha.key"
$state

[management]
socket = "$dir/$x.sock"
EOF
done

# B's table, polled until it holds every flow: seconds from B's start and
# from its control socket (its sync thread's first ask) to then, and B's
# `show ha`.
cat > "$dir/poll.py" <<'EOF'
import json, os, subprocess, sys, time
sock, want, t0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def ctl(*a):
    return json.loads(subprocess.run(["target/release/sluice", "ctl", "-s", sock, "--json", *a],
                                     capture_output=True, text=True, timeout=5).stdout)
while not os.path.exists(sock):
    time.sleep(0.002)
t1 = time.time()
e = 0
while time.time() - t0 < 60:
    try:
        e = ctl("show", "conntrack", "--limit", "0")["workers"][0]["entries"]
    except Exception:
        e = 0
    if e >= want:
        break
    time.sleep(0.005)
t2 = time.time()
print(json.dumps({"start_s": t2 - t0, "socket_s": t2 - t1, "entries": e, "ha": ctl("show", "ha")}))
EOF

rows=()
for i in $(seq "$RUNS"); do
  target/release/sluice-bench state --flows "$FLOWS" --keep "$dir/a.state"
  ip netns exec "$nsa" target/release/sluice run "$dir/a.toml" >/dev/null 2>"$dir/a.err" &
  # A's table restored from its file.
  for _ in $(seq 600); do
    e=$(target/release/sluice ctl -s "$dir/a.sock" --json show conntrack --limit 0 2>/dev/null \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["entries"])' 2>/dev/null || echo 0)
    [ "$e" = "$FLOWS" ] && break
    sleep 0.1
  done
  [ "$e" = "$FLOWS" ] || { cat "$dir/a.err"; echo "A did not restore $FLOWS flows ($e)"; exit 1; }
  t0=$(date +%s.%N)
  ip netns exec "$nsb" target/release/sluice run "$dir/b.toml" >/dev/null 2>"$dir/b.err" &
  out=$(python3 "$dir/poll.py" "$dir/b.sock" "$FLOWS" "$t0")
  rows+=("$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); h = r["ha"]; i = sys.argv[2]; n = int(sys.argv[3])
whole = "all" if r["entries"] >= n else "%d" % r["entries"]
print("| %s | %s | %.2f s | %.2f s | %d | %.0f MB | %d | %d | %d | %.1f ms |" % (
    i, whole, r["socket_s"], r["start_s"], h["received"]["messages"], h["received"]["bytes"] / 1e6,
    h["received"]["records"], h["dropped_applying"], h["gaps"], (h["lag_s"] or {}).get("p99", 0) * 1e3))
' "$out" "$i" "$FLOWS")")
  echo "${rows[-1]}" >&2
  pkill -f "sluice run $dir/" || true
  while pgrep -f "sluice run $dir/" >/dev/null; do sleep 0.1; done
  rm -f "$dir/a.state" "$dir/a.sock" "$dir/b.sock"
done

out=bench/results/bulk-sync.md
{
  echo "# A bulk sync of a big table"
  echo
  echo "Command: \`bench/run-bulk-sync.sh $RUNS $FLOWS\` $(provenance)."
  echo
  echo "Box A starts from a state file of $FLOWS flows (UDP, each with a NAT mapping; \`sluice-bench state --keep\`), one gateway worker on an idle AF_PACKET port; box B starts empty (its table sized alike, $cap flows) and asks A for its whole table over their sync link, a veth between two namespaces: A's worker walks its table into its sync ring as far as the ring has room each round, A's sync thread sends the records 13 to an HMAC-SHA256 datagram, B's checks them and queues them to its worker, which installs them. Timed from B's start (and from its control socket, when its sync thread has asked) until B's table holds all $FLOWS flows (polled with \`sluice ctl show conntrack\`). B asks twice (at its start, and on first hearing A's instance), so A walks its table again from the start when the second ask comes: the records a little over $FLOWS. The goal (issue 53): a bulk sync of 1 M flows in at most 2 s on the lab's veths."
  echo
  echo "| run | B's table | from B's socket | from B's start | datagrams | bytes | records | dropped at B's ring | gaps | sync lag p99 |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out.tmp"
mv "$out.tmp" "$out"
