//! The kernel's own connections, as the input chain's `state` sees them
//! (nftables' `ct state established,related accept` in `chain input`):
//! the kernel behind the TAP mirrors opens and answers connections
//! (BGP sessions, SSH, DNS lookups), and what it sends leaves through the
//! mirror thread, which records each packet's flow here; a worker deciding
//! a packet for the router looks its flow up. A flow the kernel has sent
//! on lately is `established` both ways; an ICMP error quoting one of its
//! packets is `related`; anything else is `new`.
//!
//! One writer (the mirror thread), any number of readers (the workers),
//! no lock: a fixed table of 64-bit words, each a flow's 32-bit
//! fingerprint and the second it was last sent on, in buckets of four
//! slots, a flow's slot found by its hash and fingerprint (a collision of
//! both, one in 2^32 within a bucket, would take a stranger's packet for
//! the flow's). Flows age out after [`TCP_IDLE_S`] (TCP) or
//! [`IDLE_S`] (the rest) without a packet from the kernel; a full bucket
//! gives its stalest slot to a new flow. Allocated once, at start.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// A TCP flow is forgotten this long after the kernel last sent on it
/// (Linux's `nf_conntrack_tcp_timeout_established`: five days).
pub const TCP_IDLE_S: u32 = 5 * 24 * 3600;
/// Any other flow (UDP, echo), this long (Linux's UDP stream timeout).
pub const IDLE_S: u32 = 180;

const WAYS: usize = 4;

/// The table (see the module).
pub struct KernelFlows {
    slots: Box<[AtomicU64]>,
    /// Buckets less one (a power of two less one).
    mask: usize,
    epoch: Instant,
}

impl std::fmt::Debug for KernelFlows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelFlows({} slots)", self.slots.len())
    }
}

/// A flow's key, the same whichever way a packet goes: protocol, and the
/// two ends (address, port) in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    proto: u8,
    a: (u128, u16),
    b: (u128, u16),
}

impl Key {
    fn new(proto: u8, src: (u128, u16), dst: (u128, u16)) -> Key {
        let (a, b) = if src <= dst { (src, dst) } else { (dst, src) };
        Key { proto, a, b }
    }

    fn hash(&self) -> u64 {
        let m = |x: u64, y: u64| {
            let p = u128::from(x ^ 0x9e37_79b9_7f4a_7c15) * u128::from(y ^ 0xd6e8_feb8_6659_fd93);
            (p as u64) ^ ((p >> 64) as u64)
        };
        let ports = u64::from(self.a.1) << 32 | u64::from(self.b.1) << 16 | u64::from(self.proto);
        let x = m(self.a.0 as u64 ^ (self.a.0 >> 64) as u64, self.b.0 as u64);
        m(x, m((self.b.0 >> 64) as u64, ports))
    }
}

