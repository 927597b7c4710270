#!/usr/bin/env bash
# Installs what the tests need (Debian packages, as root) and runs every
# check: formatting, clippy with warnings denied, and the whole test suite.
# The tests read ../shared/data (pcaps); with CI set they fail if it is
# missing instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests need: DPDK and libclang for the DPDK backend
# (pmd's `dpdk` feature: bindgen and the C shim); the namespace lab's
# peers and tools (scripts/lab.sh, run by appliance/tests/lab.rs); libxdp
# and libbpf for the AF_XDP backend (feature `afxdp`); prometheus (the
# server and promtool) for the metrics endpoint's tests; tcpdump (libpcap's
# filter compiler) and tshark for the capture tests; BIRD 2 for the BGP
# session through Sluice's TAP mirrors (appliance/tests/bgp.rs);
# keepalived for the HA pair's failover (appliance/tests/failover.rs);
# systemd (systemd-analyze) for the unit's tests (appliance/tests/unit.rs);
# dpkg-dev, lintian, adduser and man-db for the Debian package
# (scripts/check-package.sh); nfdump (nfcapd) and tshark as the IPFIX
# collectors (appliance/tests/export.rs); nftables for the kernel's side
# of the input-chain test (appliance/tests/input.rs).
PKGS=(dpdk dpdk-dev libdpdk-dev libclang-dev pkg-config
  iproute2 iputils-ping traceroute curl iperf3 python3 ethtool
  libxdp-dev libbpf-dev prometheus tcpdump tshark bird2 keepalived
  systemd dpkg-dev lintian adduser man-db nfdump nftables)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  # As root directly (where sudo may not exist), else through sudo.
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "scripts/test.sh: run as root (or install sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

cargo fmt --all -- --check
cargo fmt --manifest-path pmd/dpdk-sys/Cargo.toml -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q
# The DPDK backend: built against Debian's DPDK, tested on vdevs without
# hugepages.
cargo clippy -p pmd --features dpdk --all-targets -q -- -D warnings
cargo test -p pmd --features dpdk -q
# The AF_XDP backend (libxdp), the namespace lab again with DPDK
# net_af_packet and AF_XDP ports as well, and the tester modes against
# dpdk-testpmd on the same net_pcap vdev.
cargo fmt --manifest-path pmd/xdp-sys/Cargo.toml -- --check
cargo clippy -p pmd -p appliance --features appliance/afxdp --all-targets -q -- -D warnings
cargo test -p appliance --features dpdk,afxdp --test lab --test testpmd --test privilege --test jumbo --test nat64 -q
# Miri over the buffer code (pmd::mbuf, pmd::batch: the raw-pointer slots
# and bursts): a nightly toolchain with the miri component, installed here
# when rustup can fetch it, else skipped with a note. Pools live for the
# process by design, hence -Zmiri-ignore-leaks.
if cargo +nightly miri --version >/dev/null 2>&1 ||
   { rustup toolchain install nightly --profile minimal >/dev/null 2>&1 &&
     rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1; }; then
  MIRIFLAGS=-Zmiri-ignore-leaks cargo +nightly miri test -q -p pmd --lib -- mbuf batch
else
  echo "scripts/test.sh: no nightly toolchain with Miri to be had here: Miri skipped" >&2
fi
# The fuzz targets (run them with cargo-fuzz, see README) must keep compiling.
cargo check -q --manifest-path fuzz/Cargo.toml
# The Debian package: built with cargo-deb, lintian, installed with dpkg,
# run as its unit runs it, purged.
scripts/check-package.sh
