//! The checked configuration the rest of the appliance runs from.

use super::*;
use pipeline::conntrack::Timeouts;
use pipeline::firewall::{Action, FwRule};
use pipeline::nat::NatConfig;
use pipeline::router::{Interface, NextHop};
use std::net::IpAddr;

/// Forwarding mode, with testpmd's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum FwdMode {
    /// Forward untouched.
    #[serde(rename = "io")]
    Io,
    /// Rewrite source MAC (port's) and destination MAC (port's peer_mac).
    #[serde(rename = "mac")]
    Mac,
    /// Swap source and destination MAC.
    #[serde(rename = "macswap")]
    MacSwap,
    /// Swap MACs, IP addresses and L4 ports.
    #[serde(rename = "5tswap")]
    FiveTupleSwap,
    /// The router: IPv4/IPv6 forwarding through the route tables.
    #[serde(rename = "l3fwd")]
    L3fwd,
    /// Receive, count and free (testpmd's `rxonly`).
    #[serde(rename = "rxonly")]
    RxOnly,
    /// Answer ARP and ICMP echo requests on the receiving port, free the
    /// rest (testpmd's `icmpecho`).
    #[serde(rename = "icmpecho")]
    IcmpEcho,
    /// Verify and fill in IP and TCP/UDP checksums, counting bad ones, and
    /// forward as `mac` does (testpmd's `csum`).
    #[serde(rename = "csum")]
    Csum,
    /// Generate on the TX queues of the peers of its RX ports (testpmd's
    /// `txonly`: one flow unless `flows` says otherwise), paced; what it
    /// receives is checked (signatures, latency, loss) and freed.
    #[serde(rename = "txonly")]
    TxOnly,
    /// `txonly` over many flows (testpmd's `flowgen`: 1024 by default).
    #[serde(rename = "flowgen")]
    FlowGen,
}

impl FwdMode {
    /// testpmd's name.
    pub fn name(self) -> &'static str {
        match self {
            FwdMode::Io => "io",
            FwdMode::Mac => "mac",
            FwdMode::MacSwap => "macswap",
            FwdMode::FiveTupleSwap => "5tswap",
            FwdMode::L3fwd => "l3fwd",
            FwdMode::RxOnly => "rxonly",
            FwdMode::IcmpEcho => "icmpecho",
            FwdMode::Csum => "csum",
            FwdMode::TxOnly => "txonly",
            FwdMode::FlowGen => "flowgen",
        }
    }

    /// Whether it generates traffic.
    pub fn generates(self) -> bool {
        matches!(self, FwdMode::TxOnly | FwdMode::FlowGen)
    }
}

/// Run-wide settings.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Run length (`None`: until Ctrl-C).
    pub duration: Option<Duration>,
    /// Stats period.
    pub stats_period: Duration,
    /// Burst size.
    pub burst: usize,
    /// TX drain timer.
    pub drain: Duration,
}

/// A port's backend settings.
#[derive(Debug, Clone)]
pub enum PortKind {
    /// Software NIC fed by the generator.
    Softnic {
        /// Generated traffic.
        gen: GenConfig,
        /// Interrupt coalescing.
        coalesce: Coalesce,
    },
    /// net_null-like port.
    Null {
        /// Packet size.
        size: usize,
    },
    /// A DPDK ethdev port (build with `--features dpdk`).
    Dpdk {
        /// vdev string or PCI address.
        device: String,
    },
    /// A Linux interface through AF_PACKET.
    AfPacket {
        /// Interface name.
        iface: String,
        /// Ring blocks per RX queue.
        blocks: u32,
        /// The RX ring's layout.
        ring: pmd::afpacket::RingVersion,
        /// Bypass the qdisc on TX.
        qdisc_bypass: bool,
    },
    /// A Linux interface through AF_XDP (build with `--features afxdp`).
    AfXdp {
        /// Interface name.
        iface: String,
        /// The port's share of the shared UMEM, in 2 KiB frames.
        frames: u32,
        /// Zero-copy binding.
        zerocopy: bool,
        /// Generic (skb) XDP.
        skb_mode: bool,
    },
    /// pcap replay / capture.
    Pcap {
        /// Capture to replay.
        rx_file: Option<PathBuf>,
        /// Capture to write.
        tx_file: Option<PathBuf>,
        /// Replays (0 = forever).
        loops: u64,
    },
}

