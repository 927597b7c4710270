//! Flow records to IPFIX collectors (`[export]`; RFC 7011 over UDP, the
//! information elements of RFC 7012 and IANA's registry): one thread,
//! never a worker, between the gateway workers' export rings
//! (`pipeline::conntrack::export`) and a UDP socket per collector.
//!
//! - Every [`PERIOD`] it empties each worker's ring into IPFIX messages of
//!   at most `max_message` bytes (under the path MTU: IPFIX over UDP is
//!   never fragmented on purpose), one data set per run of records of one
//!   template, and sends each message to every collector.
//! - Two templates, [`V4`] and [`V6`] (a record per flow and direction:
//!   the 5-tuple as received, the post-NAT addresses and ports, packets
//!   and bytes, start and end in milliseconds, ingress and egress
//!   interfaces, TCP flags, `flowEndReason`, `firewallEvent`,
//!   `biflowDirection` and a `flowId` shared by a flow's two records),
//!   sent at start and every `template_interval` (collectors over UDP
//!   learn them only so: RFC 7011 section 8.4).
//! - The header's sequence number counts the data records sent before
//!   the message; the records a full ring lost are counted into it
//!   ([`Record::lost_before`]), so the collector sees them as a gap, as
//!   IPFIX means it to.
//! - An interface is exported as its port's index plus one (0: none, the
//!   record of a packet that was not sent). For ICMP queries the
//!   identifier is the source port (translated: the post-NAPT source
//!   port), the destination port is 0, and the type and code are in
//!   `icmpTypeCodeIPv4`/`IPv6`.
//!
//! Written here rather than taken from a crate: the IPFIX crates on
//! crates.io parse messages; none builds them with templates and sequence
//! numbers kept as an exporter must, and the encoding is a few fixed
//! fields.

use anyhow::{Context, Result};
use pipeline::conntrack::export::{unwrap_ms, Record};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the rings are emptied.
pub const PERIOD: Duration = Duration::from_millis(10);
/// The IPv4 records' template ID.
pub const V4_ID: u16 = 256;
/// The IPv6 records' template ID.
pub const V6_ID: u16 = 257;
/// The NAT44 events' template ID.
pub const NAT_ID: u16 = 258;
/// The port-block events' template ID.
pub const BLOCK_ID: u16 = 259;

const HEADER: usize = 16;
const SET_HEADER: usize = 4;

/// An information element of a template: its ID and length.
type Field = (u16, u16);

/// icmpTypeCodeIPv4 and icmpTypeCodeIPv6.
const ICMP4: u16 = 32;
const ICMP6: u16 = 139;

/// IPv4 flows' template: sourceIPv4Address, destinationIPv4Address,
/// sourceTransportPort, destinationTransportPort, protocolIdentifier,
/// postNATSourceIPv4Address, postNATDestinationIPv4Address,
/// postNAPTSourceTransportPort, postNAPTDestinationTransportPort,
/// packetDeltaCount, octetDeltaCount, flowStartMilliseconds,
/// flowEndMilliseconds, ingressInterface, egressInterface, tcpControlBits,
/// icmpTypeCodeIPv4, flowEndReason, firewallEvent, biflowDirection,
/// flowId.
pub const V4: &[Field] = &[
    (8, 4),
    (12, 4),
    (7, 2),
    (11, 2),
    (4, 1),
    (225, 4),
    (226, 4),
    (227, 2),
    (228, 2),
    (2, 8),
    (1, 8),
    (152, 8),
    (153, 8),
    (10, 4),
    (14, 4),
    (6, 2),
    (ICMP4, 2),
    (136, 1),
    (233, 1),
    (239, 1),
    (148, 8),
];

