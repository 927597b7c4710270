#!/usr/bin/env bash
# A/B: this tree against another revision, side by side on this machine,
# for a change that must not cost speed (a restructure, a refactor). Three
# figures, each from alternating runs of the two builds (base, this, base,
# this, ...; medians):
#   - io forwarding between two null ports, one busy worker: busy cycles
#     per packet (the loop's own cost);
#   - the router, configs/router-fulltable.toml (full table, softnic,
#     2 x 1 Mpps): busy cycles per packet;
#   - the router with both full tables, configs/router-fulltable-dual.toml
#     with every packet IPv6, at the generator's top rate (full bursts):
#     busy cycles per packet;
#   - the gateway pipeline in one core (sluice-bench gateway: full table,
#     9,416 rules, SNAT): cycles per packet of established flows and of new
#     flows.
# Builds REV in a worktree under target/ab/. Writes bench/results/ab-REV.md.
#   bench/run-ab.sh REV [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
REV=${1:?usage: bench/run-ab.sh REV [runs]}
RUNS=${2:-5}
build_rev "$REV"
WORK=$(mktemp -d /tmp/sluice-ab.XXXXXX)

cat > "$WORK/io.toml" <<EOF
[run]
duration = 3
stats_period = 1.0
burst = 32

[[port]]
name = "a"
driver = "null"
[port.null]
size = 64

[[port]]
name = "b"
driver = "null"
[port.null]
size = 64

[[worker]]
core = 1
mode = "io"
rx = ["a", "b"]
EOF

# The dual-table router with IPv6 traffic alone at the top rate, its
# route file named from the checkout.
sed -e 's/rate = 1000000/rate = "max"/' -e 's/ipv6_share = 0.5/ipv6_share = 1.0/' \
  -e "s#route_file = \"\.\./#route_file = \"$HERE/configs/../#" \
  configs/router-fulltable-dual.toml > "$WORK/dual6.toml"

# Busy cycles per packet of the first worker, from a run's JSON summary.
cpp() {
  "$1/sluice" run "$2" --json 2> "$WORK/err" | tail -1 | python3 -c '
import json, sys
print("%.1f" % json.loads(sys.stdin.read())["cores"][0]["cycles_per_pkt"])'
}

# Established and new-flow cycles per packet of one gateway pass.
gw() {
  "$1/sluice-bench" gateway --runs 1 --flows 100000 --packets 1000000 \
    --config "$HERE/configs/gateway-fulltable.toml" 2>&1 |
    sed -n 's/^run 0: .*gateway new \([0-9]*\), established \([0-9]*\).*/\2 \1/p'
}

declare -A V
for i in $(seq "$RUNS"); do
  for side in base this; do
    bin=$BASE_BIN
    [ "$side" = this ] && bin=$THIS_BIN
    V[$side.io]+="$(cpp "$bin" "$WORK/io.toml") "
    V[$side.router]+="$(cpp "$bin" "$HERE/configs/router-fulltable.toml") "
    V[$side.router6]+="$(cpp "$bin" "$WORK/dual6.toml") "
    read -r est new < <(gw "$bin")
    V[$side.gw_est]+="$est "
    V[$side.gw_new]+="$new "
  done
  echo "run $i done" >&2
done

{
  echo "# A/B: $BASE_SHA against $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)"
  echo
  echo "Command: \`bench/run-ab.sh $REV $RUNS\` $(provenance). Alternating runs, $RUNS each; medians (all runs in brackets). Cycles per packet: lower is better."
  echo
  echo "| figure | $BASE_SHA | this tree | this ÷ base |"
  echo "|---|---|---|---|"
  for k in io router router6 gw_est gw_new; do
    python3 - "$k" "${V[base.$k]}" "${V[this.$k]}" <<'EOF'
import statistics, sys
names = {
    "io": "io, null ports, busy cycles/packet",
    "router": "router, full table, busy cycles/packet",
    "router6": "router, both full tables, IPv6 alone at the top rate, busy cycles/packet",
    "gw_est": "gateway, established flows, cycles/packet",
    "gw_new": "gateway, new flows, cycles/packet",
}
k, a, b = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
fmt = lambda v: " ".join("%g" % x for x in v)
print("| %s | %.1f [%s] | %.1f [%s] | %.2f |" % (names[k], ma, fmt(a), mb, fmt(b), mb / ma))
EOF
  done
} | tee "$WORK/ab.md"
mkdir -p bench/results
cp "$WORK/ab.md" "bench/results/ab-$BASE_SHA.md"