/// A checked port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Name.
    pub name: String,
    /// Backend.
    pub kind: PortKind,
    /// RX queues.
    pub rxq: u16,
    /// TX queues.
    pub txq: u16,
    /// RX ring size.
    pub rxd: usize,
    /// TX ring size.
    pub txd: usize,
    /// The port's MAC.
    pub mac: MacAddr,
    /// MAC of the neighbour on this port (destination in `mac` mode).
    pub peer_mac: MacAddr,
    /// Output port of packets received here.
    pub peer: u16,
    /// Where the port is defined (`file:line`), for errors at run time.
    pub origin: String,
}

impl PortConfig {
    /// The Linux interface the port is (AF_PACKET, AF_XDP), if any.
    pub fn kernel_iface(&self) -> Option<&str> {
        match &self.kind {
            PortKind::AfPacket { iface, .. } | PortKind::AfXdp { iface, .. } => Some(iface),
            _ => None,
        }
    }

    /// Refuses this port, opened with `driver` whose frames are at most
    /// `max_frame` bytes, when its `mtu` needs longer ones (DPDK's
    /// buffers: no jumbo frames there yet), naming both: a router on it
    /// would drop every larger frame.
    pub fn check_frames(&self, mtu: u16, driver: &str, max_frame: usize) -> anyhow::Result<()> {
        let need = usize::from(mtu) + 14;
        anyhow::ensure!(
            need <= max_frame,
            "port {} ({}): its mtu of {mtu} needs {need}-byte frames, and the {driver} driver carries at most {max_frame} bytes a frame: lower `mtu` to {} or use the afpacket or afxdp driver for jumbo frames",
            self.name,
            self.origin,
            max_frame.saturating_sub(14)
        );
        Ok(())
    }
}

/// A checked worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// CPU core it is pinned to.
    pub core: usize,
    /// Forwarding mode.
    pub mode: FwdMode,
    /// RX queues it polls: (port index, queue).
    pub rx: Vec<(u16, u16)>,
    /// TX queue it owns on each port it transmits on: (port index, queue).
    pub tx: Vec<(u16, u16)>,
    /// Poll-mode policy.
    pub poll: Policy,
    /// `txonly`/`flowgen`: what it generates on each TX port (MACs from
    /// the port: its own as source, its `peer_mac` as destination).
    pub gen: Option<pmd::softnic::GenConfig>,
    /// Check what it receives for the tester's signatures (latency, loss,
    /// reordering, duplicates): `txonly`, `flowgen`, and `rxonly` with
    /// `measure = true`.
    pub measure: bool,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from.
    pub source: String,
    /// Run-wide settings.
    pub run: RunConfig,
    /// Core for the softnic generator thread (unpinned if `None`).
    pub generator_core: Option<usize>,
    /// Ports, index = port id.
    pub ports: Vec<PortConfig>,
    /// Workers.
    pub workers: Vec<WorkerConfig>,
    /// Router settings (used by `l3fwd` workers).
    pub router: RouterSetup,
    /// Firewall, conntrack and NAT (the gateway stage of `l3fwd` workers).
    pub gateway: GatewaySetup,
    /// Extra EAL arguments (`[dpdk] eal_args`).
    pub eal_args: Vec<String>,
    /// The mbuf pool's size (`[dpdk] mbufs`; `None`: sized from the
    /// rings and workers).
    pub mbufs: Option<u32>,
    /// Where the Prometheus endpoint listens (`[management] metrics`; off
    /// when `None`).
    pub metrics: Option<std::net::SocketAddr>,
    /// The control socket's path (`[management] socket`; off when `None`).
    pub control_socket: Option<std::path::PathBuf>,
    /// The Linux control plane (`[control_plane]`; off when `None`).
    pub control_plane: Option<ControlPlane>,
    /// Where the flow table is kept across restarts (`[ha] state_file`;
    /// not kept when `None`).
    pub state_file: Option<std::path::PathBuf>,
    /// State sync with an HA peer (`[ha] listen`, `peer`, `key_file`; off
    /// when `None`).
    pub sync: Option<SyncConfig>,
    /// Flow records to IPFIX collectors (`[export]`; off when `None`).
    pub export: Option<super::ExportConfig>,
    /// Whom it becomes once started (`[service] user`, `group`; stays
    /// who it was started as when `None`).
    pub run_as: Option<RunAs>,
    /// TAP mirrors (`[control_plane] tap`): (router interface: a port or
    /// a VLAN sub-interface, TAP name), one per interface with addresses;
    /// empty when off.
    pub taps: Vec<(u16, String)>,
    /// Punt rules (`[[control_plane.punt]]`): what of the traffic for the
    /// router the mirrors take; empty: all of it.
    pub punt_rules: Vec<pipeline::router::PuntRule>,
    /// The kernel's connections through the mirrors (for the punt rules'
    /// `state`): made with the config when it has mirrors, kept across
    /// reloads (the mirror thread writes the one it started with).
    pub kernel_flows: Option<std::sync::Arc<pipeline::router::kernel_flows::KernelFlows>>,
    /// The text it was parsed from, and where its relative paths start
    /// (`sluice ctl route add` validates its change against them).
    pub text: std::sync::Arc<str>,
    /// See `text`.
    pub base: Option<std::path::PathBuf>,
    /// Settings that are legal but probably not what was meant.
    pub warnings: Vec<ConfigError>,
}

