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
# each run): its setup, the table's rows of NAT44's new flows and
# established packets and those of the variant matching ROWS, and its
# summary line (starting SUMMARY).
#   gateway_beside_nat44 FLAG RUNS ROWS SUMMARY
gateway_beside_nat44() {
  local all
  all=$(target/release/sluice-bench gateway "$1" --runs "$2" 2>/dev/null)
  grep -E '^[0-9]+ flows' <<<"$all"
  echo
  grep -E "^\| (path|template|gateway, first packet|gateway, [0-9]+ packets of established|$3)|^\|---\|---\|---\|---\|---\|$" <<<"$all"
  echo
  grep -E "^$4" <<<"$all"
}
