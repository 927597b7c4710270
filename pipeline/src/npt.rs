//! NPTv6 (RFC 6296): stateless, checksum-neutral IPv6 prefix translation.
//! A site's inside prefix is swapped for its outside prefix as packets
//! leave by an interface, and back as they come in, one to one, with no
//! state and no port rewriting; one 16-bit word outside the prefix is
//! adjusted so that the sum of the address's words, and with it every
//! checksum that covers the address (TCP, UDP, ICMPv6), is unchanged
//! (nftables' `snat ip6 prefix to` / `dnat ip6 prefix to`, ip6tables'
//! `SNPT`/`DNPT`).

use crate::prefix::{in6, mask6};

/// One interface's prefix translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Npt {
    /// The interface the outside prefix is on (a port or VLAN
    /// sub-interface).
    pub iface: u16,
    /// The inside prefix (address, length; at most 64).
    pub inside: (u128, u8),
    /// The outside prefix, of the inside one's length.
    pub outside: (u128, u8),
    /// Added to the adjusted word on the way out (one's complement): the
    /// inside prefix's sum less the outside one's.
    adj: u16,
}

/// One's complement sum of two 16-bit words.
fn add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The one's complement sum of the prefix's words (the bits past it zero).
fn prefix_sum((a, len): (u128, u8)) -> u16 {
    let p = (a & mask6(len)).to_be_bytes();
    p.chunks(2)
        .fold(0, |s, w| add(s, u16::from_be_bytes([w[0], w[1]])))
}

/// Why an address cannot be translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unmappable;

impl Npt {
    /// The translation of `inside` to `outside` on `iface`: both of one
    /// length, at most 64 bits (RFC 6296), else `None`.
    pub fn new(iface: u16, inside: (u128, u8), outside: (u128, u8)) -> Option<Npt> {
        if inside.1 != outside.1 || inside.1 > 64 {
            return None;
        }
        let m = mask6(inside.1);
        Some(Npt {
            iface,
            inside: (inside.0 & m, inside.1),
            outside: (outside.0 & m, outside.1),
            adj: add(prefix_sum(inside), !prefix_sum(outside)),
        })
    }

    /// Whether `a` is in the inside prefix.
    #[inline]
    pub fn is_inside(&self, a: u128) -> bool {
        in6(a, self.inside)
    }

    /// Whether `a` is in the outside prefix.
    #[inline]
    pub fn is_outside(&self, a: u128) -> bool {
        in6(a, self.outside)
    }

    /// The word adjusted in `a` (index 0..8): bits 48–63 for a prefix of
    /// /48 or shorter; past /48, the first word of the interface
    /// identifier that is not 0xFFFF (RFC 6296 3.7). `None`: the word is
    /// 0xFFFF or every candidate is, and the address is not translated
    /// (RFC 6296 3.5).
    fn word(&self, a: &[u8; 16]) -> Option<usize> {
        let w = |i: usize| u16::from_be_bytes([a[2 * i], a[2 * i + 1]]);
        if self.inside.1 <= 48 {
            return (w(3) != 0xffff).then_some(3);
        }
        (4..8).find(|&i| w(i) != 0xffff)
    }

