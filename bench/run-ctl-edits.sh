#!/usr/bin/env bash
# What `sluice ctl` route and neighbour edits cost while the appliance
# forwards, timed by a client over the raw control socket (one JSON line
# per connection, as any script would send it; the client's own time is
# in every figure):
#   - N scripted `route add 10.a.b.0/24 via 198.19.0.2` on the shipped
#     gateway (configs/gateway.toml, its generators running), the time per
#     add for each block of 500, then `route del` of every other one, and
#     `route replace` of those left;
#   - `neighbor add` and `neighbor del` on the shipped gateway and, when
#     ../shared/data is present, on the full-table gateway
#     (configs/gateway-fulltable.toml: 901,899 routes, 9,416 rules).
# Writes bench/results/ctl-edits.md.
#   bench/run-ctl-edits.sh [N]      (default 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${1:-3000}
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
cargo build --release -q --bin sluice
WORK=$(mktemp -d /tmp/sluice-ctl-edits.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

# The config $1 running until stopped, with a socket in $WORK; relative
# paths resolved from the config's own directory.
start() {
  local base
  base=$(cd "$(dirname "$1")" && pwd)
  sed -e 's/^duration = .*/duration = 0/' \
    -e "s|= \"\\.\\./|= \"$base/../|" "$1" >"$WORK/cfg.toml"
  printf '\n[management]\nsocket = "%s/s.sock"\n' "$WORK" >>"$WORK/cfg.toml"
  rm -f "$WORK/s.sock"
  target/release/sluice run "$WORK/cfg.toml" >"$WORK/run.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do
    [ -S "$WORK/s.sock" ] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/run.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "no socket after 120 s" >&2
  exit 1
}
stop() {
  kill -TERM "$PID"
  wait "$PID" || true
  PID=
}

cat >"$WORK/client.py" <<'EOF'
import json, socket, sys, time

sock, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

def req(args):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall((json.dumps({"args": args}) + "\n").encode())
    r = b""
    while not r.endswith(b"\n"):
        c = s.recv(65536)
        if not c:
            break
        r += c
    s.close()
    r = json.loads(r)
    if not r["ok"]:
        sys.exit(f"{' '.join(args)}: {r['error']}")
    return r

def timed(args):
    t = time.perf_counter()
    req(args)
    return (time.perf_counter() - t) * 1e3

def prefix(i):
    return f"10.{i // 256}.{i % 256}.0/24"

def row(label, ms):
    ms = sorted(ms)
    print(f"| {label} | {len(ms)} | {ms[len(ms) // 2]:.2f} | {ms[-1]:.2f} |")

if what == "routes":
    adds = [timed(["route", "add", prefix(i), "via", "198.19.0.2"]) for i in range(n)]
    for b in range(0, n, 500):
        row(f"`route add` {b + 1}–{min(b + 500, n)}", adds[b:b + 500])
    row("`route del` of every other one", [timed(["route", "del", prefix(i)]) for i in range(0, n, 2)])
    row("`route replace` of those left, by two paths",
        [timed(["route", "replace", prefix(i), "via", "198.19.0.2", "via", "198.19.0.3"]) for i in range(1, n, 2)])
neigh = ["198.19.0.9", "02:00:00:00:00:09", "port", "p1"]
row(f"`neighbor add`, `neighbor del` ({'shipped gateway' if what == 'routes' else what})",
    [x for _ in range(3) for x in (timed(["neighbor", "add"] + neigh), timed(["neighbor", "del", neigh[0]]))])
EOF

{
  echo "# \`sluice ctl\` edits: time per command"
  echo
  echo "Command: \`bench/run-ctl-edits.sh $N\` $(provenance)."
  echo
  echo "A Python client over the raw control socket (one connection per command, its own time included), release build. Routes: $N \`route add 10.a.b.0/24 via 198.19.0.2\` one after another on the shipped gateway (\`configs/gateway.toml\`, its generators running), then \`route del\` of every other one, then \`route replace\` of the rest by two equal-cost paths. Neighbours: three \`neighbor add\` / \`neighbor del\` pairs, on the shipped gateway after the routes, and on the full-table gateway (\`configs/gateway-fulltable.toml\`: 901,899 routes from the route file, 9,416 rules) when ../shared/data is present."
  echo
  echo "| commands | count | median ms | slowest ms |"
  echo "|---|---|---|---|"
  start configs/gateway.toml
  python3 "$WORK/client.py" "$WORK/s.sock" routes "$N"
  stop
  if [ -d ../shared/data/routes ] && [ -d ../shared/data/classbench ]; then
    start configs/gateway-fulltable.toml
    python3 "$WORK/client.py" "$WORK/s.sock" "full table" 0
    stop
  else
    echo "| (full-table gateway: skipped, no ../shared/data) | - | - | - |"
  fi
} | tee bench/results/ctl-edits.md.tmp
mv bench/results/ctl-edits.md.tmp bench/results/ctl-edits.md
