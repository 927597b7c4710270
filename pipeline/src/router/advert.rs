//! Router Advertisements (RFC 4861 6.2): what lets a host on a port
//! configure itself with no static address (SLAAC, RFC 4862), find its
//! default router, the link's MTU, its DNS servers (RDNSS, RFC 8106) and
//! the NAT64 prefix (PREF64, RFC 8781), as radvd, FRR's zebra and VPP's
//! `ip6 nd` do for a Linux or VPP router.
//!
//! A port with an [`Advert`] sends one from its link-local address
//! (fe80:: with the EUI-64 of its MAC, which the router answers Neighbor
//! Solicitations and echo requests for) to all nodes (ff02::1): three
//! at most 16 s apart when it starts or its settings change, then one
//! every `min..=max` interval, at random (RFC 4861 6.2.4). Only the
//! worker the appliance names for the port sends these
//! ([`Router::advertise_on`]), so that hosts see one router, not one per
//! worker. A Router Solicitation is answered by the worker that gets it,
//! at once, within the ICMP rate limit: to the soliciting host (unicast,
//! as radvd's `AdvRASolicitedUnicast` and RFC 7772 advise), or to all
//! nodes when it came from the unspecified address.

use super::{emit, Event, Router};
use crate::fwd::Frame;
use crate::verdict::{DropReason, Verdict};
use crate::wire::{EtherType, MacAddr, ETHERNET_HEADER_LEN as ETH};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// What a port advertises (radvd's interface settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advert {
    /// MaxRtrAdvInterval (ms).
    pub max_interval_ms: u32,
    /// MinRtrAdvInterval (ms).
    pub min_interval_ms: u32,
    /// Router Lifetime (s): how long hosts keep the router as a default
    /// router; 0: not a default router.
    pub lifetime_s: u16,
    /// Cur Hop Limit hosts should use (0: unspecified).
    pub hop_limit: u8,
    /// The M flag: addresses from DHCPv6.
    pub managed: bool,
    /// The O flag: other settings from DHCPv6.
    pub other: bool,
    /// The MTU option's value (`None`: not sent).
    pub mtu: Option<u32>,
    /// Prefix Information options.
    pub prefixes: Vec<AdvPrefix>,
    /// Recursive DNS servers (RFC 8106).
    pub rdnss: Vec<Ipv6Addr>,
    /// How long hosts keep them, and the search list (s).
    pub rdnss_lifetime_s: u32,
    /// The DNS search list (RFC 8106 DNSSL): domain names, each of
    /// labels of 1 to 63 bytes (the config checks them).
    pub dnssl: Vec<String>,
    /// NAT64 prefixes (RFC 8781: /32, /40, /48, /56, /64 or /96).
    pub pref64: Vec<(Ipv6Addr, u8)>,
    /// How long hosts keep them (s, a multiple of 8 up to 65,528).
    pub pref64_lifetime_s: u16,
}

/// A Prefix Information option (RFC 4861 4.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdvPrefix {
    /// The prefix (its host bits are cleared as it is sent).
    pub prefix: Ipv6Addr,
    /// Its length.
    pub len: u8,
    /// The L flag: the prefix is on the link.
    pub on_link: bool,
    /// The A flag: hosts may form addresses in it (SLAAC, /64 only).
    pub autonomous: bool,
    /// Valid Lifetime (s).
    pub valid_s: u32,
    /// Preferred Lifetime (s).
    pub preferred_s: u32,
}

/// Advertisements sent at start, or after a change, at most 16 s apart
/// (RFC 4861's MAX_INITIAL_RTR_ADVERTISEMENTS and _INTERVAL).
const INITIAL: u8 = 3;
const INITIAL_MAX_NS: u64 = 16_000_000_000;

/// Advertisements to all nodes answering solicitations are at least this
/// far apart (RFC 4861 10: MIN_DELAY_BETWEEN_RAS, a MUST in 6.2.6).
const MIN_DELAY_NS: u64 = 3_000_000_000;

/// All nodes (ff02::1) and its MAC.
const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

/// The largest advertisement, tags included (the config bounds its
/// options' counts).
pub const MAX_FRAME: usize = 1522;

/// A port's link-local address: fe80::/64 with the modified EUI-64 of
/// `mac` (RFC 4291 appendix A), as Linux forms it.
pub fn link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from(
        0xfe80u128 << 112
            | u128::from(u64::from_be_bytes([
                m[0] ^ 2,
                m[1],
                m[2],
                0xff,
                0xfe,
                m[3],
                m[4],
                m[5],
            ])),
    )
}

/// The length of domain name `n` in DNS's wire form: each label with its
/// length byte, and the root's zero.
fn wire_len(n: &str) -> usize {
    n.split('.')
        .filter(|l| !l.is_empty())
        .map(|l| 1 + l.len())
        .sum::<usize>()
        + 1
}

