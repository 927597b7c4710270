//! The netlink mirror (`[control_plane] netlink = true`): a thread, never
//! a worker, listens to the kernel's route changes (`RTM_NEWROUTE`,
//! `RTM_DELROUTE`, IPv4 and IPv6, multipath) in one routing table, and to
//! the neighbours (`RTM_NEWNEIGH`/`RTM_DELNEIGH`), addresses
//! (`RTM_NEWADDR`/`RTM_DELADDR`) and links (`RTM_NEWLINK`) of the ports'
//! kernel interfaces, and hands them to the management thread, which
//! applies routes to the running FIB in place and sends neighbours and
//! addresses to the workers. Any routing daemon that programs that kernel
//! table (BIRD, FRR, `ip route`) then drives Sluice, as VPP's linux-cp
//! does.
//!
//! - A kernel interface stands for each port (`[control_plane]
//!   interfaces`, or the port's own `iface` on AF_PACKET/AF_XDP); a route
//!   whose next hops are on no such interface is ignored and counted, not
//!   guessed (a multipath route keeps the paths that are).
//! - Subscribed before the initial dump, so nothing between the two is
//!   lost; the dump is applied as a resync (what the mirror held and the
//!   kernel no longer has is deleted).
//! - The kernel drops notifications when the socket buffer overflows (a
//!   full-table load from a daemon does that): the listener sees ENOBUFS,
//!   empties the socket (the kernel reports the next loss only once the
//!   queue has been empty), dumps the table again and resyncs, so the FIB
//!   ends up equal to the kernel's table, counted as an overrun and a
//!   resync.
//! - Several routes to one prefix with different metrics: the FIB gets the
//!   lowest metric's, as the kernel forwards; deleting it brings back the
//!   next.
//! - Neighbours the kernel holds as reachable, stale, delay, probe,
//!   permanent or noarp (with a MAC) are mirrored; incomplete, failed or
//!   deleted ones are removed. Addresses on a port's interface become the
//!   router's own (link-local IPv6 ones excepted: Sluice answers for its
//!   own). A link going down or up is reported, and the route table read
//!   again: the kernel flushes the routes through a downed interface
//!   without a `RTM_DELROUTE` for each. Next hops the kernel flags dead
//!   (interface down) or linkdown (no carrier) are left out; a route with
//!   none left is removed.

use crate::config::ControlPlane;
pub use crate::rib::{Change, Route, State};
use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, Sender};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHopFlags, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use pipeline::router::NextHop;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the listener saw (read by `show routes` and the metrics).
#[derive(Debug, Default)]
pub struct Stats {
    /// Route messages received (notifications and dumped routes).
    pub messages: AtomicU64,
    /// Neighbour, address and link messages about the ports' interfaces.
    pub iface_messages: AtomicU64,
    /// Routes (or paths) ignored: next hop on no port's interface.
    pub unmapped: AtomicU64,
    /// Routes ignored: another table, or not unicast (local, broadcast,
    /// blackhole, …).
    pub other: AtomicU64,
    /// Messages the netlink library could not decode (skipped).
    pub undecoded: AtomicU64,
    /// Full dumps applied (the first one included).
    pub resyncs: AtomicU64,
    /// Socket-buffer overruns (ENOBUFS) recovered by a resync.
    pub overruns: AtomicU64,
    /// When the last resync happened (seconds since the Unix epoch).
    pub last_resync: AtomicU64,
}

/// The running listener.
pub struct Mirror {
    /// Changes, in order.
    pub changes: Receiver<Change>,
    /// Its counters.
    pub stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `ENOBUFS` on Linux: the kernel dropped notifications.
const ENOBUFS: i32 = 105;

/// Multicast groups: links (`RTMGRP_LINK`), neighbours (`RTMGRP_NEIGH`),
/// IPv4 and IPv6 addresses (`RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`)
/// and routes (`RTMGRP_IPV4_ROUTE`, `RTMGRP_IPV6_ROUTE`).
const GROUPS: u32 = 0x1 | 0x4 | 0x10 | 0x100 | 0x40 | 0x400;

/// Kernel interface index → port, from the interface names (sysfs).
fn interface_map(cp: &ControlPlane) -> HashMap<u32, u16> {
    cp.interfaces
        .iter()
        .filter_map(|(port, name)| {
            let idx = std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).ok()?;
            Some((idx.trim().parse().ok()?, *port))
        })
        .collect()
}

