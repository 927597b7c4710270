#!/usr/bin/env bash
# Builds the Debian package, target/debian/sluice_VERSION-1_ARCH.deb, with
# cargo-deb (installed from crates.io into ~/.cargo/bin if missing): the
# release binary with AF_XDP (DPDK builds stay from source: see
# docs/dpdk.md), the unit (packaging/sluice.service, not enabled),
# /etc/sluice/sluice.toml (a conffile), the example configs, the manual
# pages (sluice(1), sluice-run(1), sluice-ctl(1), …, generated from the
# command line's definition with clap_mangen) and bash, zsh and fish
# completions (clap_complete). Prints the package's path.
#
#   scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo deb --version >/dev/null 2>&1; then
  cargo install cargo-deb --locked --version 3.8.0 -q
fi
cargo build --release -p appliance --features afxdp -q
out=target/package
rm -rf "$out"
mkdir -p "$out/completions"
target/release/sluice man "$out/man" 2>/dev/null
target/release/sluice completions bash > "$out/completions/sluice"
target/release/sluice completions zsh > "$out/completions/_sluice"
target/release/sluice completions fish > "$out/completions/sluice.fish"
cargo deb -p appliance --no-build --strip -q
