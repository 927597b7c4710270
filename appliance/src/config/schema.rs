//! The raw schema: serde structs with `deny_unknown_fields` and typed
//! fields (MACs, prefixes, port ranges, queue references), as the TOML
//! file spells them; [`super::validate`] turns them into the checked types.

use super::*;
use std::net::{IpAddr, Ipv4Addr};

/// A value parsed from a string with `FromStr` (MACs, CIDRs, ranges).
#[derive(Debug, Clone, Copy)]
pub struct Str<T>(pub T);

impl<'de, T: std::str::FromStr> Deserialize<'de> for Str<T>
where
    T::Err: fmt::Display,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Str).map_err(serde::de::Error::custom)
    }
}

/// An IPv4 or IPv6 prefix (`198.18.0.0/24`), or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix<A> {
    /// Network address.
    pub addr: A,
    /// Prefix length.
    pub len: u8,
}

macro_rules! prefix_fromstr {
    ($a:ty, $net:ty, $bits:expr, $int:ty) => {
        impl std::str::FromStr for Prefix<$a> {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let Some((a, _)) = s.split_once('/') else {
                    let addr: $a = s
                        .parse()
                        .map_err(|_| format!("`{s}` is not an address or prefix"))?;
                    return Ok(Prefix { addr, len: $bits });
                };
                a.parse::<$a>()
                    .map_err(|_| format!("`{s}` is not an address or prefix"))?;
                let net: $net = s.parse().map_err(|_| {
                    format!("`{s}`: prefix length must be 0..={} (plain digits)", $bits)
                })?;
                Ok(Prefix {
                    addr: net.addr(),
                    len: net.prefix_len(),
                })
            }
        }
        impl std::str::FromStr for AddrSpan<$a> {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let Some((a, b)) = s.split_once('-') else {
                    return Ok(AddrSpan(s.parse::<Prefix<$a>>()?.span()));
                };
                let bad = || format!("`{s}` is not a prefix, an address or a range first-last");
                let first: $a = a.trim().parse().map_err(|_| bad())?;
                let last: $a = b.trim().parse().map_err(|_| bad())?;
                if first > last {
                    return Err(format!(
                        "`{s}`: the range's first address is after its last"
                    ));
                }
                Ok(AddrSpan(Span { first, last }))
            }
        }
        impl Prefix<$a> {
            /// First and last address (whole prefix; for IPv4 prefixes
            /// shorter than /31 the network and broadcast addresses are
            /// left out).
            pub fn span(&self) -> Span<$a> {
                let host_bits = $bits - u32::from(self.len);
                let mask: $int = if host_bits >= $bits {
                    0
                } else {
                    !0 << host_bits
                };
                let first = <$int>::from(self.addr) & mask;
                let last = first | !mask;
                let (f, l) = if $bits == 32 && host_bits >= 2 {
                    (first + 1, last - 1)
                } else {
                    (first, last)
                };
                Span {
                    first: <$a>::from(f),
                    last: <$a>::from(l),
                }
            }
        }
    };
}
prefix_fromstr!(Ipv4Addr, pipeline::prefix::Ipv4Net, 32, u32);
prefix_fromstr!(Ipv6Addr, pipeline::prefix::Ipv6Net, 128, u128);

/// The addresses a generator's flows take: a prefix (its hosts, as
/// [`Prefix::span`] gives them), one address, or a range
/// `10.253.0.0-10.253.0.255` (every address in it, ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrSpan<A>(pub Span<A>);

/// A port range `1024-65535` or a single port `53`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange(pub u16, pub u16);

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a port or port range such as 1024-65535");
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a: u16 = a.trim().parse().map_err(|_| bad())?;
        let b: u16 = b.trim().parse().map_err(|_| bad())?;
        if a > b {
            return Err(bad());
        }
        Ok(PortRange(a, b))
    }
}

/// An RX queue reference `port:queue` (`p0:1`), or `port` for queue 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRef {
    /// Port name.
    pub port: String,
    /// Queue index.
    pub queue: u16,
}