impl Config {
    /// Workers in `l3fwd` mode: the ones that run the router, and the
    /// gateway when it is configured (the NAT port range is split among
    /// them).
    pub fn l3fwd_workers(&self) -> u16 {
        self.workers
            .iter()
            .filter(|w| w.mode == FwdMode::L3fwd)
            .count() as u16
    }

    /// Buffers the workers make packets in (held packets, the kernel's
    /// frames, a tester's traffic): none when no worker routes or
    /// generates; more for a generator, whose packets wait in TX rings.
    pub fn inject_buffers(&self) -> usize {
        if self.workers.iter().any(|w| w.gen.is_some()) {
            16384
        } else if self.l3fwd_workers() > 0 {
            1024
        } else {
            0
        }
    }
}

/// The slowest generator rate a config or `sluice ctl gen` takes, in
/// packets per second (one packet in 1,000 s); slower rates are nonsense
/// whose gaps overflow the clock arithmetic.
pub const MIN_RATE_PPS: f64 = 0.001;

/// The fastest: 10^9 packets per second.
pub const MAX_RATE_PPS: f64 = 1e9;

/// The longest timeout a config takes (conntrack's, a neighbour's): 30
/// days (Linux's longest default, TCP established, is 5 days); longer ones
/// would overflow the nanosecond clocks they are kept in.
pub const MAX_TIMEOUT_S: u64 = 30 * 86_400;

/// The longest run: 10^9 s (about 31 years); longer would overflow the
/// clock arithmetic.
pub const MAX_DURATION_S: f64 = 1e9;

/// A stats period in seconds, as `run.stats_period` and `--stats-period`
/// take it.
pub fn stats_period(s: f64) -> Result<Duration, String> {
    if !(0.01..=3600.0).contains(&s) {
        return Err(format!("must be between 0.01 and 3600 seconds; got {s}"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Packets per burst, as `run.burst` and `--burst` take it.
pub fn burst(n: usize) -> Result<usize, String> {
    if !(1..=pmd::MAX_BURST).contains(&n) {
        return Err(format!("must be 1..={}; got {n}", pmd::MAX_BURST));
    }
    Ok(n)
}

/// A run length in seconds (0: until stopped), as `run.duration` and
/// `--duration` take it.
pub fn duration(s: f64) -> Result<Option<Duration>, String> {
    if !(s.is_finite() && (0.0..=MAX_DURATION_S).contains(&s)) {
        return Err(format!(
            "must be seconds from 0 to {MAX_DURATION_S:e} (0 runs until stopped); got {s}"
        ));
    }
    Ok(Some(Duration::from_secs_f64(s)).filter(|d| !d.is_zero()))
}

/// `[control_plane]`: routes mirrored from a kernel routing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlane {
    /// The kernel routing table mirrored (254 is `main`).
    pub table: u32,
    /// The kernel interface standing for each router interface (a port or
    /// a VLAN sub-interface): (interface, name).
    pub interfaces: Vec<(u16, String)>,
    /// The netlink socket's receive buffer (bytes).
    pub rcvbuf: usize,
}

/// A route: prefix and next hops (several: equal-cost multipath, one
/// `[[route]]` table per path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Where it leads (at least one; a flow takes one of them).
    pub paths: Vec<NextHop>,
    /// Where it came from.
    pub source: RouteSource,
}

/// Where a route in the RIB ([`crate::rib`]) came from. The order is the
/// precedence: of two sources holding routes to one prefix, the one
/// listed first is in the FIB (`Kernel` before `Ctl`: a kernel route
/// holds its prefix over every other, as the kernel forwards on it).
/// Two of them never meet on one prefix: a connected prefix refuses a
/// static route (file or edit), and an edit to a prefix replaces the
/// file's route to it until the next reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteSource {
    /// The kernel's table, mirrored through netlink (`[control_plane]
    /// netlink`: BIRD, FRR, `ip route`).
    Kernel,
    /// `sluice ctl route add|replace` (lasts until the next reload).
    Ctl,
    /// A `[[route]]` table of the config file.
    Config,
    /// An interface's own subnet (its `ipv4`/`ipv6` addresses).
    Connected,
    /// The `[router] route_file` (spread over its next hops), under
    /// every other: a static route to one of its prefixes holds it.
    RouteFile,
}

impl RouteSource {
    /// How `sluice ctl show routes` names it.
    pub fn name(self) -> &'static str {
        match self {
            RouteSource::Kernel => "kernel",
            RouteSource::Ctl => "ctl",
            RouteSource::Config => "config",
            RouteSource::Connected => "connected",
            RouteSource::RouteFile => "route-file",
        }
    }

    /// Whether a route from `self` holds a prefix a route from `other`
    /// also reaches.
    pub fn wins_over(self, other: RouteSource) -> bool {
        self < other
    }
}