impl Advert {
    /// The last advertisement of these settings: router lifetime 0, the
    /// rest as it was (RFC 4861 6.2.5).
    fn retired(&self) -> Advert {
        Advert {
            lifetime_s: 0,
            ..self.clone()
        }
    }

    /// The ICMPv6 message's length.
    fn len(&self) -> usize {
        let rdnss = if self.rdnss.is_empty() {
            0
        } else {
            8 + 16 * self.rdnss.len()
        };
        16 + 8
            + if self.mtu.is_some() { 8 } else { 0 }
            + 32 * self.prefixes.len()
            + rdnss
            + self.dnssl_len()
            + 16 * self.pref64.len()
    }

    /// The DNSSL option's length: 8 bytes and the names in DNS's wire
    /// form (RFC 1035 3.1), padded to 8 (none without names).
    fn dnssl_len(&self) -> usize {
        if self.dnssl.is_empty() {
            return 0;
        }
        let names: usize = self.dnssl.iter().map(|n| wire_len(n)).sum();
        8 + names.div_ceil(8) * 8
    }

    /// Writes the advertisement as a whole frame into `b` from `mac` and
    /// `src` (the port's link-local address) to `dst_mac`/`dst`: its
    /// length, `None` when `b` is too short.
    pub fn write(
        &self,
        b: &mut [u8],
        mac: MacAddr,
        src: Ipv6Addr,
        dst_mac: [u8; 6],
        dst: [u8; 16],
    ) -> Option<usize> {
        let len = self.len();
        let l4 = ETH + 40;
        let b = b.get_mut(..l4 + len)?;
        emit::ethernet(b, dst_mac, mac, EtherType::IPV6);
        let m = &mut b[l4..];
        m.fill(0);
        m[0] = 134;
        m[4] = self.hop_limit;
        m[5] = u8::from(self.managed) << 7 | u8::from(self.other) << 6;
        m[6..8].copy_from_slice(&self.lifetime_s.to_be_bytes());
        // Reachable Time and Retrans Timer 0: unspecified.
        let mut o = 16;
        // Source link-layer address.
        m[o..o + 2].copy_from_slice(&[1, 1]);
        m[o + 2..o + 8].copy_from_slice(&mac.0);
        o += 8;
        if let Some(mtu) = self.mtu {
            m[o..o + 2].copy_from_slice(&[5, 1]);
            m[o + 4..o + 8].copy_from_slice(&mtu.to_be_bytes());
            o += 8;
        }
        for p in &self.prefixes {
            m[o..o + 4].copy_from_slice(&[
                3,
                4,
                p.len,
                u8::from(p.on_link) << 7 | u8::from(p.autonomous) << 6,
            ]);
            m[o + 4..o + 8].copy_from_slice(&p.valid_s.to_be_bytes());
            m[o + 8..o + 12].copy_from_slice(&p.preferred_s.to_be_bytes());
            let net = u128::from(p.prefix) & crate::prefix::mask6(p.len);
            m[o + 16..o + 32].copy_from_slice(&net.to_be_bytes());
            o += 32;
        }
        if !self.rdnss.is_empty() {
            m[o] = 25;
            m[o + 1] = (1 + 2 * self.rdnss.len()) as u8;
            m[o + 4..o + 8].copy_from_slice(&self.rdnss_lifetime_s.to_be_bytes());
            o += 8;
            for a in &self.rdnss {
                m[o..o + 16].copy_from_slice(&a.octets());
                o += 16;
            }
        }
        if !self.dnssl.is_empty() {
            let len = self.dnssl_len();
            m[o] = 31;
            m[o + 1] = (len / 8) as u8;
            m[o + 4..o + 8].copy_from_slice(&self.rdnss_lifetime_s.to_be_bytes());
            let mut w = o + 8;
            for n in &self.dnssl {
                for l in n.split('.').filter(|l| !l.is_empty()) {
                    m[w] = l.len() as u8;
                    m[w + 1..w + 1 + l.len()].copy_from_slice(l.as_bytes());
                    w += 1 + l.len();
                }
                w += 1; // the root label (the padding is zero too)
            }
            o += len;
        }
        for &(p, plen) in &self.pref64 {
            let plc: u16 = match plen {
                96 => 0,
                64 => 1,
                56 => 2,
                48 => 3,
                40 => 4,
                _ => 5,
            };
            m[o..o + 2].copy_from_slice(&[38, 2]);
            let scaled = (self.pref64_lifetime_s / 8) << 3 | plc;
            m[o + 2..o + 4].copy_from_slice(&scaled.to_be_bytes());
            m[o + 4..o + 16].copy_from_slice(&p.octets()[..12]);
            o += 16;
        }
        debug_assert_eq!(o, len);
        emit::icmp6(b, 255, src.octets(), dst, len);
        Some(l4 + len)
    }
}

