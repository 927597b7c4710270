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

# Builds revision REV of this checkout (the appliance and the bench) in a
# worktree, target/ab/base, with a target directory of its own, the shared
# data sets linked beside it as beside this checkout, and this tree too;
# the worktree goes (and WORK, a caller's scratch directory, when set) on
# exit. Sets HERE (this checkout), BASE_SHA, BASE_BIN and THIS_BIN (the
# two builds' target/release).
#   build_rev REV
build_rev() {
  HERE=$PWD
  local ab=$HERE/target/ab
  BASE_SHA=$(git rev-parse --short "$1")
  rm -rf "$ab/base"
  git worktree prune
  git worktree add -q --detach "$ab/base" "$1"
  trap 'git -C "$HERE" worktree remove --force "$HERE/target/ab/base" 2>/dev/null || true; [ -z "${WORK:-}" ] || rm -rf "$WORK"' EXIT
  [ -d "$HERE/../shared" ] && ln -sfn "$(cd "$HERE/../shared" && pwd)" "$ab/shared"
  (cd "$ab/base" && CARGO_TARGET_DIR=$ab/target cargo build --release -q -p appliance -p bench)
  cargo build --release -q -p appliance -p bench
  BASE_BIN=$ab/target/release
  THIS_BIN=$HERE/target/release
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
