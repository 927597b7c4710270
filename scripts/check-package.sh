#!/usr/bin/env bash
# Builds the Debian package (scripts/package.sh), checks it with lintian
# (no errors), installs it with dpkg, and checks what was installed as a
# newcomer would use it: the sluice user, the unit (systemd-analyze
# verify), the manual pages, the completions, `sluice check` on the
# conffile, and the installed unit's command line run as its user with its
# capabilities (setpriv: there is no systemd as PID 1 here) for 3 s, asked
# over its control socket and metrics endpoint, stopped by SIGTERM. The
# package is purged afterwards (the system user stays, as Debian leaves
# them). As root, or through sudo.
#
#   scripts/check-package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
fail() { echo "check-package: FAIL $*" >&2; exit 1; }

deb=$(scripts/package.sh | tail -1)
[ -f "$deb" ] || fail "no package built"
lintian --fail-on error "$deb" 2>/dev/null || fail "lintian found errors in $deb"
echo "check-package: lintian: no errors"

cleanup() {
  [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null
  "${as_root[@]}" dpkg --purge sluice >/dev/null 2>&1 || true
  "${as_root[@]}" rm -rf /run/sluice
}
trap cleanup EXIT
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null
getent passwd sluice >/dev/null || fail "no sluice user after install"
unit=$(dpkg -L sluice | grep '/systemd/system/sluice.service$')
systemd-analyze verify --man=no "$unit" 2>&1 | { ! grep sluice.service; } || fail "systemd-analyze verify $unit"
for page in sluice sluice-run sluice-ctl sluice-check; do
  MANPAGER=cat MANWIDTH=80 man "$page" 2>/dev/null | grep -q "^NAME" || fail "man $page renders nothing"
done
grep -q "_sluice()" /usr/share/bash-completion/completions/sluice || fail "bash completion"
grep -q "#compdef sluice" /usr/share/zsh/vendor-completions/_sluice || fail "zsh completion"
grep -q "complete -c sluice" /usr/share/fish/vendor_completions.d/sluice.fish || fail "fish completion"
dpkg-query -W -f='${Conffiles}\n' sluice | grep -q /etc/sluice/sluice.toml || fail "sluice.toml is no conffile"
/usr/bin/sluice --version
/usr/bin/sluice check /etc/sluice/sluice.toml >/dev/null || fail "sluice check /etc/sluice/sluice.toml"

# The unit's ExecStart as systemd would run it: its User=, its
# AmbientCapabilities= and bounding set, no_new_privs, its
# RuntimeDirectory= (made here), a NOTIFY_SOCKET is left out (tested by
# appliance/tests/unit.rs).
caps=$(sed -n 's/^AmbientCapabilities=//p' "$unit" | tr ' ' '\n' | sed 's/^CAP_/+/' | tr 'A-Z' 'a-z' | paste -sd, -)
start=$(sed -n 's/^ExecStart=//p' "$unit")
"${as_root[@]}" rm -rf /run/sluice
"${as_root[@]}" install -d -o sluice -g sluice -m 0750 /run/sluice
# shellcheck disable=SC2086
"${as_root[@]}" setpriv --reuid=sluice --regid=sluice --init-groups --no-new-privs \
  --inh-caps="$caps" --ambient-caps="$caps" --bounding-set="-all,$caps" -- $start \
  > /dev/null 2> /tmp/check-package.err &
pid=$!
for _ in $(seq 100); do
  [ -S /run/sluice/sluice.sock ] && break
  sleep 0.1
done
# Asked until it answers (10 s at most): on a busy host the first
# statistics, which the port counters come from, can take longer than a
# second (a CI run once found the metrics endpoint up without them).
until_ok() {
  for _ in $(seq 100); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}
ctl_has_port() { "${as_root[@]}" /usr/bin/sluice ctl stats 2>/dev/null | grep -q "p0"; }
metrics_have_ports() { curl -sf --max-time 2 http://127.0.0.1:9469/metrics | grep -q '^sluice_port_rx_packets_total'; }
until_ok ctl_has_port || fail "sluice ctl stats: $(cat /tmp/check-package.err)"
until_ok metrics_have_ports ||
  fail "no port counters in the metrics: $(curl -s --max-time 2 http://127.0.0.1:9469/metrics | head -c 600) $(cat /tmp/check-package.err)"
main=$(pgrep -u sluice -x sluice | head -1)
grep -q '^CapEff:[[:space:]]*0000000000000000' "/proc/$main/status" || fail "the installed sluice keeps capabilities"
"${as_root[@]}" kill -TERM "$pid"
wait "$pid" || fail "exit status $?: $(cat /tmp/check-package.err)"
pid=
grep -q "privileges: uid $(id -u sluice)" /tmp/check-package.err || fail "no privilege line: $(cat /tmp/check-package.err)"
rm -f /tmp/check-package.err
echo "check-package: PASS $deb installed, run as its unit runs it, purged"
