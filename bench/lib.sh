# Shared by the benchmark scripts (source it): where a figure came from.

# "at <git describe --always>[-dirty] on <date>, <N> CPUs (<model>), Linux
# <kernel>": what every results file says after its command, so that no
# figure is without the code, machine and day it was measured on. Dirty
# means changes to what is measured: results files rewritten by an earlier
# run (bench/results/) do not count.
provenance() {
  local rev
  rev=$(git describe --always 2>/dev/null || echo unknown)
  if [ "$rev" != unknown ] && ! git diff --quiet HEAD -- . ':(exclude)bench/results' 2>/dev/null; then
    rev="$rev-dirty"
  fi
  echo "at \`$rev\` on $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), Linux $(uname -r)"
}

# What `sluice-bench gateway FLAG --runs RUNS` measures beside NAT44 (in
# each run), written to bench/results/OUT under TITLE with the calling
# script's command line: its setup, the table's rows of NAT44's new flows
# and established packets and those of the variant matching ROWS, and its
# summary lines (starting SUMMARY). Builds the bench first.
#   gateway_beside_nat44 OUT TITLE FLAG RUNS ROWS SUMMARY
gateway_beside_nat44() {
  local out=bench/results/$1 all
  cargo build --release -q -p bench
  mkdir -p bench/results
  {
    echo "# $2"
    echo
    echo "Command: \`bench/$(basename "$0") $4\` $(provenance)."
    echo
    all=$(target/release/sluice-bench gateway "$3" --runs "$4" 2>/dev/null)
    grep -E '^[0-9]+ flows' <<<"$all"
    echo
    grep -E "^\| (path|template|gateway, first packet|gateway, [0-9]+ packets of established|$5)|^\|---\|---\|---\|---\|---\|$" <<<"$all"
    echo
    grep -E "^$6" <<<"$all"
  } | tee "$out.tmp"
  mv "$out.tmp" "$out"
}