/// IPv6 flows' template: as [`V4`] with sourceIPv6Address,
/// destinationIPv6Address, postNATSourceIPv6Address,
/// postNATDestinationIPv6Address and icmpTypeCodeIPv6.
pub const V6: &[Field] = &[
    (27, 16),
    (28, 16),
    (7, 2),
    (11, 2),
    (4, 1),
    (281, 16),
    (282, 16),
    (227, 2),
    (228, 2),
    (2, 8),
    (1, 8),
    (152, 8),
    (153, 8),
    (10, 4),
    (14, 4),
    (6, 2),
    (ICMP6, 2),
    (136, 1),
    (233, 1),
    (239, 1),
    (148, 8),
];

/// NAT44 events' template (RFC 8158's NAT44 session create/delete
/// template, section 4.3): observationTimeMilliseconds, natEvent,
/// sourceIPv4Address, postNATSourceIPv4Address, protocolIdentifier,
/// sourceTransportPort, postNAPTSourceTransportPort,
/// destinationIPv4Address, postNATDestinationIPv4Address,
/// destinationTransportPort, postNAPTDestinationTransportPort.
pub const NAT44: &[Field] = &[
    (323, 8),
    (230, 1),
    (8, 4),
    (225, 4),
    (4, 1),
    (7, 2),
    (227, 2),
    (12, 4),
    (226, 4),
    (11, 2),
    (228, 2),
];

/// Port-block events' template (RFC 8158's port block allocation and
/// de-allocation, section 4.7): observationTimeMilliseconds, natEvent,
/// sourceIPv4Address, postNATSourceIPv4Address, portRangeStart,
/// portRangeEnd, portRangeStepSize, portRangeNumPorts.
pub const BLOCK: &[Field] = &[
    (323, 8),
    (230, 1),
    (8, 4),
    (225, 4),
    (361, 2),
    (362, 2),
    (363, 2),
    (364, 2),
];

/// A template's record length.
const fn record_len(t: &[Field]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < t.len() {
        n += t[i].1 as usize;
        i += 1;
    }
    n
}

/// What the exporter has done (`sluice ctl show export`, the metrics).
#[derive(Debug, Default)]
pub struct Stats {
    /// IPFIX messages sent (each to every collector).
    pub messages: AtomicU64,
    /// Bytes of them.
    pub bytes: AtomicU64,
    /// Data records sent.
    pub records: AtomicU64,
    /// Template messages sent.
    pub templates: AtomicU64,
    /// Records the workers' full rings lost (as the sequence numbers
    /// announced them).
    pub lost: AtomicU64,
    /// Messages the kernel would not send to a collector or the syslog
    /// target (no route, the collector's port closed).
    pub send_errors: AtomicU64,
    /// NAT events sent as syslog lines.
    pub syslog_lines: AtomicU64,
}

/// The rings of `n` gateway workers, `ring` records each: the exporter's
/// ends and the workers'.
pub fn rings(n: usize, ring: usize) -> (Vec<rtrb::Consumer<Record>>, Vec<rtrb::Producer<Record>>) {
    (0..n)
        .map(|_| {
            let (p, c) = rtrb::RingBuffer::new(ring);
            (c, p)
        })
        .unzip()
}

/// Builds IPFIX messages from records (the thread's state, apart from
/// its sockets).
pub struct Encoder {
    domain: u32,
    max: usize,
    /// Data records sent before the message being built (and those lost).
    seq: u32,
    msg: Vec<u8>,
    /// The open data set: its template ID and where its header is.
    set: Option<(u16, usize)>,
    /// Records in the message being built.
    records: u32,
    /// Wall-clock milliseconds at the table's time 0, and the instant of
    /// it (to unwrap records' 32-bit times).
    epoch_ms: u64,
    epoch: Instant,
}

impl Encoder {
    /// An encoder for observation domain `domain`, messages of at most
    /// `max` bytes, records' times from `epoch` (the workers' time 0),
    /// which was `epoch_ms` in Unix milliseconds.
    pub fn new(domain: u32, max: usize, epoch: Instant, epoch_ms: u64) -> Self {
        Encoder {
            domain,
            max: max.max(HEADER + SET_HEADER + record_len(V6)),
            seq: 0,
            msg: Vec::with_capacity(max),
            set: None,
            records: 0,
            epoch_ms,
            epoch,
        }
    }