/// A neighbour message on a port's interface: (port, address, MAC if
/// usable). `None` for other interfaces and families.
fn neighbor(
    m: &NeighbourMessage,
    del: bool,
    ifs: &HashMap<u32, u16>,
) -> Option<(u16, IpAddr, Option<[u8; 6]>)> {
    let port = *ifs.get(&m.header.ifindex)?;
    let addr = m.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(v)) => Some(IpAddr::V4(*v)),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v)) => Some(IpAddr::V6(*v)),
        _ => None,
    })?;
    let mac = m.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(l) => <[u8; 6]>::try_from(&l[..]).ok(),
        _ => None,
    });
    let usable = matches!(
        m.header.state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
            | NeighbourState::Noarp
    );
    Some((port, addr, mac.filter(|_| usable && !del)))
}

/// An address message on a port's interface: (port, address, length).
/// IPv6 link-local addresses are left out.
fn address_of(m: &AddressMessage, ifs: &HashMap<u32, u16>) -> Option<(u16, IpAddr, u8)> {
    let port = *ifs.get(&m.header.index)?;
    // IFA_LOCAL is the interface's own address (IFA_ADDRESS the peer's on
    // a point-to-point link); IPv6 has only IFA_ADDRESS.
    let local = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(a) => Some(*a),
        _ => None,
    });
    let a = local.or_else(|| {
        m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(a) => Some(*a),
            _ => None,
        })
    })?;
    if let IpAddr::V6(v) = a {
        if v.segments()[0] & 0xffc0 == 0xfe80 {
            return None;
        }
    }
    Some((port, a, m.header.prefix_len))
}

/// A link message about a port's interface: (port, up and with carrier).
fn link_of(m: &LinkMessage, ifs: &HashMap<u32, u16>) -> Option<(u16, bool)> {
    let port = *ifs.get(&m.header.index)?;
    let f = m.header.flags;
    Some((
        port,
        f.contains(LinkFlags::Up) && f.contains(LinkFlags::LowerUp),
    ))
}

fn address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

/// Why a kernel route is not mirrored.
#[derive(Debug, PartialEq, Eq)]
enum Skip {
    Unmapped,
    Other,
}

/// The prefix, metric and paths of a kernel route in `table`.
fn convert(
    m: &RouteMessage,
    table: u32,
    ifs: &HashMap<u32, u16>,
    unmapped: &mut u64,
) -> Result<(IpAddr, u8, u32, Vec<NextHop>), Skip> {
    let t = m
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(m.header.table));
    if t != table {
        return Err(Skip::Other);
    }
    let len = m.header.destination_prefix_length;
    let dst = m
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Destination(d) => address(d),
            _ => None,
        })
        .or(match m.header.address_family {
            AddressFamily::Inet => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            AddressFamily::Inet6 => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            _ => None,
        })
        .ok_or(Skip::Other)?;
    if m.header.kind != RouteType::Unicast {
        return Err(Skip::Other);
    }
    let metric = m
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0);
    let gateway = |attrs: &[RouteAttribute]| {
        attrs.iter().find_map(|a| match a {
            RouteAttribute::Gateway(g) => address(g),
            _ => None,
        })
    };
    let mut paths = Vec::new();
    let mut mapped = false;
    // A next hop whose interface is down (dead) or without a carrier
    // (linkdown) stays in the kernel's route, flagged: it carries nothing.
    let mut hop = |ifindex: u32, via: Option<IpAddr>, down: bool| match ifs.get(&ifindex) {
        Some(&port) => {
            mapped = true;
            if !down {
                paths.push(NextHop { port, via });
            }
        }
        None => *unmapped += 1,
    };
    match m.attributes.iter().find_map(|a| match a {
        RouteAttribute::MultiPath(v) => Some(v),
        _ => None,
    }) {
        Some(nhs) => {
            for nh in nhs {
                let down = nh
                    .flags
                    .intersects(RouteNextHopFlags::Dead | RouteNextHopFlags::Linkdown);
                hop(nh.interface_index, gateway(&nh.attributes), down);
            }
        }
        None => {
            let oif = m.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            });
            let down = m
                .header
                .flags
                .intersects(RouteFlags::Dead | RouteFlags::Linkdown);
            match oif {
                Some(i) => hop(i, gateway(&m.attributes), down),
                None => return Err(Skip::Other),
            }
        }
    }
    if !mapped {
        return Err(Skip::Unmapped);
    }
    // Empty: every path is down (the route carries nothing here).
    Ok((dst, len, metric, paths))
}