impl std::str::FromStr for QueueRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (p, q) = s.rsplit_once(':').unwrap_or((s, "0"));
        let queue = q
            .parse()
            .map_err(|_| format!("`{s}`: expected port:queue such as p0:1"))?;
        Ok(QueueRef {
            port: p.to_string(),
            queue,
        })
    }
}

/// Offered load: packets per second, or `"max"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected packets per second (a number) or \"max\""
)]
pub(super) enum RawRate {
    Pps(f64),
    Word(String),
}

/// A generator's frame-size mix: a list of lengths, or `"imix"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSizes {
    List(Vec<usize>),
    Word(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) run: RawRun,
    #[serde(default)]
    pub(super) generator: RawGenerator,
    #[serde(default)]
    pub(super) port: Vec<RawPort>,
    #[serde(default)]
    pub(super) worker: Vec<RawWorker>,
    #[serde(default)]
    pub(super) router: RawRouter,
    #[serde(default)]
    pub(super) route: Vec<RawRoute>,
    #[serde(default)]
    pub(super) neighbor: Vec<RawNeighbor>,
    #[serde(default)]
    pub(super) vlan: Vec<RawVlan>,
    #[serde(default)]
    pub(super) dpdk: RawDpdk,
    #[serde(default)]
    pub(super) management: RawManagement,
    #[serde(default)]
    pub(super) ha: RawHa,
    #[serde(default)]
    pub(super) service: RawService,
    pub(super) control_plane: Option<Spanned<RawControlPlane>>,
    pub(super) firewall: Option<RawFirewall>,
    pub(super) conntrack: Option<RawConntrack>,
    pub(super) nat: Option<RawNat>,
    pub(super) export: Option<super::export::RawExport>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    #[serde(default = "d_duration")]
    pub(super) duration: Spanned<f64>,
    #[serde(default = "d_period")]
    pub(super) stats_period: Spanned<f64>,
    #[serde(default = "d_burst")]
    pub(super) burst: Spanned<usize>,
    #[serde(default = "d_drain")]
    pub(super) drain_us: Spanned<u64>,
}

impl Default for RawRun {
    fn default() -> Self {
        RawRun {
            duration: d_duration(),
            stats_period: d_period(),
            burst: d_burst(),
            drain_us: d_drain(),
        }
    }
}

pub(super) fn d_duration() -> Spanned<f64> {
    Spanned::new(0..0, 10.0)
}
pub(super) fn d_period() -> Spanned<f64> {
    Spanned::new(0..0, 1.0)
}
pub(super) fn d_burst() -> Spanned<usize> {
    Spanned::new(0..0, 32)
}
pub(super) fn d_drain() -> Spanned<u64> {
    Spanned::new(0..0, 100)
}

/// `[management]`: how the running appliance is observed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManagement {
    /// Prometheus endpoint: `"ADDR:PORT"`, or a port number (on loopback).
    pub(super) metrics: Option<Spanned<Endpoint>>,
    /// Control socket path (`sluice ctl`).
    pub(super) socket: Option<Spanned<String>>,
}

/// `[ha]`: what outlives the process.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHa {
    /// Where the flow table is written on a clean stop and read back at
    /// start.
    pub(super) state_file: Option<Spanned<String>>,
    /// This box's state-sync address (UDP `ADDR:PORT`).
    pub(super) listen: Option<Spanned<String>>,
    /// The peer's state-sync address.
    pub(super) peer: Option<Spanned<String>>,
    /// The shared key authenticating sync messages.
    pub(super) key_file: Option<Spanned<String>>,
}

/// `[service]`: how it runs as a system service.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    /// The user it becomes once its ports are open (started as root).
    pub(super) user: Option<Spanned<String>>,
    /// That user's group (default: the user's own).
    pub(super) group: Option<Spanned<String>>,
}