    fn header(&mut self, now_s: u32) {
        self.msg.clear();
        self.msg.extend_from_slice(&10u16.to_be_bytes());
        self.msg.extend_from_slice(&0u16.to_be_bytes());
        self.msg.extend_from_slice(&now_s.to_be_bytes());
        self.msg.extend_from_slice(&self.seq.to_be_bytes());
        self.msg.extend_from_slice(&self.domain.to_be_bytes());
    }

    /// The template message: both templates in one template set.
    pub fn templates(&mut self, now_s: u32) -> Vec<u8> {
        let saved = std::mem::take(&mut self.msg);
        self.header(now_s);
        let at = self.msg.len();
        self.msg.extend_from_slice(&2u16.to_be_bytes());
        self.msg.extend_from_slice(&0u16.to_be_bytes());
        for (id, fields) in [(V4_ID, V4), (V6_ID, V6), (NAT_ID, NAT44), (BLOCK_ID, BLOCK)] {
            self.msg.extend_from_slice(&id.to_be_bytes());
            self.msg
                .extend_from_slice(&(fields.len() as u16).to_be_bytes());
            for (ie, len) in fields {
                self.msg.extend_from_slice(&ie.to_be_bytes());
                self.msg.extend_from_slice(&len.to_be_bytes());
            }
        }
        let set_len = (self.msg.len() - at) as u16;
        self.msg[at + 2..at + 4].copy_from_slice(&set_len.to_be_bytes());
        let len = self.msg.len() as u16;
        self.msg[2..4].copy_from_slice(&len.to_be_bytes());
        std::mem::replace(&mut self.msg, saved)
    }

    /// Adds `r`; a message that is complete (the record did not fit, or
    /// records were lost before it) is handed to `send` first.
    pub fn add(&mut self, r: &Record, now_s: u32, send: &mut dyn FnMut(&[u8], u32)) {
        let v4 = is_v4(r.seen.src) && is_v4(r.seen.dst) && is_v4(r.sent.src) && is_v4(r.sent.dst);
        use pipeline::conntrack::export::NatEvent;
        let (id, fields) = match (r.nat, v4) {
            (Some(NatEvent::BlockAllocate | NatEvent::BlockRelease), true) => (BLOCK_ID, BLOCK),
            (Some(_), true) => (NAT_ID, NAT44),
            // NAT events are NAT44's only.
            (Some(_), false) => return,
            (None, true) => (V4_ID, V4),
            (None, false) => (V6_ID, V6),
        };
        let need = record_len(fields)
            + if self.set.is_some_and(|(s, _)| s == id) {
                0
            } else {
                SET_HEADER
            };
        if self.records > 0 && (r.lost_before > 0 || self.msg.len() + need > self.max) {
            self.flush(send);
        }
        // The records lost before this one: a gap in the sequence.
        self.seq = self.seq.wrapping_add(r.lost_before);
        if self.records == 0 {
            self.header(now_s);
        }
        if self.set.is_none_or(|(s, _)| s != id) {
            self.close_set();
            self.set = Some((id, self.msg.len()));
            self.msg.extend_from_slice(&id.to_be_bytes());
            self.msg.extend_from_slice(&0u16.to_be_bytes());
        }
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        for &(ie, _) in fields {
            self.field(ie, r, now_ms);
        }
        self.records += 1;
    }

