//! The TOML configuration: serde structs with `deny_unknown_fields` and typed
//! fields, then [`validate`] producing a checked [`Config`] that rejects
//! cross-field conflicts. Every error names the file, line, column and key.

mod firewall;
mod router;

pub use firewall::GatewaySetup;
pub use router::{Route, RouterSetup};

use crate::poll::{self, Policy};
use pipeline::wire::MacAddr;
use pmd::softnic::{Coalesce, GenConfig, Pattern, Rate, Span};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// The embedded default configuration (`sluice run` with no file).
pub const QUICKSTART: &str = include_str!("../../../configs/quickstart.toml");
/// Name the embedded default is reported under.
pub const QUICKSTART_NAME: &str = "<embedded>/configs/quickstart.toml";

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the whole file is at fault).
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// Dotted key path, such as `worker[1].core`.
    pub key: String,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ConfigError {
    /// `file:line:col: key `k`: message`; without the place or key when
    /// the error has none (a file that cannot be read).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.file)?;
        } else {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        }
        if !self.key.is_empty() {
            write!(f, "key `{}`: ", self.key)?;
        }
        write!(f, "{}", self.msg)
    }
}

impl std::error::Error for ConfigError {}

/// All errors found in one file (validation reports every conflict, not
/// just the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

// ---------------------------------------------------------------- raw schema

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
    ($a:ty, $bits:expr, $int:ty) => {
        impl std::str::FromStr for Prefix<$a> {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let (a, l) = s.split_once('/').unwrap_or((s, stringify!($bits)));
                let addr: $a = a
                    .parse()
                    .map_err(|_| format!("`{s}` is not an address or prefix"))?;
                let len = pipeline::lpm::prefix_len(l, $bits).ok_or_else(|| {
                    format!("`{s}`: prefix length must be 0..={} (plain digits)", $bits)
                })?;
                Ok(Prefix { addr, len })
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
prefix_fromstr!(Ipv4Addr, 32, u32);
prefix_fromstr!(Ipv6Addr, 128, u128);

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
enum RawRate {
    Pps(f64),
    Word(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    run: RawRun,
    #[serde(default)]
    generator: RawGenerator,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    worker: Vec<RawWorker>,
    #[serde(default)]
    router: router::RawRouter,
    #[serde(default)]
    route: Vec<router::RawRoute>,
    #[serde(default)]
    neighbor: Vec<router::RawNeighbor>,
    #[serde(default)]
    dpdk: RawDpdk,
    firewall: Option<firewall::RawFirewall>,
    conntrack: Option<firewall::RawConntrack>,
    nat: Option<firewall::RawNat>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    #[serde(default = "d_duration")]
    duration: Spanned<f64>,
    #[serde(default = "d_period")]
    stats_period: Spanned<f64>,
    #[serde(default = "d_burst")]
    burst: Spanned<usize>,
    #[serde(default = "d_drain")]
    drain_us: Spanned<u64>,
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

fn d_duration() -> Spanned<f64> {
    Spanned::new(0..0, 10.0)
}
fn d_period() -> Spanned<f64> {
    Spanned::new(0..0, 1.0)
}
fn d_burst() -> Spanned<usize> {
    Spanned::new(0..0, 32)
}
fn d_drain() -> Spanned<u64> {
    Spanned::new(0..0, 100)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGenerator {
    core: Option<Spanned<usize>>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Driver {
    Softnic,
    Null,
    Pcap,
    Dpdk,
    Afpacket,
    Afxdp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAfXdp {
    /// Interface name (queue 0).
    iface: Spanned<String>,
    /// The port's share of the shared UMEM, in 2 KiB frames.
    frames: Option<Spanned<u32>>,
    /// Ask for zero-copy binding.
    #[serde(default)]
    zerocopy: bool,
    /// `native` (driver) or `skb` (generic) XDP.
    mode: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAfPacket {
    /// Interface name.
    iface: Spanned<String>,
    /// Ring blocks (64 KiB each) per RX queue.
    blocks: Option<Spanned<u32>>,
    /// Bypass the qdisc on TX.
    #[serde(default = "yes")]
    qdisc_bypass: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDpdkPort {
    /// A vdev string (`net_null0`, `net_af_packet0,iface=veth0`) or a PCI
    /// address.
    device: Spanned<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDpdk {
    #[serde(default)]
    eal_args: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: Spanned<String>,
    driver: Spanned<Driver>,
    #[serde(default = "one")]
    rxq: Spanned<u16>,
    #[serde(default = "one")]
    txq: Spanned<u16>,
    #[serde(default = "d_ring")]
    rxd: Spanned<usize>,
    #[serde(default = "d_ring")]
    txd: Spanned<usize>,
    mac: Option<Str<MacAddr>>,
    peer_mac: Option<Str<MacAddr>>,
    peer: Option<Spanned<String>>,
    softnic: Option<Spanned<RawSoftnic>>,
    afpacket: Option<Spanned<RawAfPacket>>,
    afxdp: Option<Spanned<RawAfXdp>>,
    null: Option<Spanned<RawNull>>,
    pcap: Option<Spanned<RawPcap>>,
    dpdk: Option<Spanned<RawDpdkPort>>,
    #[serde(default = "empty_list")]
    ipv4: Spanned<Vec<Str<Prefix<Ipv4Addr>>>>,
    #[serde(default)]
    ipv6: Vec<Str<Prefix<Ipv6Addr>>>,
    mtu: Option<Spanned<u16>>,
}

fn empty_list<T>() -> Spanned<Vec<T>> {
    Spanned::new(0..0, Vec::new())
}

fn one() -> Spanned<u16> {
    Spanned::new(0..0, 1)
}
fn d_ring() -> Spanned<usize> {
    Spanned::new(0..0, 1024)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSoftnic {
    rate: Spanned<RawRate>,
    size: Option<Spanned<usize>>,
    flows: Option<Spanned<u32>>,
    tcp_share: Option<Spanned<f64>>,
    ipv6_share: Option<Spanned<f64>>,
    pattern: Option<RawPattern>,
    src_ip: Option<Str<Prefix<Ipv4Addr>>>,
    dst_ip: Option<Str<Prefix<Ipv4Addr>>>,
    src_ip6: Option<Str<Prefix<Ipv6Addr>>>,
    dst_ip6: Option<Str<Prefix<Ipv6Addr>>>,
    src_port: Option<Str<PortRange>>,
    dst_port: Option<Str<PortRange>>,
    seed: Option<u64>,
    rx_usecs: Option<u32>,
    rx_frames: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawPattern {
    Constant,
    Poisson,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNull {
    #[serde(default = "d_size")]
    size: Spanned<usize>,
}

fn one_u64() -> u64 {
    1
}

fn d_size() -> Spanned<usize> {
    Spanned::new(0..0, 64)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPcap {
    rx_file: Option<Spanned<String>>,
    tx_file: Option<Spanned<String>>,
    #[serde(default = "one_u64")]
    loops: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    core: Spanned<usize>,
    mode: Spanned<FwdMode>,
    rx: Spanned<Vec<Spanned<Str<QueueRef>>>>,
    poll: Option<Spanned<RawPoll>>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum PollKind {
    Busy,
    Interrupt,
    Adaptive,
    Timer,
    Auto,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoll {
    mode: Spanned<PollKind>,
    budget: Option<Spanned<usize>>,
    fallback_sleep_us: Option<Spanned<u64>>,
    spin_polls: Option<Spanned<u32>>,
    pause_polls: Option<Spanned<u32>>,
    pause_spins: Option<Spanned<u32>>,
    sleep_polls: Option<Spanned<u32>>,
    sleep_min_us: Option<Spanned<u64>>,
    sleep_max_us: Option<Spanned<u64>>,
    predict: Option<Spanned<f64>>,
    hz: Option<Spanned<u32>>,
    burst: Option<Spanned<u32>>,
    each_burst: Option<Spanned<u32>>,
    burst_max: Option<Spanned<u32>>,
    user_frac: Option<Spanned<u32>>,
    idle_poll: Option<Spanned<bool>>,
    up_pps: Option<Spanned<f64>>,
    down_pps: Option<Spanned<f64>>,
    window_ms: Option<Spanned<u64>>,
    hold: Option<Spanned<u32>>,
}

// ---------------------------------------------------------------- checked

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
        }
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
}

/// The longest run: 10^9 s (about 31 years); longer would overflow the
/// clock arithmetic.
pub const MAX_DURATION_S: f64 = 1e9;

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

// ---------------------------------------------------------------- loading

/// Line and column (1-based) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The key named on a line (`key = value` or a `[table]` header).
/// The key named on a line, with the path of the table it is in (`key =
/// value` under `[[worker]]` → `worker[1].key`), or a table header as
/// written (for errors in the header itself).
fn key_on_line(text: &str, line: usize) -> String {
    // Array tables seen so far, and how often: `[[port]]` → port: 2.
    let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
    let mut table = String::new();
    let resolve = |path: &str, arrays: &BTreeMap<String, usize>| -> String {
        let mut out = String::new();
        let mut raw = String::new();
        for seg in path.split('.').map(str::trim) {
            if !raw.is_empty() {
                raw.push('.');
                out.push('.');
            }
            raw.push_str(seg.trim_matches('"'));
            out.push_str(seg.trim_matches('"'));
            if let Some(n) = arrays.get(&raw) {
                out.push_str(&format!("[{}]", n - 1));
            }
        }
        out
    };
    for (i, l) in text.lines().enumerate().take(line) {
        let t = l.trim();
        let header = if let Some(h) = t.strip_prefix("[[") {
            let h = h.split("]]").next().unwrap_or("").trim();
            if i + 1 < line {
                *arrays.entry(h.to_string()).or_insert(0) += 1;
            }
            Some(h)
        } else {
            t.strip_prefix('[')
                .map(|h| h.split(']').next().unwrap_or("").trim())
        };
        if i + 1 == line {
            return match header {
                Some(h) => h.to_string(),
                None => {
                    let k = t.split_once('=').map_or(t, |(k, _)| k).trim();
                    if table.is_empty() {
                        k.to_string()
                    } else {
                        format!("{table}.{k}")
                    }
                }
            };
        }
        if let Some(h) = header {
            table = resolve(h, &arrays);
        }
    }
    String::new()
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    /// Byte offset where each line starts (line `i + 1` at `lines[i]`).
    lines: Vec<usize>,
    errs: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    /// Check the host too (interfaces exist, drivers are compiled in).
    host: bool,
}

impl<'a> Ctx<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        let lines = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ctx {
            file,
            text,
            lines,
            errs: Vec::new(),
            warnings: Vec::new(),
            host: true,
        }
    }

    fn located<T>(&self, v: &Spanned<T>, key: String, msg: String) -> ConfigError {
        let (line, col) = if v.span().is_empty() && v.span().start == 0 {
            (0, 0) // a default value: no place in the file
        } else {
            self.line_col(v.span().start)
        };
        ConfigError {
            file: self.file.to_string(),
            line,
            col,
            key,
            msg,
        }
    }

    /// A legal but odd setting: reported, not refused.
    fn warn<T>(&mut self, v: &Spanned<T>, key: impl Into<String>, msg: impl Into<String>) {
        let w = self.located(v, key.into(), msg.into());
        self.warnings.push(w);
    }

    /// Line and column (1-based) of a byte offset, in O(log lines).
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.lines.partition_point(|&s| s <= offset);
        let start = self.lines[line - 1];
        let col = self.text[start..offset].chars().count() + 1;
        (line, col)
    }

    fn err<T>(&mut self, v: &Spanned<T>, key: impl Into<String>, msg: impl Into<String>) {
        let e = self.located(v, key.into(), msg.into());
        self.errs.push(e);
    }
}

/// The largest config file read (a config is kilobytes; this bounds what
/// a wrong path can cost).
pub const MAX_CONFIG_BYTES: u64 = 256 << 20;

/// Checks that `path` is a regular file (not a directory, device or pipe,
/// which could block or never end) of at most `max` bytes; `what` names it
/// in the error.
pub(crate) fn regular_file(path: &Path, what: &str, max: u64) -> Result<(), String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{what} {} does not exist", path.display()))
        }
        Err(e) => Err(format!("cannot read {what} {}: {e}", path.display())),
        Ok(m) if m.is_dir() => Err(format!(
            "{what} {} is a directory, not a file",
            path.display()
        )),
        Ok(m) if !m.is_file() => Err(format!(
            "{what} {} is not a regular file (a device or a pipe)",
            path.display()
        )),
        Ok(m) if m.len() > max => Err(format!(
            "{what} {} is {} bytes, more than the {max} allowed",
            path.display(),
            m.len()
        )),
        Ok(_) => Ok(()),
    }
}

/// Loads and validates a file.
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let whole = |msg: String| {
        ConfigErrors(vec![ConfigError {
            file: file.clone(),
            line: 0,
            col: 0,
            key: String::new(),
            msg,
        }])
    };
    if let Err(e) = regular_file(path, "config", MAX_CONFIG_BYTES) {
        // The file is named already: keep what follows its name.
        let msg = e
            .strip_prefix(&format!("config {file} "))
            .map_or(e.clone(), str::to_string);
        return Err(whole(msg));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        whole(match e.kind() {
            std::io::ErrorKind::InvalidData => {
                "not a text file (a config is TOML, UTF-8)".to_string()
            }
            _ => format!("cannot read it: {e}"),
        })
    })?;
    parse(&text, &file, path.parent())
}

/// Parses and validates `text`; `file` names it in errors, `base` resolves
/// relative paths in it (pcap files). Also checks the host: that
/// AF_PACKET/AF_XDP interfaces exist (their MACs are the ports' default)
/// and that each port's driver is compiled in.
pub fn parse(text: &str, file: &str, base: Option<&Path>) -> Result<Config, ConfigErrors> {
    parse_with(text, file, base, true)
}

/// [`parse`], with the host checks only when `host` (tests of configs
/// written for another machine).
pub fn parse_with(
    text: &str,
    file: &str,
    base: Option<&Path>,
    host: bool,
) -> Result<Config, ConfigErrors> {
    // A UTF-8 byte order mark (editors on Windows write one) is not TOML.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
        let key = e
            .span()
            .map(|_| key_on_line(text, line))
            .unwrap_or_default();
        let mut msg = e.message().trim().to_string();
        // `[port]` where `[[port]]` was meant: say so.
        let lists = ["port", "worker", "route", "neighbor", "rule", "snat", "dnat", "static"];
        let last = key.rsplit('.').next().unwrap_or("");
        if lists.contains(&last)
            && (msg.contains("expected a sequence") || msg.contains("duplicate key"))
        {
            msg = format!(
                "{msg}: `{key}` is a list of tables; write each entry as `[[{key}]]` (double brackets), not `[{key}]`"
            );
        }
        ConfigErrors(vec![ConfigError {
            file: file.to_string(),
            line,
            col,
            key,
            msg,
        }])
    })?;
    let mut cx = Ctx::new(file, text);
    cx.host = host;
    let mut cfg = validate(&mut cx, raw, base);
    cfg.warnings = std::mem::take(&mut cx.warnings);
    if cx.errs.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(cx.errs))
    }
}

fn validate(cx: &mut Ctx<'_>, raw: RawFile, base: Option<&Path>) -> Config {
    let machine: BTreeSet<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let r = &raw.run;
    if let Err(e) = duration(*r.duration.get_ref()) {
        cx.err(&r.duration, "run.duration", e);
    }
    if !(*r.stats_period.get_ref() >= 0.01 && *r.stats_period.get_ref() <= 3600.0) {
        cx.err(
            &r.stats_period,
            "run.stats_period",
            "must be between 0.01 and 3600 seconds",
        );
    }
    if !(1..=pmd::MAX_BURST).contains(r.burst.get_ref()) {
        cx.err(
            &r.burst,
            "run.burst",
            format!("must be 1..={}", pmd::MAX_BURST),
        );
    }
    if *r.drain_us.get_ref() > 1_000_000 {
        cx.err(&r.drain_us, "run.drain_us", "must be at most 1000000 µs");
    }
    let run = RunConfig {
        duration: duration(*r.duration.get_ref()).unwrap_or(None),
        stats_period: Duration::from_secs_f64(r.stats_period.get_ref().clamp(0.01, 3600.0)),
        burst: *r.burst.get_ref(),
        drain: Duration::from_micros(*r.drain_us.get_ref()),
    };
    if let Some(c) = &raw.generator.core {
        if !machine.contains(c.get_ref()) {
            cx.err(
                c,
                "generator.core",
                format!(
                    "core {} does not exist on this machine (cores: {machine:?})",
                    c.get_ref()
                ),
            );
        }
    }

    // Ports.
    if raw.port.is_empty() {
        cx.errs.push(ConfigError {
            file: cx.file.to_string(),
            line: 0,
            col: 0,
            key: "port".into(),
            msg: "no [[port]] defined".into(),
        });
    }
    let mut names: BTreeMap<String, u16> = BTreeMap::new();
    for (i, p) in raw.port.iter().enumerate() {
        let k = format!("port[{i}].name");
        let n = p.name.get_ref();
        let ok = (1..=32).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !ok {
            cx.err(
                &p.name,
                k.clone(),
                format!("`{n}`: a port name is 1 to 32 letters, digits, `_`, `-` or `.` (`:` separates the queue in `rx`)"),
            );
        }
        if names.insert(p.name.get_ref().clone(), i as u16).is_some() {
            cx.err(
                &p.name,
                k,
                format!("port name `{}` is used twice", p.name.get_ref()),
            );
        }
    }
    let n = raw.port.len() as u16;
    let mut ports = Vec::new();
    for (i, p) in raw.port.iter().enumerate() {
        ports.push(check_port(cx, i, p, &names, n, base));
    }

    // Workers.
    if raw.worker.is_empty() {
        cx.errs.push(ConfigError {
            file: cx.file.to_string(),
            line: 0,
            col: 0,
            key: "worker".into(),
            msg: "no [[worker]] defined".into(),
        });
    }
    let mut cores: BTreeMap<usize, usize> = BTreeMap::new();
    let mut owner: BTreeMap<(u16, u16), usize> = BTreeMap::new();
    let mut tx_next: Vec<u16> = vec![0; ports.len()];
    let mut workers = Vec::new();
    for (wi, w) in raw.worker.iter().enumerate() {
        let core = *w.core.get_ref();
        if let Some(prev) = cores.insert(core, wi) {
            cx.err(
                &w.core,
                format!("worker[{wi}].core"),
                format!("core {core} is already used by worker[{prev}]"),
            );
        } else if !machine.contains(&core) {
            cx.err(
                &w.core,
                format!("worker[{wi}].core"),
                format!("core {core} does not exist on this machine (cores: {machine:?})"),
            );
        }
        if w.rx.get_ref().is_empty() {
            cx.err(
                &w.rx,
                format!("worker[{wi}].rx"),
                "a worker needs at least one RX queue",
            );
        }
        let mut rx = Vec::new();
        for q in w.rx.get_ref() {
            let QueueRef { port, queue } = &q.get_ref().0;
            let key = format!("worker[{wi}].rx");
            let Some(&pi) = names.get(port) else {
                cx.err(
                    q,
                    key,
                    format!(
                        "port `{port}` does not exist (ports: {:?})",
                        names.keys().collect::<Vec<_>>()
                    ),
                );
                continue;
            };
            let rxq = ports[usize::from(pi)].rxq;
            if !(1..=64).contains(&rxq) {
                continue; // the port's own error says why
            }
            if *queue >= rxq {
                cx.err(
                    q,
                    key,
                    format!("port `{port}` has {rxq} RX queue(s); queue {queue} does not exist"),
                );
                continue;
            }
            if let Some(prev) = owner.insert((pi, *queue), wi) {
                cx.err(
                    q,
                    key,
                    format!("RX queue {port}:{queue} is already polled by worker[{prev}]"),
                );
                continue;
            }
            rx.push((pi, *queue));
        }
        // One TX queue on every port this worker's packets leave on.
        let mut tx = Vec::new();
        let outs: BTreeSet<u16> = rx
            .iter()
            .map(|&(p, _)| ports[usize::from(p)].peer)
            .collect();
        for out in outs {
            let pc = &ports[usize::from(out)];
            let q = tx_next[usize::from(out)];
            tx_next[usize::from(out)] += 1;
            if q >= pc.txq {
                cx.err(&w.rx, format!("worker[{wi}].rx"), format!("port `{}` needs a TX queue per worker sending on it, and has only {} (set txq)", pc.name, pc.txq));
            }
            tx.push((out, q));
        }
        let poll = match &w.poll {
            Some(p) => check_poll(cx, wi, p.get_ref()),
            None => Policy::Busy,
        };
        workers.push(WorkerConfig {
            core,
            mode: *w.mode.get_ref(),
            rx,
            tx,
            poll,
        });
    }
    // Unpolled queues: one error per port, and none when a worker's own
    // errors (a bad queue reference, say) may be the cause.
    let worker_errs = cx
        .errs
        .iter()
        .any(|e| e.key.starts_with("worker") || e.key.ends_with(".name"));
    for (pi, p) in ports.iter().enumerate() {
        let idle: Vec<u16> = (0..p.rxq)
            .filter(|&q| !owner.contains_key(&(pi as u16, q)))
            .collect();
        if idle.is_empty() || worker_errs || !(1..=64).contains(&p.rxq) {
            continue;
        }
        let rp = &raw.port[pi];
        // Point at rxq if it was written, else at the port's name.
        let at = if rp.rxq.span().is_empty() {
            rp.name.span()
        } else {
            rp.rxq.span()
        };
        let which = match idle.as_slice() {
            [q] => format!("RX queue {}:{q} is", p.name),
            [a, .., b] if usize::from(b - a) + 1 == idle.len() => {
                format!("RX queues {}:{a}-{b} are", p.name)
            }
            _ => format!(
                "RX queues {} of port {} are",
                idle.iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                p.name
            ),
        };
        cx.err(
            &Spanned::new(at, ()),
            format!("port[{pi}].rxq"),
            format!(
                "{which} not polled by any worker: give each to a worker's `rx`, or lower `rxq`"
            ),
        );
    }
    let addrs: Vec<router::PortAddrs<'_>> = raw
        .port
        .iter()
        .zip(&ports)
        .map(|(rp, pc)| router::PortAddrs {
            name: rp.name.get_ref(),
            mac: pc.mac,
            ipv4: rp.ipv4.get_ref(),
            ipv6: &rp.ipv6,
            mtu: rp.mtu.as_ref(),
            at: Spanned::new(
                if rp.ipv4.span().is_empty() {
                    rp.name.span()
                } else {
                    rp.ipv4.span()
                },
                (),
            ),
        })
        .collect();
    let router = router::check(cx, &raw.router, &raw.route, &raw.neighbor, &addrs, base);
    let names: std::collections::BTreeMap<&str, u16> = raw
        .port
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.get_ref().as_str(), i as u16))
        .collect();
    let gateway = firewall::check(
        cx,
        raw.firewall.as_ref(),
        raw.conntrack.as_ref(),
        raw.nat.as_ref(),
        &names,
        &raw.port
            .iter()
            .map(|p| p.ipv4.get_ref().iter().map(|a| a.0.addr).collect())
            .collect::<Vec<_>>(),
        base,
    );
    // One buffer family per process: DPDK ports cannot mix with the others.
    let dpdk_ports = raw
        .port
        .iter()
        .filter(|p| *p.driver.get_ref() == Driver::Dpdk)
        .count();
    if dpdk_ports > 0 && dpdk_ports < raw.port.len() {
        if let Some((i, p)) = raw
            .port
            .iter()
            .enumerate()
            .find(|(_, p)| *p.driver.get_ref() != Driver::Dpdk)
        {
            cx.err(
                &p.driver,
                format!("port[{i}].driver"),
                "DPDK ports cannot be mixed with other drivers in one process",
            );
        }
    }
    // The gateway runs inside l3fwd workers only.
    if gateway.enabled {
        let l3 = raw
            .worker
            .iter()
            .filter(|w| *w.mode.get_ref() == FwdMode::L3fwd)
            .count();
        let other = raw
            .worker
            .iter()
            .enumerate()
            .find(|(_, w)| *w.mode.get_ref() != FwdMode::L3fwd);
        if let Some((wi, w)) = other {
            let msg = format!(
                "[firewall]/[nat]/[conntrack] act only in l3fwd workers; this `{}` worker forwards its queues unfiltered",
                w.mode.get_ref().name()
            );
            if l3 == 0 {
                cx.err(
                    &w.mode,
                    format!("worker[{wi}].mode"),
                    format!("{msg} (set mode = \"l3fwd\", or remove those sections)"),
                );
            } else {
                cx.warn(&w.mode, format!("worker[{wi}].mode"), msg);
            }
        }
    }
    for (wi, w) in raw.worker.iter().enumerate() {
        if *w.mode.get_ref() == FwdMode::L3fwd && !router.has_addresses() {
            cx.err(
                &w.mode,
                format!("worker[{wi}].mode"),
                "l3fwd needs interface addresses: set `ipv4`/`ipv6` on the ports",
            );
        }
    }
    Config {
        source: cx.file.to_string(),
        run,
        generator_core: raw.generator.core.map(|c| *c.get_ref()),
        ports,
        workers,
        router,
        gateway,
        eal_args: raw.dpdk.eal_args,
        warnings: Vec::new(),
    }
}

