#!/usr/bin/env bash
# Multi-core scaling of the worker loop: N workers, each pinned to its own
# core (1..N; the management thread keeps core 0) with its own pair of null
# ports, so nothing is shared between them but the process. For each
# forwarding mode and N: the packets per second forwarded by all workers
# together, per worker, and the workers' mean cycles per packet. Needs
# only a release build (no DPDK) and awk; meant for many-core machines.
# Writes the table to stdout.
#   bench/run-scaling.sh [path/to/sluice] [seconds] [modes] [N...]
#   (default: target/release/sluice 4 "io macswap" 1 2 4 8 ... up to nproc-1)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SLUICE=${1:-target/release/sluice}
SECS=${2:-4}
MODES=${3:-io macswap}
shift 3 2>/dev/null || shift $#
NS=("$@")
CPUS=$(nproc)
if [ ${#NS[@]} -eq 0 ]; then
  for n in 1 2 4 8 12 16 24 32 48 64; do [ "$n" -lt "$CPUS" ] && NS+=("$n"); done
  [ "${NS[-1]}" -eq $((CPUS - 1)) ] || NS+=($((CPUS - 1)))
fi
WORK=$(mktemp -d /tmp/sluice-scaling.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

config() { # mode workers
  printf '[run]\nduration = %s\nstats_period = 1.0\nburst = 32\ndrain_us = 100\n' "$SECS"
  local w
  for w in $(seq 1 "$2"); do
    printf '\n[[port]]\nname = "a%d"\ndriver = "null"\n[port.null]\nsize = 64\n' "$w"
    printf '\n[[port]]\nname = "b%d"\ndriver = "null"\n[port.null]\nsize = 64\n' "$w"
  done
  for w in $(seq 1 "$2"); do
    printf '\n[[worker]]\ncore = %d\nmode = "%s"\nrx = ["a%d", "b%d"]\n' "$w" "$1" "$w" "$w"
  done
}

echo "# Worker scaling on null ports"
echo
echo "Command: \`bench/run-scaling.sh $SLUICE $SECS \"$MODES\" ${NS[*]}\` $(provenance)."
echo
echo "Each worker: its own core and its own two null ports (64-byte frames, burst 32), busy polling; ${SECS} s per run; Mpps from the run's summary (all ports' TX), cycles/packet the workers' mean."
echo
echo "| mode | workers | Mpps, all | Mpps per worker | cycles/packet | vs 1 worker |"
echo "|---|---|---|---|---|---|"
for mode in $MODES; do
  base=
  for n in "${NS[@]}"; do
    config "$mode" "$n" > "$WORK/c.toml"
    line=$("$SLUICE" run "$WORK/c.toml" --json 2> "$WORK/err" | tail -1) || {
      echo "sluice failed for $mode x $n:" >&2
      cat "$WORK/err" >&2
      exit 1
    }
    read -r mpps cpp < <(python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
c = [x["cycles_per_pkt"] for x in s["cores"] if x["cycles_per_pkt"] is not None]
print("%.1f %.1f" % (sum(p["tx_pps"] for p in s["ports"]) / 1e6, sum(c) / len(c) if c else 0))' <<< "$line")
    base=${base:-$mpps}
    awk -v m="$mode" -v n="$n" -v t="$mpps" -v c="$cpp" -v b="$base" \
      'BEGIN {printf "| %s | %d | %.1f | %.1f | %s | %.2fx |\n", m, n, t, t / n, c, t / b}'
  done
done