    fn close_set(&mut self) {
        if let Some((_, at)) = self.set.take() {
            let len = (self.msg.len() - at) as u16;
            self.msg[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Hands the message being built to `send` (with its record count),
    /// if it has records.
    pub fn flush(&mut self, send: &mut dyn FnMut(&[u8], u32)) {
        if self.records == 0 {
            return;
        }
        self.close_set();
        let len = self.msg.len() as u16;
        self.msg[2..4].copy_from_slice(&len.to_be_bytes());
        send(&self.msg, self.records);
        self.seq = self.seq.wrapping_add(self.records);
        self.records = 0;
        self.msg.clear();
    }

    /// Writes information element `ie` of `r`.
    fn field(&mut self, ie: u16, r: &Record, now_ms: u64) {
        let icmp = matches!(r.seen.proto, 1 | 58);
        let (tcp_flags, type_code) = match r.seen.proto {
            6 => (r.flags, 0),
            1 | 58 => (0, r.flags),
            _ => (0, 0),
        };
        let port = |p: u16, dst: bool| if icmp && dst { 0 } else { p };
        let epoch_ms = self.epoch_ms;
        let time = |ms: u32| epoch_ms + unwrap_ms(ms, now_ms);
        let iface = |p: u16| {
            if p == u16::MAX {
                0u32
            } else {
                u32::from(p) + 1
            }
        };
        let m = &mut self.msg;
        match ie {
            8 => m.extend_from_slice(&(r.seen.src as u32).to_be_bytes()),
            12 => m.extend_from_slice(&(r.seen.dst as u32).to_be_bytes()),
            27 => m.extend_from_slice(&r.seen.src.to_be_bytes()),
            28 => m.extend_from_slice(&r.seen.dst.to_be_bytes()),
            225 => m.extend_from_slice(&(r.sent.src as u32).to_be_bytes()),
            226 => m.extend_from_slice(&(r.sent.dst as u32).to_be_bytes()),
            281 => m.extend_from_slice(&r.sent.src.to_be_bytes()),
            282 => m.extend_from_slice(&r.sent.dst.to_be_bytes()),
            7 => m.extend_from_slice(&port(r.seen.sport, false).to_be_bytes()),
            11 => m.extend_from_slice(&port(r.seen.dport, true).to_be_bytes()),
            227 => m.extend_from_slice(&port(r.sent.sport, false).to_be_bytes()),
            228 => m.extend_from_slice(&port(r.sent.dport, true).to_be_bytes()),
            4 => m.push(r.seen.proto),
            2 => m.extend_from_slice(&r.packets.to_be_bytes()),
            1 => m.extend_from_slice(&r.bytes.to_be_bytes()),
            152 => m.extend_from_slice(&time(r.start_ms).to_be_bytes()),
            153 => m.extend_from_slice(&time(r.end_ms).to_be_bytes()),
            10 => m.extend_from_slice(&iface(r.in_port).to_be_bytes()),
            14 => m.extend_from_slice(&iface(r.out_port).to_be_bytes()),
            6 => m.extend_from_slice(&tcp_flags.to_be_bytes()),
            ICMP4 | ICMP6 => m.extend_from_slice(&type_code.to_be_bytes()),
            136 => m.push(r.reason as u8),
            233 => m.push(r.event as u8),
            239 => m.push(if r.reply { 2 } else { 1 }),
            148 => m.extend_from_slice(&r.flow_id.to_be_bytes()),
            323 => m.extend_from_slice(&time(r.start_ms).to_be_bytes()),
            230 => m.push(r.nat.map_or(0, |e| e as u8)),
            // A block: the source and destination ports as sent are its
            // first and last (`pipeline::conntrack::blocks::block_tuples`).
            361 => m.extend_from_slice(&r.sent.sport.to_be_bytes()),
            362 => m.extend_from_slice(&r.sent.dport.to_be_bytes()),
            363 => m.extend_from_slice(&1u16.to_be_bytes()),
            364 => m.extend_from_slice(
                &(r.sent.dport.wrapping_sub(r.sent.sport).wrapping_add(1)).to_be_bytes(),
            ),
            _ => unreachable!("information element {ie} is in no template"),
        }
    }
}

fn is_v4(a: u128) -> bool {
    a >> 32 == 0xffff
}

impl Encoder {
    /// The Unix milliseconds of a record's time `ms` (the workers' clock).
    pub fn wall_ms(&self, ms: u32) -> u64 {
        self.epoch_ms + unwrap_ms(ms, self.epoch.elapsed().as_millis() as u64)
    }
}

/// NAT event `r` as an RFC 5424 syslog line (facility local0; info,
/// ports exhausted: warning) from `host`'s Sluice `pid` at Unix
/// milliseconds `at`: the same facts as the IPFIX event.
pub fn syslog_line(r: &Record, at: u64, host: &str, pid: u32) -> Option<String> {
    use pipeline::conntrack::export::NatEvent;
    let ev = r.nat?;
    let ts = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at));
    let (o, x) = (&r.seen, &r.sent);
    let icmp = matches!(o.proto, 1 | 58);
    let ep = |a: u128, p: u16| {
        let a = pipeline::conntrack::address(a);
        if icmp {
            format!("{a} id {p}")
        } else {
            format!("{a}:{p}")
        }
    };
    let (pri, what) = match ev {
        NatEvent::SessionCreate => (134, "session create"),
        NatEvent::SessionDelete => (134, "session delete"),
        NatEvent::PortsExhausted => (132, "ports exhausted"),
        NatEvent::BlockAllocate | NatEvent::BlockRelease => {
            let what = if ev == NatEvent::BlockAllocate {
                "allocate"
            } else {
                "release"
            };
            return Some(format!(
                "<134>1 {ts} {host} sluice {pid} NAT44 - NAT44 port block {what} {} as {} ports {}-{}",
                pipeline::conntrack::address(o.src),
                pipeline::conntrack::address(x.src),
                x.sport,
                x.dport
            ));
        }
    };
    let proto = match o.proto {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 => "icmp".to_string(),
        p => format!("proto {p}"),
    };
    let tail = if ev == NatEvent::PortsExhausted {
        format!("(no free port on {})", pipeline::conntrack::address(x.src))
    } else {
        format!("as {} -> {}", ep(x.src, x.sport), ep(x.dst, x.dport))
    };
    Some(format!(
        "<{pri}>1 {ts} {host} sluice {pid} NAT44 - NAT44 {what} {proto} {} -> {} {tail}",
        ep(o.src, o.sport),
        ep(o.dst, o.dport),
    ))
}

/// This host's name, as syslog lines carry it (`-`, RFC 5424's nil,
/// when unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "-".to_string())
}