/// This worker's periodic advertisements on one port.
#[derive(Clone, Debug)]
pub(super) struct AdvState {
    port: u16,
    /// When the next one is due (ns; 0: at once).
    next_ns: u64,
    /// Initial advertisements left to send.
    initial: u8,
    /// The last one to send (router lifetime 0; RFC 4861 6.2.5): the
    /// worker is stopping, or a reload took the advertisement away (the
    /// old one).
    ceasing: Option<Advert>,
}

impl Router {
    /// Makes this worker the one that sends `ports`' periodic Router
    /// Advertisements (those with an [`Advert`], now or after a reload;
    /// the appliance names one worker a port). Each starts with its
    /// initial ones.
    pub fn advertise_on(&mut self, ports: &[u16]) {
        self.adverts = ports
            .iter()
            .map(|&port| AdvState {
                port,
                next_ns: 0,
                initial: INITIAL,
                ceasing: None,
            })
            .collect();
        self.adv_next_ns = if self.adverts.is_empty() { u64::MAX } else { 0 };
    }

    /// After a reload: advertisements whose settings changed start over
    /// with their initial ones (RFC 4861 6.2.4); one taken away sends a
    /// last one with router lifetime 0 (6.2.5).
    pub(super) fn adverts_changed(&mut self, old: &super::RouterConfig) {
        for a in &mut self.adverts {
            let p = usize::from(a.port);
            let (was, now) = (old.adverts.get(p), self.cfg.adverts.get(p));
            if was != now {
                a.next_ns = 0;
                a.initial = INITIAL;
                a.ceasing = match (was, now) {
                    (Some(Some(w)), None | Some(None)) => Some(w.retired()),
                    _ => None,
                };
                self.adv_next_ns = 0;
            }
        }
    }

    /// Stopping (RFC 4861 6.2.5): one last advertisement on each of this
    /// worker's ports, with a router lifetime of 0, so that hosts stop
    /// sending through this router at once rather than when the lifetime
    /// ends.
    pub(super) fn retire_adverts(&mut self) {
        let mut states = std::mem::take(&mut self.adverts);
        for a in &mut states {
            if let Some(last) = a
                .ceasing
                .take()
                .or_else(|| Some(self.advert(a.port)?.retired()))
            {
                a.ceasing = Some(last);
                a.next_ns = 0;
                self.adv_next_ns = 0;
            } else {
                a.next_ns = u64::MAX;
            }
        }
        self.adverts = states;
    }

    /// What port `port` advertises, if anything.
    pub fn advert(&self, port: u16) -> Option<&Advert> {
        self.cfg.adverts.get(usize::from(port))?.as_ref()
    }

    /// The link-local address of a port that has IPv6 addresses.
    pub fn link_local6(&self, port: u16) -> Option<Ipv6Addr> {
        let i = self.iface(port)?;
        (!i.ipv6.is_empty()).then(|| link_local(i.mac))
    }

    /// Whether periodic advertisements are due (in [`Router::tick`]'s time).
    #[inline]
    pub(super) fn adverts_due(&self) -> bool {
        self.now_ns >= self.adv_next_ns
    }

    /// Sends the periodic advertisements that are due through `send`, and
    /// sets when each is due next.
    pub(super) fn send_adverts(&mut self, send: &mut dyn FnMut(u16, &[u8]) -> bool) {
        if !self.adverts_due() {
            return;
        }
        let now = self.now_ns;
        let mut next = u64::MAX;
        let mut frame = [0u8; MAX_FRAME];
        let mut states = std::mem::take(&mut self.adverts);
        for a in &mut states {
            if a.next_ns > now {
                next = next.min(a.next_ns);
                continue;
            }
            let ceasing = a.ceasing.take();
            let (Some(ad), Some(ll), Some(iface)) = (
                ceasing.as_ref().or(self.advert(a.port)),
                self.link_local6(a.port),
                self.iface(a.port),
            ) else {
                // Not advertising (until a reload makes it so).
                a.next_ns = u64::MAX;
                continue;
            };
            let last_one = ceasing.is_some();
            let (lo, hi) = (
                u64::from(ad.min_interval_ms) * 1_000_000,
                u64::from(ad.max_interval_ms) * 1_000_000,
            );
            // A sub-interface's leaves its port with its tags, written
            // after the MACs once the rest is in place behind them.
            let (mac, down, vlan) = (iface.mac, iface.down, iface.vlan);
            let t = vlan.map_or(0, |v| v.tag_len());
            let body = &mut frame[t..];
            if let Some(n) = ad.write(body, mac, ll, ALL_NODES_MAC, ALL_NODES) {
                let port = match vlan {
                    Some(v) => {
                        frame.copy_within(t..t + 12, 0);
                        frame[12..12 + t].copy_from_slice(&v.tag_bytes()[..t]);
                        v.port
                    }
                    None => a.port,
                };
                if !down && send(port, &frame[..n + t]) {
                    self.count(Event::RaSent);
                }
            }
            if last_one {
                a.next_ns = u64::MAX;
                continue;
            }
            let mut wait = lo + self.adv_random() % (hi - lo + 1);
            if a.initial > 0 {
                a.initial -= 1;
                wait = wait.min(INITIAL_MAX_NS);
            }
            a.next_ns = now + wait.max(1);
            next = next.min(a.next_ns);
        }
        self.adverts = states;
        self.adv_next_ns = next;
    }

