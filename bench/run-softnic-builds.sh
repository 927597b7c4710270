#!/usr/bin/env bash
# The softnic with and without `--features dpdk`, side by side: issue 16
# asked whether a DPDK build runs softnic configs slower (a 4x gap was
# once reported). Both builds run the same configs at the generator's
# maximum, alternating, median of N: the quickstart (io), the full-table
# router config in io mode (where the gap was reported) and in l3fwd mode.
# The DPDK build goes to target/dpdk-build so that the two do not rebuild
# each other. Writes bench/results/softnic-builds.md.
#   bench/run-softnic-builds.sh [runs] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-5}
SECS=${2:-4}
cargo build --release -q -p appliance
CARGO_TARGET_DIR=target/dpdk-build cargo build --release -q -p appliance --features dpdk
PLAIN=$PWD/target/release/sluice
DPDK=$PWD/target/dpdk-build/release/sluice
WORK=$(mktemp -d /tmp/sluice-builds.XXXXXX)

# Every generator at "max", the run SECS long; a mode replaced if given.
# The config keeps its directory, so that its relative paths (the route
# file) still resolve.
variant() { # SRC NAME [MODE]
  local out=configs/.bench-$2.toml
  sed -e 's/^rate = .*/rate = "max"/' -e "s/^duration = .*/duration = $SECS/" "$1" > "$out"
  [ -n "${3:-}" ] && sed -i "s/^mode = \".*\"/mode = \"$3\"/" "$out"
  echo "$out"
}
trap 'rm -rf "$WORK" configs/.bench-*.toml' EXIT
CFGS=(
  "quickstart (io)|$(variant configs/quickstart.toml qs)"
  "router-fulltable in io mode|$(variant configs/router-fulltable.toml ft-io io)"
  "router-fulltable (l3fwd)|$(variant configs/router-fulltable.toml ft-l3)"
)

# run BINARY CONFIG: "forwarded Mpps (all ports) worker cycles/packet".
run() {
  "$1" run "$2" --json 2> "$WORK/err" | tail -1 | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
tx = sum(p["tx_pps"] for p in s["ports"])
c = s["cores"][0]["cycles_per_pkt"] or float("nan")
print("%.3f %.1f" % (tx / 1e6, c))'
}

{
  echo "# The softnic in the default build and the DPDK build"
  echo
  echo "Command: \`bench/run-softnic-builds.sh $RUNS $SECS\` $(provenance)."
  echo
  echo "The same softnic configs with every generator at its maximum, run by \`cargo build --release\` and by \`--features dpdk\` (no DPDK port in them: the EAL is not started), ${SECS} s per run, the builds alternating, median of ${RUNS} (all runs in brackets). Forwarded Mpps summed over the ports; cycles are the worker's busy cycles per packet."
  echo
  echo "| config | default build Mpps | DPDK build Mpps | DPDK ÷ default | cycles/packet default, DPDK |"
  echo "|---|---|---|---|---|"
  for c in "${CFGS[@]}"; do
    name=${c%%|*} file=${c#*|}
    p=() d=()
    for i in $(seq "$RUNS"); do
      r=$(run "$PLAIN" "$file"); echo "$name run $i default: $r" >&2; p+=("$r")
      r=$(run "$DPDK" "$file"); echo "$name run $i dpdk: $r" >&2; d+=("$r")
    done
    python3 - "$name" "${p[*]}" "${d[*]}" <<'PY'
import statistics, sys
name, p, d = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def col(v, k):
    return [float(x) for x in v[k::2]]
mp, md = statistics.median(col(p, 0)), statistics.median(col(d, 0))
runs = lambda v: ", ".join("%.2f" % x for x in col(v, 0))
print("| %s | %.2f [%s] | %.2f [%s] | %.2f× | %.0f, %.0f |" % (
    name, mp, runs(p), md, runs(d), md / mp,
    statistics.median(col(p, 1)), statistics.median(col(d, 1))))
PY
  done
} | tee "$WORK/out.md"
mkdir -p bench/results
cp "$WORK/out.md" bench/results/softnic-builds.md
