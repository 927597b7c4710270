# Shared by the benchmark scripts (source it): where a figure came from.

# "at <git describe --always --dirty> on <date>, <N> CPUs (<model>), Linux
# <kernel>": what every results file says after its command, so that no
# figure is without the code, machine and day it was measured on.
provenance() {
  local rev
  rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
  echo "at \`$rev\` on $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), Linux $(uname -r)"
}