fn check_port(
    cx: &mut Ctx<'_>,
    i: usize,
    p: &RawPort,
    names: &BTreeMap<String, u16>,
    n: u16,
    base: Option<&Path>,
) -> PortConfig {
    let k = |f: &str| format!("port[{i}].{f}");
    let driver = *p.driver.get_ref();
    if *p.rxq.get_ref() == 0 || *p.rxq.get_ref() > 64 {
        cx.err(&p.rxq, k("rxq"), "must be 1..=64");
    }
    if *p.txq.get_ref() == 0 || *p.txq.get_ref() > 64 {
        cx.err(&p.txq, k("txq"), "must be 1..=64");
    }
    for (v, f) in [(&p.rxd, "rxd"), (&p.txd, "txd")] {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k(f), "must be 1..=65536 descriptors");
        }
    }
    let sections = [
        (
            p.softnic.as_ref().map(|s| s.span()),
            Driver::Softnic,
            "softnic",
        ),
        (p.null.as_ref().map(|s| s.span()), Driver::Null, "null"),
        (p.pcap.as_ref().map(|s| s.span()), Driver::Pcap, "pcap"),
        (p.dpdk.as_ref().map(|s| s.span()), Driver::Dpdk, "dpdk"),
        (
            p.afpacket.as_ref().map(|s| s.span()),
            Driver::Afpacket,
            "afpacket",
        ),
        (p.afxdp.as_ref().map(|s| s.span()), Driver::Afxdp, "afxdp"),
    ];
    for (span, d, name) in sections {
        if let Some(span) = span {
            if d != driver {
                cx.err(
                    &Spanned::new(span, ()),
                    k(name),
                    format!(
                        "section [port.{name}] does not apply to driver `{}`",
                        driver_name(driver)
                    ),
                );
            }
        }
    }
    let peer = match &p.peer {
        Some(s) => match names.get(s.get_ref()) {
            Some(&pi) => pi,
            None => {
                cx.err(
                    s,
                    k("peer"),
                    format!("port `{}` does not exist", s.get_ref()),
                );
                i as u16
            }
        },
        None => {
            let i = i as u16;
            if i ^ 1 < n {
                i ^ 1
            } else {
                i
            }
        }
    };
    // Host checks: the driver is compiled in, the interface exists (and
    // its MAC is the port's unless `mac` says otherwise).
    if cx.host {
        let missing = match driver {
            Driver::Dpdk if !cfg!(feature = "dpdk") => Some("dpdk"),
            Driver::Afxdp if !cfg!(feature = "afxdp") => Some("afxdp"),
            _ => None,
        };
        if let Some(f) = missing {
            cx.err(
                &p.driver,
                k("driver"),
                format!("this sluice was built without the `{f}` driver: build it with `cargo build --release --features {f}`"),
            );
        }
    }
    let iface = match driver {
        Driver::Afpacket => p.afpacket.as_ref().map(|a| &a.get_ref().iface),
        Driver::Afxdp => p.afxdp.as_ref().map(|a| &a.get_ref().iface),
        _ => None,
    };
    let mut iface_mac = None;
    if let Some(name) = iface.filter(|_| cx.host) {
        let n = name.get_ref();
        let sys = Path::new("/sys/class/net").join(n);
        let sec = driver_name(driver);
        if n.is_empty() || n.contains('/') || !sys.exists() {
            cx.err(
                name,
                k(&format!("{sec}.iface")),
                format!("interface `{n}` does not exist in this network namespace (`ip link` lists them)"),
            );
        } else {
            iface_mac = std::fs::read_to_string(sys.join("address"))
                .ok()
                .and_then(|m| m.trim().parse::<MacAddr>().ok());
        }
    }
    let mac = p
        .mac
        .map(|m| m.0)
        .or(iface_mac)
        .unwrap_or(MacAddr([0x02, 0x51, 0, 0, 0, i as u8]));
    if let (Some(m), Some(im), Some(name)) = (p.mac, iface_mac, iface) {
        if m.0 != im {
            cx.warn(
                name,
                k("mac"),
                format!(
                    "`mac` {} differs from interface {}'s own {im}: the kernel delivers frames to its own MAC (leave `mac` out to use it)",
                    m.0,
                    name.get_ref()
                ),
            );
        }
    }
    let peer_mac = p
        .peer_mac
        .map(|m| m.0)
        .unwrap_or(MacAddr([0x02, 0x5e, 0, 0, 0, i as u8]));
    let kind = match driver {
        Driver::Softnic => match &p.softnic {
            Some(s) => check_softnic(cx, i, s.get_ref(), mac),
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `softnic` needs a [port.softnic] section (at least `rate`)",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Null => {
            let size = p.null.as_ref().map_or(64, |s| *s.get_ref().size.get_ref());
            if let Some(s) = &p.null {
                if !(14..=9000).contains(&size) {
                    cx.err(&s.get_ref().size, k("null.size"), "must be 14..=9000 bytes");
                }
            }
            PortKind::Null { size }
        }
        Driver::Dpdk => match &p.dpdk {
            Some(d) => {
                if d.get_ref().device.get_ref().is_empty() {
                    cx.err(&d.get_ref().device, k("dpdk.device"), "must name a device");
                }
                PortKind::Dpdk {
                    device: d.get_ref().device.get_ref().clone(),
                }
            }
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `dpdk` needs a [port.dpdk] section with `device`",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Afpacket => match &p.afpacket {
            Some(a) => {
                let a = a.get_ref();
                if a.iface.get_ref().is_empty() || a.iface.get_ref().len() > 15 {
                    cx.err(
                        &a.iface,
                        k("afpacket.iface"),
                        "must name an interface (1-15 characters)",
                    );
                }
                let blocks = a.blocks.as_ref().map_or(256, |b| *b.get_ref());
                if let Some(b) = &a.blocks {
                    if !(2..=4096).contains(b.get_ref()) {
                        cx.err(b, k("afpacket.blocks"), "must be 2..=4096");
                    }
                }
                PortKind::AfPacket {
                    iface: a.iface.get_ref().clone(),
                    blocks,
                    qdisc_bypass: a.qdisc_bypass,
                }
            }
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `afpacket` needs a [port.afpacket] section with `iface`",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Afxdp => match &p.afxdp {
            Some(a) => {
                let a = a.get_ref();
                if *p.rxq.get_ref() != 1 || *p.txq.get_ref() != 1 {
                    cx.err(
                        &p.rxq,
                        k("rxq"),
                        "an AF_XDP port has one RX and one TX queue (queue 0)",
                    );
                }
                let frames = a.frames.as_ref().map_or(16384, |f| *f.get_ref());
                if let Some(f) = &a.frames {
                    if !(64..=1 << 20).contains(f.get_ref()) || !f.get_ref().is_power_of_two() {
                        cx.err(f, k("afxdp.frames"), "must be a power of two, 64..=1048576");
                    }
                }
                let skb_mode = match a.mode.as_ref().map(|m| m.get_ref().as_str()) {
                    None | Some("native") => false,
                    Some("skb") => true,
                    Some(o) => {
                        cx.err(
                            a.mode.as_ref().unwrap(),
                            k("afxdp.mode"),
                            format!("`{o}`: expected native or skb"),
                        );
                        false
                    }
                };
                PortKind::AfXdp {
                    iface: a.iface.get_ref().clone(),
                    frames,
                    zerocopy: a.zerocopy,
                    skb_mode,
                }
            }
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `afxdp` needs a [port.afxdp] section with `iface`",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Pcap => {
            if *p.rxq.get_ref() != 1 || *p.txq.get_ref() != 1 {
                cx.err(
                    &p.rxq,
                    k("rxq"),
                    "a pcap port has exactly one RX and one TX queue",
                );
            }
            let resolve = |f: &Option<Spanned<String>>| {
                f.as_ref().map(|f| match base {
                    Some(b) if Path::new(f.get_ref()).is_relative() => b.join(f.get_ref()),
                    _ => PathBuf::from(f.get_ref()),
                })
            };
            let (rx_file, tx_file, loops) = p.pcap.as_ref().map_or((None, None, 1), |s| {
                let s = s.get_ref();
                (resolve(&s.rx_file), resolve(&s.tx_file), s.loops)
            });
            // What `run` will read and write, checked now.
            let raw = p.pcap.as_ref().map(|s| s.get_ref());
            if let (Some(path), Some(at)) = (&rx_file, raw.and_then(|r| r.rx_file.as_ref())) {
                if let Err(e) = regular_file(path, "capture", u64::MAX) {
                    cx.err(at, k("pcap.rx_file"), e);
                } else if let Err(e) = pmd::pcap::inspect(path) {
                    cx.err(at, k("pcap.rx_file"), pcap_error(&e));
                }
            }
            if let (Some(path), Some(at)) = (&tx_file, raw.and_then(|r| r.tx_file.as_ref())) {
                let dir = path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                if path.is_dir() {
                    cx.err(
                        at,
                        k("pcap.tx_file"),
                        format!("{} is a directory; name a file to write", path.display()),
                    );
                } else if !dir.is_dir() {
                    cx.err(
                        at,
                        k("pcap.tx_file"),
                        format!("directory {} does not exist", dir.display()),
                    );
                } else if path.exists() && !path.is_file() {
                    // A pipe would block the start; a device is no capture.
                    cx.err(
                        at,
                        k("pcap.tx_file"),
                        format!(
                            "{} is not a regular file (a device or a pipe)",
                            path.display()
                        ),
                    );
                }
            }
            PortKind::Pcap {
                rx_file,
                tx_file,
                loops,
            }
        }
    };
    PortConfig {
        name: p.name.get_ref().clone(),
        kind,
        rxq: *p.rxq.get_ref(),
        txq: *p.txq.get_ref(),
        rxd: *p.rxd.get_ref(),
        txd: *p.txd.get_ref(),
        mac,
        peer_mac,
        peer,
        origin: format!("{}:{}", cx.file, cx.line_col(p.name.span().start).0),
    }
}

