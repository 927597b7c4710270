//! Stateful NAT64 (RFC 6146): IPv6-only clients reach IPv4 servers at
//! addresses of a NAT64 prefix (the well-known `64:ff9b::/96` or a
//! network-specific one) with the IPv4 address embedded as RFC 6052 says
//! for prefixes of 32, 40, 48, 56, 64 and 96 bits. The gateway keeps the
//! state (a conntrack flow whose original tuple is the client's IPv6 one
//! and whose reply tuple is the IPv4 one, its source port picked from the
//! NAT port range as NAT44's are); this module holds the address mapping
//! and the header translation of RFC 7915 (IP/ICMP Translation
//! Algorithm): headers, TCP/UDP checksums (updated for the pseudo-header's
//! addresses and the new port), ICMP queries (echo, their identifier the
//! flow's port) and ICMP errors with the packet they quote, translated
//! both ways. Pure byte work: the gateway resizes the frame.

use crate::checksum::{checksum, pseudo_v6, sum, update_sums};

/// The well-known prefix (RFC 6052 2.1).
pub const WELL_KNOWN: (u128, u8) = (0x0064_ff9b_u128 << 96, 96);

/// IPv6 minimum MTU: an ICMPv6 error is cut to fit it (RFC 4443 2.4).
pub const MIN_MTU6: usize = 1280;
/// An ICMPv4 error is cut to this many bytes (RFC 1812 4.3.2.3).
pub const MAX_ERROR4: usize = 576;

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// One NAT64 translator: its prefix, the IPv4 interface its flows leave
/// by, and the IPv4 addresses they leave from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat64 {
    /// The NAT64 prefix (address, length).
    pub prefix: (u128, u8),
    /// The interface (port or VLAN sub-interface) whose IPv4 side the
    /// translated flows use (the one whose address they leave from when
    /// `pool` is empty).
    pub out_port: u16,
    /// The IPv4 addresses flows leave from, an IPv6 client always from
    /// the same one (a hash of its address picks it: RFC 4787 "paired");
    /// empty: the outgoing interface's address (masquerade).
    pub pool: Vec<u32>,
    /// RFC 7915's `lowest-ipv6-mtu`: an IPv4 packet without DF whose
    /// IPv6 translation is longer leaves in IPv6 fragments no longer
    /// (1,280 by default, IPv6's minimum MTU, which every path carries).
    pub lowest_mtu6: u16,
    /// The prefix's mask.
    mask: u128,
}

/// RFC 7915's default `lowest-ipv6-mtu`.
pub const LOWEST_MTU6: u16 = 1280;

/// How much longer an IPv4 fragment is as IPv6: the IPv6 header and a
/// fragment header (48 bytes) for IPv4's 20.
pub const GROWTH6: usize = 28;

/// Why a prefix cannot be a NAT64 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPrefix {
    /// Not 32, 40, 48, 56, 64 or 96 bits long.
    Length,
    /// Bits 64 to 71 (RFC 6052's "u" octet) are not zero.
    UOctet,
}

impl std::fmt::Display for BadPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadPrefix::Length => {
                "a NAT64 prefix is /32, /40, /48, /56, /64 or /96 long (RFC 6052 2.2)"
            }
            BadPrefix::UOctet => "bits 64 to 71 of a NAT64 prefix must be zero (RFC 6052 2.2)",
        })
    }
}

/// The bytes of an IPv6 address that hold the embedded IPv4 address,
/// for a prefix of `len` bits (RFC 6052 2.2: from the prefix's end,
/// skipping byte 8).
fn v4_bytes(len: u8) -> [usize; 4] {
    let mut at = [0; 4];
    let mut i = usize::from(len / 8);
    for a in &mut at {
        if i == 8 {
            i += 1;
        }
        *a = i;
        i += 1;
    }
    at
}

impl Nat64 {
    /// A translator for `prefix` leaving by `out_port` from `pool`.
    pub fn new(prefix: (u128, u8), out_port: u16, pool: Vec<u32>) -> Result<Nat64, BadPrefix> {
        let (a, len) = prefix;
        if !matches!(len, 32 | 40 | 48 | 56 | 64 | 96) {
            return Err(BadPrefix::Length);
        }
        let mask = crate::prefix::mask6(len);
        let a = a & mask;
        if a.to_be_bytes()[8] != 0 {
            return Err(BadPrefix::UOctet);
        }
        Ok(Nat64 {
            prefix: (a, len),
            out_port,
            pool,
            lowest_mtu6: LOWEST_MTU6,
            mask,
        })
    }