/// An IP packet's (after the Ethernet header) protocol, ends, and for an
/// ICMP/ICMPv6 error the ends of the packet it quotes; `None` for what
/// has no flow (a fragment past the first, a truncated header).
fn key_of(l3: &[u8]) -> Option<(Key, Option<Key>)> {
    let (proto, src, dst, l4) = match l3.first()? >> 4 {
        4 => {
            let ihl = usize::from(l3[0] & 0x0f) * 4;
            let h = l3.get(..20)?;
            if u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
                return None;
            }
            let a =
                |i: usize| crate::acl::v4(u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            (h[9], a(12), a(16), l3.get(ihl..)?)
        }
        6 => {
            let h = l3.get(..40)?;
            let a = |i: usize| u128::from_be_bytes(h[i..i + 16].try_into().expect("16 bytes"));
            (h[6], a(8), a(24), l3.get(40..)?)
        }
        _ => return None,
    };
    let be = |i: usize| l4.get(i..i + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    let (sp, dp, quote) = match proto {
        6 | 17 | 132 => (be(0)?, be(2)?, None),
        // Echo request and reply: the identifier both ways.
        1 if matches!(l4.first(), Some(0 | 8)) => (be(4)?, be(4)?, None),
        58 if matches!(l4.first(), Some(128 | 129)) => (be(4)?, be(4)?, None),
        // Errors: the quoted packet's flow.
        1 if matches!(l4.first(), Some(3 | 11 | 12)) => (0, 0, l4.get(8..)),
        58 if matches!(l4.first(), Some(1..=4)) => (0, 0, l4.get(8..)),
        _ => (0, 0, None),
    };
    let inner = quote.and_then(|q| key_of(q).map(|(k, _)| k));
    Some((Key::new(proto, (src, sp), (dst, dp)), inner))
}

use crate::firewall::state;

impl KernelFlows {
    /// A table of at least `flows` slots.
    pub fn new(flows: usize) -> KernelFlows {
        let buckets = (flows / WAYS).max(1).next_power_of_two();
        KernelFlows {
            slots: (0..buckets * WAYS).map(|_| AtomicU64::new(0)).collect(),
            mask: buckets - 1,
            epoch: Instant::now(),
        }
    }

    /// Seconds since the table was made (1 at the least: 0 marks a free
    /// slot).
    pub fn now_s(&self) -> u32 {
        self.epoch.elapsed().as_secs().min(u64::from(u32::MAX - 1)) as u32 + 1
    }

    fn bucket(&self, k: &Key) -> (usize, u32) {
        let h = k.hash();
        (((h as usize) & self.mask) * WAYS, (h >> 32) as u32 | 1)
    }

    /// The kernel sent IP packet `l3` (after the Ethernet header): its
    /// flow is live as of `now_s`. The mirror thread's, the only writer.
    pub fn sent(&self, l3: &[u8], now_s: u32) {
        let Some((k, _)) = key_of(l3) else { return };
        let (at, fp) = self.bucket(&k);
        let bucket = &self.slots[at..at + WAYS];
        let word = u64::from(fp) << 32 | u64::from(now_s);
        let mut stalest = (u32::MAX, 0);
        for (i, s) in bucket.iter().enumerate() {
            let v = s.load(Relaxed);
            if (v >> 32) as u32 == fp {
                s.store(word, Relaxed);
                return;
            }
            if (v as u32) < stalest.0 {
                stalest = (v as u32, i);
            }
        }
        bucket[stalest.1].store(word, Relaxed);
    }

    fn live(&self, k: &Key, now_s: u32) -> bool {
        let (at, fp) = self.bucket(k);
        let idle = if k.proto == 6 { TCP_IDLE_S } else { IDLE_S };
        self.slots[at..at + WAYS].iter().any(|s| {
            let v = s.load(Relaxed);
            (v >> 32) as u32 == fp && now_s.saturating_sub(v as u32) <= idle
        })
    }

    /// The state of IP packet `l3` (after the Ethernet header), received
    /// for the router at `now_s`, as Linux's conntrack would give it for
    /// the kernel: `INVALID` for a TCP segment whose flags no connection
    /// sends ([`invalid_tcp`]) and for an ICMP error quoting no packet of
    /// the kernel's flows (Linux finds no connection for it); `RELATED`
    /// for an error quoting one; `ESTABLISHED` for a flow the kernel has
    /// sent on; `NEW` for anything else.
    pub fn state(&self, l3: &[u8], now_s: u32) -> u8 {
        if invalid_tcp(l3) {
            return state::INVALID;
        }
        match key_of(l3) {
            Some((_, Some(inner))) if self.live(&inner, now_s) => state::RELATED,
            Some((_, Some(_))) => state::INVALID,
            Some((k, None)) if self.live(&k, now_s) => state::ESTABLISHED,
            _ => state::NEW,
        }
    }
}

/// Whether IP packet `l3` is a TCP segment (right after the IP header)
/// whose flags no TCP sends, less ECE, CWR and PSH: Linux conntrack's
/// `tcp_valid_flags` (SYN, SYN+URG, SYN+ACK, RST, RST+ACK, FIN+ACK,
/// FIN+ACK+URG, ACK, ACK+URG are valid; SYN+FIN, a bare FIN, no flags at
/// all — scans — are not).
pub fn invalid_tcp(l3: &[u8]) -> bool {
    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;
    const URG: u8 = 0x20;
    const VALID: [u8; 9] = [
        SYN,
        SYN | URG,
        SYN | ACK,
        RST,
        RST | ACK,
        FIN | ACK,
        FIN | ACK | URG,
        ACK,
        ACK | URG,
    ];
    let at = match l3.first().map(|v| v >> 4) {
        // Not a later fragment, which has no TCP header.
        Some(4)
            if l3.len() >= 20 && l3[9] == 6 && u16::from_be_bytes([l3[6], l3[7]]) & 0x1fff == 0 =>
        {
            usize::from(l3[0] & 0x0f) * 4 + 13
        }
        Some(6) if l3.get(6) == Some(&6) => 40 + 13,
        _ => return false,
    };
    l3.get(at)
        .is_some_and(|&f| !VALID.contains(&(f & (FIN | SYN | RST | ACK | URG))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP/UDP header from `src`:`sp` to `dst`:`dp` (TCP: ACK).
    fn v4(proto: u8, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sp.to_be_bytes());
        p[22..24].copy_from_slice(&dp.to_be_bytes());
        // TCP: an ACK.
        p[33] = 0x10;
        p
    }

    /// The kernel's connection out: its replies are established, another
    /// peer's or port's packets are new; an ICMP error quoting the
    /// kernel's packet is related; a UDP flow ages out, a TCP one lasts.
    #[test]
    fn the_kernels_flows_are_established_both_ways() {
        let t = KernelFlows::new(64);
        let (me, peer) = ([198, 19, 0, 1], [198, 19, 0, 2]);
        let out = v4(6, me, 40000, peer, 179);
        t.sent(&out, 10);
        assert_eq!(
            t.state(&v4(6, peer, 179, me, 40000), 11),
            state::ESTABLISHED
        );
        assert_eq!(t.state(&v4(6, peer, 179, me, 40001), 11), state::NEW);
        assert_eq!(
            t.state(&v4(6, [198, 19, 0, 3], 179, me, 40000), 11),
            state::NEW
        );
        assert_eq!(t.state(&v4(17, peer, 179, me, 40000), 11), state::NEW);
        // Port unreachable from the peer, quoting the kernel's packet.
        let mut err = vec![0u8; 28];
        err[0] = 0x45;
        err[9] = 1;
        err[12..16].copy_from_slice(&peer);
        err[16..20].copy_from_slice(&me);
        err[20] = 3;
        err[21] = 3;
        err.extend_from_slice(&out[..28]);
        assert_eq!(t.state(&err, 11), state::RELATED);
        // One quoting a packet the kernel never sent: no connection for
        // it, invalid.
        let mut stray = err.clone();
        stray[28 + 20..28 + 22].copy_from_slice(&40999u16.to_be_bytes());
        assert_eq!(t.state(&stray, 11), state::INVALID);
        // TCP flags no connection sends, on the kernel's flow or not.
        for (flags, want) in [
            (0x02, state::ESTABLISHED), // SYN (the tuple's, reused)
            (0x12, state::ESTABLISHED), // SYN+ACK
            (0x18, state::ESTABLISHED), // PSH+ACK
            (0x11, state::ESTABLISHED), // FIN+ACK
            (0x04, state::ESTABLISHED), // RST
            (0xd0, state::ESTABLISHED), // ACK with ECE and CWR
            (0x03, state::INVALID),     // SYN+FIN
            (0x06, state::INVALID),     // SYN+RST
            (0x01, state::INVALID),     // a bare FIN
            (0x00, state::INVALID),     // none (a null scan)
            (0x29, state::INVALID),     // FIN+PSH+URG (an Xmas scan)
        ] {
            let mut p = v4(6, peer, 179, me, 40000);
            p[33] = flags;
            assert_eq!(t.state(&p, 11), want, "flags {flags:#x}");
            assert_eq!(invalid_tcp(&p), want == state::INVALID);
        }
        assert!(!invalid_tcp(&v4(17, peer, 53, me, 5353)), "not TCP");
        // TCP lasts days; UDP three minutes.
        assert_eq!(
            t.state(&v4(6, peer, 179, me, 40000), 10 + 86_400),
            state::ESTABLISHED
        );
        t.sent(&v4(17, me, 5353, peer, 53), 10);
        assert_eq!(
            t.state(&v4(17, peer, 53, me, 5353), 100),
            state::ESTABLISHED
        );
        assert_eq!(
            t.state(&v4(17, peer, 53, me, 5353), 10 + IDLE_S + 1),
            state::NEW
        );
    }

    /// A full bucket gives its stalest slot to a new flow; the others stay.
    #[test]
    fn a_full_bucket_forgets_its_stalest_flow() {
        let t = KernelFlows::new(4);
        let me = [198, 19, 0, 1];
        for p in 0..5u16 {
            t.sent(&v4(6, me, 1000 + p, [198, 19, 0, 2], 179), u32::from(p) + 1);
        }
        let live = (0..5u16)
            .filter(|&p| {
                t.state(&v4(6, [198, 19, 0, 2], 179, me, 1000 + p), 10) == state::ESTABLISHED
            })
            .count();
        assert_eq!(live, 4);
        assert_eq!(
            t.state(&v4(6, [198, 19, 0, 2], 179, me, 1004), 10),
            state::ESTABLISHED,
            "the newest kept"
        );
        assert_eq!(
            t.state(&v4(6, [198, 19, 0, 2], 179, me, 1000), 10),
            state::NEW,
            "the stalest gone"
        );
    }
}