    /// `a` with its top bits swapped for `to`'s and the word adjusted by
    /// `adj`.
    fn map(&self, a: u128, to: u128, adj: u16) -> Result<u128, Unmappable> {
        let m = mask6(self.inside.1);
        let mut b = ((a & !m) | to).to_be_bytes();
        let i = self.word(&b).ok_or(Unmappable)?;
        let mut v = add(u16::from_be_bytes([b[2 * i], b[2 * i + 1]]), adj);
        if v == 0xffff {
            v = 0;
        }
        b[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        Ok(u128::from_be_bytes(b))
    }

    /// An inside address as it appears outside.
    pub fn out(&self, a: u128) -> Result<u128, Unmappable> {
        self.map(a, self.outside.0, self.adj)
    }

    /// An outside address as it is inside.
    pub fn back(&self, a: u128) -> Result<u128, Unmappable> {
        self.map(a, self.inside.0, !self.adj)
    }
}

/// Where in an Ethernet frame (untagged: the gateway's packets) an IPv6
/// packet's addresses are, and those of the packet an ICMPv6 error
/// quotes.
const SRC: usize = 14 + 8;
const DST: usize = 14 + 24;

fn read(b: &[u8], at: usize) -> Option<u128> {
    Some(u128::from_be_bytes(b.get(at..at + 16)?.try_into().ok()?))
}

fn write(b: &mut [u8], at: usize, a: u128) {
    b[at..at + 16].copy_from_slice(&a.to_be_bytes());
}

/// The offset of the packet an ICMPv6 error in frame `b` quotes (its
/// ICMPv6 header right after the IPv6 header: `l4` is where the gateway
/// found it), if it is one.
fn quoted(b: &[u8], proto: u8, l4: usize) -> Option<usize> {
    (proto == 58 && *b.get(14 + l4)? < 128).then_some(14 + l4 + 8)
}

/// Translates a packet received on an interface with a prefix
/// translation `rules` names: its destination (in an outside prefix) back
/// inside, and the source of the packet an ICMPv6 error quotes (what
/// went out, translated). Nothing changes for an address in no outside
/// prefix.
pub fn inbound(
    rules: &[Npt],
    in_if: u16,
    b: &mut [u8],
    proto: u8,
    l4: usize,
) -> Result<(), Unmappable> {
    for r in rules.iter().filter(|r| r.iface == in_if) {
        if let Some(d) = read(b, DST).filter(|&d| r.is_outside(d)) {
            write(b, DST, r.back(d)?);
        }
        if let Some(q) = quoted(b, proto, l4) {
            if let Some(s) = read(b, q + 8).filter(|&s| r.is_outside(s)) {
                write(b, q + 8, r.back(s)?);
            }
        }
    }
    Ok(())
}

/// Translates a packet leaving by an interface with a prefix translation:
/// its source (in an inside prefix) to the outside one, and the
/// destination of the packet an ICMPv6 error quotes.
pub fn outbound(
    rules: &[Npt],
    out_if: u16,
    b: &mut [u8],
    proto: u8,
    l4: usize,
) -> Result<(), Unmappable> {
    for r in rules.iter().filter(|r| r.iface == out_if) {
        if let Some(s) = read(b, SRC).filter(|&s| r.is_inside(s)) {
            write(b, SRC, r.out(s)?);
        }
        if let Some(q) = quoted(b, proto, l4) {
            if let Some(d) = read(b, q + 24).filter(|&d| r.is_inside(d)) {
                write(b, q + 24, r.out(d)?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn a(s: &str) -> u128 {
        u128::from(s.parse::<Ipv6Addr>().unwrap())
    }

    fn sum(x: u128) -> u16 {
        x.to_be_bytes()
            .chunks(2)
            .fold(0, |s, w| add(s, u16::from_be_bytes([w[0], w[1]])))
    }

    /// RFC 6296's example (3.2): FD01:0203:0405:0001::1234 inside
    /// FD01:0203:0405::/48 is 2001:0DB8:0001:D550::1234 outside
    /// 2001:0DB8:0001::/48.
    #[test]
    fn the_rfcs_example() {
        let n = Npt::new(0, (a("fd01:203:405::"), 48), (a("2001:db8:1::"), 48)).unwrap();
        let out = n.out(a("fd01:203:405:1::1234")).unwrap();
        assert_eq!(out, a("2001:db8:1:d550::1234"));
        assert_eq!(n.back(out).unwrap(), a("fd01:203:405:1::1234"));
    }

    /// Any address of either prefix goes there and back, its words' sum
    /// unchanged, for prefixes of /32 to /64.
    #[test]
    fn translation_is_checksum_neutral_and_reversible() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in [32u8, 40, 47, 48, 49, 56, 60, 64] {
            let n = Npt::new(
                7,
                (a("fd00:aaaa:bbbb:cccc::"), len),
                (a("2001:db8:1234:5678::"), len),
            )
            .unwrap();
            for _ in 0..2000 {
                let host = (u128::from(next()) << 64 | u128::from(next())) & !mask6(len);
                let inside = n.inside.0 | host;
                let Ok(out) = n.out(inside) else {
                    continue;
                };
                assert!(n.is_outside(out), "/{len}");
                assert_eq!(sum(out), sum(inside), "/{len}: checksum neutral");
                assert_eq!(n.back(out).unwrap(), inside, "/{len}: and back");
            }
        }
        // The adjusted word all ones: not translated.
        let n = Npt::new(0, (a("fd01::"), 48), (a("2001:db8::"), 48)).unwrap();
        assert_eq!(n.out(a("fd01:0:0:ffff::1")), Err(Unmappable));
        // Lengths that differ or exceed /64: refused.
        assert!(Npt::new(0, (a("fd01::"), 48), (a("2001:db8::"), 56)).is_none());
        assert!(Npt::new(0, (a("fd01::"), 72), (a("2001:db8::"), 72)).is_none());
    }

    /// An Ethernet + IPv6 + ICMPv6 frame from `src` to `dst` of `ty`
    /// (an error quotes `inner`), its checksum valid.
    fn icmp6(src: u128, dst: u128, ty: u8, inner: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let len = 8 + inner.len();
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        ip[6] = 58;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src.to_be_bytes());
        ip[24..40].copy_from_slice(&dst.to_be_bytes());
        let mut m = vec![ty, 0, 0, 0, 0, 0, 0x05, 0x00];
        m.extend_from_slice(inner);
        let ph = crate::checksum::pseudo_v6(src.to_be_bytes(), dst.to_be_bytes(), 58, len as u32);
        let c = !crate::checksum::fold(crate::checksum::sum(&m, ph));
        m[2..4].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&m);
        f
    }

    fn icmp6_ok(f: &[u8]) -> bool {
        let ph = crate::checksum::pseudo_v6(
            f[22..38].try_into().unwrap(),
            f[38..54].try_into().unwrap(),
            58,
            (f.len() - 54) as u32,
        );
        crate::checksum::fold(crate::checksum::sum(&f[54..], ph)) == 0xffff
    }

    /// A Packet Too Big from the far side about a packet the site sent
    /// (quoting its translated source) comes back with both the error's
    /// destination and the quoted source inside; the same error sent out
    /// (a site's router about a packet from outside) has the quoted
    /// destination translated out. The ICMPv6 checksum, untouched, still
    /// verifies: the translation is checksum neutral.
    #[test]
    fn icmpv6_errors_and_their_quotes_are_translated() {
        let n = Npt::new(1, (a("fd01:203:405::"), 48), (a("2001:db8:1::"), 48)).unwrap();
        let (inside, outside) = (a("fd01:203:405:1::2"), a("2001:db8:1:d550::2"));
        let far = a("2001:db8:ff::2");
        // The quoted packet: an IPv6 header from the site (translated) to
        // the far host, and 8 bytes of UDP.
        let quote = |src: u128, dst: u128| {
            let mut q = vec![0u8; 48];
            q[0] = 0x60;
            q[4..6].copy_from_slice(&8u16.to_be_bytes());
            q[6] = 17;
            q[7] = 64;
            q[8..24].copy_from_slice(&src.to_be_bytes());
            q[24..40].copy_from_slice(&dst.to_be_bytes());
            q
        };
        let mut f = icmp6(far, outside, 2, &quote(outside, far));
        let before = f[56..58].to_vec();
        inbound(&[n], 1, &mut f, 58, 40).unwrap();
        assert_eq!(read(&f, DST), Some(inside));
        assert_eq!(read(&f, 14 + 48 + 8), Some(inside), "the quoted source");
        assert_eq!(f[56..58], before[..], "checksum untouched");
        assert!(icmp6_ok(&f));
        // Not on the translating interface: left alone.
        let mut g = icmp6(far, outside, 2, &quote(outside, far));
        let was = g.clone();
        inbound(&[n], 0, &mut g, 58, 40).unwrap();
        assert_eq!(g, was);
        // Out: the source and the quoted destination.
        let mut f = icmp6(inside, far, 1, &quote(far, inside));
        outbound(&[n], 1, &mut f, 58, 40).unwrap();
        assert_eq!(read(&f, SRC), Some(outside));
        assert_eq!(
            read(&f, 14 + 48 + 24),
            Some(outside),
            "the quoted destination"
        );
        assert!(icmp6_ok(&f));
        // An echo request (not an error): only its own addresses.
        let mut f = icmp6(inside, far, 128, &quote(far, inside));
        outbound(&[n], 1, &mut f, 58, 40).unwrap();
        assert_eq!(read(&f, SRC), Some(outside));
        assert_eq!(read(&f, 14 + 48 + 24), Some(inside), "payload, not a quote");
        assert!(icmp6_ok(&f));
    }
}