    /// Whether `a` is in the prefix.
    #[inline]
    pub fn contains(&self, a: u128) -> bool {
        a & self.mask == self.prefix.0
    }

    /// The IPv4 address embedded in `a` (an address of the prefix).
    pub fn extract(&self, a: u128) -> u32 {
        let b = a.to_be_bytes();
        let at = v4_bytes(self.prefix.1);
        u32::from_be_bytes([b[at[0]], b[at[1]], b[at[2]], b[at[3]]])
    }

    /// The prefix's address for IPv4 address `v4` (the suffix zero).
    pub fn embed(&self, v4: u32) -> u128 {
        let mut b = self.prefix.0.to_be_bytes();
        for (i, x) in v4_bytes(self.prefix.1).into_iter().zip(v4.to_be_bytes()) {
            b[i] = x;
        }
        u128::from_be_bytes(b)
    }

    /// The pool address of client `src` (`None`: the interface's).
    pub fn pool_for(&self, src: u128) -> Option<u32> {
        if self.pool.is_empty() {
            return None;
        }
        // The client's /64 and interface identifier folded (a client's
        // temporary addresses share its /64 and so its address).
        let h = ((src >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        Some(self.pool[(h % self.pool.len() as u64) as usize])
    }
}

/// The addresses and ports a translated packet is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite<A> {
    /// Source address.
    pub src: A,
    /// Destination address.
    pub dst: A,
    /// Source port (ICMP queries: the identifier).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn put16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

/// The ICMPv4 query type of ICMPv6 query type `t` (echo).
fn query6to4(t: u8) -> Option<u8> {
    match t {
        128 => Some(8),
        129 => Some(0),
        _ => None,
    }
}

/// The ICMPv6 query type of ICMPv4 query type `t` (echo).
fn query4to6(t: u8) -> Option<u8> {
    match t {
        8 => Some(128),
        0 => Some(129),
        _ => None,
    }
}

/// Rewrites the L4 header `l4` (upper-layer length `len`, which `l4` may
/// fall short of in an ICMP error's quote) of an IPv6 packet from `src6`
/// to `dst6` as the IPv4 packet `to` names: ports (ICMP: the identifier
/// and the echo type) and the checksum, updated for what changed
/// (checksums the quote cut off are left). The IPv4 protocol, or `None`
/// for a protocol or ICMPv6 type that does not translate.
pub fn l4_to4(
    l4: &mut [u8],
    proto: u8,
    len: u32,
    src6: [u8; 16],
    dst6: [u8; 16],
    to: &Rewrite<u32>,
) -> Option<u8> {
    let (s4, d4) = (to.src.to_be_bytes(), to.dst.to_be_bytes());
    match proto {
        TCP | UDP => {
            // A UDP datagram without a checksum is not allowed in IPv6
            // (RFC 8200 8.1): a quote's only, left as it is.
            let (old, new) = (sum(&src6, sum(&dst6, 0)), sum(&s4, sum(&d4, 0)));
            tcp_udp(l4, proto, old, new, to.sport, to.dport);
            Some(proto)
        }
        ICMPV6 => {
            let t = query6to4(*l4.first()?)?;
            echo(l4, t, to.sport, pseudo_v6(src6, dst6, ICMPV6, len), 0);
            Some(ICMP)
        }
        _ => None,
    }
}

/// [`l4_to4`] the other way: an IPv4 packet's L4 header from `src4` to
/// `dst4` rewritten as the IPv6 packet `to` names. A UDP datagram
/// without a checksum gets one computed when it is whole (`l4` is all
/// `len` bytes), else `None` (RFC 7915 4.5).
pub fn l4_to6(
    l4: &mut [u8],
    proto: u8,
    len: u32,
    src4: [u8; 4],
    dst4: [u8; 4],
    to: &Rewrite<u128>,
) -> Option<u8> {
    let (s6, d6) = (to.src.to_be_bytes(), to.dst.to_be_bytes());
    match proto {
        TCP | UDP => {
            let (old, new) = (sum(&src4, sum(&dst4, 0)), sum(&s6, sum(&d6, 0)));
            if !tcp_udp(l4, proto, old, new, to.sport, to.dport) {
                if l4.len() as u32 != len {
                    return None;
                }
                let c = !crate::checksum::fold(sum(l4, pseudo_v6(s6, d6, UDP, len)));
                put16(l4, 6, if c == 0 { 0xffff } else { c });
            }
            Some(proto)
        }
        ICMP => {
            let t = query4to6(*l4.first()?)?;
            echo(l4, t, to.sport, 0, pseudo_v6(s6, d6, ICMPV6, len));
            Some(ICMPV6)
        }
        _ => None,
    }
}

/// A TCP/UDP header (whole, or as much as a quote holds) given ports
/// `sport`, `dport`, its checksum updated for the pseudo-header's
/// addresses, which sum `old` before and `new` after (RFC 1624), and the
/// ports; false for a UDP datagram without a checksum (left without).
fn tcp_udp(l4: &mut [u8], proto: u8, old: u64, new: u64, sport: u16, dport: u16) -> bool {
    let at = if proto == TCP { 16 } else { 6 };
    let (op, np) = ports_of(l4, sport, dport);
    write_ports(l4, sport, dport);
    if l4.len() < at + 2 {
        return true;
    }
    let c = be16(l4, at);
    if proto == UDP && c == 0 {
        return false;
    }
    let c = update_sums(c, old + op, new + np);
    put16(l4, at, if proto == UDP && c == 0 { 0xffff } else { c });
    true
}

/// An echo request or reply (whole, or as much as a quote holds) given
/// type `t` (the other family's) and identifier `id`, its checksum
/// updated: `old` and `new` are the pseudo-header's sum on the side that
/// has one (ICMPv6), 0 on the other (ICMP has none).
fn echo(l4: &mut [u8], t: u8, id: u16, old: u64, new: u64) {
    if l4.len() < 2 {
        // A quote cut inside the type and code: the type alone.
        if let Some(b) = l4.first_mut() {
            *b = t;
        }
        return;
    }
    let has_id = l4.len() >= 6;
    let ow = u64::from(be16(l4, 0)) + if has_id { u64::from(be16(l4, 4)) } else { 0 };
    let nw = (u64::from(t) << 8 | u64::from(l4[1])) + if has_id { u64::from(id) } else { 0 };
    if l4.len() >= 4 {
        put16(l4, 2, update_sums(be16(l4, 2), old + ow, new + nw));
    }
    l4[0] = t;
    if has_id {
        put16(l4, 4, id);
    }
}

/// The sums of a TCP/UDP header's old ports and of `sport`, `dport` (a
/// quote too short for the ports: zero both).
fn ports_of(l4: &[u8], sport: u16, dport: u16) -> (u64, u64) {
    if l4.len() < 4 {
        return (0, 0);
    }
    (
        u64::from(be16(l4, 0)) + u64::from(be16(l4, 2)),
        u64::from(sport) + u64::from(dport),
    )
}

fn write_ports(l4: &mut [u8], sport: u16, dport: u16) {
    if l4.len() >= 4 {
        put16(l4, 0, sport);
        put16(l4, 2, dport);
    }
}

/// Writes an IPv4 header (20 bytes, no options) with its checksum.
#[allow(clippy::too_many_arguments)]
pub fn write4(
    h: &mut [u8],
    tos: u8,
    total: u16,
    id: u16,
    df: bool,
    ttl: u8,
    proto: u8,
    src: u32,
    dst: u32,
) {
    h[0] = 0x45;
    h[1] = tos;
    put16(h, 2, total);
    put16(h, 4, id);
    put16(h, 6, if df { 0x4000 } else { 0 });
    h[8] = ttl;
    h[9] = proto;
    put16(h, 10, 0);
    h[12..16].copy_from_slice(&src.to_be_bytes());
    h[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = checksum(&h[..20]);
    put16(h, 10, c);
}

/// [`write4`] for a flow whose header words that do not change (version,
/// protocol, addresses) sum to `base` (`conntrack`'s NAT64 deltas): the
/// addresses are written, and the checksum is `base` and the packet's
/// own words folded, not a sum over the header.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn write4_based(
    h: &mut [u8],
    base: u16,
    tos: u8,
    total: u16,
    id: u16,
    df: bool,
    ttl: u8,
    proto: u8,
    src: u32,
    dst: u32,
) {
    let flags: u16 = if df { 0x4000 } else { 0 };
    h[0] = 0x45;
    h[1] = tos;
    put16(h, 2, total);
    put16(h, 4, id);
    put16(h, 6, flags);
    h[8] = ttl;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.to_be_bytes());
    h[16..20].copy_from_slice(&dst.to_be_bytes());
    let s = u64::from(base)
        + u64::from(tos)
        + u64::from(total)
        + u64::from(id)
        + u64::from(flags)
        + (u64::from(ttl) << 8);
    put16(h, 10, !crate::checksum::fold(s));
}

/// A TCP/UDP header's ports rewritten and its checksum adjusted by `delta`
/// (RFC 1624's `~m + m'` over the pseudo-header's addresses and the
/// ports, folded: the flow's, computed when it opened): the fast way of
/// [`l4_to4`] and [`l4_to6`] for a whole segment. A UDP datagram without a
/// checksum is not (`false`: the slow way computes one where it must).
#[inline(always)]
pub fn l4_delta(l4: &mut [u8], proto: u8, delta: u16, sport: u16, dport: u16) -> bool {
    let at = if proto == TCP { 16 } else { 6 };
    if l4.len() < at + 2 {
        return false;
    }
    let c = be16(l4, at);
    if proto == UDP && c == 0 {
        return false;
    }
    let c = crate::checksum::adjust(c, u32::from(delta));
    put16(l4, at, if proto == UDP && c == 0 { 0xffff } else { c });
    write_ports(l4, sport, dport);
    true
}

/// Writes an IPv6 header (40 bytes; flow label zero, RFC 7915 4.1).
pub fn write6(h: &mut [u8], tc: u8, payload: u16, next: u8, hop: u8, src: u128, dst: u128) {
    h[0] = 0x60 | tc >> 4;
    h[1] = tc << 4;
    h[2] = 0;
    h[3] = 0;
    put16(h, 4, payload);
    h[6] = next;
    h[7] = hop;
    h[8..24].copy_from_slice(&src.to_be_bytes());
    h[24..40].copy_from_slice(&dst.to_be_bytes());
}

/// Whether a translated IPv4 packet of `total` bytes is sent with Don't
/// Fragment set (RFC 7915 5.1: above 1,260 bytes).
#[inline]
pub fn df_for(total: usize) -> bool {
    total > 1260
}

/// The ICMPv6 type, code and parameter (MTU, pointer) of ICMPv4 error
/// `ty`/`code` with parameter word `rest` (RFC 7915 4.2), `None` for
/// one that is dropped. `mtu6` bounds a Packet Too Big's MTU: that of
/// the IPv6 link the error leaves by.
pub fn error4to6(ty: u8, code: u8, rest: u32, mtu6: u16) -> Option<(u8, u8, u32)> {
    Some(match (ty, code) {
        (3, 0 | 1 | 5..=8 | 11 | 12) => (1, 0, 0),
        (3, 9 | 10 | 13 | 15) => (1, 1, 0),
        (3, 2) => (4, 1, 6),
        (3, 3) => (1, 4, 0),
        (3, 4) => {
            // The MTU of the IPv4 hop, or (an old router's zero) the
            // plateau below the packet's; 20 bytes more as IPv6, never
            // more than the IPv6 link's.
            let m = rest & 0xffff;
            let m = if m == 0 { 1280 } else { m + 20 };
            (2, 0, m.clamp(1280, u32::from(mtu6)))
        }
        (11, c @ (0 | 1)) => (3, c, 0),
        (12, 0 | 2) => {
            let p = match rest >> 24 {
                0 => 0,
                1 => 1,
                2 | 3 => 4,
                8 => 7,
                9 => 6,
                12..=15 => 8,
                16..=19 => 24,
                _ => return None,
            };
            (4, 0, p)
        }
        _ => return None,
    })
}

/// The ICMPv4 type, code and parameter of ICMPv6 error `ty`/`code`
/// with parameter `rest` (RFC 7915 5.2), `None` for one that is dropped.
pub fn error6to4(ty: u8, code: u8, rest: u32) -> Option<(u8, u8, u32)> {
    Some(match (ty, code) {
        (1, 0 | 2 | 3) => (3, 1, 0),
        (1, 1) => (3, 10, 0),
        (1, 4) => (3, 3, 0),
        (2, 0) => (3, 4, rest.saturating_sub(20).min(0xffff)),
        (3, c @ (0 | 1)) => (11, c, 0),
        (4, 1) => (3, 2, 0),
        (4, 0) => {
            let p = match rest {
                0 | 1 => rest,
                4 | 5 => 2,
                6 => 9,
                7 => 8,
                8..=23 => 12,
                24..=39 => 16,
                _ => return None,
            };
            (12, 0, p << 24)
        }
        _ => return None,
    })
}

/// Translates the ICMPv4 error `l3` (IPv4 header `h` bytes, valid; its
/// quoted packet's flow translated as `inner`) into an ICMPv6 error in
/// `out` from `src` to `dst`, cut to 1,280 bytes: its length, or `None`
/// for an error that does not translate. `mtu6` is the IPv6 link's MTU.
pub fn error_to6(
    l3: &[u8],
    h: usize,
    src: u128,
    dst: u128,
    inner: &Rewrite<u128>,
    mtu6: u16,
    out: &mut [u8; MIN_MTU6],
) -> Option<usize> {
    let total = usize::from(be16(l3, 2)).min(l3.len());
    let icmp = l3.get(h..total)?;
    if icmp.len() < 8 + 20 {
        return None;
    }
    let rest = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
    let (ty, code, param) = error4to6(icmp[0], icmp[1], rest, mtu6)?;
    let q = &icmp[8..];
    let qh = usize::from(q[0] & 0x0f) * 4;
    if q[0] >> 4 != 4 || qh < 20 || q.len() < qh {
        return None;
    }
    let qlen = u32::from(be16(q, 2)).saturating_sub(qh as u32);
    let qproto = q[9];
    let (qs, qd) = ([q[12], q[13], q[14], q[15]], [q[16], q[17], q[18], q[19]]);
    // The quote's L4 bytes, as many as fit.
    let body = (q.len() - qh).min(MIN_MTU6 - 40 - 8 - 40);
    let (hdr, rest_out) = out.split_at_mut(48);
    let (qhdr, ql4) = rest_out.split_at_mut(40);
    ql4[..body].copy_from_slice(&q[qh..qh + body]);
    let proto6 = l4_to6(&mut ql4[..body], qproto, qlen, qs, qd, inner).unwrap_or(match qproto {
        ICMP => ICMPV6,
        p => p,
    });
    write6(
        qhdr,
        q[1],
        qlen.min(0xffff) as u16,
        proto6,
        q[8],
        inner.src,
        inner.dst,
    );
    let len = 48 + 40 + body;
    let tc = l3[1];
    write6(
        &mut hdr[..40],
        tc,
        (len - 40) as u16,
        ICMPV6,
        l3[8],
        src,
        dst,
    );
    hdr[40] = ty;
    hdr[41] = code;
    put16(hdr, 42, 0);
    hdr[44..48].copy_from_slice(&param.to_be_bytes());
    let c = !crate::checksum::fold(sum(
        &out[40..len],
        pseudo_v6(
            src.to_be_bytes(),
            dst.to_be_bytes(),
            ICMPV6,
            (len - 40) as u32,
        ),
    ));
    put16(out, 42, c);
    Some(len)
}

/// Translates the ICMPv6 error `l3` (upper layer at `off`; its quoted
/// packet's flow translated as `inner`) into an ICMPv4 error in `out`
/// from `src` to `dst`, cut to 576 bytes: its length, or `None`.
pub fn error_to4(
    l3: &[u8],
    off: usize,
    src: u32,
    dst: u32,
    inner: &Rewrite<u32>,
    out: &mut [u8; MIN_MTU6],
) -> Option<usize> {
    let end = (40 + usize::from(be16(l3, 4))).min(l3.len());
    let icmp = l3.get(off..end)?;
    if icmp.len() < 8 + 40 {
        return None;
    }
    let rest = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
    let (ty, code, param) = error6to4(icmp[0], icmp[1], rest)?;
    let q = &icmp[8..];
    if q[0] >> 4 != 6 {
        return None;
    }
    let qlen = u32::from(be16(q, 4));
    let qproto = q[6];
    let mut qs = [0u8; 16];
    let mut qd = [0u8; 16];
    qs.copy_from_slice(&q[8..24]);
    qd.copy_from_slice(&q[24..40]);
    let body = (q.len() - 40).min(MAX_ERROR4 - 20 - 8 - 20);
    let (hdr, rest_out) = out.split_at_mut(28);
    let (qhdr, ql4) = rest_out.split_at_mut(20);
    ql4[..body].copy_from_slice(&q[40..40 + body]);
    let proto4 = l4_to4(&mut ql4[..body], qproto, qlen, qs, qd, inner).unwrap_or(match qproto {
        ICMPV6 => ICMP,
        p => p,
    });
    let qtotal = (qlen + 20).min(0xffff) as u16;
    write4(
        qhdr,
        q[0] << 4 | q[1] >> 4,
        qtotal,
        0,
        df_for(usize::from(qtotal)),
        q[7],
        proto4,
        inner.src,
        inner.dst,
    );
    let len = 28 + 20 + body;
    write4(
        &mut hdr[..20],
        l3[0] << 4 | l3[1] >> 4,
        len as u16,
        0,
        false,
        l3[7],
        ICMP,
        src,
        dst,
    );
    hdr[20] = ty;
    hdr[21] = code;
    put16(hdr, 22, 0);
    hdr[24..28].copy_from_slice(&param.to_be_bytes());
    let c = checksum(&out[20..len]);
    put16(out, 22, c);
    Some(len)
}

#[cfg(test)]
mod tests;