    /// A random number for the advertisements' intervals (xorshift).
    fn adv_random(&mut self) -> u64 {
        let mut x = self.adv_seed ^ self.now_ns;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.adv_seed = x;
        x
    }

    /// A Router Solicitation (ICMPv6 at `off`, the frame's IPv6 payload
    /// `plen` bytes): answered with the port's advertisement in place;
    /// `None` when the port does not advertise (the caller goes on as
    /// before: the kernel's mirror, or dropped).
    pub(super) fn solicited(
        &mut self,
        pkt: &mut impl Frame,
        in_port: u16,
        off: usize,
        plen: usize,
    ) -> Option<Verdict> {
        // The settings through a second handle on them (no copy: a flood
        // of solicitations allocates nothing).
        let cfg = Arc::clone(&self.cfg);
        let ad = cfg.adverts.get(usize::from(in_port))?.as_ref()?;
        let ll = self.link_local6(in_port)?;
        let mac = self.iface(in_port)?.mac;
        let b = pkt.bytes();
        let l4 = ETH + off;
        let end = ETH + 40 + plen;
        // RFC 4861 6.1.1: hop limit 255, code 0, 8 bytes at least, options
        // of non-zero length within the message.
        if b[ETH + 7] != 255 || off != 40 || end > b.len() || end < l4 + 8 || b[l4 + 1] != 0 {
            return Some(Verdict::Drop(DropReason::Malformed));
        }
        let mut src = [0u8; 16];
        src.copy_from_slice(&b[ETH + 8..ETH + 24]);
        let unspecified = src == [0; 16];
        let mut lla = None;
        let mut o = l4 + 8;
        while o < end {
            let len = usize::from(*b.get(o + 1)?) * 8;
            if len == 0 || o + len > end {
                return Some(Verdict::Drop(DropReason::Malformed));
            }
            if b[o] == 1 && len == 8 {
                lla = Some(MacAddr(b[o + 2..o + 8].try_into().expect("6 bytes")));
            }
            o += len;
        }
        if unspecified && lla.is_some() {
            // RFC 4861 6.1.1: no source link-layer address from ::.
            return Some(Verdict::Drop(DropReason::Malformed));
        }
        if let Some(m) = lla {
            if self.learn_ip(in_port, IpAddr::V6(Ipv6Addr::from(src)), m) {
                self.count(Event::NdLearned);
            }
        }
        let (dst_mac, dst) = if unspecified {
            // To all nodes: one each MIN_DELAY_BETWEEN_RAS at most (a
            // flood of solicitations from :: must not become one of
            // multicast advertisements); the host asks again.
            let i = usize::from(in_port);
            if self.adv_multicast_ns.len() <= i {
                self.adv_multicast_ns.resize(i + 1, 0);
            }
            let last = self.adv_multicast_ns[i];
            if last != 0 && self.now_ns.saturating_sub(last) < MIN_DELAY_NS {
                self.count(Event::RaLimited);
                return Some(Verdict::Drop(DropReason::Consumed));
            }
            self.adv_multicast_ns[i] = self.now_ns.max(1);
            (ALL_NODES_MAC, ALL_NODES)
        } else {
            let from = lla.map_or([b[6], b[7], b[8], b[9], b[10], b[11]], |m| m.0);
            (from, src)
        };
        if !self.take_token() || !pkt.set_len(ETH + 40 + ad.len()) {
            return Some(Verdict::Drop(DropReason::Consumed));
        }
        ad.write(pkt.bytes_mut(), mac, ll, dst_mac, dst)?;
        self.count(Event::RaSolicited);
        Some(Verdict::Forward(in_port))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        fib, ip6, ipv6_bursts_as_each, ipv6_frames, router, tagged, udp6, v6addr, vlan_router,
        HOST, R0, R1,
    };
    use super::*;
    use crate::checksum;
    use crate::fwd::ForwardMode;
    use crate::wire::{IpProto, Ipv6Packet};
    use std::sync::Arc;

