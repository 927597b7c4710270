#!/usr/bin/env bash
# Sluice on DPDK (two net_null vdevs, one worker) vs dpdk-testpmd on the same
# vdevs, io and macswap, side by side, alternating, median of 3; and txonly
# (one net_null vdev with no-rx=1: the generator's own ceiling), with and
# without the per-packet signature; and txonly -> rxonly over a net_ring (the
# generator and a receiver on two cores, against testpmd's txonly and rxonly
# in a primary and a secondary process on the same ring), with and without
# the signature and its check. As root it
# reserves hugepages when missing; Sluice's EAL then uses them too (it falls
# back to --no-huge only when none are free). Writes
# bench/results/dpdk-null.md. Needs Debian's dpdk, dpdk-dev, libdpdk-dev and
# libclang-dev.
#   bench/run-dpdk-io.sh [--runs N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release -q -p appliance --features dpdk
cargo build --release -q -p bench
mkdir -p bench/results
{
  echo "# Sluice on DPDK vs dpdk-testpmd"
  echo
  echo "Command: \`bench/run-dpdk-io.sh $*\` $(provenance). Sluice runs configs/dpdk-null-io.toml; its EAL uses hugepages when free (the bench reserves them as root)."
  for mode in io macswap; do
    echo
    target/release/sluice-bench null-io --config configs/dpdk-null-io.toml --forward-mode "$mode" "$@"
  done
  # txonly with the signature a receiving probe reads, then without it
  # (the work testpmd's txonly does).
  for cfg in configs/dpdk-null-txonly.toml configs/dpdk-null-txonly-nosig.toml; do
    echo
    target/release/sluice-bench null-io --config "$cfg" --forward-mode txonly "$@"
  done
  for cfg in configs/dpdk-ring-txrx.toml configs/dpdk-ring-txrx-nosig.toml; do
    echo
    target/release/sluice-bench null-io --config "$cfg" --forward-mode ring "$@"
  done
} | tee bench/results/dpdk-null.md.tmp
mv bench/results/dpdk-null.md.tmp bench/results/dpdk-null.md
