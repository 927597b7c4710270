//! The burst path: plain IPv4 packets are routed in stages over a chunk
//! of the burst (all headers checked, then all routes looked up, then all
//! rewritten), as DPDK's l3fwd does; anything else falls back to the
//! per-packet path.

use super::ipv4::{forward4_rewrite, martian};
use super::Router;
use crate::fwd::{ForwardMode, Frame};
use crate::verdict::Verdict;
use crate::wire::{MacAddr, ETHERNET_HEADER_LEN};

/// Bursts are routed in chunks of this many packets (stack arrays).
const CHUNK: usize = 32;

/// The destination of a plain IPv4 packet to `mac` that the fast path can
/// route: a 20-byte header that is valid (version, lengths, checksum), a
/// TTL above 1, a unicast destination that is not martian. `None` for
/// anything else (options, ARP, IPv6, errors, ...), which takes the full
/// path.
#[inline(always)]
fn fast4(b: &[u8], mac: MacAddr) -> Option<u32> {
    let h = b.get(..ETHERNET_HEADER_LEN + 20)?;
    let eth: &[u8; 14] = h[..14].try_into().ok()?;
    if eth[..6] != mac.0 || eth[12..14] != [0x08, 0x00] || h[14] != 0x45 {
        return None;
    }
    let ip: &[u8; 20] = h[14..].try_into().ok()?;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < 20 || total > b.len() - ETHERNET_HEADER_LEN || ip[8] <= 1 {
        return None;
    }
    // The header's ones-complement sum must be 0xffff: five 32-bit words
    // summed (2^16 = 1 in ones-complement arithmetic), then folded three
    // times from under 2^35. What is still above 16 bits then (0x10000 or
    // 0x10001) folds on to 1 or 2, never to 0xffff, so the test is exact.
    let mut acc = 0u64;
    for w in ip.chunks_exact(4) {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    acc = (acc >> 32) + (acc & 0xffff_ffff);
    acc = (acc >> 16) + (acc & 0xffff);
    acc = (acc >> 16) + (acc & 0xffff);
    if acc != 0xffff {
        return None;
    }
    let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    (!martian(dst)).then_some(dst)
}

impl Router {
    /// The per-packet loop, out of line (a port without an interface).
    #[cold]
    #[inline(never)]
    pub(super) fn process_each_cold<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        crate::fwd::process_each(self, pkts, in_port, verdicts)
    }

    /// The last stage of the burst path for a packet `fast4` accepted,
    /// addressed to `dst`, whose route is next hop `nh`: forwards it (TTL
    /// and checksum update, MACs) and returns the verdict, or `None` when
    /// it needs the full path (next hop unknown or unresolved, over the
    /// MTU), which then decides with nothing changed.
    #[inline(always)]
    pub(super) fn forward_fast(
        &mut self,
        pkt: &mut impl Frame,
        dst: u32,
        nh: u32,
    ) -> Option<Verdict> {
        let l3 = &pkt.bytes()[ETHERNET_HEADER_LEN..];
        let (nh, hop) = self.cfg.fib.path(nh, || Router::flow_hash(l3))?;
        if hop.port >= self.ports {
            return None; // a VLAN sub-interface: tagged on the full path
        }
        let oif = self.iface(hop.port)?;
        let (out_mac, mtu) = (oif.mac, oif.mtu);
        let b = pkt.bytes_mut();
        if u16::from_be_bytes([b[16], b[17]]) > mtu {
            return None;
        }
        let mac = self.hop_mac4(nh, hop, dst).ok()?;
        forward4_rewrite(pkt.bytes_mut(), mac.0, out_mac.0);
        Some(Verdict::Forward(hop.port))
    }

    /// Routes a burst in stages, as DPDK's l3fwd does: the headers of all
    /// packets are checked first, then all routes are looked up, then the
    /// packets are rewritten, so that the CPU overlaps the packets' loads
    /// instead of running one packet's chain of dependent loads (header,
    /// LPM entry, next hop, interface, neighbour) after another. Packets
    /// the fast path does not take (see `fast4`; local, unrouted, over the
    /// MTU, unresolved next hop) go through `process`, so the verdicts and
    /// events are those of `process`, packet by packet.
    pub(super) fn route_burst<P: Frame>(
        &mut self,
        pkts: &mut [P],
        in_port: u16,
        verdicts: &mut [Verdict],
    ) -> Option<Verdict> {
        let Some(mac) = self.iface(in_port).map(|i| i.mac) else {
            return self.process_each_cold(pkts, in_port, verdicts);
        };
        // Uniform-verdict tracking in two locals, as in `fwd::process_each`
        // (a tracker struct measured 5 cycles per packet more here).
        let mut first: Option<Verdict> = None;
        let mut uniform = true;
        let n = pkts.len().min(verdicts.len());
        for (pc, vc) in pkts[..n]
            .chunks_mut(CHUNK)
            .zip(verdicts[..n].chunks_mut(CHUNK))
        {
            let mut dst = [0u32; CHUNK];
            let mut nh = [None::<u32>; CHUNK];
            for (p, d) in pc.iter().zip(dst.iter_mut()) {
                *d = fast4(p.bytes(), mac).unwrap_or(0);
            }
            for (d, h) in dst.iter().zip(nh.iter_mut()).take(pc.len()) {
                // 0 is martian: never a fast-path destination.
                if *d != 0 && !self.is_local4(*d) {
                    *h = self.cfg.fib.lpm4().lookup(*d);
                }
            }
            for ((p, v), (d, h)) in pc.iter_mut().zip(vc.iter_mut()).zip(dst.iter().zip(&nh)) {
                *v = match h.and_then(|h| self.forward_fast(p, *d, h)) {
                    Some(v) => v,
                    None => self.process(p, in_port),
                };
                match first {
                    None => first = Some(*v),
                    Some(f) if f == *v => {}
                    Some(_) => uniform = false,
                }
            }
        }
        first.filter(|_| uniform)
    }
}
