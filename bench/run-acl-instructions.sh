#!/usr/bin/env bash
# Instructions per lookup of the rule classifier on each ClassBench set's
# trace, counted by valgrind (callgrind) in `sluice-bench acl`'s classifier
# passes: a figure the host's noise does not move, to compare revisions
# with (the lookups/s of run-acl.sh vary 1.5x from hour to hour on a
# shared VM). Counted with 1 and 2 passes over the trace; the difference
# over the trace's length is the instructions per lookup. The same for
# lookups through a worker's memo (`memo_pass`, after a first pass has
# filled it: the memo as a gateway worker runs it, hits and misses).
# Writes bench/results/acl-instructions.md.
#   bench/run-acl-instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p bench
WORK=$(mktemp -d /tmp/sluice-acl-instr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Instructions in sluice_bench::acl::$3 (default classify_pass) over $2
# passes of set $1 (a set ending in 6 or 6h: a grown set moved into IPv6,
# `acl --ipv6`).
count() {
  local v6=()
  [[ $1 == *6 || $1 == *6h ]] && v6=(--ipv6)
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
    --collect-atstart=no --toggle-collect="sluice_bench::acl::${3:-classify_pass}" \
    target/release/sluice-bench acl --set "$1" "${v6[@]}" --runs "$2" --classifier-only --chosen-only >"$WORK/log" 2>&1
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$WORK/log"
}
# The trace's length: the headers of each set's trace file (a grown set's
# trace: as many headers as its rules, the bench's default 100,000).
trace_len() {
  [ "$1" = grown ] && { echo 100000; return; }
  local f=../shared/data/classbench/$1
  if [[ $f == *.gz ]]; then zcat "$f"; else cat "$f"; fi | grep -c .
}
{
  echo "# Rule classification, instructions per lookup"
  echo
  echo "Command: \`bench/run-acl-instructions.sh\` $(provenance)."
  echo
  echo "valgrind's callgrind counting the instructions of the classifier's passes over each ClassBench set's trace in \`sluice-bench acl --chosen-only\` (the layout \`Classifier::build\` chooses; acl1_10k over acl1_1k's trace, as there; the 100k sets grown from the 10k ones, each over its 100,000 headers, as there), counted with 1 and 2 passes: the difference over the trace's length. With a memo: the same through a worker's memo of classifications (\`pipeline::acl::Memo\`, 1,024 entries), filled by a pass before; hits: the share of one pass's lookups it answered (from \`sluice-bench acl\`). Sets ending in 6: the 100k sets moved into IPv6 as \`sluice-bench acl --ipv6\` moves them (6h: with each host a /128), their rules the classifier's IPv6 rules."
  echo
  echo "| rules | trace headers | instructions/lookup | with a memo | memo hits |"
  echo "|---|---|---|---|---|"
  for s in acl1_1k:acl1_1k_trace fw1_1k:fw1_1k_trace ipc1_1k:ipc1_1k_trace acl1_10k:acl1_1k_trace fw1_10k:fw1_10k_trace.gz ipc1_10k:ipc1_10k_trace.gz acl1_100k:grown fw1_100k:grown ipc1_100k:grown \
    acl1_100k6:grown fw1_100k6:grown ipc1_100k6:grown acl1_100k6h:grown fw1_100k6h:grown ipc1_100k6h:grown; do
    set_=${s%%:*}
    n=$(trace_len "${s#*:}")
    one=$(count "$set_" 1)
    two=$(count "$set_" 2)
    mone=$(count "$set_" 1 memo_pass)
    hits=$(grep "^| $set_ |" "$WORK/log" | awk -F'|' '{print $10}' | sed 's/,.*//; s/ //g')
    mtwo=$(count "$set_" 2 memo_pass)
    [ -n "$one" ] && [ -n "$two" ] && [ -n "$mone" ] && [ -n "$mtwo" ] || { echo "no count from valgrind: see $WORK/log" >&2; exit 1; }
    echo "| $set_ | $n | $(( (two - one) / n )) | $(( (mtwo - mone) / n )) | $hits |"
  done
} | tee bench/results/acl-instructions.md.tmp
mv bench/results/acl-instructions.md.tmp bench/results/acl-instructions.md
