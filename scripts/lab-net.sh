# The namespace lab's topology, shared by scripts/lab.sh, bench/run-lab.sh
# and bench/run-ndr.sh (source it):
#
#   sl-client-PID: c0 198.18.0.2/24 (02:c1:00:00:00:02), default via 198.18.0.1
#   sl-router-PID: r0 (02:51:00:00:00:00) and r1 (02:51:00:00:00:01), no
#              addresses: the router under test owns them
#   sl-server-PID: s0 198.19.0.2/24 (02:5e:00:00:00:02), no route to 198.18/24
#
# veth pairs c0=r0 and s0=r1, offloads and IPv6 off (every frame a whole,
# countable IPv4/ARP frame).

# Namespace names are unique per run (the shell's PID), so two labs can
# run at once and lab_down kills only what this run started.
NS_C=sl-client-$$ NS_R=sl-router-$$ NS_S=sl-server-$$

inns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

lab_down() {
  local ns p
  for ns in $NS_C $NS_R $NS_S; do
    # Kill what runs in the namespace, then the namespace.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  return 0
}

lab_up() {
  local ns
  lab_down
  for ns in $NS_C $NS_R $NS_S; do
    ip netns add "$ns"
    # No name server in the lab (`ip netns exec` mounts this file over
    # /etc/resolv.conf): a server's reverse lookup of its own address
    # (python's http.server does one at bind) would otherwise send DNS
    # through the router and ARP for the gateway, unpredictably, before
    # and after the router under test starts.
    mkdir -p "/etc/netns/$ns"
    echo "nameserver 127.0.0.1" > "/etc/netns/$ns/resolv.conf"
  done
  ip link add c0 netns $NS_C type veth peer name r0 netns $NS_R
  ip link add s0 netns $NS_S type veth peer name r1 netns $NS_R
  for ns in $NS_C $NS_R $NS_S; do
    inns "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    inns "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    inns "$ns" ip link set lo up
  done
  lab_if $NS_C c0 02:c1:00:00:00:02
  lab_if $NS_R r0 02:51:00:00:00:00
  lab_if $NS_R r1 02:51:00:00:00:01
  lab_if $NS_S s0 02:5e:00:00:00:02
  inns $NS_C ip addr add 198.18.0.2/24 dev c0
  inns $NS_C ip route add default via 198.18.0.1
  inns $NS_S ip addr add 198.19.0.2/24 dev s0
}

lab_if() { # ns dev mac
  inns "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
  inns "$1" ip link set "$2" address "$3"
  inns "$1" ethtool -K "$2" gro off gso off tso off tx off rx off >/dev/null 2>&1
  inns "$1" ip link set "$2" up
}

# Packets an interface in a namespace has sent / received.
lab_tx() { inns "$1" cat "/sys/class/net/$2/statistics/tx_packets"; }
lab_rx() { inns "$1" cat "/sys/class/net/$2/statistics/rx_packets"; }
# Frames an interface in a namespace dropped on transmit (a veth: those
# its peer had no room for, e.g. a full XDP ring).
lab_tx_dropped() { inns "$1" cat "/sys/class/net/$2/statistics/tx_dropped"; }

# The lab config (AF_PACKET ports) with its ports as AF_XDP sockets.
lab_afxdp_config() { # from to
  sed 's/^driver = "afpacket"/driver = "afxdp"/; s/^\[port\.afpacket\]/[port.afxdp]/' "$1" > "$2"
}

# A Sluice tester for the lab (bench/run-lab.sh, bench/run-ndr.sh): a
# flowgen worker on core CORE generating on c0 to the router's r0 (64-byte
# frames, FLOWS UDP flows client -> server port 9 from source ports 1024
# on, one each, as trafgen's; 256 unless given; idle until `sluice ctl gen
# start`), its control socket at SOCK; with `both`, also receiving on s0
# (moved into the client namespace) what the router forwards.
lab_tester_config() { # file sock core [both] [flows]
  local rx='"c0"' s0= flows=${5:-256}
  if [ "${4:-}" = both ]; then
    rx='"c0", "s0"'
    s0='
[[port]]
name = "s0"
driver = "afpacket"
mac = "02:5e:00:00:00:02"
peer = "c0"
[port.afpacket]
iface = "s0"
'
  fi
  cat > "$1" <<EOF
[run]
duration = 0
stats_period = 60.0

[management]
socket = "$2"

[[port]]
name = "c0"
driver = "afpacket"
mac = "02:c1:00:00:00:02"
peer = "c0"
peer_mac = "02:51:00:00:00:00"
[port.afpacket]
iface = "c0"
$s0
[[worker]]
core = $3
mode = "flowgen"
rx = [$rx]
[worker.gen]
rate = 0
size = 60
flows = $flows
walk = "sequential"
src_ip = "198.18.0.2/32"
dst_ip = "198.19.0.2/32"
src_port = "1024-$((1023 + flows))"
dst_port = "9"
EOF
}

# The kernel as the router: ip_forward, static neighbours, the policy of
# configs/router-nat.toml in nftables (filter, masquerade, DNAT), RPS
# steering the router interfaces' receive work to CPU $1.
lab_kernel_router() { # cpu
  inns $NS_R ip addr add 198.18.0.1/24 dev r0
  inns $NS_R ip addr add 198.19.0.1/24 dev r1
  inns $NS_R ip neigh replace 198.18.0.2 lladdr 02:c1:00:00:00:02 dev r0
  inns $NS_R ip neigh replace 198.19.0.2 lladdr 02:5e:00:00:00:02 dev r1
  inns $NS_R sysctl -qw net.ipv4.ip_forward=1
  local mask=$(printf %x $((1 << $1))) d
  for d in r0 r1; do echo "$mask" | inns $NS_R tee /sys/class/net/$d/queues/rx-0/rps_cpus > /dev/null; done
  # The same policy as configs/router-nat.toml.
  inns $NS_R nft -f - <<'EOF'
table inet filter {
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established accept
    oifname "r1" tcp dport 23 reject with tcp reset
    oifname "r1" tcp dport 25 drop
    ct state invalid drop
    iifname "r0" ct state { new, related } accept
    iifname "r1" oifname "r0" tcp dport 80 ct state new ct status dnat ct original ip daddr 198.19.0.1 ct original proto-dst 8080 accept
    ct state related accept
  }
}
table ip nat {
  chain prerouting {
    type nat hook prerouting priority -100;
    iifname "r1" ip daddr 198.19.0.1 tcp dport 8080 dnat to 198.18.0.2:80
  }
  chain postrouting {
    type nat hook postrouting priority 100;
    oifname "r1" ip saddr 198.18.0.0/24 masquerade
  }
}
EOF
}
