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