/// Unix seconds now (an IPFIX header's export time).
fn unix_s() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// Starts the exporter over the workers' rings (`rings`, the exporter's
/// ends), the records' times counted from `epoch` (the workers' time 0);
/// it stops, after a last emptying of the rings, when `stop` is set.
pub fn start(
    cfg: &crate::config::ExportConfig,
    mut rings: Vec<rtrb::Consumer<Record>>,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> Result<(std::thread::JoinHandle<()>, Arc<Stats>)> {
    let mut socks = Vec::new();
    for c in &cfg.collectors {
        let any: SocketAddr = if c.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let s = UdpSocket::bind(any).with_context(|| format!("[export]: a socket for {c}"))?;
        s.connect(c)
            .with_context(|| format!("[export] collectors: {c}"))?;
        socks.push(s);
    }
    let syslog = match cfg.syslog {
        Some(to) => {
            let any: SocketAddr = if to.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let s = UdpSocket::bind(any)
                .with_context(|| format!("[export] syslog: a socket for {to}"))?;
            s.connect(to)
                .with_context(|| format!("[export] syslog: {to}"))?;
            Some(s)
        }
        None => None,
    };
    let (host, pid) = (hostname(), std::process::id());
    let stats = Arc::new(Stats::default());
    let st = stats.clone();
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .saturating_sub(epoch.elapsed().as_millis() as u64);
    let mut enc = Encoder::new(cfg.domain, cfg.max_message, epoch, epoch_ms);
    let every = Duration::from_secs(cfg.template_interval_s);
    let h = std::thread::Builder::new()
        .name("sluice-export".into())
        .spawn(move || {
            let mut send = |msg: &[u8], records: u32| {
                for s in &socks {
                    if s.send(msg).is_err() {
                        st.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                st.messages.fetch_add(1, Ordering::Relaxed);
                st.bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
                st.records.fetch_add(u64::from(records), Ordering::Relaxed);
            };
            let mut next_templates = Instant::now();
            loop {
                let last = stop.load(Ordering::Acquire);
                let now_s = unix_s();
                if !socks.is_empty() && Instant::now() >= next_templates {
                    let t = enc.templates(now_s);
                    for s in &socks {
                        if s.send(&t).is_err() {
                            st.send_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    st.templates.fetch_add(1, Ordering::Relaxed);
                    next_templates = Instant::now() + every;
                }
                for ring in &mut rings {
                    while let Ok(r) = ring.pop() {
                        st.lost
                            .fetch_add(u64::from(r.lost_before), Ordering::Relaxed);
                        if let (Some(s), Some(line)) = (
                            &syslog,
                            syslog_line(&r, enc.wall_ms(r.start_ms), &host, pid),
                        ) {
                            if s.send(line.as_bytes()).is_ok() {
                                st.syslog_lines.fetch_add(1, Ordering::Relaxed);
                            } else {
                                st.send_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if !socks.is_empty() {
                            enc.add(&r, now_s, &mut send);
                        }
                    }
                }
                enc.flush(&mut send);
                if last {
                    return;
                }
                std::thread::sleep(PERIOD);
            }
        })?;
    Ok((h, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::conntrack::export::{EndReason, FirewallEvent};
    use pipeline::conntrack::Tuple;

    fn rec(i: u16, v6: bool, lost: u32) -> Record {
        let a = |x: u32| {
            if v6 {
                0x2001_0db8_u128 << 96 | u128::from(x)
            } else {
                0xffff_0000_0000 | u128::from(x)
            }
        };
        let seen = Tuple {
            src: a(0xc612_0002),
            dst: a(0xcb00_7107),
            sport: 1000 + i,
            dport: 53,
            proto: 17,
            zone: 0,
        };
        Record {
            seen,
            sent: Tuple {
                src: a(0xc612_0101),
                sport: 2000 + i,
                ..seen
            },
            packets: 3,
            bytes: 300,
            start_ms: 1000,
            end_ms: 1500,
            flow_id: 7,
            in_port: 0,
            out_port: 1,
            flags: 0,
            reason: EndReason::Idle,
            event: FirewallEvent::Deleted,
            reply: false,
            lost_before: lost,
            nat: None,
        }
    }

    /// Messages as sent: (bytes, records).
    fn encode(recs: &[Record], max: usize) -> Vec<(Vec<u8>, u32)> {
        // The workers' time 0 two seconds ago (a record's times are past).
        let epoch = Instant::now() - Duration::from_secs(2);
        let mut e = Encoder::new(9, max, epoch, 1_700_000_000_000);
        let mut out = Vec::new();
        let mut send = |m: &[u8], n: u32| out.push((m.to_vec(), n));
        for r in recs {
            e.add(r, 1_700_000_000, &mut send);
        }
        e.flush(&mut send);
        out
    }

    fn u16_at(b: &[u8], i: usize) -> u16 {
        u16::from_be_bytes([b[i], b[i + 1]])
    }
    fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_be_bytes(b[i..i + 4].try_into().unwrap())
    }

    #[test]
    fn a_record_is_laid_out_as_its_template_says() {
        assert_eq!(record_len(V4), 80);
        assert_eq!(record_len(V6), 128);
        let out = encode(&[rec(0, false, 0)], 1400);
        let (m, n) = &out[0];
        assert_eq!(*n, 1);
        assert_eq!(u16_at(m, 0), 10, "version");
        assert_eq!(usize::from(u16_at(m, 2)), m.len());
        assert_eq!(u32_at(m, 4), 1_700_000_000, "export time");
        assert_eq!(u32_at(m, 8), 0, "sequence");
        assert_eq!(u32_at(m, 12), 9, "domain");
        assert_eq!((u16_at(m, 16), u16_at(m, 18)), (V4_ID, 4 + 80));
        let r = &m[20..];
        assert_eq!(u32_at(r, 0), 0xc612_0002);
        assert_eq!(u32_at(r, 4), 0xcb00_7107);
        assert_eq!((u16_at(r, 8), u16_at(r, 10), r[12]), (1000, 53, 17));
        assert_eq!(u32_at(r, 13), 0xc612_0101, "postNATSourceIPv4Address");
        assert_eq!(u16_at(r, 21), 2000, "postNAPTSourceTransportPort");
        assert_eq!(u64::from_be_bytes(r[25..33].try_into().unwrap()), 3);
        assert_eq!(u64::from_be_bytes(r[33..41].try_into().unwrap()), 300);
        let start = u64::from_be_bytes(r[41..49].try_into().unwrap());
        let end = u64::from_be_bytes(r[49..57].try_into().unwrap());
        assert_eq!((start, end), (1_700_000_001_000, 1_700_000_001_500));
        assert_eq!((u32_at(r, 57), u32_at(r, 61)), (1, 2), "interfaces");
        assert_eq!(u16_at(r, 67), 0, "no ICMP type");
        assert_eq!((r[69], r[70], r[71]), (1, 2, 1), "reason, event, direction");
        assert_eq!(u64::from_be_bytes(r[72..80].try_into().unwrap()), 7);
    }

    #[test]
    fn messages_stay_under_the_limit_and_count_records_and_gaps() {
        // 30 records, v4 and v6 mixed, 400-byte messages; 5 lost before
        // the 20th.
        let recs: Vec<Record> = (0..30)
            .map(|i| rec(i, i % 3 == 0, if i == 19 { 5 } else { 0 }))
            .collect();
        let out = encode(&recs, 400);
        let mut seq = 0;
        let mut total = 0;
        for (m, n) in &out {
            assert!(m.len() <= 400, "{}", m.len());
            assert_eq!(usize::from(u16_at(m, 2)), m.len());
            // The sets fill the message exactly, each of whole records.
            let mut at = HEADER;
            let mut in_msg = 0;
            while at < m.len() {
                let (id, len) = (u16_at(m, at), usize::from(u16_at(m, at + 2)));
                let each = if id == V4_ID { 80 } else { 128 };
                assert_eq!((len - SET_HEADER) % each, 0);
                in_msg += (len - SET_HEADER) / each;
                at += len;
            }
            assert_eq!(at, m.len());
            assert_eq!(in_msg as u32, *n);
            let s = u32_at(m, 8);
            assert!(s == seq || s == seq + 5, "sequence {s} after {seq}");
            seq = s + n;
            total += n;
        }
        assert_eq!(total, 30);
        assert_eq!(seq, 35, "the lost records counted in");
    }

    #[test]
    fn a_nat_event_is_its_own_template_and_a_syslog_line() {
        use pipeline::conntrack::export::NatEvent;
        let mut r = rec(0, false, 0);
        r.nat = Some(NatEvent::SessionCreate);
        let out = encode(&[r, rec(1, false, 0)], 1400);
        let m = &out[0].0;
        assert_eq!(out[0].1, 2);
        assert_eq!((u16_at(m, 16), u16_at(m, 18)), (NAT_ID, 4 + 34));
        let e = &m[20..];
        assert_eq!(e[8], 4, "natEvent: NAT44 session create");
        assert_eq!((u32_at(e, 9), u32_at(e, 13)), (0xc612_0002, 0xc612_0101));
        assert_eq!((u16_at(e, 18), u16_at(e, 20)), (1000, 2000), "ports");
        assert_eq!(u16_at(m, 20 + 34), V4_ID, "then the flow's set");
        let line = syslog_line(&r, 1_700_000_000_123, "gw1", 42).unwrap();
        assert_eq!(
            line,
            "<134>1 2023-11-14T22:13:20.123Z gw1 sluice 42 NAT44 - NAT44 session create udp 198.18.0.2:1000 -> 203.0.113.7:53 as 198.18.1.1:2000 -> 203.0.113.7:53"
        );
        assert!(
            syslog_line(&rec(0, false, 0), 0, "gw1", 1).is_none(),
            "flows are not lines"
        );
        // NAT events are NAT44's: an IPv6 one is not encoded.
        let mut v6 = rec(0, true, 0);
        v6.nat = Some(NatEvent::SessionDelete);
        assert!(encode(&[v6], 1400).is_empty());
    }

    #[test]
    fn the_template_message_holds_both_templates() {
        let mut e = Encoder::new(1, 1400, Instant::now(), 0);
        let t = e.templates(5);
        assert_eq!(usize::from(u16_at(&t, 2)), t.len());
        assert_eq!(u16_at(&t, 16), 2, "template set");
        assert_eq!((u16_at(&t, 20), u16_at(&t, 22)), (V4_ID, V4.len() as u16));
        let v6_at = 24 + 4 * V4.len();
        assert_eq!(
            (u16_at(&t, v6_at), u16_at(&t, v6_at + 2)),
            (V6_ID, V6.len() as u16)
        );
        let nat_at = v6_at + 4 + 4 * V6.len();
        assert_eq!(
            (u16_at(&t, nat_at), u16_at(&t, nat_at + 2)),
            (NAT_ID, NAT44.len() as u16)
        );
        let block_at = nat_at + 4 + 4 * NAT44.len();
        assert_eq!(
            (u16_at(&t, block_at), u16_at(&t, block_at + 2)),
            (BLOCK_ID, BLOCK.len() as u16)
        );
        assert_eq!(
            t.len(),
            20 + 16 + 4 * (V4.len() + V6.len() + NAT44.len() + BLOCK.len())
        );
    }

    #[test]
    fn a_port_block_event_has_its_range() {
        use pipeline::conntrack::blocks::{block_tuples, Change};
        use pipeline::conntrack::export::NatEvent;
        let (seen, sent) = block_tuples(&Change {
            inside: 0x6440_0005,
            outside: 0xc613_0001,
            lo: 1536,
            hi: 2047,
        });
        let mut r = rec(0, false, 0);
        (r.seen, r.sent, r.nat) = (seen, sent, Some(NatEvent::BlockAllocate));
        let out = encode(&[r], 1400);
        let m = &out[0].0;
        assert_eq!(record_len(BLOCK), 25);
        assert_eq!((u16_at(m, 16), u16_at(m, 18)), (BLOCK_ID, 4 + 25));
        let e = &m[20..];
        assert_eq!(e[8], 16, "natEvent: port block allocation");
        assert_eq!((u32_at(e, 9), u32_at(e, 13)), (0x6440_0005, 0xc613_0001));
        assert_eq!(
            (u16_at(e, 17), u16_at(e, 19), u16_at(e, 21), u16_at(e, 23)),
            (1536, 2047, 1, 512),
            "start, end, step, ports"
        );
        r.nat = Some(NatEvent::BlockRelease);
        assert_eq!(
            syslog_line(&r, 1_700_000_000_123, "gw1", 42).unwrap(),
            "<134>1 2023-11-14T22:13:20.123Z gw1 sluice 42 NAT44 - NAT44 port block release 100.64.0.5 as 198.19.0.1 ports 1536-2047"
        );
    }
}