/// Why a path cannot join the route to its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefused {
    /// The route has that path already.
    Twice,
    /// The route has the most paths the FIB takes.
    TooMany,
    /// The route or the path has no gateway: a connected (or `port`-only)
    /// route has one path.
    Connected,
}

impl PathRefused {
    /// What the config check says of it, for a path to `a/l`.
    pub fn msg(self, a: IpAddr, l: u8) -> String {
        match self {
            PathRefused::Twice => format!("{a}/{l} is listed twice with the same next hop"),
            PathRefused::TooMany => format!(
                "{a}/{l} has more than {} equal-cost paths",
                pipeline::fib::MAX_PATHS
            ),
            PathRefused::Connected => {
                format!("{a}/{l} is already routed: a connected route cannot have other paths")
            }
        }
    }
}

impl Route {
    /// Adds `hop` as one more equal-cost path, as another `[[route]]`
    /// table for the prefix does; why it cannot.
    pub fn add_path(&mut self, hop: NextHop) -> Result<(), PathRefused> {
        if self.paths.contains(&hop) {
            Err(PathRefused::Twice)
        } else if self.paths.len() >= pipeline::fib::MAX_PATHS {
            Err(PathRefused::TooMany)
        } else if hop.via.is_none() || self.paths.iter().any(|h| h.via.is_none()) {
            Err(PathRefused::Connected)
        } else {
            self.paths.push(hop);
            Ok(())
        }
    }
}

/// Checked router settings.
#[derive(Debug, Clone, Default)]
pub struct RouterSetup {
    /// Interfaces: index = port, then the VLAN sub-interfaces.
    pub interfaces: Vec<Interface>,
    /// The interfaces' names (ports', then sub-interfaces').
    pub names: Vec<String>,
    /// Connected and static routes.
    pub routes: Vec<Route>,
    /// Static neighbours: (port, address, MAC).
    pub neighbors: Vec<(u16, IpAddr, MacAddr)>,
    /// Route file and the next hops its prefixes are spread over.
    pub route_file: Option<(PathBuf, Vec<NextHop>, Vec<NextHop>)>,
    /// The route file's prefixes, read and checked at validation (so
    /// `sluice check` and `run` see the same file, once).
    pub file_routes: std::sync::Arc<[(IpAddr, u8)]>,
    /// ICMP errors and ARP requests per second per core.
    pub icmp_rate: u32,
    /// Learned neighbours older than this are resolved again.
    pub neighbor_timeout: std::time::Duration,
    /// Router Advertisements by port (`[port.ra]`).
    pub adverts: Vec<Option<pipeline::router::Advert>>,
}

impl RouterSetup {
    /// The name of interface `i` (a port's, for a port's index).
    pub fn iface_name(&self, i: u16) -> Option<&str> {
        self.names.get(usize::from(i)).map(String::as_str)
    }