/// The kernel table as the listener keeps it: per prefix, per metric, the
/// paths; the FIB gets the lowest metric's.
#[derive(Default)]
struct Table(HashMap<(IpAddr, u8), BTreeMap<u32, Vec<NextHop>>>);

impl Table {
    fn best(&self, k: &(IpAddr, u8)) -> Option<Route> {
        let (_, p) = self.0.get(k)?.iter().next()?;
        Some((k.0, k.1, p.clone()))
    }

    fn routes(&self) -> Vec<Route> {
        self.0.keys().filter_map(|k| self.best(k)).collect()
    }
}

/// Sends one dump request and collects the messages it answers with.
fn dump(buf: &mut [u8], what: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>> {
    let mut s = Socket::new(NETLINK_ROUTE).context("netlink socket")?;
    s.bind_auto().context("netlink bind")?;
    s.connect(&SocketAddr::new(0, 0))
        .context("netlink connect")?;
    let mut h = NetlinkHeader::default();
    h.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut req = NetlinkMessage::new(h, NetlinkPayload::from(what));
    req.finalize();
    let mut out = vec![0; req.header.length as usize];
    req.serialize(&mut out);
    s.send(&out, 0).context("netlink send")?;
    let mut got = Vec::new();
    loop {
        let n = s.recv(&mut &mut buf[..], 0).context("netlink dump")?;
        let mut off = 0;
        while off < n {
            let m = <NetlinkMessage<RouteNetlinkMessage>>::deserialize(&buf[off..n])
                .context("netlink message")?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(got),
                NetlinkPayload::Error(e) => anyhow::bail!("netlink dump refused: {e:?}"),
                NetlinkPayload::InnerMessage(m) => got.push(m),
                _ => {}
            }
            if len == 0 {
                break;
            }
            off += len;
        }
    }
}

/// Starts the listener: subscribes, dumps the table (sent as the first
/// [`Change::Resync`]), then follows the changes.
pub fn start(cp: &ControlPlane) -> Result<Mirror> {
    let mut listen = Socket::new(NETLINK_ROUTE).context("netlink socket")?;
    listen
        .bind(&SocketAddr::new(0, GROUPS))
        .context("netlink bind to the route groups")?;
    // Above `net.core.rmem_max` (208 KiB by default) only by force: a
    // plain SO_RCVBUF would be capped there, far below a full-table load.
    let got = pmd::sys::set_rcvbuf(std::os::fd::AsRawFd::as_raw_fd(&listen), cp.rcvbuf)
        .context("netlink receive buffer")?;
    if got / 2 < cp.rcvbuf {
        eprintln!(
            "netlink: receive buffer {} KiB, not the {} KiB asked (no CAP_NET_ADMIN: capped at net.core.rmem_max)",
            got / 2 / 1024,
            cp.rcvbuf / 1024
        );
    }
    listen
        .set_non_blocking(true)
        .context("netlink non-blocking")?;
    let (tx, rx) = crossbeam_channel::bounded(1 << 16);
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (cp, stats, stop) = (cp.clone(), stats.clone(), stop.clone());
        std::thread::Builder::new()
            .name("sluice-netlink".into())
            .spawn(move || {
                crate::privilege::shed_thread();
                run(listen, &cp, &tx, &stats, &stop)
            })
            .context("netlink thread")?
    };
    Ok(Mirror {
        changes: rx,
        stats,
        stop,
        thread: Some(thread),
    })
}

