#!/usr/bin/env bash
# The gateway pipeline in one core (sluice-bench gateway:
# configs/gateway-fulltable.toml, full table, SNAT) with rule sets of a
# real gateway's size: fw1_10k as shipped in the config, and the 100k-rule
# sets grown from acl1_10k, fw1_10k and ipc1_10k (`sluice-bench
# classbench-grow`, the sets `run-acl.sh` measures), all `accept` so that
# every packet goes the whole way. Above about 11,000 rules the workers'
# memo holds nothing (no elementary intervals are kept), so every new
# flow's first packet walks the classifier. Per set: cycles of a new
# flow's first packet and of the firewall stage in it, new flows/s, and
# cycles of an established packet (which the firewall does not see);
# medians of RUNS alternating rounds (the sets in turn, each
# `--runs 3 --packets 1000000`). With REV: the same sets through that
# revision's build too, in each round beside this tree's (built as
# run-ab.sh builds it), and the ratios.
# Writes bench/results/gateway-rules.md.
#   bench/run-gateway-rules.sh [runs] [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-5}
REV=${2:-}
SETS=(fw1_10k acl1_100k fw1_100k ipc1_100k)
if [ -n "$REV" ]; then
  build_rev "$REV"
  BUILDS=(base this)
else
  cargo build --release -q -p bench
  THIS_BIN=$PWD/target/release
  BUILDS=(this)
fi
WORK=$(mktemp -d /tmp/sluice-gw-rules.XXXXXX)
[ -n "$REV" ] || trap 'rm -rf "$WORK"' EXIT
SHARED=$(cd ../shared && pwd)

# The config with rule set $1: the shipped one with absolute paths (it
# resolves them from its own directory), its rules from the set's file.
for s in "${SETS[@]}"; do
  rules=$SHARED/data/classbench/$s
  if [[ $s == *_100k ]]; then
    rules=$WORK/$s
    "$THIS_BIN/sluice-bench" classbench-grow --from "${s%_100k}_10k" --rules 100000 --out "$rules"
  fi
  sed -e "s#\"\.\./\.\./shared/#\"$SHARED/#" -e "s#^classbench_file = .*#classbench_file = \"$rules\"#" \
    configs/gateway-fulltable.toml > "$WORK/$s.toml"
done

# One run: "new-flow-cycles firewall-cycles new-flows/s established-cycles".
run() {
  local out
  out=$("$1/sluice-bench" gateway --config "$WORK/$2.toml" --runs 3 --packets 1000000 2>&1) ||
    { echo "$out" >&2; return 1; }
  awk -F'|' '
    /first packet of each flow/ { nf = $3 + 0; split($5, r, " "); rate = r[1] }
    /packets of established flows/ { est = $3 + 0 }
    /^\| firewall \|/ { fw = $3 + 0 }
    END { print nf, fw, rate, est }' <<<"$out"
}

declare -A V
for ((r = 1; r <= RUNS; r++)); do
  for s in "${SETS[@]}"; do
    for b in "${BUILDS[@]}"; do
      bin=$THIS_BIN
      [ "$b" = base ] && bin=$BASE_BIN
      read -r nf fw rate est < <(run "$bin" "$s")
      V[$b.$s.nf]+="$nf "; V[$b.$s.fw]+="$fw "; V[$b.$s.rate]+="$rate "; V[$b.$s.est]+="$est "
      echo "round $r: $b $s: new flow $nf cycles (firewall $fw), $rate M flows/s, established $est cycles" >&2
    done
  done
done

med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
{
  echo "# The gateway with 10k and 100k rules"
  echo
  echo "Command: \`bench/run-gateway-rules.sh $*\` $(provenance)."
  echo
  echo "\`sluice-bench gateway --runs 3 --packets 1000000\` (configs/gateway-fulltable.toml: the full IPv4 table, 100,000 UDP flows of 64-byte packets, SNAT; one core) with each rule set loaded as its firewall (\`classbench_file\`, every rule \`accept\`): fw1_10k as shipped, and the 100k sets grown from the 10k ones (\`sluice-bench classbench-grow\`, the sets of [acl.md](acl.md)). A new flow's first packet is classified; above about 11,000 rules the workers' memo holds nothing, so each walks the decision trees. Cycles per packet (the template copy included), the firewall stage's cycles in a new flow's first packet, new flows per second per core; medians of $RUNS alternating rounds${REV:+, this tree beside \`$BASE_SHA\` in each}."
  echo
  if [ -n "$REV" ]; then
    echo "| rules | new flow cycles: $BASE_SHA / this | firewall stage | new flows M/s | established cycles | new flows/s: this ÷ $BASE_SHA |"
    echo "|---|---|---|---|---|---|"
  else
    echo "| rules | new flow cycles | firewall stage | new flows M/s | established cycles |"
    echo "|---|---|---|---|---|"
  fi
  for s in "${SETS[@]}"; do
    t=(); for k in nf fw rate est; do t+=("$(med "${V[this.$s.$k]}")"); done
    if [ -n "$REV" ]; then
      b=(); for k in nf fw rate est; do b+=("$(med "${V[base.$s.$k]}")"); done
      echo "| $s | ${b[0]} / ${t[0]} | ${b[1]} / ${t[1]} | ${b[2]} / ${t[2]} | ${b[3]} / ${t[3]} | $(ratio "${t[2]}" "${b[2]}")× |"
    else
      echo "| $s | ${t[0]} | ${t[1]} | ${t[2]} | ${t[3]} |"
    fi
  done
} | tee "$WORK/out.md"
mkdir -p bench/results
cp "$WORK/out.md" bench/results/gateway-rules.md