    /// Interface names to their indexes (what an edit's table names).
    pub(super) fn name_map(&self) -> BTreeMap<&str, u16> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i as u16))
            .collect()
    }

    /// True when some interface has an address (the router can run).
    pub fn has_addresses(&self) -> bool {
        self.interfaces
            .iter()
            .any(|i| !i.ipv4.is_empty() || !i.ipv6.is_empty())
    }

    /// Whether `a` is one of the router's own addresses.
    pub(super) fn is_local(&self, a: IpAddr) -> bool {
        self.interfaces.iter().any(|i| match a {
            IpAddr::V4(a) => i.ipv4.iter().any(|(x, _)| *x == a),
            IpAddr::V6(a) => i.ipv6.iter().any(|(x, _)| *x == a),
        })
    }

    /// The port whose connected subnet holds `a`.
    pub(super) fn port_of(&self, a: IpAddr) -> Option<u16> {
        self.interfaces
            .iter()
            .position(|i| match a {
                IpAddr::V4(a) => i.ipv4.iter().any(|(x, l)| in_prefix4(*x, *l, a)),
                IpAddr::V6(a) => i.ipv6.iter().any(|(x, l)| in_prefix6(*x, *l, a)),
            })
            .map(|p| p as u16)
    }
}

/// Checked firewall, conntrack and NAT settings.
#[derive(Debug, Clone)]
pub struct GatewaySetup {
    /// Whether the config asks for the gateway stage at all.
    pub enabled: bool,
    /// Rules (TOML rules, then the ClassBench file's).
    pub rules: Vec<FwRule>,
    /// The ClassBench rule file and which of `rules` came from it.
    pub rule_file: Option<(PathBuf, std::ops::Range<usize>)>,
    /// Default policy.
    pub default: Action,
    /// NAT rules.
    pub nat: NatConfig,
    /// Flows per worker.
    pub ct_capacity: usize,
    /// Whether TCP flows' windows are tracked (`[conntrack] tcp_window`).
    pub ct_tcp_window: bool,
    /// Conntrack timeouts.
    pub timeouts: Timeouts,
    /// Per interface (ports, then VLAN sub-interfaces): the most a TCP
    /// SYN's MSS may say entering or leaving through it, over IPv4 and
    /// IPv6 (`clamp_mss`; `u16::MAX`: not clamped; empty: none clamps).
    pub mss_limits: Vec<[u16; 2]>,
    /// `[[firewall.clamp_mss]]`: clamping rules, first match wins.
    pub mss_rules: Vec<pipeline::gateway::mss::MssRule>,
}

impl Default for GatewaySetup {
    fn default() -> Self {
        GatewaySetup {
            enabled: false,
            rules: Vec::new(),
            rule_file: None,
            default: Action::Accept,
            nat: NatConfig::default(),
            ct_capacity: 1 << 18,
            ct_tcp_window: true,
            timeouts: Timeouts::default(),
            mss_limits: Vec::new(),
            mss_rules: Vec::new(),
        }
    }
}

pub(super) fn in_prefix4(net: Ipv4Addr, len: u8, a: Ipv4Addr) -> bool {
    pipeline::prefix::in4(u32::from(a), (u32::from(net), len))
}

pub(super) fn in_prefix6(net: Ipv6Addr, len: u8, a: Ipv6Addr) -> bool {
    pipeline::prefix::in6(u128::from(a), (u128::from(net), len))
}

/// `[ha]` state sync: where this box listens, where its peer is, and the
/// key both hold.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncConfig {
    /// This box's sync address.
    pub listen: std::net::SocketAddr,
    /// The peer's.
    pub peer: std::net::SocketAddr,
    /// The shared key (HMAC-SHA256).
    pub key: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for SyncConfig {
    /// Without the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncConfig")
            .field("listen", &self.listen)
            .field("peer", &self.peer)
            .field("key", &format_args!("({} bytes)", self.key.len()))
            .finish()
    }
}

/// `[service] user` and `group`: the user and group the appliance becomes
/// once its ports are open (see [`crate::privilege`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The user's name, as written.
    pub user: String,
    /// The group's name, if one was written (else the user's own).
    pub group: Option<String>,
    /// Their ids, looked up when the host is checked (0 when it is not).
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
}