fn resync(
    buf: &mut [u8],
    cp: &ControlPlane,
    ifs: &mut HashMap<u32, u16>,
    table: &mut Table,
    links: &mut HashMap<u16, bool>,
    tx: &Sender<Change>,
    stats: &Stats,
) -> bool {
    *ifs = interface_map(cp);
    let mut state = State::default();
    let what = [
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
    ];
    for w in what {
        let got = match dump(buf, w) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("netlink: {e:#}; retrying");
                return false;
            }
        };
        for m in got {
            match m {
                RouteNetlinkMessage::NewLink(l) => state.links.extend(link_of(&l, ifs)),
                RouteNetlinkMessage::NewAddress(a) => state.addresses.extend(address_of(&a, ifs)),
                RouteNetlinkMessage::NewNeighbour(n) => {
                    if let Some((p, a, Some(m))) = neighbor(&n, false, ifs) {
                        state.neighbors.push((p, a, m));
                    }
                }
                _ => {}
            }
        }
    }
    *links = state.links.iter().copied().collect();
    if tx.send(Change::State(state)).is_err() {
        return false;
    }
    let msgs: Vec<RouteMessage> =
        match dump(buf, RouteNetlinkMessage::GetRoute(RouteMessage::default())) {
            Ok(m) => m
                .into_iter()
                .filter_map(|m| match m {
                    RouteNetlinkMessage::NewRoute(r) => Some(r),
                    _ => None,
                })
                .collect(),
            Err(e) => {
                eprintln!("netlink: {e:#}; retrying");
                return false;
            }
        };
    *table = Table::default();
    let mut unmapped = 0;
    for m in &msgs {
        stats.messages.fetch_add(1, Ordering::Relaxed);
        match convert(m, cp.table, ifs, &mut unmapped) {
            Ok((a, l, metric, p)) => {
                if !p.is_empty() {
                    table.0.entry((a, l)).or_default().insert(metric, p);
                }
            }
            Err(Skip::Other) => {
                stats.other.fetch_add(1, Ordering::Relaxed);
            }
            Err(Skip::Unmapped) => {}
        }
    }
    stats.unmapped.fetch_add(unmapped, Ordering::Relaxed);
    stats.resyncs.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    stats.last_resync.store(now, Ordering::Relaxed);
    tx.send(Change::Resync(table.routes())).is_ok()
}