/// A capture's error as an operator reads it.
fn pcap_error(e: &pmd::PortError) -> String {
    match e {
        pmd::PortError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => {
            format!("capture {path} does not exist")
        }
        pmd::PortError::Io { path, source } => format!("cannot read capture {path}: {source}"),
        pmd::PortError::Pcap { path, msg } if msg.contains("Error reading bytes") => format!(
            "capture {path} is cut short: it ends inside a packet record (a truncated file?)"
        ),
        pmd::PortError::Pcap { path, msg } if msg.contains("magic number") => format!(
            "{path} is not a pcap or pcapng capture (its first bytes are no capture header)"
        ),
        pmd::PortError::Pcap { path, msg } => format!("capture {path} cannot be replayed: {msg}"),
        other => other.to_string(),
    }
}

fn driver_name(d: Driver) -> &'static str {
    match d {
        Driver::Softnic => "softnic",
        Driver::Null => "null",
        Driver::Pcap => "pcap",
        Driver::Dpdk => "dpdk",
        Driver::Afpacket => "afpacket",
        Driver::Afxdp => "afxdp",
    }
}

fn check_softnic(cx: &mut Ctx<'_>, i: usize, s: &RawSoftnic, mac: MacAddr) -> PortKind {
    let k = |f: &str| format!("port[{i}].softnic.{f}");
    let mut g = GenConfig {
        dst_mac: mac,
        ..GenConfig::default()
    };
    g.rate = match s.rate.get_ref() {
        RawRate::Pps(p) if p.is_finite() && *p > 0.0 && *p <= 1e9 => Rate::Pps(*p),
        RawRate::Word(w) if w == "max" => Rate::Max,
        _ => {
            cx.err(
                &s.rate,
                k("rate"),
                "must be packets per second (> 0, up to 1e9) or \"max\"",
            );
            Rate::Max
        }
    };
    if let Some(v) = &s.size {
        if !(58..=2048).contains(v.get_ref()) {
            cx.err(v, k("size"), "must be 58..=2048 bytes (frame without FCS)");
        }
        g.size = *v.get_ref();
    }
    if let Some(v) = &s.flows {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k("flows"), "must be 1..=65536");
        }
        g.flows = *v.get_ref();
    }
    for (v, f, slot) in [
        (&s.tcp_share, "tcp_share", &mut g.tcp_share),
        (&s.ipv6_share, "ipv6_share", &mut g.ipv6_share),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(v.get_ref()) {
                cx.err(v, k(f), "must be a share between 0 and 1");
            }
            *slot = *v.get_ref();
        }
    }
    if let Some(p) = s.pattern {
        g.pattern = match p {
            RawPattern::Constant => Pattern::Constant,
            RawPattern::Poisson => Pattern::Poisson,
        };
    }
    if let Some(p) = s.src_ip {
        g.src_ip = p.0.span();
    }
    if let Some(p) = s.dst_ip {
        g.dst_ip = p.0.span();
    }
    if let Some(p) = s.src_ip6 {
        g.src_ip6 = p.0.span();
    }
    if let Some(p) = s.dst_ip6 {
        g.dst_ip6 = p.0.span();
    }
    if let Some(r) = s.src_port {
        g.src_port = Span {
            first: r.0 .0,
            last: r.0 .1,
        };
    }
    if let Some(r) = s.dst_port {
        g.dst_port = Span {
            first: r.0 .0,
            last: r.0 .1,
        };
    }
    if let Some(seed) = s.seed {
        g.seed = seed;
    }
    let d = Coalesce::default();
    PortKind::Softnic {
        gen: g,
        coalesce: Coalesce {
            rx_usecs: s.rx_usecs.unwrap_or(d.rx_usecs),
            rx_frames: s.rx_frames.unwrap_or(d.rx_frames),
        },
    }
}