    /// Port 0 advertises its /64, a DNS server and the NAT64 prefix.
    fn advert() -> Advert {
        Advert {
            max_interval_ms: 600_000,
            min_interval_ms: 200_000,
            lifetime_s: 1800,
            hop_limit: 64,
            managed: false,
            other: true,
            mtu: Some(1500),
            prefixes: vec![AdvPrefix {
                prefix: "2001:db8:18::1".parse().unwrap(),
                len: 64,
                on_link: true,
                autonomous: true,
                valid_s: 86_400,
                preferred_s: 14_400,
            }],
            rdnss: vec!["2001:db8::53".parse().unwrap()],
            rdnss_lifetime_s: 1800,
            dnssl: vec!["lab.example".into(), "example.".into()],
            pref64: vec![("64:ff9b::".parse().unwrap(), 96)],
            pref64_lifetime_s: 1800,
        }
    }

    fn advertising() -> Router {
        let r = router();
        let mut cfg = (*r.cfg).clone();
        cfg.adverts = vec![Some(advert())];
        Router::new(cfg)
    }

    /// A Router Solicitation from `src`, with a source link-layer address
    /// option when `lla`.
    fn rs(src: &str, lla: bool) -> Vec<u8> {
        let len = if lla { 16 } else { 8 };
        let mut f = ip6(
            [0x33, 0x33, 0, 0, 0, 2],
            HOST.0,
            IpProto::ICMPV6,
            255,
            len,
            src,
            "ff02::2",
        );
        f[54] = 133;
        if lla {
            f[62..64].copy_from_slice(&[1, 1]);
            f[64..70].copy_from_slice(&HOST.0);
        }
        let ph = checksum::pseudo_v6(v6addr(src), v6addr("ff02::2"), 58, u32::from(len));
        let c = !checksum::fold(checksum::sum(&f[54..], ph));
        f[56..58].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// The options of an advertisement (type, body), its checksum checked.
    fn options(f: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.hop_limit(), 255);
        let m = ip.payload();
        assert_eq!(m[0], 134, "a Router Advertisement");
        let ph = checksum::pseudo_v6(ip.src(), ip.dst(), 58, m.len() as u32);
        assert_eq!(checksum::fold(checksum::sum(m, ph)), 0xffff, "checksum");
        let mut out = Vec::new();
        let mut o = 16;
        while o < m.len() {
            let len = usize::from(m[o + 1]) * 8;
            out.push((m[o], m[o + 2..o + len].to_vec()));
            o += len;
        }
        assert_eq!(o, m.len());
        out
    }

