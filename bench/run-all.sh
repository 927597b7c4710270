#!/usr/bin/env bash
# Re-measures everything: every benchmark script with its defaults, one
# after another (each writes its own results file in bench/results/, headed
# by its command and the `git describe` it measured), skipping those whose
# prerequisites are missing and saying so. Writes bench/results/run-all.md:
# what ran, what was skipped and why, how long each took. Not run-ab.sh,
# which compares two revisions and needs one named.
#   bench/run-all.sh            (as root for the DPDK and lab benchmarks)
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

root() { [ "$(id -u)" -eq 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }
data() { [ -d ../shared/data/"$1" ]; }

# [VAR=value] script | what it needs (a shell test) | why, when missing
BENCHES=(
  "run-null-io.sh|true|"
  "run-scaling.sh|[ \$(nproc) -ge 2 ]|needs 2 or more CPUs"
  "run-lpm.sh|data routes|needs ../shared/data/routes"
  "run-fib.sh|data routes|needs ../shared/data/routes"
  "run-acl.sh|data classbench|needs ../shared/data/classbench"
  "run-acl-instructions.sh|data classbench && have valgrind|needs ../shared/data/classbench and valgrind"
  "run-router.sh|data routes|needs ../shared/data/routes"
  "run-gateway.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "GATEWAY_TCP=1 run-gateway.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "run-nat64.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "run-gateway-ipv6.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "run-export.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "run-gateway-scale.sh|data routes && data classbench|needs ../shared/data (routes, classbench)"
  "run-gateway-instructions.sh|data routes && data classbench && have valgrind|needs ../shared/data (routes, classbench) and valgrind"
  "run-poll-sweep.sh|true|"
  "run-ctl-edits.sh|have python3|needs python3"
  "run-dpdk-io.sh|root && have dpdk-testpmd|needs root and dpdk-testpmd (apt-get install dpdk)"
  "run-softnic-builds.sh|pkg-config --exists libdpdk|needs DPDK's development files (apt-get install libdpdk-dev) for the DPDK build"
  "run-dpdk-l3fwd.sh|root && [ -d /usr/share/dpdk/examples/l3fwd ] && have make|needs root, dpdk-doc (the l3fwd sources) and make"
  "L3FWD_COUNT=1 run-dpdk-l3fwd.sh|root && [ -d /usr/share/dpdk/examples/l3fwd ] && have make && have valgrind|needs root, dpdk-doc (the l3fwd sources), make and valgrind"
  "run-convergence.sh|root && data routes|needs root and ../shared/data/routes"
  "run-convergence-bgp.sh|root && data routes && have bird && have birdc|needs root, ../shared/data/routes and bird2"
  "run-lab.sh|root && have nft && [ \$(nproc) -ge 2 ]|needs root, nftables and 2 or more CPUs"
  "LAB_GEN=trafgen run-lab.sh|root && have trafgen && have nft && [ \$(nproc) -ge 2 ]|needs root, netsniff-ng (trafgen), nftables and 2 or more CPUs"
  "run-ndr.sh|root && have nft && [ \$(nproc) -ge 2 ]|needs root, nftables and 2 or more CPUs"
  "run-tcp.sh|root && have nft && have iperf3 && [ \$(nproc) -ge 2 ]|needs root, nftables, iperf3 and 2 or more CPUs"
  "TCP_PROFILE=1 run-tcp.sh|root && have nft && have iperf3 && have perf && [ \$(nproc) -ge 2 ]|needs root, nftables, iperf3, perf (apt-get install linux-perf) and 2 or more CPUs"
  "run-handoff.sh|root && have ping && [ \$(nproc) -ge 2 ]|needs root, ping and 2 or more CPUs"
  "run-state.sh|true|"
  "run-bulk-sync.sh|root && have python3|needs root and python3"
  "run-failover.sh|root && have keepalived && have nft && have conntrackd && have python3|needs root, keepalived, nftables, conntrackd and python3"
)

rows=()
for b in "${BENCHES[@]}"; do
  IFS='|' read -r script need why <<< "$b"
  # "VAR=value script.sh": the script with that environment.
  words=($script)
  shown="${words[*]:0:${#words[@]}-1} bench/${words[-1]}"
  shown=${shown# }
  if ! eval "$need"; then
    echo "== $script: skipped: $why" >&2
    rows+=("| \`$shown\` | skipped: $why | - |")
    continue
  fi
  echo "== $script" >&2
  t0=$(date +%s)
  if env "${words[@]:0:${#words[@]}-1}" bash "bench/${words[-1]}" >&2; then
    rows+=("| \`$shown\` | done | $(( $(date +%s) - t0 )) s |")
  else
    rows+=("| \`$shown\` | FAILED (exit $?) | $(( $(date +%s) - t0 )) s |")
  fi
done

{
  echo "# Every benchmark, re-measured"
  echo
  echo "Command: \`bench/run-all.sh\` $(provenance). Each script's figures are in its own results file here, headed by the same provenance."
  echo
  echo "| script | outcome | took |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee bench/results/run-all.md