/// `[control_plane]`: the Linux control plane.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawControlPlane {
    /// Mirror a kernel routing table's routes into the FIB.
    pub(super) netlink: Option<Spanned<bool>>,
    /// The table (254, `main`, by default).
    pub(super) table: Option<Spanned<i64>>,
    /// Port or VLAN name → kernel interface name.
    #[serde(default)]
    pub(super) interfaces: std::collections::BTreeMap<Spanned<String>, Spanned<String>>,
    /// Netlink receive buffer, bytes.
    pub(super) rcvbuf: Option<Spanned<i64>>,
    /// A TAP mirror per routed port: what is for the router goes to the
    /// kernel, what the kernel sends there leaves through the port.
    pub(super) tap: Option<Spanned<bool>>,
    /// Port or VLAN name → TAP name (default `sl-NAME`).
    #[serde(default)]
    pub(super) tap_names: std::collections::BTreeMap<Spanned<String>, Spanned<String>>,
    /// Punt rules: what of the traffic for the router goes to the
    /// kernel (all of it without rules).
    #[serde(default)]
    pub(super) punt: Vec<RawPuntRule>,
}

/// A listening address as a config gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum Endpoint {
    /// A port on 127.0.0.1.
    Port(i64),
    /// `ADDR:PORT`.
    Addr(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGenerator {
    pub(super) core: Option<Spanned<usize>>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum Driver {
    Softnic,
    Null,
    Pcap,
    Dpdk,
    Afpacket,
    Afxdp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAfXdp {
    /// Interface name (queue 0).
    pub(super) iface: Spanned<String>,
    /// The port's share of the shared UMEM, in 2 KiB frames.
    pub(super) frames: Option<Spanned<u32>>,
    /// Ask for zero-copy binding.
    #[serde(default)]
    pub(super) zerocopy: bool,
    /// `native` (driver) or `skb` (generic) XDP.
    pub(super) mode: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAfPacket {
    /// Interface name.
    pub(super) iface: Spanned<String>,
    /// Ring blocks (64 KiB each) per RX queue.
    pub(super) blocks: Option<Spanned<u32>>,
    /// The RX ring's layout: "v2" or "v3".
    pub(super) ring: Option<RawRing>,
    /// Bypass the qdisc on TX.
    #[serde(default = "yes")]
    pub(super) qdisc_bypass: bool,
}

pub(super) fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDpdkPort {
    /// A vdev string (`net_null0`, `net_af_packet0,iface=veth0`) or a PCI
    /// address.
    pub(super) device: Spanned<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDpdk {
    #[serde(default)]
    pub(super) eal_args: Vec<String>,
    /// The mbuf pool's size (default: every ring's descriptors plus 4096
    /// per worker).
    pub(super) mbufs: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPort {
    pub(super) name: Spanned<String>,
    pub(super) driver: Spanned<Driver>,
    #[serde(default = "one")]
    pub(super) rxq: Spanned<u16>,
    #[serde(default = "one")]
    pub(super) txq: Spanned<u16>,
    #[serde(default = "d_ring")]
    pub(super) rxd: Spanned<usize>,
    #[serde(default = "d_ring")]
    pub(super) txd: Spanned<usize>,
    pub(super) mac: Option<Str<MacAddr>>,
    pub(super) peer_mac: Option<Str<MacAddr>>,
    pub(super) peer: Option<Spanned<String>>,
    pub(super) softnic: Option<Spanned<RawSoftnic>>,
    pub(super) afpacket: Option<Spanned<RawAfPacket>>,
    pub(super) afxdp: Option<Spanned<RawAfXdp>>,
    pub(super) null: Option<Spanned<RawNull>>,
    pub(super) pcap: Option<Spanned<RawPcap>>,
    pub(super) dpdk: Option<Spanned<RawDpdkPort>>,
    #[serde(default = "empty_list")]
    pub(super) ipv4: Spanned<Vec<Str<Prefix<Ipv4Addr>>>>,
    #[serde(default)]
    pub(super) ipv6: Vec<Str<Prefix<Ipv6Addr>>>,
    pub(super) mtu: Option<Spanned<u16>>,
    pub(super) clamp_mss: Option<Spanned<RawClamp>>,
    pub(super) ra: Option<Spanned<RawRa>>,
}

/// A port's `[port.ra]`: the Router Advertisements it sends (radvd's
/// settings, RFC 4861 6.2.1's names in the comments).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRa {
    /// MaxRtrAdvInterval (s).
    pub(super) interval_s: Option<Spanned<u32>>,
    /// MinRtrAdvInterval (s).
    pub(super) min_interval_s: Option<Spanned<u32>>,
    /// AdvDefaultLifetime (s).
    pub(super) lifetime_s: Option<Spanned<u32>>,
    /// AdvCurHopLimit.
    pub(super) hop_limit: Option<Spanned<u8>>,
    /// AdvManagedFlag, AdvOtherConfigFlag.
    pub(super) managed: Option<Spanned<bool>>,
    pub(super) other: Option<Spanned<bool>>,
    /// Whether the MTU option carries the port's `mtu`.
    pub(super) mtu: Option<Spanned<bool>>,
    /// AdvPrefixList (default: the port's `ipv6` subnets).
    pub(super) prefixes: Option<Spanned<Vec<Str<Prefix<Ipv6Addr>>>>>,
    /// AdvValidLifetime, AdvPreferredLifetime (s).
    pub(super) valid_lifetime_s: Option<Spanned<u32>>,
    pub(super) preferred_lifetime_s: Option<Spanned<u32>>,
    /// RDNSS and DNSSL (RFC 8106).
    pub(super) rdnss: Option<Spanned<Vec<Str<Ipv6Addr>>>>,
    pub(super) dnssl: Option<Spanned<Vec<String>>>,
    /// PREF64 (RFC 8781): the `[[nat.nat64]]` prefixes.
    pub(super) pref64: Option<Spanned<bool>>,
}

/// A port's `clamp_mss`: `"pmtu"` or a number of bytes.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected \"pmtu\" or the most bytes a TCP SYN's MSS may say (a number)"
)]
pub(super) enum RawClamp {
    Bytes(i64),
    Word(String),
}

pub(super) fn empty_list<T>() -> Spanned<Vec<T>> {
    Spanned::new(0..0, Vec::new())
}

pub(super) fn one() -> Spanned<u16> {
    Spanned::new(0..0, 1)
}
pub(super) fn d_ring() -> Spanned<usize> {
    Spanned::new(0..0, 1024)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSoftnic {
    pub(super) rate: Spanned<RawRate>,
    pub(super) size: Option<Spanned<usize>>,
    pub(super) sizes: Option<Spanned<RawSizes>>,
    pub(super) flows: Option<Spanned<u32>>,
    pub(super) tcp_share: Option<Spanned<f64>>,
    pub(super) ipv6_share: Option<Spanned<f64>>,
    pub(super) pattern: Option<RawPattern>,
    pub(super) walk: Option<RawWalk>,
    pub(super) src_ip: Option<Str<AddrSpan<Ipv4Addr>>>,
    pub(super) dst_ip: Option<Str<AddrSpan<Ipv4Addr>>>,
    pub(super) src_ip6: Option<Str<AddrSpan<Ipv6Addr>>>,
    pub(super) dst_ip6: Option<Str<AddrSpan<Ipv6Addr>>>,
    pub(super) src_port: Option<Str<PortRange>>,
    pub(super) dst_port: Option<Str<PortRange>>,
    pub(super) seed: Option<u64>,
    pub(super) signature: Option<bool>,
    pub(super) rx_usecs: Option<u32>,
    pub(super) rx_frames: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawPattern {
    Constant,
    Poisson,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawRing {
    V2,
    V3,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawWalk {
    Random,
    Sequential,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNull {
    #[serde(default = "d_size")]
    pub(super) size: Spanned<usize>,
}

pub(super) fn one_u64() -> u64 {
    1
}

pub(super) fn d_size() -> Spanned<usize> {
    Spanned::new(0..0, 64)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPcap {
    pub(super) rx_file: Option<Spanned<String>>,
    pub(super) tx_file: Option<Spanned<String>>,
    #[serde(default = "one_u64")]
    pub(super) loops: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorker {
    pub(super) core: Spanned<usize>,
    pub(super) mode: Spanned<FwdMode>,
    pub(super) rx: Spanned<Vec<Spanned<Str<QueueRef>>>>,
    pub(super) poll: Option<Spanned<RawPoll>>,
    /// `txonly`/`flowgen`: the generator (the softnic's keys but the
    /// coalescing ones).
    pub(super) gen: Option<Spanned<RawSoftnic>>,
    /// `rxonly`: check the tester's signatures.
    pub(super) measure: Option<Spanned<bool>>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum PollKind {
    Busy,
    Interrupt,
    Adaptive,
    Timer,
    Auto,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPoll {
    pub(super) mode: Spanned<PollKind>,
    pub(super) budget: Option<Spanned<usize>>,
    pub(super) fallback_sleep_us: Option<Spanned<u64>>,
    pub(super) busy_poll_us: Option<Spanned<u64>>,
    pub(super) spin_polls: Option<Spanned<u32>>,
    pub(super) pause_polls: Option<Spanned<u32>>,
    pub(super) pause_spins: Option<Spanned<u32>>,
    pub(super) sleep_polls: Option<Spanned<u32>>,
    pub(super) sleep_min_us: Option<Spanned<u64>>,
    pub(super) sleep_max_us: Option<Spanned<u64>>,
    pub(super) predict: Option<Spanned<f64>>,
    pub(super) hz: Option<Spanned<u32>>,
    pub(super) burst: Option<Spanned<u32>>,
    pub(super) each_burst: Option<Spanned<u32>>,
    pub(super) burst_max: Option<Spanned<u32>>,
    pub(super) user_frac: Option<Spanned<u32>>,
    pub(super) idle_poll: Option<Spanned<bool>>,
    pub(super) up_pps: Option<Spanned<f64>>,
    pub(super) down_pps: Option<Spanned<f64>>,
    pub(super) window_ms: Option<Spanned<u64>>,
    pub(super) hold: Option<Spanned<u32>>,
}

/// One name or a list of names.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a name or a list of names such as [\"a\", \"b\"]"
)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn names(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// A port number or a range string.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a port number or a range such as \"1024-65535\""
)]
pub(super) enum PortSpec {
    Num(i64),
    Text(String),
}

/// A protocol number or name.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a name (such as \"tcp\" or \"echo-request\") or a number"
)]
pub(super) enum ProtoSpec {
    Num(i64),
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFirewall {
    /// Policy for packets no rule matches: accept, drop or reject.
    pub(super) default: Option<Spanned<String>>,
    /// Zones: name → port names.
    #[serde(default)]
    pub(super) zones: BTreeMap<String, Spanned<Vec<String>>>,
    /// A ClassBench rule file appended after the rules.
    pub(super) classbench_file: Option<Spanned<String>>,
    /// Action of the ClassBench rules.
    pub(super) classbench_action: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) rule: Vec<Spanned<RawRule>>,
    #[serde(default)]
    pub(super) clamp_mss: Vec<RawMssRule>,
}

/// `[[firewall.clamp_mss]]`: a clamping rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMssRule {
    #[serde(rename = "in")]
    pub(super) in_: Option<Spanned<OneOrMany>>,
    pub(super) out: Option<Spanned<OneOrMany>>,
    pub(super) src: Option<Spanned<String>>,
    pub(super) dst: Option<Spanned<String>>,
    /// "pmtu" or a number of bytes.
    pub(super) mss: Spanned<RawClamp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) action: Spanned<String>,
    pub(super) reject_with: Option<Spanned<String>>,
    pub(super) src: Option<Spanned<String>>,
    pub(super) dst: Option<Spanned<String>>,
    pub(super) proto: Option<Spanned<ProtoSpec>>,
    pub(super) sport: Option<Spanned<PortSpec>>,
    pub(super) dport: Option<Spanned<PortSpec>>,
    pub(super) tcp_flags: Option<Spanned<String>>,
    /// ICMP/ICMPv6 type: an nftables name (`echo-request`) or a number.
    pub(super) icmp_type: Option<Spanned<ProtoSpec>>,
    /// ICMP/ICMPv6 code (needs `icmp_type`).
    pub(super) icmp_code: Option<Spanned<i64>>,
    #[serde(rename = "in")]
    pub(super) in_: Option<Spanned<OneOrMany>>,
    pub(super) out: Option<Spanned<OneOrMany>>,
    pub(super) state: Option<Spanned<OneOrMany>>,
    /// nftables `ct status`: "dnat", "snat", "!dnat", "!snat" (all must
    /// hold).
    pub(super) ct_status: Option<Spanned<OneOrMany>>,
    /// nftables `ct original ip daddr`: the destination before DNAT.
    pub(super) ct_original_dst: Option<Spanned<String>>,
    /// nftables `ct original proto-dst`: the destination port before DNAT.
    pub(super) ct_original_dport: Option<Spanned<PortSpec>>,
    #[serde(default)]
    pub(super) counter: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConntrack {
    /// Flows per worker.
    pub(super) capacity: Option<Spanned<i64>>,
    pub(super) tcp_handshake_s: Option<Spanned<u64>>,
    pub(super) tcp_established_s: Option<Spanned<u64>>,
    pub(super) tcp_closing_s: Option<Spanned<u64>>,
    pub(super) tcp_closed_s: Option<Spanned<u64>>,
    pub(super) unreplied_s: Option<Spanned<u64>>,
    pub(super) replied_s: Option<Spanned<u64>>,
    /// Track TCP windows (Linux's `nf_conntrack_tcp_be_liberal = 0`).
    pub(super) tcp_window: Option<bool>,
}

pub(super) fn proto_num(p: &ProtoSpec) -> Result<u8, String> {
    match p {
        ProtoSpec::Num(n) => u8::try_from(*n).map_err(|_| format!("{n}: must be 0..=255")),
        ProtoSpec::Name(s) => match s.as_str() {
            "tcp" => Ok(6),
            "udp" => Ok(17),
            "icmp" => Ok(1),
            "icmpv6" => Ok(58),
            o => Err(format!(
                "`{o}`: expected tcp, udp, icmp, icmpv6 or a number"
            )),
        },
    }
}

pub(super) fn port_range(p: &PortSpec) -> Result<(u16, u16), String> {
    match p {
        PortSpec::Num(n) => u16::try_from(*n)
            .map(|p| (p, p))
            .map_err(|_| format!("{n}: must be 0..=65535")),
        PortSpec::Text(s) => s.parse::<super::PortRange>().map(|r| (r.0, r.1)),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat {
    /// Source ports handed out, split over the workers.
    pub(super) ports: Option<Spanned<String>>,
    /// The built-in hairpinning (on unless `false`).
    pub(super) hairpin: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) snat: Vec<RawSnat>,
    #[serde(default)]
    pub(super) dnat: Vec<RawDnat>,
    #[serde(default, rename = "static")]
    pub(super) statics: Vec<RawStatic>,
    #[serde(default)]
    pub(super) nptv6: Vec<RawNpt>,
    #[serde(default)]
    pub(super) nat64: Vec<RawNat64>,
}

/// `[[nat.nat64]]`: stateful NAT64 for IPv6-only clients.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat64 {
    /// The NAT64 prefix (`64:ff9b::/96` when not given).
    pub(super) prefix: Option<Spanned<String>>,
    /// The IPv4 interface the translated flows leave by.
    pub(super) out: Spanned<String>,
    /// "masquerade" (the default) or IPv4 pool addresses.
    pub(super) to: Option<Spanned<OneOrMany>>,
    /// RFC 7915's `lowest-ipv6-mtu` (1280 when not given).
    pub(super) lowest_ipv6_mtu: Option<Spanned<u16>>,
}

/// `[[nat.nptv6]]`: an IPv6 prefix translation on an interface.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNpt {
    pub(super) out: Spanned<String>,
    pub(super) inside: Spanned<String>,
    pub(super) outside: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSnat {
    pub(super) out: Spanned<String>,
    pub(super) src: Option<Spanned<String>>,
    /// "masquerade" or a list of addresses.
    pub(super) to: Option<Spanned<OneOrMany>>,
    /// Deterministic NAT: the outside prefix (`src` the inside one).
    pub(super) deterministic: Option<Spanned<String>>,
    /// Deterministic NAT: ports per inside host; with a pool (`to`),
    /// ports per block (port-block allocation).
    pub(super) block: Option<Spanned<i64>>,
    /// Port-block allocation: blocks an inside host may hold at once.
    pub(super) max_blocks: Option<Spanned<i64>>,
    /// "dnat" or "!dnat".
    pub(super) ct_status: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDnat {
    #[serde(rename = "in")]
    pub(super) in_: Option<Spanned<String>>,
    pub(super) proto: Option<Spanned<ProtoSpec>>,
    pub(super) dst: Spanned<String>,
    pub(super) dport: Option<Spanned<i64>>,
    /// `address` or `address:port`.
    pub(super) to: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStatic {
    pub(super) inside: Spanned<Ipv4Addr>,
    pub(super) outside: Spanned<Ipv4Addr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouter {
    /// Prefixes, one per line (plain or .gz); next hops from `route_file_via`.
    pub(super) route_file: Option<Spanned<String>>,
    /// Gateways the route file's prefixes are spread over (round-robin per
    /// family).
    #[serde(default)]
    pub(super) route_file_via: Vec<Spanned<IpAddr>>,
    /// ICMP errors and ARP requests per second per core.
    pub(super) icmp_rate: Option<Spanned<u32>>,
    /// Seconds before a learned neighbour is resolved again.
    pub(super) neighbor_timeout_s: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) prefix: Spanned<String>,
    pub(super) via: Option<Spanned<IpAddr>>,
    pub(super) port: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNeighbor {
    pub(super) ip: Spanned<IpAddr>,
    pub(super) mac: Str<MacAddr>,
    pub(super) port: Spanned<String>,
}

/// A VLAN sub-interface (`[[vlan]]`): 802.1Q, or QinQ with `outer`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVlan {
    pub(super) port: Spanned<String>,
    pub(super) id: Spanned<u16>,
    pub(super) outer: Option<Spanned<u16>>,
    pub(super) name: Option<Spanned<String>>,
    #[serde(default = "super::schema::empty_list")]
    pub(super) ipv4: Spanned<Vec<Str<Prefix<Ipv4Addr>>>>,
    #[serde(default)]
    pub(super) ipv6: Vec<Str<Prefix<Ipv6Addr>>>,
    pub(super) mtu: Option<Spanned<u16>>,
    pub(super) ra: Option<Spanned<RawRa>>,
}

/// One `[[route]]` table on its own: what `sluice ctl route add` adds
/// (see [`super::check_added_route`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdded {
    pub(super) route: Vec<RawRoute>,
}

/// One `[[neighbor]]` table on its own: what `sluice ctl neighbor
/// add|replace` adds (see [`super::check_added_neighbor`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAddedNeighbor {
    pub(super) neighbor: Vec<RawNeighbor>,
}

/// One `[[control_plane.punt]]` rule as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPuntRule {
    /// What it does with what it matches: accept (punt), drop, reject.
    pub(super) action: Option<Spanned<String>>,
    /// How a reject is answered.
    pub(super) reject_with: Option<Spanned<String>>,
    /// Protocol: tcp, udp, icmp, icmpv6, ospf, vrrp or a number.
    pub(super) proto: Option<Spanned<ProtoSpec>>,
    /// Destination port or range (TCP, UDP, SCTP).
    pub(super) port: Option<Spanned<PortSpec>>,
    /// Source port or range (TCP, UDP, SCTP).
    pub(super) sport: Option<Spanned<PortSpec>>,
    /// Source prefixes.
    pub(super) from: Option<Spanned<OneOrMany>>,
    /// Interfaces it must come in on.
    #[serde(rename = "in")]
    pub(super) in_: Option<Spanned<OneOrMany>>,
    /// Packets per second per core.
    pub(super) rate: Option<Spanned<i64>>,
    /// Connection states (the kernel's flows): new, established, related.
    pub(super) state: Option<Spanned<OneOrMany>>,
}