    #[test]
    fn link_local_is_the_macs_modified_eui64() {
        let mac = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(
            link_local(mac),
            "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn a_solicitation_is_answered_with_the_ports_advertisement() {
        let mut r = advertising();
        let ll = link_local(R0);
        let mut f = rs("fe80::10", true);
        assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
        assert_eq!(&f[0..6], &HOST.0, "to the soliciting host");
        assert_eq!(&f[6..12], &R0.0);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.src(), ll.octets(), "from the port's link-local address");
        assert_eq!(ip.dst(), v6addr("fe80::10"));
        let m = ip.payload();
        assert_eq!((m[4], m[5]), (64, 0x40), "hop limit, the O flag");
        assert_eq!(u16::from_be_bytes([m[6], m[7]]), 1800, "router lifetime");
        let opts = options(&f);
        let mut want_prefix = vec![64, 0xc0];
        want_prefix.extend(86_400u32.to_be_bytes());
        want_prefix.extend(14_400u32.to_be_bytes());
        want_prefix.extend([0; 4]);
        want_prefix.extend(v6addr("2001:db8:18::"));
        let mut want_rdnss = vec![0, 0];
        want_rdnss.extend(1800u32.to_be_bytes());
        want_rdnss.extend(v6addr("2001:db8::53"));
        // DNSSL: the names in DNS's wire form, padded to 8 bytes.
        let mut want_dnssl = vec![0, 0];
        want_dnssl.extend(1800u32.to_be_bytes());
        want_dnssl.extend(b"\x03lab\x07example\x00\x07example\x00");
        want_dnssl.extend([0; 2]);
        let mut want_pref64 = ((1800u16 / 8) << 3).to_be_bytes().to_vec();
        want_pref64.extend(&v6addr("64:ff9b::")[..12]);
        assert_eq!(
            opts,
            vec![
                (1, R0.0.to_vec()),
                (5, vec![0, 0, 0, 0, 0x05, 0xdc]),
                (3, want_prefix),
                (25, want_rdnss),
                (31, want_dnssl),
                (38, want_pref64),
            ]
        );
        assert_eq!(r.events()[Event::RaSolicited as usize], 1);
        assert_eq!(r.events()[Event::NdLearned as usize], 1, "the host learned");

        // From the unspecified address (a host with no address yet): to all
        // nodes.
        let mut f = rs("::", false);
        assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
        assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(
            Ipv6Packet::new_checked(&f[14..]).unwrap().dst(),
            v6addr("ff02::1")
        );
        assert_eq!(options(&f).len(), 6);
        // Another from :: within 3 s: not answered (RFC 4861 6.2.6), to
        // all nodes or to it; 3 s on, answered again. Unicast answers
        // are not held back.
        for _ in 0..100 {
            let mut f = rs("::", false);
            assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Consumed));
        }
        assert_eq!(r.events()[Event::RaLimited as usize], 100);
        let mut f = rs("fe80::11", true);
        assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
        r.tick(3_000_000_001);
        let mut f = rs("::", false);
        assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
        assert_eq!(r.events()[Event::RaSolicited as usize], 4);

        // Malformed (RFC 4861 6.1.1): a link-layer address from ::, a hop
        // limit below 255, an option of length 0.
        let mut f = rs("::", true);
        assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Malformed));
        let mut f = rs("fe80::10", true);
        f[14 + 7] = 64;
        assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Malformed));
        let mut f = rs("fe80::10", true);
        f[63] = 0;
        assert_eq!(r.process(&mut f, 0), Verdict::Drop(DropReason::Malformed));

        // Port 1 does not advertise: as before (no mirror: not routed).
        let mut f = rs("fe80::10", true);
        f[0..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 2]);
        assert_eq!(r.process(&mut f, 1), Verdict::Drop(DropReason::NotRoutable));
        assert_eq!(r.events()[Event::RaSolicited as usize], 4);
    }

    #[test]
    fn the_link_local_address_answers_neighbor_solicitations_and_echo() {
        let mut r = advertising();
        let ll = link_local(R0).to_string();
        // Solicited-node multicast of the link-local address.
        let t = v6addr(&ll);
        let snm = format!("ff02::1:ff{:02x}:{:02x}{:02x}", t[13], t[14], t[15]);
        let mut f = ip6(
            [0x33, 0x33, 0xff, t[13], t[14], t[15]],
            HOST.0,
            IpProto::ICMPV6,
            255,
            32,
            "fe80::10",
            &snm,
        );
        f[54] = 135;
        f[62..78].copy_from_slice(&t);
        f[78..80].copy_from_slice(&[1, 1]);
        f[80..86].copy_from_slice(&HOST.0);
        assert_eq!(r.process(&mut f, 0), Verdict::Forward(0));
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.payload()[0], 136, "a Neighbor Advertisement");
        assert_eq!(&ip.payload()[8..24], &t);
        // Echo to it.
        let mut e = ip6(R0.0, HOST.0, IpProto::ICMPV6, 64, 8, "fe80::10", &ll);
        e[54] = 128;
        assert_eq!(r.process(&mut e, 0), Verdict::Forward(0));
        assert_eq!(e[54], 129, "echo reply");
        // A port without IPv6 addresses has none.
        assert_eq!(r.link_local6(1), None);
        assert!(!r.is_local6(u128::from(link_local(R1))));
    }

    /// The router lifetime of an untagged advertisement frame.
    fn lifetime(f: &[u8]) -> u16 {
        u16::from_be_bytes([f[14 + 40 + 6], f[14 + 40 + 7]])
    }

    /// Sends what is due at `now` (s); the frames sent, by port.
    fn due(r: &mut Router, now: f64) -> Vec<(u16, Vec<u8>)> {
        r.tick((now * 1e9) as u64);
        let mut out = Vec::new();
        if ForwardMode::pending(r) {
            ForwardMode::emit(r, &mut |p, f| {
                out.push((p, f.to_vec()));
                true
            });
        }
        out
    }

    #[test]
    fn the_named_worker_advertises_at_start_then_at_random_intervals() {
        let mut r = advertising();
        // Not named: never.
        for s in 0..100 {
            assert!(due(&mut r, f64::from(s) * 10.0).is_empty());
        }
        let mut r = advertising();
        r.advertise_on(&[0]);
        let mut at = Vec::new();
        for step in 0..40_000 {
            let now = 1.0 + f64::from(step) * 0.25;
            for (p, f) in due(&mut r, now) {
                assert_eq!(p, 0);
                assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 1], "to all nodes");
                let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
                assert_eq!(ip.dst(), v6addr("ff02::1"));
                assert_eq!(ip.src(), link_local(R0).octets());
                assert_eq!(options(&f).len(), 6);
                at.push(now);
            }
        }
        assert_eq!(at[0], 1.0, "at once");
        let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        // Three initial ones at most 16 s apart, then 200 to 600 s.
        assert!(gaps[..3].iter().all(|&g| g <= 16.25), "{gaps:?}");
        assert!(
            gaps[3..].iter().all(|&g| (200.0..=600.25).contains(&g)),
            "{gaps:?}"
        );
        assert!(gaps.len() >= 3 + 10_000 / 600, "{} sent", at.len());
        // Spread, not fixed.
        let (lo, hi) = gaps[3..]
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &g| (l.min(g), h.max(g)));
        assert!(hi - lo > 100.0, "{gaps:?}");
        assert_eq!(r.events()[Event::RaSent as usize], at.len() as u64);

        // A reload that changes the advertisement sends again at once.
        let now = 1.0 + 40_000.0 * 0.25;
        let mut cfg = (*r.cfg).clone();
        cfg.adverts[0].as_mut().unwrap().lifetime_s = 0;
        r.reconfigure(Arc::new(cfg));
        let sent = due(&mut r, now);
        assert_eq!(sent.len(), 1);
        assert_eq!(lifetime(&sent[0].1), 0, "no longer a default router");
        // One that does not, does not.
        let cfg = (*r.cfg).clone();
        r.reconfigure(Arc::new(cfg));
        assert!(due(&mut r, now + 0.25).is_empty());

        // Stopping: one last advertisement with a router lifetime of 0,
        // the rest of it as before, then none.
        let mut cfg = (*r.cfg).clone();
        cfg.adverts[0].as_mut().unwrap().lifetime_s = 1800;
        r.reconfigure(Arc::new(cfg));
        assert_eq!(due(&mut r, now + 0.5).len(), 1);
        ForwardMode::stopping(&mut r);
        let sent = due(&mut r, now + 0.75);
        assert_eq!(sent.len(), 1);
        assert_eq!(lifetime(&sent[0].1), 0, "router lifetime 0");
        assert_eq!(options(&sent[0].1).len(), 6);
        for s in 1..100 {
            assert!(due(&mut r, now + 0.75 + f64::from(s) * 10.0).is_empty());
        }
        // A worker that sends none on any port sends none as it stops.
        let mut quiet = advertising();
        ForwardMode::stopping(&mut quiet);
        assert!(due(&mut quiet, 1.0).is_empty());
    }

    /// A port named for this worker that advertises nothing waits, not
    /// polled, until a reload gives it an advertisement: it starts then,
    /// and a reload that takes it away sends a last one.
    #[test]
    fn a_reload_that_adds_an_advertisement_starts_it() {
        let mut r = router();
        let mut cfg = (*r.cfg).clone();
        cfg.interfaces[1].ipv6 = vec![("2001:db8:19::1".parse().unwrap(), 64)];
        r.reconfigure(Arc::new(cfg));
        r.advertise_on(&[0, 1]);
        assert!(due(&mut r, 1.0).is_empty());
        assert!(!ForwardMode::pending(&r), "nothing due");
        for s in 1..100 {
            assert!(due(&mut r, 1.0 + f64::from(s) * 10.0).is_empty());
        }
        let mut cfg = (*r.cfg).clone();
        cfg.adverts = vec![None, Some(advert())];
        r.reconfigure(Arc::new(cfg));
        let sent = due(&mut r, 1000.0);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, 1, "on port 1");
        let ip = Ipv6Packet::new_checked(&sent[0].1[14..]).unwrap();
        assert_eq!(ip.src(), link_local(R1).octets());
        // And its initial ones follow.
        let more: usize = (1..=33)
            .map(|s| due(&mut r, 1000.0 + f64::from(s) * 0.5).len())
            .sum();
        assert_eq!(more, 1, "the second within 16 s");
        // A reload that takes it away: one last advertisement, router
        // lifetime 0 (RFC 4861 6.2.5), then none.
        let mut cfg = (*r.cfg).clone();
        cfg.adverts = vec![None, None];
        r.reconfigure(Arc::new(cfg));
        let sent = due(&mut r, 1100.0);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, 1);
        assert_eq!(lifetime(&sent[0].1), 0, "router lifetime 0");
        assert_eq!(options(&sent[0].1).len(), 6, "the rest as it was");
        for s in 1..100 {
            assert!(due(&mut r, 1100.0 + f64::from(s) * 10.0).is_empty());
        }
    }

    /// On VLAN sub-interfaces (QinQ too): periodic advertisements leave
    /// the port tagged, from the port's link-local address, and a tagged
    /// solicitation is answered with the same tags.
    #[test]
    fn sub_interfaces_advertise_tagged() {
        let mut r = vlan_router();
        let mut cfg = (*r.cfg).clone();
        cfg.interfaces[2].ipv6 = vec![("2001:db8:100::1".parse().unwrap(), 64)];
        cfg.interfaces[3].ipv6 = vec![("2001:db8:300::1".parse().unwrap(), 64)];
        cfg.adverts = vec![None, None, Some(advert()), Some(advert())];
        r.reconfigure(Arc::new(cfg));
        r.advertise_on(&[0, 1, 2, 3]);
        let sent = due(&mut r, 1.0);
        assert_eq!(sent.len(), 2, "on the two sub-interfaces");
        let untag = |f: &[u8], n: usize| {
            let mut u = f[..12].to_vec();
            u.extend_from_slice(&f[12 + n..]);
            u
        };
        for ((p, f), tags) in sent
            .iter()
            .zip([vec![(0x8100, 100)], vec![(0x88a8, 200), (0x8100, 300)]])
        {
            assert_eq!(*p, 1, "out of their port");
            let n = 4 * tags.len();
            let u = untag(f, n);
            assert_eq!(&tagged(&u, &tags), f, "tagged");
            assert_eq!(&u[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
            assert_eq!(&u[6..12], &R1.0);
            let ip = Ipv6Packet::new_checked(&u[14..]).unwrap();
            assert_eq!(ip.src(), link_local(R1).octets());
            assert_eq!(options(&u).len(), 6);
        }
        // A solicitation on VLAN 100: answered tagged.
        let rs = rs("fe80::10", true);
        let mut f = tagged(&rs, &[(0x8100, 100)]);
        assert_eq!(r.process(&mut f, 1), Verdict::Forward(1));
        assert_eq!(&f[12..16], &[0x81, 0, 0, 100]);
        let u = untag(&f, 4);
        assert_eq!(&u[0..6], &HOST.0);
        assert_eq!(options(&u).len(), 6);
        // Untagged on port 1, which does not advertise: not answered.
        let mut f = rs.clone();
        assert_eq!(r.process(&mut f, 1), Verdict::Drop(DropReason::NotRoutable));
    }

    /// Link-local scope (RFC 4291 2.5.6), per packet and in a burst: a
    /// packet to another link-local address is not routed (a default
    /// route notwithstanding), one from a link-local address gets
    /// Destination Unreachable code 2 (beyond scope of source address),
    /// and one to the router's own link-local address is its own.
    #[test]
    fn link_scoped_packets_are_never_forwarded() {
        let r = advertising();
        let mut cfg = (*r.cfg).clone();
        cfg.fib = fib(&[("::", 0, 1, Some("2001:db8:19::2"))]);
        let r = Router::new(cfg);
        let cases = [
            ("2001:db8:18::10", "fe80::99"),
            ("fe80::10", "2001:db8:19::77"),
            ("2001:db8:18::10", "2001:db8:19::77"),
        ];
        let ours = link_local(R0).to_string();
        for burst in [false, true] {
            let mut r = r.clone();
            let mut pkts: Vec<Vec<u8>> = cases.iter().map(|(s, d)| udp6(s, d)).collect();
            let mut echo = ip6(
                R0.0,
                HOST.0,
                IpProto::ICMPV6,
                64,
                8,
                "2001:db8:18::10",
                &ours,
            );
            echo[54] = 128;
            pkts.push(echo);
            let mut v = vec![Verdict::Drop(DropReason::NotIp); pkts.len()];
            if burst {
                if let Some(one) = r.process_burst(&mut pkts, 0, &mut v) {
                    v.fill(one);
                }
            } else {
                for (p, v) in pkts.iter_mut().zip(v.iter_mut()) {
                    *v = r.process(p, 0);
                }
            }
            assert_eq!(
                v,
                [
                    Verdict::Drop(DropReason::NotRoutable),
                    Verdict::Forward(0),
                    Verdict::Forward(1),
                    Verdict::Forward(0),
                ],
                "burst {burst}"
            );
            let err = Ipv6Packet::new_checked(&pkts[1][14..]).unwrap();
            assert_eq!((err.payload()[0], err.payload()[1]), (1, 2), "beyond scope");
            assert_eq!(err.dst(), v6addr("fe80::10"));
            assert_eq!(pkts[3][54], 129, "echo reply from the link-local address");
        }
    }

    proptest::proptest! {
        /// The IPv6 burst property test (`tests`) with port 0
        /// advertising: solicitations among the random frames, the
        /// burst path gives the per-packet path's verdicts and bytes.
        #[test]
        fn random_ipv6_bursts_with_advertisements_match_the_per_packet_path(
            frames in ipv6_frames(),
        ) {
            ipv6_bursts_as_each(advertising(), &frames);
        }
    }
}