fn check_poll(cx: &mut Ctx<'_>, wi: usize, p: &RawPoll) -> Policy {
    use PollKind::*;
    let kind = *p.mode.get_ref();
    let k = |f: &str| format!("worker[{wi}].poll.{f}");
    // Which knobs each mode takes.
    let knobs: [(&str, bool, &[PollKind]); 19] = [
        ("predict", p.predict.is_some(), &[Adaptive]),
        ("budget", p.budget.is_some(), &[Interrupt, Adaptive, Auto]),
        (
            "fallback_sleep_us",
            p.fallback_sleep_us.is_some(),
            &[Interrupt, Adaptive, Auto],
        ),
        ("spin_polls", p.spin_polls.is_some(), &[Adaptive]),
        ("pause_polls", p.pause_polls.is_some(), &[Adaptive]),
        ("pause_spins", p.pause_spins.is_some(), &[Adaptive]),
        ("sleep_polls", p.sleep_polls.is_some(), &[Adaptive]),
        ("sleep_min_us", p.sleep_min_us.is_some(), &[Adaptive]),
        ("sleep_max_us", p.sleep_max_us.is_some(), &[Adaptive]),
        ("hz", p.hz.is_some(), &[Timer]),
        ("burst", p.burst.is_some(), &[Timer]),
        ("each_burst", p.each_burst.is_some(), &[Timer]),
        ("burst_max", p.burst_max.is_some(), &[Timer]),
        ("user_frac", p.user_frac.is_some(), &[Timer]),
        ("idle_poll", p.idle_poll.is_some(), &[Timer]),
        ("up_pps", p.up_pps.is_some(), &[Auto]),
        ("down_pps", p.down_pps.is_some(), &[Auto]),
        ("window_ms", p.window_ms.is_some(), &[Auto]),
        ("hold", p.hold.is_some(), &[Auto]),
    ];
    for (name, set, modes) in knobs {
        if set && !modes.contains(&kind) {
            let modes: Vec<&str> = modes.iter().map(|m| poll_name(*m)).collect();
            cx.err(
                &p.mode,
                k(name),
                format!(
                    "`{name}` applies to poll mode {}, not `{}`",
                    modes.join("/"),
                    poll_name(kind)
                ),
            );
        }
    }
    let mut napi = poll::Napi::default();
    if let Some(v) = &p.budget {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k("budget"), "must be 1..=65536 packets");
        }
        napi.budget = *v.get_ref();
    }
    if let Some(v) = &p.fallback_sleep_us {
        if !(1..=1_000_000).contains(v.get_ref()) {
            cx.err(v, k("fallback_sleep_us"), "must be 1..=1000000 µs");
        }
        napi.fallback_sleep = Duration::from_micros(*v.get_ref());
    }
    match kind {
        Busy => Policy::Busy,
        Interrupt => Policy::Interrupt(napi),
        Adaptive => {
            let mut a = poll::Adaptive {
                napi,
                ..poll::Adaptive::default()
            };
            for (v, slot) in [
                (&p.spin_polls, &mut a.spin_polls),
                (&p.pause_polls, &mut a.pause_polls),
                (&p.pause_spins, &mut a.pause_spins),
                (&p.sleep_polls, &mut a.sleep_polls),
            ] {
                if let Some(v) = v {
                    *slot = *v.get_ref();
                }
            }
            if let Some(v) = &p.sleep_min_us {
                a.sleep_min = Duration::from_micros(*v.get_ref());
            }
            if let Some(v) = &p.sleep_max_us {
                a.sleep_max = Duration::from_micros(*v.get_ref());
            }
            if let Some(v) = &p.predict {
                if !(v.get_ref().is_finite() && *v.get_ref() >= 0.0) {
                    cx.err(
                        v,
                        k("predict"),
                        "must be a factor >= 0 (0 disables prediction)",
                    );
                }
                a.predict = *v.get_ref();
            }
            if a.sleep_max < a.sleep_min || a.sleep_max > Duration::from_secs(1) {
                let at = p.sleep_max_us.as_ref().map_or(p.mode.span(), |v| v.span());
                cx.err(
                    &Spanned::new(at, ()),
                    k("sleep_max_us"),
                    "must be at least sleep_min_us and at most 1000000",
                );
            }
            Policy::Adaptive(a)
        }
        Timer => {
            let mut t = poll::Timer::default();
            if let Some(v) = &p.hz {
                if !(1..=100_000).contains(v.get_ref()) {
                    cx.err(v, k("hz"), "must be 1..=100000");
                }
                t.hz = *v.get_ref();
            }
            if let Some(v) = &p.each_burst {
                if !(1..=pmd::MAX_BURST as u32).contains(v.get_ref()) {
                    cx.err(
                        v,
                        k("each_burst"),
                        format!("must be 1..={}", pmd::MAX_BURST),
                    );
                }
                t.each_burst = *v.get_ref();
            }
            if let Some(v) = &p.burst_max {
                if *v.get_ref() == 0 {
                    cx.err(v, k("burst_max"), "must be at least 1");
                }
                t.burst_max = *v.get_ref();
            }
            if let Some(v) = &p.burst {
                if *v.get_ref() == 0 || *v.get_ref() > t.burst_max {
                    cx.err(v, k("burst"), "must be 1..=burst_max");
                }
                t.burst = *v.get_ref();
            }
            if let Some(v) = &p.user_frac {
                if *v.get_ref() > 99 {
                    cx.err(v, k("user_frac"), "must be a percentage 0..=99");
                }
                t.user_frac = *v.get_ref();
            }
            if let Some(v) = &p.idle_poll {
                t.idle_poll = *v.get_ref();
            }
            Policy::Timer(t)
        }
        Auto => {
            let mut a = poll::Auto {
                napi,
                ..poll::Auto::default()
            };
            if let Some(v) = &p.up_pps {
                a.up_pps = *v.get_ref();
            }
            if let Some(v) = &p.down_pps {
                a.down_pps = *v.get_ref();
            }
            if !(a.down_pps >= 0.0 && a.down_pps < a.up_pps) {
                let at = p
                    .down_pps
                    .as_ref()
                    .or(p.up_pps.as_ref())
                    .map_or(p.mode.span(), |v| v.span());
                cx.err(
                    &Spanned::new(at, ()),
                    k("down_pps"),
                    "must be below up_pps (hysteresis)",
                );
            }
            if let Some(v) = &p.window_ms {
                if !(1..=10_000).contains(v.get_ref()) {
                    cx.err(v, k("window_ms"), "must be 1..=10000");
                }
                a.window = Duration::from_millis(*v.get_ref());
            }
            if let Some(v) = &p.hold {
                if *v.get_ref() == 0 {
                    cx.err(v, k("hold"), "must be at least 1");
                }
                a.hold = *v.get_ref();
            }
            Policy::Auto(a)
        }
    }
}

fn poll_name(k: PollKind) -> &'static str {
    match k {
        PollKind::Busy => "busy",
        PollKind::Interrupt => "interrupt",
        PollKind::Adaptive => "adaptive",
        PollKind::Timer => "timer",
        PollKind::Auto => "auto",
    }
}

#[cfg(test)]
mod tests;