fn run(listen: Socket, cp: &ControlPlane, tx: &Sender<Change>, stats: &Stats, stop: &AtomicBool) {
    let mut buf = vec![0u8; 1 << 20];
    let mut ifs = HashMap::new();
    let mut table = Table::default();
    let mut need_resync = true;
    let mut last_map = Instant::now();
    // The last state seen of each port's interface.
    let mut links: HashMap<u16, bool> = HashMap::new();
    while !stop.load(Ordering::Acquire) {
        if need_resync {
            if !resync(&mut buf, cp, &mut ifs, &mut table, &mut links, tx, stats) {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            need_resync = false;
        }
        let n = match listen.recv(&mut &mut buf[..], 0) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) if e.raw_os_error() == Some(ENOBUFS) => {
                // Notifications were lost: read the table again. First
                // empty the socket: the kernel reports the next loss only
                // once its queue has been empty (until then it drops
                // silently), and whatever is queued is older than the dump
                // anyway. What arrives after the drain is applied after
                // the dump, in order, which leaves the kernel's state.
                stats.overruns.fetch_add(1, Ordering::Relaxed);
                loop {
                    match listen.recv(&mut &mut buf[..], 0) {
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => {}
                    }
                }
                need_resync = true;
                continue;
            }
            Err(e) => {
                eprintln!("netlink: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let mut off = 0;
        while off + 16 <= n {
            // Each message's own length (aligned to 4): one the library
            // cannot decode (an attribute newer than it) is skipped and
            // counted, not the rest of the datagram with it.
            let len =
                u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]) as usize;
            if len < 16 || off + len > n {
                break;
            }
            let next = off + ((len + 3) & !3);
            let m = match <NetlinkMessage<RouteNetlinkMessage>>::deserialize(&buf[off..off + len]) {
                Ok(m) => m,
                Err(e) => {
                    if stats.undecoded.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("netlink: a message the library cannot decode, skipped (counted from now on): {e}");
                    }
                    off = next;
                    continue;
                }
            };
            let mut route = None;
            let mut iface = None;
            match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => {
                    route = Some((r, false))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelRoute(r)) => {
                    route = Some((r, true))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n)) => {
                    iface = neighbor(&n, false, &ifs).map(|(p, a, m)| Change::Neighbor(p, a, m))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelNeighbour(n)) => {
                    iface = neighbor(&n, true, &ifs).map(|(p, a, m)| Change::Neighbor(p, a, m))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
                    iface = address_of(&a, &ifs).map(|(p, a, l)| Change::Address(p, a, l, true))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => {
                    iface = address_of(&a, &ifs).map(|(p, a, l)| Change::Address(p, a, l, false))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => {
                    if let Some((p, up)) = link_of(&l, &ifs) {
                        if links.insert(p, up) != Some(up) {
                            // The kernel flushed (or brings back) routes
                            // through it without a message each.
                            need_resync = true;
                            iface = Some(Change::Link(p, up));
                        }
                    } else if l.attributes.iter().any(|a| {
                        matches!(a, LinkAttribute::IfName(n) if cp.interfaces.iter().any(|(_, x)| x == n))
                    }) {
                        // A port's interface created (or renamed) since.
                        need_resync = true;
                    }
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) => {
                    if let Some((p, _)) = link_of(&l, &ifs) {
                        links.insert(p, false);
                        need_resync = true;
                        iface = Some(Change::Link(p, false));
                    }
                }
                _ => {}
            }
            if let Some(c) = iface {
                stats.iface_messages.fetch_add(1, Ordering::Relaxed);
                if tx.send(c).is_err() {
                    return;
                }
            }
            if let Some((msg, del)) = route {
                stats.messages.fetch_add(1, Ordering::Relaxed);
                let mut unmapped = 0;
                let mut r = convert(&msg, cp.table, &ifs, &mut unmapped);
                if r == Err(Skip::Unmapped) && last_map.elapsed() > Duration::from_secs(1) {
                    // An interface created since: look the names up again.
                    last_map = Instant::now();
                    ifs = interface_map(cp);
                    unmapped = 0;
                    r = convert(&msg, cp.table, &ifs, &mut unmapped);
                }
                stats.unmapped.fetch_add(unmapped, Ordering::Relaxed);
                let change = match r {
                    Ok((a, l, metric, p)) => {
                        let k = (a, l);
                        if del || p.is_empty() {
                            if let Some(m) = table.0.get_mut(&k) {
                                m.remove(&metric);
                                if m.is_empty() {
                                    table.0.remove(&k);
                                }
                            }
                        } else {
                            table.0.entry(k).or_default().insert(metric, p);
                        }
                        Some(match table.best(&k) {
                            Some(best) => Change::Add(best),
                            None => Change::Del(a, l),
                        })
                    }
                    Err(Skip::Other) => {
                        stats.other.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Err(Skip::Unmapped) => None,
                };
                if let Some(c) = change {
                    if tx.send(c).is_err() {
                        return;
                    }
                }
            }
            off = next;
        }
    }
}
